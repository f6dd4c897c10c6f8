"""Per-collective records of the trnsim backend: bytes, algorithm, estimated time (the device
report's ``collectives`` section, docs/distributed.md)."""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

from ... import collectives as cc

#: The topology the report's estimates use (``TRNSIM_DIST_TOPOLOGY``).
TOPOLOGY = os.environ.get("TRNSIM_DIST_TOPOLOGY", "trn2.48xlarge")

_LOG: list[dict[str, Any]] = []


def reset() -> None:
    _LOG.clear()


def collective(name: str, plan: cc.Plan, world: int, nbytes: int, stats: cc.RunStats) -> None:
    est = cc.estimate(name, plan.algorithm, world, nbytes, TOPOLOGY)
    _LOG.append(
        {
            "collective": name,
            "algorithm": plan.algorithm,
            "fallback": plan.fallback,
            "world": world,
            "bytes": nbytes,
            "steps": len(plan.steps),
            "bytes_sent": stats.bytes_sent,
            "bytes_received": stats.bytes_received,
            "programs": stats.programs,
            "engines": dict(stats.engines),
            "combine_device_ns": stats.device_ns,
            "est_time_us": est.time_s * 1e6,
            "topology": est.topology,
        }
    )


def point(name: str, nbytes: int, world: int) -> None:
    est = cc.estimate(name, "mesh", max(world, 2), nbytes, TOPOLOGY) if name != "barrier" else None
    _LOG.append(
        {
            "collective": name,
            "algorithm": "p2p" if name != "barrier" else "barrier",
            "fallback": None,
            "world": world,
            "bytes": nbytes,
            "steps": 1,
            "bytes_sent": nbytes if name == "send" else 0,
            "bytes_received": nbytes if name == "recv" else 0,
            "programs": 1 if name == "recv" else 0,
            "engines": {},
            "combine_device_ns": 0.0,
            "est_time_us": est.time_s * 1e6 if est else 0.0,
            "topology": TOPOLOGY,
        }
    )


def log() -> list[dict[str, Any]]:
    return [dict(e) for e in _LOG]


def summary() -> dict[str, Any]:
    """Per collective and algorithm: calls, bytes, estimated time (the report section)."""
    by: dict[str, dict[str, Any]] = defaultdict(lambda: {"calls": 0, "bytes": 0, "est_time_us": 0.0, "steps": 0})
    for e in _LOG:
        k = f"{e['collective']}/{e['algorithm']}"
        b = by[k]
        b["calls"] += 1
        b["bytes"] += e["bytes"]
        b["est_time_us"] += e["est_time_us"]
        b["steps"] += e["steps"]
    return {
        "topology": TOPOLOGY,
        "by_collective": dict(by),
        "est_comm_time_us": sum(e["est_time_us"] for e in _LOG),
        "calls": len(_LOG),
    }
