//! `convolution` (forward; 1d/2d/3d, stride, padding, dilation, groups, transposed with
//! output_padding) as TensorE matmuls: **shifted-window accumulation in PSUM**.
//!
//! Every case is normalised to 3 spatial dims (1d → `[1, 1, W]`, 2d → `[1, H, W]`). For each
//! batch entry, group, and output tile (one output depth × `r` rows × `c` columns, `r·c ≤ 512` =
//! one PSUM bank of fp32):
//! * the **input window** the tile needs (all input channels of the group, K tiles of ≤ 128 on
//!   the partitions) is built in SBUF: a `memset 0` of the whole window (the zero padding), then
//!   one DMA of the valid input box into it — with a destination step of `stride` per input
//!   element for transposed convolutions (zero insertion), so every out-of-range tap reads a
//!   zero that the memset wrote;
//! * for each K tile and each kernel offset `(kd, kh, kw)` one `nc_matmul`: stationary = the
//!   weights `[Cin_g (K), Cout_g (M ≤ 128)]` of that offset (the whole weight of the group is
//!   loaded once, transposed by the DMA access pattern — bit-exact), moving = the window shifted
//!   by `offset · dilation` with free steps `stride` (a strided SBUF access pattern, no copy),
//!   all accumulated into the same PSUM bank (`accumulate = true` after the first);
//! * PSUM → SBUF on VectorE with `+ bias` (a per-partition fp32 operand) and the cast to the
//!   output dtype on that write; DMA out.
//!
//! A transposed convolution is the direct convolution of the zero-inserted input (step `stride`)
//! padded by `dilation·(k−1) − padding` (left) and `… + output_padding` (right) with the flipped
//! kernel, `Cin`/`Cout` swapped per group: the same program with a different window and weight
//! index map.
//!
//! **Few input channels** (`Cin_g < 128`, not transposed, kernel larger than 1×1, e.g. the
//! ResNet-50 stem with 3 channels): the shifted-window form would run one matmul per kernel
//! offset with only `Cin_g` of the 128 PE rows busy, so the kernel offsets are folded into the
//! contraction instead (`emit_im2col`): contraction row `koff·Cin_g + ci` of the moving tile holds
//! what tap `koff` of channel `ci` reads for each output position, written by one strided DMA per
//! (kernel offset, K tile) after a `memset 0` (the padding); one matmul per K tile of 128 rows.
//!
//! Numerics are those of `mm` (docs in `matmul.rs`): fp32 stays fp32 unless
//! [`LowerOptions::auto_cast`](super::matmul::LowerOptions) rounds operands to bf16; integer
//! (int64 → int32) cases run in fp32, exact while every partial sum stays within ±2²⁴.

use super::matmul::{LowerOptions, TILE_K, TILE_M, TILE_N, pe_dtype};
use super::tile;
use super::tile::{Emitter, SbufAllocator, dma, ts};
use super::{LowerError, LowerRequest, Lowered, device_dtype};
use crate::call::{TensorArg, TensorMeta};
use crate::dtype::TorchDType;
use trnsim::{AccessPattern, AluOp, DType, Engine, HbmRole, NcMatmul, Op, Program, ScalarOperand, TargetName};

/// One spatial dim of the equivalent direct convolution.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SDim {
    /// Input size.
    pub(crate) l: usize,
    /// Output size.
    pub(crate) o: usize,
    /// Kernel size.
    pub(crate) k: usize,
    /// Conv stride (1 for transposed).
    pub(crate) cs: usize,
    pub(crate) dil: usize,
    /// Zero insertion factor (stride for transposed, else 1).
    pub(crate) up: usize,
    /// Left padding in virtual (upsampled, padded) coordinates; may be negative (cropping).
    pub(crate) pl: i64,
    pub(crate) flip: bool,
}

impl SDim {
    /// The size-1 dim that pads 1d/2d cases up to 3 spatial dims.
    pub(crate) const UNIT: SDim = SDim {
        l: 1,
        o: 1,
        k: 1,
        cs: 1,
        dil: 1,
        up: 1,
        pl: 0,
        flip: false,
    };

    /// A direct convolution's dim: output position `o` reads input `o·stride + k·dil − pad`.
    pub(crate) fn direct(l: usize, o: usize, k: usize, stride: usize, dil: usize, pad: i64) -> SDim {
        SDim {
            l,
            o,
            k,
            cs: stride,
            dil,
            up: 1,
            pl: pad,
            flip: false,
        }
    }

    /// A transposed convolution's dim in the direct form: the input zero-inserted by `stride`,
    /// padded by `dil·(k−1) − pad`, correlated with the flipped kernel.
    pub(crate) fn transposed(l: usize, o: usize, k: usize, stride: usize, dil: usize, pad: i64) -> SDim {
        SDim {
            l,
            o,
            k,
            cs: 1,
            dil,
            up: stride,
            pl: (dil * (k - 1)) as i64 - pad,
            flip: true,
        }
    }
}

/// A convolution in the form [`emit_conv`] runs. `weight` is laid out `[Cout, Cin_g, k…]`, or
/// `[Cin, Cout_g, k…]` when `transposed` (PyTorch's layouts for the two forms).
pub(crate) struct Conv {
    pub(crate) input: (String, TensorMeta),
    pub(crate) weight: (String, TensorMeta),
    pub(crate) bias: Option<(String, TensorMeta)>,
    pub(crate) out: (String, TensorMeta),
    pub(crate) batch: usize,
    pub(crate) groups: usize,
    pub(crate) cin_g: usize,
    pub(crate) cout_g: usize,
    pub(crate) transposed: bool,
    /// Depth, height, width (1d/2d cases padded with [`SDim::UNIT`] in front).
    pub(crate) dims: [SDim; 3],
}

fn analyze(req: &LowerRequest<'_>) -> Result<Conv, LowerError> {
    if req.op != "convolution" {
        return Err(LowerError::NotLowered(req.op.to_string()));
    }
    let owned = |(t, m): TensorArg| (t.to_string(), m.clone());
    let input = req.arg(0, "input").map(owned)?;
    let weight = req.arg(1, "weight").map(owned)?;
    let bias = req.opt(2, "bias")?.map(owned);
    let nd = input.1.shape.len();
    if !(3..=5).contains(&nd) || weight.1.shape.len() != nd {
        return Err(req.unsupported(format!("input {:?} / weight {:?}", input.1.shape, weight.1.shape)));
    }
    let ns = nd - 2;
    let stride = req.sizes_n(3, "stride", ns)?;
    let padding = req.sizes_n(4, "padding", ns)?;
    let dilation = req.sizes_n(5, "dilation", ns)?;
    let transposed = req.arg::<bool>(6, "transposed")?;
    let output_padding = req.sizes_n(7, "output_padding", ns)?;
    let groups = req.arg::<i64>(8, "groups")?;
    let groups = usize::try_from(groups)
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| req.arg_error(8, "groups", format!("{groups} (at least 1)")))?;
    let out_name = req.output_tensor(0)?.to_string();
    let out_meta = req.tensor(&out_name)?.clone();
    for t in [&input.1, &weight.1].into_iter().chain(bias.as_ref().map(|b| &b.1)) {
        if t.dtype != out_meta.dtype {
            return Err(req.invalid(format!("mixed dtypes {} / {}", t.dtype, out_meta.dtype)));
        }
        if t.dtype.is_complex() || t.dtype == TorchDType::Bool {
            return Err(req.unsupported(format!("{} convolution", t.dtype)));
        }
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
    let mut dims = [SDim::UNIT; 3];
    for i in 0..ns {
        let (l, k, s, p, d) = (input.1.shape[2 + i], ws[2 + i], stride[i], padding[i], dilation[i]);
        let span = d * (k - 1);
        dims[3 - ns + i] = if transposed {
            let o =
                ((l as i64 - 1) * s as i64 - 2 * p as i64 + span as i64 + output_padding[i] as i64 + 1).max(0) as usize;
            SDim::transposed(l, o, k, s, d, p as i64)
        } else {
            let o = ((l + 2 * p) as i64 - span as i64 - 1).div_euclid(s as i64) + 1;
            SDim::direct(l, o.max(0) as usize, k, s, d, p as i64)
        };
    }
    let mut want = vec![batch, cout_g * groups];
    want.extend(dims[3 - ns..].iter().map(|d| d.o));
    if out_meta.shape != want {
        return Err(req.invalid(format!("output shape {:?}, expected {want:?}", out_meta.shape)));
    }
    Ok(Conv {
        input,
        weight,
        bias,
        out: (out_name, out_meta),
        batch,
        groups,
        cin_g,
        cout_g,
        transposed,
        dims,
    })
}

pub fn lower_with(req: &LowerRequest<'_>, target: TargetName, opts: &LowerOptions) -> Result<Lowered, LowerError> {
    let c = analyze(req)?;
    Ok(Lowered::new(emit(req, &c, target, opts)?))
}

/// The valid input index range `[lo, hi]` of a dim for a window of `b` virtual positions starting
/// at `v0`, and the window position of `lo`.
fn valid_range(d: &SDim, v0: i64, b: usize) -> Option<(usize, usize, usize)> {
    let up = d.up as i64;
    let lo = (v0 - d.pl).max(0);
    let lo = (lo + up - 1).div_euclid(up);
    let hi = (v0 + b as i64 - 1 - d.pl).div_euclid(up).min(d.l as i64 - 1);
    if hi < lo {
        return None;
    }
    let pos = lo * up + d.pl - v0;
    Some((lo as usize, (hi - lo + 1) as usize, pos as usize))
}

fn emit(req: &LowerRequest<'_>, c: &Conv, target_name: TargetName, opts: &LowerOptions) -> Result<Program, LowerError> {
    let target = target_name.params();
    let mut program = Program::new(target_name);
    let dev = |d: TorchDType| device_dtype(d).ok_or_else(|| req.unsupported(format!("{d} has no device dtype")));
    let in_dev = dev(c.input.1.dtype)?;
    let out_dev = dev(c.out.1.dtype)?;
    program.declare(&c.input.0, in_dev, &c.input.1.shape, HbmRole::Input);
    if c.weight.0 != c.input.0 {
        program.declare(&c.weight.0, in_dev, &c.weight.1.shape, HbmRole::Input);
    }
    if let Some((name, meta)) = &c.bias
        && *name != c.input.0
        && *name != c.weight.0
    {
        program.declare(name, in_dev, &meta.shape, HbmRole::Input);
    }
    program.declare(&c.out.0, out_dev, &c.out.1.shape, HbmRole::Output);
    let mut e = Emitter::new(program);
    let mut alloc = SbufAllocator::new(&target);
    emit_conv(req, c, &mut e, &mut alloc, &target, opts)?;
    Ok(e.finish())
}

/// Appends the instructions of convolution `c` to `e` (its HBM tensors already declared), with
/// SBUF from `alloc`. Shared with `convolution_backward`, whose grad_input is a convolution of
/// grad_output with the forward weight.
pub(crate) fn emit_conv(
    req: &LowerRequest<'_>,
    c: &Conv,
    e: &mut Emitter,
    alloc: &mut SbufAllocator,
    target: &trnsim::Target,
    opts: &LowerOptions,
) -> Result<(), LowerError> {
    let dev = |d: TorchDType| device_dtype(d).ok_or_else(|| req.unsupported(format!("{d} has no device dtype")));
    let in_dev = dev(c.input.1.dtype)?;
    let out_dev = dev(c.out.1.dtype)?;
    if c.out.1.shape.iter().product::<usize>() == 0 {
        return Ok(());
    }
    if c.cin_g == 0 {
        return Err(req.unsupported("zero input channels".into()));
    }
    let pe = pe_dtype(req, c.input.1.dtype, opts)?;
    let esz = pe.size() as u64;
    let [dd, dh, dw] = c.dims;
    let kk = dd.k * dh.k * dw.k;
    if !c.transposed && kk > 1 && c.cin_g < TILE_K {
        return emit_im2col(c, e, alloc, target, pe, in_dev, out_dev);
    }
    let kt_count = c.cin_g.div_ceil(TILE_K);
    let mt_count = c.cout_g.div_ceil(TILE_M);
    // Output tile: one depth, r rows × cw columns.
    let (r, cw) = if dw.o <= TILE_N {
        ((TILE_N / dw.o).min(dh.o), dw.o)
    } else {
        (1, TILE_N)
    };
    let bd = dd.dil * (dd.k - 1) + 1;
    let bh = (r - 1) * dh.cs + dh.dil * (dh.k - 1) + 1;
    let bw = (cw - 1) * dw.cs + dw.dil * (dw.k - 1) + 1;
    let win = bd * bh * bw;

    let w_bytes = (c.cout_g * kk) as u64 * esz;
    let w_off = alloc.alloc((kt_count as u64 * w_bytes) as usize)?;
    let win_off = alloc.alloc(kt_count * win * esz as usize)?;
    let bias_off = alloc.alloc(mt_count * 4)?;
    let out_off = alloc.alloc(TILE_N * out_dev.size().max(4))?;
    let out_bufs = OutBufs {
        dev: out_dev,
        out_off,
        bias_off,
    };
    let mut bank = 0usize;
    let in_sp = dd.l * dh.l * dw.l;
    let cin = c.cin_g * c.groups;

    for g in 0..c.groups {
        // Weights of the group: per K tile, SBUF [ci, co, koff].
        for kt in 0..kt_count {
            let (k0, ksz) = (kt * TILE_K, TILE_K.min(c.cin_g - kt * TILE_K));
            let src = if c.transposed {
                AccessPattern::hbm(
                    &c.weight.0,
                    in_dev,
                    (((g * c.cin_g + k0) * c.cout_g) * kk) as u64,
                    ksz,
                    (c.cout_g * kk) as i64,
                    vec![[1, (c.cout_g * kk) as i64]],
                )
            } else {
                AccessPattern::hbm(
                    &c.weight.0,
                    in_dev,
                    (((g * c.cout_g) * c.cin_g + k0) * kk) as u64,
                    ksz,
                    kk as i64,
                    vec![[(c.cin_g * kk) as i64, c.cout_g as i64], [1, kk as i64]],
                )
            };
            let dst = AccessPattern::sbuf(
                pe,
                0,
                ksz,
                w_off + kt as u64 * w_bytes,
                vec![[1, (c.cout_g * kk) as i64]],
            );
            e.push(Engine::Dma, dma(dst, src));
        }
        load_bias(e, c, g, in_dev, &out_bufs);
        for n in 0..c.batch {
            for od in 0..dd.o {
                for oh0 in (0..dh.o).step_by(r) {
                    let rr = r.min(dh.o - oh0);
                    for ow0 in (0..dw.o).step_by(cw) {
                        let cc = cw.min(dw.o - ow0);
                        // Input windows, one per K tile.
                        let v0 = [(od * dd.cs) as i64, (oh0 * dh.cs) as i64, (ow0 * dw.cs) as i64];
                        let ranges = [
                            valid_range(&dd, v0[0], bd),
                            valid_range(&dh, v0[1], bh),
                            valid_range(&dw, v0[2], bw),
                        ];
                        for kt in 0..kt_count {
                            let (k0, ksz) = (kt * TILE_K, TILE_K.min(c.cin_g - kt * TILE_K));
                            let woff = win_off + (kt * win) as u64 * esz;
                            let all = AccessPattern::sbuf(pe, 0, ksz, woff, vec![[1, win as i64]]);
                            e.memset(Engine::Gpsimd, all, 0.0);
                            if let [Some(rd), Some(rh), Some(rw)] = ranges {
                                let src = AccessPattern::hbm(
                                    &c.input.0,
                                    in_dev,
                                    ((n * cin + g * c.cin_g + k0) * in_sp + (rd.0 * dh.l + rh.0) * dw.l + rw.0) as u64,
                                    ksz,
                                    in_sp as i64,
                                    vec![
                                        [(dh.l * dw.l) as i64, rd.1 as i64],
                                        [dw.l as i64, rh.1 as i64],
                                        [1, rw.1 as i64],
                                    ],
                                );
                                let dst = AccessPattern::sbuf(
                                    pe,
                                    0,
                                    ksz,
                                    woff + ((rd.2 * bh + rh.2) * bw + rw.2) as u64 * esz,
                                    vec![
                                        [(dd.up * bh * bw) as i64, rd.1 as i64],
                                        [(dh.up * bw) as i64, rh.1 as i64],
                                        [dw.up as i64, rw.1 as i64],
                                    ],
                                );
                                e.push(Engine::Dma, dma(dst, src));
                            }
                        }
                        for mt in 0..mt_count {
                            let (m0, msz) = (mt * TILE_M, TILE_M.min(c.cout_g - mt * TILE_M));
                            let nsz = rr * cc;
                            let psum_off = (bank * target.psum_bank_bytes) as u64;
                            bank = (bank + 1) % target.psum_banks;
                            let psum = AccessPattern::psum(DType::F32, 0, msz, psum_off, vec![[1, nsz as i64]]);
                            let mut first = true;
                            for kt in 0..kt_count {
                                let ksz = TILE_K.min(c.cin_g - kt * TILE_K);
                                let woff = win_off + (kt * win) as u64 * esz;
                                for id in 0..dd.k {
                                    for ih in 0..dh.k {
                                        for iw in 0..dw.k {
                                            let fk = |d: &SDim, i: usize| {
                                                if d.flip { d.k - 1 - i } else { i }
                                            };
                                            let koff = (fk(&dd, id) * dh.k + fk(&dh, ih)) * dw.k + fk(&dw, iw);
                                            let stationary = AccessPattern::sbuf(
                                                pe,
                                                0,
                                                ksz,
                                                w_off + kt as u64 * w_bytes + (m0 * kk + koff) as u64 * esz,
                                                vec![[kk as i64, msz as i64]],
                                            );
                                            let mv_off =
                                                ((id * dd.dil) * bh * bw + (ih * dh.dil) * bw + iw * dw.dil) as u64;
                                            let moving = AccessPattern::sbuf(
                                                pe,
                                                0,
                                                ksz,
                                                woff + mv_off * esz,
                                                vec![[(dh.cs * bw) as i64, rr as i64], [dw.cs as i64, cc as i64]],
                                            );
                                            let op = Op::NcMatmul(NcMatmul {
                                                dst: psum.clone(),
                                                stationary,
                                                moving,
                                                accumulate: !first,
                                                perf_mode: trnsim::MatmulPerfMode::None,
                                            });
                                            first = false;
                                            e.push(Engine::Tensor, op);
                                        }
                                    }
                                }
                            }
                            let tile = OutTile {
                                n,
                                g,
                                mt,
                                m0,
                                msz,
                                od,
                                oh0,
                                ow0,
                                rr,
                                cc,
                            };
                            store_out_tile(e, c, psum, &out_bufs, &tile);
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// The SBUF buffers every output tile passes through: the cast output tile and the per-M-tile
/// fp32 bias columns.
struct OutBufs {
    dev: DType,
    out_off: u64,
    bias_off: u64,
}

/// One output tile: batch `n`, group `g`, output channels `[m0, m0 + msz)` of the group (M tile
/// `mt`), and at depth `od` the rows `[oh0, oh0 + rr)` × columns `[ow0, ow0 + cc)`.
struct OutTile {
    n: usize,
    g: usize,
    mt: usize,
    m0: usize,
    msz: usize,
    od: usize,
    oh0: usize,
    ow0: usize,
    rr: usize,
    cc: usize,
}

/// Loads group `g`'s bias (if any) as fp32 columns, one per M tile, for [`store_out_tile`].
fn load_bias(e: &mut Emitter, c: &Conv, g: usize, in_dev: DType, bufs: &OutBufs) {
    let Some((bname, _)) = &c.bias else { return };
    for mt in 0..c.cout_g.div_ceil(TILE_M) {
        let (m0, msz) = (mt * TILE_M, TILE_M.min(c.cout_g - mt * TILE_M));
        let src = AccessPattern::hbm(bname, in_dev, (g * c.cout_g + m0) as u64, msz, 1, vec![[1, 1]]);
        let dst = AccessPattern::sbuf(DType::F32, 0, msz, bufs.bias_off + mt as u64 * 4, vec![[1, 1]]);
        e.push(Engine::Dma, dma(dst, src));
    }
}

/// Evacuates an output tile's PSUM accumulator: VectorE copies it to SBUF with the cast to the
/// output dtype (adding the bias column on the way when there is one), then one DMA writes it
/// to its place in the HBM output.
fn store_out_tile(e: &mut Emitter, c: &Conv, psum: AccessPattern, bufs: &OutBufs, t: &OutTile) {
    let [dd, dh, dw] = c.dims;
    let out_sp = dd.o * dh.o * dw.o;
    let cout = c.cout_g * c.groups;
    let out_ap = AccessPattern::sbuf(bufs.dev, 0, t.msz, bufs.out_off, vec![[1, (t.rr * t.cc) as i64]]);
    let op = match &c.bias {
        None => tile::copy(out_ap.clone(), psum),
        Some(_) => {
            let bias = AccessPattern::sbuf(DType::F32, 0, t.msz, bufs.bias_off + t.mt as u64 * 4, vec![[1, 1]]);
            ts(out_ap.clone(), psum, AluOp::Add, ScalarOperand::Tile(bias), None)
        }
    };
    e.push(Engine::Vector, op);
    let dst = AccessPattern::hbm(
        &c.out.0,
        bufs.dev,
        ((t.n * cout + t.g * c.cout_g + t.m0) * out_sp + (t.od * dh.o + t.oh0) * dw.o + t.ow0) as u64,
        t.msz,
        out_sp as i64,
        vec![[dw.o as i64, t.rr as i64], [1, t.cc as i64]],
    );
    e.push(Engine::Dma, dma(dst, out_ap));
}

/// For a direct convolution dim (`up = 1`): the output positions `[lo, lo + n)` within the tile
/// `[o0, o0 + len)` whose tap `k` reads inside the input (`i = o·cs + k·dil − pl ∈ [0, l)`), as
/// `(lo, n)`; `None` when every one reads padding.
pub(crate) fn tap_range(d: &SDim, k: usize, o0: usize, len: usize) -> Option<(usize, usize)> {
    let off = (k * d.dil) as i64 - d.pl;
    let cs = d.cs as i64;
    let lo = if off >= 0 { 0 } else { (-off + cs - 1) / cs };
    let hi = (d.l as i64 - 1 - off).div_euclid(cs);
    let (lo, hi) = (lo.max(o0 as i64), hi.min((o0 + len) as i64 - 1));
    (hi >= lo).then(|| (lo as usize, (hi - lo + 1) as usize))
}

/// Few input channels (the PE array's 128 rows would sit mostly idle with one matmul per kernel
/// offset): fold the kernel offsets into the contraction instead. Contraction row
/// `j = koff·Cin_g + ci` holds, for the output tile, the input values tap `koff` of channel `ci`
/// reads — an im2col done by DMA access patterns (one DMA per kernel offset and K tile: channels
/// on the partitions, output rows/columns as strided free dims), zero padding by a `memset` of
/// the tile first. One `nc_matmul` per K tile of 128 rows then covers every offset.
fn emit_im2col(
    c: &Conv,
    e: &mut Emitter,
    alloc: &mut SbufAllocator,
    target: &trnsim::Target,
    pe: DType,
    in_dev: DType,
    out_dev: DType,
) -> Result<(), LowerError> {
    let esz = pe.size() as u64;
    let [dd, dh, dw] = c.dims;
    let kk = dd.k * dh.k * dw.k;
    let rows = c.cin_g * kk;
    let kt_count = rows.div_ceil(TILE_K);
    let mt_count = c.cout_g.div_ceil(TILE_M);
    let (r, cw) = if dw.o <= TILE_N {
        ((TILE_N / dw.o).min(dh.o), dw.o)
    } else {
        (1, TILE_N)
    };
    let w_bytes = c.cout_g as u64 * esz;
    let w_off = alloc.alloc((kt_count as u64 * w_bytes) as usize)?;
    let col_off = alloc.alloc(kt_count * TILE_N * esz as usize)?;
    let bias_off = alloc.alloc(mt_count * 4)?;
    let out_off = alloc.alloc(TILE_N * out_dev.size().max(4))?;
    let out_bufs = OutBufs {
        dev: out_dev,
        out_off,
        bias_off,
    };
    let mut bank = 0usize;
    let in_sp = dd.l * dh.l * dw.l;
    let cin = c.cin_g * c.groups;
    // Kernel offset → (kd, kh, kw).
    let taps: Vec<[usize; 3]> = (0..kk)
        .map(|koff| [koff / (dh.k * dw.k), (koff / dw.k) % dh.k, koff % dw.k])
        .collect();
    // The contiguous range of rows j in K tile kt for offset koff: (ci0, count, partition).
    let chunks = |kt: usize| -> Vec<(usize, usize, usize, usize)> {
        let (j0, j1) = (kt * TILE_K, ((kt + 1) * TILE_K).min(rows));
        (0..kk)
            .filter_map(|koff| {
                let (a, b) = ((koff * c.cin_g).max(j0), ((koff + 1) * c.cin_g).min(j1));
                (a < b).then(|| (koff, a - koff * c.cin_g, b - a, a - j0))
            })
            .collect()
    };
    let valid = tap_range;
    for g in 0..c.groups {
        for kt in 0..kt_count {
            for (koff, ci0, cnt, p) in chunks(kt) {
                let src = AccessPattern::hbm(
                    &c.weight.0,
                    in_dev,
                    ((g * c.cout_g * c.cin_g + ci0) * kk + koff) as u64,
                    cnt,
                    kk as i64,
                    vec![[(c.cin_g * kk) as i64, c.cout_g as i64]],
                );
                let mut dst = AccessPattern::sbuf(pe, p, cnt, w_off + kt as u64 * w_bytes, vec![[1, c.cout_g as i64]]);
                dst.start_partition = p;
                e.push(Engine::Dma, dma(dst, src));
            }
        }
        load_bias(e, c, g, in_dev, &out_bufs);
        for n in 0..c.batch {
            for od in 0..dd.o {
                for oh0 in (0..dh.o).step_by(r) {
                    let rr = r.min(dh.o - oh0);
                    for ow0 in (0..dw.o).step_by(cw) {
                        let cc = cw.min(dw.o - ow0);
                        let nsz = rr * cc;
                        for kt in 0..kt_count {
                            let ksz = TILE_K.min(rows - kt * TILE_K);
                            let coff = col_off + (kt * TILE_N) as u64 * esz;
                            let all = AccessPattern::sbuf(pe, 0, ksz, coff, vec![[1, nsz as i64]]);
                            e.memset(Engine::Gpsimd, all, 0.0);
                            for (koff, ci0, cnt, p) in chunks(kt) {
                                let [kd, kh, kw] = taps[koff];
                                let (Some(vd), Some(vh), Some(vw)) =
                                    (valid(&dd, kd, od, 1), valid(&dh, kh, oh0, rr), valid(&dw, kw, ow0, cc))
                                else {
                                    continue;
                                };
                                let at = |d: &SDim, k: usize, o: usize| (o * d.cs + k * d.dil) as i64 - d.pl;
                                let (id, ih, iw) = (at(&dd, kd, vd.0), at(&dh, kh, vh.0), at(&dw, kw, vw.0));
                                let src = AccessPattern::hbm(
                                    &c.input.0,
                                    in_dev,
                                    ((n * cin + g * c.cin_g + ci0) * in_sp) as u64
                                        + ((id as usize * dh.l + ih as usize) * dw.l + iw as usize) as u64,
                                    cnt,
                                    in_sp as i64,
                                    vec![[(dh.cs * dw.l) as i64, vh.1 as i64], [dw.cs as i64, vw.1 as i64]],
                                );
                                let mut dst = AccessPattern::sbuf(
                                    pe,
                                    0,
                                    cnt,
                                    coff + (((vh.0 - oh0) * cc + (vw.0 - ow0)) as u64) * esz,
                                    vec![[cc as i64, vh.1 as i64], [1, vw.1 as i64]],
                                );
                                dst.start_partition = p;
                                e.push(Engine::Dma, dma(dst, src));
                            }
                        }
                        for mt in 0..mt_count {
                            let (m0, msz) = (mt * TILE_M, TILE_M.min(c.cout_g - mt * TILE_M));
                            let psum_off = (bank * target.psum_bank_bytes) as u64;
                            bank = (bank + 1) % target.psum_banks;
                            let psum = AccessPattern::psum(DType::F32, 0, msz, psum_off, vec![[1, nsz as i64]]);
                            for kt in 0..kt_count {
                                let ksz = TILE_K.min(rows - kt * TILE_K);
                                let stationary = AccessPattern::sbuf(
                                    pe,
                                    0,
                                    ksz,
                                    w_off + kt as u64 * w_bytes + m0 as u64 * esz,
                                    vec![[1, msz as i64]],
                                );
                                let moving = AccessPattern::sbuf(
                                    pe,
                                    0,
                                    ksz,
                                    col_off + (kt * TILE_N) as u64 * esz,
                                    vec![[1, nsz as i64]],
                                );
                                let op = Op::NcMatmul(NcMatmul {
                                    dst: psum.clone(),
                                    stationary,
                                    moving,
                                    accumulate: kt > 0,
                                    perf_mode: trnsim::MatmulPerfMode::None,
                                });
                                e.push(Engine::Tensor, op);
                            }
                            let tile = OutTile {
                                n,
                                g,
                                mt,
                                m0,
                                msz,
                                od,
                                oh0,
                                ow0,
                                rr,
                                cc,
                            };
                            store_out_tile(e, c, psum, &out_bufs, &tile);
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
