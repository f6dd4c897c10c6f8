//! `convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
//! transposed, output_padding, groups, output_mask)` as TensorE matmuls, the three gradients one
//! after another in one program (each only when its output is requested):
//!
//! * **grad_input** is itself a convolution, run by the forward machinery
//!   ([`conv::emit_conv`]): for a direct forward convolution it is the *transposed* convolution
//!   of grad_output with the same weight (same stride/padding/dilation/groups; the output size is
//!   the input's, which fixes the implicit output_padding), for a transposed forward it is the
//!   *direct* convolution of grad_output with the weight. PyTorch's weight layouts already match:
//!   `[Cout, Cin/g, k…]` is the transposed-form layout with the roles of the channels swapped,
//!   and vice versa.
//! * **grad_weight** is a correlation contracted over batch × spatial positions:
//!   `gw[a, b, k] = Σ_{n, pos} A[n, a, pos] · B[n, b, pos·stride + k·dilation − padding]`, where
//!   `A` = grad_output and `B` = input for a direct convolution (weight `[Cout, Cin/g, k…]`), and
//!   `A` = input and `B` = grad_output for a transposed one (weight `[Cin, Cout/g, k…]`). Per group
//!   the positions of `A` are cut into K tiles of ≤ 128 (one batch entry, one depth, whole rows
//!   when they fit) on the partition axis. Stationary = `A` tile `[pos, a]` (a transposing DMA,
//!   bit-exact); moving = the im2col of `B` for those positions, `[pos, (b, k)]`, written by
//!   strided DMAs (one per kernel offset and row, positions on the partitions, channels `b` as a
//!   free dim with step `kk`) over a `memset 0` when some tap reads padding. Every K tile accumulates into the
//!   same PSUM bank (fp32); the result `[a ≤ 128, (b, k) ≤ 512]` is already grad_weight's row
//!   layout, so the VectorE PSUM → SBUF copy (cast to the output dtype) is stored with one DMA.
//! * **grad_bias** is the sum of grad_output over batch and space: channels on the partitions,
//!   VectorE `tensor_reduce(add)` over chunks of ≤ [`BIAS_CHUNK`] elements, partial sums added in
//!   fp32, one cast on the final copy.
//!
//! Numerics: products exact, sums in fp32 (PSUM / VectorE accumulators), one rounding to the output
//! dtype — what PyTorch's CPU kernels do for bf16 (fp32 accumulation, one final rounding).

use super::conv::{self, Conv, SDim, tap_range};
use super::matmul::{LowerOptions, TILE_K, TILE_M, TILE_N, pe_dtype};
use super::tile;
use super::tile::{Emitter, SbufAllocator, dma, hbm_rows, tt};
use super::{LowerError, LowerRequest, Lowered, OutputSlot, device_dtype};
use crate::call::{TensorArg, TensorMeta, Value};
use trnsim::{AccessPattern, AluOp, DType, Engine, HbmRole, NcMatmul, Op, Program, Target, TargetName, TensorReduce};

/// Elements per partition one grad_bias `tensor_reduce` sums.
const BIAS_CHUNK: usize = 4096;

/// One spatial dim of the forward convolution.
#[derive(Clone, Copy, Debug)]
struct FwdDim {
    /// Input size.
    l: usize,
    /// Output (grad_output) size.
    o: usize,
    k: usize,
    stride: usize,
    pad: usize,
    dil: usize,
}

struct Backward {
    grad_out: (String, TensorMeta),
    input: (String, TensorMeta),
    weight: (String, TensorMeta),
    batch: usize,
    groups: usize,
    cin_g: usize,
    cout_g: usize,
    transposed: bool,
    /// Depth, height, width (1d/2d padded in front with size-1 dims).
    dims: [FwdDim; 3],
    /// grad_input, grad_weight, grad_bias: the requested ones.
    grads: [Option<(String, TensorMeta)>; 3],
}

fn analyze(req: &LowerRequest<'_>) -> Result<Backward, LowerError> {
    if req.op != "convolution_backward" {
        return Err(LowerError::NotLowered(req.op.to_string()));
    }
    let owned = |(t, m): TensorArg| (t.to_string(), m.clone());
    let grad_out = req.arg(0, "grad_output").map(owned)?;
    let input = req.arg(1, "input").map(owned)?;
    let weight = req.arg(2, "weight").map(owned)?;
    let nd = input.1.shape.len();
    if !(3..=5).contains(&nd) || weight.1.shape.len() != nd || grad_out.1.shape.len() != nd {
        return Err(req.unsupported(format!(
            "grad_output {:?} / input {:?} / weight {:?}",
            grad_out.1.shape, input.1.shape, weight.1.shape
        )));
    }
    let ns = nd - 2;
    let stride = req.sizes_n(4, "stride", ns)?;
    let padding = req.sizes_n(5, "padding", ns)?;
    let dilation = req.sizes_n(6, "dilation", ns)?;
    let transposed = req.arg::<bool>(7, "transposed")?;
    let output_padding = req.sizes_n(8, "output_padding", ns)?;
    let groups = req.arg::<i64>(9, "groups")?;
    let groups = usize::try_from(groups)
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| req.arg_error(9, "groups", format!("{groups} (at least 1)")))?;
    let mask = req.arg::<Vec<bool>>(10, "output_mask")?;
    let &[m0, m1, m2] = mask.as_slice() else {
        return Err(req.arg_error(10, "output_mask", format!("{mask:?} (expected 3 bools)")));
    };
    let mask = [m0, m1, m2];
    if stride.iter().chain(&dilation).any(|&x| x == 0) {
        return Err(req.invalid("zero stride or dilation".into()));
    }
    let dtype = input.1.dtype;
    for t in [&grad_out.1, &weight.1] {
        if t.dtype != dtype {
            return Err(req.invalid(format!("mixed dtypes {} / {dtype}", t.dtype)));
        }
    }
    if !dtype.is_float() {
        return Err(req.unsupported(format!("{dtype} convolution_backward")));
    }
    let (batch, cin) = (input.1.shape[0], input.1.shape[1]);
    let ws = &weight.1.shape;
    let (cin_g, cout_g) = if transposed {
        (ws[0] / groups, ws[1])
    } else {
        (ws[1], ws[0] / groups)
    };
    if cin_g * groups != cin || (!transposed && ws[0] % groups != 0) || (transposed && ws[0] != cin) {
        return Err(req.invalid(format!(
            "channels: input {:?}, weight {ws:?}, groups {groups}",
            input.1.shape
        )));
    }
    if ws[2..].contains(&0) {
        return Err(req.invalid(format!("empty kernel {ws:?}")));
    }
    let mut dims = [FwdDim {
        l: 1,
        o: 1,
        k: 1,
        stride: 1,
        pad: 0,
        dil: 1,
    }; 3];
    for i in 0..ns {
        let (l, k, s, p, d) = (input.1.shape[2 + i], ws[2 + i], stride[i], padding[i], dilation[i]);
        let span = (d * (k - 1)) as i64;
        let o = if transposed {
            (l as i64 - 1) * s as i64 - 2 * p as i64 + span + output_padding[i] as i64 + 1
        } else {
            ((l + 2 * p) as i64 - span - 1).div_euclid(s as i64) + 1
        };
        dims[3 - ns + i] = FwdDim {
            l,
            o: o.max(0) as usize,
            k,
            stride: s,
            pad: p,
            dil: d,
        };
    }
    let mut want = vec![batch, cout_g * groups];
    want.extend(dims[3 - ns..].iter().map(|d| d.o));
    if grad_out.1.shape != want {
        return Err(req.invalid(format!("grad_output shape {:?}, expected {want:?}", grad_out.1.shape)));
    }
    let shapes = [input.1.shape.clone(), ws.clone(), vec![cout_g * groups]];
    let mut grads: [Option<(String, TensorMeta)>; 3] = [None, None, None];
    for (i, grad) in grads.iter_mut().enumerate() {
        match req.outputs.get(i) {
            Some(OutputSlot::Tensor(name)) => {
                let meta = req.tensor(name)?.clone();
                if meta.shape != shapes[i] || meta.dtype != dtype {
                    return Err(req.invalid(format!(
                        "output {i}: {} {:?}, expected {dtype} {:?}",
                        meta.dtype, meta.shape, shapes[i]
                    )));
                }
                *grad = Some((name.clone(), meta));
            }
            Some(OutputSlot::NonTensor) | None if !mask[i] => {}
            other => {
                return Err(req.invalid(format!("output {i} is {other:?} with output_mask {mask:?}")));
            }
        }
    }
    Ok(Backward {
        grad_out,
        input,
        weight,
        batch,
        groups,
        cin_g,
        cout_g,
        transposed,
        dims,
        grads,
    })
}

pub fn lower_with(req: &LowerRequest<'_>, target_name: TargetName, opts: &LowerOptions) -> Result<Lowered, LowerError> {
    let b = analyze(req)?;
    let target = target_name.params();
    let dev = device_dtype(b.input.1.dtype)
        .ok_or_else(|| req.unsupported(format!("{} has no device dtype", b.input.1.dtype)))?;
    let mut program = Program::new(target_name);
    for (name, meta) in [&b.grad_out, &b.input, &b.weight] {
        program.declare(name, dev, &meta.shape, HbmRole::Input);
    }
    for (name, meta) in b.grads.iter().flatten() {
        program.declare(name, dev, &meta.shape, HbmRole::Output);
    }
    let mut e = Emitter::new(program);
    let mut alloc = SbufAllocator::new(&target);
    if let Some(gi) = &b.grads[0] {
        conv::emit_conv(req, &grad_input_conv(&b, gi), &mut e, &mut alloc, &target, opts)?;
    }
    if let Some(gw) = &b.grads[1] {
        emit_grad_weight(req, &b, gw, &mut e, &mut alloc, &target, opts)?;
    }
    if let Some(gb) = &b.grads[2] {
        emit_grad_bias(&b, gb, dev, &mut e, &mut alloc, &target)?;
    }
    let mut lowered = Lowered::new(e.finish());
    // Gradients output_mask leaves out are None (known from the call alone).
    for (i, grad) in b.grads.iter().enumerate() {
        if grad.is_none() {
            lowered.values.insert(i, Value::None(()));
        }
    }
    Ok(lowered)
}

/// grad_input as the convolution [`conv::emit_conv`] runs: grad_output in, the forward weight,
/// the form (direct / transposed) flipped, input and output channels swapped.
fn grad_input_conv(b: &Backward, grad_input: &(String, TensorMeta)) -> Conv {
    let dims = b.dims.map(|d| {
        if b.transposed {
            // Forward y[i·s + k·d − p] += x[i]·w[k]: dx[i] = Σ_k dy[i·s + k·d − p]·w[k], a direct
            // convolution cropped to the input size.
            SDim::direct(d.o, d.l, d.k, d.stride, d.dil, d.pad as i64)
        } else {
            // Forward y[o] += x[o·s + k·d − p]·w[k]: dx is dy zero-inserted by s, padded by
            // d·(k−1) − p, correlated with the flipped kernel, sized like the input.
            SDim::transposed(d.o, d.l, d.k, d.stride, d.dil, d.pad as i64)
        }
    });
    Conv {
        input: b.grad_out.clone(),
        weight: b.weight.clone(),
        bias: None,
        out: grad_input.clone(),
        batch: b.batch,
        groups: b.groups,
        cin_g: b.cout_g,
        cout_g: b.cin_g,
        transposed: !b.transposed,
        dims,
    }
}

/// One K tile of grad_weight's contraction: batch entry `n`, depth `d`, rows `[h0, h0 + rows)`,
/// columns `[w0, w0 + cols)` of the contracted tensor `A`'s positions (row-major on partitions).
#[derive(Clone, Copy, Debug)]
struct PosTile {
    n: usize,
    d: usize,
    h0: usize,
    rows: usize,
    w0: usize,
    cols: usize,
}

/// grad_weight (see the module doc): per group, column tile of `(b, k)` and set of M tiles in
/// flight, every K tile of positions accumulates into the M tiles' PSUM banks.
fn emit_grad_weight(
    req: &LowerRequest<'_>,
    b: &Backward,
    grad_weight: &(String, TensorMeta),
    e: &mut Emitter,
    alloc: &mut SbufAllocator,
    target: &Target,
    opts: &LowerOptions,
) -> Result<(), LowerError> {
    let dev = device_dtype(b.input.1.dtype).ok_or_else(|| req.unsupported("no device dtype".into()))?;
    let pe = pe_dtype(req, b.input.1.dtype, opts)?;
    let esz = pe.size() as u64;
    // A: contracted with its channels as grad_weight's rows; B: im2col'd, channels × taps as columns.
    let (a_tensor, b_tensor, a_g, b_g) = if b.transposed {
        (&b.input, &b.grad_out, b.cin_g, b.cout_g)
    } else {
        (&b.grad_out, &b.input, b.cout_g, b.cin_g)
    };
    let a_size = b.dims.map(|d| if b.transposed { d.l } else { d.o });
    // B index of A position `pos` and tap `k`: pos·stride + k·dilation − padding (a direct
    // convolution's tap map, so `tap_range` gives the positions that read inside B).
    let taps = b.dims.map(|d| {
        let (l, o) = if b.transposed { (d.o, d.l) } else { (d.l, d.o) };
        SDim::direct(l, o, d.k, d.stride, d.dil, d.pad as i64)
    });
    let [td, th, tw] = taps;
    let kk = td.k * th.k * tw.k;
    let cols = b_g * kk;
    let (a_ch, b_ch) = (a_g * b.groups, b_g * b.groups);
    let a_sp: usize = a_size.iter().product();
    let b_sp = td.l * th.l * tw.l;
    if grad_weight.1.shape.iter().product::<usize>() == 0 {
        return Ok(());
    }

    let (rows_per_tile, cols_per_tile) = if a_size[2] <= TILE_K {
        ((TILE_K / a_size[2].max(1)).min(a_size[1]).max(1), a_size[2].max(1))
    } else {
        (1, TILE_K)
    };
    let mut tiles = Vec::new();
    for n in 0..if a_sp == 0 { 0 } else { b.batch } {
        for d in 0..a_size[0] {
            for h0 in (0..a_size[1]).step_by(rows_per_tile) {
                for w0 in (0..a_size[2]).step_by(cols_per_tile) {
                    let rows = rows_per_tile.min(a_size[1] - h0);
                    tiles.push(PosTile {
                        n,
                        d,
                        h0,
                        rows,
                        w0,
                        cols: cols_per_tile.min(a_size[2] - w0),
                    });
                }
            }
        }
    }

    let banks = target.psum_banks;
    let mt_count = a_g.div_ceil(TILE_M);
    let a_off = alloc.alloc(banks.min(mt_count) * TILE_M * esz as usize)?;
    let col_off = alloc.alloc(TILE_N * esz as usize)?;
    let out_off = alloc.alloc(TILE_N * dev.size().max(4))?;
    let bank_bytes = target.psum_bank_bytes as u64;

    for g in 0..b.groups {
        for j0 in (0..cols).step_by(TILE_N) {
            let nsz = TILE_N.min(cols - j0);
            // M tiles in flight together (one PSUM bank each) share every im2col tile.
            for mg in (0..mt_count).step_by(banks) {
                let mts = mg..(mg + banks).min(mt_count);
                let (m_lo, m_hi) = (mg * TILE_M, (mts.end * TILE_M).min(a_g));
                for (ti, t) in tiles.iter().enumerate() {
                    let ksz = t.rows * t.cols;
                    // Stationary: A[n, channels m_lo..m_hi, the tile's positions] transposed to
                    // [pos, channel] by the DMA (rows of the tile are contiguous when whole).
                    let src = AccessPattern::hbm(
                        &a_tensor.0,
                        dev,
                        ((t.n * a_ch + g * a_g + m_lo) * a_sp + (t.d * a_size[1] + t.h0) * a_size[2] + t.w0) as u64,
                        ksz,
                        1,
                        vec![[a_sp as i64, (m_hi - m_lo) as i64]],
                    );
                    let dst = AccessPattern::sbuf(pe, 0, ksz, a_off, vec![[1, (m_hi - m_lo) as i64]]);
                    e.push(Engine::Dma, dma(dst, src));
                    emit_im2col_tile(e, b_tensor, dev, pe, col_off, t, &taps, g, b_g, b_ch, b_sp, j0, nsz)?;
                    for mt in mts.clone() {
                        let msz = TILE_M.min(a_g - mt * TILE_M);
                        let bank = mt - mg;
                        let psum =
                            AccessPattern::psum(DType::F32, 0, msz, bank as u64 * bank_bytes, vec![[1, nsz as i64]]);
                        let stationary = AccessPattern::sbuf(
                            pe,
                            0,
                            ksz,
                            a_off + (bank * TILE_M) as u64 * esz,
                            vec![[1, msz as i64]],
                        );
                        let moving = AccessPattern::sbuf(pe, 0, ksz, col_off, vec![[1, nsz as i64]]);
                        let op = Op::NcMatmul(NcMatmul {
                            dst: psum,
                            stationary,
                            moving,
                            accumulate: ti > 0,
                            perf_mode: trnsim::MatmulPerfMode::None,
                        });
                        e.push(Engine::Tensor, op);
                    }
                }
                for mt in mts.clone() {
                    let msz = TILE_M.min(a_g - mt * TILE_M);
                    let bank = mt - mg;
                    let out_ap = AccessPattern::sbuf(dev, 0, msz, out_off, vec![[1, nsz as i64]]);
                    if tiles.is_empty() {
                        // Nothing to contract (empty batch or positions): the gradient is zero.
                        e.memset(Engine::Vector, out_ap.clone(), 0.0);
                    } else {
                        let psum =
                            AccessPattern::psum(DType::F32, 0, msz, bank as u64 * bank_bytes, vec![[1, nsz as i64]]);
                        let op = tile::copy(out_ap.clone(), psum);
                        e.push(Engine::Vector, op);
                    }
                    let dst = hbm_rows(&grad_weight.0, dev, (g * a_g + mt * TILE_M) * cols + j0, msz, cols, nsz);
                    e.push(Engine::Dma, dma(dst, out_ap));
                }
            }
        }
    }
    Ok(())
}

/// The moving operand of one grad_weight K tile: row `p` = position `p` of tile `t`, column
/// `j − j0` = `B[n, g·b_g + j / kk, pos·stride + tap(j % kk)·dilation − padding]` for the columns
/// `[j0, j0 + nsz)`, zero where the tap reads padding.
#[allow(clippy::too_many_arguments)]
fn emit_im2col_tile(
    e: &mut Emitter,
    b_tensor: &(String, TensorMeta),
    dev: DType,
    pe: DType,
    col_off: u64,
    t: &PosTile,
    taps: &[SDim; 3],
    g: usize,
    b_g: usize,
    b_ch: usize,
    b_sp: usize,
    j0: usize,
    nsz: usize,
) -> Result<(), LowerError> {
    let esz = pe.size() as u64;
    let [td, th, tw] = taps;
    let kk = td.k * th.k * tw.k;
    let ksz = t.rows * t.cols;
    let mut loads = Vec::new();
    let at = |d: &SDim, k: usize, o: usize| (o * d.cs + k * d.dil) as i64 - d.pl;
    for koff in 0..kk {
        // Channels b whose column b·kk + koff lies in [j0, j0 + nsz).
        let b0 = if j0 <= koff { 0 } else { (j0 - koff).div_ceil(kk) };
        let b1 = if j0 + nsz <= koff {
            0
        } else {
            ((j0 + nsz - 1 - koff) / kk + 1).min(b_g)
        };
        if b1 <= b0 {
            continue;
        }
        let (kd, kh, kw) = (koff / (th.k * tw.k), (koff / tw.k) % th.k, koff % tw.k);
        let (Some(_), Some(vw)) = (tap_range(td, kd, t.d, 1), tap_range(tw, kw, t.w0, t.cols)) else {
            continue;
        };
        let id = at(td, kd, t.d) as usize;
        let iw = at(tw, kw, vw.0) as usize;
        for h in t.h0..t.h0 + t.rows {
            if tap_range(th, kh, h, 1).is_none() {
                continue;
            }
            let ih = at(th, kh, h) as usize;
            let src = AccessPattern::hbm(
                &b_tensor.0,
                dev,
                ((t.n * b_ch + g * b_g + b0) * b_sp + (id * th.l + ih) * tw.l + iw) as u64,
                vw.1,
                tw.cs as i64,
                vec![[b_sp as i64, (b1 - b0) as i64]],
            );
            let dst = AccessPattern::sbuf(
                pe,
                (h - t.h0) * t.cols + (vw.0 - t.w0),
                vw.1,
                col_off + (b0 * kk + koff - j0) as u64 * esz,
                vec![[kk as i64, (b1 - b0) as i64]],
            );
            loads.push(dma(dst, src));
        }
    }
    // The loads write disjoint boxes; the padding (whatever they leave) must read as zero.
    let loaded: usize = loads
        .iter()
        .map(|op| {
            if let Op::DmaCopy(c) = op {
                c.dst.partitions * c.dst.free_elems()
            } else {
                0
            }
        })
        .sum();
    if loaded < ksz * nsz {
        let all = AccessPattern::sbuf(pe, 0, ksz, col_off, vec![[1, nsz as i64]]);
        e.memset(Engine::Gpsimd, all, 0.0);
    }
    for op in loads {
        e.push(Engine::Dma, op);
    }
    Ok(())
}

/// grad_bias[c] = Σ_{n, pos} grad_output[n, c, pos]: channels on the partitions, VectorE
/// `tensor_reduce(add)` per chunk (fp32 accumulator), chunks added in fp32, one cast at the end.
fn emit_grad_bias(
    b: &Backward,
    grad_bias: &(String, TensorMeta),
    dev: DType,
    e: &mut Emitter,
    alloc: &mut SbufAllocator,
    target: &Target,
) -> Result<(), LowerError> {
    let cout = b.cout_g * b.groups;
    let sp: usize = b.dims.iter().map(|d| d.o).product();
    // Chunks (first batch entry, batch entries, first position, positions), each ≤ BIAS_CHUNK.
    let mut chunks = Vec::new();
    if sp > 0 && sp <= BIAS_CHUNK {
        let per = BIAS_CHUNK / sp;
        for n0 in (0..b.batch).step_by(per) {
            chunks.push((n0, per.min(b.batch - n0), 0, sp));
        }
    } else if sp > 0 {
        for n in 0..b.batch {
            for s0 in (0..sp).step_by(BIAS_CHUNK) {
                chunks.push((n, 1, s0, BIAS_CHUNK.min(sp - s0)));
            }
        }
    }
    let parts = target.partitions;
    let buf_off = alloc.alloc(BIAS_CHUNK * dev.size())?;
    let acc_off = alloc.alloc(4)?;
    let part_off = alloc.alloc(4)?;
    let out_off = alloc.alloc(dev.size().max(4))?;
    for c0 in (0..cout).step_by(parts) {
        let csz = parts.min(cout - c0);
        let acc = AccessPattern::sbuf(DType::F32, 0, csz, acc_off, vec![[1, 1]]);
        let part = AccessPattern::sbuf(DType::F32, 0, csz, part_off, vec![[1, 1]]);
        if chunks.is_empty() {
            e.memset(Engine::Vector, acc.clone(), 0.0);
        }
        for (i, &(n0, ncount, s0, len)) in chunks.iter().enumerate() {
            let src = AccessPattern::hbm(
                &b.grad_out.0,
                dev,
                ((n0 * cout + c0) * sp + s0) as u64,
                csz,
                sp as i64,
                vec![[(cout * sp) as i64, ncount as i64], [1, len as i64]],
            );
            let buf = AccessPattern::sbuf(dev, 0, csz, buf_off, vec![[len as i64, ncount as i64], [1, len as i64]]);
            e.push(Engine::Dma, dma(buf.clone(), src));
            let dst = if i == 0 { acc.clone() } else { part.clone() };
            let reduce = Op::TensorReduce(TensorReduce {
                dst,
                src: buf,
                op: AluOp::Add,
                axes: 2,
                negate: false,
            });
            e.push(Engine::Vector, reduce);
            if i > 0 {
                let add = tt(acc.clone(), acc.clone(), part.clone(), AluOp::Add);
                e.push(Engine::Vector, add);
            }
        }
        let out = AccessPattern::sbuf(dev, 0, csz, out_off, vec![[1, 1]]);
        e.tensor_copy(Engine::Vector, out.clone(), acc);
        let dst = AccessPattern::hbm(&grad_bias.0, dev, c0 as u64, csz, 1, vec![[1, 1]]);
        e.push(Engine::Dma, dma(dst, out));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::OpCall;
    use crate::dtype::TorchDType;
    use crate::matmul::matmuls;
    use std::collections::BTreeMap;

    /// A 2d `convolution_backward` call: grad_output, input, weight of these shapes, stride 1,
    /// padding 1, groups 1, the given output_mask.
    fn lowered(go: &[usize], x: &[usize], w: &[usize], mask: [bool; 3]) -> Result<Lowered, LowerError> {
        let meta = |shape: &[usize]| TensorMeta::contiguous(TorchDType::F32, shape);
        let mut tensors = BTreeMap::from([
            ("input.0".to_string(), meta(go)),
            ("input.1".to_string(), meta(x)),
            ("input.2".to_string(), meta(w)),
        ]);
        let shapes = [x.to_vec(), w.to_vec(), vec![w[0]]];
        let mut outputs = Vec::new();
        for i in 0..3 {
            if mask[i] {
                tensors.insert(format!("output.{i}"), meta(&shapes[i]));
                outputs.push(Value::Tensor(format!("output.{i}")));
            } else {
                outputs.push(Value::None(()));
            }
        }
        let args = vec![
            Value::Tensor("input.0".into()),
            Value::Tensor("input.1".into()),
            Value::Tensor("input.2".into()),
            Value::Ints(vec![w[0] as i64]),
            Value::Ints(vec![1, 1]),
            Value::Ints(vec![1, 1]),
            Value::Ints(vec![1, 1]),
            Value::Bool(false),
            Value::Ints(vec![0, 0]),
            Value::Int(1),
            Value::Bools(mask.to_vec()),
        ];
        let call = OpCall {
            args,
            kwargs: BTreeMap::new(),
        };
        let req = LowerRequest {
            op: "convolution_backward",
            call: &call,
            tensors: &tensors,
            outputs: &crate::OutputSlot::of(&outputs),
        };
        lower_with(&req, TargetName::Trn1, &LowerOptions::default())
    }

    #[test]
    fn grad_weight_contracts_batch_and_positions_in_k_tiles() {
        // 2 batch entries × 12×12 positions: 128 / 12 = 10 rows per K tile → 2 tiles per entry.
        let l = lowered(&[2, 4, 12, 12], &[2, 3, 12, 12], &[4, 3, 3, 3], [false, true, false]).unwrap();
        let mms = matmuls(&l.program);
        assert_eq!(mms.len(), 4);
        assert_eq!(
            mms.iter().map(|m| m.moving.partitions).collect::<Vec<_>>(),
            vec![120, 24, 120, 24]
        );
        assert!(
            !mms[0].accumulate && mms[1..].iter().all(|m| m.accumulate),
            "one PSUM accumulation"
        );
        assert_eq!(
            (mms[0].stationary.free_elems(), mms[0].moving.free_elems()),
            (4, 27),
            "[Cout, Cin·kk]"
        );
        assert_eq!(l.values.get(&0), Some(&Value::None(())));
        assert_eq!(l.values.get(&2), Some(&Value::None(())));
        assert!(
            l.program
                .hbm
                .iter()
                .all(|t| t.name != "output.0" && t.name != "output.2"),
            "unrequested gradients are not declared"
        );
    }

    #[test]
    fn malformed_calls_are_typed_errors() {
        let bad_shape = lowered(&[1, 4, 5, 5], &[1, 3, 6, 6], &[4, 3, 3, 3], [true; 3]);
        assert!(matches!(bad_shape, Err(LowerError::Invalid { .. })), "{bad_shape:?}");
        let empty_kernel = lowered(&[1, 4, 8, 8], &[1, 3, 6, 6], &[4, 3, 0, 3], [true; 3]);
        assert!(
            matches!(empty_kernel, Err(LowerError::Invalid { .. })),
            "{empty_kernel:?}"
        );
        let bad_channels = lowered(&[1, 4, 6, 6], &[1, 2, 6, 6], &[4, 3, 3, 3], [true; 3]);
        assert!(
            matches!(bad_channels, Err(LowerError::Invalid { .. })),
            "{bad_channels:?}"
        );
    }
}
