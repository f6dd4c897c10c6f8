//! The golden conformance suite as `cargo test` trials (libtest-mimic, `harness = false`).
//!
//! * One trial per case and target, named `<target>/<case id>` (`trn2/add.Tensor::bf16::opinfo_3`,
//!   `trn1/…`, `trn3/…`: every target of `TargetName::ALL`, the default target's trials first,
//!   each lowered and simulated for that generation), so `cargo test -p trnconf --test golden -- add.Tensor` filters every target,
//!   `-- trn3/` one, and nextest partitions work. A trial fails iff the case's status is fail,
//!   xpass or error on that target. Expected failures (xfail) report as ignored with their
//!   reason; `skip` expectations are ignored trials. An expectation with `targets = [...]`
//!   applies to those targets' trials only.
//! * `snapshot::<op>`: per lowered op, one insta snapshot of its cases' quantized numerics and
//!   instruction counts on **trn1** (conformance/tests/snapshots/<op>.snap). The other targets'
//!   trials check verdicts only: their numerics and instruction counts are not snapshotted.
//! * `snapshot::files`: every committed snapshot file belongs to a lowered op (no stale ones).
//!
//! `TRNCONF_GOLDEN=<dir>` runs another golden directory (without snapshot trials unless
//! `TRNCONF_SNAPSHOTS=1`). See docs/workflow.md.

use libtest_mimic::{Arguments, Completion, Failed, Trial};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use trnconf::case::{GoldenIndex, IndexEntry};
use trnconf::executor::{CaseExecutor, SimExecutor};
use trnconf::expect::{Expectations, Status};
use trnconf::runner::{self, CaseResult};
use trnconf::snapshot;
use trnsim::TargetName;

/// The target whose results the snapshot files record.
const SNAPSHOT_TARGET: TargetName = TargetName::Trn1;

const SNAPSHOT_DIR: &str = "snapshots";

fn snapshot_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(SNAPSHOT_DIR)
}

struct Suite {
    index: GoldenIndex,
    expectations: Expectations,
    /// One simulator per target: the default target (trn2) first, then `TargetName::ALL` order.
    executors: Vec<SimExecutor>,
    /// Results of the snapshot target's case trials, by id, so a `snapshot::<op>` trial (queued
    /// after all case trials) reuses them instead of running its cases a second time.
    results: Mutex<HashMap<String, CaseResult>>,
}

/// Every target, the default first: `cargo test`'s first axis is the generation users run on.
fn trial_targets() -> impl Iterator<Item = TargetName> {
    let first = TargetName::default();
    std::iter::once(first).chain(TargetName::ALL.into_iter().filter(move |&t| t != first))
}

fn setup_failure(name: &str, message: String) -> Vec<Trial> {
    vec![Trial::test(name, move || Err(Failed::from(message)))]
}

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let custom = std::env::var_os("TRNCONF_GOLDEN").map(PathBuf::from);
    let golden_dir = custom.clone().unwrap_or_else(trnconf::default_golden_dir);
    let trials = match (
        GoldenIndex::load(&golden_dir),
        Expectations::load(&trnconf::default_expectations_path()),
    ) {
        (Ok(index), Ok(expectations)) => {
            let suite = Arc::new(Suite {
                index,
                expectations,
                executors: trial_targets().map(SimExecutor::new).collect(),
                results: Mutex::new(HashMap::new()),
            });
            // Snapshots belong to the committed goldens; another directory gets case trials only,
            // unless TRNCONF_SNAPSHOTS=1 (to preview a regenerated golden dir's numerics).
            let snapshots = custom.is_none() || std::env::var_os("TRNCONF_SNAPSHOTS").is_some_and(|v| v == "1");
            trials(&suite, snapshots)
        }
        (Err(e), _) => setup_failure("golden::index", e.to_string()),
        (_, Err(e)) => setup_failure("golden::expectations", e.to_string()),
    };
    libtest_mimic::run(&args, trials).exit_code()
}

fn trials(suite: &Arc<Suite>, with_snapshots: bool) -> Vec<Trial> {
    let mut trials = Vec::with_capacity(suite.index.cases.len() * suite.executors.len() + 16);
    for (t, executor) in suite.executors.iter().enumerate() {
        let target = executor.target();
        for (i, entry) in suite.index.cases.iter().enumerate() {
            // Entries match what a case is (its call, inputs, error and target), so whether one
            // skips the case is known once it is loaded: a skipped case's trial runs, loads the
            // file, and reports itself ignored.
            let s = Arc::clone(suite);
            trials.push(Trial::ignorable_test(
                format!("{}/{}", target.name(), entry.id),
                move || {
                    let entry = &s.index.cases[i];
                    let r = runner::run_case(&s.index.dir, entry, &s.expectations, &s.executors[t]);
                    let v = verdict(&r);
                    if target == SNAPSHOT_TARGET && trnconf::lower::is_lowered(&entry.op) {
                        s.results
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(entry.id.clone(), r);
                    }
                    v
                },
            ));
        }
    }
    if !with_snapshots {
        return trials;
    }
    let ops = snapshot::snapshotted_ops(suite.index.ops());
    for op in &ops {
        let s = Arc::clone(suite);
        let op = op.to_string();
        trials.push(Trial::test(format!("snapshot::{op}"), move || snapshot_op(&s, &op)));
    }
    let expected: BTreeSet<String> = ops.iter().map(|op| format!("{op}.snap")).collect();
    trials.push(Trial::test("snapshot::files", move || check_snapshot_files(&expected)));
    trials
}

/// A trial fails iff the case failed, xpassed or errored; xfail and skip show as ignored.
/// An `accurate` case completes (its status is in the snapshot and the run's counts).
fn verdict(r: &CaseResult) -> Result<Completion, Failed> {
    match r.status {
        Status::Pass | Status::Accurate => Ok(Completion::Completed),
        Status::XFail | Status::Skip | Status::NotProvided => Ok(Completion::ignored_with(format!(
            "{}: {}",
            r.status,
            r.expectation.as_deref().unwrap_or("")
        ))),
        Status::Fail | Status::XPass | Status::Error => Err(Failed::from(format!("[{}] {}", r.status, r.message))),
    }
}

fn snapshot_op(suite: &Suite, op: &str) -> Result<(), Failed> {
    let entries: Vec<&IndexEntry> = suite.index.cases.iter().filter(|c| c.op == op).collect();
    // Reuse the case trials' results; run (on this thread) the cases a filter left out.
    let cached: Vec<Option<CaseResult>> = {
        let results = suite.results.lock().unwrap_or_else(|p| p.into_inner());
        entries.iter().map(|e| results.get(&e.id).cloned()).collect()
    };
    let Some(executor) = suite.executors.iter().find(|e| e.target() == SNAPSHOT_TARGET) else {
        return Err(format!("no simulator for the snapshot target {}", SNAPSHOT_TARGET.name()).into());
    };
    let results: Vec<CaseResult> = entries
        .iter()
        .zip(cached)
        .map(|(e, c)| c.unwrap_or_else(|| runner::run_case(&suite.index.dir, e, &suite.expectations, executor)))
        .collect();
    let snap = snapshot::op_snapshot(op, &results);
    // insta's settings are thread-local: build and bind them inside the trial.
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(SNAPSHOT_DIR);
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings.set_sort_maps(true);
    settings.set_description(format!(
        "numerics and instruction counts of `{op}` (see docs/workflow.md)"
    ));
    settings.bind(|| insta::assert_yaml_snapshot!(op.to_string(), snap));
    Ok(())
}

/// Committed `.snap` files must belong to lowered ops with cases: a stale one fails. (A missing
/// one fails its own `snapshot::<op>` trial, which is insta's job.)
fn check_snapshot_files(expected: &BTreeSet<String>) -> Result<(), Failed> {
    let found: BTreeSet<String> = match std::fs::read_dir(snapshot_dir()) {
        Ok(dir) => dir
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".snap"))
            .collect(),
        Err(_) => BTreeSet::new(),
    };
    let stale: Vec<&String> = found.difference(expected).collect();
    if stale.is_empty() {
        return Ok(());
    }
    Err(format!(
        "stale snapshot files in {} (their op has no lowering or no cases): {stale:?}; delete them",
        snapshot_dir().display()
    )
    .into())
}
