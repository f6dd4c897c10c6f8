"""`trnsim.neuron`: run a TorchNeuron script, unchanged, on the simulated device (docs/torch-device.md,
"TorchNeuron's name").

TorchNeuron registers its PyTorch device as ``neuron``. With the opt-in, trnsim's device registers
under that name *instead of* ``trnsim``, so ``device="neuron"``, ``.to("neuron")``,
``torch.neuron.manual_seed(0)`` and ``import torch_neuronx`` work as written. Two ways in:

* the environment variable ``TRNSIM_AS_NEURON=1``. With the package installed, PyTorch's backend
  autoload (the ``torch.backends`` entry-point group, run by ``import torch``) calls
  :func:`autoload`, so a script that never imports trnsim runs on the simulator. ``import
  trnsim.torch`` reads the same variable;
* :func:`install_as_neuron` in code, called before anything registers the device.

PyTorch names its PrivateUse1 backend once per process, so the name is chosen when the device is
registered and cannot change afterwards. With the opt-in unset, :func:`autoload` does nothing at
all: nothing named ``neuron`` is registered, and the ``trnsim`` device is registered only by
``import trnsim.torch``, as without the entry point.

This module imports neither torch nor ``trnsim.torch`` until the opt-in asks for them: it is what
the entry point loads in every process that imports torch.
"""

from __future__ import annotations

import os
import sys

__all__ = ["ENV", "autoload", "install_as_neuron", "requested"]

#: The opt-in environment variable.
ENV = "TRNSIM_AS_NEURON"

_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")

#: Set by :func:`install_as_neuron`; read by ``trnsim.torch`` when it registers the device.
_installed = False


class NeuronOptInError(RuntimeError):
    """The ``neuron`` opt-in cannot be honoured (the reason is in the message)."""


def requested() -> bool:
    """Whether this process asked for the ``neuron`` name (:func:`install_as_neuron` or ``TRNSIM_AS_NEURON``).

    A value of the variable that is neither on (``1``, ``true``, ``yes``, ``on``) nor off (unset, empty,
    ``0``, ``false``, ``no``, ``off``) is an error, never a guess."""
    if _installed:
        return True
    raw = os.environ.get(ENV)
    if raw is None:
        return False
    value = raw.strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise NeuronOptInError(
        f"{ENV}={raw!r}: expected 1/true/yes/on to register trnsim's PyTorch device as `neuron`, "
        "or 0/false/no/off (or unset) for the `trnsim` name"
    )


def install_as_neuron():
    """Registers trnsim's PyTorch device as ``neuron`` and returns ``torch.neuron``.

    Sets ``TRNSIM_AS_NEURON=1`` for child processes. Call it before anything registers the device: ``import trnsim.torch`` registers it (as ``trnsim``
    without the opt-in), and PyTorch names the device once per process. Idempotent once the device
    is ``neuron``. Raises :class:`NeuronOptInError` when the device (or another PrivateUse1 backend) is
    already registered under another name, or when the real torch-neuronx is installed (this would
    shadow it)."""
    global _installed
    _refuse_real_torch_neuronx()
    already = sys.modules.get("trnsim.torch")
    if already is not None and getattr(already, "device_name", lambda: None)() != "neuron":
        raise NeuronOptInError(
            "trnsim's PyTorch device is already registered as `trnsim` in this process "
            "(`import trnsim.torch` registers it, and PyTorch names its PrivateUse1 backend once per "
            f"process). Call trnsim.neuron.install_as_neuron() before importing trnsim.torch, or set {ENV}=1 "
            "in the environment"
        )
    _installed = True
    # Child processes (torchrun ranks, spawned DataLoader workers) register the same name.
    os.environ[ENV] = "1"
    import trnsim.torch as _t  # registers the device as `neuron` (it asks requested())

    return _t._neuron_ready()


def autoload() -> None:
    """The ``torch.backends`` entry point: registers the device as ``neuron`` when ``TRNSIM_AS_NEURON``
    is on; otherwise returns without importing anything."""
    if requested():
        install_as_neuron()


def _refuse_real_torch_neuronx() -> None:
    mod = sys.modules.get("torch_neuronx")
    if mod is not None and getattr(mod, "__trnsim_shim__", False):
        return
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch_neuronx")
    except (ImportError, ValueError):
        spec = None
    if spec is not None:
        where = spec.origin or (list(spec.submodule_search_locations or []) or ["?"])[0]
        raise NeuronOptInError(
            f"the real torch-neuronx is installed ({where}): trnsim does not register its device as "
            f"`neuron` beside it. Unset {ENV}, or run in an environment without torch-neuronx"
        )
