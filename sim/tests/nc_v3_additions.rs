//! The NeuronCore-v3+ additions of `nki.isa` 2.32 beyond `range_select`: `nonzero_with_count`
//! (GpSimdE; hand-derived rows from the NKI example, the partitions it touches) and `dma_compute`
//! (DMA), each with one test per typed error and its refusal on trn1.

mod common_tg;
mod refuse;

use common_tg::*;
use trnsim::*;

fn trn2() -> Core {
    Core::on(TargetName::Trn2, Numerics::default())
}

fn op(src_dtype: DType, partitions: usize) -> NonzeroWithCount {
    NonzeroWithCount {
        dst: sb(DType::I32, partitions, 9, 256),
        src: sb(src_dtype, partitions, 8, 0),
        index_offset: 16,
        padding_val: -1,
    }
}

/// Only partitions 0 and 16 hold data: the instruction reads nothing else.
fn core_with_rows(src: &AccessPattern, row0: &[f32], row16: &[f32]) -> Core {
    let mut core = trn2();
    core.put(
        &at_partition(
            AccessPattern {
                partitions: 1,
                ..src.clone()
            },
            0,
        ),
        row0,
    );
    core.put(
        &at_partition(
            AccessPattern {
                partitions: 1,
                ..src.clone()
            },
            16,
        ),
        row16,
    );
    core
}

fn dst_row(core: &Core, dst: &AccessPattern, p: usize) -> Vec<i32> {
    let row = at_partition(
        AccessPattern {
            partitions: 1,
            ..dst.clone()
        },
        dst.start_partition + p,
    );
    core.get_bits(&row).iter().map(|&b| b as i32).collect()
}

#[test]
fn nonzero_positions_then_padding_then_the_count() {
    // The NKI docs' example: [0, 1, 1, 0, 0, 1, 0, 0] with offset 16 → [17, 18, 21, -1 × 5, 3].
    // Row 16 (fp32): −0 is zero, NaN is nonzero → positions 1 and 7 → [17, 23, -1 × 6, 2].
    for dtype in [DType::I32, DType::F32] {
        let i = op(dtype, 32);
        let row16 = if dtype == DType::I32 {
            [0., 0., 0., 0., 0., 0., 0., 5.]
        } else {
            [-0.0, f32::NAN, 0., 0., 0., 0., 0., 2.5]
        };
        let mut core = core_with_rows(&i.src, &[0., 1., 1., 0., 0., 1., 0., 0.], &row16);
        core.run(Engine::Gpsimd, Op::NonzeroWithCount(i.clone())).unwrap();
        assert_eq!(dst_row(&core, &i.dst, 0), vec![17, 18, 21, -1, -1, -1, -1, -1, 3]);
        let want16 = if dtype == DType::I32 {
            vec![23, -1, -1, -1, -1, -1, -1, -1, 1]
        } else {
            vec![17, 23, -1, -1, -1, -1, -1, -1, 2]
        };
        assert_eq!(dst_row(&core, &i.dst, 16), want16, "{dtype}");
        // Partitions between are neither read (they were never written) nor written.
        let p1 = at_partition(
            AccessPattern {
                partitions: 1,
                ..i.dst.clone()
            },
            1,
        );
        assert!(core.mem.read_bits(&p1).is_err());
    }
}

#[test]
fn nonzero_with_count_errors() {
    type Case = (&'static str, fn(&mut NonzeroWithCount), fn(&ErrorKind) -> bool);
    let cases: [Case; 6] = [
        (
            "src",
            |o| o.src.dtype = DType::Bf16,
            |k| matches!(k, ErrorKind::UnsupportedDType { .. }),
        ),
        (
            "dst",
            |o| o.dst.dtype = DType::F32,
            |k| matches!(k, ErrorKind::UnsupportedDType { .. }),
        ),
        (
            "dst",
            |o| o.dst.free = vec![[1, 8]],
            |k| matches!(k, ErrorKind::ShapeMismatch(_)),
        ),
        (
            "dst",
            |o| o.dst.partitions = 16,
            |k| matches!(k, ErrorKind::ShapeMismatch(_)),
        ),
        (
            "index_offset",
            |o| o.index_offset = 1 << 31,
            |k| matches!(k, ErrorKind::Invalid(_)),
        ),
        (
            "padding_val",
            |o| o.padding_val = -(1 << 40),
            |k| matches!(k, ErrorKind::Invalid(_)),
        ),
    ];
    for (operand, edit, pred) in cases {
        let mut i = op(DType::I32, 32);
        let mut core = core_with_rows(&i.src, &[0.; 8], &[0.; 8]);
        edit(&mut i);
        expect_err(core.run(Engine::Gpsimd, Op::NonzeroWithCount(i)), operand, pred);
    }
    // GpSimd cannot reach PSUM.
    let mut i = op(DType::F32, 32);
    i.src.mem = MemSpace::Psum;
    expect_err(trn2().run(Engine::Gpsimd, Op::NonzeroWithCount(i)), "src", |k| {
        matches!(k, ErrorKind::MemoryNotAccessible { .. })
    });
    // Row r of src goes to row r of dst, wherever dst starts (here one row, dst at partition 32).
    let mut i = op(DType::I32, 1);
    i.dst.start_partition = 32;
    let mut core = core_with_rows(&op(DType::I32, 32).src, &[1.; 8], &[0.; 8]);
    core.run(Engine::Gpsimd, Op::NonzeroWithCount(i.clone())).unwrap();
    assert_eq!(dst_row(&core, &i.dst, 0), vec![16, 17, 18, 19, 20, 21, 22, 23, 8]);
}

#[test]
fn nonzero_with_count_is_refused_on_trn1_naming_the_generation() {
    let nz = Op::NonzeroWithCount(op(DType::I32, 32));
    let p = Program::new(TargetName::Trn1);
    refuse::assert_not_on_target(p, Engine::Gpsimd, nz, "nonzero_with_count", "trn1 (NeuronCore-v2)");
}

// ---- dma_compute ------------------------------------------------------------------------------

fn compute(srcs: Vec<AccessPattern>) -> DmaCompute {
    DmaCompute {
        dst: sb(DType::Bf16, 2, 3, 512),
        srcs,
        scales: None,
        reduce_op: AluOp::Add,
    }
}

#[test]
fn dma_compute_adds_its_sources_in_fp32_and_casts_on_write() {
    // Three sources of different dtypes, summed in fp32 then cast once: (1 + 2^-8) + 2^-9 + (-1)
    // = 2^-8 + 2^-9 = 0.005859375, exact in bf16 (a bf16 partial sum would have lost the 2^-9);
    // 256 + 0.5 + 0 = 256.5 rounds once into bf16 (step 2 at 256) to 256.
    let mut core = trn2();
    let a = sb(DType::F32, 2, 3, 0);
    let b = sb(DType::F16, 2, 3, 64);
    let c = sb(DType::I32, 2, 3, 128);
    core.put(&a, &[1.0 + 2f32.powi(-8), 256.0, 0.0, 1.0, 2.0, 3.0]);
    core.put(&b, &[2f32.powi(-9), 0.5, 0.0, 1.0, 1.0, 1.0]);
    core.put(&c, &[-1.0, 0.0, 0.0, 0.0, 0.0, 7.0]);
    let mut op = compute(vec![a.clone(), b.clone(), c.clone()]);
    op.scales = Some(vec![1.0; 3]);
    core.run(Engine::Dma, Op::DmaCompute(op.clone())).unwrap();
    assert_eq!(core.get(&op.dst), vec![0.005859375, 256.0, 0.0, 2.0, 3.0, 11.0]);
    let bytes = 6 * (4 + 2 + 4);
    assert_eq!(core.stats.dma_bytes, bytes);
    // One source is a cast copy.
    let one = compute(vec![a]);
    core.run(Engine::Dma, Op::DmaCompute(one)).unwrap();
    assert_eq!(core.get(&op.dst), vec![1.0, 256.0, 0.0, 1.0, 2.0, 3.0]);
}

#[test]
fn dma_compute_errors() {
    let a = sb(DType::F32, 2, 3, 0);
    type Case = (&'static str, fn(&mut DmaCompute), fn(&ErrorKind) -> bool);
    let cases: [Case; 6] = [
        ("srcs", |o| o.srcs.clear(), |k| matches!(k, ErrorKind::Invalid(_))),
        (
            "srcs",
            |o| o.srcs = vec![o.srcs[0].clone(); 17],
            |k| matches!(k, ErrorKind::Invalid(_)),
        ),
        (
            "reduce_op",
            |o| o.reduce_op = AluOp::Max,
            |k| matches!(k, ErrorKind::Invalid(_)),
        ),
        (
            "scales",
            |o| o.scales = Some(vec![2.0]),
            |k| matches!(k, ErrorKind::Invalid(_)),
        ),
        (
            "srcs[0]",
            |o| o.srcs[0].free = vec![[1, 2]],
            |k| matches!(k, ErrorKind::ShapeMismatch(_)),
        ),
        (
            "dst",
            |o| o.dst.mem = MemSpace::Psum,
            |k| matches!(k, ErrorKind::MemoryNotAccessible { .. }),
        ),
    ];
    for (operand, edit, pred) in cases {
        let mut core = trn2();
        core.put(&a, &[0.0; 6]);
        let mut op = compute(vec![a.clone()]);
        edit(&mut op);
        expect_err(core.run(Engine::Dma, Op::DmaCompute(op)), operand, pred);
    }
    // A source nothing wrote is an uninitialized read, named by its list position.
    let mut core = trn2();
    core.put(&a, &[0.0; 6]);
    let r = core.run(
        Engine::Dma,
        Op::DmaCompute(compute(vec![a.clone(), sb(DType::F32, 2, 3, 256)])),
    );
    expect_err(r, "srcs[1]", |k| matches!(k, ErrorKind::UninitializedRead { .. }));
}

#[test]
fn dma_compute_is_refused_on_trn1_naming_the_generation() {
    let dc = Op::DmaCompute(compute(vec![sb(DType::F32, 2, 3, 0)]));
    let p = Program::new(TargetName::Trn1);
    refuse::assert_not_on_target(p, Engine::Dma, dc, "dma_compute", "trn1 (NeuronCore-v2)");
}
