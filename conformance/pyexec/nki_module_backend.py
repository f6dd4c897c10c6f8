"""Golden cases through an NKI backend module: `trnconf run --backend nki:MODULE`.

A backend module maps Core ATen overloads to NKI kernels (docs/nki-backend.md):

    OVERLOADS = {
        "add.Tensor": (add_kernel, add_tensor),          # (kernel or tuple of kernels, wrapper)
        ...
    }

`wrapper(kernels, *args, **kwargs)` receives the kernel(s) and the ATen call's arguments as the
golden case records them (tensors as numpy arrays, bf16/fp8 through ml_dtypes; ints, floats,
bools, strings, lists, None and dtypes as Python values) and returns the op's outputs as numpy
arrays (a tuple for a multi-output op). It does argument plumbing only: reshapes, the broadcast of
an input to the output's shape, kernel arguments. Every value is computed by the kernels, which run
through the trnsim.nki front-end (`trnsim.nki.install()` makes `neuronxcc.nki` resolve to it) on the
trnsim simulator. A wrapper that cannot serve a call form raises NotImplementedError with the
reason: the case is reported `unsupported` (skipped, with that reason), never passed.

The process executor (trnconf_executor.py, mode `nki-module`) calls `load` once and `run` per case.
"""

import os
import traceback

from trnsim.nki import backend_module
from trnsim.nki.backend_module import display_path as _display_path
from trnsim.nki.backend_module import kernel_location, kernels_of, source_files


class CaseError(Exception):
    """A classified per-case failure (status as in docs/executor-protocol.md)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


def load(spec):
    """Installs the trnsim.nki front-end and imports the backend module `spec` (a dotted name
    importable from the current directory, or a path to a .py file). Raises on failure
    (`trnsim.nki.backend_module.BackendModuleError`)."""
    import trnsim.nki

    trnsim.nki.install()
    return backend_module.load(spec)


def describe(module, spec):
    """The handshake's `nki_module` entry: the module, its file, and every overload with the
    file:line of its kernels."""
    return {
        "module": spec,
        "file": os.path.abspath(getattr(module, "__file__", "") or "") or None,
        "overloads": {op: [kernel_location(k) for k in kernels_of(e)] for op, e in sorted(module.OVERLOADS.items())},
    }


# ------------------------------------------------------------------------------------------------
# Case values as numpy / Python values


def _np_dtype(name):
    import ml_dtypes
    import numpy as np

    return {
        "f32": np.float32,
        "f16": np.float16,
        "bf16": ml_dtypes.bfloat16,
        "f8e4m3fn": ml_dtypes.float8_e4m3fn,
        "f8e5m2": ml_dtypes.float8_e5m2,
        "i64": np.int64,
        "i32": np.int32,
        "i16": np.int16,
        "i8": np.int8,
        "u8": np.uint8,
        "bool": np.bool_,
        "f64": np.float64,
    }[name]


_TAG_TO_DT = {
    "F32": "f32",
    "BF16": "bf16",
    "F16": "f16",
    "F8_E4M3": "f8e4m3fn",
    "F8_E5M2": "f8e5m2",
    "I64": "i64",
    "I32": "i32",
    "I16": "i16",
    "I8": "i8",
    "U8": "u8",
    "BOOL": "bool",
}


def _tag_of(a):
    return {
        "float32": "F32",
        "float16": "F16",
        "bfloat16": "BF16",
        "float8_e4m3fn": "F8_E4M3",
        "float8_e5m2": "F8_E5M2",
        "int64": "I64",
        "int32": "I32",
        "int16": "I16",
        "int8": "I8",
        "uint8": "U8",
        "bool": "BOOL",
    }.get(str(a.dtype))


def _dec_float(x):
    if isinstance(x, str):
        return {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}[x]
    return float(x)


def decode_call(meta, tensors):
    """The case's (args, kwargs) with tensors as numpy arrays."""
    import numpy as np

    def tensor(name):
        tag, shape, data = tensors[name]
        if meta["tensors"].get(name, {}).get("dtype") == "c64":
            raise CaseError("unsupported", f"`{name}` is complex64; the NKI backend adapter has no complex tensors")
        return np.frombuffer(data, _np_dtype(_TAG_TO_DT[tag])).reshape(shape).copy()

    def decode(v):
        ((kind, x),) = v.items()
        if kind == "tensor":
            return tensor(x)
        if kind == "tensors":
            return [None if n is None else tensor(n) for n in x]
        if kind in ("int", "bool", "str", "ints", "bools"):
            return x
        if kind == "float":
            return _dec_float(x)
        if kind == "floats":
            return [_dec_float(y) for y in x]
        if kind == "dtype":
            return np.dtype(_np_dtype(x))
        if kind == "none":
            return None
        raise CaseError("unsupported", f"argument kind `{kind}` has no NKI backend form")

    return [decode(a) for a in meta["args"]], {k: decode(v) for k, v in meta["kwargs"].items()}


def _frames_in(tb, files):
    return [f for f in traceback.extract_tb(tb) if os.path.abspath(f.filename) in files]


def run(module, meta, tensors):
    """Runs one case: returns (outputs, values) for the executor's outputs file. Raises CaseError."""
    import numpy as np

    op = meta["op"]
    entry = module.OVERLOADS.get(op)
    if entry is None:
        raise CaseError("unsupported", f"the backend module provides no kernel for `{op}`")
    kernels, wrapper = entry
    args, kwargs = decode_call(meta, tensors)
    module_files = source_files(module)
    try:
        result = wrapper(kernels, *args, **kwargs)
    except NotImplementedError as e:
        ours = _frames_in(e.__traceback__, module_files)
        if ours and ours[-1] == traceback.extract_tb(e.__traceback__)[-1]:
            where = f"{_display_path(ours[-1].filename)}:{ours[-1].lineno}"
            raise CaseError("unsupported", f"call form not supported by the backend ({where}): {e}") from e
        raise CaseError("runtime_error", _describe_error(e, module_files)) from e
    except CaseError:
        raise
    except Exception as e:
        raise CaseError("runtime_error", _describe_error(e, module_files)) from e
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    outputs, values = {}, {}
    for pos, v in enumerate(meta["outputs"]):
        ((kind, name),) = v.items()
        if kind != "tensor":
            raise CaseError("unsupported", f"output {pos} is a `{kind}`; the adapter returns tensors only")
        if pos >= len(results):
            raise CaseError(
                "runtime_error", f"the wrapper returned {len(results)} outputs; the op has {len(meta['outputs'])}"
            )
        a = np.asarray(results[pos])
        if not a.flags["C_CONTIGUOUS"]:
            a = a.copy(order="C")  # (np.ascontiguousarray would make a 0-dim result 1-dim)
        tag = _tag_of(a)
        if tag is None:
            raise CaseError(
                "runtime_error",
                f"`{name}`: the wrapper returned dtype {a.dtype}, which the golden format has no tag for",
            )
        outputs[name] = (tag, list(a.shape), a.tobytes())
    return outputs, values


def _describe_error(e, module_files):
    """The error with where it happened: the innermost frame in the backend module (file:line)
    and, if the error says so, the kernel line the simulator names."""
    text = f"{type(e).__name__}: {e}"
    ours = _frames_in(e.__traceback__, module_files)
    where = f" [at {_display_path(ours[-1].filename)}:{ours[-1].lineno}]" if ours else ""
    return (text.strip() + where)[:4000]
