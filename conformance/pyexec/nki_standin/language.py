"""`neuronxcc.nki.language` (as `nl`): the subset the trnconf emitter uses.

Tensors hold raw bits; indexing a tensor gives a `View` (tensor + numpy index), assigning a
`Result` (what `nisa.*` returns) or a `View` into a view writes it with the destination's cast."""

import numpy as np

from . import numerics as nm
from .numerics import (  # noqa: F401  (re-exported as nl.<dtype>)
    bfloat16,
    bool_,
    float8_e4m3,
    float8_e4m3fn,
    float8_e5m2,
    float16,
    float32,
    int8,
    int16,
    int32,
    tfloat32,
    uint8,
    uint16,
    uint32,
)


class _Buffer:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "nl." + self.name


sbuf = _Buffer("sbuf")
psum = _Buffer("psum")
hbm = _Buffer("hbm")
shared_hbm = _Buffer("shared_hbm")
private_hbm = _Buffer("private_hbm")


class _Token:
    """An operator or activation-function name (`nl.add`, `nl.exp`, ...)."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "nl." + self.name


_ALU = [
    "bypass",
    "add",
    "subtract",
    "multiply",
    "maximum",
    "minimum",
    "equal",
    "not_equal",
    "greater_equal",
    "greater",
    "less_equal",
    "less",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "abs",
    "reciprocal",
    "rsqrt",
    "power",
    "average",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "invert",
    "left_shift",
    "right_shift",
]
_ACT = [
    "copy",
    "square",
    "sigmoid",
    "relu",
    "gelu",
    "gelu_dx",
    "gelu_apprx_tanh",
    "gelu_apprx_sigmoid",
    "gelu_apprx_sigmoid_dx",
    "silu",
    "silu_dx",
    "tanh",
    "softplus",
    "mish",
    "erf",
    "erf_dx",
    "exp",
    "log",
    "sin",
    "arctan",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "sign",
    "abs",
]
for _n in set(_ALU + _ACT):
    globals()[_n] = _Token(_n)


def arange(n):
    """An index vector (int64); `nl.arange(n)[None, :]` etc. build affine index expressions."""
    return np.arange(n, dtype=np.int64)


def affine_range(*args):
    return range(*args)


class Result:
    """What an instruction produced, before the write casts it into the destination.

    kind: 'f32' (fp32 values, cast on write), 'bits' (raw bits of `dtype`: a bit copy when the
    destination has that dtype, else through fp32), 'sat' (exact integers, saturated on write),
    'wrap' (exact integers, wrapped to the destination's width)."""

    def __init__(self, values, kind="f32", dtype=None):
        self.values = values
        self.kind = kind
        self.dtype = dtype

    def f32(self):
        if self.kind == "f32":
            return np.asarray(self.values, dtype=np.float32)
        if self.kind == "bits":
            return nm.decode(self.values, self.dtype)
        return np.asarray(self.values, dtype=np.int64).astype(np.float32)

    @property
    def shape(self):
        return np.shape(self.values)


class View:
    """`tensor[index]`."""

    def __init__(self, tensor, idx):
        self.tensor = tensor
        self.idx = idx

    @property
    def dtype(self):
        return self.tensor.dtype

    def bits(self):
        return np.asarray(self.tensor.bits[self.idx])

    def f32(self):
        return nm.decode(self.bits(), self.dtype)

    @property
    def shape(self):
        return self.bits().shape

    def lanes(self):
        """Absolute partition (lane) of every row of the view."""
        idx0 = self.idx[0] if isinstance(self.idx, tuple) else self.idx
        p = self.shape[0]
        if isinstance(idx0, slice):
            return np.arange(idx0.start or 0, (idx0.start or 0) + p)
        a = np.asarray(idx0)
        return np.broadcast_to(a, a.shape[:1] + (1,) * (a.ndim - 1)).reshape(a.shape[0], -1)[:, 0][:p]

    # A view used as a dynamic index (indirect DMA): its values, exact for integer tiles.
    def values(self):
        return nm.to_i64(self.bits(), self.dtype) if self.dtype.is_int else self.f32()

    def __mul__(self, k):
        return self.values() * k

    __rmul__ = __mul__

    def __add__(self, k):
        return self.values() + k

    __radd__ = __add__

    def reshape(self, shape):
        return self.values().reshape(shape)

    def __iadd__(self, other):
        # `t[idx] += x`: Python reads t[idx] (this view), adds, and assigns the sum back.
        a = self.f32()
        b = as_f32(other).reshape(a.shape)
        return Result(a + b)


class Tensor:
    """`nl.ndarray`: a tensor of raw bits in some buffer."""

    def __init__(self, shape, dtype, buffer=None, bits=None):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.buffer = buffer
        self.bits = bits if bits is not None else np.zeros(self.shape, dtype=dtype.storage)

    def reshape(self, shape):
        return Tensor(shape, self.dtype, self.buffer, self.bits.reshape(tuple(shape)))

    def view(self, dtype):
        """A bitcast: the same bytes as `dtype` (the last axis rescaled)."""
        bits = self.bits.view(dtype.storage)
        return Tensor(bits.shape, dtype, self.buffer, bits)

    def __getitem__(self, idx):
        return View(self, idx)

    def __setitem__(self, idx, value):
        write(View(self, idx), value)

    def __repr__(self):
        return f"Tensor({self.shape}, {self.dtype!r}, {self.buffer!r})"


def as_f32(x):
    if isinstance(x, (View, Result)):
        return x.f32()
    return np.asarray(np.float32(x) if np.isscalar(x) else x, dtype=np.float32)


def write(dst, value):
    """Writes `value` (a Result, a View or a number) into view `dst`, element by element in
    order (partition-major, then free index), with trnsim's cast on write."""
    target_shape = dst.shape
    n = int(np.prod(target_shape))
    dt = dst.dtype
    if isinstance(value, View):
        value = Result(value.bits(), "bits", value.dtype)
    elif not isinstance(value, Result):
        value = Result(np.full(target_shape, np.float32(value)))
    vals = np.asarray(value.values)
    if vals.size != n:
        raise ValueError(f"writing {vals.size} elements ({vals.shape}) into a view of {n} ({target_shape})")
    vals = vals.reshape(target_shape)
    if value.kind == "bits":
        bits = vals.astype(dt.storage) if value.dtype is dt else nm.encode(nm.decode(vals, value.dtype), dt)
    elif value.kind == "f32":
        bits = nm.encode(vals, dt)
    elif value.kind == "sat":
        bits = nm.encode_int(vals, dt)
    elif value.kind == "wrap":
        bits = nm.wrap_int(vals, dt)
    else:
        raise ValueError(value.kind)
    dst.tensor.bits[dst.idx] = bits


def ndarray(shape, dtype, buffer=None, **_kw):
    return Tensor(shape, dtype, buffer)


def zeros(shape, dtype, buffer=None, **_kw):
    return Tensor(shape, dtype, buffer)


def load(src, dtype=None, **_kw):
    return Result(src.bits(), "bits", src.dtype)


def store(dst, value, **_kw):
    write(dst, value)


def random_seed(seed, **_kw):
    """`nl.random_seed`: seeds VectorE's generator, as the ISA's set_rng_seed (the emitter's
    legacy spelling of it)."""
    from .isa import set_rng_seed

    set_rng_seed(seed)
