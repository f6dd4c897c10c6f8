"""The NKI kernel corpus (tests/nki_corpus/) on trnsim against NumPy references.

Tolerances: exact where the math is exact on the engines (adds of the same dtype, copies,
transposes, max); otherwise `np.allclose` at the tolerances AWS's NKI tutorials use for fp32
(rtol 1e-5 class) or bf16 (rtol 1e-2 class), stated per test.
"""

import ml_dtypes
import numpy as np
import pytest
import trnsim.nki

trnsim.nki.install()

from neuronxcc import nki
from nki_corpus import (
    attention,
    avgpool,
    matmul,
    norms,
    softmax,
    tensor_add,
    transpose2d,
)

SEEDS = [0, 1]


def rng(seed):
    return np.random.default_rng(seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_tensor_add_spmd_grid(seed):
    r = rng(seed)
    a, b = r.standard_normal((256, 1024), np.float32), r.standard_normal((256, 1024), np.float32)
    out = nki.simulate_kernel(tensor_add.add_tiles[2, 2], a, b)
    np.testing.assert_array_equal(out, a + b)  # one fp32 add: exact


@pytest.mark.parametrize("shape", [(200, 1100), (128, 512), (1, 7), (300, 513)])
def test_tensor_add_ragged_masks(shape):
    r = rng(sum(shape))
    a, b = r.standard_normal(shape, np.float32), r.standard_normal(shape, np.float32)
    grid = (-(-shape[0] // 128), -(-shape[1] // 512))
    out = tensor_add.add_ragged[grid](a, b)
    np.testing.assert_array_equal(out, a + b)
    np.testing.assert_array_equal(tensor_add.add_loop(a, b), a + b)


def test_tensor_add_bf16_baremetal():
    r = rng(3)
    a = r.standard_normal((128, 512)).astype(ml_dtypes.bfloat16)
    b = r.standard_normal((128, 512)).astype(ml_dtypes.bfloat16)
    out = nki.baremetal(tensor_add.add_tiles)[1, 1](a, b)
    assert out.dtype == ml_dtypes.bfloat16
    # fp32 add, one rounding to bf16 on write: exactly numpy's fp32 sum cast to bf16
    want = (a.astype(np.float32) + b.astype(np.float32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))


def _mm_ref(a_t, b):
    return a_t.astype(np.float64).T @ b.astype(np.float64)


@pytest.mark.parametrize("seed", SEEDS)
def test_matmul_basic(seed):
    r = rng(seed)
    a_t, b = r.standard_normal((128, 64), np.float32), r.standard_normal((128, 512), np.float32)
    np.testing.assert_allclose(nki.simulate_kernel(matmul.matmul_basic, a_t, b), _mm_ref(a_t, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel", [matmul.matmul_tiled, matmul.matmul_hoisted], ids=["tiled", "hoisted"])
@pytest.mark.parametrize("seed", SEEDS)
def test_matmul_tiled_and_hoisted(kernel, seed):
    r = rng(seed)
    a_t, b = r.standard_normal((384, 256), np.float32), r.standard_normal((384, 1024), np.float32)
    np.testing.assert_allclose(kernel(a_t, b), _mm_ref(a_t, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("seed", SEEDS)
def test_matmul_blocked_bf16_psum_accumulation(seed):
    r = rng(seed)
    a_t = r.standard_normal((256, 256)).astype(ml_dtypes.bfloat16)
    b = r.standard_normal((256, 2048)).astype(ml_dtypes.bfloat16)
    out = matmul.matmul_blocked(a_t, b)
    assert out.dtype == ml_dtypes.bfloat16
    # bf16 products are exact in fp32; the fp32 sums then one bf16 rounding on the way out
    np.testing.assert_allclose(out.astype(np.float64), _mm_ref(a_t, b), rtol=1e-2, atol=1e-2)


def test_matmul_blocked_other_block_count():
    r = rng(5)
    a_t = r.standard_normal((128, 128)).astype(ml_dtypes.bfloat16)
    b = r.standard_normal((128, 2048)).astype(ml_dtypes.bfloat16)
    out = matmul.matmul_blocked(a_t, b, n_block=4)
    np.testing.assert_allclose(out.astype(np.float64), _mm_ref(a_t, b), rtol=1e-2, atol=1e-2)


def test_transpose_free_dims():
    x = rng(0).standard_normal((128, 6 * 8), np.float32)
    want = x.reshape(128, 6, 8).transpose(0, 2, 1).reshape(128, 48)
    np.testing.assert_array_equal(transpose2d.transpose_free(x, 6, 8), want)


def test_transpose_pf_tensor_engine():
    x = rng(1).standard_normal((256, 384), np.float32)
    np.testing.assert_array_equal(transpose2d.transpose_pf(x), x.T)  # identity matmul: exact for finite x


def test_transpose_load_transpose2d():
    x = rng(2).standard_normal((256, 96), np.float32)
    np.testing.assert_array_equal(transpose2d.transpose_load(x), x.T)


@pytest.mark.parametrize("n", [256, 300])
def test_rmsnorm(n):
    r = rng(n)
    x, w = r.standard_normal((n, 256), np.float32), r.random((256,), np.float32)
    xd = x.astype(np.float64)
    want = xd / np.sqrt((xd**2).mean(1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(norms.rmsnorm(x, w), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("d", [512, 1024])
def test_layernorm(d):
    r = rng(d)
    x, g, b = r.standard_normal((256, d), np.float32), r.random((d,), np.float32), r.random((d,), np.float32)
    xd = x.astype(np.float64)
    want = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(norms.layernorm(x, g, b), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(300, 700), (128, 512), (5, 1030)])
def test_layernorm_ragged_rows_and_chunks(shape):
    r = rng(shape[1])
    x = r.standard_normal(shape, np.float32)
    g, b = r.random((shape[1],), np.float32), r.random((shape[1],), np.float32)
    xd = x.astype(np.float64)
    want = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(norms.layernorm_ragged(x, g, b), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel", [softmax.softmax_nl, softmax.softmax_isa], ids=["nl", "isa"])
def test_softmax(kernel):
    x = rng(7).standard_normal((256, 512), np.float32) * 4
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(kernel(x), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("k", [2, 4])
def test_avgpool(k):
    x = rng(k).standard_normal((64, 16, 24), np.float32)
    want = x.astype(np.float64).reshape(64, 16 // k, k, 24 // k, k).mean(axis=(2, 4))
    np.testing.assert_allclose(avgpool.avgpool2d(x, k), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_avgpool_interleaved_window_axes(dtype):
    x = rng(9).standard_normal((32, 12, 18)).astype(dtype)
    want = x.astype(np.float64).reshape(32, 4, 3, 6, 3).mean(axis=(2, 4))
    got = avgpool.avgpool2d_window_axes(x, 3)
    assert got.dtype == dtype
    tol = 1e-6 if dtype == np.float32 else 2e-3  # fp16: the sum is rounded to fp16 before the scaling
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("seed", SEEDS)
def test_flash_attention_forward(seed):
    r = rng(seed)
    q = r.standard_normal((256, 64), np.float32)
    k = r.standard_normal((384, 64), np.float32)
    v = r.standard_normal((384, 64), np.float32)
    s = q.astype(np.float64) @ k.T.astype(np.float64) * 0.125
    p = np.exp(s - s.max(1, keepdims=True))
    want = (p / p.sum(1, keepdims=True)) @ v
    # probabilities and V go through bf16 for the second matmul (as in AWS's fused attention)
    np.testing.assert_allclose(attention.flash_fwd(q, k, v, 0.125), want, rtol=2e-2, atol=2e-2)
