//! PyTorch's dtypes, by their golden-format names (docs/golden-format.md): wider than what the
//! device stores (`trnsim::DType`: no int64, no complex). Plus the index helpers of contiguous
//! tensors that lowerings and the harness share.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The dtypes a golden file may hold, by their golden-format names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TorchDType {
    #[serde(rename = "f32")]
    F32,
    #[serde(rename = "bf16")]
    Bf16,
    #[serde(rename = "f16")]
    F16,
    #[serde(rename = "f8e4m3fn")]
    F8E4m3fn,
    #[serde(rename = "f8e5m2")]
    F8E5m2,
    #[serde(rename = "i64")]
    I64,
    #[serde(rename = "i32")]
    I32,
    #[serde(rename = "i16")]
    I16,
    #[serde(rename = "i8")]
    I8,
    #[serde(rename = "u8")]
    U8,
    #[serde(rename = "bool")]
    Bool,
    /// complex64, stored as its real view (`[..., 2]` f32 pairs).
    #[serde(rename = "c64")]
    C64,
}

pub const ALL_TORCH_DTYPES: [TorchDType; 12] = [
    TorchDType::F32,
    TorchDType::Bf16,
    TorchDType::F16,
    TorchDType::F8E4m3fn,
    TorchDType::F8E5m2,
    TorchDType::I64,
    TorchDType::I32,
    TorchDType::I16,
    TorchDType::I8,
    TorchDType::U8,
    TorchDType::Bool,
    TorchDType::C64,
];

impl TorchDType {
    /// Golden-format name (`f32`, `bf16`, …).
    pub fn name(self) -> &'static str {
        match self {
            TorchDType::F32 => "f32",
            TorchDType::Bf16 => "bf16",
            TorchDType::F16 => "f16",
            TorchDType::F8E4m3fn => "f8e4m3fn",
            TorchDType::F8E5m2 => "f8e5m2",
            TorchDType::I64 => "i64",
            TorchDType::I32 => "i32",
            TorchDType::I16 => "i16",
            TorchDType::I8 => "i8",
            TorchDType::U8 => "u8",
            TorchDType::Bool => "bool",
            TorchDType::C64 => "c64",
        }
    }

    pub fn from_name(name: &str) -> Option<TorchDType> {
        ALL_TORCH_DTYPES.iter().copied().find(|d| d.name() == name)
    }

    /// PyTorch's name, used in failure messages worded like `torch.testing`.
    pub fn torch_name(self) -> &'static str {
        match self {
            TorchDType::F32 => "torch.float32",
            TorchDType::Bf16 => "torch.bfloat16",
            TorchDType::F16 => "torch.float16",
            TorchDType::F8E4m3fn => "torch.float8_e4m3fn",
            TorchDType::F8E5m2 => "torch.float8_e5m2",
            TorchDType::I64 => "torch.int64",
            TorchDType::I32 => "torch.int32",
            TorchDType::I16 => "torch.int16",
            TorchDType::I8 => "torch.int8",
            TorchDType::U8 => "torch.uint8",
            TorchDType::Bool => "torch.bool",
            TorchDType::C64 => "torch.complex64",
        }
    }

    /// Bytes per element (c64: both parts).
    pub fn size(self) -> usize {
        match self {
            TorchDType::I64 | TorchDType::C64 => 8,
            TorchDType::F32 | TorchDType::I32 => 4,
            TorchDType::Bf16 | TorchDType::F16 | TorchDType::I16 => 2,
            TorchDType::F8E4m3fn | TorchDType::F8E5m2 | TorchDType::I8 | TorchDType::U8 | TorchDType::Bool => 1,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            TorchDType::F32 | TorchDType::Bf16 | TorchDType::F16 | TorchDType::F8E4m3fn | TorchDType::F8E5m2
        )
    }

    pub fn is_complex(self) -> bool {
        self == TorchDType::C64
    }

    /// Integer types, not bool.
    pub fn is_int(self) -> bool {
        matches!(
            self,
            TorchDType::I64 | TorchDType::I32 | TorchDType::I16 | TorchDType::I8 | TorchDType::U8
        )
    }

    /// The device dtype that stores this dtype *without any conversion*, if there is one.
    /// int64 has none (Trainium has no int64: the runner narrows it at the boundary, see
    /// `runner::to_device`), nor has complex.
    pub fn device_dtype(self) -> Option<trnsim::DType> {
        use trnsim::DType;
        Some(match self {
            TorchDType::F32 => DType::F32,
            TorchDType::Bf16 => DType::Bf16,
            TorchDType::F16 => DType::F16,
            TorchDType::F8E4m3fn => DType::Fp8E4m3fn,
            TorchDType::F8E5m2 => DType::Fp8E5m2,
            TorchDType::I32 => DType::I32,
            TorchDType::I16 => DType::I16,
            TorchDType::I8 => DType::I8,
            TorchDType::U8 => DType::U8,
            TorchDType::Bool => DType::Bool,
            TorchDType::I64 | TorchDType::C64 => return None,
        })
    }

    /// Machine epsilon-ish unit: bits of precision of float types (for ULP bookkeeping).
    pub fn mantissa_bits(self) -> Option<u32> {
        match self {
            TorchDType::F32 | TorchDType::C64 => Some(23),
            TorchDType::Bf16 => Some(7),
            TorchDType::F16 => Some(10),
            TorchDType::F8E4m3fn => Some(3),
            TorchDType::F8E5m2 => Some(2),
            _ => None,
        }
    }
}

impl fmt::Display for TorchDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Row-major strides (in elements) of a contiguous tensor of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

/// Multi-index of flat element `i` in a contiguous tensor of `shape`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            idx[d] = i % shape[d];
            i /= shape[d];
        }
    }
    idx
}

/// Formats a multi-index like PyTorch does: `(1, 2)`, `(3,)`, `()`.
pub fn format_index(idx: &[usize]) -> String {
    match idx.len() {
        1 => format!("({},)", idx[0]),
        _ => format!("({})", idx.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in ALL_TORCH_DTYPES {
            assert_eq!(TorchDType::from_name(d.name()), Some(d));
            assert_eq!(serde_json::to_string(&d).unwrap(), format!("\"{}\"", d.name()));
        }
    }

    #[test]
    fn index_helpers() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(unravel(23, &[2, 3, 4]), vec![1, 2, 3]);
        assert_eq!(format_index(&[3]), "(3,)");
        assert_eq!(format_index(&[1, 2]), "(1, 2)");
        assert_eq!(format_index(&[]), "()");
    }
}
