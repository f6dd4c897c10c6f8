//! The rest of the binary family: `maximum`, `minimum`, `bitwise_*`, `logical_*`, `clamp`,
//! `clamp.Tensor`, `where.self`, `pow.*`, `atan2`, `fmod`, `remainder`, `div.*_mode` — and the
//! small elementwise kernel builder they (and `comparison.rs`) share.
//!
//! The builder follows binary.rs's scheme: inputs move HBM → SBUF by DMA, broadcasting by the DMA
//! access patterns (stride 0, `tile.rs`), casts to the computation dtype done by the loading DMA
//! (as PyTorch's TensorIterator casts operands to the common dtype); arithmetic on VectorE in fp32
//! with the cast on write, exact int32 arithmetic on GpSimdE where PyTorch's integer result must
//! be exact; per-partition constants computed once on the engines (never on the host).
//! PyTorch's promotion is `promote.rs`; Python scalars reuse binary.rs's [`Scalar`].

use super::binary::{Scalar, dev};
use super::promote::{self, Category, Operand};
use super::tile::{self, Emitter, Region, SbufAllocator, Slot, TileJob, TileLimits, dma, ts, ts_rev, tt};
use super::{LowerError, LowerRequest, Lowered};
use crate::call::{TensorMeta, TensorOrScalar};
use crate::dtype::TorchDType;
use trnsim::{AccessPattern, ActFunc, AluOp, DType, Engine, HbmRole, Program, ScalarOperand, TargetName};

/// Elements per partition of one tile (every scratch tile is 4 bytes × this per partition).
const EW_FREE: usize = 1024;
/// Scratch tiles available to a kernel body.
const SCRATCH: usize = 28;
/// Per-partition constant slots available to a kernel prologue.
const CONSTS: usize = 16;

// ---------------------------------------------------------------------------------------------
// The kernel builder.

/// A tile of SBUF: a full per-job tile, or a `[P, 1]` per-partition constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct T {
    slot: Slot,
    pub dtype: DType,
    konst: bool,
}

impl T {
    /// The same memory viewed as another dtype (no conversion).
    pub fn view(self, dtype: DType) -> T {
        T { dtype, ..self }
    }
}

/// An operand: a tile or an immediate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum X {
    T(T),
    Imm(f64),
}

impl From<T> for X {
    fn from(t: T) -> X {
        X::T(t)
    }
}

/// Emits instructions for one tile job (or, with no job, for the constant prologue).
pub(super) struct Kit<'a> {
    e: &'a mut Emitter,
    job: Option<&'a TileJob>,
    parts: usize,
    scratch: &'a [Slot],
    next: usize,
    consts: &'a [Slot],
    next_const: &'a mut usize,
}

impl Kit<'_> {
    fn partitions(&self) -> usize {
        self.job.map_or(self.parts, |j| j.partitions)
    }

    pub fn ap(&self, t: T) -> AccessPattern {
        match (t.konst, self.job) {
            (false, Some(job)) => job.sbuf_flat(t.dtype, t.slot.offset),
            _ => AccessPattern::sbuf(t.dtype, 0, self.partitions(), t.slot.offset, vec![[1, 1]]),
        }
    }

    fn operand(&self, x: X) -> ScalarOperand {
        match x {
            X::Imm(v) => ScalarOperand::Imm(v),
            X::T(t) => ScalarOperand::Tile(self.ap(t)),
        }
    }

    fn full(&self, x: X) -> bool {
        matches!(x, X::T(t) if !t.konst || self.job.is_none())
    }

    /// A scratch tile (a constant slot in the prologue).
    pub fn tmp(&mut self, dtype: DType) -> Result<T, LowerError> {
        if self.job.is_none() {
            let s = *self
                .consts
                .get(*self.next_const)
                .ok_or_else(|| LowerError::Resources("out of constant slots".into()))?;
            *self.next_const += 1;
            return Ok(T {
                slot: s,
                dtype,
                konst: true,
            });
        }
        let s = *self
            .scratch
            .get(self.next)
            .ok_or_else(|| LowerError::Resources("out of scratch tiles".into()))?;
        self.next += 1;
        Ok(T {
            slot: s,
            dtype,
            konst: false,
        })
    }

    /// The scratch position, to give back later tiles with [`Kit::release`].
    pub fn mark(&self) -> usize {
        self.next
    }

    pub fn release(&mut self, mark: usize) {
        self.next = mark;
    }

    /// `dst = a op b`: tensor_tensor when both are tiles of the job, else tensor_scalar.
    pub fn bin(&mut self, eng: Engine, dst: T, a: X, b: X, op: AluOp) -> Result<(), LowerError> {
        let d = self.ap(dst);
        let (fa, fb) = (self.full(a), self.full(b));
        let inst = match (a, b) {
            (X::T(ta), X::T(tb)) if fa && fb => tt(d, self.ap(ta), self.ap(tb), op),
            (X::T(ta), _) if fa => ts(d, self.ap(ta), op, self.operand(b), None),
            (_, X::T(tb)) if fb => ts_rev(d, self.ap(tb), op, self.operand(a)),
            _ => {
                // Neither operand is a full tile: materialise `a` into dst first.
                self.fill(eng, dst, a)?;
                let op = ts(d, self.ap(dst), op, self.operand(b), None);
                self.e.push(eng, op);
                return Ok(());
            }
        };
        self.e.push(eng, inst);
        Ok(())
    }

    /// `dst = copysign(dst, sign)` on fp32 tiles, bit-exact for zeros, infinities and NaN
    /// (VectorE bitvec: `(dst & 0x7FFF_FFFF) | (sign & 0x8000_0000)`); `scratch` is overwritten.
    pub fn copy_sign(&mut self, dst: T, sign: T, scratch: T) -> Result<(), LowerError> {
        let (v, i) = (Engine::Vector, DType::I32);
        let sign_bit = X::Imm(i32::MIN as f64);
        self.bin(v, scratch.view(i), sign.view(i).into(), sign_bit, AluOp::BitwiseAnd)?;
        let magnitude = X::Imm(i32::MAX as f64);
        self.bin(v, dst.view(i), dst.view(i).into(), magnitude, AluOp::BitwiseAnd)?;
        self.bin(
            v,
            dst.view(i),
            dst.view(i).into(),
            scratch.view(i).into(),
            AluOp::BitwiseOr,
        )
    }

    /// `dst = (src op0 s0) op1 s1` (tensor_scalar with two operators).
    #[allow(clippy::too_many_arguments)]
    pub fn bin2(
        &mut self,
        eng: Engine,
        dst: T,
        src: T,
        op0: AluOp,
        s0: X,
        op1: AluOp,
        s1: X,
    ) -> Result<(), LowerError> {
        let inst = ts(
            self.ap(dst),
            self.ap(src),
            op0,
            self.operand(s0),
            Some((op1, self.operand(s1))),
        );
        self.e.push(eng, inst);
        Ok(())
    }

    /// `dst = x` broadcast over the tile.
    pub fn fill(&mut self, eng: Engine, dst: T, x: X) -> Result<(), LowerError> {
        match x {
            X::Imm(v) => self.memset(eng, dst, v),
            X::T(_) => {
                self.memset(eng, dst, 0.0)?;
                let op = ts(self.ap(dst), self.ap(dst), AluOp::Add, self.operand(x), None);
                self.e.push(eng, op);
                Ok(())
            }
        }
    }

    pub fn memset(&mut self, eng: Engine, dst: T, value: f64) -> Result<(), LowerError> {
        self.e.push(eng, tile::memset(self.ap(dst), value));
        Ok(())
    }

    /// Copy with a cast (float → int rounds to nearest even and saturates).
    pub fn copy(&mut self, eng: Engine, dst: T, src: T) {
        self.e.push(eng, tile::copy(self.ap(dst), self.ap(src)));
    }

    /// `dst = pred ? src : dst` (bit copy, VectorE).
    pub fn copy_pred(&mut self, dst: T, src: T, pred: T) {
        let op = tile::copy_pred(self.ap(dst), self.ap(src), self.ap(pred));
        self.e.push(Engine::Vector, op);
    }

    /// `x` as a tile of `dtype`: `x` itself when it has that dtype, else a scratch copy (the
    /// copy casts).
    pub fn widen(&mut self, x: T, dtype: DType) -> Result<T, LowerError> {
        if x.dtype == dtype {
            return Ok(x);
        }
        let w = self.tmp(dtype)?;
        self.copy(Engine::Vector, w, x);
        Ok(w)
    }

    /// The exact range scale of a magnitude `m` (fp32, ≥ 0 or NaN), on VectorE: `s = 2^64`
    /// where `m < 2^-64`, `2^-64` where `m > 2^64`, else 1 (1 for NaN). A power of two, so
    /// scaling by it is exact; `scratch` (which may be `m`) is overwritten.
    pub fn range_scale(&mut self, s: T, m: T, scratch: T) -> Result<(), LowerError> {
        let v = Engine::Vector;
        let (big, small) = (2f64.powi(64), 2f64.powi(-64));
        self.bin2(v, s, m, AluOp::IsLt, X::Imm(small), AluOp::Multiply, X::Imm(big))?;
        self.bin(v, s, s.into(), X::Imm(1.0), AluOp::Max)?;
        self.bin2(v, scratch, m, AluOp::IsGt, X::Imm(big), AluOp::Multiply, X::Imm(-1.0))?;
        self.bin2(v, scratch, scratch, AluOp::Add, X::Imm(1.0), AluOp::Max, X::Imm(small))?;
        self.bin(v, s, s.into(), scratch.into(), AluOp::Multiply)
    }

    /// VectorE `dst = 1/src`.
    pub fn recip(&mut self, dst: T, src: T) {
        self.e.push(Engine::Vector, tile::recip(self.ap(dst), self.ap(src)));
    }

    /// ScalarE `dst = func(src · scale)`.
    pub fn act(&mut self, func: ActFunc, dst: T, src: T, scale: f64) {
        let op = tile::act(self.ap(dst), func, self.ap(src), ScalarOperand::Imm(scale), None);
        self.e.push(Engine::Scalar, op);
    }
}

/// A tensor input of a kernel and the dtype its SBUF tile is loaded as (the DMA casts).
#[derive(Clone, Debug)]
pub(super) struct Input {
    pub name: String,
    /// How the kernel sees the tensor: dtype and the shape it broadcasts from.
    pub meta: TensorMeta,
    pub load: DType,
    /// The HBM shape when it differs from `meta.shape` (a bool condition iterated with a
    /// trailing size-1 axis over complex real views): same elements, same order.
    pub hbm_shape: Option<Vec<usize>>,
}

/// An elementwise kernel: tensor inputs broadcast to the output.
#[derive(Clone, Debug)]
pub(super) struct Elementwise {
    pub inputs: Vec<Input>,
    pub out_name: String,
    pub out_dtype: TorchDType,
    pub out_shape: Vec<usize>,
}

/// Builds the program: `prologue` computes per-partition constants once; `body` computes one
/// tile job from the loaded inputs and returns the tile to store (the store DMA casts to the
/// output dtype when they differ).
pub(super) fn build<C>(
    req: &LowerRequest<'_>,
    target_name: TargetName,
    k: &Elementwise,
    prologue: impl FnOnce(&mut Kit) -> Result<C, LowerError>,
    body: impl Fn(&mut Kit, &[T], &C) -> Result<T, LowerError>,
) -> Result<Lowered, LowerError> {
    let target = target_name.params();
    let mut program = Program::new(target_name);
    let mut declared: Vec<&str> = Vec::new();
    let mut hbm_dt = Vec::new();
    for i in &k.inputs {
        let d = dev(req, i.meta.dtype)?;
        if !declared.contains(&i.name.as_str()) {
            program.declare(
                &i.name,
                d,
                i.hbm_shape.as_ref().unwrap_or(&i.meta.shape),
                HbmRole::Input,
            );
            declared.push(&i.name);
        }
        hbm_dt.push(d);
    }
    let out_dev = dev(req, k.out_dtype)?;
    program.declare(&k.out_name, out_dev, &k.out_shape, HbmRole::Output);
    let numel: usize = k.out_shape.iter().product();
    if numel == 0 {
        return Ok(Lowered::new(program));
    }

    let mut alloc = SbufAllocator::new(&target);
    let consts: Vec<Slot> = (0..CONSTS).map(|_| alloc.slot(4)).collect::<Result<_, LowerError>>()?;
    let loads: Vec<T> = k
        .inputs
        .iter()
        .map(|i| {
            Ok(T {
                slot: alloc.slot(EW_FREE * i.load.size())?,
                dtype: i.load,
                konst: false,
            })
        })
        .collect::<Result<_, LowerError>>()?;
    let scratch: Vec<Slot> = (0..SCRATCH)
        .map(|_| alloc.slot(EW_FREE * 4))
        .collect::<Result<_, LowerError>>()?;

    let mut e = Emitter::new(program);
    let mut next_const = 0usize;
    let c = {
        let mut kit = Kit {
            e: &mut e,
            job: None,
            parts: target.partitions,
            scratch: &scratch,
            next: 0,
            consts: &consts,
            next_const: &mut next_const,
        };
        prologue(&mut kit)?
    };

    let mut strides = vec![tile::broadcast_strides(&k.out_shape, &k.out_shape)];
    for i in &k.inputs {
        strides.push(tile::broadcast_strides(&i.meta.shape, &k.out_shape));
    }
    let jobs = tile::plan_tiles(
        Region::new(&k.out_shape, &strides),
        TileLimits::for_target(&target, EW_FREE),
    );
    for job in &jobs {
        for (n, (i, t)) in k.inputs.iter().zip(&loads).enumerate() {
            e.push(
                Engine::Dma,
                dma(
                    job.sbuf_shaped(t.dtype, t.slot.offset),
                    job.hbm_ap(n + 1, &i.name, hbm_dt[n]),
                ),
            );
        }
        let mut kit = Kit {
            e: &mut e,
            job: Some(job),
            parts: target.partitions,
            scratch: &scratch,
            next: 0,
            consts: &consts,
            next_const: &mut next_const,
        };
        let mut r = body(&mut kit, &loads, &c)?;
        if r.konst {
            return Err(req.invalid("kernel result is a constant".into()));
        }
        if r.dtype == DType::I32 && matches!(out_dev, DType::U8 | DType::I8 | DType::I16) {
            r = wrap_narrow(&mut kit, r, out_dev)?;
        }
        e.push(
            Engine::Dma,
            dma(
                job.hbm_ap(0, &k.out_name, out_dev),
                job.sbuf_shaped(r.dtype, r.slot.offset),
            ),
        );
    }
    Ok(Lowered::new(e.finish()))
}

/// Wraps int32 values to a narrow integer width the way PyTorch's integer overflow does (the
/// store DMA would saturate): u8 `x & 0xFF`; signed w bits `((x & mask) ^ sign) − sign`
/// (VectorE bitvec, GpSimd exact subtract), as binary.rs does for add/sub/mul.
fn wrap_narrow(kit: &mut Kit, r: T, out: DType) -> Result<T, LowerError> {
    let (mask, sign) = match out {
        DType::U8 => (0xFF, 0),
        DType::I8 => (0xFF, 0x80),
        _ => (0xFFFF, 0x8000),
    };
    let w = kit.tmp(DType::I32)?;
    if sign == 0 {
        kit.bin(Engine::Vector, w, r.into(), X::Imm(mask as f64), AluOp::BitwiseAnd)?;
    } else {
        kit.bin2(
            Engine::Vector,
            w,
            r,
            AluOp::BitwiseAnd,
            X::Imm(mask as f64),
            AluOp::BitwiseXor,
            X::Imm(sign as f64),
        )?;
        kit.bin(Engine::Gpsimd, w, w.into(), X::Imm(sign as f64), AluOp::Subtract)?;
    }
    Ok(w)
}

// ---------------------------------------------------------------------------------------------
// Call analysis shared by the ops here.

/// An operand of a call: a tensor or a Python scalar.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Arg {
    Tensor(String, TensorMeta),
    Scalar(Scalar),
}

impl Arg {
    pub fn operand(&self) -> Operand {
        match self {
            Arg::Tensor(_, m) => Operand::Tensor {
                dtype: m.dtype,
                dim: m.shape.len(),
            },
            Arg::Scalar(s) => Operand::Scalar(s.kind()),
        }
    }

    fn shape(&self) -> &[usize] {
        match self {
            Arg::Tensor(_, m) => &m.shape,
            Arg::Scalar(_) => &[],
        }
    }

    /// The Python scalar, if this argument is one.
    fn scalar(&self) -> Option<Scalar> {
        match self {
            Arg::Scalar(s) => Some(*s),
            Arg::Tensor(..) => None,
        }
    }
}

impl From<TensorOrScalar<'_>> for Arg {
    fn from(a: TensorOrScalar<'_>) -> Arg {
        match a {
            TensorOrScalar::Tensor(name, meta) => Arg::Tensor(name.to_string(), meta.clone()),
            TensorOrScalar::Scalar(s) => Arg::Scalar(s),
        }
    }
}

/// `torch.result_type` of the operands, refusing complex.
pub(super) fn common_type(req: &LowerRequest<'_>, args: &[&Arg]) -> Result<TorchDType, LowerError> {
    let ops: Vec<Operand> = args.iter().map(|a| a.operand()).collect();
    let t = promote::result_type(&ops).map_err(|e| req.unsupported(e.to_string()))?;
    for a in args {
        if let Arg::Tensor(_, m) = a
            && m.dtype.is_complex()
        {
            return Err(req.unsupported(format!("{} operands", m.dtype)));
        }
    }
    if t.is_complex() {
        return Err(req.unsupported(format!("{t} arithmetic")));
    }
    Ok(t)
}

/// The broadcast shape of the operands, checked against the golden output (dtype `want`).
pub(super) fn output(
    req: &LowerRequest<'_>,
    args: &[&Arg],
    want: TorchDType,
) -> Result<(String, Vec<usize>), LowerError> {
    let mut shape: Vec<usize> = Vec::new();
    for a in args {
        shape = tile::broadcast_shapes(&shape, a.shape())
            .ok_or_else(|| req.invalid(format!("shapes {shape:?} and {:?} do not broadcast", a.shape())))?;
    }
    let out_name = req.output_tensor(0)?.to_string();
    let out_meta = req.tensor(&out_name)?;
    if out_meta.dtype != want || out_meta.shape != shape {
        return Err(req.invalid(format!(
            "PyTorch's promotion/broadcasting gives {want} {shape:?}, the golden output is {} {:?}",
            out_meta.dtype, out_meta.shape
        )));
    }
    Ok((out_name, shape))
}

/// Kernel inputs for the tensor args (loaded as `load`), and for each arg its position among
/// the loaded inputs (`None` for scalars).
pub(super) fn inputs(args: &[&Arg], load: impl Fn(&TensorMeta) -> DType) -> (Vec<Input>, Vec<Option<usize>>) {
    let mut v = Vec::new();
    let mut pos = Vec::new();
    for a in args {
        match a {
            Arg::Tensor(n, m) => {
                pos.push(Some(v.len()));
                v.push(Input {
                    name: n.clone(),
                    meta: m.clone(),
                    load: load(m),
                    hbm_shape: None,
                });
            }
            Arg::Scalar(_) => pos.push(None),
        }
    }
    (v, pos)
}

/// An elementwise kernel computed on the operands' common dtype `common` (exact int32 for an
/// integer dtype, else its device dtype) with an output of `out_dtype`.
pub(super) struct OnCommon {
    pub k: Elementwise,
    /// The dtype the inputs are loaded and computed in.
    pub work: DType,
    /// Whether `common` is an integer dtype.
    pub int: bool,
    /// Each arg's position among the kernel inputs (`None` for scalars).
    pub pos: Vec<Option<usize>>,
}

pub(super) fn on_common(
    req: &LowerRequest<'_>,
    args: &[&Arg],
    common: TorchDType,
    out_dtype: TorchDType,
) -> Result<OnCommon, LowerError> {
    let int = is_int(common);
    let work = if int { DType::I32 } else { dev(req, common)? };
    let (k, pos) = on_work(req, args, work, out_dtype)?;
    Ok(OnCommon { k, work, int, pos })
}

/// The elementwise kernel of `args` into the call's output (`out_dtype`), every tensor loaded as
/// `work`, and each arg's position among the kernel inputs (as [`inputs`] gives them).
fn on_work(
    req: &LowerRequest<'_>,
    args: &[&Arg],
    work: DType,
    out_dtype: TorchDType,
) -> Result<(Elementwise, Vec<Option<usize>>), LowerError> {
    let (out_name, out_shape) = output(req, args, out_dtype)?;
    let (inputs, pos) = inputs(args, |_| work);
    let k = Elementwise {
        inputs,
        out_name,
        out_dtype,
        out_shape,
    };
    Ok((k, pos))
}

pub(super) fn is_int(t: TorchDType) -> bool {
    promote::category(t) == Category::Integer
}

/// A scalar as an exact int32 immediate.
pub(super) fn imm_i32(req: &LowerRequest<'_>, s: Scalar) -> Result<f64, LowerError> {
    s.as_i32().map(|v| v as f64).ok_or_else(|| match s {
        // The typed refusal the runner's narrowing gives input tensors (expectations name it).
        Scalar::Int(value) => LowerError::Int64OutsideInt32 {
            op: req.op.to_string(),
            value,
        },
        _ => req.unsupported(format!("scalar {s:?} does not fit in int32 (Trainium has no int64)")),
    })
}

/// The operand for a Python scalar used in `dt` arithmetic: PyTorch casts it to the common dtype
/// first. An f32 immediate is that cast already (the engines read immediates as fp32); other
/// dtypes get a constant tile memset (rounded) to `dt`.
pub(super) fn scalar_in(kit: &mut Kit, s: Scalar, dt: DType) -> Result<X, LowerError> {
    if dt == DType::F32 || dt == DType::I32 {
        return Ok(X::Imm(s.as_f64()));
    }
    let t = kit.tmp(dt)?;
    kit.memset(Engine::Vector, t, s.as_f64())?;
    Ok(X::T(t))
}

// ---------------------------------------------------------------------------------------------
// maximum / minimum / bitwise / logical / clamp / where.

/// The registry entry of every op in this file.
pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let base = req.op.split('.').next().unwrap_or("");
    match base {
        "maximum" | "minimum" => lower_maxmin(req, target, if base == "maximum" { AluOp::Max } else { AluOp::Min }),
        "bitwise_and" => lower_bitwise(req, target, AluOp::BitwiseAnd),
        "bitwise_or" => lower_bitwise(req, target, AluOp::BitwiseOr),
        "bitwise_xor" => lower_bitwise(req, target, AluOp::BitwiseXor),
        "logical_and" => lower_logical(req, target, AluOp::LogicalAnd),
        "logical_or" => lower_logical(req, target, AluOp::LogicalOr),
        "logical_xor" => lower_logical(req, target, AluOp::LogicalXor),
        "clamp" => lower_clamp(req, target),
        "where" => lower_where(req, target),
        "pow" => lower_pow(req, target),
        "div" => lower_divmod(req, target, None),
        "fmod" => lower_divmod(req, target, Some(DivMode::Fmod)),
        "remainder" => lower_divmod(req, target, Some(DivMode::Remainder)),
        "atan2" => lower_atan2(req, target),
        _ => Err(LowerError::NotLowered(req.op.to_string())),
    }
}

/// Two operands (`self`, `other`) as args.
fn two(req: &LowerRequest<'_>) -> Result<(Arg, Arg), LowerError> {
    let a = Arg::from(req.arg::<TensorOrScalar>(0, "self")?);
    let b = Arg::from(req.arg::<TensorOrScalar>(1, "other")?);
    if !matches!(a, Arg::Tensor(..)) {
        return Err(req.invalid("`self` must be a tensor".into()));
    }
    Ok((a, b))
}

/// `dst = a op b` on the common dtype: VectorE fp32 for float/bool, GpSimdE exact int32 for
/// integers. Operands are cast to the common dtype by the loads. Shared by maximum/minimum.
fn lower_maxmin(req: &LowerRequest<'_>, target: TargetName, op: AluOp) -> Result<Lowered, LowerError> {
    let (a, b) = two(req)?;
    let common = common_type(req, &[&a, &b])?;
    let OnCommon { k, work, int, .. } = on_common(req, &[&a, &b], common, common)?;
    let eng = if int { Engine::Gpsimd } else { Engine::Vector };
    build(
        req,
        target,
        &k,
        |_| Ok(()),
        |kit, t, _| {
            let r = kit.tmp(work)?;
            kit.bin(eng, r, t[0].into(), t[1].into(), op)?;
            if work.is_float() {
                propagate_nan(kit, r, t[0])?;
                propagate_nan(kit, r, t[1])?;
            }
            Ok(r)
        },
    )
}

/// `r = x` where x is NaN (bit copy). The NaN behaviour of the engines' max/min is unpublished
/// (a simulator setting); PyTorch's maximum/minimum/clamp propagate NaN, so the lowering does
/// not rely on it.
fn propagate_nan(kit: &mut Kit, r: T, x: T) -> Result<(), LowerError> {
    let m = kit.mark();
    let p = kit.tmp(DType::U8)?;
    kit.bin(Engine::Vector, p, x.into(), x.into(), AluOp::NotEqual)?;
    kit.copy_pred(r, x, p);
    kit.release(m);
    Ok(())
}

/// Bitwise ops on integer/bool operands: VectorE bitvec on the raw bits of the common dtype.
fn lower_bitwise(req: &LowerRequest<'_>, target: TargetName, op: AluOp) -> Result<Lowered, LowerError> {
    let (a, b) = two(req)?;
    let common = common_type(req, &[&a, &b])?;
    if promote::category(common) > Category::Integer {
        return Err(req.invalid(format!("bitwise ops take integer or bool operands, got {common}")));
    }
    let work = dev(req, common)?;
    let (k, _) = on_work(req, &[&a, &b], work, common)?;
    let other = match &b {
        Arg::Scalar(s) => Some(imm_i32(req, *s)?),
        Arg::Tensor(..) => None,
    };
    build(
        req,
        target,
        &k,
        |_| Ok(()),
        |kit, t, _| {
            let r = kit.tmp(work)?;
            let rhs = match other {
                Some(v) => X::Imm(v),
                None => t[1].into(),
            };
            kit.bin(Engine::Vector, r, t[0].into(), rhs, op)?;
            Ok(r)
        },
    )
}

/// Logical ops: truthiness of each operand (NaN is true), bool result. VectorE reads each input
/// in its own dtype as fp32 (a nonzero int32 stays nonzero in fp32).
fn lower_logical(req: &LowerRequest<'_>, target: TargetName, op: AluOp) -> Result<Lowered, LowerError> {
    let (a, b) = two(req)?;
    if !matches!(b, Arg::Tensor(..)) {
        return Err(req.invalid("`other` must be a tensor".into()));
    }
    common_type(req, &[&a, &b])?;
    let (out_name, out_shape) = output(req, &[&a, &b], TorchDType::Bool)?;
    let mut ins = Vec::new();
    for x in [&a, &b] {
        if let Arg::Tensor(n, m) = x {
            ins.push(Input {
                name: n.clone(),
                meta: m.clone(),
                load: dev(req, m.dtype)?,
                hbm_shape: None,
            });
        }
    }
    let k = Elementwise {
        inputs: ins,
        out_name,
        out_dtype: TorchDType::Bool,
        out_shape,
    };
    build(
        req,
        target,
        &k,
        |_| Ok(()),
        |kit, t, _| {
            let r = kit.tmp(DType::Bool)?;
            kit.bin(Engine::Vector, r, t[0].into(), t[1].into(), op)?;
            Ok(r)
        },
    )
}

/// `clamp(self, min=None, max=None)` (Scalars) and `clamp.Tensor` (tensors): `min(max(x, lo), hi)`
/// on the common dtype (NaN propagates through max/min, and `lo > hi` gives `hi`, as PyTorch).
fn lower_clamp(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let x = Arg::from(req.arg::<TensorOrScalar>(0, "self")?);
    let lo = req.opt::<TensorOrScalar>(1, "min")?.map(Arg::from);
    let hi = req.opt::<TensorOrScalar>(2, "max")?.map(Arg::from);
    if lo.is_none() && hi.is_none() {
        return Err(req.invalid("clamp needs `min` or `max`".into()));
    }
    let mut args: Vec<&Arg> = vec![&x];
    args.extend(lo.iter());
    args.extend(hi.iter());
    let common = common_type(req, &args)?;
    let OnCommon { k, work, int, pos, .. } = on_common(req, &args, common, common)?;
    let eng = if int { Engine::Gpsimd } else { Engine::Vector };
    // (operator, which arg) in order: max with lo, then min with hi.
    let mut steps: Vec<(AluOp, usize)> = Vec::new();
    let mut n = 1;
    if lo.is_some() {
        steps.push((AluOp::Max, n));
        n += 1;
    }
    if hi.is_some() {
        steps.push((AluOp::Min, n));
    }
    let scalars: Vec<Option<Scalar>> = args.iter().map(|a| a.scalar()).collect();
    if int {
        for s in scalars.iter().flatten() {
            imm_i32(req, *s)?;
        }
    }
    build(
        req,
        target,
        &k,
        |kit| {
            // Scalar bounds cast to the common dtype, once.
            scalars
                .iter()
                .map(|s| s.map(|s| scalar_in(kit, s, work)).transpose())
                .collect::<Result<Vec<_>, _>>()
        },
        |kit, t, c| {
            let mut cur: X = t[0].into();
            for &(op, i) in &steps {
                let rhs = match (pos[i], c[i]) {
                    (Some(p), _) => t[p].into(),
                    (None, Some(x)) => x,
                    _ => return Err(req.invalid("clamp bound missing".into())),
                };
                let r = kit.tmp(work)?;
                kit.bin(eng, r, cur, rhs, op)?;
                cur = r.into();
            }
            let X::T(r) = cur else { unreachable!() };
            if work.is_float() {
                // NaN in the input or a tensor bound propagates (see `propagate_nan`); a NaN
                // Python bound makes every element NaN.
                for &(_, i) in &steps {
                    if let Some(p) = pos[i] {
                        propagate_nan(kit, r, t[p])?;
                    }
                }
                propagate_nan(kit, r, t[0])?;
                if scalars.iter().flatten().any(|s| s.as_f64().is_nan()) {
                    kit.bin(Engine::Vector, r, r.into(), X::Imm(f64::NAN), AluOp::Add)?;
                }
            }
            Ok(r)
        },
    )
}

/// `where(condition, self, other)`: `dst = other`, then a predicated bit copy of `self` where the
/// condition holds (a select: no arithmetic, so inf/NaN/-0 pass through untouched).
fn lower_where(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let c = Arg::from(req.arg::<TensorOrScalar>(0, "condition")?);
    let a = Arg::from(req.arg::<TensorOrScalar>(1, "self")?);
    let b = Arg::from(req.arg::<TensorOrScalar>(2, "other")?);
    let Arg::Tensor(_, cm) = &c else {
        return Err(req.invalid("`condition` must be a tensor".into()));
    };
    let pred_dt = match cm.dtype {
        TorchDType::Bool => DType::Bool,
        TorchDType::U8 => DType::U8,
        d => return Err(req.unsupported(format!("condition of dtype {d}"))),
    };
    if [&a, &b]
        .iter()
        .any(|x| matches!(x, Arg::Tensor(_, m) if m.dtype.is_complex()))
    {
        return lower_where_complex(req, target, (&c, pred_dt), &a, &b);
    }
    let common = common_type(req, &[&a, &b])?;
    let work = dev(req, common)?;
    let (mut k, pos) = on_work(req, &[&c, &a, &b], work, common)?;
    k.inputs[0].load = pred_dt;
    let sa = a.scalar();
    let sb = b.scalar();
    build(
        req,
        target,
        &k,
        |_| Ok(()),
        |kit, t, _| {
            let get = |kit: &mut Kit, p: Option<usize>, s: Option<Scalar>| -> Result<T, LowerError> {
                match (p, s) {
                    (Some(p), _) => Ok(t[p]),
                    (None, Some(s)) => {
                        let r = kit.tmp(work)?;
                        kit.memset(Engine::Vector, r, s.as_f64())?;
                        Ok(r)
                    }
                    _ => Err(req.invalid("where operand missing".into())),
                }
            };
            let ta = get(kit, pos[1], sa)?;
            let tb = get(kit, pos[2], sb)?;
            let r = kit.tmp(work)?;
            kit.copy(Engine::Vector, r, tb);
            kit.copy_pred(r, ta, t[0]);
            Ok(r)
        },
    )
}

/// `where` with complex64 operands: the same predicated bit copy over their F32 real views
/// (`[..., 2]`, lower/mod.rs), the condition iterated with a trailing axis of 1 so that it
/// selects both parts of an element. Both operands must be complex64 tensors: a real one or a
/// scalar would need its imaginary part made, which is not a move.
fn lower_where_complex(
    req: &LowerRequest<'_>,
    target: TargetName,
    (c, pred_dt): (&Arg, DType),
    a: &Arg,
    b: &Arg,
) -> Result<Lowered, LowerError> {
    let (Arg::Tensor(cn, cm), Arg::Tensor(an, am), Arg::Tensor(bn, bm)) = (c, a, b) else {
        return Err(req.unsupported("where of a complex tensor and a scalar".into()));
    };
    if am.dtype != TorchDType::C64 || bm.dtype != TorchDType::C64 {
        return Err(req.unsupported(format!("where of {} and {} (one real)", am.dtype, bm.dtype)));
    }
    let (out_name, out_shape) = output(req, &[c, a, b], TorchDType::C64)?;
    let view = |m: &TensorMeta, last: usize| {
        let mut shape = m.shape.clone();
        shape.push(last);
        TensorMeta::contiguous(TorchDType::F32, &shape)
    };
    let mut cond = view(cm, 1);
    cond.dtype = cm.dtype;
    let ins = vec![
        Input {
            name: cn.clone(),
            meta: cond,
            load: pred_dt,
            hbm_shape: Some(cm.shape.clone()),
        },
        Input {
            name: an.clone(),
            meta: view(am, 2),
            load: DType::F32,
            hbm_shape: None,
        },
        Input {
            name: bn.clone(),
            meta: view(bm, 2),
            load: DType::F32,
            hbm_shape: None,
        },
    ];
    let k = Elementwise {
        inputs: ins,
        out_name,
        out_dtype: TorchDType::F32,
        out_shape: super::complex_real_view_shape(&out_shape),
    };
    build(
        req,
        target,
        &k,
        |_| Ok(()),
        |kit, t, _| {
            let r = kit.tmp(DType::F32)?;
            kit.copy(Engine::Vector, r, t[2]);
            kit.copy_pred(r, t[1], t[0]);
            Ok(r)
        },
    )
}

// ---------------------------------------------------------------------------------------------
// pow

/// `pow.Tensor_Tensor(self, exponent)`, `pow.Tensor_Scalar(self, exponent)`,
/// `pow.Scalar(self: Scalar, exponent)`, on the common dtype:
/// * float results: GpSimdE's `pow` ALU op (the only engine that has it), fp32 with the cast on
///   write (operands cast to the common dtype by the loads);
/// * integer results must be exact: a known exponent is binary exponentiation by repeated int32
///   multiplies on GpSimdE; a tensor exponent runs square-and-multiply over its 31 value bits
///   (bits extracted with VectorE shifts), and negative exponents give PyTorch's integer rule
///   (1 for base 1, ±1 for base −1, else 0).
fn lower_pow(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let a = Arg::from(req.arg::<TensorOrScalar>(0, "self")?);
    let b = Arg::from(req.arg::<TensorOrScalar>(1, "exponent")?);
    let common = common_type(req, &[&a, &b])?;
    let OnCommon { k, work, int, pos, .. } = on_common(req, &[&a, &b], common, common)?;
    let sa = a.scalar();
    let sb = b.scalar();
    if !int {
        let g = Engine::Gpsimd;
        return build(
            req,
            target,
            &k,
            |_| Ok(()),
            |kit, t, _| {
                let base: X = match (pos[0], sa) {
                    (Some(p), _) => t[p].into(),
                    (None, Some(s)) => X::Imm(s.as_f64()),
                    _ => return Err(req.invalid("pow base missing".into())),
                };
                let exp: X = match (pos[1], sb) {
                    (Some(p), _) => t[p].into(),
                    (None, Some(s)) => X::Imm(s.as_f64()),
                    _ => return Err(req.invalid("pow exponent missing".into())),
                };
                let r = kit.tmp(work)?;
                kit.bin(g, r, base, exp, AluOp::Pow)?;
                if let (X::T(x), X::Imm(e)) = (base, exp)
                    && e.abs() == 0.5
                    && matches!(common, TorchDType::F32 | TorchDType::Bf16)
                {
                    // PyTorch computes f32/bf16 x ** ±0.5 as (r)sqrt(x): NaN for x = −inf, where C's
                    // pow (PyTorch's f16 path) gives inf/0. Add min(x, 0)·0: NaN exactly for −inf
                    // (and NaN), ±0 otherwise.
                    let m = kit.tmp(DType::F32)?;
                    kit.bin2(
                        Engine::Vector,
                        m,
                        x,
                        AluOp::Min,
                        X::Imm(0.0),
                        AluOp::Multiply,
                        X::Imm(0.0),
                    )?;
                    kit.bin(Engine::Vector, r, r.into(), m.into(), AluOp::Add)?;
                }
                Ok(r)
            },
        );
    }
    let g = Engine::Gpsimd;
    let i32t = DType::I32;
    if let Some(e) = sb {
        // Known exponent: binary exponentiation.
        let e = match e {
            Scalar::Int(v) => v,
            Scalar::Bool(v) => v as i64,
            Scalar::Float(_) => {
                return Err(req.invalid("float exponent with an integer result".into()));
            }
        };
        if e < 0 {
            return Err(req.invalid("PyTorch refuses integers to negative integer powers".into()));
        }
        return build(
            req,
            target,
            &k,
            |_| Ok(()),
            |kit, t, _| {
                let x = t[0];
                let r = kit.tmp(i32t)?;
                // r = x·0 + 1 (exact on the int32 path)
                kit.bin2(g, r, x, AluOp::Multiply, X::Imm(0.0), AluOp::Add, X::Imm(1.0))?;
                let sq = kit.tmp(i32t)?;
                kit.copy(g, sq, x);
                let mut e = e;
                while e > 0 {
                    if e & 1 == 1 {
                        kit.bin(g, r, r.into(), sq.into(), AluOp::Multiply)?;
                    }
                    e >>= 1;
                    if e > 0 {
                        kit.bin(g, sq, sq.into(), sq.into(), AluOp::Multiply)?;
                    }
                }
                Ok(r)
            },
        );
    }
    // Tensor exponent (the base may be a scalar).
    let base_imm = match sa {
        Some(s) => Some(imm_i32(req, s)?),
        None => None,
    };
    build(
        req,
        target,
        &k,
        |_| Ok(()),
        |kit, t, _| {
            let e = t[pos[1].ok_or_else(|| req.invalid("pow exponent missing".into()))?];
            let sq = kit.tmp(i32t)?;
            match (pos[0], base_imm) {
                (Some(p), _) => kit.copy(g, sq, t[p]),
                (None, Some(v)) => kit.memset(g, sq, v)?,
                _ => return Err(req.invalid("pow base missing".into())),
            }
            let base = kit.tmp(i32t)?;
            kit.copy(g, base, sq);
            let r = kit.tmp(i32t)?;
            kit.bin2(g, r, e, AluOp::Multiply, X::Imm(0.0), AluOp::Add, X::Imm(1.0))?;
            let bit = kit.tmp(i32t)?;
            let m = kit.tmp(i32t)?;
            for k in 0..31 {
                // bit = (e >> k) & 1;  m = bit·(sq − 1) + 1;  r ·= m;  sq ·= sq
                kit.bin2(
                    Engine::Vector,
                    bit,
                    e,
                    AluOp::LogicalShiftRight,
                    X::Imm(k as f64),
                    AluOp::BitwiseAnd,
                    X::Imm(1.0),
                )?;
                kit.bin(g, m, sq.into(), X::Imm(1.0), AluOp::Subtract)?;
                kit.bin(g, m, m.into(), bit.into(), AluOp::Multiply)?;
                kit.bin(g, m, m.into(), X::Imm(1.0), AluOp::Add)?;
                kit.bin(g, r, r.into(), m.into(), AluOp::Multiply)?;
                if k < 30 {
                    kit.bin(g, sq, sq.into(), sq.into(), AluOp::Multiply)?;
                }
            }
            // Negative exponents: sp = (base == 1) + (base == −1)·(1 − 2·(e & 1)); r = neg ? sp : r.
            let sp = kit.tmp(i32t)?;
            let tmp = kit.tmp(i32t)?;
            kit.bin2(
                Engine::Vector,
                bit,
                e,
                AluOp::BitwiseAnd,
                X::Imm(1.0),
                AluOp::BitwiseAnd,
                X::Imm(1.0),
            )?;
            kit.bin2(g, tmp, bit, AluOp::Multiply, X::Imm(-2.0), AluOp::Add, X::Imm(1.0))?;
            kit.bin(g, sp, base.into(), X::Imm(-1.0), AluOp::IsEqual)?;
            kit.bin(g, tmp, tmp.into(), sp.into(), AluOp::Multiply)?;
            kit.bin(g, sp, base.into(), X::Imm(1.0), AluOp::IsEqual)?;
            kit.bin(g, sp, sp.into(), tmp.into(), AluOp::Add)?;
            // neg = e < 0;  r = r + neg·(sp − r)
            kit.bin(g, m, e.into(), X::Imm(0.0), AluOp::IsLt)?;
            kit.bin(g, sp, sp.into(), r.into(), AluOp::Subtract)?;
            kit.bin(g, sp, sp.into(), m.into(), AluOp::Multiply)?;
            kit.bin(g, r, r.into(), sp.into(), AluOp::Add)?;
            Ok(r)
        },
    )
}

// ---------------------------------------------------------------------------------------------
// div with rounding modes, fmod, remainder

/// What a division-like op returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DivMode {
    /// `div(rounding_mode='trunc')`: trunc of the correctly rounded quotient.
    Trunc,
    /// `div(rounding_mode='floor')`: PyTorch's `div_floor` (from the exact fmod).
    Floor,
    /// `fmod`: remainder with the sign of the dividend (exact, like C's fmod).
    Fmod,
    /// `remainder`: remainder with the sign of the divisor (Python's `%`).
    Remainder,
}

/// `div.Tensor_mode` / `div.Scalar_mode` (`rounding_mode` None, 'trunc', 'floor'), `fmod.*`,
/// `remainder.*`. The engines have no divide:
/// * integers (exact, GpSimdE int32 with VectorE fp32 estimates): `q ≈ a · (1/b)` in fp32,
///   rounded to int32; `r = a − q·b` exactly; a second fp32 estimate from `r`; then two exact
///   correction rounds bring `r` into the floor range (`0 ≤ r·sign(b) < |b|`). Trunc results
///   follow from floor ones (`+1` / `−b` when `r ≠ 0` and the signs of a and b differ).
/// * floats (VectorE, fp32, no FMA): quotients `x · (1/b)` (range-scaled reciprocal) made
///   correctly rounded by one correction with the exact residual `x − q·b` (Dekker's
///   two-product, the split done with a bitvec mask); `trunc` via the fp32 magic number `2^23`.
///   `fmod` is an exact reduction `r −= trunc(r/d)·d` over stage divisors `d = b·2^k` (see
///   [`FMOD_STAGES`]); then PyTorch's formulas: `remainder = fmod + b` where the signs differ,
///   `floor = round((a − fmod)/b − [signs differ])` (c10's `div_floor_floating`), and
///   `trunc = trunc(a/b)` of the quotient rounded to the result dtype.
///   Checked bit-exact against Rust's `%`, `/`, `trunc` on fp32 values spread over the whole
///   exponent range (unit tests).
/// * `rounding_mode=None` is true division: binary.rs's `div` lowering.
fn lower_divmod(req: &LowerRequest<'_>, target: TargetName, mode: Option<DivMode>) -> Result<Lowered, LowerError> {
    let mode = match mode {
        Some(m) => m,
        None => match req.opt::<&str>(2, "rounding_mode")? {
            Some("trunc") => DivMode::Trunc,
            Some("floor") => DivMode::Floor,
            None => {
                // True division: exactly div.Tensor / div.Scalar.
                let op = if req.op == "div.Scalar_mode" {
                    "div.Scalar"
                } else {
                    "div.Tensor"
                };
                let mut call = req.call.clone();
                call.kwargs.remove("rounding_mode");
                call.args.truncate(2);
                let sub = LowerRequest {
                    op,
                    call: &call,
                    tensors: req.tensors,
                    outputs: req.outputs,
                };
                return super::binary::lower(&sub, target);
            }
            Some(m) => return Err(req.arg_error(2, "rounding_mode", format!("`{m}` (expected trunc, floor or None)"))),
        },
    };
    let a = Arg::from(req.arg::<TensorOrScalar>(0, "self")?);
    let b = Arg::from(req.arg::<TensorOrScalar>(1, "other")?);
    if !matches!(a, Arg::Tensor(..)) {
        return Err(req.invalid("`self` must be a tensor".into()));
    }
    let common = common_type(req, &[&a, &b])?;
    if common == TorchDType::Bool {
        return Err(req.unsupported("bool division".into()));
    }
    let OnCommon { k, work, int, .. } = on_common(req, &[&a, &b], common, common)?;
    let sb = match b {
        Arg::Scalar(s) if int => Some(imm_i32(req, s)?),
        Arg::Scalar(s) => Some(s.as_f64()),
        Arg::Tensor(..) => None,
    };
    build(
        req,
        target,
        &k,
        |_| Ok(()),
        |kit, t, _| {
            let av = t[0];
            let bv = match sb {
                Some(v) => {
                    let r = kit.tmp(work)?;
                    kit.memset(if int { Engine::Gpsimd } else { Engine::Vector }, r, v)?;
                    r
                }
                None => t[1],
            };
            if int {
                int_divmod(kit, av, bv, mode)
            } else {
                float_divmod(kit, av, bv, mode, work)
            }
        },
    )
}

/// Exact int32 floor/trunc division and remainders (see [`lower_divmod`]).
fn int_divmod(kit: &mut Kit, a: T, b: T, mode: DivMode) -> Result<T, LowerError> {
    let (g, v) = (Engine::Gpsimd, Engine::Vector);
    let (f32t, i32t) = (DType::F32, DType::I32);
    let zero = X::Imm(0.0);
    let bf = kit.tmp(f32t)?;
    kit.copy(v, bf, b);
    let rb = kit.tmp(f32t)?;
    kit.recip(rb, bf);
    let qf = kit.tmp(f32t)?;
    kit.copy(v, qf, a);
    kit.bin(v, qf, qf.into(), rb.into(), AluOp::Multiply)?;
    let q = kit.tmp(i32t)?;
    kit.copy(v, q, qf);
    let r = kit.tmp(i32t)?;
    let tt = kit.tmp(i32t)?;
    kit.bin(g, tt, q.into(), b.into(), AluOp::Multiply)?;
    kit.bin(g, r, a.into(), tt.into(), AluOp::Subtract)?;
    // Second estimate from the exact residual.
    let q1 = kit.tmp(i32t)?;
    kit.copy(v, qf, r);
    kit.bin(v, qf, qf.into(), rb.into(), AluOp::Multiply)?;
    kit.copy(v, q1, qf);
    kit.bin(g, q, q.into(), q1.into(), AluOp::Add)?;
    kit.bin(g, tt, q1.into(), b.into(), AluOp::Multiply)?;
    kit.bin(g, r, r.into(), tt.into(), AluOp::Subtract)?;
    // Floor corrections: s = b < 0.
    let s = kit.tmp(i32t)?;
    kit.bin(g, s, b.into(), zero, AluOp::IsLt)?;
    let (u1, u2, nf, pf) = (kit.tmp(i32t)?, kit.tmp(i32t)?, kit.tmp(i32t)?, kit.tmp(i32t)?);
    for _ in 0..2 {
        // nf = b > 0 ? r < 0 : r > 0
        kit.bin(g, u1, r.into(), zero, AluOp::IsLt)?;
        kit.bin(g, u2, r.into(), zero, AluOp::IsGt)?;
        kit.bin(g, u2, u2.into(), u1.into(), AluOp::Subtract)?;
        kit.bin(g, u2, u2.into(), s.into(), AluOp::Multiply)?;
        kit.bin(g, nf, u1.into(), u2.into(), AluOp::Add)?;
        // pf = b > 0 ? r >= b : r <= b
        kit.bin(g, u1, r.into(), b.into(), AluOp::IsGe)?;
        kit.bin(g, u2, r.into(), b.into(), AluOp::IsLe)?;
        kit.bin(g, u2, u2.into(), u1.into(), AluOp::Subtract)?;
        kit.bin(g, u2, u2.into(), s.into(), AluOp::Multiply)?;
        kit.bin(g, pf, u1.into(), u2.into(), AluOp::Add)?;
        // d = pf − nf;  q += d;  r −= d·b
        kit.bin(g, pf, pf.into(), nf.into(), AluOp::Subtract)?;
        kit.bin(g, q, q.into(), pf.into(), AluOp::Add)?;
        kit.bin(g, tt, pf.into(), b.into(), AluOp::Multiply)?;
        kit.bin(g, r, r.into(), tt.into(), AluOp::Subtract)?;
    }
    match mode {
        DivMode::Floor => return Ok(q),
        DivMode::Remainder => return Ok(r),
        DivMode::Trunc | DivMode::Fmod => {}
    }
    // adj = (r ≠ 0) · ((a < 0) ≠ (b < 0))
    kit.bin(g, u1, a.into(), zero, AluOp::IsLt)?;
    kit.bin(g, u1, u1.into(), s.into(), AluOp::NotEqual)?;
    kit.bin(g, u2, r.into(), zero, AluOp::NotEqual)?;
    kit.bin(g, u1, u1.into(), u2.into(), AluOp::Multiply)?;
    if mode == DivMode::Trunc {
        kit.bin(g, q, q.into(), u1.into(), AluOp::Add)?;
        Ok(q)
    } else {
        kit.bin(g, tt, u1.into(), b.into(), AluOp::Multiply)?;
        kit.bin(g, r, r.into(), tt.into(), AluOp::Subtract)?;
        Ok(r)
    }
}

const TWO23: f64 = 8_388_608.0;

/// `dst = x ≠ 0 and (x < 0) ≠ (y < 0)` (compares only: a product of tiny values would underflow).
fn signs_differ(kit: &mut Kit, dst: T, x: T, y: T) -> Result<(), LowerError> {
    let v = Engine::Vector;
    let m = kit.mark();
    let (p, q) = (kit.tmp(DType::F32)?, kit.tmp(DType::F32)?);
    kit.bin(v, p, x.into(), X::Imm(0.0), AluOp::IsLt)?;
    kit.bin(v, q, y.into(), X::Imm(0.0), AluOp::IsLt)?;
    kit.bin(v, p, p.into(), q.into(), AluOp::NotEqual)?;
    kit.bin(v, q, x.into(), X::Imm(0.0), AluOp::NotEqual)?;
    kit.bin(v, dst, p.into(), q.into(), AluOp::LogicalAnd)?;
    kit.release(m);
    Ok(())
}

/// `n = trunc(x)` in fp32 on VectorE: `rne(|x|)` by the magic number 2^23 (exact below 2^23;
/// from 2^23 on every fp32 is an integer already), minus one where it rounded up, with x's sign.
fn trunc_f32(kit: &mut Kit, n: T, x: T) -> Result<(), LowerError> {
    let v = Engine::Vector;
    let m = kit.mark();
    let ax = kit.tmp(DType::F32)?;
    kit.bin(v, ax, x.into(), X::Imm(0.0), AluOp::Abs)?;
    let t = kit.tmp(DType::F32)?;
    kit.bin2(v, t, ax, AluOp::Add, X::Imm(TWO23), AluOp::Subtract, X::Imm(TWO23))?;
    let gt = kit.tmp(DType::F32)?;
    kit.bin(v, gt, t.into(), ax.into(), AluOp::IsGt)?;
    kit.bin(v, t, t.into(), gt.into(), AluOp::Subtract)?;
    let big = kit.tmp(DType::U8)?;
    kit.bin(v, big, ax.into(), X::Imm(TWO23), AluOp::IsGe)?;
    kit.copy_pred(t, ax, big);
    // sign(x) = (x > 0) − (x < 0);  n = t · sign(x)   (NaN stays NaN)
    kit.bin(v, gt, x.into(), X::Imm(0.0), AluOp::IsGt)?;
    kit.bin(v, ax, x.into(), X::Imm(0.0), AluOp::IsLt)?;
    kit.bin(v, gt, gt.into(), ax.into(), AluOp::Subtract)?;
    // t·sign loses NaN when sign is 0: take t where x is NaN (t = |x| = NaN there).
    kit.bin(v, n, t.into(), gt.into(), AluOp::Multiply)?;
    kit.bin(v, big, x.into(), x.into(), AluOp::NotEqual)?;
    kit.copy_pred(n, t, big);
    kit.release(m);
    Ok(())
}

/// Dekker's split of fp32 `x` into halves `(hi, lo)`, `x = hi + lo` exactly, each with at most
/// 12 significant bits: `hi` is x with its 12 low mantissa bits cleared (a VectorE bitvec AND on
/// the raw bits, so no overflow for large x), `lo = x − hi`.
fn split_f32(kit: &mut Kit, hi: T, lo: T, x: T) -> Result<(), LowerError> {
    let v = Engine::Vector;
    kit.bin(
        v,
        hi.view(DType::I32),
        x.view(DType::I32).into(),
        X::Imm(-4096.0),
        AluOp::BitwiseAnd,
    )?;
    kit.bin(v, lo, x.into(), hi.into(), AluOp::Subtract)?;
    Ok(())
}

/// `r = a − n·b` exactly (fp32, Dekker two-product; `(bh, bl)` = split of b); `r = a` where
/// `n = 0` (so that `b = ±inf` leaves `a`).
fn residual_f32(kit: &mut Kit, r: T, a: T, n: T, bh: T, bl: T, b: T) -> Result<(), LowerError> {
    let v = Engine::Vector;
    let m = kit.mark();
    let (nh, nl, p, e, w) = (
        kit.tmp(DType::F32)?,
        kit.tmp(DType::F32)?,
        kit.tmp(DType::F32)?,
        kit.tmp(DType::F32)?,
        kit.tmp(DType::F32)?,
    );
    split_f32(kit, nh, nl, n)?;
    kit.bin(v, p, n.into(), b.into(), AluOp::Multiply)?;
    kit.bin(v, e, nh.into(), bh.into(), AluOp::Multiply)?;
    kit.bin(v, e, e.into(), p.into(), AluOp::Subtract)?;
    kit.bin(v, w, nh.into(), bl.into(), AluOp::Multiply)?;
    kit.bin(v, e, e.into(), w.into(), AluOp::Add)?;
    kit.bin(v, w, nl.into(), bh.into(), AluOp::Multiply)?;
    kit.bin(v, e, e.into(), w.into(), AluOp::Add)?;
    kit.bin(v, w, nl.into(), bl.into(), AluOp::Multiply)?;
    kit.bin(v, e, e.into(), w.into(), AluOp::Add)?;
    kit.bin(v, r, a.into(), p.into(), AluOp::Subtract)?;
    kit.bin(v, r, r.into(), e.into(), AluOp::Subtract)?;
    let z = kit.tmp(DType::U8)?;
    kit.bin(v, z, n.into(), X::Imm(0.0), AluOp::IsEqual)?;
    kit.copy_pred(r, a, z);
    kit.release(m);
    Ok(())
}

/// Reduction steps of the float remainder per stage: each step removes ~20 bits of the quotient.
/// Stage divisors are b·M², b·M and b with M = 2^75 for |b| < 2^-30, 2^32 for |b| < 2, else 1:
/// no stage divisor overflows and no stage quotient does (≤ 2^127, then ≤ M).
const FMOD_STAGES: [usize; 3] = [7, 4, 5];
/// Each step's quotient keeps 20 significant bits (its low 4 mantissa bits cleared, toward zero)
/// so that the step's residual `r − n·d` stays exactly representable even for huge quotients.
const FMOD_QUOTIENT_MASK: f64 = -16.0;

/// Float floor/trunc division and remainders (see [`lower_divmod`]); fp32 result tile.
fn float_divmod(kit: &mut Kit, a0: T, b0: T, mode: DivMode, work: DType) -> Result<T, LowerError> {
    let v = Engine::Vector;
    let f = DType::F32;
    let zero = X::Imm(0.0);
    let a = kit.widen(a0, f)?;
    let b = kit.widen(b0, f)?;
    let (sc, rbs, bh, bl) = (kit.tmp(f)?, kit.tmp(f)?, kit.tmp(f)?, kit.tmp(f)?);
    // Per divisor: range scaling of the reciprocal as in binary.rs's div (s = 2^64 for
    // |b| < 2^-64, 2^-64 for |b| > 2^64, else 1; rbs = 1 / (b·s); x / b ≈ (x·s)·rbs), and
    // the split of b for the exact products.
    let prep = |kit: &mut Kit, b: T| -> Result<(), LowerError> {
        let m = kit.mark();
        let t1 = kit.tmp(f)?;
        kit.bin(v, t1, b.into(), zero, AluOp::Abs)?;
        kit.range_scale(sc, t1, t1)?;
        kit.bin(v, rbs, b.into(), sc.into(), AluOp::Multiply)?;
        kit.recip(rbs, rbs);
        split_f32(kit, bh, bl, b)?;
        kit.release(m);
        Ok(())
    };
    let est = |kit: &mut Kit, dst: T, x: T| -> Result<(), LowerError> {
        kit.bin(v, dst, x.into(), sc.into(), AluOp::Multiply)?;
        kit.bin(v, dst, dst.into(), rbs.into(), AluOp::Multiply)
    };
    let (q, n, r) = (kit.tmp(f)?, kit.tmp(f)?, kit.tmp(f)?);
    let pred = kit.tmp(DType::U8)?;
    // q = x / b correctly rounded (nearly always): q0 = x·(1/b), then q0 + (x − q0·b)/b with
    // the exact residual, where q0 is finite. `prep(b)` must have run; `tmp` is scratch.
    let div_cr = |kit: &mut Kit, q: T, x: T, tmp: T| -> Result<(), LowerError> {
        est(kit, q, x)?;
        residual_f32(kit, tmp, x, q, bh, bl, b)?;
        est(kit, tmp, tmp)?;
        kit.bin(v, tmp, q.into(), tmp.into(), AluOp::Add)?;
        kit.bin2(v, pred, q, AluOp::Abs, zero, AluOp::IsLe, X::Imm(f32::MAX as f64))?;
        kit.copy_pred(q, tmp, pred);
        Ok(())
    };
    if mode == DivMode::Trunc {
        // trunc of the correctly rounded quotient, rounded to the result dtype first (PyTorch
        // divides in it).
        prep(kit, b)?;
        div_cr(kit, q, a, r)?;
        let qr = if work != f {
            let qr = kit.tmp(work)?;
            kit.copy(v, qr, q);
            qr
        } else {
            q
        };
        trunc_f32(kit, n, qr)?;
        return Ok(n);
    }
    // r = fmod(a, b) exactly: per stage divisor d, repeated n = trunc(r / d), r = r − n·d (exact).
    let (m1, bk) = (kit.tmp(f)?, kit.tmp(f)?);
    // M = 2^75 for |b| < 2^-30, 2^32 for |b| < 2, else 1 (as max(1, c₂·2^32, c₁·2^75)).
    kit.bin2(v, m1, b, AluOp::Abs, zero, AluOp::IsLt, X::Imm(2f64.powi(-30)))?;
    kit.bin2(
        v,
        m1,
        m1,
        AluOp::Multiply,
        X::Imm(2f64.powi(75)),
        AluOp::Max,
        X::Imm(1.0),
    )?;
    kit.bin2(v, bk, b, AluOp::Abs, zero, AluOp::IsLt, X::Imm(2.0))?;
    kit.bin(v, bk, bk.into(), X::Imm(2f64.powi(32)), AluOp::Multiply)?;
    kit.bin(v, m1, m1.into(), bk.into(), AluOp::Max)?;
    kit.copy(v, r, a);
    let r2 = kit.tmp(f)?;
    for (stage, &steps) in FMOD_STAGES.iter().enumerate() {
        kit.copy(v, bk, b);
        for _ in stage..2 {
            kit.bin(v, bk, bk.into(), m1.into(), AluOp::Multiply)?;
        }
        prep(kit, bk)?;
        for _ in 0..steps {
            est(kit, q, r)?;
            trunc_f32(kit, n, q)?;
            kit.bin(
                v,
                n.view(DType::I32),
                n.view(DType::I32).into(),
                X::Imm(FMOD_QUOTIENT_MASK),
                AluOp::BitwiseAnd,
            )?;
            residual_f32(kit, r2, r, n, bh, bl, bk)?;
            kit.copy(v, r, r2);
        }
    }
    // One last step to the sign of a and |r| < |b|: where r·a < 0, r += |b|·sign(a); where
    // |r| ≥ |b|, r −= |b|·sign(a).
    let (sa, ab, w) = (kit.tmp(f)?, kit.tmp(f)?, kit.tmp(f)?);
    kit.bin(v, sa, a.into(), zero, AluOp::IsGt)?;
    kit.bin(v, w, a.into(), zero, AluOp::IsLt)?;
    kit.bin(v, sa, sa.into(), w.into(), AluOp::Subtract)?;
    kit.bin(v, ab, b.into(), zero, AluOp::Abs)?;
    kit.bin(v, ab, ab.into(), sa.into(), AluOp::Multiply)?; // |b|·sign(a)
    signs_differ(kit, pred, r, a)?;
    kit.bin(v, w, r.into(), ab.into(), AluOp::Add)?;
    kit.copy_pred(r, w, pred);
    kit.bin(v, w, r.into(), zero, AluOp::Abs)?;
    kit.bin(v, n, b.into(), zero, AluOp::Abs)?;
    kit.bin(v, pred, w.into(), n.into(), AluOp::IsGe)?;
    kit.bin(v, w, r.into(), ab.into(), AluOp::Subtract)?;
    kit.copy_pred(r, w, pred);
    // fmod has the sign of a, zeros included (fmod(−6, 3) = −0): copy a's sign bit.
    kit.copy_sign(r, a, w)?;
    if mode == DivMode::Fmod {
        return Ok(r);
    }
    // wrong = r ≠ 0 and (r < 0) ≠ (b < 0)
    let wrong = kit.tmp(DType::U8)?;
    signs_differ(kit, wrong, r, b)?;
    if mode == DivMode::Remainder {
        kit.bin(v, w, r.into(), b.into(), AluOp::Add)?;
        kit.copy_pred(r, w, wrong);
        return Ok(r);
    }
    // Floor, as PyTorch's div_floor: d = (a − r) / b; d −= 1 where wrong; fl = floor(d);
    // fl += 1 where d − fl > 0.5; where b = 0: a / b.
    prep(kit, b)?;
    let d = kit.tmp(f)?;
    kit.bin(v, w, a.into(), r.into(), AluOp::Subtract)?;
    div_cr(kit, d, w, n)?;
    kit.bin(v, w, d.into(), X::Imm(1.0), AluOp::Subtract)?;
    kit.copy_pred(d, w, wrong);
    trunc_f32(kit, n, d)?;
    kit.bin(v, w, n.into(), d.into(), AluOp::IsGt)?;
    kit.bin(v, n, n.into(), w.into(), AluOp::Subtract)?;
    kit.bin(v, w, d.into(), n.into(), AluOp::Subtract)?;
    kit.bin(v, pred, w.into(), X::Imm(0.5), AluOp::IsGt)?;
    kit.bin(v, w, n.into(), X::Imm(1.0), AluOp::Add)?;
    kit.copy_pred(n, w, pred);
    kit.bin(v, pred, b.into(), zero, AluOp::IsEqual)?;
    kit.recip(w, b);
    kit.bin(v, w, a.into(), w.into(), AluOp::Multiply)?;
    kit.copy_pred(n, w, pred);
    Ok(n)
}

// ---------------------------------------------------------------------------------------------
// atan2

/// `atan2(self, other)` = atan2(y, x) and `atan2.out`: computed in the float-promoted common
/// dtype (integers → float32) and cast to the output. ScalarE's arctan is valid on [−π/2, π/2]
/// only, so the argument is range-reduced to t = min(|x|,|y|) / max(|x|,|y|) ∈ [0, 1] (VectorE
/// reciprocal with binary.rs's 2^±64 range scaling), then on VectorE: π/2 − a where |y| > |x|,
/// π − a where x's sign bit is set (so −0 counts as negative, like C's atan2), and the sign bit
/// of y copied onto the result with bitvec ops (atan2(−0, x) = −0). 0/0 gives t = 0 and
/// inf/inf gives t = 1 (atan2(±inf, ±inf) = ±π/4, ±3π/4).
fn lower_atan2(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let y = Arg::from(req.arg::<TensorOrScalar>(0, "self")?);
    let x = Arg::from(req.arg::<TensorOrScalar>(1, "other")?);
    if !matches!((&y, &x), (Arg::Tensor(..), Arg::Tensor(..))) {
        return Err(req.invalid("atan2 takes two tensors".into()));
    }
    let mut common = common_type(req, &[&y, &x])?;
    if promote::category(common) <= Category::Integer {
        common = promote::DEFAULT_FLOAT;
    }
    let out_dtype = if req.op == "atan2.out" {
        let name = req.output_tensor(0)?;
        req.tensor(name)?.dtype
    } else {
        common
    };
    if promote::category(out_dtype) != Category::Float {
        return Err(req.invalid(format!("atan2 into {out_dtype}")));
    }
    let work = dev(req, common)?;
    let (k, _) = on_work(req, &[&y, &x], work, out_dtype)?;
    build(
        req,
        target,
        &k,
        |_| Ok(()),
        |kit, t, _| {
            let a = atan2_f32(kit, t[0], t[1])?;
            if work == DType::F32 {
                return Ok(a);
            }
            // PyTorch rounds to the common dtype before any cast to the output.
            let r = kit.tmp(work)?;
            kit.copy(Engine::Vector, r, a);
            Ok(r)
        },
    )
}

fn atan2_f32(kit: &mut Kit, y0: T, x0: T) -> Result<T, LowerError> {
    let v = Engine::Vector;
    let f = DType::F32;
    let zero = X::Imm(0.0);
    let y = kit.widen(y0, f)?;
    let x = kit.widen(x0, f)?;
    let (ax, ay, mn, mx, w, tt) = (
        kit.tmp(f)?,
        kit.tmp(f)?,
        kit.tmp(f)?,
        kit.tmp(f)?,
        kit.tmp(f)?,
        kit.tmp(f)?,
    );
    let pred = kit.tmp(DType::U8)?;
    kit.bin(v, ax, x.into(), zero, AluOp::Abs)?;
    kit.bin(v, ay, y.into(), zero, AluOp::Abs)?;
    kit.bin(v, mn, ax.into(), ay.into(), AluOp::Min)?;
    kit.bin(v, mx, ax.into(), ay.into(), AluOp::Max)?;
    // Range scaling by the same exact power of two for both.
    kit.range_scale(w, mx, tt)?;
    kit.bin(v, mn, mn.into(), w.into(), AluOp::Multiply)?;
    kit.bin(v, mx, mx.into(), w.into(), AluOp::Multiply)?;
    // t = mn / mx; 0 where mx = 0; 1 where both are inf.
    kit.recip(tt, mx);
    kit.bin(v, tt, mn.into(), tt.into(), AluOp::Multiply)?;
    kit.memset(v, w, 0.0)?;
    kit.bin(v, pred, mx.into(), zero, AluOp::IsEqual)?;
    kit.copy_pred(tt, w, pred);
    kit.memset(v, w, 1.0)?;
    kit.bin(v, pred, mn.into(), X::Imm(f32::MAX as f64), AluOp::IsGt)?;
    kit.copy_pred(tt, w, pred);
    // a = arctan(t), t ∈ [0, 1]
    let a = kit.tmp(f)?;
    kit.act(ActFunc::Arctan, a, tt, 1.0);
    // π/2 − a where |y| > |x|
    kit.bin(v, pred, ay.into(), ax.into(), AluOp::IsGt)?;
    kit.bin(v, w, X::Imm(std::f64::consts::FRAC_PI_2), a.into(), AluOp::Subtract)?;
    kit.copy_pred(a, w, pred);
    // π − a where x's sign bit is set
    let i = DType::I32;
    kit.bin(v, mn.view(i), x.view(i).into(), X::Imm(31.0), AluOp::LogicalShiftRight)?;
    kit.bin(v, w, X::Imm(std::f64::consts::PI), a.into(), AluOp::Subtract)?;
    kit.copy_pred(a, w, mn.view(DType::U32));
    // The sign bit of y.
    kit.copy_sign(a, y, mn)?;
    Ok(a)
}

#[cfg(test)]
mod tests {
    //! Runs lowered programs on the simulator with hand-picked values (the edge cases of the
    //! compositions: int32 beyond 2^24, exact remainders, quotients near integers, signed zeros,
    //! inf/NaN) against Rust's own operators in the role of PyTorch.
    use super::*;
    use crate::call::{JsonFloat, Value};
    use TorchDType::*;
    use std::collections::BTreeMap;
    use trnsim::{Executor, HostTensor};

    enum In {
        F32(Vec<f32>),
        I32(Vec<i32>),
        Bool(Vec<bool>),
        S(Value),
    }

    /// Lowers `op(args…)` with 1-d tensor inputs and runs it; returns the output's raw bits.
    fn run(op: &'static str, args: Vec<In>, out: TorchDType, n: usize) -> Vec<u32> {
        run_on(Executor::new(TargetName::Trn1), op, args, out, n)
    }

    fn run_on(exec: Executor, op: &'static str, args: Vec<In>, out: TorchDType, n: usize) -> Vec<u32> {
        let mut tensors = BTreeMap::new();
        let mut host = BTreeMap::new();
        let mut call_args = Vec::new();
        for (i, a) in args.into_iter().enumerate() {
            let name = format!("input.{i}");
            let (dt, ht) = match a {
                In::S(v) => {
                    call_args.push(v);
                    continue;
                }
                In::F32(v) => (F32, HostTensor::from_f32(&[v.len()], &v)),
                In::I32(v) => (
                    I32,
                    HostTensor {
                        dtype: DType::I32,
                        shape: vec![v.len()],
                        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                    },
                ),
                In::Bool(v) => (
                    Bool,
                    HostTensor {
                        dtype: DType::Bool,
                        shape: vec![v.len()],
                        data: v.iter().map(|&b| b as u8).collect(),
                    },
                ),
            };
            tensors.insert(name.clone(), TensorMeta::contiguous(dt, &ht.shape));
            host.insert(name.clone(), ht);
            call_args.push(Value::Tensor(name));
        }
        tensors.insert("output.0".into(), TensorMeta::contiguous(out, &[n]));
        let input = crate::LowerInput::positional(op, call_args, &tensors);
        let req = input.request();
        let lowered = super::super::lower_request(&req, TargetName::Trn1).unwrap();
        let r = exec.run(&lowered.program, &host).unwrap();
        r.outputs["output.0"].bits()
    }

    fn f(v: f64) -> In {
        In::S(Value::Float(JsonFloat(v)))
    }

    #[test]
    fn int_division_is_exact_beyond_2_24() {
        let a: Vec<i32> = vec![
            i32::MAX,
            -i32::MAX,
            2_000_000_011,
            -1_999_999_999,
            16_777_217,
            -16_777_217,
            7,
            -7,
            7,
            -7,
            0,
            6,
            -6,
            123_456_789,
        ];
        let b: Vec<i32> = vec![3, 3, 1, -7, 2, 2, 2, 2, -2, -2, 5, 3, 3, -10_000];
        let n = a.len();
        let floor = |x: i32, y: i32| x.div_euclid(y) - if y < 0 && x.rem_euclid(y) != 0 { 1 } else { 0 };
        type Reference = fn(i32, i32) -> i32;
        let fmod: Reference = |x, y| x % y;
        let remainder: Reference = |x, y| {
            let r = x % y;
            if r != 0 && (r < 0) != (y < 0) { r + y } else { r }
        };
        for (op, want) in [("fmod.Tensor", fmod), ("remainder.Tensor", remainder)] {
            let got = run(op, vec![In::I32(a.clone()), In::I32(b.clone())], I32, n);
            for k in 0..n {
                assert_eq!(got[k] as i32, want(a[k], b[k]), "{op}({}, {})", a[k], b[k]);
            }
        }
        for (mode, want) in [
            ("trunc", (|x: i32, y: i32| x / y) as fn(i32, i32) -> i32),
            ("floor", floor),
        ] {
            let mut tensors = vec![In::I32(a.clone()), In::I32(b.clone())];
            tensors.push(In::S(Value::Str(mode.into())));
            let got = run("div.Tensor_mode", tensors, I32, n);
            for k in 0..n {
                assert_eq!(got[k] as i32, want(a[k], b[k]), "div {mode} ({}, {})", a[k], b[k]);
            }
        }
    }

    #[test]
    fn float_fmod_and_floor_are_exact() {
        let a: Vec<f32> = vec![
            6.0,
            -6.0,
            0.3,
            -0.3,
            1e30,
            3.4e38,
            5.5,
            -5.5,
            1.0,
            -1.0,
            0.0,
            -0.0,
            7.0,
            f32::INFINITY,
            1.0,
        ];
        let b: Vec<f32> = vec![
            3.0,
            3.0,
            0.1,
            0.1,
            3.0,
            0.5,
            -2.0,
            -2.0,
            1e-45,
            f32::INFINITY,
            2.0,
            2.0,
            0.0,
            2.0,
            -f32::INFINITY,
        ];
        let n = a.len();
        let got = run("fmod.Tensor", vec![In::F32(a.clone()), In::F32(b.clone())], F32, n);
        for k in 0..n {
            let (g, w) = (f32::from_bits(got[k]), a[k] % b[k]);
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "fmod({}, {}) = {g}, want {w}",
                a[k],
                b[k]
            );
        }
        let got = run("remainder.Tensor", vec![In::F32(a.clone()), In::F32(b.clone())], F32, n);
        for k in 0..n {
            let m = a[k] % b[k];
            let w = if m != 0.0 && (m < 0.0) != (b[k] < 0.0) {
                m + b[k]
            } else {
                m
            };
            let g = f32::from_bits(got[k]);
            assert!(
                g == w || (g.is_nan() && w.is_nan()),
                "remainder({}, {}) = {g}, want {w}",
                a[k],
                b[k]
            );
        }
    }

    #[test]
    fn int_pow_is_exact_and_wraps() {
        let a: Vec<i32> = vec![3, -3, 2, 1, -1, -1, 0, 7, 5, 2];
        let e: Vec<i32> = vec![19, 3, 31, -5, -3, -4, 0, 11, 0, 40];
        let n = a.len();
        let got = run(
            "pow.Tensor_Tensor",
            vec![In::I32(a.clone()), In::I32(e.clone())],
            I32,
            n,
        );
        for k in 0..n {
            let want = if e[k] < 0 {
                match a[k] {
                    1 => 1,
                    -1 => {
                        if e[k] % 2 == 0 {
                            1
                        } else {
                            -1
                        }
                    }
                    _ => 0,
                }
            } else {
                a[k].wrapping_pow(e[k] as u32)
            };
            assert_eq!(got[k] as i32, want, "{}^{}", a[k], e[k]);
        }
        let got = run(
            "pow.Tensor_Scalar",
            vec![In::I32(a.clone()), In::S(Value::Int(13))],
            I32,
            n,
        );
        for k in 0..n {
            assert_eq!(got[k] as i32, a[k].wrapping_pow(13), "{}^13", a[k]);
        }
    }

    #[test]
    fn compare_int32_exactly_and_where_selects_bits() {
        let a: Vec<i32> = vec![16_777_217, 16_777_216, -2_147_483_648, 5];
        let b: Vec<i32> = vec![16_777_216, 16_777_217, -2_147_483_647, 5];
        let got = run("gt.Tensor", vec![In::I32(a.clone()), In::I32(b.clone())], Bool, 4);
        assert_eq!(got, vec![1, 0, 0, 0]);
        let got = run(
            "eq.Scalar",
            vec![In::I32(a.clone()), In::S(Value::Int(16_777_217))],
            Bool,
            4,
        );
        assert_eq!(got, vec![1, 0, 0, 0]);
        let got = run("lt.Scalar", vec![In::I32(a), In::S(Value::Int(1 << 40))], Bool, 4);
        assert_eq!(got, vec![1, 1, 1, 1], "an int64 scalar beyond int32");
        let x = vec![f32::INFINITY, f32::NAN, -0.0, 1.0];
        let y = vec![f32::NAN, 2.0, f32::NEG_INFINITY, -0.0];
        let got = run(
            "where.self",
            vec![In::Bool(vec![true, false, true, false]), In::F32(x), In::F32(y)],
            F32,
            4,
        );
        assert_eq!(
            got,
            vec![
                f32::INFINITY.to_bits(),
                2f32.to_bits(),
                (-0f32).to_bits(),
                (-0f32).to_bits()
            ]
        );
    }

    #[test]
    fn atan2_quadrants_and_special_values() {
        let y: Vec<f32> = vec![
            1.0,
            1.0,
            -1.0,
            -1.0,
            0.0,
            -0.0,
            0.0,
            -0.0,
            f32::INFINITY,
            -f32::INFINITY,
            3.0,
            1e-45,
            1e38,
            f32::NAN,
        ];
        let x: Vec<f32> = vec![
            1.0,
            -1.0,
            1.0,
            -1.0,
            0.0,
            0.0,
            -0.0,
            -0.0,
            f32::INFINITY,
            -f32::INFINITY,
            1e-40,
            1e-45,
            -1e-38,
            1.0,
        ];
        let got = run("atan2", vec![In::F32(y.clone()), In::F32(x.clone())], F32, y.len());
        for k in 0..y.len() {
            let (g, w) = (f32::from_bits(got[k]), y[k].atan2(x[k]));
            assert!(
                (g.is_nan() && w.is_nan())
                    || (g == w && g.is_sign_negative() == w.is_sign_negative())
                    || (g - w).abs() <= 2e-7 * w.abs(),
                "atan2({}, {}) = {g}, want {w}",
                y[k],
                x[k]
            );
        }
    }

    #[test]
    fn clamp_maximum_and_float_division_modes() {
        let a = vec![f32::NAN, -3.0, 0.5, 7.0];
        let got = run("clamp", vec![In::F32(a.clone()), f(-1.0), f(1.0)], F32, 4);
        assert!(f32::from_bits(got[0]).is_nan());
        assert_eq!(
            got[1..].iter().map(|&b| f32::from_bits(b)).collect::<Vec<_>>(),
            vec![-1.0, 0.5, 1.0]
        );
        let got = run(
            "maximum",
            vec![In::F32(a), In::F32(vec![0.0, 0.0, f32::NAN, 8.0])],
            F32,
            4,
        );
        assert!(f32::from_bits(got[0]).is_nan() && f32::from_bits(got[2]).is_nan());
        assert_eq!((f32::from_bits(got[1]), f32::from_bits(got[3])), (0.0, 8.0));
        // Quotients that are exact integers or just below one.
        let x = vec![0.3f32, 6.0, -7.5, 1.0, 9.0];
        let d = vec![0.1f32, 3.0, 2.5, 0.1, -3.0];
        let mut args = vec![In::F32(x.clone()), In::F32(d.clone())];
        args.push(In::S(Value::Str("floor".into())));
        let got = run("div.Tensor_mode", args, F32, 5);
        for k in 0..5 {
            let m = x[k] % d[k];
            let mut q = (x[k] - m) / d[k];
            if m != 0.0 && (d[k] < 0.0) != (m < 0.0) {
                q -= 1.0;
            }
            let mut fl = q.floor();
            if q - fl > 0.5 {
                fl += 1.0;
            }
            assert_eq!(f32::from_bits(got[k]), fl, "floor({} / {})", x[k], d[k]);
        }
        let mut args = vec![In::F32(x.clone()), In::F32(d.clone())];
        args.push(In::S(Value::Str("trunc".into())));
        let got = run("div.Tensor_mode", args, F32, 5);
        for k in 0..5 {
            assert_eq!(
                f32::from_bits(got[k]),
                (x[k] / d[k]).trunc(),
                "trunc({} / {})",
                x[k],
                d[k]
            );
        }
    }

    #[test]
    fn nan_propagates_whatever_the_engines_max_min_do() {
        let cfg = trnsim::ExecConfig {
            numerics: trnsim::Numerics {
                nan_max_min: trnsim::NanMaxMin::PreferNumber,
                ..Default::default()
            },
            ..Default::default()
        };
        let exec = || Executor::with_config(TargetName::Trn1, cfg.clone());
        let a = vec![f32::NAN, 1.0, 2.0];
        let b = vec![0.0, f32::NAN, 3.0];
        for op in ["maximum", "minimum"] {
            let got = run_on(exec(), op, vec![In::F32(a.clone()), In::F32(b.clone())], F32, 3);
            assert!(
                f32::from_bits(got[0]).is_nan() && f32::from_bits(got[1]).is_nan(),
                "{op}"
            );
        }
        let got = run_on(
            exec(),
            "clamp.Tensor",
            vec![In::F32(a.clone()), In::F32(b.clone())],
            F32,
            3,
        );
        assert!(f32::from_bits(got[0]).is_nan() && f32::from_bits(got[1]).is_nan());
        assert_eq!(f32::from_bits(got[2]), 3.0);
        let got = run_on(exec(), "clamp", vec![In::F32(b), f(f64::NAN)], F32, 3);
        assert!(got.iter().all(|&x| f32::from_bits(x).is_nan()));
    }

    #[test]
    fn narrow_int_results_wrap_like_pytorch() {
        let run_u8 = |op: &'static str, a: Vec<u8>, e: i64| {
            let mut tensors = BTreeMap::new();
            tensors.insert("input.0".to_string(), TensorMeta::contiguous(U8, &[a.len()]));
            tensors.insert("output.0".to_string(), TensorMeta::contiguous(U8, &[a.len()]));
            let input =
                crate::LowerInput::positional(op, vec![Value::Tensor("input.0".into()), Value::Int(e)], &tensors);
            let req = input.request();
            let p = super::super::lower_request(&req, TargetName::Trn1).unwrap().program;
            let mut host = BTreeMap::new();
            host.insert(
                "input.0".to_string(),
                HostTensor {
                    dtype: DType::U8,
                    shape: vec![a.len()],
                    data: a.clone(),
                },
            );
            Executor::new(TargetName::Trn1).run(&p, &host).unwrap().outputs["output.0"].bits()
        };
        let a = vec![3u8, 200, 17, 255];
        let got = run_u8("pow.Tensor_Scalar", a.clone(), 7);
        let want: Vec<u32> = a.iter().map(|&x| x.wrapping_pow(7) as u32).collect();
        assert_eq!(got, want);
    }

    /// Deterministic fp32 values across the whole exponent range (an LCG; no RNG dependency).
    fn spread(n: usize, seed: u64) -> Vec<f32> {
        let mut st = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                st = st.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let bits = (st >> 32) as u32;
                let e = ((bits >> 23) & 0xFF) % 254 + 1; // finite, normal
                let e = if bits & 0x100 == 0 { 96 + e % 64 } else { e }; // half of them near 1
                f32::from_bits((bits & 0x807F_FFFF) | (e << 23))
            })
            .collect()
    }

    /// Asserts `ok(a, b, got)` for every element (`got` as fp32 bits), naming up to five
    /// (a, b, got) triples that fail.
    fn assert_all_ok(what: &str, a: &[f32], b: &[f32], got: &[u32], ok: impl Fn(f32, f32, f32) -> bool) {
        let bad: Vec<_> = (0..a.len())
            .map(|k| (a[k], b[k], f32::from_bits(got[k])))
            .filter(|&(x, y, g)| !ok(x, y, g))
            .collect();
        assert!(
            bad.is_empty(),
            "{} {what} mismatches, e.g. {:?}",
            bad.len(),
            &bad[..bad.len().min(5)]
        );
    }

    #[test]
    fn float_division_modes_match_pytorch_on_spread_values() {
        let n = 3000;
        let a = spread(n, 11);
        let b = spread(n, 12);
        let same = |g: f32, w: f32| g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
        let got = run("fmod.Tensor", vec![In::F32(a.clone()), In::F32(b.clone())], F32, n);
        assert_all_ok("fmod", &a, &b, &got, |x, y, g| same(g, x % y));
        let mut args = vec![In::F32(a.clone()), In::F32(b.clone())];
        args.push(In::S(Value::Str("trunc".into())));
        let got = run("div.Tensor_mode", args, F32, n);
        assert_all_ok("trunc", &a, &b, &got, |x, y, g| {
            same(g, (x / y).trunc()) || g == (x / y).trunc()
        });
        let mut args = vec![In::F32(a.clone()), In::F32(b.clone())];
        args.push(In::S(Value::Str("floor".into())));
        let got = run("div.Tensor_mode", args, F32, n);
        let floor = |x: f32, y: f32| {
            let m = x % y;
            let mut q = (x - m) / y;
            if m != 0.0 && (y < 0.0) != (m < 0.0) {
                q -= 1.0;
            }
            if q == 0.0 {
                return 0.0f32.copysign(x / y);
            }
            let mut fl = q.floor();
            if q - fl > 0.5 {
                fl += 1.0;
            }
            fl
        };
        assert_all_ok("floor", &a, &b, &got, |x, y, g| {
            let w = floor(x, y);
            g == w || (g.is_nan() && w.is_nan())
        });
    }
}
