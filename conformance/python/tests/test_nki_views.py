"""Tensor views and index forms on the trnsim NKI front-end: 0-d tensors, `tensor.view` to a dtype
of another size, `reshape` of a view, index expressions of rank 3 and 4, and a DMA indexed by an
expression of an index tile. Each kernel is our own; results are checked against NumPy exactly
(the kernels only move bits or do exact integer / fp32 arithmetic)."""

import numpy as np
import trnsim
import trnsim.nki

trnsim.nki.install()

import neuronxcc.nki.language as nl
from neuronxcc import nki

R = np.random.default_rng(5)


def test_zero_dim_input_and_output():
    """A 0-d array goes in and comes out 0-d (the bindings used to ship it as shape [1])."""

    @nki.jit
    def scale(x):
        out = nl.ndarray((), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x.reshape((1, 1)))
        nl.store(out.reshape((1, 1)), value=nl.multiply(t, 3.0))
        return out

    x = np.array(1.5, np.float32)
    y = scale(x)
    assert y.shape == ()
    assert y == np.float32(4.5)
    # the bindings on their own: a 0-d input and output of trnsim.run
    kr = trnsim.nki.last_run()
    prog = trnsim.Program.from_json(kr.program_json())
    prog.infer_waits()
    res = trnsim.run(prog, {"x": x})
    (out,) = [h["name"] for h in kr.program["hbm"] if h["role"] == "output"]
    assert res.outputs[out].shape == () and res.outputs[out] == np.float32(4.5)


def test_isa_operands_pair_elements_in_order():
    """nki.isa instructions pair their operands' elements in order: same partitions and elements
    per partition, any shapes (a [P, 12] tile against a strided [P, 4, 3] view of another)."""
    a = R.standard_normal((8, 24)).astype(np.float32)
    b = R.standard_normal((8, 12)).astype(np.float32)

    @nki.jit
    def k(a, b):
        out = nl.ndarray((8, 12), dtype=nl.float32, buffer=nl.shared_hbm)
        ta, tb = nl.load(a), nl.load(b)
        res = nl.ndarray((8, 12), dtype=nl.float32, buffer=nl.sbuf)
        i_p = nl.arange(8)[:, None, None]
        # every other group of 3 of a's 24 columns: [8, 4, 3], steps 6 and 1 (not a [8, 12] view)
        strided = ta[i_p, 6 * nl.arange(4)[None, :, None] + nl.arange(3)[None, None, :]]
        res[0:8, 0:12] = nisa.tensor_tensor(strided, tb, op=nl.subtract)
        nl.store(out, res)
        return out

    import neuronxcc.nki.isa as nisa

    ref = a.reshape(8, 4, 6)[:, :, :3].reshape(8, 12) - b
    np.testing.assert_array_equal(k(a, b), ref)


def test_tensor_scalar_column_over_a_3d_tile():
    """A [P, 1] operand0 is one scalar per partition whatever the data's rank."""
    import neuronxcc.nki.isa as nisa

    x = R.standard_normal((6, 20)).astype(np.float32)
    s = R.standard_normal((6, 1)).astype(np.float32)

    @nki.jit
    def k(x, s):
        out = nl.ndarray((6, 4, 5), dtype=nl.float32, buffer=nl.shared_hbm)
        tx, ts = nl.load(x), nl.load(s)
        v = tx[nl.arange(6)[:, None, None], 5 * nl.arange(4)[None, :, None] + nl.arange(5)[None, None, :]]
        nl.store(out, nisa.tensor_scalar(v, op0=nl.multiply, operand0=ts))
        return out

    np.testing.assert_array_equal(k(x, s), (x * s).reshape(6, 4, 5))


def test_tensor_reduce_over_a_size_one_axis():
    """Reducing an axis of size 1 is a reduction over one element (not an empty instruction)."""
    import neuronxcc.nki.isa as nisa

    x = R.standard_normal((4, 5)).astype(np.float32)

    @nki.jit
    def k(x):
        out = nl.ndarray((4, 5), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        v = t[nl.arange(4)[:, None, None], nl.arange(5)[None, :, None] + nl.arange(1)[None, None, :]]
        nl.store(out, nisa.tensor_reduce(op=nl.max, data=v, axis=2, negate=True))
        return out

    np.testing.assert_array_equal(k(x), -x)


def test_view_as_a_dtype_of_another_size():
    """tensor.view reinterprets bytes, as numpy's ndarray.view: a [P, 16] uint8 tile is a [P, 4]
    float32 / int32 tile. Floats land in a byte tile, their sign is cleared through an int32 view,
    and their high bytes are read through the byte view."""
    import neuronxcc.nki.isa as nisa

    x = R.standard_normal((6, 4)).astype(np.float32)

    @nki.jit
    def k(x):
        absx = nl.ndarray((6, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        high = nl.ndarray((6, 4), dtype=nl.uint8, buffer=nl.shared_hbm)
        raw = nl.ndarray((6, 16), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.dma_copy(dst=raw.view(nl.float32), src=x)
        hi = nisa.tensor_copy(raw[nl.arange(6)[:, None], 4 * nl.arange(4)[None, :] + 3])
        raw.view(nl.int32)[0:6, 0:4] = nisa.tensor_scalar(raw.view(nl.int32), op0=nl.bitwise_and, operand0=0x7FFFFFFF)
        nl.store(absx, raw.view(nl.float32))
        nl.store(high, hi)
        return absx, high

    absx, high = k(x)
    np.testing.assert_array_equal(absx, np.abs(x))
    np.testing.assert_array_equal(high, x.view(np.uint8)[:, 3::4])


def test_gather_rows_by_an_index_row_copied_into_a_column():
    """A dynamic index on the first dimension of an HBM tensor seen as rows
    (`t.reshape((M, row))[idx, cols]`), with the indices arriving as one [1, n] row: a DMA moves
    them into an [n, 1] column first (a DMA pairs element streams whatever their layouts)."""
    import neuronxcc.nki.isa as nisa

    table = R.standard_normal((12, 6)).astype(np.float32)
    idx = np.array([[3, 0, 11, 3, 7]], np.int32)

    @nki.jit
    def k(table, idx):
        out = nl.ndarray((5, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        row = nl.load(idx)
        col = nl.ndarray((5, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=col[0:5, 0:1], src=row[0:1, 0:5])
        g = nl.ndarray((5, 4), dtype=nl.float32, buffer=nl.sbuf)
        # the table read as 18 rows of 4 (through its flat [72] view), rows chosen by the column
        nisa.dma_copy(dst=g, src=table.reshape((72,)).reshape((18, 4))[col[0:5, 0:1], nl.arange(4)[None, :]])
        nl.store(out, g)
        return out

    flat_rows = table.reshape(18, 4)
    np.testing.assert_array_equal(k(table, idx), flat_rows[idx[0]])
