"""The functional collectives (``_c10d_functional::*``, what DTensor and funcol use) on device
tensors: each is the c10d collective on a new tensor (or in place), run by the group's backend.
Collectives complete when they return, so ``wait_tensor`` is the identity."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _resolve_process_group

from ._backend import _REDUCE_NAMES, DistributedError

F = torch.ops._c10d_functional

_OPS = {
    "add": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "multiply": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "bitwise_and": dist.ReduceOp.BAND,
    "bitwise_or": dist.ReduceOp.BOR,
    "bitwise_xor": dist.ReduceOp.BXOR,
}


def _op(name: str):
    try:
        return _OPS[_REDUCE_NAMES[name.lower()]]
    except KeyError:
        raise DistributedError(f"trnsim backend: functional reduce op {name!r} is not supported") from None


def _ar_opts(red: str):
    o = dist.AllreduceOptions()
    o.reduceOp = _op(red)
    return o


def _rs_opts(red: str):
    o = dist.ReduceScatterOptions()
    o.reduceOp = _op(red)
    return o


def _all_reduce_(t, red, group):
    _resolve_process_group(group).allreduce([t], _ar_opts(red)).wait()
    return t


def _all_gather(t, group_size, group):
    t = t.contiguous()
    out = t.new_empty((t.shape[0] * group_size, *t.shape[1:]) if t.dim() else (group_size,))
    _resolve_process_group(group)._allgather_base(out, t).wait()
    return out


def _reduce_scatter(t, red, group_size, group):
    t = t.contiguous()
    if t.shape[0] % group_size:
        raise DistributedError("trnsim backend: reduce_scatter_tensor needs dim 0 divisible by the group size")
    out = t.new_empty((t.shape[0] // group_size, *t.shape[1:]))
    _resolve_process_group(group)._reduce_scatter_base(out, t, _rs_opts(red)).wait()
    return out


def _all_to_all_single(t, out_splits, in_splits, group):
    t = t.contiguous()
    rows = sum(out_splits) if out_splits else t.shape[0]
    out = t.new_empty((rows, *t.shape[1:]))
    pg = _resolve_process_group(group)
    pg.alltoall_base(out, t, list(out_splits), list(in_splits), dist.AllToAllOptions()).wait()
    return out


def _broadcast_(t, src, group):
    o = dist.BroadcastOptions()
    o.rootRank = src
    _resolve_process_group(group).broadcast([t], o).wait()
    return t


def run(func, args, kwargs):
    a = list(args) + list(kwargs.values())
    name = func._schema.name.split("::")[1]
    if name in ("wait_tensor", "_wrap_tensor_autograd"):
        return a[0]
    if name == "wait_tensors":
        return a[0]
    if name == "all_reduce":
        return _all_reduce_(a[0].clone(), a[1], a[2])
    if name == "all_reduce_":
        return _all_reduce_(a[0], a[1], a[2])
    if name == "all_reduce_coalesced":
        return [_all_reduce_(t.clone(), a[1], a[2]) for t in a[0]]
    if name == "all_reduce_coalesced_":
        return [_all_reduce_(t, a[1], a[2]) for t in a[0]]
    if name == "all_gather_into_tensor":
        return _all_gather(a[0], a[1], a[2])
    if name == "all_gather_into_tensor_out":
        out = _all_gather(a[0], a[1], a[2])
        a[3].copy_(out)
        return a[3]
    if name == "all_gather_into_tensor_coalesced":
        return [_all_gather(t, a[1], a[2]) for t in a[0]]
    if name == "reduce_scatter_tensor":
        return _reduce_scatter(a[0], a[1], a[2], a[3])
    if name == "reduce_scatter_tensor_out":
        out = _reduce_scatter(a[0], a[1], a[2], a[3])
        a[4].copy_(out)
        return a[4]
    if name == "reduce_scatter_tensor_coalesced":
        return [_reduce_scatter(t, a[1], a[2], a[3]) for t in a[0]]
    if name == "all_to_all_single":
        return _all_to_all_single(a[0], a[1], a[2], a[3])
    if name == "broadcast":
        return _broadcast_(a[0].clone(), a[1], a[2])
    if name == "broadcast_":
        return _broadcast_(a[0], a[1], a[2])
    raise DistributedError(f"trnsim backend: _c10d_functional::{name} is not supported on the trnsim device")
