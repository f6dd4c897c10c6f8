"""Oracles for golden format 2 (docs/golden-format.md, "Oracles").

For every floating output of a `values` case, the oracle is the same call run in float64 on the
recorded inputs upcast exactly (f32/bf16/f16/f8 -> f64, c64 -> c128): float64 carries 53 bits, so
for the sizes in the suite (at most ~10^5 terms per output) the float64 result is within
~10^5 * 2^-53 ~ 1e-11 relative of the exact value scaled by the sum of |terms|, about 2^-13 of a
float32 ulp: the oracle's own error is negligible against anything the runner measures in ulps of
f32, bf16 or f16.

Each output gets one of three methods:
  "f64"    the float64 result is stored as `oracle.<i>` (F64 for f32/c64 outputs; F32 for
           bf16/f16/f8 outputs, whose ulp is 2^16 times coarser than f32's rounding of the oracle);
  "exact"  the float64 result equals the stored output exactly, element for element (data
           movement, comparisons of values, exact arithmetic): the output is its own oracle;
  "none"   no oracle, with the reason (RNG/metadata checks; no float64 CPU kernel; the call fixes
           its output dtype through a dtype argument, so float64 cannot be requested).

And a `bound` naming the algorithm class the runner's accuracy rule uses (docs/numerics.md,
"Accuracy against the oracle"): "dot" and "sum" carry `terms` (K, the largest number of terms
summed into one output) and `scale` (a tensor holding sum |a_k||b_k| resp. sum |x_k| per output
element, computed by the same op in float64 on |inputs|), "arithmetic" and "transcendental" are
fixed ulp budgets, "none" means only the CPU-relative part of the rule applies.
"""

import math

import torch

FLOAT_STORED = (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2)

# Multilinear ops (sums of products of inputs with non-negative structure): the op applied to
# |inputs| is sum |a_k||b_k| per output, and applied to all-ones inputs counts the terms.
DOT_OPS = {"mm", "bmm", "addmm", "convolution", "convolution_backward"}
SUM_OPS = {"sum.dim_IntList", "cumsum", "mean", "mean.dim"}
MEAN_OPS = {"mean", "mean.dim"}  # a sum divided by its count: terms = input numel / output numel
TRANSCENDENTAL_OPS = {
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "cos",
    "cosh",
    "erf",
    "exp",
    "expm1",
    "log",
    "log10",
    "log1p",
    "log2",
    "rsqrt",
    "sin",
    "sinh",
    "tan",
    "tanh",
    "gelu",
    "sigmoid",
    "elu",
    "pow.Tensor_Tensor",
    "pow.Scalar",
    "pow.Tensor_Scalar",
    "atan2",
    "atan2.out",
}
ARITHMETIC_OPS = {
    "add.Tensor",
    "add.Scalar",
    "sub.Tensor",
    "sub.Scalar",
    "mul.Tensor",
    "mul.Scalar",
    "div.Tensor",
    "div.Scalar",
    "div.Tensor_mode",
    "div.Scalar_mode",
    "reciprocal",
    "sqrt",
    "fmod.Scalar",
    "fmod.Tensor",
    "remainder.Scalar",
    "remainder.Tensor",
    "leaky_relu",
    "hardtanh",
    "clamp",
    "clamp.Tensor",
    "_to_copy",
    "copy",
}
SCALE_SCALARS = ("alpha", "beta")  # scalar multipliers: |.| for the scale, 1 for the term count


def bound_kind(op):
    if op in DOT_OPS:
        return "dot"
    if op in SUM_OPS:
        return "sum"
    if op in TRANSCENDENTAL_OPS:
        return "transcendental"
    if op in ARITHMETIC_OPS:
        return "arithmetic"
    return "none"


CAST_OPS = {"_to_copy", "copy"}
SIXTEEN_BIT = {"bf16", "f16", "f8e4m3fn", "f8e5m2"}
ROUNDING_DIV_OPS = {"div.Tensor_mode", "div.Scalar_mode"}
CONV_OPS = {"convolution", "convolution_backward"}


def _representable(x, dtype_name):
    """Whether the Python float x is exactly a value of the golden dtype `dtype_name`."""
    t = {
        "f32": torch.float32,
        "bf16": torch.bfloat16,
        "f16": torch.float16,
        "f8e4m3fn": torch.float8_e4m3fn,
        "f8e5m2": torch.float8_e5m2,
    }.get(dtype_name)
    if t is None or not math.isfinite(x):
        return True
    return float(torch.tensor(x, dtype=torch.float64).to(t).to(torch.float64)) == x


def bound_exception(op, kind, out_dtype, tensor_dtypes, args, kwargs):
    """Why the algorithm bound `kind` does not describe what PyTorch CPU computes for this call
    (so the output gets `{"kind": "none"}`), or None when it does. Works on the golden metadata
    (dtype names, encoded values), so that a file can be checked against it
    (docs/golden-format.md, "Oracles"). A CPU output outside its own bound is an inconsistent
    golden, which the runner refuses; these are the calls where PyTorch CPU legitimately is."""
    if kind == "none":
        return None
    floats_in = {d for d in tensor_dtypes if d in SIXTEEN_BIT | {"f32", "c64"}}
    scalars = [
        v["float"]
        for v in list(args) + list(kwargs.values())
        if isinstance(v, dict) and "float" in v and isinstance(v["float"], float)
    ]
    if kind == "arithmetic":
        if op in ROUNDING_DIV_OPS:
            mode = kwargs.get("rounding_mode") or (args[2] if len(args) > 2 else None)
            if mode is not None and mode != {"none": None}:
                return "rounding the quotient to an integer is not a bounded-ulp operation"
        alpha = kwargs.get("alpha") or (args[2] if len(args) > 2 and op.startswith(("add.", "sub.")) else None)
        if out_dtype in SIXTEEN_BIT and alpha is not None and alpha not in ({"int": 1}, {"float": 1.0}):
            return "alpha*other is rounded to the output dtype before the add: two roundings"
        if op.startswith(("add.", "sub.")) and out_dtype in SIXTEEN_BIT and floats_in - {out_dtype}:
            return "an addend of another floating dtype is rounded to the output dtype first, and the sum cancels"
        if op.startswith(("add.", "sub.")) and any(not _representable(x, out_dtype) for x in scalars):
            # A product or quotient keeps the scalar's relative rounding error (within the
            # budget); a sum that cancels magnifies it.
            return "a Python float addend is rounded to the computation dtype first, and the sum cancels"
    if kind in ("arithmetic", "transcendental") and "out" in kwargs and floats_in - {out_dtype}:
        return "computed in the inputs' dtype and written to an `out` of another dtype"
    if kind == "dot" and op in CONV_OPS and out_dtype in SIXTEEN_BIT:
        return "PyTorch CPU's 16-bit convolutions do not meet the fp32-accumulation bound"
    return None


def _dec_float(x):
    return float(x)  # numbers, or the strings "nan", "inf", "-inf"


def decode(v, rec, tconv, dtypes):
    """Turn an encoded value (docs/golden-format.md, "Values") back into a call argument."""
    ((k, x),) = v.items()
    if k == "tensor":
        return tconv(rec.tensors[x])
    if k == "tensors":
        return [None if n is None else tconv(rec.tensors[n]) for n in x]
    if k in ("int", "bool", "str", "ints", "bools"):
        return x
    if k == "float":
        return _dec_float(x)
    if k == "floats":
        return [_dec_float(f) for f in x]
    if k == "complex":
        return complex(_dec_float(x[0]), _dec_float(x[1]))
    if k == "dtype":
        return dtypes[x]
    if k in ("layout", "memory_format"):
        return getattr(torch, x)
    if k == "device":
        return torch.device(x)
    if k == "none":
        return None
    raise ValueError(f"cannot decode {v}")


def _upcast(t):
    if t.dtype in FLOAT_STORED:
        return t.to(torch.float64)
    if t.dtype == torch.complex64:
        return t.to(torch.complex128)
    return t.clone()


def _upcast_values(t):
    """`_upcast`, and integer/bool tensors to float64 too: for a call whose result is floating
    only by promotion (no floating tensor input), the integers are the values computed on."""
    if t.dtype in FLOAT_STORED or t.dtype == torch.complex64:
        return _upcast(t)
    return t.to(torch.float64)


def promotes_integers(c):
    """Whether the oracle call promotes integer inputs to float64 (docs/golden-format.md, "How a
    generator computes the oracle"): the case has a floating output but no floating tensor input
    (true division, transcendentals and float scalars on integer tensors). Integer-result ops
    keep exact integer arithmetic (float64 is not exact above 2^53), and ops with a floating
    input keep their integer inputs (indices, counts) unchanged."""
    if c.op in CAST_OPS:
        return False  # a cast of an integer is its own exact oracle (via float64 it would round twice)
    ins = [t for n, t in c.rec.tensors.items() if not n.startswith("output")]
    outs = [c.rec.tensors[n] for n in c.rec.output_order]
    floating = FLOAT_STORED + (torch.complex64,)
    return any(t.dtype in floating for t in outs) and bool(ins) and not any(t.dtype in floating for t in ins)


def _call(func, c, tconv, scalar, dtypes):
    names = [a.name for a in func._schema.arguments]
    args = []
    for i, v in enumerate(c.args):
        a = decode(v, c.rec, tconv, dtypes)
        if i < len(names) and names[i] in SCALE_SCALARS and scalar is not None:
            a = scalar(a)
        args.append(a)
    kwargs = {}
    for name, v in c.kwargs.items():
        a = decode(v, c.rec, tconv, dtypes)
        if name in SCALE_SCALARS and scalar is not None:
            a = scalar(a)
        kwargs[name] = a
    out = func(*args, **kwargs)
    rets = func._schema.returns
    return out if (isinstance(out, tuple) and len(rets) > 1) else (out,)


def _pick(outs, name):
    """`output.<i>` / `output.<i>.<j>` of a normalised return tuple."""
    parts = [int(p) for p in name.split(".")[1:]]
    x = outs[parts[0]]
    for p in parts[1:]:
        x = x[p]
    return x


def _equal_exactly(oracle, out):
    o = oracle.to(torch.complex128 if oracle.is_complex() else torch.float64)
    e = out.to(torch.complex128 if out.is_complex() else torch.float64)
    if o.shape != e.shape:
        return False
    if o.is_complex():
        o, e = torch.view_as_real(o), torch.view_as_real(e)
    same = (o == e) | (torch.isnan(o) & torch.isnan(e))
    return bool(same.all())


def attach_oracle(c, func, dtypes):
    """Fill `c.oracle` (metadata per float output) and `c.oracle_tensors` (name -> tensor)."""
    c.oracle, c.oracle_tensors = {}, {}
    floats = [n for n in c.rec.output_order if c.rec.tensors[n].dtype in FLOAT_STORED + (torch.complex64,)]
    if not floats:
        return
    if c.check.get("kind") != "values":
        for n in floats:
            c.oracle[n] = {"method": "none", "why": f"the case has a `{c.check.get('kind')}` check, not values"}
        return
    try:
        with torch.no_grad():
            outs = _call(func, c, _upcast_values if promotes_integers(c) else _upcast, None, dtypes)
    except Exception as e:  # noqa: BLE001 (no float64 CPU kernel, or the op refuses mixed dtypes)
        why = f"float64 call failed: {type(e).__name__}: {str(e).splitlines()[0][:100]}"
        for n in floats:
            c.oracle[n] = {"method": "none", "why": why}
        return
    scale = terms = None
    tensor_dtypes = [m["dtype"] for name, m in c.rec.meta.items() if not name.startswith("output")]
    for n in floats:
        out = c.rec.tensors[n]
        kind = bound_kind(c.op)
        if bound_exception(c.op, kind, c.rec.meta[n]["dtype"], tensor_dtypes, c.args, c.kwargs):
            kind = "none"
        try:
            o = _pick(outs, n)
        except (IndexError, TypeError):
            o = None
        if not isinstance(o, torch.Tensor) or tuple(o.shape) != tuple(out.shape):
            c.oracle[n] = {"method": "none", "why": "the float64 call returned another structure"}
            continue
        if _equal_exactly(o, out):
            c.oracle[n] = {"method": "exact"}
            continue
        if o.dtype not in (torch.float64, torch.complex128):
            c.oracle[n] = {
                "method": "none",
                "why": f"a dtype argument fixes the output to {o.dtype}; float64 "
                "cannot be requested and the result differs from the output",
            }
            continue
        suffix = n[len("output.") :]
        if out.dtype == torch.complex64:
            stored = torch.view_as_real(o).contiguous()
        elif out.dtype == torch.float32:
            stored = o.contiguous()
        else:  # bf16 / f16 / f8: f32 keeps the oracle to 2^-16 of an output ulp
            stored = o.to(torch.float32).contiguous()
        entry = {
            "method": "f64",
            "tensor": f"oracle.{suffix}",
            "dtype": "F64" if stored.dtype == torch.float64 else "F32",
        }
        c.oracle_tensors[entry["tensor"]] = stored
        if kind in ("dot", "sum") and not out.is_complex():
            if scale is None:
                scale, terms = _scale_and_terms(c, func, dtypes)
            s = _pick(scale, n) if scale is not None else None
            if s is not None and tuple(s.shape) == tuple(out.shape):
                sname = f"oracle_scale.{suffix}"
                c.oracle_tensors[sname] = s.to(torch.float32).contiguous()
                entry["bound"] = {"kind": kind, "terms": terms[n], "scale": sname}
            else:
                entry["bound"] = {"kind": "none"}
        else:
            entry["bound"] = {"kind": kind if kind in ("arithmetic", "transcendental") else "none"}
        c.oracle[n] = entry


def _scale_and_terms(c, func, dtypes):
    """sum |terms| per output (the op on |inputs|, |alpha|, |beta|) and K per output name."""
    try:
        with torch.no_grad():
            scale = _call(
                func,
                c,
                lambda t: _upcast(t).abs() if t.dtype in FLOAT_STORED else t.clone(),
                lambda a: abs(a) if isinstance(a, (int, float)) else a,
                dtypes,
            )
            ones = _call(
                func,
                c,
                lambda t: torch.ones_like(t, dtype=torch.float64) if t.dtype in FLOAT_STORED else t.clone(),
                lambda a: 1 if isinstance(a, (int, float)) else a,
                dtypes,
            )
    except Exception:  # noqa: BLE001 (no bound data: the output keeps the CPU-relative rule)
        return None, {}
    terms = {}
    for n in c.rec.output_order:
        try:
            cnt = _pick(ones, n)
        except (IndexError, TypeError):
            continue
        if not isinstance(cnt, torch.Tensor) or not cnt.is_floating_point():
            continue
        if c.op in MEAN_OPS:
            inp = c.rec.tensors[c.rec.input_order[0]]
            k = inp.numel() // max(1, cnt.numel())
        else:
            k = int(cnt.abs().max().item()) if cnt.numel() else 0
        terms[n] = max(int(k), 0) if math.isfinite(k) else 0
    return scale, terms
