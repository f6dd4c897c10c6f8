"""Kernels written the way kernel engineers write them, in patterns the corpus does not cover.

Each kernel is our own, written from the public NKI API pages (legacy `neuronxcc.nki`), and is
checked against a NumPy reference: exactly where the engines' math is exact (copies, selects,
integer work, max, fp32 adds of the same order), else `np.allclose` at fp32 tutorial tolerances.
"""

import ml_dtypes
import numpy as np
import pytest
import trnsim.nki

trnsim.nki.install()

import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt
from neuronxcc import nki


def rng(seed):
    return np.random.default_rng(seed)


# 1. Linear layer: out[M, N] = x[M, K] @ w[K, N] + bias, x loaded transposed with
#    load_transpose2d, PSUM accumulation over K tiles in an affine_range inside a sequential M loop.
@nki.jit
def linear_bias(x, w, bias):
    M, K = x.shape
    _, N = w.shape
    TK, TM = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    b_row = nl.load(bias.reshape((1, N)))
    b_tile = b_row.broadcast_to((TM, N))
    for m in nl.sequential_range(M // TM):
        acc = nl.zeros((TM, N), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(K // TK):
            xt = nl.load_transpose2d(x[m * TM : (m + 1) * TM, k * TK : (k + 1) * TK])
            wt = nl.load(w[k * TK : (k + 1) * TK, 0:N])
            acc += nl.matmul(xt, wt, transpose_x=True)
        res = nl.add(acc, b_tile, dtype=x.dtype)
        nl.store(out[m * TM : (m + 1) * TM, 0:N], value=res)
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_linear_bias(seed):
    r = rng(seed)
    x = r.standard_normal((256, 384), np.float32)
    w = r.standard_normal((384, 256), np.float32)
    b = r.standard_normal((256,), np.float32)
    want = x.astype(np.float64) @ w + b
    np.testing.assert_allclose(linear_bias(x, w, b), want, rtol=1e-4, atol=1e-4)


# 2. nisa.nc_matmul with mgrid indices, into an explicit psum tile, evicted with tensor_copy.
@nki.jit
def matmul_mgrid(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    ik, im = nl.mgrid[0:K, 0:M]
    jk, jn = nl.mgrid[0:K, 0:N]
    om, on = nl.mgrid[0:M, 0:N]
    a = nl.load(lhsT[ik, im])
    b = nl.load(rhs[jk, jn])
    ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    ps[om, on] = nisa.nc_matmul(a[ik, im], b[jk, jn])
    sb = nisa.tensor_copy(ps, dtype=nl.float32)
    nl.store(out[om, on], value=sb[om, on])
    return out


def test_nc_matmul_mgrid():
    r = rng(2)
    a = r.standard_normal((128, 96), np.float32)
    b = r.standard_normal((128, 384), np.float32)
    np.testing.assert_allclose(matmul_mgrid(a, b), a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


# 3. Softmax with nisa.activation: per-row bias (-max) and per-row scale (1/temperature) tiles,
#    the row sum from the activation's reduce registers.
@nki.jit
def scaled_softmax(x, inv_temp):
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    xt = nl.load(x)
    scale = nl.load(inv_temp)  # [P, 1]
    mx = nisa.tensor_reduce(np.max, data=xt, axis=(1,), keepdims=True)
    neg = nisa.tensor_tensor(mx, scale, op=np.multiply)
    neg = nisa.tensor_scalar(neg, np.multiply, -1.0)
    ssum = nl.ndarray((P, 1), dtype=nl.float32)
    e = nisa.activation(
        op=nl.exp,
        data=xt,
        bias=neg,
        scale=scale,
        reduce_op=nl.add,
        reduce_res=ssum,
        reduce_cmd=nisa.reduce_cmd.reset_reduce,
    )
    inv = nisa.reciprocal(ssum)
    y = nisa.tensor_scalar(e, np.multiply, inv)
    nl.store(out, value=y)
    return out


def test_activation_bias_scale_tiles_and_reduce():
    r = rng(3)
    x = r.standard_normal((128, 200), np.float32) * 3
    t = r.uniform(0.5, 2.0, (128, 1)).astype(np.float32)
    z = x.astype(np.float64) * t
    e = np.exp(z - z.max(1, keepdims=True))
    np.testing.assert_allclose(scaled_softmax(x, t), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


# 4. Mamba-style selective scan: h_t = exp(dt*A) * h_{t-1} + dt*B*u, chunked along the sequence,
#    the last state of a chunk carried into the next as the scan's initial tile.
@nki.jit
def selective_scan(delta, u, a, b):
    C, L = delta.shape  # channels on partitions, sequence on free
    CH = 128
    out = nl.ndarray((C, L), dtype=nl.float32, buffer=nl.shared_hbm)
    a_col = nl.load(a)  # [C, 1]
    state = nl.zeros((C, 1), dtype=nl.float32)
    for c in nl.sequential_range(L // CH):
        dt = nl.load(delta[0:C, nl.ds(c * CH, CH)])
        uu = nl.load(u[0:C, nl.ds(c * CH, CH)])
        bb = nl.load(b[0:C, nl.ds(c * CH, CH)])
        da = nisa.activation(op=nl.exp, data=dt, scale=a_col)
        dbu = nl.multiply(nl.multiply(dt, bb), uu)
        h = nisa.tensor_tensor_scan(da, dbu, initial=state, op0=np.multiply, op1=np.add)
        nl.store(out[0:C, nl.ds(c * CH, CH)], value=h)
        state = nl.copy(h[0:C, CH - 1 : CH])
    return out


def test_selective_scan_chunked():
    r = rng(4)
    C, L = 64, 512
    delta = r.uniform(0.01, 0.2, (C, L)).astype(np.float32)
    u = r.standard_normal((C, L), np.float32)
    a = -r.uniform(0.5, 2.0, (C, 1)).astype(np.float32)
    b = r.standard_normal((C, L), np.float32)
    da = np.exp(delta.astype(np.float64) * a)
    dbu = delta.astype(np.float64) * b * u
    want = np.zeros((C, L))
    h = np.zeros(C)
    for t in range(L):
        h = da[:, t] * h + dbu[:, t]
        want[:, t] = h
    np.testing.assert_allclose(selective_scan(delta, u, a, b), want, rtol=1e-4, atol=1e-5)


# 5. Causal attention scores: q-tile loop, affine_select with the tile offset in the predicate.
@nki.jit
def causal_scores(qT, kT, scale):
    S = qT.shape[1]
    out = nl.ndarray((S, S), dtype=nl.float32, buffer=nl.shared_hbm)
    k_all = nl.load(kT)
    for qi in nl.affine_range(S // 128):
        q = nl.load(qT[:, nl.ds(qi * 128, 128)])
        s_ps = nisa.nc_matmul(q, k_all)
        s = nl.multiply(s_ps, scale)
        i_q = nl.arange(128)[:, None]
        i_k = nl.arange(S)[None, :]
        masked = nisa.affine_select(pred=(qi * 128 + i_q - i_k >= 0), on_true_tile=s, on_false_value=-9984.0)
        nl.store(out[nl.ds(qi * 128, 128), :], value=masked)
    return out


def test_causal_scores_affine_select():
    r = rng(5)
    q = r.standard_normal((64, 256), np.float32)
    k = r.standard_normal((64, 256), np.float32)
    s = q.T.astype(np.float64) @ k * 0.125
    want = np.where(np.tril(np.ones((256, 256), bool)), s, -9984.0)
    np.testing.assert_allclose(causal_scores(q, k, 0.125), want, rtol=1e-4, atol=1e-4)


# 6. One-hot encoding and label-smoothed targets: iota of class ids compared with a label column.
@nki.jit
def one_hot(labels, n_classes, smoothing):
    N = labels.shape[0]
    out = nl.ndarray((N, n_classes), dtype=nl.float32, buffer=nl.shared_hbm)
    lab = nl.load(labels)  # [N, 1] int32
    cls = nisa.iota(nl.arange(n_classes)[None, :], dtype=nl.int32)  # [1, C]
    cls = cls.broadcast_to((N, n_classes))
    hit = nl.equal(cls, lab)
    on = 1.0 - smoothing + smoothing / n_classes
    off = smoothing / n_classes
    y = nl.where(hit, nl.full((N, n_classes), on, nl.float32), off)
    nl.store(out, value=y)
    return out


def test_iota_where_one_hot():
    r = rng(6)
    labels = r.integers(0, 10, (100, 1)).astype(np.int32)
    got = one_hot(labels, 10, 0.1)
    on, off = np.float32(1.0 - 0.1 + 0.1 / 10), np.float32(0.1 / 10)
    want = np.where(np.arange(10)[None, :] == labels, on, off).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6)


# 7. SPMD row blocks over a [spmd_dim(nc(2), 2), 2] grid with a tuple of outputs: row max and row sum.
@nki.jit
def row_stats(x: nt.tensor[(512, 256), nl.float32]):
    R = x.shape[0]
    mx = nl.ndarray((R, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    sm = nl.ndarray((R, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    pid = nl.program_id(0) * nl.num_programs(1) + nl.program_id(1)
    rows = R // (nl.num_programs(0) * nl.num_programs(1))
    t = nl.load(x[nl.ds(pid * rows, rows), :])
    nl.store(mx[nl.ds(pid * rows, rows), :], value=nl.max(t, axis=1, keepdims=True))
    nl.store(sm[nl.ds(pid * rows, rows), :], value=nl.sum(t, axis=-1, keepdims=True))
    return mx, sm


def test_spmd_dim_grid_tuple_outputs():
    x = rng(7).standard_normal((512, 256), np.float32)
    mx, sm = row_stats[nl.spmd_dim(nl.nc(2), 2), 2](x)  # a 4 x 2 grid, first dim over 2 cores
    np.testing.assert_array_equal(mx, x.max(1, keepdims=True))
    np.testing.assert_allclose(sm, x.astype(np.float64).sum(1, keepdims=True), rtol=1e-5, atol=1e-4)


# 8. Weight-only int8 dequant matmul: int8 weights times a per-row scale, cast to bf16, matmul.
@nki.jit
def dequant_matmul(xT, w_q, w_scale, out_dtype):
    M = xT.shape[1]
    _, N = w_q.shape
    out = nl.ndarray((M, N), dtype=out_dtype, buffer=nl.shared_hbm)
    x_bf = nl.load(xT, dtype=nl.bfloat16)
    wq = nl.load(w_q)
    sc = nl.load(w_scale)  # [K, 1] per-row scale
    w = nl.multiply(wq, sc, dtype=nl.bfloat16)
    ps = nl.matmul(x_bf, w, transpose_x=True)
    nl.store(out, value=nl.copy(ps, dtype=out_dtype))
    return out


def test_int8_dequant_matmul():
    r = rng(8)
    x = r.standard_normal((128, 64)).astype(np.float32)
    wq = r.integers(-127, 128, (128, 256)).astype(np.int8)
    sc = (2.0 ** -r.integers(4, 8, (128, 1))).astype(np.float32)  # powers of two: the bf16 cast is exact
    got = dequant_matmul(x, wq, sc, nl.float32)
    xb = x.astype(ml_dtypes.bfloat16).astype(np.float64)
    want = xb.T @ (wq.astype(np.float64) * sc)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


# 9. nisa.tensor_reduce over a 3-D tile with negative axes and keepdims, then a broadcast subtract.
@nki.jit
def group_center(x, groups):
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x).reshape((P, groups, F // groups))
    m = nisa.tensor_reduce(np.add, data=t, axis=(-1,), keepdims=True)
    m = nl.multiply(m, 1.0 / (F // groups))
    y = nl.subtract(t, m)
    nl.store(out, value=y.reshape((P, F)))
    return out


def test_tensor_reduce_negative_axis_keepdims():
    x = rng(9).standard_normal((128, 64), np.float32)
    g = x.astype(np.float64).reshape(128, 4, 16)
    want = (g - g.mean(-1, keepdims=True)).reshape(128, 64)
    np.testing.assert_allclose(group_center(x, 4), want, rtol=1e-5, atol=1e-6)


# 10. Embedding lookup with an indirect load (index tile on the table's first dim), benchmarked.
@nki.jit
def embed(table, ids):
    D = table.shape[1]
    N = ids.shape[0]
    out = nl.ndarray((N, D), dtype=table.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(N)[:, None]
    i_f = nl.arange(D)[None, :]
    idx = nl.load(ids[i_p, 0])
    rows = nl.load(table[idx[i_p, 0], i_f])
    nl.store(out[i_p, i_f], value=rows)
    return out


def test_embedding_indirect_load_benchmark():
    r = rng(10)
    table = r.standard_normal((1000, 64)).astype(ml_dtypes.bfloat16)
    ids = r.integers(0, 1000, (96, 1)).astype(np.int32)
    bench = nki.benchmark(warmup=1, iters=2)(embed)
    got = bench(table, ids)
    np.testing.assert_array_equal(got.view(np.uint16), table[ids[:, 0]].view(np.uint16))
    assert bench.benchmark_result.nc_latency.get_latency_percentile(50) > 0


# 11. Column-wise work on single free positions: `t[:, j]` is a 1-D (one element per partition)
#     operand of the element-wise ops, written back into a column of an SBUF tile.
@nki.jit
def pair_sums(x):
    P, F = x.shape
    out = nl.ndarray((P, F // 2), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    res = nl.ndarray((P, F // 2), dtype=x.dtype, buffer=nl.sbuf)
    for j in nl.affine_range(F // 2):
        res[:, j] = nl.add(t[:, 2 * j], t[:, 2 * j + 1])
    res[:, 0] = nl.multiply(t[:, 0], 2.0)
    res[:, 1] = nl.maximum(t[:, 1], t[:, 2])
    res[:, 2] = nl.where(t[:, 0] > 0.0, t[:, 1], t[:, 2:3])  # 1-D and [P, 1] operands mixed
    res[:, 3] = nisa.activation(nl.exp, t[:, 4], bias=t[:, 5:6], scale=t[:, 6])
    nl.store(out, value=nl.subtract(res, t[:, 3]))  # a 1-D operand against [P, F]: per partition
    return out


def test_one_dimensional_column_operands():
    x = rng(11).standard_normal((128, 16), np.float32)
    want = x[:, 0::2] + x[:, 1::2]
    want[:, 0] = 2 * x[:, 0]
    want[:, 1] = np.maximum(x[:, 1], x[:, 2])
    want[:, 2] = np.where(x[:, 0] > 0, x[:, 1], x[:, 2])
    got = pair_sums(x)
    want -= x[:, 3:4]
    np.testing.assert_array_equal(np.delete(got, 3, axis=1), np.delete(want, 3, axis=1))
    # exp on ScalarE then an fp32 subtract: compare the exp, with the subtract undone
    e = np.exp(x[:, 4].astype(np.float64) * x[:, 6] + x[:, 5])
    np.testing.assert_allclose(got[:, 3].astype(np.float64) + x[:, 3], e, rtol=1e-5, atol=1e-5)


# 12. Ragged rows through ISA calls: a 128-partition tile over fewer valid rows, every nisa call
#     masked to them, then a fused exp with a per-row sum and a reciprocal-multiply normalisation.
@nki.jit
def ragged_row_normalise(x, alpha):
    R, F = x.shape
    out = nl.ndarray((R, F), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(F)[None, :]
    valid = i_p < R
    t = nl.load(x[i_p, i_f], mask=valid)
    y = nisa.tensor_scalar(t[i_p, i_f], np.multiply, alpha, mask=valid)
    s = nl.ndarray((128, 1), dtype=nl.float32)
    e = nisa.activation_reduce(op=np.exp, data=y[i_p, i_f], reduce_op=np.add, reduce_res=s[i_p, 0], mask=valid)
    inv = nisa.reciprocal(s[i_p, 0], mask=valid)
    z = nisa.tensor_scalar(e[i_p, i_f], np.multiply, inv[i_p, 0], mask=valid)
    nl.store(out[i_p, i_f], value=z[i_p, i_f], mask=valid)
    return out


def test_ragged_rows_through_masked_isa_calls():
    x = rng(12).standard_normal((100, 64), np.float32)
    e = np.exp(0.5 * x.astype(np.float64))
    np.testing.assert_allclose(ragged_row_normalise(x, 0.5), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


# 13. An ALU operator trnsim's NC-v2 lacks: the error names the line and says what to use instead.
@nki.jit
def divide_by_row_sum(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    s = nl.sum(t, axis=1, keepdims=True)
    nl.store(out, value=nisa.tensor_scalar(t, np.divide, s))
    return out


def test_isa_divide_error_says_what_to_use():
    with pytest.raises(
        trnsim.nki.NkiError,
        match=r"test_nki_unseen.py:\d+: 'divide' is not an ALU operator.*"
        r"nisa.reciprocal",
    ):
        divide_by_row_sum(np.ones((128, 8), np.float32))


# 14. A row sum over a long row, chunk by chunk, in ScalarE's reduce registers: the first chunk
#     resets them, later chunks add (reduce_cmd=reduce), the last one reads them out.
@nki.jit
def chunked_exp_sum(x):
    P, F = x.shape
    CH = 512
    out = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    total = nl.ndarray((P, 1), dtype=nl.float32)
    n = F // CH
    for c in nl.sequential_range(n):
        t = nl.load(x[:, nl.ds(c * CH, CH)])
        cmd = nisa.reduce_cmd.reset_reduce if c == 0 else nisa.reduce_cmd.reduce
        if c == n - 1:
            nisa.activation(np.exp, t, reduce_op=np.add, reduce_res=total, reduce_cmd=cmd)
        else:
            nisa.activation(np.exp, t, reduce_cmd=cmd)
    nl.store(out, value=total)
    return out


@pytest.mark.parametrize("f", [1024, 1536])
def test_activation_reduce_registers_across_calls(f):
    x = rng(f).standard_normal((128, f), np.float32)
    want = np.exp(x.astype(np.float64)).sum(1, keepdims=True)
    np.testing.assert_allclose(chunked_exp_sum(x), want, rtol=1e-5)


def test_activation_reduce_cmd_idle_reads_the_registers_unchanged():
    @nki.jit
    def k(x):
        out = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        s = nl.ndarray((x.shape[0], 1), dtype=nl.float32)
        nisa.activation(np.exp, nl.load(x[:, 0:256]), reduce_cmd=nisa.reduce_cmd.reset_reduce)
        # idle: this call's exp is not added; the registers (the first half's sum) are read out
        nisa.activation(np.exp, nl.load(x[:, 256:512]), reduce_op=np.add, reduce_res=s, reduce_cmd=nisa.reduce_cmd.idle)
        nl.store(out, value=s)
        return out

    x = rng(13).standard_normal((128, 512), np.float32)
    np.testing.assert_allclose(k(x), np.exp(x[:, :256].astype(np.float64)).sum(1, keepdims=True), rtol=1e-5)


def test_select_reduce_carrying_max_across_calls_says_so():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        sel = nl.ndarray(x.shape, dtype=x.dtype)
        red = nl.ndarray((x.shape[0], 1), dtype=nl.float32)
        pred = nl.greater(t, 0.0, dtype=nl.uint8)
        nisa.select_reduce(
            dst=sel, predicate=pred, on_true=t, on_false=-1.0, reduce_res=red, reduce_cmd=nisa.reduce_cmd.reduce
        )
        nl.store(out, value=sel)
        return out

    with pytest.raises(trnsim.nki.NkiError, match="reduce_cmd=reduce .* not supported by trnsim"):
        k(np.ones((128, 8), np.float32))


def test_tensor_scalar_on_trn1_scalar_engine_is_refused_at_the_kernel_line():
    @nki.jit(platform_target="trn1")
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.tensor_scalar(nl.load(x), np.multiply, 2.0, engine=nisa.scalar_engine))
        return out

    with pytest.raises(trnsim.nki.NkiError, match=r"test_nki_unseen.py:\d+: nisa.tensor_scalar on the Scalar Engine"):
        k(np.ones((128, 8), np.float32))


# 15. Rotary embedding on interleaved pairs: strided tile views (`t[:, 0:D:2]`) read and written.
@nki.jit
def rope_interleaved(x, cos, sin):
    S, D = x.shape
    out = nl.ndarray((S, D), dtype=x.dtype, buffer=nl.shared_hbm)
    for s in nl.affine_range(S // 128):
        t = nl.load(x[nl.ds(s * 128, 128), :])
        c = nl.load(cos[nl.ds(s * 128, 128), :])
        sn = nl.load(sin[nl.ds(s * 128, 128), :])
        ev, od = t[:, 0:D:2], t[:, 1:D:2]
        res = nl.ndarray((128, D), dtype=x.dtype)
        res[:, 0:D:2] = nl.subtract(nl.multiply(ev, c), nl.multiply(od, sn))
        res[:, 1:D:2] = nl.add(nl.multiply(ev, sn), nl.multiply(od, c))
        nl.store(out[nl.ds(s * 128, 128), :], value=res)
    return out


def test_rope_strided_views():
    r = rng(15)
    x = r.standard_normal((256, 64), np.float32)
    ang = r.uniform(0, 2 * np.pi, (256, 32))
    c, s = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    want = np.empty((256, 64))
    xd = x.astype(np.float64)
    want[:, 0::2] = xd[:, 0::2] * c - xd[:, 1::2] * s
    want[:, 1::2] = xd[:, 0::2] * s + xd[:, 1::2] * c
    np.testing.assert_allclose(rope_interleaved(x, c, s), want, rtol=1e-5, atol=1e-6)


# 16. SwiGLU MLP in bf16: gate/up projections produce hT blocks (a block dim before par_dim),
#     silu(g) * u, then the down projection accumulated in PSUM over the hidden blocks.
@nki.jit
def swiglu_mlp(xT, wg, wu, wd):
    M = xT.shape[1]
    F = wg.shape[1]
    N = wd.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    x_sb = nl.load(xT, dtype=nl.bfloat16)
    hT = nl.ndarray((F // 128, nl.par_dim(128), M), dtype=nl.bfloat16)
    for f in nl.affine_range(F // 128):
        g = nl.matmul(nl.load(wg[:, nl.ds(f * 128, 128)], dtype=nl.bfloat16), x_sb, transpose_x=True)
        u = nl.matmul(nl.load(wu[:, nl.ds(f * 128, 128)], dtype=nl.bfloat16), x_sb, transpose_x=True)
        hT[f] = nl.multiply(nl.silu(g), u, dtype=nl.bfloat16)
    acc = nl.zeros((M, N), nl.float32, buffer=nl.psum)
    for f in nl.affine_range(F // 128):
        acc += nl.matmul(hT[f], nl.load(wd[nl.ds(f * 128, 128), :], dtype=nl.bfloat16), transpose_x=True)
    nl.store(out, value=acc)
    return out


def test_swiglu_mlp_bf16():
    r = rng(16)
    xT = r.standard_normal((128, 64), np.float32) * 0.5
    wg, wu = (r.standard_normal((128, 256), np.float32) * 0.1 for _ in range(2))
    wd = r.standard_normal((256, 128), np.float32) * 0.1

    def bf(a):
        return a.astype(ml_dtypes.bfloat16).astype(np.float64)

    g, u = bf(xT).T @ bf(wg), bf(xT).T @ bf(wu)
    want = bf(g / (1 + np.exp(-g)) * u) @ bf(wd)
    # inputs and h through bf16 (as the kernel casts them); fp32 PSUM sums
    np.testing.assert_allclose(swiglu_mlp(xT, wg, wu, wd), want, rtol=2e-2, atol=2e-2)


# 17. Paged KV-cache gather: a block table picks whole [16, D] blocks of a 3-D cache, indexed with
#     3-D arange expressions and the table tile on the first dim (one indirect DMA).
@nki.jit
def gather_kv_blocks(cache, block_table):
    _, BS, D = cache.shape
    NB = block_table.shape[0]
    out = nl.ndarray((NB, BS, D), dtype=cache.dtype, buffer=nl.shared_hbm)
    ids = nl.load(block_table)
    i_p = nl.arange(NB)[:, None, None]
    i_s = nl.arange(BS)[None, :, None]
    i_d = nl.arange(D)[None, None, :]
    blocks = nl.load(cache[ids[i_p, 0], i_s, i_d])
    nl.store(out[i_p, i_s, i_d], value=blocks)
    return out


def test_paged_kv_gather_3d_indirect():
    r = rng(17)
    cache = r.standard_normal((12, 16, 32)).astype(ml_dtypes.bfloat16)
    table = r.permutation(12)[:5].astype(np.int32)[:, None]
    got = gather_kv_blocks(cache, table)
    np.testing.assert_array_equal(got.view(np.uint16), cache[table[:, 0]].view(np.uint16))


def test_runtime_offset_in_ds_says_what_is_supported():
    @nki.jit
    def k(x, off):
        out = nl.ndarray((x.shape[0], 8), dtype=x.dtype, buffer=nl.shared_hbm)
        o = nl.load(off)
        nl.store(out, value=nl.load(x[:, nl.ds(o[0, 0], 8)]))
        return out

    with pytest.raises(trnsim.nki.NkiError, match=r"test_nki_unseen.py:\d+: nl.ds with a tile-valued start"):
        k(np.ones((128, 64), np.float32), np.array([[5]], np.int32))


# 18. A row of one partition (`t[0, :]`, 1-D along the free axis) through VectorE and ScalarE ops.
@nki.jit
def first_row_ops(x):
    out = nl.ndarray((2, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out[0, :], value=nl.add(t[0, :], 1.0))
    nl.store(out[1, :], value=nl.exp(t[0, :]))
    return out


def test_one_partition_row_views():
    x = rng(18).standard_normal((128, 64), np.float32)
    got = first_row_ops(x)
    np.testing.assert_array_equal(got[0], x[0] + 1)
    np.testing.assert_allclose(got[1], np.exp(x[0].astype(np.float64)), rtol=1e-6)
