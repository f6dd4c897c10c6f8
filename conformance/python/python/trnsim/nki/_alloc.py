"""SBUF and PSUM allocation of a traced NKI kernel, by live ranges (docs/nki-allocation.md).

While a kernel is traced, every on-chip tile is laid out from byte 0 of its own space: each
access pattern an instruction gets carries its tile (`"_st"`) and an offset relative to the
tile. After tracing, `assign(tracer)`:

1. walks the instructions and records, per tile and per block (the dims before the partition
   dim), the first and the last instruction that touches it: its live range. The trace is
   unrolled, so a tile used in a later iteration of a loop is live across the back edge;
2. places the tiles the kernel placed itself (`nl.ndarray(address=)`, `ncc.sbuf.alloc`,
   `ncc.psum.alloc`, `mod_alloc`), and refuses two of them that share bytes while both live;
3. refuses the kernel when the tiles live at some instruction need more bytes per partition
   than the target has, naming those tiles, their sizes and their source lines;
4. places every other tile (or block) by first fit in the order live ranges start, in the
   bytes no tile live at the same time holds (a second pass, largest first, when the first
   one leaves no room for a tile although the live set fits);
5. rewrites every access pattern to its final partition and byte address.

The simulator's dependency analysis (`Program.infer_waits`) then orders two tiles that share
bytes at different times, as it orders any two accesses of the same bytes.
"""

import bisect
import inspect
import os
import sys

import numpy as np

from . import _targets
from ._core import _TRN_NAME, NkiError, frame_line

_ITEMSIZE = {name: dt.itemsize for dt, name in _TRN_NAME.items() if dt is not None}

# instructions whose on-chip operand is addressed at run time (a tile element holds the
# offset): they may touch any byte of their tiles
_DYNAMIC_OPS = {"tensor_copy_dynamic_src", "tensor_copy_dynamic_dst"}


# Placement order of the automatic tiles (docs/nki-allocation.md, "Rotation"): each search
# starts where the previously placed tile ended and wraps to byte 0, so a loop's successive
# iterations get different bytes while SBUF/PSUM has room and do not wait on each other's
# tiles (as the compiler multi-buffers a loop body). False: plain first fit from byte 0.
ROTATE = True


class NkiAllocationError(NkiError):
    """A kernel whose tiles cannot be placed: its live set exceeds SBUF/PSUM, or two tiles it
    placed itself share bytes while both are live, or a placement is outside the memory.
    `.tiles` lists the tiles concerned as dicts (name, shape, dtype, buffer, bytes, loc)."""

    def __init__(self, message, loc=None, tiles=()):
        super().__init__(message, loc)
        self.tiles = list(tiles)


# ----------------------------------------------------------------------------------------------
# target limits, from the simulator's Target


_LIMITS = {}


def limits(target):
    """{'sbuf', 'psum', 'bank', 'banks', 'partitions'} of a target, read from trnsim's Target
    (`_targets.params`, the native module's parameters; the package keeps no copy)."""
    lim = _LIMITS.get(target)
    if lim is None:
        t = _targets.params(target)
        lim = {
            "sbuf": t["sbuf_usable_bytes"],
            "psum": t["psum_partition_bytes"],
            "bank": t["psum_bank_bytes"],
            "banks": t["psum_banks"],
            "partitions": t["partitions"],
        }
        _LIMITS[target] = lim
    return lim


# ----------------------------------------------------------------------------------------------
# what the allocator knows of a tile


class TileRec:
    """What the allocator needs of a tile, held by the tile's access patterns (`"_st"`). It is
    not the tile itself: the front-end counts references to tiles to see whether the kernel
    still holds a result, and a tile dies in Python long before allocation runs."""

    __slots__ = (
        "_name",
        "block_elems",
        "buffer",
        "bytes",
        "dtype",
        "free_elems",
        "loc",
        "par_axis",
        "partitions",
        "placement",
        "shape",
    )

    def __init__(self, st):
        self.shape, self.dtype, self.buffer = st.shape, st.dtype, st.buffer
        self.par_axis, self.partitions = st.par_axis, st.partitions
        self.free_elems, self.block_elems, self.bytes = st.free_elems, st.block_elems, st.bytes
        self.loc = st.loc
        self._name = st._name
        self.placement = None

    @property
    def name(self):
        if not self._name:
            from ._core import _LOC_SRC, source_name

            src = _LOC_SRC.get(self.loc)
            self._name = (source_name(*src) if src else "") or f"tile at {self.loc}"
        return self._name

    def describe(self):
        return f"'{self.name}' {list(self.shape)} {_TRN_NAME[self.dtype]} in {self.buffer.upper()}" + (
            f" (allocated at {self.loc})" if self.loc else ""
        )


# ----------------------------------------------------------------------------------------------
# direct allocation: what the kernel says about where a tile goes


class DirectAlloc:
    """The `buffer=` of a tensor the kernel places itself: `ncc.sbuf.alloc(func)`,
    `ncc.psum.alloc(func)` or their `mod_alloc`. `func(block_index, partitions, bytes)` gives
    `(start_partition, byte_address)` in SBUF, `(bank, start_partition, byte_address_in_bank)`
    in PSUM, per logical block."""

    def __init__(self, name, func, what):
        self.name = name  # 'sbuf' | 'psum': what language._buffer_name reads
        self.func = func
        self.what = what

    def __repr__(self):
        return f"<{self.what}>"


def _linear(shape, idx):
    acc, out = 1, 0
    for s, i in zip(reversed(shape), reversed(idx)):
        out += i * acc
        acc *= s
    return out


def _modulo(base, tiles, scale):
    def f(idx):
        shape = tuple(tiles) if tiles else (1,) * len(idx)
        return _linear(shape, tuple(i % s for i, s in zip(idx, shape))) * scale + base

    return f


def sbuf_mod_alloc(base_addr, base_partition=0, num_par_tiles=(), num_free_tiles=()):
    def func(idx, pdim_size, fdim_size):
        return (
            _modulo(base_partition, num_par_tiles, pdim_size)(idx),
            _modulo(base_addr, num_free_tiles, fdim_size)(idx),
        )

    return DirectAlloc("sbuf", func, f"ncc.sbuf.mod_alloc(base_addr={base_addr})")


def psum_mod_alloc(base_bank=0, base_addr=0, base_partition=0, num_bank_tiles=(), num_par_tiles=(), num_free_tiles=()):
    def func(idx, pdim_size, fdim_size):
        return (
            _modulo(base_bank, num_bank_tiles, 1)(idx),
            _modulo(base_partition, num_par_tiles, pdim_size)(idx),
            _modulo(base_addr, num_free_tiles, fdim_size)(idx),
        )

    return DirectAlloc("psum", func, f"ncc.psum.mod_alloc(base_bank={base_bank})")


_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the trnsim package


def _declaration_site():
    """The chain of source lines outside trnsim (the kernel's, and its callers') at which a tensor
    is being declared: the same chain names the same declaration of the kernel's source."""
    f = sys._getframe(1)
    site = []
    while f is not None:
        fn = f.f_code.co_filename
        if not os.path.abspath(fn).startswith(_PKG_DIR):
            site.append((fn, frame_line(f)))
        f = f.f_back
    return tuple(site)


def _traced_once_placement(st, buffer):
    """Legacy NKI traces a kernel's Python once: a loop body runs once, for all its iterations, so
    a tensor declared in it is one declaration, and Python arithmetic that computes its address
    (a running offset the body advances, as AWS's allocated kernels keep) runs once. trnsim
    unrolls loops, so it runs that arithmetic once per iteration; to place the tensor where the
    compiler would, a declaration reached again (same source lines, same shape, dtype and
    memory) takes the direct placement its first time through computed."""
    from ._core import Tracer

    t = Tracer.current()
    if getattr(t, "api", None) != "legacy":
        return buffer
    seen = t.__dict__.setdefault("direct_sites", {})
    key = (_declaration_site(), st.shape, str(st.dtype), st.buffer)
    first = seen.setdefault(key, buffer)
    return first


def direct(view, buffer, address, loc):
    """The `nl.ndarray` hook: remember where the kernel places this tile, if it says."""
    st = view.base._rec
    if isinstance(buffer, DirectAlloc):
        if address is not None:
            raise NkiError("nl.ndarray: give either address= or a direct-allocation buffer=, not both", loc)
        st.placement = ("func", _traced_once_placement(st, buffer))
    elif address is not None:
        a = tuple(address) if isinstance(address, (tuple, list)) else (address,)
        if len(a) != 2 or not all(isinstance(x, (int, np.integer)) for x in a):
            raise NkiError(
                f"nl.ndarray(address=) of an on-chip tensor is (partition_offset, byte_offset), got {address!r}", loc
            )
        st.placement = ("address", (int(a[0]), int(a[1])))
    return view


# ----------------------------------------------------------------------------------------------
# live ranges


class _Unit:
    """What gets one address: a whole tile, or one block of a block tensor."""

    __slots__ = ("align", "block", "blocks", "end", "fixed", "offset", "p0", "p1", "size", "st", "start")

    def __init__(self, st, block, size, start, end):
        self.st, self.block, self.size = st, block, size
        self.start, self.end = start, end
        self.p0, self.p1 = 0, st.partitions
        self.offset = None
        self.fixed = False
        self.align = 4
        self.blocks = 1  # blocks laid out one after another in this unit

    def label(self):
        n = self.st.name
        if self.block is not None and self.st.free_elems != self.st.block_elems:
            n += f"[block {self.block}]"
        return n

    def info(self):
        st = self.st
        return {
            "name": self.label(),
            "shape": list(st.shape),
            "dtype": _TRN_NAME[st.dtype],
            "buffer": st.buffer,
            "bytes": self.size,
            "loc": st.loc,
        }


def _extent(ap):
    """(lo, hi) bytes, relative to its tile, an on-chip access pattern touches in a partition."""
    isz = _ITEMSIZE[ap["dtype"]]
    lo = hi = ap["offset"]
    for step, n in ap["free"]:
        if n == 0:
            return lo, lo
        d = step * (n - 1) * isz
        if d > 0:
            hi += d
        else:
            lo += d
    return lo, hi + isz


def _collect(instructions):
    """{id(tile): [tile, {block: [first, last]}, multi-block?]} and the on-chip access
    patterns, in program order."""
    recs = {}
    aps = []
    geom = {}  # id(tile) -> (blocks, bytes per block, the [first, last] of block 0 when it has one block)
    for i, ins in enumerate(instructions):
        op = ins["op"]
        name = next(iter(op))
        found = []
        _find(op[name], found)
        if not found:
            continue
        aps.extend(found)
        dyn = name in _DYNAMIC_OPS
        for ap in found:
            st = ap["_st"]
            key = id(st)
            g = geom.get(key)
            if g is None:
                nb = st.free_elems // max(st.block_elems, 1)
                r0 = [i, i]
                recs[key] = [st, {0: r0} if nb == 1 else {}, False]
                g = geom[key] = (nb, st.block_elems * st.dtype.itemsize, r0 if nb == 1 else None)
                if nb == 1:
                    continue
            nb, bb, r0 = g
            if r0 is not None:  # one block: the common case
                r0[1] = i
                continue
            rec = recs[key]
            if dyn:
                b0, b1 = 0, nb - 1
            else:
                lo, hi = _extent(ap)
                b0, b1 = max(lo, 0) // bb, min(max(hi - 1, 0) // bb, nb - 1)
            if b1 > b0:
                rec[2] = True
            blocks = rec[1]
            for blk in range(b0, b1 + 1):
                r = blocks.get(blk)
                if r is None:
                    blocks[blk] = [i, i]
                else:
                    r[1] = i
    return recs, aps


def _find(obj, out):
    for v in obj.values():
        t = type(v)
        if t is dict:
            if "_st" in v:
                out.append(v)
            else:
                _find(v, out)
        elif t is list:
            for x in v:
                if type(x) is dict:
                    if "_st" in x:
                        out.append(x)
                    else:
                        _find(x, out)


# ----------------------------------------------------------------------------------------------
# placement


def assign(tracer):
    """Allocate every on-chip tile of the traced program and rewrite its access patterns to
    final addresses (see the module docstring). Raises NkiAllocationError."""
    ins = tracer.instructions
    recs, aps = _collect(ins)
    lim = limits(tracer.target)
    force_auto = getattr(tracer, "force_auto_alloc", False)
    units = {"sbuf": [], "psum": []}
    where = {}  # id(storage) -> (grouped unit | None, {block: unit})
    for st, blocks, multi in recs.values():
        buf = st.buffer
        nb = st.free_elems // max(st.block_elems, 1)
        bb = st.block_elems * st.dtype.itemsize
        placement = None if force_auto else st.placement
        if multi or (placement is not None and placement[0] == "address"):
            u = _Unit(st, None, st.bytes, min(r[0] for r in blocks.values()), max(r[1] for r in blocks.values()))
            u.blocks = nb
            if placement is not None:
                _place_direct(u, placement, lim, 0, nb)
            units[buf].append(u)
            where[id(st)] = (u, None)
        else:
            per = {}
            for b, (s, e) in sorted(blocks.items()):
                u = _Unit(st, b, bb, s, e)
                if placement is not None:
                    _place_direct(u, placement, lim, b, nb)
                units[buf].append(u)
                per[b] = u
            where[id(st)] = (None, per)
        for u in (where[id(st)][1] or {}).values() if where[id(st)][0] is None else [where[id(st)][0]]:
            if buf == "psum" and not u.fixed:
                u.align = _psum_align(st, lim)
    stats = {}
    for buf in ("sbuf", "psum"):
        peak = _allocate(units[buf], buf, lim, ins, tracer.target)
        top = max((u.offset + u.size for u in units[buf]), default=0)
        stats[buf] = {
            "tiles": len(units[buf]),
            "all_tiles_bytes": sum(u.size for u in units[buf]),
            "peak_live_bytes": peak,
            "highest_byte": top,
            "usable_bytes": lim[buf],
        }
    _rewrite(aps, where)
    return stats


def _psum_align(st, lim):
    block = st.block_elems * st.dtype.itemsize
    align = 4
    while align < block:
        align *= 2
    return min(max(align, 4), lim["bank"])


def _block_index(st, b):
    shape = st.shape[: st.par_axis]
    idx = []
    for s in reversed(shape):
        idx.append(b % s)
        b //= s
    return tuple(reversed(idx))


def _call_alloc_func(func, idx, pdim_size, fdim_size):
    """Call an allocation function as the NKI docs describe it: by the parameter names `idx`,
    `pdim_size` and `fdim_size` when it has them (a `functools.partial` that binds a leading
    parameter by keyword can only take the rest by keyword), else positionally."""
    kw = {"idx": idx, "pdim_size": pdim_size, "fdim_size": fdim_size}
    try:
        inspect.signature(func).bind(**kw)
    except (TypeError, ValueError):
        return func(idx, pdim_size, fdim_size)
    return func(**kw)


def _place_direct(u, placement, lim, b, nb):
    st = u.st
    kind, what = placement
    bb = st.block_elems * st.dtype.itemsize
    if kind == "address":
        p, addr = what
        desc = f"address=({p}, {addr})"
    else:

        def at(blk):
            r = _call_alloc_func(what.func, _block_index(st, blk), st.partitions, bb)
            r = tuple(int(x) for x in r)
            if st.buffer == "sbuf":
                if len(r) != 2:
                    raise NkiAllocationError(
                        f"{what.what} for tile {st.describe()}: the allocation function returns "
                        f"{r}, not (start_partition, byte_address)",
                        st.loc,
                        [u.info()],
                    )
                return r
            if len(r) != 3:
                raise NkiAllocationError(
                    f"{what.what} for tile {st.describe()}: the allocation function returns {r}, "
                    f"not (bank, start_partition, byte_address)",
                    st.loc,
                    [u.info()],
                )
            bank, p, a = r
            if not 0 <= bank < lim["banks"]:
                raise NkiAllocationError(
                    f"{what.what} places block {_block_index(st, blk)} of tile {st.describe()} "
                    f"in PSUM bank {bank}; the target has banks 0 to {lim['banks'] - 1}",
                    st.loc,
                    [u.info()],
                )
            if a < 0 or a + bb > lim["bank"]:
                raise NkiAllocationError(
                    f"{what.what} places block {_block_index(st, blk)} of tile {st.describe()} "
                    f"at byte {a} of a bank: {bb} bytes from there leave the "
                    f"{lim['bank']}-byte bank (a PSUM tile cannot cross a bank)",
                    st.loc,
                    [u.info()],
                )
            return p, bank * lim["bank"] + a

        if u.block is None:
            p, addr = at(0)
            for blk in range(1, nb):
                q, a2 = at(blk)
                if q != p or a2 != addr + blk * bb:
                    raise NkiAllocationError(
                        f"tile {st.describe()}: an instruction accesses several of its blocks at once, so they must "
                        f"lie one after another, but {what.what} puts block {_block_index(st, blk)} at partition {q}, "
                        f"byte {a2} (block 0 at partition {p}, byte {addr})",
                        st.loc,
                        [u.info()],
                    )
        else:
            p, addr = at(b)
        desc = f"{what.what}"
    cap = lim[st.buffer]
    if addr < 0 or addr + u.size > cap:
        raise NkiAllocationError(
            f"{desc} places tile '{u.label()}' ({u.size} bytes per partition) at byte {addr} of "
            f"{st.buffer.upper()}, outside its {cap} usable bytes per partition",
            st.loc,
            [u.info()],
        )
    if not _start_partition_ok(p, st.partitions) or p + st.partitions > lim["partitions"]:
        raise NkiAllocationError(
            f"{desc} places tile '{u.label()}' ({st.partitions} partitions) at start partition {p}: "
            f"a tile of more than 64 partitions starts at 0, of 33 to 64 at 0 or 64, of up to 32 at "
            f"0, 32, 64 or 96",
            st.loc,
            [u.info()],
        )
    u.p0, u.p1 = p, p + st.partitions
    u.offset = addr
    u.fixed = True


def _start_partition_ok(p, n):
    if n > 64:
        return p == 0
    if n > 32:
        return p in (0, 64)
    return p in (0, 32, 64, 96)


def _overlap(a, b):
    return (
        a.start <= b.end
        and b.start <= a.end
        and a.p0 < b.p1
        and b.p0 < a.p1
        and a.offset < b.offset + b.size
        and b.offset < a.offset + a.size
    )


def _loc_of(ins, i):
    return ins[i].get("loc", f"instruction #{i}") if 0 <= i < len(ins) else f"instruction #{i}"


def _allocate(units, buf, lim, ins, target):
    """Place `units`; returns the largest bytes per partition live at once."""
    if not units:
        return 0
    cap = lim[buf]
    fixed = sorted((u for u in units if u.fixed), key=lambda u: u.start)
    # 2. direct placements must not share bytes while both live
    active = []
    for u in fixed:
        active = [v for v in active if v.end >= u.start]
        for v in active:
            if _overlap(u, v):
                lo, hi = max(u.start, v.start), min(u.end, v.end)
                raise NkiAllocationError(
                    f"{buf.upper()} placements overlap: tile '{u.label()}' (placed at {u.st.loc}, partitions "
                    f"{u.p0}..{u.p1}, bytes {u.offset}..{u.offset + u.size}) and tile '{v.label()}' (placed at "
                    f"{v.st.loc}, partitions {v.p0}..{v.p1}, bytes {v.offset}..{v.offset + v.size}) share bytes "
                    f"while both are live (from {_loc_of(ins, lo)} to {_loc_of(ins, hi)})",
                    u.st.loc,
                    [u.info(), v.info()],
                )
        active.append(u)
    # 3. the live set must fit
    peak = _check_peak(units, buf, cap, lim, ins, target)
    # 4. first fit in start order, then largest first
    auto = [u for u in units if not u.fixed]
    if not auto:
        return peak
    placed = _first_fit(auto, fixed, cap, lim, buf, ROTATE)
    if not placed and ROTATE:  # rotation fragments where plain first fit may not
        for u in auto:
            u.offset = None
        placed = _first_fit(auto, fixed, cap, lim, buf, False)
    if not placed:
        for u in auto:
            u.offset = None
        failed = _largest_first(auto, fixed, cap, lim, buf)
        if failed is not None:
            live = [v for v in units if v.start <= failed.end and failed.start <= v.end]
            raise NkiAllocationError(
                f"{buf.upper()} could not be placed: tile {failed.st.describe()} needs {failed.size} bytes per "
                f"partition in one piece, and the live set fits in the {cap} bytes of {target}, but no gap left "
                f"between the {len(live) - 1} tiles live with it is large enough (fragmentation): " + _listing(live),
                failed.st.loc,
                [v.info() for v in live],
            )
    return peak


def _usage_size(u, lim, buf):
    if buf == "psum" and not u.fixed:
        return -(-u.size // u.align) * u.align if u.size <= lim["bank"] else u.size
    return u.size


def _check_peak(units, buf, cap, lim, ins, target):
    """The largest bytes-per-partition the live tiles need at any instruction; refuse above cap."""
    nparts = lim["partitions"]
    ev = {}
    for u in units:
        ev.setdefault(u.start, []).append((1, u))
        ev.setdefault(u.end + 1, []).append((-1, u))
    use = np.zeros(nparts, dtype=np.int64)
    best, best_t = -1, None
    for t in sorted(ev):
        for sign, u in ev[t]:
            use[u.p0 : u.p1] += sign * _usage_size(u, lim, buf)
        m = int(use.max())
        if m > best:
            best, best_t = m, t
    if best <= cap:
        return best
    live = [u for u in units if u.start <= best_t <= u.end]
    last = max(live, key=lambda u: (u.start, u.size))
    raise NkiAllocationError(
        f"{buf.upper()} capacity exceeded: at {_loc_of(ins, best_t)} the {len(live)} live tiles need {best} bytes per "
        f"partition, more than the {cap} usable bytes per partition of {target}: " + _listing(live),
        last.st.loc,
        [u.info() for u in live],
    )


def _listing(live):
    groups = {}
    for u in live:
        st = u.st
        key = (st.name, tuple(st.shape), _TRN_NAME[st.dtype], u.size, st.loc)
        groups[key] = groups.get(key, 0) + 1
    items = sorted(groups.items(), key=lambda kv: -kv[0][3] * kv[1])
    parts = []
    for (name, shape, dt, size, loc), n in items[:12]:
        parts.append(f"'{name}' {list(shape)} {dt} {size} B" + (f" x {n}" if n > 1 else "") + f" ({loc})")
    if len(items) > 12:
        rest = sum(k[3] * n for k, n in items[12:])
        parts.append(f"... {len(items) - 12} more ({rest} B)")
    return "; ".join(parts)


def _fits_bank(cand, u, lim, buf):
    """PSUM: no block of the unit crosses a bank boundary."""
    if buf != "psum":
        return cand
    bank = lim["bank"]
    bsize = u.size // max(u.blocks, 1)
    for b in range(u.blocks):
        s = cand + b * bsize
        if bsize and s // bank != (s + bsize - 1) // bank:
            return -(-cand // bank) * bank
    return cand


def _gap(u, taken, cap, lim, buf):
    """The lowest aligned offset where `u` fits between the (offset, end) spans in `taken`."""
    taken.sort()
    return _scan(u, taken, cap, lim, buf, 0)


def _gap_from(u, taken, cap, lim, buf, start):
    """The lowest aligned offset at or after `start` where `u` fits, else the lowest one from 0."""
    taken.sort()
    if start:
        off = _scan(u, taken, cap, lim, buf, start)
        if off is not None:
            return off
    return _scan(u, taken, cap, lim, buf, 0)


def _scan(u, taken, cap, lim, buf, pos):
    a, size = u.align, u.size
    if buf != "psum":
        for o, e in taken:
            cand = -(-pos // a) * a
            if cand + size <= o:
                return cand
            pos = max(pos, e)
        cand = -(-pos // a) * a
        return cand if cand + size <= cap else None
    for o, e in taken + [(cap, cap)]:
        while True:
            cand = -(-pos // a) * a
            fixed = _fits_bank(cand, u, lim, buf)
            if fixed == cand:
                break
            pos = fixed
        if cand + size <= o:
            return cand
        pos = max(pos, e)
    return None


def _first_fit(auto, fixed, cap, lim, buf, rotate):
    auto.sort(key=lambda u: (u.start, -u.size))
    fstarts = [u.start for u in fixed]
    active = []
    first_end = -1  # the earliest end in `active`: nothing expires before it
    fnext = 0  # the next direct placement (in start order) not yet live
    factive = []  # direct placements live at the current unit's start
    rover = 0  # where the previous unit ended: with `rotate`, the next search starts here
    for u in auto:
        if first_end < u.start:
            active = [v for v in active if v.end >= u.start]
            first_end = min((v.end for v in active), default=1 << 62)
        while fnext < len(fixed) and fixed[fnext].start <= u.start:
            factive.append(fixed[fnext])
            fnext += 1
        factive = [v for v in factive if v.end >= u.start]
        p0, p1 = u.p0, u.p1
        taken = [(v.offset, v.offset + v.size) for v in active if v.p0 < p1 and p0 < v.p1]
        # direct placements already live where this unit starts
        taken.extend((v.offset, v.offset + v.size) for v in factive if v.p0 < p1 and p0 < v.p1)
        # direct placements that become live while this unit is
        i = bisect.bisect_right(fstarts, u.start)
        while i < len(fixed) and fixed[i].start <= u.end:
            v = fixed[i]
            if v.p0 < u.p1 and u.p0 < v.p1:
                taken.append((v.offset, v.offset + v.size))
            i += 1
        off = _gap_from(u, taken, cap, lim, buf, rover if rotate else 0)
        if off is None:
            return False
        u.offset = off
        rover = off + u.size
        active.append(u)
        first_end = min(first_end, u.end)
    return True


def _largest_first(auto, fixed, cap, lim, buf):
    placed = list(fixed)
    for u in sorted(auto, key=lambda u: (-u.size, u.start)):
        taken = [
            (v.offset, v.offset + v.size)
            for v in placed
            if v.start <= u.end and u.start <= v.end and v.p0 < u.p1 and u.p0 < v.p1
        ]
        off = _gap(u, taken, cap, lim, buf)
        if off is None:
            return u
        u.offset = off
        placed.append(u)
    return None


def _rewrite(aps, where):
    for ap in aps:
        st = ap.pop("_st", None)
        if st is None:  # the same dict twice in the program: rewritten already
            continue
        grouped, per = where[id(st)]
        if grouped is not None:
            u, rel = grouped, ap["offset"]
        else:
            bb = st.block_elems * st.dtype.itemsize
            b = 0 if st.free_elems == st.block_elems else max(_extent(ap)[0], 0) // bb
            u = per[b]
            rel = ap["offset"] - b * bb
        ap["offset"] = u.offset + rel
        if u.p0:
            ap["start_partition"] = ap["start_partition"] + u.p0
