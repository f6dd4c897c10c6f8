"""Run a model's forward pass on `trnsim` in check mode: every op also runs on the CPU on the
same inputs, and the report records ops, drift, fallbacks and estimated device time
(docs/torch-device.md). Random weights, offline.

    python conformance/python/examples/torch/model_forward.py resnet18 [--size 64] [--report r.json]
    python conformance/python/examples/torch/model_forward.py gpt2 [--report r.json]
"""

import argparse
import time

import torch
import trnsim.torch


def resnet18(size: int):
    import torchvision

    model = torchvision.models.resnet18(weights=None).eval()
    return model, (torch.randn(1, 3, size, size),)


def gpt2(seq: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        n_layer=2, n_head=4, n_embd=64, vocab_size=1000, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
    )
    model = GPT2LMHeadModel(cfg).eval()
    return model, (torch.randint(0, cfg.vocab_size, (1, seq)),)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["resnet18", "gpt2"])
    ap.add_argument("--size", type=int, default=64, help="resnet18: input height = width")
    ap.add_argument("--seq", type=int, default=16, help="gpt2: tokens")
    ap.add_argument("--report", help="write the check-mode report here (.json; .html beside it)")
    a = ap.parse_args()
    torch.manual_seed(0)
    model, inputs = resnet18(a.size) if a.model == "resnet18" else gpt2(a.seq)
    with torch.no_grad():
        expected = model(*inputs)
        expected = expected.logits if hasattr(expected, "logits") else expected
        dev_model = model.to("trnsim")
        dev_inputs = [x.to("trnsim") for x in inputs]
        # The report covers the forward pass, not moving the weights to the device.
        trnsim.torch.reset_report()
        t0 = time.time()
        with trnsim.torch.checking():
            got = dev_model(*dev_inputs)
            got = got.logits if hasattr(got, "logits") else got
            got = got.cpu()
        wall = time.time() - t0
    err = (got - expected).abs().max().item()
    rel = err / expected.abs().max().item()
    rep = trnsim.torch.report()
    print(f"{a.model}: output {tuple(got.shape)}, max abs diff vs CPU {err:.3g} (relative to max |out| {rel:.3g})")
    print(
        f"op calls {rep['op_calls']}, device programs {rep['device_programs']}, fallbacks {rep['fallback_count']}, "
        f"estimated device time {rep['est_device_time_us']:.1f} us, wall {wall:.1f} s"
    )
    print(f"first op out of tolerance: {rep['first_out_of_tolerance']}")
    print(f"{'op':32} {'calls':>6} {'programs':>8} {'est us':>10} {'max abs':>10} {'max ulp':>8} {'out of tol':>10}")
    for name, e in sorted(rep["ops"].items()):
        d = e.get("drift", {})
        print(
            f"{name:32} {e.get('calls', 0):6d} {e.get('programs', 0):8d} {e.get('est_ns', 0) / 1000:10.1f} "
            f"{d.get('max_abs', 0):10.3g} {d.get('max_ulp', 0):8.3g} {d.get('out_of_tolerance', 0):10d}"
        )
    if a.report:
        html_path = a.report[: -len(".json")] + ".html" if a.report.endswith(".json") else a.report + ".html"
        trnsim.torch.write_report(a.report, html_path)
    if rep["fallback_count"] or rel > 1e-3:
        raise SystemExit("trnsim run does not match the CPU run")


if __name__ == "__main__":
    main()
