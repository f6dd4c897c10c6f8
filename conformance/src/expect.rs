//! Expectations: the cases that are expected not to pass, and why (`conformance/expectations.toml`).
//!
//! Every case not listed must pass. A listed case is either
//! * `xfail`: it still runs, and must not pass — a pass is an *xpass*, which fails the run, so the
//!   list cannot rot; or
//! * `skip`: it is not run (its file is still loaded, as a corruption check), and is reported as
//!   skipped with its reason. Nothing is skipped silently.
//!
//! Each entry selects cases by what they are, never by id: op names (`ops`), primary dtypes
//! (`dtypes`), generator sources (`sources`) and call properties (`when`: an int64 value outside
//! int32, an empty or 0-d input, a given `dim` argument, …; see [`Property`]). An `xfail` entry
//! may also require the typed error the run must end in (`error`, see [`ErrorKind`]). Case ids
//! are numbered per sample and change whenever a corpus is regenerated with other seeds or
//! samples; what a case *is* does not, so a fresh corpus's expected failures are recognised
//! (`conformance/tests/expect_structural.rs` renames every committed id and checks the verdicts).
//! An entry may also be limited to hardware generations (`targets = ["trn3"]`): it then covers
//! the case only when the run lowers and simulates for one of them, so a difference between
//! generations is stated once, for the generations it holds on.
//! An entry gives a reason category and a text. A case matched by two entries is an error (no
//! precedence rules to reason about). Unknown keys, properties, categories, op, dtype and target
//! names and empty texts are load errors.

use crate::case::{Case, Value};
use crate::tensor::{Tensor, TorchDType};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use trnsim::TargetName;

/// Why a case is expected not to pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReasonCategory {
    /// The op has no lowering yet. Such an xfail expects exactly "not lowered"; if the op gets a
    /// lowering, the entry must go (pass → xpass, fail → fail).
    NotLowered,
    /// Trainium cannot do what PyTorch does (no int64, no fp64, …).
    HardwareLimitation,
    /// PyTorch's result is not specified (out-of-range casts, uninitialised memory, …).
    UndefinedBehaviour,
    /// The case's dtype is not supported by the backend.
    UnsupportedDtype,
    /// The hardware's arithmetic legitimately differs beyond the default tolerance.
    Precision,
    /// The simulator does not model an instruction or behaviour the lowering needs yet.
    SimulatorGap,
}

impl ReasonCategory {
    pub fn name(self) -> &'static str {
        match self {
            ReasonCategory::NotLowered => "not-lowered",
            ReasonCategory::HardwareLimitation => "hardware-limitation",
            ReasonCategory::UndefinedBehaviour => "undefined-behaviour",
            ReasonCategory::UnsupportedDtype => "unsupported-dtype",
            ReasonCategory::Precision => "precision",
            ReasonCategory::SimulatorGap => "simulator-gap",
        }
    }
}

impl fmt::Display for ReasonCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the entry expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExpectedStatus {
    /// Runs and must not pass.
    Xfail,
    /// Not run; reported as skipped.
    Skip,
}

/// A typed error kind a run can end in, which an `xfail` entry may require (`error = "…"`):
/// the entry then holds only if the case fails with exactly that error, so a case that fails
/// for another reason is not hidden behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// An int64 value (an input element or a scalar argument) does not fit in int32, so the
    /// int64 → int32 narrowing at the device boundary refuses it (docs/lowering.md).
    Int64OutsideInt32,
}

impl ErrorKind {
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Int64OutsideInt32 => "int64-outside-int32",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A property of a case's call that an entry can require (`when = [...]`). Every property is
/// computed from the call — its arguments and its input tensors' metadata and values — never
/// from the case id or the golden outputs, so a freshly generated corpus (new seeds, other
/// samples, renumbered ids) keeps each case's properties.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Property {
    /// An int64 input tensor holds a value outside int32, or an integer argument is outside
    /// int32 (`int64-outside-int32`).
    Int64OutsideInt32,
    /// An input tensor has no elements (`empty-input`).
    EmptyInput,
    /// An input tensor is 0-d (`zero-dim-input`).
    ZeroDimInput,
    /// An input tensor was not contiguous in PyTorch (recorded strides or storage offset;
    /// `non-contiguous-input`).
    NonContiguousInput,
    /// A floating input tensor or float argument holds an infinity or a NaN (`non-finite-input`).
    NonFiniteInput,
    /// An input tensor is bool — a mask, or a bool operand (`bool-input`).
    BoolInput,
    /// A floating input tensor holds a finite value within a factor 2 of its dtype's largest
    /// (`near-overflow-input`: sums and products of it overflow or cancel by order).
    NearOverflowInput,
    /// An integer input tensor holds a value beyond ±2^24, which fp32 does not hold exactly
    /// (`int-beyond-f32-exact-input`).
    IntBeyondF32ExactInput,
    /// The run keeps int64 tensors as int64 on the device (`trnconf run --native-int64`;
    /// `native-int64`): a property of the run, not of the call, set by [`CaseFacts::native_int64`].
    NativeInt64,
    /// The schema argument `NAME` is given, not None (`arg:NAME`: a `dim`, a `dtype`, …).
    Arg(String),
}

/// The property names `when` accepts (besides `arg:NAME`).
pub const PROPERTY_NAMES: [&str; 9] = [
    "int64-outside-int32",
    "empty-input",
    "zero-dim-input",
    "non-contiguous-input",
    "non-finite-input",
    "bool-input",
    "near-overflow-input",
    "int-beyond-f32-exact-input",
    "native-int64",
];

impl Property {
    pub fn parse(s: &str) -> Option<Property> {
        Some(match s {
            "int64-outside-int32" => Property::Int64OutsideInt32,
            "empty-input" => Property::EmptyInput,
            "zero-dim-input" => Property::ZeroDimInput,
            "non-contiguous-input" => Property::NonContiguousInput,
            "non-finite-input" => Property::NonFiniteInput,
            "bool-input" => Property::BoolInput,
            "near-overflow-input" => Property::NearOverflowInput,
            "int-beyond-f32-exact-input" => Property::IntBeyondF32ExactInput,
            "native-int64" => Property::NativeInt64,
            _ => {
                let name = s.strip_prefix("arg:")?;
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return None;
                }
                Property::Arg(name.to_string())
            }
        })
    }
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Property::Int64OutsideInt32 => "int64-outside-int32",
            Property::EmptyInput => "empty-input",
            Property::ZeroDimInput => "zero-dim-input",
            Property::NonContiguousInput => "non-contiguous-input",
            Property::NonFiniteInput => "non-finite-input",
            Property::BoolInput => "bool-input",
            Property::NearOverflowInput => "near-overflow-input",
            Property::IntBeyondF32ExactInput => "int-beyond-f32-exact-input",
            Property::NativeInt64 => "native-int64",
            Property::Arg(name) => return write!(f, "arg:{name}"),
        };
        f.write_str(s)
    }
}

/// What an entry can see of a case: op, primary dtype, source and call properties. Nothing here
/// depends on the case id or on golden outputs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CaseFacts {
    pub op: String,
    pub dtype: String,
    /// `opinfo`, `hand` or `stress` (the generator's source), when the case records it.
    pub source: Option<String>,
    /// The properties that hold (`Arg` ones included).
    pub properties: BTreeSet<Property>,
    /// The generation the run lowers and simulates for (the backend's target), when known; an
    /// entry limited to targets covers no case whose target is unknown.
    pub target: Option<TargetName>,
}

/// The positional indices and keyword names of an op's arguments that are bounds PyTorch clamps
/// to the dimension size (so any int64 value is valid and none travels to the device as is).
fn clamped_bound_args(op: &str) -> (&'static [usize], &'static [&'static str]) {
    match op {
        // slice.Tensor(self, dim, start, end, step)
        "slice.Tensor" => (&[2, 3], &["start", "end"]),
        // slice_scatter(self, src, dim, start, end, step)
        "slice_scatter" => (&[3, 4], &["start", "end"]),
        _ => (&[], &[]),
    }
}

impl CaseFacts {
    /// The facts of a loaded case.
    pub fn of(case: &Case) -> CaseFacts {
        let mut p = BTreeSet::new();
        let inputs: Vec<(&str, &Tensor)> = case
            .tensors
            .iter()
            .filter(|(n, _)| !n.starts_with("output."))
            .map(|(n, t)| (n.as_str(), t))
            .collect();
        let int_out = |v: i64| i32::try_from(v).is_err();
        let args: Vec<&Value> = case.call.args.iter().chain(case.call.kwargs.values()).collect();
        // Bounds that PyTorch clamps to the dimension (slice's start/end: `x[3:]` traces as end =
        // i64::MAX) never reach the device as values, so a huge one is no int64 value to narrow.
        let clamped = clamped_bound_args(&case.op);
        let value_args = case
            .call
            .args
            .iter()
            .enumerate()
            .filter(|(i, _)| !clamped.0.contains(i))
            .map(|(_, v)| v)
            .chain(
                case.call
                    .kwargs
                    .iter()
                    .filter(|(k, _)| !clamped.1.contains(&k.as_str()))
                    .map(|(_, v)| v),
            );
        let int_arg_out = value_args.into_iter().any(|v| match v {
            Value::Int(i) => int_out(*i),
            Value::Ints(is) => is.iter().any(|&i| int_out(i)),
            _ => false,
        });
        let int_tensor_out = inputs
            .iter()
            .any(|(_, t)| t.dtype == TorchDType::I64 && (0..t.numel()).any(|i| int_out(t.value_i64(i))));
        if int_arg_out || int_tensor_out {
            p.insert(Property::Int64OutsideInt32);
        }
        if inputs.iter().any(|(_, t)| t.numel() == 0) {
            p.insert(Property::EmptyInput);
        }
        if inputs.iter().any(|(_, t)| t.shape.is_empty()) {
            p.insert(Property::ZeroDimInput);
        }
        let non_contiguous = inputs.iter().any(|(n, _)| {
            case.tensor_meta.get(*n).is_some_and(|m| {
                let strides_differ = m.strides.as_ref().is_some_and(|s| {
                    // Dims of size 1 may carry any stride without making the tensor strided.
                    let want = crate::tensor::contiguous_strides(&m.shape);
                    s.len() != want.len()
                        || s.iter()
                            .zip(&want)
                            .zip(&m.shape)
                            .any(|((&got, &w), &size)| size > 1 && got != w as i64)
                });
                strides_differ || m.storage_offset.is_some_and(|o| o != 0)
            })
        });
        if non_contiguous {
            p.insert(Property::NonContiguousInput);
        }
        let float_arg_nonfinite = args.iter().any(|v| match v {
            Value::Float(x) => !x.0.is_finite(),
            Value::Floats(xs) => xs.iter().any(|x| !x.0.is_finite()),
            Value::Complex(c) => c.iter().any(|x| !x.0.is_finite()),
            _ => false,
        });
        let tensor_nonfinite = inputs.iter().any(|(_, t)| {
            (t.dtype.is_float() || t.dtype.is_complex()) && t.to_f64_vec().iter().any(|x| !x.is_finite())
        });
        if float_arg_nonfinite || tensor_nonfinite {
            p.insert(Property::NonFiniteInput);
        }
        if inputs.iter().any(|(_, t)| t.dtype == TorchDType::Bool) {
            p.insert(Property::BoolInput);
        }
        let near_overflow = inputs.iter().any(|(_, t)| {
            t.dtype.is_float()
                && dtype_max(t.dtype)
                    .is_some_and(|max| t.to_f64_vec().iter().any(|x| x.is_finite() && x.abs() >= max / 2.0))
        });
        if near_overflow {
            p.insert(Property::NearOverflowInput);
        }
        let beyond_f32 = inputs
            .iter()
            .any(|(_, t)| t.dtype.is_int() && (0..t.numel()).any(|i| t.value_i64(i).unsigned_abs() > 1 << 24));
        if beyond_f32 {
            p.insert(Property::IntBeyondF32ExactInput);
        }
        for name in given_args(case) {
            p.insert(Property::Arg(name));
        }
        CaseFacts {
            op: case.op.clone(),
            dtype: case.dtype.clone(),
            source: case.provenance.source.clone(),
            properties: p,
            target: None,
        }
    }

    /// These facts on `target`.
    pub fn on(self, target: TargetName) -> CaseFacts {
        CaseFacts {
            target: Some(target),
            ..self
        }
    }

    /// These facts in a run that keeps int64 on the device (`--native-int64`) when `native`:
    /// the `native-int64` property holds.
    pub fn native_int64(mut self, native: bool) -> CaseFacts {
        if native {
            self.properties.insert(Property::NativeInt64);
        } else {
            self.properties.remove(&Property::NativeInt64);
        }
        self
    }
}

/// The largest finite value of a float dtype.
fn dtype_max(d: TorchDType) -> Option<f64> {
    Some(match d {
        TorchDType::F32 | TorchDType::C64 => f32::MAX as f64,
        TorchDType::Bf16 => half::bf16::MAX.to_f64(),
        TorchDType::F16 => half::f16::MAX.to_f64(),
        TorchDType::F8E4m3fn => 448.0,
        TorchDType::F8E5m2 => 57344.0,
        _ => return None,
    })
}

/// The schema argument names the call gives a value other than None: keyword arguments by
/// name, positional ones by the schema's order (no schema: keyword arguments only).
fn given_args(case: &Case) -> Vec<String> {
    let mut out: Vec<String> = case
        .call
        .kwargs
        .iter()
        .filter(|(_, v)| !v.is_none())
        .map(|(k, _)| k.clone())
        .collect();
    if let Some(names) = case.schema.as_deref().and_then(schema_arg_names) {
        for (v, name) in case.call.args.iter().zip(names) {
            if !v.is_none() {
                out.push(name);
            }
        }
    }
    out
}

/// Argument names of a schema `op(Tensor self, int[1]? dim, *, ScalarType? dtype=None) -> …`.
fn schema_arg_names(schema: &str) -> Option<Vec<String>> {
    let open = schema.find('(')?;
    let close = schema.find(") ->").or_else(|| schema.rfind(')'))?;
    let inner = schema.get(open + 1..close)?;
    let mut names = Vec::new();
    for part in inner.split(',') {
        let part = part.trim();
        if part.is_empty() || part == "*" {
            continue;
        }
        let decl = part.split('=').next()?.trim();
        names.push(decl.rsplit(' ').next()?.to_string());
    }
    Some(names)
}

/// The sources a case can come from (`golden/generate.py`).
pub const SOURCES: [&str; 3] = ["opinfo", "hand", "stress"];

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    #[serde(default)]
    ops: Option<Vec<String>>,
    #[serde(default)]
    dtypes: Option<Vec<String>>,
    #[serde(default)]
    sources: Option<Vec<String>>,
    #[serde(default)]
    when: Option<Vec<String>>,
    #[serde(default)]
    targets: Option<Vec<String>>,
    #[serde(default)]
    error: Option<ErrorKind>,
    status: ExpectedStatus,
    reason: ReasonCategory,
    text: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    expect: Vec<RawEntry>,
}

/// Which cases an entry covers: every given list must admit the case (an omitted list admits
/// any). At least one of `ops`, `dtypes` and `when` is given.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selector {
    pub ops: Vec<String>,
    pub dtypes: Vec<String>,
    pub sources: Vec<String>,
    /// Every property must hold.
    pub when: Vec<Property>,
    /// No property may hold (`when = ["!non-finite-input"]`).
    pub unless: Vec<Property>,
    /// The generations the entry holds on (`targets = ["trn3"]`); empty: every generation.
    pub targets: Vec<TargetName>,
}

impl Selector {
    pub fn matches(&self, f: &CaseFacts) -> bool {
        (self.ops.is_empty() || self.ops.contains(&f.op))
            && (self.dtypes.is_empty() || self.dtypes.contains(&f.dtype))
            && (self.sources.is_empty() || f.source.as_ref().is_some_and(|s| self.sources.contains(s)))
            && self.when.iter().all(|p| f.properties.contains(p))
            && !self.unless.iter().any(|p| f.properties.contains(p))
            && self.applies_on(f.target)
    }

    /// Whether the entry can cover cases of a run on `target` (`None`: unknown target).
    pub fn applies_on(&self, target: Option<TargetName>) -> bool {
        self.targets.is_empty() || target.is_some_and(|t| self.targets.contains(&t))
    }

    /// Whether the entry can cover cases of a run with (`native`) or without `--native-int64`:
    /// not when it requires the `native-int64` property the run lacks, or excludes the one it has.
    pub fn applies_in_int64_mode(&self, native: bool) -> bool {
        let p = Property::NativeInt64;
        if native {
            !self.unless.contains(&p)
        } else {
            !self.when.contains(&p)
        }
    }
}

/// One entry of the expectations file.
#[derive(Clone, Debug, PartialEq)]
pub struct Expectation {
    /// 1-based position of the entry in the file (for messages).
    pub entry: usize,
    pub selector: Selector,
    /// The typed error the case must end in (xfail only); `None`: any failure or error.
    pub error: Option<ErrorKind>,
    pub status: ExpectedStatus,
    pub reason: ReasonCategory,
    pub text: String,
}

impl Expectation {
    pub fn matches(&self, facts: &CaseFacts) -> bool {
        self.selector.matches(facts)
    }

    /// `not-lowered: not lowered yet (expectations entry 3)`.
    pub fn describe(&self) -> String {
        format!("{}: {} (expectations entry {})", self.reason, self.text, self.entry)
    }
}

/// A malformed expectations file, or a case two entries claim.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExpectError {
    #[error("{}: cannot read: {reason}", path.display())]
    Io { path: PathBuf, reason: String },
    #[error("{}: {reason}", path.display())]
    Malformed { path: PathBuf, reason: String },
    #[error("{}: entry {entry}: {reason}", path.display())]
    BadEntry {
        path: PathBuf,
        entry: usize,
        reason: String,
    },
    #[error("case `{id}` is matched by expectations entries {first} and {second}; a case may match only one")]
    Ambiguous { id: String, first: usize, second: usize },
}

/// The parsed expectations file.
#[derive(Clone, Debug, Default)]
pub struct Expectations {
    pub path: PathBuf,
    pub entries: Vec<Expectation>,
}

impl Expectations {
    /// No expectations: every case must pass.
    pub fn none() -> Self {
        Expectations::default()
    }

    pub fn load(path: &Path) -> Result<Expectations, ExpectError> {
        let text = std::fs::read_to_string(path).map_err(|e| ExpectError::Io {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        Expectations::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Expectations, ExpectError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| ExpectError::Malformed {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let mut entries = Vec::new();
        for (i, r) in raw.expect.into_iter().enumerate() {
            let entry = i + 1;
            let bad = |reason: String| ExpectError::BadEntry {
                path: path.to_path_buf(),
                entry,
                reason,
            };
            let list = |name: &str, v: Option<Vec<String>>, ok: &dyn Fn(&str) -> bool| match v {
                None => Ok(Vec::new()),
                Some(v) if v.is_empty() => Err(bad(format!("`{name}` is empty (omit it to admit any)"))),
                Some(v) => match v.iter().find(|x| !ok(x)) {
                    Some(x) => Err(bad(format!("`{x}` is not a valid entry of `{name}`"))),
                    None => Ok(v),
                },
            };
            let ops = list("ops", r.ops, &|o| crate::ops::is_core_op(o))?;
            let dtypes = list("dtypes", r.dtypes, &|d| {
                d == "none" || TorchDType::from_name(d).is_some()
            })?;
            let sources = list("sources", r.sources, &|s| SOURCES.contains(&s))?;
            if let Some(t) = r.targets.iter().flatten().find(|t| TargetName::from_name(t).is_none()) {
                return Err(bad(format!(
                    "`{t}` is not a target (targets: {})",
                    TargetName::names().collect::<Vec<_>>().join(", ")
                )));
            }
            let targets: Vec<TargetName> = list("targets", r.targets, &|t| TargetName::from_name(t).is_some())?
                .iter()
                .filter_map(|t| TargetName::from_name(t))
                .collect();
            let when_names = list("when", r.when, &|p| {
                Property::parse(p.strip_prefix('!').unwrap_or(p)).is_some()
            })?;
            let (negated, required): (Vec<&String>, Vec<&String>) = when_names.iter().partition(|p| p.starts_with('!'));
            let when: Vec<Property> = required.iter().filter_map(|p| Property::parse(p)).collect();
            let unless: Vec<Property> = negated.iter().filter_map(|p| Property::parse(&p[1..])).collect();
            if ops.is_empty() && dtypes.is_empty() && when.is_empty() && unless.is_empty() {
                return Err(bad(
                    "needs `ops`, `dtypes` or `when` (entries select cases by what they are, not by id)".into(),
                ));
            }
            if r.text.trim().is_empty() {
                return Err(bad("`text` must say why".into()));
            }
            if r.status == ExpectedStatus::Skip && r.reason == ReasonCategory::NotLowered {
                return Err(bad(
                    "not-lowered cases are xfail, not skip: they run so that a new lowering shows up".into(),
                ));
            }
            if r.error.is_some() && r.status == ExpectedStatus::Skip {
                return Err(bad("`error` needs status xfail: a skipped case never runs".into()));
            }
            if r.error.is_some() && r.reason == ReasonCategory::NotLowered {
                return Err(bad("`error` does not apply to not-lowered entries".into()));
            }
            entries.push(Expectation {
                entry,
                selector: Selector {
                    ops,
                    dtypes,
                    sources,
                    when,
                    unless,
                    targets,
                },
                error: r.error,
                status: r.status,
                reason: r.reason,
                text: r.text,
            });
        }
        Ok(Expectations {
            path: path.to_path_buf(),
            entries,
        })
    }

    /// The entry covering a case (`id` only names it in the error), if any.
    pub fn lookup(&self, id: &str, facts: &CaseFacts) -> Result<Option<&Expectation>, ExpectError> {
        let mut found: Option<&Expectation> = None;
        for e in self.entries.iter().filter(|e| e.matches(facts)) {
            if let Some(first) = found {
                return Err(ExpectError::Ambiguous {
                    id: id.to_string(),
                    first: first.entry,
                    second: e.entry,
                });
            }
            found = Some(e);
        }
        Ok(found)
    }

    /// Entries no case result of a run on `target` was covered by (stale entries): `described`
    /// holds each result's `expectation` text ([`Expectation::describe`]). An entry limited to
    /// other targets is not stale on this one.
    pub fn unused<'a>(&self, target: TargetName, described: impl IntoIterator<Item = &'a str>) -> Vec<&Expectation> {
        self.unused_in(target, false, described)
    }

    /// [`Expectations::unused`] for a run with or without `--native-int64` (`native`): an entry
    /// for the other mode is not stale.
    pub fn unused_in<'a>(
        &self,
        target: TargetName,
        native: bool,
        described: impl IntoIterator<Item = &'a str>,
    ) -> Vec<&Expectation> {
        let used: BTreeSet<&str> = described.into_iter().collect();
        self.entries
            .iter()
            .filter(|e| {
                e.selector.applies_on(Some(target))
                    && e.selector.applies_in_int64_mode(native)
                    && !used.contains(e.describe().as_str())
            })
            .collect()
    }
}

/// The committed expectations file for an executor (`sim`, or a process executor's mode):
/// expectations describe what runs, so they are per executor.
/// * `sim` and the process `nki` mode run the team's lowering (the nki stand-in reproduces the
///   simulator bit for bit; on a device a difference is a finding): `conformance/expectations.toml`.
/// * The process `torch` mode (and the `echo` protocol test) run PyTorch's own op:
///   `conformance/expectations-torch.toml`.
pub fn default_path_for(executor: &str, mode: &str) -> PathBuf {
    let dir = crate::conformance_dir();
    if executor == "sim" || mode == "nki" {
        dir.join("expectations.toml")
    } else {
        dir.join("expectations-torch.toml")
    }
}

/// Glob match with `*` (any run, also empty) and `?` (one character).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

// ---------------------------------------------------------------------------------------------
// The generated not-lowered block

/// First line of the generated block of not-lowered entries in expectations.toml.
pub const NOT_LOWERED_BEGIN: &str = "# BEGIN not-lowered";
/// Last line of that block.
pub const NOT_LOWERED_END: &str = "# END not-lowered";

/// The not-lowered entries for every core op without a lowering: one entry per family, families
/// and ops sorted by name.
pub fn render_not_lowered(is_lowered: impl Fn(&str) -> bool) -> String {
    let mut families: Vec<(&str, Vec<&str>)> = Vec::new();
    for op in crate::ops::core_ops() {
        if is_lowered(&op.name) {
            continue;
        }
        match families.iter_mut().find(|(f, _)| *f == op.family) {
            Some((_, ops)) => ops.push(&op.name),
            None => families.push((&op.family, vec![&op.name])),
        }
    }
    families.sort();
    let mut out = format!(
        "{NOT_LOWERED_BEGIN}: generated by `trnconf sync-expectations` from the lowering registry; do not edit\n"
    );
    for (family, ops) in families {
        out += &format!("[[expect]]\n# family: {family}\nops = [\n");
        for op in ops {
            out += &format!("    \"{op}\",\n");
        }
        out += "]\nstatus = \"xfail\"\nreason = \"not-lowered\"\ntext = \"not lowered yet\"\n\n";
    }
    out.truncate(out.trim_end().len());
    out + "\n" + NOT_LOWERED_END + "\n"
}

/// `text` with its generated not-lowered block replaced by [`render_not_lowered`]. `None` when
/// the file has no (complete) block.
pub fn sync_not_lowered(text: &str, is_lowered: impl Fn(&str) -> bool) -> Option<String> {
    let begin = text.find(NOT_LOWERED_BEGIN)?;
    let end_marker = text[begin..].find(NOT_LOWERED_END)? + begin;
    let end = text[end_marker..].find('\n').map_or(text.len(), |i| end_marker + i + 1);
    Some(format!(
        "{}{}{}",
        &text[..begin],
        render_not_lowered(is_lowered),
        &text[end..]
    ))
}

// ---------------------------------------------------------------------------------------------
// Applying an expectation to what happened

/// What running a case produced, before expectations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    /// Passed by the accuracy rule only (not `assert_close` to the CPU output; see
    /// crate::accuracy).
    Accurate,
    /// Outputs did not match.
    Fail,
    /// The case could not be run: bad file, lowering error, simulator error.
    Error,
    /// The op has no lowering.
    NotLowered,
    /// The backend module does not provide the overload (`--backend nki:MODULE`).
    NotProvided,
}

/// The final status of a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    /// Passed by the accuracy rule only: not `assert_close` to PyTorch CPU's output, but at least
    /// as accurate against the oracle, or within the algorithm's error bound.
    Accurate,
    Fail,
    /// Expected not to pass, and did not.
    XFail,
    /// Expected not to pass, but passed: the expectation is stale.
    XPass,
    Skip,
    Error,
    /// The backend does not provide the op (an NKI backend module without a kernel for the
    /// overload): neither a pass nor a failure.
    #[serde(rename = "not-provided")]
    NotProvided,
}

impl Status {
    /// Whether the case matched its expectation (the run succeeds only if all did).
    pub fn is_ok(self) -> bool {
        matches!(
            self,
            Status::Pass | Status::Accurate | Status::XFail | Status::Skip | Status::NotProvided
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Accurate => "accurate",
            Status::Fail => "fail",
            Status::XFail => "xfail",
            Status::XPass => "xpass",
            Status::Skip => "skip",
            Status::Error => "error",
            Status::NotProvided => "not-provided",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Combines an outcome with the case's expectation: the status, and a note to prepend to the
/// case's message (empty when there is nothing to add). `error`: the typed error kind the run
/// ended in, when it ended in one (an entry with `error = …` is met only by that kind).
pub fn resolve(outcome: Outcome, error: Option<ErrorKind>, expectation: Option<&Expectation>) -> (Status, String) {
    // Not provided is what the backend is, not how a case behaves: no expectation applies.
    let Some(e) = expectation.filter(|_| outcome != Outcome::NotProvided) else {
        return match outcome {
            Outcome::NotProvided => (Status::NotProvided, String::new()),
            Outcome::Pass => (Status::Pass, String::new()),
            Outcome::Accurate => (Status::Accurate, String::new()),
            Outcome::Fail => (Status::Fail, String::new()),
            Outcome::Error => (Status::Error, String::new()),
            Outcome::NotLowered => (
                Status::Error,
                "the op is not lowered and no expectations entry says so (add it as not-lowered)".into(),
            ),
        };
    };
    if e.status == ExpectedStatus::Skip {
        return (Status::Skip, format!("skipped: {}", e.describe()));
    }
    match (e.reason, outcome) {
        (_, Outcome::Pass | Outcome::Accurate) => (
            Status::XPass,
            format!(
                "passed, but expected to fail ({}): remove or narrow the expectation",
                e.describe()
            ),
        ),
        (ReasonCategory::NotLowered, Outcome::NotLowered) => (Status::XFail, e.describe()),
        (ReasonCategory::NotLowered, Outcome::Fail) => (
            Status::Fail,
            format!(
                "expected not-lowered ({}), but the op is lowered and fails",
                e.describe()
            ),
        ),
        (ReasonCategory::NotLowered, Outcome::Error) => (
            Status::Error,
            format!("expected not-lowered ({}), but the case errors", e.describe()),
        ),
        (_, Outcome::NotLowered) => (
            Status::Error,
            format!(
                "expected a {} failure ({}), but the op is not lowered",
                e.reason,
                e.describe()
            ),
        ),
        (_, Outcome::Fail | Outcome::Error) => match e.error {
            Some(want) if error != Some(want) => (
                if outcome == Outcome::Fail {
                    Status::Fail
                } else {
                    Status::Error
                },
                format!(
                    "expected the typed error `{want}` ({}), but the case {}",
                    e.describe(),
                    match error {
                        Some(got) => format!("ended in `{got}`"),
                        None if outcome == Outcome::Fail => "fails its comparison".to_string(),
                        None => "errors otherwise".to_string(),
                    }
                ),
            ),
            _ => (Status::XFail, e.describe()),
        },
        (_, Outcome::NotProvided) => (Status::NotProvided, String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Expectations, ExpectError> {
        Expectations::parse(s, Path::new("expectations.toml"))
    }

    /// Expectations are per executor: the lowering's list for sim and nki, the torch list
    /// (committed, loadable) for PyTorch's own op.
    #[test]
    fn default_file_per_executor() {
        let name = |e: &str, m: &str| {
            default_path_for(e, m)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        };
        assert_eq!(
            name("sim", "torch"),
            "expectations.toml",
            "--mode only matters for process executors"
        );
        assert_eq!(name("process:python x.py", "nki"), "expectations.toml");
        assert_eq!(name("process:python x.py", "torch"), "expectations-torch.toml");
        assert_eq!(name("process:python x.py", "echo"), "expectations-torch.toml");
        for (e, m) in [("sim", "torch"), ("process:x", "torch")] {
            Expectations::load(&default_path_for(e, m)).unwrap();
        }
    }

    /// Facts of a case of `op` and `dtype` with the given properties.
    fn facts(op: &str, dtype: &str, source: &str, props: &[&str]) -> CaseFacts {
        CaseFacts {
            op: op.into(),
            dtype: dtype.into(),
            source: Some(source.into()),
            properties: props.iter().map(|p| Property::parse(p).unwrap()).collect(),
            target: None,
        }
    }

    /// `targets = [...]` limits an entry to those generations: it covers a case of a run on one
    /// of them only, a run on another generation (or of unknown target) sees no entry, and an
    /// entry for all targets next to it is ambiguous only where both apply.
    #[test]
    fn entries_limited_to_targets() {
        let text = r#"
[[expect]]
ops = ["mm"]
targets = ["trn3"]
status = "xfail"
reason = "simulator-gap"
text = "t3"

[[expect]]
ops = ["sort"]
targets = ["trn2", "trn3"]
status = "xfail"
reason = "precision"
text = "t23"

[[expect]]
ops = ["sort"]
dtypes = ["f32"]
status = "xfail"
reason = "precision"
text = "all"
"#;
        let ex = parse(text).unwrap();
        assert_eq!(ex.entries[0].selector.targets, vec![TargetName::Trn3]);
        assert_eq!(ex.entries[1].selector.targets, vec![TargetName::Trn2, TargetName::Trn3]);
        assert!(ex.entries[2].selector.targets.is_empty());
        let mm = facts("mm", "f32", "opinfo", &[]);
        let hit = |f: CaseFacts| ex.lookup("x", &f).unwrap().map(|e| e.entry);
        assert_eq!(hit(mm.clone().on(TargetName::Trn3)), Some(1));
        assert_eq!(hit(mm.clone().on(TargetName::Trn1)), None);
        assert_eq!(hit(mm.clone().on(TargetName::Trn2)), None);
        assert_eq!(hit(mm), None, "unknown target: a limited entry does not apply");
        let sort_bf16 = facts("sort", "bf16", "opinfo", &[]);
        assert_eq!(hit(sort_bf16.clone().on(TargetName::Trn1)), None);
        assert_eq!(hit(sort_bf16.on(TargetName::Trn2)), Some(2));
        let sort_f32 = facts("sort", "f32", "opinfo", &[]);
        assert_eq!(hit(sort_f32.clone().on(TargetName::Trn1)), Some(3));
        assert!(matches!(
            ex.lookup("x", &sort_f32.on(TargetName::Trn3)),
            Err(ExpectError::Ambiguous {
                first: 2,
                second: 3,
                ..
            })
        ));
        // Stale entries are judged per target: entry 1 cannot be stale on trn1.
        let unused = |t: TargetName| -> Vec<usize> { ex.unused(t, []).iter().map(|e| e.entry).collect() };
        assert_eq!(unused(TargetName::Trn1), vec![3]);
        assert_eq!(unused(TargetName::Trn2), vec![2, 3]);
        assert_eq!(unused(TargetName::Trn3), vec![1, 2, 3]);
    }

    const SAMPLE: &str = r#"
[[expect]]
ops = ["sort", "topk"]
status = "xfail"
reason = "not-lowered"
text = "not lowered yet"

[[expect]]
when = ["int64-outside-int32"]
error = "int64-outside-int32"
status = "xfail"
reason = "unsupported-dtype"
text = "int64 values beyond int32"

[[expect]]
ops = ["mm"]
dtypes = ["f32"]
sources = ["stress"]
when = ["empty-input", "arg:out_dtype"]
status = "skip"
reason = "simulator-gap"
text = "matmul semantics missing"
"#;

    #[test]
    fn parses_and_looks_up() {
        let ex = parse(SAMPLE).unwrap();
        assert_eq!(ex.entries.len(), 3);
        let e = ex.lookup("x", &facts("sort", "f32", "opinfo", &[])).unwrap().unwrap();
        assert_eq!((e.entry, e.reason), (1, ReasonCategory::NotLowered));
        let e = ex
            .lookup("x", &facts("add.Tensor", "i64", "stress", &["int64-outside-int32"]))
            .unwrap()
            .unwrap();
        assert_eq!((e.entry, e.error), (2, Some(ErrorKind::Int64OutsideInt32)));
        assert!(
            ex.lookup("x", &facts("add.Tensor", "i64", "stress", &[]))
                .unwrap()
                .is_none()
        );
        let all = ["empty-input", "arg:out_dtype"];
        let neg = parse("[[expect]]\nops = [\"mm\"]\nwhen = [\"!non-finite-input\"]\nstatus = \"xfail\"\nreason = \"precision\"\ntext = \"t\"\n").unwrap();
        assert!(neg.lookup("x", &facts("mm", "f32", "stress", &[])).unwrap().is_some());
        assert!(
            neg.lookup("x", &facts("mm", "f32", "stress", &["non-finite-input"]))
                .unwrap()
                .is_none()
        );
        assert_eq!(
            ex.lookup("x", &facts("mm", "f32", "stress", &all))
                .unwrap()
                .unwrap()
                .status,
            ExpectedStatus::Skip
        );
        // Every given list must admit the case.
        for f in [
            facts("mm", "f32", "stress", &["empty-input"]),
            facts("mm", "f32", "hand", &all),
            facts("mm", "bf16", "stress", &all),
            facts("bmm", "f32", "stress", &all),
        ] {
            assert!(ex.lookup("x", &f).unwrap().is_none(), "{f:?}");
        }
    }

    #[test]
    fn ambiguous_match_is_an_error() {
        let ex = parse(&format!(
            "{SAMPLE}\n[[expect]]\ndtypes = [\"f32\"]\nstatus = \"xfail\"\nreason = \"precision\"\ntext = \"x\"\n"
        ))
        .unwrap();
        let e = ex
            .lookup("sort::f32::hand_0", &facts("sort", "f32", "hand", &[]))
            .unwrap_err();
        assert_eq!(
            e,
            ExpectError::Ambiguous {
                id: "sort::f32::hand_0".into(),
                first: 1,
                second: 4
            }
        );
    }

    #[test]
    fn malformed_files_are_clear_errors() {
        let entry =
            |body: &str| format!("[[expect]]\n{body}\nstatus = \"xfail\"\nreason = \"precision\"\ntext = \"t\"\n");
        let e = parse(&entry("ops = [\"relu\"]\nwhy = 1")).unwrap_err();
        assert!(e.to_string().contains("why"), "{e}");
        let bad_reason = "[[expect]]\nops = [\"relu\"]\nstatus = \"xfail\"\nreason = \"flaky\"\ntext = \"t\"\n";
        let e = parse(bad_reason).unwrap_err();
        assert!(e.to_string().contains("flaky"), "{e}");
        let e = parse(&entry("ops = [\"relu.default\"]")).unwrap_err();
        assert!(
            e.to_string().contains("entry 1") && e.to_string().contains("relu.default"),
            "{e}"
        );
        for (body, word) in [
            ("dtypes = [\"f31\"]", "f31"),
            ("sources = [\"fresh\"]", "fresh"),
            ("when = [\"big-values\"]", "big-values"),
            ("when = [\"arg:\"]", "arg:"),
            ("ops = []", "empty"),
            ("sources = [\"stress\"]", "by what they are"),
            ("error = \"int64-outside-int32\"", "by what they are"),
            // Ids change with every regenerated corpus: there is no id selector.
            ("cases = [\"add.Tensor::i64::stress_1\"]", "cases"),
            ("ops = [\"relu\"]\nerror = \"overflow\"", "overflow"),
            // A target the simulator does not model, and an empty list.
            ("ops = [\"relu\"]\ntargets = [\"trn9\"]", "`trn9` is not a target"),
            ("ops = [\"relu\"]\ntargets = [\"Trn3\"]", "Trn3"),
            ("ops = [\"relu\"]\ntargets = []", "empty"),
            // A target alone selects no cases by what they are.
            ("targets = [\"trn3\"]", "by what they are"),
        ] {
            let e = parse(&entry(body)).unwrap_err();
            assert!(e.to_string().contains(word), "{body}: {e}");
        }
        let no_text = "[[expect]]\nops = [\"relu\"]\nstatus = \"xfail\"\nreason = \"precision\"\ntext = \" \"\n";
        assert!(parse(no_text).unwrap_err().to_string().contains("text"));
        let top = "[expectations]\n";
        assert!(parse(top).is_err());
        assert!(parse("[[expect]\n").is_err());
        let skip_not_lowered =
            "[[expect]]\nops = [\"relu\"]\nstatus = \"skip\"\nreason = \"not-lowered\"\ntext = \"t\"\n";
        assert!(parse(skip_not_lowered).is_err());
        let skip_error = "[[expect]]\nops = [\"relu\"]\nerror = \"int64-outside-int32\"\nstatus = \"skip\"\nreason = \"precision\"\ntext = \"t\"\n";
        assert!(parse(skip_error).unwrap_err().to_string().contains("xfail"));
        assert!(parse("").unwrap().entries.is_empty());
    }

    #[test]
    fn globs() {
        assert!(glob_match("*", "anything"));
        assert!(glob_match("add.*::bf16::*", "add.Tensor::bf16::opinfo_3"));
        assert!(!glob_match("add.*::bf16::*", "add.Tensor::f16::opinfo_3"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("*_1*", "x_12"));
        assert!(!glob_match("", "x"));
    }

    #[test]
    fn schema_argument_names() {
        assert_eq!(
            schema_arg_names(
                "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"
            )
            .unwrap(),
            vec!["self", "dim", "keepdim", "dtype"]
        );
        assert_eq!(schema_arg_names("randperm(SymInt n) -> Tensor").unwrap(), vec!["n"]);
        assert_eq!(schema_arg_names("f() -> Tensor").unwrap(), Vec::<String>::new());
        assert!(schema_arg_names("no parens").is_none());
    }

    #[test]
    fn xpass_fails_the_run() {
        let ex = parse(SAMPLE).unwrap();
        let not_lowered = ex.lookup("x", &facts("sort", "f32", "hand", &[])).unwrap();
        let (s, note) = resolve(Outcome::Pass, None, not_lowered);
        assert_eq!(s, Status::XPass);
        assert!(!s.is_ok());
        assert!(note.contains("expected to fail"), "{note}");
        let hw = ex
            .lookup("x", &facts("add.Tensor", "i64", "stress", &["int64-outside-int32"]))
            .unwrap();
        assert_eq!(resolve(Outcome::Pass, None, hw).0, Status::XPass);
    }

    #[test]
    fn resolution_table() {
        let ex = parse(SAMPLE).unwrap();
        let nl = ex.lookup("x", &facts("sort", "f32", "hand", &[])).unwrap();
        let hw = ex
            .lookup("x", &facts("add.Tensor", "i64", "stress", &["int64-outside-int32"]))
            .unwrap();
        let skip = ex
            .lookup("x", &facts("mm", "f32", "stress", &["empty-input", "arg:out_dtype"]))
            .unwrap();
        let i64e = Some(ErrorKind::Int64OutsideInt32);
        assert_eq!(resolve(Outcome::NotLowered, None, nl).0, Status::XFail);
        assert_eq!(
            resolve(Outcome::Fail, None, nl).0,
            Status::Fail,
            "a stale not-lowered reason must not hide a failure"
        );
        assert_eq!(resolve(Outcome::Error, None, nl).0, Status::Error);
        assert_eq!(resolve(Outcome::Error, i64e, hw).0, Status::XFail);
        // An entry that names its error is met by that error only.
        let (s, note) = resolve(Outcome::Error, None, hw);
        assert_eq!(s, Status::Error);
        assert!(note.contains("int64-outside-int32"), "{note}");
        assert_eq!(resolve(Outcome::Fail, None, hw).0, Status::Fail);
        assert_eq!(resolve(Outcome::NotLowered, None, hw).0, Status::Error);
        assert_eq!(resolve(Outcome::Fail, None, skip).0, Status::Skip);
        assert_eq!(resolve(Outcome::Pass, None, None).0, Status::Pass);
        assert_eq!(resolve(Outcome::Fail, None, None).0, Status::Fail);
        let (s, note) = resolve(Outcome::NotLowered, None, None);
        assert_eq!(s, Status::Error);
        assert!(note.contains("not lowered"));
        assert!(Status::XFail.is_ok() && Status::Skip.is_ok() && !Status::Error.is_ok() && !Status::Fail.is_ok());
    }

    #[test]
    fn not_lowered_block_is_regenerated_in_place() {
        let text = format!(
            "# head\n{NOT_LOWERED_BEGIN}: old\n[[expect]]\nops = [\"relu\"]\nstatus = \"xfail\"\nreason = \"not-lowered\"\ntext = \"x\"\n{NOT_LOWERED_END}\n\n# tail\n"
        );
        let synced = sync_not_lowered(&text, |op| op != "relu" && op != "mm").unwrap();
        assert!(synced.starts_with("# head\n"));
        assert!(synced.ends_with("\n# tail\n"));
        let ex = parse(&synced).unwrap();
        let ops: Vec<&String> = ex.entries.iter().flat_map(|e| e.selector.ops.iter()).collect();
        assert_eq!(ops, vec!["relu", "mm"]);
        assert_eq!(
            sync_not_lowered(&synced, |op| op != "relu" && op != "mm").unwrap(),
            synced,
            "idempotent"
        );
        assert!(sync_not_lowered("no markers", |_| false).is_none());
    }

    #[test]
    fn unused_entries() {
        let ex = parse(SAMPLE).unwrap();
        let used = ex.entries[0].describe();
        let unused: Vec<usize> = ex
            .unused(TargetName::Trn1, [used.as_str()])
            .iter()
            .map(|e| e.entry)
            .collect();
        assert_eq!(unused, vec![2, 3]);
    }
}
