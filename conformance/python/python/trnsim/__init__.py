"""trnsim: the NeuronCore-v2 (Trainium) instruction-level simulator, from Python.

A thin layer over the native module ``trnsim._native`` (Rust, PyO3). See docs/python.md.

    import numpy as np, trnsim
    prog = trnsim.Program.from_json(open("add.json").read())
    res = trnsim.run(prog, {"a": a, "b": b})
    res.outputs["out"], res.stats["instructions"]

Tensors are NumPy arrays; bf16 and fp8 use ml_dtypes' dtypes and go in and out bit-exactly.
Every simulator error is raised as :class:`trnsim.SimError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Union

import numpy as np

from . import _native
from ._dtypes import from_wire, numpy_dtype, to_wire, trnsim_dtype
from ._errors import SimError
from ._native import Program

__all__ = [
    "Numerics",
    "Program",
    "RunResult",
    "SimError",
    "numpy_dtype",
    "run",
    "trnsim_dtype",
]

#: Hash of the sources the native module was built from (see tests/python.rs).
SOURCE_HASH: str = _native.SOURCE_HASH


class Numerics:
    """The simulator's numeric settings: every field of ``trnsim::Numerics`` by its serde name
    (docs/numerics.md). Unset fields keep their defaults; unknown names raise ``ValueError``.

        trnsim.Numerics(denormals="flush_to_zero", rounding={"stochastic": {"seed": 7}})
    """

    def __init__(self, **settings: Any) -> None:
        self._settings: dict[str, Any] = json.loads(_native.numerics_normalize_json(json.dumps(settings)))

    @staticmethod
    def defaults() -> dict[str, Any]:
        """Every setting with its default value."""
        return json.loads(_native.numerics_default_json())

    def to_dict(self) -> dict[str, Any]:
        """Every setting (given or default), as JSON-like values."""
        return json.loads(json.dumps(self._settings))

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_settings"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Numerics) and other._settings == self._settings

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._settings.items())
        return f"trnsim.Numerics({args})"


# typing.Union, not `|`: this alias is evaluated at import time, and Python 3.9 is supported.
NumericsLike = Union[Numerics, Mapping[str, Any], None]


def _numerics_json(numerics: NumericsLike) -> str | None:
    if numerics is None:
        return None
    if isinstance(numerics, Numerics):
        return json.dumps(numerics.to_dict())
    if isinstance(numerics, Mapping):
        return json.dumps(dict(numerics))
    raise TypeError(f"numerics must be a trnsim.Numerics, a dict or None, not {type(numerics).__name__}")


def _program(prog: Program | str) -> Program:
    if isinstance(prog, Program):
        return prog
    if isinstance(prog, str):
        return Program.from_json(prog)
    raise TypeError(f"expected a trnsim.Program or its JSON text, not {type(prog).__name__}")


class RunResult:
    """The result of :func:`run`: ``outputs`` (every Output-role HBM tensor, by name, as NumPy
    arrays) and ``stats`` (the simulator's statistics, a JSON-like dict; docs/python.md)."""

    __slots__ = ("outputs", "stats")

    def __init__(self, outputs: dict[str, np.ndarray], stats: dict[str, Any]) -> None:
        self.outputs = outputs
        self.stats = stats

    def __repr__(self) -> str:
        return f"RunResult(outputs={sorted(self.outputs)}, stats={self.stats!r})"


def run(
    prog: Program | str,
    inputs: Mapping[str, Any],
    *,
    target: str = "trn1",
    numerics: NumericsLike = None,
) -> RunResult:
    """Runs a program once on fresh simulated memory.

    ``inputs`` maps every Input-role HBM tensor name to a NumPy array of the declared dtype and
    shape. Raises :class:`SimError` for any simulator error (including a missing or mistyped
    input), ``TypeError`` for an array dtype trnsim has no equivalent of.
    """
    program = _program(prog)
    declared = {name: dtype for name, dtype, _shape, _role in program.hbm}
    wire = {name: to_wire(name, a, declared.get(name)) for name, a in inputs.items()}
    outputs, stats = _native.run(program, wire, target, _numerics_json(numerics))
    return RunResult({name: from_wire(w) for name, w in outputs.items()}, json.loads(stats))
