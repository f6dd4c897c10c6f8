"""The device's metadata caches (_device.META_CACHE, VIEW_CACHE, INPLACE_CHECKED): a call whose
metadata was seen before reuses PyTorch's meta-kernel result; any change to what the meta kernel
reads is a miss, and the results are what PyTorch gives on the CPU."""

import pytest
import torch
from trnsim.torch import _device


@pytest.fixture(autouse=True)
def _fresh_caches():
    for c in (_device.META_CACHE, _device.VIEW_CACHE, _device.INPLACE_CHECKED):
        c.entries.clear()
    yield


def key(func, *args, **kwargs):
    return _device._meta_key(func, args, kwargs)


def test_the_key_holds_what_the_meta_kernel_reads():
    aten = torch.ops.aten
    x = torch.randn(4, 6).to("trnsim")
    base = key(aten.mul.Tensor, x, x)
    assert base == key(aten.mul.Tensor, torch.randn(4, 6).to("trnsim"), x)  # other values, same metadata
    assert base != key(aten.add.Tensor, x, x)
    assert base != key(aten.mul.Tensor, x.t(), x.t())  # strides
    assert base != key(aten.mul.Tensor, x, torch.randn(1, 6).to("trnsim"))  # shapes
    assert base != key(aten.mul.Tensor, x, x.to(torch.bfloat16))  # dtypes
    # Numbers by type and exact value: 1 and True and 1.0 differ, so do 0.0 and -0.0.
    k = {key(aten.mul.Scalar, x, v) for v in (1, True, 1.0, 0.0, -0.0)}
    assert len(k) == 5
    assert key(aten.mul.Scalar, x, float("nan")) == key(aten.mul.Scalar, x, float("nan"))
    # A CPU tensor's values may matter to a meta kernel: such a call is never cached.
    assert key(aten.mul.Tensor, x, torch.tensor(2.0)) is None
    # Keyword arguments by name and value.
    assert key(aten.sum.dim_IntList, x, [1], keepdim=True) != key(aten.sum.dim_IntList, x, [1], keepdim=False)


def test_repeated_ops_hit_and_give_the_same_bits():
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    da, db = a.to("trnsim"), b.to("trnsim")
    first = [da * db, (da * db).sum(1)]  # misses: the meta kernels run
    hits = _device.META_CACHE.hits
    again = [da * db, (da * db).sum(1)]
    assert _device.META_CACHE.hits >= hits + 2
    for f, g in zip(first, again):
        assert f.shape == g.shape and f.dtype == g.dtype
        assert torch.equal(f.cpu().view(torch.int32), g.cpu().view(torch.int32))
    torch.testing.assert_close(again[0].cpu(), a * b, rtol=0, atol=0)  # an element-wise product is exact
    assert again[1].shape == (a * b).sum(1).shape


def test_default_dtype_is_in_the_key():
    before = torch.get_default_dtype()
    try:
        a = torch.full((3,), 2.0, device="trnsim")
        torch.set_default_dtype(torch.bfloat16)
        b = torch.full((3,), 2.0, device="trnsim")
    finally:
        torch.set_default_dtype(before)
    assert a.dtype == torch.float32 and b.dtype == torch.bfloat16


def test_views_follow_offsets_and_strides():
    x = torch.arange(24.0).reshape(4, 6)
    d = x.to("trnsim")
    for v, w in [(d[1:].t(), x[1:].t()), (d[2:].t(), x[2:].t()), (d[:, 1:].t(), x[:, 1:].t())]:
        assert (v.shape, v.stride(), v.storage_offset()) == (w.shape, w.stride(), w.storage_offset())
        torch.testing.assert_close(v.cpu(), w, rtol=0, atol=0)


def test_an_inplace_check_that_passed_does_not_hide_a_later_error():
    d = torch.randn(4, 6).to("trnsim")
    d.add_(torch.randn(4, 6).to("trnsim"))
    d.add_(torch.randn(4, 6).to("trnsim"))  # the same metadata: the check is remembered
    assert _device.INPLACE_CHECKED.hits >= 1
    with pytest.raises(RuntimeError):
        d.add_(torch.randn(5, 6).to("trnsim"))  # cannot broadcast into self: PyTorch's error
    small = torch.randn(1, 6).to("trnsim")
    with pytest.raises(RuntimeError):
        small.add_(torch.randn(4, 6).to("trnsim"))  # the output would need to grow


def test_the_caches_are_bounded():
    c = _device._MetaCache(max_entries=3)
    for i in range(10):
        c.put(("k", i), i + 1)
        assert len(c.entries) <= 3
    c.put(("none",), None)  # a failed meta call is not kept
    assert ("none",) not in c.entries
