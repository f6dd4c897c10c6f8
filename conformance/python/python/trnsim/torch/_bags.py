"""``nn.EmbeddingBag`` / ``F.embedding_bag`` on the device (docs/torch-device.md, "EmbeddingBag").

Forward: the lowered ``_embedding_bag`` (conformance/lower/src/embedding_bag.rs), which fills
its outputs as PyTorch's CPU kernel does. PyTorch's meta kernel (what a non-CPU device's outputs
look like, and what autograd saves) gives other shapes for two of them: ``offset2bag`` always
``[N]`` ``max_indices`` ``[0]`` for sum and mean, ``bag_size`` one entry per offset with
``include_last_offset`` (the CPU gives ``[0]`` on its sum fast path, ``[B]`` and ``[B]``). The device lowers the call with the CPU's shapes, ``offset2bag`` ``[N]`` (filled),
and returns the meta kernel's: ``max_indices`` of sum/mean is then an empty tensor, as on CUDA.

Backward (PyTorch has no decomposition of these): ``_embedding_bag_backward`` /
``_embedding_bag_dense_backward`` — each index's row of the weight gradient accumulates its bag's
output gradient (sum), divided by the bag size (mean; as the CPU kernel, times ``1 / bag_size``),
times its per-sample weight, and divided by the index's count with ``scale_grad_by_freq``;
``padding_idx`` rows get nothing; for max, each (bag, column) adds its gradient at the row its
maximum came from (empty bags add nothing). An ``index_put`` with ``accumulate=True``.
``_embedding_bag_per_sample_weights_backward`` is the dot product of a bag's output gradient
with each index's weight row. Sparse gradients (``sparse=True``) are refused.
"""

from __future__ import annotations

import torch

from . import _device
from ._device import EXTRA_FORMS, UnsupportedOpError

aten = torch.ops.aten

MODE_SUM, MODE_MEAN, MODE_MAX = 0, 1, 2


def _embedding_bag(
    weight,
    indices,
    offsets,
    scale_grad_by_freq=False,
    mode=0,
    sparse=False,
    per_sample_weights=None,
    include_last_offset=False,
    padding_idx=-1,
):
    args = (weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights, include_last_offset)
    args = args + (padding_idx,)
    meta = aten._embedding_bag.default(*(_device._to_meta(a) for a in args))
    out, offset2bag, bag_size, max_indices = meta
    b = out.shape[0]
    # The CPU kernel's shapes, which the lowering fills as the CPU does.
    cpu_max = max_indices if mode == MODE_MAX else torch.empty(b, dtype=max_indices.dtype, device="meta")
    cpu_bag = bag_size if bag_size.shape[0] == b else torch.empty(b, dtype=bag_size.dtype, device="meta")
    cpu_meta = (out, offset2bag, cpu_bag, cpu_max)
    res = _device._run_lowered(aten._embedding_bag.default, args, {}, name="_embedding_bag", meta=cpu_meta)
    out_d, o2b_d, bag_d, max_d = res
    if mode != MODE_MAX:
        max_d = torch.empty(0, dtype=max_indices.dtype, device=_device.DEVICE_NAME)
    if bag_size.shape[0] > b:
        # include_last_offset: the meta kernel's bag_size has one entry per offset (the last 0)
        pad = torch.zeros(bag_size.shape[0] - b, dtype=bag_d.dtype, device=_device.DEVICE_NAME)
        bag_d = torch.cat([bag_d, pad])
    return out_d, o2b_d, bag_d, max_d


def _kept(indices, padding_idx):
    return None if padding_idx is None or padding_idx < 0 else indices != padding_idx


def _dense_backward(
    grad,
    indices,
    offset2bag,
    bag_size,
    maximum_indices,
    num_weights,
    scale_grad_by_freq,
    mode,
    per_sample_weights=None,
    padding_idx=-1,
):
    d = grad.shape[1]
    dev = _device.DEVICE_NAME
    if mode == MODE_MAX:
        if indices.numel() == 0 or grad.shape[0] == 0:
            return torch.zeros(num_weights, d, dtype=grad.dtype, device=dev)
        nonempty = (bag_size[: grad.shape[0]] > 0).unsqueeze(1)
        flat_index = torch.where(nonempty, maximum_indices * d + torch.arange(d, device=dev), 0).reshape(-1)
        src = torch.where(nonempty, grad, 0.0).reshape(-1)
        flat = torch.zeros(num_weights * d, dtype=grad.dtype, device=dev)
        return flat.index_put((flat_index,), src, accumulate=True).reshape(num_weights, d)
    if indices.numel() == 0:
        return torch.zeros(num_weights, d, dtype=grad.dtype, device=dev)
    rows = grad.index_select(0, offset2bag)
    scale = None
    if mode == MODE_MEAN:
        scale = torch.reciprocal(bag_size.index_select(0, offset2bag).to(grad.dtype).clamp(min=1))
    if per_sample_weights is not None:
        w = per_sample_weights.to(grad.dtype)
        scale = w if scale is None else scale * w
    if scale_grad_by_freq:
        ones = torch.ones(indices.shape[0], dtype=grad.dtype, device=dev)
        counts = torch.zeros(num_weights, dtype=grad.dtype, device=dev).scatter_add(0, indices, ones)
        freq = torch.reciprocal(counts.index_select(0, indices))
        scale = freq if scale is None else scale * freq
    keep = _kept(indices, padding_idx)
    if keep is not None:
        k = keep.to(grad.dtype)
        scale = k if scale is None else scale * k
    if scale is not None:
        rows = rows * scale.unsqueeze(1)
    out = torch.zeros(num_weights, d, dtype=grad.dtype, device=dev)
    return out.index_put((indices,), rows, accumulate=True)


def _backward(grad, indices, offsets, *rest, **kwargs):
    """`_embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
    num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights=None, padding_idx=-1)`: the
    dense backward without `offsets` and `sparse`."""
    dense = list(rest[:6]) + list(rest[7:])
    sparse = rest[6] if len(rest) > 6 else kwargs.pop("sparse")
    if sparse:
        raise UnsupportedOpError(
            f"trnsim: aten::_embedding_bag_backward with sparse=True is not supported on the "
            f"{_device.DEVICE_NAME} device (its tensors are dense); called from {_device._call_site()}. "
            "Create the EmbeddingBag with sparse=False."
        )
    return _dense_backward(grad, indices, *dense, **kwargs)


def _per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1):
    if mode != MODE_SUM:
        raise RuntimeError("embedding_bag_backward: per_sample_weights only supported for mode='sum'")
    if indices.numel() == 0:
        return torch.zeros(0, dtype=grad.dtype, device=_device.DEVICE_NAME)
    dots = (grad.index_select(0, offset2bag) * weight.index_select(0, indices)).sum(1)
    keep = _kept(indices, padding_idx)
    return dots if keep is None else torch.where(keep, dots, 0.0)


EXTRA_FORMS.update(
    {
        aten._embedding_bag.default: _embedding_bag,
        aten._embedding_bag_forward_only.default: _embedding_bag,
        aten._embedding_bag_backward.default: _backward,
        aten._embedding_bag_dense_backward.default: _dense_backward,
        aten._embedding_bag_per_sample_weights_backward.default: _per_sample_weights_backward,
    }
)
