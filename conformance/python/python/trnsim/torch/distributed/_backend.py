"""The ``trnsim`` c10d backend: torch.distributed collectives on the trnsim device, computed by
the collectives model (trnsim.collectives) on each rank's session.

Each rank is a process (torchrun's) holding its logical NeuronCore's session. The bytes a plan's
move carries travel between the rank processes over a gloo process group built on the same
store (a transport torch.distributed already has); what they carry and the order of every
combine is what the plan says, and every combine and copy runs on the receiving rank's engines.
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _CBackend
from torch._C._distributed_c10d import _create_work_from_future

from ... import collectives as cc
from .. import _device
from . import _record

_REDUCE = {
    dist.ReduceOp.SUM: "add",
    dist.ReduceOp.AVG: "avg",
    dist.ReduceOp.PRODUCT: "multiply",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.MAX: "max",
    dist.ReduceOp.BAND: "bitwise_and",
    dist.ReduceOp.BOR: "bitwise_or",
    dist.ReduceOp.BXOR: "bitwise_xor",
}
_REDUCE_NAMES = {
    "sum": "add",
    "avg": "avg",
    "product": "multiply",
    "min": "min",
    "max": "max",
    "band": "bitwise_and",
    "bor": "bitwise_or",
    "bxor": "bitwise_xor",
}


class DistributedError(_device.TrnsimError):
    """A collective the trnsim backend cannot run (named in the message)."""


# -- the dispatch TLS of the device --------------------------------------------------------
# A c10d op reaches the device's __torch_dispatch__; the hook (hook() below) redispatches it to
# its PrivateUse1 kernel with the Python key excluded, which calls this backend. The backend's
# own device work (copies, the collective programs' bookkeeping) needs the device's dispatch
# back: the TLS saved at the hook is restored around it.
_TLS = threading.local()
_PY_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.Python) | torch._C.DispatchKeySet(
    torch._C.DispatchKey.PythonTLSSnapshot
)


def _stack() -> list:
    s = getattr(_TLS, "stack", None)
    if s is None:
        s = _TLS.stack = []
    return s


class _Restored:
    def __enter__(self):
        st = _stack()
        self._g = torch._C._ForceDispatchKeyGuard(*st[-1]) if st else None
        if self._g is not None:
            self._g.__enter__()
        return self

    def __exit__(self, *exc):
        if self._g is not None:
            self._g.__exit__(*exc)


def redispatch(func, args, kwargs):
    """Runs a ``c10d::`` op's PrivateUse1 kernel (which calls the group's backend for the device)."""
    _stack().append((torch._C._dispatch_tls_local_include_set(), torch._C._dispatch_tls_local_exclude_set()))
    try:
        with torch._C._ExcludeDispatchKeyGuard(_PY_KEYS):
            return func(*args, **kwargs)
    finally:
        _stack().pop()


def _work(result):
    fut = torch.futures.Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


def _gloo_side(store, rank: int, size: int, timeout: timedelta):
    opts = dist.ProcessGroupGloo._Options()
    opts._timeout = timeout
    ifname = os.environ.get("GLOO_SOCKET_IFNAME")
    if ifname:
        opts._devices = [dist.ProcessGroupGloo.create_device(interface=ifname)]
    else:
        addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        loop = addr in ("127.0.0.1", "localhost", "::1")
        opts._devices = [
            dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")
            if loop
            else dist.ProcessGroupGloo.create_default_device()
        ]
    return dist.ProcessGroupGloo(dist.PrefixStore("trnsim-cc/", store), rank, size, opts)


_LIVE: list = []  # the backends: kept alive with their process groups


class TrnsimBackend(_CBackend):
    def __init__(self, store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        self._side = _gloo_side(store, rank, size, timeout)
        self._seq = 0

    def getBackendName(self) -> str:
        return "trnsim"

    # -- plumbing ------------------------------------------------------------------------------
    def _exchange(self, si: int, sends, recv_from):
        works, bufs = [], []
        for mi, dst, data in sends:
            t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            works.append(self._side.send([t], dst, mi))
        for mi, src in recv_from:
            t = torch.empty(self._sizes[mi], dtype=torch.uint8)
            bufs.append(t)
            works.append(self._side.recv([t], src, mi))
        for w in works:
            w.wait()
        return [b.numpy().tobytes() for b in bufs]

    def _run(self, plan: cc.Plan, bufs: dict[str, str], dtype: str, op: str, collective: str, nbytes: int):
        st = _device.STATE
        mem = cc.RankMemory(st.session, st.target, bufs, dtype, f"cc.{id(self)}.{self._seq}")
        self._seq += 1
        size = cc.ITEMSIZE[dtype]

        def exchange(si, sends, recv_from):
            self._sizes = {mi: plan.steps[si][mi].n * size for mi, _ in recv_from}
            return self._exchange(si, sends, recv_from)

        stats = cc.run_rank(plan, self._rank, mem, "add" if op == "avg" else op, exchange)
        _record.collective(collective, plan, self._size, nbytes, stats)
        return stats

    # -- tensors ---------------------------------------------------------------------------------
    def _flat(self, t: torch.Tensor):
        """(session name, session dtype, writeback) for a device tensor: its own storage when it
        is the whole contiguous storage, else a contiguous device copy written back after."""
        if not isinstance(t, _device.TrnsimTensor):
            raise DistributedError(
                f"trnsim backend: a {t.device.type} tensor reached the trnsim backend; collectives of the "
                "trnsim process group take trnsim tensors (use backend 'cpu:gloo,trnsim:trnsim' for CPU tensors)"
            )
        if t.dtype == torch.complex64:
            raise DistributedError("trnsim backend: complex64 collectives are not supported")
        with _Restored():
            if _device._is_whole(t) and t.is_contiguous():
                st = t._trn
                return st.name, _sess_dtype(st.name), None
            work = t.contiguous().clone()
        name = work._trn.name

        def back():
            with _Restored(), torch.no_grad():
                t.copy_(work)

        return name, _sess_dtype(name), back

    def _reduce_op(self, red) -> str:
        for k, v in _REDUCE.items():
            if red == k:
                return v
        raise DistributedError(
            "trnsim backend: ReduceOp.PREMUL_SUM is not supported (its factor is not readable "
            "from Python; the collective is refused rather than run as a plain sum)"
        )

    # -- collectives -------------------------------------------------------------------------------
    def _all_reduce_one(self, t: torch.Tensor, op: str, collective: str = "all_reduce") -> None:
        name, dtype, back = self._flat(t)
        n = t.numel()
        if op != "avg":
            cc.check_op(op, dtype)
        elif dtype not in cc.FLOATS:
            raise DistributedError(f"trnsim backend: ReduceOp.AVG of {t.dtype} is not supported (floats only)")
        st = _device.STATE
        wd = cc.work_dtype(dtype, "add" if op == "avg" else op)
        work = cc._to_work(st.session, st.target, name, dtype, wd, n)
        plan = cc.plan("all_reduce", self._size, n=n, itemsize=cc.ITEMSIZE[wd])
        self._run(plan, {"buf": work}, wd, op, collective, n * cc.ITEMSIZE[dtype])
        cc._from_work(st.session, st.target, work, name, dtype, wd, n)
        if op == "avg":
            cc.finish_average(st.session, st.target, name, dtype, n, self._size)
        if back:
            back()

    def allreduce(self, tensors, opts):
        op = self._reduce_op(opts.reduceOp)
        for t in tensors:
            self._all_reduce_one(t, op)
        return _work(tensors)

    def allreduce_coalesced(self, tensors, opts):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts):
        for t in tensors:
            name, dtype, back = self._flat(t)
            n = t.numel()
            plan = cc.plan("broadcast", self._size, n=n, root=opts.rootRank, itemsize=cc.ITEMSIZE[dtype])
            self._run(plan, {"buf": name}, dtype, "add", "broadcast", n * cc.ITEMSIZE[dtype])
            if back:
                back()
        return _work(tensors)

    def reduce(self, tensors, opts):
        op = self._reduce_op(opts.reduceOp)
        if op == "avg":
            raise DistributedError("trnsim backend: reduce with ReduceOp.AVG is not supported")
        for t in tensors:
            name, dtype, back = self._flat(t)
            cc.check_op(op, dtype)
            n = t.numel()
            plan = cc.plan("reduce", self._size, n=n, root=opts.rootRank, itemsize=cc.ITEMSIZE[dtype])
            self._run(plan, {"buf": name}, dtype, op, "reduce", n * cc.ITEMSIZE[dtype])
            if back:
                back()
        return _work(tensors)

    def _gather_flat(self, out: torch.Tensor, blocks: list[int], inp: torch.Tensor, collective: str):
        """``out`` (flat, contiguous) gets every rank's block; this rank's from ``inp``."""
        off = sum(blocks[: self._rank])
        with _Restored(), torch.no_grad():
            out.reshape(-1)[off : off + blocks[self._rank]].copy_(inp.reshape(-1))
        name, dtype, back = self._flat(out)
        plan = cc.plan("all_gather", self._size, counts=blocks, itemsize=cc.ITEMSIZE[dtype])
        self._run(plan, {"buf": name}, dtype, "add", collective, sum(blocks) * cc.ITEMSIZE[dtype])
        if back:
            back()

    def _allgather_base(self, output, input, opts):
        n = input.numel()
        if output.numel() != n * self._size:
            raise DistributedError("trnsim backend: all_gather_into_tensor output size must be world_size * input size")
        self._gather_flat(output, [n] * self._size, input, "all_gather")
        return _work([output])

    def allgather(self, output_tensors, input_tensors, opts):
        for outs, inp in zip(output_tensors, input_tensors):
            blocks = [o.numel() for o in outs]
            with _Restored(), torch.no_grad():
                flat = torch.empty(sum(blocks), dtype=inp.dtype, device=inp.device)
            self._gather_flat(flat, blocks, inp, "all_gather")
            with _Restored(), torch.no_grad():
                off = 0
                for o, b in zip(outs, blocks):
                    o.copy_(flat[off : off + b].reshape(o.shape))
                    off += b
        return _work(output_tensors)

    def allgather_coalesced(self, output_lists, input_list, opts):
        return self.allgather(output_lists, input_list, opts)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts):
        for o, i in zip(outputs, inputs):
            self._allgather_base(o, i, opts)
        return _work(outputs)

    def _reduce_scatter_flat(self, out: torch.Tensor, flat_in: torch.Tensor, counts: list[int], op: str):
        name, dtype, _ = self._flat(flat_in)
        if op != "avg":
            cc.check_op(op, dtype)
        elif dtype not in cc.FLOATS:
            raise DistributedError(f"trnsim backend: ReduceOp.AVG of {flat_in.dtype} is not supported (floats only)")
        st = _device.STATE
        n = flat_in.numel()
        wd = cc.work_dtype(dtype, "add" if op == "avg" else op)
        work = cc._to_work(st.session, st.target, name, dtype, wd, n)
        plan = cc.plan("reduce_scatter", self._size, counts=counts, itemsize=cc.ITEMSIZE[wd])
        self._run(plan, {"buf": work}, wd, op, "reduce_scatter", n * cc.ITEMSIZE[dtype])
        cc._from_work(st.session, st.target, work, name, dtype, wd, n)
        if op == "avg":
            cc.finish_average(st.session, st.target, name, dtype, n, self._size)
        off = sum(counts[: self._rank])
        with _Restored(), torch.no_grad():
            out.copy_(flat_in[off : off + counts[self._rank]].reshape(out.shape))

    def _reduce_scatter_base(self, output, input, opts):
        op = self._reduce_op(opts.reduceOp)
        n = output.numel()
        if input.numel() != n * self._size:
            raise DistributedError("trnsim backend: reduce_scatter_tensor input size must be world_size * output size")
        with _Restored(), torch.no_grad():
            flat = input.reshape(-1).clone()
        self._reduce_scatter_flat(output, flat, [n] * self._size, op)
        return _work([output])

    def reduce_scatter(self, output_tensors, input_tensors, opts):
        op = self._reduce_op(opts.reduceOp)
        for out, ins in zip(output_tensors, input_tensors):
            with _Restored(), torch.no_grad():
                flat = torch.cat([i.reshape(-1) for i in ins])
            self._reduce_scatter_flat(out, flat, [i.numel() for i in ins], op)
        return _work(output_tensors)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts):
        for o, i in zip(outputs, inputs):
            self._reduce_scatter_base(o, i, opts)
        return _work(outputs)

    def _a2a(self, flat_in: torch.Tensor, flat_out: torch.Tensor, row: list[int], collective: str) -> None:
        """Routed writes of ``row[d]`` elements of ``flat_in`` to each rank d into ``flat_out``
        (blocks in source-rank order); every rank's row is exchanged first to build the plan."""
        n = self._size
        mine = torch.tensor(row, dtype=torch.int64)
        allc = [torch.empty(n, dtype=torch.int64) for _ in range(n)]
        self._side.allgather([allc], [mine]).wait()
        matrix = [[int(x) for x in c] for c in allc]
        if sum(matrix[s][self._rank] for s in range(n)) != flat_out.numel():
            raise DistributedError(
                f"trnsim backend: {collective}: the output size does not match what the other ranks send"
            )
        iname, dtype, _ = self._flat(flat_in)
        oname, _, _ = self._flat(flat_out)
        plan = cc.plan("all_to_all", n, send_counts=matrix)
        self._run(plan, {"in": iname, "out": oname}, dtype, "add", collective, sum(row) * cc.ITEMSIZE[dtype])

    def _new(self, like: torch.Tensor, numel: int) -> torch.Tensor:
        with _Restored(), torch.no_grad():
            return torch.empty(numel, dtype=like.dtype, device=like.device)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts):
        n = self._size
        rows_in = input.shape[0] if input.dim() else 1
        per_row = input.numel() // rows_in if rows_in else 0
        ins = list(input_split_sizes) or [rows_in // n] * n
        with _Restored(), torch.no_grad():
            flat_in = input.reshape(-1).contiguous()
        flat_out = self._new(output, output.numel())
        self._a2a(flat_in, flat_out, [c * per_row for c in ins], "all_to_all")
        with _Restored(), torch.no_grad():
            output.copy_(flat_out.reshape(output.shape))
        return _work([output])

    def scatter(self, output_tensors, input_tensors, opts):
        root, out = opts.rootRank, output_tensors[0]
        if self._rank == root:
            with _Restored(), torch.no_grad():
                flat_in = torch.cat([t.reshape(-1) for t in input_tensors[0]])
            row = [t.numel() for t in input_tensors[0]]
        else:
            flat_in, row = self._new(out, 0), [0] * self._size
        flat_out = self._new(out, out.numel())
        self._a2a(flat_in, flat_out, row, "scatter")
        with _Restored(), torch.no_grad():
            out.copy_(flat_out.reshape(out.shape))
        return _work(output_tensors)

    def gather(self, output_tensors, input_tensors, opts):
        root, inp = opts.rootRank, input_tensors[0]
        row = [0] * self._size
        row[root] = inp.numel()
        outs = output_tensors[0] if self._rank == root else []
        flat_out = self._new(inp, sum(t.numel() for t in outs))
        with _Restored(), torch.no_grad():
            flat_in = inp.reshape(-1).contiguous()
        self._a2a(flat_in, flat_out, row, "gather")
        if self._rank == root:
            with _Restored(), torch.no_grad():
                off = 0
                for t in outs:
                    t.copy_(flat_out[off : off + t.numel()].reshape(t.shape))
                    off += t.numel()
        return _work(output_tensors)

    def alltoall(self, output_tensors, input_tensors, opts):
        with _Restored(), torch.no_grad():
            flat_in = torch.cat([t.reshape(-1) for t in input_tensors])
            flat_out = torch.empty(sum(t.numel() for t in output_tensors), dtype=flat_in.dtype, device=flat_in.device)
        self.alltoall_base(
            flat_out, flat_in, [t.numel() for t in output_tensors], [t.numel() for t in input_tensors], opts
        )
        with _Restored(), torch.no_grad():
            off = 0
            for t in output_tensors:
                t.copy_(flat_out[off : off + t.numel()].reshape(t.shape))
                off += t.numel()
        return _work(output_tensors)

    def send(self, tensors, dst_rank, tag):
        for t in tensors:
            name, _dtype, _ = self._flat(t)
            _, _, data = _device.STATE.session.get(name)
            self._side.send(
                [torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)],
                dst_rank,
                tag,
            ).wait()
            _record.point("send", len(data), self._size)
        return _work(tensors)

    def recv(self, tensors, src_rank, tag):
        for t in tensors:
            name, dtype, back = self._flat(t)
            nb = t.numel() * cc.ITEMSIZE[dtype]
            buf = torch.empty(nb, dtype=torch.uint8)
            self._side.recv([buf], src_rank, tag).wait()
            # the received bytes land in this rank's HBM, then a DMA copy writes the tensor
            mem = cc.RankMemory(_device.STATE.session, _device.STATE.target, {"buf": name}, dtype, f"p2p.{id(self)}")
            mem.apply("add", [(cc.Move(src_rank, self._rank, 0, 0, t.numel(), False), buf.numpy().tobytes())])
            _record.point("recv", nb, self._size)
            if back:
                back()
        return _work(tensors)

    def barrier(self, opts):
        self._side.barrier().wait()
        _record.point("barrier", 0, self._size)
        return _work([])


def _sess_dtype(name: str) -> str:
    return _device.STATE.session.info(name)[0]


def create(store, rank: int, size: int, timeout: timedelta):
    b = TrnsimBackend(store, rank, size, timeout)
    _LIVE.append(b)
    return b


def reduce_op_name(s: str) -> str:
    try:
        return _REDUCE_NAMES[s.lower()]
    except KeyError:
        raise DistributedError(f"trnsim backend: reduce op {s!r} is not supported") from None


# torch 2.15 names some Backend entry points twice (the `_base` forms and the `_single` forms).
TrnsimBackend.all_gather_single = TrnsimBackend._allgather_base
TrnsimBackend.reduce_scatter_single = TrnsimBackend._reduce_scatter_base
TrnsimBackend.all_to_all_single = TrnsimBackend.alltoall_base
TrnsimBackend.all_gather_single_coalesced = TrnsimBackend.allgather_into_tensor_coalesced
TrnsimBackend.reduce_scatter_single_coalesced = TrnsimBackend.reduce_scatter_tensor_coalesced
