//! The lowering is a backend, not a harness: `trnlower` and the Python wheel (which depends on
//! the simulator and the lowering only) must not pull in the harness's crates.

use std::path::Path;

/// Crates only the harness (trnconf's CLI, runner and golden loader) may use.
const HARNESS_ONLY: &[&str] = &["clap", "rayon", "indicatif", "toml", "safetensors"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_lowering_crate_depends_on_no_harness_crate() {
    let manifest = std::fs::read_to_string(root().join("conformance/lower/Cargo.toml")).unwrap();
    let deps: Vec<&str> = manifest
        .split("[dependencies]")
        .nth(1)
        .expect("conformance/lower/Cargo.toml has [dependencies]")
        .lines()
        .take_while(|l| !l.trim_start().starts_with('['))
        .filter_map(|l| l.split(['=', '.']).next())
        .map(str::trim)
        .filter(|n| !n.is_empty() && !n.starts_with('#'))
        .collect();
    assert!(deps.contains(&"trnsim"), "trnlower builds on trnsim: {deps:?}");
    for bad in HARNESS_ONLY {
        assert!(!deps.contains(bad), "trnlower depends on the harness crate `{bad}`");
    }
}

/// The wheel's lock file lists every crate in its dependency tree (`cargo tree` in
/// conformance/python prints the same set).
#[test]
fn the_python_wheel_pulls_in_no_harness_crate() {
    let lock = std::fs::read_to_string(root().join("conformance/python/Cargo.lock")).unwrap();
    let names: Vec<&str> = lock
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .collect();
    assert!(names.contains(&"trnlower") && names.contains(&"trnsim"), "{names:?}");
    assert!(
        !names.contains(&"trnconf"),
        "the wheel must not depend on the harness crate trnconf"
    );
    for bad in HARNESS_ONLY {
        assert!(!names.contains(bad), "the wheel's dependency tree has `{bad}`");
    }
}
