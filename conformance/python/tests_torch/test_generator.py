"""`torch.Generator(device="trnsim")`: a generator object for the device, and `generator=` on the
device's random ops. Each property is checked on the CPU with a CPU generator and on the device
with a device generator: the values differ (the engines' RNG is not the CPU's), the behaviour
may not. docs/torch-device.md, "Random numbers"."""

import pickle

import pytest
import torch
import trnsim.torch

D = "trnsim"

# name -> fn(device, generator)
DRAWS = {
    "randn": lambda d, g: torch.randn(4, 3, device=d, generator=g),
    "rand": lambda d, g: torch.rand(7, device=d, generator=g),
    "randint": lambda d, g: torch.randint(0, 10, (9,), device=d, generator=g),
    "randperm": lambda d, g: torch.randperm(11, device=d, generator=g),
    "normal_": lambda d, g: torch.empty(5, device=d).normal_(2.0, 3.0, generator=g),
    "uniform_": lambda d, g: torch.empty(5, device=d).uniform_(-1.0, 1.0, generator=g),
    "bernoulli": lambda d, g: torch.bernoulli(torch.full((16,), 0.5, device=d), generator=g),
    "multinomial": lambda d, g: torch.multinomial(torch.ones(6, device=d), 4, generator=g),
    "init.normal_": lambda d, g: torch.nn.init.normal_(torch.empty(3, 3, device=d), generator=g),
}


@pytest.fixture(autouse=True)
def _clean():
    trnsim.torch.set_fallback(False)
    yield


def _gen(device):
    return torch.Generator(device=device)


def test_a_device_generator_is_a_generator_of_the_device():
    g = torch.Generator(device=D)
    assert isinstance(g, torch.Generator)
    assert g.device == torch.device(D, 0)
    assert torch.Generator(device=f"{D}:0").device == torch.device(D, 0)
    # Every other device is PyTorch's own generator, as before the device was imported.
    assert type(torch.Generator()) is torch._C.Generator
    assert torch.Generator("cpu").device == torch.device("cpu")
    assert isinstance(torch.default_generator, torch.Generator)
    assert g.manual_seed(5) is g and g.initial_seed() == 5
    with pytest.raises(ValueError, match="device index 1"):
        torch.Generator(device=f"{D}:1")


@pytest.mark.parametrize("device", ["cpu", D])
@pytest.mark.parametrize("name", sorted(DRAWS))
def test_a_seeded_generator_repeats_and_advances(name, device):
    draw = DRAWS[name]
    g = _gen(device).manual_seed(1234)
    first, second = draw(device, g).cpu(), draw(device, g).cpu()
    g.manual_seed(1234)
    # The global generator's draws in between change nothing: the values come from `g`.
    torch.manual_seed(99)
    torch.rand(3, device=device)
    again = draw(device, g).cpu()
    assert torch.equal(first, again)
    if name != "bernoulli" or not torch.equal(first, second):  # 16 fair coins may repeat (2^-16)
        assert not torch.equal(first, second), "the generator did not advance"


@pytest.mark.parametrize("device", ["cpu", D])
def test_state_round_trips_and_pickles(device):
    g = _gen(device).manual_seed(3)
    state = g.get_state()
    a = torch.randn(6, device=device, generator=g).cpu()
    g.set_state(state)
    assert torch.equal(torch.randn(6, device=device, generator=g).cpu(), a)
    h = pickle.loads(pickle.dumps(g.set_state(state)))
    assert h.device == g.device
    assert torch.equal(torch.randn(6, device=device, generator=h).cpu(), a)


@pytest.mark.parametrize("device", ["cpu", D])
def test_drawing_from_a_generator_leaves_the_global_stream_alone(device):
    torch.manual_seed(0)
    want = torch.rand(5, device=device).cpu()
    torch.manual_seed(0)
    torch.randn(8, device=device, generator=_gen(device).manual_seed(1))
    assert torch.equal(torch.rand(5, device=device).cpu(), want)


def test_two_generators_with_one_seed_agree_and_other_seeds_differ():
    a, b, c = (_gen(D).manual_seed(s) for s in (7, 7, 8))
    x, y, z = (torch.randn(32, device=D, generator=g).cpu() for g in (a, b, c))
    assert torch.equal(x, y) and not torch.equal(x, z)
