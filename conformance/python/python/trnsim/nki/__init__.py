"""The NKI front-end of trnsim: run NKI kernels (legacy `neuronxcc.nki`, Neuron SDK 2.26-2.28)
unmodified on the simulator. See docs/nki.md.

    import trnsim.nki
    trnsim.nki.install()                 # `neuronxcc.nki` now resolves to this front-end
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    @nki.jit
    def add_kernel(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), nl.load(b)))
        return out

    c = add_kernel(a, b)                 # numpy in, numpy out; traced, then run on trnsim

A call traces the Python function (every loop unrolled, every SPMD instance in turn) into one
trnsim Program, runs it, and returns NumPy arrays. `last_run()` gives the Program, its statistics
and the trace time of the latest call.
"""

import functools
import inspect
import itertools
import json
import os
import sys
import time
import types

import numpy as np

from . import _alloc, _core, compiler, isa, language, typing
from ._alloc import NkiAllocationError
from ._core import NkiError, Tracer, View

__all__ = [
    "DeviceTensor",
    "NkiAllocationError",
    "NkiError",
    "baremetal",
    "benchmark",
    "compiler",
    "device",
    "install",
    "isa",
    "jit",
    "language",
    "last_run",
    "profile",
    "simulate_kernel",
    "tensor",
    "to_program",
    "trace",
    "typing",
]

tensor = View  # `nki.tensor`: the type of kernel tensors


class DeviceTensor:
    """A tensor that lives in a `trnsim.Session` (simulated HBM), passed to a kernel in place of a
    NumPy array: the kernel then runs in that session, reading its inputs there and leaving its
    outputs there (returned as DeviceTensors), with no copy to or from the host.

        s = trnsim.Session(); s.put("x", x)
        h = add_kernel(device(s, "x"), device(s, "x"))     # h: a DeviceTensor in s
        y = exp_kernel(h)                                  # still on the device
        s.get(y.name)                                      # the only copy back
    """

    def __init__(self, session, name):
        import trnsim
        self.session, self.name = session, name
        dt, shape = session.info(name)
        self.dtype = trnsim.numpy_dtype(dt)
        self.shape = tuple(shape)

    def __repr__(self):
        return f"<trnsim.nki.DeviceTensor {self.name!r} {list(self.shape)} {self.dtype}>"


def device(session, name):
    """The session tensor `name` as a kernel argument."""
    return DeviceTensor(session, name)

_LAST = {}


class KernelRun:
    """A traced kernel call: the Program (dict) and the HBM inputs it needs."""

    def __init__(self, program, inputs, outputs, ret_shape, inout, trace_s, device_args=None):
        self.program = program
        self.inputs = inputs
        self.device_args = device_args or {}  # program tensor name -> DeviceTensor
        self.outputs = outputs  # names of returned tensors (tuple structure in ret_shape)
        self.ret_shape = ret_shape
        self.inout = inout  # param name -> (caller array, tensor name) written in place
        self.trace_s = trace_s
        self.stats = None
        self.run_s = None

    def program_json(self):
        return json.dumps(self.program)

    def run(self, target=None, numerics=None):
        import trnsim
        prog = trnsim.Program.from_json(self.program_json())
        if hasattr(prog, "infer_waits"):
            prog.infer_waits()
        if self.device_args:
            return _session_run(self, prog)
        t0 = time.perf_counter()
        res = trnsim.run(prog, self.inputs, target=target or self.program["target"], numerics=numerics)
        self.run_s = time.perf_counter() - t0
        self.stats = res.stats
        for arr, name in self.inout.values():
            if isinstance(arr, np.ndarray) and arr.flags.writeable:
                arr[...] = res.outputs[name].reshape(arr.shape)
        # a returned parameter the kernel never wrote is returned as it came in
        outs = [res.outputs[n] if n in res.outputs else np.array(self.inputs[n]) for n in self.outputs]
        if self.ret_shape == "none":
            return None
        if self.ret_shape == "single":
            return outs[0]
        return tuple(outs)


def _grid_dims(grid):
    dims = []
    for g in grid:
        dims.append(int(g))
    return tuple(dims)


def to_program(func, args, kwargs=None, grid=(), target="trn1"):
    """Trace `func(*args, **kwargs)` over the SPMD `grid` into a KernelRun (not yet executed)."""
    kwargs = kwargs or {}
    t0 = time.perf_counter()
    tr = Tracer(target)
    sig = inspect.signature(func)
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    call_args = {}
    param_arrays = {}
    for name, val in bound.arguments.items():
        kind = sig.parameters[name].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            vals = []
            for i, v in enumerate(val):
                vals.append(_wrap_arg(tr, f"{name}{i}", v, param_arrays))
            call_args[name] = tuple(vals)
        elif kind == inspect.Parameter.VAR_KEYWORD:
            call_args[name] = {k: _wrap_arg(tr, k, v, param_arrays) for k, v in val.items()}
        else:
            call_args[name] = _wrap_arg(tr, name, val, param_arrays)
    pos, kw = [], {}
    for name, p in sig.parameters.items():
        if p.kind == inspect.Parameter.VAR_POSITIONAL:
            pos.extend(call_args[name])
        elif p.kind == inspect.Parameter.VAR_KEYWORD:
            kw.update(call_args[name])
        elif p.kind == inspect.Parameter.KEYWORD_ONLY:
            kw[name] = call_args[name]
        else:
            pos.append(call_args[name])
    dims = _grid_dims(grid) if grid else ()
    ret = None
    prev = Tracer._current
    Tracer._current = tr
    try:
        tr.grid = dims
        ids = list(itertools.product(*[range(d) for d in dims])) if dims else [()]
        for i, pid in enumerate(ids):
            tr.program_id = pid
            tr.instance = i
            tr.shared_ordinal = 0
            ret = func(*pos, **kw)
    finally:
        Tracer._current = prev
    code = getattr(func, "__code__", None)
    def_loc = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}" if code else None
    return _finish(tr, ret, param_arrays, time.perf_counter() - t0, def_loc)


def _wrap_arg(tr, name, val, param_arrays):
    if isinstance(val, DeviceTensor):
        st = tr.new_hbm(val.shape, val.dtype, "input", name, array=None)
        st.device = val
        return View.full(st)
    if isinstance(val, np.ndarray):
        st = tr.new_hbm(val.shape, val.dtype, "input", name, array=val)
        param_arrays[st.name] = val
        return View.full(st)
    return val


def _finish(tr, ret, param_arrays, trace_s, def_loc):
    allocation = _alloc.assign(tr)  # SBUF/PSUM addresses from the tiles' live ranges (docs/nki-allocation.md)
    if ret is None:
        rets, shape = [], "none"
    elif isinstance(ret, (tuple, list)):
        rets, shape = list(ret), "tuple"
    else:
        rets, shape = [ret], "single"
    out_names = []
    for r in rets:
        if not isinstance(r, View) or r.base.on_chip or not r.is_full():
            raise NkiError("a kernel returns whole HBM tensors (nl.ndarray(..., buffer=nl.shared_hbm))")
        out_names.append(_core.storage_of(r.base).name)
    hbm, inputs, inout, pre, device_args = [], {}, {}, [], {}
    returned = set(out_names)
    for st in tr.hbm:
        decl = {"name": st.name, "dtype": _core.trn_name(st.dtype), "shape": list(st.shape)}
        if st.kind == "input":
            dev = getattr(st, "device", None)
            if dev is not None:
                device_args[st.name] = dev
            if st.written:
                # a parameter the kernel writes: an output, first filled from an input twin so
                # the kernel still reads the caller's values (as on a device)
                twin = st.name + ".in"
                hbm.append({"name": twin, "dtype": decl["dtype"], "shape": decl["shape"], "role": "input"})
                if dev is None:
                    inputs[twin] = st.array
                pre.append(_whole_copy(st, twin, def_loc))
                hbm.append(dict(decl, role="output"))
                inout[st.name] = (param_arrays.get(st.name), st.name)
            else:
                hbm.append(dict(decl, role="input"))
                if dev is None:
                    inputs[st.name] = st.array
        elif st.kind == "constant":
            hbm.append(dict(decl, role="input"))
            inputs[st.name] = st.array
        else:
            hbm.append(dict(decl, role="output" if st.name in returned else "scratch"))
    program = {"target": tr.target, "hbm": hbm, "instructions": pre + tr.instructions}
    run = KernelRun(program, inputs, out_names, shape, inout, trace_s, device_args)
    run.allocation = allocation  # per memory: tiles, peak live bytes, highest byte used, usable bytes
    return run


def _whole_copy(st, src_name, loc):
    """The DMA filling a written parameter from its input twin; its loc is the kernel's `def` line."""
    n = int(np.prod(st.shape)) if st.shape else 1
    cols = next(c for c in range(min(n, 65535), 0, -1) if n % c == 0)  # a free dim holds <= 65535
    rows = n // cols
    ap = {"dtype": _core.trn_name(st.dtype), "partitions": rows, "partition_step": cols if rows > 1 else 0,
          "free": [[1, cols]]}
    return {"engine": "dma", "op": {"dma_copy": {"dst": dict(ap, mem={"hbm": st.name}),
                                                 "src": dict(ap, mem={"hbm": src_name})}},
            "loc": loc or "kernel parameter"}


class Kernel:
    """A kernel function with its launch grid and mode; calling it traces and runs it."""

    def __init__(self, func, mode="auto", grid=(), target=None, numerics=None, **options):
        self.func = func
        self.mode = mode
        self.grid = grid
        self.options = options
        self.target = target
        self.numerics = numerics
        self.benchmark_result = None
        functools.update_wrapper(self, func)

    def __getitem__(self, grid):
        if not isinstance(grid, tuple):
            grid = (grid,)
        k = Kernel(self.func, self.mode, grid, self.target, self.numerics, **self.options)
        return k

    def _target(self):
        if self.target:
            return self.target
        pt = self.options.get("platform_target")
        return "trn2" if pt in ("trn2", "gen3") else "trn1"

    def __call__(self, *args, **kwargs):
        kr = to_program(self.func, args, kwargs, self.grid, self._target())
        _LAST.clear()
        _LAST.update(run=kr)
        out = kr.run(numerics=self.numerics)
        if self.mode == "benchmark":
            self.benchmark_result = BenchmarkResult(kr.stats)
        return out


def _session_run(kr, prog):
    """Run on the session of the kernel's DeviceTensor arguments: inputs bound to their session
    tensors, host inputs (constants) put first, outputs created in the session under fresh names."""
    sessions = {id(d.session): d.session for d in kr.device_args.values()}
    if len(sessions) != 1:
        raise NkiError("all device tensors of one kernel call must be in the same trnsim.Session")
    sess = next(iter(sessions.values()))
    bind = {hbm_name: d.name for hbm_name, d in kr.device_args.items()}
    for name, arr in kr.inputs.items():
        if name not in bind:
            dev = f"{name}#{next(_SESSION_NAMES)}"
            sess.put(dev, arr)
            bind[name] = dev
    for name, d in kr.device_args.items():
        if name + ".in" in {h["name"] for h in kr.program["hbm"]}:
            bind[name + ".in"] = d.name  # a parameter the kernel writes: updated in place
    outs = []
    for n in kr.outputs:
        if n not in bind:
            bind[n] = f"{n}#{next(_SESSION_NAMES)}"
        outs.append(bind[n])
    kr.stats = sess.run(prog, bind)
    res = [DeviceTensor(sess, n) for n in outs]
    if kr.ret_shape == "none":
        return None
    return res[0] if kr.ret_shape == "single" else tuple(res)


_SESSION_NAMES = itertools.count(1)


class _Latency:
    def __init__(self, us):
        self.us = us

    def get_latency_percentile(self, p):
        """Every percentile is the simulator's estimate (one deterministic run), in microseconds."""
        return self.us


class BenchmarkResult:
    """`benchmark_result.nc_latency.get_latency_percentile(p)` as AWS's, from the simulator's
    estimate in microseconds: the timeline's makespan when the simulator reports one, else the
    busiest engine's estimated time. `stats` is the simulator's whole statistics dict."""

    def __init__(self, stats):
        self.stats = stats
        stats = stats if isinstance(stats, dict) else {}
        est = stats.get("est_ns") or {}
        timeline = stats.get("timeline") or {}
        ns = timeline.get("makespan_ns") if isinstance(timeline, dict) else None
        if not ns:  # no timeline: the busiest engine bounds the time from below
            ns = max(est.values()) if est else 0.0
        self.nc_latency = _Latency(ns / 1000.0)


def jit(func=None, mode="auto", **options):
    """`@nki.jit` / `nki.jit(mode=...)`: NumPy calls run on trnsim."""
    if func is None:
        return lambda f: Kernel(f, mode, **options)
    return Kernel(func, mode, **options)


def baremetal(func=None, **options):
    """`nki.baremetal(kernel)` / `@nki.baremetal(save_neff_name=...)`: runs on trnsim (no NEFF)."""
    if func is None:
        return lambda f: Kernel(f.func if isinstance(f, Kernel) else f, "baremetal", **options)
    return Kernel(func.func if isinstance(func, Kernel) else func, "baremetal", **options)


def benchmark(func=None, warmup=10, iters=100, **options):
    """`nki.benchmark(warmup=, iters=)(kernel)`: one simulated run; `kernel.benchmark_result` holds
    the simulator's statistics (warmup/iters are irrelevant to a deterministic simulator)."""
    if func is None:
        return lambda f: Kernel(f.func if isinstance(f, Kernel) else f, "benchmark", **options)
    return Kernel(func.func if isinstance(func, Kernel) else func, "benchmark", **options)


def profile(func=None, **options):
    """`nki.profile`: runs like benchmark (no profile files: trnsim has no NEFF/NTFF)."""
    return benchmark(func, **options)


def simulate_kernel(kernel, *args, **kwargs):
    """Run `kernel` (a `@nki.jit` function, a plain function, or `kernel[grid]`) on trnsim."""
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    return k(*args, **kwargs)


def trace(func=None, **options):
    """`@nki.trace`: a sub-kernel called from a kernel is traced inline."""
    if func is None:
        return lambda f: f
    return func


def last_run():
    """The KernelRun of the latest kernel call (program, inputs, stats, trace_s, run_s)."""
    return _LAST.get("run")


# ---------------------------------------------------------------------------------------------
# install(): make `neuronxcc.nki` (and its submodules) resolve to this package


def install(current=False):
    """Register `neuronxcc`, `neuronxcc.nki`, `neuronxcc.nki.language`, `.isa`, `.typing` and
    `.compiler` in sys.modules as this front-end. Idempotent; returns the `neuronxcc.nki` module.

    current=True also registers the current namespace `nki`, `nki.language`, `nki.isa`,
    `nki.typing` (NKI 0.2+, a partial stretch: see docs/nki.md), whose kernels default to the trn2
    target. Its `nki.isa` is the legacy one plus the calls legacy NKI lacks (`rng`,
    `set_rng_seed`: `isa_current`)."""
    this = sys.modules[__name__]
    if current:
        from . import current as cur
        sys.modules["nki"] = cur
        for sub in ("language", "isa", "typing"):
            sys.modules[f"nki.{sub}"] = getattr(cur, sub)
    top = sys.modules.get("neuronxcc")
    if top is None or not getattr(top, "_trnsim", False):
        top = types.ModuleType("neuronxcc")
        top.__path__ = []
        top._trnsim = True
        sys.modules["neuronxcc"] = top
    top.nki = this
    sys.modules["neuronxcc.nki"] = this
    for sub in ("language", "isa", "typing", "compiler"):
        sys.modules[f"neuronxcc.nki.{sub}"] = getattr(this, sub)
    return this
