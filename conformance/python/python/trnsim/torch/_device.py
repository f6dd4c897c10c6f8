"""The `trnsim` PyTorch device: tensors in a trnsim session, every op lowered by trnconf.

How a call is served (docs/torch-device.md, "How an op runs"):

* a **view** (``op.is_view``: ``view``, ``permute``, ``t``, ``slice``, ``detach``, …) aliases
  the device memory of its input; its sizes, strides and offset come from running the op on
  ``meta`` tensors. No program runs, as no kernel runs for a view on any device;
* a **lowered** Core ATen overload is lowered by trnconf (the lowering the golden suite checks),
  and the program runs on the session's tensors. A strided input is first gathered on the device
  by the ``as_strided`` lowering;
* an **in-place** op runs its functional form, then the result is written into the target
  (a whole-storage target takes the result's memory; a partial view is written with the
  ``index_put`` lowering over the flat storage);
* anything else is decomposed with PyTorch's decompositions (Core ATen first), and what is left
  is refused, or run on the CPU when the fallback is on (counted).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import math
import os
import threading
import traceback
import warnings
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from .. import _native
from .. import neuron as _neuron_optin
from .._errors import SimError
from . import _backend, _bounds, _config, _generator, _report
from ._encode import GOLDEN_NAME, Encoder, Unencodable, op_name

aten = torch.ops.aten

#: The device's PyTorch name: ``trnsim``, or TorchNeuron's ``neuron`` with the opt-in (trnsim.neuron).
#: PyTorch names its PrivateUse1 backend once per process, so this is fixed at import.
DEVICE_NAME = "neuron" if _neuron_optin.requested() else "trnsim"


class TrnsimError(RuntimeError):
    """An error of the trnsim device."""


class UnsupportedOpError(TrnsimError, NotImplementedError):
    """The device cannot run this overload (no lowering, and no decomposition into ones it can)."""


class DtypeError(TrnsimError, TypeError):
    """A dtype Trn1 lacks: float64 / complex128 are refused, int64 beyond int32 does not fit."""


#: device dtype name (trnsim) -> torch dtype of the session bytes.
_SESSION_TORCH = {
    "f32": torch.float32,
    "bf16": torch.bfloat16,
    "f16": torch.float16,
    "fp8_e4m3fn": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
    "i32": torch.int32,
    "i16": torch.int16,
    "i8": torch.int8,
    "u8": torch.uint8,
    "bool": torch.bool,
}

#: random ops whose values the check mode cannot compare with the CPU's (another generator).
_RANDOM = {"rand", "randn", "randperm", "native_dropout", "normal_", "uniform_"}
#: ops whose outputs are uninitialised memory: nothing to compare.
_UNINITIALISED = {"empty.memory_format", "empty_strided", "empty_like", "new_empty", "new_empty_strided"}


class _State:
    def __init__(self) -> None:
        # The generation and logical-NeuronCore size (TRNSIM_TORCH_TARGET,
        # NEURON_PLATFORM_TARGET_OVERRIDE, NEURON_LOGICAL_NC_CONFIG; _config.py).
        self.target = _config.device_target()
        self.lnc = _config.device_lnc(self.target)
        self.session = _native.Session(self.target)
        self.names = itertools.count()
        self.fallback = os.environ.get("TRNSIM_TORCH_FALLBACK", "") not in ("", "0")
        self.checking = os.environ.get("TRNSIM_TORCH_CHECK", "") not in ("", "0")
        self.warned: set[str] = set()
        self.seed = 0
        self.rng_calls = 0
        # The generator the running random call was given (`generator=`), or None for the
        # device's global one (_generator.py).
        self.generator: torch.Generator | None = None
        self.lock = threading.RLock()
        self.depth = 0  # nesting: ops run inside a decomposition or an in-place op are not top level
        # The backend of Core ATen ops: None for trnconf's lowering, or an NKI backend module
        # (`TRNSIM_TORCH_BACKEND=nki:MODULE`, `trnsim.torch.set_backend`).
        self.backend: _backend.NkiModule | None = None
        # Check mode: which backends (and kernels) served the ops of the current top-level call.
        self.served: list[tuple[str, str, list[str]]] | None = None


def _backend_from_env() -> None:
    spec = os.environ.get("TRNSIM_TORCH_BACKEND")
    if spec:
        try:
            STATE.backend = _backend.parse(spec)
        except _backend.BackendError as e:
            raise _backend.BackendError(f"TRNSIM_TORCH_BACKEND: {e}") from None


STATE = _State()
_backend_from_env()


def _backend_info() -> dict[str, Any]:
    mod = STATE.backend
    return {
        "backend": backend(),
        "nki_module": mod.describe() if mod is not None else None,
        "target": STATE.target,
        "lnc": STATE.lnc,
    }


_report.REPORT.backend_info = _backend_info


def _new_name() -> str:
    return f"t{next(STATE.names)}"


class _Storage:
    """One session tensor: the device memory behind a tensor and all its views. Its contents are
    contiguous; views index it as a flat array of ``numel`` elements."""

    __slots__ = ("__weakref__", "dtype", "name", "owned", "shape")

    def __init__(self, name: str, dtype: torch.dtype, shape: list[int], owned: bool = True) -> None:
        self.name = name
        self.dtype = dtype
        self.shape = list(shape)
        self.owned = owned  # False: a second handle on another storage's session tensor

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def dev_shape(self) -> list[int]:
        return self.shape + [2] if self.dtype == torch.complex64 else list(self.shape)

    def __del__(self) -> None:
        try:
            if self.name is not None and self.owned:
                STATE.session.delete(self.name)
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown: the session may be gone
            pass


class TrnsimTensor(torch.Tensor):
    """A tensor on the `trnsim` device: sizes, strides and offset over a session tensor."""

    _trn: _Storage

    @staticmethod
    def __new__(cls, storage: _Storage, size, stride=None, offset: int = 0, dtype: torch.dtype | None = None):
        # `dtype` differs from the storage's only for the complex64 <-> float32 views
        # (`view_as_real`, `view_as_complex`, `.real`, `.imag`); sizes, strides and offset are
        # then in units of `dtype` over the same bytes, as PyTorch defines those views.
        if stride is None:
            stride = _contiguous_strides(size)
        t = torch.Tensor._make_wrapper_subclass(
            cls,
            size,
            strides=stride,
            storage_offset=offset,
            dtype=dtype or storage.dtype,
            device=_device0(),
            requires_grad=False,
        )
        t._trn = storage
        return t

    __torch_function__ = torch._C._disabled_torch_function_impl

    # The storage a tensor and its views share, and an address in trnsim's device address space
    # (_storage.py): what FSDP2's parameter freeing (`untyped_storage().resize_(0)`) and code that
    # compares data pointers use.
    def untyped_storage(self):
        from ._storage import untyped_storage

        return untyped_storage(self)

    def data_ptr(self) -> int:
        from ._storage import data_ptr

        return data_ptr(self)

    def __repr__(self, *, tensor_contents=None) -> str:
        if self._trn is None:
            # A traced tensor (no data): what a tracer's log prints while it traces.
            return f"TrnsimTensor(traced, size={tuple(self.shape)}, dtype={self.dtype}, device='{DEVICE_NAME}:0')"
        with torch.no_grad():
            body = repr(self.cpu())
        extra = f", device='{DEVICE_NAME}:0'"
        if body.endswith(")"):
            return body[:-1] + extra + ")"
        return body + extra

    def __reduce_ex__(self, protocol):
        # `torch.save`: the values (read to the host, as for any device without host-visible
        # storage) and PyTorch's allow-listed rebuild, so `torch.load` (weights_only, the
        # default) restores them to the device, or where `map_location` says.
        with torch.no_grad():
            data = self.cpu()
        return (
            torch._utils._rebuild_device_tensor_from_cpu_tensor,
            (data, self.dtype, str(self.device), self.requires_grad),
        )

    # `param.data = new` (what `Module.half()`, `.to(dtype)`, `.float()` do to parameters already
    # on the device) shallow-copies `new`'s sizes, strides and dtype into this tensor, but not
    # its Python attributes: the session storage must follow, or the tensor would claim `new`'s
    # dtype over its old bytes.
    @property
    def data(self):
        return torch.Tensor.data.__get__(self)

    @data.setter
    def data(self, new):
        if not isinstance(new, TrnsimTensor):
            # `param.data = cpu_tensor` (what `Module.cpu()` / `.to("cpu")` do, as on CUDA): this
            # object becomes ``new``'s tensor, keeping its identity (a tied weight stays tied, an
            # optimizer keeps its parameter). A wrapper cannot take a CPU tensor's storage, so
            # the object is swapped (``torch.utils.swap_tensors``) with a fresh CPU tensor of
            # ``new``'s data; the device storage goes with the other object.
            if not isinstance(new, torch.Tensor) or type(new) not in (torch.Tensor, torch.nn.Parameter):
                raise TrnsimError(f"trnsim: cannot set .data of a device tensor to {type(new).__name__}")
            repl = new.detach()
            if getattr(self, "_is_param", False):
                repl = torch.nn.Parameter(repl, requires_grad=self.requires_grad)
            else:
                repl.requires_grad_(self.requires_grad)
            # The gradient lives in the tensor being swapped away: it comes along, moved to the
            # CPU the same way (its own object kept too), as `param.data =` keeps `param.grad`.
            grad = self.grad
            if grad is not None:
                self.grad = None
                if isinstance(grad, TrnsimTensor):
                    grad.data = grad.detach().to(new.device)
            torch.utils.swap_tensors(self, repl)
            if grad is not None:
                self.grad = grad
            return
        torch.Tensor.data.__set__(self, new)
        self._trn = new._trn

    def __deepcopy__(self, memo):
        # `copy.deepcopy(model)`: a new device tensor with its own session storage (a device
        # clone). PyTorch's `Tensor.__deepcopy__` would deep-copy this object's `__dict__` over
        # the clone's, giving the copy a second handle on the original's session tensor.
        if id(self) in memo:
            return memo[id(self)]
        if self._trn is None:
            raise TrnsimError("trnsim: a traced device tensor (no storage) cannot be deep-copied")
        with torch.no_grad():
            new = dispatch(aten.clone.default, (self,), {})
        new.requires_grad_(self.requires_grad)
        memo[id(self)] = new
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        extra = {k: v for k, v in self.__dict__.items() if k not in ("_trn", "_proxy_cache", "_fake")}
        new.__dict__.update(copy.deepcopy(extra, memo))
        return new

    def tolist(self):
        # PyTorch's `tolist` refuses tensor subclasses; like `.item()` it is a read to the host.
        with torch.no_grad():
            return self.cpu().tolist()

    # A traceable wrapper subclass (docs/torch-device.md, "Tensor representation"): one inner
    # tensor, ``_proxy``, a meta tensor with this tensor's sizes, strides, offset and dtype and
    # no data. PyTorch's tracers (Dynamo, AOTAutograd, make_fx) flatten a device tensor into it,
    # fake it and trace ops on it, so a graph of ops on device tensors is one graph; and
    # ``Module._apply`` swaps such tensors into the existing ``Parameter`` objects
    # (``torch.utils.swap_tensors``), so `.to("trnsim")` keeps parameter identity. The proxy of a
    # real device tensor names its memory and view (``device_tensor_of``), which is how a
    # compile backend finds the data behind a graph input. The context is empty: no storage
    # identity goes into Dynamo's guards.
    def __tensor_flatten__(self):
        return ["_proxy"], None

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        proxy = inner["_proxy"]
        # A compiled graph's output at run time (trnsim.torch._compile): the proxy of a real
        # device tensor, which is the result.
        real = proxy.__dict__.pop("_trnsim_keep", None) if hasattr(proxy, "__dict__") else None
        if real is not None:
            return real
        return _fake_wrapper(proxy)

    @property
    def _proxy(self) -> torch.Tensor:
        fake = self.__dict__.get("_fake")
        if fake is not None:
            return fake
        key = (tuple(self.shape), tuple(self.stride()), self.storage_offset(), self.dtype)
        cached = self.__dict__.get("_proxy_cache")
        if cached is not None and cached[0] == key and cached[1]._trnsim_view[0] is self._trn:
            return cached[1]
        proxy = _meta_like(self)
        # The tensor holds its proxy strongly, so one tensor shows Dynamo one proxy object for as
        # long as its memory and geometry stay (a proxy dropped and rebuilt between calls let a
        # new proxy reuse a dead one's address, and Dynamo's aliasing guards then failed at run
        # time: a recompile). The proxy names the memory and the view (``device_tensor_of``
        # rebuilds the view from them), not the tensor: a tracer's runtime may hold only the
        # proxy of a temporary (a backward's incoming gradient), and a reference back, even a
        # weak one, would make a cycle or stop ``torch.utils.swap_tensors`` (which refuses a
        # tensor with weak references: `.to()`, `.data =`).
        proxy._trnsim_view = (self._trn, key)
        self.__dict__["_proxy_cache"] = (key, proxy)
        return proxy

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _any_fake(args, kwargs):
            return _fake_dispatch(func, args, kwargs)
        return dispatch(func, args, kwargs)


_DEVICE0: list[torch.device] = []


def _device0() -> torch.device:
    """``torch.device(DEVICE_NAME, 0)``, made once (after the backend is named)."""
    if not _DEVICE0:
        _DEVICE0.append(torch.device(DEVICE_NAME, 0))
    return _DEVICE0[0]


def _contiguous_strides(size) -> list[int]:
    strides, acc = [], 1
    for s in reversed(list(size)):
        strides.append(acc)
        acc *= max(int(s), 1)
    return list(reversed(strides))


def is_device_tensor(x: Any) -> bool:
    return isinstance(x, TrnsimTensor) and x._trn is not None


def device_tensor_of(inner: torch.Tensor) -> TrnsimTensor | None:
    """The device tensor whose ``__tensor_flatten__`` proxy ``inner`` is (what a graph traced
    by AOTAutograd / make_fx receives in place of a device tensor), or None."""
    dev = getattr(inner, "_trnsim_dev", None)
    if dev is not None:
        return dev
    view = getattr(inner, "_trnsim_view", None)
    if view is None:
        return None
    storage, (size, stride, offset, dtype) = view
    dev = TrnsimTensor(storage, list(size), list(stride), offset, dtype)
    inner._trnsim_dev = dev
    return dev


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor with ``t``'s sizes, strides, storage offset and dtype."""
    span = 1 + sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()) if s > 0)
    if any(s == 0 for s in t.shape):
        span = 0
    base = torch.empty(t.storage_offset() + span, dtype=t.dtype, device="meta")
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


def _fake_wrapper(inner: torch.Tensor) -> TrnsimTensor:
    """A device tensor with no session storage, standing for ``inner`` (a fake or meta tensor)
    while PyTorch traces: what ``__tensor_unflatten__`` builds from a traced inner tensor."""
    t = torch.Tensor._make_wrapper_subclass(
        TrnsimTensor,
        inner.shape,
        strides=inner.stride(),
        storage_offset=inner.storage_offset(),
        dtype=inner.dtype,
        device=torch.device(DEVICE_NAME, 0),
        requires_grad=inner.requires_grad,
    )
    t._trn = None
    t._fake = inner
    return t


def _any_fake(args, kwargs) -> bool:
    """Whether a call has a traced (storage-less) device tensor: checked on every op, so a plain
    walk of the arguments and of lists in them (ATen takes tensors nowhere deeper)."""
    for x in itertools.chain(args, kwargs.values()):
        if type(x) is TrnsimTensor:
            if x._trn is None:
                return True
        elif type(x) in (list, tuple):
            for y in x:
                if type(y) is TrnsimTensor and y._trn is None:
                    return True
    return False


def _fake_dispatch(func, args, kwargs):
    """An op on traced device tensors: PyTorch's own (fake / meta) kernel on their inner tensors,
    the results wrapped as traced device tensors. Nothing runs on the simulator: this is shape
    propagation for a tracer, which records the op itself in its graph."""

    outer_of: dict[int, TrnsimTensor] = {}

    def unwrap(x):
        if isinstance(x, TrnsimTensor):
            inner = x._proxy
            outer_of[id(inner)] = x
            return inner
        if isinstance(x, torch.Tensor) and x.device.type == DEVICE_NAME:
            # A tensor the tracer made on the device itself (a factory call with device=trnsim),
            # fake or functional: moved to meta by an op the tracer records, so its values stay
            # in the traced graph's data flow (a fresh empty tensor here would cut them off).
            return x.to("meta")
        if isinstance(x, torch.device) and x.type == DEVICE_NAME:
            return torch.device("meta")
        return x

    out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))

    def wrap(m):
        if isinstance(m, torch.Tensor):
            same = outer_of.get(id(m))
            return same if same is not None else _fake_wrapper(m)
        return m

    return tree_map(wrap, out)


# ---------------------------------------------------------------------------------------------
# Host boundary


def _device_dtype_name(dtype: torch.dtype) -> str:
    if dtype == torch.complex64:
        return "f32"
    golden = GOLDEN_NAME.get(dtype)
    dev = _native.device_dtype(golden) if golden else None
    if dev is None:
        _report.REPORT.refusal(str(dtype))
        raise DtypeError(
            f"trnsim: {dtype} has no device dtype on Trainium (policy: float64 and complex128 are refused, "
            "int64 is stored as int32 and refused beyond it; convert with .float() / .to(torch.complex64))"
        )
    return dev


def upload(t: torch.Tensor) -> TrnsimTensor:
    """Copies a CPU tensor into a new session tensor (the host → device transfer)."""
    dtype = t.dtype
    dev = _device_dtype_name(dtype)
    host = t.detach().contiguous()
    if host.is_conj():
        host = host.resolve_conj()
    if host.is_neg():
        host = host.resolve_neg()
    shape = list(host.shape)
    if dtype == torch.int64:
        if host.numel():
            lo, hi = int(host.min()), int(host.max())
            if lo < -(2**31) or hi > 2**31 - 1:
                _report.REPORT.narrowing("int64", overflow=True)
                bad = lo if lo < -(2**31) else hi
                raise DtypeError(
                    f"trnsim: int64 value {bad} does not fit in int32 (Trainium has no int64; "
                    "the device stores int64 tensors as int32)"
                )
        _report.REPORT.narrowing("int64", overflow=False)
        host = host.to(torch.int32)
    elif dtype == torch.complex64:
        host = torch.view_as_real(host).contiguous()
    flat = host.reshape(-1)
    if flat.numel() and flat.stride(0) != 1:
        # A one-element tensor may keep a 0 stride through `contiguous()` (size-1 dims are
        # contiguous whatever their stride); bytes need a unit stride.
        flat = flat.clone(memory_format=torch.contiguous_format)
    data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    name = _new_name()
    dev_shape = list(host.shape)
    STATE.session.put(name, (dev, dev_shape, data))
    return TrnsimTensor(_Storage(name, dtype, shape), shape)


def _download_storage(st: _Storage) -> torch.Tensor:
    dev, shape, data = STATE.session.get(st.name)
    n = 1
    for s in shape:
        n *= s
    flat = (
        torch.frombuffer(data, dtype=_SESSION_TORCH[dev], count=n) if n else torch.empty(0, dtype=_SESSION_TORCH[dev])
    )
    host = flat.reshape(shape)
    if st.dtype == torch.int64:
        host = host.to(torch.int64)
    elif st.dtype == torch.complex64:
        host = torch.view_as_complex(host.contiguous())
    return host.clone() if not n else host


def download(t: TrnsimTensor) -> torch.Tensor:
    """The tensor's values on the CPU: gathered on the device when strided, then transferred."""
    st = _contiguous_storage(t)
    host = _download_storage(st)
    return host.reshape(t.shape)


# ---------------------------------------------------------------------------------------------
# Device programs


class _NotRunnable(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _is_whole(t: TrnsimTensor) -> bool:
    st = t._trn
    return t.storage_offset() == 0 and t.is_contiguous() and list(t.shape) == st.shape and t.dtype == st.dtype


# ---------------------------------------------------------------------------------------------
# complex64: stored as interleaved float32 pairs (the golden format's and the lowering's real
# view, shape + [2]). A complex64 tensor and a float32 view of it (`view_as_real`) index the same
# session bytes; `_real_layout` gives any such tensor's elements in float32 units of its storage.


def _real_layout(t: TrnsimTensor) -> tuple[list[int], list[int], int]:
    """Sizes, strides and offset of ``t``'s elements as float32 over its storage's real view
    (a complex element is its (re, im) pair: a trailing axis of 2 with stride 1)."""
    if t.dtype == torch.complex64:
        return list(t.shape) + [2], [2 * s for s in t.stride()] + [1], 2 * t.storage_offset()
    return list(t.shape), list(t.stride()), t.storage_offset()


def _f32_elements(st: _Storage) -> int:
    return st.numel * (2 if st.dtype == torch.complex64 else 1)


def _real_base(st: _Storage) -> TrnsimTensor:
    """The whole storage as a float32 tensor in its session shape (no copy: a second handle
    on the same session tensor that never frees it)."""
    alias = _Storage(st.name, torch.float32, st.dev_shape(), owned=False)
    return TrnsimTensor(alias, alias.shape)


def _adopt(t: TrnsimTensor, dtype: torch.dtype, shape: list[int]) -> TrnsimTensor:
    """A fresh, whole float32 tensor's memory re-labelled as ``dtype`` of ``shape`` (its
    float32 elements are the interleaved pairs of a complex64 tensor of ``shape``, or vice versa)."""
    st = t._trn
    new = _Storage(st.name, dtype, list(shape))
    st.name = None
    return TrnsimTensor(new, new.shape)


def _real_gather(t: TrnsimTensor) -> _Storage:
    """A storage holding ``t``'s elements contiguously, for a tensor whose dtype is not its
    storage's (a complex64 / float32 view of the other): a device gather over the float32 real
    view, then re-labelled as ``t``'s dtype."""
    sizes, strides, offset = _real_layout(t)
    out = _run_lowered(aten.as_strided.default, (_real_base(t._trn), sizes, strides, offset), {}, count=False)
    if t.dtype == torch.complex64:
        return _adopt(out, torch.complex64, list(t.shape))._trn
    return out._trn


def _real_view(z: TrnsimTensor) -> TrnsimTensor:
    """``view_as_real(z)`` for a complex64 device tensor, without a report entry."""
    sizes, strides, offset = _real_layout(z)
    return TrnsimTensor(z._trn, sizes, strides, offset, dtype=torch.float32)


def _contiguous_storage(t: TrnsimTensor) -> _Storage:
    """A storage holding exactly ``t``'s elements, contiguous in ``t``'s shape: ``t``'s own when
    it is its whole storage, else a device gather (the ``as_strided`` lowering)."""
    if _is_whole(t):
        return t._trn
    if t.dtype != t._trn.dtype:
        return _real_gather(t)
    base = TrnsimTensor(t._trn, t._trn.shape)
    out = _run_lowered(
        aten.as_strided.default, (base, list(t.shape), list(t.stride()), t.storage_offset()), {}, count=False
    )
    return out._trn


def _to_meta(x: Any) -> Any:
    if isinstance(x, TrnsimTensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, torch.device):
        return torch.device("meta")
    return x


class _Uncacheable(Exception):
    """An argument the metadata caches do not key (a CPU tensor, a generator, a SymInt, …)."""


#: Python values a meta kernel sees as they are, compared by type and value in the keys.
_KEYED_AS_IS = frozenset({bool, int, str, type(None), torch.dtype, torch.layout, torch.memory_format})


def _sig(x: Any, view: bool) -> Any:
    """``x`` as the meta kernel sees it, hashable: a device tensor by the metadata its meta
    stand-in has (``_to_meta``; ``_alias``'s ``meta_view`` also by offset and storage size), a
    device by nothing (every device is ``meta`` there), a number by its type and exact value.
    Anything else (a CPU tensor, whose values a kernel may read) raises ``_Uncacheable``."""
    t = type(x)
    if t is TrnsimTensor:
        if view:
            return (t, x.shape, x.stride(), x.storage_offset(), x.dtype, _f32_elements(x._trn))
        return (t, x.shape, x.stride(), x.dtype)
    if t is float:
        return (t, x.hex())  # exact: -0.0 and 0.0 differ, every nan is one key
    if t in _KEYED_AS_IS:
        return (t, x)
    if t is list or t is tuple or t is torch.Size:
        return (t, tuple([_sig(y, view) for y in x]))
    if t is complex:
        return (t, x.real.hex(), x.imag.hex())
    if t is torch.device:
        return (t,)
    raise _Uncacheable


def _meta_key(func, args, kwargs, view: bool = False) -> tuple | None:
    """The key of a meta-kernel call in the metadata caches: everything the meta kernel reads
    (the overload, its arguments as ``_sig`` gives them, the default dtype a factory or a
    promotion may take), or None when an argument cannot be keyed (the kernel then runs)."""
    try:
        return (
            func,
            torch.get_default_dtype(),
            _sig(args, view),
            tuple([(k, _sig(v, view)) for k, v in kwargs.items()]),
        )
    except _Uncacheable:
        return None


class _MetaCache:
    """Results of PyTorch's meta kernels by ``_meta_key``: a meta kernel is a function of the
    metadata it is given, so a call with an equal key gets the same output metadata without
    running the kernel again (about half of the Python cost of a small op). Only successful
    calls are kept (a failure runs again and fails the same way). Bounded: cleared whole at
    ``max_entries`` (calls with step-dependent scalars make new keys)."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self.entries: dict[tuple, Any] = {}
        self.hits = self.misses = 0

    def get(self, key: tuple | None) -> Any:
        if key is None:
            return None
        hit = self.entries.get(key)
        if hit is None:
            self.misses += 1
        else:
            self.hits += 1
        return hit

    def put(self, key: tuple | None, value: Any) -> None:
        if key is None or value is None:
            return
        if len(self.entries) >= self.max_entries:
            self.entries.clear()
        self.entries[key] = value


#: output metadata of lowered calls (``_meta_outputs``), of views (``_alias``), and the in-place
#: calls whose meta check passed (``_check_inplace_meta``; the value is True).
META_CACHE = _MetaCache()
VIEW_CACHE = _MetaCache()
INPLACE_CHECKED = _MetaCache()


def _meta_outputs(func, args, kwargs):
    """The outputs' metadata, from PyTorch's meta kernel for the same call (None: no meta kernel,
    e.g. a data-dependent shape). Served from ``META_CACHE`` when the same metadata was seen."""
    key = _meta_key(func, args, kwargs)
    hit = META_CACHE.get(key)
    if hit is not None:
        return hit
    out = _meta_outputs_uncached(func, args, kwargs)
    META_CACHE.put(key, out)
    return out


def _meta_outputs_uncached(func, args, kwargs):
    margs = tree_map(_to_meta, args)
    mkwargs = tree_map(_to_meta, kwargs)
    if "device" in mkwargs or _has_device_arg(func):
        mkwargs["device"] = torch.device("meta")
    try:
        return func(*margs, **mkwargs)
    except Exception:  # noqa: BLE001 - no meta kernel / data-dependent: the lowering bounds it
        return None


def _has_device_arg(func) -> bool:
    return any(a.name == "device" and a.kwarg_only for a in func._schema.arguments)


_DATA_DEPENDENT = {"nonzero", "index.Tensor"}
#: ops whose index tensors PyTorch accepts on the CPU beside tensors of another device.
_CPU_INDICES_OK = {
    "index.Tensor",
    "index_put",
    "_unsafe_index.Tensor",
    "_unsafe_index_put",
    "_unsafe_masked_index",
    "_unsafe_masked_index_put_accumulate",
}


def _encode_outputs(func, meta, metas: dict[str, dict]) -> list:
    rets = func._schema.returns
    outs = meta if (isinstance(meta, tuple) and len(rets) > 1) else (meta,)
    enc = []
    for i, o in enumerate(outs):
        name = f"output.{i}"
        if isinstance(o, torch.Tensor):
            metas[name] = {"dtype": _golden(o.dtype), "shape": list(o.shape)}
            enc.append({"tensor": name})
        elif isinstance(o, (list, tuple)) and all(isinstance(x, torch.Tensor) for x in o) and o:
            names = []
            for j, x in enumerate(o):
                metas[f"{name}.{j}"] = {"dtype": _golden(x.dtype), "shape": list(x.shape)}
                names.append(f"{name}.{j}")
            enc.append({"tensors": names})
        elif o is None:
            enc.append({"none": None})
        else:
            enc.append({"float": 0.0})
    return enc


def _golden(dtype: torch.dtype) -> str:
    g = GOLDEN_NAME.get(dtype)
    if g is None:
        _report.REPORT.refusal(str(dtype))
        raise DtypeError(f"trnsim: {dtype} has no device dtype on Trainium (float64 and complex128 are refused)")
    return g


def _next_seed() -> int:
    if STATE.generator is not None:
        return _generator.seed_from(STATE.generator)
    STATE.rng_calls += 1
    # A 24-bit seed per call (the program's seed is an fp32 immediate): the device's generator
    # is the base seed and a call counter, so the same seed gives the same sequence of calls.
    x = (STATE.seed * 0x9E3779B1 + STATE.rng_calls * 0x85EBCA6B) & 0xFFFFFFFF
    x ^= x >> 15
    return x & 0xFFFFFF


def _run_lowered(func, args, kwargs, *, count: bool = True, name: str | None = None, meta=None):
    """Lowers ``func(*args, **kwargs)`` with trnconf and runs it on the session's tensors."""
    name = name or op_name(func)
    metas: dict[str, dict] = {}
    bind: dict[str, str] = {}
    temps: list[_Storage] = []
    keep: list[Any] = []

    def on_tensor(tname: str, t: torch.Tensor) -> None:
        if isinstance(t, TrnsimTensor):
            st = _contiguous_storage(t)
        elif t.device.type == "cpu" and t.dim() == 0:
            # A CPU scalar tensor (a Python number PyTorch wrapped): moved to the device, as
            # PyTorch allows a CPU scalar beside any device's tensors. Float64 / int64 scalars are
            # narrowed like the CPU kernel does for a wrapped number (to the op's dtype).
            host = t
            if t.dtype == torch.float64:
                host = t.to(torch.float32)
            elif t.dtype == torch.complex128:
                host = t.to(torch.complex64)
            st = upload(host)._trn
        elif t.device.type == "cpu" and name in _CPU_INDICES_OK and not (t.is_floating_point() or t.is_complex()):
            # PyTorch takes the indices of advanced indexing on the CPU beside any device's
            # tensor (it moves them to the device itself): so does this device.
            _report.REPORT.transfer("host_to_device")
            st = upload(t)._trn
        else:
            raise TrnsimError(
                f"trnsim: `{name}` got a {t.device.type} tensor of shape {tuple(t.shape)} beside trnsim tensors; "
                f"move it with .to('{DEVICE_NAME}')"
            )
        if st is not getattr(t, "_trn", None):
            temps.append(st)
        metas[tname] = {"dtype": _golden(st.dtype), "shape": list(st.shape)}
        bind[tname] = st.name
        keep.append(st)

    try:
        call = Encoder(on_tensor).call(func, args, kwargs)
    except Unencodable as e:
        raise _NotRunnable("unencodable", str(e)) from None
    if meta is None:
        meta = _meta_outputs(func, args, kwargs)
    if meta is None and not any("Tensor" in str(r.type) for r in func._schema.returns):
        # Only non-tensor returns (`_local_scalar_dense`): nothing for a meta kernel to say.
        rets = func._schema.returns
        meta = 0 if len(rets) == 1 else tuple(0 for _ in rets)
    if meta is None:
        if name not in _DATA_DEPENDENT:
            raise _NotRunnable("no_meta", f"`{name}`: PyTorch has no meta kernel for this call")
        # The lowering bounds the output from input metadata; the dtype is what PyTorch returns.
        meta = torch.empty((0, 0), dtype=torch.int64 if name == "nonzero" else args[0].dtype, device="meta")
    outputs = _encode_outputs(func, meta, metas)
    seed = _next_seed() if name in _RANDOM else None
    err, msg, program, values_json, data_dep, hbm, declared = _lower(name, call, metas, outputs, seed)
    if err is not None:
        raise _NotRunnable(err, msg)
    out_names: dict[str, str] = {}
    # A program need not read every input (`full_like` reads only metadata).
    bind = {k: v for k, v in bind.items() if k in declared}
    for decl, dev, shape, role in hbm:
        if role == "output":
            out_names[decl] = _new_name()
            bind[decl] = out_names[decl]
    # The report reads the totals only: no per-instruction spans to encode and parse.
    stats = json.loads(STATE.session.run(program, bind, spans=False))
    _report.REPORT.device_run(name, stats, count=count)
    values = {int(k): v for k, v in json.loads(values_json).items()} if values_json != "{}" else {}
    produced: dict[str, _Storage] = {}
    scalars: dict[str, Any] = {}
    count_value = None
    for decl, dev, shape, role in hbm:
        if role != "output":
            continue
        sname = out_names[decl]
        if data_dep is not None and decl == data_dep[0]:
            _, _, data = STATE.session.get(sname)
            _report.REPORT.sync(name)  # the row count the engines wrote, read by the host
            _report.REPORT.transfer("device_to_host")
            count_value = int(torch.frombuffer(data, dtype=torch.int32, count=1)[0])
            STATE.session.delete(sname)
            continue
        if decl in metas:
            dtype = _torch_dtype(metas[decl]["dtype"])
            tshape = shape[:-1] if dtype == torch.complex64 else shape
            produced[decl] = _Storage(sname, dtype, tshape)
        else:
            scalars[decl] = sname
    if data_dep is not None and data_dep[1] in produced:
        st = produced[data_dep[1]]
        padded = TrnsimTensor(st, st.shape)
        trimmed = _run_lowered(aten.slice.Tensor, (padded, 0, 0, count_value), {}, count=False)
        produced[data_dep[1]] = _contiguous_storage(trimmed)
    return _assemble(func, meta, outputs, produced, scalars, values)


class ProgramCache:
    """Lowered programs by call signature, so a repeated op is not lowered again.

    The key is everything ``lower_op`` reads: the op, the encoded call (scalar arguments, and the
    sizes, strides and offset of a gather, which are its arguments), every tensor's dtype and
    shape, the outputs' encoding and the target. Tensors are named by role (``input.0``), never
    by identity, and no value reaches the lowering, so two calls with equal keys get the same
    program. A random op's program carries its own seed: never cached. Refusals are cached too
    (the same call is refused the same way). Bounded: at most ``max_entries`` programs and
    ``max_instructions`` instructions in all; the least recently used go first."""

    def __init__(self, max_entries: int = 2048, max_instructions: int = 400_000) -> None:
        from collections import OrderedDict

        self.max_entries = max_entries
        self.max_instructions = max_instructions
        self.entries: OrderedDict[tuple, tuple] = OrderedDict()
        self.instructions = 0
        self.hits = self.misses = self.evictions = self.uncached = 0

    def clear(self) -> None:
        self.entries.clear()
        self.instructions = 0
        self.reset_counters()

    def reset_counters(self) -> None:
        self.hits = self.misses = self.evictions = self.uncached = 0

    def get(self, key: tuple):
        hit = self.entries.get(key)
        if hit is None:
            self.misses += 1
            return None
        self.entries.move_to_end(key)
        self.hits += 1
        return hit

    def put(self, key: tuple, value: tuple) -> None:
        size = len(value[2]) if value[2] is not None else 0
        if size > self.max_instructions or self.max_entries <= 0:
            return
        self.entries[key] = value
        self.instructions += size
        while len(self.entries) > self.max_entries or self.instructions > self.max_instructions:
            _, old = self.entries.popitem(last=False)
            self.instructions -= len(old[2]) if old[2] is not None else 0
            self.evictions += 1

    def stats(self) -> dict[str, int]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "uncached": self.uncached,
            "entries": len(self.entries),
            "instructions": self.instructions,
            "evictions": self.evictions,
            "max_entries": self.max_entries,
            "max_instructions": self.max_instructions,
        }


def _cache_from_env() -> ProgramCache:
    spec = os.environ.get("TRNSIM_TORCH_PROGRAM_CACHE", "")
    if spec in ("0", "off"):
        return ProgramCache(0, 0)
    return ProgramCache(int(spec)) if spec.isdigit() else ProgramCache()


CACHE = _cache_from_env()
_report.REPORT.cache_info = CACHE.stats


def _lower(name: str, call, metas, outputs, seed):
    """``lower_op`` through the program cache: (err, msg, program, values_json, data_dep, hbm,
    declared inputs)."""
    call_json, metas_json, outputs_json = json.dumps(call), json.dumps(metas), json.dumps(outputs)
    key = None
    if seed is None:
        key = (name, call_json, metas_json, outputs_json, STATE.target)
        hit = CACHE.get(key)
        if hit is not None:
            return hit
    else:
        CACHE.uncached += 1
    err, msg, program, values_json, data_dep = _native.lower_op(
        name, call_json, metas_json, outputs_json, STATE.target, seed
    )
    hbm = program.hbm if program is not None else []
    declared = frozenset(decl for decl, _, _, role in hbm if role == "input")
    value = (err, msg, program, values_json, data_dep, hbm, declared)
    if key is not None:
        CACHE.put(key, value)
    return value


_TORCH_OF_GOLDEN = {v: k for k, v in GOLDEN_NAME.items()}


def _torch_dtype(golden: str) -> torch.dtype:
    return _TORCH_OF_GOLDEN[golden]


def _assemble(func, meta, outputs, produced, scalars, values):
    res = []
    for i, enc in enumerate(outputs):
        if i in values:
            res.append(_decode_value(values[i]))
        elif "tensor" in enc:
            st = produced[enc["tensor"]]
            res.append(TrnsimTensor(st, st.shape))
        elif "tensors" in enc:
            res.append([TrnsimTensor(produced[n], produced[n].shape) for n in enc["tensors"]])
        elif f"output.{i}" in scalars:
            sname = scalars[f"output.{i}"]
            dev, _, data = STATE.session.get(sname)
            STATE.session.delete(sname)
            v = torch.frombuffer(data, dtype=_SESSION_TORCH[dev], count=1)[0]
            ret_ty = str(func._schema.returns[i].type)
            res.append(bool(v) if ret_ty == "bool" else (int(v) if ret_ty in ("int", "SymInt") else v.item()))
        else:
            res.append(None)
    if len(func._schema.returns) == 1:
        return res[0]
    return tuple(res)


def _decode_value(v: dict) -> Any:
    ((kind, x),) = v.items()
    if kind == "float" and isinstance(x, str):
        return float(x)
    if kind == "none":
        return None
    return x


# ---------------------------------------------------------------------------------------------
# Backends: trnconf's lowering, or an NKI backend module for the overloads it provides

_NOT_SERVED = object()


def _served(name: str, top: bool, backend: str = _backend.LOWERING, kernels: list[str] | None = None) -> None:
    """Records that ``name`` ran on the device through ``backend`` (report, and check mode's
    attribution of drift to a backend and its kernels)."""
    _report.REPORT.op(name, "device", top)
    _report.REPORT.backend(name, backend)
    if STATE.served is not None:
        STATE.served.append((name, backend, kernels or []))


def _via_module(func, args, kwargs, top: bool):
    """Runs ``func`` through the NKI backend module when it provides the overload; else (or when
    its wrapper declines the call form) ``_NOT_SERVED``, and the lowering serves it."""
    mod = STATE.backend
    name = op_name(func)
    if mod is None or not mod.provides(name):
        return _NOT_SERVED
    try:
        out = _run_module(mod, func, args, kwargs)
    except _backend.Declined as e:
        _report.REPORT.declined(name, mod.label, str(e))
        return _NOT_SERVED
    _served(name, top, mod.label, mod.locations[name])
    return out


def _run_module(mod: _backend.NkiModule, func, args, kwargs):
    """The module's wrapper and kernels on the call, checked against PyTorch's meta kernel.

    First in the device's session: the wrapper gets the tensors as device arrays (``_devarray``:
    the NumPy interface wrappers use for layout, done by the device's own ops), its kernels run
    on the session's tensors, and results stay there. A wrapper that needs what device arrays do
    not offer (or fails there) is run again with NumPy arrays (the module convention): the inputs
    are copied to the host, the kernels run as separate simulator runs, and the results are copied
    back; every copy is counted under ``transfers`` (``nki_module_*``) and the rerun under the
    op's ``nki_host_path`` with its reason."""
    from . import _devarray

    name = op_name(func)
    meta = _meta_outputs(func, args, kwargs)
    if meta is None:
        raise _backend.Declined("PyTorch has no meta kernel for the call (the outputs' shapes are unknown)")
    try:
        result, runs = _devarray.run_on_device(mod, name, *_module_args(name, args, kwargs, device=True))
    except _backend.Declined:
        raise
    except Exception as e:  # noqa: BLE001 - any failure on device arrays: the host convention decides
        why = f"{type(e).__name__}: {e}"
        try:
            result, runs = mod.run(name, *_module_args(name, args, kwargs, device=False), target=STATE.target)
        except _backend.Declined:
            raise
        except RuntimeError as host_err:
            raise TrnsimError(f"trnsim: {host_err}") from host_err
        _report.REPORT.module_host_path(name, why)
    for stats in runs:
        _report.REPORT.device_run(name, stats)
    rets = func._schema.returns
    metas = list(meta) if len(rets) > 1 else [meta]
    results = list(result) if isinstance(result, (tuple, list)) and len(rets) > 1 else [result]
    where = ", ".join(mod.locations[name])
    if len(results) != len(metas):
        raise TrnsimError(
            f"trnsim: {mod.label}: `{name}` returned {len(results)} outputs where the op has "
            f"{len(metas)} (kernels: {where})"
        )
    inputs = {id(x._trn) for x in tree_flatten((args, kwargs))[0] if isinstance(x, TrnsimTensor)}
    outs = []
    for i, (r, m) in enumerate(zip(results, metas)):
        if isinstance(r, _devarray.DevArray):
            t = r.t
        else:
            t = _backend.torch_of(r)
        if list(t.shape) != list(m.shape) or t.dtype != m.dtype:
            raise TrnsimError(
                f"trnsim: {mod.label}: `{name}` output {i} is {tuple(t.shape)} {t.dtype} where PyTorch's op gives "
                f"{tuple(m.shape)} {m.dtype} (kernels: {where})"
            )
        if not isinstance(t, TrnsimTensor):
            _report.REPORT.transfer("nki_module_host_to_device")
            t = upload(t)
        elif not _is_whole(t) or id(t._trn) in inputs:
            # A view (a wrapper's reshape of a kernel result) or an input itself: a fresh tensor.
            t = _run_lowered(aten.clone.default, (t,), {}, count=False)
        outs.append(t)
    return tuple(outs) if len(rets) > 1 else outs[0]


def _module_args(name: str, args, kwargs, device: bool) -> tuple[list, dict]:
    """The call's arguments in the module convention: tensors as device arrays (``device``) or
    NumPy arrays, dtypes as ``numpy.dtype``, other Python values unchanged."""
    from . import _devarray

    def conv(x):
        if isinstance(x, TrnsimTensor):
            if x.dtype.is_complex:
                raise _backend.Declined("a complex tensor (the NKI backend convention has no complex arrays)")
            if device:
                return _devarray.DevArray(x)
            _report.REPORT.transfer("nki_module_device_to_host")
            return _backend.numpy_of(download(x))
        if isinstance(x, torch.Tensor):
            if x.device.type != "cpu" or x.dim() != 0:
                raise TrnsimError(
                    f"trnsim: `{name}` got a {x.device.type} tensor of shape {tuple(x.shape)} beside "
                    f"trnsim tensors; move it with .to('{DEVICE_NAME}')"
                )
            # A wrapped Python number, narrowed as the lowering path narrows it.
            return _backend.numpy_of(x.to(torch.float32) if x.dtype == torch.float64 else x)
        if isinstance(x, torch.dtype):
            return _backend.numpy_dtype(x)
        if isinstance(x, (torch.device, torch.layout, torch.memory_format)):
            raise _backend.Declined(f"a {type(x).__name__} argument (no NKI backend form)")
        return x

    def number(x, ty: str):
        # A Python number where the schema has a Tensor (`mul.Tensor(x, 2)`): the 0-d tensor
        # PyTorch would wrap it as (the golden cases record such calls that way).
        if ty in ("Tensor", "Optional[Tensor]", "Tensor?") and isinstance(x, (bool, int, float)):
            dt = torch.bool if isinstance(x, bool) else torch.int64 if isinstance(x, int) else torch.float32
            return torch.scalar_tensor(x, dtype=dt)
        if ty in ("Tensor", "Optional[Tensor]", "Tensor?") and isinstance(x, complex):
            raise _backend.Declined("a complex scalar (the NKI backend convention has no complex arrays)")
        return x

    schema = func_schema_types(name)
    args = [number(a, schema[i][1]) if i < len(schema) else a for i, a in enumerate(args)]
    types = dict(schema)
    kwargs = {k: number(v, types.get(k, "")) for k, v in kwargs.items()}
    return tree_map(conv, list(args)), {k: tree_map(conv, v) for k, v in kwargs.items()}


def func_schema_types(name: str) -> list[tuple[str, str]]:
    """``[(argument name, type)]`` of the ATen overload ``name`` (golden spelling)."""
    base, _, overload = name.partition(".")
    func = getattr(getattr(aten, base), overload or "default")
    return [(a.name, str(a.type)) for a in func._schema.arguments]


def set_backend(spec: str | None) -> None:
    """``lowering`` (or None) or ``nki:MODULE``: the backend of the device's Core ATen ops."""
    STATE.backend = _backend.parse(spec)


def backend() -> str:
    return STATE.backend.label if STATE.backend is not None else _backend.LOWERING


# ---------------------------------------------------------------------------------------------
# Dispatch


def _decomposition(func):
    from torch._decomp import core_aten_decompositions, decomposition_table

    table = _decomposition.core
    if table is None:
        table = _decomposition.core = dict(core_aten_decompositions())
    return table.get(func) or decomposition_table.get(func)


_decomposition.core = None  # type: ignore[attr-defined]


def _per_overload(fn):
    """``fn(func)`` computed once per overload: what it reads (the schema, the ``aten``
    namespace's overloads) does not change while the process runs."""
    memo: dict = {}

    def cached(func):
        try:
            return memo[func]
        except KeyError:
            out = memo[func] = fn(func)
            return out

    cached.__doc__ = fn.__doc__
    return cached


@_per_overload
def _functional_of(func):
    """The functional overload of an in-place op (``add_.Tensor`` -> ``add.Tensor``)."""
    s = func._schema
    base = s.name.split("::", 1)[1]
    if not base.endswith("_"):
        return None
    packet = getattr(aten, base[:-1], None)
    if packet is None:
        return None
    same = getattr(packet, s.overload_name or "default", None)
    if same is not None:
        return same
    # `transpose_` -> `transpose.int`: the overload with the same argument names.
    want = [a.name for a in s.arguments]
    for ov in packet.overloads():
        cand = getattr(packet, ov)
        if not cand._schema.is_mutable and [a.name for a in cand._schema.arguments] == want:
            return cand
    return None


@_per_overload
def _functional_of_out(func):
    """The functional overload of an `out=` overload: same name, the same non-out arguments."""
    s = func._schema
    packet = getattr(aten, s.name.split("::", 1)[1], None)
    if packet is None:
        return None
    # Names and types: `linspace.out` (Scalar start, end) and `linspace.Tensor_Tensor` share the
    # argument names, only the types tell them apart.
    # The keyword-only arguments too: `randperm.generator_out` is `randperm.generator`, not
    # `randperm` (which has no `generator`).
    want = [(a.name, str(a.type)) for a in s.arguments if not a.is_out and not a.kwarg_only]
    want_kw = {a.name for a in s.arguments if not a.is_out and a.kwarg_only}
    fallback = None
    for ov in packet.overloads():
        cand = getattr(packet, ov)
        cs = cand._schema
        if any(a.is_out for a in cs.arguments) or cs.is_mutable:
            continue
        if [(a.name, str(a.type)) for a in cs.arguments if not a.kwarg_only] == want:
            if want_kw <= {a.name for a in cs.arguments if a.kwarg_only}:
                return cand
            fallback = fallback or cand
    return fallback


@_per_overload
def _mutated_args(func) -> tuple[int, ...]:
    return tuple(i for i, a in enumerate(func._schema.arguments) if a.alias_info is not None and a.alias_info.is_write)


@_per_overload
def _out_kwargs(func) -> tuple[str, ...]:
    return tuple(a.name for a in func._schema.arguments if a.is_out)


# Frames in these directories are PyTorch's or this package's, not the user's call site.
_LIBRARY_DIRS = tuple(os.sep + d + os.sep for d in ("torch", os.path.join("trnsim", "torch")))


def _call_site() -> str:
    for frame in reversed(traceback.extract_stack()[:-1]):
        f = frame.filename
        if any(d in f for d in _LIBRARY_DIRS) or f.startswith("<frozen"):
            continue
        return f"{f}:{frame.lineno}"
    return "?"


def _check_device_index(dev) -> None:
    """A call that names this device with an index (`device="trnsim:1"`) names a core the
    process simulates (index 0, or a torchrun rank's LOCAL_RANK), or it is an error: never
    silently index 0."""
    if isinstance(dev, str):
        dev = torch.device(dev)
    if isinstance(dev, torch.device) and dev.type == DEVICE_NAME and dev.index not in (None, 0):
        from . import _device_index

        _device_index(dev, "device")


def dispatch(func, args, kwargs):
    """Serves one ATen call that involves a trnsim tensor."""
    if kwargs and "device" in kwargs:
        _check_device_index(kwargs["device"])
    with STATE.lock:
        top = STATE.depth == 0
        STATE.depth += 1
        gen_before = STATE.generator
        gen = kwargs.get("generator") if kwargs else None
        if gen is not None:
            STATE.generator = gen
        try:
            if top and _bounds.base_name(func) in _bounds.GUARDED:
                _bounds.guard(func, args, kwargs)
            if top and STATE.checking:
                return _checked(func, args, kwargs)
            return _dispatch(func, args, kwargs, top)
        except _NotRunnable as e:
            # A lowering refused a call made on the way (a transfer's conversion, a gather):
            # the op as the user called it is unsupported.
            if not top:
                raise
            return _unsupported(func, args, kwargs, str(e))
        except RecursionError:
            if not top:
                raise
            return _unsupported(func, args, kwargs, "its decompositions do not reach lowered ops (they recurse)")
        except BaseException as e:
            # An index outside the tensor (flagged by the lowering, refused by the indirect DMA):
            # the exception PyTorch raises for the call as the user made it.
            mapped = None
            if top and isinstance(e, SimError) and _bounds.OUTSIDE in e.message:
                mapped = _bounds.pytorch_error(func, args, kwargs, download)
            if top and torch._C._current_autograd_node() is not None:
                # torch 2.15 aborts the process ("terminate called without an active
                # exception") when an error leaves a backward pass on a Python-registered
                # PrivateUse1 device, losing the message: say it first.
                import sys

                shown = mapped if mapped is not None else e
                print(f"trnsim: error in backward: {type(shown).__name__}: {shown}", file=sys.stderr, flush=True)
            if mapped is not None:
                raise mapped from e
            raise
        finally:
            STATE.depth -= 1
            STATE.generator = gen_before


_COMPOSITE_IMPLICIT: dict = {}


def _composite_implicit(func) -> bool:
    """Whether ``func`` has a CompositeImplicitAutograd kernel (PyTorch's own decomposition).
    Remembered for ``aten`` and ``prims`` overloads, whose kernels PyTorch registers at import;
    asked every time for other namespaces (a library may register its kernels later)."""
    hit = _COMPOSITE_IMPLICIT.get(func)
    if hit is None:
        hit = torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")
        if func.namespace in ("aten", "prims"):
            _COMPOSITE_IMPLICIT[func] = hit
    return hit


def _dispatch(func, args, kwargs, top: bool):
    if func.namespace in ("c10d", "_c10d_functional"):
        # Distributed hook: collectives go to the c10d backend package (trnsim.torch.distributed).
        from . import distributed

        return distributed.dispatch(func, args, kwargs)
    name = op_name(func)
    if func.namespace not in ("aten", "prims") and any(
        torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), k)
        for k in ("PrivateUse1", "CompositeExplicitAutograd")
    ):
        # A library's own op with a kernel for this device's key, or for every backend, written
        # in PyTorch ops (FSDP2's `fsdp::all_gather_copy_in`, `fsdp::split_with_sizes_copy`,
        # `fsdp::chunk_cat_mixed_dtype`): that kernel runs, and each op it calls comes back here.
        _report.REPORT.op(name, "decomposed", top)
        return func.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1), *args, **kwargs)
    if func._schema.name.startswith("aten::_foreach_"):
        _report.REPORT.op(name, "decomposed", top)
        return _foreach(func, args, kwargs)
    if func is aten._to_copy.default:
        return _to_copy(args[0], **kwargs)
    if func is aten.copy_.default:
        return _copy_(args[0], args[1])
    if func in (aten.lift_fresh.default, aten.lift_fresh_copy.default) and isinstance(args[0], TrnsimTensor):
        return args[0]
    if _composite_implicit(func):
        # A composite (`to.dtype`, `reshape`, …) reaching the device: PyTorch's own decomposition.
        out = func.decompose(*args, **kwargs)
        if out is not NotImplemented:
            return out
    if func in _COMPLEX_FORMS and any(isinstance(a, TrnsimTensor) and a.dtype == torch.complex64 for a in args[:1]):
        return _COMPLEX_FORMS[func](func, args, kwargs, top)
    if func in _COMPLEX_ARITH and _complex_result(func, args, kwargs):
        return _COMPLEX_ARITH[func](func, args, kwargs, top)
    if func.is_view:
        if func is aten.view.dtype or (func._schema.name == "aten::view" and "dtype" in func._schema.overload_name):
            return _unsupported(func, args, kwargs, "a view as another dtype reinterprets bits")
        return _alias(func, args, kwargs)
    if func._schema.name.startswith("prims::"):
        return _prim(func, args, kwargs)
    if func is aten.rsub.Scalar or func is aten.rsub.Tensor:
        # `1 - x`: PyTorch decomposes rsub through its refs into prims; the Core ATen form is sub.
        self, other = args[0], args[1]
        alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
        if not isinstance(other, torch.Tensor):
            # The Python number in the result's dtype (PyTorch's promotion of a tensor with a
            # number): as a float64 0-d tensor it would promote a 0-d `self` to float64.
            other = torch.scalar_tensor(other, dtype=torch.result_type(self, other))
        _report.REPORT.op(name, "decomposed", top)
        return _call(aten.sub.Tensor, (other, self), {"alpha": alpha} if alpha != 1 else {})
    if func is aten.native_batch_norm.default:
        return _native_batch_norm(*args, **kwargs)
    if func is aten._native_batch_norm_legit.default:
        x, w, b, rm, rv, training, momentum, eps = _bn_args(args, kwargs, 8)
        return _native_batch_norm(x, w, b, rm, rv, training, momentum, eps, legit=True)
    if func is aten._native_batch_norm_legit_functional.default:
        x, w, b, rm, rv, training, momentum, eps = _bn_args(args, kwargs, 8)
        _report.REPORT.op(name, "decomposed", top)
        return _batch_norm_functional(x, w, b, rm, rv, training, momentum, eps)
    if func is aten._batch_norm_with_update_functional.default:
        x, w, b, rm, rv, momentum, eps = _bn_args(args, kwargs, 7)
        _report.REPORT.op(name, "decomposed", top)
        out, mean, rstd, new_mean, new_var = _batch_norm_functional(x, w, b, rm, rv, True, momentum, eps)
        reserve = _run_lowered(
            aten.empty.memory_format, ([0],), {"dtype": torch.uint8, "device": torch.device("cpu")}, count=False
        )
        return out, mean, rstd, reserve, new_mean, new_var
    if func is aten._batch_norm_with_update.default:
        x, w, b, rm, rv, momentum, eps = _bn_args(args, kwargs, 7)
        out, mean, rstd = _native_batch_norm(x, w, b, rm, rv, True, momentum, eps, legit=True)
        reserve = _run_lowered(
            aten.empty.memory_format, ([0],), {"dtype": torch.uint8, "device": torch.device("cpu")}, count=False
        )
        return out, mean, rstd, reserve
    if func in (aten.max.default, aten.min.default):
        # The all-element max/min: the lowered amax/amin over every dim.
        red = aten.amax.default if func is aten.max.default else aten.amin.default
        _report.REPORT.op(name, "decomposed", top)
        return _call(red, (args[0], list(range(args[0].dim()))), {})
    if func is aten.bernoulli_.float:
        return _bernoulli_(*args, **kwargs)
    if func in _RNG_INPLACE:
        return _RNG_INPLACE[func](*args, **kwargs)
    if func in _RNG_FORMS:
        _report.REPORT.op(name, "decomposed", top)
        return _RNG_FORMS[func](*args, **kwargs)
    if func in EXTRA_FORMS:
        _report.REPORT.op(name, "decomposed", top)
        return EXTRA_FORMS[func](*args, **kwargs)
    if func._schema.is_mutable:
        return _inplace(func, args, kwargs, top)
    out = _via_module(func, args, kwargs, top)
    if out is not _NOT_SERVED:
        return out
    if _native.is_lowered(name):
        try:
            out = _run_lowered(func, args, kwargs)
            _served(name, top)
            return out
        except _NotRunnable as e:
            reason = e
    else:
        reason = None
    if func in _FASTPATH_FORMS:
        # PyTorch's inference fast paths (`nn.MultiheadAttention`, `nn.TransformerEncoderLayer`
        # in eval mode without grad) call fused kernels it has only for the CPU and CUDA, with no
        # decomposition: the device runs their math as lowered ops.
        _report.REPORT.op(name, "decomposed", top)
        return _FASTPATH_FORMS[func](*args, **kwargs)
    decomp = _decomposition(func)
    if decomp is not None:
        out = decomp(*args, **kwargs)
        if out is not NotImplemented:
            _report.REPORT.op(name, "decomposed", top)
            return out
    out = func.decompose(*args, **kwargs)
    if out is not NotImplemented:
        _report.REPORT.op(name, "decomposed", top)
        return out
    why = str(reason) if reason is not None else "trnconf has no lowering for it and PyTorch no decomposition"
    return _unsupported(func, args, kwargs, why)


#: Ops outside the lowering that the device serves as its own compositions of lowered ops,
#: registered by the modules that define them (`_sizes.py`, `_ordering.py`, `_training.py`):
#: ``{overload: fn(*args, **kwargs)}``.
EXTRA_FORMS: dict = {}

_FOREACH_AS = {"norm": "linalg_vector_norm"}


def _foreach(func, args, kwargs):
    """``_foreach_<op>(lists...)`` (optimizers' and FSDP2's multi-tensor forms) as one ``<op>`` per
    position, each dispatched as usual (so each runs on the engines): list arguments are taken
    at the position, every other argument is passed whole. In-place forms return nothing."""
    schema = func._schema
    base = schema.name.split("::", 1)[1][len("_foreach_") :]
    inplace = base.endswith("_")
    if base.rstrip("_") in ("addcdiv", "addcmul") and func._overloadname == "Tensor":
        return _foreach_addc_tensor(base, *args, **kwargs)
    packet = getattr(aten, _FOREACH_AS.get(base, base))
    bound = dict(zip((a.name for a in schema.arguments), args))
    bound.update(kwargs)
    lists = [
        a.name
        for a in schema.arguments
        if isinstance(a.type, torch.ListType) and a.name in bound and isinstance(bound[a.name], (list, tuple))
    ]
    n = len(bound[lists[0]]) if lists else 0
    for k in lists:
        if len(bound[k]) != n:
            raise RuntimeError(f"{schema.name}: the lists have different lengths ({n} and {len(bound[k])} for {k})")
    names = [a.name for a in schema.arguments]
    # by name where the per-tensor op takes the argument by name only (`addcmul_`'s value=)
    kw_only = {a.name for a in schema.arguments if a.kwarg_only}
    for ov in packet.overloads():
        kw_only |= {a.name for a in getattr(packet, ov)._schema.arguments if a.kwarg_only}
    outs = []
    for i in range(n):
        pos, kw = [], {}
        for k in names:
            if k not in bound:
                continue
            v = bound[k][i] if k in lists else bound[k]
            if k == "scalars" and base.rstrip("_") in ("addcdiv", "addcmul"):
                kw["value"] = v  # `_foreach_addcdiv_.ScalarList` (Adam's step sizes): addcdiv's value=
            elif k in kw_only:
                kw[k] = v
            else:
                pos.append(v)
        outs.append(packet(*pos, **kw))
    return None if inplace else outs


def _foreach_addc_tensor(base, self, tensor1, tensor2, scalars):
    """``_foreach_addcdiv``/``addcmul`` with a tensor of per-position values: position i is
    ``self[i] + scalars[i] * (tensor1[i] / tensor2[i])`` (or ``*``), PyTorch's formula, with
    ``scalars[i]`` a one-element device tensor (the values never go to the host)."""
    if scalars.dim() != 1 or scalars.numel() != len(self):
        raise RuntimeError(
            f"_foreach_{base}: scalars must be 1-D with one value per tensor ({len(self)}), "
            f"got shape {tuple(scalars.shape)}"
        )
    vals = scalars if isinstance(scalars, TrnsimTensor) else scalars.to(DEVICE_NAME)
    outs = []
    for i, (x, a, b) in enumerate(zip(self, tensor1, tensor2)):
        term = (a / b if base.startswith("addcdiv") else a * b) * vals[i].to(x.dtype)
        if base.endswith("_"):
            x.add_(term)
        else:
            outs.append(x + term)
    return None if base.endswith("_") else outs


def _unsupported(func, args, kwargs, why: str):
    name = op_name(func)
    form = _call_form(args, kwargs)
    nested = name.startswith("_nested")
    if nested:
        # The device's tensors are strided wrappers: a nested (jagged) tensor cannot live on it,
        # and a CPU fallback would hand one back. `nn.TransformerEncoder` builds one in eval mode
        # from `src_key_padding_mask`.
        why = (
            "nested tensors are not supported on the trnsim device; for nn.TransformerEncoder pass "
            "enable_nested_tensor=False"
        )
    if not STATE.fallback or nested:
        _report.REPORT.unsupported(name)
        raise UnsupportedOpError(
            f"trnsim: aten::{name} is not supported on the {DEVICE_NAME} device ({why}); call form: {name}({form}); "
            f"called from {_call_site()}."
            + (
                ""
                if nested
                else " Set TRNSIM_TORCH_FALLBACK=1 or trnsim.torch.set_fallback(True) to run it on the CPU."
            )
        )
    if name not in STATE.warned:
        STATE.warned.add(name)
        warnings.warn(
            f"trnsim: aten::{name} runs on the CPU (fallback; {why}); call form: {name}({form})",
            stacklevel=3,
        )
    _report.REPORT.fallback(name, _call_site())
    return _run_on_cpu(func, args, kwargs)


def _call_form(args, kwargs) -> str:
    def d(x):
        if isinstance(x, torch.Tensor):
            return f"Tensor[{','.join(map(str, x.shape))}] {str(x.dtype).replace('torch.', '')}"
        return repr(x)

    parts = [d(a) if not isinstance(a, (list, tuple)) else "[" + ", ".join(d(y) for y in a) + "]" for a in args]
    parts += [f"{k}={d(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


def _run_on_cpu(func, args, kwargs):
    cargs = tree_map(lambda x: download(x) if isinstance(x, TrnsimTensor) else x, args)
    ckwargs = tree_map(lambda x: download(x) if isinstance(x, TrnsimTensor) else x, kwargs)
    ckwargs = {k: (torch.device("cpu") if isinstance(v, torch.device) else v) for k, v in ckwargs.items()}
    out = func(*cargs, **ckwargs)
    for i in _mutated_args(func):
        if i < len(args) and isinstance(args[i], TrnsimTensor):
            _write_into(args[i], upload(cargs[i]))
    mutated = {i for i in _mutated_args(func)}
    rets = func._schema.returns
    if len(rets) == 1 and rets[0].alias_info is not None and mutated:
        return args[min(mutated)]
    return tree_map(lambda x: upload(x) if isinstance(x, torch.Tensor) else x, out)


def _alias(func, args, kwargs):
    """A view: same storage, the sizes/strides/offset PyTorch's meta kernel gives."""
    src = args[0]
    if isinstance(src, (list, tuple)):
        src = src[0]
    st = src._trn

    def meta_view(x):
        if isinstance(x, TrnsimTensor):
            # The storage seen in x's dtype (complex64 / float32 views count its elements in
            # their own units), so PyTorch's meta kernel gives the view's true strides and offset.
            n = _f32_elements(x._trn) // (2 if x.dtype == torch.complex64 else 1)
            base = torch.empty(n, dtype=x.dtype, device="meta")
            return base.as_strided(x.shape, x.stride(), x.storage_offset())
        return x

    key = _meta_key(func, args, kwargs, view=True)
    out = VIEW_CACHE.get(key)
    if out is None:
        out = func(*tree_map(meta_view, args), **tree_map(meta_view, kwargs))
        VIEW_CACHE.put(key, out)
    flat_out, _ = tree_flatten(out)
    if any(isinstance(m, torch.Tensor) and (m.is_conj() or m.is_neg()) for m in flat_out):
        # A lazily conjugated / negated view carries a bit the device's tensors do not have;
        # dropping it would silently give the unconjugated values.
        return _unsupported(func, args, kwargs, "a conjugate or negative view (PyTorch's lazy conj/neg bit)")
    _report.REPORT.op(op_name(func), "view", STATE.depth == 1)

    real_pair = {torch.complex64, torch.float32}
    if any(isinstance(m, torch.Tensor) and m.dtype != st.dtype and {m.dtype, st.dtype} != real_pair for m in flat_out):
        # `view(dtype)` and the like: a reinterpretation of the bytes as another dtype, which the
        # device's tensors do not express (only complex64 <-> its float32 real view).
        return _unsupported(func, args, kwargs, "a view as another dtype")

    def wrap(m):
        if isinstance(m, torch.Tensor):
            return TrnsimTensor(st, m.shape, m.stride(), m.storage_offset(), dtype=m.dtype)
        return m

    return tree_map(wrap, out)


def _to_copy(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    dev = torch.device(device) if device is not None else None
    if dtype in (torch.complex32, torch.complex128, torch.float64) and (dev is None or dev.type == DEVICE_NAME):
        _report.REPORT.refusal(str(dtype))
        raise DtypeError(
            f"trnsim: {dtype} has no device dtype on Trainium (policy: float64, complex128 and "
            "complex32 are refused; complex64 is stored as float32 pairs)"
        )
    if isinstance(x, TrnsimTensor) and dev is not None and dev.type != DEVICE_NAME:
        host = download(x)
        _report.REPORT.transfer("device_to_host")
        return host.to(dtype=dtype or host.dtype, device=dev)
    if not isinstance(x, TrnsimTensor):
        # CPU -> trnsim: convert on the CPU first only if asked (the dtype the user wants to store).
        host = x.to(dtype=dtype) if dtype is not None else x
        _report.REPORT.transfer("host_to_device")
        return upload(host)
    kw = {}
    if dtype is not None and dtype != x.dtype:
        kw["dtype"] = dtype
    else:
        # A copy in the same dtype is a clone.
        return _run_lowered(aten.clone.default, (x,), {})
    return _run_lowered(aten._to_copy.default, (x,), kw)


def _copy_(dst, src):
    if isinstance(dst, TrnsimTensor):
        fresh = False
        if not isinstance(src, TrnsimTensor):
            _report.REPORT.transfer("host_to_device")
            # float64 / complex128 have no device dtype: the CPU converts to the target's dtype
            # as part of the transfer (PyTorch's copy_ converts too).
            if src.dtype in (torch.float64, torch.complex128) and dst.dtype != src.dtype:
                src = src.to(dst.dtype)
            src = upload(src)
            fresh = True
        if list(src.shape) != list(dst.shape) or src.dtype != dst.dtype:
            src = _run_lowered(aten.copy.default, (dst, src), {}, count=False)
        elif not fresh:
            # The source stays the caller's: the target gets a device copy of it.
            src = _run_lowered(aten.clone.default, (src,), {}, count=False)
        _write_into(dst, src)
        _report.REPORT.op("copy_", "device", STATE.depth == 1)
        return dst
    # trnsim -> CPU
    _report.REPORT.transfer("device_to_host")
    dst.copy_(download(src))
    return dst


def _write_into(dst: TrnsimTensor, src: TrnsimTensor) -> None:
    """Writes ``src`` (a fresh, whole, contiguous device tensor of ``dst``'s shape and dtype) into
    ``dst``'s memory, so every alias of ``dst`` sees it."""
    if src.dtype != dst.dtype:
        src = _run_lowered(aten._to_copy.default, (src,), {"dtype": dst.dtype}, count=False)
    st = dst._trn
    if dst.dtype != st.dtype:
        return _write_real(dst, src)
    if _is_whole(dst) or (dst.storage_offset() == 0 and dst.is_contiguous() and dst.numel() == st.numel):
        new = src._trn
        old = st.name
        st.name, st.shape = new.name, list(new.shape)
        new.name = None
        STATE.session.delete(old)
        return
    if st.dtype == torch.complex64:
        return _write_real(dst, src)
    # A partial view: index_put over the flat storage, at the view's element positions.
    flat = TrnsimTensor(st, [st.numel]) if len(st.shape) != 1 else TrnsimTensor(st, st.shape)
    if len(st.shape) != 1:
        flat = _run_lowered(aten.view.default, (TrnsimTensor(st, st.shape), [st.numel]), {}, count=False)
    positions = torch.arange(st.numel, dtype=torch.int64).as_strided(dst.shape, dst.stride(), dst.storage_offset())
    idx = upload(positions.reshape(-1))
    vals = src if src.dim() == 1 else _run_lowered(aten.view.default, (src, [src.numel()]), {}, count=False)
    written = _run_lowered(aten.index_put.default, (flat, [idx], vals), {}, count=False)
    if len(st.shape) != 1:
        written = _run_lowered(aten.view.default, (written, list(st.shape)), {}, count=False)
    new = written._trn
    old = st.name
    st.name = new.name
    new.name = None
    STATE.session.delete(old)


def _write_real(dst: TrnsimTensor, src: TrnsimTensor) -> None:
    """``_write_into`` for complex64 memory (a partial complex64 view, or a float32 / complex64
    view of the other dtype's storage): the same write over the storage's float32 real view,
    where a complex element is its (re, im) pair (the lowering's index_put has no complex form)."""
    st = dst._trn
    n = _f32_elements(st)
    sizes, strides, offset = _real_layout(dst)
    src_real = _real_base(src._trn)  # src is fresh and whole: its bytes in float32
    if sizes == st.dev_shape() and strides == _contiguous_strides(sizes) and offset == 0:
        # The view covers the whole storage in order: the storage takes over src's memory.
        new = src._trn
        old = st.name
        st.name = new.name
        new.name = None
        STATE.session.delete(old)
        return
    flat = _run_lowered(aten.view.default, (_real_base(st), [n]), {}, count=False)
    positions = torch.arange(n, dtype=torch.int64).as_strided(sizes, strides, offset)
    idx = upload(positions.reshape(-1))
    vals = _run_lowered(aten.view.default, (src_real, [src_real.numel()]), {}, count=False)
    written = _run_lowered(aten.index_put.default, (flat, [idx], vals), {}, count=False)
    written = _run_lowered(aten.view.default, (written, st.dev_shape()), {}, count=False)
    new = written._trn
    old = st.name
    st.name = new.name
    new.name = None
    STATE.session.delete(old)


def _inplace(func, args, kwargs, top: bool):
    name = op_name(func)
    mutated = _mutated_args(func)
    functional = _functional_of(func)
    out_kw = _out_kwargs(func)
    if out_kw:
        # An `out=` overload: its functional overload, written into `out`.
        functional = _functional_of_out(func)
        if functional is not None and all(k in kwargs for k in out_kw):
            fkw = {k: v for k, v in kwargs.items() if k not in out_kw}
            fnames = {a.name for a in functional._schema.arguments}
            first_out = kwargs[out_kw[0]]
            # A factory's `out=` overload: the functional form is told the dtype and device.
            if "dtype" in fnames and "dtype" not in fkw:
                fkw["dtype"] = first_out.dtype
            if "device" in fnames and "device" not in fkw:
                fkw["device"] = first_out.device
            res = _call(functional, args, fkw)
            # `Tensor(a!)[] out` (`split_with_sizes_copy.out`): one result per tensor of the list
            listed = any(isinstance(kwargs[k], (list, tuple)) for k in out_kw)
            outs = [o for k in out_kw for o in (kwargs[k] if isinstance(kwargs[k], (list, tuple)) else [kwargs[k]])]
            results = res if isinstance(res, (tuple, list)) else (res,)
            if len(results) != len(outs):
                return _unsupported(func, args, kwargs, f"{len(outs)} `out=` tensors for {len(results)} results")
            for o, r in zip(outs, results):
                if list(o.shape) != list(r.shape):
                    if o._trn.numel >= r.numel():
                        # PyTorch resizes an `out=` tensor of the wrong shape: within its
                        # storage that is new sizes and strides.
                        _restride(o, r.shape, _contiguous_strides(r.shape), 0)
                    else:
                        return _unsupported(func, args, kwargs, "an `out=` tensor that must grow beyond its storage")
                _write_into(o, r if _fresh(r) else _run_lowered(aten.clone.default, (r,), {}, count=False))
            if listed:
                return None
            return outs[0] if len(outs) == 1 else tuple(outs)
        return _unsupported(func, args, kwargs, "no functional form of this `out=` overload")
    if func is aten.resize_.default:
        return _resize_(func, args, kwargs)
    if functional is not None and functional.is_view and mutated == (0,):
        # `squeeze_`, `t_`, `transpose_`, …: new sizes/strides for the same memory.
        out = _alias(functional, args, kwargs)
        _restride(args[0], out.shape, out.stride(), out.storage_offset())
        return args[0]
    if functional is None or len(mutated) != 1 or mutated[0] != 0:
        return _unsupported(func, args, kwargs, "an in-place op with no functional form")
    # PyTorch's own checks of the in-place call (shape that cannot broadcast into self, a
    # result dtype self cannot hold) on meta tensors first, so the errors are PyTorch's.
    _check_inplace_meta(func, args, kwargs)
    res = _call(functional, args, kwargs)
    if isinstance(res, (tuple, list)):
        res = res[0]
    self = args[0]
    if list(res.shape) != list(self.shape):
        res = _run_lowered(aten.expand.default, (res, list(self.shape)), {}, count=False)
    if not _fresh(res) or res._trn is self._trn:
        res = _run_lowered(aten.clone.default, (res,), {}, count=False)
    _write_into(self, res)
    _report.REPORT.op(name, "in-place", top)
    return self


def _restride(t: TrnsimTensor, size, stride, offset: int) -> None:
    """Changes a device tensor's sizes/strides/offset in place (PyTorch's own `as_strided_`
    on the wrapper, below the Python key: metadata only)."""
    with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.Python)):
        torch.ops.aten.as_strided_.default(t, list(size), list(stride), offset)


def _resize_(func, args, kwargs):
    self, size = args[0], list(args[1])
    n = 1
    for x in size:
        n *= x
    if n > self._trn.numel - self.storage_offset():
        # The wrapper's storage size is fixed when it is made: a tensor cannot grow in place.
        return _unsupported(func, args, kwargs, "resize_ that grows a tensor beyond its storage")
    _restride(self, size, _contiguous_strides(size), self.storage_offset())
    return self


def _check_inplace_meta(func, args, kwargs) -> None:
    key = _meta_key(func, args, kwargs)
    if INPLACE_CHECKED.get(key):
        return  # the same metadata passed the check before
    margs = tree_map(_to_meta, args)
    mkwargs = tree_map(_to_meta, kwargs)
    try:
        func(*margs, **mkwargs)
    except NotImplementedError:
        pass
    INPLACE_CHECKED.put(key, True)


def _fresh(t: TrnsimTensor) -> bool:
    import sys

    # A result nobody else holds (the local and getrefcount's argument only) and that covers its
    # storage: safe to hand its memory to the target.
    return _is_whole(t) and sys.getrefcount(t._trn) <= 2


def _call(func, args, kwargs):
    """The functional form of an in-place or `out=` call: lowered directly when trnconf lowers
    it (a factory's functional form would otherwise come back here through its `out=` form)."""
    name = op_name(func)
    out = _via_module(func, args, kwargs, False)
    if out is not _NOT_SERVED:
        return out
    if _native.is_lowered(name):
        try:
            out = _run_lowered(func, args, kwargs)
            _served(name, False)
            return out
        except _NotRunnable:
            pass
    return dispatch_inner(func, args, kwargs)


def dispatch_inner(func, args, kwargs):
    """Re-enters the dispatcher (autograd off: this is below it), so decompositions and
    in-place ops reach the device the same way a user's call does."""
    return func(*args, **kwargs)


def _prim(func, args, kwargs):
    """A `prims::` op (left by a PyTorch ref): its ATen namesake, Python numbers as CPU scalars."""
    base = func._schema.name.split("::", 1)[1]
    packet = getattr(aten, base, None)
    target = None
    if packet is not None:
        for ov in ("Tensor", "default"):
            if ov in packet.overloads():
                target = getattr(packet, ov)
                break
    special = _PRIM_FORMS.get(base)
    if special is not None:
        _report.REPORT.op(op_name(func), "decomposed", STATE.depth == 1)
        return special(*args, **kwargs)
    if target is None:
        return _unsupported(func, args, kwargs, "a prims op with no ATen namesake")
    if not _native.is_lowered(op_name(target)):
        # The namesake would decompose back into this prim: refuse instead of looping.
        return _unsupported(func, args, kwargs, f"a prims op whose ATen namesake `{op_name(target)}` is not lowered")

    # A prim's Python number takes no part in its dtype (the ref has already promoted): as a 0-d
    # tensor it must not either. Two 0-d tensors promote each other (a 0-d float32 input beside a
    # float64 scalar gives float64, which the device refuses), so the number gets the tensor
    # operands' dtype (the widest kind among them: `where`'s condition is bool) whenever its kind
    # does not exceed theirs.
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    ref = max(tensors, key=lambda t: _kind(t.dtype)) if tensors else None

    def wrap(x):
        if isinstance(x, (bool, int, float)) and not isinstance(x, torch.Tensor):
            dt = torch.bool if isinstance(x, bool) else torch.int64 if isinstance(x, int) else torch.float64
            if ref is not None and _kind(dt) <= _kind(ref.dtype):
                dt = ref.dtype
            return torch.scalar_tensor(x, dtype=dt)
        return x

    _report.REPORT.op(op_name(func), "decomposed", STATE.depth == 1)
    return _call(target, tuple(wrap(a) for a in args), kwargs)


def _kind(dtype: torch.dtype) -> int:
    """bool < integer < floating < complex: the order of PyTorch's type-promotion categories."""
    if dtype.is_complex:
        return 3
    if dtype.is_floating_point:
        return 2
    return 0 if dtype == torch.bool else 1


def _bn_args(args, kwargs, n):
    names = ["input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps"]
    if n == 7:
        names.remove("training")
    vals = list(args) + [None] * (n - len(args))
    for i, k in enumerate(names):
        if k in kwargs:
            vals[i] = kwargs[k]
    return vals


def _prim_var(a, dims, correction=1, *, output_dtype=None):
    return _call(aten.var.correction, (a, list(dims) if dims is not None else None), {"correction": correction})


def _prim_prod(a, dims, *, output_dtype=None):
    out = a
    for d in sorted(dims or range(a.dim()), reverse=True):
        out = _call(aten.prod.dim_int, (out, d), {})
    return out


def _prim_reduce(op):
    def f(a, dims, *, output_dtype=None):
        return _call(op, (a, list(dims) if dims is not None else list(range(a.dim()))), {})

    return f


def _prim_convert(a, dtype):
    return _call(aten._to_copy.default, (a,), {"dtype": dtype})


def _prim_broadcast_in_dim(a, shape, broadcast_dimensions):
    v = a
    for i in range(len(shape)):
        if i not in broadcast_dimensions:
            v = _alias(aten.unsqueeze.default, (v, i), {})
    return _alias(aten.expand.default, (v, list(shape)), {})


_PRIM_FORMS = {
    "var": _prim_var,
    "prod": _prim_prod,
    "sum": _prim_reduce(aten.sum.dim_IntList),
    "amax": _prim_reduce(aten.amax.default),
    "amin": _prim_reduce(aten.amin.default),
    "convert_element_type": _prim_convert,
    "broadcast_in_dim": _prim_broadcast_in_dim,
}


def _native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, legit=False):
    """`native_batch_norm` is not Core ATen; PyTorch's export lowers it to the
    `_native_batch_norm_legit*` forms, which trnconf lowers, so the device does the same. The
    lowering returns the outputs; in training the running statistics are then updated in place
    with device ops (`running = (1 − momentum)·running + momentum·batch`, the batch variance
    unbiased), as PyTorch's kernels do."""
    if training and running_mean is not None:
        f, a = aten._native_batch_norm_legit.default, (x, weight, bias, running_mean, running_var, True, momentum, eps)
        _report.REPORT.op("_native_batch_norm_legit" if legit else "native_batch_norm", "decomposed", STATE.depth == 1)
        out = _run_lowered(f, a, {})
        _update_running(x, out[1], out[2], running_mean, running_var, momentum, eps)
        return out
    elif training:
        f, a = aten._native_batch_norm_legit.no_stats, (x, weight, bias, True, momentum, eps)
    else:
        f, a = (
            aten._native_batch_norm_legit_no_training.default,
            (x, weight, bias, running_mean, running_var, momentum, eps),
        )
    _report.REPORT.op("native_batch_norm", "decomposed", STATE.depth == 1)
    out = _call(f, a, {})
    if training:
        return out
    # In eval, native_batch_norm's saved mean and inverse std are empty (its CPU and CUDA
    # kernels), where the `_no_training` form returns them per channel.
    empty = _run_lowered(
        aten.empty.memory_format, ([0],), {"dtype": out[1].dtype, "device": torch.device("cpu")}, count=False
    )
    return out[0], empty, _run_lowered(aten.clone.default, (empty,), {}, count=False)


def _running_stats(x, mean, rstd, running_mean, running_var, momentum, eps) -> list:
    """The updated running mean and variance (device ops), as new tensors."""
    n = x.numel() // x.shape[1]
    out = []
    with torch.no_grad():
        var = dispatch_inner(
            aten.sub.Tensor,
            (dispatch_inner(aten.reciprocal.default, (dispatch_inner(aten.mul.Tensor, (rstd, rstd), {}),), {}), eps),
            {},
        )
        unbiased = dispatch_inner(aten.mul.Tensor, (var, n / max(n - 1, 1)), {})
        for run, batch in ((running_mean, mean), (running_var, unbiased)):
            upd = dispatch_inner(
                aten.add.Tensor,
                (
                    dispatch_inner(aten.mul.Tensor, (run, 1.0 - momentum), {}),
                    dispatch_inner(aten.mul.Tensor, (batch, momentum), {}),
                ),
                {},
            )
            out.append(upd if _fresh(upd) else _run_lowered(aten.clone.default, (upd,), {}, count=False))
    return out


def _update_running(x, mean, rstd, running_mean, running_var, momentum, eps) -> None:
    new = _running_stats(x, mean, rstd, running_mean, running_var, momentum, eps)
    for run, upd in zip((running_mean, running_var), new):
        _write_into(run, upd)


def _batch_norm_functional(x, weight, bias, running_mean, running_var, training, momentum, eps):
    """The functional batch norm AOTAutograd's functionalization gives (`..._functional`): the
    same device ops as the in-place forms, with the updated running statistics returned instead of
    written, so a compiled graph computes the same bits as eager."""
    if training:
        out = _run_lowered(
            aten._native_batch_norm_legit.default, (x, weight, bias, running_mean, running_var, True, momentum, eps), {}
        )
        new_mean, new_var = _running_stats(x, out[1], out[2], running_mean, running_var, momentum, eps)
        return out[0], out[1], out[2], new_mean, new_var
    out = _call(
        aten._native_batch_norm_legit_no_training.default,
        (x, weight, bias, running_mean, running_var, momentum, eps),
        {},
    )
    keep = [_run_lowered(aten.clone.default, (t,), {}, count=False) for t in (running_mean, running_var)]
    return out[0], out[1], out[2], keep[0], keep[1]


def _bernoulli_(self, p=0.5, *, generator=None):
    """`bernoulli_(p)`: uniform draws on the device, compared with p (`rand < p`), as self's dtype."""
    r = _run_lowered(
        aten.rand.default, (list(self.shape),), {"dtype": torch.float32, "device": torch.device("cpu")}, name="rand"
    )
    mask = dispatch_inner(aten.lt.Scalar, (r, p), {})
    val = _run_lowered(aten._to_copy.default, (mask,), {"dtype": self.dtype}, count=False)
    _write_into(self, val)
    _report.REPORT.op("bernoulli_.float", "device", STATE.depth == 1)
    return self


def _normal_(self, mean=0.0, std=1.0, *, generator=None):
    r = _run_lowered(
        aten.randn.default, (list(self.shape),), {"dtype": self.dtype, "device": torch.device("cpu")}, name="randn"
    )
    if std != 1.0:
        r = dispatch_inner(aten.mul.Tensor, (r, std), {})
    if mean != 0.0:
        r = dispatch_inner(aten.add.Tensor, (r, mean), {})
    _write_into(self, r if _fresh(r) else _run_lowered(aten.clone.default, (r,), {}, count=False))
    _report.REPORT.op("normal_", "device", STATE.depth == 1)
    return self


def _uniform_(self, from_=0.0, to=1.0, *, generator=None, **kw):
    from_ = kw.get("from", from_)
    r = _run_lowered(
        aten.rand.default, (list(self.shape),), {"dtype": self.dtype, "device": torch.device("cpu")}, name="rand"
    )
    if to - from_ != 1.0:
        r = dispatch_inner(aten.mul.Tensor, (r, to - from_), {})
    if from_ != 0.0:
        r = dispatch_inner(aten.add.Tensor, (r, from_), {})
    _write_into(self, r if _fresh(r) else _run_lowered(aten.clone.default, (r,), {}, count=False))
    _report.REPORT.op("uniform_", "device", STATE.depth == 1)
    return self


def _rand(shape) -> TrnsimTensor:
    """Uniform float32 draws in [0, 1) from the lowered `rand` (the device's generator)."""
    return _run_lowered(
        aten.rand.default, (list(shape),), {"dtype": torch.float32, "device": torch.device("cpu")}, name="rand"
    )


def _random_(self, from_=0, to=None, *, generator=None):
    """`random_(from, to)` (what `torch.randint` fills): `from + floor(u·(to − from))` from
    uniform draws, clamped below `to` (u·range can round up to range in float32), as self's dtype."""
    if to is None:
        # `random_()` / `random_(from, None)`: up to the dtype's maximum, beyond the float32 draws'
        # resolution (and beyond int32 for int64).
        return _unsupported(
            getattr(aten.random_, "from"), (self, from_, to), {}, "random_ without an upper bound is not supported"
        )
    u = _rand(self.shape)
    v = dispatch_inner(aten.floor.default, (dispatch_inner(aten.mul.Tensor, (u, float(to - from_)), {}),), {})
    v = dispatch_inner(aten.clamp.default, (v, None, float(to - from_ - 1)), {})
    if from_ != 0:
        v = dispatch_inner(aten.add.Tensor, (v, float(from_)), {})
    val = _run_lowered(aten._to_copy.default, (v,), {"dtype": self.dtype}, count=False)
    _write_into(self, val)
    _report.REPORT.op("random_", "device", STATE.depth == 1)
    return self


def _random_to(self, to, *, generator=None):
    return _random_(self, 0, to)


def _like_shape_dtype(x, dtype):
    return list(x.shape), (dtype if dtype is not None else x.dtype)


def _rand_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    shape, dt = _like_shape_dtype(x, dtype)
    return _run_lowered(aten.rand.default, (shape,), {"dtype": dt, "device": torch.device("cpu")}, name="rand")


def _randn_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    shape, dt = _like_shape_dtype(x, dtype)
    return _run_lowered(aten.randn.default, (shape,), {"dtype": dt, "device": torch.device("cpu")}, name="randn")


def _multinomial(probs, num_samples, replacement=False, *, generator=None):
    """`torch.multinomial` on the engines. With replacement (or one sample): inverse-CDF
    sampling, the index of the first category whose cumulative weight exceeds u·total. Without:
    the Gumbel top-k trick, the k largest `log p − log(−log u)`, which draws k distinct categories
    with the probabilities of successive draws without replacement."""
    p = probs if probs.dim() == 2 else probs.unsqueeze(0)
    b, n = p.shape
    if replacement or num_samples == 1:
        total = p.sum(-1, keepdim=True)
        u = _rand([b, num_samples]) * total
        c = torch.cumsum(p, -1)
        idx = (c.unsqueeze(1) <= u.unsqueeze(2)).sum(-1)
        idx = torch.clamp(idx, max=n - 1)
    else:
        keys = torch.log(p) - torch.log(-torch.log(_rand([b, n])))
        idx = torch.topk(keys, num_samples, dim=-1).indices
    idx = idx.to(torch.int64)
    return idx if probs.dim() == 2 else idx.squeeze(0)


def _randint_like(
    x, low_or_high, high=None, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None
):
    low, high = (0, low_or_high) if high is None else (low_or_high, high)
    shape, dt = _like_shape_dtype(x, dtype)
    return _random_(torch.empty(shape, dtype=dt, device=x.device), low, high)


_RNG_INPLACE = {
    aten.normal_.default: _normal_,
    aten.uniform_.default: _uniform_,
    aten.random_.to: _random_to,
    getattr(aten.random_, "from"): _random_,
}
_RNG_FORMS = {
    aten.rand_like.default: _rand_like,
    aten.randn_like.default: _randn_like,
    aten.multinomial.default: _multinomial,
    aten.randint_like.default: _randint_like,
    aten.randint_like.low_dtype: _randint_like,
}


# ---------------------------------------------------------------------------------------------
# complex64 ops the lowering has no complex form of, computed on the engines over the float32
# real view (docs/torch-device.md, "Dtypes")


def _conj_physical(func, args, kwargs, top):
    """conj(z) = (re, −im): the real view times (1, −1), the Vector Engine's multiply (bit-exact:
    a sign flip, −0.0 and NaN included). ``_conj`` (PyTorch's lazy conjugate *view*) is served
    the same way: the device's tensors carry no conj bit, so the result is a new tensor."""
    z = args[0]
    sign = upload(torch.tensor([1.0, -1.0]))
    prod = _run_lowered(aten.mul.Tensor, (_real_view(z), sign), {})
    _served(op_name(func), top)
    return _adopt(prod, torch.complex64, list(z.shape))


def _fft_c2c(func, args, kwargs, top):
    """``_fft_c2c`` from the lowered ``_fft_r2c``: FFT(x + iy) = FFT(x) + i·FFT(y) by linearity,
    with x, y the real and imaginary parts (each a full, not onesided, real-input transform over
    the same dims and normalisation). The inverse transform of a real input is the conjugate of
    the forward one, so ``forward=False`` combines the conjugated spectra. The combine is one
    add and one subtract per element on the engines."""
    z, dim, normalization, forward = args[:4]
    r = _real_view(z)
    x = dispatch_inner(aten.select.int, (r, -1, 0), {})
    y = dispatch_inner(aten.select.int, (r, -1, 1), {})
    fa = _real_view(dispatch_inner(aten._fft_r2c.default, (x, list(dim), normalization, False), {}))
    fb = _real_view(dispatch_inner(aten._fft_r2c.default, (y, list(dim), normalization, False), {}))
    a_re, a_im = (dispatch_inner(aten.select.int, (fa, -1, i), {}) for i in (0, 1))
    b_re, b_im = (dispatch_inner(aten.select.int, (fb, -1, i), {}) for i in (0, 1))
    if forward:  # (a_re − b_im) + i(a_im + b_re)
        re = dispatch_inner(aten.sub.Tensor, (a_re, b_im), {})
        im = dispatch_inner(aten.add.Tensor, (a_im, b_re), {})
    else:  # conj(A) + i·conj(B) = (a_re + b_im) + i(b_re − a_im)
        re = dispatch_inner(aten.add.Tensor, (a_re, b_im), {})
        im = dispatch_inner(aten.sub.Tensor, (b_re, a_im), {})
    pair = dispatch_inner(
        aten.cat.default,
        (
            [
                dispatch_inner(aten.unsqueeze.default, (re, -1), {}),
                dispatch_inner(aten.unsqueeze.default, (im, -1), {}),
            ],
            -1,
        ),
        {},
    )
    if not _is_whole(pair):
        pair = _run_lowered(aten.clone.default, (pair,), {}, count=False)
    _report.REPORT.op(op_name(func), "decomposed", top)
    return _adopt(pair, torch.complex64, list(z.shape))


def _index_real(func, args, kwargs, top):
    """``index.Tensor`` / ``index_select`` of complex64: the same indexing of the float32 real
    view (the indices address leading dims; the trailing (re, im) axis comes along), whose result
    is the complex64 result's real view (the lowering's indexing has no complex form)."""
    z = args[0]
    rest = list(args[1:])
    if func is aten.index_select.default:
        rest[0] = rest[0] % max(z.dim(), 1)  # a negative dim would count from the pair axis
    out = _call(func, (_real_view(z), *rest), kwargs)
    if not _is_whole(out):
        out = _run_lowered(aten.clone.default, (out,), {}, count=False)
    _report.REPORT.op(op_name(func), "decomposed", top)
    return _adopt(out, torch.complex64, list(out.shape[:-1]))


def _has_complex(x) -> bool:
    """Whether ``x`` (an argument, or lists / tuples / dicts of them) holds a complex number or
    a complex tensor."""
    if isinstance(x, (list, tuple)):
        return any(_has_complex(y) for y in x)
    if isinstance(x, dict):
        return any(_has_complex(y) for y in x.values())
    return isinstance(x, complex) or (isinstance(x, torch.Tensor) and x.dtype.is_complex)


def _complex_result(func, args, kwargs) -> bool:
    if not (_has_complex(args) or _has_complex(kwargs)):
        return False  # the common case, without a meta call
    meta = _meta_outputs(func, args, kwargs)
    return isinstance(meta, torch.Tensor) and meta.dtype == torch.complex64


def _complex_operand(x) -> TrnsimTensor:
    """An operand of a complex64 op as a complex64 device tensor: a real device tensor converted
    on the device (the lowered ``_to_copy``: ``(x, 0)``), a wrapped CPU scalar or a Python number
    moved as complex64 (as a wrapped number takes the op's dtype)."""
    if isinstance(x, TrnsimTensor):
        if x.dtype == torch.complex64:
            return x
        return _call(aten._to_copy.default, (x,), {"dtype": torch.complex64})
    if isinstance(x, torch.Tensor):
        if x.device.type != "cpu" or x.dim() != 0:
            raise TrnsimError(
                f"trnsim: a {x.device.type} tensor of shape {tuple(x.shape)} beside trnsim tensors; "
                f"move it with .to('{DEVICE_NAME}')"
            )
        return upload(x.to(torch.complex64))
    return upload(torch.tensor(complex(x), dtype=torch.complex64))


def _parts(z: TrnsimTensor) -> tuple[TrnsimTensor, TrnsimTensor]:
    """The real and imaginary parts of a complex64 tensor: float32 views of its memory."""
    r = _real_view(z)
    return dispatch_inner(aten.select.int, (r, -1, 0), {}), dispatch_inner(aten.select.int, (r, -1, 1), {})


def _from_parts(re: TrnsimTensor, im: TrnsimTensor) -> TrnsimTensor:
    """A complex64 tensor from float32 parts of one shape: interleaved on the device (``cat`` of
    the parts along a new last axis), the result re-labelled as complex64."""
    pair = dispatch_inner(
        aten.cat.default,
        (
            [
                dispatch_inner(aten.unsqueeze.default, (re, -1), {}),
                dispatch_inner(aten.unsqueeze.default, (im, -1), {}),
            ],
            -1,
        ),
        {},
    )
    if not _is_whole(pair):
        pair = _run_lowered(aten.clone.default, (pair,), {}, count=False)
    return _adopt(pair, torch.complex64, list(pair.shape[:-1]))


def _on_real_view(out: TrnsimTensor) -> TrnsimTensor:
    if not _is_whole(out):
        out = _run_lowered(aten.clone.default, (out,), {}, count=False)
    return _adopt(out, torch.complex64, list(out.shape[:-1]))


def _complex_add(func, args, kwargs, top):
    """``add`` / ``sub`` of complex64: the same op on the operands' float32 real views (a real
    ``alpha`` scales both parts alike; the (re, im) axis broadcasts with the tensors)."""
    alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
    if isinstance(alpha, complex):
        if alpha.imag:
            return _unsupported(func, args, kwargs, "a complex alpha")
        alpha = alpha.real
    a, b = _complex_operand(args[0]), _complex_operand(args[1])
    real_op = aten.add.Tensor if func is aten.add.Tensor else aten.sub.Tensor
    out = _call(real_op, (_real_view(a), _real_view(b)), {"alpha": alpha} if alpha != 1 else {})
    _report.REPORT.op(op_name(func), "decomposed", top)
    return _on_real_view(out)


def _complex_mul(func, args, kwargs, top):
    """``mul`` of complex64: ``(ar·br − ai·bi) + i(ar·bi + ai·br)`` from the parts, each product
    and sum one float32 engine op rounded once, as PyTorch's scalar complex multiply. A real
    operand is first made complex (``(x, 0)``), as PyTorch promotes it."""
    a, b = _complex_operand(args[0]), _complex_operand(args[1])
    ar, ai = _parts(a)
    br, bi = _parts(b)

    def mul(x, y):
        return dispatch_inner(aten.mul.Tensor, (x, y), {})

    re = dispatch_inner(aten.sub.Tensor, (mul(ar, br), mul(ai, bi)), {})
    im = dispatch_inner(aten.add.Tensor, (mul(ar, bi), mul(ai, br)), {})
    _report.REPORT.op(op_name(func), "decomposed", top)
    return _from_parts(re, im)


def _complex_neg(func, args, kwargs, top):
    """``neg`` of complex64: both parts negated (the float32 real view's ``neg``)."""
    out = _call(aten.neg.default, (_real_view(_complex_operand(args[0])),), {})
    _report.REPORT.op(op_name(func), "decomposed", top)
    return _on_real_view(out)


#: complex64 arithmetic, chosen when PyTorch's meta kernel says the result is complex64.
_COMPLEX_ARITH = {
    aten.add.Tensor: _complex_add,
    aten.sub.Tensor: _complex_add,
    aten.mul.Tensor: _complex_mul,
    aten.mul.Scalar: _complex_mul,
    aten.neg.default: _complex_neg,
}


def _index_put_real(func, args, kwargs, top):
    """``index_put`` into complex64: the same ``index_put`` on the float32 real views of the
    target and the values (the indices address leading dims; accumulation adds both parts)."""
    z, indices, values = args[0], args[1], _complex_operand(args[2])
    rest = list(args[3:])
    out = _call(func, (_real_view(z), indices, _real_view(values), *rest), kwargs)
    _report.REPORT.op(op_name(func), "decomposed", top)
    return _on_real_view(out)


def _fastpath_mask(scores, mask, mask_type):
    """Applies a fast-path attention mask to (B, H, L, S) scores as PyTorch's `_masked_softmax`
    does: boolean True masks a key out (type 0: (L, S), type 1: (B, S) key padding, type 2:
    broadcastable to (B, H, L, S)); a floating mask is added."""
    b, _, _, s = scores.shape
    if mask_type == 1:
        mask = mask.view(b, 1, 1, s)
    if mask.dtype == torch.bool:
        probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        # A row whose keys are all masked is 0 in `_masked_softmax` (softmax alone gives NaN).
        return probs.masked_fill(mask, 0.0)
    return torch.softmax(scores + mask, dim=-1)


def _native_mha(
    query,
    key,
    value,
    embed_dim,
    num_head,
    qkv_weight,
    qkv_bias,
    proj_weight,
    proj_bias,
    mask=None,
    need_weights=True,
    average_attn_weights=True,
    mask_type=None,
):
    """`aten::_native_multi_head_attention` (batch-first (B, L, E) inputs) as lowered ops."""
    b, lq, e = query.shape
    s = key.shape[1]
    d = embed_dim // num_head
    wq, wk, wv = qkv_weight.chunk(3)
    bq, bk, bv = qkv_bias.chunk(3)
    # The CPU kernel scales q by 1/sqrt(d) after the bias, before q·kᵀ.
    q = torch.nn.functional.linear(query, wq, bq).view(b, lq, num_head, d).transpose(1, 2) * (1.0 / math.sqrt(d))
    k = torch.nn.functional.linear(key, wk, bk).view(b, s, num_head, d).transpose(1, 2)
    v = torch.nn.functional.linear(value, wv, bv).view(b, s, num_head, d).transpose(1, 2)
    scores = torch.matmul(q, k.transpose(-2, -1))
    if mask is not None:
        probs = _fastpath_mask(scores, mask, mask_type)
    else:
        probs = torch.softmax(scores, dim=-1)
    attn = torch.matmul(probs, v).transpose(1, 2).reshape(b, lq, e)
    out = torch.nn.functional.linear(attn, proj_weight, proj_bias)
    if not need_weights:
        return out, torch.empty(0, dtype=out.dtype, device=out.device)
    return out, (probs.mean(dim=1) if average_attn_weights else probs)


def _transformer_encoder_layer_fwd(
    src,
    embed_dim,
    num_heads,
    qkv_weight,
    qkv_bias,
    proj_weight,
    proj_bias,
    use_gelu,
    norm_first,
    eps,
    norm_weight_1,
    norm_bias_1,
    norm_weight_2,
    norm_bias_2,
    ffn_weight_1,
    ffn_bias_1,
    ffn_weight_2,
    ffn_bias_2,
    mask=None,
    mask_type=None,
):
    """`aten::_transformer_encoder_layer_fwd`: `nn.TransformerEncoderLayer.forward`'s math
    (dropout is off in eval mode) as lowered ops."""
    F = torch.nn.functional

    def sa(x):
        return _native_mha(
            x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, mask, False, True, mask_type
        )[0]

    def ff(x):
        h = F.linear(x, ffn_weight_1, ffn_bias_1)
        return F.linear(F.gelu(h) if use_gelu else F.relu(h), ffn_weight_2, ffn_bias_2)

    ln1 = lambda x: F.layer_norm(x, (embed_dim,), norm_weight_1, norm_bias_1, eps)
    ln2 = lambda x: F.layer_norm(x, (embed_dim,), norm_weight_2, norm_bias_2, eps)
    if norm_first:
        x = src + sa(ln1(src))
        return x + ff(ln2(x))
    x = ln1(src + sa(src))
    return ln2(x + ff(x))


def _fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """`aten::_thnn_fused_lstm_cell` (what `nn.LSTM` calls per step on a non-CPU device): the
    cell's math as lowered ops. The workspace is the activated gates (i, f, g, o), which
    `_fused_lstm_cell_backward` reads."""
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias
    if hidden_bias is not None:
        gates = gates + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    cy = f * cx + i * g
    hy = o * torch.tanh(cy)
    return hy, cy, torch.cat([i, f, g, o], 1)


def _fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """`aten::_thnn_fused_lstm_cell_backward_impl`: gradients of the gates (pre-activation),
    of cx and of the bias, from the workspace `_fused_lstm_cell` saved."""
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = torch.tanh(cy)
    d_cy = grad_cy if grad_cy is not None else torch.zeros_like(cy)
    if grad_hy is not None:
        d_cy = d_cy + grad_hy * o * (1 - tanh_cy * tanh_cy)
        d_o = grad_hy * tanh_cy * o * (1 - o)
    else:
        d_o = torch.zeros_like(o)
    d_i = d_cy * g * i * (1 - i)
    d_f = d_cy * cx * f * (1 - f)
    d_g = d_cy * i * (1 - g * g)
    grad_gates = torch.cat([d_i, d_f, d_g, d_o], 1)
    return grad_gates, d_cy * f, (grad_gates.sum(0) if has_bias else None)


def _fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """`aten::_thnn_fused_gru_cell` (`nn.GRU`'s step on a non-CPU device) as lowered ops. The
    workspace is (r, z, n, hn, hx), the layout PyTorch's CUDA kernel uses."""
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    ir, ii, in_ = input_gates.chunk(3, 1)
    hr, hi, hn = hidden_gates.chunk(3, 1)
    r = torch.sigmoid(ir + hr)
    z = torch.sigmoid(ii + hi)
    n = torch.tanh(in_ + r * hn)
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hn, hx], 1)


def _fused_gru_cell_backward(grad_hy, workspace, has_bias):
    """`aten::_thnn_fused_gru_cell_backward` from `_fused_gru_cell`'s workspace."""
    r, z, n, hn, hx = workspace.chunk(5, 1)
    d_n = grad_hy * (1 - z) * (1 - n * n)
    d_z = grad_hy * (hx - n) * z * (1 - z)
    d_r = d_n * hn * r * (1 - r)
    grad_input = torch.cat([d_r, d_z, d_n], 1)
    grad_hidden = torch.cat([d_r, d_z, d_n * r], 1)
    if has_bias:
        return grad_input, grad_hidden, grad_hy * z, grad_input.sum(0), grad_hidden.sum(0)
    return grad_input, grad_hidden, grad_hy * z, None, None


def _pack_padded_sequence(input, lengths, batch_first):
    """`aten::_pack_padded_sequence`: the rows of each time step's running sequences, gathered on
    the device. `lengths` is a CPU tensor by PyTorch's contract, and so is the `batch_sizes`
    output (the count of sequences longer than each step): both are metadata."""
    lens = [int(v) for v in lengths.tolist()]
    if not lens or lens[-1] <= 0 or any(a < b for a, b in zip(lens, lens[1:])):
        raise ValueError(
            "`lengths` must be positive and sorted in decreasing order "
            "(pack_padded_sequence with enforce_sorted=False sorts them)"
        )
    x = input.transpose(0, 1) if batch_first else input
    b = x.shape[1]
    batch_sizes = [sum(1 for n in lens if n > t) for t in range(lens[0])]
    rows = [t * b + i for t, bs in enumerate(batch_sizes) for i in range(bs)]
    flat = x.reshape(x.shape[0] * b, *x.shape[2:])
    data = torch.index_select(flat, 0, torch.tensor(rows, dtype=torch.int64, device=input.device))
    return data, torch.tensor(batch_sizes, dtype=torch.int64)


def _weight_norm_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    """`aten::_weight_norm_interface_backward` (`weight_norm` on a non-CPU device): with
    w = g·v/‖v‖ (norms over every dim but `dim`), grad_g = Σ(grad_w·v)/‖v‖ and
    grad_v = (g/‖v‖)·(grad_w − v·Σ(grad_w·v)/‖v‖²)."""
    dims = [i for i in range(saved_v.dim()) if i != dim] if 0 <= dim < saved_v.dim() else list(range(saved_v.dim()))
    s = torch.sum(grad_w * saved_v, dims, keepdim=True).reshape(saved_norms.shape)
    grad_g = (s / saved_norms).reshape(saved_g.shape)
    grad_v = (saved_g / saved_norms) * (grad_w - saved_v * (s / (saved_norms * saved_norms)))
    return grad_v, grad_g


_FASTPATH_FORMS = {
    aten._native_multi_head_attention.default: _native_mha,
    aten._transformer_encoder_layer_fwd.default: _transformer_encoder_layer_fwd,
    aten._thnn_fused_lstm_cell.default: _fused_lstm_cell,
    aten._pack_padded_sequence.default: _pack_padded_sequence,
    aten._weight_norm_interface_backward.default: _weight_norm_backward,
    # `torch.distributions` argument validation (on by default).
    aten._is_all_true.default: lambda x: torch.all(x),
    aten._is_any_true.default: lambda x: torch.any(x),
    aten._thnn_fused_lstm_cell_backward_impl.default: _fused_lstm_cell_backward,
    aten._thnn_fused_gru_cell.default: _fused_gru_cell,
    aten._thnn_fused_gru_cell_backward.default: _fused_gru_cell_backward,
}

_COMPLEX_FORMS = {
    aten.index_put.default: _index_put_real,
    aten.index.Tensor: _index_real,
    aten.index_select.default: _index_real,
    aten._conj.default: _conj_physical,
    aten._conj_physical.default: _conj_physical,
    aten.conj_physical.default: _conj_physical,
    aten._fft_c2c.default: _fft_c2c,
}


# ---------------------------------------------------------------------------------------------
# Check mode


def _checked(func, args, kwargs):
    """Runs the call on the device and on the CPU (same inputs) and records the drift."""
    name = op_name(func)
    flat, _ = tree_flatten((args, kwargs))
    compare = (
        not func.is_view
        and name not in _RANDOM
        and name not in _UNINITIALISED
        and func not in _RNG_INPLACE
        and func not in _RNG_FORMS
        and any(isinstance(x, TrnsimTensor) for x in flat)
        and func not in (aten._to_copy.default, aten.copy_.default)
        and name != "_local_scalar_dense"
    )
    cpu_args = cpu_kwargs = None
    if compare:
        with _report.REPORT.paused():
            cpu_args = tree_map(lambda x: download(x) if isinstance(x, TrnsimTensor) else x, args)
            cpu_kwargs = tree_map(lambda x: download(x) if isinstance(x, TrnsimTensor) else x, kwargs)
            cpu_kwargs = {k: (torch.device("cpu") if isinstance(v, torch.device) else v) for k, v in cpu_kwargs.items()}
    prev_served, STATE.served = STATE.served, []
    try:
        out = _dispatch(func, args, kwargs, True)
        served = STATE.served
    finally:
        STATE.served = prev_served
    if compare:
        # The backends (and NKI kernels) that computed this call, so drift names who drifted.
        backends = sorted({b for _, b, _ in served})
        kernels = sorted({k for _, _, ks in served for k in ks})
        with _report.REPORT.paused():
            if func in _FASTPATH_FORMS and not torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CPU"):
                # PyTorch has this fused op only for CUDA (`_thnn_fused_lstm_cell`, …): the CPU
                # reference is the same math in PyTorch's CPU ops.
                expected = _FASTPATH_FORMS[func](*cpu_args, **cpu_kwargs)
            else:
                expected = func(*cpu_args, **cpu_kwargs)
            got_flat, _ = tree_flatten(out)
            exp_flat, _ = tree_flatten(expected)
            for g, e in zip(got_flat, exp_flat):
                if isinstance(g, TrnsimTensor) and isinstance(e, torch.Tensor):
                    _report.REPORT.drift(name, download(g), e, _call_site(), backends=backends, kernels=kernels)
    return out


@contextlib.contextmanager
def checking(enabled: bool = True):
    prev = STATE.checking
    STATE.checking = enabled
    try:
        yield _report.REPORT
    finally:
        STATE.checking = prev
