//! DMA `dma_copy`: HBM↔SBUF and SBUF↔SBUF movement with access patterns, broadcasting, casts
//! through fp32, accumulate, indirect gather/scatter, and every rejection.

#[macro_use]
mod common;

use common::*;
use trnsim::*;

const F: DType = DType::F32;
const BF: DType = DType::Bf16;

fn dma_acc(dst: AccessPattern, src: AccessPattern) -> Op {
    Op::DmaCopy(DmaCopy {
        dst,
        src,
        accumulate: true,
        indirect: None,
    })
}

/// Row-major `[rows, cols]` HBM operand of a whole tensor.
fn whole(name: &str, dtype: DType, rows: usize, cols: usize) -> AccessPattern {
    AccessPattern::hbm(name, dtype, 0, rows, cols as i64, vec![[1, cols as i64]])
}

#[test]
fn round_trip_is_bit_exact() {
    let mut r = Rig::new();
    let bits = [
        0x7FA0_0001,
        0x8000_0000,
        0x0000_0001,
        0xFF80_0000,
        0x3F80_0000,
        0xFFFF_FFFF,
    ];
    let t = r.hbm_bits(F, &[2, 3], &bits);
    let s = sb(F, 0, 2, 0, 3);
    r.push(Engine::Dma, Op::dma_copy(s.clone(), whole(&t, F, 2, 3)));
    let o = r.hbm_out(F, &[2, 3]);
    r.push(Engine::Dma, Op::dma_copy(whole(&o, F, 2, 3), s));
    let ran = r.ok();
    assert_eq!(ran.bits(&o), bits);
    // 2 DMAs of 24 bytes on one queue: 2 × (1300 ns fixed + 24 B / 17 B/ns), one after the other.
    assert_eq!(ran.stats().dma_bytes, 48);
    let one = 1300.0 + 24.0 / 17.0;
    assert!((ran.stats().est_ns.dma - 2.0 * one).abs() < 1e-9);
    assert!((ran.stats().timeline.makespan_ns - 2.0 * one).abs() < 1e-9);
    assert_eq!(ran.stats().instructions.dma, 2);
}

#[test]
fn access_patterns_on_both_sides() {
    let mut r = Rig::new();
    // HBM [4, 6] = 0..24. Load its right half [4, 3] (rows 6 apart, offset 3) into partitions
    // 0..4, then store the transposed view (one SBUF column per HBM row) into a [3, 4] output.
    let t = r.hbm(F, &[4, 6], &(0..24).map(|v| v as f32).collect::<Vec<_>>());
    let s = sb(F, 0, 4, 0, 3);
    r.push(
        Engine::Dma,
        Op::dma_copy(s.clone(), AccessPattern::hbm(&t, F, 3, 4, 6, vec![[1, 3]])),
    );
    let o = r.hbm_out(F, &[3, 4]);
    // dst element order: row p of 4 partitions → HBM column p: rows 4 (step 1), free 3 (step 4).
    r.push(
        Engine::Dma,
        Op::dma_copy(AccessPattern::hbm(&o, F, 0, 4, 1, vec![[4, 3]]), s),
    );
    assert_eq!(
        r.ok().f32(&o),
        [3.0, 9.0, 15.0, 21.0, 4.0, 10.0, 16.0, 22.0, 5.0, 11.0, 17.0, 23.0]
    );
}

#[test]
fn stride_zero_broadcasts() {
    let mut r = Rig::new();
    let t = r.hbm(F, &[1, 3], &[1.0, 2.0, 3.0]);
    // partition_step 0: the same row on 4 partitions.
    let rows = sb(F, 0, 4, 0, 3);
    r.push(
        Engine::Dma,
        Op::dma_copy(rows.clone(), AccessPattern::hbm(&t, F, 0, 4, 0, vec![[1, 3]])),
    );
    // free step 0: element 1 repeated 5 times on 2 partitions.
    let elem = sb(F, 0, 2, 64, 5);
    r.push(
        Engine::Dma,
        Op::dma_copy(elem.clone(), AccessPattern::hbm(&t, F, 1, 2, 0, vec![[0, 5]])),
    );
    let (o1, o2) = (r.out(&rows), r.out(&elem));
    let ran = r.ok();
    assert_eq!(ran.f32(&o1), [1.0, 2.0, 3.0].repeat(4));
    assert_eq!(ran.f32(&o2), [2.0; 10]);
}

#[test]
fn sbuf_to_sbuf_moves_across_partitions_without_the_start_partition_rule() {
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 8, 0, &(0..8).map(|v| v as f32).collect::<Vec<_>>());
    let odd = sb(F, 3, 2, 0, 1); // partitions 3, 4: illegal start for a compute engine
    let dst = sb(F, 17, 2, 64, 1);
    r.push(Engine::Dma, Op::dma_copy(dst.clone(), odd));
    let o = r.hbm_out(F, &[2, 1]);
    r.push(Engine::Dma, Op::dma_copy(whole(&o, F, 2, 1), dst));
    assert_eq!(r.ok().f32(&o), [3.0, 4.0]);
    let _ = src;
}

#[test]
fn f32_to_bf16_casts_round_to_nearest_even() {
    let vals = [
        1.0 + 2f32.powi(-8),                  // tie → even: 1.0
        1.0 + 3.0 * 2f32.powi(-8),            // tie → even: 1 + 2^-6
        1.0 + 2f32.powi(-8) + 2f32.powi(-20), // above the tie: 1 + 2^-7
        -(1.0 + 2f32.powi(-8)),               // −1.0
        f32::MAX,                             // rounds up past bf16's max: +inf
        f32::NAN,                             // canonical 0x7FC0
    ];
    let mut r = Rig::new();
    let t = r.hbm(F, &[1, 6], &vals);
    let s = sb(BF, 0, 1, 0, 6);
    r.push(Engine::Dma, Op::dma_copy(s.clone(), whole(&t, F, 1, 6)));
    let o = r.out(&s);
    assert_eq!(r.ok().bits(&o), [0x3F80, 0x3F82, 0x3F81, 0xBF80, 0x7F80, 0x7FC0]);
}

#[test]
fn integer_casts_round_to_nearest_even_and_saturate() {
    let mut r = Rig::new();
    let t = r.hbm(F, &[1, 7], &[2.5, 3.5, -2.5, 1e10, -1e10, f32::NAN, 0.49999997]);
    let s = sb(DType::I32, 0, 1, 0, 7);
    r.push(Engine::Dma, Op::dma_copy(s.clone(), whole(&t, F, 1, 7)));
    let i = r.hbm_bits(DType::I32, &[1, 1], &[16_777_217]);
    let sf = sb(F, 0, 1, 64, 1);
    r.push(Engine::Dma, Op::dma_copy(sf.clone(), whole(&i, DType::I32, 1, 1)));
    let u = sb(DType::U8, 0, 1, 128, 7);
    r.push(Engine::Dma, Op::dma_copy(u.clone(), whole(&t, F, 1, 7)));
    let (o, of, ou) = (r.out(&s), r.out(&sf), r.out(&u));
    let ran = r.ok();
    assert_eq!(ran.ints(&o), [2, 4, -2, i32::MAX as i64, i32::MIN as i64, 0, 0]);
    assert_eq!(ran.f32(&of), [16_777_216.0]);
    assert_eq!(ran.ints(&ou), [2, 4, 0, 255, 0, 0, 0]);
}

#[test]
fn accumulate_adds_in_fp32_then_casts() {
    let mut r = Rig::new();
    let s = r.sbuf(F, 0, 1, 0, &[1.0, 2.0, 3.0]);
    let t = r.hbm(F, &[1, 3], &[10.0, 20.0, 30.0]);
    r.push(Engine::Dma, dma_acc(s.clone(), whole(&t, F, 1, 3)));
    // bf16 destination: 1 + 2^-8 ties to 1.0; 1 + 3·2^-8 ties to 1 + 2^-6.
    let b = r.sbuf(BF, 0, 1, 64, &[1.0, 1.0]);
    let d = r.hbm(F, &[1, 2], &[2f32.powi(-8), 3.0 * 2f32.powi(-8)]);
    r.push(Engine::Dma, dma_acc(b.clone(), whole(&d, F, 1, 2)));
    // Into HBM: an output written once, then accumulated into from SBUF.
    let o = r.hbm_out(F, &[1, 3]);
    r.push(Engine::Dma, Op::dma_copy(whole(&o, F, 1, 3), s.clone()));
    r.push(Engine::Dma, dma_acc(whole(&o, F, 1, 3), s.clone()));
    let (os, ob) = (r.out(&s), r.out(&b));
    let ran = r.ok();
    assert_eq!(ran.f32(&os), [11.0, 22.0, 33.0]);
    assert_eq!(ran.f32(&ob), [1.0, 1.015625]);
    assert_eq!(ran.f32(&o), [22.0, 44.0, 66.0]);
}

#[test]
fn accumulate_into_unwritten_memory_is_an_error() {
    let mut r = Rig::new();
    let t = r.hbm(F, &[1, 2], &[1.0, 2.0]);
    let i = r.push(Engine::Dma, dma_acc(sb(F, 0, 1, 0, 2), whole(&t, F, 1, 2)));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::UninitializedRead { .. });
}

// ---------------------------------------------------------------------------------------------
// Indirect

fn table(r: &mut Rig) -> String {
    // [5, 3]: row k = (10k, 10k+1, 10k+2)
    r.hbm(
        F,
        &[5, 3],
        &(0..5)
            .flat_map(|k| (0..3).map(move |j| (10 * k + j) as f32))
            .collect::<Vec<_>>(),
    )
}

#[test]
fn indirect_gather() {
    let mut r = Rig::new();
    let t = table(&mut r);
    let idx = r.sbuf_bits(DType::I32, 0, 3, 0, &[4, 0, 2]);
    let d = sb(F, 0, 3, 64, 3);
    r.push(
        Engine::Dma,
        Op::dma_indirect(
            d.clone(),
            AccessPattern::hbm(&t, F, 0, 1, 0, vec![[1, 3]]),
            IndirectSide::Src,
            idx,
            3,
            OobMode::Error,
        ),
    );
    let o = r.out(&d);
    let ran = r.ok();
    assert_eq!(ran.f32(&o), [40.0, 41.0, 42.0, 0.0, 1.0, 2.0, 20.0, 21.0, 22.0]);
    assert_eq!(ran.stats().dma_bytes, 36 + 36 + 12, "two staging DMAs and the gather");
}

#[test]
fn indirect_gather_row_step_and_offset() {
    let mut r = Rig::new();
    let t = table(&mut r);
    // Columns 1..3 of rows 3 and 1: offset 1 element, row_step 3.
    let idx = r.sbuf_bits(DType::U16, 0, 2, 0, &[3, 1]);
    let d = sb(F, 0, 2, 64, 2);
    r.push(
        Engine::Dma,
        Op::dma_indirect(
            d.clone(),
            AccessPattern::hbm(&t, F, 1, 1, 0, vec![[1, 2]]),
            IndirectSide::Src,
            idx,
            3,
            OobMode::Error,
        ),
    );
    let o = r.out(&d);
    assert_eq!(r.ok().f32(&o), [31.0, 32.0, 11.0, 12.0]);
}

#[test]
fn indirect_gather_out_of_bounds_error_or_skip() {
    for (k, bad) in [5u32, 0xFFFF_FFFF /* −1 */].into_iter().enumerate() {
        let mut r = Rig::new();
        let t = table(&mut r);
        let idx = r.sbuf_bits(DType::I32, 0, 3, 0, &[4, bad, 0]);
        let i = r.push(
            Engine::Dma,
            Op::dma_indirect(
                sb(F, 0, 3, 64, 3),
                AccessPattern::hbm(&t, F, 0, 1, 0, vec![[1, 3]]),
                IndirectSide::Src,
                idx,
                3,
                OobMode::Error,
            ),
        );
        assert_err!(
            r.err(),
            i,
            Some("index"),
            ErrorKind::Invalid(_) | ErrorKind::IndexOutOfRange { .. }
        );
        let _ = k;
    }
    let mut r = Rig::new();
    let t = table(&mut r);
    let idx = r.sbuf_bits(DType::I32, 0, 3, 0, &[4, 7, 0]);
    let d = sb(F, 0, 3, 64, 3);
    r.memset(&d, -1.0);
    r.push(
        Engine::Dma,
        Op::dma_indirect(
            d.clone(),
            AccessPattern::hbm(&t, F, 0, 1, 0, vec![[1, 3]]),
            IndirectSide::Src,
            idx,
            3,
            OobMode::Skip,
        ),
    );
    let o = r.out(&d);
    assert_eq!(r.ok().f32(&o), [40.0, 41.0, 42.0, -1.0, -1.0, -1.0, 0.0, 1.0, 2.0]);
}

#[test]
fn indirect_scatter_with_skip_and_accumulate() {
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 3, 0, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let zeros = r.sbuf(F, 0, 4, 64, &[0.0; 8]);
    let o = r.hbm_out(F, &[4, 2]);
    r.push(Engine::Dma, Op::dma_copy(whole(&o, F, 4, 2), zeros));
    // Scatter rows 0, 1, 2 to rows 3, 9 (out of range: skipped), 1.
    let idx = r.sbuf_bits(DType::I32, 0, 3, 128, &[3, 9, 1]);
    let row = AccessPattern::hbm(&o, F, 0, 1, 0, vec![[1, 2]]);
    r.push(
        Engine::Dma,
        Op::dma_indirect(row.clone(), src.clone(), IndirectSide::Dst, idx, 2, OobMode::Skip),
    );
    // Accumulating scatter with a duplicate index: rows 0 and 1 both add into row 0.
    let idx2 = r.sbuf_bits(DType::I32, 0, 3, 192, &[0, 0, 2]);
    r.push(
        Engine::Dma,
        Op::DmaCopy(DmaCopy {
            dst: row,
            src,
            accumulate: true,
            indirect: Some(Indirect {
                side: IndirectSide::Dst,
                index: idx2,
                row_step: 2,
                oob: OobMode::Error,
            }),
        }),
    );
    assert_eq!(r.ok().f32(&o), [4.0, 6.0, 5.0, 6.0, 5.0, 6.0, 1.0, 2.0]);
}

#[test]
fn indirect_rejections() {
    let gather = |r: &mut Rig, index: AccessPattern, src_on_chip: bool| {
        let t = table(r);
        let src = if src_on_chip {
            sb(F, 0, 1, 1024, 3)
        } else {
            AccessPattern::hbm(&t, F, 0, 1, 0, vec![[1, 3]])
        };
        r.push(
            Engine::Dma,
            Op::dma_indirect(sb(F, 0, 2, 64, 3), src, IndirectSide::Src, index, 3, OobMode::Error),
        )
    };
    // Index in HBM.
    let mut r = Rig::new();
    let h = r.hbm_bits(DType::I32, &[2, 1], &[0, 1]);
    let i = gather(&mut r, whole(&h, DType::I32, 2, 1), false);
    assert_err!(r.err(), i, Some("index"), ErrorKind::Invalid(_));
    // Float index.
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 2, 0, &[0.0, 1.0]);
    let i = gather(&mut r, x, false);
    assert_err!(r.err(), i, Some("index"), ErrorKind::Invalid(_));
    // Index in PSUM.
    let mut r = Rig::new();
    let i = gather(&mut r, ps(DType::I32, 0, 2, 0, 1), false);
    assert_err!(r.err(), i, Some("index"), ErrorKind::MemoryNotAccessible { .. });
    // One index per row.
    let mut r = Rig::new();
    let x = r.sbuf_bits(DType::I32, 0, 3, 0, &[0, 1, 2]);
    let i = gather(&mut r, x, false);
    assert_err!(r.err(), i, Some("index"), ErrorKind::ShapeMismatch(_));
    // The indirect side must be in HBM.
    let mut r = Rig::new();
    let x = r.sbuf_bits(DType::I32, 0, 2, 0, &[0, 1]);
    let i = gather(&mut r, x, true);
    assert_err!(r.err(), i, Some("src"), ErrorKind::Invalid(_));
    // Row sizes must agree.
    let mut r = Rig::new();
    let t = table(&mut r);
    let x = r.sbuf_bits(DType::I32, 0, 2, 0, &[0, 1]);
    let i = r.push(
        Engine::Dma,
        Op::dma_indirect(
            sb(F, 0, 2, 64, 2),
            AccessPattern::hbm(&t, F, 0, 1, 0, vec![[1, 3]]),
            IndirectSide::Src,
            x,
            3,
            OobMode::Error,
        ),
    );
    assert_err!(r.err(), i, Some("src"), ErrorKind::ShapeMismatch(_));
    // Unwritten index.
    let mut r = Rig::new();
    let i = gather(&mut r, sb(DType::I32, 0, 2, 0, 1), false);
    assert_err!(r.err(), i, Some("index"), ErrorKind::UninitializedRead { .. });
}

// ---------------------------------------------------------------------------------------------
// Rejections

#[test]
fn psum_is_rejected_on_both_sides() {
    let mut r = Rig::new();
    let t = r.hbm(F, &[1, 2], &[1.0, 2.0]);
    let i = r.push(Engine::Dma, Op::dma_copy(ps(F, 0, 1, 0, 2), whole(&t, F, 1, 2)));
    assert_err!(
        r.err(),
        i,
        Some("dst"),
        ErrorKind::MemoryNotAccessible {
            engine: "dma",
            access: "write",
            memory: "PSUM"
        }
    );
    let mut r = Rig::new();
    let p = r.psum(F, 0, 1, 0, &[1.0, 2.0]);
    let o = r.hbm_out(F, &[1, 2]);
    let i = r.push(Engine::Dma, Op::dma_copy(whole(&o, F, 1, 2), p));
    assert_err!(
        r.err(),
        i,
        Some("src"),
        ErrorKind::MemoryNotAccessible {
            engine: "dma",
            access: "read",
            memory: "PSUM"
        }
    );
}

#[test]
fn shape_bounds_and_declaration_errors() {
    // Element counts differ.
    let mut r = Rig::new();
    let t = r.hbm(F, &[1, 3], &[1.0, 2.0, 3.0]);
    let i = r.push(Engine::Dma, Op::dma_copy(sb(F, 0, 1, 0, 2), whole(&t, F, 1, 3)));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::ShapeMismatch(_));
    // Past the end of the HBM tensor.
    let mut r = Rig::new();
    let t = r.hbm(F, &[1, 3], &[1.0, 2.0, 3.0]);
    let i = r.push(
        Engine::Dma,
        Op::dma_copy(sb(F, 0, 2, 0, 3), AccessPattern::hbm(&t, F, 0, 2, 3, vec![[1, 3]])),
    );
    assert_err!(r.err(), i, Some("src"), ErrorKind::HbmOutOfBounds { .. });
    // Undeclared tensor.
    let mut r = Rig::new();
    let i = r.push(Engine::Dma, Op::dma_copy(sb(F, 0, 1, 0, 1), whole("nope", F, 1, 1)));
    assert_err!(r.err(), i, Some("src"), ErrorKind::UnknownTensor(_));
    // Misaligned HBM byte offset.
    let mut r = Rig::new();
    let t = r.hbm(F, &[1, 3], &[1.0, 2.0, 3.0]);
    let mut src = whole(&t, F, 1, 2);
    src.offset = 2;
    let i = r.push(Engine::Dma, Op::dma_copy(sb(F, 0, 1, 0, 2), src));
    assert_err!(r.err(), i, Some("src"), ErrorKind::Misaligned { .. });
    // Past the usable SBUF bytes.
    let mut r = Rig::new();
    let t = r.hbm(F, &[1, 2], &[1.0, 2.0]);
    let i = r.push(Engine::Dma, Op::dma_copy(sb(F, 0, 1, 180_220, 2), whole(&t, F, 1, 2)));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::OutOfBounds { .. });
    // Reading SBUF nothing wrote.
    let mut r = Rig::new();
    let o = r.hbm_out(F, &[1, 2]);
    let i = r.push(Engine::Dma, Op::dma_copy(whole(&o, F, 1, 2), sb(F, 5, 1, 0, 2)));
    assert_err!(
        r.err(),
        i,
        Some("src"),
        ErrorKind::UninitializedRead { partition: 5, .. }
    );
    // DMA on a compute engine's queue.
    let mut r = Rig::new();
    let t = r.hbm(F, &[1, 2], &[1.0, 2.0]);
    let i = r.push(Engine::Vector, Op::dma_copy(sb(F, 0, 1, 0, 2), whole(&t, F, 1, 2)));
    assert_err!(r.err(), i, None, ErrorKind::WrongEngine { .. });
}

#[test]
fn hostile_operands_are_errors_not_panics() {
    let huge_hbm = |name: &str| AccessPattern {
        mem: MemSpace::Hbm(name.to_string()),
        dtype: F,
        start_partition: 0,
        partitions: usize::MAX / 2,
        partition_step: i64::MAX,
        offset: u64::MAX - 3,
        free: vec![[i64::MAX, 65535], [i64::MIN, 3]],
    };
    let huge_sb = AccessPattern {
        mem: MemSpace::Sbuf,
        dtype: F,
        start_partition: usize::MAX - 1,
        partitions: 3,
        partition_step: 0,
        offset: u64::MAX - 3,
        free: vec![[i16::MAX as i64, 65535], [i16::MIN as i64, 65535]],
    };
    let mut cases: Vec<Op> = Vec::new();
    let setup = |r: &mut Rig| {
        let t = table(r);
        let idx = r.sbuf_bits(DType::I32, 0, 2, 0, &[i32::MAX as u32, i32::MIN as u32]);
        (t, idx)
    };
    let mut probe = Rig::new();
    let (t, idx) = setup(&mut probe);
    cases.push(Op::dma_copy(sb(F, 0, 1, 0, 1), huge_hbm(&t)));
    cases.push(Op::dma_copy(huge_hbm(&t), sb(F, 0, 1, 0, 1)));
    cases.push(Op::dma_copy(huge_sb.clone(), whole(&t, F, 5, 3)));
    cases.push(dma_acc(huge_hbm(&t), huge_hbm(&t)));
    for step in [i64::MAX, i64::MIN, 1 << 40] {
        for oob in [OobMode::Error, OobMode::Skip] {
            let row = AccessPattern::hbm(&t, F, 0, 1, 0, vec![[1, 3]]);
            cases.push(Op::dma_indirect(
                sb(F, 0, 2, 64, 3),
                row.clone(),
                IndirectSide::Src,
                idx.clone(),
                step,
                oob,
            ));
            cases.push(Op::dma_indirect(
                row,
                sb(F, 0, 2, 64, 3),
                IndirectSide::Dst,
                idx.clone(),
                step,
                oob,
            ));
        }
    }
    let row = AccessPattern::hbm(&t, F, 0, 1, 0, vec![[1, 3]]);
    cases.push(Op::dma_indirect(
        huge_hbm(&t),
        row.clone(),
        IndirectSide::Src,
        idx.clone(),
        3,
        OobMode::Skip,
    ));
    cases.push(Op::dma_indirect(
        huge_sb.clone(),
        row.clone(),
        IndirectSide::Src,
        idx.clone(),
        3,
        OobMode::Skip,
    ));
    cases.push(Op::dma_indirect(
        sb(F, 0, 2, 64, 3),
        row.clone(),
        IndirectSide::Src,
        huge_sb.clone(),
        3,
        OobMode::Skip,
    ));
    // Element counts that agree, so that the patterns themselves are resolved.
    let far = AccessPattern {
        start_partition: usize::MAX - 1,
        ..sb(F, 0, 3, 0, 1)
    };
    cases.push(Op::dma_copy(far.clone(), whole(&t, F, 3, 1)));
    cases.push(Op::dma_copy(whole(&t, F, 3, 1), far.clone()));
    let wide = AccessPattern::hbm(&t, F, 0, 1 << 20, 0, vec![[0, 65535], [0, 65535]]);
    cases.push(Op::dma_copy(wide.clone(), wide.clone()));
    cases.push(dma_acc(wide.clone(), wide));
    let deep = AccessPattern::sbuf(F, 0, 1, 0, vec![[0, 65535], [0, 65535], [0, 65535], [0, 65535]]);
    cases.push(Op::dma_copy(deep.clone(), deep));
    for op in cases {
        let mut r = Rig::new();
        setup(&mut r);
        r.push(Engine::Dma, op.clone());
        let res = std::panic::catch_unwind(|| r.run().map(|_| ()));
        match res {
            Ok(Ok(())) => {} // a skip-mode indirect copy may legitimately do nothing
            Ok(Err(_)) => {}
            Err(_) => panic!("panicked on {op:?}"),
        }
    }
}
