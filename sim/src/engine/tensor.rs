//! TensorE (PE array): `nc_matmul` and the identity-matmul transpose.

use super::{Ctx, unimplemented};
use crate::error::OpResult;
use crate::program::{NcMatmul, NcTranspose};

pub fn nc_matmul(_ctx: &mut Ctx, _i: &NcMatmul) -> OpResult<()> {
    unimplemented("nc_matmul")
}

pub fn nc_transpose(_ctx: &mut Ctx, _i: &NcTranspose) -> OpResult<()> {
    unimplemented("nc_transpose (tensor)")
}
