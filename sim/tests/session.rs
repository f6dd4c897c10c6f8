//! Device sessions (sim/src/session.rs): tensors stay in simulated HBM across program runs and
//! are moved, never copied, between the session and a run.

use std::collections::BTreeMap;
use trnsim::*;

const P: usize = 4;
const N: usize = 8;

fn hbm(name: &str) -> AccessPattern {
    AccessPattern::hbm(name, DType::F32, 0, P, N as i64, vec![[1, N as i64]])
}

fn sb(offset: u64) -> AccessPattern {
    AccessPattern::sbuf(DType::F32, 0, P, offset, vec![[1, N as i64]])
}

/// out = a `op` b, a kernel-like program: load, one VectorE instruction, store.
fn binary(op: AluOp) -> Program {
    let mut p = Program::new(TargetName::Trn1);
    p.declare("a", DType::F32, &[P, N], HbmRole::Input);
    p.declare("b", DType::F32, &[P, N], HbmRole::Input);
    p.declare("out", DType::F32, &[P, N], HbmRole::Output);
    p.push(Engine::Dma, Op::dma_copy(sb(0), hbm("a")));
    p.push(Engine::Dma, Op::dma_copy(sb(64), hbm("b")));
    p.push(
        Engine::Vector,
        Op::TensorTensor(TensorTensor {
            dst: sb(128),
            in0: sb(0),
            in1: sb(64),
            op,
        }),
    );
    p.push(Engine::Dma, Op::dma_copy(hbm("out"), sb(128)));
    trnsim::infer_waits(&mut p);
    p
}

fn host(vals: impl Fn(usize) -> f32) -> HostTensor {
    HostTensor::from_f32(&[P, N], &(0..P * N).map(vals).collect::<Vec<_>>())
}

fn bind(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    Session::binding(pairs)
}

fn session() -> Session {
    let mut s = Session::new(Executor::new(TargetName::Trn1));
    s.put("x", host(|i| i as f32)).unwrap();
    s.put("w", host(|i| 0.5 * i as f32)).unwrap();
    s
}

#[test]
fn a_tensor_persists_between_two_runs_without_a_host_copy() {
    let mut s = session();
    let put_bytes = (2 * P * N * 4) as u64;
    // Kernel 1: h = x + w. Kernel 2: y = h * x. `h` stays on the device.
    s.run(&binary(AluOp::Add), &bind(&[("a", "x"), ("b", "w"), ("out", "h")]))
        .unwrap();
    let h_ptr = s.tensor("h").unwrap().bytes().as_ptr();
    let x_ptr = s.tensor("x").unwrap().bytes().as_ptr();
    s.run(&binary(AluOp::Multiply), &bind(&[("a", "h"), ("b", "x"), ("out", "y")]))
        .unwrap();
    // The very allocations that kernel 1 wrote and the host put are what kernel 2 read: the
    // tensors were moved into the run and back, not copied.
    assert_eq!(s.tensor("h").unwrap().bytes().as_ptr(), h_ptr);
    assert_eq!(s.tensor("x").unwrap().bytes().as_ptr(), x_ptr);
    assert_eq!(
        *s.transfers(),
        Transfers {
            host_to_device_bytes: put_bytes,
            device_to_host_bytes: 0,
            device_copy_bytes: 0,
            runs: 2,
        }
    );
    assert_eq!(s.names(), vec!["h", "w", "x", "y"]);
    let y = s.get("y").unwrap();
    let expect: Vec<f32> = (0..P * N).map(|i| (i as f32 + 0.5 * i as f32) * i as f32).collect();
    assert_eq!(y.to_f32(), expect);
    assert_eq!(s.transfers().device_to_host_bytes, (P * N * 4) as u64);
    assert_eq!(s.device_bytes(), 4 * P * N * 4);
}

#[test]
fn unbound_tensors_bind_by_their_own_name() {
    let mut s = Session::new(Executor::new(TargetName::Trn1));
    s.put("a", host(|i| i as f32)).unwrap();
    s.put("b", host(|_| 1.0)).unwrap();
    s.run(&binary(AluOp::Add), &BTreeMap::new()).unwrap();
    assert_eq!(
        s.get("out").unwrap().to_f32(),
        (0..P * N).map(|i| i as f32 + 1.0).collect::<Vec<_>>()
    );
}

#[test]
fn one_tensor_bound_to_two_inputs_is_copied_on_the_device() {
    let mut s = session();
    s.run(&binary(AluOp::Add), &bind(&[("a", "x"), ("b", "x"), ("out", "y")]))
        .unwrap();
    assert_eq!(
        s.get("y").unwrap().to_f32(),
        (0..P * N).map(|i| 2.0 * i as f32).collect::<Vec<_>>()
    );
    assert_eq!(s.transfers().device_copy_bytes, (P * N * 4) as u64);
    assert_eq!(s.get("x").unwrap(), host(|i| i as f32));
}

#[test]
fn an_output_may_replace_its_own_input() {
    let mut s = session();
    s.run(&binary(AluOp::Add), &bind(&[("a", "x"), ("b", "w"), ("out", "x")]))
        .unwrap();
    assert_eq!(
        s.get("x").unwrap().to_f32(),
        (0..P * N).map(|i| 1.5 * i as f32).collect::<Vec<_>>()
    );
    assert_eq!(s.names(), vec!["w", "x"]);
}

#[test]
fn a_failed_run_keeps_the_session_as_it_was() {
    let mut s = session();
    let x_ptr = s.tensor("x").unwrap().bytes().as_ptr();
    // Reads SBUF bytes 192.. that nothing wrote.
    let mut p = binary(AluOp::Add);
    if let Op::TensorTensor(t) = &mut p.instructions[2].op {
        t.in1 = sb(192);
    }
    p.instructions[2].loc = Some("kernel.py:7".into());
    let e = s.run(&p, &bind(&[("a", "x"), ("b", "w"), ("out", "y")])).unwrap_err();
    assert_eq!((e.index, e.loc.as_deref()), (Some(2), Some("kernel.py:7")));
    assert!(matches!(e.kind, ErrorKind::UninitializedRead { .. }));
    assert_eq!(s.names(), vec!["w", "x"], "no output appears");
    assert_eq!(s.tensor("x").unwrap().bytes().as_ptr(), x_ptr, "the input came back");
    assert_eq!(s.get("x").unwrap(), host(|i| i as f32));
    assert_eq!(s.transfers().runs, 0);
}

#[test]
fn bad_bindings_are_typed_errors_that_change_nothing() {
    let mut s = session();
    s.put("small", HostTensor::from_f32(&[2, 2], &[0.0; 4])).unwrap();
    let p = binary(AluOp::Add);
    let cases: [(&[(&str, &str)], &str); 5] = [
        (
            &[("a", "x"), ("b", "nope")],
            "session tensor `nope`, which does not exist",
        ),
        (
            &[("a", "x"), ("b", "small")],
            "which is f32 [2, 2]; the program declares f32 [4, 8]",
        ),
        (
            &[("a", "x"), ("b", "w"), ("zz", "x")],
            "bind names `zz`, which the program does not declare",
        ),
        (
            &[("a", "x")],
            "`b` is bound to session tensor `b`, which does not exist",
        ),
        (&[("a", "x"), ("b", "w"), ("out", "w")], ""),
    ];
    for (pairs, msg) in cases {
        let r = s.run(&p, &bind(pairs));
        if msg.is_empty() {
            // Binding the output over an input of the same run is allowed (in place).
            r.unwrap();
            continue;
        }
        let e = r.unwrap_err();
        assert_eq!(e.index, None);
        assert!(e.to_string().contains(msg), "{e} lacks {msg}");
    }
    let mut two_out = binary(AluOp::Add);
    two_out.declare("out2", DType::F32, &[P, N], HbmRole::Output);
    let e = s
        .run(&two_out, &bind(&[("a", "x"), ("b", "x"), ("out", "o"), ("out2", "o")]))
        .unwrap_err();
    assert!(e.to_string().contains("both bound to session tensor `o`"), "{e}");
}

#[test]
fn put_checks_sizes_and_get_delete_work() {
    let mut s = session();
    let bad = HostTensor {
        dtype: DType::F32,
        shape: vec![2, 2],
        data: vec![0; 15],
    };
    assert!(s.put("bad", bad).unwrap_err().to_string().contains("15 bytes"));
    assert!(s.delete("x"));
    assert!(!s.delete("x"));
    assert!(s.get("x").is_none());
    assert_eq!(s.names(), vec!["w"]);
    let mut tiny = Session::new(Executor::with_config(
        TargetName::Trn1,
        ExecConfig {
            max_hbm_bytes: 100,
            ..ExecConfig::default()
        },
    ));
    assert!(
        tiny.put("x", host(|_| 0.0))
            .unwrap_err()
            .to_string()
            .contains("limit is 100")
    );
}

/// A session keeps its on-chip buffers between runs (performance only): nothing a run wrote
/// may be visible to the next one. A program that stores SBUF bytes nothing in it wrote must
/// fail as it does in a fresh session, after a run that wrote exactly those bytes, and after one
/// that failed halfway.
#[test]
fn on_chip_memory_never_carries_over_between_runs() {
    let mut store_unwritten = Program::new(TargetName::Trn1);
    store_unwritten.declare("out", DType::F32, &[P, N], HbmRole::Output);
    store_unwritten.push(Engine::Dma, Op::dma_copy(hbm("out"), sb(128)));
    let fresh = Session::new(Executor::new(TargetName::Trn1))
        .run(&store_unwritten, &bind(&[("out", "o")]))
        .unwrap_err()
        .to_string();
    assert!(fresh.contains("nothing wrote"), "{fresh}");

    let mut s = session();
    // writes sb(128) (the add's result) ...
    s.run(&binary(AluOp::Add), &bind(&[("a", "x"), ("b", "w"), ("out", "h")]))
        .unwrap();
    // ... which the next run must not see
    let after = s.run(&store_unwritten, &bind(&[("out", "o")])).unwrap_err().to_string();
    assert_eq!(after, fresh);
    // a run that writes sb(128) and then fails (an unbound input read) leaves nothing either
    let mut half = binary(AluOp::Add);
    half.push(Engine::Dma, Op::dma_copy(sb(256), hbm("a")));
    half.push(
        Engine::Vector,
        Op::TensorTensor(TensorTensor {
            dst: sb(128),
            in0: sb(512),
            in1: sb(0),
            op: AluOp::Add,
        }),
    );
    trnsim::infer_waits(&mut half);
    assert!(s.run(&half, &bind(&[("a", "x"), ("b", "w"), ("out", "h2")])).is_err());
    let again = s.run(&store_unwritten, &bind(&[("out", "o")])).unwrap_err().to_string();
    assert_eq!(again, fresh);
    // and the session still computes right
    s.run(&binary(AluOp::Add), &bind(&[("a", "x"), ("b", "w"), ("out", "h3")]))
        .unwrap();
    assert_eq!(s.tensor("h3").unwrap().bytes(), s.tensor("h").unwrap().bytes());
}

/// The kept buffers are cleaned where each run wrote, by every write path: strided and
/// contiguous DMA into SBUF, a VectorE write to PSUM, a predicated (masked) copy, far from the
/// first partition and the first bytes. After each writer, a probe that reads the written place
/// must fail as in a fresh session; the same probe inside the writer's program succeeds.
#[test]
fn every_write_path_is_cleaned_between_runs() {
    let far_strided = AccessPattern::sbuf(DType::F32, 96, P, 3000, vec![[2, N as i64]]);
    let far_dense = AccessPattern::sbuf(DType::F32, 64, P, 70_000, vec![[1, N as i64]]);
    let in_psum = AccessPattern::psum(DType::F32, 32, P, 1024, vec![[1, N as i64]]);
    let predicated = AccessPattern::sbuf(DType::F32, 0, P, 5000, vec![[1, N as i64]]);
    let writers: Vec<(AccessPattern, Vec<(Engine, Op)>)> = vec![
        (
            far_strided.clone(),
            vec![(Engine::Dma, Op::dma_copy(far_strided, hbm("a")))],
        ),
        (
            far_dense.clone(),
            vec![(Engine::Dma, Op::dma_copy(far_dense, hbm("a")))],
        ),
        (
            in_psum.clone(),
            vec![(
                Engine::Vector,
                Op::Memset(Memset {
                    dst: in_psum,
                    value: 2.0,
                }),
            )],
        ),
        (
            predicated.clone(),
            vec![
                (Engine::Dma, Op::dma_copy(sb(0), hbm("a"))),
                (
                    Engine::Vector,
                    Op::TensorCopyPredicated(TensorCopyPredicated {
                        dst: predicated,
                        src: sb(0),
                        predicate: AccessPattern::sbuf(DType::U32, 0, P, 0, vec![[1, N as i64]]),
                        reverse_pred: false,
                    }),
                ),
            ],
        ),
    ];
    for (place, insts) in writers {
        let mut probe = Program::new(TargetName::Trn1);
        probe.declare("out", DType::F32, &[P, N], HbmRole::Output);
        let read = |p: &mut Program| {
            let src = place.clone();
            p.push(Engine::Vector, Op::TensorCopy(TensorCopy { dst: sb(40_000), src }));
            p.push(Engine::Dma, Op::dma_copy(hbm("out"), sb(40_000)));
        };
        read(&mut probe);
        trnsim::infer_waits(&mut probe);
        let fresh = Session::new(Executor::new(TargetName::Trn1))
            .run(&probe, &bind(&[("out", "o")]))
            .unwrap_err()
            .to_string();
        assert!(fresh.contains("nothing wrote"), "{fresh}");

        let mut writer = Program::new(TargetName::Trn1);
        writer.declare("a", DType::F32, &[P, N], HbmRole::Input);
        for (engine, op) in insts {
            writer.push(engine, op);
        }
        let mut checked = writer.clone();
        checked.declare("out", DType::F32, &[P, N], HbmRole::Output);
        read(&mut checked);
        trnsim::infer_waits(&mut writer);
        trnsim::infer_waits(&mut checked);

        let mut s = Session::new(Executor::new(TargetName::Trn1));
        s.put("x", host(|i| i as f32 + 1.0)).unwrap();
        s.run(&checked, &bind(&[("a", "x"), ("out", "seen")]))
            .unwrap_or_else(|e| panic!("{place:?}: {e}"));
        s.run(&writer, &bind(&[("a", "x")])).unwrap();
        let after = s.run(&probe, &bind(&[("out", "o")])).unwrap_err().to_string();
        assert_eq!(after, fresh, "{place:?}");
    }
}

/// A session reuses a completed run's proof that a program is race-free for later runs of the
/// very same program, with the same results; any other program is checked, and one that races
/// is caught on every run, even when it looks like a proved one but for an access pattern.
#[test]
fn race_freedom_is_reused_only_for_the_same_program() {
    let mut s = session();
    // the two loads on two DMA queues, so that only waits and access patterns order them
    let on_two_queues = |mut p: Program| {
        p.instructions[1].queue = Some(1);
        p.instructions.iter_mut().for_each(|i| i.wait.clear());
        trnsim::infer_waits(&mut p);
        p
    };
    let add = on_two_queues(binary(AluOp::Add));
    let b = bind(&[("a", "x"), ("b", "w"), ("out", "h")]);
    s.run(&add, &b).unwrap();
    let first = s.tensor("h").unwrap().bytes().to_vec();
    for _ in 0..2 {
        let stats = s.run(&add, &b).unwrap();
        assert_eq!(s.tensor("h").unwrap().bytes(), &first[..]);
        assert!(stats.timeline.makespan_ns > 0.0, "the timeline is still built");
    }
    assert_eq!(s.race_checks(), &RaceChecks { checked: 1, reused: 2 });
    // Same instructions, opcodes and waits, another ALU operator: a new program, checked.
    s.run(
        &on_two_queues(binary(AluOp::Multiply)),
        &bind(&[("a", "x"), ("b", "w"), ("out", "m")]),
    )
    .unwrap();
    assert_eq!(s.race_checks(), &RaceChecks { checked: 2, reused: 2 });
    assert_ne!(s.tensor("m").unwrap().bytes(), &first[..]);
    // The second load now writes the first load's bytes, on another queue with no wait: a race,
    // caught every time although everything but that access pattern matches the proved program.
    let mut racy = add.clone();
    let Op::DmaCopy(d) = &mut racy.instructions[1].op else {
        unreachable!()
    };
    d.dst = sb(0);
    for _ in 0..2 {
        let e = s.run(&racy, &b).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Race(_)), "{e}");
    }
    // The same without waits at all: caught every time too.
    let mut no_waits = add.clone();
    no_waits.instructions.iter_mut().for_each(|i| i.wait.clear());
    for _ in 0..2 {
        let e = s.run(&no_waits, &b).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Race(_)), "{e}");
    }
    assert_eq!(s.race_checks(), &RaceChecks { checked: 2, reused: 2 });
    assert_eq!(s.tensor("h").unwrap().bytes(), &first[..]);
}

/// A program with a data-dependent operand (here a dynamic copy) is race-checked on every run.
#[test]
fn programs_with_data_dependent_operands_are_checked_every_run() {
    let mut p = Program::new(TargetName::Trn1);
    p.declare("a", DType::F32, &[P, N], HbmRole::Input);
    p.declare("i", DType::I32, &[1, 1], HbmRole::Input);
    p.declare("out", DType::F32, &[P, N], HbmRole::Output);
    let off = AccessPattern::sbuf(DType::I32, 0, 1, 512, vec![[1, 1]]);
    p.push(Engine::Dma, Op::dma_copy(sb(0), hbm("a")));
    p.push(
        Engine::Dma,
        Op::dma_copy(off.clone(), AccessPattern::hbm("i", DType::I32, 0, 1, 1, vec![[1, 1]])),
    );
    p.push(
        Engine::Vector,
        Op::TensorCopyDynamicSrc(TensorCopyDynamic {
            dst: sb(128),
            src: AccessPattern::sbuf(DType::F32, 0, P, 0, vec![[1, N as i64]]),
            offset: off,
            offset_scale: 1,
        }),
    );
    p.push(Engine::Dma, Op::dma_copy(hbm("out"), sb(128)));
    trnsim::infer_waits(&mut p);
    let mut s = session();
    s.put(
        "i",
        HostTensor {
            dtype: DType::I32,
            shape: vec![1, 1],
            data: 0i32.to_le_bytes().to_vec(),
        },
    )
    .unwrap();
    for _ in 0..3 {
        s.run(&p, &bind(&[("a", "x"), ("out", "y")])).unwrap();
    }
    assert_eq!(s.race_checks(), &RaceChecks { checked: 3, reused: 0 });
    assert_eq!(s.tensor("y").unwrap().bytes(), s.tensor("x").unwrap().bytes());
}
