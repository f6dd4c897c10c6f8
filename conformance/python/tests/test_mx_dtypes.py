"""NeuronCore-v4 MX formats on the engines, against ml_dtypes: every code of each MX and OCP fp8
element and scale format decodes and re-encodes bit-exactly, encodes of a value sweep match, and
`quantize_mx` + `nc_matmul_mx` match a NumPy block-scaled reference (docs/isa.md §5.32–5.33,
docs/numerics.md "MX formats")."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import trnsim
from programs import dma, hbm, inst, program, sbuf

TARGET = "trn3"

# (trnsim dtype, ml_dtypes dtype, number of codes)
FORMATS = [
    ("fp8_e4m3fn", ml_dtypes.float8_e4m3fn, 256),
    ("fp8_e5m2", ml_dtypes.float8_e5m2, 256),
    ("fp8_e8m0fnu", ml_dtypes.float8_e8m0fnu, 256),
    ("fp4_e2m1fn", ml_dtypes.float4_e2m1fn, 16),
]


def _convert(src_dtype, dst_dtype, n):
    """y = x converted by VectorE tensor_copy on trn3 (decode to fp32, cast on write)."""
    return program(
        [("x", src_dtype, (1, n), "input"), ("y", dst_dtype, (1, n), "output")],
        [
            dma(sbuf(src_dtype, 1, n), hbm("x", src_dtype, 1, n)),
            inst("vector", "tensor_copy", dst=sbuf(dst_dtype, 1, n, 4096), src=sbuf(src_dtype, 1, n)),
            dma(hbm("y", dst_dtype, 1, n), sbuf(dst_dtype, 1, n, 4096)),
        ],
        target=TARGET,
    )


def _same_floats(got, want):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


@pytest.mark.parametrize(("name", "mldt", "n"), FORMATS, ids=[f[0] for f in FORMATS])
def test_every_code_decodes_and_round_trips_like_ml_dtypes(name, mldt, n):
    codes = np.arange(n, dtype=np.uint8).view(mldt).reshape(1, n)
    decoded = trnsim.run(_convert(name, "f32", n), {"x": codes}, target=TARGET).outputs["y"]
    want = codes.astype(np.float32)
    _same_floats(decoded, want)
    back = trnsim.run(_convert("f32", name, n), {"x": decoded}, target=TARGET).outputs["y"]
    keep = ~np.isnan(want)
    assert np.array_equal(back.view(np.uint8)[keep], codes.view(np.uint8)[keep])
    # A NaN code re-encodes to a NaN code (ml_dtypes' canonical one).
    assert np.all(np.isnan(back.astype(np.float32)[~keep]))


def _sweep(name):
    rng = np.random.default_rng(22)
    pts = [0.0, -0.0, 2.0**-149, 2.0**-127, 2.0**-126, 0.25, 0.75, 1.25, 1.5, 1.75, 2.5, 3.0, 3.5, 5.0, 6.0, 7.0]
    base = np.array(pts + [-p for p in pts], np.float32)
    # Midpoints and near-midpoints of every code pair, and random magnitudes over the range.
    mags = rng.uniform(-20, 20, 2000)
    vals = np.concatenate([base, np.float32(2.0) ** mags.astype(np.float32), -(np.float32(2.0) ** mags[:500])])
    vals = vals.astype(np.float32)
    if name == "fp8_e4m3fn":
        # trnsim saturates e4m3fn overflow to ±448 (PyTorch's rule); ml_dtypes gives NaN.
        vals = vals[np.abs(vals) <= 448]
    elif name == "fp8_e5m2":
        vals = vals[np.abs(vals) <= 57344]
    else:
        vals = np.concatenate([vals, np.array([np.inf, -np.inf, np.nan, 3e38, -3e38], np.float32)])
    return vals.reshape(1, -1)


@pytest.mark.parametrize(("name", "mldt", "n"), FORMATS, ids=[f[0] for f in FORMATS])
def test_encode_matches_ml_dtypes(name, mldt, n):
    del n
    vals = _sweep(name)
    got = trnsim.run(_convert("f32", name, vals.shape[1]), {"x": vals}, target=TARGET).outputs["y"]
    assert np.array_equal(got.view(np.uint8), vals.astype(mldt).view(np.uint8))


# ---- quantize_mx + nc_matmul_mx against NumPy ------------------------------------------------

EMAX = {"fp8_e4m3fn_x4": (8, ml_dtypes.float8_e4m3fn), "fp8_e5m2_x4": (15, ml_dtypes.float8_e5m2)}


def _np_quantize(src, packed):
    """AWS's rule: per 8-partition × 4-element group, scale 2^(floor(log2 amax) − emax + 1) as an
    e8m0 code (0 for an all-zero group), elements x / scale rounded to nearest even."""
    emax, mldt = EMAX[packed]
    p, f = src.shape
    g = np.abs(src).reshape(p // 8, 8, f // 4, 4).max(axis=(1, 3))
    _, e = np.frexp(g)
    code = np.where(g == 0, 0, np.clip(e - 1 - emax + 1 + 127, 0, 254)).astype(np.int64)
    scale = np.ldexp(1.0, code - 127)
    full = np.repeat(np.repeat(scale, 8, axis=0), 4, axis=1)
    elems = (src / full).astype(np.float32).astype(mldt)
    return elems, code


def _layout(mat, kp):
    """[4·kp, F] matrix → the [kp, 4·F] tile whose packed element (p, f) holds rows 4p..4p+4."""
    f = mat.shape[1]
    return mat.reshape(kp, 4, f).transpose(0, 2, 1).reshape(kp, 4 * f)


@pytest.mark.parametrize("packed", sorted(EMAX))
def test_nc_matmul_mx_matches_a_numpy_block_scaled_reference(packed):
    kp, m, n = 64, 8, 16
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((4 * kp, m)) * np.exp2(rng.integers(-6, 6, (4 * kp, m)))).astype(ml_dtypes.bfloat16)
    b = (rng.standard_normal((4 * kp, n)) * np.exp2(rng.integers(-6, 6, (4 * kp, n)))).astype(ml_dtypes.bfloat16)
    sa, sm = _layout(a, kp), _layout(b, kp)
    bf, off = "bf16", {"a": 0, "b": 4096, "qa": 12288, "qb": 16384, "sa": 24576, "sb": 28672}

    def scale_out(name, cols, src_off):
        # Only partitions 32q..32q+4 hold scales: one DMA per quadrant.
        return [
            dma(
                hbm(name, "fp8_e8m0fnu", 4, cols, offset=4 * q * cols),
                sbuf("fp8_e8m0fnu", 4, cols, src_off, start=32 * q),
            )
            for q in range(kp // 32)
        ]

    def quantize(x, cols):
        return inst(
            "vector",
            "quantize_mx",
            dst=sbuf(packed, kp, cols, off["q" + x]),
            src=sbuf(bf, kp, 4 * cols, off[x]),
            dst_scale=sbuf("fp8_e8m0fnu", kp, cols, off["s" + x]),
        )

    prog = program(
        [
            ("a", bf, (kp, 4 * m), "input"),
            ("b", bf, (kp, 4 * n), "input"),
            ("qa", packed, (kp, m), "output"),
            ("sa", "fp8_e8m0fnu", (8, m), "output"),
            ("sb", "fp8_e8m0fnu", (8, n), "output"),
            ("out", "f32", (m, n), "output"),
        ],
        [
            dma(sbuf(bf, kp, 4 * m, off["a"]), hbm("a", bf, kp, 4 * m)),
            dma(sbuf(bf, kp, 4 * n, off["b"]), hbm("b", bf, kp, 4 * n)),
            quantize("a", m),
            quantize("b", n),
            inst(
                "tensor",
                "nc_matmul_mx",
                dst={"mem": "psum", "dtype": "f32", "partitions": m, "free": [[1, n]]},
                stationary=sbuf(packed, kp, m, off["qa"]),
                moving=sbuf(packed, kp, n, off["qb"]),
                stationary_scale=sbuf("fp8_e8m0fnu", kp, m, off["sa"]),
                moving_scale=sbuf("fp8_e8m0fnu", kp, n, off["sb"]),
            ),
            inst(
                "vector",
                "tensor_copy",
                dst=sbuf("f32", m, n, 32768),
                src={"mem": "psum", "dtype": "f32", "partitions": m, "free": [[1, n]]},
            ),
            dma(hbm("out", "f32", m, n), sbuf("f32", m, n, 32768)),
            dma(hbm("qa", packed, kp, m), sbuf(packed, kp, m, off["qa"])),
            *scale_out("sa", m, off["sa"]),
            *scale_out("sb", n, off["sb"]),
        ],
        target=TARGET,
    )
    res = trnsim.run(prog, {"a": sa, "b": sm}, target=TARGET).outputs
    ea, ca = _np_quantize(sa.astype(np.float32), packed)
    eb, cb = _np_quantize(sm.astype(np.float32), packed)
    # quantize_mx: scales and element codes bit-exact (packed element f holds codes 4f..4f+4).
    assert np.array_equal(res["sa"].view(np.uint8).astype(np.int64), ca)
    assert np.array_equal(res["sb"].view(np.uint8).astype(np.int64), cb)
    assert np.array_equal(res["qa"].view(np.uint8).reshape(kp, 4 * m), ea.view(np.uint8))

    # nc_matmul_mx: the exact block-scaled product in float64, bound (K − 1)·2^-24·Σ|a·b|.
    def dequant(elems, code, f):
        full = np.repeat(np.repeat(np.ldexp(1.0, code - 127), 8, axis=0), 4, axis=1)
        tile = elems.astype(np.float64) * full  # [kp, 4f]
        return tile.reshape(kp, f, 4).transpose(0, 2, 1).reshape(4 * kp, f)  # back to [K, f]

    da, db = dequant(ea, ca, m), dequant(eb, cb, n)
    exact = da.T @ db
    bound = (4 * kp - 1) * 2.0**-24 * (np.abs(da).T @ np.abs(db))
    err = np.abs(res["out"].astype(np.float64) - exact)
    assert np.all(err <= bound), float((err - bound).max())
