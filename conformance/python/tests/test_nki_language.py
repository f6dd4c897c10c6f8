"""`neuronxcc.nki.language` on trnsim, function by function, against NumPy (docs/nki.md's feature
matrix names these tests). Exact comparisons where the engines' math is exact (fp32 add/mul of
exact inputs, max/min, compares, bit ops, copies); otherwise the function's own accuracy
(ScalarE functions are evaluated in f64 and rounded once to fp32: rtol 1e-6)."""

import math

import ml_dtypes
import numpy as np
import pytest
import trnsim.nki

trnsim.nki.install()

import neuronxcc.nki.language as nl
from neuronxcc import nki

R = np.random.default_rng(11)
X = R.standard_normal((128, 64)).astype(np.float32)
Y = R.standard_normal((128, 64)).astype(np.float32)
POS = (R.random((128, 64)) + 0.5).astype(np.float32)
I1 = R.integers(-1000, 1000, (128, 64)).astype(np.int32)
I2 = R.integers(0, 31, (128, 64)).astype(np.int32)


def run(body, *arrays, grid=None):
    """Load every array into a tile, apply body, store its result."""

    def kernel(*args):
        tiles = [nl.load(a) for a in args]
        res = body(*tiles)
        out = nl.ndarray(res.shape, res.dtype, buffer=nl.shared_hbm)
        nl.store(out, res)
        return out

    k = nki.jit(kernel)
    return (k[grid] if grid else k)(*arrays)


BINARY = [
    ("add", np.add),
    ("subtract", np.subtract),
    ("multiply", np.multiply),
    ("maximum", np.maximum),
    ("minimum", np.minimum),
]


@pytest.mark.parametrize("name,ref", BINARY)
def test_binary_arith(name, ref):
    np.testing.assert_array_equal(run(getattr(nl, name), X, Y), ref(X, Y))


def test_operators_and_scalars():
    np.testing.assert_array_equal(run(lambda a, b: a + b, X, Y), X + Y)
    np.testing.assert_array_equal(run(lambda a, b: a - b, X, Y), X - Y)
    np.testing.assert_array_equal(run(lambda a, b: a * b, X, Y), X * Y)
    np.testing.assert_array_equal(run(lambda a: a * 2.0, X), X * np.float32(2))
    np.testing.assert_array_equal(run(lambda a: 1.0 - a, X), np.float32(1) - X)
    np.testing.assert_array_equal(run(lambda a: -a, X), -X)


def test_divide():
    got = run(nl.divide, X, POS)
    np.testing.assert_allclose(got, X / POS, rtol=2e-7)  # x * (1/y): two fp32 roundings
    np.testing.assert_allclose(run(lambda a: a / 4.0, X), X / 4, rtol=0)


def test_power_on_gpsimd():
    np.testing.assert_allclose(run(nl.power, POS, Y), POS.astype(np.float64) ** Y, rtol=1e-6)


def test_column_broadcast_is_a_per_partition_scalar():
    col = R.standard_normal((128, 1)).astype(np.float32)
    np.testing.assert_array_equal(run(nl.multiply, X, col), X * col)
    np.testing.assert_array_equal(run(nl.subtract, col, X), col - X)


def test_partition_broadcast():
    row = R.standard_normal((1, 64)).astype(np.float32)
    np.testing.assert_array_equal(run(nl.add, X, row), X + row)
    np.testing.assert_array_equal(run(lambda r: nl.broadcast_to(r, (128, 64)), row), np.broadcast_to(row, (128, 64)))
    np.testing.assert_array_equal(run(lambda r: r.broadcast_to((128, 64)), row), np.broadcast_to(row, (128, 64)))


COMPARE = [
    ("equal", np.equal),
    ("not_equal", np.not_equal),
    ("greater", np.greater),
    ("greater_equal", np.greater_equal),
    ("less", np.less),
    ("less_equal", np.less_equal),
]


@pytest.mark.parametrize("name,ref", COMPARE)
def test_comparisons(name, ref):
    y = np.where(R.random((128, 64)) < 0.3, X, Y)  # some equal elements
    got = run(getattr(nl, name), X, y)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, ref(X, y))


@pytest.mark.parametrize(
    "name,ref", [("logical_and", np.logical_and), ("logical_or", np.logical_or), ("logical_xor", np.logical_xor)]
)
def test_logical(name, ref):
    a = (R.random((128, 64)) < 0.5).astype(np.float32)
    b = (R.random((128, 64)) < 0.5).astype(np.float32)
    np.testing.assert_array_equal(run(getattr(nl, name), a, b), ref(a, b))
    np.testing.assert_array_equal(run(nl.logical_not, a), np.logical_not(a))


@pytest.mark.parametrize(
    "name,ref",
    [
        ("bitwise_and", np.bitwise_and),
        ("bitwise_or", np.bitwise_or),
        ("bitwise_xor", np.bitwise_xor),
        ("left_shift", np.left_shift),
    ],
)
def test_bitwise(name, ref):
    np.testing.assert_array_equal(run(getattr(nl, name), I1, I2), ref(I1, I2))


def test_right_shift_is_logical_and_invert():
    np.testing.assert_array_equal(
        run(nl.right_shift, I1, I2), (I1.view(np.uint32) >> I2.astype(np.uint32)).view(np.int32)
    )
    np.testing.assert_array_equal(run(nl.invert, I1), np.invert(I1))
    np.testing.assert_array_equal(run(lambda a, b: a & b, I1, I2), I1 & I2)


def _gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def _sig(x):
    return 1 / (1 + np.exp(-x))


ACT = [
    ("exp", np.exp, X),
    ("log", np.log, POS),
    ("sqrt", np.sqrt, POS),
    ("rsqrt", lambda x: 1 / np.sqrt(x), POS),
    ("tanh", np.tanh, X),
    ("sigmoid", _sig, X),
    ("relu", lambda x: np.maximum(x, 0), X),
    ("gelu", _gelu, X),
    (
        "gelu_dx",
        lambda x: (
            0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        ),
        X,
    ),
    ("gelu_apprx_tanh", lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))), X),
    ("gelu_apprx_sigmoid", lambda x: x * _sig(1.702 * x), X),
    ("gelu_apprx_sigmoid_dx", lambda x: _sig(1.702 * x) * (1 + 1.702 * x * (1 - _sig(1.702 * x))), X),
    ("silu", lambda x: x * _sig(x), X),
    ("silu_dx", lambda x: _sig(x) * (1 + x * (1 - _sig(x))), X),
    ("erf", np.vectorize(math.erf), X),
    ("erf_dx", lambda x: 2 / math.sqrt(math.pi) * np.exp(-x * x), X),
    ("softplus", lambda x: np.log1p(np.exp(x)), X),
    ("mish", lambda x: x * np.tanh(np.log1p(np.exp(x))), X),
    ("sin", np.sin, np.clip(X, -3, 3)),
    ("arctan", np.arctan, np.clip(X, -1.5, 1.5)),
    ("sign", np.sign, X),
    ("square", np.square, X),
]


@pytest.mark.parametrize("name,ref,x", ACT, ids=[a[0] for a in ACT])
def test_activation_functions(name, ref, x):
    got = run(getattr(nl, name), x)
    np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=2e-6, atol=1e-7)


def test_vector_unaries():
    np.testing.assert_array_equal(run(nl.abs, X), np.abs(X))
    np.testing.assert_array_equal(run(nl.negative, X), -X)
    np.testing.assert_array_equal(run(nl.reciprocal, POS), (1 / POS.astype(np.float64)).astype(np.float32))


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize(
    "name,ref", [("sum", np.sum), ("max", np.max), ("min", np.min), ("mean", np.mean), ("prod", np.prod)]
)
def test_reductions(name, ref, keepdims):
    x = (X * 0.1 + 1).astype(np.float32) if name == "prod" else X
    got = run(lambda t: getattr(nl, name)(t, axis=1, keepdims=keepdims), x)
    want = ref(x.astype(np.float64), axis=1, keepdims=keepdims)
    if not keepdims:
        got = got.reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("f", [64, 1024])
def test_var(f):
    x = R.standard_normal((128, f)).astype(np.float32)
    np.testing.assert_allclose(
        run(lambda t: nl.var(t, axis=1), x), x.astype(np.float64).var(1, keepdims=True), rtol=1e-5, atol=1e-6
    )


def test_reduction_over_two_axes_and_all():
    x3 = R.standard_normal((128, 4, 16)).astype(np.float32)
    got = run(lambda t: nl.max(t, axis=[1, 2]), x3)
    np.testing.assert_array_equal(got.reshape(128), x3.max(axis=(1, 2)))
    got = run(lambda t: nl.max(t, axis=1), x3)  # a middle axis: the reduction walks it innermost
    np.testing.assert_array_equal(got.reshape(128, 16), x3.max(axis=1))
    b = (R.random((128, 8)) < 0.9).astype(np.float32)
    np.testing.assert_array_equal(run(lambda t: nl.all(t, axis=1, keepdims=True), b), b.all(1, keepdims=True))


def test_where():
    c = X > Y
    np.testing.assert_array_equal(run(lambda a, b: nl.where(a > b, a, b), X, Y), np.where(c, X, Y))
    np.testing.assert_array_equal(run(lambda a: nl.where(a > 0, a, 0.0), X), np.where(X > 0, X, 0))


def test_copy_static_cast_astype():
    np.testing.assert_array_equal(run(nl.copy, X), X)
    bf = run(lambda a: nl.static_cast(a, nl.bfloat16), X)
    assert bf.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(bf.view(np.uint16), X.astype(ml_dtypes.bfloat16).view(np.uint16))
    i = run(lambda a: a.astype(nl.int32), X * 100)
    np.testing.assert_array_equal(i, np.rint(X * 100).astype(np.int32))  # round to nearest even
    np.testing.assert_array_equal(run(lambda a: nl.copy(a, dtype=nl.float16), X), X.astype(np.float16))


def test_expand_dims_and_reshape():
    def body(a):
        e = nl.expand_dims(a, 2)  # [128, 64, 1]
        assert e.shape == (128, 64, 1)
        return nl.copy(e)

    got = run(body, X)
    np.testing.assert_array_equal(got.reshape(128, 64), X)

    @nki.jit
    def k(a):
        flat = a.reshape((128, 64))
        out = nl.ndarray((128, 64), a.dtype, buffer=nl.shared_hbm)
        t = nl.load(flat)
        t2 = t.reshape((128, 8, 8))
        nl.store(out.reshape((128, 8, 8)), t2)
        return out

    np.testing.assert_array_equal(k(X.reshape(128, 8, 8)), X)


def test_creation():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 6 * 16), nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a)
        parts = [
            nl.zeros((128, 16), nl.float32),
            nl.ones((128, 16), nl.float32),
            nl.full((128, 16), 2.5, nl.float32),
            nl.zeros_like(t),
            nl.ones_like(t),
            nl.full_like(t, -1.0),
        ]
        e = nl.empty_like(t)
        e[...] = t
        for i, p in enumerate(parts):
            nl.store(out[:, 16 * i : 16 * (i + 1)], p)
        return out

    a = R.standard_normal((128, 16)).astype(np.float32)
    got = k(a)
    want = np.concatenate(
        [
            np.zeros((128, 16)),
            np.ones((128, 16)),
            np.full((128, 16), 2.5),
            np.zeros((128, 16)),
            np.ones((128, 16)),
            np.full((128, 16), -1.0),
        ],
        axis=1,
    )
    np.testing.assert_array_equal(got, want)


def test_matmul_without_transpose_and_transpose():
    a = R.standard_normal((64, 128)).astype(np.float32)  # [M, K]
    b = R.standard_normal((128, 256)).astype(np.float32)  # [K, N]
    got = run(lambda x, y: nl.copy(nl.matmul(x, y)), a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(run(lambda x: nl.copy(nl.transpose(x)), a), a.T)


def test_softmax_and_rms_norm():
    got = run(lambda x: nl.softmax(x, axis=1), X)
    e = np.exp(X.astype(np.float64) - X.max(1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    w = R.random((128, 64)).astype(np.float32)
    got = run(lambda x, ww: nl.rms_norm(x, ww, axis=1, n=64), X, w)
    xd = X.astype(np.float64)
    np.testing.assert_allclose(got, xd / np.sqrt((xd**2).mean(1, keepdims=True) + 1e-6) * w, rtol=1e-5, atol=1e-6)


def test_dropout_rand_random_seed():
    keep = run(lambda x: nl.dropout(x, 0.0), X)
    np.testing.assert_array_equal(keep, X)
    drop = run(lambda x: nl.dropout(x, 1.0), X)
    np.testing.assert_array_equal(drop, np.zeros_like(X))

    @nki.jit
    def k(seed):
        out = nl.ndarray((128, 32), nl.float32, buffer=nl.shared_hbm)
        nl.random_seed(seed)
        nl.store(out, nl.rand((128, 32), nl.float32))
        return out

    a, b, c = k(7), k(7), k(8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.min() >= 0 and a.max() < 1
    np.testing.assert_array_equal(a * 2**24, np.floor(a * 2**24))


def test_masked_op_leaves_masked_elements_unwritten():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        _, i_f = nl.mgrid[0:128, 0:64]
        t[...] = nl.multiply(t, 2.0, mask=(i_f < 32))
        nl.store(out, t)
        return out

    want = X.copy()
    want[:, :32] *= 2
    np.testing.assert_array_equal(k(X), want)


def test_index_helpers():
    @nki.jit
    def k(a):
        out = nl.ndarray((64, 32), a.dtype, buffer=nl.shared_hbm)
        g = nl.mgrid[0:64, 0:32]
        t = nl.load(a[g.p + 64, g.x * 2])
        nl.store(out[nl.ds(0, 64), nl.ds(0, 32)], t)
        return out

    np.testing.assert_array_equal(k(X), X[64:128, 0:64:2])


def test_spmd_program_id_num_programs_ndim():
    @nki.jit
    def k(a):
        out = nl.ndarray((4, 3), nl.float32, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        assert nl.num_programs() == 12 and nl.num_programs(1) == 3 and nl.program_ndim() == 2
        t = nl.full((1, 1), float(10 * i + j), nl.float32)
        nl.store(out[i : i + 1, j : j + 1], t)
        return out

    got = k[4, 3](np.zeros(1, np.float32))
    np.testing.assert_array_equal(got, np.add.outer(10 * np.arange(4), np.arange(3)))
    got = k[nl.spmd_dim(nl.nc(2), 2), 3](np.zeros(1, np.float32))
    np.testing.assert_array_equal(got, np.add.outer(10 * np.arange(4), np.arange(3)))


def test_loops_unrolled_in_order():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 8), a.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 8), nl.float32)
        for i in nl.sequential_range(3):
            acc[...] = nl.add(acc, nl.load(a[:, 8 * i : 8 * i + 8]))
        for i in nl.static_range(2):
            acc[...] = nl.multiply(acc, 2.0)
        for i in nl.affine_range(1, 4, 2):
            acc += nl.load(a[:, 8 * i : 8 * i + 8])
        nl.store(out, acc)
        return out

    want = (X[:, 0:8] + X[:, 8:16] + X[:, 16:24]) * 4 + X[:, 8:16] + X[:, 24:32]
    np.testing.assert_allclose(k(X), want, rtol=1e-6)


def test_atomic_rmw_and_in_out_parameter():
    @nki.jit
    def k(acc, upd):
        nl.atomic_rmw(acc, value=nl.load(upd), op=np.add)
        return acc

    acc = X.copy()
    got = k(acc, Y)
    np.testing.assert_array_equal(got, X + Y)
    np.testing.assert_array_equal(acc, X + Y)  # the caller's array is updated in place


def test_dynamic_index_store_scatter():
    @nki.jit
    def k(src, idx):
        out = nl.ndarray((16, 8), src.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.zeros((16, 8), src.dtype))
        i = nl.load(idx)
        nl.store(out[i[:, 0:1], nl.arange(8)[None, :]], nl.load(src))
        return out

    src = R.standard_normal((4, 8)).astype(np.float32)
    idx = np.array([[5], [0], [9], [15]], np.int32)
    want = np.zeros((16, 8), np.float32)
    want[idx[:, 0]] = src
    np.testing.assert_array_equal(k(src, idx), want)


def test_shared_constant_and_identity():
    @nki.jit
    def k(a):
        out = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
        ident = nl.load(nl.shared_identity_matrix(128, dtype=nl.float32))
        c = nl.load(nl.shared_constant(np.full((128, 128), 3.0, np.float32)))
        nl.store(out, nl.multiply(ident, c))
        return out

    np.testing.assert_array_equal(k(np.zeros(1, np.float32)), np.eye(128) * 3)


def test_non_array_arguments_pass_through():
    @nki.jit
    def k(a, scale, shape, dtype, op):
        out = nl.ndarray(shape, dtype, buffer=nl.shared_hbm)
        nl.store(out, op(nl.load(a), scale, dtype=dtype))
        return out

    got = k(X, 3, (128, 64), nl.bfloat16, nl.multiply)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.view(np.uint16), (X * 3).astype(ml_dtypes.bfloat16).view(np.uint16))


def test_tile_size_and_par_dim():
    assert nl.tile_size.pmax == 128 and nl.tile_size.psum_fmax == 512
    assert nl.tile_size.gemm_stationary_fmax == 128 and nl.tile_size.gemm_moving_fmax == 512
    assert int(nl.par_dim(64)) == 64


def test_unsupported_functions_say_so():
    with pytest.raises(trnsim.nki.NkiError, match="not supported"):
        run(nl.fmod, X, POS)


def test_gather_flattened():
    data = R.standard_normal((16, 32)).astype(np.float32)
    idx = R.integers(0, 32, (16, 8)).astype(np.uint32)
    got = run(nl.gather_flattened, data, idx)
    np.testing.assert_array_equal(got, np.take_along_axis(data, idx.astype(np.int64), axis=1))


def test_device_print_is_accepted_and_fp32_constants():
    def body(t):
        nl.device_print("t = ", t)
        return nl.maximum(t, nl.fp32.min)

    np.testing.assert_array_equal(run(body, X), X)
    assert nl.fp32.min == float(np.finfo(np.float32).min)
