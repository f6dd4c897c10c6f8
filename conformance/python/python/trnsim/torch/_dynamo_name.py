"""``torch.compile(backend="neuron")`` with the ``neuron`` opt-in (trnsim.neuron; docs/torch-device.md,
"TorchNeuron's name"): the device's TorchDynamo backend (docs/compile.md) under TorchNeuron's name.

Registering a Dynamo backend means importing TorchDynamo's registry, which imports TorchDynamo
(about 4 s here). The opt-in runs inside ``import torch`` (the autoload), where importing
TorchDynamo from a half-initialised torch is not something to rely on, and a process that only
imports torch should not pay for it. So the name is registered when the registry module is first
imported (by ``torch.compile``, or by PyTorch code the device's first ops reach) through an import
hook that runs once and removes itself. Without the opt-in nothing is hooked, and the backend is
only ``trnsim`` (the ``torch_dynamo_backends`` entry point).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any

REGISTRY = "torch._dynamo.backends.registry"


def _register(registry: Any, name: str) -> None:
    from . import _compile

    if name not in registry._COMPILER_FNS:
        registry.register_backend(compiler_fn=_compile.backend, name=name)


class _Loader(importlib.abc.Loader):
    """The registry's own loader, then the registration (everything else is the inner loader's)."""

    def __init__(self, inner: Any, name: str) -> None:
        self._inner, self._name = inner, name

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module) -> None:
        self._inner.exec_module(module)
        _register(module, self._name)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, name: str) -> None:
        self._name = name

    def find_spec(self, fullname, path, target=None):
        if fullname != REGISTRY:
            return None
        sys.meta_path.remove(self)  # once; the real finders locate the module
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self._name)
        return spec


def register(name: str) -> None:
    """Makes ``torch.compile(backend=name)`` the device's backend (idempotent)."""
    registry = sys.modules.get(REGISTRY)
    if registry is not None:
        _register(registry, name)
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(name))
