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
    "Session",
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
    target: str | None = None,
    numerics: NumericsLike = None,
) -> RunResult:
    """Runs a program once on fresh simulated memory, on ``target`` (``None``: the program's own
    target, ``prog.target``; a program built without one is for trn2, the default).

    ``inputs`` maps every Input-role HBM tensor name to a NumPy array of the declared dtype and
    shape. Raises :class:`SimError` for any simulator error (including a missing or mistyped
    input), ``TypeError`` for an array dtype trnsim has no equivalent of.
    """
    program = _program(prog)
    if not isinstance(inputs, Mapping):
        raise TypeError(
            "trnsim.run: inputs must map each Input-role HBM tensor name to an array, "
            f"e.g. {{'x': x}}, not a {type(inputs).__name__}"
        )
    declared = {name: dtype for name, dtype, _shape, _role in program.hbm}
    wire = {name: to_wire(name, a, declared.get(name)) for name, a in inputs.items()}
    outputs, stats = _native.run(program, wire, target, _numerics_json(numerics))
    return RunResult({name: from_wire(w) for name, w in outputs.items()}, json.loads(stats))


class _one_thread:
    """Turns the native session's refusal of a concurrent call (PyO3's bare "Already borrowed")
    into an error that says what happened and what to do."""

    __slots__ = ("method",)

    def __init__(self, method: str) -> None:
        self.method = method

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, e: object, tb: object) -> bool:
        if kind is RuntimeError and "borrowed" in str(e):
            raise RuntimeError(
                f"trnsim.Session.{self.method}: this Session is in use by another thread; a Session "
                "serves one thread at a time (docs/python.md, 'Threads'): give each thread its own "
                "Session, or serialise the calls with a lock"
            ) from e
        return False


class Session:
    """A device session: named tensors that stay in simulated HBM across program runs.

    Only :meth:`put` and :meth:`get` copy between host and device (both counted in
    :meth:`transfers`); :meth:`run` binds a program's Input/Output HBM tensors to session tensors
    and moves them, so a sequence of programs keeps its data on the device.

        s = trnsim.Session()
        s.put("x", x)
        s.run(kernel1, {"a": "x", "out": "h"})   # h = kernel1(x), stays on the device
        s.run(kernel2, {"a": "h", "out": "y"})   # y = kernel2(h)
        y = s.get("y")
    """

    # Threads: a Session serves one thread at a time (docs/python.md, "Threads"). A call made
    # while another thread is inside one of this Session's methods raises RuntimeError at once
    # (the native session refuses a second borrow; nothing waits or is corrupted): give each
    # thread its own Session, or serialise the calls with a lock of your own.

    def __init__(self, target: str = "trn2", numerics: NumericsLike = None) -> None:
        self._native = _native.Session(target, _numerics_json(numerics))

    def put(self, name: str, array: Any, dtype: str | None = None) -> None:
        """Copies an array to the device as ``name`` (replacing any tensor of that name).
        ``dtype="tf32"`` stores a float32 array as tf32 (its low 13 mantissa bits must be 0)."""
        with _one_thread("put"):
            self._native.put(name, to_wire(name, array, dtype))

    def get(self, name: str) -> np.ndarray:
        """Copies a session tensor to the host. ``KeyError`` if there is none."""
        with _one_thread("get"):
            return from_wire(self._native.get(name))

    def info(self, name: str) -> tuple[str, tuple[int, ...]]:
        """``(trnsim dtype name, shape)`` of a session tensor, without copying it."""
        with _one_thread("info"):
            dtype, shape = self._native.info(name)
        return dtype, tuple(shape)

    def delete(self, name: str) -> bool:
        """Frees a session tensor; whether it existed."""
        with _one_thread("delete"):
            return self._native.delete(name)

    def names(self) -> list[str]:
        """The session's tensor names, sorted."""
        with _one_thread("names"):
            return self._native.names()

    def run(self, prog: Program | str, bind: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Runs a program on session tensors and returns its statistics (as :func:`run`'s).

        ``bind`` maps the program's Input/Output HBM tensor names to session tensor names; one
        it leaves out binds to the session tensor of its own name. Inputs must exist with the
        declared dtype and shape; outputs are created or replaced when the run succeeds. On a
        :class:`SimError` the session is unchanged.
        """
        with _one_thread("run"):
            return json.loads(self._native.run(_program(prog), dict(bind or {})))

    def transfers(self) -> dict[str, int]:
        """Counters: ``host_to_device_bytes`` (put), ``device_to_host_bytes`` (get),
        ``device_copy_bytes`` (one tensor bound to two inputs of a run) and ``runs``."""
        with _one_thread("transfers"):
            return json.loads(self._native.transfers())

    def race_checks(self) -> dict[str, int]:
        """``checked``: runs whose program the race detector checked; ``reused``: runs of a
        program an earlier completed run had proved race-free (docs/timeline.md)."""
        with _one_thread("race_checks"):
            return json.loads(self._native.race_checks())

    def device_bytes(self) -> int:
        """Bytes held by the session's tensors."""
        with _one_thread("device_bytes"):
            return self._native.device_bytes()

    def __contains__(self, name: str) -> bool:
        return name in self._native.names()

    def __len__(self) -> int:
        return len(self._native.names())

    def __repr__(self) -> str:
        return f"<trnsim.Session: {len(self)} tensors, {self.device_bytes()} bytes>"
