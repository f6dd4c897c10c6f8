//! The one runner both front ends (the libtest-mimic suite and the `trnconf` binary) use:
//! load case → lower → check the program does compute-engine work → execute → compare → apply
//! expectations → [`CaseResult`].
//!
//! Every failure is a per-case result naming the file and the reason; the rest of the run goes on.
//! The runner knows executors, comparison and expectations — not engines or lowering details.

use crate::case::{Case, GoldenIndex, IndexEntry, Value};
use crate::compare::{self, ActualOutputs, OutputMetrics};
use crate::executor::CaseExecutor;
use crate::expect::{self, Expectations, Outcome, Status};
use crate::lower::{self, LowerError};
use crate::ops;
use crate::tensor::{Tensor, TorchDType, format_index, unravel};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use trnsim::{DType, EngineCounts, HbmRole, HostTensor, Program};

/// The result of one case.
#[derive(Clone, Debug, Serialize)]
pub struct CaseResult {
    pub id: String,
    pub op: String,
    pub dtype: String,
    pub status: Status,
    /// The expectations entry that covers the case, described.
    pub expectation: Option<String>,
    /// One entry per output, pass or fail.
    pub metrics: Vec<OutputMetrics>,
    /// Instructions executed per engine (zero when nothing ran).
    pub instructions: EngineCounts,
    #[serde(skip)]
    pub wall_time: Duration,
    pub wall_ms: f64,
    /// Why the case did not pass (or notes); empty for a plain pass.
    pub message: String,
    /// Per-backend comparison when the executor ran several (nki mode), else empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<BackendResult>,
}

impl CaseResult {
    fn new(entry: &IndexEntry) -> Self {
        CaseResult {
            id: entry.id.clone(),
            op: entry.op.clone(),
            dtype: entry.dtype.clone(),
            status: Status::Error,
            expectation: None,
            metrics: Vec::new(),
            instructions: EngineCounts::default(),
            wall_time: Duration::ZERO,
            wall_ms: 0.0,
            message: String::new(),
            backends: Vec::new(),
        }
    }
}

/// What happened before expectations were applied.
struct Raw {
    outcome: Outcome,
    message: String,
}

fn raw(outcome: Outcome, message: impl Into<String>) -> Raw {
    Raw {
        outcome,
        message: message.into(),
    }
}

/// Runs one case of `index`.
pub fn run_case(
    golden_dir: &Path,
    entry: &IndexEntry,
    expectations: &Expectations,
    executor: &dyn CaseExecutor,
) -> CaseResult {
    let start = Instant::now();
    let mut result = CaseResult::new(entry);
    finish_case(golden_dir, entry, expectations, executor, &mut result);
    result.wall_time = start.elapsed();
    result.wall_ms = result.wall_time.as_secs_f64() * 1e3;
    result
}

fn finish_case(
    golden_dir: &Path,
    entry: &IndexEntry,
    expectations: &Expectations,
    executor: &dyn CaseExecutor,
    result: &mut CaseResult,
) {
    let expectation = match expectations.lookup(&entry.id, &entry.op) {
        Ok(e) => e,
        Err(e) => {
            result.message = e.to_string();
            return;
        }
    };
    result.expectation = expectation.map(|e| e.describe());
    // A bad file is an error whatever the expectation says: expectations are about how an op
    // behaves, never about corrupt goldens. Skipped cases are loaded too, as a corruption check.
    let case = match Case::load_entry(golden_dir, entry) {
        Ok(c) => c,
        Err(e) => {
            result.message = e.to_string();
            return;
        }
    };
    let outcome = if expectation.is_some_and(|e| e.status == expect::ExpectedStatus::Skip) {
        raw(Outcome::Pass, "")
    } else if let Some(run) = executor.run_case(&case) {
        // A case-level (process) executor; `unsupported` is a missing capability: skipped.
        match case_level_outcome(&case, run, executor, result) {
            Ok(r) => r,
            Err(why) => {
                result.status = Status::Skip;
                result.message = why;
                return;
            }
        }
    } else {
        match execute_case(&case, executor, result) {
            Ok(r) => r,
            Err(why) => {
                result.status = Status::Skip;
                result.message = why;
                return;
            }
        }
    };
    let (status, note) = expect::resolve(outcome.outcome, expectation);
    result.status = status;
    result.message = match (note.is_empty(), outcome.message.is_empty()) {
        (true, _) => outcome.message,
        (false, true) => note,
        (false, false) => format!("{note}\n{}", outcome.message),
    };
}

/// Lowers, runs and compares a loaded case. `Err`: the executor answered `unsupported` (the
/// reason; the case is skipped).
fn execute_case(case: &Case, executor: &dyn CaseExecutor, result: &mut CaseResult) -> Result<Raw, String> {
    use crate::executor::FailureKind;
    let file = case.file.display();
    let lowered = match lower::lower(case, executor.target()) {
        Ok(l) => l,
        Err(LowerError::NotLowered(op)) => return Ok(raw(Outcome::NotLowered, format!("op `{op}` is not lowered"))),
        Err(e) => return Ok(raw(Outcome::Error, format!("{file}: lowering: {e}"))),
    };
    if let Err(why) = check_compute_work(case, &lowered.program) {
        return Ok(raw(Outcome::Fail, why));
    }
    let inputs = match device_inputs(case, &lowered.program) {
        Ok(i) => i,
        Err(e) => return Ok(raw(Outcome::Error, format!("{file}: {e}"))),
    };
    let run = match executor.execute_case(case, &lowered.program, &inputs) {
        Ok(r) => r,
        Err(f) if f.kind == FailureKind::Unsupported => return Err(format!("unsupported: {}", f.message)),
        Err(f) => return Ok(raw(Outcome::Error, format!("{file}: {}", f.message))),
    };
    result.backends = compare_backends(case, &lowered, &run.backends);
    result.instructions = run.instructions.clone();
    let mut actual = ActualOutputs {
        values: lowered.values.clone(),
        ..Default::default()
    };
    match host_outputs(case, &lowered.program, &run.outputs) {
        Ok(d) => {
            actual.tensors = d.tensors;
            actual.values.extend(d.values);
        }
        Err(e) => return Ok(raw(Outcome::Error, format!("{file}: {e}"))),
    }
    if let crate::case::Check::Properties { props } = &case.check
        && props.deterministic == Some(true)
    {
        match executor
            .execute_case(case, &lowered.program, &inputs)
            .map_err(|f| f.message)
            .and_then(|r| host_outputs(case, &lowered.program, &r.outputs))
        {
            Ok(d) => actual.rerun = Some(d.tensors),
            Err(e) => return Ok(raw(Outcome::Error, format!("{file}: second run: {e}"))),
        }
    }
    let cmp = compare::compare_case(case, &actual);
    result.metrics = cmp.outputs;
    Ok(if cmp.accurate {
        raw(Outcome::Accurate, cmp.message)
    } else if cmp.passed {
        raw(Outcome::Pass, "")
    } else {
        raw(Outcome::Fail, cmp.message)
    })
}

/// One backend of a multi-backend run (nki mode: `sim`, `nki_standin`, `simulate_kernel`,
/// `hardware`) compared with the golden by the same code as the case, and bit for bit with `sim`.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct BackendResult {
    pub name: String,
    /// `pass` / `fail` against the golden (before expectations), or `error` (unreadable outputs).
    pub status: String,
    /// Max ULP distance from the golden over the value outputs.
    pub max_ulp: Option<u64>,
    /// Whether every output has the same bits as the `sim` backend's.
    pub same_bits_as_sim: bool,
    /// The first line of the comparison message.
    #[serde(default)]
    pub message: String,
}

/// Compares every backend's outputs with the golden (empty unless the executor returned more
/// than one backend).
fn compare_backends(
    case: &Case,
    lowered: &lower::Lowered,
    backends: &[(String, BTreeMap<String, HostTensor>)],
) -> Vec<BackendResult> {
    let sim = backends.iter().find(|(n, _)| n == "sim").map(|(_, o)| o);
    backends
        .iter()
        .map(|(name, outputs)| {
            let same_bits_as_sim = sim.is_some_and(|s| s == outputs);
            let (status, max_ulp, message) = match host_outputs(case, &lowered.program, outputs) {
                Ok(d) => {
                    let mut actual = ActualOutputs {
                        values: lowered.values.clone(),
                        ..Default::default()
                    };
                    actual.tensors = d.tensors;
                    actual.values.extend(d.values);
                    // A determinism check needs a second run; the backends are compared on values.
                    let cmp = compare::compare_case(case, &actual);
                    let ulp = cmp
                        .outputs
                        .iter()
                        .filter(|m| m.kind == compare::CompareKind::Values)
                        .map(|m| m.max_ulp)
                        .max();
                    let status = if cmp.passed { "pass" } else { "fail" };
                    (status, ulp, cmp.message.lines().next().unwrap_or("").to_string())
                }
                Err(e) => ("error", None, e),
            };
            BackendResult {
                name: name.clone(),
                status: status.into(),
                max_ulp,
                same_bits_as_sim,
                message,
            }
        })
        .collect()
}

/// Compares what a case-level executor returned (docs/executor-protocol.md) with the same code as
/// the simulator's outputs. `Err`: the executor answered `unsupported` (the reason).
fn case_level_outcome(
    case: &Case,
    run: Result<crate::executor::CaseOutputs, crate::executor::ExecFailure>,
    executor: &dyn CaseExecutor,
    result: &mut CaseResult,
) -> Result<Raw, String> {
    use crate::executor::FailureKind;
    let file = case.file.display();
    let out = match run {
        Ok(o) => o,
        Err(f) if f.kind == FailureKind::Unsupported => return Err(format!("unsupported: {}", f.message)),
        Err(f) => return Ok(raw(Outcome::Error, format!("{file}: {f}"))),
    };
    let mut actual = ActualOutputs {
        tensors: out.tensors,
        values: out.values,
        rerun: None,
    };
    if let crate::case::Check::Properties { props } = &case.check
        && props.deterministic == Some(true)
    {
        match executor.run_case(case) {
            Some(Ok(o)) => actual.rerun = Some(o.tensors),
            Some(Err(f)) => return Ok(raw(Outcome::Error, format!("{file}: second run: {f}"))),
            None => {
                return Ok(raw(
                    Outcome::Error,
                    format!("{file}: second run: executor stopped running cases"),
                ));
            }
        }
    }
    let cmp = compare::compare_case(case, &actual);
    result.metrics = cmp.outputs;
    Ok(if cmp.accurate {
        raw(Outcome::Accurate, cmp.message)
    } else if cmp.passed {
        raw(Outcome::Pass, "")
    } else {
        raw(Outcome::Fail, cmp.message)
    })
}

/// A compute op must make the engines compute: a program of only DMAs would mean the result was
/// produced some other way. Exceptions ([`ops::NO_COMPUTE_WORK_OPS`]): metadata queries, which
/// run nothing, and shape ops, which must still move their data with DMA; and programs whose
/// outputs are all empty (there is nothing to compute).
pub fn check_compute_work(case: &Case, program: &Program) -> Result<(), String> {
    let outputs_empty = program
        .hbm
        .iter()
        .filter(|d| d.role == HbmRole::Output)
        .all(|d| d.shape.iter().product::<usize>() == 0);
    if ops::NO_COMPUTE_WORK_OPS.contains(&case.op.as_str()) {
        let moves_data = program.instructions.iter().any(|i| i.engine == trnsim::Engine::Dma);
        if ops::family_of(&case.op) == Some("shape") && !outputs_empty && !moves_data {
            return Err(format!(
                "no data movement: the program for `{}` runs no DMA instruction",
                case.op
            ));
        }
        return Ok(());
    }
    if outputs_empty {
        return Ok(());
    }
    if program.instructions.iter().any(|i| i.engine.is_compute()) {
        Ok(())
    } else {
        Err(format!(
            "no compute-engine work: the program for `{}` runs no Tensor/Vector/Scalar/GpSimd instruction",
            case.op
        ))
    }
}

/// The host tensor for one program input: the case tensor in its device dtype. The only
/// conversion is int64 → int32 (Trainium has no int64); a value that does not fit is an error
/// naming the first such element. A complex64 tensor goes over as its real view — the same
/// bytes, as F32 of shape `[..., 2]` (re, im) — which is not a conversion.
pub fn to_device(name: &str, t: &Tensor, dtype: DType) -> Result<HostTensor, String> {
    if t.dtype == TorchDType::C64 && dtype == DType::F32 {
        return Ok(HostTensor {
            dtype,
            shape: lower::complex_real_view_shape(&t.shape),
            data: t.data.clone(),
        });
    }
    if t.dtype == TorchDType::I64 && dtype == DType::I32 {
        let n = t.numel();
        let mut data = Vec::with_capacity(4 * n);
        let mut overflow = None;
        for i in 0..n {
            let v = t.value_i64(i);
            let narrowed = v.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
            if overflow.is_none() && narrowed as i64 != v {
                overflow = Some((i, v));
            }
            data.extend(narrowed.to_le_bytes());
        }
        if let Some((i, v)) = overflow {
            return Err(format!(
                "`{name}`: int64 value {v} at index {} does not fit in int32 (Trainium has no int64)",
                format_index(&unravel(i, &t.shape))
            ));
        }
        return Ok(HostTensor {
            dtype,
            shape: t.shape.clone(),
            data,
        });
    }
    match t.dtype.device_dtype() {
        Some(d) if d == dtype => Ok(HostTensor {
            dtype,
            shape: t.shape.clone(),
            data: t.data.clone(),
        }),
        _ => Err(format!(
            "`{name}` is {} in the case; the program declares it {dtype}, and only int64 → int32 is converted at the boundary",
            t.dtype
        )),
    }
}

/// The case tensor for one program output: int32 widened to int64 when the golden output is
/// int64; an F32 `[..., 2]` real view read back as complex64 when the golden output is complex
/// (same bytes); otherwise the device dtype as the torch dtype.
pub fn from_device(name: &str, h: &HostTensor, golden: TorchDType) -> Result<Tensor, String> {
    if golden == TorchDType::C64 && h.dtype == DType::F32 {
        let Some((&2, complex_shape)) = h.shape.split_last() else {
            return Err(format!(
                "output `{name}` is complex64; its real view must end in an axis of 2, the program declares {:?}",
                h.shape
            ));
        };
        return Ok(Tensor::new(TorchDType::C64, complex_shape.to_vec(), h.data.clone()));
    }
    if h.dtype == DType::I32 && golden == TorchDType::I64 {
        let data = h
            .data
            .chunks_exact(4)
            .flat_map(|c| (i32::from_le_bytes(c.try_into().expect("4-byte chunk")) as i64).to_le_bytes())
            .collect();
        return Ok(Tensor::new(TorchDType::I64, h.shape.clone(), data));
    }
    let dtype = crate::tensor::ALL_TORCH_DTYPES
        .iter()
        .copied()
        .find(|t| t.device_dtype() == Some(h.dtype))
        .ok_or_else(|| format!("output `{name}` is {}, which PyTorch has no dtype for", h.dtype))?;
    let t = Tensor::new(dtype, h.shape.clone(), h.data.clone());
    if !t.is_consistent() {
        return Err(format!(
            "output `{name}` has {} bytes for {:?} {}",
            h.data.len(),
            h.shape,
            h.dtype
        ));
    }
    Ok(t)
}

fn device_inputs(case: &Case, program: &Program) -> Result<BTreeMap<String, HostTensor>, String> {
    let mut inputs = BTreeMap::new();
    for decl in program.hbm.iter().filter(|d| d.role == HbmRole::Input) {
        let t = case
            .tensors
            .get(&decl.name)
            .ok_or_else(|| format!("the program reads `{}`, which the case does not have", decl.name))?;
        let device_shape = if t.dtype.is_complex() {
            lower::complex_real_view_shape(&t.shape)
        } else {
            t.shape.clone()
        };
        if device_shape != decl.shape {
            return Err(format!(
                "`{}` is {:?} in the case, the program declares {:?}",
                decl.name, device_shape, decl.shape
            ));
        }
        inputs.insert(decl.name.clone(), to_device(&decl.name, t, decl.dtype)?);
    }
    Ok(inputs)
}

fn host_outputs(
    case: &Case,
    program: &Program,
    outputs: &BTreeMap<String, HostTensor>,
) -> Result<DeviceOutputs, String> {
    let mut out = DeviceOutputs::default();
    for decl in program.hbm.iter().filter(|d| d.role == HbmRole::Output) {
        let h = outputs
            .get(&decl.name)
            .ok_or_else(|| format!("the executor returned no `{}`", decl.name))?;
        if let Some(meta) = case.tensor_meta.get(&decl.name) {
            out.tensors
                .insert(decl.name.clone(), from_device(&decl.name, h, meta.dtype)?);
        } else if let Some((pos, expected)) = scalar_output(case, &decl.name) {
            out.values.insert(pos, scalar_from_device(&decl.name, h, expected)?);
        } else {
            return Err(format!(
                "the program writes `{}`, which is not an output of the case",
                decl.name
            ));
        }
    }
    Ok(out)
}

/// What the engines produced, as the comparison sees it.
#[derive(Default)]
struct DeviceOutputs {
    tensors: BTreeMap<String, Tensor>,
    /// Non-tensor outputs (e.g. `_local_scalar_dense`) read back from one-element tensors.
    values: BTreeMap<usize, Value>,
}

/// A program output `output.<pos>` that stands for a non-tensor output of the case.
fn scalar_output<'a>(case: &'a Case, name: &str) -> Option<(usize, &'a Value)> {
    let pos: usize = name.strip_prefix("output.")?.parse().ok()?;
    let v = case.outputs.get(pos)?;
    (!matches!(v, Value::Tensor(_) | Value::Tensors(_))).then_some((pos, v))
}

/// Reads a scalar the engines wrote as a one-element tensor, as the kind of value the golden
/// output is (an int32 is widened to int64 here, the way `to_device` narrowed it).
fn scalar_from_device(name: &str, h: &HostTensor, expected: &Value) -> Result<Value, String> {
    if h.num_elems() != 1 {
        return Err(format!(
            "`{name}` stands for a scalar but has {} elements",
            h.num_elems()
        ));
    }
    let bits = h.bits()[0];
    Ok(match expected {
        Value::Bool(_) => Value::Bool(h.dtype.decode_f32(bits) != 0.0),
        Value::Int(_) if h.dtype.is_int() => Value::Int(h.dtype.decode_i64(bits)),
        Value::Int(_) => Value::Int(h.dtype.decode_f32(bits) as i64),
        Value::Float(_) => Value::Float(crate::case::JsonFloat(h.dtype.decode_f32(bits) as f64)),
        other => return Err(format!("`{name}`: cannot read a {other:?} output from a tensor")),
    })
}

// ---------------------------------------------------------------------------------------------
// Whole runs

/// Counts of a run by status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Summary {
    pub total: usize,
    pub passed: usize,
    /// Passed by the accuracy rule only (status `accurate`), counted apart from `passed`.
    #[serde(default)]
    pub accurate: usize,
    pub failed: usize,
    pub xfailed: usize,
    pub xpassed: usize,
    pub skipped: usize,
    pub errors: usize,
}

impl Summary {
    pub fn of(results: &[CaseResult]) -> Summary {
        let mut s = Summary {
            total: results.len(),
            ..Default::default()
        };
        for r in results {
            match r.status {
                Status::Pass => s.passed += 1,
                Status::Accurate => s.accurate += 1,
                Status::Fail => s.failed += 1,
                Status::XFail => s.xfailed += 1,
                Status::XPass => s.xpassed += 1,
                Status::Skip => s.skipped += 1,
                Status::Error => s.errors += 1,
            }
        }
        s
    }

    /// Whether every case matched its expectation.
    pub fn ok(&self) -> bool {
        self.failed == 0 && self.xpassed == 0 && self.errors == 0
    }
}

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
    executor: &dyn CaseExecutor,
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
                    let r = run_case(&index.dir, entry, expectations, executor);
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
    executor: &dyn CaseExecutor,
    jobs: usize,
    on_result: &(dyn Fn(&CaseResult) + Sync),
) -> Vec<CaseResult> {
    use rayon::prelude::*;
    let work = || -> Vec<CaseResult> {
        entries
            .par_iter()
            .map(|entry| {
                let r = run_case(golden_dir, entry, expectations, executor);
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
                let r = run_case(golden_dir, entry, expectations, executor);
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
mod tests {
    use super::*;
    use crate::case::{Check, Properties, Value};
    use crate::executor::SimExecutor;
    use crate::fixture::{CaseBuilder, TempDir, write_golden};
    use crate::tensor::TorchDType::*;

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
