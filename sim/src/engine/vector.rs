//! VectorE (DVE) instructions. Several of them also run on GpSimdE (by the instruction's engine
//! tag); where GpSimd differs — native exact int32 arithmetic, no PSUM — it says so here.
//!
//! Arithmetic: inputs converted to fp32 on read, math in fp32, cast to the destination dtype on
//! write. Bitvec ops: raw bits of integer operands, no casting.

use super::alu::{apply_bits, apply_f32, apply_int, apply_scalar_f32_inplace, canon, max};
use super::{Ctx, same_shape};
use crate::dtype::DType;
use crate::dtype::Rounding;
use crate::error::{AtOperand, ErrorKind, OpResult};
use crate::mem::{AccessPattern, MemSpace};
use crate::numerics::{Denormals, MxElementRounding};
use crate::program::*;

/// Seed of the VectorE generator before any `set_rng_seed`.
pub const DEFAULT_RNG_SEED: u64 = 0x5EED_0000_0000_0001;

fn is_int32(d: DType) -> bool {
    matches!(d, DType::I32 | DType::U32)
}

/// Whether an instruction with operands of `dtypes` takes GpSimdE's exact 64-bit integer path:
/// on GpSimdE, with `Numerics::int64_alu = gpsimd_exact`, every operand an integer and one of
/// them `i64` (docs/numerics.md "Native int64"). Results are written exactly, saturating to a
/// narrower dst dtype (comparison results are 0/1).
fn int64_path(ctx: &Ctx, dtypes: &[DType]) -> bool {
    ctx.engine == Engine::Gpsimd
        && ctx.numerics.int64_alu == crate::numerics::Int64Alu::GpsimdExact
        && dtypes.contains(&DType::I64)
        && dtypes.iter().all(|d| d.is_int())
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
        return Err(ErrorKind::Invalid(
            "both inputs in PSUM: at most one input may be in PSUM".into(),
        ))
        .at(a_name);
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
        return Err(ErrorKind::WrongEngine {
            engine: ctx.engine.name(),
            opcode: "tensor_tensor(pow)",
        }
        .into());
    }
    let n = i.dst.num_elems();
    if int64_path(ctx, &[i.in0.dtype, i.in1.dtype, i.dst.dtype]) {
        let a = ctx.read_i64("in0", &i.in0)?;
        let b = ctx.read_i64("in1", &i.in1)?;
        let out = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| super::alu::apply_int64(i.op, x, y))
            .collect::<Result<Vec<_>, _>>()
            .at("dst")?;
        ctx.write_i64("dst", &i.dst, &out)?;
    } else if i.op.is_bitvec() {
        if ctx.engine != Engine::Vector {
            return Err(ErrorKind::WrongEngine {
                engine: ctx.engine.name(),
                opcode: "bitvec tensor_tensor",
            }
            .into());
        }
        require_int("in0", &i.in0, i.op)?;
        require_int("in1", &i.in1, i.op)?;
        require_int("dst", &i.dst, i.op)?;
        let a = ctx.read_bits("in0", &i.in0)?;
        let b = ctx.read_bits("in1", &i.in1)?;
        let w = bit_width(&i.dst);
        let out: Vec<u32> = a.iter().zip(&b).map(|(&x, &y)| apply_bits(i.op, x, y, w)).collect();
        ctx.write_bits("dst", &i.dst, &out)?;
    } else if ctx.engine == Engine::Gpsimd && is_int32(i.in0.dtype) && is_int32(i.in1.dtype) && is_int32(i.dst.dtype) {
        let a = ctx.read_i64("in0", &i.in0)?;
        let b = ctx.read_i64("in1", &i.in1)?;
        let out = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| apply_int(i.op, x, y))
            .collect::<Result<Vec<_>, _>>()
            .at("dst")?;
        let bits: Vec<u32> = out.iter().map(|&v| i.dst.dtype.wrap_i64(v)).collect();
        ctx.write_bits("dst", &i.dst, &bits)?;
    } else {
        let mut out = ctx.read_f32("in0", &i.in0)?;
        let b = ctx.read_f32("in1", &i.in1)?;
        let nm = *ctx.numerics;
        super::alu::apply_f32_inplace(i.op, &mut out, &b, &nm);
        ctx.write_f32("dst", &i.dst, &out)?;
        ctx.mem.recycle_f32(b);
        ctx.mem.recycle_f32(out);
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
fn scalar_step(op: AluOp, x: f32, s: f32, reverse: bool, nm: &crate::numerics::Numerics) -> f32 {
    if reverse {
        apply_f32(op, s, x, nm)
    } else {
        apply_f32(op, x, s, nm)
    }
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
    if int64_path(ctx, &[i.src.dtype, i.dst.dtype]) {
        let x = ctx.read_i64("src", &i.src)?;
        let s0 = ctx.scalar_i64("operand0", &i.operand0, p)?;
        let s1 = match &i.operand1 {
            Some(s) => ctx.scalar_i64("operand1", s, p)?,
            None => vec![0; p],
        };
        let step = |a: i64, b: i64, op: AluOp, rev: bool| {
            if rev {
                super::alu::apply_int64(op, b, a)
            } else {
                super::alu::apply_int64(op, a, b)
            }
        };
        let mut out = Vec::with_capacity(x.len());
        for (k, &v) in x.iter().enumerate() {
            let part = k.checked_div(per).unwrap_or(0);
            let mut t = step(v, s0[part], i.op0, i.reverse0).at("operand0")?;
            if let Some(op1) = i.op1 {
                t = step(t, s1[part], op1, i.reverse1).at("operand1")?;
            }
            out.push(t);
        }
        ctx.write_i64("dst", &i.dst, &out)?;
    } else if bitvec {
        if ctx.engine != Engine::Vector {
            return Err(ErrorKind::WrongEngine {
                engine: ctx.engine.name(),
                opcode: "bitvec tensor_scalar",
            }
            .into());
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
            let part = k.checked_div(per).unwrap_or(0);
            let bits = |a: u32, b: u32, op: AluOp, rev: bool| {
                if rev {
                    apply_bits(op, b, a, w)
                } else {
                    apply_bits(op, a, b, w)
                }
            };
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
            let part = k.checked_div(per).unwrap_or(0);
            let step =
                |a: i64, b: i64, op: AluOp, rev: bool| if rev { apply_int(op, b, a) } else { apply_int(op, a, b) };
            let mut t = step(v, s0[part], i.op0, i.reverse0).at("operand0")?;
            if let Some(op1) = i.op1 {
                t = step(t, s1[part], op1, i.reverse1).at("operand1")?;
            }
            out.push(i.dst.dtype.wrap_i64(t));
        }
        ctx.write_bits("dst", &i.dst, &out)?;
    } else {
        let mut x = ctx.read_f32("src", &i.src)?;
        let s0 = ctx.scalar_f32("operand0", &i.operand0, p)?;
        let s1 = match &i.operand1 {
            Some(s) => ctx.scalar_f32("operand1", s, p)?,
            None => vec![0.0; p],
        };
        let nm = *ctx.numerics;
        // In place, one stage at a time over each partition's row (t stays fp32 between the
        // stages either way): the same per-element results as `scalar_step` twice, without a
        // second buffer and with the operator dispatched once per row.
        for part in 0..p {
            let row = &mut x[part * per..(part + 1) * per];
            apply_scalar_f32_inplace(i.op0, row, s0[part], i.reverse0, &nm);
            if let Some(op1) = i.op1 {
                apply_scalar_f32_inplace(op1, row, s1[part], i.reverse1, &nm);
            }
        }
        ctx.write_f32("dst", &i.dst, &x)?;
        ctx.mem.recycle_f32(x);
    }
    ctx.stats.flops += (i.dst.num_elems() * if i.op1.is_some() { 2 } else { 1 }) as u64;
    ctx.cost_stream(per);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Shared helpers of the instructions below.

/// Arithmetic-only operand check (`what` names the operator field).
fn require_arith(what: &str, op: AluOp) -> OpResult<()> {
    if op.is_bitvec() {
        return Err(ErrorKind::Invalid(format!(
            "{what}: bitvec operator {} is not allowed here (arithmetic operators only)",
            op.name()
        ))
        .into());
    }
    Ok(())
}

/// `pow` exists only on GpSimdE; the instructions below are VectorE-only.
fn no_pow(ctx: &Ctx, op: AluOp, opcode: &'static str) -> OpResult<()> {
    if op == AluOp::Pow && ctx.engine != Engine::Gpsimd {
        return Err(ErrorKind::WrongEngine {
            engine: ctx.engine.name(),
            opcode,
        }
        .into());
    }
    Ok(())
}

/// Product of sizes without overflow (a saturated product fails the later limit checks).
fn prod(sizes: &[usize]) -> usize {
    sizes.iter().fold(1usize, |a, &n| a.saturating_mul(n))
}

/// Row `part` of a partition-major vector with `per` elements per partition.
#[inline]
fn row<T>(v: &[T], part: usize, per: usize) -> &[T] {
    let start = part.saturating_mul(per);
    v.get(start..start.saturating_add(per)).unwrap_or(&[])
}

/// Requires a `[partitions, n]` shape (n elements per partition).
fn require_rows(operand: &str, ap: &AccessPattern, partitions: usize, n: usize) -> OpResult<()> {
    if ap.partitions != partitions || ap.free_elems() != n {
        return Err(ErrorKind::ShapeMismatch(format!(
            "`{operand}` must be [{partitions} partitions × {n}], got [{} × {}]",
            ap.partitions,
            ap.free_elems()
        )))
        .at(operand);
    }
    Ok(())
}

/// A per-instruction limit on the elements per partition of one operand.
fn limit(operand: &str, ap: &AccessPattern, max: usize, what: &'static str) -> OpResult<()> {
    let size = ap.free_elems();
    if size > max {
        return Err(ErrorKind::FreeSizeLimit { size, limit: max, what }).at(operand);
    }
    Ok(())
}

fn require_float(operand: &str, ap: &AccessPattern, why: &str) -> OpResult<()> {
    if !ap.dtype.is_float() {
        return Err(ErrorKind::UnsupportedDType {
            dtype: ap.dtype.name(),
            why: why.to_string(),
        })
        .at(operand);
    }
    Ok(())
}

/// Accumulator start value of a VectorE fp32 reduction (the `reset` identities of the ISA:
/// add/subtract 0, multiply 1, max −inf, min +inf; logical and 1, or/xor 0). `average` sums from
/// 0 and divides by the count at the end. `None`: not a legal reduction operator.
fn fp32_reduce_identity(op: AluOp) -> Option<f32> {
    match op {
        AluOp::Add
        | AluOp::Subtract
        | AluOp::Multiply
        | AluOp::Max
        | AluOp::Min
        | AluOp::LogicalAnd
        | AluOp::LogicalOr
        | AluOp::LogicalXor
        | AluOp::Average => super::alu::reduce_identity(op),
        _ => None,
    }
}

/// Folds `vals` in index order: `acc = identity; acc = acc op v` (fp32, each step rounded);
/// `average` = that sum divided by the count.
fn fold_f32(op: AluOp, vals: impl IntoIterator<Item = f32>, nm: &crate::numerics::Numerics) -> f32 {
    let fold_op = if op == AluOp::Average { AluOp::Add } else { op };
    let mut acc = fp32_reduce_identity(op).unwrap_or(0.0);
    let mut n = 0usize;
    // Add and max with denormals preserved are `apply_f32` without its flush steps: spelled out
    // so the loop needs no per-element operator dispatch (same results, performance only).
    match (fold_op, nm.denormals) {
        (AluOp::Add, Denormals::Preserve) => {
            for v in vals {
                acc = canon(acc + v);
                n += 1;
            }
        }
        (AluOp::Max, Denormals::Preserve) => {
            for v in vals {
                acc = canon(max(acc, v, nm.nan_max_min));
                n += 1;
            }
        }
        _ => {
            for v in vals {
                acc = apply_f32(fold_op, acc, v, nm);
                n += 1;
            }
        }
    }
    if op == AluOp::Average {
        acc = apply_f32(AluOp::Bypass, acc / n as f32, 0.0, nm);
    }
    acc
}

/// fp32 equality used by the match instructions (−0 = +0; NaN never matches).
#[inline]
fn matches_f32(a: f32, b: f32) -> bool {
    a == b
}

/// The "not found" index of `nc_find_index8` / `nc_match_replace8`: all ones in the dtype.
fn index_sentinel(dtype: DType) -> u32 {
    dtype.bit_mask()
}

fn require_index_dtype(operand: &str, ap: &AccessPattern) -> OpResult<()> {
    super::require_dtype(operand, ap, &[DType::U32, DType::U16], "indices are uint32 or uint16")
}

/// Max elements per partition of `max8`, `nc_find_index8` and `nc_match_replace8` data.
pub const MATCH_FMAX: usize = 16384;

// ---------------------------------------------------------------------------------------------

/// `dst = (src op0 operand0) op1 in1`, fp32; `reverse0` puts `operand0` on the left of `op0`,
/// `reverse1` puts `in1` on the left of `op1`. Arithmetic operators only.
pub fn scalar_tensor_tensor(ctx: &mut Ctx, i: &ScalarTensorTensor) -> OpResult<()> {
    same_shape("dst", &i.dst, "src", &i.src)?;
    same_shape("dst", &i.dst, "in1", &i.in1)?;
    not_both_psum("src", &i.src, &i.in1)?;
    require_arith("op0", i.op0)?;
    require_arith("op1", i.op1)?;
    no_pow(ctx, i.op0, "scalar_tensor_tensor(pow)")?;
    no_pow(ctx, i.op1, "scalar_tensor_tensor(pow)")?;
    let p = i.src.partitions;
    let per = i.src.free_elems();
    let x = ctx.read_f32("src", &i.src)?;
    let s0 = ctx.scalar_f32("operand0", &i.operand0, p)?;
    let y = ctx.read_f32("in1", &i.in1)?;
    let nm = *ctx.numerics;
    let mut out = Vec::with_capacity(x.len());
    for part in 0..p {
        let s = s0.get(part).copied().unwrap_or(0.0);
        for (&v, &w) in row(&x, part, per).iter().zip(row(&y, part, per)) {
            let t = scalar_step(i.op0, v, s, i.reverse0, &nm);
            out.push(if i.reverse1 {
                apply_f32(i.op1, w, t, &nm)
            } else {
                apply_f32(i.op1, t, w, &nm)
            });
        }
    }
    ctx.write_f32("dst", &i.dst, &out)?;
    ctx.stats.flops += 2 * out.len() as u64;
    let fast = i.src.dtype == DType::Bf16
        && i.in1.dtype == DType::Bf16
        && i.op0 == AluOp::Subtract
        && i.op1 == AluOp::Multiply
        && per.is_multiple_of(2);
    ctx.cost_stream(if fast { per } else { 2 * per });
    Ok(())
}

/// Reduces the innermost `axes` free dims of `src` with `op`, per partition, in index order.
///
/// * arithmetic `op` (add, subtract, multiply, max, min, logical and/or/xor, average): fp32
///   accumulator starting at the identity, `acc = acc op x` element by element (so `subtract`
///   gives `0 − x0 − x1 − …`), `average` divides the sum by the count; `negate` multiplies the
///   result by −1; cast on write.
/// * bitvec `op` (bitwise and/or/xor): integer `src` and `dst`, raw bits zero-extended from the
///   source width, result truncated to the destination width; `negate` is rejected.
///
/// `dst` holds one element per kept (outer) index, in order.
pub fn tensor_reduce(ctx: &mut Ctx, i: &TensorReduce) -> OpResult<()> {
    let dims = i.src.free.len();
    if i.axes == 0 || i.axes > 4 || i.axes > dims {
        return Err(ErrorKind::Invalid(format!(
            "axes = {} must be in 1..=4 and at most the {dims} free dims of src",
            i.axes
        )))
        .at("src");
    }
    let shape = i.src.free_shape();
    let kept = prod(&shape[..dims - i.axes]);
    let reduced = prod(&shape[dims - i.axes..]);
    require_rows("dst", &i.dst, i.src.partitions, kept)?;
    let p = i.src.partitions;
    let per = i.src.free_elems();
    if i.op.is_bitvec() {
        if !matches!(i.op, AluOp::BitwiseAnd | AluOp::BitwiseOr | AluOp::BitwiseXor) {
            return Err(ErrorKind::Invalid(format!("{} is not a reduction operator", i.op.name())).into());
        }
        if i.negate {
            return Err(ErrorKind::Invalid("negate applies to arithmetic reductions only".into()).into());
        }
        require_int("src", &i.src, i.op)?;
        require_int("dst", &i.dst, i.op)?;
        let x = ctx.read_bits("src", &i.src)?;
        let init = if i.op == AluOp::BitwiseAnd { u32::MAX } else { 0 };
        let mut out = Vec::with_capacity(p.saturating_mul(kept));
        for part in 0..p {
            let r = row(&x, part, per);
            for o in 0..kept {
                let group = row(r, o, reduced);
                out.push(group.iter().fold(init, |acc, &v| apply_bits(i.op, acc, v, 32)));
            }
        }
        ctx.write_bits("dst", &i.dst, &out)?;
    } else {
        if fp32_reduce_identity(i.op).is_none() {
            return Err(ErrorKind::Invalid(format!("{} is not a reduction operator", i.op.name())).into());
        }
        let x = ctx.read_f32("src", &i.src)?;
        let nm = *ctx.numerics;
        let mut out = Vec::with_capacity(p.saturating_mul(kept));
        for part in 0..p {
            let r = row(&x, part, per);
            for o in 0..kept {
                let mut acc = fold_f32(i.op, row(r, o, reduced).iter().copied(), &nm);
                if i.negate {
                    acc = apply_f32(AluOp::Multiply, acc, -1.0, &nm);
                }
                out.push(acc);
            }
        }
        // Back to the pool: a dropped multi-MiB read is returned to the OS and faulted in again
        // by the next instruction.
        ctx.mem.recycle_f32(x);
        ctx.write_f32("dst", &i.dst, &out)?;
    }
    ctx.stats.flops += i.src.num_elems() as u64;
    let half = i.src.dtype == DType::Bf16 && i.dst.dtype == DType::Bf16 && matches!(i.op, AluOp::Add | AluOp::Max);
    ctx.cost_stream(if half { per / 2 } else { per });
    Ok(())
}

/// Scan along the (flattened) free axis of each partition:
/// `r = initial; r = (in0[k] op0 r) op1 in1[k]; dst[k] = r` — state kept in fp32, each step
/// rounded to fp32, cast on write.
pub fn tensor_tensor_scan(ctx: &mut Ctx, i: &TensorTensorScan) -> OpResult<()> {
    same_shape("dst", &i.dst, "in0", &i.in0)?;
    same_shape("dst", &i.dst, "in1", &i.in1)?;
    not_both_psum("in0", &i.in0, &i.in1)?;
    require_arith("op0", i.op0)?;
    require_arith("op1", i.op1)?;
    no_pow(ctx, i.op0, "tensor_tensor_scan(pow)")?;
    no_pow(ctx, i.op1, "tensor_tensor_scan(pow)")?;
    let p = i.in0.partitions;
    let per = i.in0.free_elems();
    let a = ctx.read_f32("in0", &i.in0)?;
    let b = ctx.read_f32("in1", &i.in1)?;
    let init = ctx.scalar_f32("initial", &i.initial, p)?;
    let nm = *ctx.numerics;
    let mut out = Vec::with_capacity(a.len());
    for part in 0..p {
        let mut r = init.get(part).copied().unwrap_or(0.0);
        for (&x, &y) in row(&a, part, per).iter().zip(row(&b, part, per)) {
            r = apply_f32(i.op1, apply_f32(i.op0, x, r, &nm), y, &nm);
            out.push(r);
        }
    }
    ctx.write_f32("dst", &i.dst, &out)?;
    ctx.stats.flops += 2 * out.len() as u64;
    ctx.cost_stream(2 * per);
    Ok(())
}

/// `dst = src op0 operand0` (fp32, cast on write) and `reduce_res[p] = reduce_op` over the fp32
/// results of the partition (before the cast), accumulator from the identity in index order.
/// `reduce_op` ∈ {add, subtract, multiply, max, min}.
pub fn tensor_scalar_reduce(ctx: &mut Ctx, i: &TensorScalarReduce) -> OpResult<()> {
    same_shape("dst", &i.dst, "src", &i.src)?;
    require_arith("op0", i.op0)?;
    no_pow(ctx, i.op0, "tensor_scalar_reduce(pow)")?;
    if !matches!(
        i.reduce_op,
        AluOp::Add | AluOp::Subtract | AluOp::Multiply | AluOp::Max | AluOp::Min
    ) {
        return Err(ErrorKind::Invalid(format!(
            "reduce_op {} is not one of add, subtract, multiply, max, min",
            i.reduce_op.name()
        ))
        .into());
    }
    let p = i.src.partitions;
    let per = i.src.free_elems();
    require_rows("reduce_res", &i.reduce_res, p, 1)?;
    let x = ctx.read_f32("src", &i.src)?;
    let s0 = ctx.scalar_f32("operand0", &i.operand0, p)?;
    let nm = *ctx.numerics;
    let mut out = Vec::with_capacity(x.len());
    let mut red = Vec::with_capacity(p);
    for part in 0..p {
        let s = s0.get(part).copied().unwrap_or(0.0);
        let start = out.len();
        out.extend(row(&x, part, per).iter().map(|&v| apply_f32(i.op0, v, s, &nm)));
        red.push(fold_f32(i.reduce_op, out[start..].iter().copied(), &nm));
    }
    ctx.write_f32("dst", &i.dst, &out)?;
    ctx.write_f32("reduce_res", &i.reduce_res, &red)?;
    ctx.stats.flops += 2 * out.len() as u64;
    ctx.cost_stream(per);
    ctx.cost_cycles(ctx.target.min_ii_cycles);
    Ok(())
}

/// Copy. Bit-exact when src and dst dtypes match (Vector/GpSimd); otherwise through fp32.
pub fn tensor_copy(ctx: &mut Ctx, i: &TensorCopy) -> OpResult<()> {
    same_shape("dst", &i.dst, "src", &i.src)?;
    let same_i64 = i.src.dtype == DType::I64 && i.dst.dtype == DType::I64;
    if same_i64 || int64_path(ctx, &[i.src.dtype, i.dst.dtype]) {
        // An int64 copy moves the value (any engine); an int64 conversion on GpSimdE's exact
        // path saturates to the narrower dtype.
        let v = ctx.read_i64("src", &i.src)?;
        ctx.write_i64("dst", &i.dst, &v)?;
    } else if i.src.dtype == i.dst.dtype {
        let bits = ctx.read_bits("src", &i.src)?;
        ctx.write_bits("dst", &i.dst, &bits)?;
    } else {
        let v = ctx.read_f32("src", &i.src)?;
        ctx.write_f32("dst", &i.dst, &v)?;
        ctx.mem.recycle_f32(v);
    }
    ctx.cost_stream(i.dst.free_elems());
    Ok(())
}

/// Every check a write of `ap` makes, done before the result is computed (so that sizes taken
/// from the operand are known to be sane before anything is allocated from them).
fn precheck_write(ctx: &Ctx, operand: &str, ap: &AccessPattern) -> OpResult<()> {
    ctx.check_access(operand, ap, super::Access::Write)?;
    ctx.check_start_partition(operand, ap)?;
    ctx.check_free_limit(operand, ap)?;
    ctx.mem.resolve(ap).at(operand)?;
    Ok(())
}

/// Writes raw bits where `mask` holds, with the same engine checks as every write; the other
/// elements of `ap` keep their contents (and stay unwritten if nothing wrote them).
fn write_bits_masked(ctx: &mut Ctx, operand: &str, ap: &AccessPattern, bits: &[u32], mask: &[bool]) -> OpResult<()> {
    ctx.check_access(operand, ap, super::Access::Write)?;
    ctx.check_start_partition(operand, ap)?;
    ctx.check_free_limit(operand, ap)?;
    ctx.mem.write_bits_masked(ap, bits, mask).at(operand)?;
    let n = mask.iter().filter(|&&m| m).count();
    ctx.stats.elements.add(ctx.engine, n as u64);
    Ok(())
}

/// Predicate dtypes of `tensor_copy_predicated`.
const COPY_PRED_DTYPES: [DType; 4] = [DType::U8, DType::U16, DType::U32, DType::Bool];
/// Predicate dtypes of `select_reduce`.
const SELECT_PRED_DTYPES: [DType; 5] = [DType::I8, DType::U8, DType::I16, DType::U16, DType::Bool];

/// `dst[k] = src[k]` where `predicate[k] != 0` (`== 0` with `reverse_pred`); other elements of
/// `dst` are not written. Bit copy: `src` and `dst` have the same dtype; the predicate is an
/// unsigned integer (uint8/16/32, bool) tested on its raw bits.
pub fn tensor_copy_predicated(ctx: &mut Ctx, i: &TensorCopyPredicated) -> OpResult<()> {
    same_shape("dst", &i.dst, "src", &i.src)?;
    same_shape("dst", &i.dst, "predicate", &i.predicate)?;
    not_both_psum("src", &i.src, &i.predicate)?;
    super::require_dtype(
        "predicate",
        &i.predicate,
        &COPY_PRED_DTYPES,
        "predicates are uint8, uint16, uint32 or bool",
    )?;
    if i.src.dtype != i.dst.dtype {
        return Err(ErrorKind::UnsupportedDType {
            dtype: i.dst.dtype.name(),
            why: format!(
                "tensor_copy_predicated copies bits: dst must have src's dtype {}",
                i.src.dtype
            ),
        })
        .at("dst");
    }
    let pred = ctx.read_bits("predicate", &i.predicate)?;
    let bits = ctx.read_bits("src", &i.src)?;
    let mask: Vec<bool> = pred.iter().map(|&b| (b != 0) != i.reverse_pred).collect();
    write_bits_masked(ctx, "dst", &i.dst, &bits, &mask)?;
    let per = i.dst.free_elems();
    let psum = i.src.mem == MemSpace::Psum || i.predicate.mem == MemSpace::Psum;
    ctx.cost_stream(if psum { per } else { 2 * per });
    Ok(())
}

/// `dst = 1/src` in fp32, correctly rounded (documented as more precise than ScalarE's).
pub fn reciprocal(ctx: &mut Ctx, i: &Reciprocal) -> OpResult<()> {
    same_shape("dst", &i.dst, "src", &i.src)?;
    let nm = *ctx.numerics;
    let v: Vec<f32> = ctx
        .read_f32("src", &i.src)?
        .into_iter()
        .map(|x| apply_f32(AluOp::Reciprocal, x, 0.0, &nm))
        .collect();
    ctx.write_f32("dst", &i.dst, &v)?;
    ctx.stats.flops += v.len() as u64;
    ctx.cost_stream(8 * i.dst.free_elems());
    Ok(())
}

/// (count, mean, M2) of a group of fp32 values, M2 = Σ (x − mean)², all in fp32:
/// `sum = 0; sum += x` in order; `mean = sum / n`; `m2 = 0; m2 += (x − mean)·(x − mean)` in
/// order (two passes). An empty group gives (0, 0, 0).
fn group_stats(vals: impl Iterator<Item = f32> + Clone, nm: &crate::numerics::Numerics) -> [f32; 3] {
    let mut n = 0usize;
    let mut sum = 0.0f32;
    for v in vals.clone() {
        sum = apply_f32(AluOp::Add, sum, v, nm);
        n += 1;
    }
    if n == 0 {
        return [0.0; 3];
    }
    let mean = apply_f32(AluOp::Bypass, sum / n as f32, 0.0, nm);
    let mut m2 = 0.0f32;
    for v in vals {
        let d = apply_f32(AluOp::Subtract, v, mean, nm);
        m2 = apply_f32(AluOp::Add, m2, apply_f32(AluOp::Multiply, d, d, nm), nm);
    }
    [n as f32, mean, m2]
}

/// Per partition, over the ≤ `bn_stats_fmax` elements of `src` (flattened free axis), six
/// statistics: `(count, mean, count·var)` of the even-indexed elements, then of the odd-indexed
/// ones (see [`group_stats`] for the exact fp32 formulas). `dst` is `[P, 6]`, a float dtype.
pub fn bn_stats(ctx: &mut Ctx, i: &BnStats) -> OpResult<()> {
    let p = i.src.partitions;
    limit(
        "src",
        &i.src,
        ctx.target.bn_stats_fmax,
        "elements per partition for bn_stats",
    )?;
    require_rows("dst", &i.dst, p, 6)?;
    require_float("dst", &i.dst, "bn_stats writes means and variances")?;
    let per = i.src.free_elems();
    let x = ctx.read_f32("src", &i.src)?;
    let nm = *ctx.numerics;
    let mut out = Vec::with_capacity(6 * p);
    for part in 0..p {
        let r = row(&x, part, per);
        out.extend(group_stats(r.iter().copied().step_by(2), &nm));
        out.extend(group_stats(r.iter().copied().skip(1).step_by(2), &nm));
    }
    ctx.write_f32("dst", &i.dst, &out)?;
    ctx.stats.flops += 4 * i.src.num_elems() as u64;
    ctx.cost_stream(per);
    Ok(())
}

/// Combines the `k` tuples `(count, mean, M2)` of each partition of `src` (`[P, 3k]`, in order)
/// into `(mean, population variance)` (`dst` `[P, 2]`) with Chan et al.'s pairwise update, one
/// tuple at a time, every operation in fp32:
/// ```text
/// n = 0; mean = 0; m2 = 0
/// for (nb, mb, m2b) with nb != 0:
///     nn = n + nb; delta = mb − mean; r = nb / nn
///     mean = mean + delta·r
///     m2 = (m2 + m2b) + ((delta·delta)·n)·r
///     n = nn
/// dst = (mean, m2 / n)          # n = 0 (no tuple counted): (NaN, NaN)
/// ```
pub fn bn_aggr(ctx: &mut Ctx, i: &BnAggr) -> OpResult<()> {
    let p = i.src.partitions;
    let per = i.src.free_elems();
    if per == 0 || !per.is_multiple_of(3) {
        return Err(ErrorKind::ShapeMismatch(format!(
            "src must hold (count, mean, count·var) tuples: 3·k elements per partition, got {per}"
        )))
        .at("src");
    }
    require_rows("dst", &i.dst, p, 2)?;
    require_float("dst", &i.dst, "bn_aggr writes a mean and a variance")?;
    let x = ctx.read_f32("src", &i.src)?;
    let nm = *ctx.numerics;
    let f = |op, a, b| apply_f32(op, a, b, &nm);
    let mut out = Vec::with_capacity(2 * p);
    for part in 0..p {
        let (mut n, mut mean, mut m2) = (0.0f32, 0.0f32, 0.0f32);
        for t in row(&x, part, per).chunks_exact(3) {
            let (nb, mb, m2b) = (t[0], t[1], t[2]);
            if nb == 0.0 {
                continue;
            }
            let nn = f(AluOp::Add, n, nb);
            let delta = f(AluOp::Subtract, mb, mean);
            let r = f(AluOp::Bypass, nb / nn, 0.0);
            mean = f(AluOp::Add, mean, f(AluOp::Multiply, delta, r));
            let corr = f(
                AluOp::Multiply,
                f(AluOp::Multiply, f(AluOp::Multiply, delta, delta), n),
                r,
            );
            m2 = f(AluOp::Add, f(AluOp::Add, m2, m2b), corr);
            n = nn;
        }
        if n == 0.0 {
            out.extend([f32::NAN, f32::NAN]);
        } else {
            out.extend([mean, f(AluOp::Bypass, m2 / n, 0.0)]);
        }
    }
    ctx.write_f32("dst", &i.dst, &out)?;
    ctx.stats.flops += (10 * (per / 3) * p) as u64;
    ctx.cost_stream(13 * per / 3);
    Ok(())
}

/// Descending order of `max8` (fp32). Under `NanMaxMin::Propagate` NaN ranks above +inf (as
/// PyTorch's `topk`/`sort(descending)`); under `PreferNumber` below −inf. Equal values (and
/// −0/+0) keep index order (the sort is stable).
fn max8_order(a: f32, b: f32, nan_first: bool) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Equal,
        (true, false) => {
            if nan_first {
                Less
            } else {
                Greater
            }
        }
        (false, true) => {
            if nan_first {
                Greater
            } else {
                Less
            }
        }
        _ => b.partial_cmp(&a).unwrap_or(Equal),
    }
}

/// The 8 largest values of each partition (8..=16384 elements, read as fp32), descending, cast
/// on write into `dst` `[P, 8]`.
pub fn max8(ctx: &mut Ctx, i: &Max8) -> OpResult<()> {
    let p = i.src.partitions;
    limit("src", &i.src, MATCH_FMAX, "elements per partition for max8")?;
    let per = i.src.free_elems();
    if per < 8 {
        return Err(ErrorKind::ShapeMismatch(format!(
            "max8 needs at least 8 elements per partition, got {per}"
        )))
        .at("src");
    }
    require_rows("dst", &i.dst, p, 8)?;
    let x = ctx.read_f32("src", &i.src)?;
    let nan_first = ctx.numerics.nan_max_min == crate::numerics::NanMaxMin::Propagate;
    let mut out = Vec::with_capacity(8 * p);
    for part in 0..p {
        let mut r = row(&x, part, per).to_vec();
        r.sort_by(|&a, &b| max8_order(a, b, nan_first));
        out.extend(r.iter().take(8));
    }
    ctx.write_f32("dst", &i.dst, &out)?;
    ctx.stats.flops += i.src.num_elems() as u64;
    ctx.cost_stream(per);
    Ok(())
}

/// Shared operand checks of `nc_find_index8` / `nc_match_replace8`.
fn check_match8(data: &AccessPattern, vals: &AccessPattern) -> OpResult<()> {
    limit(
        "data",
        data,
        MATCH_FMAX,
        "elements per partition for the 8-value match instructions",
    )?;
    require_rows("vals", vals, data.partitions, 8)
}

/// Index (in the flattened free axis) of the first occurrence of each of the 8 `vals` of a
/// partition in `data` (fp32 equality: −0 = +0, NaN never matches). A value repeated in `vals`
/// takes the next occurrence each time (ascending). Not found: all ones (0xFFFFFFFF / 0xFFFF).
pub fn find_index8(ctx: &mut Ctx, i: &FindIndex8) -> OpResult<()> {
    check_match8(&i.data, &i.vals)?;
    let p = i.data.partitions;
    require_rows("dst", &i.dst, p, 8)?;
    require_index_dtype("dst", &i.dst)?;
    let per = i.data.free_elems();
    let data = ctx.read_f32("data", &i.data)?;
    let vals = ctx.read_f32("vals", &i.vals)?;
    let none = index_sentinel(i.dst.dtype);
    let mut out = Vec::with_capacity(8 * p);
    for part in 0..p {
        let d = row(&data, part, per);
        let mut used = vec![false; d.len()];
        for &v in row(&vals, part, 8) {
            let hit = d.iter().zip(&used).position(|(&x, &u)| !u && matches_f32(x, v));
            out.push(match hit {
                Some(k) => {
                    used[k] = true;
                    k as u32
                }
                None => none,
            });
        }
    }
    ctx.write_bits("dst", &i.dst, &out)?;
    ctx.stats.flops += i.data.num_elems() as u64;
    ctx.cost_stream(per);
    Ok(())
}

/// For `k = 7, 6, …, 0`: the first element of the partition's `data` equal to `vals[k]` (fp32
/// equality; elements replaced earlier in this instruction are skipped) becomes `imm`; its index
/// goes to `dst_idx[k]` (all ones when not found). `dst` is `data` with the replacements: bit
/// copy of the other elements when dtypes match, else cast through fp32; `imm` is cast on write.
pub fn match_replace8(ctx: &mut Ctx, i: &MatchReplace8) -> OpResult<()> {
    check_match8(&i.data, &i.vals)?;
    let p = i.data.partitions;
    same_shape("data", &i.data, "dst", &i.dst)?;
    if let Some(idx) = &i.dst_idx {
        require_rows("dst_idx", idx, p, 8)?;
        require_index_dtype("dst_idx", idx)?;
    }
    let per = i.data.free_elems();
    let data = ctx.read_f32("data", &i.data)?;
    let vals = ctx.read_f32("vals", &i.vals)?;
    let mut replaced = vec![false; data.len()];
    let mut idx = vec![0u32; 8 * p];
    let none = i.dst_idx.as_ref().map_or(u32::MAX, |a| index_sentinel(a.dtype));
    for part in 0..p {
        let base = part * per;
        let d = row(&data, part, per);
        let v = row(&vals, part, 8);
        for k in (0..v.len()).rev() {
            let hit = (0..d.len()).find(|&e| !replaced[base + e] && matches_f32(d[e], v[k]));
            idx[part * 8 + k] = match hit {
                Some(e) => {
                    replaced[base + e] = true;
                    e as u32
                }
                None => none,
            };
        }
    }
    let imm = i.imm as f32;
    if i.dst.dtype == i.data.dtype {
        let mut bits = ctx.read_bits("data", &i.data)?;
        let imm_bits = i.dst.dtype.encode_f32(imm, ctx.rounding);
        for (b, &r) in bits.iter_mut().zip(&replaced) {
            if r {
                *b = imm_bits;
            }
        }
        ctx.write_bits("dst", &i.dst, &bits)?;
    } else {
        let out: Vec<f32> = data
            .iter()
            .zip(&replaced)
            .map(|(&x, &r)| if r { imm } else { x })
            .collect();
        ctx.write_f32("dst", &i.dst, &out)?;
    }
    if let Some(ap) = &i.dst_idx {
        ctx.write_bits("dst_idx", ap, &idx)?;
    }
    ctx.stats.flops += i.data.num_elems() as u64;
    ctx.cost_stream(per);
    Ok(())
}

/// Fill with a constant: float dtypes get the value rounded through fp32; integer dtypes get the
/// exact integer (saturated), which must be integral.
pub fn memset(ctx: &mut Ctx, i: &Memset) -> OpResult<()> {
    precheck_write(ctx, "dst", &i.dst)?;
    if i.dst.dtype.is_packed() && i.value != 0.0 {
        return Err(ErrorKind::Invalid(format!(
            "memset of a packed MX container writes only 0, got {}",
            i.value
        )))
        .at("dst");
    }
    let n = i.dst.num_elems();
    if i.dst.dtype.is_float() {
        let v = vec![i.value as f32; n];
        ctx.write_f32("dst", &i.dst, &v)?;
    } else {
        if i.value.fract() != 0.0 || !i.value.is_finite() {
            return Err(ErrorKind::Invalid(format!(
                "memset of {} into integer dtype {}",
                i.value, i.dst.dtype
            )))
            .at("dst");
        }
        let v = vec![i.value as i64; n];
        ctx.write_i64("dst", &i.dst, &v)?;
    }
    let per = i.dst.free_elems();
    let half = i.value == 0.0 && matches!(i.dst.dtype, DType::Bf16 | DType::F16);
    ctx.cost_stream(if half { per / 2 } else { per });
    Ok(())
}

/// `dst = pred ? on_true : on_false` per element (`pred = predicate != 0`, inverted by
/// `reverse_pred`), fp32 values cast on write; `reduce_res[p]` (optional, `[P, 1]`) = max over
/// the partition's selected fp32 values, accumulator from −inf in index order.
pub fn select_reduce(ctx: &mut Ctx, i: &SelectReduce) -> OpResult<()> {
    same_shape("dst", &i.dst, "on_true", &i.on_true)?;
    same_shape("dst", &i.dst, "predicate", &i.predicate)?;
    not_both_psum("predicate", &i.predicate, &i.on_true)?;
    super::require_dtype(
        "predicate",
        &i.predicate,
        &SELECT_PRED_DTYPES,
        "predicates are int8, uint8, int16, uint16 or bool",
    )?;
    if matches!(i.on_true.dtype, DType::Tf32 | DType::I32 | DType::U32) {
        return Err(ErrorKind::UnsupportedDType {
            dtype: i.on_true.dtype.name(),
            why: "select_reduce does not take tfloat32/int32/uint32 on_true".into(),
        })
        .at("on_true");
    }
    let p = i.on_true.partitions;
    let per = i.on_true.free_elems();
    if let Some(r) = &i.reduce_res {
        require_rows("reduce_res", r, p, 1)?;
    }
    let pred = ctx.read_bits("predicate", &i.predicate)?;
    let t = ctx.read_f32("on_true", &i.on_true)?;
    let f = ctx.scalar_f32("on_false", &i.on_false, p)?;
    let nm = *ctx.numerics;
    let mut out = Vec::with_capacity(t.len());
    let mut red = Vec::with_capacity(p);
    for part in 0..p {
        let fv = f.get(part).copied().unwrap_or(0.0);
        let start = out.len();
        for (&v, &c) in row(&t, part, per).iter().zip(row(&pred, part, per)) {
            out.push(if (c != 0) != i.reverse_pred { v } else { fv });
        }
        red.push(fold_f32(AluOp::Max, out[start..].iter().copied(), &nm));
    }
    ctx.write_f32("dst", &i.dst, &out)?;
    if let Some(r) = &i.reduce_res {
        ctx.write_f32("reduce_res", r, &red)?;
        ctx.stats.flops += out.len() as u64;
    }
    ctx.cost_stream(per);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The VectorE random generator. The NC-v2 hardware PRNG is unpublished; ours is PCG32
// (PCG-XSH-RR, 64-bit LCG state, 32-bit output; O'Neill 2014) with the reference default
// increment. Its whole state is `Registers::vector_rng`; draws are consumed in partition-major,
// then free-index order of the instruction's operand.

const PCG_MULT: u64 = 6_364_136_223_846_793_005;
/// PCG's default stream (`PCG_DEFAULT_INCREMENT_64`).
const PCG_INC: u64 = 1_442_695_040_888_963_407;

/// One PCG32 step with increment `inc`: returns 32 bits and advances the state.
#[inline]
fn pcg32_step(state: &mut u64, inc: u64) -> u32 {
    let old = *state;
    *state = old.wrapping_mul(PCG_MULT).wrapping_add(inc);
    let xorshifted = (((old >> 18) ^ old) >> 27) as u32;
    xorshifted.rotate_right((old >> 59) as u32)
}

/// Next 32 random bits of the VectorE generator.
pub fn rng_next(state: &mut u64) -> u32 {
    pcg32_step(state, PCG_INC)
}

/// PCG32's seeding (`pcg32_srandom_r` with the default stream): `state = 0; step;
/// state += seed; step`.
fn pcg32_seed(seed: u64, inc: u64) -> u64 {
    let mut s = 0u64;
    pcg32_step(&mut s, inc);
    s = s.wrapping_add(seed);
    pcg32_step(&mut s, inc);
    s
}

/// The generator state after `set_rng_seed(seed)`.
pub fn rng_state_for_seed(seed: u32) -> u64 {
    pcg32_seed(seed as u64, PCG_INC)
}

/// Zeroes each element with probability `prob` (per partition, in [0, 1]): one 32-bit draw `u`
/// per element, dropped iff `u < prob · 2³²` (computed in f64). Kept elements are copied through
/// fp32 (no 1/(1−prob) rescaling: that is a separate multiply), dropped ones are +0.
pub fn dropout(ctx: &mut Ctx, i: &Dropout) -> OpResult<()> {
    same_shape("dst", &i.dst, "src", &i.src)?;
    let p = i.src.partitions;
    let per = i.src.free_elems();
    let x = ctx.read_f32("src", &i.src)?;
    let prob = ctx.scalar_f32("prob", &i.prob, p)?;
    if let Some(bad) = prob.iter().find(|q| !(0.0..=1.0).contains(*q)) {
        return Err(ErrorKind::Invalid(format!(
            "dropout probability {bad} is outside [0, 1]"
        )))
        .at("prob");
    }
    let mut state = ctx.regs.vector_rng;
    let mut out = Vec::with_capacity(x.len());
    for part in 0..p {
        let threshold = prob.get(part).copied().unwrap_or(0.0) as f64 * 4_294_967_296.0;
        for &v in row(&x, part, per) {
            let u = rng_next(&mut state);
            out.push(if (u as f64) < threshold { 0.0 } else { v });
        }
    }
    ctx.write_f32("dst", &i.dst, &out)?;
    ctx.regs.vector_rng = state;
    ctx.stats.flops += out.len() as u64;
    ctx.cost_stream(per);
    Ok(())
}

/// 32 random bits per element, truncated to the low bits of `dst`'s integer dtype.
pub fn rng(ctx: &mut Ctx, i: &Rng) -> OpResult<()> {
    if i.dst.dtype.is_float() || i.dst.dtype == DType::Bool {
        return Err(ErrorKind::UnsupportedDType {
            dtype: i.dst.dtype.name(),
            why: "rng writes raw random bits: an integer dtype (not bool) is required".into(),
        })
        .at("dst");
    }
    // Validate before drawing so that a failed instruction leaves the generator unchanged.
    precheck_write(ctx, "dst", &i.dst)?;
    let mask = i.dst.dtype.bit_mask();
    let mut state = ctx.regs.vector_rng;
    let bits: Vec<u32> = (0..i.dst.num_elems()).map(|_| rng_next(&mut state) & mask).collect();
    ctx.write_bits("dst", &i.dst, &bits)?;
    ctx.regs.vector_rng = state;
    ctx.cost_stream(i.dst.free_elems());
    Ok(())
}

/// Seeds the generator with a 32-bit seed: an integer immediate in [−2³¹, 2³²) (negative values
/// wrap to their two's complement) or a `[1, 1]` integer tile. State := PCG32 seeding of it.
pub fn set_rng_seed(ctx: &mut Ctx, i: &SetRngSeed) -> OpResult<()> {
    let seed = ctx.scalar_i64("seed", &i.seed, 1)?;
    let s = seed.first().copied().unwrap_or(0);
    if !(i32::MIN as i64..=u32::MAX as i64).contains(&s) {
        return Err(ErrorKind::Invalid(format!("seed {s} does not fit in 32 bits"))).at("seed");
    }
    ctx.regs.vector_rng = rng_state_for_seed(s as u32);
    ctx.cost_cycles(ctx.target.min_ii_cycles);
    Ok(())
}

/// Partition shuffle within each 32-partition quadrant of the operand (counted from its start
/// partition): `dst[32q + k] = src[32q + mask[k]]` for every `k < mask.len()` whose entry is not
/// 255; partitions with a 255 entry or beyond the mask keep their contents. Bit copy (same dtype).
pub fn stream_shuffle(ctx: &mut Ctx, i: &StreamShuffle) -> OpResult<()> {
    same_shape("dst", &i.dst, "src", &i.src)?;
    if i.src.dtype != i.dst.dtype {
        return Err(ErrorKind::UnsupportedDType {
            dtype: i.dst.dtype.name(),
            why: format!(
                "nc_stream_shuffle copies bits: dst must have src's dtype {}",
                i.src.dtype
            ),
        })
        .at("dst");
    }
    if i.mask.is_empty() || i.mask.len() > 32 {
        return Err(ErrorKind::Invalid(format!(
            "mask has {} entries, 1..=32 expected",
            i.mask.len()
        )))
        .at("mask");
    }
    let src = ctx.read_bits("src", &i.src)?;
    let p = i.src.partitions;
    let per = i.src.free_elems();
    // Source partition of every destination partition (None: unchanged).
    let mut from = vec![None; p];
    for (d, slot) in from.iter_mut().enumerate() {
        let (q, k) = (d / 32, d % 32);
        match i.mask.get(k).copied() {
            None | Some(255) => {}
            Some(m) if (m as usize) < 32 && q * 32 + (m as usize) < p => *slot = Some(q * 32 + m as usize),
            Some(m) => {
                return Err(ErrorKind::Invalid(format!(
                    "mask[{k}] = {m} selects partition {} of a {p}-partition operand (entries are < 32 or 255)",
                    q * 32 + m as usize
                )))
                .at("mask");
            }
        }
    }
    let mut bits = Vec::with_capacity(src.len());
    let mut mask = Vec::with_capacity(src.len());
    for s in &from {
        match s {
            Some(sp) => {
                bits.extend_from_slice(row(&src, *sp, per));
                mask.extend(std::iter::repeat_n(true, per));
            }
            None => {
                bits.extend(std::iter::repeat_n(0, per));
                mask.extend(std::iter::repeat_n(false, per));
            }
        }
    }
    write_bits_masked(ctx, "dst", &i.dst, &bits, &mask)?;
    ctx.cost_stream(per);
    Ok(())
}

/// VectorE transpose of a block of at most 32 partitions × 32 elements: `dst[j, k] = src[k, j]`
/// (src `[P, F]`, dst `[F, P]`, free axes flattened), bit-exact, same dtype.
pub fn transpose32(ctx: &mut Ctx, i: &NcTranspose) -> OpResult<()> {
    let p = i.src.partitions;
    let f = i.src.free_elems();
    if p > 32 || f > 32 {
        return Err(ErrorKind::ShapeMismatch(format!(
            "the VectorE transpose takes at most 32 partitions × 32 elements, got [{p} × {f}]"
        )))
        .at("src");
    }
    require_rows("dst", &i.dst, f, p)?;
    if i.src.dtype != i.dst.dtype {
        return Err(ErrorKind::UnsupportedDType {
            dtype: i.dst.dtype.name(),
            why: format!(
                "the VectorE transpose is a bit copy: dst must have src's dtype {}",
                i.src.dtype
            ),
        })
        .at("dst");
    }
    let src = ctx.read_bits("src", &i.src)?;
    let mut out = Vec::with_capacity(src.len());
    for j in 0..f {
        for k in 0..p {
            out.push(src.get(k * f + j).copied().unwrap_or(0));
        }
    }
    ctx.write_bits("dst", &i.dst, &out)?;
    ctx.cost_stream(f);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// quantize_mx (NeuronCore-v4): MXFP8 quantization into the layout nc_matmul_mx reads.

/// Largest power-of-two exponent of an element format's normal range (OCP `emax_elem`):
/// e4m3fn 8 (448 = 1.75·2^8), e5m2 15 (57344 = 1.75·2^15), e2m1 2 (6 = 1.5·2^2).
fn mx_emax(element: DType) -> i32 {
    match element {
        DType::Fp8E5m2 => 15,
        DType::Fp4E2m1fn => 2,
        _ => 8,
    }
}

/// `floor(log2(a))` of a positive finite f32, exact (subnormals included).
fn floor_log2(a: f32) -> i32 {
    let bits = a.to_bits();
    let e = (bits >> 23) as i32;
    if e == 0 {
        // m·2^-149 with m < 2^23: the highest set bit of m.
        -149 + (31 - (bits & 0x7F_FFFF).leading_zeros() as i32)
    } else {
        e - 127
    }
}

/// The e8m0 scale code of a group whose largest magnitude is `amax` (AWS's rule, twice the OCP
/// sample algorithm's scale: `2^(floor(log2 amax) − emax + 1)`, so that rounding the largest
/// element cannot saturate). Choices (docs/isa.md §5.32): a NaN or ±inf in the group gives the
/// NaN code 0xFF; an all-zero group, and exponents below the format's range, the smallest code 0.
pub fn mx_scale_code(amax: f32, element: DType) -> u8 {
    if !amax.is_finite() {
        return 0xFF;
    }
    if amax == 0.0 {
        return 0;
    }
    let e = floor_log2(amax) - mx_emax(element) + 1;
    (e + 127).clamp(0, 254) as u8
}

/// One element `x` of a group with scale code `scale`, as its element code.
pub fn mx_element_code(x: f32, scale: u8, element: DType, rounding: MxElementRounding) -> u32 {
    if scale == 0xFF || x.is_nan() {
        return element.encode_f32(f32::NAN, &mut Rounding::NearestEven);
    }
    // Exact: a power-of-two scaling of an fp16/bf16 value that stays in fp32's range.
    let q = (f64::from(x) * 2f64.powi(127 - i32::from(scale))) as f32;
    let code = element.encode_f32(q, &mut Rounding::NearestEven);
    match rounding {
        MxElementRounding::NearestEven => code,
        MxElementRounding::TowardZero => {
            // Sign-magnitude codes: one step down in magnitude is the code below.
            let sign = 1 << (element.code_bits() - 1);
            if element.decode_f32(code).abs() > q.abs() && code & (sign - 1) != 0 {
                code - 1
            } else {
                code
            }
        }
    }
}

/// Quantizes `src` (`[P, F]` fp16/bf16, P a multiple of 32, F of 4) into `dst` (`[P, F/4]` packed
/// fp8) and `dst_scale` (the quadrant layout of `engine::mx`): for each group of 8 partitions ×
/// 4 consecutive elements, [`mx_scale_code`] of its largest magnitude and [`mx_element_code`] of
/// each element.
pub fn quantize_mx(ctx: &mut Ctx, i: &QuantizeMx) -> OpResult<()> {
    use super::mx;
    mx::require_sbuf(ctx, "src", &i.src, "read")?;
    mx::require_sbuf(ctx, "dst", &i.dst, "write")?;
    mx::require_sbuf(ctx, "dst_scale", &i.dst_scale, "write")?;
    super::require_dtype(
        "src",
        &i.src,
        &[DType::F16, DType::Bf16],
        "quantize_mx reads fp16 or bf16",
    )?;
    super::require_dtype(
        "dst",
        &i.dst,
        &[DType::Fp8E5m2X4, DType::Fp8E4m3fnX4],
        "quantize_mx writes float8_e5m2_x4 or float8_e4m3fn_x4",
    )?;
    mx::check_data_partitions("src", &i.src, ctx.target.partitions)?;
    let p = i.src.partitions;
    let f = i.src.free_elems();
    if !f.is_multiple_of(mx::PACK) {
        return Err(ErrorKind::ShapeMismatch(format!(
            "the free size of quantize_mx's src must be a multiple of 4, got {f}"
        )))
        .at("src");
    }
    let packed = f / mx::PACK;
    require_rows("dst", &i.dst, p, packed)?;
    mx::check_scale_tile("dst_scale", &i.dst_scale, p, packed)?;
    if i.dst.start_partition / mx::QUADRANT != i.dst_scale.start_partition / mx::QUADRANT {
        return Err(ErrorKind::Invalid(format!(
            "dst (from partition {}) and dst_scale (from partition {}) must be in the same SBUF quadrants",
            i.dst.start_partition, i.dst_scale.start_partition
        )))
        .at("dst_scale");
    }
    let (element, _) = i.dst.dtype.packed_element().expect("checked: a packed dtype");
    let rounding = ctx.numerics.mx_element_rounding;
    let x = ctx.read_f32("src", &i.src)?;
    let groups_down = p / mx::GROUP_PARTITIONS;
    let mut scales = vec![0u8; groups_down * packed];
    let mut out = vec![0u32; p * packed];
    for gr in 0..groups_down {
        for g in 0..packed {
            let at = |pp: usize, k: usize| x[pp * f + g * mx::PACK + k];
            let rows = gr * mx::GROUP_PARTITIONS..(gr + 1) * mx::GROUP_PARTITIONS;
            let amax = rows
                .clone()
                .flat_map(|pp| (0..mx::PACK).map(move |k| (pp, k)))
                .map(|(pp, k)| at(pp, k).abs())
                .fold(
                    0.0f32,
                    |a, v| if v.is_nan() || a.is_nan() { f32::NAN } else { a.max(v) },
                );
            let scale = mx_scale_code(amax, element);
            scales[mx::scale_row(gr * mx::GROUP_PARTITIONS) * packed + g] = scale;
            for pp in rows {
                let codes = std::array::from_fn(|k| mx_element_code(at(pp, k), scale, element, rounding));
                out[pp * packed + g] = mx::pack(i.dst.dtype, codes);
            }
        }
    }
    ctx.write_bits("dst", &i.dst, &out)?;
    mx::write_scales(ctx, "dst_scale", &i.dst_scale, p, &scales)?;
    ctx.stats.flops += x.len() as u64;
    // VectorE quantizes 4 elements per partition per cycle [ARCH3].
    ctx.cost_cycles((f as u64).div_ceil(4).max(ctx.target.min_ii_cycles));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PCG reference demo (`pcg32-demo`, `pcg32_srandom_r(&rng, 42, 54)`) prints these six
    /// outputs first; our step and seeding functions reproduce them.
    #[test]
    fn pcg32_matches_reference_vector() {
        let inc = (54u64 << 1) | 1;
        let mut s = pcg32_seed(42, inc);
        let got: Vec<u32> = (0..6).map(|_| pcg32_step(&mut s, inc)).collect();
        assert_eq!(
            got,
            [0xa15c02b7, 0x7b47f409, 0xba1d3330, 0x83d2f293, 0xbfa4784b, 0xcbed606e]
        );
    }
}

// ---------------------------------------------------------------------------------------------
// tensor_copy_dynamic_src / tensor_copy_dynamic_dst: a tensor_copy with one side moved along the
// free axis by an offset read from SBUF at run time.

/// Minimum initiation interval of an instruction with a dynamic source or destination location
/// (NKI ISA docs, `tensor_copy_dynamic_src/dst`: "MIN_II_DYNAMIC is roughly 600 engine cycles").
const MIN_II_DYNAMIC_CYCLES: u64 = 600;

/// Which side of a dynamic copy the run-time offset moves.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum DynamicSide {
    Src,
    Dst,
}

/// `tensor_copy` with `src` (`side: Src`) or `dst` (`side: Dst`) moved by
/// `offset[0] · offset_scale` elements along the free axis. The offset operand must be one
/// integer element in SBUF; the moved pattern must stay inside the partition (the usual memory
/// bounds checks report it otherwise), and a negative resulting offset is `IndexOutOfRange`.
pub fn tensor_copy_dynamic(ctx: &mut Ctx, i: &TensorCopyDynamic, side: DynamicSide) -> OpResult<()> {
    same_shape("dst", &i.dst, "src", &i.src)?;
    if i.offset.mem != crate::mem::MemSpace::Sbuf {
        return Err(ErrorKind::Invalid(format!(
            "the dynamic offset must be in SBUF, not {}",
            i.offset.mem.name()
        )))
        .at("offset");
    }
    if i.offset.num_elems() != 1 {
        return Err(ErrorKind::ShapeMismatch(format!(
            "the dynamic offset is one element, got {}",
            i.offset.num_elems()
        )))
        .at("offset");
    }
    if i.offset.dtype.is_float() {
        return Err(ErrorKind::UnsupportedDType {
            dtype: i.offset.dtype.name(),
            why: "the dynamic offset is an integer".into(),
        })
        .at("offset");
    }
    let value = ctx.read_i64("offset", &i.offset)?[0];
    let (name, moved) = match side {
        DynamicSide::Src => ("src", &i.src),
        DynamicSide::Dst => ("dst", &i.dst),
    };
    let size = moved.dtype.size() as i128;
    let bytes = value as i128 * i.offset_scale as i128 * size + moved.offset as i128;
    ctx.mem.resolve(moved).at(name)?;
    if bytes < 0 || bytes > u64::MAX as i128 {
        return Err(ErrorKind::Invalid(format!(
            "dynamic offset {value} × {} elements moves `{name}` outside its partition",
            i.offset_scale
        )))
        .at("offset");
    }
    let shifted = AccessPattern {
        offset: bytes as u64,
        ..moved.clone()
    };
    let (src, dst) = match side {
        DynamicSide::Src => (&shifted, &i.dst),
        DynamicSide::Dst => (&i.src, &shifted),
    };
    if src.dtype == dst.dtype {
        let bits = ctx.read_bits("src", src)?;
        ctx.write_bits("dst", dst, &bits)?;
    } else {
        let v = ctx.read_f32("src", src)?;
        ctx.write_f32("dst", dst, &v)?;
        ctx.mem.recycle_f32(v);
    }
    ctx.cost_cycles((i.dst.free_elems() as u64).max(MIN_II_DYNAMIC_CYCLES));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// range_select (NeuronCore-v3+): select by the free index against two per-partition bounds.

fn range_cmp(c: RangeCmp, idx: f32, bound: f32) -> bool {
    match c {
        RangeCmp::Equal => idx == bound,
        RangeCmp::Less => idx < bound,
        RangeCmp::LessEqual => idx <= bound,
        RangeCmp::Greater => idx > bound,
        RangeCmp::GreaterEqual => idx >= bound,
    }
}

/// `idx = fp32(range_start + i)`; `dst[p, i] = comp0(idx, bound0[p]) && comp1(idx, bound1[p]) ?
/// on_true[p, i] : on_false`; `reduce_res[p] = max_i dst[p, i]` (fp32). The NKI docs require
/// `on_false` to be the fp32 minimum (-3.4028235e38) and the index to stay below 2^24.
pub fn range_select(ctx: &mut Ctx, i: &RangeSelect) -> OpResult<()> {
    same_shape("dst", &i.dst, "on_true", &i.on_true)?;
    if i.on_false as f32 != f32::MIN {
        return Err(ErrorKind::Invalid(format!(
            "on_false must be the fp32 minimum -3.4028235e38, got {}",
            i.on_false
        )))
        .at("on_false");
    }
    let p = i.on_true.partitions;
    let per = i.on_true.free_elems();
    let last = i.range_start + per.saturating_sub(1) as f64;
    if !i.range_start.is_finite() || i.range_start.abs() >= 16_777_216.0 || last.abs() >= 16_777_216.0 {
        return Err(ErrorKind::Invalid(format!(
            "range_start + free index must stay within ±2^24, got {}..={last}",
            i.range_start
        )))
        .at("range_start");
    }
    if let Some(r) = &i.reduce_res {
        require_rows("reduce_res", r, p, 1)?;
    }
    let t = ctx.read_f32("on_true", &i.on_true)?;
    let b0 = ctx.scalar_f32("bound0", &i.bound0, p)?;
    let b1 = ctx.scalar_f32("bound1", &i.bound1, p)?;
    let nm = *ctx.numerics;
    let mut out = Vec::with_capacity(t.len());
    let mut red = Vec::with_capacity(p);
    for part in 0..p {
        let start = out.len();
        for (k, &v) in row(&t, part, per).iter().enumerate() {
            let idx = (i.range_start + k as f64) as f32;
            let keep = range_cmp(i.comp0, idx, b0[part]) && range_cmp(i.comp1, idx, b1[part]);
            out.push(if keep { v } else { f32::MIN });
        }
        red.push(fold_f32(AluOp::Max, out[start..].iter().copied(), &nm));
    }
    ctx.write_f32("dst", &i.dst, &out)?;
    if let Some(r) = &i.reduce_res {
        ctx.write_f32("reduce_res", r, &red)?;
        ctx.stats.flops += out.len() as u64;
    }
    ctx.cost_stream(per);
    Ok(())
}
