//! The whole committed golden suite under every value of every simulator `Numerics` setting
//! (`trnconf::numerics::every_setting`, one setting changed from the default at a time; the
//! default is the `golden` test itself). Verdicts may change with a setting — that is what the
//! settings are for (docs/numerics.md) — but no case may panic, and every case must get a verdict.
//! Prints each setting's summary (the verdicts it changes) and its time.

use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use trnconf::case::GoldenIndex;
use trnconf::executor::SimExecutor;
use trnconf::expect::Expectations;
use trnconf::runner::{self, CaseResult, Summary};
use trnsim::{ExecConfig, TargetName};

#[test]
fn every_numerics_setting_runs_the_whole_suite_without_panicking() {
    let index = GoldenIndex::load(&trnconf::default_golden_dir()).expect("the committed goldens");
    let expectations = Expectations::load(&trnconf::default_expectations_path()).expect("expectations");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut panicked = Vec::new();
    for (name, numerics) in trnconf::numerics::every_setting().into_iter().skip(1) {
        let start = std::time::Instant::now();
        let config = ExecConfig {
            numerics,
            ..ExecConfig::default()
        };
        let executor = SimExecutor::with_config(TargetName::Trn1, config);
        let next = AtomicUsize::new(0);
        let results: Mutex<Vec<CaseResult>> = Mutex::new(Vec::new());
        let panics: Mutex<Vec<String>> = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(entry) = index.cases.get(i) else { break };
                        let run = std::panic::catch_unwind(AssertUnwindSafe(|| {
                            runner::run_case(&index.dir, entry, &expectations, &executor)
                        }));
                        match run {
                            Ok(r) => results.lock().unwrap().push(r),
                            Err(_) => panics.lock().unwrap().push(entry.id.clone()),
                        }
                    }
                });
            }
        });
        let results = results.into_inner().unwrap();
        let panics = panics.into_inner().unwrap();
        let s = Summary::of(&results);
        eprintln!(
            "{name}: {} cases in {:.1} s: {} passed, {} failed, {} xfailed, {} xpassed, {} skipped, {} errors, {} panicked",
            s.total,
            start.elapsed().as_secs_f64(),
            s.passed,
            s.failed,
            s.xfailed,
            s.xpassed,
            s.skipped,
            s.errors,
            panics.len()
        );
        assert_eq!(results.len() + panics.len(), index.cases.len(), "{name}");
        panicked.extend(panics.into_iter().map(|id| format!("{id} under --numerics {name}")));
    }
    assert!(
        panicked.is_empty(),
        "{} case(s) panicked: {panicked:#?}",
        panicked.len()
    );
}

/// The accuracy rule on the accumulation cases (f32 `stress` cases whose outputs carry a `dot` or
/// `sum` bound: long mm/bmm/addmm/convolution/convolution_backward contractions and summations;
/// not the edge-value ones):
/// the simulator passes them (plain or `accurate`); a device whose every bounded element is off
/// by a quarter of its bound still does; one off by 4× the bound fails every one of them — the
/// CPU-relative part of the rule and `assert_close` do not absorb it (docs/numerics.md, (f),
/// "Generalisation"). `TRNCONF_GOLDEN=<dir>` runs it on another corpus (e.g. `generate.py --large
/// --seed N`), as the generalisation workflow does.
#[test]
fn an_error_at_four_times_the_bound_fails_every_accumulation_case() {
    use trnconf::accuracy::inject::InjectBoundError;
    use trnconf::accuracy::{Bound, Oracle};
    use trnconf::case::Case;
    use trnconf::expect::Status;

    let dir = std::env::var_os("TRNCONF_GOLDEN").map_or_else(trnconf::default_golden_dir, Into::into);
    let index = GoldenIndex::load(&dir).expect("the golden index");
    let expectations = Expectations::load(&trnconf::default_expectations_path()).expect("expectations");
    let accumulation: Vec<_> = index
        .cases
        .iter()
        .filter(|e| e.dtype == "f32" && e.id.contains("::stress_"))
        .filter(|e| {
            let case = Case::load_entry(&index.dir, e).expect("a readable case");
            // Edge-value cases (±inf, NaN, values near the f32 maximum) test specials, not the
            // accumulation: their Σ|x| — and bound — overflow the range.
            let tame = |v: &[f64]| v.iter().all(|x| x.abs() < 1e30);
            case.oracles.values().any(|o| {
                matches!(o, Oracle::Values { values, bound: Bound::Dot { scale, .. } | Bound::Sum { scale, .. } }
                    if tame(values) && tame(scale))
            })
        })
        .collect();
    assert!(
        accumulation.len() >= 10,
        "only {} accumulation cases",
        accumulation.len()
    );
    let sim = || SimExecutor::new(TargetName::Trn1);
    let mut wrong = Vec::new();
    for entry in &accumulation {
        let plain = runner::run_case(&index.dir, entry, &expectations, &sim());
        let quarter = InjectBoundError {
            inner: sim(),
            factor: 0.25,
        };
        let quarter = runner::run_case(&index.dir, entry, &expectations, &quarter);
        let four = InjectBoundError {
            inner: sim(),
            factor: 4.0,
        };
        let four = runner::run_case(&index.dir, entry, &expectations, &four);
        let ok = |s: Status| matches!(s, Status::Pass | Status::Accurate);
        eprintln!(
            "{}: {} / quarter {} / 4x {}",
            entry.id,
            plain.status.name(),
            quarter.status.name(),
            four.status.name()
        );
        if !ok(plain.status) || !ok(quarter.status) || four.status != Status::Fail {
            wrong.push(format!(
                "{}: plain {}, 0.25x {}, 4x {}: {}",
                entry.id,
                plain.status.name(),
                quarter.status.name(),
                four.status.name(),
                quarter.message.lines().next().unwrap_or("")
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
