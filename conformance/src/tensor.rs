//! Host-side tensors in PyTorch's dtypes, as golden files store them.
//!
//! [`TorchDType`] is the golden format's dtype set (docs/golden-format.md), which is wider than
//! what the device stores (`trnsim::DType`: no int64, no complex). [`Tensor`] holds contiguous
//! little-endian bytes; reading elements as numbers is for loading and comparison only — results
//! are never computed here.

pub use trnlower::dtype::{ALL_TORCH_DTYPES, TorchDType, contiguous_strides, format_index, unravel};

/// How the golden format stores a [`TorchDType`] in safetensors (the lowering crate knows no file
/// format, so this lives with the harness).
pub trait StoredDtype {
    /// The safetensors dtype the golden format stores this dtype as.
    fn safetensors_dtype(self) -> safetensors::Dtype;
}

impl StoredDtype for TorchDType {
    fn safetensors_dtype(self) -> safetensors::Dtype {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
