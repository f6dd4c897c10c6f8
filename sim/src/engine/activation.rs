//! ScalarE activation functions.
//!
//! The hardware evaluates piecewise polynomials whose coefficients are not public. We evaluate
//! each function in f64 and round once to fp32 (`ActivationModel::Accurate`): the answer the
//! tables approximate. Outside a function's documented valid input range the hardware returns
//! garbage (it extrapolates the polynomial); we return the accurate value and record the range so
//! a lowering can be checked against it (see `valid_range`).

use crate::numerics::ActivationModel;
use crate::program::ActFunc;
use std::f64::consts::PI;

fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

fn softplus(x: f64) -> f64 {
    // log(1 + e^x) without overflow.
    if x > 30.0 { x } else { x.exp().ln_1p() }
}

/// Evaluates `func` at `x` under an activation model (`ActivationModel`, docs/numerics.md).
#[inline]
pub fn eval_with(model: ActivationModel, func: ActFunc, x: f32) -> f32 {
    let r = eval(func, x);
    match model {
        ActivationModel::Accurate => r,
        ActivationModel::Approximate { ulps } => approximate(func, x, r, ulps),
    }
}

/// `r` moved by a deterministic error in −ulps..=ulps fp32 ulps (a splitmix64 hash of the
/// function and the input bits picks it). Exact functions, zeros and non-finite results are
/// unchanged, and the error never crosses zero or overflows to inf.
fn approximate(func: ActFunc, x: f32, r: f32, ulps: u32) -> f32 {
    if ulps == 0
        || !r.is_finite()
        || r == 0.0
        || matches!(
            func,
            ActFunc::Copy | ActFunc::Square | ActFunc::Relu | ActFunc::Sign | ActFunc::Abs
        )
    {
        return r;
    }
    let mut h = (x.to_bits() as u64) ^ ((func as u64) << 32) ^ 0x9E37_79B9_7F4A_7C15;
    h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^= h >> 31;
    let span = 2 * ulps as u64 + 1;
    let offset = (h % span) as i64 - ulps as i64;
    // Steps along the magnitude's bit pattern: same sign, never past zero or the largest finite.
    let mag = (r.to_bits() & 0x7FFF_FFFF) as i64 + offset;
    if mag <= 0 || mag > f32::MAX.to_bits() as i64 {
        return r;
    }
    f32::from_bits((r.to_bits() & 0x8000_0000) | mag as u32)
}

/// Evaluates `func` at `x` (already `x*scale + bias` in fp32).
#[inline]
pub fn eval(func: ActFunc, x: f32) -> f32 {
    let v = x as f64;
    let r = match func {
        ActFunc::Copy => return x,
        ActFunc::Square => v * v,
        ActFunc::Sigmoid => sigmoid(v),
        // NaN passes through, as in the activation functions built from exp/erf (NaN in, NaN out).
        ActFunc::Relu => {
            if v > 0.0 || v.is_nan() {
                v
            } else {
                0.0
            }
        }
        ActFunc::Gelu => 0.5 * v * (1.0 + libm::erf(v / std::f64::consts::SQRT_2)),
        ActFunc::GeluDx => {
            let cdf = 0.5 * (1.0 + libm::erf(v / std::f64::consts::SQRT_2));
            let pdf = (-0.5 * v * v).exp() / (2.0 * PI).sqrt();
            cdf + v * pdf
        }
        ActFunc::GeluApproxTanh => {
            let k = (2.0 / PI).sqrt();
            0.5 * v * (1.0 + (k * (v + 0.044715 * v * v * v)).tanh())
        }
        ActFunc::GeluApproxSigmoid => v * sigmoid(1.702 * v),
        ActFunc::GeluApproxSigmoidDx => {
            let s = sigmoid(1.702 * v);
            s + 1.702 * v * s * (1.0 - s)
        }
        ActFunc::Silu => v * sigmoid(v),
        ActFunc::SiluDx => {
            let s = sigmoid(v);
            s * (1.0 + v * (1.0 - s))
        }
        ActFunc::Tanh => v.tanh(),
        ActFunc::Softplus => softplus(v),
        ActFunc::Mish => v * softplus(v).tanh(),
        ActFunc::Erf => libm::erf(v),
        ActFunc::ErfDx => 2.0 / PI.sqrt() * (-v * v).exp(),
        ActFunc::Exp => v.exp(),
        ActFunc::Log => v.ln(),
        ActFunc::Sin => v.sin(),
        ActFunc::Arctan => v.atan(),
        ActFunc::Sqrt => v.sqrt(),
        ActFunc::Rsqrt => 1.0 / v.sqrt(),
        ActFunc::Reciprocal => 1.0 / v,
        ActFunc::Sign => {
            if v > 0.0 {
                1.0
            } else if v < 0.0 {
                -1.0
            } else {
                v // ±0 and NaN pass through
            }
        }
        ActFunc::Abs => v.abs(),
    };
    r as f32
}

/// The documented valid input range of each function on NC-v2 (NKI activation table).
pub fn valid_range(func: ActFunc) -> (f32, f32) {
    match func {
        ActFunc::Log => (2f32.powi(-64), 2f32.powi(64)),
        ActFunc::Sin => (-std::f32::consts::PI, std::f32::consts::PI),
        ActFunc::Arctan => (-std::f32::consts::FRAC_PI_2, std::f32::consts::FRAC_PI_2),
        ActFunc::Sqrt => (2f32.powi(-116), 2f32.powi(118)),
        ActFunc::Rsqrt => (2f32.powi(-87), 2f32.powi(97)),
        ActFunc::Reciprocal => (-(2f32.powi(42)), 2f32.powi(42)),
        _ => (f32::NEG_INFINITY, f32::INFINITY),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Approximate { ulps }` stays within its budget, uses it, and leaves exact functions exact.
    #[test]
    fn approximate_model_keeps_its_ulp_budget() {
        let model = ActivationModel::Approximate { ulps: 4 };
        let (mut worst, mut moved) = (0i64, 0);
        for i in 0..20_000 {
            let x = -10.0 + i as f32 * 1e-3;
            for func in [ActFunc::Exp, ActFunc::Tanh, ActFunc::Erf, ActFunc::Sigmoid] {
                let (a, r) = (eval(func, x), eval_with(model, func, x));
                assert_eq!(a.is_sign_negative(), r.is_sign_negative());
                let d = (a.to_bits() as i64 - r.to_bits() as i64).abs();
                worst = worst.max(d);
                moved += (d != 0) as usize;
            }
            for func in [ActFunc::Copy, ActFunc::Relu, ActFunc::Square, ActFunc::Abs] {
                assert_eq!(eval(func, x).to_bits(), eval_with(model, func, x).to_bits());
            }
        }
        assert_eq!(worst, 4, "the budget is reached and never exceeded");
        assert!(moved > 50_000, "most results move ({moved} of 80000)");
        assert_eq!(
            eval_with(ActivationModel::Accurate, ActFunc::Exp, 1.0),
            eval(ActFunc::Exp, 1.0)
        );
    }
}
