"""`trnsim.torch`: a PyTorch device named ``trnsim`` whose every op runs on the simulated
NeuronCore through trnconf's lowering (docs/torch-device.md).

    import torch, trnsim.torch
    x = torch.randn(4, 4, device="trnsim")
    print((x @ x).cpu())

Importing this module registers the device (PyTorch's PrivateUse1 backend, renamed): as ``trnsim``,
or as TorchNeuron's ``neuron`` with ``TRNSIM_AS_NEURON=1`` (trnsim.neuron). Modes:

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

from .. import neuron as _neuron_optin

# _bags, _nested, _ordering, _resample, _sizes, _training: the device's own forms of ops outside the
# lowering (each registers its forms in _device.EXTRA_FORMS on import); _pinned: pin_memory's CPU kernels.
from . import _bags as _bags
from . import _device, _generator, _report, _streams
from . import _nested as _nested
from . import _ordering as _ordering
from . import _pinned as _pinned
from . import _resample as _resample
from . import _sizes as _sizes
from . import _training as _training
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
    "device_name",
    "install_as_neuron",
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


def _not_kept(call: str, why: str):
    def f(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"torch.{_device.DEVICE_NAME}.{call}: not provided by the trnsim device ({why}); "
            f"torch.{_device.DEVICE_NAME}.memory_allocated() gives the bytes its tensors hold"
        )

    f.__name__ = call
    return f


def _device_index(device: Any, call: str) -> int:
    """The index a device argument names; the one simulated device is index 0."""
    if device is None:
        return 0
    index = device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != _device.DEVICE_NAME:
            raise ValueError(f"torch.{_device.DEVICE_NAME}.{call}: {device} is not a {_device.DEVICE_NAME} device")
        index = 0 if device.index is None else device.index
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(
            f"torch.{_device.DEVICE_NAME}.{call}: expected a device index, name or torch.device, "
            f"got {type(device).__name__}"
        )
    # Under torchrun each rank is a process with one simulated NeuronCore; the index a rank names
    # for its own core is its LOCAL_RANK (`torch.neuron.set_device(local_rank)`, as on CUDA).
    own = os.environ.get("LOCAL_RANK", "0")
    if index not in (0, -1) and str(index) != own:
        where = f"index 0, or {own} (LOCAL_RANK) for this rank's core" if own != "0" else "index 0"
        raise ValueError(
            f"torch.{_device.DEVICE_NAME}.{call}: device index {index} out of range "
            f"(this process simulates 1 device: {where})"
        )
    return 0


def _seed_value(seed: Any) -> int:
    # As torch.manual_seed: any int in [-2**63, 2**64); a negative one wraps to 2**64 + seed.
    seed = int(seed)
    if not -(2**63) <= seed < 2**64:
        raise ValueError(f"manual_seed: seed {seed} is outside [-2**63, 2**64)")
    return seed + 2**64 if seed < 0 else seed


class _DeviceModule:
    """``torch.trnsim`` (``torch.neuron`` with the opt-in, trnsim.neuron): what PyTorch and a
    TorchNeuron script ask of a device module. One simulated NeuronCore, device index 0.

    Every device op has finished when its call returns (each program runs to completion in the
    session), so ``synchronize`` has nothing to wait for. Memory: ``memory_allocated`` is the bytes
    the session's tensors hold; the statistics the device does not keep (peaks, the caching
    allocator's reserved bytes) raise ``NotImplementedError`` naming the call, never a made-up number.
    """

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
        _device_index(device, "set_device")

    @staticmethod
    def synchronize(device: Any = None) -> None:
        _device_index(device, "synchronize")

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
        _device.STATE.seed = _seed_value(seed)
        _device.STATE.rng_calls = 0

    manual_seed_all = manual_seed

    @staticmethod
    def seed() -> None:
        """Seeds the device's generator with a nondeterministic number (as ``torch.cuda.seed``)."""
        _DeviceModule.manual_seed(int.from_bytes(os.urandom(8), "little"))

    seed_all = seed

    @staticmethod
    def initial_seed() -> int:
        return _device.STATE.seed

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        """The generator state as 16 bytes (uint8): the seed, then the number of random calls since
        it was set, each 8 bytes little-endian — the layout TorchNeuron documents (seed, offset)."""
        _device_index(device, "get_rng_state")
        raw = _device.STATE.seed.to_bytes(8, "little") + _device.STATE.rng_calls.to_bytes(8, "little")
        return torch.tensor(list(raw), dtype=torch.uint8)

    @staticmethod
    def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
        _device_index(device, "set_rng_state")
        if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8 or new_state.numel() != 16:
            got = (
                f"{new_state.dtype} tensor of {new_state.numel()} elements"
                if isinstance(new_state, torch.Tensor)
                else type(new_state).__name__
            )
            raise ValueError(f"set_rng_state: expected the 16-byte uint8 state get_rng_state() returns, got {got}")
        raw = bytes(new_state.cpu().tolist())
        _device.STATE.seed = int.from_bytes(raw[:8], "little")
        _device.STATE.rng_calls = int.from_bytes(raw[8:], "little")

    @staticmethod
    def get_rng_state_all() -> list[torch.Tensor]:
        return [_DeviceModule.get_rng_state()]

    @staticmethod
    def set_rng_state_all(new_states: Any) -> None:
        states = list(new_states)
        if len(states) != 1:
            raise ValueError(f"set_rng_state_all: the device has 1 generator, got {len(states)} states")
        _DeviceModule.set_rng_state(states[0])

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16]

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        """Bytes held by the device's tensors in the simulated HBM (int64 is stored as int32, so an
        int64 tensor holds half its PyTorch ``nbytes``)."""
        _device_index(device, "memory_allocated")
        return int(_device.STATE.session.device_bytes())

    @staticmethod
    def empty_cache() -> None:
        """Nothing to release: the device frees a tensor's memory when the tensor is freed (no
        caching allocator)."""

    max_memory_allocated = staticmethod(_not_kept("max_memory_allocated", "the device keeps no peak"))
    memory_reserved = staticmethod(_not_kept("memory_reserved", "the device has no caching allocator"))
    max_memory_reserved = staticmethod(_not_kept("max_memory_reserved", "the device has no caching allocator"))
    memory_stats = staticmethod(
        _not_kept("memory_stats", "the device keeps only the allocated bytes (memory_allocated)")
    )
    reset_peak_memory_stats = staticmethod(_not_kept("reset_peak_memory_stats", "the device keeps no peak"))
    reset_accumulated_memory_stats = staticmethod(
        _not_kept("reset_accumulated_memory_stats", "the device keeps no accumulated statistics")
    )
    mem_get_info = staticmethod(_not_kept("mem_get_info", "the device does not model free HBM"))


def _factory(op, *args, **kwargs):
    """PrivateUse1 fallback: calls with no trnsim tensor that still select the device (factory
    functions with ``device='trnsim'``: ``empty``, ``empty_strided``, …)."""
    return _device.dispatch(op, args, kwargs)


_aten_lib = None


def _arange_start_step(start, end, step=1, **kw):
    return _device.dispatch(torch.ops.aten.arange.start_step, (start, end, step), kw)


def _randperm(n, *, generator=None, **kw):
    # `randperm` reaches the device as `randperm.generator_out` on an empty tensor; the lowered
    # op is the functional `randperm`. Its seed comes from `generator` when one is given (as for
    # the device's other random ops), else from the device's generator (`torch.manual_seed`).
    if generator is None:
        return _device.dispatch(torch.ops.aten.randperm.default, (n,), kw)
    before = _device.STATE.generator
    _device.STATE.generator = generator
    try:
        return _device.dispatch(torch.ops.aten.randperm.default, (n,), kw)
    finally:
        _device.STATE.generator = before


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

    name = _device.DEVICE_NAME
    if name == "neuron":
        _neuron_optin._refuse_real_torch_neuronx()
    taken = torch._C._get_privateuse1_backend_name()
    if taken not in ("privateuseone", name) or hasattr(torch, name):
        raise TrnsimError(
            f"trnsim: cannot register the `{name}` device: PyTorch's PrivateUse1 backend is already "
            f"registered as `{taken}` in this process (another backend, or the device under its other name; "
            "PyTorch names it once per process)"
        )
    _setup_privateuseone_for_python_backend(name, backend_module=_DeviceModule())
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
    _generator.install()
    # torch.distributed: the `trnsim` c10d backend (trnsim/torch/distributed, docs/distributed.md).
    from . import distributed

    distributed.register()
    _keep_identity_to_cpu()
    _accelerator_calls()
    _registered = True
    if name == "neuron":
        _neuron_ready()


def device_name() -> str:
    """The device's PyTorch name in this process: ``trnsim``, or ``neuron`` with the opt-in
    (:func:`install_as_neuron`, ``TRNSIM_AS_NEURON=1``; docs/torch-device.md)."""
    return _device.DEVICE_NAME


#: Registers the device as ``neuron``; see :func:`trnsim.neuron.install_as_neuron`. Reached through
#: ``trnsim.torch`` it can only confirm the name: importing ``trnsim.torch`` has registered the
#: device already, so without the opt-in it raises, naming the two ways that work.
install_as_neuron = _neuron_optin.install_as_neuron


def _neuron_ready():
    """With the device registered as ``neuron``: the ``torch_neuronx`` stand-in importable, and
    ``torch.neuron`` returned."""
    from . import _dynamo_name, _neuronx_shim

    _neuronx_shim.install()
    _dynamo_name.register("neuron")  # torch.compile(backend="neuron"), when Dynamo loads
    return torch.neuron


#: torch.accelerator's functions that reach a backend's C++ interfaces (device guard, allocator,
#: default generator), which a Python-registered backend cannot provide in torch 2.15:
#: (module, name) -> the device module's function that answers for the device.
_ACCELERATOR_CALLS = {
    ("torch.accelerator", "synchronize"): "synchronize",
    ("torch.accelerator.random", "initial_seed"): "initial_seed",
    ("torch.accelerator.random", "get_rng_state"): "get_rng_state",
    ("torch.accelerator.random", "get_rng_state_all"): "get_rng_state_all",
    **{
        (m, f): d
        for m in ("torch.accelerator", "torch.accelerator.memory")
        for f, d in (
            ("empty_cache", "empty_cache"),
            ("memory_allocated", "memory_allocated"),
            ("max_memory_allocated", "max_memory_allocated"),
            ("memory_reserved", "memory_reserved"),
            ("max_memory_reserved", "max_memory_reserved"),
            ("memory_stats", "memory_stats"),
            ("reset_peak_memory_stats", "reset_peak_memory_stats"),
            ("reset_accumulated_memory_stats", "reset_accumulated_memory_stats"),
            ("get_memory_info", "mem_get_info"),
        )
    },
}
_accelerator_done = False


def _accelerator_calls() -> None:
    """``torch.accelerator`` on the device. Without this, ``torch.accelerator.synchronize()`` fails
    ("Backend doesn't support synchronizing all streams on device") and the memory functions hit an
    internal assertion ("Allocator for … is not a DeviceAllocator"). When the current accelerator is
    this device, each function in ``_ACCELERATOR_CALLS`` is the device module's (a true value, or a
    ``NotImplementedError`` naming the call); for any other accelerator it is PyTorch's own."""
    global _accelerator_done
    if _accelerator_done:
        return
    import importlib

    import torch.accelerator

    def wrap(plain, ours):
        def f(*args, **kwargs):
            acc = torch.accelerator.current_accelerator()
            if acc is not None and acc.type == _device.DEVICE_NAME:
                return getattr(_DeviceModule, ours)(*args, **kwargs)
            return plain(*args, **kwargs)

        f.__name__, f.__qualname__, f.__doc__ = plain.__name__, plain.__qualname__, plain.__doc__
        f.__wrapped__ = plain
        return f

    wrapped = {}
    for (mod_name, fn), ours in _ACCELERATOR_CALLS.items():
        mod = importlib.import_module(mod_name)
        plain = getattr(mod, fn, None)
        if plain is None:
            continue
        plain = getattr(plain, "__wrapped__", plain)
        if plain not in wrapped:
            wrapped[plain] = wrap(plain, ours)
        setattr(mod, fn, wrapped[plain])
    _accelerator_done = True


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
