//! Import circles inside a crate, which `cargo` cannot see (tests/deps.rs checks the crates'
//! direction). Each rule names a set of modules and the modules they must not import:
//!
//! * the simulator's engines (`sim/src/engine/`) never import the executor (`exec`, or `session`,
//!   which stands on it): `exec` runs the engines, so the settings they read live in
//!   `numerics.rs` and the counters they add to in `stats.rs`;
//! * trnconf's reports (`conformance/src/report/`) and backends (`conformance/src/backend/`) never
//!   import the runner: the runner imports them, and the result types they share with it live in
//!   `results.rs`;
//! * the roofline bound (`conformance/src/roofline.rs`) imports neither the reports nor the
//!   runner nor the results (the per-family table over reports is `report/roofline.rs`), and
//!   `results.rs` imports neither the runner nor the reports.
//!
//! The check reads the sources: comments are dropped, and a module is reached by `crate::M`,
//! `super::super::M` (from a module one level down), a brace list `crate::{…, M::…}`, or an item
//! the crate root re-exports from it.

use std::path::{Path, PathBuf};

struct Rule {
    /// Source files or directories (every `.rs` below), from the workspace root.
    sources: &'static [&'static str],
    /// Modules of the same crate the sources must not reach.
    forbidden: &'static [&'static str],
    /// Items the crate root re-exports from a forbidden module (`crate::Executor`).
    reexported: &'static [&'static str],
    /// Where what the sources need lives instead (for the failure message).
    instead: &'static str,
}

const RULES: &[Rule] = &[
    Rule {
        sources: &["sim/src/engine"],
        forbidden: &["exec", "session"],
        reexported: &["Executor", "ExecConfig", "RunResult", "HostTensor", "Session"],
        instead: "sim/src/numerics.rs (settings) or sim/src/stats.rs (counters)",
    },
    Rule {
        sources: &["conformance/src/report", "conformance/src/backend"],
        forbidden: &["runner"],
        reexported: &[],
        instead: "conformance/src/results.rs",
    },
    Rule {
        sources: &["conformance/src/roofline.rs"],
        forbidden: &["report", "runner", "results"],
        reexported: &[],
        instead: "conformance/src/report/roofline.rs (what reads reports)",
    },
    Rule {
        sources: &["conformance/src/results.rs"],
        forbidden: &["runner", "report"],
        reexported: &[],
        instead: "a module both the runner and the reports import",
    },
];

/// The source without `//` comments (a doc comment may name any module), on one line.
fn code(text: &str) -> String {
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace(":: ", "::")
        .replace("{ ", "{")
}

/// The paths of `code` that reach one of `modules`, or one of the `reexported` root items.
fn reaches(code: &str, modules: &[&str], reexported: &[&str]) -> Vec<String> {
    // A whole path segment ends at `::`, `;`, `,`, `}`, `)`, `>`, `&` or a space:
    // `crate::exec::X` reaches `exec`, `crate::execution` does not.
    let segment_ends =
        |rest: &str| rest.is_empty() || rest.starts_with("::") || rest.starts_with([';', ',', '}', ')', '>', ' ']);
    let mut found = Vec::new();
    let mut path_hits = |needle: String| {
        let mut at = 0;
        while let Some(i) = code[at..].find(&needle) {
            let end = at + i + needle.len();
            if segment_ends(&code[end..]) {
                found.push(needle.clone());
            }
            at = end;
        }
    };
    for m in modules {
        path_hits(format!("crate::{m}"));
        path_hits(format!("super::super::{m}"));
    }
    for item in reexported {
        path_hits(format!("crate::{item}"));
    }
    // Brace lists: `crate::{dtype::DType, exec::Numerics}` (one level of nesting is enough here).
    for group in code.split("crate::{").skip(1) {
        let mut depth = 1usize;
        let mut inner = String::new();
        for c in group.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                break;
            }
            inner.push(c);
        }
        let top: Vec<&str> = inner.split(',').map(str::trim).collect();
        for m in modules.iter().chain(reexported) {
            if top.iter().any(|p| *p == *m || p.starts_with(&format!("{m}::"))) {
                found.push(format!("crate::{{… {m} …}}"));
            }
        }
    }
    found
}

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .collect();
        entries.sort();
        for e in entries {
            rust_files(&e, out);
        }
    } else if path.extension().is_some_and(|x| x == "rs") {
        out.push(path.to_path_buf());
    }
}

#[test]
fn no_import_circles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut bad = Vec::new();
    for rule in RULES {
        let mut files = Vec::new();
        for s in rule.sources {
            let p = root.join(s);
            assert!(p.exists(), "{s} does not exist: update tests/layers.rs with the tree");
            rust_files(&p, &mut files);
        }
        assert!(!files.is_empty(), "{:?} holds no sources", rule.sources);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            for path in reaches(&code(&text), rule.forbidden, rule.reexported) {
                bad.push(format!(
                    "{}: {path} (move what it needs to {})",
                    f.strip_prefix(root).unwrap_or(&f).display(),
                    rule.instead
                ));
            }
        }
    }
    assert!(bad.is_empty(), "import circles:\n{}", bad.join("\n"));
}

/// The check finds each form of import it claims to, so it cannot pass vacuously.
#[test]
fn the_check_finds_every_form() {
    let m = &["exec", "session"];
    let items = &["Executor"];
    for src in [
        "use crate::exec::Numerics;",
        "use crate::exec;",
        "use crate::{dtype::DType, exec::Stats};",
        "use crate::{exec::{Numerics, Stats}, mem::Memories};",
        "use crate::{mem::{AccessPattern, MemSpace}, exec};",
        "fn f(n: &crate::exec::Numerics) {}",
        "use super::super::exec::Stats;",
        "use crate::Executor;",
        "use crate::{DType, Executor};",
        "use crate::session::Session;",
        "use crate::\n    exec::Stats;",
    ] {
        assert!(!reaches(&code(src), m, items).is_empty(), "{src}");
    }
    for src in [
        "use crate::numerics::Numerics;",
        "use crate::stats::Stats;",
        "// the executor (crate::exec) runs this",
        "/// see crate::exec::Executor",
        "use crate::execution_order;",
        "use crate::{mem::exec_like, dtype::DType};",
        "use crate::ExecutorLike;",
    ] {
        assert!(reaches(&code(src), m, items).is_empty(), "{src}");
    }
}
