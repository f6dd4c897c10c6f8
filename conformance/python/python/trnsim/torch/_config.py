"""The device's generation and logical-NeuronCore size, from the environment (docs/torch-device.md,
"Generation and LNC").

* ``TRNSIM_TORCH_TARGET``: trnsim's target name (``trn2`` when nothing is set: TorchNeuron runs on Trn2/Trn3 only);
* ``NEURON_PLATFORM_TARGET_OVERRIDE``: TorchNeuron's and the Neuron compiler's variable, in AWS's
  spellings (``trn1|inf2|gen2``, ``trn2|gen3``, ``trn3|gen4``), read through the package's one
  target-name parser (``trnsim.nki._targets.parse_target``). When both are set they must name
  the same generation;
* ``NEURON_LOGICAL_NC_CONFIG``: ``1`` or ``2``, physical cores per logical NeuronCore, which the
  generation must allow (Trn1: 1 only). Unset: the generation's default (Trn1 1, Trn2/Trn3 2).

An invalid value is a :class:`ConfigError` naming the variable. The values are read once, when the
device is first set up (``import trnsim.torch``).
"""

from __future__ import annotations

import json
import os

TARGET_ENV = "TRNSIM_TORCH_TARGET"
PLATFORM_ENV = "NEURON_PLATFORM_TARGET_OVERRIDE"
LNC_ENV = "NEURON_LOGICAL_NC_CONFIG"
DEFAULT_TARGET = "trn2"


class ConfigError(ValueError):
    """An environment variable that selects the device's generation or LNC has an invalid value."""


def device_target() -> str:
    """trnsim's name of the device's generation."""
    own = os.environ.get(TARGET_ENV, "").strip()
    platform = os.environ.get(PLATFORM_ENV, "").strip()
    if not platform:
        return own or DEFAULT_TARGET
    from ..nki._core import NkiError
    from ..nki._targets import parse_target

    try:
        sim = parse_target(platform, what=PLATFORM_ENV)
    except NkiError as e:
        raise ConfigError(str(e)) from None
    if own and own != sim:
        raise ConfigError(
            f"{TARGET_ENV}={own!r} and {PLATFORM_ENV}={platform!r} name different generations "
            f"({own} and {sim}): set one of them"
        )
    return sim


def device_lnc(target: str) -> int:
    """The device's logical-NeuronCore size on ``target`` (1 or 2)."""
    from .. import _native

    params = json.loads(_native.target_params_json(target))
    allowed = [int(n) for n in params["lnc_allowed"]]
    raw = os.environ.get(LNC_ENV, "").strip()
    if not raw:
        return int(params["lnc_default"])
    if raw not in ("1", "2"):
        raise ConfigError(f"{LNC_ENV}={raw!r}: the logical NeuronCore size is 1 or 2")
    lnc = int(raw)
    if lnc not in allowed:
        raise ConfigError(
            f"{LNC_ENV}={raw!r}: {target} allows a logical NeuronCore of {' or '.join(map(str, allowed))} "
            "physical core(s)"
        )
    return lnc
