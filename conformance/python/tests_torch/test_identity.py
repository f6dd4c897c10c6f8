"""Parameter identity across `.to("trnsim")` and back (a traceable wrapper subclass swapped into
the existing `Parameter` objects), and Dynamo seeing device tensors as tensors."""

import copy

import pytest
import torch
import trnsim.torch
from trnsim.torch import _device


@pytest.fixture(autouse=True)
def _clean(fresh_device):
    yield
    torch.__future__.set_swap_module_params_on_conversion(False)


class TiedLM(torch.nn.Module):
    """An embedding, one causal self-attention block with a feed-forward, and an LM head that
    shares the embedding's weight (as GPT-2 and many small LMs do)."""

    def __init__(self, vocab=40, d=16, heads=2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.randn(16, d) * 0.1)
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.ff = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))
        self.lm_head = torch.nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.embed.weight
        self.heads = heads

    def forward(self, idx):
        b, s = idx.shape
        x = self.embed(idx) + self.pos[:s]
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, s, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, -1))
        x = x + self.ff(self.ln2(x))
        return self.lm_head(x)


def _train(model, opt, data, targets, steps=5):
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        logits = model(data)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _flat(model):
    return torch.cat([p.detach().cpu().double().reshape(-1) for p in model.parameters()])


def test_tied_lm_trains_like_the_cpu_with_the_optimizer_built_before_the_move():
    torch.manual_seed(0)
    base = TiedLM()
    data = torch.randint(0, 40, (2, 12))
    targets = torch.randint(0, 40, (2, 12))

    def run(dtype, device):
        model = copy.deepcopy(base).to(dtype)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)  # built before the move
        params = list(model.parameters())
        embed_w = model.embed.weight
        model.to(device)
        # The move keeps every Parameter object: the tie holds and the optimizer's parameters
        # are the model's.
        assert model.embed.weight is embed_w and model.lm_head.weight is model.embed.weight
        assert all(a is b for a, b in zip(params, model.parameters()))
        assert all(p.device.type == device for p in params)
        losses = _train(model, opt, data.to(device), targets.to(device))
        return losses, _flat(model)

    dev_losses, dev_params = run(torch.float32, "trnsim")
    cpu_losses, cpu_params = run(torch.float32, "cpu")
    _, f64_params = run(torch.float64, "cpu")
    assert _flat(base).ne(dev_params).any(), "the device run updated nothing"
    for d, c in zip(dev_losses, cpu_losses):
        assert abs(d - c) <= 1e-5 * abs(c), (dev_losses, cpu_losses)
    noise = (cpu_params - f64_params).norm()
    assert (dev_params - cpu_params).norm() <= 2 * noise, ((dev_params - cpu_params).norm(), noise)
    assert trnsim.torch.report()["fallback_count"] == 0


@pytest.mark.parametrize("swap", [False, True])
def test_round_trip_to_the_cpu_and_back_keeps_parameters_and_grads(swap):
    torch.__future__.set_swap_module_params_on_conversion(swap)
    torch.manual_seed(2)
    m = TiedLM()
    ref = copy.deepcopy(m)
    ids = [id(p) for p in m.parameters()]
    data = torch.randint(0, 40, (2, 8))
    m(data).sum().backward()
    ref(data).sum().backward()
    m.to("trnsim")
    assert [id(p) for p in m.parameters()] == ids
    assert isinstance(m.embed.weight, torch.nn.Parameter) and isinstance(m.embed.weight, _device.TrnsimTensor)
    assert m.embed.weight.grad.device.type == "trnsim"
    m.cpu()
    assert [id(p) for p in m.parameters()] == ids and m.lm_head.weight is m.embed.weight
    assert type(m.embed.weight) is torch.nn.Parameter and m.embed.weight.device.type == "cpu"
    assert type(m.embed.weight.grad) is torch.Tensor
    for p, q in zip(m.parameters(), ref.parameters()):
        assert torch.equal(p, q) and torch.equal(p.grad, q.grad)
    m.to("trnsim")
    assert [id(p) for p in m.parameters()] == ids and m.lm_head.weight is m.embed.weight
    torch.testing.assert_close(m(data.to("trnsim")).cpu(), ref(data), rtol=1e-5, atol=1e-5)


def test_buffers_and_dtype_conversion_on_the_device():
    bn = torch.nn.BatchNorm1d(4)
    w = bn.weight
    bn.to("trnsim")
    assert bn.weight is w and bn.running_mean.device.type == "trnsim"
    bn.half()
    assert bn.weight is w and w.dtype == torch.float16 and bn.running_mean.dtype == torch.float16
    bn.float()
    out = bn(torch.randn(3, 4).to("trnsim"))
    assert out.device.type == "trnsim" and out.dtype == torch.float32


def test_load_state_dict_assign_puts_device_tensors_in():
    torch.manual_seed(3)
    src = torch.nn.Linear(6, 3)
    dst = torch.nn.Linear(6, 3, device="meta")
    sd = {k: v.to("trnsim") for k, v in src.state_dict().items()}
    dst.load_state_dict(sd, assign=True)
    assert isinstance(dst.weight, torch.nn.Parameter) and dst.weight.device.type == "trnsim"
    assert dst.weight.requires_grad
    x = torch.randn(2, 6)
    torch.testing.assert_close(dst(x.to("trnsim")).cpu(), src(x), rtol=1.3e-6, atol=1e-5)
    opt = torch.optim.SGD(dst.parameters(), lr=0.1)
    dst(x.to("trnsim")).sum().backward()
    before = dst.weight.detach().cpu().clone()
    opt.step()
    assert not torch.equal(before, dst.weight.detach().cpu())


def test_dynamo_sees_device_tensors_as_tensors():
    x = torch.randn(4, 8).to("trnsim")
    w = torch.randn(8, 8).to("trnsim")

    def f(x, w):
        return torch.relu(x @ w).sum()

    torch._dynamo.reset()
    e = torch._dynamo.explain(f)(x, w)
    assert (e.graph_count, e.graph_break_count) == (1, 0), e.break_reasons
    # The graph holds the user's ops on the device tensors, not the device's internals.
    targets = [str(n.target) for n in e.graphs[0].graph.nodes if n.op in ("call_function", "call_method")]
    assert len(targets) == 3 and "sum" in targets[-1], targets
    inputs = [n.meta["example_value"] for n in e.graphs[0].graph.nodes if n.op == "placeholder"]
    assert all(v.device.type == "trnsim" and v.shape == t.shape for v, t in zip(inputs, (x, w))), inputs

    def g(x, w):
        return torch.nn.functional.gelu(x @ w + 1.0)

    torch._dynamo.reset()
    e = torch._dynamo.explain(g)(x, w)
    assert (e.graph_count, e.graph_break_count) == (1, 0), e.break_reasons


def test_a_traced_input_proxy_leads_back_to_its_device_tensor():
    x = torch.randn(3, 5).to("trnsim")
    names, ctx = x.__tensor_flatten__()
    proxy = getattr(x, names[0])
    assert proxy.device.type == "meta" and proxy.shape == x.shape and proxy.stride() == x.stride()
    # The proxy leads back to the same memory and view (not the object: a reference back to the
    # tensor would make a cycle, or a weak one would stop torch.utils.swap_tensors).
    back = _device.device_tensor_of(proxy)
    assert back._trn is x._trn and back.shape == x.shape and back.stride() == x.stride()
    with torch.no_grad():
        back.add_(1.0)
    assert torch.equal(x.cpu(), back.cpu())
    v = x.t()
    vb = _device.device_tensor_of(v._proxy)
    assert vb._trn is x._trn and vb.stride() == v.stride() and v._proxy.stride() == v.stride()
    assert torch.equal(vb.cpu(), x.cpu().t())
    assert ctx is None


def test_a_device_tensor_keeps_one_proxy_and_can_still_be_swapped():
    x = torch.randn(3, 5).to("trnsim")
    assert x._proxy is x._proxy  # one object while memory and view stay: Dynamo sees one input
    y = torch.randn(3, 5).to("trnsim")
    _ = y._proxy
    want_x, want_y = y.cpu(), x.cpu()
    torch.utils.swap_tensors(x, y)  # refused if the proxy held a weak reference to its tensor
    assert torch.equal(x.cpu(), want_x) and torch.equal(y.cpu(), want_y)
    assert _device.device_tensor_of(x._proxy)._trn is x._trn
    with torch.no_grad():
        x.data = torch.zeros(3, 5).to("trnsim")  # new memory, same view: a new proxy
    assert _device.device_tensor_of(x._proxy)._trn is x._trn


def test_deepcopy_of_a_device_model_is_independent_and_keeps_its_ties():
    torch.manual_seed(4)
    m = TiedLM().to("trnsim")
    before = m.embed.weight.detach().cpu().clone()
    c = copy.deepcopy(m)
    assert c.lm_head.weight is c.embed.weight and c.embed.weight is not m.embed.weight
    assert isinstance(c.embed.weight, torch.nn.Parameter) and c.embed.weight.requires_grad
    with torch.no_grad():
        c.embed.weight.mul_(0)
    del c
    assert torch.equal(m.embed.weight.detach().cpu(), before)
