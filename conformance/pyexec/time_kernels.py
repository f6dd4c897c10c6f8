"""Estimated vs measured device time for a fixed kernel set (nightly on trn1, docs/timeline.md).

For each case id in the list file: `trnconf lower` writes the program and its NKI kernel,
`trnsim run` gives the estimated device time (the timeline makespan), and the kernel is timed on
the NeuronCore with `neuronxcc.nki.benchmark` (p50 of `nc_latency`, in microseconds; SDK
2.26-2.28). Writes timing.json and timing.csv with one row per case: estimate, measurement and
their ratio. Where the kernel cannot be measured (no device, no neuronxcc, emit or compile
failure) the row says why and carries the estimate alone, so the first night gives a ratio for
every kernel that runs.

Usage: time_kernels.py --trnconf BIN --trnsim BIN --cases FILE --out DIR
"""

import argparse
import csv
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

NP_DTYPES = {
    "f32": "float32",
    "f16": "float16",
    "i32": "int32",
    "u32": "uint32",
    "i16": "int16",
    "u16": "uint16",
    "i8": "int8",
    "u8": "uint8",
    "bool": "bool",
}


def estimate(trnsim, program):
    out = subprocess.run([trnsim, "run", str(program)], capture_output=True, text=True, check=False)
    m = re.search(r"estimated device time ([0-9.]+) µs", out.stdout)
    if out.returncode != 0 or not m:
        raise RuntimeError(f"trnsim run failed: {out.stderr.strip()[:500]}")
    return float(m.group(1))


def inputs_for(program_path):
    import numpy as np

    prog = json.loads(Path(program_path).read_text())
    rng = np.random.default_rng(0)
    args = {}
    for d in prog["hbm"]:
        if d["role"] != "input":
            continue
        dt = d["dtype"]
        if dt == "bf16":
            import neuronxcc.nki.language as nl

            a = rng.standard_normal(d["shape"]).astype(np.float32).astype(nl.bfloat16)
        elif dt in NP_DTYPES:
            a = np.zeros(d["shape"], dtype=NP_DTYPES[dt])
            if dt.startswith("f"):
                a = rng.standard_normal(d["shape"]).astype(NP_DTYPES[dt])
        else:
            raise RuntimeError(f"input dtype {dt} has no numpy type here")
        args[d["name"]] = a
    return args


def measure(kernel_path, program_path, warmup, iters):
    from neuronxcc import nki

    spec = importlib.util.spec_from_file_location("timed_kernel", kernel_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ins = inputs_for(program_path)
    args = [ins[n] for n in mod.INPUT_NAMES]
    func = getattr(mod.kernel, "func", None) or getattr(mod.kernel, "__wrapped__", None) or mod.kernel
    bench = nki.benchmark(warmup=warmup, iters=iters)(func)
    bench(*args)
    return float(bench.benchmark_result.nc_latency.get_latency_percentile(50))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trnconf", required=True)
    ap.add_argument("--trnsim", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cases = [
        line.split("#")[0].strip() for line in Path(a.cases).read_text().splitlines() if line.split("#")[0].strip()
    ]
    rows = []
    for case in cases:
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", case)
        prog, kern = out / f"{stem}.json", out / f"{stem}.py"
        row = {"case": case, "est_us": None, "measured_us": None, "ratio": None, "note": ""}
        try:
            subprocess.run([a.trnconf, "lower", case, "-o", str(prog)], check=True, capture_output=True)
            row["est_us"] = estimate(a.trnsim, prog)
            subprocess.run(
                [a.trnconf, "lower", case, "--emit", "nki", "-o", str(kern)], check=True, capture_output=True
            )
            row["measured_us"] = measure(kern, prog, a.warmup, a.iters)
            row["ratio"] = row["measured_us"] / row["est_us"] if row["est_us"] else None
        except subprocess.CalledProcessError as e:
            row["note"] = f"{' '.join(e.cmd[1:3])}: {e.stderr.decode(errors='replace').strip()[:300]}"
        except Exception as e:  # noqa: BLE001 - every failure is recorded, the set goes on
            row["note"] = f"{type(e).__name__}: {str(e)[:300]}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    (out / "timing.json").write_text(json.dumps(rows, indent=1) + "\n")
    with open(out / "timing.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["case"])
        w.writeheader()
        w.writerows(rows)
    measured = [r for r in rows if r["ratio"] is not None]
    print(f"{len(measured)} of {len(rows)} kernels measured", file=sys.stderr)


if __name__ == "__main__":
    main()
