"""SBUF/PSUM allocation by live ranges, direct allocation, and reuse seen by the dependency
analysis and the race detector (docs/nki-allocation.md)."""

import json
import os

import numpy as np
import pytest
import trnsim
import trnsim.nki

trnsim.nki.install()

import neuronxcc.nki.compiler as ncc
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


def chip_aps(program, loc=None, field=None):
    """(instruction index, field, access pattern) of every on-chip operand, optionally only
    those traced at `loc` / in operand `field`."""
    out = []
    for i, ins in enumerate(program["instructions"]):
        if loc is not None and ins.get("loc") != loc:
            continue
        fields = next(iter(ins["op"].values()))
        for k, v in fields.items():
            if isinstance(v, dict) and v.get("mem") in ("sbuf", "psum") and (field is None or k == field):
                out.append((i, k, v))
    return out


# -- live ranges -----------------------------------------------------------------------------------


@nki.jit
def keep_every_tile(a):
    out = nl.ndarray((64, 128, 1024), a.dtype, buffer=nl.shared_hbm)
    kept = []
    for i in nl.affine_range(64):
        t = nl.load(a[i])
        nl.store(out[i], t)
        kept.append(t)  # Python holds all 64 tiles (256 KiB per partition): only one is live at a time
    return out


def test_a_kernel_that_fits_only_when_tiles_die_at_their_last_use_runs():
    a = np.arange(64 * 128 * 1024, dtype=np.float32).reshape(64, 128, 1024)
    np.testing.assert_array_equal(keep_every_tile(a), a)
    # the 64 tiles (more than SBUF holds) share bytes: fewer distinct offsets than tiles
    offs = {ap["offset"] for _, _, ap in chip_aps(trnsim.nki.last_run().program)}
    assert len(offs) < 64


def test_without_rotation_a_freed_tile_is_reused_at_once(monkeypatch):
    from trnsim.nki import _alloc

    monkeypatch.setattr(_alloc, "ROTATE", False)
    a = np.arange(64 * 128 * 1024, dtype=np.float32).reshape(64, 128, 1024)
    np.testing.assert_array_equal(keep_every_tile(a), a)
    offs = {ap["offset"] for _, _, ap in chip_aps(trnsim.nki.last_run().program)}
    assert len(offs) < 8


@nki.jit
def copy_rows(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0]):
        t = nl.load(a[i])
        nl.store(out[i], t)
    return out


def _run_copy_rows(monkeypatch, rotate):
    from trnsim.nki import _alloc

    monkeypatch.setattr(_alloc, "ROTATE", rotate)
    a = np.arange(32 * 128 * 256, dtype=np.float32).reshape(32, 128, 256)
    np.testing.assert_array_equal(copy_rows(a), a)
    run = trnsim.nki.last_run()
    offs = [ap["offset"] for _, k, ap in chip_aps(run.program) if k == "dst"]
    return offs, run.stats["timeline"]["makespan_ns"]


def test_rotation_gives_each_iteration_its_own_bytes_and_the_loads_overlap(monkeypatch):
    # 32 independent load/store pairs of 1 KiB per partition: with rotation every tile gets its
    # own bytes (SBUF has room for all), so no load waits for the previous store to release its
    # tile, and the DMAs spread over the queues; plain first fit puts all 32 at byte 0.
    rot, t_rot = _run_copy_rows(monkeypatch, True)
    ff, t_ff = _run_copy_rows(monkeypatch, False)
    assert len(set(rot)) == 32 and set(ff) == {0}
    assert t_rot < t_ff / 3, (t_rot, t_ff)


@nki.jit
def carried_across_the_back_edge(a, b):
    out = nl.ndarray((128, 512), a.dtype, buffer=nl.shared_hbm)
    first = nl.load(a)  # carried
    acc = nl.zeros((128, 512), nl.float32)
    for i in nl.affine_range(40):
        t = nl.load(b[i])  # loop-tile
        acc = nl.add(acc, t)
    nl.store(out, nl.add(acc, first))  # first is read only after the loop
    return out


def test_a_tile_read_after_a_loop_keeps_its_bytes_through_every_iteration():
    r = np.random.default_rng(0)
    a, b = r.standard_normal((128, 512), np.float32), r.standard_normal((40, 128, 512), np.float32)
    ref = a.astype(np.float32)
    acc = np.zeros((128, 512), np.float32)
    for i in range(40):
        acc = acc + b[i]
    np.testing.assert_array_equal(carried_across_the_back_edge(a, b), acc + ref)
    prog = trnsim.nki.last_run().program
    ((_, _, first),) = chip_aps(prog, line_of("carried"), "dst")
    for _, _, t in chip_aps(prog, line_of("loop-tile"), "dst"):
        assert t["offset"] + 2048 <= first["offset"] or first["offset"] + 2048 <= t["offset"]


@nki.jit
def block_tensor_two_live_blocks(a):
    n = a.shape[0]
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    # 64 blocks of 4 KiB per partition: 256 KiB in all, more than SBUF; two blocks live at a time
    buf = nl.ndarray((n, nl.par_dim(128), 1024), nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(n):
        buf[i] = nl.load(a[i])
        nl.store(out[i], nl.multiply(buf[i], 2.0))
    return out


def test_block_tensors_take_space_per_live_block():
    a = np.arange(64 * 128 * 1024, dtype=np.float32).reshape(64, 128, 1024) % 1000
    np.testing.assert_array_equal(block_tensor_two_live_blocks(a), a * 2)


@nki.jit(platform_target="trn1")  # trn1's 180224 usable bytes: the peak fits trn2's 212984
def too_much_live_at_once(a):
    out = nl.ndarray((128, 2048), nl.float32, buffer=nl.shared_hbm)
    big = [nl.load(a) for _ in range(16)]  # big-tiles
    small = [nl.exp(t[:, 0:1024]) for t in big]  # small-tiles
    for t in big + small:
        nl.store(out[:, 0 : t.shape[1]], t)
    return out


def test_a_live_set_over_sbuf_is_refused_naming_the_peak_tiles_sizes_and_lines():
    with pytest.raises(trnsim.nki.NkiAllocationError) as e:
        too_much_live_at_once(np.zeros((128, 2048), np.float32))
    msg = str(e.value)
    assert isinstance(e.value, trnsim.nki.NkiError)
    assert "SBUF capacity exceeded" in msg and "180224" in msg
    # the peak: 16 big tiles (8 KiB each) and all 16 small ones (4 KiB) are live
    assert f"[128, 2048] f32 8192 B x 16 ({line_of('big-tiles')})" in msg
    assert f"[128, 1024] f32 4096 B x 16 ({line_of('small-tiles')})" in msg
    assert "196608 bytes per partition" in msg
    locs = {t["loc"] for t in e.value.tiles}
    assert locs == {line_of("big-tiles"), line_of("small-tiles")}
    assert e.value.loc == line_of("small-tiles")


def test_the_limits_are_the_targets():
    """trn2 has more usable SBUF than trn1 (sim/src/target.rs): the same kernel fits there."""
    lim1, lim2 = trnsim.nki._alloc.limits("trn1"), trnsim.nki._alloc.limits("trn2")
    assert lim1["sbuf"] == 180224 and lim2["sbuf"] > 196608
    assert lim1["psum"] == 16384 and lim1["bank"] == 2048 and lim1["banks"] == 8
    k = nki.jit(too_much_live_at_once.func, platform_target="trn2")
    k(np.zeros((128, 2048), np.float32))


# -- direct allocation -----------------------------------------------------------------------------


@nki.jit
def at_address(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf, address=(0, 4096))
    t[...] = nl.load(a)
    u = nl.exp(t)  # auto
    nl.store(out, u)
    return out


def test_ndarray_address_places_the_tile_and_automatic_tiles_go_around_it():
    a = np.linspace(-2, 2, 128 * 256, dtype=np.float32).reshape(128, 256)
    np.testing.assert_allclose(at_address(a), np.exp(a), rtol=1e-6)
    prog = trnsim.nki.last_run().program
    loads = [ap for _, k, ap in chip_aps(prog) if k == "dst" and ap["mem"] == "sbuf"]
    assert loads[0]["offset"] == 4096  # the load was written straight into t
    ((_, _, u),) = chip_aps(prog, line_of("auto"), "dst")
    assert u["offset"] + 1024 <= 4096 or u["offset"] >= 4096 + 1024


@nki.jit
def sbuf_alloc_func(a):
    n = a.shape[0]
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray(
        (n, nl.par_dim(128), 256),
        a.dtype,
        buffer=ncc.sbuf.alloc(lambda idx, pdim, fbytes: (0, 65536 - (idx[0] + 1) * fbytes)),
    )
    for i in nl.affine_range(n):
        buf[i] = nl.load(a[i])
    for i in nl.affine_range(n):
        nl.store(out[i], buf[i])
    return out


def test_ncc_sbuf_alloc_puts_each_block_where_the_function_says():
    a = np.arange(4 * 128 * 256, dtype=np.float32).reshape(4, 128, 256)
    np.testing.assert_array_equal(sbuf_alloc_func(a), a)
    prog = trnsim.nki.last_run().program
    dsts = [ap["offset"] for _, k, ap in chip_aps(prog) if k == "dst"]
    assert dsts == [65536 - 1024 * (i + 1) for i in range(4)]


@nki.jit
def sbuf_mod_alloc(a):
    n = a.shape[0]
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray(
        (n, nl.par_dim(128), 512), nl.bfloat16, buffer=ncc.sbuf.mod_alloc(base_addr=2048, num_free_tiles=(2,))
    )
    for i in nl.affine_range(n):
        buf[i] = nl.load(a[i])
        nl.store(out[i], buf[i])
    return out


def test_ncc_sbuf_mod_alloc_rotates_blocks():
    import ml_dtypes

    a = (np.arange(4 * 128 * 512) % 251).astype(ml_dtypes.bfloat16).reshape(4, 128, 512)
    np.testing.assert_array_equal(sbuf_mod_alloc(a), a)
    prog = trnsim.nki.last_run().program
    dsts = [ap["offset"] for _, k, ap in chip_aps(prog) if k == "dst"]
    assert dsts == [2048, 3072, 2048, 3072]  # base + (i % 2) * 1024 bytes, as AWS's example


@nki.jit
def psum_alloc_and_mod_alloc(a, b):
    out = nl.ndarray((2, 128, 512), nl.float32, buffer=nl.shared_hbm)
    at, bt = nl.load(a), nl.load(b)
    p = nl.ndarray(
        (2, nl.par_dim(128), 512), nl.float32, buffer=ncc.psum.alloc(lambda idx, pdim, fbytes: (7 - idx[0], 0, 0))
    )
    q = nl.ndarray((2, nl.par_dim(128), 512), nl.float32, buffer=ncc.psum.mod_alloc(base_bank=2, num_bank_tiles=(2,)))
    for i in nl.affine_range(2):
        p[i] = nl.matmul(at, bt, transpose_x=True)
        q[i] = nl.matmul(at, bt, transpose_x=True)
        nl.store(out[i], nl.add(p[i], q[i]))
    return out


def test_ncc_psum_alloc_and_mod_alloc_place_blocks_in_banks():
    r = np.random.default_rng(1)
    a, b = r.standard_normal((128, 128), np.float32), r.standard_normal((128, 512), np.float32)
    got = psum_alloc_and_mod_alloc(a, b)
    ref = a.T.astype(np.float64) @ b
    np.testing.assert_allclose(got, np.stack([2 * ref] * 2), rtol=1e-4, atol=1e-3)
    prog = trnsim.nki.last_run().program
    mm = [ap["offset"] for _, k, ap in chip_aps(prog) if k == "dst" and ap["mem"] == "psum"]
    assert mm == [7 * 2048, 2 * 2048, 6 * 2048, 3 * 2048]


def test_force_auto_alloc_ignores_the_placements():
    k = nki.jit(ncc.force_auto_alloc(sbuf_alloc_func.func))
    a = np.arange(4 * 128 * 256, dtype=np.float32).reshape(4, 128, 256)
    np.testing.assert_array_equal(k(a), a)
    dsts = [ap["offset"] for _, kk, ap in chip_aps(trnsim.nki.last_run().program) if kk == "dst"]
    assert dsts != [65536 - 1024 * (i + 1) for i in range(4)]


@nki.jit
def overlapping_placements(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf, address=(0, 0))  # first-placed
    y = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf, address=(0, 512))  # second-placed
    x[...] = nl.load(a)
    y[...] = nl.load(a)
    nl.store(out, nl.add(x, y))
    return out


def test_overlapping_live_placements_are_a_typed_error_naming_both_tiles_and_lines():
    with pytest.raises(trnsim.nki.NkiAllocationError) as e:
        overlapping_placements(np.zeros((128, 256), np.float32))
    msg = str(e.value)
    assert "placements overlap" in msg
    assert "'x'" in msg and "'y'" in msg
    assert line_of("first-placed") in msg and line_of("second-placed") in msg
    assert {t["name"] for t in e.value.tiles} == {"x", "y"}


def test_placements_that_share_bytes_at_different_times_are_fine():
    @nki.jit
    def k(a):
        out = nl.ndarray((2, 128, 256), a.dtype, buffer=nl.shared_hbm)
        x = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf, address=(0, 0))
        x[...] = nl.load(a)
        nl.store(out[0], x)
        y = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf, address=(0, 0))
        y[...] = nl.exp(nl.load(a))
        nl.store(out[1], y)
        return out

    a = np.linspace(0, 1, 128 * 256, dtype=np.float32).reshape(128, 256)
    got = k(a)
    np.testing.assert_array_equal(got[0], a)
    np.testing.assert_allclose(got[1], np.exp(a), rtol=1e-6)


def test_a_placement_outside_the_memory_is_refused():
    @nki.jit(platform_target="trn1")
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        x = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf, address=(0, 180224 - 512))
        x[...] = nl.load(a)
        nl.store(out, x)
        return out

    with pytest.raises(trnsim.nki.NkiAllocationError, match="outside its 180224 usable bytes"):
        k(np.zeros((128, 256), np.float32))


# -- reuse, the dependency analysis and the race detector ------------------------------------------


@nki.jit
def reuse_kernel(a, b):
    out = nl.ndarray((2, 128, 512), nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)  # first-tile
    y = nl.exp(x)  # exp-reads
    z = nl.load(b)  # reuser
    nl.store(out[0], y)
    nl.store(out[1], z)
    return out


def test_reused_bytes_are_ordered_by_infer_waits_and_a_missing_wait_is_a_race(monkeypatch):
    from trnsim.nki import _alloc

    # plain first fit, so that z reuses x's bytes in this small kernel (with rotation, bytes are
    # reused only once placement wraps around SBUF; the ordering is the same)
    monkeypatch.setattr(_alloc, "ROTATE", False)
    r = np.random.default_rng(2)
    a, b = r.standard_normal((128, 512), np.float32), r.standard_normal((128, 512), np.float32)
    got = reuse_kernel(a, b)
    np.testing.assert_allclose(got[0], np.exp(a), rtol=1e-6)
    np.testing.assert_array_equal(got[1], b)
    kr = trnsim.nki.last_run()
    prog = kr.program
    ((_, _, x),) = chip_aps(prog, line_of("first-tile"), "dst")
    ((iz, _, z),) = chip_aps(prog, line_of("reuser"), "dst")
    assert z["offset"] == x["offset"]  # z reuses x's bytes once the exp has read them
    ((ie, _, _),) = chip_aps(prog, line_of("exp-reads"), "src")  # ScalarE reads x: its last use
    p = trnsim.Program.from_json(json.dumps(prog))
    p.infer_waits()
    waited = json.loads(p.to_json())
    assert ie in waited["instructions"][iz]["wait"]  # write-after-read: the load waits for the exp
    # the same program without that wait: the race detector reports the reuse
    waited["instructions"][iz]["wait"] = [w for w in waited["instructions"][iz]["wait"] if w != ie]
    racy = trnsim.Program.from_json(json.dumps(waited))
    with pytest.raises(trnsim.SimError) as e:
        trnsim.run(racy, kr.inputs)
    assert e.value.kind == "race"
    assert "write-after-read" in str(e.value)
    assert e.value.index == iz


# -- flash attention at sequence 4096 --------------------------------------------------------------


def _attention_inputs(s, d=128, seed=3):
    import ml_dtypes

    r = np.random.default_rng(seed)
    return [r.standard_normal((s, d)).astype(ml_dtypes.bfloat16) for _ in range(4)]


def _close(got, ref):
    """bf16 operands (q, k, v, and p / ds rounded to bf16 before their matmuls, 2^-9 relative
    each) with fp32 accumulation: within 2^-6 of the output's largest magnitude. A tile whose
    bytes another tile overwrote would be off by the output's own size."""
    ref = np.asarray(ref, np.float64)
    err = np.abs(np.asarray(got, np.float64) - ref).max()
    assert err <= 2.0**-6 * np.abs(ref).max(), (err, np.abs(ref).max())


def _fits(allocation):
    assert allocation["psum"]["highest_byte"] <= 16384 and allocation["psum"]["peak_live_bytes"] <= 16384
    assert allocation["sbuf"]["highest_byte"] <= allocation["sbuf"]["usable_bytes"] == 180224
    # only because tiles die at their last use: all of them together are more than SBUF
    assert allocation["sbuf"]["all_tiles_bytes"] > 2 * 180224


def test_flash_attention_forward_and_backward_at_4096_bf16_fit_and_match_numpy(monkeypatch):
    from nki_corpus import flash_attention as fa

    # On trn1, the generation with the least SBUF (180224 usable bytes per partition).
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    q, k, v, do = _attention_inputs(4096)

    def t(x):
        return np.ascontiguousarray(x.T)

    o, lse = fa.flash_fwd(t(q), t(k), v)
    _fits(trnsim.nki.last_run().allocation)
    ro, rlse, (rdq, rdk, rdv) = fa.reference(q, k, v, do)
    _close(o, ro)
    np.testing.assert_allclose(lse, rlse, rtol=0, atol=1e-4)  # fp32 max and log of an fp32 sum
    dq, dk, dv = fa.flash_bwd(q, t(q), k, t(k), t(v), o, do, t(do), lse)
    _fits(trnsim.nki.last_run().allocation)
    for got, ref in ((dq, rdq), (dk, rdk), (dv, rdv)):
        _close(got, ref)


def test_current_nki_ndarray_address_on_trn2():
    trnsim.nki.install(current=True)
    import nki as nki_current
    import nki.isa as cisa
    import nki.language as cl

    @nki_current.jit
    def k(a):
        out = cl.ndarray(a.shape, a.dtype, buffer=cl.shared_hbm)
        t = cl.ndarray(a.shape, a.dtype, buffer=cl.sbuf, address=(0, 8192))
        cisa.dma_copy(dst=t, src=a)
        u = cl.ndarray(a.shape, a.dtype, buffer=cl.sbuf)
        cisa.tensor_copy(dst=u, src=t)
        cisa.dma_copy(dst=out, src=u)
        return out

    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    np.testing.assert_array_equal(nki_current.simulate(k)(a), a)
    prog = trnsim.nki.last_run().program
    assert prog["target"] == "trn2"
    ((_, _, t),) = chip_aps(prog, None, "dst")[:1]
    assert t["offset"] == 8192
    ((_, _, u),) = [x for x in chip_aps(prog) if x[1] == "dst"][1:2]
    assert u["offset"] + 256 <= 8192 or u["offset"] >= 8192 + 256


@nki.jit
def accumulate_into_fresh_psum(a, b):
    out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((nl.par_dim(128), 512), nl.float32, buffer=ncc.psum.mod_alloc(base_bank=3))
    for kk in nl.affine_range(a.shape[0] // 128):
        acc += nisa.nc_matmul(nl.load(a[kk * 128 : (kk + 1) * 128, :]), nl.load(b[kk * 128 : (kk + 1) * 128, :]))
    nl.store(out, nl.copy(acc))
    return out


def test_the_first_matmul_accumulated_into_unwritten_psum_overwrites_it():
    """`psum += nc_matmul(...)` with nothing written there yet (AWS's attention tutorial v8a-v11
    never zero their PSUM accumulators): the first matmul writes, the next ones add."""
    r = np.random.default_rng(4)
    a, b = r.standard_normal((384, 128), np.float32), r.standard_normal((384, 512), np.float32)
    np.testing.assert_allclose(accumulate_into_fresh_psum(a, b), a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    mms = [
        next(iter(i["op"].values())) for i in trnsim.nki.last_run().program["instructions"] if "nc_matmul" in i["op"]
    ]
    assert [m.get("accumulate", False) for m in mms] == [False, True, True]
    assert all(m["dst"]["offset"] == 3 * 2048 for m in mms)
