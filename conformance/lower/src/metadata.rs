//! The `metadata` family: `sym_size.int`, `sym_stride.int`, `sym_numel`, `sym_storage_offset`,
//! `sym_is_contiguous`.
//!
//! A backend answers these at trace time from the tensor's metadata (shape, strides): there is
//! nothing to compute on the device, so the program is empty and the answer is a
//! [`Lowered::values`] entry. They are the only ops allowed to run no instruction at all
//! (`ops::NO_COMPUTE_WORK_OPS`).
//!
//! `sym_storage_offset` answers from the `storage_offset` the golden records (0 when absent).

use super::shape::is_contiguous;
use super::{LowerError, LowerRequest, Lowered};
use crate::call::{MemoryFormat, TensorArg, TensorMeta, Value};
use crate::dtype::contiguous_strides;
use trnsim::{Program, TargetName};

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (_, meta) = req.arg::<TensorArg>(0, "self")?;
    let value = match req.op {
        "sym_size.int" => Value::Int(meta.shape[dim(req, meta)?] as i64),
        "sym_stride.int" => Value::Int(strides(meta)[dim(req, meta)?]),
        "sym_numel" => Value::Int(meta.shape.iter().product::<usize>() as i64),
        "sym_storage_offset" => Value::Int(meta.storage_offset.unwrap_or(0)),
        "sym_is_contiguous" => {
            let MemoryFormat(format) = req.arg_or(1, "memory_format", MemoryFormat("contiguous_format"))?;
            Value::Bool(is_contiguous_as(req, &meta.shape, &strides(meta), format)?)
        }
        other => return Err(LowerError::NotLowered(other.to_string())),
    };
    let mut lowered = Lowered::new(Program::new(target));
    lowered.values.insert(0, value);
    Ok(lowered)
}

/// The recorded strides, or the contiguous ones when the golden gives none.
fn strides(meta: &TensorMeta) -> Vec<i64> {
    meta.strides
        .clone()
        .unwrap_or_else(|| contiguous_strides(&meta.shape).into_iter().map(|s| s as i64).collect())
}

/// The wrapped `dim` argument (a 0-d tensor has no sizes or strides to ask for).
fn dim(req: &LowerRequest<'_>, meta: &TensorMeta) -> Result<usize, LowerError> {
    if meta.shape.is_empty() {
        return Err(req.arg_error(1, "dim", "a 0-d tensor has no dims"));
    }
    req.dim(1, "dim", meta.shape.len())
}

/// `Tensor.is_contiguous(memory_format)`, c10's `compute_contiguous` /
/// `compute_channels_last_contiguous_2d/3d`: size-1 dims are skipped; channels-last order is
/// C, W, H, N (and C, W, H, D, N for 3-d), and other ranks are never channels-last contiguous.
fn is_contiguous_as(
    req: &LowerRequest<'_>,
    shape: &[usize],
    strides: &[i64],
    format: &str,
) -> Result<bool, LowerError> {
    let order: &[usize] = match format {
        "contiguous_format" => return Ok(is_contiguous(shape, strides)),
        "channels_last" if shape.len() == 4 => &[1, 3, 2, 0],
        "channels_last_3d" if shape.len() == 5 => &[1, 4, 3, 2, 0],
        "channels_last" | "channels_last_3d" => return Ok(false),
        other => return Err(req.invalid(format!("unknown memory format `{other}`"))),
    };
    let mut expected = 1i64;
    for &d in order {
        if shape[d] != 1 {
            if strides[d] != expected {
                return Ok(false);
            }
            expected *= shape[d] as i64;
        }
    }
    Ok(true)
}
