"""`neuronxcc.nki.isa` on trnsim, instruction by instruction, against NumPy (docs/nki.md's feature
matrix names these tests). Semantics as in docs/isa.md."""

import ml_dtypes
import numpy as np
import pytest
import trnsim.nki

trnsim.nki.install()

import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc import nki

R = np.random.default_rng(12)
X = R.standard_normal((128, 64)).astype(np.float32)
Y = R.standard_normal((128, 64)).astype(np.float32)
COL = R.standard_normal((128, 1)).astype(np.float32)


def run(body, *arrays):
    def kernel(*args):
        tiles = [nl.load(a) for a in args]
        res = body(*tiles)
        out = nl.ndarray(res.shape, res.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(res) if res.buffer == "psum" else res)
        return out

    return nki.jit(kernel)(*arrays)


def test_nc_matmul():
    a = R.standard_normal((128, 96)).astype(ml_dtypes.bfloat16)
    b = R.standard_normal((128, 320)).astype(ml_dtypes.bfloat16)
    got = run(nisa.nc_matmul, a, b)
    np.testing.assert_allclose(got, a.astype(np.float64).T @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "shape,engine", [((128, 64), nisa.tensor_engine), ((32, 16), nisa.vector_engine), ((32, 16), nisa.unknown_engine)]
)
def test_nc_transpose(shape, engine):
    x = R.standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(run(lambda t: nisa.nc_transpose(t, engine=engine), x), x.T)


def test_activation_scale_bias_and_reduce():
    got = run(lambda t, c: nisa.activation(nl.exp, t, bias=c, scale=0.5), X, COL)
    np.testing.assert_allclose(got, np.exp(X.astype(np.float64) * 0.5 + COL), rtol=2e-6)
    got = run(lambda t: nisa.activation(np.tanh, t, bias=0.25, scale=2.0), X)  # constant bias -> [P,1] tile
    np.testing.assert_allclose(got, np.tanh(X.astype(np.float64) * 2 + 0.25), rtol=2e-6, atol=1e-7)

    def body(t):
        s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(nl.square, t, reduce_op=np.add, reduce_res=s)
        return s

    np.testing.assert_allclose(run(body, X), (X.astype(np.float64) ** 2).sum(1, keepdims=True), rtol=1e-5)


def test_tensor_reduce_negate():
    got = run(lambda t: nisa.tensor_reduce(np.max, t, axis=1, negate=True, keepdims=True), X)
    np.testing.assert_array_equal(got, -X.max(1, keepdims=True))


def test_tensor_partition_reduce():
    np.testing.assert_allclose(
        run(lambda t: nisa.tensor_partition_reduce(np.add, t), X),
        X.astype(np.float64).sum(0, keepdims=True),
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_array_equal(
        run(lambda t: nisa.tensor_partition_reduce(nl.maximum, t), X), X.max(0, keepdims=True)
    )


def test_tensor_tensor_vector_and_gpsimd():
    np.testing.assert_array_equal(run(lambda a, b: nisa.tensor_tensor(a, b, op=np.multiply), X, Y), X * Y)
    a = R.integers(-(2**30), 2**30, (128, 64)).astype(np.int32)
    b = R.integers(-(2**30), 2**30, (128, 64)).astype(np.int32)
    got = run(lambda x, y: nisa.tensor_tensor(x, y, op=nl.add, engine=nisa.gpsimd_engine), a, b)
    np.testing.assert_array_equal(got, a + b)  # GpSimd int32: exact (wrapping)


def test_tensor_scalar_two_ops_and_reverse():
    got = run(lambda t, c: nisa.tensor_scalar(t, np.subtract, c, reverse0=True, op1=np.multiply, operand1=3.0), X, COL)
    np.testing.assert_allclose(got, (COL - X) * np.float32(3), rtol=1e-7)


def test_scalar_tensor_tensor():
    got = run(
        lambda a, b: nisa.scalar_tensor_tensor(data=a, op0=np.multiply, operand0=2.0, op1=np.add, operand1=b), X, Y
    )
    np.testing.assert_array_equal(got, X * np.float32(2) + Y)


def test_tensor_scalar_reduce():
    def body(t):
        s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        y = nisa.tensor_scalar_reduce(data=t, op0=np.multiply, operand0=2.0, reduce_op=np.add, reduce_res=s)
        return nl.add(nl.sum(y, axis=1, keepdims=True), s)

    np.testing.assert_allclose(run(body, X), 4 * X.astype(np.float64).sum(1, keepdims=True), rtol=1e-4, atol=1e-4)


def test_tensor_tensor_scan():
    a = (R.random((128, 16)) * 0.5).astype(np.float32)
    b = R.standard_normal((128, 16)).astype(np.float32)
    got = run(lambda x, y: nisa.tensor_tensor_scan(x, y, initial=0.0, op0=np.multiply, op1=np.add), a, b)
    r = np.zeros(128, np.float32)
    want = np.zeros_like(a)
    for i in range(16):
        r = a[:, i] * r + b[:, i]
        want[:, i] = r
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("engine", [nisa.vector_engine, nisa.gpsimd_engine, nisa.scalar_engine])
def test_tensor_copy_engines(engine):
    np.testing.assert_array_equal(run(lambda t: nisa.tensor_copy(t, engine=engine), X), X)


def test_tensor_copy_predicated():
    def body(a, b):
        dst = nl.copy(b)
        nisa.tensor_copy_predicated(src=a, dst=dst, predicate=nl.greater(a, b, dtype=nl.uint8))
        return dst

    np.testing.assert_array_equal(run(body, X, Y), np.maximum(X, Y))


def test_reciprocal_and_memset():
    pos = (np.abs(X) + 0.5).astype(np.float32)
    np.testing.assert_array_equal(run(nisa.reciprocal, pos), (1 / pos.astype(np.float64)).astype(np.float32))
    got = run(lambda t: nl.add(t, nisa.memset((128, 64), 1.5, nl.float32)), X)
    np.testing.assert_array_equal(got, X + np.float32(1.5))


def test_iota():
    def body(t):
        i_p, i_f = nl.mgrid[0:128, 0:64]
        return nisa.iota(3 * i_p + 2 * i_f + 5, dtype=nl.int32)

    want = 3 * np.arange(128)[:, None] + 2 * np.arange(64)[None, :] + 5
    np.testing.assert_array_equal(run(body, X), want)


def test_affine_select_causal_mask():
    def body(t):
        i_p, i_f = nl.mgrid[0:128, 0:64]
        return nisa.affine_select(i_f <= i_p, t, -1e30)

    want = np.where(np.arange(64)[None, :] <= np.arange(128)[:, None], X, np.float32(-1e30))
    np.testing.assert_array_equal(run(body, X), want)


def test_bn_stats_bn_aggr():
    got = run(lambda t: nisa.bn_aggr(nisa.bn_stats(t)), X)
    np.testing.assert_allclose(got[:, 0], X.astype(np.float64).mean(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[:, 1], X.astype(np.float64).var(1), rtol=1e-5, atol=1e-6)


def test_local_gather():
    src = R.standard_normal((16, 32)).astype(np.float32)
    idx = R.integers(0, 32, (16, 1)).astype(np.uint16)
    got = run(lambda s, i: nisa.local_gather(s, i), src, idx)
    flat = idx.flatten(order="F")
    np.testing.assert_array_equal(got, src[:, flat])


def test_max8_find_index8_match_replace8():
    x = R.permutation(128 * 64).reshape(128, 64).astype(np.float32)
    top = run(lambda t: nisa.max8(src=t), x)
    np.testing.assert_array_equal(top, -np.sort(-x, axis=1)[:, :8])
    idx = run(lambda t: nisa.nc_find_index8(data=t, vals=nisa.max8(src=t)), x)
    np.testing.assert_array_equal(idx, np.argsort(-x, axis=1)[:, :8])
    rep = run(lambda t: nisa.nc_match_replace8(data=t, vals=nisa.max8(src=t), imm=-1.0), x)
    want = x.copy()
    np.put_along_axis(want, np.argsort(-x, axis=1)[:, :8], -1.0, axis=1)
    np.testing.assert_array_equal(rep, want)


def test_nc_stream_shuffle():
    x = R.standard_normal((32, 8)).astype(np.float32)
    mask = list(range(31, -1, -1))

    def body(t):
        dst = nl.ndarray((32, 8), nl.float32, buffer=nl.sbuf)
        nisa.nc_stream_shuffle(src=t, dst=dst, shuffle_mask=mask)
        return dst

    np.testing.assert_array_equal(run(body, x), x[::-1])


def test_select_reduce():
    def body(a, b):
        dst = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        mx = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
        nisa.select_reduce(
            dst=dst,
            predicate=nl.greater(a, b, dtype=nl.uint8),
            on_true=a,
            on_false=0.0,
            reduce_res=mx,
            reduce_op=np.max,
        )
        return nl.add(dst, mx)

    sel = np.where(X > Y, X, 0)
    np.testing.assert_array_equal(run(body, X, Y), sel + sel.max(1, keepdims=True))


def test_dropout_extremes():
    np.testing.assert_array_equal(run(lambda t: nisa.dropout(t, 0.0), X), X)
    np.testing.assert_array_equal(run(lambda t: nisa.dropout(t, 1.0), X), np.zeros_like(X))


def test_dma_copy_and_rmw():
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        u = nl.load(b)
        nisa.dma_copy(dst=out, src=u, dst_rmw_op=np.add)
        return out

    np.testing.assert_array_equal(k(X, Y), X + Y)


@pytest.mark.parametrize("shape,axes", [((64, 32), (1, 0)), ((4, 8, 16), (2, 1, 0))])
def test_dma_transpose(shape, axes):
    x = R.standard_normal(shape).astype(np.float32)

    @nki.jit
    def k(a):
        t = nisa.dma_transpose(a, axes=axes)
        out = nl.ndarray(t.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    np.testing.assert_array_equal(k(x), x.transpose(axes))


def test_enums_and_version():
    @nki.jit  # the default target, trn2 (NeuronCore-v3)
    def k(a):
        assert nisa.get_nc_version() == nisa.nc_version.gen3
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out

    k(X)
    assert int(nisa.engine.vector) == 5 and int(nisa.reduce_cmd.reset_reduce) == 3
    assert int(nisa.oob_mode.skip) == 1 and int(nisa.dge_mode.hwdge) == 2


def test_tensor_copy_dynamic_src_and_dst():
    src = R.standard_normal((128, 64)).astype(np.float32)
    offs = np.array([[5, 0, 63, 17]], np.int32)

    @nki.jit
    def k(a, o):
        out = nl.ndarray((128, 4), a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        off = nl.load(o)
        res = nl.ndarray((128, 4), a.dtype, buffer=nl.sbuf)
        ix, iy = nl.mgrid[0:128, 0:1]
        for i in nl.affine_range(4):
            res[ix, i + iy] = nisa.tensor_copy_dynamic_src(t[ix, off[0, i] + iy])
        nl.store(out, res)
        return out

    np.testing.assert_array_equal(k(src, offs), src[:, offs[0]])

    @nki.jit
    def scatter(a, o):
        out = nl.ndarray((128, 64), a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        off = nl.load(o)
        res = nl.zeros((128, 64), a.dtype)
        ix, iy = nl.mgrid[0:128, 0:1]
        for i in nl.affine_range(4):
            nisa.tensor_copy_dynamic_dst(dst=res[ix, off[0, i] + iy], src=t[ix, i + iy])
        nl.store(out, res)
        return out

    small = R.standard_normal((128, 4)).astype(np.float32)
    want = np.zeros((128, 64), np.float32)
    want[:, offs[0]] = small
    np.testing.assert_array_equal(scatter(small, offs), want)


def test_sequence_bounds():
    ids = np.array([[1, 1, 2, 2, 2, 0, 3, 3]], np.int32)
    got = run(lambda t: nisa.sequence_bounds(segment_ids=t), ids)
    starts = np.array([0, 0, 2, 2, 2, 8, 6, 6])
    ends = np.array([2, 2, 5, 5, 5, -1, 8, 8])
    np.testing.assert_array_equal(got.reshape(2, 8), np.stack([starts, ends]))


def test_range_select_is_trn2_only():
    @nki.jit(platform_target="trn2")
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        nl.store(
            out, nisa.range_select(on_true_tile=t, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=2.0, bound1=5.0)
        )
        return out

    got = k(X)
    i = np.arange(64)[None, :]
    np.testing.assert_array_equal(got, np.where((i >= 2) & (i < 5), X, np.finfo(np.float32).min))


def test_dst_keyword_writes_the_result_and_matmul_accumulates():
    """The dst-first convention of later NKI releases on legacy ops: the result lands in dst, and
    nc_matmul into a written PSUM region accumulates."""

    @nki.jit
    def k(a_t, b):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        for ki in nl.affine_range(2):
            at = nl.ndarray((128, 128), a_t.dtype, buffer=nl.sbuf)
            bt = nl.ndarray((128, 512), b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=at, src=a_t[ki * 128 : (ki + 1) * 128, :])
            nisa.dma_copy(dst=bt, src=b[ki * 128 : (ki + 1) * 128, :])
            nisa.nc_matmul(dst=acc, stationary=at, moving=bt)
        res = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out, src=res)
        return out

    a_t = R.standard_normal((256, 128)).astype(np.float32)
    b = R.standard_normal((256, 512)).astype(np.float32)
    np.testing.assert_allclose(k(a_t, b), a_t.astype(np.float64).T @ b, rtol=1e-4, atol=1e-4)
