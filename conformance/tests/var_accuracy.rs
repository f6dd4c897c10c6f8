//! Variance and batch norm's training statistics against a float64 oracle, end to end.
//!
//! PyTorch's CPU accumulates float variances and batch-norm statistics in double and rounds
//! once, so its error is about half an ulp. The device has no fp64: plain fp32 sums were 1–2 ulp
//! off on variances of rows with a large mean, hundreds of ulps off on a near-zero batch mean,
//! and overflowed the squares of a large outlier where the variance itself is finite. The
//! lowerings now use compensated sums (conformance/lower/src/compensated.rs; docs/numerics.md,
//! "Variance and batch norm's statistics"), and these inputs check it. Each case is a few
//! thousand elements (well under a second of simulation in all).

use trnconf::case::Value;
use trnconf::compare::OutputMetrics;
use trnconf::expect::Status;
use trnconf::fixture::{CaseBuilder, run_on_trn1};
use trnconf::tensor::TorchDType::*;

/// Deterministic uniform values in [-1, 1) (a 64-bit LCG), rounded to f32.
fn uniform(seed: u64, n: usize) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0) as f32 as f64
        })
        .collect()
}

/// The f64 variance (two passes in f64 over the exact f32 inputs).
fn var64(x: &[f64], correction: f64) -> f64 {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - correction)
}

/// Runs one case on trn1 and returns the metrics of its outputs against the stored values
/// (here: the float64 oracle rounded to f32).
fn run(c: CaseBuilder) -> Vec<OutputMetrics> {
    let r = run_on_trn1("var-accuracy", c);
    assert_eq!(r.status, Status::Pass, "{}", r.message);
    r.metrics
}

fn var_case(rows: usize, cols: usize, x: &[f64], want: &[f64], n: usize) -> CaseBuilder {
    CaseBuilder::new("var.correction", "f32", "hand", n)
        .input(F32, &[rows, cols], x)
        .arg(Value::Ints(vec![1]))
        .kwarg("correction", Value::Int(1))
        .output(F32, &[rows], want)
}

/// Rows around 1000 with a spread of 3 (mean ≫ std): the plain fp32 two-pass was 1–2 ulps from
/// the correctly rounded variance on most rows; the compensated one rounds it correctly on
/// all but a few and is never more than one ulp off. Rows of 1,000 and of 10,000 elements (three
/// chunks: the chunks' pairs are combined).
#[test]
fn variance_of_large_mean_rows_is_correctly_rounded() {
    for (cols, rows, seed) in [(1000, 32, 1u64), (10_000, 4, 2)] {
        let mut x = Vec::new();
        let mut want = Vec::new();
        for r in 0..rows {
            let row: Vec<f64> = uniform(seed * 1000 + r as u64, cols)
                .iter()
                .map(|u| (1000.0 + 3.0 * u) as f32 as f64)
                .collect();
            want.push(var64(&row, 1.0));
            x.extend(row);
        }
        let m = &run(var_case(rows, cols, &x, &want, cols))[0];
        let h = &m.ulp_hist;
        assert!(
            m.max_ulp <= 1,
            "{rows}×{cols}: {} ulps from the oracle (histogram {h:?})",
            m.max_ulp
        );
        assert!(
            h.exact * 10 >= rows as u64 * 9,
            "{rows}×{cols}: only {} of {rows} variances correctly rounded ({h:?})",
            h.exact
        );
    }
}

/// A large outlier: its square (~4e38, 9e38) overflows fp32 where the variance (~4e36, 2e37)
/// does not. The device scales such rows by 2⁻⁶⁴ before squaring; before, it returned inf.
#[test]
fn variance_of_a_large_outlier_does_not_overflow() {
    let cols = 100;
    let mut x = vec![0.0; 2 * cols];
    let u = uniform(7, 2 * cols);
    for (i, v) in x.iter_mut().enumerate() {
        *v = u[i];
    }
    x[0] = 2e19f32 as f64;
    x[cols] = 3e19f32 as f64;
    x[cols + 1] = -3e19f32 as f64;
    let want: Vec<f64> = x.chunks(cols).map(|r| var64(r, 1.0)).collect();
    assert!(want.iter().all(|v| v.is_finite() && *v < f32::MAX as f64));
    let m = &run(var_case(2, cols, &x, &want, 1))[0];
    assert_eq!(m.inf_mismatches, 0, "an overflow where the variance is finite");
    assert!(m.max_ulp <= 1, "{} ulps from the oracle", m.max_ulp);
}

/// Training-mode batch norm (`_native_batch_norm_legit.no_stats`) of values in [-1, 1) with a
/// near-zero per-channel mean: the plain fp32 sum's rounding is many ulps of such a mean (and
/// PyTorch's is not, as it sums in double). `save_mean` and `save_invstd` are checked against
/// the float64 oracle: at most one ulp (was up to hundreds for the mean).
#[test]
fn batch_norm_training_statistics_follow_the_oracle() {
    let (nb, c, hw) = (8, 4, 250);
    let x = uniform(11, nb * c * hw);
    let eps = 1e-5;
    let mut mean = vec![0.0; c];
    let mut invstd = vec![0.0; c];
    for ch in 0..c {
        let vals: Vec<f64> = (0..nb)
            .flat_map(|b| (0..hw).map(move |i| (b, i)))
            .map(|(b, i)| x[(b * c + ch) * hw + i])
            .collect();
        let m = vals.iter().sum::<f64>() / vals.len() as f64;
        mean[ch] = m;
        invstd[ch] = 1.0 / (var64(&vals, 0.0) + eps).sqrt();
    }
    let y: Vec<f64> = (0..x.len())
        .map(|i| (x[i] - mean[(i / hw) % c]) * invstd[(i / hw) % c])
        .collect();
    let case = CaseBuilder::new("_native_batch_norm_legit.no_stats", "f32", "hand", 0)
        .input(F32, &[nb, c, hw], &x)
        .arg(Value::None(()))
        .arg(Value::None(()))
        .arg(Value::Bool(true))
        .float_arg(0.1)
        .float_arg(eps)
        .output(F32, &[nb, c, hw], &y)
        .output(F32, &[c], &mean)
        .output(F32, &[c], &invstd);
    let m = run(case);
    assert!(m[1].max_ulp <= 1, "save_mean {} ulps from the oracle", m[1].max_ulp);
    assert!(m[2].max_ulp <= 1, "save_invstd {} ulps from the oracle", m[2].max_ulp);
}
