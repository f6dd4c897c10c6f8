"""The bill (trnsim.bill): arithmetic checked against hand computations, sourced prices only."""

import json
import math

import pytest
from trnsim import bill as B


def test_every_price_row_is_sourced():
    rows = B.prices()
    assert set(rows) == {"trn1.32xlarge", "p5.48xlarge", "p4d.24xlarge"}
    for name, row in rows.items():
        assert row["usd_per_hour"] > 0, name
        assert row["region"] and row["date"] and row["source"].startswith("http"), name
    # No Trainium2/3 price is published: the table must not hold one.
    assert not any(n.startswith(("trn2", "trn3")) for n in rows)


def test_trn1_bill_by_hand():
    # 250 ms per step on 64 ranks of trn1.32xlarge (32 ranks each) = 2 instances at $21.50/h:
    # 0.25 s * 2 * 21.50 / 3600 = $0.0029861.. per step.
    b = B.bill(0.25, instance="trn1.32xlarge", ranks=64, steps=10_000, tokens_per_step=64 * 2048)
    assert b["instances"] == 2
    per_step = 0.25 * 2 * 21.50 / 3600
    assert b["usd_per_step"] == pytest.approx(per_step, rel=1e-12)
    assert b["usd_per_run"] == pytest.approx(per_step * 10_000, rel=1e-12)
    assert b["usd_per_1m_tokens"] == pytest.approx(per_step / (64 * 2048) * 1e6, rel=1e-12)
    assert b["run_hours"] == pytest.approx(0.25 * 10_000 / 3600)
    assert b["price"]["date"] == "2026-06-25" and "usage.ai" in b["price"]["source"]
    assert "Estimates" in b["note"] and "Not calibrated" in b["calibration"]


def test_partial_instance_is_billed_whole():
    # 33 ranks need two trn1.32xlarge.
    assert B.bill(1.0, instance="trn1.32xlarge", ranks=33)["instances"] == 2
    assert B.bill(1.0, instance="trn1.32xlarge", ranks=32)["instances"] == 1


def test_trn2_without_a_price_says_so_and_never_guesses():
    b = B.bill(0.1, instance="trn2.48xlarge", ranks=64, steps=100)
    assert b["price"] is None
    assert b["usd_per_step"] is None and b["usd_per_run"] is None and b["usd_per_1m_tokens"] is None
    assert "no price for trn2.48xlarge" in b["missing_price"] and "never guesses" in b["missing_price"]
    # With the user's price it bills: 0.1 s * 1 instance * $40/h / 3600.
    b = B.bill(0.1, instance="trn2.48xlarge", ranks=64, usd_per_hour=40.0)
    assert b["usd_per_step"] == pytest.approx(0.1 * 40.0 / 3600)
    assert b["price"]["source"] == "usd_per_hour= argument"


def test_price_file(tmp_path):
    f = tmp_path / "prices.json"
    f.write_text(
        json.dumps(
            {
                "prices": [
                    {
                        "instance": "trn2.48xlarge",
                        "usd_per_hour": 36.0,
                        "region": "us-east-2",
                        "date": "2026-11-30",
                        "source": "our contract",
                    }
                ]
            }
        )
    )
    b = B.bill(2.0, instance="trn2.48xlarge", ranks=128, price_file=str(f))
    assert b["instances"] == 2
    assert b["usd_per_step"] == pytest.approx(2.0 * 2 * 36.0 / 3600)
    assert "our contract" in b["price"]["source"]
    f.write_text(
        json.dumps({"prices": [{"instance": "x", "usd_per_hour": -1, "region": "r", "date": "d", "source": "s"}]})
    )
    with pytest.raises(ValueError, match="positive"):
        B.bill(1.0, instance="trn2.48xlarge", price_file=str(f))


def test_gpu_comparison_uses_the_measured_step_time():
    b = B.bill(0.5, instance="trn1.32xlarge", ranks=32, gpu={"instance": "p5.48xlarge", "step_time_s": 0.2, "ranks": 8})
    trn = 0.5 * 21.50 / 3600
    gpu = 0.2 * 55.04 / 3600
    assert b["gpu"]["usd_per_step"] == pytest.approx(gpu)
    assert b["gpu"]["step_time_is"] == "measured by the user"
    assert b["trainium_to_gpu_cost_ratio"] == pytest.approx(trn / gpu)


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"instance": "trn9.huge"}, "unknown instance"),
        ({"instance": "trn1.32xlarge", "ranks": 0}, "ranks"),
        ({"instance": "trn1.32xlarge", "ranks": 2.5}, "ranks"),
        ({"instance": "trn1.32xlarge", "steps": -1}, "steps"),
        ({"instance": "trn1.32xlarge", "gpu": {"instance": "p5.48xlarge"}}, "gpu="),
    ],
)
def test_bad_arguments_are_clear_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        B.bill(1.0, **kw)
    with pytest.raises(ValueError, match="step_time_s"):
        B.bill(math.nan, instance="trn1.32xlarge")


def test_an_instance_outside_the_table_needs_its_ranks():
    b = B.bill(1.0, instance="trn3.custom", ranks=8, ranks_per_instance=4, usd_per_hour=10.0)
    assert b["instances"] == 2 and b["usd_per_step"] == pytest.approx(2 * 10.0 / 3600)
