//! Pooling: `avg_pool{1,2,3}d`, `adaptive_avg_pool1d`, `_adaptive_avg_pool{2,3}d`.
//!
//! Layout: the leading (batch/channel) dims are flattened onto SBUF partitions (tiles of ≤128
//! rows), the spatial dims are the free axes. One DMA loads the input planes (converted to
//! fp32); each output position is one VectorE `tensor_reduce` over its (clipped) window viewed
//! with a strided access pattern: `average` when PyTorch's divisor is the number of elements
//! in the window (exact fp32 division), else `add` followed by a `tensor_scalar` multiply by
//! `1/divisor` (count_include_pad, divisor_override). Windows follow PyTorch exactly:
//! `start = o·stride − pad`, `end = min(start + kernel, size + pad)` (ceil_mode only changes the
//! output size, which comes from the golden output's metadata), clipped to the input; adaptive
//! windows are `[⌊o·I/O⌋, ⌈(o+1)·I/O⌉)`. One DMA stores the planes.

use super::binary::dev;
use super::tile;
use super::tile::{Emitter, SbufAllocator, ts, tt};
use super::{LowerError, LowerRequest, Lowered};
use crate::call::TensorArg;
use trnsim::{AccessPattern, AluOp, DType, Engine, HbmRole, Op, Program, ScalarOperand, TargetName, TensorReduce};

/// Largest input plane (fp32 elements per partition).
const MAX_PLANE: usize = 32768;

/// One output index of one spatial dim: the clipped window `[start, start+len)` and the
/// window size PyTorch counts with count_include_pad (`pool`).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Win {
    start: i64,
    len: i64,
    pool: i64,
}

/// The windows of an average pool (forward or backward) per spatial dim, and its divisor rule.
struct AvgWindows {
    wins: Vec<Vec<Win>>,
    include_pad: bool,
    override_div: Option<f64>,
}

/// Windows of `ishape → oshape`: adaptive pools split the input evenly (PyTorch's
/// `start = ⌊x·i/o⌋`, `end = ⌈(x+1)·i/o⌉`); fixed pools read `kernel_size, stride, padding,
/// ceil_mode, count_include_pad[, divisor_override]` from argument `kernel_pos` on (1 for the
/// forward ops after `self`, 2 for the backward ops after `grad_output, self`).
fn avg_windows(
    req: &LowerRequest<'_>,
    ishape: &[i64],
    oshape: &[i64],
    adaptive: bool,
    kernel_pos: usize,
) -> Result<AvgWindows, LowerError> {
    let k = ishape.len();
    if adaptive {
        let wins = (0..k)
            .map(|j| {
                let (i, o) = (ishape[j], oshape[j]);
                (0..o)
                    .map(|x| {
                        let s = (x * i) / o;
                        let e = ((x + 1) * i + o - 1) / o;
                        Win {
                            start: s,
                            len: e - s,
                            pool: e - s,
                        }
                    })
                    .collect()
            })
            .collect();
        return Ok(AvgWindows {
            wins,
            include_pad: false,
            override_div: None,
        });
    }
    let kernel = req.ints_n(kernel_pos, "kernel_size", k)?;
    let stride = req.ints_n_or(kernel_pos + 1, "stride", k, &kernel)?;
    let padding = req.ints_n_or(kernel_pos + 2, "padding", k, &[0])?;
    let include_pad = req.arg_or(kernel_pos + 4, "count_include_pad", true)?;
    // avg_pool1d has no divisor_override argument.
    let override_div = if k > 1 {
        req.opt::<i64>(kernel_pos + 5, "divisor_override")?.map(|d| d as f64)
    } else {
        None
    };
    let wins = (0..k)
        .map(|j| {
            let (i, o) = (ishape[j], oshape[j]);
            (0..o)
                .map(|x| {
                    let hs = x * stride[j] - padding[j];
                    let he = (hs + kernel[j]).min(i + padding[j]);
                    let (s, e) = (hs.max(0), he.min(i));
                    Win {
                        start: s,
                        len: (e - s).max(0),
                        pool: he - hs,
                    }
                })
                .collect()
        })
        .collect();
    Ok(AvgWindows {
        wins,
        include_pad,
        override_div,
    })
}

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (k, adaptive) = match req.op {
        "avg_pool1d" => (1, false),
        "avg_pool2d" => (2, false),
        "avg_pool3d" => (3, false),
        "adaptive_avg_pool1d" => (1, true),
        "_adaptive_avg_pool2d" => (2, true),
        "_adaptive_avg_pool3d" => (3, true),
        other => return Err(LowerError::NotLowered(other.to_string())),
    };
    let (in_name, in_meta) = req.arg::<TensorArg>(0, "self")?;
    let out_name = req.output_tensor(0)?;
    let out_meta = req.tensor(out_name)?;
    if in_meta.dtype.is_complex() || in_meta.dtype == crate::dtype::TorchDType::Bool {
        return Err(req.unsupported(format!("{}", in_meta.dtype)));
    }
    // Integer dtypes: fp32 sums (exact below 2^24), then C++'s truncating `sum / divisor`.
    let int_div = !in_meta.dtype.is_float();
    let nd = in_meta.shape.len();
    if nd < k || out_meta.shape.len() != nd {
        return Err(req.invalid(format!("{nd}-d input for {k} spatial dims")));
    }
    let ishape: Vec<i64> = in_meta.shape[nd - k..].iter().map(|&s| s as i64).collect();
    let oshape: Vec<i64> = out_meta.shape[nd - k..].iter().map(|&s| s as i64).collect();
    let rows: i64 = in_meta.shape[..nd - k].iter().map(|&s| s as i64).product();
    if out_meta.shape[..nd - k] != in_meta.shape[..nd - k] {
        return Err(req.invalid("leading dims differ".into()));
    }

    // Windows per dim, and the divisor rule.
    let AvgWindows {
        wins,
        include_pad,
        override_div,
    } = avg_windows(req, &ishape, &oshape, adaptive, 1)?;

    // adaptive_avg_pool3d accumulates in the tensor's own dtype on CPU.
    let seq_acc = adaptive && k == 3 && out_meta.dtype != crate::dtype::TorchDType::F32;
    let in_d = dev(req, in_meta.dtype)?;
    let out_d = dev(req, out_meta.dtype)?;
    let mut program = Program::new(target);
    program.declare(in_name, in_d, &in_meta.shape, HbmRole::Input);
    program.declare(out_name, out_d, &out_meta.shape, HbmRole::Output);
    let plane_in: i64 = ishape.iter().product();
    let plane_out: i64 = oshape.iter().product();
    if rows == 0 || plane_out == 0 {
        return Ok(Lowered::new(program));
    }
    if plane_in as usize > MAX_PLANE || plane_out as usize > MAX_PLANE {
        return Err(req.unsupported(format!("planes of {plane_in}/{plane_out} elements exceed {MAX_PLANE}")));
    }
    let mut istr = vec![1i64; k];
    for j in (0..k.saturating_sub(1)).rev() {
        istr[j] = istr[j + 1] * ishape[j + 1];
    }

    let tgt = target.params();
    let mut alloc = SbufAllocator::new(&tgt);
    let x_off = alloc.alloc(plane_in as usize * 4)?;
    let y_off = alloc.alloc(plane_out as usize * out_d.size())?;
    let s_off = alloc.alloc(plane_out as usize * 4)?;
    let mut kmax = wins
        .iter()
        .flat_map(|w| w.iter().map(|x| x.len))
        .max()
        .unwrap_or(1)
        .max(1);
    if int_div {
        let pool_max: i64 = wins
            .iter()
            .map(|w| w.iter().map(|x| x.pool.max(x.len)).max().unwrap_or(1))
            .product();
        kmax = override_div.map(|d| d as i64).unwrap_or(pool_max).max(1);
        if kmax > 4096 {
            return Err(req.unsupported(format!("divisor {kmax}")));
        }
    }
    let int_tiles = if int_div {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(alloc.alloc(plane_out as usize * 4)?);
        }
        v
    } else {
        vec![]
    };
    let z_off = alloc.alloc(kmax as usize * 4)?;
    let mut e = Emitter::new(program);
    let parts = tgt.partitions as i64;
    e.row_tiles(rows, parts, |e, r0, p| {
        e.load_planes(
            (in_name, in_d, plane_in),
            r0,
            AccessPattern::sbuf(DType::F32, 0, p, x_off, vec![[1, plane_in]]),
        );
        if seq_acc || int_div {
            let zd = if int_div { DType::F32 } else { out_d };
            let zeros = AccessPattern::sbuf(zd, 0, p, z_off, vec![[1, kmax]]);
            e.memset(Engine::Vector, zeros, 0.0);
        }
        // Odometer over output positions.
        let mut idx = vec![0usize; k];
        for flat in 0..plane_out as u64 {
            let w: Vec<Win> = (0..k).map(|j| wins[j][idx[j]]).collect();
            let count: i64 = w.iter().map(|x| x.len).product();
            let pool: i64 = w.iter().map(|x| x.pool).product();
            let div = override_div.unwrap_or(if include_pad { pool as f64 } else { count as f64 });
            let dst = AccessPattern::sbuf(out_d, 0, p, y_off + flat * out_d.size() as u64, vec![[1, 1]]);
            if int_div {
                let q = AccessPattern::sbuf(DType::F32, 0, p, s_off + flat * 4, vec![[1, 1]]);
                if count == 0 {
                    e.memset(Engine::Vector, q, 0.0);
                } else {
                    let off: i64 = (0..k).map(|j| w[j].start * istr[j]).sum();
                    let view: Vec<[i64; 2]> = (0..k).map(|j| [istr[j], w[j].len]).collect();
                    let src = AccessPattern::sbuf(DType::F32, 0, p, x_off + off as u64 * 4, view);
                    let z0 = AccessPattern::sbuf(DType::F32, 0, p, z_off, vec![[1, 1]]);
                    let op = Op::TensorReduce(TensorReduce {
                        dst: z0,
                        src,
                        op: AluOp::Add,
                        axes: k,
                        negate: false,
                    });
                    e.push(Engine::Vector, op);
                    // sum/div correctly rounded: the average of [sum, 0, …, 0] (div elements).
                    let zs = AccessPattern::sbuf(DType::F32, 0, p, z_off, vec![[1, div as i64]]);
                    let op = Op::TensorReduce(TensorReduce {
                        dst: q,
                        src: zs,
                        op: AluOp::Average,
                        axes: 1,
                        negate: false,
                    });
                    e.push(Engine::Vector, op);
                }
            } else if seq_acc && count > 0 {
                // PyTorch's CPU adaptive_avg_pool3d: `scalar_t sum` (rounded to the output dtype
                // after every add, in window order), then `sum / kT / kH / kW` in scalar_t.
                // The sum lives in z[0]; z[1..] are zeros, so `average` over z[0..k] is sum/k
                // (one fp32 division, correctly rounded, then the cast: c10's Half/BFloat16 `/`).
                let z = |n: i64| AccessPattern::sbuf(out_d, 0, p, z_off, vec![[1, n]]);
                let mut first = true;
                for it in 0..w[0].len {
                    for ih in 0..w[1].len {
                        for iw in 0..w[2].len {
                            let off = (w[0].start + it) * istr[0] + (w[1].start + ih) * istr[1] + w[2].start + iw;
                            let x = AccessPattern::sbuf(DType::F32, 0, p, x_off + off as u64 * 4, vec![[1, 1]]);
                            let op = if first {
                                tile::copy(z(1), x)
                            } else {
                                tt(z(1), z(1), x, AluOp::Add)
                            };
                            e.push(Engine::Vector, op);
                            first = false;
                        }
                    }
                }
                for wj in &w {
                    if wj.len > 1 {
                        let op = Op::TensorReduce(TensorReduce {
                            dst: z(1),
                            src: z(wj.len),
                            op: AluOp::Average,
                            axes: 1,
                            negate: false,
                        });
                        e.push(Engine::Vector, op);
                    }
                }
                e.push(Engine::Vector, tile::copy(dst, z(1)));
            } else if count == 0 {
                e.push(Engine::Vector, tile::memset(dst, 0.0));
            } else {
                let off: i64 = (0..k).map(|j| w[j].start * istr[j]).sum();
                let view: Vec<[i64; 2]> = (0..k).map(|j| [istr[j], w[j].len]).collect();
                let src = AccessPattern::sbuf(DType::F32, 0, p, x_off + off as u64 * 4, view);
                if div == count as f64 {
                    let op = Op::TensorReduce(TensorReduce {
                        dst,
                        src,
                        op: AluOp::Average,
                        axes: k,
                        negate: false,
                    });
                    e.push(Engine::Vector, op);
                } else {
                    let sum = AccessPattern::sbuf(DType::F32, 0, p, s_off + flat * 4, vec![[1, 1]]);
                    let op = Op::TensorReduce(TensorReduce {
                        dst: sum.clone(),
                        src,
                        op: AluOp::Add,
                        axes: k,
                        negate: false,
                    });
                    e.push(Engine::Vector, op);
                    let op = ts(dst, sum, AluOp::Multiply, ScalarOperand::Imm(1.0 / div), None);
                    e.push(Engine::Vector, op);
                }
            }
            for j in (0..k).rev() {
                idx[j] += 1;
                if (idx[j] as i64) < oshape[j] {
                    break;
                }
                idx[j] = 0;
            }
        }
        if int_div {
            // trunc(q): n = rne(q); n −= (n > q)·(q ≥ 0); n += (n < q)·(q < 0).
            let t = |i: usize, dt: DType| AccessPattern::sbuf(dt, 0, p, int_tiles[i], vec![[1, plane_out]]);
            let q = AccessPattern::sbuf(DType::F32, 0, p, s_off, vec![[1, plane_out]]);
            let tt = |dst: AccessPattern, in0: AccessPattern, in1: AccessPattern, op: AluOp| tt(dst, in0, in1, op);
            let ts = |dst: AccessPattern, src: AccessPattern, op: AluOp, v: f64| {
                ts(dst, src, op, ScalarOperand::Imm(v), None)
            };
            let (ni, nf, a, b) = (t(0, DType::I32), t(1, DType::F32), t(2, DType::F32), t(3, DType::F32));
            e.tensor_copy(Engine::Vector, ni.clone(), q.clone());
            e.tensor_copy(Engine::Vector, nf.clone(), ni);
            e.push(Engine::Vector, tt(a.clone(), nf.clone(), q.clone(), AluOp::IsGt));
            e.push(Engine::Vector, ts(b.clone(), q.clone(), AluOp::IsGe, 0.0));
            e.push(Engine::Vector, tt(a.clone(), a.clone(), b.clone(), AluOp::Multiply));
            e.push(Engine::Vector, tt(nf.clone(), nf.clone(), a.clone(), AluOp::Subtract));
            e.push(Engine::Vector, tt(a.clone(), nf.clone(), q.clone(), AluOp::IsLt));
            e.push(Engine::Vector, ts(b.clone(), q.clone(), AluOp::IsLt, 0.0));
            e.push(Engine::Vector, tt(a.clone(), a.clone(), b, AluOp::Multiply));
            e.push(Engine::Vector, tt(nf.clone(), nf.clone(), a, AluOp::Add));
            let y = AccessPattern::sbuf(out_d, 0, p, y_off, vec![[1, plane_out]]);
            e.tensor_copy(Engine::Vector, y, nf);
        }
        e.store_planes(
            (out_name, out_d, plane_out),
            r0,
            AccessPattern::sbuf(out_d, 0, p, y_off, vec![[1, plane_out]]),
        );
    });
    Ok(Lowered::new(e.finish()))
}

// ---------------------------------------------------------------------------------------------
// max_pool{2,3}d_with_indices

/// Maximal runs of `v` that are affine: (first index, length, first value, step).
fn affine_runs(v: &[i64]) -> Vec<(usize, usize, i64, i64)> {
    let mut runs: Vec<(usize, usize, i64, i64)> = Vec::new();
    for (i, &x) in v.iter().enumerate() {
        if let Some(r) = runs.last_mut() {
            let prev = v[i - 1];
            if r.1 == 1 {
                r.3 = x - prev;
                r.1 += 1;
                continue;
            }
            if x - prev == r.3 {
                r.1 += 1;
                continue;
            }
        }
        runs.push((i, 1, x, 0));
    }
    runs
}

/// Values and indices, as PyTorch's CPU kernel: per output, `maxindex` starts at the first
/// in-bounds position of the window and `maxval` at −inf; positions are visited in window order
/// and taken when `val > maxval || isnan(val)`. On the engines: the input planes sit in an
/// fp32 SBUF tile padded with −inf; for each kernel offset, the candidate values are one strided
/// view of that tile (all output positions at once), their flat input indices one GpSimd `iota`,
/// the take-mask `(v > m) | (v != v)` three VectorE ops, and `tensor_copy_predicated` updates the
/// running max and index.
pub fn lower_max(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    use trnsim::Iota;
    let k = match req.op {
        "max_pool2d_with_indices" => 2,
        "max_pool3d_with_indices" => 3,
        other => return Err(LowerError::NotLowered(other.to_string())),
    };
    let (in_name, in_meta) = req.arg::<TensorArg>(0, "self")?;
    let out_name = req.output_tensor(0)?;
    let out_meta = req.tensor(out_name)?;
    let idx_name = req.output_tensor(1)?;
    let idx_meta = req.tensor(idx_name)?;
    if in_meta.dtype.is_complex() {
        return Err(req.unsupported(format!("{}", in_meta.dtype)));
    }
    let nd = in_meta.shape.len();
    if nd < k || out_meta.shape.len() != nd || idx_meta.shape != out_meta.shape {
        return Err(req.invalid(format!("{nd}-d input for {k} spatial dims")));
    }
    let kernel = req.ints_n(1, "kernel_size", k)?;
    let stride = req.ints_n_or(2, "stride", k, &kernel)?;
    let padding = req.ints_n_or(3, "padding", k, &[0])?;
    let dilation = req.ints_n_or(4, "dilation", k, &[1])?;
    let ishape: Vec<i64> = in_meta.shape[nd - k..].iter().map(|&s| s as i64).collect();
    let oshape: Vec<i64> = out_meta.shape[nd - k..].iter().map(|&s| s as i64).collect();
    let rows: i64 = in_meta.shape[..nd - k].iter().map(|&s| s as i64).product();

    let in_d = dev(req, in_meta.dtype)?;
    let out_d = dev(req, out_meta.dtype)?;
    let idx_d = dev(req, idx_meta.dtype)?;
    let mut program = Program::new(target);
    program.declare(in_name, in_d, &in_meta.shape, HbmRole::Input);
    program.declare(out_name, out_d, &out_meta.shape, HbmRole::Output);
    program.declare(idx_name, idx_d, &idx_meta.shape, HbmRole::Output);
    let plane_in: i64 = ishape.iter().product();
    let plane_out: i64 = oshape.iter().product();
    if rows == 0 || plane_out == 0 {
        return Ok(Lowered::new(program));
    }
    // Padded plane: padded index = input index + padding.
    let pshape: Vec<i64> = (0..k)
        .map(|j| (ishape[j] + padding[j]).max((oshape[j] - 1) * stride[j] + (kernel[j] - 1) * dilation[j] + 1))
        .collect();
    let plane_pad: i64 = pshape.iter().product();
    if plane_pad as usize > MAX_PLANE || plane_out as usize > MAX_PLANE / 4 {
        return Err(req.unsupported(format!(
            "planes of {plane_pad}/{plane_out} elements exceed the SBUF budget"
        )));
    }
    let strides_of = |s: &[i64]| {
        let mut st = vec![1i64; s.len()];
        for j in (0..s.len().saturating_sub(1)).rev() {
            st[j] = st[j + 1] * s[j + 1];
        }
        st
    };
    let (istr, pstr, ostr) = (strides_of(&ishape), strides_of(&pshape), strides_of(&oshape));

    let tgt = target.params();
    let mut alloc = SbufAllocator::new(&tgt);
    let x_off = alloc.alloc(plane_pad as usize * 4)?;
    let m_off = alloc.alloc(plane_out as usize * 4)?;
    let i_off = alloc.alloc(plane_out as usize * 4)?;
    let c_off = alloc.alloc(plane_out as usize * 4)?;
    let g_off = alloc.alloc(plane_out as usize * 4)?;
    let n_off = alloc.alloc(plane_out as usize * 4)?;
    let q_off = alloc.alloc(plane_out as usize)?;
    let v_off = alloc.alloc(plane_out as usize * out_d.size())?;
    // First in-bounds input index per dim and output index (PyTorch's `while (i0 < 0) i0 += d`).
    let first: Vec<Vec<i64>> = (0..k)
        .map(|j| {
            (0..oshape[j])
                .map(|o| {
                    let mut i0 = o * stride[j] - padding[j];
                    while i0 < 0 {
                        i0 += dilation[j];
                    }
                    i0
                })
                .collect()
        })
        .collect();
    let runs: Vec<Vec<(usize, usize, i64, i64)>> = first.iter().map(|v| affine_runs(v)).collect();

    let mut e = Emitter::new(program);
    let parts = tgt.partitions as i64;
    let dense = |dt: DType, off: u64, p: usize| AccessPattern::sbuf(dt, 0, p, off, vec![[1, plane_out]]);
    e.row_tiles(rows, parts, |e, r0, p| {
        // Padded input tile.
        if plane_pad != plane_in {
            let op = tile::memset(
                AccessPattern::sbuf(DType::F32, 0, p, x_off, vec![[1, plane_pad]]),
                f64::NEG_INFINITY,
            );
            e.push(Engine::Vector, op);
        }
        let interior: i64 = (0..k).map(|j| padding[j] * pstr[j]).sum();
        let dst = AccessPattern::sbuf(
            DType::F32,
            0,
            p,
            x_off + interior as u64 * 4,
            (0..k).map(|j| [pstr[j], ishape[j]]).collect(),
        );
        e.load_planes((in_name, in_d, plane_in), r0, dst);
        // Running max = −inf, running index = the first in-bounds position.
        let op = tile::memset(dense(DType::F32, m_off, p), f64::NEG_INFINITY);
        e.push(Engine::Vector, op);
        let mut blocks: Vec<Vec<(usize, usize, i64, i64)>> = vec![vec![]];
        for r in &runs {
            blocks = blocks
                .iter()
                .flat_map(|b| {
                    r.iter().map(move |x| {
                        let mut nb = b.clone();
                        nb.push(*x);
                        nb
                    })
                })
                .collect();
        }
        for b in &blocks {
            let off: i64 = (0..k).map(|j| b[j].0 as i64 * ostr[j]).sum();
            let dst = AccessPattern::sbuf(
                DType::I32,
                0,
                p,
                i_off + off as u64 * 4,
                (0..k).map(|j| [ostr[j], b[j].1 as i64]).collect(),
            );
            let offset: i64 = (0..k).map(|j| b[j].2 * istr[j]).sum();
            let pattern = (0..k).map(|j| [b[j].3 * istr[j], b[j].1 as i64]).collect();
            e.push(
                Engine::Gpsimd,
                Op::Iota(Iota {
                    dst,
                    offset,
                    channel_multiplier: 0,
                    pattern,
                }),
            );
        }
        // Kernel offsets in window order.
        let nk: i64 = kernel.iter().product();
        for kf in 0..nk {
            let mut kidx = vec![0i64; k];
            let mut rem = kf;
            for j in (0..k).rev() {
                kidx[j] = rem % kernel[j];
                rem /= kernel[j];
            }
            let voff: i64 = (0..k).map(|j| kidx[j] * dilation[j] * pstr[j]).sum();
            let v = AccessPattern::sbuf(
                DType::F32,
                0,
                p,
                x_off + voff as u64 * 4,
                (0..k).map(|j| [stride[j] * pstr[j], oshape[j]]).collect(),
            );
            // Candidate indices: (o·s − p + k·d) per dim, flattened over the input plane.
            let ioffset: i64 = (0..k).map(|j| (kidx[j] * dilation[j] - padding[j]) * istr[j]).sum();
            let pattern = (0..k).map(|j| [stride[j] * istr[j], oshape[j]]).collect();
            let c = dense(DType::I32, c_off, p);
            e.push(
                Engine::Gpsimd,
                Op::Iota(Iota {
                    dst: c.clone(),
                    offset: ioffset,
                    channel_multiplier: 0,
                    pattern,
                }),
            );
            let tt = |dst: AccessPattern, in0: AccessPattern, in1: AccessPattern, op: AluOp| tt(dst, in0, in1, op);
            let (g, n, q) = (
                dense(DType::F32, g_off, p),
                dense(DType::F32, n_off, p),
                dense(DType::U8, q_off, p),
            );
            let m = dense(DType::F32, m_off, p);
            e.push(Engine::Vector, tt(g.clone(), v.clone(), m.clone(), AluOp::IsGt));
            e.push(Engine::Vector, tt(n.clone(), v.clone(), v.clone(), AluOp::NotEqual));
            e.push(Engine::Vector, tt(q.clone(), g, n, AluOp::LogicalOr));
            let op = tile::copy_pred(m.clone(), v, q.clone());
            e.push(Engine::Vector, op);
            let op = tile::copy_pred(dense(DType::I32, i_off, p), c, q);
            e.push(Engine::Vector, op);
        }
        let op = tile::copy(dense(out_d, v_off, p), dense(DType::F32, m_off, p));
        e.push(Engine::Vector, op);
        e.store_planes((out_name, out_d, plane_out), r0, dense(out_d, v_off, p));
        e.store_planes((idx_name, idx_d, plane_out), r0, dense(DType::I32, i_off, p));
    });
    Ok(Lowered::new(e.finish()))
}

// ---------------------------------------------------------------------------------------------
// Backward ops

/// `max_pool2d_with_indices_backward`: `grad_input[idx[o]] += grad_output[o]`, as PyTorch's CPU
/// kernel. grad_input is zeroed (VectorE memset + DMA), the indices are made global
/// (`idx + row·plane_in`: GpSimd iota + exact int32 add), and for each output position one
/// indirect DMA scatters the rows' gradients with `accumulate` (in order, so repeated argmax
/// positions add up).
pub fn lower_max_backward(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    use trnsim::{DmaCopy, Indirect, IndirectSide, Iota, OobMode};
    let (go_name, go_meta) = req.arg::<TensorArg>(0, "grad_output")?;
    let (x_name, x_meta) = req.arg::<TensorArg>(1, "self")?;
    let (ix_name, ix_meta) = req.arg::<TensorArg>(7, "indices")?;
    let out_name = req.output_tensor(0)?;
    let out_meta = req.tensor(out_name)?;
    if !out_meta.dtype.is_float() || out_meta.dtype.is_complex() {
        return Err(req.unsupported(format!("{}", out_meta.dtype)));
    }
    let nd = x_meta.shape.len();
    if nd < 2 || go_meta.shape.len() != nd || ix_meta.shape != go_meta.shape || out_meta.shape != x_meta.shape {
        return Err(req.invalid("shapes".into()));
    }
    let plane_in = (x_meta.shape[nd - 2] * x_meta.shape[nd - 1]) as i64;
    let plane_out = (go_meta.shape[nd - 2] * go_meta.shape[nd - 1]) as i64;
    let rows: i64 = x_meta.shape[..nd - 2].iter().map(|&s| s as i64).product();
    let (go_d, x_d, ix_d, out_d) = (
        dev(req, go_meta.dtype)?,
        dev(req, x_meta.dtype)?,
        dev(req, ix_meta.dtype)?,
        dev(req, out_meta.dtype)?,
    );
    let mut program = Program::new(target);
    program.declare(go_name, go_d, &go_meta.shape, HbmRole::Input);
    program.declare(x_name, x_d, &x_meta.shape, HbmRole::Input);
    program.declare(ix_name, ix_d, &ix_meta.shape, HbmRole::Input);
    program.declare(out_name, out_d, &out_meta.shape, HbmRole::Output);
    if rows == 0 || plane_in == 0 {
        return Ok(Lowered::new(program));
    }
    if plane_in as usize > MAX_PLANE || plane_out as usize > MAX_PLANE / 2 {
        return Err(req.unsupported("plane exceeds the SBUF budget".into()));
    }
    let tgt = target.params();
    let mut alloc = SbufAllocator::new(&tgt);
    let z_off = alloc.alloc(plane_in as usize * out_d.size())?;
    let g_off = alloc.alloc(plane_out as usize * go_d.size())?;
    let i_off = alloc.alloc(plane_out as usize * 4)?;
    let b_off = alloc.alloc(plane_out as usize * 4)?;
    let mut e = Emitter::new(program);
    let parts = tgt.partitions as i64;
    e.row_tiles(rows, parts, |e, r0, p| {
        let z = AccessPattern::sbuf(out_d, 0, p, z_off, vec![[1, plane_in]]);
        e.memset(Engine::Vector, z.clone(), 0.0);
        e.store_planes((out_name, out_d, plane_in), r0, z);
        if plane_out > 0 {
            let g = AccessPattern::sbuf(go_d, 0, p, g_off, vec![[1, plane_out]]);
            e.load_planes((go_name, go_d, plane_out), r0, g);
            let ix = AccessPattern::sbuf(DType::I32, 0, p, i_off, vec![[1, plane_out]]);
            e.load_planes((ix_name, ix_d, plane_out), r0, ix.clone());
            let base = AccessPattern::sbuf(DType::I32, 0, p, b_off, vec![[1, plane_out]]);
            let op = Op::Iota(Iota {
                dst: base.clone(),
                offset: r0 * plane_in,
                channel_multiplier: plane_in,
                pattern: vec![[0, plane_out]],
            });
            e.push(Engine::Gpsimd, op);
            let op = tt(ix.clone(), ix, base, AluOp::Add);
            e.push(Engine::Gpsimd, op);
            for o in 0..plane_out as u64 {
                let src = AccessPattern::sbuf(go_d, 0, p, g_off + o * go_d.size() as u64, vec![[1, 1]]);
                let dst = AccessPattern::hbm(out_name, out_d, 0, 1, 0, vec![[1, 1]]);
                let index = AccessPattern::sbuf(DType::I32, 0, p, i_off + o * 4, vec![[1, 1]]);
                let op = Op::DmaCopy(DmaCopy {
                    dst,
                    src,
                    accumulate: true,
                    indirect: Some(Indirect {
                        side: IndirectSide::Dst,
                        index,
                        row_step: 1,
                        oob: OobMode::Error,
                    }),
                });
                e.push(Engine::Dma, op);
            }
        }
    });
    Ok(Lowered::new(e.finish()))
}

/// `avg_pool2d_backward` and `_adaptive_avg_pool2d_backward`: for each output position,
/// `delta = grad_output[o] / divisor` (VectorE multiply by the reciprocal), then one
/// `tensor_scalar` adds the per-partition delta to the window's view of an fp32 grad_input tile.
pub fn lower_avg_backward(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let adaptive = req.op == "_adaptive_avg_pool2d_backward";
    let (go_name, go_meta) = req.arg::<TensorArg>(0, "grad_output")?;
    let (x_name, x_meta) = req.arg::<TensorArg>(1, "self")?;
    let out_name = req.output_tensor(0)?;
    let out_meta = req.tensor(out_name)?;
    if !out_meta.dtype.is_float() || out_meta.dtype.is_complex() {
        return Err(req.unsupported(format!("{}", out_meta.dtype)));
    }
    let k = 2;
    let nd = x_meta.shape.len();
    if nd < 2 || go_meta.shape.len() != nd || out_meta.shape != x_meta.shape {
        return Err(req.invalid("shapes".into()));
    }
    let ishape: Vec<i64> = x_meta.shape[nd - k..].iter().map(|&s| s as i64).collect();
    let oshape: Vec<i64> = go_meta.shape[nd - k..].iter().map(|&s| s as i64).collect();
    let rows: i64 = x_meta.shape[..nd - k].iter().map(|&s| s as i64).product();
    let AvgWindows {
        wins,
        include_pad,
        override_div,
    } = avg_windows(req, &ishape, &oshape, adaptive, 2)?;
    let (go_d, x_d, out_d) = (
        dev(req, go_meta.dtype)?,
        dev(req, x_meta.dtype)?,
        dev(req, out_meta.dtype)?,
    );
    let mut program = Program::new(target);
    program.declare(go_name, go_d, &go_meta.shape, HbmRole::Input);
    program.declare(x_name, x_d, &x_meta.shape, HbmRole::Input);
    program.declare(out_name, out_d, &out_meta.shape, HbmRole::Output);
    let plane_in: i64 = ishape.iter().product();
    let plane_out: i64 = oshape.iter().product();
    if rows == 0 || plane_in == 0 {
        return Ok(Lowered::new(program));
    }
    if plane_in as usize > MAX_PLANE / 2 || plane_out as usize > MAX_PLANE / 2 {
        return Err(req.unsupported("plane exceeds the SBUF budget".into()));
    }
    let tgt = target.params();
    let mut alloc = SbufAllocator::new(&tgt);
    let a_off = alloc.alloc(plane_in as usize * 4)?;
    let g_off = alloc.alloc(plane_out as usize * 4)?;
    let d_off = alloc.alloc(plane_out as usize * 4)?;
    let y_off = alloc.alloc(plane_in as usize * out_d.size())?;
    // PyTorch's CPU kernels compute `grad_delta` and the `+=` in scalar_t: for 16-bit floats the
    // delta and the accumulator are rounded to the dtype at every step.
    let acc_d = if out_meta.dtype == crate::dtype::TorchDType::F32 {
        DType::F32
    } else {
        out_d
    };
    let mut e = Emitter::new(program);
    let parts = tgt.partitions as i64;
    let iw = ishape[1];
    e.row_tiles(rows, parts, |e, r0, p| {
        let acc = AccessPattern::sbuf(acc_d, 0, p, a_off, vec![[1, plane_in]]);
        e.memset(Engine::Vector, acc.clone(), 0.0);
        if plane_out > 0 {
            let g = AccessPattern::sbuf(DType::F32, 0, p, g_off, vec![[1, plane_out]]);
            e.load_planes((go_name, go_d, plane_out), r0, g);
        }
        for oh in 0..oshape[0] as usize {
            for ow in 0..oshape[1] as usize {
                let (wh, ww) = (wins[0][oh], wins[1][ow]);
                if wh.len == 0 || ww.len == 0 {
                    continue;
                }
                let flat = (oh as i64 * oshape[1] + ow as i64) as u64;
                let div = override_div.unwrap_or(if include_pad {
                    (wh.pool * ww.pool) as f64
                } else {
                    (wh.len * ww.len) as f64
                });
                let g = AccessPattern::sbuf(DType::F32, 0, p, g_off + flat * 4, vec![[1, 1]]);
                let delta = AccessPattern::sbuf(acc_d, 0, p, d_off + flat * 4, vec![[1, 1]]);
                // Adaptive: `go / kh / kw`, two roundings in scalar_t; else `go / divisor`.
                let factors: Vec<f64> = if adaptive && acc_d != DType::F32 {
                    vec![wh.len as f64, ww.len as f64]
                } else {
                    vec![div]
                };
                let mut src = g;
                for f in factors {
                    let op = ts(delta.clone(), src, AluOp::Multiply, ScalarOperand::Imm(1.0 / f), None);
                    e.push(Engine::Vector, op);
                    src = delta.clone();
                }
                let view = AccessPattern::sbuf(
                    acc_d,
                    0,
                    p,
                    a_off + ((wh.start * iw + ww.start) * acc_d.size() as i64) as u64,
                    vec![[iw, wh.len], [1, ww.len]],
                );
                let op = ts(view.clone(), view, AluOp::Add, ScalarOperand::Tile(delta), None);
                e.push(Engine::Vector, op);
            }
        }
        let y = AccessPattern::sbuf(out_d, 0, p, y_off, vec![[1, plane_in]]);
        e.tensor_copy(Engine::Vector, y.clone(), acc);
        e.store_planes((out_name, out_d, plane_in), r0, y);
    });
    Ok(Lowered::new(e.finish()))
}
