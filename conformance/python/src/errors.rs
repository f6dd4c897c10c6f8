//! Simulator errors as Python exceptions: every `trnsim::SimError` becomes a `trnsim.SimError`
//! (defined in Python, `python/trnsim/_errors.py`, because abi3 below Python 3.12 cannot subclass
//! `Exception` natively) carrying the instruction index, engine, opcode, operand, error kind,
//! the instruction's source location and the message.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use trnsim::{ErrorKind, SimError};

/// The error kind's variant name in snake_case (`UninitializedRead` → `uninitialized_read`):
/// the stable, matchable name of what was violated. Taken from `Debug` so a variant added to
/// trnsim needs no change here.
pub fn kind_name(kind: &ErrorKind) -> String {
    let debug = format!("{kind:?}");
    let variant = debug.split(|c: char| !c.is_alphanumeric()).next().unwrap_or("");
    let mut out = String::with_capacity(variant.len() + 4);
    for (i, c) in variant.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Converts a simulator error into a raised `trnsim.SimError`.
pub fn to_py(py: Python<'_>, e: &SimError) -> PyErr {
    match build(py, e) {
        Ok(err) => err,
        Err(err) => err,
    }
}

fn build(py: Python<'_>, e: &SimError) -> PyResult<PyErr> {
    let class = py.import("trnsim._errors")?.getattr("SimError")?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("kind", kind_name(&e.kind))?;
    kwargs.set_item("index", e.index)?;
    kwargs.set_item("engine", e.engine.map(|x| x.name()))?;
    kwargs.set_item("opcode", e.opcode)?;
    kwargs.set_item("operand", e.operand.as_deref())?;
    kwargs.set_item("loc", e.loc.as_deref())?;
    kwargs.set_item("message", e.kind.to_string())?;
    let value = class.call((e.to_string(),), Some(&kwargs))?;
    Ok(PyErr::from_value(value))
}
