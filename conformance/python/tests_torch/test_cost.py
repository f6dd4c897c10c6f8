"""The device report's bill: trnsim.torch.report(cost=...)."""

import pytest

torch = pytest.importorskip("torch")
import trnsim.torch  # registers the device


def test_report_bills_the_estimated_device_time():
    trnsim.torch.reset_report()
    x = torch.randn(64, 64, device="trnsim")
    for _ in range(2):  # two "steps"
        (torch.relu(x @ x) + 1).sum().cpu()
    r = trnsim.torch.report(
        cost={"instance": "trn1.32xlarge", "ranks": 32, "steps_measured": 2, "steps": 1000, "samples_per_step": 64}
    )
    c = r["cost"]
    step_s = r["est_device_time_us"] * 1e-6 / 2
    assert step_s > 0
    assert c["step_time_s"] == pytest.approx(step_s)
    assert c["usd_per_step"] == pytest.approx(step_s * 21.50 / 3600)
    assert c["usd_per_run"] == pytest.approx(step_s * 21.50 / 3600 * 1000)
    assert c["usd_per_1m_samples"] == pytest.approx(step_s * 21.50 / 3600 / 64 * 1e6)
    assert "Estimates" in c["note"] and c["price"]["date"] == "2026-06-25"


def test_trn2_report_without_price_says_so():
    trnsim.torch.reset_report()
    x = torch.randn(8, 8, device="trnsim")
    (x * 2).cpu()
    c = trnsim.torch.report(cost={"instance": "trn2.48xlarge", "ranks": 4})["cost"]
    assert c["usd_per_step"] is None and "never guesses" in c["missing_price"]


def test_report_cost_refuses_an_empty_report():
    trnsim.torch.reset_report()
    with pytest.raises(ValueError, match="no estimated device time"):
        trnsim.torch.report(cost={"instance": "trn1.32xlarge"})
