"""Device tensors handed to an NKI backend module's wrapper in place of NumPy arrays, so that its
kernels run in the device's session with no host copy (docs/torch-device.md, "Backends").

A :class:`DevArray` is a ``trnsim.nki.DeviceTensor`` (a kernel given one runs in its session,
reading it there and leaving its outputs there) over a device tensor, with the part of the NumPy
array interface wrappers use for argument plumbing: ``shape``/``ndim``/``size``/``dtype``,
``reshape``, ``T``/``transpose``, ``astype``, ``min``/``max``, indexing, and the NumPy functions
``ascontiguousarray``, ``broadcast_to``, ``transpose``, ``reshape``. Each is the device's own op
(a view, or a lowered copy / conversion). Anything else converts the array to NumPy (a host copy,
counted in the report), exactly as NumPy would with any array-like, so a wrapper always gets the
values it asks for.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import trnsim
import trnsim.nki

from . import _backend, _device, _report


class HostPath(Exception):
    """The call needs the host-array convention (a kernel that writes a parameter, an int64
    kernel argument): the device reruns the wrapper with NumPy arrays."""


class _Session(trnsim.Session):
    """The device's session as a ``trnsim.Session`` for ``trnsim.nki`` (same native session)."""

    def __init__(self, native) -> None:
        self._native = native


_SESSION: list[_Session] = []


def _session() -> _Session:
    # One adapter object: trnsim.nki requires every device argument of a kernel call to name the
    # same session object.
    if not _SESSION or _SESSION[0]._native is not _device.STATE.session:
        _SESSION[:] = [_Session(_device.STATE.session)]
    return _SESSION[0]


_TORCH_OF_NP = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}


def torch_dtype(dt) -> torch.dtype:
    name = str(np.dtype(dt))
    if name not in _TORCH_OF_NP:
        raise HostPath(f"dtype {name}")
    return _TORCH_OF_NP[name]


class DevArray(trnsim.nki.DeviceTensor):
    __array_priority__ = 1000

    def __init__(self, t: torch.Tensor) -> None:  # no DeviceTensor.__init__: the name is lazy
        self.t = t
        self.session = _session()
        self.shape = tuple(int(s) for s in t.shape)
        self.dtype = _backend.numpy_dtype(t.dtype)
        self._st = None

    # -- as a kernel argument ----------------------------------------------------------------
    @property
    def name(self) -> str:
        """The session tensor holding exactly these elements, contiguous (gathered on the device
        when the tensor is a view)."""
        if self._st is None:
            self._st = _device._contiguous_storage(self.t)
        return self._st.name

    # -- the NumPy array interface wrappers use --------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<trnsim.torch DevArray {list(self.shape)} {self.dtype}>"

    def reshape(self, *shape, order="C"):
        if order != "C":
            raise HostPath("reshape order")
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return DevArray(self.t.reshape([int(s) for s in shape]))

    @property
    def T(self):  # NumPy's name
        return DevArray(self.t.permute(list(reversed(range(self.t.dim())))))

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        if not axes:
            return self.T
        return DevArray(self.t.permute([int(a) for a in axes]))

    def astype(self, dtype, copy=True):
        dt = torch_dtype(dtype)
        if dt == self.t.dtype and not copy:
            return self
        return DevArray(self.t.to(dt) if dt != self.t.dtype else self.t.clone())

    def view(self, dtype=None):
        dt = torch_dtype(dtype)
        if dt == self.t.dtype:
            return DevArray(self.t)
        if self.t.dtype == torch.bool and dt == torch.uint8:
            return DevArray(self.t.to(torch.uint8))  # the same bytes: a bool is one byte, 0 or 1
        raise HostPath(f"view as {dtype}")

    def copy(self, order="C"):
        return DevArray(self.t.clone())

    def min(self):
        return self._extreme(torch.ops.aten.amin.default)

    def max(self):
        return self._extreme(torch.ops.aten.amax.default)

    def _extreme(self, op):
        """A reduction the wrapper decides on (e.g. whether int64 values fit int32): reduced on
        the device by the lowering (not the module: its own wrapper may ask the same question),
        and the one value read on the host (counted)."""
        if self.size == 0:
            raise ValueError("zero-size array to reduction operation which has no identity")
        r = _device._run_lowered(op, (self.t, list(range(self.t.dim()))), {}, count=False)
        _report.REPORT.transfer("nki_module_device_to_host")
        v = _device.download(r).item()
        return self.dtype.type(v)

    def __getitem__(self, key):
        if isinstance(key, (DevArray, np.ndarray, list)):
            raise HostPath("advanced indexing")
        return DevArray(self.t[key])

    def __array__(self, dtype=None, copy=None):
        """A host copy (what NumPy asks of any array-like it needs values of)."""
        _report.REPORT.transfer("nki_module_device_to_host")
        a = _backend.numpy_of(_device.download(self.t))
        return a.astype(dtype) if dtype is not None else a

    def __array_function__(self, func, types, args, kwargs):
        handler = _FUNCTIONS.get(func)
        if handler is not None:
            return handler(*args, **kwargs)
        # Any other NumPy function: on host copies, as NumPy itself would do with an array-like.
        return func(*_host(args), **_host(kwargs))


def _host(x: Any) -> Any:
    if isinstance(x, DevArray):
        return x.__array__()
    if isinstance(x, (list, tuple)):
        return type(x)(_host(v) for v in x)
    if isinstance(x, dict):
        return {k: _host(v) for k, v in x.items()}
    return x


def _ascontiguousarray(a, dtype=None, **kw):
    if not isinstance(a, DevArray):
        return _ORIGINAL.get("ascontiguousarray", np.ascontiguousarray)(_host(a), dtype=dtype, **kw)
    out = a.astype(dtype, copy=False) if dtype is not None else a
    if out.ndim == 0:
        out = out.reshape(1)  # NumPy's ascontiguousarray makes a 0-d array 1-d
    return out if out.t.is_contiguous() else DevArray(out.t.contiguous())


def _broadcast_to(a, shape, subok=False):
    if not isinstance(a, DevArray):
        return np.broadcast_to(_host(a), shape, subok=subok)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return DevArray(a.t.expand(list(shape)))


def _transpose(a, axes=None):
    if not isinstance(a, DevArray):
        return np.transpose(_host(a), axes)
    return a.transpose(*(() if axes is None else [int(x) for x in axes]))


def _reshape(a, *args, **kwargs):
    if not isinstance(a, DevArray):
        return np.reshape(_host(a), *args, **kwargs)
    shape = kwargs.get("newshape", kwargs.get("shape", args[0] if args else None))
    return a.reshape(shape)


_FUNCTIONS = {
    np.ascontiguousarray: _ascontiguousarray,
    np.broadcast_to: _broadcast_to,
    np.transpose: _transpose,
    np.reshape: _reshape,
    np.shape: lambda a: a.shape,
    np.ndim: lambda a: a.ndim,
    np.size: lambda a, axis=None: a.size if axis is None else a.shape[axis],
}


# ---------------------------------------------------------------------------------------------
# Running a wrapper on device arrays


def _coercion(original):
    """``numpy.asarray`` and friends while a wrapper runs: a DevArray passes through unchanged
    (these C functions dispatch only on ``like=``, never on their argument, so without this a
    wrapper's ``np.asarray(kernel(...))`` would copy every result to the host)."""

    def coerce(a, dtype=None, *args, **kwargs):
        if isinstance(a, DevArray) and not args and not kwargs.get("like"):
            if original is np.ascontiguousarray:
                return _ascontiguousarray(a, dtype)
            return a.astype(dtype, copy=False) if dtype is not None else a
        return original(a, dtype, *args, **kwargs)

    return coerce


_COERCIONS = ("asarray", "asanyarray", "ascontiguousarray")


class _numpy_passes_devarrays:  # used as a context manager
    def __enter__(self):
        self.saved = {n: getattr(np, n) for n in _COERCIONS}
        for n, f in self.saved.items():
            setattr(np, n, _coercion(f))
        # the handlers reach the real functions (set once: a nested wrapper call, e.g. a module's
        # amax inside another wrapper's `a.max()`, saves the already patched ones)
        for n, f in self.saved.items():
            _ORIGINAL.setdefault(n, f)

    def __exit__(self, *exc):
        for n, f in self.saved.items():
            setattr(np, n, f)
        return False


_ORIGINAL: dict[str, Any] = {}


def _device_call(kernel, args, kwargs, runs):
    """A kernel call with device arrays: traced by trnsim.nki and run in the device's session on
    the arrays' session tensors; outputs stay there, as DevArrays."""
    flat = list(args) + list(kwargs.values())
    if not any(isinstance(a, DevArray) for a in flat):
        return _backend._host_call(kernel, args, kwargs, runs)
    if any(isinstance(a, DevArray) and a.t.dtype == torch.int64 for a in flat):
        raise HostPath("an int64 kernel argument (the device stores int64 as int32)")
    sess = _device.STATE.session
    before = set(sess.names())
    out = kernel(*args, **kwargs)
    kr = trnsim.nki.last_run()
    outs = out if isinstance(out, tuple) else (out,) if out is not None else ()
    keep = {o.name for o in outs if isinstance(o, trnsim.nki.DeviceTensor)}
    # Host constants the front-end put for this run (and anything else it left) are freed.
    for n in set(sess.names()) - before - keep:
        sess.delete(n)
    if kr is not None and kr.inout:
        for n in keep:
            sess.delete(n)
        raise HostPath("a kernel that writes its parameter in place")
    runs.append(_backend.last_stats())

    def adopt(o):
        if not isinstance(o, trnsim.nki.DeviceTensor):
            return o
        dev, shape = sess.info(o.name)
        st = _device._Storage(o.name, _device._SESSION_TORCH[dev], list(shape))
        return DevArray(_device.TrnsimTensor(st, st.shape))

    res = tuple(adopt(o) for o in outs)
    return None if out is None else res if isinstance(out, tuple) else res[0]


def run_on_device(mod: _backend.NkiModule, op: str, args: list, kwargs: dict):
    """The module's wrapper on DevArrays (tensors) and Python values; its kernels run in the
    device's session. Raises Declined, HostPath, or the wrapper's own error."""
    with _numpy_passes_devarrays():
        return mod.run(op, args, kwargs, call=_device_call, raw=True, target=_device.STATE.target)
