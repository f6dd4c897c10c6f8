"""The device's generation and LNC from NEURON_PLATFORM_TARGET_OVERRIDE / NEURON_LOGICAL_NC_CONFIG
(and TRNSIM_TORCH_TARGET), each in a fresh process: the values are read when the device is set up."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import trnsim

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(trnsim.__file__)))
VARS = ("TRNSIM_AS_NEURON", "TRNSIM_TORCH_TARGET", "NEURON_PLATFORM_TARGET_OVERRIDE", "NEURON_LOGICAL_NC_CONFIG")

CHILD = """
import json, os, torch
if os.environ.get("TRNSIM_AS_NEURON"):
    import trnsim.neuron
    trnsim.neuron.install_as_neuron()
import trnsim.torch
name = trnsim.torch.device_name()
x = torch.arange(6.0, device=name).reshape(2, 3)
y = (x * 2 + 1).sum(0).cpu().tolist()
r = trnsim.torch.report()
print(json.dumps({"device": r["device"], "target": r["target"], "lnc": r["lnc"], "y": y}))
"""


def child(**env):
    e = {k: v for k, v in os.environ.items() if k not in VARS}
    e["PYTHONPATH"] = os.pathsep.join([PACKAGE_DIR, *([e["PYTHONPATH"]] if e.get("PYTHONPATH") else [])])
    e["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    e.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD)], capture_output=True, text=True, env=e, timeout=600, check=False
    )


def result(**env) -> dict:
    out = child(**env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "env,target,lnc",
    [
        ({}, "trn2", 2),
        ({"NEURON_PLATFORM_TARGET_OVERRIDE": "trn1"}, "trn1", 1),
        ({"NEURON_PLATFORM_TARGET_OVERRIDE": "trn2"}, "trn2", 2),
        ({"NEURON_PLATFORM_TARGET_OVERRIDE": "gen4", "NEURON_LOGICAL_NC_CONFIG": "1"}, "trn3", 1),
        (
            {"TRNSIM_AS_NEURON": "1", "NEURON_PLATFORM_TARGET_OVERRIDE": "trn2", "NEURON_LOGICAL_NC_CONFIG": "1"},
            "trn2",
            1,
        ),
        ({"TRNSIM_AS_NEURON": "1", "NEURON_PLATFORM_TARGET_OVERRIDE": "TRN3"}, "trn3", 2),
        ({"TRNSIM_TORCH_TARGET": "trn2", "NEURON_PLATFORM_TARGET_OVERRIDE": "gen3"}, "trn2", 2),
    ],
)
def test_the_variables_select_generation_and_lnc(env, target, lnc):
    r = result(**env)
    assert (r["target"], r["lnc"]) == (target, lnc)
    assert r["device"] == ("neuron" if env.get("TRNSIM_AS_NEURON") else "trnsim")
    assert r["y"] == [8.0, 12.0, 16.0]  # ran on that generation's engines


@pytest.mark.parametrize(
    "env,needle",
    [
        (
            {"NEURON_PLATFORM_TARGET_OVERRIDE": "trn9"},
            "NEURON_PLATFORM_TARGET_OVERRIDE 'trn9' is not a NeuronCore generation",
        ),
        ({"NEURON_LOGICAL_NC_CONFIG": "4", "NEURON_PLATFORM_TARGET_OVERRIDE": "trn2"}, "NEURON_LOGICAL_NC_CONFIG='4'"),
        (
            {"NEURON_LOGICAL_NC_CONFIG": "2", "NEURON_PLATFORM_TARGET_OVERRIDE": "trn1"},
            "trn1 allows a logical NeuronCore of 1",
        ),
        ({"TRNSIM_TORCH_TARGET": "trn1", "NEURON_PLATFORM_TARGET_OVERRIDE": "trn2"}, "name different generations"),
    ],
)
def test_an_invalid_value_is_a_clear_error(env, needle):
    out = child(**env)
    assert out.returncode != 0
    assert "ConfigError" in out.stderr and needle in out.stderr, out.stderr[-2000:]
