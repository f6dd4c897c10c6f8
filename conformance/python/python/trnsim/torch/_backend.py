"""Which backend serves the device's Core ATen ops: trnconf's lowering (the default) or an NKI
backend module, spelled as for ``trnconf run --backend``: ``lowering`` or ``nki:MODULE``
(docs/nki-backend.md, docs/torch-device.md "Backends").

An NKI backend module maps Core ATen overloads to ``(kernels, wrapper)`` in ``OVERLOADS``; the
wrapper takes the call's arguments with tensors as NumPy arrays and calls the kernels, which
``trnsim.nki`` traces and runs on the simulator. This module loads such a module and runs one
call through it; the device (``_device.py``) decides when, and moves the tensors.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

import numpy as np
import torch

from ..nki import backend_module
from ..nki.backend_module import display_path as _display_path
from ..nki.backend_module import kernel_location
from ..nki.backend_module import kernels_of as _kernels_of

LOWERING = "lowering"


class BackendError(RuntimeError):
    """A backend spelling that names no usable backend (bad `nki:` module, bad OVERLOADS)."""


class Declined(Exception):
    """The module's wrapper raised NotImplementedError from its own code: it does not serve this
    call form, so the lowering serves it."""


def last_stats() -> dict:
    """The statistics of the latest kernel run (``trnsim.nki.last_run()``)."""
    import trnsim.nki

    run = trnsim.nki.last_run()
    stats = run.stats if run is not None else None
    if isinstance(stats, str):
        import json

        stats = json.loads(stats)
    return stats or {}


def _host_call(kernel, args, kwargs, runs: list):
    out = kernel(*args, **kwargs)
    runs.append(last_stats())
    return out


def retarget(kernel, target: str | None):
    """``kernel`` (an ``nki.jit`` kernel or a plain function) traced for ``target``: the device's
    target, so a kernel runs on the NeuronCore the device simulates."""
    import trnsim.nki

    if target is None:
        return kernel
    if not isinstance(kernel, trnsim.nki.Kernel):
        return trnsim.nki.Kernel(kernel, target=target)
    return trnsim.nki.Kernel(kernel.func, kernel.mode, kernel.grid, target, kernel.numerics, **kernel.options)


class _CountingKernel:
    """A kernel handed to a wrapper: calls the real one through ``call`` (the host convention, or
    the device's session) and records the simulator run's statistics, so the device's report
    counts the kernel's programs and estimated time."""

    def __init__(self, kernel, runs: list, call=_host_call) -> None:
        self._kernel = kernel
        self._runs = runs
        self._call = call

    def __call__(self, *args, **kwargs):
        return self._call(self._kernel, args, kwargs, self._runs)

    def __getitem__(self, grid):  # `kernel[grid](...)`: an SPMD launch
        return _CountingKernel(self._kernel[grid], self._runs, self._call)

    def __getattr__(self, name: str):
        return getattr(self._kernel, name)


class NkiModule:
    """A loaded NKI backend module (``nki:MODULE``)."""

    def __init__(self, spec: str) -> None:
        import trnsim.nki

        trnsim.nki.install()
        self.spec = spec
        self.label = f"nki:{spec}"
        try:
            self.module = backend_module.load(spec)
        except backend_module.BackendModuleError as e:
            raise BackendError(f"nki:{e}") from e
        table = self.module.OVERLOADS
        self.table = table
        self.files = backend_module.source_files(self.module)
        self.locations: dict[str, list[str]] = {
            op: [kernel_location(k) for k in _kernels_of(entry)] for op, entry in table.items()
        }

    def provides(self, op: str) -> bool:
        return op in self.table

    def describe(self) -> dict[str, Any]:
        return {
            "module": self.spec,
            "file": os.path.abspath(getattr(self.module, "__file__", "") or "") or None,
            "overloads": {op: self.locations[op] for op in sorted(self.table)},
        }

    def run(
        self, op: str, args: list, kwargs: dict, call=_host_call, raw: bool = False, target: str | None = None
    ) -> tuple[Any, list[dict]]:
        """Calls the wrapper of ``op``; every kernel call goes through ``call``, traced for
        ``target`` (None: the kernel's own). Returns the result and the statistics of every
        kernel run. Raises :class:`Declined`, and otherwise a RuntimeError naming where in the
        module it failed (``raw``: the error itself)."""
        kernels, wrapper = self.table[op]
        runs: list[dict] = []
        if isinstance(kernels, (tuple, list)):
            counted = type(kernels)(_CountingKernel(retarget(k, target), runs, call) for k in kernels)
        else:
            counted = _CountingKernel(retarget(kernels, target), runs, call)
        try:
            result = wrapper(counted, *args, **kwargs)
        except NotImplementedError as e:
            tb = traceback.extract_tb(e.__traceback__)
            ours = [f for f in tb if os.path.abspath(f.filename) in self.files]
            if ours and tb and ours[-1] == tb[-1]:
                where = f"{_display_path(ours[-1].filename)}:{ours[-1].lineno}"
                raise Declined(f"call form not supported by the backend ({where}): {e}") from e
            if raw:
                raise
            raise RuntimeError(self.describe_error(op, e)) from e
        except Exception as e:  # named with the module's file:line and re-raised
            if raw:
                raise
            raise RuntimeError(self.describe_error(op, e)) from e
        return result, runs

    def describe_error(self, op: str, e: BaseException) -> str:
        """The error with where it happened: the innermost frame in the module (file:line), and
        the kernels of the overload."""
        tb = traceback.extract_tb(e.__traceback__)
        ours = [f for f in tb if os.path.abspath(f.filename) in self.files]
        where = f" [at {_display_path(ours[-1].filename)}:{ours[-1].lineno}]" if ours else ""
        kernels = ", ".join(self.locations.get(op, []))
        return f"{self.label}: `{op}` (kernels: {kernels}) failed: {type(e).__name__}: {e}{where}"[:4000]


def parse(spec: str | None):
    """``None`` / ``""`` / ``lowering`` -> None (the lowering); ``nki:MODULE`` -> NkiModule."""
    if spec is None or spec.strip() in ("", LOWERING):
        return None
    spec = spec.strip()
    if not spec.startswith("nki:") or not spec[4:]:
        raise BackendError(f"backend `{spec}`: expected `lowering` or `nki:MODULE` (as `trnconf run --backend`)")
    return NkiModule(spec[4:])


# ---------------------------------------------------------------------------------------------
# Values between torch and the module's NumPy convention


def numpy_of(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor as the NumPy array a wrapper gets (bf16 / fp8 through ml_dtypes)."""
    import ml_dtypes

    t = t.detach().contiguous()
    special = {
        torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
        torch.float8_e4m3fn: (torch.uint8, ml_dtypes.float8_e4m3fn),
        torch.float8_e5m2: (torch.uint8, ml_dtypes.float8_e5m2),
    }
    if t.dtype in special:
        raw, np_dt = special[t.dtype]
        return t.view(raw).numpy().view(np_dt).copy()
    if t.dtype.is_complex:
        raise Declined("a complex tensor (the NKI backend convention has no complex arrays)")
    return t.numpy().copy()


def torch_of(a: Any) -> torch.Tensor:
    """A wrapper's NumPy result as a CPU tensor, bits unchanged."""
    a = np.asarray(a)
    name = str(a.dtype)
    special = {
        "bfloat16": (np.int16, torch.bfloat16),
        "float8_e4m3fn": (np.uint8, torch.float8_e4m3fn),
        "float8_e5m2": (np.uint8, torch.float8_e5m2),
    }
    a = np.ascontiguousarray(a) if a.ndim else a.copy()
    if name in special:
        raw, dt = special[name]
        return torch.from_numpy(a.view(raw).copy()).view(dt)
    return torch.from_numpy(a.copy())


def numpy_dtype(dt: torch.dtype):
    """A dtype argument as the wrapper gets it (``numpy.dtype``)."""
    import ml_dtypes

    special = {
        torch.bfloat16: ml_dtypes.bfloat16,
        torch.float8_e4m3fn: ml_dtypes.float8_e4m3fn,
        torch.float8_e5m2: ml_dtypes.float8_e5m2,
    }
    if dt in special:
        return np.dtype(special[dt])
    return torch.empty((), dtype=dt).numpy().dtype
