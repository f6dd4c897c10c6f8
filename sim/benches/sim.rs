//! Simulator speed against native baselines measured in the same run.
//!
//! `cargo bench -p trnsim` (optionally followed by `-- <substring>` to run only matching benches).
//! A small harness instead of criterion: each measurement is warmed up, repeated until a time
//! budget is spent (5..=101 runs), and the median is reported. "sim speed" is
//! `baseline time / simulator time` as a percentage: 100 % would mean the simulator runs the
//! instruction as fast as the plain native code computing the same result.
//!
//! Single-instruction benches time `engine::execute` on memories already holding the operands
//! (no program parsing or HBM set-up inside the timing); the 1024³ program is timed end to end
//! through `Executor::run` (memory set-up, input loading, every instruction, output collection).

use ndarray::Array2;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};
use trnsim::engine::{self, Ctx, Registers};
use trnsim::mem::Memories;
use trnsim::*;

/// Time spent on each bench (after warm-up), shared by the simulator and its baseline.
const BUDGET: Duration = Duration::from_millis(2500);

/// CPU time consumed by the calling thread (user + system, so page faults count), or `None`
/// where unavailable. Unlike wall time it does not grow when other processes take the core.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn thread_cpu_time() -> Option<Duration> {
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
    (rc == 0).then(|| Duration::new(ts.sec as u64, ts.nsec as u32))
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
fn thread_cpu_time() -> Option<Duration> {
    None
}

/// One run of `f`: (wall time, thread CPU time — wall time where unavailable).
fn time_once(f: &mut impl FnMut()) -> (Duration, Duration) {
    let c = thread_cpu_time();
    let t = Instant::now();
    f();
    let wall = t.elapsed();
    let cpu = match (c, thread_cpu_time()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => wall,
    };
    (wall, cpu)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Medians of one side's runs.
#[derive(Clone, Copy)]
struct Timing {
    wall: Duration,
    cpu: Duration,
}

/// Times `sim` and `base` alternately (sim, base, sim, base, …) so that both see the same machine
/// conditions: one warm-up run each, then 5..=101 rounds within the time budget; medians.
fn paired(mut sim: impl FnMut(), mut base: impl FnMut()) -> (Timing, Timing) {
    let first = time_once(&mut sim).0 + time_once(&mut base).0;
    let rounds = (BUDGET.as_nanos() / first.max(Duration::from_micros(1)).as_nanos()).clamp(5, 101) as usize;
    let (mut sw, mut sc, mut bw, mut bc) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let (w, c) = time_once(&mut sim);
        sw.push(w);
        sc.push(c);
        let (w, c) = time_once(&mut base);
        bw.push(w);
        bc.push(c);
    }
    (
        Timing {
            wall: median(sw),
            cpu: median(sc),
        },
        Timing {
            wall: median(bw),
            cpu: median(bc),
        },
    )
}

/// One simulated core outside an `Executor`, to time single instructions.
struct Machine {
    target: Target,
    numerics: Numerics,
    mem: Memories,
    regs: Registers,
    stats: Stats,
    rounding: Rounding,
}

impl Machine {
    fn new(decls: &[HbmTensorDecl]) -> Self {
        let target = TargetName::Trn1.params();
        let mem = Memories::new(&target, decls);
        let regs = Registers::new(&target);
        Machine {
            target,
            numerics: Numerics::default(),
            mem,
            regs,
            stats: Stats::default(),
            rounding: Rounding::NearestEven,
        }
    }

    fn exec(&mut self, engine: Engine, op: &Op) {
        let mut ctx = Ctx {
            mem: &mut self.mem,
            target: &self.target,
            numerics: &self.numerics,
            rounding: &mut self.rounding,
            engine,
            regs: &mut self.regs,
            stats: &mut self.stats,
        };
        engine::execute(&mut ctx, op).unwrap_or_else(|e| panic!("{} failed: {:?}", op.name(), e));
    }
}

/// Deterministic pseudo-random values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

struct Row {
    name: &'static str,
    sim: Timing,
    base: Timing,
    baseline: &'static str,
    target_pct: f64,
}

impl Row {
    /// Sim speed as % of the baseline, on thread CPU time.
    fn pct(&self) -> f64 {
        100.0 * self.base.cpu.as_secs_f64() / self.sim.cpu.as_secs_f64()
    }

    /// The same on wall time.
    fn pct_wall(&self) -> f64 {
        100.0 * self.base.wall.as_secs_f64() / self.sim.wall.as_secs_f64()
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

// ---------------------------------------------------------------------------------------------

fn bench_matmul_instruction() -> Row {
    let (k, m, n) = (128usize, 128usize, 512usize);
    let mut mach = Machine::new(&[]);
    let st_ap = AccessPattern::sbuf(DType::Bf16, 0, k, 0, vec![[1, m as i64]]);
    let mv_ap = AccessPattern::sbuf(DType::Bf16, 0, k, 1024, vec![[1, n as i64]]);
    let st = values(k * m, 1);
    let mv = values(k * n, 2);
    mach.mem.write_f32(&st_ap, &st, &mut Rounding::NearestEven).unwrap();
    mach.mem.write_f32(&mv_ap, &mv, &mut Rounding::NearestEven).unwrap();
    let op = Op::NcMatmul(NcMatmul {
        dst: AccessPattern::psum(DType::F32, 0, m, 0, vec![[1, n as i64]]),
        stationary: st_ap,
        moving: mv_ap,
        accumulate: false,
        perf_mode: trnsim::MatmulPerfMode::None,
    });
    // Baseline: the same product in f32 with ndarray (matrixmultiply), stationary transposed.
    let a = Array2::from_shape_vec((k, m), st).unwrap();
    let b = Array2::from_shape_vec((k, n), mv).unwrap();
    let (sim, base) = paired(
        || mach.exec(Engine::Tensor, &op),
        || {
            black_box(black_box(&a).t().dot(black_box(&b)));
        },
    );
    Row {
        name: "nc_matmul bf16 [128x128]^T x [128x512]",
        sim,
        base,
        baseline: "ndarray f32 GEMM 128x128x512",
        target_pct: 25.0,
    }
}

/// A 1024³ bf16 matmul as a whole program: `out[M, N] = a_t[K, M]ᵀ · b[K, N]` with K = M = N =
/// 1024. Both inputs are DMAed into SBUF in K tiles of 128 partitions; each 128×512 output block
/// accumulates 8 matmuls in one PSUM bank, is copied to SBUF by VectorE and DMAed out.
fn matmul_program(size: usize) -> Program {
    const T: usize = 128; // K tile (partitions) and M tile (stationary free size)
    const NT: usize = 512; // N tile (one PSUM bank of fp32)
    let (k, m, n) = (size, size, size);
    let mut p = Program::new(TargetName::Trn1);
    p.declare("a_t", DType::Bf16, &[k, m], HbmRole::Input);
    p.declare("b", DType::Bf16, &[k, n], HbmRole::Input);
    p.declare("out", DType::F32, &[m, n], HbmRole::Output);
    let kt = k / T;
    // SBUF layout per partition: a_t tiles at [0, kt·m·2), b tiles after them, then a 2 KiB
    // result staging row per (alternating) output block.
    let a_off = |t: usize| (t * m * 2) as u64;
    let b_off = |t: usize| (kt * m * 2 + t * n * 2) as u64;
    let res_off = (kt * (m + n) * 2) as u64;
    for t in 0..kt {
        p.push(
            Engine::Dma,
            Op::DmaCopy(DmaCopy {
                dst: AccessPattern::sbuf(DType::Bf16, 0, T, a_off(t), vec![[1, m as i64]]),
                src: AccessPattern::hbm("a_t", DType::Bf16, (t * T * m) as u64, T, m as i64, vec![[1, m as i64]]),
                accumulate: false,
                indirect: None,
            }),
        );
        p.push(
            Engine::Dma,
            Op::DmaCopy(DmaCopy {
                dst: AccessPattern::sbuf(DType::Bf16, 0, T, b_off(t), vec![[1, n as i64]]),
                src: AccessPattern::hbm("b", DType::Bf16, (t * T * n) as u64, T, n as i64, vec![[1, n as i64]]),
                accumulate: false,
                indirect: None,
            }),
        );
    }
    let mut bank = 0u64;
    for mt in 0..m / T {
        for nt in 0..n / NT {
            let psum = AccessPattern::psum(DType::F32, 0, T, bank * 2048, vec![[1, NT as i64]]);
            bank = (bank + 1) % 8;
            for t in 0..kt {
                p.push(
                    Engine::Tensor,
                    Op::NcMatmul(NcMatmul {
                        dst: psum.clone(),
                        stationary: AccessPattern::sbuf(
                            DType::Bf16,
                            0,
                            T,
                            a_off(t) + (mt * T * 2) as u64,
                            vec![[1, T as i64]],
                        ),
                        moving: AccessPattern::sbuf(
                            DType::Bf16,
                            0,
                            T,
                            b_off(t) + (nt * NT * 2) as u64,
                            vec![[1, NT as i64]],
                        ),
                        accumulate: t > 0,
                        perf_mode: trnsim::MatmulPerfMode::None,
                    }),
                );
            }
            let res = AccessPattern::sbuf(DType::F32, 0, T, res_off, vec![[1, NT as i64]]);
            p.push(
                Engine::Vector,
                Op::TensorCopy(TensorCopy {
                    dst: res.clone(),
                    src: psum,
                }),
            );
            p.push(
                Engine::Dma,
                Op::DmaCopy(DmaCopy {
                    dst: AccessPattern::hbm(
                        "out",
                        DType::F32,
                        (mt * T * n + nt * NT) as u64,
                        T,
                        n as i64,
                        vec![[1, NT as i64]],
                    ),
                    src: res,
                    accumulate: false,
                    indirect: None,
                }),
            );
        }
    }
    p
}

fn bench_matmul_program() -> Row {
    let size = 1024;
    let prog = matmul_program(size);
    let a_t = values(size * size, 3);
    let b = values(size * size, 4);
    let mut inputs = BTreeMap::new();
    inputs.insert(
        "a_t".to_string(),
        HostTensor::from_f32_as(DType::Bf16, &[size, size], &a_t),
    );
    inputs.insert("b".to_string(), HostTensor::from_f32_as(DType::Bf16, &[size, size], &b));
    let exec = Executor::new(TargetName::Trn1);
    // Sanity: one element against an f64 dot product of the bf16-rounded inputs.
    let run = exec.run(&prog, &inputs).unwrap();
    let a16 = inputs["a_t"].to_f32();
    let b16 = inputs["b"].to_f32();
    let (mi, ni) = (517, 901);
    let want: f64 = (0..size)
        .map(|kk| a16[kk * size + mi] as f64 * b16[kk * size + ni] as f64)
        .sum();
    let got = run.outputs["out"].to_f32()[mi * size + ni] as f64;
    assert!(
        (got - want).abs() < 1e-3 * want.abs().max(1.0),
        "1024³ program: {got} vs {want}"
    );
    let a = Array2::from_shape_vec((size, size), a16).unwrap();
    let bm = Array2::from_shape_vec((size, size), b16).unwrap();
    let (sim, base) = paired(
        || {
            black_box(exec.run(&prog, &inputs).unwrap());
        },
        || {
            black_box(black_box(&a).t().dot(black_box(&bm)));
        },
    );
    Row {
        name: "1024^3 bf16 matmul program (Executor::run)",
        sim,
        base,
        baseline: "ndarray f32 GEMM 1024^3",
        target_pct: 25.0,
    }
}

const EW_P: usize = 128;
const EW_F: usize = 8192;

fn bench_tensor_tensor_add() -> Row {
    let mut mach = Machine::new(&[]);
    let ap = |off: u64| AccessPattern::sbuf(DType::F32, 0, EW_P, off, vec![[1, EW_F as i64]]);
    let a = values(EW_P * EW_F, 5);
    let b = values(EW_P * EW_F, 6);
    mach.mem.write_f32(&ap(0), &a, &mut Rounding::NearestEven).unwrap();
    mach.mem.write_f32(&ap(32768), &b, &mut Rounding::NearestEven).unwrap();
    let op = Op::TensorTensor(TensorTensor {
        dst: ap(65536),
        in0: ap(0),
        in1: ap(32768),
        op: AluOp::Add,
    });
    let mut c = vec![0.0f32; a.len()];
    let (sim, base) = paired(
        || mach.exec(Engine::Vector, &op),
        || {
            for ((c, &x), &y) in c.iter_mut().zip(black_box(&a)).zip(black_box(&b)) {
                *c = x + y;
            }
            black_box(&mut c);
        },
    );
    Row {
        name: "tensor_tensor add f32 [128x8192] (VectorE)",
        sim,
        base,
        baseline: "loop c = a + b (zip, vectorized)",
        target_pct: 30.0,
    }
}

fn bench_activation_exp() -> Row {
    let mut mach = Machine::new(&[]);
    let ap = |off: u64| AccessPattern::sbuf(DType::F32, 0, EW_P, off, vec![[1, EW_F as i64]]);
    let a = values(EW_P * EW_F, 7);
    mach.mem.write_f32(&ap(0), &a, &mut Rounding::NearestEven).unwrap();
    let op = Op::Activation(Activation {
        dst: ap(32768),
        func: ActFunc::Exp,
        src: ap(0),
        bias: None,
        scale: ScalarOperand::Imm(1.0),
        acc: AccCmd::Idle,
        reduce_res: None,
    });
    let mut c = vec![0.0f32; a.len()];
    let (sim, base) = paired(
        || mach.exec(Engine::Scalar, &op),
        || {
            for (c, &x) in c.iter_mut().zip(black_box(&a)) {
                *c = x.exp();
            }
            black_box(&mut c);
        },
    );
    Row {
        name: "activation exp f32 [128x8192] (ScalarE)",
        sim,
        base,
        baseline: "loop c = a.exp() (zip, f32::exp)",
        target_pct: 30.0,
    }
}

/// 64 MiB HBM → SBUF → HBM in 4 tiles of 128 partitions × 128 KiB.
fn bench_dma() -> Row {
    const TOTAL: usize = 64 << 20;
    const ROW: usize = 32 * 1024; // f32 elements per partition per tile (128 KiB)
    const TILE: usize = 128 * ROW;
    let elems = TOTAL / 4;
    let decls = [
        HbmTensorDecl {
            name: "src".into(),
            dtype: DType::F32,
            shape: vec![elems],
            role: HbmRole::Input,
        },
        HbmTensorDecl {
            name: "dst".into(),
            dtype: DType::F32,
            shape: vec![elems],
            role: HbmRole::Output,
        },
    ];
    let mut mach = Machine::new(&decls);
    let src_vals = values(elems, 8);
    let src_bytes: Vec<u8> = src_vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    mach.mem.load_input("src", &src_bytes).unwrap();
    let sb = AccessPattern::sbuf(DType::F32, 0, 128, 0, vec![[1, ROW as i64]]);
    let mut ops = Vec::new();
    for t in 0..elems / TILE {
        let off = (t * TILE) as u64;
        ops.push(Op::DmaCopy(DmaCopy {
            dst: sb.clone(),
            src: AccessPattern::hbm("src", DType::F32, off, 128, ROW as i64, vec![[1, ROW as i64]]),
            accumulate: false,
            indirect: None,
        }));
        ops.push(Op::DmaCopy(DmaCopy {
            dst: AccessPattern::hbm("dst", DType::F32, off, 128, ROW as i64, vec![[1, ROW as i64]]),
            src: sb.clone(),
            accumulate: false,
            indirect: None,
        }));
    }
    let mut dst = vec![0u8; TOTAL];
    let (sim, base) = paired(
        || {
            for op in &ops {
                mach.exec(Engine::Dma, op);
            }
        },
        || {
            dst.copy_from_slice(black_box(&src_bytes));
            black_box(&mut dst);
        },
    );
    assert_eq!(mach.mem.hbm_tensor("dst").unwrap().data, src_bytes, "DMA round trip");
    Row {
        name: "dma_copy 64 MiB HBM->SBUF->HBM (8 DMAs)",
        sim,
        base,
        baseline: "memcpy 64 MiB",
        target_pct: 30.0,
    }
}

// ---------------------------------------------------------------------------------------------
// The race detector and `infer_waits` (issue: the access history was scanned linearly, so a
// long program cost the square of its length). "sim" is the checked run, "baseline" the same
// run without the detector; the target (>= 33 %) is "the detector costs at most 3x".

/// Instructions of the race-detector benches.
const LONG: usize = 160_000;

/// `n` one-word VectorE memsets to distinct SBUF words (no conflicts, one queue).
fn memset_program(n: usize) -> Program {
    let mut p = Program::new(TargetName::Trn1);
    for i in 0..n {
        p.push(
            Engine::Vector,
            Op::Memset(Memset {
                dst: AccessPattern::sbuf(DType::F32, (i / 40_000) * 32, 1, 4 * (i % 40_000) as u64, vec![[1, 1]]),
                value: 1.0,
            }),
        );
    }
    p
}

/// `n` instructions on VectorE, GpSimd and ScalarE reading and writing strided, interleaving
/// and overlapping SBUF and PSUM tiles (even and odd elements of the same rows, steps 2, 3 and
/// 4, 2-D walks), over 32-partition quadrants, with the waits `infer_waits` gives them.
fn strided_program(n: usize, waits: bool) -> Program {
    let mut p = Program::new(TargetName::Trn1);
    let sb = |part: usize, off: u64, free: Vec<[i64; 2]>| AccessPattern::sbuf(DType::F32, part, 32, off, free);
    let ps = |part: usize, off: u64, free: Vec<[i64; 2]>| AccessPattern::psum(DType::F32, part, 32, off, free);
    for part in [0, 32, 64, 96] {
        p.push(
            Engine::Vector,
            Op::Memset(Memset {
                dst: sb(part, 0, vec![[1, 16_384]]),
                value: 0.5,
            }),
        );
        p.push(
            Engine::Gpsimd,
            Op::Memset(Memset {
                dst: AccessPattern::sbuf(DType::F32, part, 32, 65_536, vec![[1, 1024]]),
                value: 0.25,
            }),
        );
        p.push(
            Engine::Vector,
            Op::Memset(Memset {
                dst: ps(part, 0, vec![[1, 4096]]),
                value: 1.0,
            }),
        );
    }
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    while p.instructions.len() < n {
        let part = 32 * next(4) as usize;
        // 1 KiB tiles of SBUF (64 of them) and PSUM (16), 64 elements walked in each.
        let st = 1024 * next(64);
        let st2 = 1024 * next(64);
        let pt = 1024 * next(15);
        let parity = 4 * next(2);
        let (engine, op) = match next(4) {
            0 => (
                Engine::Vector,
                Op::TensorTensor(TensorTensor {
                    dst: sb(part, st + parity, vec![[2, 64]]),
                    in0: sb(part, st2, vec![[1, 64]]),
                    in1: ps(part, pt + parity, vec![[2, 64]]),
                    op: AluOp::Multiply,
                }),
            ),
            1 => (
                Engine::Gpsimd,
                Op::TensorCopy(TensorCopy {
                    dst: sb(part, st + 4 - parity, vec![[2, 64]]),
                    src: sb(part, st2, vec![[3, 64]]),
                }),
            ),
            2 => (
                Engine::Scalar,
                Op::Activation(Activation {
                    dst: ps(part, pt + parity, vec![[8, 32], [2, 2]]),
                    func: ActFunc::Copy,
                    src: sb(part, st2 + parity, vec![[4, 32], [1, 2]]),
                    bias: None,
                    scale: ScalarOperand::Imm(1.0),
                    acc: Default::default(),
                    reduce_res: None,
                }),
            ),
            _ => (
                Engine::Vector,
                Op::TensorCopy(TensorCopy {
                    dst: sb(part, st, vec![[64, 4], [2, 16]]),
                    src: ps(part, pt, vec![[16, 4], [1, 16]]),
                }),
            ),
        };
        p.push(engine, op);
    }
    if waits {
        infer_waits(&mut p);
    }
    p
}

fn race_row(name: &'static str, prog: &Program) -> Row {
    let on = Executor::new(TargetName::Trn1);
    let off = Executor::with_config(
        TargetName::Trn1,
        ExecConfig {
            race_check: false,
            ..ExecConfig::default()
        },
    );
    let inputs = BTreeMap::new();
    // The program is race-free: the checked run succeeds.
    on.run(prog, &inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
    let (sim, base) = paired(
        || {
            black_box(on.run(prog, &inputs).unwrap());
        },
        || {
            black_box(off.run(prog, &inputs).unwrap());
        },
    );
    Row {
        name,
        sim,
        base,
        baseline: "the same Executor::run with race_check off",
        target_pct: 100.0 / 3.0,
    }
}

fn bench_race_memsets() -> Row {
    race_row("race detector, 160,000 one-word memsets", &memset_program(LONG))
}

fn bench_race_strided() -> Row {
    let p = strided_program(LONG, true);
    let waiting = p.instructions.iter().filter(|i| !i.wait.is_empty()).count();
    assert!(
        waiting > LONG / 4,
        "the strided program must depend across queues: {waiting} wait"
    );
    race_row("race detector, 160,000 strided SBUF/PSUM instrs", &p)
}

/// `infer_waits` on twice the instructions against once: near-linear is at most 2.5x.
fn bench_infer_waits() -> Row {
    let mut half = strided_program(LONG / 2, false);
    let mut full = strided_program(LONG, false);
    let (sim, base) = paired(
        || infer_waits(black_box(&mut full)),
        || infer_waits(black_box(&mut half)),
    );
    Row {
        name: "infer_waits, 160,000 strided instrs",
        sim,
        base,
        baseline: "infer_waits on the first 80,000 of them",
        target_pct: 40.0,
    }
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    type Bench = (&'static str, fn() -> Row);
    let benches: Vec<Bench> = vec![
        ("matmul_instruction", bench_matmul_instruction),
        ("matmul_program", bench_matmul_program),
        ("tensor_tensor", bench_tensor_tensor_add),
        ("activation", bench_activation_exp),
        ("dma", bench_dma),
        ("race_memsets", bench_race_memsets),
        ("race_strided", bench_race_strided),
        ("infer_waits", bench_infer_waits),
    ];
    println!("trnsim benchmarks: medians of alternating runs; sim speed = baseline time / simulator time");
    println!("(primary figures: thread CPU time; wall-clock figures in brackets)\n");
    let mut rows = Vec::new();
    for (key, f) in benches {
        if filter.as_ref().is_some_and(|flt| !key.contains(flt.as_str())) {
            continue;
        }
        let r = f();
        println!(
            "{:<44} sim {:>10} [{}]  baseline {:>10} [{}]  sim speed {:>6.1} % [{:.1} %]  target >= {:.0} %: {}",
            r.name,
            ms(r.sim.cpu),
            ms(r.sim.wall),
            ms(r.base.cpu),
            ms(r.base.wall),
            r.pct(),
            r.pct_wall(),
            r.target_pct,
            if r.pct() >= r.target_pct { "met" } else { "MISSED" },
        );
        rows.push(r);
    }
    if !rows.is_empty() {
        println!(
            "\n| bench | sim time | baseline | baseline time | sim speed (% of baseline) | target | met? | wall: sim / baseline / % |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for r in &rows {
            println!(
                "| {} | {} | {} | {} | {:.1} % | >= {:.0} % | {} | {} / {} / {:.1} % |",
                r.name,
                ms(r.sim.cpu),
                r.baseline,
                ms(r.base.cpu),
                r.pct(),
                r.target_pct,
                if r.pct() >= r.target_pct { "yes" } else { "no" },
                ms(r.sim.wall),
                ms(r.base.wall),
                r.pct_wall(),
            );
        }
    }
}
