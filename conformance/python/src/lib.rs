//! `trnsim._native`: the PyO3 layer of the Python package `trnsim` (docs/python.md).
//!
//! This module moves bytes, not arrays: tensors cross the boundary as `(dtype name, shape, bytes)`
//! and the Python layer (`python/trnsim/__init__.py`) turns them into NumPy arrays of the matching
//! NumPy / ml_dtypes dtype. That keeps the native side free of NumPy's C API (no version coupling)
//! and makes bf16/fp8 bit-exact by construction: element bytes are never converted.
//!
//! Statistics and numerics cross as JSON text (serde), so every field the Rust structs gain shows
//! up in Python without a binding change.

mod convert;
mod errors;
mod lowering;
mod program;
mod session;

use pyo3::prelude::*;

/// Native half of the `trnsim` package; use `import trnsim`, not this module.
#[pymodule]
mod _native {
    #[pymodule_export]
    use crate::lowering::{device_dtype, is_lowered, lower_op, tolerance};
    #[pymodule_export]
    use crate::program::{Program, numerics_default_json, numerics_normalize_json, run, target_params_json};
    #[pymodule_export]
    use crate::session::Session;

    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        // The hash of the sources this module was built from (source_hash.rs), so a test can
        // refuse an install that is older than the tree.
        m.add("SOURCE_HASH", env!("TRNSIM_SOURCE_HASH"))?;
        m.add(
            "DTYPES",
            trnsim::ALL_DTYPES
                .iter()
                .map(|&d| crate::convert::dtype_name(d))
                .collect::<Vec<_>>(),
        )?;
        Ok(())
    }
}
