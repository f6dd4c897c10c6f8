//! Host-side tensors in PyTorch's dtypes, as golden files store them.
//!
//! [`TorchDType`] is the golden format's dtype set (docs/golden-format.md), which is wider than
//! what the device stores (`trnsim::DType`: no int64, no complex). [`Tensor`] holds contiguous
//! little-endian bytes; reading elements as numbers is for loading and comparison only — results
//! are never computed here.

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

    /// The safetensors dtype the golden format stores this dtype as.
    pub fn safetensors_dtype(self) -> safetensors::Dtype {
        use safetensors::Dtype;
        match self {
            TorchDType::F32 | TorchDType::C64 => Dtype::F32,
            TorchDType::Bf16 => Dtype::BF16,
            TorchDType::F16 => Dtype::F16,
            TorchDType::F8E4m3fn => Dtype::F8_E4M3,
            TorchDType::F8E5m2 => Dtype::F8_E5M2,
            TorchDType::I64 => Dtype::I64,
            TorchDType::I32 => Dtype::I32,
            TorchDType::I16 => Dtype::I16,
            TorchDType::I8 => Dtype::I8,
            TorchDType::U8 => Dtype::U8,
            TorchDType::Bool => Dtype::BOOL,
        }
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

/// A contiguous tensor: `shape` in PyTorch's sense (for c64 the complex shape, without the
/// trailing real/imaginary axis), `data` little-endian.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub dtype: TorchDType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

impl Tensor {
    pub fn new(dtype: TorchDType, shape: Vec<usize>, data: Vec<u8>) -> Self {
        Tensor { dtype, shape, data }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Number of scalar values: elements, or twice that for complex (real and imaginary parts).
    pub fn num_scalars(&self) -> usize {
        if self.dtype.is_complex() {
            2 * self.numel()
        } else {
            self.numel()
        }
    }

    /// Whether the byte length matches dtype and shape.
    pub fn is_consistent(&self) -> bool {
        self.numel().checked_mul(self.dtype.size()) == Some(self.data.len())
    }

    /// Raw bits of scalar `i` (for c64, scalar `i` is part `i % 2` of element `i / 2`).
    pub fn bits(&self, i: usize) -> u64 {
        let d = &self.data;
        match self.dtype {
            TorchDType::I64 => u64::from_le_bytes(d[8 * i..8 * i + 8].try_into().unwrap()),
            TorchDType::F32 | TorchDType::I32 | TorchDType::C64 => {
                u32::from_le_bytes(d[4 * i..4 * i + 4].try_into().unwrap()) as u64
            }
            TorchDType::Bf16 | TorchDType::F16 | TorchDType::I16 => {
                u16::from_le_bytes(d[2 * i..2 * i + 2].try_into().unwrap()) as u64
            }
            TorchDType::F8E4m3fn | TorchDType::F8E5m2 | TorchDType::I8 | TorchDType::U8 | TorchDType::Bool => {
                d[i] as u64
            }
        }
    }

    /// Scalar `i` as f64 (exact for every dtype but int64 beyond 2^53).
    pub fn value_f64(&self, i: usize) -> f64 {
        let b = self.bits(i);
        match self.dtype {
            TorchDType::F32 | TorchDType::C64 => f32::from_bits(b as u32) as f64,
            TorchDType::Bf16 => half::bf16::from_bits(b as u16).to_f64(),
            TorchDType::F16 => half::f16::from_bits(b as u16).to_f64(),
            TorchDType::F8E4m3fn => trnsim::DType::Fp8E4m3fn.decode_f32(b as u32) as f64,
            TorchDType::F8E5m2 => trnsim::DType::Fp8E5m2.decode_f32(b as u32) as f64,
            _ => self.value_i64(i) as f64,
        }
    }

    /// Scalar `i` of an integer or bool tensor, exactly.
    pub fn value_i64(&self, i: usize) -> i64 {
        let b = self.bits(i);
        match self.dtype {
            TorchDType::I64 => b as i64,
            TorchDType::I32 => b as u32 as i32 as i64,
            TorchDType::I16 => b as u16 as i16 as i64,
            TorchDType::I8 => b as u8 as i8 as i64,
            TorchDType::U8 | TorchDType::Bool => b as i64,
            _ => {
                let f = self.value_f64(i);
                if f.is_nan() { 0 } else { f as i64 }
            }
        }
    }

    /// Builds a tensor from f64 values (tests and fixture writers; rounds to nearest even).
    pub fn from_f64(dtype: TorchDType, shape: &[usize], vals: &[f64]) -> Tensor {
        let mut data = Vec::with_capacity(vals.len() * dtype.size());
        for &v in vals {
            match dtype {
                TorchDType::F32 | TorchDType::C64 => data.extend((v as f32).to_le_bytes()),
                TorchDType::Bf16 => data.extend(half::bf16::from_f32(v as f32).to_le_bytes()),
                TorchDType::F16 => data.extend(half::f16::from_f32(v as f32).to_le_bytes()),
                TorchDType::F8E4m3fn | TorchDType::F8E5m2 => {
                    let d = dtype.device_dtype().expect("fp8 types exist on the device");
                    data.extend(trnsim::HostTensor::from_f32_as(d, &[1], &[v as f32]).data)
                }
                TorchDType::I64 => data.extend((v as i64).to_le_bytes()),
                TorchDType::I32 => data.extend((v as i32).to_le_bytes()),
                TorchDType::I16 => data.extend((v as i16).to_le_bytes()),
                TorchDType::I8 => data.extend((v as i8).to_le_bytes()),
                TorchDType::U8 => data.push(v as u8),
                TorchDType::Bool => data.push((v != 0.0) as u8),
            }
        }
        Tensor {
            dtype,
            shape: shape.to_vec(),
            data,
        }
    }

    /// All scalars as f64.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        (0..self.num_scalars()).map(|i| self.value_f64(i)).collect()
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
    fn element_access() {
        let t = Tensor::from_f64(TorchDType::Bf16, &[3], &[1.0, -2.5, f64::INFINITY]);
        assert_eq!(t.to_f64_vec(), vec![1.0, -2.5, f64::INFINITY]);
        let t = Tensor::from_f64(TorchDType::I64, &[2], &[-3.0, 1e15]);
        assert_eq!(t.value_i64(0), -3);
        assert_eq!(t.value_i64(1), 1_000_000_000_000_000);
        let t = Tensor::from_f64(TorchDType::I8, &[1], &[-7.0]);
        assert_eq!(t.value_i64(0), -7);
        let c = Tensor::from_f64(TorchDType::C64, &[1], &[1.5, -2.0]);
        assert_eq!(c.num_scalars(), 2);
        assert_eq!(c.value_f64(1), -2.0);
        assert!(c.is_consistent());
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
