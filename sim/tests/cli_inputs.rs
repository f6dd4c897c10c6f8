//! `trnsim run PROGRAM --inputs F.safetensors` end to end through the built binary: a tensor
//! header whose shape or data offsets are not non-negative integers is refused with a message
//! naming the file and the tensor, never read as some other shape.

use std::path::{Path, PathBuf};
use std::process::Command;

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("trnsim-cli-inputs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A safetensors file with one header entry per `(name, dtype, shape JSON, offsets JSON)` and
/// `data` after it.
fn write_inputs(path: &Path, entries: &[(&str, &str, &str, &str)], data: &[u8]) {
    let body: Vec<String> = entries
        .iter()
        .map(|(n, d, s, o)| format!("\"{n}\":{{\"dtype\":\"{d}\",\"shape\":{s},\"data_offsets\":{o}}}"))
        .collect();
    let mut header = format!("{{{}}}", body.join(",")).into_bytes();
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header);
    bytes.extend(data);
    std::fs::write(path, bytes).unwrap();
}

/// A one-input program: `x` [4, 5] f32 copied to `y` by DMA.
fn program(dir: &Path) -> PathBuf {
    use trnsim::*;
    let mut prog = Program::new(TargetName::Trn1);
    prog.declare("x", DType::F32, &[4, 5], HbmRole::Input);
    prog.declare("y", DType::F32, &[4, 5], HbmRole::Output);
    prog.push(
        Engine::Dma,
        Op::DmaCopy(DmaCopy {
            dst: AccessPattern::hbm("y", DType::F32, 0, 4, 5, vec![[1, 5]]),
            src: AccessPattern::hbm("x", DType::F32, 0, 4, 5, vec![[1, 5]]),
            accumulate: false,
            indirect: None,
        }),
    );
    let p = dir.join("copy.json");
    std::fs::write(&p, prog.to_json()).unwrap();
    p
}

fn trnsim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_trnsim"))
        .args(args)
        .output()
        .expect("run trnsim")
}

#[test]
fn bad_shape_and_offsets_in_inputs_are_refused() {
    let dir = tmp("shape");
    let prog = program(&dir);
    let data = vec![0u8; 80];
    for (shape, offsets, says) in [
        ("[4,-1,5]", "[0,80]", "non-negative integer"),
        ("[4,5.5]", "[0,80]", "non-negative integer"),
        ("[4,\"5\"]", "[0,80]", "non-negative integer"),
        ("[4,5]", "[-8,80]", "byte offsets"),
        ("[4,5]", "[0]", "data_offsets"),
        ("[4,5]", "[0,40]", "bytes for shape"),
    ] {
        let inputs = dir.join("in.safetensors");
        write_inputs(&inputs, &[("x", "F32", shape, offsets)], &data);
        let o = trnsim(&["run", prog.to_str().unwrap(), "--inputs", inputs.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{shape} {offsets}: accepted\n{err}");
        assert!(
            o.status.code().is_some(),
            "{shape} {offsets}: killed by a signal\n{err}"
        );
        assert!(
            err.contains(says) && err.contains("in.safetensors") && err.contains("`x`"),
            "{shape} {offsets}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
