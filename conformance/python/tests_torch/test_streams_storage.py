"""Streams, events and storages on the `trnsim` device (what FSDP2 asks of a device), the
`_foreach_*` multi-tensor ops, and library ops that bring their own kernel."""

import pytest
import torch
import trnsim.torch

pytestmark = pytest.mark.usefixtures("fresh_device")


def dev(t):
    return t.to("trnsim")


# ---------------------------------------------------------------------------------------------
# streams and events


def test_the_device_module_has_streams_and_events():
    m = torch.trnsim
    s = m.Stream(priority=-1)
    assert s.priority == -1 and s.device == torch.device("trnsim", 0)
    assert s.device_type == int(torch._C._autograd.DeviceType.PrivateUse1) and s.device_index == 0
    assert m.current_stream() == m.default_stream() != s
    with m.stream(s):
        assert m.current_stream() == s
        with m.stream(None):  # a no-op, as on CUDA
            assert m.current_stream() == s
    assert m.current_stream() == m.default_stream()
    assert len({s, m.Stream(), s}) == 2  # hashable, equal by identity
    outer, inner = m.Stream(), m.Stream()
    with m.stream(outer):
        with m.stream(s):
            m.set_stream(inner)  # current until this block ends, which restores `outer`
            assert m.current_stream() == inner
        assert m.current_stream() == outer
    assert m.current_stream() == m.default_stream()
    e = m.Event()
    assert e.record() is None and e.query() and s.query()
    s.wait_event(e)
    s.wait_stream(m.current_stream())
    m.synchronize()


def test_programs_advance_their_streams_clock_and_waits_join_clocks():
    m = torch.trnsim
    x = dev(torch.randn(64, 64))
    side = m.Stream()
    start, mid, end = (m.Event(enable_timing=True) for _ in range(3))
    start.record()
    y = x @ x
    mid.record()
    main_busy = mid.time_ns - start.time_ns
    assert main_busy > 0, "a program on the current stream advances its clock"
    with m.stream(side):
        z = (x * 2).relu()
    assert side.busy_ns > 0 and side.programs >= 1
    # a new stream does not wait for the others: its work starts at its own time 0
    assert side.clock_ns == pytest.approx(side.busy_ns)
    # the default stream waits for the side stream: its clock is at least the side stream's
    m.current_stream().wait_stream(side)
    assert m.current_stream().clock_ns >= side.clock_ns
    end.record()
    assert start.elapsed_time(end) == pytest.approx((end.time_ns - start.time_ns) / 1e6)
    assert start.elapsed_time(mid) > 0
    with pytest.raises(RuntimeError, match="enable_timing"):
        m.Event().elapsed_time(end)
    torch.testing.assert_close(z.cpu(), (x.cpu() * 2).relu())
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu(), rtol=1e-4, atol=1e-4)


def test_the_report_shows_what_two_streams_overlapped():
    m = torch.trnsim
    x = dev(torch.randn(32, 128))
    a, b = m.Stream(), m.Stream()
    trnsim.torch.reset_report()
    with m.stream(a):
        (x @ x.T).sum()
    with m.stream(b):
        (x.exp() * 3).sum()
    r = trnsim.torch.report()["streams"]
    used = {s["stream_id"]: s for s in r["streams"]}
    assert a.stream_id in used and b.stream_id in used
    assert r["busy_us"] == pytest.approx(sum(s["busy_us"] for s in r["streams"]), abs=1e-2)
    # both streams started at their own clocks: the span is shorter than the busy sum
    assert r["span_us"] < r["busy_us"] and r["overlap_us"] > 0
    assert r["busy_us"] == pytest.approx(trnsim.torch.report()["est_device_time_us"], abs=1e-2)


# ---------------------------------------------------------------------------------------------
# storages


def test_untyped_storage_size_and_data_pointers_of_views():
    x = dev(torch.arange(12.0).reshape(3, 4))
    s = x.untyped_storage()
    assert s.size() == s.nbytes() == 48 and s.device == torch.device("trnsim", 0)
    v = x[1:, 2:]
    assert v.untyped_storage().data_ptr() == s.data_ptr() != 0
    assert v.data_ptr() == x.data_ptr() + (4 + 2) * 4
    y = dev(torch.zeros(3))
    assert y.data_ptr() != x.data_ptr() and abs(y.data_ptr() - x.data_ptr()) >= 48
    i64 = dev(torch.arange(5))
    assert i64.untyped_storage().size() == 5 * 8  # bytes of the PyTorch dtype, whatever the device holds


def test_resize_to_zero_frees_and_resize_back_allocates():
    x = dev(torch.arange(6.0))
    view = x[2:]
    st = x.untyped_storage()
    st.resize_(0)
    assert st.size() == 0 and view.untyped_storage().size() == 0 and x.data_ptr() == 0
    with pytest.raises(Exception, match="freed-storage"):
        (view + 1).cpu()
    st.resize_(24)
    assert st.size() == 24 and x.data_ptr() != 0
    x.copy_(dev(torch.arange(6.0) * 10))  # what FSDP2's all-gather does: write it all
    torch.testing.assert_close(view.cpu(), torch.arange(2.0, 6.0) * 10)


def test_other_resizes_are_refused():
    x = dev(torch.ones(4))
    with pytest.raises(RuntimeError, match="does not grow or shrink live contents"):
        x.untyped_storage().resize_(8)
    x.untyped_storage().resize_(0)
    with pytest.raises(RuntimeError, match="at its former size only"):
        x.untyped_storage().resize_(32)
    with pytest.raises(RuntimeError, match="at least 0"):
        x.untyped_storage().resize_(-1)


# ---------------------------------------------------------------------------------------------
# _foreach_* and library ops with their own kernels


def _pairs(n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(4, 5), (7,), (2, 3, 2)][:n]
    return [torch.randn(s, generator=g) for s in shapes], [torch.rand(s, generator=g) + 0.5 for s in shapes]


@pytest.mark.parametrize(
    "call",
    [
        lambda a, b: torch._foreach_add(a, b, alpha=-0.5),
        lambda a, b: torch._foreach_mul(a, 1.5),
        lambda a, b: torch._foreach_div(a, [2.0, 4.0, 8.0]),
        lambda a, b: torch._foreach_sqrt(b),
        lambda a, b: torch._foreach_maximum(a, b),
        lambda a, b: torch._foreach_norm(a),
        lambda a, b: torch._foreach_addcdiv(a, a, b, value=0.25),
        lambda a, b: torch._foreach_addcdiv(a, a, b, torch.tensor([0.5, -2.0, 3.0])),
        lambda a, b: torch._foreach_addcmul(a, b, b, torch.tensor([1.5, 0.25, -1.0])),
    ],
    ids=[
        "add.List",
        "mul.Scalar",
        "div.ScalarList",
        "sqrt",
        "maximum.List",
        "norm",
        "addcdiv.Scalar",
        "addcdiv.Tensor",
        "addcmul.Tensor",
    ],
)
def test_foreach_ops_match_the_cpu(call):
    a, b = _pairs()
    want = call(a, b)
    got = call([dev(t) for t in a], [dev(t) for t in b])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.device.type == "trnsim"
        torch.testing.assert_close(g.cpu(), w, rtol=1.3e-6, atol=1e-5)


def test_foreach_in_place_ops_update_every_tensor_on_the_engines():
    a, b = _pairs(seed=1)
    da, db = [dev(t) for t in a], [dev(t) for t in b]
    trnsim.torch.reset_report()
    torch._foreach_lerp_(da, db, 0.25)
    torch._foreach_addcmul_(da, db, db, value=2.0)
    for t, x, y in zip(da, a, b):
        torch.testing.assert_close(t.cpu(), torch.lerp(x, y, 0.25) + 2.0 * y * y, rtol=1e-5, atol=1e-5)
    rep = trnsim.torch.report()
    # one engine program (at least) per tensor and op: nothing ran on the host
    assert rep["device_programs"] >= 2 * len(a) and rep["fallback_count"] == 0, rep
    assert rep["ops"]["_foreach_lerp_.Scalar"]["decomposed"] == 1


def test_a_library_op_with_its_own_kernel_runs_that_kernel_on_the_device():
    lib = torch.library.Library("trnsim_test_ops", "FRAGMENT")
    lib.define("scaled_sum(Tensor[] xs, float k) -> Tensor")

    @torch.library.impl(lib, "scaled_sum", "CompositeExplicitAutograd")
    def _impl(xs, k):
        out = xs[0] * k
        for x in xs[1:]:
            out = out + x * k
        return out

    xs = [torch.randn(3, 4) for _ in range(3)]
    got = torch.ops.trnsim_test_ops.scaled_sum([dev(x) for x in xs], 0.5)
    assert got.device.type == "trnsim"
    torch.testing.assert_close(got.cpu(), sum(x * 0.5 for x in xs))
