//! NKI emitter: a trnsim [`Program`] → the source of an NKI kernel in the legacy
//! `neuronxcc.nki` dialect (Neuron SDK 2.26–2.28, the last that runs NKI on trn1 / NeuronCore-v2),
//! or ([`emit_dialect`] with [`Dialect::Current`]) in the current `nki` dialect (NKI 0.3+, trn2 /
//! trn3). What follows describes the legacy dialect; [`Dialect::Current`] lists how the current one
//! differs (the regions, statements and indirect-DMA forms are the same, spelled as that API does).
//!
//! The kernel is one `@nki.jit` function named [`KERNEL_NAME`]:
//! * its parameters are the program's `input` HBM tensors, in declaration order, with names made
//!   into Python identifiers ([`python_names`]: `input.0` → `input_0`);
//! * `output` tensors are allocated with `nl.ndarray(shape, dtype=…, buffer=nl.shared_hbm)` and
//!   returned (one tensor, or a tuple in declaration order); `scratch` tensors use `nl.hbm`;
//! * every HBM tensor the program addresses gets a flat view `<name>_flat = <name>.reshape((n,))`:
//!   a trnsim HBM access pattern addresses the flat tensor (`offset/size + p·partition_step +
//!   Σ stepₖ·iₖ`), which is written as one affine `nl.arange` index expression on that view.
//!
//! **On-chip memory.** trnsim addresses SBUF/PSUM as per-partition byte arrays: (start partition,
//! byte offset, dtype, free pattern). The emitter allocates **one tile per region**: per memory,
//! the byte ranges the program's operands touch are merged where they overlap; each merged region
//! used with a single dtype becomes `nl.ndarray((128, n), dtype=…, buffer=nl.sbuf | nl.psum)`
//! (all 128 partitions, so partition indices stay absolute). An operand is then a view of its
//! region's tile: `t[p0:p0+P, e0:e0+n]` for a contiguous single free dimension, else
//! `t[p0 + nl.arange(P)[:, None, …], e0 + s₁·nl.arange(n₁)[None, :, …] + …]` (an affine index,
//! shape `[P, n₁, …]`). A region the program reinterprets (the same bytes read as f32 and as
//! i32, say: bit tricks) becomes a `nl.uint8` byte tile that each operand bitcasts,
//! `t.view(nl.int32)[…]`, indices then in elements of that dtype. Regions are not
//! placed at the program's addresses: the NKI compiler allocates them (no `nki.compiler` direct
//! allocation is emitted), so a kernel reproduces the program's dataflow, not its SBUF layout.
//!
//! **Instructions.** Each instruction becomes one statement, in program order, preceded by a
//! `# [index] engine opcode` comment. Legacy `nisa.*` calls return a tile that is assigned into
//! the destination view (`dst[...] = nisa.tensor_tensor(...)`), with `dtype=` the destination's
//! dtype (the cast on write); `nc_matmul` with `accumulate` is `dst[...] += nisa.nc_matmul(...)`.
//! DMA is `nisa.dma_copy(dst=…, src=…)` (`dst_rmw_op=np.add` for an accumulating DMA); an
//! indirect DMA indexes its HBM side with the SBUF index tile as legacy NKI's dynamic index on the
//! first dimension, `t.reshape((M, row_step))[idx[0:R, k:k+1], c0 + nl.arange(n)[None, :]]` (an
//! index tile laid out other than one per partition is first copied into an `[R, 1]` tile by a
//! DMA; more than 128 rows are split into DMAs of at most 128), and adds
//! `oob_mode=nisa.oob_mode.error | skip`. Rows that are not rows of the tensor (an element offset
//! or an overlapping window per index; more than 128 indices in one partition) use the same
//! dynamic index on the tensor seen as rows of `g` elements (`g` divides the row step, the offset,
//! the size and the window's pieces): one DMA per `g`-element piece of the window and per at most
//! 128 indices, each with an `[R, 1]` column of row numbers computed on GpSimd in exact int32
//! arithmetic from the index tile, `-1` (out of bounds) where the program's row would be out of
//! bounds (`Emitter::indirect_rows`). The `wait` lists are not emitted: NKI derives the
//! synchronisation from the dataflow. A `bypass` ALU stage is a multiply by 1.0 (legacy NKI has no `nl.bypass`).
//! Supported: `nc_matmul`, `nc_transpose`, `tensor_tensor`, `tensor_scalar`,
//! `scalar_tensor_tensor`, `tensor_reduce`, `tensor_tensor_scan`, `tensor_scalar_reduce`,
//! `tensor_copy`, `tensor_copy_predicated` (writes its `dst=` in place: unselected elements keep
//! their value), `reciprocal`, `memset`, `iota`, `affine_select` (predicate `(affine) cmp 0`),
//! `activation`, `tensor_partition_reduce`, `bn_stats`, `bn_aggr`, `max8`, `nc_match_replace8`
//! (`dst_idx=` written in place), `select_reduce` (`dst=` in place),
//! `set_rng_seed` (as `nl.random_seed`) / `rng` (legacy NKI has no raw-bit call: the current
//! namespace's `nki.isa.rng(dst=…, engine=…)`, documented for NeuronCore-v2's Vector engine,
//! imported as `nisa_current` by kernels that need it) /
//! `dropout` (trnsim's PCG32 generator in the stand-in; the hardware
//! PRNG is unpublished, so on a device these give other random numbers), `dma_copy` (direct, and
//! indirect with one free dimension per row). Anything else returns [`EmitError::Unsupported`]
//! naming the instruction's index and opcode.
//!
//! Not verified against `neuronx-cc` (no Neuron SDK here): docs/hardware.md §1.4 lists what to
//! check on the first hardware night.
//!
//! The emitted source runs on the numpy stand-in (`conformance/pyexec/nki_standin`), which
//! implements exactly this subset with trnsim's numerics; see docs/hardware.md.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use trnsim::{AccCmd, AccessPattern, ActFunc, AluOp, DType, Engine, HbmRole, MemSpace, Op, Program, ScalarOperand};

/// Name of the emitted `@nki.jit` function.
pub const KERNEL_NAME: &str = "kernel";

/// Which NKI the emitter writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dialect {
    /// Legacy `neuronxcc.nki` (SDK 2.26–2.28; trn1): calls return a tile assigned into the
    /// destination view, `dtype=` is the cast on write, views are `nl.arange` index expressions.
    #[default]
    Legacy,
    /// The current `import nki` (NKI 0.3+, SDK 2.29+; trn2/trn3): every call writes its `dst=`
    /// (the destination's dtype is the cast on write; no `dtype=`/`mask=`), views are slices or
    /// AWS's access patterns `t.ap(pattern=[[step, num], ...], offset=…)`, `iota`/`affine_select`
    /// take their `pattern=` form, an indirect DMA side is `t.ap(…, vector_offset=idx,
    /// indirect_dim=0)`, and a seed is a `[1, 1]` int32 tile (`nisa.set_rng_seed`).
    Current,
}

/// Partitions of every on-chip tile the emitter allocates (NeuronCore-v2's `nl.tile_size.pmax`).
pub const PARTITIONS: usize = 128;

/// Why a program cannot be emitted.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EmitError {
    /// An instruction (or feature of one) the emitter does not translate.
    #[error("instruction {index}: `{opcode}` is not supported by the NKI emitter: {reason}")]
    Unsupported {
        index: usize,
        opcode: String,
        reason: String,
    },
    /// The program cannot be expressed as typed NKI tiles (or is malformed).
    #[error("cannot emit NKI: {0}")]
    Invalid(String),
}

/// The `nl.*` name of a dtype.
pub fn nl_dtype(d: DType) -> &'static str {
    match d {
        DType::F32 => "nl.float32",
        DType::Tf32 => "nl.tfloat32",
        DType::Bf16 => "nl.bfloat16",
        DType::F16 => "nl.float16",
        DType::Fp8E4m3 => "nl.float8_e4m3",
        DType::Fp8E4m3fn => "nl.float8_e4m3fn",
        DType::Fp8E5m2 => "nl.float8_e5m2",
        DType::I8 => "nl.int8",
        DType::I16 => "nl.int16",
        DType::I32 => "nl.int32",
        DType::U8 => "nl.uint8",
        DType::U16 => "nl.uint16",
        DType::U32 => "nl.uint32",
        DType::Bool => "nl.bool_",
        DType::Fp8E8m0fnu => "nl.float8_e8m0fnu",
        DType::Fp4E2m1fn => "nl.float4_e2m1fn",
        DType::Fp8E5m2X4 => "nl.float8_e5m2_x4",
        DType::Fp8E4m3fnX4 => "nl.float8_e4m3fn_x4",
        DType::Fp4E2m1fnX4 => "nl.float4_e2m1fn_x4",
        DType::I64 => "nl.int64",
    }
}

/// The `nl.*` name of an ALU operator.
pub fn nl_alu(op: AluOp) -> &'static str {
    match op {
        AluOp::Bypass => "nl.bypass",
        AluOp::Add => "nl.add",
        AluOp::Subtract => "nl.subtract",
        AluOp::Multiply => "nl.multiply",
        AluOp::Max => "nl.maximum",
        AluOp::Min => "nl.minimum",
        AluOp::IsEqual => "nl.equal",
        AluOp::NotEqual => "nl.not_equal",
        AluOp::IsGe => "nl.greater_equal",
        AluOp::IsGt => "nl.greater",
        AluOp::IsLe => "nl.less_equal",
        AluOp::IsLt => "nl.less",
        AluOp::LogicalAnd => "nl.logical_and",
        AluOp::LogicalOr => "nl.logical_or",
        AluOp::LogicalXor => "nl.logical_xor",
        AluOp::LogicalNot => "nl.logical_not",
        AluOp::Abs => "nl.abs",
        AluOp::Reciprocal => "nl.reciprocal",
        AluOp::Rsqrt => "nl.rsqrt",
        AluOp::Pow => "nl.power",
        AluOp::Average => "nl.average",
        AluOp::BitwiseAnd => "nl.bitwise_and",
        AluOp::BitwiseOr => "nl.bitwise_or",
        AluOp::BitwiseXor => "nl.bitwise_xor",
        AluOp::BitwiseNot => "nl.invert",
        AluOp::ShiftLeft => "nl.left_shift",
        AluOp::LogicalShiftRight => "nl.right_shift",
    }
}

/// The `nl.*` name of an activation function.
pub fn nl_act(f: ActFunc) -> &'static str {
    match f {
        ActFunc::Copy => "nl.copy",
        ActFunc::Square => "nl.square",
        ActFunc::Sigmoid => "nl.sigmoid",
        ActFunc::Relu => "nl.relu",
        ActFunc::Gelu => "nl.gelu",
        ActFunc::GeluDx => "nl.gelu_dx",
        ActFunc::GeluApproxTanh => "nl.gelu_apprx_tanh",
        ActFunc::GeluApproxSigmoid => "nl.gelu_apprx_sigmoid",
        ActFunc::GeluApproxSigmoidDx => "nl.gelu_apprx_sigmoid_dx",
        ActFunc::Silu => "nl.silu",
        ActFunc::SiluDx => "nl.silu_dx",
        ActFunc::Tanh => "nl.tanh",
        ActFunc::Softplus => "nl.softplus",
        ActFunc::Mish => "nl.mish",
        ActFunc::Erf => "nl.erf",
        ActFunc::ErfDx => "nl.erf_dx",
        ActFunc::Exp => "nl.exp",
        ActFunc::Log => "nl.log",
        ActFunc::Sin => "nl.sin",
        ActFunc::Arctan => "nl.arctan",
        ActFunc::Sqrt => "nl.sqrt",
        ActFunc::Rsqrt => "nl.rsqrt",
        ActFunc::Reciprocal => "nl.reciprocal",
        ActFunc::Sign => "nl.sign",
        ActFunc::Abs => "nl.abs",
    }
}

fn nisa_engine(e: Engine) -> &'static str {
    match e {
        Engine::Tensor => "nisa.tensor_engine",
        Engine::Vector => "nisa.vector_engine",
        Engine::Scalar => "nisa.scalar_engine",
        Engine::Gpsimd => "nisa.gpsimd_engine",
        Engine::Dma => "nisa.dma_engine",
    }
}

const PY_KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
    "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
    "not", "or", "pass", "raise", "return", "try", "while", "with", "yield", "match", "case", "type",
];

/// The name an emitted kernel imports the current namespace's `nki.isa` under (for `rng`, the one
/// call legacy `neuronxcc.nki.isa` lacks).
const CURRENT_ISA: &str = "nisa_current";

/// Names the kernel uses for itself (modules, the function); HBM tensors never take them.
const RESERVED: &[&str] = &["np", "nl", "nisa", "nki", CURRENT_ISA, KERNEL_NAME];

fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert_str(0, "t_");
    }
    if PY_KEYWORDS.contains(&s.as_str()) || RESERVED.contains(&s.as_str()) {
        s.push('_');
    }
    // Emitter-generated locals are `sbuf_<n>`, `psum_<n>`, `idx_<n>`, `rows_<n>` and `<name>_flat`.
    let generated = |s: &str| {
        s.ends_with("_flat")
            || ["sbuf_", "psum_", "idx_", "rows_"].iter().any(|p| {
                s.strip_prefix(p)
                    .is_some_and(|r| !r.is_empty() && r.chars().all(|c| c.is_ascii_digit()))
            })
    };
    if generated(&s) {
        s.push_str("_t");
    }
    s
}

/// The Python identifier of each HBM tensor, in declaration order: non-identifier characters
/// become `_`, a leading digit gets `t_`, keywords and reserved names get a trailing `_`, and
/// clashes after that get `_2`, `_3`, ….
pub fn python_names(program: &Program) -> Vec<String> {
    let mut used: BTreeSet<String> = BTreeSet::new();
    let mut out = Vec::new();
    for decl in &program.hbm {
        let base = sanitize(&decl.name);
        let mut name = base.clone();
        let mut k = 2;
        while used.contains(&name) || used.contains(&format!("{name}_flat")) {
            name = format!("{base}_{k}");
            k += 1;
        }
        used.insert(name.clone());
        used.insert(format!("{name}_flat"));
        out.push(name);
    }
    out
}

/// A Python float literal for an f64 (round-trips exactly).
fn py_float(v: f64) -> String {
    if v.is_nan() {
        "float('nan')".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "float('inf')".into()
        } else {
            "float('-inf')".into()
        }
    } else {
        let s = format!("{v:?}");
        if s.contains(['.', 'e', 'E']) {
            s
        } else {
            format!("{s}.0")
        }
    }
}

/// Greatest common divisor (`gcd(0, x) = x`).
fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.abs(), b.abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// ⌊a / b⌋ for b ≠ 0.
fn div_floor(a: i64, b: i64) -> i64 {
    let (a, b) = if b < 0 { (-a, -b) } else { (a, b) };
    a.div_euclid(b)
}

/// ⌈a / b⌉ for b ≠ 0.
fn div_ceil(a: i64, b: i64) -> i64 {
    -div_floor(-a, b)
}

/// The statements an indirect DMA needs first, and the expression of its indirect side.
type IndirectForm = (Vec<String>, String);

/// One merged on-chip region (one tile).
#[derive(Clone, Debug)]
struct Region {
    name: String,
    mem: MemSpace,
    dtype: DType,
    /// Byte range [start, end) within every partition.
    start: i64,
    end: i64,
    /// Used with several dtypes: a `uint8` tile viewed per operand with `.view(dtype)`.
    mixed: bool,
}

struct Emitter<'a> {
    program: &'a Program,
    dialect: Dialect,
    hbm_names: BTreeMap<String, String>,
    hbm_sizes: BTreeMap<String, usize>,
    regions: Vec<Region>,
}

/// Byte range [lo, hi) an on-chip operand touches within a partition (None when empty).
fn byte_range(ap: &AccessPattern) -> Option<(i64, i64)> {
    if ap.num_elems() == 0 {
        return None;
    }
    let (lo, hi) = ap.free_extent()?;
    let size = ap.dtype.size() as i64;
    let off = ap.offset as i64;
    Some((off + lo * size, off + (hi + 1) * size))
}

/// Free dims with the empty pattern normalised to one element.
fn free_dims(ap: &AccessPattern) -> Vec<[i64; 2]> {
    if ap.free.is_empty() {
        vec![[1, 1]]
    } else {
        ap.free.clone()
    }
}

/// `nl.arange(n)[None, :, None]`-style index of dimension `d` of a rank-`rank` index.
fn arange(n: usize, d: usize, rank: usize) -> String {
    if rank == 1 {
        return format!("nl.arange({n})");
    }
    let parts: Vec<&str> = (0..rank).map(|k| if k == d { ":" } else { "None" }).collect();
    format!("nl.arange({n})[{}]", parts.join(", "))
}

/// `base + c₀·idx₀ + …` over `(coefficient, extent, index)` terms. A zero coefficient drops the
/// term unless its extent is > 1: a broadcast axis must keep its extent in the index's shape, so
/// it is written `0 * idx`. A zero base is dropped when a term remains.
fn affine(base: i64, terms: &[(i64, usize, String)]) -> String {
    let mut s = String::new();
    for (c, n, idx) in terms {
        let t = match *c {
            0 if *n > 1 => format!("0 * {idx}"),
            0 => continue,
            1 => idx.clone(),
            c => format!("{c} * {idx}"),
        };
        if s.is_empty() {
            s = t;
        } else {
            write!(s, " + {t}").unwrap();
        }
    }
    match (s.is_empty(), base) {
        (true, b) => b.to_string(),
        (false, 0) => s,
        (false, b) if b < 0 => format!("{s} - {}", -b),
        (false, b) => format!("{s} + {b}"),
    }
}

/// As [`affine`], but every term stays (a zero coefficient as `0 * idx`), so the expression has
/// the shape of all its index terms.
fn affine_all(base: i64, terms: &[(i64, usize, String)]) -> String {
    let kept: Vec<(i64, usize, String)> = terms.iter().map(|(c, n, idx)| (*c, (*n).max(2), idx.clone())).collect();
    affine(base, &kept)
}

impl<'a> Emitter<'a> {
    fn new(program: &'a Program, dialect: Dialect) -> Result<Self, EmitError> {
        let names = python_names(program);
        let mut hbm_names = BTreeMap::new();
        let mut hbm_sizes = BTreeMap::new();
        for (decl, py) in program.hbm.iter().zip(names) {
            if hbm_names.insert(decl.name.clone(), py).is_some() {
                return Err(EmitError::Invalid(format!(
                    "HBM tensor `{}` is declared twice",
                    decl.name
                )));
            }
            hbm_sizes.insert(decl.name.clone(), decl.shape.iter().product());
        }
        Ok(Emitter {
            program,
            dialect,
            hbm_names,
            hbm_sizes,
            regions: Vec::new(),
        })
    }

    /// Merges the byte ranges of all on-chip operands into typed regions.
    fn allocate(&mut self) -> Result<(), EmitError> {
        for (mem, prefix) in [(MemSpace::Sbuf, "sbuf"), (MemSpace::Psum, "psum")] {
            let mut spans: Vec<(i64, i64, DType, usize)> = Vec::new();
            for (idx, inst) in self.program.instructions.iter().enumerate() {
                for ap in inst.op.operands().into_iter().map(|o| o.ap) {
                    if ap.mem == mem
                        && let Some((lo, hi)) = byte_range(ap)
                    {
                        spans.push((lo, hi, ap.dtype, idx));
                    }
                }
            }
            spans.sort_by_key(|s| (s.0, s.1));
            // (start, end, dtype, mixed)
            let mut merged: Vec<(i64, i64, DType, bool)> = Vec::new();
            for (lo, hi, dt, _) in spans {
                match merged.last_mut() {
                    Some(last) if lo < last.1 => {
                        last.3 |= last.2 != dt;
                        last.1 = last.1.max(hi);
                    }
                    _ => merged.push((lo, hi, dt, false)),
                }
            }
            for (k, (lo, hi, dt, mixed)) in merged.into_iter().enumerate() {
                // A region used with several dtypes is a byte tile (padded to whole words) that each
                // operand views with its own dtype.
                let (dtype, end) = if mixed {
                    (DType::U8, lo + (hi - lo + 3) / 4 * 4)
                } else {
                    (dt, hi)
                };
                self.regions.push(Region {
                    name: format!("{prefix}_{k}"),
                    mem: mem.clone(),
                    dtype,
                    start: lo,
                    end,
                    mixed,
                });
            }
        }
        // Every operand must sit on an element boundary of its region.
        for (idx, inst) in self.program.instructions.iter().enumerate() {
            for (operand, ap) in inst.op.operands().into_iter().map(|o| (o.name, o.ap)) {
                if ap.mem.is_on_chip()
                    && ap.num_elems() > 0
                    && let Some(r) = self.region_of(ap)
                    && (ap.offset as i64 - r.start) % ap.dtype.size() as i64 != 0
                {
                    return Err(EmitError::Unsupported {
                        index: idx,
                        opcode: inst.op.name().into(),
                        reason: format!(
                            "operand `{operand}` is not element-aligned within its {} region",
                            ap.mem.name()
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    fn region_of(&self, ap: &AccessPattern) -> Option<&Region> {
        let (lo, _) = byte_range(ap)?;
        self.regions
            .iter()
            .find(|r| r.mem == ap.mem && r.start <= lo && lo < r.end)
    }

    /// The Python expression of an operand (a view of a tile or of a flat HBM tensor).
    fn ap(&self, ap: &AccessPattern) -> Result<String, EmitError> {
        if self.dialect == Dialect::Current {
            return self.ap_current(ap);
        }
        let free = free_dims(ap);
        let rank = 1 + free.len();
        let size = ap.dtype.size() as i64;
        match &ap.mem {
            MemSpace::Hbm(t) => {
                let py = self
                    .hbm_names
                    .get(t)
                    .ok_or_else(|| EmitError::Invalid(format!("HBM tensor `{t}` is not declared")))?;
                let mut terms = vec![(ap.partition_step, ap.partitions, arange(ap.partitions, 0, rank))];
                for (d, &[step, num]) in free.iter().enumerate() {
                    let n = num.max(0) as usize;
                    terms.push((step, n, arange(n, d + 1, rank)));
                }
                let base = ap.offset as i64 / size;
                Ok(format!("{py}_flat[{}]", affine(base, &terms)))
            }
            _ => {
                let r = self
                    .region_of(ap)
                    .ok_or_else(|| EmitError::Invalid("operand outside every region".into()))?;
                let e0 = (ap.offset as i64 - r.start) / size;
                let p0 = ap.start_partition;
                let p = ap.partitions;
                let tile = if r.mixed {
                    format!("{}.view({})", r.name, nl_dtype(ap.dtype))
                } else {
                    r.name.clone()
                };
                if free.len() == 1 && (free[0][0] == 1 || free[0][1] == 1) {
                    let n = free[0][1];
                    return Ok(format!("{tile}[{p0}:{}, {e0}:{}]", p0 + p, e0 + n));
                }
                let pidx = affine(p0 as i64, &[(1, p, arange(p, 0, rank))]);
                let terms: Vec<(i64, usize, String)> = free
                    .iter()
                    .enumerate()
                    .map(|(d, &[s, n])| (s, n.max(0) as usize, arange(n.max(0) as usize, d + 1, rank)))
                    .collect();
                Ok(format!("{tile}[{pidx}, {}]", affine(e0, &terms)))
            }
        }
    }

    /// An operand in the current dialect: a slice of its region's tile when it is one (as in
    /// the legacy dialect), else AWS's access pattern on the whole tile or HBM tensor,
    /// `t.ap(pattern=[[step, num], ...], offset=e)` (elements of the tensor flattened; on chip the
    /// first pair walks the partitions with the tile's free size as its step).
    fn ap_current(&self, ap: &AccessPattern) -> Result<String, EmitError> {
        let free = free_dims(ap);
        let size = ap.dtype.size() as i64;
        let pairs = |first: [i64; 2], rest: &[[i64; 2]]| -> String {
            let all: Vec<String> = std::iter::once(first)
                .chain(rest.iter().copied())
                .map(|[s, n]| format!("[{s}, {n}]"))
                .collect();
            format!("[{}]", all.join(", "))
        };
        match &ap.mem {
            MemSpace::Hbm(t) => {
                let py = self
                    .hbm_names
                    .get(t)
                    .ok_or_else(|| EmitError::Invalid(format!("HBM tensor `{t}` is not declared")))?;
                let pstep = if ap.partitions > 1 { ap.partition_step } else { 0 };
                let base = ap.offset as i64 / size;
                Ok(format!(
                    "{py}.ap(pattern={}, offset={base})",
                    pairs([pstep, ap.partitions as i64], &free)
                ))
            }
            _ => {
                let r = self
                    .region_of(ap)
                    .ok_or_else(|| EmitError::Invalid("operand outside every region".into()))?;
                let e0 = (ap.offset as i64 - r.start) / size;
                let p0 = ap.start_partition as i64;
                let p = ap.partitions as i64;
                if free.len() == 1 && (free[0][0] == 1 || free[0][1] == 1) {
                    let tile = if r.mixed {
                        format!("{}.view({})", r.name, nl_dtype(ap.dtype))
                    } else {
                        r.name.clone()
                    };
                    let n = free[0][1];
                    return Ok(format!("{tile}[{p0}:{}, {e0}:{}]", p0 + p, e0 + n));
                }
                let row = (r.end - r.start) / size; // the tile's free size, in elements of the operand's dtype
                let dtype = if r.mixed {
                    format!(", dtype={}", nl_dtype(ap.dtype))
                } else {
                    String::new()
                };
                Ok(format!(
                    "{}.ap(pattern={}, offset={}{dtype})",
                    r.name,
                    pairs([row, p], &free),
                    p0 * row + e0
                ))
            }
        }
    }

    /// The indirect side of a gather/scatter DMA: row `r` of `rows` starts `index[r]·row_step`
    /// elements past the operand's offset and walks its (single) free dimension.
    ///
    /// When those rows are rows of the tensor seen as `[size / row_step, row_step]` (row_step
    /// divides the size, the offset lies in row 0 and a row's elements stay in their row), this is
    /// legacy NKI's dynamic index on the first dimension:
    /// `t.reshape((M, row_step))[idx[0:R, k:k+1], c0 + step * nl.arange(n)[None, :]]`, with a
    /// `[R, 1]` index tile (one index per partition; indices laid out otherwise are first copied
    /// into one by a DMA, returned as the prelude; [`Self::indirect_chunks`] splits more than 128
    /// rows). Other rows (an element offset or a window per index, rows that overlap) give
    /// `Ok(Ok(None))`: [`Self::indirect_rows`] writes those.
    /// `Err(reason)` when the form is not emitted; `Ok(Ok(Some((prelude statements, expression))))`.
    fn indirect_ap(
        &self,
        index: usize,
        ap: &AccessPattern,
        rows: usize,
        ind: &trnsim::Indirect,
    ) -> Result<Result<Option<IndirectForm>, EmitError>, String> {
        let MemSpace::Hbm(t) = &ap.mem else {
            return Err("the indirect side of a DMA must be in HBM".into());
        };
        let free = free_dims(ap);
        if free.len() != 1 {
            return Err("indirect DMA rows with more than one free dimension are not emitted".into());
        }
        if ind.index.num_elems() != rows {
            return Err(format!("{} indices for {rows} rows", ind.index.num_elems()));
        }
        let Some(py) = self.hbm_names.get(t) else {
            return Ok(Err(EmitError::Invalid(format!("HBM tensor `{t}` is not declared"))));
        };
        let one_per_partition = ind.index.partitions == rows && ind.index.free_elems() == 1;
        if !(self.rows_of_tensor(ap, ind) && (one_per_partition || rows <= PARTITIONS)) {
            return Ok(Ok(None));
        }
        let idx = match self.ap(&ind.index) {
            Ok(e) => e,
            Err(e) => return Ok(Err(e)),
        };
        let [step, num] = free[0];
        let n = num.max(0) as usize;
        let base = ap.offset as i64 / ap.dtype.size() as i64;
        let size = self.hbm_sizes[t] as i64;
        let rs = ind.row_step;
        let mut prelude = Vec::new();
        let col = if one_per_partition {
            idx
        } else {
            // One index per partition, as a dynamic index takes them: a DMA copies the index
            // tile's elements, in order, into an [R, 1] tile.
            let name = format!("idx_{index}");
            prelude.push(format!(
                "{name} = nl.ndarray(({rows}, 1), dtype={}, buffer=nl.sbuf)",
                nl_dtype(ind.index.dtype)
            ));
            let col = format!("{name}[0:{rows}, 0:1]");
            prelude.push(format!("nisa.dma_copy(dst={col}, src={idx})"));
            col
        };
        let expr = if self.dialect == Dialect::Current {
            format!(
                "{py}.reshape(({}, {rs})).ap(pattern=[[{rs}, {rows}], [{step}, {n}]], offset={base}, vector_offset={col}, indirect_dim=0)",
                size / rs
            )
        } else {
            let cols = affine_all(base, &[(step, n, arange(n, 1, 2))]);
            format!("{py}.reshape(({}, {rs}))[{col}, {cols}]", size / rs)
        };
        Ok(Ok(Some((prelude, expr))))
    }

    /// Whether an indirect side's rows are rows of its tensor seen as `[size / row_step, row_step]`
    /// (row_step divides the size, the offset lies in row 0, a row's elements stay in the row).
    fn rows_of_tensor(&self, ap: &AccessPattern, ind: &trnsim::Indirect) -> bool {
        let MemSpace::Hbm(t) = &ap.mem else { return false };
        let free = free_dims(ap);
        let (Some(&size), [[step, num]]) = (self.hbm_sizes.get(t), free.as_slice()) else {
            return false;
        };
        let (size, rs, n) = (size as i64, ind.row_step, (*num).max(0));
        let base = ap.offset as i64 / ap.dtype.size() as i64;
        let last = base + (n - 1) * step;
        rs > 0 && size % rs == 0 && (0..rs).contains(&base) && (n == 0 || (0..rs).contains(&last))
    }

    /// An indirect DMA of more than 128 rows whose index tile holds `k` indices per partition,
    /// split into DMAs of at most 128 rows (whole partitions of the index tile each), so each
    /// one's indices fit one `[R, 1]` index column; the rows keep their order. `None` when the
    /// DMA is not of that form.
    fn indirect_chunks(
        &self,
        direct: &AccessPattern,
        indirect: &AccessPattern,
        ind: &trnsim::Indirect,
    ) -> Option<Vec<(AccessPattern, trnsim::Indirect)>> {
        let rows = direct.partitions;
        let idx = &ind.index;
        let k = match free_dims(idx).as_slice() {
            [[1, k]] => (*k).max(0) as usize,
            _ => return None,
        };
        if rows <= PARTITIONS
            || k == 0
            || k > PARTITIONS
            || idx.partitions * k != rows
            || !matches!(direct.mem, MemSpace::Hbm(_))
            || !self.rows_of_tensor(indirect, ind)
        {
            return None;
        }
        let per = PARTITIONS / k; // index partitions per chunk
        let mut out = Vec::new();
        let mut p = 0;
        while p < idx.partitions {
            let np = per.min(idx.partitions - p);
            let mut d = direct.clone();
            d.partitions = np * k;
            d.offset =
                (direct.offset as i64 + (p * k) as i64 * direct.partition_step * direct.dtype.size() as i64) as u64;
            let mut c = ind.clone();
            c.index.start_partition = idx.start_partition + p;
            c.index.partitions = np;
            out.push((d, c));
            p += np;
        }
        Some(out)
    }

    /// An indirect DMA whose rows are not rows of its tensor (an element offset or a window per
    /// index, windows that overlap, more than 128 indices in one partition), written with legacy
    /// NKI's one dynamic-index form, `t.reshape((size / g, g))[col, nl.arange(w)[None, :]]` with
    /// an `[R, 1]` int32 column `col` of row numbers:
    /// * `g` divides the row step, the offset, the tensor size and every piece of the window, so
    ///   each index's window is `w`-element pieces that start on rows of that view (a contiguous
    ///   window: pieces of `w = g`; a strided one: single elements, `w = 1`). Each piece is one
    ///   DMA, `col = index · row_step/g + (offset + piece offset)/g`, computed on GpSimd in exact
    ///   int32 arithmetic (`tensor_scalar`/`tensor_tensor`), never on the host.
    /// * A row is in bounds in the program when its whole window is; a piece alone could be in
    ///   bounds when its row is not (and int32 products can wrap). So the column is `-1` (out of
    ///   bounds, skipped or an error as `oob` says) wherever the index lies outside the range that
    ///   keeps the window in the tensor: `col = (index·k + b + 1)·valid − 1 (+ c·valid)`.
    /// * The index tile is taken 128 indices at a time (whole partitions of it when they hold at
    ///   most 128, else runs of one partition), each copied by a DMA into an `[R, 1]` column.
    /// * A scatter of several pieces per row goes one row at a time, pieces in order, so writes to
    ///   an element shared by two windows keep the program's order.
    fn indirect_rows(&self, i: &trnsim::DmaCopy, ind: &trnsim::Indirect) -> Result<String, String> {
        use trnsim::IndirectSide;
        let (direct, indirect) = match ind.side {
            IndirectSide::Src => (&i.dst, &i.src),
            IndirectSide::Dst => (&i.src, &i.dst),
        };
        let MemSpace::Hbm(t) = &indirect.mem else {
            return Err("the indirect side of a DMA must be in HBM".into());
        };
        let py = self
            .hbm_names
            .get(t)
            .ok_or_else(|| format!("HBM tensor `{t}` is not declared"))?;
        let xfree = free_dims(indirect);
        let [[xstep, xn]] = xfree.as_slice() else {
            return Err("indirect DMA rows with more than one free dimension are not emitted".into());
        };
        let (xstep, n) = (*xstep, (*xn).max(0));
        let rows = direct.partitions;
        if n == 0 || rows == 0 {
            return Err("an indirect DMA of empty rows is not emitted".into());
        }
        if ind.index.num_elems() != rows || direct.free_elems() != n as usize {
            return Err(format!(
                "{} indices and {} elements for {rows} rows of {n}",
                ind.index.num_elems(),
                direct.free_elems()
            ));
        }
        let esize = indirect.dtype.size() as i64;
        let base = indirect.offset as i64 / esize;
        let size = self.hbm_sizes[t] as i64;
        let rs = ind.row_step;
        // The direct side's free dims without unit dims (a piece must lie in one innermost run).
        let mut dfree: Vec<[i64; 2]> = free_dims(direct).into_iter().filter(|d| d[1] != 1).collect();
        if dfree.is_empty() {
            dfree.push([1, 1]);
        }
        let inner = dfree.last().map_or(1, |d| d[1]);
        // (g, w, element offset of each piece within the window)
        let (g, w, pieces): (i64, i64, Vec<i64>) = if xstep == 1 || n == 1 {
            let g = [rs.abs(), base, size, n, inner].into_iter().fold(0, gcd);
            (g, g, (0..n / g).map(|c| c * g).collect())
        } else {
            let g = [rs.abs(), base, size, xstep.abs()].into_iter().fold(0, gcd);
            (g, 1, (0..n).map(|j| j * xstep).collect())
        };
        // The index range that keeps a row's window inside the tensor (the simulator's check:
        // the row's first byte and its whole extent in bounds).
        let (lo_ext, hi_ext) = indirect.free_extent().unwrap_or((0, 0));
        let (amin, amax) = (0i64.max(-lo_ext) - base, size - 1 - hi_ext - base);
        let (lo, hi) = match rs.signum() {
            1 => (div_ceil(amin, rs), div_floor(amax, rs)),
            -1 => (div_ceil(amax, rs), div_floor(amin, rs)),
            _ if amin <= 0 && 0 <= amax => (i64::MIN, i64::MAX),
            _ => (1, 0),
        };
        // Any index the index tile can hold is within ±2^32.
        let clamp = |v: i64| v.clamp(-(1 << 33), 1 << 33);
        let (lo, hi) = (clamp(lo), clamp(hi));

        // Row groups: (first row, rows, the index elements of those rows as one pattern).
        let idx = &ind.index;
        let isize = idx.dtype.size() as i64;
        let mut ifree: Vec<[i64; 2]> = free_dims(idx).into_iter().filter(|d| d[1] != 1).collect();
        let mut groups: Vec<(usize, usize, AccessPattern)> = Vec::new();
        let per_row = ind.side == IndirectSide::Dst && pieces.len() > 1;
        if ifree.is_empty() {
            ifree.push([1, 1]);
        }
        let k = if ifree.len() == 1 {
            ifree[0][1].max(0) as usize
        } else {
            return Err("an index tile with more than one free dimension is not emitted".into());
        };
        let [istep, _] = ifree[0];
        let take = if per_row { 1 } else { PARTITIONS };
        if k == 1 || k <= take {
            let per = (take / k).max(1);
            let mut p = 0;
            while p < idx.partitions {
                let np = per.min(idx.partitions - p);
                let mut a = idx.clone();
                a.start_partition += p;
                a.partitions = np;
                a.free = vec![[istep, k as i64]];
                groups.push((p * k, np * k, a));
                p += np;
            }
        } else {
            for p in 0..idx.partitions {
                let mut j = 0;
                while j < k {
                    let r = take.min(k - j);
                    let mut a = idx.clone();
                    a.start_partition += p;
                    a.partitions = 1;
                    a.offset = (idx.offset as i64 + j as i64 * istep * isize) as u64;
                    a.free = vec![[istep, r as i64]];
                    groups.push((p * k + j, r, a));
                    j += r;
                }
            }
        }

        let oob = match ind.oob {
            trnsim::OobMode::Error => "error",
            trnsim::OobMode::Skip => "skip",
        };
        let dsize = direct.dtype.size() as i64;
        let gp = "engine=nisa.gpsimd_engine";
        let int = "dtype=nl.int32";
        let view = format!("{py}.reshape(({}, {g}))", size / g);
        let cols = arange(w as usize, 1, 2);
        // GpSimd's int32 arithmetic on `[R, 1]` columns, in the dialect's call form.
        let current = self.dialect == Dialect::Current;
        let ts = |dst: &str, src: &str, ops: &str| {
            if current {
                format!("nisa.tensor_scalar(dst={dst}, data={src}, {ops}, {gp})")
            } else {
                format!("{dst} = nisa.tensor_scalar({src}, {ops}, {int}, {gp})")
            }
        };
        let tt = |dst: &str, a: &str, b: &str| {
            if current {
                format!("nisa.tensor_tensor(dst={dst}, data1={a}, data2={b}, op=nl.multiply, {gp})")
            } else {
                format!("{dst} = nisa.tensor_tensor({a}, {b}, op=nl.multiply, {int}, {gp})")
            }
        };
        let mut out: Vec<String> = Vec::new();
        for (r0, r, iap) in groups {
            // The indices as an [R, 1] int32/uint32 column (`x`: exact integer arithmetic on GpSimd
            // needs 32-bit integer tiles), then `valid` (1 where the row's window is in the tensor,
            // else 0) and `first` (the first piece's row number, −1 where out of bounds).
            let cdt = if idx.dtype == DType::U32 {
                DType::U32
            } else {
                DType::I32
            };
            let tile = |name: &str, dt: DType| {
                format!("{name} = nl.ndarray(({r}, 1), dtype={}, buffer=nl.sbuf)", nl_dtype(dt))
            };
            let v = |name: &str| format!("{name}[0:{r}, 0:1]");
            let iexpr = self.ap(&iap).map_err(|e| e.to_string())?;
            out.push(tile("rows_0", idx.dtype));
            out.push(format!("nisa.dma_copy(dst={}, src={iexpr})", v("rows_0")));
            let x = if idx.dtype != cdt {
                out.push(tile("rows_1", cdt));
                out.push(if current {
                    format!("nisa.tensor_copy(dst={}, src={}, {gp})", v("rows_1"), v("rows_0"))
                } else {
                    format!(
                        "{} = nisa.tensor_copy({}, dtype={}, {gp})",
                        v("rows_1"),
                        v("rows_0"),
                        nl_dtype(cdt)
                    )
                });
                v("rows_1")
            } else {
                v("rows_0")
            };
            // One piece of a whole row (`row_step = g`) from signed indices: `index + b` is in
            // bounds exactly when the program's row is (and when it wraps in int32, it goes
            // negative: out of bounds, as in the program), so no mask is needed.
            let plain = pieces.len() == 1 && rs == g && cdt == DType::I32;
            let (valid, tmp, first, col) = (v("rows_2"), v("rows_3"), v("rows_4"), v("rows_5"));
            let first = if plain && base == 0 {
                x.clone()
            } else if plain {
                out.push(tile("rows_4", DType::I32));
                out.push(ts(&first, &x, &format!("op0=nl.add, operand0={}", base / g)));
                first
            } else {
                let temps: &[&str] = if pieces.len() > 1 {
                    &["rows_2", "rows_3", "rows_4", "rows_5"]
                } else {
                    &["rows_2", "rows_3", "rows_4"]
                };
                for name in temps {
                    out.push(tile(name, DType::I32));
                }
                out.push(ts(&valid, &x, &format!("op0=nl.greater_equal, operand0={lo}")));
                out.push(ts(&tmp, &x, &format!("op0=nl.less_equal, operand0={hi}")));
                out.push(tt(&valid, &valid, &tmp));
                out.push(ts(
                    &tmp,
                    &x,
                    &format!(
                        "op0=nl.multiply, operand0={}, op1=nl.add, operand1={}",
                        rs / g,
                        base / g + 1
                    ),
                ));
                out.push(tt(&tmp, &tmp, &valid));
                out.push(ts(&first, &tmp, "op0=nl.add, operand0=-1"));
                first
            };
            for (c, &o) in pieces.iter().enumerate() {
                let col = if o == 0 {
                    first.clone()
                } else {
                    out.push(ts(
                        &col,
                        &valid,
                        &format!("op0=nl.multiply, operand0={}, op1=nl.add, operand1={first}", o / g),
                    ));
                    col.clone()
                };
                // The direct side: rows r0.., elements [e, e + w) of each.
                let e = c as i64 * w;
                let mut d = direct.clone();
                let mut rem = e;
                let mut off = 0i64;
                for (k, &[s, num]) in dfree.iter().enumerate().rev() {
                    let num = num.max(1);
                    let within = if k == 0 { rem } else { rem % num };
                    off += within * s;
                    rem /= num;
                }
                d.free = vec![[dfree.last().map_or(1, |x| x[0]), w]];
                if d.mem.is_on_chip() {
                    d.start_partition += r0;
                    d.offset = (d.offset as i64 + off * dsize) as u64;
                } else {
                    d.offset = (d.offset as i64 + (r0 as i64 * d.partition_step + off) * dsize) as u64;
                }
                d.partitions = r;
                let dexpr = self.ap(&d).map_err(|e| e.to_string())?;
                let iexpr = if current {
                    format!("{view}.ap(pattern=[[{g}, {r}], [1, {w}]], offset=0, vector_offset={col}, indirect_dim=0)")
                } else {
                    format!("{view}[{col}, {cols}]")
                };
                let (dst, src) = match ind.side {
                    IndirectSide::Src => (dexpr, iexpr),
                    IndirectSide::Dst => (iexpr, dexpr),
                };
                out.push(self.dma(&dst, &src, i.accumulate, Some(oob)));
            }
        }
        Ok(out.join("\n    "))
    }

    /// One DMA call: `nisa.dma_copy(dst=…, src=…)`; accumulating, legacy `dst_rmw_op=np.add`, or
    /// in the current dialect (whose dma_copy has no dst_rmw_op since NKI 0.3) the read-modify-write
    /// form of `nisa.dma_compute(dst=…, srcs=[dst, src], reduce_op=nl.add)`.
    fn dma(&self, dst: &str, src: &str, accumulate: bool, oob: Option<&str>) -> String {
        let oob = oob.map(|o| format!(", oob_mode=nisa.oob_mode.{o}")).unwrap_or_default();
        match (accumulate, self.dialect) {
            (false, _) => format!("nisa.dma_copy(dst={dst}, src={src}{oob})"),
            (true, Dialect::Legacy) => format!("nisa.dma_copy(dst={dst}, src={src}, dst_rmw_op=np.add{oob})"),
            (true, Dialect::Current) => {
                format!("nisa.dma_compute(dst={dst}, srcs=[{dst}, {src}], reduce_op=nl.add{oob})")
            }
        }
    }

    fn scalar(&self, s: &ScalarOperand) -> Result<String, EmitError> {
        match s {
            ScalarOperand::Imm(v) => Ok(py_float(*v)),
            ScalarOperand::Tile(ap) => self.ap(ap),
        }
    }

    fn shape(ap: &AccessPattern) -> String {
        let mut dims = vec![ap.partitions];
        dims.extend(free_dims(ap).iter().map(|d| d[1].max(0) as usize));
        let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
        if parts.len() == 1 {
            format!("({},)", parts[0])
        } else {
            format!("({})", parts.join(", "))
        }
    }

    /// `dst = nisa.NAME(KWsrc, dtype=dst's dtype)`: the calls whose only operand is one source.
    fn one_source(&self, name: &str, kw: &str, dst: &AccessPattern, src: &AccessPattern) -> Result<String, EmitError> {
        Ok(format!(
            "{} = nisa.{name}({kw}{}, dtype={})",
            self.ap(dst)?,
            self.ap(src)?,
            nl_dtype(dst.dtype)
        ))
    }

    fn statement(&self, index: usize, engine: Engine, op: &Op) -> Result<String, EmitError> {
        let unsupported = |reason: &str| EmitError::Unsupported {
            index,
            opcode: op.name().into(),
            reason: reason.into(),
        };
        let eng = nisa_engine(engine);
        if self.dialect == Dialect::Current {
            // The DMA forms are written below for both dialects (views in the dialect's form;
            // `Self::dma` spells the call).
            if !matches!(op, Op::DmaCopy(_)) {
                return self.statement_current(index, engine, op);
            }
        }
        Ok(match op {
            Op::DmaCopy(i) => match &i.indirect {
                None => self.dma(&self.ap(&i.dst)?, &self.ap(&i.src)?, i.accumulate, None),
                Some(ind) => {
                    let (direct, indirect) = match ind.side {
                        trnsim::IndirectSide::Src => (&i.dst, &i.src),
                        trnsim::IndirectSide::Dst => (&i.src, &i.dst),
                    };
                    if let Some(chunks) = self.indirect_chunks(direct, indirect, ind) {
                        let mut parts = Vec::new();
                        for (d, c) in chunks {
                            let mut one = i.clone();
                            match ind.side {
                                trnsim::IndirectSide::Src => one.dst = d,
                                trnsim::IndirectSide::Dst => one.src = d,
                            }
                            one.indirect = Some(c);
                            parts.push(self.statement(index, engine, &Op::DmaCopy(one))?);
                        }
                        return Ok(parts.join("\n    "));
                    }
                    let Some((prelude, ind_expr)) = self
                        .indirect_ap(index, indirect, direct.partitions, ind)
                        .map_err(|r| unsupported(&r))??
                    else {
                        return self.indirect_rows(i, ind).map_err(|r| unsupported(&r));
                    };
                    let (dst, src) = match ind.side {
                        trnsim::IndirectSide::Src => (self.ap(&i.dst)?, ind_expr),
                        trnsim::IndirectSide::Dst => (ind_expr, self.ap(&i.src)?),
                    };
                    let oob = match ind.oob {
                        trnsim::OobMode::Error => "error",
                        trnsim::OobMode::Skip => "skip",
                    };
                    let mut out: String = prelude.iter().map(|l| format!("{l}\n    ")).collect();
                    out.push_str(&self.dma(&dst, &src, i.accumulate, Some(oob)));
                    out
                }
            },
            Op::NcMatmul(i) if !i.perf_mode.is_none() => {
                return Err(unsupported(&format!(
                    "perf_mode={} is a NeuronCore-v3+ TensorE mode; the legacy dialect is the trn1 API",
                    i.perf_mode.name()
                )));
            }
            Op::NcMatmul(i) => {
                let assign = if i.accumulate { "+=" } else { "=" };
                format!(
                    "{} {assign} nisa.nc_matmul({}, {})",
                    self.ap(&i.dst)?,
                    self.ap(&i.stationary)?,
                    self.ap(&i.moving)?
                )
            }
            Op::NcTranspose(i) => format!(
                "{} = nisa.nc_transpose({}, engine={eng}, dtype={})",
                self.ap(&i.dst)?,
                self.ap(&i.src)?,
                nl_dtype(i.dst.dtype)
            ),
            Op::TensorTensor(i) => format!(
                "{} = nisa.tensor_tensor({}, {}, op={}, dtype={}, engine={eng})",
                self.ap(&i.dst)?,
                self.ap(&i.in0)?,
                self.ap(&i.in1)?,
                nl_alu(i.op),
                nl_dtype(i.dst.dtype)
            ),
            Op::TensorScalar(i) => {
                // Legacy NKI has no `bypass` operator: a stage that passes its input through is a
                // multiply by 1.0, which gives the same bits (fp32 `x * 1.0 == x`, the same
                // denormal flush; NaN payloads aside).
                let (op0, operand0) = match i.op0 {
                    AluOp::Bypass => ("nl.multiply", "1.0".to_string()),
                    op => (nl_alu(op), self.scalar(&i.operand0)?),
                };
                let mut s = format!(
                    "{} = nisa.tensor_scalar({}, op0={op0}, operand0={operand0}",
                    self.ap(&i.dst)?,
                    self.ap(&i.src)?,
                );
                if i.reverse0 && i.op0 != AluOp::Bypass {
                    s.push_str(", reverse0=True");
                }
                if let (Some(op1), Some(operand1)) = (i.op1, &i.operand1) {
                    let (op1, operand1) = match op1 {
                        AluOp::Bypass => ("nl.multiply", "1.0".to_string()),
                        op => (nl_alu(op), self.scalar(operand1)?),
                    };
                    write!(s, ", op1={op1}, operand1={operand1}").unwrap();
                    if i.reverse1 && i.op1 != Some(AluOp::Bypass) {
                        s.push_str(", reverse1=True");
                    }
                } else if i.op1.is_some() || i.operand1.is_some() {
                    return Err(unsupported("op1 and operand1 must be given together"));
                }
                write!(s, ", dtype={}, engine={eng})", nl_dtype(i.dst.dtype)).unwrap();
                s
            }
            Op::ScalarTensorTensor(i) => {
                let mut s = format!(
                    "{} = nisa.scalar_tensor_tensor(data={}, op0={}, operand0={}, op1={}, operand1={}",
                    self.ap(&i.dst)?,
                    self.ap(&i.src)?,
                    nl_alu(i.op0),
                    self.scalar(&i.operand0)?,
                    nl_alu(i.op1),
                    self.ap(&i.in1)?
                );
                if i.reverse0 {
                    s.push_str(", reverse0=True");
                }
                if i.reverse1 {
                    s.push_str(", reverse1=True");
                }
                write!(s, ", dtype={})", nl_dtype(i.dst.dtype)).unwrap();
                s
            }
            Op::TensorReduce(i) => {
                let nfree = free_dims(&i.src).len();
                if i.axes == 0 || i.axes > nfree {
                    return Err(unsupported("axes must be in 1..=free dims of src"));
                }
                let axes: Vec<String> = (nfree - i.axes + 1..=nfree).map(|a| a.to_string()).collect();
                let axis = if axes.len() == 1 {
                    axes[0].clone()
                } else {
                    format!("({})", axes.join(", "))
                };
                let neg = if i.negate { ", negate=True" } else { "" };
                format!(
                    "{} = nisa.tensor_reduce(op={}, data={}, axis={axis}{neg}, dtype={})",
                    self.ap(&i.dst)?,
                    nl_alu(i.op),
                    self.ap(&i.src)?,
                    nl_dtype(i.dst.dtype)
                )
            }
            Op::TensorCopy(i) => format!(
                "{} = nisa.tensor_copy({}, dtype={}, engine={eng})",
                self.ap(&i.dst)?,
                self.ap(&i.src)?,
                nl_dtype(i.dst.dtype)
            ),
            Op::Reciprocal(i) => format!(
                "{} = nisa.reciprocal({}, dtype={})",
                self.ap(&i.dst)?,
                self.ap(&i.src)?,
                nl_dtype(i.dst.dtype)
            ),
            Op::Memset(i) => format!(
                "{} = nisa.memset(shape={}, value={}, dtype={}, engine={eng})",
                self.ap(&i.dst)?,
                Self::shape(&i.dst),
                py_float(i.value),
                nl_dtype(i.dst.dtype)
            ),
            Op::Iota(i) => {
                let rank = 1 + i.pattern.len();
                let p = i.dst.partitions;
                let mut terms = vec![(i.channel_multiplier, p, arange(p, 0, rank))];
                for (d, &[step, num]) in i.pattern.iter().enumerate() {
                    let n = num.max(0) as usize;
                    terms.push((step, n, arange(n, d + 1, rank)));
                }
                // Every axis stays in the expression (`0 * nl.arange(1)[:, None]`): nisa.iota
                // takes an index expression, whose shape is the tile's.
                let expr = affine_all(i.offset, &terms);
                format!(
                    "{} = nisa.iota({expr}, dtype={})",
                    self.ap(&i.dst)?,
                    nl_dtype(i.dst.dtype)
                )
            }
            Op::Activation(i) => {
                let mut s = format!(
                    "{} = nisa.activation(op={}, data={}",
                    self.ap(&i.dst)?,
                    nl_act(i.func),
                    self.ap(&i.src)?
                );
                if let Some(b) = &i.bias {
                    write!(s, ", bias={}", self.scalar(b)?).unwrap();
                }
                write!(s, ", scale={}", self.scalar(&i.scale)?).unwrap();
                if i.acc != AccCmd::Idle || i.reduce_res.is_some() {
                    s.push_str(", reduce_op=nl.add");
                    if let Some(r) = &i.reduce_res {
                        write!(s, ", reduce_res={}", self.ap(r)?).unwrap();
                    }
                    let cmd = match i.acc {
                        AccCmd::Idle => "idle",
                        AccCmd::Reset => "reset",
                        AccCmd::Reduce => "reduce",
                        AccCmd::ResetReduce => "reset_reduce",
                    };
                    write!(s, ", reduce_cmd=nisa.reduce_cmd.{cmd}").unwrap();
                }
                write!(s, ", dtype={})", nl_dtype(i.dst.dtype)).unwrap();
                s
            }
            Op::TensorCopyPredicated(i) => {
                let rev = if i.reverse_pred { ", reverse_pred=True" } else { "" };
                format!(
                    "nisa.tensor_copy_predicated(src={}, dst={}, predicate={}{rev})",
                    self.ap(&i.src)?,
                    self.ap(&i.dst)?,
                    self.ap(&i.predicate)?
                )
            }
            Op::TensorTensorScan(i) => format!(
                "{} = nisa.tensor_tensor_scan({}, {}, initial={}, op0={}, op1={}, dtype={})",
                self.ap(&i.dst)?,
                self.ap(&i.in0)?,
                self.ap(&i.in1)?,
                self.scalar(&i.initial)?,
                nl_alu(i.op0),
                nl_alu(i.op1),
                nl_dtype(i.dst.dtype)
            ),
            Op::TensorScalarReduce(i) => format!(
                "{} = nisa.tensor_scalar_reduce(data={}, op0={}, operand0={}, reduce_op={}, reduce_res={}, dtype={})",
                self.ap(&i.dst)?,
                self.ap(&i.src)?,
                nl_alu(i.op0),
                self.scalar(&i.operand0)?,
                nl_alu(i.reduce_op),
                self.ap(&i.reduce_res)?,
                nl_dtype(i.dst.dtype)
            ),
            Op::AffineSelect(i) => {
                let rank = 1 + i.pattern.len();
                let p = i.dst.partitions;
                let mut terms = vec![(i.channel_multiplier, p, arange(p, 0, rank))];
                for (d, &[step, num]) in i.pattern.iter().enumerate() {
                    let n = num.max(0) as usize;
                    terms.push((step, n, arange(n, d + 1, rank)));
                }
                let cmp = match i.cmp {
                    trnsim::CmpOp::Equal => "==",
                    trnsim::CmpOp::NotEqual => "!=",
                    trnsim::CmpOp::GreaterThan => ">",
                    trnsim::CmpOp::GreaterEqual => ">=",
                };
                format!(
                    "{} = nisa.affine_select(({}) {cmp} 0, {}, {}, dtype={})",
                    self.ap(&i.dst)?,
                    affine(i.offset, &terms),
                    self.ap(&i.on_true)?,
                    py_float(i.on_false),
                    nl_dtype(i.dst.dtype)
                )
            }
            // Legacy NKI seeds VectorE's generator with `nl.random_seed` (`nisa.set_rng_seed` is
            // the current namespace's).
            Op::SetRngSeed(i) => match &i.seed {
                ScalarOperand::Imm(v) => format!("nl.random_seed({})", *v as i64),
                ScalarOperand::Tile(ap) => format!("nl.random_seed({})", self.ap(ap)?),
            },
            // Raw random bits have no legacy call (`nl.rand` gives uniform floats): the current
            // namespace's `nki.isa.rng`, documented for NeuronCore-v2 on the Vector engine, writes
            // them into its `dst` (docs/nki.md, "Emitted kernels").
            Op::Rng(i) => format!(
                "{CURRENT_ISA}.rng(dst={}, engine={})",
                self.ap(&i.dst)?,
                nisa_engine(engine).replace("nisa.", &format!("{CURRENT_ISA}."))
            ),
            Op::Dropout(i) => format!(
                "{} = nisa.dropout({}, prob={}, dtype={})",
                self.ap(&i.dst)?,
                self.ap(&i.src)?,
                self.scalar(&i.prob)?,
                nl_dtype(i.dst.dtype)
            ),
            Op::BnStats(i) => self.one_source("bn_stats", "", &i.dst, &i.src)?,
            Op::BnAggr(i) => self.one_source("bn_aggr", "", &i.dst, &i.src)?,
            Op::Max8(i) => self.one_source("max8", "src=", &i.dst, &i.src)?,
            Op::MatchReplace8(i) => {
                // `dst_idx` is an output operand written in place, like `reduce_res`.
                let mut s = format!(
                    "{} = nisa.nc_match_replace8(data={}, vals={}, imm={}",
                    self.ap(&i.dst)?,
                    self.ap(&i.data)?,
                    self.ap(&i.vals)?,
                    py_float(i.imm)
                );
                if let Some(d) = &i.dst_idx {
                    write!(s, ", dst_idx={}", self.ap(d)?).unwrap();
                }
                write!(s, ", dtype={})", nl_dtype(i.dst.dtype)).unwrap();
                s
            }
            Op::SelectReduce(i) => {
                // Legacy select_reduce writes its `dst=` in place (it returns nothing).
                let mut s = format!(
                    "nisa.select_reduce(dst={}, predicate={}, on_true={}, on_false={}",
                    self.ap(&i.dst)?,
                    self.ap(&i.predicate)?,
                    self.ap(&i.on_true)?,
                    self.scalar(&i.on_false)?
                );
                if i.reverse_pred {
                    s.push_str(", reverse_pred=True");
                }
                if let Some(r) = &i.reduce_res {
                    write!(s, ", reduce_res={}", self.ap(r)?).unwrap();
                }
                write!(s, ", dtype={})", nl_dtype(i.dst.dtype)).unwrap();
                s
            }
            Op::TensorPartitionReduce(i) => format!(
                "{} = nisa.tensor_partition_reduce(op={}, data={}, dtype={})",
                self.ap(&i.dst)?,
                nl_alu(i.op),
                self.ap(&i.src)?,
                nl_dtype(i.dst.dtype)
            ),
            // Every instruction is named (no wildcard): a new `Op` fails to compile here until it
            // is translated or listed as untranslated.
            Op::TensorCopyDynamicSrc(_)
            | Op::TensorCopyDynamicDst(_)
            | Op::FindIndex8(_)
            | Op::StreamShuffle(_)
            | Op::RangeSelect(_)
            | Op::LocalGather(_)
            | Op::NGather(_)
            | Op::SequenceBounds(_)
            | Op::DmaTranspose(_)
            | Op::NonzeroWithCount(_)
            | Op::DmaCompute(_)
            | Op::QuantizeMx(_)
            | Op::NcMatmulMx(_) => {
                return Err(unsupported(&format!("`{}` has no NKI translation yet", op.name())));
            }
            // The emitter writes one core's legacy kernel; `nisa.core_barrier` needs the current
            // API's LNC=2 launch (`kernel[2]`), which it does not write.
            Op::CoreBarrier(_) => {
                return Err(unsupported(
                    "`core_barrier` synchronises two cores (LNC=2); the emitter writes single-core kernels",
                ));
            }
        })
    }

    /// One instruction in the current dialect (every call but the DMA's): `nisa.NAME(dst=…, …)`,
    /// the destination's dtype being the cast on write.
    fn statement_current(&self, index: usize, engine: Engine, op: &Op) -> Result<String, EmitError> {
        let unsupported = |reason: &str| EmitError::Unsupported {
            index,
            opcode: op.name().into(),
            reason: reason.into(),
        };
        let eng = nisa_engine(engine);
        // A `bypass` ALU stage is a multiply by 1.0, as in the legacy dialect.
        let alu = |op: AluOp, operand: &ScalarOperand| -> Result<(&'static str, String), EmitError> {
            Ok(match op {
                AluOp::Bypass => ("nl.multiply", "1.0".to_string()),
                op => (nl_alu(op), self.scalar(operand)?),
            })
        };
        let pattern = |p: &[[i64; 2]]| -> String {
            let pairs: Vec<String> = p.iter().map(|[s, n]| format!("[{s}, {n}]")).collect();
            format!("[{}]", pairs.join(", "))
        };
        Ok(match op {
            Op::NcMatmul(i) => {
                let acc = if i.accumulate {
                    ", accumulate=True"
                } else {
                    ", accumulate=False"
                };
                let mode = if i.perf_mode.is_none() {
                    String::new()
                } else {
                    format!(", perf_mode=nisa.matmul_perf_mode.{}", i.perf_mode.name())
                };
                format!(
                    "nisa.nc_matmul(dst={}, stationary={}, moving={}{acc}{mode})",
                    self.ap(&i.dst)?,
                    self.ap(&i.stationary)?,
                    self.ap(&i.moving)?
                )
            }
            Op::NcTranspose(i) => format!(
                "nisa.nc_transpose(dst={}, data={}, engine={eng})",
                self.ap(&i.dst)?,
                self.ap(&i.src)?
            ),
            Op::TensorTensor(i) => format!(
                "nisa.tensor_tensor(dst={}, data1={}, data2={}, op={}, engine={eng})",
                self.ap(&i.dst)?,
                self.ap(&i.in0)?,
                self.ap(&i.in1)?,
                nl_alu(i.op)
            ),
            Op::TensorScalar(i) => {
                let (op0, operand0) = alu(i.op0, &i.operand0)?;
                let mut s = format!(
                    "nisa.tensor_scalar(dst={}, data={}, op0={op0}, operand0={operand0}",
                    self.ap(&i.dst)?,
                    self.ap(&i.src)?,
                );
                if i.reverse0 && i.op0 != AluOp::Bypass {
                    s.push_str(", reverse0=True");
                }
                if let (Some(op1), Some(operand1)) = (i.op1, &i.operand1) {
                    let (name1, operand1) = alu(op1, operand1)?;
                    write!(s, ", op1={name1}, operand1={operand1}").unwrap();
                    if i.reverse1 && op1 != AluOp::Bypass {
                        s.push_str(", reverse1=True");
                    }
                } else if i.op1.is_some() || i.operand1.is_some() {
                    return Err(unsupported("op1 and operand1 must be given together"));
                }
                write!(s, ", engine={eng})").unwrap();
                s
            }
            Op::ScalarTensorTensor(i) => {
                let mut s = format!(
                    "nisa.scalar_tensor_tensor(dst={}, data={}, op0={}, operand0={}, op1={}, operand1={}",
                    self.ap(&i.dst)?,
                    self.ap(&i.src)?,
                    nl_alu(i.op0),
                    self.scalar(&i.operand0)?,
                    nl_alu(i.op1),
                    self.ap(&i.in1)?
                );
                if i.reverse0 {
                    s.push_str(", reverse0=True");
                }
                if i.reverse1 {
                    s.push_str(", reverse1=True");
                }
                s.push(')');
                s
            }
            Op::TensorReduce(i) => {
                let nfree = free_dims(&i.src).len();
                if i.axes == 0 || i.axes > nfree {
                    return Err(unsupported("axes must be in 1..=free dims of src"));
                }
                let axes: Vec<String> = (nfree - i.axes + 1..=nfree).map(|a| a.to_string()).collect();
                let axis = if axes.len() == 1 {
                    axes[0].clone()
                } else {
                    format!("({})", axes.join(", "))
                };
                let neg = if i.negate { ", negate=True" } else { "" };
                format!(
                    "nisa.tensor_reduce(dst={}, op={}, data={}, axis={axis}{neg})",
                    self.ap(&i.dst)?,
                    nl_alu(i.op),
                    self.ap(&i.src)?
                )
            }
            Op::TensorCopy(i) => format!(
                "nisa.tensor_copy(dst={}, src={}, engine={eng})",
                self.ap(&i.dst)?,
                self.ap(&i.src)?
            ),
            Op::Reciprocal(i) => format!("nisa.reciprocal(dst={}, data={})", self.ap(&i.dst)?, self.ap(&i.src)?),
            Op::Memset(i) => format!(
                "nisa.memset(dst={}, value={}, engine={eng})",
                self.ap(&i.dst)?,
                py_float(i.value)
            ),
            Op::Iota(i) => format!(
                "nisa.iota(dst={}, pattern={}, offset={}, channel_multiplier={})",
                self.ap(&i.dst)?,
                pattern(&i.pattern),
                i.offset,
                i.channel_multiplier
            ),
            Op::Activation(i) => {
                let mut s = format!(
                    "nisa.activation(dst={}, op={}, data={}",
                    self.ap(&i.dst)?,
                    nl_act(i.func),
                    self.ap(&i.src)?
                );
                if let Some(b) = &i.bias {
                    write!(s, ", bias={}", self.scalar(b)?).unwrap();
                }
                write!(s, ", scale={}", self.scalar(&i.scale)?).unwrap();
                if i.acc != AccCmd::Idle || i.reduce_res.is_some() {
                    s.push_str(", reduce_op=nl.add");
                    if let Some(r) = &i.reduce_res {
                        write!(s, ", reduce_res={}", self.ap(r)?).unwrap();
                    }
                    let cmd = match i.acc {
                        AccCmd::Idle => "idle",
                        AccCmd::Reset => "reset",
                        AccCmd::Reduce => "reduce",
                        AccCmd::ResetReduce => "reset_reduce",
                    };
                    write!(s, ", reduce_cmd=nisa.reduce_cmd.{cmd}").unwrap();
                }
                s.push(')');
                s
            }
            Op::TensorCopyPredicated(i) => {
                let rev = if i.reverse_pred { ", reverse_pred=True" } else { "" };
                format!(
                    "nisa.tensor_copy_predicated(dst={}, src={}, predicate={}{rev})",
                    self.ap(&i.dst)?,
                    self.ap(&i.src)?,
                    self.ap(&i.predicate)?
                )
            }
            Op::TensorTensorScan(i) => format!(
                "nisa.tensor_tensor_scan(dst={}, data0={}, data1={}, initial={}, op0={}, op1={})",
                self.ap(&i.dst)?,
                self.ap(&i.in0)?,
                self.ap(&i.in1)?,
                self.scalar(&i.initial)?,
                nl_alu(i.op0),
                nl_alu(i.op1)
            ),
            Op::TensorScalarReduce(i) => format!(
                "nisa.tensor_scalar_reduce(dst={}, data={}, op0={}, operand0={}, reduce_op={}, reduce_res={})",
                self.ap(&i.dst)?,
                self.ap(&i.src)?,
                nl_alu(i.op0),
                self.scalar(&i.operand0)?,
                nl_alu(i.reduce_op),
                self.ap(&i.reduce_res)?
            ),
            Op::AffineSelect(i) => {
                let cmp = match i.cmp {
                    trnsim::CmpOp::Equal => "nl.equal",
                    trnsim::CmpOp::NotEqual => "nl.not_equal",
                    trnsim::CmpOp::GreaterThan => "nl.greater",
                    trnsim::CmpOp::GreaterEqual => "nl.greater_equal",
                };
                format!(
                    "nisa.affine_select(dst={}, pattern={}, offset={}, channel_multiplier={}, on_true_tile={}, on_false_value={}, cmp_op={cmp})",
                    self.ap(&i.dst)?,
                    pattern(&i.pattern),
                    i.offset,
                    i.channel_multiplier,
                    self.ap(&i.on_true)?,
                    py_float(i.on_false)
                )
            }
            // `nisa.set_rng_seed` takes a [1, 1] integer tile: an immediate seed is put there by
            // GpSimd's iota, exact in int32 (the seed's 32 bits).
            Op::SetRngSeed(i) => match &i.seed {
                ScalarOperand::Imm(v) => {
                    let bits = (*v as i64 as u32) as i32;
                    format!(
                        "seed_{index} = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)\n    \
                         nisa.iota(dst=seed_{index}, pattern=[[0, 1]], offset={bits}, channel_multiplier=0)\n    \
                         nisa.set_rng_seed(src_seeds=seed_{index})"
                    )
                }
                ScalarOperand::Tile(ap) => format!("nisa.set_rng_seed(src_seeds={})", self.ap(ap)?),
            },
            Op::Rng(i) => format!("nisa.rng(dst={}, engine={eng})", self.ap(&i.dst)?),
            Op::Dropout(i) => format!(
                "nisa.dropout(dst={}, data={}, prob={})",
                self.ap(&i.dst)?,
                self.ap(&i.src)?,
                self.scalar(&i.prob)?
            ),
            Op::BnStats(i) => format!("nisa.bn_stats(dst={}, data={})", self.ap(&i.dst)?, self.ap(&i.src)?),
            Op::BnAggr(i) => format!("nisa.bn_aggr(dst={}, data={})", self.ap(&i.dst)?, self.ap(&i.src)?),
            Op::Max8(i) => format!("nisa.max8(dst={}, src={})", self.ap(&i.dst)?, self.ap(&i.src)?),
            Op::MatchReplace8(i) => {
                let mut s = format!(
                    "nisa.nc_match_replace8(dst={}, data={}, vals={}, imm={}",
                    self.ap(&i.dst)?,
                    self.ap(&i.data)?,
                    self.ap(&i.vals)?,
                    py_float(i.imm)
                );
                if let Some(d) = &i.dst_idx {
                    write!(s, ", dst_idx={}", self.ap(d)?).unwrap();
                }
                s.push(')');
                s
            }
            Op::SelectReduce(i) => {
                let mut s = format!(
                    "nisa.select_reduce(dst={}, predicate={}, on_true={}, on_false={}",
                    self.ap(&i.dst)?,
                    self.ap(&i.predicate)?,
                    self.ap(&i.on_true)?,
                    self.scalar(&i.on_false)?
                );
                if i.reverse_pred {
                    s.push_str(", reverse_pred=True");
                }
                if let Some(r) = &i.reduce_res {
                    write!(s, ", reduce_res={}", self.ap(r)?).unwrap();
                }
                s.push(')');
                s
            }
            Op::TensorPartitionReduce(i) => format!(
                "nisa.tensor_partition_reduce(dst={}, op={}, data={})",
                self.ap(&i.dst)?,
                nl_alu(i.op),
                self.ap(&i.src)?
            ),
            // Translated by `statement` (the same calls in both dialects).
            Op::DmaCopy(_) => return self.statement(index, engine, op),
            Op::TensorCopyDynamicSrc(_)
            | Op::TensorCopyDynamicDst(_)
            | Op::FindIndex8(_)
            | Op::StreamShuffle(_)
            | Op::RangeSelect(_)
            | Op::LocalGather(_)
            | Op::NGather(_)
            | Op::SequenceBounds(_)
            | Op::DmaTranspose(_)
            | Op::NonzeroWithCount(_)
            | Op::DmaCompute(_)
            | Op::QuantizeMx(_)
            | Op::NcMatmulMx(_) => {
                return Err(unsupported(&format!("`{}` has no NKI translation yet", op.name())));
            }
            Op::CoreBarrier(_) => {
                return Err(unsupported(
                    "`core_barrier` synchronises two cores (LNC=2); the emitter writes single-core kernels",
                ));
            }
        })
    }

    fn emit(mut self) -> Result<String, EmitError> {
        // Refuse unsupported instructions before looking at memory.
        let mut body = Vec::new();
        let supported_probe = |idx: usize, op: &Op| -> Result<(), EmitError> {
            match op {
                Op::NcMatmul(_)
                | Op::NcTranspose(_)
                | Op::TensorTensor(_)
                | Op::TensorScalar(_)
                | Op::ScalarTensorTensor(_)
                | Op::TensorReduce(_)
                | Op::TensorCopy(_)
                | Op::Reciprocal(_)
                | Op::Memset(_)
                | Op::Iota(_)
                | Op::Activation(_)
                | Op::TensorCopyPredicated(_)
                | Op::TensorTensorScan(_)
                | Op::TensorScalarReduce(_)
                | Op::AffineSelect(_)
                | Op::SetRngSeed(_)
                | Op::Rng(_)
                | Op::Dropout(_)
                | Op::BnStats(_)
                | Op::BnAggr(_)
                | Op::Max8(_)
                | Op::MatchReplace8(_)
                | Op::SelectReduce(_)
                | Op::TensorPartitionReduce(_) => Ok(()),
                Op::DmaCopy(_) => Ok(()),
                // Named one by one, as in `statement`: a new `Op` is a compile error here.
                Op::TensorCopyDynamicSrc(_)
                | Op::TensorCopyDynamicDst(_)
                | Op::FindIndex8(_)
                | Op::StreamShuffle(_)
                | Op::RangeSelect(_)
                | Op::LocalGather(_)
                | Op::NGather(_)
                | Op::SequenceBounds(_)
                | Op::DmaTranspose(_)
                | Op::NonzeroWithCount(_)
                | Op::DmaCompute(_)
                | Op::QuantizeMx(_)
                | Op::NcMatmulMx(_)
                | Op::CoreBarrier(_) => Err(EmitError::Unsupported {
                    index: idx,
                    opcode: op.name().into(),
                    reason: format!("`{}` has no NKI translation yet", op.name()),
                }),
            }
        };
        for (idx, inst) in self.program.instructions.iter().enumerate() {
            if inst.core != 0 {
                // A second core's instruction would be emitted as the first core's.
                return Err(EmitError::Unsupported {
                    index: idx,
                    opcode: inst.op.name().into(),
                    reason: format!(
                        "runs on physical core {} (LNC=2); the emitter writes single-core kernels",
                        inst.core
                    ),
                });
            }
            supported_probe(idx, &inst.op)?;
        }
        self.allocate()?;
        for (idx, inst) in self.program.instructions.iter().enumerate() {
            body.push(format!("    # [{idx}] {} {}", inst.engine.name(), inst.op.name()));
            body.push(format!("    {}", self.statement(idx, inst.engine, &inst.op)?));
        }

        let p = self.program;
        let mut out = String::new();
        writeln!(
            out,
            "# Generated by trnconf::emit_nki from a trnsim program (target {}).",
            p.target.name()
        )
        .unwrap();
        if self.dialect == Dialect::Current {
            out.push_str("# Dialect: current `nki` (NKI 0.3+, Neuron SDK 2.29+, NeuronCore-v3/v4 / trn2, trn3).\n");
            out.push_str(
                "# Run on a device: kernel(*inputs); on CPU: nki.simulate(kernel)(*inputs) (NKI_SIMULATOR=1);\n",
            );
            out.push_str("# on trnsim: trnsim.nki.install(), then the same (see docs/nki.md).\n");
            out.push_str("import numpy as np\n");
            out.push_str("import nki\n");
            out.push_str("import nki.language as nl\n");
            out.push_str("import nki.isa as nisa\n");
        } else {
            out.push_str("# Dialect: legacy `neuronxcc.nki` (Neuron SDK 2.26-2.28, NeuronCore-v2 / trn1).\n");
            out.push_str(
                "# Run on a trn1: nki.baremetal(kernel)(*inputs); on CPU: nki.simulate_kernel(kernel, *inputs);\n",
            );
            out.push_str("# without the Neuron SDK: conformance/pyexec/nki_standin (see docs/hardware.md).\n");
            out.push_str("import numpy as np\n");
            out.push_str("import neuronxcc.nki as nki\n");
            out.push_str("import neuronxcc.nki.language as nl\n");
            out.push_str("import neuronxcc.nki.isa as nisa\n");
        }
        if self.dialect == Dialect::Legacy && p.instructions.iter().any(|inst| matches!(inst.op, Op::Rng(_))) {
            // Raw random bits: the current namespace's `nki.isa.rng` (legacy NKI has no such call).
            writeln!(out, "import nki.isa as {CURRENT_ISA}").unwrap();
        }
        out.push('\n');
        // The program's tensor names, in the order of the parameters and of the returned values
        // (JSON strings are valid Python string literals).
        let names = |role: HbmRole| -> Vec<String> {
            p.hbm
                .iter()
                .filter(|d| d.role == role)
                .map(|d| serde_json::to_string(&d.name).expect("a string"))
                .collect()
        };
        writeln!(out, "INPUT_NAMES = [{}]", names(HbmRole::Input).join(", ")).unwrap();
        writeln!(out, "OUTPUT_NAMES = [{}]\n\n", names(HbmRole::Output).join(", ")).unwrap();
        let params: Vec<&str> = p
            .hbm
            .iter()
            .filter(|d| d.role == HbmRole::Input)
            .map(|d| self.hbm_names[&d.name].as_str())
            .collect();
        out.push_str("@nki.jit\n");
        writeln!(out, "def {KERNEL_NAME}({}):", params.join(", ")).unwrap();
        for decl in &p.hbm {
            let py = &self.hbm_names[&decl.name];
            let buffer = match decl.role {
                HbmRole::Input => continue,
                HbmRole::Output => "nl.shared_hbm",
                HbmRole::Scratch => "nl.hbm",
            };
            let shape: Vec<String> = decl.shape.iter().map(|d| d.to_string()).collect();
            let shape = if shape.len() == 1 {
                format!("({},)", shape[0])
            } else {
                format!("({})", shape.join(", "))
            };
            writeln!(
                out,
                "    {py} = nl.ndarray({shape}, dtype={}, buffer={buffer})",
                nl_dtype(decl.dtype)
            )
            .unwrap();
        }
        // Flat views of the HBM tensors the program addresses.
        let mut used_hbm = BTreeSet::new();
        for inst in &p.instructions {
            for ap in inst.op.operands().into_iter().map(|o| o.ap) {
                if let MemSpace::Hbm(t) = &ap.mem {
                    used_hbm.insert(t.clone());
                }
            }
        }
        for decl in &p.hbm {
            // (the current dialect's access patterns flatten the tensor themselves)
            if self.dialect == Dialect::Legacy && used_hbm.contains(&decl.name) {
                let py = &self.hbm_names[&decl.name];
                writeln!(out, "    {py}_flat = {py}.reshape(({},))", self.hbm_sizes[&decl.name]).unwrap();
            }
        }
        for r in &self.regions {
            let n = (r.end - r.start) / r.dtype.size() as i64;
            let buffer = if r.mem == MemSpace::Psum { "nl.psum" } else { "nl.sbuf" };
            writeln!(
                out,
                "    {} = nl.ndarray(({PARTITIONS}, {n}), dtype={}, buffer={buffer})  # bytes [{}, {}) of each partition",
                r.name,
                nl_dtype(r.dtype),
                r.start,
                r.end
            )
            .unwrap();
        }
        for line in body {
            out.push_str(&line);
            out.push('\n');
        }
        let outs: Vec<&str> = p
            .hbm
            .iter()
            .filter(|d| d.role == HbmRole::Output)
            .map(|d| self.hbm_names[&d.name].as_str())
            .collect();
        match outs.len() {
            0 => out.push_str("    return None\n"),
            1 => writeln!(out, "    return {}", outs[0]).unwrap(),
            _ => writeln!(out, "    return ({})", outs.join(", ")).unwrap(),
        }
        Ok(out)
    }
}

/// Emits the NKI kernel of `program` in the legacy dialect (see the module docs for the mapping).
pub fn emit(program: &Program) -> Result<String, EmitError> {
    emit_dialect(program, Dialect::Legacy)
}

/// Emits the NKI kernel of `program` in `dialect`.
pub fn emit_dialect(program: &Program, dialect: Dialect) -> Result<String, EmitError> {
    Emitter::new(program, dialect)?.emit()
}

// ---------------------------------------------------------------------------------------------
// Tensors between Rust and the Python stand-in (or a hardware executor): safetensors files whose
// tensor names are the program's HBM tensor names and whose bytes are the device bits.

/// The safetensors dtype tag of a device dtype (`tf32` travels as `F32`, `f8e4m3`/`f8e4m3fn`
/// both as `F8_E4M3`, bool as `BOOL`).
pub fn safetensors_dtype(d: DType) -> safetensors::Dtype {
    use safetensors::Dtype as S;
    match d {
        DType::F32 | DType::Tf32 => S::F32,
        DType::Bf16 => S::BF16,
        DType::F16 => S::F16,
        DType::Fp8E4m3 | DType::Fp8E4m3fn => S::F8_E4M3,
        DType::Fp8E5m2 => S::F8_E5M2,
        DType::I8 => S::I8,
        DType::I16 => S::I16,
        DType::I32 => S::I32,
        DType::U8 => S::U8,
        DType::U16 => S::U16,
        DType::U32 => S::U32,
        DType::Bool => S::BOOL,
        DType::Fp8E8m0fnu => S::F8_E8M0,
        // One e2m1 code per byte (safetensors' F4 packs two per byte): the bytes travel as U8.
        DType::Fp4E2m1fn => S::U8,
        // Packed containers travel as their raw bits.
        DType::Fp8E5m2X4 | DType::Fp8E4m3fnX4 => S::U32,
        DType::Fp4E2m1fnX4 => S::U16,
        DType::I64 => S::I64,
    }
}

/// Serializes host tensors (device bits, by name) into safetensors bytes.
pub fn to_safetensors(tensors: &BTreeMap<String, trnsim::HostTensor>) -> Result<Vec<u8>, String> {
    let views = tensors
        .iter()
        .map(|(name, t)| {
            safetensors::tensor::TensorView::new(safetensors_dtype(t.dtype), t.shape.clone(), &t.data)
                .map(|v| (name.clone(), v))
                .map_err(|e| format!("tensor `{name}`: {e}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    safetensors::serialize(views, None).map_err(|e| e.to_string())
}

/// Reads the tensors named `names` from safetensors bytes, each reinterpreted as the given device
/// dtype (which must have the stored tag, see [`safetensors_dtype`]).
pub fn from_safetensors(
    bytes: &[u8],
    names: &[(String, DType)],
) -> Result<BTreeMap<String, trnsim::HostTensor>, String> {
    let st = safetensors::SafeTensors::deserialize(bytes).map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for (name, dtype) in names {
        let v = st.tensor(name).map_err(|e| format!("tensor `{name}`: {e}"))?;
        if v.dtype() != safetensors_dtype(*dtype) {
            return Err(format!(
                "tensor `{name}` is {:?}, expected {:?}",
                v.dtype(),
                safetensors_dtype(*dtype)
            ));
        }
        out.insert(
            name.clone(),
            trnsim::HostTensor {
                dtype: *dtype,
                shape: v.shape().to_vec(),
                data: v.data().to_vec(),
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use trnsim::TargetName;

    #[test]
    fn names_become_identifiers() {
        let mut p = Program::new(TargetName::Trn1);
        for n in ["input.0", "input_0", "1x", "lambda", "nl", "sbuf_3", "y_flat"] {
            p.declare(n, DType::F32, &[1], HbmRole::Input);
        }
        assert_eq!(
            python_names(&p),
            ["input_0", "input_0_2", "t_1x", "lambda_", "nl_", "sbuf_3_t", "y_flat_t"]
        );
    }

    #[test]
    fn float_literals_round_trip() {
        assert_eq!(py_float(1.0), "1.0");
        assert_eq!(py_float(-1e39), "-1e39");
        assert_eq!(py_float(f64::INFINITY), "float('inf')");
        assert_eq!(py_float(5.421010862427522e-20), "5.421010862427522e-20");
    }

    #[test]
    fn unsupported_names_the_opcode() {
        let mut p = Program::new(TargetName::Trn1);
        p.push(
            Engine::Vector,
            Op::StreamShuffle(trnsim::StreamShuffle {
                dst: AccessPattern::sbuf(DType::F32, 0, 4, 0, vec![[1, 8]]),
                src: AccessPattern::sbuf(DType::F32, 0, 4, 64, vec![[1, 8]]),
                mask: vec![1, 0, 3, 2],
            }),
        );
        match emit(&p) {
            Err(EmitError::Unsupported { index: 0, opcode, .. }) => assert_eq!(opcode, "nc_stream_shuffle"),
            other => panic!("{other:?}"),
        }
    }
}
