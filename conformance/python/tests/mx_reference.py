"""NumPy references for OCP microscaling (MX) on NeuronCore-v4, shared by the NKI MX tests
(test_nki_mx.py, test_nki_corpus_current.py). Independent of trnsim: element codes come from
ml_dtypes, scales from the rule AWS's `nki.isa.quantize_mx` documents.

Layouts (AWS's `quantize_mx` / `nc_matmul_mx` pages, docs/isa.md §5.32-5.33):
* a group is 8 partitions x 4 consecutive free elements; the 4 codes of one group row are one
  packed `_x4` element, code k in byte k (fp8) or nibble k (fp4) (docs/numerics.md, "MX formats");
* the scales of data partitions 8r..8r+8 are row r of a [P/8, F/4] scale matrix (on chip that row
  sits at partition 32·(r // 4) + r % 4 of the scale tile);
* in `nc_matmul_mx` the packed element (p, j) of an operand holds contraction rows 4p..4p+4 of
  column j."""

import ml_dtypes
import numpy as np

# element format -> (ml_dtypes type, emax: the exponent of its largest normal)
ELEMENTS = {
    "float8_e4m3fn": (ml_dtypes.float8_e4m3fn, 8),
    "float8_e5m2": (ml_dtypes.float8_e5m2, 15),
    "float4_e2m1fn": (ml_dtypes.float4_e2m1fn, 2),
}


def quantize(src, element):
    """OCP MX quantization of a [P, F] array as `quantize_mx` does it: per group, the scale
    exponent is floor(log2 amax) − emax + 1 (twice the OCP sample algorithm's scale, so the
    largest element never saturates), stored as the e8m0 code clamp(e + 127, 0, 254), 0 for an
    all-zero group; elements are x / 2^(code − 127) (exact) rounded to nearest even by ml_dtypes.
    Returns (codes [P, F] uint8, scale codes [P/8, F/4] uint8)."""
    mldt, emax = ELEMENTS[element]
    x = np.asarray(src, np.float32)
    p, f = x.shape
    amax = np.abs(x).reshape(p // 8, 8, f // 4, 4).max(axis=(1, 3))
    _, e = np.frexp(amax)  # amax = m · 2^e, m in [0.5, 1): floor(log2 amax) = e − 1
    code = np.where(amax == 0, 0, np.clip((e - 1) - emax + 1 + 127, 0, 254)).astype(np.int64)
    full = np.repeat(np.repeat(np.ldexp(np.float32(1), code - 127).astype(np.float32), 8, 0), 4, 1)
    codes = (x / full).astype(np.float32).astype(mldt).view(np.uint8)
    return codes, code.astype(np.uint8)


def pack(codes, element):
    """[P, F] codes -> the [P, F/4] packed words (uint32 for fp8, uint16 for fp4)."""
    c = np.asarray(codes, np.uint8)
    p, f = c.shape
    if element == "float4_e2m1fn":
        n = c.reshape(p, f // 4, 4).astype(np.uint16) & 0xF
        return n[..., 0] | n[..., 1] << 4 | n[..., 2] << 8 | n[..., 3] << 12
    return np.ascontiguousarray(c).view(np.uint32).reshape(p, f // 4)


def unpack(words, element):
    """The inverse of `pack`: [P, F/4] words -> [P, F] codes."""
    w = np.asarray(words)
    p, g = w.shape
    if element == "float4_e2m1fn":
        w = w.astype(np.uint16)
        return np.stack([(w >> (4 * k)) & 0xF for k in range(4)], axis=-1).astype(np.uint8).reshape(p, 4 * g)
    return np.ascontiguousarray(w.astype(np.uint32)).view(np.uint8).reshape(p, 4 * g)


def dequantize(codes, scales, element):
    """[P, F] element codes and their [P/8, F/4] scale codes -> float64 values (exact)."""
    mldt, _ = ELEMENTS[element]
    v = np.asarray(codes, np.uint8).view(mldt).astype(np.float64)
    s = np.asarray(scales, np.int64)
    full = np.repeat(np.repeat(np.where(s == 255, np.nan, np.ldexp(1.0, s - 127)), 8, 0), 4, 1)
    return v * full


def contraction(values):
    """A dequantized `nc_matmul_mx` operand tile [Kp, 4·N] (packed element j of partition p holds
    rows 4p..4p+4 of column j) as the [K = 4·Kp, N] matrix it stands for."""
    kp, f = values.shape
    return values.reshape(kp, f // 4, 4).transpose(0, 2, 1).reshape(4 * kp, f // 4)


def tile_of(matrix):
    """The inverse of `contraction`: a [K, N] matrix as the [K/4, 4·N] tile `quantize_mx` reads."""
    k, n = matrix.shape
    return np.ascontiguousarray(np.asarray(matrix).reshape(k // 4, 4, n).transpose(0, 2, 1).reshape(k // 4, 4 * n))


def matmul_bound(a, b):
    """docs/numerics.md's bound on `nc_matmul_mx` (fp32 dst) against the exact product of the
    dequantized [K, M] and [K, N] operands: the products are exact in fp32, so the error is the fp32
    summation's, |result − exact| ≤ γ_(K−1)·Σ_k |a_k·b_k| with γ_n = n·u / (1 − n·u), u = 2^-24."""
    k = a.shape[0]
    u = 2.0**-24
    gamma = (k - 1) * u / (1 - (k - 1) * u)
    return gamma * (np.abs(a).T @ np.abs(b))
