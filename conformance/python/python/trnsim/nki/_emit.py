"""Shared instruction builders for `language` and `isa`: operands, masks, initialised-memory
tracking, fresh results and the fusion of `dst[...] = op(...)` into the op's own destination."""

import math
import sys

import numpy as np

from ._core import (
    PACKED_TRN_NAMES,
    Aff,
    NkiError,
    TileStorage,
    Tracer,
    View,
    as_dtype,
    broadcast_shapes,
    caller_loc,
    is_float,
    mask_box,
    storage_of,
    trn_name,
)

# ---------------------------------------------------------------------------------------------
# operator names: nl functions (by name) and numpy ufuncs -> trnsim AluOp / ActFunc

ALU_BY_NAME = {
    "bypass": "bypass",
    "add": "add",
    "subtract": "subtract",
    "multiply": "multiply",
    "maximum": "max",
    "max": "max",
    "minimum": "min",
    "min": "min",
    "equal": "is_equal",
    "not_equal": "not_equal",
    "greater_equal": "is_ge",
    "greater": "is_gt",
    "less_equal": "is_le",
    "less": "is_lt",
    "logical_and": "logical_and",
    "logical_or": "logical_or",
    "logical_xor": "logical_xor",
    "logical_not": "logical_not",
    "abs": "abs",
    "absolute": "abs",
    "reciprocal": "reciprocal",
    "rsqrt": "rsqrt",
    "power": "pow",
    "average": "average",
    "mean": "average",
    "bitwise_and": "bitwise_and",
    "bitwise_or": "bitwise_or",
    "bitwise_xor": "bitwise_xor",
    "invert": "bitwise_not",
    "bitwise_not": "bitwise_not",
    "left_shift": "shift_left",
    "right_shift": "logical_shift_right",
    "sum": "add",
    "prod": "multiply",
    "amax": "max",
    "amin": "min",
    "all": "logical_and",
}
ACT_BY_NAME = {
    "copy": "copy",
    "square": "square",
    "sigmoid": "sigmoid",
    "relu": "relu",
    "gelu": "gelu",
    "gelu_dx": "gelu_dx",
    "gelu_apprx_tanh": "gelu_approx_tanh",
    "gelu_apprx_sigmoid": "gelu_approx_sigmoid",
    "gelu_apprx_sigmoid_dx": "gelu_approx_sigmoid_dx",
    "silu": "silu",
    "silu_dx": "silu_dx",
    "tanh": "tanh",
    "softplus": "softplus",
    "mish": "mish",
    "erf": "erf",
    "erf_dx": "erf_dx",
    "exp": "exp",
    "log": "log",
    "sin": "sin",
    "arctan": "arctan",
    "sqrt": "sqrt",
    "rsqrt": "rsqrt",
    "reciprocal": "reciprocal",
    "sign": "sign",
    "abs": "abs",
    "absolute": "abs",
}
BITVEC = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left", "logical_shift_right"}


def _op_name(op):
    if isinstance(op, str):
        return op
    n = getattr(op, "__name__", None)
    if n is None:
        raise NkiError(f"{op!r} is not an operator", caller_loc()[0])
    return n


# What to write instead, for operators a kernel may name but NC-v2's ALU (as trnsim models it) lacks.
ALU_HINTS = {
    "divide": "trnsim's NC-v2 ALU has no divide (docs/nki.md, Gaps): multiply by nisa.reciprocal(divisor), "
    "by the scalar 1/c, or use nl.divide",
    "fmod": "trnsim's NC-v2 ALU has no remainder operator (docs/nki.md, Gaps)",
    "floor_divide": "trnsim's NC-v2 ALU has no integer division or rounding operator (docs/nki.md, Gaps)",
}
ALU_HINTS["true_divide"] = ALU_HINTS["divide"]
ALU_HINTS["mod"] = ALU_HINTS["remainder"] = ALU_HINTS["fmod"]


def alu(op):
    n = _op_name(op)
    if n not in ALU_BY_NAME:
        hint = ALU_HINTS.get(n)
        raise NkiError(
            f"'{n}' is not an ALU operator of NeuronCore-v2" + (f": {hint}" if hint else ""), caller_loc()[0]
        )
    return ALU_BY_NAME[n]


def act(op):
    n = _op_name(op)
    if n not in ACT_BY_NAME:
        raise NkiError(f"'{n}' is not an activation function of the Scalar Engine", caller_loc()[0])
    return ACT_BY_NAME[n]


# ---------------------------------------------------------------------------------------------
# tiles and memory tracking


def T():
    return Tracer.current()


def new_tile(shape, dtype, buffer="sbuf", name=None, loc=None):
    """A fresh on-chip tile; `shape` may hold a `par_dim` marking the partition axis."""
    from .language import par_dim

    if loc is None:
        loc = caller_loc()[0]
    shape = tuple(shape)
    pax = 0
    for i, s in enumerate(shape):
        if isinstance(s, par_dim):
            pax = i
            break
    if len(shape) == 1:
        shape = shape + (1,)
    st = TileStorage(T(), shape, dtype, buffer, pax, name or "", loc)
    return View.full(st)


def _cells(v):
    """The (partition, free element) cells a view touches: a pair of slices when they form a
    rectangle (the common case, cheap to test and mark), else index arrays."""
    b = v.base
    try:
        ap = v._ap()
    except NkiError:
        return v.positions()
    free = ap["free"]
    if len(free) == 1 and free[0][0] == 1:
        st = storage_of(b)
        isz = st.dtype.itemsize
        byte0 = ap["offset"] - st.offset
        byte1 = byte0 + free[0][1] * v.dtype.itemsize
        p0 = ap["start_partition"]
        # the storage elements these bytes touch (a view may have a dtype of another size)
        return slice(p0, p0 + ap["partitions"]), slice(byte0 // isz, -(-byte1 // isz))
    return v.positions()


def _undefined_origin(st):
    o = getattr(st, "undefined_from", None)
    return (
        f" (they hold what the instruction at {o[0]} computed from tile {o[1]}, of which nothing was written)"
        if o
        else ""
    )


def check_read(v, loc, defer=False):
    """Refuse a read of on-chip elements nothing wrote. With `defer` (an instruction's operand), a
    read of which *no* element is defined is not refused here but recorded: `emit` then leaves
    the instruction out and marks what it would write undefined (see `emit`)."""
    st = storage_of(v.base)
    if not st.on_chip:
        st.read = True
        return
    st.reads += 1
    st.producer = None
    if st.fully_written:
        return
    p, f = _cells(v)
    written = st.written if st.written is not None else np.zeros((st.partitions, st.free_elems), dtype=bool)
    cells = written[p, f]
    if not cells.all():
        if defer and not cells.any():
            T().undefined_read = (st, loc)
            return
        raise NkiError(
            f"read of uninitialised memory: {int((~cells).sum())} of the {cells.size} elements this "
            f"instruction reads from tile {st.describe()} were never written" + _undefined_origin(st),
            loc,
        )


def unmark_write(v, loc, origin):
    """The elements of on-chip view `v` hold garbage from here on: an instruction whose operand was
    entirely undefined would have written them (docs/nki.md, Uninitialised memory). `origin` is
    (line, tile description) of the first read of never-written memory they derive from."""
    st = storage_of(v.base)
    st.writes += 1
    if st.fully_written:
        st.written = np.ones((st.partitions, st.free_elems), dtype=bool)
        st.fully_written = False
    if st.written is None:
        st.written = np.zeros((st.partitions, st.free_elems), dtype=bool)
    p, f = _cells(v)
    st.written[p, f] = False
    if getattr(st, "undefined_from", None) is None:
        st.undefined_from = origin


def mark_write(v):
    st = storage_of(v.base)
    if not st.on_chip:
        st.written = True
        return
    st.writes += 1
    if isinstance(v.base, TileStorage) and v.is_full():
        st.fully_written = True
        st.written = None
        return
    if st.fully_written:
        return
    if st.written is None:
        st.written = np.zeros((st.partitions, st.free_elems), dtype=bool)
    p, f = _cells(v)
    st.written[p, f] = True
    if st.written.all():
        st.fully_written = True
        st.written = None


def scalar_operand(x, loc):
    """An immediate or a [P, 1] tile operand (ScalarOperand JSON)."""
    if isinstance(x, View):
        check_read(x, loc, defer=True)
        return {"tile": x._ap(loc=loc)}
    if isinstance(x, (bool, np.bool_)):
        return {"imm": 1.0 if x else 0.0}
    v = float(x)
    if math.isnan(v):
        return {"imm": "nan"}
    if v in (float("inf"), float("-inf")):
        return {"imm": "inf" if v > 0 else "-inf"}
    return {"imm": v}


def masked_off(out, mask):
    """`out`, the fresh result of an instruction whose `mask=` keeps no element (`mask=False`, or
    a predicate true nowhere): the instruction does not execute, so it writes nothing, and
    assigning its result writes nothing either (`dst[...] = op(..., mask=False)` leaves dst as it
    was, as on a device where a masked-off instruction does not run). A result that is undefined
    because its inputs are, with a mask that keeps elements, is not marked: copying it stays a
    read of uninitialised memory."""
    from ._core import mask_box

    if mask is not None and mask is not True and mask_box(mask, out.shape) is None:
        storage_of(out.base).masked_off = True
    return out


def is_masked_off(v):
    """A result `masked_off` marked that no instruction has written since."""
    if not hasattr(v, "base") or not getattr(v.base, "on_chip", False):
        return False
    st = storage_of(v.base)
    return bool(getattr(st, "masked_off", False)) and st.writes == 0


# The instructions that take a packed MX container (`_x4`) operand: the MX pair, and DMA/memset,
# which move or zero its bits (docs/isa.md §3a). Every other instruction reads numbers.
_PACKED_OPS = frozenset(("quantize_mx", "nc_matmul_mx", "dma_copy", "memset"))


def _refuse_packed(op, fields, loc):
    for k, v in fields.items():
        if isinstance(v, dict) and v.get("dtype") in PACKED_TRN_NAMES:
            names = dict(zip(PACKED_TRN_NAMES, ("float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4")))
            raise NkiError(
                f"{op}'s {k} is {names[v['dtype']]}, a packed MX container: only nisa.quantize_mx, "
                "nisa.nc_matmul_mx, DMA copies (to the same dtype) and memset of zero take one",
                loc,
            )


def emit(engine, op, fields, loc, reads=(), writes=(), fresh=None, box=None):
    """Append one instruction: check that `reads` are initialised, then mark `writes` written.
    `fresh`: the result tile the `dst` field writes, which a following `x[...] = result` may
    redirect into `x` (the NKI compiler writes an instruction's result where it is assigned)."""
    t = T()
    if op not in _PACKED_OPS:
        _refuse_packed(op, fields, loc)
    for v in reads:
        if v is not None:
            check_read(v, loc, defer=True)
    pend = getattr(t, "undefined_read", None)
    t.undefined_read = None
    if pend is not None and pend[1] == loc:
        # An operand of which no element is defined: the instruction would compute garbage from
        # it. On chip that is no error yet: the instruction is left out and the elements it
        # would write become undefined, so the garbage is refused only where it is used (a
        # store to HBM, or a read mixing it with defined data), and a kernel that computes on
        # rows a mask left empty, then stores them masked off, runs as it does on a device.
        st = pend[0]
        origin = getattr(st, "undefined_from", None) or (loc, st.describe())
        ws = [w for w in writes if w is not None]
        if ws and all(storage_of(w.base).on_chip for w in ws):
            for w in ws:
                unmark_write(w, loc, origin)
            return None
        # the garbage reaches HBM (or an instruction that writes nothing on chip): refused, at the
        # line that first read memory nothing wrote
        where = "" if origin[0] == loc else f"; what that line computed reaches this {op} at {loc}"
        raise NkiError(
            f"read of uninitialised memory: tile {origin[1]} is read where nothing was written{where}", origin[0]
        )
    ins = t.emit(engine, op, fields, loc)
    for v in writes:
        if v is not None:
            mark_write(v)
    if fresh is not None:
        st = storage_of(fresh.base)
        st.producer = (ins, op, engine, box, [storage_of(r.base) for r in reads if r is not None])
    return ins


def is_view(x):
    return isinstance(x, View)


def column(v):
    """A 1-D on-chip view (`t[:, j]`, one element per partition) as the `[P, 1]` column it is:
    a fresh tile of shape `(P,)` is stored as `[P, 1]`, so the operands and the result of an
    element-wise op must agree on that rank for their access patterns to pair up (numpy's rules
    would broadcast `(P,)` against `(P, 1)` to `(P, P)`)."""
    if isinstance(v, View) and v.ndim == 1 and v.base.on_chip:
        pax = getattr(v.base, "par_axis", 0)
        if v.shape[0] > 1 and v.idx[pax][1][0] == 0:
            # `t[0, :]`: free elements of one partition, a [1, N] row
            return View(v.base, (1, v.shape[0]), [(c, (0,) + tuple(co)) for c, co in v.idx], v.dtype)
        return View(v.base, (v.shape[0], 1), [(c, tuple(co) + (0,)) for c, co in v.idx], v.dtype)
    return v


def prep(v, shape, loc):
    """Operand `v` broadcast to `shape`. On-chip partition broadcasting (1 -> P) is not an access
    pattern a compute engine has: it is materialised by a DMA into a new tile first."""
    shape = tuple(shape)
    b = v.broadcast(shape)
    if v.base.on_chip and len(shape) and shape[0] > 1:
        pad = len(shape) - v.ndim
        first = 1 if pad > 0 else v.shape[0]
        if first == 1:
            tmp = new_tile(shape, v.dtype, loc=loc)
            emit("dma", "dma_copy", {"dst": tmp._ap(loc=loc), "src": b._ap(loc=loc)}, loc, reads=[v], writes=[tmp])
            return tmp
    return b


def _same_elements(a, b):
    return bool(a) and bool(b) and a[0] == b[0] and math.prod(a[1:]) == math.prod(b[1:])


def in_shape(v, shape, loc):
    """Operand `v` of an ISA instruction in the instruction's `shape`. The NKI ISA pairs its
    operands' elements in order: they need the same partition count and the same number of
    elements per partition, not one shape (nki.isa.tensor_tensor, tensor_copy, dma_copy...). So an
    operand with those is seen in `shape` in element order; any other is broadcast (numpy rules,
    `prep`)."""
    shape = tuple(shape)
    if v.shape == shape:
        return v
    if not _same_elements(v.shape, shape):
        return prep(v, shape, loc)
    r = v.in_element_order(shape)
    if r is None:
        raise NkiError(
            f"an operand of shape {v.shape} pairs with shape {shape}: it has the same elements per "
            f"partition, but its steps do not merge into that shape as a view (numpy's no-copy "
            f"reshape rule)",
            loc,
        )
    return r


def common_shape(loc, *views):
    """The shape an ISA instruction walks its operands in. Operands with the same partitions and
    elements per partition: the first of their shapes (most axes first) every operand can be seen
    in, in element order. Otherwise their numpy broadcast."""
    vs = [v for v in views if isinstance(v, View)]
    shapes = [v.shape for v in vs]
    if all(_same_elements(s, shapes[0]) for s in shapes):
        for cand in sorted(shapes, key=len, reverse=True):
            if all(s == cand or v.in_element_order(cand) is not None for v, s in zip(vs, shapes)):
                return cand
        raise NkiError(
            f"operand shapes {' and '.join(str(s) for s in shapes)} hold the same elements per "
            f"partition, but no one shape is a view of them all",
            loc,
        )
    return broadcast_shapes(*shapes)


def partition_column(v, shape):
    """A [P, 1] tile operand of a per-partition scalar (tensor_scalar's operand0, activation's
    bias and scale) broadcast over a data tile of `shape` of any rank: one value per partition."""
    shape = tuple(shape)
    if v.ndim == 2 and v.shape[1] == 1 and len(shape) > 2:
        pad = len(shape) - 2
        v = View(v.base, v.shape + (1,) * pad, [(c, co + (0,) * pad) for c, co in v.idx], v.dtype)
    return v.broadcast(shape)


def box_views(box, *views):
    return [None if v is None else v.restrict(box) for v in views]


def out_dtype(dtype, *operands):
    if dtype is not None:
        return as_dtype(dtype)
    dts = []
    for o in operands:
        if isinstance(o, View):
            dts.append(o.dtype)
    if not dts:
        return as_dtype(np.float32)
    from ._core import promote, scalar_dtype

    d = dts[0]
    for o in operands[1:]:
        d = promote(d, o.dtype if isinstance(o, View) else scalar_dtype(o))
    if len(dts) == 1 and not isinstance(operands[0], View):
        d = promote(scalar_dtype(operands[0]), dts[0])
    return d


# engines allowed to write each memory (docs/isa.md section 3)
_WRITES = {
    "tensor": {"psum"},
    "vector": {"sbuf", "psum"},
    "scalar": {"sbuf", "psum"},
    "gpsimd": {"sbuf"},
    "dma": {"sbuf", "hbm"},
}
_ELEMENTWISE = {
    "tensor_tensor",
    "tensor_scalar",
    "activation",
    "tensor_copy",
    "scalar_tensor_tensor",
    "reciprocal",
    "dma_copy",
}


def _probe(dst, val):
    return sys.getrefcount(val)


def _via(dst, val):
    return _probe(dst, val)


class _Calibrate:
    seen = None

    def __setitem__(self, key, val):
        _Calibrate.seen = _via(self, val)


_Calibrate()[0] = object()
# References a temporary value has inside try_redirect when it comes straight from the kernel's
# `dst[...] = op(...)` / `dst += op(...)` through a dunder method and one function, as measured
# on this interpreter. More references mean the kernel keeps the result (`r = op(...)`), so the
# result must stay a tile of its own.
_TEMP_REFS = _Calibrate.seen


def try_redirect(dst, val, accumulate=False):
    """`dst[...] = val` (or `+=` for a matmul into PSUM) where val is an unread fresh result that
    the kernel does not keep: rewrite the instruction that produced it to write `dst` directly, as
    the NKI compiler does. Called as dunder method -> one function -> here (see _TEMP_REFS)."""
    if not isinstance(val, View) or not val.is_full() or not isinstance(val.base, TileStorage):
        return False
    if sys.getrefcount(val) > _TEMP_REFS:
        return False
    st = val.base
    if sys.getrefcount(st) > 3:  # val.base, st, the argument: any more is another view of the result
        return False
    if st.producer is None or st.writes != 1 or st.reads != 0:
        return False
    ins, op, engine, box, srcs = st.producer
    if dst.shape != val.shape:
        # an ISA instruction writes its dst in element order (same partitions, same elements per
        # partition): `t[p, 0:12] = nisa.op(x)` with x of shape [P, 4, 3]
        if box is not None and list(box) != [(0, s) for s in val.shape]:
            return False
        if not _same_elements(dst.shape, val.shape):
            return False
        # (when dst's steps do not split into val's shape, its own access pattern still walks the
        # same elements in the same order)
        seen = dst.in_element_order(val.shape)
        dst = dst if seen is None else seen
    dmem = "hbm" if not dst.base.on_chip else dst.base.buffer
    if dmem not in _WRITES[engine]:
        return False
    if engine == "tensor" and trn_name(dst.dtype) != "f32" and op == "nc_matmul":
        return False
    if accumulate and op != "nc_matmul":
        return False
    dst_st = storage_of(dst.base)
    target = dst if box is None else dst.restrict(box)
    loc = ins.get("loc")
    new_ap = target._ap(loc=loc)
    fields = ins["op"][op]
    if dst_st in srcs:
        if op not in _ELEMENTWISE:
            return False
        same = [k for k, v in fields.items() if isinstance(v, dict) and v == new_ap | {"dtype": v.get("dtype")}]
        if not same:
            return False
    if accumulate:
        check_read(target, loc)
        fields["accumulate"] = True
    fields["dst"] = new_ap
    st.producer = None
    st.writes = 0
    mark_write(target)
    st.release()
    return True


def is_fp(dt):
    return is_float(dt)


def mask_and_box(mask, shape):
    return mask_box(mask, shape)


__all__ = ["Aff", "NkiError", "act", "alu", "column", "emit", "new_tile", "prep", "scalar_operand", "try_redirect"]


def narrow(box, views, loc):
    """Element-wise instructions run only where all their inputs are defined (NKI: masked-out
    elements of a fresh tile are undefined, and so is anything computed from them; a later masked
    store never reads them). Returns the box of `box` where every on-chip input view was written
    (all of `box` when nothing is: see `emit`); a defined region that is not a box is an error."""
    if box is None:
        return None
    defined = None
    for v in views:
        if v is None or not isinstance(v, View) or not v.base.on_chip:
            continue
        st = storage_of(v.base)
        if st.fully_written:
            continue
        sub = v.restrict(box)
        if st.written is None:
            w = np.zeros(sub.shape, dtype=bool)
        else:
            p, f = sub.positions()
            w = st.written[p, f]
            if w.ndim > len(sub.shape):  # elements spanning several storage elements
                w = w.all(axis=-1)
        defined = w if defined is None else (defined & w)
    if defined is None or defined.all():
        return box
    if not defined.any():
        # nothing defined: the whole box is left to `emit`, which leaves out an instruction with an
        # operand of which no element is defined (its writes become undefined) and refuses one
        # whose inputs are partly defined, or that writes HBM
        return box
    nb = []
    for ax in range(defined.ndim):
        other = tuple(i for i in range(defined.ndim) if i != ax)
        keep = np.nonzero(defined.any(axis=other) if other else defined)[0]
        nb.append((box[ax][0] + int(keep[0]), box[ax][0] + int(keep[-1]) + 1))
    inner = tuple(slice(lo - b[0], hi - b[0]) for (lo, hi), b in zip(nb, box))
    if not defined[inner].all():
        raise NkiError("read of uninitialised memory: the written part of an input tile is not a rectangular box", loc)
    return nb


def row_box(loc, *views):
    """Partitions [lo, hi) on which every view (all [P, ...] on chip, P equal) is wholly defined:
    per-partition instructions run on just those rows (rows a masked load left undefined are
    skipped, as in NKI). Undefined elements inside a defined row are an error."""
    lo, hi = 0, None
    for v in views:
        if v is None or not isinstance(v, View) or not v.base.on_chip:
            continue
        full = [(0, s) for s in v.shape]
        nb = narrow(full, [v], loc)
        if nb[1:] != full[1:]:
            raise NkiError(
                f"read of uninitialised memory: tile {storage_of(v.base).describe()} has unwritten "
                f"elements inside its written rows",
                loc,
            )
        lo = max(lo, nb[0][0])
        hi = nb[0][1] if hi is None else min(hi, nb[0][1])
    return lo, hi


def rows(v, lo, hi):
    """View `v` restricted to partitions [lo, hi) (None passes through)."""
    if v is None or hi is None:
        return v
    return v.restrict([(lo, hi)] + [(0, s) for s in v.shape[1:]])
