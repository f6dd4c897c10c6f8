"""A ``torch_neuronx`` stand-in for scripts that import it, installed only with the ``neuron``
opt-in (trnsim.neuron; docs/torch-device.md, "TorchNeuron's name").

TorchNeuron's ``import torch_neuronx`` registers the ``neuron`` device; here the opt-in has
registered trnsim's device under that name already, so the import succeeds and does that much.
The stand-in provides no other name: TorchNeuron's own functions (its NKI registration, memory
tools, …) are not imitated, and asking for one raises an ``AttributeError`` that says so rather
than returning something that only looks like it.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types

NAME = "torch_neuronx"

_DOC = (
    "trnsim's stand-in for torch_neuronx: importing it means the `neuron` device is trnsim's simulated "
    "NeuronCore (registered by the TRNSIM_AS_NEURON opt-in). It provides no other name."
)


def _getattr(attr: str):
    if attr.startswith("__") and attr.endswith("__"):
        raise AttributeError(attr)
    raise AttributeError(
        f"torch_neuronx.{attr}: trnsim's torch_neuronx stand-in provides only the `neuron` device "
        "registration (the TRNSIM_AS_NEURON opt-in), not TorchNeuron's own functions; "
        'see docs/torch-device.md, "TorchNeuron\'s name"'
    )


def install() -> types.ModuleType:
    """Makes ``import torch_neuronx`` give the stand-in (idempotent). The caller has checked that
    the real torch-neuronx is not installed."""
    mod = sys.modules.get(NAME)
    if mod is not None:
        return mod
    mod = types.ModuleType(NAME, _DOC)
    mod.__spec__ = importlib.machinery.ModuleSpec(NAME, None, origin=__file__)
    mod.__file__ = __file__
    mod.__trnsim_shim__ = True
    mod.__getattr__ = _getattr
    sys.modules[NAME] = mod
    return mod
