//! `trnlower`, the lowering: an ATen call → a trnsim [`Program`], for a target.
//!
//! A backend crate: it depends on `trnsim` and knows nothing of golden files, comparison,
//! expectations or reports (trnconf, the harness, and the Python package depend on it). The entry
//! point is [`lower_call`]: the call and tensor metadata in, a scheduled program out.
//!
//! The interface every op family implements. A lowering sees only the call (arguments, scalar
//! values) and tensor *metadata* ([`LowerRequest`]): it builds a program and never touches tensor
//! values — results are computed by the simulated engines only.
//!
//! Conventions:
//! * The program's HBM tensors are named exactly like the case's tensors (`input.0`, `kwarg.x`,
//!   `output.0`, …): inputs with role Input, outputs with role Output.
//! * Trainium has no int64: a lowering declares an int64 case tensor as `I32` (and bool as
//!   `Bool`). The runner narrows int64 host data to int32 at the boundary (flagging values that
//!   do not fit) and widens int32 outputs back to int64. No other host conversion exists:
//!   every other dtype is declared as its own device dtype ([`device_dtype`]).
//! * Trainium has no complex dtype: a complex64 case tensor is declared as its *real view*, `F32`
//!   of shape `shape + [2]` (real, imaginary) — exactly the bytes the golden file stores, so the
//!   runner passes them through unchanged ([`complex_real_view`]). [`device_dtype`] answers `None`
//!   for c64 so that a lowering which does not handle the extra axis refuses complex cases
//!   instead of declaring the wrong shape.
//! * Ops without a lowering return [`LowerError::NotLowered`].

pub mod call;
pub mod check;
pub mod dtype;
pub mod ops;
pub mod tolerance;

pub mod activation;
pub mod binary;
pub mod binary_ext;
pub mod comparison;
pub mod compensated;
pub mod conv;
pub mod conv_backward;
pub mod creation;
pub mod distance;
pub mod embedding_bag;
pub mod fft;
pub mod grid_sample;
pub mod indexing;
pub mod int64;
pub mod matmul;
pub mod metadata;
pub mod norm;
pub mod pad;
pub mod pooling;
pub mod promote;
pub mod reduction;
pub mod shape;
pub mod sort;
pub mod tile;
pub mod unary;

pub use crate::call::{JsonFloat, OpCall, TensorMeta, Value};
pub use crate::check::check_compute_work;
pub use crate::dtype::TorchDType;
use std::collections::BTreeMap;
use trnsim::{DType, Program, TargetName};

/// One output of the call as a lowering sees it: where a tensor goes, or that the op returns a
/// non-tensor value there. Never the value itself: a lowering derives non-tensor results from
/// the arguments and metadata ([`Lowered::values`]) or has the engines write them.
#[derive(Clone, Debug, PartialEq)]
pub enum OutputSlot {
    /// A tensor output, by name.
    Tensor(String),
    /// A list of optional tensors (`split_with_sizes`, …).
    Tensors(Vec<Option<String>>),
    /// A non-tensor output (a number, a bool, or `None` for a masked-out gradient).
    NonTensor,
}

impl OutputSlot {
    /// The slots of a case's outputs: tensor names kept, every non-tensor value dropped.
    pub fn of(outputs: &[Value]) -> Vec<OutputSlot> {
        outputs
            .iter()
            .map(|v| match v {
                Value::Tensor(t) => OutputSlot::Tensor(t.clone()),
                Value::Tensors(ts) => OutputSlot::Tensors(ts.clone()),
                _ => OutputSlot::NonTensor,
            })
            .collect()
    }
}

/// What a lowering may look at: the call and tensor metadata, no tensor values, no golden
/// non-tensor outputs and no golden data-dependent shapes. Build it with [`LowerInput`].
#[derive(Clone, Copy, Debug)]
pub struct LowerRequest<'a> {
    pub op: &'a str,
    pub call: &'a OpCall,
    /// Dtype and shape of every tensor of the case, inputs and outputs, by name. A
    /// data-dependent output ([`data_dependent_output`]) has its upper bound as its shape (or no
    /// entry when no bound is known): the program writes a padded buffer of that shape and the
    /// row count to [`count_output_name`].
    pub tensors: &'a BTreeMap<String, TensorMeta>,
    /// The op's outputs: tensor names, or the mark of a non-tensor output.
    pub outputs: &'a [OutputSlot],
}

/// The owned data behind a [`LowerRequest`], made from a case with everything golden removed:
/// non-tensor output values and data-dependent output shapes.
#[derive(Clone, Debug)]
pub struct LowerInput {
    pub op: String,
    pub call: OpCall,
    pub tensors: BTreeMap<String, TensorMeta>,
    pub outputs: Vec<OutputSlot>,
}

impl LowerInput {
    /// The request for `op(call)` with every tensor's metadata (inputs and outputs, by name) and
    /// the op's outputs as recorded: non-tensor output values are dropped and a data-dependent
    /// output's shape is replaced by its bound from input metadata (or removed when none is known).
    pub fn new(op: &str, call: &OpCall, tensor_meta: &BTreeMap<String, TensorMeta>, outputs: &[Value]) -> LowerInput {
        let mut tensors = tensor_meta.clone();
        if let Some(out) = data_dependent_output(op, call, tensor_meta) {
            match data_dependent_bound(op, call, tensor_meta) {
                Some(bound) => {
                    if let Some(m) = tensors.get_mut(&out) {
                        *m = TensorMeta::contiguous(m.dtype, &bound);
                    }
                }
                None => {
                    tensors.remove(&out);
                }
            }
        }
        LowerInput {
            op: op.to_string(),
            call: call.clone(),
            tensors,
            outputs: OutputSlot::of(outputs),
        }
    }

    /// A hand-built request (tests, benchmarks): `op` with positional `args` and no keyword
    /// arguments, every tensor's metadata, and one tensor output named `output.0`.
    pub fn positional(op: &str, args: Vec<Value>, tensors: &BTreeMap<String, TensorMeta>) -> LowerInput {
        LowerInput {
            op: op.to_string(),
            call: OpCall {
                args,
                kwargs: BTreeMap::new(),
            },
            tensors: tensors.clone(),
            outputs: vec![OutputSlot::Tensor("output.0".into())],
        }
    }

    pub fn request(&self) -> LowerRequest<'_> {
        LowerRequest {
            op: &self.op,
            call: &self.call,
            tensors: &self.tensors,
            outputs: &self.outputs,
        }
    }
}

/// The output of a call whose shape depends on input *values* (`nonzero`, `index.Tensor` with a
/// boolean mask), if any. Its golden shape never reaches the lowering.
pub fn data_dependent_output(op: &str, call: &OpCall, tensors: &BTreeMap<String, TensorMeta>) -> Option<String> {
    let is_mask = |name: &str| {
        tensors
            .get(name)
            .is_some_and(|m| matches!(m.dtype, TorchDType::Bool | TorchDType::U8))
    };
    match op {
        "nonzero" => Some("output.0".into()),
        "index.Tensor" => match call.arg(1, "indices") {
            Some(Value::Tensors(ts)) if ts.iter().flatten().any(|t| is_mask(t)) => Some("output.0".into()),
            _ => None,
        },
        _ => None,
    }
}

/// The upper bound of a data-dependent output's shape, from input metadata alone: `nonzero` of
/// `x` has at most `numel(x)` rows of `ndim(x)` coordinates; `x[mask]` with one mask over the
/// leading `k` dims has at most `numel(mask)` rows of `x.shape[k..]`. `None` for call forms with
/// no known bound (not lowered).
pub fn data_dependent_bound(op: &str, call: &OpCall, tensors: &BTreeMap<String, TensorMeta>) -> Option<Vec<usize>> {
    let meta = |v: Option<&Value>| match v {
        Some(Value::Tensor(t)) => tensors.get(t),
        _ => None,
    };
    match op {
        "nonzero" => {
            let x = meta(call.arg(0, "self"))?;
            Some(vec![x.shape.iter().product(), x.shape.len()])
        }
        "index.Tensor" => {
            let x = meta(call.arg(0, "self"))?;
            let Some(Value::Tensors(ts)) = call.arg(1, "indices") else {
                return None;
            };
            let [Some(mask)] = ts.as_slice() else {
                return None;
            };
            let m = tensors.get(mask)?;
            let k = m.shape.len();
            if k > x.shape.len() {
                return None;
            }
            let mut bound = vec![m.shape.iter().product()];
            bound.extend_from_slice(&x.shape[k..]);
            Some(bound)
        }
        _ => None,
    }
}

/// The program output holding the row count of data-dependent output `name`: one int32 element.
pub fn count_output_name(name: &str) -> String {
    format!("{name}.count")
}

impl<'a> LowerRequest<'a> {
    /// Metadata of a named tensor.
    pub fn tensor(&self, name: &str) -> Result<&'a TensorMeta, LowerError> {
        self.tensors
            .get(name)
            .ok_or_else(|| self.invalid(format!("no metadata for tensor `{name}`")))
    }

    /// The name of output `i`, which must be a tensor.
    pub fn output_tensor(&self, i: usize) -> Result<&'a str, LowerError> {
        match self.outputs.get(i) {
            Some(OutputSlot::Tensor(name)) => Ok(name),
            other => Err(self.invalid(format!("output {i} is {other:?}, expected a tensor"))),
        }
    }

    pub fn invalid(&self, reason: String) -> LowerError {
        LowerError::Invalid {
            op: self.op.to_string(),
            reason,
        }
    }

    pub fn unsupported(&self, reason: String) -> LowerError {
        LowerError::Unsupported {
            op: self.op.to_string(),
            reason,
        }
    }
}

/// A lowered case.
#[derive(Clone, Debug)]
pub struct Lowered {
    pub program: Program,
    /// Non-tensor outputs known at lowering time from the arguments and metadata alone (the
    /// `sym_*` ops; the `None` of a gradient that `output_mask` turns off), by output position.
    pub values: BTreeMap<usize, Value>,
}

impl Lowered {
    pub fn new(program: Program) -> Self {
        Lowered {
            program,
            values: BTreeMap::new(),
        }
    }
}

/// Why a case could not be lowered.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LowerError {
    #[error("op `{0}` is not lowered")]
    NotLowered(String),
    /// The op is lowered, but not for this call (dtype, argument value, …).
    #[error("{op}: unsupported: {reason}")]
    Unsupported { op: String, reason: String },
    /// The call does not fit the op's schema (a malformed case or a lowering bug).
    #[error("{op}: invalid call: {reason}")]
    Invalid { op: String, reason: String },
    /// The program would not fit the machine.
    #[error("out of resources: {0}")]
    Resources(String),
    /// An int64 scalar argument outside int32: int64 tensors live on the device as int32 (the
    /// runner's narrowing), so the value cannot be written. The same refusal as the runner's for
    /// input tensors, never a saturated value.
    #[error("{op}: int64 value {value} does not fit in int32 (Trainium has no int64)")]
    Int64OutsideInt32 { op: String, value: i64 },
}

type LowerFn = fn(&LowerRequest<'_>, TargetName) -> Result<Lowered, LowerError>;

/// One entry of [`LOWERINGS`]: an op, its family and its lowering.
struct Lowering {
    /// The ATen op name (`add.Tensor`).
    op: &'static str,
    /// The op family, as the roofline and reports group ops. It is data here, independent of
    /// which source file holds the lowering, so code can move without regrouping the reports.
    family: &'static str,
    /// The lowering function.
    lower: LowerFn,
}

/// Builds a [`Lowering`] entry: `lowering!(op, family, path::to::lower)`.
macro_rules! lowering {
    ($op:literal, $family:literal, $f:path) => {
        Lowering {
            op: $op,
            family: $family,
            lower: $f as LowerFn,
        }
    };
    // A lowering that takes [`LowerOptions`]: the registry runs it with the defaults
    // ([`lower_request_with_options`] passes others).
    ($op:literal, $family:literal, with_options $f:path) => {{
        fn defaults(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
            $f(req, target, &LowerOptions::default())
        }
        lowering!($op, $family, defaults)
    }};
}

/// The one registry of lowered ops: every op, its family and its lowering function. Ops not
/// listed are not lowered.
const LOWERINGS: &[Lowering] = &[
    lowering!("add.Tensor", "binary", binary::lower),
    lowering!("add.Scalar", "binary", binary::lower),
    lowering!("sub.Tensor", "binary", binary::lower),
    lowering!("sub.Scalar", "binary", binary::lower),
    lowering!("mul.Tensor", "binary", binary::lower),
    lowering!("mul.Scalar", "binary", binary::lower),
    lowering!("div.Tensor", "binary", binary::lower),
    lowering!("div.Scalar", "binary", binary::lower),
    lowering!("abs", "unary", unary::lower),
    lowering!("acos", "unary", unary::lower),
    lowering!("acosh", "unary", unary::lower),
    lowering!("asin", "unary", unary::lower),
    lowering!("asinh", "unary", unary::lower),
    lowering!("atan", "unary", unary::lower),
    lowering!("atanh", "unary", unary::lower),
    lowering!("ceil", "unary", unary::lower),
    lowering!("cos", "unary", unary::lower),
    lowering!("cosh", "unary", unary::lower),
    lowering!("erf", "unary", unary::lower),
    lowering!("exp", "unary", unary::lower),
    lowering!("expm1", "unary", unary::lower),
    lowering!("floor", "unary", unary::lower),
    lowering!("log", "unary", unary::lower),
    lowering!("log10", "unary", unary::lower),
    lowering!("log1p", "unary", unary::lower),
    lowering!("log2", "unary", unary::lower),
    lowering!("neg", "unary", unary::lower),
    lowering!("reciprocal", "unary", unary::lower),
    lowering!("round", "unary", unary::lower),
    lowering!("rsqrt", "unary", unary::lower),
    lowering!("sign", "unary", unary::lower),
    lowering!("sin", "unary", unary::lower),
    lowering!("sinh", "unary", unary::lower),
    lowering!("sqrt", "unary", unary::lower),
    lowering!("tan", "unary", unary::lower),
    lowering!("tanh", "unary", unary::lower),
    lowering!("trunc", "unary", unary::lower),
    lowering!("bitwise_not", "unary", unary::lower),
    lowering!("logical_not", "unary", unary::lower),
    lowering!("isnan", "unary", unary::lower),
    lowering!("isinf", "unary", unary::lower),
    lowering!("relu", "activation", activation::lower),
    lowering!("gelu", "activation", activation::lower),
    lowering!("sigmoid", "activation", activation::lower),
    lowering!("hardtanh", "activation", activation::lower),
    lowering!("leaky_relu", "activation", activation::lower),
    lowering!("elu", "activation", activation::lower),
    lowering!("eq.Scalar", "comparison", comparison::lower),
    lowering!("eq.Tensor", "comparison", comparison::lower),
    lowering!("ne.Scalar", "comparison", comparison::lower),
    lowering!("ne.Tensor", "comparison", comparison::lower),
    lowering!("ge.Scalar", "comparison", comparison::lower),
    lowering!("ge.Tensor", "comparison", comparison::lower),
    lowering!("gt.Scalar", "comparison", comparison::lower),
    lowering!("gt.Tensor", "comparison", comparison::lower),
    lowering!("le.Scalar", "comparison", comparison::lower),
    lowering!("le.Tensor", "comparison", comparison::lower),
    lowering!("lt.Scalar", "comparison", comparison::lower),
    lowering!("lt.Tensor", "comparison", comparison::lower),
    lowering!("maximum", "binary_ext", binary_ext::lower),
    lowering!("minimum", "binary_ext", binary_ext::lower),
    lowering!("bitwise_and.Scalar", "binary_ext", binary_ext::lower),
    lowering!("bitwise_and.Tensor", "binary_ext", binary_ext::lower),
    lowering!("bitwise_or.Scalar", "binary_ext", binary_ext::lower),
    lowering!("bitwise_or.Tensor", "binary_ext", binary_ext::lower),
    lowering!("bitwise_xor.Scalar", "binary_ext", binary_ext::lower),
    lowering!("bitwise_xor.Tensor", "binary_ext", binary_ext::lower),
    lowering!("logical_and", "binary_ext", binary_ext::lower),
    lowering!("logical_or", "binary_ext", binary_ext::lower),
    lowering!("logical_xor", "binary_ext", binary_ext::lower),
    lowering!("clamp", "binary_ext", binary_ext::lower),
    lowering!("clamp.Tensor", "binary_ext", binary_ext::lower),
    lowering!("where.self", "binary_ext", binary_ext::lower),
    lowering!("pow.Tensor_Tensor", "binary_ext", binary_ext::lower),
    lowering!("pow.Scalar", "binary_ext", binary_ext::lower),
    lowering!("pow.Tensor_Scalar", "binary_ext", binary_ext::lower),
    lowering!("div.Tensor_mode", "binary_ext", binary_ext::lower),
    lowering!("div.Scalar_mode", "binary_ext", binary_ext::lower),
    lowering!("fmod.Scalar", "binary_ext", binary_ext::lower),
    lowering!("fmod.Tensor", "binary_ext", binary_ext::lower),
    lowering!("remainder.Scalar", "binary_ext", binary_ext::lower),
    lowering!("remainder.Tensor", "binary_ext", binary_ext::lower),
    lowering!("atan2", "binary_ext", binary_ext::lower),
    lowering!("atan2.out", "binary_ext", binary_ext::lower),
    lowering!("sum.dim_IntList", "reduction", reduction::lower),
    lowering!("mean", "reduction", reduction::lower),
    lowering!("mean.dim", "reduction", reduction::lower),
    lowering!("prod", "reduction", reduction::lower),
    lowering!("prod.dim_int", "reduction", reduction::lower),
    lowering!("amax", "reduction", reduction::lower),
    lowering!("amin", "reduction", reduction::lower),
    lowering!("any", "reduction", reduction::lower),
    lowering!("any.dim", "reduction", reduction::lower),
    lowering!("any.dims", "reduction", reduction::lower),
    lowering!("var.correction", "reduction", reduction::lower),
    lowering!("var.dim", "reduction", reduction::lower),
    lowering!("argmax", "reduction", reduction::lower),
    lowering!("argmin", "reduction", reduction::lower),
    lowering!("max.dim", "reduction", reduction::lower),
    lowering!("min.dim", "reduction", reduction::lower),
    lowering!("cumsum", "reduction", reduction::lower),
    lowering!("_softmax", "norm", norm::lower),
    lowering!("_log_softmax", "norm", norm::lower),
    lowering!("native_layer_norm", "norm", norm::lower),
    lowering!("native_layer_norm_backward", "norm", norm::lower),
    lowering!("native_group_norm", "norm", norm::lower),
    lowering!("native_group_norm_backward", "norm", norm::lower),
    lowering!("_native_batch_norm_legit", "norm", norm::lower),
    lowering!("_native_batch_norm_legit.no_stats", "norm", norm::lower),
    lowering!("_native_batch_norm_legit_no_training", "norm", norm::lower),
    lowering!("mm", "matmul", with_options matmul::lower_with),
    lowering!("bmm", "matmul", with_options matmul::lower_with),
    lowering!("addmm", "matmul", with_options matmul::lower_with),
    lowering!("convolution", "conv", with_options conv::lower_with),
    lowering!("convolution_backward", "conv_backward", with_options conv_backward::lower_with),
    lowering!("_cdist_forward", "distance", distance::lower_cdist),
    lowering!("_pdist_forward", "distance", distance::lower_pdist),
    lowering!("_fft_r2c", "fft", fft::lower),
    lowering!("_fft_c2r", "fft", fft::lower),
    lowering!("full", "creation", creation::lower),
    lowering!("full_like", "creation", creation::lower),
    lowering!("fill.Scalar", "creation", creation::lower),
    lowering!("scalar_tensor", "creation", creation::lower),
    lowering!("empty.memory_format", "creation", creation::lower),
    lowering!("empty_strided", "creation", creation::lower),
    lowering!("arange.start_step", "creation", creation::lower),
    lowering!("_to_copy", "creation", creation::lower),
    lowering!("clone", "creation", creation::lower),
    lowering!("_local_scalar_dense", "creation", creation::lower_local_scalar_dense),
    lowering!("copy", "creation", creation::lower),
    lowering!("resize_", "creation", creation::lower),
    lowering!("rand", "creation", creation::lower),
    lowering!("randn", "creation", creation::lower),
    lowering!("randperm", "creation", creation::lower),
    lowering!("native_dropout", "creation", creation::lower),
    lowering!("alias", "shape", shape::lower),
    lowering!("as_strided", "shape", shape::lower),
    lowering!("view", "shape", shape::lower),
    lowering!("permute", "shape", shape::lower),
    lowering!("expand", "shape", shape::lower),
    lowering!("squeeze.dim", "shape", shape::lower),
    lowering!("squeeze.dims", "shape", shape::lower),
    lowering!("unsqueeze", "shape", shape::lower),
    lowering!("select.int", "shape", shape::lower),
    lowering!("slice.Tensor", "shape", shape::lower),
    lowering!("diagonal", "shape", shape::lower),
    lowering!("split_with_sizes", "shape", shape::lower),
    lowering!("cat", "shape", shape::lower),
    lowering!("flip", "shape", shape::lower),
    lowering!("repeat", "shape", shape::lower),
    lowering!("sym_size.int", "metadata", metadata::lower),
    lowering!("sym_stride.int", "metadata", metadata::lower),
    lowering!("sym_numel", "metadata", metadata::lower),
    lowering!("sym_storage_offset", "metadata", metadata::lower),
    lowering!("sym_is_contiguous", "metadata", metadata::lower),
    lowering!("constant_pad_nd", "pad", pad::lower),
    lowering!("reflection_pad1d", "pad", pad::lower),
    lowering!("reflection_pad2d", "pad", pad::lower),
    lowering!("reflection_pad3d", "pad", pad::lower),
    lowering!("replication_pad2d", "pad", pad::lower),
    lowering!("replication_pad3d", "pad", pad::lower),
    lowering!("upsample_nearest2d.vec", "pad", pad::lower_upsample_nearest),
    lowering!("upsample_bilinear2d.vec", "pad", pad::lower_upsample_bilinear),
    lowering!("col2im", "pad", pad::lower_col2im),
    lowering!("grid_sampler_2d", "grid_sample", grid_sample::lower),
    lowering!("avg_pool1d", "pooling", pooling::lower),
    lowering!("avg_pool2d", "pooling", pooling::lower),
    lowering!("avg_pool3d", "pooling", pooling::lower),
    lowering!("adaptive_avg_pool1d", "pooling", pooling::lower),
    lowering!("_adaptive_avg_pool2d", "pooling", pooling::lower),
    lowering!("_adaptive_avg_pool3d", "pooling", pooling::lower),
    lowering!("max_pool2d_with_indices", "pooling", pooling::lower_max),
    lowering!("max_pool3d_with_indices", "pooling", pooling::lower_max),
    lowering!(
        "max_pool2d_with_indices_backward",
        "pooling",
        pooling::lower_max_backward
    ),
    lowering!("avg_pool2d_backward", "pooling", pooling::lower_avg_backward),
    lowering!("_adaptive_avg_pool2d_backward", "pooling", pooling::lower_avg_backward),
    lowering!("index_select", "indexing", indexing::lower),
    lowering!("embedding", "indexing", indexing::lower),
    lowering!("gather", "indexing", indexing::lower),
    lowering!("index.Tensor", "indexing", indexing::lower),
    lowering!("scatter_add", "indexing", indexing::lower),
    lowering!("scatter.src", "indexing", indexing::lower),
    lowering!("scatter.value", "indexing", indexing::lower),
    lowering!("select_scatter", "indexing", indexing::lower),
    lowering!("slice_scatter", "indexing", indexing::lower),
    lowering!("index_put", "indexing", indexing::lower),
    lowering!("scatter_reduce.two", "indexing", indexing::lower),
    lowering!("embedding_dense_backward", "indexing", indexing::lower),
    lowering!("masked_scatter", "indexing", indexing::lower),
    lowering!("_embedding_bag", "embedding_bag", embedding_bag::lower),
    lowering!("topk", "sort", sort::lower),
    lowering!("sort", "sort", sort::lower),
    lowering!("nonzero", "sort", sort::lower),
];

/// Whether `op` has a lowering.
pub fn is_lowered(op: &str) -> bool {
    LOWERINGS.iter().any(|l| l.op == op)
}

/// Names of the lowered ops.
pub fn lowered_ops() -> Vec<&'static str> {
    LOWERINGS.iter().map(|l| l.op).collect()
}

/// The family of a lowered op (the registry's data), if lowered.
pub fn family_of(op: &str) -> Option<&'static str> {
    LOWERINGS.iter().find(|l| l.op == op).map(|l| l.family)
}

/// Every op family, in registry order (each once).
pub fn families() -> Vec<&'static str> {
    let mut families: Vec<&'static str> = Vec::new();
    for l in LOWERINGS {
        if !families.contains(&l.family) {
            families.push(l.family);
        }
    }
    families
}

/// Lowers `op(call)` for `target` from metadata alone: the one entry point of the lowering.
/// `tensor_meta` names every tensor of the call (inputs and outputs), `outputs` the op's returns
/// (tensor names; non-tensor values are ignored). See [`LowerInput::new`].
pub fn lower_call(
    op: &str,
    call: &OpCall,
    tensor_meta: &BTreeMap<String, TensorMeta>,
    outputs: &[Value],
    target: TargetName,
) -> Result<Lowered, LowerError> {
    lower_request(&LowerInput::new(op, call, tensor_meta, outputs).request(), target)
}

/// Lowers a request for `target`.
pub fn lower_request(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    match LOWERINGS.iter().find(|l| l.op == req.op) {
        Some(l) => (l.lower)(req, target).map(schedule),
        None => Err(LowerError::NotLowered(req.op.to_string())),
    }
}

/// The backend's scheduling pass, the last step of every lowering: spreads the DMA transfers the
/// lowering left unassigned over the target's DMA queues (round robin in program order), then
/// computes every instruction's waits from its memory accesses (`trnsim::infer_waits`: the latest
/// conflicting instruction on each other queue). The engines and queues may then run in parallel,
/// and the simulator's race detector checks that nothing was missed (docs/timeline.md).
pub fn schedule(mut lowered: Lowered) -> Lowered {
    spread_dmas(&mut lowered.program);
    trnsim::infer_waits(&mut lowered.program);
    lowered
}

/// The DMA half of [`schedule`], for any program (the NKI front-end's traces too): every large
/// DMA without a queue is cut into pieces ([`split_large_dmas`]), then each DMA without a queue
/// goes to the next queue of its core, round robin in program order. Waits are left to
/// `infer_waits`, which must run afterwards.
pub fn spread_dmas(program: &mut Program) {
    let queues = program.target.params().dma_queues.clamp(1, u16::MAX as usize) as u16;
    split_large_dmas(program, queues as usize);
    let mut next = [0u16; 256];
    for inst in program.instructions.iter_mut() {
        if inst.engine == trnsim::Engine::Dma && inst.queue.is_none() {
            let q = &mut next[inst.core as usize];
            inst.queue = Some(*q);
            *q = (*q + 1) % queues;
        }
    }
}

/// Smallest piece a large DMA is cut into: transfers of 32 KiB and more reach full bandwidth
/// on Trn1 (NKI performance guide, Opt #9; `neuroncore-costs.md` §9.4).
const DMA_SPLIT_BYTES: usize = 32 * 1024;

/// Cuts every large unassigned DMA into up to `queues` pieces by partition (row) ranges, each
/// at least [`DMA_SPLIT_BYTES`], so that the pieces run on different DMA queues at once — one
/// DMA instruction is one transfer on one engine, and a `[128 × 4000]` fp32 tile load on one
/// queue took 121 µs where 16 queues take 9 µs (docs/performance.md, "Roofline"). Only plain
/// copies between two memories whose two sides have the same rows × elements per row are cut
/// (the element order is partition-major on both sides, so row ranges correspond); a copy
/// within one memory (one SBUF, one PSUM, one HBM tensor) may read bytes it writes and stays
/// one transfer, and indirect DMAs and DMAs a lowering put on a queue itself are left alone. Waits are recomputed afterwards (`infer_waits`), so
/// overlapping pieces stay ordered as in program order.
fn split_large_dmas(program: &mut Program, queues: usize) {
    use trnsim::{AccessPattern, Engine, Op};
    let needs = program.instructions.iter().any(|i| {
        i.engine == Engine::Dma
            && i.queue.is_none()
            && matches!(&i.op, Op::DmaCopy(d) if d.indirect.is_none()
                && d.dst.num_elems() * d.dst.dtype.size() >= 2 * DMA_SPLIT_BYTES)
    });
    if !needs {
        return;
    }
    // Rows `p0..p0 + n` of an access pattern; `None` when an HBM row would start before the
    // tensor (a negative row step past its start).
    fn rows(ap: &AccessPattern, p0: usize, n: usize) -> Option<AccessPattern> {
        let mut sub = ap.clone();
        sub.partitions = n;
        if ap.mem.is_on_chip() {
            sub.start_partition = ap.start_partition + p0;
        } else {
            let delta = p0 as i64 * ap.partition_step * ap.dtype.size() as i64;
            sub.offset = u64::try_from(ap.offset as i64 + delta).ok()?;
        }
        Some(sub)
    }
    let old = std::mem::take(&mut program.instructions);
    for inst in old {
        let pieces = match (&inst.op, inst.engine, inst.queue) {
            (Op::DmaCopy(d), Engine::Dma, None)
                if d.indirect.is_none()
                    && d.src.mem != d.dst.mem
                    && d.src.partitions == d.dst.partitions
                    && d.src.free_elems() == d.dst.free_elems() =>
            {
                let bytes = d.dst.num_elems() * d.dst.dtype.size();
                let k = (bytes / DMA_SPLIT_BYTES).min(queues).min(d.dst.partitions);
                if k < 2 {
                    None
                } else {
                    let p = d.dst.partitions;
                    let cut: Option<Vec<_>> = (0..k)
                        .map(|j| {
                            let (p0, p1) = (p * j / k, p * (j + 1) / k);
                            let mut piece = d.clone();
                            piece.src = rows(&d.src, p0, p1 - p0)?;
                            piece.dst = rows(&d.dst, p0, p1 - p0)?;
                            Some(piece)
                        })
                        .collect();
                    cut
                }
            }
            _ => None,
        };
        match pieces {
            Some(pieces) => {
                for piece in pieces {
                    let mut i = inst.clone();
                    i.op = Op::DmaCopy(piece);
                    program.instructions.push(i);
                }
            }
            None => program.instructions.push(inst),
        }
    }
}

pub use matmul::{AutoCast, LowerOptions};

/// Lowers a request with explicit [`LowerOptions`] (compiler flags such as `--auto-cast`). The
/// TensorE families (matmul, convolution) read `auto_cast`; `native_int64` routes the ops of
/// [`int64`] to their native int64 lowering (on a target without the capability, a refusal
/// naming the generation); every other op lowers as [`lower_request`] does.
pub fn lower_request_with_options(
    req: &LowerRequest<'_>,
    target: TargetName,
    opts: &LowerOptions,
) -> Result<Lowered, LowerError> {
    if opts.native_int64 {
        let t = target.params();
        if !t.native_int64 {
            return Err(req.unsupported(format!(
                "native int64 (--native-int64) needs a core with 64-bit integers; {} has none",
                t.label
            )));
        }
        if let Some(lowered) = int64::lower(req, target) {
            return lowered.map(schedule);
        }
    }
    match req.op {
        "mm" | "bmm" | "addmm" => matmul::lower_with(req, target, opts).map(schedule),
        "convolution" => conv::lower_with(req, target, opts).map(schedule),
        "convolution_backward" => conv_backward::lower_with(req, target, opts).map(schedule),
        _ => lower_request(req, target),
    }
}

/// The device dtype a case tensor of `dtype` is declared as: its own dtype, or int32 for int64
/// (the one boundary conversion). `None` for complex, which has no device dtype of its own: a
/// lowering that handles complex declares the real view instead ([`complex_real_view`]).
pub fn device_dtype(dtype: TorchDType) -> Option<DType> {
    match dtype {
        TorchDType::I64 => Some(DType::I32),
        other => other.device_dtype(),
    }
}

/// The shape of a complex tensor's real view: the complex shape plus a trailing axis of 2
/// (real, imaginary), as the golden format stores it.
pub fn complex_real_view_shape(complex_shape: &[usize]) -> Vec<usize> {
    let mut shape = complex_shape.to_vec();
    shape.push(2);
    shape
}

/// How a c64 case tensor is declared on the device: `F32` with shape `shape + [2]` (its real
/// view, no conversion). `None` when `meta` is not complex.
pub fn complex_real_view(meta: &TensorMeta) -> Option<(DType, Vec<usize>)> {
    meta.dtype
        .is_complex()
        .then(|| (DType::F32, complex_real_view_shape(&meta.shape)))
}

/// Zeroes the padded buffer of a data-dependent output (`n` elements of 4-byte `dtype`) with
/// DMAs from a VectorE-zeroed SBUF tile `zero` of `parts × width` elements, so that every element
/// of the declared buffer is written: the rows past the device's count hold zeros and are trimmed
/// by the runner. Same DMA queue as the scatters that follow, so they land after the zeros.
pub(crate) fn zero_fill_hbm(
    e: &mut tile::Emitter,
    zero: tile::Slot,
    parts: usize,
    width: usize,
    name: &str,
    dtype: DType,
    n: usize,
) {
    use trnsim::{AccessPattern, DmaCopy, Engine, Op};
    e.memset(
        Engine::Vector,
        AccessPattern::sbuf(dtype, 0, parts, zero.offset, vec![[1, width as i64]]),
        0.0,
    );
    let mut done = 0;
    while done < n {
        let rest = n - done;
        let (rows, cols) = if rest >= width {
            ((rest / width).min(parts), width)
        } else {
            (1, rest)
        };
        e.push(
            Engine::Dma,
            Op::DmaCopy(DmaCopy {
                dst: AccessPattern::hbm(name, dtype, done as u64, rows, cols as i64, vec![[1, cols as i64]]),
                src: AccessPattern::sbuf(dtype, 0, rows, zero.offset, vec![[1, cols as i64]]),
                accumulate: false,
                indirect: None,
            }),
        );
        done += rows * cols;
    }
}
