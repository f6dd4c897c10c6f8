//! `trnconf run --backend nki:MODULE`, end to end through the built binary: the example backend
//! module's kernels (conformance/python/examples/nki_backend_example.py) run golden cases through
//! the trnsim.nki front-end on the simulator; overloads the module lacks are `not-provided`; and a
//! deliberately wrong kernel swapped into the module makes its cases fail with the kernel's
//! file:line in the terminal, JSON and HTML reports.
//!
//! Python: `$TRNCONF_PYTHON`, else the workspace's `.venv`, else `python3` — the first that imports
//! the `trnsim` package (`pip install ./conformance/python`). Without it these tests skip loudly,
//! and fail when `CI` is set.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn example_module() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python/examples/nki_backend_example.py")
}

fn candidates() -> Vec<String> {
    let mut c = Vec::new();
    if let Ok(p) = std::env::var("TRNCONF_PYTHON") {
        c.push(p);
    }
    let venv = workspace().join(".venv/bin/python");
    if venv.is_file() {
        c.push(venv.display().to_string());
    }
    c.push("python3".into());
    c
}

/// A Python that imports the trnsim package with its NKI front-end, or a loud skip (a failure
/// under CI).
fn python(test: &str) -> Option<String> {
    let py = candidates().into_iter().find(|py| {
        Command::new(py)
            .args(["-c", "import trnsim, trnsim.nki, numpy, ml_dtypes"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if py.is_none() {
        let msg = format!(
            "no Python with the trnsim package among {:?} (pip install ./conformance/python; set TRNCONF_PYTHON)",
            candidates()
        );
        if std::env::var_os("CI").is_some() {
            panic!("{test}: {msg}");
        }
        eprintln!("SKIPPED {test}: {msg}");
    }
    py
}

fn run_backend(py: &str, module: &Path, args: &[&str]) -> Output {
    let spec = format!("nki:{}", module.display());
    let mut all = vec!["run", "--backend", spec.as_str(), "--jobs", "1"];
    all.extend_from_slice(args);
    Command::new(env!("CARGO_BIN_EXE_trnconf"))
        .args(&all)
        .env("TRNCONF_PYTHON", py)
        .output()
        .expect("trnconf runs")
}

/// The line of `def NAME` in a file (1-based).
fn def_line(path: &Path, name: &str) -> usize {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .position(|l| l.trim_start().starts_with(&format!("def {name}(")))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("no `def {name}` in {}", path.display()))
}

fn cases(v: &serde_json::Value) -> Vec<serde_json::Value> {
    v["cases"].as_array().cloned().unwrap_or_default()
}

#[test]
fn example_module_runs_its_overloads_and_reports_the_rest_not_provided() {
    let Some(py) = python("example_module_runs_its_overloads_and_reports_the_rest_not_provided") else {
        return;
    };
    let dir = TempDir::new("nki-backend-example");
    let json = dir.path().join("r.json");
    // One f32 hand case of every op: the module's overloads run, the rest are not provided.
    let o = run_backend(
        &py,
        &example_module(),
        &["--filter", "*::f32::hand_0", "--json", s(&json)],
    );
    let v = read_json(&json);
    let all = cases(&v);
    assert!(!all.is_empty(), "{}", stderr(&o));
    let line = def_line(&example_module(), "add_kernel");
    for c in &all {
        let op = c["op"].as_str().unwrap();
        let status = c["status"].as_str().unwrap();
        let provided = [
            "add.Tensor",
            "mul.Tensor",
            "exp",
            "relu",
            "gelu",
            "_softmax",
            "_log_softmax",
            "native_layer_norm",
            "mm",
            "bmm",
            "sum.dim_IntList",
            "amax",
        ]
        .contains(&op);
        if provided {
            assert_ne!(status, "not-provided", "{c}");
        } else {
            assert_eq!(status, "not-provided", "{c}");
            assert!(c["message"].as_str().unwrap().contains("not provided"), "{c}");
        }
        if op == "add.Tensor" {
            assert_eq!(status, "pass", "{c}");
            let msg = c["message"].as_str().unwrap();
            assert!(
                msg.contains(&format!("nki_backend_example.py:{line}")),
                "the kernel's file:line is in the report: {msg}"
            );
        }
    }
    assert!(v["summary"]["not_provided"].as_u64().unwrap() > 0, "{}", v["summary"]);
    assert!(
        stdout(&o).contains("not provided"),
        "the summary line counts them:\n{}",
        stdout(&o)
    );
}

#[test]
fn a_wrong_kernel_fails_its_cases_with_its_file_and_line_in_every_report() {
    let Some(py) = python("a_wrong_kernel_fails_its_cases_with_its_file_and_line_in_every_report") else {
        return;
    };
    let dir = TempDir::new("nki-backend-wrong");
    // The example module with add.Tensor's kernel swapped for one that subtracts.
    let module = dir.path().join("wrong_backend.py");
    std::fs::write(
        &module,
        format!(
            r#""""The example backend with a deliberately wrong add.Tensor kernel (a test fixture)."""
import importlib.util

import neuronxcc.nki.language as nl
from neuronxcc import nki

_spec = importlib.util.spec_from_file_location("nki_backend_example", {example:?})
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)


@nki.jit
def wrong_add_kernel(a, b, alpha, out_dtype):
    rows, cols = a.shape
    out = nl.ndarray((rows, cols), dtype=out_dtype, buffer=nl.shared_hbm)
    x = nl.load(a[0:rows, 0:cols])
    y = nl.load(b[0:rows, 0:cols])
    nl.store(out[0:rows, 0:cols], value=nl.subtract(x, y, dtype=out_dtype))
    return out


OVERLOADS = dict(example.OVERLOADS)
OVERLOADS["add.Tensor"] = (wrong_add_kernel, example.add_tensor)
"#,
            example = example_module().display().to_string()
        ),
    )
    .unwrap();
    let line = def_line(&module, "wrong_add_kernel");
    let here = format!("wrong_backend.py:{line}");
    let (json, html) = (dir.path().join("r.json"), dir.path().join("r.html"));
    let o = run_backend(
        &py,
        &module,
        &[
            "--filter",
            "add.Tensor::f32::hand_*",
            "--json",
            s(&json),
            "--html",
            s(&html),
        ],
    );
    assert_eq!(
        code(&o),
        1,
        "wrong results fail the run:\n{}\n{}",
        stdout(&o),
        stderr(&o)
    );
    let v = read_json(&json);
    let failed: Vec<_> = cases(&v).into_iter().filter(|c| c["status"] == "fail").collect();
    assert!(!failed.is_empty(), "{v}");
    for c in &failed {
        assert!(c["message"].as_str().unwrap().contains(&here), "JSON: {c}");
    }
    let term = stdout(&o);
    assert!(
        term.lines().any(|l| l.starts_with("FAIL") && l.contains(&here)),
        "terminal:\n{term}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains(&here), "the HTML report names {here}");
    // The correct kernel passes the same cases.
    let o = run_backend(&py, &example_module(), &["--filter", "add.Tensor::f32::hand_*"]);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
}

#[test]
fn a_module_that_does_not_load_is_bad_input() {
    let Some(py) = python("a_module_that_does_not_load_is_bad_input") else {
        return;
    };
    let dir = TempDir::new("nki-backend-broken");
    let module = dir.path().join("broken.py");
    std::fs::write(&module, "OVERLOADS = {'relu': 3}\n").unwrap();
    let o = run_backend(&py, &module, &["--filter", "relu::f32::hand_0"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("OVERLOADS"), "{}", stderr(&o));
}
