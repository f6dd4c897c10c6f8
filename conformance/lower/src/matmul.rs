//! Matrix products on TensorE: `mm`, `bmm`, `addmm`.
//!
//! `out[b] = A[b] @ B[b]` (`A` `[M, K]`, `B` `[K, N]`), lowered the way the PE array computes:
//! * the contraction runs on the **partition axis** in K tiles of ≤ 128; the stationary operand is
//!   `Aᵀ` tiles `[K ≤ 128, M ≤ 128]`, the moving operand `B` tiles `[K ≤ 128, N ≤ 512]` (one PSUM
//!   bank of 512 fp32 per output block);
//! * K tiles accumulate in PSUM in fp32 (`accumulate = false` for the first K tile, `true` after);
//!   PSUM banks rotate over the 8 banks so consecutive blocks do not wait on each other;
//! * PSUM → SBUF on VectorE (`tensor_copy`, or `tensor_scalar`/`scalar_tensor_tensor` for
//!   addmm's `alpha`/`beta`), with the **cast to the output dtype on that write**, then DMA out;
//! * **`Aᵀ` is loaded by a transposing DMA access pattern** (HBM rows 1 element apart, free step
//!   `K` elements): a bit-exact copy, so NaN/Inf in `A` reach only the outputs PyTorch's matmul
//!   puts them in (`0·Inf = NaN` and `x + NaN = NaN` inside the dot products, as IEEE says). A
//!   TensorE identity-matmul transpose (`nc_transpose`) would instead turn a NaN anywhere in a
//!   column into a whole NaN row (NaN·0) and an Inf into NaN everywhere but its own position
//!   (docs/isa.md §5.2), so it is not used;
//! * dtypes: fp32 stays fp32 on TensorE (4× the cycles of bf16) unless [`LowerOptions::auto_cast`]
//!   is [`AutoCast::Matmult`]: then fp32 operands are rounded to bf16 (RNE) by the loading DMA,
//!   like neuronx-cc's `--auto-cast matmult --auto-cast-type bf16`; accumulation stays fp32 and
//!   the output stays fp32. Off by default (the conformance suite runs without it: PyTorch's fp32
//!   tolerance would reject bf16 inputs);
//! * integers: TensorE has no integer datapath (docs/isa.md §4.4). int32 (and int64 narrowed to
//!   int32) operands are converted to fp32 by the loading DMA and multiplied in fp32: **exact only
//!   while every product and partial sum stays within ±2²⁴**; the PSUM → SBUF copy converts back
//!   to int32 (round to nearest even, saturating). Cases outside that range are expected failures
//!   (hardware-limitation);
//! * `addmm(input, mat1, mat2, beta, alpha) = beta·input + alpha·(mat1 @ mat2)`: `input` is
//!   broadcast to `[M, N]` by its DMA access pattern (stride 0) and converted to fp32; with
//!   `beta = 0` it is not read at all (PyTorch ignores it, NaN included). The epilogue is one
//!   VectorE `scalar_tensor_tensor`: `(psum · alpha) + beta·input`, rounded once to the output.
//!
//! Nothing is computed on the host.

use super::binary::Scalar;
use super::tile::{self, Emitter, SbufAllocator, dma, hbm_cols, hbm_rows, ts};
use super::{LowerError, LowerRequest, Lowered, device_dtype};
use crate::call::{TensorArg, TensorMeta};
use crate::dtype::TorchDType;
use trnsim::{
    AccessPattern, AluOp, DType, Engine, HbmRole, NcMatmul, Op, Program, ScalarOperand, ScalarTensorTensor, TargetName,
};

/// neuronx-cc's `--auto-cast`: which fp32 operands are rounded to a narrower type first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AutoCast {
    /// fp32 stays fp32 (the default: what PyTorch computes).
    #[default]
    None,
    /// `--auto-cast matmult --auto-cast-type bf16`: fp32 matmul/convolution operands are rounded
    /// to bf16 (RNE) before TensorE; accumulation (PSUM) and the output stay fp32.
    Matmult,
}

/// Options of the lowering that are not part of the ATen call (compiler flags). Passed
/// explicitly through [`super::lower_request_with_options`]; the registry's plain entry points
/// use [`LowerOptions::default`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LowerOptions {
    pub auto_cast: AutoCast,
    /// The compiler's `--native-int64` (`trnconf run --native-int64`): int64 tensors stay int64
    /// on the device for the ops of [`super::int64`] instead of being narrowed to int32. Needs a
    /// target with the `native_int64` capability (NC-v3+); refused on others.
    pub native_int64: bool,
}

/// Stationary free size (M) and moving free size (N) limits of TensorE, and K (partitions).
pub(super) const TILE_K: usize = 128;
pub(super) const TILE_M: usize = 128;
pub(super) const TILE_N: usize = 512;

/// The dtype TensorE reads an operand of case dtype `d` as (the loading DMA converts).
pub(super) fn pe_dtype(req: &LowerRequest<'_>, d: TorchDType, opts: &LowerOptions) -> Result<DType, LowerError> {
    let dev = device_dtype(d).ok_or_else(|| req.unsupported(format!("{d} has no device dtype")))?;
    Ok(match dev {
        DType::F32 if opts.auto_cast == AutoCast::Matmult => DType::Bf16,
        DType::F32 | DType::Bf16 | DType::F16 => dev,
        DType::I32 | DType::I16 | DType::I8 | DType::U8 => DType::F32,
        other => return Err(req.unsupported(format!("{other:?} operands on TensorE"))),
    })
}

struct Call {
    a: (String, TensorMeta),
    b: (String, TensorMeta),
    /// addmm's `input`, with beta ≠ 0.
    c: Option<(String, TensorMeta)>,
    alpha: f64,
    beta: f64,
    out: (String, TensorMeta),
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
}

fn analyze(req: &LowerRequest<'_>) -> Result<Call, LowerError> {
    let out_name = req.output_tensor(0)?.to_string();
    let out_meta = req.tensor(&out_name)?.clone();
    let int_out = out_meta.dtype.is_int();
    let owned = |(t, m): TensorArg| (t.to_string(), m.clone());
    let (a, b, c, alpha, beta) = match req.op {
        "mm" | "bmm" => (
            req.arg(0, "self").map(owned)?,
            req.arg(1, "mat2").map(owned)?,
            None,
            1.0,
            0.0,
        ),
        "addmm" => {
            let c = req.arg(0, "self").map(owned)?;
            let beta = req.arg_or(3, "beta", Scalar::Int(1))?;
            let alpha = req.arg_or(4, "alpha", Scalar::Int(1))?;
            for (pos, name, s) in [(3, "beta", beta), (4, "alpha", alpha)] {
                if int_out && matches!(s, Scalar::Float(_)) {
                    return Err(req.arg_error(pos, name, "a float needs a floating-point result"));
                }
            }
            (
                req.arg(1, "mat1").map(owned)?,
                req.arg(2, "mat2").map(owned)?,
                Some(c),
                alpha.as_f64(),
                beta.as_f64(),
            )
        }
        _ => return Err(LowerError::NotLowered(req.op.to_string())),
    };
    let rank = if req.op == "bmm" { 3 } else { 2 };
    if a.1.shape.len() != rank || b.1.shape.len() != rank {
        return Err(req.invalid(format!(
            "{} expects {rank}-d operands, got {:?} and {:?}",
            req.op, a.1.shape, b.1.shape
        )));
    }
    for t in [&a.1, &b.1].into_iter().chain(c.as_ref().map(|c| &c.1)) {
        if t.dtype != out_meta.dtype {
            return Err(req.invalid(format!(
                "{} needs equal dtypes, got {} and {}",
                req.op, t.dtype, out_meta.dtype
            )));
        }
        if t.dtype.is_complex() || t.dtype == TorchDType::Bool {
            return Err(req.unsupported(format!("{} matmul", t.dtype)));
        }
    }
    let (batch, m, k) = if rank == 3 {
        (a.1.shape[0], a.1.shape[1], a.1.shape[2])
    } else {
        (1, a.1.shape[0], a.1.shape[1])
    };
    let (bb, k2, n) = if rank == 3 {
        (b.1.shape[0], b.1.shape[1], b.1.shape[2])
    } else {
        (1, b.1.shape[0], b.1.shape[1])
    };
    if bb != batch || k2 != k {
        return Err(req.invalid(format!(
            "shapes {:?} and {:?} cannot be multiplied",
            a.1.shape, b.1.shape
        )));
    }
    let want: Vec<usize> = if rank == 3 { vec![batch, m, n] } else { vec![m, n] };
    if out_meta.shape != want {
        return Err(req.invalid(format!("output shape {:?}, expected {want:?}", out_meta.shape)));
    }
    if let Some(c) = &c
        && tile::broadcast_shapes(&c.1.shape, &want).as_deref() != Some(&want[..])
    {
        return Err(req.invalid(format!("`self` {:?} does not broadcast to {want:?}", c.1.shape)));
    }
    let c = if beta == 0.0 { None } else { c };
    Ok(Call {
        a,
        b,
        c,
        alpha,
        beta,
        out: (out_name, out_meta),
        batch,
        m,
        k,
        n,
    })
}

pub fn lower_with(req: &LowerRequest<'_>, target: TargetName, opts: &LowerOptions) -> Result<Lowered, LowerError> {
    let call = analyze(req)?;
    Ok(Lowered::new(emit(req, &call, target, opts)?))
}

fn emit(
    req: &LowerRequest<'_>,
    call: &Call,
    target_name: TargetName,
    opts: &LowerOptions,
) -> Result<Program, LowerError> {
    let target = target_name.params();
    let mut program = Program::new(target_name);
    let dev = |d: TorchDType| device_dtype(d).ok_or_else(|| req.unsupported(format!("{d} has no device dtype")));
    let a_dev = dev(call.a.1.dtype)?;
    let b_dev = dev(call.b.1.dtype)?;
    let out_dev = dev(call.out.1.dtype)?;
    program.declare(&call.a.0, a_dev, &call.a.1.shape, HbmRole::Input);
    if call.b.0 != call.a.0 {
        program.declare(&call.b.0, b_dev, &call.b.1.shape, HbmRole::Input);
    }
    if let Some((name, meta)) = &call.c
        && *name != call.a.0
        && *name != call.b.0
    {
        program.declare(name, dev(meta.dtype)?, &meta.shape, HbmRole::Input);
    }
    program.declare(&call.out.0, out_dev, &call.out.1.shape, HbmRole::Output);
    // addmm with an unused (beta = 0) input still declares it, so the case's inputs all exist.
    if req.op == "addmm" && call.c.is_none() {
        let (name, meta) = req.arg::<TensorArg>(0, "self")?;
        if name != call.a.0 && name != call.b.0 {
            program.declare(name, dev(meta.dtype)?, &meta.shape, HbmRole::Input);
        }
    }
    let (batch, m, k, n) = (call.batch, call.m, call.k, call.n);
    if batch == 0 || m == 0 || n == 0 {
        return Ok(program);
    }
    let pe = pe_dtype(req, call.a.1.dtype, opts)?;
    let esz = pe.size();
    let kt_count = k.div_ceil(TILE_K);
    let mut alloc = SbufAllocator::new(&target);
    let mut e = Emitter::new(program);

    // Aᵀ for a whole batch entry when it fits (loaded once), else per (M tile, N tile).
    let mt_count = m.div_ceil(TILE_M);
    let at_cached = kt_count * mt_count * TILE_M * esz <= 128 * 1024;
    let at_bytes = if at_cached {
        kt_count * mt_count * TILE_M * esz
    } else {
        kt_count * TILE_M * esz
    };
    let at_off = alloc.alloc(at_bytes.max(1))?;
    let b_off = alloc.alloc((kt_count * TILE_N * esz).max(1))?;
    let c_off = alloc.alloc(TILE_N * 4)?;
    let out_off = alloc.alloc(TILE_N * out_dev.size().max(4))?;
    let zero_off = if k == 0 { Some(alloc.alloc(TILE_N * 4)?) } else { None };
    let n_out_per_batch = (m * n) as u64;
    let mut bank = 0usize;
    let banks = target.psum_banks;
    let bank_bytes = target.psum_bank_bytes as u64;

    if let Some(z) = zero_off {
        let ap = AccessPattern::sbuf(DType::F32, 0, TILE_M.min(m), z, vec![[1, TILE_N.min(n) as i64]]);
        e.memset(Engine::Vector, ap, 0.0);
    }

    let at_tile_off = |kt: usize, mt: usize| -> u64 {
        let idx = if at_cached { kt * mt_count + mt } else { kt };
        at_off + (idx * TILE_M * esz) as u64
    };
    let load_at = |e: &mut Emitter, bi: usize, mt: usize| {
        let (m0, msz) = (mt * TILE_M, TILE_M.min(m - mt * TILE_M));
        for kt in 0..kt_count {
            let (k0, ksz) = (kt * TILE_K, TILE_K.min(k - kt * TILE_K));
            let src = hbm_cols(&call.a.0, a_dev, bi * m * k + m0 * k + k0, ksz, k, msz);
            let dst = AccessPattern::sbuf(pe, 0, ksz, at_tile_off(kt, mt), vec![[1, msz as i64]]);
            e.push(Engine::Dma, dma(dst, src));
        }
    };

    for bi in 0..batch {
        if at_cached && k > 0 {
            for mt in 0..mt_count {
                load_at(&mut e, bi, mt);
            }
        }
        for nt in 0..n.div_ceil(TILE_N) {
            let (n0, nsz) = (nt * TILE_N, TILE_N.min(n - nt * TILE_N));
            for kt in 0..kt_count {
                let (k0, ksz) = (kt * TILE_K, TILE_K.min(k - kt * TILE_K));
                let src = hbm_rows(&call.b.0, b_dev, bi * k * n + k0 * n + n0, ksz, n, nsz);
                let dst = AccessPattern::sbuf(pe, 0, ksz, b_off + (kt * TILE_N * esz) as u64, vec![[1, nsz as i64]]);
                e.push(Engine::Dma, dma(dst, src));
            }
            for mt in 0..mt_count {
                let (m0, msz) = (mt * TILE_M, TILE_M.min(m - mt * TILE_M));
                if !at_cached && k > 0 {
                    load_at(&mut e, bi, mt);
                }
                let psum_off = bank as u64 * bank_bytes;
                bank = (bank + 1) % banks;
                let product = if k == 0 {
                    AccessPattern::sbuf(DType::F32, 0, msz, zero_off.unwrap_or(0), vec![[1, nsz as i64]])
                } else {
                    for kt in 0..kt_count {
                        let ksz = TILE_K.min(k - kt * TILE_K);
                        let op = Op::NcMatmul(NcMatmul {
                            dst: AccessPattern::psum(DType::F32, 0, msz, psum_off, vec![[1, nsz as i64]]),
                            stationary: AccessPattern::sbuf(pe, 0, ksz, at_tile_off(kt, mt), vec![[1, msz as i64]]),
                            moving: AccessPattern::sbuf(
                                pe,
                                0,
                                ksz,
                                b_off + (kt * TILE_N * esz) as u64,
                                vec![[1, nsz as i64]],
                            ),
                            accumulate: kt > 0,
                            perf_mode: trnsim::MatmulPerfMode::None,
                        });
                        e.push(Engine::Tensor, op);
                    }
                    AccessPattern::psum(DType::F32, 0, msz, psum_off, vec![[1, nsz as i64]])
                };
                let out_ap = AccessPattern::sbuf(out_dev, 0, msz, out_off, vec![[1, nsz as i64]]);
                match &call.c {
                    None => {
                        let op = if call.alpha == 1.0 {
                            tile::copy(out_ap.clone(), product)
                        } else {
                            ts(
                                out_ap.clone(),
                                product,
                                AluOp::Multiply,
                                ScalarOperand::Imm(call.alpha),
                                None,
                            )
                        };
                        e.push(Engine::Vector, op);
                    }
                    Some((cname, cmeta)) => {
                        // input broadcast to [M, N] (row = m, column = n), converted to fp32.
                        let want = [m, n];
                        let strides = tile::broadcast_strides(&cmeta.shape, &want);
                        let c_ap = AccessPattern::hbm(
                            cname,
                            dev(cmeta.dtype)?,
                            (m0 as i64 * strides[0] + n0 as i64 * strides[1]) as u64,
                            msz,
                            strides[0],
                            vec![[strides[1], nsz as i64]],
                        );
                        let c_sb = AccessPattern::sbuf(DType::F32, 0, msz, c_off, vec![[1, nsz as i64]]);
                        e.push(Engine::Dma, dma(c_sb.clone(), c_ap));
                        if call.beta != 1.0 {
                            let op = ts(
                                c_sb.clone(),
                                c_sb.clone(),
                                AluOp::Multiply,
                                ScalarOperand::Imm(call.beta),
                                None,
                            );
                            e.push(Engine::Vector, op);
                        }
                        let op = Op::ScalarTensorTensor(ScalarTensorTensor {
                            dst: out_ap.clone(),
                            src: product,
                            op0: AluOp::Multiply,
                            operand0: ScalarOperand::Imm(call.alpha),
                            op1: AluOp::Add,
                            in1: c_sb,
                            reverse0: false,
                            reverse1: false,
                        });
                        e.push(Engine::Vector, op);
                    }
                }
                let dst = AccessPattern::hbm(
                    &call.out.0,
                    out_dev,
                    bi as u64 * n_out_per_batch + (m0 * n + n0) as u64,
                    msz,
                    n as i64,
                    vec![[1, nsz as i64]],
                );
                e.push(Engine::Dma, dma(dst, out_ap));
            }
        }
    }
    Ok(e.finish())
}

/// The program's `nc_matmul`s in order (for the tests' checks of the K tiling).
#[cfg(test)]
pub(crate) fn matmuls(p: &Program) -> Vec<&NcMatmul> {
    p.instructions
        .iter()
        .filter_map(|i| if let Op::NcMatmul(m) = &i.op { Some(m) } else { None })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Value;
    use std::collections::BTreeMap;

    fn lowered(opts: &LowerOptions) -> Program {
        let meta = |shape: &[usize]| TensorMeta::contiguous(TorchDType::F32, shape);
        let tensors = BTreeMap::from([
            ("input.0".to_string(), meta(&[3, 200])),
            ("input.1".to_string(), meta(&[200, 5])),
            ("output.0".to_string(), meta(&[3, 5])),
        ]);
        let input = crate::LowerInput::positional(
            "mm",
            vec![Value::Tensor("input.0".into()), Value::Tensor("input.1".into())],
            &tensors,
        );
        let req = input.request();
        lower_with(&req, TargetName::Trn1, opts).unwrap().program
    }

    #[test]
    fn fp32_stays_fp32_and_k_tiles_accumulate() {
        let p = lowered(&LowerOptions::default());
        let mms = matmuls(&p);
        assert_eq!(mms.len(), 2, "K = 200 → two K tiles");
        assert!(!mms[0].accumulate && mms[1].accumulate);
        assert!(
            mms.iter()
                .all(|m| m.stationary.dtype == DType::F32 && m.moving.dtype == DType::F32)
        );
        assert_eq!((mms[0].stationary.partitions, mms[1].stationary.partitions), (128, 72));
    }

    #[test]
    fn auto_cast_matmult_rounds_operands_to_bf16() {
        let p = lowered(&LowerOptions {
            auto_cast: AutoCast::Matmult,
            ..Default::default()
        });
        let mms = matmuls(&p);
        assert!(
            mms.iter()
                .all(|m| m.stationary.dtype == DType::Bf16 && m.moving.dtype == DType::Bf16)
        );
        assert!(mms.iter().all(|m| m.dst.dtype == DType::F32), "PSUM stays fp32");
    }
}
