//! ALU operator semantics shared by every engine.
//!
//! Arithmetic operators compute in fp32 (inputs already converted to f32 by the read, results
//! cast by the write). Bitvec operators act on raw integer bits. GpSimd's exact int32 path uses
//! [`apply_int`]. The NaN policy of max/min and subnormal flushing are settings (docs/numerics.md).

use crate::error::ErrorKind;
use crate::numerics::{Denormals, NanMaxMin, Numerics};
use crate::program::AluOp;

/// The NaN every arithmetic ALU result that is NaN becomes. When both operands are NaN, IEEE
/// leaves open which one propagates (and LLVM may commute the operation), so the simulator writes
/// one canonical quiet NaN to stay deterministic across builds. The hardware's NaN bits are
/// unpublished; NaN is compared by class everywhere downstream.
pub const CANONICAL_NAN: f32 = f32::from_bits(0x7FC0_0000);

#[inline]
pub(crate) fn canon(r: f32) -> f32 {
    if r.is_nan() { CANONICAL_NAN } else { r }
}

#[inline]
fn ftz(x: f32, n: &Numerics) -> f32 {
    if n.denormals == Denormals::FlushToZero && x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}

#[inline]
fn b2f(b: bool) -> f32 {
    if b { 1.0 } else { 0.0 }
}

/// `a op b` in fp32. Unary ops ignore `b`. Bitvec ops are not arithmetic: the caller routes them
/// to [`apply_bits`]; here they act on the values truncated to integers.
#[inline]
pub fn apply_f32(op: AluOp, a: f32, b: f32, n: &Numerics) -> f32 {
    let a = ftz(a, n);
    let b = ftz(b, n);
    let r = match op {
        AluOp::Bypass => a,
        AluOp::Add => a + b,
        AluOp::Subtract => a - b,
        AluOp::Multiply => a * b,
        AluOp::Max => max(a, b, n.nan_max_min),
        AluOp::Min => min(a, b, n.nan_max_min),
        AluOp::IsEqual => b2f(a == b),
        AluOp::NotEqual => b2f(a != b),
        AluOp::IsGe => b2f(a >= b),
        AluOp::IsGt => b2f(a > b),
        AluOp::IsLe => b2f(a <= b),
        AluOp::IsLt => b2f(a < b),
        AluOp::LogicalAnd => b2f(a != 0.0 && b != 0.0),
        AluOp::LogicalOr => b2f(a != 0.0 || b != 0.0),
        AluOp::LogicalXor => b2f((a != 0.0) != (b != 0.0)),
        AluOp::LogicalNot => b2f(a == 0.0),
        AluOp::Abs => a.abs(),
        // Correctly rounded: computed in f64 and rounded once.
        AluOp::Reciprocal => (1.0 / a as f64) as f32,
        AluOp::Rsqrt => (1.0 / (a as f64).sqrt()) as f32,
        AluOp::Pow => pow(a, b),
        AluOp::Average => ((a as f64 + b as f64) * 0.5) as f32,
        AluOp::BitwiseAnd
        | AluOp::BitwiseOr
        | AluOp::BitwiseXor
        | AluOp::BitwiseNot
        | AluOp::ShiftLeft
        | AluOp::LogicalShiftRight => {
            let ai = a as i64;
            let bi = b as i64;
            apply_bits(op, ai as u32, bi as u32, 32) as i32 as f32
        }
    };
    canon(ftz(r, n))
}

/// `a[i] = apply_f32(op, a[i], b[i], n)` over whole slices, bit-identical to the element-wise
/// call; the operator is dispatched once so that add/subtract/multiply run as plain vectorized
/// loops (performance only).
pub fn apply_f32_inplace(op: AluOp, a: &mut [f32], b: &[f32], n: &Numerics) {
    fn zip(a: &mut [f32], b: &[f32], f: impl Fn(f32, f32) -> f32) {
        a.iter_mut().zip(b).for_each(|(x, &y)| *x = f(*x, y));
    }
    match (op, n.denormals) {
        (AluOp::Add, Denormals::Preserve) => zip(a, b, |x, y| canon(x + y)),
        (AluOp::Subtract, Denormals::Preserve) => zip(a, b, |x, y| canon(x - y)),
        (AluOp::Multiply, Denormals::Preserve) => zip(a, b, |x, y| canon(x * y)),
        // Comparisons give 0 or 1, which `canon` leaves alone.
        (AluOp::IsEqual, Denormals::Preserve) => zip(a, b, |x, y| b2f(x == y)),
        (AluOp::NotEqual, Denormals::Preserve) => zip(a, b, |x, y| b2f(x != y)),
        (AluOp::IsGe, Denormals::Preserve) => zip(a, b, |x, y| b2f(x >= y)),
        (AluOp::IsGt, Denormals::Preserve) => zip(a, b, |x, y| b2f(x > y)),
        (AluOp::IsLe, Denormals::Preserve) => zip(a, b, |x, y| b2f(x <= y)),
        (AluOp::IsLt, Denormals::Preserve) => zip(a, b, |x, y| b2f(x < y)),
        _ => zip(a, b, |x, y| apply_f32(op, x, y, n)),
    }
}

/// `a[i] = apply_f32(op, a[i], s, n)` (`apply_f32(op, s, a[i], n)` when `reverse`) over a
/// slice, bit-identical to the element-wise call; add/subtract/multiply with denormals preserved
/// run as plain vectorized loops (performance only; IEEE add and multiply are commutative, and
/// [`canon`] fixes the NaN either order would give).
pub fn apply_scalar_f32_inplace(op: AluOp, a: &mut [f32], s: f32, reverse: bool, n: &Numerics) {
    fn each(a: &mut [f32], f: impl Fn(f32) -> f32) {
        a.iter_mut().for_each(|x| *x = f(*x));
    }
    match (op, reverse, n.denormals) {
        (AluOp::Add, _, Denormals::Preserve) => each(a, |x| canon(x + s)),
        (AluOp::Multiply, _, Denormals::Preserve) => each(a, |x| canon(x * s)),
        (AluOp::Subtract, false, Denormals::Preserve) => each(a, |x| canon(x - s)),
        (AluOp::Subtract, true, Denormals::Preserve) => each(a, |x| canon(s - x)),
        _ if reverse => each(a, |x| apply_f32(op, s, x, n)),
        _ => each(a, |x| apply_f32(op, x, s, n)),
    }
}

fn pow(a: f32, b: f32) -> f32 {
    // C powf semantics (pow(x, 0) = 1, pow(1, y) = 1 even for NaN), computed in f64.
    (a as f64).powf(b as f64) as f32
}

#[inline]
pub(crate) fn max(a: f32, b: f32, p: NanMaxMin) -> f32 {
    match p {
        NanMaxMin::Propagate if a.is_nan() || b.is_nan() => f32::NAN,
        NanMaxMin::PreferNumber if a.is_nan() => b,
        NanMaxMin::PreferNumber if b.is_nan() => a,
        // max(-0, +0) = +0
        _ if a == b => {
            if a.is_sign_negative() {
                b
            } else {
                a
            }
        }
        _ => {
            if a > b {
                a
            } else {
                b
            }
        }
    }
}

#[inline]
fn min(a: f32, b: f32, p: NanMaxMin) -> f32 {
    match p {
        NanMaxMin::Propagate if a.is_nan() || b.is_nan() => f32::NAN,
        NanMaxMin::PreferNumber if a.is_nan() => b,
        NanMaxMin::PreferNumber if b.is_nan() => a,
        _ if a == b => {
            if a.is_sign_negative() {
                a
            } else {
                b
            }
        }
        _ => {
            if a < b {
                a
            } else {
                b
            }
        }
    }
}

/// Bitvec op on raw bits of width `bits` (8, 16 or 32). Shifts by ≥ width give 0.
#[inline]
pub fn apply_bits(op: AluOp, a: u32, b: u32, bits: u32) -> u32 {
    let mask = if bits >= 32 { u32::MAX } else { (1u32 << bits) - 1 };
    let r = match op {
        AluOp::BitwiseAnd => a & b,
        AluOp::BitwiseOr => a | b,
        AluOp::BitwiseXor => a ^ b,
        AluOp::BitwiseNot => !a,
        AluOp::ShiftLeft => {
            if b >= bits {
                0
            } else {
                a << b
            }
        }
        AluOp::LogicalShiftRight => {
            if b >= bits {
                0
            } else {
                (a & mask) >> b
            }
        }
        _ => a,
    };
    r & mask
}

/// Exact integer op (GpSimd int32 path). Results wrap to 32 bits like PyTorch's int32
/// arithmetic; the write then stores them. Division-like ops do not exist here.
pub fn apply_int(op: AluOp, a: i64, b: i64) -> Result<i64, ErrorKind> {
    let wrap = |v: i64| v as i32 as i64;
    Ok(match op {
        AluOp::Bypass => a,
        AluOp::Add => wrap(a.wrapping_add(b)),
        AluOp::Subtract => wrap(a.wrapping_sub(b)),
        AluOp::Multiply => wrap(a.wrapping_mul(b)),
        AluOp::Max => a.max(b),
        AluOp::Min => a.min(b),
        AluOp::IsEqual => (a == b) as i64,
        AluOp::NotEqual => (a != b) as i64,
        AluOp::IsGe => (a >= b) as i64,
        AluOp::IsGt => (a > b) as i64,
        AluOp::IsLe => (a <= b) as i64,
        AluOp::IsLt => (a < b) as i64,
        AluOp::LogicalAnd => (a != 0 && b != 0) as i64,
        AluOp::LogicalOr => (a != 0 || b != 0) as i64,
        AluOp::LogicalXor => ((a != 0) != (b != 0)) as i64,
        AluOp::LogicalNot => (a == 0) as i64,
        AluOp::Abs => wrap(a.wrapping_abs()),
        AluOp::BitwiseAnd => a & b,
        AluOp::BitwiseOr => a | b,
        AluOp::BitwiseXor => a ^ b,
        AluOp::BitwiseNot => !a,
        AluOp::ShiftLeft => {
            if !(0..32).contains(&b) {
                0
            } else {
                wrap(a << b)
            }
        }
        AluOp::LogicalShiftRight => {
            if !(0..32).contains(&b) {
                0
            } else {
                ((a as u32) >> b) as i64
            }
        }
        AluOp::Reciprocal | AluOp::Rsqrt | AluOp::Pow | AluOp::Average => {
            return Err(ErrorKind::Unsupported(format!(
                "{} has no exact integer form",
                op.name()
            )));
        }
    })
}

/// [`apply_int`] in 64-bit two's complement: GpSimdE's exact path for `i64` operands
/// (`Numerics::int64_alu = gpsimd_exact`, docs/numerics.md "Native int64"). Arithmetic wraps
/// modulo 2^64 as PyTorch's int64 does; shifts outside 0..64 give 0.
pub fn apply_int64(op: AluOp, a: i64, b: i64) -> Result<i64, ErrorKind> {
    Ok(match op {
        AluOp::Add => a.wrapping_add(b),
        AluOp::Subtract => a.wrapping_sub(b),
        AluOp::Multiply => a.wrapping_mul(b),
        AluOp::Abs => a.wrapping_abs(),
        AluOp::ShiftLeft => {
            if (0..64).contains(&b) {
                a.wrapping_shl(b as u32)
            } else {
                0
            }
        }
        AluOp::LogicalShiftRight => {
            if (0..64).contains(&b) {
                ((a as u64) >> b) as i64
            } else {
                0
            }
        }
        // Comparisons, logic, bitwise ops, max/min and bypass are width-independent.
        _ => return apply_int(op, a, b),
    })
}

/// Identity element of a reduction operator (in fp32).
pub fn reduce_identity(op: AluOp) -> Option<f32> {
    Some(match op {
        AluOp::Add | AluOp::Subtract | AluOp::Average | AluOp::LogicalOr | AluOp::LogicalXor => 0.0,
        AluOp::Multiply | AluOp::LogicalAnd => 1.0,
        AluOp::Max => f32::NEG_INFINITY,
        AluOp::Min => f32::INFINITY,
        AluOp::BitwiseOr | AluOp::BitwiseXor => 0.0,
        AluOp::BitwiseAnd => -1.0,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n() -> Numerics {
        Numerics::default()
    }

    #[test]
    fn arithmetic_is_fp32() {
        // 1 + 2^-24 is not representable in f32: the sum rounds back to 1.
        assert_eq!(apply_f32(AluOp::Add, 1.0, 2f32.powi(-24), &n()), 1.0);
        assert_eq!(apply_f32(AluOp::Subtract, 5.0, 7.5, &n()), -2.5);
        assert_eq!(apply_f32(AluOp::Multiply, 3.0, -0.5, &n()), -1.5);
    }

    #[test]
    fn compare_gives_one_or_zero() {
        assert_eq!(apply_f32(AluOp::IsLt, 1.0, 2.0, &n()), 1.0);
        assert_eq!(apply_f32(AluOp::IsGe, 1.0, 2.0, &n()), 0.0);
        assert_eq!(apply_f32(AluOp::IsEqual, f32::NAN, f32::NAN, &n()), 0.0);
        assert_eq!(apply_f32(AluOp::NotEqual, f32::NAN, 1.0, &n()), 1.0);
    }

    #[test]
    fn max_min_nan_policy_and_signed_zero() {
        assert!(apply_f32(AluOp::Max, f32::NAN, 1.0, &n()).is_nan());
        let prefer = Numerics {
            nan_max_min: NanMaxMin::PreferNumber,
            ..n()
        };
        assert_eq!(apply_f32(AluOp::Max, f32::NAN, 1.0, &prefer), 1.0);
        assert_eq!(apply_f32(AluOp::Min, 2.0, f32::NAN, &prefer), 2.0);
        assert!(apply_f32(AluOp::Max, -0.0, 0.0, &n()).is_sign_positive());
        assert!(apply_f32(AluOp::Min, 0.0, -0.0, &n()).is_sign_negative());
    }

    #[test]
    fn flush_to_zero_setting() {
        let ftz = Numerics {
            denormals: Denormals::FlushToZero,
            ..n()
        };
        let sub = f32::from_bits(1);
        assert_eq!(apply_f32(AluOp::Add, sub, 0.0, &ftz), 0.0);
        assert_eq!(apply_f32(AluOp::Add, sub, 0.0, &n()), sub);
    }

    #[test]
    fn bitvec_on_raw_bits() {
        assert_eq!(apply_bits(AluOp::BitwiseAnd, 0xF0, 0x3C, 8), 0x30);
        assert_eq!(apply_bits(AluOp::BitwiseNot, 0x0F, 0, 8), 0xF0);
        assert_eq!(apply_bits(AluOp::ShiftLeft, 0x81, 1, 8), 0x02);
        assert_eq!(apply_bits(AluOp::LogicalShiftRight, 0x8000_0000, 31, 32), 1);
        assert_eq!(apply_bits(AluOp::ShiftLeft, 1, 40, 32), 0);
    }

    #[test]
    fn integer_path_is_exact_and_wraps() {
        assert_eq!(apply_int(AluOp::Add, 16_777_217, 1).unwrap(), 16_777_218);
        assert_eq!(apply_int(AluOp::Add, i32::MAX as i64, 1).unwrap(), i32::MIN as i64);
        assert_eq!(apply_int(AluOp::Multiply, 65_536, 65_536).unwrap(), 0);
        assert!(apply_int(AluOp::Reciprocal, 2, 0).is_err());
    }
}

#[cfg(test)]
mod nan_tests {
    use super::*;

    #[test]
    fn nan_results_are_canonical_whatever_the_operands() {
        let n = Numerics::default();
        let neg_payload = f32::from_bits(0xFFC0_1234);
        let pos_payload = f32::from_bits(0x7F80_0001);
        for op in [AluOp::Add, AluOp::Subtract, AluOp::Multiply] {
            let r = apply_f32(op, neg_payload, pos_payload, &n);
            assert_eq!(r.to_bits(), CANONICAL_NAN.to_bits(), "{op:?}");
            let mut a = [neg_payload, f32::INFINITY, 1.0];
            apply_f32_inplace(op, &mut a, &[pos_payload, f32::NEG_INFINITY, 2.0], &n);
            assert_eq!(a[0].to_bits(), CANONICAL_NAN.to_bits(), "{op:?} in place");
        }
        // inf - inf and 0 * inf are NaN too.
        assert_eq!(
            apply_f32(AluOp::Add, f32::INFINITY, f32::NEG_INFINITY, &n).to_bits(),
            CANONICAL_NAN.to_bits()
        );
        assert_eq!(
            apply_f32(AluOp::Multiply, 0.0, f32::INFINITY, &n).to_bits(),
            CANONICAL_NAN.to_bits()
        );
    }
}

#[cfg(test)]
mod fast_path_tests {
    use super::*;

    /// The slice fast paths give exactly the element-wise `apply_f32` bits, for every operand
    /// order, on special values, under both denormal settings.
    #[test]
    fn scalar_inplace_is_bit_identical_to_apply_f32() {
        let vals = [
            0.0,
            -0.0,
            1.0,
            -1.5,
            3.0e38,
            -3.0e38,
            f32::MIN_POSITIVE,
            f32::from_bits(1),
            -f32::from_bits(0x7F_FFFF),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::from_bits(0xFFC0_1234),
            1.0e-30,
            7.25,
        ];
        for denormals in [Denormals::Preserve, Denormals::FlushToZero] {
            let n = Numerics {
                denormals,
                ..Numerics::default()
            };
            for op in [AluOp::Add, AluOp::Subtract, AluOp::Multiply, AluOp::Max, AluOp::Rsqrt] {
                for reverse in [false, true] {
                    for &s in &vals {
                        let mut a = vals;
                        apply_scalar_f32_inplace(op, &mut a, s, reverse, &n);
                        for (&x, r) in vals.iter().zip(a) {
                            let want = if reverse {
                                apply_f32(op, s, x, &n)
                            } else {
                                apply_f32(op, x, s, &n)
                            };
                            assert_eq!(
                                r.to_bits(),
                                want.to_bits(),
                                "{op:?} rev={reverse} x={x} s={s} {denormals:?}"
                            );
                        }
                    }
                }
            }
        }
    }
    /// Same for the tensor-tensor slice paths (arithmetic and comparisons), every operand pair.
    #[test]
    fn tensor_inplace_is_bit_identical_to_apply_f32() {
        let vals = [
            0.0,
            -0.0,
            1.0,
            -1.5,
            f32::MIN_POSITIVE,
            f32::from_bits(1),
            -f32::from_bits(1),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            7.25,
        ];
        let ops = [
            AluOp::Add,
            AluOp::Subtract,
            AluOp::Multiply,
            AluOp::IsEqual,
            AluOp::NotEqual,
            AluOp::IsGe,
            AluOp::IsGt,
            AluOp::IsLe,
            AluOp::IsLt,
        ];
        for denormals in [Denormals::Preserve, Denormals::FlushToZero] {
            let n = Numerics {
                denormals,
                ..Numerics::default()
            };
            for op in ops {
                for &y in &vals {
                    let mut a = vals;
                    apply_f32_inplace(op, &mut a, &[y; 11], &n);
                    for (&x, r) in vals.iter().zip(a) {
                        let want = apply_f32(op, x, y, &n);
                        assert_eq!(r.to_bits(), want.to_bits(), "{op:?} x={x} y={y} {denormals:?}");
                    }
                }
            }
        }
    }
}
