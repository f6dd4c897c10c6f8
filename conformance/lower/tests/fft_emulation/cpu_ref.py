# ruff: noqa: E741
import numpy as np
import torch

M = 2**64


def inputs(n, seed):
    s = seed
    out = []
    for _ in range(n):
        s = (s * 6364136223846793005 + 1442695040888963407) % M
        out.append(np.float32((s >> 40) / (1 << 24) * 18.0 - 9.0))
    return np.array(out, dtype=np.float32)


def ulps(y, o):
    a = np.abs(o)
    a = np.where(a < 2.0**-126, 2.0**-126, a)
    return np.abs(y - o) / 2.0 ** (np.floor(np.log2(a)) - 23)


def dft(x, h):
    n = x.shape[-1]
    l = np.arange(n)[:, None]
    k = np.arange(h)[None, :]
    m = (l * k) % n
    t = 2 * np.pi * m / n
    c = np.where((4 * m == n) | (4 * m == 3 * n), 0.0, np.cos(t))
    s = np.where((m == 0) | (2 * m == n), 0.0, np.sin(t))
    return x.astype(np.float64) @ c, -(x.astype(np.float64) @ s)


for b, n, seed in [(2, 1000, 2126), (4, 7, 2126), (4, 16, 2126), (3, 100, 2127)]:
    x = inputs(b * n, seed).reshape(b, n)
    h = n // 2 + 1
    re, im = dft(x, h)
    y = torch.fft.rfft(torch.from_numpy(x)).numpy()
    u = np.maximum(ulps(y.real.astype(np.float64), re), ulps(y.imag.astype(np.float64), im))
    # exact-zero imaginary parts (DC, Nyquist) are zero in both
    print(b, n, seed, "cpu max ulp", u.max())
