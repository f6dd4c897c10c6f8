//! The first op family: `add`, `sub`, `mul`, `div` (Tensor and Scalar overloads).
//!
//! `out = self op (alpha · other)` with PyTorch's broadcasting and type promotion, lowered the way
//! the hardware computes:
//! * inputs move HBM → SBUF by DMA; broadcasting is done by the DMA access patterns (stride 0);
//! * float and bool results: VectorE, which converts every input to fp32, computes in fp32 and
//!   rounds once on write to the output dtype (what PyTorch's CPU kernels do with their fp32
//!   "opmath" for bf16/f16). Bool results add a `!= 0` step;
//! * integer results: GpSimdE's exact int32 path (all operands int32; narrower inputs are widened
//!   by the DMA). PyTorch integers wrap on overflow; for int8/int16/uint8 results the int32 value
//!   is wrapped to the narrow width with bit operations on VectorE before the store;
//! * operands are cast to the result dtype first, as PyTorch's TensorIterator does (a 0-d f32
//!   tensor added to bf16 is rounded to bf16; an f16 add of the scalar 1e30 adds inf), except that
//!   mul/div use a scalar second operand at its original value (`original_scalar_value`). The
//!   casts are done by the loading DMA (or by `memset` for Python scalars);
//! * division: the engines have no divide. `a / b = (a·s) · reciprocal(b·s)` with VectorE's
//!   `reciprocal` (fp32), where `s = 2^±64` for divisors outside [2^-64, 2^64] (else 1) so the
//!   reciprocal neither overflows nor goes subnormal. Multiplying by the reciprocal is within
//!   1.5 fp32 ulp of the correctly rounded quotient, well inside PyTorch's f32 tolerance
//!   (rtol 1.3e-6 ≈ 11 ulp), so no Newton step is needed.
//! * scalar operands that need arithmetic before use (`alpha · other`, the divisor's reciprocal)
//!   are computed on the engines too, once per program, into per-partition constant tiles.
//!
//! Nothing is computed on the host.

use super::promote::{self, Category, Operand, ScalarKind};
use super::tile::{self, Emitter, Region, SbufAllocator, Slot, TileJob, TileLimits, dma, ts, tt};
use super::{LowerError, LowerRequest, Lowered, device_dtype};
use crate::call::{TensorArg, TensorMeta, TensorOrScalar};
use crate::dtype::TorchDType;
use trnsim::{AluOp, DType, Engine, HbmRole, Op, Program, ScalarOperand, TargetName, TensorScalar};

/// Elements per partition of one tile: 4096 × 4 bytes × (up to 6 live tiles) stays far inside
/// SBUF's 176 KiB per partition.
const MAX_FREE: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
}

impl BinOp {
    fn alu(self) -> AluOp {
        match self {
            BinOp::Add => AluOp::Add,
            BinOp::Sub => AluOp::Subtract,
            BinOp::Mul | BinOp::Div => AluOp::Multiply,
        }
    }

    fn has_alpha(self) -> bool {
        matches!(self, BinOp::Add | BinOp::Sub)
    }
}

/// A Python scalar argument (read with the call's accessors).
pub use crate::call::Scalar;

impl Scalar {
    pub(super) fn kind(self) -> ScalarKind {
        match self {
            Scalar::Bool(_) => ScalarKind::Bool,
            Scalar::Int(_) => ScalarKind::Int,
            Scalar::Float(_) => ScalarKind::Float,
        }
    }

    /// The value as the engines' f64 immediate (used as fp32 by arithmetic).
    pub(super) fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as i64 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
        }
    }

    /// The value as an exact int32 immediate, if it is an integer that fits.
    pub(super) fn as_i32(self) -> Option<i32> {
        match self {
            Scalar::Bool(b) => Some(b as i32),
            Scalar::Int(i) => i32::try_from(i).ok(),
            Scalar::Float(_) => None,
        }
    }

    fn is_one(self) -> bool {
        self.as_f64() == 1.0
    }
}

/// The second operand.
#[derive(Clone, Debug, PartialEq)]
pub enum Other {
    Tensor { name: String, meta: TensorMeta },
    Scalar(Scalar),
}

/// A checked call: operands, promoted output dtype, broadcast shape.
#[derive(Clone, Debug, PartialEq)]
pub struct BinaryCall {
    pub op: BinOp,
    pub self_name: String,
    pub self_meta: TensorMeta,
    pub other: Other,
    /// `None` when absent or 1 (no scaling needed).
    pub alpha: Option<Scalar>,
    pub out_name: String,
    pub out_dtype: TorchDType,
    pub out_shape: Vec<usize>,
}

fn parse_op(op: &str) -> Option<BinOp> {
    Some(match op.split('.').next()? {
        "add" => BinOp::Add,
        "sub" => BinOp::Sub,
        "mul" => BinOp::Mul,
        "div" => BinOp::Div,
        _ => return None,
    })
}

/// Checks the call against the schema and PyTorch's rules; computes the output dtype and shape.
pub fn analyze(req: &LowerRequest<'_>) -> Result<BinaryCall, LowerError> {
    if !matches!(
        req.op,
        "add.Tensor"
            | "add.Scalar"
            | "sub.Tensor"
            | "sub.Scalar"
            | "mul.Tensor"
            | "mul.Scalar"
            | "div.Tensor"
            | "div.Scalar"
    ) {
        return Err(LowerError::NotLowered(req.op.to_string()));
    }
    let op = parse_op(req.op).ok_or_else(|| LowerError::NotLowered(req.op.to_string()))?;
    let self_name = req.arg::<TensorArg>(0, "self")?.0.to_string();
    let self_meta = req.tensor(&self_name)?.clone();
    let other = match req.arg::<TensorOrScalar>(1, "other")? {
        TensorOrScalar::Tensor(t, meta) => Other::Tensor {
            name: t.to_string(),
            meta: meta.clone(),
        },
        TensorOrScalar::Scalar(s) => Other::Scalar(s),
    };
    let alpha = match req.opt::<Scalar>(2, "alpha")? {
        None => None,
        Some(a) if op.has_alpha() => {
            if a.is_one() {
                None
            } else {
                Some(a)
            }
        }
        Some(a) => return Err(req.arg_error(2, "alpha", format!("{} takes no alpha, got {a:?}", req.op))),
    };

    let operands = [
        Operand::Tensor {
            dtype: self_meta.dtype,
            dim: self_meta.shape.len(),
        },
        match &other {
            Other::Tensor { meta, .. } => Operand::Tensor {
                dtype: meta.dtype,
                dim: meta.shape.len(),
            },
            Other::Scalar(s) => Operand::Scalar(s.kind()),
        },
    ];
    let promoted = if op == BinOp::Div {
        promote::true_divide_type(&operands)
    } else {
        promote::result_type(&operands)
    };
    let out_dtype = promoted.map_err(|e| req.unsupported(e.to_string()))?;
    for d in [self_meta.dtype, out_dtype].into_iter().chain(match &other {
        Other::Tensor { meta, .. } => Some(meta.dtype),
        Other::Scalar(_) => None,
    }) {
        if d.is_complex() {
            return Err(req.unsupported(format!("{d} arithmetic")));
        }
    }
    if op == BinOp::Sub && out_dtype == TorchDType::Bool {
        return Err(req.invalid("PyTorch does not subtract bool tensors".into()));
    }
    if let Some(a) = alpha {
        let cat = promote::category(out_dtype);
        if matches!(a, Scalar::Float(_)) && cat <= Category::Integer {
            return Err(req.invalid("a float alpha needs a floating-point result".into()));
        }
        if matches!(a, Scalar::Bool(_)) && cat != Category::Bool {
            return Err(req.invalid("a bool alpha needs a bool result".into()));
        }
    }
    let other_shape: &[usize] = match &other {
        Other::Tensor { meta, .. } => &meta.shape,
        Other::Scalar(_) => &[],
    };
    let out_shape = tile::broadcast_shapes(&self_meta.shape, other_shape).ok_or_else(|| {
        req.invalid(format!(
            "shapes {:?} and {other_shape:?} do not broadcast",
            self_meta.shape
        ))
    })?;
    let out_name = req.output_tensor(0)?.to_string();
    let out_meta = req.tensor(&out_name)?;
    // The golden output's dtype and shape must be what PyTorch's rules give: a disagreement is a
    // bug here (or in the golden), not something to paper over by reading the golden's dtype.
    if out_meta.dtype != out_dtype || out_meta.shape != out_shape {
        return Err(req.invalid(format!(
            "PyTorch's promotion/broadcasting gives {out_dtype} {out_shape:?}, the golden output is {} {:?}",
            out_meta.dtype, out_meta.shape
        )));
    }
    Ok(BinaryCall {
        op,
        self_name,
        self_meta,
        other,
        alpha,
        out_name,
        out_dtype,
        out_shape,
    })
}

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let call = analyze(req)?;
    Ok(Lowered::new(emit(&call, target, req)?))
}

/// Where the arithmetic happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// VectorE, fp32 math (float and bool results).
    Fp32,
    /// GpSimdE, exact int32 math (integer results).
    Int32,
}

pub(super) fn dev(req: &LowerRequest<'_>, d: TorchDType) -> Result<DType, LowerError> {
    device_dtype(d).ok_or_else(|| req.unsupported(format!("{d} has no device dtype")))
}

/// A tile of SBUF reused by every tile job.
#[derive(Clone, Copy, Debug)]
pub(super) struct TileSlot {
    pub(super) slot: Slot,
    pub(super) dtype: DType,
}

impl TileSlot {
    pub(super) fn new(alloc: &mut SbufAllocator, dtype: DType, elems: usize) -> Result<TileSlot, LowerError> {
        Ok(TileSlot {
            slot: alloc.slot(elems * dtype.size())?,
            dtype,
        })
    }

    pub(super) fn flat(&self, job: &TileJob) -> trnsim::AccessPattern {
        job.sbuf_flat(self.dtype, self.slot.offset)
    }

    pub(super) fn shaped(&self, job: &TileJob) -> trnsim::AccessPattern {
        job.sbuf_shaped(self.dtype, self.slot.offset)
    }

    /// As a `[partitions, 1]` per-partition constant.
    fn flat_const(&self, partitions: usize) -> trnsim::AccessPattern {
        trnsim::AccessPattern::sbuf(self.dtype, 0, partitions, self.slot.offset, vec![[1, 1]])
    }
}

/// Divisors with |b| outside [2^-64, 2^64] are scaled (with the dividend) by 2^±64 first, so that
/// `reciprocal(b)` neither overflows (b subnormal or tiny: 1/b = inf would turn 0/b and tiny/tiny
/// into NaN/inf) nor goes subnormal and loses bits. Scaling by a power of two is exact.
const DIV_SCALE_EXP: i32 = 64;

/// SBUF tiles (or `[P, 1]` constant tiles) used by the division prologue.
pub(super) struct DivScratch {
    pub(super) s: TileSlot,
    pub(super) t: TileSlot,
}

/// Emits, on VectorE, `s` = the per-element scale and `r = 1 / (b · s)` into `scratch.s` and
/// `scratch.t`: both fp32. `ap` gives each slot's access pattern for this tile.
pub(super) fn emit_div_prologue(
    e: &mut Emitter,
    b: trnsim::AccessPattern,
    scratch: &DivScratch,
    ap: &dyn Fn(&TileSlot) -> trnsim::AccessPattern,
) {
    let big = 2f64.powi(DIV_SCALE_EXP);
    let small = 2f64.powi(-DIV_SCALE_EXP);
    let two = |op0: AluOp,
               v0: f64,
               rev0: bool,
               op1: AluOp,
               v1: f64,
               src: trnsim::AccessPattern,
               dst: trnsim::AccessPattern| {
        Op::TensorScalar(TensorScalar {
            dst,
            src,
            op0,
            operand0: ScalarOperand::Imm(v0),
            reverse0: rev0,
            op1: Some(op1),
            operand1: Some(ScalarOperand::Imm(v1)),
            reverse1: false,
        })
    };
    let (s, t) = (&scratch.s, &scratch.t);
    let v = Engine::Vector;
    // u = |b| < 2^-64 ? 2^64 : 1
    e.push(v, two(AluOp::Abs, 0.0, false, AluOp::IsLt, small, b.clone(), ap(s)));
    e.push(v, two(AluOp::Multiply, big, false, AluOp::Max, 1.0, ap(s), ap(s)));
    // w = |b| > 2^64 ? 2^-64 : 1   (as max(1 - hi, 2^-64))
    e.push(v, two(AluOp::Abs, 0.0, false, AluOp::IsGt, big, b.clone(), ap(t)));
    e.push(v, two(AluOp::Subtract, 1.0, true, AluOp::Max, small, ap(t), ap(t)));
    // s = u · w;  t = 1 / (b · s)
    e.push(v, tt(ap(s), ap(s), ap(t), AluOp::Multiply));
    e.push(v, tt(ap(t), b, ap(s), AluOp::Multiply));
    e.push(v, tile::recip(ap(t), ap(t)));
}

/// Builds the program.
fn emit(call: &BinaryCall, target_name: TargetName, req: &LowerRequest<'_>) -> Result<Program, LowerError> {
    let target = target_name.params();
    let mut program = Program::new(target_name);
    let self_dev = dev(req, call.self_meta.dtype)?;
    let out_dev = dev(req, call.out_dtype)?;
    program.declare(&call.self_name, self_dev, &call.self_meta.shape, HbmRole::Input);
    let other_dev = match &call.other {
        Other::Tensor { name, meta } => {
            let d = dev(req, meta.dtype)?;
            if *name != call.self_name {
                program.declare(name, d, &meta.shape, HbmRole::Input);
            }
            Some(d)
        }
        Other::Scalar(_) => None,
    };
    program.declare(&call.out_name, out_dev, &call.out_shape, HbmRole::Output);

    let path = if promote::category(call.out_dtype) == Category::Integer {
        Path::Int32
    } else {
        Path::Fp32
    };
    let (engine, work) = match path {
        Path::Fp32 => (Engine::Vector, DType::F32),
        Path::Int32 => (Engine::Gpsimd, DType::I32),
    };
    // PyTorch casts every operand to the result dtype before the fp32 arithmetic, except that
    // mul/div use a CPU scalar second operand (Python number or 0-d tensor) at its original
    // value (`iter.original_scalar_value`). The casts happen in the loading DMA.
    let other_is_cpu_scalar = match &call.other {
        Other::Tensor { meta, .. } => meta.shape.is_empty() && !call.self_meta.shape.is_empty(),
        Other::Scalar(_) => true,
    };
    let other_keeps_value = matches!(call.op, BinOp::Mul | BinOp::Div) && other_is_cpu_scalar;
    let a_dtype = if path == Path::Int32 { DType::I32 } else { out_dev };
    let b_dtype = match (path, other_dev) {
        (Path::Int32, Some(_)) => Some(DType::I32),
        (Path::Fp32, Some(d)) => Some(if other_keeps_value { d } else { out_dev }),
        (_, None) => None,
    };
    let imm_i32 = |s: Scalar, what: &str| -> Result<f64, LowerError> {
        s.as_i32().map(|v| v as f64).ok_or_else(|| match s {
            // The typed refusal the runner's narrowing gives input tensors (expectations name it).
            Scalar::Int(value) => LowerError::Int64OutsideInt32 {
                op: req.op.to_string(),
                value,
            },
            _ => req.unsupported(format!("{what} {s:?} does not fit in int32 (Trainium has no int64)")),
        })
    };
    let alpha_imm = match (call.alpha, path) {
        (None, _) => None,
        (Some(a), Path::Fp32) => Some(ScalarOperand::Imm(a.as_f64())),
        (Some(a), Path::Int32) => Some(ScalarOperand::Imm(imm_i32(a, "alpha")?)),
    };

    let mut alloc = SbufAllocator::new(&target);
    let mut e = Emitter::new(program);
    let parts = target.partitions;
    let const_slot = |alloc: &mut SbufAllocator, dtype: DType| -> Result<TileSlot, LowerError> {
        Ok(TileSlot {
            slot: alloc.slot(dtype.size())?,
            dtype,
        })
    };
    let const_ap = |t: &TileSlot| trnsim::AccessPattern::sbuf(t.dtype, 0, parts, t.slot.offset, vec![[1, 1]]);

    // A Python scalar `other` becomes one operand per instruction: an immediate when its fp32
    // value is what PyTorch uses, else a [P, 1] constant tile computed on the engines once.
    // `div_scalar` holds (scale, 1/(other·scale)) tiles for div.Scalar.
    let mut scalar_operand: Option<ScalarOperand> = None;
    let mut div_scalar: Option<(TileSlot, TileSlot)> = None;
    if let Other::Scalar(s) = call.other {
        match (path, call.op) {
            (Path::Int32, _) => {
                let v = imm_i32(s, "scalar")?;
                match &alpha_imm {
                    None => scalar_operand = Some(ScalarOperand::Imm(v)),
                    Some(alpha) => {
                        let raw = const_slot(&mut alloc, DType::I32)?;
                        let c = const_slot(&mut alloc, DType::I32)?;
                        e.memset(engine, const_ap(&raw), v);
                        e.push(
                            engine,
                            tile::ts(const_ap(&c), const_ap(&raw), AluOp::Multiply, alpha.clone(), None),
                        );
                        scalar_operand = Some(ScalarOperand::Tile(const_ap(&c)));
                    }
                }
            }
            (Path::Fp32, BinOp::Mul) => scalar_operand = Some(ScalarOperand::Imm(s.as_f64())),
            (Path::Fp32, BinOp::Div) => {
                let raw = const_slot(&mut alloc, DType::F32)?;
                let scratch = DivScratch {
                    s: const_slot(&mut alloc, DType::F32)?,
                    t: const_slot(&mut alloc, DType::F32)?,
                };
                e.memset(Engine::Vector, const_ap(&raw), s.as_f64());
                emit_div_prologue(&mut e, const_ap(&raw), &scratch, &const_ap);
                div_scalar = Some((scratch.s, scratch.t));
            }
            (Path::Fp32, BinOp::Add | BinOp::Sub) => {
                // add/sub cast the scalar to the result dtype first (f16: 1e30 → inf).
                if out_dev == DType::F32 && alpha_imm.is_none() {
                    scalar_operand = Some(ScalarOperand::Imm(s.as_f64()));
                } else {
                    let raw = const_slot(&mut alloc, out_dev)?;
                    e.memset(Engine::Vector, const_ap(&raw), s.as_f64());
                    let c = match &alpha_imm {
                        None => raw,
                        Some(alpha) => {
                            let c = const_slot(&mut alloc, DType::F32)?;
                            e.push(
                                Engine::Vector,
                                tile::ts(const_ap(&c), const_ap(&raw), AluOp::Multiply, alpha.clone(), None),
                            );
                            c
                        }
                    };
                    scalar_operand = Some(ScalarOperand::Tile(const_ap(&c)));
                }
            }
        }
    }

    // Per-job tiles, reused by every job: the inputs, two fp32/int32 scratches, the result.
    let a = TileSlot::new(&mut alloc, a_dtype, MAX_FREE)?;
    let b = match b_dtype {
        Some(d) => Some(TileSlot::new(&mut alloc, d, MAX_FREE)?),
        None => None,
    };
    let scratch = DivScratch {
        s: TileSlot::new(&mut alloc, work, MAX_FREE)?,
        t: TileSlot::new(&mut alloc, work, MAX_FREE)?,
    };
    // The value before the final cast/fixup: fp32 for bool results, int32 for int results.
    let result_dtype = match (path, call.out_dtype) {
        (Path::Fp32, TorchDType::Bool) => DType::F32,
        (Path::Fp32, _) => out_dev,
        (Path::Int32, _) => DType::I32,
    };
    let result = TileSlot::new(&mut alloc, result_dtype, MAX_FREE)?;
    // Post-processing into the stored dtype: bool `!= 0`, narrow-int wraparound.
    let fixed = if result_dtype != out_dev {
        let d = if path == Path::Int32 { DType::I32 } else { out_dev };
        Some((
            TileSlot::new(&mut alloc, d, MAX_FREE)?,
            TileSlot::new(&mut alloc, d, MAX_FREE)?,
        ))
    } else {
        None
    };

    // Operand 0: the output (contiguous); 1: self; 2: other (if a tensor).
    let mut strides = vec![tile::broadcast_strides(&call.out_shape, &call.out_shape)];
    strides.push(tile::broadcast_strides(&call.self_meta.shape, &call.out_shape));
    if let Other::Tensor { meta, .. } = &call.other {
        strides.push(tile::broadcast_strides(&meta.shape, &call.out_shape));
    }
    let jobs = tile::plan_tiles(
        Region::new(&call.out_shape, &strides),
        TileLimits::for_target(&target, MAX_FREE),
    );

    for job in &jobs {
        let p = job.partitions;
        let flat = |t: &TileSlot| t.flat(job);
        // Load (casting to the tile dtype where it differs).
        e.push(
            Engine::Dma,
            dma(a.shaped(job), job.hbm_ap(1, &call.self_name, self_dev)),
        );
        if let (Some(b), Other::Tensor { name, .. }, Some(d)) = (&b, &call.other, other_dev) {
            e.push(Engine::Dma, dma(b.shaped(job), job.hbm_ap(2, name, d)));
        }
        // Compute `result = self op (alpha · other)`.
        let res = result.flat(job);
        match (&call.other, &b) {
            (Other::Tensor { .. }, Some(b)) => {
                if call.op == BinOp::Div {
                    // result = (a · s) · (1 / (b · s))
                    emit_div_prologue(&mut e, b.flat(job), &scratch, &flat);
                    let (s, t) = (&scratch.s, &scratch.t);
                    e.push(engine, tt(flat(s), a.flat(job), flat(s), AluOp::Multiply));
                    e.push(engine, tt(res, flat(s), flat(t), AluOp::Multiply));
                } else {
                    let mut rhs = b.flat(job);
                    if let Some(alpha) = &alpha_imm {
                        // PyTorch's CPU kernels round `alpha · other` to a bf16/f16 result's
                        // dtype before the add (measured against torch 2.15: every element of
                        // add/sub with alpha matches that, 1 in 4 differs from one rounding), so
                        // the product is written in the output dtype (cast on write, RNE) into
                        // `t`, which only division uses.
                        let s = &match out_dev {
                            DType::Bf16 | DType::F16 if path == Path::Fp32 => TileSlot {
                                dtype: out_dev,
                                ..scratch.t
                            },
                            _ => scratch.s,
                        };
                        e.push(engine, tile::ts(flat(s), rhs, AluOp::Multiply, alpha.clone(), None));
                        rhs = flat(s);
                    }
                    let op = tt(res, a.flat(job), rhs, call.op.alu());
                    e.push(engine, op);
                }
            }
            _ => {
                if let Some((s, r)) = &div_scalar {
                    // result = (a · s) · (1 / (other · s)), both per-partition constants.
                    let op = ts(
                        res,
                        a.flat(job),
                        AluOp::Multiply,
                        ScalarOperand::Tile(s.flat_const(p)),
                        Some((AluOp::Multiply, ScalarOperand::Tile(r.flat_const(p)))),
                    );
                    e.push(engine, op);
                } else {
                    let operand = scalar_operand
                        .clone()
                        .ok_or_else(|| req.invalid("scalar operand missing".into()))?;
                    let operand = match operand {
                        ScalarOperand::Tile(ap) => ScalarOperand::Tile(trnsim::AccessPattern { partitions: p, ..ap }),
                        imm => imm,
                    };
                    e.push(engine, tile::ts(res, a.flat(job), call.op.alu(), operand, None));
                }
            }
        }
        // Fix up into the stored dtype.
        let stored = match fixed {
            None => result,
            Some((f1, f2)) => match call.out_dtype {
                TorchDType::Bool => {
                    e.push(
                        Engine::Vector,
                        tile::ts(
                            f1.flat(job),
                            result.flat(job),
                            AluOp::NotEqual,
                            ScalarOperand::Imm(0.0),
                            None,
                        ),
                    );
                    f1
                }
                TorchDType::U8 | TorchDType::I8 | TorchDType::I16 => {
                    // Wrap int32 to the narrow width like PyTorch's integer overflow:
                    // u8: x & 0xFF. Signed w-bit: ((x & mask) ^ sign) - sign.
                    let (mask, sign) = match call.out_dtype {
                        TorchDType::U8 => (0xFF, 0),
                        TorchDType::I8 => (0xFF, 0x80),
                        _ => (0xFFFF, 0x8000),
                    };
                    let mut op = TensorScalar {
                        dst: f1.flat(job),
                        src: result.flat(job),
                        op0: AluOp::BitwiseAnd,
                        operand0: ScalarOperand::Imm(mask as f64),
                        reverse0: false,
                        op1: None,
                        operand1: None,
                        reverse1: false,
                    };
                    if sign == 0 {
                        e.push(Engine::Vector, Op::TensorScalar(op));
                        f1
                    } else {
                        op.op1 = Some(AluOp::BitwiseXor);
                        op.operand1 = Some(ScalarOperand::Imm(sign as f64));
                        e.push(Engine::Vector, Op::TensorScalar(op));
                        e.push(
                            Engine::Gpsimd,
                            tile::ts(
                                f2.flat(job),
                                f1.flat(job),
                                AluOp::Subtract,
                                ScalarOperand::Imm(sign as f64),
                                None,
                            ),
                        );
                        f2
                    }
                }
                other => return Err(req.invalid(format!("no fixup for {other}"))),
            },
        };
        // Store (the DMA casts int32 → narrow ints exactly: the values are in range).
        e.push(
            Engine::Dma,
            dma(job.hbm_ap(0, &call.out_name, out_dev), stored.shaped(job)),
        );
    }
    Ok(e.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{JsonFloat, Value};
    use TorchDType::*;
    use std::collections::BTreeMap;

    /// A hand-built request.
    struct Call(crate::LowerInput);

    impl Call {
        fn new(op: &'static str, a: TensorMeta, other: Result<TensorMeta, Value>, out: TensorMeta) -> Call {
            let mut tensors = BTreeMap::new();
            tensors.insert("input.0".to_string(), a);
            let mut args = vec![Value::Tensor("input.0".into())];
            match other {
                Ok(m) => {
                    tensors.insert("input.1".to_string(), m);
                    args.push(Value::Tensor("input.1".into()));
                }
                Err(v) => args.push(v),
            }
            tensors.insert("output.0".to_string(), out);
            Call(crate::LowerInput::positional(op, args, &tensors))
        }

        fn alpha(mut self, v: Value) -> Call {
            self.0.call.kwargs.insert("alpha".into(), v);
            self
        }

        fn req(&self) -> LowerRequest<'_> {
            self.0.request()
        }
    }

    fn count(p: &Program, engine: Engine) -> usize {
        p.instructions.iter().filter(|i| i.engine == engine).count()
    }

    #[test]
    fn promotion_checked_against_golden() {
        let c = Call::new(
            "add.Tensor",
            TensorMeta::contiguous(I32, &[3]),
            Ok(TensorMeta::contiguous(F32, &[])),
            TensorMeta::contiguous(F32, &[3]),
        );
        assert_eq!(analyze(&c.req()).unwrap().out_dtype, F32);
        let c = Call::new(
            "add.Tensor",
            TensorMeta::contiguous(F16, &[3]),
            Ok(TensorMeta::contiguous(F32, &[])),
            TensorMeta::contiguous(F16, &[3]),
        );
        assert_eq!(
            analyze(&c.req()).unwrap().out_dtype,
            F16,
            "0-d tensor does not outrank within a category"
        );
        let c = Call::new(
            "div.Tensor",
            TensorMeta::contiguous(I64, &[2, 3]),
            Ok(TensorMeta::contiguous(I64, &[3])),
            TensorMeta::contiguous(F32, &[2, 3]),
        );
        assert_eq!(analyze(&c.req()).unwrap().out_dtype, F32, "int/int → float");
        let c = Call::new(
            "mul.Scalar",
            TensorMeta::contiguous(Bool, &[2]),
            Err(Value::Int(3)),
            TensorMeta::contiguous(I64, &[2]),
        );
        assert_eq!(analyze(&c.req()).unwrap().out_dtype, I64);
        let c = Call::new(
            "add.Scalar",
            TensorMeta::contiguous(Bf16, &[2]),
            Err(Value::Float(JsonFloat(0.5))),
            TensorMeta::contiguous(Bf16, &[2]),
        );
        assert_eq!(analyze(&c.req()).unwrap().out_dtype, Bf16);
        // A golden that disagrees with PyTorch's rules is reported, not followed.
        let c = Call::new(
            "add.Tensor",
            TensorMeta::contiguous(I32, &[3]),
            Ok(TensorMeta::contiguous(I32, &[3])),
            TensorMeta::contiguous(I64, &[3]),
        );
        assert!(matches!(analyze(&c.req()), Err(LowerError::Invalid { .. })));
        let c = Call::new(
            "sub.Tensor",
            TensorMeta::contiguous(Bool, &[3]),
            Ok(TensorMeta::contiguous(Bool, &[3])),
            TensorMeta::contiguous(Bool, &[3]),
        );
        assert!(analyze(&c.req()).is_err());
        let c = Call::new(
            "add.Tensor",
            TensorMeta::contiguous(F32, &[2]),
            Ok(TensorMeta::contiguous(F32, &[3])),
            TensorMeta::contiguous(F32, &[3]),
        );
        assert!(analyze(&c.req()).is_err(), "shapes do not broadcast");
    }

    #[test]
    fn float_add_uses_vector_and_dma_only() {
        let c = Call::new(
            "add.Tensor",
            TensorMeta::contiguous(Bf16, &[5, 5]),
            Ok(TensorMeta::contiguous(Bf16, &[5])),
            TensorMeta::contiguous(Bf16, &[5, 5]),
        );
        let p = lower(&c.req(), TargetName::Trn1).unwrap().program;
        assert_eq!(count(&p, Engine::Vector), 1);
        assert_eq!(count(&p, Engine::Dma), 3);
        assert_eq!(count(&p, Engine::Gpsimd), 0);
        // The broadcast operand is read with a zero partition stride: no host-side copies.
        let Op::DmaCopy(load_b) = &p.instructions[1].op else {
            panic!()
        };
        assert_eq!(load_b.src.partition_step, 0);
        assert_eq!(
            p.hbm.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            vec!["input.0", "input.1", "output.0"]
        );
    }

    #[test]
    fn int_add_with_alpha_on_gpsimd() {
        let c = Call::new(
            "add.Tensor",
            TensorMeta::contiguous(I64, &[7]),
            Ok(TensorMeta::contiguous(I64, &[7])),
            TensorMeta::contiguous(I64, &[7]),
        )
        .alpha(Value::Int(3));
        let p = lower(&c.req(), TargetName::Trn1).unwrap().program;
        assert_eq!(p.hbm[0].dtype, DType::I32, "int64 is declared as int32");
        assert_eq!(count(&p, Engine::Gpsimd), 2);
        assert_eq!(count(&p, Engine::Vector), 0);
        // alpha does not fit int32 → the typed refusal (the narrowing's, for a scalar).
        let c = Call::new(
            "add.Tensor",
            TensorMeta::contiguous(I64, &[7]),
            Ok(TensorMeta::contiguous(I64, &[7])),
            TensorMeta::contiguous(I64, &[7]),
        )
        .alpha(Value::Int(1 << 40));
        assert!(matches!(
            lower(&c.req(), TargetName::Trn1),
            Err(LowerError::Int64OutsideInt32 { value, .. }) if value == 1 << 40
        ));
    }

    #[test]
    fn div_is_reciprocal_then_multiply() {
        let c = Call::new(
            "div.Tensor",
            TensorMeta::contiguous(F32, &[4]),
            Ok(TensorMeta::contiguous(F32, &[4])),
            TensorMeta::contiguous(F32, &[4]),
        );
        let p = lower(&c.req(), TargetName::Trn1).unwrap().program;
        let ops: Vec<&str> = p.instructions.iter().map(|i| i.op.name()).collect();
        let prologue = [
            "tensor_scalar",
            "tensor_scalar",
            "tensor_scalar",
            "tensor_scalar",
            "tensor_tensor",
            "tensor_tensor",
            "reciprocal",
        ];
        let mut want = vec!["dma_copy", "dma_copy"];
        want.extend(prologue);
        want.extend(["tensor_tensor", "tensor_tensor", "dma_copy"]);
        assert_eq!(ops, want, "range scaling, reciprocal, two multiplies");
        assert!(
            p.instructions
                .iter()
                .all(|i| !matches!(i.engine, Engine::Gpsimd | Engine::Scalar | Engine::Tensor))
        );
        // div.Scalar: the scaled reciprocal of the scalar is computed once, on the engines.
        let c = Call::new(
            "div.Scalar",
            TensorMeta::contiguous(I32, &[4]),
            Err(Value::Int(3)),
            TensorMeta::contiguous(F32, &[4]),
        );
        let p = lower(&c.req(), TargetName::Trn1).unwrap().program;
        let ops: Vec<&str> = p.instructions.iter().map(|i| i.op.name()).collect();
        let mut want = vec!["memset"];
        want.extend(prologue);
        want.extend(["dma_copy", "tensor_scalar", "dma_copy"]);
        assert_eq!(ops, want);
    }

    #[test]
    fn narrow_int_and_bool_results_are_fixed_up_on_engines() {
        let c = Call::new(
            "add.Tensor",
            TensorMeta::contiguous(I8, &[4]),
            Ok(TensorMeta::contiguous(I8, &[4])),
            TensorMeta::contiguous(I8, &[4]),
        );
        let p = lower(&c.req(), TargetName::Trn1).unwrap().program;
        assert_eq!(count(&p, Engine::Vector), 1, "mask and xor");
        assert_eq!(count(&p, Engine::Gpsimd), 2, "add, then subtract the sign bias");
        let c = Call::new(
            "add.Tensor",
            TensorMeta::contiguous(Bool, &[4]),
            Ok(TensorMeta::contiguous(Bool, &[4])),
            TensorMeta::contiguous(Bool, &[4]),
        );
        let p = lower(&c.req(), TargetName::Trn1).unwrap().program;
        assert_eq!(count(&p, Engine::Vector), 2, "add, then != 0");
    }

    #[test]
    fn sizes_give_complete_programs() {
        for shape in [
            vec![0],
            vec![1],
            vec![129],
            vec![513],
            vec![1000],
            vec![],
            vec![3, 0, 2],
            vec![2, 9000],
        ] {
            let c = Call::new(
                "mul.Tensor",
                TensorMeta::contiguous(F32, &shape),
                Ok(TensorMeta::contiguous(F32, &shape)),
                TensorMeta::contiguous(F32, &shape),
            );
            let p = lower(&c.req(), TargetName::Trn1).unwrap().program;
            let numel: usize = shape.iter().product();
            let stored: usize = p
                .instructions
                .iter()
                .filter_map(|i| match &i.op {
                    Op::DmaCopy(d) if matches!(&d.dst.mem, trnsim::MemSpace::Hbm(n) if n == "output.0") => {
                        Some(d.dst.num_elems())
                    }
                    _ => None,
                })
                .sum();
            assert_eq!(stored, numel, "{shape:?}: every output element is stored once");
            if numel == 0 {
                assert!(p.instructions.is_empty());
            }
        }
    }
}
