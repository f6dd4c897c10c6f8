"""`neuronxcc.nki.isa` (as `nisa`): the instructions the trnconf emitter uses, legacy signatures
(instructions return a tile that the kernel assigns into the destination), with trnsim's
semantics and numerics (docs/isa.md): fp32 math, cast on write by the destination."""

import math

import numpy as np

from . import numerics as nm
from .language import Result, View, as_f32, write


class _Engine:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "nisa." + self.name


tensor_engine = _Engine("tensor_engine")
vector_engine = _Engine("vector_engine")
scalar_engine = _Engine("scalar_engine")
gpsimd_engine = _Engine("gpsimd_engine")
dma_engine = _Engine("dma_engine")
unknown_engine = _Engine("unknown_engine")


class reduce_cmd:  # noqa: N801  (NKI's name)
    idle = "idle"
    reset = "reset"
    reduce = "reduce"
    reset_reduce = "reset_reduce"


# The ScalarE per-lane accumulator registers (persist across activations within one kernel run).
_ACT_ACC = np.zeros(128, dtype=np.float32)


def reset_state():
    _ACT_ACC[:] = 0.0
    _RNG[0] = 0x5EED000000000001


# ---------------------------------------------------------------------------------------------
# ALU operators (sim/src/engine/alu.rs), fp32 in and out.

_BITVEC = {"bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift"}


def _b2f(x):
    return np.asarray(x, dtype=np.float32)


# The simulator writes one canonical quiet NaN for every arithmetic ALU result that is NaN
# (sim/src/engine/alu.rs CANONICAL_NAN): which NaN IEEE propagates is otherwise unspecified.
CANONICAL_NAN = np.array([0x7FC00000], dtype=np.uint32).view(np.float32)[0]


def alu(op, a, b):
    """`a op b` in fp32, with NaN results canonical as the simulator writes them."""
    r = _alu_raw(op, a, b)
    return np.where(np.isnan(r), CANONICAL_NAN, r).astype(np.float32)


def _alu_raw(op, a, b):
    """`a op b` in fp32 (numpy float32 arithmetic is IEEE round to nearest even)."""
    name = op.name
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    with np.errstate(all="ignore"):
        if name == "bypass":
            return np.broadcast_to(a, np.broadcast(a, b).shape).copy()
        if name == "add":
            return a + b
        if name == "subtract":
            return a - b
        if name == "multiply":
            return a * b
        if name in ("maximum", "minimum"):
            nan = np.isnan(a) | np.isnan(b)
            neg_a = np.signbit(a)
            if name == "maximum":
                r = np.where(a == b, np.where(neg_a, b, a), np.where(a > b, a, b))
            else:
                r = np.where(a == b, np.where(neg_a, a, b), np.where(a < b, a, b))
            return np.where(nan, np.float32(np.nan), r).astype(np.float32)
        if name == "equal":
            return _b2f(a == b)
        if name == "not_equal":
            return _b2f(a != b)
        if name == "greater_equal":
            return _b2f(a >= b)
        if name == "greater":
            return _b2f(a > b)
        if name == "less_equal":
            return _b2f(a <= b)
        if name == "less":
            return _b2f(a < b)
        if name == "logical_and":
            return _b2f((a != 0) & (b != 0))
        if name == "logical_or":
            return _b2f((a != 0) | (b != 0))
        if name == "logical_xor":
            return _b2f((a != 0) != (b != 0))
        if name == "logical_not":
            return np.broadcast_to(_b2f(a == 0), np.broadcast(a, b).shape).copy()
        if name == "abs":
            return np.broadcast_to(np.abs(a), np.broadcast(a, b).shape).copy()
        if name == "reciprocal":
            return np.broadcast_to((1.0 / a.astype(np.float64)).astype(np.float32), np.broadcast(a, b).shape).copy()
        if name == "rsqrt":
            r = (1.0 / np.sqrt(a.astype(np.float64))).astype(np.float32)
            return np.broadcast_to(r, np.broadcast(a, b).shape).copy()
        if name == "power":
            r = np.frompyfunc(_c_pow, 2, 1)(a.astype(np.float64), b.astype(np.float64))
            return np.asarray(r, dtype=np.float64).astype(np.float32)
        if name == "average":
            return ((a.astype(np.float64) + b.astype(np.float64)) * 0.5).astype(np.float32)
    raise NotImplementedError(f"ALU operator {name} (fp32 path) in the stand-in")


def _load_libm_pow():
    try:
        import ctypes
        import ctypes.util

        libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        f = libm.pow
        f.restype = ctypes.c_double
        f.argtypes = [ctypes.c_double, ctypes.c_double]
        return f
    except (OSError, AttributeError):
        return None


_LIBM_POW = _load_libm_pow()


def _c_pow(x, y):
    """C `pow`, which Rust's `f64::powf` calls: the C library's own function through ctypes when
    it loads (NaN signs included), else math.pow with C's results where it raises.
    (numpy's power is not used: it computes x**0.5 as sqrt, so (-0)**0.5 = -0, not C's +0.)"""
    if _LIBM_POW is not None:
        return _LIBM_POW(x, y)
    try:
        return math.pow(x, y)
    except OverflowError:
        odd = float(y).is_integer() and int(y) % 2 == 1
        return -math.inf if (x < 0 and odd) else math.inf
    except ValueError:
        if x == 0.0:  # pole: y < 0
            odd = float(y).is_integer() and int(y) % 2 == 1
            return math.copysign(math.inf, x) if odd else math.inf
        return math.nan


def _bits_op(name, a, b, width):
    mask = (1 << width) - 1
    a = np.asarray(a, dtype=np.int64) & 0xFFFFFFFF
    b = np.asarray(b, dtype=np.int64) & 0xFFFFFFFF
    if name == "bitwise_and":
        r = a & b
    elif name == "bitwise_or":
        r = a | b
    elif name == "bitwise_xor":
        r = a ^ b
    elif name == "invert":
        r = ~a
    elif name == "left_shift":
        r = np.where(b >= width, 0, a << np.minimum(b, 63))
    elif name == "right_shift":
        r = np.where(b >= width, 0, (a & mask) >> np.minimum(b, 63))
    else:
        raise NotImplementedError(name)
    return r & mask


def _int_op(name, a, b):
    """GpSimd's exact int32 path (alu.rs `apply_int`)."""

    def wrap(v):
        return ((v + 2**31) & 0xFFFFFFFF) - 2**31

    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    table = {
        "bypass": lambda: a + 0 * b,
        "add": lambda: wrap(a + b),
        "subtract": lambda: wrap(a - b),
        "multiply": lambda: _mul_wrap(a, b),
        "maximum": lambda: np.maximum(a, b),
        "minimum": lambda: np.minimum(a, b),
        "equal": lambda: (a == b).astype(np.int64),
        "not_equal": lambda: (a != b).astype(np.int64),
        "greater_equal": lambda: (a >= b).astype(np.int64),
        "greater": lambda: (a > b).astype(np.int64),
        "less_equal": lambda: (a <= b).astype(np.int64),
        "less": lambda: (a < b).astype(np.int64),
        "logical_and": lambda: ((a != 0) & (b != 0)).astype(np.int64),
        "logical_or": lambda: ((a != 0) | (b != 0)).astype(np.int64),
        "logical_xor": lambda: ((a != 0) != (b != 0)).astype(np.int64),
        "logical_not": lambda: (a == 0).astype(np.int64) + 0 * b,
        "abs": lambda: wrap(np.abs(a)) + 0 * b,
        "bitwise_and": lambda: a & b,
        "bitwise_or": lambda: a | b,
        "bitwise_xor": lambda: a ^ b,
        "invert": lambda: ~a + 0 * b,
        "left_shift": lambda: np.where((b < 0) | (b >= 32), 0, wrap(a << np.clip(b, 0, 31))),
        "right_shift": lambda: np.where((b < 0) | (b >= 32), 0, (a & 0xFFFFFFFF) >> np.clip(b, 0, 31)),
    }
    if name not in table:
        raise NotImplementedError(f"{name} has no exact integer form")
    return table[name]()


def _mul_wrap(a, b):
    # int32 wrapping multiply without int64 overflow: work on the low 32 bits.
    r = (a.astype(np.uint64) * b.astype(np.uint64)) & np.uint64(0xFFFFFFFF)
    return ((r.astype(np.int64) + 2**31) & 0xFFFFFFFF) - 2**31


def _is_int32(dt):
    return dt is nm.int32 or dt is nm.uint32


def _rows(x, p):
    return np.asarray(x).reshape(p, -1)


def _scalar(x, p):
    """A scalar operand: an immediate (rounded to fp32) or a [P, 1] tile."""
    if isinstance(x, View):
        return _rows(x.f32(), p)[:, :1]
    return np.float32(x)


def _scalar_bits(x, p):
    if isinstance(x, View):
        return _rows(x.bits(), p)[:, :1].astype(np.int64)
    return np.int64(int(x))


def _scalar_int(x, p):
    if isinstance(x, View):
        return _rows(nm.to_i64(x.bits(), x.dtype), p)[:, :1]
    return np.int64(int(x))


# ---------------------------------------------------------------------------------------------
# Instructions.


def nc_matmul(stationary, moving, **_kw):
    """`stationary[K, M]ᵀ · moving[K, N]`, fp32 products, sequential fp32 sum from -0 (trnsim's
    `sequential` matmul accumulation)."""
    k = stationary.shape[0]
    a = _rows(stationary.f32(), k)
    b = _rows(moving.f32(), k)
    s = np.full((a.shape[1], b.shape[1]), -0.0, dtype=np.float32)
    for kk in range(k):
        s = s + a[kk][:, None] * b[kk][None, :]
    return Result(s)


def nc_transpose(data, engine=tensor_engine, dtype=None, **_kw):
    p = data.shape[0]
    if engine is vector_engine:
        return Result(_rows(data.bits(), p).T.copy(), "bits", data.dtype)
    # TensorE: a matmul with the identity (NaN/Inf spread as on NC-v2).
    x = _rows(data.f32(), p)
    eye = np.eye(p, dtype=np.float32)
    s = np.full((x.shape[1], p), -0.0, dtype=np.float32)
    with np.errstate(all="ignore"):
        for kk in range(p):
            s = s + x[kk][:, None] * eye[kk][None, :]
    return Result(s)


def tensor_tensor(data1, data2, op, dtype=None, engine=vector_engine, **_kw):
    p = data1.shape[0]
    if op.name in _BITVEC:
        a, b = _rows(data1.bits(), p), _rows(data2.bits(), p)
        return Result(_bits_op(op.name, a, b, 8 * dtype.size), "wrap")
    if engine is gpsimd_engine and _is_int32(data1.dtype) and _is_int32(data2.dtype) and _is_int32(dtype):
        a = _rows(nm.to_i64(data1.bits(), data1.dtype), p)
        b = _rows(nm.to_i64(data2.bits(), data2.dtype), p)
        return Result(_int_op(op.name, a, b), "wrap")
    return Result(alu(op, _rows(data1.f32(), p), _rows(data2.f32(), p)))


def tensor_scalar(
    data,
    op0,
    operand0,
    reverse0=False,
    op1=None,
    operand1=None,
    reverse1=False,
    dtype=None,
    engine=vector_engine,
    **_kw,
):
    p = data.shape[0]
    if op0.name in _BITVEC:
        w = 8 * dtype.size
        x = _rows(data.bits(), p).astype(np.int64)
        s0 = _scalar_bits(operand0, p)
        t = _bits_op(op0.name, s0, x, w) if reverse0 else _bits_op(op0.name, x, s0, w)
        if op1 is not None:
            s1 = _scalar_bits(operand1, p)
            t = _bits_op(op1.name, s1, t, w) if reverse1 else _bits_op(op1.name, t, s1, w)
        return Result(np.broadcast_to(t, x.shape).copy(), "wrap")
    if engine is gpsimd_engine and _is_int32(data.dtype) and _is_int32(dtype):
        x = _rows(nm.to_i64(data.bits(), data.dtype), p)
        s0 = _scalar_int(operand0, p)
        t = _int_op(op0.name, s0, x) if reverse0 else _int_op(op0.name, x, s0)
        if op1 is not None:
            s1 = _scalar_int(operand1, p)
            t = _int_op(op1.name, s1, t) if reverse1 else _int_op(op1.name, t, s1)
        return Result(np.broadcast_to(t, x.shape).copy(), "wrap")
    x = _rows(data.f32(), p)
    s0 = _scalar(operand0, p)
    t = alu(op0, s0, x) if reverse0 else alu(op0, x, s0)
    t = np.broadcast_to(t, x.shape)
    if op1 is not None:
        s1 = _scalar(operand1, p)
        t = alu(op1, s1, t) if reverse1 else alu(op1, t, s1)
    return Result(np.broadcast_to(t, x.shape).copy())


def scalar_tensor_tensor(data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, dtype=None, **_kw):
    p = data.shape[0]
    x = _rows(data.f32(), p)
    s0 = _scalar(operand0, p)
    t = np.broadcast_to(alu(op0, s0, x) if reverse0 else alu(op0, x, s0), x.shape)
    in1 = _rows(operand1.f32(), p)
    return Result(alu(op1, in1, t) if reverse1 else alu(op1, t, in1))


_IDENTITY = {
    "add": 0.0,
    "subtract": 0.0,
    "average": 0.0,
    "logical_or": 0.0,
    "logical_xor": 0.0,
    "multiply": 1.0,
    "logical_and": 1.0,
    "maximum": -np.inf,
    "minimum": np.inf,
}


def _fold(op, groups):
    """Sequential fp32 fold over the last axis from the operator's identity (VectorE rule)."""
    fold_op = op
    if op.name == "average":
        from .language import add

        fold_op = add
    acc = np.full(groups.shape[:-1], _IDENTITY[op.name], dtype=np.float32)
    for j in range(groups.shape[-1]):
        acc = alu(fold_op, acc, groups[..., j])
    if op.name == "average":
        with np.errstate(all="ignore"):
            acc = (acc / np.float32(groups.shape[-1])).astype(np.float32)
    return acc


def tensor_reduce(op, data, axis, negate=False, keepdims=False, dtype=None, **_kw):
    shape = data.shape
    p = shape[0]
    axes = (axis,) if np.isscalar(axis) else tuple(axis)
    reduced = int(np.prod([shape[a] for a in axes]))
    if op.name in _BITVEC:
        x = data.bits().astype(np.int64).reshape(p, -1, reduced)
        acc = np.full(x.shape[:-1], 0xFFFFFFFF if op.name == "bitwise_and" else 0, dtype=np.int64)
        for j in range(reduced):
            acc = _bits_op(op.name, acc, x[..., j], 32)
        return Result(acc, "wrap")
    x = data.f32().reshape(p, -1, reduced)
    acc = _fold(op, x)
    if negate:
        acc = acc * np.float32(-1.0)
    return Result(acc)


def tensor_copy(src, dtype=None, engine=vector_engine, **_kw):
    return Result(src.bits(), "bits", src.dtype)


def reciprocal(data, dtype=None, **_kw):
    with np.errstate(all="ignore"):
        return Result((1.0 / data.f32().astype(np.float64)).astype(np.float32))


def memset(shape, value, dtype, engine=vector_engine, **_kw):
    if dtype.is_int:
        return Result(np.full(shape, int(value), dtype=np.int64), "sat")
    return Result(np.full(shape, np.float32(value), dtype=np.float32))


def iota(expr, dtype=None, **_kw):
    v = np.asarray(expr, dtype=np.int64)
    v = ((v + 2**31) & 0xFFFFFFFF) - 2**31  # int32 wrapping (trnsim's choice)
    return Result(v, "sat")


def tensor_partition_reduce(op, data, dtype=None, **_kw):
    p = data.shape[0]
    if data.dtype.is_int and dtype is not None and dtype.is_int:
        x = _rows(nm.to_i64(data.bits(), data.dtype), p)
        acc = x[0]
        for k in range(1, p):
            acc = _int_op(op.name, acc, x[k])
        return Result(acc[None, :], "wrap")
    x = _rows(data.f32(), p)
    if op.name == "average":
        from .language import add

        acc = x[0]
        for k in range(1, p):
            acc = alu(add, acc, x[k])
        with np.errstate(all="ignore"):
            acc = (acc.astype(np.float64) / p).astype(np.float32)
        return Result(acc[None, :])
    acc = x[0]
    for k in range(1, p):
        acc = alu(op, acc, x[k])
    return Result(acc[None, :])


# --- ScalarE activation: f64 evaluation rounded once to fp32 (sim/src/engine/activation.rs). ---


def _sigmoid(x):
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def _softplus(x):
    return x if x > 30.0 else math.log1p(math.exp(x))


def _safe(f):
    def g(x):
        try:
            return f(x)
        except (ValueError, OverflowError):
            return _ieee(f, x)

    return g


def _ieee(f, x):
    # math.* raises where C returns NaN / inf; reproduce the C results used by trnsim.
    with np.errstate(all="ignore"):
        return float(_NUMPY_FALLBACK.get(f, lambda v: np.nan)(np.float64(x)))


_SQRT2 = math.sqrt(2.0)
_FUNCS = {
    "square": lambda v: v * v,
    "sigmoid": _sigmoid,
    "relu": lambda v: v if (v > 0.0 or math.isnan(v)) else 0.0,
    "gelu": lambda v: 0.5 * v * (1.0 + math.erf(v / _SQRT2)),
    "gelu_dx": lambda v: 0.5 * (1.0 + math.erf(v / _SQRT2)) + v * (math.exp(-0.5 * v * v) / math.sqrt(2.0 * math.pi)),
    "gelu_apprx_tanh": lambda v: 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v * v * v))),
    "gelu_apprx_sigmoid": lambda v: v * _sigmoid(1.702 * v),
    "gelu_apprx_sigmoid_dx": lambda v: (lambda s: s + 1.702 * v * s * (1.0 - s))(_sigmoid(1.702 * v)),
    "silu": lambda v: v * _sigmoid(v),
    "silu_dx": lambda v: (lambda s: s * (1.0 + v * (1.0 - s)))(_sigmoid(v)),
    "tanh": math.tanh,
    "softplus": _softplus,
    "mish": lambda v: v * math.tanh(_softplus(v)),
    "erf": math.erf,
    "erf_dx": lambda v: 2.0 / math.sqrt(math.pi) * math.exp(-v * v),
    "exp": math.exp,
    "log": math.log,
    "sin": math.sin,
    "arctan": math.atan,
    "sqrt": math.sqrt,
    "rsqrt": lambda v: 1.0 / math.sqrt(v),
    "reciprocal": lambda v: 1.0 / v,
    "sign": lambda v: 1.0 if v > 0.0 else (-1.0 if v < 0.0 else v),
    "abs": abs,
}
_NUMPY_FALLBACK = {math.exp: np.exp, math.log: np.log, math.sqrt: np.sqrt, math.sin: np.sin}


def _act_eval(name, t):
    if name == "copy":
        return t
    f = _FUNCS[name]
    flat = t.astype(np.float64).reshape(-1)
    out = np.empty_like(flat)
    g = _safe(f)
    for k, v in enumerate(flat.tolist()):
        try:
            out[k] = g(v)
        except ZeroDivisionError:
            out[k] = math.copysign(math.inf, v) if name in ("reciprocal", "rsqrt") else math.nan
    with np.errstate(all="ignore"):
        return out.astype(np.float32).reshape(t.shape)


def activation(
    op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle, dtype=None, **_kw
):
    p = data.shape[0]
    x = _rows(data.f32(), p)
    with np.errstate(all="ignore"):
        t = x * _scalar(scale, p)
        if bias is not None:
            t = t + _scalar(bias, p)
    y = _act_eval(op.name, np.asarray(t, dtype=np.float32))
    # trnsim passes every function value through its ALU (a bypass), whose NaN results are
    # canonical: gelu(-inf) = -inf * 0 is 0x7FC00000 there, not the host's negative NaN.
    y = np.where(np.isnan(y), CANONICAL_NAN, y).astype(np.float32)
    lanes = data.lanes()
    if reduce_cmd != "idle":
        sums = np.zeros(p, dtype=np.float32)
        with np.errstate(all="ignore"):
            for j in range(y.shape[1]):
                sums = sums + y[:, j]
            sums = np.where(np.isnan(sums), CANONICAL_NAN, sums).astype(np.float32)
            if reduce_cmd == "reset":
                _ACT_ACC[lanes] = 0.0
            elif reduce_cmd == "reduce":
                _ACT_ACC[lanes] = _ACT_ACC[lanes] + sums
            elif reduce_cmd == "reset_reduce":
                _ACT_ACC[lanes] = sums
    if reduce_res is not None:
        write(reduce_res, Result(_ACT_ACC[lanes].reshape(p, 1).copy()))
    return Result(y)


class oob_mode:  # noqa: N801  (NKI's name)
    error = "error"
    skip = "skip"


def _positions(view):
    """Flat element positions of a view in its tensor, and which rows are in bounds (an
    indirect index may point outside the tensor)."""
    size = view.tensor.bits.size
    idx = view.idx
    if isinstance(idx, np.ndarray) and view.tensor.bits.ndim == 1:
        pos = np.asarray(idx, dtype=np.int64)
    elif isinstance(idx, tuple) and any(isinstance(k, View) for k in idx):
        # `t.reshape((M, row))[idx_tile, cols]`: a dynamic index on the first dimension; the
        # positions are computed without numpy's bounds check (out-of-range rows are flagged)
        shape = view.tensor.bits.shape
        pos = np.int64(0)
        for d, k in enumerate(idx):
            step = int(np.prod(shape[d + 1 :], dtype=np.int64))
            if isinstance(k, View):
                k = k.values()
            elif isinstance(k, slice):
                k = np.arange(*k.indices(shape[d]))
            pos = pos + np.asarray(k, dtype=np.int64) * step
    else:
        pos = np.arange(size, dtype=np.int64).reshape(view.tensor.bits.shape)[idx]
    rows = pos.shape[0] if pos.ndim else 1
    pos = pos.reshape(rows, -1)
    return pos, ((pos >= 0) & (pos < size)).all(axis=1)


def _indirect_copy(dst, src, rmw, oob):
    """Gather/scatter, row by row in order (trnsim's dma.rs): an out-of-bounds row is an error
    or skipped; duplicate scatter rows overwrite (or add) in order."""
    dpos, dok = _positions(dst)
    spos, sok = _positions(src)
    dflat = dst.tensor.bits.reshape(-1)
    sflat = src.tensor.bits.reshape(-1)
    for r in range(dpos.shape[0]):
        if not (dok[r] and sok[r]):
            if oob == "skip":
                continue
            raise IndexError(f"indirect DMA row {r} addresses outside the tensor")
        sb = sflat[spos[r]]
        if rmw is not None:
            with np.errstate(all="ignore"):
                v = nm.decode(dflat[dpos[r]], dst.dtype) + nm.decode(sb, src.dtype)
            dflat[dpos[r]] = nm.encode(v, dst.dtype)
        elif src.dtype is dst.dtype:
            dflat[dpos[r]] = sb
        else:
            dflat[dpos[r]] = nm.encode(nm.decode(sb, src.dtype), dst.dtype)


def dma_copy(dst, src, dst_rmw_op=None, oob_mode=None, **_kw):
    """DMA: elements matched in order; same dtype is a bit copy, else through fp32;
    `dst_rmw_op=np.add` adds in fp32 at the destination. With `oob_mode` (emitted for indirect
    DMAs) the copy goes row by row."""
    if dst_rmw_op is not None and dst_rmw_op is not np.add:
        raise NotImplementedError(f"dst_rmw_op={dst_rmw_op}")
    if oob_mode is not None:
        _indirect_copy(dst, src, dst_rmw_op, oob_mode)
        return
    if dst_rmw_op is not None:
        a = dst.f32().reshape(-1)
        b = as_f32(src).reshape(-1)
        with np.errstate(all="ignore"):
            write(dst, Result(a + b))
        return
    write(dst, src)


def tensor_copy_predicated(src, dst, predicate, reverse_pred=False, **_kw):
    """Where `(predicate != 0) != reverse_pred`: dst = src (bit copy); elsewhere dst is unchanged."""
    p = dst.shape[0]
    mask = (_rows(predicate.bits(), p) != 0) != bool(reverse_pred)
    old = _rows(dst.bits(), p)
    new = np.where(mask, _rows(src.bits(), p).astype(old.dtype), old)
    write(dst, Result(new, "bits", dst.dtype))


def tensor_tensor_scan(data0, data1, initial, op0, op1, dtype=None, **_kw):
    """r = initial; r = (data0[i] op0 r) op1 data1[i]; out[i] = r (fp32 state, per partition)."""
    p = data0.shape[0]
    a, b = _rows(data0.f32(), p), _rows(data1.f32(), p)
    r = np.broadcast_to(_scalar(initial, p), (p, 1)).reshape(p).astype(np.float32)
    out = np.empty_like(a)
    for i in range(a.shape[1]):
        r = alu(op1, alu(op0, a[:, i], r), b[:, i])
        out[:, i] = r
    return Result(out)


def tensor_scalar_reduce(data, op0, operand0, reduce_op, reduce_res, dtype=None, **_kw):
    """y = data op0 operand0 (fp32); reduce_res[p] = fold(reduce_op, y[p]) before the cast."""
    p = data.shape[0]
    x = _rows(data.f32(), p)
    y = np.broadcast_to(alu(op0, x, _scalar(operand0, p)), x.shape).astype(np.float32)
    write(reduce_res, Result(_fold(reduce_op, y).reshape(p, 1)))
    return Result(y)


def affine_select(pred, on_true_tile, on_false_value, dtype=None, **_kw):
    """dst = pred ? on_true : on_false; selected elements are bit copies when on_true has dst's
    dtype, else through fp32; on_false is rounded to fp32 and cast on write."""
    p = on_true_tile.shape[0]
    mask = _rows(np.asarray(pred, dtype=bool), p)
    if dtype is None or on_true_tile.dtype is dtype:
        t = _rows(on_true_tile.bits(), p)
        f = nm.encode(np.full(t.shape, np.float32(on_false_value)), on_true_tile.dtype)
        return Result(np.where(mask, t, f), "bits", on_true_tile.dtype)
    t = _rows(on_true_tile.f32(), p)
    return Result(np.where(mask, t, np.float32(on_false_value)).astype(np.float32))


# --- The VectorE random generator: trnsim's PCG32 (sim/src/engine/vector.rs). The hardware PRNG
# is unpublished; on a device these instructions give other numbers. ---

_PCG_MULT = 6364136223846793005
_PCG_INC = 1442695040888963407
_M64 = (1 << 64) - 1
_RNG = [0x5EED000000000001]


def _pcg32_step(state):
    old = state
    new = (old * _PCG_MULT + _PCG_INC) & _M64
    x = (((old >> 18) ^ old) >> 27) & 0xFFFFFFFF
    rot = old >> 59
    return new, ((x >> rot) | (x << ((-rot) & 31))) & 0xFFFFFFFF


def _draws(n):
    s = _RNG[0]
    out = np.empty(n, dtype=np.int64)
    for k in range(n):
        s, out[k] = _pcg32_step(s)
    _RNG[0] = s
    return out


def set_rng_seed(seed, **_kw):
    if isinstance(seed, View):
        seed = int(nm.to_i64(seed.bits(), seed.dtype).reshape(-1)[0])
    s, _ = _pcg32_step(0)
    s = (s + (int(seed) & 0xFFFFFFFF)) & _M64
    s, _ = _pcg32_step(s)
    _RNG[0] = s


def rng(shape, dtype, **_kw):
    n = int(np.prod(shape))
    return Result(_draws(n).reshape(shape) & dtype.mask, "wrap")


def dropout(data, prob, dtype=None, **_kw):
    p = data.shape[0]
    x = _rows(data.f32(), p)
    q = np.broadcast_to(_scalar(prob, p), (p, 1)).astype(np.float64) * 4294967296.0
    u = _draws(x.size).reshape(x.shape).astype(np.float64)
    return Result(np.where(u < q, np.float32(0.0), x).astype(np.float32))


# --- VectorE statistics and selection (sim/src/engine/vector.rs) ---


def _group_stats(g):
    """(count, mean, M2) of the columns of g [P, n], two fp32 passes in index order."""
    p, n = g.shape
    if n == 0:
        return np.zeros((p, 3), dtype=np.float32)
    with np.errstate(all="ignore"):
        s = np.zeros(p, dtype=np.float32)
        for j in range(n):
            s = s + g[:, j]
        mean = (s / np.float32(n)).astype(np.float32)
        m2 = np.zeros(p, dtype=np.float32)
        for j in range(n):
            d = g[:, j] - mean
            m2 = m2 + d * d
    return np.stack([np.full(p, np.float32(n)), mean, m2], axis=1).astype(np.float32)


def bn_stats(data, dtype=None, **_kw):
    p = data.shape[0]
    x = _rows(data.f32(), p)
    out = np.concatenate([_group_stats(x[:, 0::2]), _group_stats(x[:, 1::2])], axis=1)
    return Result(np.where(np.isnan(out), CANONICAL_NAN, out).astype(np.float32))


def bn_aggr(data, dtype=None, **_kw):
    p = data.shape[0]
    x = _rows(data.f32(), p)
    out = np.empty((p, 2), dtype=np.float32)
    f32 = np.float32
    with np.errstate(all="ignore"):
        for q in range(p):
            n, mean, m2 = f32(0), f32(0), f32(0)
            for t in range(x.shape[1] // 3):
                nb, mb, m2b = x[q, 3 * t], x[q, 3 * t + 1], x[q, 3 * t + 2]
                if nb == 0:
                    continue
                nn = f32(n + nb)
                delta = f32(mb - mean)
                r = f32(nb / nn)
                mean = f32(mean + f32(delta * r))
                corr = f32(f32(f32(delta * delta) * n) * r)
                m2 = f32(f32(m2 + m2b) + corr)
                n = nn
            out[q] = (np.nan, np.nan) if n == 0 else (mean, f32(m2 / n))
    # The simulator folds through its ALU, whose NaN results are canonical.
    return Result(np.where(np.isnan(out), CANONICAL_NAN, out).astype(np.float32))


def max8(src, dtype=None, **_kw):
    """The 8 largest per partition, descending, stable; NaN ranks above +inf (trnsim's
    `nan_max_min: propagate`)."""
    p = src.shape[0]
    x = _rows(src.f32(), p)
    nan = np.isnan(x)
    out = np.empty((p, 8), dtype=np.float32)
    for q in range(p):
        order = np.lexsort((np.where(nan[q], 0.0, -x[q].astype(np.float64)), ~nan[q]))
        out[q] = x[q][order[:8]]
    return Result(out)


def nc_match_replace8(data, vals, imm, dst_idx=None, dtype=None, **_kw):
    """For k = 7..0: the first element of the partition's data equal to vals[k] (fp32 equality:
    -0 == +0, NaN never matches; elements replaced earlier in this instruction are skipped)
    becomes imm, and its index goes to dst_idx[k] (all ones when not found). The other elements
    are a bit copy when the destination has data's dtype, else go through fp32 (trnsim's
    match_replace8)."""
    p = data.shape[0]
    d = _rows(data.f32(), p)
    v = _rows(vals.f32(), p)
    replaced = np.zeros(d.shape, dtype=bool)
    sentinel = np.iinfo(dst_idx.dtype.storage).max if dst_idx is not None else 0xFFFFFFFF
    idx = np.full((p, v.shape[1]), sentinel, dtype=np.uint64)
    for q in range(p):
        for k in range(v.shape[1] - 1, -1, -1):
            hits = np.flatnonzero(~replaced[q] & (d[q] == v[q, k]))
            if hits.size:
                replaced[q, hits[0]] = True
                idx[q, k] = hits[0]
    if dst_idx is not None:
        write(dst_idx, Result(idx.astype(dst_idx.dtype.storage), "bits", dst_idx.dtype))
    if dtype is None or dtype is data.dtype:
        bits = _rows(data.bits(), p).copy()
        bits[replaced] = nm.encode(np.array([imm], dtype=np.float32), data.dtype)[0]
        return Result(bits.reshape(data.shape), "bits", data.dtype)
    return Result(np.where(replaced, np.float32(imm), d).astype(np.float32).reshape(data.shape))


def select_reduce(predicate, on_true, on_false, reverse_pred=False, reduce_res=None, dtype=None, dst=None, **_kw):
    """y = (predicate != 0) != reverse_pred ? on_true : on_false (fp32); optional max-reduction
    of y per partition (from -inf, index order) into reduce_res."""
    p = on_true.shape[0]
    mask = (_rows(predicate.bits(), p) != 0) != bool(reverse_pred)
    t = _rows(on_true.f32(), p)
    y = np.where(mask, t, np.broadcast_to(_scalar(on_false, p), t.shape)).astype(np.float32)
    if reduce_res is not None:
        from .language import maximum

        write(reduce_res, Result(_fold(maximum, y).reshape(p, 1)))
    if dst is not None:  # the legacy call writes dst in place
        write(dst, Result(y))
        return None
    return Result(y)
