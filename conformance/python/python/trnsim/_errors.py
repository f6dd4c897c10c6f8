"""The exception every simulator error is raised as (docs/python.md, "Exceptions").

Defined in Python because an abi3 extension cannot subclass ``Exception`` natively before
Python 3.12; the native module imports this class and raises instances of it.
"""

from __future__ import annotations


class SimError(Exception):
    """An error raised by the simulator while validating or executing a program.

    Attributes:
        index: the failing instruction's index in the program (None for program-level errors,
            e.g. a missing input).
        engine: the engine it ran on (``"vector"``, ``"dma"``...), or None.
        opcode: the instruction's opcode (``"tensor_tensor"``...), or None.
        operand: the operand at fault (``"dst"``, ``"src"``...), or None.
        kind: what was violated, as a stable snake_case name (``"uninitialized_read"``,
            ``"start_partition"``, ``"psum_bank_overflow"``...): trnsim's ``ErrorKind`` variant.
        loc: the instruction's source location (its ``loc``, e.g. ``"kernel.py:42"``), or None.
        message: what was violated, in words (without the instruction prefix).

    ``str(e)`` is trnsim's full message, which names all of the above.
    """

    def __init__(
        self,
        text: str,
        *,
        kind: str,
        message: str,
        index: int | None = None,
        engine: str | None = None,
        opcode: str | None = None,
        operand: str | None = None,
        loc: str | None = None,
    ) -> None:
        super().__init__(text)
        self.kind = kind
        self.message = message
        self.index = index
        self.engine = engine
        self.opcode = opcode
        self.operand = operand
        self.loc = loc

    def __reduce__(self):  # picklable, e.g. across multiprocessing
        return (
            _rebuild,
            (str(self), self.kind, self.message, self.index, self.engine, self.opcode, self.operand, self.loc),
        )


def _rebuild(text, kind, message, index, engine, opcode, operand, loc):
    return SimError(
        text, kind=kind, message=message, index=index, engine=engine, opcode=opcode, operand=operand, loc=loc
    )
