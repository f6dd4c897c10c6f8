"""Dtypes and the cast rules of trnsim (sim/src/dtype): decode to fp32, encode with round to
nearest even on write. Tensors hold raw bits (uint8/uint16/uint32), so bit copies stay bit copies
(NaN payloads, -0) and bf16 needs no numpy support."""

import numpy as np


class DType:
    """An NKI dtype (`nl.float32`, `nl.bfloat16`, ...)."""

    def __init__(self, name, size, kind, st_name, lo=None, hi=None, signed=False):
        self.name = name
        self.size = size
        self.kind = kind  # 'f' float, 'i' integer
        self.storage = {1: np.uint8, 2: np.uint16, 4: np.uint32}[size]
        self.st_name = st_name  # safetensors dtype tag
        self.lo = lo
        self.hi = hi
        self.signed = signed

    @property
    def is_int(self):
        return self.kind == "i"

    @property
    def mask(self):
        return (1 << (8 * self.size)) - 1

    def __repr__(self):
        return "nl." + self.name


float32 = DType("float32", 4, "f", "F32")
tfloat32 = DType("tfloat32", 4, "f", "F32")
bfloat16 = DType("bfloat16", 2, "f", "BF16")
float16 = DType("float16", 2, "f", "F16")
float8_e4m3 = DType("float8_e4m3", 1, "f", "F8_E4M3")
float8_e4m3fn = DType("float8_e4m3fn", 1, "f", "F8_E4M3")
float8_e5m2 = DType("float8_e5m2", 1, "f", "F8_E5M2")
int8 = DType("int8", 1, "i", "I8", -(2**7), 2**7 - 1, True)
int16 = DType("int16", 2, "i", "I16", -(2**15), 2**15 - 1, True)
int32 = DType("int32", 4, "i", "I32", -(2**31), 2**31 - 1, True)
uint8 = DType("uint8", 1, "i", "U8", 0, 2**8 - 1)
uint16 = DType("uint16", 2, "i", "U16", 0, 2**16 - 1)
uint32 = DType("uint32", 4, "i", "U32", 0, 2**32 - 1)
bool_ = DType("bool_", 1, "i", "BOOL", 0, 2**8 - 1)

ALL = [
    float32,
    tfloat32,
    bfloat16,
    float16,
    float8_e4m3,
    float8_e4m3fn,
    float8_e5m2,
    int8,
    int16,
    int32,
    uint8,
    uint16,
    uint32,
    bool_,
]

_SIGNED_VIEW = {1: np.int8, 2: np.int16, 4: np.int32}


def to_i64(bits, dt):
    """Exact integer values of integer bits (sign- or zero-extended)."""
    bits = np.asarray(bits, dtype=dt.storage)
    if dt.signed:
        return bits.view(_SIGNED_VIEW[dt.size]).astype(np.int64)
    return bits.astype(np.int64)


# --- 8-bit floats (ports of sim/src/dtype/fp8.rs, itself PyTorch's c10 for e4m3fn / e5m2) ---


def _u32(x):
    return x & 0xFFFFFFFF


def _f32_bits(f):
    return int(np.float32(f).view(np.uint32))


def _bits_f32(b):
    return np.uint32(b).view(np.float32)


def _clz32(x):
    return 32 - x.bit_length()


def _e4m3fn_to_f32_bits(b):
    w = b << 24
    sign = w & 0x80000000
    nonsign = w & 0x7FFFFFFF
    renorm = max(_clz32(nonsign) - 4, 0)
    inf_nan_mask = (np.int32(np.uint32(_u32(nonsign + 0x01000000)).view(np.int32)) >> 8).astype(np.int64) & 0x7F800000
    zm = np.uint32(_u32(nonsign - 1)).view(np.int32) >> 31
    zero_mask = int(np.int32(zm).view(np.uint32))
    shifted = _u32(nonsign << renorm) >> 4
    r = sign | ((_u32(shifted + _u32((0x78 - renorm) << 23)) | int(inf_nan_mask)) & _u32(~zero_mask))
    return _u32(r)


def _decode_finite(e, m, man_bits, bias):
    if e == 0:
        return np.float32(m) * np.float32(2.0 ** (1 - bias - man_bits))
    return (np.float32(1.0) + np.float32(m) / np.float32(1 << man_bits)) * np.float32(2.0 ** (e - bias))


def _e4m3_to_f32_bits(b):
    neg = b & 0x80
    e = (b >> 3) & 0xF
    m = b & 7
    if e == 0xF:
        if m == 0:
            return 0xFF800000 if neg else 0x7F800000
        return 0xFFC00000 if neg else 0x7FC00000
    v = _decode_finite(e, m, 3, 7)
    return _f32_bits(-v if neg else v)


def _e5m2_to_f32_bits(b):
    return int(np.array([b << 8], dtype=np.uint16).view(np.float16).astype(np.float32).view(np.uint32)[0])


def _f32_to_e4m3fn(fb):
    sign = fb & 0x80000000
    fb ^= sign
    if fb >= (1087 << 20):
        r = 0x7F if fb > 0x7F800000 else 0x7E
    elif fb < (121 << 23):
        f = _bits_f32(fb) + _bits_f32(141 << 23)
        r = _u32(_f32_bits(f) - (141 << 23)) & 0xFF
    else:
        odd = (fb >> 20) & 1
        fb = _u32(fb + _u32(((7 - 127) << 23) + 0x7FFFF))
        fb = _u32(fb + odd)
        r = (fb >> 20) & 0xFF
        if r == 0x7F:
            r = 0x7E
    return r | (sign >> 24)


def _f32_to_e5m2(fb):
    sign = fb & 0x80000000
    fb ^= sign
    if fb >= (143 << 23):
        r = 0x7F if fb > (255 << 23) else 0x7C
    elif fb < (113 << 23):
        f = _bits_f32(fb) + _bits_f32(134 << 23)
        r = _u32(_f32_bits(f) - (134 << 23)) & 0xFF
    else:
        odd = (fb >> 21) & 1
        fb = _u32(fb + _u32(((15 - 127) << 23) + 0xFFFFF))
        fb = _u32(fb + odd)
        r = (fb >> 21) & 0xFF
    return r | (sign >> 24)


def _f32_to_e4m3(fb):
    # generic small-float RNE (round.rs encode_small_float), E4M3: bias 7, inf, NaN 0x7C.
    x = float(_bits_f32(fb))
    sign = (fb >> 31) << 7
    if x != x:
        return 0x7C | sign
    if x in (float("inf"), float("-inf")):
        return (0xF << 3) | sign
    a = abs(x)
    if a == 0.0:
        return sign
    import math

    e = max(math.frexp(a)[1] - 1, 1 - 7)
    q = round(a * 2.0 ** (3 - e))  # Python round() is ties-to-even
    if q >= 16:
        q /= 2
        e += 1
    q = int(q)
    normal = q >= 8
    exp_field = e + 7 if normal else 0
    man = q - 8 if normal else q
    if exp_field > 14:
        return (0xF << 3) | sign
    return (exp_field << 3) | man | sign


_DECODE8 = {}
_ENCODE8 = {}


def _fp8_tables():
    if not _DECODE8:
        for dt, f in (
            (float8_e4m3fn, _e4m3fn_to_f32_bits),
            (float8_e4m3, _e4m3_to_f32_bits),
            (float8_e5m2, _e5m2_to_f32_bits),
        ):
            _DECODE8[dt.name] = np.array([f(b) for b in range(256)], dtype=np.uint32)
        _ENCODE8.update({"float8_e4m3fn": _f32_to_e4m3fn, "float8_e5m2": _f32_to_e5m2, "float8_e4m3": _f32_to_e4m3})


def decode(bits, dt):
    """Raw bits -> fp32 values (exact for floats; integers round to nearest even)."""
    bits = np.asarray(bits, dtype=dt.storage)
    if dt is float32 or dt is tfloat32:
        return bits.view(np.float32).copy()
    if dt is bfloat16:
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
    if dt is float16:
        return bits.view(np.float16).astype(np.float32)
    if dt.kind == "i":
        return to_i64(bits, dt).astype(np.float32)
    if dt.size == 1:
        _fp8_tables()
        return _DECODE8[dt.name][bits.astype(np.int64)].view(np.float32)
    raise NotImplementedError(f"the stand-in does not decode {dt!r}")


def encode(vals, dt):
    """fp32 values -> raw bits of dt: the cast on write (RNE; float->int saturates, NaN -> 0)."""
    f = np.asarray(vals, dtype=np.float32)
    b = f.view(np.uint32)
    nan = np.isnan(f)
    if dt is float32:
        return b.copy()
    if dt is tfloat32:
        lsb = (b >> np.uint32(13)) & np.uint32(1)
        r = ((b.astype(np.uint64) + 0x0FFF + lsb) & 0xFFFFE000).astype(np.uint32)
        r = np.where(np.isinf(f), b, r)
        return np.where(nan, (b | np.uint32(0x00400000)) & np.uint32(0xFFFFE000), r).astype(np.uint32)
    if dt is bfloat16:
        lsb = (b >> np.uint32(16)) & np.uint32(1)
        r = ((b.astype(np.uint64) + 0x7FFF + lsb) >> 16).astype(np.uint16)
        return np.where(nan, np.uint16(0x7FC0), r).astype(np.uint16)
    if dt is float16:
        with np.errstate(over="ignore", invalid="ignore"):
            r = f.astype(np.float16).view(np.uint16)
        sign = ((b >> np.uint32(16)) & np.uint32(0x8000)).astype(np.uint16)
        return np.where(nan, np.uint16(0x7E00) | sign, r).astype(np.uint16)
    if dt.kind == "i":
        d = np.where(nan, 0.0, f.astype(np.float64))
        r = np.clip(np.rint(d), dt.lo, dt.hi).astype(np.int64)
        return (r & dt.mask).astype(dt.storage)
    if dt.size == 1:
        _fp8_tables()
        enc = _ENCODE8[dt.name]
        flat = [enc(int(v)) for v in b.reshape(-1).tolist()]
        return np.array(flat, dtype=np.uint8).reshape(b.shape)
    raise NotImplementedError(f"the stand-in does not encode {dt!r}")


def encode_int(vals, dt):
    """Exact integers -> bits of dt: saturate for integer dtypes, through fp32 for floats."""
    v = np.asarray(vals, dtype=np.int64)
    if dt.kind == "i":
        return (np.clip(v, dt.lo, dt.hi) & dt.mask).astype(dt.storage)
    return encode(v.astype(np.float32), dt)


def wrap_int(vals, dt):
    """Exact integers -> bits of dt, wrapped to its width (two's complement)."""
    return (np.asarray(vals, dtype=np.int64) & dt.mask).astype(dt.storage)


def f32(x):
    """A Python number as trnsim reads an immediate: the f64 rounded to fp32."""
    return np.float32(x)
