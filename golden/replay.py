#!/usr/bin/env python3
"""Replay the committed golden cases on PyTorch (CPU) and time them.

For each case of the golden index: load its inputs from the .safetensors file, decode the
recorded call (docs/golden-format.md, "Values"), and call the op through torch.ops.aten with
exactly those arguments. Only the op calls are timed (time.perf_counter_ns around each call);
loading and decoding are not. Prints the total of the calls, the whole script's wall time and
its peak memory (ru_maxrss = VmHWM), so that it can be put next to `trnconf run` (which prints
its wall time and peak memory) in one sitting. See docs/performance.md, "Conformance suite".

    .venv/bin/python golden/replay.py                 # every case
    .venv/bin/python golden/replay.py --filter relu   # ids containing "relu" (or a glob)
    .venv/bin/python golden/replay.py --json t.json   # per-case times too
"""

import argparse
import fnmatch
import json
import math
import os
import resource
import sys
import time
import warnings

import dtypes
import torch
from safetensors import safe_open

DT = dtypes.NAMED


def dec_float(x):
    if isinstance(x, str):
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[x]
    return float(x)


def load_case(path):
    """The case's metadata and its tensors (complex ones restored from their real view)."""
    with safe_open(path, framework="pt") as f:
        meta = json.loads(f.metadata()["trnconf"])
        tensors = {}
        for name in f.keys():
            t = f.get_tensor(name)
            if meta["tensors"].get(name, {}).get("dtype") == "c64":
                t = torch.view_as_complex(t.contiguous())
            tensors[name] = t
    return meta, tensors


def decode(v, tensors):
    ((kind, x),) = v.items()
    if kind == "tensor":
        return tensors[x].clone()  # the call may write to its inputs (in-place ops)
    if kind == "tensors":
        return [None if n is None else tensors[n].clone() for n in x]
    if kind in ("int", "bool", "str"):
        return x
    if kind == "float":
        return dec_float(x)
    if kind == "complex":
        return complex(dec_float(x[0]), dec_float(x[1]))
    if kind == "ints":
        return list(x)
    if kind == "floats":
        return [dec_float(y) for y in x]
    if kind == "bools":
        return list(x)
    if kind == "dtype":
        return DT[x]
    if kind == "layout":
        return getattr(torch, x)
    if kind == "device":
        return torch.device(x)
    if kind == "memory_format":
        return getattr(torch, x)
    if kind == "none":
        return None
    raise ValueError(f"unknown value kind {kind}")


def aten_op(name):
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def matches(pattern, case_id):
    if any(c in pattern for c in "*?"):
        return fnmatch.fnmatchcase(case_id, pattern)
    return pattern in case_id


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--golden", default=here, help="golden directory (default: this script's)")
    ap.add_argument("--filter", help="only case ids containing this (or matching it, with * or ?)")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--json", help="write per-case times (ms) and totals here")
    args = ap.parse_args()
    start = time.perf_counter()
    warnings.filterwarnings("ignore")  # PyTorch warns about some recorded edge cases; they are the point
    if args.threads:
        torch.set_num_threads(args.threads)
    with open(os.path.join(args.golden, "index.json")) as f:
        index = json.load(f)
    cases = [c for c in index["cases"] if not args.filter or matches(args.filter, c["id"])]
    times = {}
    errors = {}
    op_ns = 0
    for c in cases:
        try:
            meta, tensors = load_case(os.path.join(args.golden, c["file"]))
            fn = aten_op(meta["op"])
            call_args = [decode(a, tensors) for a in meta["args"]]
            call_kwargs = {k: decode(v, tensors) for k, v in meta["kwargs"].items()}
            seed = meta.get("provenance", {}).get("seed")
            if seed is not None:
                torch.manual_seed(seed)
            t0 = time.perf_counter_ns()
            fn(*call_args, **call_kwargs)
            dt = time.perf_counter_ns() - t0
        except Exception as e:  # noqa: BLE001 - a case that cannot replay is reported, not fatal
            errors[c["id"]] = f"{type(e).__name__}: {e}".splitlines()[0]
            continue
        op_ns += dt
        times[c["id"]] = dt / 1e6
    wall = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, golden {args.golden}")
    print(f"{len(cases)} cases: {len(times)} replayed, {len(errors)} could not be replayed")
    for cid, e in sorted(errors.items())[:10]:
        print(f"  error {cid}: {e}")
    print("slowest calls:")
    for cid, ms in sorted(times.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {ms:9.3f} ms  {cid}")
    print(
        f"op calls {op_ns / 1e9:.3f} s (timed calls only), wall time {wall:.2f} s, "
        f"peak memory {peak_kib / 1024:.1f} MiB (ru_maxrss)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "torch": torch.__version__,
                    "threads": torch.get_num_threads(),
                    "cases": len(cases),
                    "replayed": len(times),
                    "errors": errors,
                    "op_calls_s": op_ns / 1e9,
                    "wall_s": wall,
                    "peak_rss_kib": peak_kib,
                    "times_ms": times,
                },
                f,
                indent=1,
                sort_keys=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
