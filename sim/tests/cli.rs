//! The `trnsim` binary end to end on programs whose declarations alone are too big: refused with
//! the executor's typed error and exit status 1, before anything is allocated for them (a 4 TiB
//! input was zero-filled first, and the process aborted on the failed allocation).

use std::process::Command;

fn run_program(json: &str, name: &str) -> std::process::Output {
    let dir = std::env::temp_dir().join(format!("trnsim-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("p.json");
    std::fs::write(&path, json).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_trnsim"))
        .arg("run")
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    out
}

#[test]
fn a_huge_declared_input_is_a_typed_error_not_an_abort() {
    // 2^20 × 2^20 f32 = 4 TiB, far past the 4 GiB limit; and a shape whose byte count overflows.
    for (name, shape) in [
        ("tib", "[1048576, 1048576]"),
        ("overflow", "[4294967296, 4294967296, 16]"),
    ] {
        let json = format!(
            r#"{{"target": "trn1", "hbm": [{{"name": "x", "dtype": "f32", "shape": {shape}, "role": "input"}}], "instructions": []}}"#
        );
        let out = run_program(&json, name);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert!(
            err.contains("exceed the executor's limit") && err.contains("`x`"),
            "{name}: {err}"
        );
        assert!(!err.contains("memory allocation"), "{name}: {err}");
    }
    // A small program with the same shape of declaration still runs (the check is not a refusal of
    // inputs as such).
    let json = r#"{"target": "trn1", "hbm": [{"name": "x", "dtype": "f32", "shape": [4, 8], "role": "input"}], "instructions": []}"#;
    let out = run_program(json, "small");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}
