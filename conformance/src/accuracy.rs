//! Accuracy against the oracle (golden format 2): the error of an output against the exact
//! (float64) result, in ulps of the output dtype, and the accuracy rule that lets a float output
//! pass when it is not `assert_close` to PyTorch CPU's rounding but is at least as accurate as the
//! CPU, or within a documented error bound for the op's algorithm.
//!
//! The rule, its constants and their derivations are in docs/numerics.md ("Accuracy against the
//! oracle"); the stored form of oracles in docs/golden-format.md ("Oracles"). An element passes
//! when its error is at most `max(k · CPU's max error, bound)`:
//!
//! * `k` = [`CPU_ERROR_FACTOR`];
//! * dot products (`dot`, K terms): `λ·√K·u·Σ|a_k||b_k| + 1 ulp`, `λ` = [`LAMBDA`],
//!   `u` = [`ACCUMULATION_UNIT_ROUNDOFF`] (Higham and Mary's probabilistic bound); the `+ 1 ulp`
//!   is the final rounding to the output dtype ([`OUTPUT_ROUNDING_ULP`]);
//! * summations (`sum`, n terms): `λ·√n·u·Σ|x_k| + 1 ulp`;
//! * correctly rounded arithmetic: [`ARITHMETIC_ULP_BUDGET`];
//! * transcendental functions and activations: [`TRANSCENDENTAL_ULP_BUDGET`];
//! * anything else (`none`): the CPU-relative part only.
//!
//! and no element has a NaN/inf disagreement with the oracle (rounded to the output dtype).

use crate::case::{CaseErrorKind, CaseMeta};
use crate::tensor::{Tensor, TorchDType};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `k`: a device output passes if its oracle error is at most `k` times the CPU's (max over the
/// output, in ulps). 2: the CPU's correctly rounded 0.5 ulp gives 1 ulp, which covers a device
/// that computes in fp32 and rounds once more on write (≤ 0.5 + 2^-16 ulp).
pub const CPU_ERROR_FACTOR: f64 = 2.0;

/// `λ` of Higham and Mary's probabilistic bound `λ·√n·u`: it holds with probability at least
/// `1 − 2n·exp(−λ²(1−u)²/2)` under their model (independent, mean-zero rounding errors), i.e.
/// `1 − 3.0e-8·n` for λ = 6.
pub const LAMBDA: f64 = 6.0;

/// Unit roundoff of the accumulation: fp32 (2^-24). TensorE accumulates in fp32 PSUM, and PyTorch
/// CPU accumulates bf16/f16 dot products and sums in fp32 too; an accumulation in a narrower type
/// (bf16: 2^-8) exceeds the bound by orders of magnitude.
pub const ACCUMULATION_UNIT_ROUNDOFF: f64 = 1.0 / 16_777_216.0;

/// Added to the dot/sum bounds: the final rounding to the output dtype (0.5 ulp) plus 0.5 ulp
/// for an oracle that sits at a binade boundary (the rounded result's ulp is twice the oracle's).
pub const OUTPUT_ROUNDING_ULP: f64 = 1.0;

/// Correctly rounded arithmetic (`+ − × ÷ √`, casts): 0.5 ulp when rounded once; 2 ulps allow a
/// division as a reciprocal times the dividend in fp32 (≤ 1.5 ulp) and a second rounding on write.
pub const ARITHMETIC_ULP_BUDGET: f64 = 2.0;

/// Transcendental functions and activations (exp, log, tanh, erf, gelu, sigmoid, pow, …): a
/// fixed budget of 4 ulps of the output dtype, the accuracy class of vendor vector-math libraries
/// (glibc's libm and SLEEF's "u10" functions are within 1–3.5 ulps in f32).
pub const TRANSCENDENTAL_ULP_BUDGET: f64 = 4.0;

// ---------------------------------------------------------------------------------------------
// What the file says

/// The algorithm class of an output, and the data its bound needs.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BoundSpec {
    /// K-term dot products: `scale` names a tensor holding `Σ|a_k||b_k|` per output element.
    Dot {
        terms: u64,
        scale: String,
    },
    /// n-term summations: `scale` holds `Σ|x_k|` per output element (a mean: `Σ|x_k|/n`).
    Sum {
        terms: u64,
        scale: String,
    },
    Arithmetic,
    Transcendental,
    /// No algorithm bound: only the CPU-relative part of the rule.
    #[default]
    None,
}

/// The oracle entry of one output in the file's metadata.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case", deny_unknown_fields)]
pub enum OracleSpec {
    /// The float64 result, stored as tensor `tensor` (`F64`, or `F32` for 16/8-bit outputs).
    #[serde(rename = "f64")]
    F64 {
        tensor: String,
        #[serde(default)]
        dtype: Option<String>,
        #[serde(default)]
        bound: BoundSpec,
    },
    /// The float64 result equals the stored output exactly: the output is its own oracle.
    Exact,
    /// No oracle, and why.
    None { why: String },
}

/// The bound of one output, with its data loaded.
#[derive(Clone, Debug, PartialEq)]
pub enum Bound {
    Dot { terms: u64, scale: Vec<f64> },
    Sum { terms: u64, scale: Vec<f64> },
    Arithmetic,
    Transcendental,
    None,
}

impl Bound {
    pub fn kind(&self) -> &'static str {
        match self {
            Bound::Dot { .. } => "dot",
            Bound::Sum { .. } => "sum",
            Bound::Arithmetic => "arithmetic",
            Bound::Transcendental => "transcendental",
            Bound::None => "none",
        }
    }

    /// The bound for element `i` whose oracle is `o`, in ulps of `dtype`.
    pub fn ulps(&self, i: usize, o: f64, dtype: TorchDType) -> f64 {
        match self {
            Bound::Dot { terms, scale } | Bound::Sum { terms, scale } => {
                let s = scale.get(i).copied().unwrap_or(f64::INFINITY);
                LAMBDA * (*terms as f64).sqrt() * ACCUMULATION_UNIT_ROUNDOFF * s / ulp_of(o, dtype)
                    + OUTPUT_ROUNDING_ULP
            }
            Bound::Arithmetic => ARITHMETIC_ULP_BUDGET,
            Bound::Transcendental => TRANSCENDENTAL_ULP_BUDGET,
            Bound::None => 0.0,
        }
    }
}

/// A loaded oracle.
#[derive(Clone, Debug, PartialEq)]
pub enum Oracle {
    /// One f64 per scalar of the output (complex: real, imaginary pairs).
    Values {
        values: Vec<f64>,
        bound: Bound,
    },
    Exact,
    Unavailable(String),
}

/// Whether `name` is a tensor the oracle entries refer to (stored, but not in `tensors`).
pub fn is_oracle_tensor(specs: &BTreeMap<String, OracleSpec>, name: &str) -> bool {
    specs.values().any(|s| match s {
        OracleSpec::F64 { tensor, bound, .. } => {
            tensor == name
                || matches!(bound, BoundSpec::Dot { scale, .. } | BoundSpec::Sum { scale, .. } if scale == name)
        }
        _ => false,
    })
}

fn read_f64s(st: &safetensors::SafeTensors, name: &str, want: usize) -> Result<Vec<f64>, CaseErrorKind> {
    let view = st
        .tensor(name)
        .map_err(|_| CaseErrorKind::MissingTensor { name: name.into() })?;
    let d = view.data();
    let vals: Vec<f64> = match view.dtype() {
        safetensors::Dtype::F64 => d
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        safetensors::Dtype::F32 => d
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        other => {
            return Err(CaseErrorKind::TensorMismatch {
                name: name.into(),
                what: format!("oracle tensors are F64 or F32, not {other:?}"),
            });
        }
    };
    if vals.len() != want {
        return Err(CaseErrorKind::TensorMismatch {
            name: name.into(),
            what: format!("holds {} values, the output has {want} scalars", vals.len()),
        });
    }
    Ok(vals)
}

/// Loads and validates the oracles a case file describes.
pub fn load_oracles(meta: &CaseMeta, st: &safetensors::SafeTensors) -> Result<BTreeMap<String, Oracle>, CaseErrorKind> {
    let mut out = BTreeMap::new();
    for (name, spec) in &meta.oracle {
        let Some(tm) = meta.tensors.get(name).filter(|_| name.starts_with("output.")) else {
            return Err(CaseErrorKind::BadMetadata(format!(
                "oracle for `{name}`, which is not an output tensor"
            )));
        };
        if !(tm.dtype.is_float() || tm.dtype.is_complex()) {
            return Err(CaseErrorKind::BadMetadata(format!(
                "oracle for `{name}`, which is {} (oracles are for floating outputs)",
                tm.dtype
            )));
        }
        let numel: usize = tm.shape.iter().product();
        let scalars = if tm.dtype.is_complex() { 2 * numel } else { numel };
        let oracle = match spec {
            OracleSpec::Exact => Oracle::Exact,
            OracleSpec::None { why } => Oracle::Unavailable(why.clone()),
            OracleSpec::F64 { tensor, bound, .. } => {
                let values = read_f64s(st, tensor, scalars)?;
                let bound = match bound {
                    BoundSpec::Dot { terms, scale } => Bound::Dot {
                        terms: *terms,
                        scale: read_f64s(st, scale, numel)?,
                    },
                    BoundSpec::Sum { terms, scale } => Bound::Sum {
                        terms: *terms,
                        scale: read_f64s(st, scale, numel)?,
                    },
                    BoundSpec::Arithmetic => Bound::Arithmetic,
                    BoundSpec::Transcendental => Bound::Transcendental,
                    BoundSpec::None => Bound::None,
                };
                Oracle::Values { values, bound }
            }
        };
        out.insert(name.clone(), oracle);
    }
    Ok(out)
}

/// A golden's own consistency (docs/golden-format.md, "Oracles"): where an output's oracle
/// carries an algorithm bound (`dot`, `sum`, `arithmetic`, `transcendental`), PyTorch CPU's
/// stored output must itself be within that bound of the oracle, or within the output's
/// `assert_close` tolerance of it, at every element where both are finite. The accuracy rule
/// lets a device pass at `k ×` the CPU's error, so a CPU output outside its own bound (garbage,
/// or an oracle moved off it) would license anything; such a file is an error naming it. A `none`
/// bound has no algorithm figure to hold the CPU to (only the CPU-relative part applies), and an
/// `exact` oracle is the CPU output itself.
pub fn check_consistency(
    op: &str,
    tensors: &BTreeMap<String, Tensor>,
    oracles: &BTreeMap<String, Oracle>,
) -> Result<(), CaseErrorKind> {
    for (name, oracle) in oracles {
        let Oracle::Values { values, bound } = oracle else {
            continue;
        };
        if matches!(bound, Bound::None) {
            continue;
        }
        let Some(cpu) = tensors.get(name) else {
            continue;
        };
        let dtype = cpu.dtype;
        let tol = crate::compare::tolerance_for(op, dtype).0;
        let per_element = if dtype.is_complex() { 2 } else { 1 };
        let mut worst: Option<(usize, f64, f64)> = None;
        let mut count = 0usize;
        for (i, &o) in values.iter().enumerate() {
            let c = cpu.value_f64(i);
            let o_r = overflowed(o, dtype);
            if !(c.is_finite() && o_r.is_finite()) {
                continue;
            }
            let ulp = ulp_of(o, dtype);
            let allowed = (bound.ulps(i / per_element, o, dtype) * ulp).max(tol.atol + tol.rtol * o.abs());
            let err = (c - o).abs();
            if err > allowed {
                count += 1;
                if worst.is_none_or(|(_, e, _)| err / ulp > e) {
                    worst = Some((i, err / ulp, allowed / ulp));
                }
            }
        }
        if let Some((i, e, allowed)) = worst {
            return Err(CaseErrorKind::Inconsistent(format!(
                "output `{name}`: the stored CPU output is outside its own {} bound of its oracle at {count} \
                 element(s) (worst: scalar {i}, {e:.1} ulp, allowed {allowed:.1} ulp); the output or its \
                 oracle is wrong",
                bound.kind()
            )));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Ulps

/// (precision p with the implicit bit, minimum normal exponent, largest finite value) of a float
/// dtype (complex: of its f32 parts).
fn format_of(dtype: TorchDType) -> (i32, i32, f64) {
    match dtype {
        TorchDType::Bf16 => (8, -126, 3.3895313892515355e38),
        TorchDType::F16 => (11, -14, 65504.0),
        TorchDType::F8E4m3fn => (4, -6, 448.0),
        TorchDType::F8E5m2 => (3, -14, 57344.0),
        _ => (24, -126, f32::MAX as f64),
    }
}

/// The ulp of `dtype` at `x` (the spacing of the binade holding |x|, the subnormal spacing below
/// the normal range, the top binade's spacing beyond the largest finite value).
pub fn ulp_of(x: f64, dtype: TorchDType) -> f64 {
    let (p, emin, max) = format_of(dtype);
    let a = x.abs().min(max);
    let e = if a == 0.0 {
        emin
    } else {
        (a.log2().floor() as i32).max(emin)
    };
    // log2 can be off by one next to a power of two: correct it exactly.
    let e = if a >= 2f64.powi(e + 1) {
        e + 1
    } else if a < 2f64.powi(e) && e > emin {
        e - 1
    } else {
        e
    };
    2f64.powi(e - (p - 1))
}

/// `x` rounded to the overflow behaviour of `dtype`: ±inf (NaN for e4m3fn, which has no inf) when
/// it is beyond the largest finite value by half an ulp or more, else `x` itself (finite values
/// are compared in ulps, so only overflow matters here).
fn overflowed(x: f64, dtype: TorchDType) -> f64 {
    let (_, _, max) = format_of(dtype);
    if x.is_finite() && x.abs() >= max + ulp_of(max, dtype) / 2.0 {
        if dtype == TorchDType::F8E4m3fn {
            f64::NAN
        } else {
            f64::INFINITY.copysign(x)
        }
    } else {
        x
    }
}

/// The error of `a` against the oracle `o` in ulps of `dtype`; `None` when they disagree on
/// NaN/inf (after rounding the oracle's overflow as the dtype would).
pub fn error_ulps(a: f64, o: f64, dtype: TorchDType) -> Option<f64> {
    let o = overflowed(o, dtype);
    if a.is_nan() || o.is_nan() {
        return (a.is_nan() && o.is_nan()).then_some(0.0);
    }
    if a.is_infinite() || o.is_infinite() {
        return (a == o).then_some(0.0);
    }
    Some((a - o).abs() / ulp_of(o, dtype))
}

// ---------------------------------------------------------------------------------------------
// Metrics and the rule

/// The error of one output against its oracle: recorded for every float output that has one.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OracleMetrics {
    /// `f64` or `exact`.
    pub method: &'static str,
    /// The bound's algorithm class (`dot`, `sum`, `arithmetic`, `transcendental`, `none`).
    pub bound: &'static str,
    /// The device's error against the oracle, in ulps of the output dtype: max and 99th
    /// percentile over the elements.
    pub device_max_ulp: f64,
    pub device_p99_ulp: f64,
    /// PyTorch CPU's error against the same oracle.
    pub cpu_max_ulp: f64,
    pub cpu_p99_ulp: f64,
    /// `device_max_ulp / cpu_max_ulp` (absent when the CPU is exact: 0/0 or x/0).
    pub ratio: Option<f64>,
    /// The allowance at the element where the device's error is closest to it (ulps).
    pub allowed_ulp: f64,
    /// The largest `device error / allowance` over the elements (≤ 1: within the rule; 0 when
    /// the device matches the oracle; inf where the allowance is 0 and the device is off), the
    /// headroom figure of docs/numerics.md's accuracy table.
    pub allowance_use: f64,
    /// Elements where the device disagrees with the oracle on NaN/inf.
    pub nonfinite_mismatches: u64,
    /// Elements over their allowance.
    pub over_bound: u64,
    /// Whether every element is within `max(k·cpu_max_ulp, bound)` and no NaN/inf disagrees.
    pub within: bool,
}

impl OracleMetrics {
    /// A one-line summary for messages and `show`.
    pub fn summary(&self) -> String {
        let ratio = self.ratio.map(|r| format!("{r:.3}")).unwrap_or_else(|| "-".into());
        format!(
            "oracle ({} bound): device max {:.3} ulp (p99 {:.3}), CPU max {:.3} ulp (p99 {:.3}), ratio {ratio}, \
             allowed {:.3} ulp; {} over, {} NaN/inf disagreements",
            self.bound,
            self.device_max_ulp,
            self.device_p99_ulp,
            self.cpu_max_ulp,
            self.cpu_p99_ulp,
            self.allowed_ulp,
            self.over_bound,
            self.nonfinite_mismatches
        )
    }
}

fn percentile(mut v: Vec<f64>, q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let k = ((v.len() - 1) as f64 * q).round() as usize;
    let (_, x, _) = v.select_nth_unstable_by(k, f64::total_cmp);
    *x
}

/// Measures `actual` (the device) and `cpu` (the golden output) against `oracle` and applies the
/// accuracy rule. `None` when the output has no usable oracle (or shapes/dtypes disagree: the
/// `assert_close` comparison reports that).
pub fn measure(actual: &Tensor, cpu: &Tensor, oracle: &Oracle) -> Option<OracleMetrics> {
    if actual.shape != cpu.shape || actual.dtype != cpu.dtype {
        return None;
    }
    let dtype = cpu.dtype;
    let n = cpu.num_scalars();
    let exact_values;
    let (method, bound, oracle_values): (&'static str, &Bound, &[f64]) = match oracle {
        Oracle::Values { values, bound } if values.len() == n => ("f64", bound, values),
        Oracle::Exact => {
            exact_values = cpu.to_f64_vec();
            ("exact", &Bound::None, &exact_values)
        }
        _ => return None,
    };
    let oracle_at = |i: usize| oracle_values[i];
    let per_element = if dtype.is_complex() { 2 } else { 1 };
    let mut dev = Vec::with_capacity(n);
    let mut cpu_errs = Vec::with_capacity(n);
    let mut nonfinite = 0u64;
    for i in 0..n {
        let o = oracle_at(i);
        match error_ulps(actual.value_f64(i), o, dtype) {
            Some(e) => dev.push((i, e)),
            None => nonfinite += 1,
        }
        if let Some(e) = error_ulps(cpu.value_f64(i), o, dtype) {
            cpu_errs.push(e);
        }
    }
    let cpu_max = cpu_errs.iter().copied().fold(0.0, f64::max);
    let relative = CPU_ERROR_FACTOR * cpu_max;
    let mut over = 0u64;
    let (mut worst_margin, mut allowed_at_worst) = (f64::NEG_INFINITY, relative);
    let mut allowance_use = 0.0f64;
    for &(i, e) in &dev {
        let allowed = relative.max(bound.ulps(i / per_element, oracle_at(i), dtype));
        if e > allowed {
            over += 1;
        }
        if e > 0.0 {
            allowance_use = allowance_use.max(if allowed > 0.0 { e / allowed } else { f64::INFINITY });
        }
        let margin = e - allowed;
        if margin > worst_margin {
            (worst_margin, allowed_at_worst) = (margin, allowed);
        }
    }
    let device_max = dev.iter().map(|d| d.1).fold(0.0, f64::max);
    Some(OracleMetrics {
        method,
        bound: bound.kind(),
        device_max_ulp: device_max,
        device_p99_ulp: percentile(dev.iter().map(|d| d.1).collect(), 0.99),
        cpu_max_ulp: cpu_max,
        cpu_p99_ulp: percentile(cpu_errs, 0.99),
        ratio: (cpu_max > 0.0).then(|| device_max / cpu_max),
        allowed_ulp: allowed_at_worst,
        allowance_use,
        nonfinite_mismatches: nonfinite,
        over_bound: over,
        within: over == 0 && nonfinite == 0,
    })
}

pub mod inject;

#[cfg(test)]
mod tests;
