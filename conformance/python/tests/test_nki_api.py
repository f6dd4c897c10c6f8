"""The `nki` entry points on trnsim: install(), jit / baremetal / simulate_kernel / benchmark /
profile, typing annotations, dtypes in and out, and what a traced Program carries."""

import json
import sys

import ml_dtypes
import numpy as np
import pytest
import trnsim
import trnsim.nki


def test_install_makes_the_legacy_names_resolve():
    mod = trnsim.nki.install()
    import neuronxcc.nki.compiler as ncc
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
    import neuronxcc.nki.typing as nt
    from neuronxcc import nki
    from neuronxcc import nki as nki2

    assert nki is mod is nki2 is sys.modules["trnsim.nki"]
    assert nl is trnsim.nki.language and nisa is trnsim.nki.isa and nt is trnsim.nki.typing
    assert ncc is trnsim.nki.compiler
    assert trnsim.nki.install() is mod  # idempotent


trnsim.nki.install()

import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt
from neuronxcc import nki


def copy_kernel(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a))
    return out


def test_call_styles():
    x = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    np.testing.assert_array_equal(nki.jit(copy_kernel)(x), x)
    np.testing.assert_array_equal(nki.jit(mode="simulation")(copy_kernel)(x), x)
    np.testing.assert_array_equal(nki.baremetal(copy_kernel)(x), x)
    np.testing.assert_array_equal(nki.baremetal(save_neff_name="x.neff")(copy_kernel)(x), x)
    np.testing.assert_array_equal(nki.simulate_kernel(copy_kernel, x), x)
    np.testing.assert_array_equal(nki.simulate_kernel(nki.jit(copy_kernel), x), x)


@pytest.mark.parametrize(
    "dtype",
    [
        ml_dtypes.bfloat16,
        ml_dtypes.float8_e4m3,
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e5m2,
        np.float16,
        np.int8,
        np.uint16,
        np.int32,
    ],
)
def test_dtypes_round_trip_bit_exactly(dtype):
    bits = np.random.default_rng(0).integers(0, 256, (128, 64), dtype=np.uint8)
    x = (
        bits.view(np.dtype(dtype))
        if np.dtype(dtype).itemsize == 1
        else (
            np.random.default_rng(1).integers(0, 2**16, (128, 64)).astype(np.uint16).view(np.dtype(dtype))
            if np.dtype(dtype).itemsize == 2
            else np.random.default_rng(2).integers(-(2**31), 2**31, (128, 64), dtype=np.int64).astype(np.int32)
        )
    )
    got = nki.jit(copy_kernel)(x)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.view(np.uint8), x.view(np.uint8))


def test_benchmark_returns_the_simulator_statistics():
    def mm(a_t, b):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(nl.matmul(nl.load(a_t), nl.load(b), transpose_x=True)))
        return out

    bench = nki.benchmark(warmup=2, iters=5)(mm)
    a = np.ones((128, 128), ml_dtypes.bfloat16)
    b = np.ones((128, 512), ml_dtypes.bfloat16)
    out = bench(a, b)
    np.testing.assert_array_equal(out, np.full((128, 512), 128.0))
    res = bench.benchmark_result
    stats = res.stats
    # the kernel's 3 DMAs as run: the 32 KiB load whole, the 128 KiB load and the 256 KiB store
    # cut into 4 and 8 pieces of 32 KiB for several queues (KernelRun.scheduled)
    assert stats["instructions"]["tensor"] == 1 and stats["instructions"]["dma"] == 1 + 4 + 8
    assert stats["flops"] >= 2 * 128 * 128 * 512
    assert stats["est_ns"]["tensor"] > 0
    p50 = res.nc_latency.get_latency_percentile(50)
    assert p50 > 0 and p50 == res.nc_latency.get_latency_percentile(99)
    prof = nki.profile(working_directory=".")(mm)
    prof(a, b)
    assert prof.benchmark_result.stats == stats


def test_every_instruction_has_the_kernel_line():
    nki.jit(copy_kernel)(np.zeros((4, 4), np.float32))
    run = trnsim.nki.last_run()
    locs = [ins["loc"] for ins in run.program["instructions"]]
    assert locs and all(loc.startswith("test_nki_api.py:") for loc in locs)
    assert run.stats is not None and run.trace_s > 0


def test_a_long_unrolled_kernel_names_each_instruction_line_as_python_does():
    # trnsim finds a call's source line by bisecting the code object's line table (frame_line):
    # CPython's f_lineno rescans the table from the start, quadratic over an unrolled kernel.
    # Lines are checked against f_lineno, and each instruction against the line that issued it,
    # across multi-line calls, blank lines and a second kernel compiled to the same id slot.
    from trnsim.nki._core import frame_line

    n = 3000
    body = ["def long_kernel(a):", "    t = nl.load(a)"]
    want = {}
    for i in range(n):
        if i % 7 == 0:
            body += ["", "    # a comment"]
        if i % 5 == 0:
            body += ["    t = nl.add(", "        t,", f"        {i % 3},", "    )"]
            want[i] = len(body) - 3  # a call over several lines: its first line
        else:
            body.append(f"    t = nl.add(t, {i % 3})")
            want[i] = len(body)
    body += ["    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)", "    nl.store(out, t)", "    return out"]
    seen = []

    def probe():
        f = sys._getframe(1)
        seen.append((frame_line(f), f.f_lineno))

    for _ in range(2):
        ns = {"nl": nl, "probe": probe}
        exec(compile("\n".join(body) + "\n", "long_kernel.py", "exec"), ns)  # noqa: S102 (the test's own source)
        got = nki.jit(ns["long_kernel"])(np.zeros((2, 3), np.float32))
        np.testing.assert_array_equal(got, np.full((2, 3), sum(i % 3 for i in range(n)), np.float32))
        adds = [ins["loc"] for ins in trnsim.nki.last_run().program["instructions"] if ins["engine"] != "dma"]
        assert len(adds) == n, len(adds)
        lines = [int(loc.rsplit(":", 1)[1]) for loc in adds]
        assert all(lo < hi for lo, hi in zip(lines, lines[1:]))
        for i in (0, 1, 5, 6, 7, n // 2, n - 1):
            assert lines[i] == want[i], (i, lines[i], want[i])
        probe()
        assert seen[-1][0] == seen[-1][1]
    # f_lineno itself over a long function, every line
    src = "def f(probe):\n" + "".join(f"    probe(){'  # x' if i % 2 else ''}\n" for i in range(2000))
    ns = {}
    exec(compile(src, "probe_lines.py", "exec"), ns)  # noqa: S102 (the test's own source)
    seen.clear()
    ns["f"](probe)
    assert len(seen) == 2000 and all(a == b for a, b in seen)
    assert [a for a, _ in seen] == list(range(2, 2002))


def test_to_program_gives_runnable_json():
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    kr = trnsim.nki.to_program(copy_kernel, (x,))
    prog = trnsim.Program.from_json(kr.program_json())
    assert len(prog) == 2
    res = trnsim.run(prog, kr.inputs)
    np.testing.assert_array_equal(res.outputs[kr.outputs[0]], x)


def test_a_run_spreads_the_dmas_over_the_queues_and_values_do_not_change():
    """`run` puts each DMA on the next DMA queue of its core (round robin) and infers the waits:
    independent loads overlap in the timeline, dependent ones stay ordered, and the outputs are
    those of the trace with every DMA on queue 0."""

    def eight_tiles(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for t in nl.affine_range(a.shape[0] // 128):
            x = nl.load(a[t * 128 : (t + 1) * 128, :])
            nl.store(out[t * 128 : (t + 1) * 128, :], nl.multiply(x, 2.0))
        return out

    x = np.arange(1024 * 64, dtype=np.float32).reshape(1024, 64)
    kr = trnsim.nki.to_program(eight_tiles, (x,))
    sched = json.loads(kr.scheduled_json())
    dma = [i for i in sched["instructions"] if i["engine"] == "dma"]
    assert [i["queue"] for i in dma] == list(range(16))
    assert all("queue" not in i for i in kr.program["instructions"])
    out = kr.run()
    np.testing.assert_array_equal(out, 2 * x)
    spread = kr.stats["timeline"]["makespan_ns"]
    one = trnsim.Program.from_json(kr.program_json())
    one.infer_waits()
    res = trnsim.run(one, kr.inputs)
    np.testing.assert_array_equal(res.outputs[kr.outputs[0]], 2 * x)
    assert spread < 0.75 * res.stats["timeline"]["makespan_ns"]  # 25 µs against 44 µs on trn2


def test_a_run_cuts_a_large_dma_into_pieces_for_several_queues():
    """One [128, 4096] fp32 load (2 MiB) is one DMA instruction in the trace; the run cuts it by
    rows into 16 pieces on 16 queues (as trnconf's lowerings do), so it takes about a sixteenth
    of one queue's time, with the same values."""

    def big_copy(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.multiply(nl.load(a), 3.0))
        return out

    x = np.arange(128 * 4096, dtype=np.float32).reshape(128, 4096)
    kr = trnsim.nki.to_program(big_copy, (x,))
    traced = [i for i in kr.program["instructions"] if i["engine"] == "dma"]
    assert len(traced) == 2
    sched = json.loads(kr.scheduled_json())
    dma = [i for i in sched["instructions"] if i["engine"] == "dma"]
    assert len(dma) == 32 and {i["queue"] for i in dma} == set(range(16))
    rows = sorted(
        (i["op"]["dma_copy"]["dst"].get("start_partition", 0), i["op"]["dma_copy"]["dst"]["partitions"])
        for i in dma[:16]
    )
    assert rows == [(8 * k, 8) for k in range(16)]
    np.testing.assert_array_equal(kr.run(), 3 * x)
    cut = kr.stats["timeline"]["makespan_ns"]
    whole = trnsim.Program.from_json(kr.program_json())
    whole.infer_waits()
    res = trnsim.run(whole, kr.inputs)
    np.testing.assert_array_equal(res.outputs[kr.outputs[0]], 3 * x)
    assert cut < 0.25 * res.stats["timeline"]["makespan_ns"]


def test_typing_annotations_and_compiler_decorators():
    @nki.jit
    @ncc.skip_middle_end_transformations
    def k(a: nt.tensor[(128, 4), nl.float32]) -> nt.tensor:
        return copy_kernel(a)

    x = np.ones((128, 4), np.float32)
    np.testing.assert_array_equal(k(x), x)
    assert nt.tensor[(128, 4), nl.float32].check(x)
    assert not nt.tensor[(64, 4), nl.float32].check(x)
    assert ncc.sbuf.alloc(lambda *a: (0, 0)).name == "sbuf"  # direct allocation: test_nki_alloc.py


def test_trace_subkernel_inline():
    @nki.trace
    def double(t):
        return nl.multiply(t, 2.0)

    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, double(nl.load(a)))
        return out

    x = np.ones((8, 8), np.float32)
    np.testing.assert_array_equal(k(x), 2 * x)


def test_returning_a_tuple_and_private_hbm_scratch():
    @nki.jit
    def k(a):
        o1 = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        scratch = nl.ndarray(a.shape, a.dtype, buffer=nl.hbm)
        nl.store(scratch, nl.load(a))
        t = nl.load(scratch)
        nl.store(o1, t)
        nl.store(o2, nl.add(t, t))
        return o1, o2

    x = np.ones((8, 8), np.float32)
    o1, o2 = k(x)
    np.testing.assert_array_equal(o1, x)
    np.testing.assert_array_equal(o2, 2 * x)
