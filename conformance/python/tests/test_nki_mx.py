"""MX (microscaling, NeuronCore-v4) in the current-API NKI front-end, on trn3: the OCP fp8 and MX
dtypes through kernels (every code written, read back, decoded and re-encoded on the engines,
against ml_dtypes), `nisa.quantize_mx` against a NumPy reference of OCP MX quantization, and
`nisa.nc_matmul_mx` against a NumPy block-scaled matmul within docs/numerics.md's bound; then the
NkiErrors for bad shapes, dtypes, memories and generations. Kernels are ours, in the style of
AWS's NKI docs. References: mx_reference.py (NumPy + ml_dtypes only)."""

import sys

import ml_dtypes
import mx_reference as R
import numpy as np
import pytest
import trnsim.nki
from trnsim.nki import NkiError


@pytest.fixture
def cur(monkeypatch):
    """(nki, nki.language, nki.isa) of the current namespace on trn3."""
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    trnsim.nki.install()
    import nki
    import nki.isa as nisa
    import nki.language as nl

    yield nki, nl, nisa
    for name in ("nki", "nki.language", "nki.isa", "nki.typing", "nki.isa.constants"):
        sys.modules.pop(name, None)


def _same_bits(got, want):
    assert got.dtype.itemsize == want.dtype.itemsize
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


# ---------------------------------------------------------------------------------------------
# every code of each format: write, read back, decode, re-encode

# (ml_dtypes type, number of codes, tile shape)
CODES = {
    "float8_e4m3fn": (ml_dtypes.float8_e4m3fn, 256, (2, 128)),
    "float8_e5m2": (ml_dtypes.float8_e5m2, 256, (2, 128)),
    "float8_e8m0fnu": (ml_dtypes.float8_e8m0fnu, 256, (2, 128)),
    "float4_e2m1fn": (ml_dtypes.float4_e2m1fn, 16, (1, 16)),
}


def _roundtrip_kernel(nki, nl, nisa):
    @nki.jit
    def roundtrip(codes):
        raw = nl.ndarray(codes.shape, dtype=codes.dtype, buffer=nl.shared_hbm)
        dec = nl.ndarray(codes.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        enc = nl.ndarray(codes.shape, dtype=codes.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(codes.shape, dtype=codes.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=codes)
        nisa.dma_copy(dst=raw, src=t)  # the codes, read back as written
        f = nl.ndarray(codes.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=f, src=t)  # decoded on VectorE
        nisa.dma_copy(dst=dec, src=f)
        back = nl.ndarray(codes.shape, dtype=codes.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=back, src=f)  # re-encoded: cast on write
        nisa.dma_copy(dst=enc, src=back)
        return raw, dec, enc

    return roundtrip


@pytest.mark.parametrize("fmt", sorted(CODES))
def test_every_code_round_trips_bit_exactly_against_ml_dtypes(cur, fmt):
    mldt, n, shape = CODES[fmt]
    codes = np.arange(n, dtype=np.uint8).view(mldt).reshape(shape)
    raw, dec, enc = _roundtrip_kernel(*cur)(codes)
    assert trnsim.nki.last_run().program["target"] == "trn3"
    _same_bits(raw, codes)
    want = codes.astype(np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(dec), nan)
    _same_bits(dec[~nan], want[~nan])
    # every number re-encodes to its own code, as ml_dtypes encodes it
    _same_bits(enc[~nan], codes[~nan])
    _same_bits(enc[~nan], dec[~nan].astype(mldt))
    # a NaN re-encodes to the simulator's canonical NaN (docs/numerics.md, "NaN encodings": PyTorch's
    # 0x7F | sign for the OCP fp8 types, where ml_dtypes writes 0x7E | sign for e5m2; e8m0's only NaN)
    canon = np.uint8(0xFF) if fmt == "float8_e8m0fnu" else np.uint8(0x7F) | (codes.view(np.uint8) & np.uint8(0x80))
    np.testing.assert_array_equal(enc.view(np.uint8)[nan], np.broadcast_to(canon, codes.shape)[nan])
    assert nan.sum() == {"float8_e4m3fn": 2, "float8_e5m2": 6, "float8_e8m0fnu": 1, "float4_e2m1fn": 0}[fmt]


def _encode_sweep(mldt):
    """Every code's value, every midpoint between neighbouring codes (the ties), and a value just
    either side of each midpoint, over the finite range of the format."""
    v = np.arange(256 if mldt != ml_dtypes.float4_e2m1fn else 16, dtype=np.uint8).view(mldt).astype(np.float64)
    v = np.unique(v[np.isfinite(v)])
    mid = (v[1:] + v[:-1]) / 2
    pts = np.concatenate(
        [
            v,
            mid,
            np.nextafter(mid.astype(np.float32), np.float32(np.inf)),
            np.nextafter(mid.astype(np.float32), np.float32(-np.inf)),
        ]
    )
    pts = pts.astype(np.float32)
    if mldt != ml_dtypes.float8_e8m0fnu:
        pts = np.concatenate([pts, -pts])
    return pts[pts != 0] if mldt == ml_dtypes.float8_e8m0fnu else pts


@pytest.mark.parametrize("fmt", sorted(CODES))
def test_encoding_ties_and_neighbours_matches_ml_dtypes(cur, fmt):
    nki, nl, nisa = cur
    mldt = CODES[fmt][0]

    @nki.jit
    def encode(x, dt):
        out = nl.ndarray(x.shape, dtype=dt, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        c = nl.ndarray(x.shape, dtype=dt, buffer=nl.sbuf)
        nisa.tensor_copy(dst=c, src=t)
        nisa.dma_copy(dst=out, src=c)
        return out

    pts = _encode_sweep(mldt)
    pts = pts[: pts.size // 4 * 4].reshape(4, -1)
    _same_bits(encode(pts, np.dtype(mldt)), pts.astype(mldt))


# ---------------------------------------------------------------------------------------------
# quantize_mx against a NumPy reference of OCP MX quantization


def _quantize_kernel(nki, nl, nisa, qdt):
    @nki.jit
    def quantize(x):
        p, f = x.shape
        q_out = nl.ndarray((p, f // 4), dtype=qdt, buffer=nl.shared_hbm)
        s_out = nl.ndarray((p // 8, f // 4), dtype=nl.float8_e8m0fnu, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        q = nl.ndarray((p, f // 4), dtype=qdt, buffer=nl.sbuf)
        s = nl.ndarray((4 if p == 32 else p, f // 4), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
        nisa.quantize_mx(dst=q, src=t, dst_scale=s)
        nisa.dma_copy(dst=q_out, src=q)
        for g in range(p // 32):  # each quadrant's scales: 4 partitions at its start
            nisa.dma_copy(dst=s_out[4 * g : 4 * g + 4, :], src=s[32 * g : 32 * g + 4, :])
        return q_out, s_out

    return quantize


def _mx_input(rng, p, f, dtype):
    """Normal values with an exponent drawn per group (so the scales differ), one all-zero group,
    one group whose amax is a power of two, one with a tiny amax (scale code near 0) and one
    holding the format's ties (values halfway between two codes after scaling)."""
    x = rng.standard_normal((p, f)) * np.exp2(rng.integers(-12, 12, (p // 8, f // 4))).repeat(8, 0).repeat(4, 1)
    x[0:8, 0:4] = 0.0
    x[8:16, 0:4] = rng.uniform(-1, 1, (8, 4))
    x[8, 0] = 2.0
    x[16:24, 0:4] = rng.standard_normal((8, 4)) * 2.0**-120
    x[24:32, 4:8] = np.array([1.0, 1.0625, 1.1875, 1.3125])  # e4m3fn: 136 and 152 are ties at scale 2^-7
    return x.astype(dtype)


@pytest.mark.parametrize("src_dtype", [ml_dtypes.bfloat16, np.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("p", [32, 128])
@pytest.mark.parametrize("element", ["float8_e4m3fn", "float8_e5m2"])
def test_quantize_mx_matches_numpy_ocp_mx_quantization(cur, element, p, src_dtype):
    nki, nl, nisa = cur
    qdt = getattr(nl, element + "_x4")
    x = _mx_input(np.random.default_rng(p), p, 64, src_dtype)
    if src_dtype == np.float16:
        x[16:24, 0:4] = 2.0**-20  # fp16 has no 2^-120; still a small amax
    q, s = _quantize_kernel(nki, nl, nisa, qdt)(x)
    codes, scales = R.quantize(x.astype(np.float32), element)
    assert q.dtype == np.uint32 and q.shape == (p, 16)  # an _x4 tensor comes back as its raw words
    np.testing.assert_array_equal(s.view(np.uint8), scales)
    np.testing.assert_array_equal(R.unpack(q, element), codes)
    assert scales[0, 0] == 0 and (codes[0:8, 0:4] == 0).all()  # the all-zero group
    # AWS's doubled scale: no element saturates, so every dequantized value is finite
    assert np.isfinite(R.dequantize(codes, scales, element)).all()


def test_quantize_mx_with_torch_tensors_returns_e8m0_scales_and_raw_words(cur):
    """torch in, torch out: the scales come back as torch.float8_e8m0fnu, the _x4 codes as their
    uint32 words, bit for bit what the NumPy call gives."""
    torch = pytest.importorskip("torch")
    nki, nl, nisa = cur
    x = _mx_input(np.random.default_rng(3), 32, 16, ml_dtypes.bfloat16)
    k = _quantize_kernel(nki, nl, nisa, nl.float8_e4m3fn_x4)
    q, s = k(torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16))
    assert q.dtype == torch.uint32 and s.dtype == torch.float8_e8m0fnu
    codes, scales = R.quantize(x.astype(np.float32), "float8_e4m3fn")
    np.testing.assert_array_equal(s.view(torch.uint8).numpy(), scales)
    np.testing.assert_array_equal(R.unpack(q.numpy(), "float8_e4m3fn"), codes)


# ---------------------------------------------------------------------------------------------
# nc_matmul_mx against a NumPy block-scaled matmul


def _mx_operand(rng, kp, cols, element):
    """Random MX codes and scale codes of an operand [Kp, cols] (packed): every finite code of
    the element type is possible, scales over a 2^±20 range."""
    mldt, _ = R.ELEMENTS[element]
    n = 16 if element == "float4_e2m1fn" else 256
    ok = np.flatnonzero(np.isfinite(np.arange(n, dtype=np.uint8).view(mldt).astype(np.float32)))
    codes = rng.choice(ok, (kp, 4 * cols)).astype(np.uint8)
    scales = rng.integers(127 - 20, 127 + 20, (kp // 8, cols)).astype(np.uint8)
    return codes, scales


def _matmul_kernel(nki, nl, nisa, adt, bdt, two=False, tile=None, acc_dt=None):
    """out = the MX product of (a, a_scales) and (b, b_scales); with `two`, the sum of the
    products of the first and second halves of the contraction (accumulated in PSUM)."""

    def load_scales(scales, rows, cols, k0):
        s = nl.ndarray((4 if rows == 32 else rows, cols), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
        for g in range(rows // 32):
            nisa.dma_copy(dst=s[32 * g : 32 * g + 4, :], src=scales[k0 // 8 + 4 * g : k0 // 8 + 4 * g + 4, :])
        return s

    @nki.jit
    def mx_matmul(a_words, a_scales, b_words, b_scales):
        k, m = a_words.shape
        n = b_words.shape[1]
        out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((m, n), dtype=acc_dt or nl.float32, buffer=nl.psum)
        kp = k // 2 if two else k
        for k0 in range(0, k, kp):
            a = nl.ndarray((kp, m), dtype=adt, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=a_words.view(adt)[k0 : k0 + kp, :])
            b = nl.ndarray((kp, n), dtype=bdt, buffer=nl.sbuf)
            nisa.dma_copy(dst=b, src=b_words.view(bdt)[k0 : k0 + kp, :])
            sa = load_scales(a_scales, kp, m, k0)
            sb = load_scales(b_scales, kp, n, k0)
            extra = {} if tile is None else {"tile_position": (tile[0], 0), "tile_size": (tile[1], 128)}
            nisa.nc_matmul_mx(dst=acc, stationary=a, moving=b, stationary_scale=sa, moving_scale=sb, **extra)
        res = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out, src=res)
        return out

    return mx_matmul


MATMULS = [
    # (stationary element, moving element, Kp, M, N, two halves, row tile (start, size))
    ("float8_e4m3fn", "float8_e4m3fn", 128, 64, 128, False, None),
    ("float8_e5m2", "float8_e4m3fn", 64, 32, 96, False, (64, 64)),
    ("float4_e2m1fn", "float4_e2m1fn", 32, 128, 512, False, None),
    ("float8_e4m3fn", "float4_e2m1fn", 32, 16, 64, False, (96, 32)),
    ("float8_e5m2", "float8_e5m2", 128, 8, 16, True, None),
]


@pytest.mark.parametrize(
    ("ea", "eb", "kp", "m", "n", "two", "tile"), MATMULS, ids=[f"{a[7:]}x{b[7:]}-kp{k}" for a, b, k, *_ in MATMULS]
)
def test_nc_matmul_mx_matches_a_numpy_block_scaled_matmul(cur, ea, eb, kp, m, n, two, tile):
    nki, nl, nisa = cur
    rng = np.random.default_rng(kp + m + n)
    rows = 2 * kp if two else kp
    ca, sa = _mx_operand(rng, rows, m, ea)
    cb, sb = _mx_operand(rng, rows, n, eb)
    dt = {e: getattr(nl, e + "_x4") for e in (ea, eb)}
    k = _matmul_kernel(nki, nl, nisa, dt[ea], dt[eb], two=two, tile=tile)
    # the scales go in as e8m0 (a uint8 array would be converted by value on the way in, by the DMA)
    e8m0 = ml_dtypes.float8_e8m0fnu
    got = k(R.pack(ca, ea), sa.view(e8m0), R.pack(cb, eb), sb.view(e8m0)).astype(np.float64)
    ops = [op for i in trnsim.nki.last_run().program["instructions"] for op in i["op"]]
    assert ops.count("nc_matmul_mx") == (2 if two else 1)
    a = R.contraction(R.dequantize(ca, sa, ea))  # [K, M], exact
    b = R.contraction(R.dequantize(cb, sb, eb))
    exact = a.T @ b
    err = np.abs(got - exact)
    bound = R.matmul_bound(a, b)
    assert (err <= bound).all(), float((err - bound).max())
    assert err.max() > 0  # the products and sums are not all exact: the bound is what is tested


def test_nc_matmul_mx_into_bf16_psum_takes_twice_the_columns_and_rounds_once(cur):
    """NeuronCore-v4's PSUM takes bf16 results: N up to 2 x 512 in one bank, and the fp32 sum is
    rounded once to bf16 (u = 2^-8), which docs/numerics.md's bound gains as one term."""
    nki, nl, nisa = cur
    rng = np.random.default_rng(5)
    ca, sa = _mx_operand(rng, 64, 32, "float8_e4m3fn")
    cb, sb = _mx_operand(rng, 64, 1024, "float8_e5m2")
    k = _matmul_kernel(nki, nl, nisa, nl.float8_e4m3fn_x4, nl.float8_e5m2_x4, acc_dt=nl.bfloat16)
    e8m0 = ml_dtypes.float8_e8m0fnu
    got = k(R.pack(ca, "float8_e4m3fn"), sa.view(e8m0), R.pack(cb, "float8_e5m2"), sb.view(e8m0))
    got = got.astype(np.float64)
    assert (got.astype(np.float32).view(np.uint32) & 0xFFFF == 0).all()  # bf16 values
    a = R.contraction(R.dequantize(ca, sa, "float8_e4m3fn"))
    b = R.contraction(R.dequantize(cb, sb, "float8_e5m2"))
    exact = a.T @ b
    sum_bound = R.matmul_bound(a, b)
    assert (np.abs(got - exact) <= sum_bound + 2.0**-8 * (np.abs(exact) + sum_bound)).all()


def test_quantize_mx_then_nc_matmul_mx_within_the_bound(cur):
    """A [K=512, 64] x [512, 128] bf16 product quantized on the device (quantize_mx on both
    operands, laid out as nc_matmul_mx reads them) and multiplied: the device's codes equal the
    NumPy quantization, and the result is within the bound of their exact block-scaled product."""
    nki, nl, nisa = cur

    @nki.jit
    def mxfp8_matmul(a_tile, b_tile):
        kp, m4 = a_tile.shape
        n4 = b_tile.shape[1]
        out = nl.ndarray((m4 // 4, n4 // 4), dtype=nl.float32, buffer=nl.shared_hbm)
        qs = []
        for x, f in ((a_tile, m4), (b_tile, n4)):
            t = nl.ndarray((kp, f), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            q = nl.ndarray((kp, f // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
            s = nl.ndarray((kp, f // 4), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
            nisa.quantize_mx(dst=q, src=t, dst_scale=s)
            qs.append((q, s))
        acc = nl.ndarray((m4 // 4, n4 // 4), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(acc, qs[0][0], qs[1][0], qs[0][1], qs[1][1])
        res = nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out, src=res)
        return out

    rng = np.random.default_rng(23)
    a = (rng.standard_normal((512, 64)) * np.exp2(rng.integers(-4, 4, (512, 64)))).astype(ml_dtypes.bfloat16)
    b = (rng.standard_normal((512, 128)) * np.exp2(rng.integers(-4, 4, (512, 128)))).astype(ml_dtypes.bfloat16)
    at, bt = R.tile_of(a), R.tile_of(b)
    got = mxfp8_matmul(at, bt).astype(np.float64)
    ca, sa = R.quantize(at.astype(np.float32), "float8_e4m3fn")
    cb, sb = R.quantize(bt.astype(np.float32), "float8_e4m3fn")
    da = R.contraction(R.dequantize(ca, sa, "float8_e4m3fn"))
    db = R.contraction(R.dequantize(cb, sb, "float8_e4m3fn"))
    err = np.abs(got - da.T @ db)
    assert (err <= R.matmul_bound(da, db)).all()


# ---------------------------------------------------------------------------------------------
# NkiErrors: shapes, dtypes, memories, generations (raised while tracing, before any run)


def _sb(nl, shape, dt, buf="sbuf"):
    return nl.ndarray(shape, dtype=getattr(nl, dt), buffer=getattr(nl, buf))


def _quantize_call(nl, nisa, p=32, f=8, src="bfloat16", dst="float8_e4m3fn_x4", scale="float8_e8m0fnu", **kw):
    """A quantize_mx call, valid unless an argument says otherwise."""
    nisa.quantize_mx(
        dst=_sb(nl, kw.get("dst_shape", (p, f // 4)), dst),
        src=_sb(nl, (p, f), src, kw.get("src_buf", "sbuf")),
        dst_scale=_sb(nl, kw.get("scale_shape", (4 if p == 32 else p, f // 4)), scale),
    )


def _matmul_call(nl, nisa, kp=32, m=4, n=8, data=("float8_e4m3fn_x4", "float8_e4m3fn_x4"), **kw):
    """An nc_matmul_mx call, valid unless an argument says otherwise."""
    sc = "float8_e8m0fnu"
    nisa.nc_matmul_mx(
        dst=_sb(nl, kw.get("dst_shape", (m, n)), kw.get("dst_dt", "float32"), kw.get("dst_buf", "psum")),
        stationary=_sb(nl, (kp, m), data[0]),
        moving=_sb(nl, (kw.get("kq", kp), n), data[1]),
        stationary_scale=_sb(nl, kw.get("scale_shape", (4 if kp == 32 else kp, m)), sc),
        moving_scale=_sb(nl, (4 if kp == 32 else kp, n), sc),
        **{k: v for k, v in kw.items() if k in ("tile_position", "tile_size", "accumulate")},
    )


ERRORS = [
    ("q-src-f32", lambda nl, nisa: _quantize_call(nl, nisa, src="float32"), "src must be float16 or bfloat16"),
    ("q-dst-fp4", lambda nl, nisa: _quantize_call(nl, nisa, dst="float4_e2m1fn_x4"), "dst must be float8_e5m2_x4 or"),
    ("q-scale-f32", lambda nl, nisa: _quantize_call(nl, nisa, scale="float32"), "must be float8_e8m0fnu or uint8"),
    ("q-p16", lambda nl, nisa: _quantize_call(nl, nisa, p=16, scale_shape=(4, 2)), "spans whole SBUF quadrants"),
    ("q-f6", lambda nl, nisa: _quantize_call(nl, nisa, f=6, dst_shape=(32, 1), scale_shape=(4, 1)), "multiple of 4"),
    ("q-dst-shape", lambda nl, nisa: _quantize_call(nl, nisa, dst_shape=(32, 8)), "holds 4 codes per element"),
    ("q-scale-shape", lambda nl, nisa: _quantize_call(nl, nisa, scale_shape=(8, 2)), r"are a \[4, 2\] tile"),
    ("q-tall-scale", lambda nl, nisa: _quantize_call(nl, nisa, p=64, scale_shape=(8, 2)), r"are a \[64, 2\] tile"),
    (
        "q-src-psum",
        lambda nl, nisa: _quantize_call(nl, nisa, src="float16", src_buf="psum"),
        "src must be a tile in SBUF",
    ),
    ("mm-dst-sbuf", lambda nl, nisa: _matmul_call(nl, nisa, dst_buf="sbuf"), "dst must be a tile in PSUM"),
    ("mm-bf16-data", lambda nl, nisa: _matmul_call(nl, nisa, data=("bfloat16", "float8_e4m3fn_x4")), "must be float8"),
    ("mm-dst-i32", lambda nl, nisa: _matmul_call(nl, nisa, dst_dt="int32"), "dst must be float32 or bfloat16"),
    ("mm-kp-differ", lambda nl, nisa: _matmul_call(nl, nisa, kq=64), "stationary has 32 partitions"),
    ("mm-m-odd", lambda nl, nisa: _matmul_call(nl, nisa, m=3, dst_shape=(3, 8), scale_shape=(4, 3)), "is even"),
    ("mm-n-big", lambda nl, nisa: _matmul_call(nl, nisa, n=640, dst_dt="float32"), "is at most 512"),
    ("mm-dst-shape", lambda nl, nisa: _matmul_call(nl, nisa, dst_shape=(4, 16)), r"dst is \[M, N\] = \[4, 8\]"),
    ("mm-scale-shape", lambda nl, nisa: _matmul_call(nl, nisa, scale_shape=(32, 4)), r"are a \[4, 4\] tile"),
    ("mm-tile-half", lambda nl, nisa: _matmul_call(nl, nisa, tile_size=(32, 128)), "go together"),
    ("mm-tile-cols", lambda nl, nisa: _matmul_call(nl, nisa, tile_position=(0, 0), tile_size=(32, 64)), "row tiling"),
    (
        "mm-tile-pos",
        lambda nl, nisa: _matmul_call(nl, nisa, tile_position=(16, 0), tile_size=(32, 128)),
        "multiple of 32",
    ),
    (
        "mm-tile-short",
        lambda nl, nisa: _matmul_call(nl, nisa, kp=64, tile_position=(0, 0), tile_size=(32, 128)),
        "exceed the 32-row tile",
    ),
    ("mm-accumulate-unwritten", lambda nl, nisa: _matmul_call(nl, nisa, accumulate=True), "nothing has written"),
    (
        "x4-in-tensor-copy",
        lambda nl, nisa: nisa.tensor_copy(dst=_sb(nl, (32, 4), "float8_e4m3fn_x4"), src=_sb(nl, (32, 4), "float32")),
        "a packed MX container: only nisa.quantize_mx",
    ),
]


@pytest.mark.parametrize(("body", "match"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_mx_calls_refuse_bad_shapes_dtypes_and_memories(cur, body, match):
    nki, nl, nisa = cur

    @nki.jit
    def kernel(x):
        body(nl, nisa)
        return x

    with pytest.raises(NkiError, match=match):
        kernel(np.zeros((1, 1), np.float32))


def test_mx_instructions_and_dtypes_are_refused_before_neuroncore_v4(cur, monkeypatch):
    nki, nl, nisa = cur
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")

    @nki.jit
    def quantize_on_trn2(x):
        t = nl.ndarray((32, 8), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.quantize_mx(dst=t, src=t, dst_scale=t)
        return x

    @nki.jit
    def matmul_on_trn2(x):
        t = nl.ndarray((32, 8), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.nc_matmul_mx(t, t, t, t, t)
        return x

    @nki.jit
    def x4_tile_on_trn2(x):
        nl.ndarray((32, 8), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        return x

    @nki.jit
    def e8m0_view_on_trn2(x):
        x.view(nl.float8_e8m0fnu)
        return x

    x = np.zeros((1, 4), np.uint8)
    gen = r"\(NeuronCore-v3\)"
    with pytest.raises(NkiError, match=r"nisa.quantize_mx is available only on NeuronCore-v4 .*trn2 " + gen):
        quantize_on_trn2(x)
    with pytest.raises(NkiError, match=r"nisa.nc_matmul_mx is available only on NeuronCore-v4 .*trn2 " + gen):
        matmul_on_trn2(x)
    with pytest.raises(NkiError, match=r"dtype float8_e4m3fn_x4 exists only from NeuronCore-v4 \(trn3\) on; .*trn2"):
        x4_tile_on_trn2(x)
    with pytest.raises(NkiError, match=r"dtype float8_e8m0fnu exists only from NeuronCore-v4"):
        e8m0_view_on_trn2(x)
