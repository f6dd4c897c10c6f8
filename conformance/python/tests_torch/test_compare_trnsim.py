"""PyTorch's `test_ops.py::TestCommon::test_compare_cpu`, instantiated for the `trnsim` device by
PyTorch's own machinery (docs/torch-device.md, "PyTorch's OpInfos as the judge").

`instantiate_device_type_tests(TestCommon, globals(), only_for="cuda")` with
`PYTORCH_TESTING_DEVICE_FOR_CUSTOM=trnsim`: test_compare_cpu is a CUDA-only test in PyTorch, and
that environment variable is PyTorch's hook to run such tests on an out-of-tree (PrivateUse1)
device too. Without it (or on a machine without the hook set) the module instantiates nothing.
The class and test names are PyTorch's (`TestCommon`, `test_compare_cpu`), so each OpInfo's own
`DecorateInfo` skips, expected failures and tolerance overrides for that test apply here as they
do there.

Each OpInfo × dtype (`OpDTypes.any_common_cpu_cuda_one`, test_compare_cpu's choice) runs every
sample and reference input (`op.reference_inputs`) on `trnsim` and on the CPU and compares them
with test_compare_cpu's `assertEqual(atol=1e-3, rtol=1e-3)`; a sample that passes is compared
again at the golden suite's tolerance (`trnsim._native.tolerance`, per output dtype). Per-sample
outcomes go to a JSON-lines file (`TRNSIM_OPINFO_RESULTS`), one line per OpInfo; the page is
generated from it by `opinfo_compare.py --merge … --markdown docs/coverage.md`.

    PYTORCH_TESTING_DEVICE_FOR_CUSTOM=trnsim TRNSIM_OPINFO_SHARD=0/2 TRNSIM_OPINFO_RESULTS=opinfo-0.jsonl \\
        python -m pytest -q conformance/python/tests_torch/test_compare_trnsim.py

(the documented command, docs/torch-device.md, also pins the CPU side to the goldens' code paths).

Environment: `TRNSIM_OPINFO_SHARD=i/n` keeps the OpInfos whose index in `op_db` is i modulo n;
`TRNSIM_OPINFO_BUDGET` (seconds per OpInfo, default 1800) stops an OpInfo's remaining samples,
which are then counted as not run.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
import unittest
import warnings

import pytest

torch = pytest.importorskip("torch")

# The device module `torch.trnsim` must exist before PyTorch's device-type test bases are listed
# (`common_device_type` decides at import whether a PrivateUse1 backend is available).
import trnsim.torch  # noqa: I001 - registers the device first (see above)
from trnsim import _native
from trnsim.torch._encode import GOLDEN_NAME
from torch.testing._internal.common_device_type import (
    OpDTypes,
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase
from torch.utils._pytree import tree_flatten, tree_map

PROCESS_START = time.time()
RESULTS = os.environ.get("TRNSIM_OPINFO_RESULTS")
BUDGET_S = float(os.environ.get("TRNSIM_OPINFO_BUDGET", "1800"))
_shard = os.environ.get("TRNSIM_OPINFO_SHARD", "0/1")
SHARD_I, SHARD_N = (int(x) for x in _shard.split("/"))
OPS = [op for k, op in enumerate(op_db) if k % SHARD_N == SHARD_I]

#: OpInfos whose outputs are random draws (the device's generator is not the CPU's). Used only to
#: name the class of a value mismatch; the OpInfos themselves decide what is skipped.
RANDOM_OPINFOS = {
    "bernoulli",
    "nn.functional.dropout",
    "nn.functional.dropout2d",
    "nn.functional.dropout3d",
    "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout",
    "normal",
    "uniform",
    "multinomial",
    "randn",
    "rand",
    "randint",
    "randn_like",
    "rand_like",
    "randint_like",
    "nn.functional.rrelu",
}


def _to_cpu(x):
    return x.cpu() if isinstance(x, torch.Tensor) and x.device.type == "trnsim" else x


def _placement(meta_sample):
    """Which tensor leaves of a sample the OpInfo's generator puts on the device under test: the
    sample made for device ``meta`` has those on ``meta`` and the ones it deliberately keeps on the
    CPU (``tensor_split``'s indices, …) on ``cpu``. None when it could not be made on ``meta``."""
    if meta_sample is None:
        return None
    leaves, _ = tree_flatten((meta_sample.input, meta_sample.args, meta_sample.kwargs))
    return [x.device.type == "meta" if isinstance(x, torch.Tensor) else None for x in leaves]


def _device_sample(sample, placement):
    """The sample as test_compare_cpu would hold it for the device: every tensor the generator
    made on the device on `trnsim`, the ones it made on the CPU left there."""
    leaves, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    fits = (
        placement is not None
        and len(placement) == len(leaves)
        and all((p is None) == (not isinstance(x, torch.Tensor)) for p, x in zip(placement, leaves))
    )
    out = []
    for k, x in enumerate(leaves):
        if isinstance(x, torch.Tensor) and (not fits or placement[k]):
            x = x.to("trnsim")
        out.append(x)
    inp, args, kwargs = spec.unflatten(out)
    return inp, args, kwargs, fits


def _first_line(e: BaseException) -> str:
    msg = str(e)
    return msg.splitlines()[0] if msg else ""


def classify(e: BaseException) -> str:
    """A failure's class: what the device said, with numbers and shapes folded away."""
    msg = str(e)
    if isinstance(e, trnsim.torch.UnsupportedOpError):
        m = re.search(r"aten::(\S+) is not supported on the trnsim device \((.*?)\); call form", msg, re.DOTALL)
        if m:
            why = m.group(2)
            why = "no lowering, no decomposition" if why.startswith("trnconf has no lowering") else why[:100]
            return f"unsupported `{m.group(1)}`: {why}"
        return "unsupported: " + msg[:100]
    return f"error {type(e).__name__}: {_first_line(e)[:100]}"


def _mismatch_class(op, e: AssertionError) -> str:
    first = _first_line(e)
    if op.name in RANDOM_OPINFOS and "not close" in first:
        return "random values: the device's generator is not the CPU's"
    return "mismatch at 1e-3: " + re.sub(r"[0-9]+", "N", first)[:100]


def _suite_tolerance(x) -> tuple[float, float]:
    """(rtol, atol) of the golden suite for one output (trnconf::compare::tolerance_for)."""
    if isinstance(x, torch.Tensor):
        name = GOLDEN_NAME.get(x.dtype, "f32")
    elif isinstance(x, float):
        name = "f32"
    else:
        return 0.0, 0.0
    rtol, atol, _ = _native.tolerance("", name)
    return rtol, atol


_WRITTEN: set = set()


def _write(record: dict) -> None:
    _WRITTEN.add((record["name"], record["variant"], record["dtype"]))
    record["process_start"] = PROCESS_START
    record["torch"] = torch.__version__.split("+")[0]
    record["op_db"] = len(op_db)
    # The CPU side's code path: the goldens pin it (docs/torch-device.md), and a vectorised kernel
    # can round differently from the scalar one the device reproduces.
    record["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    record["cpu_threads"] = torch.get_num_threads()
    record["end"] = time.time()
    if RESULTS:
        with open(RESULTS, "a") as f:
            f.write(json.dumps(record) + "\n")


def _new_record(op, dtype) -> dict:
    return {
        "name": op.name,
        "variant": op.variant_test_name,
        "dtype": str(dtype).replace("torch.", ""),
        "in_test_compare_cpu": op.ref is None,
        "samples": 0,
        "pass": 0,
        "pass_suite": 0,
        "fail": 0,
        "skip": 0,
        "not_run": 0,
        "classes": {},
        "skip_reasons": {},
        "per_sample": [],
    }


def _bump(d: dict, key: str) -> None:
    d[key] = d.get(key, 0) + 1


class TestCommon(TestCase):
    """Named as in test_ops.py, so the OpInfos' decorators for TestCommon.test_compare_cpu apply."""

    @ops(OPS, dtypes=OpDTypes.any_common_cpu_cuda_one)
    def test_compare_cpu(self, device, dtype, op):
        rec = _new_record(op, dtype)
        rec["tolerance_override"] = [self.precision, self.rel_tol]
        rec["opinfo_expected_failure"] = getattr(self, "_trn_xfail", False)
        t0 = time.time()
        try:
            self._compare(device, dtype, op, rec, t0)
        finally:
            rec["seconds"] = round(time.time() - t0, 2)
            _write(rec)
        if rec["fail"]:
            cls = "; ".join(f"{c} ×{n}" for c, n in sorted(rec["classes"].items()) if not c.startswith("passes 1e-3"))
            self.fail(f"{rec['fail']} of {rec['samples']} samples differ from the CPU: {cls}")
        if rec["samples"] and rec["skip"] == rec["samples"]:
            raise unittest.SkipTest("every sample skipped: " + "; ".join(rec["skip_reasons"]))

    def _compare(self, device, dtype, op, rec, t0):
        # Inputs are made on the CPU (values independent of the device's generator) and moved; the
        # same samples made on `meta` say which tensors the generator keeps on the CPU.
        samples = list(op.reference_inputs("cpu", dtype))
        metas: list = []
        gen = op.reference_inputs("meta", dtype)
        while True:
            try:
                metas.append(next(gen))
            except StopIteration:
                break
            except Exception:  # noqa: BLE001 - a generator that needs data: the remaining samples move whole
                break
        rec["placement_known"] = 0
        for i, s in enumerate(samples):
            if time.time() - t0 > BUDGET_S:
                rec["not_run"] = len(samples) - i
                break
            rec["samples"] += 1
            outcome, cls = self._one(op, s, metas[i] if i < len(metas) else None, rec)
            rec["per_sample"].append([outcome, cls])
            if outcome == "skip":
                rec["skip"] += 1
                _bump(rec["skip_reasons"], cls)
            elif outcome == "fail":
                rec["fail"] += 1
                _bump(rec["classes"], re.sub(r" \(max error.*", "", cls))
                if "(max error" in cls:
                    rec.setdefault("oracle", []).append([i, cls])
            else:
                rec["pass"] += 1
                if outcome == "pass":
                    rec["pass_suite"] += 1
                else:
                    _bump(rec["classes"], re.sub(r" \(max error.*", "", cls))
                    rec.setdefault("oracle", []).append([i, cls])

    def _one(self, op, s, meta, rec):
        try:
            inp, args, kwargs, fits = _device_sample(s, _placement(meta))
        except trnsim.torch.DtypeError as e:
            return "skip", _dtype_reason(e)
        except Exception as e:  # noqa: BLE001 - a tensor the device cannot hold (sparse, …) fails the sample
            return "fail", "moving the sample to the device: " + classify(e)
        rec["placement_known"] += int(fits)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = op(inp, *args, **kwargs)
        except trnsim.torch.DtypeError as e:
            return "skip", _dtype_reason(e)
        except Exception as e:  # noqa: BLE001 - every failure is classified and counted
            return "fail", classify(e)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                expected = op(s.input, *s.args, **s.kwargs)
        except Exception as e:  # noqa: BLE001 - the CPU rejects the sample: nothing to compare with
            return "skip", f"the CPU raises on the sample ({type(e).__name__})"
        try:
            got = tree_map(_to_cpu, s.output_process_fn_grad(got))
            expected = s.output_process_fn_grad(expected)
        except Exception as e:  # noqa: BLE001
            return "fail", "output_process_fn_grad: " + classify(e)
        try:
            self.assertEqual(got, expected, atol=1e-3, rtol=1e-3)
        except AssertionError as e:
            cls = _mismatch_class(op, e)
            if cls.endswith("Tensor-likes are not close!"):
                cls = _oracle_class(op, s, got, expected, 1e-3, "mismatch")
            return "fail", cls
        # The suite's rule: each output at its dtype's tolerance, with the OpInfo's own overrides
        # (which only widen test_compare_cpu's 1e-3) out of the way.
        saved = self.precision, self.rel_tol
        self.precision, self.rel_tol = 0, 0
        try:
            gl, _ = tree_flatten(got)
            el, _ = tree_flatten(expected)
            for g, x in zip(gl, el):
                rtol, atol = _suite_tolerance(x)
                self.assertEqual(g, x, atol=atol, rtol=rtol)
        except AssertionError:
            return "pass_1e-3", _oracle_class(op, s, got, expected)
        finally:
            self.precision, self.rel_tol = saved
        return "pass", None


def _outside(x: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float) -> int:
    bad = (x.double() - ref).abs() > atol + rtol * ref.abs()
    both_nan = x.isnan() & ref.isnan()
    return int((bad & ~both_nan).sum())


def _oracle_class(op, s, got, expected, tol: float | None = None, label: str = "passes 1e-3") -> str:
    """For a sample outside a tolerance (the suite's, or with `tol` test_compare_cpu's): both results against a float64
    oracle (the OpInfo on the CPU in float64, from the same float32 inputs). Whether the CPU itself
    is outside the suite's tolerance there tells an inapplicable rule (f32 arithmetic of that
    sample's magnitudes cannot meet it) from a device less accurate than the CPU."""
    what = "the suite's tolerance" if tol is None else "1e-3"
    try:
        s64 = s.transform(lambda x: x.double() if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            oracle = s64.output_process_fn_grad(op(s64.input, *s64.args, **s64.kwargs))
    except Exception:  # noqa: BLE001 - no float64 form of the OpInfo: no oracle
        return f"{label}, outside {what} (no float64 oracle)"
    dev = cpu = 0
    dev_err = cpu_err = 0.0
    for g, e, o in zip(tree_flatten(got)[0], tree_flatten(expected)[0], tree_flatten(oracle)[0]):
        if not (isinstance(o, torch.Tensor) and o.is_floating_point() and isinstance(g, torch.Tensor)):
            continue
        rtol, atol = _suite_tolerance(e) if tol is None else (tol, tol)
        dev += _outside(g, o, rtol, atol)
        cpu += _outside(e, o, rtol, atol)
        if o.numel():
            dev_err = max(dev_err, float((g.double() - o).abs().nan_to_num().max()))
            cpu_err = max(cpu_err, float((e.double() - o).abs().nan_to_num().max()))
    if not dev:
        kind = "within it of a float64 oracle"
    elif cpu:
        kind = "outside it of a float64 oracle, as the CPU result is"
    else:
        kind = "outside it of a float64 oracle where the CPU result is within it"
    return (
        f"{label}, outside {what} of the CPU result; {kind} "
        f"(max error device {dev_err:.1e}, CPU {cpu_err:.1e}; elements outside: device {dev}, CPU {cpu})"
    )


def _dtype_reason(e) -> str:
    msg = str(e)
    if "float64" in msg or "complex128" in msg:
        return "dtype policy: float64/complex128 refused"
    if "does not fit in int32" in msg:
        return "dtype policy: int64 value beyond int32"
    return "dtype policy: " + _first_line(e)[:80]


_GENERIC = TestCommon
instantiate_device_type_tests(TestCommon, globals(), only_for="cuda")


def _record_skips(cls) -> None:
    """A test the OpInfo skips never reaches the body: record the skip and its reason here."""
    for name, fn in list(vars(cls).items()):
        if not name.startswith("test_compare_cpu") or not callable(fn) or not fn.__defaults__:
            continue
        pk = fn.__defaults__[0]
        xfail = getattr(fn, "__unittest_expecting_failure__", False)

        @functools.wraps(fn)
        def wrapped(self, _fn=fn, _op=pk["op"], _dtype=pk["dtype"], _xfail=xfail):
            self._trn_xfail = _xfail
            try:
                return _fn(self)
            except unittest.SkipTest as e:
                rec = _new_record(_op, _dtype)
                if (rec["name"], rec["variant"], rec["dtype"]) not in _WRITTEN:
                    rec["skip_reason"] = f"the OpInfo skips test_compare_cpu: {str(e)[:120]}"
                    _write(rec)
                raise

        # `unittest.skip` marks the function so the runner never calls it; without the mark the
        # runner calls this wrapper, the skip decorator raises, and the skip is recorded.
        for attr in ("__unittest_skip__", "__unittest_skip_why__"):
            wrapped.__dict__.pop(attr, None)
        setattr(cls, name, wrapped)


# Without PYTORCH_TESTING_DEVICE_FOR_CUSTOM (and no CUDA) there is no instantiated class: nothing runs.
for _cls in [
    v for v in list(globals().values()) if isinstance(v, type) and issubclass(v, _GENERIC) and v is not _GENERIC
]:
    _record_skips(_cls)
# Not left at module level: pytest would collect the class a second time under this name.
_cls = None
