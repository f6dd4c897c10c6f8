"""Transposes.

* `transpose_free`: in[P, A*B] viewed as [P, A, B] -> out[P, B*A] viewed as [P, B, A]: a transpose
  of two free dims done by the access pattern of a copy (VectorE), as in NKI's transpose2d pattern.
* `transpose_pf`: a [P, F] block moved across the partition/free boundary with nl.transpose
  (TensorE, through PSUM), tile by tile over a larger matrix.
* `transpose_load`: the same through `nl.load_transpose2d` (a DMA with a transposed source).
"""

import neuronxcc.nki.language as nl
from neuronxcc import nki


@nki.jit
def transpose_free(x, a, b):
    p = x.shape[0]
    out = nl.ndarray((p, b * a), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(p)[:, None, None]
    i_a = nl.arange(a)[None, :, None]
    i_b = nl.arange(b)[None, None, :]
    src = nl.load(x[i_p, i_a * b + i_b])  # [p, a, b]
    dst = nl.ndarray((p, b, a), dtype=x.dtype, buffer=nl.sbuf)
    j_p = nl.arange(p)[:, None, None]
    j_b = nl.arange(b)[None, :, None]
    j_a = nl.arange(a)[None, None, :]
    dst[j_p, j_b, j_a] = nl.copy(src[j_p, j_a, j_b])
    nl.store(out[j_p, j_b * a + j_a], value=dst)
    return out


@nki.jit
def transpose_pf(x):
    rows, cols = x.shape
    out = nl.ndarray((cols, rows), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(rows // 128):
        for c in nl.affine_range(cols // 128):
            t = nl.load(x[r * 128 : (r + 1) * 128, c * 128 : (c + 1) * 128])
            t_psum = nl.transpose(t)
            nl.store(out[c * 128 : (c + 1) * 128, r * 128 : (r + 1) * 128], value=nl.copy(t_psum))
    return out


@nki.jit
def transpose_load(x):
    rows, cols = x.shape
    out = nl.ndarray((cols, rows), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(rows // 128):
        t = nl.load_transpose2d(x[r * 128 : (r + 1) * 128, 0:cols])
        nl.store(out[0:cols, r * 128 : (r + 1) * 128], value=t)
    return out
