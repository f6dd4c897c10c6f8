//! Native int64 ([`LowerOptions::native_int64`](super::LowerOptions), `trnconf run
//! --native-int64`, on a target whose `native_int64` capability is set: NC-v3 and NC-v4).
//!
//! Without the option every lowering declares an int64 tensor as int32 and the runner narrows it
//! at the device boundary (docs/lowering.md, "int64"). With it, the ops below keep int64 tensors
//! as `i64` on the device, and compute on them the way the simulator's `Numerics::int64_alu`
//! setting says the engines do (docs/numerics.md, "Native int64"):
//! * integer results: GpSimdE on `i64` tiles, exact 64-bit two's complement, wrapping as
//!   PyTorch's int64 does (`add`, `sub`, `mul`, `pow` with a non-negative int exponent, the
//!   bitwise, logical and comparison ops, `maximum`/`minimum`, `clamp`, `relu`, `_to_copy` to an
//!   integer or bool dtype, `amax`/`amin`/`prod` as a pairwise tree of `tensor_tensor` steps);
//! * float results (`div` true division, `add`/`sub`/`mul` with a float scalar, `_to_copy` to a
//!   float): VectorE converts each int64 operand to fp32 (round to nearest even, PyTorch's
//!   `static_cast<float>`) and computes in fp32 as binary.rs does for int32 inputs;
//! * `scalar_tensor` and `_local_scalar_dense`: a `memset` / `tensor_copy` of one `i64`;
//! * integer division (`div` with rounding_mode trunc/floor, `fmod`, `remainder`, Tensor and
//!   Scalar overloads): a 64-step restoring long division on magnitudes with sign fix-ups, all
//!   on GpSimdE ([`emit_int_divmod`]);
//! * `sort` (values and indices, stable, both directions): a bitonic network along the free
//!   axis with exact (value, position) compares on GpSimdE ([`sort`]).
//!
//! Every input tensor must be int64 (a mixed-dtype call lowers as without the option), and an
//! integer scalar must be exact as the instructions' f64 immediate (|v| ≤ 2^53; else a typed
//! refusal). Ops not listed here lower as without the option. Nothing is computed on the host.

use super::binary::{DivScratch, TileSlot, emit_div_prologue};
use super::call::{Scalar, TensorArg, TensorMeta};
use super::dtype::TorchDType;
use super::tile::{self, Emitter, Region, SbufAllocator, TileLimits, copy, dma, imm, memset, ts, tt};
use super::{LowerError, LowerRequest, Lowered};
use trnsim::{AccessPattern, AluOp, DType, Engine, HbmRole, Program, ScalarOperand, TargetName};

/// Elements per partition of one tile: 8 bytes × 1024 × (at most 9 live slots) = 72 KiB of a
/// partition's SBUF.
const MAX_FREE: usize = 1024;

/// The largest integer every f64 immediate holds exactly.
const EXACT_IMM: i64 = 1 << 53;

/// The ops this module lowers natively (the rest lower as without the option).
pub const NATIVE_INT64_OPS: &[&str] = &[
    "add.Tensor",
    "sub.Tensor",
    "mul.Tensor",
    "add.Scalar",
    "sub.Scalar",
    "mul.Scalar",
    "div.Tensor",
    "div.Scalar",
    "div.Tensor_mode",
    "div.Scalar_mode",
    "bitwise_and.Tensor",
    "bitwise_or.Tensor",
    "bitwise_xor.Tensor",
    "bitwise_and.Scalar",
    "bitwise_or.Scalar",
    "bitwise_xor.Scalar",
    "bitwise_not",
    "eq.Scalar",
    "ne.Scalar",
    "ge.Scalar",
    "gt.Scalar",
    "le.Scalar",
    "lt.Scalar",
    "eq.Tensor",
    "ne.Tensor",
    "ge.Tensor",
    "gt.Tensor",
    "le.Tensor",
    "lt.Tensor",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "maximum",
    "minimum",
    "clamp",
    "clamp.Tensor",
    "relu",
    "pow.Tensor_Scalar",
    "_to_copy",
    "scalar_tensor",
    "_local_scalar_dense",
    "amax",
    "amin",
    "prod.dim_int",
    "fmod.Tensor",
    "fmod.Scalar",
    "remainder.Tensor",
    "remainder.Scalar",
    "sort",
];

/// The native-int64 lowering of `req`, or `None` when it does not apply (the op is not one of
/// [`NATIVE_INT64_OPS`], the target has no native int64, or the call is not an all-int64 one
/// this module handles): the caller then lowers as without the option.
pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Option<Result<Lowered, LowerError>> {
    if !target.params().native_int64 || !NATIVE_INT64_OPS.contains(&req.op) {
        return None;
    }
    let inputs = tensor_inputs(req);
    let all_i64 = inputs.iter().all(|(_, m)| m.dtype == TorchDType::I64);
    match req.op {
        "scalar_tensor" => {
            let out = req.tensors.get("output.0")?;
            (out.dtype == TorchDType::I64).then(|| scalar_tensor(req, target, out))
        }
        "_local_scalar_dense" => (all_i64 && inputs.len() == 1).then(|| local_scalar_dense(req, target)),
        "sort" => (all_i64 && inputs.len() == 1).then(|| sort(req, target)).flatten(),
        "amax" | "amin" | "prod.dim_int" => {
            if !all_i64 || inputs.len() != 1 {
                return None;
            }
            reduction(req, target)
        }
        _ => {
            if !all_i64 || inputs.is_empty() {
                return None;
            }
            elementwise(req, target, &inputs)
        }
    }
}

/// The call's tensor arguments in order (each name once), with their metadata.
fn tensor_inputs<'a>(req: &LowerRequest<'a>) -> Vec<(&'a str, &'a TensorMeta)> {
    let mut out: Vec<(&str, &TensorMeta)> = Vec::new();
    for name in req
        .call
        .args
        .iter()
        .chain(req.call.kwargs.values())
        .flat_map(|v| v.tensor_names())
    {
        if let Some(meta) = req.tensors.get(name)
            && !out.iter().any(|(n, _)| *n == name)
        {
            out.push((name, meta));
        }
    }
    out
}

/// An integer scalar as an exact immediate: `Some` for an int (or bool) within ±2^53, `None` for
/// a float; a larger int is a typed refusal.
fn int_imm(req: &LowerRequest<'_>, s: Scalar) -> Result<Option<f64>, LowerError> {
    match s {
        Scalar::Bool(b) => Ok(Some(b as i64 as f64)),
        Scalar::Int(v) if v.unsigned_abs() <= EXACT_IMM as u64 => Ok(Some(v as f64)),
        Scalar::Int(v) => Err(req.unsupported(format!(
            "int64 scalar {v} is beyond ±2^53, which an instruction's immediate does not hold exactly"
        ))),
        Scalar::Float(_) => Ok(None),
    }
}

/// What one elementwise op computes, per tile.
#[derive(Clone, Copy, Debug)]
enum Plan {
    /// `out = a op b` (two int64 tensors), GpSimdE; `alpha` scales `b` first.
    Tensor2 { op: AluOp, alpha: Option<f64> },
    /// `out = a op s` (int64 tensor, int scalar `s`), GpSimdE; `alpha` scales `s` first (on the
    /// engines, into a per-partition constant).
    Scalar1 { op: AluOp, s: f64, alpha: Option<f64> },
    /// `out = float(a) op s` on VectorE (a float scalar: add/sub/mul), `alpha` scaling `s`.
    FloatScalar { op: AluOp, s: f64, alpha: Option<f64> },
    /// `out = float(a) / float(b)` (b a tensor, or the scalar `s`), VectorE.
    TrueDiv { s: Option<f64> },
    /// `out = min(max(a, lo), hi)` with immediates (either bound optional).
    ClampScalar { lo: Option<f64>, hi: Option<f64> },
    /// `out = min(max(a, lo), hi)` with tensor bounds (either optional; inputs 1 and 2 follow).
    ClampTensor { lo: bool, hi: bool },
    /// `out = a ** e`, `e ≥ 0`, by squaring (wrapping as PyTorch's int64 `pow`).
    Pow { e: u64 },
    /// `_to_copy`: the conversion to the output dtype.
    Convert,
    /// Integer division (`div` trunc/floor, `fmod`, `remainder`) of `a` by the tensor `b` or
    /// the int scalar `s`: [`emit_int_divmod`].
    DivMod { mode: IntDiv, s: Option<f64> },
}

/// What an integer division returns (PyTorch's int64 semantics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntDiv {
    /// `div(rounding_mode='trunc')`: the quotient rounded toward zero.
    Trunc,
    /// `div(rounding_mode='floor')`: the quotient rounded toward −inf.
    Floor,
    /// `fmod`: the remainder of the truncated quotient (sign of the dividend).
    Fmod,
    /// `remainder`: the remainder of the floored quotient (sign of the divisor).
    Remainder,
}

fn elementwise(
    req: &LowerRequest<'_>,
    target: TargetName,
    inputs: &[(&str, &TensorMeta)],
) -> Option<Result<Lowered, LowerError>> {
    let out = req.tensors.get("output.0")?;
    if !is_contiguous(out) || req.tensors.keys().any(|k| k.starts_with("output.") && k != "output.0") {
        return None;
    }
    let scalar = |pos: usize, name: &str| req.arg::<Scalar>(pos, name);
    let alpha = |pos: usize| -> Result<Option<f64>, LowerError> {
        match req.opt::<Scalar>(pos, "alpha")? {
            None => Ok(None),
            Some(a) => match int_imm(req, a)? {
                Some(1.0) => Ok(None),
                Some(v) => Ok(Some(v)),
                None => Err(req.unsupported("a float alpha with int64 tensors".into())),
            },
        }
    };
    let int_out = out.dtype == TorchDType::I64;
    let bool_out = out.dtype == TorchDType::Bool;
    let two = inputs.len() == 2;
    let plan = (|| -> Result<Option<Plan>, LowerError> {
        let binary = |op: AluOp| {
            if two {
                Plan::Tensor2 { op, alpha: None }
            } else {
                Plan::Convert
            }
        };
        Ok(Some(match req.op {
            "add.Tensor" | "sub.Tensor" if int_out && two => Plan::Tensor2 {
                op: if req.op == "add.Tensor" {
                    AluOp::Add
                } else {
                    AluOp::Subtract
                },
                alpha: alpha(2)?,
            },
            "mul.Tensor" if int_out && two => binary(AluOp::Multiply),
            "add.Scalar" | "sub.Scalar" | "mul.Scalar" => {
                let op = match req.op {
                    "add.Scalar" => AluOp::Add,
                    "sub.Scalar" => AluOp::Subtract,
                    _ => AluOp::Multiply,
                };
                let a = if op == AluOp::Multiply { None } else { alpha(2)? };
                let s = scalar(1, "other")?;
                match (int_imm(req, s)?, out.dtype) {
                    (Some(v), TorchDType::I64) => Plan::Scalar1 { op, s: v, alpha: a },
                    (None, TorchDType::F32) => match s {
                        Scalar::Float(f) => Plan::FloatScalar { op, s: f, alpha: a },
                        _ => return Ok(None),
                    },
                    _ => return Ok(None),
                }
            }
            "div.Tensor_mode" | "div.Scalar_mode" | "fmod.Tensor" | "fmod.Scalar" | "remainder.Tensor"
            | "remainder.Scalar"
                if int_out && (!req.op.starts_with("div") || req.opt::<&str>(2, "rounding_mode")?.is_some()) =>
            {
                let mode = match req.op.split('.').next() {
                    Some("fmod") => IntDiv::Fmod,
                    Some("remainder") => IntDiv::Remainder,
                    _ => match req.opt::<&str>(2, "rounding_mode")? {
                        Some("trunc") => IntDiv::Trunc,
                        Some("floor") => IntDiv::Floor,
                        _ => return Ok(None),
                    },
                };
                if req.op.ends_with("Tensor") || req.op.ends_with("Tensor_mode") {
                    if !two {
                        return Ok(None);
                    }
                    Plan::DivMod { mode, s: None }
                } else {
                    match int_imm(req, scalar(1, "other")?)? {
                        Some(v) => Plan::DivMod { mode, s: Some(v) },
                        None => return Ok(None),
                    }
                }
            }
            "div.Tensor" | "div.Tensor_mode" | "div.Scalar" | "div.Scalar_mode" => {
                if req.op.ends_with("_mode") && req.opt::<&str>(2, "rounding_mode")?.is_some() {
                    // An integer division whose result is not int64 (not a PyTorch case).
                    return Ok(None);
                }
                if out.dtype != TorchDType::F32 {
                    return Ok(None);
                }
                if req.op.starts_with("div.Tensor") {
                    if !two {
                        return Ok(None);
                    }
                    Plan::TrueDiv { s: None }
                } else {
                    let s = scalar(1, "other")?;
                    let v = match s {
                        Scalar::Float(f) => f,
                        other => match int_imm(req, other)? {
                            Some(v) => v,
                            None => return Ok(None),
                        },
                    };
                    Plan::TrueDiv { s: Some(v) }
                }
            }
            "bitwise_and.Tensor" | "bitwise_or.Tensor" | "bitwise_xor.Tensor" if int_out && two => {
                binary(bitwise(req.op))
            }
            "bitwise_and.Scalar" | "bitwise_or.Scalar" | "bitwise_xor.Scalar" if int_out => {
                match int_imm(req, scalar(1, "other")?)? {
                    Some(v) => Plan::Scalar1 {
                        op: bitwise(req.op),
                        s: v,
                        alpha: None,
                    },
                    None => return Ok(None),
                }
            }
            "bitwise_not" if int_out => Plan::Scalar1 {
                op: AluOp::BitwiseNot,
                s: 0.0,
                alpha: None,
            },
            "eq.Scalar" | "ne.Scalar" | "ge.Scalar" | "gt.Scalar" | "le.Scalar" | "lt.Scalar" if bool_out => {
                match int_imm(req, scalar(1, "other")?)? {
                    Some(v) => Plan::Scalar1 {
                        op: comparison(req.op),
                        s: v,
                        alpha: None,
                    },
                    None => return Ok(None),
                }
            }
            "eq.Tensor" | "ne.Tensor" | "ge.Tensor" | "gt.Tensor" | "le.Tensor" | "lt.Tensor" if bool_out && two => {
                binary(comparison(req.op))
            }
            "logical_and" | "logical_or" | "logical_xor" if bool_out && two => binary(match req.op {
                "logical_and" => AluOp::LogicalAnd,
                "logical_or" => AluOp::LogicalOr,
                _ => AluOp::LogicalXor,
            }),
            "logical_not" if bool_out => Plan::Scalar1 {
                op: AluOp::LogicalNot,
                s: 0.0,
                alpha: None,
            },
            "maximum" | "minimum" if int_out && two => {
                binary(if req.op == "maximum" { AluOp::Max } else { AluOp::Min })
            }
            "relu" if int_out => Plan::Scalar1 {
                op: AluOp::Max,
                s: 0.0,
                alpha: None,
            },
            "clamp" if int_out => {
                let bound = |pos: usize, name: &str| -> Result<Option<Option<f64>>, LowerError> {
                    match req.opt::<Scalar>(pos, name)? {
                        None => Ok(Some(None)),
                        Some(s) => Ok(int_imm(req, s)?.map(Some)),
                    }
                };
                match (bound(1, "min")?, bound(2, "max")?) {
                    (Some(lo), Some(hi)) => Plan::ClampScalar { lo, hi },
                    _ => return Ok(None),
                }
            }
            "clamp.Tensor" if int_out => {
                let lo = req.opt::<TensorArg>(1, "min")?.is_some();
                let hi = req.opt::<TensorArg>(2, "max")?.is_some();
                if inputs.len() != 1 + lo as usize + hi as usize {
                    return Ok(None);
                }
                Plan::ClampTensor { lo, hi }
            }
            "pow.Tensor_Scalar" if int_out => match scalar(1, "exponent")? {
                Scalar::Int(e) if e >= 0 => Plan::Pow { e: e as u64 },
                _ => return Ok(None),
            },
            "_to_copy" if inputs.len() == 1 => match out.dtype {
                TorchDType::I64
                | TorchDType::I32
                | TorchDType::I16
                | TorchDType::I8
                | TorchDType::U8
                | TorchDType::Bool
                | TorchDType::F32
                | TorchDType::Bf16
                | TorchDType::F16 => Plan::Convert,
                _ => return Ok(None),
            },
            _ => return Ok(None),
        }))
    })();
    let plan = match plan {
        Ok(Some(p)) => p,
        Ok(None) => return None,
        Err(e) => return Some(Err(e)),
    };
    Some(emit_elementwise(req, target, inputs, out, plan))
}

fn bitwise(op: &str) -> AluOp {
    match op.split('.').next() {
        Some("bitwise_and") => AluOp::BitwiseAnd,
        Some("bitwise_or") => AluOp::BitwiseOr,
        _ => AluOp::BitwiseXor,
    }
}

fn comparison(op: &str) -> AluOp {
    match op.split('.').next() {
        Some("eq") => AluOp::IsEqual,
        Some("ne") => AluOp::NotEqual,
        Some("ge") => AluOp::IsGe,
        Some("gt") => AluOp::IsGt,
        Some("le") => AluOp::IsLe,
        _ => AluOp::IsLt,
    }
}

fn is_contiguous(m: &TensorMeta) -> bool {
    let want = super::dtype::contiguous_strides(&m.shape);
    m.storage_offset.is_none_or(|o| o == 0)
        && m.strides.as_ref().is_none_or(|s| {
            s.len() == want.len()
                && s.iter()
                    .zip(&want)
                    .zip(&m.shape)
                    .all(|((&g, &w), &n)| n <= 1 || g == w as i64)
        })
}

fn device(req: &LowerRequest<'_>, d: TorchDType) -> Result<DType, LowerError> {
    match d {
        TorchDType::I64 => Ok(DType::I64),
        other => other
            .device_dtype()
            .ok_or_else(|| req.unsupported(format!("{other} has no device dtype"))),
    }
}

fn emit_elementwise(
    req: &LowerRequest<'_>,
    target_name: TargetName,
    inputs: &[(&str, &TensorMeta)],
    out: &TensorMeta,
    plan: Plan,
) -> Result<Lowered, LowerError> {
    let target = target_name.params();
    let mut program = Program::new(target_name);
    for (name, meta) in inputs {
        program.declare(name, DType::I64, &meta.shape, HbmRole::Input);
    }
    let out_dev = device(req, out.dtype)?;
    program.declare("output.0", out_dev, &out.shape, HbmRole::Output);
    let mut alloc = SbufAllocator::new(&target);
    let ins: Vec<TileSlot> = inputs
        .iter()
        .map(|_| TileSlot::new(&mut alloc, DType::I64, MAX_FREE))
        .collect::<Result<_, _>>()?;
    let (t1, t2) = (
        TileSlot::new(&mut alloc, DType::I64, MAX_FREE)?,
        TileSlot::new(&mut alloc, DType::I64, MAX_FREE)?,
    );
    let f = [
        TileSlot::new(&mut alloc, DType::F32, MAX_FREE)?,
        TileSlot::new(&mut alloc, DType::F32, MAX_FREE)?,
    ];
    let div = DivScratch {
        s: TileSlot::new(&mut alloc, DType::F32, MAX_FREE)?,
        t: TileSlot::new(&mut alloc, DType::F32, MAX_FREE)?,
    };
    let res = TileSlot::new(&mut alloc, out_dev, MAX_FREE)?;
    // A per-partition constant (the scalar times alpha), computed on the engines.
    let konst = TileSlot::new(&mut alloc, DType::I64, 1)?;
    let konst_f = TileSlot::new(&mut alloc, DType::F32, 1)?;
    // Integer division's scratch (only for that plan).
    let idiv = match plan {
        Plan::DivMod { .. } => Some(
            (0..DIV_SLOTS)
                .map(|_| TileSlot::new(&mut alloc, DType::I64, MAX_FREE))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        _ => None,
    };

    let mut strides = vec![tile::broadcast_strides(&out.shape, &out.shape)];
    for (_, meta) in inputs {
        strides.push(tile::broadcast_strides(&meta.shape, &out.shape));
    }
    let jobs = tile::plan_tiles(
        Region::new(&out.shape, &strides),
        TileLimits::for_target(&target, MAX_FREE),
    );
    let mut e = Emitter::new(program);
    let (g, v) = (Engine::Gpsimd, Engine::Vector);
    for job in &jobs {
        let p = job.partitions;
        let flat = |t: &TileSlot| t.flat(job);
        let const_ap = |t: &TileSlot| AccessPattern::sbuf(t.dtype, 0, p, t.slot.offset, vec![[1, 1]]);
        for (k, (name, _)) in inputs.iter().enumerate() {
            e.push(
                Engine::Dma,
                dma(ins[k].shaped(job), job.hbm_ap(k + 1, name, DType::I64)),
            );
        }
        let a = flat(&ins[0]);
        let r = flat(&res);
        match plan {
            Plan::Tensor2 { op, alpha } => {
                let mut b = flat(&ins[1]);
                if let Some(al) = alpha {
                    e.push(g, ts(flat(&t1), b, AluOp::Multiply, imm(al), None));
                    b = flat(&t1);
                }
                e.push(g, tt(r, a, b, op));
            }
            Plan::Scalar1 { op, s, alpha } => {
                let operand = match alpha {
                    None => imm(s),
                    Some(al) => {
                        e.push(g, memset(const_ap(&konst), s));
                        e.push(
                            g,
                            ts(const_ap(&konst), const_ap(&konst), AluOp::Multiply, imm(al), None),
                        );
                        ScalarOperand::Tile(const_ap(&konst))
                    }
                };
                e.push(g, ts(r, a, op, operand, None));
            }
            Plan::FloatScalar { op, s, alpha } => {
                e.push(v, copy(flat(&f[0]), a));
                let operand = match alpha {
                    None => imm(s),
                    Some(al) => {
                        e.push(v, memset(const_ap(&konst_f), s));
                        e.push(
                            v,
                            ts(const_ap(&konst_f), const_ap(&konst_f), AluOp::Multiply, imm(al), None),
                        );
                        ScalarOperand::Tile(const_ap(&konst_f))
                    }
                };
                e.push(v, ts(r, flat(&f[0]), op, operand, None));
            }
            Plan::TrueDiv { s } => {
                // PyTorch casts both operands to the fp32 result dtype, then divides; the
                // division is binary.rs's: (a·s) · (1 / (b·s)).
                e.push(v, copy(flat(&f[0]), a));
                match s {
                    None => e.push(v, copy(flat(&f[1]), flat(&ins[1]))),
                    Some(x) => e.push(v, memset(flat(&f[1]), x)),
                };
                emit_div_prologue(&mut e, flat(&f[1]), &div, &flat);
                e.push(v, tt(flat(&div.s), flat(&f[0]), flat(&div.s), AluOp::Multiply));
                e.push(v, tt(r, flat(&div.s), flat(&div.t), AluOp::Multiply));
            }
            Plan::ClampScalar { lo, hi } => {
                let op = match (lo, hi) {
                    (Some(l), Some(h)) => ts(r, a, AluOp::Max, imm(l), Some((AluOp::Min, imm(h)))),
                    (Some(l), None) => ts(r, a, AluOp::Max, imm(l), None),
                    (None, Some(h)) => ts(r, a, AluOp::Min, imm(h), None),
                    (None, None) => copy(r, a),
                };
                e.push(g, op);
            }
            Plan::ClampTensor { lo, hi } => {
                let mut next = 1;
                let mut cur = a;
                if lo {
                    e.push(g, tt(flat(&t1), cur, flat(&ins[next]), AluOp::Max));
                    cur = flat(&t1);
                    next += 1;
                }
                if hi {
                    e.push(g, tt(flat(&t2), cur, flat(&ins[next]), AluOp::Min));
                    cur = flat(&t2);
                }
                e.push(g, copy(r, cur));
            }
            Plan::Pow { e: exp } => {
                // Square-and-multiply: t2 = 1; t1 = a; for each bit of e (low first): t2 *= t1
                // where set, t1 *= t1.
                e.push(g, memset(flat(&t2), 1.0));
                e.push(g, copy(flat(&t1), a));
                let mut rest = exp;
                while rest > 0 {
                    if rest & 1 == 1 {
                        e.push(g, tt(flat(&t2), flat(&t2), flat(&t1), AluOp::Multiply));
                    }
                    rest >>= 1;
                    if rest > 0 {
                        e.push(g, tt(flat(&t1), flat(&t1), flat(&t1), AluOp::Multiply));
                    }
                }
                e.push(g, copy(r, flat(&t2)));
            }
            Plan::DivMod { mode, s } => {
                let scratch: Vec<AccessPattern> = idiv.iter().flatten().map(flat).collect();
                let b = match s {
                    None => flat(&ins[1]),
                    Some(v) => {
                        e.push(g, memset(flat(&t1), v));
                        flat(&t1)
                    }
                };
                emit_int_divmod(&mut e, a, b, r, &scratch, mode);
            }
            Plan::Convert => match out.dtype {
                TorchDType::I64 => {
                    e.push(g, copy(r, a));
                }
                TorchDType::Bool => {
                    e.push(g, ts(r, a, AluOp::NotEqual, imm(0.0), None));
                }
                TorchDType::I32 | TorchDType::I16 | TorchDType::I8 | TorchDType::U8 => {
                    // PyTorch's integer conversion keeps the low bits (two's complement):
                    // unsigned: x & mask; signed w bits: ((x & mask) ^ sign) - sign, exact on
                    // GpSimdE's int64 path, then an in-range copy to the narrow dtype.
                    let (mask, sign) = match out.dtype {
                        TorchDType::I32 => (u32::MAX as f64, (1u64 << 31) as f64),
                        TorchDType::I16 => (0xFFFF as f64, 0x8000 as f64),
                        TorchDType::I8 => (0xFF as f64, 0x80 as f64),
                        _ => (0xFF as f64, 0.0),
                    };
                    e.push(
                        g,
                        ts(
                            flat(&t1),
                            a,
                            AluOp::BitwiseAnd,
                            imm(mask),
                            Some((AluOp::BitwiseXor, imm(sign))),
                        ),
                    );
                    e.push(g, ts(flat(&t1), flat(&t1), AluOp::Subtract, imm(sign), None));
                    e.push(g, copy(r, flat(&t1)));
                }
                _ => {
                    // int64 → fp32 (round to nearest even) → the float dtype (cast on write),
                    // as PyTorch's `static_cast` through float.
                    e.push(v, copy(r, a));
                }
            },
        }
        e.push(Engine::Dma, dma(job.hbm_ap(0, "output.0", out_dev), res.shaped(job)));
    }
    Ok(Lowered::new(e.finish()))
}

/// Scratch tiles of [`emit_int_divmod`].
const DIV_SLOTS: usize = 8;

/// `-2^63` (`i64::MIN`) as an immediate (exact in f64).
const SIGN_BIT: f64 = i64::MIN as f64;

/// Instructions [`emit_int_divmod`] emits per tile: the magnitudes and signs (6), 64 steps of
/// 8, the remainder's unflip (1) and the mode's sign fix-up (trunc 4, fmod 4, floor 7, remainder
/// 8), the scalar divisor's `memset` aside.
pub fn int_divmod_instructions(mode: IntDiv) -> usize {
    6 + 64 * DIV_STEP_INSTRUCTIONS
        + 1
        + match mode {
            IntDiv::Trunc | IntDiv::Fmod => 4,
            IntDiv::Floor => 7,
            IntDiv::Remainder => 8,
        }
}

/// GpSimdE instructions of one long-division step.
const DIV_STEP_INSTRUCTIONS: usize = 8;

/// `r = a ⊘ b` for int64 tiles `a`, `b` (same shape as `r`), exactly, on GpSimdE's exact int64
/// ALU only (shifts, bitwise ops, signed compares, wrapping add/sub/mul), no host arithmetic:
///
/// * magnitudes `N = |a|`, `D = |b|` as unsigned 64-bit words (`abs` wraps, so |i64::MIN| is the
///   word 2^63, its true magnitude), signs `sa = a < 0`, `sb = b < 0`;
/// * restoring long division of `N` by `D`, 64 unrolled steps, the quotient built in `N`'s own
///   tile as its bits shift out (the classic `R:Q` register pair). The partial remainder `R`
///   is kept as `F = R ^ 2^63`, so that the signed compare `F ≥ D ^ 2^63` is the unsigned
///   `R ≥ D`, and `R − D` is `F − D` (wrapping) in the same encoding: per step `bit = Q >> 63`,
///   `F = ((F << 1) ^ 2^63) | bit`, `ge = F ≥ Dx`, `Q = (Q << 1) | ge`, `F −= D · ge`;
/// * sign fix-ups with masks `m = −s` (`x ^ m − m` negates where `s = 1`): trunc `q = ±Q` by
///   `sa ≠ sb`; fmod `r = ±R` by `sa`; floor `q − [r ≠ 0 ∧ sa ≠ sb]`; remainder
///   `r + b · [r ≠ 0 ∧ sa ≠ sb]`.
///
/// `i64::MIN / −1` wraps to `i64::MIN` (trunc and floor), its fmod and remainder are 0. A zero
/// divisor (PyTorch raises; the lowering never sees values and the engines do not trap) gives
/// every quotient bit set: trunc `−1` for `a ≥ 0` and `1` for `a < 0`, floor `−1` for `a ≥ 0`
/// and `0` for `a < 0`, fmod and remainder `a` (docs/numerics.md "Native int64").
fn emit_int_divmod(
    e: &mut Emitter,
    a: AccessPattern,
    b: AccessPattern,
    r: AccessPattern,
    k: &[AccessPattern],
    mode: IntDiv,
) {
    let g = Engine::Gpsimd;
    let [sa, sb, q, d, dx, f, bit, ge] = [0, 1, 2, 3, 4, 5, 6, 7].map(|i| k[i].clone());
    let one = |e: &mut Emitter, dst: &AccessPattern, src: &AccessPattern, op: AluOp, v: f64| {
        e.push(g, ts(dst.clone(), src.clone(), op, imm(v), None));
    };
    let two = |e: &mut Emitter, dst: &AccessPattern, x: &AccessPattern, y: &AccessPattern, op: AluOp| {
        e.push(g, tt(dst.clone(), x.clone(), y.clone(), op));
    };
    one(e, &sa, &a, AluOp::IsLt, 0.0);
    one(e, &sb, &b, AluOp::IsLt, 0.0);
    one(e, &q, &a, AluOp::Abs, 0.0);
    one(e, &d, &b, AluOp::Abs, 0.0);
    one(e, &dx, &d, AluOp::BitwiseXor, SIGN_BIT);
    e.push(g, memset(f.clone(), SIGN_BIT));
    for _ in 0..64 {
        one(e, &bit, &q, AluOp::LogicalShiftRight, 63.0);
        e.push(
            g,
            ts(
                f.clone(),
                f.clone(),
                AluOp::ShiftLeft,
                imm(1.0),
                Some((AluOp::BitwiseXor, imm(SIGN_BIT))),
            ),
        );
        two(e, &f, &f, &bit, AluOp::BitwiseOr);
        two(e, &ge, &f, &dx, AluOp::IsGe);
        one(e, &q, &q, AluOp::ShiftLeft, 1.0);
        two(e, &q, &q, &ge, AluOp::BitwiseOr);
        two(e, &bit, &d, &ge, AluOp::Multiply);
        two(e, &f, &f, &bit, AluOp::Subtract);
    }
    // The remainder's magnitude R (into f), then the sign fix-ups; `d` and `dx` are free now.
    one(e, &f, &f, AluOp::BitwiseXor, SIGN_BIT);
    let (m, sq) = (dx, d);
    two(e, &sq, &sa, &sb, AluOp::NotEqual);
    // x = x ^ −s − (−s): x negated where s = 1.
    let negate_where = |e: &mut Emitter, dst: &AccessPattern, x: &AccessPattern, s: &AccessPattern| {
        one(e, &m, s, AluOp::Multiply, -1.0);
        two(e, x, x, &m, AluOp::BitwiseXor);
        two(e, dst, x, &m, AluOp::Subtract);
    };
    // adj = r ≠ 0 ∧ sa ≠ sb (into ge).
    let adjust = |e: &mut Emitter| {
        one(e, &ge, &f, AluOp::NotEqual, 0.0);
        two(e, &ge, &ge, &sq, AluOp::LogicalAnd);
    };
    match mode {
        IntDiv::Trunc => negate_where(e, &r, &q, &sq),
        IntDiv::Fmod => negate_where(e, &r, &f, &sa),
        IntDiv::Floor => {
            negate_where(e, &q, &q, &sq);
            adjust(e);
            two(e, &r, &q, &ge, AluOp::Subtract);
        }
        IntDiv::Remainder => {
            negate_where(e, &f, &f, &sa);
            adjust(e);
            two(e, &ge, &ge, &b, AluOp::Multiply);
            two(e, &r, &f, &ge, AluOp::Add);
        }
    }
}

/// `scalar_tensor(s, dtype=int64)`: one `memset` of the exact value.
fn scalar_tensor(req: &LowerRequest<'_>, target_name: TargetName, out: &TensorMeta) -> Result<Lowered, LowerError> {
    let s = req.arg::<Scalar>(0, "s")?;
    let value = match s {
        Scalar::Float(f) if f.fract() == 0.0 && f.abs() <= EXACT_IMM as f64 => f,
        Scalar::Float(f) => return Err(req.unsupported(format!("scalar_tensor({f}) into int64"))),
        other => int_imm(req, other)?.unwrap_or_default(),
    };
    let target = target_name.params();
    let mut program = Program::new(target_name);
    program.declare("output.0", DType::I64, &out.shape, HbmRole::Output);
    let mut alloc = SbufAllocator::new(&target);
    let slot = TileSlot::new(&mut alloc, DType::I64, 1)?;
    let mut e = Emitter::new(program);
    let sb = AccessPattern::sbuf(DType::I64, 0, 1, slot.slot.offset, vec![[1, 1]]);
    e.push(Engine::Gpsimd, memset(sb.clone(), value));
    e.push(
        Engine::Dma,
        dma(AccessPattern::hbm("output.0", DType::I64, 0, 1, 1, vec![[1, 1]]), sb),
    );
    Ok(Lowered::new(e.finish()))
}

/// `_local_scalar_dense` of a one-element int64 tensor: DMA in, `tensor_copy`, DMA out to the
/// scalar output `output.0` (read back as the int).
fn local_scalar_dense(req: &LowerRequest<'_>, target_name: TargetName) -> Result<Lowered, LowerError> {
    let (input, meta) = req.arg::<TensorArg>(0, "self")?;
    if meta.shape.iter().product::<usize>() != 1 {
        return Err(req.invalid(format!("_local_scalar_dense of a {:?} tensor", meta.shape)));
    }
    let target = target_name.params();
    let mut program = Program::new(target_name);
    program.declare(input, DType::I64, &meta.shape, HbmRole::Input);
    program.declare("output.0", DType::I64, &[], HbmRole::Output);
    let mut alloc = SbufAllocator::new(&target);
    let (a, b) = (
        TileSlot::new(&mut alloc, DType::I64, 1)?,
        TileSlot::new(&mut alloc, DType::I64, 1)?,
    );
    let sb = |t: &TileSlot| AccessPattern::sbuf(DType::I64, 0, 1, t.slot.offset, vec![[1, 1]]);
    let hbm = |name: &str| AccessPattern::hbm(name, DType::I64, 0, 1, 1, vec![[1, 1]]);
    let mut e = Emitter::new(program);
    e.push(Engine::Dma, dma(sb(&a), hbm(input)));
    e.push(Engine::Gpsimd, copy(sb(&b), sb(&a)));
    e.push(Engine::Dma, dma(hbm("output.0"), sb(&b)));
    Ok(Lowered::new(e.finish()))
}

/// `amax`/`amin` (dims, keepdim) and `prod.dim_int` of an int64 tensor whose reduced dims are
/// its trailing ones (size-1 dims aside): the input is `[K, R]` row-major; each tile of up to
/// 128 rows is reduced on GpSimdE by a pairwise tree of `tensor_tensor` steps (first half op
/// second half; exact and order-free for max, min and wrapping multiplication).
fn reduction(req: &LowerRequest<'_>, target_name: TargetName) -> Option<Result<Lowered, LowerError>> {
    let (input, meta) = req.arg::<TensorArg>(0, "self").ok()?;
    let out = req.tensors.get("output.0")?;
    if out.dtype != TorchDType::I64 || !is_contiguous(meta) || !is_contiguous(out) {
        return None;
    }
    let rank = meta.shape.len();
    let (op, dims): (AluOp, Vec<usize>) = match req.op {
        "prod.dim_int" => {
            if req
                .opt::<TorchDType>(3, "dtype")
                .ok()?
                .is_some_and(|d| d != TorchDType::I64)
            {
                return None;
            }
            (AluOp::Multiply, vec![req.dim(1, "dim", rank).ok()?])
        }
        _ => {
            let list = req.opt::<Vec<i64>>(1, "dim").ok()?.unwrap_or_default();
            let dims = if list.is_empty() {
                (0..rank).collect()
            } else {
                list.iter()
                    .map(|&d| req.wrap_dim(1, "dim", d, rank))
                    .collect::<Result<Vec<_>, _>>()
                    .ok()?
            };
            (if req.op == "amax" { AluOp::Max } else { AluOp::Min }, dims)
        }
    };
    // A 0-d input's dim 0 (PyTorch accepts it) is no dim of the shape: nothing to index.
    let dims: Vec<usize> = dims.into_iter().filter(|&d| d < rank).collect();
    // Reduced dims must follow every kept dim of size > 1.
    let last_kept = (0..rank).filter(|d| !dims.contains(d) && meta.shape[*d] > 1).max();
    let first_reduced = (0..rank).filter(|d| dims.contains(d) && meta.shape[*d] > 1).min();
    if let (Some(k), Some(r)) = (last_kept, first_reduced)
        && k > r
    {
        return None;
    }
    let reduced: usize = dims.iter().map(|&d| meta.shape[d]).product();
    let kept: usize = meta.shape.iter().product::<usize>() / reduced.max(1);
    if reduced == 0 || reduced > MAX_FREE || out.shape.iter().product::<usize>() != kept {
        // amax of nothing is an error in PyTorch; prod of nothing is 1 (lowered as without the
        // option); longer rows than one tile are not needed by any case.
        return None;
    }
    Some((|| {
        let target = target_name.params();
        let mut program = Program::new(target_name);
        program.declare(input, DType::I64, &meta.shape, HbmRole::Input);
        program.declare("output.0", DType::I64, &out.shape, HbmRole::Output);
        let mut alloc = SbufAllocator::new(&target);
        let x = TileSlot::new(&mut alloc, DType::I64, reduced)?;
        let res = TileSlot::new(&mut alloc, DType::I64, 1)?;
        let mut e = Emitter::new(program);
        let parts = target.partitions;
        let cols = |p: usize, c0: usize, n: usize| {
            AccessPattern::sbuf(DType::I64, 0, p, x.slot.offset + (c0 * 8) as u64, vec![[1, n as i64]])
        };
        let mut row = 0;
        while row < kept {
            let p = (kept - row).min(parts);
            let src = AccessPattern::hbm(
                input,
                DType::I64,
                (row * reduced) as u64,
                p,
                reduced as i64,
                vec![[1, reduced as i64]],
            );
            e.push(Engine::Dma, dma(cols(p, 0, reduced), src));
            let mut n = reduced;
            while n > 1 {
                let h = n / 2;
                let m = n - h;
                e.push(Engine::Gpsimd, tt(cols(p, 0, h), cols(p, 0, h), cols(p, m, h), op));
                n = m;
            }
            // A copy on the engines even for a single-element row (R = 1).
            let res_ap = AccessPattern::sbuf(DType::I64, 0, p, res.slot.offset, vec![[1, 1]]);
            e.push(Engine::Gpsimd, copy(res_ap.clone(), cols(p, 0, 1)));
            let dst = AccessPattern::hbm("output.0", DType::I64, row as u64, p, 1, vec![[1, 1]]);
            e.push(Engine::Dma, dma(dst, res_ap));
            row += p;
        }
        Ok(Lowered::new(e.finish()))
    })())
}

/// Largest lane [`sort`] takes (padded to a power of two on one partition's free axis).
const SORT_MAX: usize = MAX_FREE;

/// GpSimdE instructions of one compare-exchange step of [`sort`]'s network.
pub const SORT_STEP_INSTRUCTIONS: usize = 14;

/// `sort(self, dim, descending)` of an int64 tensor, values and indices, exact and stable, on
/// GpSimdE's exact int64 ALU: a bitonic network along one partition's free axis.
///
/// Each *lane* (one position of the other dims) is a partition; its `n` keys are padded to
/// `N = 2^m ≤ 1024`. A key is the pair `(w, s)`, compared lexicographically: `w` the value
/// (`!w` for a descending sort — bitwise NOT reverses the order of every int64, i64::MIN and
/// i64::MAX included, where negation would not), `s` the position (iota). Positions are unique,
/// so the order is total and the sort stable, as PyTorch's `stable=True` (equal values keep
/// their index order in both directions). Pads are `(i64::MAX, s ≥ n)`: after every element.
///
/// Phase `k` merges blocks of `2^(k+1)` in the direction of position bit `k+1`; instead of
/// reversing comparators, the keys of descending blocks are complemented (`!w`, `!s` reverses
/// the lexicographic order exactly): before phase `k`, the keys with bit `k` set are
/// complemented back and those with bit `k+1` set complemented, by strided views. Each
/// compare-exchange of the views `a` (bit `j` clear) and `b` (set): `swap = w_a > w_b ∨ (w_a =
/// w_b ∧ s_a > s_b)`, `m = −swap`, then `x = (x_a ^ x_b) & m; x_a ^= x; x_b ^= x` for `w` and
/// `s` ([`SORT_STEP_INSTRUCTIONS`]). `m(m+1)/2` steps per lane tile.
///
/// `None` (lowered as without the option) for more than [`SORT_MAX`] values per lane or
/// non-contiguous tensors.
fn sort(req: &LowerRequest<'_>, target_name: TargetName) -> Option<Result<Lowered, LowerError>> {
    let (x, xm) = req.arg::<TensorArg>(0, "self").ok()?;
    let xs = if xm.shape.is_empty() { vec![1] } else { xm.shape.clone() };
    let dim = req.dim_or(1, "dim", -1i64, xs.len()).ok()?;
    let descending = req.arg_or(2, "descending", false).ok()?;
    let (vm, im) = (req.tensors.get("output.0")?, req.tensors.get("output.1")?);
    let n = xs[dim];
    if !is_contiguous(xm) || !is_contiguous(vm) || !is_contiguous(im) || n > SORT_MAX || vm.dtype != TorchDType::I64 {
        return None;
    }
    Some((|| {
        let target = target_name.params();
        let mut e = Emitter::new(Program::new(target_name));
        e.program.declare(x, DType::I64, &xm.shape, HbmRole::Input);
        e.program.declare("output.0", DType::I64, &vm.shape, HbmRole::Output);
        e.program.declare("output.1", DType::I64, &im.shape, HbmRole::Output);
        let outer: usize = xs[..dim].iter().product();
        let inner: usize = xs[dim + 1..].iter().product();
        if n == 0 || outer * inner == 0 {
            return Ok(Lowered::new(e.finish()));
        }
        let m = n.next_power_of_two().trailing_zeros() as usize;
        let width = 1usize << m;
        let mut alloc = SbufAllocator::new(&target);
        let [w, s, swap, eq, sg, t] = [width, width, width / 2, width / 2, width / 2, width / 2]
            .map(|c| TileSlot::new(&mut alloc, DType::I64, c.max(1)));
        let (w, s, swap, eq, sg, t) = (w?, s?, swap?, eq?, sg?, t?);
        let g = Engine::Gpsimd;
        // Lane chunks: (first lane, lanes); a chunk's lanes sit `lane_step` elements apart.
        let parts = target.partitions;
        let mut chunks = Vec::new();
        if inner == 1 {
            let mut o = 0;
            while o < outer {
                chunks.push((o, (outer - o).min(parts)));
                o += parts;
            }
        } else {
            for o in 0..outer {
                let mut i = 0;
                while i < inner {
                    chunks.push((o * inner + i, (inner - i).min(parts)));
                    i += parts;
                }
            }
        }
        let lane_step = if inner == 1 { n as i64 } else { 1 };
        let lane_off = |l: usize| ((l / inner) * n * inner + l % inner) as u64;
        for (first, p) in chunks {
            let all =
                |t: &TileSlot, c: usize| AccessPattern::sbuf(DType::I64, 0, p, t.slot.offset, vec![[1, c as i64]]);
            // Elements whose position has bit `b` clear (`high = false`) or set.
            let half = |t: &TileSlot, b: usize, high: bool| {
                let d = 1usize << b;
                let off = if high { (d * 8) as u64 } else { 0 };
                AccessPattern::sbuf(
                    DType::I64,
                    0,
                    p,
                    t.slot.offset + off,
                    vec![[(2 * d) as i64, (width / (2 * d)) as i64], [1, d as i64]],
                )
            };
            let hbm = |name: &str| {
                AccessPattern::hbm(
                    name,
                    DType::I64,
                    lane_off(first),
                    p,
                    lane_step,
                    vec![[inner as i64, n as i64]],
                )
            };
            let real = |t: &TileSlot| AccessPattern::sbuf(DType::I64, 0, p, t.slot.offset, vec![[1, n as i64]]);
            if n < width {
                e.push(g, memset(all(&w, width), i64::MAX as f64));
            }
            e.push(Engine::Dma, dma(real(&w), hbm(x)));
            if descending {
                e.push(g, ts(real(&w), real(&w), AluOp::BitwiseNot, imm(0.0), None));
            }
            e.push(
                g,
                trnsim::Op::Iota(trnsim::Iota {
                    dst: all(&s, width),
                    offset: 0,
                    channel_multiplier: 0,
                    pattern: vec![[1, width as i64]],
                }),
            );
            let complement = |e: &mut Emitter, bit: usize| {
                for k in [&w, &s] {
                    e.push(
                        g,
                        ts(
                            half(k, bit, true),
                            half(k, bit, true),
                            AluOp::BitwiseNot,
                            imm(0.0),
                            None,
                        ),
                    );
                }
            };
            let h = |t: &TileSlot| all(t, width / 2);
            for phase in 0..m {
                if phase >= 1 {
                    complement(&mut e, phase);
                }
                if phase + 1 < m {
                    complement(&mut e, phase + 1);
                }
                for j in (0..=phase).rev() {
                    let (wa, wb, sa, sb) = (
                        half(&w, j, false),
                        half(&w, j, true),
                        half(&s, j, false),
                        half(&s, j, true),
                    );
                    e.push(g, tt(h(&swap), wa.clone(), wb.clone(), AluOp::IsGt));
                    e.push(g, tt(h(&eq), wa.clone(), wb.clone(), AluOp::IsEqual));
                    e.push(g, tt(h(&sg), sa.clone(), sb.clone(), AluOp::IsGt));
                    e.push(g, tt(h(&eq), h(&eq), h(&sg), AluOp::LogicalAnd));
                    e.push(g, tt(h(&swap), h(&swap), h(&eq), AluOp::BitwiseOr));
                    e.push(g, ts(h(&swap), h(&swap), AluOp::Multiply, imm(-1.0), None));
                    for (xa, xb) in [(wa, wb), (sa, sb)] {
                        e.push(g, tt(h(&t), xa.clone(), xb.clone(), AluOp::BitwiseXor));
                        e.push(g, tt(h(&t), h(&t), h(&swap), AluOp::BitwiseAnd));
                        e.push(g, tt(xa.clone(), xa, h(&t), AluOp::BitwiseXor));
                        e.push(g, tt(xb.clone(), xb, h(&t), AluOp::BitwiseXor));
                    }
                }
            }
            if descending {
                e.push(g, ts(real(&w), real(&w), AluOp::BitwiseNot, imm(0.0), None));
            }
            e.push(Engine::Dma, dma(hbm("output.0"), real(&w)));
            e.push(Engine::Dma, dma(hbm("output.1"), real(&s)));
        }
        Ok(Lowered::new(e.finish()))
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The op list has no duplicates and every entry is a lowered op.
    #[test]
    fn native_ops_are_lowered_ops() {
        for (i, op) in NATIVE_INT64_OPS.iter().enumerate() {
            assert!(!NATIVE_INT64_OPS[..i].contains(op), "{op} twice");
            assert!(super::super::is_lowered(op), "{op} is not a lowered op");
        }
    }
}
