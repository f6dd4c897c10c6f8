"""The collectives model (trnsim.collectives) against an independent NumPy model of each
algorithm's reduction order, bit for bit; hand-checked cases; a wrong order must fail."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from trnsim import collectives as cc
from trnsim.collectives import _plan

DTYPES = [np.float32, ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, np.int32]


# -- the NumPy model ---------------------------------------------------------------------------


def combine(a, b, op="add"):
    """One combine step as the engines do it: fp32 math, cast (RNE) to the tensor's dtype."""
    if a.dtype == np.int32:
        f = {"add": np.add, "max": np.maximum, "min": np.minimum}[op]
        return f(a, b).astype(np.int32)
    f = {"add": np.add, "max": np.maximum, "min": np.minimum}[op]
    return f(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)


def fold(vals, op="add"):
    acc = vals[0]
    for v in vals[1:]:
        acc = combine(acc, v, op)
    return acc


def even_chunks(n, parts):
    base, extra = divmod(n, parts)
    out, off = [], 0
    for c in range(parts):
        ln = base + (c < extra)
        out.append(slice(off, off + ln))
        off += ln
    return out


def model_all_reduce(xs, algorithm, op="add"):
    """Every rank's result under ``algorithm``'s order (after the model's Ring fallbacks)."""
    n = len(xs)
    if n == 1:
        return xs[0].copy()
    if algorithm == "rdh" and n & (n - 1):
        algorithm = "ring"
    if algorithm == "kangaring" and n % 2:
        algorithm = "ring"
    ch = even_chunks(xs[0].size, n)
    out = np.empty_like(xs[0])
    if algorithm == "ring":
        # chunk c: rank c+1's value, then ranks c+2, ..., c (each adds its own to what arrives)
        for c in range(n):
            out[ch[c]] = fold([xs[(c + 1 + j) % n][ch[c]] for j in range(n)], op)
    elif algorithm == "mesh":
        # chunk c: owner c's value, then the others' in the order c+1, c+2, ...
        for c in range(n):
            out[ch[c]] = fold([xs[(c + j) % n][ch[c]] for j in range(n)], op)
    elif algorithm == "rdh":
        vals = [x.copy() for x in xs]
        d = n // 2
        while d >= 1:
            vals = [combine(vals[r], vals[r ^ d], op) for r in range(n)]
            d //= 2
        for c in range(n):
            out[ch[c]] = vals[c][ch[c]]
    elif algorithm == "kangaring":
        m = n // 2
        chips = [combine(xs[2 * j], xs[2 * j + 1], op) for j in range(m)]
        for i in range(m):
            # even chunk 2i forward from chip i+1; odd chunk 2i+1 backward from chip i-1
            out[ch[2 * i]] = fold([chips[(i + 1 + j) % m][ch[2 * i]] for j in range(m)], op)
            out[ch[2 * i + 1]] = fold([chips[(i - 1 - j) % m][ch[2 * i + 1]] for j in range(m)], op)
    return out


def inputs(n_ranks, n, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype == np.int32:
        return [rng.integers(-1000, 1000, n).astype(np.int32) for _ in range(n_ranks)]
    # values over several binades so that the order of the additions shows in the rounding
    vals = rng.standard_normal((n_ranks, n)) * np.exp2(rng.integers(-3, 4, (n_ranks, n)))
    if dtype in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        vals = vals / 4
    return [v.astype(dtype) for v in vals]


def bits(a):
    return a.view(np.uint8)


# -- tests --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("algorithm", cc.ALGORITHMS)
def test_all_reduce_matches_numpy_order_model(algorithm, dtype):
    s = cc.Settings(algorithm=algorithm)
    for n_ranks in range(2, 9):
        xs = inputs(n_ranks, 37, dtype, seed=n_ranks)
        outs = cc.simulate("all_reduce", xs, s=s)
        want = model_all_reduce(xs, algorithm)
        for r, o in enumerate(outs):
            assert np.array_equal(bits(o), bits(want)), (algorithm, n_ranks, r, o, want)


@pytest.mark.parametrize("algorithm", cc.ALGORITHMS)
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_match_model(algorithm, op):
    for n_ranks in (3, 4, 6):
        xs = inputs(n_ranks, 20, np.float32, seed=7)
        outs = cc.simulate("all_reduce", xs, op=op, s=cc.Settings(algorithm=algorithm))
        want = model_all_reduce(xs, algorithm, op)
        assert all(np.array_equal(o, want) for o in outs)


@pytest.mark.parametrize("algorithm", cc.ALGORITHMS)
def test_reduce_scatter_uneven_and_empty(algorithm):
    s = cc.Settings(algorithm=algorithm)
    for n_ranks in range(2, 9):
        counts = [(r * 2) % 5 for r in range(n_ranks)]  # uneven, some empty
        xs = inputs(n_ranks, sum(counts), np.float32, seed=3)
        outs = cc.simulate("reduce_scatter", xs, counts=counts, s=s)
        total = np.sum(np.stack(xs).astype(np.float64), axis=0)
        off = np.cumsum([0] + counts)
        for r, o in enumerate(outs):
            assert o.shape == (counts[r],)
            np.testing.assert_allclose(o, total[off[r] : off[r + 1]], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("algorithm", cc.ALGORITHMS)
def test_gathers_broadcast_reduce_all_to_all(algorithm):
    s = cc.Settings(algorithm=algorithm)
    for n_ranks in range(1, 9):
        blocks = [np.arange(r % 3, dtype=np.float32) + 10 * r for r in range(n_ranks)]
        want = np.concatenate(blocks)
        assert all(np.array_equal(o, want) for o in cc.simulate("all_gather", blocks, s=s))
        xs = inputs(n_ranks, 9, ml_dtypes.bfloat16, seed=1)
        for root in range(n_ranks):
            assert all(np.array_equal(bits(o), bits(xs[root])) for o in cc.simulate("broadcast", xs, root=root, s=s))
        sc = [[(r + 2 * d) % 3 for d in range(n_ranks)] for r in range(n_ranks)]
        ins = [np.arange(sum(sc[r]), dtype=np.float32) + 100 * r for r in range(n_ranks)]
        outs = cc.simulate("all_to_all", ins, send_counts=sc)
        for d in range(n_ranks):
            parts = [ins[r][sum(sc[r][:d]) : sum(sc[r][:d]) + sc[r][d]] for r in range(n_ranks)]
            assert np.array_equal(outs[d], np.concatenate(parts))


def test_reduce_root_gets_the_reduce_scatter_order():
    xs = inputs(5, 11, ml_dtypes.bfloat16, seed=5)
    for root in range(5):
        outs = cc.simulate("reduce", xs, root=root, s=cc.Settings(algorithm="ring"))
        assert np.array_equal(bits(outs[root]), bits(model_all_reduce(xs, "ring")))


def test_empty_tensors_and_one_rank():
    for alg in cc.ALGORITHMS:
        for n_ranks in (1, 2, 3, 4):
            outs = cc.simulate("all_reduce", [np.zeros(0, np.float32)] * n_ranks, s=cc.Settings(algorithm=alg))
            assert all(o.size == 0 for o in outs)
    x = np.array([1.5, -2.0], np.float32)
    assert np.array_equal(cc.simulate("all_reduce", [x])[0], x)


# -- by hand: 3 ranks, 2 elements ------------------------------------------------------------------


def test_ring_three_ranks_two_elements_by_hand():
    # Chunks: element 0 (chunk 0), element 1 (chunk 1), nothing (chunk 2).
    p = _plan.all_reduce("ring", 3, 2)
    M = _plan.Move
    assert p.steps == [
        # reduce-scatter step 0: rank r sends chunk r-1 to rank r+1
        [M(0, 1, 2, 2, 0, True), M(1, 2, 0, 0, 1, True), M(2, 0, 1, 1, 1, True)],
        # step 1: rank r sends chunk r-2: rank 2's partial (x1+x2)[0] reaches rank 0,
        # rank 0's partial (x2+x0)[1] reaches rank 1
        [M(0, 1, 1, 1, 1, True), M(1, 2, 2, 2, 0, True), M(2, 0, 0, 0, 1, True)],
        # all-gather: rank r forwards chunk r, then chunk r-1
        [M(0, 1, 0, 0, 1, False), M(1, 2, 1, 1, 1, False), M(2, 0, 2, 2, 0, False)],
        [M(0, 1, 2, 2, 0, False), M(1, 2, 0, 0, 1, False), M(2, 0, 1, 1, 1, False)],
    ]
    bf = ml_dtypes.bfloat16
    xs = [np.array([256, 1], bf), np.array([1, 256], bf), np.array([1, 1], bf)]
    # element 0 = x0 + (x2 + x1) = 256 + 2 = 258 (exact in bf16);
    # element 1 = x1 + (x0 + x2) = 256 + 2 = 258.
    outs = cc.simulate("all_reduce", xs, s=cc.Settings(algorithm="ring"))
    for o in outs:
        assert o.astype(np.float32).tolist() == [258.0, 258.0]


def test_mesh_three_ranks_two_elements_by_hand():
    bf = ml_dtypes.bfloat16
    xs = [np.array([256, 1], bf), np.array([1, 256], bf), np.array([1, 1], bf)]
    # Mesh: owner 0 combines element 0 as (x0 + x1) + x2 = (256 + 1) + 1: 257 rounds to 256
    # (a tie, to the even significand), and again: 256. Owner 1 combines element 1 as
    # (x1 + x2) + x0 = (256 + 1) + 1 = 256.
    outs = cc.simulate("all_reduce", xs, s=cc.Settings(algorithm="mesh"))
    for o in outs:
        assert o.astype(np.float32).tolist() == [256.0, 256.0]
    # With fp32 accumulation the partials stay exact: 258 both ways.
    outs = cc.simulate("all_reduce", xs, s=cc.Settings(algorithm="mesh", accumulate="fp32"))
    assert outs[0].astype(np.float32).tolist() == [258.0, 258.0]


def test_rdh_and_kangaring_fall_back_to_ring_at_three_ranks():
    assert _plan.all_reduce("rdh", 3, 2).algorithm == "ring"
    assert _plan.all_reduce("kangaring", 3, 2).algorithm == "ring"
    assert _plan.all_reduce("rdh", 6, 2).algorithm == "ring"
    assert _plan.all_reduce("kangaring", 6, 2).algorithm == "kangaring"


# -- a collective with a wrong order fails the model ------------------------------------------------


def _wrong_ring(n_ranks, n):
    """A test double: the ring's reduce-scatter run backwards (rank r sends to r-1)."""
    p = _plan.all_reduce("ring", n_ranks, n)
    wrong = []
    for step in p.steps[: n_ranks - 1]:
        wrong.append([_plan.Move(m.src, (m.src - 1) % n_ranks, m.src_off, m.dst_off, m.n, True) for m in step])
    return _plan.Plan("all_reduce", "ring", n_ranks, wrong)


def test_a_wrong_order_fails_the_model():
    n_ranks, n = 4, 64
    xs = inputs(n_ranks, n, ml_dtypes.bfloat16, seed=11)
    good = cc.simulate("all_reduce", xs, s=cc.Settings(algorithm="ring"))
    assert np.array_equal(bits(good[0]), bits(model_all_reduce(xs, "ring")))
    from trnsim import _native

    mems = []
    for r, x in enumerate(xs):
        sess = _native.Session("trn2")
        sess.put("buf", ("bf16", [n], x.tobytes()))
        mems.append(cc.RankMemory(sess, "trn2", {"buf": "buf"}, "bf16", f"w{r}"))
    cc._exec.run_local(_wrong_ring(n_ranks, n), mems, "add")
    # after the backwards reduce-scatter, rank r holds chunk (r - 1) reduced in the wrong order
    ch = even_chunks(n, n_ranks)
    want = model_all_reduce(xs, "ring")
    mismatched = 0
    for r, mem in enumerate(mems):
        _, _, data = mem.session.get("buf")
        got = np.frombuffer(data, dtype=ml_dtypes.bfloat16)
        c = (r - 1) % n_ranks
        mismatched += int(not np.array_equal(bits(got[ch[c]]), bits(want[ch[c]])))
    assert mismatched > 0


# -- settings, thresholds, the engines -----------------------------------------------------------


def test_algorithm_by_size_and_settings():
    assert cc.choose(999_999) == "mesh"
    assert cc.choose(1_000_000) == "rdh"
    assert cc.choose(56_000_000) == "rdh"
    assert cc.choose(56_000_001) == "kangaring"
    s = cc.Settings(mesh_max_bytes=10, rdh_max_bytes=20)
    assert [cc.choose(b, s) for b in (9, 10, 20, 21)] == ["mesh", "rdh", "rdh", "kangaring"]
    assert cc.choose(5, cc.Settings(algorithm="ring")) == "ring"
    with pytest.raises(ValueError):
        cc.Settings(algorithm="tree")
    with pytest.raises(ValueError):
        cc.Settings(accumulate="fp64")


def test_reductions_run_on_the_engines():
    xs = inputs(4, 300, np.float32, seed=2)
    _, _, stats = cc.simulate("all_reduce", xs, s=cc.Settings(algorithm="ring"), return_stats=True)
    assert stats[0].engines == {"dma": stats[0].engines["dma"]}  # sums: DMA accumulate only
    _, _, stats = cc.simulate("all_reduce", xs, op="max", s=cc.Settings(algorithm="ring"), return_stats=True)
    assert stats[0].engines.get("vector", 0) > 0
    xi = inputs(4, 300, np.int32, seed=2)
    _, _, stats = cc.simulate("all_reduce", xi, s=cc.Settings(algorithm="ring"), return_stats=True)
    assert stats[0].engines.get("gpsimd", 0) > 0


def test_refusals_name_the_operation():
    with pytest.raises(cc.CollectiveError, match="bitwise_and needs an integer"):
        cc.simulate("all_reduce", [np.ones(2, np.float32)] * 2, op="bitwise_and")
    with pytest.raises(cc.CollectiveError, match="bool"):
        cc.simulate("all_reduce", [np.ones(2, np.bool_)] * 2)


# -- the time model against hand-computed costs ------------------------------------------------------


def test_ring_cost_by_hand():
    # 16 ranks on one trn2.48xlarge: 4 ranks per chip on chips 0-3 (one torus row). Every ring
    # step crosses one NeuronLink hop somewhere (chip 3 -> chip 0 wraps around the row): 1.5 us,
    # and a rank's share of the chip's 1,024 GB/s is 256 GB/s.
    s = 64e6
    e = cc.estimate("all_reduce", "ring", 16, s, "trn2.48xlarge")
    lat = 30 * 1.5e-6
    transfer = 30 * (s / 16) / 256e9
    reduce = 15 * (s / 16) / (3500e9 / 4 * 0.5)
    assert e.steps == 30
    assert math.isclose(e.time_s, lat + transfer + reduce, rel_tol=1e-12)


def test_rdh_cost_by_hand():
    # Recursive halving at distance 8, 4, 2, 1: ranks 0/8 are chips 0/2 (2 hops), 0/4 chips 0/1
    # (1 hop), 2 and 1 stay on a chip (DMA: 3,500 GB/s / 4 ranks, one hop's handshake).
    s = 64e6
    e = cc.estimate("all_reduce", "rdh", 16, s, "trn2.48xlarge")
    lat = 2 * (3e-6 + 1.5e-6 + 1.5e-6 + 1.5e-6)
    transfer = 2 * (s / 2 / 256e9 + s / 4 / 256e9 + s / 8 / 875e9 + s / 16 / 875e9)
    reduce = (s / 2 + s / 4 + s / 8 + s / 16) / (875e9 * 0.5)
    assert e.steps == 8
    assert math.isclose(e.time_s, lat + transfer + reduce, rel_tol=1e-12)


def test_efa_and_ultraserver_links():
    from trnsim.collectives import _time

    t = _time.topology("trn2.48xlarge")
    assert _time.link(t, 0, 64) == (15e-6, 25e9 / 4)  # another instance: EFA
    u = _time.topology("trn2-ultraserver")
    assert _time.link(u, 0, 64) == (1.5e-6, 256e9 / 4)  # the next instance of the UltraServer
    with pytest.raises(ValueError):
        _time.topology("trn3")
