//! Rounding: round-to-nearest-even (the hardware default) and stochastic rounding (the runtime's
//! `NEURON_RT_STOCHASTIC_ROUNDING_EN=1` mode), plus the conversions that need explicit rounding.

use super::DType;

/// How float downcasts round. One global mode per run, as the Neuron runtime switches it.
#[derive(Clone, Debug)]
pub enum Rounding {
    /// Round to nearest, ties to even (hardware default).
    NearestEven,
    /// Round up or down with probability proportional to the distance (the hardware's PRNG is
    /// unpublished; ours is [`StochasticRng`]).
    Stochastic(StochasticRng),
}

/// The generator behind stochastic rounding: SplitMix64, seeded per run. Chosen because it is
/// tiny, fast and well distributed; the hardware generator is not documented.
#[derive(Clone, Debug)]
pub struct StochasticRng {
    state: u64,
}

impl StochasticRng {
    pub fn new(seed: u64) -> Self {
        StochasticRng { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// PyTorch's canonical bfloat16 NaN (`c10::BFloat16` writes 0x7FC0 for every NaN).
pub const BF16_CANONICAL_NAN: u16 = 0x7FC0;

/// f32 → bf16, round to nearest even; identical to PyTorch for every non-NaN input (half's
/// conversion, checked exhaustively in the reference notes), NaN → 0x7FC0 as PyTorch's c10
/// `round_to_nearest_even` writes it (the vectorised `Tensor.to` writes 0xFFFF instead).
#[inline]
pub fn f32_to_bf16_rne(x: f32) -> u16 {
    if x.is_nan() {
        return BF16_CANONICAL_NAN;
    }
    half::bf16::from_f32(x).to_bits()
}

/// f32 → f16, round to nearest even, overflow to ±inf; NaN → 0x7E00 with the sign kept, as
/// PyTorch's c10 scalar path (`torch.tensor(.., dtype=float16)`) writes it (the vectorised
/// `Tensor.to` keeps the top payload bits instead, F16C-style).
#[inline]
pub fn f32_to_f16_rne(x: f32) -> u16 {
    if x.is_nan() {
        return 0x7E00 | ((x.to_bits() >> 16) as u16 & 0x8000);
    }
    half::f16::from_f32(x).to_bits()
}

/// f32 → tf32 (kept in 4 bytes): round the mantissa to 10 bits, nearest even. Whether the
/// hardware rounds or truncates here is unpublished; RNE is our choice (docs/numerics.md).
#[inline]
pub fn f32_to_tf32_rne(x: f32) -> u32 {
    let b = x.to_bits();
    if x.is_nan() {
        return (b | 0x0040_0000) & 0xFFFF_E000;
    }
    if x.is_infinite() {
        return b;
    }
    let lsb = (b >> 13) & 1;
    let rounded = b.wrapping_add(0x0FFF + lsb);
    rounded & 0xFFFF_E000
}

/// f32 → integer: round to nearest even, saturate to `[lo, hi]`, NaN → 0.
#[inline]
pub fn f32_to_int_rne_sat(x: f32, lo: i64, hi: i64) -> i64 {
    if x.is_nan() {
        return 0;
    }
    let r = (x as f64).round_ties_even();
    if r <= lo as f64 {
        lo
    } else if r >= hi as f64 {
        hi
    } else {
        r as i64
    }
}

/// Layout of a small binary float format (sign + exponent + mantissa, at most 16 bits).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SmallFloat {
    pub exp_bits: u32,
    pub man_bits: u32,
    pub bias: i32,
    /// Whether exponent all-ones with mantissa 0 is ±inf (IEEE-like; overflow gives ±inf). If
    /// false (the "fn" formats), only S.1111.111 is NaN and overflow and ±inf saturate to the
    /// largest finite value, as PyTorch 2.15 converts to `float8_e4m3fn`.
    pub has_inf: bool,
    /// The NaN pattern written (without sign).
    pub nan_bits: u32,
}

/// Encodes with round to nearest even.
pub(crate) fn encode_small_float_rne(fmt: &SmallFloat, x: f32) -> u32 {
    encode_small_float(fmt, x, |scaled| scaled.round_ties_even())
}

/// Generic encoder. `round` turns the value scaled so that one unit is one mantissa ulp into an
/// integer. Works in f64, where every f32 is exact and the scaling by a power of two is exact.
pub(crate) fn encode_small_float(fmt: &SmallFloat, x: f32, mut round: impl FnMut(f64) -> f64) -> u32 {
    let width = 1 + fmt.exp_bits + fmt.man_bits;
    let sign = (x.to_bits() >> 31) << (width - 1);
    if x.is_nan() {
        return fmt.nan_bits | sign;
    }
    let exp_all_ones = (1u32 << fmt.exp_bits) - 1;
    // What an overflow (or ±inf) becomes: ±inf, or the largest finite code when there is no inf.
    let overflow_code = if fmt.has_inf {
        exp_all_ones << fmt.man_bits
    } else {
        (exp_all_ones << fmt.man_bits) | ((1 << fmt.man_bits) - 2)
    };
    if x.is_infinite() {
        return overflow_code | sign;
    }
    let a = (x as f64).abs();
    if a == 0.0 {
        return sign;
    }
    let emin = 1 - fmt.bias;
    let mb = fmt.man_bits as i32;
    let mut e = (((a.to_bits() >> 52) & 0x7FF) as i32 - 1023).max(emin);
    let scaled = a * 2f64.powi(mb - e);
    let mut q = round(scaled);
    if q >= (1u64 << (mb + 1)) as f64 {
        q /= 2.0;
        e += 1;
    }
    let q = q as u32;
    let normal = q >= (1u32 << mb);
    let exp_field = if normal { (e + fmt.bias) as u32 } else { 0 };
    let man = if normal { q - (1 << mb) } else { q };
    let max_exp_field = if fmt.has_inf { exp_all_ones - 1 } else { exp_all_ones };
    let overflow = exp_field > max_exp_field || (!fmt.has_inf && exp_field == max_exp_field && man == (1 << mb) - 1);
    if overflow {
        return overflow_code | sign;
    }
    (exp_field << fmt.man_bits) | man | sign
}

fn layout(dtype: DType) -> SmallFloat {
    match dtype {
        DType::Bf16 => SmallFloat {
            exp_bits: 8,
            man_bits: 7,
            bias: 127,
            has_inf: true,
            nan_bits: 0x7FC0,
        },
        DType::F16 => SmallFloat {
            exp_bits: 5,
            man_bits: 10,
            bias: 15,
            has_inf: true,
            nan_bits: 0x7E00,
        },
        DType::Fp8E4m3 => super::fp8::E4M3,
        DType::Fp8E4m3fn => super::fp8::E4M3FN,
        DType::Fp8E5m2 => super::fp8::E5M2,
        other => unreachable!("no small-float layout for {other}"),
    }
}

/// Stochastic rounding of an f32 into a narrower float: the value is rounded up with probability
/// equal to its distance from the lower neighbour, in units of the destination ulp.
pub(crate) fn encode_stochastic(dtype: DType, x: f32, rng: &mut StochasticRng) -> u32 {
    if dtype == DType::Tf32 {
        if !x.is_finite() {
            return f32_to_tf32_rne(x);
        }
        let fmt = SmallFloat {
            exp_bits: 8,
            man_bits: 10,
            bias: 127,
            has_inf: true,
            nan_bits: 0x7FE0_0000,
        };
        let u = rng.next_unit();
        let bits19 = encode_small_float(&fmt, x, |s| stochastic(s, u));
        // Re-expand the 19-bit tf32 encoding to its 4-byte storage.
        return ((bits19 >> 18) << 31) | ((bits19 & 0x3_FFFF) << 13);
    }
    let fmt = layout(dtype);
    let u = rng.next_unit();
    encode_small_float(&fmt, x, |s| stochastic(s, u))
}

fn stochastic(scaled: f64, u: f64) -> f64 {
    let lo = scaled.floor();
    if scaled - lo > u { lo + 1.0 } else { lo }
}
