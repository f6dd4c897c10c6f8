"""A training script run unchanged on the CPU (gloo) and on the trnsim device (backend trnsim)
by tests_torch/test_distributed.py, under torchrun.

    torchrun --nproc_per_node 2 dist_train.py --device trnsim --backend trnsim --mode ddp --out r.json

Modes: ``ddp`` (DistributedDataParallel), ``fsdp`` (FSDP2 ``fully_shard``), ``tp`` (a DTensor
tensor-parallel MLP, ColwiseParallel then RowwiseParallel). Rank 0 writes the loss of every step
and the final parameters (as lists) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--device", default="cpu")
p.add_argument("--backend", default="gloo")
p.add_argument("--mode", default="ddp", choices=["ddp", "fsdp", "tp"])
p.add_argument("--opt", default="sgd", choices=["sgd", "adamw"])
p.add_argument("--dtype", default="float32")
p.add_argument("--steps", type=int, default=5)
p.add_argument("--out", required=True)
a = p.parse_args()

if a.device != "cpu":
    import trnsim.torch  # noqa: F401 - registers the device and its c10d backend

dist.init_process_group(a.backend)
rank, world = dist.get_rank(), dist.get_world_size()
dtype = getattr(torch, a.dtype)
dev = torch.device(a.device)

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 8)).to(dtype)
gen = torch.Generator().manual_seed(100 + (0 if a.mode == "tp" else rank))
xs = [torch.randn(4, 16, generator=gen, dtype=dtype) for _ in range(a.steps)]
ys = [torch.randn(4, 8, generator=gen, dtype=dtype) for _ in range(a.steps)]

model = model.to(dev)
if a.mode == "ddp":
    from torch.nn.parallel import DistributedDataParallel as DDP

    net = DDP(model)
elif a.mode == "fsdp":
    from torch.distributed.fsdp import fully_shard

    for layer in (model[0], model[2]):
        fully_shard(layer)
    net = fully_shard(model)
else:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(a.device, (world,))
    net = parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})

opt = (
    torch.optim.SGD(net.parameters(), lr=0.1, foreach=False)
    if a.opt == "sgd"
    else torch.optim.AdamW(net.parameters(), lr=0.01, foreach=False)
)
losses = []
for x, y in zip(xs, ys):
    x, y = x.to(dev), y.to(dev)
    opt.zero_grad()
    loss = ((net(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    lv = loss.detach()
    if a.mode != "tp":
        dist.all_reduce(lv)
        lv = lv / world
    elif hasattr(lv, "full_tensor"):
        lv = lv.full_tensor()
    losses.append(float(lv.cpu()))

params = {}
for name, prm in net.named_parameters():
    t = prm.detach()
    if hasattr(t, "full_tensor"):
        t = t.full_tensor()
    params[name] = t.cpu().double().reshape(-1).tolist()
if rank == 0:
    report = None
    if a.device != "cpu":
        import trnsim.torch.distributed as tdist

        report = tdist.report()
        report.pop("log")
    with open(a.out, "w") as f:
        json.dump({"losses": losses, "params": params, "world": world, "collectives": report}, f)
dist.destroy_process_group()
os._exit(0)
