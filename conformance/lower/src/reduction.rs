//! The `reduction` family: `sum.dim_IntList`, `mean`, `mean.dim`, `prod`, `prod.dim_int`, `amax`,
//! `amin`, `any`, `any.dim`, `any.dims`, `var.correction`, `var.dim`, `argmax`, `argmin`,
//! `max.dim`, `min.dim`, `cumsum`.
//!
//! Layout, as a backend does it: the input is viewed through DMA access patterns so that the
//! *kept* dims are rows on SBUF partitions (tiles of ≤ 128 rows: one kept dim on partitions, the
//! other kept dims unrolled) and the *reduced* dims lie on the free axis. Long reductions are cut
//! into chunks of ≤ [`CHUNK`] elements per partition; every chunk is reduced to one column of a
//! per-row partials tile, and the partials are reduced at the end (so long sums are two-level).
//! Within a chunk, sums and products use a pairwise tree of VectorE `tensor_tensor` ops (fp32,
//! the accuracy of CPU's cascade sums); max/min use `tensor_reduce`. Integer results
//! (sum/prod/amax/amin of integers) use GpSimdE's exact int32 `tensor_tensor` tree.
//!
//! * mean = sum · (1/N); var: the corrected two-pass algorithm, `(S2 − S1²/N) / max(N − correction, 0)`
//!   with `S1 = Σ(x − mean)`, `S2 = Σ(x − mean)²` a compensated sum and a nearly correctly rounded
//!   division (`emit_var`, compensated.rs), scaled by 2⁻⁶⁴ on rows whose range could overflow;
//! * any: `x ≠ 0` (NaN counts) then max; bool out;
//! * argmax/argmin, max.dim/min.dim: per chunk the max (NaN propagates: PyTorch's NaN is the
//!   max), then the first index holding it: `iota` indices, `(x == m) ∨ isnan(x)` selects, the
//!   unselected get +2²⁴, and a min-reduce returns the first; the chunks' (value, index) pairs
//!   are combined the same way;
//! * cumsum: `tensor_tensor_scan` along the free axis, the carry from chunk to chunk as the
//!   next scan's initial value.

use super::binary::dev;
use super::compensated;
use super::promote::{self, Category};
use super::tile;
use super::tile::{Dim, Emitter, Region, SbufAllocator, Scalar, dma, loop_base, next_position};
// The SBUF buffer type and instruction builders live in tile.rs; re-exported for the lowerings
// that import them from here.
pub use super::tile::{Buf, imm, ts, tt};
use super::{LowerError, LowerRequest, Lowered};
use crate::call::{IntOrList, Scalar as CallScalar, TensorArg};
use crate::dtype::{TorchDType, contiguous_strides};
use trnsim::{
    AccessPattern, AluOp, DType, Engine, HbmRole, Iota, Op, Program, ScalarOperand, TargetName, TensorReduce,
    TensorTensorScan,
};

/// Max elements per partition of one chunk of the reduced axis.
pub const CHUNK: usize = 4096;
/// Max chunks per row (the partials tile).
const MAX_CHUNKS: usize = 4096;
/// Added to the index of unselected elements in argmax/argmin (indices stay exact in fp32).
const BIG: f64 = 16_777_216.0;

/// The reduction applied along the free axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Red {
    Sum,
    Prod,
    Max,
    Min,
}

impl Red {
    fn alu(self) -> AluOp {
        match self {
            Red::Sum => AluOp::Add,
            Red::Prod => AluOp::Multiply,
            Red::Max => AluOp::Max,
            Red::Min => AluOp::Min,
        }
    }

    fn identity(self) -> f64 {
        match self {
            Red::Sum => 0.0,
            Red::Prod => 1.0,
            Red::Max => f64::NEG_INFINITY,
            Red::Min => f64::INFINITY,
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Layout: kept dims (rows) and reduced dims (free), strides per operand [input, output].

/// A row tile: `rows` kept indices on partitions.
#[derive(Clone, Debug)]
pub struct RowTile {
    /// Element offsets of the tile's first row, per operand.
    pub base: Vec<i64>,
    pub rows: usize,
    pub pstride: Vec<i64>,
}

/// A chunk of the reduced index space: offsets and ≤ 3 free dims (strides [input, output]).
#[derive(Clone, Debug)]
pub struct Chunk {
    pub base: Vec<i64>,
    pub dims: Vec<Dim>,
}

impl Chunk {
    pub fn elems(&self) -> usize {
        self.dims.iter().map(|d| d.size).product()
    }

    pub fn free(&self, operand: usize) -> Vec<[i64; 2]> {
        if self.dims.is_empty() {
            vec![[1, 1]]
        } else {
            self.dims.iter().map(|d| [d.strides[operand], d.size as i64]).collect()
        }
    }

    /// The dense SBUF layout of the chunk (same free shape).
    pub fn dense(&self) -> Vec<[i64; 2]> {
        if self.dims.is_empty() {
            return vec![[1, 1]];
        }
        let mut free = Vec::new();
        let mut step = 1i64;
        for d in self.dims.iter().rev() {
            free.push([step, d.size as i64]);
            step *= d.size as i64;
        }
        free.reverse();
        free
    }
}

/// Kept and reduced dims of `shape` (contiguous input), the output contiguous over `out_dims`
/// (kept dims, plus the reduced dims themselves for scans).
pub struct Layout {
    pub kept: Vec<Dim>,
    pub red: Vec<Dim>,
    /// Operands (strides per dim).
    pub ops: usize,
}

impl Layout {
    /// `reduced[d]`: dim d is reduced. `scan`: the output also has the reduced dims (cumsum).
    pub fn new(shape: &[usize], reduced: &[bool], scan: bool) -> Layout {
        let cs = contiguous_strides(shape);
        let out_shape: Vec<usize> = shape
            .iter()
            .zip(reduced)
            .filter(|(_, r)| scan || !**r)
            .map(|(s, _)| *s)
            .collect();
        let ocs = contiguous_strides(&out_shape);
        let mut kept = Vec::new();
        let mut red = Vec::new();
        let mut o = 0;
        for d in 0..shape.len() {
            let out_stride = if scan || !reduced[d] {
                o += 1;
                ocs[o - 1] as i64
            } else {
                0
            };
            let dim = Dim {
                size: shape[d],
                strides: vec![cs[d] as i64, out_stride],
            };
            if reduced[d] { red.push(dim) } else { kept.push(dim) }
        }
        Layout::from_dims(kept, red)
    }

    /// From dims with any number of operand strides (all dims the same number).
    pub fn from_dims(kept: Vec<Dim>, red: Vec<Dim>) -> Layout {
        let ops = kept.iter().chain(&red).map(|d| d.strides.len()).next().unwrap_or(2);
        let simp = |dims: Vec<Dim>| {
            Region {
                base: vec![0; ops],
                dims,
            }
            .simplify()
            .dims
        };
        Layout {
            kept: simp(kept),
            red: simp(red),
            ops,
        }
    }

    pub fn kept_numel(&self) -> usize {
        self.kept.iter().map(|d| d.size).product()
    }

    pub fn red_numel(&self) -> usize {
        self.red.iter().map(|d| d.size).product()
    }

    /// Row tiles: the largest kept dim on partitions, the others unrolled.
    pub fn row_tiles(&self, partitions: usize) -> Vec<RowTile> {
        let mut tiles = Vec::new();
        if self.kept.iter().any(|d| d.size == 0) {
            return tiles;
        }
        if self.kept.is_empty() {
            tiles.push(RowTile {
                base: vec![0; self.ops],
                rows: 1,
                pstride: vec![0; self.ops],
            });
            return tiles;
        }
        let pd = (0..self.kept.len())
            .max_by_key(|&i| (self.kept[i].size, i))
            .unwrap_or(0);
        let loops: Vec<&Dim> = self
            .kept
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != pd)
            .map(|(_, d)| d)
            .collect();
        let part = &self.kept[pd];
        let mut counter = vec![0usize; loops.len()];
        loop {
            let base = loop_base(&vec![0i64; self.ops], &loops, &counter);
            let mut p0 = 0;
            while p0 < part.size {
                let rows = (part.size - p0).min(partitions);
                tiles.push(RowTile {
                    base: base.iter().zip(&part.strides).map(|(b, s)| b + s * p0 as i64).collect(),
                    rows,
                    pstride: part.strides.clone(),
                });
                p0 += rows;
            }
            if !next_position(&mut counter, &loops) {
                return tiles;
            }
        }
    }

    /// Chunks of the reduced dims, in index order (outer to inner), ≤ `max_free` elements each.
    pub fn chunks(&self, max_free: usize) -> Vec<Chunk> {
        let mut out = Vec::new();
        if self.red.iter().any(|d| d.size == 0) {
            return out;
        }
        chunk_into(vec![0; self.ops], self.red.clone(), max_free, &mut out);
        out
    }
}

fn chunk_into(base: Vec<i64>, dims: Vec<Dim>, max_free: usize, out: &mut Vec<Chunk>) {
    let k = dims.len();
    if k == 0 {
        out.push(Chunk { base, dims });
        return;
    }
    let inner = dims[k - 1].clone();
    if inner.size > max_free {
        let full = inner.size / max_free;
        let rest = inner.size % max_free;
        let mut body = dims.clone();
        body[k - 1] = Dim {
            size: full,
            strides: inner.strides.iter().map(|s| s * max_free as i64).collect(),
        };
        body.push(Dim {
            size: max_free,
            strides: inner.strides.clone(),
        });
        chunk_into(base.clone(), body, max_free, out);
        if rest > 0 {
            let mut tail = dims.clone();
            tail[k - 1].size = rest;
            let done = (full * max_free) as i64;
            let b = base.iter().zip(&inner.strides).map(|(b, s)| b + s * done).collect();
            chunk_into(b, tail, max_free, out);
        }
        return;
    }
    let mut f = k.min(3);
    while f > 1 && dims[k - f..].iter().map(|d| d.size).product::<usize>() > max_free {
        f -= 1;
    }
    let free = dims[k - f..].to_vec();
    let loops = &dims[..k - f];
    let mut counter = vec![0usize; loops.len()];
    loop {
        let b = loop_base(&base, loops, &counter);
        out.push(Chunk {
            base: b,
            dims: free.iter().filter(|d| d.size != 1).cloned().collect(),
        });
        if !next_position(&mut counter, loops) {
            return;
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Emission helpers.

/// Reduces columns `[0, w)` of `buf` (p partitions) with `op`, in place, into column 0: a
/// pairwise tree of `tensor_tensor` (VectorE for fp32, GpSimdE for exact int32).
pub fn tree_reduce(e: &mut Emitter, engine: Engine, buf: &Buf, p: usize, mut w: usize, op: AluOp) {
    while w > 1 {
        if w % 2 == 1 {
            e.tensor_tensor(engine, buf.at(p, 0, 1), buf.at(p, 0, 1), buf.at(p, w - 1, 1), op);
            w -= 1;
        }
        let h = w / 2;
        e.tensor_tensor(engine, buf.at(p, 0, h), buf.at(p, 0, h), buf.at(p, h, h), op);
        w = h;
    }
}

/// `tensor_reduce` of columns `[0, w)` of `src` into `dst` column `c`.
pub fn reduce_into(e: &mut Emitter, src: &Buf, p: usize, w: usize, op: AluOp, dst: &Buf, c: usize) {
    e.push(
        Engine::Vector,
        Op::TensorReduce(TensorReduce {
            dst: dst.col(p, c),
            src: src.cols(p, 0, w),
            op,
            axes: 1,
            negate: false,
        }),
    );
}

fn memset(e: &mut Emitter, engine: Engine, dst: AccessPattern, value: f64) {
    e.push(engine, tile::memset(dst, value));
}

fn copy(e: &mut Emitter, engine: Engine, dst: AccessPattern, src: AccessPattern) {
    e.push(engine, tile::copy(dst, src));
}

// ------------------------------------------------------------------------------------------------
// The call.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Reduce(Red),
    Mean,
    Any,
    Var,
    Arg(bool),
    ValIdx(bool),
    Cumsum,
}

struct Call {
    kind: Kind,
    input: String,
    in_dtype: TorchDType,
    shape: Vec<usize>,
    reduced: Vec<bool>,
    outs: Vec<(String, TorchDType)>,
    correction: f64,
}

/// Reduced-dim flags from the `dim` argument (absent or `None`: all dims; `[]`: all, unless
/// `empty_is_none`).
fn reduced_dims(req: &LowerRequest<'_>, ndim: usize, empty_is_none: bool) -> Result<Vec<bool>, LowerError> {
    let Some(IntOrList(list)) = req.opt(1, "dim")? else {
        return Ok(vec![true; ndim]);
    };
    if list.is_empty() {
        return Ok(vec![!empty_is_none; ndim]);
    }
    let mut r = vec![false; ndim];
    for d in list {
        let dd = req.wrap_dim(1, "dim", d, ndim)?;
        if ndim > 0 {
            r[dd] = true;
        }
    }
    Ok(r)
}

fn analyze(req: &LowerRequest<'_>) -> Result<Call, LowerError> {
    let input = req.arg::<TensorArg>(0, "self")?.0.to_string();
    let meta = req.tensor(&input)?;
    let ndim = meta.shape.len();
    let mut outs = Vec::new();
    for i in 0..req.outputs.len() {
        let name = req.output_tensor(i)?;
        outs.push((name.to_string(), req.tensor(name)?.dtype));
    }
    let mut correction = 1.0;
    let (kind, reduced) = match req.op {
        "sum.dim_IntList" => (Kind::Reduce(Red::Sum), reduced_dims(req, ndim, false)?),
        "mean" => (Kind::Mean, vec![true; ndim]),
        "mean.dim" => (Kind::Mean, reduced_dims(req, ndim, false)?),
        "prod" => (Kind::Reduce(Red::Prod), vec![true; ndim]),
        "prod.dim_int" => (Kind::Reduce(Red::Prod), reduced_dims(req, ndim, false)?),
        "amax" => (Kind::Reduce(Red::Max), reduced_dims(req, ndim, false)?),
        "amin" => (Kind::Reduce(Red::Min), reduced_dims(req, ndim, false)?),
        "any" => (Kind::Any, vec![true; ndim]),
        "any.dim" | "any.dims" => (Kind::Any, reduced_dims(req, ndim, req.op == "any.dims")?),
        "var.correction" => {
            correction = req.arg_or(2, "correction", CallScalar::Float(1.0))?.as_f64();
            (Kind::Var, reduced_dims(req, ndim, false)?)
        }
        "var.dim" => {
            let unbiased = req.arg_or(2, "unbiased", true)?;
            correction = if unbiased { 1.0 } else { 0.0 };
            (Kind::Var, reduced_dims(req, ndim, false)?)
        }
        "argmax" | "argmin" => (Kind::Arg(req.op == "argmax"), reduced_dims(req, ndim, false)?),
        "max.dim" | "min.dim" => (Kind::ValIdx(req.op == "max.dim"), reduced_dims(req, ndim, false)?),
        "cumsum" => (Kind::Cumsum, reduced_dims(req, ndim, false)?),
        _ => return Err(LowerError::NotLowered(req.op.to_string())),
    };
    if meta.dtype.is_complex() || outs.iter().any(|(_, d)| d.is_complex()) {
        return Err(req.unsupported("complex".into()));
    }
    Ok(Call {
        kind,
        input,
        in_dtype: meta.dtype,
        shape: meta.shape.clone(),
        reduced,
        outs,
        correction,
    })
}

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let call = analyze(req)?;
    Ok(Lowered::new(emit(req, &call, target)?))
}

/// Shared state of a program being built.
pub struct Ctx {
    pub e: Emitter,
    pub alloc: SbufAllocator,
    pub partitions: usize,
    /// Scratch of float block sums (`CHUNK / SUM_BLOCK + 1` fp32 columns), when allocated.
    pub sum_tmp: Option<Buf>,
}

impl Ctx {
    pub fn new(target_name: TargetName, program: Program) -> Ctx {
        let target = target_name.params();
        Ctx {
            e: Emitter::new(program),
            alloc: SbufAllocator::new(&target),
            partitions: target.partitions,
            sum_tmp: None,
        }
    }
}

/// DMA of one chunk of a row tile from HBM tensor `name` into `buf` (dense), casting to the
/// buffer's dtype.
pub fn load_chunk(ctx: &mut Ctx, buf: &Buf, name: &str, dtype: DType, rt: &RowTile, ch: &Chunk) {
    load_op(ctx, buf, name, dtype, rt, ch, 0)
}

/// The HBM elements of one chunk of a row tile of tensor `name`, with the strides of operand
/// `op`.
fn chunk_hbm(name: &str, dtype: DType, rt: &RowTile, ch: &Chunk, op: usize) -> AccessPattern {
    let offset = (rt.base[op] + ch.base[op]) as u64;
    AccessPattern::hbm(name, dtype, offset, rt.rows, rt.pstride[op], ch.free(op))
}

/// As [`load_chunk`], with the strides of operand `op`.
pub fn load_op(ctx: &mut Ctx, buf: &Buf, name: &str, dtype: DType, rt: &RowTile, ch: &Chunk, op: usize) {
    let src = chunk_hbm(name, dtype, rt, ch, op);
    ctx.e.push(Engine::Dma, dma(buf.shaped(rt.rows, ch.dense()), src));
}

/// DMA of a chunk of `buf` (dense) to HBM tensor `name` with the strides of operand `op`.
pub fn store_op(ctx: &mut Ctx, buf: &Buf, name: &str, dtype: DType, rt: &RowTile, ch: &Chunk, op: usize) {
    let dst = chunk_hbm(name, dtype, rt, ch, op);
    ctx.e.push(Engine::Dma, dma(dst, buf.shaped(rt.rows, ch.dense())));
}

/// DMA of `[rows, 1]` column `c` of `buf` to the output elements of a row tile.
pub fn store_col(ctx: &mut Ctx, buf: &Buf, c: usize, name: &str, dtype: DType, rt: &RowTile) {
    store_col_op(ctx, buf, c, name, dtype, rt, 1)
}

/// As [`store_col`], with the row strides of operand `op`.
pub fn store_col_op(ctx: &mut Ctx, buf: &Buf, c: usize, name: &str, dtype: DType, rt: &RowTile, op: usize) {
    let dst = AccessPattern::hbm(name, dtype, rt.base[op] as u64, rt.rows, rt.pstride[op], vec![[1, 1]]);
    ctx.e.push(Engine::Dma, dma(dst, buf.col(rt.rows, c)));
}

/// DMA of the `[rows, 1]` elements of a row tile of HBM tensor `name` (operand `op`) into column
/// `c` of `buf`.
pub fn load_col_op(ctx: &mut Ctx, buf: &Buf, c: usize, name: &str, dtype: DType, rt: &RowTile, op: usize) {
    let src = AccessPattern::hbm(name, dtype, rt.base[op] as u64, rt.rows, rt.pstride[op], vec![[1, 1]]);
    ctx.e.push(Engine::Dma, dma(buf.col(rt.rows, c), src));
}

fn emit(req: &LowerRequest<'_>, call: &Call, target_name: TargetName) -> Result<Program, LowerError> {
    let mut program = Program::new(target_name);
    let in_dev = dev(req, call.in_dtype)?;
    program.declare(&call.input, in_dev, &call.shape, HbmRole::Input);
    let mut out_devs = Vec::new();
    for (name, d) in &call.outs {
        let dd = dev(req, *d)?;
        program.declare(name, dd, &req.tensor(name)?.shape, HbmRole::Output);
        out_devs.push(dd);
    }
    let layout = Layout::new(&call.shape, &call.reduced, call.kind == Kind::Cumsum);
    // The output must hold exactly the kept elements (or all, for a scan).
    let out_numel: usize = req.tensor(&call.outs[0].0)?.shape.iter().product();
    let want = if call.kind == Kind::Cumsum {
        layout.kept_numel() * layout.red_numel()
    } else {
        layout.kept_numel()
    };
    if out_numel != want {
        return Err(req.invalid(format!("output has {out_numel} elements, the reduction gives {want}")));
    }
    let mut ctx = Ctx::new(target_name, program);
    let rows = layout.row_tiles(ctx.partitions);
    let chunks = layout.chunks(CHUNK);
    if chunks.len() > MAX_CHUNKS {
        return Err(req.unsupported(format!("reduction of {} elements", layout.red_numel())));
    }
    let n = layout.red_numel();
    match call.kind {
        Kind::Cumsum => emit_cumsum(&mut ctx, call, in_dev, out_devs[0], &rows, &chunks)?,
        Kind::Arg(is_max) => emit_argminmax(&mut ctx, call, in_dev, &out_devs, &rows, &chunks, is_max, false)?,
        Kind::ValIdx(is_max) => emit_argminmax(&mut ctx, call, in_dev, &out_devs, &rows, &chunks, is_max, true)?,
        _ => emit_reduce(&mut ctx, call, in_dev, out_devs[0], &rows, &chunks, n, &layout)?,
    }
    Ok(ctx.e.finish())
}

#[allow(clippy::too_many_arguments)]
fn emit_reduce(
    ctx: &mut Ctx,
    call: &Call,
    in_dev: DType,
    out_dev: DType,
    rows: &[RowTile],
    chunks: &[Chunk],
    n: usize,
    layout: &Layout,
) -> Result<(), LowerError> {
    let out_dtype = call.outs[0].1;
    let red = match call.kind {
        Kind::Reduce(r) => r,
        Kind::Mean | Kind::Var => Red::Sum,
        Kind::Any => Red::Max,
        _ => unreachable!(),
    };
    // Exact int32 on GpSimd for integer results; fp32 on VectorE otherwise.
    let int_path = matches!(call.kind, Kind::Reduce(_)) && promote::category(out_dtype) == Category::Integer;
    let (engine, work) = if int_path {
        (Engine::Gpsimd, DType::I32)
    } else {
        (Engine::Vector, DType::F32)
    };
    let x = Buf::new(&mut ctx.alloc, work, CHUNK)?;
    let parts = Buf::new(&mut ctx.alloc, work, chunks.len().max(1))?;
    let mean = Buf::new(&mut ctx.alloc, DType::F32, 1)?;
    ctx.sum_tmp = Some(Buf::new(&mut ctx.alloc, DType::F32, CHUNK / SUM_BLOCK + 1)?);
    let p_all = ctx.partitions;
    if call.kind == Kind::Var {
        return emit_var(ctx, call, in_dev, out_dev, rows, chunks, n, &x);
    }
    if !int_path
        && call.kind != Kind::Var
        && red != Red::Prod
        && layout.kept.is_empty()
        && layout.red.len() == 1
        && layout.red[0].size >= SPREAD_MIN
    {
        return emit_reduce_spread(ctx, call, in_dev, out_dev, &layout.red[0], red, n, &x, &mean);
    }
    for rt in rows {
        let p = rt.rows;
        if chunks.is_empty() {
            // Empty reduction: the identity.
            memset(&mut ctx.e, engine, parts.col(p, 0), red.identity());
        }
        for (c, ch) in chunks.iter().enumerate() {
            let w = ch.elems();
            load_chunk(ctx, &x, &call.input, in_dev, rt, ch);
            if call.kind == Kind::Any {
                ctx.e
                    .tensor_scalar_imm(Engine::Vector, x.at(p, 0, w), x.at(p, 0, w), AluOp::NotEqual, 0.0);
            }
            reduce_chunk(ctx, engine, &x, p, w, red, &parts, c);
        }
        finish_partials(ctx, engine, &parts, p, chunks.len(), red);
        let _ = p_all;
        if call.kind == Kind::Mean {
            let inv = inv_or_inf(n as f64);
            ctx.e.tensor_scalar_imm(
                Engine::Vector,
                parts.at(p, 0, 1),
                parts.at(p, 0, 1),
                AluOp::Multiply,
                inv,
            );
        }
        store_col(ctx, &parts, 0, &call.outs[0].0, out_dev, rt);
    }
    Ok(())
}

/// Variance of float rows: the corrected two-pass algorithm with compensated sums, as close to
/// PyTorch's CPU (which accumulates in double and rounds once) as fp32 allows.
///
/// Pass 1: `mean = Σx · (1/N)` (the blocked sum of the other reductions) and the row's max and
/// min. Pass 2: `d = (x − mean)·s`, `S1 = Σd`, `S2 = Σd²` with `S2` a compensated pair
/// ([`compensated::sum2`]); `var = (S2 − S1²/N) / (N − correction) / s²` with a nearly correctly
/// rounded division ([`compensated::div_pair`]). `S1²/N` corrects the rounding of the mean
/// (Chan, Golub and LeVeque's corrected two-pass). `s` is 2⁻⁶⁴ where the row's range
/// `max − min` is at least 2⁵⁰ (else 1), so neither the squares nor their sum overflow fp32
/// where the variance itself does not (N ≤ 2²⁴); the power of two is exact both ways.
#[allow(clippy::too_many_arguments)]
fn emit_var(
    ctx: &mut Ctx,
    call: &Call,
    in_dev: DType,
    out_dev: DType,
    rows: &[RowTile],
    chunks: &[Chunk],
    n: usize,
    x: &Buf,
) -> Result<(), LowerError> {
    let v = Engine::Vector;
    let f = DType::F32;
    let nch = chunks.len().max(1);
    let parts = Buf::new(&mut ctx.alloc, f, nch)?;
    let mx = Buf::new(&mut ctx.alloc, f, nch)?;
    let mn = Buf::new(&mut ctx.alloc, f, nch)?;
    let s1 = Buf::new(&mut ctx.alloc, f, nch)?;
    let hi = Buf::new(&mut ctx.alloc, f, nch)?;
    let lo = Buf::new(&mut ctx.alloc, f, nch)?;
    let corr = Buf::new(&mut ctx.alloc, f, nch)?;
    let ex = [
        Buf::new(&mut ctx.alloc, f, CHUNK)?,
        Buf::new(&mut ctx.alloc, f, CHUNK)?,
        Buf::new(&mut ctx.alloc, f, CHUNK)?,
        Buf::new(&mut ctx.alloc, f, CHUNK)?,
    ];
    // Columns: 0 mean, 1 scale, 2 1/scale, 3 range / flag, 4 H, 5 L / result, 6 S1, 7 scratch.
    let st = Buf::new(&mut ctx.alloc, f, 8)?;
    let Some(p_max) = rows.iter().map(|r| r.rows).max() else {
        return Ok(());
    };
    let sc = compensated::Scratch::new(&mut ctx.e, &mut ctx.alloc, p_max)?;
    let denom = (n as f64 - call.correction).max(0.0);
    let inv_n = inv_or_inf(n as f64);
    for rt in rows {
        let p = rt.rows;
        let col = |c: usize| st.col(p, c);
        let s = |c: usize| st.scalar(p, c);
        if chunks.is_empty() {
            // Empty rows: 0 · (1/0) = NaN, as PyTorch.
            memset(&mut ctx.e, v, col(5), 0.0);
            ctx.e
                .tensor_scalar_imm(v, st.at(p, 5, 1), st.at(p, 5, 1), AluOp::Multiply, 1e39);
            store_col(ctx, &st, 5, &call.outs[0].0, out_dev, rt);
            continue;
        }
        for (c, ch) in chunks.iter().enumerate() {
            let w = ch.elems();
            load_chunk(ctx, x, &call.input, in_dev, rt, ch);
            reduce_into(&mut ctx.e, x, p, w, AluOp::Max, &mx, c);
            reduce_into(&mut ctx.e, x, p, w, AluOp::Min, &mn, c);
            reduce_chunk(ctx, v, x, p, w, Red::Sum, &parts, c);
        }
        finish_partials(ctx, v, &parts, p, chunks.len(), Red::Sum);
        ctx.e
            .tensor_scalar_imm(v, st.at(p, 0, 1), parts.at(p, 0, 1), AluOp::Multiply, inv_n);
        // flag = (max − min ≥ 2⁵⁰); scale = flag·2⁻⁶⁴ + (1 − flag); 1/scale = flag·2⁶⁴ + (1 − flag)
        reduce_into(&mut ctx.e, &mx, p, chunks.len(), AluOp::Max, &st, 3);
        reduce_into(&mut ctx.e, &mn, p, chunks.len(), AluOp::Min, &st, 1);
        ctx.e.push(v, tt(col(3), col(3), col(1), AluOp::Subtract));
        ctx.e
            .tensor_scalar_imm(v, st.at(p, 3, 1), st.at(p, 3, 1), AluOp::IsGe, 2f64.powi(50));
        ctx.e.tensor_scalar_imm2(
            v,
            st.at(p, 7, 1),
            st.at(p, 3, 1),
            (AluOp::Multiply, -1.0),
            (AluOp::Add, 1.0),
        );
        ctx.e.scalar_tensor_tensor(
            v,
            st.at(p, 1, 1),
            st.at(p, 3, 1),
            AluOp::Multiply,
            imm(2f64.powi(-64)),
            AluOp::Add,
            st.at(p, 7, 1),
        );
        ctx.e.scalar_tensor_tensor(
            v,
            st.at(p, 2, 1),
            st.at(p, 3, 1),
            AluOp::Multiply,
            imm(2f64.powi(64)),
            AluOp::Add,
            st.at(p, 7, 1),
        );
        for (c, ch) in chunks.iter().enumerate() {
            let w = ch.elems();
            load_chunk(ctx, x, &call.input, in_dev, rt, ch);
            let e = &mut ctx.e;
            let (xa, aa, ba, ca, da) = (
                x.at(p, 0, w),
                ex[0].at(p, 0, w),
                ex[1].at(p, 0, w),
                ex[2].at(p, 0, w),
                ex[3].at(p, 0, w),
            );
            // dh = x − mean and its exact error dl (TwoSum), both times the scale (exact)
            e.tensor_scalar(v, aa, xa, AluOp::Subtract, s(0), None);
            e.tensor_tensor(v, ba, aa, xa, AluOp::Subtract);
            e.tensor_tensor(v, ca, aa, ba, AluOp::Subtract);
            e.tensor_tensor(v, ca, xa, ca, AluOp::Subtract);
            e.tensor_scalar(
                v,
                ba,
                ba,
                AluOp::Multiply,
                Scalar::Imm(-1.0),
                Some((AluOp::Subtract, s(0))),
            );
            e.tensor_tensor(v, ba, ba, ca, AluOp::Add);
            e.tensor_scalar(v, aa, aa, AluOp::Multiply, s(1), None);
            e.tensor_scalar(v, ba, ba, AluOp::Multiply, s(1), None);
            // S1 += Σdh
            reduce_into(e, &ex[0], p, w, AluOp::Add, &s1, c);
            // Veltkamp split dh = hh + hl (12 + 12 bits)
            e.tensor_scalar_imm(v, ca, aa, AluOp::Multiply, 4097.0);
            e.tensor_tensor(v, da, ca, aa, AluOp::Subtract);
            e.tensor_tensor(v, ca, ca, da, AluOp::Subtract);
            e.tensor_tensor(v, da, aa, ca, AluOp::Subtract);
            // x = fl(dh²); b = 2·dh·dl
            e.tensor_tensor(v, xa, aa, aa, AluOp::Multiply);
            e.scalar_tensor_tensor(v, ba, aa, AluOp::Multiply, imm(2.0), AluOp::Multiply, ba);
            // a = (hh² − fl(dh²)) + 2·hh·hl + hl² (the exact error of dh², Dekker) + 2·dh·dl
            e.tensor_tensor(v, aa, ca, ca, AluOp::Multiply);
            e.tensor_tensor(v, aa, aa, xa, AluOp::Subtract);
            e.scalar_tensor_tensor(v, ca, ca, AluOp::Multiply, imm(2.0), AluOp::Multiply, da);
            e.tensor_tensor(v, aa, aa, ca, AluOp::Add);
            e.tensor_tensor(v, da, da, da, AluOp::Multiply);
            e.tensor_tensor(v, aa, aa, da, AluOp::Add);
            e.tensor_tensor(v, aa, aa, ba, AluOp::Add);
            reduce_into(e, &ex[0], p, w, AluOp::Add, &corr, c);
            // S2 = Σ fl(dh²) (compensated) + Σ corrections
            compensated::sum2(e, &sc, x, p, w, hi.col(p, c), lo.col(p, c));
        }
        let k = chunks.len();
        compensated::sum2_parts(&mut ctx.e, &sc, &hi, &lo, p, k, col(4), col(5));
        reduce_into(&mut ctx.e, &corr, p, k, AluOp::Add, &st, 7);
        ctx.e.push(v, tt(col(5), col(5), col(7), AluOp::Add));
        reduce_into(&mut ctx.e, &s1, p, k, AluOp::Add, &st, 6);
        // t = L − S1·S1/N
        ctx.e.push(v, tt(col(7), col(6), col(6), AluOp::Multiply));
        ctx.e
            .tensor_scalar_imm(v, st.at(p, 7, 1), st.at(p, 7, 1), AluOp::Multiply, inv_n);
        ctx.e.push(v, tt(col(7), col(5), col(7), AluOp::Subtract));
        compensated::finite_or_zero(&mut ctx.e, &sc, p, col(7));
        compensated::div_pair(&mut ctx.e, &sc, p, col(4), Some(col(7)), denom, col(5));
        ctx.e.tensor_scalar(
            v,
            st.at(p, 5, 1),
            st.at(p, 5, 1),
            AluOp::Multiply,
            s(2),
            Some((AluOp::Multiply, s(2))),
        );
        store_col(ctx, &st, 5, &call.outs[0].0, out_dev, rt);
    }
    Ok(())
}

/// `1/d` as an immediate; `1/0` as 1e39, which rounds to +inf in fp32 (JSON has no infinity).
fn inv_or_inf(d: f64) -> f64 {
    if d == 0.0 { 1e39 } else { 1.0 / d }
}

/// Leaf block of float sums: sequential `tensor_reduce` over blocks of this many elements, then a
/// pairwise tree over the block sums (the shape of CPU's vectorized cascade sums).
pub const SUM_BLOCK: usize = 8;

/// Sums the `w` columns of `x` (fp32) into column 0 of `x`: blocks of [`SUM_BLOCK`] reduced
/// sequentially into `tmp`, then a pairwise tree; the result is copied back to `x` column 0.
pub fn block_sum(e: &mut Emitter, x: &Buf, tmp: &Buf, p: usize, w: usize) {
    if w <= 1 {
        return;
    }
    block_sum_to(e, x, tmp, p, w);
    copy(e, Engine::Vector, x.col(p, 0), tmp.col(p, 0));
}

/// [`block_sum`] that leaves `x` untouched: the sum of its `w` columns ends in `tmp` column 0
/// (same order, same result), so a caller that still needs `x` saves copying it first.
pub fn block_sum_to(e: &mut Emitter, x: &Buf, tmp: &Buf, p: usize, w: usize) {
    if w == 1 {
        copy(e, Engine::Vector, tmp.col(p, 0), x.col(p, 0));
        return;
    }
    let nb = w / SUM_BLOCK;
    let rem = w % SUM_BLOCK;
    if nb == 0 {
        if w > 1 {
            reduce_into(e, x, p, w, AluOp::Add, tmp, 0);
        }
        return;
    }
    let src = x.shaped(p, vec![[SUM_BLOCK as i64, nb as i64], [1, SUM_BLOCK as i64]]);
    e.push(
        Engine::Vector,
        Op::TensorReduce(TensorReduce {
            dst: tmp.cols(p, 0, nb),
            src,
            op: AluOp::Add,
            axes: 1,
            negate: false,
        }),
    );
    let mut n = nb;
    if rem > 0 {
        let src = AccessPattern::sbuf(
            x.dtype,
            0,
            p,
            x.slot.offset + (nb * SUM_BLOCK * x.dtype.size()) as u64,
            vec![[1, rem as i64]],
        );
        e.push(
            Engine::Vector,
            Op::TensorReduce(TensorReduce {
                dst: tmp.col(p, nb),
                src,
                op: AluOp::Add,
                axes: 1,
                negate: false,
            }),
        );
        n += 1;
    }
    tree_reduce(e, Engine::Vector, tmp, p, n, AluOp::Add);
}

/// Reduces the `w` columns of `x` into column `c` of `parts`.
#[allow(clippy::too_many_arguments)]
fn reduce_chunk(ctx: &mut Ctx, engine: Engine, x: &Buf, p: usize, w: usize, red: Red, parts: &Buf, c: usize) {
    match (engine, red) {
        (Engine::Vector, Red::Max | Red::Min) => reduce_into(&mut ctx.e, x, p, w, red.alu(), parts, c),
        (Engine::Vector, Red::Sum) => {
            let tmp = ctx.sum_tmp.expect("sum scratch allocated");
            block_sum(&mut ctx.e, x, &tmp, p, w);
            copy(&mut ctx.e, engine, parts.col(p, c), x.col(p, 0));
        }
        _ => {
            tree_reduce(&mut ctx.e, engine, x, p, w, red.alu());
            copy(&mut ctx.e, engine, parts.col(p, c), x.col(p, 0));
        }
    }
}

fn finish_partials(ctx: &mut Ctx, engine: Engine, parts: &Buf, p: usize, n: usize, red: Red) {
    if n <= 1 {
        return;
    }
    match (engine, red) {
        (Engine::Vector, Red::Max | Red::Min) => {
            // In place is not allowed for tensor_reduce's dst overlapping src: tree instead.
            tree_reduce(&mut ctx.e, engine, parts, p, n, red.alu())
        }
        _ => tree_reduce(&mut ctx.e, engine, parts, p, n, red.alu()),
    }
}

/// argmax/argmin (`with_values`: max.dim/min.dim, output 0 the values, 1 the indices).
#[allow(clippy::too_many_arguments)]
fn emit_argminmax(
    ctx: &mut Ctx,
    call: &Call,
    in_dev: DType,
    out_devs: &[DType],
    rows: &[RowTile],
    chunks: &[Chunk],
    is_max: bool,
    with_values: bool,
) -> Result<(), LowerError> {
    let op = if is_max { AluOp::Max } else { AluOp::Min };
    let v = Engine::Vector;
    let red_stride = |ch: &Chunk| -> i64 {
        // Single reduced dim (after simplification): index = offset / stride.
        ch.dims.last().map(|d| d.strides[0]).unwrap_or(1).max(1)
    };
    if chunks.iter().any(|c| c.dims.len() > 1) {
        return Err(LowerError::Unsupported {
            op: call.outs[0].0.clone(),
            reason: "argmax over several dims".into(),
        });
    }
    let x = Buf::new(&mut ctx.alloc, DType::F32, CHUNK)?;
    let idx = Buf::new(&mut ctx.alloc, DType::F32, CHUNK)?;
    let t = Buf::new(&mut ctx.alloc, DType::F32, CHUNK)?;
    let u = Buf::new(&mut ctx.alloc, DType::F32, CHUNK)?;
    let nch = chunks.len().max(1);
    let pm = Buf::new(&mut ctx.alloc, DType::F32, nch)?;
    let pi = Buf::new(&mut ctx.alloc, DType::F32, nch)?;
    let m = Buf::new(&mut ctx.alloc, DType::F32, 1)?;
    let r = Buf::new(&mut ctx.alloc, DType::F32, 1)?;
    // Picks, among `w` columns of `vals` with indices `ids`, the first index holding the extreme
    // (or the first NaN): extreme → m[0], index → r[0].
    let pick = |ctx: &mut Ctx, vals: &Buf, ids: &Buf, p: usize, w: usize| {
        let e = &mut ctx.e;
        e.push(
            v,
            Op::TensorReduce(TensorReduce {
                dst: m.col(p, 0),
                src: vals.cols(p, 0, w),
                op,
                axes: 1,
                negate: false,
            }),
        );
        // t = (vals == m); u = (vals != vals); t = max(t, u)
        e.tensor_scalar(v, t.at(p, 0, w), vals.at(p, 0, w), AluOp::IsEqual, m.scalar(p, 0), None);
        e.tensor_tensor(v, u.at(p, 0, w), vals.at(p, 0, w), vals.at(p, 0, w), AluOp::NotEqual);
        e.tensor_tensor(v, t.at(p, 0, w), t.at(p, 0, w), u.at(p, 0, w), AluOp::Max);
        // t = (t − 1) · (−BIG) + ids  → ids where selected, ids + BIG elsewhere
        e.tensor_scalar_imm2(
            v,
            t.at(p, 0, w),
            t.at(p, 0, w),
            (AluOp::Subtract, 1.0),
            (AluOp::Multiply, -BIG),
        );
        e.tensor_tensor(v, t.at(p, 0, w), t.at(p, 0, w), ids.at(p, 0, w), AluOp::Add);
        e.push(
            v,
            Op::TensorReduce(TensorReduce {
                dst: r.col(p, 0),
                src: t.cols(p, 0, w),
                op: AluOp::Min,
                axes: 1,
                negate: false,
            }),
        );
    };
    for rt in rows {
        let p = rt.rows;
        for (c, ch) in chunks.iter().enumerate() {
            let w = ch.elems();
            let start = ch.base[0] / red_stride(ch);
            load_chunk(ctx, &x, &call.input, in_dev, rt, ch);
            ctx.e.push(
                Engine::Gpsimd,
                Op::Iota(Iota {
                    dst: idx.cols(p, 0, w),
                    offset: start,
                    channel_multiplier: 0,
                    pattern: vec![[1, w as i64]],
                }),
            );
            pick(ctx, &x, &idx, p, w);
            copy(&mut ctx.e, v, pm.col(p, c), m.col(p, 0));
            copy(&mut ctx.e, v, pi.col(p, c), r.col(p, 0));
        }
        if chunks.len() > 1 {
            pick(ctx, &pm, &pi, p, chunks.len());
        }
        if with_values {
            store_col(ctx, &m, 0, &call.outs[0].0, out_devs[0], rt);
            store_col(ctx, &r, 0, &call.outs[1].0, out_devs[1], rt);
        } else {
            store_col(ctx, &r, 0, &call.outs[0].0, out_devs[0], rt);
        }
    }
    Ok(())
}

/// cumsum along one dim. Floats: VectorE `tensor_tensor_scan` (fp32 running sum, sequential like
/// CPU's) compensated by a second scan of its rounding errors ([`emit_fscan`]: CPU accumulates
/// f32 in double), the carries from chunk to chunk as the next scans' `initial`. Integer results: exact
/// int32 on GpSimdE, a Hillis–Steele scan per chunk (`log2(w)` shifted adds, ping-pong between two
/// tiles; wrapping, so exact whenever the int64 result fits int32) plus the carry.
fn emit_cumsum(
    ctx: &mut Ctx,
    call: &Call,
    in_dev: DType,
    out_dev: DType,
    rows: &[RowTile],
    chunks: &[Chunk],
) -> Result<(), LowerError> {
    let int_path = promote::category(call.outs[0].1) == Category::Integer;
    let (engine, work) = if int_path {
        (Engine::Gpsimd, DType::I32)
    } else {
        (Engine::Vector, DType::F32)
    };
    let a = Buf::new(&mut ctx.alloc, work, CHUNK)?;
    let b = Buf::new(&mut ctx.alloc, work, CHUNK)?;
    let carry = Buf::new(&mut ctx.alloc, work, 1)?;
    let zeros = Buf::new(&mut ctx.alloc, DType::F32, CHUNK)?;
    let fs = FScan {
        s: Buf::new(&mut ctx.alloc, DType::F32, CHUNK)?,
        prev: Buf::new(&mut ctx.alloc, DType::F32, CHUNK + 1)?,
        t1: Buf::new(&mut ctx.alloc, DType::F32, CHUNK)?,
        t2: Buf::new(&mut ctx.alloc, DType::F32, CHUNK)?,
        mask: Buf::new(&mut ctx.alloc, DType::U8, CHUNK)?,
        c: Buf::new(&mut ctx.alloc, DType::F32, CHUNK)?,
        carry_hi: carry,
        carry_lo: Buf::new(&mut ctx.alloc, DType::F32, 1)?,
    };
    if !int_path {
        let zw = chunks.iter().map(|c| c.elems()).max().unwrap_or(1);
        let p_all = rows.iter().map(|r| r.rows).max().unwrap_or(1);
        memset(&mut ctx.e, Engine::Vector, zeros.cols(p_all, 0, zw), 0.0);
    }
    for rt in rows {
        let p = rt.rows;
        for (c, ch) in chunks.iter().enumerate() {
            let w = ch.elems();
            load_chunk(ctx, &a, &call.input, in_dev, rt, ch);
            let (mut cur, mut nxt) = (a, b);
            if !int_path {
                emit_fscan(ctx, &a, &b, &zeros, &fs, p, w, c > 0);
                if c + 1 < chunks.len() {
                    copy(&mut ctx.e, engine, carry.col(p, 0), fs.s.col(p, w - 1));
                    copy(&mut ctx.e, engine, fs.carry_lo.col(p, 0), fs.c.col(p, w - 1));
                }
                store_op(ctx, &b, &call.outs[0].0, out_dev, rt, ch, 1);
                continue;
            }
            if w == 1 {
                copy(&mut ctx.e, engine, nxt.col(p, 0), cur.col(p, 0));
                std::mem::swap(&mut cur, &mut nxt);
            }
            let mut k = 1;
            while k < w {
                copy(&mut ctx.e, engine, nxt.cols(p, 0, k), cur.cols(p, 0, k));
                let shifted = AccessPattern::sbuf(work, 0, p, cur.slot.offset, vec![[1, (w - k) as i64]]);
                let hi = AccessPattern::sbuf(
                    work,
                    0,
                    p,
                    cur.slot.offset + (k * work.size()) as u64,
                    vec![[1, (w - k) as i64]],
                );
                let dst = AccessPattern::sbuf(
                    work,
                    0,
                    p,
                    nxt.slot.offset + (k * work.size()) as u64,
                    vec![[1, (w - k) as i64]],
                );
                ctx.e.push(engine, tt(dst, hi, shifted, AluOp::Add));
                std::mem::swap(&mut cur, &mut nxt);
                k *= 2;
            }
            if c > 0 {
                let bc = AccessPattern::sbuf(work, 0, p, carry.slot.offset, vec![[0, w as i64]]);
                ctx.e
                    .push(engine, tt(cur.cols(p, 0, w), cur.cols(p, 0, w), bc, AluOp::Add));
            }
            if c + 1 < chunks.len() {
                copy(&mut ctx.e, engine, carry.col(p, 0), cur.col(p, w - 1));
            }
            store_op(ctx, &cur, &call.outs[0].0, out_dev, rt, ch, 1);
        }
    }
    Ok(())
}

/// Scratch of the compensated fp32 scan.
struct FScan {
    s: Buf,
    prev: Buf,
    t1: Buf,
    t2: Buf,
    mask: Buf,
    c: Buf,
    carry_hi: Buf,
    carry_lo: Buf,
}

/// Compensated fp32 prefix sum of `x` (w columns) into `out`, emulating CPU's cumsum, which
/// accumulates f32 in double: `S = scan(x)` (fp32 running sum, `tensor_tensor_scan`), the exact
/// rounding error of every step by TwoSum (`e = (S₋ − (S − (S − S₋))) + (x − (S − S₋))`, S₋ the
/// previous running sum), kept only where a double accumulator would keep it (|e| ≥ 2⁻⁵³·|S|;
/// non-finite steps give no error term), `C = scan(e)`, `out = S + C`. With `carry`, the running
/// sums continue from the previous chunk's (`carry_hi`, `carry_lo`).
#[allow(clippy::too_many_arguments)]
fn emit_fscan(ctx: &mut Ctx, x: &Buf, out: &Buf, zeros: &Buf, fs: &FScan, p: usize, w: usize, carry: bool) {
    let v = Engine::Vector;
    let e = &mut ctx.e;
    let scan = |e: &mut Emitter, dst: &Buf, src: &Buf, init: Option<&Buf>| {
        let initial = match init {
            Some(b) => ScalarOperand::Tile(b.col(p, 0)),
            None => imm(0.0),
        };
        e.push(
            v,
            Op::TensorTensorScan(TensorTensorScan {
                dst: dst.cols(p, 0, w),
                in0: zeros.cols(p, 0, w),
                in1: src.cols(p, 0, w),
                initial,
                op0: AluOp::Add,
                op1: AluOp::Add,
            }),
        );
    };
    let (s, prev, t1, t2, mask, c) = (&fs.s, &fs.prev, &fs.t1, &fs.t2, &fs.mask, &fs.c);
    scan(e, s, x, carry.then_some(&fs.carry_hi));
    // prev = [S₋₁, S₀ … S_{w−2}]
    if carry {
        copy(e, v, prev.col(p, 0), fs.carry_hi.col(p, 0));
    } else {
        memset(e, v, prev.col(p, 0), 0.0);
    }
    if w > 1 {
        copy(e, v, prev.cols(p, 1, w - 1), s.cols(p, 0, w - 1));
    }
    let pv = prev.cols(p, 0, w);
    // t1 = S − prev (b'), t2 = S − t1 (a'), t2 = prev − t2, t1 = x − t1, t1 = t1 + t2 (e)
    e.push(v, tt(t1.cols(p, 0, w), s.cols(p, 0, w), pv.clone(), AluOp::Subtract));
    e.tensor_tensor(v, t2.at(p, 0, w), s.at(p, 0, w), t1.at(p, 0, w), AluOp::Subtract);
    e.push(v, tt(t2.cols(p, 0, w), pv, t2.cols(p, 0, w), AluOp::Subtract));
    e.tensor_tensor(v, t1.at(p, 0, w), x.at(p, 0, w), t1.at(p, 0, w), AluOp::Subtract);
    e.tensor_tensor(v, t1.at(p, 0, w), t1.at(p, 0, w), t2.at(p, 0, w), AluOp::Add);
    // mask = |e| ≥ 2⁻⁵³·|S|  (false for NaN e)
    e.tensor_scalar_imm2(
        v,
        t2.at(p, 0, w),
        s.at(p, 0, w),
        (AluOp::Abs, 0.0),
        (AluOp::Multiply, 2f64.powi(-53)),
    );
    e.tensor_scalar_imm(v, c.at(p, 0, w), t1.at(p, 0, w), AluOp::Abs, 0.0);
    e.tensor_tensor(v, mask.at(p, 0, w), c.at(p, 0, w), t2.at(p, 0, w), AluOp::IsGe);
    // t2 = mask ? e : 0
    memset(e, v, t2.cols(p, 0, w), 0.0);
    e.push(
        v,
        tile::copy_pred(t2.cols(p, 0, w), t1.cols(p, 0, w), mask.cols(p, 0, w)),
    );
    scan(e, c, t2, carry.then_some(&fs.carry_lo));
    e.tensor_tensor(v, out.at(p, 0, w), s.at(p, 0, w), c.at(p, 0, w), AluOp::Add);
}

/// Full reductions at least this long are spread over all partitions.
const SPREAD_MIN: usize = 4096;

/// A full reduction of one long dim (one output element), spread over the partitions as a
/// `[P, R/P]` view (+ a tail row of `R mod P` elements): each partition reduces its row along the
/// free axis, GpSimdE's `tensor_partition_reduce` folds the P partials, and the tail's result is
/// combined last.
#[allow(clippy::too_many_arguments)]
fn emit_reduce_spread(
    ctx: &mut Ctx,
    call: &Call,
    in_dev: DType,
    out_dev: DType,
    dim: &Dim,
    red: Red,
    n: usize,
    x: &Buf,
    tot: &Buf,
) -> Result<(), LowerError> {
    let parts_n = ctx.partitions;
    let r = dim.size;
    let s = dim.strides[0];
    let cols = r / parts_n;
    let tail = r - cols * parts_n;
    let body = Layout::from_dims(
        vec![Dim {
            size: parts_n,
            strides: vec![s * cols as i64, 0],
        }],
        vec![Dim {
            size: cols,
            strides: vec![s, 0],
        }],
    );
    let tail_l = Layout::from_dims(
        vec![],
        vec![Dim {
            size: tail,
            strides: vec![s, 0],
        }],
    );
    let body_chunks = body.chunks(CHUNK);
    let tail_chunks = tail_l.chunks(CHUNK);
    let parts = Buf::new(
        &mut ctx.alloc,
        DType::F32,
        body_chunks.len().max(tail_chunks.len()).max(1),
    )?;
    let v = Engine::Vector;
    let one = RowTile {
        base: vec![0, 0],
        rows: 1,
        pstride: vec![0, 0],
    };
    let reduce_rows = |ctx: &mut Ctx, rt: &RowTile, chunks: &[Chunk]| {
        let p = rt.rows;
        for (c, ch) in chunks.iter().enumerate() {
            let w = ch.elems();
            load_chunk(ctx, x, &call.input, in_dev, rt, ch);
            if call.kind == Kind::Any {
                ctx.e
                    .tensor_scalar(v, x.at(p, 0, w), x.at(p, 0, w), AluOp::NotEqual, Scalar::Imm(0.0), None);
            }
            reduce_chunk(ctx, v, x, p, w, red, &parts, c);
        }
        finish_partials(ctx, v, &parts, p, chunks.len(), red);
    };
    let rt = body.row_tiles(parts_n).into_iter().next().expect("one row tile");
    reduce_rows(ctx, &rt, &body_chunks);
    ctx.e.push(
        Engine::Gpsimd,
        Op::TensorPartitionReduce(trnsim::TensorPartitionReduce {
            dst: tot.col(1, 0),
            src: parts.col(parts_n, 0),
            op: red.alu(),
        }),
    );
    if tail > 0 {
        let trt = RowTile {
            base: vec![s * (cols * parts_n) as i64, 0],
            rows: 1,
            pstride: vec![0, 0],
        };
        reduce_rows(ctx, &trt, &tail_chunks);
        ctx.e
            .tensor_tensor(v, tot.at(1, 0, 1), tot.at(1, 0, 1), parts.at(1, 0, 1), red.alu());
    }
    if call.kind == Kind::Mean {
        ctx.e.tensor_scalar_imm(
            v,
            tot.at(1, 0, 1),
            tot.at(1, 0, 1),
            AluOp::Multiply,
            inv_or_inf(n as f64),
        );
    }
    store_col(ctx, tot, 0, &call.outs[0].0, out_dev, &one);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (kept, reduced) element pair is visited exactly once, at the right input offset.
    fn check(shape: &[usize], red: &[usize], max_free: usize) {
        let reduced: Vec<bool> = (0..shape.len()).map(|d| red.contains(&d)).collect();
        let l = Layout::new(shape, &reduced, false);
        let rows = l.row_tiles(128);
        let chunks = l.chunks(max_free);
        let numel: usize = shape.iter().product();
        let mut seen = vec![0u32; numel];
        let mut out_seen = vec![0u32; l.kept_numel()];
        for rt in &rows {
            assert!(rt.rows >= 1 && rt.rows <= 128);
            for p in 0..rt.rows {
                out_seen[(rt.base[1] + rt.pstride[1] * p as i64) as usize] += 1;
                for ch in &chunks {
                    assert!(ch.elems() <= max_free && ch.dims.len() <= 3);
                    let mut offs = vec![rt.base[0] + rt.pstride[0] * p as i64 + ch.base[0]];
                    for d in &ch.dims {
                        offs = offs
                            .iter()
                            .flat_map(|o| (0..d.size).map(move |i| o + i as i64 * d.strides[0]))
                            .collect();
                    }
                    for o in offs {
                        seen[o as usize] += 1;
                    }
                }
            }
        }
        assert!(
            seen.iter().all(|&c| c == 1),
            "{shape:?} {red:?}: every input element once"
        );
        assert!(
            out_seen.iter().all(|&c| c == 1),
            "{shape:?} {red:?}: every output element once"
        );
    }

    #[test]
    fn layouts_cover_every_element() {
        check(&[3, 4, 5], &[0, 2], 4096);
        check(&[3, 4, 5], &[1], 4096);
        check(&[3, 8, 1, 8], &[2, 3], 4096);
        check(&[129, 513], &[0], 4096);
        check(&[129, 513], &[1], 100);
        check(&[65537], &[0], 4096);
        check(&[2, 3, 4, 5, 6], &[0, 2, 4], 7);
        check(&[], &[], 4096);
    }

    #[test]
    fn chunks_split_long_rows() {
        let l = Layout::new(&[2, 10_000], &[false, true], false);
        let chunks = l.chunks(4096);
        assert_eq!(
            chunks.iter().map(|c| c.elems()).collect::<Vec<_>>(),
            vec![4096, 4096, 1808]
        );
        assert_eq!(chunks[1].base[0], 4096);
    }
}
