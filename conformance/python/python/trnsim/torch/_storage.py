"""``Tensor.untyped_storage()`` and ``Tensor.data_ptr()`` on the ``trnsim`` device.

A device tensor and its views share one session tensor (``_device._Storage``). Its untyped
storage here is a small object with what storage-aware code uses: ``size()``/``nbytes()`` in
bytes of the tensor's PyTorch dtype, ``data_ptr()``, ``device``, and ``resize_``:

* ``resize_(0)`` frees the device memory (FSDP2 frees unsharded parameters this way after the
  forward). Every tensor on the storage keeps its sizes; reading one before the storage is
  allocated again fails, naming the freed storage.
* ``resize_(n)`` on a freed storage, with ``n`` its former size, allocates fresh device memory
  for it (FSDP2's all-gather then writes all of it). Fresh memory holds zeros here; on hardware
  its contents are undefined, so no correct program reads it before writing.
* Any other size change (growing or shrinking live contents) is refused with a clear error.

``data_ptr()`` is an address in trnsim's own device address space: each storage gets a distinct,
512-byte aligned range that is never reused in the process, so two tensors share memory exactly
when their storages' ``data_ptr()`` agree (what PyTorch code compares it for). It is not a host
address and nothing reads through it."""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import torch

_BASE = 1 << 32
_ALIGN = 512
_next = [_BASE]
_ADDR: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_FREED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_freed_names = itertools.count(1)


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _nbytes(st) -> int:
    return 0 if st in _FREED else st.numel * _itemsize(st.dtype)


def _address(st) -> int:
    a = _ADDR.get(st)
    if a is None:
        a = _next[0]
        size = max(st.numel * _itemsize(st.dtype), 1)
        _next[0] += -(-size // _ALIGN) * _ALIGN
        _ADDR[st] = a
    return a


class TrnsimUntypedStorage:
    """The untyped storage of a ``trnsim`` tensor (see the module's docstring)."""

    def __init__(self, st, real) -> None:
        self._st = st
        # the wrapper tensor's own (dataless) storage: what PyTorch's internals hold weak
        # references to (AOTAutograd's alias analysis); every other attribute comes from it
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    @property
    def device(self) -> torch.device:
        from ._device import DEVICE_NAME

        return torch.device(DEVICE_NAME, 0)

    def size(self) -> int:
        return _nbytes(self._st)

    nbytes = size

    def __len__(self) -> int:
        return _nbytes(self._st)

    def element_size(self) -> int:
        return 1

    def data_ptr(self) -> int:
        return 0 if self._st in _FREED else _address(self._st)

    def resize_(self, nbytes: int) -> TrnsimUntypedStorage:
        from . import _device

        st = self._st
        nbytes = int(nbytes)
        if nbytes < 0:
            raise RuntimeError(f"trnsim: untyped_storage().resize_({nbytes}): a size is at least 0")
        if st in _FREED:
            full = _FREED[st]
            if nbytes == 0:
                return self
            if nbytes != full:
                raise RuntimeError(
                    f"trnsim: untyped_storage().resize_({nbytes}) on a freed storage of {full} bytes: trnsim "
                    "allocates a freed storage again at its former size only"
                )
            dev = _device._device_dtype_name(st.dtype)
            data = bytes(_device_elems(st) * _session_itemsize(dev))
            name = _device._new_name()
            _device.STATE.session.put(name, (dev, st.dev_shape(), data))
            st.name = name
            del _FREED[st]
            return self
        full = _nbytes(st)
        if nbytes == full:
            return self
        if nbytes != 0:
            raise RuntimeError(
                f"trnsim: untyped_storage().resize_({nbytes}) on a live storage of {full} bytes: trnsim frees a "
                "storage (resize_(0)) and allocates it again at its size; it does not grow or shrink live contents"
            )
        if not st.owned:
            raise RuntimeError("trnsim: untyped_storage().resize_(0) on a second handle of another storage")
        old = st.name
        st.name = f"freed-storage-{next(_freed_names)}(resize_(0): allocate it again before use)"
        _FREED[st] = full
        if old is not None:
            _device.STATE.session.delete(old)
        return self

    def __repr__(self) -> str:
        state = "freed" if self._st in _FREED else f"{_nbytes(self._st)} bytes"
        return f"<trnsim untyped storage {state} at {self.data_ptr():#x}>"


def _device_elems(st) -> int:
    n = 1
    for s in st.dev_shape():
        n *= s
    return n


def _session_itemsize(dev: str) -> int:
    from ._device import _SESSION_TORCH

    return torch.empty((), dtype=_SESSION_TORCH[dev]).element_size()


def untyped_storage(t: Any):
    real = torch.Tensor.untyped_storage(t)
    if t._trn is None:
        return real  # a traced tensor (no data): no device storage behind it
    return TrnsimUntypedStorage(t._trn, real)


def data_ptr(t: Any) -> int:
    st = t._trn
    if st is None or st in _FREED:
        return 0
    return _address(st) + t.storage_offset() * t.element_size()
