"""The suite's process CPU time on one target against another, measured in the same session.

    python3 conformance/benches/targets_cpu.py [--trnconf target/release/trnconf] [--runs 3]
        [--base trn1] [--target trn2] [--max-ratio 1.2]

Runs `trnconf run --jobs 1 --target T` alternately on the base and the measured target (base
first), `--runs` times each, and takes each run's user + system CPU time of the child process
(`resource.getrusage(RUSAGE_CHILDREN)` deltas: wall time on a shared machine measures the
neighbours). Prints every run, the medians and their ratio; exits 1 when the ratio is above
`--max-ratio` (docs/performance.md, "Targets"). Build first: `cargo build --release -p trnconf`.
"""

import argparse
import resource
import statistics
import subprocess
import sys


def cpu_seconds(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trnconf", default="target/release/trnconf")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--base", default="trn1")
    ap.add_argument("--target", default="trn2")
    ap.add_argument("--max-ratio", type=float, default=1.2)
    a = ap.parse_args(argv)
    times = {a.base: [], a.target: []}
    for i in range(a.runs):
        for t in (a.base, a.target):
            s = cpu_seconds([a.trnconf, "run", "--jobs", "1", "--target", t])
            times[t].append(s)
            print(f"run {i + 1} {t}: {s:.2f} s CPU", flush=True)
    base, target = statistics.median(times[a.base]), statistics.median(times[a.target])
    ratio = target / base
    print(f"median {a.base} {base:.2f} s, {a.target} {target:.2f} s: ratio {ratio:.3f} (limit {a.max_ratio})")
    return 0 if ratio <= a.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
