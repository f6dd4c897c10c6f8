#!/usr/bin/env python3
"""trnconf process executor: runs golden cases outside the Rust process and speaks the trnconf
executor protocol (docs/executor-protocol.md, protocol version 1).

    trnconf_executor.py [--device auto|cpu|xla|neuron] [--inject KIND[:PATTERN]]...  # serve: JSON lines on stdin/stdout
    trnconf_executor.py batch --manifest M.jsonl --results R.jsonl [options]   # batch: manifest in, results out

Modes (the `mode` of a `run` request):
  torch  rebuild the ATen call from the case metadata and run torch.ops.aten.<op>.<overload> on the
         device: the torch-neuronx XLA device when torch_xla imports (trn1), else the CPU;
         `--device neuron` asks for TorchNeuron's native `neuron` device (Trn2/Trn3, SDK 2.33+).
  nki    run the NKI kernel the request names (`kernel`); needs neuronxcc (hardware) or the numpy
         stand-in conformance/pyexec/nki_standin; otherwise `unsupported` with the reason.
  nki-module  run the case through the NKI backend module given with --nki-module MODULE (its kernels on
         trnsim through the trnsim.nki front-end; `trnconf run --backend nki:MODULE`, nki_module_backend.py)
  echo   PROTOCOL-TEST MODE ONLY: returns the golden outputs stored in the case file. It tests the
         wire protocol, timeouts and fault handling without torch. Its results are never
         conformance results (the Rust side labels them `echo (protocol test)`).

Fault injection (tests only): --inject KIND[:PATTERN], KIND one of crash, hang, nan, perturb,
wrong-shape, wrong-dtype, slow; PATTERN is a case-id substring or glob (default: every case).

Dependencies: the standard library, numpy and safetensors; torch only for mode torch. Only protocol
lines go to stdout (fd 1 is redirected to stderr for everything else)."""

import argparse
import contextlib
import fnmatch
import importlib
import importlib.util
import json
import math
import os
import platform
import signal
import sys
import time
import traceback

# The CPU kernel flavour and thread count golden/generate.py pins, set before anything imports
# torch: ATen's AVX2/AVX512 kernels round differently in the last ulp from the scalar ones (e.g.
# fmod/remainder, the group-norm affine step), so CPU torch reproduces its own goldens only with
# the same pins. They do not affect the XLA device; an explicit environment value wins.
os.environ.setdefault("ATEN_CPU_CAPABILITY", "default")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
# MKL's and oneDNN's code paths too (generate.py pins them since the oracle work): oneDNN's
# AVX-512 gelu differs from its SSE4.1 one at the edge values, so without these the torch
# executor disagreed with the committed gelu stress goldens on AVX-512 machines.
os.environ.setdefault("MKL_CBWR", "COMPATIBLE")
os.environ.setdefault("MKL_ENABLE_INSTRUCTIONS", "SSE4_2")
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "SSE41")
os.environ.setdefault("DNNL_MAX_CPU_ISA", "SSE41")

PROTOCOL = 1
HERE = os.path.dirname(os.path.abspath(__file__))
SDK_MODULES = ["torch", "torch_neuronx", "torch_xla", "neuronxcc", "nki", "numpy"]
DTYPES = ["f32", "bf16", "f16", "f8e4m3fn", "f8e5m2", "i64", "i32", "i16", "i8", "u8", "bool", "c64"]
INJECT_KINDS = ["crash", "hang", "nan", "perturb", "wrong-shape", "wrong-dtype", "slow"]

# safetensors dtype tag -> golden dtype name (c64 is told apart by the case metadata).
ST_TO_DT = {
    "F32": "f32",
    "BF16": "bf16",
    "F16": "f16",
    "F8_E4M3": "f8e4m3fn",
    "F8_E5M2": "f8e5m2",
    "I64": "i64",
    "I32": "i32",
    "I16": "i16",
    "I8": "i8",
    "U8": "u8",
    "BOOL": "bool",
}


class CaseError(Exception):
    """A classified per-case failure."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


class Timeout(Exception):
    pass


# ------------------------------------------------------------------------------------------------
# Environment probe


def probe():
    """Which SDK pieces import, and their versions (None when not importable)."""
    found, errors = {}, {}
    for name in SDK_MODULES:
        try:
            mod = importlib.import_module(name)
            found[name] = str(getattr(mod, "__version__", "unknown"))
        except Exception as e:  # noqa: BLE001  (any import failure means "not available")
            found[name] = None
            errors[name] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
    try:
        import safetensors

        found["safetensors"] = safetensors.__version__
    except Exception as e:  # noqa: BLE001
        found["safetensors"] = None
        errors["safetensors"] = str(e)
    return found, errors


def instance_type():
    try:
        with open("/sys/devices/virtual/dmi/id/product_name") as f:
            return f.read().strip() or None
    except OSError:
        return None


def neuron_device_present():
    import glob

    return bool(glob.glob("/dev/neuron[0-9]*"))


def nki_standin_available():
    return os.path.isfile(os.path.join(HERE, "nki_standin", "__init__.py"))


class Executor:
    def __init__(self, device, injections, slow_seconds, nki_module=None):
        self.requested_device = device
        self.injections = injections
        self.slow_seconds = slow_seconds
        self.sdk, self.import_errors = probe()
        self.nki_module_spec = nki_module
        self.nki_module, self.nki_module_info = None, None
        self.modes = self._modes()

    def _modes(self):
        modes = {"echo": {"available": True, "protocol_test_only": True, "reason": ""}}
        if self.sdk["numpy"] is None or self.sdk["safetensors"] is None:
            reason = "numpy and safetensors are required: " + "; ".join(
                f"{k}: {v}" for k, v in self.import_errors.items() if k in ("numpy", "safetensors")
            )
            modes = {m: {"available": False, "reason": reason} for m in ("echo", "torch", "nki")}
            modes["nki-module"] = self._nki_module_mode()  # numpy + the trnsim package only
            return modes
        # torch
        if self.sdk["torch"] is None:
            modes["torch"] = {"available": False, "reason": f"torch is not importable ({self.import_errors['torch']})"}
        elif self.requested_device == "xla" and self.sdk["torch_xla"] is None:
            why = f"--device xla but torch_xla is not importable ({self.import_errors['torch_xla']})"
            modes["torch"] = {"available": False, "reason": why}
        elif self.requested_device == "neuron":
            # TorchNeuron (torch-neuronx 2.13+, SDK 2.33+) registers the native `neuron` device.
            if self.sdk["torch_neuronx"] is None:
                why = f"--device neuron but torch_neuronx is not importable ({self.import_errors['torch_neuronx']})"
                modes["torch"] = {"available": False, "reason": why}
            else:
                modes["torch"] = {"available": True, "reason": "", "device": "neuron"}
        else:
            use_xla = self.requested_device == "xla" or (self.requested_device == "auto" and self.sdk["torch_xla"])
            modes["torch"] = {"available": True, "reason": "", "device": "xla" if use_xla else "cpu"}
        # nki: every backend this host has; the first is the result the case is judged by.
        if self.sdk["neuronxcc"] is not None:
            backends = (["hardware"] if neuron_device_present() else []) + ["simulate_kernel"]
            modes["nki"] = {
                "available": True,
                "reason": "",
                "backends": backends,
                "backend": "neuronxcc " + self.sdk["neuronxcc"],
            }
        elif nki_standin_available():
            modes["nki"] = {
                "available": True,
                "reason": "",
                "backends": ["nki_standin"],
                "backend": "nki_standin (numpy stand-in, not AWS's simulator)",
            }
        else:
            modes["nki"] = {
                "available": False,
                "reason": "neither neuronxcc nor conformance/pyexec/nki_standin is available",
            }
        modes["nki-module"] = self._nki_module_mode()
        return modes

    def _nki_module_mode(self):
        """Imports the backend module (--nki-module) through the trnsim.nki front-end."""
        if self.nki_module_spec is None:
            return {"available": False, "reason": "no backend module: start the executor with --nki-module MODULE"}
        if HERE not in sys.path:
            sys.path.insert(0, HERE)
        import nki_module_backend

        try:
            self.nki_module = nki_module_backend.load(self.nki_module_spec)
            self.nki_module_info = nki_module_backend.describe(self.nki_module, self.nki_module_spec)
        except Exception as e:  # noqa: BLE001  (reported in the handshake, every case unsupported)
            tb = traceback.format_exc(limit=-2).strip().splitlines()
            return {
                "available": False,
                "reason": f"cannot load `{self.nki_module_spec}`: {type(e).__name__}: {e} ({' | '.join(tb[-3:])})",
            }
        return {"available": True, "reason": "", "backend": "trnsim.nki front-end on the trnsim simulator"}

    def hello(self):
        return {
            "type": "hello",
            "protocol": PROTOCOL,
            "executor": "trnconf_executor.py",
            "platform": {
                "system": platform.system(),
                "machine": platform.machine(),
                "python": platform.python_version(),
                "instance_type": instance_type(),
                "device": self.modes.get("torch", {}).get("device"),
            },
            "sdk": {k: self.sdk[k] for k in SDK_MODULES},
            "sdk_errors": self.import_errors,
            "modes": self.modes,
            "dtypes": DTYPES,
            "injections": [f"{k}:{p}" for k, p in self.injections],
            "nki_module": self.nki_module_info,
        }

    # --------------------------------------------------------------------------------------------
    def injection(self, case_id):
        for kind, pattern in self.injections:
            if matches(pattern, case_id):
                return kind
        return None

    def run_nki_module(self, req):
        """Mode nki-module: the case through the backend module's kernel and wrapper."""
        import nki_module_backend

        meta, tensors = load_case_np(req["case_file"])
        wanted = set(req.get("inputs") or [])
        inputs = {n: t for n, t in tensors.items() if n in wanted}  # never the golden outputs
        try:
            return nki_module_backend.run(self.nki_module, meta, inputs)
        except nki_module_backend.CaseError as e:
            raise CaseError(e.status, e.message) from e

    def run(self, req):
        """Handles one `run` request; returns the result message. Never raises."""
        start = time.monotonic()
        case_id = req.get("case_id", "")
        res = {
            "type": "result",
            "id": req.get("id"),
            "case_id": case_id,
            "status": "ok",
            "message": "",
            "outputs": None,
        }
        try:
            mode = req.get("mode")
            info = self.modes.get(mode)
            if info is None:
                raise CaseError("unsupported", f"unknown mode `{mode}` (modes: {', '.join(sorted(self.modes))})")
            if not info["available"]:
                raise CaseError("unsupported", f"mode `{mode}` cannot run here: {info['reason']}")
            inject = self.injection(case_id)
            if inject == "crash":
                sys.stderr.write(f"injected crash on {case_id}\n")
                sys.stderr.flush()
                os._exit(86)
            if inject == "hang":
                while True:
                    time.sleep(3600)
            if inject == "slow":
                time.sleep(self.slow_seconds)
            by_backend = None
            if mode == "echo":
                outputs, values = run_echo(req)
            elif mode == "torch":
                outputs, values = run_torch(req, info["device"])
            elif mode == "nki-module":
                outputs, values = self.run_nki_module(req)
            else:
                by_backend, values = run_nki(req, info), {}
                outputs = by_backend[info["backends"][0]]
            if inject in ("nan", "perturb", "wrong-shape", "wrong-dtype"):
                outputs = corrupt(outputs, inject)
            os.makedirs(os.path.dirname(os.path.abspath(req["output"])), exist_ok=True)
            write_outputs(req["output"], outputs, values)
            res["outputs"] = req["output"]
            if by_backend is not None:
                # One file per backend; the first (the result) is `outputs` itself.
                primary = info["backends"][0]
                res["backends"] = {primary: req["output"]}
                for name, tensors in by_backend.items():
                    if name != primary:
                        path = f"{req['output']}.{name}.safetensors"
                        write_outputs(path, tensors, {})
                        res["backends"][name] = path
        except CaseError as e:
            res["status"], res["message"] = e.status, e.message
        except Timeout:
            res["status"], res["message"] = "timeout", f"the case ran longer than {req.get('timeout_s')} s"
        except MemoryError:
            res["status"], res["message"] = "runtime_error", "out of memory"
        except Exception as e:  # noqa: BLE001  (an executor bug or I/O problem, reported per case)
            res["status"] = "runtime_error"
            res["message"] = f"executor error: {type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"
        res["elapsed_ms"] = round((time.monotonic() - start) * 1e3, 3)
        return res


def matches(pattern, case_id):
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(case_id, pattern)
    return pattern in case_id


# ------------------------------------------------------------------------------------------------
# Tensors in and out (numpy; torch only in mode torch)


def load_case_np(path):
    """The case metadata and its tensors as numpy arrays (raw dtypes; bf16/f8 as uint views)."""
    metadata, tensors = load_case_np_plain(path)
    return json.loads(metadata["trnconf"]), tensors


def write_outputs(path, outputs, values):
    """outputs: name -> (safetensors dtype tag, shape, raw bytes); values: pos -> golden Value."""
    header = {"__metadata__": {"trnconf_values": json.dumps(values, sort_keys=True)}}
    offset, blobs = 0, []
    for name in sorted(outputs):
        dtype, shape, data = outputs[name]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


NP_OF_TAG = {
    "F32": "<f4",
    "F16": "<f2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "BOOL": "u1",
    "BF16": "<u2",
    "F8_E4M3": "u1",
    "F8_E5M2": "u1",
    "F64": "<f8",
}


def corrupt(outputs, kind):
    """Fault injection on the outputs (raw bytes), for tests."""
    import numpy as np

    out = {}
    for name, (tag, shape, data) in outputs.items():
        n = math.prod(shape)
        if kind == "wrong-shape":
            shape = list(shape) + [1] if n else [1]
            data = data if n else b"\0" * int(np.dtype(NP_OF_TAG[tag]).itemsize)
        elif kind == "wrong-dtype":
            if tag == "F32":  # a dtype the comparison knows, so it is judged (a mismatch), not an I/O error
                a = np.frombuffer(data, "<f4").astype("<f2")
                tag, data = "F16", a.tobytes()
            else:
                a = np.frombuffer(data, NP_OF_TAG[tag]).astype("<f4")
                tag, data = "F32", a.tobytes()
        elif kind in ("nan", "perturb") and n:
            if tag in ("F32", "F16"):
                a = np.frombuffer(data, NP_OF_TAG[tag]).copy()
                if kind == "nan":
                    a[0] = np.nan
                else:
                    a = (a.astype("<f8") * (1 + 1e-3) + 1e-3).astype(a.dtype)
                data = a.tobytes()
            elif tag == "BF16":
                a = np.frombuffer(data, "<u2").astype("<u4") << 16
                f = a.view("<f4").copy()
                if kind == "nan":
                    f[0] = np.nan
                else:
                    f = (f.astype("<f8") * (1 + 1e-2) + 1e-2).astype("<f4")
                data = (f.view("<u4") >> 16).astype("<u2").tobytes()
            elif tag in ("I64", "I32", "I16", "I8", "U8"):
                a = np.frombuffer(data, NP_OF_TAG[tag]).copy()
                a[0] = a[0] + 1  # integers have no NaN: an off-by-one is the closest fault
                data = a.tobytes()
            elif tag == "BOOL":
                a = np.frombuffer(data, "u1").copy()
                a[0] = 1 - a[0]
                data = a.tobytes()
        out[name] = (tag, shape, data)
    return out


# ------------------------------------------------------------------------------------------------
# Modes


def output_names(meta):
    names = []
    for v in meta["outputs"]:
        ((kind, x),) = v.items()
        if kind == "tensor":
            names.append(x)
        elif kind == "tensors":
            names.extend(n for n in x if n is not None)
    return names


def run_echo(req):
    """PROTOCOL-TEST MODE: the golden outputs of the case file, unchanged."""
    meta, tensors = load_case_np(req["case_file"])
    outputs = {n: tensors[n] for n in output_names(meta)}
    values = {str(i): v for i, v in enumerate(meta["outputs"]) if next(iter(v)) not in ("tensor", "tensors")}
    return outputs, values


def run_nki(req, info):
    """Runs the emitted kernel the request names (`kernel`, a Python file from
    conformance/src/emit_nki.rs) on the program inputs (`device_inputs`: device bits by program
    tensor name) on every backend this host has, and returns {backend: outputs} (program outputs
    by program tensor name, raw device bits):

      hardware         neuronxcc.nki.baremetal on a NeuronCore (neuronxcc importable, /dev/neuron*)
      simulate_kernel  neuronxcc.nki.simulate_kernel, AWS's CPU simulator (neuronxcc importable)
      nki_standin      the numpy stand-in conformance/pyexec/nki_standin (no neuronxcc)

    The Rust side compares each with the golden and with its own simulator: the three-way report
    (docs/executor-protocol.md, "nki mode")."""
    kernel, dev_inputs = req.get("kernel"), req.get("device_inputs")
    if not kernel or not dev_inputs:
        raise CaseError(
            "unsupported",
            "mode nki needs `kernel` and `device_inputs` in the request "
            "(this trnconf does not send emitted NKI kernels)",
        )
    try:
        with open(kernel) as f:
            compile(f.read(), kernel, "exec")
    except SyntaxError as e:
        raise CaseError("compile_error", f"{kernel}: {e}") from e
    if info.get("backends") == ["nki_standin"]:
        return {"nki_standin": run_standin(kernel, dev_inputs, req["output"])}
    return run_neuronxcc(kernel, dev_inputs, info["backends"])


def run_standin(kernel, dev_inputs, output):
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    try:
        standin_main = importlib.import_module("nki_standin.__main__")
        importlib.import_module("nki_standin").install()
    except Exception as e:
        raise CaseError("unsupported", f"nki_standin does not import: {type(e).__name__}: {e}") from e
    tmp = output + ".standin.safetensors"
    try:
        standin_main.run_one(kernel, dev_inputs, tmp)
    except Exception as e:
        raise CaseError("runtime_error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}") from e
    _, tensors = load_case_np_plain(tmp)
    os.remove(tmp)
    return tensors


# numpy dtypes of safetensors tags for the Neuron SDK path (bf16 / fp8 through ml_dtypes, which
# the SDK's NKI depends on).
def _np_dtype(tag):
    if tag in ("BF16", "F8_E4M3", "F8_E5M2"):
        import ml_dtypes

        return {"BF16": ml_dtypes.bfloat16, "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2}[tag]
    return {
        "F32": "<f4",
        "F16": "<f2",
        "I32": "<i4",
        "I16": "<i2",
        "I8": "i1",
        "U8": "u1",
        "U16": "<u2",
        "U32": "<u4",
        "BOOL": "bool",
    }[tag]


def _tag_of(a):
    name = str(a.dtype)
    return {
        "float32": "F32",
        "float16": "F16",
        "bfloat16": "BF16",
        "float8_e4m3fn": "F8_E4M3",
        "float8_e5m2": "F8_E5M2",
        "int32": "I32",
        "int16": "I16",
        "int8": "I8",
        "uint8": "U8",
        "uint16": "U16",
        "uint32": "U32",
        "bool": "BOOL",
    }[name]


def run_neuronxcc(kernel_path, dev_inputs, backends):
    """The Neuron SDK path (SDK 2.26-2.28, legacy `neuronxcc.nki`). NOT YET RUN ON A DEVICE: the
    first hardware night checks it (docs/hardware.md, "First night")."""
    import neuronxcc.nki as nki
    import numpy as np

    spec = importlib.util.spec_from_file_location("emitted_kernel", kernel_path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:
        raise CaseError("compile_error", f"{type(e).__name__}: {e}") from e
    _, raw = load_case_np_plain(dev_inputs)
    args = [np.frombuffer(raw[n][2], _np_dtype(raw[n][0])).reshape(raw[n][1]) for n in mod.INPUT_NAMES]
    func = getattr(mod.kernel, "func", None) or getattr(mod.kernel, "__wrapped__", None) or mod.kernel
    results = {}
    for backend in backends:
        try:
            simulate = backend == "simulate_kernel"
            out = nki.simulate_kernel(mod.kernel, *args) if simulate else nki.baremetal(func)(*args)
        except Exception as e:
            text = f"{backend}: {type(e).__name__}: {e}"
            status = "compile_error" if "ompil" in text or "nki" in type(e).__module__ else "runtime_error"
            raise CaseError(status, text.splitlines()[0][:2000]) from e
        outs = out if isinstance(out, tuple) else (out,)
        if len(outs) != len(mod.OUTPUT_NAMES):
            raise CaseError(
                "runtime_error", f"{backend}: the kernel returned {len(outs)} tensors, expected {len(mod.OUTPUT_NAMES)}"
            )
        tensors = {}
        for name, o in zip(mod.OUTPUT_NAMES, outs):
            a = np.ascontiguousarray(np.asarray(o))
            tensors[name] = (_tag_of(a), list(a.shape), a.tobytes())
        results[backend] = tensors
    return results


def load_case_np_plain(path):
    """A safetensors file's `__metadata__` (a dict, empty when absent) and its raw tensors:
    name -> (dtype name, shape, bytes)."""
    with open(path, "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(header_len))
        base = 8 + header_len
        tensors = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, end = info["data_offsets"]
            f.seek(base + start)
            tensors[name] = (info["dtype"], info["shape"], f.read(end - start))
    return header.get("__metadata__", {}), tensors


_TORCH = {}


def torch_env(device):
    if "torch" not in _TORCH:
        import torch

        _TORCH["torch"] = torch
        _TORCH["DT"] = {
            "f32": torch.float32,
            "bf16": torch.bfloat16,
            "f16": torch.float16,
            "f8e4m3fn": torch.float8_e4m3fn,
            "f8e5m2": torch.float8_e5m2,
            "i64": torch.int64,
            "i32": torch.int32,
            "i16": torch.int16,
            "i8": torch.int8,
            "u8": torch.uint8,
            "bool": torch.bool,
            "c64": torch.complex64,
            "f64": torch.float64,
            "c128": torch.complex128,
        }
        if device == "xla":
            import torch_xla.core.xla_model as xm

            _TORCH["device"] = xm.xla_device()
            _TORCH["sync"] = xm.mark_step
        elif device == "neuron":
            import torch_neuronx  # noqa: F401  (registers the `neuron` device)

            _TORCH["device"] = torch.device("neuron")
            sync = getattr(getattr(torch, "neuron", None), "synchronize", None)
            _TORCH["sync"] = sync if callable(sync) else (lambda: None)
        else:
            _TORCH["device"] = torch.device("cpu")
            _TORCH["sync"] = lambda: None
        # The settings golden/generate.py runs under, so that CPU torch reproduces its own goldens:
        # one intra-op thread (the reduction split of multi-threaded CPU kernels, e.g. the
        # weight/bias gradients of native_layer_norm_backward, depends on the thread count),
        # deterministic algorithms, and uninitialised memory (empty*, resize_) filled with NaN /
        # the integer max.
        torch.set_num_threads(1)
        torch.set_default_dtype(torch.float32)
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = True
        import warnings

        warnings.filterwarnings("ignore")  # recorded edge cases make PyTorch warn; they are the point
    return _TORCH


def dec_float(x):
    if isinstance(x, str):
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[x]
    return float(x)


def enc_float(x):
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def with_layout(torch, t, tm):
    """A fresh copy of `t` with the strides and storage offset the generator's input had (the case
    stores data contiguous; the layout is in its `tensors` entry). The generator called the op on
    that very layout, and CPU kernels pick their code path (hence their summation order) by it, so
    the layout matters for values too, not only for the sym_* layout queries. Overlapping layouts
    (stride 0, from expand) are rebuilt by writing each element to its storage slot."""
    strides, offset = tm.get("strides"), tm.get("storage_offset", 0) or 0
    if (
        strides is None
        or t.dim() == 0
        or t.numel() == 0
        or len(strides) != t.dim()
        or any(st < 0 for st in strides)
        or (list(strides) == list(t.stride()) and offset == 0)
    ):
        return t.clone()
    span = offset + 1 + sum((n - 1) * st for n, st in zip(t.shape, strides))
    base = torch.zeros(span, dtype=t.dtype)
    slots = torch.arange(span).as_strided(t.shape, strides, offset).reshape(-1)
    base[slots] = t.reshape(-1)
    return base.as_strided(t.shape, strides, offset)


def run_torch(req, device):
    env = torch_env(device)
    torch, DT, dev = env["torch"], env["DT"], env["device"]
    from safetensors import safe_open

    wanted = set(req.get("inputs") or [])
    with safe_open(req["case_file"], framework="pt") as f:
        meta = json.loads(f.metadata()["trnconf"])
        tensors = {}
        for name in f.keys():
            if name.startswith("output.") or (wanted and name not in wanted):
                continue  # only inputs travel to the op
            t = f.get_tensor(name)
            tm = meta["tensors"].get(name, {})
            if tm.get("dtype") == "c64":
                t = torch.view_as_complex(t.contiguous())
            tensors[name] = t if device == "cpu" else t.to(dev)

    def fresh(name):
        """A new copy per use (in-place ops may write their inputs); on CPU with the recorded
        strides and storage offset. On the XLA device tensors have no user-visible layout."""
        if device == "cpu":
            return with_layout(torch, tensors[name], meta["tensors"].get(name, {}))
        return tensors[name].clone()

    def decode(v):
        ((kind, x),) = v.items()
        if kind == "tensor":
            return fresh(x)
        if kind == "tensors":
            return [None if n is None else fresh(n) for n in x]
        if kind in ("int", "bool", "str"):
            return x
        if kind == "float":
            return dec_float(x)
        if kind == "complex":
            return complex(dec_float(x[0]), dec_float(x[1]))
        if kind in ("ints", "bools"):
            return list(x)
        if kind == "floats":
            return [dec_float(y) for y in x]
        if kind == "dtype":
            return DT[x]
        if kind in ("layout", "memory_format"):
            return getattr(torch, x)
        if kind == "device":
            return dev if x != "meta" else torch.device(x)
        if kind == "none":
            return None
        raise CaseError("unsupported", f"unknown value kind `{kind}` in the case metadata")

    base, _, overload = meta["op"].partition(".")
    try:
        op = getattr(getattr(torch.ops.aten, base), overload or "default")
    except (AttributeError, RuntimeError) as e:
        raise CaseError("unsupported", f"torch {torch.__version__} has no aten::{meta['op']}: {e}") from e
    args = [decode(a) for a in meta["args"]]
    kwargs = {k: decode(v) for k, v in meta["kwargs"].items()}
    seed = meta.get("provenance", {}).get("seed")
    if seed is not None:
        torch.manual_seed(seed)
    try:
        result = op(*args, **kwargs)
        env["sync"]()
    except Exception as e:
        text = f"{type(e).__name__}: {e}"
        status = "compile_error" if device == "xla" and ("neuronx-cc" in text or "ompil" in text) else "runtime_error"
        if "not implemented for" in text or "NotImplementedError" in text:
            status = "unsupported"
        raise CaseError(status, f"aten::{meta['op']} raised {text}".splitlines()[0][:2000]) from e

    results = list(result) if isinstance(result, (tuple, list)) and len(meta["outputs"]) != 1 else [result]
    if len(meta["outputs"]) == 1 and isinstance(result, (tuple, list)) and "tensors" not in meta["outputs"][0]:
        results = list(result)
    outputs, values = {}, {}

    def put(name, t):
        if not isinstance(t, torch.Tensor):
            raise CaseError("runtime_error", f"`{name}`: the op returned {type(t).__name__}, not a tensor")
        t = t.detach().to("cpu").contiguous()
        if t.is_complex():
            t = torch.view_as_real(t.to(torch.complex64)).contiguous()
        tag = {
            torch.float32: "F32",
            torch.bfloat16: "BF16",
            torch.float16: "F16",
            torch.float8_e4m3fn: "F8_E4M3",
            torch.float8_e5m2: "F8_E5M2",
            torch.int64: "I64",
            torch.int32: "I32",
            torch.int16: "I16",
            torch.int8: "I8",
            torch.uint8: "U8",
            torch.bool: "BOOL",
            torch.float64: "F64",
        }.get(t.dtype)
        if tag is None:
            raise CaseError("runtime_error", f"`{name}`: output dtype {t.dtype} has no safetensors tag here")
        flat = t.reshape(-1)
        raw = flat.view(torch.uint8) if flat.numel() else flat
        outputs[name] = (tag, list(t.shape), raw.numpy().tobytes() if flat.numel() else b"")

    for pos, v in enumerate(meta["outputs"]):
        ((kind, x),) = v.items()
        got = results[pos] if pos < len(results) else None
        if kind == "tensor":
            put(x, got)
        elif kind == "tensors":
            for n, t in zip(x, got if isinstance(got, (list, tuple)) else []):
                if n is not None:
                    put(n, t)
        else:
            if isinstance(got, torch.Tensor):
                got = got.item()
            if got is None:  # an output the call's mask turned off (e.g. native_layer_norm_backward)
                values[str(pos)] = {"none": None}
            elif isinstance(got, bool):
                values[str(pos)] = {"bool": got}
            elif isinstance(got, int):
                values[str(pos)] = {"int": got}
            elif isinstance(got, float):
                values[str(pos)] = {"float": enc_float(got)}
            else:
                values[str(pos)] = {"str": str(got)}
    return outputs, values


# ------------------------------------------------------------------------------------------------
# Front ends


def serve(ex, proto_out):
    def send(msg):
        proto_out.write(json.dumps(msg) + "\n")
        proto_out.flush()

    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
        except json.JSONDecodeError as e:
            send({"type": "error", "message": f"bad request line: {e}"})
            continue
        kind = req.get("type")
        if kind == "hello":
            send(ex.hello())
        elif kind == "run":
            send(ex.run(req))
        elif kind == "shutdown":
            send({"type": "bye"})
            return 0
        else:
            send({"type": "error", "id": req.get("id"), "message": f"unknown request type `{kind}`"})
    return 0


def batch(ex, manifest, results_path, default_mode):
    """Runs every manifest line (a `run` request without `type`), appending one result line per case
    to results_path; cases already in results_path are skipped. A Python-level timeout per case
    uses SIGALRM (a hard hang or crash ends the batch: run it again to resume)."""
    done = set()
    if os.path.exists(results_path):
        with open(results_path) as f:
            for line in f:
                # A torn last line from a killed run is skipped: that case runs again.
                with contextlib.suppress(json.JSONDecodeError, KeyError):
                    done.add(json.loads(line)["case_id"])
    with open(manifest) as f:
        jobs = [json.loads(line) for line in f if line.strip()]

    def on_alarm(_sig, _frame):
        raise Timeout()

    signal.signal(signal.SIGALRM, on_alarm)
    skipped = ran = 0
    with open(results_path, "a") as out:
        for job in jobs:
            job.setdefault("mode", default_mode)
            if job["case_id"] in done:
                skipped += 1
                continue
            timeout = job.get("timeout_s")
            if timeout:
                signal.setitimer(signal.ITIMER_REAL, float(timeout))
            try:
                res = ex.run(job)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            res.pop("type", None)
            out.write(json.dumps(res) + "\n")
            out.flush()
            done.add(job["case_id"])
            ran += 1
    sys.stderr.write(f"batch: {ran} run, {skipped} already in {results_path}\n")
    return 0


def parse_inject(s):
    kind, _, pattern = s.partition(":")
    if kind not in INJECT_KINDS:
        raise argparse.ArgumentTypeError(f"unknown fault `{kind}` (one of {', '.join(INJECT_KINDS)})")
    return kind, pattern or "*"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", nargs="?", default="serve", choices=["serve", "batch", "hello"])
    p.add_argument(
        "--device",
        choices=["auto", "cpu", "xla", "neuron"],
        default="auto",
        help="torch mode: auto = XLA (torch-neuronx) when importable, else CPU",
    )
    p.add_argument("--inject", action="append", type=parse_inject, default=[], metavar="KIND[:PATTERN]")
    p.add_argument("--slow-seconds", type=float, default=0.5)
    p.add_argument("--manifest", help="batch: JSON-lines run requests")
    p.add_argument("--results", help="batch: JSON-lines results (appended; finished cases are skipped)")
    p.add_argument("--mode", default="torch", help="batch: mode for manifest lines without one")
    p.add_argument(
        "--nki-module",
        metavar="MODULE",
        help="mode nki-module: the NKI backend module (dotted name or .py path) whose kernels run the cases",
    )
    a = p.parse_args(argv)

    # Keep the protocol channel clean: anything else printing to stdout goes to stderr.
    proto_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    ex = Executor(a.device, a.inject, a.slow_seconds, a.nki_module)
    if a.command == "hello":
        proto_out.write(json.dumps(ex.hello(), indent=1) + "\n")
        proto_out.flush()
        return 0
    if a.command == "batch":
        if not a.manifest or not a.results:
            p.error("batch needs --manifest and --results")
        return batch(ex, a.manifest, a.results, a.mode)
    return serve(ex, proto_out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
