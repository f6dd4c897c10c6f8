//! VectorE (DVE) instructions. Several of them also run on GpSimdE (by the instruction's engine
//! tag); where GpSimd differs — native exact int32 arithmetic, no PSUM — it says so here.
//!
//! Arithmetic: inputs converted to fp32 on read, math in fp32, cast to the destination dtype on
//! write. Bitvec ops: raw bits of integer operands, no casting.

use super::alu::{apply_bits, apply_f32, apply_int};
use super::{Ctx, same_shape, unimplemented};
use crate::dtype::DType;
use crate::error::{AtOperand, ErrorKind, OpResult};
use crate::mem::{AccessPattern, MemSpace};
use crate::program::*;

/// Seed of the VectorE generator before any `set_rng_seed`.
pub const DEFAULT_RNG_SEED: u64 = 0x5EED_0000_0000_0001;

fn is_int32(d: DType) -> bool {
    matches!(d, DType::I32 | DType::U32)
}

/// Bit width used by a bitvec op writing `dst`.
fn bit_width(dst: &AccessPattern) -> u32 {
    dst.dtype.size() as u32 * 8
}

fn require_int(operand: &str, ap: &AccessPattern, op: AluOp) -> OpResult<()> {
    if ap.dtype.is_float() {
        return Err(ErrorKind::UnsupportedDType {
            dtype: ap.dtype.name(),
            why: format!("bitvec operator {} takes integer operands only", op.name()),
        })
        .at(operand);
    }
    Ok(())
}

fn not_both_psum(a_name: &str, a: &AccessPattern, b: &AccessPattern) -> OpResult<()> {
    if a.mem == MemSpace::Psum && b.mem == MemSpace::Psum {
        return Err(ErrorKind::Invalid("both inputs in PSUM: at most one input may be in PSUM".into())).at(a_name);
    }
    Ok(())
}

/// `dst = in0 op in1`.
///
/// * bitvec `op`: integer operands, raw bits (VectorE only).
/// * GpSimd with int32/uint32 operands and destination: exact integer arithmetic (the hardware's
///   32-bit integer add/multiply lives only on GpSimd).
/// * otherwise fp32 arithmetic. `pow` is GpSimd-only.
pub fn tensor_tensor(ctx: &mut Ctx, i: &TensorTensor) -> OpResult<()> {
    same_shape("dst", &i.dst, "in0", &i.in0)?;
    same_shape("dst", &i.dst, "in1", &i.in1)?;
    not_both_psum("in0", &i.in0, &i.in1)?;
    if i.op == AluOp::Pow && ctx.engine != Engine::Gpsimd {
        return Err(ErrorKind::WrongEngine { engine: ctx.engine.name(), opcode: "tensor_tensor(pow)" }.into());
    }
    let n = i.dst.num_elems();
    if i.op.is_bitvec() {
        if ctx.engine != Engine::Vector {
            return Err(ErrorKind::WrongEngine { engine: ctx.engine.name(), opcode: "bitvec tensor_tensor" }.into());
        }
        require_int("in0", &i.in0, i.op)?;
        require_int("in1", &i.in1, i.op)?;
        require_int("dst", &i.dst, i.op)?;
        let a = ctx.read_bits("in0", &i.in0)?;
        let b = ctx.read_bits("in1", &i.in1)?;
        let w = bit_width(&i.dst);
        let out: Vec<u32> = a.iter().zip(&b).map(|(&x, &y)| apply_bits(i.op, x, y, w)).collect();
        ctx.write_bits("dst", &i.dst, &out)?;
    } else if ctx.engine == Engine::Gpsimd && is_int32(i.in0.dtype) && is_int32(i.in1.dtype) && is_int32(i.dst.dtype)
    {
        let a = ctx.read_i64("in0", &i.in0)?;
        let b = ctx.read_i64("in1", &i.in1)?;
        let out = a.iter().zip(&b).map(|(&x, &y)| apply_int(i.op, x, y)).collect::<Result<Vec<_>, _>>().at("dst")?;
        let bits: Vec<u32> = out.iter().map(|&v| i.dst.dtype.wrap_i64(v)).collect();
        ctx.write_bits("dst", &i.dst, &bits)?;
    } else {
        let a = ctx.read_f32("in0", &i.in0)?;
        let b = ctx.read_f32("in1", &i.in1)?;
        let nm = *ctx.numerics;
        let out: Vec<f32> = a.iter().zip(&b).map(|(&x, &y)| apply_f32(i.op, x, y, &nm)).collect();
        ctx.write_f32("dst", &i.dst, &out)?;
    }
    ctx.stats.flops += n as u64;
    let per_partition = i.dst.free_elems();
    let fast = i.in0.dtype == DType::Bf16
        && i.in1.dtype == DType::Bf16
        && matches!(i.op, AluOp::Add | AluOp::Multiply | AluOp::Subtract);
    let psum = i.in0.mem == MemSpace::Psum || i.in1.mem == MemSpace::Psum;
    ctx.cost_stream(if fast || psum { per_partition } else { 2 * per_partition });
    Ok(())
}

/// Applies `op` with a scalar operand, honouring `reverse` (operand on the left).
#[inline]
fn scalar_step(op: AluOp, x: f32, s: f32, reverse: bool, nm: &crate::exec::Numerics) -> f32 {
    if reverse { apply_f32(op, s, x, nm) } else { apply_f32(op, x, s, nm) }
}

/// `dst = (src op0 operand0) op1 operand1`, operands per partition; fp32 math (bitvec on raw
/// bits when both ops are bitvec; exact integers on GpSimd with int32 tiles).
pub fn tensor_scalar(ctx: &mut Ctx, i: &TensorScalar) -> OpResult<()> {
    same_shape("dst", &i.dst, "src", &i.src)?;
    if i.op1.is_some() != i.operand1.is_some() {
        return Err(ErrorKind::Invalid("op1 and operand1 must be given together".into()).into());
    }
    let p = i.src.partitions;
    let per = i.src.free_elems();
    let bitvec = i.op0.is_bitvec();
    if let Some(op1) = i.op1
        && op1.is_bitvec() != bitvec
    {
        return Err(ErrorKind::Invalid("op0 and op1 must both be bitvec or both arithmetic".into()).into());
    }
    if ctx.engine == Engine::Scalar && !matches!((i.op0, i.op1), (AluOp::Multiply | AluOp::Add, _)) {
        return Err(ErrorKind::Invalid("ScalarE tensor_scalar supports only multiply/add".into()).into());
    }
    if bitvec {
        if ctx.engine != Engine::Vector {
            return Err(ErrorKind::WrongEngine { engine: ctx.engine.name(), opcode: "bitvec tensor_scalar" }.into());
        }
        require_int("src", &i.src, i.op0)?;
        require_int("dst", &i.dst, i.op0)?;
        let x = ctx.read_bits("src", &i.src)?;
        let s0 = ctx.scalar_i64("operand0", &i.operand0, p)?;
        let s1 = match &i.operand1 {
            Some(s) => ctx.scalar_i64("operand1", s, p)?,
            None => vec![0; p],
        };
        let w = bit_width(&i.dst);
        let mut out = Vec::with_capacity(x.len());
        for (k, &v) in x.iter().enumerate() {
            let part = if per == 0 { 0 } else { k / per };
            let bits = |a: u32, b: u32, op: AluOp, rev: bool| if rev { apply_bits(op, b, a, w) } else { apply_bits(op, a, b, w) };
            let mut t = bits(v, s0[part] as u32, i.op0, i.reverse0);
            if let Some(op1) = i.op1 {
                t = bits(t, s1[part] as u32, op1, i.reverse1);
            }
            out.push(t);
        }
        ctx.write_bits("dst", &i.dst, &out)?;
    } else if ctx.engine == Engine::Gpsimd && is_int32(i.src.dtype) && is_int32(i.dst.dtype) {
        let x = ctx.read_i64("src", &i.src)?;
        let s0 = ctx.scalar_i64("operand0", &i.operand0, p)?;
        let s1 = match &i.operand1 {
            Some(s) => ctx.scalar_i64("operand1", s, p)?,
            None => vec![0; p],
        };
        let mut out = Vec::with_capacity(x.len());
        for (k, &v) in x.iter().enumerate() {
            let part = if per == 0 { 0 } else { k / per };
            let step = |a: i64, b: i64, op: AluOp, rev: bool| if rev { apply_int(op, b, a) } else { apply_int(op, a, b) };
            let mut t = step(v, s0[part], i.op0, i.reverse0).at("operand0")?;
            if let Some(op1) = i.op1 {
                t = step(t, s1[part], op1, i.reverse1).at("operand1")?;
            }
            out.push(i.dst.dtype.wrap_i64(t));
        }
        ctx.write_bits("dst", &i.dst, &out)?;
    } else {
        let x = ctx.read_f32("src", &i.src)?;
        let s0 = ctx.scalar_f32("operand0", &i.operand0, p)?;
        let s1 = match &i.operand1 {
            Some(s) => ctx.scalar_f32("operand1", s, p)?,
            None => vec![0.0; p],
        };
        let nm = *ctx.numerics;
        let mut out = Vec::with_capacity(x.len());
        for part in 0..p {
            for &v in &x[part * per..(part + 1) * per] {
                let mut t = scalar_step(i.op0, v, s0[part], i.reverse0, &nm);
                if let Some(op1) = i.op1 {
                    t = scalar_step(op1, t, s1[part], i.reverse1, &nm);
                }
                out.push(t);
            }
        }
        ctx.write_f32("dst", &i.dst, &out)?;
    }
    ctx.stats.flops += (i.dst.num_elems() * if i.op1.is_some() { 2 } else { 1 }) as u64;
    ctx.cost_stream(per);
    Ok(())
}

/// `dst = (src op0 operand0) op1 in1`, fp32.
pub fn scalar_tensor_tensor(_ctx: &mut Ctx, _i: &ScalarTensorTensor) -> OpResult<()> {
    unimplemented("scalar_tensor_tensor")
}

/// Reduce the innermost `axes` free dims with `op` in fp32, in index order.
pub fn tensor_reduce(_ctx: &mut Ctx, _i: &TensorReduce) -> OpResult<()> {
    unimplemented("tensor_reduce")
}

pub fn tensor_tensor_scan(_ctx: &mut Ctx, _i: &TensorTensorScan) -> OpResult<()> {
    unimplemented("tensor_tensor_scan")
}

pub fn tensor_scalar_reduce(_ctx: &mut Ctx, _i: &TensorScalarReduce) -> OpResult<()> {
    unimplemented("tensor_scalar_reduce")
}

/// Copy. Bit-exact when src and dst dtypes match (Vector/GpSimd); otherwise through fp32.
pub fn tensor_copy(ctx: &mut Ctx, i: &TensorCopy) -> OpResult<()> {
    same_shape("dst", &i.dst, "src", &i.src)?;
    if i.src.dtype == i.dst.dtype {
        let bits = ctx.read_bits("src", &i.src)?;
        ctx.write_bits("dst", &i.dst, &bits)?;
    } else {
        let v = ctx.read_f32("src", &i.src)?;
        ctx.write_f32("dst", &i.dst, &v)?;
    }
    ctx.cost_stream(i.dst.free_elems());
    Ok(())
}

pub fn tensor_copy_predicated(_ctx: &mut Ctx, _i: &TensorCopyPredicated) -> OpResult<()> {
    unimplemented("tensor_copy_predicated")
}

/// `dst = 1/src` in fp32, correctly rounded (documented as more precise than ScalarE's).
pub fn reciprocal(ctx: &mut Ctx, i: &Reciprocal) -> OpResult<()> {
    same_shape("dst", &i.dst, "src", &i.src)?;
    let nm = *ctx.numerics;
    let v: Vec<f32> = ctx.read_f32("src", &i.src)?.into_iter().map(|x| apply_f32(AluOp::Reciprocal, x, 0.0, &nm)).collect();
    ctx.write_f32("dst", &i.dst, &v)?;
    ctx.stats.flops += v.len() as u64;
    ctx.cost_stream(8 * i.dst.free_elems());
    Ok(())
}

pub fn bn_stats(_ctx: &mut Ctx, _i: &BnStats) -> OpResult<()> {
    unimplemented("bn_stats")
}

pub fn bn_aggr(_ctx: &mut Ctx, _i: &BnAggr) -> OpResult<()> {
    unimplemented("bn_aggr")
}

pub fn max8(_ctx: &mut Ctx, _i: &Max8) -> OpResult<()> {
    unimplemented("max8")
}

pub fn find_index8(_ctx: &mut Ctx, _i: &FindIndex8) -> OpResult<()> {
    unimplemented("nc_find_index8")
}

pub fn match_replace8(_ctx: &mut Ctx, _i: &MatchReplace8) -> OpResult<()> {
    unimplemented("nc_match_replace8")
}

/// Fill with a constant: float dtypes get the value rounded through fp32; integer dtypes get the
/// exact integer (saturated), which must be integral.
pub fn memset(ctx: &mut Ctx, i: &Memset) -> OpResult<()> {
    let n = i.dst.num_elems();
    if i.dst.dtype.is_float() {
        let v = vec![i.value as f32; n];
        ctx.write_f32("dst", &i.dst, &v)?;
    } else {
        if i.value.fract() != 0.0 || !i.value.is_finite() {
            return Err(ErrorKind::Invalid(format!("memset of {} into integer dtype {}", i.value, i.dst.dtype))).at("dst");
        }
        let v = vec![i.value as i64; n];
        ctx.write_i64("dst", &i.dst, &v)?;
    }
    ctx.cost_stream(i.dst.free_elems());
    Ok(())
}

pub fn select_reduce(_ctx: &mut Ctx, _i: &SelectReduce) -> OpResult<()> {
    unimplemented("select_reduce")
}

pub fn dropout(_ctx: &mut Ctx, _i: &Dropout) -> OpResult<()> {
    unimplemented("dropout")
}

pub fn rng(_ctx: &mut Ctx, _i: &Rng) -> OpResult<()> {
    unimplemented("rng")
}

pub fn set_rng_seed(_ctx: &mut Ctx, _i: &SetRngSeed) -> OpResult<()> {
    unimplemented("set_rng_seed")
}

pub fn stream_shuffle(_ctx: &mut Ctx, _i: &StreamShuffle) -> OpResult<()> {
    unimplemented("nc_stream_shuffle")
}

/// VectorE 32×32 transpose (bit-exact).
pub fn transpose32(_ctx: &mut Ctx, _i: &NcTranspose) -> OpResult<()> {
    unimplemented("nc_transpose (vector)")
}
