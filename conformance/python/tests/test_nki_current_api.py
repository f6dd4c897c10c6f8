"""The current NKI (`import nki`) as a first-class API, and the silent behaviours of issue 23 made
right or refused: which generation a kernel runs on, `kernel[lnc]`, torch arguments, in-place
inputs, `dma_transpose` of an on-chip tile, `perf_mode`, `address=`, returned reshaped views and
returned on-chip tiles. Kernels are ours, in the style of AWS's NKI documentation."""

import re
import sys

import ml_dtypes
import numpy as np
import pytest
import trnsim.nki
from trnsim.nki import NkiError

HERE = re.escape(__file__.rsplit("/", 1)[-1])


@pytest.fixture
def cur():
    """(nki, nki.language, nki.isa) of the current namespace, removed again afterwards."""
    trnsim.nki.install(current=True)
    import nki
    import nki.isa as nisa
    import nki.language as nl

    yield nki, nl, nisa
    for name in ("nki", "nki.language", "nki.isa", "nki.typing", "nki.collectives"):
        sys.modules.pop(name, None)


def _copy_kernel(nki, nl, nisa):
    def copy(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=out, src=t)
        return out

    return copy


def test_a_tensors_buffer_is_the_nl_buffer_it_lives_in(cur):
    # `.buffer` compares equal to nl.sbuf / nl.psum / nl.hbm / nl.shared_hbm, so a kernel can
    # assert where its operands are (AWS's MX samples assert their arguments are in HBM)
    nki, nl, nisa = cur
    seen = {}

    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        p = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.psum)
        seen["x"] = x.buffer in (nl.hbm, nl.shared_hbm)
        seen["t"] = (t.buffer == nl.sbuf, t.buffer == nl.psum, t[0:2, :].buffer == nl.sbuf)
        seen["p"] = p.buffer == nl.psum
        seen["out"] = (out.buffer == nl.shared_hbm, out.buffer == nl.private_hbm)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    np.testing.assert_array_equal(nki.jit(k)(x), x)
    assert seen == {"x": True, "t": (True, False, True), "p": True, "out": (True, False)}
    assert repr(nl.sbuf) == "nl.sbuf"


def test_install_registers_nki_collectives(cur):
    import nki.collectives as ncc

    nki = cur[0]
    assert nki.collectives is ncc
    for name in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute", "rank_id"):
        assert callable(getattr(ncc, name)), name


def test_unsupported_indirection_and_collectives_say_so(cur):
    nki, nl, _ = cur
    import nki.collectives as ncc

    with pytest.raises(AttributeError, match="collective_permute_implicit is not supported by trnsim: the implicit"):
        ncc.collective_permute_implicit  # noqa: B018
    with pytest.raises(AttributeError, match="no_such_collective is not supported by trnsim"):
        ncc.no_such_collective  # noqa: B018

    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        x.indirect(0)  # ind-line
        return out

    with pytest.raises(
        NkiError, match=r"tensor\.indirect\(\.\.\.\) \(NeuronCore-v4 tensor indirection\) is not supported"
    ):
        nki.jit(k)(np.zeros((4, 4), np.float32))


def test_a_matmul_added_into_a_bf16_psum_accumulator():
    # `acc += nc_matmul(...)` into a bf16 PSUM tile: the matmul cannot accumulate into it in place
    # (fp32 PSUM only), so the add runs on VectorE with the product staged through SBUF (VectorE
    # reads one PSUM operand at most). 0/1 inputs keep every sum exact in bf16.
    trnsim.nki.install(current=False)
    import neuronxcc.nki.isa as nisa_l
    import neuronxcc.nki.language as nl_l
    from neuronxcc import nki as nki_l

    @nki_l.jit(platform_target="trn2")
    def k(a, b):
        out = nl_l.ndarray((128, 512), dtype=nl_l.float32, buffer=nl_l.shared_hbm)
        acc = nl_l.zeros((128, 512), dtype=nl_l.bfloat16, buffer=nl_l.psum)
        at, bt = nl_l.load(a), nl_l.load(b)
        acc[...] += nisa_l.nc_matmul(at, bt)
        acc[...] += nisa_l.nc_matmul(at, bt)
        nl_l.store(out, value=nl_l.copy(acc, dtype=nl_l.float32))
        return out

    r = np.random.default_rng(5)
    a = r.integers(0, 2, (128, 128)).astype(ml_dtypes.bfloat16)
    b = r.integers(0, 2, (128, 512)).astype(ml_dtypes.bfloat16)
    want = 2 * (a.astype(np.float32).T @ b.astype(np.float32))
    np.testing.assert_array_equal(k(a, b), want)


# ---------------------------------------------------------------------------------------------
# the generation


def test_current_api_defaults_to_trn2_and_the_env_override_selects(cur, monkeypatch):
    nki, nl, nisa = cur
    k = nki.jit(_copy_kernel(nki, nl, nisa))
    x = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    np.testing.assert_array_equal(k(x), x)
    assert trnsim.nki.last_run().program["target"] == "trn2"
    for spelling, sim in (("trn1", "trn1"), ("inf2", "trn1"), ("gen2", "trn1"), ("gen3", "trn2"), ("TRN2", "trn2")):
        monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", spelling)
        k(x)
        assert trnsim.nki.last_run().program["target"] == sim, spelling
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn9")
    with pytest.raises(NkiError, match="NEURON_PLATFORM_TARGET_OVERRIDE 'trn9' is not a NeuronCore generation"):
        k(x)


def test_current_jit_platform_target_is_an_error(cur):
    nki, nl, nisa = cur
    with pytest.raises(NkiError, match=r"platform_target=.*is an error in the current NKI.*NEURON_PLATFORM_TARGET"):
        nki.jit(platform_target="trn2")(_copy_kernel(nki, nl, nisa))


def test_legacy_platform_target_selects_and_no_name_falls_back_to_trn2(monkeypatch):
    import trnsim.nki.language as nl

    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)

    def copy(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))
        return out

    x = np.ones((128, 8), np.float32)
    trnsim.nki.jit(copy)(x)
    # trn2 by default, as the current API (NKI 0.3+ runs on Trn2/Trn3 only, docs/isa.md §3a).
    assert trnsim.nki.last_run().program["target"] == "trn2"
    trnsim.nki.jit(copy, platform_target="trn1")(x)
    assert trnsim.nki.last_run().program["target"] == "trn1"
    trnsim.nki.jit(copy, platform_target="gen3")(x)
    assert trnsim.nki.last_run().program["target"] == "trn2"
    with pytest.raises(NkiError, match=rf"{HERE}:\d+: platform_target= 'trn7' is not a NeuronCore generation"):
        trnsim.nki.jit(copy, platform_target="trn7")(x)
    # trn3 runs as trn3 once the simulator models it; until then it is refused, never run as trn1
    try:
        trnsim.nki.jit(copy, platform_target="trn3")(x)
        assert trnsim.nki.last_run().program["target"] == "trn3"
    except NkiError as e:
        assert "does not simulate that generation" in str(e)


# ---------------------------------------------------------------------------------------------
# kernel[lnc]


def _lnc_add(nki, nl, nisa):
    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        n_cores = nl.num_programs(0)
        rows = a.shape[0] // n_cores
        c = nl.program_id(0)
        for i in range(rows // 128):
            r0 = c * rows + i * 128
            ta = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
            tb = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=ta, src=a[r0 : r0 + 128, :])
            nisa.dma_copy(dst=tb, src=b[r0 : r0 + 128, :])
            nisa.tensor_tensor(dst=ta, data1=ta, data2=tb, op=nl.add)
            nisa.dma_copy(dst=out[r0 : r0 + 128, :], src=ta)
        return out

    return add


def test_lnc2_splits_the_work_between_two_cores(cur):
    nki, nl, nisa = cur
    add = _lnc_add(nki, nl, nisa)
    r = np.random.default_rng(1)
    a = r.standard_normal((512, 64)).astype(np.float32)
    b = r.standard_normal((512, 64)).astype(np.float32)
    np.testing.assert_array_equal(add[2](a, b), a + b)
    np.testing.assert_array_equal(add[1](a, b), a + b)
    np.testing.assert_array_equal(add(a, b), a + b)


def test_lnc_from_neuron_logical_nc_config(cur, monkeypatch):
    nki, nl, nisa = cur
    add = _lnc_add(nki, nl, nisa)
    a = np.ones((256, 8), np.float32)
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "2")
    np.testing.assert_array_equal(add(a, a), a + a)
    dma_dsts = [
        i["op"]["dma_copy"]["dst"]
        for i in trnsim.nki.last_run().program["instructions"]
        if "dma_copy" in i["op"] and "hbm" in i["op"]["dma_copy"]["dst"]["mem"]
    ]
    assert len(dma_dsts) == 2  # one 128-row store per core
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "4")
    with pytest.raises(NkiError, match="the LNC degree is 1 or 2"):
        add(a, a)


def test_lnc_bracket_is_not_an_spmd_grid(cur):
    nki, nl, nisa = cur
    add = _lnc_add(nki, nl, nisa)
    for bad in (3, 0, (2, 1), True):
        with pytest.raises(NkiError, match="LNC degree, 1 or 2"):
            add[bad]


def test_lnc2_cores_that_share_written_bytes_are_refused(cur):
    """The two cores run concurrently: two writes of the same bytes with no barrier between them
    are a race the simulator reports, naming both instructions and the tensor."""
    nki, nl, nisa = cur

    @nki.jit
    def both_write_everything(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=out, src=t)
        return out

    a = np.ones((128, 8), np.float32)
    np.testing.assert_array_equal(both_write_everything[1](a), a)
    with pytest.raises(trnsim.SimError, match=r"write-after-write race .* on HBM tensor `out`.*two physical cores"):
        both_write_everything[2](a)
    prog = trnsim.nki.last_run().program
    assert {i.get("core", 0) for i in prog["instructions"]} == {0, 1}


def test_lnc2_runs_as_two_cores_and_a_barrier_orders_their_exchange(cur):
    """Each core doubles its half of `x` into a shared tensor; after a core_barrier pair each reads
    the other core's half: out[c] = 2 x[1 - c]. The program is one two-core program (core 1's
    instructions carry `core: 1`), and without the barrier the simulator reports the race."""
    nki, nl, nisa = cur

    def make(barrier):
        @nki.jit
        def swap_halves(x):
            half = x.shape[0] // 2
            shared = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            c = nl.program_id(0)
            t = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[c * half : (c + 1) * half, :])
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
            nisa.dma_copy(dst=shared[c * half : (c + 1) * half, :], src=t)
            if barrier:
                nisa.core_barrier(shared, (0, 1))
            o = 1 - c
            u = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=u, src=shared[o * half : (o + 1) * half, :])
            nisa.dma_copy(dst=out[c * half : (c + 1) * half, :], src=u)
            return out

        return swap_halves

    x = np.arange(256 * 16, dtype=np.float32).reshape(256, 16)
    got = make(True)[2](x)
    np.testing.assert_array_equal(got, np.concatenate([2 * x[128:], 2 * x[:128]]))
    prog = trnsim.nki.last_run().program
    cores = [i.get("core", 0) for i in prog["instructions"]]
    assert cores.count(0) == cores.count(1) and "core_barrier" in str(prog)
    with pytest.raises(trnsim.SimError, match=r"reads memory nothing wrote: HBM tensor `shared`.*two physical cores"):
        make(False)[2](x)


def test_lnc2_barrier_and_sendrecv_errors(cur):
    nki, nl, nisa = cur
    a = np.ones((128, 8), np.float32)

    def kernel(body):
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
            u = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            body(nl, nisa, out, t, u)
            if nl.program_id(0) == 0:
                nisa.dma_copy(dst=out, src=t)
            return out

        return k

    with pytest.raises(NkiError, match=r"core_barrier synchronises the two physical cores .* runs on one core"):
        kernel(lambda nl, nisa, out, t, u: nisa.core_barrier(out, (0, 1)))[1](a)
    with pytest.raises(NkiError, match=r"sendrecv synchronises the two physical cores"):
        kernel(lambda nl, nisa, out, t, u: nisa.sendrecv(t, u, 1, 1, 0))(a)
    with pytest.raises(NkiError, match=r"only cores=\(0, 1\) exists"):
        kernel(lambda nl, nisa, out, t, u: nisa.core_barrier(out, (0, 2)))[2](a)
    with pytest.raises(NkiError, match=r"core_barrier runs on the GpSimd, Vector or Scalar engine, not"):
        kernel(lambda nl, nisa, out, t, u: nisa.core_barrier(out, (0, 1), engine=nisa.tensor_engine))[2](a)
    with pytest.raises(NkiError, match=r"data must be a tensor in shared HBM"):
        kernel(lambda nl, nisa, out, t, u: nisa.core_barrier(t, (0, 1)))[2](a)
    with pytest.raises(NkiError, match=r"core 0 reaches 1 barriers .* core 1 reaches 0"):
        kernel(lambda nl, nisa, out, t, u: nisa.core_barrier(out, (0, 1)) if nl.program_id(0) == 0 else None)[2](a)
    with pytest.raises(NkiError, match=r"send_to_rank is 0 or 1"):
        kernel(lambda nl, nisa, out, t, u: nisa.sendrecv(t, u, 2, 0, 0))[2](a)
    with pytest.raises(NkiError, match=r"src must be a tile in SBUF"):
        kernel(lambda nl, nisa, out, t, u: nisa.sendrecv(out, u, 1, 1, 0))[2](a)
    with pytest.raises(NkiError, match=r"sends to core 1, but core 1's sendrecv #0 receives from core 1"):
        # both cores send to core 1, and core 1 receives only from itself: core 0's tile is lost
        kernel(lambda nl, nisa, out, t, u: nisa.sendrecv(t, u, 1, nl.program_id(0), 0))[2](a)
    with pytest.raises(NkiError, match=r"multiple of 16 and each partition at most 1024 bytes"):
        kernel(
            lambda nl, nisa, out, t, u: nisa.sendrecv(
                t[:8], u[:8], 1 - nl.program_id(0), 1 - nl.program_id(0), 0, dma_engine="gpsimd_dma"
            )
        )[2](a)


# ---------------------------------------------------------------------------------------------
# frameworks and in-place inputs


def test_torch_tensors_in_torch_tensors_out_and_written_inputs_update_in_place(cur):
    torch = pytest.importorskip("torch")
    nki, nl, nisa = cur

    @nki.jit
    def scale_in_place(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=x, src=t)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = torch.arange(128 * 4, dtype=torch.bfloat16).reshape(128, 4)
    want = x.float() * 2
    got = scale_in_place(x)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
    assert torch.equal(got.float(), want)
    assert torch.equal(x.float(), want)  # the input, updated in place
    xn = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    got = nki.simulate(scale_in_place)(xn)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(xn, np.arange(128 * 4, dtype=np.float32).reshape(128, 4) * 2)


# ---------------------------------------------------------------------------------------------
# silent behaviours, now right or refused


def test_dma_transpose_of_an_sbuf_tile_transposes(cur):
    nki, nl, nisa = cur

    @nki.jit
    def tr(x):
        p, f = x.shape
        t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        u = nl.ndarray((f, p), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=u, src=t)
        out = nl.ndarray((f, p), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=u)
        return out

    x = np.arange(32 * 48, dtype=np.float32).reshape(32, 48).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(tr(x), x.T)
    ops = [next(iter(i["op"])) for i in trnsim.nki.last_run().program["instructions"]]
    assert "dma_transpose" in ops


def test_nc_matmul_perf_mode_is_refused_not_dropped(cur):
    """A perf_mode is never dropped: double_row on tiles without its [K, 2, M] layout, and any
    mode trnsim does not simulate, are errors at the call (double_row itself runs:
    test_nki_corpus_current.py)."""
    nki, nl, nisa = cur

    def make(mode, **tiling):
        @nki.jit
        def mm(a, b):
            sa = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
            sb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=sa, src=a)
            nisa.dma_copy(dst=sb, src=b)
            acc = nl.ndarray((a.shape[1], b.shape[1]), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(acc, sa, sb, perf_mode=mode, **tiling)
            return acc

        return mm

    a = np.ones((128, 64), ml_dtypes.float8_e4m3fn)
    with pytest.raises(NkiError, match=rf"{HERE}:\d+: nc_matmul\(perf_mode=double_row\): stationary is \[K, 2, M\]"):
        make("double_row")(a, a)
    with pytest.raises(NkiError, match=rf"{HERE}:\d+: nc_matmul\(perf_mode='quad'\): trnsim simulates"):
        make("quad")(a, a)
    with pytest.raises(NkiError, match=r"is_transpose=True, perf_mode='double_row'\): a transpose has no"):
        make("double_row", is_transpose=True)(a, a)
    with pytest.raises(NkiError, match=r"double_row\) with tile_position/tile_size: trnsim does not model"):
        make("double_row", tile_position=(0, 0), tile_size=(128, 128))(a, a)


def test_returned_reshaped_view_keeps_its_shape_and_reshape_takes_shape_kw():
    import trnsim.nki.language as nl

    def k(x):
        out = nl.ndarray((128, 12), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x.reshape(shape=(128, 12))))
        return out.reshape((128, 3, 4))

    x = np.arange(128 * 12, dtype=np.float32).reshape(128, 4, 3)
    got = trnsim.nki.jit(k)(x)
    assert got.shape == (128, 3, 4)
    np.testing.assert_array_equal(got, x.reshape(128, 3, 4))


def test_returning_an_sbuf_tile_names_the_line_and_what_aws_does(cur):
    nki, nl, nisa = cur

    @nki.jit
    def returns_tile(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        return t

    with pytest.raises(NkiError, match=rf"{HERE}:\d+: the kernel returns 't' .* in SBUF.*AWS's NumPy simulator"):
        returns_tile(np.ones((128, 4), np.float32))


# ---------------------------------------------------------------------------------------------
# access patterns as AWS defines them: tensor.ap(pattern=[[step, num], ...], offset=)


def test_ap_on_sbuf_and_hbm_follows_the_access_pattern_guide(cur):
    nki, nl, nisa = cur

    @nki.jit
    def right_half_and_transpose(x):
        t = nl.ndarray((16, 16), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        half = nl.ndarray((16, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=half, src=t.ap(pattern=[[16, 16], [1, 8]], offset=8))  # t[0:16, 8:16]
        out_half = nl.ndarray((16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out_half, src=half)
        tt = nl.ndarray((16, 16), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tt, src=x.ap(pattern=[[1, 16], [16, 16]], offset=0))  # HBM read column by column
        out_t = nl.ndarray((16, 16), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out_t, src=tt)
        return out_half, out_t

    x = np.arange(256, dtype=np.float32).reshape(16, 16)
    half, xt = right_half_and_transpose(x)
    np.testing.assert_array_equal(half, x[:, 8:16])
    np.testing.assert_array_equal(xt, x.T)


def test_ap_reinterprets_with_dtype_and_refuses_what_aws_forbids(cur):
    nki, nl, nisa = cur

    @nki.jit
    def as_halves(x):
        t = nl.ndarray((4, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        h = nl.ndarray((4, 16), dtype=nl.uint16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=h, src=t.ap(pattern=[[16, 4], [1, 16]], dtype=nl.uint16))
        out = nl.ndarray((4, 16), dtype=nl.uint16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=h)
        return out

    x = np.arange(32, dtype=np.uint32).reshape(4, 8) * 65537
    np.testing.assert_array_equal(as_halves(x), x.view(np.uint16))

    @nki.jit
    def every_other_partition(x):
        t = nl.ndarray((16, 32), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        return t.ap(pattern=[[64, 8], [1, 32]], offset=0)

    with pytest.raises(NkiError, match=rf"{HERE}:\d+: tensor.ap on .*its step must be the free size 32"):
        every_other_partition(np.ones((16, 32), np.float32))

    @nki.jit
    def nested(x):
        t = nl.ndarray((16, 32), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        return t[0:8, :].ap(pattern=[[32, 8], [1, 32]])

    with pytest.raises(NkiError, match="already indexed tensor"):
        nested(np.ones((16, 32), np.float32))


# ---------------------------------------------------------------------------------------------
# loops and namespaces


def test_python_range_the_deprecated_aliases_and_fori_loop_unroll_alike(cur):
    nki, nl, nisa = cur

    def make(loop):
        @nki.jit
        def colsum(x):
            acc = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=acc, value=0.0)
            t = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)

            def body(j):
                nisa.dma_copy(dst=t, src=x[:, j * 8 : (j + 1) * 8])
                part = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_reduce(dst=part, data=t, op=nl.add, axis=1)
                nisa.tensor_tensor(dst=acc, data1=acc, data2=part, op=nl.add)

            if loop == "fori":
                nl.fori_loop(0, x.shape[1] // 8, body)
            else:
                for j in getattr(nl, loop, range)(x.shape[1] // 8):
                    body(j)
            out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=acc)
            return out

        return colsum

    x = np.random.default_rng(2).integers(-8, 8, (128, 32)).astype(np.float32)
    for loop in ("range", "affine_range", "sequential_range", "static_range", "fori"):
        np.testing.assert_array_equal(make(loop)(x), x.sum(axis=1, keepdims=True), err_msg=loop)

    @nki.jit
    def register_loop(x):
        nl.while_loop(None, lambda r: r)

    with pytest.raises(NkiError, match="while_loop loops on a register condition"):
        register_loop(x)


def test_install_provides_both_namespaces():
    for name in ("nki", "nki.language", "nki.isa", "nki.typing", "nki.collectives"):
        sys.modules.pop(name, None)
    trnsim.nki.install()
    try:
        import neuronxcc.nki.language as legacy_nl
        import nki
        import nki.language as nl

        assert nki.jit is not trnsim.nki.jit and nl.fori_loop
        assert not hasattr(legacy_nl, "fori_loop")  # the legacy surface stays the legacy one
    finally:
        for name in ("nki", "nki.language", "nki.isa", "nki.typing"):
            sys.modules.pop(name, None)


def test_current_isa_takes_dst_first_positionally_and_has_no_dtype_or_mask(cur):
    nki, nl, nisa = cur

    @nki.jit
    def positional(x, y):
        a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(a, x)
        nisa.dma_copy(b, y)
        s = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(s, a, b, nl.subtract)  # dst, data1, data2, op
        nisa.tensor_scalar(s, s, nl.multiply, 3.0)
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(out, s)
        return out

    r = np.random.default_rng(3)
    x, y = (r.integers(-9, 9, (128, 16)).astype(np.float32) for _ in range(2))
    np.testing.assert_array_equal(positional(x, y), (x - y) * 3)

    def kernel_with(call):
        @nki.jit
        def k(x):
            a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=x)
            call(a)
            return a

        return k

    with pytest.raises(NkiError, match=r"nisa.tensor_copy\(dtype=...\): the current NKI has no dtype="):
        kernel_with(lambda a: nisa.tensor_copy(dst=a, src=a, dtype=nl.bfloat16))(x)
    with pytest.raises(NkiError, match=r"nisa.tensor_copy\(mask=...\)"):
        kernel_with(lambda a: nisa.tensor_copy(dst=a, src=a, mask=None))(x)
    with pytest.raises(NkiError, match="writes every result into dst="):
        kernel_with(lambda a: nisa.reciprocal(data=a))(x)
    with pytest.raises(NkiError, match="tensor_copy_dynamic_src: removed in NKI 0.4"):
        kernel_with(lambda a: nisa.tensor_copy_dynamic_src(a, a))(x)


def test_refusals_kept_on_purpose_say_what_aws_does_instead(cur):
    import trnsim

    nki, nl, nisa = cur

    @nki.jit
    def half_written(x):
        out = nl.ndarray((256, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=out[0:128, :], src=t)
        return out

    with pytest.raises(trnsim.SimError, match="output `out` was not fully written.*AWS's NKI simulator returns"):
        half_written(np.ones((128, 4), np.float32))

    @nki.jit
    def bad_rate(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dropout(dst=t, data=t, prob=1.5)
        return t

    with pytest.raises(NkiError, match=rf"{HERE}:\d+: nisa.dropout probability 1.5 is outside \[0, 1\]. AWS's"):
        bad_rate(np.ones((128, 4), np.float32))


def test_nc_n_gather_takes_flattened_free_elements(cur):
    nki, nl, nisa = cur

    @nki.jit
    def gather(x, idx):
        d = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=d, src=x)
        i = nl.ndarray(idx.shape, dtype=idx.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=i, src=idx)
        g = nl.ndarray(idx.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.nc_n_gather(g, d, i)
        out = nl.ndarray(idx.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=g)
        return out

    r = np.random.default_rng(4)
    x = r.standard_normal((16, 4, 8)).astype(np.float32)
    idx = r.integers(0, 32, (16, 10)).astype(np.uint32)
    np.testing.assert_array_equal(gather(x, idx), np.take_along_axis(x.reshape(16, 32), idx.astype(np.int64), 1))
    with pytest.raises(NkiError, match="indices are uint32"):
        gather(x, idx.astype(np.int32))


def test_torch_tensors_on_the_trnsim_device_come_back_there(cur):
    torch = pytest.importorskip("torch")
    import trnsim.torch

    trnsim.torch.register()
    nki, nl, nisa = cur

    @nki.jit
    def double(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    x = torch.arange(512, dtype=torch.float32).reshape(128, 4).to("trnsim")
    y = double(x)
    assert y.device.type == "trnsim"
    assert torch.equal(y.cpu(), x.cpu() * 2)


# ---------------------------------------------------------------------------------------------
# what AWS's current attention tutorial (v10) needs: nc_matmul(accumulate=), a PSUM tensor over
# several banks, nl.NKIObject, nl.no_reorder


def _mm_ops(prog):
    return [next(iter(i["op"].values())) for i in prog["instructions"] if "nc_matmul" in i["op"]]


def test_matmul_accumulate_false_overwrites_and_true_adds(cur):
    """`accumulate=False` starts a group (overwrites what PSUM holds), `True` adds to it; a second
    group into the same PSUM tile after a first one must not keep the first one's sum."""
    nki, nl, nisa = cur

    @nki.jit
    def two_groups(a, b, c):
        out = nl.ndarray((2, 128, 512), nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        for g, src in enumerate((a, c)):
            for kk in range(2):
                x = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
                y = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=x, src=src[kk * 128 : (kk + 1) * 128, :])
                nisa.dma_copy(dst=y, src=b[kk * 128 : (kk + 1) * 128, :])
                nisa.nc_matmul(dst=acc, stationary=x, moving=y, accumulate=kk != 0)
            s = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=s, src=acc)
            nisa.dma_copy(dst=out[g], src=s)
        return out

    r = np.random.default_rng(11)
    a, c = (r.standard_normal((256, 128)).astype(np.float32) for _ in range(2))
    b = r.standard_normal((256, 512)).astype(np.float32)
    got = nki.simulate(two_groups)(a, b, c)
    for g, src in enumerate((a, c)):
        np.testing.assert_allclose(got[g], src.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert [m.get("accumulate", False) for m in _mm_ops(trnsim.nki.last_run().program)] == [False, True] * 2


def test_matmul_accumulate_true_into_unwritten_psum_is_an_error(cur):
    nki, nl, nisa = cur

    @nki.jit
    def k(a):
        out = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
        x = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        acc = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=x, moving=x, accumulate=True)
        s = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=acc)
        nisa.dma_copy(dst=out, src=s)
        return out

    with pytest.raises(NkiError, match=r"accumulate=True\) into PSUM elements that nothing has written"):
        nki.simulate(k)(np.ones((128, 128), np.float32))


def _banked(nki, nl, nisa, *, width, step, address=None):
    """One PSUM tensor [128, width] fp32 (several banks when width > 512), each matmul writing the
    `step`-wide slice at column j*step."""

    @nki.jit
    def k(a, b):
        n = width // step
        out = nl.ndarray((128, width), nl.float32, buffer=nl.shared_hbm)
        x = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        y = nl.ndarray((128, width), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        nisa.dma_copy(dst=y, src=b)
        kw = {} if address is None else {"address": address}
        ps = nl.ndarray((128, width), nl.float32, buffer=nl.psum, **kw)
        for j in range(n):
            nisa.nc_matmul(dst=ps[:, nl.ds(j * step, step)], stationary=x, moving=y[:, nl.ds(j * step, step)])
        s = nl.ndarray((128, width), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=ps)
        nisa.dma_copy(dst=out, src=s)
        return out

    return k


@pytest.mark.parametrize("address", [None, (0, 2 * 2048)])
def test_a_psum_tensor_may_span_banks_when_each_matmul_stays_in_one(cur, address):
    nki, nl, nisa = cur
    r = np.random.default_rng(12)
    a = r.standard_normal((128, 128)).astype(np.float32)
    b = r.standard_normal((128, 3 * 512)).astype(np.float32)
    got = nki.simulate(_banked(nki, nl, nisa, width=3 * 512, step=512, address=address))(a, b)
    np.testing.assert_allclose(got, a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    offs = [m["dst"]["offset"] for m in _mm_ops(trnsim.nki.last_run().program)]
    base = offs[0]
    assert base % 2048 == 0 and offs == [base + j * 2048 for j in range(3)]
    if address is not None:
        assert base == 2 * 2048


def test_a_matmul_slice_across_a_psum_bank_is_refused(cur):
    nki, nl, nisa = cur
    r = np.random.default_rng(13)
    a = r.standard_normal((128, 128)).astype(np.float32)
    b = r.standard_normal((128, 3 * 384)).astype(np.float32)
    # the second 384-wide slice covers bytes 1536..3072 of each partition: across the first bank's end
    with pytest.raises(Exception, match="crosses a PSUM bank boundary"):
        nki.simulate(_banked(nki, nl, nisa, width=3 * 384, step=384))(a, b)


def test_the_legacy_api_keeps_one_bank_per_psum_block():
    import neuronxcc.nki.language as lnl
    from neuronxcc import nki as legacy_nki  # installed by the package's conftest

    @legacy_nki.jit
    def k(a):
        out = lnl.ndarray((128, 1024), lnl.float32, buffer=lnl.shared_hbm)
        t = lnl.ndarray((128, 1024), lnl.float32, buffer=lnl.psum)
        lnl.store(out, lnl.copy(t))
        return out

    with pytest.raises(NkiError, match="a PSUM tile cannot cross a bank"):
        legacy_nki.simulate_kernel(k, np.zeros((128, 4), np.float32))


def test_nkiobject_configuration_objects_and_no_reorder(cur):
    nki, nl, nisa = cur

    class Cfg(nl.NKIObject):
        scale = None

        def cols(self):
            return self.width // 2

    @nki.jit
    def k(a):
        cfg = Cfg(width=a.shape[1])
        cfg.scale = 3.0
        out = nl.ndarray((128, cfg.cols()), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, cfg.cols()), nl.float32, buffer=nl.sbuf)
        with nl.no_reorder():
            nisa.dma_copy(dst=t, src=a[:, 0 : cfg.cols()])
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=cfg.scale)
            nisa.dma_copy(dst=out, src=t)
        return out

    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    np.testing.assert_array_equal(nki.simulate(k)(a), a[:, :4] * 3)
    assert "width=8" in repr(Cfg(width=8))


def test_lnc2_parameter_written_in_place_by_both_cores(cur):
    """A parameter the kernel writes is filled from its input twin on core 0 first; a barrier
    pair orders that copy before core 1 touches it, so each core updates its half in place."""
    nki, nl, nisa = cur

    @nki.jit
    def double_in_place(x):
        c = nl.program_id(0)
        t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[c * 128 : (c + 1) * 128, :])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=x[c * 128 : (c + 1) * 128, :], src=t)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[c * 128 : (c + 1) * 128, :], src=t)
        return out

    x = np.arange(256 * 4, dtype=np.float32).reshape(256, 4)
    want = 2 * x
    np.testing.assert_array_equal(double_in_place[2](x), want)
    np.testing.assert_array_equal(x, want)
    ops = [(next(iter(i["op"])), i.get("core", 0)) for i in trnsim.nki.last_run().program["instructions"]]
    assert ops[:3] == [("dma_copy", 0), ("core_barrier", 0), ("core_barrier", 1)]
