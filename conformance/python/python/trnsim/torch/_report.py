"""What the device did: ops by count and path, device runs with their estimated device time,
fallbacks, dtype narrowings and refusals, and (check mode) drift against the CPU per op."""

from __future__ import annotations

import contextlib
import html
import json
import math
from collections import defaultdict
from typing import Any

import torch

from .. import _native
from ._encode import GOLDEN_NAME


def _ulp(expected: torch.Tensor) -> torch.Tensor:
    """One unit in the last place of each expected value in its dtype (as float64)."""
    fi = torch.finfo(expected.dtype)
    e = expected.double().abs()
    mant = {torch.float32: 23, torch.bfloat16: 7, torch.float16: 10}.get(expected.dtype, 23)
    exp = torch.floor(torch.log2(torch.clamp(e, min=fi.tiny)))
    return torch.exp2(exp - mant)


#: Extra report sections by name: a callable returning the section's JSON-like value (None: left
#: out), and what resets them with the report (trnsim.torch.distributed adds "collectives").
SECTIONS: dict[str, Any] = {}
RESETS: list[Any] = []
# Called with each counted device program's estimated makespan (ns): the streams' clocks.
ON_RUN: list[Any] = []


class Report:
    def __init__(self) -> None:
        # Set by the device: the configured backend and the NKI module's overloads and kernels.
        self.backend_info: Any = None
        # Set by the device: the program cache's counters (hits, misses, entries, bounds).
        self.cache_info: Any = None
        self.reset()

    def reset(self) -> None:
        self.ops: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.runs: dict[str, dict[str, Any]] = defaultdict(
            lambda: {"programs": 0, "est_ns": 0.0, "instructions": 0, "engines": defaultdict(int)}
        )
        # Reads of device values that the host needs before it can go on (a data-dependent
        # output size), per op: each is one device -> host synchronisation, as on CUDA.
        self.syncs: dict[str, int] = defaultdict(int)
        self.fallbacks: dict[str, dict[str, Any]] = {}
        self.unsupported_ops: dict[str, int] = defaultdict(int)
        self.narrowings: dict[str, int] = defaultdict(int)
        self.overflows: dict[str, int] = defaultdict(int)
        self.refusals: dict[str, int] = defaultdict(int)
        self.transfers: dict[str, int] = defaultdict(int)
        self.drifts: dict[str, dict[str, Any]] = {}
        self.backends: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.declines: dict[str, dict[str, Any]] = {}
        self.host_paths: dict[str, dict[str, Any]] = {}
        self.first_out_of_tolerance: dict[str, Any] | None = None
        self._paused = 0
        for f in RESETS:
            f()

    @contextlib.contextmanager
    def paused(self):
        """Work done for the check itself (CPU reference, downloads) is not the user's."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    # -- recording ---------------------------------------------------------------------------
    def op(self, name: str, path: str, top: bool) -> None:
        if self._paused:
            return
        self.ops[name][path] += 1
        if top:
            self.ops[name]["calls"] += 1

    def device_run(self, name: str, stats: dict, count: bool = True) -> None:
        if self._paused:
            return
        r = self.runs[name]
        r["programs"] += 1
        r["est_ns"] += float(stats.get("timeline", {}).get("makespan_ns", 0.0) or 0.0)
        per_engine = stats.get("instructions", {})
        r["instructions"] += sum(int(v) for v in per_engine.values())
        for engine, n in per_engine.items():
            r["engines"][engine] += int(n)
        for f in ON_RUN:
            f(float(stats.get("timeline", {}).get("makespan_ns", 0.0) or 0.0))

    def backend(self, name: str, label: str) -> None:
        """``name`` ran through ``label`` (``lowering`` or ``nki:MODULE``)."""
        if not self._paused:
            self.backends[name][label] += 1

    def declined(self, name: str, label: str, why: str) -> None:
        """The NKI module's wrapper declined a call form of ``name``: the lowering ran it."""
        if self._paused:
            return
        d = self.declines.setdefault(name, {"backend": label, "count": 0, "first_reason": why})
        d["count"] += 1

    def module_host_path(self, name: str, why: str) -> None:
        """An NKI module's wrapper could not run on device arrays: it ran on NumPy arrays."""
        if self._paused:
            return
        d = self.host_paths.setdefault(name, {"count": 0, "first_reason": why[:500]})
        d["count"] += 1

    def fallback(self, name: str, site: str) -> None:
        f = self.fallbacks.setdefault(name, {"count": 0, "first_call_site": site})
        f["count"] += 1

    def sync(self, name: str) -> None:
        """``name`` read a device value the host needs to go on (a data-dependent size)."""
        if not self._paused:
            self.syncs[name] += 1

    def unsupported(self, name: str) -> None:
        self.unsupported_ops[name] += 1

    def narrowing(self, what: str, overflow: bool) -> None:
        if overflow:
            self.overflows[what] += 1
        else:
            self.narrowings[what] += 1

    def refusal(self, what: str) -> None:
        self.refusals[what] += 1

    def transfer(self, direction: str) -> None:
        if not self._paused:
            self.transfers[direction] += 1

    def drift(
        self,
        name: str,
        got: torch.Tensor,
        expected: torch.Tensor,
        site: str,
        backends: list[str] | None = None,
        kernels: list[str] | None = None,
    ) -> None:
        d = self.drifts.setdefault(
            name,
            {
                "compared": 0,
                "out_of_tolerance": 0,
                "max_abs": 0.0,
                "max_rel": 0.0,
                "max_ulp": 0.0,
                "mismatched": 0,
                "backends": [],
                "kernels": [],
            },
        )
        d["compared"] += 1
        # Who computed it: the backends that served the call (and the NKI kernels, file:line).
        d["backends"] = sorted(set(d["backends"]) | set(backends or []))
        d["kernels"] = sorted(set(d["kernels"]) | set(kernels or []))
        who = {"backends": backends or [], "kernels": kernels or []}
        if got.shape != expected.shape or got.dtype != expected.dtype:
            d["mismatched"] += 1
            self._first(
                name,
                site,
                f"shape/dtype {tuple(got.shape)} {got.dtype} vs {tuple(expected.shape)} {expected.dtype}",
                who,
            )
            return
        golden = GOLDEN_NAME.get(expected.dtype)
        if expected.numel() == 0 or golden is None:
            return
        if expected.dtype.is_floating_point or expected.dtype.is_complex:
            g, e = (
                got.double() if not got.is_complex() else got,
                expected.double() if not expected.is_complex() else expected,
            )
            both_nan = torch.isnan(g) & torch.isnan(e) if not g.is_complex() else torch.zeros_like(g, dtype=torch.bool)
            same = (g == e) | both_nan
            diff = torch.where(same, torch.zeros((), dtype=torch.float64), (g - e).abs().double())
            diff = torch.nan_to_num(diff, nan=math.inf)
            max_abs = float(diff.max())
            rel = diff / e.abs().double().clamp(min=1e-300)
            max_rel = float(torch.where(same, torch.zeros((), dtype=torch.float64), rel).max())
            ulp = 0.0
            if expected.dtype in (torch.float32, torch.bfloat16, torch.float16):
                ulp = float((diff / _ulp(expected)).max())
            rtol, atol, _ = _native.tolerance(_tol_op(name), golden)
            bad = int(((diff > atol + rtol * e.abs().double()) & ~same).sum())
        else:
            neq = got != expected
            bad = int(neq.sum())
            max_abs = float((got.long() - expected.long()).abs().max()) if got.dtype != torch.bool else float(bad > 0)
            max_rel, ulp = 0.0, 0.0
        d["max_abs"] = max(d["max_abs"], max_abs)
        d["max_rel"] = max(d["max_rel"], max_rel)
        d["max_ulp"] = max(d["max_ulp"], ulp)
        if bad:
            d["out_of_tolerance"] += 1
            self._first(
                name, site, f"{bad} of {expected.numel()} elements out of tolerance (max abs {max_abs:.3g})", who
            )

    def _first(self, name: str, site: str, what: str, who: dict[str, list[str]]) -> None:
        if self.first_out_of_tolerance is None:
            self.first_out_of_tolerance = {"op": name, "call_site": site, "detail": what, **who}

    # -- output ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        ops = {}
        for name in sorted(set(self.ops) | set(self.runs)):
            entry: dict[str, Any] = dict(self.ops.get(name, {}))
            if name in self.runs:
                entry.update(self.runs[name])
                entry["engines"] = dict(self.runs[name]["engines"])
            if name in self.drifts:
                entry["drift"] = self.drifts[name]
            if name in self.backends:
                entry["backends"] = dict(self.backends[name])
            if name in self.declines:
                entry["nki_declined"] = self.declines[name]
            if name in self.host_paths:
                entry["nki_host_path"] = self.host_paths[name]
            ops[name] = entry
        total_ns = sum(r["est_ns"] for r in self.runs.values())
        info = self.backend_info() if self.backend_info is not None else {"backend": "lowering", "nki_module": None}
        return {
            "device": torch._C._get_privateuse1_backend_name(),
            "torch": torch.__version__,
            **info,
            "ops": ops,
            "op_calls": sum(v.get("calls", 0) for v in self.ops.values()),
            "device_programs": sum(int(r["programs"]) for r in self.runs.values()),
            "est_device_time_us": total_ns / 1000.0,
            "fallbacks": self.fallbacks,
            "fallback_count": sum(f["count"] for f in self.fallbacks.values()),
            "unsupported": dict(self.unsupported_ops),
            "dtype_narrowings": dict(self.narrowings),
            "dtype_overflows": dict(self.overflows),
            "dtype_refusals": dict(self.refusals),
            "transfers": dict(self.transfers),
            "syncs": dict(self.syncs),
            "sync_count": sum(self.syncs.values()),
            "first_out_of_tolerance": self.first_out_of_tolerance,
            # Sections other packages add (trnsim.torch.distributed: "collectives").
            **{k: v for k, f in SECTIONS.items() if (v := f()) is not None},
            "program_cache": self.cache_info() if self.cache_info is not None else None,
        }

    def to_json(self, path: str | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True)
        if path:
            with open(path, "w") as f:
                f.write(text + "\n")
        return text

    def to_html(self, path: str | None = None) -> str:
        d = self.to_dict()
        rows = []
        for name, e in d["ops"].items():
            dr = e.get("drift", {})
            rows.append(
                "<tr>"
                + "".join(
                    f"<td>{html.escape(str(x))}</td>"
                    for x in (
                        name,
                        ", ".join(f"{b}×{n}" for b, n in sorted(e.get("backends", {}).items())),
                        ", ".join(dr.get("kernels", [])) if dr else "",
                        e.get("calls", 0),
                        e.get("device", 0),
                        e.get("decomposed", 0),
                        e.get("view", 0),
                        e.get("programs", 0),
                        f"{e.get('est_ns', 0.0) / 1000:.2f}",
                        dr.get("compared", ""),
                        dr.get("out_of_tolerance", ""),
                        f"{dr['max_abs']:.3g}" if dr else "",
                        f"{dr['max_ulp']:.3g}" if dr else "",
                    )
                )
                + "</tr>"
            )
        first = d["first_out_of_tolerance"]
        body = (
            "<!doctype html><meta charset=utf-8><title>trnsim.torch report</title>"
            "<style>body{font-family:sans-serif}td,th{padding:2px 8px;border-bottom:1px solid #ddd}</style>"
            f"<h1>trnsim device report</h1><p>backend {html.escape(str(d['backend']))}; {d['op_calls']} op calls, {d['device_programs']} device programs, "
            f"estimated device time {d['est_device_time_us']:.1f} µs, {d['fallback_count']} fallbacks.</p>"
            f"<p>First op out of tolerance: {html.escape(json.dumps(first)) if first else 'none'}</p>"
            "<table><tr><th>op</th><th>backends</th><th>NKI kernels (drift)</th><th>calls</th><th>device</th><th>decomposed</th><th>view</th><th>programs</th>"
            "<th>est µs</th><th>compared</th><th>out of tol</th><th>max abs</th><th>max ulp</th></tr>"
            + "".join(rows)
            + "</table>"
            f"<h2>Fallbacks</h2><pre>{html.escape(json.dumps(d['fallbacks'], indent=2))}</pre>"
            f"<h2>Dtypes</h2><pre>narrowed {html.escape(json.dumps(d['dtype_narrowings']))}; "
            f"overflows {html.escape(json.dumps(d['dtype_overflows']))}; "
            f"refused {html.escape(json.dumps(d['dtype_refusals']))}</pre>"
        )
        if path:
            with open(path, "w") as f:
                f.write(body)
        return body


def _tol_op(name: str) -> str:
    return name


REPORT = Report()
