//! The FFT family: `_fft_r2c` (real → onesided or full complex spectrum) and `_fft_c2r`
//! (onesided Hermitian spectrum → real signal), as DFT matmuls on TensorE.
//!
//! Complex tensors are their F32 real views `[..., 2]` (see `lower/mod.rs`). A multi-dim
//! transform is a chain of 1-D passes, each HBM → HBM (intermediates in HBM scratch tensors, in
//! the same real-view layout), like PyTorch's pocketfft: `_fft_r2c` transforms its last dim
//! real → complex and then the other dims complex → complex (forward); `_fft_c2r` transforms all
//! but its last dim complex → complex (inverse) and then the last dim Hermitian → real.
//!
//! One pass contracts the transformed dim on the partition axis: `out[k, b] = Σ_l W[l, k]·x[l, b]`
//! with `l` in K-tiles of ≤ 128 partitions (PSUM fp32 accumulation across tiles), `k` in tiles
//! of ≤ 128 (the stationary width), and the batch `b` (all other dims) on the free axis, ≤ 256
//! complex values (one 2 KiB PSUM bank of interleaved (re, im)). A complex product is four real
//! matmuls accumulating into the interleaved halves of the bank:
//! `re = C·xr + (−Wi)·xi`, `im = C·xi + Wi·xr`, where `W = C + i·Wi`.
//!
//! The DFT matrices are built on the engines, never on the host: GpSimd `iota` gives `l` per
//! partition and `k` along the free axis; VectorE forms `m = l·k` (exact: < 2^24) and reduces it
//! exactly modulo `N` to `r ∈ [−N/2, N/2]` (`q = round(m·(1/N))` by the cast to int32 on write,
//! `r = m − q·N`). Angles are then taken as quarter turns, `u = 4r` for sin and `4r + N` for cos
//! (`cos x = sin(x + π/2)`), folded into `[−N, N]` by `u → min(u, 2N − u)` and
//! `u → max(u, −2N − u)` (exact integer ops), so the ScalarE `sin` argument `φ = u·π/(2N)` stays
//! within `[−π/2, π/2]` — inside the hardware's valid `[−π, π]` — and `sin(0)`, `sin(±π/2)` are
//! exact. The twiddle index reduction needs `m·(1/N)` to round to the right integer, which holds
//! while `N² < 2^22` (N ≤ 2048). ScalarE rounds `x·scale` (the constant and the product) before
//! `sin`: twiddles are up to 1.2 units of 2^-24 from the exact values (N = 100, 501), against ½
//! for correctly rounded ones; docs/numerics.md "FFT accuracy" measures what that costs (little
//! next to the summation) and why a one-rounding argument is not used.
//!
//! Accuracy: the golden is PyTorch's fp32 pocketfft, itself up to ~3e-5 from the exact DFT on a
//! 1000-point transform, so a DFT here must be well inside the f32 tolerance of the exact result.
//! One running fp32 sum over 1000 products is not (`_fft_r2c::f32::stress_0`: 11 of 1002
//! elements out of tolerance; Cooley–Tukey splits emulated in numpy still left 1–7): the error
//! is the rounding of the long running sum. A contraction longer than 32 rows therefore sums
//! each 32-row slice in its own PSUM block (products of one slice in TensorE's fp32 order) and
//! adds the slice sums pairwise on VectorE, `[s0 + s1, s2 + s3, …]` level by level; all 16 golden
//! cases then pass. Contractions of ≤ 32 rows are one matmul chain. (Slicing from 32 rows rather
//! than from 128 takes the RMS error of a 100-point transform from 3.0 to 1.9 units of 2^-24 of
//! the RMS output, PyTorch's being 1.7: docs/numerics.md "FFT accuracy".)
//!
//! Norm modes (the `normalization` int): 0 none, 1 `1/√n`, 2 `1/n`, `n` the product of the
//! signal lengths; the fp32 factor multiplies the last pass's PSUM result on VectorE.

use super::tile;
use super::tile::{Emitter, SbufAllocator, dma, tt};
use super::{LowerError, LowerRequest, Lowered, complex_real_view_shape};
use crate::call::{TensorArg, TensorMeta};
use crate::dtype::TorchDType;
use trnsim::{
    AccessPattern, ActFunc, Activation, AffineSelect, AluOp, CmpOp, DType, Engine, HbmRole, Iota, NcMatmul, Op,
    Program, ScalarOperand, ScalarTensorTensor, Target, TargetName, TensorScalar,
};

/// Longest transform whose twiddle indices reduce exactly (see the module doc).
const MAX_TRANSFORM_LEN: usize = 2048;

/// Rows per separately summed slice of a long contraction (a compute operand of ≤ 32
/// partitions may start on partition 0, 32, 64 or 96).
const SLICE_ROWS: usize = 32;

/// Complex values per PSUM bank (2 KiB of interleaved fp32 pairs), the batch tile of a pass
/// with complex output; a real output holds twice as many.
const COMPLEX_PER_BANK: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Complex (or real) → complex, `W = e^{−2πi·lk/N}`.
    Forward,
    /// Complex → complex, `W = e^{+2πi·lk/N}`.
    Inverse,
    /// Onesided Hermitian spectrum → real: `x[n] = Σ_k w_k·Re(X_k·e^{+2πi·kn/N})` with `w_k = 2`
    /// except `w_0 = w_{N/2} = 1` (the mirrored half counted twice; the imaginary parts of the
    /// DC and Nyquist terms drop out, as in pocketfft).
    HermitianToReal,
}

/// One 1-D transform, HBM → HBM.
#[derive(Clone, Debug)]
struct Pass {
    src: String,
    src_complex: bool,
    /// Logical (complex) shape of the source.
    src_shape: Vec<usize>,
    dim: usize,
    /// Entries of the source along `dim` that are read (the first ones).
    contract: usize,
    /// Transform length `N` (the modulus of the twiddle indices).
    len: usize,
    dst: String,
    dst_complex: bool,
    /// Logical shape of the destination (`dst_shape[dim]` outputs, the first ones).
    dst_shape: Vec<usize>,
    kind: Kind,
    scale: f64,
}

impl Pass {
    /// A complex → complex pass of the whole of `dim` of `shape`, unscaled (the names are set when
    /// the passes are chained).
    fn complex(shape: &[usize], dim: usize, kind: Kind) -> Pass {
        Pass {
            src: String::new(),
            src_complex: true,
            src_shape: shape.to_vec(),
            dim,
            contract: shape[dim],
            len: shape[dim],
            dst: String::new(),
            dst_complex: true,
            dst_shape: shape.to_vec(),
            kind,
            scale: 1.0,
        }
    }
}

fn norm_scale(req: &LowerRequest<'_>, mode: i64, signal_numel: usize) -> Result<f64, LowerError> {
    match mode {
        0 => Ok(1.0),
        1 => Ok(1.0 / (signal_numel as f64).sqrt()),
        2 => Ok(1.0 / signal_numel as f64),
        other => Err(req.invalid(format!("normalization {other} (0 none, 1 by root n, 2 by n)"))),
    }
}

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (in_name, in_meta) = req.arg::<TensorArg>(0, "self")?;
    let out_name = req.output_tensor(0)?;
    let out_meta = req.tensor(out_name)?;
    let r2c = match req.op {
        "_fft_r2c" => true,
        "_fft_c2r" => false,
        other => return Err(LowerError::NotLowered(other.to_string())),
    };
    let (want_in, want_out) = if r2c {
        (TorchDType::F32, TorchDType::C64)
    } else {
        (TorchDType::C64, TorchDType::F32)
    };
    if in_meta.dtype != want_in || out_meta.dtype != want_out {
        return Err(req.unsupported(format!(
            "{} → {} (lowered: {want_in} → {want_out})",
            in_meta.dtype, out_meta.dtype
        )));
    }
    let shape = &in_meta.shape;
    // The transformed dims, wrapped and checked (distinct, at least one).
    if shape.is_empty() {
        return Err(req.arg_error(1, "dim", "a 0-d input has no dim to transform"));
    }
    let mut dims = Vec::new();
    for d in req.arg::<Vec<i64>>(1, "dim")? {
        let w = req.wrap_dim(1, "dim", d, shape.len())?;
        if dims.contains(&w) {
            return Err(req.arg_error(1, "dim", format!("dim {d} is repeated")));
        }
        dims.push(w);
    }
    let Some(&last) = dims.last() else {
        return Err(req.arg_error(1, "dim", "no dim to transform"));
    };
    let norm = req.arg::<i64>(2, "normalization")?;

    // The passes, and the output shape they imply.
    let mut passes: Vec<Pass> = Vec::new();
    let mut cur_shape = shape.clone();
    let scratch = |i: usize| format!("fft.scratch.{i}");
    let expected_out: Vec<usize>;
    if r2c {
        let onesided = req.arg::<bool>(3, "onesided")?;
        let n = shape[last];
        let mut next = cur_shape.clone();
        next[last] = if onesided { n / 2 + 1 } else { n };
        // The real input's last dim (cur_shape[last] = n), its first `next[last]` outputs.
        passes.push(Pass {
            src: in_name.to_string(),
            src_complex: false,
            dst_shape: next.clone(),
            ..Pass::complex(&cur_shape, last, Kind::Forward)
        });
        cur_shape = next;
        for &d in dims[..dims.len() - 1].iter().rev() {
            passes.push(Pass::complex(&cur_shape, d, Kind::Forward));
        }
        expected_out = cur_shape.clone();
        let numel: usize = dims.iter().map(|&d| shape[d]).product();
        let scale = norm_scale(req, norm, numel)?;
        passes.last_mut().expect("one pass at least").scale = scale;
    } else {
        let n = req.arg::<i64>(3, "last_dim_size")?;
        if n < 1 {
            return Err(req.invalid(format!("last_dim_size {n}")));
        }
        let n = n as usize;
        for &d in &dims[..dims.len() - 1] {
            passes.push(Pass::complex(&cur_shape, d, Kind::Inverse));
        }
        let mut out = cur_shape.clone();
        out[last] = n;
        passes.push(Pass {
            contract: cur_shape[last].min(n / 2 + 1),
            len: n,
            dst_complex: false,
            dst_shape: out.clone(),
            ..Pass::complex(&cur_shape, last, Kind::HermitianToReal)
        });
        expected_out = out;
        let numel: usize = dims[..dims.len() - 1].iter().map(|&d| shape[d]).product::<usize>() * n;
        let scale = norm_scale(req, norm, numel)?;
        passes.last_mut().expect("one pass at least").scale = scale;
    }
    if out_meta.shape != expected_out {
        return Err(req.invalid(format!("output shape {:?}, expected {expected_out:?}", out_meta.shape)));
    }
    // Chain the passes: input → scratch → … → output.
    let count = passes.len();
    for (i, pass) in passes.iter_mut().enumerate() {
        pass.src = if i == 0 { in_name.to_string() } else { scratch(i - 1) };
        pass.dst = if i + 1 == count {
            out_name.to_string()
        } else {
            scratch(i)
        };
    }

    let view = |meta: &TensorMeta| {
        if meta.dtype.is_complex() {
            complex_real_view_shape(&meta.shape)
        } else {
            meta.shape.clone()
        }
    };
    let mut program = Program::new(target);
    program.declare(in_name, DType::F32, &view(in_meta), HbmRole::Input);
    program.declare(out_name, DType::F32, &view(out_meta), HbmRole::Output);
    if out_meta.shape.contains(&0) {
        return Ok(Lowered::new(program));
    }
    if let Some(p) = passes.iter().find(|p| p.len > MAX_TRANSFORM_LEN) {
        return Err(req.unsupported(format!(
            "a transform of length {} (the exact twiddle index reduction holds up to {MAX_TRANSFORM_LEN})",
            p.len
        )));
    }
    for p in &passes[..count - 1] {
        program.declare(
            &p.dst,
            DType::F32,
            &complex_real_view_shape(&p.dst_shape),
            HbmRole::Scratch,
        );
    }
    let tgt = target.params();
    let mut e = Emitter::new(program);
    let mut bank = 0usize;
    for p in &passes {
        if p.src_shape.contains(&0) || p.contract == 0 {
            // Nothing to sum: an all-zero transform (only reachable with empty inputs, which
            // return above with an empty output).
            return Err(req.unsupported("a transform over an empty dim".into()));
        }
        emit_pass(&mut e, &tgt, p, &mut bank)?;
    }
    Ok(Lowered::new(e.finish()))
}

/// SBUF offsets of one pass's DFT matrices, `[l (partition) of chunk j, k]` at `(j·K + k)·4`.
struct Matrices {
    cos: u64,
    /// `Wi`, the imaginary part of `W`.
    im: u64,
    /// `−Wi`.
    neg_im: u64,
}

fn sb(offset: u64, partitions: usize, free: Vec<[i64; 2]>) -> AccessPattern {
    AccessPattern::sbuf(DType::F32, 0, partitions, offset, free)
}

fn tensor_scalar(dst: AccessPattern, src: AccessPattern, op0: AluOp, v0: f64, op1: Option<(AluOp, f64)>) -> Op {
    Op::TensorScalar(TensorScalar {
        dst,
        src,
        op0,
        operand0: ScalarOperand::Imm(v0),
        reverse0: false,
        op1: op1.map(|o| o.0),
        operand1: op1.map(|o| ScalarOperand::Imm(o.1)),
        reverse1: false,
    })
}

/// Builds `C = cos(2π·lk/N)`, `Wi = ±sin(2π·lk/N)` and `−Wi` for `l < contract`, `k < outputs`
/// on the engines (module doc), weighted per row for the Hermitian → real pass.
fn emit_matrices(e: &mut Emitter, alloc: &mut SbufAllocator, p: &Pass, outputs: usize) -> Result<Matrices, LowerError> {
    let chunks = p.contract.div_ceil(128);
    let kf = outputs as i64;
    let n = p.len as f64;
    let bytes = chunks * outputs * 4;
    let m = Matrices {
        cos: alloc.alloc(bytes)?,
        im: alloc.alloc(bytes)?,
        neg_im: alloc.alloc(bytes)?,
    };
    let row = outputs * 4;
    let (k_idx, l_idx, prod, quot, rem, tmp, angle, weight) = (
        alloc.alloc(row)?,
        alloc.alloc(4)?,
        alloc.alloc(row)?,
        alloc.alloc(row)?,
        alloc.alloc(row)?,
        alloc.alloc(row)?,
        alloc.alloc(row)?,
        alloc.alloc(8)?,
    );
    let flat = vec![[1, kf]];
    // Imaginary sign: forward e^{−iθ}, inverse and Hermitian → real e^{+iθ}.
    let sign = if p.kind == Kind::Forward { -1.0 } else { 1.0 };
    let quarter = std::f64::consts::PI / (2.0 * n);
    for j in 0..chunks {
        let l0 = 128 * j;
        let pl = (p.contract - l0).min(128);
        let at = |o: u64| sb(o, pl, flat.clone());
        let mat = |base: u64| sb(base + (j * row) as u64, pl, flat.clone());
        e.push(
            Engine::Gpsimd,
            Op::Iota(Iota {
                dst: at(k_idx),
                offset: 0,
                channel_multiplier: 0,
                pattern: vec![[1, kf]],
            }),
        );
        e.push(
            Engine::Gpsimd,
            Op::Iota(Iota {
                dst: sb(l_idx, pl, vec![[1, 1]]),
                offset: l0 as i64,
                channel_multiplier: 1,
                pattern: vec![[1, 1]],
            }),
        );
        // m = l·k, exact in fp32 (< 2^24).
        e.push(
            Engine::Vector,
            Op::TensorScalar(TensorScalar {
                dst: at(prod),
                src: at(k_idx),
                op0: AluOp::Multiply,
                operand0: ScalarOperand::Tile(sb(l_idx, pl, vec![[1, 1]])),
                reverse0: false,
                op1: None,
                operand1: None,
                reverse1: false,
            }),
        );
        // q = round(m/N) (the int32 cast on write rounds to nearest), r = m − q·N ∈ [−N/2, N/2].
        let quot_ap = AccessPattern::sbuf(DType::I32, 0, pl, quot, flat.clone());
        e.push(
            Engine::Vector,
            tensor_scalar(quot_ap.clone(), at(prod), AluOp::Multiply, 1.0 / n, None),
        );
        e.push(
            Engine::Vector,
            Op::ScalarTensorTensor(ScalarTensorTensor {
                dst: at(rem),
                src: quot_ap,
                op0: AluOp::Multiply,
                operand0: ScalarOperand::Imm(-n),
                op1: AluOp::Add,
                in1: at(prod),
                reverse0: false,
                reverse1: false,
            }),
        );
        // sin: u = 4r ∈ [−2N, 2N] folded into [−N, N].
        e.push(
            Engine::Vector,
            tensor_scalar(at(tmp), at(rem), AluOp::Multiply, -4.0, Some((AluOp::Add, 2.0 * n))),
        );
        e.push(
            Engine::Vector,
            Op::ScalarTensorTensor(ScalarTensorTensor {
                dst: at(prod),
                src: at(rem),
                op0: AluOp::Multiply,
                operand0: ScalarOperand::Imm(4.0),
                op1: AluOp::Min,
                in1: at(tmp),
                reverse0: false,
                reverse1: false,
            }),
        );
        e.push(
            Engine::Vector,
            tensor_scalar(at(tmp), at(prod), AluOp::Multiply, -1.0, Some((AluOp::Add, -2.0 * n))),
        );
        e.push(Engine::Vector, tt(at(angle), at(prod), at(tmp), AluOp::Max));
        for (base, s) in [(m.im, sign), (m.neg_im, -sign)] {
            e.push(
                Engine::Scalar,
                Op::Activation(Activation {
                    dst: mat(base),
                    func: ActFunc::Sin,
                    src: at(angle),
                    bias: None,
                    scale: ScalarOperand::Imm(s * quarter),
                    acc: Default::default(),
                    reduce_res: None,
                }),
            );
        }
        // cos: v = 4r + N ∈ [−N, 3N] folded into [−N, N] (min(v, 2N − v)).
        e.push(
            Engine::Vector,
            tensor_scalar(at(tmp), at(rem), AluOp::Multiply, -4.0, Some((AluOp::Add, n))),
        );
        e.push(
            Engine::Vector,
            tensor_scalar(at(prod), at(rem), AluOp::Multiply, 4.0, Some((AluOp::Add, n))),
        );
        e.push(Engine::Vector, tt(at(angle), at(prod), at(tmp), AluOp::Min));
        e.push(
            Engine::Scalar,
            Op::Activation(Activation {
                dst: mat(m.cos),
                func: ActFunc::Sin,
                src: at(angle),
                bias: None,
                scale: ScalarOperand::Imm(quarter),
                acc: Default::default(),
                reduce_res: None,
            }),
        );
        if p.kind == Kind::HermitianToReal {
            // Row weights: 2, but 1 for k = 0 and (N even) k = N/2; selected by the partition's
            // global row index with affine_select (no host values).
            let w = sb(weight, pl, vec![[1, 1]]);
            let w2 = sb(weight + 4, pl, vec![[1, 1]]);
            e.memset(Engine::Vector, w.clone(), 2.0);
            let mut cur = (w, w2);
            let mut rows_at_one = vec![0i64];
            if p.len.is_multiple_of(2) {
                rows_at_one.push(p.len as i64 / 2);
            }
            for r in rows_at_one {
                e.push(
                    Engine::Gpsimd,
                    Op::AffineSelect(AffineSelect {
                        dst: cur.1.clone(),
                        on_true: cur.0.clone(),
                        on_false: 1.0,
                        offset: l0 as i64 - r,
                        channel_multiplier: 1,
                        pattern: vec![[0, 1]],
                        cmp: CmpOp::NotEqual,
                    }),
                );
                cur = (cur.1, cur.0);
            }
            let wt = cur.0;
            for base in [m.cos, m.im, m.neg_im] {
                e.push(
                    Engine::Vector,
                    Op::TensorScalar(TensorScalar {
                        dst: mat(base),
                        src: mat(base),
                        op0: AluOp::Multiply,
                        operand0: ScalarOperand::Tile(wt.clone()),
                        reverse0: false,
                        op1: None,
                        operand1: None,
                        reverse1: false,
                    }),
                );
            }
        }
    }
    Ok(m)
}

/// Emits one 1-D pass (module doc).
fn emit_pass(e: &mut Emitter, tgt: &Target, p: &Pass, bank: &mut usize) -> Result<(), LowerError> {
    let d = p.dim;
    let c_in = if p.src_complex { 2 } else { 1 };
    let c_out = if p.dst_complex { 2 } else { 1 };
    let outer: usize = p.src_shape[..d].iter().product();
    let inner: usize = p.src_shape[d + 1..].iter().product();
    let src_len = p.src_shape[d];
    let outputs = p.dst_shape[d];
    let chunks = p.contract.div_ceil(128);
    let mut alloc = SbufAllocator::new(tgt);
    let m = emit_matrices(e, &mut alloc, p, outputs)?;

    // A contraction longer than one slice keeps the sums of its 32-row slices apart (one PSUM
    // column block each) and adds them pairwise on VectorE instead of chaining all rows into
    // one running fp32 sum (module doc: accuracy).
    let slices = if p.contract > SLICE_ROWS {
        p.contract.div_ceil(SLICE_ROWS)
    } else {
        1
    };
    let bank_f32 = tgt.psum_bank_bytes / 4;
    let bmax = if p.dst_complex {
        COMPLEX_PER_BANK
    } else {
        2 * COMPLEX_PER_BANK
    };
    let bmax = bmax.min(bank_f32 / (c_out * slices)).max(1);
    if c_out * slices > bank_f32 {
        return Err(LowerError::Resources(format!(
            "{slices} partial sums of a {}-row contraction do not fit one PSUM bank",
            p.contract
        )));
    }
    // Batch tiles: (first outer index, outer count, first inner index, inner count).
    let mut tiles = Vec::new();
    if inner <= bmax {
        let step = (bmax / inner).max(1);
        let mut o = 0;
        while o < outer {
            let to = step.min(outer - o);
            tiles.push((o, to, 0, inner));
            o += to;
        }
    } else {
        for o in 0..outer {
            let mut i = 0;
            while i < inner {
                let ti = bmax.min(inner - i);
                tiles.push((o, 1, i, ti));
                i += ti;
            }
        }
    }
    let data = alloc.alloc(chunks * bmax * c_in * 4)?;
    let result = alloc.alloc(bmax * c_out * 4)?;
    // Ping-pong buffers of the pairwise sum of the slice partials.
    let partials = if slices > 1 {
        Some((
            alloc.alloc(slices * bmax * c_out * 4)?,
            alloc.alloc(slices.div_ceil(2) * bmax * c_out * 4)?,
        ))
    } else {
        None
    };
    let hbm_free = |outer_stride: usize, to: usize, ti: usize, c: usize| {
        let mut f = vec![[outer_stride as i64, to as i64], [c as i64, ti as i64]];
        if c == 2 {
            f.push([1, 2]);
        }
        f
    };
    for &(o0, to, i0, ti) in &tiles {
        let b = to * ti;
        for j in 0..chunks {
            let l0 = 128 * j;
            let pl = (p.contract - l0).min(128);
            let off = ((o0 * src_len + l0) * inner + i0) * c_in;
            let free = hbm_free(src_len * inner * c_in, to, ti, c_in);
            let src = AccessPattern::hbm(&p.src, DType::F32, off as u64, pl, (inner * c_in) as i64, free);
            let dst = sb(data + (j * b * c_in * 4) as u64, pl, vec![[1, (b * c_in) as i64]]);
            e.push(Engine::Dma, dma(dst, src));
        }
        let mut k0 = 0;
        while k0 < outputs {
            let kt = (outputs - k0).min(128);
            let psum_off = (*bank % tgt.psum_banks * tgt.psum_bank_bytes) as u64;
            *bank += 1;
            // (output part, matrix, input part) products summed into each output part.
            let products: Vec<(usize, u64, usize)> = match (p.src_complex, p.dst_complex) {
                (true, true) => vec![(0, m.cos, 0), (0, m.neg_im, 1), (1, m.cos, 1), (1, m.im, 0)],
                (false, true) => vec![(0, m.cos, 0), (1, m.im, 0)],
                (true, false) => vec![(0, m.cos, 0), (0, m.neg_im, 1)],
                (false, false) => vec![(0, m.cos, 0)],
            };
            let bc = b * c_out;
            for part in 0..c_out {
                let part_products: Vec<(u64, usize)> =
                    products.iter().filter(|t| t.0 == part).map(|t| (t.1, t.2)).collect();
                // Row ranges summed by one matmul: whole K tiles chained in PSUM, or 32-row
                // slices (starting on partitions 0/32/64/96) each with its own PSUM block.
                let mut ranges = Vec::new();
                for j in 0..chunks {
                    let pl = (p.contract - 128 * j).min(128);
                    if slices == 1 {
                        ranges.push((j, 0, pl, 0));
                    } else {
                        for r0 in (0..pl).step_by(SLICE_ROWS) {
                            ranges.push((j, r0, (pl - r0).min(SLICE_ROWS), (128 * j + r0) / SLICE_ROWS));
                        }
                    }
                }
                for (n, &(mat, in_part)) in part_products.iter().enumerate() {
                    for (r, &(j, r0, rows, slice)) in ranges.iter().enumerate() {
                        let at = |base: u64, free| AccessPattern::sbuf(DType::F32, r0, rows, base, free);
                        let op = Op::NcMatmul(NcMatmul {
                            dst: AccessPattern::psum(
                                DType::F32,
                                0,
                                kt,
                                psum_off + ((slice * bc + part) * 4) as u64,
                                vec![[c_out as i64, b as i64]],
                            ),
                            stationary: at(mat + ((j * outputs + k0) * 4) as u64, vec![[1, kt as i64]]),
                            moving: at(
                                data + ((j * b * c_in + in_part) * 4) as u64,
                                vec![[c_in as i64, b as i64]],
                            ),
                            // Chained: every matmul after the first adds to the one sum; sliced:
                            // each slice's products add up in its own block.
                            accumulate: if slices == 1 { n > 0 || r > 0 } else { n > 0 },
                            perf_mode: trnsim::MatmulPerfMode::None,
                        });
                        e.push(Engine::Tensor, op);
                    }
                }
            }
            let out = sb(result, kt, vec![[1, bc as i64]]);
            let summed = match partials {
                None => AccessPattern::psum(DType::F32, 0, kt, psum_off, vec![[1, bc as i64]]),
                Some((ping, pong)) => {
                    let all = AccessPattern::psum(DType::F32, 0, kt, psum_off, vec![[1, (slices * bc) as i64]]);
                    e.tensor_copy(Engine::Vector, sb(ping, kt, vec![[1, (slices * bc) as i64]]), all);
                    let (mut from, mut to, mut count) = (ping, pong, slices);
                    while count > 1 {
                        // [p0 + p1, p2 + p3, …]; an odd last partial passes up unchanged.
                        let pairs = count / 2;
                        let pick = |first: usize| {
                            sb(
                                from + (first * bc * 4) as u64,
                                kt,
                                vec![[(2 * bc) as i64, pairs as i64], [1, bc as i64]],
                            )
                        };
                        e.push(
                            Engine::Vector,
                            tt(sb(to, kt, vec![[1, (pairs * bc) as i64]]), pick(0), pick(1), AluOp::Add),
                        );
                        if count % 2 == 1 {
                            e.tensor_copy(
                                Engine::Vector,
                                sb(to + (pairs * bc * 4) as u64, kt, vec![[1, bc as i64]]),
                                sb(from + ((count - 1) * bc * 4) as u64, kt, vec![[1, bc as i64]]),
                            );
                        }
                        count = pairs + count % 2;
                        std::mem::swap(&mut from, &mut to);
                    }
                    sb(from, kt, vec![[1, bc as i64]])
                }
            };
            let evacuate = if p.scale == 1.0 {
                tile::copy(out.clone(), summed)
            } else {
                tensor_scalar(out.clone(), summed, AluOp::Multiply, p.scale, None)
            };
            e.push(Engine::Vector, evacuate);
            let off = ((o0 * outputs + k0) * inner + i0) * c_out;
            let free = hbm_free(outputs * inner * c_out, to, ti, c_out);
            let dst = AccessPattern::hbm(&p.dst, DType::F32, off as u64, kt, (inner * c_out) as i64, free);
            e.push(Engine::Dma, dma(dst, out));
            k0 += kt;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{OpCall, Value};
    use std::collections::BTreeMap;
    use trnsim::HostTensor;

    /// Lowers `op(input.0, dims, norm, last)` with the given input and output metadata.
    fn lower_call(
        op: &str,
        input: TensorMeta,
        output: TensorMeta,
        dims: &[i64],
        norm: i64,
        last: Value,
    ) -> Result<Lowered, LowerError> {
        let call = OpCall {
            args: vec![
                Value::Tensor("input.0".into()),
                Value::Ints(dims.to_vec()),
                Value::Int(norm),
                last,
            ],
            kwargs: BTreeMap::new(),
        };
        let tensors = BTreeMap::from([("input.0".to_string(), input), ("output.0".to_string(), output)]);
        let outputs = [Value::Tensor("output.0".into())];
        let req = LowerRequest {
            op,
            call: &call,
            tensors: &tensors,
            outputs: &crate::OutputSlot::of(&outputs),
        };
        lower(&req, TargetName::Trn1).map(crate::schedule)
    }

    /// `_fft_r2c` of an f32 `[n]` signal into `[out]` bins (dim 0, no normalization).
    fn r2c_1d(n: usize, out: usize, onesided: bool) -> Lowered {
        let (x, y) = (
            TensorMeta::contiguous(TorchDType::F32, &[n]),
            TensorMeta::contiguous(TorchDType::C64, &[out]),
        );
        lower_call("_fft_r2c", x, y, &[0], 0, Value::Bool(onesided)).unwrap()
    }

    fn run(lowered: &Lowered, input: HostTensor) -> Vec<f32> {
        let inputs = BTreeMap::from([("input.0".to_string(), input)]);
        let ex = trnsim::Executor::new(TargetName::Trn1);
        let run = ex.run(&lowered.program, &inputs).expect("the program runs");
        run.outputs["output.0"].to_f32()
    }

    #[test]
    fn bad_calls_are_typed_errors() {
        let (x, y) = (
            TensorMeta::contiguous(TorchDType::F32, &[4, 6]),
            TensorMeta::contiguous(TorchDType::C64, &[4, 4]),
        );
        let invalid = |r: Result<Lowered, LowerError>| matches!(r, Err(LowerError::Invalid { .. }));
        let unsupported = |r: Result<Lowered, LowerError>| matches!(r, Err(LowerError::Unsupported { .. }));
        let r2c = |dims: &[i64], norm: i64, onesided: bool| {
            lower_call("_fft_r2c", x.clone(), y.clone(), dims, norm, Value::Bool(onesided))
        };
        assert!(invalid(r2c(&[2], 0, true)), "dim out of range");
        assert!(invalid(r2c(&[1, 1], 0, true)), "repeated dim");
        assert!(invalid(r2c(&[1], 3, true)), "norm mode");
        assert!(invalid(r2c(&[1], 0, false)), "output shape");
        assert!(r2c(&[1], 0, true).is_ok());
        let half = TensorMeta::contiguous(TorchDType::F16, &[4, 6]);
        assert!(
            unsupported(lower_call("_fft_r2c", half, y, &[1], 0, Value::Bool(true))),
            "f16 input"
        );
        let long = (
            TensorMeta::contiguous(TorchDType::F32, &[4096]),
            TensorMeta::contiguous(TorchDType::C64, &[2049]),
        );
        assert!(
            unsupported(lower_call("_fft_r2c", long.0, long.1, &[0], 0, Value::Bool(true))),
            "length 4096"
        );
        let (z, w) = (
            TensorMeta::contiguous(TorchDType::C64, &[5]),
            TensorMeta::contiguous(TorchDType::F32, &[8]),
        );
        assert!(
            invalid(lower_call("_fft_c2r", z.clone(), w.clone(), &[0], 0, Value::Int(0))),
            "last_dim_size 0"
        );
        assert!(lower_call("_fft_c2r", z, w, &[0], 0, Value::Int(8)).is_ok());
    }

    /// The spectrum of an impulse at n = 1 is the twiddle row `e^{−2πik/N}` itself: the matrices
    /// the engines build match f64 cos/sin, and quarter turns are exact.
    #[test]
    fn engine_built_twiddles() {
        let n = 12;
        let lowered = r2c_1d(n, n, false);
        let mut impulse = vec![0.0f32; n];
        impulse[1] = 1.0;
        let out = run(&lowered, HostTensor::from_f32(&[n], &impulse));
        for k in 0..n {
            let theta = -2.0 * std::f64::consts::PI * k as f64 / n as f64;
            let (re, im) = (out[2 * k] as f64, out[2 * k + 1] as f64);
            assert!(
                (re - theta.cos()).abs() < 1e-7 && (im - theta.sin()).abs() < 1e-7,
                "k={k}: {re} {im}"
            );
            if k % 3 == 0 {
                assert!(re.abs() == 1.0 || re == 0.0, "quarter turn k={k}: re {re}");
                assert!(im.abs() == 1.0 || im == 0.0, "quarter turn k={k}: im {im}");
            }
        }
    }

    /// A contraction of 200 rows (7 slices of ≤ 32 rows, an odd count) sums every row once: the
    /// spectrum of a ramp `x[n] = n` has `X_0 = Σ n` exactly and `X_k = −N/(1 − e^{−2πik/N})`.
    #[test]
    fn sliced_long_contraction() {
        let n = 200;
        let lowered = r2c_1d(n, n / 2 + 1, true);
        let ramp: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let out = run(&lowered, HostTensor::from_f32(&[n], &ramp));
        assert_eq!((out[0], out[1]), (19900.0, 0.0));
        for k in 1..=n / 2 {
            let theta = -2.0 * std::f64::consts::PI * k as f64 / n as f64;
            // −N / (1 − e^{iθ}) = −N·(1 − cos θ + i sin θ) / |1 − e^{iθ}|²
            let d = (1.0 - theta.cos()).powi(2) + theta.sin().powi(2);
            let (re, im) = (-(n as f64) * (1.0 - theta.cos()) / d, -(n as f64) * theta.sin() / d);
            let err = ((out[2 * k] as f64 - re).powi(2) + (out[2 * k + 1] as f64 - im).powi(2)).sqrt();
            // fp32 rounding relative to Σ|x| = 19900; a lost or doubled slice is off by thousands.
            assert!(
                err < 1e-6 * 19900.0,
                "k={k}: ({}, {}) vs ({re}, {im})",
                out[2 * k],
                out[2 * k + 1]
            );
        }
    }

    /// Hermitian → real: a DC term of 8 over N = 8 with norm "by n" is the constant 1, and the
    /// imaginary parts of the DC and Nyquist terms are ignored.
    #[test]
    fn hermitian_to_real_weights() {
        let lowered = lower_call(
            "_fft_c2r",
            TensorMeta::contiguous(TorchDType::C64, &[5]),
            TensorMeta::contiguous(TorchDType::F32, &[8]),
            &[0],
            2,
            Value::Int(8),
        )
        .unwrap();
        let spectrum = [8.0, 5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.0];
        let out = run(&lowered, HostTensor::from_f32(&[5, 2], &spectrum));
        assert_eq!(out, vec![1.0; 8]);
        // X_1 = 4 contributes 2·4·cos(2πn/8)/8 = cos(2πn/8).
        let spectrum = [0.0, 0.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let out = run(&lowered, HostTensor::from_f32(&[5, 2], &spectrum));
        for (i, v) in out.iter().enumerate() {
            let want = (2.0 * std::f64::consts::PI * i as f64 / 8.0).cos();
            assert!((*v as f64 - want).abs() < 1e-7, "n={i}: {v} vs {want}");
        }
    }
}
