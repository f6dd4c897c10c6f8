"""Every collective of the trnsim backend against gloo on the CPU, in one torchrun job
(tests_torch/test_distributed.py). Writes ``{"ok": [...], "failures": [...]}`` from rank 0."""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
import trnsim.torch  # noqa: F401

dist.init_process_group("trnsim")
rank, world = dist.get_rank(), dist.get_world_size()
cpu = dist.new_group(backend="gloo")
D = "trnsim"
ok, failures = [], []


def check(name, got, want, exact=True):
    got = [g.cpu() for g in got] if isinstance(got, (list, tuple)) else [got.cpu()]
    want = want if isinstance(want, (list, tuple)) else [want]
    for g, w in zip(got, want):
        same = torch.equal(g, w) if exact else torch.allclose(g, w, rtol=1e-6, atol=1e-6)
        if not same:
            failures.append(f"{name}: rank {rank}: got {g.tolist()} want {w.tolist()}")
            return
    ok.append(name)


def base(n=6, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + rank)
    if dtype.is_floating_point:
        return torch.randn(n, generator=g).to(dtype)
    return torch.randint(1, 50, (n,), generator=g, dtype=dtype)


# all_reduce, every ReduceOp gloo also has (AVG is checked against SUM / world)
for op in (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX):
    x = base()
    y = x.clone().to(D)
    dist.all_reduce(y, op=op)
    dist.all_reduce(x, op=op, group=cpu)
    check(f"all_reduce.{op}", y, x, exact=op in (dist.ReduceOp.MIN, dist.ReduceOp.MAX) or world <= 2)
for op in (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR, dist.ReduceOp.SUM, dist.ReduceOp.MAX):
    x = base(dtype=torch.int32)
    y = x.clone().to(D)
    dist.all_reduce(y, op=op)
    dist.all_reduce(x, op=op, group=cpu)
    check(f"all_reduce.int32.{op}", y, x)
x = base()
y = x.clone().to(D)
dist.all_reduce(y, op=dist.ReduceOp.AVG)
dist.all_reduce(x, group=cpu)
check("all_reduce.AVG", y, x * (1.0 / world), exact=False)
# non-contiguous view, 0-d and empty tensors
m = base(12).reshape(3, 4)
md = m.clone().to(D)
dist.all_reduce(md[:, 1])
mc = m[:, 1].clone()
dist.all_reduce(mc, group=cpu)
m[:, 1] = mc
check("all_reduce.view", md, m, exact=world <= 2)
z = torch.tensor(float(rank + 1))
zd = z.to(D)
dist.all_reduce(zd)
check("all_reduce.0d", zd, torch.tensor(float(world * (world + 1) // 2)))
e = torch.empty(0, device=D)
dist.all_reduce(e)
check("all_reduce.empty", e, torch.empty(0))

# gathers
x = base(3)
outs = [torch.zeros(3, device=D) for _ in range(world)]
dist.all_gather(outs, x.to(D))
ref = [torch.zeros(3) for _ in range(world)]
dist.all_gather(ref, x, group=cpu)
check("all_gather", outs, ref)
big = torch.zeros(3 * world, device=D)
dist.all_gather_into_tensor(big, x.to(D))
check("all_gather_into_tensor", big, torch.cat(ref))

# reduce-scatter
full = base(4 * world)
o = torch.zeros(4, device=D)
dist.reduce_scatter_tensor(o, full.to(D))
full_c = full.clone()
dist.all_reduce(full_c, group=cpu)
check("reduce_scatter_tensor", o, full_c[4 * rank : 4 * rank + 4], exact=world <= 2)
parts = [base(r + 1, seed=10 + r) for r in range(world)]
o = torch.zeros(rank + 1, device=D)
dist.reduce_scatter(o, [p.to(D) for p in parts])
ref = [p.clone() for p in parts]
for t in ref:
    dist.all_reduce(t, group=cpu)
check("reduce_scatter.uneven", o, ref[rank], exact=world <= 2)

# broadcast, reduce
for root in range(world):
    b = base(5, seed=root).to(D)
    dist.broadcast(b, root)
    bc = base(5, seed=root)
    dist.broadcast(bc, root, group=cpu)
    check(f"broadcast.{root}", b, bc)
r = base(5)
rd = r.clone().to(D)
dist.reduce(rd, 0)
dist.reduce(r, 0, group=cpu)
if rank == 0:
    check("reduce", rd, r, exact=world <= 2)

# all-to-all with uneven splits
in_splits = [(rank + d) % 3 + 1 for d in range(world)]
out_splits = [(s + rank) % 3 + 1 for s in range(world)]
inp = torch.arange(sum(in_splits), dtype=torch.float32) + 100 * rank
out = torch.zeros(sum(out_splits), device=D)
dist.all_to_all_single(out, inp.to(D), out_splits, in_splits)
outc = torch.zeros(sum(out_splits))
dist.all_to_all_single(outc, inp, out_splits, in_splits, group=cpu)
check("all_to_all_single.uneven", out, outc)
ins = [torch.full((d + 1,), float(rank * 10 + d)) for d in range(world)]
outs = [torch.zeros(rank + 1, device=D) for _ in range(world)]
dist.all_to_all(outs, [t.to(D) for t in ins])
check("all_to_all", outs, [torch.full((rank + 1,), float(s * 10 + rank)) for s in range(world)])

# scatter, gather
sc = torch.zeros(2, device=D)
dist.scatter(sc, [torch.full((2,), float(d)).to(D) for d in range(world)] if rank == 0 else None, src=0)
check("scatter", sc, torch.full((2,), float(rank)))
gl = [torch.zeros(2, device=D) for _ in range(world)] if rank == 0 else None
dist.gather(torch.full((2,), float(rank)).to(D), gl, dst=0)
if rank == 0:
    check("gather", gl, [torch.full((2,), float(s)) for s in range(world)])

# point to point and barrier
if rank == 0:
    dist.send(torch.arange(4, dtype=torch.float32).to(D), 1)
elif rank == 1:
    rv = torch.zeros(4, device=D)
    dist.recv(rv, 0)
    check("send_recv", rv, torch.arange(4, dtype=torch.float32))
dist.barrier()

# coalesced
ts = [base(3, seed=1).to(D), base(2, seed=2).to(D)]
with dist._coalescing_manager(async_ops=False):
    for t in ts:
        dist.all_reduce(t)
cs = [base(3, seed=1), base(2, seed=2)]
for t in cs:
    dist.all_reduce(t, group=cpu)
check("coalesced", ts, cs, exact=world <= 2)

# functional collectives
w = fc.all_reduce(base(4).to(D), "sum", dist.group.WORLD)
wc = base(4)
dist.all_reduce(wc, group=cpu)
check("funcol.all_reduce", fc.wait_tensor(w), wc, exact=world <= 2)
g = fc.all_gather_tensor(base(2).to(D), 0, dist.group.WORLD)
gc = torch.zeros(2 * world)
dist.all_gather_into_tensor(gc, base(2), group=cpu)
check("funcol.all_gather_tensor", g, gc)
rs = fc.reduce_scatter_tensor(base(2 * world).to(D), "sum", 0, dist.group.WORLD)
rc = base(2 * world)
dist.all_reduce(rc, group=cpu)
check("funcol.reduce_scatter_tensor", rs, rc[2 * rank : 2 * rank + 2], exact=world <= 2)

# sub-groups
sub = dist.new_group([0, 1])
if rank in (0, 1):
    s = torch.full((3,), float(rank + 1)).to(D)
    dist.all_reduce(s, group=sub)
    check("new_group.all_reduce", s, torch.full((3,), 3.0))

# refusals name the collective
try:
    dist.all_reduce(torch.ones(2, device=D), op=dist._make_nccl_premul_sum(2.0))
    failures.append("premul_sum: not refused")
except Exception as ex:  # noqa: BLE001
    (ok if "PREMUL_SUM" in str(ex) else failures).append(f"premul_sum refused: {str(ex)[:200]}")

dist.barrier(group=cpu)
allres = [None] * world
dist.all_gather_object(allres, {"ok": ok, "failures": failures}, group=cpu)
if rank == 0:
    with open(sys.argv[1], "w") as f:
        json.dump(
            {
                "ok": sorted({o for r in allres for o in r["ok"]}),
                "failures": [x for r in allres for x in r["failures"]],
            },
            f,
            indent=1,
        )
dist.destroy_process_group()
os._exit(0)
