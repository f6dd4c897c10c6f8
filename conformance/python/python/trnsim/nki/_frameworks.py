"""The current `nki.jit`'s framework choice, from the argument types (AWS's `nki.jit` docstring:
torch tensors use the PyTorch integration, NumPy arrays run standalone).

torch tensors (on the CPU or on the `trnsim` device) become NumPy arrays of the same bits
(bf16/fp8 through ml_dtypes) for the trace, and the kernel's outputs come back as torch tensors on
the device of the first tensor argument. A tensor argument the kernel writes is updated in place,
as AWS's simulator documents for its inputs. JAX arrays are refused: there is no JAX here.
torch is imported only when an argument is a torch tensor."""

import sys

import numpy as np

from ._core import NkiError

_SPECIAL = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")


def _is_torch(v):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(v, torch.Tensor)


def _numpy_of(t):
    import ml_dtypes
    import torch

    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()  # the trnsim device: its bytes, for the kernel's HBM inputs
    t = t.contiguous()
    raw = {
        torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
        torch.float8_e4m3fn: (torch.uint8, ml_dtypes.float8_e4m3fn),
        torch.float8_e5m2: (torch.uint8, ml_dtypes.float8_e5m2),
        torch.float8_e8m0fnu: (torch.uint8, ml_dtypes.float8_e8m0fnu),  # MX scales (trn3)
    }
    if t.dtype in raw:
        r, d = raw[t.dtype]
        return t.view(r).numpy().view(d).copy()
    if t.dtype.is_complex or t.dtype == torch.float64 or t.dtype == torch.int64:
        raise NkiError(f"a torch {t.dtype} argument: NKI tensors have no such dtype")
    return t.numpy().copy()


def _torch_of(a, like):
    import torch

    a = np.ascontiguousarray(np.asarray(a))
    name = str(a.dtype)
    if name in _SPECIAL:
        dt = {
            "bfloat16": torch.bfloat16,
            "float8_e4m3fn": torch.float8_e4m3fn,
            "float8_e5m2": torch.float8_e5m2,
            "float8_e8m0fnu": torch.float8_e8m0fnu,
        }[name]
        raw = np.int16 if name == "bfloat16" else np.uint8
        t = torch.from_numpy(a.view(raw).copy()).view(dt)
    else:
        t = torch.from_numpy(a.copy())
    return t.to(like.device) if like is not None and like.device.type != "cpu" else t


class Converted:
    """The arguments of one call, torch tensors replaced by NumPy arrays."""

    def __init__(self, args, kwargs):
        self.pairs = []  # (torch tensor, numpy array)
        self.first = None
        self.args = tuple(self._conv(a) for a in args)
        self.kwargs = {k: self._conv(v) for k, v in kwargs.items()}

    def _conv(self, v):
        if _is_torch(v):
            a = _numpy_of(v)
            self.pairs.append((v, a))
            if self.first is None:
                self.first = v
            return a
        if type(v).__module__.startswith("jax"):
            raise NkiError("a JAX array argument: trnsim's nki.jit runs NumPy arrays and torch tensors (no JAX here)")
        return v

    def back(self, out, written=()):
        """Outputs as torch tensors when the call had torch arguments; written tensor arguments
        updated in place from their arrays."""
        written_ids = {id(a) for a in written}
        for t, a in self.pairs:
            if id(a) in written_ids:
                with __import__("torch").no_grad():
                    t.copy_(_torch_of(a, t))
        if self.first is None:
            return out
        if isinstance(out, tuple):
            return tuple(_torch_of(o, self.first) for o in out)
        return None if out is None else _torch_of(out, self.first)
