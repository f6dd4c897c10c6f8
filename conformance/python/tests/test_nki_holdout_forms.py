"""Forms that AWS's published per-instruction tests use and the front-end lacked (issue 23, the
hold-out lines), each written here from AWS's `nki.isa` / `nki.language` documentation, with a
NumPy reference. Kernels are ours."""

import numpy as np
import pytest
import trnsim.nki

trnsim.nki.install()

import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc import nki
from trnsim.nki import NkiError


def _cumulative_ref(x, op0, imm0, op1, reg, reverse0=False):
    """AWS's pseudocode, in float32: reg = op1(op0(x[i], imm0), reg); out[i] = reg."""
    f = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "max": np.maximum, "min": np.minimum}
    out = np.empty_like(x)
    reg = np.asarray(reg, np.float32).reshape(-1)
    for i in range(x.shape[1]):
        v = f[op0](imm0, x[:, i]) if reverse0 else f[op0](x[:, i], imm0)
        reg = f[op1](v.astype(np.float32), reg).astype(np.float32)
        out[:, i] = reg
    return out, reg


@pytest.mark.parametrize(
    "op1, reset", [("add", 0.0), ("subtract", 0.0), ("multiply", 1.0), ("max", -np.inf), ("min", np.inf)]
)
def test_tensor_scalar_cumulative_every_reduction_and_the_carried_accumulator(op1, reset):
    @nki.jit
    def kernel(x, start):
        out1 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        out2 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        out3 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        s = nl.load(start)
        a = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        c = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(dst=a, src=t, op0=np.multiply, op1=getattr(nl, op1), imm0=0.5)
        # reduce: the accumulator goes on from where the previous call left it
        nisa.tensor_scalar_cumulative(
            dst=b, src=t, op0=np.subtract, op1=getattr(nl, op1), imm0=0.25, reduce_cmd=nisa.reduce_cmd.reduce
        )
        # load_reduce from a [P, 1] tile, with imm0 first (reverse0)
        nisa.tensor_scalar_cumulative(
            dst=c,
            src=t,
            op0=np.subtract,
            op1=getattr(nl, op1),
            imm0=2.0,
            imm1=s,
            reduce_cmd=nisa.reduce_cmd.load_reduce,
            reverse0=True,
        )
        nl.store(out1, a)
        nl.store(out2, b)
        nl.store(out3, c)
        return out1, out2, out3

    rng = np.random.default_rng(7)
    x = (rng.random((64, 24), dtype=np.float32) * 1.5 + 0.25).astype(np.float32)
    start = rng.random((64, 1), dtype=np.float32)
    got1, got2, got3 = kernel(x, start)
    want1, reg = _cumulative_ref(x, "multiply", np.float32(0.5), op1, np.full(64, reset, np.float32))
    want2, _ = _cumulative_ref(x, "subtract", np.float32(0.25), op1, reg)
    want3, _ = _cumulative_ref(x, "subtract", np.float32(2.0), op1, start, reverse0=True)
    # VectorE computes in fp32 as the reference does: the same bits
    np.testing.assert_array_equal(got1, want1)
    np.testing.assert_array_equal(got2, want2)
    np.testing.assert_array_equal(got3, want3)


def test_tensor_scalar_cumulative_refusals_name_the_rule():
    def run(**kw):
        @nki.jit
        def kernel(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            d = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar_cumulative(dst=d, src=nl.load(x), op0=np.add, imm0=1.0, **kw)
            nl.store(out, d)
            return out

        return kernel

    x = np.ones((8, 4), np.float32)
    with pytest.raises(NkiError, match="no earlier tensor_scalar_cumulative"):
        run(op1=np.add, reduce_cmd=nisa.reduce_cmd.reduce)(x)
    with pytest.raises(NkiError, match="loads the accumulator from imm1"):
        run(op1=np.add, reduce_cmd=nisa.reduce_cmd.load_reduce)(x)
    with pytest.raises(NkiError, match="op1 must be add, subtract, multiply, max or min"):
        run(op1=np.equal)(x)
    with pytest.raises(NkiError, match="int32/uint32"):
        run(op1=np.add)(np.ones((8, 4), np.int32))


def test_an_hbm_argument_is_truthy_and_a_tile_is_not():
    @nki.jit
    def kernel(x, y):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        u = nl.load(y) if y else None  # "was y passed": y's values are not read
        nl.store(out, nl.add(t, u))
        return out

    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    np.testing.assert_array_equal(kernel(x, x), x + x)

    @nki.jit
    def bad(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out, t if t else nl.negative(t))
        return out

    with pytest.raises(NkiError, match="a tile has no truth value"):
        bad(x)
