//! TensorE (PE array): `nc_matmul` and the identity-matmul transpose.
//!
//! `dst[M, N] (+)= stationary[K, M]ᵀ · moving[K, N]`, contraction over the partition axis of both
//! inputs. Inputs are read from SBUF and decoded once to f32 (exact for every accepted dtype);
//! each product is an IEEE fp32 multiply (exact for ≤16-bit inputs unless it underflows) and the K
//! products of one output element are summed in fp32 in the order the numerics setting names
//! ([`MatmulAccumulation`]). The result is written to PSUM as fp32; `accumulate` adds the finished
//! sum to the value already there (one more fp32 add), as PSUM's near-memory accumulator does.

use super::{Access, Ctx};
use crate::dtype::DType;
use crate::error::{AtOperand, ErrorKind, OpResult};
use crate::mem::{AccessPattern, MemSpace};
use crate::numerics::MatmulAccumulation;
use crate::program::{NcMatmul, NcMatmulMx, NcTranspose};
use crate::target::MatmulPerfMode;

/// Input dtypes of the PE array (no integer datapath on NC-v2).
const MATMUL_INPUTS: [DType; 7] = [
    DType::F32,
    DType::Tf32,
    DType::Bf16,
    DType::F16,
    DType::Fp8E4m3,
    DType::Fp8E4m3fn,
    DType::Fp8E5m2,
];

fn is_32bit(d: DType) -> bool {
    matches!(d, DType::F32 | DType::Tf32)
}

/// TensorE reads its inputs from SBUF only (the generic access rule also lets it read PSUM, for
/// the accumulating write's read-modify-write of its own bank).
fn require_sbuf_input(ctx: &Ctx, operand: &str, ap: &AccessPattern) -> OpResult<()> {
    ctx.check_access(operand, ap, Access::Read)?;
    if ap.mem != MemSpace::Sbuf {
        return Err(ErrorKind::MemoryNotAccessible {
            engine: ctx.engine.name(),
            access: "read",
            memory: ap.mem.name(),
        })
        .at(operand);
    }
    Ok(())
}

/// Rejects malformed access patterns (too many dims, sizes beyond uint16, out of memory) before
/// any size is computed from them, so that size arithmetic below cannot overflow.
fn well_formed(ctx: &Ctx, operand: &str, ap: &AccessPattern) -> OpResult<()> {
    ctx.mem.resolve(ap).map(|_| ()).at(operand)
}

fn require_pe_dtype(operand: &str, ap: &AccessPattern) -> OpResult<()> {
    if MATMUL_INPUTS.contains(&ap.dtype) {
        return Ok(());
    }
    let why = if ap.dtype.is_float() {
        "TensorE takes fp8 (e4m3, e4m3fn, e5m2), bf16, fp16, tf32 or fp32 inputs"
    } else {
        "TensorE has no integer datapath (fp8/bf16/fp16/tf32/fp32 inputs only)"
    };
    Err(ErrorKind::UnsupportedDType {
        dtype: ap.dtype.name(),
        why: why.into(),
    })
    .at(operand)
}

/// The destination's bytes in every partition must lie within one PSUM bank.
fn check_psum_bank(ctx: &Ctx, operand: &str, ap: &AccessPattern) -> OpResult<()> {
    let Some((lo, hi)) = ap.free_extent() else {
        return Ok(());
    };
    let size = ap.dtype.size() as i128;
    let start = ap.offset as i128 + lo as i128 * size;
    let end = ap.offset as i128 + (hi as i128 + 1) * size;
    let bank = ctx.target.psum_bank_bytes as i128;
    if bank > 0 && start >= 0 && end > start && start / bank != (end - 1) / bank {
        return Err(ErrorKind::PsumBankOverflow {
            offset: ap.offset,
            bytes: (end - start) as usize,
            bank: ctx.target.psum_bank_bytes,
        })
        .at(operand);
    }
    Ok(())
}

/// A matmul destination is `[M partitions × N]` inside one PSUM bank.
fn check_matmul_dst(ctx: &Ctx, dst: &AccessPattern, m: usize, n: usize) -> OpResult<()> {
    if dst.partitions != m || dst.free_elems() != n {
        return Err(ErrorKind::ShapeMismatch(format!(
            "dst must be [M = {m} partitions × N = {n}], got [{} × {}]",
            dst.partitions,
            dst.free_elems()
        )))
        .at("dst");
    }
    check_psum_bank(ctx, "dst", dst)
}

/// Writes a matmul result to PSUM; `accumulate` adds it to what is there (one more fp32 add).
fn write_psum(ctx: &mut Ctx, dst: &AccessPattern, mut out: Vec<f32>, accumulate: bool) -> OpResult<()> {
    if accumulate {
        let old = ctx.read_f32("dst", dst)?;
        for (o, &prev) in out.iter_mut().zip(&old) {
            // PSUM value first: `prev + sum` (the operand order decides which NaN payload wins).
            #[allow(clippy::assign_op_pattern)]
            {
                *o = prev + *o;
            }
        }
    }
    ctx.write_f32("dst", dst, &out)
}

/// `dst[M, N] (+)= stationary[K, M]ᵀ · moving[K, N]`.
pub fn nc_matmul(ctx: &mut Ctx, i: &NcMatmul) -> OpResult<()> {
    require_sbuf_input(ctx, "stationary", &i.stationary)?;
    require_sbuf_input(ctx, "moving", &i.moving)?;
    ctx.check_access("dst", &i.dst, Access::Write)?;
    well_formed(ctx, "stationary", &i.stationary)?;
    well_formed(ctx, "moving", &i.moving)?;

    require_pe_dtype("stationary", &i.stationary)?;
    require_pe_dtype("moving", &i.moving)?;
    if is_32bit(i.stationary.dtype) != is_32bit(i.moving.dtype) {
        // Blame the 16/8-bit operand: it is the one that cannot pair with the 32-bit one.
        let (bad_name, bad, other) = if is_32bit(i.stationary.dtype) {
            ("moving", &i.moving, &i.stationary)
        } else {
            ("stationary", &i.stationary, &i.moving)
        };
        return Err(ErrorKind::UnsupportedDType {
            dtype: bad.dtype.name(),
            why: format!(
                "the other matmul input is {}: tf32/fp32 inputs pair only with tf32/fp32",
                other.dtype
            ),
        })
        .at(bad_name);
    }
    // Rows of the contraction per partition: 2 in `double_row` (FP8), else 1.
    let rows = perf_mode_rows(ctx, i)?;
    let parts = i.stationary.partitions;
    if parts == 0 {
        return Err(ErrorKind::Invalid(
            "contraction size K (partitions of stationary) must be at least 1".into(),
        ))
        .at("stationary");
    }
    if i.moving.partitions != parts {
        return Err(ErrorKind::ShapeMismatch(format!(
            "contraction sizes differ: stationary has K = {parts} partitions, moving has {}",
            i.moving.partitions
        )))
        .at("moving");
    }
    for (operand, ap, what) in [("stationary", &i.stationary, "M"), ("moving", &i.moving, "N")] {
        if ap.free_elems() % rows != 0 {
            return Err(ErrorKind::ShapeMismatch(format!(
                "perf_mode=double_row: each partition of {operand} holds two contraction rows [2, {what}], \
                 so an even number of elements, got {}",
                ap.free_elems()
            )))
            .at(operand);
        }
    }
    // The contraction: partition p's elements are rows p·rows .. p·rows + rows - 1 of it (a
    // partition-major read returns [parts][rows × M] = [parts × rows][M] as is).
    let k = parts * rows;
    let m = i.stationary.free_elems() / rows;
    if m > ctx.target.stationary_fmax {
        return Err(ErrorKind::FreeSizeLimit {
            size: m,
            limit: ctx.target.stationary_fmax,
            what: "elements per partition of the stationary matmul operand (M)",
        })
        .at("stationary");
    }
    let n = i.moving.free_elems() / rows;
    if n > ctx.target.moving_fmax {
        return Err(ErrorKind::FreeSizeLimit {
            size: n,
            limit: ctx.target.moving_fmax,
            what: "elements per partition of the moving matmul operand (N)",
        })
        .at("moving");
    }
    well_formed(ctx, "dst", &i.dst)?;
    if i.dst.dtype != DType::F32 {
        return Err(ErrorKind::UnsupportedDType {
            dtype: i.dst.dtype.name(),
            why: "TensorE writes fp32 to PSUM on NeuronCore-v2".into(),
        })
        .at("dst");
    }
    check_matmul_dst(ctx, &i.dst, m, n)?;

    let st = ctx.read_f32("stationary", &i.stationary)?;
    let mv = ctx.read_f32("moving", &i.moving)?;
    let out = matmul_kn(&st, &mv, k, m, n, ctx.numerics.matmul_accumulation);
    write_psum(ctx, &i.dst, out, i.accumulate)?;

    ctx.stats.flops += 2 * (k as u64) * (m as u64) * (n as u64);
    let fp32 = i.stationary.dtype == DType::F32 || i.moving.dtype == DType::F32;
    let init = ctx.target.matmul_init_cycles as usize;
    let cycles = (m.min(init).max(n) as u64) * if fp32 { ctx.target.matmul_fp32_factor } else { 1 };
    ctx.cost_cycles(cycles);
    Ok(())
}

/// The contraction rows per partition of `i.perf_mode`, after checking that the generation has
/// the mode and that the inputs suit it: `double_row` takes FP8 only (AWS's `nc_matmul`:
/// "FP8 only", two FP8 MACs per PE per cycle) and gives 2; `quad` is `nc_matmul_mx`'s mode.
fn perf_mode_rows(ctx: &Ctx, i: &NcMatmul) -> OpResult<usize> {
    let mode = i.perf_mode;
    if mode.is_none() {
        return Ok(1);
    }
    if !ctx.target.has_perf_mode(mode) {
        return Err(ErrorKind::NotOnTarget {
            opcode: if mode == MatmulPerfMode::DoubleRow {
                "nc_matmul with perf_mode=double_row"
            } else {
                "nc_matmul with perf_mode=quad"
            },
            target: ctx.target.label,
        })
        .at("perf_mode");
    }
    if mode != MatmulPerfMode::DoubleRow {
        return Err(ErrorKind::Invalid(format!(
            "perf_mode={} is nc_matmul_mx's mode (MX inputs with scales), not nc_matmul's",
            mode.name()
        )))
        .at("perf_mode");
    }
    for (operand, ap) in [("stationary", &i.stationary), ("moving", &i.moving)] {
        if !ap.dtype.is_fp8() {
            return Err(ErrorKind::UnsupportedDType {
                dtype: ap.dtype.name(),
                why: "perf_mode=double_row multiplies FP8 inputs only".into(),
            })
            .at(operand);
        }
    }
    Ok(2)
}

/// TensorE transpose: `dst[f, p] = src[p, f]`, computed as the fp32 matmul
/// `dst = srcᵀ · I` (src stationary, a `[P, P]` identity moving), so a NaN or ±Inf anywhere in
/// column `f` of `src` turns all of row `f` of `dst` into NaN (0·NaN = 0·Inf = NaN), as on NC-v2.
/// The fp32 result is written with a cast to dst's dtype (fp32 or src's dtype).
pub fn nc_transpose(ctx: &mut Ctx, i: &NcTranspose) -> OpResult<()> {
    require_sbuf_input(ctx, "src", &i.src)?;
    ctx.check_access("dst", &i.dst, Access::Write)?;
    well_formed(ctx, "src", &i.src)?;
    require_pe_dtype("src", &i.src)?;
    let p = i.src.partitions;
    let f = i.src.free_elems();
    let limit = ctx.target.stationary_fmax;
    if f > limit {
        return Err(ErrorKind::FreeSizeLimit {
            size: f,
            limit,
            what: "elements per partition of a TensorE transpose input",
        })
        .at("src");
    }
    well_formed(ctx, "dst", &i.dst)?;
    if i.dst.dtype != DType::F32 && i.dst.dtype != i.src.dtype {
        return Err(ErrorKind::UnsupportedDType {
            dtype: i.dst.dtype.name(),
            why: format!("a TensorE transpose writes fp32 or the input's dtype ({})", i.src.dtype),
        })
        .at("dst");
    }
    if i.dst.partitions != f || i.dst.free_elems() != p {
        return Err(ErrorKind::ShapeMismatch(format!(
            "dst must be [{f} partitions × {p}] (src is [{p} × {f}]), got [{} × {}]",
            i.dst.partitions,
            i.dst.free_elems()
        )))
        .at("dst");
    }
    check_psum_bank(ctx, "dst", &i.dst)?;
    let src = ctx.read_f32("src", &i.src)?;
    let mut identity = vec![0.0f32; p * p];
    for d in 0..p {
        identity[d * p + d] = 1.0;
    }
    let out = matmul_kn(&src, &identity, p, f, p, ctx.numerics.matmul_accumulation);
    ctx.write_f32("dst", &i.dst, &out)?;
    let init = ctx.target.matmul_init_cycles as usize;
    let fp32 = i.src.dtype == DType::F32;
    let cycles = (p.max(f.min(init)) as u64) * if fp32 { ctx.target.matmul_fp32_factor } else { 1 };
    ctx.cost_cycles(cycles);
    Ok(())
}

/// `out[m][n] = Σ_k st[k][m] · mv[k][n]` with `st` `[K][M]` and `mv` `[K][N]` row-major (k-major,
/// as a partition-major read returns them); `out` is `[M][N]`. Every product is one fp32 multiply;
/// the sum of one output element is ordered by `order`.
pub fn matmul_kn(st: &[f32], mv: &[f32], k: usize, m: usize, n: usize, order: MatmulAccumulation) -> Vec<f32> {
    debug_assert!(st.len() == k * m && mv.len() == k * n);
    match order {
        MatmulAccumulation::Sequential => kernel::sequential(st, mv, k, m, n),
        MatmulAccumulation::Pairwise => pairwise(st, mv, k, m, n),
    }
}

/// Pairwise (adder-tree) order: the K products are summed level by level, adjacent pairs first —
/// `[p0+p1, p2+p3, …]`, an odd last element passing to the next level unchanged — until one
/// value is left. Each addition is rounded to fp32.
fn pairwise(st: &[f32], mv: &[f32], k: usize, m: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; m * n];
    if n == 0 || k == 0 {
        return out;
    }
    // Both buffers hold all K rows: the levels swap them, so after an odd number of levels the
    // products of the next output row are written into what was `next`.
    let mut cur = vec![0.0f32; k * n];
    let mut next = vec![0.0f32; k * n];
    for (mi, out_row) in out.chunks_exact_mut(n).enumerate() {
        for ((row, mv_row), st_row) in cur.chunks_exact_mut(n).zip(mv.chunks_exact(n)).zip(st.chunks_exact(m)) {
            let a = st_row[mi];
            for (c, &b) in row.iter_mut().zip(mv_row) {
                *c = a * b;
            }
        }
        let mut len = k;
        while len > 1 {
            let half = len / 2;
            for (j, dst) in next.chunks_exact_mut(n).take(half).enumerate() {
                let x = &cur[2 * j * n..(2 * j + 1) * n];
                let y = &cur[(2 * j + 1) * n..(2 * j + 2) * n];
                for ((d, &a), &b) in dst.iter_mut().zip(x).zip(y) {
                    *d = a + b;
                }
            }
            if len % 2 == 1 {
                next[half * n..(half + 1) * n].copy_from_slice(&cur[(len - 1) * n..len * n]);
            }
            len = len.div_ceil(2);
            std::mem::swap(&mut cur, &mut next);
        }
        out_row.copy_from_slice(&cur[..n]);
    }
    out
}

/// The sequential-order kernel: for every output element `s = -0; for k in 0..K { s = s + a·b }`
/// (a multiply then an add, never fused; starting from -0 makes the first addition exact, so the
/// result is the IEEE fp32 left-to-right sum of the K products, signed zeros included).
///
/// Register-blocked: an `MB × NB` block of outputs stays in vector registers while k runs, so
/// every element still gets its additions in k order. On x86-64 with AVX (checked at run time)
/// the block is written with 256-bit intrinsics (separate `mul` and `add`, no FMA); elsewhere a
/// portable loop computes the same values.
mod kernel {
    use std::borrow::Cow;

    pub fn sequential(st: &[f32], mv: &[f32], k: usize, m: usize, n: usize) -> Vec<f32> {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx") {
                // SAFETY: the CPU supports AVX, checked just above.
                return unsafe { x86::seq_avx(st, mv, k, m, n) };
            }
        }
        portable(st, mv, k, m, n)
    }

    /// Copies a `[rows][cols]` matrix into `[rows][cols_padded]` with zero padding (borrowing
    /// when no padding is needed).
    fn padded(src: &[f32], rows: usize, cols: usize, cols_padded: usize) -> Cow<'_, [f32]> {
        if cols == cols_padded {
            return Cow::Borrowed(src);
        }
        let mut v = vec![0.0f32; rows * cols_padded];
        if cols > 0 {
            for (d, s) in v.chunks_exact_mut(cols_padded).zip(src.chunks_exact(cols)) {
                d[..cols].copy_from_slice(s);
            }
        }
        Cow::Owned(v)
    }

    /// Drops the padding columns of a `[rows][cols_padded]` result.
    fn unpadded(mut out: Vec<f32>, rows: usize, cols: usize, cols_padded: usize) -> Vec<f32> {
        if cols == cols_padded {
            out.truncate(rows * cols);
            return out;
        }
        let mut v = Vec::with_capacity(rows * cols);
        for row in out.chunks_exact(cols_padded).take(rows) {
            v.extend_from_slice(&row[..cols]);
        }
        v
    }

    /// Portable version (and the reference the vector versions must equal bit for bit).
    fn portable(st: &[f32], mv: &[f32], k: usize, m: usize, n: usize) -> Vec<f32> {
        let mut out = vec![-0.0f32; m * n];
        for (srow, mrow) in st.chunks_exact(m.max(1)).zip(mv.chunks_exact(n.max(1))).take(k) {
            for (orow, &a) in out.chunks_exact_mut(n.max(1)).zip(srow) {
                for (o, &b) in orow.iter_mut().zip(mrow) {
                    *o += a * b;
                }
            }
        }
        out
    }

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use super::{padded, unpadded};
        use std::arch::x86_64::*;

        /// Generates a blocked kernel: `$mb` rows × `$nv` vectors of `$lanes` floats per block.
        macro_rules! blocked_kernel {
            ($name:ident, $feature:literal, $vec:ty, $lanes:expr, $mb:expr, $nv:expr,
             $set1:ident, $load:ident, $store:ident, $mul:ident, $add:ident) => {
                #[target_feature(enable = $feature)]
                pub unsafe fn $name(st: &[f32], mv: &[f32], k: usize, m: usize, n: usize) -> Vec<f32> {
                    const MB: usize = $mb;
                    const NB: usize = $lanes * $nv;
                    let mp = m.div_ceil(MB) * MB;
                    let np = n.div_ceil(NB) * NB;
                    if mp == 0 || np == 0 || k == 0 {
                        return vec![-0.0; m * n];
                    }
                    let st = padded(st, k, m, mp);
                    let mv = padded(mv, k, n, np);
                    // Every pointer below stays inside these lengths: rows kk < k of width mp / np,
                    // columns m0 + r < mp and n0 + NB <= np.
                    assert!(st.len() == k * mp && mv.len() == k * np);
                    let mut out = vec![0.0f32; mp * np];
                    let (sp, mvp, op) = (st.as_ptr(), mv.as_ptr(), out.as_mut_ptr());
                    for n0 in (0..np).step_by(NB) {
                        for m0 in (0..mp).step_by(MB) {
                            // SAFETY: target feature enabled by the caller's check; all offsets
                            // are in bounds (see the assert above).
                            unsafe {
                                let mut acc: [[$vec; $nv]; MB] = [[$set1(-0.0); $nv]; MB];
                                for kk in 0..k {
                                    let brow = mvp.add(kk * np + n0);
                                    let mut b: [$vec; $nv] = [$set1(0.0); $nv];
                                    for v in 0..$nv {
                                        b[v] = $load(brow.add(v * $lanes));
                                    }
                                    let arow = sp.add(kk * mp + m0);
                                    for r in 0..MB {
                                        let x = $set1(*arow.add(r));
                                        for v in 0..$nv {
                                            acc[r][v] = $add(acc[r][v], $mul(x, b[v]));
                                        }
                                    }
                                }
                                for r in 0..MB {
                                    let orow = op.add((m0 + r) * np + n0);
                                    for v in 0..$nv {
                                        $store(orow.add(v * $lanes), acc[r][v]);
                                    }
                                }
                            }
                        }
                    }
                    unpadded(out, m, n, np)
                }
            };
        }

        // An AVX-512 instance (`__m512`, 16 lanes, 8 × 2 block) doubles the speed again, but its
        // intrinsics need Rust 1.89 (the workspace's MSRV is 1.85).
        blocked_kernel!(
            seq_avx,
            "avx",
            __m256,
            8,
            4,
            2,
            _mm256_set1_ps,
            _mm256_loadu_ps,
            _mm256_storeu_ps,
            _mm256_mul_ps,
            _mm256_add_ps
        );
    }

    #[cfg(test)]
    pub(super) fn portable_for_tests(st: &[f32], mv: &[f32], k: usize, m: usize, n: usize) -> Vec<f32> {
        portable(st, mv, k, m, n)
    }
}

/// Element dtypes `nc_matmul_mx` reads (4-packed MXFP8 / MXFP4).
const MX_INPUTS: [DType; 3] = [DType::Fp8E5m2X4, DType::Fp8E4m3fnX4, DType::Fp4E2m1fnX4];

/// Dequantizes an MX data tile (`[Kp, F]` packed, partition-major) to the `[4·Kp, F]` fp32
/// matrix of its codes times their group's scale: row `4p + k` is code `k` of partition `p`.
/// Exact unless a value leaves fp32's range (a NaN scale gives NaN).
fn mx_dequantize(packed: DType, bits: &[u32], scales: &[u8], kp: usize, f: usize) -> Vec<f32> {
    use super::mx;
    let (element, _) = packed.packed_element().expect("checked: a packed dtype");
    let mut out = vec![0.0f32; mx::PACK * kp * f];
    for p in 0..kp {
        let srow = mx::scale_row(p);
        for c in 0..f {
            let s = mx::scale_value(scales[srow * f + c]);
            for k in 0..mx::PACK {
                let code = mx::unpack(packed, bits[p * f + c], k);
                out[(mx::PACK * p + k) * f + c] = (f64::from(element.decode_f32(code)) * s) as f32;
            }
        }
    }
    out
}

/// Row tiling of `nc_matmul_mx`: both of `tile_position = (start_row, 0)` and `tile_size =
/// (row_size ∈ {32, 64, 128}, 128)` or neither; `start_row` a multiple of `row_size` inside the
/// array; the stationary tile no taller than a row tile. Results do not depend on the tile.
fn check_mx_tiling(ctx: &Ctx, i: &NcMatmulMx) -> OpResult<()> {
    let rows = ctx.target.pe_rows;
    let cols = ctx.target.pe_cols;
    let (pos, size) = match (i.tile_position, i.tile_size) {
        (None, None) => return Ok(()),
        (Some(p), Some(s)) => (p, s),
        (Some(_), None) => {
            return Err(ErrorKind::Invalid("tile_position needs tile_size".into())).at("tile_size");
        }
        (None, Some(_)) => {
            return Err(ErrorKind::Invalid("tile_size needs tile_position".into())).at("tile_position");
        }
    };
    let [row_size, col_size] = size;
    if ![rows / 4, rows / 2, rows].contains(&row_size) || col_size != cols {
        return Err(ErrorKind::Invalid(format!(
            "nc_matmul_mx row tiling: tile_size is ({}, {cols}), ({}, {cols}) or ({rows}, {cols}), got ({row_size}, {col_size})",
            rows / 4,
            rows / 2
        )))
        .at("tile_size");
    }
    let [start_row, start_col] = pos;
    if start_col != 0 || !start_row.is_multiple_of(row_size) || start_row + row_size > rows {
        return Err(ErrorKind::Invalid(format!(
            "tile_position must be (a multiple of {row_size} below {rows}, 0), got ({start_row}, {start_col})"
        )))
        .at("tile_position");
    }
    if i.stationary.partitions > row_size {
        return Err(ErrorKind::ShapeMismatch(format!(
            "stationary has {} partitions, more than the {row_size}-row tile",
            i.stationary.partitions
        )))
        .at("stationary");
    }
    Ok(())
}

/// `dst[M, N] (+)= Σ_{p, k} deq(stationary)[4p + k, m] · deq(moving)[4p + k, n]`: both MX tiles
/// dequantized ([`mx_dequantize`]), then the fp32 matmul of [`nc_matmul`] over K = 4·Kp (products
/// rounded to fp32, summed in the `matmul_accumulation` order), written to PSUM as fp32 or bf16.
pub fn nc_matmul_mx(ctx: &mut Ctx, i: &NcMatmulMx) -> OpResult<()> {
    use super::mx;
    for (name, ap) in [
        ("stationary", &i.stationary),
        ("moving", &i.moving),
        ("stationary_scale", &i.stationary_scale),
        ("moving_scale", &i.moving_scale),
    ] {
        require_sbuf_input(ctx, name, ap)?;
        well_formed(ctx, name, ap)?;
    }
    ctx.check_access("dst", &i.dst, Access::Write)?;
    well_formed(ctx, "dst", &i.dst)?;
    for (name, ap) in [("stationary", &i.stationary), ("moving", &i.moving)] {
        super::require_dtype(
            name,
            ap,
            &MX_INPUTS,
            "nc_matmul_mx takes float8_e5m2_x4, float8_e4m3fn_x4 or float4_e2m1fn_x4",
        )?;
    }
    let bf16_out = ctx.target.psum_bf16_output;
    let dst_dtypes: &[DType] = if bf16_out {
        &[DType::F32, DType::Bf16]
    } else {
        &[DType::F32]
    };
    super::require_dtype(
        "dst",
        &i.dst,
        dst_dtypes,
        "nc_matmul_mx writes fp32 (or bf16 where PSUM takes it)",
    )?;
    mx::check_data_partitions("stationary", &i.stationary, ctx.target.pe_rows)?;
    let kp = i.stationary.partitions;
    if i.moving.partitions != kp {
        return Err(ErrorKind::ShapeMismatch(format!(
            "contraction sizes differ: stationary has {kp} partitions, moving has {}",
            i.moving.partitions
        )))
        .at("moving");
    }
    let m = i.stationary.free_elems();
    if m > ctx.target.stationary_fmax || !m.is_multiple_of(2) {
        return Err(ErrorKind::ShapeMismatch(format!(
            "the stationary free size (M) of nc_matmul_mx is even and at most {}, got {m}",
            ctx.target.stationary_fmax
        )))
        .at("stationary");
    }
    let n = i.moving.free_elems();
    // A bf16 destination holds twice the fp32 elements in a bank [nki.isa 2.32].
    let n_max = ctx.target.moving_fmax * if i.dst.dtype == DType::Bf16 { 2 } else { 1 };
    if n > n_max {
        return Err(ErrorKind::FreeSizeLimit {
            size: n,
            limit: n_max,
            what: "elements per partition of the moving nc_matmul_mx operand (N)",
        })
        .at("moving");
    }
    mx::check_scale_tile("stationary_scale", &i.stationary_scale, kp, m)?;
    mx::check_scale_tile("moving_scale", &i.moving_scale, kp, n)?;
    check_matmul_dst(ctx, &i.dst, m, n)?;
    check_mx_tiling(ctx, i)?;

    let sb = ctx.read_bits("stationary", &i.stationary)?;
    let mb = ctx.read_bits("moving", &i.moving)?;
    let ss = mx::read_scales(ctx, "stationary_scale", &i.stationary_scale, kp)?;
    let ms = mx::read_scales(ctx, "moving_scale", &i.moving_scale, kp)?;
    let st = mx_dequantize(i.stationary.dtype, &sb, &ss, kp, m);
    let mv = mx_dequantize(i.moving.dtype, &mb, &ms, kp, n);
    let k = mx::PACK * kp;
    let out = matmul_kn(&st, &mv, k, m, n, ctx.numerics.matmul_accumulation);
    write_psum(ctx, &i.dst, out, i.accumulate)?;
    ctx.stats.flops += 2 * (k as u64) * (m as u64) * (n as u64);
    // Quad mode: 4·Kp rows of K in the time of Kp [ARCH3: MXFP8/4 at 4× the BF16 rate].
    let init = ctx.target.matmul_init_cycles as usize;
    ctx.cost_cycles(m.min(init).max(n) as u64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain reference: the sequential sum written the obvious way.
    fn reference(st: &[f32], mv: &[f32], k: usize, m: usize, n: usize) -> Vec<f32> {
        let mut out = vec![0.0; m * n];
        for mi in 0..m {
            for ni in 0..n {
                let mut s = st[mi] * mv[ni];
                for kk in 1..k {
                    s += st[kk * m + mi] * mv[kk * n + ni];
                }
                out[mi * n + ni] = s;
            }
        }
        out
    }

    #[test]
    fn blocked_kernel_equals_plain_sequential_sum_bitwise() {
        // Awkward sizes exercise the padding; values with wide exponent spread make rounding
        // order-sensitive, so any reordering would show.
        let mut seed = 0x1234_5678u32;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            let e = (seed % 40) as i32 - 20;
            let s = if seed & 0x8000 != 0 { -1.0 } else { 1.0 };
            s * (1.0 + (seed >> 8) as f32 / 16777216.0) * 2f32.powi(e)
        };
        for &(k, m, n) in &[
            (1, 1, 1),
            (3, 5, 7),
            (17, 9, 33),
            (128, 128, 512),
            (64, 13, 100),
            (2, 128, 1),
        ] {
            let st: Vec<f32> = (0..k * m).map(|_| rnd()).collect();
            let mv: Vec<f32> = (0..k * n).map(|_| rnd()).collect();
            let got = matmul_kn(&st, &mv, k, m, n, MatmulAccumulation::Sequential);
            let want = reference(&st, &mv, k, m, n);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
            assert_eq!(bits(&got), bits(&want), "k={k} m={m} n={n}");
            let portable = kernel::portable_for_tests(&st, &mv, k, m, n);
            assert_eq!(bits(&portable), bits(&want), "portable k={k} m={m} n={n}");
        }
    }

    #[test]
    fn sequential_keeps_negative_zero() {
        // (-0)·1 + (-0)·1 = -0 in IEEE; a sum started at +0 would give +0.
        let got = matmul_kn(&[-0.0, -0.0], &[1.0, 1.0], 2, 1, 1, MatmulAccumulation::Sequential);
        assert!(got[0] == 0.0 && got[0].is_sign_negative());
    }

    #[test]
    fn pairwise_tree_shape() {
        // K = 5, products 1e8, 1, -1e8, 1, 1 (fp32): level 1 [1e8+1 = 1e8, -1e8+1 = -1e8, 1],
        // level 2 [0, 1], level 3 [1].
        let st = [1e8f32, 1.0, -1e8, 1.0, 1.0];
        let mv = [1.0f32; 5];
        let got = matmul_kn(&st, &mv, 5, 1, 1, MatmulAccumulation::Pairwise);
        assert_eq!(got, vec![1.0]);
        // Sequential: ((((1e8 + 1) - 1e8) + 1) + 1) = 2.
        let got = matmul_kn(&st, &mv, 5, 1, 1, MatmulAccumulation::Sequential);
        assert_eq!(got, vec![2.0]);
    }

    #[test]
    fn pairwise_with_an_odd_number_of_levels_and_several_rows() {
        // K = 5 takes three levels (5 → 3 → 2 → 1), leaving the buffers swapped for the second
        // output row (M = 2); this used to index past the end of the half-size buffer.
        let (k, m, n) = (5, 2, 3);
        let st: Vec<f32> = (0..k * m).map(|i| i as f32).collect();
        let mv: Vec<f32> = (0..k * n).map(|i| (i % 4) as f32).collect();
        let got = matmul_kn(&st, &mv, k, m, n, MatmulAccumulation::Pairwise);
        let want = matmul_kn(&st, &mv, k, m, n, MatmulAccumulation::Sequential);
        assert_eq!(got, want, "small integers sum exactly in any order");
        for k in 1..=9 {
            let st = vec![1.0f32; k * 3];
            let mv = vec![1.0f32; k * 2];
            assert_eq!(
                matmul_kn(&st, &mv, k, 3, 2, MatmulAccumulation::Pairwise),
                vec![k as f32; 6]
            );
        }
    }
}
