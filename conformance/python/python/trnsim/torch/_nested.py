"""``nn.TransformerEncoder``'s nested-tensor fast path (eval, ``src_key_padding_mask``) on the device
(docs/torch-device.md, "TransformerEncoder with a padding mask").

In eval mode with a key padding mask PyTorch packs the valid tokens of each sequence into a nested
(jagged) tensor, runs the layers on it, and pads the result back with zeros
(``to_padded_tensor(0.0)``), then applies the final norm. A nested tensor cannot live on the
device (its tensors are strided wrappers). So when PyTorch takes that path on device inputs,
the device runs the same computation on the padded batch instead: the layers with the key
padding mask (every valid token attends only to valid keys, as in the nested run, and the
per-token layers see each valid token alone), the padded positions then set to 0 as
``to_padded_tensor(0.0)`` leaves them, then the final norm. The valid positions are the nested
path's values; the padded ones are its zeros (and the norm of zeros).

How: ``TransformerEncoder.forward`` is wrapped; PyTorch's own checks decide whether its nested
path applies (the device answers ``_nested_tensor_from_mask_left_aligned`` on the engines: one
counted sync for the boolean, as on CUDA), and its call of ``_nested_tensor_from_mask`` on a
device tensor, the point where it commits to the nested path, hands the call back to the
wrapper, which runs the padded form. Outside that wrapper ``_nested_tensor_from_mask`` is
refused as before.
"""

from __future__ import annotations

import threading

import torch

from . import _device
from ._device import EXTRA_FORMS, UnsupportedOpError
from ._sizes import read_counted

aten = torch.ops.aten

_LOCAL = threading.local()


class _NestedPath(Exception):
    """PyTorch committed to its nested fast path (raised inside the wrapper only)."""


def _left_aligned(x, mask):
    """``mask`` (True = a valid token, [B, S]) is True then False along each row."""
    if mask.dim() != 2 or mask.shape[1] < 2:
        return True
    m = mask.to(torch.int32)
    rising = (m[:, 1:] > m[:, :-1]).any()
    (bad,) = read_counted("_nested_tensor_from_mask_left_aligned", rising)
    return not bool(bad)


def _from_mask(x, mask, mask_check=True):
    if getattr(_LOCAL, "depth", 0):
        raise _NestedPath
    raise UnsupportedOpError(
        f"trnsim: aten::_nested_tensor_from_mask is not supported on the {_device.DEVICE_NAME} device "
        f"(nested tensors cannot live on it); called from {_device._call_site()}. nn.TransformerEncoder's "
        "use of it runs as a padded batch on the device; elsewhere, keep the padded tensor and its mask."
    )


EXTRA_FORMS.update(
    {
        aten._nested_tensor_from_mask_left_aligned.default: _left_aligned,
        aten._nested_tensor_from_mask.default: _from_mask,
    }
)

_pytorch_forward = torch.nn.TransformerEncoder.forward


def _forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
    if not _device.is_device_tensor(src) or src_key_padding_mask is None:
        return _pytorch_forward(self, src, mask, src_key_padding_mask, is_causal)
    _LOCAL.depth = getattr(_LOCAL, "depth", 0) + 1
    try:
        return _pytorch_forward(self, src, mask, src_key_padding_mask, is_causal)
    except _NestedPath:
        pass
    finally:
        _LOCAL.depth -= 1
    # PyTorch's nested path, as a padded batch: the layers with the key padding mask, padded
    # positions zeroed (to_padded_tensor(0.0)), then the final norm.
    norm, nested = self.norm, self.use_nested_tensor
    self.norm, self.use_nested_tensor = None, False
    try:
        out = _pytorch_forward(self, src, mask, src_key_padding_mask, is_causal)
    finally:
        self.norm, self.use_nested_tensor = norm, nested
    pad = src_key_padding_mask
    if pad.dtype != torch.bool:
        pad = pad != 0  # PyTorch's canonical float mask: -inf (any nonzero) marks padding
    batch_first = self.layers[0].self_attn.batch_first
    pad = pad.unsqueeze(-1) if batch_first else pad.t().unsqueeze(-1)
    out = out.masked_fill(pad, 0.0)
    return norm(out) if norm is not None else out


_forward.__doc__ = _pytorch_forward.__doc__
torch.nn.TransformerEncoder.forward = _forward
