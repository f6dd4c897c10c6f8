"""The current `nki` namespace (NKI 0.2+, documented for Trn2), as far as the legacy front-end
covers it: `nki.jit` kernels default to the trn2 target, `nki.simulate(kernel)(*arrays)` runs one,
and the `nki.isa` calls take `dst=` first (see `isa._with_dst`). Partial: docs/nki.md."""

from . import Kernel, language, typing
from . import isa_current as isa

__all__ = ["isa", "jit", "language", "simulate", "typing"]


def jit(func=None, mode="auto", **options):
    options.setdefault("platform_target", "trn2")
    if func is None:
        return lambda f: Kernel(f, mode, **options)
    return Kernel(func, mode, **options)


def simulate(kernel):
    """`nki.simulate(kernel)(*arrays)`: run on trnsim."""
    if isinstance(kernel, Kernel):
        return kernel
    return jit(kernel)
