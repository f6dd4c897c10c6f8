"""An example NKI backend module for `trnconf run --backend nki:MODULE` (docs/nki-backend.md).

Twelve Core ATen overloads, each mapped to a hand-written NKI kernel (legacy `neuronxcc.nki` API,
Neuron SDK 2.26-2.28, NeuronCore-v2) and a wrapper that does the argument plumbing:

    trnconf run --backend nki:conformance/python/examples/nki_backend_example.py

Kernels tile rows onto the 128 partitions and columns along the free dimension, with
`nl.static_range` loops whose tile extents are Python ints (the shapes are static), so ragged
edges need no masks. Engines compute in fp32; every result is cast once, on the store.

Wrappers do layout only, never arithmetic: they flatten to 2-D, move the reduced dimensions last
(a permutation), broadcast an input to the output shape (a view in PyTorch, copied into HBM here),
transpose the stationary matmul operand to [K, M] as NKI's matmul wants it, and cross the int64
boundary (Trainium has no int64: int64 inputs are narrowed to int32 when every value fits, int32
results widened back). A call form they cannot serve raises NotImplementedError with the reason:
the case is reported unsupported, never passed.
"""

import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
from neuronxcc import nki

P = 128  # nl.tile_size.pmax: partitions per tile
F = 2048  # free-dim columns per tile: 8 KiB of fp32 per partition, several live tiles fit SBUF


def _tiles(n, size):
    """(start, extent) of each tile of `size` covering range(n) (static: n is a Python int)."""
    return [(s, min(size, n - s)) for s in range(0, n, size)]


# ------------------------------------------------------------------------------------------------
# Kernels


def _is_int(dt):
    return dt in (nl.int32, nl.int16, nl.int8, nl.uint8)


@nki.jit
def add_kernel(a, b, alpha, out_dtype):
    """out = a + alpha * b over [rows, cols] tensors of the same shape. Both inputs are cast to
    the result dtype on load (as PyTorch casts operands to the common dtype); floats compute on
    the Vector Engine in fp32, integers on GpSimd's exact int32 ALU, bools as logical or."""
    rows, cols = a.shape
    out = nl.ndarray((rows, cols), dtype=out_dtype, buffer=nl.shared_hbm)
    work = nl.int32 if _is_int(out_dtype) else out_dtype
    for r0, rp in _tiles(rows, P):
        for c0, cw in _tiles(cols, F):
            x = nl.load(a[r0 : r0 + rp, c0 : c0 + cw], dtype=work)
            y = nl.load(b[r0 : r0 + rp, c0 : c0 + cw], dtype=work)
            if out_dtype == nl.bool_:
                z = nl.logical_or(x, y, dtype=out_dtype)
            elif _is_int(out_dtype):
                if alpha != 1:
                    y = nisa.tensor_scalar(y, op0=nl.multiply, operand0=alpha, engine=nisa.gpsimd_engine)
                z = nisa.tensor_tensor(x, y, op=nl.add, dtype=out_dtype, engine=nisa.gpsimd_engine)
            elif alpha == 1:
                z = nl.add(x, y, dtype=out_dtype)
            else:
                z = nl.add(x, nl.multiply(y, alpha, dtype=nl.float32), dtype=out_dtype)
            nl.store(out[r0 : r0 + rp, c0 : c0 + cw], value=z)
    return out


@nki.jit
def mul_kernel(a, b, out_dtype):
    """out = a * b over [rows, cols] tensors of the same shape, operands cast to the result dtype
    on load; integers on GpSimd's exact int32 ALU, bools as logical and."""
    rows, cols = a.shape
    out = nl.ndarray((rows, cols), dtype=out_dtype, buffer=nl.shared_hbm)
    work = nl.int32 if _is_int(out_dtype) else out_dtype
    for r0, rp in _tiles(rows, P):
        for c0, cw in _tiles(cols, F):
            x = nl.load(a[r0 : r0 + rp, c0 : c0 + cw], dtype=work)
            y = nl.load(b[r0 : r0 + rp, c0 : c0 + cw], dtype=work)
            if out_dtype == nl.bool_:
                z = nl.logical_and(x, y, dtype=out_dtype)
            elif _is_int(out_dtype):
                z = nisa.tensor_tensor(x, y, op=nl.multiply, dtype=out_dtype, engine=nisa.gpsimd_engine)
            else:
                z = nl.multiply(x, y, dtype=out_dtype)
            nl.store(out[r0 : r0 + rp, c0 : c0 + cw], value=z)
    return out


@nki.jit
def exp_kernel(a, out_dtype):
    """out = exp(a) on the Scalar Engine."""
    rows, cols = a.shape
    out = nl.ndarray((rows, cols), dtype=out_dtype, buffer=nl.shared_hbm)
    for r0, rp in _tiles(rows, P):
        for c0, cw in _tiles(cols, F):
            x = nl.load(a[r0 : r0 + rp, c0 : c0 + cw])
            nl.store(out[r0 : r0 + rp, c0 : c0 + cw], value=nl.exp(x, dtype=out_dtype))
    return out


@nki.jit
def relu_kernel(a):
    """out = max(a, 0): the Scalar Engine's relu for floats, GpSimd's exact int32 max for integers
    (an fp32 engine pass would round int32 values beyond 2^24)."""
    rows, cols = a.shape
    out = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.shared_hbm)
    is_float = a.dtype in (nl.float32, nl.bfloat16, nl.float16)
    for r0, rp in _tiles(rows, P):
        for c0, cw in _tiles(cols, F):
            x = nl.load(a[r0 : r0 + rp, c0 : c0 + cw])
            if is_float:
                y = nl.relu(x, dtype=a.dtype)
            else:
                y = nisa.tensor_scalar(x, op0=nl.maximum, operand0=0, dtype=a.dtype, engine=nisa.gpsimd_engine)
            nl.store(out[r0 : r0 + rp, c0 : c0 + cw], value=y)
    return out


@nki.jit
def gelu_kernel(a, approximate):
    """out = gelu(a): the erf form, or the tanh approximation."""
    rows, cols = a.shape
    out = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.shared_hbm)
    for r0, rp in _tiles(rows, P):
        for c0, cw in _tiles(cols, F):
            x = nl.load(a[r0 : r0 + rp, c0 : c0 + cw])
            if approximate == "tanh":
                y = nl.gelu_apprx_tanh(x, dtype=a.dtype)
            else:
                y = nl.gelu(x, dtype=a.dtype)
            nl.store(out[r0 : r0 + rp, c0 : c0 + cw], value=y)
    return out


def _row_max(a, r0, rp, cols):
    """Max over the columns of rows [r0, r0+rp), one column tile at a time: [rp, 1] fp32."""
    m = None
    for c0, cw in _tiles(cols, F):
        x = nl.load(a[r0 : r0 + rp, c0 : c0 + cw])
        part = nl.max(x, axis=1, keepdims=True, dtype=nl.float32)
        m = part if m is None else nl.maximum(m, part)
    return m


def _row_sum_exp(a, r0, rp, cols, neg_max):
    """Sum over the columns of exp(x - max), one column tile at a time: [rp, 1] fp32."""
    s = None
    for c0, cw in _tiles(cols, F):
        x = nl.load(a[r0 : r0 + rp, c0 : c0 + cw])
        e = nl.exp(nl.add(x, neg_max, dtype=nl.float32))
        part = nl.sum(e, axis=1, keepdims=True, dtype=nl.float32)
        s = part if s is None else nl.add(s, part)
    return s


@nki.jit
def softmax_kernel(a):
    """Softmax along the last dim of [rows, cols]: three passes over column tiles (max, sum of
    exponentials, normalise), so rows longer than SBUF holds still work."""
    rows, cols = a.shape
    out = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.shared_hbm)
    for r0, rp in _tiles(rows, P):
        neg_max = nl.negative(_row_max(a, r0, rp, cols))
        inv_sum = nl.reciprocal(_row_sum_exp(a, r0, rp, cols, neg_max))
        for c0, cw in _tiles(cols, F):
            x = nl.load(a[r0 : r0 + rp, c0 : c0 + cw])
            e = nl.exp(nl.add(x, neg_max, dtype=nl.float32))
            nl.store(out[r0 : r0 + rp, c0 : c0 + cw], value=nl.multiply(e, inv_sum, dtype=a.dtype))
    return out


@nki.jit
def log_softmax_kernel(a):
    """log_softmax along the last dim of [rows, cols]: (x - max) - log(sum(exp(x - max))). As in
    PyTorch's CPU kernel, the sum is rounded to the input dtype before its log."""
    rows, cols = a.shape
    out = nl.ndarray((rows, cols), dtype=a.dtype, buffer=nl.shared_hbm)
    for r0, rp in _tiles(rows, P):
        neg_max = nl.negative(_row_max(a, r0, rp, cols))
        total = nl.copy(_row_sum_exp(a, r0, rp, cols, neg_max), dtype=a.dtype)
        log_sum = nl.log(total, dtype=nl.float32)
        for c0, cw in _tiles(cols, F):
            x = nl.load(a[r0 : r0 + rp, c0 : c0 + cw])
            shifted = nl.add(x, neg_max, dtype=nl.float32)
            nl.store(out[r0 : r0 + rp, c0 : c0 + cw], value=nl.subtract(shifted, log_sum, dtype=a.dtype))
    return out


@nki.jit
def layer_norm_kernel(a, weight, bias, eps):
    """Layer norm of each row of [rows, n]: y = (x - mean) * rstd * weight + bias, with the mean
    and rstd = 1/sqrt(var + eps) (biased variance) as [rows, 1] outputs. weight and bias are [1, n]
    or None. A row is held whole in SBUF (n fp32 per partition)."""
    rows, n = a.shape
    out = nl.ndarray((rows, n), dtype=a.dtype, buffer=nl.shared_hbm)
    mean_out = nl.ndarray((rows, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    rstd_out = nl.ndarray((rows, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    for r0, rp in _tiles(rows, P):
        # weight and bias: one row in HBM, broadcast across the tile's partitions
        w = None if weight is None else nl.broadcast_to(nl.load(weight), shape=(rp, n))
        b = None if bias is None else nl.broadcast_to(nl.load(bias), shape=(rp, n))
        x = nl.load(a[r0 : r0 + rp, 0:n], dtype=nl.float32)
        mean = nl.multiply(nl.sum(x, axis=1, keepdims=True), 1.0 / n)
        xc = nl.subtract(x, mean)
        var = nl.multiply(nl.sum(nl.multiply(xc, xc), axis=1, keepdims=True), 1.0 / n)
        rstd = nl.rsqrt(nl.add(var, eps))
        y = nl.multiply(xc, rstd)
        if w is not None:
            y = nl.multiply(y, w)
        if b is not None:
            y = nl.add(y, b)
        nl.store(out[r0 : r0 + rp, 0:n], value=nl.copy(y, dtype=a.dtype))
        nl.store(mean_out[r0 : r0 + rp, 0:1], value=nl.copy(mean, dtype=a.dtype))
        nl.store(rstd_out[r0 : r0 + rp, 0:1], value=nl.copy(rstd, dtype=a.dtype))
    return out, mean_out, rstd_out


def _matmul_into(out, lhsT, rhs, M, K, N, compute_dtype):
    """out[M, N] = lhsT.T @ rhs, lhsT [K, M] and rhs [K, N] in HBM: K is contracted on the
    partitions in tiles of 128 and accumulated in a PSUM bank [128, 512] fp32."""
    for m0, mp in _tiles(M, nl.tile_size.gemm_stationary_fmax):
        for n0, nw in _tiles(N, nl.tile_size.gemm_moving_fmax):
            acc = nl.zeros((mp, nw), nl.float32, buffer=nl.psum)
            for k0, kp in _tiles(K, P):
                lt = nl.load(lhsT[k0 : k0 + kp, m0 : m0 + mp], dtype=compute_dtype)
                rt = nl.load(rhs[k0 : k0 + kp, n0 : n0 + nw], dtype=compute_dtype)
                acc += nl.matmul(lt, rt, transpose_x=True)
            nl.store(out[m0 : m0 + mp, n0 : n0 + nw], value=nl.copy(acc, dtype=out.dtype))


def _compute_dtype(dt):
    """The Tensor Engine multiplies floats; integers go through it as fp32 (exact below 2^24)."""
    return dt if dt in (nl.float32, nl.bfloat16, nl.float16) else nl.float32


@nki.jit
def mm_kernel(lhsT, rhs):
    """out[M, N] = lhsT.T @ rhs for lhsT [K, M], rhs [K, N]."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    _matmul_into(out, lhsT, rhs, M, K, N, _compute_dtype(lhsT.dtype))
    return out


@nki.jit
def bmm_kernel(lhsT, rhs):
    """out[b] = lhsT[b].T @ rhs[b] for lhsT [B, K, M], rhs [B, K, N]."""
    B, K, M = lhsT.shape
    N = rhs.shape[2]
    out = nl.ndarray((B, M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for i in nl.static_range(B):
        _matmul_into(out[i], lhsT[i], rhs[i], M, K, N, _compute_dtype(lhsT.dtype))
    return out


@nki.jit
def sum_kernel(a, out_dtype):
    """out[r] = sum of row r of [rows, cols], accumulated in fp32 one column tile at a time."""
    rows, cols = a.shape
    out = nl.ndarray((rows, 1), dtype=out_dtype, buffer=nl.shared_hbm)
    for r0, rp in _tiles(rows, P):
        acc = nl.zeros((rp, 1), dtype=nl.float32)
        for c0, cw in _tiles(cols, F):
            x = nl.load(a[r0 : r0 + rp, c0 : c0 + cw], dtype=nl.float32)
            acc = nl.add(acc, nl.sum(x, axis=1, keepdims=True))
        nl.store(out[r0 : r0 + rp, 0:1], value=nl.copy(acc, dtype=out_dtype))
    return out


@nki.jit
def amax_kernel(a):
    """out[r] = max of row r of [rows, cols] (cols > 0)."""
    rows, cols = a.shape
    out = nl.ndarray((rows, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    for r0, rp in _tiles(rows, P):
        m = None
        for c0, cw in _tiles(cols, F):
            x = nl.load(a[r0 : r0 + rp, c0 : c0 + cw])
            part = nl.max(x, axis=1, keepdims=True)
            m = part if m is None else nl.maximum(m, part)
        nl.store(out[r0 : r0 + rp, 0:1], value=nl.copy(m, dtype=a.dtype))
    return out


# ------------------------------------------------------------------------------------------------
# Wrappers: argument plumbing between an ATen call and the kernels (layout only)


def _float(dt):
    return np.dtype(dt).kind == "f" or str(np.dtype(dt)) in ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def _category(dt):
    dt = np.dtype(dt)
    return 0 if dt == np.bool_ else 2 if _float(dt) else 1


def _promote(x, y):
    """torch.promote_types for the dtypes of the golden cases."""
    x, y = np.dtype(x), np.dtype(y)
    if x == y:
        return x
    cx, cy = _category(x), _category(y)
    if cx != cy:
        return x if cx > cy else y
    if cx == 2:
        if {str(x), str(y)} == {"float16", "bfloat16"}:
            return np.dtype(np.float32)
        if "float8" in str(x) or "float8" in str(y):
            raise NotImplementedError(f"promotion of {x} with {y}")
        return x if x.itemsize > y.itemsize else y
    return np.promote_types(x, y)  # integers: numpy and torch agree (uint8 + int8 is int16)


def _result_type(*tensors):
    """torch.result_type of tensors: dimensioned tensors win over zero-dim ones within a
    category (bool < integer < float)."""
    dims = [t.dtype for t in tensors if t.ndim > 0]
    zeros = [t.dtype for t in tensors if t.ndim == 0]
    dim_r = None
    for d in dims:
        dim_r = d if dim_r is None else _promote(dim_r, d)
    zero_r = None
    for d in zeros:
        zero_r = d if zero_r is None else _promote(zero_r, d)
    if dim_r is None:
        return zero_r
    if zero_r is None or _float(dim_r):
        return dim_r
    if dim_r == np.bool_ or _float(zero_r):
        return _promote(dim_r, zero_r)
    return dim_r


def _device(a):
    """A host array as the kernel gets it: int64 narrowed to int32 (Trainium has no int64) when
    every value fits."""
    if a.dtype == np.int64:
        if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
            raise NotImplementedError("an int64 value does not fit in int32 (Trainium has no int64)")
        return a.astype(np.int32)
    return a


def _device_dtype(dt):
    return np.dtype(np.int32) if np.dtype(dt) == np.int64 else np.dtype(dt)


def _host(out, dtype):
    """A kernel result back at the boundary: int32 widened to int64 where the op returns int64."""
    return out.astype(np.int64) if np.dtype(dtype) == np.int64 else out


def _as_2d(a):
    """[rows, cols] with the last dim as the free dim (a scalar is [1, 1])."""
    a = np.ascontiguousarray(a)
    return a.reshape(1, 1) if a.ndim == 0 else a.reshape(-1, a.shape[-1])


def _binary(kernel, a, b, extra):
    out_dtype = _result_type(a, b)
    shape = np.broadcast_shapes(a.shape, b.shape)
    if 0 in shape:
        return np.empty(shape, out_dtype)  # nothing to compute
    dev = _device_dtype(out_dtype)
    x = _as_2d(np.broadcast_to(_device(a), shape))
    y = _as_2d(np.broadcast_to(_device(b), shape))
    return _host(np.asarray(kernel(x, y, *extra(dev))).reshape(shape), out_dtype)


def add_tensor(kernel, a, b, alpha=1):
    return _binary(kernel, a, b, lambda dev: (alpha, dev))


def mul_tensor(kernel, a, b):
    return _binary(kernel, a, b, lambda dev: (dev,))


def _unary(kernel, a, out_dtype, *extra):
    if a.size == 0:
        return np.empty(a.shape, out_dtype)
    out = kernel(_as_2d(_device(a)), *extra)
    return _host(np.asarray(out).reshape(a.shape), out_dtype)


def exp(kernel, a):
    out_dtype = a.dtype if _float(a.dtype) else np.dtype(np.float32)
    return _unary(kernel, a, out_dtype, out_dtype)


def relu(kernel, a):
    if a.dtype == np.bool_:
        raise NotImplementedError("relu of bool")
    return _unary(kernel, a, a.dtype)


def gelu(kernel, a, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise NotImplementedError(f"gelu approximate={approximate!r}")
    return _unary(kernel, a, a.dtype, approximate)


def _last(a, dim):
    """`a` with `dim` moved last (a permutation), and the inverse permutation."""
    dim = dim % max(a.ndim, 1)
    order = [d for d in range(a.ndim) if d != dim] + [dim]
    return np.ascontiguousarray(np.transpose(a, order)), np.argsort(order)


def _softmax_like(kernel, a, dim, half_to_float):
    if half_to_float:
        raise NotImplementedError("half_to_float=True")
    if a.size == 0:
        return np.empty(a.shape, a.dtype)
    if a.ndim == 0:
        a1 = a.reshape(1, 1)
        return np.asarray(kernel(a1)).reshape(())
    t, inv = _last(a, dim)
    out = np.asarray(kernel(_as_2d(t))).reshape(t.shape)
    return np.ascontiguousarray(np.transpose(out, inv))


def softmax(kernel, a, dim, half_to_float):
    return _softmax_like(kernel, a, dim, half_to_float)


def log_softmax(kernel, a, dim, half_to_float):
    return _softmax_like(kernel, a, dim, half_to_float)


def layer_norm(kernel, a, normalized_shape, weight, bias, eps):
    k = len(normalized_shape)
    lead = a.shape[: a.ndim - k]
    stat_shape = tuple(lead) + (1,) * k
    n = int(np.prod(normalized_shape))
    rows = int(np.prod(lead))
    if a.size == 0:
        return np.empty(a.shape, a.dtype), np.empty(stat_shape, a.dtype), np.empty(stat_shape, a.dtype)
    w = None if weight is None else np.ascontiguousarray(weight).reshape(1, n)
    b = None if bias is None else np.ascontiguousarray(bias).reshape(1, n)
    y, mean, rstd = kernel(np.ascontiguousarray(a).reshape(rows, n), w, b, float(eps))
    return (np.asarray(y).reshape(a.shape), np.asarray(mean).reshape(stat_shape), np.asarray(rstd).reshape(stat_shape))


def mm(kernel, a, b):
    (M, K), (_, N) = a.shape, b.shape
    if M * N == 0:
        return np.empty((M, N), a.dtype)
    if K == 0:
        raise NotImplementedError("an empty contraction (K = 0): the kernel has no tile to multiply")
    lhsT = np.ascontiguousarray(_device(a).T)  # NKI's matmul takes the stationary operand as [K, M]
    return _host(np.asarray(kernel(lhsT, np.ascontiguousarray(_device(b)))), a.dtype)


def bmm(kernel, a, b):
    (B, M, K), N = a.shape, b.shape[2]
    if B * M * N == 0:
        return np.empty((B, M, N), a.dtype)
    if K == 0:
        raise NotImplementedError("an empty contraction (K = 0): the kernel has no tile to multiply")
    lhsT = np.ascontiguousarray(np.transpose(_device(a), (0, 2, 1)))
    return _host(np.asarray(kernel(lhsT, np.ascontiguousarray(_device(b)))), a.dtype)


def _reduce_layout(a, dims, keepdim):
    """(the input as [rows, cols] with the reduced dims as cols, the output shape). dims None or
    [] reduce every dim."""
    nd = a.ndim
    dims = sorted({d % max(nd, 1) for d in dims}) if dims else list(range(nd))
    keep = [d for d in range(nd) if d not in dims]
    out_shape = tuple(1 if d in dims else a.shape[d] for d in range(nd)) if keepdim else tuple(a.shape[d] for d in keep)
    t = np.ascontiguousarray(np.transpose(a, keep + dims)) if nd else a
    rows = int(np.prod([a.shape[d] for d in keep]))
    cols = int(np.prod([a.shape[d] for d in dims]))
    return t.reshape(rows, cols), out_shape


def sum_dim(kernel, a, dim, keepdim=False, dtype=None):
    if dtype is None:
        dtype = a.dtype if _float(a.dtype) else np.dtype(np.int64)
    x, out_shape = _reduce_layout(a, dim, keepdim)
    rows, cols = x.shape
    if rows == 0:
        return np.empty(out_shape, dtype)
    if cols == 0:
        raise NotImplementedError("a sum over an empty dim (the kernel has no tile to reduce)")
    if a.dtype == np.bool_:
        x = x.view(np.uint8)  # the same bytes: a bool is one byte, 0 or 1
    out = kernel(_device(x), _device_dtype(dtype))
    return _host(np.asarray(out).reshape(out_shape), dtype)


def amax(kernel, a, dim=(), keepdim=False):
    x, out_shape = _reduce_layout(a, list(dim), keepdim)
    rows, cols = x.shape
    if rows == 0:
        return np.empty(out_shape, a.dtype)
    if cols == 0:
        raise NotImplementedError("amax over an empty dim")
    if a.dtype == np.bool_:
        raise NotImplementedError("amax of bool")
    out = kernel(_device(x))
    return _host(np.asarray(out).reshape(out_shape), a.dtype)


# ------------------------------------------------------------------------------------------------
# The backend: Core ATen overload -> (kernel, wrapper)

OVERLOADS = {
    "add.Tensor": (add_kernel, add_tensor),
    "mul.Tensor": (mul_kernel, mul_tensor),
    "exp": (exp_kernel, exp),
    "relu": (relu_kernel, relu),
    "gelu": (gelu_kernel, gelu),
    "_softmax": (softmax_kernel, softmax),
    "_log_softmax": (log_softmax_kernel, log_softmax),
    "native_layer_norm": (layer_norm_kernel, layer_norm),
    "mm": (mm_kernel, mm),
    "bmm": (bmm_kernel, bmm),
    "sum.dim_IntList": (sum_kernel, sum_dim),
    "amax": (amax_kernel, amax),
}
