//! `trnconf run --junit`: the XML is well formed and has the structure of the common JUnit XSD
//! (what GitHub Actions reporters and Jenkins read): testsuites → testsuite(name, tests,
//! failures, errors, skipped, time) → testcase(name, classname, time), with <failure>, <error>
//! and <skipped> as the statuses require and counts that agree with the children.

mod common;

use common::*;
use std::path::{Path, PathBuf};

/// A fixture with one case of each status: pass, fail, xfail, skip, error.
fn every_status(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let golden = dir.join("g");
    use trnconf::fixture::{CaseBuilder, write_golden};
    use trnconf::tensor::TorchDType::F32;
    let relu = |n: usize, out: &[f64]| {
        CaseBuilder::new("relu", "f32", "hand", n)
            .input(F32, &[2], &[1.0, -1.0])
            .output(F32, &[2], out)
    };
    // Expectations select cases by what they are: the xfail case has a non-finite input, the
    // skipped one a 0-d input.
    let cases = [
        relu(0, &[1.0, 0.0]),
        relu(1, &[2.0, 0.0]),
        CaseBuilder::new("relu", "f32", "hand", 2)
            .input(F32, &[2], &[f64::INFINITY, -1.0])
            .output(F32, &[2], &[3.0, 0.0]),
        CaseBuilder::new("relu", "f32", "hand", 3)
            .input(F32, &[], &[1.0])
            .output(F32, &[], &[1.0]),
        relu(4, &[1.0, 0.0]),
    ];
    let broken = golden.join(cases[4].rel_file());
    write_golden(&golden, &cases);
    std::fs::write(&broken, b"not a safetensors file").unwrap();
    let ex = dir.join("ex.toml");
    std::fs::write(
        &ex,
        "[[expect]]\nops = [\"relu\"]\nwhen = [\"non-finite-input\"]\nstatus = \"xfail\"\nreason = \"precision\"\ntext = \"a <known> & expected difference\"\n\n\
         [[expect]]\nops = [\"relu\"]\nwhen = [\"zero-dim-input\"]\nstatus = \"skip\"\nreason = \"simulator-gap\"\ntext = \"skipped for the test\"\n",
    )
    .unwrap();
    (golden, ex)
}

fn num(e: &Element, k: &str) -> f64 {
    e.attr(k)
        .unwrap_or_else(|| panic!("<{}> has no {k}", e.name))
        .parse()
        .unwrap_or_else(|_| panic!("{k} is not a number"))
}

/// `trnconf run --junit` over a golden directory of every status (in a temporary directory named
/// after `tag`, which holds the JUnit file): the run exits 1.
fn junit_of_every_status(tag: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new(tag);
    let (golden, ex) = every_status(dir.path());
    let xml_path = dir.path().join("r.xml");
    let o = trnconf(&[
        "run",
        "--golden",
        s(&golden),
        "--expectations",
        s(&ex),
        "--junit",
        s(&xml_path),
    ]);
    assert_eq!(code(&o), 1, "{}\n{}", stdout(&o), stderr(&o));
    (dir, xml_path)
}

#[test]
fn junit_has_the_xsd_structure() {
    let (_dir, xml_path) = junit_of_every_status("junit");
    let text = std::fs::read_to_string(&xml_path).unwrap();
    assert!(text.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"));
    let root = parse_xml(&text).unwrap_or_else(|e| panic!("malformed XML: {e}\n{text}"));
    assert_eq!(root.name, "testsuites");
    let suites = root.all("testsuite");
    assert_eq!(suites.len(), root.children.len(), "only testsuite children");
    assert_eq!(suites.len(), 1, "relu is one op group");
    let (mut tests, mut failures, mut errors, mut skipped) = (0.0, 0.0, 0.0, 0.0);
    let mut seen = std::collections::BTreeMap::new();
    for suite in &suites {
        assert!(suite.attr("name").is_some_and(|n| !n.is_empty()));
        let cases = suite.all("testcase");
        assert_eq!(cases.len(), suite.children.len(), "only testcase children");
        let count = |child: &str| cases.iter().filter(|c| !c.all(child).is_empty()).count() as f64;
        assert_eq!(num(suite, "tests"), cases.len() as f64);
        assert_eq!(num(suite, "failures"), count("failure"));
        assert_eq!(num(suite, "errors"), count("error"));
        assert_eq!(num(suite, "skipped"), count("skipped"));
        assert!(num(suite, "time") >= 0.0);
        assert!(
            suite
                .attr("timestamp")
                .is_some_and(|t| t.len() == 19 && t.as_bytes()[10] == b'T')
        );
        for c in &cases {
            assert!(c.attr("name").is_some_and(|n| !n.is_empty()));
            assert!(c.attr("classname").is_some_and(|n| n.starts_with("trnconf.")));
            assert!(num(c, "time") >= 0.0);
            assert!(c.children.len() <= 1, "at most one of failure/error/skipped");
            for child in &c.children {
                assert!(
                    ["failure", "error", "skipped"].contains(&child.name.as_str()),
                    "{}",
                    child.name
                );
                assert!(child.attr("message").is_some(), "<{}> has a message", child.name);
            }
            seen.insert(
                c.attr("name").unwrap().to_string(),
                c.children.first().map(|e| (*e).clone()),
            );
        }
        tests += num(suite, "tests");
        failures += num(suite, "failures");
        errors += num(suite, "errors");
        skipped += num(suite, "skipped");
    }
    assert_eq!(
        (
            num(&root, "tests"),
            num(&root, "failures"),
            num(&root, "errors"),
            num(&root, "skipped")
        ),
        (tests, failures, errors, skipped)
    );
    assert_eq!((tests, failures, errors, skipped), (5.0, 1.0, 1.0, 2.0));
    assert!(seen["relu::f32::hand_0"].is_none(), "a pass is a bare testcase");
    let failure = seen["relu::f32::hand_1"].as_ref().unwrap();
    assert_eq!(failure.name, "failure");
    assert!(
        failure.text.contains("max_ulp=") && failure.text.contains("first mismatch at [0]"),
        "{}",
        failure.text
    );
    let xfail = seen["relu::f32::hand_2"].as_ref().unwrap();
    assert_eq!(xfail.name, "skipped");
    assert!(
        xfail
            .attr("message")
            .unwrap()
            .contains("a <known> & expected difference")
    );
    assert_eq!(seen["relu::f32::hand_3"].as_ref().unwrap().name, "skipped");
    let error = seen["relu::f32::hand_4"].as_ref().unwrap();
    assert_eq!(error.name, "error");
    assert!(error.attr("message").unwrap().contains("relu__f32__hand_4.safetensors"));
}

#[test]
fn the_xml_reader_rejects_malformed_documents() {
    assert!(parse_xml("<a><b></a>").is_err());
    assert!(parse_xml("<a x=1/>").is_err());
    assert!(parse_xml("<a>&nope;</a>").is_err());
    assert!(parse_xml("<a/><b/>").is_err());
    assert!(parse_xml("<a x=\"1\"><b>t &amp; u</b></a>").is_ok());
}

/// The JUnit file validates against the schema CI reporters read (tests/data/junit.xsd) with
/// libxml2's `xmllint` (`.ci/run` installs libxml2-utils). Without xmllint the test fails in CI
/// and skips loudly elsewhere.
#[test]
fn junit_validates_against_the_xsd() {
    let have_xmllint = std::process::Command::new("xmllint").arg("--version").output().is_ok();
    if !have_xmllint {
        let msg = "xmllint not found: cannot validate JUnit against its XSD (apt-get install libxml2-utils)";
        if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false") {
            panic!("{msg}");
        }
        eprintln!("SKIPPED LOUDLY: {msg}");
        return;
    }
    let (dir, xml_path) = junit_of_every_status("junit-xsd");
    let xsd = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/junit.xsd");
    let v = std::process::Command::new("xmllint")
        .args(["--noout", "--schema", s(&xsd), s(&xml_path)])
        .output()
        .expect("xmllint runs");
    assert!(
        v.status.success(),
        "JUnit output does not validate:\n{}\n{}",
        String::from_utf8_lossy(&v.stderr),
        std::fs::read_to_string(&xml_path).unwrap_or_default()
    );
    // The schema really constrains: a testcase without its required `time` must not validate.
    let broken = std::fs::read_to_string(&xml_path)
        .unwrap()
        .replacen(" time=\"", " tiem=\"", 3);
    let broken_path = dir.path().join("broken.xml");
    std::fs::write(&broken_path, broken).unwrap();
    let v = std::process::Command::new("xmllint")
        .args(["--noout", "--schema", s(&xsd), s(&broken_path)])
        .output()
        .expect("xmllint runs");
    assert!(!v.status.success(), "a testcase without `time` validated");
}
