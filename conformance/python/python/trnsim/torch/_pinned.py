"""Pinned host memory for the device: ``tensor.pin_memory()``, ``is_pinned()`` and DataLoader's
``pin_memory=True`` (docs/torch-device.md, "Pinned memory").

PyTorch asks the current accelerator's hooks for a pinned-memory allocator (``is_pinned`` and
``_pin_memory`` of a CPU tensor), and torch 2.15's Python hooks interface for a PrivateUse1
backend has no such method, so both fail inside PyTorch with "You should register
PrivateUse1HooksInterface". Pinning is page-locked host memory, which a simulator's transfers do
not need: every copy to the device is synchronous (a ``non_blocking=True`` copy has finished when
it returns). So the device registers CPU kernels for the two ops: ``_pin_memory`` returns a host
copy that ``is_pinned`` reports as pinned (as PyTorch's pinned copy is a new tensor), and any
other tensor is not pinned. A ``device=`` other than this device is an error naming it.
"""

from __future__ import annotations

import warnings
import weakref

import torch

from . import _device

# data_ptr of a pinned copy's storage -> the copy (weak: a freed copy is no longer pinned, and its
# address may be reused by an unpinned tensor).
_PINNED: dict[int, weakref.ref] = {}


def _check(device, op: str) -> None:
    if device is None:
        return
    d = torch.device(device)
    if d.type != _device.DEVICE_NAME:
        raise RuntimeError(
            f"{op}: pinned memory for a {d.type} device is not available in this process "
            f"(the accelerator is the simulated `{_device.DEVICE_NAME}` device)"
        )


def _is_pinned(self, device=None):
    _check(device, "is_pinned")
    if self.numel() == 0:
        return False
    ptr = self.untyped_storage().data_ptr()
    ref = _PINNED.get(ptr)
    return ref is not None and ref() is not None


def _pin_memory(self, device=None):
    _check(device, "pin_memory")
    out = self.clone(memory_format=torch.contiguous_format)
    if out.numel():
        ptr = out.untyped_storage().data_ptr()
        _PINNED[ptr] = weakref.ref(out)
        weakref.finalize(out, _PINNED.pop, ptr, None)
    return out


_LIB = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    # "Overriding a previously registered kernel": the CPU kernels that would ask the hooks.
    warnings.simplefilter("ignore")
    _LIB.impl("is_pinned", _is_pinned, "CPU")
    _LIB.impl("_pin_memory", _pin_memory, "CPU")
