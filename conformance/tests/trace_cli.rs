//! `trnconf show CASE --trace FILE` writes a Chrome Trace Event / Perfetto file: valid against
//! the format (`trnsim::trace::validate_chrome_trace`), one named track per engine and DMA queue
//! that ran something, one slice per instruction with its operands; and `show` prints the
//! timeline summary and the critical path.

use std::process::Command;

#[test]
fn show_writes_a_valid_trace_and_prints_the_timeline() {
    let dir = std::env::temp_dir().join(format!("trnconf-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("t.json");
    let out = Command::new(env!("CARGO_BIN_EXE_trnconf"))
        .args(["show", "mm::bf16::stress_0", "--trace"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("estimated device time"), "{stdout}");
    assert!(stdout.contains("critical path:"), "{stdout}");
    let trace: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    trnsim::trace::validate_chrome_trace(&trace).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let slices: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    let tracks: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    // A bf16 matmul: TensorE, a PSUM eviction engine and several DMA queues.
    assert!(tracks.contains(&"tensor"), "{tracks:?}");
    assert!(tracks.iter().filter(|t| t.starts_with("dma")).count() > 1, "{tracks:?}");
    let matmuls = slices.iter().filter(|e| e["name"] == "nc_matmul").count();
    assert!(matmuls > 0);
    let mm = slices.iter().find(|e| e["name"] == "nc_matmul").unwrap();
    for operand in ["dst", "stationary", "moving"] {
        assert!(mm["args"]["operands"][operand].is_string(), "{mm}");
    }
    // Every instruction is one slice; the makespan is the last slice's end.
    let indices: std::collections::BTreeSet<u64> =
        slices.iter().map(|e| e["args"]["index"].as_u64().unwrap()).collect();
    assert_eq!(indices.len(), slices.len());
    assert_eq!(indices.iter().copied().max().unwrap() as usize + 1, slices.len());
    let end = slices
        .iter()
        .map(|e| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap())
        .fold(0.0, f64::max);
    let makespan_us = trace["otherData"]["makespan_ns"].as_f64().unwrap() / 1000.0;
    assert!(
        (end - makespan_us).abs() < 1e-6 * makespan_us.max(1.0),
        "{end} vs {makespan_us}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_validator_rejects_malformed_traces() {
    use serde_json::json;
    let v = trnsim::trace::validate_chrome_trace;
    assert!(v(&json!({})).is_err());
    assert!(v(&json!({"traceEvents": [{"name": "a", "ph": "X", "pid": 0, "tid": 1, "ts": 0.0}]})).is_err());
    let unnamed = json!({"traceEvents": [{"name": "a", "ph": "X", "pid": 0, "tid": 1, "ts": 0.0, "dur": 1.0}]});
    assert!(v(&unnamed).unwrap_err().contains("no thread_name"));
    let negative = json!({"traceEvents": [
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 1, "args": {"name": "t"}},
        {"name": "a", "ph": "X", "pid": 0, "tid": 1, "ts": -1.0, "dur": 1.0}]});
    assert!(v(&negative).is_err());
    let good = json!({"traceEvents": [
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 1, "args": {"name": "t"}},
        {"name": "a", "ph": "X", "pid": 0, "tid": 1, "ts": 0.5, "dur": 1.0}], "displayTimeUnit": "ns"});
    assert!(v(&good).is_ok());
}
