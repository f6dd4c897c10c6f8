//! `trnsim._native.lower_op`: trnconf's lowering of one Core ATen call, for the PyTorch device
//! `trnsim` (`trnsim.torch`, docs/torch-device.md).
//!
//! The device sees a call the way the golden suite records it (docs/golden-format.md: `args`,
//! `kwargs`, `outputs`, tensor metadata by `input.<i>` / `kwarg.<name>` / `output.<i>` names) and
//! asks for the same lowering the suite checks ([`trnlower::lower_call`]), with the same
//! compute-work check as the suite's runner. The program comes back as a `trnsim.Program`; the
//! device runs it on its session tensors, so tensor values never pass through here.

use crate::program::Program;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::BTreeMap;
use trnlower::{self as lower, LowerError, OpCall, TensorMeta, TorchDType, Value, check_compute_work};

/// The outcome of [`lower_op`]: `(error kind, message, program, values JSON, data-dependent
/// output)`. The error kind is `None` on success; otherwise `not_lowered` (no lowering for the
/// op), `unsupported` (lowered, not for this call form), `int64` (an int64 scalar argument
/// outside int32), `no_compute` (the program would not make the engines compute) or `error`.
type LowerOutcome = (
    Option<&'static str>,
    String,
    Option<Program>,
    String,
    Option<(String, String)>,
);

/// Lowers one call for `target`. `call_json` is `{"args": [...], "kwargs": {...}}` in the golden
/// value encoding, `tensors_json` maps every tensor name (inputs and outputs) to
/// `{"dtype", "shape"}`, and `outputs_json` lists the op's returns (`{"tensor": "output.0"}`, …,
/// any other value for a non-tensor return). A data-dependent output's shape is replaced by its
/// bound from input metadata, exactly as the suite does, so its true shape never reaches the
/// lowering. `seed`, when given, replaces the seed the RNG ops start from (the device's
/// generator: each random call draws a fresh one).
#[pyfunction]
#[pyo3(signature = (op, call_json, tensors_json, outputs_json, target = "trn2", seed = None))]
pub fn lower_op(
    op: &str,
    call_json: &str,
    tensors_json: &str,
    outputs_json: &str,
    target: &str,
    seed: Option<u32>,
) -> PyResult<LowerOutcome> {
    let parse = |what: &str, e: serde_json::Error| PyValueError::new_err(format!("lower_op: {what}: {e}"));
    let call: OpCall = serde_json::from_str(call_json).map_err(|e| parse("call", e))?;
    let tensor_meta: BTreeMap<String, TensorMeta> =
        serde_json::from_str(tensors_json).map_err(|e| parse("tensors", e))?;
    let outputs: Vec<Value> = serde_json::from_str(outputs_json).map_err(|e| parse("outputs", e))?;
    let target = crate::convert::target(target)?;
    let fail = |kind: &'static str, msg: String| Ok((Some(kind), msg, None, String::new(), None));
    let mut lowered = match lower::lower_call(op, &call, &tensor_meta, &outputs, target) {
        Ok(l) => l,
        Err(LowerError::NotLowered(op)) => return fail("not_lowered", format!("op `{op}` is not lowered")),
        Err(e @ LowerError::Unsupported { .. }) => return fail("unsupported", e.to_string()),
        Err(e @ LowerError::Int64OutsideInt32 { .. }) => return fail("int64", e.to_string()),
        Err(e) => return fail("error", e.to_string()),
    };
    if let Err(msg) = check_compute_work(op, &call, &tensor_meta, &lowered.program) {
        return fail("no_compute", msg);
    }
    if let Some(seed) = seed {
        reseed(&mut lowered.program, seed);
    }
    let values = serde_json::to_string(&lowered.values).expect("values serialize");
    let data_dependent =
        lower::data_dependent_output(op, &call, &tensor_meta).map(|name| (lower::count_output_name(&name), name));
    Ok((
        None,
        String::new(),
        Some(Program { inner: lowered.program }),
        values,
        data_dependent,
    ))
}

/// Replaces the immediate seed of every `set_rng_seed` with `seed`. The lowering seeds its
/// generator with a constant so a program is deterministic; the device gives each random call
/// its own seed from its generator so that two calls differ, as on any device.
fn reseed(program: &mut trnsim::Program, seed: u32) {
    for inst in program.instructions.iter_mut() {
        if let trnsim::Op::SetRngSeed(s) = &mut inst.op
            && let trnsim::ScalarOperand::Imm(v) = &mut s.seed
        {
            *v = seed as f64;
        }
    }
}

/// The device dtype a tensor of golden dtype `name` is stored as (`lower::device_dtype`: its
/// own dtype, int32 for int64), or `None` when the device has none (complex64 is stored as its
/// f32 real view by the caller; other torch dtypes have no golden name).
#[pyfunction]
pub fn device_dtype(name: &str) -> Option<String> {
    let t = TorchDType::from_name(name)?;
    lower::device_dtype(t).map(crate::convert::dtype_name)
}

/// Whether trnconf has a lowering for `op` (golden spelling: `add.Tensor`, `relu`).
#[pyfunction]
pub fn is_lowered(op: &str) -> bool {
    lower::is_lowered(op)
}

/// The golden suite's tolerance for `op`'s outputs of golden dtype `dtype`
/// (`trnlower::tolerance::tolerance_for`, the table the suite compares with): `(rtol, atol, reason)`, the reason naming why the op
/// has a wider tolerance than the dtype's default (`None` for the default). The device's check
/// mode judges drift with it, so a drift flagged there is one the suite would flag too.
#[pyfunction]
pub fn tolerance(op: &str, dtype: &str) -> PyResult<(f64, f64, Option<&'static str>)> {
    let t = TorchDType::from_name(dtype).ok_or_else(|| PyValueError::new_err(format!("unknown dtype `{dtype}`")))?;
    let (tol, why) = trnlower::tolerance::tolerance_for(op, t);
    Ok((tol.rtol, tol.atol, why))
}
