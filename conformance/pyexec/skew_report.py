#!/usr/bin/env python3
"""Separate PyTorch version skew from hardware differences in the nightly's torch mode.

The goldens are made with the pinned PyTorch on CPU; the hardware runs the Neuron venv's older
PyTorch. The nightly first runs the same executor on CPU under that venv (the baseline), then on
the device. This report sorts every case that did not match its expectation on the device:

* "differs on CPU under the venv's PyTorch": the baseline already differs from the golden, so
  the difference is PyTorch's version (changed CPU kernels or schemas), not the hardware;
* "differs on the device": the baseline matches, the device does not;
* "missing in the venv's PyTorch": the baseline could not run the call at all (an overload or
  argument the older PyTorch lacks), listed with the executor's reason.

    python3 skew_report.py BASELINE.json DEVICE.json

Both files are `trnconf run --json` results. Exit status: 0 when nothing differs on the device,
1 otherwise, 2 on an unreadable file.
"""

import json
import sys

MATCHED = ("pass", "xfail")


def load(path):
    with open(path) as f:
        return {c["id"]: c for c in json.load(f)["cases"]}


def first_line(text):
    text = (text or "").strip()
    return text.splitlines()[0] if text else ""


def missing_overload(case):
    """The baseline could not run the call: skipped as unsupported, or an error naming a
    missing operator/overload/argument."""
    msg = (case.get("message") or "").lower()
    if case["status"] == "skip" and "unsupported" in msg:
        return True
    return case["status"] == "error" and any(
        k in msg
        for k in (
            "no attribute",
            "unknown overload",
            "not implemented",
            "unexpected keyword",
            "no overload",
            "unknown builtin op",
        )
    )


def report(baseline, device):
    skew, hardware, missing = [], [], []
    for cid in sorted(device):
        d = device[cid]
        b = baseline.get(cid)
        if b is not None and missing_overload(b):
            missing.append((cid, first_line(b.get("message"))))
            continue
        if d["status"] in MATCHED:
            continue
        if b is None:
            hardware.append((cid, d["status"], "no baseline result; " + first_line(d.get("message"))))
        elif b["status"] not in MATCHED:
            skew.append((cid, b["status"], first_line(b.get("message"))))
        else:
            hardware.append((cid, d["status"], first_line(d.get("message"))))
    head = (
        f"{len(device)} cases on the device; {len(skew)} differ on CPU under the venv's PyTorch "
        f"(version skew), {len(hardware)} differ on the device, {len(missing)} missing in the "
        f"venv's PyTorch"
    )
    lines = [head]
    for title, rows in (
        ("Differs on CPU under the venv's PyTorch (version skew, not hardware)", skew),
        ("Differs on the device", hardware),
    ):
        lines.append(f"\n## {title}: {len(rows)}")
        lines += [f"  {cid} [{status}] {msg}" for cid, status, msg in rows]
    lines.append(f"\n## Missing in the venv's PyTorch: {len(missing)}")
    lines += [f"  {cid}: {msg}" for cid, msg in missing]
    return "\n".join(lines), len(hardware)


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        baseline, device = load(argv[1]), load(argv[2])
    except (OSError, ValueError, KeyError) as e:
        print(f"skew_report.py: {e}", file=sys.stderr)
        return 2
    text, on_device = report(baseline, device)
    print(text)
    return 1 if on_device else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
