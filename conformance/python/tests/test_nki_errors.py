"""Each error class of issue 11 (3) on a kernel of ours: the message names the kernel's file:line.

Trace-time errors (what neuronxcc rejects at compile time) raise `trnsim.nki.NkiError`; errors the
simulator finds while running raise `trnsim.SimError`, whose `.loc` is the traced instruction's
kernel line. The expected line is found by a marker comment on it.
"""

import os

import numpy as np
import pytest
import trnsim
import trnsim.nki

trnsim.nki.install()

import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc import nki

HERE = os.path.basename(__file__)


def line_of(marker):
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if line.rstrip().endswith("# " + marker):
                return f"{HERE}:{i}"
    raise AssertionError(marker)


# -- capacity exceeded (trace time) -------------------------------------------------------------


@nki.jit(platform_target="trn1")
def too_many_live_tiles(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    keep = []
    for i in nl.static_range(64):
        keep.append(nl.load(a))  # sbuf-full
    for t in keep:  # every tile is read after the last load: all 64 are live at once
        nl.store(out, t)
    return out


def test_sbuf_capacity_exceeded_names_tile_and_line():
    a = np.zeros((128, 1024), np.float32)  # 4 KiB per partition per tile: 44 fit in 180224 B
    with pytest.raises(trnsim.nki.NkiError) as e:
        too_many_live_tiles(a)
    msg = str(e.value)
    assert msg.startswith(line_of("sbuf-full") + ": SBUF capacity exceeded")
    assert "180224" in msg and "live tiles" in msg
    assert e.value.loc == line_of("sbuf-full")


@nki.jit
def too_many_psum_tiles(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    accs = [nl.zeros((128, 512), nl.float32, buffer=nl.psum) for _ in range(9)]  # psum-full
    for t in accs:  # all nine are read after the last memset: 9 banks live at once
        nl.store(out, nl.copy(t))
    return out


def test_psum_capacity_exceeded():
    with pytest.raises(trnsim.nki.NkiError) as e:
        too_many_psum_tiles(np.zeros((128, 512), np.float32))
    assert str(e.value).startswith(line_of("psum-full") + ": PSUM capacity exceeded")


def test_tiles_are_freed_when_dead():
    """The same 64 loads succeed when each tile dies at the next iteration."""

    @nki.jit
    def reuse(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for _ in nl.static_range(64):
            t = nl.load(a)
        nl.store(out, t)
        return out

    a = np.arange(128 * 1024, dtype=np.float32).reshape(128, 1024)
    np.testing.assert_array_equal(reuse(a), a)


# -- matmul shape / PSUM bank -------------------------------------------------------------------


@nki.jit
def matmul_moving_too_wide(a, b):
    out = nl.ndarray((128, 1024), nl.float32, buffer=nl.shared_hbm)
    at, bt = nl.load(a), nl.load(b)
    res = nisa.nc_matmul(at, bt)  # mm-wide
    nl.store(out, nl.copy(res))
    return out


def test_matmul_result_wider_than_a_psum_bank():
    with pytest.raises(trnsim.nki.NkiError) as e:
        matmul_moving_too_wide(np.ones((128, 128), np.float32), np.ones((128, 1024), np.float32))
    assert str(e.value).startswith(line_of("mm-wide") + ": PSUM tile")


@nki.jit
def matmul_stationary_too_wide(a, b):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    at, bt = nl.load(a), nl.load(b)
    res = nisa.nc_matmul(at, bt)  # mm-m
    nl.store(out, nl.copy(res))
    return out


def test_matmul_stationary_wider_than_128():
    with pytest.raises(trnsim.nki.NkiError) as e:
        matmul_stationary_too_wide(np.ones((128, 256), np.float32), np.ones((128, 512), np.float32))
    assert str(e.value).startswith(line_of("mm-m") + ": tile shape [256, 512]")


@nki.jit
def psum_tile_across_banks(a):
    out = nl.ndarray((128, 1024), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 1024), nl.float32, buffer=nl.psum)  # bank
    nl.store(out, nl.copy(acc))
    return out


def test_psum_tile_larger_than_a_bank():
    with pytest.raises(trnsim.nki.NkiError) as e:
        psum_tile_across_banks(np.zeros((128, 128), np.float32))
    assert str(e.value).startswith(line_of("bank") + ": PSUM tile")
    assert "bank" in str(e.value)


@nki.jit
def matmul_contraction_mismatch(a, b):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    at, bt = nl.load(a), nl.load(b)
    res = nisa.nc_matmul(at[0:64, :], bt)  # mm-k
    nl.store(out, nl.copy(res))
    return out


def test_matmul_contraction_mismatch():
    with pytest.raises(trnsim.SimError) as e:
        matmul_contraction_mismatch(np.ones((128, 128), np.float32), np.ones((128, 512), np.float32))
    assert e.value.loc == line_of("mm-k")
    assert line_of("mm-k") in str(e.value)
    assert (e.value.kind, e.value.operand) == ("shape_mismatch", "moving")


# -- read of an uninitialised tile --------------------------------------------------------------


@nki.jit
def reads_unwritten_tile(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    y = nl.exp(t)  # uninit
    nl.store(out, y)
    return out


def test_read_of_uninitialised_tile():
    with pytest.raises(trnsim.nki.NkiError) as e:
        reads_unwritten_tile(np.zeros((128, 64), np.float32))
    assert str(e.value).startswith(line_of("uninit") + ": read of uninitialised memory")
    assert "'t'" in str(e.value)


@nki.jit
def stores_half_written_tile(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    t[0:64, :] = nl.load(a[0:64, :])
    nl.store(out, t)  # half
    return out


def test_store_of_partly_written_tile():
    with pytest.raises(trnsim.nki.NkiError) as e:
        stores_half_written_tile(np.zeros((128, 64), np.float32))
    assert str(e.value).startswith(line_of("half") + ": read of uninitialised memory")


# -- DMA index out of bounds --------------------------------------------------------------------


@nki.jit
def static_oob_load(a):
    out = nl.ndarray((128, 128), a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a[:, 400:528])  # oob
    nl.store(out, t)
    return out


def test_static_dma_index_out_of_bounds():
    with pytest.raises(trnsim.nki.NkiError) as e:
        static_oob_load(np.zeros((128, 512), np.float32))
    assert str(e.value).startswith(line_of("oob") + ": index out of bounds")


@nki.jit
def gather_rows(table, idx):
    out = nl.ndarray((idx.shape[0], table.shape[1]), table.dtype, buffer=nl.shared_hbm)
    i = nl.load(idx)
    rows = nl.load(table[i[:, 0:1], nl.arange(table.shape[1])[None, :]])  # dyn-oob
    nl.store(out, rows)
    return out


def test_dynamic_dma_index_out_of_bounds_is_a_sim_error():
    table = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    good = np.array([[3], [0], [15]], np.int32)
    np.testing.assert_array_equal(gather_rows(table, good), table[[3, 0, 15]])
    with pytest.raises(trnsim.SimError) as e:
        gather_rows(table, np.array([[3], [16], [1]], np.int32))
    assert e.value.loc == line_of("dyn-oob")
    assert (e.value.opcode, e.value.operand) == ("dma_copy", "index")


# -- start-partition rule -----------------------------------------------------------------------


@nki.jit
def bad_start_partition(a):
    out = nl.ndarray((32, 64), a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    y = nl.exp(t[16:48, :])  # start-part
    nl.store(out, y)
    return out


def test_start_partition_rule():
    with pytest.raises(trnsim.SimError) as e:
        bad_start_partition(np.zeros((128, 64), np.float32))
    assert e.value.loc == line_of("start-part")
    assert e.value.kind == "start_partition"


# -- dtype not allowed on an engine -------------------------------------------------------------


@nki.jit
def int_matmul(a, b):
    out = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
    res = nisa.nc_matmul(nl.load(a), nl.load(b))  # int-pe
    nl.store(out, nl.copy(res))
    return out


def test_dtype_not_allowed_on_tensor_engine():
    a = np.ones((128, 128), np.int32)
    with pytest.raises(trnsim.SimError) as e:
        int_matmul(a, a)
    assert e.value.loc == line_of("int-pe")
    assert (e.value.kind, e.value.engine, e.value.operand) == ("unsupported_dtype", "tensor", "stationary")


@nki.jit
def bitwise_on_floats(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    y = nl.bitwise_and(t, t)  # bits-float
    nl.store(out, y)
    return out


def test_bitvec_on_float_dtype():
    with pytest.raises(trnsim.SimError) as e:
        bitwise_on_floats(np.ones((128, 8), np.float32))
    assert e.value.loc == line_of("bits-float")
    assert (e.value.kind, e.value.engine) == ("unsupported_dtype", "vector")


# -- what SimError carries ----------------------------------------------------------------------


def test_sim_error_carries_index_engine_operand_and_loc():
    with pytest.raises(trnsim.SimError) as e:
        bad_start_partition(np.zeros((128, 64), np.float32))
    err = e.value
    assert err.loc == line_of("start-part")
    assert isinstance(err.index, int)
    assert err.engine == "scalar"
    assert err.opcode == "activation"
    assert err.operand == "src"
    assert err.kind == "start_partition"
    assert f"{err.loc}" in str(err)
    run = trnsim.nki.last_run()
    assert run is None or run.program["instructions"][err.index]["loc"] == err.loc


def test_trace_errors_outside_a_kernel():
    with pytest.raises(trnsim.nki.NkiError):
        nl.load(None)
