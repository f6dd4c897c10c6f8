//! Comparing a run's outputs with the golden outputs.
//!
//! The pass rule is PyTorch's `torch.testing.assert_close`: an element matches when
//! `|actual − golden| ≤ atol + rtol·|golden|` (both finite), or both are equal (so ±inf must
//! match exactly), or both are NaN. Shape and dtype must match. Tolerances come from ONE table,
//! [`default_tolerance`], with per-op overrides in [`TOLERANCE_OVERRIDES`] (each with its reason).
//!
//! Every output gets [`OutputMetrics`] whether it passes or not (max abs/rel error, max ULP
//! distance in the golden dtype, mismatch count, first mismatch), so that tolerances can be
//! calibrated and drift tracked in snapshots. Failure text uses PyTorch's wording.
//!
//! Index outputs of ops that may break ties differently (sort, topk, argmax, …) are compared
//! semantically: both index sets must select equal values from the input ([`INDEX_OUTPUT_RULES`]).

pub mod rng;
use crate::case::{Case, Check, OpCall, Properties, Value};
use crate::tensor::{Tensor, TorchDType, format_index, unravel};
use serde::Serialize;
use std::collections::BTreeMap;

pub use trnlower::tolerance::{TOLERANCE_OVERRIDES, Tolerance, ToleranceOverride, default_tolerance, tolerance_for};

// ---------------------------------------------------------------------------------------------
// Metrics

/// Counts of elements by ULP distance (in the golden dtype; integers: absolute difference).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UlpHistogram {
    pub exact: u64,
    pub one: u64,
    pub two_to_four: u64,
    pub five_to_sixteen: u64,
    pub more: u64,
}

impl UlpHistogram {
    fn add(&mut self, ulp: u64) {
        match ulp {
            0 => self.exact += 1,
            1 => self.one += 1,
            2..=4 => self.two_to_four += 1,
            5..=16 => self.five_to_sixteen += 1,
            _ => self.more += 1,
        }
    }
}

/// The first element that does not match.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mismatch {
    /// Multi-index into the output.
    pub index: Vec<usize>,
    pub actual: String,
    pub expected: String,
    /// The element's ULP distance (`None` when a side is NaN).
    pub ulp: Option<u64>,
}

/// How an output was judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CompareKind {
    /// Elementwise with a tolerance.
    Values,
    /// Index output: the indices must select equal values from the input.
    Indices,
    /// Shape and dtype only.
    Metadata,
    /// Statistical or structural properties (RNG ops).
    Properties,
    /// A non-tensor output (int, bool, …), compared for equality.
    Scalar,
}

/// What the comparison of one output found. Recorded for every output, pass or fail.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutputMetrics {
    pub name: String,
    pub kind: CompareKind,
    pub passed: bool,
    /// Golden dtype and shape.
    pub dtype: Option<TorchDType>,
    pub shape: Vec<usize>,
    pub numel: usize,
    pub rtol: f64,
    pub atol: f64,
    /// Max |actual − golden| over elements where neither is NaN (0 when both are the same inf).
    pub max_abs_err: f64,
    /// Max |actual − golden| / |golden| over the same elements (inf when golden is 0).
    pub max_rel_err: f64,
    /// Max ULP distance in the golden dtype over elements where neither is NaN.
    pub max_ulp: u64,
    pub ulp_hist: UlpHistogram,
    pub mismatches: u64,
    /// Elements where exactly one of actual/golden is NaN.
    pub nan_mismatches: u64,
    /// Elements where one side is ±inf and the other is not the same inf.
    pub inf_mismatches: u64,
    pub first_mismatch: Option<Mismatch>,
    /// PyTorch-worded explanation when the output fails; notes otherwise.
    pub message: String,
    /// Device and CPU error against the oracle (golden format 2), when the output has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle: Option<crate::accuracy::OracleMetrics>,
    /// Passed by the accuracy rule only: not `assert_close` to the CPU output (status `accurate`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub accurate: bool,
}

impl OutputMetrics {
    fn new(name: &str, kind: CompareKind) -> Self {
        OutputMetrics {
            name: name.to_string(),
            kind,
            passed: true,
            dtype: None,
            shape: Vec::new(),
            numel: 0,
            rtol: 0.0,
            atol: 0.0,
            max_abs_err: 0.0,
            max_rel_err: 0.0,
            max_ulp: 0,
            ulp_hist: UlpHistogram::default(),
            mismatches: 0,
            nan_mismatches: 0,
            inf_mismatches: 0,
            first_mismatch: None,
            message: String::new(),
            oracle: None,
            accurate: false,
        }
    }

    fn fail(mut self, message: String) -> Self {
        self.passed = false;
        self.message = message;
        self
    }
}

/// Maps the bits of a float of `width` bits to an integer that is monotone in the value
/// (−0 and +0 both map to 0), so ULP distance is a difference.
fn ordered(bits: u64, width: u32) -> i64 {
    let sign = 1u64 << (width - 1);
    let mag = (bits & (sign - 1)) as i64;
    if bits & sign != 0 { -mag } else { mag }
}

/// ULP distance between two scalars of a float dtype, from their bits.
pub fn ulp_distance(dtype: TorchDType, a_bits: u64, b_bits: u64) -> u64 {
    let width = match dtype {
        TorchDType::F32 | TorchDType::C64 => 32,
        TorchDType::Bf16 | TorchDType::F16 => 16,
        _ => 8,
    };
    ordered(a_bits, width).abs_diff(ordered(b_bits, width))
}

/// Formats a float like Python's `repr` (shortest round-trip digits, scientific notation with a
/// two-digit exponent outside [1e-4, 1e16)), so messages read like PyTorch's.
pub fn py_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    let exp = x.abs().log10().floor() as i32;
    if (-4..16).contains(&exp) {
        return format!("{x:?}");
    }
    let s = format!("{x:e}");
    match s.split_once('e') {
        Some((mant, e)) => {
            let (sign, digits) = match e.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', e),
            };
            format!("{mant}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

/// Formats a value like Python prints a float/int.
fn fmt_num(x: f64, is_float: bool) -> String {
    if is_float { py_repr(x) } else { format!("{}", x as i64) }
}

fn torch_size(shape: &[usize]) -> String {
    format!(
        "torch.Size([{}])",
        shape.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")
    )
}

/// One element pair's verdict, for a float dtype.
#[derive(Clone, Copy)]
struct Elem {
    abs: f64,
    rel: f64,
    close: bool,
    /// Exactly one side is NaN.
    nan_mismatch: bool,
    inf_mismatch: bool,
}

fn judge(a: f64, e: f64, tol: Tolerance) -> Elem {
    let a_nan = a.is_nan();
    let e_nan = e.is_nan();
    if a_nan || e_nan {
        return Elem {
            abs: f64::NAN,
            rel: f64::NAN,
            close: a_nan && e_nan,
            nan_mismatch: a_nan != e_nan,
            inf_mismatch: false,
        };
    }
    if a == e {
        return Elem {
            abs: 0.0,
            rel: 0.0,
            close: true,
            nan_mismatch: false,
            inf_mismatch: false,
        };
    }
    let abs = (a - e).abs();
    let rel = abs / e.abs();
    let close = abs.is_finite() && abs <= tol.atol + tol.rtol * e.abs();
    Elem {
        abs,
        rel,
        close,
        nan_mismatch: false,
        inf_mismatch: a.is_infinite() || e.is_infinite(),
    }
}

/// Compares one output tensor elementwise (the `assert_close` rule).
pub fn compare_tensors(name: &str, actual: &Tensor, expected: &Tensor, tol: Tolerance) -> OutputMetrics {
    let mut m = OutputMetrics::new(name, CompareKind::Values);
    m.dtype = Some(expected.dtype);
    m.shape = expected.shape.clone();
    m.numel = expected.numel();
    m.rtol = tol.rtol;
    m.atol = tol.atol;
    if actual.shape != expected.shape {
        return m.fail(format!(
            "The values for attribute 'shape' do not match: {} != {}.",
            torch_size(&actual.shape),
            torch_size(&expected.shape)
        ));
    }
    if actual.dtype != expected.dtype {
        return m.fail(format!(
            "The values for attribute 'dtype' do not match: {} != {}.",
            actual.dtype.torch_name(),
            expected.dtype.torch_name()
        ));
    }
    let dtype = expected.dtype;
    let is_float = dtype.is_float() || dtype.is_complex();
    // Greatest differences among mismatches only, as PyTorch's message reports them.
    let mut worst_abs: (f64, usize) = (0.0, 0);
    let mut worst_rel: (f64, usize) = (0.0, 0);
    let n = expected.numel();
    for i in 0..n {
        let elem = if dtype.is_complex() {
            let (ar, ai, er, ei) = (
                actual.value_f64(2 * i),
                actual.value_f64(2 * i + 1),
                expected.value_f64(2 * i),
                expected.value_f64(2 * i + 1),
            );
            let a_nan = ar.is_nan() || ai.is_nan();
            let e_nan = er.is_nan() || ei.is_nan();
            if a_nan || e_nan {
                Elem {
                    abs: f64::NAN,
                    rel: f64::NAN,
                    close: a_nan && e_nan,
                    nan_mismatch: a_nan != e_nan,
                    inf_mismatch: false,
                }
            } else if ar == er && ai == ei {
                Elem {
                    abs: 0.0,
                    rel: 0.0,
                    close: true,
                    nan_mismatch: false,
                    inf_mismatch: false,
                }
            } else {
                let abs = (ar - er).hypot(ai - ei);
                let mag = er.hypot(ei);
                let close = abs.is_finite() && abs <= tol.atol + tol.rtol * mag;
                let inf = ar.is_infinite() || ai.is_infinite() || er.is_infinite() || ei.is_infinite();
                Elem {
                    abs,
                    rel: abs / mag,
                    close,
                    nan_mismatch: false,
                    inf_mismatch: inf,
                }
            }
        } else if is_float {
            judge(actual.value_f64(i), expected.value_f64(i), tol)
        } else {
            // Integers and bool: exact, differences in i128 so that int64 extremes cannot overflow.
            let (a, e) = (actual.value_i64(i), expected.value_i64(i));
            let abs = (a as i128 - e as i128).unsigned_abs() as f64;
            let close = (a as i128 - e as i128).unsigned_abs() as f64 <= tol.atol + tol.rtol * (e as f64).abs();
            Elem {
                abs,
                rel: if e == 0 {
                    if a == e { 0.0 } else { f64::INFINITY }
                } else {
                    abs / (e as f64).abs()
                },
                close,
                nan_mismatch: false,
                inf_mismatch: false,
            }
        };
        // ULP distance: per scalar for floats (complex: the larger part), |difference| for ints.
        let mut elem_ulp = None;
        if !elem.abs.is_nan() {
            let ulp = if dtype.is_complex() {
                ulp_distance(dtype, actual.bits(2 * i), expected.bits(2 * i)).max(ulp_distance(
                    dtype,
                    actual.bits(2 * i + 1),
                    expected.bits(2 * i + 1),
                ))
            } else if is_float {
                ulp_distance(dtype, actual.bits(i), expected.bits(i))
            } else {
                (actual.value_i64(i) as i128 - expected.value_i64(i) as i128)
                    .unsigned_abs()
                    .min(u64::MAX as u128) as u64
            };
            elem_ulp = Some(ulp);
            m.max_ulp = m.max_ulp.max(ulp);
            m.ulp_hist.add(ulp);
            m.max_abs_err = m.max_abs_err.max(elem.abs);
            m.max_rel_err = m.max_rel_err.max(elem.rel);
        } else if elem.close {
            m.ulp_hist.add(0);
        }
        m.nan_mismatches += elem.nan_mismatch as u64;
        m.inf_mismatches += elem.inf_mismatch as u64;
        if !elem.close {
            m.mismatches += 1;
            if m.first_mismatch.is_none() {
                let (a, e) = if dtype.is_complex() {
                    (
                        format!(
                            "({}+{}j)",
                            fmt_num(actual.value_f64(2 * i), true),
                            fmt_num(actual.value_f64(2 * i + 1), true)
                        ),
                        format!(
                            "({}+{}j)",
                            fmt_num(expected.value_f64(2 * i), true),
                            fmt_num(expected.value_f64(2 * i + 1), true)
                        ),
                    )
                } else {
                    (
                        fmt_num(actual.value_f64(i), is_float),
                        fmt_num(expected.value_f64(i), is_float),
                    )
                };
                m.first_mismatch = Some(Mismatch {
                    index: unravel(i, &expected.shape),
                    actual: a,
                    expected: e,
                    ulp: elem_ulp,
                });
            }
            // Like PyTorch's `torch.max` over the differences, a NaN difference wins (first one).
            for (worst, d) in [(&mut worst_abs, elem.abs), (&mut worst_rel, elem.rel)] {
                if !worst.0.is_nan() && (d.is_nan() || d > worst.0) {
                    *worst = (d, i);
                }
            }
        }
    }
    if m.mismatches > 0 {
        let equality = tol.is_exact();
        let what = if equality { "equal" } else { "close" };
        let pct = 100.0 * m.mismatches as f64 / n as f64;
        let mut msg = format!(
            "Tensor-likes are not {what}!\n\nMismatched elements: {} / {} ({:.1}%)\n",
            m.mismatches, n, pct
        );
        let diff_line = |kind: &str, diff: f64, idx: usize, tol: f64| {
            let mut s = format!(
                "Greatest {kind} difference: {} at index {}",
                fmt_num(diff, is_float || kind == "relative"),
                format_index(&unravel(idx, &expected.shape))
            );
            if !equality {
                s += &format!(" (up to {} allowed)", py_repr(tol));
            }
            s + "\n"
        };
        msg += &diff_line("absolute", worst_abs.0, worst_abs.1, tol.atol);
        msg += &diff_line("relative", worst_rel.0, worst_rel.1, tol.rtol);
        if let Some(f) = &m.first_mismatch {
            msg += &format!(
                "First mismatch at index {}: actual {}, expected {}\n",
                format_index(&f.index),
                f.actual,
                f.expected
            );
        }
        m = m.fail(msg.trim_end().to_string());
    }
    m
}

// ---------------------------------------------------------------------------------------------
// Semantic comparison of index outputs (ties)

/// Which dimension an index output indexes into.
#[derive(Clone, Copy, Debug)]
pub enum DimArg {
    /// Argument `name` at position `pos`; `default` when absent; `None` (or a `None` value)
    /// means the input is flattened.
    Arg {
        pos: usize,
        name: &'static str,
        default: Option<i64>,
    },
}

/// Whether the index output keeps the reduced dimension.
#[derive(Clone, Copy, Debug)]
pub enum KeepDim {
    /// The index output has the input's rank (sort, topk).
    SameRank,
    /// Given by a bool argument (argmax, max.dim, …).
    Arg {
        pos: usize,
        name: &'static str,
        default: bool,
    },
}

/// "Output `index_output` holds indices into input argument `source_arg` along a dimension."
/// Such outputs pass when the values they select equal the values the golden indices select,
/// so that ties broken differently (equal values at different positions) are not failures.
#[derive(Clone, Copy, Debug)]
pub struct IndexOutputRule {
    pub op: &'static str,
    pub index_output: usize,
    pub source_arg: usize,
    pub dim: DimArg,
    pub keepdim: KeepDim,
}

/// The ops whose index outputs are compared semantically.
pub const INDEX_OUTPUT_RULES: &[IndexOutputRule] = &[
    // sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)
    IndexOutputRule {
        op: "sort",
        index_output: 1,
        source_arg: 0,
        dim: DimArg::Arg {
            pos: 1,
            name: "dim",
            default: Some(-1),
        },
        keepdim: KeepDim::SameRank,
    },
    // topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (values, indices)
    IndexOutputRule {
        op: "topk",
        index_output: 1,
        source_arg: 0,
        dim: DimArg::Arg {
            pos: 2,
            name: "dim",
            default: Some(-1),
        },
        keepdim: KeepDim::SameRank,
    },
    // argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor
    IndexOutputRule {
        op: "argmax",
        index_output: 0,
        source_arg: 0,
        dim: DimArg::Arg {
            pos: 1,
            name: "dim",
            default: None,
        },
        keepdim: KeepDim::Arg {
            pos: 2,
            name: "keepdim",
            default: false,
        },
    },
    IndexOutputRule {
        op: "argmin",
        index_output: 0,
        source_arg: 0,
        dim: DimArg::Arg {
            pos: 1,
            name: "dim",
            default: None,
        },
        keepdim: KeepDim::Arg {
            pos: 2,
            name: "keepdim",
            default: false,
        },
    },
    // max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)
    IndexOutputRule {
        op: "max.dim",
        index_output: 1,
        source_arg: 0,
        dim: DimArg::Arg {
            pos: 1,
            name: "dim",
            default: None,
        },
        keepdim: KeepDim::Arg {
            pos: 2,
            name: "keepdim",
            default: false,
        },
    },
    IndexOutputRule {
        op: "min.dim",
        index_output: 1,
        source_arg: 0,
        dim: DimArg::Arg {
            pos: 1,
            name: "dim",
            default: None,
        },
        keepdim: KeepDim::Arg {
            pos: 2,
            name: "keepdim",
            default: false,
        },
    },
];

pub fn index_rule(op: &str, output: usize) -> Option<&'static IndexOutputRule> {
    INDEX_OUTPUT_RULES
        .iter()
        .find(|r| r.op == op && r.index_output == output)
}

/// Flat source positions selected by `indices` (None where an index is out of range).
fn gather_positions(
    source_shape: &[usize],
    indices: &Tensor,
    dim: Option<usize>,
    same_rank: bool,
) -> Vec<Option<usize>> {
    let src_strides = crate::tensor::contiguous_strides(source_shape);
    let numel: usize = source_shape.iter().product();
    (0..indices.numel())
        .map(|o| {
            let k = indices.value_i64(o);
            match dim {
                None => (k >= 0 && (k as usize) < numel).then_some(k as usize),
                Some(d) => {
                    let extent = source_shape[d] as i64;
                    if k < 0 || k >= extent {
                        return None;
                    }
                    let mut idx = unravel(o, &indices.shape);
                    if same_rank {
                        idx[d] = k as usize;
                    } else {
                        idx.insert(d, k as usize);
                    }
                    if idx.len() != source_shape.len() {
                        return None;
                    }
                    Some(idx.iter().zip(&src_strides).map(|(i, s)| i * s).sum())
                }
            }
        })
        .collect()
}

/// Compares an index output by the values both index sets select from `source`.
pub fn compare_indices(
    name: &str,
    actual: &Tensor,
    expected: &Tensor,
    source: &Tensor,
    rule: &IndexOutputRule,
    call: &OpCall,
) -> OutputMetrics {
    let mut m = OutputMetrics::new(name, CompareKind::Indices);
    m.dtype = Some(expected.dtype);
    m.shape = expected.shape.clone();
    m.numel = expected.numel();
    if actual.shape != expected.shape || actual.dtype != expected.dtype {
        return compare_tensors(name, actual, expected, Tolerance::EXACT);
    }
    let DimArg::Arg {
        pos,
        name: dim_name,
        default,
    } = rule.dim;
    let dim = match call.arg(pos, dim_name) {
        Some(Value::Int(d)) => Some(*d),
        Some(Value::None(())) => None,
        _ => default,
    };
    let rank = source.shape.len() as i64;
    let dim = match dim {
        None => None,
        // A 0-d source has one position; dim 0/-1 addresses it like a flattened input.
        Some(_) if rank == 0 => None,
        Some(d) if (-rank..rank).contains(&d) => Some(if d < 0 { (d + rank) as usize } else { d as usize }),
        Some(d) => return m.fail(format!("dim {d} is out of range for an input of rank {rank}")),
    };
    let keep = match rule.keepdim {
        KeepDim::SameRank => true,
        KeepDim::Arg { pos, name, default } => call.arg(pos, name).and_then(|v| v.as_bool()).unwrap_or(default),
    };
    let pa = gather_positions(&source.shape, actual, dim, keep);
    let pe = gather_positions(&source.shape, expected, dim, keep);
    for (o, (a, e)) in pa.iter().zip(&pe).enumerate() {
        let same = match (a, e) {
            (Some(a), Some(e)) => {
                let (va, ve) = (source.value_f64(*a), source.value_f64(*e));
                va == ve || (va.is_nan() && ve.is_nan())
            }
            _ => false,
        };
        if same {
            m.ulp_hist.add(0);
        } else {
            m.mismatches += 1;
            if m.first_mismatch.is_none() {
                m.first_mismatch = Some(Mismatch {
                    index: unravel(o, &expected.shape),
                    actual: format!(
                        "{} (selects {})",
                        actual.value_i64(o),
                        a.map_or("out of range".into(), |p| fmt_num(source.value_f64(p), true))
                    ),
                    expected: format!(
                        "{} (selects {})",
                        expected.value_i64(o),
                        e.map_or("out of range".into(), |p| fmt_num(source.value_f64(p), true))
                    ),
                    ulp: None,
                });
            }
        }
    }
    if m.mismatches > 0 {
        let f = m.first_mismatch.clone().expect("set with the first mismatch");
        let n = m.numel;
        let msg = format!(
            "Index tensors select different values!\n\nMismatched elements: {} / {} ({:.1}%)\nFirst mismatch at index {}: actual {}, expected {}",
            m.mismatches,
            n,
            100.0 * m.mismatches as f64 / n as f64,
            format_index(&f.index),
            f.actual,
            f.expected
        );
        return m.fail(msg);
    }
    m.message = "compared by the values the indices select (ties may differ)".into();
    m
}

// ---------------------------------------------------------------------------------------------
// Metadata and property checks

/// Shape and dtype only (`check.kind == "metadata"`).
pub fn compare_metadata(name: &str, actual: &Tensor, expected: &Tensor) -> OutputMetrics {
    let mut m = OutputMetrics::new(name, CompareKind::Metadata);
    m.dtype = Some(expected.dtype);
    m.shape = expected.shape.clone();
    m.numel = expected.numel();
    if actual.shape != expected.shape {
        return m.fail(format!(
            "The values for attribute 'shape' do not match: {} != {}.",
            torch_size(&actual.shape),
            torch_size(&expected.shape)
        ));
    }
    if actual.dtype != expected.dtype {
        return m.fail(format!(
            "The values for attribute 'dtype' do not match: {} != {}.",
            actual.dtype.torch_name(),
            expected.dtype.torch_name()
        ));
    }
    m
}

/// `|diff| ≤ tol`, false for NaN.
fn within(diff: f64, tol: f64) -> bool {
    diff.abs() <= tol
}

/// Checks the properties of `check.kind == "properties"` on output 0 (and the mask output of
/// dropout). `input` is the op's first tensor input (dropout), `rerun` a second run's outputs
/// (determinism).
pub fn check_properties(
    props: &Properties,
    name: &str,
    actual: &Tensor,
    expected: &Tensor,
    input: Option<&Tensor>,
    mask: Option<&Tensor>,
    rerun: Option<&Tensor>,
) -> OutputMetrics {
    let mut m = OutputMetrics::new(name, CompareKind::Properties);
    m.dtype = Some(expected.dtype);
    m.shape = expected.shape.clone();
    m.numel = expected.numel();
    if actual.shape != expected.shape || actual.dtype != expected.dtype {
        return compare_metadata(name, actual, expected);
    }
    let vals = actual.to_f64_vec();
    let mut failures = Vec::new();
    if let Some([lo, hi]) = props.range
        && let Some((i, v)) = vals.iter().enumerate().find(|(_, v)| !(lo <= **v && **v < hi))
    {
        failures.push(format!(
            "value {} at index {} is outside [{lo}, {hi})",
            fmt_num(*v, true),
            format_index(&unravel(i, &actual.shape))
        ));
    }
    let n = vals.len() as f64;
    let mean = vals.iter().sum::<f64>() / n;
    if let Some([want, tol]) = props.mean
        && !within(mean - want, tol)
    {
        failures.push(format!("mean {mean} is not within {tol} of {want}"));
    }
    if let Some([want, tol]) = props.std {
        // torch.std's default: unbiased (n − 1).
        let var = vals.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1.0);
        let std = var.sqrt();
        if !within(std - want, tol) {
            failures.push(format!("std {std} is not within {tol} of {want}"));
        }
    }
    if let Some(count) = props.permutation {
        let mut seen = vec![false; count as usize];
        let ok = vals.len() as u64 == count
            && vals.iter().all(|&v| {
                let k = v as i64;
                v == k as f64 && k >= 0 && (k as u64) < count && !std::mem::replace(&mut seen[k as usize], true)
            });
        if !ok {
            failures.push(format!("output is not a permutation of 0..{count}"));
        }
    }
    if let Some(d) = &props.dropout {
        match input {
            None => failures.push("dropout check needs the input tensor".into()),
            Some(inp) if inp.numel() != actual.numel() => failures.push("dropout input and output sizes differ".into()),
            Some(inp) => {
                let scale = 1.0 / (1.0 - d.p);
                let tol = default_tolerance(actual.dtype);
                for (i, &v) in vals.iter().enumerate() {
                    let kept = inp.value_f64(i) * scale;
                    let is_kept = judge(v, kept, tol).close;
                    let is_dropped = v == 0.0;
                    if !is_kept && !is_dropped {
                        failures.push(format!(
                            "element {} is {}, neither 0 nor input/(1-p) = {}",
                            format_index(&unravel(i, &actual.shape)),
                            fmt_num(v, true),
                            fmt_num(kept, true)
                        ));
                        break;
                    }
                    if let Some(mask) = mask
                        && i < mask.numel()
                    {
                        let keep = mask.value_i64(i) != 0;
                        if (keep && !is_kept) || (!keep && !is_dropped) {
                            failures.push(format!(
                                "mask disagrees with the output at index {}",
                                format_index(&unravel(i, &actual.shape))
                            ));
                            break;
                        }
                    }
                }
            }
        }
    }
    if props.deterministic == Some(true) {
        match rerun {
            None => failures.push("determinism check needs a second run".into()),
            Some(r) if r.data != actual.data || r.shape != actual.shape => {
                failures.push("two runs with the same seed gave different results".into())
            }
            Some(_) => {}
        }
    }
    if !failures.is_empty() {
        m.mismatches = failures.len() as u64;
        return m.fail(format!("Properties do not hold:\n{}", failures.join("\n")));
    }
    m
}

// ---------------------------------------------------------------------------------------------
// Whole case

/// The outputs a run produced, already converted to golden dtypes.
#[derive(Clone, Debug, Default)]
pub struct ActualOutputs {
    pub tensors: BTreeMap<String, Tensor>,
    /// Non-tensor outputs by output position (sym_* ops).
    pub values: BTreeMap<usize, Value>,
    /// A second run's tensors, for the determinism property.
    pub rerun: Option<BTreeMap<String, Tensor>>,
    /// Runs of an RNG case under other seeds (compare/rng.rs, "Several seeds"); empty when the
    /// backend does not take its seed from the case.
    pub other_seeds: Vec<BTreeMap<String, Tensor>>,
}

/// The verdict over all outputs of a case.
#[derive(Clone, Debug)]
pub struct Comparison {
    pub outputs: Vec<OutputMetrics>,
    pub passed: bool,
    /// Passed, and at least one output only by the accuracy rule.
    pub accurate: bool,
    /// The failing outputs' messages, each prefixed by the output name.
    pub message: String,
}

/// Compares every output of `case` according to its `check`.
pub fn compare_case(case: &Case, actual: &ActualOutputs) -> Comparison {
    let mut outputs = Vec::new();
    for (pos, out) in case.outputs.iter().enumerate() {
        match out {
            Value::Tensor(name) => outputs.push(compare_output(case, pos, name, actual)),
            Value::Tensors(names) => {
                for name in names.iter().flatten() {
                    outputs.push(compare_output(case, pos, name, actual));
                }
            }
            other => {
                let name = format!("output.{pos}");
                let mut m = OutputMetrics::new(&name, CompareKind::Scalar);
                m.numel = 1;
                match actual.values.get(&pos) {
                    Some(v) if scalars_equal(v, other) => {}
                    Some(v) => m = m.fail(format!("Scalars are not equal!\n\nExpected {other:?} but got {v:?}.")),
                    None => m = m.fail("the run produced no value for this output".into()),
                }
                outputs.push(m);
            }
        }
    }
    let failed: Vec<String> = outputs
        .iter()
        .filter(|m| !m.passed)
        .map(|m| format!("{}: {}", m.name, m.message))
        .collect();
    let accurate: Vec<String> = outputs
        .iter()
        .filter(|m| m.accurate)
        .map(|m| format!("{}: {}", m.name, m.message))
        .collect();
    Comparison {
        passed: failed.is_empty(),
        accurate: failed.is_empty() && !accurate.is_empty(),
        message: if failed.is_empty() {
            accurate.join("\n\n")
        } else {
            failed.join("\n\n")
        },
        outputs,
    }
}

/// Scalar outputs are equal when they are the same value; NaN equals NaN, as for tensors.
fn scalars_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => x.0 == y.0 || (x.0.is_nan() && y.0.is_nan()),
        _ => a == b,
    }
}

fn compare_output(case: &Case, pos: usize, name: &str, actual: &ActualOutputs) -> OutputMetrics {
    let Some(expected) = case.tensors.get(name) else {
        return OutputMetrics::new(name, CompareKind::Values)
            .fail(format!("golden output `{name}` is not in the file"));
    };
    let Some(got) = actual.tensors.get(name) else {
        let mut m = OutputMetrics::new(name, CompareKind::Values);
        m.dtype = Some(expected.dtype);
        m.shape = expected.shape.clone();
        m.numel = expected.numel();
        return m.fail("the run did not produce this output".into());
    };
    match &case.check {
        Check::Metadata => compare_metadata(name, got, expected),
        Check::Properties { props } => {
            if pos == 0 {
                let input = case.call.args.first().and_then(|v| match v {
                    Value::Tensor(t) => case.tensors.get(t),
                    _ => None,
                });
                let mask = case.outputs.get(1).and_then(|v| match v {
                    Value::Tensor(t) => actual.tensors.get(t),
                    _ => None,
                });
                let rerun = actual.rerun.as_ref().and_then(|r| r.get(name));
                let m = check_properties(props, name, got, expected, input, mask, rerun);
                let p = props.dropout.as_ref().map(|d| d.p);
                let stats = if m.passed && got.shape == expected.shape {
                    let mut f = rng::failures(&case.op, got, input, mask, p);
                    let others: Vec<&Tensor> = actual.other_seeds.iter().filter_map(|o| o.get(name)).collect();
                    if others.len() == actual.other_seeds.len() {
                        let mask_name = case.outputs.get(1).and_then(|v| match v {
                            Value::Tensor(t) => Some(t.as_str()),
                            _ => None,
                        });
                        let masks: Vec<Option<&Tensor>> = std::iter::once(mask)
                            .chain(actual.other_seeds.iter().map(|o| mask_name.and_then(|n| o.get(n))))
                            .collect();
                        f.extend(rng::cross_seed_failures(&case.op, got, &others, input, &masks, p));
                    } else {
                        f.push("a run under another seed did not produce this output".into());
                    }
                    f
                } else {
                    vec![]
                };
                if stats.is_empty() {
                    m
                } else {
                    let mut m = m;
                    m.mismatches = stats.len() as u64;
                    m.fail(format!("Properties do not hold:\n{}", stats.join("\n")))
                }
            } else {
                // Secondary outputs of RNG ops (dropout's mask) are checked with output 0.
                compare_metadata(name, got, expected)
            }
        }
        Check::Values => {
            if let Some(rule) = index_rule(&case.op, pos) {
                let source = case.call.args.get(rule.source_arg).and_then(|v| match v {
                    Value::Tensor(t) => case.tensors.get(t),
                    _ => None,
                });
                if let Some(source) = source {
                    return compare_indices(name, got, expected, source, rule, &case.call);
                }
            }
            let (tol, reason) = tolerance_for(&case.op, expected.dtype);
            let mut m = compare_tensors(name, got, expected, tol);
            if let Some(reason) = reason
                && m.passed
            {
                m.message = format!("tolerance override: {reason}");
            }
            if let Some(oracle) = case.oracles.get(name) {
                judge_accuracy(&mut m, got, expected, oracle);
            }
            m
        }
    }
}

/// Records the output's error against its oracle and applies the accuracy rule: an output that
/// is not `assert_close` to the CPU passes as `accurate` when it is within the rule
/// (crate::accuracy, docs/numerics.md "Accuracy against the oracle").
pub fn judge_accuracy(m: &mut OutputMetrics, got: &Tensor, expected: &Tensor, oracle: &crate::accuracy::Oracle) {
    let Some(om) = crate::accuracy::measure(got, expected, oracle) else {
        return;
    };
    if !m.passed && om.within && m.dtype.is_some_and(|d| d.is_float() || d.is_complex()) {
        m.passed = true;
        m.accurate = true;
        m.message = format!(
            "accurate: not assert_close to the CPU output, but within the accuracy rule: {}\n{}",
            om.summary(),
            m.message
        );
    } else if !m.passed {
        m.message = format!("{}\n{}", m.message, om.summary());
    }
    m.oracle = Some(om);
}

#[cfg(test)]
mod tests {
    use super::*;
    use TorchDType::*;

    fn t(dtype: TorchDType, vals: &[f64]) -> Tensor {
        Tensor::from_f64(dtype, &[vals.len()], vals)
    }

    fn cmp(dtype: TorchDType, a: &[f64], e: &[f64]) -> OutputMetrics {
        compare_tensors("output.0", &t(dtype, a), &t(dtype, e), default_tolerance(dtype))
    }

    #[test]
    fn python_float_repr() {
        assert_eq!(py_repr(1e-5), "1e-05");
        assert_eq!(py_repr(1.3e-6), "1.3e-06");
        assert_eq!(py_repr(0.5), "0.5");
        assert_eq!(py_repr(100.0), "100.0");
        assert_eq!(py_repr(0.0001), "0.0001");
        assert_eq!(py_repr(1e16), "1e+16");
        assert_eq!(py_repr(f64::NEG_INFINITY), "-inf");
    }

    #[test]
    fn tolerance_table() {
        assert_eq!(
            default_tolerance(F32),
            Tolerance {
                rtol: 1.3e-6,
                atol: 1e-5
            }
        );
        assert_eq!(
            default_tolerance(Bf16),
            Tolerance {
                rtol: 1.6e-2,
                atol: 1e-5
            }
        );
        assert_eq!(default_tolerance(F16), Tolerance { rtol: 1e-3, atol: 1e-5 });
        for d in [I64, I32, I16, I8, U8, Bool, F8E4m3fn, F8E5m2] {
            assert!(default_tolerance(d).is_exact(), "{d}");
        }
        assert_eq!(tolerance_for("add.Tensor", F32), (default_tolerance(F32), None));
    }

    #[test]
    fn tolerance_edges_f32() {
        // allowed = atol + rtol*|e| = 1e-5 + 1.3e-6*100 = 1.4e-4
        let e = 100.0;
        let allowed = 1e-5 + 1.3e-6 * e;
        assert!(cmp(F32, &[e + allowed * 0.9], &[e]).passed);
        assert!(!cmp(F32, &[e + allowed * 1.2], &[e]).passed);
        // Near zero only atol counts.
        assert!(cmp(F32, &[9e-6], &[0.0]).passed);
        assert!(!cmp(F32, &[2e-5], &[0.0]).passed);
    }

    #[test]
    fn tolerance_edges_bf16() {
        // bf16 ulp at 1.0 is 2^-7 = 0.0078; rtol 1.6e-2 allows 2 ulps, not 3 (0.0234 > 0.016).
        assert!(cmp(Bf16, &[1.0 + 2.0 * 0.0078125], &[1.0]).passed);
        assert!(!cmp(Bf16, &[1.0 + 3.0 * 0.0078125], &[1.0]).passed);
    }

    #[test]
    fn nan_and_inf() {
        assert!(cmp(F32, &[f64::NAN], &[f64::NAN]).passed, "NaN == NaN");
        let m = cmp(F32, &[f64::NAN], &[1.0]);
        assert!(!m.passed);
        assert_eq!(m.nan_mismatches, 1);
        assert!(
            cmp(
                F32,
                &[f64::INFINITY, f64::NEG_INFINITY],
                &[f64::INFINITY, f64::NEG_INFINITY]
            )
            .passed
        );
        let m = cmp(F32, &[f64::INFINITY], &[f64::NEG_INFINITY]);
        assert!(!m.passed);
        assert_eq!(m.inf_mismatches, 1);
        let m = cmp(F32, &[3.4e38], &[f64::INFINITY]);
        assert!(!m.passed, "finite vs inf never close");
        assert!(cmp(Bf16, &[-0.0], &[0.0]).passed);
    }

    #[test]
    fn ulp_distance_per_dtype() {
        let one_f32 = 1.0f32.to_bits() as u64;
        assert_eq!(ulp_distance(F32, one_f32, one_f32 + 3), 3);
        assert_eq!(ulp_distance(F32, 0x8000_0000, 0), 0, "-0 and +0");
        assert_eq!(ulp_distance(F32, 0x8000_0001, 0x0000_0001), 2, "across zero");
        let one_bf16 = half::bf16::from_f32(1.0).to_bits() as u64;
        assert_eq!(ulp_distance(Bf16, one_bf16, one_bf16 + 1), 1);
        let one_f16 = half::f16::from_f32(1.0).to_bits() as u64;
        let two_f16 = half::f16::from_f32(2.0).to_bits() as u64;
        assert_eq!(
            ulp_distance(F16, one_f16, two_f16),
            1024,
            "2^10 f16 ulps between 1 and 2"
        );
        assert_eq!(
            ulp_distance(Bf16, one_bf16, half::bf16::from_f32(2.0).to_bits() as u64),
            128
        );
        let m = cmp(Bf16, &[1.0078125], &[1.0]);
        assert_eq!(m.max_ulp, 1);
        assert_eq!(m.ulp_hist.one, 1);
        let m = cmp(F32, &[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]);
        assert_eq!((m.max_ulp, m.ulp_hist.exact, m.max_abs_err), (0, 3, 0.0));
    }

    #[test]
    fn ints_are_exact_and_message_wording() {
        let m = cmp(I32, &[1.0, 5.0, 3.0, 4.0], &[1.0, 2.0, 3.0, 9.0]);
        assert!(!m.passed);
        assert_eq!(m.mismatches, 2);
        assert_eq!(m.max_ulp, 5);
        assert_eq!(m.first_mismatch.as_ref().unwrap().index, vec![1]);
        assert!(m.message.starts_with("Tensor-likes are not equal!"), "{}", m.message);
        assert!(
            m.message.contains("Mismatched elements: 2 / 4 (50.0%)"),
            "{}",
            m.message
        );
        assert!(
            m.message.contains("Greatest absolute difference: 5 at index (3,)"),
            "{}",
            m.message
        );
        assert!(
            !m.message.contains("allowed"),
            "exact comparisons don't print tolerances"
        );
        let f = cmp(F32, &[1.0, 2.5], &[1.0, 2.0]);
        assert!(f.message.starts_with("Tensor-likes are not close!"), "{}", f.message);
        assert!(
            f.message
                .contains("Greatest absolute difference: 0.5 at index (1,) (up to 1e-05 allowed)"),
            "{}",
            f.message
        );
        assert!(
            f.message
                .contains("Greatest relative difference: 0.25 at index (1,) (up to 1.3e-06 allowed)"),
            "{}",
            f.message
        );
        let i64s = cmp(I64, &[i64::MAX as f64], &[i64::MIN as f64]);
        assert!(!i64s.passed, "no overflow at the extremes");
    }

    #[test]
    fn shape_and_dtype_must_match() {
        let m = compare_tensors("o", &t(F32, &[1.0, 2.0]), &t(F32, &[1.0]), default_tolerance(F32));
        assert!(
            m.message
                .contains("'shape' do not match: torch.Size([2]) != torch.Size([1])"),
            "{}",
            m.message
        );
        let m = compare_tensors("o", &t(Bf16, &[1.0]), &t(F32, &[1.0]), default_tolerance(F32));
        assert!(m.message.contains("torch.bfloat16 != torch.float32"), "{}", m.message);
    }

    #[test]
    fn multi_dim_index_in_message() {
        let a = Tensor::from_f64(F32, &[2, 3], &[0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
        let e = Tensor::from_f64(F32, &[2, 3], &[0.0; 6]);
        let m = compare_tensors("o", &a, &e, default_tolerance(F32));
        assert!(m.message.contains("at index (1, 2)"), "{}", m.message);
        assert_eq!(m.first_mismatch.unwrap().index, vec![1, 2]);
    }

    #[test]
    fn complex_compares_by_modulus() {
        let a = Tensor::from_f64(C64, &[2], &[1.0, 2.0, f64::NAN, 0.0]);
        let e = Tensor::from_f64(C64, &[2], &[1.0, 2.0, 0.0, f64::NAN]);
        assert!(compare_tensors("o", &a, &e, default_tolerance(C64)).passed);
        let b = Tensor::from_f64(C64, &[1], &[1.0, 2.5]);
        let e = Tensor::from_f64(C64, &[1], &[1.0, 2.0]);
        assert!(!compare_tensors("o", &b, &e, default_tolerance(C64)).passed);
    }

    fn call(args: Vec<Value>) -> OpCall {
        OpCall {
            args,
            kwargs: BTreeMap::new(),
        }
    }

    #[test]
    fn ties_in_index_outputs_pass_when_values_agree() {
        // max.dim over dim 1 of [[3, 5, 5], [7, 7, 1]]: ties at (0: 1|2) and (1: 0|1).
        let src = Tensor::from_f64(F32, &[2, 3], &[3.0, 5.0, 5.0, 7.0, 7.0, 1.0]);
        let golden = Tensor::from_f64(I64, &[2], &[1.0, 0.0]);
        let other_tie = Tensor::from_f64(I64, &[2], &[2.0, 1.0]);
        let wrong = Tensor::from_f64(I64, &[2], &[0.0, 1.0]);
        let rule = index_rule("max.dim", 1).unwrap();
        let c = call(vec![Value::Tensor("input.0".into()), Value::Int(1)]);
        assert!(compare_indices("output.1", &other_tie, &golden, &src, rule, &c).passed);
        let m = compare_indices("output.1", &wrong, &golden, &src, rule, &c);
        assert!(!m.passed);
        assert_eq!(m.mismatches, 1);
        // keepdim=True keeps rank.
        let c = call(vec![Value::Tensor("input.0".into()), Value::Int(-1), Value::Bool(true)]);
        let g = Tensor::from_f64(I64, &[2, 1], &[1.0, 0.0]);
        let a = Tensor::from_f64(I64, &[2, 1], &[2.0, 1.0]);
        assert!(compare_indices("output.1", &a, &g, &src, rule, &c).passed);
        // Out-of-range index never matches.
        let a = Tensor::from_f64(I64, &[2, 1], &[3.0, 1.0]);
        assert!(!compare_indices("output.1", &a, &g, &src, rule, &c).passed);
    }

    #[test]
    fn argmax_without_dim_indexes_the_flattened_input() {
        let src = Tensor::from_f64(F32, &[2, 2], &[1.0, 9.0, 9.0, 0.0]);
        let rule = index_rule("argmax", 0).unwrap();
        let c = call(vec![Value::Tensor("input.0".into())]);
        let g = Tensor::from_f64(I64, &[], &[1.0]);
        assert!(compare_indices("output.0", &Tensor::from_f64(I64, &[], &[2.0]), &g, &src, rule, &c).passed);
        assert!(!compare_indices("output.0", &Tensor::from_f64(I64, &[], &[0.0]), &g, &src, rule, &c).passed);
    }

    #[test]
    fn sort_indices_with_nan_ties() {
        let src = Tensor::from_f64(F32, &[4], &[f64::NAN, 1.0, f64::NAN, 1.0]);
        let rule = index_rule("sort", 1).unwrap();
        let c = call(vec![Value::Tensor("input.0".into())]);
        let g = Tensor::from_f64(I64, &[4], &[1.0, 3.0, 0.0, 2.0]);
        let a = Tensor::from_f64(I64, &[4], &[3.0, 1.0, 2.0, 0.0]);
        assert!(compare_indices("output.1", &a, &g, &src, rule, &c).passed);
    }

    #[test]
    fn properties() {
        let props = Properties {
            range: Some([0.0, 1.0]),
            mean: Some([0.5, 0.2]),
            ..Default::default()
        };
        let ok = t(F32, &[0.1, 0.9, 0.5, 0.4]);
        assert!(check_properties(&props, "o", &ok, &ok, None, None, None).passed);
        let bad = t(F32, &[0.1, 1.0, 0.5, 0.4]);
        let m = check_properties(&props, "o", &bad, &ok, None, None, None);
        assert!(!m.passed);
        assert!(m.message.contains("outside [0, 1)"), "{}", m.message);

        let perm = Properties {
            permutation: Some(4),
            ..Default::default()
        };
        let p = t(I64, &[2.0, 0.0, 3.0, 1.0]);
        assert!(check_properties(&perm, "o", &p, &p, None, None, None).passed);
        let notp = t(I64, &[2.0, 0.0, 2.0, 1.0]);
        assert!(!check_properties(&perm, "o", &notp, &p, None, None, None).passed);

        let drop = Properties {
            dropout: Some(crate::case::DropoutProp { p: 0.5 }),
            ..Default::default()
        };
        let input = t(F32, &[1.0, 2.0, 3.0]);
        let out = t(F32, &[2.0, 0.0, 6.0]);
        let mask = t(Bool, &[1.0, 0.0, 1.0]);
        assert!(check_properties(&drop, "o", &out, &out, Some(&input), Some(&mask), None).passed);
        let bad_mask = t(Bool, &[1.0, 1.0, 1.0]);
        assert!(!check_properties(&drop, "o", &out, &out, Some(&input), Some(&bad_mask), None).passed);
        let bad_out = t(F32, &[2.0, 1.0, 6.0]);
        assert!(!check_properties(&drop, "o", &bad_out, &out, Some(&input), None, None).passed);

        let det = Properties {
            deterministic: Some(true),
            ..Default::default()
        };
        assert!(check_properties(&det, "o", &out, &out, None, None, Some(&out)).passed);
        assert!(!check_properties(&det, "o", &out, &out, None, None, Some(&bad_out)).passed);
    }

    #[test]
    fn metadata_only() {
        let a = t(F32, &[1.0, 2.0]);
        let e = t(F32, &[7.0, 8.0]);
        assert!(compare_metadata("o", &a, &e).passed);
        assert!(!compare_metadata("o", &t(F16, &[1.0, 2.0]), &e).passed);
    }
}
