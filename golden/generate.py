#!/usr/bin/env python3
"""Generate the trnconf golden cases from PyTorch CPU.

Every expected output in golden/cases/ is what `torch` (pinned in requirements.txt) returned on CPU
for the recorded inputs; nothing is computed by hand. The file format is the contract in
docs/golden-format.md (format 2: with oracles, golden/oracle.py); the Rust loader is written from
that page, not from this script.

Four sources of cases (the `<source>` part of a case id):
  opinfo  calls captured from PyTorch's own OpInfo samples (op_db) by a TorchDispatchMode that
          records every dispatched Core ATen overload with its real inputs and outputs;
  hand    a hand-written table, so that every one of the 193 core overloads has cases
          (the OpInfo capture never reaches 25 of them, and the backward ops need inputs
          consistent with their forward: saved statistics, pooling indices, ...);
  stress  tiling/edge cases for a tiled backend: >128 partitions, >512-wide PSUM banks,
          non-multiples, 0-size / 0-d tensors, broadcasting, 64K+ reductions, dtype limits,
          NaN, +-inf, -0.0;
  model   one case per distinct call form (overload, input dtypes/shapes, other arguments) of
          the committed models' traced graphs (golden/models/*/graph.json), fresh inputs.

Usage:
  python golden/generate.py                     # regenerate everything into golden/
  python golden/generate.py --out /tmp/g        # into another directory
  python golden/generate.py --ops 'add.*,mm'    # only these ops (comma-separated globs);
                                                # other ops' files and index entries are kept
  python golden/generate.py --models none       # without the model call forms
"""

import argparse
import fnmatch
import functools
import itertools
import json
import math
import os
import shutil
import sys
import time
import warnings
import zlib
from dataclasses import dataclass, field

# Reproducibility across machines: pin the ATen CPU kernel flavour (no AVX2/AVX512 paths, whose
# vectorised math differs in the last ulp between CPUs) and run single-threaded (parallel
# reductions split differently with the thread count). Must happen before `import torch`.
os.environ["ATEN_CPU_CAPABILITY"] = "default"
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"
# The BLAS and oneDNN code paths too (they ignore ATEN_CPU_CAPABILITY): MKL's conditional
# numerical reproducibility on its SSE2-compatible path, oneDNN (convolutions) capped at SSE4.1,
# the ISA every x86-64 CPU of the last fifteen years has. What still varies by CPU is listed in
# golden/README.md ("Reproducibility").
os.environ["MKL_CBWR"] = "COMPATIBLE"
os.environ["MKL_ENABLE_INSTRUCTIONS"] = "SSE4_2"
os.environ["ONEDNN_MAX_CPU_ISA"] = "SSE41"
os.environ["DNNL_MAX_CPU_ISA"] = "SSE41"
# The reproducibility experiment (golden/README.md) regenerates with other code paths:
# TRNCONF_GOLDEN_CPU_PATHS="ATEN_CPU_CAPABILITY=avx2,ONEDNN_MAX_CPU_ISA=AVX2" overrides the pins.
for _kv in filter(None, os.environ.get("TRNCONF_GOLDEN_CPU_PATHS", "").split(",")):
    _k, _, _v = _kv.partition("=")
    if _v == "unset":
        os.environ.pop(_k.strip(), None)
    else:
        os.environ[_k.strip()] = _v.strip()

import safetensors.torch  # noqa: E402 - after the CPU-path environment above
import torch  # noqa: E402 - after the CPU-path environment above
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402 - after the CPU-path environment above

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dtypes  # noqa: E402 - after the CPU-path environment above
import oracle  # noqa: E402 - after the CPU-path environment above

GENERATOR = "golden/generate.py"
FORMAT = 2  # docs/golden-format.md; format 2 adds the oracles (golden/oracle.py)
TORCH_VERSION = torch.__version__.split("+")[0]  # "2.15.0", without the local build tag
PINNED_TORCH = "2.15.0"

aten = torch.ops.aten

# --------------------------------------------------------------------------------------------
# The 193 Core ATen overloads, in groups (same content and order as
# shared/reference/core-aten-overloads.json; cross-checked against torch.Tag.core at start-up).
# --------------------------------------------------------------------------------------------
CORE_GROUPS = {
    "unary": [
        "abs",
        "acos",
        "acosh",
        "asin",
        "asinh",
        "atan",
        "atanh",
        "ceil",
        "cos",
        "cosh",
        "erf",
        "exp",
        "expm1",
        "floor",
        "log",
        "log10",
        "log1p",
        "log2",
        "neg",
        "reciprocal",
        "round",
        "rsqrt",
        "sign",
        "sin",
        "sinh",
        "sqrt",
        "tan",
        "tanh",
        "trunc",
        "bitwise_not",
        "logical_not",
        "isnan",
        "isinf",
    ],
    "activation": ["relu", "gelu", "sigmoid", "hardtanh", "leaky_relu", "elu"],
    "binary": [
        "add.Tensor",
        "add.Scalar",
        "sub.Tensor",
        "sub.Scalar",
        "mul.Tensor",
        "mul.Scalar",
        "div.Tensor",
        "div.Tensor_mode",
        "div.Scalar",
        "div.Scalar_mode",
        "pow.Tensor_Tensor",
        "pow.Scalar",
        "pow.Tensor_Scalar",
        "atan2",
        "atan2.out",
        "fmod.Scalar",
        "fmod.Tensor",
        "remainder.Scalar",
        "remainder.Tensor",
        "maximum",
        "minimum",
        "bitwise_and.Scalar",
        "bitwise_and.Tensor",
        "bitwise_or.Scalar",
        "bitwise_or.Tensor",
        "bitwise_xor.Scalar",
        "bitwise_xor.Tensor",
        "logical_and",
        "logical_or",
        "logical_xor",
        "clamp",
        "clamp.Tensor",
        "where.self",
    ],
    "comparison": [
        "eq.Scalar",
        "eq.Tensor",
        "ne.Scalar",
        "ne.Tensor",
        "ge.Scalar",
        "ge.Tensor",
        "gt.Scalar",
        "gt.Tensor",
        "le.Scalar",
        "le.Tensor",
        "lt.Scalar",
        "lt.Tensor",
    ],
    "reduction": [
        "amax",
        "amin",
        "any",
        "any.dim",
        "any.dims",
        "argmax",
        "argmin",
        "max.dim",
        "min.dim",
        "mean",
        "mean.dim",
        "prod",
        "prod.dim_int",
        "sum.dim_IntList",
        "var.correction",
        "var.dim",
        "cumsum",
    ],
    "sort": ["sort", "topk", "nonzero"],
    "matmul_conv": [
        "mm",
        "bmm",
        "addmm",
        "convolution",
        "convolution_backward",
        "_cdist_forward",
        "_pdist_forward",
        "_fft_r2c",
        "_fft_c2r",
    ],
    "norm_softmax": [
        "_softmax",
        "_log_softmax",
        "native_layer_norm",
        "native_layer_norm_backward",
        "native_group_norm",
        "native_group_norm_backward",
        "_native_batch_norm_legit",
        "_native_batch_norm_legit.no_stats",
        "_native_batch_norm_legit_no_training",
    ],
    "pooling": [
        "avg_pool1d",
        "avg_pool2d",
        "avg_pool2d_backward",
        "avg_pool3d",
        "adaptive_avg_pool1d",
        "_adaptive_avg_pool2d",
        "_adaptive_avg_pool2d_backward",
        "_adaptive_avg_pool3d",
        "max_pool2d_with_indices",
        "max_pool2d_with_indices_backward",
        "max_pool3d_with_indices",
    ],
    "pad_resample": [
        "constant_pad_nd",
        "reflection_pad1d",
        "reflection_pad2d",
        "reflection_pad3d",
        "replication_pad2d",
        "replication_pad3d",
        "upsample_bilinear2d.vec",
        "upsample_nearest2d.vec",
        "grid_sampler_2d",
        "col2im",
    ],
    "indexing": [
        "index.Tensor",
        "index_put",
        "index_select",
        "gather",
        "scatter.src",
        "scatter.value",
        "scatter_add",
        "scatter_reduce.two",
        "select_scatter",
        "slice_scatter",
        "masked_scatter",
        "embedding",
        "embedding_dense_backward",
        "_embedding_bag",
    ],
    "shape": [
        "alias",
        "as_strided",
        "view",
        "permute",
        "expand",
        "squeeze.dim",
        "squeeze.dims",
        "unsqueeze",
        "select.int",
        "slice.Tensor",
        "diagonal",
        "split_with_sizes",
        "cat",
        "flip",
        "repeat",
    ],
    "creation": [
        "arange.start_step",
        "empty.memory_format",
        "empty_strided",
        "full",
        "full_like",
        "fill.Scalar",
        "scalar_tensor",
        "rand",
        "randn",
        "randperm",
        "native_dropout",
        "_to_copy",
        "copy",
        "clone",
        "resize_",
        "_local_scalar_dense",
    ],
    "metadata": ["sym_size.int", "sym_stride.int", "sym_numel", "sym_storage_offset", "sym_is_contiguous"],
}
CORE_OPS = [op for ops in CORE_GROUPS.values() for op in ops]
CORE_SET = frozenset(CORE_OPS)
GROUP_OF = {op: g for g, ops in CORE_GROUPS.items() for op in ops}


def overload(name):
    """'add.Tensor' -> torch.ops.aten.add.Tensor; 'relu' -> torch.ops.aten.relu.default."""
    base, _, ov = name.partition(".")
    return getattr(getattr(aten, base), ov or "default")


def op_name(func):
    """OpOverload -> core-list spelling ('relu', 'add.Tensor')."""
    s = func._schema
    if not s.name.startswith("aten::"):
        return None
    base = s.name[len("aten::") :]
    return f"{base}.{s.overload_name}" if s.overload_name else base


def check_core_list():
    """The embedded list must be exactly the live registry's `core`-tagged overloads."""
    live = set()
    for full in torch._C._dispatch_get_all_op_names():
        if not full.startswith("aten::"):
            continue
        base, _, ov = full[len("aten::") :].partition(".")
        try:
            op = getattr(getattr(aten, base), ov or "default")
        except (AttributeError, RuntimeError):
            continue
        if torch.Tag.core in op.tags:
            live.add(f"{base}.{ov}" if ov else base)
    if len(CORE_OPS) != 193 or live != CORE_SET:
        sys.exit(
            f"core list mismatch with torch {torch.__version__}: "
            f"missing={sorted(live - CORE_SET)} extra={sorted(CORE_SET - live)}"
        )


# --------------------------------------------------------------------------------------------
# Dtypes (docs/golden-format.md, "Dtype names")
# --------------------------------------------------------------------------------------------
DT = dtypes.STORED  # name -> torch dtype, for every dtype a stored tensor may have
STORED_NAME = {v: k for k, v in DT.items()}
# dtypes that may appear as *arguments* (e.g. `_to_copy(dtype=torch.float64)`) but are never stored
ARG_DTYPE_NAME = {**STORED_NAME, torch.float64: "f64", torch.complex128: "c128"}
FLOAT_NAMES = ("f32", "bf16", "f16", "f8e4m3fn", "f8e5m2")
F = ("f32", "bf16", "f16")
I = ("i32", "i64")  # noqa: E741 - the integer dtypes, next to F (the floats)
FI = F + I
ALL = FI + ("bool",)
F8 = ("f8e4m3fn", "f8e5m2")

# --------------------------------------------------------------------------------------------
# Budgets
# --------------------------------------------------------------------------------------------
OPINFO_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.bool]
OPINFO_MAX_SAMPLES = 10  # samples tried per (OpInfo, dtype)
# cases kept per (op, dtype) from OpInfo: f32 3, bool 1 (mostly promoted/trivial), others 2
OPINFO_CAP = {torch.float32: 3, torch.bool: 1}
OPINFO_CAP_OTHER = 2
OPINFO_PER_INFO = 3  # candidates kept per (op, dtype, OpInfo) before selection
OPINFO_CANDIDATES = 64  # candidates kept per (op, dtype) before selection
OPINFO_MAX_BYTES = 24 * 1024  # all tensors of one captured call (inputs + outputs)
FILE_LIMIT = 2 * 1024 * 1024  # hard: no file over 2 MB (the repository-wide limit)
FILE_AIM = 300 * 1024  # soft: report files above this
TOTAL_AIM = 30 * 1024 * 1024
TOTAL_LIMIT = 50 * 1024 * 1024  # 80 MB for all golden data, 30 MB of it reserved for model data

# Forward ops whose OpInfos we also run with requires_grad=True + .backward(), so the core
# backward overloads are captured from real autograd graphs.
BACKWARD_TRIGGERS = {
    "native_layer_norm",
    "native_group_norm",
    "convolution",
    "avg_pool2d",
    "_adaptive_avg_pool2d",
    "max_pool2d_with_indices",
    "embedding",
}

RNG_OPS = {"rand", "randn", "randperm", "native_dropout"}
UNINIT_OPS = {"empty.memory_format", "empty_strided"}


RUN_SEED = None  # --seed: mixed into every case seed (a fresh corpus); None = the committed set


def stable_seed(*parts):
    if RUN_SEED is not None:
        parts = ("seed", RUN_SEED) + parts
    return zlib.crc32("|".join(str(p) for p in parts).encode()) & 0x7FFFFFFF


# --------------------------------------------------------------------------------------------
# Value encoding (docs/golden-format.md, "Values")
# --------------------------------------------------------------------------------------------
def enc_float(x):
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


class Unrecordable(Exception):
    """The call involves something the format cannot store (f64 tensor, sparse, meta, ...)."""


def storable(t):
    return (
        (type(t) is torch.Tensor or isinstance(t, torch.nn.Parameter))
        and t.device.type == "cpu"
        and t.layout == torch.strided
        and t.dtype in STORED_NAME
        and not t.is_conj()
        and not t.is_neg()
    )


class Recorder:
    """Collects the tensors of one case (contiguous snapshots) and encodes values."""

    def __init__(self):
        self.tensors = {}  # name -> contiguous torch.Tensor
        self.meta = {}  # name -> {"dtype", "shape", "strides", "storage_offset"}
        self.input_order = []  # input tensor names in argument order (for the primary dtype)
        self.output_order = []

    def add_tensor(self, name, t, is_input):
        if not storable(t):
            raise Unrecordable(f"{name}: {type(t).__name__} {t.dtype} {t.device} {t.layout}")
        # clone now: in-place/out ops and later calls may change the original
        self.tensors[name] = t.detach().clone(memory_format=torch.contiguous_format)
        self.meta[name] = {
            "dtype": STORED_NAME[t.dtype],
            "shape": list(t.shape),
            "strides": list(t.stride()),
            "storage_offset": t.storage_offset(),
        }
        (self.input_order if is_input else self.output_order).append(name)
        return {"tensor": name}

    def encode(self, v, name, ty, is_input):
        """Encode one argument/return value; `ty` is the schema type string (or '')."""
        if isinstance(v, torch.Tensor):
            return self.add_tensor(name, v, is_input)
        if v is None:
            return {"none": None}
        if ty in ("Tensor", "Optional[Tensor]") and isinstance(v, (bool, int, float, complex)):
            # eager `t + 1` reaches add.Tensor with a Python number in the Tensor slot (a
            # "wrapped number"); the format has no encoding for that, and .Scalar cases cover it
            raise Unrecordable(f"{name}: Python number for a Tensor parameter")
        if isinstance(v, bool):
            return {"bool": v}
        if isinstance(v, int):
            if "float" in ty:  # a `float` parameter given a Python int
                return {"float": enc_float(v)}
            return {"int": v}
        if isinstance(v, float):
            return {"float": enc_float(v)}
        if isinstance(v, complex):
            return {"complex": [enc_float(v.real), enc_float(v.imag)]}
        if isinstance(v, str):
            return {"str": v}
        if isinstance(v, torch.dtype):
            if v not in ARG_DTYPE_NAME:
                raise Unrecordable(f"dtype argument {v}")
            return {"dtype": ARG_DTYPE_NAME[v]}
        if isinstance(v, torch.layout):
            return {"layout": str(v).replace("torch.", "")}
        if isinstance(v, torch.memory_format):
            return {"memory_format": str(v).replace("torch.", "")}
        if isinstance(v, torch.device):
            if v.type != "cpu":
                raise Unrecordable(f"device {v}")
            return {"device": "cpu"}
        if isinstance(v, (list, tuple)):
            if "Tensor" in ty or any(isinstance(x, torch.Tensor) for x in v):
                names = []
                for j, x in enumerate(v):
                    if x is None:
                        names.append(None)
                    elif isinstance(x, torch.Tensor):
                        self.add_tensor(f"{name}.{j}", x, is_input)
                        names.append(f"{name}.{j}")
                    else:
                        raise Unrecordable(f"{name}: mixed tensor list")
                return {"tensors": names}
            if "float" in ty or any(isinstance(x, float) for x in v):
                return {"floats": [enc_float(x) for x in v]}
            if v and all(isinstance(x, bool) for x in v):
                return {"bools": list(v)}
            if "bool" in ty and not v:
                return {"bools": []}
            if all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                return {"ints": [int(x) for x in v]}
            raise Unrecordable(f"{name}: list {v!r}")
        raise Unrecordable(f"{name}: value of type {type(v).__name__}")


@dataclass
class Case:
    op: str
    source: str
    schema: str
    args: list
    kwargs: dict
    outputs: list
    rec: Recorder
    check: dict
    prov: dict
    dtype: str = ""
    id: str = ""
    sig: str = ""
    order: int = 0  # discovery order (opinfo) / table order (hand, stress)

    @property
    def in_numel(self):
        return min([math.prod(self.rec.meta[n]["shape"]) for n in self.rec.input_order] or [0])

    @property
    def nbytes(self):
        return sum(t.numel() * t.element_size() for t in self.rec.tensors.values())


def primary_dtype(rec):
    """Spec: first floating-point input tensor, else first input tensor, else first output
    tensor, else 'none' (inputs in argument order: positional args, list elements in order,
    then keyword arguments in schema order)."""
    for name in rec.input_order:
        if rec.meta[name]["dtype"] in FLOAT_NAMES:
            return rec.meta[name]["dtype"]
    if rec.input_order:
        return rec.meta[rec.input_order[0]]["dtype"]
    if rec.output_order:
        return rec.meta[rec.output_order[0]]["dtype"]
    return "none"


def encode_inputs(func, args, kwargs):
    """Snapshot and encode the arguments of a call *before* it runs."""
    rec = Recorder()
    sargs = func._schema.arguments
    enc_args = []
    for i, a in enumerate(args):
        ty = str(sargs[i].type) if i < len(sargs) else ""
        enc_args.append(rec.encode(a, f"input.{i}", ty, True))
    enc_kwargs = {}
    types = {a.name: str(a.type) for a in sargs}
    schema_order = [a.name for a in sargs if a.name in kwargs]
    for k in schema_order + sorted(set(kwargs) - set(schema_order)):
        enc_kwargs[k] = rec.encode(kwargs[k], f"kwarg.{k}", types.get(k, ""), True)
    return rec, enc_args, enc_kwargs


def encode_outputs(func, rec, out):
    rets = func._schema.returns
    outs = out if (isinstance(out, tuple) and len(rets) > 1) else (out,)
    enc = []
    for i, o in enumerate(outs):
        ty = str(rets[i].type) if i < len(rets) else ""
        enc.append(rec.encode(o, f"output.{i}", ty, False))
    return enc


def signature(op, rec, args, kwargs):
    """What makes two captured calls 'the same case' (for de-duplication)."""
    tens = tuple(
        (n, m["dtype"], tuple(m["shape"]), tuple(m["strides"]))
        for n, m in sorted(rec.meta.items())
        if not n.startswith("output")
    )
    return json.dumps([op, tens, args, kwargs], sort_keys=True)


def make_check(op, args, kwargs, rec, out):
    """`check` per docs/golden-format.md: values, metadata (uninitialised memory) or properties
    (RNG). The property values are derived from the call, never from the sample itself."""
    if op in UNINIT_OPS:
        return {"kind": "metadata"}
    if op == "resize_":
        old = rec.meta["input.0"]
        new_numel = math.prod(rec.meta["output.0"]["shape"])
        return {"kind": "metadata"} if new_numel > math.prod(old["shape"]) else {"kind": "values"}
    if op not in RNG_OPS:
        return {"kind": "values"}
    if op == "native_dropout":
        p = float(args[1])
        train = args[2] if len(args) > 2 else kwargs.get("train")
        if train is False:  # eval: identity, mask all True -> exact values (None means train)
            return {"kind": "values"}
        return {"kind": "properties", "props": {"dropout": {"p": p}, "deterministic": True}}
    if op == "randperm":
        return {"kind": "properties", "props": {"permutation": int(args[0]), "deterministic": True}}
    n = math.prod(args[0])
    props = {"deterministic": True}
    if op == "rand":
        props["range"] = [0.0, 1.0]
        mu, sd = 0.5, math.sqrt(1.0 / 12.0)
    else:
        mu, sd = 0.0, 1.0
    if n >= 16:
        # 6 standard errors: a correct generator fails this with probability ~1e-9
        props["mean"] = [mu, round(6 * sd / math.sqrt(n), 6)]
        props["std"] = [round(sd, 6), round(6 * sd / math.sqrt(n), 6)]
    return {"kind": "properties", "props": props}


def verify_properties(case):
    """The stored sample must itself satisfy the properties we ask the runner to check."""
    props = case.check.get("props", {})
    out = case.rec.tensors.get("output.0")
    if "range" in props:
        lo, hi = props["range"]
        assert bool(((out >= lo) & (out < hi)).all()), f"{case.op}: sample outside {props['range']}"
    if "mean" in props and out.numel():
        m, tol = props["mean"]
        assert abs(out.double().mean().item() - m) <= tol, f"{case.op}: mean"
        s, tol = props["std"]
        assert abs(out.double().std().item() - s) <= tol, f"{case.op}: std"
    if "permutation" in props:
        n = props["permutation"]
        assert torch.equal(out.sort().values.long(), torch.arange(n)), f"{case.op}: permutation"
    if "dropout" in props:
        p = props["dropout"]["p"]
        x = case.rec.tensors["input.0"]
        mask = case.rec.tensors["output.1"].bool()  # (f32 for 0-size inputs: a torch quirk)
        assert bool((out[~mask] == 0).all()), f"{case.op}: dropped elements not zero"
        if p < 1:
            kept = (x.float() * (1.0 / (1.0 - p)))[mask]
            assert torch.allclose(out.float()[mask], kept, rtol=1e-2, atol=1e-3), (
                f"{case.op}: kept elements not input/(1-p)"
            )


def record_call(func, args, kwargs, source, prov, max_bytes=None):
    """Run one call and turn it into a Case. Returns (case or None, result, reason)."""
    op = op_name(func)
    try:
        rec, enc_args, enc_kwargs = encode_inputs(func, args, kwargs)
    except Unrecordable as e:
        return None, func(*args, **kwargs), f"input: {e}"
    if max_bytes is not None and sum(t.numel() * t.element_size() for t in rec.tensors.values()) > max_bytes:
        return None, func(*args, **kwargs), "too large"
    out = func(*args, **kwargs)
    try:
        enc_out = encode_outputs(func, rec, out)
    except Unrecordable as e:
        return None, out, f"output: {e}"
    case = Case(
        op=op,
        source=source,
        schema=str(func._schema).replace("aten::", "", 1),
        args=enc_args,
        kwargs=enc_kwargs,
        outputs=enc_out,
        rec=rec,
        check=make_check(op, args, kwargs, rec, out),
        prov=prov,
    )
    case.dtype = primary_dtype(rec)
    if max_bytes is not None and case.nbytes > max_bytes:
        return None, out, "too large"
    case.sig = signature(op, rec, enc_args, enc_kwargs)
    return case, out, None


# --------------------------------------------------------------------------------------------
# Source 1: OpInfo capture
# --------------------------------------------------------------------------------------------
class CaptureMode(TorchDispatchMode):
    """Records every dispatched Core ATen overload (inputs cloned before the call, outputs
    after). Only active around the OpInfo call itself, not around sample construction, so the
    helpers that build inputs (make_tensor & co) are not recorded."""

    def __init__(self, wanted, on_case):
        super().__init__()
        self.wanted = wanted  # op name -> bool (the --ops filter)
        self.on_case = on_case  # callback(case)
        self.prov = None  # provenance of the sample being run
        self.reached = set()  # core ops dispatched during the current run_samples()
        self.paused = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = op_name(func)
        if self.paused or op not in CORE_SET:
            return func(*args, **kwargs)
        self.reached.add(op)
        if not self.wanted(op) or _input_bytes(args, kwargs) > OPINFO_MAX_BYTES or not _storage_exact(op, args):
            return func(*args, **kwargs)
        case, out, _ = record_call(func, args, kwargs, "opinfo", dict(self.prov), max_bytes=OPINFO_MAX_BYTES)
        if case is not None:
            self.on_case(case)
        return out


def _storage_exact(op, args):
    """as_strided addresses the input's *storage* and resize_ reinterprets it; the case stores
    only the logical (contiguous) data, so keep such calls only when storage == data."""
    if op not in ("as_strided", "resize_"):
        return True
    t = args[0]
    return (
        t.is_contiguous() and t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.numel() * t.element_size()
    )


def _input_bytes(args, kwargs):
    """Logical size of the tensors of a call, checked before anything is cloned."""
    return sum(
        t.numel() * t.element_size()
        for t in _flatten(list(args) + list(kwargs.values()))
        if isinstance(t, torch.Tensor)
    )


class Selector:
    """Keeps a bounded, deterministic set of candidates per (op, dtype) and finally picks the
    OPINFO_CAP most diverse ones (distinct shapes, ranks, argument combos, dtypes mixes,
    broadcasting, 0-size/0-d/non-contiguous inputs, distinct OpInfos)."""

    def __init__(self):
        self.cands = {}  # (op, dtype) -> [Case]
        self.sigs = set()
        self.per_info = {}  # (op, dtype, opinfo) -> count
        self.counter = 0

    def add(self, case):
        if case.check["kind"] == "properties":
            verify_properties(case)
        key = (case.op, case.dtype)
        if case.sig in self.sigs:
            return
        lst = self.cands.setdefault(key, [])
        k3 = key + (case.prov["opinfo"],)
        if len(lst) >= OPINFO_CANDIDATES or self.per_info.get(k3, 0) >= OPINFO_PER_INFO:
            return
        self.sigs.add(case.sig)
        self.per_info[k3] = self.per_info.get(k3, 0) + 1
        case.order = self.counter
        self.counter += 1
        lst.append(case)

    @staticmethod
    def features(c):
        m = c.rec.meta
        ins = [m[n] for n in c.rec.input_order]
        shapes = tuple(tuple(x["shape"]) for x in ins)
        f = {
            ("shapes", shapes),
            ("ranks", tuple(len(s) for s in shapes)),
            ("args", json.dumps([a for a in c.args if "tensor" not in a and "tensors" not in a], sort_keys=True)),
            ("kwargs", json.dumps(c.kwargs, sort_keys=True)),
            ("dtypes", tuple(x["dtype"] for x in ins)),
            ("opinfo", c.prov["opinfo"]),
        }
        if any(0 in s for s in shapes):
            f.add(("zero-size",))
        if any(len(s) == 0 for s in shapes):
            f.add(("0-d",))
        if len(set(shapes)) > 1:
            f.add(("mixed-shapes",))
        if any(x["strides"] != contiguous_strides(x["shape"]) for x in ins):
            f.add(("non-contiguous",))
        return f

    def select(self):
        chosen = []
        for key in sorted(self.cands):
            cands = self.cands[key]
            feats = [self.features(c) for c in cands]
            covered, picked = set(), []
            cap = OPINFO_CAP.get(DT.get(key[1]), OPINFO_CAP_OTHER)
            # Prefer ordinary calls (no empty tensor; the table has empties and 0-d covered),
            # then the most not-yet-covered features, then non-trivial sizes, then discovery
            # order. Without the first two terms, degenerate samples win every time.
            while len(picked) < min(cap, len(cands)):
                best = max(
                    (i for i in range(len(cands)) if i not in picked),
                    key=lambda i: (("zero-size",) not in feats[i], len(feats[i] - covered), cands[i].in_numel >= 4, -i),
                )
                picked.append(best)
                covered |= feats[best]
            chosen += sorted((cands[i] for i in picked), key=lambda c: c.order)
        return chosen


def contiguous_strides(shape):
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= max(s, 1)
    return list(reversed(st))


def run_opinfos(wanted, log):
    # op_db imports expecttest/hypothesis-free parts of torch.testing; a failure here is fatal
    from torch.testing._internal.common_methods_invocations import op_db

    sel = Selector()
    mode = CaptureMode(wanted, sel.add)
    t0 = time.time()
    for info in op_db:
        oname = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
        try:
            supported = info.supported_dtypes("cpu")
        except Exception:  # noqa: BLE001 - an OpInfo that cannot list its CPU dtypes has no cases
            continue
        mode.reached = set()
        t1 = time.time()
        for dt in OPINFO_DTYPES:
            if dt in supported:
                run_samples(info, oname, dt, False, mode)
        if (
            mode.reached & BACKWARD_TRIGGERS
            and info.supports_autograd
            and torch.float32 in info.supported_backward_dtypes("cpu")
        ):
            run_samples(info, oname, torch.float32, True, mode)
        if time.time() - t1 > 10:
            log(f"  slow OpInfo {oname}: {time.time() - t1:.0f}s")
    log(
        f"opinfo: {len(op_db)} OpInfos in {time.time() - t0:.0f}s, {sum(len(v) for v in sel.cands.values())} candidates"
    )
    return sel.select()


def run_samples(info, oname, dt, grad, mode):
    dname = STORED_NAME[dt]
    seed = stable_seed("opinfo", oname, dname, "grad" if grad else "fwd")
    torch.manual_seed(seed)
    try:
        samples = iter(getattr(info, SAMPLE_SOURCE)("cpu", dt, requires_grad=grad))
    except Exception:  # noqa: BLE001 - no samples for this dtype: nothing to record
        return
    for idx in range(OPINFO_MAX_SAMPLES):
        try:
            s = next(samples)
        except StopIteration:
            break
        except Exception:  # noqa: BLE001 - a sample generator that fails ends that op × dtype
            break
        mode.prov = {"opinfo": oname, "sample": idx, "seed": seed, "requires_grad": grad}
        try:
            with mode:
                out = info(s.input, *s.args, **s.kwargs)
                if grad:
                    out = s.output_process_fn_grad(out)
                    outs = [t for t in _flatten(out) if isinstance(t, torch.Tensor) and t.requires_grad]
                    if outs:
                        mode.paused = True
                        grads = [torch.randn_like(t) for t in outs]
                        mode.paused = False
                        torch.autograd.backward(outs, grads)
        except Exception:  # noqa: BLE001 - a sample PyTorch refuses records nothing
            pass
        finally:
            mode.paused = False


def _flatten(x):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _flatten(y)
    else:
        yield x


# --------------------------------------------------------------------------------------------
# Sources 2 and 3: the hand-written and stress table
# --------------------------------------------------------------------------------------------
# Lazy input specs: materialised after torch.manual_seed(case seed), so every case is
# reproducible on its own and independent of the table around it.


@dataclass(frozen=True)
class T:
    """A random tensor. Floats: uniform in [lo, hi) computed in f32 then rounded to the dtype.
    Ints: uniform integers in [lo, hi). Bool: fair coin. layout: '' contiguous, 't' transposed
    view of the last two dims, 's' every other element of the last dim, 'o' storage offset 3.
    nz: no zeros (divisors). zeros: fraction of elements forced to 0. grid: round floats to
    multiples of 0.5 (so comparisons see equal values). perm: distinct values (no sort ties)."""

    shape: tuple
    dtype: str = "f32"
    lo: float = None
    hi: float = None
    layout: str = ""
    nz: bool = False
    zeros: float = 0.0
    grid: bool = False
    perm: bool = False

    def make(self):
        shape = tuple(self.shape)
        base = shape
        if self.layout == "t" and len(shape) >= 2:
            base = shape[:-2] + (shape[-1], shape[-2])
        elif self.layout == "s" and len(shape) >= 1:
            base = shape[:-1] + (2 * shape[-1],)
        x = self._values(base)
        if self.layout == "t" and len(shape) >= 2:
            x = x.transpose(-1, -2)
        elif self.layout == "s" and len(shape) >= 1:
            x = x[..., ::2]
        elif self.layout == "o":
            flat = torch.cat([self._values((3,)).reshape(-1), x.reshape(-1)])
            x = flat[3:].view(shape)
        return x

    def _values(self, shape):
        dt = DT[self.dtype]
        n = math.prod(shape)
        if self.perm:
            v = torch.randperm(n).reshape(shape).to(torch.float32)
            v = v - n // 2
            return v.to(dt)
        if dt == torch.bool:
            v = torch.rand(shape) < 0.5
        elif dt.is_floating_point:
            lo = -4.0 if self.lo is None else self.lo
            hi = 4.0 if self.hi is None else self.hi
            v = torch.rand(shape) * (hi - lo) + lo
            if self.grid:
                v = torch.round(v * 2) / 2
            if self.nz:
                v = torch.where(v == 0, torch.ones_like(v), v)
            v = v.to(dt)
        else:
            info = torch.iinfo(dt)
            lo = (0 if info.min == 0 else -20) if self.lo is None else int(self.lo)
            hi = 20 if self.hi is None else int(self.hi)
            v = torch.randint(lo, hi, shape, dtype=torch.int64)
            if self.nz:
                v = torch.where(v == 0, torch.ones_like(v), v)
            v = v.to(dt)
        if self.zeros:
            v = torch.where(torch.rand(shape) < self.zeros, torch.zeros_like(v), v)
        return v


@dataclass(frozen=True)
class V:
    """Explicit values (floats go through f32 first, so f8 targets round from f32)."""

    values: tuple
    dtype: str = "f32"
    shape: tuple = None

    def make(self):
        dt = DT[self.dtype]
        if dt.is_floating_point:
            v = torch.tensor([float(x) for x in self.values], dtype=torch.float64)
            v = v.to(torch.float32).to(dt) if dt in (torch.float8_e4m3fn, torch.float8_e5m2) else v.to(dt)
        elif dt == torch.bool:
            v = torch.tensor([bool(x) for x in self.values])
        else:
            v = torch.tensor([int(x) for x in self.values], dtype=torch.int64).to(dt)
        return v.reshape(self.shape) if self.shape is not None else v


def edge_values(dtype, kind="all"):
    """Values at dtype limits and IEEE specials. kind: 'all', 'finite' (no inf/nan),
    'divisor' (ints: no 0 and no -1, which trap in integer division), 'sort' (distinct: no
    -0.0 next to 0.0, one NaN)."""
    dt = DT[dtype]
    if dt == torch.bool:
        return (False, True)
    if dt.is_floating_point:
        fi = torch.finfo(dt)
        sub = fi.smallest_normal * fi.eps
        vals = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -1.5,
            2.0,
            3.75,
            -100.0,
            1e-3,
            fi.max,
            -fi.max,
            fi.smallest_normal,
            -fi.smallest_normal,
            sub,
            -sub,
            math.inf,
            -math.inf,
            math.nan,
        ]
        if kind == "finite":
            vals = [v for v in vals if math.isfinite(v)]
        if kind == "sort":
            vals = [v for v in vals if not (v == 0 and math.copysign(1, v) < 0)]
        return tuple(vals)
    ii = torch.iinfo(dt)
    vals = [0, 1, -1, 2, -2, 7, -7, 100, -100, ii.max, ii.min, ii.max - 1, ii.min + 1]
    if ii.min == 0:
        vals = [v for v in vals if v >= 0]
    if kind == "divisor":
        vals = [v for v in vals if v not in (0, -1)]
    return tuple(vals)


def EDGE(dtype, shape=None, kind="all"):
    vals = edge_values(dtype, kind)
    if shape == "col":
        shape = (len(vals), 1)
    elif shape == "row":
        shape = (1, len(vals))
    return V(vals, dtype, shape)


@dataclass
class HandCase:
    op: str
    source: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    build: object = None  # callable -> (args, kwargs), for inputs derived from other ops
    prov: dict = None  # extra provenance keys (model call forms: models and node)


def materialize(x):
    if isinstance(x, (T, V)):
        return x.make()
    if isinstance(x, dict):
        return {k: materialize(v) for k, v in x.items()}
    if isinstance(x, list):
        return [materialize(y) for y in x]
    if isinstance(x, tuple):
        return tuple(materialize(y) for y in x)
    return x


TABLE = []


def C(op, *args, _src="hand", **kwargs):
    """One hand/stress case: `op(*args, **kwargs)` with lazy T/V specs."""
    assert op in CORE_SET, op
    TABLE.append(HandCase(op, _src, args, kwargs, None))


def B(op, builder, *params, _src="hand"):
    """A case whose inputs come from a builder (e.g. saved statistics of a forward op)."""
    assert op in CORE_SET, op
    TABLE.append(HandCase(op, _src, (), {}, functools.partial(builder, *params)))


def S(op, *args, **kwargs):
    C(op, *args, _src="stress", **kwargs)


# Shapes for a tiled backend: 128 SBUF partitions, 512-wide (f32) PSUM banks.
P_ROWS = (129, 33)  # crosses the 128-partition tile
P_COLS = (2, 513)  # crosses one 512-wide bank
P_LONG = (1000,)  # non-multiple 1-d
P_EMPTY = (0, 3)
P_SCALAR = ()
BIG = (129, 513)  # both at once (kept to a few cases: 265 KB per f32 tensor)


# ---- unary and activations --------------------------------------------------------------
UNARY_DOMAIN = {
    "acos": (-1, 1),
    "asin": (-1, 1),
    "atanh": (-0.95, 0.95),
    "acosh": (1, 6),
    "log": (0.05, 8),
    "log10": (0.05, 8),
    "log2": (0.05, 8),
    "log1p": (-0.9, 8),
    "sqrt": (0, 9),
    "rsqrt": (0.05, 9),
    "exp": (-8, 8),
    "expm1": (-5, 5),
    "cosh": (-5, 5),
    "sinh": (-5, 5),
    "tan": (-1.4, 1.4),
    "reciprocal": (0.1, 4),
}
FLOAT_UNARY = [op for op in CORE_GROUPS["unary"] if op not in ("bitwise_not", "logical_not")]
INT_EXACT_UNARY = ["abs", "neg", "sign", "ceil", "floor", "round", "trunc", "isnan", "isinf"]


def unary_cases():
    # OpInfo already sweeps every dtype with small samples; the table adds layouts, tiles,
    # empty/0-d tensors and the special values of every float dtype.
    for op in FLOAT_UNARY:
        lo, hi = UNARY_DOMAIN.get(op, (-4, 4))
        C(op, T((3, 4), "f32", lo, hi, layout="t"))
        C(op, T((2, 3, 4), "f16", lo, hi, layout="s"))
        if op not in INT_EXACT_UNARY:
            C(op, T((6,), "i32", max(lo, -20), min(hi, 20) + 1))  # promotes to f32
        S(op, T(P_ROWS, "f32", lo, hi))
        S(op, T(P_COLS, "bf16", lo, hi))
        S(op, T(P_EMPTY, "f32"))
        for dt in F:
            S(op, EDGE(dt))
        if op in INT_EXACT_UNARY:
            S(op, EDGE("i32"))
    for op in ("bitwise_not", "logical_not"):
        for dt in ("u8", "i8"):
            C(op, T((4, 5), dt))
        C(op, T((3, 4), "i32", layout="t"))
        for dt in I + ("bool",):
            S(op, EDGE(dt))
        S(op, T(P_ROWS, "i64"))
        S(op, T(P_COLS, "bool"))
        S(op, T(P_EMPTY, "i32"))
        S(op, T(P_SCALAR, "bool"))
    for dt in F:
        S("logical_not", EDGE(dt))


ACT_ARGS = {  # extra positional args / kwargs beyond the defaults
    "relu": [((), {})],
    "gelu": [((), {}), ((), {"approximate": "tanh"})],
    "sigmoid": [((), {})],
    "hardtanh": [((), {}), ((-0.5, 2.0), {})],
    "leaky_relu": [((), {}), ((0.2,), {})],
    "elu": [((), {}), ((0.5, 2.0, 1.5), {})],
}


def activation_cases():
    for op, variants in ACT_ARGS.items():
        for k, (extra, kw) in enumerate(variants):
            for dt in F if k == 0 else ("f32", "bf16"):
                C(op, T((4, 5), dt), *extra, **kw)
            C(op, T((3, 4), "f32", layout="t"), *extra, **kw)
            S(op, T(P_ROWS, "f32", -8, 8), *extra, **kw)
            S(op, T(P_COLS, "bf16", -8, 8), *extra, **kw)
            for dt in F if k == 0 else ("f32",):
                S(op, EDGE(dt), *extra, **kw)
        S(op, T(P_EMPTY, "f32"))
        S(op, T(P_SCALAR, "f32"))
    for dt in I:
        C("relu", T((6,), dt))
        C("hardtanh", T((6,), dt), -3, 5)
        S("relu", EDGE(dt))


# ---- binary: the first family gets the richest coverage ---------------------------------
FIRST_TENSOR = ["add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor"]
FIRST_SCALAR = ["add.Scalar", "sub.Scalar", "mul.Scalar", "div.Scalar"]
MIXED_PAIRS = [
    ("i32", "f32"),
    ("f32", "i64"),
    ("bf16", "f32"),
    ("f16", "bf16"),
    ("f16", "f32"),
    ("i32", "i64"),
    ("bool", "i32"),
    ("bool", "f16"),
    ("i64", "bf16"),
    ("u8", "i8"),
    ("i16", "i32"),
    ("bool", "bf16"),
]
ZERO_D_PAIRS = [
    ("bf16", "f32"),
    ("i32", "f32"),
    ("i32", "i64"),
    ("f16", "i64"),
    ("bool", "i32"),
    ("f32", "bf16"),
    ("i64", "bool"),
]


def alpha_for(dt):
    return {"bool": True, "i32": 3, "i64": -2}.get(dt, 0.5)


def first_family_cases():
    for op in FIRST_TENSOR:
        has_alpha = op.startswith(("add", "sub"))
        # torch rejects `-` on bool tensors, so sub.* has no bool cases
        dts = [d for d in ALL if not (op.startswith("sub") and d == "bool")]
        pairs = [p for p in MIXED_PAIRS if not (op.startswith("sub") and "bool" in p)]
        zpairs = [p for p in ZERO_D_PAIRS if not (op.startswith("sub") and "bool" in p)]
        for dt in dts:
            C(op, T((4, 5), dt), T((4, 5), dt))
            C(op, T((2, 3, 4), dt), T((3, 1), dt))  # broadcasting
            C(op, T((3, 4), dt), T((), dt))  # 0-d other
            if dt in ("f32", "bf16", "i32"):
                C(op, T((), dt), T((3, 4), dt))  # 0-d self
                C(op, T((3, 4), dt, layout="t"), T((3, 4), dt, layout="s"))  # non-contiguous
            if has_alpha:
                C(op, T((4, 5), dt), T((4, 5), dt), alpha=alpha_for(dt))
        C(op, T((1, 4), "f32"), T((3, 1), "f32"))  # both sides broadcast
        C(op, T((), "f32"), T((), "f32"))
        for a, b in pairs:  # type promotion
            C(op, T((3, 4), a), T((4,), b))
        for a, b in zpairs:  # a 0-d tensor only
            C(op, T((3, 4), a), T((), b))  # promotes across
        if has_alpha:  # categories
            C(op, T((3, 4), "i32"), T((3, 4), "f32"), alpha=2)
            C(op, T((3, 4), "bf16"), T((3, 4), "bf16"), alpha=-1.5)
            C(op, T((3, 4), "f32"), T((3, 4), "f32"), alpha=0)
        if op == "div.Tensor":
            for dt in I:
                C(op, T((3, 4), dt), T((3, 4), dt, nz=True))  # int / int -> float
        # stress: tiles, bank boundaries, broadcast across both, empty, limits and specials
        for dt in dts:
            S(op, T(P_ROWS, dt), T(P_ROWS, dt))
            S(op, EDGE(dt, "col"), EDGE(dt, "row"))  # every pair of specials
            S(op, T(P_EMPTY, dt), T((1, 3), dt))
        S(op, T(P_COLS, "f32"), T(P_COLS, "f32"))
        S(op, T(P_COLS, "bf16"), T((1, 513), "bf16"))
        S(op, T(P_LONG, "f16"), T((), "f16"))
        S(op, T((128, 40), "f32"), T((128, 40), "f32"))  # exactly one tile
        S(op, T((130, 2), "f32", layout="t"), T((2,), "f32"))
        S(op, T((129, 1), "bf16"), T((1, 513), "bf16"))  # broadcast both ways
        S(op, EDGE("i32", "col"), EDGE("f32", "row"))
        S(op, EDGE("bf16", "col"), EDGE("f16", "row"))
        if has_alpha:
            S(op, EDGE("f32", "col"), EDGE("f32", "row"), alpha=-0.5)
            S(op, EDGE("i32", "col"), EDGE("i32", "row"), alpha=3)
    S("add.Tensor", T(BIG, "f32"), T((513,), "f32"))  # both tile dims at once
    S("mul.Tensor", T(BIG, "bf16"), T((129, 1), "bf16"))

    for op in FIRST_SCALAR:
        has_alpha = op.startswith(("add", "sub"))
        dts = [d for d in ALL if not (op.startswith("sub") and d == "bool")]
        for dt in dts:
            C(op, T((4, 5), dt), 2)
            C(op, T((4, 5), dt), 2.5)  # int tensor -> float
            if dt in ("f32", "bf16", "i32"):
                C(op, T((), dt), -3)
            C(op, T((3, 4), dt, layout="t"), 1 if op.startswith("sub") else True)
            if has_alpha and dt != "bool":
                C(op, T((4, 5), dt), 3, alpha_for(dt))
        if has_alpha and op.startswith("add"):
            C(op, T((4, 5), "bool"), True, True)
        for dt in F:
            S(op, EDGE(dt), 0.0)
            S(op, EDGE(dt), math.nan)
            S(op, EDGE(dt), -math.inf)
            S(op, T(P_ROWS, dt), 1.5)
        S(op, EDGE("f32"), -0.0)
        S(op, EDGE("f16"), 1e30)  # rounds to inf
        for dt in I:
            S(op, EDGE(dt), 1)  # wraps at the limits
            S(op, EDGE(dt), -3)
            S(op, EDGE(dt), 0.5)
            S(op, T(P_ROWS, dt), 7)
        if not op.startswith("sub"):
            S(op, EDGE("bool"), True)
            S(op, EDGE("bool"), 2)
        S(op, T(P_EMPTY, "f32"), 2.0)
        S(op, T(P_COLS, "f32"), 3)
        if has_alpha:
            S(op, EDGE("f32"), 2.0, -0.5)
            S(op, EDGE("i64"), 5, 3)


def other_binary_cases():
    for mode in ("trunc", "floor", None):
        for dt in FI:
            C("div.Tensor_mode", T((4, 5), dt), T((4, 5), dt, nz=True), rounding_mode=mode)
        for dt in ("f32", "bf16", "i32"):
            C("div.Scalar_mode", T((4, 5), dt), 3, rounding_mode=mode)
        C("div.Scalar_mode", T((4, 5), "f32"), -2.5, rounding_mode=mode)
        C("div.Tensor_mode", T((2, 3, 4), "f32"), T((4,), "i32", nz=True), rounding_mode=mode)
        C("div.Tensor_mode", T((3, 4), "i32"), T((), "i64", 1, 5), rounding_mode=mode)
        S("div.Tensor_mode", EDGE("f32", "col"), EDGE("f32", "row"), rounding_mode=mode)
        S("div.Tensor_mode", EDGE("i32", "col"), EDGE("i32", "row", "divisor"), rounding_mode=mode)
        S("div.Tensor_mode", T(P_ROWS, "bf16"), T(P_ROWS, "bf16", nz=True), rounding_mode=mode)
        S("div.Scalar_mode", EDGE("f32"), 0.0, rounding_mode=mode)
        S("div.Scalar_mode", EDGE("f16"), -3, rounding_mode=mode)
        S("div.Scalar_mode", EDGE("i64"), 7, rounding_mode=mode)
    S("div.Tensor_mode", EDGE("i64", "col"), EDGE("i64", "row", "divisor"), rounding_mode="floor")

    for dt in F:
        C("pow.Tensor_Tensor", T((4, 5), dt, 0.1, 3), T((4, 5), dt, -2, 3))
        C("pow.Tensor_Scalar", T((4, 5), dt, 0.1, 3), 0.5)
        C("pow.Tensor_Scalar", T((4, 5), dt), -1)
        C("pow.Scalar", 2.0, T((4, 5), dt))
        S("pow.Tensor_Tensor", EDGE(dt, "col"), EDGE(dt, "row"))
        S("pow.Tensor_Scalar", EDGE(dt), 0.5)
        S("pow.Tensor_Scalar", EDGE(dt), 2)
        S("pow.Scalar", 2.0, EDGE(dt))
    C("pow.Tensor_Tensor", T((4, 5), "f32", -3, 3), T((5,), "f32", grid=True))  # neg base
    C("pow.Tensor_Scalar", T((4, 5), "f32"), 3.0)
    C("pow.Tensor_Scalar", T((4, 5), "f32"), 0)
    C("pow.Scalar", -1.5, T((4, 5), "f32", grid=True))
    C("pow.Scalar", 0.0, T((4, 5), "f32", grid=True))
    S("pow.Tensor_Scalar", EDGE("f32"), -2.0)
    S("pow.Scalar", -0.0, EDGE("f32"))
    S("pow.Scalar", math.inf, EDGE("f32"))
    for dt in I:
        C("pow.Tensor_Tensor", T((4, 5), dt, -5, 6), T((4, 5), dt, 0, 5))
        C("pow.Tensor_Scalar", T((4, 5), dt, -5, 6), 3)
        C("pow.Tensor_Scalar", T((4, 5), dt, -5, 6), 0.5)
        C("pow.Scalar", 2, T((4, 5), dt, 0, 20))
        C("pow.Scalar", 2.5, T((4, 5), dt, -3, 6))
        S("pow.Tensor_Scalar", EDGE(dt), 2)  # wraps
    C("pow.Tensor_Tensor", T((3, 4), "f32", 0.1, 3), T((3, 4), "i32", -2, 4))
    C("pow.Tensor_Tensor", T((3, 4), "i64", 1, 5), T((), "f32", 0, 2))
    S("pow.Tensor_Tensor", T(P_ROWS, "f32", 0.1, 2), T(P_ROWS, "f32", -2, 2))
    S("pow.Tensor_Scalar", T(P_COLS, "bf16", 0, 2), 1.5)

    for dt in F + I:
        C("atan2", T((4, 5), dt), T((4, 5), dt))
    C("atan2", T((2, 3, 4), "f32"), T((4,), "bf16"))
    C("atan2", T((3, 4), "f32", layout="t"), T((), "f32"))
    S("atan2", EDGE("f32", "col"), EDGE("f32", "row"))
    S("atan2", EDGE("bf16", "col"), EDGE("bf16", "row"))
    S("atan2", T(P_ROWS, "f32"), T(P_ROWS, "f32"))
    # atan2.out: `out` is an input tensor whose contents are overwritten (resized if empty)
    for dt in F:
        C("atan2.out", T((4, 5), dt), T((4, 5), dt), out=T((4, 5), dt))
    C("atan2.out", T((4, 5), "f32"), T((5,), "f32"), out=T((0,), "f32"))
    C("atan2.out", T((3, 4), "bf16"), T((3, 4), "bf16"), out=T((3, 4), "f32"))
    C("atan2.out", T((3, 4), "i32"), T((3, 4), "i32"), out=T((3, 4), "f32"))
    C("atan2.out", T((3, 4), "f32"), T((3, 4), "f32"), out=T((3, 4), "f32", layout="t"))
    S("atan2.out", EDGE("f32", "col"), EDGE("f32", "row"), out=T((19, 19), "f32"))
    S("atan2.out", T(P_COLS, "f32"), T(P_COLS, "f32"), out=T(P_COLS, "f32"))

    for base in ("fmod", "remainder"):
        for dt in F:
            C(f"{base}.Tensor", T((4, 5), dt, -10, 10), T((5,), dt, -3, 3, nz=True))
            C(f"{base}.Scalar", T((4, 5), dt, -10, 10), -2.5)
            S(f"{base}.Tensor", EDGE(dt, "col"), EDGE(dt, "row"))
            S(f"{base}.Scalar", EDGE(dt), 1.5)
        S(f"{base}.Scalar", EDGE("f32"), 0.0)
        for dt in I:
            C(f"{base}.Tensor", T((4, 5), dt, -50, 50), T((4, 5), dt, -7, 8, nz=True))
            C(f"{base}.Scalar", T((4, 5), dt, -50, 50), -3)
            S(f"{base}.Tensor", EDGE(dt, "col"), EDGE(dt, "row", "divisor"))
            S(f"{base}.Scalar", EDGE(dt), 5)
        C(f"{base}.Scalar", T((4, 5), "i32", -50, 50), 2.5)
        C(f"{base}.Tensor", T((3, 4), "i32", -9, 9), T((3, 4), "f32", nz=True))
        S(f"{base}.Tensor", T(P_ROWS, "f32", -100, 100), T(P_ROWS, "f32", -5, 5, nz=True))

    for op in ("maximum", "minimum"):
        for dt in ALL:
            S(op, EDGE(dt, "col"), EDGE(dt, "row"))
        C(op, T((2, 3, 4), "f32"), T((4,), "f32"))
        C(op, T((3, 4), "i32"), T((3, 4), "bf16"))
        C(op, T((3, 4), "f32", layout="t"), T((), "f32"))
        S(op, T(P_ROWS, "f32"), T(P_ROWS, "f32"))
        S(op, T((129, 1), "bf16"), T((1, 513), "bf16"))

    for base in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        for dt in ("u8", "i8", "i16"):
            C(f"{base}.Tensor", T((4, 5), dt), T((4, 5), dt))
        C(f"{base}.Tensor", T((3, 4), "i32"), T((4,), "i64"))
        C(f"{base}.Tensor", T((3, 4), "bool"), T((3, 4), "i32"))
        C(f"{base}.Tensor", T((3, 4), "i64", layout="t"), T((), "i64"))
        for dt in I:
            C(f"{base}.Scalar", T((4, 5), dt), 6)
            C(f"{base}.Scalar", T((4, 5), dt), -1)
            S(f"{base}.Tensor", EDGE(dt, "col"), EDGE(dt, "row"))
            S(f"{base}.Scalar", EDGE(dt), 0x55)
        S(f"{base}.Tensor", T(P_ROWS, "i32", -1000, 1000), T(P_ROWS, "i32", -1000, 1000))
        C(f"{base}.Scalar", T((4, 5), "bool"), True)
        C(f"{base}.Scalar", T((4, 5), "u8"), 0x0F)
        S(f"{base}.Tensor", EDGE("bool", "col"), EDGE("bool", "row"))

    for op in ("logical_and", "logical_or", "logical_xor"):
        for dt in ALL:
            S(op, EDGE(dt, "col"), EDGE(dt, "row"))
        C(op, T((3, 4), "f32", zeros=0.4), T((4,), "i32", zeros=0.4))
        C(op, T((3, 4), "bool", layout="t"), T((), "bool"))
        S(op, T(P_ROWS, "bool"), T(P_ROWS, "bool"))

    for dt in FI:
        lo, hi = (-0.5, 0.5) if dt in F else (-3, 5)
        C("clamp", T((4, 5), dt), lo, hi)
        C("clamp", T((4, 5), dt), None, hi)
        C("clamp.Tensor", T((4, 5), dt), T((4, 5), dt, -4, 0), T((4, 5), dt, 0, 4))
        S("clamp", EDGE(dt), -1, 2)
        S("clamp.Tensor", EDGE(dt, "col"), EDGE(dt, "row"), T((), dt, 0, 3))
    C("clamp", T((4, 5), "f32"), -0.5)
    C("clamp", T((4, 5), "f32"), 1.0, -1.0)  # min > max -> max
    C("clamp", T((3, 4), "i32"), 0.5, 2.5)  # float bounds, int in
    C("clamp", T((3, 4), "f32", layout="t"), -1, 1)
    C("clamp.Tensor", T((4, 5), "f32"), None, T((5,), "f32"))
    C("clamp.Tensor", T((4, 5), "bf16"), T((4, 1), "bf16"), None)
    C("clamp.Tensor", T((3, 4), "i32"), T((3, 4), "f32"), None)
    S("clamp", EDGE("f32"), math.nan, None)
    S("clamp", EDGE("f32"), -math.inf, 0.0)
    S("clamp", T(P_ROWS, "f32"), -1.0, 1.0)
    S("clamp", T(P_COLS, "bf16"), -1.0, 1.0)
    S("clamp.Tensor", T(P_ROWS, "f32"), T((1, 33), "f32", -4, 0), T((129, 1), "f32", 0, 4))

    for dt in ALL:
        C("where.self", T((4, 5), "bool"), T((4, 5), dt), T((4, 5), dt))
    C("where.self", T((3, 1), "bool"), T((1, 4), "f32"), T((3, 4), "f32"))
    C("where.self", T((3, 4), "bool"), T((3, 4), "f32"), T((), "f32"))
    C("where.self", T((3, 4), "bool"), T((3, 4), "i64"), T((3, 4), "f32"))
    C("where.self", T((3, 4), "bool"), T((3, 4), "bf16"), T((), "f32"))
    C("where.self", T((3, 4), "bool", layout="t"), T((3, 4), "f16", layout="s"), T((4,), "f16"))
    C("where.self", T((), "bool"), T((3,), "i32"), T((3,), "i32"))
    S("where.self", T(P_ROWS, "bool"), T(P_ROWS, "f32"), T(P_ROWS, "f32"))
    S("where.self", T((129, 1), "bool"), T((1, 513), "bf16"), T((), "bf16"))
    S("where.self", V((True, False) * 9 + (True,), "bool"), EDGE("f32"), T((19,), "f32"))
    S("where.self", T(P_EMPTY, "bool"), T(P_EMPTY, "f32"), T(P_EMPTY, "f32"))


def comparison_cases():
    for base in ("eq", "ne", "ge", "gt", "le", "lt"):
        for dt in F + ("i32", "bool"):
            S(f"{base}.Tensor", EDGE(dt, "col"), EDGE(dt, "row"))
        for dt in F:
            C(f"{base}.Scalar", T((4, 5), dt, -2, 2, grid=True), 0.5)
            S(f"{base}.Scalar", EDGE(dt), math.nan)
        S(f"{base}.Scalar", EDGE("f32"), -0.0)
        C(f"{base}.Tensor", T((3, 4), "i32", -2, 3), T((4,), "f32", -2, 2, grid=True))
        C(f"{base}.Tensor", T((3, 4), "bf16", grid=True), T((3, 4), "f32", grid=True))
        C(f"{base}.Tensor", T((3, 4), "f32", layout="t", grid=True), T((), "f32", grid=True))
        C(f"{base}.Tensor", T((3, 4), "i64", -2, 3), T((), "i32", -2, 3))
        C(f"{base}.Scalar", T((3, 4), "bool"), True)
        C(f"{base}.Scalar", T((3, 4), "i32", -2, 3), 1.5)
        C(f"{base}.Scalar", T((3, 4), "i64", -2, 3), 0)
        S(f"{base}.Scalar", EDGE("f32"), -math.inf)
        S(f"{base}.Scalar", EDGE("i64"), 2**40)
        S(f"{base}.Scalar", EDGE("i32"), 0.5)
        S(f"{base}.Tensor", T(P_ROWS, "f32", grid=True), T(P_ROWS, "f32", grid=True))
        S(f"{base}.Tensor", T((129, 1), "bf16", grid=True), T((1, 513), "bf16", grid=True))
        S(f"{base}.Tensor", T(P_EMPTY, "f32"), T((3,), "f32"))


# ---- reductions ---------------------------------------------------------------------------
L64K = (65537,)  # a reduction over more than 64K elements


def reduction_cases():
    X3 = (3, 4, 5)
    for op in ("amax", "amin"):
        C(op, T(X3, "f32"), [0, 2], True)
        C(op, T(X3, "f32"), [])
        C(op, T((4, 5), "f32", layout="t"), [-1])
        C(op, T((), "f32"), [])
        S(op, T(P_ROWS, "f32"), [0])
        S(op, T(P_COLS, "f32"), [1])
        S(op, EDGE("f32"), [0])
        S(op, EDGE("f32", "col", "finite"), [0])
        S(op, EDGE("bf16"), [0])
        S(op, EDGE("i64"), [0])
        S(op, T((0, 5), "f32"), [1])
    S("amax", T(BIG, "bf16"), [1])
    S("amin", T(L64K, "bf16"), [0])
    for dt in ALL:
        C("any.dims", T(X3, dt, zeros=0.8), [0, 2])
    C("any", T((4, 5), "f32", zeros=1.0))
    C("any.dim", T(X3, "bool", zeros=0.8), -1, True)
    C("any.dims", T(X3, "bool", zeros=0.8), None)
    C("any.dims", T(X3, "bool", zeros=0.8), [1], True)
    C("any.dims", T(X3, "bool", zeros=0.8), [])
    S("any", T(L64K, "bool", zeros=1.0))
    S("any", EDGE("f32"))
    S("any", V((math.nan,), "f32"))
    S("any", V((-0.0, 0.0), "bf16"))
    S("any.dim", T((129, 40), "bool", zeros=0.99), 0)
    S("any.dim", T((0, 4), "bool"), 0)
    S("any.dims", T((3, 600), "f32", zeros=0.999), [1])
    for op in ("argmax", "argmin"):
        for dt in FI:
            C(op, T(X3, dt, perm=True), 1)
        C(op, T(X3, "f32", perm=True))
        C(op, T(X3, "f32", perm=True), 0, True)
        C(op, T((4, 5), "f32", layout="t", perm=True), -1)
        S(op, T(L64K, "f32"))
        S(op, T(P_ROWS, "f32"), 0)
        S(op, T(P_COLS, "bf16"), 1)
        S(op, EDGE("f32"))  # NaN wins
        S(op, EDGE("f32", kind="finite"))
        S(op, EDGE("i32"))
    for op in ("max.dim", "min.dim"):
        for dt in FI + ("bool",):
            C(op, T(X3, dt, perm=dt != "bool"), 1)
        C(op, T(X3, "f32", perm=True), 0, True)
        C(op, T((4, 5), "f32", layout="t", perm=True), -1)
        S(op, T(P_ROWS, "f32"), 0)
        S(op, T((2, 4097), "f32"), 1)
        S(op, EDGE("f32", "col"), 0)
        S(op, EDGE("i32", "col"), 0)
    for dt in F:
        C("mean.dim", T(X3, dt), [0, 2], True)
    C("mean", T((4, 5), "bf16"), dtype=torch.float32)
    C("mean", T((), "f32"))
    C("mean.dim", T(X3, "f32"), None)
    C("mean.dim", T(X3, "f16"), [-1], False, dtype=torch.float32)
    C("mean.dim", T((4, 5), "f32", layout="t"), [0])
    S("mean", T(L64K, "f32"))
    S("mean.dim", T(P_ROWS, "f32"), [0])
    S("mean.dim", T((3, 600), "f32", 1000, 1001), [1])  # large offset
    S("mean.dim", T((0, 4), "f32"), [0])  # -> NaN
    S("mean.dim", EDGE("f32", "col"), [0])
    S("mean", V((math.inf, -math.inf), "f32"))
    for dt in FI + ("bool",):
        C("prod.dim_int", T(X3, dt, 0.5, 1.5) if dt in F else T(X3, dt, -3, 4), 1)
    C("prod", T((3, 4), "i32", -3, 4), dtype=torch.int64)
    C("prod.dim_int", T(X3, "f32"), 0, True)
    C("prod.dim_int", T(X3, "bf16", 0.5, 1.5), -1, False, dtype=torch.float32)
    S("prod", T((1000,), "f32", 0.99, 1.01))
    S("prod", EDGE("f32"))
    S("prod", EDGE("f32", kind="finite"))
    S("prod.dim_int", T(P_ROWS, "f32", 0.9, 1.1), 0)
    S("prod.dim_int", T((0, 3), "f32"), 0)  # -> ones
    S("prod.dim_int", EDGE("i64", "col"), 0)  # wraps
    for dt in ALL:
        C("sum.dim_IntList", T(X3, dt), [0, 2], True)
    C("sum.dim_IntList", T(X3, "f32"), None)
    C("sum.dim_IntList", T(X3, "f32"), [])
    C("sum.dim_IntList", T(X3, "bf16"), [-1], dtype=torch.float32)
    C("sum.dim_IntList", T(X3, "i32"), [0], dtype=torch.int64)
    C("sum.dim_IntList", T(X3, "bool"), [2], dtype=torch.int32)
    C("sum.dim_IntList", T((4, 5), "f32", layout="t"), [0])
    C("sum.dim_IntList", T((), "f32"), [])
    S("sum.dim_IntList", T(BIG, "f32"), [0])  # across partitions
    S("sum.dim_IntList", T(BIG, "bf16"), [1])  # along the free dim
    for dt in ("f32", "bf16", "f16"):
        S("sum.dim_IntList", T(L64K, dt, -1, 1), [0])
    S("sum.dim_IntList", T(L64K, "i32"), [0])
    S("sum.dim_IntList", T(L64K, "bool"), [0])
    S("sum.dim_IntList", T((257, 40), "f32"), [0, 1])
    S("sum.dim_IntList", T((4, 129, 9), "f32"), [1])
    S("sum.dim_IntList", T((2, 1000, 3), "f32"), [1])
    S("sum.dim_IntList", T((0, 5), "f32"), [0])
    S("sum.dim_IntList", EDGE("f32", "col"), [0])
    S("sum.dim_IntList", EDGE("f32", "col", "finite"), [0])
    S("sum.dim_IntList", EDGE("i32", "col"), [0])  # wraps
    S("sum.dim_IntList", EDGE("f16", "col", "finite"), [0])  # overflows to inf
    for dt in F:
        C("var.correction", T(X3, dt), [1])
        C("var.dim", T(X3, dt), [1])
    C("var.correction", T(X3, "f32"), None)
    C("var.correction", T(X3, "f32"), [0, 2], correction=0, keepdim=True)
    C("var.correction", T(X3, "f32"), [2], correction=2)
    C("var.correction", T((4, 5), "f32", layout="t"), [0], correction=1)
    C("var.correction", T((1, 5), "f32"), [0])  # n-1 = 0 -> NaN
    C("var.dim", T(X3, "f32"), [0], False, True)
    C("var.dim", T(X3, "f32"), [0, 1], True)
    C("var.dim", T(X3, "f32"), None)
    S("var.correction", T(L64K, "f32", 1000, 1001), [0], correction=0)  # cancellation
    S("var.correction", T(P_ROWS, "f32"), [0])
    S("var.correction", T(P_COLS, "bf16"), [1])
    S("var.dim", T(P_ROWS, "f32"), [1])
    S("var.dim", EDGE("f32", "col"), [0])
    S("var.correction", T((0, 3), "f32"), [0])
    for dt in ALL:
        C("cumsum", T(X3, dt), 1)
    C("cumsum", T(X3, "bf16"), -1, dtype=torch.float32)
    C("cumsum", T(X3, "i32"), 2, dtype=torch.int64)
    C("cumsum", T((4, 5), "f32", layout="t"), 0)
    C("cumsum", T((), "f32"), 0)
    S("cumsum", T((2, 1000), "f32"), 1)
    S("cumsum", T((4097,), "f32"), 0)
    S("cumsum", T(P_ROWS, "f32"), 0)
    S("cumsum", T((3, 600), "bf16"), 1)
    S("cumsum", EDGE("f32"), 0)
    S("cumsum", EDGE("i32"), 0)
    S("cumsum", T((0, 4), "f32"), 0)


def sort_cases():
    # ties make sort/topk indices implementation-defined: values are distinct (perm=True)
    for dt in FI:
        C("sort", T((4, 6), dt, perm=True), 0)
        C("topk", T((4, 6), dt, perm=True), 2, 0, False)
    C("sort", T((4, 6), "f32", perm=True), -1, True)
    C("sort", T((2, 3, 5), "f32", perm=True, layout="t"), 1)
    C("sort", T((), "f32"))
    C("topk", T((10,), "f32", perm=True), 10)
    C("topk", T((10,), "f32", perm=True), 0)
    C("topk", T((2, 3, 7), "f32", perm=True), 1, 1, True, True)
    S("sort", T((2, 1000), "f32"), 1)
    S("sort", T((600, 3), "f32"), 0, True)
    S("sort", T((2, 513), "bf16", perm=True), 1)
    S("sort", EDGE("f32", kind="sort"))
    S("sort", EDGE("f32", kind="sort"), 0, True)
    S("sort", EDGE("i64", kind="sort"))
    S("sort", T((0, 3), "f32"), 1)
    S("topk", T((3, 1000), "f32"), 5)
    S("topk", T((4097,), "f32"), 129)
    S("topk", EDGE("f32", kind="sort"), 4)
    S("topk", EDGE("f32", kind="sort"), 4, 0, False)
    for dt in ALL:
        C("nonzero", T((2, 3, 4), dt, zeros=0.6))
    C("nonzero", T((), "f32"))
    C("nonzero", T((6,), "i32", zeros=1.0))
    C("nonzero", T((3, 4), "f32", zeros=0.5, layout="t"))
    S("nonzero", T((129, 40), "bool", zeros=0.9))
    S("nonzero", T((0, 4), "f32"))
    S("nonzero", EDGE("f32"))  # -0.0 is zero, NaN is not
    S("nonzero", T(L64K, "bf16", zeros=0.999))


# ---- matmul / conv / distance / fft -----------------------------------------------------
def matmul_cases():
    for dt in FI:
        C("mm", T((1, 7), dt), T((7, 1), dt))
        C("bmm", T((2, 3, 4), dt), T((2, 4, 5), dt))
        C("addmm", T((5,), dt), T((3, 4), dt), T((4, 5), dt))
    C("mm", T((3, 4), "f32", layout="t"), T((4, 5), "f32", layout="t"))
    C("mm", T((0, 4), "f32"), T((4, 3), "f32"))
    C("mm", T((3, 0), "f32"), T((0, 2), "f32"))  # K = 0 -> zeros
    C("bmm", T((1, 1, 1), "f32"), T((1, 1, 1), "f32"))
    C("bmm", T((3, 2, 4), "f32", layout="t"), T((3, 4, 2), "f32"))
    C("bmm", T((0, 2, 3), "f32"), T((0, 3, 2), "f32"))
    C("addmm", T((3, 5), "f32"), T((3, 4), "f32"), T((4, 5), "f32"), beta=0.5, alpha=2)
    C("addmm", T((3, 1), "bf16"), T((3, 4), "bf16"), T((4, 5), "bf16"))
    C("addmm", T((), "f32"), T((3, 4), "f32"), T((4, 5), "f32"), alpha=-1)
    C("addmm", V((math.nan,) * 5, "f32"), T((3, 4), "f32"), T((4, 5), "f32"), beta=0)  # beta=0
    C("addmm", T((5,), "i32"), T((3, 4), "i32"), T((4, 5), "i32"), beta=2, alpha=3)
    for dt in ("f32", "bf16"):
        S("mm", T((257, 64), dt), T((64, 32), dt))  # M > 128
        S("mm", T((16, 300), dt), T((300, 16), dt))  # K > 128 (accumulate)
        S("mm", T((4, 64), dt), T((64, 600), dt))  # N > 512 (two banks)
        S("bmm", T((3, 129, 65), dt), T((3, 65, 33), dt))
        S("addmm", T((513,), dt), T((33, 64), dt), T((64, 513), dt))
    S("mm", T((129, 129), "bf16"), T((129, 513), "bf16"))  # M, K, N all > tile
    S("mm", T((128, 128), "bf16"), T((128, 512), "bf16"))  # exactly one tile
    S("bmm", T((1, 16, 130), "bf16"), T((1, 130, 513), "bf16"))
    S("mm", T((33, 513), "f16"), T((513, 65), "f16"))
    S("mm", T((64, 1000), "f32", -1, 1), T((1000, 3), "f32", -1, 1))
    S("mm", EDGE("f32", "col"), EDGE("f32", "row"))  # outer product, K=1
    S("mm", V((1.0, math.inf, 0.0, math.nan), "f32", (2, 2)), T((2, 3), "f32"))
    S("mm", T((130, 129), "i32", -5, 5), T((129, 7), "i32", -5, 5))
    S("mm", T((4, 0), "bf16"), T((0, 600), "bf16"))
    S("addmm", T((129, 1), "f32"), T((129, 200), "f32"), T((200, 65), "f32"), beta=0.5, alpha=1.5)

    conv = [  # (input, weight, bias?, stride, padding, dilation, transposed, out_pad, groups)
        ((1, 3, 8, 8), (4, 3, 3, 3), True, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
        ((2, 4, 7, 9), (6, 2, 3, 2), True, [2, 1], [0, 1], [1, 2], False, [0, 0], 2),
        ((2, 4, 10), (6, 2, 3), False, [2], [1], [1], False, [0], 2),
        ((1, 2, 4, 5, 5), (3, 2, 2, 3, 3), True, [1, 1, 1], [0, 1, 1], [1, 1, 1], False, [0, 0, 0], 1),
        ((1, 4, 5, 5), (4, 2, 3, 3), True, [2, 2], [1, 1], [1, 1], True, [1, 1], 1),
        ((2, 3, 6), (3, 5, 4), False, [3], [0], [1], True, [2], 1),
        ((1, 6, 6, 6), (6, 1, 3, 3), True, [1, 1], [1, 1], [1, 1], False, [0, 0], 6),  # dw
        ((1, 5, 1, 1), (7, 5, 1, 1), True, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
    ]
    for k, (xs, ws, bias, st, pd, dl, tr, op_, g) in enumerate(conv):
        cout = ws[1] * g if tr else ws[0]
        for dt in F if k < 2 else ("f32",):
            C("convolution", T(xs, dt), T(ws, dt), T((cout,), dt) if bias else None, st, pd, dl, tr, op_, g)
        masks = ([True, True, bias], [True, False, False], [False, True, bias]) if k < 3 else ([True, True, bias],)
        for mask in masks:
            B("convolution_backward", conv_bwd, xs, ws, bias, st, pd, dl, tr, op_, g, mask, "f32")
        if k < 2:
            B("convolution_backward", conv_bwd, xs, ws, bias, st, pd, dl, tr, op_, g, [True, True, bias], "bf16")
    S(
        "convolution",
        T((1, 130, 6, 6), "f32"),
        T((16, 130, 3, 3), "f32"),
        T((16,), "f32"),
        [1, 1],
        [1, 1],
        [1, 1],
        False,
        [0, 0],
        1,
    )  # C_in > 128
    S(
        "convolution",
        T((1, 8, 12, 12), "f32"),
        T((129, 8, 3, 3), "f32"),
        None,
        [1, 1],
        [0, 0],
        [1, 1],
        False,
        [0, 0],
        1,
    )  # C_out > 128
    S(
        "convolution", T((2, 3, 520), "bf16"), T((8, 3, 5), "bf16"), T((8,), "bf16"), [1], [2], [1], False, [0], 1
    )  # width > 512
    B(
        "convolution_backward",
        conv_bwd,
        (1, 130, 6, 6),
        (16, 130, 3, 3),
        True,
        [1, 1],
        [1, 1],
        [1, 1],
        False,
        [0, 0],
        1,
        [True, True, True],
        "f32",
        _src="stress",
    )

    C("_cdist_forward", T((5, 3), "f32"), T((4, 3), "f32"), 2.0, None)
    C("_cdist_forward", T((2, 5, 3), "f32"), T((2, 4, 3), "f32"), 1.0, None)
    C("_cdist_forward", T((5, 3), "f32"), T((4, 3), "f32"), 0.0, None)
    C("_cdist_forward", T((5, 3), "f32"), T((4, 3), "f32"), math.inf, None)
    C("_cdist_forward", T((5, 3), "f32"), T((4, 3), "f32"), 3.0, 2)
    C("_cdist_forward", T((30, 40), "f32"), T((26, 40), "f32"), 2.0, 1)  # use_mm path
    S("_cdist_forward", T((129, 16), "f32"), T((513, 16), "f32"), 2.0, 2)
    S("_cdist_forward", T((129, 16), "f32"), T((65, 16), "f32"), 2.0, 1)
    C("_pdist_forward", T((5, 3), "f32"), 2.0)
    C("_pdist_forward", T((6, 4), "f32"), 1.0)
    C("_pdist_forward", T((6, 4), "f32"), 3.0)
    C("_pdist_forward", T((6, 4), "f32"), math.inf)
    C("_pdist_forward", T((6, 4), "f32"), 0.0)
    C("_pdist_forward", T((1, 4), "f32"), 2.0)
    S("_pdist_forward", T((130, 8), "f32"), 2.0)

    C("_fft_r2c", T((8,), "f32"), [0], 0, True)
    C("_fft_r2c", T((4, 6), "f32"), [1], 2, False)
    C("_fft_r2c", T((4, 6), "f32"), [0, 1], 1, True)
    C("_fft_r2c", T((2, 3, 5), "f32"), [2], 0, True)
    S("_fft_r2c", T((2, 1000), "f32"), [1], 0, True)
    S("_fft_r2c", T((129, 16), "f32"), [0, 1], 2, True)
    B("_fft_c2r", fft_c2r, (5,), [0], 0, 8)
    B("_fft_c2r", fft_c2r, (4, 4), [1], 2, 6)
    B("_fft_c2r", fft_c2r, (4, 4), [0, 1], 1, 7)
    B("_fft_c2r", fft_c2r, (2, 3, 3), [2], 0, 4)
    B("_fft_c2r", fft_c2r, (2, 501), [1], 2, 1000, _src="stress")


def conv_bwd(xs, ws, bias, st, pd, dl, tr, op_, g, mask, dt):
    x, w = T(xs, dt).make(), T(ws, dt).make()
    cout = ws[1] * g if tr else ws[0]
    b = T((cout,), dt).make() if bias else None
    y = aten.convolution(x, w, b, st, pd, dl, tr, op_, g)
    go = T(tuple(y.shape), dt).make()
    return (go, x, w, [cout] if bias else None, st, pd, dl, tr, op_, g, mask), {}


def fft_c2r(shape, dim, norm, last):
    x = torch.view_as_complex(T(tuple(shape) + (2,), "f32").make())
    return (x, dim, norm, last), {}


# ---- normalisation / softmax ------------------------------------------------------------
def norm_cases():
    for op in ("_softmax", "_log_softmax"):
        for dt in F:
            C(op, T((3, 5), dt), 1, False)
        C(op, T((2, 3, 4), "f32"), 0, False)
        C(op, T((4, 5), "f32", layout="t"), -1, False)
        C(op, T((), "f32"), 0, False)
        C(op, T((3, 0), "f32"), 1, False)
        S(op, T((129, 100), "f32", -10, 10), 1, False)
        S(op, T((4, 1000), "f32", -10, 10), 1, False)
        S(op, T((129, 40), "f16", -10, 10), 0, False)
        S(op, T((8, 600), "f32", 900, 1000), 1, False)  # needs max-subtraction
        S(
            op,
            V(
                (
                    0.0,
                    -math.inf,
                    1.0,
                    -math.inf,
                    -math.inf,
                    -math.inf,
                    -math.inf,
                    -math.inf,
                    math.inf,
                    1.0,
                    math.nan,
                    2.0,
                ),
                "f32",
                (4, 3),
            ),
            1,
            False,
        )  # masked rows, inf, nan
    S("_softmax", T((1, 65537), "bf16", -5, 5), 1, False)
    S("_softmax", T(BIG, "bf16", -10, 10), 1, False)  # rows and width
    S("_log_softmax", T((129, 600), "f16", -10, 10), 1, False)
    for dt in F:
        C("native_layer_norm", T((4, 6), dt), [6], T((6,), dt), T((6,), dt), 1e-5)
    C("native_layer_norm", T((2, 3, 4), "f32"), [3, 4], None, None, 1e-5)
    C("native_layer_norm", T((2, 3, 4), "f32"), [4], T((4,), "f32"), None, 1e-3)
    C("native_layer_norm", T((4, 6), "f32", layout="t"), [6], None, T((6,), "f32"), 1e-5)
    C("native_layer_norm", T((0, 5), "f32"), [5], T((5,), "f32"), T((5,), "f32"), 1e-5)
    C("native_layer_norm", V((3.0,) * 8, "f32", (2, 4)), [4], None, None, 1e-5)  # var 0
    S("native_layer_norm", T((129, 100), "f32"), [100], T((100,), "f32"), T((100,), "f32"), 1e-5)
    S("native_layer_norm", T((4, 1000), "f32"), [1000], T((1000,), "f32"), T((1000,), "f32"), 1e-5)
    S("native_layer_norm", T((4, 1000), "bf16"), [1000], T((1000,), "bf16"), T((1000,), "bf16"), 1e-5)
    S("native_layer_norm", T((2, 8193), "f32", 100, 101), [8193], None, None, 1e-5)
    S("native_layer_norm", T((3, 129, 7), "f16"), [129, 7], None, None, 1e-5)
    lnb = [
        ((4, 6), [6], True, [True, True, True]),
        ((2, 3, 4), [3, 4], False, [True, False, False]),
        ((2, 3, 4), [4], True, [False, True, True]),
        ((3, 5), [5], True, [True, True, False]),
    ]
    for xs, ns, aff, mask in lnb:
        for dt in F if aff and mask[0] and mask[1] else ("f32",):
            B("native_layer_norm_backward", ln_bwd, xs, ns, aff, mask, dt)
    B("native_layer_norm_backward", ln_bwd, (129, 100), [100], True, [True, True, True], "f32", _src="stress")
    B("native_layer_norm_backward", ln_bwd, (4, 1000), [1000], True, [True, True, True], "bf16", _src="stress")

    gn = [((2, 6, 4, 4), 3, True), ((2, 4, 5), 2, False), ((3, 4), 4, True), ((1, 6, 3, 3), 1, True)]
    for k, (xs, groups, aff) in enumerate(gn):
        for dt in F if k == 0 else ("f32",):
            B("native_group_norm", gn_fwd, xs, groups, aff, dt)
            B("native_group_norm_backward", gn_bwd, xs, groups, aff, [True, aff, aff], dt)
    B("native_group_norm_backward", gn_bwd, (2, 6, 4, 4), 3, True, [True, False, False], "f32")
    # An empty batch: dγ and dβ are sums over no sample, zeros that must still be written (a
    # fresh corpus found the lowering writing nothing).
    B("native_group_norm_backward", gn_bwd, (0, 4, 3), 2, True, [True, True, True], "f32")
    B("native_group_norm", gn_fwd, (2, 130, 4, 4), 13, True, "f32", _src="stress")
    B("native_group_norm", gn_fwd, (1, 8, 1000), 4, True, "bf16", _src="stress")
    B("native_group_norm_backward", gn_bwd, (2, 130, 4, 4), 13, True, [True, True, True], "f32", _src="stress")

    for dt in F:
        for training in (True, False):
            B("_native_batch_norm_legit", bn, (4, 3, 5), dt, True, True, training)
        B("_native_batch_norm_legit.no_stats", bn, (4, 3, 5), dt, True, False, True)
        B("_native_batch_norm_legit_no_training", bn, (4, 3, 5), dt, True, True, None)
    B("_native_batch_norm_legit", bn, (2, 3, 4, 4), "f32", False, True, True)
    B("_native_batch_norm_legit", bn, (5, 4), "f32", True, True, True)
    B("_native_batch_norm_legit.no_stats", bn, (2, 3, 4, 4), "f32", False, False, True)
    B("_native_batch_norm_legit_no_training", bn, (2, 3, 4, 4), "f32", False, True, None)
    B("_native_batch_norm_legit_no_training", bn, (5, 4), "bf16", True, True, None)
    B("_native_batch_norm_legit", bn, (4, 129, 9), "f32", True, True, True, _src="stress")
    B("_native_batch_norm_legit.no_stats", bn, (2, 4, 1000), "f32", True, False, True, _src="stress")
    B("_native_batch_norm_legit_no_training", bn, (4, 130, 5), "bf16", True, True, None, _src="stress")


def ln_bwd(xs, ns, aff, mask, dt):
    x = T(xs, dt).make()
    w = T(tuple(ns), dt).make() if aff else None
    b = T(tuple(ns), dt).make() if aff else None
    _, mean, rstd = aten.native_layer_norm(x, ns, w, b, 1e-5)
    go = T(xs, dt).make()
    return (go, x, ns, mean, rstd, w, b, mask), {}


def gn_fwd(xs, groups, aff, dt):
    x = T(xs, dt).make()
    n, c, hw = xs[0], xs[1], math.prod(xs[2:])
    w = T((c,), dt).make() if aff else None
    b = T((c,), dt).make() if aff else None
    return (x, w, b, n, c, hw, groups, 1e-5), {}


def gn_bwd(xs, groups, aff, mask, dt):
    (x, w, b, n, c, hw, g, eps), _ = gn_fwd(xs, groups, aff, dt)
    _, mean, rstd = aten.native_group_norm(x, w, b, n, c, hw, g, eps)
    go = T(xs, dt).make()
    return (go, x, mean, rstd, w, n, c, hw, g, mask), {}


def bn(xs, dt, aff, stats, training):
    """_native_batch_norm_legit* inputs. Weights/stats are f32 for reduced-precision inputs
    (the mixed form autocast produces). Running stats are updated in place; only the returned
    tensors are part of the case."""
    x = T(xs, dt).make()
    c = xs[1]
    w = T((c,), "f32", 0.5, 1.5).make() if aff else None
    b = T((c,), "f32").make() if aff else None
    rm, rv = T((c,), "f32").make(), T((c,), "f32", 0.5, 2).make()
    if not stats:
        return (x, w, b, training, 0.1, 1e-5), {}
    if training is None:  # _no_training
        return (x, w, b, rm, rv, 0.1, 1e-5), {}
    return (x, w, b, rm, rv, training, 0.1, 1e-5), {}


def bn_same(xs, dt, stats):
    """Training-mode batch norm with weight, bias and running stats in the input's dtype (the
    form a model converted with `.to(dtype)` runs), input values off-centre."""
    x = T(xs, dt, 2, 10).make()
    c = xs[1]
    w, b = T((c,), dt, 0.5, 1.5).make(), T((c,), dt).make()
    if not stats:
        return (x, w, b, True, 0.1, 1e-5), {}
    rm, rv = T((c,), dt).make(), T((c,), dt, 0.5, 2).make()
    return (x, w, b, rm, rv, True, 0.1, 1e-5), {}


# ---- pooling ------------------------------------------------------------------------------
def pooling_cases():
    for dt in F:
        C("avg_pool1d", T((2, 3, 10), dt), [3], [2], [1])
        C("avg_pool2d", T((1, 2, 7, 7), dt), [3, 3], [2, 2], [1, 1])
        C("adaptive_avg_pool1d", T((2, 3, 10), dt), [4])
        C("_adaptive_avg_pool2d", T((1, 3, 7, 9), dt), [3, 4])
        C("_adaptive_avg_pool3d", T((1, 2, 5, 6, 7), dt), [2, 3, 3])
        C("max_pool2d_with_indices", T((1, 2, 8, 8), dt), [2, 2])
        C("max_pool3d_with_indices", T((1, 2, 6, 6, 6), dt), [2, 2, 2])
    C("avg_pool3d", T((1, 2, 5, 6, 6), "f32"), [2, 2, 2])  # f32 only on CPU
    C("avg_pool1d", T((2, 3, 10), "f32"), [3], [2], [1], True, False)
    C("avg_pool1d", T((3, 11), "f32"), [4])  # unbatched
    C("avg_pool2d", T((1, 2, 7, 7), "f32"), [3, 2], [2, 1], [1, 0], True, False)
    C("avg_pool2d", T((2, 6, 6), "f32"), [2, 2], [2, 2], [0, 0], False, True, 3)  # divisor
    C("avg_pool3d", T((1, 2, 5, 6, 6), "f32"), [3, 3, 3], [2, 2, 2], [1, 1, 1], True, False)
    C("avg_pool3d", T((2, 4, 4, 4), "f32"), [2, 2, 2], [1, 1, 1], [0, 0, 0], False, True, 5)
    C("adaptive_avg_pool1d", T((2, 3, 10), "f32"), [1])
    C("adaptive_avg_pool1d", T((3, 7), "f32"), [10])  # upsampling
    C("_adaptive_avg_pool2d", T((1, 3, 7, 9), "f32"), [1, 1])
    C("_adaptive_avg_pool2d", T((3, 5, 5), "f32"), [7, 3])
    C("_adaptive_avg_pool3d", T((2, 4, 4, 4), "f32"), [1, 1, 1])
    C("max_pool2d_with_indices", T((1, 2, 8, 8), "f32"), [3, 3], [2, 2], [1, 1], [1, 1], True)
    C("max_pool2d_with_indices", T((1, 2, 9, 9), "f32"), [3, 3], [1, 1], [0, 0], [2, 2])
    C("max_pool2d_with_indices", T((2, 7, 7), "f32"), [2, 3], [2, 1])
    C("max_pool2d_with_indices", T((1, 2, 8, 8), "i64", perm=True), [2, 2])
    C("max_pool3d_with_indices", T((1, 2, 6, 6, 6), "f32"), [3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], True)
    C("max_pool3d_with_indices", T((2, 5, 5, 5), "f32"), [2, 2, 2], [1, 1, 1], [0, 0, 0], [2, 2, 2])
    for dt in F:
        B("avg_pool2d_backward", pool_bwd, "avg", (1, 2, 7, 7), [3, 3], [2, 2], [1, 1], False, True, None, dt)
        B("_adaptive_avg_pool2d_backward", pool_bwd, "adaptive", (1, 3, 7, 9), [3, 4], dt)
        B("max_pool2d_with_indices_backward", pool_bwd, "max", (1, 2, 8, 8), [2, 2], [2, 2], [0, 0], [1, 1], False, dt)
    B("avg_pool2d_backward", pool_bwd, "avg", (1, 2, 7, 7), [3, 2], [2, 1], [1, 0], True, False, None, "f32")
    B("avg_pool2d_backward", pool_bwd, "avg", (2, 6, 6), [2, 2], [2, 2], [0, 0], False, True, 3, "f32")
    B("_adaptive_avg_pool2d_backward", pool_bwd, "adaptive", (3, 5, 5), [7, 3], "f32")
    B("_adaptive_avg_pool2d_backward", pool_bwd, "adaptive", (1, 3, 7, 9), [1, 1], "f32")
    B("max_pool2d_with_indices_backward", pool_bwd, "max", (1, 2, 8, 8), [3, 3], [2, 2], [1, 1], [1, 1], True, "f32")
    B(
        "max_pool2d_with_indices_backward", pool_bwd, "max", (1, 2, 9, 9), [3, 3], [1, 1], [0, 0], [2, 2], False, "f32"
    )  # overlapping windows
    S("avg_pool2d", T((1, 130, 6, 6), "f32"), [3, 3], [2, 2], [1, 1])
    S("avg_pool1d", T((2, 4, 1000), "f32"), [5], [3], [2])
    S("avg_pool2d", EDGE("f32", (1, 1, 1, -1)), [1, 2], [1, 2], [0, 0], True)
    S("_adaptive_avg_pool2d", T((1, 129, 10, 10), "bf16"), [5, 3])
    S("adaptive_avg_pool1d", T((3, 2, 1000), "f32"), [7])
    S("max_pool2d_with_indices", T((1, 130, 6, 6), "f32"), [2, 2])
    S("max_pool2d_with_indices", EDGE("f32", (1, 1, 1, -1), "sort"), [1, 3], [1, 3], [0, 1])
    S("max_pool3d_with_indices", T((1, 129, 4, 4, 4), "f32"), [2, 2, 2])
    B(
        "avg_pool2d_backward",
        pool_bwd,
        "avg",
        (1, 130, 6, 6),
        [3, 3],
        [2, 2],
        [1, 1],
        False,
        True,
        None,
        "f32",
        _src="stress",
    )
    B(
        "max_pool2d_with_indices_backward",
        pool_bwd,
        "max",
        (1, 130, 6, 6),
        [2, 2],
        [2, 2],
        [0, 0],
        [1, 1],
        False,
        "f32",
        _src="stress",
    )
    B("_adaptive_avg_pool2d_backward", pool_bwd, "adaptive", (1, 129, 8, 8), [4, 4], "f32", _src="stress")


def pool_bwd(kind, xs, *params):
    *params, dt = params
    x = T(xs, dt).make()
    if kind == "avg":
        y = aten.avg_pool2d(x, *params)
        return (T(tuple(y.shape), dt).make(), x, *params), {}
    if kind == "adaptive":
        y = aten._adaptive_avg_pool2d(x, *params)
        return (T(tuple(y.shape), dt).make(), x), {}
    y, idx = aten.max_pool2d_with_indices(x, *params)
    return (T(tuple(y.shape), dt).make(), x, *params, idx), {}


# ---- padding / resampling -----------------------------------------------------------------
def pad_cases():
    for dt in ALL:
        C("constant_pad_nd", T((3, 4), dt), [1, 2])
    C("constant_pad_nd", T((3, 4), "f32"), [1, 1, 2, 0], 1.5)
    C("constant_pad_nd", T((3, 4), "f32"), [-1, 1])
    C("constant_pad_nd", T((2, 3, 4), "i32"), [0, 0, 0, 0, 1, 1], 7)
    C("constant_pad_nd", T((3, 4), "f32", layout="t"), [2, 2], -math.inf)
    C("constant_pad_nd", T((0, 4), "f32"), [1, 1, 1, 1], 2.0)
    S("constant_pad_nd", T((129, 100), "f32"), [6, 7, 0, 0])
    S("constant_pad_nd", T((2, 510), "f32"), [1, 2, 1, 0])
    S("constant_pad_nd", T((127, 5), "bf16"), [0, 0, 1, 2], math.nan)
    for dt in F:
        C("reflection_pad1d", T((2, 3, 8), dt), [2, 3])
        C("reflection_pad2d", T((1, 2, 5, 6), dt), [1, 2, 2, 1])
        C("reflection_pad3d", T((1, 2, 4, 5, 6), dt), [1, 1, 2, 2, 1, 3])
        C("replication_pad2d", T((1, 2, 5, 6), dt), [1, 2, 2, 1])
        C("replication_pad3d", T((1, 2, 4, 5, 6), dt), [1, 1, 2, 2, 1, 3])
    C("reflection_pad1d", T((3, 8), "f32"), [7, 0])
    C("reflection_pad1d", T((2, 3, 8), "i64"), [1, 1])
    C("reflection_pad2d", T((2, 5, 6), "f32"), [0, 5, 4, 0])
    C("reflection_pad3d", T((2, 3, 3, 3), "f32"), [2, 2, 2, 2, 2, 2])
    C("replication_pad2d", T((2, 5, 6), "f32"), [3, 0, 0, 4])
    C("replication_pad2d", T((1, 2, 5, 6), "f32"), [-1, 2, 0, -2])  # negative = crop
    C("replication_pad3d", T((2, 3, 3, 3), "f32"), [0, 4, 1, 1, 3, 0])
    C("replication_pad3d", T((1, 2, 4, 5, 6), "i32"), [1, 1, 1, 1, 1, 1])
    S("reflection_pad1d", T((1, 129, 100), "f32"), [3, 5])
    S("reflection_pad1d", T((1, 2, 513), "f32"), [5, 3])
    S("reflection_pad2d", T((1, 130, 6, 6), "f32"), [2, 2, 2, 2])
    S("replication_pad2d", T((1, 3, 8, 520), "bf16"), [4, 4, 1, 1])
    S("reflection_pad3d", T((1, 129, 3, 4, 4), "f32"), [1, 1, 1, 1, 1, 1])
    S("replication_pad3d", T((1, 129, 3, 4, 4), "f32"), [1, 1, 1, 1, 1, 1])
    for dt in F:
        C("upsample_bilinear2d.vec", T((1, 2, 4, 5), dt), [8, 10], False, None)
        C("upsample_nearest2d.vec", T((1, 2, 4, 5), dt), [8, 10], None)
    C("upsample_bilinear2d.vec", T((1, 2, 4, 5), "f32"), None, True, [2.0, 1.5])
    C("upsample_bilinear2d.vec", T((2, 3, 4, 5), "f32"), [3, 3], True, None)
    C("upsample_bilinear2d.vec", T((1, 2, 4, 5), "f32"), None, False, [0.5, 0.7])
    C("upsample_bilinear2d.vec", T((1, 1, 1, 1), "f32"), [3, 4], True, None)
    C("upsample_nearest2d.vec", T((1, 2, 4, 5), "f32"), None, [2.0, 3.0])
    C("upsample_nearest2d.vec", T((1, 2, 4, 5), "f32"), [3, 7], None)
    C("upsample_nearest2d.vec", T((2, 1, 5, 5), "f32"), None, [0.6, 1.7])
    C("upsample_nearest2d.vec", T((1, 2, 4, 5), "u8"), [8, 10], None)
    S("upsample_bilinear2d.vec", T((1, 129, 4, 4), "f32"), [8, 8], False, None)
    S("upsample_bilinear2d.vec", T((1, 2, 4, 130), "bf16"), [8, 520], True, None)
    S("upsample_nearest2d.vec", T((1, 130, 4, 4), "f32"), None, [2.0, 2.0])
    S("upsample_nearest2d.vec", T((1, 1, 3, 257), "f32"), [5, 513], None)
    for dt in F:
        C("grid_sampler_2d", T((1, 2, 5, 6), dt), T((1, 4, 3, 2), dt, -1.2, 1.2), 0, 0, False)
    for mode, pad, align in itertools.product((0, 1, 2), (0, 1, 2), (False, True)):
        C("grid_sampler_2d", T((2, 3, 5, 6), "f32"), T((2, 4, 3, 2), "f32", -1.3, 1.3), mode, pad, align)
    S("grid_sampler_2d", T((1, 129, 6, 6), "f32"), T((1, 5, 6, 2), "f32", -1, 1), 0, 0, False)
    S("grid_sampler_2d", T((1, 2, 16, 16), "f32"), T((1, 20, 30, 2), "f32", -1.1, 1.1), 1, 1, True)
    S(
        "grid_sampler_2d",
        T((1, 1, 4, 4), "f32"),
        V((math.nan, 0.0, math.inf, 0.0, -1.0, -1.0, 1.0, 1.0), "f32", (1, 2, 2, 2)),
        0,
        0,
        True,
    )
    for dt in F:
        C("col2im", T((1, 8, 12), dt), [4, 5], [2, 2], [1, 1], [0, 0], [1, 1])
    C("col2im", T((8, 12), "f32"), [4, 5], [2, 2], [1, 1], [0, 0], [1, 1])  # unbatched
    C("col2im", T((2, 12, 6), "f32"), [5, 6], [2, 3], [1, 1], [1, 0], [2, 2])
    C("col2im", T((1, 4, 9), "f32"), [5, 5], [2, 2], [2, 2], [0, 0], [1, 1])  # dilation
    S("col2im", T((1, 130 * 4, 16), "f32"), [5, 5], [2, 2], [1, 1], [0, 0], [1, 1])


# ---- indexing -----------------------------------------------------------------------------
def I64(*values, shape=None):
    return V(values, "i64", shape)


def indexing_cases():
    for dt in ALL:
        C("index.Tensor", T((5, 6), dt), [I64(0, 4, 2)])
        C("index_select", T((5, 6), dt), 1, I64(5, 0, 0, 3))
        C("gather", T((4, 5), dt), 1, I64(0, 4, 1, 1, 2, 3, 0, 0, 4, 4, 3, 2, shape=(4, 3)))
        C("index_put", T((5, 6), dt), [I64(4, 0, 2)], T((3, 6), dt))
        C("scatter.src", T((3, 5), dt), 1, I64(4, 0, 2, 1, 3, 0, 2, 4, 1, 3, shape=(2, 5)), T((2, 5), dt))
        C("scatter.value", T((3, 5), dt), 0, I64(2, 0, 1, 1, 2, shape=(1, 5)), True if dt == "bool" else 7)
        C("select_scatter", T((4, 5), dt), T((5,), dt), 0, 2)
        C("slice_scatter", T((6, 5), dt), T((2, 5), dt), 0, 1, 5, 2)
        C("masked_scatter", T((4, 5), dt), T((4, 5), "bool"), T((20,), dt))
    C("index.Tensor", T((5, 6), "f32"), [None, I64(-1, 2)])
    C("index.Tensor", T((5, 6), "f32"), [T((5, 6), "bool")])
    C("index.Tensor", T((5, 6), "f32"), [T((5,), "bool")])
    C("index.Tensor", T((5, 6, 3), "f32"), [I64(0, 4, shape=(2, 1)), I64(1, 2, 5, shape=(1, 3))])
    C("index.Tensor", T((5, 6, 3), "f32"), [None, I64(0, 5), None])
    C("index.Tensor", T((5, 6), "f32", layout="t"), [V((3, 1), "i32")])
    C("index.Tensor", T((5, 6), "i32"), [V((2,), "i64", ()), None])  # 0-d index
    C("index_put", T((5, 6), "f32"), [I64(1, 1, 3, 1)], T((4, 6), "f32"), True)
    C("index_put", T((5, 6), "f32"), [I64(0, 2), I64(5, 1)], T((), "f32"))
    C("index_put", T((5, 6), "f32"), [T((5, 6), "bool")], T((), "f32"))
    C("index_put", T((5, 6), "i64"), [None, I64(0, 0, 3)], T((5, 3), "i64"), True)
    C("index_put", T((5, 6), "bf16"), [I64(4, 0)], T((6,), "bf16"))  # broadcast values
    C("index_select", T((5, 6), "f32"), 0, V((4, 1, 1), "i32"))
    C("index_select", T((5,), "f32"), 0, I64())
    C("index_select", T((), "f32"), 0, I64(0))
    C("index_select", T((5, 6), "f32", layout="t"), 0, I64(3, 3))
    C("gather", T((4, 5), "f32"), 0, I64(3, 0, 1, shape=(1, 3)))
    C("gather", T((2, 3, 4), "f32"), -1, I64(0, 3, 1, 2, shape=(1, 2, 2)), sparse_grad=False)
    C("scatter.src", T((3, 5), "f32"), 0, I64(0, 1, 2, 2, 0, shape=(1, 5)), T((2, 5), "f32"))
    C("scatter.value", T((3, 5), "f32"), 1, I64(4, 0, shape=(1, 2)), -1.5)
    for dt in F + I:
        C("scatter_add", T((3, 5), dt), 1, I64(0, 0, 4, 4, 1, 1, 1, 1, shape=(2, 4)), T((2, 4), dt))
    C("scatter_add", T((5,), "f32"), 0, I64(0, 0, 0, 4, 4), T((7,), "f32"))  # src larger
    for red in ("sum", "prod", "mean", "amax", "amin"):
        for incl in (True, False):
            C(
                "scatter_reduce.two",
                T((3, 5), "f32"),
                1,
                I64(0, 0, 4, 4, 1, 0, 2, 2, shape=(2, 4)),
                T((2, 4), "f32"),
                red,
                include_self=incl,
            )
        C("scatter_reduce.two", T((6,), "i32"), 0, I64(0, 0, 5, 5, 5), T((5,), "i32"), red)
        C("scatter_reduce.two", T((6,), "bf16"), 0, I64(1, 1, 2), T((3,), "bf16"), red, include_self=False)
    C("select_scatter", T((2, 3, 4), "f32"), T((2, 4), "f32"), 1, -1)
    C("select_scatter", T((4, 5), "f32", layout="t"), T((4,), "f32"), 1, 0)
    C("slice_scatter", T((6, 5), "f32"), T((6, 2), "f32"), 1, 3, None)
    C("slice_scatter", T((6, 5), "f32"), T((6, 5), "f32"))
    C("slice_scatter", T((6, 5), "f32"), T((2, 5), "f32"), 0, -2, 100)
    C("slice_scatter", T((7, 2), "i32"), T((3, 2), "i32"), 0, None, None, 3)
    C("masked_scatter", T((4, 5), "f32"), T((5,), "bool"), T((30,), "f32"))  # broadcast mask
    C("masked_scatter", T((4, 5), "f32"), T((4, 5), "bool", zeros=1.0), T((3,), "f32"))
    C("masked_scatter", T((4, 5), "f32"), T((4, 5), "bool"), T((2, 10), "f32"))
    for dt in F:
        C("embedding", T((10, 4), dt), I64(1, 2, 4, 5, 4, 3, 2, 9, shape=(2, 4)))
    C("embedding", T((10, 4), "f32"), I64(0, 2, 0, 5), 0)
    C("embedding", T((10, 4), "f32"), V((3,), "i32", ()))
    C("embedding", T((10, 4), "i64"), I64(9, 0))
    C("embedding", T((10, 4), "f32"), I64(1, 1, 2), -1, True, False)
    for dt in F:
        C("embedding_dense_backward", T((2, 4, 3), dt), I64(1, 2, 4, 5, 4, 3, 2, 9, shape=(2, 4)), 10, -1, False)
    C("embedding_dense_backward", T((4, 3), "f32"), I64(0, 2, 0, 5), 6, 0, False)
    C("embedding_dense_backward", T((5, 3), "f32"), I64(1, 1, 2, 1, 4), 6, -1, True)
    C("embedding_dense_backward", T((2, 3), "f32"), V((3, 3), "i32"), 4, -1, False)
    for mode in (0, 1, 2):
        for dt in F:
            C("_embedding_bag", T((10, 3), dt), I64(1, 2, 4, 5, 4, 3, 2, 9), I64(0, 3, 5), False, mode)
        C(
            "_embedding_bag",
            T((10, 3), "f32"),
            I64(1, 2, 4, 5, 4, 3, 2, 9),
            I64(0, 3, 5, 8),
            False,
            mode,
            False,
            None,
            True,
        )
        C(
            "_embedding_bag", T((10, 3), "f32"), I64(1, 0, 4, 0, 4), I64(0, 2, 2), False, mode, False, None, False, 0
        )  # empty bag + padding
    C(
        "_embedding_bag", T((10, 3), "f32"), I64(1, 2, 4, 5, 4, 3), I64(0, 3), False, 0, False, T((6,), "f32")
    )  # per_sample_weights
    C("_embedding_bag", T((10, 3), "f32"), V((1, 2, 4, 5), "i32"), V((0, 2), "i32"), False, 1)
    C("_embedding_bag", T((10, 3), "f32"), I64(1, 2, 4, 5, 4, 3), I64(0, 3), True, 0)
    # stress
    S("index.Tensor", T((1000, 8), "f32"), [T((300,), "i64", 0, 1000)])
    S("index.Tensor", T((129, 513), "bf16"), [None, T((7,), "i64", -513, 513)])
    S("index.Tensor", T((129, 40), "f32"), [T((129, 40), "bool")])
    S("index_select", T((130, 300), "bf16"), 1, T((520,), "i64", 0, 300))
    S("index_select", T((1000, 4), "f32"), 0, T((129,), "i64", 0, 1000))
    S("gather", T((2, 600), "f32"), 1, T((2, 513), "i64", 0, 600))
    S("gather", T((300, 8), "f32"), 0, T((129, 8), "i64", 0, 300))
    S("index_put", T((1000, 4), "f32"), [T((600,), "i64", 0, 1000)], T((600, 4), "f32"), True)
    S("scatter_add", T((130, 16), "f32"), 0, T((600, 16), "i64", 0, 130), T((600, 16), "f32"))
    S(
        "scatter_reduce.two",
        T((130,), "f32"),
        0,
        T((1000,), "i64", 0, 130),
        T((1000,), "f32"),
        "amax",
        include_self=False,
    )
    S("scatter_reduce.two", T((129,), "f32"), 0, T((1000,), "i64", 0, 129), T((1000,), "f32"), "mean")
    S("scatter.src", T((1000,), "f32"), 0, V(tuple(range(999, -1, -7)), "i64"), T((143,), "f32"))
    S("embedding", T((300, 130), "bf16"), T((4, 129), "i64", 0, 300))
    S("embedding_dense_backward", T((600, 16), "f32"), T((600,), "i64", 0, 130), 130, -1, False)
    S("_embedding_bag", T((1000, 16), "f32"), T((600,), "i64", 0, 1000), V(tuple(range(0, 600, 5)), "i64"), False, 1)
    S("masked_scatter", T((129, 40), "f16"), T((129, 40), "bool", zeros=0.5), T((5160,), "f16"))
    S("slice_scatter", T((2, 520), "f32"), T((2, 171), "f32"), 1, 7, 520, 3)
    S("slice_scatter", T((300, 4), "bf16"), T((129, 4), "bf16"), 0, 1, 259, 2)
    S("select_scatter", T((2, 513), "f32"), T((2,), "f32"), 1, 512)
    S("select_scatter", T((130, 40), "bf16"), T((130,), "bf16"), 1, 39)


# ---- shape / view ---------------------------------------------------------------------------
def shape_cases():
    # views run on every dtype incl. float8 (pure data movement)
    for dt in ("f32", "bf16", "i64", "bool") + F8:
        C("alias", T((3, 4), dt))
        C("view", T((3, 4), dt), [12])
        C("permute", T((2, 3, 4), dt), [2, 0, 1])
        C("expand", T((3, 1), dt), [3, 4])
        C("squeeze.dim", T((3, 1, 4), dt), 1)
        C("squeeze.dims", T((1, 3, 1, 4), dt), [0, 2])
        C("unsqueeze", T((3, 4), dt), 0)
        C("select.int", T((3, 4), dt), 1, 2)
        C("slice.Tensor", T((6, 4), dt), 0, 1, 5, 2)
        C("diagonal", T((4, 5), dt))
        C("split_with_sizes", T((6, 4), dt), [1, 2, 3])
        C("cat", [T((2, 3), dt), T((1, 3), dt)])
        C("repeat", T((2, 3), dt), [2, 1])
        C("as_strided", T((4, 5), dt), [3, 3], [5, 1], 1)
        if dt not in F8:  # flip has no float8 CPU kernel
            C("flip", T((3, 4), dt), [0])
    C("alias", T((), "f32"))
    C("alias", T((3, 4), "f32", layout="t"))
    C("as_strided", T((4, 5), "f32"), [2, 2], [1, 1])  # overlapping
    C("as_strided", T((4, 5), "f32"), [3, 4], [0, 1], 2)  # stride 0
    C("as_strided", T((20,), "i32"), [4, 5], [1, 4])  # column-major view
    C("as_strided", T((6,), "f32"), [], [], 5)  # 0-d
    C("view", T((3, 4), "f32"), [-1, 2])
    C("view", T((), "f32"), [1, 1])
    C("view", T((4, 3), "f32", layout="s"), [4, 3, 1])
    C("view", T((0, 4), "f32"), [4, 0, 2])
    C("permute", T((3, 4, 5), "f32", layout="t"), [2, 1, 0])
    C("permute", T((), "f32"), [])
    C("expand", T((1,), "f32"), [2, 3, 1])
    C("expand", T((3, 1), "f32"), [-1, 4])
    C("expand", T((), "i64"), [2, 2])
    C("expand", T((3, 1), "f32"), [2, 3, 5], implicit=True)
    C("squeeze.dim", T((3, 4), "f32"), 0)  # no-op
    C("squeeze.dim", T((), "f32"), 0)
    C("squeeze.dims", T((1, 3, 1), "f32"), [-1])
    C("squeeze.dims", T((1, 3, 1), "f32"), [0, 1, 2])
    C("unsqueeze", T((3, 4), "f32"), -1)
    C("unsqueeze", T((), "f32"), 0)
    C("unsqueeze", T((3, 4), "f32", layout="t"), 1)
    C("select.int", T((3, 4), "f32"), 0, -1)
    C("select.int", T((2, 3, 4), "f32", layout="t"), 2, 0)
    C("slice.Tensor", T((6, 4), "f32"), 1, None, None)
    C("slice.Tensor", T((6, 4), "f32"), 0, -3, 100)
    C("slice.Tensor", T((6, 4), "f32"), 1, 2, 2)  # empty
    C("slice.Tensor", T((6, 4), "f32", layout="t"), 0, 1, 6, 3)
    C("diagonal", T((4, 5), "f32"), 1)
    C("diagonal", T((4, 5), "f32"), -2)
    C("diagonal", T((2, 3, 4), "f32"), 0, 2, 0)
    C("diagonal", T((4, 5), "f32"), 10)  # empty
    C("split_with_sizes", T((6, 4), "f32"), [4, 0], 1)
    C("split_with_sizes", T((3, 5), "f32", layout="t"), [2, 3], -1)
    C("cat", [T((2, 3), "f32"), T((2, 1), "f32"), T((2, 0), "f32")], 1)
    C("cat", [T((2, 3), "i32"), T((1, 3), "f32")])  # type promotion
    C("cat", [T((2, 3), "bf16"), T((2, 3), "f16")], -1)
    C("cat", [T((2, 3), "bool"), T((2, 3), "i64")])
    C("cat", [T((2, 3), "f32", layout="t"), T((2, 3), "f32")])
    C("cat", [T((3,), "f32")])
    C("flip", T((3, 4), "f32"), [0, 1])
    C("flip", T((2, 3, 4), "f32"), [-1])
    C("flip", T((), "f32"), [])
    C("flip", T((3, 4), "f32", layout="t"), [1])
    C("repeat", T((2, 3), "f32"), [2, 1, 3])
    C("repeat", T((), "f32"), [3])
    C("repeat", T((2, 3), "f32"), [0, 2])
    C("repeat", T((3, 2), "f32", layout="t"), [1, 2])
    S("permute", T(BIG, "bf16"), [1, 0])
    S("permute", T((4, 130, 33), "f32"), [1, 2, 0])
    S("cat", [T((129, 5), "bf16"), T((129, 515), "bf16")], 1)
    S("cat", [T((100, 40), "f32"), T((29, 40), "f32")], 0)
    S("expand", T((129, 1), "bf16"), [129, 513])
    S("repeat", T((43, 171), "bf16"), [3, 3])
    S("flip", T((129, 100), "f16"), [0, 1])
    S("split_with_sizes", T((1000, 3), "f32"), [128, 129, 512, 231])
    S("as_strided", T((5160,), "f32"), [129, 40], [40, 1])
    S("as_strided", T((5160,), "f32"), [40, 129], [1, 40])
    S("diagonal", T((130, 140), "bf16"))
    S("slice.Tensor", T((1000, 3), "f32"), 0, 129, 1000, 2)


# ---- creation / copy / RNG ----------------------------------------------------------------
def creation_cases():
    cpu = torch.device("cpu")
    C("arange.start_step", 0, 10, 1)
    C("arange.start_step", 0.5, 3.0, 0.25)
    C("arange.start_step", -5, 5, 2, dtype=torch.int32)
    C("arange.start_step", 10, 0, -3)
    C("arange.start_step", 0, 1, 0.1, dtype=torch.bfloat16)
    C("arange.start_step", 0, 2, 0.3, dtype=torch.float16)
    C("arange.start_step", 0, 5, 1, dtype=torch.float32, layout=torch.strided, device=cpu, pin_memory=False)
    C("arange.start_step", 3, 3, 1)  # empty
    S("arange.start_step", 0, 1000, 1, dtype=torch.float32)
    S("arange.start_step", -65, 1000, 1, dtype=torch.int64)
    S("arange.start_step", 0.0, 1.0, 1 / 513, dtype=torch.float32)
    S("arange.start_step", 0, 300, 1, dtype=torch.bfloat16)  # inexact above 256

    # uninitialised memory: check is "metadata"; the data is torch's deterministic fill
    for dt in ("f32", "bf16", "i64", "bool", "f8e4m3fn"):
        C("empty.memory_format", [3, 4], dtype=DT[dt])
    C("empty.memory_format", [2, 3, 4, 5], dtype=torch.float32, memory_format=torch.channels_last)
    C("empty.memory_format", [0, 3], dtype=torch.float32, layout=torch.strided, device=cpu, pin_memory=False)
    C("empty.memory_format", [], dtype=torch.float32)
    C("empty.memory_format", [5])  # default dtype
    for dt in ("f32", "bf16", "i32"):
        C("empty_strided", [3, 4], [1, 3], dtype=DT[dt])
    C("empty_strided", [2, 3], [3, 1])
    C("empty_strided", [2, 3, 4], [12, 1, 3], dtype=torch.float16)
    C("empty_strided", [0, 4], [4, 1], dtype=torch.int64)

    for dt in ALL + F8:
        C("full", [3, 4], True if dt == "bool" else (2 if dt in I else 1.5), dtype=DT[dt])
        C("full_like", T((3, 4), dt), True if dt == "bool" else (-3 if dt in I else 2.5))
        C("fill.Scalar", T((3, 4), dt), False if dt == "bool" else (5 if dt in I else -0.75))
        C("scalar_tensor", True if dt == "bool" else (7 if dt in I else 3.5), dtype=DT[dt])
    C("full", [2], 7)  # int fill -> i64
    C("full", [2], 7.0)  # float fill -> f32
    C("full", [2, 2], True)
    C("full", [], math.nan, dtype=torch.float32)
    C("full", [3], -math.inf, dtype=torch.bfloat16)
    C("full", [0, 3], 1.0)
    C("full", [3], 2.5, dtype=torch.int32)  # truncates
    C("full_like", T((3, 4), "f32"), 7, dtype=torch.int32)
    C("full_like", T((3, 4), "f32", layout="t"), 1.0, memory_format=torch.preserve_format)
    C("full_like", T((3, 4), "f32", layout="t"), 1.0, memory_format=torch.contiguous_format)
    C("full_like", T((2, 3, 4, 5), "f32"), 0.0, memory_format=torch.channels_last)
    C("full_like", T((), "i64"), math.inf, dtype=torch.float32)
    C("fill.Scalar", T((3, 4), "f32", layout="t"), math.nan)
    C("fill.Scalar", T((), "i32"), -1)
    C("fill.Scalar", T((0, 2), "f32"), 1.0)
    C("fill.Scalar", T((3,), "i32"), 2.9)  # truncates
    C("fill.Scalar", T((3,), "bf16"), 1e30)  # rounds
    C("scalar_tensor", 3)  # -> f32
    C("scalar_tensor", math.nan)
    C("scalar_tensor", -0.0, dtype=torch.bfloat16)
    C("scalar_tensor", 2**40, dtype=torch.int64)
    S("full", [129, 513], 0.1, dtype=torch.bfloat16)
    S("full_like", T((1000, 3), "bf16"), -2.0)
    S("fill.Scalar", T((130, 40), "f16"), 65504.0)
    S("fill.Scalar", T((2, 520), "f32"), -0.0)

    # RNG: the stored output is one valid sample; the runner checks properties
    for shape, dt in (
        ([1000], "f32"),
        ([64, 64], "bf16"),
        ([7], "f16"),
        ([], "f32"),
        ([0, 3], "f32"),
        ([129, 33], "f32"),
    ):
        C("rand", shape, dtype=DT[dt])
        C("randn", shape, dtype=DT[dt])
    C("rand", [4, 5])
    C("randn", [4, 5])
    S("rand", [16385], dtype=torch.float32)
    S("randn", [65537], dtype=torch.float32)
    S("randn", [129, 40], dtype=torch.bfloat16)
    for n, dt in ((10, None), (1, None), (0, None), (100, torch.int32), (1000, torch.int64)):
        if dt is None:
            C("randperm", n)
        else:
            C("randperm", n, dtype=dt)
    S("randperm", 4097)
    for shape, dt, p in (
        ((1000,), "f32", 0.2),
        ((64, 64), "bf16", 0.5),
        ((40,), "f16", 0.1),
        ((30,), "f32", 0.0),
        ((30,), "f32", 1.0),
        ((0, 3), "f32", 0.5),
    ):
        C("native_dropout", T(shape, dt), p, True)
    C("native_dropout", T((4, 5), "f32"), 0.3, False)  # eval: identity
    C("native_dropout", T((4, 5), "f32", layout="t"), 0.4, None)  # None = train
    S("native_dropout", T((129, 129), "f32"), 0.25, True)

    conv = [("f32", t) for t in ("bf16", "f16", "i32", "i64", "bool", "u8", "i8", "i16") + F8]
    conv += [(s, "f32") for s in ("bf16", "f16", "i32", "i64", "bool", "u8") + F8]
    conv += [
        ("bf16", "f16"),
        ("f16", "bf16"),
        ("i64", "i32"),
        ("i32", "bool"),
        ("f8e4m3fn", "bf16"),
        ("f8e5m2", "f16"),
        ("f8e4m3fn", "f8e5m2"),
        ("bf16", "f8e4m3fn"),
    ]
    for src, dst in conv:
        lo, hi = (None, None)
        if src == "f32" and dst in ("i32", "i64", "i8", "i16"):
            lo, hi = -100, 100  # in range: out-of-range float->int is undefined in C++
        if src == "f32" and dst == "u8":
            lo, hi = 0, 200
        C("_to_copy", T((4, 5), src, lo, hi), dtype=DT[dst])
    C("_to_copy", T((3, 4), "f32"))  # plain copy
    C("_to_copy", T((3, 4), "f32", layout="t"), memory_format=torch.contiguous_format)
    C("_to_copy", T((3, 4), "f32", layout="t"), dtype=torch.bfloat16, memory_format=torch.preserve_format)
    C("_to_copy", T((2, 3, 4, 5), "f32"), memory_format=torch.channels_last)
    C(
        "_to_copy",
        T((3, 4), "i32"),
        dtype=torch.float32,
        layout=torch.strided,
        device=cpu,
        pin_memory=False,
        non_blocking=False,
    )
    C("_to_copy", T((), "f32"), dtype=torch.int64)
    for dst in ("bf16", "f16") + F8:  # rounding, overflow,
        S("_to_copy", EDGE("f32"), dtype=DT[dst])  # subnormals, specials
        S("_to_copy", T(P_ROWS, "f32", -300, 300), dtype=DT[dst])
    for src in ("bf16", "f16") + F8:
        S("_to_copy", EDGE(src), dtype=torch.float32)
    S("_to_copy", V([1 + k / 1024 for k in range(-64, 65)], "f32"), dtype=torch.bfloat16)  # ties
    S("_to_copy", V([k / 8 for k in range(-40, 41)], "f32"), dtype=torch.int32)  # trunc to 0
    S("_to_copy", EDGE("i64"), dtype=torch.int32)  # wraps
    S("_to_copy", EDGE("i32"), dtype=torch.float32)
    S("_to_copy", EDGE("i64"), dtype=torch.bfloat16)
    S("_to_copy", EDGE("f32"), dtype=torch.bool)  # NaN -> True
    S("_to_copy", T((129, 100), "f32"), dtype=torch.bfloat16)

    for dt in ALL:
        C("copy", T((3, 4), dt), T((3, 4), dt))
    C("copy", T((3, 4), "f32"), T((4,), "f32"))  # broadcast src
    C("copy", T((3, 4), "bf16"), T((3, 4), "f32"))  # cast
    C("copy", T((3, 4), "i32"), T((3, 4), "f32", -50, 50))
    C("copy", T((3, 4), "f32"), T((3, 4), "bool"))
    C("copy", T((3, 4), "f32", layout="t"), T((3, 4), "f32"))
    C("copy", T((3, 4), "f32"), T((3, 4), "f32", layout="s"), False)
    C("copy", T((3, 4), "f8e4m3fn"), T((3, 4), "f32"))
    C("copy", T((3, 4), "f32"), T((), "f32"))
    S("copy", T(P_ROWS, "bf16"), T(P_ROWS, "f32"))
    S("copy", T((129, 100), "f16"), T((100,), "f16"))

    for dt in ALL + F8:
        C("clone", T((3, 4), dt))
    C("clone", T((3, 4), "f32", layout="t"))
    C("clone", T((3, 4), "f32", layout="t"), memory_format=torch.contiguous_format)
    C("clone", T((3, 4), "f32", layout="t"), memory_format=torch.preserve_format)
    C("clone", T((2, 3, 4, 5), "f32"), memory_format=torch.channels_last)
    C("clone", T((), "f32"))
    C("clone", T((0, 4), "f32"))
    S("clone", T((129, 100), "bf16", layout="t"))
    S("clone", EDGE("f32"))

    for dt in ("f32", "i64", "bool", "bf16") + F8:
        C("resize_", T((3, 4), dt), [6])  # shrink: values
    C("resize_", T((3, 4), "f32"), [2, 6])  # same numel: values
    C("resize_", T((3, 4), "f32"), [4, 5])  # grow: metadata
    C("resize_", T((3, 4), "i32"), [0])
    C("resize_", T((2, 3, 4, 5), "f32"), [2, 3, 4, 5], memory_format=torch.channels_last)
    C("resize_", T((), "f32"), [1, 1])
    S("resize_", T((129, 40), "f32"), [40, 129])
    S("resize_", T((129, 4), "f32"), [129, 9])

    for dt in ALL + F8 + ("u8", "i8", "i16"):
        C("_local_scalar_dense", T((), dt))
    C("_local_scalar_dense", T((1, 1), "f32"))
    C("_local_scalar_dense", T((1,), "i64"))
    for dt in F:
        S("_local_scalar_dense", V((math.nan,), dt, ()))
        S("_local_scalar_dense", V((-math.inf,), dt, ()))
        S("_local_scalar_dense", V((-0.0,), dt, ()))
        S("_local_scalar_dense", V((torch.finfo(DT[dt]).max,), dt, ()))
    S("_local_scalar_dense", V((2**63 - 1,), "i64", ()))
    S("_local_scalar_dense", V((-(2**31),), "i32", ()))


# ---- symbolic-shape metadata ------------------------------------------------------------
def metadata_cases():
    # Results depend on the input's strides / storage offset, which the case records in its
    # `tensors` entry (the stored data itself is contiguous).
    C("sym_size.int", T((3, 4, 5), "f32"), 0)
    C("sym_size.int", T((3, 4, 5), "bf16"), -1)
    C("sym_size.int", T((0, 4), "i64"), 0)
    C("sym_size.int", T((3, 4), "bool", layout="t"), 1)
    C("sym_stride.int", T((3, 4, 5), "f32"), 0)
    C("sym_stride.int", T((3, 4, 5), "f32"), -1)
    C("sym_stride.int", T((3, 4), "f32", layout="t"), 0)
    C("sym_stride.int", T((3, 4), "i32", layout="s"), 1)
    C("sym_numel", T((3, 4, 5), "f32"))
    C("sym_numel", T((0, 3), "f16"))
    C("sym_numel", T((), "i64"))
    C("sym_numel", T((129, 40), "bool"))
    C("sym_storage_offset", T((3, 4), "f32"))
    C("sym_storage_offset", T((3, 4), "f32", layout="o"))
    C("sym_storage_offset", T((3, 4), "i64", layout="o"))
    C("sym_is_contiguous", T((3, 4), "f32"))
    C("sym_is_contiguous", T((3, 4), "f32", layout="t"))
    C("sym_is_contiguous", T((3, 4), "f32", layout="s"))
    C("sym_is_contiguous", T((2, 3, 4, 5), "f32"), torch.channels_last)
    C("sym_is_contiguous", T((2, 3, 4, 5), "f32"), torch.contiguous_format)
    C("sym_is_contiguous", T((), "bf16"))


def float8_cases():
    """Float8 where torch CPU implements the op. Both formats are tried; where torch has no
    float8 kernel (add, neg, relu, ... on CPU) the entry is reported as skipped."""
    for dt in F8:
        C("mul.Tensor", T((4, 5), dt), T((4, 5), dt))
        C("mul.Tensor", EDGE(dt, "col"), EDGE(dt, "row"))
        C("abs", EDGE(dt))
        C("eq.Tensor", T((4, 5), dt, grid=True), T((4, 5), dt, grid=True))
        C("ne.Scalar", EDGE(dt), 0.0)
        C("isnan", EDGE(dt))
        C("isinf", EDGE(dt))
        C("where.self", T((4, 5), "bool"), T((4, 5), dt), T((4, 5), dt))
        C("constant_pad_nd", T((3, 4), dt), [1, 1], 0.5)
        C("index_select", T((5, 4), dt), 0, I64(4, 0, 2))
        C("index.Tensor", T((5, 4), dt), [I64(1, 3)])
        C("index_put", T((5, 4), dt), [I64(1, 3)], T((2, 4), dt))
        C("slice_scatter", T((6, 4), dt), T((2, 4), dt), 0, 0, 4, 2)
        C("select_scatter", T((4, 5), dt), T((5,), dt), 0, 1)
        C("any", T((4, 5), dt, zeros=0.8))
        C("add.Tensor", T((4, 5), dt), T((4, 5), dt))  # no CPU kernel
        C("neg", T((4, 5), dt))  # no CPU kernel


def regression_cases():
    """Call forms that fresh OpInfo corpora found broken (issue 13), one case each, so that the
    committed set catches them. Appended last: the seeds of earlier entries do not move."""
    # log_softmax over a dim that is not the last: PyTorch keeps the row sum in fp32 there.
    C("_log_softmax", T((40, 3, 1), "bf16", -10, 10), 1, False)
    C("_log_softmax", T((3, 40), "f16", -10, 10), 0, False)
    # index_put accumulate on bool is a logical or, not a sum.
    C("index_put", T((5, 6), "bool"), [I64(1, 1, 3, 1)], T((4, 6), "bool"), True)
    # gather with an empty index of a dtype other than int64.
    C("gather", T((4, 5), "f32"), 1, T((4, 0), "i32"))
    # avg_pool3d with a negative divisor_override.
    C("avg_pool3d", T((2, 4, 4, 4), "f32"), [2, 2, 2], [1, 1, 1], [0, 0, 0], False, True, -3)
    # index_put with an empty index: nothing to compute, the result is `self`.
    C("index_put", T((5, 6), "f32"), [I64()], T((0, 6), "f32"))
    # masked_scatter with `self` broadcast to the mask's shape.
    C("masked_scatter", T((5,), "f32"), T((4, 5), "bool"), T((20,), "f32"))
    # add/sub with alpha in bf16/f16: PyTorch rounds alpha * other to the dtype first.
    for dt in ("bf16", "f16"):
        C("sub.Tensor", T((64, 64), dt, -4, 4), T((64, 64), dt, -4, 4), alpha=-1.5)
        C("add.Tensor", T((64, 64), dt, -4, 4), T((64, 64), dt, -4, 4), alpha=0.75)
    # complex64 through the data-movement ops (as its F32 [..., 2] real view).
    B("clone", _cx_call, [(3, 4)])
    B("unsqueeze", _cx_call, [(3, 4)], 1)
    B("permute", _cx_call, [(2, 3, 4)], [2, 0, 1])
    B("expand", _cx_call, [(3, 1)], [2, 3, 5])
    B("cat", _cx_cat, [(2, 3), (4, 3)], 0)
    B("split_with_sizes", _cx_call, [(5, 3)], [2, 3], 0)
    B("select.int", _cx_call, [(3, 4)], 1, -1)
    B("flip", _cx_call, [(3, 4)], [0, 1])
    B("where.self", _cx_where, (3, 4), (3, 4), (4,))
    B("_to_copy", _cx_to, (3, 4), torch.complex64, False)
    B("_to_copy", _cx_to, (2, 5), torch.float32, False)
    B("_to_copy", _cx_to, (2, 5), torch.bool, True)
    B("copy", _cx_copy, (3, 4), (4,))
    for dt in ("f32", "bf16", "i32", "i64", "bool"):
        C("_to_copy", T((3, 4), dt), dtype=torch.complex64)
    C("scalar_tensor", complex(1.5, -2.25), dtype=torch.complex64)
    C("full", [2, 3], complex(-0.5, 4.0), dtype=torch.complex64)
    # batch norm whose input and parameters share a 16-bit dtype: PyTorch rounds the sum of
    # squares and the variance to that dtype before 1/sqrt(var + eps).
    for dt, xs in (("bf16", (16, 8, 24)), ("bf16", (8, 16, 16)), ("f16", (16, 8, 24))):
        B("_native_batch_norm_legit", bn_same, xs, dt, True)
    B("_native_batch_norm_legit.no_stats", bn_same, (12, 8, 20), "bf16", False)
    # index_put with a boolean mask and one value row per selected row (positions from an
    # on-device prefix count of the mask), and accumulating masked index_put.
    rows5 = V((True, False, True, True, False), "bool")
    C("index_put", T((5, 6), "f32"), [rows5], T((3, 6), "f32"))
    C(
        "index_put",
        T((4, 5), "f32"),
        [V((0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1, 0, 0, 1), "bool", (4, 5))],
        T((9,), "f32"),
    )
    C("index_put", T((2, 5, 3), "bf16"), [V((1, 0, 0, 1, 1, 1, 0, 1, 0, 0), "bool", (2, 5))], T((5, 3), "bf16"), True)
    C("index_put", T((5, 6), "f32"), [rows5], T((6,), "f32"), True)


def _cx(shape, zero=False):
    """A complex64 tensor with uniform real and imaginary parts (some elements 0, some parts 0
    when `zero`)."""
    x = torch.view_as_complex(T(tuple(shape) + (2,), "f32").make().contiguous())
    if zero:
        flat = torch.view_as_real(x).reshape(-1, 2)
        flat[0::3, 0] = 0.0
        flat[0::2, 1] = 0.0
    return x


def _cx_call(shapes, *args):
    return tuple(_cx(s) for s in shapes) + args, {}


def _cx_to(shape, dtype, zero):
    return (_cx(shape, zero),), {"dtype": dtype}


def _cx_cat(shapes, dim):
    return ([_cx(s) for s in shapes], dim), {}


def _cx_where(cond, a, b):
    return (T(cond, "bool").make(), _cx(a), _cx(b)), {}


def _cx_copy(dst, src):
    return (_cx(dst), _cx(src)), {}


# --------------------------------------------------------------------------------------------
# Source 4: the call forms of the committed models (--models)
# --------------------------------------------------------------------------------------------
MODELS_DIR = None  # --models DIR: golden/models by default, None with --models none
MODEL_CASE_LIMIT = 64 * 1024  # tensor bytes (inputs + outputs) of one model call form
MODEL_SKIPPED = []  # call forms over the limit, for the log


def _graph_tensor(values, name):
    v = values[name]
    return (tuple(v["shape"]), v["dtype"])


def _form_key(n, values):
    """A node's call form: the op, its arguments with every tensor replaced by (dtype, shape)."""

    def enc(a):
        ((kind, x),) = a.items()
        if kind == "tensor":
            return {"tensor": _graph_tensor(values, x)}
        if kind == "tensors":
            return {"tensors": [None if t is None else _graph_tensor(values, t) for t in x]}
        return a

    return json.dumps(
        [n["op"], [enc(a) for a in n["args"]], {k: enc(v) for k, v in sorted(n["kwargs"].items())}], sort_keys=True
    )


def _model_value(a, values):
    """A graph.json argument (docs/model-format.md; the golden value encoding) as a lazy input:
    tensors become T specs of the recorded dtype and shape, contiguous (graph.json records no
    strides)."""
    ((kind, x),) = a.items()
    if kind == "tensor":
        return T(*_graph_tensor(values, x))
    if kind == "tensors":
        return [None if t is None else T(*_graph_tensor(values, t)) for t in x]
    if kind == "float":
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}.get(x, x) if isinstance(x, str) else float(x)
    if kind in ("int", "bool", "str", "bools"):
        return x
    if kind in ("ints",):
        return list(x)
    if kind == "floats":
        return [float(y) for y in x]
    if kind == "dtype":
        return dtypes.NAMED[x]
    if kind in ("layout", "memory_format"):
        return getattr(torch, x)
    if kind == "device":
        return torch.device(x)
    if kind == "none":
        return None
    raise ValueError(f"graph.json value kind {kind}")


def _ranged(t, hi):
    """An integer index tensor in [0, hi) (a bool mask stays a coin)."""
    return t if t.dtype == "bool" else T(t.shape, t.dtype, 0, max(hi, 1))


def _with_domain(op, args):
    """The generator's usual recipes, applied to a model call form: index tensors within the
    indexed dim, unary functions in their domain, positive variances and fractional-power bases,
    no zero divisors."""
    args = list(args)

    def dim_of(t, d):
        return t.shape[d % len(t.shape)] if t.shape else 1

    if op == "embedding":
        args[1] = _ranged(args[1], args[0].shape[0])
    elif op == "gather":
        args[2] = _ranged(args[2], dim_of(args[0], args[1]))
    elif op in ("index.Tensor", "index_put"):
        args[1] = [None if t is None else _ranged(t, dim_of(args[0], k)) for k, t in enumerate(args[1])]
    elif op in UNARY_DOMAIN and isinstance(args[0], T):
        lo, hi = UNARY_DOMAIN[op]
        args[0] = T(args[0].shape, args[0].dtype, lo, hi)
    elif op == "pow.Tensor_Scalar" and float(args[1]) != int(args[1]):
        args[0] = T(args[0].shape, args[0].dtype, 0.05, 4)
    elif op == "_native_batch_norm_legit_no_training":
        args[4] = T(args[4].shape, args[4].dtype, 0.5, 2)
    elif op == "div.Tensor" and isinstance(args[1], T):
        args[1] = T(args[1].shape, args[1].dtype, nz=True)
    return args


def model_cases():
    """One `model` case per distinct call form (overload, input dtypes/shapes, other arguments)
    of the committed models' traced graphs (golden/models/*/graph.json), inputs drawn by the usual
    recipes, first occurrence order (models by name, nodes in graph order). Forms whose tensors
    exceed MODEL_CASE_LIMIT bytes are listed in the log instead (the budget)."""
    if MODELS_DIR is None or not os.path.isdir(MODELS_DIR):
        return
    forms = {}
    for name in sorted(os.listdir(MODELS_DIR)):
        path = os.path.join(MODELS_DIR, name, "graph.json")
        if not os.path.isfile(path):
            continue
        with open(path) as f:
            g = json.load(f)
        values = g["values"]
        for n in g["nodes"]:
            if n["op"] not in CORE_SET:
                continue
            key = _form_key(n, values)
            if key in forms:
                forms[key][2].append(name)
                continue
            nbytes = 0
            for ref in n["args"] + n["outputs"]:
                ((kind, x),) = ref.items()
                for t in [x] if kind == "tensor" else x if kind == "tensors" else []:
                    if t is not None and t in values:
                        shape, dt = _graph_tensor(values, t)
                        nbytes += math.prod(shape) * DT[dt].itemsize
            forms[key] = (n, values, [name], nbytes)
    for n, values, models, nbytes in forms.values():
        op = n["op"]
        if nbytes > MODEL_CASE_LIMIT:
            MODEL_SKIPPED.append(f"{op} from {models[0]}/{n['name']} ({nbytes} bytes)")
            continue
        args = _with_domain(op, [_model_value(a, values) for a in n["args"]])
        kwargs = {k: _model_value(v, values) for k, v in n["kwargs"].items()}
        TABLE.append(
            HandCase(
                op,
                "model",
                tuple(args),
                kwargs,
                None,
                {"models": sorted(set(models)), "node": f"{models[0]}/{n['name']}"},
            )
        )


HAND_BUILDERS = [
    unary_cases,
    activation_cases,
    first_family_cases,
    other_binary_cases,
    comparison_cases,
    reduction_cases,
    sort_cases,
    matmul_cases,
    norm_cases,
    pooling_cases,
    pad_cases,
    indexing_cases,
    shape_cases,
    creation_cases,
    metadata_cases,
    float8_cases,
    regression_cases,
    model_cases,
]


def run_table(wanted, log):
    """Materialise and run every wanted table entry. Seeds come from (op, source, k), k being
    the entry's position among that op's entries of that source, so they do not move when
    other ops' entries change."""
    cases, skipped = [], []
    counters = {}
    for order, hc in enumerate(TABLE):
        key = (hc.op, hc.source)
        k = counters.get(key, 0)
        counters[key] = k + 1
        if not wanted(hc.op):
            continue
        seed = stable_seed(hc.op, hc.source, k)
        torch.manual_seed(seed)
        func = overload(hc.op)
        try:
            args, kwargs = hc.build() if hc.build else (materialize(hc.args), materialize(hc.kwargs))
            case, _, why = record_call(
                func, tuple(args), kwargs, hc.source, {"seed": seed, "table_index": k, **(hc.prov or {})}
            )
        except Exception as e:  # noqa: BLE001 - torch refused (dtype not implemented on CPU, ...)
            skipped.append(f"{hc.op} {hc.source}#{k}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            continue
        if case is None:
            skipped.append(f"{hc.op} {hc.source}#{k}: not recordable ({why})")
            continue
        if case.check["kind"] == "properties":
            verify_properties(case)
        case.order = order
        cases.append(case)
    log(f"table: {len(cases)} cases, {len(skipped)} entries skipped")
    return cases, skipped


# --------------------------------------------------------------------------------------------
# Writer
# --------------------------------------------------------------------------------------------
def assign_ids(cases):
    """`<op>::<dtype>::<source>_<n>`, n counting from 0 within (op, dtype, source) in
    discovery/table order."""
    counters = {}
    for c in sorted(cases, key=lambda c: (c.op, c.dtype, c.source, c.order)):
        key = (c.op, c.dtype, c.source)
        n = counters.get(key, 0)
        counters[key] = n + 1
        c.id = f"{c.op}::{c.dtype}::{c.source}_{n}"
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "duplicate case ids"


def case_file(c):
    return f"cases/{c.op}/{c.id.replace('::', '__')}.safetensors"


def to_bytes(c):
    prov = {"torch": TORCH_VERSION, "source": c.source, "generator": GENERATOR}
    prov.update(c.prov)
    meta = {
        "format": FORMAT,
        "id": c.id,
        "op": c.op,
        "schema": c.schema,
        "dtype": c.dtype,
        "args": c.args,
        "kwargs": c.kwargs,
        "outputs": c.outputs,
        "tensors": c.rec.meta,
        "check": c.check,
        "provenance": prov,
    }
    if getattr(c, "oracle", None):
        meta["oracle"] = c.oracle
    doc = json.dumps(meta, sort_keys=True, separators=(",", ":"), allow_nan=False)
    tensors = {}
    for name in sorted(c.rec.tensors):
        t = c.rec.tensors[name]
        if t.dtype == torch.complex64:  # stored as its real view, shape [..., 2]
            t = torch.view_as_real(t).clone()
        tensors[name] = t.contiguous()
    tensors.update(getattr(c, "oracle_tensors", {}))
    return safetensors.torch.save(tensors, metadata={"trnconf": doc})


def write_all(out_dir, cases, wanted, full):
    cases_dir = os.path.join(out_dir, "cases")
    index_path = os.path.join(out_dir, "index.json")
    entries = []
    if full:
        if os.path.isdir(cases_dir):
            shutil.rmtree(cases_dir)
    else:
        # partial regeneration: drop the selected ops' old files and index entries, keep others
        if os.path.exists(index_path):
            with open(index_path) as f:
                entries = [e for e in json.load(f)["cases"] if not wanted(e["op"])]
        for op in CORE_OPS:
            d = os.path.join(cases_dir, op)
            if wanted(op) and os.path.isdir(d):
                shutil.rmtree(d)
    sizes, too_big = {}, []
    for c in cases:
        blob = to_bytes(c)
        if len(blob) > FILE_LIMIT:
            too_big.append(f"{c.id} ({len(blob)} bytes)")
            continue
        path = os.path.join(out_dir, case_file(c))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(blob)
        sizes[c.id] = len(blob)
        entries.append({"id": c.id, "op": c.op, "dtype": c.dtype, "source": c.source, "file": case_file(c)})
    if too_big:
        sys.exit(f"FATAL: files over the {FILE_LIMIT // 2**20} MB limit: " + ", ".join(too_big))
    entries.sort(key=lambda e: e["id"])
    ids = [e["id"] for e in entries]
    assert len(ids) == len(set(ids)), "duplicate ids in index"
    # one case per line: stable, reviewable diffs
    lines = [json.dumps(e, sort_keys=True, separators=(", ", ": ")) for e in entries]
    with open(index_path, "w") as f:
        f.write(f'{{"format": {FORMAT}, "torch": "{TORCH_VERSION}", "cases": [\n')
        f.write(",\n".join(lines))
        f.write("\n]}\n")
    return entries, sizes


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for fn in files:
            total += os.path.getsize(os.path.join(root, fn))
    return total


def summarize(out_dir, entries, sizes, skipped, log, wanted, partial):
    by_op = {}
    for e in entries:
        by_op.setdefault(e["op"], []).append(e)
    log("")
    log(f"{'group':<14}{'ops':>5}{'cases':>7}{'opinfo':>8}{'hand':>6}{'stress':>8}{'model':>7}  dtypes")
    for g, ops in CORE_GROUPS.items():
        es = [e for op in ops for e in by_op.get(op, [])]
        src = {s: sum(e["source"] == s for e in es) for s in ("opinfo", "hand", "stress", "model")}
        dts = sorted({e["dtype"] for e in es})
        log(
            f"{g:<14}{len(ops):>5}{len(es):>7}{src['opinfo']:>8}{src['hand']:>6}"
            f"{src['stress']:>8}{src['model']:>7}  {' '.join(dts)}"
        )
    only_hand = [op for op in CORE_OPS if by_op.get(op) and not any(e["source"] == "opinfo" for e in by_op[op])]
    log(f"total: {len(entries)} cases")
    log(f"overloads without OpInfo cases ({len(only_hand)}): {' '.join(only_hand)}")
    if sizes:
        big = sorted(((s, i) for i, s in sizes.items() if s > FILE_AIM), reverse=True)
        log(
            f"files written: {len(sizes)}, largest {max(sizes.values())} bytes, "
            f"{len(big)} above {FILE_AIM // 1024} KB" + "".join(f"\n  {i} ({s} bytes)" for s, i in big)
        )
    total = dir_bytes(out_dir if os.path.isdir(out_dir) else ".")
    golden_total = dir_bytes(os.path.join(out_dir, "cases")) + os.path.getsize(os.path.join(out_dir, "index.json"))
    log(
        f"total bytes: cases+index {golden_total} ({golden_total / 2**20:.1f} MiB); "
        f"whole directory {total} ({total / 2**20:.1f} MiB)"
    )
    if MODEL_SKIPPED:
        log(f"model call forms over {MODEL_CASE_LIMIT // 1024} KB, not recorded ({len(MODEL_SKIPPED)}):")
        for s in MODEL_SKIPPED:
            log("  " + s)
    if skipped:
        log(f"table entries skipped ({len(skipped)}):")
        for s in skipped:
            log("  " + s)
    missing = [op for op in CORE_OPS if not by_op.get(op)]
    if partial:  # --ops into a directory without the other ops: only the selected ones count
        if missing:
            log(f"WARNING: index lacks {len(missing)} core overloads (not regenerated here)")
        missing = [op for op in missing if wanted(op)]
    if missing:
        sys.exit(f"FATAL: {len(missing)} core overloads have no case: {' '.join(missing)}")
    if golden_total > TOTAL_LIMIT:
        sys.exit(f"FATAL: golden cases total {golden_total} bytes > hard limit {TOTAL_LIMIT}")
    if golden_total > TOTAL_AIM:
        log(f"WARNING: golden cases total {golden_total} bytes > budget {TOTAL_AIM}")


SAMPLE_SOURCE = "sample_inputs"  # --reference-inputs: OpInfo's superset with edge cases


def large_cases():
    """--large: long contractions and reductions, several tiles in every dimension (128
    partitions, 512-wide PSUM banks), for accuracy work. Not part of the committed set."""
    S("mm", T((260, 3000), "f32", -1, 1), T((3000, 140), "f32", -1, 1))
    S("mm", T((200, 2100), "bf16", -1, 1), T((2100, 600), "bf16", -1, 1))
    S("bmm", T((3, 130, 1100), "f32", -1, 1), T((3, 1100, 520), "f32", -1, 1))
    S("sum.dim_IntList", T((300, 4000), "f32", -1, 1), [1])
    S("sum.dim_IntList", T((5000, 140), "bf16", -1, 1), [0])
    S("mean.dim", T((130, 9000), "f16", -1, 1), [1])
    S("var.correction", T((260, 2000), "f32", -1, 1), [1])
    S("cumsum", T((130, 3000), "f32", -1, 1), 1)
    S("_softmax", T((260, 3000), "f32", -10, 10), 1, False)
    S("_log_softmax", T((260, 3000), "bf16", -10, 10), 1, False)
    S("native_layer_norm", T((260, 2100), "f32"), [2100], T((2100,), "f32"), T((2100,), "f32"), 1e-5)
    S(
        "convolution",
        T((2, 130, 20, 20), "f32", -1, 1),
        T((140, 130, 3, 3), "f32", -1, 1),
        None,
        [1, 1],
        [1, 1],
        [1, 1],
        False,
        [0, 0],
        1,
    )
    # the shapes issue 14 measured (every f32 one failed assert_close by accumulation order)
    S("mm", T((200, 300), "f32", -1, 1), T((300, 600), "f32", -1, 1))
    S("bmm", T((3, 130, 129), "f32", -1, 1), T((3, 129, 513), "f32", -1, 1))
    S("addmm", T((513,), "f32", -1, 1), T((129, 257), "f32", -1, 1), T((257, 513), "f32", -1, 1))
    S(
        "addmm",
        T((129, 600), "f32", -1, 1),
        T((129, 1200), "f32", -1, 1),
        T((1200, 600), "f32", -1, 1),
        beta=0.5,
        alpha=-1.5,
    )
    S(
        "convolution",
        T((1, 130, 16, 16), "f32", -1, 1),
        T((130, 130, 3, 3), "f32", -1, 1),
        T((130,), "f32", -1, 1),
        [1, 1],
        [1, 1],
        [1, 1],
        False,
        [0, 0],
        1,
    )
    S(
        "convolution",
        T((1, 130, 16, 16), "f16", -1, 1),
        T((130, 130, 3, 3), "f16", -1, 1),
        T((130,), "f16", -1, 1),
        [1, 1],
        [1, 1],
        [1, 1],
        False,
        [0, 0],
        1,
    )
    S(
        "convolution",
        T((2, 64, 9, 9), "f32", -1, 1),
        T((64, 96, 4, 4), "f32", -1, 1),
        None,
        [2, 2],
        [1, 1],
        [1, 1],
        True,
        [1, 1],
        1,
    )
    B(
        "convolution_backward",
        conv_bwd,
        (2, 130, 12, 12),
        (140, 130, 3, 3),
        True,
        [1, 1],
        [1, 1],
        [1, 1],
        False,
        [0, 0],
        1,
        [True, True, True],
        "f32",
        _src="stress",
    )


def fresh_corpus_options(ap):
    """Options that make a corpus other than the committed one (docs: golden/README.md)."""
    ap.add_argument(
        "--seed",
        type=int,
        default=None,
        help="mix N into every case seed: fresh inputs for every case (default: the committed set's seeds)",
    )
    ap.add_argument(
        "--reference-inputs",
        action="store_true",
        help="draw OpInfo calls from reference_inputs (sample_inputs plus edge cases)",
    )
    ap.add_argument(
        "--samples", type=int, default=None, help="OpInfo samples tried per (OpInfo, dtype) and kept per (op, dtype)"
    )
    ap.add_argument(
        "--large",
        action="store_true",
        help="add large-shape cases (long contractions/reductions, several tiles per "
        "dimension); raises the per-file limit to 32 MB (never committed)",
    )


def apply_fresh_corpus_options(opts):
    global RUN_SEED, SAMPLE_SOURCE, OPINFO_MAX_SAMPLES, OPINFO_CAP, OPINFO_CAP_OTHER, FILE_LIMIT, TOTAL_LIMIT
    RUN_SEED = opts.seed
    if opts.reference_inputs:
        SAMPLE_SOURCE = "reference_inputs"
    if opts.samples:
        OPINFO_MAX_SAMPLES = opts.samples
        OPINFO_CAP = {k: max(v, opts.samples // 2) for k, v in OPINFO_CAP.items()}
        OPINFO_CAP_OTHER = max(OPINFO_CAP_OTHER, opts.samples // 2)
    if opts.large:
        HAND_BUILDERS.append(large_cases)
        FILE_LIMIT = 32 * 1024 * 1024  # the oracle and its scale add 12 bytes per f32 output element
        TOTAL_LIMIT = math.inf  # a --large corpus is for runs, never committed


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=here, help="golden directory (default: next to this script)")
    ap.add_argument(
        "--ops", default=None, help="comma-separated globs of core op names to regenerate (e.g. 'add.*,mm')"
    )
    ap.add_argument(
        "--no-opinfo", action="store_true", help="skip the OpInfo capture (debugging only: changes nothing else)"
    )
    ap.add_argument(
        "--models",
        default=os.path.join(here, "models"),
        metavar="DIR|none",
        help="add one `model` case per distinct call form of the traced models in "
        "DIR/*/graph.json (default: golden/models; `none`: no model cases)",
    )
    fresh_corpus_options(ap)
    opts = ap.parse_args()
    apply_fresh_corpus_options(opts)
    global MODELS_DIR
    MODELS_DIR = None if opts.models == "none" else opts.models

    def log(msg):
        print(msg, flush=True)

    if TORCH_VERSION != PINNED_TORCH:
        sys.exit(
            f"torch {torch.__version__} is installed; the golden cases are pinned to "
            f"{PINNED_TORCH} (pip install -r golden/requirements.txt)"
        )
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    check_core_list()
    # uninitialised memory (empty*, resize_ growth) is filled deterministically (NaN / max int)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True

    pats = [p.strip() for p in opts.ops.split(",")] if opts.ops else None
    if pats:
        unknown = [p for p in pats if not any(fnmatch.fnmatchcase(op, p) for op in CORE_OPS)]
        if unknown:
            sys.exit(f"--ops: no core op matches {unknown}")

    @functools.cache
    def wanted(op):
        return pats is None or any(fnmatch.fnmatchcase(op, p) for p in pats)

    for b in HAND_BUILDERS:
        b()
    cases = [] if opts.no_opinfo else run_opinfos(wanted, log)
    table_cases, skipped = run_table(wanted, log)
    cases += table_cases
    assign_ids(cases)
    arg_dtypes = {v: k for k, v in ARG_DTYPE_NAME.items()}
    for c in cases:
        oracle.attach_oracle(c, overload(c.op), arg_dtypes)
    os.makedirs(opts.out, exist_ok=True)
    entries, sizes = write_all(opts.out, cases, wanted, full=pats is None and not opts.no_opinfo)
    if pats is None and opts.no_opinfo:
        log("note: --no-opinfo run (debug)")
    summarize(opts.out, entries, sizes, skipped, log, wanted, partial=pats is not None)


if __name__ == "__main__":
    main()
