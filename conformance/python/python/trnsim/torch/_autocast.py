"""`torch.autocast("trnsim")`: PyTorch's CUDA autocast policy for the device.

PyTorch enables a device's autocast dispatch key (AutocastPrivateUse1 here) inside
`torch.autocast`, but registers kernels for it only for its own backends; without any, every op
under `torch.autocast("trnsim")` fails to dispatch. As PyTorch does for CUDA: every op falls
through, except the ops that run in the autocast dtype (matmuls and convolutions: floating
inputs cast to it) and those that run in float32 (reductions, softmaxes, norms, losses, the
transcendental functions: floating inputs cast up). The casts are ordinary device ops
(`_to_copy`), so they run on the engines like any other.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_map

from . import _device

_KEY = torch._C.DispatchKey.AutocastPrivateUse1

#: run in the autocast dtype (CUDA's `lower_precision_fp` list).
LOWER = [
    "conv1d",
    "conv1d.padding",
    "conv2d",
    "conv2d.padding",
    "conv3d",
    "conv3d.padding",
    "conv_tbc",
    "conv_transpose1d",
    "conv_transpose2d.input",
    "conv_transpose3d.input",
    "convolution",
    "_convolution",
    "prelu",
    "addmm",
    "addmv",
    "addr",
    "matmul",
    "einsum",
    "mm",
    "mv",
    "linear",
    "addbmm",
    "baddbmm",
    "bmm",
    "chain_matmul",
    "linalg_multi_dot",
    "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell",
    "lstm_cell",
    "gru_cell",
    "rnn_tanh_cell",
    "rnn_relu_cell",
    "scaled_dot_product_attention",
]
#: run in float32 (CUDA's `fp32` list, the functions PyTorch's docs name for CUDA autocast).
FP32 = [
    "acos",
    "asin",
    "cosh",
    "erfinv",
    "exp",
    "expm1",
    "log",
    "log10",
    "log2",
    "log1p",
    "reciprocal",
    "rsqrt",
    "sinh",
    "tan",
    "pow.Tensor_Scalar",
    "pow.Tensor_Tensor",
    "pow.Scalar",
    "softplus",
    "layer_norm",
    "native_layer_norm",
    "group_norm",
    "frobenius_norm.dim",
    "nuclear_norm",
    "cosine_similarity",
    "poisson_nll_loss",
    "cosine_embedding_loss",
    "nll_loss",
    "nll_loss2d",
    "hinge_embedding_loss",
    "kl_div",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "mse_loss",
    "margin_ranking_loss",
    "multilabel_margin_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
    "multi_margin_loss",
    "binary_cross_entropy_with_logits",
    "dist",
    "pdist",
    "cdist",
    "renorm",
    "logsumexp",
    "cumprod",
    "cumsum",
    "softmax.int",
    "log_softmax.int",
    "cross_entropy_loss",
    "norm.Scalar",
    "norm.ScalarOpt_dim",
    "prod",
    "prod.dim_int",
    "sum",
    "sum.dim_IntList",
]

_lib = None


def _cast(dtype: torch.dtype):
    def f(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != dtype and x.dtype != torch.float64:
            return x.to(dtype)
        return x

    return f


def _kernel(op, to_lower: bool):
    def k(*args, **kwargs):
        dtype = torch.get_autocast_dtype(_device.DEVICE_NAME) if to_lower else torch.float32
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_KEY)):
            args, kwargs = tree_map(_cast(dtype), (args, kwargs))
            return op(*args, **kwargs)

    return k


def register() -> None:
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("_", "IMPL")
    lib.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    aten_lib = torch.library.Library("aten", "IMPL")
    for names, lower in ((LOWER, True), (FP32, False)):
        for name in names:
            base, _, overload = name.partition(".")
            packet = getattr(torch.ops.aten, base, None)
            op = getattr(packet, overload or "default", None) if packet is not None else None
            if op is None:
                continue
            aten_lib.impl(name, _kernel(op, lower), "AutocastPrivateUse1")
    _lib = (lib, aten_lib)
