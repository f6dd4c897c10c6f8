//! VectorE instructions: semantics with hand-derived expectations, costs, and every rejection.

#[macro_use]
mod common;

use common::*;
use trnsim::engine::vector::{DEFAULT_RNG_SEED, rng_next, rng_state_for_seed};
use trnsim::*;

const F: DType = DType::F32;
const BF: DType = DType::Bf16;

/// Vector cycles → ns on trn1 (1.12 GHz).
fn ns(cycles: u64) -> f64 {
    cycles as f64 / 1.12
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

fn tt(dst: &AccessPattern, in0: &AccessPattern, in1: &AccessPattern, op: AluOp) -> Op {
    Op::TensorTensor(TensorTensor {
        dst: dst.clone(),
        in0: in0.clone(),
        in1: in1.clone(),
        op,
    })
}

fn ts(dst: &AccessPattern, src: &AccessPattern, op0: AluOp, s0: f64) -> TensorScalar {
    TensorScalar {
        dst: dst.clone(),
        src: src.clone(),
        op0,
        operand0: ScalarOperand::Imm(s0),
        reverse0: false,
        op1: None,
        operand1: None,
        reverse1: false,
    }
}

// ---------------------------------------------------------------------------------------------
// tensor_tensor

#[test]
fn tensor_tensor_add_is_fp32_with_cast_on_write() {
    let mut r = Rig::new();
    let a = r.sbuf(F, 0, 1, 0, &[1.5, -2.0, 3e38, 1.0]);
    let b = r.sbuf(F, 0, 1, 64, &[2.25, 0.5, 3e38, 2f32.powi(-24)]);
    let d = sb(F, 0, 1, 128, 4);
    r.vector(tt(&d, &a, &b, AluOp::Add));
    let o = r.out(&d);
    // 3e38 + 3e38 overflows fp32; 1 + 2^-24 is a tie that rounds to even (1.0).
    assert_eq!(r.ok().f32(&o), [3.75, -1.5, f32::INFINITY, 1.0]);
}

#[test]
fn tensor_tensor_bf16_destination_rounds_to_nearest_even() {
    let mut r = Rig::new();
    let a = r.sbuf(F, 0, 1, 0, &[1.0, 1.0, 1.0]);
    // 1 + 2^-8 is half a bf16 ulp above 1 (tie → even 1.0); 1 + 3·2^-8 ties between
    // 1 + 2^-7 (odd) and 1 + 2^-6 (even); 1 + 2^-8 + 2^-20 is above the tie.
    let b = r.sbuf(
        F,
        0,
        1,
        64,
        &[2f32.powi(-8), 3.0 * 2f32.powi(-8), 2f32.powi(-8) + 2f32.powi(-20)],
    );
    let d = sb(BF, 0, 1, 128, 3);
    r.vector(tt(&d, &a, &b, AluOp::Add));
    let o = r.out(&d);
    assert_eq!(r.ok().f32(&o), [1.0, 1.015625, 1.0078125]);
}

#[test]
fn tensor_tensor_operand_order_compare_and_nan() {
    let mut r = Rig::new();
    let a = r.sbuf(F, 0, 1, 0, &[5.0, 1.0, f32::NAN, 2.0]);
    let b = r.sbuf(F, 0, 1, 64, &[3.0, 2.0, 1.0, 2.0]);
    let sub = sb(F, 0, 1, 128, 4);
    let lt = sb(F, 0, 1, 192, 4);
    let mx = sb(F, 0, 1, 256, 4);
    let ge = sb(DType::U8, 0, 1, 320, 4);
    r.vector(tt(&sub, &a, &b, AluOp::Subtract));
    r.vector(tt(&lt, &a, &b, AluOp::IsLt));
    r.vector(tt(&mx, &a, &b, AluOp::Max));
    r.vector(tt(&ge, &a, &b, AluOp::IsGe));
    let (o1, o2, o3, o4) = (r.out(&sub), r.out(&lt), r.out(&mx), r.out(&ge));
    let ran = r.ok();
    let s = ran.f32(&o1);
    assert_eq!(&s[..2], [2.0, -1.0]);
    assert!(s[2].is_nan());
    assert_eq!(ran.f32(&o2), [0.0, 1.0, 0.0, 0.0]);
    let m = ran.f32(&o3);
    assert_eq!((m[0], m[1], m[3]), (5.0, 2.0, 2.0));
    assert!(m[2].is_nan(), "max propagates NaN by default");
    assert_eq!(ran.bits(&o4), [1, 0, 0, 1]);
}

#[test]
fn tensor_tensor_nan_max_prefer_number_setting() {
    let mut r = Rig::new();
    r.config.numerics.nan_max_min = NanMaxMin::PreferNumber;
    let a = r.sbuf(F, 0, 1, 0, &[f32::NAN, 4.0]);
    let b = r.sbuf(F, 0, 1, 64, &[1.0, f32::NAN]);
    let d = sb(F, 0, 1, 128, 2);
    r.vector(tt(&d, &a, &b, AluOp::Max));
    let o = r.out(&d);
    assert_eq!(r.ok().f32(&o), [1.0, 4.0]);
}

#[test]
fn tensor_tensor_bitvec_on_raw_bits() {
    let mut r = Rig::new();
    let a = r.sbuf_bits(DType::I32, 0, 1, 0, &[0xFFFF_FFFF, 0x8000_0000, 0x0000_0081]);
    let b = r.sbuf_bits(DType::I32, 0, 1, 64, &[0x0F0F, 31, 1]);
    let and = sb(DType::I32, 0, 1, 128, 3);
    let shr = sb(DType::I32, 0, 1, 192, 3);
    let shl8 = sb(DType::U8, 0, 1, 256, 3);
    r.vector(tt(&and, &a, &b, AluOp::BitwiseAnd));
    r.vector(tt(&shr, &a, &b, AluOp::LogicalShiftRight));
    r.vector(tt(&shl8, &a, &b, AluOp::ShiftLeft));
    let (o1, o2, o3) = (r.out(&and), r.out(&shr), r.out(&shl8));
    let ran = r.ok();
    assert_eq!(ran.bits(&o1), [0x0F0F, 0, 1]);
    // Logical shift: 0xFFFFFFFF >> 0x0F0F (≥ 32) = 0; 0x80000000 >> 31 = 1; 0x81 >> 1 = 0x40.
    assert_eq!(ran.bits(&o2), [0, 1, 0x40]);
    // Shift left in the 8-bit destination width: 0xFF << big = 0, 0x00 << 31 = 0, 0x81 << 1 = 0x02.
    assert_eq!(ran.bits(&o3), [0, 0, 0x02]);
}

#[test]
fn tensor_tensor_int32_exact_on_gpsimd_fp32_on_vector() {
    let mut r = Rig::new();
    let a = r.sbuf_bits(DType::I32, 0, 1, 0, &[16_777_217]);
    let b = r.sbuf_bits(DType::I32, 0, 1, 64, &[1]);
    let dv = sb(DType::I32, 0, 1, 128, 1);
    let dg = sb(DType::I32, 0, 1, 192, 1);
    r.vector(tt(&dv, &a, &b, AluOp::Add));
    r.push(Engine::Gpsimd, tt(&dg, &a, &b, AluOp::Add));
    let (ov, og) = (r.out(&dv), r.out(&dg));
    let ran = r.ok();
    // VectorE: f32(16777217) = 16777216; + 1 = 16777217 → rounds (tie, even) to 16777216.
    assert_eq!(ran.ints(&ov), [16_777_216]);
    assert_eq!(ran.ints(&og), [16_777_218]);
}

#[test]
fn tensor_tensor_costs() {
    // f32 from SBUF: 2N; bf16 add: N; one input in PSUM: N. N = 100, MIN_II = 64.
    for (dt, psum, cycles) in [(F, false, 200), (BF, false, 100), (F, true, 100)] {
        let mut r = Rig::new();
        let a = r.sbuf(dt, 0, 1, 0, &[1.0; 100]);
        let b = if psum {
            sb(dt, 0, 1, 0, 100)
        } else {
            r.sbuf(dt, 0, 1, 512, &[1.0; 100])
        };
        let d = sb(dt, 0, 1, 1024, 100);
        if psum {
            // Place `b` in PSUM without a VectorE copy (which would add cost): memset on GpSimd
            // cannot reach PSUM, so use a DMA-free route: tensor_tensor reads a PSUM input written
            // by an earlier VectorE memset, and we subtract that memset's cost.
            let p = ps(dt, 0, 1, 0, 100);
            r.memset(&p, 1.0);
            r.vector(tt(&d, &a, &p, AluOp::Add));
            let ran = r.ok();
            assert!(
                close(ran.stats().est_ns.vector, ns(100) + ns(cycles)),
                "{:?}",
                ran.stats().est_ns
            );
            continue;
        }
        r.vector(tt(&d, &a, &b, AluOp::Add));
        let ran = r.ok();
        assert!(
            close(ran.stats().est_ns.vector, ns(cycles)),
            "{dt}: {:?}",
            ran.stats().est_ns
        );
        assert_eq!(ran.stats().flops, 100);
    }
}

#[test]
fn tensor_tensor_rejections() {
    // Bitvec on float operands.
    let mut r = Rig::new();
    let a = r.sbuf(F, 0, 1, 0, &[1.0]);
    let i = r.vector(tt(&sb(F, 0, 1, 64, 1), &a, &a, AluOp::BitwiseAnd));
    assert_err!(r.err(), i, Some("in0"), ErrorKind::UnsupportedDType { .. });
    // Shape mismatch.
    let mut r = Rig::new();
    let a = r.sbuf(F, 0, 1, 0, &[1.0, 2.0]);
    let b = r.sbuf(F, 0, 1, 64, &[1.0, 2.0, 3.0]);
    let i = r.vector(tt(&sb(F, 0, 1, 128, 2), &a, &b, AluOp::Add));
    assert_err!(r.err(), i, Some("in1"), ErrorKind::ShapeMismatch(_));
    // Both inputs in PSUM.
    let mut r = Rig::new();
    let p0 = ps(F, 0, 1, 0, 2);
    let p1 = ps(F, 0, 1, 64, 2);
    r.memset(&p0, 1.0);
    r.memset(&p1, 1.0);
    let i = r.vector(tt(&sb(F, 0, 1, 0, 2), &p0, &p1, AluOp::Add));
    assert_err!(r.err(), i, Some("in0"), ErrorKind::Invalid(_));
    // pow is GpSimd-only.
    let mut r = Rig::new();
    let a = r.sbuf(F, 0, 1, 0, &[2.0]);
    let i = r.vector(tt(&sb(F, 0, 1, 64, 1), &a, &a, AluOp::Pow));
    assert_err!(r.err(), i, None, ErrorKind::WrongEngine { .. });
    // Wrong engine for the instruction.
    let mut r = Rig::new();
    let a = r.sbuf(F, 0, 1, 0, &[2.0]);
    let i = r.push(Engine::Scalar, tt(&sb(F, 0, 1, 64, 1), &a, &a, AluOp::Add));
    assert_err!(r.err(), i, None, ErrorKind::WrongEngine { .. });
    // Uninitialized input.
    let mut r = Rig::new();
    let a = r.sbuf(F, 0, 1, 0, &[2.0]);
    let i = r.vector(tt(&sb(F, 0, 1, 64, 1), &a, &sb(F, 0, 1, 4, 1), AluOp::Add));
    assert_err!(r.err(), i, Some("in1"), ErrorKind::UninitializedRead { .. });
    // Start-partition rule: 40 partitions cannot start at 32.
    let mut r = Rig::new();
    let a = r.sbuf(F, 32, 40, 0, &[1.0; 40]);
    let i = r.vector(tt(&sb(F, 0, 40, 64, 1), &a, &a, AluOp::Add));
    assert_err!(
        r.err(),
        i,
        Some("in0"),
        ErrorKind::StartPartition { start: 32, count: 40 }
    );
    // Free size over the PSUM limit (4096 elements per partition).
    let mut r = Rig::new();
    let big = AccessPattern::psum(F, 0, 1, 0, vec![[1, 2], [1, 2049]]);
    let i = r.vector(tt(&sb(F, 0, 1, 0, 4098), &big, &sb(F, 0, 1, 0, 4098), AluOp::Add));
    assert_err!(
        r.err(),
        i,
        Some("in0"),
        ErrorKind::FreeSizeLimit {
            size: 4098,
            limit: 4096,
            ..
        }
    );
    // GpSimd cannot touch PSUM.
    let mut r = Rig::new();
    let p0 = ps(F, 0, 1, 0, 1);
    r.memset(&p0, 1.0);
    let s0 = r.sbuf(F, 0, 1, 0, &[1.0]);
    let i = r.push(Engine::Gpsimd, tt(&sb(F, 0, 1, 64, 1), &p0, &s0, AluOp::Add));
    assert_err!(r.err(), i, Some("in0"), ErrorKind::MemoryNotAccessible { .. });
}

// ---------------------------------------------------------------------------------------------
// tensor_scalar

#[test]
fn tensor_scalar_reverse_and_op1() {
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0, 2.0, 3.0, 4.0]);
    let d0 = sb(F, 0, 1, 64, 4);
    let d1 = sb(F, 0, 1, 128, 4);
    // (10 - x) * 0.5
    r.vector(Op::TensorScalar(TensorScalar {
        reverse0: true,
        op1: Some(AluOp::Multiply),
        operand1: Some(ScalarOperand::Imm(0.5)),
        ..ts(&d0, &x, AluOp::Subtract, 10.0)
    }));
    // 100 - (x - 1)
    r.vector(Op::TensorScalar(TensorScalar {
        op1: Some(AluOp::Subtract),
        operand1: Some(ScalarOperand::Imm(100.0)),
        reverse1: true,
        ..ts(&d1, &x, AluOp::Subtract, 1.0)
    }));
    let (o0, o1) = (r.out(&d0), r.out(&d1));
    let ran = r.ok();
    assert_eq!(ran.f32(&o0), [4.5, 4.0, 3.5, 3.0]);
    assert_eq!(ran.f32(&o1), [100.0, 99.0, 98.0, 97.0]);
    assert_eq!(ran.stats().flops, 16);
}

#[test]
fn tensor_scalar_per_partition_tile_operand() {
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 2, 0, &[1.0, 2.0, 3.0, 4.0]);
    let s = r.sbuf(F, 0, 2, 64, &[2.0, 3.0]);
    let d = sb(F, 0, 2, 128, 2);
    r.vector(Op::TensorScalar(TensorScalar {
        operand0: ScalarOperand::Tile(s),
        ..ts(&d, &x, AluOp::Multiply, 0.0)
    }));
    let o = r.out(&d);
    assert_eq!(r.ok().f32(&o), [2.0, 4.0, 9.0, 12.0]);
}

#[test]
fn tensor_scalar_bitvec_and_immediate_float_conversion() {
    let mut r = Rig::new();
    let x = r.sbuf_bits(DType::U8, 0, 1, 0, &[0x1F, 0x80]);
    let d = sb(DType::U8, 0, 1, 64, 2);
    r.vector(Op::TensorScalar(TensorScalar {
        op1: Some(AluOp::BitwiseOr),
        operand1: Some(ScalarOperand::Imm(1.0)),
        ..ts(&d, &x, AluOp::ShiftLeft, 4.0)
    }));
    // 0.1 as an fp32 immediate: 1 + 0.1 in fp32 = 1.1 (f32), exactly as f32 arithmetic gives.
    let y = r.sbuf(F, 0, 1, 128, &[1.0]);
    let dy = sb(F, 0, 1, 192, 1);
    r.vector(Op::TensorScalar(ts(&dy, &y, AluOp::Add, 0.1)));
    let (o, oy) = (r.out(&d), r.out(&dy));
    let ran = r.ok();
    assert_eq!(ran.bits(&o), [0xF1, 0x01]);
    assert_eq!(ran.f32(&oy), [1.0f32 + 0.1f32]);
}

#[test]
fn tensor_scalar_rejections() {
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 2, 0, &[1.0, 2.0]);
    let d = sb(F, 0, 2, 64, 1);
    let i = r.vector(Op::TensorScalar(TensorScalar {
        op1: Some(AluOp::Add),
        ..ts(&d, &x, AluOp::Add, 1.0)
    }));
    assert_err!(r.err(), i, None, ErrorKind::Invalid(_));
    let mut r = Rig::new();
    let x = r.sbuf_bits(DType::I32, 0, 1, 0, &[1]);
    let d = sb(DType::I32, 0, 1, 64, 1);
    let i = r.vector(Op::TensorScalar(TensorScalar {
        op1: Some(AluOp::Add),
        operand1: Some(ScalarOperand::Imm(1.0)),
        ..ts(&d, &x, AluOp::ShiftLeft, 1.0)
    }));
    assert_err!(r.err(), i, None, ErrorKind::Invalid(_));
    // Scalar tile of the wrong shape.
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 2, 0, &[1.0, 2.0]);
    let s = r.sbuf(F, 0, 1, 64, &[1.0]);
    let i = r.vector(Op::TensorScalar(TensorScalar {
        operand0: ScalarOperand::Tile(s),
        ..ts(&sb(F, 0, 2, 128, 1), &x, AluOp::Add, 0.0)
    }));
    assert_err!(r.err(), i, Some("operand0"), ErrorKind::ShapeMismatch(_));
    // Bitvec with a fractional immediate.
    let mut r = Rig::new();
    let x = r.sbuf_bits(DType::I32, 0, 1, 0, &[1]);
    let i = r.vector(Op::TensorScalar(ts(
        &sb(DType::I32, 0, 1, 64, 1),
        &x,
        AluOp::ShiftLeft,
        1.5,
    )));
    assert_err!(r.err(), i, Some("operand0"), ErrorKind::Invalid(_));
}

// ---------------------------------------------------------------------------------------------
// scalar_tensor_tensor

fn stt(
    dst: &AccessPattern,
    src: &AccessPattern,
    op0: AluOp,
    s: f64,
    op1: AluOp,
    in1: &AccessPattern,
) -> ScalarTensorTensor {
    ScalarTensorTensor {
        dst: dst.clone(),
        src: src.clone(),
        op0,
        operand0: ScalarOperand::Imm(s),
        op1,
        in1: in1.clone(),
        reverse0: false,
        reverse1: false,
    }
}

#[test]
fn scalar_tensor_tensor_semantics_and_reversal() {
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0, 2.0, 3.0, 4.0]);
    let y = r.sbuf(F, 0, 1, 64, &[2.0, 2.0, 10.0, 10.0]);
    let d0 = sb(F, 0, 1, 128, 4);
    let d1 = sb(F, 0, 1, 192, 4);
    let d2 = sb(F, 0, 1, 256, 4);
    // (x - 1) * y
    r.vector(Op::ScalarTensorTensor(stt(
        &d0,
        &x,
        AluOp::Subtract,
        1.0,
        AluOp::Multiply,
        &y,
    )));
    // y - (5 - x)
    r.vector(Op::ScalarTensorTensor(ScalarTensorTensor {
        reverse0: true,
        reverse1: true,
        ..stt(&d1, &x, AluOp::Subtract, 5.0, AluOp::Subtract, &y)
    }));
    // max(x * 2, y) into bf16
    let d2b = AccessPattern { dtype: BF, ..d2 };
    r.vector(Op::ScalarTensorTensor(stt(
        &d2b,
        &x,
        AluOp::Multiply,
        2.0,
        AluOp::Max,
        &y,
    )));
    let (o0, o1, o2) = (r.out(&d0), r.out(&d1), r.out(&d2b));
    let ran = r.ok();
    assert_eq!(ran.f32(&o0), [0.0, 2.0, 20.0, 30.0]);
    assert_eq!(ran.f32(&o1), [-2.0, -1.0, 8.0, 9.0]);
    assert_eq!(ran.f32(&o2), [2.0, 4.0, 10.0, 10.0]);
}

#[test]
fn scalar_tensor_tensor_tile_operand_and_costs() {
    // bf16, subtract then multiply, even N: N cycles; otherwise 2N.
    for (dt, op0, n, cycles) in [
        (BF, AluOp::Subtract, 100, 100),
        (BF, AluOp::Add, 100, 200),
        (F, AluOp::Subtract, 100, 200),
    ] {
        let mut r = Rig::new();
        let x = r.sbuf(dt, 0, 2, 0, &vec![3.0; 2 * n]);
        let y = r.sbuf(dt, 0, 2, 1024, &vec![2.0; 2 * n]);
        let s = r.sbuf(F, 0, 2, 2048, &[1.0, 2.0]);
        let d = sb(F, 0, 2, 4096, n);
        r.vector(Op::ScalarTensorTensor(ScalarTensorTensor {
            operand0: ScalarOperand::Tile(s),
            ..stt(&d, &x, op0, 0.0, AluOp::Multiply, &y)
        }));
        let o = r.out(&d);
        let ran = r.ok();
        let v = ran.f32(&o);
        let (a, b) = if op0 == AluOp::Subtract {
            (4.0, 2.0)
        } else {
            (8.0, 10.0)
        };
        assert_eq!((v[0], v[n]), (a, b));
        assert!(
            close(ran.stats().est_ns.vector, ns(cycles)),
            "{dt} {op0:?}: {:?}",
            ran.stats().est_ns
        );
        assert_eq!(ran.stats().flops, 4 * n as u64);
    }
}

#[test]
fn scalar_tensor_tensor_rejections() {
    let mut r = Rig::new();
    let p0 = ps(F, 0, 1, 0, 2);
    let p1 = ps(F, 0, 1, 64, 2);
    r.memset(&p0, 1.0);
    r.memset(&p1, 1.0);
    let i = r.vector(Op::ScalarTensorTensor(stt(
        &sb(F, 0, 1, 0, 2),
        &p0,
        AluOp::Add,
        1.0,
        AluOp::Add,
        &p1,
    )));
    assert_err!(r.err(), i, Some("src"), ErrorKind::Invalid(_));

    let mut r = Rig::new();
    let x = r.sbuf_bits(DType::I32, 0, 1, 0, &[1, 2]);
    let i = r.vector(Op::ScalarTensorTensor(stt(
        &sb(DType::I32, 0, 1, 64, 2),
        &x,
        AluOp::BitwiseAnd,
        1.0,
        AluOp::Add,
        &x,
    )));
    assert_err!(r.err(), i, None, ErrorKind::Invalid(_));

    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0, 2.0]);
    let y = r.sbuf(F, 0, 1, 64, &[1.0, 2.0, 3.0]);
    let i = r.vector(Op::ScalarTensorTensor(stt(
        &sb(F, 0, 1, 128, 2),
        &x,
        AluOp::Add,
        1.0,
        AluOp::Add,
        &y,
    )));
    assert_err!(r.err(), i, Some("in1"), ErrorKind::ShapeMismatch(_));

    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0, 2.0]);
    let i = r.vector(Op::ScalarTensorTensor(stt(
        &sb(F, 0, 1, 128, 2),
        &x,
        AluOp::Pow,
        1.0,
        AluOp::Add,
        &x,
    )));
    assert_err!(r.err(), i, None, ErrorKind::WrongEngine { .. });

    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0, 2.0]);
    let i = r.push(
        Engine::Gpsimd,
        Op::ScalarTensorTensor(stt(&sb(F, 0, 1, 128, 2), &x, AluOp::Add, 1.0, AluOp::Add, &x)),
    );
    assert_err!(r.err(), i, None, ErrorKind::WrongEngine { .. });

    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0, 2.0]);
    let i = r.vector(Op::ScalarTensorTensor(stt(
        &sb(F, 0, 1, 128, 2),
        &x,
        AluOp::Add,
        1.0,
        AluOp::Add,
        &sb(F, 0, 1, 256, 2),
    )));
    assert_err!(r.err(), i, Some("in1"), ErrorKind::UninitializedRead { .. });
}

// ---------------------------------------------------------------------------------------------
// tensor_reduce

fn red(dst: &AccessPattern, src: &AccessPattern, op: AluOp, axes: usize) -> Op {
    Op::TensorReduce(TensorReduce {
        dst: dst.clone(),
        src: src.clone(),
        op,
        axes,
        negate: false,
    })
}

#[test]
fn tensor_reduce_innermost_axes() {
    let mut r = Rig::new();
    // One partition, free [3, 4] = rows (1 2 3 4) (5 6 7 8) (9 10 11 12).
    let flat = r.sbuf(F, 0, 1, 0, &(1..=12).map(|v| v as f32).collect::<Vec<_>>());
    let x = with_free(&flat, vec![[4, 3], [1, 4]]);
    let rows = sb(F, 0, 1, 64, 3);
    let all = sb(F, 0, 1, 128, 1);
    let cols_max = sb(F, 0, 1, 192, 4);
    r.vector(red(&rows, &x, AluOp::Add, 1));
    r.vector(red(&all, &x, AluOp::Add, 2));
    // Reducing the inner axis of a transposed view = column maxima.
    r.vector(red(&cols_max, &with_free(&flat, vec![[1, 4], [4, 3]]), AluOp::Max, 1));
    let (o1, o2, o3) = (r.out(&rows), r.out(&all), r.out(&cols_max));
    let ran = r.ok();
    assert_eq!(ran.f32(&o1), [10.0, 26.0, 42.0]);
    assert_eq!(ran.f32(&o2), [78.0]);
    assert_eq!(ran.f32(&o3), [9.0, 10.0, 11.0, 12.0]);
}

#[test]
fn tensor_reduce_every_arithmetic_operator() {
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0, 2.0, 3.0, 4.0]);
    let cases = [
        (AluOp::Add, false, 10.0),
        (AluOp::Add, true, -10.0),
        (AluOp::Subtract, false, -10.0), // 0 - 1 - 2 - 3 - 4
        (AluOp::Multiply, false, 24.0),
        (AluOp::Max, false, 4.0),
        (AluOp::Min, true, -1.0),
        (AluOp::Average, false, 2.5),
        (AluOp::LogicalAnd, false, 1.0),
        (AluOp::LogicalOr, false, 1.0),
        (AluOp::LogicalXor, false, 0.0), // four true values
    ];
    let mut outs = Vec::new();
    for (k, &(op, negate, _)) in cases.iter().enumerate() {
        let d = sb(F, 0, 1, 64 + 4 * k as u64, 1);
        r.vector(Op::TensorReduce(TensorReduce {
            dst: d.clone(),
            src: x.clone(),
            op,
            axes: 1,
            negate,
        }));
        outs.push(r.out(&d));
    }
    let ran = r.ok();
    for (o, (op, negate, want)) in outs.iter().zip(cases) {
        assert_eq!(ran.f32(o), [want], "{op:?} negate={negate}");
    }
}

#[test]
fn tensor_reduce_sequential_fp32_order_and_identities() {
    let mut r = Rig::new();
    // Index order in fp32: 1e8 + 1 = 1e8 (ulp 8); − 1e8 = 0; + 1 = 1 (exact sum: 2).
    let x = r.sbuf(F, 0, 1, 0, &[1e8, 1.0, -1e8, 1.0]);
    let s = sb(F, 0, 1, 64, 1);
    r.vector(red(&s, &x, AluOp::Add, 1));
    // logical_and of one non-zero value is 1.0 (from the identity), not the value.
    let y = r.sbuf(F, 0, 1, 128, &[5.0]);
    let l = sb(F, 0, 1, 192, 1);
    r.vector(red(&l, &y, AluOp::LogicalAnd, 1));
    // NaN propagates through max by default.
    let z = r.sbuf(F, 0, 1, 256, &[1.0, f32::NAN, 3.0]);
    let m = sb(F, 0, 1, 320, 1);
    r.vector(red(&m, &z, AluOp::Max, 1));
    let (o1, o2, o3) = (r.out(&s), r.out(&l), r.out(&m));
    let ran = r.ok();
    assert_eq!(ran.f32(&o1), [1.0]);
    assert_eq!(ran.f32(&o2), [1.0]);
    assert!(ran.f32(&o3)[0].is_nan());
}

#[test]
fn tensor_reduce_bitvec_and_per_partition() {
    let mut r = Rig::new();
    let x = r.sbuf_bits(DType::I32, 0, 2, 0, &[0xFF, 0x0F, 0x3C, 0x1, 0x2, 0x4]);
    let mut outs = Vec::new();
    for (k, op) in [AluOp::BitwiseAnd, AluOp::BitwiseOr, AluOp::BitwiseXor]
        .into_iter()
        .enumerate()
    {
        let d = sb(DType::I32, 0, 2, 64 + 4 * k as u64, 1);
        r.vector(red(&d, &x, op, 1));
        outs.push(r.out(&d));
    }
    let ran = r.ok();
    assert_eq!(ran.bits(&outs[0]), [0x0C, 0x0]);
    assert_eq!(ran.bits(&outs[1]), [0xFF, 0x7]);
    assert_eq!(ran.bits(&outs[2]), [0xCC, 0x7]);
}

#[test]
fn tensor_reduce_costs_and_bf16_output() {
    // bf16 in and out with add: N/2; otherwise N. N = 256.
    for (dt, op, cycles) in [(BF, AluOp::Add, 128), (BF, AluOp::Multiply, 256), (F, AluOp::Add, 256)] {
        let mut r = Rig::new();
        let x = r.sbuf(dt, 0, 1, 0, &[1.0; 256]);
        let d = sb(dt, 0, 1, 2048, 1);
        r.vector(red(&d, &x, op, 1));
        let o = r.out(&d);
        let ran = r.ok();
        assert_eq!(ran.f32(&o), [if op == AluOp::Add { 256.0 } else { 1.0 }]);
        assert!(close(ran.stats().est_ns.vector, ns(cycles)), "{dt} {op:?}");
        assert_eq!(ran.stats().flops, 256);
    }
    // The fp32 sum 257 rounds to 256 in bf16 (8 significant bits; tie → even).
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0; 257]);
    let d = sb(BF, 0, 1, 2048, 1);
    r.vector(red(&d, &x, AluOp::Add, 1));
    let o = r.out(&d);
    assert_eq!(r.ok().f32(&o), [256.0]);
}

#[test]
fn tensor_reduce_rejections() {
    let setup = |r: &mut Rig| r.sbuf(F, 0, 1, 0, &[1.0, 2.0, 3.0, 4.0]);
    let mut r = Rig::new();
    let x = setup(&mut r);
    let i = r.vector(red(&sb(F, 0, 1, 64, 1), &x, AluOp::Add, 0));
    assert_err!(r.err(), i, Some("src"), ErrorKind::Invalid(_));
    let mut r = Rig::new();
    let x = setup(&mut r);
    let i = r.vector(red(&sb(F, 0, 1, 64, 1), &x, AluOp::Add, 2));
    assert_err!(r.err(), i, Some("src"), ErrorKind::Invalid(_));
    let mut r = Rig::new();
    let x = setup(&mut r);
    let i = r.vector(red(&sb(F, 0, 1, 64, 2), &x, AluOp::Add, 1));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::ShapeMismatch(_));
    for op in [AluOp::IsEqual, AluOp::Bypass, AluOp::Abs, AluOp::Pow] {
        let mut r = Rig::new();
        let x = setup(&mut r);
        let i = r.vector(red(&sb(F, 0, 1, 64, 1), &x, op, 1));
        assert_err!(r.err(), i, None, ErrorKind::Invalid(_));
    }
    let mut r = Rig::new();
    let x = r.sbuf_bits(DType::I32, 0, 1, 0, &[1, 2]);
    let i = r.vector(red(&sb(DType::I32, 0, 1, 64, 1), &x, AluOp::ShiftLeft, 1));
    assert_err!(r.err(), i, None, ErrorKind::Invalid(_));
    let mut r = Rig::new();
    let x = r.sbuf_bits(DType::I32, 0, 1, 0, &[1, 2]);
    let i = r.vector(Op::TensorReduce(TensorReduce {
        dst: sb(DType::I32, 0, 1, 64, 1),
        src: x,
        op: AluOp::BitwiseOr,
        axes: 1,
        negate: true,
    }));
    assert_err!(r.err(), i, None, ErrorKind::Invalid(_));
    let mut r = Rig::new();
    let x = setup(&mut r);
    let i = r.vector(red(&sb(DType::I32, 0, 1, 64, 1), &x, AluOp::BitwiseOr, 1));
    assert_err!(r.err(), i, Some("src"), ErrorKind::UnsupportedDType { .. });
    let mut r = Rig::new();
    let x = setup(&mut r);
    let i = r.push(Engine::Gpsimd, red(&sb(F, 0, 1, 64, 1), &x, AluOp::Add, 1));
    assert_err!(r.err(), i, None, ErrorKind::WrongEngine { .. });
    let mut r = Rig::new();
    let i = r.vector(red(&sb(F, 0, 1, 64, 1), &sb(F, 0, 1, 0, 4), AluOp::Add, 1));
    assert_err!(r.err(), i, Some("src"), ErrorKind::UninitializedRead { .. });
    let mut r = Rig::new();
    let i = r.vector(red(
        &sb(F, 0, 1, 0, 2),
        &AccessPattern::sbuf(F, 0, 1, 0, vec![[0, 2], [0, 32769]]),
        AluOp::Add,
        1,
    ));
    assert_err!(
        r.err(),
        i,
        Some("src"),
        ErrorKind::FreeSizeLimit {
            size: 65538,
            limit: 65536,
            ..
        }
    );
    let mut r = Rig::new();
    let x = r.sbuf(F, 64, 2, 0, &[1.0, 2.0]);
    let i = r.vector(red(&sb(F, 96, 3, 64, 1), &x, AluOp::Add, 1));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::ShapeMismatch(_));
}

// ---------------------------------------------------------------------------------------------
// tensor_tensor_scan

fn scan(
    dst: &AccessPattern,
    in0: &AccessPattern,
    in1: &AccessPattern,
    init: ScalarOperand,
    op0: AluOp,
    op1: AluOp,
) -> Op {
    Op::TensorTensorScan(TensorTensorScan {
        dst: dst.clone(),
        in0: in0.clone(),
        in1: in1.clone(),
        initial: init,
        op0,
        op1,
    })
}

#[test]
fn tensor_tensor_scan_cumsum_and_linear_recurrence() {
    let mut r = Rig::new();
    let a = r.sbuf(F, 0, 1, 0, &[1.0, 2.0, 3.0, 4.0]);
    let z = r.sbuf(F, 0, 1, 64, &[0.0; 4]);
    let cum = sb(F, 0, 1, 128, 4);
    r.vector(scan(&cum, &a, &z, ScalarOperand::Imm(10.0), AluOp::Add, AluOp::Add));
    // r = in0·r + in1 with r(-1) = 4: 0.5·4+1 = 3; 0.5·3+2 = 3.5; 2·3.5+3 = 10.
    let m = r.sbuf(F, 0, 1, 192, &[0.5, 0.5, 2.0]);
    let c = r.sbuf(F, 0, 1, 256, &[1.0, 2.0, 3.0]);
    let lin = sb(F, 0, 1, 320, 3);
    r.vector(scan(&lin, &m, &c, ScalarOperand::Imm(4.0), AluOp::Multiply, AluOp::Add));
    let (o1, o2) = (r.out(&cum), r.out(&lin));
    let ran = r.ok();
    assert_eq!(ran.f32(&o1), [11.0, 13.0, 16.0, 20.0]);
    assert_eq!(ran.f32(&o2), [3.0, 3.5, 10.0]);
}

#[test]
fn tensor_tensor_scan_tile_initial_state_is_fp32_and_cost() {
    let mut r = Rig::new();
    // Running max per partition, initial from a [2, 1] tile; the bf16 output rounds but the
    // state does not: 1 + 2^-8 (bf16 → 1.0) then + 2^-8 again = 1 + 2^-7 (exact in bf16).
    let a = r.sbuf(F, 0, 2, 0, &[2f32.powi(-8), 2f32.powi(-8), 1.0, 5.0]);
    let z = r.sbuf(F, 0, 2, 64, &[0.0; 4]);
    let init = r.sbuf(F, 0, 2, 128, &[1.0, 3.0]);
    let d = sb(BF, 0, 2, 192, 2);
    r.vector(scan(
        &d,
        &a,
        &z,
        ScalarOperand::Tile(init.clone()),
        AluOp::Add,
        AluOp::Add,
    ));
    let o = r.out(&d);
    let ran = r.ok();
    assert_eq!(ran.f32(&o), [1.0, 1.0078125, 4.0, 9.0]);
    // cost max(MIN_II, 2N) = 64 for N = 2.
    assert!(close(ran.stats().est_ns.vector, ns(64)));

    let mut r = Rig::new();
    let a = r.sbuf(F, 0, 1, 0, &[1.0; 40]);
    let d = sb(F, 0, 1, 1024, 40);
    r.vector(scan(&d, &a, &a, ScalarOperand::Imm(0.0), AluOp::Max, AluOp::Multiply));
    let ran = r.ok();
    assert!(close(ran.stats().est_ns.vector, ns(80)));
    assert_eq!(ran.stats().flops, 80);
}

#[test]
fn tensor_tensor_scan_rejections() {
    let mut r = Rig::new();
    let p0 = ps(F, 0, 1, 0, 2);
    let p1 = ps(F, 0, 1, 64, 2);
    r.memset(&p0, 1.0);
    r.memset(&p1, 1.0);
    let i = r.vector(scan(
        &sb(F, 0, 1, 0, 2),
        &p0,
        &p1,
        ScalarOperand::Imm(0.0),
        AluOp::Add,
        AluOp::Add,
    ));
    assert_err!(r.err(), i, Some("in0"), ErrorKind::Invalid(_));
    let mut r = Rig::new();
    let x = r.sbuf_bits(DType::I32, 0, 1, 0, &[1, 2]);
    let i = r.vector(scan(
        &sb(DType::I32, 0, 1, 64, 2),
        &x,
        &x,
        ScalarOperand::Imm(0.0),
        AluOp::BitwiseOr,
        AluOp::Add,
    ));
    assert_err!(r.err(), i, None, ErrorKind::Invalid(_));
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0, 2.0]);
    let y = r.sbuf(F, 0, 1, 64, &[1.0]);
    let i = r.vector(scan(
        &sb(F, 0, 1, 128, 2),
        &x,
        &y,
        ScalarOperand::Imm(0.0),
        AluOp::Add,
        AluOp::Add,
    ));
    assert_err!(r.err(), i, Some("in1"), ErrorKind::ShapeMismatch(_));
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 2, 0, &[1.0, 2.0]);
    let t = r.sbuf(F, 0, 1, 64, &[1.0]);
    let i = r.vector(scan(
        &sb(F, 0, 2, 128, 1),
        &x,
        &x,
        ScalarOperand::Tile(t),
        AluOp::Add,
        AluOp::Add,
    ));
    assert_err!(r.err(), i, Some("initial"), ErrorKind::ShapeMismatch(_));
}

// ---------------------------------------------------------------------------------------------
// tensor_scalar_reduce

fn tsr(dst: &AccessPattern, src: &AccessPattern, op0: AluOp, s: f64, rop: AluOp, res: &AccessPattern) -> Op {
    Op::TensorScalarReduce(TensorScalarReduce {
        dst: dst.clone(),
        src: src.clone(),
        op0,
        operand0: ScalarOperand::Imm(s),
        reduce_op: rop,
        reduce_res: res.clone(),
    })
}

#[test]
fn tensor_scalar_reduce_semantics() {
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 2, 0, &[1.0, 2.0, 3.0, 4.0, -1.0, 0.5, 2.0, 8.0]);
    let d = sb(F, 0, 2, 64, 4);
    let mut outs = Vec::new();
    for (k, op) in [AluOp::Add, AluOp::Subtract, AluOp::Multiply, AluOp::Max, AluOp::Min]
        .into_iter()
        .enumerate()
    {
        let res = sb(F, 0, 2, 128 + 4 * k as u64, 1);
        r.vector(tsr(&d, &x, AluOp::Multiply, 2.0, op, &res));
        outs.push(r.out(&res));
    }
    let od = r.out(&d);
    let ran = r.ok();
    assert_eq!(ran.f32(&od), [2.0, 4.0, 6.0, 8.0, -2.0, 1.0, 4.0, 16.0]);
    assert_eq!(ran.f32(&outs[0]), [20.0, 19.0]);
    assert_eq!(ran.f32(&outs[1]), [-20.0, -19.0]);
    assert_eq!(ran.f32(&outs[2]), [384.0, -128.0]);
    assert_eq!(ran.f32(&outs[3]), [8.0, 16.0]);
    assert_eq!(ran.f32(&outs[4]), [2.0, -2.0]);
}

#[test]
fn tensor_scalar_reduce_reduces_before_the_cast_and_cost() {
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0 + 2f32.powi(-8), 1.0 + 2f32.powi(-8)]);
    let d = sb(BF, 0, 1, 64, 2);
    let res = sb(F, 0, 1, 128, 1);
    r.vector(tsr(&d, &x, AluOp::Add, 0.0, AluOp::Add, &res));
    let (od, or) = (r.out(&d), r.out(&res));
    let ran = r.ok();
    assert_eq!(ran.f32(&od), [1.0, 1.0]);
    assert_eq!(ran.f32(&or), [2.0078125]);
    // max(MIN_II, N) + MIN_II
    assert!(close(ran.stats().est_ns.vector, ns(128)));
}

#[test]
fn tensor_scalar_reduce_rejections() {
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0, 2.0]);
    let i = r.vector(tsr(
        &sb(F, 0, 1, 64, 2),
        &x,
        AluOp::Add,
        1.0,
        AluOp::IsEqual,
        &sb(F, 0, 1, 128, 1),
    ));
    assert_err!(r.err(), i, None, ErrorKind::Invalid(_));
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0, 2.0]);
    let i = r.vector(tsr(
        &sb(F, 0, 1, 64, 2),
        &x,
        AluOp::Add,
        1.0,
        AluOp::Add,
        &sb(F, 0, 1, 128, 2),
    ));
    assert_err!(r.err(), i, Some("reduce_res"), ErrorKind::ShapeMismatch(_));
    let mut r = Rig::new();
    let x = r.sbuf_bits(DType::I32, 0, 1, 0, &[1, 2]);
    let i = r.vector(tsr(
        &sb(DType::I32, 0, 1, 64, 2),
        &x,
        AluOp::ShiftLeft,
        1.0,
        AluOp::Add,
        &sb(F, 0, 1, 128, 1),
    ));
    assert_err!(r.err(), i, None, ErrorKind::Invalid(_));
}

// ---------------------------------------------------------------------------------------------
// tensor_copy

#[test]
fn tensor_copy_is_bit_exact_for_equal_dtypes_and_casts_otherwise() {
    let mut r = Rig::new();
    let f = r.sbuf_bits(F, 0, 1, 0, &[0x7FA0_0001, 0x3F80_8000]);
    let b = r.sbuf_bits(BF, 0, 1, 64, &[0x7F81, 0xFF80]);
    let i = r.sbuf_bits(DType::I32, 0, 1, 128, &[16_777_217]);
    let (df, dfb, db, di, dif) = (
        sb(F, 0, 1, 256, 2),
        sb(BF, 0, 1, 320, 2),
        sb(BF, 0, 1, 384, 2),
        sb(DType::I32, 0, 1, 448, 1),
        sb(F, 0, 1, 512, 1),
    );
    for (d, s) in [(&df, &f), (&dfb, &f), (&db, &b), (&di, &i), (&dif, &i)] {
        r.vector(Op::TensorCopy(TensorCopy {
            dst: d.clone(),
            src: s.clone(),
        }));
    }
    let outs: Vec<String> = [&df, &dfb, &db, &di, &dif].iter().map(|d| r.out(d)).collect();
    let ran = r.ok();
    assert_eq!(
        ran.bits(&outs[0]),
        [0x7FA0_0001, 0x3F80_8000],
        "signalling NaN payload kept"
    );
    // f32 → bf16: NaN becomes the canonical 0x7FC0; 0x3F808000 = 1 + 2^-8 ties to even 0x3F80.
    assert_eq!(ran.bits(&outs[1]), [0x7FC0, 0x3F80]);
    assert_eq!(ran.bits(&outs[2]), [0x7F81, 0xFF80]);
    assert_eq!(ran.ints(&outs[3]), [16_777_217]);
    assert_eq!(ran.f32(&outs[4]), [16_777_216.0]);
}

#[test]
fn tensor_copy_on_gpsimd_and_psum() {
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0, 2.0]);
    let d = sb(F, 0, 1, 64, 2);
    r.push(
        Engine::Gpsimd,
        Op::TensorCopy(TensorCopy {
            dst: d.clone(),
            src: x.clone(),
        }),
    );
    let p = ps(F, 0, 1, 0, 2);
    r.vector(Op::TensorCopy(TensorCopy {
        dst: p.clone(),
        src: x.clone(),
    }));
    let (o1, o2) = (r.out(&d), r.out(&p));
    let ran = r.ok();
    assert_eq!(ran.f32(&o1), [1.0, 2.0]);
    assert_eq!(ran.f32(&o2), [1.0, 2.0]);

    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0, 2.0]);
    let i = r.push(
        Engine::Gpsimd,
        Op::TensorCopy(TensorCopy {
            dst: ps(F, 0, 1, 0, 2),
            src: x,
        }),
    );
    assert_err!(r.err(), i, Some("dst"), ErrorKind::MemoryNotAccessible { .. });
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0, 2.0]);
    let i = r.vector(Op::TensorCopy(TensorCopy {
        dst: sb(F, 0, 1, 64, 3),
        src: x,
    }));
    assert_err!(r.err(), i, Some("src"), ErrorKind::ShapeMismatch(_));
}

// ---------------------------------------------------------------------------------------------
// tensor_copy_predicated

fn cp(dst: &AccessPattern, src: &AccessPattern, pred: &AccessPattern, reverse: bool) -> Op {
    Op::TensorCopyPredicated(TensorCopyPredicated {
        dst: dst.clone(),
        src: src.clone(),
        predicate: pred.clone(),
        reverse_pred: reverse,
    })
}

#[test]
fn tensor_copy_predicated_semantics() {
    let mut r = Rig::new();
    let src = r.sbuf_bits(
        F,
        0,
        1,
        0,
        &[1f32.to_bits(), 2f32.to_bits(), 0x7FA0_0001, 4f32.to_bits()],
    );
    let pred = r.sbuf_bits(DType::U8, 0, 1, 64, &[1, 0, 2, 0]);
    let d0 = sb(F, 0, 1, 128, 4);
    let d1 = sb(F, 0, 1, 192, 4);
    r.memset(&d0, 9.0);
    r.memset(&d1, 9.0);
    r.vector(cp(&d0, &src, &pred, false));
    r.vector(cp(&d1, &src, &pred, true));
    let (o0, o1) = (r.out(&d0), r.out(&d1));
    let ran = r.ok();
    assert_eq!(
        ran.bits(&o0),
        [1f32.to_bits(), 9f32.to_bits(), 0x7FA0_0001, 9f32.to_bits()]
    );
    assert_eq!(ran.f32(&o1), [9.0, 2.0, 9.0, 4.0]);
}

#[test]
fn tensor_copy_predicated_leaves_unselected_elements_unwritten() {
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 1, 0, &[1.0, 2.0, 3.0, 4.0]);
    let pred = r.sbuf_bits(DType::U32, 0, 1, 64, &[0x100, 0, 1, 0]);
    let d = sb(F, 0, 1, 128, 4);
    r.vector(cp(&d, &src, &pred, false));
    // Elements 0 and 2 are readable, 1 and 3 were never written.
    let evens = with_free(&d, vec![[2, 2]]);
    let o = r.out(&evens);
    assert_eq!(r.ok().f32(&o), [1.0, 3.0]);
    let odd = with_free(
        &AccessPattern {
            offset: 132,
            ..d.clone()
        },
        vec![[2, 2]],
    );
    let i = r.vector(Op::TensorCopy(TensorCopy {
        dst: sb(F, 0, 1, 256, 2),
        src: odd,
    }));
    assert_err!(r.err(), i, Some("src"), ErrorKind::UninitializedRead { .. });
}

#[test]
fn tensor_copy_predicated_costs_and_rejections() {
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 1, 0, &[1.0; 100]);
    let pred = r.sbuf_bits(DType::U8, 0, 1, 512, &[1; 100]);
    r.vector(cp(&sb(F, 0, 1, 1024, 100), &src, &pred, false));
    assert!(close(r.ok().stats().est_ns.vector, ns(200)));

    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 1, 0, &[1.0]);
    let pred = r.sbuf(F, 0, 1, 64, &[1.0]);
    let i = r.vector(cp(&sb(F, 0, 1, 128, 1), &src, &pred, false));
    assert_err!(r.err(), i, Some("predicate"), ErrorKind::UnsupportedDType { .. });
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 1, 0, &[1.0]);
    let pred = r.sbuf_bits(DType::U8, 0, 1, 64, &[1]);
    let i = r.vector(cp(&sb(BF, 0, 1, 128, 1), &src, &pred, false));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::UnsupportedDType { .. });
    let mut r = Rig::new();
    let src = ps(F, 0, 1, 0, 1);
    let pred = ps(DType::U8, 0, 1, 64, 1);
    r.memset(&src, 1.0);
    r.memset(&pred, 1.0);
    let i = r.vector(cp(&sb(F, 0, 1, 128, 1), &src, &pred, false));
    assert_err!(r.err(), i, Some("src"), ErrorKind::Invalid(_));
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 1, 0, &[1.0, 2.0]);
    let pred = r.sbuf_bits(DType::U8, 0, 1, 64, &[1]);
    let i = r.vector(cp(&sb(F, 0, 1, 128, 2), &src, &pred, false));
    assert_err!(r.err(), i, Some("predicate"), ErrorKind::ShapeMismatch(_));
}

// ---------------------------------------------------------------------------------------------
// reciprocal, memset

#[test]
fn reciprocal_is_correctly_rounded_fp32() {
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[3.0, 0.0, -0.0, 4.0, f32::INFINITY]);
    let d = sb(F, 0, 1, 64, 5);
    r.vector(Op::Reciprocal(Reciprocal { dst: d.clone(), src: x }));
    let o = r.out(&d);
    let ran = r.ok();
    // 1/3 rounds to 0x3EAAAAAB (0.3333333432674408).
    assert_eq!(
        ran.bits(&o),
        [
            0x3EAA_AAAB,
            f32::INFINITY.to_bits(),
            f32::NEG_INFINITY.to_bits(),
            0x3E80_0000,
            0
        ]
    );
    // cost max(MIN_II, 8N) = 64 for N = 5.
    assert!(close(ran.stats().est_ns.vector, ns(64)));
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[2.0; 10]);
    r.vector(Op::Reciprocal(Reciprocal {
        dst: sb(F, 0, 1, 64, 10),
        src: x,
    }));
    assert!(close(r.ok().stats().est_ns.vector, ns(80)));
}

#[test]
fn memset_conversions() {
    let mut r = Rig::new();
    let f = sb(F, 0, 1, 0, 1);
    let b = sb(BF, 0, 1, 64, 1);
    let i = sb(DType::I32, 0, 1, 128, 1);
    let s = sb(DType::I8, 0, 1, 192, 2);
    r.memset(&f, 0.1);
    r.memset(&b, 1.0 / 3.0);
    r.memset(&i, 16_777_217.0);
    r.memset(&s, 300.0);
    let outs: Vec<String> = [&f, &b, &i, &s].iter().map(|a| r.out(a)).collect();
    let ran = r.ok();
    assert_eq!(ran.bits(&outs[0]), [0x3DCC_CCCD]);
    // f32(1/3) = 0x3EAAAAAB → bf16 0x3EAB (the dropped 0xAAAB is above half).
    assert_eq!(ran.bits(&outs[1]), [0x3EAB]);
    assert_eq!(ran.ints(&outs[2]), [16_777_217], "integers are set exactly");
    assert_eq!(ran.ints(&outs[3]), [127, 127], "saturated");

    let mut r = Rig::new();
    let i = r.memset(&sb(DType::I32, 0, 1, 0, 1), 0.5);
    assert_err!(r.err(), i, Some("dst"), ErrorKind::Invalid(_));
    // Cost: N/2 for zero into bf16, else N.
    let mut r = Rig::new();
    r.memset(&sb(BF, 0, 1, 0, 256), 0.0);
    assert!(close(r.ok().stats().est_ns.vector, ns(128)));
    let mut r = Rig::new();
    r.memset(&sb(BF, 0, 1, 0, 256), 1.0);
    assert!(close(r.ok().stats().est_ns.vector, ns(256)));
}

// ---------------------------------------------------------------------------------------------
// bn_stats / bn_aggr

#[test]
fn bn_stats_even_odd_statistics() {
    let mut r = Rig::new();
    // Partition 0: 1..5 — even (1 3 5): n 3, mean 3, M2 4+0+4 = 8; odd (2 4): n 2, mean 3, M2 2.
    // Partition 1: one element 7 — even (7): 1, 7, 0; odd: empty → 0, 0, 0.
    let x0 = r.sbuf(F, 0, 1, 0, &[1.0, 2.0, 3.0, 4.0, 5.0]);
    let x1 = r.sbuf(F, 32, 1, 0, &[7.0]);
    let d0 = sb(F, 0, 1, 64, 6);
    let d1 = sb(F, 32, 1, 64, 6);
    r.vector(Op::BnStats(BnStats {
        dst: d0.clone(),
        src: x0,
    }));
    r.vector(Op::BnStats(BnStats {
        dst: d1.clone(),
        src: x1,
    }));
    let (o0, o1) = (r.out(&d0), r.out(&d1));
    let ran = r.ok();
    assert_eq!(ran.f32(&o0), [3.0, 3.0, 8.0, 2.0, 3.0, 2.0]);
    assert_eq!(ran.f32(&o1), [1.0, 7.0, 0.0, 0.0, 0.0, 0.0]);
}

#[test]
fn bn_aggr_combines_with_chan_formula() {
    let mut r = Rig::new();
    // (3, 3, 8) + (2, 3, 2): the data 1..5 — mean 3, population variance 10/5 = 2.
    // (2, 1, 0) + (2, 3, 0): the data 1 1 3 3 — delta 2, r 1/2: mean 2, M2 = 2·2·2·½ = 4, var 1.
    // (0, 0, 0) + (1, 5, 0): empty tuples are skipped — mean 5, var 0.
    // (0, 0, 0) only: no data — NaN, NaN.
    let s = r.sbuf(
        F,
        0,
        4,
        0,
        &[
            3.0, 3.0, 8.0, 2.0, 3.0, 2.0, 2.0, 1.0, 0.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0, 1.0, 5.0, 0.0, 0.0, 0.0, 0.0,
            0.0, 0.0, 0.0,
        ],
    );
    let d = sb(F, 0, 4, 64, 2);
    r.vector(Op::BnAggr(BnAggr { dst: d.clone(), src: s }));
    let o = r.out(&d);
    let v = r.ok().f32(&o);
    assert_eq!(&v[..6], [3.0, 2.0, 2.0, 1.0, 5.0, 0.0]);
    assert!(v[6].is_nan() && v[7].is_nan());
}

#[test]
fn bn_stats_then_bn_aggr_gives_mean_and_population_variance() {
    let mut r = Rig::new();
    // 1..8: even (1 3 5 7) mean 4, M2 20; odd (2 4 6 8) mean 5, M2 20.
    // Chan: n 8, delta 1, r ½ → mean 4.5; M2 = 20 + 20 + 1·4·½ = 42; var 42/8 = 5.25.
    let x = r.sbuf(F, 0, 1, 0, &(1..=8).map(|v| v as f32).collect::<Vec<_>>());
    let st = sb(F, 0, 1, 64, 6);
    let d = sb(F, 0, 1, 128, 2);
    r.vector(Op::BnStats(BnStats {
        dst: st.clone(),
        src: x,
    }));
    r.vector(Op::BnAggr(BnAggr {
        dst: d.clone(),
        src: st.clone(),
    }));
    let (os, od) = (r.out(&st), r.out(&d));
    let ran = r.ok();
    assert_eq!(ran.f32(&os), [4.0, 4.0, 20.0, 4.0, 5.0, 20.0]);
    assert_eq!(ran.f32(&od), [4.5, 5.25]);
}

#[test]
fn bn_costs_and_rejections() {
    // bn_stats max(MIN_II, N); bn_aggr max(MIN_II, 13·N/3) with N = 30 → 130.
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0; 100]);
    r.vector(Op::BnStats(BnStats {
        dst: sb(F, 0, 1, 1024, 6),
        src: x,
    }));
    assert!(close(r.ok().stats().est_ns.vector, ns(100)));
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0; 30]);
    r.vector(Op::BnAggr(BnAggr {
        dst: sb(F, 0, 1, 1024, 2),
        src: x,
    }));
    assert!(close(r.ok().stats().est_ns.vector, ns(130)));

    let mut r = Rig::new();
    let i = r.vector(Op::BnStats(BnStats {
        dst: sb(F, 0, 1, 4096, 6),
        src: sb(F, 0, 1, 0, 513),
    }));
    assert_err!(
        r.err(),
        i,
        Some("src"),
        ErrorKind::FreeSizeLimit {
            size: 513,
            limit: 512,
            ..
        }
    );
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0; 4]);
    let i = r.vector(Op::BnStats(BnStats {
        dst: sb(F, 0, 1, 64, 5),
        src: x,
    }));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::ShapeMismatch(_));
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0; 4]);
    let i = r.vector(Op::BnStats(BnStats {
        dst: sb(DType::I32, 0, 1, 64, 6),
        src: x,
    }));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::UnsupportedDType { .. });
    let mut r = Rig::new();
    let i = r.vector(Op::BnStats(BnStats {
        dst: sb(F, 0, 1, 64, 6),
        src: sb(F, 0, 1, 0, 4),
    }));
    assert_err!(r.err(), i, Some("src"), ErrorKind::UninitializedRead { .. });
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0; 4]);
    let i = r.vector(Op::BnAggr(BnAggr {
        dst: sb(F, 0, 1, 64, 2),
        src: x,
    }));
    assert_err!(r.err(), i, Some("src"), ErrorKind::ShapeMismatch(_));
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0; 6]);
    let i = r.vector(Op::BnAggr(BnAggr {
        dst: sb(F, 0, 1, 64, 3),
        src: x,
    }));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::ShapeMismatch(_));
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0; 6]);
    let i = r.push(
        Engine::Gpsimd,
        Op::BnAggr(BnAggr {
            dst: sb(F, 0, 1, 64, 2),
            src: x,
        }),
    );
    assert_err!(r.err(), i, None, ErrorKind::WrongEngine { .. });
}

// ---------------------------------------------------------------------------------------------
// max8 / nc_find_index8 / nc_match_replace8

#[test]
fn max8_descending_with_duplicates() {
    let mut r = Rig::new();
    let x = r.sbuf(
        F,
        0,
        2,
        0,
        &[
            3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0, -8.0, -9.0,
        ],
    );
    let d = sb(F, 0, 2, 128, 8);
    r.vector(Op::Max8(Max8 { dst: d.clone(), src: x }));
    let o = r.out(&d);
    let ran = r.ok();
    assert_eq!(ran.f32(&o)[..8], [9.0, 6.0, 5.0, 5.0, 4.0, 3.0, 3.0, 2.0]);
    assert_eq!(ran.f32(&o)[8..], [0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0]);
}

#[test]
fn max8_nan_ranking_follows_the_nan_setting() {
    let vals = [1.0, f32::NAN, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &vals);
    let d = sb(F, 0, 1, 64, 8);
    r.vector(Op::Max8(Max8 { dst: d.clone(), src: x }));
    let o = r.out(&d);
    let v = r.ok().f32(&o);
    assert!(v[0].is_nan());
    assert_eq!(v[1..], [8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0]);
    r.config.numerics.nan_max_min = NanMaxMin::PreferNumber;
    assert_eq!(r.ok().f32(&o), [8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]);
}

#[test]
fn max8_rejections() {
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0; 7]);
    let i = r.vector(Op::Max8(Max8 {
        dst: sb(F, 0, 1, 64, 8),
        src: x,
    }));
    assert_err!(r.err(), i, Some("src"), ErrorKind::ShapeMismatch(_));
    let mut r = Rig::new();
    let i = r.vector(Op::Max8(Max8 {
        dst: sb(F, 0, 1, 128_000, 8),
        src: sb(F, 0, 1, 0, 16385),
    }));
    assert_err!(
        r.err(),
        i,
        Some("src"),
        ErrorKind::FreeSizeLimit {
            size: 16385,
            limit: 16384,
            ..
        }
    );
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0; 9]);
    let i = r.vector(Op::Max8(Max8 {
        dst: sb(F, 0, 1, 64, 7),
        src: x,
    }));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::ShapeMismatch(_));
}

#[test]
fn find_index8_first_occurrences_duplicates_and_sentinel() {
    let mut r = Rig::new();
    let data = r.sbuf(F, 0, 1, 0, &[5.0, 3.0, 5.0, 5.0, 2.0, 7.0, -0.0, 1.0]);
    let vals = r.sbuf(F, 0, 1, 64, &[5.0, 5.0, 3.0, 0.0, 7.0, 5.0, 9.0, 5.0]);
    let d32 = sb(DType::U32, 0, 1, 128, 8);
    let d16 = sb(DType::U16, 0, 1, 192, 8);
    r.vector(Op::FindIndex8(FindIndex8 {
        dst: d32.clone(),
        data: data.clone(),
        vals: vals.clone(),
    }));
    r.vector(Op::FindIndex8(FindIndex8 {
        dst: d16.clone(),
        data,
        vals,
    }));
    let (o32, o16) = (r.out(&d32), r.out(&d16));
    let ran = r.ok();
    // 5 → 0, then 2, then 3 (successive occurrences); 3 → 1; 0 matches −0 at 6; 7 → 5;
    // 9 absent; the fourth 5 has no occurrence left.
    assert_eq!(ran.bits(&o32), [0, 2, 1, 6, 5, 3, 0xFFFF_FFFF, 0xFFFF_FFFF]);
    assert_eq!(ran.bits(&o16), [0, 2, 1, 6, 5, 3, 0xFFFF, 0xFFFF]);
}

#[test]
fn find_index8_rejections() {
    let mut r = Rig::new();
    let data = r.sbuf(F, 0, 1, 0, &[1.0; 8]);
    let vals = r.sbuf(F, 0, 1, 64, &[1.0; 8]);
    let i = r.vector(Op::FindIndex8(FindIndex8 {
        dst: sb(F, 0, 1, 128, 8),
        data: data.clone(),
        vals: vals.clone(),
    }));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::UnsupportedDType { .. });
    let mut r = Rig::new();
    let data = r.sbuf(F, 0, 1, 0, &[1.0; 8]);
    let vals = r.sbuf(F, 0, 1, 64, &[1.0; 7]);
    let i = r.vector(Op::FindIndex8(FindIndex8 {
        dst: sb(DType::U32, 0, 1, 128, 8),
        data,
        vals,
    }));
    assert_err!(r.err(), i, Some("vals"), ErrorKind::ShapeMismatch(_));
    let mut r = Rig::new();
    let vals = r.sbuf(F, 0, 1, 64, &[1.0; 8]);
    let i = r.vector(Op::FindIndex8(FindIndex8 {
        dst: sb(DType::U32, 0, 1, 128, 8),
        data: sb(F, 0, 1, 256, 16385),
        vals,
    }));
    assert_err!(r.err(), i, Some("data"), ErrorKind::FreeSizeLimit { .. });
}

#[test]
fn match_replace8_processes_values_from_last_to_first() {
    let mut r = Rig::new();
    let data = r.sbuf(F, 0, 1, 0, &[1.0, 9.0, 9.0, 5.0, 9.0, 2.0, 8.0, 8.0, 3.0, 0.0]);
    let vals = r.sbuf(F, 0, 1, 64, &[9.0, 9.0, 8.0, 5.0, 4.0, 9.0, 8.0, 1.0]);
    let d = sb(F, 0, 1, 128, 10);
    let idx = sb(DType::U32, 0, 1, 192, 8);
    r.vector(Op::MatchReplace8(MatchReplace8 {
        dst: d.clone(),
        data,
        vals,
        imm: -1.0,
        dst_idx: Some(idx.clone()),
    }));
    let (od, oi) = (r.out(&d), r.out(&idx));
    let ran = r.ok();
    // k = 7: 1 → 0; k = 6: 8 → 6; k = 5: 9 → 1; k = 4: 4 absent; k = 3: 5 → 3; k = 2: 8 → 7;
    // k = 1: 9 → 2; k = 0: 9 → 4.
    assert_eq!(ran.bits(&oi), [4, 2, 7, 3, 0xFFFF_FFFF, 1, 6, 0]);
    assert_eq!(ran.f32(&od), [-1.0, -1.0, -1.0, -1.0, -1.0, 2.0, -1.0, -1.0, 3.0, 0.0]);
}

#[test]
fn match_replace8_bit_exact_untouched_elements_and_imm_equal_to_value() {
    let mut r = Rig::new();
    // bf16 data keeps a NaN payload it does not replace; imm == the value does not re-match.
    let data = r.sbuf_bits(BF, 0, 1, 0, &[0x7F81, 0x4110, 0x4110, 0x3F80]); // NaN, 9, 9, 1
    let vals = r.sbuf(F, 0, 1, 64, &[9.0; 8]);
    let d = sb(BF, 0, 1, 128, 4);
    let idx = sb(DType::U16, 0, 1, 192, 8);
    r.vector(Op::MatchReplace8(MatchReplace8 {
        dst: d.clone(),
        data,
        vals,
        imm: 9.0,
        dst_idx: Some(idx.clone()),
    }));
    let (od, oi) = (r.out(&d), r.out(&idx));
    let ran = r.ok();
    assert_eq!(ran.bits(&od), [0x7F81, 0x4110, 0x4110, 0x3F80]);
    assert_eq!(ran.bits(&oi), [0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 2, 1]);
}

#[test]
fn max8_then_match_replace8_is_a_top8_pass() {
    // The top-k idiom: max8 finds the 8 largest, match_replace8 knocks them out with -inf.
    let mut r = Rig::new();
    let vals: Vec<f32> = (0..16).map(|k| ((k * 7) % 16) as f32).collect(); // a permutation of 0..16
    let x = r.sbuf(F, 0, 1, 0, &vals);
    let m = sb(F, 0, 1, 128, 8);
    let d = sb(F, 0, 1, 192, 16);
    r.vector(Op::Max8(Max8 {
        dst: m.clone(),
        src: x.clone(),
    }));
    r.vector(Op::MatchReplace8(MatchReplace8 {
        dst: d.clone(),
        data: x,
        vals: m.clone(),
        imm: f64::NEG_INFINITY,
        dst_idx: None,
    }));
    let m2 = sb(F, 0, 1, 320, 8);
    r.vector(Op::Max8(Max8 {
        dst: m2.clone(),
        src: d,
    }));
    let (o1, o2) = (r.out(&m), r.out(&m2));
    let ran = r.ok();
    assert_eq!(ran.f32(&o1), [15.0, 14.0, 13.0, 12.0, 11.0, 10.0, 9.0, 8.0]);
    assert_eq!(ran.f32(&o2), [7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0]);
}

#[test]
fn match_replace8_rejections() {
    let mut r = Rig::new();
    let data = r.sbuf(F, 0, 1, 0, &[1.0; 8]);
    let vals = r.sbuf(F, 0, 1, 64, &[1.0; 8]);
    let i = r.vector(Op::MatchReplace8(MatchReplace8 {
        dst: sb(F, 0, 1, 128, 8),
        data,
        vals,
        imm: 0.0,
        dst_idx: Some(sb(DType::I8, 0, 1, 192, 8)),
    }));
    assert_err!(r.err(), i, Some("dst_idx"), ErrorKind::UnsupportedDType { .. });
    let mut r = Rig::new();
    let data = r.sbuf(F, 0, 1, 0, &[1.0; 8]);
    let vals = r.sbuf(F, 0, 1, 64, &[1.0; 8]);
    let i = r.vector(Op::MatchReplace8(MatchReplace8 {
        dst: sb(F, 0, 1, 128, 9),
        data,
        vals,
        imm: 0.0,
        dst_idx: None,
    }));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::ShapeMismatch(_));
}

// ---------------------------------------------------------------------------------------------
// select_reduce

fn sel(
    dst: &AccessPattern,
    pred: &AccessPattern,
    t: &AccessPattern,
    f: ScalarOperand,
    rev: bool,
    res: Option<&AccessPattern>,
) -> Op {
    Op::SelectReduce(SelectReduce {
        dst: dst.clone(),
        predicate: pred.clone(),
        on_true: t.clone(),
        on_false: f,
        reverse_pred: rev,
        reduce_res: res.cloned(),
    })
}

#[test]
fn select_reduce_semantics() {
    let mut r = Rig::new();
    let pred = r.sbuf_bits(DType::U8, 0, 2, 0, &[1, 0, 3, 0, 0, 0, 1, 1]);
    let t = r.sbuf(F, 0, 2, 64, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let f = r.sbuf(F, 0, 2, 128, &[-100.0, 50.0]);
    let d0 = sb(F, 0, 2, 192, 4);
    let r0 = sb(F, 0, 2, 256, 1);
    let d1 = sb(BF, 0, 2, 320, 4);
    let r1 = sb(F, 0, 2, 384, 1);
    r.vector(sel(&d0, &pred, &t, ScalarOperand::Tile(f), false, Some(&r0)));
    r.vector(sel(&d1, &pred, &t, ScalarOperand::Imm(-100.0), true, Some(&r1)));
    let outs: Vec<String> = [&d0, &r0, &d1, &r1].iter().map(|a| r.out(a)).collect();
    let ran = r.ok();
    assert_eq!(ran.f32(&outs[0]), [1.0, -100.0, 3.0, -100.0, 50.0, 50.0, 7.0, 8.0]);
    assert_eq!(ran.f32(&outs[1]), [3.0, 50.0]);
    assert_eq!(ran.f32(&outs[2]), [-100.0, 2.0, -100.0, 4.0, 5.0, 6.0, -100.0, -100.0]);
    assert_eq!(ran.f32(&outs[3]), [4.0, 6.0]);
}

#[test]
fn select_reduce_rejections() {
    let mut r = Rig::new();
    let pred = r.sbuf(F, 0, 1, 0, &[1.0]);
    let t = r.sbuf(F, 0, 1, 64, &[1.0]);
    let i = r.vector(sel(
        &sb(F, 0, 1, 128, 1),
        &pred,
        &t,
        ScalarOperand::Imm(0.0),
        false,
        None,
    ));
    assert_err!(r.err(), i, Some("predicate"), ErrorKind::UnsupportedDType { .. });
    let mut r = Rig::new();
    let pred = r.sbuf_bits(DType::U8, 0, 1, 0, &[1]);
    let t = r.sbuf_bits(DType::I32, 0, 1, 64, &[1]);
    let i = r.vector(sel(
        &sb(F, 0, 1, 128, 1),
        &pred,
        &t,
        ScalarOperand::Imm(0.0),
        false,
        None,
    ));
    assert_err!(r.err(), i, Some("on_true"), ErrorKind::UnsupportedDType { .. });
    let mut r = Rig::new();
    let pred = r.sbuf_bits(DType::U8, 0, 1, 0, &[1, 1]);
    let t = r.sbuf(F, 0, 1, 64, &[1.0, 2.0]);
    let i = r.vector(sel(
        &sb(F, 0, 1, 128, 2),
        &pred,
        &t,
        ScalarOperand::Imm(0.0),
        false,
        Some(&sb(F, 0, 1, 192, 2)),
    ));
    assert_err!(r.err(), i, Some("reduce_res"), ErrorKind::ShapeMismatch(_));
    let mut r = Rig::new();
    let pred = ps(DType::U8, 0, 1, 0, 1);
    let t = ps(F, 0, 1, 64, 1);
    r.memset(&pred, 1.0);
    r.memset(&t, 1.0);
    let i = r.vector(sel(
        &sb(F, 0, 1, 128, 1),
        &pred,
        &t,
        ScalarOperand::Imm(0.0),
        false,
        None,
    ));
    assert_err!(r.err(), i, Some("predicate"), ErrorKind::Invalid(_));
}

// ---------------------------------------------------------------------------------------------
// The generator: set_rng_seed, rng, dropout

#[test]
fn rng_draws_are_pcg32_outputs_in_partition_major_order() {
    let mut r = Rig::new();
    r.vector(Op::SetRngSeed(SetRngSeed {
        seed: ScalarOperand::Imm(1234.0),
    }));
    let a = sb(DType::U32, 0, 2, 0, 3);
    let b = sb(DType::U8, 0, 1, 64, 4);
    r.vector(Op::Rng(Rng { dst: a.clone() }));
    r.vector(Op::Rng(Rng { dst: b.clone() }));
    let (oa, ob) = (r.out(&a), r.out(&b));
    let ran = r.ok();
    let mut s = rng_state_for_seed(1234);
    let want_a: Vec<u32> = (0..6).map(|_| rng_next(&mut s)).collect();
    let want_b: Vec<u32> = (0..4).map(|_| rng_next(&mut s) & 0xFF).collect();
    assert_eq!(ran.bits(&oa), want_a);
    assert_eq!(ran.bits(&ob), want_b, "the stream continues; u8 keeps the low 8 bits");
    assert!(want_a.iter().collect::<std::collections::HashSet<_>>().len() == 6);
}

#[test]
fn rng_default_state_and_seed_from_a_tile() {
    let mut r = Rig::new();
    let a = sb(DType::I32, 0, 1, 0, 2);
    r.vector(Op::Rng(Rng { dst: a.clone() }));
    let seed = r.sbuf_bits(DType::U32, 0, 1, 64, &[0xDEAD_BEEF]);
    r.vector(Op::SetRngSeed(SetRngSeed {
        seed: ScalarOperand::Tile(seed),
    }));
    let b = sb(DType::I32, 0, 1, 128, 2);
    r.vector(Op::Rng(Rng { dst: b.clone() }));
    // Negative immediates wrap: −1 seeds like 0xFFFFFFFF.
    r.vector(Op::SetRngSeed(SetRngSeed {
        seed: ScalarOperand::Imm(-1.0),
    }));
    let c = sb(DType::I32, 0, 1, 192, 1);
    r.vector(Op::Rng(Rng { dst: c.clone() }));
    let (oa, ob, oc) = (r.out(&a), r.out(&b), r.out(&c));
    let ran = r.ok();
    let mut s = DEFAULT_RNG_SEED;
    assert_eq!(ran.bits(&oa), [rng_next(&mut s), rng_next(&mut s)]);
    let mut s = rng_state_for_seed(0xDEAD_BEEF);
    assert_eq!(ran.bits(&ob), [rng_next(&mut s), rng_next(&mut s)]);
    let mut s = rng_state_for_seed(0xFFFF_FFFF);
    assert_eq!(ran.bits(&oc), [rng_next(&mut s)]);
}

#[test]
fn rng_and_seed_rejections() {
    let mut r = Rig::new();
    let i = r.vector(Op::Rng(Rng { dst: sb(F, 0, 1, 0, 2) }));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::UnsupportedDType { .. });
    let mut r = Rig::new();
    let i = r.vector(Op::Rng(Rng {
        dst: sb(DType::Bool, 0, 1, 0, 2),
    }));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::UnsupportedDType { .. });
    let mut r = Rig::new();
    let i = r.push(
        Engine::Gpsimd,
        Op::Rng(Rng {
            dst: sb(DType::U32, 0, 1, 0, 2),
        }),
    );
    assert_err!(r.err(), i, None, ErrorKind::WrongEngine { .. });
    for v in [4_294_967_296.0, -2_147_483_649.0] {
        let mut r = Rig::new();
        let i = r.vector(Op::SetRngSeed(SetRngSeed {
            seed: ScalarOperand::Imm(v),
        }));
        assert_err!(r.err(), i, Some("seed"), ErrorKind::Invalid(_));
    }
    let mut r = Rig::new();
    let i = r.vector(Op::SetRngSeed(SetRngSeed {
        seed: ScalarOperand::Imm(1.5),
    }));
    assert_err!(r.err(), i, Some("seed"), ErrorKind::Invalid(_));
    let mut r = Rig::new();
    let t = r.sbuf(F, 0, 1, 0, &[1.0]);
    let i = r.vector(Op::SetRngSeed(SetRngSeed {
        seed: ScalarOperand::Tile(t),
    }));
    assert_err!(r.err(), i, Some("seed"), ErrorKind::UnsupportedDType { .. });
    let mut r = Rig::new();
    let t = r.sbuf_bits(DType::U32, 0, 2, 0, &[1, 2]);
    let i = r.vector(Op::SetRngSeed(SetRngSeed {
        seed: ScalarOperand::Tile(t),
    }));
    assert_err!(r.err(), i, Some("seed"), ErrorKind::ShapeMismatch(_));
}

#[test]
fn dropout_uses_the_generator_threshold_rule() {
    let n = 512;
    let mut r = Rig::new();
    let vals: Vec<f32> = (0..2 * n).map(|k| k as f32 + 1.0).collect();
    let x = r.sbuf(F, 0, 2, 0, &vals);
    let probs = r.sbuf(F, 0, 2, 4096, &[0.25, 0.75]);
    r.vector(Op::SetRngSeed(SetRngSeed {
        seed: ScalarOperand::Imm(7.0),
    }));
    let d = sb(F, 0, 2, 8192, n);
    r.vector(Op::Dropout(Dropout {
        dst: d.clone(),
        src: x,
        prob: ScalarOperand::Tile(probs),
    }));
    let o = r.out(&d);
    let got = r.ok().f32(&o);
    let mut s = rng_state_for_seed(7);
    let mut dropped = [0usize; 2];
    for (k, &g) in got.iter().enumerate() {
        let p = if k < n { 0.25 } else { 0.75 };
        let u = rng_next(&mut s);
        let drop = (u as f64) < p * 4_294_967_296.0;
        assert_eq!(g, if drop { 0.0 } else { vals[k] }, "element {k}");
        dropped[k / n] += drop as usize;
    }
    // The draws are uniform: about a quarter and three quarters dropped.
    assert!((96..=160).contains(&dropped[0]), "{dropped:?}");
    assert!((352..=416).contains(&dropped[1]), "{dropped:?}");
}

#[test]
fn dropout_extremes_determinism_and_rejections() {
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0, -2.0, 3.0, 4.0]);
    let d0 = sb(F, 0, 1, 64, 4);
    let d1 = sb(F, 0, 1, 128, 4);
    r.vector(Op::Dropout(Dropout {
        dst: d0.clone(),
        src: x.clone(),
        prob: ScalarOperand::Imm(0.0),
    }));
    r.vector(Op::Dropout(Dropout {
        dst: d1.clone(),
        src: x.clone(),
        prob: ScalarOperand::Imm(1.0),
    }));
    let (o0, o1) = (r.out(&d0), r.out(&d1));
    let ran = r.ok();
    assert_eq!(ran.f32(&o0), [1.0, -2.0, 3.0, 4.0]);
    assert_eq!(ran.bits(&o1), [0, 0, 0, 0], "dropped elements are +0");
    // Same seed, same mask; another seed, another mask (64 elements at p = 0.5).
    let run = |seed: f64| {
        let mut r = Rig::new();
        let x = r.sbuf(F, 0, 1, 0, &[1.0; 64]);
        r.vector(Op::SetRngSeed(SetRngSeed {
            seed: ScalarOperand::Imm(seed),
        }));
        let d = sb(F, 0, 1, 512, 64);
        r.vector(Op::Dropout(Dropout {
            dst: d.clone(),
            src: x,
            prob: ScalarOperand::Imm(0.5),
        }));
        let o = r.out(&d);
        r.ok().f32(&o)
    };
    assert_eq!(run(3.0), run(3.0));
    assert_ne!(run(3.0), run(4.0));

    for p in [-0.1, 1.5, f64::NAN] {
        let mut r = Rig::new();
        let x = r.sbuf(F, 0, 1, 0, &[1.0]);
        let i = r.vector(Op::Dropout(Dropout {
            dst: sb(F, 0, 1, 64, 1),
            src: x,
            prob: ScalarOperand::Imm(p),
        }));
        assert_err!(r.err(), i, Some("prob"), ErrorKind::Invalid(_));
    }
    let mut r = Rig::new();
    let x = r.sbuf(F, 0, 1, 0, &[1.0]);
    let i = r.vector(Op::Dropout(Dropout {
        dst: sb(F, 0, 1, 64, 2),
        src: x,
        prob: ScalarOperand::Imm(0.5),
    }));
    assert_err!(r.err(), i, Some("src"), ErrorKind::ShapeMismatch(_));
}

// ---------------------------------------------------------------------------------------------
// nc_stream_shuffle

#[test]
fn stream_shuffle_per_quadrant_with_unchanged_lanes() {
    let mut r = Rig::new();
    let vals: Vec<f32> = (0..64 * 2).map(|k| k as f32).collect(); // partition p holds 2p, 2p+1
    let src = r.sbuf(F, 0, 64, 0, &vals);
    let dst = sb(F, 0, 64, 64, 2);
    r.memset(&dst, -1.0);
    // Reverse each quadrant except lane 5 (255) and lanes 30, 31 (beyond a 30-entry mask).
    let mut mask: Vec<u8> = (0..30).map(|k| 31 - k as u8).collect();
    mask[5] = 255;
    r.vector(Op::StreamShuffle(StreamShuffle {
        dst: dst.clone(),
        src,
        mask,
    }));
    let o = r.out(&dst);
    let got = r.ok().f32(&o);
    for p in 0..64 {
        let (q, k) = (p / 32, p % 32);
        let want = if k == 5 || k >= 30 {
            [-1.0, -1.0]
        } else {
            let s = q * 32 + 31 - k;
            [2.0 * s as f32, 2.0 * s as f32 + 1.0]
        };
        assert_eq!(got[2 * p..2 * p + 2], want, "partition {p}");
    }
}

#[test]
fn stream_shuffle_bit_copy_across_quadrants_and_rejections() {
    let mut r = Rig::new();
    let src = r.sbuf_bits(BF, 32, 4, 0, &[0x7F81, 0x0001, 0x8000, 0x3F80]);
    let dst = sb(BF, 96, 4, 0, 1);
    r.vector(Op::StreamShuffle(StreamShuffle {
        dst: dst.clone(),
        src,
        mask: vec![3, 2, 1, 0],
    }));
    let o = r.out(&dst);
    assert_eq!(r.ok().bits(&o), [0x3F80, 0x8000, 0x0001, 0x7F81]);

    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 4, 0, &[1.0; 4]);
    let i = r.vector(Op::StreamShuffle(StreamShuffle {
        dst: sb(F, 0, 4, 64, 1),
        src,
        mask: vec![0, 1, 4, 3],
    }));
    assert_err!(r.err(), i, Some("mask"), ErrorKind::Invalid(_));
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 4, 0, &[1.0; 4]);
    let i = r.vector(Op::StreamShuffle(StreamShuffle {
        dst: sb(F, 0, 4, 64, 1),
        src,
        mask: vec![0; 33],
    }));
    assert_err!(r.err(), i, Some("mask"), ErrorKind::Invalid(_));
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 4, 0, &[1.0; 4]);
    let i = r.vector(Op::StreamShuffle(StreamShuffle {
        dst: sb(BF, 0, 4, 64, 1),
        src,
        mask: vec![0],
    }));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::UnsupportedDType { .. });
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 4, 0, &[1.0; 4]);
    let i = r.vector(Op::StreamShuffle(StreamShuffle {
        dst: sb(F, 16, 4, 64, 1),
        src,
        mask: vec![0],
    }));
    assert_err!(
        r.err(),
        i,
        Some("dst"),
        ErrorKind::StartPartition { start: 16, count: 4 }
    );
}

// ---------------------------------------------------------------------------------------------
// VectorE transpose

#[test]
fn transpose32_is_bit_exact() {
    let mut r = Rig::new();
    // src [3 × 4]: element (k, j) = 0x100·k + j, plus a NaN payload at (2, 3).
    let mut bits: Vec<u32> = (0..3).flat_map(|k| (0..4).map(move |j| 0x100 * k + j)).collect();
    bits[11] = 0x7F81;
    let src = r.sbuf_bits(BF, 0, 3, 0, &bits);
    let dst = ps(BF, 0, 4, 0, 3);
    r.push(Engine::Vector, Op::NcTranspose(NcTranspose { dst: dst.clone(), src }));
    let o = r.out(&dst);
    assert_eq!(
        r.ok().bits(&o),
        [
            0x000, 0x100, 0x200, 0x001, 0x101, 0x201, 0x002, 0x102, 0x202, 0x003, 0x103, 0x7F81
        ]
    );
}

#[test]
fn transpose32_full_block_and_rejections() {
    let mut r = Rig::new();
    let vals: Vec<f32> = (0..1024).map(|k| k as f32).collect();
    let src = r.sbuf(F, 0, 32, 0, &vals);
    let dst = sb(F, 32, 32, 4096, 32);
    r.vector(Op::NcTranspose(NcTranspose { dst: dst.clone(), src }));
    let o = r.out(&dst);
    let ran = r.ok();
    let got = ran.f32(&o);
    for j in 0..32 {
        for k in 0..32 {
            assert_eq!(got[j * 32 + k], (k * 32 + j) as f32);
        }
    }
    assert!(close(ran.stats().est_ns.vector, ns(64)));

    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 33, 0, &[1.0; 33]);
    let i = r.vector(Op::NcTranspose(NcTranspose {
        dst: sb(F, 0, 1, 64, 33),
        src,
    }));
    assert_err!(r.err(), i, Some("src"), ErrorKind::ShapeMismatch(_));
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 2, 0, &[1.0; 6]);
    let i = r.vector(Op::NcTranspose(NcTranspose {
        dst: sb(F, 0, 2, 64, 3),
        src,
    }));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::ShapeMismatch(_));
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 2, 0, &[1.0; 6]);
    let i = r.vector(Op::NcTranspose(NcTranspose {
        dst: sb(BF, 0, 3, 64, 2),
        src,
    }));
    assert_err!(r.err(), i, Some("dst"), ErrorKind::UnsupportedDType { .. });
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 2, 0, &[1.0; 6]);
    let i = r.push(
        Engine::Gpsimd,
        Op::NcTranspose(NcTranspose {
            dst: sb(F, 0, 3, 64, 2),
            src,
        }),
    );
    assert_err!(r.err(), i, None, ErrorKind::WrongEngine { .. });
}

// ---------------------------------------------------------------------------------------------
// No panics on hostile operands.

#[test]
fn hostile_operands_are_errors_not_panics() {
    let huge = |mem: MemSpace| AccessPattern {
        mem,
        dtype: F,
        start_partition: 0,
        partitions: 1,
        partition_step: 0,
        offset: u64::MAX - 3,
        free: vec![
            [i64::MAX, i64::MAX],
            [i64::MIN, 3],
            [1, 1 << 40],
            [1, 1 << 40],
            [1, 1 << 40],
        ],
    };
    let a = huge(MemSpace::Sbuf);
    let ops = vec![
        tt(&a, &a, &a, AluOp::Add),
        Op::TensorReduce(TensorReduce {
            dst: a.clone(),
            src: a.clone(),
            op: AluOp::Add,
            axes: 5,
            negate: false,
        }),
        Op::TensorReduce(TensorReduce {
            dst: a.clone(),
            src: a.clone(),
            op: AluOp::Add,
            axes: 2,
            negate: false,
        }),
        scan(&a, &a, &a, ScalarOperand::Tile(a.clone()), AluOp::Add, AluOp::Add),
        Op::BnStats(BnStats {
            dst: a.clone(),
            src: a.clone(),
        }),
        Op::BnAggr(BnAggr {
            dst: a.clone(),
            src: a.clone(),
        }),
        Op::Max8(Max8 {
            dst: a.clone(),
            src: a.clone(),
        }),
        Op::FindIndex8(FindIndex8 {
            dst: a.clone(),
            data: a.clone(),
            vals: a.clone(),
        }),
        Op::MatchReplace8(MatchReplace8 {
            dst: a.clone(),
            data: a.clone(),
            vals: a.clone(),
            imm: 0.0,
            dst_idx: Some(a.clone()),
        }),
        sel(&a, &a, &a, ScalarOperand::Tile(a.clone()), false, Some(&a)),
        Op::Dropout(Dropout {
            dst: a.clone(),
            src: a.clone(),
            prob: ScalarOperand::Imm(0.5),
        }),
        Op::Rng(Rng {
            dst: AccessPattern {
                dtype: DType::U32,
                ..a.clone()
            },
        }),
        Op::StreamShuffle(StreamShuffle {
            dst: a.clone(),
            src: a.clone(),
            mask: vec![255; 32],
        }),
        Op::NcTranspose(NcTranspose {
            dst: a.clone(),
            src: a.clone(),
        }),
        cp(&a, &a, &a, false),
        Op::Memset(Memset {
            dst: a.clone(),
            value: 1.0,
        }),
    ];
    for op in ops {
        let mut r = Rig::new();
        r.vector(op.clone());
        assert!(r.run().is_err(), "{op:?}");
        let mut r = Rig::new();
        let b = AccessPattern {
            partitions: 1000,
            start_partition: usize::MAX - 10,
            ..a.clone()
        };
        r.vector(match op {
            Op::Memset(m) => Op::Memset(Memset { dst: b, ..m }),
            other => other,
        });
        assert!(r.run().is_err());
    }
}

// ---------------------------------------------------------------------------------------------
// docs/isa.md stays true: its JSON examples parse, every opcode has one, the program runs.

#[test]
fn isa_doc_examples_parse_and_cover_every_opcode() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/isa.md");
    let doc = std::fs::read_to_string(&path).expect("docs/isa.md");
    let mut opcodes = std::collections::BTreeSet::new();
    let mut programs = Vec::new();
    for block in doc.split("```json\n").skip(1) {
        let json = block.split("\n```").next().unwrap_or("");
        if json.trim_start().starts_with("{\"target\"") {
            programs.push(Program::from_json(json).unwrap_or_else(|e| panic!("{e}: {json}")));
        } else {
            let inst: Instruction = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
            assert!(inst.op.engines().contains(&inst.engine), "{json}");
            opcodes.insert(inst.op.name());
        }
    }
    let all = [
        "nc_matmul",
        "nc_transpose",
        "tensor_tensor",
        "tensor_scalar",
        "scalar_tensor_tensor",
        "tensor_reduce",
        "tensor_tensor_scan",
        "tensor_scalar_reduce",
        "tensor_copy",
        "tensor_copy_predicated",
        "reciprocal",
        "bn_stats",
        "bn_aggr",
        "max8",
        "nc_find_index8",
        "nc_match_replace8",
        "memset",
        "select_reduce",
        "dropout",
        "rng",
        "set_rng_seed",
        "nc_stream_shuffle",
        "activation",
        "iota",
        "affine_select",
        "local_gather",
        "nc_n_gather",
        "tensor_partition_reduce",
        "dma_copy",
        "tensor_copy_dynamic_src",
        "tensor_copy_dynamic_dst",
        "sequence_bounds",
        "dma_transpose",
        "range_select",
    ];
    for name in all {
        assert!(opcodes.contains(name), "docs/isa.md has no JSON example of {name}");
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/isa.md has no section on {name}"
        );
    }
    assert_eq!(programs.len(), 1);
    let mut inputs = std::collections::BTreeMap::new();
    inputs.insert("x".to_string(), HostTensor::from_f32(&[4, 8], &[0.0; 32]));
    let run = Executor::new(TargetName::Trn1)
        .run(&programs[0], &inputs)
        .expect("the example program runs");
    assert_eq!(run.outputs["y"].to_f32(), vec![1.0; 32]);
}
