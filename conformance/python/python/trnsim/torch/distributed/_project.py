"""Scaling projection from a small simulated run (docs/distributed.md, "Projection")."""

from __future__ import annotations

from dataclasses import dataclass, field

from ... import collectives as cc

#: (label, topology, ranks): one trn2.48xlarge at 16 and 64 ranks, a Trn2 UltraServer at 256,
#: EFA between 2-16 trn2.48xlarge instances (64 ranks each).
TARGETS = [
    ("trn2.48xlarge", "trn2.48xlarge", 16),
    ("trn2.48xlarge", "trn2.48xlarge", 64),
    ("trn2-ultraserver", "trn2-ultraserver", 256),
] + [(f"{k}x trn2.48xlarge (EFA)", "trn2.48xlarge", 64 * k) for k in (2, 4, 8, 16)]

EXTRAPOLATED = (
    "compute per rank is held at the measured value (weak scaling: the same per-rank batch and model)",
    (
        "each collective keeps its measured bytes per rank; its algorithm is re-chosen by size and its time "
        "re-estimated by the topology model at the target rank count (step count, hop latency, link class)"
    ),
    "compute and communication do not overlap (an upper bound on step time)",
    "between instances the flat algorithm crosses EFA on every step (no hierarchical algorithm)",
)


@dataclass
class Row:
    system: str
    topology: str
    ranks: int
    compute_s: float
    comm_s: float
    step_s: float
    comm_share: float
    scaling_efficiency: float
    per_collective: list[dict] = field(default_factory=list)


@dataclass
class Projection:
    """A projection, not a measurement: which terms are extrapolated is in ``extrapolated``."""

    measured_world: int
    measured_topology: str
    measured_step_s: float
    rows: list[Row]
    extrapolated: tuple[str, ...] = EXTRAPOLATED
    kind: str = "projection"

    def table(self) -> str:
        lines = [
            f"PROJECTION (not a measurement) from {self.measured_world} simulated ranks; extrapolated: "
            + "; ".join(self.extrapolated),
            f"{'system':28} {'ranks':>6} {'step ms':>9} {'comm ms':>9} {'comm %':>7} {'eff %':>6}",
        ]
        for r in self.rows:
            lines.append(
                f"{r.system:28} {r.ranks:6d} {r.step_s * 1e3:9.3f} {r.comm_s * 1e3:9.3f} "
                f"{100 * r.comm_share:7.1f} {100 * r.scaling_efficiency:6.1f}"
            )
        return "\n".join(lines)


def _comm(collectives, world: int, topo: str, s: cc.Settings | None):
    total, parts = 0.0, []
    for c in collectives:
        name, nbytes = c["collective"], float(c["bytes"])
        if name in ("barrier", "send", "recv"):
            continue
        alg = cc.choose(int(nbytes), s) if name != "all_to_all" else "mesh"
        alg, _ = cc._plan.effective(alg, world, name)
        e = cc.estimate(name, alg, world, nbytes, topo)
        total += e.time_s * c.get("count", 1)
        parts.append({"collective": name, "algorithm": alg, "bytes": nbytes, "time_s": e.time_s})
    return total, parts


def project(
    compute_s: float,
    collectives: list[dict],
    measured_world: int,
    *,
    measured_topology: str = "trn2.48xlarge",
    targets=None,
    s: cc.Settings | None = None,
) -> Projection:
    """Projects step time, communication share and weak-scaling efficiency.

    ``compute_s``: the per-rank compute time of one step (e.g. the device report's estimated
    device time divided by the steps); ``collectives``: the step's collectives as
    ``{"collective", "bytes"[, "count"]}`` (bytes per rank, as the report's log has them),
    measured at ``measured_world`` ranks (2-8)."""
    if not 2 <= measured_world <= 8:
        raise ValueError("the projection starts from a measurement at 2-8 simulated ranks")
    base_comm, _ = _comm(collectives, measured_world, measured_topology, s)
    base = compute_s + base_comm
    rows = []
    for system, topo, ranks in targets or TARGETS:
        comm, parts = _comm(collectives, ranks, topo, s)
        step = compute_s + comm
        rows.append(
            Row(
                system,
                topo,
                ranks,
                compute_s,
                comm,
                step,
                comm / step if step else 0.0,
                base / step if step else 1.0,
                parts,
            )
        )
    return Projection(measured_world, measured_topology, base, rows)
