"""NKI front-end cost, against running the same Program straight from its JSON in the same run
(docs/performance.md, "NKI front-end"). Run once:

    python conformance/python/benches/bench_nki.py

1. 1024^3 bf16 tiled matmul kernels (tests/nki_corpus/matmul.py `matmul_tiled`, loads in the K loop,
   and `matmul_blocked`, loads hoisted into block tiles): trace + run through the front-end, vs
   `trnsim.run(Program.from_json(json))` of the program it traced. Target <= 2x.
2. A 4096x4096 fp32 softmax kernel (`softmax_nl`): tracing alone vs simulating its program.
   Target: tracing is cheaper.
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


def best_of(n, f):
    """The least process CPU time (user + system) of n calls, and the last result. CPU time, not
    wall clock: the machine is shared, and both sides of a ratio are measured alike."""
    times, out = [], None
    for _ in range(n):
        t0 = time.process_time()
        out = f()
        times.append(time.process_time() - t0)
    return min(times), out


def run_json(text, inputs):
    return trnsim.run(trnsim.Program.from_json(text), inputs)


def main():
    r = np.random.default_rng(0)
    a_t = r.standard_normal((1024, 1024)).astype(ml_dtypes.bfloat16)
    b = r.standard_normal((1024, 1024)).astype(ml_dtypes.bfloat16)
    for kernel in (matmul.matmul_tiled, matmul.matmul_blocked):
        kr = trnsim.nki.to_program(kernel.func, (a_t, b))
        text = kr.program_json()
        t_json, res = best_of(5, functools.partial(run_json, text, kr.inputs))
        t_front, out = best_of(5, functools.partial(kernel, a_t, b))
        np.testing.assert_array_equal(out, res.outputs[kr.outputs[0]])
        ninstr = len(kr.program["instructions"])
        print(f"{kernel.__name__} 1024^3 bf16 ({ninstr} instructions): front-end trace+run {t_front * 1e3:.1f} ms, "
              f"program from JSON {t_json * 1e3:.1f} ms, ratio {t_front / t_json:.2f} (target <= 2)")

    x = r.standard_normal((4096, 4096)).astype(np.float32)
    t_trace, kr2 = best_of(3, lambda: trnsim.nki.to_program(softmax.softmax_nl.func, (x,)))
    text2 = kr2.program_json()
    t_sim, _ = best_of(1, lambda: run_json(text2, kr2.inputs))
    print(f"softmax_nl 4096x4096 f32 ({len(kr2.program['instructions'])} instructions): trace {t_trace * 1e3:.1f} ms, "
          f"simulate {t_sim * 1e3:.1f} ms, trace/simulate {t_trace / t_sim:.3f} (target < 1)")


if __name__ == "__main__":
    main()
