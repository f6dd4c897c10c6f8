"""Weak-scaling benchmark of the trnsim c10d backend (docs/performance.md, "Distributed").

Runs benches/dist_step.py under torchrun at 1 rank and at 4 ranks, in the same run, with
OMP_NUM_THREADS=1; per step, sums the user+system CPU seconds over the rank processes; reports
the median of 5 steps after 2 warm-ups and the ratio 4 ranks / 1 rank (at most 4.6 is the goal:
the collectives cost at most 15% over four independent ranks).

    python conformance/python/benches/dist_weak_scaling.py
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TORCHRUN = Path(sys.executable).with_name("torchrun")


def run(nproc: int, tmp: Path, steps: int = 7) -> list[float]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import trnsim  # the ranks import the trnsim this process imports (installed, or a built source tree)

    where = str(Path(trnsim.__file__).resolve().parent.parent)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=where + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp / f"n{nproc}"
    subprocess.run(
        [
            str(TORCHRUN),
            "--nproc_per_node",
            str(nproc),
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(port),
            "--local_addr",
            "127.0.0.1",
            str(HERE / "dist_step.py"),
            "--steps",
            str(steps),
            "--out",
            str(out),
        ],
        env=env,
        check=True,
        timeout=1800,
        capture_output=True,
    )
    per_rank = [json.loads(Path(f"{out}.rank{r}.json").read_text())["cpu_s"] for r in range(nproc)]
    return [sum(v[i] for v in per_rank) for i in range(steps)]


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        one = run(1, Path(d))
        four = run(4, Path(d))
    m1, m4 = statistics.median(one[2:]), statistics.median(four[2:])
    print(f"1 rank: median CPU per DDP step {m1:.3f} s (steps {[round(x, 3) for x in one]})")
    print(f"4 ranks: median summed CPU per DDP step {m4:.3f} s (steps {[round(x, 3) for x in four]})")
    print(f"ratio 4 ranks / 1 rank: {m4 / m1:.2f} (goal <= 4.6)")


if __name__ == "__main__":
    main()
