//! The `creation` family: tensors made from nothing (`full`, `scalar_tensor`, `empty`, `arange`,
//! the RNG ops) or copied from one tensor into a new one (`clone`, `_to_copy`, `copy`, `resize_`).
//!
//! Every value is produced by the engines:
//! * constants: VectorE `memset` (the value goes through fp32, then the cast on write — the same
//!   double rounding PyTorch does, since c10's `BFloat16`/`Half`/`Float8` scalars are built from
//!   a `float`). A float value stored into an integer dtype is truncated toward zero on the
//!   engines like any float → int conversion (below); a value into bool is `!= 0` on VectorE.
//!   NaN is made on the engines as `inf − inf` (programs are JSON: no NaN immediates).
//! * `arange`: GpSimd `iota`. Integer starts and steps go into iota's own affine int32 value
//!   (exact); float ones give the index, and VectorE computes `start + i·step` in fp32 (PyTorch
//!   computes in double for f32 and in float for bf16/f16, then casts: the fp32 error, about
//!   `2⁻²³·|value|`, is far inside every float dtype's tolerance).
//! * conversions (`_to_copy`, `copy`): same device dtype → `tensor_copy` (bit copy); → float:
//!   `tensor_copy` (decode to fp32, round to nearest even on write — what PyTorch does, since it
//!   also goes through `float` for bf16/f16/fp8 and rounds int → float to nearest); → bool:
//!   `x != 0` (NaN is true, as in PyTorch); float → integer: PyTorch truncates toward zero while
//!   the hardware's cast rounds to nearest even, so the lowering composes `trunc` =
//!   `sign(x) · (r − (r > |x|))` with `r = rne(|x|)` and converts the exact integer; integer →
//!   narrower integer wraps like C (`int32 & mask`, sign-extended with `(v ^ s) − s` on GpSimd's
//!   exact int32 path). Float → narrow integer goes through int32 and wraps too (x86's
//!   behaviour for values PyTorch leaves undefined).
//! * `rand`: 32 random bits from VectorE's generator, the top `d` kept (`d` = the dtype's
//!   significand digits: 24/11/8, PyTorch's `uniform_real_distribution`), scaled by `2⁻ᵈ`: exact
//!   in the output dtype and always in `[0, 1)`.
//! * `randn`: Box–Muller, `sqrt(−2·ln u₁) · sin(θ)` with `u₁ ∈ (0, 1]` and `θ` uniform in
//!   `[−π, π]` (ScalarE `log`, `sqrt`, `sin`; `sin` of a uniform angle has the distribution of
//!   `cos`, and the angle is kept inside the activation's valid range).
//! * `randperm`: iid keys `k_j = r_j·n + j` (distinct int32, `r_j` random with `2^bits·n ≤ 2³¹`),
//!   and `out[j]` = the rank of `k_j` — the count of keys below it: GpSimd's exact int32 `is_lt`
//!   against all keys broadcast to every partition (through an HBM scratch row), summed by VectorE.
//!   The ranks of iid keys are a uniform permutation, up to the tie-break by index among equal
//!   `r_j` (probability ~`n²/2^(bits+1)` pairs, e.g. ~32 of 8.4M pairs for n = 4097).
//! * `native_dropout`: the mask from VectorE's `dropout` on a tile of ones; `out = (x·scale)·mask`
//!   with `scale = 1/(1−p)` (0 for p = 1, as PyTorch).
//!
//! The RNG ops seed the generator at the start of the program (`set_rng_seed`), so a program is
//! deterministic: the same seed gives the same values. The seed is the case's: the backend binds
//! it into that instruction before the program runs (`backend::lowering::bind_rng_seed`), as a
//! runtime sets the device generator from `torch.manual_seed`.

use super::binary::dev;
use super::tile::{self, Emitter, Region, SbufAllocator, Slot, TileJob, TileLimits, dma, ts, tt};
use super::{LowerError, LowerRequest, Lowered};
use crate::call::{Complex, KEYWORD_ONLY, Scalar, TensorArg, TensorMeta};
use crate::dtype::TorchDType;
use trnsim::{
    AccessPattern, ActFunc, Activation, AffineSelect, AluOp, CmpOp, DType, Dropout, Engine, HbmRole, Iota, Op, Program,
    Rng, ScalarOperand, ScalarTensorTensor, SetRngSeed, TargetName, TensorReduce, TensorScalar,
};

/// Elements per partition of one tile (scratch tiles are 4 bytes per element: 8 KiB each).
const MAX_FREE: usize = 2048;

/// The placeholder seed of the program's `set_rng_seed`; the backend binds the case's seed.
const RNG_SEED: f64 = 0.0;

/// An SBUF buffer of `MAX_FREE` 4-byte elements per partition, viewed as any dtype.
#[derive(Clone, Copy, Debug)]
struct Buf {
    slot: Slot,
    dtype: DType,
}

impl Buf {
    fn as_(self, dtype: DType) -> Buf {
        Buf { slot: self.slot, dtype }
    }

    fn flat(&self, job: &TileJob) -> AccessPattern {
        job.sbuf_flat(self.dtype, self.slot.offset)
    }

    fn shaped(&self, job: &TileJob) -> AccessPattern {
        job.sbuf_shaped(self.dtype, self.slot.offset)
    }
}

/// A program under construction: the emitter, SBUF, and scratch buffers.
struct Builder {
    e: Emitter,
    alloc: SbufAllocator,
    limits: TileLimits,
}

impl Builder {
    fn new(target_name: TargetName) -> Builder {
        let target = target_name.params();
        Builder {
            e: Emitter::new(Program::new(target_name)),
            alloc: SbufAllocator::new(&target),
            limits: TileLimits::for_target(&target, MAX_FREE),
        }
    }

    fn buf(&mut self, dtype: DType) -> Result<Buf, LowerError> {
        Ok(Buf {
            slot: self.alloc.slot(MAX_FREE * 4)?,
            dtype,
        })
    }

    fn declare(&mut self, name: &str, dtype: DType, shape: &[usize], role: HbmRole) {
        if !self.e.program.hbm.iter().any(|d| d.name == name) {
            self.e.program.declare(name, dtype, shape, role);
        }
    }

    fn finish(self) -> Lowered {
        Lowered::new(self.e.finish())
    }

    // --- instruction helpers (all elementwise over one tile job) ---

    fn copy(&mut self, job: &TileJob, dst: Buf, src: Buf) {
        let op = tile::copy(dst.flat(job), src.flat(job));
        self.e.push(Engine::Vector, op);
    }

    fn memset(&mut self, job: &TileJob, dst: Buf, value: f64) {
        self.e.push(Engine::Vector, tile::memset(dst.flat(job), value));
    }

    fn load(&mut self, job: &TileJob, operand: usize, name: &str, dst: Buf) {
        self.e
            .push(Engine::Dma, dma(dst.shaped(job), job.hbm_ap(operand, name, dst.dtype)));
    }

    fn store(&mut self, job: &TileJob, operand: usize, name: &str, src: Buf) {
        self.e
            .push(Engine::Dma, dma(job.hbm_ap(operand, name, src.dtype), src.shaped(job)));
    }

    fn seed(&mut self) {
        self.e.push(
            Engine::Vector,
            Op::SetRngSeed(SetRngSeed {
                seed: ScalarOperand::Imm(RNG_SEED),
            }),
        );
    }

    /// `dst = rng() >> (32 − bits)`: `bits` uniform random bits in the low bits of `dst`.
    fn rng_bits(&mut self, job: &TileJob, dst: Buf, bits: f64) {
        self.e.push(Engine::Vector, Op::Rng(Rng { dst: dst.flat(job) }));
        self.e.tensor_scalar_imm(
            Engine::Vector,
            dst.flat(job),
            dst.flat(job),
            AluOp::LogicalShiftRight,
            32.0 - bits,
        );
    }

    /// A float constant into `dst` (any dtype: cast on write). NaN and ±inf are made on the
    /// engines (JSON programs hold no non-finite immediates).
    fn memset_float(&mut self, job: &TileJob, dst: Buf, v: f64) {
        if v.is_nan() {
            self.memset(job, dst.as_(DType::F32), 1e39);
            self.e.tensor_scalar_imm(
                Engine::Vector,
                dst.flat(job),
                dst.as_(DType::F32).flat(job),
                AluOp::Subtract,
                1e39,
            );
        } else if v.is_infinite() {
            self.memset(job, dst, v.signum() * 1e39);
        } else {
            self.memset(job, dst, v);
        }
    }

    /// Converts `src` (holding `from` values) into `dst` (the device dtype of `to`), PyTorch's
    /// conversion rules (see the module doc). `tmp` are three scratch buffers distinct from
    /// `src` and `dst`.
    fn convert(&mut self, job: &TileJob, src: Buf, from: TorchDType, dst: Buf, to: TorchDType, tmp: [Buf; 3]) {
        let v = Engine::Vector;
        let [a, b, c] = tmp;
        if src.dtype == dst.dtype {
            self.copy(job, dst, src);
        } else if to == TorchDType::Bool {
            self.e
                .tensor_scalar_imm(v, dst.flat(job), src.flat(job), AluOp::NotEqual, 0.0);
        } else if to.is_float() || from == TorchDType::Bool {
            self.copy(job, dst, src);
        } else if from.is_float() {
            // trunc(x) = sign(x) · (r − (r > |x|)), r = rne(|x|) (exact in fp32 where it matters).
            let (a, b, c) = (a.as_(DType::F32), b.as_(DType::F32), c.as_(DType::F32));
            self.e
                .tensor_scalar(v, a.flat(job), src.flat(job), AluOp::Abs, tile::Scalar::Imm(0.0), None);
            self.copy(job, b.as_(DType::I32), a);
            self.copy(job, c, b.as_(DType::I32));
            self.e
                .tensor_tensor(v, b.flat(job), c.flat(job), a.flat(job), AluOp::IsGt);
            self.e
                .tensor_tensor(v, c.flat(job), c.flat(job), b.flat(job), AluOp::Subtract);
            self.e.tensor_scalar_imm2(
                v,
                a.flat(job),
                src.flat(job),
                (AluOp::IsLt, 0.0),
                (AluOp::Multiply, -2.0),
            );
            self.e
                .tensor_scalar(v, a.flat(job), a.flat(job), AluOp::Add, tile::Scalar::Imm(1.0), None);
            if dst.dtype == DType::I32 {
                self.e
                    .tensor_tensor(v, dst.flat(job), c.flat(job), a.flat(job), AluOp::Multiply);
            } else {
                // Through int32, then wrapped to the narrow width.
                self.e.tensor_tensor(
                    v,
                    b.as_(DType::I32).flat(job),
                    c.flat(job),
                    a.flat(job),
                    AluOp::Multiply,
                );
                self.wrap(job, b.as_(DType::I32), dst, to, c);
            }
        } else {
            // Integer → integer: widen to int32 (exact), then wrap to the destination width.
            let wide = if src.dtype == DType::I32 {
                src
            } else {
                self.copy(job, a.as_(DType::I32), src);
                a.as_(DType::I32)
            };
            if dst.dtype == DType::I32 {
                self.copy(job, dst, wide);
            } else {
                self.wrap(job, wide, dst, to, b);
            }
        }
    }

    /// int32 `src` → a narrow integer `dst`, wrapping like C (two's complement truncation).
    fn wrap(&mut self, job: &TileJob, src: Buf, dst: Buf, to: TorchDType, tmp: Buf) {
        let (mask, sign) = match to {
            TorchDType::U8 => (0xFF, 0),
            TorchDType::I8 => (0xFF, 0x80),
            _ => (0xFFFF, 0x8000),
        };
        let t = tmp.as_(DType::I32);
        // Signed: (x & mask) ^ sign − sign sign-extends the low bits.
        let flip = (sign != 0).then_some((AluOp::BitwiseXor, tile::Scalar::Imm(sign as f64)));
        let mask = tile::Scalar::Imm(mask as f64);
        self.e.tensor_scalar(
            Engine::Vector,
            t.flat(job),
            src.flat(job),
            AluOp::BitwiseAnd,
            mask,
            flip,
        );
        if sign != 0 {
            let sign = tile::Scalar::Imm(sign as f64);
            self.e
                .tensor_scalar(Engine::Gpsimd, t.flat(job), t.flat(job), AluOp::Subtract, sign, None);
        }
        self.copy(job, dst, t);
    }
}

// ---------------------------------------------------------------------------------------------
// Call parsing

fn out_meta<'a>(req: &LowerRequest<'a>, i: usize) -> Result<(&'a str, &'a TensorMeta), LowerError> {
    let name = req.output_tensor(i)?;
    Ok((name, req.tensor(name)?))
}

/// A Python scalar as f64 (bool as 0/1), and whether it was a float.
fn scalar_value(s: Scalar) -> (f64, bool) {
    (s.as_f64(), matches!(s, Scalar::Float(_)))
}

/// The dtype kwarg, if given (checked against the golden output's dtype).
fn check_dtype_kwarg(req: &LowerRequest<'_>, out: TorchDType) -> Result<(), LowerError> {
    if let Some(want) = req.opt::<TorchDType>(KEYWORD_ONLY, "dtype")?
        && want != out
    {
        return Err(req.arg_error(KEYWORD_ONLY, "dtype", format!("{want}, but the golden output is {out}")));
    }
    Ok(())
}

/// Checks the `size` argument at `pos` against the output shape.
fn check_size(req: &LowerRequest<'_>, pos: usize, shape: &[usize]) -> Result<(), LowerError> {
    let size = req.arg::<Vec<i64>>(pos, "size")?;
    if !size.iter().map(|&d| d as usize).eq(shape.iter().copied()) {
        return Err(req.arg_error(pos, "size", format!("{size:?} ≠ output shape {shape:?}")));
    }
    Ok(())
}

/// Whether a tensor's recorded strides are row-major (size-1 dims ignored; none recorded: yes).
fn is_contiguous(meta: &TensorMeta) -> bool {
    let Some(strides) = &meta.strides else {
        return true;
    };
    let want = crate::dtype::contiguous_strides(&meta.shape);
    meta.shape
        .iter()
        .zip(strides.iter().zip(&want))
        .all(|(&d, (&s, &w))| d <= 1 || s == w as i64)
}

fn contiguous_region(shape: &[usize], operands: usize) -> Region {
    let s = tile::broadcast_strides(shape, shape);
    Region::new(shape, &vec![s; operands])
}

// ---------------------------------------------------------------------------------------------
// Lowerings

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    match req.op {
        "full" | "full_like" | "fill.Scalar" | "scalar_tensor" => lower_fill(req, target),
        "empty.memory_format" | "empty_strided" => lower_empty(req, target),
        "arange.start_step" => lower_arange(req, target),
        "_to_copy" | "clone" | "copy" => lower_copy(req, target),
        "resize_" => lower_resize(req, target),
        "rand" | "randn" => lower_rand(req, target),
        "randperm" => lower_randperm(req, target),
        "native_dropout" => lower_dropout(req, target),
        other => Err(LowerError::NotLowered(other.to_string())),
    }
}

/// Fills `region` of output `out` (operand 0 of the region) with the constant `value`.
fn emit_fill(
    b: &mut Builder,
    region: Region,
    out: &str,
    out_dtype: TorchDType,
    value: f64,
    value_is_float: bool,
    req: &LowerRequest<'_>,
) -> Result<(), LowerError> {
    let out_dev = dev(req, out_dtype)?;
    let res = b.buf(out_dev)?;
    let direct = out_dtype.is_float() || (!value_is_float && out_dtype != TorchDType::Bool);
    let scratch = if direct {
        None
    } else {
        Some([
            b.buf(DType::F32)?,
            b.buf(DType::F32)?,
            b.buf(DType::F32)?,
            b.buf(DType::F32)?,
        ])
    };
    for job in tile::plan_tiles(region, b.limits) {
        match scratch {
            None if out_dtype.is_float() => b.memset_float(&job, res, value),
            None => b.memset(&job, res, value),
            Some([f, t0, t1, t2]) => {
                b.memset_float(&job, f, value);
                b.convert(&job, f, TorchDType::F32, res, out_dtype, [t0, t1, t2]);
            }
        }
        b.store(&job, 0, out, res);
    }
    Ok(())
}

fn lower_fill(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (out, meta) = out_meta(req, 0)?;
    if meta.dtype.is_complex() {
        return lower_fill_complex(req, target, out, meta);
    }
    let (pos, name) = fill_value_position(req.op);
    let (value, is_float) = scalar_value(req.arg(pos, name)?);
    check_dtype_kwarg(req, meta.dtype)?;
    if meta.dtype == TorchDType::I64 && !is_float && (value < i32::MIN as f64 || value > i32::MAX as f64) {
        return Err(LowerError::Int64OutsideInt32 {
            op: req.op.to_string(),
            value: value as i64,
        });
    }
    match req.op {
        "full_like" | "fill.Scalar" => {
            let (_, input) = req.arg::<TensorArg>(0, "self")?;
            if input.shape != meta.shape {
                return Err(req.invalid(format!("output shape {:?} ≠ input shape {:?}", meta.shape, input.shape)));
            }
            if req.op == "fill.Scalar" && input.dtype != meta.dtype {
                return Err(req.invalid("fill_ keeps the dtype".into()));
            }
        }
        "full" => check_size(req, 0, &meta.shape)?,
        _ => {
            if !meta.shape.is_empty() {
                return Err(req.invalid("scalar_tensor gives a 0-d tensor".into()));
            }
        }
    }
    let mut b = Builder::new(target);
    b.declare(out, dev(req, meta.dtype)?, &meta.shape, HbmRole::Output);
    emit_fill(
        &mut b,
        contiguous_region(&meta.shape, 1),
        out,
        meta.dtype,
        value,
        is_float,
        req,
    )?;
    Ok(b.finish())
}

/// The position and name of the fill value argument of `req.op`.
fn fill_value_position(op: &str) -> (usize, &'static str) {
    match op {
        "full" | "full_like" => (1, "fill_value"),
        "fill.Scalar" => (1, "value"),
        _ => (0, "s"),
    }
}

/// A complex64 fill: its real view gets the real part at even and the imaginary part at odd
/// positions (two memsets, two strided stores). A real value has imaginary part 0.
fn lower_fill_complex(
    req: &LowerRequest<'_>,
    target: TargetName,
    out: &str,
    meta: &TensorMeta,
) -> Result<Lowered, LowerError> {
    let (pos, name) = fill_value_position(req.op);
    let Complex(re, im) = req.arg(pos, name)?;
    check_dtype_kwarg(req, meta.dtype)?;
    let expected_shape: Option<Vec<usize>> = match req.op {
        "scalar_tensor" => Some(vec![]),
        "full" => Some(req.arg::<Vec<i64>>(0, "size")?.iter().map(|&d| d as usize).collect()),
        _ => Some(req.arg::<TensorArg>(0, "self")?.1.shape.clone()),
    };
    if expected_shape.as_deref() != Some(&meta.shape[..]) {
        return Err(req.invalid(format!("output shape {:?} ≠ {expected_shape:?}", meta.shape)));
    }
    let mut b = Builder::new(target);
    b.declare(
        out,
        DType::F32,
        &super::complex_real_view_shape(&meta.shape),
        HbmRole::Output,
    );
    let parts = complex_parts(&meta.shape);
    let res = b.buf(DType::F32)?;
    let res_im = b.buf(DType::F32)?;
    for job in tile::plan_tiles(
        Region::new(&meta.shape, &[parts.clone(), parts.clone()]).with_base(vec![0, 1]),
        b.limits,
    ) {
        b.memset_float(&job, res, re);
        b.store(&job, 0, out, res);
        b.memset_float(&job, res_im, im);
        b.store(&job, 1, out, res_im);
    }
    Ok(b.finish())
}

/// The strides of a complex tensor's real or imaginary parts in its real view (`shape + [2]`):
/// twice the contiguous strides (base 0 for the real parts, 1 for the imaginary ones).
fn complex_parts(shape: &[usize]) -> Vec<i64> {
    tile::broadcast_strides(shape, shape).iter().map(|s| s * 2).collect()
}

fn lower_empty(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (out, meta) = out_meta(req, 0)?;
    check_dtype_kwarg(req, meta.dtype)?;
    check_size(req, 0, &meta.shape)?;
    // Uninitialised memory has no defined value: the engines write zeros (the check is shape and
    // dtype only). A complex64 tensor is zeros over its F32 real view.
    let (dtype, shape) = match super::complex_real_view(meta) {
        Some((_, view)) => (TorchDType::F32, view),
        None => (meta.dtype, meta.shape.clone()),
    };
    let mut b = Builder::new(target);
    b.declare(out, dev(req, dtype)?, &shape, HbmRole::Output);
    emit_fill(&mut b, contiguous_region(&shape, 1), out, dtype, 0.0, false, req)?;
    Ok(b.finish())
}

fn lower_arange(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (out, meta) = out_meta(req, 0)?;
    check_dtype_kwarg(req, meta.dtype)?;
    let (start, start_f) = scalar_value(req.arg(0, "start")?);
    let (end, _) = scalar_value(req.arg(1, "end")?);
    let (step, step_f) = scalar_value(req.arg_or(2, "step", Scalar::Int(1))?);
    if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
        return Err(req.invalid(format!("arange({start}, {end}, {step})")));
    }
    let n = ((end - start) / step).ceil().max(0.0) as usize;
    if meta.shape != [n] {
        return Err(req.invalid(format!("arange gives [{n}], the golden output is {:?}", meta.shape)));
    }
    let out_dev = dev(req, meta.dtype)?;
    let fits = |v: f64| v.fract() == 0.0 && v.abs() <= 2f64.powi(24);
    let last = start + step * n.saturating_sub(1) as f64;
    // Integer start and step: iota's int32 affine value is the result.
    let exact = !start_f && !step_f || (fits(start) && fits(step) && fits(last));
    if !exact && meta.dtype.is_int() {
        return Err(req.unsupported("float start/step with an integer dtype".into()));
    }
    if !exact && !meta.dtype.is_float() {
        return Err(req.unsupported(format!("arange into {}", meta.dtype)));
    }
    let mut b = Builder::new(target);
    b.declare(out, out_dev, &meta.shape, HbmRole::Output);
    let res = b.buf(out_dev)?;
    let idx = b.buf(DType::F32)?;
    let i32_ok = |v: f64| v >= i32::MIN as f64 && v <= i32::MAX as f64;
    for job in tile::plan_tiles(contiguous_region(&meta.shape, 1), b.limits) {
        // Element (c, i…) of the job is output index base + c·ps + Σ stride·i.
        let (base, ps) = (job.base[0] as f64, job.partition_strides[0] as f64);
        let (scale, offset, dst) = if exact { (step, start, res) } else { (1.0, 0.0, idx) };
        let off = offset + base * scale;
        let cm = ps * scale;
        let pattern: Vec<[i64; 2]> = job
            .free
            .iter()
            .map(|d| [(d.strides[0] as f64 * scale) as i64, d.size as i64])
            .collect();
        if !i32_ok(off) || !i32_ok(cm) || !i32_ok(last) || job.free.iter().any(|d| !i32_ok(d.strides[0] as f64 * scale))
        {
            return Err(req.unsupported("arange values beyond int32".into()));
        }
        let op = Op::Iota(Iota {
            dst: dst.flat(&job),
            offset: off as i64,
            channel_multiplier: cm as i64,
            pattern,
        });
        b.e.push(Engine::Gpsimd, op);
        if !exact {
            b.e.tensor_scalar_imm2(
                Engine::Vector,
                res.flat(&job),
                idx.flat(&job),
                (AluOp::Multiply, step),
                (AluOp::Add, start),
            );
        }
        b.store(&job, 0, out, res);
    }
    Ok(b.finish())
}

/// `out = convert(input)` over `region` (operand 0: out, 1: input).
fn emit_map(
    b: &mut Builder,
    region: Region,
    input: &str,
    in_dtype: TorchDType,
    out: &str,
    out_dtype: TorchDType,
    req: &LowerRequest<'_>,
) -> Result<(), LowerError> {
    let in_dev = dev(req, in_dtype)?;
    let out_dev = dev(req, out_dtype)?;
    let src = b.buf(in_dev)?;
    let res = b.buf(out_dev)?;
    let tmp = [b.buf(DType::F32)?, b.buf(DType::F32)?, b.buf(DType::F32)?];
    for job in tile::plan_tiles(region, b.limits) {
        b.load(&job, 1, input, src);
        b.convert(&job, src, in_dtype, res, out_dtype, tmp);
        b.store(&job, 0, out, res);
    }
    Ok(())
}

fn lower_copy(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (out, meta) = out_meta(req, 0)?;
    let (self_name, self_meta) = req.arg::<TensorArg>(0, "self")?;
    let (src_name, src_meta) = if req.op == "copy" {
        req.arg::<TensorArg>(1, "src")?
    } else {
        (self_name, self_meta)
    };
    match req.op {
        "copy" => {
            if self_meta.dtype != meta.dtype || self_meta.shape != meta.shape {
                return Err(req.invalid("copy's output has self's shape and dtype".into()));
            }
        }
        "clone" => {
            if self_meta.dtype != meta.dtype || self_meta.shape != meta.shape {
                return Err(req.invalid("clone keeps shape and dtype".into()));
            }
        }
        _ => {
            if self_meta.shape != meta.shape {
                return Err(req.invalid("_to_copy keeps the shape".into()));
            }
            if req.opt::<TorchDType>(KEYWORD_ONLY, "dtype")?.is_some() {
                check_dtype_kwarg(req, meta.dtype)?;
            } else if self_meta.dtype != meta.dtype {
                return Err(req.invalid("no dtype: _to_copy keeps it".into()));
            }
        }
    }
    if tile::broadcast_shapes(&src_meta.shape, &meta.shape).as_deref() != Some(&meta.shape[..]) {
        return Err(req.invalid(format!(
            "src {:?} does not broadcast to {:?}",
            src_meta.shape, meta.shape
        )));
    }
    if src_meta.dtype.is_complex() || meta.dtype.is_complex() {
        return lower_copy_complex(req, target, (src_name, src_meta), (out, meta));
    }
    let mut b = Builder::new(target);
    b.declare(src_name, dev(req, src_meta.dtype)?, &src_meta.shape, HbmRole::Input);
    // `copy`'s `self` is overwritten whole: only its shape and dtype matter, it is not read.
    b.declare(out, dev(req, meta.dtype)?, &meta.shape, HbmRole::Output);
    let strides = vec![
        tile::broadcast_strides(&meta.shape, &meta.shape),
        tile::broadcast_strides(&src_meta.shape, &meta.shape),
    ];
    emit_map(
        &mut b,
        Region::new(&meta.shape, &strides),
        src_name,
        src_meta.dtype,
        out,
        meta.dtype,
        req,
    )?;
    Ok(b.finish())
}

/// A copy into or out of complex64 (real views, lower/mod.rs):
/// * complex → complex: a bit copy of the real views (`[..., 2]`, broadcast like the tensors);
/// * real → complex: the value converted to fp32 (PyTorch's `complex<float>(float(x))`) into the
///   real parts, VectorE zeros into the imaginary parts (two strided stores);
/// * complex → bool: `re != 0 || im != 0` (PyTorch's `z != 0`);
/// * complex → other real: the real part, converted like an fp32 value (PyTorch drops the
///   imaginary part, with a warning).
fn lower_copy_complex(
    req: &LowerRequest<'_>,
    target: TargetName,
    (src, src_meta): (&str, &TensorMeta),
    (out, meta): (&str, &TensorMeta),
) -> Result<Lowered, LowerError> {
    let view = super::complex_real_view_shape;
    let mut b = Builder::new(target);
    let v = Engine::Vector;
    match (src_meta.dtype.is_complex(), meta.dtype.is_complex()) {
        (true, true) => {
            let (sv, ov) = (view(&src_meta.shape), view(&meta.shape));
            b.declare(src, DType::F32, &sv, HbmRole::Input);
            b.declare(out, DType::F32, &ov, HbmRole::Output);
            let strides = vec![tile::broadcast_strides(&ov, &ov), tile::broadcast_strides(&sv, &ov)];
            emit_map(
                &mut b,
                Region::new(&ov, &strides),
                src,
                TorchDType::F32,
                out,
                TorchDType::F32,
                req,
            )?;
        }
        (false, true) => {
            let in_dev = dev(req, src_meta.dtype)?;
            b.declare(src, in_dev, &src_meta.shape, HbmRole::Input);
            b.declare(out, DType::F32, &view(&meta.shape), HbmRole::Output);
            let parts = complex_parts(&meta.shape);
            let strides = [
                parts.clone(),
                tile::broadcast_strides(&src_meta.shape, &meta.shape),
                parts,
            ];
            let region = Region::new(&meta.shape, &strides).with_base(vec![0, 0, 1]);
            let x = b.buf(in_dev)?;
            let re = b.buf(DType::F32)?;
            let im = b.buf(DType::F32)?;
            let tmp = [b.buf(DType::F32)?, b.buf(DType::F32)?, b.buf(DType::F32)?];
            for job in tile::plan_tiles(region, b.limits) {
                b.load(&job, 1, src, x);
                b.convert(&job, x, src_meta.dtype, re, TorchDType::F32, tmp);
                b.store(&job, 0, out, re);
                b.memset(&job, im, 0.0);
                b.store(&job, 2, out, im);
            }
        }
        (true, false) => {
            let out_dev = dev(req, meta.dtype)?;
            b.declare(src, DType::F32, &view(&src_meta.shape), HbmRole::Input);
            b.declare(out, out_dev, &meta.shape, HbmRole::Output);
            let parts: Vec<i64> = tile::broadcast_strides(&src_meta.shape, &meta.shape)
                .iter()
                .map(|s| s * 2)
                .collect();
            let strides = [tile::broadcast_strides(&meta.shape, &meta.shape), parts.clone(), parts];
            let region = Region::new(&meta.shape, &strides).with_base(vec![0, 0, 1]);
            let re = b.buf(DType::F32)?;
            let im = b.buf(DType::F32)?;
            let res = b.buf(out_dev)?;
            let tmp = [b.buf(DType::F32)?, b.buf(DType::F32)?, b.buf(DType::F32)?];
            for job in tile::plan_tiles(region, b.limits) {
                b.load(&job, 1, src, re);
                if meta.dtype == TorchDType::Bool {
                    b.load(&job, 2, src, im);
                    // max(re != 0, im != 0): false only when both parts are 0 (NaN is true, as in PyTorch).
                    for (nonzero, part) in [(tmp[0], re), (tmp[1], im)] {
                        let zero = tile::Scalar::Imm(0.0);
                        b.e.tensor_scalar(v, nonzero.flat(&job), part.flat(&job), AluOp::NotEqual, zero, None);
                    }
                    b.e.tensor_tensor(v, tmp[0].flat(&job), tmp[0].flat(&job), tmp[1].flat(&job), AluOp::Max);
                    b.e.tensor_scalar_imm(v, res.flat(&job), tmp[0].flat(&job), AluOp::NotEqual, 0.0);
                } else {
                    b.convert(&job, re, TorchDType::F32, res, meta.dtype, tmp);
                }
                b.store(&job, 0, out, res);
            }
        }
        (false, false) => return Err(req.invalid("no complex tensor in a complex copy".into())),
    }
    Ok(b.finish())
}

/// `_local_scalar_dense`: the one element of the input, read by the engines (load, VectorE copy,
/// store) into a one-element program output named like the case's non-tensor output
/// (`output.0`). **Not registered**: the runner takes non-tensor outputs only from
/// [`Lowered::values`] (known at lowering time, for `sym_*`), and rejects a program output that is
/// not a tensor of the case. Registering this needs the runner to turn such a one-element output
/// into the scalar value (bool → Bool, integer → Int widened from int32, float → Float).
pub fn lower_local_scalar_dense(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (input, in_meta) = req.arg::<TensorArg>(0, "self")?;
    if in_meta.shape.iter().product::<usize>() != 1 {
        return Err(req.invalid(format!("_local_scalar_dense of a {:?} tensor", in_meta.shape)));
    }
    if !matches!(req.outputs, [super::OutputSlot::NonTensor]) {
        return Err(req.invalid("_local_scalar_dense returns one scalar".into()));
    }
    let d = dev(req, in_meta.dtype)?;
    let mut b = Builder::new(target);
    b.declare(input, d, &in_meta.shape, HbmRole::Input);
    b.declare("output.0", d, &[], HbmRole::Output);
    let (src, res) = (b.buf(d)?, b.buf(d)?);
    for job in tile::plan_tiles(Region::new(&[], &[vec![], vec![]]), b.limits) {
        b.load(&job, 1, input, src);
        b.copy(&job, res, src);
        b.store(&job, 0, "output.0", res);
    }
    Ok(b.finish())
}

fn lower_resize(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (out, meta) = out_meta(req, 0)?;
    let (input, in_meta) = req.arg::<TensorArg>(0, "self")?;
    check_size(req, 1, &meta.shape)?;
    if in_meta.dtype != meta.dtype {
        return Err(req.invalid("resize_ keeps the dtype".into()));
    }
    let n_in: usize = in_meta.shape.iter().product();
    let n_out: usize = meta.shape.iter().product();
    let kept = n_in.min(n_out);
    // The storage is the input's elements in row-major order only if the input was contiguous.
    if !is_contiguous(in_meta) {
        return Err(req.unsupported("resize_ of a non-contiguous tensor".into()));
    }
    let mut b = Builder::new(target);
    b.declare(input, dev(req, in_meta.dtype)?, &in_meta.shape, HbmRole::Input);
    b.declare(out, dev(req, meta.dtype)?, &meta.shape, HbmRole::Output);
    if !is_contiguous(meta) {
        // A memory format (channels_last): output element i reads storage[Σ idx·stride].
        let strides = meta.strides.clone().unwrap_or_default();
        let max_off: i64 = meta
            .shape
            .iter()
            .zip(&strides)
            .map(|(&d, &s)| (d as i64 - 1).max(0) * s)
            .sum();
        if strides.iter().any(|&s| s < 0) || n_out == 0 || max_off as usize >= n_in {
            return Err(req.unsupported("resize_ growing into a memory format".into()));
        }
        let region = Region::new(
            &meta.shape,
            &[tile::broadcast_strides(&meta.shape, &meta.shape), strides],
        );
        emit_map(&mut b, region, input, in_meta.dtype, out, meta.dtype, req)?;
        return Ok(b.finish());
    }
    // The storage's first elements keep their values (flat, row-major) …
    if kept > 0 {
        emit_map(
            &mut b,
            Region::new(&[kept], &[vec![1], vec![1]]),
            input,
            in_meta.dtype,
            out,
            meta.dtype,
            req,
        )?;
    }
    // … and new storage is uninitialised (the check is metadata-only then): zeros.
    if n_out > kept {
        let mut region = Region::new(&[n_out - kept], &[vec![1]]);
        region.base = vec![kept as i64];
        emit_fill(&mut b, region, out, meta.dtype, 0.0, false, req)?;
    }
    Ok(b.finish())
}

/// The significand digits PyTorch's `uniform_real_distribution` keeps for a dtype.
fn uniform_digits(req: &LowerRequest<'_>, d: TorchDType) -> Result<u32, LowerError> {
    Ok(match d {
        TorchDType::F32 => 24,
        TorchDType::F16 => 11,
        TorchDType::Bf16 => 8,
        other => return Err(req.unsupported(format!("rand into {other}"))),
    })
}

/// The fp32 values just below π and 2π (fp32's nearest π and 2π lie above them): for every
/// `u ∈ [0, 1)`, `fp32(u·TWO_PI_DOWN) − PI_DOWN` lies inside `[−π, π]`, Sin's valid range.
const PI_DOWN: f64 = f32::from_bits(std::f32::consts::PI.to_bits() - 1) as f64;
const TWO_PI_DOWN: f64 = f32::from_bits(std::f32::consts::TAU.to_bits() - 1) as f64;

fn lower_rand(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (out, meta) = out_meta(req, 0)?;
    check_dtype_kwarg(req, meta.dtype)?;
    check_size(req, 0, &meta.shape)?;
    let digits = uniform_digits(req, meta.dtype)?;
    let out_dev = dev(req, meta.dtype)?;
    let mut b = Builder::new(target);
    b.declare(out, out_dev, &meta.shape, HbmRole::Output);
    let res = b.buf(out_dev)?;
    let r = b.buf(DType::U32)?;
    let u = b.buf(DType::F32)?;
    let w = b.buf(DType::F32)?;
    let bias = b.buf(DType::F32)?;
    let jobs = tile::plan_tiles(contiguous_region(&meta.shape, 1), b.limits);
    if !jobs.is_empty() {
        b.seed();
    }
    let v = Engine::Vector;
    for job in &jobs {
        if req.op == "rand" {
            // u = (bits >> (32 − d)) · 2^−d: exact in the output dtype, in [0, 1).
            b.rng_bits(job, r, digits as f64);
            b.e.tensor_scalar_imm(
                v,
                res.flat(job),
                r.flat(job),
                AluOp::Multiply,
                2f64.powi(-(digits as i32)),
            );
        } else {
            // Box–Muller: radius sqrt(−2·ln u₁), u₁ = (bits₂₄ + 1)·2⁻²⁴ ∈ (0, 1].
            b.rng_bits(job, r, 24.0);
            b.e.tensor_scalar_imm2(
                v,
                u.flat(job),
                r.flat(job),
                (AluOp::Add, 1.0),
                (AluOp::Multiply, 2f64.powi(-24)),
            );
            act(&mut b, job, u, ActFunc::Log, u, 1.0, None);
            act(&mut b, job, u, ActFunc::Sqrt, u, -2.0, None);
            // Angle θ = u₂·2π − π, u₂ = bits₂₄·2⁻²⁴ ∈ [0, 1); sin θ.
            b.rng_bits(job, r, 24.0);
            b.e.tensor_scalar_imm(v, w.flat(job), r.flat(job), AluOp::Multiply, 2f64.powi(-24));
            let p = job.partitions;
            let bias_ap = AccessPattern::sbuf(DType::F32, 0, p, bias.slot.offset, vec![[1, 1]]);
            b.e.memset(v, bias_ap.clone(), -PI_DOWN);
            act(&mut b, job, w, ActFunc::Sin, w, TWO_PI_DOWN, Some(bias_ap));
            b.e.tensor_tensor(v, res.flat(job), u.flat(job), w.flat(job), AluOp::Multiply);
        }
        b.store(job, 0, out, res);
    }
    Ok(b.finish())
}

fn act(b: &mut Builder, job: &TileJob, dst: Buf, func: ActFunc, src: Buf, scale: f64, bias: Option<AccessPattern>) {
    let op = Op::Activation(Activation {
        dst: dst.flat(job),
        func,
        src: src.flat(job),
        bias: bias.map(ScalarOperand::Tile),
        scale: ScalarOperand::Imm(scale),
        acc: Default::default(),
        reduce_res: None,
    });
    b.e.push(Engine::Scalar, op);
}

/// Largest n: the broadcast key row and the comparison result (4 bytes each per element) stay
/// small next to SBUF's 176 KiB per partition.
const RANDPERM_MAX: usize = 8192;

fn lower_randperm(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (out, meta) = out_meta(req, 0)?;
    check_dtype_kwarg(req, meta.dtype)?;
    let n = req.arg::<i64>(0, "n")?;
    let n = usize::try_from(n).map_err(|_| req.arg_error(0, "n", format!("{n} is negative")))?;
    if meta.shape != [n] {
        return Err(req.invalid(format!(
            "randperm({n}) gives [{n}], the golden output is {:?}",
            meta.shape
        )));
    }
    if !meta.dtype.is_int() {
        return Err(req.unsupported(format!("randperm into {}", meta.dtype)));
    }
    if n > RANDPERM_MAX {
        return Err(req.unsupported(format!("randperm({n}): more than {RANDPERM_MAX} elements")));
    }
    let out_dev = dev(req, meta.dtype)?;
    let mut b = Builder::new(target);
    b.declare(out, out_dev, &meta.shape, HbmRole::Output);
    if n == 0 {
        return Ok(b.finish());
    }
    let keys_name = "randperm.keys";
    // Keys laid out [P, F], element j = p·F + f; m = P·F ≥ n (padding keys exceed every real key).
    let p = n.min(b.limits.partitions);
    let f = n.div_ceil(p);
    let m = p * f;
    b.declare(keys_name, DType::I32, &[m], HbmRole::Scratch);
    // Random bits per key: r < 2^bits with 2^bits · n ≤ 2^31, so r·n + j < 2^31: exact int32 on
    // GpSimd, and ties between equal r (broken by index) are rare.
    let bits = 31 - (usize::BITS - (n - 1).leading_zeros());
    let pad = i32::MAX as f64;
    let alloc_n = |b: &mut Builder, dtype: DType, elems: usize| -> Result<Slot, LowerError> {
        b.alloc.slot(elems * dtype.size())
    };
    let r = alloc_n(&mut b, DType::U32, f)?;
    let j = alloc_n(&mut b, DType::I32, f)?;
    let k = alloc_n(&mut b, DType::I32, f)?;
    let rank = alloc_n(&mut b, DType::F32, f)?;
    let ranki = alloc_n(&mut b, out_dev, f)?;
    let bc = alloc_n(&mut b, DType::I32, n)?;
    let junk = alloc_n(&mut b, DType::I32, n)?;
    let ap = |dtype: DType, s: Slot, elems: usize| AccessPattern::sbuf(dtype, 0, p, s.offset, vec![[1, elems as i64]]);
    let (v, g) = (Engine::Vector, Engine::Gpsimd);
    let ts = |dst: AccessPattern, src: AccessPattern, op: AluOp, x: f64| ts(dst, src, op, ScalarOperand::Imm(x), None);
    b.seed();
    b.e.push(
        v,
        Op::Rng(Rng {
            dst: ap(DType::U32, r, f),
        }),
    );
    b.e.push(
        v,
        ts(
            ap(DType::I32, k, f),
            ap(DType::U32, r, f),
            AluOp::LogicalShiftRight,
            (32 - bits) as f64,
        ),
    );
    b.e.push(
        g,
        Op::Iota(Iota {
            dst: ap(DType::I32, j, f),
            offset: 0,
            channel_multiplier: f as i64,
            pattern: vec![[1, f as i64]],
        }),
    );
    b.e.push(
        g,
        ts(ap(DType::I32, k, f), ap(DType::I32, k, f), AluOp::Multiply, n as f64),
    );
    b.e.push(
        g,
        tt(
            ap(DType::I32, r, f),
            ap(DType::I32, k, f),
            ap(DType::I32, j, f),
            AluOp::Add,
        ),
    );
    // Padding (j ≥ n): v = n − 1 − j < 0 → the key int32::MAX, not below any real key.
    b.e.push(
        g,
        Op::AffineSelect(AffineSelect {
            dst: ap(DType::I32, k, f),
            on_true: ap(DType::I32, r, f),
            on_false: pad,
            offset: n as i64 - 1,
            channel_multiplier: -(f as i64),
            pattern: vec![[-1, f as i64]],
            cmp: CmpOp::GreaterEqual,
        }),
    );
    // All keys, broadcast to every partition through HBM.
    let keys_hbm = AccessPattern::hbm(keys_name, DType::I32, 0, p, f as i64, vec![[1, f as i64]]);
    // (Store and reload are on the one DMA queue, so they run in order.)
    b.e.push(Engine::Dma, dma(keys_hbm, ap(DType::I32, k, f)));
    let row = AccessPattern::hbm(keys_name, DType::I32, 0, p, 0, vec![[1, n as i64]]);
    b.e.push(Engine::Dma, dma(ap(DType::I32, bc, n), row));
    // rank[i] = #{j : key_j < key_i}: exact int32 comparisons on GpSimd, the 0/1 sum on VectorE.
    for c in 0..f {
        let key = AccessPattern::sbuf(DType::I32, 0, p, k.offset + (4 * c) as u64, vec![[1, 1]]);
        let res = AccessPattern::sbuf(DType::F32, 0, p, rank.offset + (4 * c) as u64, vec![[1, 1]]);
        let lt = TensorScalar {
            dst: ap(DType::I32, junk, n),
            src: ap(DType::I32, bc, n),
            op0: AluOp::IsLt,
            operand0: ScalarOperand::Tile(key),
            reverse0: false,
            op1: None,
            operand1: None,
            reverse1: false,
        };
        b.e.push(g, Op::TensorScalar(lt));
        let sum = TensorReduce {
            dst: res,
            src: ap(DType::I32, junk, n),
            op: AluOp::Add,
            axes: 1,
            negate: false,
        };
        b.e.push(v, Op::TensorReduce(sum));
    }
    b.e.tensor_copy(v, ap(out_dev, ranki, f), ap(DType::F32, rank, f));
    let full = n / f;
    let rest = n % f;
    if full > 0 {
        let dst = AccessPattern::hbm(out, out_dev, 0, full, f as i64, vec![[1, f as i64]]);
        let src = AccessPattern::sbuf(out_dev, 0, full, ranki.offset, vec![[1, f as i64]]);
        b.e.push(Engine::Dma, dma(dst, src));
    }
    if rest > 0 {
        let dst = AccessPattern::hbm(out, out_dev, (full * f) as u64, 1, 0, vec![[1, rest as i64]]);
        let src = AccessPattern::sbuf(out_dev, full, 1, ranki.offset, vec![[1, rest as i64]]);
        b.e.push(Engine::Dma, dma(dst, src));
    }
    Ok(b.finish())
}

fn lower_dropout(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (input, in_meta) = req.arg::<TensorArg>(0, "input")?;
    let (out, meta) = out_meta(req, 0)?;
    let (mask_name, mask_meta) = out_meta(req, 1)?;
    let p = req.arg::<f64>(1, "p")?;
    if !(0.0..=1.0).contains(&p) {
        return Err(req.invalid(format!("p = {p}")));
    }
    let train = req.arg_or(2, "train", true)?;
    if meta.dtype != in_meta.dtype || meta.shape != in_meta.shape || mask_meta.shape != in_meta.shape {
        return Err(req.invalid("dropout keeps shape and dtype".into()));
    }
    if !meta.dtype.is_float() {
        return Err(req.unsupported(format!("dropout of {}", meta.dtype)));
    }
    let in_dev = dev(req, in_meta.dtype)?;
    let mask_dev = dev(req, mask_meta.dtype)?;
    let mut b = Builder::new(target);
    b.declare(input, in_dev, &in_meta.shape, HbmRole::Input);
    b.declare(out, in_dev, &meta.shape, HbmRole::Output);
    b.declare(mask_name, mask_dev, &mask_meta.shape, HbmRole::Output);
    let x = b.buf(in_dev)?;
    let res = b.buf(in_dev)?;
    let ones = b.buf(DType::F32)?;
    let m = b.buf(DType::F32)?;
    let mask = b.buf(mask_dev)?;
    let scale = if p == 1.0 { 0.0 } else { 1.0 / (1.0 - p) };
    let jobs = tile::plan_tiles(contiguous_region(&meta.shape, 2), b.limits);
    if train && !jobs.is_empty() {
        b.seed();
    }
    let v = Engine::Vector;
    for job in &jobs {
        b.load(job, 1, input, x);
        if train {
            b.memset(job, ones, 1.0);
            let op = Op::Dropout(Dropout {
                dst: m.flat(job),
                src: ones.flat(job),
                prob: ScalarOperand::Imm(p),
            });
            b.e.push(v, op);
            let op = Op::ScalarTensorTensor(ScalarTensorTensor {
                dst: res.flat(job),
                src: x.flat(job),
                op0: AluOp::Multiply,
                operand0: ScalarOperand::Imm(scale),
                op1: AluOp::Multiply,
                in1: m.flat(job),
                reverse0: false,
                reverse1: false,
            });
            b.e.push(v, op);
        } else {
            b.copy(job, res, x);
            b.memset(job, m, 1.0);
        }
        if mask_dev == DType::Bool {
            b.e.tensor_scalar_imm(v, mask.flat(job), m.flat(job), AluOp::NotEqual, 0.0);
        } else {
            b.copy(job, mask, m);
        }
        b.store(job, 0, out, res);
        b.store(job, 0, mask_name, mask);
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{OpCall, Value};
    use TorchDType::*;
    use std::collections::BTreeMap;
    use trnsim::{Executor, HostTensor};

    /// A hand-built request.
    struct Call(crate::LowerInput);

    impl Call {
        fn new(op: &'static str, args: Vec<Value>, kwargs: &[(&str, Value)], tensors: &[(&str, TensorMeta)]) -> Call {
            let tensors: BTreeMap<String, TensorMeta> =
                tensors.iter().map(|(n, m)| (n.to_string(), m.clone())).collect();
            let outputs = tensors
                .keys()
                .filter(|n| n.starts_with("output."))
                .map(|n| super::super::OutputSlot::Tensor(n.clone()))
                .collect();
            let kwargs = kwargs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
            Call(crate::LowerInput {
                op: op.to_string(),
                call: OpCall { args, kwargs },
                tensors,
                outputs,
            })
        }

        fn req(&self) -> LowerRequest<'_> {
            self.0.request()
        }

        fn run(&self, inputs: &[(&str, HostTensor)]) -> BTreeMap<String, HostTensor> {
            let l = lower(&self.req(), TargetName::Trn1)
                .map(crate::schedule)
                .expect("lowers");
            let inputs = inputs.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
            Executor::new(TargetName::Trn1)
                .run(&l.program, &inputs)
                .expect("runs")
                .outputs
        }
    }

    fn ints(t: &HostTensor) -> Vec<i64> {
        let size = t.dtype.size();
        t.data
            .chunks_exact(size)
            .map(|c| match t.dtype {
                DType::I32 => i32::from_le_bytes(c.try_into().unwrap()) as i64,
                DType::I16 => i16::from_le_bytes(c.try_into().unwrap()) as i64,
                DType::I8 => c[0] as i8 as i64,
                DType::U8 | DType::Bool => c[0] as i64,
                other => panic!("{other}"),
            })
            .collect()
    }

    fn to_copy(from: TorchDType, to: TorchDType, input: HostTensor) -> Vec<i64> {
        let n = input.num_elems();
        let c = Call::new(
            "_to_copy",
            vec![Value::Tensor("input.0".into())],
            &[("dtype", Value::Dtype(to.name().into()))],
            &[
                ("input.0", TensorMeta::contiguous(from, &[n])),
                ("output.0", TensorMeta::contiguous(to, &[n])),
            ],
        );
        ints(&c.run(&[("input.0", input)])["output.0"])
    }

    #[test]
    fn float_to_int_truncates_toward_zero_and_wraps() {
        let x = [
            2.5f32, -2.5, 2.7, -2.7, 0.4, -0.4, 3.0, -3.0, 1.5e9, -1.5e9, 300.7, -3.7, 8388607.5, 65535.9,
        ];
        let t = HostTensor::from_f32(&[x.len()], &x);
        let want = |w: fn(i64) -> i64| x.iter().map(|&v| w(v.trunc() as i64)).collect::<Vec<_>>();
        assert_eq!(to_copy(F32, I32, t.clone()), want(|v| v));
        assert_eq!(to_copy(F32, I8, t.clone()), want(|v| v as i8 as i64));
        assert_eq!(to_copy(F32, U8, t.clone()), want(|v| v as u8 as i64));
        assert_eq!(to_copy(F32, I16, t.clone()), want(|v| v as i16 as i64));
        assert_eq!(to_copy(F32, Bool, t), vec![1; x.len()]);
    }

    #[test]
    fn int_to_narrow_int_wraps() {
        let x = [300i32, -129, 70000, -1, 0, 127, 128, 2147483647];
        let data = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = HostTensor {
            dtype: DType::I32,
            shape: vec![x.len()],
            data,
        };
        let want = |w: fn(i32) -> i64| x.iter().map(|&v| w(v)).collect::<Vec<_>>();
        assert_eq!(to_copy(I32, I8, t.clone()), want(|v| v as i8 as i64));
        assert_eq!(to_copy(I32, U8, t.clone()), want(|v| v as u8 as i64));
        assert_eq!(to_copy(I32, I16, t.clone()), want(|v| v as i16 as i64));
        assert_eq!(
            to_copy(I32, I64, t),
            want(|v| v as i64),
            "int64 is int32 on the device: a bit copy"
        );
    }

    fn random(op: &'static str, dtype: TorchDType, n: usize) -> Vec<f32> {
        let c = Call::new(
            op,
            vec![Value::Ints(vec![n as i64])],
            &[("dtype", Value::Dtype(dtype.name().into()))],
            &[("output.0", TensorMeta::contiguous(dtype, &[n]))],
        );
        let out = c.run(&[]);
        let again = c.run(&[]);
        assert_eq!(out["output.0"].data, again["output.0"].data, "deterministic");
        out["output.0"].to_f32()
    }

    #[test]
    fn local_scalar_dense_is_read_by_the_engines() {
        let mut c = Call::new(
            "_local_scalar_dense",
            vec![Value::Tensor("input.0".into())],
            &[],
            &[("input.0", TensorMeta::contiguous(F32, &[1, 1]))],
        );
        c.0.outputs = vec![super::super::OutputSlot::NonTensor];
        let l = lower_local_scalar_dense(&c.req(), TargetName::Trn1)
            .map(crate::schedule)
            .unwrap();
        assert!(l.program.instructions.iter().any(|i| i.engine.is_compute()));
        let inputs = [("input.0".to_string(), HostTensor::from_f32(&[1, 1], &[-2.5]))]
            .into_iter()
            .collect();
        let out = Executor::new(TargetName::Trn1)
            .run(&l.program, &inputs)
            .unwrap()
            .outputs;
        assert_eq!(out["output.0"].to_f32(), vec![-2.5]);
        assert!(out["output.0"].shape.is_empty());
    }

    #[test]
    fn randn_is_standard_normal() {
        let z = random("randn", F32, 100_000);
        let n = z.len() as f64;
        let mean = z.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = z.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / (n - 1.0);
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var.sqrt() - 1.0).abs() < 0.01, "std {}", var.sqrt());
        // The shape, not only the moments: P(|z| < 1) = 0.6827, P(|z| < 2) = 0.9545.
        let within = |k: f32| z.iter().filter(|v| v.abs() < k).count() as f64 / n;
        assert!((within(1.0) - 0.6827).abs() < 0.01, "{}", within(1.0));
        assert!((within(2.0) - 0.9545).abs() < 0.005, "{}", within(2.0));
        assert!(z.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn rand_stays_below_one_in_every_dtype() {
        for d in [F32, Bf16, F16] {
            let u = random("rand", d, 20_000);
            assert!(u.iter().all(|&v| (0.0..1.0).contains(&v)), "{d}");
            let mean = u.iter().map(|&v| v as f64).sum::<f64>() / u.len() as f64;
            assert!((mean - 0.5).abs() < 0.01, "{d}: mean {mean}");
        }
    }

    #[test]
    fn randperm_gives_permutations() {
        for n in [1usize, 2, 31, 127, 128, 129, 300, 1000, 4097] {
            let c = Call::new(
                "randperm",
                vec![Value::Int(n as i64)],
                &[],
                &[("output.0", TensorMeta::contiguous(I64, &[n]))],
            );
            let mut p = ints(&c.run(&[])["output.0"]);
            let first = p.clone();
            p.sort();
            assert_eq!(p, (0..n as i64).collect::<Vec<_>>(), "n = {n}");
            if n >= 100 {
                let fixed = first.iter().enumerate().filter(|(i, v)| *i as i64 == **v).count();
                assert!(fixed < 10, "n = {n}: {fixed} fixed points, not shuffled");
            }
        }
    }
}
