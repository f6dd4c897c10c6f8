"""`nki.isa` of the current namespace (NKI 0.2+), as far as the emitter uses it: `rng(dst=...)`,
the raw-bit call legacy `neuronxcc.nki.isa` does not have (conformance/src/emit_nki.rs writes it
through this namespace; docs/nki.md, "Emitted kernels"). Everything else is the legacy module's."""

from . import isa as _legacy
from .isa import *  # noqa: F403  (the legacy calls)
from .language import write


def rng(dst, engine=None, **_kw):
    """32 random bits per element of dst (VectorE's generator), each truncated to dst's dtype,
    written in place."""
    write(dst, _legacy.rng(dst.shape, dst.dtype))


def set_rng_seed(src_seeds, **_kw):
    _legacy.set_rng_seed(src_seeds)
