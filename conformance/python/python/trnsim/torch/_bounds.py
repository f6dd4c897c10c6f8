"""Indices outside the tensor: the error PyTorch raises, and the ranges PyTorch checks.

The lowerings clamp every index on GpSimd and flag the out-of-range ones, so the indirect DMA
that uses them fails with trnsim's "addresses outside the tensor" (docs/lowering.md). That error
names the flagged internal offset, not the user's index. At the top of a call this module turns
it into the exception PyTorch's CPU kernel raises for the same call: the same type and the same
words, naming the user's first offending index (docs/torch-device.md, "Indices outside the
tensor"). The indices are read back to the host only on this error path, to write the message;
no result is computed from them.

Some ops reach the engines through PyTorch's decompositions, which accept indices the op itself
refuses (``index_add``/``index_copy`` decompose to ``index_put``, which wraps negatives). For
those, :func:`guard` first runs an engine gather of the indices over a tensor of the indexed
dimension's size, so an index outside ``[0, size)`` fails on the engines as the CPU's op fails.
"""

from __future__ import annotations

from typing import Any

import torch

OUTSIDE = "addresses outside the tensor"

# The op (its name without overload or trailing `_`) -> what PyTorch checks and says.
#   "in_self": IndexError("index out of range in self")
#   "dim":     index outside [lo, size) of `dim` -> f"index {v} is out of bounds for dimension ..."
#   "take":    index outside [-numel, numel)
#   "bag":     embedding_bag's message
#   "indices": advanced indexing: one index tensor per dimension, negatives wrap
_RULES: dict[str, tuple[str, type[Exception], bool]] = {
    # op: (rule, exception type, negatives allowed)
    "embedding": ("in_self", IndexError, False),
    "index_select": ("in_self", IndexError, False),
    "gather": ("dim", RuntimeError, False),
    "scatter": ("dim", RuntimeError, False),
    "scatter_add": ("dim", RuntimeError, False),
    "scatter_reduce": ("dim", RuntimeError, False),
    "index_add": ("dim", RuntimeError, False),
    "index_copy": ("dim", IndexError, False),
    "index_fill": ("dim", IndexError, True),
    "take": ("take", IndexError, True),
    "_embedding_bag": ("bag", RuntimeError, False),
    "embedding_bag": ("bag", RuntimeError, False),
    "_embedding_bag_forward_only": ("bag", RuntimeError, False),
    "index": ("indices", IndexError, True),
    "index_put": ("indices", IndexError, True),
    "_index_put_impl": ("indices", IndexError, True),
}

# Ops whose decomposition accepts indices the op refuses: checked on the engines first.
GUARDED = frozenset({"index_add", "index_copy"})


_BASE_NAMES: dict = {}


def base_name(func: torch._ops.OpOverload) -> str:
    name = _BASE_NAMES.get(func)
    if name is None:
        name = _BASE_NAMES[func] = func._schema.name.split("::", 1)[1].rstrip("_") or func._schema.name
    return name


def _arg(func, args, kwargs, name: str, default: Any = None) -> Any:
    for k, a in enumerate(func._schema.arguments):
        if a.name == name:
            if k < len(args):
                return args[k]
            return kwargs.get(name, default)
    return default


def _first_outside(values: torch.Tensor, size: int, negatives: bool) -> tuple[int, int] | None:
    """(flat position, value) of the first index outside the range PyTorch accepts."""
    flat = values.reshape(-1).to(torch.int64)
    lo = -size if negatives else 0
    bad = ((flat < lo) | (flat >= size)).nonzero()
    if bad.numel() == 0:
        return None
    k = int(bad[0, 0])
    return k, int(flat[k])


def pytorch_error(func, args, kwargs, download) -> Exception | None:
    """The exception PyTorch raises for this call's out-of-range index, or None when the call
    is not one of the indexing ops, no index is outside PyTorch's range, or the indices cannot
    be read back (then trnsim's own error stands). ``download`` reads a device tensor to the
    host."""
    try:
        return _pytorch_error(func, args, kwargs, download)
    except Exception:  # noqa: BLE001 - composing a message must never hide the engines' error
        return None


def _pytorch_error(func, args, kwargs, download) -> Exception | None:
    rule = _RULES.get(base_name(func))
    if rule is None:
        return None
    kind, exc, negatives = rule

    def host(t):
        if not isinstance(t, torch.Tensor):
            return None
        return t if t.device.type == "cpu" else download(t)

    if kind == "in_self":
        return exc("index out of range in self")
    if kind == "bag":
        weight, indices = _arg(func, args, kwargs, "weight"), host(_arg(func, args, kwargs, "indices"))
        if weight is None or indices is None:
            return None
        hit = _first_outside(indices, weight.shape[0], negatives)
        if hit is None:
            return None
        return exc(
            f"Index {hit[0]} of input takes value {hit[1]} which is not in the valid range [0, {weight.shape[0]})"
        )
    this = _arg(func, args, kwargs, "self")
    if not isinstance(this, torch.Tensor):
        return None
    if kind == "take":
        index = host(_arg(func, args, kwargs, "index"))
        n = this.numel()
        hit = None if index is None else _first_outside(index, n, negatives)
        if hit is None:
            return None
        return exc(f"out of range: tried to access index {hit[1]} on a tensor of {n} elements.")
    if kind == "dim":
        dim = int(_arg(func, args, kwargs, "dim", 0))
        index = host(_arg(func, args, kwargs, "index"))
        if index is None:
            return None
        dim = dim % max(this.dim(), 1)
        size = this.shape[dim] if this.dim() else 1
        hit = _first_outside(index, size, negatives)
        if hit is None:
            return None
        prefix = "index_copy_(): " if base_name(func) == "index_copy" else ""
        return exc(f"{prefix}index {hit[1]} is out of bounds for dimension {dim} with size {size}")
    # Advanced indexing: each index tensor takes one dimension; a boolean mask takes as many as
    # it has (its shape is checked by PyTorch before any value is read).
    # PyTorch's message numbers the index tensors (a mask counts as one per dimension it takes),
    # not the dimensions of `self`.
    indices = _arg(func, args, kwargs, "indices") or []
    d = j = 0
    for ix in indices:
        if ix is None:
            d += 1
            continue
        if ix.dtype in (torch.bool, torch.uint8):
            d += ix.dim()
            j += ix.dim()
            continue
        if d >= this.dim():
            return None
        size = this.shape[d]
        hit = _first_outside(host(ix), size, negatives)
        if hit is not None:
            return exc(f"index {hit[1]} is out of bounds for dimension {j} with size {size}")
        d += 1
        j += 1
    return None


def guard(func, args, kwargs) -> None:
    """For an op of :data:`GUARDED`: gathers its indices, on the engines, over a tensor the
    size of the indexed dimension, so an index PyTorch's op refuses (outside ``[0, size)``)
    fails there before the decomposition (which would wrap a negative one) runs."""
    this = _arg(func, args, kwargs, "self")
    index = _arg(func, args, kwargs, "index")
    if not isinstance(this, torch.Tensor) or not isinstance(index, torch.Tensor) or index.numel() == 0:
        return
    dim = int(_arg(func, args, kwargs, "dim", 0)) % max(this.dim(), 1)
    size = this.shape[dim] if this.dim() else 1
    aten = torch.ops.aten
    probe = aten.zeros.default([size], dtype=torch.uint8, device=this.device)
    aten.index_select.default(probe, 0, index.reshape(-1))
