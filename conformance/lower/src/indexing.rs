//! The `indexing` family: gathers and scatters driven by index tensors (`index_select`,
//! `embedding`, `gather`, `index.Tensor`, `scatter*`, `index_put`, `select_scatter`,
//! `slice_scatter`, `embedding_dense_backward`).
//!
//! One scheme serves every op. The op is described as a [`Spec`]: a *row shape* `S` (the
//! multi-index of every gathered/scattered row), a row length `R` (contiguous elements moved per
//! row), an affine part of the flat element offset (`base` steps per dim of `S`, plus a
//! constant) and index tensors, each broadcast over `S` (`strides`), wrapped when negative
//! (`index + size`, PyTorch's rule) and multiplied by the stride of the dimension it indexes.
//!
//! On device, per chunk of ≤128 rows of `S`'s first dim (the partition dim) × the rest of `S`
//! (free dims): GpSimd `iota` writes the affine part, each index tensor is DMA'd into SBUF as
//! int32 (int64 case tensors are narrowed by the runner), wrapped and scaled with exact int32
//! GpSimd ALU ops and added. The int32 offsets then drive one indirect DMA:
//! a gather (`side: src`) from the input tensor straight into the output rows, or a scatter
//! (`side: dst`) from a compacted copy of the source values into the output, with `accumulate`
//! for the ops that sum duplicates (`scatter_add`, `index_put(accumulate=True)`,
//! `scatter_reduce(sum)`, `embedding_dense_backward`). Rows are processed in order, so a
//! non-accumulating scatter with duplicate indices leaves the value of the *last* duplicate (in
//! row-major order of the index tensor) — PyTorch leaves that case undefined.
//!
//! Sums onto a bool destination (`scatter_add`, `scatter_reduce(sum)`) accumulate into an fp32
//! scratch and a VectorE `!= 0` pass writes the bools (PyTorch: logical or).
//! `embedding_dense_backward(scale_grad_by_freq=True)` first counts each index with a DMA
//! accumulate of ones and scales each gradient row by the reciprocal of its count
//! ([`B::grads_scaled_by_inverse_count`]). `scatter_reduce` with prod/amax/amin/mean is a
//! read-modify-write the DMA cannot do: a selection-matrix fold on the engines
//! ([`scatter_reduce_select`]).
//!
//! Limits: `S` must merge into ≤ 5 dims with ≤ 16384 elements per partition. Bool (mask)
//! indices: `index.Tensor` with one mask over the leading dims ([`index_bool_mask`]: on-device
//! prefix-sum compaction into a buffer of the upper bound, the row count written by the device) and `index_put` with one mask over
//! the leading dims (≤ 8192 elements, one partition): values that broadcast over the selected
//! rows ([`index_put_mask`]) or one value row per selected row, placed by an on-device prefix
//! count of the mask ([`index_put_mask_rows`]); `accumulate` for float dtypes. Other mask call
//! forms return `NotLowered`. `masked_scatter` uses a prefix sum of the mask on one partition (≤ 8192
//! elements).

use super::tile;
use super::tile::{Emitter, SbufAllocator, Slot, broadcast_strides, dma, hbm_rows, imm, memset, ts, tt};
use super::{LowerError, LowerRequest, Lowered, device_dtype};
use crate::call::{BoolOrInt, IntOrBool, Scalar, TensorArg};
use crate::dtype::TorchDType;
use trnsim::{
    AccessPattern, AluOp, DType, DmaCopy, Engine, HbmRole, Indirect, IndirectSide, Iota, OobMode, Op, Program,
    ScalarOperand, TargetName, TensorReduce, TensorScalar, TensorTensorScan,
};

const MAX_F: usize = 16384;

/// An index tensor broadcast over the row shape.
#[derive(Clone, Debug)]
struct Idx {
    name: String,
    /// Element strides of the index tensor per dim of `S` (0 = broadcast).
    strides: Vec<i64>,
    /// Size of the indexed dimension.
    size: i64,
    /// Negative indices wrap by `size` (advanced indexing: `index.Tensor`, `index_put`); else
    /// (`gather`, `index_select`, `embedding`, `scatter*`) only `0..size` is in range, as in
    /// PyTorch. An index outside its range pushes its row out of the tensor (see `offsets`).
    wrap: bool,
    /// Element stride of the indexed dimension in the indexed tensor.
    mult: i64,
    /// Rows whose index equals this value are pushed out of range (`oob: skip` drops them).
    skip: Option<i64>,
}

impl Idx {
    /// Index tensor `name` whose indices must lie in `0..size` (no wrapping, none skipped).
    fn in_range(name: &str, strides: Vec<i64>, size: i64, mult: i64) -> Idx {
        Idx {
            name: name.into(),
            strides,
            size,
            wrap: false,
            mult,
            skip: None,
        }
    }
}

/// The four int32 SBUF slots [`B::offsets`] works in (`f` elements per partition each).
struct IdxBufs {
    acc: Slot,
    tmp: Slot,
    w: Slot,
    bad: Slot,
}

#[derive(Clone, Debug)]
struct Spec {
    s: Vec<usize>,
    r: usize,
    base: Vec<i64>,
    base_const: i64,
    idx: Vec<Idx>,
    /// Extra per-dim stride vectors that must merge along (value sources of scatters).
    extra: Vec<Vec<i64>>,
}

impl Spec {
    /// The spec of one index tensor over `S = s` (rows of `r` elements, row base strides
    /// `base`), with no constant base offset and no extra tensors.
    fn one_index(s: Vec<usize>, r: usize, base: Vec<i64>, idx: Idx) -> Spec {
        Spec {
            s,
            r,
            base,
            base_const: 0,
            idx: vec![idx],
            extra: vec![],
        }
    }

    /// Drops size-1 dims and merges adjacent dims whose every stride vector is contiguous.
    fn simplify(mut self) -> Spec {
        let n = self.s.len();
        let mut keep: Vec<usize> = (0..n).filter(|&d| self.s[d] != 1).collect();
        if keep.is_empty() && n > 0 {
            keep.push(n - 1);
        }
        let pick = |v: &Vec<i64>| keep.iter().map(|&d| v[d]).collect::<Vec<i64>>();
        let mut s: Vec<usize> = keep.iter().map(|&d| self.s[d]).collect();
        let mut base = pick(&self.base);
        let mut idx: Vec<Vec<i64>> = self.idx.iter().map(|i| pick(&i.strides)).collect();
        let mut extra: Vec<Vec<i64>> = self.extra.iter().map(pick).collect();
        if s.is_empty() {
            s.push(1);
            base.push(0);
            idx.iter_mut().for_each(|v| v.push(0));
            extra.iter_mut().for_each(|v| v.push(0));
        }
        // Merge from the inside out.
        let mut d = s.len() - 1;
        while d > 0 {
            let a = d - 1;
            let ok = |v: &Vec<i64>| v[a] == v[d] * s[d] as i64;
            if ok(&base) && idx.iter().all(ok) && extra.iter().all(ok) {
                s[a] *= s[d];
                s.remove(d);
                base[a] = base[d];
                base.remove(d);
                for v in idx.iter_mut().chain(extra.iter_mut()) {
                    v[a] = v[d];
                    v.remove(d);
                }
            }
            d -= 1;
        }
        for (i, v) in self.idx.iter_mut().zip(idx) {
            i.strides = v;
        }
        self.s = s;
        self.base = base;
        self.extra = extra;
        self
    }

    fn free(&self) -> usize {
        self.s[1..].iter().product()
    }
}

fn contiguous_strides(shape: &[usize]) -> Vec<i64> {
    let mut st = vec![0i64; shape.len()];
    let mut acc = 1i64;
    for d in (0..shape.len()).rev() {
        st[d] = acc;
        acc *= shape[d] as i64;
    }
    st
}

struct B<'r, 'a> {
    req: &'r LowerRequest<'a>,
    e: Emitter,
    alloc: SbufAllocator,
    scratch: usize,
}

fn sb(dtype: DType, p: usize, offset: u64, f: usize) -> AccessPattern {
    AccessPattern::sbuf(dtype, 0, p, offset, vec![[1, f as i64]])
}

/// Scatter positions of a 0/1 mask `m` (I32, `n` elements on one partition, read through `m_ap`):
/// `ix[i]` is the count of set elements up to `i`, minus one, where `m[i]` is set, and at least
/// 2^23 − 1 elsewhere, past any source, so an indirect DMA with `OobMode::Skip` drops unselected
/// elements. The scan state is fp32: exact below 2^24 (callers bound `n` well below). The four
/// scratch slots hold ones, the running count, the offset and the positions (returned, I32).
fn mask_positions(b: &mut B<'_, '_>, m_ap: AccessPattern, n: usize, [ones, cs, w, ix]: [Slot; 4]) -> AccessPattern {
    let ones_ap = sb(DType::F32, 1, ones.offset, n);
    b.e.memset(Engine::Vector, ones_ap.clone(), 1.0);
    // cs = inclusive prefix count of the (row-broadcast) mask, fp32 state: exact below 2^24.
    let cs_ap = sb(DType::F32, 1, cs.offset, n);
    b.e.push(
        Engine::Vector,
        Op::TensorTensorScan(TensorTensorScan {
            dst: cs_ap.clone(),
            in0: ones_ap,
            in1: m_ap.clone(),
            initial: ScalarOperand::Imm(0.0),
            op0: AluOp::Multiply,
            op1: AluOp::Add,
        }),
    );
    // w = m ? -1 : 2^23 - 1, so ix = cs + w is cs − 1 where selected and past `values` elsewhere.
    const BIG: f64 = (1u64 << 23) as f64;
    let w_ap = sb(DType::F32, 1, w.offset, n);
    b.e.push(
        Engine::Vector,
        Op::TensorScalar(TensorScalar {
            dst: w_ap.clone(),
            src: m_ap,
            op0: AluOp::Multiply,
            operand0: ScalarOperand::Imm(-BIG),
            reverse0: false,
            op1: Some(AluOp::Add),
            operand1: Some(ScalarOperand::Imm(BIG - 1.0)),
            reverse1: false,
        }),
    );
    let ix_ap = sb(DType::I32, 1, ix.offset, n);
    b.e.push(Engine::Vector, tile::tt(ix_ap.clone(), cs_ap, w_ap, AluOp::Add));
    ix_ap
}

/// `[step, num]` free dims of an AP for `S[1..]` with the given strides (at least one dim).
fn free_dims(s: &[usize], st: &[i64]) -> Vec<[i64; 2]> {
    let mut f: Vec<[i64; 2]> = s[1..].iter().zip(&st[1..]).map(|(&n, &k)| [k, n as i64]).collect();
    if f.is_empty() {
        f.push([0, 1]);
    }
    f
}

impl<'r, 'a> B<'r, 'a> {
    fn new(req: &'r LowerRequest<'a>, target: TargetName) -> Self {
        let t = target.params();
        B {
            req,
            e: Emitter::new(Program::new(target)),
            alloc: SbufAllocator::new(&t),
            scratch: 0,
        }
    }

    fn dev(&self, name: &str) -> Result<(DType, Vec<usize>), LowerError> {
        let m = self.req.tensor(name)?;
        let d = device_dtype(m.dtype).ok_or_else(|| self.req.unsupported(format!("dtype {:?}", m.dtype)))?;
        Ok((d, m.shape.clone()))
    }

    /// The source tensor (argument `src`, position and name) and the index tensor (argument
    /// `index`) of a gather-style call: the index checked with `check`, then both declared as
    /// inputs, each with its device dtype and shape.
    #[allow(clippy::type_complexity)]
    fn source_and_index(
        &mut self,
        src: (usize, &str),
        index: (usize, &str),
        check: fn(&LowerRequest<'_>, &str) -> Result<(), LowerError>,
    ) -> Result<((&'a str, DType, Vec<usize>), (&'a str, Vec<usize>)), LowerError> {
        let x = self.req.arg::<TensorArg>(src.0, src.1)?.0;
        let idx = self.req.arg::<TensorArg>(index.0, index.1)?.0;
        check(self.req, idx)?;
        let (xdt, xs) = self.declare(x, HbmRole::Input)?;
        let (_, is) = self.declare(idx, HbmRole::Input)?;
        Ok(((x, xdt, xs), (idx, is)))
    }

    fn declare(&mut self, name: &str, role: HbmRole) -> Result<(DType, Vec<usize>), LowerError> {
        let (d, shape) = self.dev(name)?;
        if !self.e.program.hbm.iter().any(|h| h.name == name) {
            self.e.program.declare(name, d, &shape, role);
        }
        Ok((d, shape))
    }

    fn new_scratch(&mut self, dtype: DType, n: usize) -> String {
        let name = format!("scratch.{}", self.scratch);
        self.scratch += 1;
        self.e.program.declare(&name, dtype, &[n.max(1)], HbmRole::Scratch);
        name
    }

    /// Flat HBM→HBM (or SBUF-free) copy of `n` elements from `src` to `dst`, optionally accumulating.
    fn copy_flat(&mut self, dst: &str, ddt: DType, src: &str, sdt: DType, n: usize, accumulate: bool) {
        let mut done = 0usize;
        while done < n {
            let rest = n - done;
            let (rows, cols) = if rest >= 4096 { (rest / 4096, 4096) } else { (1, rest) };
            let d = AccessPattern::hbm(dst, ddt, done as u64, rows, cols as i64, vec![[1, cols as i64]]);
            let s = AccessPattern::hbm(src, sdt, done as u64, rows, cols as i64, vec![[1, cols as i64]]);
            self.e.push(
                Engine::Dma,
                Op::DmaCopy(DmaCopy {
                    dst: d,
                    src: s,
                    accumulate,
                    indirect: None,
                }),
            );
            done += rows * cols;
        }
    }

    /// Fills `n` elements of HBM tensor `dst` with `value` (memset in SBUF, then DMA).
    fn fill_flat(&mut self, dst: &str, dt: DType, n: usize, value: f64) -> Result<(), LowerError> {
        if n == 0 {
            return Ok(());
        }
        let cols = 2048usize;
        let off = self.alloc.alloc(cols * dt.size())?;
        let p = n.div_ceil(cols).min(128);
        let tile = AccessPattern::sbuf(dt, 0, p, off, vec![[1, cols as i64]]);
        self.e.memset(Engine::Gpsimd, tile, value);
        let mut done = 0usize;
        while done < n {
            let rest = n - done;
            let (rows, c) = if rest >= cols {
                ((rest / cols).min(128), cols)
            } else {
                (1, rest)
            };
            let d = AccessPattern::hbm(dst, dt, done as u64, rows, c as i64, vec![[1, c as i64]]);
            self.e.push(
                Engine::Dma,
                dma(d, AccessPattern::sbuf(dt, 0, rows, off, vec![[1, c as i64]])),
            );
            done += rows * c;
        }
        Ok(())
    }

    /// Emits the flat element offsets of rows `[p0, p0+pc) × S[1..]` into an int32 SBUF tile.
    /// The element offset of each row of `sp` for rows `p0..p0 + pc`, in `bufs.acc`. An index
    /// outside its range (`Idx::wrap`), or equal to `Idx::skip`, makes its row's offset
    /// `2^30` past an in-range one — past the end of any tensor the runner accepts — so the
    /// indirect DMA fails (`oob: error`) or drops the row (`oob: skip`). The offset itself is
    /// built from the index clamped into range, so no wraparound can bring it back in range.
    fn offsets(&mut self, sp: &Spec, p0: usize, pc: usize, bufs: &IdxBufs) -> AccessPattern {
        let f = sp.free();
        let i32_ap = |slot: Slot| sb(DType::I32, pc, slot.offset, f);
        let acc_ap = i32_ap(bufs.acc);
        let bad = i32_ap(bufs.bad);
        let pattern: Vec<[i64; 2]> = if sp.s.len() > 1 {
            sp.s[1..]
                .iter()
                .zip(&sp.base[1..])
                .map(|(&n, &k)| [k, n as i64])
                .collect()
        } else {
            vec![[0, 1]]
        };
        self.e.push(
            Engine::Gpsimd,
            Op::Iota(Iota {
                dst: acc_ap.clone(),
                offset: sp.base_const + p0 as i64 * sp.base[0],
                channel_multiplier: sp.base[0],
                pattern,
            }),
        );
        self.e.push(Engine::Gpsimd, memset(bad.clone(), 0.0));
        let gp = Engine::Gpsimd;
        for ix in &sp.idx {
            let src = AccessPattern::hbm(
                &ix.name,
                DType::I32,
                (p0 as i64 * ix.strides[0]) as u64,
                pc,
                ix.strides[0],
                free_dims(&sp.s, &ix.strides),
            );
            let t = i32_ap(bufs.tmp);
            let wa = i32_ap(bufs.w);
            self.e.push(Engine::Dma, dma(t.clone(), src));
            if let Some(k) = ix.skip {
                // bad |= (t == k)
                self.e
                    .push(gp, ts(wa.clone(), t.clone(), AluOp::IsEqual, imm(k as f64), None));
                self.e.push(gp, tt(bad.clone(), bad.clone(), wa.clone(), AluOp::Max));
            }
            // v: the index, wrapped by `size` when negative indices wrap; `spare` the other slot.
            let (v, spare) = if ix.wrap {
                let m = Some((AluOp::Multiply, imm(ix.size as f64)));
                self.e.push(gp, ts(wa.clone(), t.clone(), AluOp::IsLt, imm(0.0), m));
                self.e.push(gp, tt(wa.clone(), wa.clone(), t.clone(), AluOp::Add));
                (wa, t)
            } else {
                (t, wa)
            };
            if ix.size > 0 {
                // spare = clamp(v, 0, size - 1); bad |= (v != spare)
                let hi = Some((AluOp::Min, imm((ix.size - 1) as f64)));
                self.e.push(gp, ts(spare.clone(), v.clone(), AluOp::Max, imm(0.0), hi));
                self.e
                    .push(gp, tt(v.clone(), v.clone(), spare.clone(), AluOp::NotEqual));
            } else {
                // An empty dimension: every index is out of range.
                self.e
                    .push(gp, ts(spare.clone(), v.clone(), AluOp::Multiply, imm(0.0), None));
                self.e
                    .push(gp, ts(v.clone(), spare.clone(), AluOp::Add, imm(1.0), None));
            }
            self.e.push(gp, tt(bad.clone(), bad.clone(), v, AluOp::Max));
            // acc += spare * mult
            self.e.push(
                gp,
                ts(spare.clone(), spare.clone(), AluOp::Multiply, imm(ix.mult as f64), None),
            );
            self.e.push(gp, tt(acc_ap.clone(), acc_ap.clone(), spare, AluOp::Add));
        }
        // acc += bad * 2^30
        let push = imm((1u64 << 30) as f64);
        self.e
            .push(gp, ts(bad.clone(), bad.clone(), AluOp::Multiply, push, None));
        self.e.push(gp, tt(acc_ap.clone(), acc_ap.clone(), bad, AluOp::Add));
        acc_ap
    }

    fn bufs(&mut self, sp: &Spec) -> Result<IdxBufs, LowerError> {
        let f = sp.free();
        if sp.s.len() > 5 || f > MAX_F {
            return Err(self
                .req
                .unsupported(format!("row shape {:?} does not fit the tiling", sp.s)));
        }
        Ok(IdxBufs {
            acc: self.alloc.slot(f * 4)?,
            tmp: self.alloc.slot(f * 4)?,
            w: self.alloc.slot(f * 4)?,
            bad: self.alloc.slot(f * 4)?,
        })
    }

    /// Gathers rows of `src` into `out` (contiguous, row order of `S`).
    fn gather(&mut self, sp: &Spec, src: &str, dt: DType, out: &str, odt: DType) -> Result<(), LowerError> {
        let sp = sp.clone().simplify();
        let bufs = self.bufs(&sp)?;
        let f = sp.free();
        let r = sp.r;
        let mut p0 = 0;
        while p0 < sp.s[0] {
            let pc = (sp.s[0] - p0).min(128);
            let index = self.offsets(&sp, p0, pc, &bufs);
            let rows = pc * f;
            let dst = AccessPattern::hbm(out, odt, (p0 * f * r) as u64, rows, r as i64, vec![[1, r as i64]]);
            let s = AccessPattern::hbm(src, dt, 0, 1, 0, vec![[1, r as i64]]);
            self.e.push(
                Engine::Dma,
                Op::DmaCopy(DmaCopy {
                    dst,
                    src: s,
                    accumulate: false,
                    indirect: Some(Indirect {
                        side: IndirectSide::Src,
                        index,
                        row_step: 1,
                        oob: OobMode::Error,
                    }),
                }),
            );
            p0 += pc;
        }
        Ok(())
    }

    /// Scatters values (`vals`: HBM tensor + per-dim strides of `S`, or a scalar) into `out`
    /// at the offsets of `sp` (R = 1).
    fn scatter(
        &mut self,
        sp: &Spec,
        vals: Vals,
        out: &str,
        odt: DType,
        accumulate: bool,
        oob: OobMode,
    ) -> Result<(), LowerError> {
        let mut sp = sp.clone();
        if let Vals::Tensor(_, _, st) = &vals {
            sp.extra = vec![st.clone()];
        }
        let sp = sp.simplify();
        let bufs = self.bufs(&sp)?;
        let f = sp.free();
        let total = sp.s.iter().product::<usize>();
        // Compact the values in row order into a scratch tensor of the output's dtype.
        let comp = self.new_scratch(odt, total);
        match &vals {
            Vals::Tensor(name, vdt, _) => {
                let st = &sp.extra[0];
                let mut p0 = 0;
                while p0 < sp.s[0] {
                    let pc = (sp.s[0] - p0).min(128);
                    let s = AccessPattern::hbm(name, *vdt, (p0 as i64 * st[0]) as u64, pc, st[0], free_dims(&sp.s, st));
                    let fd = free_dims(&sp.s, &contiguous_strides(&sp.s));
                    let d = AccessPattern::hbm(&comp, odt, (p0 * f) as u64, pc, f as i64, fd);
                    self.e.push(Engine::Dma, dma(d, s));
                    p0 += pc;
                }
            }
            Vals::Scalar(v) => self.fill_flat(&comp, odt, total, *v)?,
        }
        let mut p0 = 0;
        while p0 < sp.s[0] {
            let pc = (sp.s[0] - p0).min(128);
            let index = self.offsets(&sp, p0, pc, &bufs);
            let rows = pc * f;
            let src = AccessPattern::hbm(&comp, odt, (p0 * f) as u64, rows, 1, vec![[1, 1]]);
            let dst = AccessPattern::hbm(out, odt, 0, 1, 0, vec![[1, 1]]);
            self.e.push(
                Engine::Dma,
                Op::DmaCopy(DmaCopy {
                    dst,
                    src,
                    accumulate,
                    indirect: Some(Indirect {
                        side: IndirectSide::Dst,
                        index,
                        row_step: 1,
                        oob,
                    }),
                }),
            );
            p0 += pc;
        }
        Ok(())
    }

    fn finish(self) -> Lowered {
        Lowered::new(self.e.finish())
    }
}

enum Vals {
    /// HBM tensor, its dtype, element strides per dim of `S`.
    Tensor(String, DType, Vec<i64>),
    Scalar(f64),
}

fn check_index_dtype(req: &LowerRequest<'_>, name: &str) -> Result<(), LowerError> {
    let masks = matches!(req.op, "index.Tensor" | "index_put");
    match req.tensor(name)?.dtype {
        TorchDType::I64 | TorchDType::I32 => Ok(()),
        // Boolean masks (index/index_put only): data-dependent positions (nonzero) — the call
        // forms without a lowering of their own are not lowered.
        TorchDType::Bool | TorchDType::U8 if masks => {
            Err(LowerError::NotLowered(format!("{} with a boolean mask index", req.op)))
        }
        d => Err(req.invalid(format!("index dtype {d:?} (expected int32 or int64)"))),
    }
}

/// `gather`/`scatter*`: PyTorch checks the index dtype only when the index has elements, so an
/// empty index of any dtype is accepted (the result is empty, or `self` unchanged).
fn check_index_dtype_unless_empty(req: &LowerRequest<'_>, name: &str) -> Result<(), LowerError> {
    if req.tensor(name)?.shape.iter().product::<usize>() == 0 {
        return Ok(());
    }
    check_index_dtype(req, name)
}

/// Shape with 0-d promoted to `[1]`.
fn shape1(s: &[usize]) -> Vec<usize> {
    if s.is_empty() { vec![1] } else { s.to_vec() }
}

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    if req.op == "index.Tensor" {
        let indices = req.arg::<&[Option<String>]>(1, "indices")?.to_vec();
        let is_mask = |t: &str| Ok::<_, LowerError>(matches!(req.tensor(t)?.dtype, TorchDType::Bool | TorchDType::U8));
        let single_mask = matches!(indices.as_slice(), [Some(m)] if is_mask(m)?);
        for t in indices.iter().flatten() {
            if !single_mask && is_mask(t)? {
                return Err(req.unsupported(
                    "index.Tensor with a boolean mask after a `None` slice or next to other \
                     indices (only a single mask over the leading dims is lowered)"
                        .into(),
                ));
            }
        }
    }
    let mut b = B::new(req, target);
    let out = req.output_tensor(0)?;
    let (odt, oshape) = b.declare(out, HbmRole::Output)?;
    let on: usize = oshape.iter().product();
    match req.op {
        "index_select" => {
            let ((x, xdt, xs), (idx, _)) = b.source_and_index((0, "self"), (2, "index"), check_index_dtype)?;
            if on == 0 {
                return Ok(b.finish());
            }
            let xs = shape1(&xs);
            let d = req.dim_or(1, "dim", IntOrBool(0), xs.len())?;
            let k: usize = req.tensor(idx)?.shape.iter().product();
            let st = contiguous_strides(&xs);
            let mut s = xs[..d].to_vec();
            s.push(k);
            let mut base = st[..d].to_vec();
            base.push(0);
            let mut istr = vec![0; d];
            istr.push(1);
            let sp = Spec::one_index(
                s,
                xs[d + 1..].iter().product(),
                base,
                Idx::in_range(idx, istr, xs[d] as i64, st[d]),
            );
            b.gather(&sp, x, xdt, out, odt)?;
        }
        "embedding" => {
            let ((wt, wdt, ws), (idx, is)) = b.source_and_index((0, "weight"), (1, "indices"), check_index_dtype)?;
            if on == 0 {
                return Ok(b.finish());
            }
            if ws.len() != 2 {
                return Err(req.invalid("weight must be 2-D".into()));
            }
            let is1 = shape1(&is);
            let sp = Spec::one_index(
                is1.clone(),
                ws[1],
                vec![0; is1.len()],
                Idx::in_range(idx, contiguous_strides(&is1), ws[0] as i64, ws[1] as i64),
            );
            b.gather(&sp, wt, wdt, out, odt)?;
        }
        "gather" => {
            let index_check = check_index_dtype_unless_empty;
            let ((x, xdt, xs), (idx, is)) = b.source_and_index((0, "self"), (2, "index"), index_check)?;
            if on == 0 {
                return Ok(b.finish());
            }
            let xs = shape1(&xs);
            let is = shape1(&is);
            let d = req.dim_or(1, "dim", IntOrBool(0), xs.len())?;
            let sp = along_dim_spec(&xs, d, idx, &is);
            b.gather(&sp, x, xdt, out, odt)?;
        }
        "index.Tensor" => {
            let x = req.arg::<TensorArg>(0, "self")?.0;
            let (xdt, xs) = b.declare(x, HbmRole::Input)?;
            let indices = req.arg::<&[Option<String>]>(1, "indices")?.to_vec();
            if let [Some(mask)] = indices.as_slice()
                && matches!(req.tensor(mask)?.dtype, TorchDType::Bool | TorchDType::U8)
            {
                return index_bool_mask(b, x, mask, out, odt, on);
            }
            for t in indices.iter().flatten() {
                check_index_dtype(req, t)?;
                b.declare(t, HbmRole::Input)?;
            }
            if on == 0 {
                return Ok(b.finish());
            }
            let (sp, shape) = adv_spec(req, &xs, &indices)?;
            if shape.iter().product::<usize>() != on {
                return Err(req.invalid(format!("result shape {shape:?} vs output {oshape:?}")));
            }
            b.gather(&sp, x, xdt, out, odt)?;
        }
        "scatter.src" | "scatter.value" | "scatter_add" => {
            let x = req.arg::<TensorArg>(0, "self")?.0;
            let idx = req.arg::<TensorArg>(2, "index")?.0;
            check_index_dtype_unless_empty(req, idx)?;
            let (xdt, xs) = b.declare(x, HbmRole::Input)?;
            let (_, is) = b.declare(idx, HbmRole::Input)?;
            let vals = if req.op == "scatter.value" {
                Vals::Scalar(req.arg::<Scalar>(3, "value")?.as_f64())
            } else {
                let src = req.arg::<TensorArg>(3, "src")?.0;
                let (sdt, ss) = b.declare(src, HbmRole::Input)?;
                let ss = shape1(&ss);
                let st = contiguous_strides(&ss);
                Vals::Tensor(src.into(), sdt, st)
            };
            b.copy_flat(out, odt, x, xdt, on, false);
            let n_idx: usize = is.iter().product();
            if on == 0 || n_idx == 0 {
                return Ok(b.finish());
            }
            let xs = shape1(&xs);
            let is = shape1(&is);
            let d = req.dim_or(1, "dim", IntOrBool(0), xs.len())?;
            let sp = along_dim_spec(&xs, d, idx, &is);
            if req.op == "scatter_add" {
                b.scatter_sum(&sp, vals, out, odt, on)?;
            } else {
                b.scatter(&sp, vals, out, odt, false, OobMode::Error)?;
            }
        }
        "scatter_reduce.two" => {
            let x = req.arg::<TensorArg>(0, "self")?.0;
            let idx = req.arg::<TensorArg>(2, "index")?.0;
            check_index_dtype_unless_empty(req, idx)?;
            let select = match req.arg::<&str>(4, "reduce")? {
                "sum" => None,
                r => Some(Reduce::parse(r).ok_or_else(|| {
                    req.arg_error(4, "reduce", format!("`{r}` (expected sum, prod, mean, amax or amin)"))
                })?),
            };
            let include_self = req.arg_or(5, "include_self", BoolOrInt(true))?.0;
            let (xdt, xs) = b.declare(x, HbmRole::Input)?;
            let (idt, is) = b.declare(idx, HbmRole::Input)?;
            let src = req.arg::<TensorArg>(3, "src")?.0;
            let (sdt, ss) = b.declare(src, HbmRole::Input)?;
            let st = contiguous_strides(&shape1(&ss));
            b.copy_flat(out, odt, x, xdt, on, false);
            let n_idx: usize = is.iter().product();
            if on == 0 || n_idx == 0 {
                return Ok(b.finish());
            }
            let xs = shape1(&xs);
            let is = shape1(&is);
            let d = req.dim_or(1, "dim", IntOrBool(0), xs.len())?;
            if let Some(reduce) = select {
                scatter_reduce_select(
                    &mut b,
                    (x, xdt, &xs),
                    (idx, idt, &is),
                    (src, sdt, &shape1(&ss)),
                    d,
                    reduce,
                    include_self,
                    (out, odt),
                )?;
                return Ok(b.finish());
            }
            let sp = along_dim_spec(&xs, d, idx, &is);
            if !include_self {
                // Zero every scattered position first, then sum into it.
                b.scatter(&sp, Vals::Scalar(0.0), out, odt, false, OobMode::Error)?;
            }
            b.scatter_sum(&sp, Vals::Tensor(src.into(), sdt, st), out, odt, on)?;
        }
        "embedding_dense_backward" => {
            let g = req.arg::<TensorArg>(0, "grad_output")?.0;
            let idx = req.arg::<TensorArg>(1, "indices")?.0;
            check_index_dtype(req, idx)?;
            let IntOrBool(nw) = req.arg(2, "num_weights")?;
            let IntOrBool(pad) = req.arg_or(3, "padding_idx", IntOrBool(-1))?;
            let scale_grad_by_freq = req.arg_or(4, "scale_grad_by_freq", BoolOrInt(false))?.0;
            let (gdt, _) = b.declare(g, HbmRole::Input)?;
            let (_, is) = b.declare(idx, HbmRole::Input)?;
            b.fill_flat(out, odt, on, 0.0)?;
            let dcols = *oshape.last().unwrap_or(&1);
            let n_idx: usize = is.iter().product();
            if on == 0 || n_idx == 0 || dcols == 0 {
                return Ok(b.finish());
            }
            let mut s = shape1(&is);
            let mut istr = contiguous_strides(&s);
            s.push(dcols);
            istr.push(0);
            let mut base = vec![0i64; s.len()];
            *base.last_mut().unwrap() = 1;
            let vst = contiguous_strides(&s);
            let sp = Spec::one_index(
                s,
                1,
                base,
                Idx {
                    skip: if pad >= 0 { Some(pad) } else { None },
                    ..Idx::in_range(idx, istr, nw, dcols as i64)
                },
            );
            let (grads, gdt) = if scale_grad_by_freq {
                let scaled = b.grads_scaled_by_inverse_count(idx, n_idx, nw, g, gdt, dcols)?;
                (scaled, DType::F32)
            } else {
                (g.to_string(), gdt)
            };
            b.scatter(&sp, Vals::Tensor(grads, gdt, vst), out, odt, true, OobMode::Skip)?;
        }
        "masked_scatter" => {
            let x = req.arg::<TensorArg>(0, "self")?.0;
            let mask = req.arg::<TensorArg>(1, "mask")?.0;
            let source = req.arg::<TensorArg>(2, "source")?.0;
            let (xdt, xs) = b.declare(x, HbmRole::Input)?;
            let (_, ms) = b.declare(mask, HbmRole::Input)?;
            let (sdt, srcs) = b.declare(source, HbmRole::Input)?;
            if srcs.iter().product::<usize>() >= 1 << 22 {
                return Err(req.unsupported("source too large for the skip offset".into()));
            }
            // `self` and `mask` both broadcast to the output's shape.
            let os1 = shape1(&oshape);
            if xs.len() > os1.len() || ms.len() > os1.len() {
                return Err(req.invalid(format!("self {xs:?} / mask {ms:?} wider than the output {oshape:?}")));
            }
            if xs == oshape {
                b.copy_flat(out, odt, x, xdt, on, false);
            } else if on > 0 {
                if os1.len() > 4 {
                    return Err(req.unsupported(format!("a broadcast `self` of rank {}", os1.len())));
                }
                let xst = broadcast_strides(&xs, &os1);
                let xfree: Vec<[i64; 2]> = os1.iter().zip(&xst).map(|(&n, &k)| [k, n as i64]).collect();
                b.e.push(
                    Engine::Dma,
                    dma(
                        AccessPattern::hbm(out, odt, 0, 1, 0, vec![[1, on as i64]]),
                        AccessPattern::hbm(x, xdt, 0, 1, 0, xfree),
                    ),
                );
            }
            if on == 0 {
                return Ok(b.finish());
            }
            if on > 8192 || os1.len() > 4 {
                return Err(req.unsupported(format!("masked_scatter of {on} elements (one-partition scan)")));
            }
            let mst = broadcast_strides(&ms, &os1);
            let mfree: Vec<[i64; 2]> = os1.iter().zip(&mst).map(|(&n, &k)| [k, n as i64]).collect();
            let n = on;
            let m = b.alloc.slot(n * 4)?;
            let ones = b.alloc.slot(n * 4)?;
            let cs = b.alloc.slot(n * 4)?;
            let w = b.alloc.slot(n * 4)?;
            let ix = b.alloc.slot(n * 4)?;
            let m_ap = sb(DType::I32, 1, m.offset, n);
            let mh = AccessPattern::hbm(mask, DType::Bool, 0, 1, 0, mfree);
            b.e.push(Engine::Dma, dma(m_ap.clone(), mh));
            let ix_ap = mask_positions(&mut b, m_ap, n, [ones, cs, w, ix]);
            let dst = AccessPattern::hbm(out, odt, 0, n, 1, vec![[1, 1]]);
            let src = AccessPattern::hbm(source, sdt, 0, 1, 0, vec![[1, 1]]);
            b.e.push(
                Engine::Dma,
                Op::DmaCopy(DmaCopy {
                    dst,
                    src,
                    accumulate: false,
                    indirect: Some(Indirect {
                        side: IndirectSide::Src,
                        index: ix_ap,
                        row_step: 1,
                        oob: OobMode::Skip,
                    }),
                }),
            );
        }
        "index_put" => {
            let x = req.arg::<TensorArg>(0, "self")?.0;
            let (xdt, xs) = b.declare(x, HbmRole::Input)?;
            let indices = req.arg::<&[Option<String>]>(1, "indices")?.to_vec();
            let v = req.arg::<TensorArg>(2, "values")?.0;
            let accumulate = req.arg_or(3, "accumulate", BoolOrInt(false))?.0;
            if req.tensor(v)?.shape.iter().product::<usize>() == 0 {
                // Values with no elements broadcast only to an empty selection (a size-0 dim
                // never broadcasts to a nonzero one), so a valid call writes nothing: `out =
                // self`, whatever the indices (an all-False mask, empty index tensors).
                for t in indices.iter().flatten() {
                    b.declare(t, HbmRole::Input)?;
                }
                b.declare(v, HbmRole::Input)?;
                b.copy_flat(out, odt, x, xdt, on, false);
                return Ok(b.finish());
            }
            if let [Some(mask)] = indices.as_slice()
                && req.tensor(mask)?.dtype == TorchDType::Bool
                && (!accumulate || req.tensor(x)?.dtype.is_float())
            {
                // Accumulating through the DMA's fp32 add: float dtypes only (one rounding to
                // the dtype, as PyTorch's add; int32 beyond 2^24 would not be exact).
                return index_put_mask(b, x, mask, v, out, odt, on, accumulate);
            }
            for t in indices.iter().flatten() {
                check_index_dtype(req, t)?;
                b.declare(t, HbmRole::Input)?;
            }
            let (vdt, vs) = b.declare(v, HbmRole::Input)?;
            b.copy_flat(out, odt, x, xdt, on, false);
            if on == 0 {
                return Ok(b.finish());
            }
            let (sp, shape) = adv_spec(req, &xs, &indices)?;
            if shape.iter().product::<usize>() == 0 {
                return Ok(b.finish());
            }
            let vst = broadcast_strides(&vs, &shape);
            let vst = if vst.is_empty() { vec![0] } else { vst };
            let vals = Vals::Tensor(v.into(), vdt, vst);
            if accumulate {
                // Onto bool, a logical or (scatter_sum's fp32 scratch and `!= 0` pass).
                b.scatter_sum(&sp, vals, out, odt, on)?;
            } else {
                b.scatter(&sp, vals, out, odt, false, OobMode::Error)?;
            }
        }
        "select_scatter" | "slice_scatter" => {
            let x = req.arg::<TensorArg>(0, "self")?.0;
            let src = req.arg::<TensorArg>(1, "src")?.0;
            let (xdt, xs) = b.declare(x, HbmRole::Input)?;
            let (sdt, ss) = b.declare(src, HbmRole::Input)?;
            b.copy_flat(out, odt, x, xdt, on, false);
            let sn: usize = ss.iter().product();
            if on == 0 || sn == 0 {
                return Ok(b.finish());
            }
            let xs1 = shape1(&xs);
            let d = req.dim_or(2, "dim", IntOrBool(0), xs1.len())?;
            let st = contiguous_strides(&xs1);
            let size = xs1[d] as i64;
            let (s, base, c) = if req.op == "select_scatter" {
                let IntOrBool(i) = req.arg(3, "index")?;
                let i = if i < 0 { i + size } else { i };
                let mut s = xs1.clone();
                s.remove(d);
                let mut base = st.clone();
                base.remove(d);
                (s, base, i * st[d])
            } else {
                let IntOrBool(step) = req.arg_or(5, "step", IntOrBool(1))?;
                let IntOrBool(start) = req.arg_or(3, "start", IntOrBool(0))?;
                let start = if start < 0 {
                    (start + size).max(0)
                } else {
                    start.min(size)
                };
                let mut base = st.clone();
                base[d] = st[d] * step;
                (shape1(&ss), base, start * st[d])
            };
            let n = s.len();
            let sp = Spec {
                s,
                r: 1,
                base,
                base_const: c,
                idx: vec![],
                extra: vec![],
            };
            let vst = if n == 0 {
                vec![]
            } else {
                contiguous_strides(&shape1(&ss))
            };
            let sp = if sp.s.is_empty() {
                Spec {
                    s: vec![1],
                    base: vec![0],
                    ..sp
                }
            } else {
                sp
            };
            let vst = if vst.is_empty() { vec![0] } else { vst };
            b.scatter(&sp, Vals::Tensor(src.into(), sdt, vst), out, odt, false, OobMode::Error)?;
        }
        _ => return Err(LowerError::NotLowered(req.op.to_string())),
    }
    Ok(b.finish())
}

/// `index_put(self, [mask], values)` with one bool mask over the leading dims and values that
/// broadcast over the selected rows (their size along the selected-rows dim is 1): then
/// `out[e] = mask[e] ? values[v(e)] : self[e]` with `v` affine in `e`'s trailing coordinates —
/// data-independent. One partition holds the flattened tensor: GpSimd `iota` writes `v(e)`,
/// VectorE adds `2^23` where the mask is false, and an indirect gather with `oob: skip` copies
/// values into the masked elements only (added onto them with `accumulate`). Values that differ
/// per selected row (consumed in mask order) take the prefix sum of [`index_put_mask_rows`].
#[allow(clippy::too_many_arguments)]
fn index_put_mask(
    mut b: B<'_, '_>,
    x: &str,
    mask: &str,
    v: &str,
    out: &str,
    odt: DType,
    on: usize,
    accumulate: bool,
) -> Result<Lowered, LowerError> {
    let req = b.req;
    let (xdt, xs) = b.declare(x, HbmRole::Input)?;
    let (_, ms) = b.declare(mask, HbmRole::Input)?;
    let (vdt, vs) = b.declare(v, HbmRole::Input)?;
    let k = ms.len();
    if k == 0 || k > xs.len() || ms[..] != xs[..k] || xs.len() > 4 {
        return Err(LowerError::NotLowered("index_put with this boolean mask shape".into()));
    }
    // Result shape of x[mask]: [nnz] ++ xs[k..]; values must not vary along nnz.
    let mut rshape = vec![usize::MAX];
    rshape.extend_from_slice(&xs[k..]);
    let vr = vs.len();
    if vr == rshape.len() && vs[0] != 1 && vs[1..] == xs[k..] {
        return index_put_mask_rows(b, (x, xdt, &xs), (mask, &ms), (v, vdt, &vs), (out, odt, on), accumulate);
    }
    if vr > rshape.len() || (vr == rshape.len() && vs[0] != 1) {
        return Err(LowerError::NotLowered(
            "index_put with per-row mask values that broadcast inside a row".into(),
        ));
    }
    for (i, &dsz) in vs.iter().rev().enumerate() {
        let rs = rshape[rshape.len() - 1 - i];
        if rs != usize::MAX && dsz != 1 && dsz != rs {
            return Err(req.invalid("values do not broadcast".into()));
        }
    }
    b.copy_flat(out, odt, x, xdt, on, false);
    if on == 0 {
        return Ok(b.finish());
    }
    if on > 8192 {
        return Err(req.unsupported(format!("masked index_put of {on} elements (one partition)")));
    }
    // Value offset per dim of x: 0 on the mask dims, broadcast strides of values on the rest.
    let tail = &xs[k..];
    let vst = broadcast_strides(&vs[vr.saturating_sub(tail.len())..], tail);
    let mut steps = vec![0i64; k];
    steps.extend(vst);
    let pattern: Vec<[i64; 2]> = xs.iter().zip(&steps).map(|(&n, &st)| [st, n as i64]).collect();
    let free = contiguous_strides(&xs)
        .iter()
        .zip(&xs)
        .map(|(&st, &n)| [st, n as i64])
        .collect::<Vec<_>>();
    let n = on;
    let m = b.alloc.slot(n * 4)?;
    let vo = b.alloc.slot(n * 4)?;
    let w = b.alloc.slot(n * 4)?;
    let ix = b.alloc.slot(n * 4)?;
    let f = |dt: DType, s: Slot| sb(dt, 1, s.offset, n);
    let mut mfree: Vec<[i64; 2]> = contiguous_strides(&ms)
        .iter()
        .zip(&ms)
        .map(|(&st, &n)| [st, n as i64])
        .collect();
    mfree.extend(tail.iter().map(|&n| [0, n as i64]));
    b.e.push(
        Engine::Dma,
        dma(f(DType::F32, m), AccessPattern::hbm(mask, DType::Bool, 0, 1, 0, mfree)),
    );
    b.e.push(
        Engine::Gpsimd,
        Op::Iota(Iota {
            dst: AccessPattern {
                free,
                ..f(DType::F32, vo)
            },
            offset: 0,
            channel_multiplier: 0,
            pattern,
        }),
    );
    const BIG: f64 = (1u64 << 23) as f64;
    b.e.push(
        Engine::Vector,
        Op::TensorScalar(TensorScalar {
            dst: f(DType::F32, w),
            src: f(DType::F32, m),
            op0: AluOp::Multiply,
            operand0: ScalarOperand::Imm(-BIG),
            reverse0: false,
            op1: Some(AluOp::Add),
            operand1: Some(ScalarOperand::Imm(BIG)),
            reverse1: false,
        }),
    );
    b.e.push(
        Engine::Vector,
        tile::tt(f(DType::I32, ix), f(DType::F32, vo), f(DType::F32, w), AluOp::Add),
    );
    let vn: usize = vs.iter().product();
    if vn >= 1 << 22 {
        return Err(req.unsupported("values too large for the skip offset".into()));
    }
    b.e.push(
        Engine::Dma,
        Op::DmaCopy(DmaCopy {
            dst: AccessPattern::hbm(out, odt, 0, n, 1, vec![[1, 1]]),
            src: AccessPattern::hbm(v, vdt, 0, 1, 0, vec![[1, 1]]),
            accumulate,
            indirect: Some(Indirect {
                side: IndirectSide::Src,
                index: f(DType::I32, ix),
                row_step: 1,
                oob: OobMode::Skip,
            }),
        }),
    );
    Ok(b.finish())
}

/// `index_put(self, [mask], values)` with one bool mask over the leading `k` dims and one
/// value row per selected row (`values` of shape `[R, *self.shape[k..]]`, R the number of true
/// mask elements in a valid call): the i-th selected row takes `values[i]`, so element `e` of
/// a selected row reads `values.flat[c(e) − 1]` with `c` the inclusive prefix count of the mask
/// broadcast over the row — the same on-device prefix sum as `masked_scatter` (one partition,
/// VectorE scan), then one indirect DMA whose unselected elements point past `values` and are
/// skipped. Positions come from the mask on the device, never from the golden output.
/// `accumulate` adds onto `self` through the DMA's accumulate (a mask selects each element at
/// most once, so there are no duplicate writes).
fn index_put_mask_rows(
    mut b: B<'_, '_>,
    (x, xdt, xs): (&str, DType, &[usize]),
    (mask, ms): (&str, &[usize]),
    (v, vdt, vs): (&str, DType, &[usize]),
    (out, odt, on): (&str, DType, usize),
    accumulate: bool,
) -> Result<Lowered, LowerError> {
    let req = b.req;
    let k = ms.len();
    if xdt != vdt {
        return Err(req.unsupported(format!("index_put of {vdt} values into {xdt}")));
    }
    if accumulate && odt == DType::Bool {
        return Err(req.unsupported("accumulating masked index_put on bool".into()));
    }
    if vs.iter().product::<usize>() >= 1 << 22 {
        return Err(req.unsupported("values too large for the skip offset".into()));
    }
    b.copy_flat(out, odt, x, xdt, on, false);
    if on == 0 {
        return Ok(b.finish());
    }
    if on > 8192 || xs.len() > 4 {
        return Err(req.unsupported(format!("masked index_put of {on} elements (one-partition scan)")));
    }
    let n = on;
    let m = b.alloc.slot(n * 4)?;
    let ones = b.alloc.slot(n * 4)?;
    let cs = b.alloc.slot(n * 4)?;
    let w = b.alloc.slot(n * 4)?;
    let ix = b.alloc.slot(n * 4)?;
    // The mask read once per element of x: its own strides on the leading dims, 0 on the row.
    let mut mfree: Vec<[i64; 2]> = contiguous_strides(ms)
        .iter()
        .zip(ms)
        .map(|(&st, &n)| [st, n as i64])
        .collect();
    mfree.extend(xs[k..].iter().map(|&n| [0, n as i64]));
    let m_ap = sb(DType::I32, 1, m.offset, n);
    b.e.push(
        Engine::Dma,
        dma(m_ap.clone(), AccessPattern::hbm(mask, DType::Bool, 0, 1, 0, mfree)),
    );
    let ix_ap = mask_positions(&mut b, m_ap, n, [ones, cs, w, ix]);
    b.e.push(
        Engine::Dma,
        Op::DmaCopy(DmaCopy {
            dst: AccessPattern::hbm(out, odt, 0, n, 1, vec![[1, 1]]),
            src: AccessPattern::hbm(v, vdt, 0, 1, 0, vec![[1, 1]]),
            accumulate,
            indirect: Some(Indirect {
                side: IndirectSide::Src,
                index: ix_ap,
                row_step: 1,
                oob: OobMode::Skip,
            }),
        }),
    );
    Ok(b.finish())
}

/// `gather`/`scatter` along `d`: rows are the index tensor's elements.
fn along_dim_spec(xs: &[usize], d: usize, idx: &str, is: &[usize]) -> Spec {
    let st = contiguous_strides(xs);
    let mut base = st.clone();
    base[d] = 0;
    Spec::one_index(
        is.to_vec(),
        1,
        base,
        Idx::in_range(idx, contiguous_strides(is), xs[d] as i64, st[d]),
    )
}

/// Advanced indexing `x[indices]`: the element-wise spec (R = 1) over the result shape.
fn adv_spec(
    req: &LowerRequest<'_>,
    xs: &[usize],
    indices: &[Option<String>],
) -> Result<(Spec, Vec<usize>), LowerError> {
    if indices.len() > xs.len() {
        return Err(req.invalid("too many indices".into()));
    }
    let st = contiguous_strides(xs);
    let pos: Vec<usize> = (0..indices.len()).filter(|&i| indices[i].is_some()).collect();
    if pos.is_empty() {
        return Err(req.unsupported("no index tensor".into()));
    }
    let mut bshape: Vec<usize> = vec![];
    for &p in &pos {
        let sh = &req.tensor(indices[p].as_ref().unwrap())?.shape;
        bshape =
            super::tile::broadcast_shapes(&bshape, sh).ok_or_else(|| req.invalid("indices do not broadcast".into()))?;
    }
    let adjacent = pos.windows(2).all(|w| w[1] == w[0] + 1);
    let nb = bshape.len();
    // Result dims: (kind, size, base stride); kind None = a dim of x, Some(k) = broadcast dim k.
    let mut dims: Vec<(Option<usize>, usize, i64)> = vec![];
    let bdims: Vec<(Option<usize>, usize, i64)> = (0..nb).map(|k| (Some(k), bshape[k], 0)).collect();
    let rest: Vec<(Option<usize>, usize, i64)> = (0..xs.len())
        .filter(|e| !pos.contains(e))
        .map(|e| (None, xs[e], st[e]))
        .collect();
    if adjacent {
        let j = pos[0];
        dims.extend(rest.iter().take(j).cloned());
        dims.extend(bdims);
        dims.extend(rest.iter().skip(j).cloned());
    } else {
        dims.extend(bdims);
        dims.extend(rest);
    }
    let shape: Vec<usize> = dims.iter().map(|d| d.1).collect();
    let mut idx = vec![];
    for &p in &pos {
        let name = indices[p].as_ref().unwrap();
        let sh = &req.tensor(name)?.shape;
        let bst = broadcast_strides(sh, &bshape);
        let strides = dims.iter().map(|d| d.0.map(|k| bst[k]).unwrap_or(0)).collect();
        idx.push(Idx {
            name: name.clone(),
            strides,
            size: xs[p] as i64,
            mult: st[p],
            skip: None,
            wrap: true,
        });
    }
    let base = dims.iter().map(|d| d.2).collect();
    Ok((
        Spec {
            s: shape.clone(),
            r: 1,
            base,
            base_const: 0,
            idx,
            extra: vec![],
        },
        shape,
    ))
}

/// A `scatter_reduce.two` reduction other than `sum` (which is a DMA accumulate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reduce {
    Prod,
    Amax,
    Amin,
    Mean,
}

impl Reduce {
    fn parse(name: &str) -> Option<Reduce> {
        Some(match name {
            "prod" => Reduce::Prod,
            "amax" => Reduce::Amax,
            "amin" => Reduce::Amin,
            "mean" => Reduce::Mean,
            _ => return None,
        })
    }

    /// The ALU operator that folds a group (mean folds a sum).
    fn alu(self) -> AluOp {
        match self {
            Reduce::Prod => AluOp::Multiply,
            Reduce::Amax => AluOp::Max,
            Reduce::Amin => AluOp::Min,
            Reduce::Mean => AluOp::Add,
        }
    }

    /// What a non-selected element contributes to the fold (in the working dtype: int32 for
    /// integer tensors, fp32 otherwise).
    fn identity(self, int: bool) -> f64 {
        match (self, int) {
            (Reduce::Prod, _) => 1.0,
            (Reduce::Mean, _) => 0.0,
            (Reduce::Amax, true) => i32::MIN as f64,
            (Reduce::Amax, false) => f64::NEG_INFINITY,
            (Reduce::Amin, true) => i32::MAX as f64,
            (Reduce::Amin, false) => f64::INFINITY,
        }
    }
}

/// Elements per partition of the selection tiles of [`scatter_reduce_select`] (lines × index
/// chunk): six such tiles stay well inside SBUF.
const SELECT_FREE: usize = 2048;

/// A `[P, 1…]` SBUF operand with explicit free dims.
fn sbd(dtype: DType, p: usize, offset: u64, free: Vec<[i64; 2]>) -> AccessPattern {
    AccessPattern::sbuf(dtype, 0, p, offset, free)
}

/// `scatter_reduce.two` with `reduce` ∈ {prod, amax, amin, mean} along `dim`: a read-modify-write
/// the DMA cannot do (it only accumulates adds), so it runs as a selection on the engines.
///
/// Positions `p` of the scattered dim of `self` go on partitions (chunks of 128); the free axis
/// holds the *lines* (every other dim, over the index tensor's extent) × the index entries `k`
/// along `dim`. Per chunk of `k`: the index and `src` are DMA'd broadcast to every partition, the
/// index is wrapped (`+ size` where negative) and compared with the partition's position (GpSimd
/// `iota`) into a selection mask `M[p, line, k] = (index == p)`. A tile `V` holds the running
/// result in column 0 and the masked `src` in the rest (memset to the reduction's identity, then
/// `tensor_copy_predicated` under `M`); folding `V` along `k` gives the new running result. The
/// fold runs in index order, with `self` first when `include_self` — PyTorch's order:
/// VectorE `tensor_reduce` in fp32 for float tensors; for integers an exact int32 halving tree of
/// GpSimd `tensor_tensor` ops (wrapping products like PyTorch's; integer folds are order-free).
/// `count = Σ_k M` (VectorE reduce of the mask) drives the rest:
/// * mean: `result / max(count + include_self, 1)` as a VectorE reciprocal and multiply; for
///   integers, PyTorch's floor division: the fp32 quotient rounded to int32, then corrected by ±1
///   with exact GpSimd int32 remainders (exact for sums below 2^24 in magnitude);
/// * `include_self=False`: positions no index selects keep `self` (predicated copy on
///   `count > 0`).
///
/// The result tile is DMA'd over the copy of `self` already in `out`.
#[allow(clippy::too_many_arguments)]
fn scatter_reduce_select(
    b: &mut B<'_, '_>,
    (x, xdt, xs): (&str, DType, &[usize]),
    (idx, idt, is): (&str, DType, &[usize]),
    (src, sdt, ss): (&str, DType, &[usize]),
    d: usize,
    reduce: Reduce,
    include_self: bool,
    (out, odt): (&str, DType),
) -> Result<(), LowerError> {
    let req = b.req;
    let rank = xs.len();
    if is.len() != rank || ss.len() != rank {
        return Err(req.invalid("self, index and src must have the same number of dims".into()));
    }
    if (0..rank).any(|j| is[j] > ss[j] || (j != d && is[j] > xs[j])) {
        return Err(req.invalid(format!("index shape {is:?} exceeds src {ss:?} or self {xs:?}")));
    }
    let int = !odt.is_float();
    let vt = if int { DType::I32 } else { DType::F32 };
    let vs = vt.size() as u64;
    let (xst, ist, sst) = (contiguous_strides(xs), contiguous_strides(is), contiguous_strides(ss));
    let line: Vec<usize> = (0..rank).filter(|&j| j != d && is[j] != 1).collect();
    let l: usize = line.iter().map(|&j| is[j]).product();
    let line_free = |st: &[i64]| -> Vec<[i64; 2]> {
        let f: Vec<[i64; 2]> = line.iter().map(|&j| [st[j], is[j] as i64]).collect();
        if f.is_empty() { vec![[1, 1]] } else { f }
    };
    if 2 * l > SELECT_FREE {
        return Err(req.unsupported(format!(
            "scatter_reduce over {l} lines per position (at most {})",
            SELECT_FREE / 2
        )));
    }
    let (kx, k) = (xs[d], is[d]);
    let kc = (SELECT_FREE / l - 1).min(k).max(1);
    let counting = reduce == Reduce::Mean || !include_self;
    let mut slot = |bytes: usize| -> Result<Slot, LowerError> { b.alloc.slot(bytes) };
    let pos = slot(4)?;
    let it = slot(l * kc * 4)?;
    let iw = slot(l * kc * 4)?;
    let mk = slot(l * kc)?;
    let sv = slot(l * kc * 4)?;
    let vv = slot(l * (kc + 1) * 4)?;
    let acc = slot(l * 4)?;
    let xt = slot(l * 4)?;
    let cnt = slot(l * 4)?;
    let cpart = slot(l * 4)?;
    let (q, ci, t1, t2, nz) = (slot(l * 4)?, slot(l * 4)?, slot(l * 4)?, slot(l * 4)?, slot(l)?);
    let e = &mut b.e;
    let flat = |dt: DType, pc: usize, s: Slot, n: usize| sb(dt, pc, s.offset, n);
    let ts = |dst: AccessPattern, src: AccessPattern, op0: AluOp, s0: ScalarOperand, op1: Option<(AluOp, f64)>| {
        Op::TensorScalar(TensorScalar {
            dst,
            src,
            op0,
            operand0: s0,
            reverse0: false,
            op1: op1.map(|o| o.0),
            operand1: op1.map(|o| ScalarOperand::Imm(o.1)),
            reverse1: false,
        })
    };
    let tt = |dst: AccessPattern, in0: AccessPattern, in1: AccessPattern, op: AluOp| tile::tt(dst, in0, in1, op);
    let mut p0 = 0;
    while p0 < kx {
        let pc = (kx - p0).min(128);
        let res_ap = |s: Slot| flat(vt, pc, s, l);
        e.push(
            Engine::Gpsimd,
            Op::Iota(Iota {
                dst: flat(DType::I32, pc, pos, 1),
                offset: p0 as i64,
                channel_multiplier: 1,
                pattern: vec![[0, 1]],
            }),
        );
        let self_rows = AccessPattern::hbm(x, xdt, (p0 as i64 * xst[d]) as u64, pc, xst[d], line_free(&xst));
        e.push(Engine::Dma, dma(res_ap(xt), self_rows));
        if include_self {
            e.tensor_copy(Engine::Vector, res_ap(acc), res_ap(xt));
        } else {
            e.memset(Engine::Vector, res_ap(acc), reduce.identity(int));
        }
        if counting {
            e.memset(Engine::Vector, flat(DType::F32, pc, cnt, l), 0.0);
        }
        let mut k0 = 0;
        while k0 < k {
            let kn = (k - k0).min(kc);
            let wn = kn + 1;
            let n = l * kn;
            // Index and src entries k0..k0+kn of every line, the same on every partition.
            let mut ifree = line_free(&ist);
            ifree.push([ist[d], kn as i64]);
            let ih = AccessPattern::hbm(idx, idt, (k0 as i64 * ist[d]) as u64, pc, 0, ifree);
            e.push(Engine::Dma, dma(flat(DType::I32, pc, it, n), ih));
            let mut sfree = line_free(&sst);
            sfree.push([sst[d], kn as i64]);
            let sh = AccessPattern::hbm(src, sdt, (k0 as i64 * sst[d]) as u64, pc, 0, sfree);
            e.push(Engine::Dma, dma(flat(vt, pc, sv, n), sh));
            // iw = index + (index < 0) · size; M = (iw == p).
            e.push(
                Engine::Vector,
                ts(
                    flat(DType::F32, pc, iw, n),
                    flat(DType::I32, pc, it, n),
                    AluOp::IsLt,
                    ScalarOperand::Imm(0.0),
                    Some((AluOp::Multiply, kx as f64)),
                ),
            );
            e.push(
                Engine::Vector,
                tt(
                    flat(DType::F32, pc, iw, n),
                    flat(DType::F32, pc, iw, n),
                    flat(DType::I32, pc, it, n),
                    AluOp::Add,
                ),
            );
            e.push(
                Engine::Vector,
                ts(
                    flat(DType::U8, pc, mk, n),
                    flat(DType::F32, pc, iw, n),
                    AluOp::IsEqual,
                    ScalarOperand::Tile(flat(DType::I32, pc, pos, 1)),
                    None,
                ),
            );
            // V = [running result | identity, with src where selected].
            let v_col0 = sbd(vt, pc, vv.offset, vec![[wn as i64, l as i64]]);
            let v_rest = sbd(vt, pc, vv.offset + vs, vec![[wn as i64, l as i64], [1, kn as i64]]);
            e.tensor_copy(Engine::Vector, v_col0.clone(), res_ap(acc));
            e.memset(Engine::Vector, v_rest.clone(), reduce.identity(int));
            e.push(
                Engine::Vector,
                tile::copy_pred(v_rest, flat(vt, pc, sv, n), flat(DType::U8, pc, mk, n)),
            );
            if int {
                // Exact int32 halving tree: fold the upper half of the columns onto the lower.
                let mut w = wn;
                while w > 1 {
                    let h = w.div_ceil(2);
                    let m = (w - h) as i64;
                    let lo = sbd(vt, pc, vv.offset, vec![[wn as i64, l as i64], [1, m]]);
                    let hi = sbd(vt, pc, vv.offset + h as u64 * vs, vec![[wn as i64, l as i64], [1, m]]);
                    e.push(Engine::Gpsimd, tt(lo.clone(), lo, hi, reduce.alu()));
                    w = h;
                }
                e.tensor_copy(Engine::Gpsimd, res_ap(acc), v_col0);
            } else {
                e.push(
                    Engine::Vector,
                    Op::TensorReduce(TensorReduce {
                        dst: res_ap(acc),
                        src: sbd(vt, pc, vv.offset, vec![[wn as i64, l as i64], [1, wn as i64]]),
                        op: reduce.alu(),
                        axes: 1,
                        negate: false,
                    }),
                );
            }
            if counting {
                e.push(
                    Engine::Vector,
                    Op::TensorReduce(TensorReduce {
                        dst: flat(DType::F32, pc, cpart, l),
                        src: sbd(DType::U8, pc, mk.offset, vec![[kn as i64, l as i64], [1, kn as i64]]),
                        op: AluOp::Add,
                        axes: 1,
                        negate: false,
                    }),
                );
                e.push(
                    Engine::Vector,
                    tt(
                        flat(DType::F32, pc, cnt, l),
                        flat(DType::F32, pc, cnt, l),
                        flat(DType::F32, pc, cpart, l),
                        AluOp::Add,
                    ),
                );
            }
            k0 += kn;
        }
        let mut res = acc;
        if reduce == Reduce::Mean {
            // Divisor max(count + include_self, 1), its reciprocal in cpart.
            let divisor = if int {
                flat(DType::I32, pc, ci, l)
            } else {
                flat(DType::F32, pc, t1, l)
            };
            e.push(
                Engine::Vector,
                ts(
                    divisor.clone(),
                    flat(DType::F32, pc, cnt, l),
                    AluOp::Add,
                    ScalarOperand::Imm(include_self as i64 as f64),
                    Some((AluOp::Max, 1.0)),
                ),
            );
            e.push(Engine::Vector, tile::recip(flat(DType::F32, pc, cpart, l), divisor));
            if !int {
                e.push(
                    Engine::Vector,
                    tt(
                        res_ap(acc),
                        res_ap(acc),
                        flat(DType::F32, pc, cpart, l),
                        AluOp::Multiply,
                    ),
                );
            } else {
                // q ≈ sum / divisor (fp32, rounded to the nearest int32), then floor it exactly:
                // q -= (sum − q·d < 0); q += (sum − q·d ≥ d).
                let i = |s: Slot| flat(DType::I32, pc, s, l);
                e.push(
                    Engine::Vector,
                    tt(i(q), i(acc), flat(DType::F32, pc, cpart, l), AluOp::Multiply),
                );
                let remainder = |e: &mut Emitter| {
                    e.push(Engine::Gpsimd, tt(i(t1), i(q), i(ci), AluOp::Multiply));
                    e.push(Engine::Gpsimd, tt(i(t1), i(acc), i(t1), AluOp::Subtract));
                };
                remainder(e);
                e.push(
                    Engine::Gpsimd,
                    ts(i(t2), i(t1), AluOp::IsLt, ScalarOperand::Imm(0.0), None),
                );
                e.push(Engine::Gpsimd, tt(i(q), i(q), i(t2), AluOp::Subtract));
                remainder(e);
                e.push(Engine::Gpsimd, tt(i(t2), i(t1), i(ci), AluOp::IsGe));
                e.push(Engine::Gpsimd, tt(i(q), i(q), i(t2), AluOp::Add));
                res = q;
            }
        }
        if !include_self {
            // Positions that no index selects keep self.
            e.push(
                Engine::Vector,
                ts(
                    flat(DType::U8, pc, nz, l),
                    flat(DType::F32, pc, cnt, l),
                    AluOp::IsGt,
                    ScalarOperand::Imm(0.0),
                    None,
                ),
            );
            e.push(
                Engine::Vector,
                tile::copy_pred(res_ap(xt), res_ap(res), flat(DType::U8, pc, nz, l)),
            );
            res = xt;
        }
        let out_rows = AccessPattern::hbm(out, odt, (p0 as i64 * xst[d]) as u64, pc, xst[d], line_free(&xst));
        e.push(Engine::Dma, dma(out_rows, res_ap(res)));
        p0 += pc;
    }
    Ok(())
}

impl B<'_, '_> {
    /// `out = (src != 0)` for `n` elements: the logical-or post-pass of a sum scattered onto a
    /// bool tensor (DMA accumulate adds, so duplicates sum to 2, 3, …; PyTorch ORs them).
    /// `src` is an fp32 HBM scratch holding the sums.
    fn nonzero_to_bool(&mut self, src: &str, n: usize, out: &str, odt: DType) -> Result<(), LowerError> {
        let cols = 2048usize;
        let v = self.alloc.slot(cols * 4)?;
        let m = self.alloc.slot(cols * odt.size())?;
        let mut done = 0usize;
        while done < n {
            let rest = n - done;
            let (rows, c) = if rest >= cols {
                ((rest / cols).min(128), cols)
            } else {
                (1, rest)
            };
            let h =
                |name: &str, dt: DType| AccessPattern::hbm(name, dt, done as u64, rows, c as i64, vec![[1, c as i64]]);
            self.e
                .push(Engine::Dma, dma(sb(DType::F32, rows, v.offset, c), h(src, DType::F32)));
            self.e.push(
                Engine::Vector,
                Op::TensorScalar(TensorScalar {
                    dst: sb(odt, rows, m.offset, c),
                    src: sb(DType::F32, rows, v.offset, c),
                    op0: AluOp::NotEqual,
                    operand0: ScalarOperand::Imm(0.0),
                    reverse0: false,
                    op1: None,
                    operand1: None,
                    reverse1: false,
                }),
            );
            self.e.push(Engine::Dma, dma(h(out, odt), sb(odt, rows, m.offset, c)));
            done += rows * c;
        }
        Ok(())
    }

    /// A summing scatter (`accumulate`) of `vals` at `sp` into `out`, which already holds
    /// `self`. Onto a bool `out` the sums go to an fp32 scratch copy of `self` first and
    /// [`Self::nonzero_to_bool`] writes `out`: PyTorch's sum of bools is a logical or.
    fn scatter_sum(&mut self, sp: &Spec, vals: Vals, out: &str, odt: DType, n: usize) -> Result<(), LowerError> {
        if odt != DType::Bool {
            return self.scatter(sp, vals, out, odt, true, OobMode::Error);
        }
        let sums = self.new_scratch(DType::F32, n);
        self.copy_flat(&sums, DType::F32, out, odt, n, false);
        self.scatter(sp, vals, &sums, DType::F32, true, OobMode::Error)?;
        self.nonzero_to_bool(&sums, n, out, odt)
    }

    /// `embedding_dense_backward(scale_grad_by_freq=True)`: writes `grad / count[index]` per
    /// index row into a fresh fp32 scratch (`[n_idx, dcols]`) and returns its name. The counts
    /// are DMA-accumulated ones into a zeroed `[num_weights]` table; each chunk of ≤128 index rows
    /// gathers its counts (indirect DMA), takes the VectorE reciprocal and scales its gradient
    /// rows with a per-partition multiply — PyTorch's `grad · (1 / count)`.
    fn grads_scaled_by_inverse_count(
        &mut self,
        idx: &str,
        n_idx: usize,
        nw: i64,
        g: &str,
        gdt: DType,
        dcols: usize,
    ) -> Result<String, LowerError> {
        let counts = self.new_scratch(DType::F32, nw.max(1) as usize);
        self.fill_flat(&counts, DType::F32, nw as usize, 0.0)?;
        let per_index = Spec::one_index(vec![n_idx], 1, vec![0], Idx::in_range(idx, vec![1], nw, 1));
        self.scatter(&per_index, Vals::Scalar(1.0), &counts, DType::F32, true, OobMode::Error)?;
        let scaled = self.new_scratch(DType::F32, n_idx * dcols);
        let bufs = self.bufs(&per_index)?;
        let cols = dcols.min(4096);
        let cnt = self.alloc.slot(4)?;
        let gt = self.alloc.slot(cols * 4)?;
        let mut p0 = 0;
        while p0 < n_idx {
            let pc = (n_idx - p0).min(128);
            let index = self.offsets(&per_index, p0, pc, &bufs);
            let cnt_ap = sb(DType::F32, pc, cnt.offset, 1);
            self.e.push(
                Engine::Dma,
                Op::DmaCopy(DmaCopy {
                    dst: cnt_ap.clone(),
                    src: AccessPattern::hbm(&counts, DType::F32, 0, 1, 0, vec![[1, 1]]),
                    accumulate: false,
                    indirect: Some(Indirect {
                        side: IndirectSide::Src,
                        index,
                        row_step: 1,
                        oob: OobMode::Error,
                    }),
                }),
            );
            self.e.push(Engine::Vector, tile::recip(cnt_ap.clone(), cnt_ap.clone()));
            let mut c0 = 0;
            while c0 < dcols {
                let cn = (dcols - c0).min(cols);
                let at = |name: &str, dt: DType| hbm_rows(name, dt, p0 * dcols + c0, pc, dcols, cn);
                let g_ap = sb(DType::F32, pc, gt.offset, cn);
                self.e.push(Engine::Dma, dma(g_ap.clone(), at(g, gdt)));
                self.e.push(
                    Engine::Vector,
                    Op::TensorScalar(TensorScalar {
                        dst: g_ap.clone(),
                        src: g_ap.clone(),
                        op0: AluOp::Multiply,
                        operand0: ScalarOperand::Tile(cnt_ap.clone()),
                        reverse0: false,
                        op1: None,
                        operand1: None,
                        reverse1: false,
                    }),
                );
                self.e.push(Engine::Dma, dma(at(&scaled, DType::F32), g_ap));
                c0 += cn;
            }
            p0 += pc;
        }
        Ok(scaled)
    }
}

/// `index.Tensor(self, [mask])` with one bool (or uint8) mask over the leading dims of `self`:
/// the selected rows (`self[mask]`, row = the trailing dims), in row-major order of the mask.
/// The output's row count is data-dependent and comes from the case metadata. On device, one
/// partition holds the flattened mask in chunks of 8192: an inclusive prefix sum `cs` (VectorE
/// scan, carried across chunks) gives each selected row its output row `cs − 1`; unselected rows
/// get a row far past the end, and an indirect scatter with `oob: skip` copies each selected
/// row of `self` into place (HBM → HBM). A real backend would read the last `cs` back to size
/// the output; here it must equal the metadata's count (else rows stay unwritten and the run
/// fails).
fn index_bool_mask(
    mut b: B<'_, '_>,
    x: &str,
    mask: &str,
    out: &str,
    odt: DType,
    on: usize,
) -> Result<Lowered, LowerError> {
    let req = b.req;
    let (xdt, xs) = b.declare(x, HbmRole::Input)?;
    let (mdt, ms) = b.declare(mask, HbmRole::Input)?;
    let k = ms.len();
    if k == 0 {
        return Err(req.unsupported("index.Tensor with a 0-d boolean mask".into()));
    }
    if k > xs.len() || ms[..] != xs[..k] {
        return Err(req.invalid(format!("mask shape {ms:?} does not match self {xs:?}")));
    }
    let r: usize = xs[k..].iter().product();
    let nm: usize = ms.iter().product();
    if on != nm * r {
        return Err(req.invalid(format!("output bound of {on} elements, expected {nm} rows of {r}")));
    }
    // The selected row count goes to `out.count` (int32); the runner trims the padded `out`.
    let count = super::count_output_name(out);
    b.e.program.declare(&count, DType::I32, &[1], HbmRole::Output);
    if nm == 0 {
        let c = b.alloc.slot(4)?;
        b.e.memset(Engine::Vector, sb(DType::I32, 1, c.offset, 1), 0.0);
        b.e.push(
            Engine::Dma,
            dma(
                AccessPattern::hbm(&count, DType::I32, 0, 1, 0, vec![[1, 1]]),
                sb(DType::I32, 1, c.offset, 1),
            ),
        );
        return Ok(b.finish());
    }
    // Unselected rows are sent to cs + BIG − 1 ≥ BIG − 1, past any output row; cs + BIG stays
    // exact in fp32 for masks below 2^23 elements.
    const BIG: f64 = (1u64 << 23) as f64;
    if nm >= 1 << 22 {
        return Err(req.unsupported(format!("boolean mask of {nm} elements (at most 2^22)")));
    }
    const CHUNK: usize = 8192;
    let ch = nm.min(CHUNK);
    let mut slot = |bytes: usize| -> Result<Slot, LowerError> { b.alloc.slot(bytes) };
    let (m, ones, cs, w, ix, carry, count_i) = (
        slot(ch * 4)?,
        slot(ch * 4)?,
        slot(ch * 4)?,
        slot(ch * 4)?,
        slot(ch * 4)?,
        slot(4)?,
        slot(4)?,
    );
    let f = |dt: DType, s: Slot, n: usize| sb(dt, 1, s.offset, n);
    super::zero_fill_hbm(&mut b.e, ix, 1, ch, out, odt, on);
    b.e.memset(Engine::Vector, f(DType::F32, ones, ch), 1.0);
    let mut c0 = 0;
    while c0 < nm {
        let cn = (nm - c0).min(ch);
        b.e.push(
            Engine::Dma,
            dma(
                f(DType::F32, m, cn),
                AccessPattern::hbm(mask, mdt, c0 as u64, 1, 0, vec![[1, cn as i64]]),
            ),
        );
        let initial = if c0 == 0 {
            ScalarOperand::Imm(0.0)
        } else {
            ScalarOperand::Tile(f(DType::F32, carry, 1))
        };
        b.e.push(
            Engine::Vector,
            Op::TensorTensorScan(TensorTensorScan {
                dst: f(DType::F32, cs, cn),
                in0: f(DType::F32, ones, cn),
                in1: f(DType::F32, m, cn),
                initial,
                op0: AluOp::Multiply,
                op1: AluOp::Add,
            }),
        );
        b.e.tensor_copy(
            Engine::Vector,
            f(DType::F32, carry, 1),
            AccessPattern::sbuf(DType::F32, 0, 1, cs.offset + 4 * (cn as u64 - 1), vec![[1, 1]]),
        );
        // w = m ? −1 : BIG − 1; the output row is cs + w.
        b.e.push(
            Engine::Vector,
            Op::TensorScalar(TensorScalar {
                dst: f(DType::F32, w, cn),
                src: f(DType::F32, m, cn),
                op0: AluOp::Multiply,
                operand0: ScalarOperand::Imm(-BIG),
                reverse0: false,
                op1: Some(AluOp::Add),
                operand1: Some(ScalarOperand::Imm(BIG - 1.0)),
                reverse1: false,
            }),
        );
        b.e.push(
            Engine::Vector,
            tile::tt(
                f(DType::I32, ix, cn),
                f(DType::F32, cs, cn),
                f(DType::F32, w, cn),
                AluOp::Add,
            ),
        );
        if r > 0 {
            b.e.push(
                Engine::Dma,
                Op::DmaCopy(DmaCopy {
                    dst: AccessPattern::hbm(out, odt, 0, 1, 0, vec![[1, r as i64]]),
                    src: AccessPattern::hbm(x, xdt, (c0 * r) as u64, cn, r as i64, vec![[1, r as i64]]),
                    accumulate: false,
                    indirect: Some(Indirect {
                        side: IndirectSide::Dst,
                        index: f(DType::I32, ix, cn),
                        row_step: r as i64,
                        oob: OobMode::Skip,
                    }),
                }),
            );
        }
        c0 += cn;
    }
    // The final carry is the number of selected rows.
    b.e.tensor_copy(Engine::Vector, f(DType::I32, count_i, 1), f(DType::F32, carry, 1));
    b.e.push(
        Engine::Dma,
        dma(
            AccessPattern::hbm(&count, DType::I32, 0, 1, 0, vec![[1, 1]]),
            f(DType::I32, count_i, 1),
        ),
    );
    Ok(b.finish())
}
