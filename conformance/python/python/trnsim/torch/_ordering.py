"""Order statistics and binning as compositions of lowered ops (docs/torch-device.md, "Order
statistics and binning"). None reads a device value on the host.

* ``sort.stable`` (``sort(stable=True)``, ``argsort(stable=True)``) is the lowered ``sort``: its
  bitonic network compares (value, position) pairs, so equal values keep their input order (and
  NaN sorts greatest), which is PyTorch's stable order (conformance/lower/src/sort.rs);
* ``kthvalue``, ``median``, ``nanmedian`` pick from that stable sort: the k-th element; the
  lower median ``(n − 1) // 2``, or for ``median`` a row's first NaN in input order when it has
  one (PyTorch's CPU kernel returns that NaN and its index); for ``nanmedian`` the lower median of
  the non-NaN elements (NaN and index 0 when all are NaN);
* ``searchsorted`` counts, per value, the sequence elements with ``!(s ≥ v)`` (left) or
  ``!(s > v)`` (right): the position PyTorch's binary search returns on a sorted sequence, NaN
  included (a broadcast compare and a ``sum``);
* ``histc`` is PyTorch's CPU formula ``trunc((x − min) · bins / (max − min))`` in the input dtype
  (the division is the lowered ``div(rounding_mode='trunc')``, the truncation of the correctly
  rounded quotient, as the CPU's C++ cast), the last edge in the last bin, elements outside
  ``[min, max]`` (and NaN) left out, and the counts a ``scatter_add``. ``min == max`` takes the
  data's minimum and maximum, computed on the device.
"""

from __future__ import annotations

import torch

from . import _device
from ._device import EXTRA_FORMS

aten = torch.ops.aten


def _dev() -> str:
    return _device.DEVICE_NAME


def _sort_stable(x, *, stable=None, dim=-1, descending=False):
    # The lowered sort is stable whatever `stable` says (a valid order for stable=False too).
    return aten.sort.default(x, dim, descending)


def _pick(v, i, pos, dim, keepdim):
    """``v`` and ``i`` along ``dim`` at ``pos`` (keepdim-shaped positions)."""
    values = torch.gather(v, dim, pos)
    indices = torch.gather(i, dim, pos)
    if not keepdim:
        values, indices = values.squeeze(dim), indices.squeeze(dim)
    return values, indices


def _lanes(x, dim):
    if x.dim() == 0:
        return x.reshape(1), 0
    return x, dim % x.dim()


def _kthvalue(x, k, dim=-1, keepdim=False):
    zero_d = x.dim() == 0
    x, d = _lanes(x, dim)
    n = x.shape[d]
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {dim}")
    v, i = aten.sort.default(x, d, False)
    values, indices = v.narrow(d, k - 1, 1), i.narrow(d, k - 1, 1)
    if not keepdim or zero_d:
        values, indices = values.squeeze(d), indices.squeeze(d)
    if zero_d:
        values, indices = values.reshape(()), indices.reshape(())
    return values, indices


def _median_dim(x, dim, keepdim=False, ignore_nan=False):
    zero_d = x.dim() == 0
    x, d = _lanes(x, dim)
    n = x.shape[d]
    if n == 0:
        raise IndexError(f"median(): Expected reduction dim {dim} to have non-zero size.")
    v, i = aten.sort.default(x, d, False)
    lane = list(x.shape)
    lane[d] = 1
    if x.is_floating_point():
        nans = torch.isnan(x).sum(d, keepdim=True)  # NaNs sort last, in input order
        if ignore_nan:
            valid = n - nans
            pos = torch.where(valid > 0, torch.div(valid - 1, 2, rounding_mode="floor"), 0)
        else:
            pos = torch.where(nans > 0, n - nans, (n - 1) // 2)
    else:
        pos = torch.full(lane, (n - 1) // 2, dtype=torch.int64, device=_dev())
    values, indices = _pick(v, i, pos.to(torch.int64), d, True)
    if not keepdim or zero_d:
        values, indices = values.squeeze(d), indices.squeeze(d)
    if zero_d:
        values, indices = values.reshape(()), indices.reshape(())
    return values, indices


def _median_all(x, ignore_nan=False):
    if x.numel() == 0:
        return torch.full((), float("nan"), dtype=x.dtype, device=_dev())
    return _median_dim(x.reshape(-1), 0, False, ignore_nan)[0]


def _searchsorted(seq, values, *, out_int32=False, right=False, side=None, sorter=None):
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
        if right and side == "left":
            raise RuntimeError(
                "torch.searchsorted(): side and right can't be set to opposites, got side of left while right was True"
            )
        right = side == "right"
    if sorter is not None:
        seq = torch.gather(seq, -1, sorter)
    dtype = torch.int32 if out_int32 else torch.int64
    if seq.dim() == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions")
    m = seq.shape[-1]
    if values.numel() == 0 or m == 0:
        return torch.zeros(values.shape, dtype=dtype, device=_dev())
    if seq.dim() == 1:
        s = seq.reshape([1] * values.dim() + [m])
    else:
        if values.dim() != seq.dim() or tuple(values.shape[:-1]) != tuple(seq.shape[:-1]):
            raise RuntimeError(
                "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions of "
                f"boundaries tensor and input value tensor must match, but we got boundaries tensor "
                f"{list(seq.shape)} and input value tensor {list(values.shape)}"
            )
        s = seq.unsqueeze(-2)
    v = values.unsqueeze(-1)
    if seq.dtype != values.dtype:
        common = torch.promote_types(seq.dtype, values.dtype)
        s, v = s.to(common), v.to(common)
    # On a sorted sequence, PyTorch's binary search lands on the number of elements before which
    # `s >= v` (left) / `s > v` (right) first holds: the count of those where it does not.
    before = torch.logical_not(s > v) if right else torch.logical_not(s >= v)
    return before.sum(-1, dtype=dtype)


def _searchsorted_scalar(seq, value, *, out_int32=False, right=False, side=None, sorter=None):
    v = torch.full((), value, dtype=seq.dtype, device=_dev())
    return _searchsorted(seq, v, out_int32=out_int32, right=right, side=side, sorter=sorter)


def _histc(x, bins=100, min=0, max=0):
    if bins <= 0:
        raise RuntimeError(f"torch.histc(): bins must be > 0, but got {bins} for dimension 0")
    if not x.is_floating_point():
        raise RuntimeError(f"\"histogram_cpu\" not implemented for '{str(x.dtype).replace('torch.', '').title()}'")
    if min > max:
        raise RuntimeError(f"torch.histc(): max must be larger than min, but got min {min} max {max}")
    flat = x.reshape(-1)
    if flat.numel() == 0:
        return torch.zeros(bins, dtype=x.dtype, device=_dev())
    if min == max:
        # The data's range (on the device), widened by 1 each way if it is a single value.
        lo, hi = flat.amin(), flat.amax()
        same = lo == hi
        lo, hi = torch.where(same, lo - 1, lo), torch.where(same, hi + 1, hi)
    else:
        lo = torch.full((), min, dtype=x.dtype, device=_dev())
        hi = torch.full((), max, dtype=x.dtype, device=_dev())
    inside = torch.logical_and(flat >= lo, flat <= hi)
    scaled = (flat - lo) * bins
    pos = torch.div(scaled, hi - lo, rounding_mode="trunc")
    pos = torch.where(inside, pos, 0.0).clamp(0, bins - 1).to(torch.int64)
    return torch.zeros(bins, dtype=x.dtype, device=_dev()).scatter_add(0, pos, inside.to(x.dtype))


EXTRA_FORMS.update(
    {
        aten.sort.stable: _sort_stable,
        aten.kthvalue.default: _kthvalue,
        aten.median.dim: lambda x, dim, keepdim=False: _median_dim(x, dim, keepdim),
        aten.median.default: lambda x: _median_all(x),
        aten.nanmedian.dim: lambda x, dim, keepdim=False: _median_dim(x, dim, keepdim, ignore_nan=True),
        aten.nanmedian.default: lambda x: _median_all(x, ignore_nan=True),
        aten.searchsorted.Tensor: _searchsorted,
        aten.searchsorted.Scalar: _searchsorted_scalar,
        aten.histc.default: _histc,
    }
)
