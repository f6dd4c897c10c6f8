//! Programs: the instruction set as data.
//!
//! A [`Program`] declares its HBM tensors and lists [`Instruction`]s, each tagged with the engine
//! whose queue it goes to. It is plain serde data (JSON on disk). One [`Op`] variant per
//! instruction; its semantics live in exactly one function under `engine/` (the executor's match
//! over `Op` is exhaustive, so a new variant without semantics does not compile).

use crate::dtype::DType;
use crate::mem::AccessPattern;
pub use crate::target::MatmulPerfMode;
use crate::target::TargetName;
use serde::{Deserialize, Serialize};

/// The engines of a NeuronCore (and the DMA queues).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// TensorE (PE array): matmul and transpose.
    Tensor,
    /// VectorE (DVE).
    Vector,
    /// ScalarE (ACT): activation functions.
    Scalar,
    /// GpSimdE (POOL): 8 general-purpose SIMD cores.
    Gpsimd,
    /// The DMA queues.
    Dma,
}

pub const ALL_ENGINES: [Engine; 5] = [
    Engine::Tensor,
    Engine::Vector,
    Engine::Scalar,
    Engine::Gpsimd,
    Engine::Dma,
];

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Tensor => "tensor",
            Engine::Vector => "vector",
            Engine::Scalar => "scalar",
            Engine::Gpsimd => "gpsimd",
            Engine::Dma => "dma",
        }
    }

    /// Compute engines (all but DMA).
    pub fn is_compute(self) -> bool {
        self != Engine::Dma
    }
}

/// What an HBM tensor is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HbmRole {
    /// Filled by the caller before the run.
    Input,
    /// Returned after the run; every element must have been written.
    Output,
    /// Working memory of the program.
    Scratch,
}

/// Declaration of an HBM tensor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HbmTensorDecl {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub role: HbmRole,
}

/// A program for one NeuronCore.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Program {
    #[serde(default)]
    pub target: TargetName,
    pub hbm: Vec<HbmTensorDecl>,
    pub instructions: Vec<Instruction>,
}

/// One instruction on one engine's queue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instruction {
    pub engine: Engine,
    #[serde(deserialize_with = "op_one_key")]
    pub op: Op,
    /// Indices of earlier instructions (on other engines) this one waits for. Execution is in
    /// program order; these record the cross-engine synchronisation a parallel machine needs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wait: Vec<u32>,
    /// For DMA instructions: the DMA queue the transfer is issued on (NC-v2 has 16 DMA engines
    /// per core). `None` leaves it to the default assignment (docs/architecture.md, "Timeline").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<u16>,
    /// Where the instruction came from, for errors and traces: `file:line` of the kernel source
    /// line that traced it (NKI front-end), or a free-form label. Never affects execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loc: Option<String>,
    /// The physical core of the logical core (LNC=2) whose queues run the instruction: 0 or 1
    /// (`Target::lnc_allowed`). The two cores share HBM and have their own SBUF, PSUM and queues;
    /// they synchronise only through `core_barrier` (docs/timeline.md, "Two cores").
    #[serde(default, skip_serializing_if = "is_core_zero")]
    pub core: u8,
}

fn is_core_zero(core: &u8) -> bool {
    *core == 0
}

impl Instruction {
    pub fn new(engine: Engine, op: Op) -> Self {
        Instruction {
            engine,
            op,
            wait: Vec::new(),
            queue: None,
            loc: None,
            core: 0,
        }
    }
}

/// JSON has no NaN or infinity: immediates that are not finite are written as the strings
/// `"nan"`, `"inf"` and `"-inf"` (as in the golden format), so every program round-trips.
mod finite_or_name {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_nan() {
            s.serialize_str("nan")
        } else if v.is_infinite() {
            s.serialize_str(if *v > 0.0 { "inf" } else { "-inf" })
        } else {
            s.serialize_f64(*v)
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumberOrName {
        Number(f64),
        Name(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        match NumberOrName::deserialize(d)? {
            NumberOrName::Number(v) => Ok(v),
            NumberOrName::Name(n) => match n.as_str() {
                "nan" => Ok(f64::NAN),
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                other => Err(D::Error::custom(format!(
                    "invalid type: string {other:?}, expected a number or one of \"nan\", \"inf\", \"-inf\""
                ))),
            },
        }
    }
}

/// A per-partition scalar: an immediate, or a `[P, 1]` tile read once per partition.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScalarOperand {
    /// An immediate. Arithmetic ops use it as fp32; bitvec ops as an integer bit pattern.
    Imm(#[serde(with = "finite_or_name")] f64),
    /// One element per partition, broadcast along the free axis.
    Tile(AccessPattern),
}

/// [`ScalarOperand`]'s JSON form, read by [`one_entry`].
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum ScalarOperandRepr {
    Imm(#[serde(deserialize_with = "finite_or_name::deserialize")] f64),
    Tile(AccessPattern),
}

impl<'de> Deserialize<'de> for ScalarOperand {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(
            match d.deserialize_map(OneEntry::<ScalarOperandRepr>::new("a scalar operand"))? {
                ScalarOperandRepr::Imm(x) => ScalarOperand::Imm(x),
                ScalarOperandRepr::Tile(ap) => ScalarOperand::Tile(ap),
            },
        )
    }
}

/// Reads an externally tagged value (`{"tag": …}`) and refuses a second key by name: serde's
/// derived enums report only "expected value" at a position. Duplicate and unknown fields inside
/// the value are refused as everywhere else.
pub(crate) struct OneEntry<T> {
    what: &'static str,
    _t: std::marker::PhantomData<T>,
}

impl<T> OneEntry<T> {
    pub(crate) fn new(what: &'static str) -> Self {
        OneEntry {
            what,
            _t: std::marker::PhantomData,
        }
    }
}

impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for OneEntry<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{} (an object with one key)", self.what)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
        T::deserialize(serde::de::value::StrDeserializer::new(v))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        use serde::de::Error;
        let value = T::deserialize(serde::de::value::MapAccessDeserializer::new(&mut map))?;
        if let Some(k) = map.next_key::<String>()? {
            return Err(A::Error::custom(format!(
                "unknown field `{k}`: {} is an object with one key",
                self.what
            )));
        }
        Ok(value)
    }
}

/// [`Instruction::op`]: one key, the instruction's name, whose value is its operand struct.
fn op_one_key<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Op, D::Error> {
    d.deserialize_map(OneEntry::<Op>::new("an op"))
}

/// ALU operators (NKI `nl.*` names in comments). Arithmetic ops compute in fp32 and cast on write;
/// bitvec ops act on the raw bits of integer operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AluOp {
    /// Pass the first operand through (`bypass`).
    Bypass,
    Add,
    Subtract,
    Multiply,
    Max,
    Min,
    IsEqual,
    NotEqual,
    IsGe,
    IsGt,
    IsLe,
    IsLt,
    LogicalAnd,
    LogicalOr,
    LogicalXor,
    /// Unary: 1.0 where the input is 0, else 0.0.
    LogicalNot,
    /// Unary |x|.
    Abs,
    /// Unary 1/x.
    Reciprocal,
    /// Unary 1/sqrt(x) (GpSimd and Scalar).
    Rsqrt,
    /// x ** y (GpSimd only).
    Pow,
    /// Mean of the two operands / of a reduction (`average`).
    Average,
    // Bitvec (integer dtypes only, VectorE).
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
    /// Unary.
    BitwiseNot,
    /// Shift left (arithmetic and logical are the same).
    ShiftLeft,
    /// Logical shift right (arithmetic shift right does not exist on NC-v2).
    LogicalShiftRight,
}

impl AluOp {
    pub fn name(self) -> &'static str {
        match self {
            AluOp::Bypass => "bypass",
            AluOp::Add => "add",
            AluOp::Subtract => "subtract",
            AluOp::Multiply => "multiply",
            AluOp::Max => "max",
            AluOp::Min => "min",
            AluOp::IsEqual => "is_equal",
            AluOp::NotEqual => "not_equal",
            AluOp::IsGe => "is_ge",
            AluOp::IsGt => "is_gt",
            AluOp::IsLe => "is_le",
            AluOp::IsLt => "is_lt",
            AluOp::LogicalAnd => "logical_and",
            AluOp::LogicalOr => "logical_or",
            AluOp::LogicalXor => "logical_xor",
            AluOp::LogicalNot => "logical_not",
            AluOp::Abs => "abs",
            AluOp::Reciprocal => "reciprocal",
            AluOp::Rsqrt => "rsqrt",
            AluOp::Pow => "pow",
            AluOp::Average => "average",
            AluOp::BitwiseAnd => "bitwise_and",
            AluOp::BitwiseOr => "bitwise_or",
            AluOp::BitwiseXor => "bitwise_xor",
            AluOp::BitwiseNot => "bitwise_not",
            AluOp::ShiftLeft => "shift_left",
            AluOp::LogicalShiftRight => "logical_shift_right",
        }
    }

    /// Bitvec ops act on raw integer bits.
    pub fn is_bitvec(self) -> bool {
        matches!(
            self,
            AluOp::BitwiseAnd
                | AluOp::BitwiseOr
                | AluOp::BitwiseXor
                | AluOp::BitwiseNot
                | AluOp::ShiftLeft
                | AluOp::LogicalShiftRight
        )
    }

    /// Unary ops ignore their second operand.
    pub fn is_unary(self) -> bool {
        matches!(
            self,
            AluOp::Bypass | AluOp::LogicalNot | AluOp::Abs | AluOp::Reciprocal | AluOp::Rsqrt | AluOp::BitwiseNot
        )
    }
}

/// Scalar-engine activation functions (hardware evaluates piecewise polynomials; we compute the
/// function accurately, see docs/numerics.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActFunc {
    Copy,
    Square,
    Sigmoid,
    Relu,
    Gelu,
    GeluDx,
    GeluApproxTanh,
    GeluApproxSigmoid,
    GeluApproxSigmoidDx,
    Silu,
    SiluDx,
    Tanh,
    Softplus,
    Mish,
    Erf,
    ErfDx,
    Exp,
    Log,
    Sin,
    Arctan,
    Sqrt,
    Rsqrt,
    Reciprocal,
    Sign,
    Abs,
}

/// Comparison used by `affine_select`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CmpOp {
    Equal,
    NotEqual,
    GreaterThan,
    GreaterEqual,
}

/// Command for the Scalar engine's per-partition accumulator registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AccCmd {
    #[default]
    Idle,
    Reset,
    Reduce,
    ResetReduce,
}

// ---------------------------------------------------------------------------------------------
// Instructions. Operand names follow NKI's.

/// TensorE: `dst[M, N] (+)= stationary[K, M]ᵀ · moving[K, N]`, contraction over partitions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcMatmul {
    pub dst: AccessPattern,
    pub stationary: AccessPattern,
    pub moving: AccessPattern,
    /// `false`: overwrite the PSUM bank region; `true`: add to it in fp32.
    #[serde(default)]
    pub accumulate: bool,
    /// TensorE's performance mode (`nki.isa.matmul_perf_mode`, `Target::matmul_perf_modes`).
    /// `double_row` (NC-v3+, FP8 inputs only): each partition of `stationary` holds two rows of
    /// the contraction, `[2, M]`, and of `moving` `[2, N]` (the first and second half of the
    /// partition's elements, in access-pattern order), so K = 2 × partitions ≤ 256 in one pass:
    /// `dst[m, n] = Σ_p Σ_j stationary[p, j, m] · moving[p, j, n]` (docs/isa.md §5.1).
    #[serde(default, skip_serializing_if = "MatmulPerfMode::is_none")]
    pub perf_mode: MatmulPerfMode,
}

/// Transpose partition and (flattened) free axes. On TensorE an identity matmul into PSUM (so
/// NaN/Inf spread as on NC-v2); on VectorE a bit-exact 32×32 block transpose.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcTranspose {
    pub dst: AccessPattern,
    pub src: AccessPattern,
}

/// `dst = in0 op in1`, elementwise.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorTensor {
    pub dst: AccessPattern,
    pub in0: AccessPattern,
    pub in1: AccessPattern,
    pub op: AluOp,
}

/// `dst = (src op0 operand0) op1 operand1` with optional operand reversal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorScalar {
    pub dst: AccessPattern,
    pub src: AccessPattern,
    pub op0: AluOp,
    pub operand0: ScalarOperand,
    #[serde(default)]
    pub reverse0: bool,
    #[serde(default)]
    pub op1: Option<AluOp>,
    #[serde(default)]
    pub operand1: Option<ScalarOperand>,
    #[serde(default)]
    pub reverse1: bool,
}

/// `dst = (src op0 operand0) op1 in1`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScalarTensorTensor {
    pub dst: AccessPattern,
    pub src: AccessPattern,
    pub op0: AluOp,
    pub operand0: ScalarOperand,
    pub op1: AluOp,
    pub in1: AccessPattern,
    #[serde(default)]
    pub reverse0: bool,
    #[serde(default)]
    pub reverse1: bool,
}

/// Reduce the innermost `axes` free dimensions of `src` with `op` (fp32), optionally negated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorReduce {
    pub dst: AccessPattern,
    pub src: AccessPattern,
    pub op: AluOp,
    /// How many innermost free dims to reduce (1..=4).
    pub axes: usize,
    #[serde(default)]
    pub negate: bool,
}

/// Scan along the free axis: `r[i] = (in0[i] op0 r[i-1]) op1 in1[i]`, `r[-1] = initial`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorTensorScan {
    pub dst: AccessPattern,
    pub in0: AccessPattern,
    pub in1: AccessPattern,
    pub initial: ScalarOperand,
    pub op0: AluOp,
    pub op1: AluOp,
}

/// `dst = src op0 operand0`; `reduce_res[p] = reduce_op over the free axis of dst` (fp32).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorScalarReduce {
    pub dst: AccessPattern,
    pub src: AccessPattern,
    pub op0: AluOp,
    pub operand0: ScalarOperand,
    pub reduce_op: AluOp,
    pub reduce_res: AccessPattern,
}

/// Copy with cast (bit-exact when dtypes match on Vector/GpSimd).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorCopy {
    pub dst: AccessPattern,
    pub src: AccessPattern,
}

/// `dst[i] = src[i]` where `predicate[i] != 0` (inverted by `reverse_pred`); else unchanged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorCopyPredicated {
    pub dst: AccessPattern,
    pub src: AccessPattern,
    pub predicate: AccessPattern,
    #[serde(default)]
    pub reverse_pred: bool,
}

/// VectorE `dst = 1/src` (more precise than the ScalarE reciprocal).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reciprocal {
    pub dst: AccessPattern,
    pub src: AccessPattern,
}

/// Per partition, 6 statistics of ≤512 elements: (count, mean, var·count) of even and of odd
/// indexed elements.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BnStats {
    pub dst: AccessPattern,
    pub src: AccessPattern,
}

/// Combines `bn_stats` tuples into (mean, population variance) per partition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BnAggr {
    pub dst: AccessPattern,
    pub src: AccessPattern,
}

/// The 8 largest values per partition, descending.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Max8 {
    pub dst: AccessPattern,
    pub src: AccessPattern,
}

/// Index of the first occurrence of each of 8 values per partition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FindIndex8 {
    pub dst: AccessPattern,
    pub data: AccessPattern,
    pub vals: AccessPattern,
}

/// Replace the first occurrence of each of 8 values with `imm` (values processed 7..0).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchReplace8 {
    pub dst: AccessPattern,
    pub data: AccessPattern,
    pub vals: AccessPattern,
    #[serde(with = "finite_or_name")]
    pub imm: f64,
    #[serde(default)]
    pub dst_idx: Option<AccessPattern>,
}

/// Fill with a constant (converted through fp32 for float dtypes, exactly for integers).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memset {
    pub dst: AccessPattern,
    #[serde(with = "finite_or_name")]
    pub value: f64,
}

/// `dst = predicate ? on_true : on_false`, optional max-reduction per partition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectReduce {
    pub dst: AccessPattern,
    pub predicate: AccessPattern,
    pub on_true: AccessPattern,
    pub on_false: ScalarOperand,
    #[serde(default)]
    pub reverse_pred: bool,
    #[serde(default)]
    pub reduce_res: Option<AccessPattern>,
}

/// Zero each element with probability `prob`, from the VectorE generator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dropout {
    pub dst: AccessPattern,
    pub src: AccessPattern,
    pub prob: ScalarOperand,
}

/// 32 random bits per element from the VectorE generator, truncated to the dtype's width.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rng {
    pub dst: AccessPattern,
}

/// Seeds the VectorE generator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetRngSeed {
    pub seed: ScalarOperand,
}

/// Within each 32-partition quadrant: `dst[i] = src[mask[i]]`; 255 leaves `dst[i]` unchanged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamShuffle {
    pub dst: AccessPattern,
    pub src: AccessPattern,
    pub mask: Vec<u8>,
}

/// ScalarE: `dst = func(src * scale + bias)`; optionally accumulate the free-axis sum of the
/// function's fp32 output into the per-partition accumulator and read it out into `reduce_res`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Activation {
    pub dst: AccessPattern,
    pub func: ActFunc,
    pub src: AccessPattern,
    #[serde(default)]
    pub bias: Option<ScalarOperand>,
    pub scale: ScalarOperand,
    #[serde(default)]
    pub acc: AccCmd,
    #[serde(default)]
    pub reduce_res: Option<AccessPattern>,
}

/// GpSimd: `dst[c, i…] = offset + c·channel_multiplier + Σ step_k·i_k`, in int32, cast to dst.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Iota {
    pub dst: AccessPattern,
    pub offset: i64,
    pub channel_multiplier: i64,
    /// `[step, num]` per free dim of dst, outer to inner.
    pub pattern: Vec<[i64; 2]>,
}

/// GpSimd: `v = offset + c·channel_multiplier + Σ step_k·i_k`; `dst = cmp(v, 0) ? on_true : on_false`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AffineSelect {
    pub dst: AccessPattern,
    pub on_true: AccessPattern,
    #[serde(with = "finite_or_name")]
    pub on_false: f64,
    pub offset: i64,
    pub channel_multiplier: i64,
    pub pattern: Vec<[i64; 2]>,
    pub cmp: CmpOp,
}

/// GpSimd: per 16-partition core, gather `num_elem_per_idx` elements at each uint16 index of the
/// core's index list from every partition's own data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalGather {
    pub dst: AccessPattern,
    pub src: AccessPattern,
    pub index: AccessPattern,
    pub num_elem_per_idx: usize,
    pub num_valid_indices: usize,
}

/// GpSimd: per partition `dst[p, j] = flat(data[p])[indices[p, j]]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NGather {
    pub dst: AccessPattern,
    pub data: AccessPattern,
    pub indices: AccessPattern,
}

/// GpSimd: reduce across partitions: `dst[0, i] = op over p of src[p, i]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorPartitionReduce {
    pub dst: AccessPattern,
    pub src: AccessPattern,
    pub op: AluOp,
}

/// Which side of a DMA is addressed through an index tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndirectSide {
    /// Gather: row `p` of the source starts at `index[p] * row_step` elements past `src.offset`.
    Src,
    /// Scatter: row `p` of the destination starts at `index[p] * row_step` past `dst.offset`.
    Dst,
}

/// What an out-of-range index does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OobMode {
    /// The instruction fails with an error.
    #[default]
    Error,
    /// The row is skipped (not read / not written).
    Skip,
}

/// Indirect (descriptor-generated) addressing for a DMA: one index per row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Indirect {
    pub side: IndirectSide,
    /// Integer tensor in SBUF with exactly one element per row.
    pub index: AccessPattern,
    /// Elements between consecutive index values on the indirect side.
    pub row_step: i64,
    #[serde(default)]
    pub oob: OobMode,
}

/// DMA copy HBM↔SBUF or SBUF↔SBUF; casts through fp32 when dtypes differ; optional
/// read-modify-write add at the destination; optional indirect addressing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaCopy {
    pub dst: AccessPattern,
    pub src: AccessPattern,
    /// `dst += src` (fp32) instead of `dst = src`.
    #[serde(default)]
    pub accumulate: bool,
    #[serde(default)]
    pub indirect: Option<Indirect>,
}

/// `tensor_copy` with one side at a dynamic offset along the free axis: the offset is an integer
/// read at run time from `offset` (one element in SBUF), scaled by `offset_scale` elements of the
/// dynamic side's dtype and added to that side's static offset (`tensor_copy_dynamic_src` moves
/// `src`, `tensor_copy_dynamic_dst` moves `dst`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorCopyDynamic {
    pub dst: AccessPattern,
    pub src: AccessPattern,
    /// An integer tensor in SBUF with exactly one element: the dynamic offset.
    pub offset: AccessPattern,
    /// Elements of the dynamic side per unit of `offset` (e.g. the row length of a 2-D tile).
    #[serde(default = "one_i64")]
    pub offset_scale: i64,
}

fn one_i64() -> i64 {
    1
}

/// GpSimd: for a `[1, n]` row of segment ids, `dst[0, 0..n]` = start and `dst[0, n..2n]` = end
/// (exclusive) of the run of equal ids each element belongs to; id 0 is padding → (n, −1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SequenceBounds {
    pub dst: AccessPattern,
    pub segment_ids: AccessPattern,
}

/// Who generates a DMA's descriptors (`nki.isa.dge_mode`). It changes no result; it decides
/// which rules a `dma_transpose` obeys (docs/isa.md §5.30).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DgeMode {
    /// The compiler chooses (NKI's default).
    #[default]
    Unknown,
    /// No DGE: the runtime writes the descriptors into HBM before the kernel runs.
    None,
    /// Software DGE: GpSimd writes the descriptors while the kernel runs.
    Swdge,
    /// Hardware DGE (NeuronCore-v3+): a sequencer drives the DGE block.
    Hwdge,
}

impl DgeMode {
    /// NKI's name of the mode (`nki.isa.dge_mode.<name>`).
    pub fn name(self) -> &'static str {
        match self {
            DgeMode::Unknown => "unknown",
            DgeMode::None => "none",
            DgeMode::Swdge => "swdge",
            DgeMode::Hwdge => "hwdge",
        }
    }
}

/// DMA transpose of a 2-, 3- or 4-dimensional tile (`[partitions/rows, free…]`), permutation
/// fixed by the rank: `[1, 0]`, `[2, 1, 0]`, `[3, 1, 2, 0]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaTranspose {
    pub dst: AccessPattern,
    pub src: AccessPattern,
    /// `unknown` (the default) or `hwdge`, the modes AWS allows a direct transpose; `hwdge`
    /// exists only where [`crate::Target::dma_transpose_hwdge`] is set and obeys its limits.
    #[serde(default)]
    pub dge_mode: DgeMode,
    /// An indirect (gathering) side. AWS's indirect transpose (`dma_gather_transpose`, software
    /// DGE) is not modelled: an instruction carrying one is refused with
    /// [`crate::ErrorKind::Unsupported`], never run as a direct transpose.
    #[serde(default)]
    pub indirect: Option<Indirect>,
}

/// Comparison of `range_select` (index against bound, in fp32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RangeCmp {
    Equal,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
}

/// VectorE, NeuronCore-v3+ (trn2): `idx = range_start + i` (fp32, i the free index);
/// `dst = comp0(idx, bound0) && comp1(idx, bound1) ? on_true : on_false`; optional per-partition
/// max of dst into `reduce_res`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RangeSelect {
    pub dst: AccessPattern,
    pub on_true: AccessPattern,
    pub comp0: RangeCmp,
    pub bound0: ScalarOperand,
    pub comp1: RangeCmp,
    pub bound1: ScalarOperand,
    #[serde(default, with = "finite_or_name")]
    pub range_start: f64,
    #[serde(with = "finite_or_name")]
    pub on_false: f64,
    #[serde(default)]
    pub reduce_res: Option<AccessPattern>,
}

/// DMA (the new-API `nki.isa`, SDK 2.27+): `dst = srcs[0]·scales[0] + srcs[1]·scales[1] + …`,
/// every element through fp32, at most 16 sources; AWS supports only `reduce_op = add` and unit
/// scales.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DmaCompute {
    pub dst: AccessPattern,
    pub srcs: Vec<AccessPattern>,
    /// One per source (default: all 1.0); only 1.0 is accepted.
    #[serde(default)]
    pub scales: Option<Vec<f64>>,
    #[serde(default = "alu_add")]
    pub reduce_op: AluOp,
}

fn alu_add() -> AluOp {
    AluOp::Add
}

/// Operand names of `dma_compute`'s sources (`Operand::name` is static; more than 16 sources is
/// an error of the instruction).
pub const DMA_COMPUTE_SRC_NAMES: [&str; 16] = [
    "srcs[0]", "srcs[1]", "srcs[2]", "srcs[3]", "srcs[4]", "srcs[5]", "srcs[6]", "srcs[7]", "srcs[8]", "srcs[9]",
    "srcs[10]", "srcs[11]", "srcs[12]", "srcs[13]", "srcs[14]", "srcs[15]",
];

fn minus_one() -> i64 {
    -1
}

/// GpSimdE, NeuronCore-v3+: per row on the first partition of each 16-partition GpSimd core, the
/// nonzero positions (`+ index_offset`), `padding_val` for the rest, then the count (dst has one
/// more element per partition than src).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NonzeroWithCount {
    pub dst: AccessPattern,
    pub src: AccessPattern,
    #[serde(default)]
    pub index_offset: i64,
    #[serde(default = "minus_one")]
    pub padding_val: i64,
}

/// VectorE, NeuronCore-v4: MXFP8 quantization of an fp16/bf16 tile. Groups of 32 elements (8
/// partitions × 4 consecutive free elements) share one e8m0 scale; `dst` holds the FP8 codes packed
/// four to an element (`f8e5m2_x4` / `f8e4m3fn_x4`), `dst_scale` the scales in the quadrant layout
/// `nc_matmul_mx` reads (docs/isa.md §5.32).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuantizeMx {
    pub dst: AccessPattern,
    pub src: AccessPattern,
    pub dst_scale: AccessPattern,
}

/// TensorE, NeuronCore-v4: `dst[M, N] (+)= Σ_k deq(stationary)[k, m] · deq(moving)[k, n]` over
/// the K = 4 × partitions MX-quantized contraction (partitions × the 4 codes of each packed
/// element), each code scaled by its group's e8m0 scale (docs/isa.md §5.33).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcMatmulMx {
    pub dst: AccessPattern,
    pub stationary: AccessPattern,
    pub moving: AccessPattern,
    pub stationary_scale: AccessPattern,
    pub moving_scale: AccessPattern,
    /// `false`: overwrite the PSUM region; `true`: add to it in fp32.
    #[serde(default)]
    pub accumulate: bool,
    /// Row tiling: `(start_row, 0)`; needs `tile_size`.
    #[serde(default)]
    pub tile_position: Option<[usize; 2]>,
    /// Row tiling: `(row_size ∈ {32, 64, 128}, 128)`; needs `tile_position`.
    #[serde(default)]
    pub tile_size: Option<[usize; 2]>,
}

/// NeuronCore-v3+ (`nki.isa.core_barrier`): the two physical cores sharing an HBM stack wait for
/// each other. Each core runs one; the n-th `core_barrier` of core 0 pairs with the n-th of
/// core 1, and every instruction of either core after its barrier starts after both barriers
/// (and what they were ordered after) [NKI 2.32 `core_barrier`: remote semaphore update, then
/// local semaphore wait; only `cores=(0, 1)` exists]. `data` is the shared HBM tensor the cores
/// synchronise on: no byte of it is read or written, but the race detector treats the barrier as
/// touching it, so the writes before a barrier are ordered before the other core's accesses
/// after it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoreBarrier {
    pub data: AccessPattern,
}

/// Every instruction. Externally tagged in JSON: `{"tensor_tensor": {...}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    // TensorE
    NcMatmul(NcMatmul),
    NcTranspose(NcTranspose),
    // VectorE (some also on GpSimd / ScalarE, by the instruction's engine tag)
    TensorTensor(TensorTensor),
    TensorScalar(TensorScalar),
    ScalarTensorTensor(ScalarTensorTensor),
    TensorReduce(TensorReduce),
    TensorTensorScan(TensorTensorScan),
    TensorScalarReduce(TensorScalarReduce),
    TensorCopy(TensorCopy),
    TensorCopyPredicated(TensorCopyPredicated),
    TensorCopyDynamicSrc(TensorCopyDynamic),
    TensorCopyDynamicDst(TensorCopyDynamic),
    Reciprocal(Reciprocal),
    BnStats(BnStats),
    BnAggr(BnAggr),
    Max8(Max8),
    FindIndex8(FindIndex8),
    MatchReplace8(MatchReplace8),
    Memset(Memset),
    SelectReduce(SelectReduce),
    Dropout(Dropout),
    Rng(Rng),
    SetRngSeed(SetRngSeed),
    StreamShuffle(StreamShuffle),
    /// NeuronCore-v3+ only (refused on trn1).
    RangeSelect(RangeSelect),
    /// GpSimdE, NeuronCore-v3+ only (refused on trn1).
    NonzeroWithCount(NonzeroWithCount),
    /// DMA, NeuronCore-v3+ here (the new API's generations; refused on trn1).
    DmaCompute(DmaCompute),
    /// NeuronCore-v4 only (refused on trn1 and trn2).
    QuantizeMx(QuantizeMx),
    /// TensorE, NeuronCore-v4 only (refused on trn1 and trn2).
    NcMatmulMx(NcMatmulMx),
    // ScalarE
    Activation(Activation),
    // GpSimdE
    Iota(Iota),
    AffineSelect(AffineSelect),
    LocalGather(LocalGather),
    NGather(NGather),
    TensorPartitionReduce(TensorPartitionReduce),
    SequenceBounds(SequenceBounds),
    // DMA
    DmaCopy(DmaCopy),
    DmaTranspose(DmaTranspose),
    // ---- Two physical cores of a logical core (LNC=2; NeuronCore-v3+). ----
    CoreBarrier(CoreBarrier),
}

/// How an instruction uses one of its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Only read.
    Read,
    /// Written, from other operands only.
    Write,
    /// Written, and the result depends on the operand's previous contents (accumulation, a
    /// predicated copy's kept elements).
    ReadWrite,
}

impl Role {
    /// Whether the operand's memory changes (a write or a read-modify-write).
    pub fn writes(self) -> bool {
        matches!(self, Role::Write | Role::ReadWrite)
    }

    /// Whether the operand's previous contents are read.
    pub fn reads(self) -> bool {
        matches!(self, Role::Read | Role::ReadWrite)
    }
}

/// One operand of an instruction: its name (NKI's), its role and its access pattern.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Operand<'a> {
    pub name: &'static str,
    pub role: Role,
    pub ap: &'a AccessPattern,
    /// The address depends on data read at run time (a DMA's indirect side, a dynamic copy's
    /// moved side): the operand may touch any byte of its partitions (of its HBM tensor), not
    /// only what `ap` names.
    pub dynamic: bool,
}

impl Op {
    /// A plain `dma_copy`: `dst = src` converting to `dst`'s dtype (no accumulation, no
    /// indirection).
    pub fn dma_copy(dst: AccessPattern, src: AccessPattern) -> Op {
        Op::DmaCopy(DmaCopy {
            dst,
            src,
            accumulate: false,
            indirect: None,
        })
    }

    /// A `dma_copy` with one side addressed through `index` (no accumulation): row `i` of the
    /// `side` is at `index[i] · row_step`; out-of-range rows follow `oob`.
    pub fn dma_indirect(
        dst: AccessPattern,
        src: AccessPattern,
        side: IndirectSide,
        index: AccessPattern,
        row_step: i64,
        oob: OobMode,
    ) -> Op {
        Op::DmaCopy(DmaCopy {
            dst,
            src,
            accumulate: false,
            indirect: Some(Indirect {
                side,
                index,
                row_step,
                oob,
            }),
        })
    }

    /// The NKI-style opcode name.
    pub fn name(&self) -> &'static str {
        match self {
            Op::NcMatmul(_) => "nc_matmul",
            Op::NcTranspose(_) => "nc_transpose",
            Op::TensorTensor(_) => "tensor_tensor",
            Op::TensorScalar(_) => "tensor_scalar",
            Op::ScalarTensorTensor(_) => "scalar_tensor_tensor",
            Op::TensorReduce(_) => "tensor_reduce",
            Op::TensorTensorScan(_) => "tensor_tensor_scan",
            Op::TensorScalarReduce(_) => "tensor_scalar_reduce",
            Op::TensorCopy(_) => "tensor_copy",
            Op::TensorCopyPredicated(_) => "tensor_copy_predicated",
            Op::TensorCopyDynamicSrc(_) => "tensor_copy_dynamic_src",
            Op::TensorCopyDynamicDst(_) => "tensor_copy_dynamic_dst",
            Op::Reciprocal(_) => "reciprocal",
            Op::BnStats(_) => "bn_stats",
            Op::BnAggr(_) => "bn_aggr",
            Op::Max8(_) => "max8",
            Op::FindIndex8(_) => "nc_find_index8",
            Op::MatchReplace8(_) => "nc_match_replace8",
            Op::Memset(_) => "memset",
            Op::SelectReduce(_) => "select_reduce",
            Op::Dropout(_) => "dropout",
            Op::Rng(_) => "rng",
            Op::SetRngSeed(_) => "set_rng_seed",
            Op::StreamShuffle(_) => "nc_stream_shuffle",
            Op::RangeSelect(_) => "range_select",
            Op::NonzeroWithCount(_) => "nonzero_with_count",
            Op::DmaCompute(_) => "dma_compute",
            Op::QuantizeMx(_) => "quantize_mx",
            Op::NcMatmulMx(_) => "nc_matmul_mx",
            Op::Activation(_) => "activation",
            Op::Iota(_) => "iota",
            Op::AffineSelect(_) => "affine_select",
            Op::LocalGather(_) => "local_gather",
            Op::NGather(_) => "nc_n_gather",
            Op::TensorPartitionReduce(_) => "tensor_partition_reduce",
            Op::SequenceBounds(_) => "sequence_bounds",
            Op::DmaCopy(_) => "dma_copy",
            Op::DmaTranspose(_) => "dma_transpose",
            Op::CoreBarrier(_) => "core_barrier",
        }
    }

    /// The engines that may execute this instruction on NC-v2 (the target may allow more); for an
    /// instruction NC-v2 lacks (`range_select`), the engines of the generation that has it.
    pub fn engines(&self) -> &'static [Engine] {
        use Engine::*;
        match self {
            Op::NcMatmul(_) | Op::NcMatmulMx(_) => &[Tensor],
            Op::NcTranspose(_) => &[Tensor, Vector],
            Op::TensorTensor(_) => &[Vector, Gpsimd],
            Op::TensorScalar(_) => &[Vector, Gpsimd],
            Op::TensorCopy(_) | Op::TensorCopyDynamicSrc(_) | Op::TensorCopyDynamicDst(_) => &[Vector, Gpsimd],
            Op::Memset(_) => &[Vector, Gpsimd],
            Op::TensorReduce(_) => &[Vector],
            Op::ScalarTensorTensor(_)
            | Op::TensorTensorScan(_)
            | Op::TensorScalarReduce(_)
            | Op::TensorCopyPredicated(_)
            | Op::Reciprocal(_)
            | Op::BnStats(_)
            | Op::BnAggr(_)
            | Op::Max8(_)
            | Op::FindIndex8(_)
            | Op::MatchReplace8(_)
            | Op::SelectReduce(_)
            | Op::Dropout(_)
            | Op::Rng(_)
            | Op::SetRngSeed(_)
            | Op::StreamShuffle(_)
            | Op::RangeSelect(_)
            | Op::QuantizeMx(_) => &[Vector],
            Op::Activation(_) => &[Scalar],
            Op::Iota(_)
            | Op::AffineSelect(_)
            | Op::LocalGather(_)
            | Op::NGather(_)
            | Op::TensorPartitionReduce(_)
            | Op::SequenceBounds(_)
            | Op::NonzeroWithCount(_) => &[Gpsimd],
            Op::DmaCopy(_) | Op::DmaTranspose(_) | Op::DmaCompute(_) => &[Dma],
            // NKI's `engine=` picks the engine that signals and waits (default gpsimd).
            Op::CoreBarrier(_) => &[Vector, Scalar, Gpsimd],
        }
    }
}

impl Program {
    pub fn new(target: TargetName) -> Self {
        Program {
            target,
            hbm: Vec::new(),
            instructions: Vec::new(),
        }
    }

    /// Declares an HBM tensor.
    pub fn declare(&mut self, name: &str, dtype: DType, shape: &[usize], role: HbmRole) {
        self.hbm.push(HbmTensorDecl {
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
            role,
        });
    }

    /// Appends an instruction.
    pub fn push(&mut self, engine: Engine, op: Op) -> usize {
        self.instructions.push(Instruction::new(engine, op));
        self.instructions.len() - 1
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("programs always serialize")
    }

    pub fn from_json(s: &str) -> Result<Program, serde_json::Error> {
        serde_json::from_str(s)
    }
}

impl ScalarOperand {
    fn tile(&self) -> Option<&AccessPattern> {
        match self {
            ScalarOperand::Tile(ap) => Some(ap),
            ScalarOperand::Imm(_) => None,
        }
    }
}

impl Op {
    /// Every access pattern the instruction names, with its operand name and [`Role`]: what the
    /// race detector and `infer_waits` read and write (docs/timeline.md). Exhaustive, so a new
    /// operand cannot be missed by whoever sizes memories, checks hazards or prints programs;
    /// `sim/tests/program_serde.rs` checks every variant's roles against a table.
    pub fn operands(&self) -> Vec<Operand<'_>> {
        use Role::{Read, ReadWrite, Write};
        fn o<'a>(name: &'static str, role: Role, ap: &'a AccessPattern) -> Operand<'a> {
            Operand {
                name,
                role,
                ap,
                dynamic: false,
            }
        }
        fn s<'a>(name: &'static str, op: &'a ScalarOperand) -> Option<Operand<'a>> {
            op.tile().map(|ap| o(name, Read, ap))
        }
        let mut v: Vec<Operand<'_>> = Vec::new();
        match self {
            Op::NcMatmul(i) => v.extend([
                o("dst", if i.accumulate { ReadWrite } else { Write }, &i.dst),
                o("stationary", Read, &i.stationary),
                o("moving", Read, &i.moving),
            ]),
            Op::NcTranspose(i) => v.extend([o("dst", Write, &i.dst), o("src", Read, &i.src)]),
            Op::TensorTensor(i) => v.extend([o("dst", Write, &i.dst), o("in0", Read, &i.in0), o("in1", Read, &i.in1)]),
            Op::TensorScalar(i) => {
                v.extend([o("dst", Write, &i.dst), o("src", Read, &i.src)]);
                v.extend(s("operand0", &i.operand0));
                if let Some(x) = &i.operand1 {
                    v.extend(s("operand1", x));
                }
            }
            Op::ScalarTensorTensor(i) => {
                v.extend([o("dst", Write, &i.dst), o("src", Read, &i.src), o("in1", Read, &i.in1)]);
                v.extend(s("operand0", &i.operand0));
            }
            Op::TensorReduce(i) => v.extend([o("dst", Write, &i.dst), o("src", Read, &i.src)]),
            Op::TensorTensorScan(i) => {
                v.extend([o("dst", Write, &i.dst), o("in0", Read, &i.in0), o("in1", Read, &i.in1)]);
                v.extend(s("initial", &i.initial));
            }
            Op::TensorScalarReduce(i) => {
                v.extend([
                    o("dst", Write, &i.dst),
                    o("src", Read, &i.src),
                    o("reduce_res", Write, &i.reduce_res),
                ]);
                v.extend(s("operand0", &i.operand0));
            }
            Op::TensorCopy(i) => v.extend([o("dst", Write, &i.dst), o("src", Read, &i.src)]),
            // Elements whose predicate is false keep their old values.
            Op::TensorCopyPredicated(i) => v.extend([
                o("dst", ReadWrite, &i.dst),
                o("src", Read, &i.src),
                o("predicate", Read, &i.predicate),
            ]),
            Op::TensorCopyDynamicSrc(i) => v.extend([
                o("dst", Write, &i.dst),
                Operand {
                    dynamic: true,
                    ..o("src", Read, &i.src)
                },
                o("offset", Read, &i.offset),
            ]),
            Op::TensorCopyDynamicDst(i) => v.extend([
                Operand {
                    dynamic: true,
                    ..o("dst", Write, &i.dst)
                },
                o("src", Read, &i.src),
                o("offset", Read, &i.offset),
            ]),
            Op::Reciprocal(i) => v.extend([o("dst", Write, &i.dst), o("src", Read, &i.src)]),
            Op::BnStats(i) => v.extend([o("dst", Write, &i.dst), o("src", Read, &i.src)]),
            Op::BnAggr(i) => v.extend([o("dst", Write, &i.dst), o("src", Read, &i.src)]),
            Op::Max8(i) => v.extend([o("dst", Write, &i.dst), o("src", Read, &i.src)]),
            Op::FindIndex8(i) => v.extend([
                o("dst", Write, &i.dst),
                o("data", Read, &i.data),
                o("vals", Read, &i.vals),
            ]),
            Op::MatchReplace8(i) => {
                v.extend([
                    o("dst", Write, &i.dst),
                    o("data", Read, &i.data),
                    o("vals", Read, &i.vals),
                ]);
                if let Some(d) = &i.dst_idx {
                    v.push(o("dst_idx", Write, d));
                }
            }
            Op::Memset(i) => v.push(o("dst", Write, &i.dst)),
            Op::SelectReduce(i) => {
                v.extend([
                    o("dst", Write, &i.dst),
                    o("predicate", Read, &i.predicate),
                    o("on_true", Read, &i.on_true),
                ]);
                v.extend(s("on_false", &i.on_false));
                if let Some(r) = &i.reduce_res {
                    v.push(o("reduce_res", Write, r));
                }
            }
            Op::Dropout(i) => {
                v.extend([o("dst", Write, &i.dst), o("src", Read, &i.src)]);
                v.extend(s("prob", &i.prob));
            }
            Op::Rng(i) => v.push(o("dst", Write, &i.dst)),
            Op::SetRngSeed(i) => v.extend(s("seed", &i.seed)),
            Op::StreamShuffle(i) => v.extend([o("dst", Write, &i.dst), o("src", Read, &i.src)]),
            Op::RangeSelect(i) => {
                v.extend([o("dst", Write, &i.dst), o("on_true", Read, &i.on_true)]);
                v.extend(s("bound0", &i.bound0));
                v.extend(s("bound1", &i.bound1));
                if let Some(r) = &i.reduce_res {
                    v.push(o("reduce_res", Write, r));
                }
            }
            Op::NonzeroWithCount(i) => v.extend([o("dst", Write, &i.dst), o("src", Read, &i.src)]),
            Op::DmaCompute(i) => {
                v.push(o("dst", Write, &i.dst));
                for (k, src) in i.srcs.iter().enumerate() {
                    v.push(o(DMA_COMPUTE_SRC_NAMES.get(k).copied().unwrap_or("srcs"), Read, src));
                }
            }
            Op::QuantizeMx(i) => v.extend([
                o("dst", Write, &i.dst),
                o("src", Read, &i.src),
                o("dst_scale", Write, &i.dst_scale),
            ]),
            Op::NcMatmulMx(i) => v.extend([
                o("dst", if i.accumulate { ReadWrite } else { Write }, &i.dst),
                o("stationary", Read, &i.stationary),
                o("moving", Read, &i.moving),
                o("stationary_scale", Read, &i.stationary_scale),
                o("moving_scale", Read, &i.moving_scale),
            ]),
            Op::Activation(i) => {
                v.extend([o("dst", Write, &i.dst), o("src", Read, &i.src)]);
                if let Some(b) = &i.bias {
                    v.extend(s("bias", b));
                }
                v.extend(s("scale", &i.scale));
                if let Some(r) = &i.reduce_res {
                    v.push(o("reduce_res", Write, r));
                }
            }
            Op::Iota(i) => v.push(o("dst", Write, &i.dst)),
            Op::AffineSelect(i) => v.extend([o("dst", Write, &i.dst), o("on_true", Read, &i.on_true)]),
            Op::LocalGather(i) => v.extend([
                o("dst", Write, &i.dst),
                o("src", Read, &i.src),
                o("index", Read, &i.index),
            ]),
            Op::NGather(i) => v.extend([
                o("dst", Write, &i.dst),
                o("data", Read, &i.data),
                o("indices", Read, &i.indices),
            ]),
            Op::TensorPartitionReduce(i) => v.extend([o("dst", Write, &i.dst), o("src", Read, &i.src)]),
            Op::SequenceBounds(i) => v.extend([o("dst", Write, &i.dst), o("segment_ids", Read, &i.segment_ids)]),
            Op::DmaTranspose(i) => {
                let side = i.indirect.as_ref().map(|ind| ind.side);
                v.extend([
                    Operand {
                        dynamic: side == Some(IndirectSide::Dst),
                        ..o("dst", Write, &i.dst)
                    },
                    Operand {
                        dynamic: side == Some(IndirectSide::Src),
                        ..o("src", Read, &i.src)
                    },
                ]);
                if let Some(ind) = &i.indirect {
                    v.push(o("index", Read, &ind.index));
                }
            }
            // Touches no byte; a read-modify-write for ordering (see `CoreBarrier`).
            Op::CoreBarrier(i) => v.push(o("data", ReadWrite, &i.data)),
            Op::DmaCopy(i) => {
                let side = i.indirect.as_ref().map(|ind| ind.side);
                v.extend([
                    Operand {
                        dynamic: side == Some(IndirectSide::Dst),
                        ..o("dst", if i.accumulate { ReadWrite } else { Write }, &i.dst)
                    },
                    Operand {
                        dynamic: side == Some(IndirectSide::Src),
                        ..o("src", Read, &i.src)
                    },
                ]);
                if let Some(ind) = &i.indirect {
                    v.push(o("index", Read, &ind.index));
                }
            }
        }
        v
    }
}

impl Program {
    /// Bytes per partition of SBUF and of PSUM that the program's operands can reach (capped at
    /// what is usable). The executor allocates only this much: a small program does not pay for
    /// 24 MiB of SBUF.
    pub fn on_chip_extent(&self, target: &crate::target::Target) -> (usize, usize) {
        let mut sbuf = 0usize;
        let mut psum = 0usize;
        for inst in &self.instructions {
            for ap in inst.op.operands().into_iter().map(|o| o.ap) {
                let (slot, cap) = match ap.mem {
                    crate::mem::MemSpace::Sbuf => (&mut sbuf, target.sbuf_usable_bytes),
                    crate::mem::MemSpace::Psum => (&mut psum, target.psum_partition_bytes),
                    crate::mem::MemSpace::Hbm(_) => continue,
                };
                if let Some((_, hi)) = ap.free_extent() {
                    let end =
                        (ap.offset as i64).saturating_add(hi.saturating_add(1).saturating_mul(ap.dtype.size() as i64));
                    *slot = (*slot).max(end.clamp(0, cap as i64) as usize);
                }
            }
        }
        // A dynamic copy's moved side can land anywhere in its partitions at run time.
        for inst in &self.instructions {
            let moved = match &inst.op {
                Op::TensorCopyDynamicSrc(i) => &i.src,
                Op::TensorCopyDynamicDst(i) => &i.dst,
                _ => continue,
            };
            match moved.mem {
                crate::mem::MemSpace::Sbuf => sbuf = target.sbuf_usable_bytes,
                crate::mem::MemSpace::Psum => psum = target.psum_partition_bytes,
                crate::mem::MemSpace::Hbm(_) => {}
            }
        }
        // Round up to a cache line so that partitions do not share one.
        (sbuf.next_multiple_of(64), psum.next_multiple_of(64))
    }
}
