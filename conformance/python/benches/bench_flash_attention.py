"""Tracing plus simulating our flash-attention forward at sequence 4096 bf16 (tests/nki_corpus/
flash_attention.py), against simulating the program it traced from its JSON, in the same run
(docs/performance.md, "NKI allocation"). Run once:

    python conformance/python/benches/bench_flash_attention.py

The front-end side is a whole kernel call: trace, allocation by live ranges, the Program JSON,
`Program.from_json`, `infer_waits` and the run. The JSON side is `Program.from_json` of the
program with its waits already inferred, and the run. Target: front-end / JSON <= 3.
"""

import functools
import json
import os
import sys
import time

import ml_dtypes
import numpy as np
import trnsim
import trnsim.nki

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
trnsim.nki.install()

from nki_corpus import flash_attention as fa


def best_of(n, f):
    """The least process CPU time (user + system) of n calls, and the last result (CPU time: the
    machine is shared, and both sides of the ratio are measured alike)."""
    times, out = [], None
    for _ in range(n):
        t0 = time.process_time()
        out = f()
        times.append(time.process_time() - t0)
    return min(times), out


def run_json(text, inputs):
    return trnsim.run(trnsim.Program.from_json(text), inputs)


def main():
    s, d = 4096, 128
    r = np.random.default_rng(0)
    q, k, v = (r.standard_normal((s, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    args = (np.ascontiguousarray(q.T), np.ascontiguousarray(k.T), v)
    kr = trnsim.nki.to_program(fa.flash_fwd.func, args)
    prog = trnsim.Program.from_json(kr.scheduled_json())
    prog.infer_waits()
    text = prog.to_json()
    t_json, res = best_of(3, functools.partial(run_json, text, kr.inputs))
    t_front, (o, _lse) = best_of(3, functools.partial(fa.flash_fwd, *args))
    np.testing.assert_array_equal(o, res.outputs[kr.outputs[0]])
    t_trace, _ = best_of(3, lambda: trnsim.nki.to_program(fa.flash_fwd.func, args))
    n = len(json.loads(text)["instructions"])
    a = kr.allocation
    print(
        f"flash_fwd S={s} d={d} bf16 ({n} instructions; SBUF peak {a['sbuf']['peak_live_bytes']} of "
        f"{a['sbuf']['usable_bytes']} B/partition, PSUM peak {a['psum']['peak_live_bytes']} B): front-end trace+run "
        f"{t_front:.2f} s (of which trace+allocate {t_trace:.2f} s), program from JSON {t_json:.2f} s, "
        f"ratio {t_front / t_json:.2f} (target <= 3)"
    )


if __name__ == "__main__":
    main()
