//! 8-bit float formats.
//!
//! `float8_e4m3fn` and `float8_e5m2` are ported from PyTorch 2.15's c10
//! (`torch/headeronly/util/Float8_e4m3fn.h`, `Float8_e5m2.h`) so that encodes and decodes are
//! bit-exact with `tensor.to(torch.float8_*)` (checked against recorded tables in
//! sim/tests/dtype_tables.rs), including PyTorch's overflow rules: e4m3fn saturates to ±448,
//! e5m2 overflows to ±inf. The `float8` crate does neither exactly and must not be used
//! (see docs/numerics.md).
//!
//! NeuronCore's legacy `float8_e4m3` is the IEEE-like e4m3 (bias 7, inf and NaN in exponent 15),
//! as in ml_dtypes; it has no PyTorch counterpart and is encoded by the generic small-float encoder.

use super::round::{SmallFloat, encode_small_float_rne};

/// Layout of the NeuronCore IEEE-like e4m3.
/// NaN is written as 0x7C | sign (exponent 15, quiet bit), as ml_dtypes writes it.
pub(crate) const E4M3: SmallFloat = SmallFloat {
    exp_bits: 4,
    man_bits: 3,
    bias: 7,
    has_inf: true,
    nan_bits: 0x7C,
};
/// Layout of PyTorch's e4m3fn (no inf; the all-ones pattern is NaN; overflow saturates).
pub(crate) const E4M3FN: SmallFloat = SmallFloat {
    exp_bits: 4,
    man_bits: 3,
    bias: 7,
    has_inf: false,
    nan_bits: 0x7F,
};
/// Layout of e5m2.
pub(crate) const E5M2: SmallFloat = SmallFloat {
    exp_bits: 5,
    man_bits: 2,
    bias: 15,
    has_inf: true,
    nan_bits: 0x7F,
};

/// PyTorch `fp8e4m3fn_to_fp32_value` (torch/headeronly/util/Float8_e4m3fn.h), bit for bit:
/// NaN (S.1111.111) decodes to 0x7FF00000 | sign.
pub fn e4m3fn_to_f32(b: u8) -> f32 {
    let w = (b as u32) << 24;
    let sign = w & 0x8000_0000;
    let nonsign = w & 0x7FFF_FFFF;
    // clz is 32 for zero, as c10's guarded clz; then `renorm_shift > 4 ? renorm_shift - 4 : 0`.
    let renorm_shift = nonsign.leading_zeros().saturating_sub(4);
    let inf_nan_mask = ((nonsign.wrapping_add(0x0100_0000) as i32) >> 8) as u32 & 0x7F80_0000;
    let zero_mask = ((nonsign.wrapping_sub(1) as i32) >> 31) as u32;
    let shifted = (nonsign << renorm_shift) >> 4; // renorm_shift ≤ 28
    let result = sign | ((shifted.wrapping_add(0x78u32.wrapping_sub(renorm_shift) << 23) | inf_nan_mask) & !zero_mask);
    f32::from_bits(result)
}

pub fn e4m3_to_f32(b: u8) -> f32 {
    let neg = b & 0x80 != 0;
    let e = ((b >> 3) & 0xF) as i32;
    let m = (b & 7) as i32;
    if e == 0xF {
        if m == 0 {
            return if neg { f32::NEG_INFINITY } else { f32::INFINITY };
        }
        return f32::from_bits(if neg { 0xFFC0_0000 } else { 0x7FC0_0000 });
    }
    let v = decode_finite(e, m, 3, 7);
    if neg { -v } else { v }
}

pub fn e5m2_to_f32(b: u8) -> f32 {
    // e5m2 is the upper byte of an IEEE half.
    half::f16::from_bits((b as u16) << 8).to_f32()
}

fn decode_finite(e: i32, m: i32, man_bits: i32, bias: i32) -> f32 {
    if e == 0 {
        m as f32 * 2f32.powi(1 - bias - man_bits)
    } else {
        (1.0 + m as f32 / (1 << man_bits) as f32) * 2f32.powi(e - bias)
    }
}

/// PyTorch `fp8e4m3fn_from_fp32_value` as of torch 2.15 (torch/headeronly/util/Float8_e4m3fn.h):
/// RNE; **saturating**: |x| ≥ 480, ±inf, and roundings that carry into the NaN code all give
/// ±448 (0x7E); NaN → 0x7F with the sign kept. (Older torch releases returned NaN on overflow.)
pub fn f32_to_e4m3fn(x: f32) -> u8 {
    const FP8_MAX: u32 = 1087 << 20; // 480.0f
    const DENORM_MASK: u32 = 141 << 23;
    let mut f_bits = x.to_bits();
    let sign = f_bits & 0x8000_0000;
    f_bits ^= sign;
    let result: u8 = if f_bits >= FP8_MAX {
        if f_bits > 0x7F80_0000 { 0x7F } else { 0x7E }
    } else if f_bits < (121 << 23) {
        let f = f32::from_bits(f_bits) + f32::from_bits(DENORM_MASK);
        (f.to_bits().wrapping_sub(DENORM_MASK)) as u8
    } else {
        let mant_odd = (f_bits >> 20) & 1;
        f_bits = f_bits.wrapping_add(((7u32.wrapping_sub(127)) << 23).wrapping_add(0x7FFFF));
        f_bits = f_bits.wrapping_add(mant_odd);
        let r = (f_bits >> 20) as u8;
        if r == 0x7F { 0x7E } else { r }
    };
    result | (sign >> 24) as u8
}

/// PyTorch `fp8e5m2_from_fp32_value`: RNE, overflow → ±inf (0x7C), NaN → 0x7F, sign kept.
pub fn f32_to_e5m2(x: f32) -> u8 {
    const FP32_INF: u32 = 255 << 23;
    const FP8_MAX: u32 = 143 << 23;
    const DENORM_MASK: u32 = 134 << 23;
    let mut f_bits = x.to_bits();
    let sign = f_bits & 0x8000_0000;
    f_bits ^= sign;
    let result: u8 = if f_bits >= FP8_MAX {
        if f_bits > FP32_INF { 0x7F } else { 0x7C }
    } else if f_bits < (113 << 23) {
        let f = f32::from_bits(f_bits) + f32::from_bits(DENORM_MASK);
        (f.to_bits().wrapping_sub(DENORM_MASK)) as u8
    } else {
        let mant_odd = (f_bits >> 21) & 1;
        f_bits = f_bits.wrapping_add(((15u32.wrapping_sub(127)) << 23).wrapping_add(0xFFFFF));
        f_bits = f_bits.wrapping_add(mant_odd);
        (f_bits >> 21) as u8
    };
    result | (sign >> 24) as u8
}

/// NeuronCore IEEE-like e4m3: RNE with overflow to ±inf (as bf16/fp16 downcasts overflow).
pub fn f32_to_e4m3(x: f32) -> u8 {
    encode_small_float_rne(&E4M3, x) as u8
}

/// OCP MX scale `float8_e8m0fnu`: code `c` is 2^(c − 127) (code 0 is the fp32 subnormal
/// 2^-127); 0xFF is NaN (decoded as the quiet NaN 0x7FC00000).
pub fn e8m0fnu_to_f32(b: u8) -> f32 {
    match b {
        0xFF => f32::from_bits(0x7FC0_0000),
        0 => f32::from_bits(0x0040_0000),
        c => f32::from_bits((c as u32) << 23),
    }
}

/// f32 → `float8_e8m0fnu` as ml_dtypes 0.7 converts (checked code by code in
/// conformance/python/tests/test_mx_dtypes.py): the power of two nearest in *value*, a mantissa
/// of exactly 1.5 rounding up (there is no even code to prefer: the format has no mantissa);
/// values below 2^-127 give the smallest code 0 (there is no zero); zero, negatives, ±inf, NaN
/// and values that round above 2^127 give the NaN code 0xFF.
pub fn f32_to_e8m0fnu(x: f32) -> u8 {
    if x.is_nan() || x.is_infinite() || x <= 0.0 {
        return 0xFF;
    }
    let bits = x.to_bits();
    let e = bits >> 23;
    let m = bits & 0x7F_FFFF;
    let code = if e == 0 {
        // fp32 subnormal m·2^-149: 2^-127 is m = 2^22; 1.5·2^-127 and above round to 2^-126.
        u32::from(m >= 0x60_0000)
    } else {
        e + u32::from(m >= 0x40_0000)
    };
    if code > 254 { 0xFF } else { code as u8 }
}

/// The eight magnitudes of `float4_e2m1fn` (codes 0..8; bit 3 is the sign).
pub const E2M1_MAGNITUDES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// `float4_e2m1fn` decode: the low nibble is the code (bit 3 sign, bits 1–2 exponent with bias
/// 1, bit 0 mantissa); the high nibble is ignored.
pub fn e2m1fn_to_f32(b: u8) -> f32 {
    let v = E2M1_MAGNITUDES[(b & 7) as usize];
    if b & 8 != 0 { -v } else { v }
}

/// f32 → `float4_e2m1fn`, round to nearest even and **saturating** to ±6 (±inf included), as
/// ml_dtypes 0.7 converts. The format has no NaN: ml_dtypes writes a NaN as a zero of the
/// *opposite* sign (+NaN → 0x8, −NaN → 0x0), and so does this.
pub fn f32_to_e2m1fn(x: f32) -> u8 {
    if x.is_nan() {
        return if x.is_sign_negative() { 0x0 } else { 0x8 };
    }
    // Midpoints between consecutive magnitudes; a tie goes to the even code.
    const MID: [f32; 7] = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0];
    let a = x.abs();
    let mut code = 0u8;
    for (k, &m) in MID.iter().enumerate() {
        if a > m || (a == m && k % 2 == 1) {
            code = k as u8 + 1;
        }
    }
    code | if x.is_sign_negative() { 8 } else { 0 }
}
