"""Indices outside the tensor on the `trnsim` device raise what PyTorch's CPU raises: the same
exception type and the same words, naming the user's index (not the lowering's flagged internal
offset), and indices PyTorch accepts (negatives where an op wraps them) give the CPU's values.
docs/torch-device.md, "Indices outside the tensor"."""

import pytest
import torch
import trnsim
import trnsim.torch

D = "trnsim"
F = torch.nn.functional


@pytest.fixture(autouse=True)
def _clean():
    trnsim.torch.set_fallback(False)
    yield


def _x():
    return torch.arange(12.0).reshape(3, 4)


def _ix(*v):
    return torch.tensor(v)


# name -> fn(x, to) where `to` moves a tensor to the device under test (identity for the CPU)
CALLS = {
    "embedding_past_end": lambda x, to: F.embedding(to(_ix(0, 5)), x),
    "embedding_negative": lambda x, to: F.embedding(to(_ix(-1)), x),
    "embedding_2d": lambda x, to: F.embedding(to(torch.tensor([[0, 1], [2, 9]])), x),
    "index_select_past_end": lambda x, to: torch.index_select(x, 0, to(_ix(0, 5))),
    "index_select_negative": lambda x, to: torch.index_select(x, 0, to(_ix(0, -1))),
    "gather_past_end": lambda x, to: torch.gather(x, 1, to(torch.tensor([[0, 7]] * 3))),
    "gather_negative": lambda x, to: torch.gather(x, 1, to(torch.tensor([[0, -1]] * 3))),
    "gather_negative_dim": lambda x, to: torch.gather(x, -1, to(torch.tensor([[0, 4]] * 3))),
    "scatter_value": lambda x, to: x.clone().scatter_(1, to(torch.tensor([[0, 7]] * 3)), 1.0),
    "scatter_negative": lambda x, to: x.clone().scatter_(1, to(torch.tensor([[0, -1]] * 3)), 1.0),
    "scatter_add": lambda x, to: x.clone().scatter_add_(1, to(torch.tensor([[0, 7]] * 3)), to(torch.ones(3, 2))),
    "scatter_reduce": lambda x, to: x.clone().scatter_reduce_(
        1, to(torch.tensor([[0, 7]] * 3)), to(torch.ones(3, 2)), "sum"
    ),
    "index_add_past_end": lambda x, to: x.clone().index_add_(0, to(_ix(0, 5)), to(torch.ones(2, 4))),
    "index_add_negative": lambda x, to: x.clone().index_add_(0, to(_ix(0, -1)), to(torch.ones(2, 4))),
    "index_add_out_of_place": lambda x, to: torch.index_add(x, 0, to(_ix(-1)), to(torch.ones(1, 4))),
    "index_copy_past_end": lambda x, to: x.clone().index_copy_(0, to(_ix(0, 5)), to(torch.ones(2, 4))),
    "index_copy_negative": lambda x, to: x.clone().index_copy_(0, to(_ix(0, -1)), to(torch.ones(2, 4))),
    "index_fill_past_end": lambda x, to: x.clone().index_fill_(0, to(_ix(0, 5)), 1.0),
    "take_past_end": lambda x, to: torch.take(x, to(_ix(20))),
    "take_before_start": lambda x, to: torch.take(x, to(_ix(-13))),
    "embedding_bag": lambda x, to: F.embedding_bag(to(_ix(0, 7)), x, to(_ix(0))),
    "index_past_end": lambda x, to: x[to(_ix(7))],
    "index_before_start": lambda x, to: x[to(_ix(-4))],
    "index_second_dim": lambda x, to: x[:, to(_ix(9))],
    "index_two_tensors": lambda x, to: x[to(_ix(1, 2)), to(_ix(1, 8))],
    "index_put": lambda x, to: x.clone().index_put_((to(_ix(7)),), to(torch.tensor(1.0))),
    "index_put_accumulate": lambda x, to: x.clone().index_put_((to(_ix(7)),), to(torch.tensor(1.0)), accumulate=True),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_out_of_range_index_raises_what_the_cpu_raises(name):
    with pytest.raises(Exception) as cpu:
        CALLS[name](_x(), lambda t: t)
    with pytest.raises(Exception) as got:
        CALLS[name](_x().to(D), lambda t: t.to(D))
    assert type(got.value) is type(cpu.value), (got.value, cpu.value)
    assert str(got.value) == str(cpu.value)
    # The engines' own error (instruction, operand) stays attached as the cause.
    assert isinstance(got.value.__cause__, trnsim.SimError)
    assert "addresses outside the tensor" in got.value.__cause__.message


ACCEPTED = {
    "take_negative": lambda x, to: torch.take(x, to(_ix(-1, -12, 3))),
    "index_fill_negative": lambda x, to: x.clone().index_fill_(0, to(_ix(0, -1)), -5.0),
    "index_negative": lambda x, to: x[to(_ix(-1, -3))],
    "index_put_negative": lambda x, to: x.clone().index_put_((to(_ix(-1)),), to(torch.tensor(7.0))),
    "index_add_in_range": lambda x, to: x.clone().index_add_(0, to(_ix(2, 0)), to(torch.ones(2, 4))),
    "index_copy_in_range": lambda x, to: x.clone().index_copy_(0, to(_ix(2, 0)), to(torch.ones(2, 4))),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_indices_pytorch_accepts_give_the_cpus_values(name):
    want = ACCEPTED[name](_x(), lambda t: t)
    got = ACCEPTED[name](_x().to(D), lambda t: t.to(D))
    assert got.device.type == D
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
