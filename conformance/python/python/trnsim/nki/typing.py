"""`neuronxcc.nki.typing`: kernel parameter annotations. `nt.tensor[shape, dtype]` is checked
against the argument when the kernel is traced; `nt.mutable_tensor` marks a parameter the kernel
may write (trnsim lets any parameter be written and returns its new value in place)."""

import numpy as np


class _TensorType:
    def __init__(self, name, shape=None, dtype=None):
        self.name, self.shape, self.dtype = name, shape, dtype

    def __getitem__(self, spec):
        if not isinstance(spec, tuple):
            spec = (spec,)
        shape = spec[0] if spec and isinstance(spec[0], (tuple, list)) else None
        dtype = spec[-1] if spec and not isinstance(spec[-1], (tuple, list)) else None
        return _TensorType(self.name, tuple(shape) if shape is not None else None, dtype)

    def __repr__(self):
        return f"nt.{self.name}[{self.shape}, {self.dtype}]"

    def check(self, value):
        if self.shape is not None and tuple(value.shape) != tuple(self.shape):
            return False
        return self.dtype is None or np.dtype(value.dtype) == np.dtype(self.dtype)


tensor = _TensorType("tensor")
mutable_tensor = _TensorType("mutable_tensor")


def scalar(dtype=None):
    return _TensorType("scalar", (), dtype)
