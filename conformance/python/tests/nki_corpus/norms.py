"""RMSNorm and LayerNorm over the last dim of [N, D] (rows on partitions, 128 at a time)."""

import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc import nki


@nki.jit
def rmsnorm(x, w, eps=1e-6):
    """y = x / sqrt(mean(x^2) + eps) * w, w: [1, D] broadcast over rows."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_d = nl.arange(d)[None, :]
    w_tile = nl.load(w.reshape((1, d))[nl.arange(1)[:, None], i_d])
    w_bcast = w_tile.broadcast_to((128, d))
    for t in nl.affine_range((n + 127) // 128):
        rows = t * 128 + i_p
        x_tile = nl.load(x[rows, i_d], mask=(rows < n))
        sq = nl.square(x_tile)
        ssum = nl.sum(sq, axis=[1], keepdims=True)
        mean = ssum / d
        rstd = nl.rsqrt(mean + eps)
        y = nl.multiply(x_tile, rstd)
        y = nl.multiply(y, w_bcast)
        nl.store(out[rows, i_d], value=y, mask=(rows < n))
    return out


@nki.jit
def layernorm(x, gamma, beta, eps=1e-5):
    """Mean and variance from bn_stats / bn_aggr (VectorE), then (x - mean) * rstd * gamma + beta."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.load(gamma.reshape((1, d))).broadcast_to((128, d))
    b = nl.load(beta.reshape((1, d))).broadcast_to((128, d))
    chunk = min(d, nl.tile_size.bn_stats_fmax)
    nchunks = d // chunk
    for t in nl.affine_range(n // 128):
        x_tile = nl.load(x[t * 128 : (t + 1) * 128, :])
        stats = nl.ndarray((128, 6 * nchunks), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.affine_range(nchunks):
            stats[:, 6 * c : 6 * c + 6] = nisa.bn_stats(x_tile[:, c * chunk : (c + 1) * chunk])
        mv = nisa.bn_aggr(stats)
        mean = mv[:, 0:1]
        var = mv[:, 1:2]
        rstd = nl.rsqrt(var + eps)
        xc = nisa.tensor_scalar(x_tile, nl.subtract, mean, op1=nl.multiply, operand1=rstd)
        y = nl.add(nl.multiply(xc, g), b)
        nl.store(out[t * 128 : (t + 1) * 128, :], value=y)
    return out


@nki.jit
def layernorm_ragged(x, gamma, beta, eps=1e-5):
    """Any [N, D]: rows masked to N in the last row tile, and the last bn_stats chunk masked to D."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_d = nl.arange(d)[None, :]
    row0 = nl.arange(1)[:, None]
    g = nl.load(gamma.reshape((1, d))[row0, i_d]).broadcast_to((128, d))
    b = nl.load(beta.reshape((1, d))[row0, i_d]).broadcast_to((128, d))
    fmax = nl.tile_size.bn_stats_fmax
    i_c = nl.arange(fmax)[None, :]
    i_s = nl.arange(6)[None, :]
    nchunks = (d + fmax - 1) // fmax
    for t in nl.affine_range((n + 127) // 128):
        rows = t * 128 + i_p
        x_tile = nl.load(x[rows, i_d], mask=(rows < n))
        stats = nl.ndarray((128, 6 * nchunks), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.affine_range(nchunks):
            stats[i_p, 6 * c + i_s] = nisa.bn_stats(
                x_tile[i_p, c * fmax + i_c], mask=(c * fmax + i_c < d), dtype=nl.float32
            )
        mv = nisa.bn_aggr(stats)
        rstd = nl.rsqrt(mv[i_p, 1] + eps)
        y = nisa.tensor_scalar(data=x_tile, op0=nl.subtract, operand0=mv[i_p, 0], op1=nl.multiply, operand1=rstd)
        nl.store(out[rows, i_d], value=y * g + b, mask=(rows < n))
    return out
