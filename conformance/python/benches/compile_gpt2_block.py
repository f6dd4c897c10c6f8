"""Simulating a compiled GPT-2 block forward against PyTorch CPU eager, in the same run.

Thread CPU time (time.thread_time), PyTorch on 1 thread, medians of repeated calls after a warm-up;
the model is tests_torch/_compile_models.py's GPT2Block (d=64, 4 heads, sequence 16, batch 2).
Also the warm compile: compiling a second instance of the model in the same process, in units of
one compiled forward. Run: python conformance/python/benches/compile_gpt2_block.py
"""

import pathlib
import statistics
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests_torch"))
import _compile_models as models
import trnsim.torch


def cpu_time(f, n):
    f()
    times = []
    for _ in range(n):
        t = time.thread_time()
        f()
        times.append(time.thread_time() - t)
    return statistics.median(times)


def main():
    torch.set_num_threads(1)
    trnsim.torch.register_compile_backend()
    torch.manual_seed(0)
    cpu_model = models.GPT2Block()
    x = torch.randn(2, 16, 64)
    with torch.no_grad():
        cpu = cpu_time(lambda: cpu_model(x), 50)
        dev_model = models.GPT2Block()
        dev_model.load_state_dict(cpu_model.state_dict())
        dev_model.to("trnsim")
        xd = x.to("trnsim")
        compiled = torch.compile(dev_model, backend="trnsim")
        t = time.thread_time()
        compiled(xd)
        first = time.thread_time() - t
        sim = cpu_time(lambda: compiled(xd), 10)
        eager = cpu_time(lambda: dev_model(xd), 5)
        second = models.GPT2Block().to("trnsim")
        t = time.thread_time()
        torch.compile(second, backend="trnsim")(xd)
        warm = time.thread_time() - t
    print(f"PyTorch CPU eager forward        {cpu * 1e3:8.3f} ms")
    print(f"device eager forward             {eager * 1e3:8.3f} ms  ({eager / cpu:.0f}x CPU)")
    print(f"compiled forward (simulated)     {sim * 1e3:8.3f} ms  ({sim / cpu:.0f}x CPU; target <= 10x)")
    print(f"first compile + run              {first:8.3f} s")
    print(f"warm compile + run (2nd model)   {warm:8.3f} s  ({warm / sim:.1f} compiled forwards; target < 10)")


if __name__ == "__main__":
    main()
