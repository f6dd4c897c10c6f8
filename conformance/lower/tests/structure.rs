//! The lowering's structural rules (docs/architecture.md, "tile.rs"): one instruction builder.
//! No family defines its own `dma`/`ts`/`tt` constructor or a per-file `*_arg` call-argument
//! helper, and no family builds by hand an instruction struct that the builder has a
//! constructor for. A new file or a new site that breaks a rule fails here, naming file and line.

use std::path::Path;

/// Instruction structs with a constructor in `tile.rs` that takes every field (the constructor's
/// name in brackets). Forms the constructors do not cover (`reverse_pred`, a second reversed
/// operand, accumulation) are built by hand and are not listed.
const BUILT_BY_THE_BUILDER: &[(&str, &str)] = &[
    ("Op::TensorCopy(", "tile::copy"),
    ("Op::Memset(", "tile::memset"),
    ("Op::TensorTensor(", "tile::tt"),
    ("Op::Reciprocal(", "tile::recip"),
];

fn family_sources() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the lowering's src/") {
        let path = entry.expect("a src/ entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.extension().is_some_and(|e| e == "rs") && name != "tile.rs" {
            out.push((name, std::fs::read_to_string(&path).expect("a source file")));
        }
    }
    out.sort();
    assert!(
        out.len() > 20,
        "found only {} lowering sources in {}",
        out.len(),
        dir.display()
    );
    out
}

/// `file:line: text` of every line of the family sources for which `bad` holds.
fn offending(bad: impl Fn(&str) -> bool) -> Vec<String> {
    let mut hits = Vec::new();
    for (file, text) in family_sources() {
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if bad(code) {
                hits.push(format!("{file}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    hits
}

/// The name of the function a line defines, if it defines one.
fn defined_fn(code: &str) -> Option<&str> {
    let rest = code.trim_start();
    let rest = rest
        .strip_prefix("pub(crate) ")
        .or(rest.strip_prefix("pub(super) "))
        .unwrap_or(rest);
    let rest = rest.strip_prefix("pub ").unwrap_or(rest);
    let name = rest.strip_prefix("fn ")?;
    let end = name.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&name[..end])
}

#[test]
fn no_family_defines_its_own_instruction_constructor() {
    let hits = offending(|code| matches!(defined_fn(code), Some("dma" | "ts" | "tt")));
    assert!(
        hits.is_empty(),
        "instruction constructors outside tile.rs:\n{}",
        hits.join("\n")
    );
}

#[test]
fn no_family_defines_a_call_argument_helper() {
    let hits = offending(|code| defined_fn(code).is_some_and(|n| n.ends_with("_arg")));
    assert!(
        hits.is_empty(),
        "per-file argument helpers (use LowerRequest::arg/opt/opt_or/tensor):\n{}",
        hits.join("\n")
    );
}

#[test]
fn no_family_builds_by_hand_what_the_builder_constructs() {
    for (literal, constructor) in BUILT_BY_THE_BUILDER {
        let hits = offending(|code| code.contains(literal));
        assert!(
            hits.is_empty(),
            "{literal} built by hand (use {constructor}):\n{}",
            hits.join("\n")
        );
    }
}

#[test]
fn the_rules_see_a_violation() {
    // The line scanners themselves: each rule recognises what it forbids.
    assert_eq!(defined_fn("fn dma(dst: AccessPattern) -> Op {"), Some("dma"));
    assert_eq!(
        defined_fn("    pub(super) fn dim_arg(req: &R) -> i64 {"),
        Some("dim_arg")
    );
    assert_eq!(defined_fn("    let tt = 3;"), None);
    assert!("        e.push(v, Op::TensorCopy(TensorCopy { dst, src }));".contains(BUILT_BY_THE_BUILDER[0].0));
}
