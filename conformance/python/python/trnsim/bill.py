"""What a step, a million tokens or a training run would cost, from simulated device time.

The bill turns an *estimated* step time (trnsim's cost model: docs/timeline.md) into dollars for
an instance type and rank count. Prices come from one committed table (``prices.json`` beside
this file), where every row names its region (or "not stated"), date and source; an instance with
no sourced price (today trn2 and trn3) has no row, and the bill then says so instead of guessing.
A user's own price (``usd_per_hour=`` or ``price_file=``) always wins.

Billing is per instance-hour: a job of ``ranks`` ranks occupies ``ceil(ranks / ranks_per_instance)``
whole instances, and each step costs ``step_time × instances × $/hour / 3600``. A GPU comparison
takes the user's *measured* GPU step time (nothing here estimates a GPU) and is billed the same way.
See docs/torch-device.md, "What will it cost".
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from importlib import resources
from typing import Any

__all__ = ["CALIBRATION", "ESTIMATE_NOTE", "INSTANCES", "Instance", "bill", "prices"]

#: Said by every bill: what the figures are.
ESTIMATE_NOTE = (
    "Estimates, not measurements: the Trainium step time comes from trnsim's cost model of the "
    "engines (docs/timeline.md), not from hardware, and neuronx-cc's own scheduling and fusion are "
    "not predicted. A GPU figure is the step time you measured, billed at the listed price."
)

#: The cost model's calibration status (docs/timeline.md, "The cost model").
CALIBRATION = (
    "Not calibrated against hardware: the cost model's constants are AWS's published rates and "
    "latencies where AWS publishes them and named choices where it does not; the nightly "
    "'estimated vs measured' experiment that would calibrate them has not run on hardware yet "
    "(docs/hardware.md). Read the bill as an order of magnitude and as a comparison between "
    "variants of the same model, not as a quote."
)


@dataclass(frozen=True)
class Instance:
    """An instance type: what one instance gives a job, with the source of the figures."""

    name: str
    #: ``"trn1"``/``"trn2"``/``"trn3"`` for Trainium, ``"gpu"`` for a GPU instance.
    kind: str
    #: Accelerator chips (Trainium chips or GPUs) per instance.
    chips: int
    #: Ranks one instance holds by default: one per NeuronCore at LNC=1 (Trn1), one per logical
    #: NeuronCore at the default LNC=2 (Trn2), one per GPU.
    ranks: int
    source: str


#: Instance facts. Trainium: AWS Neuron docs `trn1-arch.rst`, `trn2-arch.rst`,
#: `logical-neuroncore-config.rst` (LNC=2 is the Trn2 default: 64 logical cores per trn2.48xlarge).
#: GPUs: the instance pages of AWS (8 × H100 in p5.48xlarge, 8 × A100 40 GB in p4d.24xlarge).
INSTANCES: dict[str, Instance] = {
    i.name: i
    for i in (
        Instance("trn1.2xlarge", "trn1", 1, 2, "AWS Neuron docs trn1-arch.rst: 1 Trainium chip, 2 NeuronCore-v2"),
        Instance("trn1.32xlarge", "trn1", 16, 32, "AWS Neuron docs trn1-arch.rst: 16 Trainium chips, 32 NeuronCore-v2"),
        Instance(
            "trn2.48xlarge",
            "trn2",
            16,
            64,
            "AWS Neuron docs trn2-arch.rst and logical-neuroncore-config.rst: 16 Trainium2 chips of 8 "
            "NeuronCore-v3, 64 logical NeuronCores at the default LNC=2",
        ),
        Instance("p5.48xlarge", "gpu", 8, 8, "AWS EC2 P5 instance page: 8 x NVIDIA H100"),
        Instance("p4d.24xlarge", "gpu", 8, 8, "AWS EC2 P4d instance page: 8 x NVIDIA A100 40 GB"),
    )
}


def _load_prices(text: str, where: str) -> dict[str, dict[str, Any]]:
    try:
        rows = json.loads(text)["prices"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{where}: not a price table ({{'prices': [{{instance, usd_per_hour, ...}}]}}): {e}") from e
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        missing = {"instance", "usd_per_hour", "region", "date", "source"} - set(row)
        if missing:
            raise ValueError(f"{where}: a price row lacks {sorted(missing)}: {row}")
        price = row["usd_per_hour"]
        if not isinstance(price, (int, float)) or isinstance(price, bool) or not (price > 0 and math.isfinite(price)):
            raise ValueError(f"{where}: {row['instance']}: usd_per_hour must be a positive number, got {price!r}")
        out[row["instance"]] = dict(row)
    return out


def prices(price_file: str | None = None) -> dict[str, dict[str, Any]]:
    """The committed price table, or the table in ``price_file`` (same JSON form), by instance."""
    if price_file is not None:
        with open(os.fspath(price_file), encoding="utf-8") as f:
            return _load_prices(f.read(), os.fspath(price_file))
    text = resources.files("trnsim").joinpath("prices.json").read_text(encoding="utf-8")
    return _load_prices(text, "trnsim/prices.json")


def _positive(name: str, value: Any, integer: bool = False) -> None:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not (value > 0 and math.isfinite(value)):
        kind = "a positive whole number" if integer else "a positive number"
        raise ValueError(f"bill: {name} must be {kind}, got {value!r}")


def _side(
    step_time_s: float,
    instance: str,
    ranks: int,
    usd_per_hour: float | None,
    price_file: str | None,
    ranks_per_instance: int | None,
    steps: int | None,
    tokens_per_step: float | None,
    samples_per_step: float | None,
) -> dict[str, Any]:
    _positive("step_time_s", step_time_s)
    _positive("ranks", ranks, integer=True)
    known = INSTANCES.get(instance)
    if ranks_per_instance is None:
        if known is None:
            raise ValueError(
                f"bill: unknown instance {instance!r} (known: {', '.join(sorted(INSTANCES))}); "
                "pass ranks_per_instance= for another instance type"
            )
        ranks_per_instance = known.ranks
    _positive("ranks_per_instance", ranks_per_instance, integer=True)
    instances = math.ceil(ranks / ranks_per_instance)
    out: dict[str, Any] = {
        "instance": instance,
        "instance_source": known.source if known else "given by the user (ranks_per_instance)",
        "ranks": ranks,
        "ranks_per_instance": ranks_per_instance,
        "instances": instances,
        "step_time_s": step_time_s,
    }
    if usd_per_hour is not None:
        _positive("usd_per_hour", usd_per_hour)
        price: dict[str, Any] | None = {
            "usd_per_hour": float(usd_per_hour),
            "region": "given by the user",
            "date": "given by the user",
            "source": "usd_per_hour= argument",
        }
    else:
        price = prices(price_file).get(instance)
        if price is not None and price_file is not None:
            price = {**price, "source": f"{price['source']} (from {os.fspath(price_file)})"}
    out["price"] = price
    if price is None:
        where = f"the price file {os.fspath(price_file)}" if price_file is not None else "trnsim's price table"
        out["missing_price"] = (
            f"no price for {instance}: {where} has no sourced on-demand price for it, and the bill "
            "never guesses one. Pass usd_per_hour= (or a price_file= with a row for it)."
        )
        for k in ("usd_per_step", "usd_per_1m_tokens", "usd_per_1m_samples", "usd_per_run"):
            out[k] = None
        return out
    per_step = step_time_s * instances * price["usd_per_hour"] / 3600.0
    out["usd_per_step"] = per_step
    out["usd_per_1m_tokens"] = None
    out["usd_per_1m_samples"] = None
    out["usd_per_run"] = None
    if tokens_per_step is not None:
        _positive("tokens_per_step", tokens_per_step)
        out["usd_per_1m_tokens"] = per_step / tokens_per_step * 1e6
    if samples_per_step is not None:
        _positive("samples_per_step", samples_per_step)
        out["usd_per_1m_samples"] = per_step / samples_per_step * 1e6
    if steps is not None:
        _positive("steps", steps, integer=True)
        out["usd_per_run"] = per_step * steps
        out["steps"] = steps
        out["run_hours"] = step_time_s * steps / 3600.0
    return out


def bill(
    step_time_s: float,
    *,
    instance: str,
    ranks: int = 1,
    usd_per_hour: float | None = None,
    price_file: str | None = None,
    ranks_per_instance: int | None = None,
    steps: int | None = None,
    tokens_per_step: float | None = None,
    samples_per_step: float | None = None,
    gpu: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The bill for a step of ``step_time_s`` seconds (estimated device time per step).

    ``tokens_per_step``/``samples_per_step`` are the job's global counts per step (all ranks);
    ``steps`` the length of the training run. ``gpu`` compares with a GPU instance:
    ``{"instance": "p5.48xlarge", "step_time_s": measured, "ranks": 8}`` (and optionally
    ``usd_per_hour``, ``ranks_per_instance``); its step time must be one you measured.
    """
    out = {
        "note": ESTIMATE_NOTE,
        "calibration": CALIBRATION,
        **_side(
            step_time_s,
            instance,
            ranks,
            usd_per_hour,
            price_file,
            ranks_per_instance,
            steps,
            tokens_per_step,
            samples_per_step,
        ),
    }
    if gpu is not None:
        unknown = set(gpu) - {"instance", "step_time_s", "ranks", "usd_per_hour", "ranks_per_instance"}
        if unknown or "instance" not in gpu or "step_time_s" not in gpu:
            raise ValueError(
                "bill: gpu= takes instance and step_time_s (measured), optionally ranks, usd_per_hour, "
                f"ranks_per_instance; got {sorted(gpu)}"
            )
        g = _side(
            gpu["step_time_s"],
            gpu["instance"],
            gpu.get("ranks", 1),
            gpu.get("usd_per_hour"),
            price_file,
            gpu.get("ranks_per_instance"),
            steps,
            tokens_per_step,
            samples_per_step,
        )
        g["step_time_is"] = "measured by the user"
        out["gpu"] = g
        if out["usd_per_step"] is not None and g["usd_per_step"] is not None:
            out["trainium_to_gpu_cost_ratio"] = out["usd_per_step"] / g["usd_per_step"]
    return out
