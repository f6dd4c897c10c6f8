//! PyTorch's type promotion (`torch.result_type` / `torch.promote_types`), for the dtypes golden
//! files hold. Lowerings use it to pick the output dtype the way PyTorch does: dimensioned
//! tensors outrank 0-d tensors, which outrank Python scalars ("wrapped numbers"); a lower-priority
//! operand only matters when it is of a higher *category* (bool < integer < float < complex).
//! Source: c10/core/ScalarType.h `promoteTypes`, aten/src/ATen/native/TypeProperties.cpp
//! `update_result_type_state` / `result_type`.

use crate::dtype::TorchDType;

/// bool < integer < float < complex.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    Bool,
    Integer,
    Float,
    Complex,
}

pub fn category(d: TorchDType) -> Category {
    if d == TorchDType::Bool {
        Category::Bool
    } else if d.is_int() {
        Category::Integer
    } else if d.is_complex() {
        Category::Complex
    } else {
        Category::Float
    }
}

/// PyTorch's default dtypes: `torch.get_default_dtype()` is float32.
pub const DEFAULT_FLOAT: TorchDType = TorchDType::F32;
pub const DEFAULT_INT: TorchDType = TorchDType::I64;
pub const DEFAULT_COMPLEX: TorchDType = TorchDType::C64;

/// Why two dtypes cannot be promoted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("PyTorch does not promote {0} with {1}")]
pub struct PromotionError(pub TorchDType, pub TorchDType);

/// `torch.promote_types(a, b)` over the golden dtypes.
pub fn promote_types(a: TorchDType, b: TorchDType) -> Result<TorchDType, PromotionError> {
    use TorchDType::*;
    if a == b {
        return Ok(a);
    }
    // PyTorch refuses to promote float8 types with anything else.
    if matches!(a, F8E4m3fn | F8E5m2) || matches!(b, F8E4m3fn | F8E5m2) {
        return Err(PromotionError(a, b));
    }
    let (ca, cb) = (category(a), category(b));
    if ca != cb {
        let hi = if ca > cb { a } else { b };
        return Ok(match category(hi) {
            // Complex with a float keeps complex64 here: every golden float is ≤ 32 bits.
            Category::Complex => C64,
            // Integer or bool with a float: the float; bool with an integer: the integer.
            _ => hi,
        });
    }
    Ok(match ca {
        Category::Float => {
            // f32 wins; bf16 with f16 has no common 16-bit type: f32.
            F32
        }
        Category::Integer => {
            let rank = |d: TorchDType| match d {
                I8 | U8 => 1,
                I16 => 2,
                I32 => 3,
                _ => 4,
            };
            // uint8 with int8 needs int16 to hold both ranges; otherwise the wider wins.
            if (a == U8 && b == I8) || (a == I8 && b == U8) {
                I16
            } else if rank(a) >= rank(b) {
                a
            } else {
                b
            }
        }
        _ => a,
    })
}

/// A Python scalar argument, by its Python type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarKind {
    Bool,
    Int,
    Float,
    Complex,
}

/// An operand of a promoting op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    /// A tensor of `dim` dimensions (`dim == 0`: a 0-d tensor).
    Tensor { dtype: TorchDType, dim: usize },
    /// A Python number (a "wrapped number" in ATen).
    Scalar(ScalarKind),
}

fn promote_opt(a: Option<TorchDType>, b: TorchDType) -> Result<Option<TorchDType>, PromotionError> {
    Ok(Some(match a {
        None => b,
        Some(a) => promote_types(a, b)?,
    }))
}

/// c10's `combine_categories(higher, lower)`.
fn combine(higher: Option<TorchDType>, lower: Option<TorchDType>) -> Result<Option<TorchDType>, PromotionError> {
    let Some(h) = higher else { return Ok(lower) };
    let Some(l) = lower else { return Ok(higher) };
    let (ch, cl) = (category(h), category(l));
    if ch == Category::Complex {
        return Ok(Some(h));
    }
    if cl == Category::Complex {
        return Ok(Some(if ch == Category::Float { promote_types(h, l)? } else { l }));
    }
    if ch == Category::Float {
        return Ok(Some(h));
    }
    if h == TorchDType::Bool || cl == Category::Float {
        return Ok(Some(promote_types(h, l)?));
    }
    Ok(Some(h))
}

/// `torch.result_type` over the operands.
pub fn result_type(operands: &[Operand]) -> Result<TorchDType, PromotionError> {
    let (mut dim, mut zero, mut wrapped) = (None, None, None);
    for op in operands {
        match *op {
            Operand::Tensor { dtype, dim: d } if d > 0 => dim = promote_opt(dim, dtype)?,
            Operand::Tensor { dtype, .. } => zero = promote_opt(zero, dtype)?,
            Operand::Scalar(kind) => {
                // A Python float is a double wrapped number, which counts as the default dtype.
                let d = match kind {
                    ScalarKind::Bool => TorchDType::Bool,
                    ScalarKind::Int => DEFAULT_INT,
                    ScalarKind::Float => DEFAULT_FLOAT,
                    ScalarKind::Complex => DEFAULT_COMPLEX,
                };
                wrapped = promote_opt(wrapped, d)?;
            }
        }
    }
    Ok(combine(dim, combine(zero, wrapped)?)?.unwrap_or(DEFAULT_FLOAT))
}

/// The dtype true division computes and returns: integer and bool results become the default
/// float dtype (`int / int → float32`).
pub fn true_divide_type(operands: &[Operand]) -> Result<TorchDType, PromotionError> {
    let t = result_type(operands)?;
    Ok(if category(t) <= Category::Integer {
        DEFAULT_FLOAT
    } else {
        t
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use TorchDType::*;

    fn t(dtype: TorchDType, dim: usize) -> Operand {
        Operand::Tensor { dtype, dim }
    }

    #[test]
    fn promote_types_table() {
        // Matches torch.promote_types for these pairs.
        let cases = [
            (F32, Bf16, F32),
            (Bf16, F16, F32),
            (F16, F16, F16),
            (I32, F16, F16),
            (I64, Bf16, Bf16),
            (Bool, I32, I32),
            (Bool, F16, F16),
            (U8, I8, I16),
            (U8, I16, I16),
            (I8, I32, I32),
            (I32, I64, I64),
            (Bool, U8, U8),
            (F32, C64, C64),
            (I64, C64, C64),
        ];
        for (a, b, want) in cases {
            assert_eq!(promote_types(a, b).unwrap(), want, "{a} {b}");
            assert_eq!(promote_types(b, a).unwrap(), want, "{b} {a}");
        }
        assert!(promote_types(F8E4m3fn, F32).is_err());
        assert_eq!(promote_types(F8E5m2, F8E5m2).unwrap(), F8E5m2);
    }

    #[test]
    fn result_type_with_scalars_and_zero_dim() {
        // torch.ones(2, dtype=torch.int32) + 2.5 -> float32
        assert_eq!(
            result_type(&[t(I32, 1), Operand::Scalar(ScalarKind::Float)]).unwrap(),
            F32
        );
        // int32 tensor + python int -> int32 (same category: the tensor wins)
        assert_eq!(
            result_type(&[t(I32, 1), Operand::Scalar(ScalarKind::Int)]).unwrap(),
            I32
        );
        // bool tensor + python int -> int64
        assert_eq!(
            result_type(&[t(Bool, 1), Operand::Scalar(ScalarKind::Int)]).unwrap(),
            I64
        );
        // bool tensor + python bool -> bool
        assert_eq!(
            result_type(&[t(Bool, 2), Operand::Scalar(ScalarKind::Bool)]).unwrap(),
            Bool
        );
        // bf16 tensor + python float -> bf16
        assert_eq!(
            result_type(&[t(Bf16, 1), Operand::Scalar(ScalarKind::Float)]).unwrap(),
            Bf16
        );
        // f16 tensor + 0-d f32 tensor -> f16 (dimensioned tensor wins within a category)
        assert_eq!(result_type(&[t(F16, 3), t(F32, 0)]).unwrap(), F16);
        // int32 tensor + 0-d f16 tensor -> f16 (higher category)
        assert_eq!(result_type(&[t(I32, 1), t(F16, 0)]).unwrap(), F16);
        // int32 tensor + 0-d int64 tensor -> int32
        assert_eq!(result_type(&[t(I32, 1), t(I64, 0)]).unwrap(), I32);
        // two 0-d tensors promote normally
        assert_eq!(result_type(&[t(I32, 0), t(I64, 0)]).unwrap(), I64);
        // 0-d int tensor + python float -> default float
        assert_eq!(
            result_type(&[t(I64, 0), Operand::Scalar(ScalarKind::Float)]).unwrap(),
            F32
        );
        // 0-d bf16 + python float -> bf16 (0-d tensor outranks the scalar)
        assert_eq!(
            result_type(&[t(Bf16, 0), Operand::Scalar(ScalarKind::Float)]).unwrap(),
            Bf16
        );
        // dimensioned f32 with bf16 -> f32
        assert_eq!(result_type(&[t(Bf16, 1), t(F32, 2)]).unwrap(), F32);
        // u8 tensor + 0-d i8 tensor -> u8; both dimensioned -> i16
        assert_eq!(result_type(&[t(U8, 1), t(I8, 0)]).unwrap(), U8);
        assert_eq!(result_type(&[t(U8, 1), t(I8, 1)]).unwrap(), I16);
        // f32 tensor + python complex -> complex64
        assert_eq!(
            result_type(&[t(F32, 1), Operand::Scalar(ScalarKind::Complex)]).unwrap(),
            C64
        );
    }

    #[test]
    fn true_division() {
        assert_eq!(true_divide_type(&[t(I32, 1), t(I32, 1)]).unwrap(), F32);
        assert_eq!(
            true_divide_type(&[t(I64, 1), Operand::Scalar(ScalarKind::Int)]).unwrap(),
            F32
        );
        assert_eq!(true_divide_type(&[t(Bool, 1), t(Bool, 1)]).unwrap(), F32);
        assert_eq!(
            true_divide_type(&[t(Bf16, 1), Operand::Scalar(ScalarKind::Int)]).unwrap(),
            Bf16
        );
        assert_eq!(true_divide_type(&[t(F16, 1), t(F16, 1)]).unwrap(), F16);
    }
}
