//! The NC-v2 `nki.isa` instructions added to complete the SDK 2.26–2.28 inventory:
//! `tensor_copy_dynamic_src`/`_dst` (VectorE/GpSimdE), `sequence_bounds` (GpSimdE),
//! `dma_transpose` (DMA; with NKI 0.6's `dge_mode` rules), and the NC-v3+ `range_select` (VectorE,
//! trn2 only). Expected values are derived by hand in the comments; every typed error each
//! instruction raises has a test.

mod common_tg;

use common_tg::*;
use std::collections::BTreeMap;
use trnsim::*;

fn i32s(v: &[u32]) -> Vec<i32> {
    v.iter().map(|&b| b as i32).collect()
}

// ---- tensor_copy_dynamic_src / _dst ---------------------------------------------------------------

fn dynamic(dst: AccessPattern, src: AccessPattern, offset: AccessPattern, offset_scale: i64) -> TensorCopyDynamic {
    TensorCopyDynamic {
        dst,
        src,
        offset,
        offset_scale,
    }
}

/// A [2 × 16] f32 region at byte 0 holding `100·p + k`, and the offset tile (i32) at byte 512.
fn dyn_core(offset_value: i32) -> (Core, AccessPattern) {
    let mut core = Core::new();
    let region = sb(DType::F32, 2, 16, 0);
    let vals: Vec<f32> = (0..2)
        .flat_map(|p| (0..16).map(move |k| (100 * p + k) as f32))
        .collect();
    core.put(&region, &vals);
    let off = sb(DType::I32, 1, 1, 512);
    core.put_bits(&off, &[offset_value as u32]);
    (core, off)
}

#[test]
fn dynamic_src_reads_at_the_run_time_offset() {
    // offset 3 × scale 2 = 6 elements: src [2 × 4] at element 0 moves to elements 6..10 of each
    // partition → [6, 7, 8, 9] and [106, 107, 108, 109].
    let (mut core, off) = dyn_core(3);
    let dst = sb(DType::F32, 2, 4, 256);
    let op = Op::TensorCopyDynamicSrc(dynamic(dst.clone(), sb(DType::F32, 2, 4, 0), off, 2));
    core.run(Engine::Vector, op).unwrap();
    assert_eq!(core.get(&dst), vec![6., 7., 8., 9., 106., 107., 108., 109.]);
    // Cost: max(MIN_II_DYNAMIC = 600, 4) cycles at VectorE's 1.12 GHz.
    assert!((core.stats.est_ns.vector - 600.0 / 1.12).abs() < 1e-9);
}

#[test]
fn dynamic_src_on_gpsimd_casts_through_fp32_when_dtypes_differ() {
    // offset 1 × scale 1: elements 1..4 → [1, 2, 3], [101, 102, 103] as bf16 (exact).
    let (mut core, off) = dyn_core(1);
    let dst = sb(DType::Bf16, 2, 3, 256);
    let op = Op::TensorCopyDynamicSrc(dynamic(dst.clone(), sb(DType::F32, 2, 3, 0), off, 1));
    core.run(Engine::Gpsimd, op).unwrap();
    assert_eq!(core.get(&dst), vec![1., 2., 3., 101., 102., 103.]);
}

#[test]
fn dynamic_dst_writes_at_the_run_time_offset() {
    // src = elements 0..4 of each partition; dst base at byte 256 (element 64), offset 2 × 4 = 8
    // elements further: elements 72..76 receive [0, 1, 2, 3] and [100, 101, 102, 103]; the
    // unshifted destination stays unwritten.
    let (mut core, off) = dyn_core(2);
    let op = Op::TensorCopyDynamicDst(dynamic(sb(DType::F32, 2, 4, 256), sb(DType::F32, 2, 4, 0), off, 4));
    core.run(Engine::Vector, op).unwrap();
    assert_eq!(
        core.get(&sb(DType::F32, 2, 4, 288)),
        vec![0., 1., 2., 3., 100., 101., 102., 103.]
    );
    assert!(core.mem.read_f32(&sb(DType::F32, 2, 4, 256)).is_err());
}

#[test]
fn dynamic_copy_errors() {
    let src = sb(DType::F32, 2, 4, 0);
    let dst = sb(DType::F32, 2, 4, 256);
    // Float offset tile.
    let (mut core, _) = dyn_core(0);
    let fo = sb(DType::F32, 1, 1, 600);
    core.put(&fo, &[1.0]);
    let r = core.run(
        Engine::Vector,
        Op::TensorCopyDynamicSrc(dynamic(dst.clone(), src.clone(), fo, 1)),
    );
    expect_err(r, "offset", |k| matches!(k, ErrorKind::UnsupportedDType { .. }));
    // Offset in PSUM.
    let po = ps(DType::I32, 1, 1, 0);
    let r = core.run(
        Engine::Vector,
        Op::TensorCopyDynamicSrc(dynamic(dst.clone(), src.clone(), po, 1)),
    );
    expect_err(r, "offset", |k| matches!(k, ErrorKind::Invalid(_)));
    // Offset of two elements.
    let r = core.run(
        Engine::Vector,
        Op::TensorCopyDynamicSrc(dynamic(dst.clone(), src.clone(), sb(DType::I32, 1, 2, 512), 1)),
    );
    expect_err(r, "offset", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    // Negative resulting offset: −1 × 1 element before byte 0.
    let (mut core, off) = dyn_core(-1);
    let r = core.run(
        Engine::Vector,
        Op::TensorCopyDynamicSrc(dynamic(dst.clone(), src.clone(), off, 1)),
    );
    expect_err(r, "offset", |k| matches!(k, ErrorKind::Invalid(_)));
    // Offset past the end of the partition: the moved src is out of bounds.
    let (mut core, off) = dyn_core(1 << 20);
    let r = core.run(
        Engine::Vector,
        Op::TensorCopyDynamicSrc(dynamic(dst.clone(), src.clone(), off, 64)),
    );
    expect_err(r, "src", |k| matches!(k, ErrorKind::OutOfBounds { .. }));
    // Shapes differ.
    let (mut core, off) = dyn_core(0);
    let r = core.run(
        Engine::Vector,
        Op::TensorCopyDynamicDst(dynamic(sb(DType::F32, 2, 5, 256), src.clone(), off.clone(), 1)),
    );
    expect_err(r, "src", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    // Unwritten offset tile.
    let r = core.run(
        Engine::Vector,
        Op::TensorCopyDynamicSrc(dynamic(dst.clone(), src.clone(), sb(DType::I32, 1, 1, 1024), 1)),
    );
    expect_err(r, "offset", |k| matches!(k, ErrorKind::UninitializedRead { .. }));
    // GpSimd cannot touch PSUM.
    let r = core.run(
        Engine::Gpsimd,
        Op::TensorCopyDynamicDst(dynamic(ps(DType::F32, 2, 4, 0), src, off, 1)),
    );
    expect_err(r, "dst", |k| matches!(k, ErrorKind::MemoryNotAccessible { .. }));
}

// ---- sequence_bounds -------------------------------------------------------------------------------

fn bounds(dst: AccessPattern, segment_ids: AccessPattern) -> Op {
    Op::SequenceBounds(SequenceBounds { dst, segment_ids })
}

#[test]
fn sequence_bounds_int32() {
    // ids [0, 1, 1, 2, 2, 2, 0, 3], n = 8.
    // starts: pad → 8; run of 1 at 1..3 → 1, 1; run of 2 at 3..6 → 3, 3, 3; pad → 8; 3 at 7 → 7.
    // ends (exclusive): pad → −1; 1s → 3, 3; 2s → 6, 6, 6; pad → −1; last 3 → 8.
    let mut core = Core::new();
    let ids = sb(DType::I32, 1, 8, 0);
    core.put_bits(&ids, &[0, 1, 1, 2, 2, 2, 0, 3]);
    let dst = sb(DType::I32, 1, 16, 64);
    core.run(Engine::Gpsimd, bounds(dst.clone(), ids)).unwrap();
    assert_eq!(
        i32s(&core.get_bits(&dst)),
        vec![8, 1, 1, 3, 3, 3, 8, 7, -1, 3, 3, 6, 6, 6, -1, 8]
    );
    // Cost: max(MIN_II, 16) cycles at GpSimd's 1.4 GHz.
    let min_ii = core.target.min_ii_cycles.max(16) as f64;
    assert!((core.stats.est_ns.gpsimd - min_ii / 1.4).abs() < 1e-9);
}

#[test]
fn sequence_bounds_float_compares_as_fp32() {
    // f32 ids [5, 5, NaN, NaN, −0, 7] → f32 dst. NaN equals nothing (each NaN is its own run);
    // −0 == 0 is padding. starts: 0, 0, 2, 3, 6 (pad = n), 5; ends: 2, 2, 3, 4, −1, 6.
    let mut core = Core::new();
    let ids = sb(DType::F32, 1, 6, 0);
    core.put(&ids, &[5.0, 5.0, f32::NAN, f32::NAN, -0.0, 7.0]);
    let dst = sb(DType::F32, 1, 12, 64);
    core.run(Engine::Gpsimd, bounds(dst.clone(), ids.clone())).unwrap();
    assert_eq!(core.get(&dst), vec![0., 0., 2., 3., 6., 5., 2., 2., 3., 4., -1., 6.]);
    // Mixed dtypes: f32 ids into an int32 dst.
    let idst = sb(DType::I32, 1, 12, 256);
    core.run(Engine::Gpsimd, bounds(idst.clone(), ids)).unwrap();
    assert_eq!(i32s(&core.get_bits(&idst)), vec![0, 0, 2, 3, 6, 5, 2, 2, 3, 4, -1, 6]);
}

#[test]
fn sequence_bounds_errors() {
    let mut core = Core::new();
    let ids = sb(DType::I32, 1, 4, 0);
    core.put_bits(&ids, &[1, 1, 2, 0]);
    let dst = sb(DType::I32, 1, 8, 64);
    // dtype of the ids and of dst.
    let r = core.run(Engine::Gpsimd, bounds(dst.clone(), sb(DType::Bf16, 1, 4, 0)));
    expect_err(r, "segment_ids", |k| matches!(k, ErrorKind::UnsupportedDType { .. }));
    let r = core.run(Engine::Gpsimd, bounds(sb(DType::U16, 1, 8, 64), ids.clone()));
    expect_err(r, "dst", |k| matches!(k, ErrorKind::UnsupportedDType { .. }));
    // More than one partition.
    let two = sb(DType::I32, 2, 4, 0);
    core.put_bits(&two, &[1; 8]);
    let r = core.run(Engine::Gpsimd, bounds(dst.clone(), two));
    expect_err(r, "segment_ids", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    // dst not [1, 2n].
    let r = core.run(Engine::Gpsimd, bounds(sb(DType::I32, 1, 7, 64), ids.clone()));
    expect_err(r, "dst", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    // PSUM is out of GpSimd's reach.
    let r = core.run(Engine::Gpsimd, bounds(ps(DType::I32, 1, 8, 0), ids));
    expect_err(r, "dst", |k| matches!(k, ErrorKind::MemoryNotAccessible { .. }));
    // Unwritten ids.
    let r = core.run(Engine::Gpsimd, bounds(dst, sb(DType::I32, 1, 4, 1024)));
    expect_err(r, "segment_ids", |k| matches!(k, ErrorKind::UninitializedRead { .. }));
}

// ---- dma_transpose -----------------------------------------------------------------------------------

fn transpose(dst: AccessPattern, src: AccessPattern) -> Op {
    transpose_with(dst, src, DgeMode::Unknown)
}

fn transpose_with(dst: AccessPattern, src: AccessPattern, dge_mode: DgeMode) -> Op {
    Op::DmaTranspose(DmaTranspose {
        dst,
        src,
        dge_mode,
        indirect: None,
    })
}

fn tile(dtype: DType, partitions: usize, offset: u64, free: Vec<[i64; 2]>) -> AccessPattern {
    AccessPattern::sbuf(dtype, 0, partitions, offset, free)
}

#[test]
fn dma_transpose_2d() {
    // [[1, 2, 3], [4, 5, 6]] → [[1, 4], [2, 5], [3, 6]], bit copies of bf16.
    let mut core = Core::new();
    let src = sb(DType::Bf16, 2, 3, 0);
    core.put(&src, &[1., 2., 3., 4., 5., 6.]);
    let dst = sb(DType::Bf16, 3, 2, 64);
    core.run(Engine::Dma, transpose(dst.clone(), src)).unwrap();
    assert_eq!(core.get(&dst), vec![1., 4., 2., 5., 3., 6.]);
    // 6 elements × 2 bytes moved.
    assert_eq!(core.stats.dma_bytes, 12);
}

#[test]
fn dma_transpose_3d_reverses_the_axes() {
    // src [2, 2, 3] holding 100a + 10b + c; dst [3, 2, 2] with dst[c, b, a] = src[a, b, c]:
    // c = 0: (b0: 0, 100) (b1: 10, 110); c = 1: 1, 101, 11, 111; c = 2: 2, 102, 12, 112.
    let mut core = Core::new();
    let src = tile(DType::F32, 2, 0, vec![[3, 2], [1, 3]]);
    let vals: Vec<f32> = (0..2)
        .flat_map(|a| (0..2).flat_map(move |b| (0..3).map(move |c| (100 * a + 10 * b + c) as f32)))
        .collect();
    core.put(&src, &vals);
    let dst = tile(DType::F32, 3, 64, vec![[2, 2], [1, 2]]);
    core.run(Engine::Dma, transpose(dst.clone(), src)).unwrap();
    assert_eq!(
        core.get(&dst),
        vec![0., 100., 10., 110., 1., 101., 11., 111., 2., 102., 12., 112.]
    );
}

#[test]
fn dma_transpose_4d_permutes_3_1_2_0() {
    // src [2, 1, 2, 3] holding 1000a + 100b + 10c + d; dst [3, 1, 2, 2] with
    // dst[d, b, c, a] = src[a, b, c, d]: d = 0: 0, 1000, 10, 1010; d = 1: 1, 1001, 11, 1011; …
    let mut core = Core::new();
    let src = tile(DType::F32, 2, 0, vec![[6, 1], [3, 2], [1, 3]]);
    let vals: Vec<f32> = (0..2)
        .flat_map(|a| (0..2).flat_map(move |c| (0..3).map(move |d| (1000 * a + 10 * c + d) as f32)))
        .collect();
    core.put(&src, &vals);
    let dst = tile(DType::F32, 3, 64, vec![[4, 1], [2, 2], [1, 2]]);
    core.run(Engine::Dma, transpose(dst.clone(), src)).unwrap();
    assert_eq!(
        core.get(&dst),
        vec![0., 1000., 10., 1010., 1., 1001., 11., 1011., 2., 1002., 12., 1012.]
    );
}

#[test]
fn dma_transpose_hbm_to_sbuf_in_a_program() {
    // x [2, 3] in HBM → SBUF [3, 2] → y [3, 2] in HBM: y = xᵀ.
    let mut p = Program::new(TargetName::Trn1);
    p.declare("x", DType::F32, &[2, 3], HbmRole::Input);
    p.declare("y", DType::F32, &[3, 2], HbmRole::Output);
    let t = sb(DType::F32, 3, 2, 0);
    p.push(
        Engine::Dma,
        transpose(t.clone(), AccessPattern::hbm("x", DType::F32, 0, 2, 3, vec![[1, 3]])),
    );
    p.push(
        Engine::Dma,
        Op::DmaCopy(DmaCopy {
            dst: AccessPattern::hbm("y", DType::F32, 0, 3, 2, vec![[1, 2]]),
            src: t,
            accumulate: false,
            indirect: None,
        }),
    );
    p.instructions[1].wait = vec![0];
    let mut inputs = BTreeMap::new();
    inputs.insert(
        "x".to_string(),
        HostTensor::from_f32(&[2, 3], &[1., 2., 3., 4., 5., 6.]),
    );
    let run = Executor::new(TargetName::Trn1).run(&p, &inputs).unwrap();
    assert_eq!(run.outputs["y"].to_f32(), vec![1., 4., 2., 5., 3., 6.]);
}

#[test]
fn dma_transpose_errors() {
    let mut core = Core::new();
    let src = sb(DType::F32, 2, 3, 0);
    core.put(&src, &[0.0; 6]);
    // dst not the permuted shape.
    let r = core.run(Engine::Dma, transpose(sb(DType::F32, 2, 3, 64), src.clone()));
    expect_err(r, "dst", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    // A 1-dimensional tile (no free dims) has nothing to transpose.
    let r = core.run(
        Engine::Dma,
        transpose(tile(DType::F32, 2, 64, vec![]), tile(DType::F32, 2, 0, vec![])),
    );
    expect_err(r, "src", |k| matches!(k, ErrorKind::Invalid(_)));
    // DMA never touches PSUM.
    let r = core.run(Engine::Dma, transpose(ps(DType::F32, 3, 2, 0), src));
    expect_err(r, "dst", |k| matches!(k, ErrorKind::MemoryNotAccessible { .. }));
    // Unwritten source.
    let r = core.run(
        Engine::Dma,
        transpose(sb(DType::F32, 3, 2, 64), sb(DType::F32, 2, 3, 1024)),
    );
    expect_err(r, "src", |k| matches!(k, ErrorKind::UninitializedRead { .. }));
}

// ---- dma_transpose: dge_mode (NKI 0.6) ----------------------------------------------------------------

const ALL_DGE_MODES: [DgeMode; 4] = [DgeMode::Unknown, DgeMode::None, DgeMode::Swdge, DgeMode::Hwdge];

/// Row-major free dims of a tile whose dims are `dims` (`[first, free…]`), and its row step.
fn row_major(dims: &[usize]) -> (Vec<[i64; 2]>, i64) {
    let mut free = Vec::new();
    let mut step = 1i64;
    for &d in dims[1..].iter().rev() {
        free.push([step, d as i64]);
        step *= d as i64;
    }
    free.reverse();
    (free, step)
}

fn hbm_tile(name: &str, dtype: DType, dims: &[usize]) -> AccessPattern {
    let (free, step) = row_major(dims);
    AccessPattern::hbm(name, dtype, 0, dims[0], step, free)
}

fn sbuf_tile(dtype: DType, dims: &[usize], offset: u64) -> AccessPattern {
    AccessPattern::sbuf(dtype, 0, dims[0], offset, row_major(dims).0)
}

/// The destination dims of a transpose of `dims` (the NKI docs' fixed permutation per rank).
fn transposed(dims: &[usize]) -> Vec<usize> {
    match *dims {
        [a, b] => vec![b, a],
        [a, b, c] => vec![c, b, a],
        [a, b, c, d] => vec![d, b, c, a],
        _ => unreachable!(),
    }
}

/// `x` (HBM, dims `dims`, values `vals`) transposed into HBM `y` by one `dma_transpose` on
/// `target`, from HBM (`src_hbm`) or from an SBUF copy of x, into SBUF (then copied to y) or
/// straight into y (`dst_hbm`). Every instruction waits for the one before.
fn transpose_run(
    target: TargetName,
    src_hbm: bool,
    dst_hbm: bool,
    mode: DgeMode,
    dtype: DType,
    dims: &[usize],
    vals: &[f32],
) -> Result<Vec<f32>, SimError> {
    let out_dims = transposed(dims);
    let mut p = Program::new(target);
    p.declare("x", dtype, dims, HbmRole::Input);
    p.declare("y", dtype, &out_dims, HbmRole::Output);
    let src = if src_hbm {
        hbm_tile("x", dtype, dims)
    } else {
        let t = sbuf_tile(dtype, dims, 0);
        p.push(
            Engine::Dma,
            Op::DmaCopy(DmaCopy {
                dst: t.clone(),
                src: hbm_tile("x", dtype, dims),
                accumulate: false,
                indirect: None,
            }),
        );
        t
    };
    let dst = if dst_hbm {
        hbm_tile("y", dtype, &out_dims)
    } else {
        sbuf_tile(dtype, &out_dims, 8192)
    };
    p.push(Engine::Dma, transpose_with(dst.clone(), src, mode));
    if !dst_hbm {
        p.push(
            Engine::Dma,
            Op::DmaCopy(DmaCopy {
                dst: hbm_tile("y", dtype, &out_dims),
                src: dst,
                accumulate: false,
                indirect: None,
            }),
        );
    }
    for k in 1..p.instructions.len() {
        p.instructions[k].wait = vec![k as u32 - 1];
    }
    let mut inputs = BTreeMap::new();
    inputs.insert("x".to_string(), HostTensor::from_f32_as(dtype, dims, vals));
    Executor::new(target).run(&p, &inputs).map(|r| r.outputs["y"].to_f32())
}

#[track_caller]
fn expect_sim_err<T: std::fmt::Debug>(
    r: Result<T, SimError>,
    operand: &str,
    pred: impl Fn(&ErrorKind) -> bool,
) -> SimError {
    let e = r.expect_err("expected the transpose to be refused");
    assert_eq!(e.operand.as_deref(), Some(operand), "wrong operand in {e:?}");
    assert!(pred(&e.kind), "unexpected error kind: {:?} ({})", e.kind, e.kind);
    e
}

#[test]
fn dma_transpose_each_dge_mode_from_hbm_and_from_sbuf() {
    // 2-D: x[a][b] = 10a + b ([4, 8], bf16: integers below 256 are exact) → y[b][a] = 10a + b.
    let x2: Vec<f32> = (0..4).flat_map(|a| (0..8).map(move |b| (10 * a + b) as f32)).collect();
    let y2: Vec<f32> = (0..8).flat_map(|b| (0..4).map(move |a| (10 * a + b) as f32)).collect();
    // 3-D: x[a][b][c] = 100a + 10b + c ([2, 3, 4]) → y[c][b][a] = 100a + 10b + c.
    let x3: Vec<f32> = (0..2)
        .flat_map(|a| (0..3).flat_map(move |b| (0..4).map(move |c| (100 * a + 10 * b + c) as f32)))
        .collect();
    let y3: Vec<f32> = (0..4)
        .flat_map(|c| (0..3).flat_map(move |b| (0..2).map(move |a| (100 * a + 10 * b + c) as f32)))
        .collect();
    for src_hbm in [true, false] {
        for mode in ALL_DGE_MODES {
            let r2 = transpose_run(TargetName::Trn2, src_hbm, false, mode, DType::Bf16, &[4, 8], &x2);
            let r3 = transpose_run(TargetName::Trn2, src_hbm, false, mode, DType::Bf16, &[2, 3, 4], &x3);
            match mode {
                // The two modes AWS allows a direct transpose; both shapes are inside the HWDGE
                // limits (src.shape[0] 4 and 2, last dim 8 and 4 ≤ 128, 2-byte bf16).
                DgeMode::Unknown | DgeMode::Hwdge => {
                    assert_eq!(r2.unwrap(), y2, "{mode:?} 2-D from hbm={src_hbm}");
                    assert_eq!(r3.unwrap(), y3, "{mode:?} 3-D from hbm={src_hbm}");
                }
                // "The only valid dge_modes are unknown and hwdge" (direct transpose).
                DgeMode::None | DgeMode::Swdge => {
                    for r in [r2, r3] {
                        let e = expect_sim_err(r, "dge_mode", |k| matches!(k, ErrorKind::Invalid(_)));
                        assert!(e.to_string().contains("unknown or hwdge"), "{e}");
                    }
                }
            }
        }
    }
    // NeuronCore-v4 has the hardware DGE too.
    let r = transpose_run(TargetName::Trn3, true, false, DgeMode::Hwdge, DType::Bf16, &[4, 8], &x2);
    assert_eq!(r.unwrap(), y2);
}

#[test]
fn dma_transpose_hwdge_is_refused_on_trn1_naming_the_generation() {
    assert!(TargetName::Trn1.params().dma_transpose_hwdge.is_none());
    let x: Vec<f32> = (0..32).map(|v| v as f32).collect();
    for src_hbm in [true, false] {
        let r = transpose_run(
            TargetName::Trn1,
            src_hbm,
            false,
            DgeMode::Hwdge,
            DType::Bf16,
            &[4, 8],
            &x,
        );
        let e = expect_sim_err(r, "dge_mode", |k| matches!(k, ErrorKind::NotOnTarget { .. }));
        assert!(e.to_string().contains("trn1 (NeuronCore-v2)"), "{e}");
        // The compiler's choice (unknown) transposes on trn1 as before.
        let r = transpose_run(
            TargetName::Trn1,
            src_hbm,
            false,
            DgeMode::Unknown,
            DType::Bf16,
            &[4, 8],
            &x,
        );
        assert_eq!(r.unwrap()[..4], [0., 8., 16., 24.]);
    }
}

#[test]
fn dma_transpose_hwdge_limits_are_target_data() {
    for t in [TargetName::Trn2, TargetName::Trn3] {
        let rule = t.params().dma_transpose_hwdge.expect("NC-v3+ has a hardware DGE");
        assert_eq!(rule.first_dims, &[1, 2, 4, 8, 16]);
        assert_eq!(rule.max_last_dim, 128);
        assert_eq!(rule.elem_bytes, 2);
    }
    let zeros = |n: usize| vec![0.0f32; n];
    // src.shape[0] ∈ {1, 2, 4, 8, 16} with the largest last dim, 128: accepted, from either side.
    for first in [1, 2, 4, 8, 16] {
        for src_hbm in [true, false] {
            let x: Vec<f32> = (0..first * 128).map(|v| (v % 256) as f32).collect();
            let y = transpose_run(
                TargetName::Trn2,
                src_hbm,
                false,
                DgeMode::Hwdge,
                DType::Bf16,
                &[first, 128],
                &x,
            )
            .unwrap();
            // y[j][i] = x[i][j]: y[1][0] = x[0][1] = 1; y[0][first-1] = x[first-1][0].
            assert_eq!(y[first], 1.0);
            assert_eq!(y[first - 1], (((first - 1) * 128) % 256) as f32);
        }
    }
    // src.shape[0] outside the set (3, 32) and a 4-D source whose first dim is 5.
    for dims in [vec![3usize, 8], vec![32, 8], vec![5, 1, 2, 4]] {
        let n = dims.iter().product();
        let r = transpose_run(
            TargetName::Trn2,
            false,
            false,
            DgeMode::Hwdge,
            DType::Bf16,
            &dims,
            &zeros(n),
        );
        let e = expect_sim_err(r, "src", |k| matches!(k, ErrorKind::Invalid(_)));
        assert!(e.to_string().contains("src.shape[0] in [1, 2, 4, 8, 16]"), "{e}");
        // Without hwdge the same transpose runs.
        transpose_run(
            TargetName::Trn2,
            false,
            false,
            DgeMode::Unknown,
            DType::Bf16,
            &dims,
            &zeros(n),
        )
        .unwrap();
    }
    // src.shape[-1] = 129 > 128 (into HBM: an SBUF dst could not hold 129 partitions anyway).
    let r = transpose_run(
        TargetName::Trn2,
        false,
        true,
        DgeMode::Hwdge,
        DType::Bf16,
        &[4, 129],
        &zeros(516),
    );
    expect_sim_err(r, "src", |k| {
        matches!(
            k,
            ErrorKind::FreeSizeLimit {
                size: 129,
                limit: 128,
                ..
            }
        )
    });
    let x: Vec<f32> = (0..516).map(|v| (v % 256) as f32).collect();
    let y = transpose_run(
        TargetName::Trn2,
        false,
        true,
        DgeMode::Unknown,
        DType::Bf16,
        &[4, 129],
        &x,
    )
    .unwrap();
    // y[1][0] = x[0][1] = 1, y[0][1] = x[1][0] = 129.
    assert_eq!(y[..2], [0.0, 129.0]);
    assert_eq!(y[4], 1.0);
    // A 4-byte dtype: HWDGE moves 2-byte elements only; unknown moves fp32.
    let r = transpose_run(
        TargetName::Trn2,
        true,
        false,
        DgeMode::Hwdge,
        DType::F32,
        &[4, 8],
        &zeros(32),
    );
    expect_sim_err(r, "src", |k| {
        matches!(k, ErrorKind::UnsupportedDType { dtype: "f32", .. })
    });
    transpose_run(
        TargetName::Trn2,
        true,
        false,
        DgeMode::Unknown,
        DType::F32,
        &[4, 8],
        &zeros(32),
    )
    .unwrap();
}

#[test]
fn dma_transpose_dst_rank_must_match_src_rank() {
    let mut core = trn2_core();
    let src = sb(DType::Bf16, 2, 6, 0);
    core.put(&src, &[0.0; 12]);
    // src [2, 6] is 2-D; a 3-D dst [6, 2, 1] holds the same elements but has another rank.
    let dst3 = AccessPattern::sbuf(DType::Bf16, 0, 6, 64, vec![[1, 2], [1, 1]]);
    let r = core.run(Engine::Dma, transpose_with(dst3, src.clone(), DgeMode::Hwdge));
    expect_err(
        r,
        "dst",
        |k| matches!(k, ErrorKind::ShapeMismatch(m) if m.contains("src's rank")),
    );
    // And a 3-D src [2, 3, 2] into a 2-D dst [2, 6].
    let src3 = AccessPattern::sbuf(DType::Bf16, 0, 2, 0, vec![[2, 3], [1, 2]]);
    let r = core.run(Engine::Dma, transpose(sb(DType::Bf16, 2, 6, 64), src3));
    expect_err(
        r,
        "dst",
        |k| matches!(k, ErrorKind::ShapeMismatch(m) if m.contains("src's rank")),
    );
}

#[test]
fn dma_transpose_of_an_indirect_source_is_a_typed_refusal() {
    let mut core = trn2_core();
    let src = sb(DType::Bf16, 16, 8, 0);
    core.put(&src, &[0.0; 128]);
    let index = sb(DType::U32, 16, 1, 1024);
    core.put_bits(&index, &[0; 16]);
    for mode in ALL_DGE_MODES {
        let op = Op::DmaTranspose(DmaTranspose {
            dst: sb(DType::Bf16, 8, 16, 2048),
            src: src.clone(),
            dge_mode: mode,
            indirect: Some(Indirect {
                side: IndirectSide::Src,
                index: index.clone(),
                row_step: 8,
                oob: OobMode::Error,
            }),
        });
        let r = core.run(Engine::Dma, op);
        expect_err(
            r,
            "src",
            |k| matches!(k, ErrorKind::Unsupported(m) if m.contains("indirect src is not modelled")),
        );
    }
    // Nothing was written.
    assert!(core.mem.read_f32(&sb(DType::Bf16, 8, 16, 2048)).is_err());
}

#[test]
fn dma_transpose_dge_mode_json_defaults_to_unknown_and_refuses_other_names() {
    let base = r#"{"dst": {"mem": "sbuf", "dtype": "bf16", "partitions": 8, "free": [[1, 4]]}, "src": {"mem": "sbuf", "dtype": "bf16", "partitions": 4, "offset": 64, "free": [[1, 8]]}"#;
    let op = |extra: &str| serde_json::from_str::<Op>(&format!(r#"{{"dma_transpose": {base}{extra}}}}}"#));
    // A program written before the field existed loads, as the compiler's choice.
    match op("").unwrap() {
        Op::DmaTranspose(t) => {
            assert_eq!(t.dge_mode, DgeMode::Unknown);
            assert!(t.indirect.is_none());
        }
        o => panic!("{o:?}"),
    }
    for (name, mode) in [
        ("unknown", DgeMode::Unknown),
        ("none", DgeMode::None),
        ("swdge", DgeMode::Swdge),
        ("hwdge", DgeMode::Hwdge),
    ] {
        match op(&format!(r#", "dge_mode": "{name}""#)).unwrap() {
            Op::DmaTranspose(t) => assert_eq!(t.dge_mode, mode),
            o => panic!("{o:?}"),
        }
        assert_eq!(mode.name(), name);
    }
    assert!(
        op(r#", "dge_mode": "hw""#)
            .unwrap_err()
            .to_string()
            .contains("unknown variant `hw`")
    );
    assert!(
        op(r#", "dge": "hwdge""#)
            .unwrap_err()
            .to_string()
            .contains("unknown field `dge`")
    );
}

// ---- range_select (trn2) -----------------------------------------------------------------------------

fn trn2_core() -> Core {
    Core::on(TargetName::Trn2, Numerics::default())
}

fn range_select(on_false: f64, range_start: f64, reduce_res: Option<AccessPattern>) -> Op {
    Op::RangeSelect(RangeSelect {
        dst: sb(DType::F32, 2, 6, 256),
        on_true: sb(DType::F32, 2, 6, 0),
        comp0: RangeCmp::GreaterEqual,
        bound0: ScalarOperand::Tile(sb(DType::F32, 2, 1, 128)),
        comp1: RangeCmp::Less,
        bound1: ScalarOperand::Imm(4.0),
        range_start,
        on_false,
        reduce_res,
    })
}

fn range_core() -> Core {
    let mut core = trn2_core();
    core.put(
        &sb(DType::F32, 2, 6, 0),
        &[10., 11., 12., 13., 14., 15., 20., 21., 22., 23., 24., 25.],
    );
    core.put(&sb(DType::F32, 2, 1, 128), &[1.0, 3.0]);
    core
}

#[test]
fn range_select_keeps_the_index_range() {
    // idx = 0..6; p0 keeps 1 ≤ idx < 4, p1 keeps 3 ≤ idx < 4; others get fp32 min.
    // reduce_res = per-partition max of dst: 13, 23.
    let mut core = range_core();
    let red = sb(DType::F32, 2, 1, 512);
    core.run(Engine::Vector, range_select(f32::MIN as f64, 0.0, Some(red.clone())))
        .unwrap();
    let m = f32::MIN;
    assert_eq!(
        core.get(&sb(DType::F32, 2, 6, 256)),
        vec![m, 11., 12., 13., m, m, m, m, m, 23., m, m]
    );
    assert_eq!(core.get(&red), vec![13., 23.]);
    // range_start 2 shifts the index: idx = 2..8; p0 keeps 2, 3 (free 0, 1), p1 keeps 3 (free 1).
    let mut core = range_core();
    core.run(Engine::Vector, range_select(f32::MIN as f64, 2.0, None))
        .unwrap();
    assert_eq!(
        core.get(&sb(DType::F32, 2, 6, 256)),
        vec![10., 11., m, m, m, m, m, 21., m, m, m, m]
    );
}

#[test]
fn range_select_errors() {
    let mut core = range_core();
    let r = core.run(Engine::Vector, range_select(0.0, 0.0, None));
    expect_err(r, "on_false", |k| matches!(k, ErrorKind::Invalid(_)));
    let r = core.run(Engine::Vector, range_select(f32::MIN as f64, 16_777_216.0, None));
    expect_err(r, "range_start", |k| matches!(k, ErrorKind::Invalid(_)));
    let r = core.run(
        Engine::Vector,
        range_select(f32::MIN as f64, 0.0, Some(sb(DType::F32, 2, 2, 512))),
    );
    expect_err(r, "reduce_res", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    let Op::RangeSelect(mut bad) = range_select(f32::MIN as f64, 0.0, None) else {
        unreachable!()
    };
    bad.on_true = sb(DType::F32, 2, 5, 0);
    let r = core.run(Engine::Vector, Op::RangeSelect(bad));
    expect_err(r, "on_true", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
}

#[test]
fn range_select_is_not_on_trn1() {
    // NeuronCore-v2 has no range_select: the executor refuses it before touching memory.
    let mut p = Program::new(TargetName::Trn1);
    p.push(Engine::Vector, range_select(f32::MIN as f64, 0.0, None));
    let e = Executor::new(TargetName::Trn1).run(&p, &BTreeMap::new()).unwrap_err();
    assert_eq!(e.index, Some(0));
    assert!(
        matches!(
            e.kind,
            ErrorKind::NotOnTarget {
                opcode: "range_select",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!trnsim::engine::runs_on(
        &TargetName::Trn1.params(),
        &p.instructions[0].op,
        Engine::Vector
    ));
    assert!(trnsim::engine::runs_on(
        &TargetName::Trn2.params(),
        &p.instructions[0].op,
        Engine::Vector
    ));
}

#[test]
fn dynamic_copy_reaches_beyond_the_static_extent_in_a_program() {
    // The executor sizes SBUF from the operands' static extents; a dynamic source 4096 elements
    // (16 KiB) past its static offset must still be inside simulated SBUF.
    let mut p = Program::new(TargetName::Trn1);
    p.declare("x", DType::F32, &[2, 4], HbmRole::Input);
    p.declare("y", DType::F32, &[2, 4], HbmRole::Output);
    let far = sb(DType::F32, 2, 4, 16384);
    p.push(
        Engine::Dma,
        Op::DmaCopy(DmaCopy {
            dst: far,
            src: AccessPattern::hbm("x", DType::F32, 0, 2, 4, vec![[1, 4]]),
            accumulate: false,
            indirect: None,
        }),
    );
    p.push(
        Engine::Gpsimd,
        Op::Iota(Iota {
            dst: sb(DType::I32, 1, 1, 64),
            offset: 1024,
            channel_multiplier: 0,
            pattern: vec![[1, 1]],
        }),
    );
    // offset 1024 × scale 4 = 4096 elements = 16 KiB past byte 0.
    let op = Op::TensorCopyDynamicSrc(dynamic(
        sb(DType::F32, 2, 4, 128),
        sb(DType::F32, 2, 4, 0),
        sb(DType::I32, 1, 1, 64),
        4,
    ));
    p.push(Engine::Vector, op);
    p.instructions[2].wait = vec![0, 1];
    p.push(
        Engine::Dma,
        Op::DmaCopy(DmaCopy {
            dst: AccessPattern::hbm("y", DType::F32, 0, 2, 4, vec![[1, 4]]),
            src: sb(DType::F32, 2, 4, 128),
            accumulate: false,
            indirect: None,
        }),
    );
    p.instructions[3].wait = vec![2];
    assert_eq!(
        p.on_chip_extent(&TargetName::Trn1.params()).0,
        TargetName::Trn1.params().sbuf_usable_bytes.next_multiple_of(64)
    );
    let x: Vec<f32> = (0..8).map(|v| v as f32).collect();
    let mut inputs = BTreeMap::new();
    inputs.insert("x".to_string(), HostTensor::from_f32(&[2, 4], &x));
    let run = Executor::new(TargetName::Trn1).run(&p, &inputs).unwrap();
    assert_eq!(run.outputs["y"].to_f32(), x);
}
