//! Runs the Python package's tests (`conformance/python/tests`, pytest) under `cargo test
//! --workspace`, so the README's one test command covers the bindings and the NKI front-end.
//!
//! Python is `$TRNCONF_PYTHON`, else the project-local `.venv`, else `python3`: the first of them
//! that imports trnsim, pytest, numpy and ml_dtypes. The installed `trnsim` must have been built
//! from this tree: its `SOURCE_HASH` (baked in at build time, conformance/python/source_hash.rs)
//! must equal the hash of the working tree's sources. Under `CI` a missing or stale install fails;
//! elsewhere the test skips loudly with the command that installs it (docs/python.md).
//!
//! `torch_device_tests` does the same for the PyTorch device's tests (`conformance/python/tests_torch`)
//! with a Python that also imports torch: `$TRNCONF_TORCH_PYTHON`, the candidates above, or the
//! venv `.ci/torch-venv` makes in the tools cache (docs/torch-device.md, "Tests and where they run").

#[path = "../conformance/python/source_hash.rs"]
mod source_hash;

use std::path::{Path, PathBuf};
use std::process::Command;

const INSTALL: &str = "python3 -m pip install ./conformance/python pytest==9.2.0 ml_dtypes==0.7.0 pytest-xdist==3.8.0";
const INSTALL_TORCH: &str = "bash .ci/torch-venv (a venv with the pinned torch over python3), or \
     python3 -m pip install \"./conformance/python[torch]\" pytest==9.2.0 expecttest";

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

/// Pythons that may have torch: `$TRNCONF_TORCH_PYTHON`, the package candidates, then the venvs
/// `.ci/torch-venv` makes under the tools cache (`$TRNCONF_TOOLS`, default ~/.cache/trnconf-tools).
fn torch_candidates(root: &Path) -> Vec<String> {
    let mut c = Vec::new();
    if let Ok(p) = std::env::var("TRNCONF_TORCH_PYTHON") {
        c.push(p);
    }
    c.extend(candidates(root));
    let tools = std::env::var_os("TRNCONF_TOOLS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/trnconf-tools")));
    if let Some(dir) = tools.and_then(|t| std::fs::read_dir(t).ok()) {
        let mut venvs: Vec<PathBuf> = dir
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("torch-venv-"))
                    && p.join(".complete").is_file()
            })
            .map(|p| p.join("bin/python"))
            .collect();
        venvs.sort();
        c.extend(venvs.into_iter().rev().map(|p| p.to_string_lossy().into_owned()));
    }
    c
}

/// The installed trnsim's source hash, from the first candidate Python with every module the
/// tests need.
fn find_python(root: &Path) -> Option<(String, String)> {
    find_python_with(candidates(root), root, "")
}

fn find_python_with(cands: Vec<String>, root: &Path, extra: &str) -> Option<(String, String)> {
    cands.into_iter().find_map(|py| {
        let out = Command::new(&py)
            .args([
                "-c",
                &format!("import numpy, ml_dtypes, pytest, trnsim{extra}; print(trnsim._native.SOURCE_HASH)"),
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

fn torch_unavailable(why: String) {
    let msg = format!(
        "{why}\n  install: {INSTALL_TORCH}\n  (or set TRNCONF_TORCH_PYTHON to a Python with torch and this tree's trnsim)"
    );
    if std::env::var_os("CI").is_some() {
        panic!("torch_device_tests: {msg}");
    }
    eprintln!("\n!!!!! SKIPPED torch_device_tests: {msg} !!!!!\n");
}

/// pytest-xdist's workers when `python` has it (`.ci/run` installs it): `-n N` with N the CPUs
/// this process may use, whole files to a worker (`--dist loadfile`: a file's tests run in order,
/// in one process, as without workers). Most of the device's tests are one Python thread, so
/// without workers the suite leaves the other cores idle. No xdist: one process, as before.
fn xdist_args(root: &Path, python: &str) -> Vec<String> {
    let has = Command::new(python)
        .args(["-c", "import xdist"])
        .current_dir(root)
        .output()
        .is_ok_and(|o| o.status.success());
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if has && n > 1 {
        vec!["-n".into(), n.to_string(), "--dist".into(), "loadfile".into()]
    } else {
        Vec::new()
    }
}

/// Runs pytest on `dir` with `python`; fails on any failure, loud on "no tests collected".
fn run_pytest(root: &Path, python: &str, dir: &str, what: &str) {
    let out = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"])
        .args(xdist_args(root, python))
        .arg(dir)
        .current_dir(root)
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
        Some(5) => eprintln!("!!!!! {what}: pytest collected no tests !!!!!"),
        code => panic!("pytest failed ({code:?}) with {python}:\n{text}"),
    }
}

/// The PyTorch device's tests (`conformance/python/tests_torch`, not the OpInfo sweep, which
/// instantiates its tests only when asked), with a Python that has torch and this tree's trnsim.
#[test]
fn torch_device_tests() {
    let root = repo_root();
    let cands = torch_candidates(&root);
    let Some((python, installed)) = find_python_with(cands.clone(), &root, ", torch, expecttest") else {
        torch_unavailable(format!(
            "no Python among {cands:?} imports torch, expecttest, trnsim, pytest, numpy and ml_dtypes"
        ));
        return;
    };
    let tree = source_hash::source_hash(&root);
    if installed != tree {
        torch_unavailable(format!(
            "the trnsim {python} imports was built from other sources (hash {installed}, this tree {tree})"
        ));
        return;
    }
    run_pytest(&root, &python, "conformance/python/tests_torch", "torch_device_tests");
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
    run_pytest(&root, &python, "conformance/python/tests", "python_package_tests");
}
