"""NKI front-end cost, against running the same Program straight from its JSON in the same run
(docs/performance.md, "NKI front-end"). Run once:

    python conformance/python/benches/bench_nki.py

1. A 1024^3 bf16 tiled matmul kernel (tests/nki_corpus/matmul.py `matmul_tiled`): trace + run through
   the front-end, vs `trnsim.run(Program.from_json(json))` of the program it traced. Target <= 2x.
2. A 4096x4096 fp32 softmax kernel (`softmax_nl`): tracing alone vs simulating its program.
   Target: tracing is cheaper.
"""

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
    times, out = [], None
    for _ in range(n):
        t0 = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t0)
    return min(times), out


def run_json(text, inputs):
    return trnsim.run(trnsim.Program.from_json(text), inputs)


def main():
    r = np.random.default_rng(0)
    a_t = r.standard_normal((1024, 1024)).astype(ml_dtypes.bfloat16)
    b = r.standard_normal((1024, 1024)).astype(ml_dtypes.bfloat16)
    kr = trnsim.nki.to_program(matmul.matmul_tiled.func, (a_t, b))
    text = kr.program_json()
    t_json, res = best_of(2, lambda: run_json(text, kr.inputs))
    t_front, out = best_of(2, lambda: matmul.matmul_tiled(a_t, b))
    np.testing.assert_array_equal(out, res.outputs[kr.outputs[0]])
    ninstr = len(kr.program["instructions"])
    print(f"matmul 1024^3 bf16 ({ninstr} instructions): front-end trace+run {t_front:.3f} s, "
          f"program from JSON {t_json:.3f} s, ratio {t_front / t_json:.2f} (target <= 2)")

    x = r.standard_normal((4096, 4096)).astype(np.float32)
    t_trace, kr2 = best_of(2, lambda: trnsim.nki.to_program(softmax.softmax_nl.func, (x,)))
    text2 = kr2.program_json()
    t_sim, _ = best_of(1, lambda: run_json(text2, kr2.inputs))
    print(f"softmax 4096x4096 f32 ({len(kr2.program['instructions'])} instructions): trace {t_trace:.3f} s, "
          f"simulate {t_sim:.3f} s, trace/simulate {t_trace / t_sim:.3f} (target < 1)")


if __name__ == "__main__":
    main()
