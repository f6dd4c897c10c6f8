"""NumPy dtype <-> trnsim dtype names (docs/python.md, "Dtypes").

Tensors cross into the simulator as raw little-endian bytes, so every mapping here is bit-exact:
bf16 and fp8 go through ml_dtypes' NumPy dtypes and their bits are never converted.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

# trnsim dtype name -> NumPy dtype. tf32 has no NumPy dtype: it is stored as float32 whose low
# 13 mantissa bits are zero, so it reads and writes as float32.
TO_NUMPY = {
    "f32": np.dtype(np.float32),
    "tf32": np.dtype(np.float32),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f16": np.dtype(np.float16),
    "fp8_e4m3": np.dtype(ml_dtypes.float8_e4m3),
    "fp8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "fp8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32),
    "bool": np.dtype(np.bool_),
    # NeuronCore-v4 MX types: the e8m0 scale and the e2m1 element (one code per byte, as
    # ml_dtypes stores it), and the packed containers, which hold their codes as raw bits.
    "fp8_e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),
    "fp4_e2m1fn": np.dtype(ml_dtypes.float4_e2m1fn),
    "fp8_e5m2_x4": np.dtype(np.uint32),
    "fp8_e4m3fn_x4": np.dtype(np.uint32),
    "fp4_e2m1fn_x4": np.dtype(np.uint16),
    # NeuronCore-v3+ native int64 (docs/numerics.md, "Native int64"): outputs a program declares
    # i64 read back as int64. Not in FROM_NUMPY: an int64 array is refused as before, so no
    # caller's int64 data moves onto a dtype only trn2/trn3 programs declare.
    "i64": np.dtype(np.int64),
}

# The packed MX containers: no NumPy dtype of their own (their arrays are uint32/uint16 words).
PACKED = ("fp8_e5m2_x4", "fp8_e4m3fn_x4", "fp4_e2m1fn_x4")

# NumPy dtype -> trnsim dtype name (float32 maps to f32, never tf32; uint32/uint16 to u32/u16,
# never a packed container).
FROM_NUMPY = {dt: name for name, dt in TO_NUMPY.items() if name not in ("tf32", "i64") and name not in PACKED}


def trnsim_dtype(dtype) -> str:
    """The trnsim dtype name of a NumPy dtype (or anything ``np.dtype`` accepts)."""
    dt = np.dtype(dtype)
    try:
        return FROM_NUMPY[dt.newbyteorder("=")]
    except KeyError:
        supported = ", ".join(sorted(str(d) for d in FROM_NUMPY))
        raise TypeError(f"dtype {dt} has no trnsim equivalent (supported: {supported})") from None


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a trnsim dtype name."""
    try:
        return TO_NUMPY[name]
    except KeyError:
        raise TypeError(f"unknown trnsim dtype {name!r}") from None


# The simulator's default HBM capacity (trnsim's ExecConfig::max_hbm_bytes, 4 GiB): no single
# tensor larger than this can be stored, so none is copied to be refused afterwards.
MAX_TENSOR_BYTES = 4 << 30


def to_wire(name: str, array, declared: str | None = None):
    """``(dtype name, shape, bytes)`` of an array: little-endian, C order, bits unchanged.

    ``declared`` is the program's dtype for this tensor, when known: a float32 array is accepted
    for a tf32 declaration when its low 13 mantissa bits are zero (tf32's storage form).
    """
    a = np.asarray(array)
    dt = trnsim_dtype(a.dtype)
    # Checked on the array's logical size before any copy: a broadcast view (stride 0) of a few
    # bytes can stand for many GiB, and making it contiguous would allocate them all.
    nbytes = int(a.size) * int(a.dtype.itemsize)
    if nbytes > MAX_TENSOR_BYTES:
        raise MemoryError(
            f"tensor {name!r}: {tuple(a.shape)} {a.dtype} is {nbytes} bytes, more than the simulated "
            f"device's {MAX_TENSOR_BYTES} bytes of HBM; refused before copying it"
        )
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    if not a.flags.c_contiguous:
        # (not np.ascontiguousarray: it returns at least 1-d, so a 0-d array would become shape [1])
        a = a.copy(order="C")
    if declared in PACKED and TO_NUMPY[declared] == a.dtype:
        dt = declared
    if declared == "tf32" and dt == "f32":
        if np.any(a.view(np.uint32) & np.uint32(0x1FFF)):
            raise ValueError(f"tensor {name!r}: float32 values with nonzero low 13 mantissa bits are not tf32")
        dt = "tf32"
    return dt, list(a.shape), a.tobytes()


def from_wire(wire) -> np.ndarray:
    """A NumPy array (writable, owning its bytearray) from ``(dtype name, shape, bytearray)``."""
    name, shape, data = wire
    return np.frombuffer(data, dtype=numpy_dtype(name)).reshape(shape)
