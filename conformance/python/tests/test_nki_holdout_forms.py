"""Forms that AWS's published per-instruction tests use and the front-end lacked (issue 23, the
hold-out lines), each written here from AWS's `nki.isa` / `nki.language` documentation, with a
NumPy reference. Kernels are ours."""

import numpy as np
import pytest
import trnsim.nki

trnsim.nki.install()

import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc import nki
from trnsim.nki import NkiError


def _cumulative_ref(x, op0, imm0, op1, reg, reverse0=False):
    """AWS's pseudocode, in float32: reg = op1(op0(x[i], imm0), reg); out[i] = reg."""
    f = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "max": np.maximum, "min": np.minimum}
    out = np.empty_like(x)
    reg = np.asarray(reg, np.float32).reshape(-1)
    for i in range(x.shape[1]):
        v = f[op0](imm0, x[:, i]) if reverse0 else f[op0](x[:, i], imm0)
        reg = f[op1](v.astype(np.float32), reg).astype(np.float32)
        out[:, i] = reg
    return out, reg


@pytest.mark.parametrize(
    "op1, reset", [("add", 0.0), ("subtract", 0.0), ("multiply", 1.0), ("max", -np.inf), ("min", np.inf)]
)
def test_tensor_scalar_cumulative_every_reduction_and_the_carried_accumulator(op1, reset):
    @nki.jit
    def kernel(x, start):
        out1 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        out2 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        out3 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        s = nl.load(start)
        a = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        c = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(dst=a, src=t, op0=np.multiply, op1=getattr(nl, op1), imm0=0.5)
        # reduce: the accumulator goes on from where the previous call left it
        nisa.tensor_scalar_cumulative(
            dst=b, src=t, op0=np.subtract, op1=getattr(nl, op1), imm0=0.25, reduce_cmd=nisa.reduce_cmd.reduce
        )
        # load_reduce from a [P, 1] tile, with imm0 first (reverse0)
        nisa.tensor_scalar_cumulative(
            dst=c,
            src=t,
            op0=np.subtract,
            op1=getattr(nl, op1),
            imm0=2.0,
            imm1=s,
            reduce_cmd=nisa.reduce_cmd.load_reduce,
            reverse0=True,
        )
        nl.store(out1, a)
        nl.store(out2, b)
        nl.store(out3, c)
        return out1, out2, out3

    rng = np.random.default_rng(7)
    x = (rng.random((64, 24), dtype=np.float32) * 1.5 + 0.25).astype(np.float32)
    start = rng.random((64, 1), dtype=np.float32)
    got1, got2, got3 = kernel(x, start)
    want1, reg = _cumulative_ref(x, "multiply", np.float32(0.5), op1, np.full(64, reset, np.float32))
    want2, _ = _cumulative_ref(x, "subtract", np.float32(0.25), op1, reg)
    want3, _ = _cumulative_ref(x, "subtract", np.float32(2.0), op1, start, reverse0=True)
    # VectorE computes in fp32 as the reference does: the same bits
    np.testing.assert_array_equal(got1, want1)
    np.testing.assert_array_equal(got2, want2)
    np.testing.assert_array_equal(got3, want3)


def test_tensor_scalar_cumulative_refusals_name_the_rule():
    def run(**kw):
        @nki.jit
        def kernel(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            d = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar_cumulative(dst=d, src=nl.load(x), op0=np.add, imm0=1.0, **kw)
            nl.store(out, d)
            return out

        return kernel

    x = np.ones((8, 4), np.float32)
    with pytest.raises(NkiError, match="no earlier tensor_scalar_cumulative"):
        run(op1=np.add, reduce_cmd=nisa.reduce_cmd.reduce)(x)
    with pytest.raises(NkiError, match="loads the accumulator from imm1"):
        run(op1=np.add, reduce_cmd=nisa.reduce_cmd.load_reduce)(x)
    with pytest.raises(NkiError, match="op1 must be add, subtract, multiply, max or min"):
        run(op1=np.equal)(x)
    with pytest.raises(NkiError, match="int32/uint32"):
        run(op1=np.add)(np.ones((8, 4), np.int32))


def test_an_hbm_argument_is_truthy_and_a_tile_is_not():
    @nki.jit
    def kernel(x, y):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        u = nl.load(y) if y else None  # "was y passed": y's values are not read
        nl.store(out, nl.add(t, u))
        return out

    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    np.testing.assert_array_equal(kernel(x, x), x + x)

    @nki.jit
    def bad(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out, t if t else nl.negative(t))
        return out

    with pytest.raises(NkiError, match="a tile has no truth value"):
        bad(x)


def _range_select_chain(first_cmd):
    @nki.jit(platform_target="trn2")
    def kernel(a, b):
        res = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        lo = nl.zeros((a.shape[0], 1), dtype=nl.float32)
        hi = nl.full((a.shape[0], 1), 6.0, dtype=nl.float32)
        r = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
        common = {"comp_op0": np.greater_equal, "comp_op1": np.less, "bound0": lo, "bound1": hi}
        common |= {"reduce_op": np.max, "on_false_value": nl.fp32.min}
        nisa.range_select(on_true_tile=nl.load(a), reduce_cmd=first_cmd, **common)
        nisa.range_select(on_true_tile=nl.load(b), reduce_cmd=nisa.reduce_cmd.reduce, reduce_res=r, **common)
        nl.store(res, r)
        return res

    return kernel


def test_range_select_reduce_carries_the_accumulator_across_calls():
    # AWS's range_select: reduce_cmd=reduce continues the max of the earlier calls
    # (reset_reduce starts it); before, the second call's reduce_res held its own max only
    rng = np.random.default_rng(3)
    a = rng.random((16, 10), dtype=np.float32) * 10
    b = rng.random((16, 10), dtype=np.float32)
    got = _range_select_chain(nisa.reduce_cmd.reset_reduce)(a, b)
    want = np.maximum(a[:, :6].max(axis=1), b[:, :6].max(axis=1))[:, None]
    np.testing.assert_array_equal(got, want)
    assert (got[:, 0] > b[:, :6].max(axis=1)).any()  # the case that used to come out wrong
    with pytest.raises(NkiError, match="no earlier call of this kernel set it"):
        _range_select_chain(nisa.reduce_cmd.reduce)(a, b)


def test_accumulator_arguments_a_call_does_not_model_are_refused_not_dropped():
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        r = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.sbuf)
        d = nisa.scalar_tensor_tensor(
            data=t, op0=np.add, operand0=1.0, op1=np.multiply, operand1=t, reduce_op=np.add, reduce_res=r
        )
        nl.store(out, d)
        return out

    with pytest.raises(NkiError, match="scalar_tensor_tensor\\(reduce_res=...\\) is not modelled"):
        kernel(np.ones((8, 4), np.float32))


def test_a_broadcast_of_more_than_65535_elements_per_partition_row_stays_in_two_dimensions():
    # a [1, 1] tile broadcast over [128, 1024]: the DMA's source walks 128 x 1024 elements with
    # step 0, which as one dimension would exceed an access pattern's 16-bit element count
    @nki.jit
    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.multiply(nl.load(a), nl.load(b[0:1, 0:1])))
        return out

    a = np.random.default_rng(1).random((128, 1024), dtype=np.float32)
    b = np.array([[3.0]], np.float32)
    np.testing.assert_array_equal(kernel(a, b), a * np.float32(3.0))


def test_store_pairs_a_tile_with_a_tensor_of_the_same_elements_per_partition_in_order():
    # nl.store is a DMA, which moves a stream of elements: a [P, 12] tile into a [P, 3, 4] tensor
    @nki.jit
    def kernel(x):
        out = nl.ndarray((x.shape[0], 3, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(x), 1.0))
        return out

    x = np.arange(16 * 12, dtype=np.float32).reshape(16, 12)
    np.testing.assert_array_equal(kernel(x), (x + 1).reshape(16, 3, 4))

    @nki.jit
    def other_count(x):
        out = nl.ndarray((x.shape[0], 5, 2), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(x))
        return out

    with pytest.raises(NkiError, match="cannot be broadcast"):
        other_count(x)


def test_dma_transpose_of_an_indirect_view_is_a_clear_refusal():
    @nki.jit(platform_target="trn2")
    def kernel(src, idx):
        i_p = nl.arange(8)[:, None]
        ix = nl.load(idx)
        iy = nl.arange(src.shape[1])[None, :, None]
        iz = nl.arange(src.shape[2])[None, None, :]
        t = nisa.dma_transpose(src[ix[i_p, 0], iy, iz], axes=(2, 1, 0))
        out = nl.ndarray(t.shape, dtype=src.dtype, buffer=nl.shared_hbm)
        nl.store(out, t)
        return out

    with pytest.raises(NkiError, match="dma_transpose of an indirectly indexed view"):
        kernel(np.ones((16, 2, 4), np.float16), np.arange(8, dtype=np.int32).reshape(8, 1))


def _pe_tiled(target, size, pos):
    @nki.jit(platform_target=target)
    def kernel(s, m):
        out = nl.ndarray((s.shape[1], m.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
        r = nisa.nc_matmul(nl.load(s), nl.load(m), tile_position=pos, tile_size=size)
        nl.store(out, r)
        return out

    return kernel


def test_nc_matmul_pe_tiling_checks_the_documented_rules_and_computes_the_matmul():
    rng = np.random.default_rng(5)
    s = rng.integers(-8, 8, (32, 24)).astype(np.float32)
    m = rng.integers(-8, 8, (32, 100)).astype(np.float32)
    want = s.T @ m  # small integers: exact in fp32 in any order
    # 32-row tiles are NeuronCore-v3's (trn2); 64 is the smallest on trn1
    np.testing.assert_array_equal(_pe_tiled("trn2", (32, 32), (96, 32))(s, m), want)
    np.testing.assert_array_equal(_pe_tiled("trn1", (64, 64), (64, 0))(s, m), want)
    with pytest.raises(NkiError, match="must be one of \\[64, 128\\]"):
        _pe_tiled("trn1", (32, 32), (0, 0))(s, m)
    with pytest.raises(NkiError, match="start_row 16 must be a multiple of 32"):
        _pe_tiled("trn2", (32, 32), (16, 0))(s, m)
    with pytest.raises(NkiError, match="exceeds tile_size"):
        _pe_tiled("trn2", (32, 32), (0, 0))(np.ones((64, 24), np.float32), np.ones((64, 8), np.float32))


def test_the_mask_of_a_tile_indexed_atomic_rmw_and_dma_copy_keeps_its_rows():
    # before, both dropped mask= on a tile-indexed HBM side and updated every row: a wrong number
    @nki.jit
    def rmw(base, idx, val):
        out = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(base))
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(64)[None, :]
        rows = nl.load(idx)
        nl.atomic_rmw(out[rows[i_p, 0], i_f], value=nl.load(val), op=np.add, mask=(i_p < 40))
        return out

    @nki.jit
    def copy(base, idx, val):
        out = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(base))
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(64)[None, :]
        rows = nl.load(idx)
        nisa.dma_copy(dst=out[rows[i_p, 0], i_f], src=nl.load(val), mask=(i_p >= 100))
        return out

    rng = np.random.default_rng(11)
    base = rng.random((128, 64), dtype=np.float32)
    idx = rng.permutation(128).astype(np.int32)[:, None]
    val = rng.random((128, 64), dtype=np.float32)
    want = base.copy()
    want[idx[:40, 0]] += val[:40]
    np.testing.assert_array_equal(rmw(base, idx, val), want)
    want = base.copy()
    want[idx[100:, 0]] = val[100:]
    np.testing.assert_array_equal(copy(base, idx, val), want)

    @nki.jit
    def tile_mask(base, idx, val):
        out = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(base))
        rows = nl.load(idx)
        keep = nl.not_equal(rows, 0)
        nl.atomic_rmw(out[rows, nl.arange(64)[None, :]], value=nl.load(val), op=np.add, mask=keep)
        return out

    with pytest.raises(NkiError, match="a data-dependent mask is not supported"):
        tile_mask(base, idx, val)


def test_a_kernel_named_like_a_test_is_not_collected_by_pytest(tmp_path):
    # A test module may define its kernel at module level under a `test_` name; the jit object
    # wraps the function (`__wrapped__`), so pytest would take it for a test function and fail on
    # its parameters as unknown fixtures. The kernel must stay out of the collection, and the
    # module's real test must still be collected and pass.
    import subprocess
    import sys

    mod = tmp_path / "test_kernel_named_test.py"
    mod.write_text(
        "import numpy as np\n"
        "import trnsim.nki\n"
        "trnsim.nki.install()\n"
        "import neuronxcc.nki as nki\n"
        "import neuronxcc.nki.language as nl\n"
        "\n"
        "@nki.jit\n"
        "def test_doubling(x):\n"
        "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    nl.store(out, value=nl.add(nl.load(x), nl.load(x)))\n"
        "    return out\n"
        "\n"
        "def test_uses_the_kernel():\n"
        "    x = np.arange(8, dtype=np.float32).reshape(2, 4)\n"
        "    assert np.array_equal(test_doubling(x), 2 * x)\n"
    )

    @nki.jit
    def test_k(x):
        return x

    assert test_k.__test__ is False
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(mod)],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout, r.stdout
