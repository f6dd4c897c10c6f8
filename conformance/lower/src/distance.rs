//! Pairwise distances: `_cdist_forward` and `_pdist_forward`, computed the way PyTorch's CPU
//! kernels compute them (aten/src/ATen/native/Distance.cpp, cpu/DistanceOpsKernel.cpp), so the
//! rounding matches.
//!
//! **Direct form** (every p; pdist always, cdist unless the matmul form is chosen):
//! `d(i, j) = finish(Σ_k map(|x1[i,k] − x2[j,k]|))` with, per p, PyTorch's specialisations:
//! p = 0 counts non-zero differences (NaN stays NaN), p = 1 sums `|δ|`, p = 2 sums `δ²` then
//! `sqrt`, p = ∞ takes the max of `|δ|`, any other p sums `|δ|^p` then takes the `1/p` power.
//! Layout: the rows `i` of x1 (all batches flattened) on the partitions, `(j, k)` on the free
//! axis. x1's row is broadcast over `j` by a stride-0 free dim of the VectorE operand, and x2 is
//! broadcast to every partition by a stride-0 partition step of its loading DMA. VectorE forms
//! `δ` (`tensor_tensor` subtract) and `map`, then `tensor_reduce` folds `k` in index order (as
//! PyTorch's scalar loop does) — add, or max for p = ∞. `pow` (`|δ|^p`, the `1/p` root and the
//! square root of p = 2, via `pow(·, 0.5)`, which is exact at 0 and ∞) runs on GpSimd, the
//! only engine with that ALU operator. Long rows are cut into chunks of `k` whose partial
//! results are combined with the same operator.
//!
//! **Matmul form** (cdist, p = 2, `compute_mode` 1 = use_mm_for_euclid_dist, or 0 with more
//! than 25 rows in x1 or x2 — PyTorch's `_euclidean_dist`):
//! `d² = [−2·x1, ‖x1‖², 1] · [x2, 1, ‖x2‖²]ᵀ`, clamped at 0, then `sqrt`. On TensorE: x1ᵀ and
//! x2ᵀ are loaded by transposing DMA patterns (k on the partitions), the squared norms are
//! column sums computed as matmuls against a ones column (`[1, rows]` in PSUM), and the two
//! augmented columns of the product are two K = 1 matmuls accumulated in PSUM after the K tiles
//! of `−2·x1ᵀ · x2ᵀ`. VectorE clamps (`max 0`) while moving PSUM to SBUF; GpSimd takes the root.
//!
//! pdist is the direct form of `cdist(x, x)` whose row `i` keeps only `j > i`: one DMA per row
//! writes that row's tail into its place in the row-major upper triangle,
//! `k(i) = i·n − i(i+1)/2`.
//!
//! PyTorch's CPU kernels take float and double only: f32 is lowered; other dtypes are
//! unsupported (double has no device dtype).

use super::matmul::{TILE_K, TILE_M, TILE_N};
use super::tile::{
    Emitter, SbufAllocator, Slot, broadcast_shapes, broadcast_strides, dma, hbm_cols, hbm_rows, imm, ts, tt,
};
use super::{LowerError, LowerRequest, Lowered};
use crate::call::TensorArg;
use crate::dtype::{TorchDType, unravel};
use trnsim::{AccessPattern, AluOp, DType, Engine, HbmRole, NcMatmul, Op, Program, TargetName, TensorReduce};

/// Elements per partition of one `(j, k)` block of the direct form (two fp32 buffers of it).
const DIRECT_BLOCK: usize = 4096;
/// PyTorch's `_cdist_forward` switches to the matmul form (compute_mode 0) above this many rows.
const MM_ROW_THRESHOLD: usize = 25;

/// PyTorch's per-p specialisation of the distance kernel.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Norm {
    /// p = 0: the number of non-zero differences.
    Zero,
    /// p = 1: Σ|δ|.
    One,
    /// p = 2: sqrt(Σδ²).
    Two,
    /// p = ∞: max|δ|.
    Inf,
    /// Any other p > 0: (Σ|δ|^p)^(1/p).
    General(f64),
}

impl Norm {
    fn from_p(p: f64) -> Option<Norm> {
        if p.is_nan() || p < 0.0 {
            None
        } else if p == 0.0 {
            Some(Norm::Zero)
        } else if p == 1.0 {
            Some(Norm::One)
        } else if p == 2.0 {
            Some(Norm::Two)
        } else if p.is_infinite() {
            Some(Norm::Inf)
        } else {
            Some(Norm::General(p))
        }
    }

    fn reduce_op(self) -> AluOp {
        if self == Norm::Inf { AluOp::Max } else { AluOp::Add }
    }
}

/// The pair of operands and the output, flattened to `batch` matrices.
struct Pairs<'a> {
    x1: &'a str,
    x2: &'a str,
    out: &'a str,
    batch: usize,
    r1: usize,
    r2: usize,
    m: usize,
    /// Element offset of each output batch's matrix in x1 / x2 (0 steps where broadcast).
    x1_base: Vec<usize>,
    x2_base: Vec<usize>,
}

/// How the direct form writes a finished `[rows, r2]` block of distances.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Store {
    /// Every `(i, j)`: row `g` of the flattened output at `g·r2` (cdist).
    Dense,
    /// Only `j > i`, packed row-major (pdist).
    UpperTriangle,
}

fn require_f32(req: &LowerRequest<'_>, name: &str) -> Result<(), LowerError> {
    let d = req.tensor(name)?.dtype;
    if d != TorchDType::F32 {
        return Err(req.unsupported(format!(
            "{d} `{name}`: PyTorch's CPU distance kernels take float and double only, and double has no device dtype"
        )));
    }
    Ok(())
}

/// Element offsets of every output batch's `[rows, cols]` matrix in an operand whose batch dims
/// `shape` broadcast to `out_batch`.
fn batch_bases(shape: &[usize], out_batch: &[usize], matrix: usize) -> Vec<usize> {
    let strides = broadcast_strides(shape, out_batch);
    let count: usize = out_batch.iter().product();
    (0..count)
        .map(|b| {
            let idx = unravel(b, out_batch);
            idx.iter().zip(&strides).map(|(&i, &s)| i * s as usize).sum::<usize>() * matrix
        })
        .collect()
}

fn f32_at(slot: Slot, partitions: usize, col: usize, free: Vec<[i64; 2]>) -> AccessPattern {
    AccessPattern::sbuf(DType::F32, 0, partitions, slot.offset + (col * 4) as u64, free)
}

/// `_cdist_forward(x1, x2, p, compute_mode)`.
pub fn lower_cdist(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let x1 = req.arg::<TensorArg>(0, "x1")?.0;
    let x2 = req.arg::<TensorArg>(1, "x2")?.0;
    let p = req.arg_or(2, "p", 2.0)?;
    let norm = Norm::from_p(p).ok_or_else(|| req.arg_error(2, "p", format!("{p}: PyTorch takes only p ≥ 0")))?;
    let mode = req.arg_or(3, "compute_mode", 0i64)?;
    if !(0..=2).contains(&mode) {
        return Err(req.arg_error(3, "compute_mode", format!("{mode} (possible modes are 0, 1, 2)")));
    }
    let out = req.output_tensor(0)?;
    for t in [x1, x2, out] {
        require_f32(req, t)?;
    }
    let (s1, s2) = (&req.tensor(x1)?.shape, &req.tensor(x2)?.shape);
    if s1.len() < 2 || s2.len() < 2 {
        return Err(req.invalid(format!("cdist needs at least 2-d operands, got {s1:?} and {s2:?}")));
    }
    let (r1, m) = (s1[s1.len() - 2], s1[s1.len() - 1]);
    let (r2, m2) = (s2[s2.len() - 2], s2[s2.len() - 1]);
    if m != m2 {
        return Err(req.invalid(format!("x1 has {m} columns and x2 {m2}: they must match")));
    }
    let (b1, b2) = (&s1[..s1.len() - 2], &s2[..s2.len() - 2]);
    let out_batch = broadcast_shapes(b1, b2)
        .ok_or_else(|| req.invalid(format!("batch dims {b1:?} and {b2:?} do not broadcast")))?;
    let want: Vec<usize> = out_batch.iter().copied().chain([r1, r2]).collect();
    if req.tensor(out)?.shape != want {
        return Err(req.invalid(format!("output shape {:?}, expected {want:?}", req.tensor(out)?.shape)));
    }
    let pairs = Pairs {
        x1,
        x2,
        out,
        batch: out_batch.iter().product(),
        r1,
        r2,
        m,
        x1_base: batch_bases(b1, &out_batch, r1 * m),
        x2_base: batch_bases(b2, &out_batch, r2 * m),
    };
    let mut e = Emitter::new(Program::new(target));
    e.program.declare(x1, DType::F32, s1, HbmRole::Input);
    if x2 != x1 {
        e.program.declare(x2, DType::F32, s2, HbmRole::Input);
    }
    e.program.declare(out, DType::F32, &want, HbmRole::Output);
    if pairs.batch * r1 * r2 == 0 {
        return Ok(Lowered::new(e.finish()));
    }
    let matmul_form =
        norm == Norm::Two && m > 0 && (mode == 1 || (mode == 0 && (r1 > MM_ROW_THRESHOLD || r2 > MM_ROW_THRESHOLD)));
    if matmul_form {
        emit_euclidean_matmul(&mut e, &pairs, target)?;
    } else {
        emit_direct(&mut e, &pairs, norm, Store::Dense, target)?;
    }
    Ok(Lowered::new(e.finish()))
}

/// `_pdist_forward(self, p)`.
pub fn lower_pdist(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let x = req.arg::<TensorArg>(0, "self")?.0;
    let p = req.arg_or(1, "p", 2.0)?;
    let norm = Norm::from_p(p).ok_or_else(|| req.arg_error(1, "p", format!("{p}: PyTorch takes only p ≥ 0")))?;
    let out = req.output_tensor(0)?;
    require_f32(req, x)?;
    require_f32(req, out)?;
    let shape = &req.tensor(x)?.shape;
    if shape.len() != 2 {
        return Err(req.invalid(format!("pdist needs a 2-d input, got {shape:?}")));
    }
    let (n, m) = (shape[0], shape[1]);
    let pairs_count = n * n.saturating_sub(1) / 2;
    if req.tensor(out)?.shape != [pairs_count] {
        return Err(req.invalid(format!(
            "output shape {:?}, expected [{pairs_count}]",
            req.tensor(out)?.shape
        )));
    }
    let mut e = Emitter::new(Program::new(target));
    e.program.declare(x, DType::F32, shape, HbmRole::Input);
    e.program.declare(out, DType::F32, &[pairs_count], HbmRole::Output);
    if pairs_count == 0 {
        return Ok(Lowered::new(e.finish()));
    }
    let pairs = Pairs {
        x1: x,
        x2: x,
        out,
        batch: 1,
        r1: n,
        r2: n,
        m,
        x1_base: vec![0],
        x2_base: vec![0],
    };
    emit_direct(&mut e, &pairs, norm, Store::UpperTriangle, target)?;
    Ok(Lowered::new(e.finish()))
}

/// The direct form (module doc). Output rows `g = b·r1 + i` are processed 128 at a time.
fn emit_direct(e: &mut Emitter, d: &Pairs<'_>, norm: Norm, store: Store, target: TargetName) -> Result<(), LowerError> {
    let t = target.params();
    let parts = t.partitions;
    let mut alloc = SbufAllocator::new(&t);
    let mut slot = |elems: usize| -> Result<Slot, LowerError> { alloc.slot(elems.max(1) * 4) };
    let (r1, r2, m) = (d.r1, d.r2, d.m);
    // Column chunk `kc` of the features, and `jc` rows of x2 per block: `jc·kc ≤ DIRECT_BLOCK`.
    let kc_max = m.clamp(1, DIRECT_BLOCK);
    let k_chunks = m.div_ceil(kc_max);
    let jc_max = (DIRECT_BLOCK / kc_max).clamp(1, r2);
    let res = slot(r2)?;
    let x1t = slot(kc_max)?;
    let x2t = slot(jc_max * kc_max)?;
    let delta = slot(jc_max * kc_max)?;
    let nan_carry = if norm == Norm::Zero {
        Some(slot(jc_max * kc_max)?)
    } else {
        None
    };
    let part = if k_chunks > 1 { Some(slot(jc_max)?) } else { None };
    let rows_total = d.batch * r1;
    let mut g0 = 0;
    while g0 < rows_total {
        let rows = (rows_total - g0).min(parts);
        // Runs of rows from one batch matrix: (first partition, batch, first row i, length).
        let mut segments = vec![];
        let mut p = 0;
        while p < rows {
            let (b, i) = ((g0 + p) / r1, (g0 + p) % r1);
            let len = (r1 - i).min(rows - p);
            segments.push((p, b, i, len));
            p += len;
        }
        if m == 0 {
            // No features: every distance is 0 (PyTorch returns zeros).
            e.memset(Engine::Vector, f32_at(res, rows, 0, vec![[1, r2 as i64]]), 0.0);
        }
        for kt in 0..k_chunks {
            let (k0, kc) = (kt * kc_max, kc_max.min(m - kt * kc_max));
            for &(p0, b, i, len) in &segments {
                let src = hbm_rows(d.x1, DType::F32, d.x1_base[b] + i * m + k0, len, m, kc);
                let dst = AccessPattern::sbuf(DType::F32, p0, len, x1t.offset, vec![[1, kc as i64]]);
                e.push(Engine::Dma, dma(dst, src));
            }
            let mut j0 = 0;
            while j0 < r2 {
                let jn = jc_max.min(r2 - j0);
                let block = (jn * kc) as i64;
                for &(p0, b, _, len) in &segments {
                    // x2's rows j0.. of this batch, the same bytes to every partition of the run.
                    let src = AccessPattern::hbm(
                        d.x2,
                        DType::F32,
                        (d.x2_base[b] + j0 * m + k0) as u64,
                        len,
                        0,
                        vec![[m as i64, jn as i64], [1, kc as i64]],
                    );
                    let dst = AccessPattern::sbuf(DType::F32, p0, len, x2t.offset, vec![[1, block]]);
                    e.push(Engine::Dma, dma(dst, src));
                }
                let flat = |s: Slot| f32_at(s, rows, 0, vec![[1, block]]);
                let x1_over_j = f32_at(x1t, rows, 0, vec![[0, jn as i64], [1, kc as i64]]);
                e.push(Engine::Vector, tt(flat(delta), x1_over_j, flat(x2t), AluOp::Subtract));
                match norm {
                    Norm::Zero => {
                        // PyTorch maps δ to min(ceil(|δ|), 1): 1 for δ ≠ 0, NaN for NaN.
                        // (δ ≠ 0) + min(|δ|, 0) is that: the second term is 0, or NaN for NaN.
                        let carry = nan_carry.expect("allocated for p = 0");
                        e.push(
                            Engine::Vector,
                            ts(
                                flat(carry),
                                flat(delta),
                                AluOp::Abs,
                                imm(0.0),
                                Some((AluOp::Min, imm(0.0))),
                            ),
                        );
                        e.push(
                            Engine::Vector,
                            ts(flat(delta), flat(delta), AluOp::NotEqual, imm(0.0), None),
                        );
                        e.push(Engine::Vector, tt(flat(delta), flat(delta), flat(carry), AluOp::Add));
                    }
                    Norm::One | Norm::Inf => {
                        e.push(Engine::Vector, ts(flat(delta), flat(delta), AluOp::Abs, imm(0.0), None));
                    }
                    Norm::Two => {
                        e.push(
                            Engine::Vector,
                            tt(flat(delta), flat(delta), flat(delta), AluOp::Multiply),
                        );
                    }
                    Norm::General(p) => {
                        let op = ts(
                            flat(delta),
                            flat(delta),
                            AluOp::Abs,
                            imm(0.0),
                            Some((AluOp::Pow, imm(p))),
                        );
                        e.push(Engine::Gpsimd, op);
                    }
                }
                let by_j = f32_at(delta, rows, 0, vec![[kc as i64, jn as i64], [1, kc as i64]]);
                let dst = match part {
                    Some(ps) if kt > 0 => f32_at(ps, rows, 0, vec![[1, jn as i64]]),
                    _ => f32_at(res, rows, j0, vec![[1, jn as i64]]),
                };
                let op = Op::TensorReduce(TensorReduce {
                    dst,
                    src: by_j,
                    op: norm.reduce_op(),
                    axes: 1,
                    negate: false,
                });
                e.push(Engine::Vector, op);
                if let Some(ps) = part
                    && kt > 0
                {
                    let cols = |s: Slot, c: usize| f32_at(s, rows, c, vec![[1, jn as i64]]);
                    e.push(
                        Engine::Vector,
                        tt(cols(res, j0), cols(res, j0), cols(ps, 0), norm.reduce_op()),
                    );
                }
                j0 += jn;
            }
        }
        let all = f32_at(res, rows, 0, vec![[1, r2 as i64]]);
        let root = match norm {
            Norm::Two if m > 0 => Some(0.5),
            Norm::General(p) if m > 0 => Some(1.0 / p),
            _ => None,
        };
        if let Some(exponent) = root {
            e.push(Engine::Gpsimd, ts(all.clone(), all, AluOp::Pow, imm(exponent), None));
        }
        match store {
            Store::Dense => {
                let dst = hbm_rows(d.out, DType::F32, g0 * r2, rows, r2, r2);
                e.push(Engine::Dma, dma(dst, f32_at(res, rows, 0, vec![[1, r2 as i64]])));
            }
            Store::UpperTriangle => {
                let n = r2;
                for p in 0..rows {
                    let i = g0 + p;
                    let len = n - 1 - i;
                    if len == 0 {
                        continue;
                    }
                    let at = i * n - i * (i + 1) / 2;
                    let dst = AccessPattern::hbm(d.out, DType::F32, at as u64, 1, 0, vec![[1, len as i64]]);
                    let src = AccessPattern::sbuf(
                        DType::F32,
                        p,
                        1,
                        res.offset + ((i + 1) * 4) as u64,
                        vec![[1, len as i64]],
                    );
                    e.push(Engine::Dma, dma(dst, src));
                }
            }
        }
        g0 += rows;
    }
    Ok(())
}

/// The matmul form of p = 2 (module doc), per batch matrix, in `[≤128, ≤512]` output blocks.
fn emit_euclidean_matmul(e: &mut Emitter, d: &Pairs<'_>, target: TargetName) -> Result<(), LowerError> {
    let t = target.params();
    let mut alloc = SbufAllocator::new(&t);
    let mut slot = |elems: usize| -> Result<Slot, LowerError> { alloc.slot(elems * 4) };
    let (r1, r2, m) = (d.r1, d.r2, d.m);
    let k_tiles = m.div_ceil(TILE_K);
    // Per K tile: x1ᵀ (then −2·x1ᵀ) and its square; x2ᵀ and its square.
    let x1t = slot(k_tiles * TILE_M)?;
    let x1sq = slot(k_tiles * TILE_M)?;
    let x2t = slot(k_tiles * TILE_N)?;
    let x2sq = slot(k_tiles * TILE_N)?;
    let ones = slot(TILE_N)?;
    let norm1 = slot(TILE_M)?;
    let norm2 = slot(TILE_N)?;
    let block = slot(TILE_N)?;
    let bank = t.psum_bank_bytes as u64;
    // The last two PSUM banks hold the norms' column sums; the products rotate over the others.
    let banks = t.psum_banks;
    if banks < 3 {
        return Err(LowerError::Resources(format!(
            "_cdist_forward needs 3 PSUM banks (two for the norms, one for the products); {} has {banks}",
            t.label
        )));
    }
    let (norm1_bank, norm2_bank) = (banks - 2, banks - 1);
    let main_banks = banks - 2;
    let mut next_bank = 0usize;
    let ktile = |kt: usize| (kt * TILE_K, TILE_K.min(m - kt * TILE_K));
    let sb = |s: Slot, partitions: usize, col: usize, n: usize| f32_at(s, partitions, col, vec![[1, n as i64]]);

    // A ones column (for the norms' column sums) and a ones row (the augmented products).
    e.memset(Engine::Vector, sb(ones, TILE_K.min(m), 0, TILE_N), 1.0);

    // Σ_k sq[k, ·] over the K tiles of `sq` (tile stride `stride` columns) into PSUM `[1, n]`,
    // then to SBUF row `dst`.
    let column_sums = |e: &mut Emitter, sq: Slot, stride: usize, n: usize, psum_bank: usize, dst: Slot| {
        let ps = AccessPattern::psum(DType::F32, 0, 1, psum_bank as u64 * bank, vec![[1, n as i64]]);
        for kt in 0..k_tiles {
            let (_, ksz) = ktile(kt);
            let op = Op::NcMatmul(NcMatmul {
                dst: ps.clone(),
                stationary: sb(ones, ksz, 0, 1),
                moving: sb(sq, ksz, kt * stride, n),
                accumulate: kt > 0,
                perf_mode: trnsim::MatmulPerfMode::None,
            });
            e.push(Engine::Tensor, op);
        }
        let copy = ts(sb(dst, 1, 0, n), ps, AluOp::Bypass, imm(0.0), None);
        e.push(Engine::Vector, copy);
    };

    for b in 0..d.batch {
        for n0 in (0..r2).step_by(TILE_N) {
            let nsz = TILE_N.min(r2 - n0);
            for kt in 0..k_tiles {
                let (k0, ksz) = ktile(kt);
                // x2ᵀ tile: partition k reads column k of rows n0.. (a transposing pattern).
                let src = hbm_cols(d.x2, DType::F32, d.x2_base[b] + n0 * m + k0, ksz, m, nsz);
                e.push(Engine::Dma, dma(sb(x2t, ksz, kt * TILE_N, nsz), src));
                let v = sb(x2t, ksz, kt * TILE_N, nsz);
                e.push(
                    Engine::Vector,
                    tt(sb(x2sq, ksz, kt * TILE_N, nsz), v.clone(), v, AluOp::Multiply),
                );
            }
            column_sums(e, x2sq, TILE_N, nsz, norm2_bank, norm2);
            for m0 in (0..r1).step_by(TILE_M) {
                let msz = TILE_M.min(r1 - m0);
                for kt in 0..k_tiles {
                    let (k0, ksz) = ktile(kt);
                    let src = hbm_cols(d.x1, DType::F32, d.x1_base[b] + m0 * m + k0, ksz, m, msz);
                    let v = sb(x1t, ksz, kt * TILE_M, msz);
                    e.push(Engine::Dma, dma(v.clone(), src));
                    e.push(
                        Engine::Vector,
                        tt(sb(x1sq, ksz, kt * TILE_M, msz), v.clone(), v.clone(), AluOp::Multiply),
                    );
                    // −2·x1 is exact.
                    e.push(Engine::Vector, ts(v.clone(), v, AluOp::Multiply, imm(-2.0), None));
                }
                column_sums(e, x1sq, TILE_M, msz, norm1_bank, norm1);
                let bank_idx = next_bank;
                next_bank = (next_bank + 1) % main_banks;
                let ps = AccessPattern::psum(DType::F32, 0, msz, bank_idx as u64 * bank, vec![[1, nsz as i64]]);
                for kt in 0..k_tiles {
                    let (_, ksz) = ktile(kt);
                    let op = Op::NcMatmul(NcMatmul {
                        dst: ps.clone(),
                        stationary: sb(x1t, ksz, kt * TILE_M, msz),
                        moving: sb(x2t, ksz, kt * TILE_N, nsz),
                        accumulate: kt > 0,
                        perf_mode: trnsim::MatmulPerfMode::None,
                    });
                    e.push(Engine::Tensor, op);
                }
                // + ‖x1_i‖²·1, then + 1·‖x2_j‖²: the two augmented columns, K = 1 each.
                for (stationary, moving) in [
                    (sb(norm1, 1, 0, msz), sb(ones, 1, 0, nsz)),
                    (sb(ones, 1, 0, msz), sb(norm2, 1, 0, nsz)),
                ] {
                    let op = Op::NcMatmul(NcMatmul {
                        dst: ps.clone(),
                        stationary,
                        moving,
                        accumulate: true,
                        perf_mode: trnsim::MatmulPerfMode::None,
                    });
                    e.push(Engine::Tensor, op);
                }
                let out = sb(block, msz, 0, nsz);
                e.push(Engine::Vector, ts(out.clone(), ps, AluOp::Max, imm(0.0), None));
                e.push(Engine::Gpsimd, ts(out.clone(), out.clone(), AluOp::Pow, imm(0.5), None));
                let dst = hbm_rows(d.out, DType::F32, b * r1 * r2 + m0 * r2 + n0, msz, r2, nsz);
                e.push(Engine::Dma, dma(dst, out));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{JsonFloat, TensorMeta, Value};
    use std::collections::BTreeMap;

    fn meta(shape: &[usize]) -> TensorMeta {
        TensorMeta::contiguous(TorchDType::F32, shape)
    }

    fn cdist(a: &[usize], b: &[usize], out: &[usize], p: f64, mode: Option<i64>) -> Result<Program, LowerError> {
        let tensors = BTreeMap::from([
            ("input.0".to_string(), meta(a)),
            ("input.1".to_string(), meta(b)),
            ("output.0".to_string(), meta(out)),
        ]);
        let input = crate::LowerInput::positional(
            "_cdist_forward",
            vec![
                Value::Tensor("input.0".into()),
                Value::Tensor("input.1".into()),
                Value::Float(JsonFloat(p)),
                mode.map_or(Value::None(()), Value::Int),
            ],
            &tensors,
        );
        let req = input.request();
        lower_cdist(&req, TargetName::Trn1).map(|l| crate::schedule(l).program)
    }

    fn uses_tensor_engine(p: &Program) -> bool {
        p.instructions.iter().any(|i| i.engine == Engine::Tensor)
    }

    #[test]
    fn compute_mode_picks_the_form_pytorch_picks() {
        assert!(!uses_tensor_engine(
            &cdist(&[5, 3], &[4, 3], &[5, 4], 2.0, None).unwrap()
        ));
        assert!(uses_tensor_engine(
            &cdist(&[26, 3], &[4, 3], &[26, 4], 2.0, None).unwrap()
        ));
        assert!(uses_tensor_engine(
            &cdist(&[5, 3], &[4, 3], &[5, 4], 2.0, Some(1)).unwrap()
        ));
        assert!(!uses_tensor_engine(
            &cdist(&[50, 3], &[40, 3], &[50, 40], 2.0, Some(2)).unwrap()
        ));
        assert!(!uses_tensor_engine(
            &cdist(&[50, 3], &[40, 3], &[50, 40], 1.0, Some(1)).unwrap()
        ));
    }

    #[test]
    fn bad_calls_are_typed_errors() {
        assert!(matches!(
            cdist(&[5, 3], &[4, 3], &[5, 4], -1.0, None),
            Err(LowerError::Invalid { .. })
        ));
        assert!(matches!(
            cdist(&[5, 3], &[4, 3], &[5, 4], 2.0, Some(3)),
            Err(LowerError::Invalid { .. })
        ));
        assert!(matches!(
            cdist(&[5, 3], &[4, 2], &[5, 4], 2.0, None),
            Err(LowerError::Invalid { .. })
        ));
        assert!(matches!(
            cdist(&[5], &[4, 3], &[5, 4], 2.0, None),
            Err(LowerError::Invalid { .. })
        ));
    }

    /// cdist on the simulator against PyTorch's fp32 loop on the host (the chunked sums and the
    /// matmul form round differently).
    fn check_cdist(a: &[usize], b: &[usize], out: &[usize], p: f64, mode: Option<i64>) {
        let fill = |shape: &[usize], seed: usize| -> Vec<f32> {
            (0..shape.iter().product::<usize>())
                .map(|i| (((i * 2654435761 + seed * 97) % 1000) as f32 / 250.0) - 2.0)
                .collect()
        };
        let (xa, xb) = (fill(a, 1), fill(b, 2));
        let program = cdist(a, b, out, p, mode).unwrap();
        let inputs = BTreeMap::from([
            ("input.0".to_string(), trnsim::HostTensor::from_f32(a, &xa)),
            ("input.1".to_string(), trnsim::HostTensor::from_f32(b, &xb)),
        ]);
        let run = trnsim::Executor::new(TargetName::Trn1).run(&program, &inputs).unwrap();
        let got: Vec<f32> = run.outputs["output.0"]
            .data
            .chunks(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let (r1, r2, m) = (a[a.len() - 2], b[b.len() - 2], a[a.len() - 1]);
        let out_batch = &out[..out.len() - 2];
        // The matmul form cancels ‖x1‖² + ‖x2‖² against 2·x1·x2: its error scales with the norms.
        let matmul_form = p == 2.0 && (mode == Some(1) || (mode != Some(2) && (r1 > 25 || r2 > 25)));
        let tol = if matmul_form { 1e-5 } else { 2e-6 };
        let base1 = batch_bases(&a[..a.len() - 2], out_batch, r1 * m);
        let base2 = batch_bases(&b[..b.len() - 2], out_batch, r2 * m);
        for (bi, (b1, b2)) in base1.iter().zip(&base2).enumerate() {
            for i in 0..r1 {
                for j in 0..r2 {
                    // PyTorch's fp32 loop: agg += map(|δ|), in k order.
                    let diffs = (0..m).map(|k| (xa[b1 + i * m + k] - xb[b2 + j * m + k]).abs());
                    let want = if p == 0.0 {
                        diffs.filter(|d| *d != 0.0).count() as f64
                    } else if p.is_infinite() {
                        diffs.fold(0.0f32, f32::max) as f64
                    } else {
                        let agg = diffs.fold(0.0f32, |acc, d| acc + d.powf(p as f32));
                        (agg as f64).powf(1.0 / p)
                    };
                    let g = got[(bi * r1 + i) * r2 + j] as f64;
                    assert!(
                        (g - want).abs() <= tol * want.max(1.0),
                        "p={p} [{bi},{i},{j}]: {g} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn forms_compute_the_distances() {
        // Direct form: features in two chunks, broadcast batches, rows over two partition chunks.
        check_cdist(&[2, 1, 3, 4100], &[3, 5, 4100], &[2, 3, 3, 5], 3.0, None);
        check_cdist(&[130, 3], &[7, 3], &[130, 7], 1.0, Some(2));
        check_cdist(&[4, 6], &[5, 6], &[4, 5], 0.0, None);
        check_cdist(&[4, 6], &[5, 6], &[4, 5], f64::INFINITY, None);
        check_cdist(&[2, 9, 5], &[2, 600, 5], &[2, 9, 600], 2.0, Some(2));
        // Matmul form: K over two tiles, M over two tiles, N over two banks.
        check_cdist(&[130, 200], &[520, 200], &[130, 520], 2.0, None);
        check_cdist(&[2, 3, 4], &[1, 30, 4], &[2, 3, 30], 2.0, None);
    }

    #[test]
    fn long_rows_and_broadcast_batches_lower() {
        cdist(&[3, 5, 9000], &[1, 7, 9000], &[3, 5, 7], 3.0, None).unwrap();
        cdist(&[2, 1, 30, 200], &[4, 26, 200], &[2, 4, 30, 26], 2.0, None).unwrap();
        cdist(&[0, 3], &[4, 3], &[0, 4], 2.0, None).unwrap();
        cdist(&[2, 0], &[4, 0], &[2, 4], 2.0, Some(1)).unwrap();
    }
}
