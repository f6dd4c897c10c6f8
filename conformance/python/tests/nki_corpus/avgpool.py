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
