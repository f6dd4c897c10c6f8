//! `_embedding_bag`: per-bag sum / mean / max of gathered embedding rows.
//!
//! The call is `_embedding_bag(weight [V, D], indices [N], offsets, scale_grad_by_freq, mode,
//! sparse, per_sample_weights [N]?, include_last_offset, padding_idx)` and returns four tensors,
//! filled exactly as PyTorch's CPU kernel (`aten/src/ATen/native/EmbeddingBag.cpp`) fills them:
//!
//! * `output [B, D]` — bag `j` holds the rows `i ∈ [offsets[j], end_j)` (`end_j = offsets[j+1]`,
//!   and `N` for the last bag — except on PyTorch's "fast path" (sum, no padding_idx) with
//!   `include_last_offset`, where it is `offsets[B]`). Rows whose index equals `padding_idx` are
//!   left out. Sum/mean accumulate in fp32 for every dtype (fbgemm and the fallback both use an
//!   fp32 buffer) and round once to the weight dtype; mean then divides the *rounded* sum by
//!   `max(bag_size, 1)` converted to the weight dtype (`apply_bag_size`), so bf16/f16 round twice,
//!   as PyTorch does. Max keeps the first maximum (`weight > current`); empty bags give 0.
//! * `offset2bag [N]` — `#{j < B : offsets[j] ≤ i} − 1` (PyTorch's `index_add` + `cumsum`), or an
//!   empty tensor when PyTorch skips it (sum on the fast path: the golden shape says which).
//! * `bag_size [B]` — zeros for sum ("make bag_size output deterministic"); for mean/max the
//!   number of non-padding rows of each bag.
//! * `max_indices` — `[B, D]` for max (the embedding index of the kept maximum, 0 for empty
//!   bags); for sum/mean PyTorch copies `bag_size` into it (`[B]`).
//!
//! On device:
//! * Rows are gathered 128 at a time by an indirect DMA (`side: src`, `row_step: D`) from the
//!   weight table straight into SBUF, the indices (int32 on device) driving it.
//! * Bag membership comes from `offsets` on VectorE: GpSimd `iota` numbers the rows, the offsets
//!   are DMA-broadcast to every partition, and `is_le`/`is_gt` compares give the segment matrix
//!   `S[i, j] = (offsets[j] ≤ i) · (i < end_j) · w_i` (`w_i` = padding mask × per-sample weight),
//!   in the weight dtype (0/1 and the weights are exact). The row sum of the `offsets[j] ≤ i`
//!   compare is `offset2bag`.
//! * Sum/mean: TensorE `Sᵀ · [1 | G]` accumulates each bag's rows (and, in the ones column, the
//!   bag size) in fp32 PSUM over the 128-row chunks; VectorE evacuates it, with `reciprocal` and a
//!   multiply for mean.
//! * Max: bags on partitions, rows on the free axis: the gathered rows (kept in an HBM scratch
//!   tensor) are DMA-broadcast to every bag's partition, `select_reduce` masks rows outside the
//!   bag to −inf, `tensor_reduce(max)` gives the maximum, and the first position holding it
//!   (`is_equal`, then `min` over `position` where equal) selects the embedding index with a
//!   one-hot `select_reduce`. Chunks of rows merge with a strict `>` so the first maximum wins.
//!
//! Offsets, positions and indices go through fp32 compares: exact below 2²⁴, which bounds N and
//! V. NaN weights are not treated as PyTorch's sequential `>` would (a NaN propagates through the
//! engines' max).

use super::binary::dev;
use super::tile;
use super::tile::{Emitter, SbufAllocator, dma, hbm_rows, memset, ts, tt};
use super::{LowerError, LowerRequest, Lowered};
use crate::call::{BoolOrInt, IntOrBool, TensorArg};
use crate::dtype::TorchDType;
use trnsim::{
    AccessPattern, AluOp, DType, Engine, HbmRole, IndirectSide, Iota, NcMatmul, OobMode, Op, Program, ScalarOperand,
    SelectReduce, TargetName, TensorReduce,
};

const MODE_SUM: i64 = 0;
const MODE_MEAN: i64 = 1;
const MODE_MAX: i64 = 2;

/// Rows per chunk (SBUF partitions / TensorE contraction).
const P: usize = 128;
/// TensorE moving free size: columns of one PSUM bank.
const BANK_COLS: usize = 512;
/// Elements per partition of one max-mode work tile ([bags, dims, rows]).
const MAX_TILE: usize = 4096;
/// Positions, offsets and indices are compared in fp32: exact below this.
const EXACT_INT: usize = 1 << 24;
/// "No position": larger than any row position.
const NO_POS: f64 = EXACT_INT as f64;
/// −inf as an immediate (JSON has no infinity; −1e39 rounds to −inf in fp32).
const NEG_INF: f64 = -1e39;

/// The parsed call.
struct Call<'a> {
    weight: &'a str,
    indices: &'a str,
    offsets: &'a str,
    per_sample_weights: Option<&'a str>,
    mode: i64,
    include_last_offset: bool,
    padding_idx: Option<i64>,
    wdt: DType,
    /// Embedding dim D, indices N, bags B.
    dim: usize,
    n: usize,
    bags: usize,
    output: &'a str,
    offset2bag: &'a str,
    offset2bag_len: usize,
    bag_size: &'a str,
    max_indices: &'a str,
}

fn parse<'a>(req: &LowerRequest<'a>) -> Result<Call<'a>, LowerError> {
    let weight = req.arg::<TensorArg>(0, "weight")?.0;
    let indices = req.arg::<TensorArg>(1, "indices")?.0;
    let offsets = req.arg::<TensorArg>(2, "offsets")?.0;
    let IntOrBool(mode) = req.arg_or(4, "mode", IntOrBool(MODE_SUM))?;
    let per_sample_weights = req.opt::<TensorArg>(6, "per_sample_weights")?.map(|t| t.0);
    let BoolOrInt(include_last_offset) = req.arg_or(7, "include_last_offset", BoolOrInt(false))?;
    let padding_idx = Some(req.arg_or(8, "padding_idx", IntOrBool(-1))?.0).filter(|&p| p >= 0);

    let wm = req.tensor(weight)?;
    if !matches!(wm.dtype, TorchDType::F32 | TorchDType::Bf16 | TorchDType::F16) {
        return Err(req.unsupported(format!("weight dtype {}", wm.dtype)));
    }
    let wdt = dev(req, wm.dtype)?;
    let [vocab, dim] = wm.shape[..] else {
        return Err(req.invalid(format!("weight must be 2-D, got {:?}", wm.shape)));
    };
    let im = req.tensor(indices)?;
    let om = req.tensor(offsets)?;
    for (name, m) in [("indices", im), ("offsets", om)] {
        if !matches!(m.dtype, TorchDType::I64 | TorchDType::I32) {
            return Err(req.invalid(format!("{name} dtype {}", m.dtype)));
        }
    }
    if im.shape.len() != 1 || om.shape.len() != 1 {
        return Err(req.unsupported(format!(
            "indices {:?} with offsets {:?}: only 1-D indices with 1-D offsets",
            im.shape, om.shape
        )));
    }
    let n = im.shape[0];
    if include_last_offset && om.shape[0] == 0 {
        return Err(req.invalid("include_last_offset needs at least one offset".into()));
    }
    let bags = om.shape[0] - include_last_offset as usize;
    if !(MODE_SUM..=MODE_MAX).contains(&mode) {
        return Err(req.invalid(format!("mode {mode}")));
    }
    if let Some(w) = per_sample_weights {
        let m = req.tensor(w)?;
        if mode != MODE_SUM {
            return Err(req.invalid("per_sample_weights only with mode sum".into()));
        }
        if m.dtype != wm.dtype || m.shape != [n] {
            return Err(req.invalid(format!("per_sample_weights {} {:?}", m.dtype, m.shape)));
        }
    }
    if n >= EXACT_INT || vocab >= EXACT_INT {
        return Err(req.unsupported(format!("{n} indices into {vocab} rows: positions beyond 2^24")));
    }
    let output = req.output_tensor(0)?;
    let offset2bag = req.output_tensor(1)?;
    let bag_size = req.output_tensor(2)?;
    let max_indices = req.output_tensor(3)?;
    if req.tensor(output)?.shape != [bags, dim] {
        return Err(req.invalid(format!(
            "output shape {:?}, expected [{bags}, {dim}]",
            req.tensor(output)?.shape
        )));
    }
    let offset2bag_len: usize = req.tensor(offset2bag)?.shape.iter().product();
    if offset2bag_len != 0 && offset2bag_len != n {
        return Err(req.invalid(format!("offset2bag has {offset2bag_len} elements for {n} indices")));
    }
    let want_max_indices = if mode == MODE_MAX { vec![bags, dim] } else { vec![bags] };
    if req.tensor(bag_size)?.shape != [bags] || req.tensor(max_indices)?.shape != want_max_indices {
        return Err(req.invalid("bag_size / max_indices shapes".into()));
    }
    Ok(Call {
        weight,
        indices,
        offsets,
        per_sample_weights,
        mode,
        include_last_offset,
        padding_idx,
        wdt,
        dim,
        n,
        bags,
        output,
        offset2bag,
        offset2bag_len,
        bag_size,
        max_indices,
    })
}

/// A dense SBUF operand: `p` partitions from 0, free dims `free`.
fn sb(dtype: DType, p: usize, offset: u64, free: Vec<[i64; 2]>) -> AccessPattern {
    AccessPattern::sbuf(dtype, 0, p, offset, free)
}

fn flat(dtype: DType, p: usize, offset: u64, n: usize) -> AccessPattern {
    sb(dtype, p, offset, vec![[1, n as i64]])
}

fn reduce(dst: AccessPattern, src: AccessPattern, op: AluOp) -> Op {
    Op::TensorReduce(TensorReduce {
        dst,
        src,
        op,
        axes: 1,
        negate: false,
    })
}

fn tile_of(ap: &AccessPattern) -> ScalarOperand {
    ScalarOperand::Tile(ap.clone())
}

/// The program under construction: emitter and SBUF allocator.
struct Builder {
    e: Emitter,
    alloc: SbufAllocator,
    bank: usize,
    banks: usize,
    bank_bytes: u64,
}

impl Builder {
    fn buf(&mut self, dtype: DType, elems: usize) -> Result<u64, LowerError> {
        self.alloc.alloc(elems.max(1) * dtype.size())
    }

    /// Row positions `first + t` along the free axis of `[p, n]` (fp32, same on every partition).
    fn iota_row(&mut self, offset: u64, p: usize, n: usize, first: usize) {
        let op = Op::Iota(Iota {
            dst: flat(DType::F32, p, offset, n),
            offset: first as i64,
            channel_multiplier: 0,
            pattern: vec![[1, n as i64]],
        });
        self.e.push(Engine::Gpsimd, op);
    }

    /// Row positions `first + p` down the partitions of `[p, 1]` (fp32).
    fn iota_col(&mut self, offset: u64, p: usize, first: usize) {
        let op = Op::Iota(Iota {
            dst: flat(DType::F32, p, offset, 1),
            offset: first as i64,
            channel_multiplier: 1,
            pattern: vec![[1, 1]],
        });
        self.e.push(Engine::Gpsimd, op);
    }

    /// A PSUM bank (rotating, so consecutive blocks do not wait on each other): its byte offset.
    fn next_bank(&mut self) -> u64 {
        let b = self.bank;
        self.bank = (self.bank + 1) % self.banks;
        b as u64 * self.bank_bytes
    }
}

/// The rows of one chunk `[i0, i0 + rows)` of the indices.
#[derive(Clone, Copy)]
struct Chunk {
    i0: usize,
    rows: usize,
}

fn chunks(n: usize, size: usize) -> Vec<Chunk> {
    (0..n.div_ceil(size))
        .map(|c| Chunk {
            i0: c * size,
            rows: size.min(n - c * size),
        })
        .collect()
}

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let call = parse(req)?;
    let t = target.params();
    let mut program = Program::new(target);
    let declare = |p: &mut Program, name: &str, role| -> Result<(), LowerError> {
        let m = req.tensor(name)?;
        p.declare(name, dev(req, m.dtype)?, &m.shape, role);
        Ok(())
    };
    for name in [call.weight, call.indices, call.offsets]
        .into_iter()
        .chain(call.per_sample_weights)
    {
        declare(&mut program, name, HbmRole::Input)?;
    }
    for name in [call.output, call.offset2bag, call.bag_size, call.max_indices] {
        declare(&mut program, name, HbmRole::Output)?;
    }
    let mut b = Builder {
        e: Emitter::new(program),
        alloc: SbufAllocator::new(&t),
        bank: 0,
        banks: t.psum_banks,
        bank_bytes: t.psum_bank_bytes as u64,
    };
    if call.bags == 0 && call.offset2bag_len == 0 {
        // Nothing to compute; an empty program would not run any engine.
        let z = b.buf(DType::F32, 1)?;
        b.e.push(Engine::Gpsimd, memset(flat(DType::F32, 1, z, 1), 0.0));
    } else if call.n == 0 {
        zero_outputs(&mut b, &call)?;
    } else {
        let rows = gather_and_segment(&mut b, &call)?;
        if call.mode == MODE_MAX {
            bag_max(&mut b, &call, &rows)?;
        } else {
            bag_sum_mean(&mut b, &call, &rows)?;
        }
    }
    Ok(Lowered::new(b.e.finish()))
}

/// No indices: every bag is empty (output 0, bag_size 0, max_indices 0).
fn zero_outputs(b: &mut Builder, call: &Call<'_>) -> Result<(), LowerError> {
    let cols = call.dim.max(1);
    let zw = b.buf(call.wdt, cols)?;
    let zi = b.buf(DType::I32, cols)?;
    b.e.push(Engine::Gpsimd, memset(flat(call.wdt, P, zw, cols), 0.0));
    b.e.push(Engine::Gpsimd, memset(flat(DType::I32, P, zi, cols), 0.0));
    let idx_cols = if call.mode == MODE_MAX { call.dim } else { 1 };
    for c in chunks(call.bags, P) {
        let hbm = |name: &str, dt, w: usize| {
            AccessPattern::hbm(name, dt, (c.i0 * w) as u64, c.rows, w as i64, vec![[1, w as i64]])
        };
        if call.dim > 0 {
            b.e.push(
                Engine::Dma,
                dma(
                    hbm(call.output, call.wdt, call.dim),
                    flat(call.wdt, c.rows, zw, call.dim),
                ),
            );
        }
        b.e.push(
            Engine::Dma,
            dma(hbm(call.bag_size, DType::I32, 1), flat(DType::I32, c.rows, zi, 1)),
        );
        if idx_cols > 0 {
            b.e.push(
                Engine::Dma,
                dma(
                    hbm(call.max_indices, DType::I32, idx_cols),
                    flat(DType::I32, c.rows, zi, idx_cols),
                ),
            );
        }
    }
    Ok(())
}

/// What the row chunks left in SBUF for the reductions.
struct Rows {
    chunks: Vec<Chunk>,
    /// `[1 | G]` per chunk: `chunk · (D + 1)` columns of the weight dtype (sum/mean only).
    gathered: u64,
    /// Segment matrix `S` per chunk: `chunk · B` columns of the weight dtype (sum/mean only).
    segment: u64,
    /// Max mode: the gathered rows `[N, D]` in HBM.
    scratch: Option<String>,
}

/// Per chunk of 128 rows: gathers the embedding rows, writes offset2bag, and (sum/mean) builds
/// the segment matrix.
fn gather_and_segment(b: &mut Builder, call: &Call<'_>) -> Result<Rows, LowerError> {
    let (d, bags, wdt) = (call.dim, call.bags, call.wdt);
    let rows = chunks(call.n, P);
    let keep = call.mode != MODE_MAX;
    let nch = if keep { rows.len() } else { 1 };
    let gathered = b.buf(wdt, nch * (d + 1))?;
    let segment = if keep { b.buf(wdt, nch * bags)? } else { 0 };
    let idx = b.buf(DType::I32, 1)?;
    let pos = b.buf(DType::F32, 1)?;
    let wt = b.buf(DType::F32, 1)?;
    let psw = b.buf(wdt, 1)?;
    let cnt = b.buf(DType::F32, 1)?;
    let o2b = b.buf(DType::I32, 1)?;
    let (lo, hi, ge, lt) = (
        b.buf(DType::I32, bags)?,
        b.buf(DType::I32, bags)?,
        b.buf(DType::F32, bags)?,
        b.buf(DType::F32, bags)?,
    );
    let scratch = if keep {
        None
    } else {
        let name = "scratch.rows".to_string();
        b.e.program.declare(&name, wdt, &[call.n, d], HbmRole::Scratch);
        Some(name)
    };
    // offsets[j] and end_j along the free axis, the same on every partition.
    let offsets_row = |first: usize, count: usize| {
        AccessPattern::hbm(call.offsets, DType::I32, first as u64, P, 0, vec![[1, count as i64]])
    };
    if bags > 0 {
        b.e.push(Engine::Dma, dma(flat(DType::I32, P, lo, bags), offsets_row(0, bags)));
        if keep {
            // PyTorch's fast path (sum without padding_idx) ends the last bag at offsets[B] when
            // include_last_offset gives it; every other path at N.
            let fast_sum = call.mode == MODE_SUM && call.padding_idx.is_none();
            let given = if call.include_last_offset && fast_sum {
                bags
            } else {
                bags - 1
            };
            if given < bags {
                let last = flat(DType::I32, P, hi + ((bags - 1) * 4) as u64, 1);
                b.e.push(Engine::Gpsimd, memset(last, call.n as f64));
            }
            if given > 0 {
                b.e.push(Engine::Dma, dma(flat(DType::I32, P, hi, given), offsets_row(1, given)));
            }
        }
    }
    for (c, ch) in rows.iter().enumerate() {
        let p = ch.rows;
        let slot = if keep { c } else { 0 };
        let g_off = gathered + (slot * (d + 1) * wdt.size()) as u64;
        let idx_ap = flat(DType::I32, p, idx, 1);
        b.e.push(
            Engine::Dma,
            dma(
                idx_ap.clone(),
                AccessPattern::hbm(call.indices, DType::I32, ch.i0 as u64, p, 1, vec![[1, 1]]),
            ),
        );
        if d > 0 {
            // Indirect gather: row r of the tile is weight row indices[i0 + r]. PyTorch rejects
            // indices outside [0, V): so does the DMA (`oob: error`).
            let op = Op::dma_indirect(
                flat(wdt, p, g_off + wdt.size() as u64, d),
                AccessPattern::hbm(call.weight, wdt, 0, 1, 0, vec![[1, d as i64]]),
                IndirectSide::Src,
                idx_ap.clone(),
                d as i64,
                OobMode::Error,
            );
            b.e.push(Engine::Dma, op);
        }
        if let Some(name) = &scratch
            && d > 0
        {
            let dst = AccessPattern::hbm(name, wdt, (ch.i0 * d) as u64, p, d as i64, vec![[1, d as i64]]);
            b.e.push(Engine::Dma, dma(dst, flat(wdt, p, g_off + wdt.size() as u64, d)));
        }
        if bags == 0 {
            // No bags: PyTorch's cumsum of `[-1, 0, …]` makes every offset2bag entry −1.
            if call.offset2bag_len > 0 {
                b.e.push(Engine::Gpsimd, memset(flat(DType::I32, p, o2b, 1), -1.0));
                let dst = AccessPattern::hbm(call.offset2bag, DType::I32, ch.i0 as u64, p, 1, vec![[1, 1]]);
                b.e.push(Engine::Dma, dma(dst, flat(DType::I32, p, o2b, 1)));
            }
            continue;
        }
        b.iota_col(pos, p, ch.i0);
        let pos_t = tile_of(&flat(DType::F32, p, pos, 1));
        // ge[i, j] = offsets[j] ≤ i; offset2bag[i] = Σ_j ge[i, j] − 1.
        let ge_ap = flat(DType::F32, p, ge, bags);
        b.e.push(
            Engine::Vector,
            ts(
                ge_ap.clone(),
                flat(DType::I32, p, lo, bags),
                AluOp::IsLe,
                pos_t.clone(),
                None,
            ),
        );
        if call.offset2bag_len > 0 {
            b.e.push(
                Engine::Vector,
                reduce(flat(DType::F32, p, cnt, 1), ge_ap.clone(), AluOp::Add),
            );
            let op = ts(
                flat(DType::I32, p, o2b, 1),
                flat(DType::F32, p, cnt, 1),
                AluOp::Subtract,
                ScalarOperand::Imm(1.0),
                None,
            );
            b.e.push(Engine::Vector, op);
            let dst = AccessPattern::hbm(call.offset2bag, DType::I32, ch.i0 as u64, p, 1, vec![[1, 1]]);
            b.e.push(Engine::Dma, dma(dst, flat(DType::I32, p, o2b, 1)));
        }
        if !keep {
            continue;
        }
        // The ones column counts the bag's rows on TensorE.
        b.e.push(Engine::Gpsimd, memset(flat(wdt, p, g_off, 1), 1.0));
        // w_i = (indices[i] != padding_idx) · per_sample_weights[i] (absent factors are 1).
        let mut weight_factor = None;
        if let Some(pad) = call.padding_idx {
            let op = ts(
                flat(DType::F32, p, wt, 1),
                idx_ap.clone(),
                AluOp::NotEqual,
                ScalarOperand::Imm(pad as f64),
                None,
            );
            b.e.push(Engine::Vector, op);
            weight_factor = Some(wt);
        }
        if let Some(name) = call.per_sample_weights {
            b.e.push(
                Engine::Dma,
                dma(
                    flat(wdt, p, psw, 1),
                    AccessPattern::hbm(name, wdt, ch.i0 as u64, p, 1, vec![[1, 1]]),
                ),
            );
            if weight_factor.is_some() {
                let op = tt(
                    flat(DType::F32, p, wt, 1),
                    flat(DType::F32, p, wt, 1),
                    flat(wdt, p, psw, 1),
                    AluOp::Multiply,
                );
                b.e.push(Engine::Vector, op);
            } else {
                b.e.tensor_copy(Engine::Vector, flat(DType::F32, p, wt, 1), flat(wdt, p, psw, 1));
            }
            weight_factor = Some(wt);
        }
        // lt[i, j] = (i < end_j) · w_i;  S = ge · lt.
        let then = weight_factor.map(|w| (AluOp::Multiply, tile_of(&flat(DType::F32, p, w, 1))));
        let lt_ap = flat(DType::F32, p, lt, bags);
        let op = ts(lt_ap.clone(), flat(DType::I32, p, hi, bags), AluOp::IsGt, pos_t, then);
        b.e.push(Engine::Vector, op);
        let s_ap = flat(wdt, p, segment + (c * bags * wdt.size()) as u64, bags);
        b.e.push(Engine::Vector, tt(s_ap, ge_ap, lt_ap, AluOp::Multiply));
    }
    Ok(Rows {
        chunks: rows,
        gathered,
        segment,
        scratch,
    })
}

/// Sum and mean: `out[j] = Σ_i S[i, j] · [1 | G][i]` on TensorE, per 128 bags × 512 columns.
fn bag_sum_mean(b: &mut Builder, call: &Call<'_>, rows: &Rows) -> Result<(), LowerError> {
    let (d, bags, wdt) = (call.dim, call.bags, call.wdt);
    let cols = d + 1;
    let sum_t = b.buf(wdt, BANK_COLS)?;
    let out_t = b.buf(wdt, BANK_COLS)?;
    let size_t = b.buf(DType::I32, 1)?;
    let cnt_t = b.buf(wdt, 1)?;
    let rcp_t = b.buf(DType::F32, 1)?;
    for bc in chunks(bags, P) {
        let jc = bc.rows;
        for cc in chunks(cols, BANK_COLS) {
            let psum = b.next_bank();
            let dst = AccessPattern::psum(DType::F32, 0, jc, psum, vec![[1, cc.rows as i64]]);
            for (k, ch) in rows.chunks.iter().enumerate() {
                let op = Op::NcMatmul(NcMatmul {
                    dst: dst.clone(),
                    stationary: flat(
                        wdt,
                        ch.rows,
                        rows.segment + ((k * bags + bc.i0) * wdt.size()) as u64,
                        jc,
                    ),
                    moving: flat(
                        wdt,
                        ch.rows,
                        rows.gathered + ((k * cols + cc.i0) * wdt.size()) as u64,
                        cc.rows,
                    ),
                    accumulate: k > 0,
                    perf_mode: trnsim::MatmulPerfMode::None,
                });
                b.e.push(Engine::Tensor, op);
            }
            let psum_col =
                |c: usize, n: usize| AccessPattern::psum(DType::F32, 0, jc, psum + (c * 4) as u64, vec![[1, n as i64]]);
            if cc.i0 == 0 {
                // Column 0 is the bag size (non-padding rows).
                let bag_rows = |name: &str| AccessPattern::hbm(name, DType::I32, bc.i0 as u64, jc, 1, vec![[1, 1]]);
                if call.mode == MODE_SUM {
                    // PyTorch zeroes bag_size for sum ("make bag_size output deterministic").
                    b.e.push(Engine::Gpsimd, memset(flat(DType::I32, jc, size_t, 1), 0.0));
                } else {
                    let op = tile::copy(flat(DType::I32, jc, size_t, 1), psum_col(0, 1));
                    b.e.push(Engine::Vector, op);
                    // apply_bag_size: divide by max(bag_size, 1) converted to the output dtype.
                    let op = ts(
                        flat(wdt, jc, cnt_t, 1),
                        psum_col(0, 1),
                        AluOp::Max,
                        ScalarOperand::Imm(1.0),
                        None,
                    );
                    b.e.push(Engine::Vector, op);
                    let op = tile::recip(flat(DType::F32, jc, rcp_t, 1), flat(wdt, jc, cnt_t, 1));
                    b.e.push(Engine::Vector, op);
                }
                b.e.push(
                    Engine::Dma,
                    dma(bag_rows(call.bag_size), flat(DType::I32, jc, size_t, 1)),
                );
                // For sum and mean PyTorch copies bag_size into max_indices.
                b.e.push(
                    Engine::Dma,
                    dma(bag_rows(call.max_indices), flat(DType::I32, jc, size_t, 1)),
                );
            }
            // Data columns of this block, as output columns [c0, c0 + n).
            let first = if cc.i0 == 0 { 1 } else { 0 };
            let n = cc.rows - first;
            if n == 0 {
                continue;
            }
            let c0 = cc.i0 + first - 1;
            // The fp32 sum rounds once to the weight dtype (PyTorch's fp32 buffer → output).
            let op = tile::copy(flat(wdt, jc, sum_t, n), psum_col(first, n));
            b.e.push(Engine::Vector, op);
            let result = if call.mode == MODE_MEAN {
                let op = ts(
                    flat(wdt, jc, out_t, n),
                    flat(wdt, jc, sum_t, n),
                    AluOp::Multiply,
                    tile_of(&flat(DType::F32, jc, rcp_t, 1)),
                    None,
                );
                b.e.push(Engine::Vector, op);
                out_t
            } else {
                sum_t
            };
            let dst = hbm_rows(call.output, wdt, bc.i0 * d + c0, jc, d, n);
            b.e.push(Engine::Dma, dma(dst, flat(wdt, jc, result, n)));
        }
    }
    Ok(())
}

/// Max: bags on partitions, rows along the free axis, per block of dims.
fn bag_max(b: &mut Builder, call: &Call<'_>, rows: &Rows) -> Result<(), LowerError> {
    let (d, bags, wdt, n) = (call.dim, call.bags, call.wdt, call.n);
    let scratch = rows.scratch.as_deref().ok_or_else(|| LowerError::Invalid {
        op: "_embedding_bag".into(),
        reason: "max mode without gathered rows".into(),
    })?;
    let iw = n.min(MAX_TILE);
    let db = d.clamp(1, (MAX_TILE / iw).max(1));
    let work = iw * db;
    let f32b = |b: &mut Builder, e| b.buf(DType::F32, e);
    let (lo, hi) = (f32b(b, 1)?, f32b(b, 1)?);
    let (lo_i, hi_i) = (b.buf(DType::I32, 1)?, b.buf(DType::I32, 1)?);
    let (pos_row, pos_shift, idx_i, idx_f) = (f32b(b, iw)?, f32b(b, iw)?, b.buf(DType::I32, iw)?, f32b(b, iw)?);
    let (ge, lt, mask) = (f32b(b, iw)?, f32b(b, iw)?, b.buf(DType::U8, iw)?);
    let (cnt, cnt_c, size_i) = (f32b(b, 1)?, f32b(b, 1)?, b.buf(DType::I32, 1)?);
    let x = b.buf(wdt, work)?;
    let (y, key, onehot) = (f32b(b, work)?, f32b(b, work)?, b.buf(DType::U8, work)?);
    let (m, first, word) = (f32b(b, db)?, f32b(b, db)?, f32b(b, db)?);
    let (best, best_word) = (f32b(b, db)?, f32b(b, db)?);
    let (gt, none_yet, upd) = (f32b(b, db)?, f32b(b, db)?, b.buf(DType::U8, db)?);
    let (found, out_w, out_i) = (b.buf(DType::U8, db)?, b.buf(wdt, db)?, b.buf(DType::I32, db)?);
    let row_chunks = chunks(n, iw);
    for bc in chunks(bags, P) {
        let j0 = bc.i0;
        let p = bc.rows;
        // Bag bounds per partition: [offsets[j], end_j), end_j = offsets[j+1] or N for the last.
        let col = |off: u64, dt| flat(dt, p, off, 1);
        b.e.push(
            Engine::Dma,
            dma(
                col(lo_i, DType::I32),
                AccessPattern::hbm(call.offsets, DType::I32, j0 as u64, p, 1, vec![[1, 1]]),
            ),
        );
        let given = (bags - 1 - j0).min(p);
        if given < p {
            // The last bag ends at N (PyTorch's offset2bag path): fill N, DMA the others over it.
            b.e.push(Engine::Gpsimd, memset(col(hi_i, DType::I32), n as f64));
        }
        if given > 0 {
            let src = AccessPattern::hbm(call.offsets, DType::I32, (j0 + 1) as u64, given, 1, vec![[1, 1]]);
            b.e.push(Engine::Dma, dma(flat(DType::I32, given, hi_i, 1), src));
        }
        b.e.tensor_copy(Engine::Vector, col(lo, DType::F32), col(lo_i, DType::I32));
        b.e.tensor_copy(Engine::Vector, col(hi, DType::F32), col(hi_i, DType::I32));
        for dc in chunks(d.max(1), db) {
            let dn = if d == 0 { 0 } else { dc.rows };
            for (k, rc) in row_chunks.iter().enumerate() {
                let w = rc.rows;
                // mask[j, i] = offsets[j] ≤ i < end_j, and indices[i] != padding_idx.
                b.iota_row(pos_row, p, w, rc.i0);
                let pos_ap = flat(DType::F32, p, pos_row, w);
                b.e.push(
                    Engine::Vector,
                    ts(
                        flat(DType::F32, p, ge, w),
                        pos_ap.clone(),
                        AluOp::IsGe,
                        tile_of(&col(lo, DType::F32)),
                        None,
                    ),
                );
                b.e.push(
                    Engine::Vector,
                    ts(
                        flat(DType::F32, p, lt, w),
                        pos_ap.clone(),
                        AluOp::IsLt,
                        tile_of(&col(hi, DType::F32)),
                        None,
                    ),
                );
                let idx_src = AccessPattern::hbm(call.indices, DType::I32, rc.i0 as u64, p, 0, vec![[1, w as i64]]);
                b.e.push(Engine::Dma, dma(flat(DType::I32, p, idx_i, w), idx_src));
                b.e.tensor_copy(
                    Engine::Vector,
                    flat(DType::F32, p, idx_f, w),
                    flat(DType::I32, p, idx_i, w),
                );
                let mask_ap = flat(DType::U8, p, mask, w);
                if let Some(pad) = call.padding_idx {
                    b.e.push(
                        Engine::Vector,
                        tt(
                            flat(DType::F32, p, ge, w),
                            flat(DType::F32, p, ge, w),
                            flat(DType::F32, p, lt, w),
                            AluOp::Multiply,
                        ),
                    );
                    let op = ts(
                        flat(DType::F32, p, lt, w),
                        flat(DType::F32, p, idx_f, w),
                        AluOp::NotEqual,
                        ScalarOperand::Imm(pad as f64),
                        None,
                    );
                    b.e.push(Engine::Vector, op);
                }
                b.e.push(
                    Engine::Vector,
                    tt(
                        mask_ap.clone(),
                        flat(DType::F32, p, ge, w),
                        flat(DType::F32, p, lt, w),
                        AluOp::Multiply,
                    ),
                );
                if dc.i0 == 0 {
                    // bag_size: the rows in the bag.
                    let dst = if k == 0 { cnt } else { cnt_c };
                    b.e.push(
                        Engine::Vector,
                        reduce(col(dst, DType::F32), mask_ap.clone(), AluOp::Add),
                    );
                    if k > 0 {
                        b.e.push(
                            Engine::Vector,
                            tt(
                                col(cnt, DType::F32),
                                col(cnt, DType::F32),
                                col(cnt_c, DType::F32),
                                AluOp::Add,
                            ),
                        );
                    }
                }
                if dn == 0 {
                    continue;
                }
                // [bags, dims, rows] views: rows broadcast over dims, per-(bag, dim) values over rows.
                let over_dims = |dt, off| sb(dt, p, off, vec![[0, dn as i64], [1, w as i64]]);
                let over_rows = |off| sb(DType::F32, p, off, vec![[1, dn as i64], [0, w as i64]]);
                let cube = |dt, off| sb(dt, p, off, vec![[w as i64, dn as i64], [1, w as i64]]);
                let src = AccessPattern::hbm(
                    scratch,
                    wdt,
                    (rc.i0 * d + dc.i0) as u64,
                    p,
                    0,
                    vec![[1, dn as i64], [d as i64, w as i64]],
                );
                b.e.push(Engine::Dma, dma(cube(wdt, x), src));
                // y = mask ? x : −inf;  m = max over rows.
                let op = Op::SelectReduce(SelectReduce {
                    dst: cube(DType::F32, y),
                    predicate: over_dims(DType::U8, mask),
                    on_true: cube(wdt, x),
                    on_false: ScalarOperand::Imm(NEG_INF),
                    reverse_pred: false,
                    reduce_res: None,
                });
                b.e.push(Engine::Vector, op);
                let m_ap = flat(DType::F32, p, m, dn);
                b.e.push(Engine::Vector, reduce(m_ap.clone(), cube(DType::F32, y), AluOp::Max));
                // key = (y == m) · mask ? position : NO_POS;  first = min over rows.
                b.e.push(
                    Engine::Vector,
                    tt(cube(DType::F32, key), cube(DType::F32, y), over_rows(m), AluOp::IsEqual),
                );
                b.e.push(
                    Engine::Vector,
                    tt(
                        cube(DType::F32, key),
                        cube(DType::F32, key),
                        over_dims(DType::U8, mask),
                        AluOp::Multiply,
                    ),
                );
                b.e.push(
                    Engine::Vector,
                    ts(
                        flat(DType::F32, p, pos_shift, w),
                        pos_ap.clone(),
                        AluOp::Subtract,
                        ScalarOperand::Imm(NO_POS),
                        None,
                    ),
                );
                b.e.push(
                    Engine::Vector,
                    tt(
                        cube(DType::F32, key),
                        cube(DType::F32, key),
                        over_dims(DType::F32, pos_shift),
                        AluOp::Multiply,
                    ),
                );
                b.e.push(
                    Engine::Vector,
                    ts(
                        cube(DType::F32, key),
                        cube(DType::F32, key),
                        AluOp::Add,
                        ScalarOperand::Imm(NO_POS),
                        None,
                    ),
                );
                let first_ap = flat(DType::F32, p, first, dn);
                b.e.push(Engine::Vector, reduce(first_ap, cube(DType::F32, key), AluOp::Min));
                // word = indices[first] (−1 when the chunk has no row of the bag).
                b.e.push(
                    Engine::Vector,
                    tt(
                        cube(DType::U8, onehot),
                        over_dims(DType::F32, pos_row),
                        over_rows(first),
                        AluOp::IsEqual,
                    ),
                );
                let op = Op::SelectReduce(SelectReduce {
                    dst: cube(DType::F32, y),
                    predicate: cube(DType::U8, onehot),
                    on_true: over_dims(DType::F32, idx_f),
                    on_false: ScalarOperand::Imm(-1.0),
                    reverse_pred: false,
                    reduce_res: None,
                });
                b.e.push(Engine::Vector, op);
                let word_ap = flat(DType::F32, p, word, dn);
                b.e.push(Engine::Vector, reduce(word_ap.clone(), cube(DType::F32, y), AluOp::Max));
                let best_ap = flat(DType::F32, p, best, dn);
                let best_word_ap = flat(DType::F32, p, best_word, dn);
                if k == 0 {
                    b.e.tensor_copy(Engine::Vector, best_ap.clone(), m_ap);
                    b.e.tensor_copy(Engine::Vector, best_word_ap, word_ap);
                } else {
                    // A later chunk wins only with a strictly larger value, or when no earlier
                    // chunk had a row of the bag (PyTorch's `weight > current`, first one kept).
                    let gt_ap = flat(DType::F32, p, gt, dn);
                    b.e.push(
                        Engine::Vector,
                        tt(gt_ap.clone(), m_ap.clone(), best_ap.clone(), AluOp::IsGt),
                    );
                    let none_ap = flat(DType::F32, p, none_yet, dn);
                    b.e.push(
                        Engine::Vector,
                        ts(
                            none_ap.clone(),
                            best_word_ap.clone(),
                            AluOp::IsLt,
                            ScalarOperand::Imm(0.0),
                            None,
                        ),
                    );
                    let upd_ap = flat(DType::U8, p, upd, dn);
                    b.e.push(Engine::Vector, tt(upd_ap.clone(), gt_ap, none_ap, AluOp::Max));
                    b.e.push(Engine::Vector, tt(best_ap.clone(), best_ap.clone(), m_ap, AluOp::Max));
                    let op = tile::copy_pred(best_word_ap, word_ap, upd_ap);
                    b.e.push(Engine::Vector, op);
                }
            }
            if dn == 0 {
                continue;
            }
            // Empty bags (no row found): output 0 and max_indices 0, as PyTorch's zeroed outputs.
            let found_ap = flat(DType::U8, p, found, dn);
            let best_word_ap = flat(DType::F32, p, best_word, dn);
            b.e.push(
                Engine::Vector,
                ts(
                    found_ap.clone(),
                    best_word_ap.clone(),
                    AluOp::IsGe,
                    ScalarOperand::Imm(0.0),
                    None,
                ),
            );
            let op = Op::SelectReduce(SelectReduce {
                dst: flat(wdt, p, out_w, dn),
                predicate: found_ap,
                on_true: flat(DType::F32, p, best, dn),
                on_false: ScalarOperand::Imm(0.0),
                reverse_pred: false,
                reduce_res: None,
            });
            b.e.push(Engine::Vector, op);
            b.e.push(
                Engine::Vector,
                ts(
                    flat(DType::I32, p, out_i, dn),
                    best_word_ap,
                    AluOp::Max,
                    ScalarOperand::Imm(0.0),
                    None,
                ),
            );
            let hbm = |name: &str, dt| {
                AccessPattern::hbm(name, dt, (j0 * d + dc.i0) as u64, p, d as i64, vec![[1, dn as i64]])
            };
            b.e.push(Engine::Dma, dma(hbm(call.output, wdt), flat(wdt, p, out_w, dn)));
            b.e.push(
                Engine::Dma,
                dma(hbm(call.max_indices, DType::I32), flat(DType::I32, p, out_i, dn)),
            );
        }
        b.e.tensor_copy(Engine::Vector, col(size_i, DType::I32), col(cnt, DType::F32));
        let dst = AccessPattern::hbm(call.bag_size, DType::I32, j0 as u64, p, 1, vec![[1, 1]]);
        b.e.push(Engine::Dma, dma(dst, col(size_i, DType::I32)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{OpCall, TensorMeta, Value};
    use std::collections::BTreeMap;
    use trnsim::{Executor, HostTensor};

    /// An `_embedding_bag` call on `weight [V, D]`, `indices [N]`, `offsets [O]` (int64).
    struct Bag {
        call: OpCall,
        tensors: BTreeMap<String, TensorMeta>,
        outputs: Vec<super::super::OutputSlot>,
    }

    impl Bag {
        fn new(v: usize, d: usize, n: usize, o: usize, mode: i64, last: bool, padding_idx: i64) -> Bag {
            let bags = o - last as usize;
            let max_indices = if mode == MODE_MAX { vec![bags, d] } else { vec![bags] };
            let tensors = [
                ("input.0", TensorMeta::contiguous(TorchDType::F32, &[v, d])),
                ("input.1", TensorMeta::contiguous(TorchDType::I64, &[n])),
                ("input.2", TensorMeta::contiguous(TorchDType::I64, &[o])),
                ("output.0", TensorMeta::contiguous(TorchDType::F32, &[bags, d])),
                ("output.1", TensorMeta::contiguous(TorchDType::I64, &[n])),
                ("output.2", TensorMeta::contiguous(TorchDType::I64, &[bags])),
                ("output.3", TensorMeta::contiguous(TorchDType::I64, &max_indices)),
            ];
            let t = |n: &str| Value::Tensor(n.into());
            let args = vec![
                t("input.0"),
                t("input.1"),
                t("input.2"),
                Value::Bool(false),
                Value::Int(mode),
                Value::Bool(false),
                Value::None(()),
                Value::Bool(last),
                Value::Int(padding_idx),
            ];
            Bag {
                call: OpCall {
                    args,
                    kwargs: BTreeMap::new(),
                },
                tensors: tensors.iter().map(|(n, m)| (n.to_string(), m.clone())).collect(),
                outputs: super::super::OutputSlot::of(&(0..4).map(|i| t(&format!("output.{i}"))).collect::<Vec<_>>()),
            }
        }

        fn req(&self) -> LowerRequest<'_> {
            LowerRequest {
                op: "_embedding_bag",
                call: &self.call,
                tensors: &self.tensors,
                outputs: &self.outputs,
            }
        }
    }

    fn int32(v: &[i64]) -> HostTensor {
        HostTensor {
            dtype: DType::I32,
            shape: vec![v.len()],
            data: v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect(),
        }
    }

    fn ints(t: &HostTensor) -> Vec<i64> {
        t.data
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i64)
            .collect()
    }

    #[test]
    fn bad_calls_are_typed_errors() {
        let mut bag = Bag::new(4, 2, 3, 2, 3, false, -1);
        assert!(
            matches!(lower(&bag.req(), TargetName::Trn1), Err(LowerError::Invalid { .. })),
            "mode 3"
        );
        bag.call.args[4] = Value::Int(MODE_MEAN);
        bag.call.args[6] = Value::Tensor("input.6".into());
        bag.tensors
            .insert("input.6".into(), TensorMeta::contiguous(TorchDType::F32, &[3]));
        assert!(
            matches!(lower(&bag.req(), TargetName::Trn1), Err(LowerError::Invalid { .. })),
            "per_sample_weights with mean"
        );
        let mut bag = Bag::new(4, 2, 6, 2, MODE_SUM, false, -1);
        bag.tensors
            .insert("input.1".into(), TensorMeta::contiguous(TorchDType::I64, &[2, 3]));
        assert!(
            matches!(lower(&bag.req(), TargetName::Trn1), Err(LowerError::Unsupported { .. })),
            "2-D indices"
        );
        let mut bag = Bag::new(4, 2, 3, 2, MODE_SUM, false, -1);
        bag.tensors
            .insert("input.0".into(), TensorMeta::contiguous(TorchDType::I64, &[4, 2]));
        assert!(
            matches!(lower(&bag.req(), TargetName::Trn1), Err(LowerError::Unsupported { .. })),
            "int weight"
        );
    }

    /// Max over more rows than one work tile holds: the chunks merge with a strict `>`, so the
    /// first maximum wins, and a bag whose rows all sit in a later chunk still finds them.
    #[test]
    fn max_keeps_the_first_maximum_across_row_chunks() {
        let n = MAX_TILE + 104;
        let bag = Bag::new(3, 1, n, 3, MODE_MAX, false, -1);
        let lowered = lower(&bag.req(), TargetName::Trn1)
            .map(crate::schedule)
            .expect("lowers");
        let mut indices = vec![0i64; n];
        // Bag 0 = rows [0, 4100): value 2 first at row 10 (index 1), again at row 4000 (index 2).
        indices[10] = 1;
        indices[4000] = 2;
        // Bag 1 is empty; bag 2 = rows [4100, n), all in the second chunk: first 2 at row 4150.
        indices[4150] = 2;
        indices[4160] = 1;
        let inputs = [
            ("input.0".to_string(), HostTensor::from_f32(&[3, 1], &[1.0, 2.0, 2.0])),
            ("input.1".to_string(), int32(&indices)),
            ("input.2".to_string(), int32(&[0, 4100, 4100])),
        ]
        .into_iter()
        .collect();
        let out = Executor::new(TargetName::Trn1)
            .run(&lowered.program, &inputs)
            .expect("runs")
            .outputs;
        assert_eq!(out["output.0"].to_f32(), vec![2.0, 0.0, 2.0]);
        assert_eq!(
            ints(&out["output.3"]),
            vec![1, 0, 2],
            "first maximum; 0 for the empty bag"
        );
        assert_eq!(ints(&out["output.2"]), vec![4100, 0, (n - 4100) as i64]);
        let offset2bag = ints(&out["output.1"]);
        assert!(offset2bag[..4100].iter().all(|&b| b == 0) && offset2bag[4100..].iter().all(|&b| b == 2));
    }
}
