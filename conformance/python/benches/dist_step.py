"""One rank of the weak-scaling benchmark (benches/dist_weak_scaling.py): DDP steps of a 2-layer
Llama-style model (d=128, seq 64, batch 2 per rank) on the trnsim device with backend trnsim.
Writes each step's user+system CPU seconds of this process to ``--out``.rank<N>.json."""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import trnsim.torch  # noqa: F401
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * self.w


class Block(nn.Module):
    def __init__(self, d, heads, hidden):
        super().__init__()
        self.h = heads
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2)) * (d // self.h) ** -0.5 + mask
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.o(y)
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=7)
p.add_argument("--out", required=True)
a = p.parse_args()
dist.init_process_group("trnsim")
rank = dist.get_rank()
torch.manual_seed(0)
d, seq, batch = 128, 64, 2
model = nn.ModuleList([Block(d, 4, 4 * d) for _ in range(2)]).to("trnsim")


class Net(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.blocks = blocks

    def forward(self, x, mask):
        for blk in self.blocks:
            x = blk(x, mask)
        return x


net = torch.nn.parallel.DistributedDataParallel(Net(model))
opt = torch.optim.SGD(net.parameters(), lr=1e-3, foreach=False)
mask = torch.full((seq, seq), float("-inf")).triu(1).to("trnsim")
g = torch.Generator().manual_seed(rank)
cpu, wall = [], []
for _ in range(a.steps):
    x = torch.randn(batch, seq, d, generator=g).to("trnsim")
    y = torch.randn(batch, seq, d, generator=g).to("trnsim")
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    opt.zero_grad()
    loss = ((net(x, mask) - y) ** 2).mean()
    loss.backward()
    opt.step()
    float(loss.detach().cpu())
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu.append((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
    wall.append(time.perf_counter() - t0)
with open(f"{a.out}.rank{rank}.json", "w") as f:
    json.dump({"cpu_s": cpu, "wall_s": wall}, f)
dist.destroy_process_group()
os._exit(0)
