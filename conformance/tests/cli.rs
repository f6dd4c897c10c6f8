//! The `trnconf` command line, end to end through the built binary: every command, its options
//! and its bad-input paths. Most tests use `--filter` on small op subsets of the committed suite
//! (or a two-case fixture) to keep the time modest.

mod common;

use common::*;
use std::collections::BTreeSet;

/// A filter of the committed suite with a handful of cases of a lowered op.
const SMALL: &str = "relu::";

#[test]
fn every_command_has_help_with_examples() {
    for cmd in [
        &[][..],
        &["run"],
        &["diff"],
        &["list"],
        &["show"],
        &["lower"],
        &["coverage"],
        &["sync-expectations"],
        &["model"],
        &["perf"],
    ] {
        let mut args: Vec<&str> = cmd.to_vec();
        args.push("--help");
        let o = trnconf(&args);
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        assert!(
            stdout(&o).contains("Examples:"),
            "{args:?} help has no examples:\n{}",
            stdout(&o)
        );
    }
}

#[test]
fn run_writes_json_junit_html_and_exit_status_follows_the_summary() {
    let dir = TempDir::new("cli-run");
    let (json, junit, html) = (
        dir.path().join("r.json"),
        dir.path().join("r.xml"),
        dir.path().join("r.html"),
    );
    let o = trnconf(&[
        "run",
        "--filter",
        SMALL,
        "--jobs",
        "2",
        "--json",
        s(&json),
        "--junit",
        s(&junit),
        "--html",
        s(&html),
    ]);
    let out = stdout(&o);
    let v = read_json(&json);
    let sum = &v["summary"];
    let bad = sum["failed"].as_u64().unwrap() + sum["xpassed"].as_u64().unwrap() + sum["errors"].as_u64().unwrap();
    assert_eq!(code(&o), if bad == 0 { 0 } else { 1 }, "{out}\n{}", stderr(&o));
    assert_eq!(v["format"], "trnconf-results/1");
    // The default target is trn2 (docs/isa.md §3a).
    assert_eq!(v["target"], "trn2");
    let cases = v["cases"].as_array().unwrap();
    assert!(!cases.is_empty());
    assert_eq!(sum["total"].as_u64().unwrap() as usize, cases.len());
    let ids: Vec<&str> = cases.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "sorted by id");
    for c in cases {
        assert!(c["id"].as_str().unwrap().contains(SMALL));
        for k in ["op", "dtype", "status", "metrics", "instructions", "wall_ms", "message"] {
            assert!(c.get(k).is_some(), "case has no {k}: {c}");
        }
        for e in ["tensor", "vector", "scalar", "gpsimd", "dma"] {
            assert!(c["instructions"][e].is_u64());
        }
    }
    assert!(
        !dir.path().join("r.json.partial.jsonl").exists(),
        "the partial file is folded in and removed"
    );
    // The end-of-run summary: the group table, the slowest cases, time and memory.
    for want in [
        "group",
        "activation",
        "slowest cases:",
        "wall time",
        "peak memory",
        "VmHWM",
    ] {
        assert!(out.contains(want), "summary lacks {want:?}:\n{out}");
    }
    // Not a terminal: plain progress lines, no bar.
    assert!(stderr(&o).contains("[trnconf]"), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&junit).unwrap().starts_with("<?xml"));
    assert!(std::fs::read_to_string(&html).unwrap().contains("id=\"heatmap\""));
}

#[test]
fn failures_exit_1_and_pass_exits_0() {
    let dir = TempDir::new("cli-exit");
    let golden = relu_golden(&dir.path().join("g"));
    let ex = no_expectations(dir.path());
    let json = dir.path().join("r.json");
    let o = trnconf(&[
        "run",
        "--golden",
        s(&golden),
        "--expectations",
        s(&ex),
        "--json",
        s(&json),
    ]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(stdout(&o).contains("FAIL   relu::f32::hand_1"), "{}", stdout(&o));
    let v = read_json(&json);
    assert_eq!(v["summary"]["passed"], 1);
    assert_eq!(v["summary"]["failed"], 1);
    let failed = &v["cases"][1];
    assert_eq!(failed["status"], "fail");
    assert_eq!(failed["metrics"][0]["mismatches"], 1);
    let o = trnconf(&[
        "run",
        "--golden",
        s(&golden),
        "--expectations",
        s(&ex),
        "--filter",
        "hand_0",
    ]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
}

#[test]
fn jobs_1_and_2_give_identical_results_apart_from_timings() {
    let dir = TempDir::new("cli-jobs");
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    let filter = "add.Tensor::";
    let oa = trnconf(&["run", "--filter", filter, "--jobs", "1", "--json", s(&a)]);
    let ob = trnconf(&["run", "--filter", filter, "--jobs", "2", "--json", s(&b)]);
    assert_eq!(code(&oa), code(&ob));
    let (va, vb) = (without_timings(read_json(&a)), without_timings(read_json(&b)));
    assert!(va["cases"].as_array().unwrap().len() > 20);
    assert_eq!(va, vb);
}

#[test]
fn shards_split_the_cases_exactly_once() {
    let dir = TempDir::new("cli-shard");
    let filter = "::i32::";
    let all = dir.path().join("all.json");
    trnconf(&["run", "--filter", filter, "--json", s(&all)]);
    let all_ids: Vec<String> = read_json(&all)["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    let mut seen = BTreeSet::new();
    let mut total = 0;
    for i in 1..=3 {
        let p = dir.path().join(format!("s{i}.json"));
        let o = trnconf(&["run", "--filter", filter, "--shard", &format!("{i}/3"), "--json", s(&p)]);
        assert!(code(&o) <= 1, "{}", stderr(&o));
        let v = read_json(&p);
        assert_eq!(v["shard"], format!("{i}/3"));
        for c in v["cases"].as_array().unwrap() {
            total += 1;
            assert!(
                seen.insert(c["id"].as_str().unwrap().to_string()),
                "a case in two shards"
            );
        }
    }
    assert_eq!(total, all_ids.len());
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), all_ids);
}

/// `--target` takes every target of the simulator's list (`TargetName::ALL`), on every
/// subcommand that has it, and the help lists them all.
#[test]
fn every_target_of_the_simulator_is_a_target() {
    let dir = TempDir::new("cli-target");
    let names: Vec<&str> = trnsim::TargetName::names().collect();
    assert!(names.len() >= 3, "{names:?}");
    for name in &names {
        let p = dir.path().join(format!("{name}.json"));
        let o = trnconf(&["run", "--filter", "relu::f32::", "--target", name, "--json", s(&p)]);
        assert_eq!(code(&o), 0, "{name}: {}", stderr(&o));
        let v = read_json(&p);
        assert_eq!(v["target"], *name);
        assert_eq!(v["executor"], format!("sim-{name}"));
        assert!(stdout(&o).contains(&format!("sim-{name}")));
        let o = trnconf(&["lower", "relu::f32::opinfo_0", "--target", name]);
        assert_eq!(code(&o), 0, "{name}: {}", stderr(&o));
        let program: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("a program");
        assert_eq!(program["target"], *name);
        let o = trnconf(&["show", "relu::f32::opinfo_0", "--target", name]);
        assert_eq!(code(&o), 0, "{name}: {}", stderr(&o));
        assert!(stdout(&o).contains(&format!("({name}, ")), "{}", stdout(&o));
    }
    let listed = format!("[possible values: {}]", names.join(", "));
    for cmd in ["run", "show", "lower"] {
        let o = trnconf(&[cmd, "--help"]);
        let help = stdout(&o);
        let line = help.lines().find(|l| l.contains("--target")).unwrap_or("");
        let rest = &help[help.find("--target").unwrap_or(0)..];
        assert!(
            rest.split("\n\n").next().unwrap_or("").contains(&listed),
            "{cmd} --help: {line}\n{help}"
        );
    }
}

#[test]
fn resume_finishes_a_partial_file_and_gives_the_same_final_file() {
    let dir = TempDir::new("cli-resume");
    let filter = "abs::";
    let full = dir.path().join("full.json");
    let code_full = code(&trnconf(&["run", "--filter", filter, "--json", s(&full)]));
    let full_v = read_json(&full);
    let n = full_v["cases"].as_array().unwrap().len();
    assert!(n >= 6);
    // What a killed run leaves: the header, some finished cases, a line cut short.
    let killed = dir.path().join("killed.json");
    let header = serde_json::json!({"executor": full_v["executor"], "target": "trn2", "golden": full_v["golden"],
        "filter": filter, "shard": null, "expectations": full_v["expectations"], "golden_hash": full_v["golden_hash"],
        "expectations_hash": full_v["expectations_hash"], "numerics": full_v["numerics"]});
    let mut partial = format!("{{\"trnconf_partial\":1,{}\n", &header.to_string()[1..]);
    for c in full_v["cases"].as_array().unwrap().iter().take(n / 2) {
        partial.push_str(&format!("{c}\n"));
    }
    partial.push_str(&full_v["cases"][n / 2].to_string()[..20]);
    std::fs::write(common_partial(&killed), &partial).unwrap();
    let o = trnconf(&["run", "--filter", filter, "--resume", s(&killed)]);
    assert_eq!(code(&o), code_full, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "resuming: {} case(s) already done, {} to run",
            n / 2,
            n - n / 2
        )),
        "{}",
        stderr(&o)
    );
    assert!(!common_partial(&killed).exists());
    assert_eq!(without_timings(read_json(&killed)), without_timings(full_v.clone()));
    // Resuming a finished file runs nothing and rewrites the same content.
    let o = trnconf(&["run", "--filter", filter, "--resume", s(&killed)]);
    assert!(stderr(&o).contains("to run"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("{n} case(s) already done, 0 to run")),
        "{}",
        stderr(&o)
    );
    assert_eq!(without_timings(read_json(&killed)), without_timings(full_v));
}

fn common_partial(p: &std::path::Path) -> std::path::PathBuf {
    trnconf::report::json::partial_path(p)
}

#[test]
fn a_killed_run_keeps_its_finished_cases() {
    let dir = TempDir::new("cli-kill");
    let p = dir.path().join("k.json");
    let partial = common_partial(&p);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_trnconf"))
        .args(["run", "--jobs", "1", "--json", s(&p), "--filter", "::f32::"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let mut lines = 0;
    while start.elapsed() < std::time::Duration::from_secs(60) {
        lines = std::fs::read_to_string(&partial)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if lines > 20 || child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let finished = child.try_wait().unwrap().is_some();
    let _ = child.kill();
    let _ = child.wait();
    if finished {
        // Too fast to catch: nothing left to resume, the final file exists.
        assert!(p.exists());
        return;
    }
    eprintln!("killed after {lines} partial lines");
    assert!(lines > 20);
    let kept = trnconf::report::json::load(&partial).expect("the partial file of a killed run reads back");
    assert!(kept.cases.len() >= 20);
    assert!(!p.exists(), "no final file before the end");
}

#[test]
fn diff_orders_status_changes_then_numeric_changes() {
    let dir = TempDir::new("cli-diff");
    let a = dir.path().join("a.json");
    trnconf(&["run", "--filter", "relu::f32::", "--json", s(&a)]);
    let mut v = read_json(&a);
    let cases = v["cases"].as_array_mut().unwrap();
    assert!(cases.len() >= 3);
    // Case 0 changes status; case 1 gains 3 ULP; case 2 gains 40 ULP.
    cases[0]["status"] = "fail".into();
    let with_metrics: Vec<usize> = (1..cases.len())
        .filter(|&i| !cases[i]["metrics"].as_array().unwrap().is_empty())
        .collect();
    assert!(with_metrics.len() >= 2);
    cases[with_metrics[0]]["metrics"][0]["max_ulp"] = 3.into();
    cases[with_metrics[1]]["metrics"][0]["max_ulp"] = 40.into();
    let b = dir.path().join("b.json");
    std::fs::write(&b, serde_json::to_string(&v).unwrap()).unwrap();
    let html = dir.path().join("d.html");
    let o = trnconf(&["diff", s(&a), s(&b), "--html", s(&html)]);
    assert_eq!(code(&o), 1, "pass -> fail is a regression: {}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("regressions: 1"), "{out}");
    assert!(out.contains("(Δ+40)") && out.contains("(Δ+3)"), "signed changes: {out}");
    // The other way round: fail -> pass is no regression; the ULP changes are negative.
    let back = trnconf(&["diff", s(&b), s(&a)]);
    assert_eq!(code(&back), 0, "{}", stdout(&back));
    assert!(stdout(&back).contains("(Δ-40)"), "{}", stdout(&back));
    assert!(stdout(&back).contains("regressions: 0"), "{}", stdout(&back));
    let ids: Vec<&str> = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    let pos = |id: &str| out.find(id).unwrap_or_else(|| panic!("{id} not in\n{out}"));
    assert!(out.contains("status changes: 1"), "{out}");
    assert!(out.contains("numeric changes: 2"), "{out}");
    assert!(pos(ids[0]) < pos(ids[with_metrics[1]]), "status changes first");
    assert!(
        pos(ids[with_metrics[1]]) < pos(ids[with_metrics[0]]),
        "bigger ULP change first"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains(ids[0]) && page.starts_with("<!DOCTYPE html>"));
}

#[test]
fn list_ops_and_coverage() {
    let o = trnconf(&["list", "--filter", SMALL]);
    assert_eq!(code(&o), 0);
    assert!(
        stdout(&o)
            .lines()
            .all(|l| l.contains(SMALL) || l.starts_with("warning")),
        "{}",
        stdout(&o)
    );
    let o = trnconf(&["list", "--ops"]);
    assert_eq!(code(&o), 0);
    let index = trnconf::case::GoldenIndex::load(&trnconf::default_golden_dir()).unwrap();
    let want = format!("{} ops, {} cases", index.ops().len(), index.cases.len());
    assert!(stdout(&o).contains(&want), "{}", stdout(&o));
    let dir = TempDir::new("cli-cov");
    let r = dir.path().join("r.json");
    trnconf(&["run", "--filter", SMALL, "--json", s(&r)]);
    let o = trnconf(&["list", "--coverage", "--results", s(&r)]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    // Every core overload has a line; relu has its dtypes.
    assert_eq!(out.lines().filter(|l| l.contains(" cases ")).count(), 193, "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("relu ") && l.contains("f32:")),
        "{out}"
    );
    assert!(out.contains("core overloads have cases"));
    // The Markdown page.
    let md = dir.path().join("coverage.md");
    let o = trnconf(&["coverage", "--markdown", s(&md), "--results", s(&r)]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let page = std::fs::read_to_string(&md).unwrap();
    assert!(
        page.contains("# Core ATen coverage") && page.contains("| `relu` |"),
        "{page}"
    );
}

#[test]
fn show_prints_call_program_counts_and_result() {
    let o = trnconf(&["show", "add.Tensor::f32::hand_0"]);
    let out = stdout(&o);
    assert!(code(&o) <= 1, "{}", stderr(&o));
    for want in [
        "call     torch.ops.aten.add.Tensor(",
        "inputs:",
        "input.0",
        "program  (trn2,",
        "dma_copy",
        "per engine:",
        "result   ",
    ] {
        assert!(out.contains(want), "no {want:?} in\n{out}");
    }
    // One instruction per line with engine and operands with access patterns.
    assert!(
        out.lines()
            .any(|l| l.contains(" vector ") || l.contains(" scalar ") || l.contains(" gpsimd ")),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.contains("dst=") && l.contains("src=hbm:")),
        "{out}"
    );
}

#[test]
fn lower_emits_a_program_file() {
    let dir = TempDir::new("cli-lower");
    let p = dir.path().join("p.json");
    let o = trnconf(&["lower", "add.Tensor::f32::hand_0", "--emit", "json", "-o", s(&p)]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let program = trnsim::Program::from_json(&std::fs::read_to_string(&p).unwrap()).expect("a program file");
    assert!(!program.instructions.is_empty());
    let o = trnconf(&["lower", "add.Tensor::f32::hand_0", "--emit", "json"]);
    assert!(trnsim::Program::from_json(&stdout(&o)).is_ok());
}

#[test]
fn bad_input_exits_2_with_one_line_and_writes_nothing() {
    let dir = TempDir::new("cli-bad");
    let missing = dir.path().join("no-such-golden");
    let keep = dir.path().join("keep.json");
    std::fs::write(&keep, "precious").unwrap();
    let bad_json = dir.path().join("bad.json");
    std::fs::write(&bad_json, "{\"format\": \"trnconf-results/1\", \"cases\": [").unwrap();
    let not_results = dir.path().join("other.json");
    std::fs::write(&not_results, "{\"hello\": 1}").unwrap();

    assert_bad_input(
        &trnconf(&["run", "--golden", s(&missing), "--json", s(&keep)]),
        "no-such-golden",
    );
    assert_bad_input(&trnconf(&["list", "--golden", s(&missing)]), "no-such-golden");
    assert_bad_input(
        &trnconf(&["show", "nope::f32::hand_0"]),
        "unknown case `nope::f32::hand_0`",
    );
    assert_bad_input(
        &trnconf(&["lower", "nope::f32::hand_0", "-o", s(&keep)]),
        "unknown case",
    );
    assert_bad_input(&trnconf(&["show", "x", "--golden", s(&missing)]), "no-such-golden");
    assert_bad_input(&trnconf(&["diff", s(&bad_json), s(&bad_json)]), "bad.json");
    assert_bad_input(&trnconf(&["diff", s(&not_results), s(&bad_json)]), "other.json");
    assert_bad_input(&trnconf(&["diff", s(&missing), s(&bad_json)]), "no-such-golden");
    assert_bad_input(
        &trnconf(&["run", "--filter", SMALL, "--resume", s(&bad_json)]),
        "bad.json",
    );
    assert_bad_input(
        &trnconf(&["run", "--filter", SMALL, "--resume", s(&dir.path().join("none.json"))]),
        "none.json",
    );
    assert_bad_input(
        &trnconf(&["run", "--filter", SMALL, "--json", "/no/such/dir/r.json"]),
        "/no/such/dir",
    );
    assert_bad_input(
        &trnconf(&["coverage", "--markdown", s(&keep), "--results", s(&bad_json)]),
        "bad.json",
    );
    // A resume file run for another target (the default, trn2, resumed as trn1).
    let t1 = dir.path().join("t1.json");
    trnconf(&["run", "--filter", "relu::f32::hand_0", "--json", s(&t1)]);
    let before = std::fs::read_to_string(&t1).unwrap();
    assert_bad_input(
        &trnconf(&[
            "run",
            "--filter",
            "relu::f32::hand_0",
            "--target",
            "trn1",
            "--resume",
            s(&t1),
        ]),
        "trn2",
    );
    assert_eq!(std::fs::read_to_string(&t1).unwrap(), before);
    assert_bad_input(
        &trnconf(&["run", "--filter", "no-such-op::", "--json", s(&keep)]),
        "matches no case",
    );
    // clap's usage errors are exit 2 as well.
    assert_eq!(code(&trnconf(&["run", "--shard", "4/3"])), 2);
    assert_eq!(code(&trnconf(&["run", "--target", "trn9"])), 2);
    assert_eq!(
        std::fs::read_to_string(&keep).unwrap(),
        "precious",
        "nothing overwritten"
    );
    assert!(!trnconf::report::json::partial_path(&keep).exists());
    assert!(!dir.path().join("bad.json.partial.jsonl").exists());
}

/// A relu golden dir, run once with `--json`: (golden, expectations, results file).
fn relu_run(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let golden = relu_golden(&dir.join("g"));
    let ex = no_expectations(dir);
    let json = dir.join("r.json");
    let o = trnconf(&[
        "run",
        "--golden",
        s(&golden),
        "--expectations",
        s(&ex),
        "--json",
        s(&json),
    ]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    (golden, ex, json)
}

#[test]
fn resume_refuses_results_recorded_under_other_inputs_or_settings() {
    let dir = TempDir::new("cli-resume-guard");
    let (golden, ex, json) = relu_run(dir.path());
    let resume = |extra: &[&str], g: &std::path::Path| {
        let mut args = vec!["run", "--golden", s(g), "--expectations", s(&ex), "--resume", s(&json)];
        args.extend_from_slice(extra);
        trnconf(&args)
    };
    // The same inputs and settings: everything is already done.
    let o = resume(&[], &golden);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("2 case(s) already done, 0 to run"),
        "{}",
        stderr(&o)
    );
    let before = std::fs::read_to_string(&json).unwrap();
    // Another golden directory, even with the same content.
    let other = dir.path().join("g2");
    relu_golden(&other);
    assert_bad_input(&resume(&[], &other), "cannot resume: recorded with golden directory");
    // The same directory with an edited case file.
    let case = golden.join(&trnconf::case::GoldenIndex::load(&golden).unwrap().cases[1].file);
    let mut bytes = std::fs::read(&case).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&case, &bytes).unwrap();
    assert_bad_input(&resume(&[], &golden), "golden content hash");
    bytes[last] ^= 1;
    std::fs::write(&case, &bytes).unwrap();
    // Another selection, target or numerics setting.
    assert_bad_input(&resume(&["--filter", "hand_0"], &golden), "--filter");
    assert_bad_input(&resume(&["--shard", "1/2"], &golden), "--shard");
    assert_bad_input(&resume(&["--target", "trn1"], &golden), "--target");
    assert_bad_input(
        &resume(&["--numerics", "denormals=flush_to_zero"], &golden),
        "--numerics",
    );
    // Another expectations file.
    let ex2 = dir.path().join("other.toml");
    std::fs::write(&ex2, "").unwrap();
    let o = trnconf(&[
        "run",
        "--golden",
        s(&golden),
        "--expectations",
        s(&ex2),
        "--resume",
        s(&json),
    ]);
    assert_bad_input(&o, "expectations file");
    assert_eq!(
        std::fs::read_to_string(&json).unwrap(),
        before,
        "a refused resume writes nothing"
    );
}

#[test]
fn a_fresh_json_run_never_counts_an_old_file() {
    let dir = TempDir::new("cli-fresh");
    let json = dir.path().join("r.json");
    // An old results file with a case this run does not select, and a stale partial file.
    let (golden, ex, old) = relu_run(&dir.path().join("old"));
    std::fs::copy(&old, &json).unwrap();
    std::fs::copy(&old, common_partial(&json)).unwrap();
    let o = trnconf(&[
        "run",
        "--golden",
        s(&golden),
        "--expectations",
        s(&ex),
        "--filter",
        "hand_0",
        "--json",
        s(&json),
    ]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    let v = read_json(&json);
    let ids: Vec<&str> = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["relu::f32::hand_0"], "only this run's cases");
    assert!(!common_partial(&json).exists());
}

#[test]
fn an_empty_case_list_exits_2() {
    let dir = TempDir::new("cli-empty");
    let g = dir.path().join("g");
    std::fs::create_dir_all(&g).unwrap();
    std::fs::write(g.join("index.json"), r#"{"format": 1, "cases": []}"#).unwrap();
    let json = dir.path().join("r.json");
    assert_bad_input(
        &trnconf(&["run", "--golden", s(&g), "--json", s(&json)]),
        "no cases to run",
    );
    assert!(!json.exists() && !common_partial(&json).exists());
    // A shard with nothing in it is empty too.
    let golden = relu_golden(&dir.path().join("two"));
    assert_bad_input(
        &trnconf(&["run", "--golden", s(&golden), "--shard", "3/3"]),
        "none in shard 3/3",
    );
}

#[test]
fn jobs_are_validated() {
    assert_bad_input(&trnconf(&["run", "--filter", SMALL, "--jobs", "0"]), "--jobs 0");
    assert_bad_input(&trnconf(&["run", "--filter", SMALL, "--jobs", "100000"]), "at most");
}

/// Spawns trnconf with its stdout read by `reader`, which may close it early.
fn with_stdout_closed_after(args: &[&str], lines: usize) -> std::process::Output {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_trnconf"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let mut reader = std::io::BufReader::new(out);
    for _ in 0..lines {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
    }
    drop(reader);
    child.wait_with_output().unwrap()
}

#[test]
fn broken_pipes_exit_quietly() {
    let dir = TempDir::new("cli-pipe");
    let (_, _, json) = relu_run(dir.path());
    let program = dir.path().join("p.json");
    // `trnconf list | head -1`: trnconf's own status.
    for (args, lines) in [
        (vec!["list"], 1),
        (vec!["list", "--ops"], 0),
        (vec!["show", "add.Tensor::f32::hand_0"], 0),
        (vec!["lower", "add.Tensor::f32::hand_0"], 0),
        (vec!["diff", s(&json), s(&json)], 0),
    ] {
        let o = with_stdout_closed_after(&args, lines);
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
    }
    // A run whose output is cut still does its work and writes its files.
    let r = dir.path().join("run.json");
    let o = with_stdout_closed_after(&["run", "--filter", "relu::f32::", "--json", s(&r)], 0);
    assert!(code(&o) <= 1 && !stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert!(read_json(&r)["cases"].as_array().unwrap().len() > 1);
    let _ = program;
}

#[test]
fn a_terminal_fail_prints_the_first_mismatch() {
    let dir = TempDir::new("cli-mismatch");
    let golden = relu_golden(&dir.path().join("g"));
    let ex = no_expectations(dir.path());
    let o = trnconf(&["run", "--golden", s(&golden), "--expectations", s(&ex)]);
    let out = stdout(&o);
    // relu([1, -2, 3]) is [1, 0, 3]; the golden says 4 at index 2: 2^22 f32 ULPs apart.
    assert!(
        out.contains("output.0: first mismatch at [2]: actual 3") && out.contains("expected 4"),
        "{out}"
    );
    assert!(out.contains("(4194304 ULP)"), "{out}");
}

#[test]
fn default_paths_come_from_the_current_workspace_and_the_run_names_its_golden_dir() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let run_in = |cwd: &std::path::Path, env: Option<&std::path::Path>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_trnconf"));
        c.args(["run", "--filter", "relu::f32::hand_0"])
            .current_dir(cwd)
            .env_remove("TRNCONF_ROOT")
            .env_remove("TRNCONF_GOLDEN");
        if let Some(r) = env {
            c.env("TRNCONF_ROOT", r);
        }
        c.stdin(std::process::Stdio::null()).output().unwrap()
    };
    // From a subdirectory of the workspace.
    let o = run_in(&root.join("sim/src"), None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let golden = std::fs::canonicalize(root.join("golden")).unwrap();
    assert!(
        stderr(&o).contains(&format!("golden: {}", golden.display())),
        "{}",
        stderr(&o)
    );
    // Outside any workspace: no compiled-in fallback.
    let dir = TempDir::new("cli-nowhere");
    assert_bad_input(&run_in(dir.path(), None), "golden directory does not exist");
    // Named by the environment.
    let o = run_in(dir.path(), Some(&root));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn numerics_settings_are_options_recorded_and_compared() {
    let dir = TempDir::new("cli-numerics");
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    let filter = "mm::f32::";
    let oa = trnconf(&["run", "--filter", filter, "--json", s(&a)]);
    let ob = trnconf(&[
        "run",
        "--filter",
        filter,
        "--json",
        s(&b),
        "--numerics",
        "matmul_accumulation=pairwise",
    ]);
    assert!(code(&oa) <= 1 && code(&ob) <= 1, "{}", stderr(&ob));
    assert_eq!(read_json(&a)["numerics"], "default");
    assert_eq!(read_json(&b)["numerics"], "matmul_accumulation=pairwise");
    assert!(stderr(&ob).contains("numerics: matmul_accumulation=pairwise"));
    let d = trnconf(&["diff", s(&a), s(&b)]);
    assert!(code(&d) <= 1, "{}", stderr(&d));
    assert!(stdout(&d).contains("numerics differ"), "{}", stdout(&d));
    let html = dir.path().join("r.html");
    trnconf(&[
        "run",
        "--filter",
        filter,
        "--numerics",
        "denormals=flush_to_zero",
        "--html",
        s(&html),
    ]);
    assert!(
        std::fs::read_to_string(&html)
            .unwrap()
            .contains("denormals=flush_to_zero")
    );
    let o = trnconf(&["show", "mm::f32::hand_0", "--numerics", "matmul_accumulation=pairwise"]);
    assert!(
        stdout(&o).contains("numerics matmul_accumulation=pairwise"),
        "{}",
        stdout(&o)
    );
    assert_bad_input(
        &trnconf(&["run", "--filter", filter, "--numerics", "matmul=tree"]),
        "unknown setting",
    );
    assert_bad_input(&trnconf(&["lower", "mm::f32::hand_0", "--numerics", "x"]), "KEY=VALUE");
}

#[test]
fn an_executor_that_never_answers_hello_fails_within_its_timeout() {
    let start = std::time::Instant::now();
    let o = trnconf(&[
        "run",
        "--filter",
        "relu::f32::hand_0",
        "--executor",
        "process:sleep 600",
        "--hello-timeout",
        "2",
    ]);
    let took = start.elapsed();
    assert_bad_input(&o, "handshake");
    assert!(stderr(&o).contains("timeout"), "{}", stderr(&o));
    assert!(took < std::time::Duration::from_secs(30), "took {took:?}");
}

/// `trnconf perf` reads a results file: every executed case carries a bound and an efficiency
/// in (0, 1], the table has a row per family, and an estimate edited below its bound (a
/// cost-model bug) makes it exit 1 naming the case.
#[test]
fn perf_prints_the_family_table_and_fails_on_an_estimate_below_its_bound() {
    let dir = TempDir::new("cli-perf");
    let json = dir.path().join("r.json");
    let o = trnconf(&["run", "--filter", "add.Tensor::f32::", "--json", s(&json)]);
    assert!(code(&o) <= 1, "{}", stderr(&o));
    let mut v = read_json(&json);
    let cases = v["cases"].as_array().unwrap();
    // Every case with outputs to produce has a bound; empty outputs ([0, 3]) have none.
    let with_work = |c: &&serde_json::Value| {
        c["metrics"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["numel"] != 0))
    };
    assert!(cases.iter().filter(with_work).count() > 5);
    for c in cases.iter().filter(with_work) {
        let e = c["efficiency"].as_f64().unwrap_or_else(|| panic!("no efficiency: {c}"));
        assert!(e > 0.0 && e <= 1.0, "{c}");
        assert!(c["bound_us"].as_f64().unwrap() <= c["est_us"].as_f64().unwrap(), "{c}");
        assert!(c["limiter"].is_string(), "{c}");
    }
    let o = trnconf(&["perf", "--results", s(&json), "--all", "--markdown"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("| family | cases |"), "{out}");
    assert!(out.contains("| binary | "), "{out}");
    assert!(out.contains("least efficient cases"), "{out}");
    // A cost-model bug: the first case's estimate edited below its bound.
    let first = v["cases"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c.get("bound_us").is_some())
        .unwrap();
    let id = first["id"].as_str().unwrap().to_string();
    first["est_us"] = serde_json::json!(first["bound_us"].as_f64().unwrap() / 2.0);
    std::fs::write(&json, serde_json::to_string(&v).unwrap()).unwrap();
    let o = trnconf(&["perf", "--results", s(&json), "--all"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(
        stderr(&o).contains(&id) && stderr(&o).contains("below their roofline bound"),
        "{}",
        stderr(&o)
    );
}

/// `--native-int64` is refused on trn1 naming the generation (exit 2); on trn2 the int64-range
/// stress cases keep int64 on the device and all pass, integer division (`div` trunc/floor,
/// `fmod`, `remainder`) and `sort` included: no expectation covers them (the narrowing's entry
/// holds only without the flag). About 2 s: ~200 small cases.
#[test]
fn native_int64_is_refused_on_trn1_and_runs_int64_range_cases_on_trn2() {
    let o = trnconf(&["run", "--native-int64", "--target", "trn1", "--filter", "relu::i64::"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("trn1 (NeuronCore-v2) has no native 64-bit integers"),
        "{}",
        stderr(&o)
    );
    let dir = TempDir::new("cli-native-int64");
    let p = dir.path().join("r.json");
    let o = trnconf(&[
        "run",
        "--native-int64",
        "--target",
        "trn2",
        "--filter",
        "::i64::stress_",
        "--json",
        s(&p),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = read_json(&p);
    assert_eq!(v["executor"], "sim-trn2-native-int64");
    let cases = v["cases"].as_array().unwrap();
    let status = |id: &str| cases.iter().find(|c| c["id"] == id).map(|c| c["status"].clone());
    for id in [
        "add.Tensor::i64::stress_1",
        "mul.Scalar::i64::stress_1",
        "eq.Scalar::i64::stress_0",
        "div.Tensor::i64::stress_1",
        "amax::i64::stress_0",
        "prod.dim_int::i64::stress_0",
        "_to_copy::i64::stress_0",
        "_local_scalar_dense::i64::stress_0",
        "div.Scalar_mode::i64::stress_0",
        "div.Tensor_mode::i64::stress_0",
        "fmod.Scalar::i64::stress_0",
        "fmod.Tensor::i64::stress_0",
        "remainder.Scalar::i64::stress_0",
        "remainder.Tensor::i64::stress_0",
        "sort::i64::stress_0",
    ] {
        assert_eq!(status(id), Some("pass".into()), "{id}");
    }
    let xfails: Vec<&str> = cases
        .iter()
        .filter(|c| c["status"] == "xfail")
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(xfails.is_empty(), "{xfails:?}");
    assert!(cases.iter().all(|c| {
        !c["expectation"]
            .as_str()
            .unwrap_or("")
            .contains("as the compiler does without --native-int64")
    }));
}
