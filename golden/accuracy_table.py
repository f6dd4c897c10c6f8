#!/usr/bin/env python3
"""The accuracy table of docs/numerics.md ("Accuracy of the suite per op family") from results files.

    python3 golden/accuracy_table.py default.json approx4.json [--label default --label approx4]

Each FILE is a `trnconf run --json` results file (one numerics setting each); the table has one
row per op family (golden/generate.py's CORE_GROUPS, read without importing torch) and one block
of columns per file. Per family and setting:

* cases: pass / accurate / not passing (anything else: xfail, fail, error, skip, ...);
* over the float outputs that have an oracle (docs/golden-format.md, "Oracles"): the median over
  outputs of the device's max error in ulps, and the largest one; the same median for the CPU;
  how many outputs are at least as accurate on the device as on the CPU (max error);
* allowance use: each output's largest `device error / allowance` of the accuracy rule
  (`allowance_use` in the results; ≤ 1 is within the rule), median and max over outputs with a
  bound (`dot`, `sum`, `arithmetic`, `transcendental`).

Standard library only (CI has no torch).
"""

import argparse
import ast
import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def core_groups():
    """CORE_GROUPS of generate.py, parsed (the module itself imports torch)."""
    with open(os.path.join(HERE, "generate.py")) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CORE_GROUPS" for t in node.targets):
            return ast.literal_eval(node.value)
    sys.exit("generate.py: CORE_GROUPS not found")


def fmt(x):
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf"
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-2:
        return f"{x:.2g}"
    return f"{x:.2f}" if abs(x) < 100 else f"{x:.0f}"


def family_stats(cases):
    st = {"cases": len(cases), "pass": 0, "accurate": 0, "other": 0, "dev": [], "cpu": [], "le": 0, "use": []}
    for c in cases:
        s = c["status"]
        if s == "pass":
            st["pass"] += 1
        elif s == "accurate":
            st["accurate"] += 1
        else:
            st["other"] += 1
        for m in c.get("metrics") or []:
            o = m.get("oracle")
            if not o:
                continue
            dev, cpu = o["device_max_ulp"], o["cpu_max_ulp"]
            st["dev"].append(dev)
            st["cpu"].append(cpu)
            st["le"] += dev <= cpu
            if o.get("bound") not in (None, "none") and "allowance_use" in o:
                u = o["allowance_use"]
                st["use"].append(math.inf if u is None else u)
    return st


def med(v):
    return statistics.median(v) if v else None


def block(st):
    return [
        f"{st['pass']} / {st['accurate']} / {st['other']}",
        f"{fmt(med(st['dev']))} ({fmt(max(st['dev']) if st['dev'] else None)})",
        fmt(med(st["cpu"])),
        f"{st['le']}/{len(st['dev'])}",
        f"{fmt(med(st['use']))} ({fmt(max(st['use']) if st['use'] else None)})" if st["use"] else "-",
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="trnconf run --json results files")
    ap.add_argument(
        "--label", action="append", default=[], help="column label per file (default: the file's numerics setting)"
    )
    opts = ap.parse_args()
    runs = []
    for i, path in enumerate(opts.files):
        with open(path) as f:
            r = json.load(f)
        label = opts.label[i] if i < len(opts.label) else r.get("numerics", path)
        runs.append((label, r))
    groups = core_groups()
    family = {op: g for g, ops in groups.items() for op in ops}
    heads = ["family", "cases"]
    for label, _ in runs:
        heads += [
            f"{label}: pass / accurate / not passing",
            "device max ulp, median (max)",
            "CPU max ulp, median",
            "device ≤ CPU",
            "allowance use, median (max)",
        ]
    print("| " + " | ".join(heads) + " |")
    print("|" + "---|" * len(heads))
    by_run = []
    for _, r in runs:
        fam = {}
        for c in r["cases"]:
            fam.setdefault(family.get(c["op"], "other"), []).append(c)
        by_run.append(fam)
    names = list(groups) + sorted({f for fam in by_run for f in fam} - set(groups))
    for name in names:
        first = by_run[0].get(name, [])
        if not any(fam.get(name) for fam in by_run):
            continue
        row = [name, str(len(first))]
        for fam in by_run:
            row += block(family_stats(fam.get(name, [])))
        print("| " + " | ".join(row) + " |")
    totals = ["all", str(len(runs[0][1]["cases"]))]
    for _, r in runs:
        totals += block(family_stats(r["cases"]))
    print("| " + " | ".join(totals) + " |")


if __name__ == "__main__":
    main()
