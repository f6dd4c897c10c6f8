//! trnconf — the Trainium backend's lowering (ATen call → trnsim program) and the conformance
//! suite that checks it against golden outputs from real PyTorch.
//!
//! Flow of one case ([`runner::run_case`]): [`case`] loads a golden file → [`lower`] builds a
//! program → an [`executor`] runs it (the simulator in process) → [`compare`] judges the outputs
//! with PyTorch's `assert_close` rule → [`expect`] applies `expectations.toml`.
//! Two front ends use the runner: `tests/golden.rs` (one libtest-mimic trial per case) and the
//! `trnconf` binary. See docs/workflow.md.

pub mod accuracy;
pub mod case;
pub mod compare;
pub mod emit_nki;
pub mod executor;
pub mod expect;
pub mod fixture;
pub mod lower;
pub mod ops;
pub mod report;
pub mod runner;
pub mod snapshot;
pub mod tensor;

use std::path::{Path, PathBuf};

/// The workspace root as seen at compile time (conformance/..).
const WORKSPACE_ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The committed golden directory: `<workspace>/golden`, found from the compile-time workspace
/// root, else by walking up from the current directory (for a binary moved elsewhere).
pub fn default_golden_dir() -> PathBuf {
    let compiled = Path::new(WORKSPACE_ROOT).join("golden");
    if compiled.join("index.json").is_file() {
        return compiled;
    }
    if let Ok(mut dir) = std::env::current_dir() {
        loop {
            let candidate = dir.join("golden");
            if candidate.join("index.json").is_file() {
                return candidate;
            }
            if !dir.pop() {
                break;
            }
        }
    }
    compiled
}

/// The committed expectations file: `conformance/expectations.toml`.
pub fn default_expectations_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("expectations.toml")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expect::{Expectations, ReasonCategory, Selector};

    /// The committed expectations parse, and list as not-lowered exactly the core ops that have
    /// no lowering, each once.
    #[test]
    fn committed_expectations_cover_the_not_lowered_ops() {
        let ex = Expectations::load(&default_expectations_path()).unwrap();
        let mut listed = Vec::new();
        for e in &ex.entries {
            if let (Selector::Ops(ops), ReasonCategory::NotLowered) = (&e.selector, e.reason) {
                listed.extend(ops.iter().map(|o| o.as_str()));
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
