//! What `trnconf` may never do, end to end through the built binary: overwrite a file it reads,
//! replace a FIFO, device or symlink with a regular file, leave a temporary file behind after a
//! failed write, report success for work it did not do, or trust a golden file's say-so about how
//! it is checked (docs/workflow.md, "Output files"; docs/golden-format.md, "check").

mod common;

use common::*;
use std::path::{Path, PathBuf};
use trnconf::case::{Check, JsonFloat, Properties, Value};
use trnconf::fixture::{CaseBuilder, write_golden};
use trnconf::tensor::TorchDType::F32;

/// Files in `dir` (recursively) whose name says they are a temporary file of a write.
fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().unwrap().to_string_lossy().contains(".tmp") {
                out.push(p);
            }
        }
    }
    out
}

fn bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn no_output_may_name_a_file_the_command_reads() {
    let dir = TempDir::new("safety-inputs");
    let golden = relu_golden(&dir.path().join("g"));
    let ex = no_expectations(dir.path());
    let index = golden.join("index.json");
    let case_file = golden.join("cases/relu/relu__f32__hand_0.safetensors");
    assert!(case_file.is_file(), "fixture layout");
    let (index_before, case_before, ex_before) = (bytes(&index), bytes(&case_file), bytes(&ex));
    let base = ["run", "--golden", s(&golden), "--expectations", s(&ex)];
    for (flag, target, what) in [
        ("--json", &index, "the golden index"),
        ("--html", &case_file, "the golden case file"),
        ("--junit", &ex, "the expectations file"),
    ] {
        let mut args = base.to_vec();
        args.extend([flag, s(target)]);
        let o = trnconf(&args);
        assert_bad_input(&o, what);
        assert!(stderr(&o).contains(flag), "{}", stderr(&o));
    }
    // Through a symlink and a hard link too: the test is the file, not its name.
    #[cfg(unix)]
    {
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&index, &link).unwrap();
        let mut args = base.to_vec();
        args.extend(["--json", s(&link)]);
        assert_bad_input(&trnconf(&args), "the golden index");
    }
    let hard = dir.path().join("hard.html");
    std::fs::hard_link(&case_file, &hard).unwrap();
    let mut args = base.to_vec();
    args.extend(["--html", s(&hard)]);
    assert_bad_input(&trnconf(&args), "the golden case file");
    // Two outputs on one file.
    let r = dir.path().join("r.json");
    let mut args = base.to_vec();
    args.extend(["--json", s(&r), "--html", s(&r)]);
    assert_bad_input(&trnconf(&args), "the same file");
    assert_eq!(bytes(&index), index_before);
    assert_eq!(bytes(&case_file), case_before);
    assert_eq!(bytes(&ex), ex_before);

    // A real run, then the other commands' outputs aimed at their inputs.
    let mut args = base.to_vec();
    args.extend(["--json", s(&r)]);
    let o = trnconf(&args);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let r_before = bytes(&r);
    let other = dir.path().join("other.json");
    std::fs::copy(&r, &other).unwrap();
    assert_bad_input(
        &trnconf(&["diff", s(&r), s(&other), "--html", s(&r)]),
        "the results file",
    );
    assert_bad_input(
        &trnconf(&["coverage", "--markdown", s(&r), "--results", s(&r)]),
        "the --results file",
    );
    assert_bad_input(
        &trnconf(&[
            "lower",
            "relu::f32::hand_0",
            "--golden",
            s(&golden),
            "-o",
            s(&case_file),
        ]),
        "the golden case file",
    );
    assert_bad_input(
        &trnconf(&[
            "show",
            "relu::f32::hand_0",
            "--golden",
            s(&golden),
            "--trace",
            s(&index),
        ]),
        "the golden index",
    );
    // `--resume R --json J` reads R: J may not be R's sidecar or R itself by another name.
    let mut args = base.to_vec();
    args.extend(["--resume", s(&r), "--json", s(&hard)]);
    assert_bad_input(&trnconf(&args), "the golden case file");
    assert_eq!(bytes(&r), r_before);
    assert_eq!(bytes(&index), index_before);
    assert_eq!(bytes(&case_file), case_before);
}

#[test]
fn a_model_run_never_writes_over_the_model() {
    let dir = TempDir::new("safety-model");
    let src = trnconf::default_golden_dir().join("models/gpt2_block");
    let m = dir.path().join("m");
    std::fs::create_dir(&m).unwrap();
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        std::fs::copy(e.path(), m.join(e.file_name())).unwrap();
    }
    let graph = m.join("graph.json");
    let before = bytes(&graph);
    let o = trnconf(&["model", "run", s(&m), "--json", s(&graph)]);
    assert_bad_input(&o, "a file of the model");
    assert_eq!(bytes(&graph), before);
}

#[cfg(unix)]
#[test]
fn special_files_are_written_in_place_symlinks_through_directories_refused() {
    use std::os::unix::fs::FileTypeExt;
    let dir = TempDir::new("safety-special");
    let golden = relu_golden(&dir.path().join("g"));
    let ex = no_expectations(dir.path());
    let base = ["run", "--golden", s(&golden), "--expectations", s(&ex)];
    // A FIFO: opened and written, never renamed over; no sidecar beside it.
    let fifo = dir.path().join("results.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(&fifo).unwrap())
        };
        let mut args = base.to_vec();
        args.extend(["--json", s(&fifo)]);
        let o = trnconf(&args);
        assert_eq!(code(&o), 1, "{}", stderr(&o));
        let text = reader.join().unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["format"], "trnconf-results/1");
        assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
        assert!(!dir.path().join("results.fifo.partial.jsonl").exists());
    } else {
        eprintln!("note: mkfifo is not available; the FIFO half of this test did not run");
    }
    // A character device: /dev/null stays /dev/null.
    let mut args = base.to_vec();
    args.extend(["--html", "/dev/null", "--junit", "/dev/null"]);
    let o = trnconf(&args);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
    // A symlink is written through: the link stays, its target gets the report.
    let target = dir.path().join("target.json");
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink("target.json", &link).unwrap();
    let mut args = base.to_vec();
    args.extend(["--json", s(&link)]);
    let o = trnconf(&args);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(read_json(&target)["format"], "trnconf-results/1");
    // A directory is refused before any work.
    let mut args = base.to_vec();
    let d = dir.path().join("adir");
    std::fs::create_dir(&d).unwrap();
    args.extend(["--html", s(&d)]);
    assert_bad_input(&trnconf(&args), "is a directory");
    assert!(temp_files(dir.path()).is_empty(), "{:?}", temp_files(dir.path()));
}

/// Runs trnconf with the file size limit at 1 block (512 bytes), `SIGXFSZ` ignored, so every
/// write past it fails with EFBIG, as on a full disk.
#[cfg(unix)]
fn trnconf_small_disk(args: &[&str]) -> std::process::Output {
    let mut script = String::from("trap '' XFSZ; ulimit -f 1; exec \"$0\"");
    for i in 1..=args.len() {
        script.push_str(&format!(" \"${i}\""));
    }
    std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_trnconf"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run sh")
}

#[cfg(unix)]
#[test]
fn a_failed_write_leaves_no_temporary_file_and_the_old_file_intact() {
    let dir = TempDir::new("safety-full");
    let golden = relu_golden(&dir.path().join("g"));
    let ex = no_expectations(dir.path());
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let html = out.join("r.html");
    std::fs::write(&html, "the previous report").unwrap();
    let o = trnconf_small_disk(&[
        "run",
        "--golden",
        s(&golden),
        "--expectations",
        s(&ex),
        "--html",
        s(&html),
    ]);
    assert_eq!(code(&o), 2, "{}\n{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("r.html"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&html).unwrap(), "the previous report");
    // `show --trace` goes the same way: no truncated trace, no temporary file.
    let trace = out.join("t.json");
    let o = trnconf_small_disk(&[
        "show",
        "relu::f32::hand_0",
        "--golden",
        s(&golden),
        "--trace",
        s(&trace),
    ]);
    assert_eq!(code(&o), 2, "{}\n{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("t.json"), "{}", stderr(&o));
    assert!(!trace.exists());
    assert!(temp_files(&out).is_empty(), "{:?}", temp_files(&out));
    // Without the limit the same trace is written whole.
    let o = trnconf(&[
        "show",
        "relu::f32::hand_0",
        "--golden",
        s(&golden),
        "--trace",
        s(&trace),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(read_json(&trace).is_object() || read_json(&trace).is_array());
}

#[test]
fn a_run_where_every_case_is_skipped_is_not_a_success() {
    let dir = TempDir::new("safety-skip");
    let golden = relu_golden(&dir.path().join("g"));
    let ex = dir.path().join("skip.toml");
    std::fs::write(
        &ex,
        "[[expect]]\nops = [\"relu\"]\nstatus = \"skip\"\nreason = \"simulator-gap\"\ntext = \"skip every case\"\n",
    )
    .unwrap();
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
    assert_eq!(code(&o), 1, "{}\n{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("no case ran"), "{}", stdout(&o));
    assert_eq!(
        read_json(&json)["summary"]["skipped"],
        2,
        "the report still says what happened"
    );
}

#[test]
fn a_model_with_no_nodes_or_no_tensors_file_is_an_error() {
    let dir = TempDir::new("safety-model-empty");
    let src = trnconf::default_golden_dir().join("models/gpt2_block/graph.json");
    let mut graph: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&src).unwrap()).unwrap();
    // No tensors file beside the graph: the inputs it names are missing, and the error says so.
    let m = dir.path().join("no_tensors");
    std::fs::create_dir(&m).unwrap();
    std::fs::write(m.join("graph.json"), graph.to_string()).unwrap();
    let o = trnconf(&["model", "run", s(&m)]);
    assert_bad_input(&o, "no *.safetensors tensors file");
    // No nodes: nothing to check, never "every node within tolerance".
    graph["nodes"] = serde_json::json!([]);
    let m = dir.path().join("empty");
    std::fs::create_dir(&m).unwrap();
    std::fs::write(m.join("graph.json"), graph.to_string()).unwrap();
    let o = trnconf(&["model", "run", s(&m)]);
    assert_bad_input(&o, "no nodes to run");
}

/// A one-case golden directory; runs it and returns the case's status and message.
fn run_one(dir: &Path, case: CaseBuilder) -> (String, String, String) {
    let golden = dir.join("g");
    write_golden(&golden, &[case]);
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
    let v = read_json(&json);
    let c = &v["cases"][0];
    (
        c["status"].as_str().unwrap().to_string(),
        c["message"].as_str().unwrap().to_string(),
        format!("{}{}", stdout(&o), stderr(&o)),
    )
}

fn add_case(out: f64) -> CaseBuilder {
    CaseBuilder::new("add.Tensor", "f32", "hand", 0)
        .input(F32, &[2], &[1.0, 2.0])
        .input(F32, &[2], &[3.0, 4.0])
        .output(F32, &[2], &[out, out])
}

#[test]
fn the_check_follows_from_the_op_not_from_the_file() {
    let dir = TempDir::new("safety-check");
    // `add.Tensor` with a garbage output and a `metadata` check: an error naming the file.
    let (status, msg, _) = run_one(&dir.path().join("a"), add_case(12345.0).check(Check::Metadata));
    assert_eq!(status, "error", "{msg}");
    assert!(
        msg.contains("add.Tensor__f32__hand_0.safetensors") && msg.contains("`metadata`"),
        "{msg}"
    );
    let props = Properties {
        range: Some([-1e9, 1e9]),
        deterministic: Some(true),
        ..Default::default()
    };
    let (status, msg, _) = run_one(
        &dir.path().join("b"),
        add_case(12345.0).check(Check::Properties { props }),
    );
    assert_eq!(status, "error", "{msg}");
    assert!(msg.contains("`properties`"), "{msg}");
    // An RNG op's properties must be those its call implies: a widened range is refused.
    let rand = CaseBuilder::new("rand", "f32", "hand", 0)
        .arg(Value::Ints(vec![4]))
        .output(F32, &[4], &[0.1, 0.2, 0.3, 0.4])
        .check(Check::Properties {
            props: Properties {
                range: Some([-1e9, 1e9]),
                deterministic: Some(true),
                ..Default::default()
            },
        });
    let (status, msg, _) = run_one(&dir.path().join("c"), rand);
    assert_eq!(status, "error", "{msg}");
    assert!(msg.contains("range"), "{msg}");
    // The honest file still passes.
    let (status, msg, _) = run_one(&dir.path().join("d"), add_case(0.0).input(F32, &[0], &[]));
    assert_eq!(
        status, "error",
        "three positional arguments do not fit add.Tensor: {msg}"
    );
    let ok = CaseBuilder::new("add.Tensor", "f32", "hand", 0)
        .input(F32, &[2], &[1.0, 2.0])
        .input(F32, &[2], &[3.0, 4.0])
        .output(F32, &[2], &[4.0, 6.0]);
    let (status, msg, _) = run_one(&dir.path().join("e"), ok);
    assert_eq!(status, "pass", "{msg}");
}

#[test]
fn unknown_keyword_arguments_are_an_error() {
    let dir = TempDir::new("safety-kwargs");
    let case = |k: &str| {
        CaseBuilder::new("add.Tensor", "f32", "hand", 0)
            .input(F32, &[2], &[1.0, 2.0])
            .input(F32, &[2], &[3.0, 4.0])
            .kwarg(k, Value::Float(JsonFloat(2.0)))
            .output(F32, &[2], &[7.0, 10.0])
    };
    let (status, msg, _) = run_one(&dir.path().join("a"), case("beta"));
    assert_eq!(status, "error", "{msg}");
    assert!(
        msg.contains("`beta`") && msg.contains("add.Tensor__f32__hand_0.safetensors"),
        "{msg}"
    );
    // `alpha` is the schema's own keyword: a + 2·b.
    let (status, msg, _) = run_one(&dir.path().join("b"), case("alpha"));
    assert_eq!(status, "pass", "{msg}");
}

#[test]
fn resume_refuses_a_case_recorded_twice_with_different_results() {
    let dir = TempDir::new("safety-resume");
    let golden = relu_golden(&dir.path().join("g"));
    let ex = no_expectations(dir.path());
    let json = dir.path().join("r.json");
    let base = ["run", "--golden", s(&golden), "--expectations", s(&ex)];
    let mut args = base.to_vec();
    args.extend(["--json", s(&json)]);
    assert_eq!(code(&trnconf(&args)), 1);
    // Rebuild the partial file a killed run leaves, with hand_1 recorded twice: once failed (as
    // it is) and once passed (a line that is not this run's result).
    let v = read_json(&json);
    let mut header = v.as_object().unwrap().clone();
    for k in ["format", "summary", "wall_s", "peak_rss_kib", "cases"] {
        header.remove(k);
    }
    let mut lines = vec![format!(
        "{{\"trnconf_partial\":1,{}",
        &serde_json::Value::Object(header).to_string()[1..]
    )];
    let failed = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "relu::f32::hand_1")
        .unwrap()
        .clone();
    let mut passed = failed.clone();
    passed["status"] = "pass".into();
    lines.push(failed.to_string());
    lines.push(passed.to_string());
    std::fs::remove_file(&json).unwrap();
    let partial = dir.path().join("r.json.partial.jsonl");
    std::fs::write(&partial, lines.join("\n") + "\n").unwrap();
    let mut args = base.to_vec();
    args.extend(["--resume", s(&json)]);
    let o = trnconf(&args);
    assert_bad_input(&o, "recorded twice with different results");
    assert!(stderr(&o).contains("relu::f32::hand_1"), "{}", stderr(&o));
}

#[cfg(unix)]
#[test]
fn coverage_reads_back_only_a_regular_page_of_bounded_size() {
    let dir = TempDir::new("safety-coverage");
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
    assert_eq!(code(&o), 1);
    // An endless device as the page: not read (it would never end), written in place.
    let o = trnconf(&["coverage", "--markdown", "/dev/zero", "--results", s(&json)]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // An oversized regular file is not a page this command wrote: refused, left as it was.
    let big = dir.path().join("big.md");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(17 << 20).unwrap();
    drop(f);
    let o = trnconf(&["coverage", "--markdown", s(&big), "--results", s(&json)]);
    assert_bad_input(&o, "big.md");
    assert_eq!(std::fs::metadata(&big).unwrap().len(), 17 << 20);
    // A FIFO: written (a reader gets the page), not read first, which would hang.
    let fifo = dir.path().join("page.fifo");
    if std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success())
    {
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(&fifo).unwrap())
        };
        let o = trnconf(&["coverage", "--markdown", s(&fifo), "--results", s(&json)]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        assert!(reader.join().unwrap().contains("relu"));
    }
}

/// Every committed golden passes the loader's checks of its own consistency: the call fits the
/// overload's schema, the check kind is the op's, and the stored CPU output is within its own
/// bound of its oracle (docs/golden-format.md). A file that fails is named with its reason.
#[test]
fn every_committed_golden_is_consistent() {
    let index = trnconf::case::GoldenIndex::load(&trnconf::default_golden_dir()).expect("committed goldens");
    let bad: Vec<String> = index
        .cases
        .iter()
        .filter_map(|e| trnconf::case::Case::load_entry(&index.dir, e).err())
        .map(|e| e.to_string())
        .collect();
    assert!(
        bad.is_empty(),
        "{} inconsistent goldens:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// A committed golden whose stored CPU output is replaced by garbage (its oracle untouched):
/// inconsistent, an error naming the file, never an "accurate" pass.
#[test]
fn a_golden_whose_cpu_output_is_off_its_own_oracle_is_an_error() {
    let src = trnconf::default_golden_dir();
    let index = trnconf::case::GoldenIndex::load(&src).unwrap();
    let entry = index
        .cases
        .iter()
        .find(|e| {
            e.op == "add.Tensor"
                && e.dtype == "f32"
                && trnconf::case::Case::load_entry(&src, e).is_ok_and(|c| {
                    matches!(
                        c.oracles.get("output.0"),
                        Some(trnconf::accuracy::Oracle::Values { bound, .. }) if bound.kind() == "arithmetic"
                    )
                })
        })
        .expect("a committed add.Tensor f32 case with an arithmetic-bound oracle");
    let bytes = std::fs::read(src.join(&entry.file)).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let mut owned: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    for (name, _, _, data) in &mut owned {
        if name == "output.0" {
            for c in data.chunks_exact_mut(4) {
                let x = f32::from_le_bytes(c.try_into().unwrap());
                c.copy_from_slice(&(x * 1.01 + 1.0).to_le_bytes());
            }
        }
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = owned
        .iter()
        .map(|(n, d, s, b)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap(),
            )
        })
        .collect();
    let dir = TempDir::new("safety-consistency");
    let golden = dir.path().join("g");
    let file = golden.join(&entry.file);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, safetensors::serialize(views, header.metadata().clone()).unwrap()).unwrap();
    let one = serde_json::json!({"format": 2, "torch": "test", "cases": [entry]});
    std::fs::write(golden.join("index.json"), one.to_string()).unwrap();
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
    let c = &read_json(&json)["cases"][0];
    assert_eq!(c["status"], "error", "{c}");
    let msg = c["message"].as_str().unwrap();
    assert!(
        msg.contains("inconsistent golden") && msg.contains(&entry.file),
        "{msg}"
    );
}
