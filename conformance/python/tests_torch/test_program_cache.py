"""The device's program cache: a repeated call reuses its lowered program; any change to what
the lowering reads (op, dtype, shape, strides, scalar arguments, target) is a miss."""

import pytest
import torch
import trnsim.torch
from trnsim.torch import _device


@pytest.fixture(autouse=True)
def _fresh_cache():
    _device.CACHE.clear()
    trnsim.torch.reset_report()
    yield
    _device.CACHE.clear()


def counts():
    c = trnsim.torch.report()["program_cache"]
    return c["hits"], c["misses"]


def test_a_repeated_call_hits_and_gives_the_same_result():
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    da, db = a.to("trnsim"), b.to("trnsim")
    out = {}
    assert run_and_count(lambda: out.setdefault(1, da + db)) == (0, 1)
    assert run_and_count(lambda: out.setdefault(2, db + da)) == (1, 0)  # other tensors, same signature
    torch.testing.assert_close(out[1].cpu(), a + b, rtol=0, atol=0)
    torch.testing.assert_close(out[2].cpu(), b + a, rtol=0, atol=0)


def run_and_count(f):
    before = counts()
    f()
    after = counts()
    return after[0] - before[0], after[1] - before[1]


def test_each_field_of_the_signature_is_in_the_key():
    x = torch.randn(6, 8).to("trnsim")
    y = torch.randn(6, 8).to("trnsim")
    torch.add(x, y)
    assert run_and_count(lambda: torch.add(x, y)) == (1, 0)
    # op
    assert run_and_count(lambda: torch.sub(x, y)) == (0, 1)
    # dtype
    xh, yh = x.to(torch.bfloat16), y.to(torch.bfloat16)
    assert run_and_count(lambda: torch.add(xh, yh)) == (0, 1)
    # shape
    x2, y2 = torch.randn(6, 9).to("trnsim"), torch.randn(6, 9).to("trnsim")
    assert run_and_count(lambda: torch.add(x2, y2)) == (0, 1)
    # scalar argument
    assert run_and_count(lambda: torch.add(x, y, alpha=2.0)) == (0, 1)
    assert run_and_count(lambda: torch.add(x, y, alpha=3.0)) == (0, 1)
    assert run_and_count(lambda: torch.add(x, y, alpha=3.0)) == (1, 0)
    # strides: the same shape read through other strides is another gather program
    big = torch.randn(8, 12).to("trnsim")
    v1, v2 = big[:6, :8], big.t()[:6, :8]
    assert v1.shape == v2.shape and v1.stride() != v2.stride()
    torch.add(v1, y)
    assert run_and_count(lambda: torch.add(v1, y)) == (2, 0)  # gather + add
    hits, misses = run_and_count(lambda: torch.add(v2, y))
    assert misses == 1 and hits == 1, (hits, misses)  # a new gather, the same add
    # target: the key differs, so the lowering runs again (this session simulates one target,
    # so running the other target's program is refused; the miss is counted before that)
    old = _device.STATE.target
    before = counts()
    try:
        _device.STATE.target = "trn2" if old != "trn2" else "trn1"
        with pytest.raises(Exception, match="program is for"):
            torch.add(x, y)
    finally:
        _device.STATE.target = old
    after = counts()
    assert (after[0] - before[0], after[1] - before[1]) == (0, 1)


def test_random_ops_are_never_served_from_the_cache():
    torch.manual_seed(0)
    a = torch.randn(4, 4, device="trnsim")
    b = torch.randn(4, 4, device="trnsim")
    assert not torch.equal(a.cpu(), b.cpu())
    assert trnsim.torch.report()["program_cache"]["uncached"] >= 2


def test_the_cache_is_bounded_by_entries_and_instructions():
    old = _device.CACHE
    try:
        cache = _device.CACHE = _device.ProgramCache(max_entries=3, max_instructions=10**9)
        x = torch.randn(4, 4).to("trnsim")
        for k in range(6):
            x * float(k + 2)
        assert len(cache.entries) == 3 and cache.evictions == cache.misses - 3 >= 3
        small = _device.CACHE = _device.ProgramCache(max_entries=100, max_instructions=5)
        x + x
        assert small.instructions <= 5 and small.misses == 1
        torch.testing.assert_close((x + x).cpu(), x.cpu() * 2)
    finally:
        _device.CACHE = old
