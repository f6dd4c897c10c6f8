"""Antialiased resizing (``F.interpolate(..., antialias=True)``, bilinear and bicubic; torchvision's
``resize`` of tensors) on the device (docs/torch-device.md, "Antialiased interpolation").

PyTorch's CPU kernel is separable: a pass along the width, then one along the height, each output
element a weighted sum of a few input elements, with weights that depend only on the sizes, the
scale and ``align_corners``. So the op is two matrix products on the engines,
``out = A_h · (x · A_wᵀ)`` (the width first, as the CPU), with ``A_w`` ``[out_w, in_w]`` and
``A_h`` ``[out_h, in_h]`` the interpolation matrices. The matrices are metadata: the device takes
them from PyTorch's own CPU kernel applied to identity images (each column of an identity is one
input position, so the output is exactly that position's float32 weights), as a compiler would
fold constants that depend on shapes alone; no input value reaches the host. The backward is the
transposed products, ``grad_x = A_hᵀ · grad · A_w``. Float32 and the 16-bit floats (computed in
float32 and rounded once, as the CPU's accumulation is float32).
"""

from __future__ import annotations

import torch

from . import _device
from ._device import EXTRA_FORMS

aten = torch.ops.aten

_CACHE: dict[tuple, torch.Tensor] = {}


def _matrix(kernel, in_size: int, out_size: int, align_corners: bool, scale) -> torch.Tensor:
    """``[out_size, in_size]``: row i holds the weights of output position i (a device tensor)."""
    key = (kernel, in_size, out_size, align_corners, scale)
    m = _CACHE.get(key)
    if m is None:
        # in_size images of height in_size, each one input position set: the output's column j
        # is the weights every output position gives input position j. Width 2, columns equal
        # (the width pass 2 -> 2 is the identity): torch 2.15's CPU kernel gives a width-1 image
        # every row of its first output row.
        eye = torch.eye(in_size, dtype=torch.float32).reshape(1, in_size, in_size, 1).expand(1, in_size, in_size, 2)
        with _device._report.REPORT.paused():
            w = kernel(eye.contiguous(), [out_size, 2], align_corners, scale, None)  # [1, in, out, 2]
        host = w[..., 0].reshape(in_size, out_size).t().contiguous()
        m = _device.upload(host)
        if len(_CACHE) > 256:
            _CACHE.clear()
        _CACHE[key] = m
    return m


def _aa(kernel):
    def forward(x, output_size, align_corners, scales_h=None, scales_w=None):
        if x.dim() != 4:
            raise RuntimeError(f"{kernel.__name__}: expected a 4-D input, got {x.dim()}-D")
        n, c, h, w = x.shape
        oh, ow = output_size
        a_h = _matrix(kernel, h, oh, align_corners, scales_h)
        a_w = _matrix(kernel, w, ow, align_corners, scales_w)
        xf = x if x.dtype == torch.float32 else x.to(torch.float32)
        t = torch.matmul(xf.reshape(n * c, h, w), a_w.t())  # the width pass
        out = torch.matmul(a_h, t)  # then the height pass
        out = out.reshape(n, c, oh, ow)
        return out if x.dtype == torch.float32 else out.to(x.dtype)

    return forward


def _aa_backward(kernel):
    def backward(grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None):
        n, c, h, w = input_size
        oh, ow = output_size
        a_h = _matrix(kernel, h, oh, align_corners, scales_h)
        a_w = _matrix(kernel, w, ow, align_corners, scales_w)
        g = grad_output if grad_output.dtype == torch.float32 else grad_output.to(torch.float32)
        t = torch.matmul(a_h.t(), g.reshape(n * c, oh, ow))
        out = torch.matmul(t, a_w).reshape(n, c, h, w)
        return out if grad_output.dtype == torch.float32 else out.to(grad_output.dtype)

    return backward


_CPU_BILINEAR = torch.ops.aten._upsample_bilinear2d_aa.default
_CPU_BICUBIC = torch.ops.aten._upsample_bicubic2d_aa.default

EXTRA_FORMS.update(
    {
        aten._upsample_bilinear2d_aa.default: _aa(_CPU_BILINEAR),
        aten._upsample_bicubic2d_aa.default: _aa(_CPU_BICUBIC),
        aten._upsample_bilinear2d_aa_backward.default: _aa_backward(_CPU_BILINEAR),
        aten._upsample_bicubic2d_aa_backward.default: _aa_backward(_CPU_BICUBIC),
    }
)
