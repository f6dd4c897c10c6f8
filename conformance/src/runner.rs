//! The one runner both front ends (the libtest-mimic suite and the `trnconf` binary) use:
//! load case → a [`Backend`] runs it → compare → apply expectations → [`CaseResult`].
//!
//! Every failure is a per-case result naming the file and the reason; the rest of the run goes on.
//! The runner knows backends, comparison and expectations — not engines, lowering or kernels
//! (crate::backend).

pub use crate::backend::lowering::{
    DeviceOutputs, check_compute_work, device_inputs, from_device, host_outputs, to_device,
};
use crate::backend::{Backend, Unrun};
use crate::case::{Case, GoldenIndex, IndexEntry};
use crate::compare::{self, ActualOutputs};
use crate::expect::{self, Expectations, Outcome, Status};
pub use crate::results::{BackendResult, BusyUs, CaseResult, Summary};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// What happened before expectations were applied.
struct Raw {
    outcome: Outcome,
    message: String,
    /// The typed error the run ended in, if it ended in one (expectations may require it).
    error: Option<expect::ErrorKind>,
}

fn raw(outcome: Outcome, message: impl Into<String>) -> Raw {
    Raw {
        outcome,
        message: message.into(),
        error: None,
    }
}

/// Runs one case of `index` on `backend`.
pub fn run_case(
    golden_dir: &Path,
    entry: &IndexEntry,
    expectations: &Expectations,
    backend: &dyn Backend,
) -> CaseResult {
    let start = Instant::now();
    let mut result = CaseResult::new(entry);
    // A bad file is an error whatever the expectations say: they are about how an op behaves,
    // never about corrupt goldens. Skipped cases are loaded too, as a corruption check.
    match Case::load_entry(golden_dir, entry) {
        Ok(case) => finish_case(&case, expectations, backend, &mut result),
        Err(e) => result.message = e.to_string(),
    }
    result.wall_time = start.elapsed();
    result.wall_ms = result.wall_time.as_secs_f64() * 1e3;
    result
}

/// Runs a case already loaded (its `id` names the result): what [`run_case`] does after loading.
pub fn run_loaded_case(case: &Case, expectations: &Expectations, backend: &dyn Backend) -> CaseResult {
    let start = Instant::now();
    let mut result = CaseResult::new(&IndexEntry {
        id: case.id.clone(),
        op: case.op.clone(),
        dtype: case.dtype.clone(),
        source: case.provenance.source.clone(),
        file: String::new(),
    });
    finish_case(case, expectations, backend, &mut result);
    result.wall_time = start.elapsed();
    result.wall_ms = result.wall_time.as_secs_f64() * 1e3;
    result
}

fn finish_case(case: &Case, expectations: &Expectations, backend: &dyn Backend, result: &mut CaseResult) {
    // Entries select cases by what they are (op, dtype, call properties), never by id.
    let facts = expect::CaseFacts::of(case)
        .on(backend.backend_target())
        .native_int64(backend.backend_native_int64());
    let expectation = match expectations.lookup(&case.id, &facts) {
        Ok(e) => e,
        Err(e) => {
            result.message = e.to_string();
            return;
        }
    };
    result.expectation = expectation.map(|e| e.describe());
    let outcome = if expectation.is_some_and(|e| e.status == expect::ExpectedStatus::Skip) {
        raw(Outcome::Pass, "")
    } else {
        match run_and_compare(case, backend, result) {
            Ok(r) => r,
            // A missing capability: skipped, whatever the expectation says.
            Err(why) => {
                result.status = Status::Skip;
                result.message = format!("unsupported: {why}");
                return;
            }
        }
    };
    let (status, note) = expect::resolve(outcome.outcome, outcome.error, expectation);
    result.status = status;
    result.message = match (note.is_empty(), outcome.message.is_empty()) {
        (true, _) => outcome.message,
        (false, true) => note,
        (false, false) => format!("{note}\n{}", outcome.message),
    };
    // An estimate below the roofline bound is a cost-model bug: loud, whatever was expected.
    if let Some(bug) = crate::roofline::violation(result.bound_us, result.est_us) {
        result.status = Status::Error;
        result.message = format!("{bug}\n{}", result.message);
    }
}

/// Runs a loaded case on the backend (twice when the case checks determinism) and compares
/// what it produced. `Err`: the backend cannot run the case here (the reason; it is skipped).
fn run_and_compare(case: &Case, backend: &dyn Backend, result: &mut CaseResult) -> Result<Raw, String> {
    let unrun = |u: Unrun| -> Result<Raw, String> {
        match u {
            Unrun::NotLowered(m) => Ok(raw(Outcome::NotLowered, m)),
            Unrun::NotProvided(m) => Ok(raw(Outcome::NotProvided, m)),
            Unrun::Unsupported(m) => Err(m),
            Unrun::Fail(m) => Ok(raw(Outcome::Fail, m)),
            Unrun::Error(m) => Ok(raw(Outcome::Error, m)),
            Unrun::Refused(kind, m) => Ok(Raw {
                error: Some(kind),
                ..raw(Outcome::Error, m)
            }),
        }
    };
    let produced = match backend.run(case) {
        Ok(p) => p,
        Err(u) => return unrun(u),
    };
    result.instructions = produced.instructions;
    if let Some(stats) = &produced.stats {
        result.est_us = Some(stats.timeline.makespan_ns / 1000.0);
        result.busy_us = Some(BusyUs::of(stats));
        let bound = crate::roofline::bound(
            &case.op,
            &case.call,
            &case.tensor_meta,
            &backend.backend_target().params(),
        );
        if bound.ns() > 0.0 {
            result.bound_us = Some(bound.ns() / 1000.0);
            result.limiter = Some(bound.limiter());
            // Err (estimate below the bound) is reported by finish_case as an error.
            result.efficiency = crate::roofline::efficiency(bound.ns(), stats.timeline.makespan_ns)
                .ok()
                .flatten();
        }
    }
    result.backends = produced.backends;
    let with_note = |m: String| match (produced.note.is_empty(), m.is_empty()) {
        (true, _) => m,
        (false, true) => produced.note.clone(),
        (false, false) => format!("{}: {m}", produced.note),
    };
    let mut actual = ActualOutputs {
        tensors: produced.tensors,
        values: produced.values,
        rerun: None,
        other_seeds: Vec::new(),
    };
    if let crate::case::Check::Properties { props } = &case.check
        && props.deterministic == Some(true)
    {
        match backend.run(case) {
            Ok(again) => actual.rerun = Some(again.tensors),
            Err(u) => {
                let m = u.into_message();
                return Ok(raw(Outcome::Error, with_note(format!("second run: {m}"))));
            }
        }
        // A backend that seeds its generator from the case also runs the case under other
        // seeds: different seeds must give different streams, and the statistics are pooled
        // (compare/rng.rs).
        if let Some(seed) = produced.rng_seed {
            let n = case
                .output_tensor_names()
                .first()
                .and_then(|o| actual.tensors.get(*o))
                .map_or(0, |t| t.numel());
            for k in 1..=crate::compare::rng::other_seed_count(&case.op, n) {
                let mut reseeded = case.clone();
                reseeded.provenance.seed = Some(crate::compare::rng::other_seed(seed, k) as u64);
                match backend.run(&reseeded) {
                    Ok(p) => actual.other_seeds.push(p.tensors),
                    Err(u) => {
                        let m = u.into_message();
                        return Ok(raw(Outcome::Error, with_note(format!("run under another seed: {m}"))));
                    }
                }
            }
        }
    }
    let cmp = compare::compare_case(case, &actual);
    result.metrics = cmp.outputs;
    Ok(if cmp.accurate {
        raw(Outcome::Accurate, with_note(cmp.message))
    } else if cmp.passed {
        raw(Outcome::Pass, with_note(String::new()))
    } else {
        raw(Outcome::Fail, with_note(cmp.message))
    })
}

// ---------------------------------------------------------------------------------------------
// Whole runs

/// Whether a case id matches a filter: a glob when it has `*`/`?`, else a substring.
pub fn filter_matches(filter: &str, id: &str) -> bool {
    if filter.contains(['*', '?']) {
        expect::glob_match(filter, id)
    } else {
        id.contains(filter)
    }
}

/// Runs the selected cases of an index on `threads` threads; results in index order.
pub fn run_cases(
    index: &GoldenIndex,
    entries: &[&IndexEntry],
    expectations: &Expectations,
    backend: &dyn Backend,
    threads: usize,
) -> Vec<CaseResult> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<CaseResult>>> =
        entries.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(entry) = entries.get(i) else { break };
                    let r = run_case(&index.dir, entry, expectations, backend);
                    *slots[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                }
            });
        }
    });
    slots
        .into_iter()
        .filter_map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
        .collect()
}

/// Runs the selected cases on a rayon pool of `jobs` threads, calling `on_result` as each case
/// finishes (in completion order: for progress and for appending to a partial results file).
/// The returned results are sorted by case id, so the output does not depend on `jobs`.
pub fn run_cases_streaming(
    golden_dir: &Path,
    entries: &[&IndexEntry],
    expectations: &Expectations,
    backend: &dyn Backend,
    jobs: usize,
    on_result: &(dyn Fn(&CaseResult) + Sync),
) -> Vec<CaseResult> {
    use rayon::prelude::*;
    let work = || -> Vec<CaseResult> {
        entries
            .par_iter()
            .map(|entry| {
                let r = run_case(golden_dir, entry, expectations, backend);
                on_result(&r);
                r
            })
            .collect()
    };
    let mut results = match rayon::ThreadPoolBuilder::new().num_threads(jobs.max(1)).build() {
        Ok(pool) => pool.install(work),
        // No threads to be had: run on this one.
        Err(_) => entries
            .iter()
            .map(|entry| {
                let r = run_case(golden_dir, entry, expectations, backend);
                on_result(&r);
                r
            })
            .collect(),
    };
    results.sort_by(|a, b| a.id.cmp(&b.id));
    results
}

/// The JSON report written by `trnconf run --json`.
#[derive(Clone, Debug, Serialize)]
pub struct Report<'a> {
    pub executor: String,
    pub golden: String,
    pub summary: Summary,
    pub cases: &'a [CaseResult],
}

#[cfg(test)]
mod tamper;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::{Check, Properties, Value};
    use crate::executor::SimExecutor;
    use crate::fixture::{CaseBuilder, TempDir, write_golden};
    use crate::tensor::Tensor;
    use crate::tensor::TorchDType::*;
    use crate::{lower, ops};
    use trnsim::{DType, HbmRole, HostTensor, Program};

    fn run_all(dir: &Path, cases: &[CaseBuilder], expectations: &Expectations) -> Vec<CaseResult> {
        write_golden(dir, cases);
        let index = GoldenIndex::load(dir).unwrap();
        let entries: Vec<&IndexEntry> = index.cases.iter().collect();
        run_cases(
            &index,
            &entries,
            expectations,
            &SimExecutor::new(trnsim::TargetName::Trn1),
            2,
        )
    }

    #[test]
    fn int64_boundary() {
        let t = Tensor::from_f64(I64, &[2], &[-5.0, 7.0]);
        let h = to_device("input.0", &t, DType::I32).unwrap();
        assert_eq!(h.data, [(-5i32).to_le_bytes(), 7i32.to_le_bytes()].concat());
        let back = from_device("o", &h, I64).unwrap();
        assert_eq!(back, t);
        let big = Tensor::from_f64(I64, &[2], &[1.0, 3e9]);
        let e = to_device("input.0", &big, DType::I32).unwrap_err();
        assert!(e.contains("3000000000") && e.contains("(1,)"), "{e}");
        // complex64 crosses as its real view: the same bytes, shape + [2].
        let c = Tensor::from_f64(C64, &[2], &[1.0, -2.0, 3.5, 0.25]);
        let h = to_device("input.0", &c, DType::F32).unwrap();
        assert_eq!((h.shape.as_slice(), &h.data), (&[2, 2][..], &c.data));
        assert_eq!(from_device("o", &h, C64).unwrap(), c);
        let flat = HostTensor {
            dtype: DType::F32,
            shape: vec![4],
            data: c.data.clone(),
        };
        assert!(
            from_device("o", &flat, C64).is_err(),
            "a real view ends in an axis of 2"
        );
        // No other conversion.
        let f = Tensor::from_f64(F32, &[1], &[1.0]);
        assert!(to_device("x", &f, DType::Bf16).is_err());
        assert!(to_device("x", &f, DType::F32).is_ok());
    }

    /// Some core op without a lowering (the registry grows; tests must not assume which).
    fn unlowered_op() -> Option<&'static str> {
        ops::core_ops()
            .iter()
            .map(|o| o.name.as_str())
            .find(|o| !lower::is_lowered(o))
    }

    #[test]
    fn errors_are_per_case_and_the_run_goes_on() {
        let Some(op) = unlowered_op() else { return };
        let dir = TempDir::new("runner-errors");
        let good = CaseBuilder::new(op, "f32", "hand", 0)
            .input(F32, &[2], &[1.0, -1.0])
            .output(F32, &[2], &[1.0, 0.0]);
        let also = CaseBuilder::new(op, "f32", "hand", 1)
            .input(F32, &[2], &[1.0, -1.0])
            .output(F32, &[2], &[1.0, 0.0]);
        let bad_file = dir.path().join(also.rel_file());
        write_golden(dir.path(), &[good, also]);
        // Corrupt the second file.
        let bytes = std::fs::read(&bad_file).unwrap();
        std::fs::write(&bad_file, &bytes[..bytes.len() / 2]).unwrap();
        let ex = Expectations::parse(
            &format!("[[expect]]\nops = [\"{op}\"]\nstatus = \"xfail\"\nreason = \"not-lowered\"\ntext = \"not lowered yet\"\n"),
            Path::new("e.toml"),
        )
        .unwrap();
        let index = GoldenIndex::load(dir.path()).unwrap();
        let entries: Vec<&IndexEntry> = index.cases.iter().collect();
        let r = run_cases(&index, &entries, &ex, &SimExecutor::new(trnsim::TargetName::Trn1), 1);
        assert_eq!(r[0].status, Status::XFail, "{}", r[0].message);
        assert_eq!(r[1].status, Status::Error);
        assert!(r[1].message.contains("__f32__hand_1.safetensors"), "{}", r[1].message);
        assert!(!Summary::of(&r).ok());
    }

    /// An entry limited to a target covers that target's run only: a relu case that passes
    /// everywhere is an xpass on trn3 under an xfail entry for trn3, and a plain pass elsewhere.
    #[test]
    fn an_entry_limited_to_a_target_applies_on_that_target_only() {
        let dir = TempDir::new("runner-targets");
        let c = CaseBuilder::new("relu", "f32", "hand", 0)
            .input(F32, &[3], &[1.0, -1.0, 2.0])
            .output(F32, &[3], &[1.0, 0.0, 2.0]);
        write_golden(dir.path(), &[c]);
        let index = GoldenIndex::load(dir.path()).unwrap();
        let ex = Expectations::parse(
            "[[expect]]\nops = [\"relu\"]\ntargets = [\"trn3\"]\nstatus = \"xfail\"\nreason = \"precision\"\ntext = \"t\"\n",
            Path::new("e.toml"),
        )
        .unwrap();
        for target in trnsim::TargetName::ALL {
            let r = run_case(&index.dir, &index.cases[0], &ex, &SimExecutor::new(target));
            if target == trnsim::TargetName::Trn3 {
                assert_eq!(r.status, Status::XPass, "{}", r.message);
                assert!(r.expectation.is_some_and(|e| e.contains("entry 1")));
            } else {
                assert_eq!(r.status, Status::Pass, "{target:?}: {}", r.message);
                assert_eq!(r.expectation, None);
            }
        }
    }

    #[test]
    fn not_lowered_without_expectation_is_an_error() {
        let Some(op) = unlowered_op() else { return };
        let dir = TempDir::new("runner-notlowered");
        let c = CaseBuilder::new(op, "f32", "hand", 0)
            .input(F32, &[1], &[1.0])
            .output(F32, &[1], &[1.0]);
        let r = run_all(dir.path(), &[c], &Expectations::none());
        assert_eq!(r[0].status, Status::Error);
        assert!(r[0].message.contains("not lowered"), "{}", r[0].message);
    }

    #[test]
    fn compute_work_check() {
        let case = Case {
            id: "x".into(),
            op: "relu".into(),
            dtype: "f32".into(),
            file: "x".into(),
            schema: None,
            call: crate::case::OpCall {
                args: vec![],
                kwargs: Default::default(),
            },
            outputs: vec![Value::Tensor("output.0".into())],
            tensors: Default::default(),
            tensor_meta: Default::default(),
            check: Check::Values,
            provenance: Default::default(),
            oracles: Default::default(),
        };
        let mut p = Program::new(trnsim::TargetName::Trn1);
        p.declare("output.0", DType::F32, &[2], HbmRole::Output);
        let e = check_compute_work(&case, &p).unwrap_err();
        assert!(e.contains("no compute-engine work"));
        let mut sym = case.clone();
        sym.op = "sym_numel".into();
        assert!(check_compute_work(&sym, &p).is_ok(), "metadata ops are exempt");
        let mut view = case.clone();
        view.op = "permute".into();
        let e = check_compute_work(&view, &p).unwrap_err();
        assert!(e.contains("no data movement"), "a shape op must move its data: {e}");
        let mut moved = p.clone();
        let ap = |m: trnsim::MemSpace| trnsim::AccessPattern {
            mem: m,
            dtype: DType::F32,
            start_partition: 0,
            partitions: 1,
            partition_step: 0,
            offset: 0,
            free: vec![[1, 2]],
        };
        moved.push(
            trnsim::Engine::Dma,
            trnsim::Op::DmaCopy(trnsim::DmaCopy {
                dst: ap(trnsim::MemSpace::Hbm("output.0".into())),
                src: ap(trnsim::MemSpace::Hbm("input.0".into())),
                accumulate: false,
                indirect: None,
            }),
        );
        assert!(
            check_compute_work(&view, &moved).is_ok(),
            "a shape op that moves data with DMA is fine"
        );
        let mut empty = Program::new(trnsim::TargetName::Trn1);
        empty.declare("output.0", DType::F32, &[0, 3], HbmRole::Output);
        assert!(check_compute_work(&case, &empty).is_ok(), "nothing to compute");
        let _ = Properties::default();
    }

    #[test]
    fn filters() {
        assert!(filter_matches("add.Tensor", "add.Tensor::f32::hand_0"));
        assert!(filter_matches("add.*::bf16::*", "add.Tensor::bf16::hand_0"));
        assert!(!filter_matches("add.*::bf16::*", "add.Tensor::f32::hand_0"));
    }
}
