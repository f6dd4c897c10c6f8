#!/usr/bin/env python3
"""Replay a captured model (docs/model-format.md) in PyTorch CPU eager, node by node, and time it.

This is the baseline of the model speed benchmark (conformance/benches/models.rs,
docs/performance.md "Models"): the same Core ATen graph the simulator runs, each node called as
its `torch.ops.aten` overload on the recipe weights and the stored inputs, on one thread.

Unlike capture.py it does not pin ATEN_CPU_CAPABILITY: the baseline is PyTorch at its best on
this CPU, not the reproducible reference path. The final outputs are checked against the stored
references (a mismatch is reported, not hidden: the replay would then not be the same graph).

  python golden/models/replay.py DIR [--repeat N]   # prints one JSON line
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np
import safetensors.torch
import torch

# golden/dtypes.py, in the parent directory.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dtypes

torch.set_num_threads(1)

DTYPES = dtypes.NAMED
MASK64 = (1 << 64) - 1


def recipe_fill(r, shape, dtype):
    """The weight recipe (docs/model-format.md, "Weights"); capture.py writes the same."""
    n = math.prod(shape)
    with np.errstate(over="ignore"):
        idx = np.arange(1, n + 1, dtype=np.uint64)
        z = np.uint64(r["seed"] & MASK64) + idx * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(40)).astype(np.float64) * 2.0**-24
    v = (r["lo"] + (r["hi"] - r["lo"]) * u).astype(np.float32)
    return torch.from_numpy(v.reshape(shape)).to(dtype)


def overload(op):
    name, _, ov = op.partition(".")
    packet = getattr(torch.ops.aten, name)
    return getattr(packet, ov or "default")


def decode(v, env):
    ((kind, x),) = v.items()
    if kind == "tensor":
        return env[x]
    if kind == "tensors":
        return [None if n is None else env[n] for n in x]
    if kind == "float":
        return float(x)
    if kind in ("int", "bool", "ints", "bools", "str", "none"):
        return x
    if kind == "floats":
        return [float(f) for f in x]
    if kind == "dtype":
        return DTYPES[x]
    if kind == "layout":
        return torch.strided
    if kind == "device":
        return torch.device(x)
    if kind == "memory_format":
        return getattr(torch, x)
    if kind == "complex":
        return complex(float(x[0]), float(x[1]))
    raise ValueError(f"cannot decode {v}")


def load(d):
    with open(os.path.join(d, "graph.json")) as f:
        doc = json.load(f)
    stored = {}
    for name in sorted(os.listdir(d)):
        if name.endswith(".safetensors"):
            stored.update(safetensors.torch.load_file(os.path.join(d, name)))
    leaves = {}
    for name in doc["inputs"]:
        leaves[name] = stored[name]
    for name, spec in doc["weights"].items():
        meta = doc["values"][name]
        if spec.get("recipe"):
            leaves[name] = recipe_fill(spec["recipe"], meta["shape"], DTYPES[meta["dtype"]])
        else:
            leaves[name] = stored[name]
    return doc, stored, leaves


def run(doc, leaves):
    """One forward: every node, in order, as its aten overload."""
    env = dict(leaves)
    for n in doc["nodes"]:
        if n["op"] == "getitem":
            continue
        args = [decode(a, env) for a in n["args"]]
        kwargs = {k: decode(v, env) for k, v in n["kwargs"].items()}
        out = overload(n["op"])(*args, **kwargs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for i, spec in enumerate(n["outputs"]):
            if "tensor" in spec:
                env[spec["tensor"]] = outs[i]
            elif "tensors" in spec:
                for name, t in zip(spec["tensors"], outs[i] if len(n["outputs"]) > 1 else outs):
                    if name is not None:
                        env[name] = t
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--repeat", type=int, default=5, help="timed forwards after one warm-up")
    a = ap.parse_args()
    doc, stored, leaves = load(a.dir)
    with torch.no_grad():
        env = run(doc, leaves)  # warm-up (allocator, oneDNN primitive caches)
        times, cpu = [], []
        for _ in range(a.repeat):
            t0, c0 = time.perf_counter(), time.thread_time()
            env = run(doc, leaves)
            cpu.append(time.thread_time() - c0)
            times.append(time.perf_counter() - t0)
    # The replay must be the captured graph: its outputs against the stored references.
    worst = 0.0
    for name in doc["outputs"]:
        ref = stored[f"ref.{name}"].double()
        got = env[name].double()
        worst = max(worst, float((got - ref).abs().max()) if ref.numel() else 0.0)
    json.dump(
        {
            "model": doc["name"],
            "nodes": len(doc["nodes"]),
            "threads": torch.get_num_threads(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__,
            "best_ms": min(times) * 1e3,
            "median_ms": statistics.median(times) * 1e3,
            "repeat": a.repeat,
            # The calling thread's CPU time: with one thread every op runs on it, and unlike wall
            # time it does not grow while other processes hold the core.
            "cpu_best_ms": min(cpu) * 1e3,
            "cpu_median_ms": statistics.median(cpu) * 1e3,
            "max_abs_diff_vs_reference": worst,
        },
        sys.stdout,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
