# ruff: noqa: E741
"""NumPy emulation of trnsim's FFT lowering (conformance/lower/src/fft.rs) with rounding sources
switchable, measured against the golden oracle in ulps like conformance/src/accuracy.rs."""

import glob
import json
import os
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

f32 = np.float32


def twiddles(L, K, N, sign, mode):
    l = np.arange(L)[:, None]
    k = np.arange(K)[None, :]
    m = (l * k) % N
    r = np.where(m > N / 2, m - N, m).astype(np.float64)
    if mode == "exact":

        def e(u):
            u = np.minimum(u, 2 * N - u)
            u = np.maximum(u, -2 * N - u)
            return np.where(u == 0, 0.0, np.where(np.abs(u) == N, np.sign(u), np.sin(u * (np.pi / (2 * N)))))

        c, s_ = e(4 * r + N), sign * e(4 * r)
        return c, s_
    if mode == "rounded":  # correctly rounded fp32 twiddles (host f64, rounded once)
        c, s_ = twiddles(L, K, N, sign, "exact")
        return c.astype(f32).astype(np.float64), s_.astype(f32).astype(np.float64)
    # engine: quarter turns u, fold, fp32 argument u*fl(pi/2N), correctly rounded sin
    q = f32(np.pi / (2 * N))

    def s(u):
        u = np.minimum(u, 2 * N - u)
        u = np.maximum(u, -2 * N - u)
        phi = (u.astype(f32) * q).astype(f32)
        return np.sin(phi.astype(np.float64)).astype(f32).astype(np.float64)

    return s(4 * r + N), sign * s(4 * r)


def seqsum(terms):  # terms [rows, K, B] float64 values of fp32 (or exact) terms; fp32 running sum
    acc = terms[0].astype(f32)
    for t in terms[1:]:
        acc = (acc.astype(np.float64) + t).astype(f32)
    return acc.astype(np.float64)


def contract(x_parts, w_parts, L, var):
    """sum over l of sum_n w_n[l,k] * x_n[l,b]; x_parts list of [L,B], w_parts list of [L,K]."""
    prods = []
    for xp, wp in zip(x_parts, w_parts):
        p = wp[:, :, None] * xp[:, None, :]
        if var["prod"] == "f32":
            p = p.astype(f32).astype(np.float64)
        prods.append(p)
    if var["sum"] == "exact":
        return sum(p.sum(axis=0) for p in prods)
    if var["sum"] == "ozaki":
        # x split per column (common exponent sigma over the contraction) and W (|w| <= 1) into
        # `ns` slices of `beta` bits; every slice-pair product is exact in fp32 and so is every
        # <= 32-row sum of them (2*beta + 5 <= 24); pairs i + j < ns kept; partials combined
        # exactly (TwoSum/sum2 on VectorE), one final rounding.
        beta, ns = var["beta"], var["ns"]

        def split(v, sigma):
            out = []
            r = v.copy()
            for i in range(ns):
                q = sigma * 2.0 ** (-beta * (i + 1) + 1)
                h = np.round(r / q) * q
                out.append(h)
                r = r - h
            return out

        tot = 0.0
        for xp, wp in zip(x_parts, w_parts):
            m = np.abs(xp).max(axis=0, keepdims=True)
            m = np.where(m == 0, 1.0, m)
            sig = 2.0 ** np.ceil(np.log2(m))
            xs = split(xp, sig)
            ws = split(wp, 1.0)
            for i in range(ns):
                for j in range(ns - i):
                    for s0 in range(0, L, 32):
                        part = (ws[j][s0 : s0 + 32, :, None] * xs[i][s0 : s0 + 32, None, :]).sum(axis=0)
                        assert np.all(part.astype(f32) == part), "slice-pair sum not exact"
                        tot = tot + part
        return tot

    def psum(blocks):  # each matmul sums its rows (TensorE order), PSUM adds matmul results
        acc = None
        for blk in blocks:
            v = seqsum(blk)
            acc = v if acc is None else (acc.astype(f32) + v.astype(f32)).astype(np.float64)
        return acc

    if L <= 32:
        return psum([p[t0 : t0 + 128] for p in prods for t0 in range(0, L, 128)])
    parts = []
    for s0 in range(0, L, 32):
        parts.append(psum([p[s0 : s0 + 32] for p in prods]))
    if var["comb"] == "exact":
        return np.sum(parts, axis=0)
    while len(parts) > 1:
        nxt = [
            (parts[i].astype(f32) + parts[i + 1].astype(f32)).astype(np.float64) for i in range(0, len(parts) - 1, 2)
        ]
        if len(parts) % 2:
            nxt.append(parts[-1])
        parts = nxt
    return parts[0]


def run_pass(x, dim, contract_n, N, kind, outputs, scale, var, last_pass=True):
    # x complex128 (or real) array with values exact fp32; dim transformed
    xm = np.moveaxis(x, dim, 0)[:contract_n]
    shp = xm.shape[1:]
    xm = xm.reshape(contract_n, -1)
    sign = -1.0 if kind == "fwd" else 1.0
    C, Wi = twiddles(contract_n, outputs, N, sign, var["tw"])
    if kind == "h2r":
        w = np.array([1.0 if (k == 0 or 2 * k == N) else 2.0 for k in range(contract_n)])[:, None]
        # Nyquist/DC: imaginary parts drop; weights multiply matrix rows (engine: fp32 exact x2)
        C = C * w
        Wi = Wi * w
        Wi = np.where((np.arange(contract_n)[:, None] == 0) | (2 * np.arange(contract_n)[:, None] == N), 0.0, Wi)
        xr, xi = xm.real, xm.imag
        out = contract([xr, xi], [C, -Wi], contract_n, var)
    elif np.iscomplexobj(x):
        xr, xi = xm.real, xm.imag
        re = contract([xr, xi], [C, -Wi], contract_n, var)
        im = contract([xi, xr], [C, Wi], contract_n, var)
        out = re + 1j * im
    else:
        re = contract([xm], [C], contract_n, var)
        im = contract([xm], [Wi], contract_n, var)
        out = re + 1j * im

    def r32(v):
        if var.get("inter") == "exact" and not last_pass:
            return v
        v = v.astype(f32).astype(np.float64)
        if scale != 1.0:
            v = (v.astype(f32) * f32(scale)).astype(f32).astype(np.float64)
        return v

    out = r32(out.real) + 1j * r32(out.imag) if np.iscomplexobj(out) else r32(out)
    out = out.reshape((outputs,) + shp)
    return np.moveaxis(out, 0, dim)


def norm_scale(mode, n):
    return [1.0, 1.0 / np.sqrt(n), 1.0 / n][mode]


def emulate(meta, x, var):
    args = meta["args"]
    dims = args[1]["ints"]
    norm = args[2]["int"]
    if meta["op"] == "_fft_r2c":
        onesided = args[3]["bool"]
        shape = list(x.shape)
        dims = [d % len(shape) for d in dims]
        last = dims[-1]
        n = shape[last]
        numel = int(np.prod([shape[d] for d in dims]))
        passes = [(last, n, n, "fwd", n // 2 + 1 if onesided else n)] + [
            (d, None, None, "fwd", None) for d in reversed(dims[:-1])
        ]
        cur = x.astype(np.float64)
        for i, (d, c, N, kind, outs) in enumerate(passes):
            if c is None:
                c = N = outs = cur.shape[d]
            sc = norm_scale(norm, numel) if i == len(passes) - 1 else 1.0
            cur = run_pass(cur, d, c, N, kind, outs, sc, var, i == len(passes) - 1)
        return np.stack([cur.real, cur.imag], -1)
    else:
        z = x[..., 0].astype(np.float64) + 1j * x[..., 1].astype(np.float64)
        n = args[3]["int"]
        shape = list(z.shape)
        dims = [d % len(shape) for d in dims]
        last = dims[-1]
        numel = int(np.prod([shape[d] for d in dims[:-1]])) * n
        cur = z
        allp = [(d, "inv") for d in dims[:-1]] + [(last, "h2r")]
        for i, (d, kind) in enumerate(allp):
            sc = norm_scale(norm, numel) if i == len(allp) - 1 else 1.0
            if kind == "inv":
                L = cur.shape[d]
                cur = run_pass(cur, d, L, L, "inv", L, sc, var, False)
            else:
                cur = run_pass(cur, d, min(cur.shape[d], n // 2 + 1), n, "h2r", n, sc, var)
        return cur


def ulps(y, o):
    o = o.astype(np.float64)
    y = y.astype(np.float64)
    a = np.abs(o)
    a = np.where(a < 2.0**-126, 2.0**-126, a)
    u = 2.0 ** (np.floor(np.log2(a)) - 23)
    return np.abs(y - o) / u


VARS = {
    "base": dict(tw="engine", prod="f32", sum="seq", comb="f32"),
    "a_twosum_comb": dict(tw="engine", prod="f32", sum="seq", comb="exact"),
    "b_exact_prod": dict(tw="engine", prod="exact", sum="seq", comb="f32"),
    "c_exact_tw": dict(tw="rounded", prod="f32", sum="seq", comb="f32"),
    "bc": dict(tw="exact", prod="exact", sum="seq", comb="f32"),
    "abc": dict(tw="rounded", prod="exact", sum="seq", comb="exact"),
    "ozaki_9x3": dict(tw="exact", prod="exact", sum="ozaki", comb="exact", beta=9, ns=3),
    "ozaki_9x3_engine_tw": dict(tw="engine", prod="exact", sum="ozaki", comb="exact", beta=9, ns=3),
    "ozaki_9x3_pairs": dict(tw="exact", prod="exact", sum="ozaki", comb="exact", beta=9, ns=3, inter="exact"),
    "ozaki_exact_sum": dict(tw="exact", prod="exact", sum="exact", comb="exact"),
}


def main(gdir, names):
    rows = {}
    for f in sorted(glob.glob(os.path.join(gdir, "cases", "_fft_*", "*.safetensors"))):
        t = load_file(f)
        if "oracle.0" not in t:
            continue
        with safe_open(f, "np") as h:
            meta = json.loads(h.metadata()["trnconf"])
        o = t["oracle.0"]
        cpu = ulps(t["output.0"], o).max()
        res = {}
        for nm in names:
            y = emulate(meta, t["input.0"], VARS[nm])
            res[nm] = ulps(y, o).max()
        rows[meta["id"]] = (cpu, res)
        print(
            f"{meta['id']:28s} cpu {cpu:8.1f} "
            + " ".join(f"{nm} {res[nm]:8.1f}({res[nm] / max(cpu, 1e-30):5.2f})" for nm in names),
            flush=True,
        )
    for nm in names:
        over = [i for i, (c, r) in rows.items() if r[nm] > 2 * c]
        print(nm, "over 2x:", len(over), over)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","))
