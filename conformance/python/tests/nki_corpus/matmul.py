"""Matrix multiplication C[M, N] = A[M, K] @ B[K, N] at four tiers, each taking A transposed
(`a_t` = A.T, [K, M]) as TensorE wants its stationary operand.

1. `matmul_basic`:   one tile, K <= 128, M <= 128, N <= 512.
2. `matmul_tiled`:   loops over M, N and K tiles; K accumulates in PSUM; loads inside the K loop.
3. `matmul_hoisted`: the same, with each B column block loaded once per N tile and A's row block
                     once per M tile (loads hoisted out of the inner loops).
4. `matmul_blocked`: B loaded once as blocks (K tiles in a block dim), several N tiles per M tile
                     accumulated in PSUM tiles with a block dim, stored in bf16.
"""

import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc import nki

TK = 128  # contraction tile (partitions)
TM = 128  # stationary free size
TN = 512  # moving free size (one PSUM bank of fp32)


@nki.jit
def matmul_basic(a_t, b):
    m = a_t.shape[1]
    _, n = b.shape
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    a_tile = nl.load(a_t)
    b_tile = nl.load(b)
    c_psum = nisa.nc_matmul(a_tile, b_tile)
    c_sbuf = nl.copy(c_psum, dtype=nl.float32)
    nl.store(out, value=c_sbuf)
    return out


@nki.jit
def matmul_tiled(a_t, b):
    k, m = a_t.shape
    _, n = b.shape
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    for mi in nl.affine_range(m // TM):
        for ni in nl.affine_range(n // TN):
            acc = nl.zeros((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(k // TK):
                a_tile = nl.load(a_t[ki * TK : (ki + 1) * TK, mi * TM : (mi + 1) * TM])
                b_tile = nl.load(b[ki * TK : (ki + 1) * TK, ni * TN : (ni + 1) * TN])
                acc += nl.matmul(a_tile, b_tile, transpose_x=True)
            c_tile = nl.copy(acc, dtype=out.dtype)
            nl.store(out[mi * TM : (mi + 1) * TM, ni * TN : (ni + 1) * TN], value=c_tile)
    return out


@nki.jit
def matmul_hoisted(a_t, b):
    k, m = a_t.shape
    _, n = b.shape
    kt = k // TK
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    i_k = nl.arange(TK)[:, None]
    i_m = nl.arange(TM)[None, :]
    i_n = nl.arange(TN)[None, :]
    for ni in nl.affine_range(n // TN):
        b_tiles = nl.ndarray((kt, nl.par_dim(TK), TN), dtype=b.dtype, buffer=nl.sbuf)
        for ki in nl.affine_range(kt):
            b_tiles[ki, i_k, i_n] = nl.load(b[ki * TK + i_k, ni * TN + i_n])
        for mi in nl.affine_range(m // TM):
            a_tiles = nl.ndarray((kt, nl.par_dim(TK), TM), dtype=a_t.dtype, buffer=nl.sbuf)
            for ki in nl.affine_range(kt):
                a_tiles[ki, i_k, i_m] = nl.load(a_t[ki * TK + i_k, mi * TM + i_m])
            acc = nl.zeros((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(kt):
                acc += nl.matmul(a_tiles[ki, i_k, i_m], b_tiles[ki, i_k, i_n], transpose_x=True)
            nl.store(out[mi * TM : (mi + 1) * TM, ni * TN : (ni + 1) * TN], value=nl.copy(acc))
    return out


@nki.jit
def matmul_blocked(a_t, b, n_block=2):
    """PSUM holds `n_block` accumulators ([TM, TN] fp32 each, one bank each) per M tile."""
    k, m = a_t.shape
    _, n = b.shape
    kt, nt = k // TK, n // TN
    out = nl.ndarray((m, n), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    for nb in nl.affine_range(nt // n_block):
        b_blk = nl.ndarray((kt, n_block, nl.par_dim(TK), TN), dtype=b.dtype, buffer=nl.sbuf)
        for ki in nl.affine_range(kt):
            for j in nl.affine_range(n_block):
                col = (nb * n_block + j) * TN
                b_blk[ki, j] = nl.load(b[ki * TK : (ki + 1) * TK, col : col + TN])
        for mi in nl.affine_range(m // TM):
            a_blk = nl.ndarray((kt, nl.par_dim(TK), TM), dtype=a_t.dtype, buffer=nl.sbuf)
            for ki in nl.affine_range(kt):
                a_blk[ki] = nl.load(a_t[ki * TK : (ki + 1) * TK, mi * TM : (mi + 1) * TM])
            acc = nl.zeros((n_block, nl.par_dim(TM), TN), dtype=nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(kt):
                for j in nl.affine_range(n_block):
                    acc[j] += nisa.nc_matmul(a_blk[ki], b_blk[ki, j])
            for j in nl.affine_range(n_block):
                col = (nb * n_block + j) * TN
                c_tile = nl.copy(acc[j], dtype=nl.bfloat16)
                nl.store(out[mi * TM : (mi + 1) * TM, col : col + TN], value=c_tile)
    return out
