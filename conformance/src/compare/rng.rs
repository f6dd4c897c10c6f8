//! Statistical checks of RNG outputs, with a false-failure rate of at most [`ALPHA_CASE`] per case.
//!
//! A correct generator fails a case only by chance. Each case runs at most [`CHECKS_PER_CASE`]
//! of the checks below, each at [`ALPHA`] = ALPHA_CASE / CHECKS_PER_CASE (a union bound). The
//! bounds hold for every sample size (distribution-free inequalities, not asymptotic
//! approximations):
//! * `rand` / `randn`: Kolmogorov–Smirnov distance to the uniform / standard normal CDF, with
//!   the Dvoretzky–Kiefer–Wolfowitz bound P(sup |F_n − F| > ε) ≤ 2·exp(−2nε²) (Massart's
//!   constant). Outputs are rounded to their dtype, so the empirical CDF at a value `v` is
//!   compared with F(v ± 2 ulp): a rounded sample can only move by that much.
//! * `native_dropout`: the number dropped is Binomial(n, p); Hoeffding's inequality
//!   P(|k/n − p| ≥ t) ≤ 2·exp(−2nt²). p = 0 and p = 1 are exact (nothing / everything dropped).
//! * `randperm(n)`: the number of fixed points of a uniform permutation satisfies
//!   P(≥ k fixed points) ≤ 1/k! (the expected number of fixed k-subsets), so ≥ 10 fixed points
//!   fails (1/10! < 2.8e-7 ≤ ALPHA): an identity or near-identity permutation of n ≥ 10 fails.
//!
//! **Several seeds.** The seed comes from the case (backend::lowering::case_rng_seed), and a
//! backend that takes it from the case is also run under [`other_seeds`] (the runner does this
//! for every RNG case whose check asks for determinism). Across the seeds
//! ([`cross_seed_failures`]):
//! * different seeds must give different streams: two seeds giving the same bits fails when a
//!   correct generator does that with probability ≤ ALPHA (union over the pairs): per element
//!   P(X = X') ≤ the largest probability of one value (≤ 2^-(mantissa+1) for a rounded uniform
//!   or normal), p² + (1 − p)² per dropout decision, 1/n! per permutation;
//! * the distribution tests above run again on the outputs of all the seeds pooled (one sample
//!   of the seeds' combined size: small outputs gain power);
//! * `randperm`: each position's value is uniform over the seeds. For m seeds the count of
//!   value j at position i is Binomial(m, 1/n); the largest count over the n² cells fails at
//!   the first c with n²·P(Bin(m, 1/n) ≥ c) ≤ ALPHA. With the 32 seeds of a permutation of
//!   n ≤ 256, an identity permutation, or any permutation the seed does not change, fails for
//!   every n ≥ 2.
//!
//! So a case runs three checks (single-seed distribution or fixed points, pooled distribution
//! or positional uniformity, stream difference): CHECKS_PER_CASE = 3. Small samples have little
//! power in one seed by construction (a single draw of 0 from `rand` is a correct answer); the
//! checks never lower the bar to gain it.

use crate::tensor::{Tensor, TorchDType};

/// The largest false-failure probability of one case on a correct generator.
pub const ALPHA_CASE: f64 = 1e-6;

/// The statistical checks one case runs, at most (see the module docs).
pub const CHECKS_PER_CASE: f64 = 3.0;

/// The largest false-failure probability of one check on a correct generator.
pub const ALPHA: f64 = ALPHA_CASE / CHECKS_PER_CASE;

/// Extra seeds an RNG case with `n` output elements runs under (besides its own). `randperm`
/// of up to [`POSITIONAL_MAX`] elements needs 32 seeds in all for the positional test to reject
/// a seed-independent `randperm(2)` (4·2^-32 ≤ ALPHA); a longer permutation is one simulation
/// of a sort per seed, so it gets 3, with which the positional test has no power at that size
/// (it is skipped) while the stream-difference test (1/n! per pair) still rejects a
/// permutation the seed does not change. The other ops need one other seed to see that the
/// stream changes, and a few more for pooling.
pub fn other_seed_count(op: &str, n: usize) -> usize {
    match op {
        "randperm" if n <= POSITIONAL_MAX => 31,
        _ => 3,
    }
}

/// The longest permutation run under 32 seeds (see [`other_seed_count`]).
pub const POSITIONAL_MAX: usize = 256;

/// The `k`-th other seed of a case seeded with `seed` (k ≥ 1): SplitMix64 of (seed, k), folded
/// to 32 bits, never `seed` itself.
pub fn other_seed(seed: u32, k: usize) -> u32 {
    let mut z = ((seed as u64) << 32 | k as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let s = (z ^ (z >> 32)) as u32;
    if s == seed { s.wrapping_add(1) } else { s }
}

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

/// The failures of an RNG op's output 0 across seeds: `main` under the case's seed, `others`
/// under [`other_seed`]s (same shape). `masks`: dropout's keep mask per run (main first), when
/// the op returned one. Empty when there are no other seeds.
pub fn cross_seed_failures(
    op: &str,
    main: &Tensor,
    others: &[&Tensor],
    input: Option<&Tensor>,
    masks: &[Option<&Tensor>],
    p: Option<f64>,
) -> Vec<String> {
    let n = main.numel();
    if others.is_empty() || n == 0 || others.iter().any(|o| o.numel() != n || o.dtype != main.dtype) {
        return vec![];
    }
    let mut out = Vec::new();
    // Different seeds, different streams.
    let same = others.iter().filter(|o| o.data == main.data).count();
    let pair_bound = identical_stream_bound(op, main, input, p) * others.len() as f64;
    if same > 0 && pair_bound <= ALPHA {
        out.push(format!(
            "{same} of {} other seeds gave the same output as the case's seed (a correct generator: P ≤ {pair_bound:.1e})",
            others.len()
        ));
    }
    let runs: Vec<&Tensor> = std::iter::once(main).chain(others.iter().copied()).collect();
    match op {
        "rand" | "randn" | "native_dropout" => {
            let cat = |ts: &[&Tensor]| -> Tensor {
                let vals: Vec<f64> = ts.iter().flat_map(|t| t.to_f64_vec()).collect();
                Tensor::from_f64(ts[0].dtype, &[vals.len()], &vals)
            };
            let pooled = cat(&runs);
            let pooled_input = input.filter(|i| i.numel() == n).map(|i| cat(&vec![i; runs.len()]));
            let pooled_mask = if masks.len() == runs.len() && masks.iter().all(|m| m.is_some_and(|m| m.numel() == n)) {
                let ms: Vec<&Tensor> = masks.iter().map(|m| m.expect("checked")).collect();
                Some(cat(&ms))
            } else {
                None
            };
            for f in failures(op, &pooled, pooled_input.as_ref(), pooled_mask.as_ref(), p) {
                out.push(format!("over {} seeds pooled: {f}", runs.len()));
            }
        }
        "randperm" => out.extend(positional_failures(&runs)),
        _ => {}
    }
    out
}

/// An upper bound on the probability that a correct generator gives two seeds the same output.
pub fn identical_stream_bound(op: &str, main: &Tensor, input: Option<&Tensor>, p: Option<f64>) -> f64 {
    let n = main.numel() as f64;
    match op {
        "rand" | "randn" => match main.dtype.mantissa_bits() {
            // P(X = X') ≤ max_v P(X = v). A value v in [2^e, 2^(e+1)) takes the values
            // rounding to it, an interval of width 2^(e − mantissa) ≤ |v|·2^-mantissa: for
            // U[0, 1) (e ≤ −1) its probability is ≤ 2^-(mantissa+1), for N(0, 1) it is
            // ≤ max |x|·φ(x)·2^-mantissa = 0.242·2^-mantissa. A generator on a coarser grid
            // than the dtype (k random bits) has point masses 2^-k, at most the same bound
            // while k ≥ mantissa + 1.
            Some(m) => f64::powi(2.0, -(m as i32 + 1)).powf(n),
            None => 1.0,
        },
        "native_dropout" => {
            let Some(p) = p else { return 1.0 };
            // Only elements with a non-zero input show their decision in the output.
            let shown = input.filter(|i| i.numel() == main.numel()).map_or(0.0, |i| {
                (0..i.numel()).filter(|&k| i.value_f64(k) != 0.0).count() as f64
            });
            (p * p + (1.0 - p) * (1.0 - p)).powf(shown)
        }
        "randperm" => (1..=main.numel()).fold(1.0, |acc, k| acc / k as f64),
        _ => 1.0,
    }
}

/// Positional uniformity of permutations across seeds: the largest count of one value at one
/// position against Binomial(m, 1/n), with a union bound over the n² cells.
fn positional_failures(runs: &[&Tensor]) -> Vec<String> {
    let n = runs[0].numel();
    let m = runs.len();
    if n < 2 {
        return vec![];
    }
    let limit = binomial_limit(m, 1.0 / n as f64, ALPHA / (n as f64 * n as f64));
    let vals: Vec<Vec<f64>> = runs.iter().map(|t| t.to_f64_vec()).collect();
    let mut worst = (0usize, 0usize, 0.0f64);
    for i in 0..n {
        let mut at: Vec<f64> = vals.iter().map(|v| v[i]).collect();
        at.sort_by(f64::total_cmp);
        let mut k = 0;
        while k < at.len() {
            let run = at[k..].iter().take_while(|&&x| x == at[k]).count();
            if run > worst.0 {
                worst = (run, i, at[k]);
            }
            k += run;
        }
    }
    match limit {
        Some(c) if worst.0 >= c => vec![format!(
            "position {} holds {} in {} of {m} seeds (a uniform permutation of {n}: P ≤ {ALPHA:.1e} for ≥ {c} anywhere)",
            worst.1, worst.2, worst.0
        )],
        _ => vec![],
    }
}

/// The smallest count c ≤ m with P(Binomial(m, q) ≥ c) ≤ alpha, if any.
fn binomial_limit(m: usize, q: f64, alpha: f64) -> Option<usize> {
    let ln_pmf = |k: usize| ln_choose(m, k) + k as f64 * q.ln() + (m - k) as f64 * (1.0 - q).ln();
    let mut tail = 0.0;
    let mut c = None;
    for k in (0..=m).rev() {
        tail += ln_pmf(k).exp();
        if tail > alpha {
            break;
        }
        c = Some(k);
    }
    c
}

fn ln_choose(n: usize, k: usize) -> f64 {
    (1..=k).map(|i| ((n - k + i) as f64 / i as f64).ln()).sum()
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
        // sqrt(ln(2 / ALPHA) / 2000) with ALPHA = 1e-6 / 3.
        assert!((two_sided_bound(1000) - 0.0883).abs() < 1e-3);
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

    /// A uniform permutation of 0..n from a uniform stream (Fisher–Yates).
    fn shuffle(n: usize, seed: u64) -> Vec<f64> {
        let u = uniform(n, seed);
        let mut v: Vec<f64> = (0..n).map(|i| i as f64).collect();
        for i in (1..n).rev() {
            let j = ((u[i] * (i + 1) as f64) as usize).min(i);
            v.swap(i, j);
        }
        v
    }

    #[test]
    fn seeds_differ_and_are_stable() {
        assert_eq!(other_seed(7, 1), other_seed(7, 1));
        let mut seen: Vec<u32> = (1..=31).map(|k| other_seed(7, k)).collect();
        seen.push(7);
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 32, "31 distinct other seeds, none the case's own");
        assert!((CHECKS_PER_CASE * ALPHA - ALPHA_CASE).abs() < 1e-18);
    }

    #[test]
    fn cross_seed_checks_catch_a_generator_that_ignores_the_seed() {
        // rand: independent streams pass; the same stream under every seed fails.
        let main = f32s(&uniform(8, 1));
        let others: Vec<Tensor> = (2..5).map(|s| f32s(&uniform(8, s))).collect();
        let refs: Vec<&Tensor> = others.iter().collect();
        assert!(cross_seed_failures("rand", &main, &refs, None, &[], None).is_empty());
        let same = [&main, &main, &main];
        let f = cross_seed_failures("rand", &main, &same, None, &[], None);
        assert!(f.iter().any(|m| m.contains("same output")), "{f:?}");
        // One element of bf16 can repeat by chance: no verdict from a single draw.
        let one = Tensor::from_f64(TorchDType::Bf16, &[1], &[0.5]);
        assert!(cross_seed_failures("rand", &one, &[&one], None, &[], None).is_empty());
        // Pooling: 4 zeros per seed are too few to reject alone, 16 pooled are not.
        let z = f32s(&[0.0; 4]);
        assert!(failures("rand", &z, None, None, None).is_empty());
        let zs: Vec<Tensor> = (1..4).map(|k| f32s(&[k as f64 * 1e-3; 4])).collect();
        let zr: Vec<&Tensor> = zs.iter().collect();
        let f = cross_seed_failures("rand", &z, &zr, None, &[], None);
        assert!(f.iter().any(|m| m.contains("pooled")), "{f:?}");
        // Dropout: the same mask under 4 seeds of 40 elements at p = 0.5 fails (0.5^40 · 3).
        let x = f32s(&vec![1.0; 40]);
        let half: Vec<f64> = uniform(40, 9)
            .iter()
            .map(|&r| if r < 0.5 { 0.0 } else { 2.0 })
            .collect();
        let d = f32s(&half);
        let f = cross_seed_failures("native_dropout", &d, &[&d, &d, &d], Some(&x), &[], Some(0.5));
        assert!(f.iter().any(|m| m.contains("same output")), "{f:?}");
        // p = 0 keeps everything under every seed: identical outputs are correct.
        assert!(cross_seed_failures("native_dropout", &x, &[&x, &x, &x], Some(&x), &[], Some(0.0)).is_empty());
    }

    #[test]
    fn permutations_are_uniform_across_seeds() {
        for n in [2usize, 3, 5, 12, 100] {
            let perms: Vec<Tensor> = (0..32).map(|s| f32s(&shuffle(n, 100 + s))).collect();
            let refs: Vec<&Tensor> = perms[1..].iter().collect();
            assert!(
                cross_seed_failures("randperm", &perms[0], &refs, None, &[], None).is_empty(),
                "n = {n}: uniform permutations pass"
            );
            // The identity under every seed fails, from n = 2.
            let id = f32s(&(0..n).map(|i| i as f64).collect::<Vec<_>>());
            let f = cross_seed_failures("randperm", &id, &vec![&id; 31], None, &[], None);
            assert!(f.iter().any(|m| m.contains("position")), "n = {n}: {f:?}");
            // One fixed permutation (not the identity) under every seed fails too.
            let fixed = &perms[0];
            let f = cross_seed_failures("randperm", fixed, &vec![fixed; 31], None, &[], None);
            assert!(!f.is_empty(), "n = {n}: a seed-independent permutation");
        }
        // A rotation by a seed-dependent offset has uniform positions: it passes the positional
        // test (it is not a uniform permutation, but no marginal shows it).
        let n = 7;
        let rot: Vec<Tensor> = (0..32)
            .map(|s| f32s(&(0..n).map(|i| ((i + s * 3) % n) as f64).collect::<Vec<_>>()))
            .collect();
        let refs: Vec<&Tensor> = rot[1..].iter().collect();
        assert!(positional_failures(&std::iter::once(&rot[0]).chain(refs).collect::<Vec<_>>()).is_empty());
        assert_eq!(binomial_limit(32, 0.5, ALPHA / 4.0), Some(31));
        assert_eq!(binomial_limit(4, 0.5, ALPHA), None);
    }
}
