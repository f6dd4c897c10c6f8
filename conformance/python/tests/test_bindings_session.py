"""Device sessions from Python: tensors stay in simulated HBM between program runs."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest
import trnsim
from programs import add, copy_through_sbuf, dma, hbm, inst, program, sbuf


def scale_by_two(dtype="f32"):
    """A second kernel: out = a + a (reads one tensor twice from SBUF)."""
    return program(
        [("a", dtype, (4, 8), "input"), ("out", dtype, (4, 8), "output")],
        [
            dma(sbuf(dtype, 4, 8), hbm("a", dtype, 4, 8)),
            inst(
                "vector",
                "tensor_tensor",
                dst=sbuf(dtype, 4, 8, 64),
                in0=sbuf(dtype, 4, 8),
                in1=sbuf(dtype, 4, 8),
                op="add",
            ),
            dma(hbm("out", dtype, 4, 8), sbuf(dtype, 4, 8, 64)),
        ],
    )


def test_two_kernels_share_a_tensor_without_a_host_round_trip():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 8), dtype=np.float32)
    w = rng.standard_normal((4, 8), dtype=np.float32)
    s = trnsim.Session()
    s.put("x", x)
    s.put("w", w)
    put = s.transfers()["host_to_device_bytes"]
    assert put == 2 * x.nbytes
    stats1 = s.run(add(), {"a": "x", "b": "w", "out": "h"})  # kernel 1: h = x + w
    stats2 = s.run(scale_by_two(), {"a": "h", "out": "y"})  # kernel 2: y = h + h
    # h never came to the host: nothing was copied either way by the two runs.
    assert s.transfers() == {
        "host_to_device_bytes": put,
        "device_to_host_bytes": 0,
        "device_copy_bytes": 0,
        "runs": 2,
    }
    assert stats1["instructions"]["vector"] == 1 and stats2["instructions"]["dma"] == 2
    assert s.names() == ["h", "w", "x", "y"]
    assert s.info("h") == ("f32", (4, 8))
    y = s.get("y")
    np.testing.assert_array_equal(y, (x + w) + (x + w))
    assert s.transfers()["device_to_host_bytes"] == y.nbytes


def test_session_tensors_are_bit_exact_and_deletable():
    s = trnsim.Session()
    bits = np.arange(4 * 8, dtype=np.uint16) * 2039  # assorted bf16 encodings, NaNs included
    x = bits.reshape(4, 8).view(ml_dtypes.bfloat16)
    s.put("x", x)
    s.run(copy_through_sbuf("bf16", 4, 8), {"x": "x", "y": "y"})
    y = s.get("y")
    assert y.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(y.view(np.uint16), bits.reshape(4, 8))
    assert "y" in s and len(s) == 2
    assert s.delete("y") and not s.delete("y")
    with pytest.raises(KeyError, match="no session tensor `y`"):
        s.get("y")


def test_a_failing_run_raises_with_loc_and_keeps_the_session():
    s = trnsim.Session()
    x = np.ones((4, 8), np.float32)
    s.put("x", x)
    bad = program(
        [("a", "f32", (4, 8), "input"), ("out", "f32", (4, 8), "output")],
        [
            dma(sbuf("f32", 4, 8), hbm("a", "f32", 4, 8)),
            inst(
                "vector",
                "tensor_copy",
                loc="my_kernel.py:17",
                dst=sbuf("f32", 4, 8, 64),
                src=sbuf("f32", 4, 8, 32),
            ),
        ],
    )
    with pytest.raises(trnsim.SimError) as info:
        s.run(bad, {"a": "x", "out": "y"})
    e = info.value
    assert (e.index, e.engine, e.operand, e.loc) == (1, "vector", "src", "my_kernel.py:17")
    assert "my_kernel.py:17" in str(e)
    assert s.names() == ["x"]
    np.testing.assert_array_equal(s.get("x"), x)
    assert s.transfers()["runs"] == 0


def test_binding_errors():
    s = trnsim.Session()
    s.put("x", np.zeros((4, 8), np.float32))
    with pytest.raises(trnsim.SimError, match="session tensor `b`, which does not exist"):
        s.run(add(), {"a": "x"})
    with pytest.raises(trnsim.SimError, match="which the program does not declare"):
        s.run(add(), {"a": "x", "b": "x", "nope": "x"})
    s.put("small", np.zeros((2, 2), np.float32))
    with pytest.raises(trnsim.SimError) as info:
        s.run(add(), {"a": "x", "b": "small"})
    assert info.value.kind == "shape_mismatch"


def test_session_numerics_and_target():
    s = trnsim.Session(numerics={"denormals": "flush_to_zero"})
    s.put("a", np.full((4, 8), 1e-39, np.float32))
    s.put("b", np.full((4, 8), 1e-39, np.float32))
    s.run(add(), {})
    assert np.all(s.get("out") == 0)
    with pytest.raises(ValueError, match="unknown target"):
        trnsim.Session(target="trn0")


def test_a_repeated_program_reuses_its_race_check_and_spans_are_optional():
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    s = trnsim.Session()
    s.put("x", x)
    p = scale_by_two()
    first = s.run(p, {"a": "x", "out": "y"})
    again = s.run(p, {"a": "x", "out": "y"})
    assert s.race_checks() == {"checked": 1, "reused": 1}
    assert again == first  # same statistics and timeline, spans included
    assert len(first["timeline"]["spans"]) == 3
    np.testing.assert_array_equal(s.get("y"), x + x)
    native = s._native
    totals = json.loads(native.run(trnsim._native.Program.from_json(p), {"a": "x", "out": "y"}, spans=False))
    assert "spans" not in totals["timeline"]
    assert totals["timeline"]["makespan_ns"] == first["timeline"]["makespan_ns"]
