//! No tracked file names an absolute path outside the repository (a venv, a home directory, a
//! shared folder of one machine): a fresh clone on another machine has none of them. System
//! paths, the hardware runner's documented Neuron venv and temporary-directory examples are
//! allowed by tests/absolute-paths.allow.
//!
//! An absolute path here is `/` + a letter after a word boundary (start of line, space, quote,
//! bracket, `=`, `:`, `,`, `!` or a shell redirect), with at least two components (like `/dev/null`). The
//! `.gitignore` is skipped: its leading `/` anchors a pattern at the repository root.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn allowed() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("tests/absolute-paths.allow")).expect("the allow-list");
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

fn is_allowed(path: &str, allow: &[String]) -> bool {
    allow.iter().any(|a| match a.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => path == a,
    })
}

/// The absolute paths in `text`.
fn absolute_paths(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let path_char = |c: u8| c.is_ascii_alphanumeric() || b"_.+*{}$-/".contains(&c);
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let boundary = i == 0
            || b" \t\n\"'`([=:,{!".contains(&b[i - 1])
            || (b[i - 1] == b'>' && (i < 2 || b" &0123456789".contains(&b[i - 2])));
        if b[i] == b'/' && boundary && b.get(i + 1).is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_') {
            let mut j = i + 1;
            while j < b.len() && path_char(b[j]) {
                j += 1;
            }
            let p = text[i..j].trim_end_matches(['.', ',', '/']);
            if p[1..].contains('/') {
                out.push(p.to_string());
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

#[test]
fn the_scanner_finds_absolute_paths_only() {
    // Built at run time, so that this file does not name the paths it tests with.
    let (venv, home) = (format!("/{}/venv/bin/python", "work"), format!("/{}/me/x", "home"));
    let text = format!(
        "a {venv} b, `{home}`; 2>/dev/null see conformance/src and https://x.org/a/b <dir>/golden/index.json /s"
    );
    assert_eq!(absolute_paths(&text), [venv.as_str(), home.as_str(), "/dev/null"]);
}

#[test]
fn no_tracked_file_names_an_absolute_path_outside_the_repository() {
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root())
        .output()
        .expect("this test needs git (it reads the tracked files)");
    assert!(
        out.status.success(),
        "git ls-files: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let allow = allowed();
    let mut bad = Vec::new();
    let mut files = 0;
    for f in String::from_utf8_lossy(&out.stdout)
        .split('\0')
        .filter(|f| !f.is_empty())
    {
        if f == ".gitignore" || f.ends_with(".safetensors") {
            continue;
        }
        // Binary files and files deleted in the working tree are not text to scan.
        let Ok(text) = std::fs::read_to_string(root().join(f)) else {
            continue;
        };
        files += 1;
        for (n, line) in text.lines().enumerate() {
            for p in absolute_paths(line) {
                if !is_allowed(&p, &allow) {
                    bad.push(format!("{f}:{}: {p}", n + 1));
                }
            }
        }
    }
    assert!(files > 100, "only {files} tracked text files read");
    assert!(
        bad.is_empty(),
        "absolute paths outside the repository (write them relative, or add a system path to tests/absolute-paths.allow with its reason):\n{}",
        bad.join("\n")
    );
}
