"""`nki.isa` of the current namespace (NKI 0.2+): every legacy `neuronxcc.nki.isa` call (which
also takes the `dst=` convention, see `isa._with_dst`), plus the calls that exist only here.

`rng` and `set_rng_seed` write raw random bits and seed VectorE's generator. Legacy NKI has no
raw-bit call (`nl.rand` gives uniform floats), so they live in this module only and
`neuronxcc.nki.isa` keeps the legacy surface. The current docs list `rng` for NeuronCore-v2
(Vector engine) as well, so they are accepted on the trn1 target too."""

import functools

from . import _emit as E
from . import isa as _legacy
from ._core import NkiError, View, caller_loc, int8, int16, int32, uint8, uint16, uint32
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
    "iota": "the current nisa.iota(dst, pattern, offset, channel_multiplier) form is not supported by trnsim yet",
    "affine_select": "the current nisa.affine_select(dst, pattern, offset, channel_multiplier, ...) form is not "
    "supported by trnsim yet",
    "tensor_copy_dynamic_src": "removed in NKI 0.4 (use an access pattern with scalar_offset)",
    "tensor_copy_dynamic_dst": "removed in NKI 0.4 (use an access pattern with scalar_offset)",
}


def _current_call(name, legacy):
    params = _SIGNATURES[name]

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


def _two_cores(what):
    raise NkiError(
        f"nisa.{what} exchanges data or synchronises between the two physical cores of an LNC=2 kernel: "
        "trnsim does not simulate two cores at once yet, and refuses it rather than run one core's "
        "half alone",
        caller_loc()[0],
    )


def core_barrier(*args, **kwargs):
    """Refused until trnsim simulates the two physical cores of a logical core together."""
    _two_cores("core_barrier")


def sendrecv(*args, **kwargs):
    """Refused until trnsim simulates the two physical cores of a logical core together."""
    _two_cores("sendrecv")


core_barrier._trnsim_refused = sendrecv._trnsim_refused = "needs the two-core LNC=2 simulation"


__all__ = [n for n in (*_LEGACY, "core_barrier", "nc_n_gather", "rng", "sendrecv", "set_rng_seed")]
# (dma_transpose is one of the legacy names, redefined above with the current signature.)
