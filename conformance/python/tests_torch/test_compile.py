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
    kinds = {g["kind"] for g in graphs}
    assert kinds == {"forward", "backward"}
    for g in graphs:
        assert g["calls"] == 2
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
