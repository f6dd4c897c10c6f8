"""Tests of the trnsim Python bindings: programs, run, dtypes, numerics, errors (docs/python.md)."""

from __future__ import annotations

import json
import pickle

import ml_dtypes
import numpy as np
import pytest
import trnsim
from programs import add, cast, copy_through_sbuf, dma, hbm, inst, program, sbuf


def test_program_json_round_trip_and_len():
    text = add()
    prog = trnsim.Program.from_json(text)
    assert len(prog) == 4
    assert prog.target == "trn2"
    assert prog.hbm == [("a", "f32", [4, 8], "input"), ("b", "f32", [4, 8], "input"), ("out", "f32", [4, 8], "output")]
    again = trnsim.Program.from_json(prog.to_json())
    assert json.loads(again.to_json()) == json.loads(prog.to_json())
    assert "4 instructions" in repr(prog)


def test_program_from_bad_json_is_a_value_error():
    with pytest.raises(ValueError, match="not a trnsim program"):
        trnsim.Program.from_json('{"hbm": [], "instructions": [{"engine": "warp", "op": {}}]}')


def test_run_add_f32_outputs_and_stats():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 8), dtype=np.float32)
    b = rng.standard_normal((4, 8), dtype=np.float32)
    res = trnsim.run(add(), {"a": a, "b": b})
    assert set(res.outputs) == {"out"}
    out = res.outputs["out"]
    assert out.dtype == np.float32 and out.shape == (4, 8)
    np.testing.assert_array_equal(out, a + b)  # one fp32 add per element: exact
    out[0, 0] = 5.0  # outputs are ordinary writable arrays
    stats = res.stats
    assert stats["instructions"] == {"tensor": 0, "vector": 1, "scalar": 0, "gpsimd": 0, "dma": 3}
    assert stats["dma_bytes"] == 3 * 4 * 8 * 4
    assert stats["flops"] == 32
    assert set(stats["est_ns"]) == {"tensor", "vector", "scalar", "gpsimd", "dma"}
    json.dumps(stats)  # JSON-like all the way down


def test_run_accepts_program_json_text():
    a = np.ones((4, 8), np.float32)
    res = trnsim.run(add(), {"a": a, "b": a})
    np.testing.assert_array_equal(res.outputs["out"], np.full((4, 8), 2.0, np.float32))


def _all_bit_patterns(dtype, bits, rows):
    pattern = np.arange(1 << bits, dtype=np.uint16 if bits == 16 else np.uint8)
    return pattern.reshape(rows, -1).view(dtype)


@pytest.mark.parametrize(
    "trn,np_dtype,bits",
    [
        ("bf16", ml_dtypes.bfloat16, 16),
        ("f16", np.float16, 16),
        ("fp8_e4m3fn", ml_dtypes.float8_e4m3fn, 8),
        ("fp8_e5m2", ml_dtypes.float8_e5m2, 8),
        ("fp8_e4m3", ml_dtypes.float8_e4m3, 8),
    ],
)
def test_every_bit_pattern_goes_in_and_out_bit_exact(trn, np_dtype, bits):
    # Every encoding, NaN payloads and negative zero included, through HBM -> SBUF -> HBM.
    rows = 128
    x = _all_bit_patterns(np_dtype, bits, rows)
    row = x.shape[1]
    res = trnsim.run(copy_through_sbuf(trn, rows, row), {"x": x})
    y = res.outputs["y"]
    assert y.dtype == np.dtype(np_dtype)
    assert y.shape == x.shape
    uint = np.uint16 if bits == 16 else np.uint8
    np.testing.assert_array_equal(y.view(uint), x.view(uint))


@pytest.mark.parametrize(
    "trn,np_dtype,limit",
    [
        ("bf16", ml_dtypes.bfloat16, 1e30),
        ("fp8_e4m3fn", ml_dtypes.float8_e4m3fn, 400.0),
        ("fp8_e5m2", ml_dtypes.float8_e5m2, 50000.0),
        ("fp8_e4m3", ml_dtypes.float8_e4m3, 200.0),
    ],
)
def test_engine_downcast_matches_ml_dtypes_round_to_nearest_even(trn, np_dtype, limit):
    # The dtype mapping is the right one: VectorE's fp32 -> trn cast (RNE) gives the same bits
    # as ml_dtypes' cast to the dtype the binding maps it to, on finite in-range values
    # (including halfway cases and subnormals).
    rng = np.random.default_rng(7)
    mags = np.exp(rng.uniform(np.log(1e-6), np.log(limit), size=(128, 64))).astype(np.float32)
    x = (mags * rng.choice([-1.0, 1.0], size=mags.shape)).astype(np.float32)
    # Exact halfway points between neighbouring representable values of the target type.
    grid = np.arange(1, 65, dtype=np.float32).astype(np_dtype).astype(np.float32)
    x[0, :63] = (grid[:-1] + grid[1:]) / 2
    res = trnsim.run(cast("f32", trn, 128, 64), {"x": x})
    expect = x.astype(np_dtype)
    uint = np.uint16 if np.dtype(np_dtype).itemsize == 2 else np.uint8
    np.testing.assert_array_equal(res.outputs["y"].view(uint), expect.view(uint))


def test_integer_and_bool_dtypes_round_trip():
    for trn, np_dtype in [
        ("i8", np.int8),
        ("i16", np.int16),
        ("i32", np.int32),
        ("u8", np.uint8),
        ("u16", np.uint16),
        ("u32", np.uint32),
        ("bool", np.bool_),
    ]:
        x = (np.arange(4 * 8) * 37 % 256).reshape(4, 8).astype(np_dtype)
        y = trnsim.run(copy_through_sbuf(trn, 4, 8), {"x": x}).outputs["y"]
        assert y.dtype == np.dtype(np_dtype)
        np.testing.assert_array_equal(y, x)


def test_dtype_mapping_helpers():
    assert trnsim.trnsim_dtype(ml_dtypes.bfloat16) == "bf16"
    assert trnsim.trnsim_dtype(np.float32) == "f32"
    assert trnsim.numpy_dtype("fp8_e4m3fn") == np.dtype(ml_dtypes.float8_e4m3fn)
    assert trnsim.numpy_dtype("tf32") == np.dtype(np.float32)
    assert sorted(trnsim._native.DTYPES) == sorted(trnsim._dtypes.TO_NUMPY)
    with pytest.raises(TypeError, match="float64"):
        trnsim.trnsim_dtype(np.float64)


def test_unsupported_array_dtype_is_a_type_error():
    with pytest.raises(TypeError, match="float64"):
        trnsim.run(add(), {"a": np.ones((4, 8)), "b": np.ones((4, 8))})


def test_noncontiguous_and_big_endian_inputs_are_taken_by_value():
    base = np.arange(64, dtype=np.float32).reshape(8, 8)
    a = base[::2]  # strided view
    b = np.ones((4, 8), dtype=">f4")  # big-endian
    out = trnsim.run(add(), {"a": a, "b": b}).outputs["out"]
    np.testing.assert_array_equal(out, a + 1)


def test_numerics_settings():
    defaults = trnsim.Numerics.defaults()
    assert defaults["rounding"] == "nearest_even"
    assert trnsim.Numerics().to_dict() == defaults
    n = trnsim.Numerics(denormals="flush_to_zero", rounding={"stochastic": {"seed": 3}})
    assert n.denormals == "flush_to_zero"
    assert n.to_dict()["rounding"] == {"stochastic": {"seed": 3}}
    assert n.to_dict()["nan_max_min"] == defaults["nan_max_min"]
    assert n == trnsim.Numerics(**n.to_dict())
    with pytest.raises(ValueError, match="unknown numerics setting `denormal`"):
        trnsim.Numerics(denormal="flush_to_zero")
    with pytest.raises(ValueError, match="numerics"):
        trnsim.Numerics(denormals="sometimes")


def test_numerics_change_the_run():
    # A subnormal sum: kept by default, flushed to zero under flush_to_zero.
    tiny = np.full((4, 8), 1e-39, dtype=np.float32)
    assert np.all(trnsim.run(add(), {"a": tiny, "b": tiny}).outputs["out"] == np.float32(2e-39))
    for numerics in ({"denormals": "flush_to_zero"}, trnsim.Numerics(denormals="flush_to_zero")):
        out = trnsim.run(add(), {"a": tiny, "b": tiny}, numerics=numerics).outputs["out"]
        assert np.all(out == 0)


def test_sim_error_carries_the_instruction_and_its_loc():
    # VectorE reads SBUF bytes nothing wrote: the add's in1 was never loaded.
    text = program(
        [("a", "f32", (4, 8), "input"), ("out", "f32", (4, 8), "output")],
        [
            dma(sbuf("f32", 4, 8), hbm("a", "f32", 4, 8), loc="kernel.py:10"),
            inst(
                "vector",
                "tensor_tensor",
                loc="kernel.py:42",
                dst=sbuf("f32", 4, 8, 64),
                in0=sbuf("f32", 4, 8),
                in1=sbuf("f32", 4, 8, 32),
                op="add",
            ),
            dma(hbm("out", "f32", 4, 8), sbuf("f32", 4, 8, 64), loc="kernel.py:11"),
        ],
    )
    with pytest.raises(trnsim.SimError) as info:
        trnsim.run(text, {"a": np.zeros((4, 8), np.float32)})
    e = info.value
    assert isinstance(e, Exception)
    assert (e.index, e.engine, e.opcode, e.operand) == (1, "vector", "tensor_tensor", "in1")
    assert e.kind == "uninitialized_read"
    assert e.loc == "kernel.py:42"
    assert "nothing wrote" in e.message
    text = str(e)
    for part in ("#1", "vector", "tensor_tensor", "`in1`", "kernel.py:42", e.message):
        assert part in text, (part, text)
    again = pickle.loads(pickle.dumps(e))
    assert (again.index, again.loc, again.kind, str(again)) == (e.index, e.loc, e.kind, str(e))


def test_sim_error_start_partition_names_the_operand():
    # 32 partitions may start at 0/32/64/96, not at 16 (NC-v2's start-partition rule).
    text = program(
        [("a", "f32", (32, 8), "input"), ("out", "f32", (32, 8), "output")],
        [
            dma(sbuf("f32", 32, 8), hbm("a", "f32", 32, 8)),
            inst("vector", "tensor_copy", loc="k.py:7", dst=sbuf("f32", 32, 8, 64, start=16), src=sbuf("f32", 32, 8)),
        ],
    )
    with pytest.raises(trnsim.SimError) as info:
        trnsim.run(text, {"a": np.zeros((32, 8), np.float32)})
    e = info.value
    assert (e.index, e.engine, e.opcode, e.operand, e.kind, e.loc) == (
        1,
        "vector",
        "tensor_copy",
        "dst",
        "start_partition",
        "k.py:7",
    )


def test_program_level_errors_have_no_instruction():
    with pytest.raises(trnsim.SimError) as info:
        trnsim.run(add(), {"a": np.zeros((4, 8), np.float32)})
    e = info.value
    assert e.index is None and e.engine is None and e.loc is None
    assert e.kind == "invalid"
    assert "no input given for HBM tensor `b`" in str(e)
    with pytest.raises(trnsim.SimError, match="shape_mismatch|declares"):
        trnsim.run(add(), {"a": np.zeros((4, 8), np.float32), "b": np.zeros((8, 4), np.float32)})


def test_wrong_target_is_refused():
    a = np.zeros((4, 8), np.float32)
    with pytest.raises(trnsim.SimError, match="program is for trn2"):
        trnsim.run(add(), {"a": a, "b": a}, target="trn1")
    # Without target=, the program's own target runs it.
    assert trnsim.run(add(), {"a": a, "b": a}).stats["instructions"]
    with pytest.raises(ValueError, match="unknown target"):
        trnsim.run(add(), {"a": a, "b": a}, target="trn9")
