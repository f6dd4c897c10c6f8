//! The race detector end to end: lowered programs of committed cases, each with one `wait`
//! removed, written to a program file and run by the `trnsim run` binary, must fail with the race
//! error naming both instructions — for read-after-write, write-after-read and write-after-write,
//! in SBUF, PSUM and HBM. The unmodified programs run clean (the suite-wide check is the golden
//! test: every case runs with the detector on).

use std::collections::BTreeSet;
use std::path::PathBuf;
use trnconf::case::{Case, GoldenIndex};
use trnsim::deps::{HbmIndex, Space, footprint};
use trnsim::{ErrorKind, Executor, HbmRole, HostTensor, Program};

/// `target/<profile>/trnsim`, next to this test's `deps/` directory. `cargo test --workspace`
/// builds it; built on demand otherwise.
fn trnsim_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let p = dir.join(format!("trnsim{}", std::env::consts::EXE_SUFFIX));
    if !p.is_file() {
        let profile_release = dir.ends_with("release");
        let mut cmd = std::process::Command::new(env!("CARGO"));
        cmd.args(["build", "-p", "trnsim", "--bin", "trnsim"]);
        if profile_release {
            cmd.arg("--release");
        }
        assert!(cmd.status().unwrap().success(), "building trnsim");
    }
    assert!(p.is_file(), "{} missing", p.display());
    p
}

fn zero_inputs(p: &Program) -> std::collections::BTreeMap<String, HostTensor> {
    p.hbm
        .iter()
        .filter(|d| d.role == HbmRole::Input)
        .map(|d| {
            let n: usize = d.shape.iter().product();
            let t = HostTensor {
                dtype: d.dtype,
                shape: d.shape.clone(),
                data: vec![0; n * d.dtype.size()],
            };
            (d.name.clone(), t)
        })
        .collect()
}

fn space_name(s: Space) -> &'static str {
    match s {
        Space::Sbuf(_) => "SBUF",
        Space::Psum(_) => "PSUM",
        Space::Hbm(_) => "HBM",
    }
}

/// (instruction, waited-for instruction, hazard, memory) for every wait whose removal the
/// in-process detector reports as exactly that pair.
fn removable_waits(p: &Program) -> Vec<(usize, u32, &'static str, &'static str)> {
    let hbm = HbmIndex::new(p);
    let inputs = zero_inputs(p);
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, inst) in p.instructions.iter().enumerate() {
        for &w in &inst.wait {
            let later = footprint(&inst.op, &hbm);
            let earlier = footprint(&p.instructions[w as usize].op, &hbm);
            let Some((space, kind)) = later.iter().find_map(|a| {
                earlier
                    .iter()
                    .find(|e| (a.write || e.write) && a.overlaps(e))
                    .map(|e| (a.space, (e.write, a.write)))
            }) else {
                continue;
            };
            let hazard = match kind {
                (true, false) => "read-after-write",
                (false, true) => "write-after-read",
                _ => "write-after-write",
            };
            if !seen.insert((hazard, space_name(space))) {
                continue;
            }
            let mut broken = p.clone();
            broken.instructions[i].wait.retain(|&x| x != w);
            match Executor::new(p.target).run(&broken, &inputs) {
                Err(e)
                    if e.index == Some(i)
                        && matches!(&e.kind, ErrorKind::Race(r) if r.hazard == hazard && r.other == w as usize) =>
                {
                    out.push((i, w, hazard, space_name(space)));
                }
                _ => {
                    seen.remove(&(hazard, space_name(space)));
                }
            }
        }
    }
    out
}

#[test]
fn removing_one_wait_makes_trnsim_run_report_the_race() {
    let index = GoldenIndex::load(&trnconf::default_golden_dir()).expect("committed goldens");
    // Matmul and convolution (SBUF and PSUM traffic); randperm, an FFT and a sort (HBM scratch
    // round trips).
    let wanted = [
        "mm::bf16::stress_0",
        "convolution::f32::stress_0",
        "randperm::i32::hand_0",
        "_fft_c2r::c64::stress_0",
        "sort::f32::hand_0",
    ];
    let bin = trnsim_binary();
    let dir = std::env::temp_dir().join(format!("trn-races-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut covered = BTreeSet::new();
    for id in wanted {
        let Some(entry) = index.cases.iter().find(|c| c.id == id) else {
            continue;
        };
        let case = Case::load_entry(&index.dir, entry).unwrap();
        let p = trnconf::lower::lower(&case, trnsim::TargetName::Trn1).unwrap().program;
        let clean = dir.join("clean.json");
        std::fs::write(&clean, p.to_json()).unwrap();
        let out = std::process::Command::new(&bin)
            .arg("run")
            .arg(&clean)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{id} as lowered: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for (i, w, hazard, memory) in removable_waits(&p) {
            let mut broken = p.clone();
            broken.instructions[i].wait.retain(|&x| x != w);
            let file = dir.join(format!("{}-{i}-{w}.json", id.replace("::", "_")));
            std::fs::write(&file, broken.to_json()).unwrap();
            let out = std::process::Command::new(&bin).arg("run").arg(&file).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{id}: wait {w} of #{i} removed: {err}");
            let later = format!("instruction #{i} (");
            let earlier = format!("{hazard} race with instruction #{w} (");
            assert!(err.contains(&later) && err.contains(&earlier), "{id}: {err}");
            assert!(err.contains(memory), "{id}: {err}");
            covered.insert((hazard, memory));
        }
    }
    let hazards: BTreeSet<&str> = covered.iter().map(|c| c.0).collect();
    let memories: BTreeSet<&str> = covered.iter().map(|c| c.1).collect();
    assert_eq!(
        hazards,
        BTreeSet::from(["read-after-write", "write-after-read", "write-after-write"]),
        "{covered:?}"
    );
    assert_eq!(memories, BTreeSet::from(["HBM", "PSUM", "SBUF"]), "{covered:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
