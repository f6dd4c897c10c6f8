"""2-D average pooling of [C, H, W] (C <= 128 channels on partitions) with a square window and
stride equal to the window: a 5-D affine index expression loads the windows as [C, OH, OW, K, K]
and a reduction over the two trailing axes averages them."""

import neuronxcc.nki.language as nl
from neuronxcc import nki


@nki.jit
def avgpool2d(x, k):
    c, h, w = x.shape
    oh, ow = h // k, w // k
    out = nl.ndarray((c, oh, ow), dtype=x.dtype, buffer=nl.shared_hbm)
    i_c = nl.arange(c)[:, None, None, None, None]
    i_oh = nl.arange(oh)[None, :, None, None, None]
    i_ow = nl.arange(ow)[None, None, :, None, None]
    i_kh = nl.arange(k)[None, None, None, :, None]
    i_kw = nl.arange(k)[None, None, None, None, :]
    windows = nl.load(x[i_c, k * i_oh + i_kh, k * i_ow + i_kw])
    total = nl.sum(windows, axis=[3, 4], dtype=nl.float32)
    avg = nl.multiply(total, 1.0 / (k * k), dtype=x.dtype)
    nl.store(out, value=avg)
    return out


@nki.jit
def avgpool2d_window_axes(x, k):
    """The same pooling with the window axes interleaved, [C, OH, K, OW, K], reduced over axes 2 and
    4 (the reduction walks them innermost), on a whole-tensor load."""
    c, h, w = x.shape
    out = nl.ndarray((c, h // k, w // k), dtype=x.dtype, buffer=nl.shared_hbm)
    i_c, i_oh, i_kh, i_ow, i_kw = nl.mgrid[0:c, 0 : h // k, 0:k, 0 : w // k, 0:k]
    tile = nl.load(x)
    pooled = nl.sum(tile[i_c, k * i_oh + i_kh, k * i_ow + i_kw], axis=[2, 4]) / (k * k)
    nl.store(out, value=pooled)
    return out
