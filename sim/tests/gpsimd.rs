//! GpSimdE: iota, affine_select, local_gather, nc_n_gather, tensor_partition_reduce. Expected
//! values are derived by hand in the comments; every error kind each instruction raises has a
//! test.

mod common_tg;

use common_tg::*;
use trnsim::*;

fn gp(core: &mut Core, op: Op) -> Result<(), trnsim::error::OperandError> {
    core.run(Engine::Gpsimd, op)
}

// ---- iota -------------------------------------------------------------------------------------

fn iota(dst: AccessPattern, offset: i64, channel_multiplier: i64, pattern: Vec<[i64; 2]>) -> Op {
    Op::Iota(Iota {
        dst,
        offset,
        channel_multiplier,
        pattern,
    })
}

#[test]
fn iota_int32_affine_values() {
    // v = 10 + 100·c + (-1)·i0 + 5·i1, i0 < 2 (outer), i1 < 3 (inner):
    //   c = 0: i0 = 0 → [10, 15, 20], i0 = 1 → [9, 14, 19]; c = 1, 2: +100, +200.
    let mut core = Core::new();
    let d = sb(DType::I32, 3, 6, 0);
    gp(&mut core, iota(d.clone(), 10, 100, vec![[-1, 2], [5, 3]])).unwrap();
    let got: Vec<i32> = core.get_bits(&d).into_iter().map(|b| b as i32).collect();
    assert_eq!(
        got,
        vec![
            10, 15, 20, 9, 14, 19, 110, 115, 120, 109, 114, 119, 210, 215, 220, 209, 214, 219
        ]
    );
    // Cost: 150 + N = 156 cycles at 1.4 GHz.
    assert!((core.stats.est_ns.gpsimd - 156.0 / 1.4).abs() < 1e-9);
}

#[test]
fn iota_channel_index_is_relative_to_the_tile() {
    // 2 partitions starting at 32: c = 0, 1 (not 32, 33). v = c·7 + i → [0, 1], [7, 8].
    let mut core = Core::new();
    let d = at_partition(sb(DType::I32, 2, 2, 0), 32);
    gp(&mut core, iota(d.clone(), 0, 7, vec![[1, 2]])).unwrap();
    assert_eq!(core.get_bits(&d), vec![0, 1, 7, 8]);
}

#[test]
fn iota_casts_to_the_destination() {
    let mut core = Core::new();
    // f32: exact small integers. v = -2 + i, i < 4 → [-2, -1, 0, 1].
    let d = sb(DType::F32, 1, 4, 0);
    gp(&mut core, iota(d.clone(), -2, 0, vec![[1, 4]])).unwrap();
    assert_eq!(core.get(&d), vec![-2., -1., 0., 1.]);
    // bf16 (8 significant bits): 256 + i: 256 exact; 257 is halfway between 256 and 258 → even
    // mantissa → 256; 258 exact; 259 halfway between 258 (odd) and 260 (even) → 260.
    let d = sb(DType::Bf16, 1, 4, 64);
    gp(&mut core, iota(d.clone(), 256, 0, vec![[1, 4]])).unwrap();
    assert_eq!(core.get(&d), vec![256., 256., 258., 260.]);
    // int8 saturates: v = 300 - 250·i → [300 → 127, 50, -200 → -128].
    let d = sb(DType::I8, 1, 3, 128);
    gp(&mut core, iota(d.clone(), 300, 0, vec![[-250, 3]])).unwrap();
    assert_eq!(core.get_bits(&d), vec![127, 50, 0x80]);
    // uint16: negative saturates to 0: v = -1 + i → [0, 0, 1].
    let d = sb(DType::U16, 1, 3, 192);
    gp(&mut core, iota(d.clone(), -1, 0, vec![[1, 3]])).unwrap();
    assert_eq!(core.get_bits(&d), vec![0, 0, 1]);
}

#[test]
fn iota_wraps_in_int32() {
    // offset = i32::MAX, step 1: [2147483647, 2147483647 + 1 → -2147483648].
    // c·cm wraps too: c = 1, cm = i32::MIN: i32::MIN; + offset -1 → i32::MAX.
    let mut core = Core::new();
    let d = sb(DType::I32, 1, 2, 0);
    gp(&mut core, iota(d.clone(), i32::MAX as i64, 0, vec![[1, 2]])).unwrap();
    assert_eq!(core.get_bits(&d), vec![0x7FFF_FFFF, 0x8000_0000]);
    let d = sb(DType::I32, 2, 1, 64);
    gp(&mut core, iota(d.clone(), -1, i32::MIN as i64, vec![[0, 1]])).unwrap();
    assert_eq!(core.get_bits(&d), vec![0xFFFF_FFFF, 0x7FFF_FFFF]);
}

#[test]
fn iota_errors() {
    let mut core = Core::new();
    let d = sb(DType::I32, 2, 4, 0);
    // Fields beyond int32.
    let r = gp(&mut core, iota(d.clone(), 1 << 31, 0, vec![[1, 4]]));
    expect_err(r, "offset", |k| matches!(k, ErrorKind::Invalid(_)));
    let r = gp(&mut core, iota(d.clone(), 0, -(1 << 33), vec![[1, 4]]));
    expect_err(r, "channel_multiplier", |k| matches!(k, ErrorKind::Invalid(_)));
    let r = gp(&mut core, iota(d.clone(), 0, 0, vec![[1 << 40, 4]]));
    expect_err(r, "pattern", |k| matches!(k, ErrorKind::BadFreeDim { dim: 0, .. }));
    // Pattern sizes.
    let r = gp(&mut core, iota(d.clone(), 0, 0, vec![[1, 5]]));
    expect_err(r, "pattern", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    let r = gp(&mut core, iota(d.clone(), 0, 0, vec![[1, 1 << 20]]));
    expect_err(r, "pattern", |k| matches!(k, ErrorKind::BadFreeDim { .. }));
    let r = gp(
        &mut core,
        iota(d.clone(), 0, 0, vec![[1, 1], [1, 1], [1, 1], [1, 1], [1, 4]]),
    );
    expect_err(r, "pattern", |k| {
        matches!(k, ErrorKind::TooManyFreeDims { dims: 5, max: 4 })
    });
    // Memory rules: PSUM, start partition, free size.
    let r = gp(&mut core, iota(ps(DType::I32, 2, 4, 0), 0, 0, vec![[1, 4]]));
    expect_err(r, "dst", |k| {
        matches!(k, ErrorKind::MemoryNotAccessible { engine: "gpsimd", .. })
    });
    let r = gp(&mut core, iota(at_partition(d.clone(), 16), 0, 0, vec![[1, 4]]));
    expect_err(r, "dst", |k| {
        matches!(k, ErrorKind::StartPartition { start: 16, count: 2 })
    });
    let big = AccessPattern::sbuf(DType::U8, 0, 1, 0, vec![[1, 65535], [0, 2]]);
    let r = gp(&mut core, iota(big, 0, 0, vec![[1, 65535], [0, 2]]));
    expect_err(r, "dst", |k| matches!(k, ErrorKind::FreeSizeLimit { size: 131070, .. }));
}

// ---- affine_select ----------------------------------------------------------------------------

fn affine_select(
    dst: AccessPattern,
    on_true: AccessPattern,
    on_false: f64,
    offset: i64,
    cm: i64,
    pattern: Vec<[i64; 2]>,
    cmp: CmpOp,
) -> Op {
    Op::AffineSelect(AffineSelect {
        dst,
        on_true,
        on_false,
        offset,
        channel_multiplier: cm,
        pattern,
        cmp,
    })
}

#[test]
fn affine_select_causal_mask() {
    // v = c - i (cm 1, step -1); keep where v ≥ 0 (i ≤ c), else -inf:
    //   row c keeps its first c+1 values.
    let mut core = Core::new();
    let t = sb(DType::F32, 4, 4, 0);
    let vals: Vec<f32> = (1..=16).map(|x| x as f32).collect();
    core.put(&t, &vals);
    let d = sb(DType::F32, 4, 4, 64);
    gp(
        &mut core,
        affine_select(
            d.clone(),
            t,
            f64::NEG_INFINITY,
            0,
            1,
            vec![[-1, 4]],
            CmpOp::GreaterEqual,
        ),
    )
    .unwrap();
    let n = f32::NEG_INFINITY;
    assert_eq!(
        core.get(&d),
        vec![1., n, n, n, 5., 6., n, n, 9., 10., 11., n, 13., 14., 15., 16.]
    );
    // 150 + N = 154 cycles.
    assert!((core.stats.est_ns.gpsimd - 154.0 / 1.4).abs() < 1e-9);
}

#[test]
fn affine_select_comparisons() {
    // v = i - 1 for i < 4 → [-1, 0, 1, 2] on one partition, on_true = [10, 20, 30, 40], on_false 0.
    //   equal:         [0, 20, 0, 0]      not_equal:     [10, 0, 30, 40]
    //   greater_than:  [0, 0, 30, 40]     greater_equal: [0, 20, 30, 40]
    let mut core = Core::new();
    let t = sb(DType::F32, 1, 4, 0);
    core.put(&t, &[10., 20., 30., 40.]);
    let d = sb(DType::F32, 1, 4, 64);
    for (cmp, want) in [
        (CmpOp::Equal, [0., 20., 0., 0.]),
        (CmpOp::NotEqual, [10., 0., 30., 40.]),
        (CmpOp::GreaterThan, [0., 0., 30., 40.]),
        (CmpOp::GreaterEqual, [0., 20., 30., 40.]),
    ] {
        gp(
            &mut core,
            affine_select(d.clone(), t.clone(), 0.0, -1, 0, vec![[1, 4]], cmp),
        )
        .unwrap();
        assert_eq!(core.get(&d), want.to_vec(), "{cmp:?}");
    }
}

#[test]
fn affine_select_dtypes() {
    let mut core = Core::new();
    // Same dtype: selected elements are bit copies (a bf16 NaN payload 0x7FC1 survives, where a
    // trip through fp32 would write the canonical 0x7FC0); on_false 1/3 → bf16 RNE 0x3EAB.
    // v = -i, equal → only i = 0 selected.
    let t = sb(DType::Bf16, 1, 2, 0);
    core.put_bits(&t, &[0x7FC1, 0x4000]);
    let d = sb(DType::Bf16, 1, 2, 64);
    gp(
        &mut core,
        affine_select(d.clone(), t.clone(), 1.0 / 3.0, 0, 0, vec![[-1, 2]], CmpOp::Equal),
    )
    .unwrap();
    assert_eq!(core.get_bits(&d), vec![0x7FC1, 0x3EAB]);
    // Different dtypes: bf16 → fp32 through fp32 (NaN stays NaN; 2.0 exact); on_false 1/3 as fp32.
    let d32 = sb(DType::F32, 1, 2, 128);
    gp(
        &mut core,
        affine_select(d32.clone(), t, 1.0 / 3.0, 0, 0, vec![[-1, 2]], CmpOp::NotEqual),
    )
    .unwrap();
    let got = core.get(&d32);
    assert_eq!(got[0], 1.0f32 / 3.0);
    let t2 = sb(DType::Bf16, 1, 2, 192);
    core.put(&t2, &[2.0, 3.0]);
    gp(
        &mut core,
        affine_select(d32.clone(), t2, 1.0 / 3.0, 0, 0, vec![[-1, 2]], CmpOp::Equal),
    )
    .unwrap();
    assert_eq!(core.get(&d32), vec![2.0, 1.0f32 / 3.0]);
    // Integer dst: on_false -3.5 → int32 by round-to-nearest-even → -4; on_true copied.
    let ti = sb(DType::I32, 1, 2, 256);
    core.put_bits(&ti, &[7, 8]);
    let di = sb(DType::I32, 1, 2, 320);
    gp(
        &mut core,
        affine_select(di.clone(), ti, -3.5, 0, 0, vec![[1, 2]], CmpOp::Equal),
    )
    .unwrap();
    assert_eq!(core.get_bits(&di), vec![7, (-4i32) as u32]);
}

#[test]
fn affine_select_errors() {
    let mut core = Core::new();
    let t = sb(DType::F32, 2, 4, 0);
    core.put(&t, &[0.0; 8]);
    let d = sb(DType::F32, 2, 4, 64);
    let pat = vec![[1, 4]];
    let r = gp(
        &mut core,
        affine_select(
            d.clone(),
            sb(DType::F32, 2, 3, 0),
            0.0,
            0,
            0,
            vec![[1, 4]],
            CmpOp::Equal,
        ),
    );
    expect_err(r, "on_true", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    let r = gp(
        &mut core,
        affine_select(d.clone(), t.clone(), 0.0, 0, 0, vec![[1, 8]], CmpOp::Equal),
    );
    expect_err(r, "pattern", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    let r = gp(
        &mut core,
        affine_select(d.clone(), t.clone(), 0.0, i64::MIN, 0, pat.clone(), CmpOp::Equal),
    );
    expect_err(r, "offset", |k| matches!(k, ErrorKind::Invalid(_)));
    let r = gp(
        &mut core,
        affine_select(d.clone(), t.clone(), 0.0, 0, 1 << 32, pat.clone(), CmpOp::Equal),
    );
    expect_err(r, "channel_multiplier", |k| matches!(k, ErrorKind::Invalid(_)));
    let r = gp(
        &mut core,
        affine_select(d.clone(), ps(DType::F32, 2, 4, 0), 0.0, 0, 0, pat.clone(), CmpOp::Equal),
    );
    expect_err(r, "on_true", |k| matches!(k, ErrorKind::MemoryNotAccessible { .. }));
    let r = gp(
        &mut core,
        affine_select(ps(DType::F32, 2, 4, 0), t.clone(), 0.0, 0, 0, pat.clone(), CmpOp::Equal),
    );
    expect_err(r, "dst", |k| matches!(k, ErrorKind::MemoryNotAccessible { .. }));
    // on_true never written.
    let r = gp(
        &mut core,
        affine_select(d, sb(DType::F32, 2, 4, 4096), 0.0, 0, 0, pat, CmpOp::Equal),
    );
    expect_err(r, "on_true", |k| matches!(k, ErrorKind::UninitializedRead { .. }));
}

// ---- local_gather -----------------------------------------------------------------------------

fn local_gather(dst: AccessPattern, src: AccessPattern, index: AccessPattern, e: usize, nv: usize) -> Op {
    Op::LocalGather(LocalGather {
        dst,
        src,
        index,
        num_elem_per_idx: e,
        num_valid_indices: nv,
    })
}

/// src [P × 8] f32 with src[p][f] = 100·p + f.
fn gather_src(core: &mut Core, p: usize) -> AccessPattern {
    let s = sb(DType::F32, p, 8, 0);
    let vals: Vec<f32> = (0..p).flat_map(|q| (0..8).map(move |f| (100 * q + f) as f32)).collect();
    core.put(&s, &vals);
    s
}

#[test]
fn local_gather_one_core() {
    // index [16 × 1] uint16, column 0 = [6, 0, 3, 0, …]; E = 2, 3 valid indices:
    // indices_1d = [index[0][0], index[1][0], index[2][0]] = [6, 0, 3]
    // dst[p] = src[p][6..8] ++ src[p][0..2] ++ src[p][3..5] = 100p + [6, 7, 0, 1, 3, 4].
    let mut core = Core::new();
    let s = gather_src(&mut core, 16);
    let ix = sb(DType::U16, 16, 1, 256);
    let mut idx = vec![0u32; 16];
    idx[0] = 6;
    idx[2] = 3;
    core.put_bits(&ix, &idx);
    let d = sb(DType::F32, 16, 6, 512);
    gp(&mut core, local_gather(d.clone(), s, ix, 2, 3)).unwrap();
    let got = core.get(&d);
    for p in 0..16 {
        let b = 100.0 * p as f32;
        assert_eq!(
            &got[p * 6..p * 6 + 6],
            &[b + 6., b + 7., b, b + 1., b + 3., b + 4.],
            "partition {p}"
        );
    }
}

#[test]
fn local_gather_flattens_partition_first_and_per_core() {
    // index [32 × 2]: core 0 uses partitions 0..16, core 1 partitions 16..32. E = 1, 17 valid:
    // indices_1d[q] = index[16c + q % 16][q / 16]: q = 0..16 is column 0, q = 16 is index[16c][1].
    // Core 0: column 0 = 0 everywhere, index[0][1] = 7 → dst[p] = [src[p][0] ×16, src[p][7]].
    // Core 1: column 0 = 5 everywhere, index[16][1] = 2 → dst[p] = [src[p][5] ×16, src[p][2]].
    let mut core = Core::new();
    let s = gather_src(&mut core, 32);
    let ix = sb(DType::U16, 32, 2, 256);
    let mut idx = vec![0u32; 64];
    for r in 16..32 {
        idx[r * 2] = 5;
    }
    idx[1] = 7; // index[0][1]
    idx[16 * 2 + 1] = 2; // index[16][1]
    idx[3] = 1; // index[1][1]: q = 17, beyond the 17 valid indices: unused
    core.put_bits(&ix, &idx);
    let d = sb(DType::F32, 32, 17, 512);
    gp(&mut core, local_gather(d.clone(), s, ix, 1, 17)).unwrap();
    let got = core.get(&d);
    for p in 0..32 {
        let b = 100.0 * p as f32;
        let (fill, last) = if p < 16 { (b, b + 7.) } else { (b + 5., b + 2.) };
        let mut want = vec![fill; 16];
        want.push(last);
        assert_eq!(&got[p * 17..p * 17 + 17], &want[..], "partition {p}");
    }
}

#[test]
fn local_gather_is_a_bit_copy() {
    // bf16 NaN payloads are kept: src [16 × 2] = [0x7FC1, 0xFFFF] per partition; index 0, E = 2.
    let mut core = Core::new();
    let s = sb(DType::Bf16, 16, 2, 0);
    core.put_bits(&s, &[0x7FC1, 0xFFFF].repeat(16));
    let ix = sb(DType::U16, 16, 1, 256);
    core.put_bits(&ix, &[0; 16]);
    let d = sb(DType::Bf16, 16, 2, 512);
    gp(&mut core, local_gather(d.clone(), s, ix, 2, 1)).unwrap();
    assert_eq!(core.get_bits(&d), [0x7FC1, 0xFFFF].repeat(16));
}

#[test]
fn local_gather_errors() {
    let mut core = Core::new();
    let s = gather_src(&mut core, 32);
    let ix = sb(DType::U16, 16, 1, 256);
    core.put_bits(&ix, &[7; 16]);
    let d = sb(DType::F32, 16, 2, 512);
    let s16 = sb(DType::F32, 16, 8, 0);
    // Out of range: index 7 with E = 2 reads elements 7..9 of an 8-element row.
    let r = gp(&mut core, local_gather(d.clone(), s16.clone(), ix.clone(), 2, 1));
    expect_err(r, "index", |k| {
        matches!(
            k,
            ErrorKind::IndexOutOfRange {
                index: 7,
                partition: 0,
                end: 9,
                len: 8
            }
        )
    });
    // Index dtype.
    let ix32 = sb(DType::U32, 16, 1, 1024);
    core.put_bits(&ix32, &[0; 16]);
    let r = gp(&mut core, local_gather(d.clone(), s16.clone(), ix32, 1, 1));
    expect_err(r, "index", |k| {
        matches!(k, ErrorKind::UnsupportedDType { dtype: "u32", .. })
    });
    // No cast.
    let r = gp(
        &mut core,
        local_gather(sb(DType::Bf16, 16, 1, 512), s16.clone(), ix.clone(), 1, 1),
    );
    expect_err(r, "dst", |k| {
        matches!(k, ErrorKind::UnsupportedDType { dtype: "bf16", .. })
    });
    // num_elem_per_idx outside {1, 2, 4, 8, 16, 32}.
    let r = gp(
        &mut core,
        local_gather(sb(DType::F32, 16, 3, 512), s16.clone(), ix.clone(), 3, 1),
    );
    expect_err(r, "dst", |k| matches!(k, ErrorKind::Invalid(_)));
    // num_valid_indices 0, and more than the 16 × 1 the core holds.
    let r = gp(
        &mut core,
        local_gather(sb(DType::F32, 16, 0, 512), s16.clone(), ix.clone(), 1, 0),
    );
    expect_err(r, "index", |k| matches!(k, ErrorKind::Invalid(_)));
    let r = gp(
        &mut core,
        local_gather(sb(DType::F32, 16, 17, 512), s16.clone(), ix.clone(), 1, 17),
    );
    expect_err(r, "index", |k| matches!(k, ErrorKind::Invalid(_)));
    // dst size ≠ num_valid_indices × num_elem_per_idx.
    let r = gp(
        &mut core,
        local_gather(sb(DType::F32, 16, 3, 512), s16.clone(), ix.clone(), 1, 2),
    );
    expect_err(r, "dst", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    // Partition counts differ; not a whole core.
    let r = gp(
        &mut core,
        local_gather(sb(DType::F32, 16, 1, 512), s.clone(), ix.clone(), 1, 1),
    );
    expect_err(r, "index", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    let s8 = sb(DType::F32, 8, 8, 0);
    let ix8 = sb(DType::U16, 8, 1, 256);
    let r = gp(&mut core, local_gather(sb(DType::F32, 8, 1, 512), s8, ix8, 1, 1));
    expect_err(r, "src", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    // Index on other partitions than src.
    let ix_hi = at_partition(sb(DType::U16, 16, 1, 256), 32);
    core.put_bits(&ix_hi, &[0; 16]);
    let r = gp(&mut core, local_gather(d.clone(), s16.clone(), ix_hi, 1, 1));
    expect_err(r, "index", |k| matches!(k, ErrorKind::Invalid(_)));
    // PSUM operand.
    let r = gp(&mut core, local_gather(ps(DType::F32, 16, 1, 0), s16, ix, 1, 1));
    expect_err(r, "dst", |k| matches!(k, ErrorKind::MemoryNotAccessible { .. }));
}

// ---- nc_n_gather ------------------------------------------------------------------------------

fn n_gather(dst: AccessPattern, data: AccessPattern, indices: AccessPattern) -> Op {
    Op::NGather(NGather { dst, data, indices })
}

#[test]
fn n_gather_per_partition() {
    // data [[10, 11, 12, 13, 14], [20, 21, 22, 23, 24]], indices [[4, 0, 4], [1, 1, 3]]
    // → dst [[14, 10, 14], [21, 21, 23]].
    let mut core = Core::new();
    let data = sb(DType::F32, 2, 5, 0);
    core.put(&data, &[10., 11., 12., 13., 14., 20., 21., 22., 23., 24.]);
    let ix = sb(DType::U32, 2, 3, 64);
    core.put_bits(&ix, &[4, 0, 4, 1, 1, 3]);
    let d = sb(DType::F32, 2, 3, 128);
    gp(&mut core, n_gather(d.clone(), data, ix)).unwrap();
    assert_eq!(core.get(&d), vec![14., 10., 14., 21., 21., 23.]);
}

#[test]
fn n_gather_indexes_the_flattened_access_pattern() {
    // data = a [1 × (2×3)] view [[4, 2], [1, 3]] of a row [0, 1, 2, 3, 4, 5, 6, 7] (u8):
    // flattened view = [0, 1, 2, 4, 5, 6]; indices [5, 3, 0] → [6, 4, 0]. Bit copy of u8.
    let mut core = Core::new();
    let row = sb(DType::U8, 1, 8, 0);
    core.put_bits(&row, &[0, 1, 2, 3, 4, 5, 6, 7]);
    let data = AccessPattern::sbuf(DType::U8, 0, 1, 0, vec![[4, 2], [1, 3]]);
    let ix = sb(DType::U32, 1, 3, 64);
    core.put_bits(&ix, &[5, 3, 0]);
    let d = sb(DType::U8, 1, 3, 128);
    gp(&mut core, n_gather(d.clone(), data, ix)).unwrap();
    assert_eq!(core.get_bits(&d), vec![6, 4, 0]);
}

#[test]
fn n_gather_errors() {
    let mut core = Core::new();
    let data = sb(DType::F32, 2, 5, 0);
    core.put(&data, &[0.0; 10]);
    let ix = sb(DType::U32, 2, 2, 64);
    core.put_bits(&ix, &[0, 5, 1, 1]);
    let d = sb(DType::F32, 2, 2, 128);
    // Index 5 of a 5-element row, read on partition 0.
    let r = gp(&mut core, n_gather(d.clone(), data.clone(), ix.clone()));
    expect_err(r, "indices", |k| {
        matches!(
            k,
            ErrorKind::IndexOutOfRange {
                index: 5,
                partition: 0,
                end: 6,
                len: 5
            }
        )
    });
    core.put_bits(&ix, &[0, 1, 1, 1]);
    let ix16 = sb(DType::U16, 2, 2, 256);
    core.put_bits(&ix16, &[0; 4]);
    let r = gp(&mut core, n_gather(d.clone(), data.clone(), ix16));
    expect_err(r, "indices", |k| {
        matches!(k, ErrorKind::UnsupportedDType { dtype: "u16", .. })
    });
    let r = gp(
        &mut core,
        n_gather(sb(DType::Bf16, 2, 2, 128), data.clone(), ix.clone()),
    );
    expect_err(r, "dst", |k| {
        matches!(k, ErrorKind::UnsupportedDType { dtype: "bf16", .. })
    });
    let r = gp(&mut core, n_gather(sb(DType::F32, 1, 2, 128), data.clone(), ix.clone()));
    expect_err(r, "indices", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    let r = gp(&mut core, n_gather(sb(DType::F32, 2, 3, 128), data.clone(), ix.clone()));
    expect_err(r, "dst", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    let r = gp(&mut core, n_gather(d, ps(DType::F32, 2, 5, 0), ix));
    expect_err(r, "data", |k| matches!(k, ErrorKind::MemoryNotAccessible { .. }));
}

// ---- tensor_partition_reduce ------------------------------------------------------------------

fn preduce(dst: AccessPattern, src: AccessPattern, op: AluOp) -> Op {
    Op::TensorPartitionReduce(TensorPartitionReduce { dst, src, op })
}

#[test]
fn partition_reduce_fp32_in_partition_order() {
    // src [3 × 2] = [[1, 2^24], [2, 1], [3, 1]].
    //   add col 0: 1 + 2 + 3 = 6.  col 1: (2^24 + 1) → 2^24 (tie, even); + 1 → 2^24 = 16777216.
    //   max: [3, 2^24]; min: [1, 1]; average: [6/3 = 2, 16777216/3 = 5592405.333… → 5592405.5
    //   (fp32 spacing is 0.5 there; .333 rounds to .5)].
    let mut core = Core::new();
    let s = sb(DType::F32, 3, 2, 0);
    core.put(&s, &[1., 16777216., 2., 1., 3., 1.]);
    let d = sb(DType::F32, 1, 2, 64);
    for (op, want) in [
        (AluOp::Add, [6., 16777216.]),
        (AluOp::Max, [3., 16777216.]),
        (AluOp::Min, [1., 1.]),
        (AluOp::Average, [2., 5592405.5]),
    ] {
        gp(&mut core, preduce(d.clone(), s.clone(), op)).unwrap();
        assert_eq!(core.get(&d), want.to_vec(), "{op:?}");
    }
}

#[test]
fn partition_reduce_nan_policy_and_cast() {
    // max over [1, NaN, 3]: NaN with the default (propagate), 3 with prefer_number.
    let mut core = Core::new();
    let s = sb(DType::F32, 3, 1, 0);
    core.put(&s, &[1., f32::NAN, 3.]);
    let d = sb(DType::F32, 1, 1, 64);
    gp(&mut core, preduce(d.clone(), s.clone(), AluOp::Max)).unwrap();
    assert!(core.get(&d)[0].is_nan());
    let mut core2 = Core::with_numerics(Numerics {
        nan_max_min: NanMaxMin::PreferNumber,
        ..Numerics::default()
    });
    core2.put(&s, &[1., f32::NAN, 3.]);
    gp(&mut core2, preduce(d.clone(), s, AluOp::Max)).unwrap();
    assert_eq!(core2.get(&d), vec![3.]);
    // bf16 src → bf16 dst through fp32: 1 + 1/256 + 1/256 → fp32 1.0078125 → bf16 1.0078125 (exact).
    let s16 = sb(DType::Bf16, 3, 1, 128);
    core.put(&s16, &[1.0, 1.0 / 256.0, 1.0 / 256.0]);
    let d16 = at_partition(sb(DType::Bf16, 1, 1, 192), 96);
    gp(&mut core, preduce(d16.clone(), s16, AluOp::Add)).unwrap();
    assert_eq!(core.get(&d16), vec![1.0078125]);
}

#[test]
fn partition_reduce_integers_exactly() {
    let mut core = Core::new();
    // int32 add: 16777217 + 1 + 0 = 16777218 exactly (fp32 would give 16777216 + …).
    let s = sb(DType::I32, 3, 2, 0);
    core.put_bits(&s, &[16777217, i32::MAX as u32, 1, 1, 0, 0]);
    let d = sb(DType::I32, 1, 2, 64);
    gp(&mut core, preduce(d.clone(), s.clone(), AluOp::Add)).unwrap();
    // col 1: i32::MAX + 1 wraps to i32::MIN.
    assert_eq!(core.get_bits(&d), vec![16777218, 0x8000_0000]);
    gp(&mut core, preduce(d.clone(), s.clone(), AluOp::Min)).unwrap();
    assert_eq!(core.get_bits(&d), vec![0, 0]);
    gp(&mut core, preduce(d.clone(), s, AluOp::Max)).unwrap();
    assert_eq!(core.get_bits(&d), vec![16777217, i32::MAX as u32]);
    // uint8 bitwise: [0b1010, 0b0110, 0b1111] → or 0b1111, and 0b0010.
    let s8 = sb(DType::U8, 3, 1, 128);
    core.put_bits(&s8, &[0b1010, 0b0110, 0b1111]);
    let d8 = sb(DType::U8, 1, 1, 160);
    gp(&mut core, preduce(d8.clone(), s8.clone(), AluOp::BitwiseOr)).unwrap();
    assert_eq!(core.get_bits(&d8), vec![0b1111]);
    gp(&mut core, preduce(d8.clone(), s8, AluOp::BitwiseAnd)).unwrap();
    assert_eq!(core.get_bits(&d8), vec![0b0010]);
    // uint32 max sees the unsigned values: max(0xFFFF_FFFF, 1) = 0xFFFF_FFFF.
    let su = sb(DType::U32, 2, 1, 192);
    core.put_bits(&su, &[0xFFFF_FFFF, 1]);
    let du = sb(DType::U32, 1, 1, 224);
    gp(&mut core, preduce(du.clone(), su, AluOp::Max)).unwrap();
    assert_eq!(core.get_bits(&du), vec![0xFFFF_FFFF]);
}

#[test]
fn partition_reduce_errors() {
    let mut core = Core::new();
    let s = sb(DType::F32, 4, 2, 0);
    core.put(&s, &[0.0; 8]);
    let si = sb(DType::I32, 4, 2, 64);
    core.put_bits(&si, &[0; 8]);
    let d = sb(DType::F32, 1, 2, 128);
    let e = gp(&mut core, preduce(d.clone(), s.clone(), AluOp::Subtract)).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Invalid(_)) && e.operand.is_none(), "{e:?}");
    let r = gp(&mut core, preduce(d.clone(), s.clone(), AluOp::BitwiseOr));
    expect_err(r, "src", |k| {
        matches!(k, ErrorKind::UnsupportedDType { dtype: "f32", .. })
    });
    let r = gp(
        &mut core,
        preduce(sb(DType::I32, 1, 2, 128), si.clone(), AluOp::Average),
    );
    expect_err(r, "src", |k| {
        matches!(k, ErrorKind::UnsupportedDType { dtype: "i32", .. })
    });
    let r = gp(&mut core, preduce(sb(DType::F32, 2, 2, 128), s.clone(), AluOp::Add));
    expect_err(r, "dst", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    let r = gp(&mut core, preduce(sb(DType::F32, 1, 3, 128), s.clone(), AluOp::Add));
    expect_err(r, "dst", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    let r = gp(&mut core, preduce(d.clone(), sb(DType::F32, 0, 2, 0), AluOp::Add));
    expect_err(r, "src", |k| matches!(k, ErrorKind::Invalid(_)));
    let r = gp(&mut core, preduce(d, ps(DType::F32, 4, 2, 0), AluOp::Add));
    expect_err(r, "src", |k| matches!(k, ErrorKind::MemoryNotAccessible { .. }));
}

// ---- robustness -------------------------------------------------------------------------------

#[test]
fn hostile_operands_give_errors_not_panics() {
    // Extreme field values in every operand of every instruction: each must fail cleanly.
    let weird = [
        AccessPattern {
            start_partition: 120,
            ..sb(DType::F32, 128, 4, 0)
        },
        AccessPattern::sbuf(DType::F32, 0, 4, u64::MAX - 3, vec![[1, 4]]),
        AccessPattern::sbuf(DType::F32, 0, 4, 0, vec![[i64::MAX, 2]]),
        AccessPattern::sbuf(DType::F32, 0, 4, 0, vec![[1, i64::MAX]]),
        AccessPattern::sbuf(DType::F32, 0, 4, 0, vec![[1, -5]]),
        AccessPattern::sbuf(DType::F32, 0, 4, 0, vec![[-1, 4]]),
        AccessPattern::sbuf(DType::F32, 0, 4, 0, vec![[1, 65535]; 4]),
        AccessPattern::sbuf(DType::F32, 0, 4, 0, vec![[1, 2]; 9]),
        AccessPattern::sbuf(DType::F32, 0, 1000, 0, vec![[1, 4]]),
    ];
    let ok = sb(DType::F32, 4, 4, 0);
    let mut core = Core::new();
    core.put(&sb(DType::F32, 128, 64, 0), &vec![1.0; 128 * 64]);
    for w in &weird {
        let ops: Vec<(Engine, Op)> = vec![
            (Engine::Gpsimd, iota(w.clone(), 0, 0, vec![[1, 4]])),
            (
                Engine::Gpsimd,
                affine_select(w.clone(), ok.clone(), 0.0, 0, 0, vec![[1, 4]], CmpOp::Equal),
            ),
            (
                Engine::Gpsimd,
                affine_select(ok.clone(), w.clone(), 0.0, 0, 0, vec![[1, 4]], CmpOp::Equal),
            ),
            (
                Engine::Gpsimd,
                local_gather(w.clone(), ok.clone(), ok.with_dtype(DType::U16), 1, 1),
            ),
            (
                Engine::Gpsimd,
                local_gather(ok.clone(), w.clone(), ok.with_dtype(DType::U16), 1, 1),
            ),
            (
                Engine::Gpsimd,
                local_gather(ok.clone(), ok.clone(), w.with_dtype(DType::U16), 1, 1),
            ),
            (
                Engine::Gpsimd,
                n_gather(w.clone(), ok.clone(), ok.with_dtype(DType::U32)),
            ),
            (
                Engine::Gpsimd,
                n_gather(ok.clone(), w.clone(), ok.with_dtype(DType::U32)),
            ),
            (
                Engine::Gpsimd,
                n_gather(ok.clone(), ok.clone(), w.with_dtype(DType::U32)),
            ),
            (Engine::Gpsimd, preduce(w.clone(), ok.clone(), AluOp::Add)),
            (Engine::Gpsimd, preduce(ok.clone(), w.clone(), AluOp::Add)),
            (
                Engine::Tensor,
                Op::NcMatmul(NcMatmul {
                    dst: w.clone(),
                    stationary: ok.clone(),
                    moving: ok.clone(),
                    accumulate: true,
                    perf_mode: trnsim::MatmulPerfMode::None,
                }),
            ),
            (
                Engine::Tensor,
                Op::NcMatmul(NcMatmul {
                    dst: ps(DType::F32, 4, 4, 0),
                    stationary: w.clone(),
                    moving: ok.clone(),
                    accumulate: false,
                    perf_mode: trnsim::MatmulPerfMode::None,
                }),
            ),
            (
                Engine::Tensor,
                Op::NcMatmul(NcMatmul {
                    dst: ps(DType::F32, 4, 4, 0),
                    stationary: ok.clone(),
                    moving: w.clone(),
                    accumulate: false,
                    perf_mode: trnsim::MatmulPerfMode::None,
                }),
            ),
            (
                Engine::Tensor,
                Op::NcTranspose(NcTranspose {
                    dst: ps(DType::F32, 4, 4, 0),
                    src: w.clone(),
                }),
            ),
        ];
        for (engine, op) in ops {
            let _ = core.run(engine, op);
        }
    }
    // Hostile immediates.
    for pat in [
        vec![[i64::MAX, i64::MAX]],
        vec![[i64::MIN, 1]],
        vec![[1, 65535], [1, 65535], [1, 65535], [1, 0]],
    ] {
        let _ = gp(&mut core, iota(ok.clone(), i64::MAX, i64::MIN, pat.clone()));
        let _ = gp(&mut core, iota(sb(DType::F32, 4, 0, 0), 0, 0, pat));
    }
    let _ = gp(
        &mut core,
        local_gather(
            ok.clone(),
            ok.clone(),
            ok.with_dtype(DType::U16),
            usize::MAX,
            usize::MAX,
        ),
    );
}
