"""Row softmax of [N, D], two ways: the composite nl.softmax, and spelled out with a row max, an
exp with the row sum accumulated on the Scalar Engine, and a reciprocal."""

import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc import nki


@nki.jit
def softmax_nl(x):
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(n // 128):
        x_tile = nl.load(x[t * 128 : (t + 1) * 128, :])
        nl.store(out[t * 128 : (t + 1) * 128, :], value=nl.softmax(x_tile, axis=1))
    return out


@nki.jit
def softmax_isa(x):
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(n // 128):
        x_tile = nl.load(x[t * 128 : (t + 1) * 128, :])
        neg_max = nisa.tensor_reduce(nl.max, x_tile, axis=[1], keepdims=True, negate=True, dtype=nl.float32)
        row_sum = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        e = nisa.activation_reduce(nl.exp, x_tile, bias=neg_max, reduce_op=nl.add, reduce_res=row_sum, dtype=nl.float32)
        inv = nisa.reciprocal(row_sum)
        y = nisa.tensor_scalar(e, nl.multiply, inv, dtype=x.dtype)
        nl.store(out[t * 128 : (t + 1) * 128, :], value=y)
    return out
