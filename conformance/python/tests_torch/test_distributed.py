"""torch.distributed on the trnsim device with backend ``trnsim``, launched by torchrun in a
subprocess (bounded in time), against the same scripts on the CPU with gloo.

Rendezvous is on 127.0.0.1. When the machine allows it, every job runs in its own network
namespace that has only the loopback interface (``unshare -rn``), so nothing it opens can
listen beyond loopback (torchrun's TCPStore binds every interface of its namespace)."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TORCHRUN = Path(sys.executable).with_name("torchrun")
TIMEOUT = 150


def _netns() -> list[str]:
    if shutil.which("unshare") and shutil.which("ip"):
        r = subprocess.run(["unshare", "-rn", "true"], check=False, capture_output=True, timeout=10)
        if r.returncode == 0:
            return ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$0" "$@"']
    return []


NETNS = _netns()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    # The rank processes import the trnsim this test imported (installed, or a source tree with its
    # native module), never a source tree without one.
    import trnsim

    where = str(Path(trnsim.__file__).resolve().parent.parent)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=where + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TRNSIM_TORCH_CHECK", None)
    return env


def torchrun(script: str, args: list[str], nproc: int, tmp: Path, env_extra=None, nnodes: int = 1) -> None:
    port = _port()
    common = [
        str(TORCHRUN),
        "--nproc_per_node",
        str(nproc // nnodes),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(port),
        "--local_addr",
        "127.0.0.1",
        "--max_restarts",
        "0",
    ]
    env = _env()
    env.update(env_extra or {})
    if nnodes == 1:
        cmds = [common + ["--nnodes", "1", str(HERE / script), *args]]
    else:
        cmds = [
            common + ["--nnodes", str(nnodes), "--node_rank", str(k), str(HERE / script), *args] for k in range(nnodes)
        ]
    if NETNS and nnodes > 1:
        # all "nodes" in one loopback-only namespace
        inner = " & ".join(" ".join(f"'{c}'" for c in cmd) for cmd in cmds) + " & wait"
        procs = [
            subprocess.Popen(
                ["unshare", "-rn", "sh", "-c", f"ip link set lo up && ({inner})"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=tmp,
            )
        ]
    else:
        procs = [
            subprocess.Popen(NETNS + cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp)
            for cmd in cmds
        ]
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=TIMEOUT)
            outs.append(out.decode(errors="replace"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in zip(procs, outs):
        assert p.returncode == 0, f"torchrun {script} {args} failed:\n{out[-6000:]}"


def train(tmp: Path, name: str, nproc: int, *args: str, nnodes: int = 1) -> dict:
    out = tmp / f"{name}.json"
    torchrun("dist_train.py", [*args, "--out", str(out)], nproc, tmp, nnodes=nnodes)
    return json.loads(out.read_text())


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-30)


def _dist(p: dict, q: dict) -> float:
    return math.sqrt(sum((x - y) ** 2 for k in p for x, y in zip(p[k], q[k])))


DEV = ["--device", "trnsim", "--backend", "trnsim"]
CPU = ["--device", "cpu", "--backend", "gloo"]


@pytest.fixture(scope="module")
def ddp_cpu(tmp_path_factory):
    return train(tmp_path_factory.mktemp("ddp"), "cpu", 2, *CPU, "--mode", "ddp")


def test_ddp_sgd_matches_cpu_gloo(tmp_path, ddp_cpu):
    dev = train(tmp_path, "dev", 2, *DEV, "--mode", "ddp")
    assert len(dev["losses"]) == 5
    for a, b in zip(dev["losses"], ddp_cpu["losses"]):
        assert _rel(a, b) <= 1e-5, (dev["losses"], ddp_cpu["losses"])
    rep = dev["collectives"]
    assert rep["calls"] > 0 and any(k.startswith("all_reduce/") for k in rep["by_collective"])
    for v in rep["by_collective"].values():
        assert v["bytes"] >= 0 and v["est_time_us"] >= 0


def test_ddp_two_nodes_on_loopback(tmp_path, ddp_cpu):
    dev = train(tmp_path, "dev2", 2, *DEV, "--mode", "ddp", nnodes=2)
    for a, b in zip(dev["losses"], ddp_cpu["losses"]):
        assert _rel(a, b) <= 1e-5


def test_ddp_adamw_within_twice_the_cpu_float32_float64_distance(tmp_path):
    c32 = train(tmp_path, "c32", 2, *CPU, "--mode", "ddp", "--opt", "adamw")
    c64 = train(tmp_path, "c64", 2, *CPU, "--mode", "ddp", "--opt", "adamw", "--dtype", "float64")
    dev = train(tmp_path, "dev", 2, *DEV, "--mode", "ddp", "--opt", "adamw")
    ref = _dist(c32["params"], c64["params"])
    assert ref > 0
    assert _dist(dev["params"], c32["params"]) <= 2 * ref, (_dist(dev["params"], c32["params"]), ref)


def test_dtensor_tensor_parallel_mlp_matches_cpu_gloo(tmp_path):
    cpu = train(tmp_path, "cpu", 2, *CPU, "--mode", "tp")
    dev = train(tmp_path, "dev", 2, *DEV, "--mode", "tp")
    for a, b in zip(dev["losses"], cpu["losses"]):
        assert _rel(a, b) <= 1e-5, (dev["losses"], cpu["losses"])


def test_fsdp2_fully_shard_matches_cpu_gloo(tmp_path):
    cpu = train(tmp_path, "cpu", 2, *CPU, "--mode", "fsdp")
    dev = train(tmp_path, "dev", 2, *DEV, "--mode", "fsdp")
    for a, b in zip(dev["losses"], cpu["losses"]):
        assert _rel(a, b) <= 1e-5, (dev["losses"], cpu["losses"])


@pytest.mark.parametrize("nproc,fallback", [(4, "0"), (2, "1")])
def test_every_collective_matches_gloo(tmp_path, nproc, fallback):
    # With the CPU fallback on, the collectives still run on the backend (they used to run on
    # the CPU and leave all_gather's outputs at zero).
    out = tmp_path / "coll.json"
    torchrun("dist_collectives.py", [str(out)], nproc, tmp_path, env_extra={"TRNSIM_TORCH_FALLBACK": fallback})
    res = json.loads(out.read_text())
    assert res["failures"] == []
    for name in (
        "all_gather",
        "all_gather_into_tensor",
        "reduce_scatter.uneven",
        "reduce_scatter_tensor",
        "all_to_all_single.uneven",
        "all_to_all",
        "broadcast.0",
        "reduce",
        "send_recv",
        "coalesced",
        "funcol.all_reduce",
        "funcol.all_gather_tensor",
        "funcol.reduce_scatter_tensor",
        "new_group.all_reduce",
        "scatter",
        "gather",
        "all_reduce.AVG",
        "all_reduce.empty",
    ):
        assert name in res["ok"], name
    assert any(o.startswith("premul_sum refused") for o in res["ok"])
