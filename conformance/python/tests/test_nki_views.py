"""Tensor views and index forms on the trnsim NKI front-end: 0-d tensors, `tensor.view` to a dtype
of another size, `reshape` of a view, index expressions of rank 3 and 4, and a DMA indexed by an
expression of an index tile. Each kernel is our own; results are checked against NumPy exactly
(the kernels only move bits or do exact integer / fp32 arithmetic)."""

import numpy as np
import trnsim
import trnsim.nki

trnsim.nki.install()

import neuronxcc.nki.language as nl
from neuronxcc import nki

R = np.random.default_rng(5)


def test_zero_dim_input_and_output():
    """A 0-d array goes in and comes out 0-d (the bindings used to ship it as shape [1])."""

    @nki.jit
    def scale(x):
        out = nl.ndarray((), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x.reshape((1, 1)))
        nl.store(out.reshape((1, 1)), value=nl.multiply(t, 3.0))
        return out

    x = np.array(1.5, np.float32)
    y = scale(x)
    assert y.shape == ()
    assert y == np.float32(4.5)
    # the bindings on their own: a 0-d input and output of trnsim.run
    kr = trnsim.nki.last_run()
    prog = trnsim.Program.from_json(kr.program_json())
    prog.infer_waits()
    res = trnsim.run(prog, {"x": x})
    (out,) = [h["name"] for h in kr.program["hbm"] if h["role"] == "output"]
    assert res.outputs[out].shape == () and res.outputs[out] == np.float32(4.5)
