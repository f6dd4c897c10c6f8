"""`nki.isa` of the current namespace (NKI 0.2+): every legacy `neuronxcc.nki.isa` call (which
also takes the `dst=` convention, see `isa._with_dst`), plus the calls that exist only here.

`rng` and `set_rng_seed` write raw random bits and seed VectorE's generator. Legacy NKI has no
raw-bit call (`nl.rand` gives uniform floats), so they live in this module only and
`neuronxcc.nki.isa` keeps the legacy surface. The current docs list `rng` for NeuronCore-v2
(Vector engine) as well, so they are accepted on the trn1 target too."""

from . import _emit as E
from . import isa as _legacy
from ._core import NkiError, View, caller_loc, int8, int16, int32, uint8, uint16, uint32
from ._emit import emit, scalar_operand
from ._targets import nc_generation

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


def _two_cores(what):
    raise NkiError(f"nisa.{what} exchanges data or synchronises between the two physical cores of an LNC=2 kernel: "
                   "trnsim does not simulate two cores at once yet, and refuses it rather than run one core's "
                   "half alone", caller_loc()[0])


def core_barrier(*args, **kwargs):
    """Refused until trnsim simulates the two physical cores of a logical core together."""
    _two_cores("core_barrier")


def sendrecv(*args, **kwargs):
    """Refused until trnsim simulates the two physical cores of a logical core together."""
    _two_cores("sendrecv")


__all__ = [n for n in (*_LEGACY, "core_barrier", "rng", "sendrecv", "set_rng_seed")]
