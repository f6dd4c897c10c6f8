//! trnconf — the Trainium backend's lowering (ATen call → trnsim program) and the conformance
//! suite that checks it against golden outputs from real PyTorch.
//!
//! Flow of one case ([`runner::run_case`]): [`case`] loads a golden file → [`lower`] builds a
//! program → an [`executor`] runs it (the simulator in process) → [`compare`] judges the outputs
//! with PyTorch's `assert_close` rule → [`expect`] applies `expectations.toml`.
//! Two front ends use the runner: `tests/golden.rs` (one libtest-mimic trial per case) and the
//! `trnconf` binary. See docs/workflow.md.

pub mod accuracy;
pub mod backend;
pub mod case;
pub mod compare;
pub mod emit_nki;
pub mod executor;
pub mod expect;
pub mod fixture;
pub mod lower;
pub mod model;
pub mod numerics;
pub use trnlower::ops;
pub mod report;
pub mod results;
pub mod roofline;
pub mod runner;
pub mod snapshot;
pub mod tensor;

use std::path::PathBuf;

/// The workspace whose goldens and expectations a run uses, found at run time (never compiled
/// in, so a binary built from one checkout cannot test another checkout's goldens or write its
/// expectations): `$TRNCONF_ROOT` if set, else the nearest directory at or above the current one
/// that holds `conformance/expectations.toml`. `None` when neither names one.
pub fn workspace_root() -> Option<PathBuf> {
    if let Some(root) = std::env::var_os("TRNCONF_ROOT").filter(|r| !r.is_empty()) {
        return Some(PathBuf::from(root));
    }
    let mut dir = std::env::current_dir().ok()?;
    loop {
        if dir.join("conformance").join("expectations.toml").is_file() {
            return Some(dir);
        }
        if !dir.pop() {
            return None;
        }
    }
}

/// The golden directory: `$TRNCONF_GOLDEN` if set, else `<workspace>/golden` (see
/// [`workspace_root`]); `./golden` when no workspace is found (the run then reports that it does
/// not exist).
pub fn default_golden_dir() -> PathBuf {
    if let Some(g) = std::env::var_os("TRNCONF_GOLDEN").filter(|g| !g.is_empty()) {
        return PathBuf::from(g);
    }
    workspace_root().unwrap_or_default().join("golden")
}

/// The Pythons to try for the tools' Python parts (the process executor, golden scripts), in
/// order: `$TRNCONF_PYTHON`, the project-local `<workspace>/.venv/bin/python` that
/// `golden/setup-venv.sh` creates, then `python3`. Never a machine-specific path.
pub fn python_candidates() -> Vec<String> {
    let mut c = Vec::new();
    if let Some(p) = std::env::var_os("TRNCONF_PYTHON").filter(|p| !p.is_empty()) {
        c.push(p.to_string_lossy().into_owned());
    }
    let venv = workspace_root().unwrap_or_default().join(".venv/bin/python");
    if venv.is_file() {
        c.push(venv.to_string_lossy().into_owned());
    }
    c.push("python3".into());
    c
}

/// The `conformance/` directory of the workspace (relative when no workspace is found).
pub fn conformance_dir() -> PathBuf {
    workspace_root().unwrap_or_default().join("conformance")
}

/// The committed expectations file: `<workspace>/conformance/expectations.toml`.
pub fn default_expectations_path() -> PathBuf {
    conformance_dir().join("expectations.toml")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expect::{Expectations, ReasonCategory};

    /// The committed expectations parse, and list as not-lowered exactly the core ops that have
    /// no lowering, each once.
    #[test]
    fn committed_expectations_cover_the_not_lowered_ops() {
        let ex = Expectations::load(&default_expectations_path()).unwrap();
        let mut listed = Vec::new();
        for e in &ex.entries {
            if e.reason == ReasonCategory::NotLowered {
                listed.extend(e.selector.ops.iter().map(|o| o.as_str()));
            }
        }
        let mut sorted = listed.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), listed.len(), "an op is listed twice");
        let want: Vec<&str> = ops::core_ops()
            .iter()
            .map(|o| o.name.as_str())
            .filter(|o| !lower::is_lowered(o))
            .collect();
        assert_eq!(sorted, want, "run `cargo run -p trnconf -- sync-expectations`");
    }
}
