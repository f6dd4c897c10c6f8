"""The `neuron` opt-in (trnsim.neuron; docs/torch-device.md, "TorchNeuron's name").

PyTorch names its PrivateUse1 backend once per process, and this test process has registered the
device as `trnsim`, so every claim about the `neuron` name is checked in a fresh process. Each
child gets the `trnsim` this test imports (PYTHONPATH) and, when no installed distribution
declares the `torch.backends` entry point (a run from the source tree), a temporary one that
declares it as pyproject.toml does, so `import torch` autoloads exactly as an installed package.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import textwrap
from importlib import metadata

import pytest
import torch
import trnsim
import trnsim.neuron
import trnsim.torch

ENTRY = "trnsim.neuron:autoload"
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(trnsim.__file__)))
PYPROJECT = os.path.join(os.path.dirname(__file__), os.pardir, "pyproject.toml")


def _declared() -> bool:
    return any(ep.value == ENTRY for ep in metadata.entry_points(group="torch.backends"))


@pytest.fixture(scope="module")
def child_path(tmp_path_factory):
    """PYTHONPATH for a child: this test's trnsim, plus the entry point if nothing installed declares it."""
    # An installed trnsim is in the child's site-packages already; prepending that directory would
    # put it before the venv's own packages.
    sites = {os.path.realpath(p) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    parts = [] if os.path.realpath(PACKAGE_DIR) in sites else [PACKAGE_DIR]
    if not _declared():
        root = tmp_path_factory.mktemp("entry_point")
        info = root / "trnsim_autoload_for_tests-0.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: trnsim-autoload-for-tests\nVersion: 0.0\n")
        (info / "entry_points.txt").write_text(f"[torch.backends]\ntrnsim = {ENTRY}\n")
        parts.append(str(root))
    old = os.environ.get("PYTHONPATH")
    return os.pathsep.join(parts + ([old] if old else []))


def test_fork_rng_restores_the_device_generator():
    torch.manual_seed(3)
    with torch.random.fork_rng(device_type="trnsim"):
        torch.randn(8, device="trnsim")
    a = torch.randn(8, device="trnsim").cpu()
    torch.manual_seed(3)
    b = torch.randn(8, device="trnsim").cpu()
    assert torch.equal(a, b)


def run_child(code: str, child_path: str, check: bool = True, extra_path: str | None = None, **env):
    e = {k: v for k, v in os.environ.items() if k not in ("TRNSIM_AS_NEURON", "TORCH_DEVICE_BACKEND_AUTOLOAD")}
    e["PYTHONPATH"] = child_path if extra_path is None else os.pathsep.join([extra_path, child_path])
    e.update(env)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], check=False, capture_output=True, text=True, env=e, timeout=600
    )
    if check:
        assert out.returncode == 0, f"child failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    return out


def last_json(out) -> dict:
    return json.loads(out.stdout.strip().splitlines()[-1])


# A TorchNeuron-style script: it never imports trnsim. It trains one SGD step of a small MLP on
# `neuron` and the same step on the CPU from the same weights and data.
SCRIPT = """
import copy, json, sys
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
cpu_model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
x = torch.randn(6, 8)
y = torch.randint(0, 4, (6,))

device = torch.accelerator.current_accelerator()  # code written against torch.accelerator
assert device == torch.device("neuron")
device = torch.device("neuron", 0)
torch.neuron.manual_seed(1234)
model = copy.deepcopy(cpu_model).to("neuron")
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1, momentum=0.9)
losses = []
for _ in range(2):
    for m, o, dev in ((model, opt, device), (cpu_model, cpu_opt, "cpu")):
        o.zero_grad()
        loss = F.cross_entropy(m(x.to(dev)), y.to(dev))
        loss.backward()
        o.step()
        losses.append(loss.item())
torch.neuron.synchronize()
torch.accelerator.synchronize()

for p, q in zip(model.parameters(), cpu_model.parameters()):
    assert p.device == device and p.is_neuron, p.device
    torch.testing.assert_close(p.grad.cpu(), q.grad)
    torch.testing.assert_close(p.detach().cpu(), q.detach())

# torch.neuron seeding: the same seed gives the same draws, the next draw differs, the state
# round-trips, and torch.manual_seed seeds the device too.
torch.neuron.manual_seed(7)
a = torch.randn(64, device="neuron").cpu()
torch.neuron.manual_seed(7)
b = torch.randn(64, device="neuron").cpu()
c = torch.randn(64, device="neuron").cpu()
state = torch.neuron.get_rng_state()
d = torch.randn(64, device="neuron").cpu()
torch.neuron.set_rng_state(state)
e = torch.randn(64, device="neuron").cpu()
torch.manual_seed(7)
f = torch.randn(64, device="neuron").cpu()

side = torch.neuron.Stream()
with torch.neuron.stream(side):
    z = torch.ones(8, device="neuron") * 3
torch.neuron.current_stream().wait_stream(side)

import torch_neuronx
before = torch.neuron.memory_allocated()
t = torch.ones(1000, device="neuron")
grown = torch.neuron.memory_allocated() - before
del t
print(json.dumps({
    "losses": losses,
    "same_seed_same_draws": torch.equal(a, b), "next_draw_differs": not torch.equal(b, c),
    "state_round_trip": torch.equal(d, e), "torch_manual_seed_seeds_device": torch.equal(a, f),
    "initial_seed": torch.neuron.initial_seed(), "state_dtype": str(state.dtype), "state_numel": state.numel(),
    "available": torch.neuron.is_available(), "count": torch.neuron.device_count(),
    "current": torch.neuron.current_device(),
    "accelerator": str(torch.accelerator.current_accelerator()),
    "accelerator_count": torch.accelerator.device_count(),
    "x_device": str(x.to("neuron").device), "backend": torch._C._get_privateuse1_backend_name(),
    "trnsim_registered": hasattr(torch, "trnsim"),
    "shim": getattr(torch_neuronx, "__trnsim_shim__", False),
    "grown": grown, "freed": torch.neuron.memory_allocated() == before,
    "loaded_by_autoload": "trnsim.torch" in sys.modules,
    "stream": repr(side), "side_result": z.sum().item(),
}))
"""


def test_unchanged_script_runs_on_the_simulator_with_the_opt_in(child_path):
    out = run_child(SCRIPT, child_path, TRNSIM_AS_NEURON="1")
    r = last_json(out)
    assert r["backend"] == "neuron" and r["x_device"] == "neuron:0" and not r["trnsim_registered"]
    assert r["loaded_by_autoload"]  # the script never imported trnsim: the entry point did
    dev, cpu = r["losses"][0::2], r["losses"][1::2]
    for d, c in zip(dev, cpu):
        assert abs(d - c) <= 1e-5 * abs(c), (dev, cpu)
    assert r["same_seed_same_draws"] and r["next_draw_differs"] and r["state_round_trip"]
    assert r["torch_manual_seed_seeds_device"] and r["initial_seed"] == 7
    assert (r["state_dtype"], r["state_numel"]) == ("torch.uint8", 16)
    assert (r["available"], r["count"], r["current"]) == (True, 1, 0)
    assert (r["accelerator"], r["accelerator_count"]) == ("neuron", 1)
    assert r["shim"]
    assert r["stream"].startswith("<torch.neuron.Stream device=neuron:0") and r["side_result"] == 24.0
    assert r["grown"] == 4000 and r["freed"]  # 1000 float32 values in the session, freed with the tensor


UNSET = """
import json, sys
import torch
res = {"has_neuron": hasattr(torch, "neuron"), "backend": torch._C._get_privateuse1_backend_name(),
       "trnsim_torch_loaded": "trnsim.torch" in sys.modules}
try:
    torch.ones(2, device="neuron")
    res["error"] = None
except RuntimeError as e:
    res["error"] = str(e)
try:
    import torch_neuronx
    res["shim"] = True
except ImportError:
    res["shim"] = False
if sys.argv[-1] == "then-trnsim":
    import trnsim.torch
    import torch.distributed as dist
    res["after_import"] = [hasattr(torch, "neuron"), torch.ones(2, device="trnsim").device.type,
                           trnsim.torch.device_name(), "NEURON" in dist.Backend._plugins,
                           hasattr(torch.Tensor, "is_neuron"), "torch_neuronx" in sys.modules]
print(json.dumps(res))
"""


def test_nothing_named_neuron_without_the_opt_in(child_path):
    stock = last_json(run_child(UNSET, child_path, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert stock["error"] and not stock["has_neuron"]
    for value in (None, "0"):
        env = {} if value is None else {"TRNSIM_AS_NEURON": value}
        r = last_json(run_child(UNSET, child_path, **env))
        assert not r["has_neuron"] and not r["shim"] and not r["trnsim_torch_loaded"]
        assert r["backend"] == "privateuseone"
        assert r["error"] == stock["error"]  # the tensor creation fails exactly as on stock torch
    code = UNSET.replace("sys.argv[-1]", '"then-trnsim"')
    r = last_json(run_child(code, child_path))
    assert r["after_import"] == [False, "trnsim", "trnsim", False, False, False]


def test_install_as_neuron_in_code_before_the_device_is_registered(child_path):
    code = """
        import json, os
        import trnsim.neuron
        neuron = trnsim.neuron.install_as_neuron()
        import torch, trnsim.torch
        assert neuron is torch.neuron and trnsim.torch.install_as_neuron() is torch.neuron
        x = torch.arange(6, dtype=torch.float32, device="neuron").reshape(2, 3)
        eager = [trnsim.torch.device_name(), str((x * 2).sum().cpu().item()), str(x.device),
                 os.environ.get("TRNSIM_AS_NEURON")]

        # torch.compile(backend="neuron"): the device's Dynamo backend, registered when Dynamo loads.
        def f(a, b):
            return torch.relu(a @ b).sum()
        a, b = torch.randn(8, 8), torch.randn(8, 8)
        got = torch.compile(f, backend="neuron")(a.to("neuron"), b.to("neuron"))
        torch.testing.assert_close(got.cpu(), f(a, b))
        graphs = trnsim.torch.compile_report()["graphs"]
        print(json.dumps([eager, got.device.type, len(graphs), graphs[0]["programs"]]))
    """
    r = last_json(run_child(code, child_path, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert r[0] == ["neuron", "30.0", "neuron:0", "1"]
    assert r[1:] == ["neuron", 1, 1]  # one graph, run as one joined program


def test_install_as_neuron_after_trnsim_registered_says_why():
    assert trnsim.torch.device_name() == "trnsim"  # this process
    with pytest.raises(trnsim.neuron.NeuronOptInError, match=r"already registered as `trnsim`.*TRNSIM_AS_NEURON=1"):
        trnsim.torch.install_as_neuron()
    assert not hasattr(torch, "neuron") and not trnsim.neuron._installed


@pytest.mark.parametrize(
    "value,on", [("1", True), ("yes", True), ("ON", True), ("0", False), ("", False), ("off", False)]
)
def test_opt_in_values(monkeypatch, value, on):
    monkeypatch.setenv("TRNSIM_AS_NEURON", value)
    assert trnsim.neuron.requested() is on


def test_opt_in_value_that_is_neither_on_nor_off_is_an_error(monkeypatch):
    monkeypatch.setenv("TRNSIM_AS_NEURON", "2")
    with pytest.raises(trnsim.neuron.NeuronOptInError, match=r"TRNSIM_AS_NEURON='2'"):
        trnsim.neuron.requested()


def fake_torch_neuronx(root) -> str:
    pkg = root / "torch_neuronx"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    return str(root)


def test_real_torch_neuronx_is_not_shadowed(child_path, tmp_path, monkeypatch):
    extra = fake_torch_neuronx(tmp_path)
    monkeypatch.syspath_prepend(extra)
    with pytest.raises(trnsim.neuron.NeuronOptInError, match="the real torch-neuronx is installed"):
        trnsim.neuron._refuse_real_torch_neuronx()
    # End to end: `import torch` with the opt-in set refuses, naming the reason.
    out = run_child("import torch", child_path, check=False, extra_path=extra, TRNSIM_AS_NEURON="1")
    assert out.returncode != 0 and "the real torch-neuronx is installed" in out.stderr, out.stderr


def test_another_privateuse1_backend_is_not_taken_over(child_path):
    code = """
        import torch
        torch.utils.rename_privateuse1_backend("otherdev")
        try:
            import trnsim.torch
        except Exception as e:
            print(type(e).__name__, e)
    """
    out = run_child(code, child_path, TORCH_DEVICE_BACKEND_AUTOLOAD="0", TRNSIM_AS_NEURON="1")
    assert "TrnsimError" in out.stdout and "already registered as `otherdev`" in out.stdout, out.stdout


def test_pyproject_declares_the_autoload_entry_point():
    tomllib = pytest.importorskip("tomllib")
    with open(PYPROJECT, "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["entry-points"]["torch.backends"] == {"trnsim": ENTRY}


def test_device_module_refuses_what_it_does_not_keep():
    mod = torch.trnsim  # the same device module is torch.neuron with the opt-in
    with pytest.raises(NotImplementedError, match=r"torch.trnsim.max_memory_allocated: not provided"):
        mod.max_memory_allocated()
    with pytest.raises(NotImplementedError, match=r"torch.trnsim.memory_stats"):
        mod.memory_stats()
    with pytest.raises(ValueError, match="device index 1 out of range"):
        mod.set_device(1)
    with pytest.raises(ValueError, match="is not a trnsim device"):
        mod.synchronize("cpu")
    with pytest.raises(ValueError, match="16-byte uint8 state"):
        mod.set_rng_state(torch.zeros(2, dtype=torch.int64))
    mod.set_device("trnsim:0")
    mod.synchronize(0)


def test_a_rank_names_its_own_core_by_local_rank(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")
    torch.trnsim.set_device(3)  # torch.neuron.set_device(local_rank) in a torchrun rank
    torch.trnsim.set_device(0)
    with pytest.raises(ValueError, match=r"index 2 out of range .*or 3 \(LOCAL_RANK\)"):
        torch.trnsim.set_device(2)


def test_shim_names_what_it_does_not_provide():
    from trnsim.torch import _neuronx_shim

    saved = sys.modules.pop("torch_neuronx", None)
    try:
        shim = _neuronx_shim.install()
        with pytest.raises(AttributeError, match=r"torch_neuronx.nki_op: trnsim's torch_neuronx stand-in"):
            shim.nki_op  # noqa: B018
    finally:
        sys.modules.pop("torch_neuronx", None)
        if saved is not None:
            sys.modules["torch_neuronx"] = saved


def test_accelerator_api_answers_for_the_device():
    acc = torch.accelerator
    assert acc.current_accelerator().type == "trnsim" and acc.device_count() == 1 and acc.is_available()
    acc.synchronize()
    acc.set_device_index(0)
    assert acc.current_device_index() == 0
    x = torch.ones(256, device="trnsim")
    assert acc.memory_allocated() == acc.memory.memory_allocated() == torch.trnsim.memory_allocated() > 0
    del x
    with pytest.raises(NotImplementedError, match="max_memory_allocated"):
        acc.max_memory_allocated()
    with pytest.raises(NotImplementedError, match="mem_get_info"):
        acc.get_memory_info()
    torch.manual_seed(11)
    assert acc.random.initial_seed() == torch.trnsim.initial_seed() == 11
    assert torch.equal(acc.random.get_rng_state(), torch.trnsim.get_rng_state())
