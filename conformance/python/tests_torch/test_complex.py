"""complex64 on the `trnsim` device: interleaved float32 storage, bit-exact transfers, real <->
complex copies, `view_as_real` / `view_as_complex` as views, conjugation, and the FFTs against
the CPU. complex128 and complex32 stay refused by the dtype policy."""

import pytest
import torch
import trnsim.torch

# The golden suite's tolerance for complex64 outputs (trnsim._native.tolerance).
TOL = {"rtol": 1.3e-6, "atol": 1e-5}


pytestmark = pytest.mark.usefixtures("fresh_device")


def _bits(z):
    return torch.view_as_real(z).contiguous().view(torch.int32)


def _cplx(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.complex(torch.randn(*shape, generator=g), torch.randn(*shape, generator=g))


def test_round_trip_is_bit_exact_with_specials():
    z = _cplx(5, 7)
    z[0, 0] = complex(float("nan"), -0.0)
    z[1, 2] = complex(float("inf"), float("-inf"))
    z[2, 3] = complex(-0.0, 1e-42)  # a subnormal imaginary part
    d = z.to("trnsim")
    assert d.dtype == torch.complex64 and d.device.type == "trnsim"
    assert torch.equal(_bits(d.cpu()), _bits(z))
    # through a strided view (gathered on the device) too
    assert torch.equal(_bits(d.t()[1:, ::2].cpu()), _bits(z.t()[1:, ::2].contiguous()))


def test_factories_and_real_complex_copies():
    e = torch.zeros(3, 4, dtype=torch.complex64, device="trnsim")
    assert torch.equal(e.cpu(), torch.zeros(3, 4, dtype=torch.complex64))
    x = torch.randn(6, 5)
    z = x.to("trnsim").to(torch.complex64)  # real -> complex: (x, 0)
    assert torch.equal(_bits(z.cpu()), _bits(x.to(torch.complex64)))
    c = _cplx(6, 5, seed=1)
    back = c.to("trnsim").to(torch.float32)  # complex -> real: the real part (PyTorch warns)
    assert torch.equal(back.cpu(), c.real)


def test_view_as_real_and_complex_are_views():
    z = _cplx(4, 3, seed=2)
    d = z.to("trnsim")
    r = torch.view_as_real(d)
    assert r.dtype == torch.float32 and list(r.shape) == [4, 3, 2]
    assert torch.equal(r.cpu(), torch.view_as_real(z))
    assert torch.equal(d.real.cpu(), z.real) and torch.equal(d.imag.cpu(), z.imag)
    # An in-place write to the complex tensor is seen through its real view (same memory).
    d.zero_()
    assert torch.equal(r.cpu(), torch.zeros(4, 3, 2))
    f = torch.randn(5, 2)
    df = f.to("trnsim")
    c = torch.view_as_complex(df)
    assert c.dtype == torch.complex64 and torch.equal(c.cpu(), torch.view_as_complex(f))
    df.fill_(2.0)
    assert torch.equal(c.cpu(), torch.full((5,), complex(2.0, 2.0), dtype=torch.complex64))
    rep = trnsim.torch.report()
    assert rep["ops"]["view_as_real"]["view"] >= 1 and rep["ops"]["view_as_complex"]["view"] == 1


def test_writes_into_complex_views_and_through_real_views():
    z = _cplx(6, 5, seed=4)
    d = z.to("trnsim")
    e = z.clone()
    d[:, 1] = 3 - 4j  # a partial write into a complex64 view
    e[:, 1] = 3 - 4j
    d[2:4].copy_(torch.full((2, 5), 0.5j, dtype=torch.complex64).to("trnsim"))
    e[2:4] = 0.5j
    d.real[0].mul_(2.0)  # through a float32 view of complex64 memory
    e.real[0].mul_(2.0)
    d.imag.clamp_(min=0.0)
    e.imag.clamp_(min=0.0)
    assert torch.equal(_bits(d.cpu()), _bits(e))
    f = torch.randn(4, 2)
    df = f.to("trnsim")
    torch.view_as_complex(df)[1:3] = 1 + 1j  # through a complex64 view of float32 memory
    f[1:3] = 1.0
    assert torch.equal(df.cpu(), f)


def test_complex_from_parts_polar_and_indexing():
    re, im = torch.randn(7, 3), torch.randn(7, 3)
    c = torch.complex(re.to("trnsim"), im.to("trnsim"))
    assert torch.equal(_bits(c.cpu()), _bits(torch.complex(re, im)))
    r, th = torch.rand(9), torch.randn(9)
    torch.testing.assert_close(torch.polar(r.to("trnsim"), th.to("trnsim")).cpu(), torch.polar(r, th), **TOL)
    z = _cplx(5, 6, seed=5)
    d = z.to("trnsim")
    idx = torch.tensor([4, 0, 2])
    didx = idx.to("trnsim")
    assert torch.equal(d[didx].cpu(), z[idx])
    assert torch.equal(d[:, didx].cpu(), z[:, idx])
    assert torch.equal(torch.index_select(d, -1, didx).cpu(), torch.index_select(z, -1, idx))
    mask = z.real > 0
    assert torch.equal(d[mask.to("trnsim")].cpu(), z[mask])
    assert torch.equal(torch.fft.fftshift(d).cpu(), torch.fft.fftshift(z))


def test_complex_add_sub_mul_neg_and_index_put():
    a, b = _cplx(4, 5, seed=8), _cplx(5, seed=9)
    x = torch.randn(4, 5)
    da, db, dx = a.to("trnsim"), b.to("trnsim"), x.to("trnsim")
    # add / sub / neg on the real views are exact; so is a product with a real operand's zero part
    assert torch.equal(_bits((da + db).cpu()), _bits(a + b))
    assert torch.equal(_bits(torch.sub(da, db, alpha=2).cpu()), _bits(torch.sub(a, b, alpha=2)))
    assert torch.equal(_bits((-da).cpu()), _bits(-a))
    assert torch.equal(_bits((da + dx).cpu()), _bits(a + x))
    assert torch.equal(_bits((da + 3).cpu()), _bits(a + 3))
    torch.testing.assert_close((da * db).cpu(), a * b, **TOL)
    torch.testing.assert_close((dx * da).cpu(), x * a, **TOL)
    torch.testing.assert_close((da * (1 - 2j)).cpu(), a * (1 - 2j), **TOL)
    c = da.clone()
    c[1].add_(db)  # in place, into a view
    e = a.clone()
    e[1] += b
    assert torch.equal(_bits(c.cpu()), _bits(e))
    i = torch.tensor([3, 0])
    v = _cplx(2, 5, seed=10)
    for acc in (False, True):
        got = torch.index_put(da, (i.to("trnsim"),), v.to("trnsim"), accumulate=acc).cpu()
        assert torch.equal(_bits(got), _bits(torch.index_put(a, (i,), v, accumulate=acc)))


def test_conj_is_resolved_on_the_device():
    z = _cplx(3, 8, seed=3)
    z[0, 0] = complex(1.0, 0.0)  # conj gives -0.0: the sign bit must flip
    d = z.to("trnsim")
    for got in (d.conj().cpu(), torch.conj_physical(d).cpu(), d.conj().resolve_conj().cpu()):
        assert not got.is_conj()
        assert torch.equal(_bits(got), _bits(z.conj().resolve_conj()))
    assert trnsim.torch.report()["ops"]["_conj"]["device"] >= 1


@pytest.mark.parametrize(
    "shape,dim,norm", [((16,), -1, None), ((4, 12), -1, "ortho"), ((3, 8, 5), 1, "forward"), ((6, 10), 0, "backward")]
)
def test_fft_ifft_match_cpu(shape, dim, norm):
    z = _cplx(*shape, seed=len(shape))
    d = z.to("trnsim")
    with trnsim.torch.checking():
        f = torch.fft.fft(d, dim=dim, norm=norm)
        i = torch.fft.ifft(d, dim=dim, norm=norm)
    torch.testing.assert_close(f.cpu(), torch.fft.fft(z, dim=dim, norm=norm), **TOL)
    torch.testing.assert_close(i.cpu(), torch.fft.ifft(z, dim=dim, norm=norm), **TOL)
    assert trnsim.torch.report()["first_out_of_tolerance"] is None


@pytest.mark.parametrize("shape", [(32,), (5, 9)])
def test_rfft_and_fft_of_real_match_cpu(shape):
    x = torch.randn(*shape)
    d = x.to("trnsim")
    torch.testing.assert_close(torch.fft.rfft(d).cpu(), torch.fft.rfft(x), **TOL)
    torch.testing.assert_close(torch.fft.fft(d).cpu(), torch.fft.fft(x), **TOL)
    torch.testing.assert_close(torch.fft.irfft(torch.fft.rfft(d)).cpu(), torch.fft.irfft(torch.fft.rfft(x)), **TOL)


def test_fft2_round_trip():
    z = _cplx(6, 8, seed=7)
    d = z.to("trnsim")
    torch.testing.assert_close(torch.fft.fft2(d).cpu(), torch.fft.fft2(z), **TOL)
    torch.testing.assert_close(torch.fft.ifft2(torch.fft.fft2(d)).cpu(), z, **TOL)


def test_complex128_and_complex32_are_refused():
    z = _cplx(3)
    with pytest.raises(trnsim.torch.DtypeError, match="complex128"):
        z.to(torch.complex128).to("trnsim")
    with pytest.raises(trnsim.torch.DtypeError, match="complex32"):
        z.to("trnsim").to(torch.complex32)
    refusals = trnsim.torch.report()["dtype_refusals"]
    assert refusals.get("torch.complex128", 0) >= 1 and refusals.get("torch.complex32", 0) >= 1
