"""Flash attention, forward and backward, for one head of dimension 128 (our own kernels, in the
legacy NKI style: keys and values loaded once into block tensors, queries in tiles of 128, an
online softmax over key blocks). The tiles every iteration allocates die at their last use, so
the kernels fit the live-range allocator (docs/nki-allocation.md) at sequence 4096: about 40 KiB
of SBUF and at most a few PSUM banks per partition are live at any instruction.

Layouts: `*_t` is the transposed tensor `[d, S]` (head dimension on partitions), which is what
TensorE needs as its stationary and moving operands for q·kᵀ.
"""

import math

import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
from neuronxcc import nki

QT = 128  # queries per tile: the partitions of a score tile
KB = 512  # keys per forward block: one PSUM bank of fp32 scores
NEG = -1.0e30  # the running max before any key (exp of it minus a real max is 0)


@nki.jit
def flash_fwd(q_t, k_t, v):
    """softmax(q kᵀ / sqrt(d)) v. q_t, k_t: [d, S]; v: [S, d]. Returns o [S, d] (v's dtype) and
    lse [S, 1] fp32, the log of each row's softmax denominator (with its max), for the backward."""
    d, s = q_t.shape
    scale = 1.0 / math.sqrt(d)
    o = nl.ndarray((s, d), dtype=v.dtype, buffer=nl.shared_hbm)
    lse = nl.ndarray((s, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    k_sb = nl.ndarray((s // KB, nl.par_dim(d), KB), dtype=k_t.dtype, buffer=nl.sbuf)
    v_sb = nl.ndarray((s // 128, nl.par_dim(128), d), dtype=v.dtype, buffer=nl.sbuf)
    for j in nl.affine_range(s // KB):
        k_sb[j] = nl.load(k_t[:, j * KB : (j + 1) * KB])
    for j in nl.affine_range(s // 128):
        v_sb[j] = nl.load(v[j * 128 : (j + 1) * 128, :])
    for i in nl.affine_range(s // QT):
        q_sb = nl.load(q_t[:, i * QT : (i + 1) * QT])
        m = nl.full((QT, 1), NEG, dtype=nl.float32)
        den = nl.zeros((QT, 1), dtype=nl.float32)
        acc = nl.zeros((QT, d), dtype=nl.float32)
        for j in nl.sequential_range(s // KB):
            sc = nisa.nc_matmul(q_sb, k_sb[j])  # [QT, KB] raw scores in PSUM
            bmax = nisa.tensor_reduce(np.max, sc, axis=(1,), keepdims=True)
            m_new = nl.maximum(m, nl.multiply(bmax, scale))
            neg_m = nl.multiply(m_new, -1.0)
            rowsum = nl.ndarray((QT, 1), dtype=nl.float32)
            p = nisa.activation(np.exp, sc, bias=neg_m, scale=scale, reduce_op=np.add, reduce_res=rowsum, dtype=v.dtype)
            corr = nisa.activation(np.exp, nl.subtract(m, m_new))
            den = nisa.scalar_tensor_tensor(data=den, op0=np.multiply, operand0=corr, op1=np.add, operand1=rowsum)
            pv = nl.zeros((QT, d), dtype=nl.float32, buffer=nl.psum)
            for c in nl.affine_range(KB // 128):
                p_t = nl.copy(nisa.nc_transpose(p[:, c * 128 : (c + 1) * 128]), dtype=v.dtype)  # [keys, QT]
                pv += nisa.nc_matmul(p_t, v_sb[j * (KB // 128) + c])
            acc = nisa.scalar_tensor_tensor(data=acc, op0=np.multiply, operand0=corr, op1=np.add, operand1=pv)
            m = m_new
        out = nisa.tensor_scalar(acc, np.multiply, nisa.reciprocal(den), dtype=v.dtype)
        nl.store(o[i * QT : (i + 1) * QT, :], out)
        nl.store(lse[i * QT : (i + 1) * QT, :], nl.add(m, nl.log(den)))
    return o, lse


@nki.jit
def flash_bwd(q, q_t, k, k_t, v_t, o, do, do_t, lse):
    """Gradients of o = softmax(q kᵀ / sqrt(d)) v: dq, dk, dv [S, d] fp32. Takes q, k, o, do as
    [S, d], q_t, k_t, v_t, do_t as [d, S] and the forward's lse [S, 1]. For each key tile j and
    query tile i: p = exp(s·scale − lse), dv_j += pᵀ do_i, dp = do_i v_jᵀ, ds = p (dp − D_i) with
    D_i = rowsum(do_i ∘ o_i), dk_j += dsᵀ q_i, dq_i += ds k_j; dq and dk take the scale."""
    s, d = q.shape
    nt = s // 128
    scale = 1.0 / math.sqrt(d)
    dq = nl.ndarray((s, d), dtype=nl.float32, buffer=nl.shared_hbm)
    dk = nl.ndarray((s, d), dtype=nl.float32, buffer=nl.shared_hbm)
    dv = nl.ndarray((s, d), dtype=nl.float32, buffer=nl.shared_hbm)
    q_sb = nl.ndarray((nt, nl.par_dim(128), d), dtype=q.dtype, buffer=nl.sbuf)
    do_sb = nl.ndarray((nt, nl.par_dim(128), d), dtype=do.dtype, buffer=nl.sbuf)
    qt_sb = nl.ndarray((nt, nl.par_dim(d), 128), dtype=q_t.dtype, buffer=nl.sbuf)
    dot_sb = nl.ndarray((nt, nl.par_dim(d), 128), dtype=do_t.dtype, buffer=nl.sbuf)
    neg_lse = nl.ndarray((nt, nl.par_dim(128), 1), dtype=nl.float32, buffer=nl.sbuf)
    dd = nl.ndarray((nt, nl.par_dim(128), 1), dtype=nl.float32, buffer=nl.sbuf)
    dq_acc = nl.ndarray((nt, nl.par_dim(128), d), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(nt):
        rows = slice(i * 128, (i + 1) * 128)
        q_sb[i] = nl.load(q[rows, :])
        do_sb[i] = nl.load(do[rows, :])
        qt_sb[i] = nl.load(q_t[:, rows])
        dot_sb[i] = nl.load(do_t[:, rows])
        neg_lse[i] = nl.multiply(nl.load(lse[rows, :]), -1.0)
        prod = nl.multiply(do_sb[i], nl.load(o[rows, :]), dtype=nl.float32)
        dd[i] = nl.sum(prod, axis=1, keepdims=True)
        dq_acc[i] = nl.zeros((128, d), dtype=nl.float32)
    for j in nl.affine_range(nt):
        cols = slice(j * 128, (j + 1) * 128)
        k_sb = nl.load(k[cols, :])
        kt_sb = nl.load(k_t[:, cols])
        vt_sb = nl.load(v_t[:, cols])
        dk_ps = nl.zeros((128, d), dtype=nl.float32, buffer=nl.psum)
        dv_ps = nl.zeros((128, d), dtype=nl.float32, buffer=nl.psum)
        for i in nl.affine_range(nt):
            sc = nisa.nc_matmul(qt_sb[i], kt_sb)  # [q, keys]
            p = nisa.activation(np.exp, sc, bias=neg_lse[i], scale=scale, dtype=q.dtype)
            dv_ps += nisa.nc_matmul(p, do_sb[i])  # pᵀ do: [keys, d]
            dp = nisa.nc_matmul(dot_sb[i], vt_sb)  # do vᵀ: [q, keys]
            ds = nisa.scalar_tensor_tensor(
                data=dp, op0=np.subtract, operand0=dd[i], op1=np.multiply, operand1=p, dtype=q.dtype
            )
            dk_ps += nisa.nc_matmul(ds, q_sb[i])  # dsᵀ q: [keys, d]
            ds_t = nl.copy(nisa.nc_transpose(ds), dtype=q.dtype)  # [keys, q]
            dq_acc[i] = nl.add(dq_acc[i], nisa.nc_matmul(ds_t, k_sb))  # ds k: [q, d]
        nl.store(dk[cols, :], nl.multiply(dk_ps, scale))
        nl.store(dv[cols, :], nl.copy(dv_ps))
    for i in nl.affine_range(nt):
        nl.store(dq[i * 128 : (i + 1) * 128, :], nl.multiply(dq_acc[i], scale))
    return dq, dk, dv


def reference(q, k, v, do=None):
    """NumPy float64 attention (q, k, v, do: [S, d]): o, lse and, with do, (dq, dk, dv)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[1])
    s = q @ k.T * scale
    mx = s.max(axis=1, keepdims=True)
    e = np.exp(s - mx)
    den = e.sum(axis=1, keepdims=True)
    p = e / den
    o = p @ v
    lse = mx + np.log(den)
    if do is None:
        return o, lse
    do = do.astype(np.float64)
    dv = p.T @ do
    dp = do @ v.T
    ds = p * (dp - (do * o).sum(axis=1, keepdims=True))
    return o, lse, (ds @ k * scale, ds.T @ q * scale, dv)
