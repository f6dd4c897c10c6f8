"""Train a small MLP for 20 steps on the `trnsim` device and on the CPU from the same initial
weights (dropout off), and compare every step's loss (docs/torch-device.md).

    python conformance/python/examples/torch/mlp_train.py [--steps 20] [--json out.json]
"""

import argparse
import copy
import json

import torch
import trnsim.torch
from torch import nn


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, device: str) -> list[float]:
    model = model.to(device)
    x, y = x.to(device), y.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 4))
    x = torch.randn(64, 16)
    y = torch.randint(0, 4, (64,))
    cpu = train(copy.deepcopy(model), x, y, a.steps, "cpu")
    dev = train(copy.deepcopy(model), x, y, a.steps, "trnsim")
    worst = max(abs(d - c) / abs(c) for d, c in zip(dev, cpu))
    print("step  cpu loss     trnsim loss  rel diff")
    for i, (c, d) in enumerate(zip(cpu, dev)):
        print(f"{i:4d}  {c:.6f}  {d:.6f}  {abs(d - c) / abs(c):.2e}")
    print(f"worst relative difference: {worst:.2e} (bound 1e-3)")
    rep = trnsim.torch.report()
    print(
        f"device programs: {rep['device_programs']}, fallbacks: {rep['fallback_count']}, "
        f"estimated device time: {rep['est_device_time_us']:.1f} us"
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu, "trnsim": dev, "worst_rel": worst, "report": rep}, f, indent=2)
    if worst > 1e-3 or rep["fallback_count"]:
        raise SystemExit("trnsim run does not match the CPU run")


if __name__ == "__main__":
    main()
