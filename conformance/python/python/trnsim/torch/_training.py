"""What mixed-precision training asks of the device beyond the lowering (docs/torch-device.md,
"Mixed precision and fused optimizers").

* ``torch.amp.GradScaler(device)``: its two kernels, ``_amp_foreach_non_finite_check_and_unscale_``
  and ``_amp_update_scale_``, as lowered ops (PyTorch's CPU kernels' formulas). Its ``unscale_``
  computes the inverse scale as ``scale.double().reciprocal().float()``; the device has no float64,
  so for a scale on this device ``unscale_`` takes ``scale.reciprocal()`` in float32 instead, as
  PyTorch itself does on MPS. The device's reciprocal is correctly rounded (docs/numerics.md), and
  a correctly rounded float32 reciprocal equals the float64 one rounded to float32 for every
  float32 scale (double rounding is innocuous for division when the wider format has at least
  2p + 2 bits: 53 ≥ 2·24 + 2), so the inverse scale is bit-identical to PyTorch's.
* ``lerp`` with a number weight (Adam's and AdamW's first moment, ``exp_avg.lerp_(grad, 1 - beta1)``),
  float32: PyTorch's own decomposition (``torch._refs.lerp``) as three lowered ops instead of its
  nine (``new_full``, ``abs``, ``ge``, two ``where``, ``sub``, ``mul``, ``add``). The decomposition
  picks its coefficient and base with an element-wise ``where`` on a 0-d tensor holding the
  weight; the weight is an argument, so the choice is made once on the host, with the same float32
  arithmetic (``|w| >= 0.5``: ``w - 1`` and ``end``, else ``w`` and ``start``), and the engines
  compute ``coeff * (end - start) + base`` with the same roundings: the results are bit-identical
  to the decomposition's (tests_torch/test_value_ops.py). Other dtypes and a tensor weight take
  the decomposition.
* ``addcmul`` and ``addcdiv`` with a number ``value`` (the second moment and the update of Adam and
  AdamW), float32: the decomposition's ops (``self + value * tensor1 * tensor2``, ``/`` for
  ``addcdiv``, in that order) called directly, without its Python reference wrappers: the same
  three programs and bits, at less host cost.
* the fused optimizer kernels (``Adam(fused=True)``, ``AdamW``, ``SGD``, ``Adagrad``) are refused
  with an error that names the op, the call site and the workaround (``foreach=True``, which runs
  on the device's ``_foreach_*`` ops).
"""

from __future__ import annotations

import torch
from torch.amp.grad_scaler import OptState

from . import _device
from ._device import EXTRA_FORMS, UnsupportedOpError

aten = torch.ops.aten


def _non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    """Every tensor of ``grads`` times ``inv_scale`` in place; ``found_inf`` becomes 1 if any
    element of any of them is inf or NaN (PyTorch's kernel sets it and never clears it)."""
    for g in grads:
        if g.numel() == 0:
            continue
        bad = torch.logical_or(torch.isnan(g), torch.isinf(g)).any().to(found_inf.dtype)
        found_inf.copy_(torch.maximum(found_inf, bad))
        g.mul_(inv_scale.to(g.dtype) if g.dtype != inv_scale.dtype else inv_scale)


def _update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    """PyTorch's ``_amp_update_scale_``: on an inf, scale × backoff and the tracker to 0; else the
    tracker + 1, and at ``growth_interval`` the scale × growth (if finite) and the tracker to 0."""
    inf = found_inf > 0
    successful = growth_tracker + 1
    grown = scale * growth_factor
    grow = torch.logical_and(torch.logical_not(inf), successful == growth_interval)
    grow_ok = torch.logical_and(grow, torch.logical_not(torch.logical_or(torch.isnan(grown), torch.isinf(grown))))
    new_scale = torch.where(inf, scale * backoff_factor, torch.where(grow_ok, grown, scale))
    new_tracker = torch.where(torch.logical_or(inf, grow), torch.zeros_like(successful), successful)
    scale.copy_(new_scale)
    growth_tracker.copy_(new_tracker.to(growth_tracker.dtype))
    return scale


def _lerp_scalar(start, end, weight):
    """``lerp.Scalar`` (module docstring): three lowered ops for float32, else the decomposition."""
    if isinstance(end, torch.Tensor) and start.dtype != end.dtype:
        # PyTorch's own check (its kernel's; the decomposition would promote instead).
        raise RuntimeError(f"expected dtype {start.dtype} for `end` but got dtype {end.dtype}")
    fast = (
        isinstance(start, _device.TrnsimTensor)
        and isinstance(end, _device.TrnsimTensor)
        and start.dtype == end.dtype == torch.float32
        and isinstance(weight, (int, float))
        and not isinstance(weight, bool)
    )
    if not fast:
        return _device._decomposition(aten.lerp.Scalar)(start, end, weight)
    # The decomposition's `start.new_full((), weight)` and `where(|w| >= 0.5, w - 1, w)`, in
    # float32 on the host: a scalar argument, not data.
    w = torch.tensor(weight, dtype=torch.float32)
    coeff, base = (float(w - 1), end) if bool(w.abs() >= 0.5) else (float(w), start)
    return aten.add.Tensor(aten.mul.Tensor(aten.sub.Tensor(end, start), coeff), base)


EXTRA_FORMS[aten.lerp.Scalar] = _lerp_scalar


def _addc(name, combine):
    packet = getattr(aten, name)

    def form(self, tensor1, tensor2, *, value=1):
        """``addcmul``/``addcdiv`` (module docstring): the decomposition's ops for float32."""
        ts = (self, tensor1, tensor2)
        fast = (
            all(isinstance(t, _device.TrnsimTensor) and t.dtype == torch.float32 for t in ts)
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
        )
        if not fast:
            return _device._decomposition(packet.default)(self, tensor1, tensor2, value=value)
        return aten.add.Tensor(self, combine(aten.mul.Tensor(tensor1, value), tensor2))

    return form


EXTRA_FORMS[aten.addcmul.default] = _addc("addcmul", aten.mul.Tensor)
EXTRA_FORMS[aten.addcdiv.default] = _addc("addcdiv", aten.div.Tensor)


_FUSED = {
    "_fused_adam_": "Adam",
    "_fused_adamw_": "AdamW",
    "_fused_sgd_": "SGD",
    "_fused_adagrad_": "Adagrad",
}


def _refuse_fused(name):
    def refuse(*args, **kwargs):
        raise UnsupportedOpError(
            f"trnsim: aten::{name} (torch.optim.{_FUSED[name]}(fused=True)) is not supported on the "
            f"{_device.DEVICE_NAME} device: the device has no fused optimizer kernel; called from "
            f"{_device._call_site()}. Construct the optimizer with foreach=True instead (the same update as "
            f"_foreach_* ops, which run on the device), or leave fused unset."
        )

    return refuse


for _name in _FUSED:
    _packet = getattr(aten, _name)
    for _ov in _packet.overloads():
        EXTRA_FORMS[getattr(_packet, _ov)] = _refuse_fused(_name)

EXTRA_FORMS.update(
    {
        aten._amp_foreach_non_finite_check_and_unscale_.default: _non_finite_check_and_unscale_,
        aten._amp_update_scale_.default: _update_scale_,
    }
)


_pytorch_unscale_ = torch.amp.GradScaler.unscale_


def _unscale_(self, optimizer):
    scale = self._scale
    if not self._enabled or scale is None or scale.device.type != _device.DEVICE_NAME:
        return _pytorch_unscale_(self, optimizer)
    # PyTorch's `unscale_`, with the inverse scale in float32 (module docstring: bit-identical).
    self._check_scale_growth_tracker("unscale_")
    state = self._per_optimizer_states[id(optimizer)]
    if state["stage"] is OptState.UNSCALED:
        raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
    if state["stage"] is OptState.STEPPED:
        raise RuntimeError("unscale_() is being called after step().")
    inv_scale = scale.reciprocal()
    found_inf = torch.full((), 0.0, dtype=torch.float32, device=scale.device)
    state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, found_inf, False)
    state["stage"] = OptState.UNSCALED
    return None


_unscale_.__doc__ = _pytorch_unscale_.__doc__
torch.amp.GradScaler.unscale_ = _unscale_
