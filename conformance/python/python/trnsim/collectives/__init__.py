"""The Trainium collectives model: algorithms chosen by size, run on trnsim sessions.

No torch here: the PyTorch backend (``trnsim.torch.distributed``) and ``nki.collectives``
(``trnsim.nki.collectives``) both stand on this package. docs/distributed.md describes it.

    import numpy as np
    from trnsim import collectives as cc
    outs = cc.simulate("all_reduce", [np.ones(5, np.float32)] * 3, op="add")
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .. import _native
from .._dtypes import numpy_dtype, trnsim_dtype
from . import _plan
from ._exec import (
    FLOATS,
    ITEMSIZE,
    OPS,
    CollectiveError,
    RankMemory,
    RunStats,
    cast_program,
    check_op,
    engine_of,
    run_local,
    run_rank,
    scale_program,
)
from ._plan import ALGORITHMS, Move, Plan
from ._time import TOPOLOGIES, Topology, estimate

__all__ = [
    "ALGORITHMS",
    "OPS",
    "TOPOLOGIES",
    "CollectiveError",
    "Move",
    "Plan",
    "RankMemory",
    "RunStats",
    "Settings",
    "Topology",
    "choose",
    "engine_of",
    "estimate",
    "plan",
    "run_rank",
    "set_settings",
    "settings",
    "simulate",
]

#: Decimal megabytes, as AWS writes the thresholds ("< 1 MB", "1-56 MB").
MB = 1_000_000


@dataclass(frozen=True)
class Settings:
    """Named settings of the collectives model (docs/distributed.md, "Settings").

    * ``mesh_max_bytes`` / ``rdh_max_bytes``: the size thresholds (bytes per rank): Mesh below
      the first, RDH up to the second, KangaRing above. Defaults: AWS's empirical sweet spots on
      the Trn2 16-chip torus, 1 MB and 56 MB.
    * ``algorithm``: force one of ``mesh``, ``rdh``, ``kangaring``, ``ring`` (None: by size).
    * ``accumulate``: ``"tensor"`` (default) keeps every partial result in the tensor's dtype
      (the DMA compute writes its destination buffer, which has the tensor's dtype);
      ``"fp32"`` reduces bf16/fp16/fp8 tensors in an fp32 buffer and rounds once at the end.
      AWS does not publish which the runtime does.
    """

    mesh_max_bytes: int = 1 * MB
    rdh_max_bytes: int = 56 * MB
    algorithm: str | None = None
    accumulate: str = "tensor"

    def __post_init__(self) -> None:
        if self.algorithm is not None and self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)} or None, not {self.algorithm!r}")
        if self.accumulate not in ("tensor", "fp32"):
            raise ValueError(f"accumulate must be 'tensor' or 'fp32', not {self.accumulate!r}")
        if not 0 <= self.mesh_max_bytes <= self.rdh_max_bytes:
            raise ValueError("thresholds must satisfy 0 <= mesh_max_bytes <= rdh_max_bytes")


_SETTINGS = Settings()


def settings() -> Settings:
    return _SETTINGS


def set_settings(s: Settings | None = None, **changes: Any) -> Settings:
    """Replaces the process-wide settings (``set_settings(algorithm="ring")``); returns the old."""
    global _SETTINGS
    old = _SETTINGS
    _SETTINGS = replace(s or old, **changes) if changes else (s or Settings())
    return old


def choose(nbytes: int, s: Settings | None = None) -> str:
    """The algorithm asked for a collective of ``nbytes`` per rank (before any Ring fallback)."""
    s = s or _SETTINGS
    if s.algorithm is not None:
        return s.algorithm
    if nbytes < s.mesh_max_bytes:
        return "mesh"
    if nbytes <= s.rdh_max_bytes:
        return "rdh"
    return "kangaring"


def plan(
    collective: str,
    world: int,
    *,
    n: int = 0,
    counts=None,
    root: int = 0,
    send_counts=None,
    itemsize: int = 4,
    s: Settings | None = None,
) -> Plan:
    """The plan of one collective; the algorithm is chosen from the bytes per rank."""
    if collective == "all_to_all":
        return _plan.all_to_all(world, send_counts)
    if collective in ("all_gather", "reduce_scatter"):
        total = sum(counts)
        alg = choose(total * itemsize if collective == "reduce_scatter" else counts[0] * itemsize * world, s)
        fn = _plan.all_gather if collective == "all_gather" else _plan.reduce_scatter
        return fn(alg, world, list(counts))
    alg = choose(n * itemsize, s)
    if collective == "all_reduce":
        return _plan.all_reduce(alg, world, n)
    if collective == "broadcast":
        return _plan.broadcast(alg, world, n, root)
    if collective == "reduce":
        return _plan.reduce(alg, world, n, root)
    raise CollectiveError(f"unknown collective {collective!r}")


_names = itertools.count()


def work_dtype(dtype: str, op: str, s: Settings | None = None) -> str:
    s = s or _SETTINGS
    if s.accumulate == "fp32" and dtype in FLOATS and dtype != "f32" and op in ("add", "multiply"):
        return "f32"
    return dtype


def _shape(session, name: str) -> list:
    return list(session.info(name)[1])


def _to_work(session, target: str, name: str, dtype: str, wd: str, n: int) -> str:
    """A work copy of ``name`` in dtype ``wd`` (a DMA cast); ``name`` itself when equal."""
    if wd == dtype:
        return name
    out = f"{name}.w{next(_names)}"
    session.run(cast_program(target, dtype, wd, _shape(session, name)), {"src": name, "out": out})
    return out


def _from_work(session, target: str, work: str, name: str, dtype: str, wd: str, n: int) -> None:
    if wd == dtype:
        return
    tmp = f"{name}.c{next(_names)}"
    shape = _shape(session, name)
    session.run(cast_program(target, wd, dtype, shape), {"src": work, "out": tmp})
    # the rounded result written back into the buffer by a second DMA
    session.run(cast_program(target, dtype, dtype, shape), {"src": tmp, "out": name})
    session.delete(tmp)
    session.delete(work)


def finish_average(session, target: str, name: str, dtype: str, n: int, world: int) -> None:
    """The average: the sum times fp32(1/world) on VectorE."""
    if n and world > 1:
        session.run(scale_program(target, dtype, _shape(session, name), 1.0 / world), {"buf": name})


def simulate(
    collective: str,
    inputs: list[np.ndarray],
    *,
    op: str = "add",
    root: int = 0,
    send_counts=None,
    counts=None,
    target: str = "trn2",
    s: Settings | None = None,
    average: bool = False,
    return_stats: bool = False,
):
    """Runs one collective over ``len(inputs)`` ranks simulated in this process, one session
    per rank; returns each rank's result (NumPy, the inputs' dtype).

    * ``all_reduce`` / ``broadcast`` / ``reduce``: flat buffers of one length; ``reduce`` returns
      the root's result for the root and the other ranks' buffers as the algorithm left them.
    * ``reduce_scatter``: every rank's full buffer; ``counts[r]`` elements go to rank r
      (default: an even split, the first ``n % N`` ranks one more).
    * ``all_gather``: rank r's block; returns the concatenation on every rank.
    * ``all_to_all``: rank r's send buffer and ``send_counts[r][d]``; returns each rank's receive
      buffer (blocks in source-rank order).
    """
    s = s or _SETTINGS
    world = len(inputs)
    arrays = [np.ascontiguousarray(a).reshape(-1) for a in inputs]
    np_dt = arrays[0].dtype
    dtype = trnsim_dtype(np_dt)
    if any(a.dtype != np_dt for a in arrays):
        raise CollectiveError("every rank's tensor must have the same dtype")
    reducing = collective in ("all_reduce", "reduce_scatter", "reduce")
    if reducing:
        check_op(op, dtype)
    sessions = [_native.Session(target) for _ in range(world)]
    wd = work_dtype(dtype, op, s) if reducing else dtype
    if collective == "all_gather":
        counts = [a.size for a in arrays]
        full = sum(counts)
        p = plan("all_gather", world, counts=counts, itemsize=ITEMSIZE[dtype], s=s)
        offs = np.cumsum([0] + counts)
        bufs = []
        for r, a in enumerate(arrays):
            b = np.zeros(full, np_dt)
            b[offs[r] : offs[r + 1]] = a  # the rank's own block in place (what its input DMA writes)
            bufs.append(b)
        arrays = bufs
    elif collective == "all_to_all":
        p = plan("all_to_all", world, send_counts=send_counts)
    else:
        n = arrays[0].size
        if any(a.size != n for a in arrays):
            raise CollectiveError("every rank's buffer must have the same length")
        if collective == "reduce_scatter":
            counts = counts or [ln for _, ln in _plan.split(n, world)]
            if sum(counts) != n:
                raise CollectiveError(f"counts {counts} do not add up to the buffer's {n} elements")
            p = plan("reduce_scatter", world, counts=counts, itemsize=ITEMSIZE[wd], s=s)
        else:
            p = plan(collective, world, n=n, root=root, itemsize=ITEMSIZE[wd], s=s)
    mems = []
    for r, (sess, a) in enumerate(zip(sessions, arrays)):
        sess.put("buf", (dtype, [a.size], a.tobytes()))
        bufs = {"buf": "buf"}
        if collective == "all_to_all":
            total_in = sum(send_counts[x][r] for x in range(world))
            sess.put("in", (dtype, [a.size], a.tobytes()))
            sess.put("out", (dtype, [total_in], b"\0" * (total_in * ITEMSIZE[dtype])))
            bufs = {"in": "in", "out": "out"}
        elif wd != dtype:
            bufs = {"buf": _to_work(sess, target, "buf", dtype, wd, a.size)}
        mems.append(RankMemory(sess, target, bufs, wd, f"cc{r}"))
    stats = run_local(p, mems, op)
    outs = []
    for r, (sess, mem) in enumerate(zip(sessions, mems)):
        if collective == "all_to_all":
            name = "out"
        else:
            name = "buf"
            _from_work(sess, target, mem.bufs["buf"], "buf", dtype, wd, arrays[r].size)
            if average:
                finish_average(sess, target, "buf", dtype, arrays[r].size, world)
        dt, _shape, data = sess.get(name)
        out = np.frombuffer(data, dtype=numpy_dtype(dt)).copy()
        if collective == "reduce_scatter":
            off = sum(counts[:r])
            out = out[off : off + counts[r]]
        outs.append(out)
    if return_stats:
        return outs, p, stats
    return outs
