"""The current `nki` namespace (NKI 0.2+, trn2), the partial stretch of issue 11: a kernel of ours
in the dst-first style of the current API runs on the trn2 target."""

import sys

import ml_dtypes
import numpy as np
import pytest
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
                nisa.dma_copy(dst=a, src=lhs_t[kt * 128 : (kt + 1) * 128, :])
                nisa.dma_copy(dst=b, src=rhs[kt * 128 : (kt + 1) * 128, :])
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


@pytest.fixture
def current_nki():
    """`nki`, `nki.language`, `nki.isa` of the current namespace (removed again afterwards)."""
    trnsim.nki.install(current=True)
    try:
        import nki

        yield nki
    finally:
        for name in ("nki", "nki.language", "nki.isa", "nki.typing"):
            sys.modules.pop(name, None)


def _bits_kernel(nisa_cur, dtype):
    """A legacy (trn1) kernel that seeds VectorE's generator and writes raw random bits of `dtype`
    with the current namespace's `rng`, as trnconf's emitter writes them."""
    import neuronxcc.nki.language as nl
    from neuronxcc import nki as legacy

    @legacy.jit(platform_target="trn1")
    def k(seed):
        out = nl.ndarray((128, 48), dtype=dtype, buffer=nl.shared_hbm)
        s = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa_cur.dma_copy(dst=s, src=seed)
        nisa_cur.set_rng_seed(s)
        t = nl.ndarray((128, 48), dtype=dtype, buffer=nl.sbuf)
        nisa_cur.rng(dst=t, engine=nisa_cur.vector_engine)
        nisa_cur.dma_copy(dst=out, src=t)
        return out

    return k


def test_current_rng_writes_truncated_raw_bits_on_nc_v2(current_nki):
    import neuronxcc.nki.isa as legacy_isa
    import neuronxcc.nki.language as nl
    import nki.isa as nisa_cur

    # Legacy NKI has no raw-bit call; only the current namespace has rng / set_rng_seed.
    assert not hasattr(legacy_isa, "rng") and not hasattr(legacy_isa, "set_rng_seed")
    seed = np.array([[1234]], np.int32)
    w32 = _bits_kernel(nisa_cur, nl.uint32)(seed)
    prog = trnsim.nki.last_run().program
    assert prog["target"] == "trn1"
    assert [
        (i["engine"], next(iter(i["op"])))
        for i in prog["instructions"]
        if next(iter(i["op"])) in ("rng", "set_rng_seed")
    ] == [("vector", "set_rng_seed"), ("vector", "rng")]
    assert w32.dtype == np.uint32 and len(np.unique(w32)) > 128 * 48 - 8  # 32 random bits, no repeats to speak of
    assert np.array_equal(_bits_kernel(nisa_cur, nl.uint32)(seed), w32)  # same seed, same bits
    assert not np.array_equal(_bits_kernel(nisa_cur, nl.uint32)(seed + 1), w32)
    # Narrower dtypes keep the least significant bits of the same draws.
    for dt, np_dt in ((nl.uint8, np.uint8), (nl.int16, np.int16), (nl.int32, np.int32)):
        got = _bits_kernel(nisa_cur, dt)(seed)
        assert got.dtype == np_dt
        np.testing.assert_array_equal(got, w32.astype(np_dt))
    # nl.random_seed(imm) seeds as set_rng_seed(tile) does, and nl.rand draws from the same
    # generator: (bits >> 8) * 2^-24.
    from neuronxcc import nki as legacy

    @legacy.jit(platform_target="trn1")
    def uniform(seed):
        out = nl.ndarray((128, 48), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.random_seed(1234)
        nl.store(out, nl.rand((128, 48), dtype=nl.float32))
        return out

    np.testing.assert_array_equal(uniform(seed), (w32 >> 8).astype(np.float64) * 2.0**-24)


def test_current_rng_and_set_rng_seed_check_their_documented_constraints(current_nki):
    import neuronxcc.nki.language as nl
    import nki.isa as nisa_cur
    from neuronxcc import nki as legacy

    def run(body, target="trn1"):
        @legacy.jit(platform_target=target)
        def k(x):
            out = nl.ndarray((128, 8), dtype=nl.int32, buffer=nl.shared_hbm)
            t = body(x)
            nisa_cur.dma_copy(dst=out, src=t)
            return out

        return k(np.zeros((128, 8), np.int32))

    def rng_into(dtype, buffer=nl.sbuf, engine=None):
        def body(x):
            t = nl.ndarray((128, 8), dtype=dtype, buffer=buffer)
            nisa_cur.rng(dst=t, **({"engine": engine} if engine is not None else {}))
            if buffer is nl.psum:  # (DMA cannot read PSUM)
                s = nl.ndarray((128, 8), dtype=dtype, buffer=nl.sbuf)
                nisa_cur.tensor_copy(dst=s, src=t)
                return s
            return t

        return body

    run(rng_into(nl.int32, nl.psum))  # PSUM is allowed
    with pytest.raises(trnsim.nki.NkiError, match="integers"):
        run(rng_into(nl.float32))
    with pytest.raises(trnsim.nki.NkiError, match="SBUF or PSUM"):
        run(lambda x: nisa_cur.rng(dst=x) or x)
    with pytest.raises(trnsim.nki.NkiError, match="Vector engine only on NeuronCore-v2"):
        run(rng_into(nl.int32, engine=nisa_cur.gpsimd_engine))
    with pytest.raises(trnsim.nki.NkiError, match="not modelled"):
        run(rng_into(nl.int32, engine=nisa_cur.gpsimd_engine), target="trn2")

    def seeded(shape, dtype):
        def body(x):
            s = nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)
            nisa_cur.memset(dst=s, value=7)
            nisa_cur.set_rng_seed(s)
            return rng_into(nl.int32)(x)

        return body

    run(seeded((1, 1), nl.uint32))
    with pytest.raises(trnsim.nki.NkiError, match=r"\[1, 1\] tile"):
        run(seeded((1, 2), nl.int32))
    with pytest.raises(trnsim.nki.NkiError, match="32-bit integer"):
        run(seeded((1, 1), nl.int16))
