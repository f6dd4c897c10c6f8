//! Statistical checks of RNG outputs, with a false-failure rate of at most [`ALPHA`] per check.
//!
//! A correct generator fails a case only by chance; these bounds hold for every sample size
//! (distribution-free inequalities, not asymptotic approximations):
//! * `rand` / `randn`: Kolmogorov–Smirnov distance to the uniform / standard normal CDF, with
//!   the Dvoretzky–Kiefer–Wolfowitz bound P(sup |F_n − F| > ε) ≤ 2·exp(−2nε²) (Massart's
//!   constant). Outputs are rounded to their dtype, so the empirical CDF at a value `v` is
//!   compared with F(v ± 2 ulp): a rounded sample can only move by that much.
//! * `native_dropout`: the number dropped is Binomial(n, p); Hoeffding's inequality
//!   P(|k/n − p| ≥ t) ≤ 2·exp(−2nt²). p = 0 and p = 1 are exact (nothing / everything dropped).
//! * `randperm(n)`: the number of fixed points of a uniform permutation satisfies
//!   P(≥ k fixed points) ≤ 1/k! (the expected number of fixed k-subsets), so ≥ 10 fixed points
//!   fails (1/10! < 3e-7): an identity or near-identity permutation of n ≥ 10 fails.
//!
//! Small samples have little power by construction (a single draw of 0 from `rand` is a correct
//! answer); the checks never lower the bar to gain it.

use crate::tensor::{Tensor, TorchDType};

/// The largest false-failure probability of one check on a correct generator.
pub const ALPHA: f64 = 1e-6;

/// ε of the DKW / Hoeffding bounds for `n` samples: 2·exp(−2nε²) = ALPHA.
pub fn two_sided_bound(n: usize) -> f64 {
    ((2.0 / ALPHA).ln() / (2.0 * n as f64)).sqrt()
}

/// Fixed points that fail a permutation: P(≥ FIXED_POINTS_LIMIT) ≤ 1/10! < ALPHA.
pub const FIXED_POINTS_LIMIT: usize = 10;

/// The statistical failures of an RNG op's output 0 (empty when the output passes).
/// `mask`: dropout's keep mask (output 1), when the op returned one.
pub fn failures(
    op: &str,
    actual: &Tensor,
    input: Option<&Tensor>,
    mask: Option<&Tensor>,
    p: Option<f64>,
) -> Vec<String> {
    let mut out = Vec::new();
    let n = actual.numel();
    if n == 0 {
        return out;
    }
    let vals = actual.to_f64_vec();
    match op {
        "rand" => {
            if let Some(d) = ks_distance(&vals, actual.dtype, |x| x.clamp(0.0, 1.0)) {
                let eps = two_sided_bound(n);
                if d > eps {
                    out.push(format!(
                        "Kolmogorov–Smirnov distance {d:.4} to U[0, 1) exceeds {eps:.4} (n = {n}, false-failure rate ≤ {ALPHA:e})"
                    ));
                }
            }
        }
        "randn" => {
            if let Some(d) = ks_distance(&vals, actual.dtype, normal_cdf) {
                let eps = two_sided_bound(n);
                if d > eps {
                    out.push(format!(
                        "Kolmogorov–Smirnov distance {d:.4} to N(0, 1) exceeds {eps:.4} (n = {n}, false-failure rate ≤ {ALPHA:e})"
                    ));
                }
            }
        }
        "native_dropout" => {
            let Some(p) = p else { return out };
            // Dropped: mask false when there is a mask; else an output of 0 where the input is not.
            let dropped: Option<usize> = match (mask, input) {
                (Some(m), _) if m.numel() == n => Some((0..n).filter(|&i| m.value_i64(i) == 0).count()),
                (_, Some(inp)) if inp.numel() == n => {
                    let nonzero: Vec<usize> = (0..n).filter(|&i| inp.value_f64(i) != 0.0).collect();
                    let k = nonzero.iter().filter(|&&i| vals[i] == 0.0).count();
                    // Only elements with a non-zero input show whether they were dropped.
                    return rate_failures(k, nonzero.len(), p);
                }
                _ => None,
            };
            if let Some(k) = dropped {
                out.extend(rate_failures(k, n, p));
            }
        }
        "randperm" => {
            let fixed = vals.iter().enumerate().filter(|&(i, &v)| v == i as f64).count();
            if fixed >= FIXED_POINTS_LIMIT {
                out.push(format!(
                    "{fixed} fixed points (P ≤ 1/{FIXED_POINTS_LIMIT}! < {ALPHA:e} for a uniform permutation)"
                ));
            }
        }
        _ => {}
    }
    out
}

/// The drop count `k` of `n` elements against Binomial(n, p).
fn rate_failures(k: usize, n: usize, p: f64) -> Vec<String> {
    if n == 0 {
        return vec![];
    }
    let rate = k as f64 / n as f64;
    let fail = if p <= 0.0 {
        k > 0
    } else if p >= 1.0 {
        k < n
    } else {
        (rate - p).abs() > two_sided_bound(n)
    };
    if fail {
        vec![format!(
            "dropped {k} of {n} ({rate:.4}) with p = {p}: outside p ± {:.4} (Hoeffding, false-failure rate ≤ {ALPHA:e})",
            if p > 0.0 && p < 1.0 { two_sided_bound(n) } else { 0.0 }
        )]
    } else {
        vec![]
    }
}

/// The largest gap between the empirical CDF and `cdf`, allowing each value 2 ulps of rounding
/// either way. `None` for a non-float dtype or a NaN sample (the range check reports those).
fn ks_distance(vals: &[f64], dtype: TorchDType, cdf: impl Fn(f64) -> f64) -> Option<f64> {
    let mant = match dtype {
        TorchDType::F32 => 23,
        TorchDType::Bf16 => 7,
        TorchDType::F16 => 10,
        _ => return None,
    };
    if vals.iter().any(|v| v.is_nan()) {
        return None;
    }
    let mut v = vals.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let n = v.len() as f64;
    let slack = |x: f64| 2.0 * x.abs().max(f64::powi(2.0, -24)) * f64::powi(2.0, -mant);
    let mut d: f64 = 0.0;
    let mut i = 0;
    while i < v.len() {
        let x = v[i];
        let mut j = i;
        while j < v.len() && v[j] == x {
            j += 1;
        }
        let below = i as f64 / n; // F_n just below x
        let at = j as f64 / n; // F_n at x
        let h = slack(x);
        d = d.max(at - cdf(x + h)).max(cdf(x - h) - below);
        i = j;
    }
    Some(d)
}

/// The standard normal CDF, via erfc (Numerical Recipes' Chebyshev fit: relative error < 1.2e-7,
/// far below any ε used here).
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f64]) -> Tensor {
        Tensor::from_f64(TorchDType::F32, &[v.len()], v)
    }

    /// A deterministic uniform stream (splitmix64) for tests.
    fn uniform(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                ((z >> 40) as f64) / (1u64 << 24) as f64
            })
            .collect()
    }

    #[test]
    fn bounds_and_cdf() {
        assert!((two_sided_bound(1000) - 0.0851).abs() < 1e-3);
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_cdf(1.96) - 0.975).abs() < 1e-4);
    }

    #[test]
    fn good_streams_pass_and_bad_ones_fail() {
        let u = uniform(5000, 1);
        assert!(failures("rand", &f32s(&u), None, None, None).is_empty());
        assert!(!failures("rand", &f32s(&vec![0.0; 50]), None, None, None).is_empty());
        assert!(!failures("rand", &f32s(&vec![0.5; 50]), None, None, None).is_empty());
        // Box–Muller normals pass the normal test; zeros and uniforms do not.
        let g: Vec<f64> = u
            .chunks(2)
            .map(|c| (-2.0 * (1.0 - c[0]).ln()).sqrt() * (std::f64::consts::TAU * c[1]).cos())
            .collect();
        assert!(failures("randn", &f32s(&g), None, None, None).is_empty());
        assert!(!failures("randn", &f32s(&vec![0.0; 100]), None, None, None).is_empty());
        assert!(!failures("randn", &f32s(&u), None, None, None).is_empty());
        // Dropout: a 50 % mask passes, none or all dropped fail; p = 0 / 1 are exact.
        let x = f32s(&vec![1.0; 2000]);
        let half: Vec<f64> = u[..2000].iter().map(|&r| if r < 0.5 { 0.0 } else { 2.0 }).collect();
        assert!(failures("native_dropout", &f32s(&half), Some(&x), None, Some(0.5)).is_empty());
        assert!(!failures("native_dropout", &f32s(&vec![0.0; 2000]), Some(&x), None, Some(0.5)).is_empty());
        assert!(!failures("native_dropout", &x, Some(&x), None, Some(0.5)).is_empty());
        let mut one = vec![1.0; 2000];
        one[7] = 0.0;
        assert!(!failures("native_dropout", &f32s(&one), Some(&x), None, Some(0.0)).is_empty());
        assert!(failures("native_dropout", &x, Some(&x), None, Some(0.0)).is_empty());
        // randperm: identity fails from n = 10.
        let id: Vec<f64> = (0..100).map(|i| i as f64).collect();
        assert!(!failures("randperm", &f32s(&id), None, None, None).is_empty());
        let mut shifted = id.clone();
        shifted.rotate_left(1);
        assert!(failures("randperm", &f32s(&shifted), None, None, None).is_empty());
    }
}
