//! Expectations: the cases that are expected not to pass, and why (`conformance/expectations.toml`).
//!
//! Every case not listed must pass. A listed case is either
//! * `xfail`: it still runs, and must not pass — a pass is an *xpass*, which fails the run, so the
//!   list cannot rot; or
//! * `skip`: it is not run (its file is still loaded, as a corruption check), and is reported as
//!   skipped with its reason. Nothing is skipped silently.
//!
//! Each entry selects cases by op name (`ops`) or by glob over case ids (`cases`, `*` and `?`),
//! gives a reason category and a text. A case matched by two entries is an error (no precedence
//! rules to reason about). Unknown keys, unknown categories, unknown op names and empty texts are
//! load errors.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};

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

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    #[serde(default)]
    ops: Option<Vec<String>>,
    #[serde(default)]
    cases: Option<Vec<String>>,
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

/// Which cases an entry covers.
#[derive(Clone, Debug, PartialEq)]
pub enum Selector {
    Ops(Vec<String>),
    /// Globs over case ids.
    Cases(Vec<String>),
}

/// One entry of the expectations file.
#[derive(Clone, Debug, PartialEq)]
pub struct Expectation {
    /// 1-based position of the entry in the file (for messages).
    pub entry: usize,
    pub selector: Selector,
    pub status: ExpectedStatus,
    pub reason: ReasonCategory,
    pub text: String,
}

impl Expectation {
    pub fn matches(&self, id: &str, op: &str) -> bool {
        match &self.selector {
            Selector::Ops(ops) => ops.iter().any(|o| o == op),
            Selector::Cases(globs) => globs.iter().any(|g| glob_match(g, id)),
        }
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
            let selector = match (r.ops, r.cases) {
                (Some(ops), None) => {
                    if ops.is_empty() {
                        return Err(bad("`ops` is empty".into()));
                    }
                    if let Some(unknown) = ops.iter().find(|o| !crate::ops::is_core_op(o)) {
                        return Err(bad(format!("`{unknown}` is not a Core ATen op")));
                    }
                    Selector::Ops(ops)
                }
                (None, Some(cases)) => {
                    if cases.is_empty() || cases.iter().any(|c| c.trim().is_empty()) {
                        return Err(bad("`cases` needs non-empty patterns".into()));
                    }
                    Selector::Cases(cases)
                }
                (Some(_), Some(_)) => return Err(bad("give either `ops` or `cases`, not both".into())),
                (None, None) => return Err(bad("needs `ops` or `cases`".into())),
            };
            if r.text.trim().is_empty() {
                return Err(bad("`text` must say why".into()));
            }
            if r.status == ExpectedStatus::Skip && r.reason == ReasonCategory::NotLowered {
                return Err(bad(
                    "not-lowered cases are xfail, not skip: they run so that a new lowering shows up".into(),
                ));
            }
            entries.push(Expectation {
                entry,
                selector,
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

    /// The entry covering a case, if any.
    pub fn lookup(&self, id: &str, op: &str) -> Result<Option<&Expectation>, ExpectError> {
        let mut found: Option<&Expectation> = None;
        for e in self.entries.iter().filter(|e| e.matches(id, op)) {
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

    /// Entries that cover none of the given `(id, op)` cases (stale entries).
    pub fn unused<'a>(&self, cases: impl IntoIterator<Item = (&'a str, &'a str)> + Clone) -> Vec<&Expectation> {
        self.entries
            .iter()
            .filter(|e| !cases.clone().into_iter().any(|(id, op)| e.matches(id, op)))
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
/// case's message (empty when there is nothing to add).
pub fn resolve(outcome: Outcome, expectation: Option<&Expectation>) -> (Status, String) {
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
        (_, Outcome::Fail | Outcome::Error) => (Status::XFail, e.describe()),
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

    const SAMPLE: &str = r#"
[[expect]]
ops = ["sort", "topk"]
status = "xfail"
reason = "not-lowered"
text = "not lowered yet"

[[expect]]
cases = ["add.Tensor::i64::stress_*"]
status = "xfail"
reason = "hardware-limitation"
text = "int64 values beyond int32"

[[expect]]
cases = ["mm::f32::opinfo_?"]
status = "skip"
reason = "simulator-gap"
text = "matmul semantics missing"
"#;

    #[test]
    fn parses_and_looks_up() {
        let ex = parse(SAMPLE).unwrap();
        assert_eq!(ex.entries.len(), 3);
        let e = ex.lookup("sort::f32::opinfo_0", "sort").unwrap().unwrap();
        assert_eq!((e.entry, e.reason), (1, ReasonCategory::NotLowered));
        let e = ex.lookup("add.Tensor::i64::stress_12", "add.Tensor").unwrap().unwrap();
        assert_eq!(e.reason, ReasonCategory::HardwareLimitation);
        assert!(ex.lookup("add.Tensor::i64::opinfo_1", "add.Tensor").unwrap().is_none());
        assert_eq!(
            ex.lookup("mm::f32::opinfo_3", "mm").unwrap().unwrap().status,
            ExpectedStatus::Skip
        );
        assert!(
            ex.lookup("mm::f32::opinfo_13", "mm").unwrap().is_none(),
            "? is one character"
        );
    }

    #[test]
    fn ambiguous_match_is_an_error() {
        let ex = parse(&format!(
            "{SAMPLE}\n[[expect]]\ncases = [\"sort::*\"]\nstatus = \"xfail\"\nreason = \"precision\"\ntext = \"x\"\n"
        ))
        .unwrap();
        let e = ex.lookup("sort::f32::hand_0", "sort").unwrap_err();
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
        let unknown_key =
            "[[expect]]\nops = [\"relu\"]\nstatus = \"xfail\"\nreason = \"precision\"\ntext = \"t\"\nwhy = 1\n";
        let e = parse(unknown_key).unwrap_err();
        assert!(e.to_string().contains("why"), "{e}");
        let bad_reason = "[[expect]]\nops = [\"relu\"]\nstatus = \"xfail\"\nreason = \"flaky\"\ntext = \"t\"\n";
        let e = parse(bad_reason).unwrap_err();
        assert!(e.to_string().contains("flaky"), "{e}");
        let unknown_op =
            "[[expect]]\nops = [\"relu.default\"]\nstatus = \"xfail\"\nreason = \"precision\"\ntext = \"t\"\n";
        let e = parse(unknown_op).unwrap_err();
        assert!(
            e.to_string().contains("entry 1") && e.to_string().contains("relu.default"),
            "{e}"
        );
        let no_text = "[[expect]]\nops = [\"relu\"]\nstatus = \"xfail\"\nreason = \"precision\"\ntext = \" \"\n";
        assert!(parse(no_text).unwrap_err().to_string().contains("text"));
        let both =
            "[[expect]]\nops = [\"relu\"]\ncases = [\"x\"]\nstatus = \"xfail\"\nreason = \"precision\"\ntext = \"t\"\n";
        assert!(parse(both).unwrap_err().to_string().contains("not both"));
        let top = "[expectations]\n";
        assert!(parse(top).is_err());
        assert!(parse("[[expect]\n").is_err());
        let skip_not_lowered =
            "[[expect]]\nops = [\"relu\"]\nstatus = \"skip\"\nreason = \"not-lowered\"\ntext = \"t\"\n";
        assert!(parse(skip_not_lowered).is_err());
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
    fn xpass_fails_the_run() {
        let ex = parse(SAMPLE).unwrap();
        let not_lowered = ex.lookup("sort::f32::opinfo_0", "sort").unwrap();
        let (s, note) = resolve(Outcome::Pass, not_lowered);
        assert_eq!(s, Status::XPass);
        assert!(!s.is_ok());
        assert!(note.contains("expected to fail"), "{note}");
        let hw = ex.lookup("add.Tensor::i64::stress_1", "add.Tensor").unwrap();
        assert_eq!(resolve(Outcome::Pass, hw).0, Status::XPass);
    }

    #[test]
    fn resolution_table() {
        let ex = parse(SAMPLE).unwrap();
        let nl = ex.lookup("sort::f32::opinfo_0", "sort").unwrap();
        let hw = ex.lookup("add.Tensor::i64::stress_1", "add.Tensor").unwrap();
        let skip = ex.lookup("mm::f32::opinfo_1", "mm").unwrap();
        assert_eq!(resolve(Outcome::NotLowered, nl).0, Status::XFail);
        assert_eq!(
            resolve(Outcome::Fail, nl).0,
            Status::Fail,
            "a stale not-lowered reason must not hide a failure"
        );
        assert_eq!(resolve(Outcome::Error, nl).0, Status::Error);
        assert_eq!(resolve(Outcome::Fail, hw).0, Status::XFail);
        assert_eq!(resolve(Outcome::Error, hw).0, Status::XFail);
        assert_eq!(resolve(Outcome::NotLowered, hw).0, Status::Error);
        assert_eq!(resolve(Outcome::Fail, skip).0, Status::Skip);
        assert_eq!(resolve(Outcome::Pass, None).0, Status::Pass);
        assert_eq!(resolve(Outcome::Fail, None).0, Status::Fail);
        let (s, note) = resolve(Outcome::NotLowered, None);
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
        let ops: Vec<&String> = ex
            .entries
            .iter()
            .flat_map(|e| match &e.selector {
                Selector::Ops(o) => o.iter().collect::<Vec<_>>(),
                _ => vec![],
            })
            .collect();
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
        let cases = [("sort::f32::opinfo_0", "sort")];
        let unused: Vec<usize> = ex.unused(cases.iter().copied()).iter().map(|e| e.entry).collect();
        assert_eq!(unused, vec![2, 3]);
    }
}
