"""`nki.isa` of the current namespace (NKI 0.2+): every legacy `neuronxcc.nki.isa` call (which
also takes the `dst=` convention, see `isa._with_dst`), plus the calls that exist only here.

`rng` and `set_rng_seed` write raw random bits and seed VectorE's generator. Legacy NKI has no
raw-bit call (`nl.rand` gives uniform floats), so they live in this module only and
`neuronxcc.nki.isa` keeps the legacy surface. The current docs list `rng` for NeuronCore-v2
(Vector engine) as well, so they are accepted on the trn1 target too.

`quantize_mx` and `nc_matmul_mx` (NeuronCore-v4, trn3) exist only in the current API; they lower
to the simulator's instructions of the same names, with NKI's shape, dtype, memory and generation
rules checked here first (an `NkiError` naming the operand)."""

import functools
import inspect

import numpy as np

from . import _emit as E
from . import isa as _legacy
from ._core import (
    NkiError,
    View,
    bfloat16,
    caller_loc,
    dtype_name,
    int8,
    int16,
    int32,
    storage_of,
    uint8,
    uint16,
    uint32,
)
from ._emit import emit, scalar_operand
from ._targets import nc_generation, params

# The legacy calls, re-exported (their `__all__` also lists a name the module deletes).
_LEGACY = [n for n in _legacy.__all__ if hasattr(_legacy, n)]
globals().update({n: getattr(_legacy, n) for n in _LEGACY})

_RNG_DTYPES = (int8, int16, int32, uint8, uint16, uint32)


def _on_chip_view(t, what, loc):
    if not isinstance(t, View) or not t.base.on_chip:
        raise NkiError(f"{what} must be a tile in SBUF or PSUM", loc)


def rng(dst, engine=_legacy.engine.unknown, name=None, **kwargs):
    """VectorE `rng`: 32 random bits per element of dst, each truncated to dst's dtype (its least
    significant bits), written in place. dst: int8/16/32 or uint8/16/32 in SBUF or PSUM. Only
    VectorE's generator is modelled: `engine=gpsimd_engine` (documented from NeuronCore-v3 on)
    is refused."""
    loc = caller_loc()[0]
    _on_chip_view(dst, "nisa.rng's dst", loc)
    if dst.dtype not in _RNG_DTYPES:
        raise NkiError(f"nisa.rng writes integers (int8/16/32, uint8/16/32), not {dst.dtype}", loc)
    e = _legacy._eng(engine, "vector")
    if e != "vector":
        if e == "gpsimd" and nc_generation(E.T().target) < 3:
            raise NkiError("nisa.rng runs on the Vector engine only on NeuronCore-v2", loc)
        raise NkiError(f"nisa.rng on the {e} engine is not modelled: trnsim has VectorE's generator only", loc)
    emit("vector", "rng", {"dst": dst._ap(loc=loc)}, loc, writes=[dst])


def set_rng_seed(src_seeds, name=None, **kwargs):
    """VectorE `set_rng_seed` from a [1, 1] tile holding a 32-bit integer, in SBUF or PSUM."""
    loc = caller_loc()[0]
    _on_chip_view(src_seeds, "nisa.set_rng_seed's src_seeds", loc)
    if tuple(src_seeds.shape) not in ((1, 1), (1,)):
        raise NkiError(f"nisa.set_rng_seed takes a [1, 1] tile, got {list(src_seeds.shape)}", loc)
    if src_seeds.dtype not in (int32, uint32):
        raise NkiError(f"nisa.set_rng_seed takes a 32-bit integer seed, not {src_seeds.dtype}", loc)
    emit("vector", "set_rng_seed", {"seed": scalar_operand(src_seeds, loc)}, loc, reads=[src_seeds])


# The current API's parameter order of each call (dst first; AWS's nki.isa signatures, SDK 2.32).
# Positional arguments are mapped to these names and the legacy call gets keywords only, so a
# positional `nisa.tensor_copy(dst, src)` can never land in the legacy `src` slot.
_SIGNATURES = {
    "nc_matmul": (
        "dst",
        "stationary",
        "moving",
        "is_stationary_onezero",
        "is_moving_onezero",
        "is_transpose",
        "accumulate",
        "tile_position",
        "tile_size",
        "perf_mode",
    ),
    "nc_transpose": ("dst", "data", "engine"),
    "activation": ("dst", "op", "data", "bias", "scale", "reduce_op", "reduce_res", "reduce_cmd"),
    "activation_reduce": ("dst", "op", "data", "reduce_op", "reduce_res", "bias", "scale"),
    "tensor_reduce": ("dst", "op", "data", "axis", "negate", "keepdims"),
    "tensor_partition_reduce": ("dst", "op", "data"),
    "tensor_tensor": ("dst", "data1", "data2", "op", "engine"),
    "tensor_scalar": ("dst", "data", "op0", "operand0", "reverse0", "op1", "operand1", "reverse1", "engine"),
    "scalar_tensor_tensor": ("dst", "data", "op0", "operand0", "op1", "operand1", "reverse0", "reverse1"),
    "tensor_scalar_reduce": ("dst", "data", "op0", "operand0", "reduce_op", "reduce_res", "reverse0"),
    "tensor_tensor_scan": ("dst", "data0", "data1", "initial", "op0", "op1", "reverse0", "reverse1"),
    "tensor_scalar_cumulative": ("dst", "src", "op0", "op1", "imm0", "imm1", "reduce_cmd"),
    "tensor_copy": ("dst", "src", "engine"),
    "tensor_copy_predicated": ("dst", "src", "predicate", "reverse_pred"),
    "reciprocal": ("dst", "data"),
    "memset": ("dst", "value", "engine"),
    "bn_stats": ("dst", "data"),
    "bn_aggr": ("dst", "data"),
    "local_gather": ("dst", "src_buffer", "index", "num_elem_per_idx", "num_valid_indices"),
    "max8": ("dst", "src"),
    "nc_find_index8": ("dst", "data", "vals"),
    "nc_match_replace8": ("dst", "data", "vals", "imm", "dst_idx"),
    "nc_stream_shuffle": ("dst", "src", "shuffle_mask"),
    "select_reduce": ("dst", "predicate", "on_true", "on_false", "reduce_res", "reduce_cmd"),
    "dropout": ("dst", "data", "prob"),
    "dma_copy": ("dst", "src"),
    "sequence_bounds": ("dst", "segment_ids"),
    "range_select": (
        "dst",
        "on_true_tile",
        "comp_op0",
        "comp_op1",
        "bound0",
        "bound1",
        "reduce_cmd",
        "reduce_res",
        "reduce_op",
        "range_start",
        "on_false_value",
    ),
}
# Calls whose current form the legacy one cannot stand for (the reason each is refused).
_REFUSED = {
    "tensor_copy_dynamic_src": "removed in NKI 0.4 (use an access pattern with scalar_offset)",
    "tensor_copy_dynamic_dst": "removed in NKI 0.4 (use an access pattern with scalar_offset)",
}


def _current_call(name, legacy):
    params = _SIGNATURES[name]
    takes_dtype = name not in ("nc_matmul", "memset") and "dtype" in inspect.signature(legacy).parameters

    @functools.wraps(legacy)
    def call(*args, **kwargs):
        loc = caller_loc()[0]
        for k in ("mask", "dtype"):
            if k in kwargs:
                raise NkiError(
                    f"nisa.{name}({k}=...): the current NKI has no {k}= (removed in NKI 0.2); "
                    + ("the result takes dst's dtype" if k == "dtype" else "slice the operands instead"),
                    loc,
                )
        if len(args) > len(params):
            raise NkiError(f"nisa.{name} takes at most {len(params)} positional arguments ({', '.join(params)})", loc)
        for p, a in zip(params, args):
            if p in kwargs:
                raise NkiError(f"nisa.{name} got {p} both by position and by name", loc)
            kwargs[p] = a
        if "dst" not in kwargs:
            raise NkiError(f"nisa.{name}: the current NKI writes every result into dst= (its first argument)", loc)
        if name != "nc_matmul":
            kwargs.pop("accumulate", None)
        if takes_dtype and isinstance(kwargs["dst"], View):
            # the result is written in dst's dtype (the engine's cast on write), so no
            # intermediate tile in the operands' dtype rounds it first
            kwargs["dtype"] = kwargs["dst"].dtype
        return legacy(**kwargs)

    return call


def _refused(name, why):
    def call(*args, **kwargs):
        raise NkiError(f"nisa.{name}: {why}", caller_loc()[0])

    call.__name__ = name
    call._trnsim_refused = why
    return call


for _n in _SIGNATURES:
    globals()[_n] = _current_call(_n, getattr(_legacy, _n))
for _n, _why in _REFUSED.items():
    globals()[_n] = _refused(_n, _why)


# ---------------------------------------------------------------------------------------------
# iota and affine_select in their access-pattern form (AWS's nki.isa, NKI 0.2+): the affine value
# `offset + c*channel_multiplier + sum(step_k * i_k)` over the partitions c of dst and the
# nested loops `pattern = [[step, num], ...]` (outermost first), computed in wrapping int32.


def _affine_pattern(what, dst, pattern, offset, channel_multiplier, loc):
    """Checks the pattern form's arguments: ([[step, num], ...], offset, channel_multiplier)."""
    if not isinstance(dst, View) or dst.base.buffer != "sbuf":
        raise NkiError(f"nisa.{what}'s dst must be a tile in SBUF (GpSimd writes SBUF only)", loc)
    if not isinstance(pattern, (list, tuple)) or not pattern:
        raise NkiError(f"nisa.{what}(pattern=[[step, num], ...]): a non-empty list of [step, num] pairs", loc)
    try:
        pat = [[int(st), int(n)] for st, n in pattern]
        if any(isinstance(x, bool) for pair in pattern for x in pair):
            raise TypeError
    except (TypeError, ValueError):
        raise NkiError(f"nisa.{what} pattern {pattern!r}: each entry is a [step, num] pair of integers", loc) from None
    if len(pat) > 4:
        raise NkiError(
            f"nisa.{what} pattern {pattern!r}: at most 4 [step, num] pairs (the hardware's 4-D pattern)", loc
        )
    if any(n < 1 for _, n in pat):
        raise NkiError(f"nisa.{what} pattern {pattern!r}: every num is at least 1", loc)
    free = 1
    for n in dst.shape[1:]:
        free *= n
    count = 1
    for _, n in pat:
        count *= n
    if count != free:
        raise NkiError(
            f"nisa.{what}: the pattern {pattern!r} has {count} elements per partition, dst {list(dst.shape)} has {free}",
            loc,
        )
    vals = []
    for name, v in (("offset", offset), ("channel_multiplier", channel_multiplier)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise NkiError(f"nisa.{what}({name}={v!r}): an integer (int32)", loc)
        v = int(v)
        if not -(2**31) <= v < 2**31:
            raise NkiError(f"nisa.{what}({name}={v}): does not fit in int32", loc)
        vals.append(v)
    for st, _ in pat:
        if not -(2**31) <= st < 2**31:
            raise NkiError(f"nisa.{what} pattern step {st} does not fit in int32", loc)
    return pat, vals[0], vals[1]


def iota(dst, pattern, offset, channel_multiplier=0, name=None):
    """GpSimd `iota` (the current form): dst[c, ...] = offset + c*channel_multiplier + sum of
    step*index over `pattern`, in int32, then converted to dst's dtype. dst in SBUF."""
    loc = caller_loc()[0]
    pat, off, cm = _affine_pattern("iota", dst, pattern, offset, channel_multiplier, loc)
    emit(
        "gpsimd",
        "iota",
        {"dst": dst._ap(loc=loc), "offset": off, "channel_multiplier": cm, "pattern": pat},
        loc,
        writes=[dst],
    )


def _wrap32(v):
    return (v + 2**31) % 2**32 - 2**31


# cmp_op -> the hardware comparator against 0 (GreaterThan, GreaterThanEq, Eq, NotEq), and how the
# affine value is rewritten for it
_CMP = {"is_equal": "equal", "not_equal": "not_equal", "is_gt": "greater_than", "is_ge": "greater_equal"}


def affine_select(dst, pattern, offset, channel_multiplier, on_true_tile, on_false_value, cmp_op=None, name=None):
    """GpSimd `affine_select` (the current form): dst = cmp_op(v, 0) ? on_true_tile : on_false_value,
    with v the int32 affine value of `iota`. cmp_op defaults to equal. The hardware compares with
    >, >=, == and != only: `less` runs as `~v >= 0` (exact in int32), `less_equal` as `-v >= 0`,
    exact unless some v is -2**31 (refused: the values are known when the kernel is traced)."""
    from . import language as nl

    loc = caller_loc()[0]
    pat, off, cm = _affine_pattern("affine_select", dst, pattern, offset, channel_multiplier, loc)
    if not isinstance(on_true_tile, View) or on_true_tile.base.buffer != "sbuf":
        raise NkiError("nisa.affine_select's on_true_tile must be a tile in SBUF (GpSimd cannot reach PSUM)", loc)
    if tuple(on_true_tile.shape) != tuple(dst.shape):
        raise NkiError(
            f"nisa.affine_select: on_true_tile {list(on_true_tile.shape)} and dst {list(dst.shape)} differ in shape",
            loc,
        )
    if isinstance(on_false_value, View) or not isinstance(on_false_value, (int, float, np.integer, np.floating)):
        raise NkiError("nisa.affine_select's on_false_value is a scalar (an fp32 value)", loc)
    op = E.alu(nl.equal if cmp_op is None else cmp_op)
    if op in _CMP:
        cmp = _CMP[op]
    elif op == "is_lt":
        # v < 0  <=>  ~v = -v - 1 >= 0 (wrapping int32, every v)
        cmp, off, cm = "greater_equal", _wrap32(-off - 1), _wrap32(-cm)
        pat = [[_wrap32(-st), n] for st, n in pat]
    elif op == "is_le":
        # v <= 0  <=>  -v >= 0, except v = -2**31 (whose negation is itself)
        lo = off + min(0, cm * (dst.shape[0] - 1)) + sum(min(0, st * (n - 1)) for st, n in pat)
        hi = off + max(0, cm * (dst.shape[0] - 1)) + sum(max(0, st * (n - 1)) for st, n in pat)
        if lo <= -(2**31) or hi >= 2**31:
            raise NkiError(
                "nisa.affine_select(cmp_op=less_equal): the affine values reach the int32 range's ends, "
                "where v <= 0 has no exact form on the hardware's comparators (>, >=, ==, !=)",
                loc,
            )
        cmp, off, cm = "greater_equal", _wrap32(-off), _wrap32(-cm)
        pat = [[_wrap32(-st), n] for st, n in pat]
    else:
        raise NkiError(
            f"nisa.affine_select(cmp_op={op}): the comparison is one of equal, not_equal, greater, "
            "greater_equal, less, less_equal",
            loc,
        )
    from ._build import _imm

    emit(
        "gpsimd",
        "affine_select",
        {
            "dst": dst._ap(loc=loc),
            "on_true": on_true_tile._ap(loc=loc),
            "on_false": _imm(on_false_value),
            "offset": off,
            "channel_multiplier": cm,
            "pattern": pat,
            "cmp": cmp,
        },
        loc,
        reads=[on_true_tile],
        writes=[dst],
    )


# ---------------------------------------------------------------------------------------------
# dma_compute: its read-modify-write form (the current API's accumulating DMA; dma_copy has no
# dst_rmw_op since NKI 0.3)


def _same_side(a, b):
    """Whether two DMA operands name the same elements: equal views of one storage, or two
    indirect `.ap(vector_offset=)` views with the same pattern and the same index tile."""
    from ._core import DynView, storage_of

    if isinstance(a, View) and isinstance(b, View):
        return (
            storage_of(a.base) is storage_of(b.base)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and tuple(a.base.shape) == tuple(b.base.shape)
            and a.idx == b.idx
        )
    if isinstance(a, DynView) and isinstance(b, DynView):
        ia, ib = a.index_tile, b.index_tile
        return a.dim == b.dim and a.shape == b.shape and _same_side(a.parent, b.parent) and _same_side(ia, ib)
    return False


def dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=_legacy.oob_mode.error, name=None):
    """DMA-engine `dma_compute`, its read-modify-write form: `srcs = [dst, x]` (either order),
    `reduce_op=nl.add`, scales 1.0 (the only values AWS's 2.32 docs allow): dst += x, an
    accumulating DMA, direct or with an indirect `.ap(vector_offset=)` side (scatter or gather
    read-modify-write). Other sources are refused, not yet supported."""
    loc = caller_loc()[0]
    if E.alu(reduce_op) != "add":
        raise NkiError("nisa.dma_compute: reduce_op is nl.add (the only one AWS documents)", loc)
    srcs = list(srcs) if isinstance(srcs, (list, tuple)) else [srcs]
    if scales is not None and any(float(x) != 1.0 for x in scales):
        raise NkiError("nisa.dma_compute: every scale is 1.0 (the only value AWS documents)", loc)
    mine = [k for k, x in enumerate(srcs) if _same_side(x, dst)]
    if len(srcs) != 2 or not mine:
        raise NkiError(
            "nisa.dma_compute: trnsim supports its read-modify-write form, srcs=[dst, x] (dst += x), not yet "
            "other sources",
            loc,
        )
    other = srcs[1 - mine[0]]
    _legacy.dma_copy(dst=dst, src=other, dst_rmw_op=np.add, oob_mode=oob_mode)


# dma_transpose's fixed permutation per source rank (AWS's docs: the only axes it takes).
_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def _dge_mode(mode, loc):
    try:
        return _legacy.dge_mode(int(mode))
    except (TypeError, ValueError):
        raise NkiError(
            f"nisa.dma_transpose(dge_mode={mode!r}): not a nisa.dge_mode (unknown, none, swdge, hwdge)", loc
        ) from None


def dma_transpose(
    dst,
    src,
    axes=None,
    priority=None,
    dge_mode=_legacy.dge_mode.unknown,
    oob_mode=_legacy.oob_mode.error,
    name=None,
):
    """DMA transpose of `src` (HBM or SBUF, 2 to 4 dims) into `dst` (AWS's NKI 0.6 signature):
    `dst = src.transpose(axes)`, axes fixed by the rank ((1, 0), (2, 1, 0), (3, 1, 2, 0)); dst has
    src's rank (NKI 0.4). `dge_mode` is `unknown` (the compiler's choice) or `hwdge` (hardware
    DGE, NeuronCore-v3+), the two modes AWS allows a direct transpose; `hwdge` obeys the target's
    HWDGE limits (NKI 0.6: `src.shape[0]` in {1, 2, 4, 8, 16}, `src.shape[-1] <= 128`, 2-byte
    dtype), read from the simulator's target parameters. One `dma_transpose` instruction runs it.
    An indirect (gathered) source is refused: trnsim does not model AWS's indirect transpose.
    `oob_mode` concerns indirect sources only; `priority` (DMA QoS, NeuronCore-v4) is refused."""
    from ._core import DynView

    loc = caller_loc()[0]
    what = "nisa.dma_transpose"
    if isinstance(src, DynView) or not isinstance(src, View):
        raise NkiError(
            f"{what}: an indirect (gathered) source is not supported by trnsim: AWS lowers it to a "
            "software-DGE dma_gather_transpose, which trnsim does not model; gather with nisa.dma_copy "
            "first, then transpose the tile",
            loc,
        )
    if not isinstance(dst, View):
        raise NkiError(f"{what}'s dst must be a tensor in SBUF or HBM", loc)
    for side, t in (("src", src), ("dst", dst)):
        if t.base.buffer == "psum":
            raise NkiError(f"{what}'s {side} is in PSUM: DMA reads and writes only SBUF and HBM", loc)
    mode = _dge_mode(dge_mode, loc)
    target = E.T().target
    if priority is not None:
        if params(target)["dma_qos_classes"] <= 1:
            raise NkiError(f"{what}(priority=...): DMA priority is NeuronCore-v4 and newer only", loc)
        raise NkiError(f"{what}(priority=...): trnsim does not model DMA QoS priority (refused, not dropped)", loc)
    rank = src.ndim
    if rank not in _TRANSPOSE_AXES:
        raise NkiError(f"{what} takes a 2-, 3- or 4-dimensional src, got shape {list(src.shape)}", loc)
    if axes is not None and tuple(axes) != _TRANSPOSE_AXES[rank]:
        raise NkiError(
            f"{what}(axes={tuple(axes)}): a {rank}-D src is transposed with axes {_TRANSPOSE_AXES[rank]} "
            "(the only axes AWS's dma_transpose takes: (1, 0), (2, 1, 0), (3, 1, 2, 0))",
            loc,
        )
    perm = _TRANSPOSE_AXES[rank]
    if dst.ndim != rank:
        raise NkiError(
            f"{what}: dst must have src's rank (NKI 0.4): src {list(src.shape)} is {rank}-D, "
            f"dst {list(dst.shape)} is {dst.ndim}-D",
            loc,
        )
    want = [src.shape[a] for a in perm]
    if list(dst.shape) != want:
        raise NkiError(
            f"{what}: src {list(src.shape)} transposed by {perm} is {want}, but dst is {list(dst.shape)}", loc
        )
    if mode in (_legacy.dge_mode.none, _legacy.dge_mode.swdge):
        raise NkiError(
            f"{what}(dge_mode={mode.name}): a direct transpose takes dge_mode unknown or hwdge only "
            "(AWS's dma_transpose constraints; swdge lowers the indirect transpose)",
            loc,
        )
    if mode == _legacy.dge_mode.hwdge:
        rule = params(target)["dma_transpose_hwdge"]
        if rule is None:
            raise NkiError(
                f"{what}(dge_mode=hwdge): the hardware DGE is NeuronCore-v3 and newer; "
                f"{params(target)['label']} has none",
                loc,
            )
        if src.shape[0] not in rule["first_dims"]:
            raise NkiError(
                f"{what}(dge_mode=hwdge): src.shape[0] must be in {rule['first_dims']} (NKI 0.6), got {src.shape[0]}",
                loc,
            )
        if src.shape[-1] > rule["max_last_dim"]:
            raise NkiError(
                f"{what}(dge_mode=hwdge): src.shape[-1] must be <= {rule['max_last_dim']} (NKI 0.6), "
                f"got {src.shape[-1]}",
                loc,
            )
        if src.dtype.itemsize != rule["elem_bytes"]:
            raise NkiError(
                f"{what}(dge_mode=hwdge): src.dtype must be {rule['elem_bytes']} bytes, {src.dtype} is "
                f"{src.dtype.itemsize}",
                loc,
            )
    aps = {}
    for side, t in (("src", src), ("dst", dst)):
        ap = t._ap(loc=loc, merge=False)
        if len(ap["free"]) + 1 != rank:
            raise NkiError(f"{what}'s {side} view {list(t.shape)} does not keep its partition axis first", loc)
        aps[side] = ap
    emit("dma", "dma_transpose", {**aps, "dge_mode": mode.name}, loc, reads=[src], writes=[dst])


def nc_n_gather(dst, data, indices, name=None):
    """GpSimd `nc_n_gather`: per partition, `data`'s free elements flattened, taken at the uint32
    `indices`; dst has the indices' shape and data's dtype (AWS's 2.32 docs). All in SBUF."""
    from . import _build as B
    from . import language as nl

    loc = caller_loc()[0]
    for what, t in (("dst", dst), ("data", data), ("indices", indices)):
        if not isinstance(t, View) or t.base.buffer != "sbuf":
            raise NkiError(f"nisa.nc_n_gather's {what} must be a tile in SBUF (GpSimd cannot reach PSUM)", loc)
    if indices.dtype != uint32:
        raise NkiError(f"nisa.nc_n_gather's indices are uint32, not {indices.dtype}", loc)
    if dst.dtype != data.dtype:
        raise NkiError(f"nisa.nc_n_gather's dst has data's dtype ({data.dtype}), not {dst.dtype}", loc)
    B._assign(dst, nl.gather_flattened(data, indices))


# ---------------------------------------------------------------------------------------------
# MX (microscaling, NeuronCore-v4): quantize_mx and nc_matmul_mx (docs/isa.md §5.32-5.33)

_MX_QUADRANT = 32  # partitions of an SBUF quadrant; an MX group is 8 partitions x 4 codes
_MX_ELEMENTS = ("float8_e5m2_x4", "float8_e4m3fn_x4")
_MX_DATA = (*_MX_ELEMENTS, "float4_e2m1fn_x4")


def _mx_generation(what, loc):
    t = E.T().target
    g = nc_generation(t)
    if g < 4:
        raise NkiError(
            f"nisa.{what} is available only on NeuronCore-v4 and newer (trn3); this kernel runs on {t} "
            f"(NeuronCore-v{g}): set NEURON_PLATFORM_TARGET_OVERRIDE=trn3",
            loc,
        )


def _mx_tile(what, t, loc, buffer="sbuf"):
    if not isinstance(t, View) or not t.base.on_chip or t.base.buffer != buffer:
        raise NkiError(f"{what} must be a tile in {buffer.upper()}", loc)
    if t.ndim < 2:
        raise NkiError(f"{what} is a 2-D tile [partitions, free], got shape {list(t.shape)}", loc)
    return t.shape[0], int(np.prod(t.shape[1:]))


def _mx_dtype(what, t, allowed, loc):
    name = dtype_name(t.dtype)
    if name not in allowed:
        raise NkiError(f"{what} must be {' or '.join(allowed)}, not {name}", loc)


def _mx_start(t, loc):
    return t._ap(loc=loc)["start_partition"]


def _mx_data_partitions(what, t, loc):
    p = t.shape[0]
    start = _mx_start(t, loc)
    if p % _MX_QUADRANT or not 0 < p <= 128 or start % _MX_QUADRANT:
        raise NkiError(
            f"{what} spans whole SBUF quadrants: a multiple of 32 partitions (at most 128) from a quadrant "
            f"boundary, got {p} partitions from partition {start}",
            loc,
        )
    return p


def _mx_scales(what, scale, data_partitions, packed_free, loc):
    """Check a scale tile against its data tile and return the views holding its scales: 4
    partitions at the start of each data quadrant ([4, F] for one quadrant, else as tall as the
    data, of which only those partitions hold scales)."""
    sp, sf = _mx_tile(what, scale, loc)
    _mx_dtype(what, scale, ("float8_e8m0fnu", "uint8"), loc)
    want = 4 if data_partitions == _MX_QUADRANT else data_partitions
    if (sp, sf) != (want, packed_free):
        raise NkiError(
            f"{what}: the scales of a {data_partitions}-partition MX tile are a [{want}, {packed_free}] tile "
            f"(4 partitions per quadrant), got {list(scale.shape)}",
            loc,
        )
    if _mx_start(scale, loc) % _MX_QUADRANT:
        raise NkiError(f"{what} starts on an SBUF quadrant boundary (partition 0, 32, 64 or 96)", loc)
    rest = [(0, n) for n in scale.shape[1:]]
    return [scale.restrict([(q * _MX_QUADRANT, q * _MX_QUADRANT + 4), *rest]) for q in range(data_partitions // 32)]


def quantize_mx(dst, src, dst_scale, name=None):
    """VectorE `quantize_mx` (NeuronCore-v4): `src` [P, F] fp16/bf16 quantized to MXFP8, `dst`
    [P, F/4] float8_e5m2_x4 / float8_e4m3fn_x4 (4 codes per element) and `dst_scale` the e8m0
    scale of each group of 8 partitions x 4 elements, in the layout `nc_matmul_mx` reads. All in
    SBUF; P a multiple of 32 from a quadrant boundary, F a multiple of 4 (AWS's 2.32 docs)."""
    loc = caller_loc()[0]
    _mx_generation("quantize_mx", loc)
    p, f = _mx_tile("nisa.quantize_mx's src", src, loc)
    dp, df = _mx_tile("nisa.quantize_mx's dst", dst, loc)
    _mx_dtype("nisa.quantize_mx's src", src, ("float16", "bfloat16"), loc)
    _mx_dtype("nisa.quantize_mx's dst", dst, _MX_ELEMENTS, loc)
    _mx_data_partitions("nisa.quantize_mx's src", src, loc)
    if f % 4:
        raise NkiError(f"nisa.quantize_mx's src free size is a multiple of 4, got {f}", loc)
    if (dp, df) != (p, f // 4):
        raise NkiError(
            f"nisa.quantize_mx's dst holds 4 codes per element: [{p}, {f // 4}] for src {list(src.shape)}, "
            f"got {list(dst.shape)}",
            loc,
        )
    _mx_data_partitions("nisa.quantize_mx's dst", dst, loc)
    pieces = _mx_scales("nisa.quantize_mx's dst_scale", dst_scale, p, f // 4, loc)
    if _mx_start(dst, loc) // _MX_QUADRANT != _mx_start(dst_scale, loc) // _MX_QUADRANT:
        raise NkiError("nisa.quantize_mx's dst and dst_scale must start in the same SBUF quadrant", loc)
    emit(
        "vector",
        "quantize_mx",
        {"dst": dst._ap(loc=loc), "src": src._ap(loc=loc), "dst_scale": dst_scale._ap(loc=loc)},
        loc,
        reads=[src],
        writes=[dst, *pieces],
    )


def _mx_tiling(tile_position, tile_size, kp, loc):
    """nc_matmul_mx's row tiling: tile_size (row_size in 32/64/128, 128) and tile_position
    (start_row, 0), both or neither; the stationary tile no taller than a row tile."""
    given = [v is not None and v != () for v in (tile_position, tile_size)]
    if not any(given):
        return {}
    if not all(given):
        raise NkiError("nisa.nc_matmul_mx: tile_position and tile_size go together (row tiling)", loc)
    try:
        (r0, c0), (rs, cs) = (int(v) for v in tile_position), (int(v) for v in tile_size)
    except (TypeError, ValueError):
        raise NkiError(
            f"nisa.nc_matmul_mx: tile_position {tile_position!r} and tile_size {tile_size!r} are (row, column) pairs",
            loc,
        ) from None
    if rs not in (32, 64, 128) or cs != 128:
        raise NkiError(f"nisa.nc_matmul_mx: tile_size is (32, 64 or 128, 128) (row tiling only), got ({rs}, {cs})", loc)
    if c0 != 0 or r0 < 0 or r0 % rs or r0 + rs > 128:
        raise NkiError(f"nisa.nc_matmul_mx: tile_position is (a multiple of {rs} below 128, 0), got ({r0}, {c0})", loc)
    if kp > rs:
        raise NkiError(f"nisa.nc_matmul_mx: the stationary tile's {kp} partitions exceed the {rs}-row tile", loc)
    return {"tile_position": [r0, c0], "tile_size": [rs, cs]}


def nc_matmul_mx(
    dst,
    stationary,
    moving,
    stationary_scale,
    moving_scale,
    tile_position=None,
    tile_size=None,
    accumulate=None,
    name=None,
):
    """TensorE `nc_matmul_mx` (NeuronCore-v4): `dst[M, N] (+)= stationary.T @ moving` over the
    K = 4·Kp MX-quantized contraction (each packed element of partition p holds rows 4p..4p+4),
    every code scaled by its group's e8m0 scale. stationary [Kp, M] and moving [Kp, N] are
    float8_e5m2_x4 / float8_e4m3fn_x4 / float4_e2m1fn_x4 in SBUF with their scale tiles
    (quantize_mx's layout); dst [M, N] fp32 (or bf16 where PSUM takes it) in PSUM. accumulate:
    None (the default) overwrites PSUM elements nothing wrote yet and adds to written ones, as
    nc_matmul does; True adds, False overwrites (AWS's 2.33 signature)."""
    loc = caller_loc()[0]
    _mx_generation("nc_matmul_mx", loc)
    kp, m = _mx_tile("nisa.nc_matmul_mx's stationary", stationary, loc)
    kq, n = _mx_tile("nisa.nc_matmul_mx's moving", moving, loc)
    dm, dn = _mx_tile("nisa.nc_matmul_mx's dst", dst, loc, buffer="psum")
    _mx_dtype("nisa.nc_matmul_mx's stationary", stationary, _MX_DATA, loc)
    _mx_dtype("nisa.nc_matmul_mx's moving", moving, _MX_DATA, loc)
    prm = E.T().params
    outs = ("float32", "bfloat16") if prm.get("psum_bf16_output") else ("float32",)
    _mx_dtype("nisa.nc_matmul_mx's dst", dst, outs, loc)
    _mx_data_partitions("nisa.nc_matmul_mx's stationary", stationary, loc)
    if kq != kp:
        raise NkiError(f"nisa.nc_matmul_mx: stationary has {kp} partitions (Kp), moving has {kq}", loc)
    _mx_data_partitions("nisa.nc_matmul_mx's moving", moving, loc)
    fmax = prm["stationary_fmax"]
    if m % 2 or m > fmax:
        raise NkiError(f"nisa.nc_matmul_mx: the stationary free size (M) is even and at most {fmax}, got {m}", loc)
    nmax = prm["moving_fmax"] * (2 if dst.dtype == bfloat16 else 1)
    if n > nmax:
        raise NkiError(f"nisa.nc_matmul_mx: the moving free size (N) is at most {nmax} for this dst, got {n}", loc)
    if (dm, dn) != (m, n):
        raise NkiError(f"nisa.nc_matmul_mx: dst is [M, N] = [{m}, {n}], got {list(dst.shape)}", loc)
    s_pieces = _mx_scales("nisa.nc_matmul_mx's stationary_scale", stationary_scale, kp, m, loc)
    m_pieces = _mx_scales("nisa.nc_matmul_mx's moving_scale", moving_scale, kp, n, loc)
    fields = {
        "dst": dst._ap(loc=loc),
        "stationary": stationary._ap(loc=loc),
        "moving": moving._ap(loc=loc),
        "stationary_scale": stationary_scale._ap(loc=loc),
        "moving_scale": moving_scale._ap(loc=loc),
    }
    fields.update(_mx_tiling(tile_position, tile_size, kp, loc))
    st = storage_of(dst.base)
    written = st.fully_written or (st.written is not None and bool(st.written[dst.positions()].all()))
    if accumulate is not None and bool(accumulate) and not written:
        raise NkiError(
            "nisa.nc_matmul_mx(accumulate=True) into PSUM elements that nothing has written: the sum would "
            "start from whatever the bank holds (the first matmul of an accumulation group overwrites)",
            loc,
        )
    add = written if accumulate is None else bool(accumulate)
    if add:
        fields["accumulate"] = True
    reads = [stationary, moving, *s_pieces, *m_pieces] + ([dst] if add else [])
    emit("tensor", "nc_matmul_mx", fields, loc, reads=reads, writes=[dst])


def _lnc2(what, loc):
    t = E.T()
    if getattr(t, "lnc", 1) != 2:
        raise NkiError(
            f"nisa.{what} synchronises the two physical cores of an LNC=2 kernel (kernel[2], or "
            "NEURON_LOGICAL_NC_CONFIG=2); this kernel runs on one core",
            loc,
        )
    return t


def _barrier_engine(engine, loc, what):
    """The engine that runs a barrier: GpSimd unless one is named; naming one that cannot (the
    Tensor engine, the DMA/sync queues) is an error, never a silent default."""
    if engine is None or engine == _legacy.engine.unknown:
        return "gpsimd"
    e = {_legacy.engine.gpsimd: "gpsimd", _legacy.engine.vector: "vector", _legacy.engine.scalar: "scalar"}.get(engine)
    if e is None:
        raise NkiError(f"nisa.{what} runs on the GpSimd, Vector or Scalar engine, not {engine!r}", loc)
    return e


def core_barrier(data, cores=(0, 1), engine=_legacy.engine.unknown, name=None):
    """Both physical cores of an LNC=2 kernel wait for each other: the n-th `core_barrier` of
    core 0 pairs with the n-th of core 1, and what either core does after it comes after what
    both did before it (the simulator's `core_barrier`, docs/isa.md §5.36). `data` is the shared
    HBM tensor the cores synchronise on; only `cores=(0, 1)` exists."""
    loc = caller_loc()[0]
    _lnc2("core_barrier", loc)
    if tuple(int(c) for c in cores) != (0, 1):
        raise NkiError(f"nisa.core_barrier(cores={tuple(cores)}): only cores=(0, 1) exists (LNC=2)", loc)
    if not isinstance(data, View) or data.base.on_chip:
        raise NkiError("nisa.core_barrier's data must be a tensor in shared HBM (what the cores synchronise on)", loc)
    e = _barrier_engine(engine, loc, "core_barrier")
    emit(e, "core_barrier", {"data": data._ap(loc=loc)}, loc)


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=None, name=None):
    """Each physical core of an LNC=2 kernel sends its SBUF tile `src` to core `send_to_rank`
    and receives core `recv_from_rank`'s into its own SBUF tile `dst`. trnsim moves the data the
    way AWS documents the default `dma_engine.dma` mode (DMA with CoreBarrier synchronisation):
    each core stores `src` into its slot of a shared HBM exchange tensor, the two cores meet at
    a `core_barrier`, and each loads its sender's slot into `dst`. `pipe_id` groups exchanges on
    the hardware; every sendrecv here is a full barrier, which orders at least as much."""
    loc = caller_loc()[0]
    t = _lnc2("sendrecv", loc)
    for what, v in (("src", src), ("dst", dst)):
        if not isinstance(v, View) or v.base.buffer != "sbuf":
            raise NkiError(f"nisa.sendrecv's {what} must be a tile in SBUF", loc)
    if src.dtype != dst.dtype:
        raise NkiError(
            f"nisa.sendrecv: src is {dtype_name(src.dtype)} and dst {dtype_name(dst.dtype)}; they must match", loc
        )
    if tuple(src.shape) != tuple(dst.shape):
        raise NkiError(f"nisa.sendrecv: src is {list(src.shape)} and dst {list(dst.shape)}; they must match", loc)
    ranks = []
    for what, r in (("send_to_rank", send_to_rank), ("recv_from_rank", recv_from_rank)):
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or int(r) not in (0, 1):
            raise NkiError(f"nisa.sendrecv's {what} is 0 or 1 (the cores sharing the HBM stack), not {r!r}", loc)
        ranks.append(int(r))
    mode = str(getattr(dma_engine, "name", dma_engine) or "dma").lower()
    if "gpsimd" in mode:
        # AWS's limits of the GpSimd SB-to-SB mode (nki.isa.sendrecv, dma_engine=gpsimd_dma)
        per = int(np.prod(src.shape[1:])) if len(src.shape) > 1 else 1
        # (1024 bytes of a 32-bit type, 512 of a 16-bit one, 256 of an 8-bit one: 256 elements)
        if src.shape[0] % 16 or per > 256:
            raise NkiError(
                "nisa.sendrecv(dma_engine=gpsimd_dma): the partition count must be a multiple of 16 and each "
                "partition at most 1024 bytes of a 32-bit type, 512 of a 16-bit one, 256 of an 8-bit one",
                loc,
            )
    core = t.instance
    n = t.exchange_ordinal
    t.exchange_ordinal += 1
    ex = t.__dict__.setdefault("exchanges", {}).setdefault(n, {})
    slots = t.__dict__.setdefault("exchange_tensors", {})
    st = slots.get(n)
    shape = (2, *src.shape)
    if st is None:
        st = slots[n] = t.new_hbm(shape, src.dtype, "exchange", f"sendrecv{n}", loc=loc)
    elif st.shape != shape or st.dtype != src.dtype:
        raise NkiError(
            f"kernel[2] (LNC=2): sendrecv #{n} moves {list(src.shape)} {dtype_name(src.dtype)} on core {core} but "
            f"{list(st.shape[1:])} {dtype_name(st.dtype)} on the other core",
            loc,
        )
    ex[core] = {"send_to": ranks[0], "recv_from": ranks[1], "loc": loc}
    full = View.full(st)
    mine = full[core]
    emit("dma", "dma_copy", {"dst": mine._ap(loc=loc), "src": src._ap(loc=loc)}, loc, reads=[src], writes=[mine])
    emit("gpsimd", "core_barrier", {"data": full._ap(loc=loc)}, loc)
    # the sender's slot: core recv_from_rank writes it before its barrier (traced later for core 0)
    emit("dma", "dma_copy", {"dst": dst._ap(loc=loc), "src": full[ranks[1]]._ap(loc=loc)}, loc, writes=[dst])


__all__ = [
    n
    for n in (
        *_LEGACY,
        "core_barrier",
        "dma_compute",
        "nc_matmul_mx",
        "nc_n_gather",
        "quantize_mx",
        "rng",
        "sendrecv",
        "set_rng_seed",
    )
]
# (dma_transpose is one of the legacy names, redefined above with the current signature.)
