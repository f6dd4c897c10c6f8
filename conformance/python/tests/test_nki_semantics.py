"""Legacy NKI semantics a published kernel collection relies on, each written from the NKI
documentation's description of the API (not from any kernel): rounding and integer remainders,
`nl.loop_reduce`, constant masks, undefined rows carried to a masked-off store, PSUM operands of
GpSimd and TensorE instructions, partly defined matmul operands, tile-indexed DMA after integer
indices and under a mask, `ncc.psum.alloc` functions taking keywords, and direct placements of a
loop body traced once. docs/nki.md and docs/nki-allocation.md describe each rule."""

import functools

import numpy as np
import pytest
import trnsim.nki

trnsim.nki.install()

import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc import nki

R = np.random.default_rng(24)


def _store(t):
    out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
    nl.store(out, t)
    return out


# -- nl.floor / nl.ceil / nl.trunc ----------------------------------------------------------------

EDGES = np.array(
    [
        0.5,
        1.5,
        2.5,
        -0.5,
        -1.5,
        -2.5,
        0.49999997,
        -0.49999997,
        8388607.5,
        -8388607.5,
        8388608.0,
        16777217.0,
        3.0e9,
        -3.0e9,
        1.0e30,
        -1.0e30,
        np.inf,
        -np.inf,
        np.nan,
        0.0,
        1.0,
        -1.0,
        4194303.75,
        -4194303.75,
    ],
    np.float32,
)


def _values():
    v = np.concatenate(
        [EDGES, R.uniform(-1000, 1000, 300).astype(np.float32), R.uniform(-3, 3, 300).astype(np.float32)]
    )
    return np.resize(v, (128, 8)).astype(np.float32)


@pytest.mark.parametrize("name", ["floor", "ceil", "trunc"])
def test_rounding_is_exact_for_every_float(name):
    f = getattr(nl, name)

    @nki.jit
    def k(x):
        return _store(f(nl.load(x)))

    x = _values()
    got = k(x)
    want = getattr(np, name)(x)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert same.all(), list(zip(x[~same][:5], got[~same][:5]))


def test_floor_into_an_integer_dtype_and_of_an_integer_tile():
    @nki.jit
    def k(x, i):
        a = nl.floor(nl.load(x), dtype=nl.int32)
        b = nl.floor(nl.load(i))
        out = nl.ndarray((128, 16), nl.int32, buffer=nl.shared_hbm)
        nl.store(out[:, 0:8], a)
        nl.store(out[:, 8:16], b)
        return out

    x = R.uniform(-5000, 5000, (128, 8)).astype(np.float32)
    i = R.integers(-(10**9), 10**9, (128, 8)).astype(np.int32)
    got = k(x, i)
    np.testing.assert_array_equal(got[:, :8], np.floor(x).astype(np.int32))
    np.testing.assert_array_equal(got[:, 8:], i)


# -- nl.mod / nl.fmod -----------------------------------------------------------------------------


@pytest.mark.parametrize("y", [38, 3, -7, 1, 65535, 1000003])
def test_integer_mod_and_fmod_are_exact_over_int32(y):
    @nki.jit
    def k(x):
        t = nl.load(x)
        out = nl.ndarray((128, 32), nl.int32, buffer=nl.shared_hbm)
        nl.store(out[:, 0:16], nl.mod(t, y))
        nl.store(out[:, 16:32], nl.fmod(t, y))
        return out

    x = R.integers(-(2**31), 2**31 - 1, (128, 16), dtype=np.int64)
    x[:, :4] = R.integers(-5000, 5000, (128, 4))
    x[0, :6] = [0, 1, -1, 2**31 - 1, -(2**31), 38 * 1000]
    x = x.astype(np.int32)
    got = k(x)
    np.testing.assert_array_equal(got[:, :16], np.mod(x, y))
    np.testing.assert_array_equal(got[:, 16:], np.fmod(x, y))


def test_float_remainder_is_refused_with_the_reason():
    @nki.jit
    def k(x):
        return _store(nl.mod(nl.load(x), 3))

    with pytest.raises(trnsim.nki.NkiError, match="not supported.*no remainder operator"):
        k(np.ones((128, 8), np.float32))


# -- nl.loop_reduce ------------------------------------------------------------------------------


def test_loop_reduce_folds_each_iteration_into_the_assigned_tile():
    @nki.jit
    def k(x):
        acc = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
        big = nl.full((128, 64), -1e30, nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(4):
            t = nl.load(x[i])
            acc[...] = nl.loop_reduce(t, op=np.add, loop_indices=[i], dtype=nl.float32)
            big[...] = nl.loop_reduce(t, op=np.maximum, loop_indices=(i,))
        out = nl.ndarray((2, 128, 64), nl.float32, buffer=nl.shared_hbm)
        nl.store(out[0], acc)
        nl.store(out[1], big)
        return out

    x = R.integers(-50, 50, (4, 128, 64)).astype(np.float32)
    got = k(x)
    np.testing.assert_array_equal(got[0], x.sum(axis=0))
    np.testing.assert_array_equal(got[1], x.max(axis=0))


def test_loop_reduce_used_but_not_assigned_says_where_it_goes():
    @nki.jit
    def k(x):
        r = nl.loop_reduce(nl.load(x), op=np.add, loop_indices=[0])
        return _store(nl.exp(r))

    with pytest.raises(trnsim.nki.NkiError, match="assigned into its destination"):
        k(np.ones((128, 8), np.float32))


# -- constant masks ------------------------------------------------------------------------------


def test_a_false_mask_leaves_the_destination_as_it_was():
    @nki.jit
    def k(x, w):
        t = nl.load(x)
        q_tile, k_tile = 0, 1  # the kind of compile-time comparison AWS's kernels pass as a mask
        dst = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        dst[...] = nl.copy(t)
        dst[...] = nl.multiply(t, 100.0, mask=(q_tile * 128 >= k_tile * 512))  # False: does not execute
        dst[...] = nl.add(dst, 1.0, mask=(k_tile >= q_tile))  # True: executes
        ps = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
        ps[...] += nisa.nc_matmul(nl.load(w), t, mask=False)  # does not execute
        res = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        res[:, 0:64] = dst
        res[:, 64:128] = ps
        return _store(res)

    x = R.standard_normal((128, 64)).astype(np.float32)
    got = k(x, np.ones((128, 128), np.float32))
    np.testing.assert_array_equal(got[:, :64], x + 1.0)
    np.testing.assert_array_equal(got[:, 64:], 0.0)


# -- undefined rows computed on, then stored masked off ------------------------------------------


def test_rows_a_masked_load_left_empty_flow_to_a_masked_off_store():
    # Group 1's masked load keeps no row: its tile, and everything computed from it (including
    # through TensorE transposes), is undefined, and its masked store keeps no row either.
    @nki.jit
    def k(x, n_valid):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:64]
        for g in nl.affine_range(2):
            t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
            t[...] = nl.load(x[g * 128 + i_p, i_f], mask=(g * 128 + i_p < n_valid))
            s = nisa.activation(op=nl.exp, data=t)
            m = nl.copy(nisa.nc_transpose(s))
            back = nl.copy(nisa.nc_transpose(m))
            nl.store(out[g * 128 + i_p, i_f], value=back, mask=(g * 128 + i_p < n_valid))
        return out

    x = R.standard_normal((256, 64)).astype(np.float32)
    got = k(x, 128)
    np.testing.assert_allclose(got, np.exp(x[:128]), rtol=1e-6)


def test_garbage_reaching_hbm_is_refused_at_the_line_that_read_nothing():
    @nki.jit
    def k(x):
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        y = nl.exp(t)  # reads nothing written
        z = nl.add(y, 1.0)
        return _store(z)

    with pytest.raises(trnsim.nki.NkiError) as e:
        k(np.zeros((128, 64), np.float32))
    msg = str(e.value)
    assert "read of uninitialised memory" in msg and "'t'" in msg
    assert "reaches this dma_copy" in msg


# -- PSUM operands of GpSimd and TensorE instructions ------------------------------------------------


def test_affine_select_of_a_psum_tile_and_under_a_box_mask():
    @nki.jit
    def k(a, b):
        ps = nl.ndarray((128, 128), nl.float32, buffer=nl.psum)
        ps[...] = nisa.nc_matmul(nl.load(a), nl.load(b))
        i_p, i_f = nl.mgrid[0:128, 0:128]
        sel = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        sel[...] = nisa.affine_select(pred=(i_p >= i_f), on_true_tile=ps, on_false_value=-7.0)
        # the mask keeps columns 64.. ; the predicate is evaluated at each element's own index
        sel[...] = nisa.affine_select(pred=(i_f - i_p > 80), on_true_tile=sel, on_false_value=5.0, mask=(i_f >= 64))
        return _store(sel)

    a = R.integers(-3, 3, (128, 128)).astype(np.float32)
    b = R.integers(-3, 3, (128, 128)).astype(np.float32)
    got = k(a, b)
    p, f = np.mgrid[0:128, 0:128]
    want = np.where(p >= f, a.T @ b, -7.0)
    want = np.where((f >= 64) & ~(f - p > 80), 5.0, want)
    np.testing.assert_array_equal(got, want)


def test_matmul_of_a_transpose_result_in_psum():
    @nki.jit
    def k(a, b):
        at = nisa.nc_transpose(nl.load(a))  # TensorE: lands in PSUM
        ps = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        ps[...] = nisa.nc_matmul(at, nl.load(b))  # staged to SBUF first
        return _store(nl.copy(ps))

    a = R.integers(-4, 4, (128, 128)).astype(np.float32)
    b = R.integers(-4, 4, (128, 64)).astype(np.float32)
    np.testing.assert_array_equal(k(a, b), a @ b)


def test_matmul_of_a_moving_tile_whose_last_columns_are_undefined():
    @nki.jit
    def k(a, b, n):
        i_p, i_f = nl.mgrid[0:128, 0:512]
        mv = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        mv[...] = nl.load(b[i_p, i_f], mask=(i_f < n))
        ps = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        ps[...] += nisa.nc_matmul(nl.load(a), mv)
        res = nl.copy(ps)
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        nl.store(out[i_p, i_f], value=res, mask=(i_f < n))
        return out

    a = R.integers(-4, 4, (128, 128)).astype(np.float32)
    b = R.integers(-4, 4, (128, 512)).astype(np.float32)
    with pytest.raises(trnsim.SimError, match="not fully written"):
        k(a, b, 384)  # the kernel itself leaves columns 384.. of its output unstored
    got = k(a, b, 512)
    np.testing.assert_array_equal(got, a.T @ b)


# -- tile-indexed DMA ----------------------------------------------------------------------------


def test_tile_index_after_an_integer_index_and_under_a_mask():
    @nki.jit
    def k(data, ids):
        out = nl.ndarray((2, 128, 32), nl.float32, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(32)[None, :]
        for b in nl.affine_range(2):
            idx = nl.load(ids[b])
            # rows 100.. hold out-of-range indices: the mask keeps their DMA from reading them
            rows = nl.load(data[b, idx, i_f], mask=(i_p < 100))
            nl.store(out[b, i_p, i_f], value=rows, mask=(i_p < 100))
            nl.store(out[b, 100 + nl.arange(28)[:, None], i_f], value=nl.zeros((28, 32), nl.float32))
        return out

    data = R.standard_normal((2, 50, 32)).astype(np.float32)
    ids = R.integers(0, 50, (2, 128, 1)).astype(np.int32)
    ids[:, 100:] = 10**6
    got = k(data, ids)
    for b in range(2):
        np.testing.assert_array_equal(got[b, :100], data[b, ids[b, :100, 0]])
        np.testing.assert_array_equal(got[b, 100:], 0.0)


def test_a_column_of_a_tile_is_two_dimensional():
    @nki.jit
    def k(x):
        t = nl.load(x)
        col = t[:, 3]
        return _store(nl.copy(col[:, 0]))

    x = R.standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_array_equal(k(x).reshape(128), x[:, 3])


# -- direct allocation ----------------------------------------------------------------------------


def test_psum_alloc_function_bound_by_keyword():
    def place(bank_map, idx, pdim_size, fdim_size):
        return (bank_map[idx], 0, 0)

    @nki.jit
    def k(a, b):
        ps = nl.ndarray(
            (2, nl.par_dim(128), 128),
            nl.float32,
            buffer=ncc.psum.alloc(functools.partial(place, bank_map={(0,): 3, (1,): 6})),
        )
        res = nl.ndarray((128, 256), nl.float32, buffer=nl.sbuf)
        for g in nl.affine_range(2):
            ps[g] = nisa.nc_matmul(nl.load(a), nl.load(b[g]))
            res[:, g * 128 : (g + 1) * 128] = nl.copy(ps[g])
        return _store(res)

    a = R.integers(-3, 3, (128, 128)).astype(np.float32)
    b = R.integers(-3, 3, (2, 128, 128)).astype(np.float32)
    got = k(a, b)
    np.testing.assert_array_equal(got, np.concatenate([a.T @ b[0], a.T @ b[1]], axis=1))
    prog = trnsim.nki.last_run().program
    banks = {i["op"]["nc_matmul"]["dst"]["offset"] // 2048 for i in prog["instructions"] if "nc_matmul" in i["op"]}
    assert banks == {3, 6}


def test_a_loop_body_advancing_an_address_is_traced_once():
    # Legacy NKI runs a loop body's Python once: `addr` advances once, so every iteration's tile
    # sits at the first iteration's address. Unrolled naively, 40 iterations of 8 KiB would run
    # past SBUF's end.
    @nki.jit
    def k(x):
        out = nl.ndarray((40, 128, 2048), nl.float32, buffer=nl.shared_hbm)
        addr = 0
        for i in nl.affine_range(40):
            t = nl.ndarray((nl.par_dim(128), 2048), nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=addr))
            addr += 2048 * 4
            t[...] = nl.load(x[i])
            nl.store(out[i], value=nl.multiply(t, 2.0))
        return out

    x = R.standard_normal((40, 128, 2048)).astype(np.float32)
    np.testing.assert_array_equal(k(x), x * 2.0)


def test_automatic_tiles_avoid_a_placed_tile_that_is_already_live():
    # `x` is placed at byte 0 and live from its load to the add; the automatically placed tiles
    # of b's load and product start while x is live, so they must go around it (a first fit that only
    # saw placed tiles starting later put them on top of x and the sum came out wrong)
    @nki.jit
    def k(a, b):
        x = nl.ndarray((nl.par_dim(128), 512), nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        x[...] = nl.load(a)
        y = nl.multiply(nl.load(b), 3.0)
        return _store(nl.add(x, y))

    a = R.integers(-1000, 1000, (128, 512)).astype(np.float32)
    b = R.integers(-1000, 1000, (128, 512)).astype(np.float32)
    np.testing.assert_array_equal(k(a, b), a + 3.0 * b)
