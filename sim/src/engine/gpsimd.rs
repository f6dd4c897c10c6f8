//! GpSimdE (POOL) instructions: eight SIMD cores, 16 partitions each, SBUF only, native int32.
//! (`tensor_tensor`, `tensor_scalar`, `tensor_copy` and `memset` on GpSimd share VectorE's
//! functions in vector.rs, which branch on the engine where GpSimd differs.)

use super::{Ctx, unimplemented};
use crate::error::OpResult;
use crate::program::*;

pub fn iota(_ctx: &mut Ctx, _i: &Iota) -> OpResult<()> {
    unimplemented("iota")
}

pub fn affine_select(_ctx: &mut Ctx, _i: &AffineSelect) -> OpResult<()> {
    unimplemented("affine_select")
}

pub fn local_gather(_ctx: &mut Ctx, _i: &LocalGather) -> OpResult<()> {
    unimplemented("local_gather")
}

pub fn n_gather(_ctx: &mut Ctx, _i: &NGather) -> OpResult<()> {
    unimplemented("nc_n_gather")
}

pub fn tensor_partition_reduce(_ctx: &mut Ctx, _i: &TensorPartitionReduce) -> OpResult<()> {
    unimplemented("tensor_partition_reduce")
}
