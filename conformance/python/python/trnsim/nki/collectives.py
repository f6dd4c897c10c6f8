"""``nki.collectives`` for kernels launched over N ranks simulated in one process
(docs/distributed.md, "nki.collectives").

    from trnsim.nki import collectives as ncc
    outs = ncc.launch(kernel, 4)([(x0,), (x1,), (x2,), (x3,)])

Each rank's kernel is traced as usual. A collective call (``all_reduce``, ``all_gather``,
``reduce_scatter``, ``all_to_all``, ``collective_permute``) marks a point in the rank's
instruction stream; the ranks' programs are cut there and run segment by segment on one
session per rank, the collective between two segments running over the ranks' sessions with
the collectives model (trnsim.collectives: the algorithm its size selects, every combine on the
engines). Limits: sources and destinations are whole HBM tensors; an SBUF or PSUM tile does not
live across a collective (the simulator reports a read of memory nothing wrote if one does); the
kernel's HBM tensors are zero-filled at the start, so a read of an unwritten HBM tensor is not
reported.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

import numpy as np

from .. import _native
from .. import collectives as cc
from .._dtypes import numpy_dtype
from . import _core

_CTX = threading.local()

_OPS = {"add": "add", "maximum": "max", "minimum": "min", "max": "max", "min": "min", "multiply": "multiply"}


def __getattr__(name):
    """A name of AWS's `nki.collectives` trnsim lacks: an AttributeError that says so (and why,
    for a documented one), rather than Python's bare one."""
    if name.startswith("__"):
        raise AttributeError(name)
    from ._matrix import UNSUPPORTED

    why = UNSUPPORTED["nki.collectives"].get(name)
    reason = f": {why[1]}" if why else ""
    raise AttributeError(f"nki.collectives.{name} is not supported by trnsim{reason} (docs/nki.md, the feature matrix)")


@dataclass(frozen=True)
class ReplicaGroup:
    """Groups of ranks a collective runs over: ``ReplicaGroup([[0, 1, 2, 3]])``."""

    groups: tuple

    def __init__(self, groups):
        object.__setattr__(self, "groups", tuple(tuple(int(r) for r in g) for g in groups))


def rank_id() -> int:
    """The rank of the kernel being traced (inside :func:`launch`)."""
    r = getattr(_CTX, "rank", None)
    if r is None:
        raise _core.NkiError("nki.collectives.rank_id() is only valid in a kernel run by trnsim.nki.collectives.launch")
    return r


def _op_name(op) -> str:
    name = getattr(op, "__name__", str(op)).split(".")[-1]
    if name not in _OPS:
        raise _core.NkiError(f"nki.collectives: reduction {name!r} is not supported (add, maximum, minimum)")
    return _OPS[name]


def _hbm(views, what):
    out = []
    for v in views:
        if not isinstance(v, _core.View) or v.base.on_chip or not v.is_full():
            raise _core.NkiError(f"nki.collectives: {what} must be whole HBM tensors")
        out.append(_core.storage_of(v.base))
    return out


def _mark(kind, srcs, dsts, replica_group, **extra):
    marks = getattr(_CTX, "marks", None)
    if marks is None:
        raise _core.NkiError("nki.collectives are only valid in a kernel run by trnsim.nki.collectives.launch")
    tr = _core.tracer()
    _CTX.tracer = tr
    s, d = _hbm(srcs, "srcs"), _hbm(dsts, "dsts")
    for st in s:
        st.read = True
    for st in d:
        st.written = True
    marks.append(
        {
            "at": len(tr.instructions),
            "kind": kind,
            "srcs": [x.name for x in s],
            "dsts": [x.name for x in d],
            "groups": replica_group.groups,
            **extra,
        }
    )


def all_reduce(srcs, dsts, replica_group, op, **kwargs):
    _mark("all_reduce", srcs, dsts, replica_group, op=_op_name(op))


def all_gather(srcs, dsts, replica_group, **kwargs):
    _mark("all_gather", srcs, dsts, replica_group)


def reduce_scatter(srcs, dsts, replica_group, op, **kwargs):
    _mark("reduce_scatter", srcs, dsts, replica_group, op=_op_name(op))


def all_to_all(srcs, dsts, replica_group, **kwargs):
    _mark("all_to_all", srcs, dsts, replica_group)


def all_to_all_v(srcs, dsts, replica_group, send_counts, **kwargs):
    _mark("all_to_all", srcs, dsts, replica_group, send_counts=[list(map(int, r)) for r in send_counts])


def collective_permute(srcs, dsts, source_target_pairs, **kwargs):
    pairs = [(int(a), int(b)) for a, b in source_target_pairs]
    ranks = sorted({x for p in pairs for x in p})
    _mark("permute", srcs, dsts, ReplicaGroup([ranks]), pairs=pairs)


def _segments(program, marks, offset):
    ins = program["instructions"]
    cuts = [m["at"] + offset for m in marks]
    out, prev = [], 0
    for c in [*cuts, len(ins)]:
        out.append(ins[prev:c])
        prev = c
    return out


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def launch(kernel, n_ranks: int, target: str = "trn2"):
    """``launch(kernel, N)(per_rank_args)``: runs ``kernel`` on N simulated ranks; returns each
    rank's return value (NumPy)."""
    func = getattr(kernel, "func", kernel)

    def run(per_rank_args):
        if len(per_rank_args) != n_ranks:
            raise _core.NkiError(f"launch over {n_ranks} ranks needs {n_ranks} argument tuples")
        from . import to_program

        traced = []
        for r, args in enumerate(per_rank_args):
            _CTX.rank, _CTX.marks, _CTX.tracer = r, [], None
            try:
                kr = to_program(func, tuple(args), {}, (), target)
                tr_len = len(_CTX.tracer.instructions) if _CTX.tracer is not None else 0
                traced.append((kr, _CTX.marks, len(kr.program["instructions"]) - tr_len))
            finally:
                _CTX.rank = _CTX.marks = _CTX.tracer = None
        kinds = [[(m["kind"], m["groups"]) for m in marks] for _, marks, _ in traced]
        if any(k != kinds[0] for k in kinds):
            raise _core.NkiError("every rank must call the same collectives in the same order")
        sessions = [_native.Session(target) for _ in range(n_ranks)]
        segs = []
        for sess, (kr, marks, off) in zip(sessions, traced):
            hbm = kr.program["hbm"]
            for h in hbm:
                nbytes = _numel(h["shape"]) * cc.ITEMSIZE[h["dtype"]]
                data = (
                    np.ascontiguousarray(kr.inputs[h["name"]]).tobytes() if h["name"] in kr.inputs else b"\0" * nbytes
                )
                sess.put(h["name"], (h["dtype"], list(h["shape"]), data))
            segs.append(_segments(kr.program, marks, off))
        for k in range(len(kinds[0]) + 1):
            for r, (kr, _, _) in enumerate(traced):
                body = segs[r][k]
                if not body:
                    continue
                hbm = [dict(h, role="input") for h in kr.program["hbm"]]
                prog = _native.Program.from_json(json.dumps({"target": target, "hbm": hbm, "instructions": body}))
                prog.infer_waits()
                sessions[r].run(prog, {h["name"]: h["name"] for h in hbm})
            if k < len(kinds[0]):
                _collective([t[1][k] for t in traced], [t[0] for t in traced], sessions, target)
        results = []
        for sess, (kr, _, _) in zip(sessions, traced):
            outs = []
            for n in kr.outputs:
                dt, shape, data = sess.get(n)
                outs.append(np.frombuffer(data, dtype=numpy_dtype(dt)).reshape(shape).copy())
            results.append(None if kr.ret_shape == "none" else outs[0] if kr.ret_shape == "single" else tuple(outs))
        return results

    return run


def _collective(marks, runs, sessions, target):
    m0 = marks[0]
    for group in m0["groups"]:
        g = list(group)
        for i in range(len(m0["srcs"])):
            src = [marks[r]["srcs"][i] for r in g]
            dst = [marks[r]["dsts"][i] for r in g]
            dtype = sessions[g[0]].info(src[0])[0]
            mems = []
            kind = m0["kind"]
            for r, s, d in zip(g, src, dst):
                sess = sessions[r]
                n_src = _numel(sess.info(s)[1])
                if kind in ("all_reduce", "permute"):
                    buf = d
                    sess.run(cc.cast_program(target, dtype, dtype, list(sess.info(s)[1])), {"src": s, "out": d})
                elif kind == "reduce_scatter":
                    buf = f"{s}.rs"
                    sess.run(cc.cast_program(target, dtype, dtype, list(sess.info(s)[1])), {"src": s, "out": buf})
                elif kind == "all_gather":
                    buf = d
                    rank_in_group = g.index(r)
                    # the rank's own block first, by DMA, into its place in the destination
                    prog = {
                        "target": target,
                        "hbm": [
                            {"name": "s", "dtype": dtype, "shape": list(sess.info(s)[1]), "role": "input"},
                            {"name": "d", "dtype": dtype, "shape": list(sess.info(d)[1]), "role": "input"},
                        ],
                        "instructions": [
                            {
                                "engine": "dma",
                                "op": {
                                    "dma_copy": {
                                        "dst": {
                                            "mem": {"hbm": "d"},
                                            "dtype": dtype,
                                            "partitions": 1,
                                            "offset": rank_in_group * n_src * cc.ITEMSIZE[dtype],
                                            "free": [[1, n_src]],
                                        },
                                        "src": {
                                            "mem": {"hbm": "s"},
                                            "dtype": dtype,
                                            "partitions": 1,
                                            "free": [[1, n_src]],
                                        },
                                    }
                                },
                            }
                        ],
                    }
                    if n_src:
                        sess.run(_native.Program.from_json(json.dumps(prog)), {"s": s, "d": d})
                else:
                    buf = None
                mems.append(cc.RankMemory(sess, target, {"buf": buf} if buf else {"in": s, "out": d}, dtype, f"ncc{r}"))
            n = _numel(sessions[g[0]].info(src[0])[1])
            world = len(g)
            if kind == "all_reduce":
                plan = cc.plan("all_reduce", world, n=n, itemsize=cc.ITEMSIZE[dtype])
            elif kind == "reduce_scatter":
                plan = cc.plan("reduce_scatter", world, counts=[n // world] * world, itemsize=cc.ITEMSIZE[dtype])
            elif kind == "all_gather":
                plan = cc.plan("all_gather", world, counts=[n] * world, itemsize=cc.ITEMSIZE[dtype])
            elif kind == "all_to_all":
                sc = m0.get("send_counts") or [[n // world] * world for _ in g]
                plan = cc.plan("all_to_all", world, send_counts=sc)
            else:  # permute: each source's buffer to its target
                pos = {r: i for i, r in enumerate(g)}
                plan = cc.Plan(
                    "permute", "ring", world, [[cc.Move(pos[a], pos[b], 0, 0, n, False) for a, b in m0["pairs"]]]
                )
            cc.run_local(plan, mems, m0.get("op", "add"))
            if kind == "reduce_scatter":
                for r, s, d, mem in zip(g, src, dst, mems):
                    sess = sessions[r]
                    k = g.index(r)
                    chunk = n // world
                    prog = {
                        "target": target,
                        "hbm": [
                            {
                                "name": "s",
                                "dtype": dtype,
                                "shape": list(sess.info(mem.bufs["buf"])[1]),
                                "role": "input",
                            },
                            {"name": "d", "dtype": dtype, "shape": list(sess.info(d)[1]), "role": "input"},
                        ],
                        "instructions": [
                            {
                                "engine": "dma",
                                "op": {
                                    "dma_copy": {
                                        "dst": {
                                            "mem": {"hbm": "d"},
                                            "dtype": dtype,
                                            "partitions": 1,
                                            "free": [[1, chunk]],
                                        },
                                        "src": {
                                            "mem": {"hbm": "s"},
                                            "dtype": dtype,
                                            "partitions": 1,
                                            "offset": k * chunk * cc.ITEMSIZE[dtype],
                                            "free": [[1, chunk]],
                                        },
                                    }
                                },
                            }
                        ],
                    }
                    if chunk:
                        sess.run(_native.Program.from_json(json.dumps(prog)), {"s": mem.bufs["buf"], "d": d})
                    sess.delete(mem.bufs["buf"])
