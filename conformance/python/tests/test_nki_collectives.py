"""nki.collectives in kernels launched over N ranks simulated in one process."""

from __future__ import annotations

import numpy as np
import pytest
import trnsim
import trnsim.nki.language as nl
from trnsim.nki import collectives as ncc

WORLD = ncc.ReplicaGroup([[0, 1, 2, 3]])


def doubled_all_reduce(x):
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(t, nl.multiply(nl.load(x), 2.0))
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    ncc.all_reduce([t], [out], WORLD, nl.add)
    return out


def test_all_reduce_kernel_across_four_ranks_matches_numpy():
    xs = [np.random.default_rng(r).standard_normal((128, 64)).astype(np.float32) for r in range(4)]
    outs = ncc.launch(doubled_all_reduce, 4)([(x,) for x in xs])
    # 32 KiB per rank: Mesh. Chunk c (a quarter of the flat buffer) is combined by rank c in
    # the order c, c+1, c+2, c+3 (mod 4), each add in fp32.
    d = [(2 * x).reshape(-1) for x in xs]
    want = np.empty_like(d[0])
    q = d[0].size // 4
    for c in range(4):
        sl = slice(c * q, (c + 1) * q)
        acc = d[c][sl].copy()
        for j in (1, 2, 3):
            acc = acc + d[(c + j) % 4][sl]
        want[sl] = acc
    for o in outs:
        assert np.array_equal(o.reshape(-1), want)
    np.testing.assert_allclose(outs[0], 2 * np.sum(xs, axis=0), rtol=1e-5, atol=1e-5)


def test_gather_scatter_permute_and_rank_id():
    def k(x):
        g = nl.ndarray((4 * x.shape[0], x.shape[1]), x.dtype, buffer=nl.shared_hbm)
        ncc.all_gather([x], [g], WORLD)
        rs = nl.ndarray((x.shape[0] // 4, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
        ncc.reduce_scatter([x], [rs], WORLD, nl.add)
        pm = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        ncc.collective_permute([x], [pm], [(0, 1), (1, 2), (2, 3), (3, 0)])
        mx = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        ncc.all_reduce([x], [mx], WORLD, nl.maximum)
        assert ncc.rank_id() in range(4)
        return g, rs, pm, mx

    xs = [np.full((8, 4), float(r + 1), np.float32) + np.arange(32, dtype=np.float32).reshape(8, 4) for r in range(4)]
    outs = ncc.launch(k, 4)([(x,) for x in xs])
    total = np.sum(xs, axis=0)
    for r, (g, rs, pm, mx) in enumerate(outs):
        assert np.array_equal(g, np.concatenate(xs))
        assert np.array_equal(rs, total[2 * r : 2 * r + 2])
        assert np.array_equal(pm, xs[(r - 1) % 4])
        assert np.array_equal(mx, np.max(xs, axis=0))


def test_a_tile_living_across_a_collective_is_reported():
    def k(x):
        tile = nl.load(x)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        ncc.all_reduce([x], [out], WORLD, nl.add)
        res = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(res, nl.add(tile, 1.0))
        return res

    xs = [np.ones((4, 4), np.float32)] * 4
    with pytest.raises(trnsim.SimError) as e:
        ncc.launch(k, 4)([(x,) for x in xs])
    assert e.value.kind == "uninitialized_read"


def test_outside_a_launch_is_an_error():
    with pytest.raises(Exception, match="launch"):
        ncc.rank_id()


def test_all_to_all_exchanges_row_chunks():
    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        ncc.all_to_all([x], [out], WORLD)
        return out

    xs = [np.arange(32, dtype=np.float32).reshape(8, 4) + 100 * r for r in range(4)]
    outs = ncc.launch(k, 4)([(x,) for x in xs])
    for r, out in enumerate(outs):
        want = np.concatenate([xs[i][2 * r : 2 * r + 2] for i in range(4)])
        assert np.array_equal(out, want), r


def test_all_to_all_v_with_uneven_send_counts():
    c = [1, 2, 3, 6]
    counts = [[c[(r + j) % 4] for j in range(4)] for r in range(4)]  # elements rank r sends to rank j

    def k(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        ncc.all_to_all_v([x], [out], WORLD, counts)
        return out

    xs = [np.arange(12, dtype=np.float32).reshape(12, 1) + 100 * r for r in range(4)]
    outs = ncc.launch(k, 4)([(x,) for x in xs])
    for j, out in enumerate(outs):
        parts = []
        for r in range(4):
            start = sum(counts[r][:j])
            parts.append(xs[r].reshape(-1)[start : start + counts[r][j]])
        assert np.array_equal(out.reshape(-1), np.concatenate(parts)), j
