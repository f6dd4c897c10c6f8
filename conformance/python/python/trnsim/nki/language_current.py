"""`nki.language` of the current namespace (NKI 0.3+): every name of the legacy
`neuronxcc.nki.language` that the current API keeps, plus the loop constructs it adds.

* `affine_range`, `sequential_range`, `static_range` are deprecated aliases of Python `range`
  (AWS's NKI 0.7 docs); trnsim unrolls every Python loop at trace time, as NKI 0.7 specialises.
* `fori_loop(lower, upper, body_fun, step=1)` calls `body_fun(i)` for each `i` in
  `range(lower, upper, step)`: with integer bounds the hardware loop and its unrolled form compute
  the same, so trnsim traces it unrolled. Bounds held in registers (`VirtualRegister`) need
  trnsim's register model, which it does not have yet: refused.
* `while_loop(init, body_fun)` loops on a register condition: refused for the same reason.
* `dynamic_range` (deprecated in NKI 0.6 for `fori_loop`): refused, it iterates a register.
* `NKIObject`: the base class NKI documents for a kernel's own dataclasses and configuration
  objects (`NKIObject(**kwargs)`). trnsim traces a kernel as Python, so such objects are ordinary
  Python objects: keyword arguments become attributes, and subclasses keep their methods.
* The MX dtypes of NeuronCore-v4 (trn3): `float8_e8m0fnu` (the OCP scale, ml_dtypes'
  `float8_e8m0fnu`) and the packed containers `float8_e5m2_x4`, `float8_e4m3fn_x4` (4 codes in 32
  bits) and `float4_e2m1fn_x4` (4 codes in 16 bits) of `nisa.quantize_mx` / `nisa.nc_matmul_mx`.
  NumPy has no container dtype: a kernel returns an `_x4` tensor as its raw words (a uint32 or
  uint16 array), and takes one as such an array viewed in the kernel (`t.view(nl.float8_e4m3fn_x4)`).
  Using one on trn1/trn2 is an `NkiError` naming the generation.
* `no_reorder()`: the current API's place for the legacy `nki.compiler.no_reorder` block (AWS's
  attention tutorial v10 uses `with nl.no_reorder():`); trnsim keeps program order anyway."""

import builtins

from . import language as _legacy
from ._core import (  # noqa: F401  (the MX dtypes, nl.<dtype> in the current API only)
    NkiError,
    caller_loc,
    float4_e2m1fn_x4,
    float8_e4m3fn_x4,
    float8_e5m2_x4,
    float8_e8m0fnu,
)
from .compiler import no_reorder  # noqa: F401  (`with nl.no_reorder():` in the current API)

_LEGACY = [n for n in dir(_legacy) if not n.startswith("_") and n not in ("builtins", "math", "np", "E", "T")]
globals().update({n: getattr(_legacy, n) for n in _LEGACY})


class NKIObject:
    """Base class of a kernel's dataclasses and configuration objects: `NKIObject(a=1).a == 1`."""

    def __init__(self, **kwargs):
        for name, value in kwargs.items():
            setattr(self, name, value)

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


def _int_bound(v, what, loc):
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            import numpy as np

            if isinstance(v, np.integer):
                return int(v)
        except ImportError:  # pragma: no cover
            pass
        raise NkiError(
            f"nl.fori_loop {what}={v!r}: trnsim takes integer loop bounds; a bound held in a register "
            "(VirtualRegister) needs the register model, which trnsim does not simulate yet",
            loc,
        )
    return v


def fori_loop(lower, upper, body_fun, step=1):
    """`for i in range(lower, upper, step): body_fun(i)`, traced unrolled (integer bounds)."""
    loc = caller_loc()[0]
    lo, hi = _int_bound(lower, "lower", loc), _int_bound(upper, "upper", loc)
    st = _int_bound(step, "step", loc)
    if st <= 0:
        raise NkiError(f"nl.fori_loop step={step}: the step is a positive integer", loc)
    for i in builtins.range(lo, hi, st):
        body_fun(i)


def while_loop(init, body_fun):
    raise NkiError(
        "nl.while_loop loops on a register condition (VirtualRegister): trnsim does not simulate the "
        "register model yet",
        caller_loc()[0],
    )


def dynamic_range(*args, **kwargs):
    raise NkiError(
        "nl.dynamic_range iterates a register (deprecated since NKI 0.6 for nl.fori_loop): trnsim does "
        "not simulate the register model yet; loops with integer bounds work as Python range or "
        "nl.fori_loop",
        caller_loc()[0],
    )


while_loop._trnsim_refused = dynamic_range._trnsim_refused = "needs the register model"

_MX_DTYPES = ("float8_e8m0fnu", "float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4")

__all__ = [n for n in (*_LEGACY, *_MX_DTYPES, "NKIObject", "no_reorder", "dynamic_range", "fori_loop", "while_loop")]
