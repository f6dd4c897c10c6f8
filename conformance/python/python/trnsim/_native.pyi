# Type stubs for `trnsim._native`, the PyO3 extension built from conformance/python/src/*.rs.
# Written by hand from the `#[pyfunction]` / `#[pymethods]` definitions there: a function, class or
# method added on the Rust side needs its entry here too (tests/test_stubs.py fails until it has
# one, and checks the parameter names and defaults against the compiled module).
#
# Tensors cross the boundary as `(dtype name, shape, bytes)`; statistics, numerics and target
# parameters as JSON text. Use `import trnsim` (python/trnsim/__init__.py), not this module.

from collections.abc import Sequence
from typing import Literal, TypeAlias, final

# A tensor going in: `(dtype name, shape, bytes)`; the bytes must fill the shape exactly.
_WireIn: TypeAlias = tuple[str, Sequence[int], bytes]
# A tensor coming out: a `bytearray`, so NumPy can wrap it writable without another copy.
_WireOut: TypeAlias = tuple[str, list[int], bytearray]
_Role: TypeAlias = Literal["input", "output", "scratch"]
_LowerErrorKind: TypeAlias = Literal["not_lowered", "unsupported", "int64", "no_compute", "error"]

__all__ = [
    "DTYPES",
    "SOURCE_HASH",
    "Program",
    "Session",
    "device_dtype",
    "is_lowered",
    "lower_op",
    "numerics_default_json",
    "numerics_normalize_json",
    "run",
    "target_params_json",
    "tolerance",
]

#: Hash of the sources the module was built from (conformance/python/source_hash.rs).
SOURCE_HASH: str
#: Every trnsim dtype name, as program JSON spells it (`f32`, `bf16`, `fp8_e4m3fn`, ...).
DTYPES: list[str]

@final
class Program:
    """A trnsim program (the serde JSON of `trnsim::Program`, docs/isa.md).

    Has no constructor: build one with `Program.from_json`."""

    @staticmethod
    def from_json(text: str) -> Program:
        """Parses a program from its JSON text; `ValueError` if it is not a trnsim program."""

    def infer_waits(self) -> None:
        """Fills every instruction's `wait` list from the memory dependencies between queues."""

    def spread_dmas(self) -> None:
        """Puts every DMA without a queue on one: large copies cut into pieces over several
        queues, then round robin per core. Run `infer_waits` afterwards."""

    def to_json(self) -> str:
        """The program as pretty-printed JSON text."""

    @property
    def target(self) -> str:
        """The name of the target the program is for (`"trn1"`, `"trn2"`, ...)."""

    @property
    def hbm(self) -> list[tuple[str, str, list[int], _Role]]:
        """The HBM declarations: `(name, dtype name, shape, role)` each."""

    def __len__(self) -> int:
        """The number of instructions."""

@final
class Session:
    """A device session: tensors stay in simulated HBM across program runs."""

    def __new__(cls, target: str = "trn2", numerics_json: str | None = None) -> Session:
        """A session on `target` with numerics settings as JSON (`None`: the defaults)."""

    def put(self, name: str, tensor: _WireIn) -> None:
        """Copies a host tensor into the session as `name`; raises `trnsim.SimError`."""

    def get(self, name: str) -> _WireOut:
        """Copies a session tensor to the host; `KeyError` if there is none by that name."""

    def info(self, name: str) -> tuple[str, list[int]]:
        """`(dtype name, shape)` of a session tensor, without transferring it; `KeyError` if absent."""

    def delete(self, name: str) -> bool:
        """Frees a session tensor; whether it existed."""

    def names(self) -> list[str]:
        """The session's tensor names, sorted."""

    def run(self, program: Program, bind: dict[str, str], spans: bool = True) -> str:
        """Runs `program` on session tensors (`bind`: program tensor name to session tensor name).

        Returns the run's statistics as JSON; raises `trnsim.SimError`. `spans=False` leaves the
        timeline's per-instruction spans out (the totals stay)."""

    def race_checks(self) -> str:
        """Runs that race-checked their program and runs that reused a proof, as JSON."""

    def transfers(self) -> str:
        """Host transfer and run counters of the session, as JSON."""

    def device_bytes(self) -> int:
        """Bytes held by the session's tensors."""

def run(
    program: Program,
    inputs: dict[str, _WireIn],
    target: str | None = None,
    numerics_json: str | None = None,
) -> tuple[dict[str, _WireOut], str]:
    """Runs `program` once on fresh simulated memory, on `target` (`None`: the program's own).

    Returns `(outputs by name, statistics JSON)`; raises `trnsim.SimError`."""

def numerics_default_json() -> str:
    """Every numerics setting with its default, as JSON."""

def numerics_normalize_json(json: str) -> str:
    """Validates numerics settings (JSON) and returns them complete, as JSON; `ValueError` on an
    unknown setting."""

def target_params_json(name: str) -> str:
    """The parameters of the simulated generation `name` (trnsim's `Target`), as JSON; `ValueError`
    for a name the simulator does not model."""

def lower_op(
    op: str,
    call_json: str,
    tensors_json: str,
    outputs_json: str,
    target: str = "trn2",
    seed: int | None = None,
) -> tuple[_LowerErrorKind | None, str, Program | None, str, tuple[str, str] | None]:
    """Lowers one Core ATen call from its metadata for `target`.

    Returns `(error kind, message, program, values JSON, data-dependent output)`; the error kind is
    `None` on success. `seed`, when given, replaces the seed the RNG ops start from."""

def device_dtype(name: str) -> str | None:
    """The device dtype a tensor of golden dtype `name` is stored as, or `None` if there is none."""

def is_lowered(op: str) -> bool:
    """Whether there is a lowering for `op` (golden spelling: `add.Tensor`, `relu`)."""

def tolerance(op: str, dtype: str) -> tuple[float, float, str | None]:
    """The golden suite's `(rtol, atol, reason)` for `op`'s outputs of golden dtype `dtype`; the
    reason says why the op's tolerance is wider than the dtype's default (`None`: the default)."""
