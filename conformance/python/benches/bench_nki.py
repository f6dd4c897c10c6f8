"""NKI front-end cost, against running the same Program straight from its JSON in the same run
(docs/performance.md, "NKI front-end"). Run once:

    python conformance/python/benches/bench_nki.py

1. 1024^3 bf16 tiled matmul kernels (tests/nki_corpus/matmul.py `matmul_tiled`, loads in the K loop,
   and `matmul_blocked`, loads hoisted into block tiles): trace + run through the front-end, vs
   `trnsim.run(Program.from_json(json))` of the program it traced. Target <= 2x.
2. A 4096x4096 fp32 softmax kernel (`softmax_nl`): tracing alone vs simulating its program.
   Target: tracing is cheaper.
3. A flash-attention forward in the current API (tests/test_nki_corpus_current.py `_flash_fwd`),
   bf16, sequence 2048, head dim 128, on trn2: trace + run vs the program from JSON. Target <= 3x.
   `--profile` prints the trace's cProfile top entries.
"""

import functools
import os
import sys
import time

import ml_dtypes
import numpy as np
import trnsim
import trnsim.nki

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
trnsim.nki.install()

from nki_corpus import matmul, softmax
from test_nki_corpus_current import _flash_fwd


def best_of(n, f):
    """The least process CPU time (user + system) of n calls, and the last result. CPU time, not
    wall clock: the machine is shared, and both sides of a ratio are measured alike."""
    times, out = [], None
    for _ in range(n):
        t0 = time.process_time()
        out = f()
        times.append(time.process_time() - t0)
    return min(times), out


def run_json(text, inputs, target=None):
    """The program straight from its JSON, on its own target unless one is given (the front-end
    traces for its default target, so the baseline runs what the front-end ran)."""
    return trnsim.run(trnsim.Program.from_json(text), inputs, target=target)


def json_with_waits(kr):
    """The program the front-end runs (its DMAs on their queues, `scheduled_json`) with its waits
    filled in, so the baseline runs the same program and does not pay for the dependency analysis."""
    prog = trnsim.Program.from_json(kr.scheduled_json())
    prog.infer_waits()
    return prog.to_json()


def main():
    r = np.random.default_rng(0)
    a_t = r.standard_normal((1024, 1024)).astype(ml_dtypes.bfloat16)
    b = r.standard_normal((1024, 1024)).astype(ml_dtypes.bfloat16)
    for kernel in (matmul.matmul_tiled, matmul.matmul_blocked):
        kr = trnsim.nki.to_program(kernel.func, (a_t, b))
        text = json_with_waits(kr)
        t_json, res = best_of(5, functools.partial(run_json, text, kr.inputs))
        t_front, out = best_of(5, functools.partial(kernel, a_t, b))
        np.testing.assert_array_equal(out, res.outputs[kr.outputs[0]])
        ninstr = len(kr.program["instructions"])
        print(
            f"{kernel.__name__} 1024^3 bf16 ({ninstr} instructions): front-end trace+run {t_front * 1e3:.1f} ms, "
            f"program from JSON {t_json * 1e3:.1f} ms, ratio {t_front / t_json:.2f} (target <= 2)"
        )

    x = r.standard_normal((4096, 4096)).astype(np.float32)
    t_trace, kr2 = best_of(3, lambda: trnsim.nki.to_program(softmax.softmax_nl.func, (x,)))
    text2 = json_with_waits(kr2)
    t_sim, _ = best_of(1, lambda: run_json(text2, kr2.inputs))
    print(
        f"softmax_nl 4096x4096 f32 ({len(kr2.program['instructions'])} instructions): trace {t_trace * 1e3:.1f} ms, "
        f"simulate {t_sim * 1e3:.1f} ms, trace/simulate {t_trace / t_sim:.3f} (target < 1)"
    )

    import nki
    import nki.isa as nisa
    import nki.language as nl

    flash = _flash_fwd(nki, nl, nisa)
    seq, d = 2048, 128
    q, k, v = (r.standard_normal((seq, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    kr3 = trnsim.nki.to_program(flash.func, (q, k, v), target="trn2", lnc=1)
    text3 = json_with_waits(kr3)
    t_json3, res3 = best_of(3, functools.partial(run_json, text3, kr3.inputs, "trn2"))
    t_front3, out3 = best_of(3, functools.partial(flash, q, k, v))
    np.testing.assert_array_equal(out3, res3.outputs[kr3.outputs[0]])
    print(
        f"flash_fwd seq {seq} d {d} bf16 trn2 ({len(kr3.program['instructions'])} instructions): front-end "
        f"trace+run {t_front3 * 1e3:.1f} ms, program from JSON {t_json3 * 1e3:.1f} ms, ratio "
        f"{t_front3 / t_json3:.2f} (target <= 3)"
    )
    if "--profile" in sys.argv:
        import cProfile
        import pstats

        pr = cProfile.Profile()
        pr.enable()
        trnsim.nki.to_program(flash.func, (q, k, v), target="trn2", lnc=1)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(8)


if __name__ == "__main__":
    main()
