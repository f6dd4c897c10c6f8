"""Estimated time of a collective from a topology model (docs/distributed.md, "Time model").

An alpha-beta model per algorithm step: a step costs the latency of the farthest hop any of its
transfers makes, plus the bytes a rank sends in it over that rank's share of the slowest link
class the step uses, plus (for reducing steps) the bytes it combines at the DMA collective-
compute rate. Every figure is a field of :class:`Topology` with its source in ``SOURCES``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GB = 1e9


@dataclass(frozen=True)
class Topology:
    name: str
    #: logical NeuronCores (ranks) per chip: 4 at Trn2's default LNC=2.
    ranks_per_chip: int
    #: chips per instance and their torus (rows x cols); instances per NeuronLink domain.
    chips_per_instance: int
    torus: tuple[int, int]
    instances_per_domain: int
    #: bytes/s per chip: NeuronLink within an instance, between the instances of an UltraServer,
    #: EFA between domains; the chip's DMA throughput (moves between ranks of one chip).
    link_bw: float
    inter_instance_bw: float
    efa_bw: float
    dma_bw: float
    #: fraction of DMA throughput the collective-compute (reduction) path reaches.
    reduce_rate: float
    #: seconds: one NeuronLink hop; EFA point to point.
    hop_latency: float
    efa_latency: float


#: Sources of every figure (public AWS Neuron documentation pages).
SOURCES = {
    "ranks_per_chip": "about-neuron/arch/neuron-features/logical-neuroncore-config: LNC=2 default on Trn2, 4 logical cores per chip (64 per trn2.48xlarge)",
    "chips_per_instance": "trn2-arch: trn2.48xlarge has 16 Trainium2 chips in a 4x4 2D torus",
    "link_bw": "trn2-arch: 1,024 GB/s NeuronLink bandwidth per chip within the instance",
    "inter_instance_bw": "trn2-arch / neuron-runtime about/collectives: Trn2 UltraServer, 4 trn2u instances (64 chips), same-coordinate chips in a ring across instances at 256 GB/s per chip",
    "efa_bw": "trn2-arch: EFAv3 3,200 Gbps per instance = 200 Gbps (25 GB/s) per chip; about/collectives: 50 Gbps per rank at LNC2",
    "dma_bw": "trainium2: 128 DMA engines, 3.5 TB/s per chip",
    "reduce_rate": "neuron-runtime explore/compute-comm-overlap: reductions run on the DMA collective compute engines at 50% of DMA throughput (before NeuronCore-v4)",
    "hop_latency": "neuron-runtime explore/intranode-collective-comm: per-hop Ring/KangaRing latency 'about 1-2 us (HBM load dependent)'; the model takes 1.5 us",
    "efa_latency": "neuron-runtime explore/internode-collective-comm: inter-node point-to-point latency '~15us'",
}

_TRN2 = {
    "ranks_per_chip": 4,
    "chips_per_instance": 16,
    "torus": (4, 4),
    "link_bw": 1024 * GB,
    "inter_instance_bw": 256 * GB,
    "efa_bw": 25 * GB,
    "dma_bw": 3500 * GB,
    "reduce_rate": 0.5,
    "hop_latency": 1.5e-6,
    "efa_latency": 15e-6,
}

TOPOLOGIES = {
    "trn2.48xlarge": Topology("trn2.48xlarge", instances_per_domain=1, **_TRN2),
    "trn2-ultraserver": Topology("trn2-ultraserver", instances_per_domain=4, **_TRN2),
}


def topology(name: str | Topology) -> Topology:
    if isinstance(name, Topology):
        return name
    try:
        return TOPOLOGIES[name]
    except KeyError:
        raise ValueError(f"unknown topology {name!r} (one of {', '.join(TOPOLOGIES)})") from None


def _place(t: Topology, rank: int) -> tuple[int, int, int]:
    """(domain, instance within the domain, chip within the instance) of a rank."""
    chip = rank // t.ranks_per_chip
    inst = chip // t.chips_per_instance
    return inst // t.instances_per_domain, inst % t.instances_per_domain, chip % t.chips_per_instance


def link(t: Topology, a: int, b: int) -> tuple[float, float]:
    """(latency s, bytes/s per rank) of a transfer from rank a to rank b."""
    da, ia, ca = _place(t, a)
    db, ib, cb = _place(t, b)
    share = t.ranks_per_chip
    if da != db:
        return t.efa_latency, t.efa_bw / share
    if ia != ib:
        ring = t.instances_per_domain
        hops = min(abs(ia - ib), ring - abs(ia - ib))
        return hops * t.hop_latency, t.inter_instance_bw / share
    if ca == cb:
        # Ranks of one chip: a DMA through the chip's HBM; the model charges one hop's latency
        # for the CC cores' semaphore handshake (AWS publishes no on-chip figure).
        return t.hop_latency, t.dma_bw / share
    rows, cols = t.torus
    dx = abs(ca % cols - cb % cols)
    dy = abs(ca // cols - cb // cols)
    hops = min(dx, cols - dx) + min(dy, rows - dy)
    return hops * t.hop_latency, t.link_bw / share


def _worst(t: Topology, pairs) -> tuple[float, float]:
    lat, bw = 0.0, math.inf
    for a, b in pairs:
        la, ba = link(t, a, b)
        lat, bw = max(lat, la), min(bw, ba)
    return lat, bw


@dataclass
class Estimate:
    collective: str
    algorithm: str
    world: int
    nbytes: int
    steps: int
    time_s: float
    latency_s: float
    transfer_s: float
    reduce_s: float
    topology: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _steps(collective: str, algorithm: str, n: int, s: float):
    """Per step: (partner pairs that bound it, bytes a rank sends, bytes a rank combines)."""
    chunk = s / n
    lg = round(math.log2(n)) if n > 1 else 0
    ring_pairs = [(r, (r + 1) % n) for r in range(n)]

    def rs():
        if algorithm == "ring":
            return [(ring_pairs, chunk, chunk)] * (n - 1)
        if algorithm == "rdh":
            return [
                ([(r, r ^ (n >> (i + 1))) for r in range(n)], s / 2 ** (i + 1), s / 2 ** (i + 1)) for i in range(lg)
            ]
        if algorithm == "mesh":
            return [([(a, b) for a in range(n) for b in range(n) if a != b], (n - 1) * chunk, (n - 1) * chunk)]
        m = n // 2  # kangaring
        kr = [(2 * j, 2 * ((j + 1) % m)) for j in range(m)]
        return [([(2 * j + 1, 2 * j) for j in range(m)], s, s)] + [(kr, chunk, 2 * chunk)] * (m - 1)

    def ag():
        if algorithm == "ring":
            return [(ring_pairs, chunk, 0.0)] * (n - 1)
        if algorithm == "rdh":
            return [([(r, r ^ (1 << i)) for r in range(n)], s / 2 ** (lg - i), 0.0) for i in range(lg)]
        if algorithm == "mesh":
            return [([(a, b) for a in range(n) for b in range(n) if a != b], (n - 1) * chunk, 0.0)]
        m = n // 2
        kr = [(2 * j, 2 * ((j + 1) % m)) for j in range(m)]
        return [([(2 * j, 2 * j + 1) for j in range(m)], 2 * chunk, 0.0)] + [(kr, chunk, 0.0)] * (m - 1)

    kr_tail = [([(2 * j, 2 * j + 1) for j in range(n // 2)], chunk, 0.0)] if algorithm == "kangaring" else []
    if collective == "all_reduce":
        return rs() + ag()
    if collective == "reduce_scatter":
        return rs() + kr_tail
    if collective == "all_gather":
        extra = [([(2 * j + 1, 2 * j) for j in range(n // 2)], chunk, 0.0)] if algorithm == "kangaring" else []
        return extra + ag()
    if collective == "reduce":
        return rs() + kr_tail + [([(r, 0) for r in range(1, n)], chunk, 0.0)]
    if collective == "broadcast":
        if algorithm == "mesh":
            return [([(0, r) for r in range(1, n)], (n - 1) * s, 0.0)]
        if algorithm == "rdh":
            out, d = [], 1
            while d < n:
                out.append(([(v, v + d) for v in range(d) if v + d < n], s, 0.0))
                d *= 2
            return out
        return [([(v, v + 1)], s, 0.0) for v in range(n - 1)]
    if collective in ("scatter", "gather"):
        return [([(0, r) for r in range(1, n)], (n - 1) * chunk, 0.0)]
    if collective == "all_to_all":
        return [([(a, b) for a in range(n) for b in range(n) if a != b], (n - 1) * chunk, 0.0)]
    if collective in ("send", "recv"):
        return [([(0, 1)], s, 0.0)]
    if collective == "barrier":
        return [(ring_pairs, 0.0, 0.0)] * max(lg, 1)
    raise ValueError(f"no time model for collective {collective!r}")


def estimate(
    collective: str,
    algorithm: str,
    world: int,
    nbytes: float,
    topo: str | Topology = "trn2.48xlarge",
    dma_share: float = 0.0,
) -> Estimate:
    """Estimated time of one collective of ``nbytes`` per rank (the all-reduce buffer, the
    reduce-scatter input, the all-gather output, the all-to-all send buffer) over ``world``
    ranks placed in order on ``topo`` (rank r on chip r // ranks_per_chip).

    ``dma_share``: the fraction of DMA throughput taken by compute at the same time (the DMA
    engines are shared between compute and communication); it scales every bandwidth down."""
    t = topology(topo)
    if not 0.0 <= dma_share < 1.0:
        raise ValueError("dma_share must be in [0, 1)")
    if world <= 1:
        return Estimate(collective, algorithm, world, int(nbytes), 0, 0.0, 0.0, 0.0, 0.0, t.name)
    avail = 1.0 - dma_share
    lat = tr = red = 0.0
    steps = _steps(collective, algorithm, world, float(nbytes))
    cache: dict = {}
    for pairs, sent, combined in steps:
        key = (tuple(pairs[:64]), len(pairs))
        if key not in cache:
            cache[key] = _worst(t, pairs)
        la, bw = cache[key]
        lat += la
        tr += sent / (bw * avail)
        red += combined / (t.dma_bw / t.ranks_per_chip * t.reduce_rate * avail)
    return Estimate(collective, algorithm, world, int(nbytes), len(steps), lat + tr + red, lat, tr, red, t.name)
