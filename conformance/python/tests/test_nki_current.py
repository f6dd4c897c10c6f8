"""The current `nki` namespace (NKI 0.2+, trn2), the partial stretch of issue 11: a kernel of ours
in the dst-first style of the current API runs on the trn2 target."""

import sys

import ml_dtypes
import numpy as np
import trnsim.nki


def test_current_namespace_dst_first_matmul_on_trn2():
    trnsim.nki.install(current=True)
    try:
        import nki
        import nki.isa as nisa
        import nki.language as nl

        @nki.jit
        def mm(lhs_t, rhs):
            k, m = lhs_t.shape
            _, n = rhs.shape
            result = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
            for kt in nl.affine_range(k // 128):
                a = nl.ndarray((128, m), dtype=lhs_t.dtype, buffer=nl.sbuf)
                b = nl.ndarray((128, n), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhs_t[kt * 128:(kt + 1) * 128, :])
                nisa.dma_copy(dst=b, src=rhs[kt * 128:(kt + 1) * 128, :])
                nisa.nc_matmul(acc, a, b)
            res = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=result, src=res)
            return result

        r = np.random.default_rng(0)
        a = r.standard_normal((256, 128)).astype(ml_dtypes.bfloat16)
        b = r.standard_normal((256, 512)).astype(ml_dtypes.bfloat16)
        got = nki.simulate(mm)(a, b)
        np.testing.assert_allclose(got, a.astype(np.float64).T @ b.astype(np.float64), rtol=1e-4, atol=1e-3)
        assert trnsim.nki.last_run().program["target"] == "trn2"

        @nki.jit
        def fill(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.memset(dst=t, value=2.0)
            nisa.dma_copy(dst=out, src=t)
            return out

        np.testing.assert_array_equal(fill(np.zeros((128, 8), np.float32)), np.full((128, 8), 2.0))
    finally:
        for name in ("nki", "nki.language", "nki.isa", "nki.typing"):
            sys.modules.pop(name, None)
