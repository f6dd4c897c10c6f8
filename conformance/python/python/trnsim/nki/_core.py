"""The tracer behind the NKI front-end: dtypes, affine index expressions, on-chip allocation,
views of HBM tensors and SBUF/PSUM tiles, and the instruction list of the Program being built.

A kernel call runs the Python function once per SPMD instance with a `Tracer` installed; every
`nl.*` / `nisa.*` call appends trnsim instructions (the JSON of `sim/src/program.rs`, described in
docs/isa.md) and returns a `View` of a freshly allocated tile. Nothing is computed here: values only
exist in the simulator.
"""

import bisect
import linecache
import math
import os
import sys
import weakref

import numpy as np

try:  # ml_dtypes supplies bf16 / fp8 numpy dtypes (a dependency of the package)
    import ml_dtypes as _mld
except ImportError:  # pragma: no cover - the package depends on it
    _mld = None


class NkiError(Exception):
    """A kernel that neuronxcc would reject at compile time. The message starts with the kernel's
    `file:line`; `.loc` holds it alone."""

    def __init__(self, message, loc=None):
        self.loc = loc
        self.message = message
        super().__init__(f"{loc}: {message}" if loc else message)


# ----------------------------------------------------------------------------------------------
# dtypes (legacy NKI uses numpy dtype objects; tfloat32 is the 4-byte void dtype)

float32 = np.dtype(np.float32)
float16 = np.dtype(np.float16)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
bool_ = np.dtype(np.bool_)
tfloat32 = np.dtype("V4")
bfloat16 = np.dtype(_mld.bfloat16) if _mld else None
float8_e4m3 = np.dtype(_mld.float8_e4m3) if _mld else None
float8_e4m3fn = np.dtype(_mld.float8_e4m3fn) if _mld else None
float8_e5m2 = np.dtype(_mld.float8_e5m2) if _mld else None
# NeuronCore-v4 MX types (trn3): the OCP e8m0 scale and e2m1 element (one code per byte, as
# ml_dtypes stores them), and the packed containers of `quantize_mx` / `nc_matmul_mx`, four codes
# in one element (docs/isa.md §3a). NumPy has no dtype for a container: each is a one-field
# structured dtype of the container's width, distinct from the others, from tfloat32's V4 and
# from uint32/uint16; arrays of it hold the raw words.
float8_e8m0fnu = np.dtype(_mld.float8_e8m0fnu) if _mld else None
float4_e2m1fn = np.dtype(_mld.float4_e2m1fn) if _mld else None
float8_e5m2_x4 = np.dtype([("float8_e5m2_x4", "<u4")])
float8_e4m3fn_x4 = np.dtype([("float8_e4m3fn_x4", "<u4")])
float4_e2m1fn_x4 = np.dtype([("float4_e2m1fn_x4", "<u2")])
MX_PACKED = {
    float8_e5m2_x4: "float8_e5m2_x4",
    float8_e4m3fn_x4: "float8_e4m3fn_x4",
    float4_e2m1fn_x4: "float4_e2m1fn_x4",
}

# numpy dtype -> trnsim dtype as serialised in Program JSON (serde snake_case of sim/src/dtype DType)
_TRN_NAME = {
    float32: "f32",
    tfloat32: "tf32",
    bfloat16: "bf16",
    float16: "f16",
    float8_e4m3: "fp8_e4m3",
    float8_e4m3fn: "fp8_e4m3fn",
    float8_e5m2: "fp8_e5m2",
    int8: "i8",
    int16: "i16",
    int32: "i32",
    uint8: "u8",
    uint16: "u16",
    uint32: "u32",
    bool_: "bool",
    float8_e8m0fnu: "fp8_e8m0fnu",
    float4_e2m1fn: "fp4_e2m1fn",
    float8_e5m2_x4: "fp8_e5m2_x4",
    float8_e4m3fn_x4: "fp8_e4m3fn_x4",
    float4_e2m1fn_x4: "fp4_e2m1fn_x4",
}
_FLOATS = {float32, tfloat32, bfloat16, float16, float8_e4m3, float8_e4m3fn, float8_e5m2, float8_e8m0fnu, float4_e2m1fn}


_PACKED_BY_NAME = {n: d for d, n in MX_PACKED.items()}


def dtype_name(dt):
    """A dtype as NKI spells it in messages (`float8_e4m3fn_x4`, not NumPy's structured repr)."""
    d = as_dtype(dt)
    return MX_PACKED.get(d, str(d))


_MX_ONLY = {float8_e8m0fnu, float4_e2m1fn, *MX_PACKED}
# trnsim names of the packed containers (the Program JSON's dtype field)
PACKED_TRN_NAMES = ("fp8_e5m2_x4", "fp8_e4m3fn_x4", "fp4_e2m1fn_x4")


def check_target_dtype(tracer, dtype, loc=None):
    """An MX dtype on a generation without it (trn1/trn2) is refused when a tensor or view of it is
    made, naming the generation; the generation's dtypes come from trnsim's `Target`."""
    if dtype not in _MX_ONLY or tracer is None:
        return
    avail = tracer.params.get("dtypes")
    if avail is not None and _TRN_NAME[dtype] not in avail:
        raise NkiError(
            f"dtype {dtype_name(dtype)} exists only from NeuronCore-v4 (trn3) on; this kernel runs on "
            f"{tracer.target} ({tracer.params.get('label', tracer.params.get('core'))})",
            loc,
        )


def as_dtype(dt):
    """A user dtype (numpy dtype, numpy type, ml_dtypes type or name) as a numpy dtype object."""
    if dt is None:
        return None
    if isinstance(dt, str) and dt in ("tfloat32", "tf32"):
        return tfloat32
    if isinstance(dt, str) and dt in _PACKED_BY_NAME:
        return _PACKED_BY_NAME[dt]
    d = np.dtype(dt)
    if d == np.dtype(np.float64):
        return float32
    if d == np.dtype(np.int64):
        return int32
    if d == np.dtype(np.uint64):
        return uint32
    if d not in _TRN_NAME:
        raise NkiError(f"dtype {d} is not an NKI dtype")
    return d


def trn_name(dt):
    return _TRN_NAME[as_dtype(dt)]


def from_trn_name(name):
    """The numpy dtype of a trnsim dtype name (the inverse of `trn_name`)."""
    for d, n in _TRN_NAME.items():
        if n == name:
            return d
    raise NkiError(f"unknown trnsim dtype {name!r}")


def is_float(dt):
    return as_dtype(dt) in _FLOATS


def scalar_dtype(v):
    """NKI types Python scalars widest: bool -> uint8, int -> int32, float -> float32."""
    if isinstance(v, (bool, np.bool_)):
        return uint8
    if isinstance(v, (int, np.integer)):
        return int32
    return float32


_FP8 = {float8_e4m3, float8_e4m3fn, float8_e5m2}


def promote(a, b):
    """The output dtype of a binary op on tiles of dtypes a and b (NKI's promotion rules)."""
    a, b = as_dtype(a), as_dtype(b)
    if a == b:
        return a
    if a == bool_:
        return b
    if b == bool_:
        return a
    fa, fb = a in _FLOATS, b in _FLOATS
    if fa != fb:
        return a if fa else b
    if fa:
        if a in _FP8 and b in _FP8:
            return bfloat16
        if a.itemsize != b.itemsize:
            if tfloat32 in (a, b):
                return float32
            return a if a.itemsize > b.itemsize else b
        return float32  # fp16 with bf16, tf32 with f32
    r = np.promote_types(a, b)
    return float32 if r.itemsize > 4 else np.dtype(r)


# ----------------------------------------------------------------------------------------------
# source locations


_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


_INSIDE = {}  # co_filename -> (inside this package?, basename)
_LOC_SRC = {}  # "file:line" -> (filename, lineno), for naming tiles after their source line
# id(code object) -> (weak reference to it, its instruction offsets, their lines). Keyed by id:
# hashing a code object hashes its constants, as long as the kernel.
_LINE_TABLES = {}


def frame_line(f):
    """`f.f_lineno`, found by bisection. CPython 3.11 (measured) computes `f_lineno` by scanning
    the code object's line table from its start, unless a profiler or tracer is installed: one
    lookup costs time in proportion to how far into the function the frame is. A kernel emitted
    as one unrolled function of 15,000 NKI calls, each naming its source line, then traced in
    time quadratic in its length (about 3 minutes instead of 5 seconds). The table of the code
    object's instruction offsets and lines is built once per code object instead."""
    code = f.f_code
    key = id(code)
    table = _LINE_TABLES.get(key)
    if table is None or table[0]() is not code:
        starts, lines = [], []
        for start, _end, line in code.co_lines():
            starts.append(start)
            lines.append(line)
        ref = weakref.ref(code, lambda _r, key=key: _LINE_TABLES.pop(key, None))
        table = _LINE_TABLES[key] = (ref, starts, lines)
    i = bisect.bisect_right(table[1], f.f_lasti) - 1
    line = table[2][i] if i >= 0 else None
    return f.f_lineno if line is None else line


class _Buffer(str):
    """`nl.sbuf`, `nl.psum`, `nl.hbm`, `nl.private_hbm`, `nl.shared_hbm`: a buffer kind, equal to
    its name as a string (the front-end's own spelling) and the value of a tensor's `.buffer`,
    so that `t.buffer == nl.sbuf` and `a.buffer in (nl.hbm, nl.shared_hbm)` hold as in NKI."""

    def __new__(cls, name):
        return super().__new__(cls, name)

    @property
    def name(self):
        return str(self)

    def __repr__(self):
        return "nl." + str(self)

    def __call__(self, *a, **k):  # ncc-style allocators are not supported; plain buffers are
        raise NkiError(f"nl.{self} is a buffer, not a callable", caller_loc()[0])


BUFFERS = {n: _Buffer(n) for n in ("sbuf", "psum", "hbm", "private_hbm", "shared_hbm")}
# An HBM tensor's `.buffer` by how it was made: a kernel argument (or a constant) is in HBM, a
# `nl.ndarray(buffer=nl.shared_hbm / nl.private_hbm)` in that buffer.
_HBM_KIND_BUFFER = {"shared": "shared_hbm", "private": "private_hbm"}


def caller_loc():
    """`file:line` of the innermost frame outside this package: the kernel's source line."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        known = _INSIDE.get(fn)
        if known is None:
            known = _INSIDE[fn] = (os.path.abspath(fn).startswith(_PKG_DIR), os.path.basename(fn))
        if not known[0]:
            line = frame_line(f)
            loc = f"{known[1]}:{line}"
            if loc not in _LOC_SRC:
                _LOC_SRC[loc] = (fn, line)
            return loc, fn, line
        f = f.f_back
    return None, None, None


_NAMES = {}


def source_name(filename, lineno):
    """The variable a source line assigns (`a_tile = nl.load(...)` -> 'a_tile'), else ''."""
    if not filename:
        return ""
    key = (filename, lineno)
    name = _NAMES.get(key)
    if name is None:
        line = linecache.getline(filename, lineno).strip()
        lhs = line.split("=", 1)[0].strip() if "=" in line and "==" not in line.split("=", 1)[0] else ""
        lhs = lhs.split("[", 1)[0].strip()
        name = _NAMES[key] = lhs if lhs.isidentifier() else ""
    return name


# ----------------------------------------------------------------------------------------------
# affine index expressions: nl.arange / nl.mgrid and arithmetic on them


class Aff:
    """`const + sum(coef[a] * k[a])` over a broadcast grid of `shape` (k[a] in range(shape[a]))."""

    __slots__ = ("coef", "const", "shape")
    __array_priority__ = 1000

    def __init__(self, const, coef, shape):
        self.const = int(const)
        self.shape = tuple(int(s) for s in shape)
        self.coef = tuple(0 if s == 1 else int(c) for c, s in zip(coef, self.shape))

    def __repr__(self):
        return f"Aff({self.const}, {self.coef}, {self.shape})"

    @property
    def ndim(self):
        return len(self.shape)

    def __getitem__(self, key):
        """`nl.arange(n)[:, None]`: insert size-1 axes (None) around the existing ones (`:`)."""
        if not isinstance(key, tuple):
            key = (key,)
        coef, shape, it = [], [], 0
        for k in key:
            if k is None:
                coef.append(0)
                shape.append(1)
            elif isinstance(k, slice) and k == slice(None):
                if it >= self.ndim:
                    raise NkiError("too many ':' in an index-expression subscript", caller_loc()[0])
                coef.append(self.coef[it])
                shape.append(self.shape[it])
                it += 1
            else:
                raise NkiError("an arange expression can only be indexed with ':' and None", caller_loc()[0])
        while it < self.ndim:
            coef.append(self.coef[it])
            shape.append(self.shape[it])
            it += 1
        return Aff(self.const, coef, shape)

    def _bin(self, other, sign_self, sign_other):
        if isinstance(other, Aff):
            shape = broadcast_shapes(self.shape, other.shape)
            a, b = self.aligned(len(shape)), other.aligned(len(shape))
            coef = [sign_self * x + sign_other * y for x, y in zip(a.coef, b.coef)]
            return Aff(sign_self * self.const + sign_other * other.const, coef, shape)
        if isinstance(other, (int, np.integer)) and not isinstance(other, bool):
            return Aff(sign_self * self.const + sign_other * int(other), [sign_self * c for c in self.coef], self.shape)
        if isinstance(other, View) and sign_self == 1 and sign_other == 1:
            return DynIndex(other, self)
        return NotImplemented

    def aligned(self, rank):
        pad = rank - self.ndim
        return Aff(self.const, (0,) * pad + self.coef, (1,) * pad + self.shape)

    def __add__(self, o):
        return self._bin(o, 1, 1)

    __radd__ = __add__

    def __sub__(self, o):
        return self._bin(o, 1, -1)

    def __rsub__(self, o):
        return self._bin(o, -1, 1)

    def __neg__(self):
        return Aff(-self.const, [-c for c in self.coef], self.shape)

    def __pos__(self):
        return self

    def __mul__(self, o):
        if isinstance(o, (int, np.integer)) and not isinstance(o, bool):
            return Aff(self.const * int(o), [c * int(o) for c in self.coef], self.shape)
        raise NkiError("index expressions must be affine: multiply an arange only by an integer", caller_loc()[0])

    __rmul__ = __mul__

    def __floordiv__(self, o):
        if isinstance(o, (int, np.integer)) and o > 0 and self.const % o == 0 and all(c % o == 0 for c in self.coef):
            return Aff(self.const // o, [c // o for c in self.coef], self.shape)
        raise NkiError("index expressions must be affine: '//' of an arange is not", caller_loc()[0])

    def __mod__(self, o):
        raise NkiError("index expressions must be affine: '%' of an arange is not", caller_loc()[0])

    def _cmp(self, o, op):
        return Pred(op, self, o)

    def __lt__(self, o):
        return self._cmp(o, "lt")

    def __le__(self, o):
        return self._cmp(o, "le")

    def __gt__(self, o):
        return self._cmp(o, "gt")

    def __ge__(self, o):
        return self._cmp(o, "ge")

    def __eq__(self, o):
        return self._cmp(o, "eq")

    def __ne__(self, o):
        return self._cmp(o, "ne")

    __hash__ = object.__hash__

    def __bool__(self):
        raise NkiError("an arange index expression has no truth value (no Python 'if' on it)", caller_loc()[0])

    def values(self, shape=None):
        """The int64 array of the expression, broadcast to `shape` (default: its own)."""
        shape = self.shape if shape is None else tuple(shape)
        a = self.aligned(len(shape))
        v = np.full((1,) * len(shape), a.const, dtype=np.int64)
        for ax, (c, s) in enumerate(zip(a.coef, a.shape)):
            if c:
                r = [1] * len(shape)
                r[ax] = s
                v = v + c * np.arange(s, dtype=np.int64).reshape(r)
        return np.broadcast_to(v, shape)


def broadcast_shapes(*shapes):
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise NkiError(
            f"shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast", caller_loc()[0]
        ) from None


_CMP = {
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
}


class Pred:
    """A mask predicate: comparisons of affine expressions joined with `&` / `|`."""

    def __init__(self, op, a, b):
        self.op, self.a, self.b = op, a, b

    def __and__(self, o):
        return Pred("and", self, o)

    def __or__(self, o):
        return Pred("or", self, o)

    def __rand__(self, o):
        return Pred("and", o, self)

    def __invert__(self):
        return Pred("not", self, None)

    def __bool__(self):
        raise NkiError("a mask predicate has no truth value: join predicates with '&', not 'and'", caller_loc()[0])

    def shape(self):
        parts = [x for x in (self.a, self.b) if isinstance(x, (Aff, Pred))]
        return broadcast_shapes(*[p.shape if isinstance(p, Aff) else p.shape() for p in parts]) if parts else ()

    def evaluate(self, shape):
        """A bool array broadcast to `shape` (right-aligned as numpy)."""
        if self.op in ("and", "or", "not"):
            x = _pred_val(self.a, shape)
            if self.op == "not":
                return ~x
            y = _pred_val(self.b, shape)
            return (x & y) if self.op == "and" else (x | y)
        a = self.a.values(_fit(self.a, shape)) if isinstance(self.a, Aff) else np.int64(self.a)
        b = self.b.values(_fit(self.b, shape)) if isinstance(self.b, Aff) else np.int64(self.b)
        return np.broadcast_to(_CMP[self.op](a, b), shape)


def _fit(aff, shape):
    s = (1,) * (len(shape) - aff.ndim) + aff.shape
    return tuple(min(x, y) if x == 1 else x for x, y in zip(s, shape))


def _pred_val(p, shape):
    if isinstance(p, Pred):
        return p.evaluate(shape)
    if isinstance(p, (bool, np.bool_)):
        return np.full(shape, bool(p))
    raise NkiError(f"{p!r} is not a mask predicate", caller_loc()[0])


def mask_box(mask, shape):
    """The box [(lo, hi), ...] of `shape` a mask keeps; None when it keeps nothing; the full box when
    the mask is None. A mask that is not a box is unsupported (named in the error)."""
    full = [(0, s) for s in shape]
    if mask is None:
        return full
    if isinstance(mask, (bool, np.bool_)):
        # a compile-time constant (`mask=i * 128 >= j * 512` of loop indices): all or nothing
        return full if mask else None
    if not isinstance(mask, Pred):
        raise NkiError(f"mask= must be a predicate on index expressions, got {mask!r}", caller_loc()[0])
    m = mask.evaluate(tuple(shape))
    if m.all():
        return full
    if not m.any():
        return None
    box = []
    for ax in range(len(shape)):
        other = tuple(i for i in range(len(shape)) if i != ax)
        keep = np.nonzero(m.any(axis=other) if other else m)[0]
        box.append((int(keep[0]), int(keep[-1]) + 1))
    if not m[tuple(slice(lo, hi) for lo, hi in box)].all():
        raise NkiError(
            "this mask does not select a rectangular box of the tile; the trnsim front-end "
            "supports only box-shaped masks (docs/nki.md, gaps)",
            caller_loc()[0],
        )
    return box


class MGrid:
    """`nl.mgrid[0:128, 0:512]` -> (i_p, i_f), also `.p`, `.x`, `.y`, `.z`."""

    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        n = len(key)
        out = []
        for ax, s in enumerate(key):
            if not isinstance(s, slice):
                raise NkiError("nl.mgrid takes slices", caller_loc()[0])
            start, stop, step = s.start or 0, s.stop, s.step or 1
            size = len(range(start, stop, step))
            coef = [0] * n
            coef[ax] = step
            shape = [1] * n
            shape[ax] = size
            out.append(Aff(start, coef, shape))
        return GridResult(out)


class GridResult(tuple):
    @property
    def p(self):
        return self[0]

    @property
    def x(self):
        return self[1]

    @property
    def y(self):
        return self[2]

    @property
    def z(self):
        return self[3]


def arange(*args):
    r = range(*[int(a) for a in args])
    return Aff(r.start, [r.step], [len(r)])


class DynSlice:
    """`nl.ds(start, size)`: the slice start:start+size."""

    def __init__(self, start, size):
        self.start, self.size = start, size

    def as_index(self):
        if isinstance(self.start, Aff):
            raise NkiError("nl.ds start must be an integer here", caller_loc()[0])
        return slice(int(self.start), int(self.start) + int(self.size))


# ----------------------------------------------------------------------------------------------
# storage: HBM tensors and on-chip tiles


class HbmStorage:
    def __init__(self, tracer, name, shape, dtype, kind, array=None, loc=None):
        self.tracer = tracer
        self.name = name
        self.shape = tuple(int(s) for s in shape)
        self.dtype = as_dtype(dtype)
        check_target_dtype(tracer, self.dtype, loc)
        self.kind = kind  # 'input' | 'shared' | 'private' | 'constant'
        self.array = array
        self.loc = loc
        self.written = False
        self.read = False
        strides, acc = [], 1
        for s in reversed(self.shape):
            strides.append(acc)
            acc *= s
        self.strides = tuple(reversed(strides))
        self.size = acc

    on_chip = False
    buffer = "hbm"

    def mem(self):
        return {"hbm": self.name}


class TileStorage:
    """A tile in SBUF or PSUM: `shape` with partition axis `par_axis` (dims before it are block
    dims), laid out row-major over the non-partition dims in every partition from byte `offset`."""

    def __init__(self, tracer, shape, dtype, buffer, par_axis=0, name="", loc=None, line=None):
        self.tracer = tracer
        self.shape = tuple(int(s) for s in shape)
        self._name = name
        self.dtype = as_dtype(dtype)
        check_target_dtype(tracer, self.dtype, loc)
        self.buffer = buffer
        self.par_axis = par_axis
        self.loc = loc
        if not self.shape:
            raise NkiError("an on-chip tile needs a partition dimension", loc)
        self.partitions = self.shape[par_axis]
        if not 0 < self.partitions <= tracer.limits["partitions"]:
            raise NkiError(
                f"tile shape {list(self.shape)}: the partition dimension (dim {par_axis}) is "
                f"{self.partitions}, but on-chip tiles have 1 to {tracer.limits['partitions']} partitions",
                loc,
            )
        fshape = self.shape[:par_axis] + self.shape[par_axis + 1 :]
        self.fstrides = {}
        acc = 1
        for d in reversed([d for d in range(len(self.shape)) if d != par_axis]):
            self.fstrides[d] = acc
            acc *= self.shape[d]
        self.free_elems = acc
        self.block_elems = math.prod(self.shape[par_axis + 1 :]) if fshape else 1
        self.bytes = self.free_elems * self.dtype.itemsize
        self.offset = tracer.alloc(self, line)
        self._freed = False
        self.written = None  # bool array (partitions, free_elems), created on first partial write
        self.fully_written = False
        self.reads = 0
        self.writes = 0
        self.producer = None  # (instruction dict, field) while the tile is an unread fresh result

    def __del__(self):
        self.release()

    on_chip = True

    @property
    def name(self):
        """`name=`, else the variable its source line assigns, else tile<n>."""
        if not self._name:
            src = _LOC_SRC.get(self.loc)
            self._name = (source_name(*src) if src else "") or f"tile{next(self.tracer.counter)}"
        return self._name

    def mem(self):
        return self.buffer

    def release(self):
        """Give the tile's bytes back (when the last view of it goes, or when a result was written
        where it is assigned instead)."""
        if self.__dict__.get("_freed", True):  # freed already, or never allocated
            return
        self._freed = True
        self.tracer.free(self.buffer, self.offset)

    def describe(self):
        return f"'{self.name}' {list(self.shape)} {trn_name(self.dtype)} in {self.buffer.upper()}" + (
            f" (allocated at {self.loc})" if self.loc else ""
        )


# ----------------------------------------------------------------------------------------------
# the tracer


class Tracer:
    _current = None

    def __init__(self, target, api="legacy"):
        from ._targets import params

        self.target = target
        # "legacy" (neuronxcc.nki) or "current" (nki 0.3+): where the two APIs' rules differ
        self.api = api
        p = params(target)  # trnsim's Target fields, from the native module (_targets.py)
        self.params = p
        from ._alloc import limits

        self.limits = limits(target)  # sbuf, psum, bank, banks, partitions
        self.instructions = []
        self.hbm = []  # HbmStorage in declaration order
        self.counter = iter(range(1, 1 << 62))
        self.program_id = ()
        self.undefined_read = None  # (storage, loc) of an operand read with no element defined (_emit.emit)
        self.grid = ()
        self.instance = 0
        self.shared_by_ordinal = {}
        self.shared_ordinal = 0

    @classmethod
    def current(cls):
        t = cls._current
        if t is None:
            raise NkiError(
                "this NKI call is only valid inside a kernel being traced (call the kernel through "
                "nki.jit / nki.baremetal / nki.simulate_kernel)",
                caller_loc()[0],
            )
        return t

    # -- allocation
    def alloc(self, st, line=None):
        """Check that a new tile can exist at all. Its address comes after tracing, from the live
        ranges of all tiles (`_alloc.assign`); until then it is laid out from byte 0."""
        buf = st.buffer
        cap = self.limits[buf]
        bank = self.limits["bank"]
        if buf == "psum":
            block = st.block_elems * st.dtype.itemsize
            # The current API declares a PSUM tensor over several banks (AWS's attention tutorial
            # v10 places one [128, 7 x 512] fp32 tensor at bank 0 and gives each matmul a
            # one-bank slice); the tile is then bank-aligned, and each instruction's PSUM access
            # is checked against the bank it must stay in (the simulator's PsumBankOverflow).
            # The legacy API keeps one bank per block.
            if block > bank and self.api != "current":
                raise NkiError(
                    f"PSUM tile {st.describe()} needs {block} bytes per partition in one block, more than "
                    f"a PSUM bank ({bank} bytes = 512 fp32): a PSUM tile cannot cross a bank",
                    st.loc,
                )
        size = st.bytes if st.par_axis == 0 else st.block_elems * st.dtype.itemsize
        if size > cap:
            raise NkiError(
                f"{buf.upper()} capacity exceeded: tile {st.describe()} needs {size} bytes per partition, "
                f"more than the {cap} usable bytes per partition of {self.target} (no live tiles needed)",
                st.loc,
            )
        from ._alloc import TileRec

        st._rec = TileRec(st)
        return 0

    def free(self, buf, offset):
        """Tiles die at their last use in the program, not when Python drops them."""

    # -- HBM
    def new_hbm(self, shape, dtype, kind, name=None, array=None, loc=None):
        if kind == "shared" and self.instance > 0:
            # every SPMD instance runs the same top-level allocation; they share one tensor
            st = self.shared_by_ordinal.get(self.shared_ordinal)
            self.shared_ordinal += 1
            if st is not None and st.shape == tuple(shape) and st.dtype == as_dtype(dtype):
                return st
        base = name or f"hbm{len(self.hbm)}"
        used = {h.name for h in self.hbm}
        nm, i = base, 1
        while nm in used:
            nm, i = f"{base}.{i}", i + 1
        st = HbmStorage(self, nm, shape, dtype, kind, array, loc)
        self.hbm.append(st)
        if kind == "shared" and self.instance == 0:
            self.shared_by_ordinal[self.shared_ordinal] = st
            self.shared_ordinal += 1
        return st

    # -- instructions
    def emit(self, engine, op, fields, loc=None):
        if loc is None:
            loc = caller_loc()[0]
        ins = {"engine": engine, "op": {op: fields}}
        if loc:
            ins["loc"] = loc
        self.instructions.append(ins)
        return ins


def tracer():
    return Tracer.current()


# ----------------------------------------------------------------------------------------------
# views: what kernels hold (`nl.ndarray` results, tile slices, HBM arguments)


def _is_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


class View:
    """A view of a storage: base dim d is indexed by `idx[d] = (const, coef)`, the value
    `const + sum(coef[a] * k[a])` at view position k (a over the view's axes)."""

    __array_priority__ = 1000

    __slots__ = ("__weakref__", "_apc", "_inplace", "base", "dtype", "idx", "shape")

    def __init__(self, base, shape, idx, dtype=None):
        # shape: tuple of ints; idx: list of (int, tuple of ints), built by this module's own
        # index arithmetic (user ints are converted where they enter, in index())
        self.base = base
        self.shape = shape if type(shape) is tuple else tuple(shape)
        self.idx = idx if type(idx) is list else list(idx)
        self.dtype = base.dtype if dtype is None else dtype
        self._inplace = False
        self._apc = None  # (dtype, the access pattern) of the last _ap() without split (views never change)

    @classmethod
    def full(cls, base):
        fi = base.__dict__.get("_full_idx")
        if fi is None:
            n = len(base.shape)
            fi = [(0, tuple(1 if a == d else 0 for a in range(n))) for d in range(n)]
            try:
                base._full_idx = fi
            except AttributeError:
                pass
        return cls(base, base.shape, fi)

    # -- numpy-like attributes
    @property
    def ndim(self):
        return len(self.shape)

    @property
    def buffer(self):
        b = self.base.buffer
        if b == "hbm":
            b = _HBM_KIND_BUFFER.get(getattr(self.base, "kind", None), "hbm")
        return BUFFERS.get(b, b)

    def __repr__(self):
        return f"<NKI tensor {list(self.shape)} {self.dtype} in {self.base.buffer}>"

    def __len__(self):
        return self.shape[0]

    def __bool__(self):
        if not self.base.on_chip:
            # an HBM tensor (a kernel argument): `x if t else None` asks whether it was passed, as
            # AWS's kernels use it (tensor_scalar_cumulative's imm1); its values are never read
            return True
        raise NkiError("a tile has no truth value (no tensor-valued 'if' in NKI)", caller_loc()[0])

    def is_full(self):
        if self.shape != self.base.shape:
            return False
        fi = self.base.__dict__.get("_full_idx")
        return self.idx is fi or self.idx == View.full(self.base).idx

    # -- indexing
    def __getitem__(self, key):
        return self.index(key)

    def index(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        if any(k is Ellipsis for k in key):
            i = key.index(Ellipsis)
            fill = self.ndim - (len(key) - 1)
            key = key[:i] + (slice(None),) * fill + key[i + 1 :]
        if len(key) == 2 and self.ndim == 1 and self.base.on_chip:
            # `t[:, j]` of a tile is one element per partition, the [P, 1] column it is stored as
            # (NKI keeps the tile two-dimensional), so `t[:, j][:, 0]` indexes that column
            from ._emit import column

            col = column(self)
            if col.ndim == 2:
                return col.index(key)
        if len(key) > self.ndim:
            raise NkiError(f"{len(key)} indices for a tensor of rank {self.ndim}", caller_loc()[0])
        key = tuple(k.as_index() if isinstance(k, DynSlice) else k for k in key)
        key = key + (slice(None),) * (self.ndim - len(key))
        if self.base.on_chip and any(isinstance(k, (View, DynIndex)) for k in key):
            key = tuple(DynIndex(k, 0) if isinstance(k, View) else k for k in key)
            return DynTileView(self, key)
        for k in key:
            if isinstance(k, View):
                return DynView(self, key)
            if isinstance(k, Pred):
                raise NkiError(
                    "indexing a tile with a predicate (x[i < n]) is not supported by the trnsim front-end; "
                    "pass mask= to the instruction",
                    caller_loc()[0],
                )
        affs = [k for k in key if isinstance(k, Aff)]
        # per view axis j: (const, coef over the new axes)
        if affs:
            for k in key:
                if isinstance(k, slice) and k != slice(None):
                    raise NkiError("a subscript cannot mix slices and arange index expressions", caller_loc()[0])
                if isinstance(k, slice) and k == slice(None):
                    raise NkiError(
                        "a subscript cannot mix ':' and arange index expressions (index every "
                        "dimension with an expression or an integer)",
                        caller_loc()[0],
                    )
            shape = broadcast_shapes(*[a.shape for a in affs])
            n = len(shape)
            per_axis = []
            for j, k in enumerate(key):
                if isinstance(k, Aff):
                    a = k.aligned(n)
                    per_axis.append((a.const, a.coef))
                elif _is_int(k):
                    per_axis.append((self._int_index(k, j), (0,) * n))
                else:
                    raise NkiError(f"unsupported index {k!r}", caller_loc()[0])
        else:
            shape, per_axis = [], []
            slots = []
            for j, k in enumerate(key):
                if _is_int(k):
                    per_axis.append((self._int_index(k, j), None))
                elif isinstance(k, slice):
                    start, stop, step = k.indices(self.shape[j])
                    if k.stop is not None and _is_int(k.stop) and k.stop > self.shape[j]:
                        stop = k.stop  # keep it: bounds are checked when the instruction is traced
                    size = max(0, len(range(start, stop, step)))
                    per_axis.append((start, step))
                    slots.append(j)
                    shape.append(size)
                else:
                    raise NkiError(f"unsupported index {k!r}", caller_loc()[0])
            n = len(shape)
            conv = []
            pos = 0
            for j, (c, step) in enumerate(per_axis):
                if step is None:
                    conv.append((c, (0,) * n))
                else:
                    co = [0] * n
                    co[pos] = step
                    pos += 1
                    conv.append((c, tuple(co)))
            per_axis = conv
        return self._compose(tuple(shape), per_axis)

    def _int_index(self, k, j):
        k = int(k)
        return k + self.shape[j] if k < 0 else k

    def _compose(self, shape, per_axis):
        """This view indexed by `per_axis` (per view axis j: (const, coef over the new axes))."""
        n = len(shape)
        rng = range(n)
        idx = []
        for c, co in self.idx:
            nc = c
            ncoef = [0] * n
            for j, x in enumerate(co):
                if x:
                    pc, pco = per_axis[j]
                    nc += x * pc
                    for a in rng:
                        if pco[a]:
                            ncoef[a] += x * pco[a]
            idx.append((nc, tuple(ncoef)))
        return View(self.base, tuple(shape), idx, self.dtype)

    def restrict(self, box):
        """The sub-view of view positions lo <= k < hi on every axis."""
        if all(lo == 0 and hi == s for (lo, hi), s in zip(box, self.shape)) and len(box) == len(self.shape):
            return self
        idx = [(c + sum(co[a] * box[a][0] for a in range(len(box))), co) for c, co in self.idx]
        return View(self.base, [hi - lo for lo, hi in box], idx, self.dtype)

    def broadcast(self, shape):
        """This view broadcast (numpy rules, stride 0) to `shape`."""
        shape = tuple(shape)
        if self.shape == shape:
            return self
        pad = len(shape) - self.ndim
        if pad < 0 or any(s not in (1, t) for s, t in zip(self.shape, shape[pad:])):
            raise NkiError(f"a tile of shape {self.shape} cannot be broadcast to {shape}", caller_loc()[0])
        idx = []
        for c, co in self.idx:
            co2 = (0,) * pad + tuple(0 if s == 1 else x for x, s in zip(co, self.shape))
            idx.append((c, co2))
        return View(self.base, shape, idx, self.dtype)

    def permuted(self, axes):
        idx = [(c, tuple(co[a] for a in axes)) for c, co in self.idx]
        return View(self.base, [self.shape[a] for a in axes], idx, self.dtype)

    def in_element_order(self, shape):
        """This view's elements, in their row-major order, seen in `shape` (same element count),
        or None when that is not an affine view (a merged pair of axes whose steps are not
        nested, as numpy's no-copy reshape). The first axis (partitions on chip) must stay."""
        shape = tuple(int(s) for s in shape)
        if shape == self.shape:
            return self
        if not shape or not self.shape or shape[0] != self.shape[0] or math.prod(shape) != math.prod(self.shape):
            return None
        nb = len(self.idx)
        # per view axis: its step in every base dim (size-1 axes carry none)
        old = [(s, tuple(co[a] for _, co in self.idx)) for a, s in enumerate(self.shape) if a > 0 and s != 1]
        new_free = list(shape[1:])
        steps = [None] * len(new_free)
        i = j = 0
        while i < len(old) or j < len(new_free):
            if j < len(new_free) and new_free[j] == 1:
                steps[j] = (0,) * nb
                j += 1
                continue
            if i >= len(old) or j >= len(new_free):
                return None
            # the smallest runs of old axes [i, ip) and new axes [j, jp) with equal products
            ip, jp = i + 1, j + 1
            po, pn = old[i][0], new_free[j]
            while po != pn:
                if po < pn:
                    if ip >= len(old):
                        return None
                    po *= old[ip][0]
                    ip += 1
                else:
                    if jp >= len(new_free):
                        return None
                    pn *= new_free[jp]
                    jp += 1
            for k in range(i, ip - 1):  # the old run must be one nested (mergeable) walk
                if old[k][1] != tuple(x * old[k + 1][0] for x in old[k + 1][1]):
                    return None
            step = old[ip - 1][1]
            for k in range(jp - 1, j - 1, -1):
                if new_free[k] == 1:
                    steps[k] = (0,) * nb
                    continue
                steps[k] = step
                step = tuple(x * new_free[k] for x in step)
            i, j = ip, jp
        idx = []
        for d, (c, co) in enumerate(self.idx):
            idx.append((c, (co[0],) + tuple(s[d] for s in steps)))
        return View(self.base, shape, idx, self.dtype)

    def check_bounds(self, loc=None):
        if 0 in self.shape or self.idx is self.base.__dict__.get("_full_idx"):
            return
        for d, (c, co) in enumerate(self.idx):
            lo = c + sum(min(0, x * (s - 1)) for x, s in zip(co, self.shape))
            hi = c + sum(max(0, x * (s - 1)) for x, s in zip(co, self.shape))
            if lo < 0 or hi >= self.base.shape[d]:
                what = f"HBM tensor '{self.base.name}'" if not self.base.on_chip else f"tile {self.base.describe()}"
                raise NkiError(
                    f"index out of bounds: dimension {d} of {what} (shape {list(self.base.shape)}) is "
                    f"indexed from {lo} to {hi}; mask the out-of-range part with mask=",
                    loc or caller_loc()[0],
                )

    # -- the access pattern of this view as an instruction operand
    def _ap(self, dtype=None, loc=None, split=None, merge=True):
        """The trnsim AccessPattern (JSON dict) of this view. `split`: the view axis where a
        reduction's reduced axes start (free dims are not merged across it). `merge=False`: one
        free dim per view axis after the first, size-1 axes included (an instruction whose rule
        reads the operand's rank, as `dma_transpose`). Without `split` and with `merge`, the
        result is kept on the view (an operand is asked again to mark and check its cells) and a
        copy returned."""
        if split is None and merge:
            c = self._apc
            want = dtype or self.dtype
            if c is not None and c[0] == want:
                ap = dict(c[1])
                ap["free"] = [list(d) for d in ap["free"]]
                return ap
            ap = self._ap_uncached(dtype, loc, None)
            self._apc = (want, {**ap, "free": [list(d) for d in ap["free"]]})
            return ap
        return self._ap_uncached(dtype, loc, split, merge)

    def _ap_uncached(self, dtype=None, loc=None, split=None, merge=True):
        b = self.base
        full = self.idx is b.__dict__.get("_full_idx") and self.shape == b.shape and merge
        if full and split is None:
            cached = b.__dict__.get("_full_ap")
            if cached is not None:
                ap = dict(cached)
                ap["dtype"] = trn_name(dtype or self.dtype)
                return ap
        self.check_bounds(loc)
        dt = trn_name(dtype or self.dtype)
        if not b.on_chip:
            lc = sum(s * c for s, (c, _) in zip(b.strides, self.idx))
            lcoef = [sum(s * co[a] for s, (_, co) in zip(b.strides, self.idx)) for a in range(self.ndim)]
            if self.ndim == 0:
                parts, pstep, free = 1, 0, []
            else:
                parts, pstep = self.shape[0], lcoef[0]
                free = [[lcoef[a], self.shape[a]] for a in range(1, self.ndim)]
            ap = {
                "mem": b.mem(),
                "dtype": dt,
                "partitions": parts,
                "partition_step": pstep if parts > 1 else 0,
                "offset": lc * b.dtype.itemsize,
                "free": _merge_free(free, loc) if merge else (free or [[1, 1]]),
            }
            if full and split is None:
                b._full_ap = dict(ap)
            return ap
        pc, pco = self.idx[b.par_axis]
        fc = sum(b.fstrides[d] * c for d, (c, _) in enumerate(self.idx) if d != b.par_axis)
        fco = [
            sum(b.fstrides[d] * co[a] for d, (_, co) in enumerate(self.idx) if d != b.par_axis)
            for a in range(self.ndim)
        ]
        pax = [a for a in range(self.ndim) if pco[a] != 0 and self.shape[a] > 1]
        if len(pax) == 1 and pax[0] != 0 and pco[pax[0]] == 1 and fco[pax[0]] == 0:
            # a whole tile with block dims before its partition dim: partitions first, the block
            # dims become outer free dims (every on-chip operand of the instruction alike)
            order = [pax[0]] + [a for a in range(self.ndim) if a != pax[0]]
            return self.permuted(order)._ap_uncached(dtype, loc, split, merge)
        if not pax:
            # one partition: the first axis is it when the view keeps its rank (merge=False)
            parts, first_free = 1, 1 if not merge and self.ndim >= 2 and self.shape[0] == 1 else 0
        else:
            if pax != [0] or pco[0] != 1:
                raise NkiError(
                    f"the partition dimension of tile {b.describe()} must be the first axis of the view, with step 1",
                    loc or caller_loc()[0],
                )
            if fco[0] != 0:
                raise NkiError(
                    f"the first axis of a view of tile {b.describe()} must index partitions only",
                    loc or caller_loc()[0],
                )
            parts, first_free = self.shape[0], 1
        free = [[fco[a], self.shape[a]] for a in range(first_free, self.ndim)]
        ap = {
            "mem": b.mem(),
            "dtype": dt,
            "start_partition": pc,
            "partitions": parts,
            "offset": b.offset + fc * b.dtype.itemsize,
            "_st": storage_of(b)._rec,
            "free": _merge_free(free, loc, None if split is None else split - first_free)
            if merge
            else (free or [[1, 1]]),
        }
        if full and split is None:
            b._full_ap = dict(ap)
        return ap

    def positions(self):
        """(partition, free element) int arrays of every element of this on-chip view."""
        b = self.base
        pc, pco = self.idx[b.par_axis]
        p = _affine_vals(pc, pco, self.shape)
        fc = sum(b.fstrides[d] * c for d, (c, _) in enumerate(self.idx) if d != b.par_axis)
        fco = [
            sum(b.fstrides[d] * co[a] for d, (_, co) in enumerate(self.idx) if d != b.par_axis)
            for a in range(self.ndim)
        ]
        f = _affine_vals(fc, fco, self.shape)
        st = storage_of(b)
        asz, ssz = b.dtype.itemsize, st.dtype.itemsize
        if asz != ssz:
            # a view in a dtype of another size (tensor.view): the storage elements its bytes
            # cover, on an extra last axis when one element spans several
            byte0 = (b.offset - st.offset) + f * asz
            if asz > ssz:
                r = asz // ssz
                f = (byte0 // ssz)[..., None] + np.arange(r, dtype=np.int64)
                p = p[..., None]
            else:
                f = byte0 // ssz
        return np.broadcast_arrays(p, f)

    # -- tensor methods (nki.tensor)
    def reshape(self, *shape, **kw):
        if "shape" in kw:  # tensor.reshape(shape=...), as AWS's kernels write it
            if shape:
                raise NkiError("reshape takes the shape once (positionally or as shape=)", caller_loc()[0])
            shape = (kw.pop("shape"),)
        if kw:
            raise NkiError(f"reshape() got unexpected arguments {sorted(kw)}", caller_loc()[0])
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = tuple(int(s) for s in shape)
        if int(np.prod(shape)) != int(np.prod(self.shape)):
            raise NkiError(f"cannot reshape {self.shape} to {shape}", caller_loc()[0])
        if not self.is_full():
            raise NkiError("reshape is supported on whole tensors only", caller_loc()[0])
        b = self.base
        if b.on_chip:
            if shape[0] != b.partitions or b.par_axis != 0:
                raise NkiError(f"reshape of tile {b.describe()} must keep the partition dimension", caller_loc()[0])
            # a view with the new free dims over the same row-major free storage of a 2-D alias
            alias = _Alias(storage_of(b), shape, b.dtype)
            return View.full(alias)
        return View.full(_HbmAlias(storage_of(b), shape, b.dtype))

    def broadcast_to(self, shape):
        from . import language as nl

        return nl.broadcast_to(self, shape)

    def expand_dims(self, axis):
        from . import language as nl

        return nl.expand_dims(self, axis)

    def astype(self, dtype):
        from . import language as nl

        return nl.copy(self, dtype=dtype)

    def view(self, dtype):
        """The same bytes read as `dtype`. To a dtype of another size, as numpy's `ndarray.view`:
        the last dimension is rescaled (`[P, 8]` uint8 viewed as int32 is `[P, 2]`); the view must
        be a whole tensor whose last dimension holds a whole number of the new elements."""
        dtype = as_dtype(dtype)
        check_target_dtype(getattr(self.base, "tracer", None), dtype, caller_loc()[0])
        if dtype.itemsize == self.dtype.itemsize:
            return View(self.base, self.shape, self.idx, dtype)
        loc = caller_loc()[0]
        if not self.is_full() or self.ndim < (2 if self.base.on_chip else 1):
            raise NkiError(
                "tensor.view to a dtype of another size takes a whole tensor (view it, then index the view)", loc
            )
        nbytes = self.shape[-1] * self.dtype.itemsize
        if nbytes % dtype.itemsize:
            raise NkiError(
                f"tensor.view: the last dimension ({self.shape[-1]} x {self.dtype.itemsize} bytes) is not a "
                f"whole number of {dtype} elements",
                loc,
            )
        shape = self.shape[:-1] + (nbytes // dtype.itemsize,)
        if self.base.on_chip:
            if self.base.par_axis != 0:
                raise NkiError("tensor.view to a dtype of another size: the partition dimension must come first", loc)
            return View.full(_Alias(storage_of(self.base), shape, dtype))
        return View.full(_HbmAlias(storage_of(self.base), shape, dtype))

    def indirect(self, *args, **kwargs):
        """NeuronCore-v4 tensor indirection (`tensor.indirect(...)`, nki-samples'
        tensor_indirection tutorial): not modelled; a clear refusal, not an AttributeError."""
        raise NkiError(
            "tensor.indirect(...) (NeuronCore-v4 tensor indirection) is not supported by trnsim yet; "
            "an indirect DMA is `.ap(vector_offset=..., indirect_dim=...)` (docs/nki.md)",
            caller_loc()[0],
        )

    def ap(self, pattern=None, offset=0, scalar_offset=None, vector_offset=None, indirect_dim=0, dtype=None):
        """AWS's access pattern (`NkiTensor.ap`, the NKI access-pattern guide): the tensor flattened
        to its elements (of `dtype`, which reinterprets the bytes, default the tensor's own), read
        as nested loops `pattern = [[step, num], ...]` (outermost first) from element `offset`.
        The view's shape is the nums. On SBUF/PSUM the first pair walks the partitions, so its
        step must be the tensor's free size (every partition reads the same pattern). As AWS
        documents, `.ap` takes a whole tensor, not an indexed one."""
        loc = caller_loc()[0]
        if pattern is None or not isinstance(pattern, (list, tuple)) or not pattern:
            raise NkiError("tensor.ap(pattern=[[step, num], ...], offset=0): a non-empty pattern is required", loc)
        if scalar_offset is not None:
            raise NkiError(
                "tensor.ap(scalar_offset=) (a register-held start) is not supported by trnsim yet; "
                "vector_offset= (an indirect DMA) is",
                loc,
            )
        try:
            pat = [(int(st), int(n)) for st, n in pattern]
        except (TypeError, ValueError):
            raise NkiError(
                f"tensor.ap pattern {pattern!r}: each entry is a [step, num] pair of integers", loc
            ) from None
        if any(n < 1 for _, n in pat) or offset < 0:
            raise NkiError(f"tensor.ap pattern {pattern!r} offset {offset}: counts are >= 1 and the offset >= 0", loc)
        if not self.is_full():
            raise NkiError(
                "tensor.ap takes a whole tensor (nl.ndarray), not an indexed or sliced one: cannot specify "
                "an access pattern on an already indexed tensor",
                loc,
            )
        v = self.view(dtype) if dtype is not None else self
        b = v.base
        shape = tuple(n for _, n in pat)
        if b.on_chip:
            if vector_offset is not None:
                raise NkiError(
                    "tensor.ap(vector_offset=) on an SBUF/PSUM tensor (tensor indirection, NeuronCore-v4) is "
                    "not supported by trnsim yet; on an HBM tensor it is an indirect DMA",
                    loc,
                )
            if getattr(b, "par_axis", 0) != 0:
                raise NkiError("tensor.ap on a tile whose partition dimension is not its first axis", loc)
            f = int(np.prod(v.shape[1:])) if v.ndim > 1 else 1
            if len(pat) > 1 and pat[0][0] != f or len(pat) == 1 and pat[0][0] not in (f, 0, 1):
                raise NkiError(
                    f"tensor.ap on {storage_of(b).describe()}: the first [step, num] walks the partitions, "
                    f"so its step must be the free size {f} (got {pat[0][0]}): every partition reads the "
                    "same pattern",
                    loc,
                )
            flat = _Alias(storage_of(b), (v.shape[0], f), v.dtype)
            p0, f0 = divmod(int(offset), f)
            nd = len(pat)
            idx = [
                (p0, tuple(1 if a == 0 else 0 for a in range(nd))),
                (f0, tuple(0 if a == 0 else pat[a][0] for a in range(nd))),
            ]
            return View(flat, shape, idx, v.dtype)
        n = int(np.prod(v.shape)) if v.ndim else 1
        flat = _HbmAlias(storage_of(b), (n,), v.dtype)
        if vector_offset is not None:
            return _indirect_ap(v, flat, pat, int(offset), vector_offset, indirect_dim, loc)
        return View(flat, shape, [(int(offset), tuple(st for st, _ in pat))], v.dtype)

    # -- writes
    def __setitem__(self, key, value):
        dst = self.index(key)
        if isinstance(value, View) and value._inplace and value.base is dst.base:
            value._inplace = False
            return
        from . import language as nl

        nl._assign(dst, value)

    def __iadd__(self, other):
        from . import language as nl

        nl._accumulate(self, other)
        v = View(self.base, self.shape, self.idx, self.dtype)
        v._inplace = True
        return v

    # -- operators (nki.language element-wise functions)
    def _op(self, name, other, reverse=False):
        from . import language as nl

        f = getattr(nl, name)
        return f(other, self) if reverse else f(self, other)

    def __add__(self, o):
        if isinstance(o, Aff):  # a tile element plus an index expression: a dynamic index
            return DynIndex(self, o)
        return self._op("add", o)

    def __radd__(self, o):
        if isinstance(o, Aff):
            return DynIndex(self, o)
        return self._op("add", o, True)

    def __sub__(self, o):
        return self._op("subtract", o)

    def __rsub__(self, o):
        return self._op("subtract", o, True)

    def __mul__(self, o):
        return self._op("multiply", o)

    def __rmul__(self, o):
        return self._op("multiply", o, True)

    def __truediv__(self, o):
        return self._op("divide", o)

    def __rtruediv__(self, o):
        return self._op("divide", o, True)

    def __pow__(self, o):
        return self._op("power", o)

    def __neg__(self):
        from . import language as nl

        return nl.negative(self)

    def __abs__(self):
        from . import language as nl

        return nl.abs(self)

    def __invert__(self):
        from . import language as nl

        return nl.invert(self)

    def __and__(self, o):
        return self._op("bitwise_and", o)

    def __or__(self, o):
        return self._op("bitwise_or", o)

    def __xor__(self, o):
        return self._op("bitwise_xor", o)

    def __lshift__(self, o):
        return self._op("left_shift", o)

    def __rshift__(self, o):
        return self._op("right_shift", o)

    def __lt__(self, o):
        return self._op("less", o)

    def __le__(self, o):
        return self._op("less_equal", o)

    def __gt__(self, o):
        return self._op("greater", o)

    def __ge__(self, o):
        return self._op("greater_equal", o)

    def __eq__(self, o):
        return self._op("equal", o)

    def __ne__(self, o):
        return self._op("not_equal", o)

    __hash__ = object.__hash__


class _Alias:
    """A reshaped whole tile: same bytes, other free dims."""

    on_chip = True

    def __init__(self, st, shape, dtype=None):
        self._st = st
        self.shape = tuple(shape)
        self.dtype = st.dtype if dtype is None else dtype
        self.par_axis = 0
        self.partitions = shape[0]
        self.fstrides = {}
        acc = 1
        for d in range(len(shape) - 1, 0, -1):
            self.fstrides[d] = acc
            acc *= shape[d]

    def __getattr__(self, k):
        return getattr(self._st, k)


class _HbmAlias:
    on_chip = False

    def __init__(self, st, shape, dtype=None):
        self._st = st
        self.shape = tuple(shape)
        self.dtype = st.dtype if dtype is None else dtype
        strides, acc = [], 1
        for s in reversed(self.shape):
            strides.append(acc)
            acc *= s
        self.strides = tuple(reversed(strides))

    def __getattr__(self, k):
        return getattr(self._st, k)


def storage_of(base):
    """The real storage behind an alias."""
    return base._st if isinstance(base, (_Alias, _HbmAlias)) else base


class DynView:
    """An HBM view indexed with a tile on one dimension (dynamic indexing): only load/store/
    dma_copy/atomic_rmw take it, as an indirect DMA."""

    def __init__(self, parent, key):
        self.parent, self.key = parent, key
        dyn = [j for j, k in enumerate(key) if isinstance(k, View)]
        if len(dyn) != 1:
            raise NkiError("only one dimension may be indexed by a tile", caller_loc()[0])
        if parent.base.on_chip:
            raise NkiError("dynamic (tile-valued) indices are only allowed on HBM tensors", caller_loc()[0])
        self.dim = dyn[0]
        self.index_tile = key[self.dim]
        rest = list(key)
        rest[self.dim] = 0
        self.row0 = parent.index(tuple(rest))  # the view of row 0 (the dynamic dim dropped)
        self.dtype = parent.dtype
        self.base = parent.base
        self.shape = (
            (self.index_tile.shape[0],) + self.row0.shape[1:] if self.row0.ndim else (self.index_tile.shape[0],)
        )


def _indirect_ap(v, flat, pat, offset, index, indirect_dim, loc):
    """`hbm.ap(pattern, offset, vector_offset=index, indirect_dim=d)`: an indirect DMA side. Row k
    (of the pattern's first [step, num], num = the index tile's rows) starts index[k] positions
    along dimension d of the tensor, one position being prod(shape[d+1:]) elements, from element
    `offset`; the rest of the pattern walks each row. As in AWS's kernels, the first step is that
    row size (the index replaces the first loop's counter)."""
    if isinstance(indirect_dim, bool) or not isinstance(indirect_dim, (int, np.integer)):
        raise NkiError(f"tensor.ap(indirect_dim={indirect_dim!r}): a dimension number", loc)
    d = int(indirect_dim)
    if not 0 <= d < max(1, v.ndim):
        raise NkiError(f"tensor.ap(indirect_dim={d}) of a tensor of rank {v.ndim}", loc)
    if not isinstance(index, View) or not index.base.on_chip or index.base.buffer != "sbuf":
        raise NkiError("tensor.ap(vector_offset=) takes a tile of indices in SBUF ([num, 1], one per row)", loc)
    if index.dtype not in (int32, uint32, int16, uint16):
        raise NkiError(f"tensor.ap(vector_offset=) holds integer indices, not {index.dtype}", loc)
    row = int(np.prod(v.shape[d + 1 :])) if v.ndim else 1
    step, num = pat[0]
    if step != row:
        raise NkiError(
            f"tensor.ap(vector_offset=, indirect_dim={d}): the first [step, num] is the indexed dimension, so its "
            f"step is one position of dimension {d} ({row} elements), got {step}",
            loc,
        )
    if index.ndim != 2 or index.shape != (num, 1):
        raise NkiError(
            f"tensor.ap(vector_offset=): the index tile is [{num}, 1] (one index per row of the pattern's first "
            f"[step, num]), got {list(index.shape)}",
            loc,
        )
    shape = tuple(n for _, n in pat)
    dv = DynView.__new__(DynView)
    dv.parent = View(flat, shape, [(offset, tuple(st for st, _ in pat))], v.dtype)
    dv.key = (index,) + (slice(None),) * (len(pat) - 1)
    dv.dim = 0
    dv.index_tile = index
    dv.row0 = View(flat, shape[1:], [(offset, tuple(st for st, _ in pat[1:]))], v.dtype)
    dv.dtype, dv.base, dv.shape = v.dtype, flat, shape
    return dv


class DynIndex:
    """A tile element used as an index on a free dim of an on-chip tile, plus an affine part:
    `src[ix, offsets[0, i] + iy]` (tensor_copy_dynamic_src/_dst). The element is read at run time."""

    def __init__(self, scalar, aff):
        if int(np.prod(scalar.shape)) != 1:
            raise NkiError("a dynamic index must be a single tile element (e.g. offsets[0, i])", caller_loc()[0])
        self.scalar, self.aff = scalar, aff

    def __add__(self, o):
        if isinstance(o, (Aff, int, np.integer)):
            return DynIndex(self.scalar, self.aff + o)
        return NotImplemented

    __radd__ = __add__


class DynTileView:
    """An on-chip view with one free dim at a dynamic offset: the static view (the affine part)
    plus the tile element holding the offset and the elements one unit of it moves."""

    def __init__(self, parent, key):
        dyn = [j for j, k in enumerate(key) if isinstance(k, DynIndex)]
        if len(dyn) != 1:
            raise NkiError("only one dimension may have a dynamic index", caller_loc()[0])
        j = dyn[0]
        d = key[j]
        rest = list(key)
        rest[j] = d.aff
        self.static = parent.index(tuple(rest))
        self.scalar = d.scalar
        b = parent.base
        if not b.on_chip:
            raise NkiError(
                "tile-element indices are for on-chip tiles; index HBM tensors with a [P, 1] tile", caller_loc()[0]
            )
        if parent.idx[b.par_axis][1][j] != 0:
            raise NkiError("the partition dimension cannot be indexed dynamically", caller_loc()[0])
        self.scale = sum(b.fstrides[dd] * co[j] for dd, (_, co) in enumerate(parent.idx) if dd != b.par_axis)
        self.shape = self.static.shape
        self.dtype = self.static.dtype
        self.base = self.static.base


def _affine_vals(c, co, shape):
    v = np.full((1,) * len(shape), c, dtype=np.int64)
    for a, (x, s) in enumerate(zip(co, shape)):
        if x:
            r = [1] * len(shape)
            r[a] = s
            v = v + x * np.arange(s, dtype=np.int64).reshape(r)
    return v


# An access-pattern dimension counts its elements in 16 bits (the simulator's and the hardware's
# limit): neighbours whose product would exceed it stay two dimensions.
AP_DIM_MAX = 65535


def _merge_free(free, loc=None, split=None):
    """Free dims with size-1 dims dropped and contiguous neighbours merged (never across `split`,
    the index in `free` where a reduction's reduced dims start, nor past AP_DIM_MAX elements)."""
    dims = [[int(s), int(n), split is not None and i >= split] for i, (s, n) in enumerate(free) if n != 1]
    merged = []
    for s, n, g in dims:
        if merged and merged[-1][0] == s * n and merged[-1][2] == g and merged[-1][1] * n <= AP_DIM_MAX:
            merged[-1] = [s, merged[-1][1] * n, g]
        else:
            merged.append([s, n, g])
    merged = [[s, n] for s, n, _ in merged]
    if any(n == 0 for _, n, _ in dims):
        merged = [[1, 0]]
    if len(merged) > 4:
        raise NkiError(f"an operand needs {len(merged)} free dimensions; the hardware has 4", loc or caller_loc()[0])
    return merged or [[1, 1]]
