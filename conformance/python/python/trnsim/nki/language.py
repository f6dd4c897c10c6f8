"""`neuronxcc.nki.language` (legacy NKI, Neuron SDK 2.26-2.28) traced into trnsim instructions.

Engine choices where the language leaves them to the compiler are listed in docs/nki.md
("Engine choices"); each function below says which instruction(s) it emits.
"""

import builtins
import math

import numpy as np

from . import _emit as E
from ._build import (  # noqa: F401  (shared with isa.py)
    _accumulate,
    _assign,
    _axes,
    _copy_into,
    _fit_rank,
    _imm,
    _indirect,
    _merged_kept,
    _on_sbuf,
    _reduce,
    _unary_vec,
    load_indirect,
    restrict_dyn,
)
from ._core import (  # noqa: F401  (dtypes re-exported as nl.<dtype>)
    BUFFERS,
    Aff,
    DynSlice,
    DynView,
    HbmStorage,
    MGrid,
    NkiError,
    Pred,
    View,
    _Buffer,
    arange,
    as_dtype,
    bfloat16,
    bool_,
    broadcast_shapes,
    caller_loc,
    float8_e4m3,
    float8_e4m3fn,
    float8_e5m2,
    float16,
    float32,
    int8,
    int16,
    int32,
    is_float,
    mask_box,
    promote,
    scalar_dtype,
    source_name,
    storage_of,
    tfloat32,
    trn_name,
    uint8,
    uint16,
    uint32,
)
from ._emit import T, emit, new_tile, prep, scalar_operand

# ---------------------------------------------------------------------------------------------
# buffers, sizes, index helpers


# nl.sbuf, …: str-valued buffer kinds, also the tensors' `.buffer` values (_core.BUFFERS)
sbuf = BUFFERS["sbuf"]
psum = BUFFERS["psum"]
hbm = BUFFERS["hbm"]
private_hbm = BUFFERS["private_hbm"]
shared_hbm = BUFFERS["shared_hbm"]


class par_dim(int):
    """Marks the partition dimension in a tile shape: `(4, nl.par_dim(128), 512)`."""

    def __repr__(self):
        return f"par_dim({int(self)})"


class tile_size:
    pmax = 128
    psum_fmax = 512
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_min_align = 4
    sbuf_min_align = 1
    total_available_sbuf_size = 180_224


class _FInfo:
    def __init__(self, dt):
        fi = np.finfo(np.float32) if dt is None else None
        self.min = float(fi.min) if fi is not None else None
        self.max = float(fi.max) if fi is not None else None


fp32 = _FInfo(None)

mgrid = MGrid()


def ds(start, size):
    if isinstance(start, View):
        # a start read from a tile at run time (a dynamic slice): not a form trnsim's DMAs take
        raise NkiError(
            "nl.ds with a tile-valued start (a run-time offset) is not supported by trnsim: index the "
            "first dimension of an HBM tensor with a [P, 1] index tile instead (an indirect DMA), or "
            "use nisa.tensor_copy_dynamic_src/dst on chip",
            caller_loc()[0],
        )
    return DynSlice(start, size)


def affine_range(*args, **kwargs):
    """Iterations without carried dependencies (except `+=` into an accumulator); the trnsim
    front-end unrolls every loop at trace time, in order."""
    return builtins.range(*[int(a) for a in args])


def sequential_range(*args, **kwargs):
    return builtins.range(*[int(a) for a in args])


def static_range(*args, **kwargs):
    return builtins.range(*[int(a) for a in args])


# ---------------------------------------------------------------------------------------------
# SPMD


def program_id(axis=0):
    t = T()
    if axis >= len(t.program_id):
        raise NkiError(f"program_id({axis}) on a launch grid of rank {len(t.program_id)}", caller_loc()[0])
    return t.program_id[axis]


def num_programs(axes=None):
    t = T()
    if axes is None:
        return int(np.prod(t.grid)) if t.grid else 1
    if isinstance(axes, (tuple, list)):
        return int(np.prod([t.grid[a] for a in axes]))
    return t.grid[axes] if axes < len(t.grid) else 1


def program_ndim():
    return len(T().grid)


class nc(int):
    """`nl.nc(n)`: a grid dimension spread over n NeuronCores (Trn2 LNC). On trnsim every SPMD
    instance runs in turn on one simulated core, as AWS's simulator runs them."""

    def __new__(cls, n):
        return int.__new__(cls, n)

    def __mul__(self, o):
        return spmd_dim(self, o)

    __rmul__ = __mul__


def spmd_dim(*dims):
    return int(np.prod([int(d) for d in dims]))


def device_print(prefix, tensor=None):
    """AWS's simulator prints here; trnsim has no values at trace time (a documented gap)."""
    return


# ---------------------------------------------------------------------------------------------
# creation


def _buffer_name(buffer):
    if buffer is None:
        return "sbuf"
    return getattr(buffer, "name", buffer)


def ndarray(shape, dtype=float32, *, buffer=None, name="", **kwargs):
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    b = _buffer_name(buffer)
    loc, fn, line = caller_loc()
    if b in ("hbm", "private_hbm", "shared_hbm"):
        if kwargs.get("address") is not None:
            raise NkiError(
                f"nl.ndarray(address={kwargs['address']!r}) on {b}: an explicit address places an SBUF "
                "or PSUM tile (docs/nki-allocation.md); HBM tensors are placed by the runtime",
                loc,
            )
        kind = "shared" if b == "shared_hbm" else "private"
        nm = name or source_name(fn, line) or None
        st = T().new_hbm([int(s) for s in shape], dtype, kind, nm, loc=loc)
        return View.full(st)
    if b not in ("sbuf", "psum"):
        raise NkiError(f"unknown buffer {buffer!r}", loc)
    from ._alloc import direct  # where the kernel places the tile, if it says (docs/nki-allocation.md)

    return direct(new_tile(shape, dtype, b, name=name or None, loc=loc), buffer, kwargs.get("address"), loc)


def _fill(shape, value, dtype, buffer, name):
    b = _buffer_name(buffer)
    loc = caller_loc()[0]
    if b in ("hbm", "private_hbm", "shared_hbm"):
        raise NkiError("HBM tensors take no initial value (allocate with nl.ndarray and store into it)", loc)
    t = ndarray(shape, dtype, buffer=buffer, name=name)
    emit("vector", "memset", {"dst": t._ap(loc=loc), "value": _imm(value, t.dtype)}, loc, writes=[t], fresh=t)
    return t


def zeros(shape, dtype=float32, *, buffer=None, name="", **kwargs):
    """VectorE memset (VectorE also reaches PSUM, where accumulators live)."""
    return _fill(shape, 0.0, dtype, buffer, name)


def ones(shape, dtype=float32, *, buffer=None, name="", **kwargs):
    return _fill(shape, 1.0, dtype, buffer, name)


def full(shape, fill_value, dtype=float32, *, buffer=None, name="", **kwargs):
    return _fill(shape, fill_value, dtype, buffer, name)


def empty_like(a, dtype=None, *, buffer=None, name="", **kwargs):
    return ndarray(a.shape, dtype or a.dtype, buffer=buffer if buffer is not None else a.buffer, name=name)


def zeros_like(a, dtype=None, *, buffer=None, name="", **kwargs):
    return zeros(a.shape, dtype or a.dtype, buffer=buffer if buffer is not None else a.buffer, name=name)


def ones_like(a, dtype=None, *, buffer=None, name="", **kwargs):
    return ones(a.shape, dtype or a.dtype, buffer=buffer if buffer is not None else a.buffer, name=name)


def full_like(a, fill_value, dtype=None, *, buffer=None, name="", **kwargs):
    return full(a.shape, fill_value, dtype or a.dtype, buffer=buffer if buffer is not None else a.buffer, name=name)


def shared_constant(constant, dtype=None, **kwargs):
    """A constant HBM tensor: an extra input of the program holding the array's values."""
    arr = np.asarray(constant)
    dt = as_dtype(dtype or arr.dtype)
    st = T().new_hbm(arr.shape, dt, "constant", "const", array=arr.astype(dt), loc=caller_loc()[0])
    return View.full(st)


def shared_identity_matrix(n, dtype=uint8, **kwargs):
    return shared_constant(np.eye(n), dtype=dtype)


# ---------------------------------------------------------------------------------------------
# memory


def _hbm_check(v, what, loc):
    if isinstance(v, DynView):
        return
    if not isinstance(v, View):
        raise NkiError(f"{what} expects an NKI tensor, got {type(v).__name__}", loc)


def load(src, *, mask=None, dtype=None, **kwargs):
    """DMA HBM -> a new SBUF tile (`dma_copy`; casts through fp32 when dtype= differs)."""
    loc = caller_loc()[0]
    _hbm_check(src, "nl.load", loc)
    dt = as_dtype(dtype) if dtype is not None else src.dtype
    if isinstance(src, DynView):
        return load_indirect(src, dt, loc, mask=mask)
    shape = src.shape if src.ndim >= 2 else (src.shape + (1,) if src.ndim == 1 else (1, 1))
    out = new_tile(shape, dt, loc=loc)
    box = mask_box(mask, src.shape)
    if box is None:
        return E.masked_off(out, mask)
    s = src.restrict(box)
    o = out.restrict(box + [(0, 1)] * (out.ndim - src.ndim)) if src.ndim < 2 else out.restrict(box)
    emit(
        "dma",
        "dma_copy",
        {"dst": o._ap(loc=loc), "src": s._ap(loc=loc)},
        loc,
        reads=[s],
        writes=[o],
        fresh=out,
        box=box if src.ndim >= 2 else None,
    )
    return out


def store(dst, value, *, mask=None, **kwargs):
    """DMA SBUF -> HBM. A PSUM value is first copied to SBUF on VectorE (DMA cannot read PSUM)."""
    loc = caller_loc()[0]
    _hbm_check(dst, "nl.store", loc)
    if isinstance(dst, DynView):
        box = mask_box(mask, dst.shape)
        if box is None:
            return
        v = _on_sbuf(_as_tile(value, dst.shape, dst.dtype, loc), loc)
        if box != [(0, n) for n in dst.shape]:
            # only the rows and columns the mask keeps are written (and only their indices read)
            v = _fit_rank(v, dst.shape, loc).broadcast(dst.shape).restrict(box)
            dst = restrict_dyn(dst, box)
        hap, ind = _indirect(dst, "dst", loc)
        emit("dma", "dma_copy", {"dst": hap, "src": v._ap(loc=loc), "indirect": ind}, loc, reads=[v])
        storage_of(dst.base).written = True
        return
    box = mask_box(mask, dst.shape)
    if box is None:
        return
    v = _as_tile(value, dst.shape, dst.dtype, loc)
    v = _on_sbuf(v, loc)
    same = _same_stream(v, dst.shape)
    if same is not None:
        # a DMA moves a stream of elements: a [P, 256] tile into a [P, 4, 16, 4] tensor pairs
        # them in row-major order, as nisa.dma_copy does (docs/nki.md, operand shapes)
        d, s = dst.restrict(box), same.restrict(box)
        emit("dma", "dma_copy", {"dst": d._ap(loc=loc), "src": s._ap(loc=loc)}, loc, reads=[s], writes=[d])
        return
    v = _fit_rank(v, dst.shape, loc)
    d, s = dst.restrict(box), v.broadcast(dst.shape).restrict(box)
    emit("dma", "dma_copy", {"dst": d._ap(loc=loc), "src": s._ap(loc=loc)}, loc, reads=[s], writes=[d])
    return


def _same_stream(v, shape):
    """`v` seen in `shape` when numpy cannot broadcast it there but both have the same partitions
    and the same elements per partition (else None)."""
    shape = tuple(shape)
    if v.shape == shape or len(shape) < 2 or v.ndim < 2 or v.shape[0] != shape[0]:
        return None
    if math.prod(v.shape) != math.prod(shape):
        return None
    pad = len(shape) - v.ndim
    if pad >= 0 and builtins.all(a in (1, b) for a, b in zip(v.shape, shape[pad:])):
        return None  # numpy broadcasts it: nl.store keeps that meaning
    return v.in_element_order(shape)


def _as_tile(value, shape, dtype, loc):
    if isinstance(value, View):
        return value
    shape = tuple(shape) if len(shape) >= 2 else (tuple(shape) + (1,))[:2]
    t = new_tile(shape, dtype, loc=loc)
    emit("vector", "memset", {"dst": t._ap(loc=loc), "value": _imm(value)}, loc, writes=[t])
    return t


def load_transpose2d(src, *, mask=None, dtype=None, **kwargs):
    """DMA with the source's two dims swapped: an [A, B] HBM view lands as a [B, A] SBUF tile."""
    loc = caller_loc()[0]
    if src.ndim != 2:
        raise NkiError("load_transpose2d takes a 2-D HBM view", loc)
    dt = as_dtype(dtype) if dtype is not None else src.dtype
    out = new_tile((src.shape[1], src.shape[0]), dt, loc=loc)
    s = src.permuted((1, 0))
    box = mask_box(mask, out.shape)
    if box is None:
        return E.masked_off(out, mask)
    s, o = s.restrict(box), out.restrict(box)
    emit(
        "dma",
        "dma_copy",
        {"dst": o._ap(loc=loc), "src": s._ap(loc=loc)},
        loc,
        reads=[s],
        writes=[o],
        fresh=out,
        box=box,
    )
    return out


def atomic_rmw(dst, value, op, *, mask=None, **kwargs):
    """DMA read-modify-write add into HBM (`dma_copy` with `accumulate`); only add exists."""
    loc = caller_loc()[0]
    if E.alu(op) != "add":
        raise NkiError("atomic_rmw supports only op=np.add / nl.add on NeuronCore-v2", loc)
    if isinstance(dst, DynView):
        if isinstance(mask, View):
            # a tile of per-row flags (AWS's newest example: `(idx != sentinel).astype(nl.int1)`):
            # NKI documents atomic_rmw's mask as a compile-time predicate only
            raise NkiError(
                "nl.atomic_rmw(mask=<a tile>): a data-dependent mask is not supported (NKI documents mask= "
                "as a compile-time predicate); skip rows with an out-of-range index and oob_mode skip",
                loc,
            )
        box = mask_box(mask, dst.shape)
        if box is None:
            return
        v = _on_sbuf(_as_tile(value, dst.shape, dst.dtype, loc), loc)
        if box != [(0, n) for n in dst.shape]:
            # only the rows and columns the mask keeps are updated (and only their indices read)
            v = _fit_rank(v, dst.shape, loc).broadcast(dst.shape).restrict(box)
            dst = restrict_dyn(dst, box)
        hap, ind = _indirect(dst, "dst", loc)
        emit(
            "dma", "dma_copy", {"dst": hap, "src": v._ap(loc=loc), "accumulate": True, "indirect": ind}, loc, reads=[v]
        )
        return
    box = mask_box(mask, dst.shape)
    if box is None:
        return
    v = _fit_rank(_on_sbuf(_as_tile(value, dst.shape, dst.dtype, loc), loc), dst.shape, loc)
    d, s = dst.restrict(box), v.broadcast(dst.shape).restrict(box)
    emit(
        "dma",
        "dma_copy",
        {"dst": d._ap(loc=loc), "src": s._ap(loc=loc), "accumulate": True},
        loc,
        reads=[s],
        writes=[d],
    )
    return


# ---------------------------------------------------------------------------------------------
# element-wise


def _result_shape(*xs):
    shapes = [x.shape for x in xs if isinstance(x, View)]
    return broadcast_shapes(*shapes)


def _binary(alu_op, x, y, dtype, mask, loc, engine="vector", default_dtype=None):
    if not isinstance(x, View) and not isinstance(y, View):
        raise NkiError("an element-wise NKI operation needs at least one tile operand", loc)
    x, y = E.column(x), E.column(y)
    shape = _result_shape(x, y)
    dt = as_dtype(dtype) if dtype is not None else (default_dtype or E.out_dtype(None, x, y))
    out = new_tile(shape, dt, loc=loc)
    box = mask_box(mask, out.shape)
    if box is None:
        return E.masked_off(out, mask)
    if isinstance(x, View) and isinstance(y, View):
        # a [P, 1] operand against a [P, F] one is a per-partition scalar: tensor_scalar
        col = None
        if _is_col(y, shape) and not _is_col(x, shape) and alu_op not in E.BITVEC:
            col, full, rev = y, x, False
        elif _is_col(x, shape) and not _is_col(y, shape) and alu_op not in E.BITVEC:
            col, full, rev = x, y, True
        if col is not None:
            a = prep(full, shape, loc)
            box = E.narrow(box, [a, col.broadcast(shape)], loc)
            o, a = out.restrict(box), a.restrict(box)
            s = col.restrict(_col_box(box, col))
            f = {"dst": o._ap(loc=loc), "src": a._ap(loc=loc), "op0": alu_op, "operand0": scalar_operand(s, loc)}
            if rev:
                f["reverse0"] = True
            emit(engine, "tensor_scalar", f, loc, reads=[a], writes=[o], fresh=out, box=box)
            return out
        a, b = prep(x, shape, loc), prep(y, shape, loc)
        box = E.narrow(box, [a, b], loc)
        o, a, b = out.restrict(box), a.restrict(box), b.restrict(box)
        if a.base.on_chip and b.base.on_chip and a.base.buffer == "psum" and b.base.buffer == "psum":
            b = _on_sbuf(b, loc)
        emit(
            engine,
            "tensor_tensor",
            {"dst": o._ap(loc=loc), "in0": a._ap(loc=loc), "in1": b._ap(loc=loc), "op": alu_op},
            loc,
            reads=[a, b],
            writes=[o],
            fresh=out,
            box=box,
        )
        return out
    tile, scal, rev = (x, y, False) if isinstance(x, View) else (y, x, True)
    a = prep(tile, shape, loc)
    box = E.narrow(box, [a], loc)
    o, a = out.restrict(box), a.restrict(box)
    f = {"dst": o._ap(loc=loc), "src": a._ap(loc=loc), "op0": alu_op, "operand0": scalar_operand(scal, loc)}
    if rev:
        f["reverse0"] = True
    emit(engine, "tensor_scalar", f, loc, reads=[a], writes=[o], fresh=out, box=box)
    return out


def _is_col(v, shape):
    return (
        len(shape) == 2
        and v.ndim == 2
        and v.shape[1] == 1
        and shape[1] > 1
        and v.shape[0] == shape[0]
        and (v.base.on_chip)
    )


def _col_box(box, v):
    return [box[0], (0, 1)]


def _mk_binary(name, alu_op, engine="vector", bool_out=False):
    def f(x, y, *, dtype=None, mask=None, **kwargs):
        default = bool_ if bool_out else None
        return _binary(alu_op, x, y, dtype, mask, caller_loc()[0], engine, default)

    f.__name__ = name
    f.__doc__ = f"`nl.{name}`: {engine} engine, ALU operator `{alu_op}`."
    return f


add = _mk_binary("add", "add")
subtract = _mk_binary("subtract", "subtract")
multiply = _mk_binary("multiply", "multiply")
maximum = _mk_binary("maximum", "max")
minimum = _mk_binary("minimum", "min")
equal = _mk_binary("equal", "is_equal", bool_out=True)
not_equal = _mk_binary("not_equal", "not_equal", bool_out=True)
greater = _mk_binary("greater", "is_gt", bool_out=True)
greater_equal = _mk_binary("greater_equal", "is_ge", bool_out=True)
less = _mk_binary("less", "is_lt", bool_out=True)
less_equal = _mk_binary("less_equal", "is_le", bool_out=True)
logical_and = _mk_binary("logical_and", "logical_and", bool_out=True)
logical_or = _mk_binary("logical_or", "logical_or", bool_out=True)
logical_xor = _mk_binary("logical_xor", "logical_xor", bool_out=True)
bitwise_and = _mk_binary("bitwise_and", "bitwise_and")
bitwise_or = _mk_binary("bitwise_or", "bitwise_or")
bitwise_xor = _mk_binary("bitwise_xor", "bitwise_xor")
left_shift = _mk_binary("left_shift", "shift_left")
right_shift = _mk_binary("right_shift", "logical_shift_right")
power = _mk_binary("power", "pow", engine="gpsimd")
average = _mk_binary("average", "average")


def divide(x, y, *, dtype=None, mask=None, **kwargs):
    """No ALU divide: x * (1/y), the reciprocal on VectorE (`reciprocal`, correctly rounded) then a
    multiply; a scalar divisor folds to a multiply by its fp32 reciprocal."""
    loc = caller_loc()[0]
    if not isinstance(y, View):
        return _binary("multiply", x, float(np.float32(1.0) / np.float32(y)), dtype, mask, loc)
    r = _unary_vec("reciprocal", y, float32, None, loc)
    return _binary("multiply", x, r, dtype or E.out_dtype(None, x, y), mask, loc)


def _activation(func, x, dtype, mask, loc, bias=None, scale=1.0):
    x = E.column(x)
    dt = as_dtype(dtype) if dtype is not None else x.dtype
    out = new_tile(x.shape, dt, loc=loc)
    box = E.narrow(mask_box(mask, x.shape), [x], loc)
    if box is None:
        return E.masked_off(out, mask)
    a, o = x.restrict(box), out.restrict(box)
    f = {"dst": o._ap(loc=loc), "func": func, "src": a._ap(loc=loc), "scale": scalar_operand(scale, loc)}
    if bias is not None:
        f["bias"] = scalar_operand(bias, loc)
    emit("scalar", "activation", f, loc, reads=[a], writes=[o], fresh=out, box=box)
    return out


def _mk_act(name, func):
    def f(x, *, dtype=None, mask=None, **kwargs):
        return _activation(func, x, dtype, mask, caller_loc()[0])

    f.__name__ = name
    f.__doc__ = f"`nl.{name}`: Scalar Engine `activation` with func `{func}`."
    return f


exp = _mk_act("exp", "exp")
log = _mk_act("log", "log")
sqrt = _mk_act("sqrt", "sqrt")
rsqrt = _mk_act("rsqrt", "rsqrt")
tanh = _mk_act("tanh", "tanh")
sigmoid = _mk_act("sigmoid", "sigmoid")
relu = _mk_act("relu", "relu")
gelu = _mk_act("gelu", "gelu")
gelu_dx = _mk_act("gelu_dx", "gelu_dx")
gelu_apprx_tanh = _mk_act("gelu_apprx_tanh", "gelu_approx_tanh")
gelu_apprx_sigmoid = _mk_act("gelu_apprx_sigmoid", "gelu_approx_sigmoid")
gelu_apprx_sigmoid_dx = _mk_act("gelu_apprx_sigmoid_dx", "gelu_approx_sigmoid_dx")
silu = _mk_act("silu", "silu")
silu_dx = _mk_act("silu_dx", "silu_dx")
erf = _mk_act("erf", "erf")
erf_dx = _mk_act("erf_dx", "erf_dx")
softplus = _mk_act("softplus", "softplus")
mish = _mk_act("mish", "mish")
sin = _mk_act("sin", "sin")
arctan = _mk_act("arctan", "arctan")
sign = _mk_act("sign", "sign")
square = _mk_act("square", "square")


def abs(x, *, dtype=None, mask=None, **kwargs):
    """VectorE tensor_scalar with the unary ALU `abs` (exact)."""
    return _unary_vec("abs", x, dtype, mask, caller_loc()[0])


def reciprocal(x, *, dtype=None, mask=None, **kwargs):
    """VectorE `reciprocal` (more precise than ScalarE's, per AWS)."""
    return _unary_vec("reciprocal", x, dtype, mask, caller_loc()[0])


def negative(x, *, dtype=None, mask=None, **kwargs):
    """VectorE tensor_scalar multiply by -1 (exact)."""
    loc = caller_loc()[0]
    return _binary("multiply", x, -1.0, dtype or x.dtype, mask, loc)


def logical_not(x, *, dtype=None, mask=None, **kwargs):
    return _unary_vec("logical_not", x, dtype or bool_, mask, caller_loc()[0])


def invert(x, *, dtype=None, mask=None, **kwargs):
    """VectorE tensor_scalar `bitwise_not` (integers only)."""
    return _unary_vec("bitwise_not", x, dtype, mask, caller_loc()[0])


bitwise_not = invert


def copy(x, *, dtype=None, mask=None, **kwargs):
    """VectorE `tensor_copy`: a bit copy for the same dtype, else a cast through fp32."""
    loc = caller_loc()[0]
    if not isinstance(x, View):
        raise NkiError("nl.copy takes a tile", loc)
    dt = as_dtype(dtype) if dtype is not None else x.dtype
    if not x.base.on_chip:
        return load(x, mask=mask, dtype=dt)
    x = E.column(x)
    out = new_tile(x.shape, dt, loc=loc)
    box = E.narrow(mask_box(mask, x.shape), [x], loc)
    if box is None:
        return E.masked_off(out, mask)
    a, o = x.restrict(box), out.restrict(box)
    emit(
        "vector",
        "tensor_copy",
        {"dst": o._ap(loc=loc), "src": a._ap(loc=loc)},
        loc,
        reads=[a],
        writes=[o],
        fresh=out,
        box=box,
    )
    return out


def static_cast(x, dtype, **kwargs):
    """In a kernel: a VectorE copy with a cast. On a host NumPy array (outside any kernel, as
    kernel tests use it to prepare inputs and references): NumPy's `astype` to the NKI dtype,
    a host value like any other test data."""
    if isinstance(x, np.ndarray) and not isinstance(x, View):
        return x.astype(as_dtype(dtype))
    return copy(x, dtype=dtype)


def finfo(dtype):
    """Machine limits of a floating NKI dtype (bf16 and fp8 through ml_dtypes), as `numpy.finfo`."""
    d = as_dtype(dtype)
    if not is_float(d):
        raise NkiError(f"nl.finfo takes a floating dtype, not {d}", caller_loc()[0])
    import ml_dtypes

    return ml_dtypes.finfo(d)


def where(condition, x, y, *, dtype=None, mask=None, **kwargs):
    """VectorE: y (tensor_copy, or memset for a scalar) into the result, then
    `tensor_copy_predicated` of x where the condition is non-zero."""
    loc = caller_loc()[0]
    condition, x, y = E.column(condition), E.column(x), E.column(y)
    shape = _result_shape(condition, x, y)
    dt = as_dtype(dtype) if dtype is not None else E.out_dtype(None, x, y)
    out = new_tile(shape, dt, loc=loc)
    box = mask_box(mask, shape)
    if box is None:
        return E.masked_off(out, mask)
    o = out.restrict(box)
    if isinstance(y, View):
        ys = prep(y, shape, loc).restrict(box)
        emit("vector", "tensor_copy", {"dst": o._ap(loc=loc), "src": ys._ap(loc=loc)}, loc, reads=[ys], writes=[o])
    else:
        emit("vector", "memset", {"dst": o._ap(loc=loc), "value": _imm(y)}, loc, writes=[o])
    if isinstance(x, View):
        xs = prep(x, shape, loc)
        if xs.dtype != dt:
            xs = copy(xs, dtype=dt)
        xs = xs.restrict(box)
    else:
        xs = new_tile(shape, dt, loc=loc)
        emit("vector", "memset", {"dst": xs._ap(loc=loc), "value": _imm(x)}, loc, writes=[xs])
        xs = xs.restrict(box)
    c = prep(condition, shape, loc)
    if trn_name(c.dtype) not in ("u8", "u16", "u32", "bool"):
        c = copy(c, dtype=uint8)
    c = c.restrict(box)
    emit(
        "vector",
        "tensor_copy_predicated",
        {"dst": o._ap(loc=loc), "src": xs._ap(loc=loc), "predicate": c._ap(loc=loc)},
        loc,
        reads=[xs, c, o],
        writes=[o],
    )
    return out


# ---------------------------------------------------------------------------------------------
# reductions


def _mk_reduce(name, op):
    def f(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
        return _reduce(op, x, axis, dtype, mask, keepdims, caller_loc()[0])

    f.__name__ = name
    f.__doc__ = f"`nl.{name}`: VectorE `tensor_reduce` with `{op}`."
    return f


sum = _mk_reduce("sum", "add")
max = _mk_reduce("max", "max")
min = _mk_reduce("min", "min")
mean = _mk_reduce("mean", "average")
prod = _mk_reduce("prod", "multiply")


def all(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    """VectorE `tensor_reduce` with logical_and (bool result)."""
    return _reduce("logical_and", x, axis, dtype or bool_, mask, keepdims, caller_loc()[0])


# ---------------------------------------------------------------------------------------------
# TensorE


def _transpose_to_sbuf(x, loc):
    """x [M, K] (SBUF) -> x^T [K, M] in SBUF: TensorE transpose into PSUM, VectorE copy out."""
    pt = new_tile((x.shape[1], x.shape[0]), x.dtype, "psum", loc=loc)
    xs = _on_sbuf(x, loc)
    emit("tensor", "nc_transpose", {"dst": pt._ap(loc=loc), "src": xs._ap(loc=loc)}, loc, reads=[xs], writes=[pt])
    st = new_tile(pt.shape, x.dtype, loc=loc)
    emit("vector", "tensor_copy", {"dst": st._ap(loc=loc), "src": pt._ap(loc=loc)}, loc, reads=[pt], writes=[st])
    return st


def matmul(x, y, *, transpose_x=False, mask=None, **kwargs):
    """TensorE `nc_matmul` into a new fp32 PSUM tile. transpose_x=False inserts a TensorE transpose
    of x (through PSUM, copied back to SBUF by VectorE) so that x is the stationary [K, M] operand."""
    loc = caller_loc()[0]
    if mask is not None:
        raise NkiError("nl.matmul(mask=) is not supported by the trnsim front-end; slice the operands", loc)
    if x.ndim != 2 or y.ndim != 2:
        raise NkiError("nl.matmul takes 2-D tiles", loc)
    stat = _on_sbuf(x, loc) if transpose_x else _transpose_to_sbuf(x, loc)
    mov = _on_sbuf(y, loc)
    out = new_tile((stat.shape[1], mov.shape[1]), float32, "psum", loc=loc)
    emit(
        "tensor",
        "nc_matmul",
        {"dst": out._ap(loc=loc), "stationary": stat._ap(loc=loc), "moving": mov._ap(loc=loc)},
        loc,
        reads=[stat, mov],
        writes=[out],
        fresh=out,
    )
    return out


def transpose(x, *, dtype=None, mask=None, **kwargs):
    """TensorE `nc_transpose` into a new PSUM tile (x's dtype)."""
    loc = caller_loc()[0]
    if x.ndim != 2:
        raise NkiError("nl.transpose takes a 2-D tile", loc)
    xs = _on_sbuf(x, loc)
    dt = as_dtype(dtype) if dtype is not None else x.dtype
    out = new_tile((x.shape[1], x.shape[0]), dt, "psum", loc=loc)
    emit(
        "tensor",
        "nc_transpose",
        {"dst": out._ap(loc=loc), "src": xs._ap(loc=loc)},
        loc,
        reads=[xs],
        writes=[out],
        fresh=out,
    )
    return out


# ---------------------------------------------------------------------------------------------
# composites


def softmax(x, axis=-1, *, dtype=None, compute_dtype=None, mask=None, **kwargs):
    """max (VectorE tensor_reduce), negate (VectorE), exp(x - max) with the row sum accumulated on
    ScalarE (`activation` with bias and reduce), 1/sum (VectorE reciprocal), scale (VectorE)."""
    loc = caller_loc()[0]
    if mask is not None:
        raise NkiError("nl.softmax(mask=) is not supported by the trnsim front-end", loc)
    axes = _axes(x, axis, loc)
    if x.ndim != 2 or axes != (1,):
        raise NkiError("nl.softmax is supported on 2-D tiles over the free axis (axis=1)", loc)
    dt = as_dtype(dtype) if dtype is not None else x.dtype
    P = x.shape[0]
    m = _reduce("max", x, 1, float32, None, True, loc, negate=True)
    e = new_tile(x.shape, float32, loc=loc)
    s = new_tile((P, 1), float32, loc=loc)
    emit(
        "scalar",
        "activation",
        {
            "dst": e._ap(loc=loc),
            "func": "exp",
            "src": x._ap(loc=loc),
            "bias": scalar_operand(m, loc),
            "scale": {"imm": 1.0},
            "acc": "reset_reduce",
            "reduce_res": s._ap(loc=loc),
        },
        loc,
        reads=[x],
        writes=[e, s],
    )
    r = _unary_vec("reciprocal", s, float32, None, loc)
    return _binary("multiply", e, r, dt, None, loc)


def rms_norm(x, w, axis, n, epsilon=1e-6, *, dtype=None, compute_dtype=None, mask=None, **kwargs):
    """x * rsqrt(mean(x^2) + eps) * w: ScalarE square with the row sum accumulated, VectorE scale
    and add, ScalarE rsqrt, VectorE multiplies."""
    loc = caller_loc()[0]
    axes = _axes(x, axis, loc)
    if x.ndim != 2 or axes != (1,):
        raise NkiError("nl.rms_norm is supported on 2-D tiles over the free axis", loc)
    P = x.shape[0]
    sq = new_tile(x.shape, float32, loc=loc)
    s = new_tile((P, 1), float32, loc=loc)
    emit(
        "scalar",
        "activation",
        {
            "dst": sq._ap(loc=loc),
            "func": "square",
            "src": x._ap(loc=loc),
            "scale": {"imm": 1.0},
            "acc": "reset_reduce",
            "reduce_res": s._ap(loc=loc),
        },
        loc,
        reads=[x],
        writes=[sq, s],
    )
    ms = new_tile((P, 1), float32, loc=loc)
    emit(
        "vector",
        "tensor_scalar",
        {
            "dst": ms._ap(loc=loc),
            "src": s._ap(loc=loc),
            "op0": "multiply",
            "operand0": {"imm": 1.0 / float(n)},
            "op1": "add",
            "operand1": {"imm": float(epsilon)},
        },
        loc,
        reads=[s],
        writes=[ms],
    )
    r = _activation("rsqrt", ms, float32, None, loc)
    y = _binary("multiply", x, r, float32, None, loc)
    return _binary("multiply", y, w, dtype or x.dtype, None, loc)


def dropout(x, rate, *, dtype=None, mask=None, **kwargs):
    """VectorE `dropout` (trnsim's documented generator; no 1/(1-rate) rescaling, as the ISA)."""
    from . import isa

    return isa.dropout(x, rate, dtype=dtype, mask=mask)


def random_seed(seed, **kwargs):
    """VectorE `set_rng_seed`."""
    loc = caller_loc()[0]
    emit(
        "vector",
        "set_rng_seed",
        {"seed": scalar_operand(seed, loc)},
        loc,
        reads=[seed] if isinstance(seed, View) else [],
    )


def rand(shape, dtype=float32, **kwargs):
    """Uniform [0, 1): 32 random bits per element (VectorE `rng`), shifted right by 8 (VectorE
    bitvec), scaled by 2^-24 (VectorE), so every value is a multiple of 2^-24 below 1."""
    loc = caller_loc()[0]
    bits = new_tile(shape, uint32, loc=loc)
    emit("vector", "rng", {"dst": bits._ap(loc=loc)}, loc, writes=[bits])
    sh = new_tile(shape, uint32, loc=loc)
    emit(
        "vector",
        "tensor_scalar",
        {"dst": sh._ap(loc=loc), "src": bits._ap(loc=loc), "op0": "logical_shift_right", "operand0": {"imm": 8.0}},
        loc,
        reads=[bits],
        writes=[sh],
    )
    return _binary("multiply", sh, 2.0**-24, dtype, None, loc)


def gather_flattened(data, indices, *, mask=None, dtype=None, **kwargs):
    """GpSimd `nc_n_gather`: per partition, data's free elements flattened, taken at indices."""
    loc = caller_loc()[0]
    out = new_tile(indices.shape, data.dtype, loc=loc)
    emit(
        "gpsimd",
        "n_gather",
        {"dst": out._ap(loc=loc), "data": data._ap(loc=loc), "indices": indices._ap(loc=loc)},
        loc,
        reads=[data, indices],
        writes=[out],
        fresh=out,
    )
    return out


# ---------------------------------------------------------------------------------------------
# views


def broadcast_to(src, shape, **kwargs):
    """Numpy broadcasting: free dims by stride-0 access patterns; the partition dim (1 -> P) by a
    DMA into a new tile."""
    loc = caller_loc()[0]
    shape = tuple(shape)
    return prep(src, shape, loc)


def expand_dims(data, axis, **kwargs):
    loc = caller_loc()[0]
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    shape = list(data.shape)
    for a in sorted(axes):
        a = a + len(shape) + 1 if a < 0 else a
        shape.insert(a, 1)
    v = data
    # insert size-1 axes (coef 0) at the new positions
    n = len(shape)
    olds = [i for i in range(n) if not (i in [(a + n if a < 0 else a) for a in axes])]
    idx = []
    for c, co in v.idx:
        nco = [0] * n
        for j, i in enumerate(olds):
            nco[i] = co[j]
        idx.append((c, tuple(nco)))
    if len(olds) != v.ndim:
        raise NkiError("expand_dims: bad axis", loc)
    return View(v.base, shape, idx, v.dtype)


def var(x, axis, *, dtype=None, mask=None, **kwargs):
    """Population variance over the free axis of a 2-D tile: VectorE `bn_stats` per chunk of at most
    512 elements, then `bn_aggr`; the result is its variance column, [P, 1]."""
    loc = caller_loc()[0]
    axes = _axes(x, axis, loc)
    if x.ndim != 2 or axes != (1,) or mask is not None:
        raise NkiError("nl.var is supported on 2-D tiles over the free axis, without mask", loc)
    f = x.shape[1]
    chunk = builtins.min(f, 512)
    if f % chunk:
        raise NkiError(f"nl.var: the free size {f} must be at most 512 or a multiple of 512", loc)
    n = f // chunk
    stats = new_tile((x.shape[0], 6 * n), float32, loc=loc)
    for c in builtins.range(n):
        s = x[:, c * chunk : (c + 1) * chunk]
        d = stats[:, 6 * c : 6 * c + 6]
        emit("vector", "bn_stats", {"dst": d._ap(loc=loc), "src": s._ap(loc=loc)}, loc, reads=[s], writes=[d])
    mv = new_tile((x.shape[0], 2), float32, loc=loc)
    emit("vector", "bn_aggr", {"dst": mv._ap(loc=loc), "src": stats._ap(loc=loc)}, loc, reads=[stats], writes=[mv])
    return copy(mv[:, 1:2], dtype=dtype or x.dtype)


class LoopReduce:
    """The value of `nl.loop_reduce(x, op, loop_indices)`: NKI documents it as `dst =
    tensor_tensor(dst, x, op)` where `dst` is the tile the result is assigned to, so it becomes an
    instruction only when assigned (`dst[...] = nl.loop_reduce(...)`). The trace unrolls every
    loop, so each iteration folds its `x` into `dst` in order; `loop_indices` (a hint for the
    compiler's loop optimisations) changes nothing here."""

    def __init__(self, x, op, dtype, mask, loc):
        self.x, self.op, self.dtype, self.mask, self.loc = x, op, dtype, mask, loc

    def resolve(self, dst):
        r = _binary(E.alu(self.op), dst, self.x, self.dtype, self.mask, self.loc)
        return r

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NkiError(
            "the value of nl.loop_reduce must be assigned into its destination tile "
            "(`dst[...] = nl.loop_reduce(x, op=..., loop_indices=...)`): the destination is the "
            "reduction's other operand",
            self.__dict__.get("loc"),
        )


def loop_reduce(x, op, loop_indices=None, *, dtype=None, mask=None, **kwargs):
    """`nl.loop_reduce`: `dst = op(dst, x)` into the tile the result is assigned to (VectorE
    `tensor_tensor`), one instruction per traced iteration."""
    loc = caller_loc()[0]
    if not isinstance(x, View):
        raise NkiError("nl.loop_reduce reduces a tile: x must be a tile", loc)
    E.alu(op)  # an operator the ALU has, said at this line
    return LoopReduce(x, op, dtype, mask, loc)


def all_reduce(*args, **kwargs):
    raise NkiError(
        "nl.all_reduce (collectives) is not supported by the trnsim front-end (docs/nki.md)", caller_loc()[0]
    )


def _unsupported(name, why):
    def f(*args, **kwargs):
        raise NkiError(f"nl.{name} is not supported by the trnsim front-end: {why}", caller_loc()[0])

    f.__name__ = name
    return f


# ---------------------------------------------------------------------------------------------
# rounding and remainders, composed of ALU instructions (the ALU has no rounding operator and no
# remainder; docs/nki.md "Rounding and remainders")

_TWO23 = 8388608.0  # 2^23: every fp32 of at least this magnitude is an integer


def _round_kind(name, x, dtype, mask, loc):
    """floor/ceil/trunc of a tile on VectorE, exact for every fp32 value (NaN stays NaN, ±inf
    stays ±inf). With a = |x|: r = (min(a, 2^23) + 2^23) - 2^23 rounds a below 2^23 to the
    nearest integer (the ALU computes in fp32, rounding to nearest even after each operator),
    and a itself is kept at and above 2^23, where it is an integer already; t = r - (r > a) is
    floor(a), sign(x)·t is trunc(x), and floor/ceil step trunc by one where it is on the wrong
    side of x. An integer tile is its own floor: a copy into `dtype`. The sign of a zero is not
    kept (floor(-0.0) is 0.0)."""
    if not isinstance(x, View):
        raise NkiError(f"nl.{name} takes a tile", loc)
    x = E.column(x)
    out_dt = as_dtype(dtype) if dtype is not None else x.dtype
    if not is_float(x.dtype):
        return copy(x, dtype=out_dt, mask=mask)
    f = float32
    a = _unary_vec("abs", x, f, mask, loc)
    ac = _binary("min", a, _TWO23, f, mask, loc)
    r = _binary("add", ac, _TWO23, f, mask, loc)
    r = _binary("subtract", r, _TWO23, f, mask, loc)
    big = _binary("is_ge", a, _TWO23, f, mask, loc)  # 1.0 where |x| >= 2^23
    small = _binary("is_lt", a, _TWO23, f, mask, loc)  # 1.0 where |x| <  2^23 (0 for NaN)
    r = _binary("multiply", r, small, f, mask, loc)
    keep = _binary("multiply", a, big, f, mask, loc)  # |x| where it is already an integer
    r = _binary("add", r, keep, f, mask, loc)
    # (NaN: a·big is NaN·0 = NaN, so r and everything after it stay NaN; ±inf: r = |x| = inf)
    over = _binary("is_gt", r, a, f, mask, loc)
    t = _binary("subtract", r, over, f, mask, loc)  # floor(|x|)
    neg = _binary("is_lt", x, 0.0, f, mask, loc)
    sg = _binary("subtract", 1.0, _binary("multiply", neg, 2.0, f, mask, loc), f, mask, loc)  # ±1
    t = _binary("multiply", t, sg, f, mask, loc)  # trunc(x)
    if name == "trunc":
        return copy(t, dtype=out_dt, mask=mask)
    if name == "floor":
        step = _binary("is_gt", t, x, f, mask, loc)
        return _binary("subtract", t, step, out_dt, mask, loc)
    step = _binary("is_lt", t, x, f, mask, loc)
    return _binary("add", t, step, out_dt, mask, loc)


def floor(x, *, dtype=None, mask=None, **kwargs):
    """`nl.floor`: the largest integer <= x, element-wise (VectorE instructions; see _round_kind)."""
    return _round_kind("floor", x, dtype, mask, caller_loc()[0])


def ceil(x, *, dtype=None, mask=None, **kwargs):
    """`nl.ceil`: the smallest integer >= x, element-wise (VectorE instructions)."""
    return _round_kind("ceil", x, dtype, mask, caller_loc()[0])


def trunc(x, *, dtype=None, mask=None, **kwargs):
    """`nl.trunc`: x rounded toward zero, element-wise (VectorE instructions)."""
    return _round_kind("trunc", x, dtype, mask, caller_loc()[0])


_INT_EXACT = 1 << 24  # an integer divisor below this is exact as an fp32 immediate


def _int_remainder(name, x, y, dtype, mask, loc):
    """`nl.mod` (the sign of the divisor, Python's %) and `nl.fmod` (the sign of the dividend) of
    an integer tile by an integer constant, exactly. A quotient estimate q = floor(float(x) / y)
    is taken on VectorE, and r = x - y·q is computed on GpSimd in exact int32 arithmetic; a second
    estimate from r (now small enough to be exact in fp32) and a last correction step bring r into
    the remainder's range."""
    y = int(y)
    if y == 0:
        raise NkiError(f"nl.{name} by zero", loc)
    if builtins.abs(y) >= _INT_EXACT:
        raise NkiError(
            f"nl.{name} by {y}: the trnsim front-end takes an integer divisor below 2^24 in "
            "magnitude (an exact fp32 immediate)",
            loc,
        )
    i32 = as_dtype(np.int32)
    f = float32
    inv = float(np.float32(1.0) / np.float32(y))

    def rem_step(r):
        rf = copy(r, dtype=f, mask=mask)
        q = floor(_binary("multiply", rf, inv, f, mask, loc), dtype=i32, mask=mask)
        yq = _binary("multiply", q, y, i32, mask, loc, engine="gpsimd")
        return _binary("subtract", r, yq, i32, mask, loc, engine="gpsimd")

    r = rem_step(x)
    r = rem_step(r)
    # r is now within one divisor of the floor-mod range: step it in
    if y > 0:
        hi = _binary("is_ge", r, y, i32, mask, loc, engine="gpsimd")
        lo = _binary("is_lt", r, 0, i32, mask, loc, engine="gpsimd")
    else:
        hi = _binary("is_le", r, y, i32, mask, loc, engine="gpsimd")
        lo = _binary("is_gt", r, 0, i32, mask, loc, engine="gpsimd")
    r = _binary(
        "subtract", r, _binary("multiply", hi, y, i32, mask, loc, engine="gpsimd"), i32, mask, loc, engine="gpsimd"
    )
    r = _binary("add", r, _binary("multiply", lo, y, i32, mask, loc, engine="gpsimd"), i32, mask, loc, engine="gpsimd")
    if name == "fmod":
        # the dividend's sign: where r != 0 and x's sign differs from y's, fmod = mod - y
        xs = (
            _binary("is_lt", x, 0, i32, mask, loc, engine="gpsimd")
            if y > 0
            else _binary("is_gt", x, 0, i32, mask, loc, engine="gpsimd")
        )
        nz = _binary("not_equal", r, 0, i32, mask, loc, engine="gpsimd")
        fix = _binary("multiply", xs, nz, i32, mask, loc, engine="gpsimd")
        r = _binary(
            "subtract", r, _binary("multiply", fix, y, i32, mask, loc, engine="gpsimd"), i32, mask, loc, engine="gpsimd"
        )
    out_dt = as_dtype(dtype) if dtype is not None else x.dtype
    return r if out_dt == i32 else copy(r, dtype=out_dt, mask=mask)


def _remainder(name, x, y, dtype, mask, loc):
    if isinstance(x, View) and not is_float(x.dtype) and isinstance(y, (int, np.integer)) and not isinstance(y, bool):
        return _int_remainder(name, E.column(x), y, dtype, mask, loc)
    raise NkiError(
        f"nl.{name} of a floating-point tile, or by a tile divisor, is not supported by the trnsim "
        "front-end: the ALU has no remainder operator and no exact composition of a floating remainder "
        "is implemented; an integer tile by an integer constant is (computed exactly, docs/nki.md)",
        loc,
    )


def mod(x, y, *, dtype=None, mask=None, **kwargs):
    """`nl.mod`: x mod y with the sign of y (numpy.mod), for an integer tile and constant."""
    return _remainder("mod", x, y, dtype, mask, caller_loc()[0])


def fmod(x, y, *, dtype=None, mask=None, **kwargs):
    """`nl.fmod`: the remainder with the sign of x (numpy.fmod), for an integer tile and constant."""
    return _remainder("fmod", x, y, dtype, mask, caller_loc()[0])


cos = _unsupported("cos", "the Scalar Engine function table has no cos")
tan = _unsupported("tan", "the Scalar Engine function table has no tan")
