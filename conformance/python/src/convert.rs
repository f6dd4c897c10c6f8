//! Conversions between Python values and trnsim types: dtype and target names, tensors as
//! `(dtype name, shape, bytes)`, numerics as JSON.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};
use trnsim::{DType, HostTensor, Numerics, TargetName};

/// A tensor as it crosses the boundary: `(dtype name, shape, bytes)`.
pub type WireTensor<'py> = (String, Vec<usize>, Bound<'py, PyBytes>);

/// A dtype's name as program JSON spells it (serde: `f32`, `bf16`, `fp8_e4m3fn`, …), which is
/// the name the Python package uses everywhere.
pub fn dtype_name(dtype: DType) -> String {
    match serde_json::to_value(dtype) {
        Ok(serde_json::Value::String(s)) => s,
        _ => dtype.name().to_string(),
    }
}

/// Parses a dtype name as program JSON spells it.
pub fn dtype(name: &str) -> PyResult<DType> {
    serde_json::from_value(serde_json::Value::String(name.to_string())).map_err(|_| {
        let known: Vec<String> = trnsim::ALL_DTYPES.iter().map(|&d| dtype_name(d)).collect();
        PyTypeError::new_err(format!("unknown trnsim dtype `{name}` (known: {})", known.join(", ")))
    })
}

pub fn target(name: &str) -> PyResult<TargetName> {
    TargetName::from_name(name)
        .ok_or_else(|| PyValueError::new_err(format!("unknown target `{name}` (known: trn1, trn2)")))
}

/// Builds a host tensor from wire form, checking that the bytes fill the shape exactly.
pub fn host_tensor(name: &str, wire: &WireTensor<'_>) -> PyResult<HostTensor> {
    let (dtype_name, shape, bytes) = wire;
    let dtype = dtype(dtype_name)?;
    let bytes = bytes.as_bytes();
    let expected = shape
        .iter()
        .try_fold(dtype.size(), |acc, &s| acc.checked_mul(s))
        .ok_or_else(|| PyValueError::new_err(format!("tensor `{name}`: shape {shape:?} overflows")))?;
    if bytes.len() != expected {
        return Err(PyValueError::new_err(format!(
            "tensor `{name}`: {} bytes given, {dtype_name} {shape:?} needs {expected}",
            bytes.len()
        )));
    }
    Ok(HostTensor {
        dtype,
        shape: shape.clone(),
        data: bytes.to_vec(),
    })
}

/// A host tensor in wire form; the bytes are a `bytearray` so NumPy can wrap them writable
/// without another copy.
pub fn wire_out<'py>(
    py: Python<'py>,
    dtype: DType,
    shape: &[usize],
    data: &[u8],
) -> (String, Vec<usize>, Bound<'py, PyByteArray>) {
    (dtype_name(dtype), shape.to_vec(), PyByteArray::new(py, data))
}

/// Parses numerics settings given as JSON text (`None`: the defaults). Unknown fields are refused
/// here, not silently ignored (serde would ignore them).
pub fn numerics(json: Option<&str>) -> PyResult<Numerics> {
    let Some(json) = json else {
        return Ok(Numerics::default());
    };
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| PyValueError::new_err(format!("numerics: {e}")))?;
    let known = serde_json::to_value(Numerics::default()).expect("numerics serialize");
    if let (Some(given), Some(known)) = (value.as_object(), known.as_object())
        && let Some(unknown) = given.keys().find(|k| !known.contains_key(*k))
    {
        let names: Vec<&String> = known.keys().collect();
        return Err(PyValueError::new_err(format!(
            "unknown numerics setting `{unknown}` (settings: {names:?})"
        )));
    }
    serde_json::from_value(value).map_err(|e| PyValueError::new_err(format!("numerics: {e}")))
}
