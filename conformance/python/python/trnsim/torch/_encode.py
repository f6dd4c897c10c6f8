"""A dispatched ATen call in the golden suite's encoding (docs/golden-format.md): positional
tensors are ``input.<i>``, list elements ``input.<i>.<j>``, tensor keywords ``kwarg.<name>``,
returns ``output.<i>``. trnconf's lowering reads calls in exactly this form, so the device asks
for the same lowering the suite checks."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

#: torch dtype -> golden dtype name, for every dtype a device tensor may have.
GOLDEN_NAME = {
    torch.float32: "f32",
    torch.bfloat16: "bf16",
    torch.float16: "f16",
    torch.float8_e4m3fn: "f8e4m3fn",
    torch.float8_e5m2: "f8e5m2",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "bool",
    torch.complex64: "c64",
}
#: dtypes that may appear as arguments (``_to_copy(dtype=torch.float64)``) but never as a device
#: tensor's dtype.
ARG_DTYPE_NAME = {**GOLDEN_NAME, torch.float64: "f64", torch.complex128: "c128"}


class Unencodable(Exception):
    """The call has an argument the golden encoding cannot express."""


#: ``op_name`` and ``_schema_types`` by overload (a schema never changes).
_NAMES: dict = {}
_TYPES: dict = {}


def op_name(func: torch._ops.OpOverload) -> str:
    """``aten.add.Tensor`` -> ``add.Tensor``; ``aten.relu.default`` -> ``relu``."""
    name = _NAMES.get(func)
    if name is None:
        s = func._schema
        base = s.name.split("::", 1)[1]
        name = _NAMES[func] = f"{base}.{s.overload_name}" if s.overload_name else base
    return name


def _schema_types(func: torch._ops.OpOverload) -> tuple[list[str], dict[str, str]]:
    """The overload's argument types as strings: by position, and by name."""
    hit = _TYPES.get(func)
    if hit is None:
        sargs = func._schema.arguments
        hit = _TYPES[func] = ([str(a.type) for a in sargs], {a.name: str(a.type) for a in sargs})
    return hit


def _float(x: float) -> Any:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(x)


class Encoder:
    """Encodes one call; ``tensor(name, t)`` is told about every tensor (it records metadata)."""

    def __init__(self, on_tensor: Callable[[str, torch.Tensor], None]) -> None:
        self.on_tensor = on_tensor

    def value(self, v: Any, name: str, ty: str) -> Any:
        if isinstance(v, torch.Tensor):
            self.on_tensor(name, v)
            return {"tensor": name}
        if v is None:
            return {"none": None}
        if isinstance(v, bool):
            return {"bool": v}
        if isinstance(v, int):
            return {"float": float(v)} if "float" in ty else {"int": v}
        if isinstance(v, float):
            return {"float": _float(v)}
        if isinstance(v, complex):
            return {"complex": [_float(v.real), _float(v.imag)]}
        if isinstance(v, str):
            return {"str": v}
        if isinstance(v, torch.dtype):
            if v not in ARG_DTYPE_NAME:
                raise Unencodable(f"dtype argument {v}")
            return {"dtype": ARG_DTYPE_NAME[v]}
        if isinstance(v, torch.layout):
            return {"layout": str(v).replace("torch.", "")}
        if isinstance(v, torch.memory_format):
            return {"memory_format": str(v).replace("torch.", "")}
        if isinstance(v, torch.device):
            # The lowering runs on the device whatever the call names; the golden format only
            # spells `cpu` (the device the goldens were recorded on).
            return {"device": "cpu"}
        if isinstance(v, (list, tuple)):
            if "Tensor" in ty or any(isinstance(x, torch.Tensor) for x in v):
                names: list[str | None] = []
                for j, x in enumerate(v):
                    if x is None:
                        names.append(None)
                    elif isinstance(x, torch.Tensor):
                        self.on_tensor(f"{name}.{j}", x)
                        names.append(f"{name}.{j}")
                    else:
                        raise Unencodable(f"{name}: mixed tensor list")
                return {"tensors": names}
            if "float" in ty or any(isinstance(x, float) for x in v):
                return {"floats": [_float(float(x)) for x in v]}
            if v and all(isinstance(x, bool) for x in v):
                return {"bools": list(v)}
            if "bool" in ty and not v:
                return {"bools": []}
            if all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                return {"ints": [int(x) for x in v]}
            raise Unencodable(f"{name}: list {v!r}")
        if isinstance(v, torch.SymInt):
            return {"int": int(v)}
        raise Unencodable(f"{name}: value of type {type(v).__name__}")

    def call(self, func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> dict:
        by_pos, types = _schema_types(func)
        n = len(by_pos)
        enc_args = []
        for i, a in enumerate(args):
            enc_args.append(self.value(a, f"input.{i}", by_pos[i] if i < n else ""))
        enc_kwargs = {}
        if kwargs:
            order = [k for k in types if k in kwargs]
            for k in order + sorted(set(kwargs) - set(order)):
                enc_kwargs[k] = self.value(kwargs[k], f"kwarg.{k}", types.get(k, ""))
        return {"args": enc_args, "kwargs": enc_kwargs}
