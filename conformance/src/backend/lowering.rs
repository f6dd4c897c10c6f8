//! Our lowering as a backend: lower the case's ATen call to a trnsim program, check that the
//! program makes the engines compute, run it on a program executor (the simulator, or the process
//! executor's `nki` mode), and read its outputs back as case tensors. The only conversions at the
//! boundary are int64 ↔ int32 and complex64 ↔ its real view; with `--native-int64` an int64
//! tensor the program declares `i64` crosses as it is.

use super::{Produced, Unrun};
use crate::case::{Case, Value};
use crate::compare::{self, ActualOutputs};
use crate::executor::{CaseExecutor, FailureKind};
use crate::expect::ErrorKind;
use crate::lower::{self, LowerError};
use crate::results::BackendResult;
use crate::tensor::{Tensor, TorchDType, format_index, unravel};
use std::collections::BTreeMap;
use trnsim::{DType, HbmRole, HostTensor, Program};

/// Lowers `case`, runs the program on `executor` and returns its outputs as case tensors.
pub fn run<E: CaseExecutor + ?Sized>(case: &Case, executor: &E) -> Result<Produced, Unrun> {
    let file = case.file.display();
    let mut lowered = match lower::lower_with_options(case, executor.target(), &executor.lower_options()) {
        Ok(l) => l,
        Err(LowerError::NotLowered(op)) => return Err(Unrun::NotLowered(format!("op `{op}` is not lowered"))),
        Err(e @ LowerError::Int64OutsideInt32 { .. }) => {
            return Err(Unrun::Refused(
                ErrorKind::Int64OutsideInt32,
                format!("{file}: lowering: {e}"),
            ));
        }
        Err(e) => return Err(Unrun::Error(format!("{file}: lowering: {e}"))),
    };
    check_compute_work(case, &lowered.program).map_err(Unrun::Fail)?;
    let rng_seed = bind_rng_seed(&mut lowered.program, case_rng_seed(case));
    if let Some(m) = narrowing_refusal(case, &lowered.program) {
        return Err(Unrun::Refused(ErrorKind::Int64OutsideInt32, format!("{file}: {m}")));
    }
    let inputs = device_inputs(case, &lowered.program).map_err(|e| Unrun::Error(format!("{file}: {e}")))?;
    let run = match executor.execute_case(case, &lowered.program, &inputs) {
        Ok(r) => r,
        Err(f) if f.kind == FailureKind::Unsupported => return Err(Unrun::Unsupported(f.message)),
        Err(f) => return Err(Unrun::Error(format!("{file}: {}", f.message))),
    };
    let d = host_outputs(case, &lowered.program, &run.outputs).map_err(|e| Unrun::Error(format!("{file}: {e}")))?;
    let mut values = lowered.values.clone();
    values.extend(d.values);
    Ok(Produced {
        tensors: d.tensors,
        values,
        instructions: run.instructions.clone(),
        backends: compare_backends(case, &lowered, &run.backends),
        note: String::new(),
        stats: run.stats.clone(),
        rng_seed,
    })
}

/// The seed of a case's RNG ops: the case's own seed (`provenance.seed`, the seed PyTorch drew
/// the golden sample with, so a corpus generated with another `--seed` brings new ones), folded
/// to the generator's 32 bits; 0 for a case that records none.
pub fn case_rng_seed(case: &Case) -> u32 {
    case.provenance.seed.map_or(0, |s| (s ^ (s >> 32)) as u32)
}

/// Binds the generator seed of a lowered program: every `set_rng_seed` immediate becomes
/// `seed`. The seed is device state that the runtime sets before a kernel runs, as
/// `torch.manual_seed` sets PyTorch's generator, so the lowering only marks where the generator
/// is seeded (lower/creation.rs). `Some(seed)` when the program seeds its generator.
pub fn bind_rng_seed(program: &mut Program, seed: u32) -> Option<u32> {
    let mut bound = None;
    for inst in program.instructions.iter_mut() {
        if let trnsim::Op::SetRngSeed(s) = &mut inst.op
            && matches!(s.seed, trnsim::ScalarOperand::Imm(_))
        {
            s.seed = trnsim::ScalarOperand::Imm(seed as f64);
            bound = Some(seed);
        }
    }
    bound
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

/// A compute op must make the engines compute ([`trnlower::check_compute_work`]).
pub fn check_compute_work(case: &Case, program: &Program) -> Result<(), String> {
    trnlower::check_compute_work(&case.op, &case.call, &case.tensor_meta, program)
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
    if t.dtype == TorchDType::I64 && dtype == DType::I64 {
        // `--native-int64`: the same 8 bytes per element.
        return Ok(HostTensor {
            dtype,
            shape: t.shape.clone(),
            data: t.data.clone(),
        });
    }
    if t.dtype == TorchDType::I64 && dtype == DType::I32 {
        if let Some(m) = outside_int32(name, t) {
            return Err(m);
        }
        let data = (0..t.numel())
            .flat_map(|i| (t.value_i64(i) as i32).to_le_bytes())
            .collect();
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

/// The narrowing's refusal of an int64 tensor `t`: its first value outside int32, named.
fn outside_int32(name: &str, t: &Tensor) -> Option<String> {
    let i = (0..t.numel()).find(|&i| i32::try_from(t.value_i64(i)).is_err())?;
    Some(format!(
        "`{name}`: int64 value {} at index {} does not fit in int32 (Trainium has no int64)",
        t.value_i64(i),
        format_index(&unravel(i, &t.shape))
    ))
}

/// The narrowing's refusal of the first program input that is int64 in the case and int32 on
/// the device and holds a value outside int32: a typed refusal (expectations can name it), found
/// before the inputs are converted.
pub fn narrowing_refusal(case: &Case, program: &Program) -> Option<String> {
    program
        .hbm
        .iter()
        .filter(|d| d.role == HbmRole::Input && d.dtype == DType::I32)
        .find_map(|d| {
            let t = case.tensors.get(&d.name)?;
            (t.dtype == TorchDType::I64)
                .then(|| outside_int32(&d.name, t))
                .flatten()
        })
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
    if h.dtype == DType::I64 && golden == TorchDType::I64 {
        let t = Tensor::new(TorchDType::I64, h.shape.clone(), h.data.clone());
        if !t.is_consistent() {
            return Err(format!(
                "output `{name}` has {} bytes for {:?} i64",
                h.data.len(),
                h.shape
            ));
        }
        return Ok(t);
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

pub fn device_inputs(case: &Case, program: &Program) -> Result<BTreeMap<String, HostTensor>, String> {
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

pub fn host_outputs(
    case: &Case,
    program: &Program,
    outputs: &BTreeMap<String, HostTensor>,
) -> Result<DeviceOutputs, String> {
    let mut out = DeviceOutputs::default();
    let data_dependent = lower::data_dependent_output(&case.op, &case.call, &case.tensor_meta);
    let count_name = data_dependent.as_deref().map(lower::count_output_name);
    let mut count = None;
    for decl in program.hbm.iter().filter(|d| d.role == HbmRole::Output) {
        let h = outputs
            .get(&decl.name)
            .ok_or_else(|| format!("the executor returned no `{}`", decl.name))?;
        if count_name.as_deref() == Some(decl.name.as_str()) {
            if h.dtype != DType::I32 || h.num_elems() != 1 {
                return Err(format!(
                    "`{}` must be one int32, the program declares {:?} {}",
                    decl.name, h.shape, h.dtype
                ));
            }
            count = Some(DType::I32.decode_i64(h.bits()[0]));
        } else if let Some(meta) = case.tensor_meta.get(&decl.name) {
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
    if let Some(name) = data_dependent
        && let Some(t) = out.tensors.get_mut(&name)
    {
        let c = count.ok_or_else(|| format!("`{name}` is data-dependent: the program writes no row count"))?;
        *t = trim_rows(&name, t, c)?;
    }
    Ok(out)
}

/// The first `count` rows of a data-dependent output's padded buffer (the rows the device says
/// it wrote). A count outside `0..=rows` is an error; any other count that differs from the
/// golden's shows as a shape mismatch in the comparison.
fn trim_rows(name: &str, t: &Tensor, count: i64) -> Result<Tensor, String> {
    let rows = t.shape.first().copied().unwrap_or(0);
    if count < 0 || count as usize > rows {
        return Err(format!(
            "`{name}`: the device counts {count} rows in a buffer of {rows}"
        ));
    }
    let mut shape = t.shape.clone();
    shape[0] = count as usize;
    let bytes = shape.iter().product::<usize>() * t.dtype.size();
    Ok(Tensor::new(t.dtype, shape, t.data[..bytes].to_vec()))
}

/// What the engines produced, as the comparison sees it.
#[derive(Default)]
pub struct DeviceOutputs {
    pub tensors: BTreeMap<String, Tensor>,
    /// Non-tensor outputs (e.g. `_local_scalar_dense`) read back from one-element tensors.
    pub values: BTreeMap<usize, Value>,
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
    if h.dtype == DType::I64 {
        // `--native-int64`: the element's 8 bytes (no 32-bit bits view).
        let v = i64::from_le_bytes(
            h.data
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| format!("`{name}`: an i64 scalar needs 8 bytes, got {}", h.data.len()))?,
        );
        return match expected {
            Value::Int(_) => Ok(Value::Int(v)),
            other => Err(format!("`{name}`: cannot read a {other:?} output from an i64 tensor")),
        };
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
