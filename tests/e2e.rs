//! End to end through the whole tool: committed golden cases → lowering → simulator →
//! comparison → expectations → every report (JSON results file and its progressive sidecar,
//! JUnit, HTML, coverage, diff), using the library the `trnconf` binary is built from. When the
//! binary has been built (it is, under `cargo test --workspace`), its `run` is cross-checked
//! against the library's results.

use std::collections::BTreeMap;
use std::path::PathBuf;
use trnconf::case::{GoldenIndex, IndexEntry};
use trnconf::executor::{CaseExecutor, SimExecutor};
use trnconf::expect::Expectations;
use trnconf::report::json::{self, Loaded, PartialWriter, RunInfo};
use trnconf::report::{self, CaseRecord};
use trnconf::runner;

fn records(results: &[runner::CaseResult]) -> BTreeMap<String, (serde_json::Value, CaseRecord)> {
    results
        .iter()
        .map(|r| {
            let v = serde_json::to_value(r).unwrap();
            (r.id.clone(), (v.clone(), serde_json::from_value(v).unwrap()))
        })
        .collect()
}

fn run(filter: &str, jobs: usize) -> (RunInfo, BTreeMap<String, (serde_json::Value, CaseRecord)>) {
    let index = GoldenIndex::load(&trnconf::default_golden_dir()).expect("committed goldens");
    let ex = Expectations::load(&trnconf::default_expectations_path()).expect("committed expectations");
    let entries: Vec<&IndexEntry> = index
        .cases
        .iter()
        .filter(|c| runner::filter_matches(filter, &c.id))
        .collect();
    assert!(!entries.is_empty(), "{filter} selects cases");
    let executor = SimExecutor::new(trnsim::TargetName::Trn1);
    let results = runner::run_cases_streaming(&index.dir, &entries, &ex, &executor, jobs, &|_| {});
    let info = RunInfo {
        executor: executor.name(),
        target: "trn1".into(),
        golden: index.dir.display().to_string(),
        filter: Some(filter.into()),
        shard: None,
        ..RunInfo::default()
    };
    (info, records(&results))
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("trn-e2e-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn golden_to_every_report() {
    let (info, cases) = run("*::hand_*", 2);
    let dir = tmp("reports");
    // Progressive file, then the final one: they read back to the same cases.
    let path = dir.join("r.json");
    let partial = PartialWriter::create(&json::partial_path(&path), &info, &Loaded::default()).unwrap();
    for (v, _) in cases.values() {
        partial.append(v).unwrap();
    }
    drop(partial);
    let from_partial = json::load(&json::partial_path(&path)).unwrap();
    assert_eq!(from_partial.cases.len(), cases.len());
    json::write_final(&path, &info, &from_partial.cases, Some(1.0), report::peak_rss_kib()).unwrap();
    let back = json::load(&path).unwrap();
    assert_eq!(back.info.as_ref(), Some(&info));
    let recs: Vec<&CaseRecord> = back.records().collect();
    assert_eq!(recs.len(), cases.len());
    assert!(
        recs.iter().zip(cases.values()).all(|(a, (_, b))| *a == b),
        "a results file round-trips"
    );

    // The summary per group covers every case once.
    let groups = report::summary::by_group(recs.iter().copied());
    assert_eq!(groups.values().map(|(s, _)| s.total).sum::<usize>(), recs.len());
    let text = report::summary::render(&recs, 5);
    assert!(text.contains("total") && text.contains("slowest cases:"));

    // JUnit: one testcase per case.
    let xml = report::junit::render(&recs, "2026-01-01T00:00:00");
    assert_eq!(xml.matches("<testcase ").count(), recs.len());
    assert_eq!(xml.matches("<testsuite ").count(), groups.len());

    // HTML: a heatmap cell per op × dtype.
    let cov: Vec<_> = report::coverage::compute(recs.iter().copied())
        .into_iter()
        .filter(|o| o.cases() > 0)
        .collect();
    let page = report::html::render(&info, &recs);
    assert_eq!(
        page.matches("<td class=\"cell ").count(),
        cov.len() * report::coverage::dtypes(&cov).len()
    );

    // Coverage of the 193 core overloads: every one has hand-written cases.
    let all = report::coverage::compute(recs.iter().copied());
    assert_eq!(all.len(), 193);
    assert!(all.iter().all(|o| o.cases() > 0), "every core overload has a hand case");
    let md = report::coverage::render_markdown(&all, None);
    assert_eq!(md, report::coverage::render_markdown(&all, None), "deterministic");

    // A run diffed with itself has no changes.
    let (changes, unchanged) = report::diff::diff(&back, &back);
    assert!(changes.is_empty());
    assert_eq!(unchanged, recs.len());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn results_do_not_depend_on_jobs() {
    let strip = |m: BTreeMap<String, (serde_json::Value, CaseRecord)>| -> Vec<serde_json::Value> {
        m.into_values()
            .map(|(mut v, _)| {
                v.as_object_mut().unwrap().remove("wall_ms");
                v
            })
            .collect()
    };
    let (_, one) = run("mul.Tensor::", 1);
    let (_, three) = run("mul.Tensor::", 3);
    assert_eq!(strip(one), strip(three));
}

/// `target/<profile>/trnconf`, next to this test's `deps/` directory, when it has been built.
fn built_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe
        .parent()?
        .parent()?
        .join(format!("trnconf{}", std::env::consts::EXE_SUFFIX));
    p.is_file().then_some(p)
}

#[test]
fn the_binary_agrees_with_the_library() {
    let Some(bin) = built_binary() else {
        eprintln!("note: the trnconf binary is not built (run `cargo test --workspace`); cross-check skipped");
        return;
    };
    let dir = tmp("bin");
    let path = dir.join("r.json");
    let filter = "sub.Tensor::";
    let out = std::process::Command::new(&bin)
        .args(["run", "--filter", filter, "--json", path.to_str().unwrap()])
        .output()
        .unwrap();
    let (_, lib) = run(filter, 2);
    let file = json::load(&path).unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(&out.stderr)));
    // The same cases (statuses are not compared: a binary left over from an earlier build may
    // lower differently from the library this test was built with).
    let file_ids: Vec<&String> = file.cases.keys().collect();
    assert_eq!(file_ids, lib.keys().collect::<Vec<_>>());
    let ok = report::summarize(file.records()).ok();
    assert_eq!(out.status.code(), Some(if ok { 0 } else { 1 }));
    let _ = std::fs::remove_dir_all(&dir);
}

/// docs/coverage.md is generated by `trnconf coverage --markdown` (issue #4), and lists every
/// core overload. (Its statuses move with the lowerings: regenerate it after changing them.)
#[test]
fn coverage_page_is_generated_and_lists_every_core_overload() {
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/coverage.md")).expect("docs/coverage.md");
    assert!(page.contains("Generated by `cargo run -p trnconf -- coverage --markdown docs/coverage.md`"));
    for op in trnconf::ops::core_ops() {
        assert!(
            page.contains(&format!("| `{}` |", op.name)),
            "docs/coverage.md lacks {}",
            op.name
        );
    }
}
