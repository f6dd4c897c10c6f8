"""A minimal safetensors reader/writer (the format: u64 little-endian header length, a JSON
header `{name: {"dtype", "shape", "data_offsets"}}`, then the raw little-endian bytes). Written
here so that the stand-in needs only numpy and handles bf16 without numpy support for it: tensors
are read and written as raw bits with their NKI dtype."""

import json
import struct

import numpy as np

from . import numerics as nm

_BY_TAG = {
    "F32": nm.float32,
    "BF16": nm.bfloat16,
    "F16": nm.float16,
    "I8": nm.int8,
    "I16": nm.int16,
    "I32": nm.int32,
    "U8": nm.uint8,
    "U16": nm.uint16,
    "U32": nm.uint32,
    "BOOL": nm.bool_,
    "F8_E4M3": nm.float8_e4m3fn,
    "F8_E5M2": nm.float8_e5m2,
}


def load(path):
    """{name: (dtype, shape, bits ndarray)}"""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    data = raw[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = _BY_TAG[info["dtype"]]
        b, e = info["data_offsets"]
        bits = np.frombuffer(data[b:e], dtype=np.dtype(dt.storage).newbyteorder("<")).astype(dt.storage)
        out[name] = (dt, tuple(info["shape"]), bits.reshape(tuple(info["shape"])))
    return out


def save(path, tensors):
    """tensors: {name: (dtype, shape, bits ndarray)}"""
    header = {}
    chunks = []
    off = 0
    for name in sorted(tensors):
        dt, shape, bits = tensors[name]
        buf = np.ascontiguousarray(bits, dtype=np.dtype(dt.storage).newbyteorder("<")).tobytes()
        header[name] = {"dtype": dt.st_name, "shape": list(shape), "data_offsets": [off, off + len(buf)]}
        chunks.append(buf)
        off += len(buf)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)
