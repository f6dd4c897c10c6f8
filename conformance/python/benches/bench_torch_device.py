"""The PyTorch device's cost against PyTorch's CPU eager, measured in the same run
(docs/performance.md, "PyTorch device"). Run once, with torch installed:

    python conformance/python/benches/bench_torch_device.py [--profile N] [--only llama|gpt2]

1. One training step of a 2-layer Llama-style decoder (d = 128, 4 heads, sequence 64, batch 2,
   RMSNorm, causal attention, SwiGLU, AdamW): on the device, against the same step on the CPU.
   Target: at most 30x.
2. A GPT-2-small decoder block forward (d = 768, 12 heads, sequence 128, batch 1, no grad): on
   the device, against CPU eager. Target: at most 10x.

Times are CPU time of the whole process (every thread: the simulator's too) with PyTorch on one
thread, the least of a few repetitions after a warm-up; the machine is shared, and both sides of
each ratio are measured alike. The device is also timed with its program cache off (every op
lowered again), the baseline of the cache's saving. `--profile N` prints cProfile's N most expensive functions of one
device step instead.
"""

import argparse
import cProfile
import json
import math
import pstats
import time

import torch
import trnsim.torch

torch.set_num_threads(1)


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaLayer(torch.nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d, bias=False) for _ in range(4))
        self.gate, self.up = torch.nn.Linear(d, ff, bias=False), torch.nn.Linear(d, ff, bias=False)
        self.down = torch.nn.Linear(ff, d, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        h = self.n1(x)
        q, k, v = (p(h).view(b, s, self.heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        h = self.n2(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


class Llama(torch.nn.Module):
    def __init__(self, vocab=256, d=128, heads=4, layers=2, ff=352):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.layers = torch.nn.ModuleList(LlamaLayer(d, heads, ff) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


class GPT2Block(torch.nn.Module):
    def __init__(self, d=768, heads=12):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.attn, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.attn(self.ln1(x)).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, d))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def best_of(n, f):
    times = []
    for _ in range(n):
        t0 = time.process_time()
        f()
        times.append(time.process_time() - t0)
    return min(times)


def llama_step(device):
    torch.manual_seed(0)
    model = Llama().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.randint(0, 256, (2, 64)).to(device)
    tgt = torch.randint(0, 256, (2, 64)).to(device)

    def step():
        opt.zero_grad()
        logits = model(idx)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), tgt.reshape(-1))
        loss.backward()
        opt.step()
        loss.item()

    return step


def gpt2_forward(device):
    torch.manual_seed(0)
    block = GPT2Block().eval().to(device)
    x = torch.randn(1, 128, 768).to(device)

    def fwd():
        with torch.no_grad():
            block(x).sum().item()

    return fwd


def measure(name, make, reps_cpu, reps_dev):
    from trnsim.torch import _device

    cpu = make("cpu")
    cpu()
    t_cpu = best_of(reps_cpu, cpu)
    dev = make("trnsim")
    dev()
    # The same steps with the program cache off: every op lowered again (the baseline of the
    # cache's saving, in the same run).
    cached = _device.CACHE
    _device.CACHE = _device.ProgramCache(0, 0)
    try:
        t_uncached = best_of(reps_dev, dev)
    finally:
        _device.CACHE = cached
    dev()
    trnsim.torch.reset_report()
    t_dev = best_of(reps_dev, dev)
    rep = trnsim.torch.report()
    per = {
        "op_calls": rep["op_calls"] // reps_dev,
        "device_programs": rep["device_programs"] // reps_dev,
        "est_device_time_us": round(rep["est_device_time_us"] / reps_dev, 1),
        "program_cache": rep.get("program_cache"),
    }
    return {
        "bench": name,
        "cpu_s": round(t_cpu, 5),
        "device_s": round(t_dev, 4),
        "ratio": round(t_dev / t_cpu, 1),
        "device_uncached_s": round(t_uncached, 4),
        "ratio_uncached": round(t_uncached / t_cpu, 1),
        **per,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", type=int, default=0)
    ap.add_argument("--only", choices=["llama", "gpt2"])
    args = ap.parse_args()
    benches = {"llama": (llama_step, 10, 3, 30.0), "gpt2": (gpt2_forward, 10, 3, 10.0)}
    if args.only:
        benches = {args.only: benches[args.only]}
    if args.profile:
        for make, *_ in benches.values():
            f = make("trnsim")
            f()
            prof = cProfile.Profile()
            prof.runcall(f)
            pstats.Stats(prof).sort_stats("tottime").print_stats(args.profile)
        return
    for name, (make, rc, rd, target) in benches.items():
        res = measure(name, make, rc, rd)
        res["target"] = f"<= {target:g}x"
        res["met"] = res["ratio"] <= target
        print(json.dumps(res))


if __name__ == "__main__":
    main()
