//! Runs the Python package's tests (`conformance/python/tests`, pytest) under `cargo test
//! --workspace`, so the README's one test command covers the bindings and the NKI front-end.
//!
//! Python is `$TRNCONF_PYTHON`, else the project-local `.venv`, else `python3`: the first of them
//! that imports trnsim, pytest, numpy and ml_dtypes. The installed `trnsim` must have been built
//! from this tree: its `SOURCE_HASH` (baked in at build time, conformance/python/source_hash.rs)
//! must equal the hash of the working tree's sources. Under `CI` a missing or stale install fails;
//! elsewhere the test skips loudly with the command that installs it (docs/python.md).

#[path = "../conformance/python/source_hash.rs"]
mod source_hash;

use std::path::{Path, PathBuf};
use std::process::Command;

const INSTALL: &str = "python3 -m pip install ./conformance/python pytest==9.2.0 ml_dtypes==0.6.0";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn candidates(root: &Path) -> Vec<String> {
    let mut c = Vec::new();
    if let Ok(p) = std::env::var("TRNCONF_PYTHON") {
        c.push(p);
    }
    let venv = root.join(".venv/bin/python");
    if venv.is_file() {
        c.push(venv.to_string_lossy().into_owned());
    }
    c.push("python3".into());
    c
}

/// The installed trnsim's source hash, from the first candidate Python with every module the
/// tests need.
fn find_python(root: &Path) -> Option<(String, String)> {
    candidates(root).into_iter().find_map(|py| {
        let out = Command::new(&py)
            .args([
                "-c",
                "import numpy, ml_dtypes, pytest, trnsim; print(trnsim._native.SOURCE_HASH)",
            ])
            .current_dir(root)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| (py, String::from_utf8_lossy(&out.stdout).trim().to_string()))
    })
}

/// Fails under CI, skips loudly elsewhere.
fn unavailable(why: String) {
    let msg = format!("{why}\n  install from this tree: {INSTALL}\n  (or set TRNCONF_PYTHON to a Python that has it)");
    if std::env::var_os("CI").is_some() {
        panic!("python_package_tests: {msg}");
    }
    eprintln!("\n!!!!! SKIPPED python_package_tests: {msg} !!!!!\n");
}

#[test]
fn python_package_tests() {
    let root = repo_root();
    let Some((python, installed)) = find_python(&root) else {
        unavailable(format!(
            "no Python among {:?} imports trnsim, pytest, numpy and ml_dtypes",
            candidates(&root)
        ));
        return;
    };
    let tree = source_hash::source_hash(&root);
    if installed != tree {
        unavailable(format!(
            "the trnsim installed in {python} was built from other sources (hash {installed}, this tree {tree})"
        ));
        return;
    }
    let out = Command::new(&python)
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rs",
            "conformance/python/tests",
        ])
        .current_dir(&root)
        .output()
        .expect("runs pytest");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    match out.status.code() {
        Some(0) => {}
        // pytest's "no tests collected": nothing failed, but say so loudly.
        Some(5) => eprintln!("!!!!! python_package_tests: pytest collected no tests !!!!!"),
        code => panic!("pytest failed ({code:?}) with {python}:\n{text}"),
    }
}
