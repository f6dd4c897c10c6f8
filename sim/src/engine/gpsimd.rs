//! GpSimdE (POOL) instructions: eight SIMD cores, 16 partitions each, SBUF only, native int32.
//! (`tensor_tensor`, `tensor_scalar`, `tensor_copy` and `memset` on GpSimd share VectorE's
//! functions in vector.rs, which branch on the engine where GpSimd differs.)
//!
//! Every operand is checked (access rights, well-formed pattern, start partition, free size)
//! before any size is derived from it, and every index read from memory is range-checked, so no
//! input makes these functions panic.

use super::alu::{apply_f32, apply_int};
use super::{Access, Ctx, same_shape};
use crate::dtype::DType;
use crate::error::{AtOperand, ErrorKind, OpResult};
use crate::mem::AccessPattern;
use crate::program::*;

/// Partitions served by one GpSimd core.
const CORE_PARTITIONS: usize = 16;
/// Most indices one core takes in a `local_gather`.
const LOCAL_GATHER_MAX_INDICES: usize = 4096;

/// All operand checks up front: access right, well-formed pattern (so the sizes computed from it
/// cannot overflow), start-partition rule, free-size limit.
fn prepare(ctx: &Ctx, operand: &str, ap: &AccessPattern, access: Access) -> OpResult<()> {
    ctx.check_access(operand, ap, access)?;
    ctx.mem.resolve(ap).at(operand)?;
    ctx.check_start_partition(operand, ap)?;
    ctx.check_free_limit(operand, ap)
}

// ---------------------------------------------------------------------------------------------
// iota / affine_select: the int32 affine value `offset + c·channel_multiplier + Σ step_k·i_k`.

/// An instruction field the hardware holds in an int32.
fn int32_param(name: &str, v: i64) -> OpResult<i32> {
    i32::try_from(v)
        .map_err(|_| ErrorKind::Invalid(format!("{name} = {v} does not fit in int32")))
        .at(name)
}

/// `Σ step_k·i_k` (wrapping int32) for every index tuple of `pattern`, outer dimension slowest;
/// the pattern must enumerate exactly `expected` elements (the destination's per-partition count).
fn affine_free(ctx: &Ctx, pattern: &[[i64; 2]], expected: usize) -> OpResult<Vec<i32>> {
    if pattern.len() > ctx.target.max_free_dims {
        return Err(ErrorKind::TooManyFreeDims {
            dims: pattern.len(),
            max: ctx.target.max_free_dims,
        })
        .at("pattern");
    }
    let mut count: usize = 1;
    for (d, &[step, num]) in pattern.iter().enumerate() {
        if i32::try_from(step).is_err() {
            return Err(ErrorKind::BadFreeDim {
                dim: d,
                what: format!("step {step} does not fit in int32"),
            })
            .at("pattern");
        }
        if !(0..=u16::MAX as i64).contains(&num) {
            return Err(ErrorKind::BadFreeDim {
                dim: d,
                what: format!("size {num} is outside 0..=65535"),
            })
            .at("pattern");
        }
        count = count.saturating_mul(num as usize);
    }
    if count != expected {
        return Err(ErrorKind::ShapeMismatch(format!(
            "pattern enumerates {count} elements per partition, dst has {expected}"
        )))
        .at("pattern");
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    // From here every size is ≥ 1, so no intermediate list is longer than `count`.
    let mut vals = vec![0i32];
    for &[step, num] in pattern {
        let step = step as i32; // checked above
        let mut next = Vec::with_capacity(vals.len() * num as usize);
        for &v in &vals {
            let mut x = v;
            for _ in 0..num {
                next.push(x);
                x = x.wrapping_add(step);
            }
        }
        vals = next;
    }
    Ok(vals)
}

/// The affine value of every element, partition-major: `offset + c·cm + free[i]` in wrapping
/// int32, with `c` the partition index within the operand (0-based).
fn affine_values(partitions: usize, offset: i32, cm: i32, free: &[i32]) -> Vec<i32> {
    let mut out = Vec::with_capacity(partitions * free.len());
    for c in 0..partitions {
        let base = offset.wrapping_add((c as i32).wrapping_mul(cm));
        out.extend(free.iter().map(|&f| base.wrapping_add(f)));
    }
    out
}

/// `dst[c, i…] = offset + c·channel_multiplier + Σ step_k·i_k` computed in int32 (wrapping), then
/// converted to dst's dtype: integers exactly with saturation to the dtype's range, floats through
/// fp32 (int32 → fp32 rounds to nearest even above 2^24), then the usual cast on write.
pub fn iota(ctx: &mut Ctx, i: &Iota) -> OpResult<()> {
    prepare(ctx, "dst", &i.dst, Access::Write)?;
    let offset = int32_param("offset", i.offset)?;
    let cm = int32_param("channel_multiplier", i.channel_multiplier)?;
    let free = affine_free(ctx, &i.pattern, i.dst.free_elems())?;
    let vals = affine_values(i.dst.partitions, offset, cm, &free);
    if i.dst.dtype.is_float() {
        let v: Vec<f32> = vals.iter().map(|&x| x as f32).collect();
        ctx.write_f32("dst", &i.dst, &v)?;
    } else {
        let v: Vec<i64> = vals.iter().map(|&x| x as i64).collect();
        ctx.write_i64("dst", &i.dst, &v)?;
    }
    ctx.cost_cycles(ctx.target.gpsimd_start_cycles + i.dst.free_elems() as u64);
    Ok(())
}

fn cmp_zero(cmp: CmpOp, v: i32) -> bool {
    match cmp {
        CmpOp::Equal => v == 0,
        CmpOp::NotEqual => v != 0,
        CmpOp::GreaterThan => v > 0,
        CmpOp::GreaterEqual => v >= 0,
    }
}

/// `dst = cmp(v, 0) ? on_true : on_false` with `v` the int32 affine value of `iota`.
/// `on_false` is an fp32 value (the f64 field rounded to nearest). When on_true and dst have the
/// same dtype, selected elements are copied bit-exactly; otherwise they go through fp32 and are
/// cast on write. `on_false` is cast to dst's dtype like any fp32 result.
pub fn affine_select(ctx: &mut Ctx, i: &AffineSelect) -> OpResult<()> {
    prepare(ctx, "dst", &i.dst, Access::Write)?;
    prepare(ctx, "on_true", &i.on_true, Access::Read)?;
    same_shape("dst", &i.dst, "on_true", &i.on_true)?;
    let offset = int32_param("offset", i.offset)?;
    let cm = int32_param("channel_multiplier", i.channel_multiplier)?;
    let free = affine_free(ctx, &i.pattern, i.dst.free_elems())?;
    let select: Vec<bool> = affine_values(i.dst.partitions, offset, cm, &free)
        .into_iter()
        .map(|v| cmp_zero(i.cmp, v))
        .collect();
    let on_false = i.on_false as f32;
    if i.on_true.dtype == i.dst.dtype {
        let mut bits = ctx.read_bits("on_true", &i.on_true)?;
        for (b, &sel) in bits.iter_mut().zip(&select) {
            if !sel {
                *b = i.dst.dtype.encode_f32(on_false, &mut *ctx.rounding);
            }
        }
        ctx.write_bits("dst", &i.dst, &bits)?;
    } else {
        let mut vals = ctx.read_f32("on_true", &i.on_true)?;
        for (v, &sel) in vals.iter_mut().zip(&select) {
            if !sel {
                *v = on_false;
            }
        }
        ctx.write_f32("dst", &i.dst, &vals)?;
    }
    ctx.cost_cycles(ctx.target.gpsimd_start_cycles + i.dst.free_elems() as u64);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Gathers.

fn require_same_dtype(dst: &AccessPattern, src_name: &str, src: &AccessPattern) -> OpResult<()> {
    if dst.dtype != src.dtype {
        return Err(ErrorKind::UnsupportedDType {
            dtype: dst.dtype.name(),
            why: format!("a gather does not cast: dst must have {src_name}'s dtype {}", src.dtype),
        })
        .at("dst");
    }
    Ok(())
}

/// Per GpSimd core (16 partitions): the core's index tile (`[16, Fi]`, uint16) is flattened
/// partition-first (`index[16c:16c+16].flatten(order='F')`) and its first `num_valid_indices`
/// entries are used; for every partition `p` of the core,
/// `dst[p, j·E + e] = src[p, idx_j + e]` for `e < E = num_elem_per_idx`, indices in elements of
/// src's (flattened) free axis. Bit copy, no cast. src, index and dst sit on the same partitions,
/// a multiple of 16 of them.
pub fn local_gather(ctx: &mut Ctx, i: &LocalGather) -> OpResult<()> {
    prepare(ctx, "src", &i.src, Access::Read)?;
    prepare(ctx, "index", &i.index, Access::Read)?;
    prepare(ctx, "dst", &i.dst, Access::Write)?;
    if i.index.dtype != DType::U16 {
        return Err(ErrorKind::UnsupportedDType {
            dtype: i.index.dtype.name(),
            why: "local_gather indices are uint16".into(),
        })
        .at("index");
    }
    require_same_dtype(&i.dst, "src", &i.src)?;
    let e = i.num_elem_per_idx;
    if !matches!(e, 1 | 2 | 4 | 8 | 16 | 32) {
        return Err(ErrorKind::Invalid(format!(
            "num_elem_per_idx = {e}: must be 1, 2, 4, 8, 16 or 32"
        )))
        .at("dst");
    }
    let p = i.src.partitions;
    if i.index.partitions != p || i.dst.partitions != p {
        return Err(ErrorKind::ShapeMismatch(format!(
            "src, index and dst must span the same partitions: {p}, {}, {}",
            i.index.partitions, i.dst.partitions
        )))
        .at("index");
    }
    if !p.is_multiple_of(CORE_PARTITIONS) || !i.src.start_partition.is_multiple_of(CORE_PARTITIONS) {
        return Err(ErrorKind::ShapeMismatch(format!(
            "local_gather works on whole GpSimd cores: partitions {}..{} are not a multiple of 16 aligned to 16",
            i.src.start_partition,
            i.src.start_partition + p
        )))
        .at("src");
    }
    if i.index.start_partition != i.src.start_partition || i.dst.start_partition != i.src.start_partition {
        return Err(ErrorKind::Invalid(
            "src, index and dst must start at the same partition (each core gathers from, and writes to, its own 16)"
                .into(),
        ))
        .at("index");
    }
    let fi = i.index.free_elems();
    let per_core = CORE_PARTITIONS.saturating_mul(fi);
    let nv = i.num_valid_indices;
    if nv == 0 || nv > per_core || nv > LOCAL_GATHER_MAX_INDICES {
        return Err(ErrorKind::Invalid(format!(
            "num_valid_indices = {nv}: must be in 1..={} (16 partitions × {fi} indices per core, at most {LOCAL_GATHER_MAX_INDICES})",
            per_core.min(LOCAL_GATHER_MAX_INDICES)
        )))
        .at("index");
    }
    let per_dst = nv * e; // ≤ 4096 · 32
    if i.dst.free_elems() != per_dst {
        return Err(ErrorKind::ShapeMismatch(format!(
            "dst must hold num_valid_indices × num_elem_per_idx = {nv} × {e} = {per_dst} elements per partition, has {}",
            i.dst.free_elems()
        )))
        .at("dst");
    }
    let fs = i.src.free_elems();
    let src = ctx.read_bits("src", &i.src)?;
    let index = ctx.read_bits("index", &i.index)?;
    let mut out = vec![0u32; p * per_dst];
    for core in 0..p / CORE_PARTITIONS {
        let first = core * CORE_PARTITIONS;
        for j in 0..nv {
            let (row, col) = (j % CORE_PARTITIONS, j / CORE_PARTITIONS);
            let idx = index.get((first + row) * fi + col).copied().unwrap_or(0) as usize;
            let end = idx + e;
            if end > fs {
                return Err(ErrorKind::IndexOutOfRange {
                    index: idx as u64,
                    partition: i.index.start_partition + first + row,
                    end: end as u64,
                    len: fs,
                })
                .at("index");
            }
            for part in first..first + CORE_PARTITIONS {
                let from = &src[part * fs + idx..part * fs + end];
                out[part * per_dst + j * e..part * per_dst + (j + 1) * e].copy_from_slice(from);
            }
        }
    }
    ctx.write_bits("dst", &i.dst, &out)?;
    ctx.cost_stream(per_dst);
    Ok(())
}

/// Per partition: `dst[p, j] = flat(data[p])[indices[p, j]]` with uint32 indices in
/// `[0, data elements per partition)`. Bit copy, no cast.
pub fn n_gather(ctx: &mut Ctx, i: &NGather) -> OpResult<()> {
    prepare(ctx, "data", &i.data, Access::Read)?;
    prepare(ctx, "indices", &i.indices, Access::Read)?;
    prepare(ctx, "dst", &i.dst, Access::Write)?;
    if i.indices.dtype != DType::U32 {
        return Err(ErrorKind::UnsupportedDType {
            dtype: i.indices.dtype.name(),
            why: "nc_n_gather indices are uint32".into(),
        })
        .at("indices");
    }
    require_same_dtype(&i.dst, "data", &i.data)?;
    let p = i.data.partitions;
    if i.indices.partitions != p || i.dst.partitions != p {
        return Err(ErrorKind::ShapeMismatch(format!(
            "data, indices and dst must have the same partitions: {p}, {}, {}",
            i.indices.partitions, i.dst.partitions
        )))
        .at("indices");
    }
    same_shape("indices", &i.indices, "dst", &i.dst)?;
    let fd = i.data.free_elems();
    let nj = i.indices.free_elems();
    let data = ctx.read_bits("data", &i.data)?;
    let indices = ctx.read_bits("indices", &i.indices)?;
    let mut out = Vec::with_capacity(p * nj);
    for (k, &ix) in indices.iter().enumerate() {
        let part = k / nj.max(1);
        let ix = ix as usize;
        if ix >= fd {
            return Err(ErrorKind::IndexOutOfRange {
                index: ix as u64,
                partition: i.indices.start_partition + part,
                end: ix as u64 + 1,
                len: fd,
            })
            .at("indices");
        }
        out.push(data[part * fd + ix]);
    }
    ctx.write_bits("dst", &i.dst, &out)?;
    ctx.cost_stream(nj);
    Ok(())
}

// ---------------------------------------------------------------------------------------------

/// `dst[0, i] = op over p = 0..P-1 of src[p, i]`, folded in partition order.
///
/// * src and dst integer: exact 32-bit integer arithmetic on the values (add wraps to int32,
///   max/min exact, bitwise on the sign/zero-extended bits), stored wrapped to dst's width.
/// * otherwise fp32: inputs converted to fp32, `((s0 op s1) op s2) …` each step rounded to fp32
///   (max/min follow the NaN setting); `average` is that fp32 sum divided by P (one rounding).
///
/// Operators: add, average, max, min, bitwise_or, bitwise_and (bitwise: integer operands only;
/// average: float path only).
pub fn tensor_partition_reduce(ctx: &mut Ctx, i: &TensorPartitionReduce) -> OpResult<()> {
    prepare(ctx, "src", &i.src, Access::Read)?;
    prepare(ctx, "dst", &i.dst, Access::Write)?;
    let op = i.op;
    if !matches!(
        op,
        AluOp::Add | AluOp::Average | AluOp::Max | AluOp::Min | AluOp::BitwiseOr | AluOp::BitwiseAnd
    ) {
        return Err(ErrorKind::Invalid(format!(
            "tensor_partition_reduce does not take {}: add, average, max, min, bitwise_or or bitwise_and",
            op.name()
        ))
        .into());
    }
    let p = i.src.partitions;
    if p == 0 {
        return Err(ErrorKind::Invalid("nothing to reduce: src has no partitions".into())).at("src");
    }
    if i.dst.partitions != 1 || i.dst.free_elems() != i.src.free_elems() {
        return Err(ErrorKind::ShapeMismatch(format!(
            "dst must be [1 × {}] (src is [{p} × {}]), got [{} × {}]",
            i.src.free_elems(),
            i.src.free_elems(),
            i.dst.partitions,
            i.dst.free_elems()
        )))
        .at("dst");
    }
    let f = i.src.free_elems();
    let int_path = i.src.dtype.is_int() && i.dst.dtype.is_int();
    if op.is_bitvec() && !int_path {
        let (name, ap) = if i.src.dtype.is_float() {
            ("src", &i.src)
        } else {
            ("dst", &i.dst)
        };
        return Err(ErrorKind::UnsupportedDType {
            dtype: ap.dtype.name(),
            why: format!("{} reduces integer tiles only (src and dst)", op.name()),
        })
        .at(name);
    }
    if int_path && op == AluOp::Average {
        return Err(ErrorKind::UnsupportedDType {
            dtype: i.src.dtype.name(),
            why: "average has no exact integer form; reduce integers with add".into(),
        })
        .at("src");
    }
    if int_path {
        let v = ctx.read_i64("src", &i.src)?;
        let mut acc: Vec<i64> = v[..f].to_vec();
        for row in v.chunks_exact(f.max(1)).skip(1).take(p - 1) {
            for (a, &x) in acc.iter_mut().zip(row) {
                *a = apply_int(op, *a, x).at("src")?;
            }
        }
        let bits: Vec<u32> = acc.iter().map(|&x| i.dst.dtype.wrap_i64(x)).collect();
        ctx.write_bits("dst", &i.dst, &bits)?;
    } else {
        let nm = *ctx.numerics;
        let v = ctx.read_f32("src", &i.src)?;
        let step = if op == AluOp::Average { AluOp::Add } else { op };
        let mut acc: Vec<f32> = v[..f].to_vec();
        for row in v.chunks_exact(f.max(1)).skip(1).take(p - 1) {
            for (a, &x) in acc.iter_mut().zip(row) {
                *a = apply_f32(step, *a, x, &nm);
            }
        }
        if op == AluOp::Average {
            let n = p as f32; // p ≤ 128: exact
            // One correctly rounded fp32 division; the `× 1` applies the subnormal setting.
            acc.iter_mut()
                .for_each(|a| *a = apply_f32(AluOp::Multiply, *a / n, 1.0, &nm));
        }
        ctx.write_f32("dst", &i.dst, &acc)?;
        ctx.stats.flops += (p * f) as u64;
    }
    ctx.cost_stream(f.saturating_mul(p.div_ceil(CORE_PARTITIONS)));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// sequence_bounds

/// For one row of n segment ids: `dst[0, k]` = index of the first element of the run of equal
/// ids containing k, `dst[0, n + k]` = one past its last element; an id of 0 is padding and gets
/// (n, −1). Ids are compared in their own dtype (f32 compares as fp32: −0 is padding too, NaN
/// equals nothing), as the NumPy reference in the NKI docs does. P must be 1 (NKI docs).
pub fn sequence_bounds(ctx: &mut Ctx, i: &SequenceBounds) -> OpResult<()> {
    prepare(ctx, "segment_ids", &i.segment_ids, Access::Read)?;
    prepare(ctx, "dst", &i.dst, Access::Write)?;
    let allowed = [DType::F32, DType::I32];
    super::require_dtype(
        "segment_ids",
        &i.segment_ids,
        &allowed,
        "segment ids are float32 or int32",
    )?;
    super::require_dtype("dst", &i.dst, &allowed, "sequence bounds are float32 or int32")?;
    if i.segment_ids.partitions != 1 {
        return Err(ErrorKind::ShapeMismatch(format!(
            "the partition dimension must be 1, got {}",
            i.segment_ids.partitions
        )))
        .at("segment_ids");
    }
    let n = i.segment_ids.free_elems();
    if i.dst.partitions != 1 || i.dst.free_elems() != 2 * n {
        return Err(ErrorKind::ShapeMismatch(format!(
            "dst must be [1, 2 × {n}] (starts, then ends), got [{}, {}]",
            i.dst.partitions,
            i.dst.free_elems()
        )))
        .at("dst");
    }
    // Equality in the ids' own dtype: exact integers, or fp32 `==`.
    let (same, zero): (Vec<bool>, Vec<bool>) = if i.segment_ids.dtype == DType::I32 {
        let v = ctx.read_i64("segment_ids", &i.segment_ids)?;
        (
            v.windows(2).map(|w| w[0] == w[1]).collect(),
            v.iter().map(|&x| x == 0).collect(),
        )
    } else {
        let v = ctx.read_f32("segment_ids", &i.segment_ids)?;
        (
            v.windows(2).map(|w| w[0] == w[1]).collect(),
            v.iter().map(|&x| x == 0.0).collect(),
        )
    };
    let mut out = vec![0i64; 2 * n];
    for k in 0..n {
        out[k] = if zero[k] {
            n as i64
        } else if k > 0 && same[k - 1] {
            out[k - 1]
        } else {
            k as i64
        };
    }
    for k in (0..n).rev() {
        out[n + k] = if zero[k] {
            -1
        } else if k + 1 < n && same[k] {
            out[n + k + 1]
        } else {
            k as i64 + 1
        };
    }
    if i.dst.dtype == DType::I32 {
        ctx.write_i64("dst", &i.dst, &out)?;
    } else {
        // |values| ≤ 65 536 (the free-size limit), so fp32 holds them exactly.
        let f: Vec<f32> = out.iter().map(|&x| x as f32).collect();
        ctx.write_f32("dst", &i.dst, &f)?;
    }
    ctx.cost_stream(2 * n);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// nonzero_with_count (NeuronCore-v3+): the nonzero positions of a row, padding, then the count.

/// GpSimd partitions per core: core k reaches partitions 16k..16k+16 and `nonzero_with_count`
/// uses only its first one [`nki.isa` 2.32].
pub const GPSIMD_CORE_PARTITIONS: usize = 16;

/// For each row of `src` whose SBUF partition is a multiple of 16 (the first partition of a GpSimd
/// core): `dst` row = the positions `i + index_offset` of its nonzero elements in order, then
/// `padding_val` up to `F` elements, then the count. Other partitions of both are not accessed.
pub fn nonzero_with_count(ctx: &mut Ctx, i: &NonzeroWithCount) -> OpResult<()> {
    prepare(ctx, "src", &i.src, Access::Read)?;
    prepare(ctx, "dst", &i.dst, Access::Write)?;
    super::require_dtype("src", &i.src, &[DType::F32, DType::I32], "src is float32 or int32")?;
    super::require_dtype("dst", &i.dst, &[DType::I32], "dst is int32")?;
    let index_offset = int32_param("index_offset", i.index_offset)?;
    let padding_val = int32_param("padding_val", i.padding_val)?;
    let f = i.src.free_elems();
    if i.dst.partitions != i.src.partitions || i.dst.free_elems() != f + 1 {
        return Err(ErrorKind::ShapeMismatch(format!(
            "dst must be [{} partitions × F + 1 = {}], got [{} × {}]",
            i.src.partitions,
            f + 1,
            i.dst.partitions,
            i.dst.free_elems()
        )))
        .at("dst");
    }
    // The start-partition rule (`prepare`) puts both tiles on quadrant boundaries, so src row r
    // and dst row r are the first partition of a GpSimd core together.
    let row = |ap: &AccessPattern, r: usize| AccessPattern {
        start_partition: ap.start_partition + r,
        partitions: 1,
        ..ap.clone()
    };
    let rows = (0..i.src.partitions).filter(|r| (i.src.start_partition + r).is_multiple_of(GPSIMD_CORE_PARTITIONS));
    let mut written = 0u64;
    for r in rows {
        let src = row(&i.src, r);
        let nonzero: Vec<bool> = if i.src.dtype == DType::I32 {
            ctx.mem.read_i64(&src).at("src")?.iter().map(|&v| v != 0).collect()
        } else {
            // fp32 `!= 0`: −0 is zero, NaN is not.
            ctx.mem.read_f32(&src).at("src")?.iter().map(|&v| v != 0.0).collect()
        };
        let mut out: Vec<i64> = (0..f)
            .filter(|&k| nonzero[k])
            .map(|k| k as i64 + i64::from(index_offset))
            .collect();
        let count = out.len() as i64;
        out.resize(f, i64::from(padding_val));
        out.push(count);
        ctx.mem.write_i64(&row(&i.dst, r), &out).at("dst")?;
        written += out.len() as u64;
    }
    ctx.stats.elements.add(ctx.engine, written);
    ctx.cost_stream(f + 1);
    Ok(())
}
