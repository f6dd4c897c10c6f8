//! The process executor (docs/executor-protocol.md) against the Python executor
//! conformance/pyexec/trnconf_executor.py: handshake, unsupported modes, timeouts, crashes and
//! restarts, fault classification, batch resume, and (when a Python with torch is found) the
//! torch mode on CPU.
//!
//! Protocol and fault tests use the `echo` PROTOCOL-TEST mode (returns the golden outputs): they
//! need only numpy + safetensors in Python, never torch. Python is found as `$TRNCONF_PYTHON`, then
//! the project's ./.venv/bin/python (golden/setup-venv.sh), then python3. Without numpy+safetensors the protocol tests fail in CI
//! (`CI` set; .ci/run installs them) and skip loudly elsewhere; the torch tests skip loudly
//! everywhere when no torch is found (torch is not installed in CI).

mod common;

use common::{TempDir, code, s, stderr, stdout, trnconf};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use trnconf::case::{GoldenIndex, IndexEntry, Value};
use trnconf::executor::process::{ProcessConfig, ProcessExecutor};
use trnconf::executor::{CaseExecutor, FailureKind};
use trnconf::expect::{Expectations, Status};
use trnconf::fixture::{CaseBuilder, write_golden};
use trnconf::runner::{self, CaseResult};
use trnconf::tensor::TorchDType::F32;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("pyexec/trnconf_executor.py")
}

fn candidates() -> Vec<String> {
    trnconf::python_candidates()
}

/// The first candidate Python that imports `modules`.
fn python_with(modules: &str) -> Option<String> {
    candidates().into_iter().find(|py| {
        Command::new(py)
            .args(["-c", &format!("import {modules}")])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// A Python for the protocol tests (numpy + safetensors). In CI its absence is a failure.
fn protocol_python(test: &str) -> Option<String> {
    let py = python_with("numpy, safetensors");
    if py.is_none() {
        let msg = format!(
            "no Python with numpy+safetensors among {:?} (set TRNCONF_PYTHON; `python3 -m pip install numpy safetensors`)",
            candidates()
        );
        if std::env::var_os("CI").is_some() {
            panic!("{test}: {msg}");
        }
        eprintln!("SKIPPED {test}: {msg}");
    }
    py
}

/// A Python with torch, or a loud skip (even in CI: torch is ~5 GB and not installed there).
fn torch_python(test: &str) -> Option<String> {
    let py = python_with("torch, numpy, safetensors");
    if py.is_none() {
        eprintln!(
            "SKIPPED {test}: no Python with torch+numpy+safetensors among {:?} (set TRNCONF_PYTHON to one)",
            candidates()
        );
    }
    py
}

fn command(py: &str, extra: &str) -> String {
    format!("{py} {} {extra}", s(&script()))
}

/// Three right `relu` cases: hand_0, hand_1, hand_2.
fn relu_cases(n: usize) -> Vec<CaseBuilder> {
    (0..n)
        .map(|i| {
            let x = i as f64;
            CaseBuilder::new("relu", "f32", "hand", i)
                .input(F32, &[4], &[-1.0, 0.5 + x, 2.0, -3.0 - x])
                .output(F32, &[4], &[0.0, 0.5 + x, 2.0, 0.0])
        })
        .collect()
}

fn executor(py: &str, extra: &str, mode: &str, timeout_s: f64) -> ProcessExecutor {
    let mut c = ProcessConfig::new(command(py, extra), mode);
    c.timeout = Duration::from_secs_f64(timeout_s);
    c.hello_timeout = Duration::from_secs(120);
    ProcessExecutor::new(c).expect("executor")
}

fn run_all(dir: &Path, cases: &[CaseBuilder], ex: &dyn trnconf::backend::Backend) -> Vec<CaseResult> {
    write_golden(dir, cases);
    let index = GoldenIndex::load(dir).unwrap();
    let entries: Vec<&IndexEntry> = index.cases.iter().collect();
    // One thread: cases reach the executor in id order (restart counts are then exact).
    runner::run_cases(&index, &entries, &Expectations::none(), ex, 1)
}

fn by_id<'a>(r: &'a [CaseResult], suffix: &str) -> &'a CaseResult {
    r.iter()
        .find(|c| c.id.ends_with(suffix))
        .unwrap_or_else(|| panic!("no case {suffix}"))
}

#[test]
fn handshake_reports_sdk_modes_and_dtypes() {
    let Some(py) = protocol_python("handshake_reports_sdk_modes_and_dtypes") else {
        return;
    };
    let ex = executor(&py, "--device cpu", "echo", 30.0);
    let hello = ex.hello().expect("hello");
    assert_eq!(hello["type"], "hello");
    assert_eq!(hello["protocol"], 1);
    for m in ["torch", "torch_neuronx", "torch_xla", "neuronxcc", "nki", "numpy"] {
        let v = &hello["sdk"][m];
        assert!(v.is_null() || v.is_string(), "sdk.{m} = {v}");
    }
    assert!(hello["sdk"]["numpy"].is_string(), "numpy imports: {hello}");
    assert!(ProcessExecutor::mode_available(&hello, "echo").is_ok());
    assert_eq!(hello["modes"]["echo"]["protocol_test_only"], true);
    // torch availability is exactly whether torch imports in that Python.
    let has_torch = Command::new(&py)
        .args(["-c", "import torch"])
        .output()
        .unwrap()
        .status
        .success();
    assert_eq!(hello["sdk"]["torch"].is_string(), has_torch);
    assert_eq!(
        ProcessExecutor::mode_available(&hello, "torch").is_ok(),
        has_torch,
        "{hello}"
    );
    if !has_torch {
        let why = ProcessExecutor::mode_available(&hello, "torch").unwrap_err();
        assert!(why.contains("torch"), "{why}");
    }
    assert!(hello["dtypes"].as_array().unwrap().iter().any(|d| d == "bf16"));
    assert!(ProcessExecutor::mode_available(&hello, "nope").is_err());
    assert_eq!(ex.spawned(), 1);
}

#[test]
fn echo_mode_passes_through_the_shared_comparison() {
    let Some(py) = protocol_python("echo_mode_passes_through_the_shared_comparison") else {
        return;
    };
    let dir = TempDir::new("proc-echo");
    // A wrong golden is still "right" in echo mode (it returns the golden): that is why echo is
    // for protocol tests only. A non-tensor output travels as a value.
    let scalar = CaseBuilder::new("_local_scalar_dense", "f32", "hand", 0)
        .input(F32, &[], &[2.5])
        .output_value(Value::Float(trnconf::case::JsonFloat(2.5)));
    let mut cases = relu_cases(2);
    cases.push(scalar);
    let ex = executor(&py, "", "echo", 30.0);
    let r = run_all(dir.path(), &cases, &ex);
    for c in &r {
        assert_eq!(c.status, Status::Pass, "{}: {}", c.id, c.message);
    }
    assert!(ex.name().contains("protocol test"), "{}", ex.name());
}

#[test]
fn unsupported_mode_skips_with_the_reason() {
    let Some(py) = protocol_python("unsupported_mode_skips_with_the_reason") else {
        return;
    };
    let dir = TempDir::new("proc-unsupported");
    // nki without a kernel in the request (a whole-case request, as torch mode sends):
    // unsupported, and says why.
    write_golden(dir.path(), &relu_cases(1));
    let index = GoldenIndex::load(dir.path()).unwrap();
    let case = trnconf::case::Case::load_entry(dir.path(), &index.cases[0]).unwrap();
    let ex = executor(&py, "", "nki", 30.0);
    let e = ex.run_one(&case).unwrap_err();
    assert_eq!(e.kind, FailureKind::Unsupported, "{e}");
    assert!(e.message.contains("kernel"), "{e}");
    // An unknown mode too; the executor keeps running (no restart).
    let ex = executor(&py, "", "bogus", 30.0);
    let r = run_all(dir.path(), &relu_cases(2), &ex);
    assert!(
        r.iter()
            .all(|c| c.status == Status::Skip && c.message.contains("unknown mode")),
        "{r:?}"
    );
    assert_eq!(ex.spawned(), 1);
    // torch in a Python without torch: unsupported with the import error, never a silent failure.
    if let Some(bare) = candidates().into_iter().find(|p| {
        let ok = |m: &str| {
            Command::new(p)
                .args(["-c", &format!("import {m}")])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        ok("numpy, safetensors") && !ok("torch")
    }) {
        let ex = executor(&bare, "", "torch", 30.0);
        let r = run_all(dir.path(), &relu_cases(1), &ex);
        assert_eq!(r[0].status, Status::Skip);
        assert!(r[0].message.contains("torch is not importable"), "{}", r[0].message);
    }
}

#[test]
fn hang_is_killed_classified_timeout_and_the_run_goes_on() {
    let Some(py) = protocol_python("hang_is_killed_classified_timeout_and_the_run_goes_on") else {
        return;
    };
    let dir = TempDir::new("proc-hang");
    let ex = executor(&py, "--inject 'hang:*::hand_1'", "echo", 2.0);
    let start = Instant::now();
    let r = run_all(dir.path(), &relu_cases(3), &ex);
    assert!(start.elapsed() < Duration::from_secs(60), "took {:?}", start.elapsed());
    let hung = by_id(&r, "hand_1");
    assert_eq!(hung.status, Status::Error, "{}", hung.message);
    assert!(
        hung.message.contains("timeout") && hung.message.contains("killed"),
        "{}",
        hung.message
    );
    assert_eq!(by_id(&r, "hand_0").status, Status::Pass);
    assert_eq!(
        by_id(&r, "hand_2").status,
        Status::Pass,
        "{}",
        by_id(&r, "hand_2").message
    );
    assert!(ex.spawned() >= 2, "restarted after the timeout");
}

#[test]
fn crash_is_classified_and_the_executor_restarts() {
    let Some(py) = protocol_python("crash_is_classified_and_the_executor_restarts") else {
        return;
    };
    let dir = TempDir::new("proc-crash");
    let ex = executor(
        &py,
        "--inject 'crash:*::hand_0' --inject 'crash:*::hand_2'",
        "echo",
        30.0,
    );
    let r = run_all(dir.path(), &relu_cases(4), &ex);
    for (i, want) in [
        (0, Status::Error),
        (1, Status::Pass),
        (2, Status::Error),
        (3, Status::Pass),
    ] {
        let c = by_id(&r, &format!("hand_{i}"));
        assert_eq!(c.status, want, "{}: {}", c.id, c.message);
        if want == Status::Error {
            assert!(c.message.contains("crash:"), "{}", c.message);
            assert!(
                c.message.contains("injected crash"),
                "stderr tail in the message: {}",
                c.message
            );
        }
    }
    assert_eq!(ex.spawned(), 3, "one start plus one restart per crash");
}

#[test]
fn every_injected_fault_is_classified() {
    let Some(py) = protocol_python("every_injected_fault_is_classified") else {
        return;
    };
    let dir = TempDir::new("proc-faults");
    let faults = ["crash", "hang", "nan", "perturb", "wrong-shape", "wrong-dtype", "slow"];
    let inject: Vec<String> = faults
        .iter()
        .enumerate()
        .map(|(i, f)| format!("--inject '{f}:*::hand_{i}'"))
        .collect();
    let ex = executor(&py, &format!("{} --slow-seconds 0.3", inject.join(" ")), "echo", 3.0);
    let r = run_all(dir.path(), &relu_cases(faults.len() + 1), &ex);
    let expect: [(&str, Status, &str); 8] = [
        ("crash", Status::Error, "crash:"),
        ("hang", Status::Error, "timeout:"),
        ("nan", Status::Fail, ""),
        ("perturb", Status::Fail, ""),
        ("wrong-shape", Status::Fail, "shape"),
        ("wrong-dtype", Status::Fail, "dtype"),
        ("slow", Status::Pass, ""),
        ("none", Status::Pass, ""),
    ];
    for (i, (fault, status, mention)) in expect.iter().enumerate() {
        let c = by_id(&r, &format!("hand_{i}"));
        assert_eq!(c.status, *status, "{fault}: {}", c.message);
        assert!(c.message.to_lowercase().contains(mention), "{fault}: {}", c.message);
    }
    assert_eq!(r.len(), 8, "the run completed");
}

#[test]
fn failure_kinds_name_the_protocol_statuses() {
    let names: Vec<&str> = [
        FailureKind::CompileError,
        FailureKind::RuntimeError,
        FailureKind::Unsupported,
        FailureKind::Timeout,
        FailureKind::Crash,
    ]
    .iter()
    .map(|k| k.name())
    .collect();
    assert_eq!(
        names,
        ["compile_error", "runtime_error", "unsupported", "timeout", "crash"]
    );
    assert_eq!(ProcessExecutor::parse_spec("process: python x.py"), Some("python x.py"));
    assert_eq!(ProcessExecutor::parse_spec("process:"), None);
    assert_eq!(ProcessExecutor::parse_spec("sim"), None);
}

#[test]
fn a_command_that_is_not_an_executor_is_a_crash_per_case() {
    let dir = TempDir::new("proc-notexec");
    let mut c = ProcessConfig::new("echo not-json; exit 3", "echo");
    c.hello_timeout = Duration::from_secs(10);
    let ex = ProcessExecutor::new(c).unwrap();
    assert!(ex.hello().unwrap_err().contains("handshake"));
    let r = run_all(dir.path(), &relu_cases(2), &ex);
    assert!(
        r.iter()
            .all(|c| c.status == Status::Error && c.message.contains("did not start")),
        "{r:?}"
    );
}

/// Batch: manifest in, results out; a second run skips the cases already finished.
#[test]
fn batch_resumes_after_a_crash() {
    let Some(py) = protocol_python("batch_resumes_after_a_crash") else {
        return;
    };
    let dir = TempDir::new("proc-batch");
    let index = write_golden(dir.path(), &relu_cases(4));
    let manifest = dir.path().join("manifest.jsonl");
    let results = dir.path().join("results.jsonl");
    let lines: Vec<String> = index
        .iter()
        .map(|e| {
            serde_json::json!({
                "case_id": e.id, "mode": "echo", "case_file": dir.path().join(&e.file),
                "output": dir.path().join(format!("{}.out.safetensors", e.id.replace("::", "__"))),
                "timeout_s": 2.0,
            })
            .to_string()
        })
        .collect();
    std::fs::write(&manifest, lines.join("\n") + "\n").unwrap();
    let batch = |extra: &[&str]| {
        Command::new(&py)
            .arg(script())
            .args(["batch", "--manifest", s(&manifest), "--results", s(&results)])
            .args(extra)
            .output()
            .unwrap()
    };
    let read = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(&results)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    // hand_1 hangs (SIGALRM timeout inside the batch), hand_2 crashes the batch process.
    let o = batch(&["--inject", "hang:*::hand_1", "--inject", "crash:*::hand_2"]);
    assert!(!o.status.success());
    let first = read();
    assert_eq!(first.len(), 2, "{first:?}");
    assert_eq!(first[0]["status"], "ok");
    assert_eq!(first[1]["status"], "timeout");
    // Resume: the two finished cases are skipped, the rest run.
    let o = batch(&[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("2 run, 2 already"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let all = read();
    assert_eq!(all.len(), 4);
    assert_eq!(&all[..2], &first[..]);
    let ids: Vec<&str> = all.iter().map(|r| r["case_id"].as_str().unwrap()).collect();
    assert_eq!(ids, index.iter().map(|e| e.id.as_str()).collect::<Vec<_>>());
    assert!(
        all[2..]
            .iter()
            .all(|r| r["status"] == "ok" && Path::new(r["outputs"].as_str().unwrap()).is_file())
    );
    // A third run does nothing.
    let o = batch(&[]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("0 run, 4 already"));
    assert_eq!(read().len(), 4);
}

#[test]
fn cli_runs_a_process_executor() {
    let Some(py) = protocol_python("cli_runs_a_process_executor") else {
        return;
    };
    let dir = TempDir::new("proc-cli");
    write_golden(dir.path(), &relu_cases(3));
    let none = common::no_expectations(dir.path());
    let json = dir.path().join("r.json");
    let spec = format!("process:{}", command(&py, "--inject 'crash:*::hand_1'"));
    let o = trnconf(&[
        "run",
        "--golden",
        s(dir.path()),
        "--expectations",
        s(&none),
        "--executor",
        &spec,
        "--mode",
        "echo",
        "--timeout",
        "20",
        "--json",
        s(&json),
        "-j",
        "1",
    ]);
    assert_eq!(code(&o), 1, "stdout: {}\nstderr: {}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("PROTOCOL TEST"), "{}", stderr(&o));
    let v = common::read_json(&json);
    let text = v.to_string();
    assert!(text.contains("process-echo"), "{text}");
    assert!(
        stdout(&o).contains("2 passed") && stdout(&o).contains("1 errors"),
        "{}",
        stdout(&o)
    );
    // Bad specs are bad input.
    let o = trnconf(&["run", "--golden", s(dir.path()), "--executor", "hw"]);
    common::assert_bad_input(&o, "process:CMD");
    let o = trnconf(&[
        "run",
        "--golden",
        s(dir.path()),
        "--executor",
        "process:/nonexistent/executor",
    ]);
    common::assert_bad_input(&o, "handshake");
}

/// torch mode on CPU: the ATen call rebuilt from the metadata (args, kwargs) reproduces the goldens.
#[test]
fn torch_mode_on_cpu() {
    let Some(py) = torch_python("torch_mode_on_cpu") else {
        return;
    };
    let dir = TempDir::new("proc-torch");
    let add = CaseBuilder::new("add.Tensor", "f32", "hand", 0)
        .input(F32, &[3], &[1.0, 2.0, 3.0])
        .input(F32, &[3], &[0.5, 0.25, -1.0])
        .kwarg("alpha", Value::Int(2))
        .output(F32, &[3], &[2.0, 2.5, 1.0]);
    let wrong = CaseBuilder::new("add.Tensor", "f32", "hand", 1)
        .input(F32, &[1], &[1.0])
        .input(F32, &[1], &[1.0])
        .output(F32, &[1], &[3.0]);
    let mut cases = relu_cases(2);
    cases.push(add);
    cases.push(wrong);
    let ex = executor(&py, "--device cpu", "torch", 120.0);
    let r = run_all(dir.path(), &cases, &ex);
    assert_eq!(
        by_id(&r, "add.Tensor::f32::hand_0").status,
        Status::Pass,
        "{}",
        by_id(&r, "add.Tensor::f32::hand_0").message
    );
    assert_eq!(
        by_id(&r, "add.Tensor::f32::hand_1").status,
        Status::Fail,
        "a wrong golden fails: torch really ran"
    );
    assert_eq!(by_id(&r, "relu::f32::hand_0").status, Status::Pass);
    assert_eq!(by_id(&r, "relu::f32::hand_1").status, Status::Pass);
}

/// The whole committed suite through CPU torch, with the torch mode's expectations
/// (conformance/expectations-torch.toml): the executor rebuilds every call as the generator made
/// it (layouts, pins), so CPU torch reproduces its own goldens.
#[test]
fn torch_mode_committed_suite() {
    let Some(py) = torch_python("torch_mode_committed_suite") else {
        return;
    };
    let index = GoldenIndex::load(&trnconf::default_golden_dir()).unwrap();
    let entries: Vec<&IndexEntry> = index.cases.iter().collect();
    let expectations = Expectations::load(&trnconf::expect::default_path_for("process:x", "torch")).unwrap();
    let ex = executor(&py, "--device cpu", "torch", 120.0);
    let r = runner::run_cases(&index, &entries, &expectations, &ex, 2);
    let bad: Vec<String> = r
        .iter()
        .filter(|c| !c.status.is_ok())
        .map(|c| format!("{}: {:?} {}", c.id, c.status, c.message))
        .collect();
    eprintln!(
        "torch CPU: {}/{} committed cases as expected",
        r.len() - bad.len(),
        r.len()
    );
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The committed cases an nki-mode test runs: the first case of every op, and every case of a
/// few ops that exercise many instruction kinds (matmul tiling, sort's match_replace8, scans,
/// reductions, indirect DMA). About 230 cases: well under a minute on 2 cores.
fn representative(index: &GoldenIndex) -> Vec<&IndexEntry> {
    let deep = ["mm", "sort", "cumsum", "_softmax", "index_select", "avg_pool2d"];
    let mut seen = std::collections::BTreeSet::new();
    index
        .cases
        .iter()
        .filter(|c| deep.contains(&c.op.as_str()) || seen.insert(c.op.clone()))
        .collect()
}

/// nki mode off-hardware: every lowered case's emitted kernel runs on the numpy stand-in, is
/// compared with the golden by the same code as the simulator's (with the simulator's
/// expectations), and has the simulator's bits. Needs only numpy + safetensors (CI has them).
#[test]
fn nki_mode_through_the_standin_matches_the_simulator() {
    let Some(py) = protocol_python("nki_mode_through_the_standin_matches_the_simulator") else {
        return;
    };
    let index = GoldenIndex::load(&trnconf::default_golden_dir()).unwrap();
    let entries = representative(&index);
    let expectations = Expectations::load(&trnconf::expect::default_path_for("process:x", "nki")).unwrap();
    let ex = executor(&py, "", "nki", 120.0);
    let r = runner::run_cases(&index, &entries, &expectations, &ex, 2);
    let bad: Vec<String> = r
        .iter()
        .filter(|c| !c.status.is_ok())
        .map(|c| format!("{}: {:?} {}", c.id, c.status, c.message))
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
    let ran: Vec<&CaseResult> = r.iter().filter(|c| !c.backends.is_empty()).collect();
    assert!(ran.len() > 150, "only {} of {} cases ran a kernel", ran.len(), r.len());
    for c in &ran {
        let names: Vec<&str> = c.backends.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["sim", "nki_standin"], "{}", c.id);
        assert!(
            c.backends.iter().all(|b| b.same_bits_as_sim),
            "{}: {:?}",
            c.id,
            c.backends
        );
    }
    eprintln!(
        "nki stand-in: {} cases ran a kernel, {} as expected in all",
        ran.len(),
        r.len()
    );
}

/// The three-way report: an executor that answers with two backends (as on trn1: `hardware`
/// and `simulate_kernel`) gets each compared with the golden and with `sim`, the case judged by
/// the first, and `trnconf diff` shows the table. The executor here is the real one with its
/// nki backends replaced: `hardware` is the stand-in's outputs perturbed, `simulate_kernel` the
/// stand-in's outputs.
#[test]
fn nki_three_way_report() {
    let Some(py) = protocol_python("nki_three_way_report") else {
        return;
    };
    let dir = TempDir::new("proc-three-way");
    let fake = dir.path().join("two_backends.py");
    std::fs::write(
        &fake,
        format!(
            r#"import sys
sys.path.insert(0, {pyexec:?})
import trnconf_executor as te
standin = te.run_standin
def two(req, info):
    out = standin(req["kernel"], req["device_inputs"], req["output"])
    return {{"hardware": te.corrupt(out, "perturb"), "simulate_kernel": out}}
te.run_nki = two
real_modes = te.Executor._modes
def modes(self):
    m = real_modes(self)
    m["nki"]["backends"] = ["hardware", "simulate_kernel"]
    return m
te.Executor._modes = modes
sys.exit(te.main(sys.argv[1:]))
"#,
            pyexec = s(script().parent().unwrap())
        ),
    )
    .unwrap();
    write_golden(dir.path(), &relu_cases(2));
    let json = dir.path().join("r.json");
    let spec = format!("process:{py} {}", s(&fake));
    let none = common::no_expectations(dir.path());
    let art = dir.path().join("art");
    let o = trnconf(&[
        "run",
        "--golden",
        s(dir.path()),
        "--expectations",
        s(&none),
        "--executor",
        &spec,
        "--mode",
        "nki",
        "--json",
        s(&json),
        "-j",
        "1",
        "--artifacts",
        s(&art),
    ]);
    assert_eq!(
        code(&o),
        1,
        "hardware is perturbed: the cases fail\n{}\n{}",
        stdout(&o),
        stderr(&o)
    );
    let v = common::read_json(&json);
    let case = &v["cases"][0];
    let backends: Vec<(String, String, bool)> = case["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap().into(),
                b["status"].as_str().unwrap().into(),
                b["same_bits_as_sim"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        backends,
        [
            ("sim".into(), "pass".into(), true),
            ("hardware".into(), "fail".into(), false),
            ("simulate_kernel".into(), "pass".into(), true)
        ],
        "{case}"
    );
    assert_eq!(
        case["status"], "fail",
        "the case is judged by the first backend (hardware)"
    );
    // --artifacts keeps what each request used and produced: kernel, inputs, every backend.
    let kept: Vec<String> = std::fs::read_dir(&art)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for suffix in [
        ".kernel.py",
        ".in.safetensors",
        ".out.safetensors",
        ".out.safetensors.simulate_kernel.safetensors",
    ] {
        assert_eq!(
            kept.iter().filter(|f| f.ends_with(suffix)).count(),
            2,
            "{suffix}: {kept:?}"
        );
    }
    let o = trnconf(&["diff", s(&json), s(&json)]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("backends (sim vs hardware vs simulate_kernel): 2 cases"),
        "{text}"
    );
    assert!(
        text.contains("hardware         pass 0/2  same bits as sim 0/2"),
        "{text}"
    );
    assert!(text.contains("cases where the backends disagree: 2"), "{text}");
}
