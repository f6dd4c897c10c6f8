//! LNC=2: one program on the two physical cores of a logical core (docs/timeline.md, "Two
//! cores"). Each core loads its half of `x`, doubles it and stores it into a shared HBM tensor;
//! after a `core_barrier` pair each core reads the *other* core's half. Expected by hand:
//! `out[c] = 2 · x[1 - c]`. Without the barriers the race detector reports the cross-core
//! read-after-write, naming both instructions.

mod refuse;

use std::collections::BTreeMap;
use trnsim::*;

const F: DType = DType::F32;

/// `[4, 8]` SBUF tile at byte `off` (each core has its own SBUF: both use the same offsets).
fn sb(off: u64) -> AccessPattern {
    AccessPattern::sbuf(F, 0, 4, off, vec![[1, 8]])
}

/// Half `c` (`[4, 8]`, 32 elements) of a `[2, 4, 8]` HBM tensor.
fn half(t: &str, c: u64) -> AccessPattern {
    AccessPattern::hbm(t, F, c * 32, 4, 8, vec![[1, 8]])
}

fn dma(dst: AccessPattern, src: AccessPattern) -> Op {
    Op::DmaCopy(DmaCopy {
        dst,
        src,
        accumulate: false,
        indirect: None,
    })
}

fn on(p: &mut Program, core: u8, engine: Engine, op: Op, loc: &str) -> usize {
    let i = p.push(engine, op);
    p.instructions[i].core = core;
    p.instructions[i].loc = Some(loc.into());
    i
}

/// Indices of interest: (core 1's store of its half, core 0's read of core 1's half).
struct Built {
    program: Program,
    store1: usize,
    read0: usize,
}

fn build(target: TargetName, with_barrier: bool) -> Built {
    let mut p = Program::new(target);
    p.declare("x", F, &[2, 4, 8], HbmRole::Input);
    p.declare("shared", F, &[2, 4, 8], HbmRole::Scratch);
    p.declare("out", F, &[2, 4, 8], HbmRole::Output);
    let mut store = [0; 2];
    for c in 0..2u8 {
        on(&mut p, c, Engine::Dma, dma(sb(0), half("x", c as u64)), "load");
        let double = Op::TensorScalar(TensorScalar {
            dst: sb(64),
            src: sb(0),
            op0: AluOp::Multiply,
            operand0: ScalarOperand::Imm(2.0),
            reverse0: false,
            op1: None,
            operand1: None,
            reverse1: false,
        });
        on(&mut p, c, Engine::Vector, double, "double");
        store[c as usize] = on(&mut p, c, Engine::Dma, dma(half("shared", c as u64), sb(64)), "store");
    }
    if with_barrier {
        for c in 0..2u8 {
            let data = AccessPattern::hbm("shared", F, 0, 8, 8, vec![[1, 8]]);
            on(
                &mut p,
                c,
                Engine::Gpsimd,
                Op::CoreBarrier(CoreBarrier { data }),
                "barrier",
            );
        }
    }
    let mut read = [0; 2];
    for c in 0..2u8 {
        read[c as usize] = on(
            &mut p,
            c,
            Engine::Dma,
            dma(sb(128), half("shared", 1 - c as u64)),
            "read",
        );
    }
    for c in 0..2u8 {
        on(&mut p, c, Engine::Dma, dma(half("out", c as u64), sb(128)), "out");
    }
    infer_waits(&mut p);
    Built {
        program: p,
        store1: store[1],
        read0: read[0],
    }
}

fn inputs() -> (BTreeMap<String, HostTensor>, Vec<f32>) {
    let x: Vec<f32> = (0..64).map(|k| k as f32 - 20.5).collect();
    let mut m = BTreeMap::new();
    m.insert("x".to_string(), HostTensor::from_f32(&[2, 4, 8], &x));
    (m, x)
}

#[test]
fn two_cores_exchange_halves_through_shared_hbm_after_a_barrier() {
    for target in [TargetName::Trn2, TargetName::Trn3] {
        let b = build(target, true);
        let (inp, x) = inputs();
        let r = Executor::new(target).run(&b.program, &inp).unwrap();
        let out = r.outputs["out"].to_f32();
        let want: Vec<f32> = (0..64).map(|k| 2.0 * x[(k + 32) % 64]).collect();
        assert_eq!(out, want, "out[c] = 2 x[1-c] on {}", target.name());
        // No wait crosses the cores: only the barrier pair orders them.
        for (i, inst) in b.program.instructions.iter().enumerate() {
            for &w in &inst.wait {
                assert_eq!(
                    b.program.instructions[w as usize].core, inst.core,
                    "#{i} waits across cores"
                );
            }
        }
        // Both cores' queues are in the timeline, running at the same time: the two loads start
        // together, and the makespan is well under the two cores' work in sequence.
        let t = &r.stats.timeline;
        assert!(
            t.busy_ns("dma0") > 0.0 && t.busy_ns("core1.dma0") > 0.0,
            "{:?}",
            t.queues
        );
        assert!(t.busy_ns("core1.vector") > 0.0 && t.busy_ns("core1.gpsimd") > 0.0);
        assert_eq!(t.spans[0].start_ns, 0.0);
        assert_eq!(
            t.spans[3].start_ns, 0.0,
            "core 1's load runs concurrently with core 0's"
        );
        let serial: f64 = t.queues.iter().map(|q| q.busy_ns).sum();
        assert!(t.makespan_ns < 0.75 * serial, "{} vs {serial}", t.makespan_ns);
        // The barrier halves end together; each core's read starts after both.
        let (b0, b1) = (t.spans[6], t.spans[7]);
        assert_eq!(b0.end_ns, b1.end_ns);
        assert!(t.spans[b.read0].start_ns >= b1.end_ns);
    }
}

#[test]
fn without_the_barrier_the_race_detector_names_both_instructions() {
    let b = build(TargetName::Trn2, false);
    let (inp, _) = inputs();
    let e = Executor::new(TargetName::Trn2).run(&b.program, &inp).unwrap_err();
    let ErrorKind::Race(d) = &e.kind else {
        panic!("expected a race, got {e}");
    };
    // Core 0's read of core 1's half (the later instruction) against core 1's store of it.
    assert_eq!(e.index, Some(b.read0));
    assert_eq!(e.opcode, Some("dma_copy"));
    assert_eq!(d.hazard, "read-after-write");
    assert_eq!(d.other, b.store1);
    assert_eq!(d.other_opcode, "dma_copy");
    assert_eq!(d.other_queue, "core1.dma0");
    assert_eq!(d.other_loc.as_deref(), Some("store"));
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("#{}", b.store1)) && msg.contains("shared"),
        "{msg}"
    );
}

#[test]
fn a_two_core_program_is_race_checked_even_with_the_check_switched_off() {
    // Its values come from program order: unchecked, the missing barrier would pass silently.
    let b = build(TargetName::Trn2, false);
    let (inp, _) = inputs();
    let config = ExecConfig {
        race_check: false,
        ..ExecConfig::default()
    };
    let e = Executor::with_config(TargetName::Trn2, config.clone())
        .run(&b.program, &inp)
        .unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Race(_)), "{e}");
    let mut s = Session::new(Executor::with_config(TargetName::Trn2, config));
    for (name, t) in &inp {
        s.put(name, t.clone()).unwrap();
    }
    let bind: BTreeMap<String, String> = ["x", "out"].iter().map(|n| (n.to_string(), n.to_string())).collect();
    let e = s.run(&b.program, &bind).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Race(_)), "{e}");
}

#[test]
fn trn1_refuses_a_second_core_and_core_barrier_naming_the_generation() {
    let b = build(TargetName::Trn1, true);
    let (inp, _) = inputs();
    let e = Executor::new(TargetName::Trn1).run(&b.program, &inp).unwrap_err();
    assert!(e.to_string().contains("trn1 (NeuronCore-v2)"), "{e}");
    assert_eq!(e.index, Some(3), "core 1's first instruction: {e}");
    // A lone core-0 barrier on trn1: the instruction itself is NC-v3+.
    let mut p = Program::new(TargetName::Trn1);
    p.declare("s", F, &[1, 4], HbmRole::Scratch);
    let barrier = Op::CoreBarrier(CoreBarrier {
        data: AccessPattern::hbm("s", F, 0, 1, 4, vec![[1, 4]]),
    });
    refuse::assert_not_on_target(p, Engine::Gpsimd, barrier, "core_barrier", "trn1 (NeuronCore-v2)");
}

#[test]
fn barrier_misuse_is_a_typed_error() {
    let (inp, _) = inputs();
    let exec = Executor::new(TargetName::Trn2);
    // A barrier without a partner: the cores would wait forever.
    let mut lone = build(TargetName::Trn2, true).program;
    lone.instructions.truncate(7);
    let e = exec.run(&lone, &inp).unwrap_err();
    assert!(e.to_string().contains("has no partner on core 1"), "{e}");
    // A core-0 instruction between core 0's barrier and core 1's.
    let mut early = build(TargetName::Trn2, true).program;
    let read0 = early.instructions.remove(8);
    early.instructions.insert(7, read0);
    infer_waits(&mut early);
    let e = exec.run(&early, &inp).unwrap_err();
    assert!(e.to_string().contains("before core 1's matching core_barrier"), "{e}");
    // A wait naming the other core's instruction.
    let mut cross = build(TargetName::Trn2, false).program;
    cross.instructions[6].wait = vec![5];
    let e = exec.run(&cross, &inp).unwrap_err();
    assert!(e.to_string().contains("synchronise only through core_barrier"), "{e}");
    // The barrier's data must be a declared HBM tensor.
    let mut onchip = build(TargetName::Trn2, true).program;
    for k in [6, 7] {
        onchip.instructions[k].op = Op::CoreBarrier(CoreBarrier { data: sb(0) });
    }
    let e = exec.run(&onchip, &inp).unwrap_err();
    assert_eq!(e.operand.as_deref(), Some("data"), "{e}");
    assert!(e.to_string().contains("shared HBM tensor"), "{e}");
}

#[test]
fn core_barrier_json_round_trips_with_the_core_field() {
    let p = build(TargetName::Trn2, true).program;
    let json = p.to_json();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v["instructions"][0].get("core").is_none(), "core 0 is omitted");
    assert_eq!(v["instructions"][3]["core"], 1);
    assert!(v["instructions"][6]["op"]["core_barrier"]["data"].is_object());
    assert_eq!(Program::from_json(&json).unwrap(), p);
}
