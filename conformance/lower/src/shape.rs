//! The `shape` family: views and data-movement ops (`alias`, `as_strided`, `view`, `permute`,
//! `expand`, `squeeze.dim(s)`, `unsqueeze`, `select.int`, `slice.Tensor`, `diagonal`,
//! `split_with_sizes`, `cat`, `flip`, `repeat`).
//!
//! Every op is a strided *view* of its input's (contiguous) data: a shape, one stride per dim (in
//! elements, possibly negative — `flip` — or 0 — `expand`, `repeat`) and an element offset. The
//! output tensor is materialised by DMA copies HBM → HBM whose source access pattern is that view
//! and whose destination is the contiguous output. This is what a backend does on Trainium: a
//! view that must become a tensor of its own is a descriptor-driven copy on the DMA queues; moving
//! the data through SBUF and a compute engine would only add two more transfers and an
//! instruction that changes nothing. (Such programs run no compute-engine instruction; the shape
//! ops are exempt from the runner's compute check for that reason, see `ops.rs`.)
//!
//! The view is cut into DMAs with the shared tiler (`tile::plan_tiles`): each access pattern has
//! ≤ 128 rows (`partition_step` = the row stride), ≤ 3 free dims and ≤ 65535 elements per row, so
//! large tensors become several instructions that each respect the access-pattern limits.
//!
//! Only `cat` may change the dtype (type promotion over its inputs): the DMA converts through
//! fp32 with round-to-nearest-even on write (docs/isa.md §5.27), which is exact for every
//! widening cat promotes to (bool/int/bf16/f16 → f32, bool → int, …) and rounds an int32 beyond
//! 2^24 to nearest, like PyTorch's int → float conversion.

use super::binary::dev;
use super::promote;
use super::tile::dma;
use super::tile::{Region, TileLimits, plan_tiles};
use super::{LowerError, LowerRequest, Lowered};
use crate::call::{IntOrBool, IntOrList, TensorArg, TensorMeta};
use crate::dtype::{TorchDType, contiguous_strides};
use trnsim::{DType, Engine, HbmRole, Instruction, Program, TargetName};

/// Elements per row of one DMA access pattern (a free dim's `num` is at most 65535; the tiler
/// keeps the product of a row's free dims under this bound, so each dim is too).
const MAX_ROW_ELEMS: usize = 65535;

/// A strided view of a tensor's contiguous data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    pub shape: Vec<usize>,
    pub strides: Vec<i64>,
    pub offset: i64,
}

impl View {
    /// The whole tensor, contiguous.
    pub fn contiguous(shape: &[usize]) -> View {
        View {
            shape: shape.to_vec(),
            strides: contig(shape),
            offset: 0,
        }
    }

    /// The view with one `(size, stride)` per dim, from the start of the data.
    pub fn of(dims: Vec<(usize, i64)>) -> View {
        let (shape, strides) = dims.into_iter().unzip();
        View {
            shape,
            strides,
            offset: 0,
        }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    fn remove(&mut self, d: usize) {
        self.shape.remove(d);
        self.strides.remove(d);
    }
}

fn contig(shape: &[usize]) -> Vec<i64> {
    contiguous_strides(shape).into_iter().map(|s| s as i64).collect()
}

/// A program under construction: HBM declarations and the DMA copies.
struct Copier {
    program: Program,
    limits: TileLimits,
}

impl Copier {
    fn new(target: TargetName) -> Copier {
        let t = target.params();
        Copier {
            program: Program::new(target),
            limits: TileLimits {
                partitions: t.partitions,
                max_free: MAX_ROW_ELEMS,
                max_free_dims: 3,
            },
        }
    }

    fn declare(&mut self, name: &str, dtype: DType, shape: &[usize], role: HbmRole) {
        if !self.program.hbm.iter().any(|d| d.name == name) {
            self.program.declare(name, dtype, shape, role);
        }
    }

    /// Copies `src_view` of tensor `src` into `dst`, whose element for view index `i` is at
    /// `dst_base + Σ iₖ·dst_strides[k]`.
    fn copy(&mut self, dst: (&str, DType), dst_base: i64, dst_strides: &[i64], src: (&str, DType), view: &View) {
        let mut region = Region::new(&view.shape, &[dst_strides.to_vec(), view.strides.clone()]);
        region.base = vec![dst_base, view.offset];
        for job in plan_tiles(region, self.limits) {
            let d = job.hbm_ap(0, dst.0, dst.1);
            let s = job.hbm_ap(1, src.0, src.1);
            self.program.instructions.push(Instruction::new(Engine::Dma, dma(d, s)));
        }
    }

    /// Declares a case tensor of torch dtype `dtype`: a complex64 one as its F32 real view
    /// (`shape + [2]`, lower/mod.rs). The device dtype it got.
    fn declare_t(
        &mut self,
        req: &LowerRequest<'_>,
        name: &str,
        dtype: TorchDType,
        shape: &[usize],
        role: HbmRole,
    ) -> Result<DType, LowerError> {
        if dtype.is_complex() {
            self.declare(name, DType::F32, &super::complex_real_view_shape(shape), role);
            return Ok(DType::F32);
        }
        let d = dev(req, dtype)?;
        self.declare(name, d, shape, role);
        Ok(d)
    }

    /// [`Copier::copy`] of tensors that are complex64 when `complex`: the same view over their
    /// real views, i.e. every stride and offset doubled and a trailing (re, im) axis of stride 1.
    #[allow(clippy::too_many_arguments)]
    fn copy_t(
        &mut self,
        complex: bool,
        dst: (&str, DType),
        dst_base: i64,
        dst_strides: &[i64],
        src: (&str, DType),
        view: &View,
    ) {
        if !complex {
            return self.copy(dst, dst_base, dst_strides, src, view);
        }
        let mut v = view.clone();
        v.offset *= 2;
        v.strides.iter_mut().for_each(|s| *s *= 2);
        v.shape.push(2);
        v.strides.push(1);
        let mut ds: Vec<i64> = dst_strides.iter().map(|s| s * 2).collect();
        ds.push(1);
        self.copy(dst, dst_base * 2, &ds, src, &v);
    }

    fn finish(self) -> Lowered {
        Lowered::new(self.program)
    }
}

fn size(req: &LowerRequest<'_>, v: i64, what: &str) -> Result<usize, LowerError> {
    usize::try_from(v).map_err(|_| req.invalid(format!("{what} {v} is negative")))
}

/// Checks that the golden output agrees with the shape and dtype PyTorch's rules give.
fn check_output(req: &LowerRequest<'_>, name: &str, dtype: TorchDType, shape: &[usize]) -> Result<(), LowerError> {
    let m = req.tensor(name)?;
    if m.dtype != dtype || m.shape != shape {
        return Err(req.invalid(format!(
            "the op's semantics give {dtype} {shape:?} for `{name}`, the golden output is {} {:?}",
            m.dtype, m.shape
        )));
    }
    Ok(())
}

/// Whether `strides` are the contiguous strides of `shape` in PyTorch's sense (size-1 dims are
/// ignored; an empty tensor is contiguous).
pub fn is_contiguous(shape: &[usize], strides: &[i64]) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut expected = 1i64;
    for (&s, &st) in shape.iter().zip(strides).rev() {
        if s != 1 {
            if st != expected {
                return false;
            }
            expected *= s as i64;
        }
    }
    true
}

/// The view an op takes of its `self` input (every single-input, single-output op).
fn single_view(req: &LowerRequest<'_>, meta: &TensorMeta) -> Result<View, LowerError> {
    let s = &meta.shape;
    let nd = s.len();
    let mut v = View::contiguous(s);
    match req.op {
        "alias" => {}
        "view" => {
            let sizes = req.arg::<IntOrList>(1, "size")?.0;
            let numel: usize = s.iter().product();
            let mut infer = None;
            let mut known = 1usize;
            let mut shape = Vec::with_capacity(sizes.len());
            for (i, &d) in sizes.iter().enumerate() {
                if d == -1 {
                    if infer.replace(i).is_some() {
                        return Err(req.invalid("only one dimension can be inferred".into()));
                    }
                    shape.push(0);
                } else {
                    let d = size(req, d, "size")?;
                    known *= d;
                    shape.push(d);
                }
            }
            if let Some(i) = infer {
                if known == 0 || !numel.is_multiple_of(known) {
                    return Err(req.invalid(format!("shape {sizes:?} is invalid for input of size {numel}")));
                }
                shape[i] = numel / known;
            }
            if shape.iter().product::<usize>() != numel {
                return Err(req.invalid(format!("shape {sizes:?} is invalid for input of size {numel}")));
            }
            // The data is contiguous: a view is the same elements in the same order.
            v = View::contiguous(&shape);
        }
        "permute" => {
            let dims = req.opt::<IntOrList>(1, "dims")?.unwrap_or_default().0;
            if dims.len() != nd {
                return Err(req.invalid(format!("permute of a {nd}-d tensor by {dims:?}")));
            }
            let mut seen = vec![false; nd];
            let c = contig(s);
            let mut dims_out = Vec::new();
            for &d in &dims {
                let d = req.wrap_dim(1, "dims", d, nd)?;
                if std::mem::replace(&mut seen[d], true) {
                    return Err(req.invalid(format!("repeated dim in permute {dims:?}")));
                }
                dims_out.push((s[d], c[d]));
            }
            v = View::of(dims_out);
        }
        "expand" => {
            let sizes = req.opt::<IntOrList>(1, "size")?.unwrap_or_default().0;
            if sizes.len() < nd {
                return Err(req.invalid(format!("expand of a {nd}-d tensor to {sizes:?}")));
            }
            let lead = sizes.len() - nd;
            let c = contig(s);
            let mut dims_out = Vec::new();
            for (i, &want) in sizes.iter().enumerate() {
                if i < lead {
                    dims_out.push((size(req, want, "expanded size")?, 0));
                    continue;
                }
                let have = s[i - lead];
                if want == -1 || want as usize == have {
                    dims_out.push((have, c[i - lead]));
                } else if have == 1 {
                    dims_out.push((size(req, want, "expanded size")?, 0));
                } else {
                    return Err(req.invalid(format!("cannot expand {s:?} to {sizes:?}")));
                }
            }
            v = View::of(dims_out);
        }
        "squeeze.dim" | "squeeze.dims" => {
            let dims = if req.op == "squeeze.dim" {
                vec![req.arg::<IntOrBool>(1, "dim")?.0]
            } else {
                req.opt::<IntOrList>(1, "dim")?.unwrap_or_default().0
            };
            if nd > 0 {
                let mut drop = vec![false; nd];
                for d in dims {
                    let d = req.wrap_dim(1, "dim", d, nd)?;
                    drop[d] = s[d] == 1;
                }
                for d in (0..nd).rev() {
                    if drop[d] {
                        v.remove(d);
                    }
                }
            }
        }
        "unsqueeze" => {
            let dim = req.arg::<IntOrBool>(1, "dim")?.0;
            let d = req.wrap_dim(1, "dim", dim, nd + 1)?;
            v.shape.insert(d, 1);
            v.strides.insert(d, 1);
        }
        "select.int" => {
            let dim = req.arg::<IntOrBool>(1, "dim")?.0;
            let index = req.arg::<IntOrBool>(2, "index")?.0;
            if nd == 0 {
                return Err(req.invalid("select() cannot be applied to a 0-dim tensor".into()));
            }
            let d = req.wrap_dim(1, "dim", dim, nd)?;
            let n = s[d] as i64;
            let i = if index < 0 { index + n } else { index };
            if i < 0 || i >= n {
                return Err(req.invalid(format!("index {index} out of range for dim {d} of size {n}")));
            }
            v.offset += i * v.strides[d];
            v.remove(d);
        }
        "slice.Tensor" => {
            let dim = req.arg_or(1, "dim", IntOrBool(0))?.0;
            let start = req.opt::<IntOrBool>(2, "start")?.map(i64::from);
            let end = req.opt::<IntOrBool>(3, "end")?.map(i64::from);
            let step = req.arg_or(4, "step", IntOrBool(1))?.0;
            if nd == 0 {
                return Err(req.invalid("slice() cannot be applied to a 0-dim tensor".into()));
            }
            if step <= 0 {
                return Err(req.invalid(format!("slice step must be positive, got {step}")));
            }
            let d = req.wrap_dim(1, "dim", dim, nd)?;
            let (lo, len) = slice_range(s[d], start, end, step);
            v.offset += lo * v.strides[d];
            v.shape[d] = len;
            v.strides[d] *= step;
        }
        "diagonal" => {
            let offset = req.arg_or(1, "offset", IntOrBool(0))?.0;
            let d1 = req.dim_or(2, "dim1", IntOrBool(0), nd)?;
            let d2 = req.dim_or(3, "dim2", IntOrBool(1), nd)?;
            if nd < 2 || d1 == d2 {
                return Err(req.invalid(format!("diagonal dims {d1} and {d2} of a {nd}-d tensor")));
            }
            let (n1, n2) = (s[d1] as i64, s[d2] as i64);
            let (len, start) = if offset >= 0 {
                ((n2 - offset).min(n1).max(0), offset * v.strides[d2])
            } else {
                ((n1 + offset).min(n2).max(0), -offset * v.strides[d1])
            };
            let stride = v.strides[d1] + v.strides[d2];
            if len > 0 {
                v.offset += start;
            }
            let (hi, lo) = (d1.max(d2), d1.min(d2));
            v.remove(hi);
            v.remove(lo);
            v.shape.push(len as usize);
            v.strides.push(stride);
        }
        "flip" => {
            let dims = req.opt::<IntOrList>(1, "dims")?.unwrap_or_default().0;
            let mut flipped = vec![false; nd];
            for d in dims {
                let d = req.wrap_dim(1, "dims", d, nd)?;
                if std::mem::replace(&mut flipped[d], true) {
                    return Err(req.invalid(format!("dim {d} appears multiple times in flip")));
                }
            }
            for d in 0..nd {
                if flipped[d] && s[d] > 0 {
                    v.offset += (s[d] as i64 - 1) * v.strides[d];
                    v.strides[d] = -v.strides[d];
                }
            }
        }
        "as_strided" => {
            let sizes = req.opt::<IntOrList>(1, "size")?.unwrap_or_default().0;
            let strides = req.opt::<IntOrList>(2, "stride")?.unwrap_or_default().0;
            let offset = req.arg_or(3, "storage_offset", IntOrBool(0))?.0;
            if sizes.len() != strides.len() {
                return Err(req.invalid(format!(
                    "as_strided size {sizes:?} and stride {strides:?} differ in length"
                )));
            }
            // as_strided addresses the input's *storage*. The golden stores the input's
            // elements contiguously; they are its storage only when the input was contiguous
            // (the metadata loader records no storage offset: an offset-0 storage is assumed).
            if let Some(st) = &meta.strides
                && !is_contiguous(s, st)
            {
                return Err(req.unsupported(format!(
                    "as_strided of a non-contiguous input (strides {st:?}): its storage is not in the case"
                )));
            }
            let shape: Vec<usize> = sizes.iter().map(|&d| size(req, d, "size")).collect::<Result<_, _>>()?;
            if strides.iter().any(|&st| st < 0) || offset < 0 {
                return Err(req.invalid(format!(
                    "as_strided with negative strides {strides:?} or offset {offset}"
                )));
            }
            v = View { shape, strides, offset };
            if v.numel() > 0 {
                let last: i64 = offset
                    + v.shape
                        .iter()
                        .zip(&v.strides)
                        .map(|(&n, &st)| (n as i64 - 1) * st)
                        .sum::<i64>();
                let numel: usize = s.iter().product();
                if last >= numel as i64 {
                    return Err(req.unsupported(format!(
                        "as_strided reaches storage element {last}, beyond the input's {numel} elements"
                    )));
                }
            }
        }
        "repeat" => {
            let reps = req.opt::<IntOrList>(1, "repeats")?.unwrap_or_default().0;
            if reps.len() < nd {
                return Err(req.invalid(format!("repeat of a {nd}-d tensor by {reps:?}")));
            }
            let mut padded = vec![1usize; reps.len() - nd];
            padded.extend_from_slice(s);
            let c = contig(&padded);
            // Output dim i (size rᵢ·sᵢ) is split into [rᵢ (source stride 0), sᵢ (stride cᵢ)].
            let mut dims_out = Vec::new();
            for (i, &r) in reps.iter().enumerate() {
                dims_out.push((size(req, r, "repeat count")?, 0));
                dims_out.push((padded[i], c[i]));
            }
            v = View::of(dims_out);
        }
        other => return Err(LowerError::NotLowered(other.to_string())),
    }
    Ok(v)
}

/// PyTorch's slice bounds: `(start, length)` of `[start:end:step]` on a dim of size `n`.
fn slice_range(n: usize, start: Option<i64>, end: Option<i64>, step: i64) -> (i64, usize) {
    let n = n as i64;
    let mut lo = start.unwrap_or(0);
    let mut hi = end.unwrap_or(i64::MAX);
    if lo < 0 {
        lo += n;
    }
    if hi < 0 {
        hi += n;
    }
    lo = lo.clamp(0, n);
    hi = hi.clamp(lo, n);
    (lo, ((hi - lo + step - 1) / step) as usize)
}

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    match req.op {
        "cat" => lower_cat(req, target),
        "split_with_sizes" => lower_split(req, target),
        _ => lower_single(req, target),
    }
}

fn lower_single(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (in_name, meta) = req.arg::<TensorArg>(0, "self")?;
    let view = single_view(req, meta)?;
    // `repeat`'s view has two dims per output dim; the output shape merges them.
    let out_shape: Vec<usize> = if req.op == "repeat" {
        view.shape.chunks(2).map(|p| p[0] * p[1]).collect()
    } else {
        view.shape.clone()
    };
    let out_name = req.output_tensor(0)?;
    check_output(req, out_name, meta.dtype, &out_shape)?;
    let cx = meta.dtype.is_complex();
    let mut c = Copier::new(target);
    let dt = c.declare_t(req, in_name, meta.dtype, &meta.shape, HbmRole::Input)?;
    c.declare_t(req, out_name, meta.dtype, &out_shape, HbmRole::Output)?;
    let dst_strides = if req.op == "repeat" {
        let oc = contig(&out_shape);
        oc.iter()
            .zip(view.shape.chunks(2))
            .flat_map(|(&o, p)| [o * p[1] as i64, o])
            .collect()
    } else {
        contig(&view.shape)
    };
    c.copy_t(cx, (out_name, dt), 0, &dst_strides, (in_name, dt), &view);
    Ok(c.finish())
}

fn lower_split(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (in_name, meta) = req.arg::<TensorArg>(0, "self")?;
    let sizes = req.arg::<IntOrList>(1, "split_sizes")?.0;
    let dim = req.arg_or(2, "dim", IntOrBool(0))?.0;
    let s = &meta.shape;
    if s.is_empty() {
        return Err(req.invalid("split of a 0-dim tensor".into()));
    }
    let d = req.wrap_dim(2, "dim", dim, s.len())?;
    let sizes: Vec<usize> = sizes
        .iter()
        .map(|&n| size(req, n, "split size"))
        .collect::<Result<_, _>>()?;
    if sizes.iter().sum::<usize>() != s[d] {
        return Err(req.invalid(format!("split sizes {sizes:?} do not sum to dim {d} of size {}", s[d])));
    }
    let outs: Vec<&str> = match req.outputs.first() {
        Some(super::OutputSlot::Tensors(names)) => names
            .iter()
            .map(|n| n.as_deref().ok_or_else(|| req.invalid("a split output is None".into())))
            .collect::<Result<_, _>>()?,
        other => return Err(req.invalid(format!("output 0 is {other:?}, expected a tensor list"))),
    };
    if outs.len() != sizes.len() {
        return Err(req.invalid(format!("{} outputs for {} split sizes", outs.len(), sizes.len())));
    }
    let cx = meta.dtype.is_complex();
    let mut c = Copier::new(target);
    let dt = c.declare_t(req, in_name, meta.dtype, s, HbmRole::Input)?;
    let mut start = 0usize;
    for (&out, &n) in outs.iter().zip(&sizes) {
        let mut view = View::contiguous(s);
        view.offset = start as i64 * view.strides[d];
        view.shape[d] = n;
        check_output(req, out, meta.dtype, &view.shape)?;
        c.declare_t(req, out, meta.dtype, &view.shape, HbmRole::Output)?;
        let dst = contig(&view.shape);
        c.copy_t(cx, (out, dt), 0, &dst, (in_name, dt), &view);
        start += n;
    }
    Ok(c.finish())
}

fn lower_cat(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let names: Vec<&str> = req
        .arg::<&[Option<String>]>(0, "tensors")?
        .iter()
        .map(|n| {
            n.as_deref()
                .ok_or_else(|| req.arg_error(0, "tensors", "a cat input is None"))
        })
        .collect::<Result<_, _>>()?;
    if names.is_empty() {
        return Err(req.invalid("cat of no tensors".into()));
    }
    let metas: Vec<&TensorMeta> = names.iter().map(|n| req.tensor(n)).collect::<Result<_, _>>()?;
    let dim = req.arg_or(1, "dim", IntOrBool(0))?.0;
    let mut out_dtype = metas[0].dtype;
    for m in &metas[1..] {
        out_dtype = promote::promote_types(out_dtype, m.dtype).map_err(|e| req.unsupported(e.to_string()))?;
    }
    // PyTorch skips 1-d empty inputs (legacy behaviour); the others fix the shape.
    let skipped = |m: &TensorMeta| m.shape == [0];
    let Some(first) = metas.iter().find(|m| !skipped(m)) else {
        let out_name = req.output_tensor(0)?;
        check_output(req, out_name, out_dtype, &[0])?;
        let mut c = Copier::new(target);
        c.declare_t(req, out_name, out_dtype, &[0], HbmRole::Output)?;
        return Ok(c.finish());
    };
    let nd = first.shape.len();
    if nd == 0 {
        return Err(req.invalid("zero-dimensional tensor cannot be concatenated".into()));
    }
    let d = req.wrap_dim(1, "dim", dim, nd)?;
    let mut out_shape = first.shape.clone();
    out_shape[d] = 0;
    for m in metas.iter().filter(|m| !skipped(m)) {
        let same = m.shape.len() == nd && (0..nd).all(|i| i == d || m.shape[i] == first.shape[i]);
        if !same {
            return Err(req.invalid(format!("cat of {:?} and {:?} along dim {d}", first.shape, m.shape)));
        }
        out_shape[d] += m.shape[d];
    }
    let out_name = req.output_tensor(0)?;
    check_output(req, out_name, out_dtype, &out_shape)?;
    let cx = out_dtype.is_complex();
    if cx && metas.iter().any(|m| !m.dtype.is_complex()) {
        // A real input would need its imaginary part made (zeros): not a plain move.
        return Err(req.unsupported("cat of real and complex tensors".into()));
    }
    let mut c = Copier::new(target);
    let out_dt = c.declare_t(req, out_name, out_dtype, &out_shape, HbmRole::Output)?;
    let oc = contig(&out_shape);
    let mut at = 0usize;
    for (name, m) in names.iter().zip(&metas) {
        let in_dt = c.declare_t(req, name, m.dtype, &m.shape, HbmRole::Input)?;
        if skipped(m) {
            continue;
        }
        c.copy_t(
            cx,
            (out_name, out_dt),
            at as i64 * oc[d],
            &oc,
            (name, in_dt),
            &View::contiguous(&m.shape),
        );
        at += m.shape[d];
    }
    Ok(c.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Value;
    use std::collections::BTreeMap;
    use trnsim::{Executor, HostTensor, Op};

    /// Lowers `op(input.0 of shape, args…)` with an i32 input `0..n`, checks every DMA pattern
    /// against the access-pattern limits, runs it, and returns the output values.
    fn run(op: &'static str, shape: &[usize], args: Vec<Value>, out_shape: &[usize]) -> (Vec<i32>, usize) {
        let meta = |s: &[usize]| TensorMeta::contiguous(TorchDType::I32, s);
        let tensors: BTreeMap<String, TensorMeta> = [
            ("input.0".to_string(), meta(shape)),
            ("output.0".to_string(), meta(out_shape)),
        ]
        .into();
        let mut all = vec![Value::Tensor("input.0".into())];
        all.extend(args);
        let input = crate::LowerInput::positional(op, all, &tensors);
        let req = input.request();
        let l = lower(&req, TargetName::Trn1).expect("lowers");
        for i in &l.program.instructions {
            let Op::DmaCopy(d) = &i.op else {
                panic!("only DMAs: {:?}", i.op)
            };
            for ap in [&d.src, &d.dst] {
                assert!(ap.partitions <= 128 && ap.free.len() <= 4, "{ap:?}");
                assert!(ap.free.iter().all(|f| (0..=65535).contains(&f[1])), "{ap:?}");
            }
        }
        let n: usize = shape.iter().product();
        let data = (0..n as i32).flat_map(|v| v.to_le_bytes()).collect();
        let inputs = [(
            "input.0".to_string(),
            HostTensor {
                dtype: DType::I32,
                shape: shape.to_vec(),
                data,
            },
        )]
        .into();
        let out = Executor::new(TargetName::Trn1)
            .run(&l.program, &inputs)
            .expect("runs")
            .outputs;
        let vals = out["output.0"]
            .data
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        (vals, l.program.instructions.len())
    }

    #[test]
    fn large_views_are_split_into_legal_dmas() {
        // flip of a row longer than 65535 elements: negative steps, several DMAs.
        let (v, dmas) = run("flip", &[3, 140_000], vec![Value::Ints(vec![0, 1])], &[3, 140_000]);
        assert!(dmas > 1);
        assert!(v.iter().enumerate().all(|(i, &x)| x as usize == 3 * 140_000 - 1 - i));
        // expand: stride-0 broadcast of a column over 70000 elements.
        let (v, _) = run(
            "expand",
            &[200, 1],
            vec![Value::Ints(vec![200, 70_000])],
            &[200, 70_000],
        );
        assert!(v.iter().enumerate().all(|(i, &x)| x as usize == i / 70_000));
        // permute (transpose) with more than 128 rows on both sides.
        let (v, _) = run("permute", &[300, 500], vec![Value::Ints(vec![1, 0])], &[500, 300]);
        assert!(
            v.iter()
                .enumerate()
                .all(|(i, &x)| x as usize == (i % 300) * 500 + i / 300)
        );
    }

    #[test]
    fn slice_bounds_follow_pytorch() {
        assert_eq!(slice_range(6, Some(1), Some(5), 2), (1, 2));
        assert_eq!(slice_range(6, None, None, 1), (0, 6));
        assert_eq!(slice_range(6, Some(-3), Some(100), 1), (3, 3));
        assert_eq!(slice_range(4, Some(2), Some(2), 1), (2, 0));
        assert_eq!(slice_range(1000, Some(129), Some(1000), 2), (129, 436));
        assert_eq!(slice_range(5, Some(4), Some(1), 1), (4, 0));
    }

    #[test]
    fn contiguity_ignores_size_one_dims() {
        assert!(is_contiguous(&[3, 4], &[4, 1]));
        assert!(!is_contiguous(&[3, 4], &[1, 3]));
        assert!(is_contiguous(&[4, 1], &[1, 1]));
        assert!(is_contiguous(&[0, 4], &[7, 9]));
        assert!(is_contiguous(&[], &[]));
        assert!(!is_contiguous(&[3, 4], &[8, 2]));
    }
}
