"""Runs collective plans (``_plan``) on trnsim sessions: every transfer lands in the receiving
rank's simulated HBM and every combine or copy is a trnsim program on that rank's engines.

* ``add`` of floating-point data is the DMA engines' collective compute: a ``dma_copy`` with
  ``accumulate`` from the received chunk into the destination (an fp32 add, cast on write to the
  buffer's dtype);
* ``max``, ``min`` and the operations AWS's collectives do not list (``multiply``, bitwise) run
  on VectorE (``tensor_tensor``) through SBUF; 32-bit integer arithmetic runs on GpSimd, the
  engines' exact int32 path (docs/isa.md §5.3);
* copies (the gather phases) are ``dma_copy`` without compute.

The simulator is the only thing that touches values: the host moves bytes between sessions (the
transport), never combines them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .. import _native
from ._plan import Move, Plan

ITEMSIZE = {
    "f32": 4,
    "bf16": 2,
    "f16": 2,
    "fp8_e4m3": 1,
    "fp8_e4m3fn": 1,
    "fp8_e5m2": 1,
    "i32": 4,
    "u32": 4,
    "i16": 2,
    "u16": 2,
    "i8": 1,
    "u8": 1,
    "bool": 1,
}
FLOATS = {"f32", "bf16", "f16", "fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2"}
INT32 = {"i32", "u32"}
#: Reduction operators of the collectives (trnsim ALU names) and the dtypes they take.
OPS = ("add", "max", "min", "multiply", "bitwise_and", "bitwise_or", "bitwise_xor")

_FREE_MAX = 65535
_PIECE = 1 << 26  # elements per DMA access pattern (below the simulator's per-pattern cap)
_TILE_F = 4096  # free elements per partition of an SBUF tile on the VectorE/GpSimd path


class CollectiveError(ValueError):
    """A collective the model cannot run as asked (an operator a dtype does not take, ...)."""


def check_op(op: str, dtype: str) -> None:
    if op not in OPS:
        raise CollectiveError(f"unknown reduction operator {op!r}")
    if dtype == "bool":
        raise CollectiveError(f"reduction {op} of bool tensors is not supported by the collectives model")
    if op.startswith("bitwise") and dtype in FLOATS:
        raise CollectiveError(f"reduction {op} needs an integer dtype, not {dtype}")


def engine_of(op: str, dtype: str) -> str:
    """The engine that runs one combine step of ``op`` on ``dtype`` (docs/distributed.md)."""
    if op == "add" and dtype in FLOATS:
        return "dma"
    if dtype in INT32 and not op.startswith("bitwise"):
        return "gpsimd"
    return "vector"


def _hbm(name: str, dtype: str, off: int, rows: int, width: int, step: int | None = None) -> dict:
    size = ITEMSIZE[dtype]
    if rows == 1:
        return {"mem": {"hbm": name}, "dtype": dtype, "partitions": 1, "offset": off * size, "free": [[1, width]]}
    if step is None:
        # rows of `width` contiguous elements as one partition with two free dims.
        return {
            "mem": {"hbm": name},
            "dtype": dtype,
            "partitions": 1,
            "offset": off * size,
            "free": [[width, rows], [1, width]],
        }
    return {
        "mem": {"hbm": name},
        "dtype": dtype,
        "partitions": rows,
        "partition_step": step,
        "offset": off * size,
        "free": [[1, width]],
    }


def _flat_pieces(n: int):
    """(offset, rows, width) pieces covering ``n`` contiguous elements, each within the limits of
    one access pattern."""
    off = 0
    while n > 0:
        take = min(n, _PIECE)
        if take <= _FREE_MAX:
            yield off, 1, take
        else:
            rows = take // _FREE_MAX
            yield off, rows, _FREE_MAX
            rest = take - rows * _FREE_MAX
            if rest:
                yield off + rows * _FREE_MAX, 1, rest
        off += take
        n -= take


def _tile_pieces(n: int):
    """(offset, partitions, width) SBUF tiles covering ``n`` contiguous elements."""
    off = 0
    full = _TILE_F * 128
    while n - off >= full:
        yield off, 128, _TILE_F
        off += full
    rows = (n - off) // _TILE_F
    if rows:
        yield off, rows, _TILE_F
        off += rows * _TILE_F
    if n - off:
        yield off, 1, n - off


@dataclass
class Receipt:
    """One chunk that arrived in a rank's HBM (session tensor ``recv``) for ``move``."""

    move: Move
    recv: str


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def step_program(target: str, dtype: str, op: str, receipts: Sequence[Receipt], buf_shape: dict[str, list]):
    """The program one rank runs for the chunks it received in one step, in order (buffers are
    addressed flat, whatever their shape)."""
    size = ITEMSIZE[dtype]
    hbm = [{"name": b, "dtype": dtype, "shape": list(sh), "role": "input"} for b, sh in sorted(buf_shape.items())]
    ins: list[dict] = []

    def add(engine: str, opj: dict) -> None:
        inst = {"engine": engine, "op": opj}
        if ins:
            inst["wait"] = [len(ins) - 1]  # one chain: each step's combines stay in order
        ins.append(inst)

    eng = engine_of(op, dtype)
    for i, rc in enumerate(receipts):
        m = rc.move
        rname = f"r{i}"
        hbm.append({"name": rname, "dtype": dtype, "shape": [m.n], "role": "input"})
        if not m.reduce or eng == "dma":
            for off, rows, width in _flat_pieces(m.n):
                add(
                    "dma",
                    {
                        "dma_copy": {
                            "dst": _hbm(m.dst_buf, dtype, m.dst_off + off, rows, width),
                            "src": _hbm(rname, dtype, off, rows, width),
                            "accumulate": bool(m.reduce),
                        }
                    },
                )
            continue
        for off, parts, width in _tile_pieces(m.n):
            a = {"mem": "sbuf", "dtype": dtype, "partitions": parts, "free": [[1, width]]}
            b = dict(a, offset=_TILE_F * size)
            add("dma", {"dma_copy": {"dst": a, "src": _hbm(m.dst_buf, dtype, m.dst_off + off, parts, width, width)}})
            add("dma", {"dma_copy": {"dst": b, "src": _hbm(rname, dtype, off, parts, width, width)}})
            add(eng, {"tensor_tensor": {"dst": a, "in0": a, "in1": b, "op": op}})
            add("dma", {"dma_copy": {"dst": _hbm(m.dst_buf, dtype, m.dst_off + off, parts, width, width), "src": a}})
    prog = {"target": target, "hbm": hbm, "instructions": ins}
    return _native.Program.from_json(json.dumps(prog))


def scale_program(target: str, dtype: str, shape: list, factor: float):
    """``buf *= factor`` on VectorE (the average's division by the rank count)."""
    n = _numel(shape)
    ins: list[dict] = []
    for off, parts, width in _tile_pieces(n):
        a = {"mem": "sbuf", "dtype": dtype, "partitions": parts, "free": [[1, width]]}
        hb = _hbm("buf", dtype, off, parts, width, width)
        for eng, opj in (
            ("dma", {"dma_copy": {"dst": a, "src": hb}}),
            ("vector", {"tensor_scalar": {"dst": a, "src": a, "op0": "multiply", "operand0": {"imm": factor}}}),
            ("dma", {"dma_copy": {"dst": hb, "src": a}}),
        ):
            inst = {"engine": eng, "op": opj}
            if ins:
                inst["wait"] = [len(ins) - 1]
            ins.append(inst)
    prog = {
        "target": target,
        "hbm": [{"name": "buf", "dtype": dtype, "shape": list(shape), "role": "input"}],
        "instructions": ins,
    }
    return _native.Program.from_json(json.dumps(prog))


def cast_program(target: str, src_dtype: str, dst_dtype: str, shape: list):
    """``out = cast(src)`` by DMA (through fp32, round to nearest even)."""
    n = _numel(shape)
    ins = []
    for off, rows, width in _flat_pieces(n):
        inst = {
            "engine": "dma",
            "op": {
                "dma_copy": {
                    "dst": _hbm("out", dst_dtype, off, rows, width),
                    "src": _hbm("src", src_dtype, off, rows, width),
                }
            },
        }
        if ins:
            inst["wait"] = [len(ins) - 1]
        ins.append(inst)
    prog = {
        "target": target,
        "hbm": [
            {"name": "src", "dtype": src_dtype, "shape": list(shape), "role": "input"},
            {"name": "out", "dtype": dst_dtype, "shape": list(shape), "role": "output"},
        ],
        "instructions": ins,
    }
    return _native.Program.from_json(json.dumps(prog))


@dataclass
class RunStats:
    """What running a plan cost one rank: programs, their estimated device time, bytes."""

    programs: int = 0
    device_ns: float = 0.0
    bytes_sent: int = 0
    bytes_received: int = 0
    engines: dict[str, int] = field(default_factory=dict)

    def add_stats(self, stats: dict) -> None:
        self.programs += 1
        self.device_ns += float(stats.get("timeline", {}).get("makespan_ns", 0.0))
        for e, k in stats.get("instructions", {}).items():
            if k:
                self.engines[e] = self.engines.get(e, 0) + k


class RankMemory:
    """One rank's view of its session for a collective: buffer role -> session tensor name."""

    def __init__(self, session, target: str, bufs: dict[str, str], dtype: str, prefix: str) -> None:
        self.session = session
        self.target = target
        self.bufs = bufs
        self.dtype = dtype
        self.prefix = prefix
        self.stats = RunStats()
        self._n = 0
        self._cache: dict[str, bytes] = {}

    def buf_shape(self, role: str) -> list:
        return list(self.session.info(self.bufs[role])[1])

    def read(self, role: str, off: int, n: int) -> bytes:
        """The bytes of ``n`` elements at ``off`` as the rank's HBM holds them now (what its DMA
        sends)."""
        name = self.bufs[role]
        data = self._cache.get(name)
        if data is None:
            _, _, data = self.session.get(name)
            self._cache[name] = data
        size = ITEMSIZE[self.dtype]
        return bytes(data[off * size : (off + n) * size])

    def new_step(self) -> None:
        self._cache.clear()

    def apply(self, op: str, arrived: Sequence[tuple[Move, bytes]]) -> None:
        """Lands each received chunk in HBM and runs the step's combines and copies."""
        arrived = [(m, d) for m, d in arrived if m.n]
        if not arrived:
            return
        receipts = []
        bind = {}
        try:
            for i, (m, data) in enumerate(arrived):
                name = f"{self.prefix}.recv{self._n}"
                self._n += 1
                self.session.put(name, (self.dtype, [m.n], data))
                receipts.append(Receipt(m, name))
                bind[f"r{i}"] = name
            roles = {rc.move.dst_buf for rc in receipts}
            lens = {r: self.buf_shape(r) for r in roles}
            for r in roles:
                bind[r] = self.bufs[r]
            prog = step_program(self.target, self.dtype, op, receipts, lens)
            stats = json.loads(self.session.run(prog, bind))
            self.stats.add_stats(stats)
            self.stats.bytes_received += sum(len(d) for m, d in arrived if m.src != m.dst)
        finally:
            for rc in receipts:
                self.session.delete(rc.recv)
        self._cache.clear()


#: exchange(step_index, sends, recv_from) -> received bytes, in recv_from order. ``sends`` is
#: [(move_index, dst, bytes)], ``recv_from`` [(move_index, src)].
Exchange = Callable[[int, list, list], list]


def run_rank(plan: Plan, rank: int, mem: RankMemory, op: str, exchange: Exchange) -> RunStats:
    """Runs ``plan`` as rank ``rank``: each step, send what the plan's moves from this rank read,
    receive what lands here, then combine/copy in the plan's order."""
    for si, step in enumerate(plan.steps):
        mem.new_step()
        sends, recv_from, local = [], [], {}
        for mi, m in enumerate(step):
            if m.n == 0:
                if m.dst == rank:
                    local[mi] = b""
                continue
            if m.src == rank:
                data = mem.read(m.src_buf, m.src_off, m.n)
                if m.dst == rank:
                    local[mi] = data
                else:
                    sends.append((mi, m.dst, data))
                    mem.stats.bytes_sent += len(data)
            if m.dst == rank and m.src != rank:
                recv_from.append((mi, m.src))
        got: dict[int, bytes]
        got = dict(zip([mi for mi, _ in recv_from], exchange(si, sends, recv_from) if (sends or recv_from) else []))
        got.update(local)
        arrived = [(m, got[mi]) for mi, m in enumerate(step) if m.dst == rank]
        mem.apply(op, arrived)
    return mem.stats


def run_local(plan: Plan, mems: Sequence[RankMemory], op: str) -> list[RunStats]:
    """Runs ``plan`` over ranks simulated in one process (one session each): a step's sends are
    all read before any rank applies what it received."""
    for step in plan.steps:
        for mem in mems:
            mem.new_step()
        data = [mems[m.src].read(m.src_buf, m.src_off, m.n) for m in step]
        for m, d in zip(step, data):
            if m.src != m.dst:
                mems[m.src].stats.bytes_sent += len(d)
        for r, mem in enumerate(mems):
            mem.apply(op, [(m, d) for m, d in zip(step, data) if m.dst == r])
    return [m.stats for m in mems]
