"""The device with an NKI backend module (`TRNSIM_TORCH_BACKEND=nki:MODULE`,
`trnsim.torch.set_backend`): the module's kernels serve the overloads it provides, the lowering
the rest, the report names the backend per op, and check mode names a wrong kernel's file:line."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import trnsim.torch
from trnsim.torch import _device

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.normpath(os.path.join(HERE, "..", "examples", "nki_backend_example.py"))
LABEL = f"nki:{EXAMPLE}"


@pytest.fixture(autouse=True)
def _clean(fresh_device):
    yield
    trnsim.torch.set_backend("lowering")
    trnsim.torch.set_fallback(False)


def _mlp(x, w1, b1, w2, b2):
    h = torch.relu(x @ w1 + b1)
    return torch.softmax(h @ w2 + b2, dim=-1) - 0.25


def _params(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g) for s in ((24, 40), (40, 72), (72,), (72, 10), (10,))]


@pytest.mark.parametrize("seed", [0, 1])
def test_mlp_forward_through_the_module_matches_cpu(seed):
    trnsim.torch.set_backend(LABEL)
    assert trnsim.torch.backend() == LABEL
    cpu = _params(seed)
    dev = [t.to("trnsim") for t in cpu]
    with trnsim.torch.checking():
        out = _mlp(*dev)
    rep = trnsim.torch.report()
    ops = rep["ops"]
    # The module's overloads ran through its kernels; `sub` (not in the module) through the lowering.
    for op in ("mm", "add.Tensor", "relu", "_softmax"):
        assert ops[op]["backends"] == {LABEL: ops[op]["device"]}, (op, ops[op])
        assert ops[op]["programs"] >= 1 and ops[op]["est_ns"] > 0, (op, ops[op])
        assert ops[op]["drift"]["backends"] == [LABEL]
        assert any("nki_backend_example.py:" in k for k in ops[op]["drift"]["kernels"]), ops[op]["drift"]
    assert ops["sub.Tensor"]["backends"] == {"lowering": 1}
    assert ops["sub.Tensor"]["drift"]["backends"] == ["lowering"]
    assert rep["backend"] == LABEL
    assert "mm" in rep["nki_module"]["overloads"]
    assert rep["first_out_of_tolerance"] is None, rep["first_out_of_tolerance"]
    # The example's wrappers run on device arrays: no op needed the host convention.
    assert not any("nki_host_path" in e for e in rep["ops"].values()), rep["ops"]
    assert "nki_module_device_to_host" not in rep["transfers"]
    torch.testing.assert_close(out.cpu(), _mlp(*cpu), rtol=1.3e-6, atol=1e-5)


def transfers():
    return json.loads(_device.STATE.session.transfers())


def test_module_kernels_run_in_the_device_session_without_host_copies():
    trnsim.torch.set_backend(LABEL)
    x, g, b = torch.randn(3, 5, 7), torch.randn(7), torch.randn(7)
    d, dg, db = x.to("trnsim"), g.to("trnsim"), b.to("trnsim")
    before = transfers()
    y = torch.nn.functional.layer_norm(d, (7,), dg, db)
    z = torch.bmm(d, d.transpose(1, 2))
    s = torch.log_softmax(d, 1).sum(dim=(0, 2))
    n = (d > 0).sum(dim=1)
    after = transfers()
    # Nothing left the session (the layout the wrappers do ran as device ops; kernels ran there).
    assert after["device_to_host_bytes"] == before["device_to_host_bytes"], (before, after)
    ops = trnsim.torch.report()["ops"]
    for op in ("native_layer_norm", "bmm", "_log_softmax", "sum.dim_IntList"):
        assert list(ops[op]["backends"]) == [LABEL], (op, ops[op])
        assert "nki_host_path" not in ops[op], ops[op]
    torch.testing.assert_close(y.cpu(), torch.nn.functional.layer_norm(x, (7,), g, b), rtol=1.3e-6, atol=1e-5)
    torch.testing.assert_close(z.cpu(), torch.bmm(x, x.transpose(1, 2)), rtol=1.3e-6, atol=1e-5)
    torch.testing.assert_close(s.cpu(), torch.log_softmax(x, 1).sum(dim=(0, 2)), rtol=1.3e-6, atol=1e-5)
    assert torch.equal(n.cpu(), (x > 0).sum(dim=1))


def test_a_wrapper_needing_numpy_arrays_reruns_on_the_host(tmp_path):
    path = tmp_path / "numpy_only_backend.py"
    path.write_text(
        textwrap.dedent("""\
        import neuronxcc.nki.language as nl
        from neuronxcc import nki


        @nki.jit
        def exp_kernel(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nl.exp(nl.load(a)))
            return out


        def exp(kernel, a):
            if not a.flags["C_CONTIGUOUS"]:  # an ndarray attribute device arrays do not have
                a = a.copy()
            return kernel(a.reshape(-1, a.shape[-1])).reshape(a.shape)


        OVERLOADS = {"exp": (exp_kernel, exp)}
        """)
    )
    trnsim.torch.set_backend(f"nki:{path}")
    x = torch.randn(4, 6)
    y = torch.exp(x.to("trnsim"))
    rep = trnsim.torch.report()
    assert rep["ops"]["exp"]["backends"] == {f"nki:{path}": 1}
    assert rep["ops"]["exp"]["nki_host_path"]["count"] == 1
    assert "flags" in rep["ops"]["exp"]["nki_host_path"]["first_reason"]
    assert rep["transfers"]["nki_module_device_to_host"] == 1
    assert rep["transfers"]["nki_module_host_to_device"] == 1
    torch.testing.assert_close(y.cpu(), torch.exp(x), rtol=1.3e-6, atol=1e-5)


def test_backend_default_is_the_lowering():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    y = torch.relu(a.to("trnsim") @ b.to("trnsim"))
    rep = trnsim.torch.report()
    assert rep["backend"] == "lowering" and rep["nki_module"] is None
    assert rep["ops"]["mm"]["backends"] == {"lowering": 1}
    assert "nki_module_device_to_host" not in rep["transfers"]
    torch.testing.assert_close(y.cpu(), torch.relu(a @ b), rtol=1.3e-6, atol=1e-5)


def test_a_declined_call_form_runs_on_the_lowering():
    # The example's mm wrapper refuses an empty contraction (K = 0) from its own code.
    trnsim.torch.set_backend(LABEL)
    a, b = torch.randn(3, 0), torch.randn(0, 5)
    y = a.to("trnsim") @ b.to("trnsim")
    rep = trnsim.torch.report()
    assert rep["ops"]["mm"]["backends"] == {"lowering": 1}
    declined = rep["ops"]["mm"]["nki_declined"]
    assert declined["count"] == 1 and "nki_backend_example.py:" in declined["first_reason"], declined
    torch.testing.assert_close(y.cpu(), a @ b)


def test_inplace_ops_use_the_module_for_their_functional_form():
    trnsim.torch.set_backend(LABEL)
    x, y = torch.randn(5, 7), torch.randn(5, 7)
    d = x.to("trnsim")
    v = d.t()
    d.add_(y.to("trnsim"), alpha=2.0)
    rep = trnsim.torch.report()
    assert rep["ops"]["add.Tensor"]["backends"] == {LABEL: 1}
    torch.testing.assert_close(v.cpu(), (x + 2.0 * y).t(), rtol=1.3e-6, atol=1e-5)


def _wrong_module(tmp_path):
    """The example module with add.Tensor's kernel swapped for one that subtracts."""
    path = tmp_path / "wrong_backend.py"
    path.write_text(
        textwrap.dedent(f"""\
        import importlib.util

        import neuronxcc.nki.language as nl
        from neuronxcc import nki

        _spec = importlib.util.spec_from_file_location("nki_backend_example_for_wrong", {EXAMPLE!r})
        ex = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(ex)


        @nki.jit
        def wrong_add_kernel(a, b, alpha, out_dtype):
            rows, cols = a.shape
            out = nl.ndarray((rows, cols), dtype=out_dtype, buffer=nl.shared_hbm)
            x = nl.load(a)
            y = nl.load(b)
            nl.store(out, value=nl.subtract(x, y, dtype=out_dtype))
            return out


        OVERLOADS = dict(ex.OVERLOADS)
        OVERLOADS["add.Tensor"] = (wrong_add_kernel, ex.add_tensor)
        """)
    )
    line = next(i for i, s in enumerate(path.read_text().splitlines(), 1) if s.startswith("def wrong_add_kernel"))
    return path, line


def test_check_mode_names_a_wrong_kernel(tmp_path):
    path, line = _wrong_module(tmp_path)
    trnsim.torch.set_backend(f"nki:{path}")
    cpu = _params(3)
    dev = [t.to("trnsim") for t in cpu]
    with trnsim.torch.checking():
        _mlp(*dev)
    rep = trnsim.torch.report()
    first = rep["first_out_of_tolerance"]
    assert first is not None and first["op"] == "add.Tensor", first
    assert first["backends"] == [f"nki:{path}"]
    assert any(
        k.startswith("wrong_add_kernel (") and k.endswith(f"wrong_backend.py:{line})") for k in first["kernels"]
    ), first
    assert rep["ops"]["add.Tensor"]["drift"]["out_of_tolerance"] >= 1
    # The other kernels of the module are right.
    for op in ("mm", "relu", "_softmax"):
        assert rep["ops"][op]["drift"]["out_of_tolerance"] == 0, (op, rep["ops"][op])


def test_env_spelling_and_a_bad_spelling(tmp_path):
    script = (
        "import torch, trnsim.torch, json; a = torch.randn(4, 6); d = a.to('trnsim'); "
        "torch.testing.assert_close(torch.exp(d).cpu(), torch.exp(a), rtol=1.3e-6, atol=1e-5); "
        "r = trnsim.torch.report(); print(json.dumps([r['backend'], r['ops']['exp']['backends']]))"
    )
    env = dict(os.environ, TRNSIM_TORCH_BACKEND=LABEL)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [LABEL, {LABEL: 1}]
    with pytest.raises(trnsim.torch.BackendError, match="expected `lowering` or `nki:MODULE`"):
        trnsim.torch.set_backend("nki_backend_example")
    with pytest.raises(trnsim.torch.BackendError, match="no such file"):
        trnsim.torch.set_backend(f"nki:{tmp_path / 'missing.py'}")
    assert _device.STATE.backend is None


def test_a_failing_kernel_names_its_module_line(tmp_path):
    path = tmp_path / "failing_backend.py"
    path.write_text(
        textwrap.dedent("""\
        import neuronxcc.nki.language as nl
        from neuronxcc import nki


        @nki.jit
        def exp_kernel(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nl.exp(nl.load(a[0:a.shape[0] + 4, :])))
            return out


        def exp(kernel, a):
            return kernel(a.reshape(-1, a.shape[-1])).reshape(a.shape)


        OVERLOADS = {"exp": (exp_kernel, exp)}
        """)
    )
    trnsim.torch.set_backend(f"nki:{path}")
    with pytest.raises(trnsim.torch.TrnsimError, match=r"failing_backend\.py:\d+"):
        torch.exp(torch.randn(4, 6).to("trnsim"))


@pytest.mark.parametrize("script,args", [("mlp_train.py", []), ("model_forward.py", ["gpt2"])])
def test_examples_train_and_run_with_the_module(script, args, tmp_path):
    # Autograd and the optimiser through the module's kernels (mm, add, mul, relu, gelu, sums, …):
    # the script itself exits non-zero when a step's loss (or the output) leaves its CPU bound.
    if script == "model_forward.py":
        pytest.importorskip("transformers")
    report = tmp_path / "r.json"
    env = dict(os.environ, TRNSIM_TORCH_BACKEND=LABEL, TRNSIM_TORCH_REPORT=str(report))
    path = os.path.join(HERE, "..", "examples", "torch", script)
    out = subprocess.run(
        [sys.executable, path, *args], check=False, capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rep = json.loads(report.read_text())
    assert rep["backend"] == LABEL and rep["fallback_count"] == 0
    ops = rep["ops"]
    assert LABEL in ops["mm"]["backends"] and LABEL in ops["add.Tensor"]["backends"], ops
    assert not any("nki_host_path" in e for e in ops.values())


def test_kernels_are_traced_for_the_device_target():
    # On a trn2 device, a legacy-API kernel is traced for trn2 and runs in the session (a program
    # traced for trn1 would be refused by the trn2 session and need the host path).
    script = (
        "import torch, trnsim.torch, json; a = torch.randn(4, 6); "
        "torch.testing.assert_close(torch.exp(a.to('trnsim')).cpu(), torch.exp(a), rtol=1.3e-6, atol=1e-5); "
        "print(json.dumps(trnsim.torch.report()['ops']['exp']))"
    )
    env = dict(os.environ, TRNSIM_TORCH_BACKEND=LABEL, TRNSIM_TORCH_TARGET="trn2")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    exp = json.loads(out.stdout.strip().splitlines()[-1])
    assert exp["backends"] == {LABEL: 1} and "nki_host_path" not in exp, exp
