//! Whole models (`trnconf model run`, docs/models.md): every committed model under golden/models
//! runs node by node and passes; the chained run keeps its intermediates on the device; every
//! node that ran has an estimated device time; a model with a call form the backend lacks is
//! reported, not passed; and the command line writes its reports.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use trnconf::executor::SimExecutor;
use trnconf::model::{self, Model, RunOptions};
use trnsim::TargetName;

fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../golden/models")
}

/// Every directory under golden/models with a graph.json.
fn committed() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(models_dir())
        .expect("golden/models")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("graph.json").is_file())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn the_committed_set_is_there_and_within_its_budget() {
    let names: Vec<String> = committed()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "gpt2",
        "bert",
        "llama_block",
        "resnet18",
        "mobilenet_v3_small",
        "vit",
        "bert_train",
        "vit_train",
        "gpt2_block",
        "resnet18_224",
    ] {
        assert!(names.iter().any(|n| n == want), "golden/models/{want} is missing");
    }
    let mut total = 0u64;
    for d in committed() {
        for f in std::fs::read_dir(&d).unwrap().filter_map(|e| e.ok()) {
            let len = f.metadata().unwrap().len();
            assert!(len <= 2 << 20, "{} is over 2 MB", f.path().display());
            total += len;
        }
    }
    assert!(total <= 30 << 20, "model data is {total} bytes, the budget is 30 MB");
}

/// Runs one committed model and checks what docs/models.md promises of a passing run.
fn check_model(dir: &Path) {
    let m = Model::load(dir).unwrap_or_else(|e| panic!("{e}"));
    let exec = SimExecutor::new(TargetName::Trn1);
    let r = model::run_model(&m, &exec, &|_, _| {});
    let name = &r.model;
    assert_eq!(r.nodes.len(), m.doc.nodes.len());
    let bad: Vec<String> = r
        .nodes
        .iter()
        .filter(|n| n.status != "pass" && n.status != "skipped")
        .map(|n| format!("{} {} {}: {}", n.name, n.op, n.status, n.message))
        .collect();
    assert!(bad.is_empty(), "{name}: nodes that do not pass:\n{}", bad.join("\n"));
    assert!(r.passed && r.first_failing_node.is_none(), "{name}");
    assert!(r.unsupported.is_empty(), "{name}: {:?}", r.unsupported);
    // End-to-end error of every model output (a training step: the loss and every gradient).
    assert_eq!(
        r.end_to_end.len(),
        m.doc.outputs.len(),
        "{name}: end-to-end error per output"
    );
    // Every node that computed ran on session tensors and has a device time.
    assert!(r.host_round_trips.is_empty(), "{name}: {:?}", r.host_round_trips);
    for n in r.nodes.iter().filter(|n| n.status == "pass") {
        assert!(n.chained.is_some(), "{name}: {} has no chained error", n.name);
        assert!(
            n.est_us.is_some_and(|t| t > 0.0),
            "{name}: {} has no estimated device time",
            n.name
        );
    }
    let sum: f64 = r.nodes.iter().filter_map(|n| n.est_us).sum();
    assert!(
        r.est_us > 0.0 && (r.est_us - sum).abs() <= 1e-9 * sum,
        "{name}: model time is the nodes' sum"
    );
    // Nothing was put on the device but the leaves: every intermediate came from a program run.
    // (A tensor bound to two inputs of one program, `x * x`, is a device copy, not a transfer.)
    let t = r.transfers.as_ref().expect("the simulator keeps a session");
    let leaves: std::collections::BTreeSet<&String> = m.doc.inputs.iter().chain(m.doc.weights.keys()).collect();
    let leaf_bytes: u64 = leaves.iter().map(|l| device_bytes(&m, l)).sum();
    assert_eq!(
        t.host_to_device_bytes, leaf_bytes,
        "{name}: bytes put besides the leaves"
    );
    assert_eq!(
        t.runs as usize,
        r.nodes.iter().filter(|n| n.status == "pass").count(),
        "{name}: one session run per computing node"
    );
}

/// Bytes of a graph value on the device (int64 lives as int32 there).
fn device_bytes(m: &Model, name: &str) -> u64 {
    let v = &m.doc.values[name];
    let elem = match v.dtype.device_dtype() {
        Some(d) => d.size() as u64,
        None if v.dtype == trnconf::tensor::TorchDType::C64 => 8,
        None => 4,
    };
    elem * v.shape.iter().product::<usize>() as u64
}

// One test per model, so they run in parallel and a failure names its model.
macro_rules! model_tests {
    ($($test:ident => $dir:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                check_model(&models_dir().join($dir));
            }
        )*
    };
}

model_tests! {
    gpt2_runs_and_passes => "gpt2",
    bert_runs_and_passes => "bert",
    llama_block_runs_and_passes => "llama_block",
    resnet18_runs_and_passes => "resnet18",
    mobilenet_v3_small_runs_and_passes => "mobilenet_v3_small",
    vit_runs_and_passes => "vit",
    bert_train_runs_and_passes => "bert_train",
    vit_train_runs_and_passes => "vit_train",
    gpt2_block_runs_and_passes => "gpt2_block",
    resnet18_224_runs_and_passes => "resnet18_224",
}

#[test]
fn every_committed_model_has_a_test() {
    let src = include_str!("models.rs");
    for d in committed() {
        let name = d.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            src.contains(&format!("=> \"{name}\"")),
            "golden/models/{name} has no test in conformance/tests/models.rs"
        );
    }
}

/// The chained run's data stays on the device: what is put is the leaves, once; a forward reads
/// back only the model's outputs.
#[test]
fn the_forward_keeps_intermediates_in_simulated_hbm() {
    let m = Model::load(&models_dir().join("llama_block")).unwrap();
    let exec = SimExecutor::new(TargetName::Trn1);
    let f = model::run_forward(&m, &exec).unwrap();
    let t = f.transfers.as_ref().unwrap();
    let output_bytes: u64 = m.doc.outputs.iter().map(|o| device_bytes(&m, o)).sum();
    assert_eq!(t.device_to_host_bytes, output_bytes, "only the outputs are read back");
    let r = model::run_model_with(
        &m,
        &exec,
        RunOptions {
            isolated: false,
            compare_every_node: false,
        },
        &|_, _| {},
    );
    // Nothing but the leaves was put: every intermediate came from a program run.
    assert_eq!(
        t.host_to_device_bytes,
        r.transfers.as_ref().unwrap().host_to_device_bytes
    );
    assert!(!r.passed, "a run that judged nothing never passes");
    assert!(r.nodes.iter().all(|n| n.status == "not judged"));
    assert_eq!(f.end_to_end.len(), m.doc.outputs.len());
    assert!(f.end_to_end.iter().all(|(_, s)| s.passed));
    let est: f64 = f.nodes.iter().filter_map(|n| n.2).sum();
    assert!((f.est_us - est).abs() <= 1e-9 * est && est > 0.0);
    // The same programs run in the judged run: the same device time.
    let full = model::run_model(&m, &exec, &|_, _| {});
    assert!((full.est_us - f.est_us).abs() <= 1e-9 * f.est_us);
}

/// A graph with a call form the backend does not lower: the run names it and fails.
#[test]
fn an_unsupported_call_form_is_listed_and_fails_the_run() {
    let dir = TempDir::new("model-unsupported");
    let src = models_dir().join("gpt2");
    for f in std::fs::read_dir(&src).unwrap().filter_map(|e| e.ok()) {
        std::fs::copy(f.path(), dir.path().join(f.file_name())).unwrap();
    }
    let gpath = dir.path().join("graph.json");
    let mut doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&gpath).unwrap()).unwrap();
    let nodes = doc["nodes"].as_array_mut().unwrap();
    let i = nodes.iter().position(|n| n["op"] == "tanh").expect("gpt2 has a tanh");
    let node_name = nodes[i]["name"].as_str().unwrap().to_string();
    nodes[i]["op"] = "not_an_aten_op".into();
    std::fs::write(&gpath, serde_json::to_string(&doc).unwrap()).unwrap();
    let m = Model::load(dir.path()).unwrap();
    let r = model::run_model(&m, &SimExecutor::new(TargetName::Trn1), &|_, _| {});
    assert!(!r.passed);
    assert_eq!(r.first_failing_node.as_deref(), Some(node_name.as_str()));
    assert_eq!(r.unsupported.len(), 1, "{:?}", r.unsupported);
    assert!(r.unsupported[0].contains("not_an_aten_op"));
    // The rest of the model still ran: later nodes take the reference of the missing value.
    assert!(
        r.nodes[i + 1..]
            .iter()
            .all(|n| n.status == "pass" || n.status == "skipped")
    );
    // The CLI's exit status follows.
    let o = trnconf(&["model", "run", s(dir.path())]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stdout(&o).contains("not_an_aten_op"), "{}", stdout(&o));
}

#[test]
fn the_cli_writes_json_html_and_junit_with_device_times() {
    let dir = TempDir::new("model-cli");
    let (json, html, junit) = (
        dir.path().join("r.json"),
        dir.path().join("r.html"),
        dir.path().join("r.xml"),
    );
    let model = models_dir().join("bert");
    let o = trnconf(&[
        "model",
        "run",
        s(&model),
        "--json",
        s(&json),
        "--html",
        s(&html),
        "--junit",
        s(&junit),
        "-v",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("estimated device time"), "{out}");
    assert!(out.contains("est µs"), "the per-node table has device times:\n{out}");
    let v = read_json(&json);
    assert!(v["est_us"].as_f64().unwrap() > 0.0);
    assert!(v["nodes"][0]["est_us"].as_f64().is_some());
    assert!(v["transfers"]["runs"].as_u64().unwrap() > 0);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains("est µs"));
    let xml = parse_xml(&std::fs::read_to_string(&junit).unwrap()).unwrap();
    let suite = xml.all("testsuite");
    assert_eq!(suite[0].all("testcase").len(), v["nodes"].as_array().unwrap().len());
}
