//! `trnconf run --json`: the results file has the documented format, and reads back (as the
//! `diff` and `--resume` readers see it).

mod common;

use common::*;

#[test]
fn json_results_have_the_documented_format() {
    let dir = TempDir::new("json");
    let golden = relu_golden(&dir.path().join("g"));
    let ex = no_expectations(dir.path());
    let p = dir.path().join("r.json");
    let o = trnconf(&["run", "--golden", s(&golden), "--expectations", s(&ex), "--json", s(&p)]);
    assert_eq!(code(&o), 1);
    let v = read_json(&p);
    for k in [
        "format",
        "executor",
        "target",
        "golden",
        "filter",
        "shard",
        "summary",
        "wall_s",
        "peak_rss_kib",
        "cases",
    ] {
        assert!(v.get(k).is_some(), "no {k}");
    }
    for k in ["total", "passed", "failed", "xfailed", "xpassed", "skipped", "errors"] {
        assert!(v["summary"][k].is_u64(), "summary.{k}");
    }
    let c = &v["cases"][1];
    assert_eq!(c["id"], "relu::f32::hand_1");
    assert_eq!(c["op"], "relu");
    assert_eq!(c["dtype"], "f32");
    assert_eq!(c["status"], "fail");
    let m = &c["metrics"][0];
    for k in [
        "name",
        "max_abs_err",
        "max_rel_err",
        "max_ulp",
        "mismatches",
        "first_mismatch",
    ] {
        assert!(m.get(k).is_some(), "metrics.{k}");
    }
    assert_eq!(m["first_mismatch"]["index"], serde_json::json!([2]));
    assert!(c["instructions"]["dma"].as_u64().unwrap() >= 2);
    assert!(c["wall_ms"].as_f64().unwrap() > 0.0);
    assert!(!c["message"].as_str().unwrap().is_empty());
    let loaded = trnconf::report::json::load(&p).unwrap();
    assert_eq!(loaded.cases.len(), 2);
    assert_eq!(
        loaded.cases["relu::f32::hand_1"].1.max_ulp(),
        Some(loaded.cases["relu::f32::hand_1"].1.metrics[0].max_ulp)
    );
}
