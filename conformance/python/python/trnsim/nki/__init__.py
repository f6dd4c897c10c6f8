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
import re
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

    def scheduled(self):
        """The program as `run` runs it, a `trnsim.Program`: the trace with its DMAs spread over
        the queues (`Program.spread_dmas`: large copies cut into pieces for several queues, then
        round robin per core, as trnconf's lowerings schedule theirs) and the waits inferred."""
        import trnsim

        prog = trnsim.Program.from_json(self.program_json())
        prog.spread_dmas()
        prog.infer_waits()
        return prog

    def scheduled_json(self):
        """`scheduled()` as JSON text. `program_json` is the trace as it is, every DMA without a
        queue (the default assignment runs them all on queue 0)."""
        return self.scheduled().to_json()

    def _cross_core(self, e):
        """Whether the race `e` names instructions of the two physical cores (LNC=2)."""
        ins = self.program["instructions"]
        cores = {ins[e.index].get("core", 0)} if e.index is not None and e.index < len(ins) else set()
        m = re.search(r"with instruction #(\d+)", e.message)
        if m and int(m.group(1)) < len(ins):
            cores.add(ins[int(m.group(1))].get("core", 0))
        return cores == {0, 1}

    def _unordered_read(self, e):
        """Whether `e` is a read of HBM bytes nothing wrote yet where the other physical core
        writes that tensor (LNC=2: in program order core 0 runs before core 1 between barriers,
        so a read of what the other core writes with no barrier between them fails this way)."""
        ins = self.program["instructions"]
        m = re.search(r"reads memory nothing wrote: HBM tensor `([^`]+)`", e.message)
        if not m or e.index is None or e.index >= len(ins):
            return False
        me = ins[e.index].get("core", 0)
        for i in ins:
            ((_, f),) = i["op"].items()
            dst = f.get("dst") if isinstance(f, dict) else None
            mem = dst.get("mem") if isinstance(dst, dict) else None
            if i.get("core", 0) != me and isinstance(mem, dict) and mem.get("hbm") == m.group(1):
                return True
        return False

    def run(self, target=None, numerics=None):
        import trnsim

        prog = self.scheduled()
        if self.device_args:
            return _session_run(self, prog)
        t0 = time.perf_counter()
        try:
            res = trnsim.run(prog, self.inputs, target=target or self.program["target"], numerics=numerics)
        except trnsim.SimError as e:
            if e.index is None and "was not fully written" in e.message:
                e.args = (str(e) + _PARTLY_WRITTEN,)
                e.message += _PARTLY_WRITTEN
            elif "race" in e.message and self._cross_core(e) or self._unordered_read(e):
                e.args = (str(e) + _CROSS_CORE,)
                e.message += _CROSS_CORE
            raise
        self.run_s = time.perf_counter() - t0
        self.stats = res.stats
        for arr, name in self.inout.values():
            if isinstance(arr, np.ndarray) and arr.flags.writeable:
                arr[...] = res.outputs[name].reshape(arr.shape)
        # a returned parameter the kernel never wrote is returned as it came in
        outs = [res.outputs[n] if n in res.outputs else np.array(self.inputs[n]) for n in self.outputs]
        outs = [
            o.reshape(sh) if tuple(o.shape) != sh else o
            for o, sh in zip(outs, getattr(self, "out_shapes", [o.shape for o in outs]))
        ]
        if self.ret_shape == "none":
            return None
        if self.ret_shape == "single":
            return outs[0]
        return tuple(outs)


_CROSS_CORE = (
    ". The two instructions run on the two physical cores of an LNC=2 kernel (kernel[2]), which run "
    "concurrently: only a barrier orders one core's accesses after the other's (nisa.core_barrier on "
    "the shared tensor, or a nisa.sendrecv exchange), else each core's access can come first"
)

_PARTLY_WRITTEN = (
    ". AWS's NKI simulator returns such an output with whatever its array held there (NaN or 4 "
    "for a fresh tensor); on a device those bytes are whatever HBM held, so trnsim refuses the run "
    "rather than return them: store every element of each output"
)


def _grid_dims(grid):
    dims = []
    for g in grid:
        dims.append(int(g))
    return tuple(dims)


def to_program(func, args, kwargs=None, grid=(), target="trn2", lnc=None, api="legacy"):
    """Trace `func(*args, **kwargs)` over the SPMD `grid` into a KernelRun (not yet executed).
    `lnc=2` (the current API's `kernel[2]`): the two physical cores of a logical core, each
    traced once (`program_id(0)` is the core) into one two-core program; see `_two_core_order`."""
    kwargs = kwargs or {}
    t0 = time.perf_counter()
    tr = Tracer(target, api)
    tr.lnc = lnc or 1
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
    if lnc is not None:
        dims = (lnc,)
    starts = []
    ret = None
    prev = Tracer._current
    Tracer._current = tr
    try:
        tr.grid = dims
        ids = list(itertools.product(*[range(d) for d in dims])) if dims else [()]
        for i, pid in enumerate(ids):
            starts.append(len(tr.instructions))
            tr.program_id = pid
            tr.instance = i
            tr.shared_ordinal = 0
            tr.exchange_ordinal = 0
            ret = func(*pos, **kw)
            if tr.lnc > 1 and i > 0:
                for ins in tr.instructions[starts[i] :]:
                    ins["core"] = i  # the physical core whose queues, SBUF and PSUM run it
    finally:
        Tracer._current = prev
    code = getattr(func, "__code__", None)
    def_loc = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}" if code else None
    if tr.lnc > 1:
        tr.core_starts = starts
        _check_exchanges(tr, def_loc)
    return _finish(tr, ret, param_arrays, time.perf_counter() - t0, def_loc)


def _is_barrier(ins):
    return "core_barrier" in ins["op"]


def _check_exchanges(tr, def_loc):
    """Both cores of an LNC=2 kernel must reach the same number of barriers (`core_barrier`, and
    the one inside each `sendrecv`), and the n-th `sendrecv` of each core must name the other's
    n-th as its partner: a barrier waits for its partner, so otherwise the cores wait forever."""
    bounds = [*tr.core_starts, len(tr.instructions)]
    counts = [sum(1 for ins in tr.instructions[bounds[c] : bounds[c + 1]] if _is_barrier(ins)) for c in (0, 1)]
    if counts[0] != counts[1]:
        raise NkiError(
            f"kernel[2] (LNC=2): physical core 0 reaches {counts[0]} barriers (core_barrier, and one inside each "
            f"sendrecv) and core 1 reaches {counts[1]}: each barrier waits for its partner on the other core, so "
            "the cores would wait forever",
            def_loc,
        )
    ex = getattr(tr, "exchanges", {})
    for n, calls in sorted(ex.items()):
        if set(calls) != {0, 1}:
            only = next(iter(calls))
            raise NkiError(
                f"kernel[2] (LNC=2): sendrecv #{n} runs on core {only} only: its partner would wait forever",
                calls[only]["loc"],
            )
        for c in (0, 1):
            to = calls[c]["send_to"]
            if calls[to]["recv_from"] != c:
                raise NkiError(
                    f"kernel[2] (LNC=2): sendrecv #{n} on core {c} sends to core {to}, but core {to}'s "
                    f"sendrecv #{n} receives from core {calls[to]['recv_from']}: what core {c} sends would "
                    "never be received",
                    calls[c]["loc"],
                )


def _two_core_order(tr, pre):
    """One program order for the two cores that the simulator can execute as written: each core's
    instructions up to its next barrier, core 0's then core 1's, then the two barriers of the pair,
    and so on (docs/timeline.md, "Two cores": values come from program order, and the race
    detector checks that the concurrent cores cannot see anything else). The twin copies that
    fill the parameters a kernel writes (`pre`) run on core 0 first; a barrier pair on each such
    parameter orders them before core 1 reads it."""
    bounds = [*tr.core_starts, len(tr.instructions)]
    segs = []
    for c in (0, 1):
        cur, out = [], []
        for ins in tr.instructions[bounds[c] : bounds[c + 1]]:
            cur.append(ins)
            if _is_barrier(ins):
                out.append(cur)
                cur = []
        out.append(cur)
        segs.append(out)
    order = list(pre)
    for ins in pre:
        data = ins["op"]["dma_copy"]["dst"]
        for c in (0, 1):
            b = {"engine": "gpsimd", "op": {"core_barrier": {"data": data}}, "loc": ins.get("loc")}
            if c:
                b["core"] = 1
            order.append(b)
    for k in range(len(segs[0])):
        a, b = segs[0][k], segs[1][k]
        if k + 1 < len(segs[0]):
            order += a[:-1] + b[:-1] + [a[-1], b[-1]]
        else:
            order += a + b
    return order


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
    out_names, out_shapes = [], []
    for r in rets:
        if isinstance(r, View) and r.base.on_chip:
            raise NkiError(
                f"the kernel returns {r.base.describe()}, an on-chip tile: a kernel returns HBM tensors "
                "(nl.ndarray(..., buffer=nl.shared_hbm)) that it stored into. AWS's NumPy simulator hands such a tile "
                "back as an array, but on a device an SBUF/PSUM tile is not an output and does not survive the "
                "kernel, so trnsim refuses it",
                getattr(r.base, "loc", None) or def_loc,
            )
        if not isinstance(r, View) or not r.is_full():
            raise NkiError(
                f"the kernel returns {type(r).__name__ if not isinstance(r, View) else 'part of a tensor'}"
                ": a kernel returns whole HBM tensors (nl.ndarray(..., buffer=nl.shared_hbm))",
                def_loc,
            )
        out_names.append(_core.storage_of(r.base).name)
        out_shapes.append(tuple(r.shape))
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
    if getattr(tr, "lnc", 1) > 1:
        order = _two_core_order(tr, pre)
    else:
        order = pre + tr.instructions
    program = {"target": tr.target, "hbm": hbm, "instructions": order}
    kr = KernelRun(program, inputs, out_names, shape, inout, trace_s, device_args)
    kr.allocation = allocation  # per memory: tiles, peak live bytes, highest byte used, usable bytes
    kr.out_shapes = out_shapes  # a returned reshaped view comes back in its own shape
    return kr


def _whole_copy(st, src_name, loc):
    """The DMA filling a written parameter from its input twin; its loc is the kernel's `def` line."""
    n = int(np.prod(st.shape)) if st.shape else 1
    cols = next(c for c in range(min(n, 65535), 0, -1) if n % c == 0)  # a free dim holds <= 65535
    rows = n // cols
    ap = {
        "dtype": _core.trn_name(st.dtype),
        "partitions": rows,
        "partition_step": cols if rows > 1 else 0,
        "free": [[1, cols]],
    }
    return {
        "engine": "dma",
        "op": {"dma_copy": {"dst": dict(ap, mem={"hbm": st.name}), "src": dict(ap, mem={"hbm": src_name})}},
        "loc": loc or "kernel parameter",
    }


class Kernel:
    """A kernel function with its launch grid and mode; calling it traces and runs it.

    `api="legacy"` (`neuronxcc.nki.jit`): `kernel[g0, g1, ...]` is an SPMD grid, and
    `platform_target=` (else NEURON_PLATFORM_TARGET_OVERRIDE, else trn2) picks the generation.
    `api="current"` (`nki.jit`): `kernel[lnc]` is the LNC degree (1 or 2 physical cores), the
    generation comes from NEURON_PLATFORM_TARGET_OVERRIDE (else trn2), and the arguments may be
    NumPy arrays or torch tensors. trn2 is the default of both: NKI 0.3+ and TorchNeuron run on
    Trn2/Trn3 only (docs/isa.md, "Generations"); a trn1 kernel names its target."""

    # Not a test, whatever its name: AWS's per-instruction test modules define kernels named
    # `test_*` at module level, and pytest would otherwise collect this callable (it carries the
    # function's `__wrapped__`) and fail on the kernel's parameters as missing fixtures.
    __test__ = False

    def __init__(self, func, mode="auto", grid=(), target=None, numerics=None, api="legacy", lnc=None, **options):
        self.func = func
        self.mode = mode
        self.grid = grid
        self.options = options
        self.target = target
        self.numerics = numerics
        self.api = api
        self.lnc = lnc
        self.benchmark_result = None
        functools.update_wrapper(self, func)

    def __getitem__(self, grid):
        if self.api == "current":
            lnc = grid[0] if isinstance(grid, tuple) and len(grid) == 1 else grid
            if isinstance(grid, tuple) and len(grid) != 1 or isinstance(lnc, bool) or lnc not in (1, 2):
                raise NkiError(
                    f"{getattr(self.func, '__name__', 'kernel')}[{grid!r}]: in the current NKI the bracket "
                    "is the LNC degree, 1 or 2 physical cores (an SPMD grid is the legacy "
                    "neuronxcc.nki API)",
                    _def_loc(self.func),
                )
            return Kernel(self.func, self.mode, (), self.target, self.numerics, "current", lnc, **self.options)
        if not isinstance(grid, tuple):
            grid = (grid,)
        return Kernel(self.func, self.mode, grid, self.target, self.numerics, self.api, None, **self.options)

    def _target(self):
        from ._targets import env_target, parse_target

        loc = _def_loc(self.func)
        if self.target:
            return parse_target(self.target, "target=", loc)
        pt = self.options.get("platform_target")
        if pt is not None:
            return parse_target(pt, "platform_target=", loc)
        return env_target(loc) or "trn2"

    def _lnc(self):
        if self.api != "current":
            return None
        if self.lnc is not None:
            return self.lnc
        v = os.environ.get("NEURON_LOGICAL_NC_CONFIG", "").strip()
        if not v:
            return 1
        if v not in ("1", "2"):
            raise NkiError(f"NEURON_LOGICAL_NC_CONFIG={v!r}: the LNC degree is 1 or 2", _def_loc(self.func))
        return int(v)

    def __call__(self, *args, **kwargs):
        if Tracer._current is not None:
            # a kernel called from a kernel being traced (any mode=, `@nki.jit(mode='trace')`
            # included): a sub-kernel, traced inline into the caller's program
            return self.func(*args, **kwargs)
        from . import _frameworks

        conv = _frameworks.Converted(args, kwargs) if self.api == "current" else None
        if conv is not None:
            args, kwargs = conv.args, conv.kwargs
        lnc = self._lnc()
        kr = to_program(self.func, args, kwargs, self.grid, self._target(), lnc=lnc, api=self.api)
        _LAST.clear()
        _LAST.update(run=kr)
        out = kr.run(numerics=self.numerics)
        if self.mode == "benchmark":
            self.benchmark_result = BenchmarkResult(kr.stats)
        if conv is None:
            return out
        return conv.back(out, [a for a, _ in kr.inout.values()])


def _def_loc(func):
    code = getattr(func, "__code__", None)
    return f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}" if code else None


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


def install(current=True):
    """Register both namespaces in sys.modules as this front-end: the legacy `neuronxcc`,
    `neuronxcc.nki`, `neuronxcc.nki.language`, `.isa`, `.typing`, `.compiler`, and the current
    `nki`, `nki.language`, `nki.isa`, `nki.typing`, `nki.collectives` (NKI 0.3+ as of SDK 2.32,
    docs/nki.md). Which
    one a kernel sees is what it imports. Idempotent; returns the `neuronxcc.nki` module.
    `current=False` registers the legacy namespace only."""
    this = sys.modules[__name__]
    if current:
        from . import collectives
        from . import current as cur

        sys.modules["nki"] = cur
        cur.collectives = collectives
        for sub in ("language", "isa", "typing", "collectives"):
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
    from . import isa_constants

    isa.constants = isa_constants
    sys.modules["neuronxcc.nki.isa.constants"] = isa_constants
    if current:
        cur.isa.constants = isa_constants
        sys.modules["nki.isa.constants"] = isa_constants
    return this
