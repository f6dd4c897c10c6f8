//! Helpers shared by the CLI and report tests: running the built `trnconf` binary, small golden
//! fixtures, and a minimal XML reader (enough to check the JUnit structure without a crate).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use trnconf::fixture::{CaseBuilder, write_golden};
use trnconf::tensor::TorchDType::F32;

pub use trnconf::fixture::TempDir;

/// Runs the binary with `args`; stdin closed, never a terminal.
pub fn trnconf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trnconf"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run trnconf")
}

pub fn code(o: &Output) -> i32 {
    o.status.code().expect("exited normally")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A bad-input exit: code 2 and exactly one line on stderr.
#[track_caller]
pub fn assert_bad_input(o: &Output, mentions: &str) {
    let err = stderr(o);
    assert_eq!(code(o), 2, "stdout: {}\nstderr: {err}", stdout(o));
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(err.contains(mentions), "{err:?} should mention {mentions:?}");
}

/// A golden dir of two `relu` f32 cases: `hand_0` right, `hand_1` with a wrong golden output.
pub fn relu_golden(dir: &Path) -> PathBuf {
    let ok = CaseBuilder::new("relu", "f32", "hand", 0)
        .input(F32, &[4], &[-1.0, 0.5, 2.0, -3.0])
        .output(F32, &[4], &[0.0, 0.5, 2.0, 0.0]);
    let wrong = CaseBuilder::new("relu", "f32", "hand", 1)
        .input(F32, &[3], &[1.0, -2.0, 3.0])
        .output(F32, &[3], &[1.0, 0.0, 4.0]);
    write_golden(dir, &[ok, wrong]);
    dir.to_path_buf()
}

/// An expectations file with no entries.
pub fn no_expectations(dir: &Path) -> PathBuf {
    let p = dir.join("none.toml");
    std::fs::write(&p, "").unwrap();
    p
}

pub fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A results file with the timings removed (they are the only fields that may differ between
/// runs of the same cases).
pub fn without_timings(mut v: serde_json::Value) -> serde_json::Value {
    let o = v.as_object_mut().unwrap();
    o.remove("wall_s");
    o.remove("peak_rss_kib");
    for c in o["cases"].as_array_mut().unwrap() {
        c.as_object_mut().unwrap().remove("wall_ms");
    }
    v
}

// ---------------------------------------------------------------------------------------------
// A minimal XML reader

#[derive(Debug, Clone)]
pub struct Element {
    pub name: String,
    pub attrs: BTreeMap<String, String>,
    pub children: Vec<Element>,
    pub text: String,
}

impl Element {
    pub fn attr(&self, k: &str) -> Option<&str> {
        self.attrs.get(k).map(|s| s.as_str())
    }

    pub fn all(&self, name: &str) -> Vec<&Element> {
        self.children.iter().filter(|c| c.name == name).collect()
    }
}

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let end = rest[i..].find(';').ok_or("unterminated entity")? + i;
        match &rest[i + 1..end] {
            "amp" => out.push('&'),
            "lt" => out.push('<'),
            "gt" => out.push('>'),
            "quot" => out.push('"'),
            "apos" => out.push('\''),
            e => return Err(format!("unknown entity &{e};")),
        }
        rest = &rest[end + 1..];
    }
    if rest.contains('<') {
        return Err("raw `<` in text".into());
    }
    out.push_str(rest);
    Ok(out)
}

/// Parses a document (prolog, one root element; no comments, CDATA or DTD — the writer emits
/// none). Checks well-formedness: matching tags, quoted attributes, known entities.
pub fn parse_xml(doc: &str) -> Result<Element, String> {
    let mut rest = doc.trim_start();
    if let Some(r) = rest.strip_prefix("<?xml") {
        rest = &r[r.find("?>").ok_or("unterminated prolog")? + 2..];
    }
    let mut stack: Vec<Element> = Vec::new();
    let mut root = None;
    loop {
        let lt = match rest.find('<') {
            Some(i) => i,
            None => {
                if !rest.trim().is_empty() {
                    return Err("text after the root".into());
                }
                break;
            }
        };
        let text = unescape(&rest[..lt])?;
        if let Some(top) = stack.last_mut() {
            top.text.push_str(&text);
        } else if !text.trim().is_empty() {
            return Err("text outside the root".into());
        }
        let gt = rest[lt..].find('>').ok_or("unterminated tag")? + lt;
        let tag = &rest[lt + 1..gt];
        rest = &rest[gt + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let e = stack.pop().ok_or("close without open")?;
            if e.name != name.trim() {
                return Err(format!("</{name}> closes <{}>", e.name));
            }
            match stack.last_mut() {
                Some(p) => p.children.push(e),
                None if root.is_some() => return Err("two root elements".into()),
                None => root = Some(e),
            }
            continue;
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let name_end = tag.find(char::is_whitespace).unwrap_or(tag.len());
        let mut e = Element {
            name: tag[..name_end].to_string(),
            attrs: BTreeMap::new(),
            children: vec![],
            text: String::new(),
        };
        let mut a = tag[name_end..].trim();
        while !a.is_empty() {
            let eq = a
                .find('=')
                .ok_or_else(|| format!("attribute without value in <{}>", e.name))?;
            let key = a[..eq].trim().to_string();
            let after = a[eq + 1..].trim_start();
            let q = after.chars().next().ok_or("missing value")?;
            if q != '"' && q != '\'' {
                return Err(format!("unquoted attribute {key}"));
            }
            let close = after[1..].find(q).ok_or("unterminated attribute")? + 1;
            if e.attrs.insert(key.clone(), unescape(&after[1..close])?).is_some() {
                return Err(format!("duplicate attribute {key}"));
            }
            a = after[close + 1..].trim_start();
        }
        if self_closing {
            match stack.last_mut() {
                Some(p) => p.children.push(e),
                None if root.is_some() => return Err("two root elements".into()),
                None => root = Some(e),
            }
        } else {
            stack.push(e);
        }
    }
    if !stack.is_empty() {
        return Err(format!("unclosed <{}>", stack.last().unwrap().name));
    }
    root.ok_or_else(|| "no root element".into())
}
