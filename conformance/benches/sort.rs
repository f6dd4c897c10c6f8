//! The 8,000-element f32 `sort` (issue 12): lowering and simulation wall time, next to a native
//! Rust sort of the same values (value + index, NaN-last like PyTorch) measured in the same run,
//! plus the program's instruction count, the simulator's estimated device time (timeline
//! makespan) with its per-engine busy time, and the roofline efficiency (bound / makespan).
//!
//! `cargo bench -p trnconf --bench sort`. Harness: one warm-up, then lowering, simulation and the
//! baseline alternately, at least 3 and at most 11 rounds within ~20 s; medians. Figures are
//! recorded in docs/performance.md ("Sort").

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use trnconf::case::{OpCall, TensorMeta, Value};
use trnconf::lower::{LowerOptions, LowerRequest, lower_request_with_options};
use trnconf::tensor::TorchDType;
use trnsim::{DType, Engine, Executor, HostTensor, TargetName};

const N: usize = 8000;

/// Deterministic values in [−1, 1) with a few duplicates (so ties are exercised).
fn values() -> Vec<f32> {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    (0..N)
        .map(|i| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let v = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
            if i % 97 == 0 { 0.5 } else { v }
        })
        .collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let x = values();
    let tensors = BTreeMap::from([
        ("input.0".to_string(), TensorMeta::contiguous(TorchDType::F32, &[N])),
        ("output.0".to_string(), TensorMeta::contiguous(TorchDType::F32, &[N])),
        ("output.1".to_string(), TensorMeta::contiguous(TorchDType::I64, &[N])),
    ]);
    let call = OpCall {
        args: vec![Value::Tensor("input.0".into())],
        kwargs: BTreeMap::new(),
    };
    let outputs = vec![Value::Tensor("output.0".into()), Value::Tensor("output.1".into())];
    let inputs = BTreeMap::from([("input.0".to_string(), HostTensor::from_f32_as(DType::F32, &[N], &x))]);
    let slots = trnconf::lower::OutputSlot::of(&outputs);
    let req = LowerRequest {
        op: "sort",
        call: &call,
        tensors: &tensors,
        outputs: &slots,
    };
    let lower = || lower_request_with_options(&req, TargetName::Trn1, &LowerOptions::default()).expect("lowers");
    let native = || {
        let mut idx: Vec<u32> = (0..N as u32).collect();
        idx.sort_by(|&a, &b| x[a as usize].total_cmp(&x[b as usize]));
        let vals: Vec<f32> = idx.iter().map(|&i| x[i as usize]).collect();
        (vals, idx)
    };

    // Warm-up, and a check that the simulated sort is the native one (ties may permute indices).
    let lowered = lower();
    let program = lowered.program;
    let run = Executor::new(TargetName::Trn1).run(&program, &inputs).expect("runs");
    let (want, _) = native();
    assert_eq!(run.outputs["output.0"].to_f32(), want, "the simulated sort sorts");

    let (mut tl, mut ts, mut tb) = (vec![], vec![], vec![]);
    let start = Instant::now();
    while tl.len() < 11 && (tl.len() < 3 || start.elapsed() < Duration::from_secs(20)) {
        let t = Instant::now();
        let l = std::hint::black_box(lower());
        tl.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(Executor::new(TargetName::Trn1).run(&l.program, &inputs).expect("runs"));
        ts.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(native());
        tb.push(t.elapsed());
    }
    // The same program with the timeline and the race detector off, to show what they cost here
    // (the baseline predates both).
    let bare = Executor::with_config(
        TargetName::Trn1,
        trnsim::ExecConfig {
            timeline: false,
            race_check: false,
            ..Default::default()
        },
    );
    let mut tbare = vec![];
    for _ in 0..ts.len() {
        let t = Instant::now();
        std::hint::black_box(bare.run(&program, &inputs).expect("runs"));
        tbare.push(t.elapsed());
    }
    let rounds = ts.len();
    let (l, s, b) = (median(tl), median(ts), median(tb));
    let st = &run.stats;
    let bare_ms = ms(median(tbare));
    println!("sort f32 [{N}] (Trn1), {rounds} rounds");
    println!("| lowering ms | simulation ms | native sort ms | sim / native | instructions |");
    println!("|---|---|---|---|---|");
    println!(
        "| {:.2} | {:.2} | {:.3} | {:.0}× | {} |",
        ms(l),
        ms(s),
        ms(b),
        s.as_secs_f64() / b.as_secs_f64(),
        program.instructions.len()
    );
    let est = |e: Engine| match e {
        Engine::Tensor => st.est_ns.tensor,
        Engine::Vector => st.est_ns.vector,
        Engine::Scalar => st.est_ns.scalar,
        Engine::Gpsimd => st.est_ns.gpsimd,
        Engine::Dma => st.est_ns.dma,
    };
    let engines = [
        Engine::Tensor,
        Engine::Vector,
        Engine::Scalar,
        Engine::Gpsimd,
        Engine::Dma,
    ];
    println!(
        "est. busy µs (Tensor / Vector / Scalar / GpSimd / DMA): {}; max {:.1} µs",
        engines
            .iter()
            .map(|&e| format!("{:.1}", est(e) / 1e3))
            .collect::<Vec<_>>()
            .join(" / "),
        engines.iter().map(|&e| est(e)).fold(0.0, f64::max) / 1e3
    );
    println!("simulation without timeline and race detector: {bare_ms:.2} ms");
    // The device time is the timeline's makespan (engines and DMA queues overlap), not a sum.
    let makespan_us = st.timeline.makespan_ns / 1e3;
    let bound = trnconf::roofline::bound("sort", &call, &tensors, &TargetName::Trn1.params());
    let eff = trnconf::roofline::efficiency(bound.ns(), st.timeline.makespan_ns)
        .expect("estimate at or above the roofline bound")
        .unwrap_or(0.0);
    println!(
        "est. device time (makespan): {makespan_us:.1} µs; roofline bound {:.2} µs ({}), efficiency {:.1} %",
        bound.ns() / 1e3,
        bound.limiter().name(),
        100.0 * eff
    );
    // The recorded baseline (docs/performance.md, "Sort"): its busiest engine, VectorE, was busy
    // 14 593 µs, which no schedule can beat, so its makespan was at least that.
    const BASELINE_VECTOR_BUSY_US: f64 = 14_593.0;
    println!(
        "vs the recorded baseline's makespan (≥ {BASELINE_VECTOR_BUSY_US} µs): ≥ {:.0}× lower",
        BASELINE_VECTOR_BUSY_US / makespan_us
    );
}
