"""Ops whose output size depends on the input's values, as compositions of lowered ops
(docs/torch-device.md, "Value-dependent sizes").

The values are computed on the engines. The host needs one number to allocate the output (how
many elements were selected, the largest bin, the number of distinct values); that number is
computed by a device reduction and read back in **one** counted synchronisation
(``report()["syncs"]``), as CUDA's kernels read it. Nothing else is read by the host.

* ``masked_select``: the mask broadcast with the input, then the lowered ``index.Tensor`` with a
  boolean mask (its row count is the one read);
* ``bincount``: the smallest and largest value (one read, which also checks the values are not
  negative), then ``scatter_add`` of the weights (or ones) into zeros;
* ``repeat_interleave.Tensor``: the total (``cumsum``'s last element) and the smallest repeat in
  one read (none with ``output_size=``); the output is the ``cumsum`` of ones scattered at the
  running totals;
* ``_unique2`` (``torch.unique``, sorted): the lowered ``sort``, a "differs from its predecessor"
  flag, its ``cumsum`` (each sorted element's group), the number of groups (the one read); the
  values, inverse indices and counts are ``scatter`` / ``scatter_add`` by group;
* ``unique_consecutive``: the same without the sort; with ``dim``, a slice starts a group when
  any of its elements differs from the previous slice's, and ``index_select`` picks a member.
"""

from __future__ import annotations

import torch

from . import _device, _report
from ._device import EXTRA_FORMS, TrnsimTensor

aten = torch.ops.aten


def _dev() -> str:
    return _device.DEVICE_NAME


def read_counted(op: str, t: TrnsimTensor) -> list:
    """The values of a small device tensor, read by the host: one counted sync for ``op``."""
    _report.REPORT.sync(op)
    _report.REPORT.transfer("device_to_host")
    return _device.download(t).reshape(-1).tolist()


def _masked_select(x, mask):
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {mask.dtype}")
    shape = torch.broadcast_shapes(x.shape, mask.shape)
    if x.shape != shape:
        x = x.expand(shape)
    if mask.shape != shape:
        mask = mask.expand(shape)
    if x.numel() == 0:
        return torch.empty(0, dtype=x.dtype, device=_dev())
    if x.dim() == 0:
        x, mask = x.reshape(1), mask.reshape(1)
    # The lowered boolean-mask index: its row count is computed on the device and read once.
    return aten.index.Tensor(x, [mask])


def _bincount(x, weights=None, minlength=0):
    if x.dim() != 1 or x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is not None and (weights.dim() != 1 or weights.shape[0] != x.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    n = x.shape[0]
    if n == 0:
        # PyTorch's CPU kernel: an empty input gives int64 zeros, with or without weights.
        return torch.zeros(minlength, dtype=torch.int64, device=_dev())
    # PyTorch's CPU kernel: float32 weights give float32 counts, any other weights float64
    # (which the device refuses by its dtype policy), no weights int64.
    if weights is None:
        dtype = torch.int64
    elif weights.dtype == torch.float32:
        dtype = torch.float32
    else:
        dtype = torch.float64
        _device._golden(dtype)  # the device's DtypeError, counted
    lo, hi = read_counted("bincount", torch.stack([x.amin(), x.amax()]))
    if lo < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    size = max(int(hi) + 1, minlength)
    src = weights if weights is not None else torch.ones(n, dtype=dtype, device=_dev())
    index = x if x.dtype == torch.int64 else x.to(torch.int64)
    return torch.zeros(size, dtype=dtype, device=_dev()).scatter_add(0, index, src)


def _repeat_interleave(repeats, *, output_size=None):
    if repeats.dim() != 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.is_floating_point() or repeats.is_complex() or repeats.dtype == torch.bool:
        raise RuntimeError("repeats has to be Long or Int tensor")
    n = repeats.shape[0]
    if n == 0:
        return torch.empty(0, dtype=repeats.dtype, device=_dev())
    running = torch.cumsum(repeats, 0)
    if output_size is None:
        total, low = read_counted("repeat_interleave.Tensor", torch.stack([running[-1], repeats.amin()]))
        if low < 0:
            raise RuntimeError("repeats can not be negative")
    else:
        total = output_size
    total = int(total)
    if total == 0:
        return torch.empty(0, dtype=repeats.dtype, device=_dev())
    # Position running[i] starts element i + 1: ones scattered there, summed, give each output
    # position its element (a zero repeat adds at the same position as its successor).
    marks = torch.zeros(total + 1, dtype=repeats.dtype, device=_dev())
    marks = marks.scatter_add(0, running.to(torch.int64), torch.ones(n, dtype=repeats.dtype, device=_dev()))
    return torch.cumsum(marks, 0, dtype=repeats.dtype)[:total]


def _groups(op: str, v):
    """For a 1-D ``v`` whose equal values are adjacent: each element's group index (int64) and
    the number of groups (the one read). NaNs are distinct, as in PyTorch's unique."""
    n = v.shape[0]
    first = torch.ones(1, dtype=torch.bool, device=_dev())
    if n > 1:
        differs = v[1:] != v[:-1]
        first = torch.cat([first, differs])
    group = torch.cumsum(first.to(torch.int64), 0) - 1
    (last,) = read_counted(op, group[-1])
    return group, int(last) + 1


def _distinct(op, flat, order, return_inverse, return_counts, shape):
    """Values, inverse and counts of ``flat`` whose equal values are adjacent; ``order[i]`` is
    the input position of ``flat[i]`` (None: the identity)."""
    n = flat.shape[0]
    group, k = _groups(op, flat)
    values = torch.empty(k, dtype=flat.dtype, device=_dev()).scatter(0, group, flat)
    empty = torch.empty(0, dtype=torch.int64, device=_dev())
    inverse = empty
    if return_inverse:
        if order is None:
            inverse = group.reshape(shape)
        else:
            inverse = torch.empty(n, dtype=torch.int64, device=_dev()).scatter(0, order, group).reshape(shape)
    counts = empty
    if return_counts:
        ones = torch.ones(n, dtype=torch.int64, device=_dev())
        counts = torch.zeros(k, dtype=torch.int64, device=_dev()).scatter_add(0, group, ones)
    return values, inverse, counts


def _empty_result(x, return_inverse):
    empty = torch.empty(0, dtype=torch.int64, device=_dev())
    inverse = torch.empty(x.shape, dtype=torch.int64, device=_dev()) if return_inverse else empty
    return torch.empty(0, dtype=x.dtype, device=_dev()), inverse, empty


def _sortable(flat):
    # The lowered sort takes numbers: bool sorts as uint8 (False < True) and comes back.
    return flat.to(torch.uint8) if flat.dtype == torch.bool else flat


def _unique2(x, sorted=True, return_inverse=False, return_counts=False):
    # `sorted=False` leaves the order to the implementation (PyTorch's CPU kernel hashes); this
    # device always returns the sorted order.
    if x.numel() == 0:
        return _empty_result(x, return_inverse)
    flat = _sortable(x.reshape(-1))
    v, order = torch.sort(flat)
    values, inverse, counts = _distinct("_unique2", v, order, return_inverse, return_counts, x.shape)
    return values.to(x.dtype), inverse, counts


def _unique_consecutive_dim(x, return_inverse, return_counts, dim):
    """Runs of equal slices along ``dim``: a slice starts a group if any element differs from the
    slice before it; each group's slice is any of its (equal) members."""
    d = dim % x.dim()
    n = x.shape[d]
    empty = torch.empty(0, dtype=torch.int64, device=_dev())
    if n == 0 or x.numel() == 0:
        if n == 0:
            return x, empty, empty
        # slices with no elements are all equal: one group
        ones = torch.zeros(n, dtype=torch.int64, device=_dev())
        counts = torch.full((1,), n, dtype=torch.int64, device=_dev()) if return_counts else empty
        return x.narrow(d, 0, 1), ones if return_inverse else empty, counts
    lanes = x.movedim(d, 0).reshape(n, -1)
    first = torch.ones(1, dtype=torch.bool, device=_dev())
    if n > 1:
        first = torch.cat([first, (lanes[1:] != lanes[:-1]).any(1)])
    group = torch.cumsum(first.to(torch.int64), 0) - 1
    (last,) = read_counted("unique_consecutive", group[-1])
    k = int(last) + 1
    positions = torch.arange(n, dtype=torch.int64, device=_dev())
    member = torch.empty(k, dtype=torch.int64, device=_dev()).scatter(0, group, positions)
    values = x.index_select(d, member)
    inverse = group if return_inverse else empty
    counts = empty
    if return_counts:
        ones = torch.ones(n, dtype=torch.int64, device=_dev())
        counts = torch.zeros(k, dtype=torch.int64, device=_dev()).scatter_add(0, group, ones)
    return values, inverse, counts


def _unique_consecutive(x, return_inverse=False, return_counts=False, dim=None):
    if dim is not None:
        if x.dim() == 0:
            raise IndexError(f"Dimension out of range (expected to be in range of [-1, 0], but got {dim})")
        return _unique_consecutive_dim(x, return_inverse, return_counts, dim)
    if x.numel() == 0:
        return _empty_result(x, return_inverse)
    flat = _sortable(x.reshape(-1))
    values, inverse, counts = _distinct("unique_consecutive", flat, None, return_inverse, return_counts, x.shape)
    return values.to(x.dtype), inverse, counts


EXTRA_FORMS.update(
    {
        aten.masked_select.default: _masked_select,
        aten.bincount.default: _bincount,
        aten.repeat_interleave.Tensor: _repeat_interleave,
        aten._unique2.default: _unique2,
        aten.unique_consecutive.default: _unique_consecutive,
    }
)
