"""OpInfo-wide device-vs-CPU comparison for the `trnsim` device, in the manner of PyTorch's
`test_ops.py::test_compare_cpu`: every OpInfo's sample and reference inputs run on `trnsim` and on
the CPU, compared at that test's tolerance (atol = rtol = 1e-3) and at the golden suite's rules
(trnconf's per-dtype tolerance). Results per OpInfo: pass / fail / skip and failure classes.

    python conformance/python/tests_torch/opinfo_compare.py --shard 0/8 --json opinfo-0.json
    python conformance/python/tests_torch/opinfo_compare.py --merge opinfo-*.json --markdown docs/coverage.md

`--markdown` replaces only the section between the torch-device markers of the page.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import traceback
import warnings

import torch
import trnsim.torch
from trnsim import _native

BEGIN = "<!-- torch-device OpInfo comparison: begin -->"
END = "<!-- torch-device OpInfo comparison: end -->"

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "i64": torch.int64, "bool": torch.bool}


def to_device(x):
    return x.to("trnsim") if isinstance(x, torch.Tensor) else x


def to_cpu(x):
    return x.cpu() if isinstance(x, torch.Tensor) and x.device.type == "trnsim" else x


#: OpInfos whose outputs are random draws: equal values would need the CPU's generator.
RANDOM_OPINFOS = {"bernoulli", "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
                  "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout", "normal", "uniform",
                  "multinomial", "randn", "rand", "randint", "randn_like", "rand_like", "randint_like",
                  "nn.functional.rrelu"}


def compare_cpu_marks(op, dtype) -> set:
    """What the OpInfo itself says about `test_compare_cpu` on any device: skip / xfail."""
    marks = set()
    for d in op.decorators:
        if getattr(d, "test_name", None) != "test_compare_cpu" or getattr(d, "cls_name", None) not in (None,
                                                                                                      "TestCommon"):
            continue
        if d.device_type is not None or (d.dtypes is not None and dtype not in d.dtypes):
            continue
        for dec in d.decorators:
            q = getattr(dec, "__qualname__", "")
            if q.startswith("skip"):
                marks.add("skip")
            elif q == "expectedFailure":
                marks.add("xfail")
    return marks


def classify(e: BaseException) -> str:
    msg = str(e)
    if isinstance(e, trnsim.torch.UnsupportedOpError):
        m = re.search(r"aten::(\S+) is not supported on the trnsim device \((.*?)\); call form", msg)
        if m:
            why = m.group(2)
            why = "no lowering, no decomposition" if why.startswith("trnconf has no lowering") else why[:80]
            return f"unsupported `{m.group(1)}`: {why}"
        return "unsupported: " + msg[:80]
    if isinstance(e, trnsim.torch.DtypeError):
        return "dtype policy: " + ("float64/complex128 refused" if "float64" in msg or "complex128" in msg
                                   else "int64 beyond int32")
    first = msg.splitlines()[0] if msg else ""
    return f"error {type(e).__name__}: {first[:90]}"


def tree(f, x):
    from torch.utils._pytree import tree_map

    return tree_map(f, x)


def run_opinfo(op, dtype: torch.dtype, max_samples: int, budget_s: float) -> dict:
    res = {"name": op.name, "variant": op.variant_test_name, "dtype": str(dtype).replace("torch.", ""),
           "samples": 0, "pass": 0, "pass_suite": 0, "fail": 0, "skip": 0, "classes": {}, "budget_left": 0}
    if dtype not in op.supported_dtypes("cpu"):
        res["skip_reason"] = "dtype not supported by the OpInfo on CPU"
        return res
    marks = compare_cpu_marks(op, dtype)
    if "skip" in marks:
        res["skip_reason"] = "the OpInfo skips test_compare_cpu (uninitialised or random outputs, or as listed there)"
        return res
    if "xfail" in marks:
        res["opinfo_expected_failure"] = True
    t0 = time.time()
    try:
        samples = list(op.reference_inputs("cpu", dtype, requires_grad=False))
    except Exception as e:  # noqa: BLE001 - an OpInfo whose generator fails here has no samples
        res["skip_reason"] = f"sample generator: {type(e).__name__}"
        return res
    rtol_s, atol_s, _ = _native.tolerance("", {torch.float32: "f32", torch.bfloat16: "bf16"}.get(dtype, "f32"))
    for i, s in enumerate(samples):
        if i >= max_samples or time.time() - t0 > budget_s:
            res["budget_left"] = len(samples) - i
            break
        res["samples"] += 1
        try:
            expected = op(s.input, *s.args, **s.kwargs)
        except Exception:  # noqa: BLE001 - the CPU rejects the sample: nothing to compare
            res["skip"] += 1
            continue
        cls = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ds = s.transform(to_device)
                got = op(ds.input, *ds.args, **ds.kwargs)
                got = tree(to_cpu, got)
            try:
                torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-3, equal_nan=True, check_device=False,
                                           check_stride=False, check_layout=False)
            except AssertionError as e:
                first = str(e).splitlines()[0]
                if op.name in RANDOM_OPINFOS:
                    cls = "random values: the device's generator is not the CPU's"
                else:
                    cls = "mismatch at 1e-3: " + re.sub(r"[0-9]+", "N", first)[:80]
            else:
                res["pass"] += 1
                try:
                    torch.testing.assert_close(got, expected, atol=atol_s, rtol=rtol_s, equal_nan=True,
                                               check_device=False, check_stride=False, check_layout=False)
                    res["pass_suite"] += 1
                except AssertionError:
                    res["classes"]["passes 1e-3, outside the suite's tolerance"] = (
                        res["classes"].get("passes 1e-3, outside the suite's tolerance", 0) + 1)
        except trnsim.torch.DtypeError as e:
            res["skip"] += 1
            c = classify(e)
            res["classes"][c] = res["classes"].get(c, 0) + 1
            continue
        except Exception as e:  # noqa: BLE001 - every failure is classified and counted
            cls = classify(e)
            if "first_error" not in res:
                res["first_error"] = "".join(traceback.format_exception_only(type(e), e))[:300]
        if cls is not None:
            res["fail"] += 1
            res["classes"][cls] = res["classes"].get(cls, 0) + 1
    res["seconds"] = round(time.time() - t0, 2)
    return res


def markdown(results: list[dict], wall: float | None) -> str:
    total = {k: sum(r[k] for r in results) for k in ("samples", "pass", "pass_suite", "fail", "skip")}
    ok = sum(1 for r in results if r["samples"] and r["fail"] == 0 and r["pass"])
    classes: dict[str, int] = {}
    for r in results:
        for c, n in r["classes"].items():
            key = re.sub(r"`[^`]*`", "`op`", c) if c.startswith("unsupported") else c
            classes[key] = classes.get(key, 0) + n
    lines = [
        BEGIN,
        "",
        "## trnsim PyTorch device: OpInfo comparison against the CPU",
        "",
        ("<!-- Generated by `python conformance/python/tests_torch/opinfo_compare.py --merge ... --markdown "
         "docs/coverage.md` (docs/torch-device.md). -->"),
        "",
        (f"Every OpInfo of PyTorch {torch.__version__.split('+')[0]}'s `op_db`, its sample and reference inputs run "
         "on the `trnsim` device and on the CPU (as `test_ops.py::test_compare_cpu`). A sample **passes** when "
         "`assert_close(atol=1e-3, rtol=1e-3)` holds; *suite* counts those that also hold at the golden suite's "
         "tolerance. **skip**: the CPU rejects the sample, or an input dtype the device refuses (float64). "
         "Samples beyond the per-OpInfo cap are not run (column *not run*)."),
        "",
        (f"**{len(results)}** OpInfo × dtype entries; **{ok}** pass every sample run; samples: {total['samples']} "
         f"run, {total['pass']} pass at 1e-3 ({total['pass_suite']} at the suite's tolerance), {total['fail']} fail, "
         f"{total['skip']} skipped." + (f" Wall time {wall / 60:.1f} min." if wall else "")),
        "",
        "Failure classes (samples):",
        "",
        "| class | samples |",
        "|---|---:|",
    ]
    for c, n in sorted(classes.items(), key=lambda x: -x[1]):
        lines.append(f"| {c.replace('|', '/')} | {n} |")
    lines += ["", "| OpInfo | dtype | run | pass | suite | fail | skip | not run | failure classes |",
              "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted(results, key=lambda r: (r["name"], r["variant"], r["dtype"])):
        name = r["name"] + (f".{r['variant']}" if r["variant"] else "")
        cls = "; ".join(f"{c} ×{n}" for c, n in sorted(r["classes"].items())).replace("|", "/")
        if r.get("skip_reason"):
            cls = r["skip_reason"]
        if r.get("opinfo_expected_failure"):
            cls = "(the OpInfo expects test_compare_cpu to fail) " + cls
        lines.append(f"| `{name}` | {r['dtype']} | {r['samples']} | {r['pass']} | {r['pass_suite']} | {r['fail']} | "
                     f"{r['skip']} | {r['budget_left']} | {cls} |")
    lines += ["", END]
    return "\n".join(lines) + "\n"


def splice(path: str, section: str) -> None:
    with open(path) as f:
        text = f.read()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(path, "w") as f:
        f.write(text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shard", default="0/1", help="i/n: OpInfos whose index is i modulo n")
    ap.add_argument("--dtypes", default="f32", help="comma-separated: " + ",".join(DTYPES))
    ap.add_argument("--ops", help="comma-separated OpInfo names (default: all)")
    ap.add_argument("--max-samples", type=int, default=12)
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per OpInfo × dtype")
    ap.add_argument("--json")
    ap.add_argument("--merge", nargs="*")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    if a.merge is not None:
        # A later file's entry replaces an earlier one for the same OpInfo × dtype (a re-run of
        # some OpInfos after a fix); the wall time is the longest shard's.
        merged, wall = {}, 0.0
        for p in a.merge:
            with open(p) as f:
                d = json.load(f)
            for r in d["results"]:
                merged[(r["name"], r["variant"], r["dtype"])] = r
            wall = max(wall, d.get("wall_s", 0.0))
        results = list(merged.values())
        if a.markdown:
            splice(a.markdown, markdown(results, wall))
        return
    from torch.testing._internal.common_methods_invocations import op_db

    i, n = (int(x) for x in a.shard.split("/"))
    wanted = set(a.ops.split(",")) if a.ops else None
    t0 = time.time()
    results = []
    for k, op in enumerate(op_db):
        if k % n != i or (wanted and op.name not in wanted):
            continue
        for dn in a.dtypes.split(","):
            r = run_opinfo(op, DTYPES[dn], a.max_samples, a.budget)
            results.append(r)
            print(f"{op.name}{'.' + op.variant_test_name if op.variant_test_name else ''} {dn}: run {r['samples']} "
                  f"pass {r['pass']} fail {r['fail']} skip {r['skip']} {r['classes'] or ''}", flush=True)
            if a.json:
                with open(a.json, "w") as f:
                    json.dump({"shard": a.shard, "wall_s": time.time() - t0, "results": results}, f, indent=1)
    if a.markdown:
        splice(a.markdown, markdown(results, time.time() - t0))


if __name__ == "__main__":
    main()
