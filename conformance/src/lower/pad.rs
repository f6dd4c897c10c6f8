//! Padding: `constant_pad_nd`, `reflection_pad{1,2,3}d`, `replication_pad{2,3}d`.
//!
//! Layout: the dims before the first padded dim are flattened onto SBUF partitions (tiles of
//! ≤128 rows); the padded dims (plus the trailing unpadded dims merged into one) form the free
//! "plane". Per row tile: one DMA loads the input planes, then for every block of the output
//! plane where each dim's index map is affine (PyTorch's map: `o − lo` for the interior, a
//! negative step for reflection borders, step 0 for replication borders) one VectorE
//! `tensor_copy` with that access pattern (negative / zero steps) moves the elements; constant
//! padding first `memset`s the whole output tile to the value. One DMA stores the tile.

use super::binary::{dev, dma};
use super::tile::{Emitter, SbufAllocator, Slot};
use super::{LowerError, LowerRequest, Lowered};
use crate::case::Value;
use trnsim::{AccessPattern, Engine, HbmRole, Memset, Op, Program, TargetName, TensorCopy};

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
            segs.push(Seg { out_start: o, len: 1, src: m.map(|s| (s, 0)) });
        }
        prev = m;
    }
    segs
}

fn ints_arg(req: &LowerRequest<'_>, pos: usize, name: &str) -> Result<Vec<i64>, LowerError> {
    match req.call.arg(pos, name) {
        Some(Value::Ints(v)) => Ok(v.clone()),
        other => Err(req.invalid(format!("`{name}` must be an int list, got {other:?}"))),
    }
}

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (in_name, in_meta) = match req.call.arg(0, "self") {
        Some(Value::Tensor(t)) => (t.as_str(), req.tensor(t)?),
        other => return Err(req.invalid(format!("`self` must be a tensor, got {other:?}"))),
    };
    let (mode, pad) = match req.op {
        "constant_pad_nd" => {
            let v = match req.call.arg(2, "value") {
                None | Some(Value::None(())) => 0.0,
                Some(Value::Int(i)) => *i as f64,
                Some(Value::Float(f)) => f.0,
                Some(Value::Bool(b)) => *b as i64 as f64,
                other => return Err(req.unsupported(format!("pad value {other:?}"))),
            };
            (Mode::Constant(v), ints_arg(req, 1, "pad")?)
        }
        "reflection_pad1d" | "reflection_pad2d" | "reflection_pad3d" => (Mode::Reflect, ints_arg(req, 1, "padding")?),
        "replication_pad1d" | "replication_pad2d" | "replication_pad3d" => {
            (Mode::Replicate, ints_arg(req, 1, "padding")?)
        }
        other => return Err(LowerError::NotLowered(other.to_string())),
    };
    let out_name = req.output_tensor(0)?;
    let out_meta = req.tensor(out_name)?;
    if in_meta.dtype != out_meta.dtype {
        return Err(req.invalid("output dtype differs from input".into()));
    }
    if in_meta.dtype.is_complex() {
        return Err(req.unsupported(format!("{} has no device dtype", in_meta.dtype)));
    }
    let d = dev(req, in_meta.dtype)?;
    let nd = in_meta.shape.len();
    if pad.len() % 2 != 0 || pad.len() / 2 > nd {
        return Err(req.invalid(format!("padding {pad:?} for a {nd}-d input")));
    }
    let mut lo = vec![0i64; nd];
    let mut hi = vec![0i64; nd];
    for j in 0..pad.len() / 2 {
        lo[nd - 1 - j] = pad[2 * j];
        hi[nd - 1 - j] = pad[2 * j + 1];
    }
    let ishape: Vec<i64> = in_meta.shape.iter().map(|&s| s as i64).collect();
    let oshape: Vec<i64> = (0..nd).map(|i| ishape[i] + lo[i] + hi[i]).collect();
    if oshape.iter().map(|&s| s as usize).collect::<Vec<_>>() != out_meta.shape {
        return Err(req.invalid(format!("output shape {:?}, expected {oshape:?}", out_meta.shape)));
    }

    let mut program = Program::new(target);
    program.declare(in_name, d, &in_meta.shape, HbmRole::Input);
    program.declare(out_name, d, &out_meta.shape, HbmRole::Output);
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
                vec![Seg { out_start: 0, len: o, src: Some((0, 1)) }]
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
    let copies: Vec<Vec<Seg>> =
        blocks.into_iter().filter(|b| b.iter().all(|s| s.src.is_some() && s.len > 0)).collect();

    let tgt = target.params();
    let mut alloc = SbufAllocator::new(&tgt);
    let size = d.size();
    let in_off = alloc.alloc(plane_in.max(1) as usize * size)?;
    let out_off = alloc.alloc(plane_out as usize * size)?;
    let (sin, sout) = (Slot { offset: in_off }, Slot { offset: out_off });
    let mut e = Emitter::new(program);
    let parts = tgt.partitions as i64;
    let mut r0 = 0i64;
    while r0 < rows {
        let p = (rows - r0).min(parts) as usize;
        if !copies.is_empty() && plane_in > 0 {
            let src = AccessPattern::hbm(in_name, d, (r0 * plane_in) as u64, p, plane_in, vec![[1, plane_in]]);
            let dst = AccessPattern::sbuf(d, 0, p, in_off, vec![[1, plane_in]]);
            e.push(Engine::Dma, dma(dst, src), &[], &[sin]);
        }
        if let Mode::Constant(v) = mode {
            let dst = AccessPattern::sbuf(d, 0, p, out_off, vec![[1, plane_out]]);
            e.push(Engine::Vector, Op::Memset(Memset { dst, value: v }), &[], &[sout]);
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
            e.push(Engine::Vector, Op::TensorCopy(TensorCopy { dst, src }), &[sin], &[sout]);
        }
        let src = AccessPattern::sbuf(d, 0, p, out_off, vec![[1, plane_out]]);
        let dst = AccessPattern::hbm(out_name, d, (r0 * plane_out) as u64, p, plane_out, vec![[1, plane_out]]);
        e.push(Engine::Dma, dma(dst, src), &[sout], &[]);
        r0 += p as i64;
    }
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
