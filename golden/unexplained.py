#!/usr/bin/env python3
"""List every unexplained case of a `trnconf run --json` results file.

Unexplained: a case that failed, errored or passed against an expectation (fail, error, xpass).
Expected failures (xfail) are explained by their expectations entry; skips are listed apart.
Used by the fresh-corpus workflow (.github/workflows/nightly-fresh-corpus.yml) and locally:

    python3 golden/unexplained.py results.json [--markdown]

Exit status: 0 when every case is explained, 1 otherwise, 2 on an unreadable file.
"""

import argparse
import collections
import json
import sys

UNEXPLAINED = ("fail", "error", "xpass")


def first_line(text):
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", help="trnconf run --json output")
    ap.add_argument("--markdown", action="store_true", help="GitHub job-summary markdown")
    opts = ap.parse_args()
    try:
        with open(opts.results) as f:
            run = json.load(f)
        cases = run["cases"]
    except (OSError, ValueError, KeyError) as e:
        print(f"unexplained.py: cannot read {opts.results}: {e}", file=sys.stderr)
        return 2
    counts = collections.Counter(c["status"] for c in cases)
    bad = [c for c in cases if c["status"] in UNEXPLAINED]
    head = (
        f"{len(cases)} cases: {counts['pass']} pass, {counts['xfail']} xfail (explained), "
        f"{counts['skip']} skip, {len(bad)} unexplained "
        f"({counts['fail']} fail, {counts['error']} error, {counts['xpass']} xpass)"
    )
    if opts.markdown:
        print(f"### Fresh corpus\n\n{head}\n")
        if bad:
            print("| case | status | first line of the message |\n|---|---|---|")
            for c in sorted(bad, key=lambda c: c["id"]):
                msg = first_line(c.get("message")).replace("|", "\\|")
                print(f"| `{c['id']}` | {c['status']} | {msg} |")
    else:
        print(head)
        by_op = collections.defaultdict(list)
        for c in bad:
            by_op[c["op"]].append(c)
        for op in sorted(by_op):
            print(f"\n{op}:")
            for c in sorted(by_op[op], key=lambda c: c["id"]):
                print(f"  {c['status']:5} {c['id']}: {first_line(c.get('message'))}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
