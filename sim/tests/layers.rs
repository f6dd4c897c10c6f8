//! The engines never import the executor: `exec` runs the engines, so an engine module that
//! reached back into `exec` (for a setting or a counter) would make the two a circle again.
//! The settings live in `numerics`, the counters in `stats`; this test reads the sources of
//! `sim/src/engine/` and fails on any path into `exec` or `session` (which stands on `exec`).

use std::path::Path;

/// The source without `//` comments (a doc comment may name the executor).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `use` paths and qualified paths of `code` that reach one of `modules` of the crate.
fn reaches(code: &str, modules: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    // `crate::exec::X`, `super::super::exec::X`, `crate::{exec::X, ...}`.
    let flat: String = code.split_whitespace().collect::<Vec<_>>().join(" ");
    for m in modules {
        for prefix in ["crate::", "super::super::", "crate::{", "crate::{ "] {
            let needle = format!("{prefix}{m}");
            let mut at = 0;
            while let Some(i) = flat[at..].find(&needle) {
                let end = at + i + needle.len();
                // A whole path segment: `crate::exec::`, not `crate::execution`.
                if flat[end..].starts_with("::") || flat[end..].starts_with([',', ';', '}', ' ']) {
                    found.push(needle.clone());
                }
                at = end;
            }
        }
        // Inside a brace list: `crate::{dtype::DType, exec::Numerics}`.
        for group in flat.split("crate::{").skip(1) {
            let inner = group.split('}').next().unwrap_or("");
            if inner
                .split(',')
                .any(|p| p.trim().starts_with(&format!("{m}::")) || p.trim() == *m)
            {
                found.push(format!("crate::{{… {m} …}}"));
            }
        }
    }
    // Items the crate root re-exports from `exec` reach it just the same.
    for item in ["Executor", "ExecConfig", "RunResult", "HostTensor", "Session"] {
        if flat.contains(&format!("crate::{item}")) {
            found.push(format!("crate::{item}"));
        }
    }
    found
}

#[test]
fn engines_do_not_import_the_executor() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join("engine");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("sim/src/engine")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "engine sources: {files:?}");
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("readable source");
        for path in reaches(&code(&text), &["exec", "session"]) {
            bad.push(format!("{}: {path}", f.display()));
        }
    }
    assert!(
        bad.is_empty(),
        "engine modules import the executor (move what they need to numerics.rs or stats.rs):\n{}",
        bad.join("\n")
    );
}

/// The check itself finds each form of import it claims to (so it cannot pass vacuously).
#[test]
fn the_check_finds_every_form() {
    for src in [
        "use crate::exec::Numerics;",
        "use crate::exec;",
        "use crate::{dtype::DType, exec::Stats};",
        "use crate::{exec::{Numerics, Stats}, mem::Memories};",
        "fn f(n: &crate::exec::Numerics) {}",
        "use super::super::exec::Stats;",
        "use crate::Executor;",
        "use crate::session::Session;",
    ] {
        assert!(!reaches(&code(src), &["exec", "session"]).is_empty(), "{src}");
    }
    for src in [
        "use crate::numerics::Numerics;",
        "use crate::stats::Stats;",
        "// the executor (crate::exec) runs this",
        "use crate::execution_order;",
    ] {
        assert!(reaches(&code(src), &["exec", "session"]).is_empty(), "{src}");
    }
}
