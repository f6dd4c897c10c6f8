"""Which simulated generation a kernel runs on, and that generation's parameters.

There is exactly one place that reads a target *name*: `parse_target`. It accepts the names AWS's
`nki.jit` docstring lists for `NEURON_PLATFORM_TARGET_OVERRIDE` (`trn1|inf2|gen2`, `trn2|gen3`,
`trn3|gen4`) and gives the simulator's name for that generation. Everything else asks the
parameters (`params`), which come from the native module (trnsim's `Target`, serialised by
`_native.target_params_json`), never from a copy kept here. A name the simulator does not model
is an `NkiError` saying so; nothing falls back to another generation."""

import json
import os

from ._core import NkiError

ENV = "NEURON_PLATFORM_TARGET_OVERRIDE"

# AWS's spellings of each generation -> trnsim's target name (the `nki.jit` docstring, SDK 2.31+).
_ALIASES = {
    "trn1": "trn1",
    "inf2": "trn1",
    "gen2": "trn1",
    "trn2": "trn2",
    "gen3": "trn2",
    "trn3": "trn3",
    "gen4": "trn3",
}

_CACHE = {}


def parse_target(name, what="the platform target", loc=None):
    """trnsim's target name for AWS's spelling `name` (case-insensitive); an NkiError for a name
    AWS does not list or a generation the simulator does not model."""
    key = str(name).strip().lower()
    sim = _ALIASES.get(key)
    if sim is None:
        raise NkiError(
            f"{what} {name!r} is not a NeuronCore generation: AWS's names are trn1|inf2|gen2, trn2|gen3, trn3|gen4", loc
        )
    params(sim, what=f"{what} {name!r}", loc=loc)
    return sim


def params(sim_name, what=None, loc=None):
    """The simulator's parameters of target `sim_name` (a dict of trnsim's `Target` fields)."""
    p = _CACHE.get(sim_name)
    if p is None:
        from .. import _native

        try:
            p = json.loads(_native.target_params_json(sim_name))
        except ValueError as e:
            raise NkiError(f"{what or sim_name}: this trnsim does not simulate that generation ({e})", loc) from None
        _CACHE[sim_name] = p
    return p


def env_target(loc=None):
    """The generation `NEURON_PLATFORM_TARGET_OVERRIDE` names, or None when it is unset or empty."""
    v = os.environ.get(ENV, "").strip()
    return parse_target(v, what=ENV, loc=loc) if v else None


def nc_generation(sim_name):
    """The NeuronCore version number of a target (2 for NeuronCore-v2, ...), from its `core` field."""
    core = params(sim_name)["core"]
    return int(core.rsplit("v", 1)[1])
