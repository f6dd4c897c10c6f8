"""Legacy `neuronxcc.nki` forms that real kernels use (issue 23, item 2): sub-kernels of every
mode traced inline, `isa.constants`, `compiler.no_reorder`, `nl.finfo`, host-side
`nl.static_cast`. Kernels are ours."""

import ml_dtypes
import numpy as np
import pytest
import trnsim.nki

trnsim.nki.install()

import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc import nki
from neuronxcc.nki.isa.constants import oob_mode


@pytest.mark.parametrize("mode", ["trace", "auto", "simulation", "baremetal"])
def test_sub_kernels_of_every_mode_are_traced_inline(mode):
    @nki.jit(mode=mode)
    def doubled(t):
        return nl.multiply(t, 2.0)

    @nki.jit
    def outer(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        with ncc.no_reorder():
            nl.store(out, doubled(nl.load(x)))
        return out

    x = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    np.testing.assert_array_equal(outer(x), x * 2)
    # one program: the sub-kernel's multiply is in it, not a separate run
    ops = [next(iter(i["op"])) for i in trnsim.nki.last_run().program["instructions"]]
    assert "tensor_scalar" in ops and ops.count("dma_copy") == 2


def test_isa_constants_is_the_isa_enums():
    trnsim.nki.install()
    import nki.isa.constants as current_constants

    assert oob_mode is nisa.oob_mode and oob_mode.skip == nisa.oob_mode.skip
    assert current_constants.engine is nisa.engine


def test_finfo_and_host_static_cast():
    assert float(nl.finfo(nl.bfloat16).max) == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert float(nl.finfo(nl.float32).eps) == float(np.finfo(np.float32).eps)
    x = np.array([1.0, 1.00390625, -3.5], np.float32)
    y = nl.static_cast(x, nl.bfloat16)
    assert isinstance(y, np.ndarray) and y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y.astype(np.float32), x.astype(ml_dtypes.bfloat16).astype(np.float32))
    with pytest.raises(trnsim.nki.NkiError, match="floating dtype"):
        nl.finfo(nl.int32)


def test_column_view_operand_scalar_at_an_unaligned_partition_and_3d_partition_reduce():
    x = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)

    @nki.jit
    def col_operand(x):
        t = nl.load(x)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.tensor_scalar(t, np.add, t[:, 2]))  # one value per partition
        return out

    np.testing.assert_array_equal(col_operand(x), x + x[:, 2:3])

    @nki.jit
    def set_one(x):
        t = nl.load(x)
        t[5, 3] = -7.0  # partition 5: no engine may start there, so a DMA puts the value
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    want = x.copy()
    want[5, 3] = -7.0
    np.testing.assert_array_equal(set_one(x), want)

    @nki.jit
    def part_sum(x):
        t = nl.load(x.reshape((128, 2, 4)))
        r = nisa.tensor_partition_reduce(np.add, t)
        out = nl.ndarray((1, 2, 4), x.dtype, buffer=nl.shared_hbm)
        nl.store(out, r)
        return out

    np.testing.assert_array_equal(part_sum(x), x.reshape(128, 2, 4).sum(axis=0, keepdims=True))
