"""`neuronxcc.nki.isa` (legacy signatures: calls return a new tile) traced into trnsim
instructions, one instruction per call unless noted. Semantics: docs/isa.md."""

import enum

import numpy as np

from . import _build as B
from . import _emit as E
from ._core import (
    Aff,
    NkiError,
    Pred,
    View,
    as_dtype,
    caller_loc,
    float32,
    mask_box,
    trn_name,
    uint32,
)
from ._emit import emit, new_tile, scalar_operand
from ._targets import nc_generation


class engine(enum.IntEnum):
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    vector = 5
    sync = 6


unknown_engine = engine.unknown
tensor_engine = engine.tensor
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
vector_engine = engine.vector
dma_engine = engine.sync  # the DMA queues (legacy `nisa.dma_engine`); accepted where an engine is named


class reduce_cmd(enum.IntEnum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4  # VectorE's accumulator loaded from an operand (tensor_scalar_cumulative's imm1)


class dge_mode(enum.IntEnum):
    none = 0
    swdge = 1
    hwdge = 2
    unknown = 3


class oob_mode(enum.IntEnum):
    error = 0
    skip = 1


class matmul_perf_mode(enum.Enum):
    """TensorE's performance modes for `nc_matmul(perf_mode=)` (AWS's values: the mode's name);
    `double_row` is FP8, NeuronCore-v3+."""

    none = "none"
    double_row = "double_row"


class nc_version(enum.IntEnum):
    gen2 = 2
    gen3 = 3


def get_nc_version():
    """The NeuronCore version of the kernel's target (its `core` field: NeuronCore-v2 on trn1, v3
    on trn2)."""
    return nc_version(nc_generation(E.T().target))


_ENGINE_NAME = {engine.tensor: "tensor", engine.scalar: "scalar", engine.gpsimd: "gpsimd", engine.vector: "vector"}


def _eng(e, default):
    if e is None or e == engine.unknown:
        return default
    return _ENGINE_NAME.get(engine(e), default)


def _dt(dtype, x):
    return as_dtype(dtype) if dtype is not None else x.dtype


def _mask_off(mask):
    """A mask that is the constant False: the instruction does not execute."""
    return isinstance(mask, (bool, np.bool_)) and not mask


def _no_mask(mask, name, loc):
    if mask is not None and not (isinstance(mask, (bool, np.bool_)) and mask):
        raise NkiError(f"nisa.{name}(mask=) is not supported by the trnsim front-end (docs/nki.md, gaps)", loc)


def _fresh(shape, dtype, loc, buffer="sbuf"):
    return new_tile(shape, dtype, buffer, loc=loc)


def _box(mask, shape, *views, narrow=()):
    """The mask's box, narrowed to where the element-wise inputs `narrow` are defined."""
    box = E.narrow(mask_box(mask, shape), list(narrow), caller_loc()[0])
    if box is None:
        return None, [None] * len(views)
    return box, [None if v is None else v.restrict(box) for v in views]


# ---------------------------------------------------------------------------------------------
# TensorE


def nc_matmul(
    stationary,
    moving,
    *,
    is_stationary_onezero=False,
    is_moving_onezero=False,
    is_transpose=False,
    tile_position=(),
    tile_size=(),
    mask=None,
    **kwargs,
):
    """TensorE `nc_matmul`: stationary[K, M].T @ moving[K, N] into a new fp32 PSUM tile [M, N]."""
    loc = caller_loc()[0]
    if _mask_off(mask):
        m = stationary.shape[1] if stationary.ndim >= 2 else 1
        n = int(np.prod(moving.shape[1:])) if moving.ndim >= 2 else 1
        shape = (
            (stationary.shape[0], int(np.prod(stationary.shape[1:])) if stationary.ndim > 1 else 1)[::-1]
            if is_transpose
            else (m, n)
        )
        return E.masked_off(_fresh(shape, float32, loc, "psum"), mask)
    _no_mask(mask, "nc_matmul", loc)
    pm = kwargs.get("perf_mode")
    mode = "none" if pm is None else str(getattr(pm, "name", pm)).lower() or "none"
    if is_transpose:
        if mode != "none":
            raise NkiError(f"nc_matmul(is_transpose=True, perf_mode={pm!r}): a transpose has no performance mode", loc)
        return nc_transpose(stationary, engine=engine.tensor)
    if mode.startswith("double_row_gen"):
        # the legacy API's spelling names the NeuronCore generation (AWS's nc_matmul example on
        # trn2 passes perf_mode="double_row_gen3")
        gen = nc_generation(E.T().target)
        if mode != f"double_row_gen{gen}":
            raise NkiError(
                f"nc_matmul(perf_mode={pm!r}) names another NeuronCore generation: this kernel's target "
                f"{E.T().target} is NeuronCore-v{gen} (perf_mode=double_row or double_row_gen{gen})",
                loc,
            )
        mode = "double_row"
    if mode == "double_row":
        if tile_position or tile_size:
            raise NkiError(
                "nc_matmul(perf_mode=double_row) with tile_position/tile_size: trnsim does not model PE "
                "tiling in double-row mode yet (AWS forbids it with column tiling); it refuses rather than "
                "check the tile against the wrong layout",
                loc,
            )
        return _double_row_matmul(stationary, moving, loc)
    if tile_position or tile_size:
        _check_pe_tile(stationary, tile_position, tile_size, loc)
    if mode != "none":
        raise NkiError(
            f"nc_matmul(perf_mode={pm!r}): trnsim simulates TensorE's none and double_row modes (quad is "
            "nc_matmul_mx's); it refuses rather than run an ordinary matmul in another mode's place",
            loc,
        )
    m = stationary.shape[1] if stationary.ndim >= 2 else 1
    n = int(np.prod(moving.shape[1:])) if moving.ndim >= 2 else 1
    out = _fresh((m, n), float32, loc, "psum")
    # TensorE reads only SBUF: an operand in PSUM (an nc_transpose result, say) is staged to SBUF
    # first (VectorE tensor_copy), as the kernel would have to on a device
    stationary, moving = B._on_sbuf(stationary, loc), B._on_sbuf(moving, loc)
    st, mv, box = _matmul_defined(stationary, moving, out, loc)
    o = out if box is None else out.restrict(box)
    emit(
        "tensor",
        "nc_matmul",
        {"dst": o._ap(loc=loc), "stationary": st._ap(loc=loc), "moving": mv._ap(loc=loc)},
        loc,
        reads=[st, mv],
        writes=[o],
        fresh=out,
        box=box,
    )
    return out


_FP8 = frozenset({"float8_e4m3", "float8_e4m3fn", "float8_e5m2"})  # TensorE's FP8 inputs


def _double_row_matmul(stationary, moving, loc):
    """`perf_mode=double_row` (NeuronCore-v3+, FP8): stationary [K, 2, M] and moving [K, 2, N] with
    K <= 128 partitions, contracted over K and the pair axis (256 products per output element in
    one pass): dst[m, n] = sum over p, j of stationary[p, j, m] * moving[p, j, n], into a new fp32
    PSUM tile [M, N] (AWS's nc_matmul page; the simulator's `nc_matmul` with `perf_mode`)."""
    from ._targets import params

    target = E.T().target
    if "double_row" not in params(target).get("matmul_perf_modes", []):
        raise NkiError(
            f"nc_matmul(perf_mode=double_row) exists on NeuronCore-v3 and later (trn2, trn3), not on {target}", loc
        )
    for what, t, d in (("stationary", stationary, "M"), ("moving", moving, "N")):
        if not isinstance(t, View) or t.ndim != 3 or t.shape[1] != 2:
            shape = list(t.shape) if isinstance(t, View) else type(t).__name__
            raise NkiError(
                f"nc_matmul(perf_mode=double_row): {what} is [K, 2, {d}] (two contraction rows per "
                f"partition), got {shape}",
                loc,
            )
        if str(np.dtype(t.dtype)) not in _FP8:
            raise NkiError(f"nc_matmul(perf_mode=double_row) multiplies FP8 inputs only; {what} is {t.dtype}", loc)
    if stationary.shape[0] != moving.shape[0]:
        raise NkiError(
            f"nc_matmul: contraction sizes differ: stationary has K = {stationary.shape[0]} partitions, "
            f"moving {moving.shape[0]}",
            loc,
        )
    stationary, moving = B._on_sbuf(stationary, loc), B._on_sbuf(moving, loc)
    out = _fresh((stationary.shape[2], moving.shape[2]), float32, loc, "psum")
    emit(
        "tensor",
        "nc_matmul",
        {
            "dst": out._ap(loc=loc),
            "stationary": stationary._ap(loc=loc),
            "moving": moving._ap(loc=loc),
            "perf_mode": "double_row",
        },
        loc,
        reads=[stationary, moving],
        writes=[out],
        fresh=out,
    )
    return out


def _check_pe_tile(stationary, tile_position, tile_size, loc):
    """TensorE's row/column tiling (AWS's nc_matmul page): tile_size = (row_size, column_size),
    each 64 or 128 (also 32 from NeuronCore-v3 on); the stationary tile [K, M] fits it (K rows,
    M columns); tile_position = (start_row, start_column), multiples of the sizes, inside the
    128 x 128 array. A tile computes the same stationary.T @ moving: trnsim checks the rules and
    runs the ordinary matmul. Tiles running side by side is a speed-up its cost model does not
    credit (each matmul is costed on its own)."""
    if not tile_position or not tile_size:
        raise NkiError("nc_matmul: tile_position and tile_size go together (PE tiling)", loc)
    try:
        (r0, c0), (rs, cs) = (int(v) for v in tile_position), (int(v) for v in tile_size)
    except (TypeError, ValueError):
        raise NkiError(
            f"nc_matmul: tile_position {tile_position!r} and tile_size {tile_size!r} are (row, column) pairs", loc
        ) from None
    sizes = (32, 64, 128) if nc_generation(E.T().target) >= 3 else (64, 128)
    for what, n in (("row", rs), ("column", cs)):
        if n not in sizes:
            raise NkiError(f"nc_matmul: the {what} tile size must be one of {list(sizes)} on this target, not {n}", loc)
    for what, start, n in (("start_row", r0, rs), ("start_column", c0, cs)):
        if start < 0 or start % n or start + n > 128:
            raise NkiError(f"nc_matmul: {what} {start} must be a multiple of {n} with the tile inside 128", loc)
    k = stationary.shape[0]
    m = stationary.shape[1] if stationary.ndim >= 2 else 1
    if k > rs or m > cs:
        raise NkiError(f"nc_matmul: the stationary tile [{k}, {m}] exceeds tile_size ({rs}, {cs})", loc)


def _matmul_defined(stationary, moving, out, loc):
    """The columns of `stationary` (result rows) and of `moving` (result columns) that are defined
    on every contraction row: a matmul over operands whose trailing columns a masked load left
    undefined computes only the defined part of its result (the rest is undefined, as in NKI; a
    masked store later skips it). Undefined contraction rows would spoil every result element
    and are refused (by the read check). Operands of another rank are taken whole."""
    if stationary.ndim != 2 or moving.ndim != 2:
        return stationary, moving, None
    full_s, full_m = [(0, s) for s in stationary.shape], [(0, s) for s in moving.shape]
    bs = E.narrow(full_s, [stationary], loc)
    bm = E.narrow(full_m, [moving], loc)
    if bs == full_s and bm == full_m:
        return stationary, moving, None
    if bs[0] != full_s[0] or bm[0] != full_m[0]:
        return stationary, moving, None  # undefined contraction rows: refused by emit's read check
    return stationary.restrict(bs), moving.restrict(bm), [bs[1], bm[1]]


def nc_transpose(data, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """TensorE (into PSUM) for tiles beyond 32x32, VectorE (bit-exact, into SBUF) up to 32x32,
    unless engine= says otherwise (AWS: the compiler picks by shape)."""
    loc = caller_loc()[0]
    p = data.shape[0]
    f = int(np.prod(data.shape[1:])) if data.ndim > 1 else 1
    e = _eng(engine, "vector" if p <= 32 and f <= 32 else "tensor")
    out = _fresh((f, p), _dt(dtype, data), loc, "psum" if e == "tensor" else "sbuf")
    if _mask_off(mask):
        return E.masked_off(out, mask)
    _no_mask(mask, "nc_transpose", loc)
    emit(
        e,
        "nc_transpose",
        {"dst": out._ap(loc=loc), "src": data._ap(loc=loc)},
        loc,
        reads=[data],
        writes=[out],
        fresh=out,
    )
    return out


# ---------------------------------------------------------------------------------------------
# ScalarE


def activation(
    op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None, mask=None, dtype=None, **kwargs
):
    """ScalarE `activation`: op(data * scale + bias). A constant non-zero bias becomes a [P, 1]
    tile (VectorE memset) on trn1, whose ScalarE takes only tile biases."""
    loc = caller_loc()[0]
    data, bias, scale = E.column(data), E.column(bias), E.column(scale)
    out = _fresh(data.shape, _dt(dtype, data), loc)
    b = _bias_tile(bias, data.shape[0], loc)
    box, (d, o) = _box(mask, data.shape, data, out, narrow=[data] + _cols(data.shape, b, scale))
    if box is None:
        return E.masked_off(out, mask)
    if reduce_res is not None and box[1:] != [(0, s) for s in data.shape[1:]]:
        raise NkiError("activation with reduce_res: the reduced free elements must all be defined", loc)
    f = {
        "dst": o._ap(loc=loc),
        "func": E.act(op),
        "src": d._ap(loc=loc),
        "scale": scalar_operand(_col_rows(scale, box), loc),
    }
    reads = [d]
    if b is not None:
        f["bias"] = scalar_operand(_col_rows(b, box), loc)
    writes = [o]
    if reduce_res is not None:
        if reduce_op is not None and E.alu(reduce_op) != "add":
            raise NkiError("the Scalar Engine of NeuronCore-v2 reduces with add only", loc)
        # an explicit reduce_cmd decides what happens to the registers before they are read out
        # (`reduce` adds this call's sum to the earlier calls', `idle` reads them unchanged);
        # without one, reading out a result means this call's own sum, as activation_reduce
        cmd = 3 if reduce_cmd is None else int(reduce_cmd)
        if cmd == 4:
            raise NkiError("activation: reduce_cmd.load_reduce loads VectorE's accumulator; ScalarE's has no load", loc)
        f["acc"] = ["idle", "reset", "reduce", "reset_reduce"][cmd]
        r = E.rows(reduce_res, box[0][0], box[0][1])
        f["reduce_res"] = r._ap(loc=loc)
        writes.append(r)
    elif reduce_cmd is not None and int(reduce_cmd) != 0:
        if int(reduce_cmd) == 4:
            raise NkiError("activation: reduce_cmd.load_reduce loads VectorE's accumulator; ScalarE's has no load", loc)
        f["acc"] = ["idle", "reset", "reduce", "reset_reduce"][int(reduce_cmd)]
    emit("scalar", "activation", f, loc, reads=reads, writes=writes, fresh=out, box=box)
    return out


def _cols(shape, *operands):
    """[P, 1] tile operands broadcast over `shape`, for narrowing to where they are defined."""
    return [E.partition_column(o, shape) for o in operands if isinstance(o, View) and o.base.on_chip]


def _col_rows(x, box):
    """A [P, 1] tile operand restricted to the instruction's partitions; anything else as is."""
    if isinstance(x, View):
        return E.rows(x, box[0][0], box[0][1])
    return x


def _bias_tile(bias, parts, loc):
    if bias is None or isinstance(bias, View):
        return bias
    if float(bias) == 0.0:
        return None
    t = new_tile((parts, 1), float32, loc=loc)
    emit("vector", "memset", {"dst": t._ap(loc=loc), "value": float(bias)}, loc, writes=[t])
    return t


def activation_reduce(op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None, **kwargs):
    """ScalarE `activation` with the free-axis sum written to reduce_res (in place)."""
    return activation(
        op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res, mask=mask, dtype=dtype
    )


# ---------------------------------------------------------------------------------------------
# VectorE / GpSimd


def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False, **kwargs):
    """VectorE `tensor_reduce` over free axes (the reduced ones walked innermost)."""
    loc = caller_loc()[0]
    return B._reduce(E.alu(op), data, axis, dtype, mask, keepdims, loc, negate=negate)


def tensor_partition_reduce(op, data, *, mask=None, dtype=None, **kwargs):
    """GpSimd `tensor_partition_reduce`: [P, F] -> [1, F]."""
    loc = caller_loc()[0]
    _no_mask(mask, "tensor_partition_reduce", loc)
    f = int(np.prod(data.shape[1:])) if data.ndim > 1 else 1
    # a 3-D+ tile reduces to [1, *free dims] (its free elements walked in order, as a [P, F] one)
    out = _fresh((1,) + tuple(data.shape[1:]) if data.ndim > 2 else (1, f), _dt(dtype, data), loc)
    emit(
        "gpsimd",
        "tensor_partition_reduce",
        {"dst": out._ap(loc=loc), "src": data._ap(loc=loc), "op": E.alu(op)},
        loc,
        reads=[data],
        writes=[out],
        fresh=out,
    )
    return out


def tensor_tensor(data1, data2, op, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """VectorE `tensor_tensor`; GpSimd for `power` (the only engine with pow) or engine=gpsimd."""
    loc = caller_loc()[0]
    a = E.alu(op)
    e = _eng(engine, "gpsimd" if a == "pow" else "vector")
    shape = E.common_shape(loc, data1, data2)
    out = _fresh(shape, _dt(dtype, data1) if dtype is not None else E.out_dtype(None, data1, data2), loc)
    x, y = E.in_shape(data1, shape, loc), E.in_shape(data2, shape, loc)
    box, (x, y, o) = _box(mask, shape, x, y, out, narrow=[x, y])
    if box is None:
        return E.masked_off(out, mask)
    emit(
        e,
        "tensor_tensor",
        {"dst": o._ap(loc=loc), "in0": x._ap(loc=loc), "in1": y._ap(loc=loc), "op": a},
        loc,
        reads=[x, y],
        writes=[o],
        fresh=out,
        box=box,
    )
    return out


def tensor_scalar(
    data,
    op0,
    operand0,
    reverse0=False,
    op1=None,
    operand1=None,
    reverse1=False,
    *,
    mask=None,
    dtype=None,
    engine=engine.unknown,
    **kwargs,
):
    """VectorE `tensor_scalar` (GpSimd with engine=gpsimd; ScalarE with engine=scalar on trn2)."""
    loc = caller_loc()[0]
    e = _eng(engine, "vector")
    if e == "scalar" and nc_generation(E.T().target) < 3:
        # said here, at the kernel line, rather than as the simulator's engine refusal at run time
        raise NkiError(
            "nisa.tensor_scalar on the Scalar Engine: trn1's ScalarE (NeuronCore-v2) has no tensor_scalar "
            "in trnsim (docs/isa.md); use engine=nisa.vector_engine (or gpsimd), or "
            "nisa.activation(nl.copy, data, scale=..., bias=...) for a multiply-add",
            loc,
        )
    operand0, operand1 = E.column(operand0), E.column(operand1)  # `t[:, i]`: one value per partition
    out = _fresh(data.shape, _dt(dtype, data), loc)
    box, (d, o) = _box(mask, data.shape, data, out, narrow=[data] + _cols(data.shape, operand0, operand1))
    if box is None:
        return E.masked_off(out, mask)
    f = {
        "dst": o._ap(loc=loc),
        "src": d._ap(loc=loc),
        "op0": E.alu(op0),
        "operand0": scalar_operand(_col_rows(operand0, box), loc),
    }
    if reverse0:
        f["reverse0"] = True
    if op1 is not None:
        f["op1"] = E.alu(op1)
        f["operand1"] = scalar_operand(_col_rows(operand1, box), loc)
        if reverse1:
            f["reverse1"] = True
    emit(e, "tensor_scalar", f, loc, reads=[d], writes=[o], fresh=out, box=box)
    return out


def _unmodelled_reduce(name, kwargs, loc, allowed_cmd=()):
    """Refuse the accumulator arguments newer SDKs added to a call trnsim traces without them,
    rather than drop them (a reduce_res never written, a carried reduction restarted)."""
    for k in ("reduce_res", "reduce_op", "reduce_init", "reduce_res_negate"):
        v = kwargs.get(k)
        if v is not None and v is not False:
            raise NkiError(f"nisa.{name}({k}=...) is not modelled by trnsim's {name}", loc)
    cmd = kwargs.get("reduce_cmd")
    if cmd is not None and int(cmd) not in allowed_cmd:
        raise NkiError(f"nisa.{name}(reduce_cmd={cmd!r}): only {list(allowed_cmd)} are modelled", loc)


def scalar_tensor_tensor(
    *, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, mask=None, dtype=None, **kwargs
):
    """VectorE `scalar_tensor_tensor`: (data op0 operand0) op1 operand1 (a tile)."""
    loc = caller_loc()[0]
    _unmodelled_reduce("scalar_tensor_tensor", kwargs, loc, allowed_cmd=(0,))
    shape = E.common_shape(loc, data, operand1)
    out = _fresh(shape, _dt(dtype, data), loc)
    x, y = E.in_shape(data, shape, loc), E.in_shape(operand1, shape, loc)
    box, (x, y, o) = _box(mask, shape, x, y, out, narrow=[x, y])
    if box is None:
        return E.masked_off(out, mask)
    f = {
        "dst": o._ap(loc=loc),
        "src": x._ap(loc=loc),
        "op0": E.alu(op0),
        "operand0": scalar_operand(operand0, loc),
        "op1": E.alu(op1),
        "in1": y._ap(loc=loc),
    }
    if reverse0:
        f["reverse0"] = True
    if reverse1:
        f["reverse1"] = True
    emit("vector", "scalar_tensor_tensor", f, loc, reads=[x, y], writes=[o], fresh=out, box=box)
    return out


def tensor_scalar_reduce(
    *, data, op0, operand0, reduce_op, reduce_res, reverse0=False, mask=None, dtype=None, **kwargs
):
    """VectorE `tensor_scalar_reduce`; reduce_res is written in place (this call's reduction: the
    reset_reduce of SDK 2.33's default)."""
    loc = caller_loc()[0]
    _unmodelled_reduce("tensor_scalar_reduce", {k: v for k, v in kwargs.items() if k != "reduce_res"}, loc, (3,))
    _no_mask(mask, "tensor_scalar_reduce", loc)
    if reverse0:
        raise NkiError("tensor_scalar_reduce(reverse0=True) is not in trnsim's instruction", loc)
    out = _fresh(data.shape, _dt(dtype, data), loc)
    lo, hi = E.row_box(loc, data)
    d, o, r = E.rows(data, lo, hi), E.rows(out, lo, hi), E.rows(reduce_res, lo, hi)
    op0v = E.rows(operand0, lo, hi) if isinstance(operand0, View) else operand0
    emit(
        "vector",
        "tensor_scalar_reduce",
        {
            "dst": o._ap(loc=loc),
            "src": d._ap(loc=loc),
            "op0": E.alu(op0),
            "operand0": scalar_operand(op0v, loc),
            "reduce_op": E.alu(reduce_op),
            "reduce_res": r._ap(loc=loc),
        },
        loc,
        reads=[d],
        writes=[o, r],
        fresh=out,
        box=[(lo, hi)] + [(0, s) for s in data.shape[1:]],
    )
    return out


def tensor_tensor_scan(
    data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *, mask=None, dtype=None, **kwargs
):
    """VectorE `tensor_tensor_scan`."""
    loc = caller_loc()[0]
    _no_mask(mask, "tensor_tensor_scan", loc)
    if reverse0 or reverse1:
        raise NkiError("tensor_tensor_scan reverse0/reverse1 are not in trnsim's instruction", loc)
    out = _fresh(data0.shape, _dt(dtype, data0), loc)
    emit(
        "vector",
        "tensor_tensor_scan",
        {
            "dst": out._ap(loc=loc),
            "in0": data0._ap(loc=loc),
            "in1": data1._ap(loc=loc),
            "initial": scalar_operand(initial, loc),
            "op0": E.alu(op0),
            "op1": E.alu(op1),
        },
        loc,
        reads=[data0, data1],
        writes=[out],
        fresh=out,
    )
    return out


# The identity each reduction starts from on reduce_cmd.reset_reduce (AWS's pseudocode).
_CUMULATIVE_RESET = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "max": float("-inf"), "min": float("inf")}


def _last_free(v):
    """The last element of each partition's (flattened) free elements, as a view."""
    return v[(slice(None),) + tuple(slice(s - 1, s) for s in v.shape[1:])]


def tensor_scalar_cumulative(
    dst=None,
    src=None,
    op0=None,
    op1=None,
    imm0=None,
    imm1=None,
    reduce_cmd=reduce_cmd.reset_reduce,
    *,
    reverse0=False,
    mask=None,
    dtype=None,
    name=None,
    **kwargs,
):
    """VectorE `tensor_scalar_cumulative` into dst (in place): along each partition's free
    elements, `reg = op1(op0(src[i], imm0), reg); dst[i] = reg` (`op0(imm0, src[i])` with
    reverse0), the accumulator `reg` per partition in fp32: reset to op1's identity
    (reset_reduce), loaded from imm1 (load_reduce, an immediate or a [P, 1] tile), or carried
    from the previous tensor_scalar_cumulative of the kernel (reduce). trnsim has no single
    instruction for it yet, so it is traced as VectorE instructions that compute exactly this:
    `tensor_scalar` (op0, fp32), `tensor_tensor_scan` with a constant 1 (-1 for subtract) as
    its multiplier, and a `tensor_copy` of each partition's last value, which is the carried
    accumulator."""
    loc = caller_loc()[0]
    _no_mask(mask, "tensor_scalar_cumulative", loc)
    if not isinstance(dst, View) or not isinstance(src, View):
        raise NkiError("nisa.tensor_scalar_cumulative takes dst= and src= tiles", loc)
    if tuple(dst.shape) != tuple(src.shape):
        raise NkiError(f"tensor_scalar_cumulative: dst {list(dst.shape)} and src {list(src.shape)} differ", loc)
    red = E.alu(op1)
    if red not in _CUMULATIVE_RESET:
        raise NkiError(f"tensor_scalar_cumulative: op1 must be add, subtract, multiply, max or min, not {red}", loc)
    for t in (src, dst):
        if t.dtype in (np.dtype(np.int32), uint32):
            raise NkiError("tensor_scalar_cumulative: int32/uint32 are not among its dtypes (AWS: an ISA limit)", loc)
    cmd = int(reduce_cmd)
    tr = E.T()
    reg = getattr(tr, "_vector_acc", None)
    if cmd == 3:
        initial = _CUMULATIVE_RESET[red]
    elif cmd == 4:
        if imm1 is None:
            raise NkiError("tensor_scalar_cumulative(reduce_cmd=load_reduce) loads the accumulator from imm1", loc)
        initial = E.column(imm1)
    elif cmd == 2:
        if reg is None:
            raise NkiError(
                "tensor_scalar_cumulative(reduce_cmd=reduce) continues the accumulator, but no earlier "
                "tensor_scalar_cumulative of this kernel set it (use reset_reduce or load_reduce)",
                loc,
            )
        if reg.shape[0] != src.shape[0]:
            raise NkiError(
                f"tensor_scalar_cumulative(reduce_cmd=reduce) on {src.shape[0]} partitions continues an "
                f"accumulator of {reg.shape[0]}",
                loc,
            )
        initial = reg
    else:
        raise NkiError("tensor_scalar_cumulative takes reduce_cmd reset_reduce, reduce or load_reduce", loc)
    val = tensor_scalar(src, op0, imm0, reverse0=reverse0, dtype=float32)
    step = memset(src.shape, -1.0 if red == "subtract" else 1.0, float32)
    # reg_i = (step * reg_{i-1}) op1' val_i: reg + val, reg * val, max, min; for subtract
    # val - reg = (-1 * reg) + val, exactly (a negation and one rounded addition)
    acc = tensor_tensor_scan(step, val, initial, np.multiply, np.add if red == "subtract" else op1, dtype=float32)
    tr._vector_acc = tensor_copy(_last_free(acc), engine=vector_engine)
    B._assign(dst, acc)


def tensor_copy(src, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """VectorE `tensor_copy` (GpSimd with engine=gpsimd; engine=scalar on trn1 is ScalarE
    `activation(copy)`, trn1's ScalarE having no tensor_copy)."""
    loc = caller_loc()[0]
    e = _eng(engine, "vector")
    out = _fresh(src.shape, _dt(dtype, src), loc)
    box, (s, o) = _box(mask, src.shape, src, out, narrow=[src])
    if box is None:
        return E.masked_off(out, mask)
    if e == "scalar" and not E.T().params["scalar_tensor_copy"]:
        emit(
            "scalar",
            "activation",
            {"dst": o._ap(loc=loc), "func": "copy", "src": s._ap(loc=loc), "scale": {"imm": 1.0}},
            loc,
            reads=[s],
            writes=[o],
            fresh=out,
            box=box,
        )
    else:
        emit(
            e,
            "tensor_copy",
            {"dst": o._ap(loc=loc), "src": s._ap(loc=loc)},
            loc,
            reads=[s],
            writes=[o],
            fresh=out,
            box=box,
        )
    return out


def tensor_copy_predicated(*, src, dst, predicate, reverse_pred=False, mask=None, dtype=None, **kwargs):
    """VectorE `tensor_copy_predicated`: dst (in place) = src where predicate != 0."""
    loc = caller_loc()[0]
    if mask is None:
        dst = E.in_shape(dst, E.common_shape(loc, dst, src, predicate), loc)
    box, (s, d, p) = _box(mask, dst.shape, E.in_shape(src, dst.shape, loc), dst, E.in_shape(predicate, dst.shape, loc))
    if box is None:
        return
    f = {"dst": d._ap(loc=loc), "src": s._ap(loc=loc), "predicate": p._ap(loc=loc)}
    if reverse_pred:
        f["reverse_pred"] = True
    emit("vector", "tensor_copy_predicated", f, loc, reads=[s, p], writes=[d])
    return


def reciprocal(data, *, mask=None, dtype=None, **kwargs):
    """VectorE `reciprocal`."""
    return B._unary_vec("reciprocal", data, dtype, mask, caller_loc()[0])


def memset(shape, value, dtype, *, mask=None, engine=engine.unknown, **kwargs):
    """VectorE `memset` (GpSimd with engine=gpsimd)."""
    loc = caller_loc()[0]
    e = _eng(engine, "vector")
    out = _fresh(tuple(shape), as_dtype(dtype), loc)
    box, (o,) = _box(mask, out.shape, out)
    if box is None:
        return E.masked_off(out, mask)
    emit(e, "memset", {"dst": o._ap(loc=loc), "value": B._imm(value)}, loc, writes=[o], fresh=out, box=box)
    return out


def iota(expr, dtype, *, mask=None, **kwargs):
    """GpSimd `iota`: an affine index expression [P, F...] evaluated per element in int32."""
    loc = caller_loc()[0]
    _no_mask(mask, "iota", loc)
    if not isinstance(expr, Aff):
        raise NkiError("nisa.iota takes an affine index expression (nl.arange / nl.mgrid arithmetic)", loc)
    shape = expr.shape if expr.ndim >= 2 else expr.shape + (1,)
    a = expr.aligned(len(shape)) if expr.ndim >= 2 else expr[:, None]
    out = _fresh(shape, as_dtype(dtype), loc)
    pattern = [[a.coef[i], shape[i]] for i in range(1, len(shape))]
    emit(
        "gpsimd",
        "iota",
        {"dst": out._ap(loc=loc), "offset": a.const, "channel_multiplier": a.coef[0], "pattern": pattern},
        loc,
        writes=[out],
        fresh=out,
    )
    return out


_SEL = {
    "eq": ("equal", 1),
    "ne": ("not_equal", 1),
    "gt": ("greater_than", 1),
    "ge": ("greater_equal", 1),
    "lt": ("greater_than", -1),
    "le": ("greater_equal", -1),
}


def affine_select(pred, on_true_tile, on_false_value, *, mask=None, dtype=None, **kwargs):
    """GpSimd `affine_select`: one comparison `affine cmp value`, rewritten as `v cmp 0` with v affine
    (a < b as b - a > 0)."""
    loc = caller_loc()[0]
    if not isinstance(pred, Pred) or pred.op not in _SEL:
        raise NkiError("affine_select takes one comparison of affine expressions (no '&')", loc)
    cmp, sign = _SEL[pred.op]
    diff = pred.a - pred.b if isinstance(pred.a, Aff) else (pred.b * -1 + pred.a)
    if not isinstance(diff, Aff):
        raise NkiError("affine_select predicate has no index expression", loc)
    v = diff * sign
    on_true_tile = E.column(on_true_tile)
    shape = on_true_tile.shape
    v = v.aligned(len(shape))
    out = _fresh(shape, _dt(dtype, on_true_tile), loc)
    # a mask (a constant, or a box of the tile) restricts the elements the instruction touches;
    # the affine value is taken at the box's first element, so each element keeps its own value
    box, (t, o) = _box(mask, shape, on_true_tile, out, narrow=[on_true_tile])
    if box is None:
        return E.masked_off(out, mask)
    if t.base.on_chip and t.base.buffer == "psum":
        # GpSimd has no access to PSUM: the tile is staged to SBUF first (VectorE tensor_copy)
        t = B._on_sbuf(t, loc)
    offset = v.const + sum(c * lo for c, (lo, _) in zip(v.coef, box))
    sub = [hi - lo for lo, hi in box]
    pattern = [[v.coef[i], sub[i]] for i in range(1, len(shape))]
    emit(
        "gpsimd",
        "affine_select",
        {
            "dst": o._ap(loc=loc),
            "on_true": t._ap(loc=loc),
            "on_false": B._imm(on_false_value),
            "offset": offset,
            "channel_multiplier": v.coef[0],
            "pattern": pattern,
            "cmp": cmp,
        },
        loc,
        reads=[t],
        writes=[o],
        fresh=out,
        box=box,
    )
    return out


def bn_stats(data, *, mask=None, dtype=None, **kwargs):
    """VectorE `bn_stats`: [P, <=512] -> [P, 6]. A mask restricts the elements (and partitions)
    it reads, e.g. the last, shorter chunk of a row."""
    loc = caller_loc()[0]
    out = _fresh((data.shape[0], 6), _dt(dtype, data), loc)
    box = mask_box(mask, data.shape)
    if box is None:
        return E.masked_off(out, mask)
    narrowed = E.narrow(box, [data], loc)  # rows a masked load left undefined are skipped, as in NKI
    if narrowed[1:] != box[1:]:
        raise NkiError("read of uninitialised memory: bn_stats reads free elements that were never written", loc)
    box = narrowed
    d = data.restrict(box)
    o = out.restrict([box[0], (0, 6)])
    emit(
        "vector",
        "bn_stats",
        {"dst": o._ap(loc=loc), "src": d._ap(loc=loc)},
        loc,
        reads=[d],
        writes=[o],
        fresh=out,
        box=[box[0], (0, 6)],
    )
    return out


def bn_aggr(data, *, mask=None, dtype=None, **kwargs):
    """VectorE `bn_aggr`: [P, 6k] -> [P, 2] (mean, variance)."""
    loc = caller_loc()[0]
    _no_mask(mask, "bn_aggr", loc)
    out = _fresh((data.shape[0], 2), _dt(dtype, data), loc)
    lo, hi = E.row_box(loc, data)
    d, o = E.rows(data, lo, hi), E.rows(out, lo, hi)
    emit(
        "vector",
        "bn_aggr",
        {"dst": o._ap(loc=loc), "src": d._ap(loc=loc)},
        loc,
        reads=[d],
        writes=[o],
        fresh=out,
        box=[(lo, hi), (0, 2)],
    )
    return out


def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, *, mask=None, **kwargs):
    """GpSimd `local_gather`."""
    loc = caller_loc()[0]
    _no_mask(mask, "local_gather", loc)
    nidx = int(np.prod(index.shape[1:])) * 16 if num_valid_indices is None else int(num_valid_indices)
    out = _fresh((src_buffer.shape[0], nidx * num_elem_per_idx), src_buffer.dtype, loc)
    emit(
        "gpsimd",
        "local_gather",
        {
            "dst": out._ap(loc=loc),
            "src": src_buffer._ap(loc=loc),
            "index": index._ap(loc=loc),
            "num_elem_per_idx": int(num_elem_per_idx),
            "num_valid_indices": nidx,
        },
        loc,
        reads=[src_buffer, index],
        writes=[out],
        fresh=out,
    )
    return out


def max8(*, src, mask=None, dtype=None, **kwargs):
    """VectorE `max8`: the 8 largest per partition, descending."""
    loc = caller_loc()[0]
    _no_mask(mask, "max8", loc)
    out = _fresh((src.shape[0], 8), _dt(dtype, src), loc)
    lo, hi = E.row_box(loc, src)
    d, o = E.rows(src, lo, hi), E.rows(out, lo, hi)
    emit(
        "vector",
        "max8",
        {"dst": o._ap(loc=loc), "src": d._ap(loc=loc)},
        loc,
        reads=[d],
        writes=[o],
        fresh=out,
        box=[(lo, hi), (0, 8)],
    )
    return out


def nc_find_index8(*, data, vals, mask=None, dtype=None, **kwargs):
    """VectorE `nc_find_index8` (uint32 indices)."""
    loc = caller_loc()[0]
    _no_mask(mask, "nc_find_index8", loc)
    out = _fresh((data.shape[0], 8), as_dtype(dtype) if dtype is not None else uint32, loc)
    emit(
        "vector",
        "find_index8",
        {"dst": out._ap(loc=loc), "data": data._ap(loc=loc), "vals": vals._ap(loc=loc)},
        loc,
        reads=[data, vals],
        writes=[out],
        fresh=out,
    )
    return out


def nc_match_replace8(*, data, vals, imm, dst_idx=None, mask=None, dtype=None, **kwargs):
    """VectorE `nc_match_replace8`; dst_idx (if given) is written in place."""
    loc = caller_loc()[0]
    _no_mask(mask, "nc_match_replace8", loc)
    out = _fresh(data.shape, _dt(dtype, data), loc)
    f = {"dst": out._ap(loc=loc), "data": data._ap(loc=loc), "vals": vals._ap(loc=loc), "imm": B._imm(imm)}
    if dst_idx is not None:
        f["dst_idx"] = dst_idx._ap(loc=loc)
    emit("vector", "match_replace8", f, loc, reads=[data, vals], writes=[out, dst_idx], fresh=out)
    return out


def nc_stream_shuffle(src, dst, shuffle_mask, *, dtype=None, mask=None, **kwargs):
    """VectorE `nc_stream_shuffle` into dst (in place)."""
    loc = caller_loc()[0]
    _no_mask(mask, "nc_stream_shuffle", loc)
    emit(
        "vector",
        "stream_shuffle",
        {"dst": dst._ap(loc=loc), "src": src._ap(loc=loc), "mask": [int(m) for m in shuffle_mask]},
        loc,
        reads=[src],
        writes=[dst],
    )


def select_reduce(
    *,
    dst,
    predicate,
    on_true,
    on_false,
    reduce_res=None,
    reduce_cmd=reduce_cmd.idle,
    reduce_op=None,
    reverse_pred=False,
    mask=None,
    dtype=None,
    **kwargs,
):
    """VectorE `select_reduce` into dst (in place); the optional reduction is max."""
    loc = caller_loc()[0]
    _no_mask(mask, "select_reduce", loc)
    if reduce_op is not None and E.alu(reduce_op) != "max":
        raise NkiError("select_reduce reduces with max only", loc)
    if int(reduce_cmd) in (1, 2):  # reset, reduce (the parameter shadows the enum here)
        # trnsim's select_reduce writes this call's row max; it keeps no registers across calls
        raise NkiError(
            f"select_reduce with reduce_cmd={['idle', 'reset', 'reduce'][int(reduce_cmd)]} (carrying "
            "the max across calls) is not supported by trnsim: reduce each call into its own "
            "reduce_res and take the maximum",
            loc,
        )
    f = {
        "dst": dst._ap(loc=loc),
        "predicate": predicate._ap(loc=loc),
        "on_true": on_true._ap(loc=loc),
        "on_false": scalar_operand(on_false, loc),
    }
    if reverse_pred:
        f["reverse_pred"] = True
    if reduce_res is not None:
        f["reduce_res"] = reduce_res._ap(loc=loc)
    emit("vector", "select_reduce", f, loc, reads=[predicate, on_true], writes=[dst, reduce_res])


def dropout(data, prob, *, mask=None, dtype=None, **kwargs):
    """VectorE `dropout` (trnsim's documented PCG32 generator)."""
    loc = caller_loc()[0]
    _no_mask(mask, "dropout", loc)
    if isinstance(prob, (int, float)) and not 0.0 <= float(prob) <= 1.0:
        raise NkiError(
            f"nisa.dropout probability {prob} is outside [0, 1]. AWS's NKI simulator computes with it "
            "anyway; what the hardware does with such a rate is not documented, so trnsim refuses it",
            loc,
        )
    out = _fresh(data.shape, _dt(dtype, data), loc)
    emit(
        "vector",
        "dropout",
        {"dst": out._ap(loc=loc), "src": data._ap(loc=loc), "prob": scalar_operand(prob, loc)},
        loc,
        reads=[data],
        writes=[out],
        fresh=out,
    )
    return out


# ---------------------------------------------------------------------------------------------
# DMA


def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown, **kwargs):
    """`dma_copy` (dst_rmw_op=np.add: accumulate; a tile-indexed HBM side: indirect DMA)."""
    loc = caller_loc()[0]
    from ._core import DynView

    acc = dst_rmw_op is not None
    if acc and E.alu(dst_rmw_op) != "add":
        raise NkiError("dma_copy dst_rmw_op supports only np.add", loc)
    oob = "skip" if int(oob_mode) == 1 else "error"
    f = {}
    if isinstance(src, DynView) or isinstance(dst, DynView):
        side = "src" if isinstance(src, DynView) else "dst"
        dyn = src if side == "src" else dst
        other = dst if side == "src" else src
        if mask is not None and not (isinstance(mask, (bool, np.bool_)) and mask):
            # the box the mask keeps: only those rows (and their indices) move; before, the
            # mask of a tile-indexed dma_copy was dropped and every row moved
            if isinstance(mask, View) or tuple(other.shape) != tuple(dyn.shape):
                raise NkiError(
                    "nisa.dma_copy(mask=) on a tile-indexed side takes a compile-time predicate over "
                    "two operands of one shape",
                    loc,
                )
            box = mask_box(mask, dyn.shape)
            if box is None:
                return
            if box != [(0, n) for n in dyn.shape]:
                dyn, other = B.restrict_dyn(dyn, box), other.restrict(box)
        hap, ind = B._indirect(dyn, side, loc, oob)
        f = {
            "dst": hap if side == "dst" else other._ap(loc=loc),
            "src": hap if side == "src" else other._ap(loc=loc),
            "indirect": ind,
        }
        if acc:
            f["accumulate"] = True
        # a scatter writes its HBM tensor (so an input it writes is updated in place, as any write)
        writes = [other] if side == "src" else [dyn.parent]
        emit("dma", "dma_copy", f, loc, reads=[other] if side == "dst" else [], writes=writes)
        return
    src = B._fit_rank(src, dst.shape, loc)
    if (
        mask is None
        and src.shape != dst.shape
        and not E._same_elements(src.shape, dst.shape)
        and int(np.prod(src.shape)) == int(np.prod(dst.shape))
        and not _broadcasts(src, dst.shape)
    ):
        # A DMA moves a stream of elements: two views of the same element count pair in order
        # whatever their partitions (a [1, n] row into an [n, 1] column).
        f = {"dst": dst._ap(loc=loc), "src": src._ap(loc=loc)}
        if acc:
            f["accumulate"] = True
        emit("dma", "dma_copy", f, loc, reads=[src] + ([dst] if acc else []), writes=[dst])
        return
    if mask is None and src.shape != dst.shape and E._same_elements(src.shape, dst.shape):
        shape = E.common_shape(loc, dst, src)  # elements in order, in a shape both are views in
        dst = E.in_shape(dst, shape, loc)
    box, (d, s) = _box(mask, dst.shape, dst, E.in_shape(src, dst.shape, loc))
    if box is None:
        return
    f = {"dst": d._ap(loc=loc), "src": s._ap(loc=loc)}
    if acc:
        f["accumulate"] = True
    emit("dma", "dma_copy", f, loc, reads=[s] + ([d] if acc else []), writes=[d])
    return


def _broadcasts(v, shape):
    try:
        v.broadcast(shape)
        return True
    except NkiError:
        return False


def dma_transpose(src, *, axes=None, mask=None, dtype=None, **kwargs):
    """A DMA whose source access pattern walks src with its axes permuted ((1, 0), (2, 1, 0) or
    (3, 1, 2, 0)) into a new SBUF tile."""
    loc = caller_loc()[0]
    _no_mask(mask, "dma_transpose", loc)
    if not isinstance(src, View):
        # `t[idx[i_p, 0], iy, iz]`: an indirect (gathering) source
        raise NkiError(
            "dma_transpose of an indirectly indexed view (a gather that transposes) is not supported by "
            "trnsim yet: gather with nl.load / nisa.dma_copy first, then transpose the tile",
            loc,
        )
    if axes is None:
        axes = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}.get(src.ndim)
    axes = tuple(axes)
    if axes not in ((1, 0), (2, 1, 0), (3, 1, 2, 0)):
        raise NkiError(f"dma_transpose axes {axes} are not supported", loc)
    if len(axes) != src.ndim:
        raise NkiError(f"dma_transpose axes {axes} do not match the rank of src {list(src.shape)}", loc)
    s = src.permuted(axes)
    out = _fresh(s.shape, _dt(dtype, src), loc)
    if src.base.on_chip:
        # An on-chip source's access pattern walks its partitions outermost whatever the view's
        # axis order (View.ap), so a permuted view would copy without transposing: use trnsim's
        # dma_transpose instruction, which permutes [partitions, free...] by the rank's fixed axes.
        if src.ndim != 2:
            raise NkiError(
                f"dma_transpose of a {src.ndim}-D on-chip tile: trnsim transposes on-chip tiles of "
                "2 dimensions [P, F] (an HBM source takes 2 to 4)",
                loc,
            )
        emit(
            "dma",
            "dma_transpose",
            {"dst": out._ap(loc=loc), "src": src._ap(loc=loc)},
            loc,
            reads=[src],
            writes=[out],
            fresh=out,
        )
        return out
    emit("dma", "dma_copy", {"dst": out._ap(loc=loc), "src": s._ap(loc=loc)}, loc, reads=[s], writes=[out], fresh=out)
    return out


def _dyn_copy(op, dst_v, src_v, dyn, engine_, loc):
    e = _eng(engine_, "vector")
    if dyn.scalar.base.buffer != "sbuf":
        raise NkiError("the dynamic offset must be a tile element in SBUF", loc)
    f = {
        "dst": dst_v._ap(loc=loc),
        "src": src_v._ap(loc=loc),
        "offset": dyn.scalar._ap(loc=loc),
        "offset_scale": int(dyn.scale),
    }
    return f, e


def tensor_copy_dynamic_src(src, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """`tensor_copy_dynamic_src`: `src` indexed with a tile element on a free dim
    (`t[ix, offsets[0, i] + iy]`); VectorE unless engine= says otherwise."""
    from ._core import DynTileView

    loc = caller_loc()[0]
    if not isinstance(src, DynTileView):
        raise NkiError("tensor_copy_dynamic_src takes a tile indexed with a tile element (t[ix, off[0, i] + iy])", loc)
    out = _fresh(src.shape, _dt(dtype, src), loc)
    f, e = _dyn_copy("tensor_copy_dynamic_src", out, src.static, src, engine, loc)
    emit(e, "tensor_copy_dynamic_src", f, loc, reads=[src.scalar], writes=[out], fresh=out)
    return out


def tensor_copy_dynamic_dst(*, dst, src, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """`tensor_copy_dynamic_dst`: writes `src` into `dst`, a tile indexed with a tile element."""
    from ._core import DynTileView

    loc = caller_loc()[0]
    if not isinstance(dst, DynTileView):
        raise NkiError("tensor_copy_dynamic_dst takes dst= indexed with a tile element (t[ix, off[0, i] + iy])", loc)
    f, e = _dyn_copy("tensor_copy_dynamic_dst", dst.static, src, dst, engine, loc)
    emit(e, "tensor_copy_dynamic_dst", f, loc, reads=[src, dst.scalar])
    st = dst.static.base
    from ._core import storage_of

    storage_of(st).fully_written = True  # written at a run-time offset: assume defined (the simulator checks)


def sequence_bounds(*, segment_ids, mask=None, dtype=None, **kwargs):
    """GpSimd `sequence_bounds`: [1, n] segment ids -> [1, 2, n] (starts, then ends)."""
    loc = caller_loc()[0]
    _no_mask(mask, "sequence_bounds", loc)
    n = int(np.prod(segment_ids.shape[1:]))
    out = _fresh((1, 2, n), _dt(dtype, segment_ids), loc)
    emit(
        "gpsimd",
        "sequence_bounds",
        {"dst": out._ap(loc=loc), "segment_ids": segment_ids._ap(loc=loc)},
        loc,
        reads=[segment_ids],
        writes=[out],
        fresh=out,
    )
    return out


_RANGE_CMP = {
    "equal": "equal",
    "less": "less",
    "less_equal": "less_equal",
    "greater": "greater",
    "greater_equal": "greater_equal",
}


def range_select(
    *,
    on_true_tile,
    comp_op0,
    comp_op1,
    bound0,
    bound1,
    reduce_cmd=reduce_cmd.idle,
    reduce_res=None,
    reduce_op=None,
    range_start=0,
    on_false_value=-3.4028234663852886e38,
    mask=None,
    dtype=None,
    **kwargs,
):
    """VectorE `range_select` (NeuronCore-v3+: the trn2 target; trn1 refuses it at run time)."""
    loc = caller_loc()[0]
    _no_mask(mask, "range_select", loc)
    out = _fresh(on_true_tile.shape, _dt(dtype, on_true_tile), loc)
    f = {
        "dst": out._ap(loc=loc),
        "on_true": on_true_tile._ap(loc=loc),
        "comp0": _RANGE_CMP[E._op_name(comp_op0)],
        "bound0": scalar_operand(bound0, loc),
        "comp1": _RANGE_CMP[E._op_name(comp_op1)],
        "bound1": scalar_operand(bound1, loc),
        "range_start": float(range_start),
        "on_false": B._imm(on_false_value),
    }
    cmd = int(reduce_cmd)
    if cmd in (1, 4):
        raise NkiError(
            f"range_select(reduce_cmd={reduce_cmd.name if hasattr(reduce_cmd, 'name') else cmd}) is not "
            "modelled: trnsim carries VectorE's accumulator with reset_reduce and reduce",
            loc,
        )
    if cmd == 0:  # idle: reduce_res (if any) gets this call's row max
        if reduce_res is not None:
            f["reduce_res"] = reduce_res._ap(loc=loc)
        emit("vector", "range_select", f, loc, reads=[on_true_tile], writes=[out, reduce_res], fresh=out)
        return out
    # reset_reduce / reduce: VectorE's accumulator (one fp32 value per partition, shared with
    # tensor_scalar_cumulative) becomes this call's row max, or the max of it and this call's;
    # reduce_res, when given, reads the accumulator out
    parts = on_true_tile.shape[0]
    tr = E.T()
    reg = getattr(tr, "_vector_acc", None)
    if cmd == 2:
        if reg is None:
            raise NkiError(
                "range_select(reduce_cmd=reduce) continues VectorE's accumulator, but no earlier call of this "
                "kernel set it (the first call of a chain uses reset_reduce)",
                loc,
            )
        if reg.shape[0] != parts:
            raise NkiError(
                f"range_select(reduce_cmd=reduce) on {parts} partitions continues an accumulator of {reg.shape[0]}", loc
            )
    row_max = _fresh((parts, 1), float32, loc)
    f["reduce_res"] = row_max._ap(loc=loc)
    emit("vector", "range_select", f, loc, reads=[on_true_tile], writes=[out, row_max], fresh=out)
    tr._vector_acc = row_max if cmd == 3 else tensor_tensor(reg, row_max, np.maximum, dtype=float32)
    if reduce_res is not None:
        B._assign(reduce_res, tensor_copy(tr._vector_acc, engine=vector_engine))
    return out


def _with_dst(f):
    """Accept the newer calling convention `nisa.op(dst=..., ...)` on a legacy op that returns its
    result: the result is written into `dst` (a copy, or the op itself re-targeted). `nc_matmul`
    with a dst accumulates when dst's PSUM elements were already written (first write overwrites,
    later writes add, as NKI 0.3 documents)."""
    import functools
    import inspect

    if "dst" in inspect.signature(f).parameters:
        return f

    @functools.wraps(f)
    def g(*args, **kwargs):
        if "dst" not in kwargs:
            if f.__name__ == "nc_matmul" and len(args) == 3:
                kwargs["dst"], args = args[0], args[1:]
            else:
                return f(*args, **kwargs)
        dst = kwargs.pop("dst")
        if f.__name__ == "memset" and "shape" not in kwargs:  # memset(dst, value): the shape is dst's
            kwargs.setdefault("dtype", dst.dtype)
            args = (dst.shape,) + args
        if f.__name__ == "nc_matmul":
            from ._core import storage_of

            acc = kwargs.pop("accumulate", None)
            st = storage_of(dst.base)
            written = st.fully_written or (st.written is not None and bool(st.written[dst.positions()].all()))
            if acc is not None and bool(acc) and not written:
                raise NkiError(
                    "nisa.nc_matmul(accumulate=True) into PSUM elements that nothing has written: the sum "
                    "would start from whatever the bank holds (the first matmul of an accumulation group "
                    "uses accumulate=False)",
                    caller_loc()[0],
                )
            # accumulate=None: the first write overwrites and later writes add (NKI 0.3);
            # True adds into dst, False overwrites it
            if written if acc is None else bool(acc):
                B._accumulate(dst, f(*args, **kwargs))
                return None
        B._assign(dst, f(*args, **kwargs))
        return None

    return g


for _name in [
    "nc_matmul",
    "nc_transpose",
    "activation",
    "activation_reduce",
    "tensor_reduce",
    "tensor_partition_reduce",
    "tensor_tensor",
    "tensor_scalar",
    "scalar_tensor_tensor",
    "tensor_scalar_reduce",
    "tensor_tensor_scan",
    "tensor_copy",
    "reciprocal",
    "iota",
    "affine_select",
    "bn_stats",
    "bn_aggr",
    "local_gather",
    "max8",
    "nc_find_index8",
    "nc_match_replace8",
    "dropout",
    "dma_transpose",
    "sequence_bounds",
    "range_select",
    "tensor_copy_dynamic_src",
    "memset",
]:
    globals()[_name] = _with_dst(globals()[_name])

__all__ = [n for n in dir() if not n.startswith("_") and n not in ("enum", "np", "nl", "E", "B", "nc_generation")]
del trn_name
