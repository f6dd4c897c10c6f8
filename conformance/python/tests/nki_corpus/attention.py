"""Flash-attention-style forward for one head: O = softmax(Q K^T * scale) V over [S, D] inputs
(D <= 128), 128 query rows at a time, streaming 128-key blocks with a running row max, a running
row sum, and a rescaled output accumulator, so the [S, S] score matrix never exists."""

import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc import nki

BQ = 128
BK = 128


@nki.jit
def flash_fwd(q, k, v, scale):
    s_q, d = q.shape
    s_k, _ = k.shape
    out = nl.ndarray((s_q, d), dtype=q.dtype, buffer=nl.shared_hbm)
    for qi in nl.affine_range(s_q // BQ):
        q_t = nl.load_transpose2d(q[qi * BQ : (qi + 1) * BQ, 0:d])  # [d, BQ]: stationary
        run_max = nl.full((BQ, 1), -3.0e38, dtype=nl.float32)
        run_sum = nl.zeros((BQ, 1), dtype=nl.float32)
        acc = nl.zeros((BQ, d), dtype=nl.float32)
        for kj in nl.sequential_range(s_k // BK):
            k_t = nl.load_transpose2d(k[kj * BK : (kj + 1) * BK, 0:d])  # [d, BK]
            v_tile = nl.load(v[kj * BK : (kj + 1) * BK, 0:d], dtype=nl.bfloat16)  # [BK, d], as p
            scores = nisa.nc_matmul(q_t, k_t)  # [BQ, BK] fp32 in PSUM
            s = nl.multiply(scores, scale, dtype=nl.float32)
            blk_max = nl.max(s, axis=[1], keepdims=True)
            new_max = nl.maximum(run_max, blk_max)
            neg_max = nl.multiply(new_max, -1.0)
            blk_sum = nl.ndarray((BQ, 1), dtype=nl.float32, buffer=nl.sbuf)
            p = nisa.activation_reduce(nl.exp, s, bias=neg_max, reduce_op=nl.add, reduce_res=blk_sum, dtype=nl.bfloat16)
            alpha = nl.exp(nl.subtract(run_max, new_max))
            run_sum[...] = nl.add(nl.multiply(run_sum, alpha), blk_sum)
            p_t = nl.copy(nl.transpose(p))  # [BK, BQ] in SBUF
            pv = nl.matmul(p_t, v_tile, transpose_x=True)  # [BQ, d] fp32 in PSUM
            acc[...] = nl.add(nl.multiply(acc, alpha), pv)
            run_max[...] = new_max
        o = nl.multiply(acc, nl.reciprocal(run_sum), dtype=q.dtype)
        nl.store(out[qi * BQ : (qi + 1) * BQ, 0:d], value=o)
    return out
