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
//! The ratio is on the thread's CPU time of each side (user + system); wall-clock figures are
//! printed beside it (on a busy machine they grow with the other processes' share of the core).
//! The simulator's figure is the forward: lowering and simulating every node; putting the leaves
//! (recipe weights generated on the host) is reported apart, as the PyTorch side's weight
//! creation is not timed either.

use std::path::{Path, PathBuf};
use std::process::Command;
use trnconf::executor::SimExecutor;
use trnconf::model::{self, Model};
use trnsim::TargetName;

const ROUNDS: usize = 3;
const MODELS: &[&str] = &["gpt2_block", "resnet18_224"];

/// CPU time consumed by the calling thread in seconds (user + system), or NaN where unavailable.
/// Unlike wall time it does not grow when other processes take the core; the PyTorch side
/// reports the same clock (`time.thread_time`, one thread).
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn thread_cpu_s() -> f64 {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through the valid pointer it is given.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc == 0 {
        ts.sec as f64 + ts.nsec as f64 * 1e-9
    } else {
        f64::NAN
    }
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
fn thread_cpu_s() -> f64 {
    f64::NAN
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../golden/models")
}

/// What one PyTorch child measured: medians of wall and thread CPU time in ms, and a note.
struct TorchTimes {
    wall_ms: f64,
    cpu_ms: f64,
    info: String,
}

fn torch_forward(dir: &Path) -> Result<TorchTimes, String> {
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
    Ok(TorchTimes {
        wall_ms: f("median_ms")?,
        cpu_ms: f("cpu_median_ms")?,
        info: format!(
            "torch {}, {} thread(s), {}, max |replay − reference| {diff:.1e}",
            v["torch"].as_str().unwrap_or("?"),
            v["threads"],
            v["cpu_capability"].as_str().unwrap_or("?")
        ),
    })
}

fn main() {
    let wanted: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let executor = SimExecutor::new(TargetName::Trn1);
    println!("(medians of {ROUNDS} rounds; thread CPU time first, wall-clock in brackets)");
    for name in MODELS
        .iter()
        .filter(|m| wanted.is_empty() || wanted.iter().any(|w| w == *m))
    {
        let dir = models_dir().join(name);
        let m = Model::load(&dir).unwrap_or_else(|e| panic!("{e}"));
        let forward = || {
            let r =
                model::run_forward_with_clock(&m, &executor, &thread_cpu_s).unwrap_or_else(|e| panic!("{name}: {e}"));
            let bad: Vec<&String> = r.end_to_end.iter().filter(|(_, s)| !s.passed).map(|(n, _)| n).collect();
            assert!(bad.is_empty(), "{name}: outputs {bad:?} are outside tolerance");
            r
        };
        let warm = forward();
        let (mut wall, mut cpu, mut lower, mut simulate) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut t_wall, mut t_cpu) = (Vec::new(), Vec::new());
        let mut torch_info = Err(String::new());
        for _ in 0..ROUNDS {
            let r = forward();
            wall.push(r.lower_ms[0] + r.simulate_ms[0]);
            cpu.push(r.lower_ms[1] + r.simulate_ms[1]);
            lower.push(r.lower_ms[1]);
            simulate.push(r.simulate_ms[1]);
            match torch_forward(&dir) {
                Ok(t) => {
                    t_wall.push(t.wall_ms);
                    t_cpu.push(t.cpu_ms);
                    torch_info = Ok(t.info);
                }
                Err(e) => torch_info = Err(e),
            }
        }
        let (cpu, wall) = (median(cpu), median(wall));
        println!(
            "{name}: {} nodes; estimated device time {:.0} µs; leaves put {:.1} MB ({:.0} ms), outputs read {:.2} MB",
            warm.nodes.len(),
            warm.est_us,
            warm.transfers
                .as_ref()
                .map_or(0.0, |t| t.host_to_device_bytes as f64 / 1e6),
            warm.load_ms,
            warm.transfers
                .as_ref()
                .map_or(0.0, |t| t.device_to_host_bytes as f64 / 1e6)
        );
        println!(
            "  simulator forward: {cpu:.1} ms [{wall:.1}] (lowering {:.1} + simulation {:.1})",
            median(lower),
            median(simulate)
        );
        match torch_info {
            Ok(info) if t_cpu.len() == ROUNDS => {
                let (tc, tw) = (median(t_cpu), median(t_wall));
                println!("  PyTorch CPU eager, same graph: {tc:.1} ms [{tw:.1}] ({info})");
                println!(
                    "  ratio simulator / PyTorch: {:.1}x [{:.1}x] (target <= 10x: {})",
                    cpu / tc,
                    wall / tw,
                    if cpu / tc <= 10.0 { "met" } else { "MISSED" }
                );
            }
            Ok(_) | Err(_) => println!(
                "  NO PyTorch baseline (set TRNCONF_PYTHON to a python with torch): {}",
                torch_info.err().unwrap_or_default()
            ),
        }
    }
}
