//! Tiling and layout helpers shared by lowerings, and the lowering's one instruction builder.
//!
//! An elementwise op iterates over its output's index space. Each operand (output included) is
//! described by one stride per output dimension (0 where it is broadcast), so broadcasting is
//! done by the DMA access patterns — never by materialising copies. The index space is simplified
//! (size-1 dims dropped, dims that are contiguous for every operand merged) and cut into
//! [`TileJob`]s: up to 128 rows on SBUF partitions (one HBM stride per operand) × up to 3 free
//! dims whose product fits the free-size budget. Outer dims become unrolled loops; a dim that does
//! not divide evenly leaves a tail job.
//!
//! Every lowering family builds its instructions here: [`Emitter::push`] appends `(engine, op)`
//! and nothing else (the waits are derived from the operands by [`crate::schedule`]), and one
//! constructor per instruction shape builds the `Op`s the families share ([`dma`], [`ts`],
//! [`ts_rev`], [`tt`], …) and the [`Emitter`] shorthands over [`Cols`] operands.

use super::LowerError;
use trnsim::{
    AccCmd, AccessPattern, ActFunc, Activation, AluOp, DType, Engine, Instruction, Memset, Op, Program, Reciprocal,
    ScalarOperand, ScalarTensorTensor, Target, TensorCopy, TensorCopyPredicated, TensorScalar, TensorTensor,
};

/// NumPy/PyTorch broadcasting of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// Strides (in elements) of a contiguous tensor of `shape` seen through broadcasting to
/// `out_shape`: 0 for broadcast dimensions. `shape` must broadcast to `out_shape`.
pub fn broadcast_strides(shape: &[usize], out_shape: &[usize]) -> Vec<i64> {
    let contiguous = crate::dtype::contiguous_strides(shape);
    let lead = out_shape.len() - shape.len();
    (0..out_shape.len())
        .map(|d| {
            if d < lead || shape[d - lead] == 1 {
                0
            } else {
                contiguous[d - lead] as i64
            }
        })
        .collect()
}

/// One dimension of an iteration space: its size and one stride per operand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dim {
    pub size: usize,
    pub strides: Vec<i64>,
}

/// A strided region: per-operand base offsets (elements) and dims, outer to inner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    pub base: Vec<i64>,
    pub dims: Vec<Dim>,
}

impl Region {
    /// The region of `shape` with one stride vector per operand (`strides[operand][dim]`).
    pub fn new(shape: &[usize], strides: &[Vec<i64>]) -> Region {
        let dims = shape
            .iter()
            .enumerate()
            .map(|(d, &size)| Dim {
                size,
                strides: strides.iter().map(|s| s[d]).collect(),
            })
            .collect();
        Region {
            base: vec![0; strides.len()],
            dims,
        }
    }

    /// The same region with per-operand base offsets (elements).
    pub fn with_base(mut self, base: Vec<i64>) -> Region {
        debug_assert_eq!(base.len(), self.base.len());
        self.base = base;
        self
    }

    pub fn numel(&self) -> usize {
        self.dims.iter().map(|d| d.size).product()
    }

    /// Drops size-1 dims and merges neighbours that are contiguous for every operand
    /// (`outer.stride == inner.stride * inner.size`).
    pub fn simplify(mut self) -> Region {
        self.dims.retain(|d| d.size != 1);
        let mut merged: Vec<Dim> = Vec::with_capacity(self.dims.len());
        for d in self.dims.into_iter() {
            if let Some(last) = merged.last_mut()
                && last
                    .strides
                    .iter()
                    .zip(&d.strides)
                    .all(|(&o, &i)| o == i * d.size as i64)
            {
                last.size *= d.size;
                last.strides = d.strides;
                continue;
            }
            merged.push(d);
        }
        Region {
            base: self.base,
            dims: merged,
        }
    }
}

/// Limits that shape the tiles.
#[derive(Clone, Copy, Debug)]
pub struct TileLimits {
    /// SBUF partitions (rows per tile).
    pub partitions: usize,
    /// Max elements per partition of one tile.
    pub max_free: usize,
    /// Max free dims of a tile (the access patterns allow 4; one is kept spare).
    pub max_free_dims: usize,
}

impl TileLimits {
    pub fn for_target(target: &Target, max_free: usize) -> TileLimits {
        TileLimits {
            partitions: target.partitions,
            max_free,
            max_free_dims: 3,
        }
    }
}

/// One tile: `partitions` rows (one HBM stride per operand) × `free` dims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TileJob {
    /// Per-operand element offset of the tile's first element.
    pub base: Vec<i64>,
    pub partitions: usize,
    pub partition_strides: Vec<i64>,
    /// Free dims outer to inner.
    pub free: Vec<Dim>,
}

impl TileJob {
    pub fn free_elems(&self) -> usize {
        self.free.iter().map(|d| d.size).product()
    }

    pub fn numel(&self) -> usize {
        self.partitions * self.free_elems()
    }

    /// Free sizes outer to inner.
    pub fn free_shape(&self) -> Vec<usize> {
        self.free.iter().map(|d| d.size).collect()
    }

    /// The HBM side of a DMA for operand `operand`: the tile's rows and free dims in tensor
    /// `name` (strides 0 where the operand is broadcast).
    pub fn hbm_ap(&self, operand: usize, name: &str, dtype: DType) -> AccessPattern {
        let free = self.free.iter().map(|d| [d.strides[operand], d.size as i64]).collect();
        AccessPattern::hbm(
            name,
            dtype,
            self.base[operand] as u64,
            self.partitions,
            self.partition_strides[operand],
            free,
        )
    }

    /// A dense SBUF tile with the same free shape as the HBM side (for DMAs).
    pub fn sbuf_shaped(&self, dtype: DType, offset: u64) -> AccessPattern {
        let mut free = Vec::with_capacity(self.free.len());
        let mut step = 1i64;
        for d in self.free.iter().rev() {
            free.push([step, d.size as i64]);
            step *= d.size as i64;
        }
        free.reverse();
        AccessPattern::sbuf(dtype, 0, self.partitions, offset, free)
    }

    /// The same dense SBUF tile as one flat free dim (for compute instructions).
    pub fn sbuf_flat(&self, dtype: DType, offset: u64) -> AccessPattern {
        AccessPattern::sbuf(dtype, 0, self.partitions, offset, vec![[1, self.free_elems() as i64]])
    }
}

/// Cuts a region into tile jobs (see the module doc). Empty regions give no jobs; a 0-d region
/// gives one 1×1 job.
pub fn plan_tiles(region: Region, limits: TileLimits) -> Vec<TileJob> {
    let mut jobs = Vec::new();
    plan_into(region.simplify(), limits, &mut jobs);
    jobs
}

fn plan_into(region: Region, limits: TileLimits, jobs: &mut Vec<TileJob>) {
    let ops = region.base.len();
    if region.dims.iter().any(|d| d.size == 0) {
        return;
    }
    let k = region.dims.len();
    if k == 0 {
        jobs.push(TileJob {
            base: region.base,
            partitions: 1,
            partition_strides: vec![0; ops],
            free: vec![Dim {
                size: 1,
                strides: vec![0; ops],
            }],
        });
        return;
    }
    let inner = &region.dims[k - 1];
    if k == 1 {
        // One dim: spread it over the partitions as [rows, cols] (+ a tail) before anything
        // else, so that every lane works: cutting a long dim into `max_free` chunks first would
        // put a 4257-element tensor on 1 partition × 4096 (+ 80 × 2 + 1).
        let n = inner.size;
        if n <= limits.partitions {
            jobs.push(TileJob {
                base: region.base,
                partitions: n,
                partition_strides: inner.strides.clone(),
                free: vec![Dim {
                    size: 1,
                    strides: vec![0; ops],
                }],
            });
            return;
        }
        let cols = n.div_ceil(limits.partitions).min(limits.max_free);
        let rows = (n / cols).min(limits.partitions);
        let body = Region {
            base: region.base.clone(),
            dims: vec![
                Dim {
                    size: rows,
                    strides: inner.strides.iter().map(|s| s * cols as i64).collect(),
                },
                Dim {
                    size: cols,
                    strides: inner.strides.clone(),
                },
            ],
        };
        plan_into(body, limits, jobs);
        let done = rows * cols;
        if done < n {
            let tail = Region {
                base: region
                    .base
                    .iter()
                    .zip(&inner.strides)
                    .map(|(b, s)| b + s * done as i64)
                    .collect(),
                dims: vec![Dim {
                    size: n - done,
                    strides: inner.strides.clone(),
                }],
            };
            plan_into(tail, limits, jobs);
        }
        return;
    }
    // The innermost dim alone is too long for one tile: split it into full chunks (+ a tail).
    if inner.size > limits.max_free {
        let chunk = limits.max_free;
        let full = inner.size / chunk;
        let rest = inner.size % chunk;
        let mut body = region.clone();
        body.dims[k - 1] = Dim {
            size: full,
            strides: inner.strides.iter().map(|s| s * chunk as i64).collect(),
        };
        body.dims.push(Dim {
            size: chunk,
            strides: inner.strides.clone(),
        });
        plan_into(body, limits, jobs);
        if rest > 0 {
            let mut tail = region.clone();
            tail.base = region
                .base
                .iter()
                .zip(&inner.strides)
                .map(|(b, s)| b + s * (full * chunk) as i64)
                .collect();
            tail.dims[k - 1].size = rest;
            plan_into(tail, limits, jobs);
        }
        return;
    }
    // Free dims: as many inner dims as fit (at least one), then one partition dim, then loops.
    let mut f = (k - 1).min(limits.max_free_dims);
    while f > 1 && region.dims[k - f..].iter().map(|d| d.size).product::<usize>() > limits.max_free {
        f -= 1;
    }
    let free: Vec<Dim> = region.dims[k - f..].to_vec();
    let part = &region.dims[k - f - 1];
    let loops = &region.dims[..k - f - 1];
    let mut counter = vec![0usize; loops.len()];
    loop {
        let base = loop_base(&region.base, loops, &counter);
        let mut p0 = 0;
        while p0 < part.size {
            let rows = (part.size - p0).min(limits.partitions);
            jobs.push(TileJob {
                base: base.iter().zip(&part.strides).map(|(b, s)| b + s * p0 as i64).collect(),
                partitions: rows,
                partition_strides: part.strides.clone(),
                free: free.clone(),
            });
            p0 += rows;
        }
        if !next_position(&mut counter, loops) {
            return;
        }
    }
}

/// The per-operand base offsets at loop position `counter` over `loops`: `base + Σ counterᵢ·strideᵢ`.
pub fn loop_base<D: std::borrow::Borrow<Dim>>(base: &[i64], loops: &[D], counter: &[usize]) -> Vec<i64> {
    let mut out = base.to_vec();
    for (d, &i) in loops.iter().zip(counter) {
        for (b, s) in out.iter_mut().zip(&d.borrow().strides) {
            *b += s * i as i64;
        }
    }
    out
}

/// Steps `counter` to the next position over `loops` (an odometer, innermost fastest); false
/// once every position has been visited.
pub fn next_position<D: std::borrow::Borrow<Dim>>(counter: &mut [usize], loops: &[D]) -> bool {
    let mut d = loops.len();
    loop {
        if d == 0 {
            return false;
        }
        d -= 1;
        counter[d] += 1;
        if counter[d] < loops[d].borrow().size {
            return true;
        }
        counter[d] = 0;
    }
}

/// A bump allocator of SBUF bytes per partition (tiles live at the same offset in every
/// partition).
#[derive(Clone, Debug)]
pub struct SbufAllocator {
    next: u64,
    limit: u64,
}

impl SbufAllocator {
    /// Allocation alignment: keeps every dtype's elements aligned.
    const ALIGN: u64 = 64;

    pub fn new(target: &Target) -> Self {
        SbufAllocator {
            next: 0,
            limit: target.sbuf_usable_bytes as u64,
        }
    }

    /// Reserves `bytes` per partition; returns the byte offset.
    pub fn alloc(&mut self, bytes: usize) -> Result<u64, LowerError> {
        let offset = self.next;
        let end = offset + (bytes as u64).div_ceil(Self::ALIGN) * Self::ALIGN;
        if end > self.limit {
            return Err(LowerError::Resources(format!(
                "SBUF exhausted: {end} bytes per partition needed, {} usable",
                self.limit
            )));
        }
        self.next = end;
        Ok(offset)
    }

    /// Reserves `bytes` per partition as a dependency-tracked [`Slot`].
    pub fn slot(&mut self, bytes: usize) -> Result<Slot, LowerError> {
        Ok(Slot {
            offset: self.alloc(bytes)?,
        })
    }

    pub fn used(&self) -> u64 {
        self.next
    }
}

/// A region of SBUF that instructions read and write (one allocation), for dependency tracking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slot {
    pub offset: u64,
}

/// Appends instructions to a program. It records no dependencies: every lowering's program goes
/// through [`crate::schedule`], which computes each instruction's waits from the memory its
/// operands access (`trnsim::infer_waits`), so an instruction's reads and writes are never
/// spelled out by hand.
#[derive(Debug)]
pub struct Emitter {
    pub program: Program,
}

impl Emitter {
    pub fn new(program: Program) -> Self {
        Emitter { program }
    }

    /// Appends `op` on `engine`; returns its index in the program.
    pub fn push(&mut self, engine: Engine, op: Op) -> usize {
        let index = self.program.instructions.len();
        self.program.instructions.push(Instruction::new(engine, op));
        index
    }

    pub fn finish(self) -> Program {
        self.program
    }
}

// ------------------------------------------------------------------------------------------------
// SBUF buffers and instruction builders.

/// An SBUF buffer: `[P, cols]` of `dtype` at `offset`.
#[derive(Clone, Copy, Debug)]
pub struct Buf {
    pub slot: Slot,
    pub dtype: DType,
    pub cols: usize,
}

impl Buf {
    pub fn new(alloc: &mut SbufAllocator, dtype: DType, cols: usize) -> Result<Buf, LowerError> {
        Ok(Buf {
            slot: alloc.slot(cols.max(1) * dtype.size())?,
            dtype,
            cols,
        })
    }

    /// Columns `[c0, c0 + n)` of `p` partitions, one flat free dim.
    pub fn cols(&self, p: usize, c0: usize, n: usize) -> AccessPattern {
        AccessPattern::sbuf(
            self.dtype,
            0,
            p,
            self.slot.offset + (c0 * self.dtype.size()) as u64,
            vec![[1, n as i64]],
        )
    }

    /// Column `c` as a `[P, 1]` scalar operand.
    pub fn col(&self, p: usize, c: usize) -> AccessPattern {
        self.cols(p, c, 1)
    }

    /// Free layout `free` (element steps) from column 0.
    pub fn shaped(&self, p: usize, free: Vec<[i64; 2]>) -> AccessPattern {
        AccessPattern::sbuf(self.dtype, 0, p, self.slot.offset, free)
    }
}

/// Planes `r0..r0 + parts` of HBM tensor `name` (`dtype`, `plane` contiguous elements each), one
/// per partition.
fn hbm_planes((name, dtype, plane): (&str, DType, i64), r0: i64, parts: usize) -> AccessPattern {
    AccessPattern::hbm(name, dtype, (r0 * plane) as u64, parts, plane, vec![[1, plane]])
}

/// `parts` rows of HBM tensor `name` on partitions, from element `offset` on, `pstride` elements
/// apart, `len` contiguous elements each (the plain row-tile DMA side).
pub fn hbm_rows(name: &str, dtype: DType, offset: usize, parts: usize, pstride: usize, len: usize) -> AccessPattern {
    AccessPattern::hbm(name, dtype, offset as u64, parts, pstride as i64, vec![[1, len as i64]])
}

/// The transposing read: partition `k` (of `parts`) takes element `offset + k` of `rows` rows
/// that lie `row_stride` elements apart (a column per partition).
pub fn hbm_cols(
    name: &str,
    dtype: DType,
    offset: usize,
    parts: usize,
    row_stride: usize,
    rows: usize,
) -> AccessPattern {
    AccessPattern::hbm(
        name,
        dtype,
        offset as u64,
        parts,
        1,
        vec![[row_stride as i64, rows as i64]],
    )
}

/// `dst = src` by DMA: a plain copy (no accumulation, no indirection), converting to `dst`'s dtype.
pub fn dma(dst: AccessPattern, src: AccessPattern) -> Op {
    Op::dma_copy(dst, src)
}

/// `dst = value` on every element (`memset`; cast on write to `dst`'s dtype).
pub fn memset(dst: AccessPattern, value: f64) -> Op {
    Op::Memset(Memset { dst, value })
}

/// `dst = (src op0 v0) op1 v1` (`tensor_scalar`, one or two ALU stages, operands in order).
pub fn ts(
    dst: AccessPattern,
    src: AccessPattern,
    op0: AluOp,
    v0: ScalarOperand,
    op1: Option<(AluOp, ScalarOperand)>,
) -> Op {
    ts_with(dst, src, op0, v0, false, op1)
}

/// `dst = v0 op0 src` (`tensor_scalar`, one stage, the operand order reversed: `reverse0`).
pub fn ts_rev(dst: AccessPattern, src: AccessPattern, op0: AluOp, v0: ScalarOperand) -> Op {
    ts_with(dst, src, op0, v0, true, None)
}

/// `tensor_scalar` in full: `dst = (src op0 v0) op1 v1`, `v0 op0 src` first where `reverse0`.
pub fn ts_with(
    dst: AccessPattern,
    src: AccessPattern,
    op0: AluOp,
    v0: ScalarOperand,
    reverse0: bool,
    op1: Option<(AluOp, ScalarOperand)>,
) -> Op {
    let (op1, operand1) = match op1 {
        Some((o, v)) => (Some(o), Some(v)),
        None => (None, None),
    };
    Op::TensorScalar(TensorScalar {
        dst,
        src,
        op0,
        operand0: v0,
        reverse0,
        op1,
        operand1,
        reverse1: false,
    })
}

/// `dst = in0 op in1` elementwise (`tensor_tensor`).
pub fn tt(dst: AccessPattern, in0: AccessPattern, in1: AccessPattern, op: AluOp) -> Op {
    Op::TensorTensor(TensorTensor { dst, in0, in1, op })
}

/// `dst = (src op0 v0) op1 in1` (`scalar_tensor_tensor`, operands in order).
pub fn stt(
    dst: AccessPattern,
    src: AccessPattern,
    op0: AluOp,
    v0: ScalarOperand,
    op1: AluOp,
    in1: AccessPattern,
) -> Op {
    Op::ScalarTensorTensor(ScalarTensorTensor {
        dst,
        src,
        op0,
        operand0: v0,
        op1,
        in1,
        reverse0: false,
        reverse1: false,
    })
}

/// `dst = src`, converting to `dst`'s dtype (`tensor_copy`).
pub fn copy(dst: AccessPattern, src: AccessPattern) -> Op {
    Op::TensorCopy(TensorCopy { dst, src })
}

/// `dst = src` where `predicate != 0`, `dst` kept elsewhere (`tensor_copy_predicated`).
pub fn copy_pred(dst: AccessPattern, src: AccessPattern, predicate: AccessPattern) -> Op {
    Op::TensorCopyPredicated(TensorCopyPredicated {
        dst,
        src,
        predicate,
        reverse_pred: false,
    })
}

/// `dst = 1 / src` (`reciprocal`).
pub fn recip(dst: AccessPattern, src: AccessPattern) -> Op {
    Op::Reciprocal(Reciprocal { dst, src })
}

/// `dst = func(src · scale + bias)` (`activation`, no accumulation).
pub fn act(
    dst: AccessPattern,
    func: ActFunc,
    src: AccessPattern,
    scale: ScalarOperand,
    bias: Option<ScalarOperand>,
) -> Op {
    Op::Activation(Activation {
        dst,
        func,
        src,
        bias,
        scale,
        acc: AccCmd::Idle,
        reduce_res: None,
    })
}

pub fn imm(v: f64) -> ScalarOperand {
    ScalarOperand::Imm(v)
}

/// Columns `[c0, c0 + n)` of the first `p` partitions of a [`Buf`]: an [`Operand`] of the
/// [`Emitter`] shorthands below.
#[derive(Clone, Copy, Debug)]
pub struct Cols {
    pub buf: Buf,
    pub p: usize,
    pub c0: usize,
    pub n: usize,
}

impl Cols {
    pub fn ap(&self) -> AccessPattern {
        self.buf.cols(self.p, self.c0, self.n)
    }
}

/// An instruction operand for the [`Emitter`] shorthands: anything that stands for one access
/// pattern (a [`Cols`] range, an `AccessPattern` itself, a family's own tile view).
pub trait Operand {
    fn ap(&self) -> AccessPattern;
}

impl Operand for AccessPattern {
    fn ap(&self) -> AccessPattern {
        self.clone()
    }
}

impl Operand for Cols {
    fn ap(&self) -> AccessPattern {
        Cols::ap(self)
    }
}

impl<T: Operand + ?Sized> Operand for &T {
    fn ap(&self) -> AccessPattern {
        (**self).ap()
    }
}

impl Buf {
    /// Columns `[c0, c0 + n)` of `p` partitions as a slot-carrying operand.
    pub fn at(&self, p: usize, c0: usize, n: usize) -> Cols {
        Cols { buf: *self, p, c0, n }
    }

    /// Column `c` of `p` partitions: a per-partition scalar operand.
    pub fn scalar(&self, p: usize, c: usize) -> Scalar {
        Scalar::Col(self.at(p, c, 1))
    }
}

/// The scalar operand of a `tensor_scalar`/`activation` bias: an immediate, or one column of
/// a buffer (one value per partition).
#[derive(Clone, Copy, Debug)]
pub enum Scalar {
    Imm(f64),
    Col(Cols),
}

impl Scalar {
    fn operand(&self) -> ScalarOperand {
        match self {
            Scalar::Imm(v) => ScalarOperand::Imm(*v),
            Scalar::Col(c) => ScalarOperand::Tile(c.ap()),
        }
    }
}

/// Shorthands for the instructions lowerings emit most, over [`Operand`]s. Each pushes one
/// instruction; the waits are derived from the operands later ([`crate::schedule`]).
impl Emitter {
    /// `dst = (src op0 s0) op1 s1` (`tensor_scalar`, one or two ALU stages).
    pub fn tensor_scalar(
        &mut self,
        engine: Engine,
        dst: impl Operand,
        src: impl Operand,
        op0: AluOp,
        s0: Scalar,
        then: Option<(AluOp, Scalar)>,
    ) -> usize {
        let op = ts(
            dst.ap(),
            src.ap(),
            op0,
            s0.operand(),
            then.map(|(o, s)| (o, s.operand())),
        );
        self.push(engine, op)
    }

    /// `dst = src op v` with an immediate `v` (`tensor_scalar`, one ALU stage).
    pub fn tensor_scalar_imm(
        &mut self,
        engine: Engine,
        dst: impl Operand,
        src: impl Operand,
        op: AluOp,
        v: f64,
    ) -> usize {
        self.tensor_scalar(engine, dst, src, op, Scalar::Imm(v), None)
    }

    /// `dst = (src op0 v0) op1 v1` with immediates (`tensor_scalar`, two ALU stages).
    pub fn tensor_scalar_imm2(
        &mut self,
        engine: Engine,
        dst: impl Operand,
        src: impl Operand,
        (op0, v0): (AluOp, f64),
        (op1, v1): (AluOp, f64),
    ) -> usize {
        self.tensor_scalar(engine, dst, src, op0, Scalar::Imm(v0), Some((op1, Scalar::Imm(v1))))
    }

    /// `dst = s0 op0 src` (`tensor_scalar`, one stage, the operand order reversed; the arguments
    /// in the expression's order).
    pub fn tensor_scalar_rev(
        &mut self,
        engine: Engine,
        dst: impl Operand,
        s0: Scalar,
        op0: AluOp,
        src: impl Operand,
    ) -> usize {
        self.push(engine, ts_rev(dst.ap(), src.ap(), op0, s0.operand()))
    }

    /// `dst = a op b` elementwise (`tensor_tensor`).
    pub fn tensor_tensor(
        &mut self,
        engine: Engine,
        dst: impl Operand,
        a: impl Operand,
        b: impl Operand,
        op: AluOp,
    ) -> usize {
        self.push(engine, tt(dst.ap(), a.ap(), b.ap(), op))
    }

    /// `dst = (src op0 v0) op1 v1` with immediates, rounded to `dst`'s dtype after each operator
    /// as PyTorch's separate ops round: one instruction where that rounding cannot matter (an
    /// fp32 `dst`, or an exact `op1`: max, min, abs), else one per operator.
    #[allow(clippy::too_many_arguments)]
    pub fn tensor_scalar_rounded(
        &mut self,
        engine: Engine,
        dst: impl Operand,
        src: impl Operand,
        op0: AluOp,
        v0: f64,
        op1: AluOp,
        v1: f64,
    ) {
        let dst = dst.ap();
        let exact_op1 = matches!(op1, AluOp::Max | AluOp::Min | AluOp::Abs);
        if dst.dtype == DType::F32 || exact_op1 {
            self.push(engine, ts(dst, src.ap(), op0, imm(v0), Some((op1, imm(v1)))));
        } else {
            self.push(engine, ts(dst.clone(), src.ap(), op0, imm(v0), None));
            self.push(engine, ts(dst.clone(), dst, op1, imm(v1), None));
        }
    }

    /// `dst = (src op0 s0) op1 in1` (`scalar_tensor_tensor`).
    #[allow(clippy::too_many_arguments)]
    pub fn scalar_tensor_tensor(
        &mut self,
        engine: Engine,
        dst: impl Operand,
        src: impl Operand,
        op0: AluOp,
        s0: ScalarOperand,
        op1: AluOp,
        in1: impl Operand,
    ) -> usize {
        self.push(engine, stt(dst.ap(), src.ap(), op0, s0, op1, in1.ap()))
    }

    /// `body(self, r0, p)` per tile of ≤ `parts` of `rows` rows on partitions (`r0` the tile's
    /// first row, `p` its rows), in order.
    pub fn row_tiles(&mut self, rows: i64, parts: i64, mut body: impl FnMut(&mut Emitter, i64, usize)) {
        let mut r0 = 0i64;
        while r0 < rows {
            let p = (rows - r0).min(parts) as usize;
            body(self, r0, p);
            r0 += p as i64;
        }
    }

    /// The DMA of planes `r0..` of HBM tensor `name` (`dtype`, `plane` contiguous elements each)
    /// into `dst`, one plane per partition of `dst`.
    pub fn load_planes(&mut self, (name, dtype, plane): (&str, DType, i64), r0: i64, dst: AccessPattern) -> usize {
        let src = hbm_planes((name, dtype, plane), r0, dst.partitions);
        self.push(Engine::Dma, dma(dst, src))
    }

    /// The DMA of `src`, one plane per partition, to planes `r0..` of HBM tensor `name` (`dtype`,
    /// `plane` contiguous elements each).
    pub fn store_planes(&mut self, (name, dtype, plane): (&str, DType, i64), r0: i64, src: AccessPattern) -> usize {
        let dst = hbm_planes((name, dtype, plane), r0, src.partitions);
        self.push(Engine::Dma, dma(dst, src))
    }

    /// `dst = value` on every element (`memset`).
    pub fn memset(&mut self, engine: Engine, dst: impl Operand, value: f64) -> usize {
        self.push(engine, memset(dst.ap(), value))
    }

    /// `dst = src`, converting to `dst`'s dtype (`tensor_copy`).
    pub fn tensor_copy(&mut self, engine: Engine, dst: impl Operand, src: impl Operand) -> usize {
        self.push(engine, copy(dst.ap(), src.ap()))
    }

    /// `dst = 1 / src` on VectorE (`reciprocal`).
    pub fn reciprocal(&mut self, dst: impl Operand, src: impl Operand) -> usize {
        self.push(Engine::Vector, recip(dst.ap(), src.ap()))
    }

    /// `dst = func(src + bias)` on ScalarE (`activation`, scale 1, no accumulation).
    pub fn activation(&mut self, dst: impl Operand, func: ActFunc, src: impl Operand, bias: Option<Scalar>) -> usize {
        let op = act(dst.ap(), func, src.ap(), imm(1.0), bias.map(|b| b.operand()));
        self.push(Engine::Scalar, op)
    }
}

// ------------------------------------------------------------------------------------------------
// The register kernel: a straight-line instruction sequence over named tiles, replayed per tile
// job. A family composes its math over [`Reg`]s once (`unary.rs`, `activation.rs`); [`Kernel::emit`]
// gives every register an SBUF tile and turns each [`Step`] into its instruction, here.

/// A tile of the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reg {
    /// The loaded input (its dtype is the kernel's `x_dtype`).
    X,
    /// The output tile (the output's device dtype).
    Out,
    /// fp32 scratch tile `n`.
    T(u8),
    /// uint8 mask tile `n` (0/1, a predicate for `tensor_copy_predicated`).
    M(u8),
    /// fp32 constant `n`: a `[P, 1]` tile set once per program (broadcast along the free axis).
    K(u8),
}

/// One instruction of a kernel.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// `dst = (src op0 v0) [op1 v1]` with immediates (`rev`: immediate on the left).
    Ts {
        eng: Engine,
        dst: Reg,
        src: Reg,
        op0: AluOp,
        v0: f64,
        rev0: bool,
        op1: Option<(AluOp, f64)>,
    },
    /// `dst = a op b`.
    Tt {
        eng: Engine,
        dst: Reg,
        a: Reg,
        b: Reg,
        op: AluOp,
    },
    /// `dst = (src op0 v0) op1 b` (VectorE `scalar_tensor_tensor`).
    Stt {
        dst: Reg,
        src: Reg,
        op0: AluOp,
        v0: f64,
        op1: AluOp,
        b: Reg,
    },
    /// ScalarE `dst = func(src · scale + bias)`; the bias is a constant tile.
    Act {
        dst: Reg,
        func: ActFunc,
        src: Reg,
        scale: f64,
        bias: Option<Reg>,
    },
    /// Copy with cast.
    Copy { eng: Engine, dst: Reg, src: Reg },
    /// VectorE `reciprocal`.
    Recip { dst: Reg, src: Reg },
    /// `dst = src` where `mask != 0` (VectorE `tensor_copy_predicated`).
    Sel { dst: Reg, src: Reg, mask: Reg },
}

impl Step {
    pub fn engine(&self) -> Engine {
        match self {
            Step::Ts { eng, .. } | Step::Tt { eng, .. } | Step::Copy { eng, .. } => *eng,
            Step::Act { .. } => Engine::Scalar,
            Step::Stt { .. } | Step::Recip { .. } | Step::Sel { .. } => Engine::Vector,
        }
    }

    pub fn reads(&self) -> Vec<Reg> {
        match self {
            Step::Ts { src, .. } | Step::Copy { src, .. } | Step::Recip { src, .. } => vec![*src],
            Step::Tt { a, b, .. } => vec![*a, *b],
            Step::Stt { src, b, .. } => vec![*src, *b],
            Step::Act { src, bias, .. } => std::iter::once(*src).chain(*bias).collect(),
            // The destination keeps its other elements: it is read too.
            Step::Sel { dst, src, mask } => vec![*src, *mask, *dst],
        }
    }

    pub fn dst(&self) -> Reg {
        match self {
            Step::Ts { dst, .. }
            | Step::Tt { dst, .. }
            | Step::Stt { dst, .. }
            | Step::Act { dst, .. }
            | Step::Copy { dst, .. }
            | Step::Recip { dst, .. }
            | Step::Sel { dst, .. } => *dst,
        }
    }
}

/// A kernel: its input tile dtype, its steps, and the scratch it needs.
#[derive(Clone, Debug, Default)]
pub struct Kernel {
    pub steps: Vec<Step>,
    n_tmp: u8,
    n_mask: u8,
    /// Constant values, by `Reg::K` index.
    pub consts: Vec<f64>,
}

impl Kernel {
    pub fn new() -> Kernel {
        Kernel::default()
    }

    /// A fresh fp32 scratch tile.
    pub fn tmp(&mut self) -> Reg {
        self.n_tmp += 1;
        Reg::T(self.n_tmp - 1)
    }

    /// A fresh uint8 mask tile.
    pub fn mask(&mut self) -> Reg {
        self.n_mask += 1;
        Reg::M(self.n_mask - 1)
    }

    /// The constant tile holding `v` (one per distinct value).
    pub fn k(&mut self, v: f64) -> Reg {
        let bits = (v as f32).to_bits();
        if let Some(i) = self.consts.iter().position(|c| (*c as f32).to_bits() == bits) {
            return Reg::K(i as u8);
        }
        self.consts.push(v);
        Reg::K((self.consts.len() - 1) as u8)
    }

    /// `dst = src op0 v0` on VectorE.
    pub fn ts(&mut self, dst: Reg, src: Reg, op0: AluOp, v0: f64) {
        self.ts_on(Engine::Vector, dst, src, (op0, v0, false), None);
    }

    /// `dst = (src op0 v0) op1 v1` on VectorE.
    pub fn ts2(&mut self, dst: Reg, src: Reg, op0: AluOp, v0: f64, op1: AluOp, v1: f64) {
        self.ts_on(Engine::Vector, dst, src, (op0, v0, false), Some((op1, v1)));
    }

    /// `dst = v0 op0 src` (immediate on the left).
    pub fn ts_rev(&mut self, dst: Reg, src: Reg, op0: AluOp, v0: f64) {
        self.ts_on(Engine::Vector, dst, src, (op0, v0, true), None);
    }

    /// GpSimd exact int32 `dst = (src op0 v0) [op1 v1]`.
    pub fn gp_ts(&mut self, dst: Reg, src: Reg, op0: AluOp, v0: f64, rev0: bool, op1: Option<(AluOp, f64)>) {
        self.ts_on(Engine::Gpsimd, dst, src, (op0, v0, rev0), op1);
    }

    /// The one `tensor_scalar` step: `(op0, v0, reverse0)`, then `op1` if any.
    fn ts_on(&mut self, eng: Engine, dst: Reg, src: Reg, first: (AluOp, f64, bool), op1: Option<(AluOp, f64)>) {
        self.steps.push(Step::Ts {
            eng,
            dst,
            src,
            op0: first.0,
            v0: first.1,
            rev0: first.2,
            op1,
        });
    }

    pub fn tt(&mut self, dst: Reg, a: Reg, op: AluOp, b: Reg) {
        self.steps.push(Step::Tt {
            eng: Engine::Vector,
            dst,
            a,
            b,
            op,
        });
    }

    pub fn stt(&mut self, dst: Reg, src: Reg, op0: AluOp, v0: f64, op1: AluOp, b: Reg) {
        self.steps.push(Step::Stt {
            dst,
            src,
            op0,
            v0,
            op1,
            b,
        });
    }

    /// `dst = func(src · scale + bias)` on ScalarE. The caller guarantees the argument stays in
    /// the function's valid range.
    pub fn act(&mut self, dst: Reg, func: ActFunc, src: Reg, scale: f64, bias: f64) {
        let bias = if bias == 0.0 { None } else { Some(self.k(bias)) };
        self.steps.push(Step::Act {
            dst,
            func,
            src,
            scale,
            bias,
        });
    }

    pub fn copy(&mut self, dst: Reg, src: Reg) {
        self.steps.push(Step::Copy {
            eng: Engine::Vector,
            dst,
            src,
        });
    }

    pub fn recip(&mut self, dst: Reg, src: Reg) {
        self.steps.push(Step::Recip { dst, src });
    }

    pub fn sel(&mut self, dst: Reg, src: Reg, mask: Reg) {
        self.steps.push(Step::Sel { dst, src, mask });
    }

    /// `dst = v` where `mask`.
    pub fn sel_const(&mut self, dst: Reg, v: f64, mask: Reg) {
        let k = self.k(v);
        self.sel(dst, k, mask);
    }

    /// A mask `src op v` (compare into uint8).
    pub fn cmp(&mut self, src: Reg, op: AluOp, v: f64) -> Reg {
        let m = self.mask();
        self.ts(m, src, op, v);
        m
    }

    /// A mask `src != src` (NaN).
    pub fn is_nan(&mut self, src: Reg) -> Reg {
        let m = self.mask();
        self.tt(m, src, AluOp::NotEqual, src);
        m
    }

    /// A new scratch tile filled with `v`.
    pub fn fill(&mut self, v: f64) -> Reg {
        let t = self.tmp();
        let k = self.k(v);
        self.copy(t, k);
        t
    }

    /// Which SBUF tile each scratch (`T`) and mask (`M`) register uses, and how many tiles of
    /// each kind: registers whose live ranges (first to last step naming them) do not overlap
    /// share a tile, so the long kernels (tan with the Payne–Hanek reduction) fit SBUF. A
    /// register freed at step i is reused from step i + 1 on; the emitter's slot tracking orders
    /// the reuse (write after read).
    pub fn tile_slots(&self) -> (std::collections::HashMap<Reg, usize>, (usize, usize)) {
        use std::collections::HashMap;
        let mut last_use: HashMap<Reg, usize> = HashMap::new();
        for (i, s) in self.steps.iter().enumerate() {
            for r in s.reads().into_iter().chain(std::iter::once(s.dst())) {
                last_use.insert(r, i);
            }
        }
        let mut tile_of = HashMap::new();
        // Per kind (0: fp32 scratch, 1: mask): free tiles, tiles in use (register, tile), count.
        let mut free: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
        let mut live: [Vec<(Reg, usize)>; 2] = [Vec::new(), Vec::new()];
        let mut count = [0usize; 2];
        for (i, s) in self.steps.iter().enumerate() {
            for kind in 0..2 {
                let (ended, still): (Vec<_>, Vec<_>) = live[kind].iter().partition(|(r, _)| last_use[r] < i);
                free[kind].extend(ended.iter().map(|(_, t)| *t));
                live[kind] = still;
            }
            for r in s.reads().into_iter().chain(std::iter::once(s.dst())) {
                let kind = match r {
                    Reg::T(_) => 0,
                    Reg::M(_) => 1,
                    _ => continue,
                };
                if tile_of.contains_key(&r) {
                    continue;
                }
                let tile = free[kind].pop().unwrap_or_else(|| {
                    count[kind] += 1;
                    count[kind] - 1
                });
                tile_of.insert(r, tile);
                live[kind].push((r, tile));
            }
        }
        (tile_of, (count[0], count[1]))
    }
}

/// The SBUF tile of every register of a [`Kernel`]: input and output tiles, scratch and mask
/// tiles shared by live range ([`Kernel::tile_slots`]), one `[P, 1]` slot per constant.
#[derive(Clone, Debug)]
pub struct RegTiles {
    slots: std::collections::HashMap<Reg, Slot>,
    x_dtype: DType,
    out_dtype: DType,
}

impl RegTiles {
    fn dtype(&self, r: Reg) -> DType {
        match r {
            Reg::X => self.x_dtype,
            Reg::Out => self.out_dtype,
            Reg::T(_) | Reg::K(_) => DType::F32,
            Reg::M(_) => DType::U8,
        }
    }

    /// Register `r` over the whole of `job`'s tile (a constant is broadcast along the free axis
    /// with step 0).
    fn ap(&self, r: Reg, job: &TileJob) -> AccessPattern {
        let off = self.slots[&r].offset;
        match r {
            Reg::K(_) => AccessPattern::sbuf(DType::F32, 0, job.partitions, off, vec![[0, job.free_elems() as i64]]),
            _ => job.sbuf_flat(self.dtype(r), off),
        }
    }

    /// Constant register `k` as a `[P, 1]` per-partition scalar.
    fn scalar(&self, k: Reg, p: usize) -> ScalarOperand {
        ScalarOperand::Tile(AccessPattern::sbuf(
            DType::F32,
            0,
            p,
            self.slots[&k].offset,
            vec![[1, 1]],
        ))
    }

    /// The input tile of `job`, shaped like the HBM side (for the loading DMA).
    pub fn x_shaped(&self, job: &TileJob) -> AccessPattern {
        job.sbuf_shaped(self.x_dtype, self.slots[&Reg::X].offset)
    }

    /// The output tile of `job`, shaped like the HBM side (for the storing DMA).
    pub fn out_shaped(&self, job: &TileJob) -> AccessPattern {
        job.sbuf_shaped(self.out_dtype, self.slots[&Reg::Out].offset)
    }
}

impl Kernel {
    /// Allocates every register's tile for jobs of up to `max_free` elements per partition: the
    /// input as `x_dtype`, the output as `out_dtype`.
    pub fn tiles(
        &self,
        alloc: &mut SbufAllocator,
        x_dtype: DType,
        out_dtype: DType,
        max_free: usize,
    ) -> Result<RegTiles, LowerError> {
        let mut regs: Vec<Reg> = Vec::new();
        for s in &self.steps {
            for r in s.reads().into_iter().chain(std::iter::once(s.dst())) {
                if !regs.contains(&r) {
                    regs.push(r);
                }
            }
        }
        let mut slots = std::collections::HashMap::new();
        slots.insert(Reg::X, alloc.slot(max_free * x_dtype.size())?);
        slots.insert(Reg::Out, alloc.slot(max_free * out_dtype.size())?);
        let (tile_of, n_tiles) = self.tile_slots();
        let scratch = (0..n_tiles.0)
            .map(|_| alloc.slot(max_free * DType::F32.size()))
            .collect::<Result<Vec<_>, _>>()?;
        let masks = (0..n_tiles.1)
            .map(|_| alloc.slot(max_free * DType::U8.size()))
            .collect::<Result<Vec<_>, _>>()?;
        for &r in &regs {
            let slot = match r {
                Reg::X | Reg::Out => continue,
                Reg::K(_) => alloc.slot(DType::F32.size())?,
                Reg::T(_) => scratch[tile_of[&r]],
                Reg::M(_) => masks[tile_of[&r]],
            };
            slots.insert(r, slot);
        }
        Ok(RegTiles {
            slots,
            x_dtype,
            out_dtype,
        })
    }

    /// Sets every constant the steps name, once, on `partitions` partitions.
    pub fn emit_consts(&self, e: &mut Emitter, tiles: &RegTiles, partitions: usize) {
        for (i, &v) in self.consts.iter().enumerate() {
            if let Some(slot) = tiles.slots.get(&Reg::K(i as u8)) {
                let ap = AccessPattern::sbuf(DType::F32, 0, partitions, slot.offset, vec![[1, 1]]);
                e.push(Engine::Vector, memset(ap, v));
            }
        }
    }

    /// The steps over `job`'s tiles, one instruction each.
    pub fn emit_job(&self, e: &mut Emitter, job: &TileJob, tiles: &RegTiles) {
        for step in &self.steps {
            e.push(step.engine(), step.op(job, tiles));
        }
    }
}

impl Step {
    /// This step's instruction over `job`'s tiles.
    pub fn op(&self, job: &TileJob, tiles: &RegTiles) -> Op {
        let ap = |r: Reg| tiles.ap(r, job);
        match *self {
            Step::Ts {
                dst,
                src,
                op0,
                v0,
                rev0,
                op1,
                ..
            } => ts_with(ap(dst), ap(src), op0, imm(v0), rev0, op1.map(|(o, v)| (o, imm(v)))),
            Step::Tt { dst, a, b, op, .. } => tt(ap(dst), ap(a), ap(b), op),
            Step::Stt {
                dst,
                src,
                op0,
                v0,
                op1,
                b,
            } => stt(ap(dst), ap(src), op0, imm(v0), op1, ap(b)),
            Step::Act {
                dst,
                func,
                src,
                scale,
                bias,
            } => act(
                ap(dst),
                func,
                ap(src),
                imm(scale),
                bias.map(|k| tiles.scalar(k, job.partitions)),
            ),
            Step::Copy { dst, src, .. } => copy(ap(dst), ap(src)),
            Step::Recip { dst, src } => recip(ap(dst), ap(src)),
            Step::Sel { dst, src, mask } => copy_pred(ap(dst), ap(src), ap(mask)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> TileLimits {
        TileLimits {
            partitions: 128,
            max_free: 4096,
            max_free_dims: 3,
        }
    }

    /// Every output element is covered exactly once, and every operand offset is where
    /// broadcasting says it is.
    fn check_cover(shape: &[usize], strides: &[Vec<i64>], jobs: &[TileJob]) {
        let numel: usize = shape.iter().product();
        let mut seen = vec![0u32; numel];
        for j in jobs {
            assert!(j.partitions >= 1 && j.partitions <= 128, "{j:?}");
            assert!(j.free_elems() <= 4096 && j.free.len() <= 3, "{j:?}");
            for p in 0..j.partitions {
                let free_offsets = |op: usize| {
                    let mut offs = vec![j.base[op] + p as i64 * j.partition_strides[op]];
                    for d in &j.free {
                        offs = offs
                            .iter()
                            .flat_map(|o| (0..d.size).map(move |i| o + i as i64 * d.strides[op]))
                            .collect();
                    }
                    offs
                };
                let out = free_offsets(0);
                for (op, s) in strides.iter().enumerate().skip(1) {
                    let got = free_offsets(op);
                    for (o, g) in out.iter().zip(&got) {
                        // Recover the multi-index from the contiguous output offset.
                        let idx = crate::dtype::unravel(*o as usize, shape);
                        let want: i64 = idx.iter().zip(s).map(|(i, st)| *i as i64 * st).sum();
                        assert_eq!(*g, want, "operand {op} at output offset {o}");
                    }
                }
                for o in out {
                    seen[o as usize] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&c| c == 1), "every element exactly once: {shape:?}");
    }

    fn plan(out: &[usize], inputs: &[&[usize]]) -> (Vec<Vec<i64>>, Vec<TileJob>) {
        let mut strides = vec![broadcast_strides(out, out)];
        for i in inputs {
            strides.push(broadcast_strides(i, out));
        }
        let jobs = plan_tiles(Region::new(out, &strides), limits());
        check_cover(out, &strides, &jobs);
        (strides, jobs)
    }

    #[test]
    fn broadcasting_shapes() {
        assert_eq!(broadcast_shapes(&[5, 5], &[5]), Some(vec![5, 5]));
        assert_eq!(broadcast_shapes(&[2, 1, 4], &[3, 1]), Some(vec![2, 3, 4]));
        assert_eq!(broadcast_shapes(&[], &[3]), Some(vec![3]));
        assert_eq!(broadcast_shapes(&[0], &[1]), Some(vec![0]));
        assert_eq!(broadcast_shapes(&[2], &[3]), None);
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
        assert_eq!(broadcast_strides(&[], &[2, 3]), vec![0, 0]);
    }

    #[test]
    fn sizes_0_1_129_513_1000_and_0d() {
        assert!(plan(&[0], &[&[0]]).1.is_empty());
        assert!(plan(&[3, 0], &[&[1]]).1.is_empty());
        assert_eq!(plan(&[], &[&[]]).1.len(), 1);
        assert_eq!(plan(&[1], &[&[1]]).1.len(), 1);
        let (_, jobs) = plan(&[129], &[&[129]]);
        assert_eq!(jobs.len(), 2, "[64 x 2] + tail 1");
        plan(&[513], &[&[513]]);
        let (_, jobs) = plan(&[1000], &[&[1000]]);
        assert_eq!(jobs.len(), 1);
        assert_eq!((jobs[0].partitions, jobs[0].free_elems()), (125, 8));
        plan(&[1000], &[&[]]);
        plan(&[1000, 3], &[&[3]]);
    }

    #[test]
    fn broadcast_patterns() {
        plan(&[5, 5], &[&[5, 5], &[5]]);
        plan(&[5, 5], &[&[5, 1], &[1, 5]]);
        plan(&[2, 3, 4], &[&[2, 3, 4], &[3, 1]]);
        plan(&[2, 3, 4, 5, 6], &[&[2, 1, 4, 1, 6], &[3, 1, 5, 1]]);
        plan(&[300, 7], &[&[300, 1], &[7]]);
        plan(&[3, 200, 129], &[&[1, 200, 1], &[129]]);
        let (_, jobs) = plan(&[4, 4], &[&[4, 4], &[4, 4]]);
        assert_eq!(jobs.len(), 1, "contiguous operands merge into one dim");
    }

    #[test]
    fn long_rows_are_split() {
        plan(&[2, 10_000], &[&[2, 10_000], &[1]]);
        plan(&[100_003], &[&[100_003]]);
        plan(&[1, 9000], &[&[9000]]);
    }

    /// A contiguous tensor longer than one partition's budget still uses every lane: [129, 33]
    /// (4257 elements) is 125 partitions × 34 + a 7-row tail, not 1 × 4096 + 80 × 2 + 1; a
    /// million elements take four jobs of at least 125 partitions but the last.
    #[test]
    fn long_contiguous_tensors_use_all_partitions() {
        let (_, jobs) = plan(&[129, 33], &[&[129, 33]]);
        let shape: Vec<(usize, usize)> = jobs.iter().map(|j| (j.partitions, j.free_elems())).collect();
        assert_eq!(shape, [(125, 34), (7, 1)]);
        let (_, jobs) = plan(&[1_000_000], &[&[1_000_000]]);
        assert_eq!((jobs[0].partitions, jobs[0].free_elems()), (128, 4096));
        let last = jobs.len() - 1;
        assert!(jobs[..last].iter().all(|j| j.partitions >= 125), "{jobs:?}");
        assert!(jobs.len() <= 4, "{}", jobs.len());
    }

    /// The emitter records no waits; [`crate::schedule`] (every lowering's last step) derives
    /// them from the operands: read after write, write after read and write after write on
    /// another engine or DMA queue.
    #[test]
    fn schedule_derives_cross_engine_waits_from_operands() {
        let mut program = Program::new(trnsim::TargetName::Trn1);
        program.declare("a", DType::F32, &[4, 8], trnsim::HbmRole::Input);
        program.declare("out", DType::F32, &[4, 8], trnsim::HbmRole::Output);
        let t = trnsim::TargetName::Trn1.params();
        let mut alloc = SbufAllocator::new(&t);
        let x = Buf::new(&mut alloc, DType::F32, 8).unwrap();
        let y = Buf::new(&mut alloc, DType::F32, 8).unwrap();
        let hbm = |name: &str| AccessPattern::hbm(name, DType::F32, 0, 4, 8, vec![[1, 8]]);
        let mut e = Emitter::new(program);
        let load = e.push(Engine::Dma, dma(x.cols(4, 0, 8), hbm("a")));
        let compute = e.tensor_copy(Engine::Vector, y.at(4, 0, 8), x.at(4, 0, 8));
        let store = e.push(Engine::Dma, dma(hbm("out"), y.cols(4, 0, 8)));
        let reload = e.push(Engine::Dma, dma(x.cols(4, 0, 8), hbm("a")));
        let p = e.finish();
        assert!(
            p.instructions.iter().all(|i| i.wait.is_empty()),
            "the emitter records no waits"
        );
        let p = crate::schedule(crate::Lowered::new(p)).program;
        assert!(p.instructions[load].wait.is_empty());
        assert_eq!(p.instructions[compute].wait, vec![load as u32]);
        assert_eq!(p.instructions[store].wait, vec![compute as u32]);
        assert_eq!(
            p.instructions[reload].wait,
            vec![compute as u32],
            "write after read on another engine"
        );
    }

    #[test]
    fn shorthands_build_their_operands() {
        let t = trnsim::TargetName::Trn1.params();
        let mut alloc = SbufAllocator::new(&t);
        let x = Buf::new(&mut alloc, DType::F32, 8).unwrap();
        let stats = Buf::new(&mut alloc, DType::F32, 2).unwrap();
        let y = Buf::new(&mut alloc, DType::F32, 8).unwrap();
        let mut e = Emitter::new(Program::new(trnsim::TargetName::Trn1));
        // y = (x · stats[:, 1]) + 3.
        let scale = e.tensor_scalar(
            Engine::Vector,
            y.at(4, 0, 8),
            x.at(4, 0, 8),
            AluOp::Multiply,
            stats.scalar(4, 1),
            Some((AluOp::Add, Scalar::Imm(3.0))),
        );
        let exp = e.activation(x.at(4, 0, 8), ActFunc::Exp, y.at(4, 0, 8), Some(stats.scalar(4, 0)));
        let p = e.finish();
        let Op::TensorScalar(ts) = &p.instructions[scale].op else {
            panic!("not tensor_scalar")
        };
        assert_eq!(ts.operand0, ScalarOperand::Tile(stats.cols(4, 1, 1)));
        assert_eq!(ts.operand1, Some(ScalarOperand::Imm(3.0)));
        assert_eq!(ts.dst, y.cols(4, 0, 8));
        assert_eq!(ts.src, x.cols(4, 0, 8));
        let Op::Activation(act) = &p.instructions[exp].op else {
            panic!("not activation")
        };
        assert_eq!(act.bias, Some(ScalarOperand::Tile(stats.cols(4, 0, 1))));
        assert_eq!((act.dst.clone(), act.src.clone()), (x.cols(4, 0, 8), y.cols(4, 0, 8)));
        assert_eq!(p.instructions[exp].engine, Engine::Scalar);
    }

    #[test]
    fn allocator_limits() {
        let t = trnsim::TargetName::Trn1.params();
        let mut a = SbufAllocator::new(&t);
        assert_eq!(a.alloc(10).unwrap(), 0);
        assert_eq!(a.alloc(4).unwrap(), 64);
        assert!(a.alloc(t.sbuf_usable_bytes).is_err());
    }
}
