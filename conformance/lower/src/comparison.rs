//! The comparison family: `eq`, `ne`, `ge`, `gt`, `le`, `lt` (`.Scalar` and `.Tensor`).
//!
//! PyTorch compares in the operands' common dtype (`torch.result_type`) and returns bool:
//! * float (and bool) common dtypes: the operands are cast to the common dtype by the loading DMA
//!   (a Python scalar by a `memset` into that dtype, or an fp32 immediate for float32), then a
//!   VectorE compare ALU op (exact in fp32: every ≤32-bit float widens exactly) writes 1/0 as bool;
//! * integer common dtypes: GpSimdE's exact int32 compare (int32 beyond 2^24 is not exact in
//!   VectorE's fp32). A Python int outside int32 compares against values that are all inside it
//!   (int64 inputs are narrowed to int32 by the runner), so it is replaced by ±2^32, which
//!   VectorE's fp32 compare orders correctly against every int32.

use super::binary_ext::{self, Arg, OnCommon, X, build, common_type, on_common};
use super::{LowerError, LowerRequest, Lowered};
use crate::call::TensorOrScalar;
use crate::dtype::TorchDType;
use trnsim::{AluOp, DType, Engine, TargetName};

fn alu(op: &str) -> Option<AluOp> {
    Some(match op.split('.').next()? {
        "eq" => AluOp::IsEqual,
        "ne" => AluOp::NotEqual,
        "ge" => AluOp::IsGe,
        "gt" => AluOp::IsGt,
        "le" => AluOp::IsLe,
        "lt" => AluOp::IsLt,
        _ => return None,
    })
}

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let op = alu(req.op).ok_or_else(|| LowerError::NotLowered(req.op.to_string()))?;
    let a = Arg::from(req.arg::<TensorOrScalar>(0, "self")?);
    let b = Arg::from(req.arg::<TensorOrScalar>(1, "other")?);
    if !matches!(a, Arg::Tensor(..)) {
        return Err(req.invalid("`self` must be a tensor".into()));
    }
    let common = common_type(req, &[&a, &b])?;
    let OnCommon { k, work, int, .. } = on_common(req, &[&a, &b], common, TorchDType::Bool)?;
    let scalar = if let Arg::Scalar(s) = b { Some(s) } else { None };
    // Integer scalar outside int32: ±2^32 on VectorE (see the module doc).
    let wide = match (int, scalar) {
        (true, Some(s)) if s.as_i32().is_none() => Some(if s.as_f64() > 0.0 {
            4_294_967_296.0
        } else {
            -4_294_967_296.0
        }),
        _ => None,
    };
    build(
        req,
        target,
        &k,
        |kit| match (scalar, wide) {
            (Some(_), Some(w)) => Ok(Some(X::Imm(w))),
            (Some(s), None) => binary_ext::scalar_in(kit, s, work).map(Some),
            (None, _) => Ok(None),
        },
        |kit, t, c| {
            let rhs = match c {
                Some(x) => *x,
                None => t[1].into(),
            };
            if int && wide.is_none() {
                // Exact int32 compare on GpSimd; 1/0 stored as bool by the DMA.
                let r = kit.tmp(DType::I32)?;
                kit.bin(Engine::Gpsimd, r, t[0].into(), rhs, op)?;
                Ok(r)
            } else {
                let r = kit.tmp(DType::Bool)?;
                kit.bin(Engine::Vector, r, t[0].into(), rhs, op)?;
                Ok(r)
            }
        },
    )
}
