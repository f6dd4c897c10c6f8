//! Padding: `constant_pad_nd`, `reflection_pad{1,2,3}d`, `replication_pad{2,3}d`.
//!
//! Layout: the dims before the first padded dim are flattened onto SBUF partitions (tiles of
//! ≤128 rows); the padded dims (plus the trailing unpadded dims merged into one) form the free
//! "plane". Per row tile: one DMA loads the input planes, then for every block of the output
//! plane where each dim's index map is affine (PyTorch's map: `o − lo` for the interior, a
//! negative step for reflection borders, step 0 for replication borders) one VectorE
//! `tensor_copy` with that access pattern (negative / zero steps) moves the elements; constant
//! padding first `memset`s the whole output tile to the value. One DMA stores the tile.

use super::binary::dev;
use super::tile;
use super::tile::{Emitter, SbufAllocator, ts, tt};
use super::{LowerError, LowerRequest, Lowered};
use crate::call::{Complex, TensorArg, TensorMeta};
use trnsim::{AccessPattern, DType, Engine, HbmRole, Op, Program, TargetName};

/// Largest plane (elements per partition) handled in one tile.
const MAX_PLANE: usize = 16384;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Constant(f64),
    Reflect,
    Replicate,
}

/// A run of output indices `[out_start, out_start+len)` of one dim whose input index is
/// `src.0 + k·src.1` (or the fill value when `src` is `None`).
#[derive(Clone, Copy, Debug)]
struct Seg {
    out_start: i64,
    len: i64,
    src: Option<(i64, i64)>,
}

fn map_index(mode: Mode, o: i64, lo: i64, w: i64) -> Option<i64> {
    let i = o - lo;
    match mode {
        Mode::Constant(_) => (0..w).contains(&i).then_some(i),
        Mode::Replicate => (w > 0).then(|| i.clamp(0, w - 1)),
        Mode::Reflect => {
            if w <= 0 {
                return None;
            }
            if w == 1 {
                return Some(0);
            }
            let mut i = i;
            if i < 0 {
                i = -i;
            }
            if i >= w {
                i = 2 * (w - 1) - i;
            }
            (0..w).contains(&i).then_some(i)
        }
    }
}

/// Maximal affine runs of the index map of one dim.
fn segments(mode: Mode, out: i64, lo: i64, w: i64) -> Vec<Seg> {
    let mut segs: Vec<Seg> = Vec::new();
    let mut prev: Option<i64> = None;
    for o in 0..out {
        let m = map_index(mode, o, lo, w);
        let extend = match (segs.last_mut(), m) {
            (Some(s), None) if s.src.is_none() => {
                s.len += 1;
                true
            }
            (Some(s), Some(mi)) if s.src.is_some() => {
                let (start, step) = s.src.unwrap();
                let p = prev.unwrap();
                if s.len == 1 {
                    s.src = Some((start, mi - p));
                    s.len += 1;
                    true
                } else if mi - p == step {
                    s.len += 1;
                    true
                } else {
                    false
                }
            }
            _ => false,
        };
        if !extend {
            segs.push(Seg {
                out_start: o,
                len: 1,
                src: m.map(|s| (s, 0)),
            });
        }
        prev = m;
    }
    segs
}

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (in_name, in_meta) = req.arg::<TensorArg>(0, "self")?;
    let (mode, pad) = match req.op {
        "constant_pad_nd" => {
            // A complex fill: the real part here, the imaginary part below.
            let Complex(v, _) = req.arg_or(2, "value", Complex(0.0, 0.0))?;
            (Mode::Constant(v), req.arg::<Vec<i64>>(1, "pad")?)
        }
        "reflection_pad1d" | "reflection_pad2d" | "reflection_pad3d" => {
            (Mode::Reflect, req.arg::<Vec<i64>>(1, "padding")?)
        }
        "replication_pad1d" | "replication_pad2d" | "replication_pad3d" => {
            (Mode::Replicate, req.arg::<Vec<i64>>(1, "padding")?)
        }
        other => return Err(LowerError::NotLowered(other.to_string())),
    };
    let out_name = req.output_tensor(0)?;
    let out_meta = req.tensor(out_name)?;
    if in_meta.dtype != out_meta.dtype {
        return Err(req.invalid("output dtype differs from input".into()));
    }
    let nd = in_meta.shape.len();
    if pad.len() % 2 != 0 || pad.len() / 2 > nd {
        return Err(req.invalid(format!("padding {pad:?} for a {nd}-d input")));
    }
    // complex64 is padded as its F32 real view `[..., 2]` (lower/mod.rs): the (re, im) axis is
    // one more unpadded last dim, and a fill of im ≠ 0 is a second memset on the odd elements.
    let (d, in_shape, out_shape, pad, fill_im) = match (in_meta.dtype.is_complex(), mode) {
        (true, Mode::Constant(_)) => {
            let Complex(_, im) = req.arg_or(2, "value", Complex(0.0, 0.0))?;
            let pad: Vec<i64> = [0, 0].into_iter().chain(pad).collect();
            let view = super::complex_real_view_shape;
            (DType::F32, view(&in_meta.shape), view(&out_meta.shape), pad, im)
        }
        (true, _) => return Err(req.unsupported(format!("{} has no device dtype", in_meta.dtype))),
        (false, _) => (
            dev(req, in_meta.dtype)?,
            in_meta.shape.clone(),
            out_meta.shape.clone(),
            pad,
            0.0,
        ),
    };
    let nd = in_shape.len();
    let mut lo = vec![0i64; nd];
    let mut hi = vec![0i64; nd];
    for j in 0..pad.len() / 2 {
        lo[nd - 1 - j] = pad[2 * j];
        hi[nd - 1 - j] = pad[2 * j + 1];
    }
    let ishape: Vec<i64> = in_shape.iter().map(|&s| s as i64).collect();
    let oshape: Vec<i64> = (0..nd).map(|i| ishape[i] + lo[i] + hi[i]).collect();
    if oshape.iter().map(|&s| s as usize).collect::<Vec<_>>() != out_shape {
        return Err(req.invalid(format!("output shape {:?}, expected {oshape:?}", out_meta.shape)));
    }

    let mut program = Program::new(target);
    program.declare(in_name, d, &in_shape, HbmRole::Input);
    program.declare(out_name, d, &out_shape, HbmRole::Output);
    let out_numel: i64 = oshape.iter().product();
    if out_numel == 0 {
        return Ok(Lowered::new(program));
    }

    // Plane: from the first padded dim on (at least the last dim).
    let padded: Vec<usize> = (0..nd).filter(|&i| lo[i] != 0 || hi[i] != 0).collect();
    let (first, last) = match (padded.first(), padded.last()) {
        (Some(&f), Some(&l)) => (f, l),
        _ => (nd.saturating_sub(1), nd.saturating_sub(1)),
    };
    let rows: i64 = ishape[..first].iter().product();
    // Plane dims: (in size, out size, lo, mode-mapped).
    let mut pdims: Vec<(i64, i64, i64, bool)> = Vec::new();
    for i in first..=last.min(nd.saturating_sub(1)) {
        if nd == 0 {
            break;
        }
        pdims.push((ishape[i], oshape[i], lo[i], true));
    }
    if last + 1 < nd {
        let t: i64 = ishape[last + 1..].iter().product();
        pdims.push((t, t, 0, false));
    }
    if pdims.is_empty() {
        pdims.push((1, 1, 0, false));
    }
    if pdims.len() > 4 {
        return Err(req.unsupported(format!("{} plane dims (access patterns have 4)", pdims.len())));
    }
    let plane_in: i64 = pdims.iter().map(|p| p.0).product();
    let plane_out: i64 = pdims.iter().map(|p| p.1).product();
    if plane_in as usize > MAX_PLANE || plane_out as usize > MAX_PLANE {
        return Err(req.unsupported(format!("plane of {plane_in}→{plane_out} elements exceeds {MAX_PLANE}")));
    }
    // Contiguous strides within the planes.
    let stride = |sizes: Vec<i64>| {
        let mut s = vec![1i64; sizes.len()];
        for i in (0..sizes.len().saturating_sub(1)).rev() {
            s[i] = s[i + 1] * sizes[i + 1];
        }
        s
    };
    let in_str = stride(pdims.iter().map(|p| p.0).collect());
    let out_str = stride(pdims.iter().map(|p| p.1).collect());
    let segs: Vec<Vec<Seg>> = pdims
        .iter()
        .map(|&(w, o, l, mapped)| {
            if mapped {
                segments(mode, o, l, w)
            } else {
                vec![Seg {
                    out_start: 0,
                    len: o,
                    src: Some((0, 1)),
                }]
            }
        })
        .collect();
    // Cartesian product of segments → blocks.
    let mut blocks: Vec<Vec<Seg>> = vec![vec![]];
    for s in &segs {
        let mut next = Vec::new();
        for b in &blocks {
            for seg in s {
                let mut nb = b.clone();
                nb.push(*seg);
                next.push(nb);
            }
        }
        blocks = next;
    }
    let copies: Vec<Vec<Seg>> = blocks
        .into_iter()
        .filter(|b| b.iter().all(|s| s.src.is_some() && s.len > 0))
        .collect();

    let tgt = target.params();
    let mut alloc = SbufAllocator::new(&tgt);
    let size = d.size();
    let in_off = alloc.alloc(plane_in.max(1) as usize * size)?;
    let out_off = alloc.alloc(plane_out as usize * size)?;
    let mut e = Emitter::new(program);
    let parts = tgt.partitions as i64;
    e.row_tiles(rows, parts, |e, r0, p| {
        if !copies.is_empty() && plane_in > 0 {
            e.load_planes(
                (in_name, d, plane_in),
                r0,
                AccessPattern::sbuf(d, 0, p, in_off, vec![[1, plane_in]]),
            );
        }
        if let Mode::Constant(v) = mode {
            let dst = AccessPattern::sbuf(d, 0, p, out_off, vec![[1, plane_out]]);
            e.push(Engine::Vector, tile::memset(dst, v));
            if fill_im != 0.0 {
                let odd = AccessPattern::sbuf(d, 0, p, out_off + size as u64, vec![[2, plane_out / 2]]);
                e.memset(Engine::Vector, odd, fill_im);
            }
        }
        for b in &copies {
            let mut dst_off = 0i64;
            let mut src_off = 0i64;
            let mut dfree = Vec::new();
            let mut sfree = Vec::new();
            for (k, s) in b.iter().enumerate() {
                let (start, step) = s.src.unwrap();
                dst_off += s.out_start * out_str[k];
                src_off += start * in_str[k];
                dfree.push([out_str[k], s.len]);
                sfree.push([step * in_str[k], s.len]);
            }
            let dst = AccessPattern::sbuf(d, 0, p, out_off + (dst_off as u64) * size as u64, dfree);
            let src = AccessPattern::sbuf(d, 0, p, in_off + (src_off as u64) * size as u64, sfree);
            e.push(Engine::Vector, tile::copy(dst, src));
        }
        let src = AccessPattern::sbuf(d, 0, p, out_off, vec![[1, plane_out]]);
        e.store_planes((out_name, d, plane_out), r0, src);
    });
    Ok(Lowered::new(e.finish()))
}

// ---------------------------------------------------------------------------------------------
// upsample_nearest2d.vec

/// PyTorch's `compute_scales_value<float>`: `1/scale` when a scale factor is given, else
/// `in/out`, in fp32.
fn nearest_scale(scale: Option<f64>, input: i64, output: i64) -> f32 {
    match scale {
        Some(s) if s > 0.0 => (1.0 / s) as f32,
        _ => input as f32 / output as f32,
    }
}

/// PyTorch's `nearest_idx` (CPU): identity, `o >> 1` for exact 2×, else
/// `min(floorf(o · scale), in − 1)` in fp32.
fn nearest_map(input: i64, output: i64, scale: Option<f64>) -> Vec<i64> {
    (0..output)
        .map(|o| {
            if output == input {
                o
            } else if output == 2 * input {
                o >> 1
            } else {
                let s = nearest_scale(scale, input, output);
                ((o as f32 * s).floor() as i64).min(input - 1)
            }
        })
        .collect()
}

/// Maximal affine runs of `v`: (first position, length, first value, step).
fn affine_runs(v: &[i64]) -> Vec<(i64, i64, i64, i64)> {
    let mut runs: Vec<(i64, i64, i64, i64)> = Vec::new();
    for (i, &x) in v.iter().enumerate() {
        if let Some(r) = runs.last_mut() {
            let prev = v[i - 1];
            if r.1 == 1 || x - prev == r.3 {
                r.3 = x - prev;
                r.1 += 1;
                continue;
            }
        }
        runs.push((i as i64, 1, x, 0));
    }
    runs
}

/// An upsampling's `scale_factors` argument at `index`: two optional factors (H, W).
fn scale_factors(req: &LowerRequest<'_>, index: usize) -> Result<Vec<Option<f64>>, LowerError> {
    match req.opt::<Vec<f64>>(index, "scale_factors")? {
        Some(f) if f.len() == 2 => Ok(f.into_iter().map(Some).collect()),
        None => Ok(vec![None, None]),
        Some(f) => Err(req.unsupported(format!("scale_factors {f:?}"))),
    }
}

/// The planes of a 4-d upsampling: `rows` = N·C planes of `h×w` in and `oh×ow` out, dtype `d`.
struct Planes {
    d: DType,
    h: i64,
    w: i64,
    oh: i64,
    ow: i64,
    rows: i64,
}

/// Checks an upsampling's 4-d input and output (floating point only when `float_only`) and
/// declares them in `program`; `None` when the output is empty (the program is then complete).
/// A plane (input, half-done or output) over `max_plane` elements is unsupported.
fn upsample_planes(
    req: &LowerRequest<'_>,
    program: &mut Program,
    (in_name, in_meta): (&str, &TensorMeta),
    (out_name, out_meta): (&str, &TensorMeta),
    float_only: bool,
    max_plane: usize,
) -> Result<Option<Planes>, LowerError> {
    if in_meta.dtype != out_meta.dtype
        || (float_only && !in_meta.dtype.is_float())
        || in_meta.dtype.is_complex()
        || in_meta.shape.len() != 4
    {
        return Err(req.unsupported(format!("{} {:?}", in_meta.dtype, in_meta.shape)));
    }
    let d = dev(req, in_meta.dtype)?;
    let (h, w) = (in_meta.shape[2] as i64, in_meta.shape[3] as i64);
    let (oh, ow) = (out_meta.shape[2] as i64, out_meta.shape[3] as i64);
    let rows = (in_meta.shape[0] * in_meta.shape[1]) as i64;
    program.declare(in_name, d, &in_meta.shape, HbmRole::Input);
    program.declare(out_name, d, &out_meta.shape, HbmRole::Output);
    if rows == 0 || oh == 0 || ow == 0 {
        return Ok(None);
    }
    let max = max_plane as i64;
    if h * w > max || h * ow > max || oh * ow > max {
        return Err(req.unsupported("plane exceeds the SBUF budget".into()));
    }
    Ok(Some(Planes { d, h, w, oh, ow, rows }))
}

/// Nearest upsampling as two separable gathers of whole columns then whole rows: the index maps
/// depend only on the shapes and scales, so each affine run of a map is one VectorE
/// `tensor_copy` whose access pattern repeats (step 0) or strides over the source.
pub fn lower_upsample_nearest(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (in_name, in_meta) = req.arg::<TensorArg>(0, "input")?;
    let out_name = req.output_tensor(0)?;
    let out_meta = req.tensor(out_name)?;
    let scales = scale_factors(req, 2)?;
    let mut program = Program::new(target);
    let Some(Planes { d, h, w, oh, ow, rows }) = upsample_planes(
        req,
        &mut program,
        (in_name, in_meta),
        (out_name, out_meta),
        false,
        MAX_PLANE,
    )?
    else {
        return Ok(Lowered::new(program));
    };
    let hmap = nearest_map(h, oh, scales[0]);
    let wmap = nearest_map(w, ow, scales[1]);
    let tgt = target.params();
    let mut alloc = SbufAllocator::new(&tgt);
    let size = d.size() as u64;
    let x_off = alloc.alloc((h * w) as usize * size as usize)?;
    let t_off = alloc.alloc((h * ow) as usize * size as usize)?;
    let y_off = alloc.alloc((oh * ow) as usize * size as usize)?;
    let mut e = Emitter::new(program);
    let parts = tgt.partitions as i64;
    e.row_tiles(rows, parts, |e, r0, p| {
        let x = AccessPattern::sbuf(d, 0, p, x_off, vec![[1, h * w]]);
        e.load_planes((in_name, d, h * w), r0, x);
        // Columns: T[:, :, o] = X[:, :, wmap[o]].
        for (o0, len, i0, step) in affine_runs(&wmap) {
            let dst = AccessPattern::sbuf(d, 0, p, t_off + o0 as u64 * size, vec![[ow, h], [1, len]]);
            let src = AccessPattern::sbuf(d, 0, p, x_off + i0 as u64 * size, vec![[w, h], [step, len]]);
            e.push(Engine::Vector, tile::copy(dst, src));
        }
        // Rows: Y[:, o, :] = T[:, hmap[o], :].
        for (o0, len, i0, step) in affine_runs(&hmap) {
            let dst = AccessPattern::sbuf(d, 0, p, y_off + (o0 * ow) as u64 * size, vec![[ow, len], [1, ow]]);
            let src = AccessPattern::sbuf(
                d,
                0,
                p,
                t_off + (i0 * ow) as u64 * size,
                vec![[step * ow, len], [1, ow]],
            );
            e.push(Engine::Vector, tile::copy(dst, src));
        }
        e.store_planes(
            (out_name, d, oh * ow),
            r0,
            AccessPattern::sbuf(d, 0, p, y_off, vec![[1, oh * ow]]),
        );
    });
    Ok(Lowered::new(e.finish()))
}

// ---------------------------------------------------------------------------------------------
// upsample_bilinear2d.vec

/// PyTorch's `compute_indices_weights_linear` for one dim (fp32 opmath): source index
/// `align_corners ? scale·o : max(scale·(o + 0.5) − 0.5, 0)`, `i0 = ⌊real⌋`, `λ1 = min(real − i0,
/// 1)` stored in the tensor's dtype, `λ0 = 1 − λ1` from that stored value (also stored),
/// `i1 = i0 + (i0 < in − 1)`.
fn linear_weights(
    input: i64,
    output: i64,
    align: bool,
    scale: Option<f64>,
    wd: trnsim::DType,
) -> Vec<(i64, i64, f32, f32)> {
    let s: f32 = if align {
        if output > 1 {
            (input - 1) as f32 / (output - 1) as f32
        } else {
            0.0
        }
    } else {
        match scale {
            Some(sc) if sc > 0.0 => (1.0 / sc) as f32,
            _ => input as f32 / output as f32,
        }
    };
    let round = |x: f32| {
        let mut r = trnsim::Rounding::NearestEven;
        wd.decode_f32(wd.encode_f32(x, &mut r))
    };
    (0..output)
        .map(|o| {
            let real = if align {
                s * o as f32
            } else {
                (s * (o as f32 + 0.5) - 0.5).max(0.0)
            };
            let i0 = real as i64;
            // λ1 is stored in the tensor's dtype first and λ0 is derived from the *stored* λ1
            // (`lambda0 = scalar_t(1) − lambda1` in compute_source_index_and_lambda): for bf16
            // that differs from rounding an fp32 `1 − λ1` (upsample_bilinear2d bf16 stress_0).
            let l1 = round((real - i0 as f32).min(1.0));
            let l0 = round(1.0 - l1);
            let i1 = i0 + if i0 < input - 1 { 1 } else { 0 };
            (i0, i1, l0, l1)
        })
        .collect()
}

/// Bilinear upsampling as two separable passes (PyTorch's evaluation order: `out = t(h0)·wh0 +
/// t(h1)·wh1` with `t(h) = x(h, w0)·ww0 + x(h, w1)·ww1`, fp32): per output column a VectorE
/// multiply and a `scalar_tensor_tensor` multiply-add over whole columns, then the same per
/// output row. Indices and weights depend only on shapes and arguments.
pub fn lower_upsample_bilinear(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    use trnsim::{AluOp, DType, ScalarOperand, ScalarTensorTensor};
    let (in_name, in_meta) = req.arg::<TensorArg>(0, "input")?;
    let out_name = req.output_tensor(0)?;
    let out_meta = req.tensor(out_name)?;
    let align = req.arg::<bool>(2, "align_corners")?;
    let scales = scale_factors(req, 3)?;
    let mut program = Program::new(target);
    let Some(Planes { d, h, w, oh, ow, rows }) =
        upsample_planes(req, &mut program, (in_name, in_meta), (out_name, out_meta), true, 8192)?
    else {
        return Ok(Lowered::new(program));
    };
    let hw = linear_weights(h, oh, align, scales[0], d);
    let ww = linear_weights(w, ow, align, scales[1], d);
    let tgt = target.params();
    let mut alloc = SbufAllocator::new(&tgt);
    let x_off = alloc.alloc((h * w) as usize * 4)?;
    let t_off = alloc.alloc((h * ow) as usize * 4)?;
    let y_off = alloc.alloc((oh * ow) as usize * 4)?;
    let z_off = alloc.alloc((oh * ow) as usize * d.size())?;
    let f = DType::F32;
    let mul = |dst: AccessPattern, src: AccessPattern, wgt: f32| {
        ts(dst, src, AluOp::Multiply, ScalarOperand::Imm(wgt as f64), None)
    };
    let fma = |dst: AccessPattern, src: AccessPattern, wgt: f32, acc: AccessPattern| {
        Op::ScalarTensorTensor(ScalarTensorTensor {
            dst,
            src,
            op0: AluOp::Multiply,
            operand0: ScalarOperand::Imm(wgt as f64),
            op1: AluOp::Add,
            in1: acc,
            reverse0: false,
            reverse1: false,
        })
    };
    let mut e = Emitter::new(program);
    let parts = tgt.partitions as i64;
    e.row_tiles(rows, parts, |e, r0, p| {
        let x = AccessPattern::sbuf(f, 0, p, x_off, vec![[1, h * w]]);
        e.load_planes((in_name, d, h * w), r0, x);
        for (o, &(i0, i1, l0, l1)) in ww.iter().enumerate() {
            let t = AccessPattern::sbuf(f, 0, p, t_off + o as u64 * 4, vec![[ow, h]]);
            let x0 = AccessPattern::sbuf(f, 0, p, x_off + i0 as u64 * 4, vec![[w, h]]);
            let x1 = AccessPattern::sbuf(f, 0, p, x_off + i1 as u64 * 4, vec![[w, h]]);
            e.push(Engine::Vector, mul(t.clone(), x0, l0));
            e.push(Engine::Vector, fma(t.clone(), x1, l1, t));
        }
        for (o, &(i0, i1, l0, l1)) in hw.iter().enumerate() {
            let y = AccessPattern::sbuf(f, 0, p, y_off + (o as i64 * ow) as u64 * 4, vec![[1, ow]]);
            let t0 = AccessPattern::sbuf(f, 0, p, t_off + (i0 * ow) as u64 * 4, vec![[1, ow]]);
            let t1 = AccessPattern::sbuf(f, 0, p, t_off + (i1 * ow) as u64 * 4, vec![[1, ow]]);
            e.push(Engine::Vector, mul(y.clone(), t0, l0));
            e.push(Engine::Vector, fma(y.clone(), t1, l1, y));
        }
        let z = AccessPattern::sbuf(d, 0, p, z_off, vec![[1, oh * ow]]);
        let y = AccessPattern::sbuf(f, 0, p, y_off, vec![[1, oh * ow]]);
        e.tensor_copy(Engine::Vector, z.clone(), y);
        e.store_planes((out_name, d, oh * ow), r0, z);
    });
    Ok(Lowered::new(e.finish()))
}

// ---------------------------------------------------------------------------------------------
// col2im

/// `col2im`: `out[c, h, w] += col[c·K + k, l]` for each kernel offset `k = (ki, kj)` and block
/// `l = (bh, bw)` with `h = bh·sH − pH + ki·dH`, `w = bw·sW − pW + kj·dW` (in bounds), in
/// PyTorch's order (kernel offsets outer). (N·C) rows sit on partitions; each kernel offset is
/// one VectorE `tensor_tensor` add of the clipped block grid (a strided view of the output
/// tile) — positions within one offset never collide. The accumulator has the tensor's dtype
/// (PyTorch accumulates in scalar_t), fp32 for f32.
pub fn lower_col2im(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    use trnsim::{AluOp, DType};
    let (in_name, in_meta) = req.arg::<TensorArg>(0, "self")?;
    let out_name = req.output_tensor(0)?;
    let out_meta = req.tensor(out_name)?;
    let two = |pos: usize, name: &str| req.ints_n(pos, name, 2).map(|v| [v[0], v[1]]);
    let osz = two(1, "output_size")?;
    let ker = two(2, "kernel_size")?;
    let dil = two(3, "dilation")?;
    let pad = two(4, "padding")?;
    let st = two(5, "stride")?;
    if in_meta.dtype != out_meta.dtype || !in_meta.dtype.is_float() || in_meta.dtype.is_complex() {
        return Err(req.unsupported(format!("{}", in_meta.dtype)));
    }
    let d = dev(req, in_meta.dtype)?;
    let nd = out_meta.shape.len();
    if nd < 3 {
        return Err(req.invalid("output rank".into()));
    }
    let (h, w) = (osz[0], osz[1]);
    let rows: i64 = out_meta.shape[..nd - 2].iter().map(|&s| s as i64).product();
    let kk = ker[0] * ker[1];
    let bh = (h + 2 * pad[0] - dil[0] * (ker[0] - 1) - 1) / st[0] + 1;
    let bw = (w + 2 * pad[1] - dil[1] * (ker[1] - 1) - 1) / st[1] + 1;
    let l = bh.max(0) * bw.max(0);
    let in_l = *in_meta.shape.last().unwrap_or(&0) as i64;
    if in_l != l {
        return Err(req.invalid(format!("{in_l} blocks, expected {l}")));
    }
    let mut program = Program::new(target);
    program.declare(in_name, d, &in_meta.shape, HbmRole::Input);
    program.declare(out_name, d, &out_meta.shape, HbmRole::Output);
    if rows == 0 || h * w == 0 {
        return Ok(Lowered::new(program));
    }
    let plane_in = kk * l;
    let plane_out = h * w;
    if plane_in > 16384 || plane_out > 16384 {
        return Err(req.unsupported("plane exceeds the SBUF budget".into()));
    }
    let acc_d = if d == DType::F32 { DType::F32 } else { d };
    let tgt = target.params();
    let mut alloc = SbufAllocator::new(&tgt);
    let x_off = alloc.alloc(plane_in as usize * 4)?;
    let a_off = alloc.alloc(plane_out as usize * 4)?;
    let y_off = alloc.alloc(plane_out as usize * d.size())?;
    let asz = acc_d.size() as i64;
    let mut e = Emitter::new(program);
    let parts = tgt.partitions as i64;
    e.row_tiles(rows, parts, |e, r0, p| {
        e.load_planes(
            (in_name, d, plane_in),
            r0,
            AccessPattern::sbuf(DType::F32, 0, p, x_off, vec![[1, plane_in]]),
        );
        let acc = AccessPattern::sbuf(acc_d, 0, p, a_off, vec![[1, plane_out]]);
        e.memset(Engine::Vector, acc.clone(), 0.0);
        for ki in 0..ker[0] {
            for kj in 0..ker[1] {
                // Blocks whose position is in bounds: b ∈ [lo, hi).
                let range = |k: i64, j: usize, size: i64, blocks: i64| {
                    let off = k * dil[j] - pad[j];
                    let lo = (0..blocks).find(|b| b * st[j] + off >= 0);
                    let hi = (0..blocks).rev().find(|b| b * st[j] + off < size).map(|b| b + 1);
                    match (lo, hi) {
                        (Some(lo), Some(hi)) if hi > lo => Some((lo, hi - lo, off)),
                        _ => None,
                    }
                };
                let (Some((lh, nh, oh)), Some((lw, nw, ow))) = (range(ki, 0, h, bh), range(kj, 1, w, bw)) else {
                    continue;
                };
                let k = ki * ker[1] + kj;
                let pos = (lh * st[0] + oh) * w + (lw * st[1] + ow);
                let view = AccessPattern::sbuf(
                    acc_d,
                    0,
                    p,
                    a_off + (pos * asz) as u64,
                    vec![[st[0] * w, nh], [st[1], nw]],
                );
                let col = AccessPattern::sbuf(
                    DType::F32,
                    0,
                    p,
                    x_off + ((k * l + lh * bw + lw) * 4) as u64,
                    vec![[bw, nh], [1, nw]],
                );
                let op = tt(view.clone(), view, col, AluOp::Add);
                e.push(Engine::Vector, op);
            }
        }
        let y = AccessPattern::sbuf(d, 0, p, y_off, vec![[1, plane_out]]);
        e.tensor_copy(Engine::Vector, y.clone(), acc);
        e.store_planes((out_name, d, plane_out), r0, y);
    });
    Ok(Lowered::new(e.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(segs: &[Seg]) -> Vec<Option<i64>> {
        segs.iter()
            .flat_map(|s| (0..s.len).map(move |k| s.src.map(|(a, st)| a + k * st)))
            .collect()
    }

    #[test]
    fn segments_follow_the_index_maps() {
        for (mode, out, lo, w) in [
            (Mode::Reflect, 13, 2, 8),
            (Mode::Reflect, 15, 7, 8),
            (Mode::Replicate, 5, -4, 4),
            (Mode::Replicate, 9, 3, 6),
            (Mode::Constant(0.0), 4, -1, 4),
            (Mode::Constant(0.0), 6, 1, 0),
        ] {
            let want: Vec<_> = (0..out).map(|o| map_index(mode, o, lo, w)).collect();
            assert_eq!(expand(&segments(mode, out, lo, w)), want, "{mode:?} {out} {lo} {w}");
        }
    }
}
