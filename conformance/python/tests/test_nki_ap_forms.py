"""AWS's access-pattern forms in the current NKI (`import nki`): `nisa.iota` and
`nisa.affine_select` with `pattern=[[step, num], ...]`, `offset=`, `channel_multiplier=` (and
`cmp_op=`), and `tensor.ap(..., vector_offset=, indirect_dim=)` as the indirect side of
`nisa.dma_copy`. Every kernel runs on the simulated engines; each result is checked against the
documented formula computed in NumPy. Kernels are ours, in the style of AWS's NKI documentation."""

import sys

import numpy as np
import pytest
import trnsim.nki
from trnsim.nki import NkiError


@pytest.fixture
def cur():
    """(nki, nki.language, nki.isa) of the current namespace, removed again afterwards."""
    trnsim.nki.install(current=True)
    import nki
    import nki.isa as nisa
    import nki.language as nl

    yield nki, nl, nisa
    for name in ("nki", "nki.language", "nki.isa", "nki.typing"):
        sys.modules.pop(name, None)


def affine(partitions, pattern, offset, channel_multiplier):
    """AWS's pseudo code: offset + c*channel_multiplier + sum(step*i) over the nested pattern
    loops, in wrapping int32; shape [partitions, num0, num1, ...]."""
    v = np.full((partitions,) + tuple(n for _, n in pattern), offset, dtype=np.int64)
    c = np.arange(partitions, dtype=np.int64).reshape((-1,) + (1,) * len(pattern))
    v = v + c * channel_multiplier
    for k, (step, num) in enumerate(pattern):
        shape = [1] * (len(pattern) + 1)
        shape[k + 1] = num
        v = v + step * np.arange(num, dtype=np.int64).reshape(shape)
    return ((v + 2**31) % 2**32 - 2**31).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# nisa.iota(dst, pattern, offset, channel_multiplier=0)


@pytest.mark.parametrize(
    "shape, pattern, offset, cm, dtype",
    [
        ((128, 64), [[1, 64]], 0, 0, "int32"),
        ((16, 4, 8), [[8, 4], [1, 8]], 5, 32, "int32"),
        ((32, 24), [[-3, 2], [7, 3], [1, 4]], -100, -7, "int32"),  # dst [32, 24], a 3-D pattern
        ((8, 16), [[1, 16]], 2**31 - 8, 1, "int32"),  # wraps past int32's end, as the engine does
        ((64, 32), [[1, 32]], 0, 32, "float32"),
        ((4, 6), [[1, 6]], 250, 3, "uint8"),  # saturates to the dtype's range
    ],
)
def test_iota_pattern_form_matches_the_documented_formula(cur, shape, pattern, offset, cm, dtype):
    nki, nl, nisa = cur

    @nki.jit
    def k():
        t = nl.ndarray(shape, dtype=getattr(nl, dtype), buffer=nl.sbuf)
        nisa.iota(t, pattern, offset, channel_multiplier=cm)
        out = nl.ndarray(shape, dtype=t.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    want = affine(shape[0], pattern, offset, cm).reshape(shape)
    if dtype == "float32":
        want = want.astype(np.float32)
    elif dtype == "uint8":
        want = np.clip(want, 0, 255).astype(np.uint8)
    got = k()
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want.astype(dtype))
    ins = [i["op"] for i in trnsim.nki.last_run().program["instructions"]]
    assert any("iota" in op for op in ins)


def test_iota_by_keyword_and_its_refusals(cur):
    nki, nl, nisa = cur

    def kernel(call, buffer="sbuf", shape=(16, 8)):
        @nki.jit
        def k():
            t = nl.ndarray(shape, dtype=nl.int32, buffer=getattr(nl, buffer))
            call(t)
            out = nl.ndarray(shape, dtype=nl.int32, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=t)
            return out

        return k

    got = kernel(lambda t: nisa.iota(dst=t, pattern=[[2, 8]], offset=1, channel_multiplier=100))()
    np.testing.assert_array_equal(got, affine(16, [[2, 8]], 1, 100))
    with pytest.raises(NkiError, match="has 6 elements per partition, dst \\[16, 8\\] has 8"):
        kernel(lambda t: nisa.iota(t, [[1, 6]], 0))()
    with pytest.raises(NkiError, match="dst must be a tile in SBUF"):
        kernel(lambda t: nisa.iota(t, [[1, 8]], 0), buffer="psum")()
    with pytest.raises(NkiError, match="each entry is a \\[step, num\\] pair"):
        kernel(lambda t: nisa.iota(t, [1, 8], 0))()
    with pytest.raises(NkiError, match="offset=4294967296\\): does not fit in int32"):
        kernel(lambda t: nisa.iota(t, [[1, 8]], 2**32))()
    with pytest.raises(NkiError, match="at most 4"):
        kernel(lambda t: nisa.iota(t, [[1, 1]] * 4 + [[1, 8]], 0))()


# ---------------------------------------------------------------------------------------------
# nisa.affine_select(dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value, cmp_op)

_CMPS = {
    None: np.equal,  # the documented default
    "equal": np.equal,
    "not_equal": np.not_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "less": np.less,
    "less_equal": np.less_equal,
}


@pytest.mark.parametrize("cmp", list(_CMPS))
def test_affine_select_every_comparison(cur, cmp):
    nki, nl, nisa = cur
    pattern, offset, cm = [[-1, 4], [-3, 16]], 20, 2  # v = 20 + 2c - i - 3j crosses 0 in every row

    @nki.jit
    def k(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        kw = {} if cmp is None else {"cmp_op": getattr(nl, cmp)}
        nisa.affine_select(r, pattern, offset, cm, t, -9999.0, **kw)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=r)
        return out

    x = np.random.default_rng(4).standard_normal((32, 64)).astype(np.float32)
    v = affine(32, pattern, offset, cm).reshape(32, 64)
    want = np.where(_CMPS[cmp](v, 0), x, np.float32(-9999.0))
    got = k(x)
    np.testing.assert_array_equal(got, want)
    assert 0 < int((got == -9999.0).sum()) < x.size  # both branches are taken


def test_affine_select_causal_mask_bf16_and_the_int32_ends(cur):
    """The attention tutorial's use: keep key j <= query p (p - j >= 0), on bf16 scores; and
    `less` stays exact where v is -2**31 (its rewrite ~v >= 0 is exact in int32)."""
    nki, nl, nisa = cur

    def kernel(pattern, offset, cm, cmp, fill):
        @nki.jit
        def k(x):
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            nisa.affine_select(
                dst=t,
                pattern=pattern,
                offset=offset,
                channel_multiplier=cm,
                on_true_tile=t,
                on_false_value=fill,
                cmp_op=cmp,
            )
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=t)
            return out

        return k

    import ml_dtypes

    nl = cur[1]
    x = np.random.default_rng(5).standard_normal((128, 128)).astype(ml_dtypes.bfloat16)
    got = kernel([[-1, 128]], 0, 1, nl.greater_equal, -30000.0)(x)
    want = np.where(np.tril(np.ones((128, 128), bool)), x, ml_dtypes.bfloat16(-30000.0))
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))

    y = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    got = kernel([[1, 8]], -(2**31), 0, nl.less, -1.0)(y)  # v = -2**31 + i: all < 0
    np.testing.assert_array_equal(got, y)
    got = kernel([[1, 8]], 2**31 - 8, 0, nl.less, -1.0)(y)  # v = 2**31 - 8 + i: none < 0
    np.testing.assert_array_equal(got, np.full_like(y, -1.0))
    with pytest.raises(NkiError, match="less_equal.*int32 range's ends"):
        kernel([[1, 8]], -(2**31), 0, nl.less_equal, -1.0)(y)
    with pytest.raises(NkiError, match="cmp_op=add"):
        kernel([[1, 8]], 0, 0, nl.add, -1.0)(y)
    with pytest.raises(NkiError, match="on_true_tile \\[16, 4\\] and dst \\[16, 8\\] differ"):

        @nki.jit
        def mismatch(x):
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            cur[2].affine_select(t, [[1, 8]], 0, 0, t[:, 0:4], 0.0)
            return x

        mismatch(y)


# ---------------------------------------------------------------------------------------------
# tensor.ap(pattern, offset, vector_offset=, indirect_dim=): indirect DMA


def _load_ids(nl, nisa, ids_hbm):
    ids = nl.ndarray(ids_hbm.shape, dtype=ids_hbm.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=ids_hbm)
    return ids


def test_ap_vector_offset_gathers_rows(cur):
    """A token gather as AWS's MoE kernels write it: rows idx[k] of a [N, H] tensor, a column
    window from `offset`."""
    nki, nl, nisa = cur

    @nki.jit
    def gather(data, idx):
        _, h = data.shape
        k = idx.shape[0]
        ids = _load_ids(nl, nisa, idx)
        t = nl.ndarray((k, 48), dtype=data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=data.ap(pattern=[[h, k], [1, 48]], offset=16, vector_offset=ids, indirect_dim=0))
        out = nl.ndarray((k, 48), dtype=data.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    r = np.random.default_rng(6)
    data = r.standard_normal((200, 96)).astype(np.float32)
    idx = r.permutation(200)[:100].astype(np.int32).reshape(100, 1)
    np.testing.assert_array_equal(gather(data, idx), data[idx[:, 0], 16:64])
    ops = [i["op"] for i in trnsim.nki.last_run().program["instructions"]]
    assert sum("indirect" in op.get("dma_copy", {}) for op in ops) == 1


def test_ap_vector_offset_on_a_middle_dimension_and_as_a_scatter(cur):
    """indirect_dim=1 of a [B, N, D] tensor (one position = D elements), and the indirect side as
    the destination (a scatter into an in/out cache, updated in place)."""
    nki, nl, nisa = cur

    @nki.jit
    def gather_mid(data, idx):
        _, n, d = data.shape
        k = idx.shape[0]
        ids = _load_ids(nl, nisa, idx)
        t = nl.ndarray((k, d), dtype=data.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=data.ap(pattern=[[d, k], [1, d]], offset=2 * n * d, vector_offset=ids, indirect_dim=1))
        out = nl.ndarray((k, d), dtype=data.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    r = np.random.default_rng(7)
    data = r.standard_normal((3, 40, 12)).astype(np.float32)
    idx = r.integers(0, 40, (24, 1)).astype(np.int32)
    np.testing.assert_array_equal(gather_mid(data, idx), data[2, idx[:, 0], :])

    @nki.jit
    def scatter(cache, rows, idx):
        _, d = cache.shape
        k = idx.shape[0]
        ids = _load_ids(nl, nisa, idx)
        t = nl.ndarray((k, d), dtype=rows.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=rows)
        nisa.dma_copy(dst=cache.ap(pattern=[[d, k], [1, d]], vector_offset=ids, indirect_dim=0), src=t)
        out = nl.ndarray(cache.shape, dtype=cache.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=cache)
        return out

    cache = r.standard_normal((64, 20)).astype(np.float32)
    rows = r.standard_normal((16, 20)).astype(np.float32)
    idx = r.permutation(64)[:16].astype(np.int32).reshape(16, 1)
    want = cache.copy()
    want[idx[:, 0]] = rows
    np.testing.assert_array_equal(nki.simulate(scatter)(cache, rows, idx), want)
    np.testing.assert_array_equal(cache, want)  # the input, updated in place


def test_ap_vector_offset_skips_out_of_range_rows_with_oob_skip(cur):
    nki, nl, nisa = cur

    @nki.jit
    def gather(data, idx):
        _, h = data.shape
        k = idx.shape[0]
        ids = _load_ids(nl, nisa, idx)
        t = nl.ndarray((k, h), dtype=data.dtype, buffer=nl.sbuf)
        nisa.memset(dst=t, value=-1.0)
        nisa.dma_copy(
            dst=t,
            src=data.ap(pattern=[[h, k], [1, h]], vector_offset=ids, indirect_dim=0),
            oob_mode=nisa.oob_mode.skip,
        )
        out = nl.ndarray((k, h), dtype=data.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    data = np.arange(10 * 8, dtype=np.float32).reshape(10, 8)
    idx = np.array([[3], [10], [0], [-1], [9]], dtype=np.int32)
    want = np.full((5, 8), -1.0, np.float32)
    for k, i in enumerate(idx[:, 0]):
        if 0 <= i < 10:
            want[k] = data[i]
    np.testing.assert_array_equal(gather(data, idx), want)


def test_ap_indirect_refusals(cur):
    nki, nl, nisa = cur

    def kernel(make_src, idx_dtype=np.int32):
        @nki.jit
        def k(data, idx):
            ids = _load_ids(nl, nisa, idx)
            t = nl.ndarray((4, 8), dtype=data.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=make_src(data, ids, t))
            return data

        return lambda: k(np.zeros((16, 8), np.float32), np.zeros((4, 1), idx_dtype))

    with pytest.raises(NkiError, match="its step is one position of dimension 0 \\(8 elements\\), got 16"):
        kernel(lambda d, ids, t: d.ap(pattern=[[16, 4], [1, 8]], vector_offset=ids))()
    with pytest.raises(NkiError, match="the index tile is \\[2, 1\\]"):
        kernel(lambda d, ids, t: d.ap(pattern=[[8, 2], [1, 8]], vector_offset=ids))()
    with pytest.raises(NkiError, match="scalar_offset=\\) .*not supported by trnsim yet"):
        kernel(lambda d, ids, t: d.ap(pattern=[[8, 4], [1, 8]], scalar_offset=ids))()
    with pytest.raises(NkiError, match="tensor indirection, NeuronCore-v4"):
        kernel(lambda d, ids, t: t.ap(pattern=[[8, 4], [1, 8]], vector_offset=ids))()
    with pytest.raises(NkiError, match="integer indices, not float32"):
        kernel(lambda d, ids, t: d.ap(pattern=[[8, 4], [1, 8]], vector_offset=ids), np.float32)()
    with pytest.raises(NkiError, match="indirect_dim=2\\) of a tensor of rank 2"):
        kernel(lambda d, ids, t: d.ap(pattern=[[8, 4], [1, 8]], vector_offset=ids, indirect_dim=2))()


# ---------------------------------------------------------------------------------------------
# nisa.dma_compute(dst, srcs=[dst, x], reduce_op=nl.add): the accumulating DMA of the current API


def test_dma_compute_read_modify_write_direct_and_scatter(cur):
    nki, nl, nisa = cur

    @nki.jit
    def accumulate(a, b, rows, idx):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ta = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        tb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ta, src=a)
        nisa.dma_copy(dst=tb, src=b)
        nisa.dma_copy(dst=out, src=ta)
        nisa.dma_compute(dst=out, srcs=[out, tb], reduce_op=nl.add)  # out = a + b
        _, d = a.shape
        k = idx.shape[0]
        ids = _load_ids(nl, nisa, idx)
        tr = nl.ndarray((k, d), dtype=rows.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tr, src=rows)
        side = out.ap(pattern=[[d, k], [1, d]], vector_offset=ids, indirect_dim=0)
        nisa.dma_compute(dst=side, srcs=[tr, side], reduce_op=nl.add, scales=[1.0, 1.0])  # out[idx] += rows
        return out

    r = np.random.default_rng(8)
    a, b = (r.integers(-50, 50, (32, 16)).astype(np.float32) for _ in range(2))
    rows = r.integers(-50, 50, (12, 16)).astype(np.float32)
    idx = r.integers(0, 32, (12, 1)).astype(np.int32)  # repeats add up
    want = a + b
    np.add.at(want, idx[:, 0], rows)
    np.testing.assert_array_equal(accumulate(a, b, rows, idx), want)
    ops = [i["op"].get("dma_copy", {}) for i in trnsim.nki.last_run().program["instructions"]]
    assert sum(bool(op.get("accumulate")) for op in ops) == 2

    @nki.jit
    def other_sources(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        nisa.dma_compute(dst=out, srcs=[t, t], reduce_op=nl.add)
        return out

    with pytest.raises(NkiError, match="read-modify-write form, srcs=\\[dst, x\\]"):
        other_sources(a)

    @nki.jit
    def scaled(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        nisa.dma_compute(dst=out, srcs=[out, t], reduce_op=nl.add, scales=[1.0, 2.0])
        return out

    with pytest.raises(NkiError, match="every scale is 1.0"):
        scaled(a)
