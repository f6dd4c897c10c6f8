//! The schedule against hand-computed timelines, and the race detector against programs with a
//! wait missing, one per hazard kind and memory.
//!
//! Costs used below (Trn1 `Target`): VectorE `memset` of N fp32 elements per partition costs N
//! cycles at 1.12 GHz, GpSimd's N cycles at 1.4 GHz, ScalarE `activation` N cycles at 1.4 GHz,
//! VectorE `tensor_tensor` (two SBUF fp32 inputs) 2N cycles; a DMA of B bytes 1300 ns + B/17 ns
//! on its queue. A model that only sums busy time per engine gets every makespan here wrong.

use std::collections::BTreeMap;
use trnsim::*;

const F: DType = DType::F32;

fn sb(p: usize, off: u64, n: i64) -> AccessPattern {
    AccessPattern::sbuf(F, 0, p, off, vec![[1, n]])
}

fn memset(dst: AccessPattern) -> Op {
    Op::Memset(Memset { dst, value: 1.0 })
}

fn act(dst: AccessPattern, src: AccessPattern) -> Op {
    Op::Activation(Activation {
        dst,
        func: ActFunc::Copy,
        src,
        bias: None,
        scale: ScalarOperand::Imm(1.0),
        acc: AccCmd::Idle,
        reduce_res: None,
    })
}

fn run(p: &Program, inputs: &BTreeMap<String, HostTensor>) -> Result<RunResult, SimError> {
    Executor::new(TargetName::Trn1).run(p, inputs)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

fn span(r: &RunResult, i: usize) -> (f64, f64) {
    let s = r.stats.timeline.spans[i];
    (s.start_ns, s.end_ns)
}

#[test]
fn two_engines_overlap() {
    // VectorE memset of 1120 elements: 1000 ns; GpSimd memset of 1400: 1000 ns, at the same time.
    let mut p = Program::new(TargetName::Trn1);
    p.push(Engine::Vector, memset(sb(4, 0, 1120)));
    p.push(Engine::Gpsimd, memset(sb(4, 8192, 1400)));
    let r = run(&p, &BTreeMap::new()).unwrap();
    assert!(close(r.stats.est_ns.vector, 1000.0) && close(r.stats.est_ns.gpsimd, 1000.0));
    assert!(close(span(&r, 0).0, 0.0) && close(span(&r, 0).1, 1000.0));
    assert!(close(span(&r, 1).0, 0.0) && close(span(&r, 1).1, 1000.0));
    assert!(close(r.stats.timeline.makespan_ns, 1000.0), "{:?}", r.stats.timeline);
    assert!(close(r.stats.timeline.utilisation("vector"), 1.0));
    assert!(close(r.stats.timeline.utilisation("gpsimd"), 1.0));
}

#[test]
fn a_wait_delays() {
    // #1 (ScalarE, 1120 elements: 800 ns) reads what #0 (VectorE, 1000 ns) wrote: it starts at
    // 1000 ns. #2 (GpSimd, independent, 500 ns) still starts at 0.
    let mut p = Program::new(TargetName::Trn1);
    p.push(Engine::Vector, memset(sb(4, 0, 1120)));
    p.push(Engine::Scalar, act(sb(4, 8192, 1120), sb(4, 0, 1120)));
    p.push(Engine::Gpsimd, memset(sb(4, 16384, 700)));
    p.instructions[1].wait = vec![0];
    let r = run(&p, &BTreeMap::new()).unwrap();
    assert!(
        close(span(&r, 1).0, 1000.0) && close(span(&r, 1).1, 1800.0),
        "{:?}",
        span(&r, 1)
    );
    assert!(close(span(&r, 2).0, 0.0) && close(span(&r, 2).1, 500.0));
    assert!(close(r.stats.timeline.makespan_ns, 1800.0));
    assert_eq!(r.stats.timeline.critical_path, vec![0, 1]);
    // Without the wait the two race on bytes 0..4480 of partitions 0..4.
    p.instructions[1].wait.clear();
    let e = run(&p, &BTreeMap::new()).unwrap_err();
    assert!(
        matches!(&e.kind, ErrorKind::Race(r) if r.hazard == "read-after-write" && r.other == 0),
        "{e}"
    );
}

fn two_loads(queues: [Option<u16>; 2]) -> (Program, BTreeMap<String, HostTensor>) {
    let mut p = Program::new(TargetName::Trn1);
    p.declare("a", F, &[4, 1700], HbmRole::Input);
    p.declare("b", F, &[4, 1700], HbmRole::Input);
    let hbm = |n: &str| AccessPattern::hbm(n, F, 0, 4, 1700, vec![[1, 1700]]);
    p.push(Engine::Dma, Op::dma_copy(sb(4, 0, 1700), hbm("a")));
    p.push(Engine::Dma, Op::dma_copy(sb(4, 8192, 1700), hbm("b")));
    p.instructions[0].queue = queues[0];
    p.instructions[1].queue = queues[1];
    let mut inputs = BTreeMap::new();
    inputs.insert("a".into(), HostTensor::from_f32(&[4, 1700], &[1.0; 6800]));
    inputs.insert("b".into(), HostTensor::from_f32(&[4, 1700], &[2.0; 6800]));
    (p, inputs)
}

#[test]
fn a_dma_queue_serialises() {
    // 4 × 1700 × 4 B = 27200 B: 1300 + 1600 = 2900 ns per transfer.
    let (p, inputs) = two_loads([None, None]);
    let r = run(&p, &inputs).unwrap();
    assert!(close(span(&r, 1).0, 2900.0) && close(r.stats.timeline.makespan_ns, 5800.0));
    assert_eq!(r.stats.timeline.queues.len(), 1);
    assert_eq!(r.stats.timeline.critical_path, vec![0, 1]);
    // On two queues they overlap.
    let (p, inputs) = two_loads([Some(0), Some(5)]);
    let r = run(&p, &inputs).unwrap();
    assert!(close(r.stats.timeline.makespan_ns, 2900.0));
    assert!(close(r.stats.timeline.busy_ns("dma5"), 2900.0));
    // A queue the target does not have is an error.
    let (p, inputs) = two_loads([Some(0), Some(16)]);
    let e = run(&p, &inputs).unwrap_err();
    assert!(e.to_string().contains("DMA queue 16 does not exist"), "{e}");
}

#[test]
fn critical_path_of_a_small_program() {
    // #0 DMA load a (q0): 0 .. 2900.  #1 VectorE memset c: 0 .. 1000 (1120 elements).
    // #2 VectorE a + c (2 × 1700 cycles = 3035.714 ns) waits for #0: 2900 .. 5935.714.
    // #3 DMA store (q1) waits for #2: 5935.714 .. 8835.714.  Critical path 0 → 2 → 3.
    // Summing busy time gives vector 4035.7 and DMA 5800: neither is the makespan.
    let (mut p, inputs) = two_loads([Some(0), None]);
    p.instructions.truncate(1);
    p.declare("out", F, &[4, 1700], HbmRole::Output);
    p.push(Engine::Vector, memset(sb(4, 8192, 1700)));
    p.push(
        Engine::Vector,
        Op::TensorTensor(TensorTensor {
            dst: sb(4, 16384, 1700),
            in0: sb(4, 0, 1700),
            in1: sb(4, 8192, 1700),
            op: AluOp::Add,
        }),
    );
    p.push(
        Engine::Dma,
        Op::dma_copy(
            AccessPattern::hbm("out", F, 0, 4, 1700, vec![[1, 1700]]),
            sb(4, 16384, 1700),
        ),
    );
    p.instructions[3].queue = Some(1);
    p.instructions[2].wait = vec![0];
    p.instructions[3].wait = vec![2];
    p.hbm.retain(|d| d.name != "b");
    let mut inputs = inputs;
    inputs.remove("b");
    let r = run(&p, &inputs).unwrap();
    let tt = 2.0 * 1700.0 / 1.12;
    assert!(close(span(&r, 1).1, 1700.0 / 1.12));
    assert!(close(span(&r, 2).0, 2900.0) && close(span(&r, 2).1, 2900.0 + tt));
    assert!(close(r.stats.timeline.makespan_ns, 2900.0 + tt + 2900.0));
    assert_eq!(r.stats.timeline.critical_path, vec![0, 2, 3]);
    assert_eq!(r.outputs["out"].to_f32(), vec![2.0; 6800]);
    // Switching the timeline and race detector off changes nothing but the timeline.
    let cfg = ExecConfig {
        timeline: false,
        race_check: false,
        ..ExecConfig::default()
    };
    let r2 = Executor::with_config(TargetName::Trn1, cfg).run(&p, &inputs).unwrap();
    assert_eq!(r2.outputs, r.outputs);
    assert_eq!(r2.stats.timeline, Timeline::default());
}

// ---- the race detector: one program per memory, one removed wait per hazard kind -----------

/// Which wait to drop, and what the error must then say.
struct Hazard {
    inst: usize,
    other: usize,
    kind: &'static str,
    memory: &'static str,
}

fn check_race(p: &Program, inputs: &BTreeMap<String, HostTensor>, h: &Hazard) {
    run(p, inputs).unwrap_or_else(|e| panic!("the full program must run: {e}"));
    let mut broken = p.clone();
    broken.instructions[h.inst].wait.retain(|&w| w as usize != h.other);
    let e = run(&broken, inputs).unwrap_err();
    let text = e.to_string();
    assert_eq!(e.index, Some(h.inst), "{text}");
    assert!(
        matches!(&e.kind, ErrorKind::Race(r) if r.hazard == h.kind && r.other == h.other),
        "{text}"
    );
    assert!(text.contains(h.memory), "{text}");
}

#[test]
fn races_in_sbuf() {
    // #0 Vector writes X; #1 Scalar reads X, writes Y; #2 GpSimd writes X (WAR on #1's read);
    // #3 Scalar writes X again after #2 (WAW).
    let mut p = Program::new(TargetName::Trn1);
    p.push(Engine::Vector, memset(sb(4, 0, 64)));
    p.push(Engine::Scalar, act(sb(4, 1024, 64), sb(4, 0, 64)));
    p.push(Engine::Gpsimd, memset(sb(4, 0, 64)));
    p.push(Engine::Scalar, act(sb(4, 0, 64), sb(4, 1024, 64)));
    infer_waits(&mut p);
    assert_eq!(p.instructions[1].wait, vec![0]);
    assert_eq!(p.instructions[2].wait, vec![1]);
    assert_eq!(p.instructions[3].wait, vec![2]);
    let inputs = BTreeMap::new();
    for (inst, other, kind) in [
        (1, 0, "read-after-write"),
        (2, 1, "write-after-read"),
        (3, 2, "write-after-write"),
    ] {
        let memory = "SBUF partitions 0..4, bytes 0..256";
        check_race(
            &p,
            &inputs,
            &Hazard {
                inst,
                other,
                kind,
                memory,
            },
        );
    }
}

#[test]
fn races_in_psum() {
    // #0 TensorE matmul → PSUM P; #1 VectorE copies P out (RAW); #2 TensorE overwrites P (WAR
    // on #1's read); #3 VectorE memsets P after #2 (WAW).
    let mut p = Program::new(TargetName::Trn1);
    let ps = AccessPattern::psum(F, 0, 4, 0, vec![[1, 8]]);
    let mm = |dst: AccessPattern| {
        Op::NcMatmul(NcMatmul {
            dst,
            stationary: AccessPattern::sbuf(DType::Bf16, 0, 4, 0, vec![[1, 4]]),
            moving: AccessPattern::sbuf(DType::Bf16, 0, 4, 64, vec![[1, 8]]),
            accumulate: false,
            perf_mode: trnsim::MatmulPerfMode::None,
        })
    };
    p.push(
        Engine::Gpsimd,
        memset(AccessPattern::sbuf(DType::Bf16, 0, 4, 0, vec![[1, 64]])),
    );
    p.push(Engine::Tensor, mm(ps.clone()));
    p.push(
        Engine::Vector,
        Op::TensorCopy(TensorCopy {
            dst: sb(4, 512, 8),
            src: ps.clone(),
        }),
    );
    p.push(Engine::Tensor, mm(ps.clone()));
    p.push(Engine::Vector, memset(ps.clone()));
    infer_waits(&mut p);
    assert_eq!(p.instructions[2].wait, vec![1]);
    assert_eq!(p.instructions[3].wait, vec![2]);
    assert_eq!(p.instructions[4].wait, vec![3]);
    let inputs = BTreeMap::new();
    for (inst, other, kind) in [
        (2, 1, "read-after-write"),
        (3, 2, "write-after-read"),
        (4, 3, "write-after-write"),
    ] {
        let memory = "PSUM partitions 0..4, bytes 0..32";
        check_race(
            &p,
            &inputs,
            &Hazard {
                inst,
                other,
                kind,
                memory,
            },
        );
    }
}

#[test]
fn races_in_hbm() {
    // A scratch HBM tensor S: #1 (q1) stores X to S; #2 (q2) loads S (RAW); #3 (q3) stores Y to
    // S after #2 read it (WAR); #4 (q4) stores X to S after #3 (WAW).
    let mut p = Program::new(TargetName::Trn1);
    p.declare("s", F, &[4, 16], HbmRole::Scratch);
    let s = AccessPattern::hbm("s", F, 0, 4, 16, vec![[1, 16]]);
    p.push(Engine::Vector, memset(sb(4, 0, 16)));
    p.push(Engine::Dma, Op::dma_copy(s.clone(), sb(4, 0, 16)));
    p.push(Engine::Dma, Op::dma_copy(sb(4, 256, 16), s.clone()));
    p.push(Engine::Dma, Op::dma_copy(s.clone(), sb(4, 256, 16)));
    p.push(Engine::Dma, Op::dma_copy(s.clone(), sb(4, 0, 16)));
    for (k, inst) in p.instructions.iter_mut().enumerate().skip(1) {
        inst.queue = Some(k as u16);
    }
    infer_waits(&mut p);
    assert_eq!(p.instructions[2].wait, vec![1]);
    assert_eq!(p.instructions[4].wait, vec![3]);
    let inputs = BTreeMap::new();
    // #3 also reads what #2 wrote (SBUF) and writes what #2 read (HBM): one wait covers both.
    assert_eq!(p.instructions[3].wait, vec![2]);
    for (inst, other, kind, memory) in [
        (2, 1, "read-after-write", "HBM tensor `s`, bytes 0..256"),
        (4, 3, "write-after-write", "HBM tensor `s`, bytes 0..256"),
    ] {
        check_race(
            &p,
            &inputs,
            &Hazard {
                inst,
                other,
                kind,
                memory,
            },
        );
    }
    // WAR alone: #3 stores a buffer nothing DMA wrote, so only its HBM write conflicts with #2.
    let mut q = p.clone();
    q.instructions[3].op = Op::dma_copy(s.clone(), sb(4, 0, 16));
    infer_waits(&mut q);
    assert_eq!(q.instructions[3].wait, vec![2]);
    let h = Hazard {
        inst: 3,
        other: 2,
        kind: "write-after-read",
        memory: "HBM tensor `s`, bytes 0..256",
    };
    check_race(&q, &inputs, &h);
}

#[test]
fn a_dynamic_copy_conflicts_wherever_its_offset_may_move_it() {
    // #0 GpSimd writes the offset (2 rows of 16 elements = byte 128); #1 GpSimd writes bytes
    // 128..192; #2 Vector copies from a source whose static offset is byte 0, moved at run time to
    // byte 128: the read of #1's bytes depends on data, so it must wait for #1.
    let mut p = Program::new(TargetName::Trn1);
    let off = AccessPattern::sbuf(DType::I32, 0, 1, 4096, vec![[1, 1]]);
    p.push(
        Engine::Gpsimd,
        Op::Iota(Iota {
            dst: off.clone(),
            offset: 2,
            channel_multiplier: 0,
            pattern: vec![[0, 1]],
        }),
    );
    p.push(Engine::Gpsimd, memset(sb(1, 128, 16)));
    p.push(
        Engine::Vector,
        Op::TensorCopyDynamicSrc(TensorCopyDynamic {
            dst: sb(1, 2048, 16),
            src: sb(1, 0, 16),
            offset: off,
            offset_scale: 16,
        }),
    );
    infer_waits(&mut p);
    assert_eq!(
        p.instructions[2].wait,
        vec![1],
        "the moved source waits for the write it may read"
    );
    let inputs = BTreeMap::new();
    let r = run(&p, &inputs).unwrap();
    assert_eq!(r.stats.instructions.vector, 1);
    p.instructions[2].wait.clear();
    let e = run(&p, &inputs).unwrap_err();
    assert!(
        matches!(&e.kind, ErrorKind::Race(r) if r.hazard == "read-after-write" && r.other == 1),
        "{e}"
    );
}
