"""`trnsim.torch`: a PyTorch device named ``trnsim`` whose every op runs on the simulated
NeuronCore through trnconf's lowering (docs/torch-device.md).

    import torch, trnsim.torch
    x = torch.randn(4, 4, device="trnsim")
    print((x @ x).cpu())

Importing this module registers the device (PyTorch's PrivateUse1 backend, renamed). Modes:

* default: an op the device cannot run raises :class:`UnsupportedOpError` naming the overload;
* fallback (``TRNSIM_TORCH_FALLBACK=1`` or :func:`set_fallback`): such an op runs on the CPU,
  warned once per op and counted in :func:`report`;
* check (``TRNSIM_TORCH_CHECK=1`` or ``with trnsim.torch.checking():``): every op also runs on
  the CPU on the same inputs and the drift is recorded per op.

Backends (``TRNSIM_TORCH_BACKEND`` or :func:`set_backend`, spelled as ``trnconf run --backend``):
``lowering`` (the default) or ``nki:MODULE``, an NKI backend module whose kernels serve the
overloads it provides; the lowering serves the rest.
"""

from __future__ import annotations

import atexit
import os
from typing import Any

import torch

from . import _device, _report, _streams
from ._backend import BackendError
from ._device import DtypeError, TrnsimError, TrnsimTensor, UnsupportedOpError, backend, checking, set_backend

__all__ = [
    "BackendError",
    "DtypeError",
    "TrnsimError",
    "TrnsimTensor",
    "UnsupportedOpError",
    "backend",
    "checking",
    "compile_report",
    "register",
    "register_compile_backend",
    "report",
    "reset_report",
    "set_backend",
    "set_fallback",
    "write_report",
]

_registered = False
_lib = None


class _DeviceModule:
    """``torch.trnsim``: what PyTorch asks of a device module (seeding, counts)."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def set_device(device: Any) -> None:
        pass

    @staticmethod
    def synchronize(device: Any = None) -> None:
        pass

    # Streams and events (_streams.py): ordering-only on a synchronous device, with a simulated
    # clock per stream for Event.elapsed_time and the report's overlap figures.
    Stream = _streams.Stream
    Event = _streams.Event
    StreamContext = _streams.StreamContext
    current_stream = staticmethod(_streams.current_stream)
    default_stream = staticmethod(_streams.default_stream)
    set_stream = staticmethod(_streams.set_stream)
    stream = staticmethod(_streams.stream)

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed(seed: int) -> None:
        _device.STATE.seed = int(seed)
        _device.STATE.rng_calls = 0

    manual_seed_all = manual_seed

    @staticmethod
    def initial_seed() -> int:
        return _device.STATE.seed

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.tensor([_device.STATE.seed, _device.STATE.rng_calls], dtype=torch.int64)

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        _device.STATE.seed, _device.STATE.rng_calls = (int(v) for v in state.tolist())

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16]


def _factory(op, *args, **kwargs):
    """PrivateUse1 fallback: calls with no trnsim tensor that still select the device (factory
    functions with ``device='trnsim'``: ``empty``, ``empty_strided``, …)."""
    return _device.dispatch(op, args, kwargs)


_aten_lib = None


def _arange_start_step(start, end, step=1, **kw):
    return _device.dispatch(torch.ops.aten.arange.start_step, (start, end, step), kw)


def _randperm(n, *, generator=None, **kw):
    # `randperm` reaches the device as `randperm.generator_out` on an empty tensor; the lowered
    # op is the functional `randperm`. As for the device's other random ops, its values come from
    # the device's generator (`torch.manual_seed`), not from `generator`.
    return _device.dispatch(torch.ops.aten.randperm.default, (n,), kw)


def _arange_start(start, end, **kw):
    return _arange_start_step(start, end, 1, **kw)


def _arange_end(end, **kw):
    return _arange_start_step(0, end, 1, **kw)


def _eye_m(n, m, *, dtype=None, layout=None, device=None, pin_memory=None):
    # eye's own kernel (registered for every backend) fills its `out=` form, whose functional
    # form the device would run through that kernel again: PyTorch's ref instead (arange == arange).
    import torch._refs

    _report.REPORT.op("eye.m", "decomposed", _device.STATE.depth == 0)
    return torch._refs.eye(n, m, dtype=dtype or torch.get_default_dtype(), device=device)


def _eye(n, **kw):
    return _eye_m(n, n, **kw)


def _linspace(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    # As `eye`: the kernel registered for every backend fills `linspace.out`, whose functional
    # form would come back here. PyTorch's ref computes in float64 for Python-number bounds, which
    # the device refuses; this is the CPU kernel's formula (from the nearer end, so both ends are
    # exact) in float32 on the engines.
    dtype = dtype or torch.get_default_dtype()
    _report.REPORT.op("linspace", "decomposed", _device.STATE.depth == 0)
    start = start.item() if isinstance(start, torch.Tensor) else start
    end = end.item() if isinstance(end, torch.Tensor) else end
    if steps <= 1:
        return torch.full((steps,), start, dtype=dtype, device=device)
    step = (end - start) / (steps - 1)
    rg = torch.arange(steps, dtype=torch.float32, device=device)
    lo = rg * step + start
    hi = (rg - (steps - 1)) * step + end
    out = torch.where(rg < steps // 2, lo, hi)
    return out if dtype == torch.float32 else out.to(dtype)


def _logspace(start, end, steps, base=10.0, *, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or torch.get_default_dtype()
    _report.REPORT.op("logspace", "decomposed", _device.STATE.depth == 0)
    out = torch.pow(base, _linspace(start, end, steps, dtype=torch.float32, device=device))
    return out if dtype == torch.float32 else out.to(dtype)


def _copy_kernel(dst, src, non_blocking=False):
    return _device.dispatch(torch.ops.aten.copy_.default, (dst, src), {})


def _copy_from_kernel(src, dst, non_blocking=False):
    return _device.dispatch(torch.ops.aten.copy_.default, (dst, src), {})


def register() -> None:
    """Makes the ``trnsim`` device available (idempotent; done on import)."""
    global _registered, _lib
    if _registered:
        return
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(_device.DEVICE_NAME, backend_module=_DeviceModule())
    _lib = torch.library.Library("_", "IMPL")
    _lib.fallback(_factory, "PrivateUse1")
    global _aten_lib
    _aten_lib = torch.library.Library("aten", "IMPL")
    # `arange` would reach the device as `arange.start_out` on an empty tensor that it resizes;
    # its functional form is the lowered op, so every `arange` goes there directly.
    _aten_lib.impl("arange", _arange_end, "PrivateUse1")
    _aten_lib.impl("arange.start", _arange_start, "PrivateUse1")
    _aten_lib.impl("arange.start_step", _arange_start_step, "PrivateUse1")
    _aten_lib.impl("eye", _eye, "PrivateUse1")
    _aten_lib.impl("randperm", _randperm, "PrivateUse1")
    _aten_lib.impl("randperm.generator", _randperm, "PrivateUse1")
    _aten_lib.impl("eye.m", _eye_m, "PrivateUse1")
    _aten_lib.impl("linspace", _linspace, "PrivateUse1")
    _aten_lib.impl("logspace", _logspace, "PrivateUse1")
    # Calls made with PyTorch's Python key excluded (`torch.tensor(..., device=)` copies that
    # way) reach the PrivateUse1 key itself; the boxed fallback cannot serve them (an internal
    # assert in torch 2.15), these kernels do.
    _aten_lib.impl("copy_", _copy_kernel, "PrivateUse1")
    _aten_lib.impl("_copy_from", _copy_from_kernel, "PrivateUse1")
    from . import _autocast

    _autocast.register()
    _streams.register()
    # torch.distributed: the `trnsim` c10d backend (trnsim/torch/distributed, docs/distributed.md).
    from . import distributed

    distributed.register()
    _keep_identity_to_cpu()
    _registered = True


_plain_compatible = None


def _keep_identity_to_cpu() -> None:
    """``Module.cpu()`` keeps each ``Parameter`` object, as it does coming back from CUDA.

    ``Module._apply`` asks ``torch._has_compatible_shallow_copy_type(param, converted)`` whether
    it may set ``param.data = converted`` instead of making a new ``Parameter``; PyTorch says yes
    only between its own dense backends (CPU, CUDA, …). Between a device tensor and a plain CPU
    tensor this answers yes too, and the device tensor's ``.data`` setter makes it so (it swaps
    the object onto the CPU tensor). Every other pair gets PyTorch's answer. The way onto the
    device needs nothing: a traceable wrapper subclass is always swapped in place."""
    global _plain_compatible
    if _plain_compatible is not None:
        return
    _plain_compatible = torch._has_compatible_shallow_copy_type

    # The parameter names are PyTorch's (Dynamo's polyfill of this function checks them).
    def _has_compatible_shallow_copy_type(input, from_):
        if (
            isinstance(input, _device.TrnsimTensor)
            and input._trn is not None
            and type(from_) in (torch.Tensor, torch.nn.Parameter)
            and from_.layout == torch.strided
            and from_.device.type == "cpu"
        ):
            return True
        return _plain_compatible(input, from_)

    torch._has_compatible_shallow_copy_type = _has_compatible_shallow_copy_type


def register_compile_backend() -> None:
    """Registers the TorchDynamo backend ``trnsim`` now (an installed package also provides it
    through the ``torch_dynamo_backends`` entry point, without this call)."""
    from . import _compile

    _compile.register()


def compile_report() -> dict[str, Any]:
    """The compiled graphs so far: nodes, joined program size, capture/lowering times, estimated
    device time per call, recompiles (docs/compile.md)."""
    from . import _compile

    return _compile.compile_report()


def set_fallback(enabled: bool = True) -> None:
    """Runs ops the device cannot run on the CPU (counted) instead of refusing them."""
    _device.STATE.fallback = bool(enabled)


def report(cost: dict[str, Any] | None = None) -> dict[str, Any]:
    """The device report as a dict (ops, programs, estimated device time, fallbacks, drift).

    ``cost`` adds the bill (:func:`trnsim.bill.bill`) under ``"cost"``: the keyword arguments of
    ``bill`` (``instance``, ``ranks``, ``usd_per_hour``, ``steps``, ``tokens_per_step``, ``gpu``, ...)
    plus ``steps_measured``, how many training steps this report's device time covers (default 1),
    so that the step time billed is the estimated device time divided by it.
    """
    out = _report.REPORT.to_dict()
    if cost is not None:
        from .. import bill as _bill

        args = dict(cost)
        measured = args.pop("steps_measured", 1)
        if isinstance(measured, bool) or not isinstance(measured, int) or measured < 1:
            raise ValueError(f"report(cost=): steps_measured must be a positive whole number, got {measured!r}")
        step_s = out["est_device_time_us"] * 1e-6 / measured
        if step_s <= 0:
            raise ValueError("report(cost=): the report has no estimated device time yet (no device program ran)")
        out["cost"] = {"steps_measured": measured, **_bill.bill(step_s, **args)}
    return out


def reset_report() -> None:
    """Starts the report afresh (the program cache keeps its programs; its counters restart)."""
    _report.REPORT.reset()
    _device.CACHE.reset_counters()


def write_report(json_path: str | None = None, html_path: str | None = None) -> None:
    """Writes the report as JSON and/or HTML."""
    if json_path:
        _report.REPORT.to_json(json_path)
    if html_path:
        _report.REPORT.to_html(html_path)


def _write_at_exit() -> None:
    path = os.environ.get("TRNSIM_TORCH_REPORT")
    if path:
        html_path = path[: -len(".json")] + ".html" if path.endswith(".json") else path + ".html"
        write_report(path, html_path)


register()
atexit.register(_write_at_exit)
