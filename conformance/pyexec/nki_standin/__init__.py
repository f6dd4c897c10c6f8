"""nki_standin: a numpy stand-in for the subset of the legacy `neuronxcc.nki` API (Neuron SDK
2.26-2.28) that trnconf's NKI emitter (conformance/src/emit_nki.rs) produces, with the numerics of
the trnsim simulator (fp32 math, round-to-nearest-even cast on write), so that an emitted kernel
run here reproduces the simulator's outputs bit for bit. It is not AWS's simulator.

    import nki_standin; nki_standin.install()   # registers neuronxcc, neuronxcc.nki{,.language,.isa}, nki{,.isa}
    python -m nki_standin KERNEL.py INPUTS.safetensors OUTPUTS.safetensors

See docs/hardware.md."""

import sys
import types

import numpy as np

from . import isa, isa_current, language
from . import numerics as _nm

__all__ = ["install", "jit", "baremetal", "simulate_kernel", "language", "isa"]


def _to_tensor(x):
    if isinstance(x, language.Tensor):
        return x
    a = np.asarray(x)
    by_np = {
        np.dtype(np.float32): _nm.float32,
        np.dtype(np.float16): _nm.float16,
        np.dtype(np.int32): _nm.int32,
        np.dtype(np.int16): _nm.int16,
        np.dtype(np.int8): _nm.int8,
        np.dtype(np.uint8): _nm.uint8,
        np.dtype(np.uint16): _nm.uint16,
        np.dtype(np.uint32): _nm.uint32,
        np.dtype(np.bool_): _nm.bool_,
    }
    dt = by_np.get(a.dtype)
    if dt is None:
        raise TypeError(f"numpy dtype {a.dtype} is not accepted; pass an nki_standin Tensor (e.g. for bf16)")
    return language.Tensor(a.shape, dt, language.shared_hbm, np.ascontiguousarray(a).view(dt.storage).copy())


def jit(func=None, mode="auto", **_kw):
    """`@nki.jit`: calling the kernel resets the engine state and runs it on Tensors (numpy
    arrays are wrapped)."""
    if func is None:
        return lambda f: jit(f, mode=mode)

    def run(*args, **kwargs):
        isa.reset_state()
        return func(*[_to_tensor(a) for a in args], **kwargs)

    run.__wrapped__ = func
    run.__name__ = getattr(func, "__name__", "kernel")
    return run


def baremetal(kernel=None, **_kw):
    if kernel is None:
        return lambda k: baremetal(k)
    return kernel if hasattr(kernel, "__wrapped__") else jit(kernel)


def simulate_kernel(kernel, *args, **kwargs):
    return baremetal(kernel)(*args, **kwargs)


def install():
    """Makes `import neuronxcc.nki`, `neuronxcc.nki.language` and `neuronxcc.nki.isa` resolve to
    the stand-in, and `nki.isa` (the current namespace, whose `rng` emitted kernels call) too."""
    nki = types.ModuleType("neuronxcc.nki")
    nki.jit = jit
    nki.baremetal = baremetal
    nki.simulate_kernel = simulate_kernel
    nki.language = language
    nki.isa = isa
    nki.__standin__ = True
    root = types.ModuleType("neuronxcc")
    root.nki = nki
    sys.modules["neuronxcc"] = root
    sys.modules["neuronxcc.nki"] = nki
    sys.modules["neuronxcc.nki.language"] = language
    sys.modules["neuronxcc.nki.isa"] = isa
    current = types.ModuleType("nki")
    current.__path__ = []
    current.isa = isa_current
    current.language = language
    sys.modules["nki"] = current
    sys.modules["nki.isa"] = isa_current
    sys.modules["nki.language"] = language
