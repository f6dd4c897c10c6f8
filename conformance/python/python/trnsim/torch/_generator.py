"""``torch.Generator(device="trnsim")``: a generator object for the device (docs/torch-device.md,
"Random numbers").

PyTorch builds a device's generator through the PrivateUse1 hooks' ``getNewGenerator``, which
torch 2.15's Python hooks interface (``torch._C._acc.PrivateUse1Hooks``) does not offer, so
``torch.Generator(device="trnsim")`` fails with PyTorch's "You should register
`PrivateUse1HooksInterface`". On import the device installs ``torch.Generator`` as a subclass of
PyTorch's own class that serves that one case and hands every other device to PyTorch:

* ``torch.Generator(device="trnsim")`` is a :class:`DeviceGenerator`: a PyTorch generator whose
  state (an mt19937 on the host, like every generator's bookkeeping) is the device generator's
  state. ``manual_seed``, ``seed``, ``initial_seed``, ``get_state``/``set_state`` and pickling
  are PyTorch's; ``.device`` is the device.
* ``isinstance(g, torch.Generator)`` holds for every PyTorch generator, as before.

A random op given ``generator=g`` draws its per-call seed (the 24-bit seed of the lowered RNG op)
from ``g`` instead of from the device's global generator, so the same generator seed gives the
same values whatever else ran, and ``g`` advances. The values themselves are the engines' (a
device generator does not reproduce a CPU generator's numbers, as CUDA's does not).
"""

from __future__ import annotations

import torch

_Base = torch._C.Generator
_installed = False


class _GeneratorMeta(type(_Base)):  # type: ignore[misc]
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, _Base)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _Base)


def _device_name() -> str:
    from . import _device

    return _device.DEVICE_NAME


class DeviceGenerator(_Base):
    """A generator for the device (``torch.Generator(device="trnsim")``)."""

    def __new__(cls, device: object = None):
        return _Base.__new__(cls, "cpu")

    def __init__(self, device: object = None) -> None:
        pass

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device(_device_name(), 0)

    def __repr__(self) -> str:
        return f"<trnsim generator on {self.device}, initial seed {self.initial_seed()}>"

    def __reduce__(self):
        return (_rebuild, (self.get_state(),))


def _rebuild(state: torch.Tensor) -> DeviceGenerator:
    g = DeviceGenerator()
    g.set_state(state)
    return g


class Generator(_Base, metaclass=_GeneratorMeta):
    """``torch.Generator`` with the device: ``Generator(device="trnsim")`` is a
    :class:`DeviceGenerator`; any other device is PyTorch's generator, unchanged."""

    def __new__(cls, device: object = "cpu"):
        d = torch.device(device) if device is not None else torch.device("cpu")
        if d.type == _device_name():
            from . import _device

            _device._check_device_index(d)
            return DeviceGenerator()
        return _Base(d)


def install() -> None:
    """Makes ``torch.Generator`` the class above (idempotent)."""
    global _installed
    if _installed:
        return
    torch.Generator = Generator  # type: ignore[misc]
    _installed = True


def seed_from(gen: _Base) -> int:
    """The next 24-bit per-call seed drawn from ``gen`` (it advances)."""
    return int(torch.randint(0, 1 << 24, (1,), generator=gen, device="cpu"))
