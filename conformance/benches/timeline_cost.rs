//! What the timeline and the race detector cost: every committed golden case is loaded, lowered
//! and executed twice in the same run — with `ExecConfig { timeline: true, race_check: true }`
//! (the default) and with both off — alternating which goes first from case to case. Prints the
//! totals and the overhead as a share of the suite's wall time (load + lower + execute with the
//! detector on; comparison against the golden is not included, it does not change with the
//! setting). Recorded in docs/performance.md.
//!
//! `cargo bench -p trnconf --bench timeline_cost [-- FILTER]` (FILTER as `trnconf run --filter`).

use std::time::{Duration, Instant};
use trnconf::case::{Case, GoldenIndex};
use trnsim::{ExecConfig, Executor, TargetName};

fn main() {
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_default();
    let index = GoldenIndex::load(&trnconf::default_golden_dir()).expect("committed goldens");
    let on = Executor::with_config(TargetName::Trn1, ExecConfig::default());
    let off = Executor::with_config(
        TargetName::Trn1,
        ExecConfig {
            timeline: false,
            race_check: false,
            ..ExecConfig::default()
        },
    );
    let (mut prep, mut t_on, mut t_off) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let (mut cases, mut instructions, mut skipped) = (0usize, 0usize, 0usize);
    let mut worst: Vec<(f64, String)> = Vec::new();
    for (k, entry) in index.cases.iter().enumerate() {
        if !trnconf::runner::filter_matches(&filter, &entry.id) {
            continue;
        }
        let t0 = Instant::now();
        let Ok(case) = Case::load_entry(&index.dir, entry) else {
            skipped += 1;
            continue;
        };
        let Ok(lowered) = trnconf::lower::lower(&case, TargetName::Trn1) else {
            skipped += 1;
            continue;
        };
        let Ok(inputs) = trnconf::runner::device_inputs(&case, &lowered.program) else {
            skipped += 1;
            continue;
        };
        let p = &lowered.program;
        let time = |ex: &Executor| {
            let t = Instant::now();
            let ok = ex.run(p, &inputs).is_ok();
            (t.elapsed(), ok)
        };
        let ((a, ok_a), (b, ok_b)) = if k % 2 == 0 {
            let a = time(&on);
            (a, time(&off))
        } else {
            let b = time(&off);
            (time(&on), b)
        };
        prep += t0.elapsed() - a - b;
        if ok_a != ok_b {
            eprintln!("{}: ran {} with the detector, {} without", entry.id, ok_a, ok_b);
        }
        t_on += a;
        t_off += b;
        cases += 1;
        instructions += p.instructions.len();
        worst.push((a.as_secs_f64() - b.as_secs_f64(), entry.id.clone()));
    }
    worst.sort_by(|x, y| y.0.total_cmp(&x.0));
    let suite = prep + t_on;
    let extra = t_on.saturating_sub(t_off);
    println!("cases {cases} ({skipped} not lowerable or unreadable), instructions {instructions}");
    println!("load + lower        {:>9.3} s", prep.as_secs_f64());
    println!("execute, on         {:>9.3} s", t_on.as_secs_f64());
    println!("execute, off        {:>9.3} s", t_off.as_secs_f64());
    println!(
        "timeline + race detector: {:.3} s = {:.1} % of execution, {:.1} % of the suite's wall time",
        extra.as_secs_f64(),
        100.0 * extra.as_secs_f64() / t_off.as_secs_f64().max(1e-9),
        100.0 * extra.as_secs_f64() / suite.as_secs_f64().max(1e-9)
    );
    println!("largest per-case costs:");
    for (d, id) in worst.iter().take(5) {
        println!("  {:>8.1} ms  {id}", d * 1000.0);
    }
}
