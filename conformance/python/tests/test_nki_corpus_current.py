"""A corpus of our own current-API kernels (`import nki`), written from AWS's NKI documentation in
the style of its tutorials, each checked against a NumPy reference on trn2. Where the legacy API
can express the same kernel, it runs there too.

Tolerances: exact where the kernel is pure data movement or exact integer-valued arithmetic; for
bf16 kernels the bound is the bf16 rounding of the operands the kernel itself rounds (inputs, and
for attention the probabilities fed to the second matmul), stated at each check.

The MX-FP8 matmul runs on trn3 (NeuronCore-v4 is the only generation with MX).

Top-k is written with VectorE's max8 / nc_find_index8 / nc_match_replace8 rounds: GpSimd's
`topk` instruction (NKI 0.6) is not in the simulator yet."""

import sys

import ml_dtypes
import numpy as np
import pytest
import trnsim.nki
from trnsim.nki import NkiError

BF16 = ml_dtypes.bfloat16


@pytest.fixture
def cur():
    trnsim.nki.install()
    import nki
    import nki.isa as nisa
    import nki.language as nl

    yield nki, nl, nisa
    for name in ("nki", "nki.language", "nki.isa", "nki.typing", "nki.isa.constants"):
        sys.modules.pop(name, None)


def _bf16(r, shape, scale=1.0):
    return (r.standard_normal(shape) * scale).astype(BF16)


def _f64(a):
    return np.asarray(a).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# tensor add, LNC=2: each physical core adds its half of the rows


def test_tensor_add_lnc2(cur):
    nki, nl, nisa = cur

    @nki.jit
    def tensor_add(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        rows_per_core = a.shape[0] // nl.num_programs(0)
        base = nl.program_id(0) * rows_per_core
        for t in range(rows_per_core // 128):
            r = base + t * 128
            ta = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
            tb = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=ta, src=a[r : r + 128, :])
            nisa.dma_copy(dst=tb, src=b[r : r + 128, :])
            nisa.tensor_tensor(dst=ta, data1=ta, data2=tb, op=nl.add)
            nisa.dma_copy(dst=out[r : r + 128, :], src=ta)
        return out

    r = np.random.default_rng(10)
    a, b = _bf16(r, (512, 256)), _bf16(r, (512, 256))
    want = (a.astype(np.float32) + b.astype(np.float32)).astype(BF16)  # one fp32 add, one rounding
    np.testing.assert_array_equal(tensor_add[2](a, b), want)
    assert trnsim.nki.last_run().program["target"] == "trn2"


def test_tensor_add_legacy_spmd():
    import neuronxcc.nki as legacy
    import neuronxcc.nki.language as lnl

    trnsim.nki.install()

    @legacy.jit
    def tensor_add(a, b):
        out = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
        r = lnl.program_id(0) * 128
        lnl.store(out[r : r + 128, :], lnl.add(lnl.load(a[r : r + 128, :]), lnl.load(b[r : r + 128, :])))
        return out

    r = np.random.default_rng(10)
    a, b = _bf16(r, (512, 256)), _bf16(r, (512, 256))
    np.testing.assert_array_equal(tensor_add[4](a, b), (a.astype(np.float32) + b.astype(np.float32)).astype(BF16))


# ---------------------------------------------------------------------------------------------
# tiled matmul: dst= everywhere, K accumulated in PSUM (first write overwrites, later ones add)


def _tiled_matmul(nki, nl, nisa):
    @nki.jit
    def matmul(lhs_t, rhs):
        k, m = lhs_t.shape
        _, n = rhs.shape
        out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        for mi in range(m // 128):
            for ni in range(n // 512):
                acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
                for ki in range(k // 128):
                    a = nl.ndarray((128, 128), dtype=lhs_t.dtype, buffer=nl.sbuf)
                    b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=a, src=lhs_t[ki * 128 : (ki + 1) * 128, mi * 128 : (mi + 1) * 128])
                    nisa.dma_copy(dst=b, src=rhs[ki * 128 : (ki + 1) * 128, ni * 512 : (ni + 1) * 512])
                    nisa.nc_matmul(dst=acc, stationary=a, moving=b)
                res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=res, src=acc)
                nisa.dma_copy(dst=out[mi * 128 : (mi + 1) * 128, ni * 512 : (ni + 1) * 512], src=res)
        return out

    return matmul


def test_tiled_matmul_psum_accumulation(cur):
    nki, nl, nisa = cur
    r = np.random.default_rng(11)
    a_t, b = _bf16(r, (512, 256)), _bf16(r, (512, 1024))
    got = _tiled_matmul(nki, nl, nisa)(a_t, b)
    # bf16 products are exact in fp32; only the fp32 accumulation order differs from float64
    np.testing.assert_allclose(got, _f64(a_t).T @ _f64(b), rtol=1e-5, atol=1e-4)
    mm = [i for i in trnsim.nki.last_run().program["instructions"] if "nc_matmul" in i["op"]]
    assert len(mm) == 2 * 2 * 4


def test_tiled_matmul_legacy():
    import neuronxcc.nki as legacy
    import neuronxcc.nki.language as lnl

    trnsim.nki.install()

    @legacy.jit
    def matmul(lhs_t, rhs):
        k, m = lhs_t.shape
        _, n = rhs.shape
        out = lnl.ndarray((m, n), dtype=lnl.float32, buffer=lnl.shared_hbm)
        acc = lnl.zeros((m, n), dtype=lnl.float32, buffer=lnl.psum)
        for ki in lnl.affine_range(k // 128):
            acc += lnl.matmul(
                lnl.load(lhs_t[ki * 128 : (ki + 1) * 128, :]),
                lnl.load(rhs[ki * 128 : (ki + 1) * 128, :]),
                transpose_x=True,
            )
        lnl.store(out, acc)
        return out

    r = np.random.default_rng(11)
    a_t, b = _bf16(r, (512, 128)), _bf16(r, (512, 512))
    np.testing.assert_allclose(matmul(a_t, b), _f64(a_t).T @ _f64(b), rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# RMSNorm + QKV projection


def test_rmsnorm_qkv_projection(cur):
    nki, nl, nisa = cur
    eps = 1e-6

    @nki.jit
    def rmsnorm_qkv(x, gamma, w_qkv):
        s, h = x.shape
        _, nqkv = w_qkv.shape
        out = nl.ndarray((s, nqkv), dtype=nl.float32, buffer=nl.shared_hbm)
        xt = nl.ndarray((128, h), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x)
        g = nl.ndarray((128, h), dtype=gamma.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=g, src=gamma.ap(pattern=[[0, 128], [1, h]]))  # one row, to every partition
        sq = nl.ndarray((128, h), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=sq, data1=xt, data2=xt, op=nl.multiply)
        ss = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=ss, op=nl.add, data=sq, axis=1)
        nisa.tensor_scalar(dst=ss, data=ss, op0=nl.multiply, operand0=1.0 / h, op1=nl.add, operand1=eps)
        rstd = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=ss)
        y = nl.ndarray((128, h), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=xt, op0=nl.multiply, operand0=rstd)
        yb = nl.ndarray((128, h), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=yb, data1=y, data2=g, op=nl.multiply)
        acc = nl.ndarray((128, nqkv), dtype=nl.float32, buffer=nl.psum)
        for c in range(h // 128):
            yt_ps = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.psum)
            nisa.nc_transpose(dst=yt_ps, data=yb[:, c * 128 : (c + 1) * 128])
            yt = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.tensor_copy(dst=yt, src=yt_ps)
            w = nl.ndarray((128, nqkv), dtype=w_qkv.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=w, src=w_qkv[c * 128 : (c + 1) * 128, :])
            nisa.nc_matmul(acc, yt, w)
        res = nl.ndarray((128, nqkv), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out, src=res)
        return out

    r = np.random.default_rng(12)
    x, gamma, w = _bf16(r, (128, 256)), _bf16(r, (1, 256)), _bf16(r, (256, 384), 0.05)
    xf = _f64(x)
    y = xf / np.sqrt((xf * xf).mean(axis=1, keepdims=True) + eps) * _f64(gamma)
    want = _f64(y.astype(BF16)) @ _f64(w)
    # the normalised activations are rounded to bf16 before the projection, in the kernel as in
    # the reference; what remains is fp32 vs float64 arithmetic (measured: 6e-7)
    np.testing.assert_allclose(rmsnorm_qkv(x, gamma, w), want, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# flash attention forward (online softmax), bf16


def _flash_fwd(nki, nl, nisa):
    @nki.jit
    def flash_fwd(q, k, v):
        s, d = q.shape
        scale = 1.0 / float(np.sqrt(d))
        out = nl.ndarray((s, d), dtype=nl.float32, buffer=nl.shared_hbm)
        for qi in range(s // 128):
            qt = nl.ndarray((d, 128), dtype=q.dtype, buffer=nl.sbuf)  # q tile transposed: [d, 128]
            nisa.dma_copy(dst=qt, src=q.ap(pattern=[[1, d], [d, 128]], offset=qi * 128 * d))
            m = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=m, value=-3.0e38)
            l_sum = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=l_sum, value=0.0)
            o = nl.ndarray((128, d), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=o, value=0.0)
            for kj in range(s // 128):
                kt = nl.ndarray((d, 128), dtype=k.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=kt, src=k.ap(pattern=[[1, d], [d, 128]], offset=kj * 128 * d))
                vt = nl.ndarray((128, d), dtype=v.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=vt, src=v[kj * 128 : (kj + 1) * 128, :])
                sc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=sc, stationary=qt, moving=kt)  # q @ k.T for this tile pair
                mx = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_reduce(dst=mx, op=nl.maximum, data=sc, axis=1)
                m_new = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=m_new, data1=m, data2=mx, op=nl.maximum)
                diff = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=diff, data1=m, data2=m_new, op=nl.subtract)
                corr = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=corr, op=nl.exp, data=diff, scale=scale)
                neg = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=neg, data=m_new, op0=nl.multiply, operand0=-scale)
                p = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
                rows = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=p, op=nl.exp, data=sc, bias=neg, scale=scale, reduce_op=nl.add, reduce_res=rows)
                nisa.tensor_scalar(dst=l_sum, data=l_sum, op0=nl.multiply, operand0=corr)
                nisa.tensor_tensor(dst=l_sum, data1=l_sum, data2=rows, op=nl.add)
                pt_ps = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.psum)
                nisa.nc_transpose(dst=pt_ps, data=p)
                pt = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
                nisa.tensor_copy(dst=pt, src=pt_ps)
                pv = nl.ndarray((128, d), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_matmul(dst=pv, stationary=pt, moving=vt)
                nisa.tensor_scalar(dst=o, data=o, op0=nl.multiply, operand0=corr)
                nisa.tensor_tensor(dst=o, data1=o, data2=pv, op=nl.add)
                nisa.tensor_copy(dst=m, src=m_new)
            inv = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.reciprocal(dst=inv, data=l_sum)
            nisa.tensor_scalar(dst=o, data=o, op0=nl.multiply, operand0=inv)
            nisa.dma_copy(dst=out[qi * 128 : (qi + 1) * 128, :], src=o)
        return out

    return flash_fwd


def test_flash_attention_forward(cur):
    nki, nl, nisa = cur
    r = np.random.default_rng(13)
    seq, d = 512, 64
    q, k, v = _bf16(r, (seq, d)), _bf16(r, (seq, d)), _bf16(r, (seq, d))
    s = _f64(q) @ _f64(k).T / np.sqrt(d)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    want = (p / p.sum(axis=1, keepdims=True)) @ _f64(v)
    got = _flash_fwd(nki, nl, nisa)(q, k, v)
    # the kernel feeds the probabilities to the second matmul in bf16 (a relative error up to 2^-9
    # each) while the normaliser sums them unrounded: each output, a weighted mean of v, is off by
    # at most 2^-8 * max|v| (measured: about a tenth of that)
    np.testing.assert_allclose(got, want, rtol=0, atol=2.0**-8 * float(np.abs(_f64(v)).max()))


# ---------------------------------------------------------------------------------------------
# a cumulative scan (prefix sum along the free axis) with tensor_tensor_scan


def test_cumulative_scan(cur):
    nki, nl, nisa = cur

    @nki.jit
    def cumsum(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        ones = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=ones, value=1.0)
        res = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        # r = (1 * r) + x[i], from r = 0
        nisa.tensor_tensor_scan(dst=res, data0=ones, data1=t, initial=0.0, op0=nl.multiply, op1=nl.add)
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=res)
        return out

    x = np.random.default_rng(14).integers(-50, 50, (128, 300)).astype(np.float32)
    np.testing.assert_array_equal(cumsum(x), np.cumsum(x, axis=1))  # integers: exact in fp32


# ---------------------------------------------------------------------------------------------
# paged KV cache: gather a sequence's blocks through its block table (indirect DMA)


def test_paged_kv_gather(cur):
    nki, nl, nisa = cur

    @nki.jit
    def gather_blocks(kv_cache, block_table):
        n_blocks, block, d = kv_cache.shape
        (n_used,) = block_table.shape
        out = nl.ndarray((n_used, block * d), dtype=kv_cache.dtype, buffer=nl.shared_hbm)
        ids = nl.ndarray((n_used, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ids, src=block_table.ap(pattern=[[1, n_used], [1, 1]]))  # one id per partition
        rows = kv_cache.reshape((n_blocks, block * d))
        t = nl.ndarray((n_used, block * d), dtype=kv_cache.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=rows[ids[:, 0:1], nl.arange(block * d)[None, :]])
        nisa.dma_copy(dst=out, src=t)
        return out

    r = np.random.default_rng(15)
    kv = _bf16(r, (64, 16, 32))
    table = r.permutation(64)[:24].astype(np.int32)
    got = gather_blocks(kv, table)
    np.testing.assert_array_equal(got, kv[table].reshape(24, 16 * 32))
    assert any("indirect" in i["op"].get("dma_copy", {}) for i in trnsim.nki.last_run().program["instructions"])


# ---------------------------------------------------------------------------------------------
# blocked by other branches


def test_mxfp8_matmul_with_quantize_mx_on_trn3(cur, monkeypatch):
    """C = A.T @ B over K = 1024 in MX-FP8 on trn3: each 512-row block of both bf16 operands is
    DMAed into the layout nc_matmul_mx reads (partition p, packed element j: rows 4p..4p+4 of
    column j, through an access pattern), quantized on VectorE and multiplied on TensorE, the
    blocks accumulating in PSUM. Reference (mx_reference.py): the NumPy OCP MX quantization of the
    same tiles, dequantized exactly; the bound is docs/numerics.md's for nc_matmul_mx."""
    import mx_reference as R

    nki, nl, nisa = cur
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")

    @nki.jit
    def mxfp8_matmul(a, b):
        k, m = a.shape
        n = b.shape[1]
        out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        for k0 in range(0, k, 512):
            q = []
            for x, f in ((a, m), (b, n)):
                t = nl.ndarray((128, f, 4), dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=x.ap(pattern=[[4 * f, 128], [1, f], [f, 4]], offset=k0 * f))
                xq = nl.ndarray((128, f), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
                xs = nl.ndarray((128, f), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
                nisa.quantize_mx(dst=xq, src=t, dst_scale=xs)
                q.append((xq, xs))
            # accumulate=None: the first block overwrites the PSUM tile, the next ones add
            nisa.nc_matmul_mx(
                dst=acc, stationary=q[0][0], moving=q[1][0], stationary_scale=q[0][1], moving_scale=q[1][1]
            )
        res = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out, src=res)
        return out

    r = np.random.default_rng(16)
    a, b = _bf16(r, (1024, 128)), _bf16(r, (1024, 512))
    got = _f64(mxfp8_matmul(a, b))
    assert trnsim.nki.last_run().program["target"] == "trn3"
    deq = []
    for x in (a, b):
        blocks = []
        for k0 in range(0, 1024, 512):
            tile = R.tile_of(x[k0 : k0 + 512].astype(np.float32))
            codes, scales = R.quantize(tile, "float8_e4m3fn")
            blocks.append(R.contraction(R.dequantize(codes, scales, "float8_e4m3fn")))
        deq.append(np.concatenate(blocks))
    err = np.abs(got - deq[0].T @ deq[1])
    # K = 1024: the two 512-row sums and the PSUM add stay within the bound of the whole sum
    assert (err <= R.matmul_bound(deq[0], deq[1])).all()


def test_double_row_fp8_matmul_on_trn2(cur):
    """TensorE's double-row FP8 mode: each nc_matmul contracts 256 rows, two per partition
    (stationary [128, 2, M], moving [128, 2, N]; row 2p + j of the operand in [p, j]), and PSUM
    accumulates the K / 256 passes. FP8 products are exact in fp32, so with small-integer inputs
    (every partial sum exact) the result is the exact dot product; with random fp8 inputs it is
    within the fp32 accumulation bound gamma_K * sum |a||b| of the float64 product."""
    nki, nl, nisa = cur

    @nki.jit
    def matmul_fp8(a_t, b):
        k, m = a_t.shape
        _, n = b.shape
        out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        for kt in nl.affine_range(k // 256):
            st = nl.ndarray((128, 2, m), dtype=a_t.dtype, buffer=nl.sbuf)
            mv = nl.ndarray((128, 2, n), dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=st, src=a_t[kt * 256 : (kt + 1) * 256, :])
            nisa.dma_copy(dst=mv, src=b[kt * 256 : (kt + 1) * 256, :])
            nisa.nc_matmul(dst=acc, stationary=st, moving=mv, perf_mode=nisa.matmul_perf_mode.double_row)
        res = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out, src=res)
        return out

    fp8 = ml_dtypes.float8_e4m3
    r = np.random.default_rng(19)
    a_i = r.integers(-2, 3, (512, 128)).astype(fp8)
    b_i = r.integers(-2, 3, (512, 384)).astype(fp8)
    np.testing.assert_array_equal(matmul_fp8(a_i, b_i), (_f64(a_i).T @ _f64(b_i)).astype(np.float32))
    prog = trnsim.nki.last_run().program
    assert prog["target"] == "trn2"
    mm = [i["op"]["nc_matmul"] for i in prog["instructions"] if "nc_matmul" in i["op"]]
    assert len(mm) == 2 and all(f.get("perf_mode") == "double_row" for f in mm)
    a, b = r.standard_normal((512, 128)).astype(fp8), r.standard_normal((512, 384)).astype(fp8)
    got = _f64(matmul_fp8(a, b))
    k, u = 512, 2.0**-24
    bound = k * u / (1 - k * u) * (np.abs(_f64(a)).T @ np.abs(_f64(b)))
    assert (np.abs(got - _f64(a).T @ _f64(b)) <= bound).all()


def test_double_row_is_refused_where_it_does_not_exist(cur, monkeypatch):
    nki, nl, nisa = cur

    def make(dtype_ok=True):
        @nki.jit
        def mm(a_t, b):
            out = nl.ndarray((a_t.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.ndarray((a_t.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
            st = nl.ndarray((128, 2, a_t.shape[1]), dtype=a_t.dtype, buffer=nl.sbuf)
            mv = nl.ndarray((128, 2, b.shape[1]), dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=st, src=a_t)
            nisa.dma_copy(dst=mv, src=b)
            nisa.nc_matmul(dst=acc, stationary=st, moving=mv, perf_mode=nisa.matmul_perf_mode.double_row)
            res = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out, src=res)
            return out

        return mm

    a8 = np.ones((256, 64), ml_dtypes.float8_e4m3)
    with pytest.raises(NkiError, match=r"double_row\) multiplies FP8 inputs only; stationary is bfloat16"):
        make()(a8.astype(BF16), a8.astype(BF16))
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    with pytest.raises(NkiError, match=r"double_row\) exists on NeuronCore-v3 and later"):
        make()(a8, a8)


def test_topk(cur):
    """Top-k per row the way NKI kernels did it before GpSimd's `topk` instruction (NKI 0.6,
    not in trnsim yet): rounds of VectorE `max8` (the 8 largest, descending), `nc_find_index8`
    (their positions) and `nc_match_replace8` (knock them out with -inf for the next round).
    Values and uint32 indices against NumPy's descending sort (distinct inputs: no ties)."""
    nki, nl, nisa = cur

    @nki.jit
    def topk(x, k):
        p, f = x.shape
        vals = nl.ndarray((p, k), dtype=x.dtype, buffer=nl.shared_hbm)
        idxs = nl.ndarray((p, k), dtype=nl.uint32, buffer=nl.shared_hbm)
        work = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=work, src=x)
        v = nl.ndarray((p, k), dtype=x.dtype, buffer=nl.sbuf)
        ix = nl.ndarray((p, k), dtype=nl.uint32, buffer=nl.sbuf)
        for r in range(k // 8):
            nisa.max8(dst=v[:, r * 8 : (r + 1) * 8], src=work)
            nisa.nc_find_index8(dst=ix[:, r * 8 : (r + 1) * 8], data=work, vals=v[:, r * 8 : (r + 1) * 8])
            nisa.nc_match_replace8(dst=work, data=work, vals=v[:, r * 8 : (r + 1) * 8], imm=float("-inf"))
        nisa.dma_copy(dst=vals, src=v)
        nisa.dma_copy(dst=idxs, src=ix)
        return vals, idxs

    r = np.random.default_rng(20)
    x = r.permutation(128 * 512).reshape(128, 512).astype(np.float32) / 7
    for k in (8, 24):
        got_v, got_i = topk(x, k)
        order = np.argsort(-x, axis=1)[:, :k]
        np.testing.assert_array_equal(got_i, order.astype(np.uint32))
        np.testing.assert_array_equal(got_v, np.take_along_axis(x, order, axis=1))


def test_lnc2_sendrecv_exchange(cur):
    """LNC=2, the two physical cores running concurrently: each core scales its block of rows,
    sends it to the other core with `sendrecv` and receives the other's, subtracts the two (core
    c computes y_c - y_other), then a second exchange (another pipe) gives each core the other's
    difference, and each stores both: out[c] = (y_c - y_o, y_o - y_c). Reference: NumPy in fp32
    (one rounding per multiply and subtract, as the engines do)."""
    nki, nl, nisa = cur

    @nki.jit
    def exchange(x):
        rows = x.shape[0] // 2
        out = nl.ndarray((2, 2, rows, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
        c = nl.program_id(0)
        other = 1 - c
        mine = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        theirs = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=mine, src=x[c * rows : (c + 1) * rows, :])
        nisa.tensor_scalar(dst=mine, data=mine, op0=nl.multiply, operand0=3.0)
        nisa.sendrecv(src=mine, dst=theirs, send_to_rank=other, recv_from_rank=other, pipe_id=0)
        diff = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=diff, data1=mine, data2=theirs, op=nl.subtract)
        got = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=diff, dst=got, send_to_rank=other, recv_from_rank=other, pipe_id=1)
        nisa.dma_copy(dst=out[c, 0], src=diff)
        nisa.dma_copy(dst=out[c, 1], src=got)
        return out

    r = np.random.default_rng(17)
    x = r.standard_normal((256, 64)).astype(np.float32)
    got = exchange[2](x)
    y = x * np.float32(3)
    d0, d1 = y[:128] - y[128:], y[128:] - y[:128]
    np.testing.assert_array_equal(got, np.stack([np.stack([d0, d1]), np.stack([d1, d0])]))
    prog = trnsim.nki.last_run().program
    assert {i.get("core", 0) for i in prog["instructions"]} == {0, 1}
    assert sum("core_barrier" in i["op"] for i in prog["instructions"]) == 4  # 2 exchanges x 2 cores


def test_lnc2_sendrecv_moves_each_cores_tile(cur):
    """What each core receives is exactly the other core's tile (bf16, no arithmetic), and a core
    may send to itself."""
    nki, nl, nisa = cur

    def make(to_self):
        @nki.jit
        def swap(x):
            rows = x.shape[0] // 2
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            c = nl.program_id(0)
            peer = c if to_self else 1 - c
            t = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
            u = nl.ndarray((rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[c * rows : (c + 1) * rows, :])
            nisa.sendrecv(t, u, peer, peer, 0)
            nisa.dma_copy(dst=out[c * rows : (c + 1) * rows, :], src=u)
            return out

        return swap

    r = np.random.default_rng(18)
    x = _bf16(r, (256, 96))
    np.testing.assert_array_equal(make(False)[2](x), np.concatenate([x[128:], x[:128]]))
    np.testing.assert_array_equal(make(True)[2](x), x)


def test_double_row_legacy_spelling_names_the_generation(cur):
    """The legacy API spells the mode with its generation (`perf_mode="double_row_gen3"` on trn2,
    NeuronCore-v3): that spelling runs where it names the target's generation and is refused
    elsewhere; the [K, 2, M] stationary may be a strided view of a wider tile."""
    import neuronxcc.nki as legacy
    import neuronxcc.nki.isa as lisa
    import neuronxcc.nki.language as lnl

    def make(mode):
        @legacy.jit(platform_target="trn2")
        def mm(a, b):
            out = lnl.ndarray([a.shape[2], b.shape[2]], dtype=lnl.float32, buffer=lnl.shared_hbm)
            wide = lnl.ndarray((128, 2, 16), dtype=a.dtype, buffer=lnl.sbuf)
            g = lnl.mgrid[0:128, 0:2, 0 : a.shape[2]]
            wide[g.p, g.x, g.y] = lnl.load(a)
            lnl.store(out, value=lisa.nc_matmul(wide[g.p, g.x, g.y], lnl.load(b), perf_mode=mode))
            return out

        return mm

    r = np.random.default_rng(21)
    a = r.integers(-2, 3, (128, 2, 3)).astype(ml_dtypes.float8_e5m2)
    b = r.integers(-2, 3, (128, 2, 40)).astype(ml_dtypes.float8_e5m2)
    want = np.einsum("kli,klj->ij", _f64(a), _f64(b)).astype(np.float32)
    np.testing.assert_array_equal(make("double_row_gen3")(a, b), want)
    np.testing.assert_array_equal(make("double_row")(a, b), want)
    with pytest.raises(NkiError, match=r"double_row_gen4'\) names another NeuronCore generation: .* NeuronCore-v3"):
        make("double_row_gen4")(a, b)
