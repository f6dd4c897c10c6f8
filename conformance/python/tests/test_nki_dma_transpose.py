"""The current API's `nisa.dma_transpose(dst, src, axes, priority, dge_mode, oob_mode)` (NKI 0.6)
against NumPy: each `nisa.dge_mode` from HBM and from SBUF, the hardware DGE's limits (NKI 0.6:
`src.shape[0]` in {1, 2, 4, 8, 16}, `src.shape[-1] <= 128`, a 2-byte dtype), the dst-rank rule
(NKI 0.4) and the refusal of an indirect source. Every transpose runs as one `dma_transpose`
instruction on the simulated DMA. Kernels are ours."""

import re
import sys

import ml_dtypes
import numpy as np
import pytest
import trnsim.nki
from trnsim.nki import NkiError

HERE = re.escape(__file__.rsplit("/", 1)[-1])
AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}
BF16 = ml_dtypes.bfloat16


@pytest.fixture
def cur(monkeypatch):
    """(nki, nki.language, nki.isa) of the current namespace on trn2, removed again afterwards."""
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    trnsim.nki.install(current=True)
    import nki
    import nki.isa as nisa
    import nki.language as nl

    yield nki, nl, nisa
    for name in ("nki", "nki.language", "nki.isa", "nki.typing"):
        sys.modules.pop(name, None)


def _kernel(nki, nl, nisa, from_sbuf, mode, dst_hbm=False, **kw):
    """x (HBM) transposed by one nisa.dma_transpose: from x itself or from an SBUF copy of it,
    into an SBUF tile (then stored) or straight into the HBM output."""

    @nki.jit
    def tr(x):
        shape = tuple(x.shape[a] for a in AXES[len(x.shape)])
        src = x
        if from_sbuf:
            src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=src, src=x)
        out = nl.ndarray(shape, dtype=x.dtype, buffer=nl.shared_hbm)
        if dst_hbm:
            nisa.dma_transpose(dst=out, src=src, dge_mode=mode, **kw)
        else:
            u = nl.ndarray(shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_transpose(u, src, dge_mode=mode, **kw)
            nisa.dma_copy(dst=out, src=u)
        return out

    return tr


def _transposes(program):
    return [i["op"]["dma_transpose"] for i in program["instructions"] if "dma_transpose" in i["op"]]


def _values(shape, dtype=BF16):
    # distinct small integers: exact in bf16 (below 256) and in every other dtype used here
    return (np.arange(int(np.prod(shape))) % 251).reshape(shape).astype(dtype)


@pytest.mark.parametrize("shape", [(4, 8), (16, 128), (2, 3, 4), (2, 1, 3, 4)])
@pytest.mark.parametrize("from_sbuf", [False, True], ids=["hbm", "sbuf"])
@pytest.mark.parametrize("mode", ["unknown", "hwdge", "none", "swdge"])
def test_each_dge_mode_from_hbm_and_from_sbuf_against_numpy(cur, mode, from_sbuf, shape):
    nki, nl, nisa = cur
    x = _values(shape)
    k = _kernel(nki, nl, nisa, from_sbuf, getattr(nisa.dge_mode, mode))
    if mode in ("none", "swdge"):
        # AWS: "The only valid dge_modes are unknown and hwdge" for a direct transpose
        with pytest.raises(NkiError, match=rf"{HERE}:\d+: .*dge_mode={mode}\): a direct transpose takes dge_mode "):
            k(x)
        return
    # every shape here is inside the HWDGE limits (first dim in {1, 2, 4, 8, 16}, last <= 128)
    np.testing.assert_array_equal(k(x), np.transpose(x, AXES[len(shape)]))
    (t,) = _transposes(trnsim.nki.last_run().program)
    assert t["dge_mode"] == mode
    assert ("hbm" in t["src"]["mem"]) == (not from_sbuf)
    assert len(t["src"]["free"]) == len(t["dst"]["free"]) == len(shape) - 1


def test_hwdge_is_neuroncore_v3_and_newer(cur, monkeypatch):
    nki, nl, nisa = cur
    x = _values((4, 8))
    for target in ("trn2", "trn3"):
        monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
        np.testing.assert_array_equal(_kernel(nki, nl, nisa, True, nisa.dge_mode.hwdge)(x), x.T)
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    for from_sbuf in (False, True):
        with pytest.raises(NkiError, match=r"hardware DGE is NeuronCore-v3 and newer; trn1 \(NeuronCore-v2\) has none"):
            _kernel(nki, nl, nisa, from_sbuf, nisa.dge_mode.hwdge)(x)
        # the compiler's choice transposes on trn1
        np.testing.assert_array_equal(_kernel(nki, nl, nisa, from_sbuf, nisa.dge_mode.unknown)(x), x.T)


@pytest.mark.parametrize("from_sbuf", [False, True], ids=["hbm", "sbuf"])
def test_hwdge_limits_of_nki_0_6(cur, from_sbuf):
    nki, nl, nisa = cur
    hw, auto = nisa.dge_mode.hwdge, nisa.dge_mode.unknown
    # src.shape[0] in {1, 2, 4, 8, 16}, with the largest last dim (128)
    for first in (1, 2, 4, 8, 16):
        x = _values((first, 128))
        np.testing.assert_array_equal(_kernel(nki, nl, nisa, from_sbuf, hw)(x), x.T)
    # outside the set: refused under hwdge, transposed under unknown
    for shape in ((3, 8), (32, 8), (5, 1, 2, 4)):
        x = _values(shape)
        with pytest.raises(NkiError, match=r"src\.shape\[0\] must be in \[1, 2, 4, 8, 16\] \(NKI 0\.6\), got "):
            _kernel(nki, nl, nisa, from_sbuf, hw)(x)
        np.testing.assert_array_equal(_kernel(nki, nl, nisa, from_sbuf, auto)(x), np.transpose(x, AXES[len(shape)]))
    # src.shape[-1] = 129 (into HBM: an SBUF dst cannot have 129 partitions)
    x = _values((4, 129))
    with pytest.raises(NkiError, match=r"src\.shape\[-1\] must be <= 128 \(NKI 0\.6\), got 129"):
        _kernel(nki, nl, nisa, from_sbuf, hw, dst_hbm=True)(x)
    np.testing.assert_array_equal(_kernel(nki, nl, nisa, from_sbuf, auto, dst_hbm=True)(x), x.T)
    # a 4-byte dtype
    x = _values((4, 8), np.float32)
    with pytest.raises(NkiError, match=r"src\.dtype must be 2 bytes, float32 is 4"):
        _kernel(nki, nl, nisa, from_sbuf, hw)(x)
    np.testing.assert_array_equal(_kernel(nki, nl, nisa, from_sbuf, auto)(x), x.T)


def test_dst_rank_and_shape_rules(cur):
    nki, nl, nisa = cur

    def kernel(dst_shape):
        @nki.jit
        def k(x):
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            u = nl.ndarray(dst_shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_transpose(dst=u, src=t)
            out = nl.ndarray(dst_shape, dtype=x.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=u)
            return out

        return k

    x = _values((4, 6))
    # same element count, another rank (NKI 0.4: dst's rank must be src's)
    with pytest.raises(
        NkiError, match=r"dst must have src's rank \(NKI 0\.4\): src \[4, 6\] is 2-D, dst \[6, 4, 1\] is 3-D"
    ):
        kernel((6, 4, 1))(x)
    with pytest.raises(NkiError, match=r"src \[4, 6\] transposed by \(1, 0\) is \[6, 4\], but dst is \[4, 6\]"):
        kernel((4, 6))(x)
    # a size-1 axis keeps its place: [4, 1, 6] -> [6, 1, 4]
    x3 = _values((4, 1, 6))
    np.testing.assert_array_equal(kernel((6, 1, 4))(x3), np.transpose(x3, (2, 1, 0)))


def test_an_indirect_source_is_refused_naming_the_rule(cur):
    nki, nl, nisa = cur

    @nki.jit
    def gather_transpose(x, idx):
        ix = nl.ndarray(idx.shape, dtype=idx.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ix, src=idx)
        u = nl.ndarray((x.shape[1], 16), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=u, src=x[ix[:, 0], :], dge_mode=nisa.dge_mode.swdge)
        return u

    x = _values((32, 8))
    idx = np.arange(16, dtype=np.uint32).reshape(16, 1)
    with pytest.raises(
        NkiError, match=rf"{HERE}:\d+: nisa\.dma_transpose: an indirect \(gathered\) source is not supported"
    ):
        gather_transpose(x, idx)


def test_other_arguments_are_checked_not_dropped(cur):
    nki, nl, nisa = cur
    x = _values((4, 8))
    with pytest.raises(NkiError, match=r"dma_transpose\(axes=\(0, 1\)\): a 2-D src is transposed with axes \(1, 0\)"):
        _kernel(nki, nl, nisa, True, nisa.dge_mode.unknown, axes=(0, 1))(x)
    np.testing.assert_array_equal(_kernel(nki, nl, nisa, True, nisa.dge_mode.unknown, axes=(1, 0))(x), x.T)
    with pytest.raises(NkiError, match=r"dma_transpose\(dge_mode=7\): not a nisa\.dge_mode"):
        _kernel(nki, nl, nisa, True, 7)(x)
    with pytest.raises(NkiError, match=r"priority is NeuronCore-v4 and newer only"):
        _kernel(nki, nl, nisa, True, nisa.dge_mode.unknown, priority=1)(x)

    @nki.jit
    def from_psum(x):
        p = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.psum)
        u = nl.ndarray((x.shape[1], x.shape[0]), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_transpose(dst=u, src=p)
        return u

    with pytest.raises(NkiError, match=r"src is in PSUM: DMA reads and writes only SBUF and HBM"):
        from_psum(x.astype(np.float32))
