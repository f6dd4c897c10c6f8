#!/usr/bin/env python3
"""Generates the dtype conversion tables that sim/tests/dtype_tables.rs checks trnsim against.

Run:  .venv/bin/python golden/dtype_tables/generate.py   (needs torch; ml_dtypes for the
legacy float8_e4m3, `pip install ml_dtypes`). Writes next to this file; commit the outputs.

What is recorded (all little-endian, no headers; meta.json describes every file):

  decode_<fmt>.runs  f32 bits each code of bf16/f16 (65536) or e4m3fn/e5m2/e4m3 (256) decodes
                     to, in code order, stored as runs of arithmetic progressions (count, first,
                     step: three LE u32; wrapping): bf16 is 1 run, f16 a few dozen
                     (e4m3 = ml_dtypes float8_e4m3, the NeuronCore legacy e4m3; others torch)
  encode_inputs.u32  N x u32  f32 bit patterns: a dense set of edge inputs + random ones, sorted
  encode_bf16.u16    N x u16  torch  x.to(bfloat16)
  encode_f16.u16     N x u16  torch  x.to(float16)
  encode_e4m3fn.u8   N x u8   torch  x.to(float8_e4m3fn)
  encode_e5m2.u8     N x u8   torch  x.to(float8_e5m2)
  encode_e4m3.u8     N x u8   ml_dtypes  x.astype(float8_e4m3)
  path_alt.json               entries where torch answers differently on another code path
  meta.json                   versions, seed, sizes, hashes

Torch's CPU conversion kernels process a tensor in SIMD blocks and the remainder (fewer elements
than one vector) with scalar c10 code. For a few inputs the two paths disagree (only on NaN
encodings, asserted here): the tables hold the vectorised answer (every table is computed on a
tensor padded to a multiple of 256 elements) and path_alt.json lists, per table, the entries
where the 'tail' path (one element per tensor) or, for encodes, the 'c10' path
(torch.tensor(list, dtype=...), c10's scalar constructors) answers differently.

torch's float -> int casts truncate, which is not the hardware rule (RNE + saturate), so integer
conversions are not tabulated: sim/tests/dtype_props.rs checks them against hand-derived values.
"""

import hashlib
import json
import platform
import sys
from pathlib import Path

import numpy as np
import torch

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    sys.exit("ml_dtypes is required for the legacy float8_e4m3 tables: pip install ml_dtypes")

OUT = Path(__file__).resolve().parent
SEED = 20260821
PAD = 256

# (name, mantissa bits, exponent bias, largest unbiased exponent of a finite value)
FORMATS = [
    ("bf16", 7, 127, 127),
    ("f16", 10, 15, 15),
    ("tf32", 10, 127, 127),
    ("e4m3fn", 3, 7, 8),
    ("e5m2", 2, 15, 15),
    ("e4m3", 3, 7, 7),
]


def f32_bits(x: float) -> int:
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


def edge_inputs() -> np.ndarray:
    """Dense edge set: at every f32 exponent that matters for each target format, values whose
    dropped bits are 0, just below / at / just above the tie, and all ones, with the kept mantissa
    even, odd and all-ones (carry into the exponent). The 8-bit-exponent formats (bf16, tf32) get
    a smaller set per exponent because they span all 254 f32 exponents."""
    rng = np.random.default_rng(SEED)
    mags = set()
    for _name, m, bias, emax in FORMATS:
        emin = 1 - bias
        wide = bias == 127
        lo_e = max(emin - m - 3, -150)
        hi_e = min(emax + 2, 127)
        for e in range(lo_e, hi_e + 1):
            # S: the input's significand as an integer (24 bits with the implicit bit for normal
            # f32 inputs; the 23-bit field for f32 subnormals). d: how many low bits of S lie
            # below the target's rounding position.
            if e < -126:
                sub, eb = True, 0
                d = 23 - m + (emin + 126 if emin > -126 else 0)
                s_lo, s_hi = 0, (1 << 23) - 1
            else:
                sub, eb = False, e + 127
                d = 23 - m + max(0, emin - e)
                s_lo, s_hi = 1 << 23, (1 << 24) - 1
            if d > 30:
                continue
            full = 1 << d
            kmin, kmax = s_lo >> d, s_hi >> d
            ks = {kmin, kmin + 1, kmax} if wide else {kmin, kmin + 1, kmax - 1, kmax}
            if kmax - kmin > 2 and not wide:
                ks.add(int(rng.integers(kmin, kmax + 1)))
            half = full >> 1
            rs = {0, half - 1, half, half + 1, full - 1}
            if not wide:
                rs |= {1, full - 2, half + 2, half - 2}
                if d > 3:
                    rs.add(int(rng.integers(0, full)))
            for k in ks:
                for r in rs:
                    if not (0 <= r < full):
                        continue
                    sig = (k << d) | r
                    if s_lo <= sig <= s_hi:
                        mags.add((eb << 23) | (sig & 0x7FFFFF))
            del sub
    # Power-of-two boundaries and their neighbours at every f32 exponent.
    for eb in range(0, 255):
        for mant in (0, 1, 0x7FFFFF):
            mags.add((eb << 23) | mant)
    # Named thresholds and their f32 neighbours.
    named = [
        448.0,
        464.0,
        480.0,
        416.0,
        240.0,
        248.0,
        256.0,
        57344.0,
        61440.0,
        65536.0,
        49152.0,
        65504.0,
        65520.0,
        65536.0,
        1.0,
        2.0**-6,
        2.0**-9,
        2.0**-10,
        2.0**-14,
        2.0**-16,
        2.0**-17,
        2.0**-24,
        2.0**-25,
        2.0**-126,
        2.0**-133,
        2.0**-134,
        3.0e38,
    ]
    for v in named:
        b = f32_bits(v)
        for db in range(-3, 4):
            mags.add(b + db)
    for b in (0x7F7F0000, 0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001, 0x7F7FFFFF, 0x7F7EFFFF, 0x7F7FF000, 0x7F7FEFFF):
        mags.add(b)
    mags = {m for m in mags if m < 0x7F800000}
    specials = [0x00000000, 0x7F800000]
    nans = [
        0x7FC00000,
        0x7F800001,
        0x7FBFFFFF,
        0x7FFFFFFF,
        0x7FA12345,
        0x7F812345,
        0x7FC00001,
        0x7FC02000,
        0x7FE00000,
        0x7F802000,
        0x7F804000,
        0x7F900000,
        0x7FF00000,
        0x7FDFE000,
    ]
    vals = set()
    for m_ in list(mags) + specials + nans:
        vals.add(m_)
        vals.add(m_ | 0x80000000)
    # Random bit patterns, random values in the fp8 range and log-uniform magnitudes.
    vals.update(int(v) for v in rng.integers(0, 1 << 32, size=3000, dtype=np.uint64))
    u = rng.uniform(-600.0, 600.0, size=1000).astype(np.float32)
    vals.update(int(b) for b in u.view(np.uint32))
    lg = (np.exp2(rng.uniform(-30.0, 20.0, size=1000)) * rng.choice([-1.0, 1.0], size=1000)).astype(np.float32)
    vals.update(int(b) for b in lg.view(np.uint32))
    return np.array(sorted(vals), dtype=np.uint32)


def padded(a: np.ndarray) -> np.ndarray:
    n = (len(a) + PAD - 1) // PAD * PAD
    out = np.zeros(n, dtype=a.dtype)
    out[: len(a)] = a
    return out


def torch_encode(bits: np.ndarray, dtype: torch.dtype, one_by_one: bool) -> np.ndarray:
    itype = torch.int16 if dtype.itemsize == 2 else torch.uint8
    ntype = np.uint16 if dtype.itemsize == 2 else np.uint8
    if not one_by_one:
        t = torch.from_numpy(padded(bits).view(np.float32).copy())
        return t.to(dtype).view(itype).numpy().view(ntype)[: len(bits)].copy()
    f = bits.view(np.float32)
    out = np.empty(len(bits), dtype=ntype)
    for i in range(len(bits)):
        out[i] = torch.from_numpy(f[i : i + 1].copy()).to(dtype).view(itype).numpy().view(ntype)[0]
    return out


def torch_decode(codes: np.ndarray, dtype: torch.dtype, one_by_one: bool) -> np.ndarray:
    itype = torch.int16 if dtype.itemsize == 2 else torch.uint8
    stype = np.int16 if dtype.itemsize == 2 else np.uint8
    if not one_by_one:
        t = torch.from_numpy(padded(codes).view(stype).copy()).view(dtype)
        return t.to(torch.float32).numpy().view(np.uint32)[: len(codes)].copy()
    out = np.empty(len(codes), dtype=np.uint32)
    c = codes.view(stype)
    for i in range(len(codes)):
        t = torch.from_numpy(c[i : i + 1].copy()).view(dtype)
        out[i] = t.to(torch.float32).numpy().view(np.uint32)[0]
    del itype
    return out


def is_nan_f32(b: np.ndarray) -> np.ndarray:
    return (b & 0x7FFFFFFF) > 0x7F800000


def is_nan_small(codes: np.ndarray, name: str) -> np.ndarray:
    c = codes.astype(np.uint32)
    if name == "bf16":
        return (c & 0x7FFF) > 0x7F80
    if name == "f16":
        return (c & 0x7FFF) > 0x7C00
    if name == "e4m3fn":
        return (c & 0x7F) == 0x7F
    if name == "e5m2":
        return (c & 0x7F) > 0x7C
    if name == "e4m3":
        return (c & 0x7F) > 0x78
    raise ValueError(name)


def alt_runs(vec, other, nan_vec, nan_other, table):
    """Entries where another torch path differs from the vectorised one, as runs
    [first_index, last_index, value] of consecutive indices with the same value."""
    diff = np.nonzero(vec != other)[0]
    bad = [int(i) for i in diff if not (nan_vec[i] and nan_other[i])]
    if bad:
        raise SystemExit(f"{table}: torch paths disagree on non-NaN entries {bad[:10]}")
    runs = []
    for i in diff:
        i = int(i)
        v = int(other[i])
        if runs and runs[-1][1] == i - 1 and runs[-1][2] == v:
            runs[-1][1] = i
        else:
            runs.append([i, i, v])
    return runs


def ap_runs(values: np.ndarray) -> bytes:
    """Lossless compression by structure: the u32 sequence as runs of arithmetic progressions,
    each (count, first, step) as three little-endian u32 (wrapping arithmetic)."""
    v = [int(x) for x in values]
    out = []
    i = 0
    while i < len(v):
        if i + 1 == len(v):
            out.append((1, v[i], 0))
            break
        step = (v[i + 1] - v[i]) & 0xFFFFFFFF
        j = i + 1
        while j + 1 < len(v) and ((v[j + 1] - v[j]) & 0xFFFFFFFF) == step:
            j += 1
        out.append((j - i + 1, v[i], step))
        i = j + 1
    return np.array(out, dtype="<u4").tobytes()


def c10_encode(bits: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """torch.tensor(python floats, dtype=...): each element through c10's scalar constructor."""
    itype = torch.int16 if dtype.itemsize == 2 else torch.uint8
    ntype = np.uint16 if dtype.itemsize == 2 else np.uint8
    vals = [float(x) for x in bits.view(np.float32)]
    return torch.tensor(vals, dtype=dtype).view(itype).numpy().view(ntype).copy()


def main():
    files = {}
    alt = {}

    def write(name, data: bytes):
        (OUT / name).write_bytes(data)
        files[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    def le(arr: np.ndarray) -> bytes:
        return arr.astype(arr.dtype.newbyteorder("<")).tobytes()

    # ---- decodes: every pattern, as AP runs of f32 bits ---------------------------------------
    all16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    all8 = np.arange(256, dtype=np.uint32).astype(np.uint8)
    for name, dt, codes in (
        ("bf16", torch.bfloat16, all16),
        ("f16", torch.float16, all16),
        ("e4m3fn", torch.float8_e4m3fn, all8),
        ("e5m2", torch.float8_e5m2, all8),
    ):
        v = torch_decode(codes, dt, False)
        s = torch_decode(codes, dt, True)
        alt[f"decode_{name}:tail"] = alt_runs(v, s, is_nan_f32(v), is_nan_f32(s), f"decode_{name}")
        write(f"decode_{name}.runs", ap_runs(v))
    with np.errstate(invalid="ignore"):
        v = all8.view(ml_dtypes.float8_e4m3).astype(np.float32).view(np.uint32)
    write("decode_e4m3.runs", ap_runs(v))

    # ---- encodes --------------------------------------------------------------------------
    inputs = edge_inputs()
    write("encode_inputs.u32", le(inputs))
    nan_in = is_nan_f32(inputs)
    for name, dt in (
        ("bf16", torch.bfloat16),
        ("f16", torch.float16),
        ("e4m3fn", torch.float8_e4m3fn),
        ("e5m2", torch.float8_e5m2),
    ):
        v = torch_encode(inputs, dt, False)
        if name != "e4m3fn":
            assert np.array_equal(is_nan_small(v, name), nan_in), f"{name}: NaN in != NaN out"
        for path, other in (("tail", torch_encode(inputs, dt, True)), ("c10", c10_encode(inputs, dt))):
            alt[f"encode_{name}:{path}"] = alt_runs(
                v, other, is_nan_small(v, name), is_nan_small(other, name), f"encode_{name}:{path}"
            )
        write(f"encode_{name}.{'u16' if dt.itemsize == 2 else 'u8'}", le(v))
    with np.errstate(invalid="ignore", over="ignore"):
        v = inputs.view(np.float32).astype(ml_dtypes.float8_e4m3).view(np.uint8)
    write("encode_e4m3.u8", le(v))

    text = "{\n" + ",\n".join(f'"{k}": {json.dumps(a)}' for k, a in alt.items()) + "\n}\n"
    write("path_alt.json", text.encode())

    meta = {
        "generator": "golden/dtype_tables/generate.py",
        "torch": torch.__version__,
        "ml_dtypes": ml_dtypes.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "seed": SEED,
        "encode_inputs": int(len(inputs)),
        "encode_nan_inputs": int(nan_in.sum()),
        "path_dependent_runs": {k: len(a) for k, a in alt.items()},
        "files": files,
        "layout": {
            "decode_<fmt>.runs": "every code 0..2^bits in order, f32 bits of its decode, as runs of "
            "arithmetic progressions: (count, first, step) LE u32 triples, wrapping",
            "encode_inputs.u32": "u32[N], LE: f32 bit patterns, sorted",
            "encode_<fmt>.<u16|u8>": "LE: encoding of encode_inputs[i]",
            "path_alt.json": "{'<table>:<path>': [[first_index, last_index, value], ...]}: entries where "
            "torch's 'tail' path (a 1-element tensor, scalar kernel tail) or 'c10' path "
            "(torch.tensor(list, dtype), c10 scalar constructors) differs from the "
            "table (vectorised Tensor.to on a padded tensor); only ever NaN vs NaN",
        },
        "sources": {
            "bf16, f16, e4m3fn, e5m2": "torch Tensor.to(dtype) on CPU (vectorised kernel)",
            "e4m3": "ml_dtypes float8_e4m3 via numpy astype; torch has no IEEE-like e4m3",
        },
    }
    (OUT / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    total = sum(f["bytes"] for f in files.values())
    print(f"wrote {len(files)} files, {total} bytes; {len(inputs)} encode inputs")
    print("path-dependent runs:", meta["path_dependent_runs"])


if __name__ == "__main__":
    main()
