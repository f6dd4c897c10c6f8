"""Ops outside Core ATen that the `trnsim` device runs as compositions of lowered ops, against
the CPU: value-dependent sizes (masked_select, bincount, repeat_interleave, unique), ordering
(stable sort, median, kthvalue, searchsorted, histc), and what training scripts call (fused
optimizers, GradScaler). Each checks that the engines computed it: compute-engine instructions
in the op's programs, no fallback, and no device -> host read but the counted syncs."""

import pytest
import torch
import trnsim.torch

D = "trnsim"


@pytest.fixture(autouse=True)
def _clean():
    trnsim.torch.set_fallback(False)
    trnsim.torch.reset_report()
    yield


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
