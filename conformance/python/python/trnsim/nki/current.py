"""The current `nki` namespace (NKI 0.3+, SDK 2.29+; implemented as of SDK 2.32 / NKI 0.6).

`nki.jit` kernels take NumPy arrays or torch tensors (`_frameworks`), run on trn2 unless
NEURON_PLATFORM_TARGET_OVERRIDE names another generation, and `kernel[lnc]` is the LNC degree.
`platform_target=` is an error, as it is in AWS's `nki.jit` since NKI 0.3.0; `mode=` is accepted
and ignored, as AWS's is. `nki.simulate(kernel)(...)` runs the same way: trnsim is the simulator,
so `NKI_SIMULATOR=1` changes nothing here. See docs/nki.md."""

from . import Kernel, typing
from . import isa_current as isa
from . import language_current as language
from ._core import NkiError

__all__ = ["isa", "jit", "language", "simulate", "typing"]


def _make(func, options):
    if "platform_target" in options:
        from . import _def_loc

        raise NkiError(
            "nki.jit(platform_target=...) is an error in the current NKI (as in AWS's nki.jit since NKI "
            "0.3.0): set NEURON_PLATFORM_TARGET_OVERRIDE=trn2|trn3 instead",
            _def_loc(func),
        )
    options.pop("mode", None)
    if isinstance(func, Kernel):
        func = func.func
    return Kernel(func, "auto", api="current", **options)


def jit(fn=None, **options):
    """`@nki.jit` / `nki.jit(fn)`: a kernel of the current API, run on trnsim."""
    if fn is None:
        return lambda f: _make(f, dict(options))
    return _make(fn, dict(options))


def simulate(kernel):
    """`nki.simulate(kernel)(*arrays_or_tensors)`: run on trnsim. Inputs the kernel writes are
    updated in place (AWS's simulator guide documents the same)."""
    if isinstance(kernel, Kernel):
        return kernel
    return _make(kernel, {})
