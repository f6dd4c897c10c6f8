//! Whole-model forwards on the simulator next to PyTorch CPU eager on the same graph, measured
//! in the same run (issue 15, docs/performance.md "Models"):
//! - `gpt2_block`: one GPT-2-small decoder block (d = 768, 12 heads, sequence 128);
//! - `resnet18_224`: torchvision ResNet-18, 224 × 224, batch 1.
//!
//! `cargo bench -p trnconf --bench models` (`-- gpt2_block` for one model). The simulator side is
//! exactly `trnconf model run`'s chained run ([`trnconf::model::run_forward`]): every node lowered
//! and simulated on a device session, intermediates left in simulated HBM, the model's outputs
//! read back and compared with the stored references (a forward that is wrong fails the bench).
//! The baseline is golden/models/replay.py: the same Core ATen graph, node by node as
//! `torch.ops.aten` calls, on one thread (`$TRNCONF_PYTHON`, else `python3`; without torch the
//! baseline is reported missing, loudly, and no ratio is printed).
//!
//! Harness: one warm-up forward, then simulator forward and a PyTorch child (one warm-up, five
//! timed forwards) alternately for three rounds, so both see the same machine load; medians.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use trnconf::executor::SimExecutor;
use trnconf::model::{self, Model};
use trnsim::TargetName;

const ROUNDS: usize = 3;
const MODELS: &[&str] = &["gpt2_block", "resnet18_224"];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../golden/models")
}

/// One PyTorch child: best and median of its timed forwards, in ms.
fn torch_forward(dir: &Path) -> Result<(f64, f64, String), String> {
    let python = std::env::var("TRNCONF_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .arg(models_dir().join("replay.py"))
        .arg(dir)
        .args(["--repeat", "5"])
        .env("OMP_NUM_THREADS", "1")
        .env("MKL_NUM_THREADS", "1")
        .output()
        .map_err(|e| format!("{python}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{python} replay.py failed: {}",
            err.lines().last().unwrap_or("(no output)")
        ));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("replay.py printed no JSON: {e}"))?;
    let f = |k: &str| v[k].as_f64().ok_or_else(|| format!("replay.py: no `{k}`"));
    let diff = f("max_abs_diff_vs_reference")?;
    let info = format!(
        "torch {}, {} thread(s), {}, max |replay − reference| {diff:.1e}",
        v["torch"].as_str().unwrap_or("?"),
        v["threads"],
        v["cpu_capability"].as_str().unwrap_or("?")
    );
    Ok((f("best_ms")?, f("median_ms")?, info))
}

fn main() {
    let wanted: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let executor = SimExecutor::new(TargetName::Trn1);
    for name in MODELS
        .iter()
        .filter(|m| wanted.is_empty() || wanted.iter().any(|w| w == *m))
    {
        let dir = models_dir().join(name);
        let m = Model::load(&dir).unwrap_or_else(|e| panic!("{e}"));
        let forward = || {
            let t = Instant::now();
            let r = model::run_forward(&m, &executor).unwrap_or_else(|e| panic!("{name}: {e}"));
            let bad: Vec<&String> = r.end_to_end.iter().filter(|(_, s)| !s.passed).map(|(n, _)| n).collect();
            assert!(bad.is_empty(), "{name}: outputs {bad:?} are outside tolerance");
            (t.elapsed().as_secs_f64() * 1e3, r)
        };
        let (_, warm) = forward();
        let (mut sim, mut sim_fwd, mut lower, mut simulate) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut torch_med, mut torch_best) = (Vec::new(), Vec::new());
        let mut torch_info = Err(String::new());
        for _ in 0..ROUNDS {
            let (total, r) = forward();
            sim.push(total);
            sim_fwd.push(r.lower_ms + r.simulate_ms);
            lower.push(r.lower_ms);
            simulate.push(r.simulate_ms);
            match torch_forward(&dir) {
                Ok((best, med, info)) => {
                    torch_best.push(best);
                    torch_med.push(med);
                    torch_info = Ok(info);
                }
                Err(e) => torch_info = Err(e),
            }
        }
        let fwd = median(sim_fwd);
        println!(
            "{name}: {} nodes; estimated device time {:.0} µs; leaves put {:.1} MB, outputs read {:.1} MB",
            warm.nodes.len(),
            warm.est_us,
            warm.transfers
                .as_ref()
                .map_or(0.0, |t| t.host_to_device_bytes as f64 / 1e6),
            warm.transfers
                .as_ref()
                .map_or(0.0, |t| t.device_to_host_bytes as f64 / 1e6)
        );
        println!(
            "  simulator forward: {fwd:.1} ms (lowering {:.1} + simulation {:.1}); with loading the leaves \
             and reading the outputs {:.1} ms",
            median(lower),
            median(simulate),
            median(sim)
        );
        match torch_info {
            Ok(info) if torch_med.len() == ROUNDS => {
                let t = median(torch_med);
                println!(
                    "  PyTorch CPU eager, same graph: {t:.1} ms (best {:.1}) [{info}]",
                    torch_best.iter().copied().fold(f64::INFINITY, f64::min)
                );
                println!(
                    "  ratio simulator / PyTorch: {:.1}x (target <= 10x: {})",
                    fwd / t,
                    if fwd / t <= 10.0 { "met" } else { "MISSED" }
                );
            }
            Ok(_) | Err(_) => println!(
                "  NO PyTorch baseline (set TRNCONF_PYTHON to a python with torch): {}",
                torch_info.err().unwrap_or_default()
            ),
        }
    }
}
