#!/usr/bin/env python3
"""Capture whole models as Core ATen graphs for `trnconf model run` (docs/model-format.md).

Each model is built offline from a config with deterministic weights (no downloads), exported
with `torch.export`, decomposed to Core ATen, and executed node by node on CPU with an FX
interpreter, which records for every node its overload, its arguments (references to earlier
values, weights or inputs, or constants) and its output metadata and reference values.

Weights are not stored: every parameter and buffer is filled from a documented deterministic
recipe (SplitMix64 uniform streams, see `recipe_fill`) that the Rust runner regenerates bit for
bit, so committed model data holds only the graph, the inputs and the reference outputs.

Usage (needs golden/models/requirements.txt; CI never runs this):
  python golden/models/capture.py                     # every model of the committed set
  python golden/models/capture.py --models gpt2,vit   # some of them
  python golden/models/capture.py --models gpt2_block,resnet18_224
      # the full-size benchmark models (docs/performance.md "Models"; sparser reference samples)
  python golden/models/capture.py --out DIR           # somewhere else
  python golden/models/capture.py --user my_pkg.my_mod:make_model --name mine --out DIR
      # your own model: the factory returns (module, example_inputs_tuple)
  python golden/models/capture.py --exported prog.pt2 --name mine --out DIR
      # a saved ExportedProgram (torch.export.save); its example inputs are used
"""

import argparse
import importlib
import json
import math
import operator
import os
import re
import sys
import zlib

# Same CPU pinning as golden/generate.py: reproducible reference outputs across machines.
os.environ.setdefault("ATEN_CPU_CAPABILITY", "default")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import safetensors.torch
import torch
import torch.fx

torch.set_num_threads(1)

FORMAT = 1
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # golden/, for generate.py's tables
import generate as G  # noqa: E402

# A node output with more elements than this is stored as a deterministic sample of
# REF_SAMPLE elements (indices from the same SplitMix64 stream as the weights); smaller
# outputs, and the model's final outputs, are stored whole.
REF_FULL_LIMIT = 1 << 18
REF_SAMPLE = 4096
# The rule of the model being recorded (the benchmark models use a sparser one, see BENCH).
RULE = {"full_limit": REF_FULL_LIMIT, "sample": REF_SAMPLE}
SHARD_BYTES = 1536 * 1024

MASK64 = (1 << 64) - 1

# Nodes that compute nothing and are not recorded (docs/model-format.md, "Nodes").
ASSERTION_OPS = {"_assert_tensor_metadata", "_assert_async", "_assert_scalar"}


# --------------------------------------------------------------------------------------------
# The weight recipe (docs/model-format.md, "Weights"). The Rust runner implements the same.
# --------------------------------------------------------------------------------------------
def splitmix64(seed, n):
    """n outputs of SplitMix64 started at `seed` (numpy, exact 64-bit arithmetic)."""
    import numpy as np

    with np.errstate(over="ignore"):
        idx = np.arange(1, n + 1, dtype=np.uint64)
        z = np.uint64(seed & MASK64) + idx * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z


def recipe_fill(recipe, shape, dtype):
    """The tensor a recipe describes: f32 `lo + (hi - lo) * u`, u = (x >> 40) * 2^-24 in [0, 1),
    evaluated in f64 and rounded once to f32, then cast to `dtype`."""
    import numpy as np

    n = math.prod(shape)
    u = (splitmix64(recipe["seed"], n) >> np.uint64(40)).astype(np.float64) * 2.0**-24
    lo, hi = recipe["lo"], recipe["hi"]
    v = (lo + (hi - lo) * u).astype(np.float32)
    return torch.from_numpy(v.reshape(shape)).to(dtype)


def recipe_for(name, t):
    """Which uniform range a parameter or buffer gets: PyTorch-like scales, so activations stay
    in a realistic range through depth."""
    seed = zlib.crc32(name.encode())
    base = name.rsplit(".", 1)[-1]
    if "running_var" in base:
        lo, hi = 0.5, 1.5
    elif "running_mean" in base or base.startswith("bias") or base.endswith("bias"):
        lo, hi = -0.1, 0.1
    elif t.dim() <= 1:
        # norm weights and other 1-d scales
        lo, hi = 0.5, 1.5
    else:
        fan_in = t.numel() // t.shape[0]
        b = 1.0 / math.sqrt(max(fan_in, 1))
        lo, hi = -b, b
    return {"kind": "uniform", "seed": seed, "lo": lo, "hi": hi}


def init_module(mod):
    """Fill every float parameter and buffer from its recipe; returns {qualified name: recipe}."""
    recipes = {}
    with torch.no_grad():
        for name, t in list(mod.named_parameters()) + list(mod.named_buffers()):
            if not t.is_floating_point():
                continue
            r = recipe_for(name, t)
            t.copy_(recipe_fill(r, list(t.shape), t.dtype))
            recipes[name] = r
    return recipes


# --------------------------------------------------------------------------------------------
# The committed set: reduced configs of real architectures.
# --------------------------------------------------------------------------------------------
def _ids(n, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (1, n), generator=g)


def _image(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def gpt2():
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(
        n_layer=2,
        n_embd=64,
        n_head=4,
        n_positions=32,
        vocab_size=128,
        attn_pdrop=0.0,
        embd_pdrop=0.0,
        resid_pdrop=0.0,
        attn_implementation="eager",
    )
    m = GPT2Model(cfg)

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(input_ids=ids, use_cache=False).last_hidden_state

    return Wrap(), (_ids(16, 128, 1),), {"config": cfg.to_diff_dict()}


def bert():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=128,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attn_implementation="eager",
    )
    m = BertModel(cfg, add_pooling_layer=True)

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, ids):
            out = self.m(input_ids=ids)
            return out.last_hidden_state, out.pooler_output

    return Wrap(), (_ids(16, 128, 2),), {"config": cfg.to_diff_dict()}


def llama():
    from transformers import LlamaConfig, LlamaModel

    # One decoder block: RMSNorm, rotary embeddings, SwiGLU MLP, grouped-query attention (4 query
    # heads sharing 2 key/value heads).
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=32,
        attn_implementation="eager",
    )
    m = LlamaModel(cfg)

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(input_ids=ids, use_cache=False).last_hidden_state

    return Wrap(), (_ids(16, 128, 3),), {"config": cfg.to_diff_dict()}


def resnet18():
    import torchvision

    m = torchvision.models.resnet18(num_classes=10)
    return m.eval(), (_image((1, 3, 32, 32), 4),), {"torchvision": "resnet18(num_classes=10)"}


def mobilenet_v3_small():
    import torchvision

    m = torchvision.models.mobilenet_v3_small(num_classes=10)
    return m.eval(), (_image((1, 3, 32, 32), 5),), {"torchvision": "mobilenet_v3_small(num_classes=10)"}


def vit():
    from torchvision.models.vision_transformer import VisionTransformer

    m = VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128, num_classes=10
    )
    return (
        m.eval(),
        (_image((1, 3, 32, 32), 6),),
        {
            "torchvision": "VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, "
            "hidden_dim=64, mlp_dim=128, num_classes=10)"
        },
    )


def gpt2_block():
    """One GPT-2-small decoder block at full size (d = 768, 12 heads, sequence 128): the speed
    benchmark of docs/performance.md. Its input is the block's hidden state and the additive
    causal mask GPT2Model hands every block (0 on and below the diagonal, the f32 minimum
    above)."""
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    cfg = GPT2Config(
        n_embd=768,
        n_head=12,
        n_positions=1024,
        attn_pdrop=0.0,
        embd_pdrop=0.0,
        resid_pdrop=0.0,
        attn_implementation="eager",
    )
    block = GPT2Block(cfg, layer_idx=0)

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = block

        def forward(self, hidden, mask):
            out = self.block(hidden, attention_mask=mask)
            return out[0] if isinstance(out, tuple) else out

    seq = 128
    mask = torch.triu(torch.full((seq, seq), torch.finfo(torch.float32).min), diagonal=1)[None, None]
    return Wrap(), (_image((1, seq, 768), 7), mask), {"config": cfg.to_diff_dict(), "block": "GPT2Block(layer 0)"}


def resnet18_224():
    """torchvision ResNet-18 at full size (1000 classes, 224 x 224, batch 1): the speed benchmark
    of docs/performance.md."""
    import torchvision

    m = torchvision.models.resnet18()
    return m.eval(), (_image((1, 3, 224, 224), 8),), {"torchvision": "resnet18()"}


# Full-size benchmark models: their references are sampled more sparsely (every output above
# BENCH_FULL_LIMIT elements keeps BENCH_SAMPLE of them) to keep the committed data small.
BENCH = {"gpt2_block", "resnet18_224"}
BENCH_FULL_LIMIT = 1 << 12
BENCH_SAMPLE = 1024

# Models that also have a training step, captured as `<name>_train`.
TRAIN_SUFFIX = "_train"
TRAINED = ["vit", "bert"]

MODELS = {
    "gpt2": gpt2,
    "bert": bert,
    "llama_block": llama,
    "resnet18": resnet18,
    "mobilenet_v3_small": mobilenet_v3_small,
    "vit": vit,
    "gpt2_block": gpt2_block,
    "resnet18_224": resnet18_224,
}


# --------------------------------------------------------------------------------------------
# Export and record
# --------------------------------------------------------------------------------------------
def export_core(mod, inputs):
    ep = torch.export.export(mod, inputs)
    return ep.run_decompositions()


class Graph:
    """The model document being built (docs/model-format.md)."""

    def __init__(self, name):
        self.name = name
        self.values = {}  # value name -> metadata {"dtype", "shape"}
        self.weights = {}  # value name -> {"recipe": ...} or {"stored": True}
        self.inputs = []  # value names of user inputs, in order
        self.nodes = []
        self.outputs = []
        self.tensors = {}  # safetensors payload: stored weights/constants/inputs/references
        self.unsupported = []

    def meta_of(self, t):
        if t.dtype not in G.STORED_NAME:
            raise G.Unrecordable(f"dtype {t.dtype}")
        return {"dtype": G.STORED_NAME[t.dtype], "shape": list(t.shape)}


# getitem node name -> the tuple element's value name (`node.i`)
ALIAS = {}


class _ConstRef:
    def __init__(self, name):
        self.name = name


def encode_arg(v, ty, graph):
    """One node argument: fx Nodes become tensor references by value name; constants are encoded
    as in the golden format (docs/golden-format.md, "Values")."""
    if isinstance(v, (torch.fx.Node, _ConstRef)):
        return {"tensor": ALIAS.get(v.name, v.name)}
    if isinstance(v, (list, tuple)) and any(isinstance(x, torch.fx.Node) for x in v):
        return {"tensors": [ALIAS.get(x.name, x.name) if isinstance(x, torch.fx.Node) else None for x in v]}
    if isinstance(v, torch.dtype):
        return {"dtype": G.ARG_DTYPE_NAME[v]}
    rec = G.Recorder()
    return rec.encode(v, "const", ty, True)


def record(name, mod, inputs, provenance, out_dir, recipes):
    """The inference graph: torch.export, decomposed to Core ATen."""
    ep = export_core(mod, inputs)
    sig = ep.graph_signature
    state = dict(ep.state_dict)
    state.update(getattr(ep, "constants", {}) or {})
    param_of = {spec.arg.name: spec.target for spec in sig.input_specs if spec.target is not None}
    user = [s.arg.name for s in sig.input_specs if s.kind == torch.export.graph_signature.InputKind.USER_INPUT]
    return record_graph(name, ep.graph_module, user, param_of, state, inputs, provenance, out_dir, recipes)


def record_training_step(name, mod, inputs, provenance, out_dir, recipes):
    """The joint forward+backward graph of one training step, as AOTAutograd produces it
    (`aot_export_module(trace_joint=True)` with the Core ATen decompositions). The loss is
    `sum over outputs of mean(output ** 2)`; the graph's outputs are the loss, then the gradient of every parameter."""
    from torch._decomp import core_aten_decompositions
    from torch._functorch.aot_autograd import aot_export_module

    mod.train()

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = mod

        def forward(self, *xs):
            outs = self.m(*xs)
            outs = outs if isinstance(outs, (tuple, list)) else (outs,)
            return (sum((o.float() ** 2).mean() for o in outs),)

    step = Step()
    # Attention through SDPA's math path: its fused CPU backward is no Core ATen op.
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        gm, sig = aot_export_module(
            step, inputs, trace_joint=True, output_loss_index=0, decompositions=core_aten_decompositions()
        )
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    names = list(sig.parameters) + list(sig.buffers)
    param_of = dict(zip(placeholders, names))
    state = {**dict(step.named_parameters()), **dict(step.named_buffers())}
    state = {k: v.detach() for k, v in state.items()}
    recipes = {f"m.{k}": v for k, v in recipes.items()}
    return record_graph(name, gm, list(sig.user_inputs), param_of, state, inputs, provenance, out_dir, recipes)


def record_graph(name, gm, user_inputs, param_of, state, inputs, provenance, out_dir, recipes):
    ALIAS.clear()
    graph = Graph(name)
    env = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    user_iter = iter(inputs)
    for n in placeholders:
        if n.name in user_inputs:
            t = next(user_iter)
            graph.inputs.append(n.name)
            graph.tensors[n.name] = t.contiguous()
        else:
            target = param_of[n.name]
            t = state[target]
            if isinstance(t, torch.nn.Parameter):
                t = t.detach()
            r = recipes.get(target)
            if r is not None and torch.equal(recipe_fill(r, list(t.shape), t.dtype), t):
                graph.weights[n.name] = {"target": target, "recipe": r}
            else:
                graph.weights[n.name] = {"target": target, "stored": True}
                graph.tensors[n.name] = t.contiguous()
        env[n.name] = t
        graph.values[n.name] = graph.meta_of(t)

    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        func = n.target
        oname = G.op_name(func) if isinstance(func, torch._ops.OpOverload) else None
        args = torch.fx.node.map_arg(n.args, lambda a: env[a.name])
        kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: env[a.name])
        if func is operator.getitem:
            # Tuple element selection: later nodes refer to the element's value name directly.
            env[n.name] = args[0][args[1]]
            ALIAS[n.name] = f"{ALIAS.get(n.args[0].name, n.args[0].name)}.{n.args[1]}"
            continue
        out = func(*args, **kwargs)
        env[n.name] = out
        if oname in ASSERTION_OPS:
            # A runtime check of metadata (torch.export inserts them): nothing to compute, and
            # the values' recorded metadata already says what it asserts.
            continue
        schema = func._schema if isinstance(func, torch._ops.OpOverload) else None
        sargs = schema.arguments if schema else []
        node_args = list(n.args)
        # A Python number in a Tensor slot (`mul.Tensor(x, 0.5)`, a "wrapped number"): the
        # `.Scalar` overload means the same thing and is what a backend receives for it; where
        # there is none, the number becomes a 0-d constant tensor.
        if (
            oname
            and oname.endswith(".Tensor")
            and len(node_args) > 1
            and isinstance(node_args[1], (int, float, bool))
            and isinstance(node_args[0], torch.fx.Node)
            and oname.replace(".Tensor", ".Scalar") in G.CORE_SET
        ):
            oname = oname.replace(".Tensor", ".Scalar")
            sargs = G.overload(oname)._schema.arguments
        for i, a in enumerate(node_args):
            ty = str(sargs[i].type) if i < len(sargs) else ""
            if ty in ("Tensor", "Optional[Tensor]") and isinstance(a, (int, float, bool)):
                cname = f"const.{n.name}.{i}"
                dt = torch.bool if isinstance(a, bool) else torch.int64 if isinstance(a, int) else torch.float32
                ct = torch.tensor(a, dtype=dt)
                graph.weights[cname] = {"target": None, "stored": True}
                graph.tensors[cname] = ct
                graph.values[cname] = graph.meta_of(ct)
                node_args[i] = _ConstRef(cname)
        enc_args = [encode_arg(a, str(sargs[i].type) if i < len(sargs) else "", graph) for i, a in enumerate(node_args)]
        types = {a.name: str(a.type) for a in sargs}
        enc_kwargs = {k: encode_arg(v, types.get(k, ""), graph) for k, v in n.kwargs.items()}
        node = {
            "name": n.name,
            "op": oname or str(func),
            "args": enc_args,
            "kwargs": enc_kwargs,
            "stack": _user_frame(n),
        }
        if oname is None or oname not in G.CORE_SET:
            graph.unsupported.append(node["op"])
            node["core"] = False
        outs = out if isinstance(out, (tuple, list)) else (out,)
        node["outputs"] = []
        returns_list = (
            schema is not None and len(schema.returns) == 1 and str(schema.returns[0].type).startswith("List[Tensor]")
        )
        if returns_list:
            names = []
            for i, o in enumerate(outs):
                vname = f"{n.name}.{i}"
                graph.values[vname] = graph.meta_of(o)
                _store_reference(graph, vname, o)
                names.append(vname)
            node["outputs"].append({"tensors": names})
            outs = ()
        for i, o in enumerate(outs):
            vname = n.name if not isinstance(out, (tuple, list)) else f"{n.name}.{i}"
            if isinstance(o, torch.Tensor):
                graph.values[vname] = graph.meta_of(o)
                node["outputs"].append({"tensor": vname})
                _store_reference(graph, vname, o)
            elif o is None:
                node["outputs"].append({"none": None})
            else:
                node["outputs"].append(G.Recorder().encode(o, "out", "", False))
        graph.nodes.append(node)

    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out_node.args[0]
    for o in outs if isinstance(outs, (tuple, list)) else (outs,):
        vname = _value_name(o, graph)
        graph.outputs.append(vname)
        t = _lookup(env, vname)
        graph.tensors[f"ref.{vname}"] = t.contiguous()
        graph.tensors.pop(f"sample.{vname}", None)
        graph.tensors.pop(f"sample_idx.{vname}", None)

    doc = {
        "format": FORMAT,
        "name": name,
        "torch": torch.__version__.split("+")[0],
        "provenance": provenance,
        "inputs": graph.inputs,
        "weights": graph.weights,
        "values": graph.values,
        "nodes": graph.nodes,
        "outputs": graph.outputs,
        "reference": dict(RULE),
        "unsupported": sorted(set(graph.unsupported)),
    }
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "graph.json"), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    for old in os.listdir(out_dir):
        if old.endswith(".safetensors"):
            os.remove(os.path.join(out_dir, old))
    # Shards of at most SHARD_BYTES each (the repository keeps every file under 2 MB): inputs and
    # stored weights first, then references in node order.
    shards, cur, size = [], {}, 0
    for k, v in graph.tensors.items():
        v = v.detach().contiguous().clone()
        nbytes = v.numel() * v.element_size()
        if cur and size + nbytes > SHARD_BYTES:
            shards.append(cur)
            cur, size = {}, 0
        cur[k] = v
        size += nbytes
    shards.append(cur)
    for i, shard in enumerate(shards):
        safetensors.torch.save_file(
            shard, os.path.join(out_dir, f"tensors-{i}.safetensors"), metadata={"trnconf_model": str(FORMAT)}
        )
    return doc


def _value_name(o, graph):
    if isinstance(o, torch.fx.Node):
        return ALIAS.get(o.name, o.name)
    raise G.Unrecordable(f"model output {o!r}")


def _lookup(env, vname):
    if vname in env:
        return env[vname]
    base, _, i = vname.rpartition(".")
    return env[base][int(i)]


def _store_reference(graph, vname, t):
    """Reference values of one node output: whole (`ref.NAME`) up to RULE["full_limit"] elements,
    else RULE["sample"] elements (`sample.NAME`) at the flat indices `sample_idx.NAME` (int64,
    sorted, distinct; drawn from SplitMix64(crc32(NAME)))."""
    flat = t.detach().contiguous().reshape(-1)
    if flat.numel() <= RULE["full_limit"]:
        graph.tensors[f"ref.{vname}"] = t.detach().contiguous()
    else:
        idx = torch.from_numpy(sample_indices(vname, flat.numel()).astype("int64"))
        graph.tensors[f"sample_idx.{vname}"] = idx
        graph.tensors[f"sample.{vname}"] = flat[idx].contiguous()


def sample_indices(vname, n):
    import numpy as np

    raw = splitmix64(zlib.crc32(vname.encode()), 4 * RULE["sample"]) % np.uint64(n)
    _, first = np.unique(raw, return_index=True)
    chosen = raw[np.sort(first)][: RULE["sample"]]
    return np.sort(chosen)


def _user_frame(n):
    st = n.meta.get("stack_trace") or ""
    lines = [ln.strip() for ln in st.strip().splitlines() if ln.strip().startswith("File ")]
    return clean_frame(lines[-1]) if lines else None


FRAME = re.compile(r'File "(.*?)", line (\d+), in (\S+)')


def clean_frame(line):
    """`path:line in function` of a traceback line, with no machine-specific path: a file in a
    package as its path inside site-packages, a file under the current directory relative to
    it, generated code (`<eval_with_key>...`) as no location."""
    m = FRAME.search(line or "")
    if not m:
        return None
    path, lineno, func = m.groups()
    if path.startswith("<"):
        return None
    if "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    elif os.path.isabs(path):
        rel = os.path.relpath(path)
        path = rel if not rel.startswith("..") else os.path.basename(path)
    return f"{path}:{lineno} in {func}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=HERE, help="directory holding one sub-directory per model")
    ap.add_argument(
        "--models",
        default=",".join(list(MODELS) + [m + TRAIN_SUFFIX for m in TRAINED]),
        help="comma-separated names from the committed set",
    )
    ap.add_argument("--user", help="MODULE:FACTORY returning (nn.Module, example_inputs_tuple)")
    ap.add_argument("--exported", help="a saved ExportedProgram (torch.export.save)")
    ap.add_argument("--name", help="directory name for --user / --exported")
    a = ap.parse_args()
    if a.user or a.exported:
        if not a.name:
            ap.error("--name is required with --user/--exported")
        if a.user:
            mod_name, _, fn = a.user.partition(":")
            sys.path.insert(0, os.getcwd())
            made = getattr(importlib.import_module(mod_name), fn or "make_model")()
            mod, inputs = made[0], tuple(made[1])
            mod.eval()
            recipes = init_module(mod)
            prov = {"user": a.user}
        else:
            ep = torch.export.load(a.exported)
            mod, inputs = ep.module(), tuple(ep.example_inputs[0])
            recipes = {}
            prov = {"exported": os.path.basename(a.exported)}
        doc = record(a.name, mod, inputs, prov, os.path.join(a.out, a.name), recipes)
        print(f"{a.name}: {len(doc['nodes'])} nodes, unsupported: {doc['unsupported'] or 'none'}")
        return
    for name in a.models.split(","):
        torch.manual_seed(0)
        train = name.endswith(TRAIN_SUFFIX)
        base = name[: -len(TRAIN_SUFFIX)] if train else name
        mod, inputs, prov = MODELS[base]()
        RULE.update(
            full_limit=BENCH_FULL_LIMIT if name in BENCH else REF_FULL_LIMIT,
            sample=BENCH_SAMPLE if name in BENCH else REF_SAMPLE,
        )
        mod.eval()
        recipes = init_module(mod)
        prov = {"builder": base, **_jsonable(prov)}
        if train:
            # Batch norm in training mode needs more than one value per channel: batch 2.
            inputs = tuple(torch.cat([x, x.flip(-1)]) if x.is_floating_point() else x for x in inputs)
            prov["graph"] = "joint forward+backward (AOTAutograd), loss = sum of mean(output ** 2) over outputs"
            doc = record_training_step(name, mod, inputs, prov, os.path.join(a.out, name), recipes)
        else:
            doc = record(name, mod, inputs, prov, os.path.join(a.out, name), recipes)
        d = os.path.join(a.out, name)
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".safetensors"))
        print(f"{name}: {len(doc['nodes'])} nodes, {size / 1024:.0f} KiB, unsupported: {doc['unsupported'] or 'none'}")


def _jsonable(x):
    return json.loads(json.dumps(x, default=str))


if __name__ == "__main__":
    main()
