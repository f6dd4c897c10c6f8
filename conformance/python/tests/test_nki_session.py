"""NKI kernels on a device session: two kernel runs in a row keep their tensors in simulated HBM,
with no copy to or from the host between them."""

import numpy as np
import trnsim
import trnsim.nki

trnsim.nki.install()

import neuronxcc.nki.language as nl
from neuronxcc import nki


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b)))
    return out


@nki.jit
def scale_kernel(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.load(x), 3.0))
    return out


def test_two_kernel_runs_stay_on_the_device():
    r = np.random.default_rng(0)
    a = r.standard_normal((128, 256)).astype(np.float32)
    b = r.standard_normal((128, 256)).astype(np.float32)
    s = trnsim.Session()
    s.put("a", a)
    s.put("b", b)
    h = add_kernel(trnsim.nki.device(s, "a"), trnsim.nki.device(s, "b"))
    assert isinstance(h, trnsim.nki.DeviceTensor) and h.name in s
    y = scale_kernel(h)
    t = s.transfers()
    assert t["host_to_device_bytes"] == a.nbytes + b.nbytes  # the two puts, nothing more
    assert t["device_to_host_bytes"] == 0 and t["runs"] == 2
    got = s.get(y.name)
    np.testing.assert_array_equal(got, (a + b) * np.float32(3))
    assert s.transfers()["device_to_host_bytes"] == got.nbytes


def test_written_parameter_is_updated_in_the_session():
    @nki.jit
    def accumulate(acc, upd):
        nl.atomic_rmw(acc, value=nl.load(upd), op=np.add)
        return acc

    a = np.ones((128, 16), np.float32)
    s = trnsim.Session()
    s.put("acc", a)
    s.put("u", 2 * a)
    out = accumulate(trnsim.nki.device(s, "acc"), trnsim.nki.device(s, "u"))
    assert out.name == "acc"
    np.testing.assert_array_equal(s.get("acc"), 3 * a)
