//! The tolerances a backend's outputs are held to: PyTorch's `assert_close` defaults per dtype,
//! with per-op overrides that each carry their reason. One table, shared by the golden harness
//! (trnconf's `compare`) and the PyTorch device's check mode (through the Python package).

use crate::dtype::TorchDType;
use serde::Serialize;

/// `|actual − golden| ≤ atol + rtol·|golden|`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

impl Tolerance {
    pub const EXACT: Tolerance = Tolerance { rtol: 0.0, atol: 0.0 };

    pub fn is_exact(&self) -> bool {
        self.rtol == 0.0 && self.atol == 0.0
    }
}

/// `torch.testing.assert_close` defaults per dtype (torch/testing/_comparison.py
/// `_DTYPE_PRECISIONS`); integer, bool and float8 types compare exactly.
pub fn default_tolerance(dtype: TorchDType) -> Tolerance {
    match dtype {
        TorchDType::F32 | TorchDType::C64 => Tolerance {
            rtol: 1.3e-6,
            atol: 1e-5,
        },
        TorchDType::Bf16 => Tolerance {
            rtol: 1.6e-2,
            atol: 1e-5,
        },
        TorchDType::F16 => Tolerance { rtol: 1e-3, atol: 1e-5 },
        TorchDType::F8E4m3fn
        | TorchDType::F8E5m2
        | TorchDType::I64
        | TorchDType::I32
        | TorchDType::I16
        | TorchDType::I8
        | TorchDType::U8
        | TorchDType::Bool => Tolerance::EXACT,
    }
}

/// A per-op tolerance that replaces the default, with the reason it is justified.
pub struct ToleranceOverride {
    pub op: &'static str,
    /// `None`: every dtype of the op.
    pub dtype: Option<TorchDType>,
    pub tolerance: Tolerance,
    pub reason: &'static str,
}

/// Per-op overrides. Each needs a written reason; none are needed yet.
pub const TOLERANCE_OVERRIDES: &[ToleranceOverride] = &[];

/// The tolerance for one output of `op` in `dtype`, and the override reason if one applies.
pub fn tolerance_for(op: &str, dtype: TorchDType) -> (Tolerance, Option<&'static str>) {
    TOLERANCE_OVERRIDES
        .iter()
        .find(|o| o.op == op && o.dtype.is_none_or(|d| d == dtype))
        .map(|o| (o.tolerance, Some(o.reason)))
        .unwrap_or((default_tolerance(dtype), None))
}
