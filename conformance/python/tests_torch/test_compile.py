"""torch.compile(backend="trnsim"): each captured graph runs as one joined trnsim program, with
results bit-identical to eager on the device."""

import pytest

torch = pytest.importorskip("torch")
import trnsim.torch  # registers the device

trnsim.torch.register_compile_backend()


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))


def _twins():
    a, b = _mlp(), _mlp()
    b.load_state_dict(a.state_dict())
    return a.to("trnsim"), b.to("trnsim")


def test_forward_and_backward_are_bit_identical_to_eager_and_one_program_per_graph():
    torch._dynamo.reset()
    trnsim.torch.reset_report()
    from trnsim.torch import _compile

    _compile.reset_compile_report()
    eager, compiled = _twins()
    x = torch.randn(8, 16).to("trnsim")
    cm = torch.compile(compiled, backend="trnsim")
    for _ in range(2):
        le = eager(x).square().mean()
        le.backward()
        lc = cm(x).square().mean()
        lc.backward()
        assert torch.equal(le.cpu(), lc.cpu())
        for p, q in zip(eager.parameters(), compiled.parameters()):
            assert torch.equal(p.grad.cpu(), q.grad.cpu())
    graphs = trnsim.torch.compile_report()["graphs"]
    assert trnsim.torch.report()["compile"]["graphs"] == graphs  # the device report carries them
    kinds = {g["kind"] for g in graphs}
    assert kinds == {"forward", "backward"}
    for g in graphs:
        assert g["calls"] == 2
        assert g["joins"] == 1, g  # the second call reused the joined program
        assert g["programs"] == 1, g  # the whole graph ran as one program
        assert g["programs_joined"] > 1, g  # ... joined from several ops' programs
        assert g["nodes"] >= 2


def test_compiled_estimate_is_at_most_eager():
    """The joined program is scheduled once, so engines overlap across ops: its estimate is at
    most the sum of the per-op programs' estimates that eager reports."""
    torch._dynamo.reset()
    from trnsim.torch import _compile

    eager, compiled = _twins()
    x = torch.randn(64, 16).to("trnsim")

    def f(m, x):
        return torch.tanh(m(x)) * 2 + 1

    with torch.no_grad():
        trnsim.torch.reset_report()
        e = f(eager, x)
        eager_us = trnsim.torch.report()["est_device_time_us"]
        _compile.reset_compile_report()
        cf = torch.compile(f, backend="trnsim")
        c = cf(compiled, x)
    assert torch.equal(e.cpu(), c.cpu())
    (g,) = trnsim.torch.compile_report()["graphs"]
    assert g["programs"] == 1
    assert 0 < g["est_device_time_us"] <= eager_us, (g["est_device_time_us"], eager_us)


def test_graph_breaks_fall_back_to_eager_device_ops_and_new_shapes_recompile():
    torch._dynamo.reset()
    from trnsim.torch import _compile

    _compile.reset_compile_report()

    def f(x):
        y = torch.relu(x) + 1
        s = y.sum().item()  # a graph break in the user's code: .item() reads a value
        return y * s

    cf = torch.compile(f, backend="trnsim")
    x = torch.randn(4, 4).to("trnsim")
    assert torch.equal(cf(x).cpu(), f(x).cpu())
    before = trnsim.torch.compile_report()["compiles"]
    x2 = torch.randn(6, 4).to("trnsim")
    assert torch.equal(cf(x2).cpu(), f(x2).cpu())
    assert trnsim.torch.compile_report()["compiles"] > before


def test_the_entry_point_names_the_backend():
    import importlib.metadata as md
    import pathlib

    import tomllib

    pyproject = pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml"
    eps = tomllib.loads(pyproject.read_text())["project"]["entry-points"]["torch_dynamo_backends"]
    assert eps == {"trnsim": "trnsim.torch._compile:backend"}
    ep = md.EntryPoint(name="trnsim", value=eps["trnsim"], group="torch_dynamo_backends")
    from trnsim.torch import _compile

    assert ep.load() is _compile.backend


def test_device_factories_inside_a_compiled_graph_keep_their_values():
    """A mask or positions made on the device inside the compiled code (torch.ones(device=...),
    arange) stay in the graph's data flow, and SDPA's causal path matches eager."""
    torch._dynamo.reset()

    def f(x):
        t = x.shape[-1]
        m = torch.triu(torch.ones(t, t, device=x.device, dtype=torch.bool), 1)
        return x.masked_fill(m, -1.0) + torch.arange(t, device=x.device, dtype=torch.float32)

    def g(q):
        return torch.nn.functional.scaled_dot_product_attention(q, q * 2, q + 1, is_causal=True)

    x = torch.randn(5, 5).to("trnsim")
    assert torch.equal(f(x).cpu(), torch.compile(f, backend="trnsim")(x).cpu())
    q = torch.randn(2, 4, 8, 16).to("trnsim")
    assert torch.equal(g(q).cpu(), torch.compile(g, backend="trnsim")(q).cpu())


def _model_cases():
    import _compile_models as M

    return [
        ("gpt2_block", M.GPT2Block, lambda: torch.randn(2, 16, 64), lambda y: y.square().mean()),
        ("llama_2_layer", M.Llama, lambda: torch.randint(0, 64, (2, 16)), lambda y: y.logsumexp(-1).mean()),
        ("resnet18", M.ResNet18, lambda: torch.randn(2, 3, 32, 32), lambda y: y.square().mean()),
    ]


@pytest.mark.parametrize("case", _model_cases(), ids=lambda c: c[0])
def test_models_compile_forward_and_backward_bit_identical_to_eager(case):
    _name, make, make_input, loss_of = case
    torch._dynamo.reset()
    from trnsim.torch import _compile

    torch.manual_seed(0)
    eager, compiled = make(), make()
    compiled.load_state_dict(eager.state_dict())
    eager.to("trnsim")
    compiled.to("trnsim")
    x = make_input().to("trnsim")
    trnsim.torch.reset_report()
    le = loss_of(eager(x))
    le.backward()
    eager_us = trnsim.torch.report()["est_device_time_us"]
    _compile.reset_compile_report()
    cm = torch.compile(compiled, backend="trnsim")
    lc = loss_of(cm(x))
    lc.backward()
    assert torch.equal(le.cpu(), lc.cpu())
    for (n, p), q in zip(eager.named_parameters(), compiled.parameters()):
        assert torch.equal(p.grad.cpu(), q.grad.cpu()), n
    for (n, b), c in zip(eager.named_buffers(), compiled.buffers()):
        assert torch.equal(b.cpu(), c.cpu()), n  # batch norm's running statistics
    graphs = trnsim.torch.compile_report()["graphs"]
    assert {g["kind"] for g in graphs} == {"forward", "backward"}
    compiled_us = sum(g["est_device_time_us"] for g in graphs)
    assert all(g["programs"] == 1 for g in graphs), graphs  # each graph is one program
    assert compiled_us <= eager_us, (compiled_us, eager_us)
    # The optimizer step runs eager on the device after the compiled backward.
    opt = torch.optim.AdamW(compiled.parameters(), lr=1e-3)
    opt.step()
    # No graph break: the models' code has none (explain runs the model, so it comes last).
    torch._dynamo.reset()
    explain = torch._dynamo.explain(compiled)(x)
    assert explain.graph_count == 1 and explain.graph_break_count == 0, explain.break_reasons
