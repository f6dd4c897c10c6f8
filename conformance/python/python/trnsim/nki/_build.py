"""Instruction builders shared by `nki.language` and `nki.isa`: immediates, indirect DMA operands,
assignment into a destination (`dst[...] = v`, `dst += v`), VectorE unaries and reductions.
Both modules import them from here (isa.py used to borrow them from language.py)."""

import math

import numpy as np

from . import _emit as E
from ._core import DynView, NkiError, View, as_dtype, caller_loc, float32, is_float, mask_box, storage_of, trn_name
from ._emit import emit, new_tile, prep, scalar_operand, try_redirect


def start_partition_ok(start, count):
    """Whether a compute engine may access `count` partitions from `start`, by the target's
    start-partition rule (trnsim's `Target.start_partition_rule`; `Quadrants` on NC-v2/v3)."""
    rule = E.T().params.get("start_partition_rule")
    if rule != "Quadrants":
        raise NkiError(f"the target's start-partition rule {rule!r} is unknown to the NKI front-end")
    if count > 64:
        return start == 0
    if count > 32:
        return start in (0, 64)
    return count == 0 or start % 32 == 0


def restrict_dyn(dyn, box):
    """The part of an indirect (tile-indexed) HBM view a mask's box keeps: the index tile's rows
    `box[0]` (the rows the DMA moves) and the free range `box[1:]` of each row."""
    import copy as _copy

    r = _copy.copy(dyn)
    idx = dyn.index_tile
    r.index_tile = idx.restrict([box[0]] + [(0, n) for n in idx.shape[1:]])
    row0 = dyn.row0
    if row0.ndim:
        r.row0 = row0.restrict([(0, row0.shape[0])] + list(box[1:]))
    r.shape = (box[0][1] - box[0][0],) + tuple(hi - lo for lo, hi in box[1:])
    return r


def load_indirect(src, dt, loc, mask=None):
    """A DMA from an HBM tensor indexed by a [P, 1] tile on its first dimension into a new tile.
    A mask keeps a box of it: the rows (index tile entries) and columns it selects, and only
    those rows' indices are read."""
    out = new_tile(src.shape, dt, loc=loc)
    box = mask_box(mask, src.shape)
    if box is None:
        return E.masked_off(out, mask)
    full = box == [(0, n) for n in src.shape]
    s = src if full else restrict_dyn(src, box)
    o = out if full else out.restrict(box)
    hap, ind = _indirect(s, "src", loc)
    emit(
        "dma",
        "dma_copy",
        {"dst": o._ap(loc=loc), "src": hap, "indirect": ind},
        loc,
        writes=[o],
        fresh=out,
        box=None if full else box,
    )
    return out


def _imm(v, dt=None):
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def _indirect(dyn, side, loc, oob="error"):
    """The HBM operand and `indirect` field of a DMA whose HBM side is indexed by a [P, 1] tile on
    its first dimension: row p of the HBM side starts index[p] rows past row 0."""
    from ._core import _merge_free

    idx = dyn.index_tile
    if idx.ndim > 2 and all(n == 1 for n in idx.shape[1:]):
        # `ids[i_p, 0]` with a 3-D (or 4-D) arange i_p, to index a tensor of that rank: [P, 1, 1]
        idx = View(idx.base, (idx.shape[0], 1), [(c, (co[0], 0)) for c, co in idx.idx], idx.dtype)
    if idx.ndim != 2 or idx.shape[1] != 1:
        raise NkiError("a dynamic index must be a [P, 1] tile of integers", loc)
    if dyn.dim != 0 and not all(
        isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in dyn.key[: dyn.dim]
    ):
        # `t[b, idx, j]` with integers before the tile-indexed dim is the first dim of `t[b]`
        raise NkiError(
            "dynamic indexing is supported on the first dimension of an HBM tensor (after any "
            "integer indices: t[b, idx_tile, ...])",
            loc,
        )
    parent, row0 = dyn.parent, dyn.row0
    b = row0.base
    row_step = sum(s * co[dyn.dim] for s, (_, co) in zip(b.strides, parent.idx))
    lc = sum(s * c for s, (c, _) in zip(b.strides, row0.idx))
    lcoef = [sum(s * co[a] for s, (_, co) in zip(b.strides, row0.idx)) for a in range(row0.ndim)]
    hap = {
        "mem": b.mem(),
        "dtype": trn_name(row0.dtype),
        "partitions": 1,
        "offset": lc * row0.dtype.itemsize,
        "free": _merge_free([[lcoef[a], row0.shape[a]] for a in range(row0.ndim)], loc),
    }
    E.check_read(idx, loc)
    return hap, {"side": side, "index": idx._ap(loc=loc), "row_step": row_step, "oob": oob}


def _on_sbuf(v, loc):
    if v.base.on_chip and v.base.buffer == "psum":
        t = new_tile(v.shape, v.dtype, loc=loc)
        emit("vector", "tensor_copy", {"dst": t._ap(loc=loc), "src": v._ap(loc=loc)}, loc, reads=[v], writes=[t])
        return t
    return v


def _fit_rank(v, shape, loc):
    """A value whose shape differs from the destination's only in size-1 dims (a [P, 1] tile
    stored to a [P] view, say) viewed in the destination's shape."""
    if v.shape == tuple(shape) or int(np.prod(v.shape)) != int(np.prod(shape)):
        return v
    try:
        v.broadcast(shape)
        return v
    except NkiError:
        pass
    keep = [a for a, s in enumerate(v.shape) if s != 1]
    if [v.shape[a] for a in keep] != [s for s in shape if s != 1]:
        return v
    idx = []
    # map dst axes with size != 1 to v's axes with size != 1 in order
    dst_axes = [a for a, s in enumerate(shape) if s != 1]
    for c, co in v.idx:
        nco = [0] * len(shape)
        for va, da in zip(keep, dst_axes):
            nco[da] = co[va]
        idx.append((c, tuple(nco)))
    return View(v.base, shape, idx, v.dtype)


def _assign(dst, value):
    """`dst[...] = value`: redirect a fresh result into dst, else copy (VectorE on chip, DMA to or
    from HBM), else memset a scalar."""
    if type(value).__name__ == "LoopReduce":
        # nl.loop_reduce: dst = op(dst, x), the result written where it is assigned
        value = value.resolve(dst)
    if isinstance(value, View) and E.is_masked_off(value):
        return  # the instruction's mask keeps nothing: it does not run, and writes nothing here
    if try_redirect(dst, value):
        return
    loc = caller_loc()[0]
    if not isinstance(value, View):
        if isinstance(value, DynView):
            return _copy_into(dst, load_indirect(value, value.dtype, loc), loc)
        if not dst.base.on_chip:
            raise NkiError("assigning a scalar to an HBM tensor: store a tile instead", loc)
        ap = dst._ap(loc=loc)
        if not start_partition_ok(ap["start_partition"], ap["partitions"]):
            # `t[5, j] = c`: no compute engine may start there (the start-partition rule), so the
            # value is set in a fresh tile (partition 0) and a DMA, which has no such rule, puts it
            tmp = new_tile(dst.shape if dst.ndim >= 2 else (dst.shape[0] if dst.ndim else 1, 1), dst.dtype, loc=loc)
            emit("vector", "memset", {"dst": tmp._ap(loc=loc), "value": _imm(value)}, loc, writes=[tmp], fresh=tmp)
            emit("dma", "dma_copy", {"dst": ap, "src": tmp._ap(loc=loc)}, loc, reads=[tmp], writes=[dst])
            return
        emit("vector", "memset", {"dst": ap, "value": _imm(value)}, loc, writes=[dst])
        return
    prod = storage_of(value.base).producer if value.base.on_chip else None
    if prod is not None and prod[3] is not None and value.is_full() and tuple(value.shape) == tuple(dst.shape):
        # a masked instruction's result, not retargeted: only the box its mask kept is copied
        box = prod[3]
        return _copy_into(dst.restrict(box), value.restrict(box), loc)
    _copy_into(dst, value, loc)


def _copy_into(dst, value, loc):
    v = _fit_rank(value, dst.shape, loc)
    if not dst.base.on_chip or not v.base.on_chip:
        if not dst.base.on_chip and v.base.on_chip:
            v = _on_sbuf(v, loc)
        s = v.broadcast(dst.shape)
        if not dst.base.on_chip and not v.base.on_chip:
            pass
        emit("dma", "dma_copy", {"dst": dst._ap(loc=loc), "src": s._ap(loc=loc)}, loc, reads=[s], writes=[dst])
        return
    s = prep(v, dst.shape, loc)
    emit("vector", "tensor_copy", {"dst": dst._ap(loc=loc), "src": s._ap(loc=loc)}, loc, reads=[s], writes=[dst])


def _first_psum_write(dst, val):
    """`dst += val` where val is a fresh nc_matmul result and no element of dst (in PSUM) was written."""
    if not isinstance(val, View) or not isinstance(dst, View) or dst.base.buffer != "psum":
        return False
    prod = getattr(val.base, "producer", None)
    if prod is None or prod[1] != "nc_matmul":
        return False
    st = storage_of(dst.base)
    if st.fully_written:
        return False
    return st.written is None or not bool(st.written[dst.positions()].any())


def _accumulate(dst, val):
    """`dst += val`: a fresh matmul result accumulates in PSUM (`nc_matmul` with accumulate);
    anything else is a VectorE add in place. Into PSUM elements nothing has written yet, a fresh
    matmul result is written, not added: the first write of an accumulation overwrites (NKI 0.3's
    nc_matmul rule; AWS's attention tutorial v8a-v11 accumulate into PSUM they never zero)."""
    if isinstance(val, View) and E.is_masked_off(val):
        return  # `dst += op(..., mask=False)`: the instruction does not run
    if _first_psum_write(dst, val):
        if try_redirect(dst, val):
            return
        return _assign(dst, val)
    if try_redirect(dst, val, accumulate=True):
        return
    loc = caller_loc()[0]
    if isinstance(val, View):
        r = prep(val, dst.shape, loc)
        if r.base.on_chip and r.base.buffer == "psum" and dst.base.on_chip and dst.base.buffer == "psum":
            # `psum += psum` (a matmul result the redirect does not take, e.g. into a bf16 PSUM
            # accumulator): VectorE reads one PSUM operand at most, so the addend goes by SBUF,
            # as `nl.add` of two PSUM tiles does
            r = _on_sbuf(r, loc)
        emit(
            "vector",
            "tensor_tensor",
            {"dst": dst._ap(loc=loc), "in0": dst._ap(loc=loc), "in1": r._ap(loc=loc), "op": "add"},
            loc,
            reads=[dst, r],
            writes=[dst],
        )
    else:
        emit(
            "vector",
            "tensor_scalar",
            {"dst": dst._ap(loc=loc), "src": dst._ap(loc=loc), "op0": "add", "operand0": scalar_operand(val, loc)},
            loc,
            reads=[dst],
            writes=[dst],
        )


def _unary_vec(op, x, dtype, mask, loc):
    """A VectorE unary: `reciprocal` instruction, or tensor_scalar with a unary ALU operator."""
    x = E.column(x)
    dt = as_dtype(dtype) if dtype is not None else x.dtype
    out = new_tile(x.shape, dt, loc=loc)
    box = E.narrow(mask_box(mask, x.shape), [x], loc)
    if box is None:
        return E.masked_off(out, mask)
    a, o = x.restrict(box), out.restrict(box)
    if op == "reciprocal":
        emit(
            "vector",
            "reciprocal",
            {"dst": o._ap(loc=loc), "src": a._ap(loc=loc)},
            loc,
            reads=[a],
            writes=[o],
            fresh=out,
            box=box,
        )
    else:
        emit(
            "vector",
            "tensor_scalar",
            {"dst": o._ap(loc=loc), "src": a._ap(loc=loc), "op0": op, "operand0": {"imm": 0.0}},
            loc,
            reads=[a],
            writes=[o],
            fresh=out,
            box=box,
        )
    return out


def _axes(x, axis, loc):
    """The reduced axes (sorted); any free axes (not the partition axis 0)."""
    if axis is None:
        axis = tuple(range(1, x.ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (int(axis),)
    axis = tuple(sorted(a + x.ndim if a < 0 else a for a in axis))
    if not axis or 0 in axis or axis[-1] >= x.ndim or len(set(axis)) != len(axis):
        raise NkiError(
            f"reductions run over free axes of a tile; axis={axis} on a tile of rank {x.ndim} is not "
            f"(cross-partition: nisa.tensor_partition_reduce)",
            loc,
        )
    return axis


def _reduce(op, x, axis, dtype, mask, keepdims, loc, negate=False):
    """VectorE `tensor_reduce` over free axes (the reduced ones walked innermost)."""
    axes = _axes(x, axis, loc)
    kept = tuple(s for a, s in enumerate(x.shape) if a not in axes)
    shape = tuple(1 if a in axes else s for a, s in enumerate(x.shape)) if keepdims else kept
    dt = as_dtype(dtype) if dtype is not None else x.dtype
    if op == "average" and dtype is None and not is_float(x.dtype):
        dt = float32
    out = new_tile(shape if len(shape) else (1,), dt, loc=loc)
    box0 = mask_box(mask, x.shape)
    box = E.narrow(box0, [x], loc)
    if box is None:
        return E.masked_off(out, mask)
    if any(box[a] != box0[a] for a in axes):
        raise NkiError(
            f"read of uninitialised memory: the reduced axes of tile {storage_of(x.base).describe()} "
            f"were not all written",
            loc,
        )
    a = x.restrict(box)
    # the instruction reduces the innermost free dims of its source: walk the reduced axes last
    order = [ax for ax in range(x.ndim) if ax not in axes] + list(axes)
    a = a.permuted(order)
    obox = [b for ax, b in enumerate(box) if ax not in axes]
    if keepdims:
        obox = [(0, 1) if ax in axes else b for ax, b in enumerate(box)]
    if out.ndim != len(obox):  # a reduction to [P] is held as a [P, 1] tile
        obox = obox + [(0, 1)] * (out.ndim - len(obox))
    o = out.restrict(obox)
    if keepdims:
        o = o.permuted(order)
    f = {"dst": o._ap(loc=loc), "src": a._ap(loc=loc, split=x.ndim - len(axes)), "op": op, "axes": len(axes)}
    # the reduced dims may merge into one (contiguous): `axes` counts the src pattern's dims
    nfree = len(f["src"]["free"])
    nkept = len(_merged_kept(a, x.ndim - len(axes), loc))
    f["axes"] = nfree - nkept
    if f["axes"] == 0 and nfree < 4:
        # every reduced axis has size 1 (merged away): reduce over an explicit size-1 free dim
        f["src"]["free"].append([1, 1])
        f["axes"] = 1
    if negate:
        f["negate"] = True
    emit("vector", "tensor_reduce", f, loc, reads=[a], writes=[o], fresh=out, box=obox)
    return out


def _merged_kept(a, split, loc):
    """The merged free dims of the kept (outer) axes of a reduction's source view."""
    kept = View(a.base, a.shape[:split], a.idx and [(c, co[:split]) for c, co in a.idx], a.dtype)
    free = kept._ap(loc=loc)["free"]
    return [] if free == [[1, 1]] and all(s == 1 for s in a.shape[1:split]) else free
