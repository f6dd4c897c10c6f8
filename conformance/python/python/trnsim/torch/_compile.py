"""``torch.compile(backend="trnsim")``: each captured graph runs as one trnsim program.

TorchDynamo captures the user's function (device tensors are a traceable wrapper subclass, so a
graph of ops on them is one graph: docs/torch-device.md, "Tensor representation"); AOTAutograd
splits it into a forward and a backward graph of ATen ops. At each call of a compiled graph this
backend interprets the graph node by node through the device's own dispatch — the same lowering,
decompositions and special forms as eager, so the results are bit-identical to eager — but with
the session replaced by a *recorder*: every program the nodes would run is recorded instead, and
the recorded programs are joined into **one program** (HBM names remapped to the session tensors
they are bound to, every tensor that lives and dies inside the graph made scratch HBM), scheduled
once (``infer_waits`` over the whole program, so engines overlap across ops wherever the timeline
allows), and run once.

A node that must read a value back to the host (a data-dependent size, ``.item()``) ends the
program there: what was recorded so far runs, the value is read, recording goes on in a new
program. Graph breaks in the user's code are Dynamo's: the code between graphs runs eagerly on the
device. Each new input shape is a recompile (Dynamo's guards), counted in the report.

Not done (docs/compile.md): views are not folded into their consumers' access patterns (a strided
operand is still gathered by a DMA program, as in eager), and intermediates go through HBM between
ops (keeping them in SBUF needs a tile-level contract for every lowering).
"""

from __future__ import annotations

import json
import time
from typing import Any

import torch

from . import _device, _report

__all__ = ["backend", "compile_report", "reset_compile_report"]


class _Recorder:
    """Stands in for the session while a compiled graph runs: records programs instead of running
    them, and runs the recorded group as one joined program when a value must be read back or the
    graph ends."""

    def __init__(self, session, label: str) -> None:
        self.session = session
        self.label = label
        self.pending: list[tuple[Any, dict[str, str]]] = []
        self.produced: dict[str, tuple[str, list[int]]] = {}  # session name -> (dtype, shape)
        self.dead: set[str] = set()  # produced in the group and deleted before it ran
        self.deferred_deletes: list[str] = []  # inputs of the group deleted before it ran
        self.inputs: set[str] = set()
        self.puts = 0  # host uploads while recording (a replay could not repeat them)
        self.direct_runs = 0  # programs run outside a joined group
        self.last: dict | None = None  # the last joined run: program, canonical names, binding
        self.programs_joined = 0
        self.joins = 0  # joined programs built (the others came from the cache)
        self.runs: list[dict] = []

    # -- the session's interface, as the device uses it ------------------------------------
    def run(self, program, bind: dict[str, str], spans: bool = True) -> str:
        for decl, _dev, _shape, role in program.hbm:
            if role == "output" and bind.get(decl) in self.inputs:
                # An output bound to a tensor the group reads: not expressible in one program.
                self.flush()
                self.direct_runs += 1
                return self.session.run(program, bind, spans=spans)
        for decl, dev, shape, role in program.hbm:
            name = bind.get(decl)
            if name is None:
                continue
            if role == "input" and name not in self.produced:
                self.inputs.add(name)
            elif role == "output":
                self.produced[name] = (dev, list(shape))
        self.pending.append((program, dict(bind)))
        # No estimate per node: the joined program's run is reported once, at flush.
        return json.dumps({"timeline": {"makespan_ns": 0.0}, "instructions": {}})

    def get(self, name: str):
        if name in self.produced:
            self.flush()
        return self.session.get(name)

    def info(self, name: str):
        if name in self.produced:
            dev, shape = self.produced[name]
            return dev, shape
        return self.session.info(name)

    def delete(self, name: str) -> bool:
        if name in self.produced:
            self.dead.add(name)
            return True
        if name in self.inputs:
            self.deferred_deletes.append(name)
            return True
        return self.session.delete(name)

    def put(self, name, tensor):
        # A new session tensor (a CPU scalar moved to the device): the group may read it.
        self.puts += 1
        return self.session.put(name, tensor)

    def __getattr__(self, attr: str):
        # put, names, transfers, device_bytes: the real session, after the pending group ran
        # (names and byte counts must see its outputs).
        self.flush()
        return getattr(self.session, attr)

    # -- joining ---------------------------------------------------------------------------
    def flush(self) -> None:
        if not self.pending:
            self._finish_deletes()
            return
        pending, self.pending = self.pending, []
        # Canonical names (t0, t1, ... in order of first use) make the joined program independent
        # of the session names of this call, so the next call of the graph reuses it.
        canon: dict[str, str] = {}
        recorded = []
        for program, bind in pending:
            recorded.append((program, {d: canon.setdefault(n, f"g{len(canon)}") for d, n in sorted(bind.items())}))
        dead = frozenset(canon[n] for n in self.dead if n in canon)
        key = (tuple((id(p), tuple(b.items())) for p, b in recorded), dead)
        hit = _JOINED.get(key)
        if hit is None:
            joined = _join(recorded, set(dead))
            native = _device._native.Program.from_json(json.dumps(joined))
            native.infer_waits()
            outer = [d["name"] for d in joined["hbm"] if d["role"] != "scratch"]
            # The entry keeps the recorded programs alive, so their ids in the key stay theirs.
            hit = (native, outer, [p for p, _ in recorded])
            if len(_JOINED) >= _JOINED_MAX:
                _JOINED.pop(next(iter(_JOINED)))
            _JOINED[key] = hit
            self.joins += 1
        else:
            _JOINED[key] = _JOINED.pop(key)  # most recently used last
        native, outer, _ = hit
        actual = {c: n for n, c in canon.items()}
        bind = {c: actual[c] for c in outer}
        stats = json.loads(self.session.run(native, bind))
        roles = {d: r for d, _, _, r in native.hbm}
        self.last = {"program": native, "bind": bind, "roles": roles, "seeded": _seeded(native)}
        self.programs_joined += len(pending)
        self.runs.append(
            {
                "programs_joined": len(pending),
                "instructions": len(native),
                "est_ns": float(stats.get("timeline", {}).get("makespan_ns", 0.0) or 0.0),
            }
        )
        _report.REPORT.device_run(self.label, stats)
        # What the group produced now exists in the session: later groups read it as inputs.
        self.produced.clear()
        self.inputs.clear()
        self.dead.clear()
        self._finish_deletes()

    def _finish_deletes(self) -> None:
        for name in self.deferred_deletes:
            self.session.delete(name)
        self.deferred_deletes.clear()


#: Joined programs by the recorded sequence (program identities and canonical bindings), most
#: recently used last; bounded.
_JOINED: dict[tuple, tuple] = {}
_JOINED_MAX = 256


def _seeded(native) -> bool:
    """Whether a joined program seeds an RNG: each call draws new seeds, so it cannot be replayed."""
    return '"set_rng_seed"' in native.to_json()


def _rename(node: Any, names: dict[str, str]) -> Any:
    """The program JSON with every HBM tensor reference renamed (``{"hbm": name}``)."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "hbm" and isinstance(v, str):
                out[k] = names.get(v, v)
            else:
                out[k] = _rename(v, names)
        return out
    if isinstance(node, list):
        return [_rename(v, names) for v in node]
    return node


def _join(pending: list[tuple[Any, dict[str, str]]], dead: set[str]) -> dict:
    """One program from the recorded ones, in order: each program's HBM declarations renamed to
    the session tensors they are bound to (its own scratch tensors to names of their own), the
    instructions concatenated with their waits cleared (the caller recomputes every wait over
    the whole program), the declarations merged: a tensor read before anything in the group
    wrote it is an input, one the group writes is an output if it outlives the group, else
    scratch."""
    hbm: dict[str, dict] = {}
    instructions: list[dict] = []
    target = None
    for k, (program, bind) in enumerate(pending):
        p = json.loads(program.to_json())
        target = target or p["target"]
        names: dict[str, str] = {}
        for d in p["hbm"]:
            names[d["name"]] = bind.get(d["name"]) or f"__g{k}.{d['name']}"
        for d in p["hbm"]:
            name = names[d["name"]]
            role = d["role"]
            if d["name"] not in bind:
                role = "scratch"
            elif role == "output":
                role = "scratch" if name in dead else "output"
            seen = hbm.get(name)
            if seen is None:
                hbm[name] = {**d, "name": name, "role": role}
            elif seen["role"] == "input" and role != "input":
                raise _device.TrnsimError(f"trnsim compile: `{name}` is written after the graph read it")
        for inst in _rename(p["instructions"], names):
            inst.pop("wait", None)
            instructions.append(inst)
    return {"target": target, "hbm": list(hbm.values()), "instructions": instructions}


# ---------------------------------------------------------------------------------------------
# The report


class _CompileReport:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.graphs: list[dict] = []
        self.compiles = 0

    def to_dict(self) -> dict:
        return {
            "graphs": list(self.graphs),
            "compiles": self.compiles,
            "recompiles": max(0, self.compiles - len({g["key"] for g in self.graphs})),
            "note": (
                "capture_s is Dynamo + AOTAutograd tracing; lower_join_s the first call's lowering, "
                "joining and scheduling. neuronx-cc's own compile time on hardware is not predicted: "
                "it depends on the compiler's passes and the host, which the simulator does not model."
            ),
        }


COMPILE_REPORT = _CompileReport()


def _section():
    """The device report's "compile" section: the compiled graphs and their figures, once any."""
    return COMPILE_REPORT.to_dict() if COMPILE_REPORT.compiles else None


# The device report carries the compile figures (trnsim.torch.report()["compile"]); resetting the
# report resets them.
_report.SECTIONS["compile"] = _section
_report.RESETS.append(COMPILE_REPORT.reset)


def compile_report() -> dict:
    """Compiled graphs: per graph its nodes, the joined program's instructions, the capture and
    lowering times, the estimated device time per call, and the recompile count."""
    return COMPILE_REPORT.to_dict()


def reset_compile_report() -> None:
    COMPILE_REPORT.reset()


def _device_arg(a: Any) -> Any:
    """The device tensor a compiled graph's run-time argument stands for: a proxy of a device
    tensor, or a view AOTAutograd regenerated from one (a saved activation that is a view of
    another output), which becomes the same view of the device tensor."""
    if not isinstance(a, torch.Tensor) or a.device.type != "meta":
        return a
    dev = _device.device_tensor_of(a)
    if dev is not None:
        return dev
    entry = _SAVED.get(a.untyped_storage()._cdata)
    dev = entry[1] if entry is not None else None
    if dev is None:
        raise _device.TrnsimError(
            f"trnsim compile: a graph argument of shape {tuple(a.shape)} stands for no device tensor"
        )
    if (tuple(a.size()), tuple(a.stride()), a.storage_offset()) == (
        tuple(dev.size()),
        tuple(dev.stride()),
        dev.storage_offset(),
    ):
        return dev
    return torch.as_strided(dev, a.size(), a.stride(), a.storage_offset())


#: Device tensors a compiled graph returned, by the storage of their proxy: (proxy, device
#: tensor, uses of the storage when registered). AOTAutograd keeps a forward's outputs that the
#: backward needs (saved activations) as the proxies themselves, but may hand them back as new
#: Python objects (autograd's saved-variable unpacking) that carry no reference to their device
#: tensor; the storage is the same, so it is the key. The entry holds the proxy, so the storage
#: stays valid, and is dropped once the storage has no more uses than when it was registered
#: (nothing but this entry holds it any more).
_SAVED: dict[int, tuple[Any, Any, int]] = {}


def _register_output(proxy: torch.Tensor, dev: Any) -> None:
    cdata = proxy.untyped_storage()._cdata
    _SAVED[cdata] = (proxy, dev, torch._C._storage_Use_Count(cdata))


def _purge_saved() -> None:
    for cdata in [c for c, (_, _, uses) in _SAVED.items() if torch._C._storage_Use_Count(c) <= uses]:
        del _SAVED[cdata]


class _DeviceInterpreter(torch.fx.Interpreter):
    """Runs an AOTAutograd graph on device tensors. The graph was traced on the device tensors'
    meta proxies, so a `meta` device in a node's arguments (a factory call, `_to_copy`) stands for
    the device: it becomes the device again."""

    def call_function(self, target, args, kwargs):
        dev = torch.device(_device.DEVICE_NAME, 0)

        def fix(x):
            return dev if isinstance(x, torch.device) and x.type == "meta" else x

        args = torch.utils._pytree.tree_map(fix, args)
        kwargs = torch.utils._pytree.tree_map(fix, kwargs)
        return super().call_function(target, args, kwargs)


def _layout(t) -> tuple:
    st = t._trn
    return (st.dtype, tuple(st.shape), t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset())


def _plan_replay(recorder: _Recorder, real: list, names_before: list, outs: list) -> dict | None:
    """How to run the graph again without interpreting it: the joined program, which argument's
    session tensor each input is, and how each output is built from the program's outputs. None
    when the call did something a replay could not repeat (several programs, host uploads, host
    reads, RNG seeds, an argument whose storage the graph replaced)."""
    last = recorder.last
    if last is None or len(recorder.runs) != 1 or recorder.puts or recorder.direct_runs or last["seeded"]:
        return None
    names_after = [a._trn.name if isinstance(a, _device.TrnsimTensor) else None for a in real]
    if names_after != names_before:
        return None  # an in-place update swapped an argument's storage
    by_name = {n: i for i, n in enumerate(names_before) if n is not None}
    inputs, outputs = {}, []
    for c, actual in last["bind"].items():
        if last["roles"][c] == "input":
            if actual not in by_name:
                return None
            inputs[c] = by_name[actual]
        else:
            outputs.append(c)
    canon_of = {actual: c for c, actual in last["bind"].items()}
    results = []
    for o in outs:
        if isinstance(o, _device.TrnsimTensor):
            c = canon_of.get(o._trn.name)
            if c is None:
                return None
            results.append(("tensor", c, _layout(o)))
        elif isinstance(o, torch.Tensor):
            return None
        else:
            results.append(("value", o, None))
    layouts = [_layout(a) if isinstance(a, _device.TrnsimTensor) else None for a in real]
    return {"program": last["program"], "inputs": inputs, "outputs": outputs, "results": results, "layouts": layouts}


def _replay(plan: dict, real: list, label: str) -> list | None:
    for a, lay in zip(real, plan["layouts"]):
        if lay is not None and (not isinstance(a, _device.TrnsimTensor) or a._trn is None or _layout(a) != lay):
            return None
    state = _device.STATE
    bind = {c: real[i]._trn.name for c, i in plan["inputs"].items()}
    fresh = {c: _device._new_name() for c in plan["outputs"]}
    bind.update(fresh)
    with state.lock:
        session = state.session
        if isinstance(session, _device._native.Session):
            stats = json.loads(session.run(plan["program"], bind, spans=False))  # totals only
        else:
            stats = json.loads(session.run(plan["program"], bind))
    _report.REPORT.device_run(label, stats)
    storages = {}
    out = []
    for kind, v, lay in plan["results"]:
        if kind == "value":
            out.append(v)
            continue
        st_dtype, st_shape, dtype, shape, stride, offset = lay
        st = storages.get(v)
        if st is None and v in plan["inputs"]:
            st = real[plan["inputs"][v]]._trn  # an input returned, or a view of one: same storage
        elif st is None:
            st = storages[v] = _device._Storage(fresh[v], st_dtype, list(st_shape))
        out.append(_device.TrnsimTensor(st, shape, stride, offset, dtype))
    for c, name in fresh.items():
        if c not in storages:
            state.session.delete(name)  # produced but not returned (alive only by chance at planning)
    return out, float(stats.get("timeline", {}).get("makespan_ns", 0.0) or 0.0)


def _run_graph(gm: torch.fx.GraphModule, entry: dict, args: list) -> list:
    real = [_device_arg(a) for a in args]
    if any(isinstance(a, _device.TrnsimTensor) and a._trn is None for a in real):
        raise _device.TrnsimError("trnsim compile: a compiled graph got a device tensor with no data")
    _purge_saved()
    label = f"compiled:{entry['name']}"
    plan = entry.get("replay")
    replayed = _replay(plan, real, label) if plan is not None else None
    if replayed is not None:
        entry["calls"] += 1
        entry["replays"] = entry.get("replays", 0) + 1
        return _as_results(replayed[0])
    state = _device.STATE
    t0 = time.perf_counter()
    names_before = [a._trn.name if isinstance(a, _device.TrnsimTensor) else None for a in real]
    with state.lock:
        recorder = _Recorder(state.session, label)
        state.session = recorder
        try:
            outs = _DeviceInterpreter(gm).run(*real)
            recorder.flush()
        finally:
            state.session = recorder.session
    dt = time.perf_counter() - t0
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    entry["replay"] = _plan_replay(recorder, real, names_before, list(outs))
    entry["calls"] += 1
    if entry["calls"] == 1:
        entry["lower_join_s"] = dt
    entry["joins"] = entry.get("joins", 0) + recorder.joins
    entry["programs"] = len(recorder.runs)
    entry["programs_joined"] = recorder.programs_joined
    entry["instructions"] = sum(r["instructions"] for r in recorder.runs)
    entry["est_device_time_us"] = sum(r["est_ns"] for r in recorder.runs) / 1000.0
    return _as_results(outs)


def _as_results(outs) -> list:
    result = []
    for o in outs:
        if isinstance(o, _device.TrnsimTensor):
            proxy = o._proxy
            proxy._trnsim_keep = o  # a strong reference until AOTAutograd unflattens it
            _register_output(proxy, o)
            result.append(proxy)
        else:
            result.append(o)
    return result


def _compiler(kind: str, capture_start: list[float]):
    def compile_graph(gm: torch.fx.GraphModule, example_inputs):
        from torch._functorch.aot_autograd import make_boxed_func

        nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        COMPILE_REPORT.compiles += 1
        key = (kind, str(gm.graph))
        entry = {
            "name": f"{kind}{len(COMPILE_REPORT.graphs)}",
            "kind": kind,
            "key": hash(key),
            "nodes": nodes,
            "capture_s": time.perf_counter() - capture_start[0],
            "calls": 0,
        }
        COMPILE_REPORT.graphs.append(entry)

        def run(*args):
            return _run_graph(gm, entry, list(args))

        return make_boxed_func(run)

    return compile_graph


def backend(gm: torch.fx.GraphModule, example_inputs):
    """The TorchDynamo backend ``trnsim``: AOTAutograd's forward and backward graphs, each run
    as one joined trnsim program per call."""
    from torch._dynamo.backends.common import aot_autograd

    start = [time.perf_counter()]
    inner = aot_autograd(fw_compiler=_compiler("forward", start), bw_compiler=_compiler("backward", start))
    return inner(gm, example_inputs)


def register(names=("trnsim",)) -> None:
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    for name in names:
        if name not in _BACKENDS:
            register_backend(name=name)(backend)
