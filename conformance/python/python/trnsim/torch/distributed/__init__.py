"""`trnsim.torch.distributed`: torch.distributed on the trnsim device (docs/distributed.md).

Importing it (``import trnsim.torch`` does) registers the c10d backend ``trnsim`` for the device
(and under the device's name when it is installed as ``neuron``)::

    dist.init_process_group("trnsim")          # under torchrun
    model = DDP(model.to("trnsim"))

Every collective runs the Trainium algorithm its size selects (trnsim.collectives), its combines
on each rank's simulated engines. :func:`report` lists each collective's bytes, algorithm and
estimated time; :func:`project` projects step time and scaling to larger systems.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import _backend, _functional, _record
from ._backend import DistributedError, TrnsimBackend
from ._project import Projection, project

__all__ = ["DistributedError", "Projection", "TrnsimBackend", "project", "register", "report", "reset_report"]

_registered: set[str] = set()


def register(name: str | None = None) -> None:
    """Registers the backend for the device (PrivateUse1) under ``trnsim`` and the device's name."""
    device = torch._C._get_privateuse1_backend_name()
    for n in {"trnsim", name or device}:
        if n in _registered or n.upper() in dist.Backend._plugins:
            _registered.add(n)
            continue
        dist.Backend.register_backend(n, _backend.create, devices=[device])
        _registered.add(n)


def dispatch(func, args, kwargs):
    """The device's hook for ``c10d::`` and ``_c10d_functional::`` ops on its tensors."""
    if func.namespace == "c10d":
        return _backend.redispatch(func, args, kwargs)
    return _functional.run(func, args, kwargs)


def report() -> dict:
    """The collectives this process ran: per collective, bytes, algorithm, estimated time."""
    return {**_record.summary(), "log": _record.log()}


def reset_report() -> None:
    _record.reset()


def _section():
    s = _record.summary()
    return s if s["calls"] else None


from .. import _report

_report.SECTIONS["collectives"] = _section
_report.RESETS.append(_record.reset)
