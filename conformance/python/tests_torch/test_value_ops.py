"""Ops outside Core ATen that the `trnsim` device runs as compositions of lowered ops, against
the CPU: value-dependent sizes (masked_select, bincount, repeat_interleave, unique), ordering
(stable sort, median, kthvalue, searchsorted, histc), and what training scripts call (fused
optimizers, GradScaler). Each checks that the engines computed it: compute-engine instructions
in the op's programs, no fallback, and no device -> host read but the counted syncs."""

import copy
import math

import pytest
import torch
import trnsim.torch

D = "trnsim"


pytestmark = pytest.mark.usefixtures("fresh_device")


def dev(t):
    return t.to(D) if isinstance(t, torch.Tensor) else t


def on_engines(fn, *args, syncs=None, compute=True, **kwargs):
    """``fn(*args)`` on the device (args moved first), checked to have run on the engines: the
    programs it ran hold compute-engine (not only DMA) instructions, nothing fell back to the
    CPU, and the host read nothing from the device but the counted syncs (``syncs`` of them).
    ``compute=False`` for an empty input, where there is nothing to compute."""
    dargs = [dev(a) for a in args]
    trnsim.torch.reset_report()
    out = fn(*dargs, **kwargs)
    rep = trnsim.torch.report()
    assert rep["fallback_count"] == 0 and not rep["unsupported"], rep
    engines: dict[str, int] = {}
    for entry in rep["ops"].values():
        for engine, n in entry.get("engines", {}).items():
            engines[engine] = engines.get(engine, 0) + n
    if compute:
        assert sum(n for e, n in engines.items() if e != "dma") > 0, f"no compute-engine instruction ran: {engines}"
    assert rep["transfers"].get("device_to_host", 0) == rep["sync_count"], rep
    if syncs is not None:
        assert rep["sync_count"] == syncs, rep["syncs"]
    return out


def same(got, want, **tol):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.device.type == D
        torch.testing.assert_close(g.cpu(), w, equal_nan=True, **tol)


# ---------------------------------------------------------------------------------------------
# value-dependent sizes: one counted sync each


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32])
@pytest.mark.parametrize(
    "shape,mask_shape",
    [((6, 5), (6, 5)), ((6, 5), (5,)), ((3, 1, 4), (2, 1)), ((0, 3), (0, 3)), ((), ())],
)
def test_masked_select(dtype, shape, mask_shape):
    g = torch.Generator().manual_seed(len(shape) * 7 + len(mask_shape))
    x = (torch.randn(shape, generator=g) * 10).to(dtype)
    mask = torch.rand(mask_shape, generator=g) > 0.5
    n = torch.broadcast_shapes(x.shape, mask.shape).numel()
    got = on_engines(torch.masked_select, x, mask, syncs=1 if n else 0, compute=n > 0)
    same(got, torch.masked_select(x, mask))


@pytest.mark.parametrize("fill", [False, True])
def test_masked_select_all_false_and_all_true(fill):
    x = torch.arange(12.0).reshape(3, 4)
    mask = torch.full((3, 4), fill)
    same(on_engines(torch.masked_select, x, mask, syncs=1), torch.masked_select(x, mask))


@pytest.mark.parametrize(
    "values,minlength",
    [([0, 1, 1, 3, 7], 0), ([5, 5, 5], 2), ([2], 10), ([], 0), ([], 4), (list(range(40)) * 3, 0)],
)
@pytest.mark.parametrize("weighted", [False, True])
def test_bincount(values, minlength, weighted):
    x = torch.tensor(values, dtype=torch.int64)
    w = torch.rand(len(values), generator=torch.Generator().manual_seed(len(values))) if weighted else None
    got = on_engines(
        lambda a, b: torch.bincount(a, b, minlength=minlength), x, w, syncs=1 if values else 0, compute=bool(values)
    )
    same(got, torch.bincount(x, w, minlength=minlength), rtol=1e-6, atol=1e-6)


def test_bincount_refuses_negative_values_and_float64_counts():
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(dev(torch.tensor([1, -1, 2])))
    # float16 weights count in float64 on the CPU: the device's dtype policy refuses that
    with pytest.raises(trnsim.torch.DtypeError, match="float64"):
        torch.bincount(dev(torch.tensor([1, 2])), dev(torch.ones(2, dtype=torch.float16)))


@pytest.mark.parametrize("repeats", [[1, 0, 2, 1, 1, 3], [0, 0, 0, 0, 0, 0], [3, 3, 3, 3, 3, 3], [0, 5, 0, 0, 0, 1]])
@pytest.mark.parametrize("dim", [0, None])
def test_repeat_interleave_with_a_tensor(repeats, dim):
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(3))
    if dim is None:
        x = x[:, 0]
    r = torch.tensor(repeats)
    got = on_engines(lambda a, b: torch.repeat_interleave(a, b, dim=dim), x, r, syncs=1)
    same(got, torch.repeat_interleave(x, r, dim=dim))
    # the index form, and output_size= (no sync: the size is given)
    same(on_engines(torch.repeat_interleave, r, syncs=1), torch.repeat_interleave(r))
    size = sum(repeats)
    got = on_engines(lambda b: torch.repeat_interleave(b, output_size=size), r, syncs=0)
    same(got, torch.repeat_interleave(r))


def test_repeat_interleave_refuses_negative_repeats():
    with pytest.raises(RuntimeError, match="negative"):
        torch.repeat_interleave(dev(torch.tensor([1, -2, 3])))


UNIQUE_INPUTS = [
    torch.tensor([[3, 1], [1, 2]]),
    torch.tensor([3.0, 1, 1, 2, -1, 3, 0.5, 0.5]),
    torch.tensor([7, 7, 7, 7]),
    torch.tensor([True, False, True]),
    torch.randint(-5, 5, (4, 6, 3), generator=torch.Generator().manual_seed(1)),
    torch.randn(50, generator=torch.Generator().manual_seed(2)).round().to(torch.bfloat16),
    torch.tensor([], dtype=torch.int64),
]


@pytest.mark.parametrize("x", UNIQUE_INPUTS, ids=lambda t: f"{t.dtype}-{list(t.shape)}")
@pytest.mark.parametrize("inverse,counts", [(False, False), (True, False), (True, True), (False, True)])
def test_unique_sorted(x, inverse, counts):
    got = on_engines(
        lambda a: torch.unique(a, sorted=True, return_inverse=inverse, return_counts=counts),
        x,
        syncs=1 if x.numel() else 0,
        compute=x.numel() > 0,
    )
    same(got, torch.unique(x, sorted=True, return_inverse=inverse, return_counts=counts))


def test_unique_unsorted_has_the_same_elements():
    x = torch.tensor([5, 3, 5, 1, 3])
    got = on_engines(lambda a: torch.unique(a, sorted=False), x, syncs=1).cpu()
    assert sorted(got.tolist()) == sorted(torch.unique(x, sorted=False).tolist())


@pytest.mark.parametrize(
    "x",
    [
        torch.tensor([3, 1, 1, 2, 2, 2, 3]),
        torch.tensor([[1.0, 1.0], [1.0, 4.0]]),
        torch.tensor([2, 2, 2]),
        torch.tensor([], dtype=torch.float32),
    ],
    ids=lambda t: f"{t.dtype}-{list(t.shape)}",
)
def test_unique_consecutive(x):
    kw = {"return_inverse": True, "return_counts": True}
    n = x.numel()
    got = on_engines(lambda a: torch.unique_consecutive(a, **kw), x, syncs=1 if n else 0, compute=n > 0)
    same(got, torch.unique_consecutive(x, **kw))


# ---------------------------------------------------------------------------------------------
# ordering: stable sort, order statistics, searchsorted, histc (no sync)


def _ties(shape, dtype, seed, nan=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 4, shape, generator=g).to(dtype)
    if nan:
        x.view(-1)[::5] = float("nan")
    return x


@pytest.mark.parametrize("shape,dim", [((40,), 0), ((3, 130), 1), ((17, 6), 0), ((2, 3, 300), -1), ((1,), 0)])
@pytest.mark.parametrize(
    "dtype,nan", [(torch.float32, False), (torch.float32, True), (torch.bfloat16, False), (torch.int64, False)]
)
@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_keeps_ties_in_input_order(shape, dim, dtype, nan, descending):
    x = _ties(shape, dtype, seed=len(shape) + shape[-1], nan=nan)
    got = on_engines(lambda a: torch.sort(a, dim=dim, descending=descending, stable=True), x, syncs=0)
    # exact indices: with ties, only the stable order is right
    same(got, torch.sort(x, dim=dim, descending=descending, stable=True))
    got = on_engines(lambda a: torch.argsort(a, dim=dim, descending=descending, stable=True), x, syncs=0)
    same(got, torch.argsort(x, dim=dim, descending=descending, stable=True))


@pytest.mark.parametrize("shape,dim", [((9,), 0), ((4, 7), 1), ((6, 5), 0), ((2, 3, 8), -1), ((), 0)])
@pytest.mark.parametrize("dtype,nan", [(torch.float32, False), (torch.float32, True), (torch.int64, False)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_median_nanmedian_kthvalue(shape, dim, dtype, nan, keepdim):
    x = _ties(shape, dtype, seed=sum(shape) + 1, nan=nan) if shape else torch.tensor(2.5).to(dtype)
    n = x.shape[dim] if x.dim() else 1
    for op in (torch.median, torch.nanmedian):
        got = on_engines(lambda a, op=op: op(a, dim, keepdim=keepdim), x, syncs=0)
        want = op(x, dim, keepdim=keepdim)
        same(got[0], want[0])
        # the index: of an element holding the value (PyTorch's CPU picks among ties by its own
        # selection algorithm), and where the value is a NaN, the CPU's own index
        v = got[0].cpu()
        idx = got[1].cpu()
        base = x if x.dim() else x.reshape(1)
        held = torch.gather(base, dim, idx if keepdim or not x.dim() else idx.unsqueeze(dim)).reshape(v.shape)
        torch.testing.assert_close(held, v, equal_nan=True)
        if dtype.is_floating_point and nan and op is torch.median:
            # median's NaN is the lane's first in input order (nanmedian's index of an all-NaN
            # lane is whatever the CPU's selection leaves there: not compared)
            assert torch.equal(idx[v.isnan()], want[1][v.isnan()])
    for k in sorted({1, (n + 1) // 2, n}):
        got = on_engines(lambda a, k=k: torch.kthvalue(a, k, dim, keepdim=keepdim), x, syncs=0)
        want = torch.kthvalue(x, k, dim, keepdim=keepdim)
        same(got[0], want[0])
    same(on_engines(torch.median, x, syncs=0), torch.median(x))
    same(on_engines(torch.nanmedian, x, syncs=0), torch.nanmedian(x))


def test_nanmedian_of_all_nan_rows_and_kthvalue_out_of_range():
    x = torch.tensor([[float("nan")] * 3, [1.0, float("nan"), 0.0]])
    same(on_engines(lambda a: torch.nanmedian(a, 1), x), torch.nanmedian(x, 1))
    with pytest.raises(RuntimeError, match="out of range"):
        torch.kthvalue(dev(x), 4, 1)


@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("out_int32", [False, True])
@pytest.mark.parametrize(
    "seq,vals",
    [
        (torch.tensor([1.0, 2.0, 2.0, 3.0, 5.0]), torch.tensor([[-9.0, 1.0, 2.0], [2.5, 5.0, 99.0]])),
        (
            torch.tensor([[0.0, 1, 1, 4], [-3, -2, 0, 0]]),
            torch.tensor([[1.0, -1, 4, 9, float("nan")], [0, -3, -2.5, 7, 0]]),
        ),
        (torch.arange(50), torch.tensor([-1, 0, 25, 49, 50, 1000])),
        (torch.tensor([1.0, 2.0]), torch.tensor([float("inf"), float("-inf"), float("nan")])),
        (torch.tensor([0.5, 1.5]), torch.tensor([], dtype=torch.float32)),
    ],
)
def test_searchsorted_and_bucketize(seq, vals, right, out_int32):
    kw = {"right": right, "out_int32": out_int32}
    compute = vals.numel() > 0
    got = on_engines(lambda s, v: torch.searchsorted(s, v, **kw), seq, vals, syncs=0, compute=compute)
    same(got, torch.searchsorted(seq, vals, **kw))
    side = "right" if right else "left"
    got = on_engines(lambda s, v: torch.searchsorted(s, v, side=side), seq, vals, syncs=0, compute=compute)
    same(got, torch.searchsorted(seq, vals, side=side))
    if seq.dim() == 1:
        same(
            on_engines(lambda s, v: torch.bucketize(v, s, **kw), seq, vals, compute=compute),
            torch.bucketize(vals, seq, **kw),
        )
        same(on_engines(lambda s: torch.searchsorted(s, 2, **kw), seq), torch.searchsorted(seq, 2, **kw))


def test_searchsorted_with_a_sorter():
    seq = torch.tensor([5.0, 1.0, 3.0, 3.0, 0.0])
    sorter = torch.argsort(seq, stable=True)
    vals = torch.tensor([3.0, 4.0, -1.0, 6.0])
    got = on_engines(lambda s, v, o: torch.searchsorted(s, v, sorter=o), seq, vals, sorter, syncs=0)
    same(got, torch.searchsorted(seq, vals, sorter=sorter))


@pytest.mark.parametrize(
    "bins,lo,hi", [(4, -1.0, 1.0), (10, 0.0, 0.0), (1, -2.0, 2.0), (7, 0.25, 0.75), (100, -3.0, 3.0)]
)
@pytest.mark.parametrize("shape", [(6, 5), (1000,), (0,), (1,)])
def test_histc(bins, lo, hi, shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(bins))
    if x.numel() > 4:
        # the edges themselves, values beyond them and a NaN
        x.view(-1)[:4] = torch.tensor([lo, hi, hi + 1.0, float("nan")])
    got = on_engines(lambda a: torch.histc(a, bins=bins, min=lo, max=hi), x, syncs=0, compute=x.numel() > 0)
    if x.numel() > 4 and lo == hi:
        x = x[~x.isnan()]  # the CPU's own range inference refuses a NaN (its min/max are NaN)
        got = on_engines(lambda a: torch.histc(a, bins=bins, min=lo, max=hi), x, syncs=0)
    same(got, torch.histc(x, bins=bins, min=lo, max=hi))


def test_histc_bins_on_boundaries_like_the_cpu():
    # values whose bin the CPU's division puts on either side of an edge
    edges = torch.linspace(-1, 1, 33)
    x = torch.cat([edges, torch.nextafter(edges, torch.tensor(2.0)), torch.nextafter(edges, torch.tensor(-2.0))])
    for bins in (3, 7, 32, 100):
        same(
            on_engines(lambda a, bins=bins: torch.histc(a, bins=bins, min=-1, max=1), x),
            torch.histc(x, bins=bins, min=-1, max=1),
        )


# ---------------------------------------------------------------------------------------------
# training: GradScaler with fp16 autocast, fused optimizers


def _scaled_training(device, init_scale, steps=5, inf_step=2):
    import copy

    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(5, 8, generator=g), torch.randn(5, 4, generator=g)) for _ in range(steps)]
    model = copy.deepcopy(base).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(device, init_scale=init_scale, growth_interval=2)
    losses, scales = [], []
    for i, (x, y) in enumerate(data):
        x, y = x.to(device), y.to(device)
        if i == inf_step:
            x = x * float("inf")  # an overflowing step: skipped, the scale backs off
        with torch.autocast(device, dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        grads = [p.grad.detach().cpu().clone() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
        scales.append(scaler.get_scale())
    return losses, scales, grads, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("init_scale", [2.0**16, 3.0])
def test_grad_scaler_with_fp16_autocast_trains_as_on_the_cpu(init_scale):
    got = _scaled_training(D, init_scale)
    want = _scaled_training("cpu", init_scale)
    assert got[1] == want[1]  # the same steps skipped, the same scale after each
    for a, b in zip(got[0], want[0]):
        assert (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-5 * abs(b), (got[0], want[0])
    for a, b in zip(got[2], want[2]):  # the last step's unscaled gradients
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(got[3], want[3]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_grad_scaler_kernels_run_on_the_engines():
    scale, tracker = torch.tensor(4.0), torch.tensor(1, dtype=torch.int32)
    grads = [torch.tensor([1.0, 2.0]), torch.tensor([[3.0, float("inf")]])]
    found = torch.tensor(0.0)
    dg = [dev(t) for t in grads]
    ds, dt, df = dev(scale), dev(tracker), dev(found)
    on_engines(lambda: torch._amp_foreach_non_finite_check_and_unscale_(dg, df, ds.reciprocal()), syncs=0)
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, scale.reciprocal())
    same(dg, grads)
    same(df, found)
    on_engines(lambda: torch._amp_update_scale_(ds, dt, df, 2.0, 0.5, 2), syncs=0)
    torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 2)
    same([ds, dt], [scale, tracker])
    # no inf: the tracker reaches the interval and the scale grows
    df.zero_()
    found.zero_()
    for _ in range(2):
        torch._amp_update_scale_(ds, dt, df, 2.0, 0.5, 2)
        torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 2)
        same([ds, dt], [scale, tracker])


@pytest.mark.parametrize("opt", [torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD, torch.optim.Adagrad])
def test_fused_optimizers_are_refused_naming_the_op_the_call_site_and_foreach(opt):
    model = torch.nn.Linear(4, 3).to(D)
    o = opt(model.parameters(), lr=0.1, fused=True)
    model(dev(torch.randn(2, 4))).sum().backward()
    with pytest.raises(trnsim.torch.UnsupportedOpError) as e:
        o.step()
    msg = str(e.value)
    assert "_fused_" in msg and "fused=True" in msg and "foreach=True" in msg
    assert f"{__file__}:" in msg  # the user's line that called step()
    # the workaround works
    o = opt(model.parameters(), lr=0.1, foreach=True)
    on_engines(o.step)


def test_a_remaining_refusal_names_the_op_the_call_site_and_the_workaround():
    x = dev(torch.randn(3, 3))
    with pytest.raises(trnsim.torch.UnsupportedOpError) as e:
        torch.linalg.qr(x)
    msg = str(e.value)
    assert "linalg_qr" in msg and f"{__file__}:" in msg and "TRNSIM_TORCH_FALLBACK=1" in msg


def test_foreach_addcdiv_with_a_list_of_scalars_as_adam_foreach_calls_it():
    g = torch.Generator().manual_seed(4)
    a, b, c = ([torch.randn(3, 2, generator=g), torch.randn(5, generator=g)] for _ in range(3))
    c = [t.abs() + 0.5 for t in c]
    da, db, dc = [dev(t) for t in a], [dev(t) for t in b], [dev(t) for t in c]
    on_engines(lambda: torch._foreach_addcdiv_(da, db, dc, [0.5, -1.0]), syncs=0)
    torch._foreach_addcdiv_(a, b, c, [0.5, -1.0])
    same(da, a, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("weight", [0.1, 0.0, -0.0, 0.4999999, 0.5, 0.9, 1.0, -0.3, 1.7, 3, float("inf"), float("nan")])
@pytest.mark.parametrize("shapes", [((4, 33), (4, 33)), ((4, 33), (33,)), ((1, 5), (3, 1)), ((), (6,))])
def test_lerp_with_a_number_weight_is_three_ops_bit_identical_to_the_decomposition(weight, shapes):
    """``lerp.Scalar`` in float32 (AdamW's ``exp_avg.lerp_``): sub, mul, add on the engines, the
    same bits as PyTorch's decomposition run op by op on the device, and close to the CPU."""
    from trnsim.torch import _device

    g = torch.Generator().manual_seed(len(shapes[0]) * 5 + len(shapes[1]))
    a, b = (torch.randn(s, generator=g) * 4 for s in shapes)
    if a.numel() >= 4:
        a.view(-1)[:4] = torch.tensor([float("inf"), float("-inf"), float("nan"), 3.0e38])
    if b.numel() >= 4:
        b.view(-1)[:4] = torch.tensor([1.0, float("inf"), 2.0, -3.0e38])
    got = on_engines(torch.lerp, a, b, weight, syncs=0)
    rep = trnsim.torch.report()
    assert sum(e.get("programs", 0) for e in rep["ops"].values()) == 3, rep["ops"]
    assert {k for k, e in rep["ops"].items() if e.get("programs")} == {"sub.Tensor", "mul.Tensor", "add.Tensor"}
    want = _device._decomposition(torch.ops.aten.lerp.Scalar)(dev(a), dev(b), weight).cpu()
    assert torch.equal(got.cpu().view(torch.int32), want.view(torch.int32)), (got.cpu(), want)
    same(got, torch.lerp(a, b, weight), rtol=1e-5, atol=1e-5)


def test_lerp_in_place_and_other_dtypes_keep_pytorchs_decomposition():
    g = torch.Generator().manual_seed(9)
    a, b = torch.randn(8, 3, generator=g), torch.randn(8, 3, generator=g)
    da = dev(a.clone())
    on_engines(lambda: da.lerp_(dev(b), 0.1), syncs=0)  # AdamW's first moment
    assert torch.equal(da.cpu(), _device_lerp_reference(a, b, 0.1))
    for dtype in (torch.bfloat16, torch.float16):
        x, y = a.to(dtype), b.to(dtype)
        same(on_engines(torch.lerp, x, y, 0.7, syncs=0), torch.lerp(x, y, 0.7), rtol=2e-2, atol=2e-2)
    w = torch.rand(8, 3, generator=g)
    same(on_engines(torch.lerp, a, b, w, syncs=0), torch.lerp(a, b, w), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="dtype"):
        torch.lerp(dev(a), dev(b.to(torch.bfloat16)), 0.5)


@pytest.mark.parametrize("op", ["addcmul", "addcdiv"])
@pytest.mark.parametrize("value", [1, 0.001, -0.37, 2.5e-5, 1e30, float("nan")])
@pytest.mark.parametrize("shapes", [((5, 7), (5, 7), (5, 7)), ((5, 7), (7,), (5, 1)), ((), (3,), ())])
def test_addcmul_addcdiv_with_a_number_value_are_bit_identical_to_the_decomposition(op, value, shapes):
    """Adam's ``exp_avg_sq.addcmul_(grad, grad, value=1 - beta2)`` and
    ``param.addcdiv_(exp_avg, denom, value=-step_size)``: three programs, the decomposition's bits."""
    from trnsim.torch import _device

    g = torch.Generator().manual_seed(len(shapes[1]) * 3 + len(shapes[2]))
    x, a, b = (torch.randn(s, generator=g) * 3 for s in shapes)
    if b.numel() >= 3:
        b.view(-1)[:3] = torch.tensor([0.0, float("inf"), -1e-38])
    fn = getattr(torch, op)
    got = on_engines(lambda *t: fn(*t, value=value), x, a, b, syncs=0)
    rep = trnsim.torch.report()
    assert sum(e.get("programs", 0) for e in rep["ops"].values()) == 3, rep["ops"]
    want = _device._decomposition(getattr(torch.ops.aten, op).default)(dev(x), dev(a), dev(b), value=value).cpu()
    assert torch.equal(got.cpu().view(torch.int32), want.view(torch.int32)), (got.cpu(), want)
    same(got, fn(x, a, b, value=value), rtol=1e-5, atol=1e-5)
    dx = dev(x.clone()) if x.shape == torch.broadcast_shapes(x.shape, a.shape, b.shape) else None
    if dx is not None:
        getattr(dx, op + "_")(dev(a), dev(b), value=value)
        assert torch.equal(dx.cpu().view(torch.int32), want.view(torch.int32))


def _device_lerp_reference(a, b, w):
    from trnsim.torch import _device

    return _device._decomposition(torch.ops.aten.lerp.Scalar)(dev(a), dev(b), w).cpu()


# ---------------------------------------------------------------------------------------------
# EmbeddingBag


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("freq", [False, True])
def test_embedding_bag_forward_and_backward(mode, padding_idx, include_last_offset, weighted, freq):
    if weighted and mode != "sum" or freq and mode == "max":
        pytest.skip("PyTorch allows per_sample_weights with sum only, scale_grad_by_freq without max")
    g = torch.Generator().manual_seed(5)
    cpu = torch.nn.EmbeddingBag(
        12, 5, mode=mode, padding_idx=padding_idx, include_last_offset=include_last_offset, scale_grad_by_freq=freq
    )
    devmod = torch.nn.EmbeddingBag(
        12, 5, mode=mode, padding_idx=padding_idx, include_last_offset=include_last_offset, scale_grad_by_freq=freq
    )
    devmod.load_state_dict(cpu.state_dict())
    devmod.to(D)
    idx = torch.tensor([1, 2, 3, 4, 2, 7, 2, 11, 0, 2])
    off = torch.tensor([0, 2, 2, 5, 9]) if not include_last_offset else torch.tensor([0, 2, 2, 5, 9, 10])
    w = torch.rand(10, generator=g, requires_grad=True) if weighted else None
    dw = w.detach().to(D).requires_grad_() if weighted else None
    want = cpu(idx, off, per_sample_weights=w)
    got = on_engines(lambda i, o: devmod(i, o, per_sample_weights=dw), idx, off, syncs=0)
    same(got.detach(), want.detach(), rtol=1e-6, atol=1e-6)
    up = torch.randn(want.shape, generator=g)
    want.backward(up)
    on_engines(lambda u: got.backward(u), up, syncs=0)
    same(devmod.weight.grad, cpu.weight.grad, rtol=1e-6, atol=1e-6)
    if weighted:
        same(dw.grad, w.grad, rtol=1e-6, atol=1e-6)


def test_embedding_bag_2d_input_in_eval_and_bfloat16():
    cpu = torch.nn.EmbeddingBag(20, 4, mode="mean").eval()
    x = torch.randint(0, 20, (3, 6), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        same(on_engines(lambda a: cpu.to(D)(a), x, syncs=0), cpu.cpu()(x), rtol=1e-6, atol=1e-6)
        b = torch.nn.EmbeddingBag(20, 4, mode="max").to(torch.bfloat16)
        same(on_engines(lambda a: b.to(D)(a), x, syncs=0), b.cpu()(x))


# ---------------------------------------------------------------------------------------------
# antialiased interpolation


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize(
    "shape,size,scale",
    [
        ((1, 2, 16, 16), (5, 7), None),
        ((2, 3, 9, 20), (4, 6), None),
        ((1, 1, 8, 8), (12, 3), None),
        ((1, 2, 10, 10), None, 0.3),
    ],
)
@pytest.mark.parametrize("align_corners", [False, True])
def test_antialiased_interpolate(mode, shape, size, scale, align_corners):
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=g, requires_grad=True)
    dx = x.detach().to(D).requires_grad_()
    kw = {"size": size, "scale_factor": scale, "mode": mode, "antialias": True, "align_corners": align_corners}
    want = torch.nn.functional.interpolate(x, **kw)
    got = on_engines(lambda a: torch.nn.functional.interpolate(a, **kw), dx, syncs=0)
    same(got.detach(), want.detach(), rtol=1e-5, atol=1e-5)
    up = torch.randn(want.shape, generator=g)
    want.backward(up)
    on_engines(lambda u: got.backward(u), up, syncs=0)
    same(dx.grad, x.grad, rtol=1e-5, atol=1e-5)


def test_antialiased_interpolate_bfloat16():
    x = torch.randn(1, 3, 12, 12, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    kw = {"size": (5, 5), "mode": "bilinear", "antialias": True}
    got = on_engines(lambda a: torch.nn.functional.interpolate(a, **kw), x, syncs=0)
    # The CPU has no bfloat16 kernel of it (CUDA has): the float32 result rounded once, which is
    # what the device computes.
    want = torch.nn.functional.interpolate(x.float(), **kw).to(torch.bfloat16)
    same(got, want, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# pinned memory


def test_pin_memory_and_is_pinned():
    x = torch.randn(4, 3)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and not x.is_pinned() and torch.equal(p, x)
    assert p.data_ptr() != x.data_ptr()  # a copy, as PyTorch's pinned copy is
    assert p.pin_memory().is_pinned()
    d = p.to(D, non_blocking=True)
    same(d, x)
    with pytest.raises(RuntimeError, match="cuda"):
        torch.ops.aten._pin_memory(x, "cuda")


def test_dataloader_with_pin_memory_feeds_the_device():
    g = torch.Generator().manual_seed(10)
    data = torch.utils.data.TensorDataset(torch.randn(12, 5, generator=g), torch.randn(12, 2, generator=g))
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 2)
    ref = torch.nn.Linear(5, 2)
    ref.load_state_dict(model.state_dict())
    model.to(D)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for x, y in torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True):
        assert x.is_pinned() and y.is_pinned()
        for m, o, dev_ in ((model, opt, D), (ref, ref_opt, "cpu")):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x.to(dev_, non_blocking=True)), y.to(dev_, non_blocking=True)).backward()
            o.step()
    for a, b in zip(model.parameters(), ref.parameters()):
        same(a.detach(), b.detach(), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# TransformerEncoder with a padding mask in eval (PyTorch's nested-tensor fast path)


@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("float_mask", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_padding_mask_fast_path(norm, float_mask, activation):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True, activation=activation)
    enc = torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(16) if norm else None).eval()
    x = torch.randn(3, 7, 16, generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([7, 4, 1])
    pad = torch.arange(7).unsqueeze(0) >= lengths.unsqueeze(1)  # left-aligned: PyTorch's nested path
    padded = pad
    if float_mask:
        pad = torch.zeros(3, 7).masked_fill(pad, float("-inf"))
    with torch.no_grad():
        want = enc(x, src_key_padding_mask=pad)
        # the CPU took the nested path: zeros at padded positions (before a final norm)
        assert enc.use_nested_tensor and (norm or bool((want[padded] == 0).all()))
        got = on_engines(lambda a, m: enc.to(D)(a, src_key_padding_mask=m), x, pad, syncs=1)
        enc.cpu()
    same(got, want, rtol=1e-5, atol=1e-5)


def test_transformer_encoder_padding_mask_not_left_aligned_and_in_training():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True, dropout=0.0)
    enc = torch.nn.TransformerEncoder(layer, 1).eval()
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(2))
    pad = torch.tensor([[True, False, False, False, False], [False, False, True, True, True]])
    with torch.no_grad():
        want = enc(x, src_key_padding_mask=pad)
        got = enc.to(D)(dev(x), src_key_padding_mask=dev(pad))
    same(got, want, rtol=1e-5, atol=1e-5)
    enc.cpu().train()
    dev_enc = copy.deepcopy(enc).to(D)
    want = enc(x, src_key_padding_mask=pad)
    got = dev_enc(dev(x), src_key_padding_mask=dev(pad))
    same(got.detach(), want.detach(), rtol=1e-5, atol=1e-5)


def test_nested_tensor_from_mask_elsewhere_is_refused():
    with pytest.raises(trnsim.torch.UnsupportedOpError, match="_nested_tensor_from_mask"):
        torch._nested_tensor_from_mask(dev(torch.randn(2, 3, 4)), dev(torch.ones(2, 3, dtype=torch.bool)))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unique_consecutive_along_a_dim(dim):
    x = torch.tensor([[1, 1, 2, 2, 2], [1, 1, 2, 3, 3], [1, 1, 2, 3, 3], [0, 0, 0, 0, 0]]).float()
    kw = {"return_inverse": True, "return_counts": True, "dim": dim}
    got = on_engines(lambda a: torch.unique_consecutive(a, **kw), x, syncs=1)
    same(got, torch.unique_consecutive(x, **kw))
