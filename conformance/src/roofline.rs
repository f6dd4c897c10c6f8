//! Roofline: a lower bound on the device time of one ATen call on a target, and the efficiency of
//! a lowering against it (bound / estimated device time).
//!
//! The bound is derived from the call alone — op, arguments, tensor shapes and dtypes — and the
//! target's published rates (`trnsim::Target`), never from the program a lowering emitted: a
//! wasteful lowering must not make its own bound easier. It is the maximum of four terms, each a
//! time no correct program can beat on the target:
//!
//! * **latency**: the DMA fixed cost (`dma_fixed_ns`) of the dependent transfers every program
//!   needs: one for a call whose output DMA alone can produce (a view, a copy, a gather), plus an
//!   engine instruction for one whose values an engine must generate (`full`, `rand`), two
//!   (load, then store) for one that computes on its inputs — an engine cannot read HBM and a DMA
//!   cannot read PSUM;
//! * **HBM**: the bytes that must cross HBM (inputs read once, outputs written once; only the
//!   part of an input the result depends on) at `hbm_bytes_per_ns`;
//! * **TensorE**: the multiply-accumulates of a contraction (matmul, convolution without its
//!   padding taps, distances with p = 2, an FFT's butterflies) at the full 128 × 128 PE array per
//!   PE cycle, a quarter of that when an operand is fp32;
//! * **streaming**: the elements an engine must touch (each required input or output element
//!   once; `n log₂ n` for `sort`) at the summed peak rate of all four engines (VectorE at its
//!   two-per-cycle bf16 rate), so no split of the work over engines can beat it.
//!
//! [`efficiency`] refuses an estimate below its bound: that is a cost-model bug (the simulator
//! claimed the work takes less time than the hardware's peak rates allow), and the runner turns
//! it into an error for the case. docs/performance.md ("Roofline") has the sources and the table.

use crate::case::{OpCall, TensorMeta, Value};
use crate::tensor::TorchDType;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use trnsim::Target;

/// The op family of a lowered op, from the lowering registry itself (one list of ops, not a
/// second copy here).
pub fn family_of(op: &str) -> Option<&'static str> {
    crate::lower::family_of(op)
}

/// Every family name, in the lowering registry's order.
pub fn families() -> impl Iterator<Item = &'static str> {
    crate::lower::families().into_iter()
}

/// What the hardware must do at the least to produce the call's outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// No tensor output to produce (metadata queries, `empty`: undefined values).
    NoWork,
    /// Outputs are input elements rearranged, cast or gathered: DMA can do it alone (views,
    /// copies, pads, gathers/scatters — a DMA can also accumulate).
    Move,
    /// Output values an engine must generate without reading inputs (`full`, `arange`, `rand`).
    Generate,
    /// Output values computed from input values on an engine: load, compute, store.
    Compute,
}

/// Which term decides a bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limiter {
    Latency,
    Hbm,
    Tensor,
    Stream,
}

impl Limiter {
    pub fn name(self) -> &'static str {
        match self {
            Limiter::Latency => "latency",
            Limiter::Hbm => "hbm",
            Limiter::Tensor => "tensor",
            Limiter::Stream => "stream",
        }
    }
}

/// A call's lower bound, with the work it was derived from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bound {
    pub kind: Kind,
    /// Bytes that must cross HBM: required input bytes read once plus output bytes written once.
    pub hbm_bytes: u64,
    /// Multiply-accumulates a contraction needs (0 for other ops).
    pub tensor_macs: u64,
    /// Whether the contraction runs at TensorE's fp32 rate.
    pub tensor_fp32: bool,
    /// Elements an engine must touch.
    pub stream_elems: u64,
    pub latency_ns: f64,
    pub hbm_ns: f64,
    pub tensor_ns: f64,
    pub stream_ns: f64,
}

impl Bound {
    /// The bound in ns: the largest term.
    pub fn ns(&self) -> f64 {
        self.latency_ns.max(self.hbm_ns).max(self.tensor_ns).max(self.stream_ns)
    }

    /// The term that decides the bound.
    pub fn limiter(&self) -> Limiter {
        let terms = [
            (Limiter::Latency, self.latency_ns),
            (Limiter::Hbm, self.hbm_ns),
            (Limiter::Tensor, self.tensor_ns),
            (Limiter::Stream, self.stream_ns),
        ];
        terms
            .into_iter()
            .fold((Limiter::Latency, f64::NEG_INFINITY), |best, t| {
                if t.1 > best.1 { t } else { best }
            })
            .0
    }
}

/// Bytes of one element on the device: int64 lives as int32 (the runner's narrowing), complex64
/// as two fp32.
fn device_elem_bytes(d: TorchDType) -> u64 {
    match d {
        TorchDType::I64 => 4,
        other => other.size() as u64,
    }
}

/// Scalars per element (complex: 2), the unit engines stream.
fn scalars(d: TorchDType) -> u64 {
    if d.is_complex() { 2 } else { 1 }
}

fn numel(m: &TensorMeta) -> u64 {
    m.shape.iter().map(|&d| d as u64).product()
}

/// A tensor's (bytes, scalars) on the device.
fn size_of(m: &TensorMeta) -> (u64, u64) {
    let n = numel(m);
    (n * device_elem_bytes(m.dtype), n * scalars(m.dtype))
}

fn kind_of(op: &str) -> Kind {
    match family_of(op) {
        Some("metadata") => Kind::NoWork,
        Some("shape" | "indexing" | "embedding_bag") => Kind::Move,
        _ => match op {
            "empty.memory_format" | "empty_strided" => Kind::NoWork,
            "_to_copy" | "clone" | "copy" | "resize_" | "_local_scalar_dense" => Kind::Move,
            "constant_pad_nd"
            | "reflection_pad1d"
            | "reflection_pad2d"
            | "reflection_pad3d"
            | "replication_pad2d"
            | "replication_pad3d"
            | "upsample_nearest2d.vec" => Kind::Move,
            "full" | "full_like" | "fill.Scalar" | "scalar_tensor" | "arange.start_step" | "rand" | "randn"
            | "randperm" => Kind::Generate,
            _ => Kind::Compute,
        },
    }
}

/// Tensor names of positional argument `pos`.
fn arg_tensors(call: &OpCall, pos: usize) -> Vec<&str> {
    call.args.get(pos).map(|v| v.tensor_names()).unwrap_or_default()
}

fn arg_ints(call: &OpCall, pos: usize) -> Option<Vec<i64>> {
    match call.args.get(pos)? {
        Value::Ints(v) => Some(v.clone()),
        Value::Int(i) => Some(vec![*i]),
        _ => None,
    }
}

fn arg_float(call: &OpCall, pos: usize, name: &str) -> Option<f64> {
    match call.arg(pos, name)? {
        Value::Float(f) => Some(f.0),
        Value::Int(i) => Some(*i as f64),
        _ => None,
    }
}

/// (bytes, scalars) of the inputs the outputs depend on, read once.
fn required_inputs(op: &str, call: &OpCall, tensors: &BTreeMap<String, TensorMeta>, out_scalars: u64) -> (u64, u64) {
    let meta = |n: &str| tensors.get(n);
    let sum = |names: &[&str]| -> (u64, u64) {
        names
            .iter()
            .filter_map(|n| meta(n))
            .map(size_of)
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    let args = |positions: &[usize]| -> Vec<&str> { positions.iter().flat_map(|&p| arg_tensors(call, p)).collect() };
    // The first argument is read only where the output takes it: at most as many elements as
    // the output has (each output element is at most one distinct input element), plus every
    // other input in full.
    let capped_first = || -> (u64, u64) {
        let first = args(&[0]);
        let (b, s) = sum(&first);
        let kept = s.min(out_scalars);
        let bytes = (b * kept).checked_div(s).unwrap_or(0);
        let rest: Vec<&str> = tensors
            .keys()
            .map(|k| k.as_str())
            .filter(|k| !k.starts_with("output.") && !first.contains(k))
            .collect();
        let (rb, rs) = sum(&rest);
        (bytes + rb, kept + rs)
    };
    match op {
        // Gathers read the gathered rows only where an index points (duplicates may share a
        // read): only the indices (and what is summed) must be read in full.
        "index_select" | "gather" => sum(&args(&[2])),
        "embedding" | "index.Tensor" | "index_put" | "select_scatter" | "slice_scatter" | "masked_scatter" => {
            sum(&args(&[1]))
        }
        "scatter_add" | "scatter_reduce.two" => sum(&args(&[2, 3])),
        "scatter.src" | "scatter.value" => sum(&args(&[2])),
        "embedding_dense_backward" => sum(&args(&[0, 1])),
        "_embedding_bag" => sum(&args(&[1, 2])),
        // Aliasing views may repeat elements; values are not needed at all for these.
        "as_strided" | "full_like" | "fill.Scalar" => (0, 0),
        // `copy(self, src)`: the result is `src` broadcast into self's shape.
        "copy" => sum(&args(&[1])),
        "slice.Tensor"
        | "select.int"
        | "diagonal"
        | "resize_"
        | "constant_pad_nd"
        | "reflection_pad1d"
        | "reflection_pad2d"
        | "reflection_pad3d"
        | "replication_pad2d"
        | "replication_pad3d"
        | "upsample_nearest2d.vec"
        | "upsample_bilinear2d.vec"
        | "grid_sampler_2d"
        | "avg_pool1d"
        | "avg_pool2d"
        | "avg_pool3d"
        | "adaptive_avg_pool1d"
        | "_adaptive_avg_pool2d"
        | "_adaptive_avg_pool3d"
        | "max_pool2d_with_indices"
        | "max_pool3d_with_indices" => capped_first(),
        // Pooling backward: the forward input (`self`) is only metadata.
        "max_pool2d_with_indices_backward" => {
            let mut names = args(&[0]);
            names.extend(
                tensors
                    .keys()
                    .map(|k| k.as_str())
                    .filter(|k| !k.starts_with("output.") && !arg_tensors(call, 0).contains(k))
                    .filter(|k| !arg_tensors(call, 1).contains(k)),
            );
            sum(&names)
        }
        "avg_pool2d_backward" | "_adaptive_avg_pool2d_backward" => sum(&args(&[0])),
        "convolution_backward" => {
            let mask = match call.args.get(10) {
                Some(Value::Bools(m)) => m.clone(),
                _ => vec![true, true, true],
            };
            let mut names = args(&[0]);
            if mask.get(1).copied().unwrap_or(true) {
                names.extend(args(&[1]));
            }
            if mask.first().copied().unwrap_or(true) {
                names.extend(args(&[2]));
            }
            sum(&names)
        }
        _ => {
            let names: Vec<&str> = tensors
                .keys()
                .map(|k| k.as_str())
                .filter(|k| !k.starts_with("output."))
                .collect();
            sum(&names)
        }
    }
}

/// Pairs (output position, kernel tap) along one spatial axis whose input index
/// `o·stride − pad + tap·dilation` is inside the input: padding taps multiply zeros and need no
/// PE work. For a transposed convolution the roles swap (input position, tap → output index), so
/// the caller passes the input as `from` and the output as `to`.
fn valid_taps(from: usize, to: usize, k: usize, stride: i64, pad: i64, dil: i64) -> u64 {
    let mut n = 0u64;
    for o in 0..from as i64 {
        for t in 0..k as i64 {
            let i = o * stride - pad + t * dil;
            if i >= 0 && i < to as i64 {
                n += 1;
            }
        }
    }
    n
}

/// Multiply-accumulates of a convolution whose forward input, weight and output have these
/// shapes, without padding taps.
fn conv_macs(input: &[usize], weight: &[usize], output: &[usize], call: &OpCall, first: usize) -> u64 {
    let spatial = weight.len().saturating_sub(2);
    if spatial == 0 || input.len() < spatial + 1 || output.len() < spatial + 1 {
        return 0;
    }
    let transposed = matches!(call.args.get(first + 3), Some(Value::Bool(true)));
    let list = |pos: usize, default: i64| -> Vec<i64> { arg_ints(call, pos).unwrap_or_else(|| vec![default]) };
    let (stride, pad, dil) = (list(first, 1), list(first + 1, 0), list(first + 2, 1));
    let at = |v: &Vec<i64>, i: usize| *v.get(i).or(v.first()).unwrap_or(&0);
    let batch = if input.len() == spatial + 2 { input[0] as u64 } else { 1 };
    let ins = &input[input.len() - spatial..];
    let outs = &output[output.len() - spatial..];
    let mut taps = 1u64;
    for d in 0..spatial {
        let k = weight[2 + d];
        let (from, to) = if transposed {
            (ins[d], outs[d])
        } else {
            (outs[d], ins[d])
        };
        taps *= valid_taps(from, to, k, at(&stride, d), at(&pad, d), at(&dil, d));
    }
    batch * weight[0] as u64 * weight[1] as u64 * taps
}

/// Whether a contraction over operands of these dtypes runs at TensorE's fp32 rate: anything but
/// 16- and 8-bit floats.
fn fp32_rate(dtypes: &[TorchDType]) -> bool {
    !dtypes.iter().all(|d| {
        matches!(
            d,
            TorchDType::Bf16 | TorchDType::F16 | TorchDType::F8E4m3fn | TorchDType::F8E5m2
        )
    })
}

/// (MACs, fp32 rate) of the call's contraction, and extra streaming scalars for distances that
/// TensorE cannot do (p ≠ 2).
fn contraction(op: &str, call: &OpCall, tensors: &BTreeMap<String, TensorMeta>) -> (u64, bool, u64) {
    let m = |pos: usize| arg_tensors(call, pos).first().and_then(|n| tensors.get(*n));
    let out = tensors.get("output.0");
    let dt = |ms: &[Option<&TensorMeta>]| -> Vec<TorchDType> { ms.iter().flatten().map(|m| m.dtype).collect() };
    match op {
        "mm" | "bmm" | "addmm" => {
            let (a, b) = if op == "addmm" { (m(1), m(2)) } else { (m(0), m(1)) };
            let (Some(a), Some(b)) = (a, b) else {
                return (0, true, 0);
            };
            // [.., M, K] × [.., K, N]: the output has batch·M·N elements, each K MACs.
            let k = a.shape.last().copied().unwrap_or(0) as u64;
            let macs = out.map(numel).unwrap_or(0) * k;
            (macs, fp32_rate(&dt(&[Some(a), Some(b)])), 0)
        }
        "convolution" => {
            let (Some(x), Some(w), Some(o)) = (m(0), m(1), out) else {
                return (0, true, 0);
            };
            (
                conv_macs(&x.shape, &w.shape, &o.shape, call, 3),
                fp32_rate(&dt(&[Some(x), Some(w)])),
                0,
            )
        }
        "convolution_backward" => {
            let (Some(g), Some(x), Some(w)) = (m(0), m(1), m(2)) else {
                return (0, true, 0);
            };
            let mask = match call.args.get(10) {
                Some(Value::Bools(b)) => b.clone(),
                _ => vec![true, true, true],
            };
            let passes = mask.iter().take(2).filter(|&&b| b).count() as u64;
            let macs = passes * conv_macs(&x.shape, &w.shape, &g.shape, call, 4);
            (macs, fp32_rate(&dt(&[Some(g), Some(x), Some(w)])), 0)
        }
        "_cdist_forward" | "_pdist_forward" => {
            let (Some(x), Some(o)) = (m(0), out) else {
                return (0, true, 0);
            };
            let feat = x.shape.last().copied().unwrap_or(0) as u64;
            let work = numel(o) * feat;
            let p = arg_float(call, if op == "_cdist_forward" { 2 } else { 1 }, "p").unwrap_or(2.0);
            // cdist's compute_mode 2 (`donot_use_mm_for_euclid_dist`) asks for the difference form.
            let no_mm = op == "_cdist_forward" && call.arg(3, "compute_mode").and_then(|v| v.as_int()) == Some(2);
            if p == 2.0 && !no_mm {
                (work, fp32_rate(&dt(&[Some(x)])), 0)
            } else {
                (0, true, work)
            }
        }
        "_fft_r2c" | "_fft_c2r" => {
            // A radix-2 FFT of n points does n/2·log₂n butterflies; count one MAC per point and
            // stage (below every real FFT's flop count), on the real side's signal lengths.
            let real = if op == "_fft_r2c" { m(0) } else { out };
            let Some(real) = real else { return (0, true, 0) };
            let dims = arg_ints(call, 1).unwrap_or_default();
            let nd = real.shape.len() as i64;
            let stages: f64 = dims
                .iter()
                .filter_map(|&d| real.shape.get(if d < 0 { (d + nd).max(0) } else { d } as usize))
                .map(|&n| (n.max(1) as f64).log2())
                .sum();
            ((numel(real) as f64 * stages / 2.0) as u64, true, 0)
        }
        _ => (0, true, 0),
    }
}

/// Extra streaming factor for sorting: a comparison sort of n keys needs at least log₂ n
/// comparisons per key.
fn sort_factor(op: &str, call: &OpCall, tensors: &BTreeMap<String, TensorMeta>) -> u64 {
    if op != "sort" {
        return 1;
    }
    let Some(x) = arg_tensors(call, 0).first().and_then(|n| tensors.get(*n)) else {
        return 1;
    };
    let nd = x.shape.len() as i64;
    let dim = call.arg(1, "dim").and_then(|v| v.as_int()).unwrap_or(-1);
    let d = if dim < 0 { dim + nd } else { dim };
    let n = if nd == 0 {
        1
    } else {
        x.shape.get(d.max(0) as usize).copied().unwrap_or(1)
    };
    (n.max(2) as f64).log2().ceil() as u64
}

/// The lower bound of `op` called as `call` on tensors with this metadata (inputs and outputs by
/// name, outputs named `output.*`), on `target`.
pub fn bound(op: &str, call: &OpCall, tensors: &BTreeMap<String, TensorMeta>, target: &Target) -> Bound {
    let (out_bytes, out_scalars) = tensors
        .iter()
        .filter(|(k, _)| k.starts_with("output."))
        .map(|(_, m)| size_of(m))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let mut kind = kind_of(op);
    if out_bytes == 0 {
        kind = Kind::NoWork;
    }
    let (in_bytes, in_scalars) = match kind {
        Kind::NoWork | Kind::Generate => (0, 0),
        _ => required_inputs(op, call, tensors, out_scalars),
    };
    let first_input_empty = tensors.get("input.0").is_some_and(|m| m.shape.contains(&0));
    if kind == Kind::Compute && (in_bytes == 0 || first_input_empty) {
        // Nothing to read (an empty reduction, say), or a non-empty output computed over an empty
        // first operand (group norm's dγ over an empty batch, an [m, 0] @ [0, n] product): its
        // values are constants an engine generates, whatever the other inputs hold.
        kind = Kind::Generate;
    }
    let (in_bytes, in_scalars) = if kind == Kind::Generate {
        (0, 0)
    } else {
        (in_bytes, in_scalars)
    };
    let (macs, fp32, extra_stream) = match kind {
        Kind::Compute => contraction(op, call, tensors),
        _ => (0, true, 0),
    };
    let stream_elems = match kind {
        Kind::Compute => in_scalars.max(out_scalars).max(extra_stream) * sort_factor(op, call, tensors),
        Kind::Generate => out_scalars,
        _ => 0,
    };
    // The fastest an engine can start and finish a value-producing instruction: MIN_II cycles
    // on the fastest clock of the engines that write SBUF (TensorE writes PSUM only).
    let engine_floor_ns = target.min_ii_cycles as f64 / target.vector_ghz.max(target.scalar_ghz).max(target.gpsimd_ghz);
    let latency_ns = match kind {
        Kind::NoWork => 0.0,
        Kind::Move => target.dma_fixed_ns,
        Kind::Generate => target.dma_fixed_ns + engine_floor_ns,
        Kind::Compute => 2.0 * target.dma_fixed_ns,
    };
    let hbm_bytes = if kind == Kind::NoWork { 0 } else { in_bytes + out_bytes };
    let pe_per_cycle = (target.partitions * target.stationary_fmax) as f64;
    let tensor_rate = pe_per_cycle * target.tensor_ghz / if fp32 { target.matmul_fp32_factor as f64 } else { 1.0 };
    // VectorE's bf16 fast paths (tensor_reduce, memset, tensor_tensor) take N/2 cycles: 2 per
    // lane and cycle; ScalarE and GpSimdE stream 1; TensorE takes a 128-row column per cycle.
    let per_cycle = target.stream_elems_per_cycle.max(1) as f64;
    let stream_rate = target.partitions as f64
        * per_cycle
        * (2.0 * target.vector_ghz + target.scalar_ghz + target.gpsimd_ghz + target.tensor_ghz);
    Bound {
        kind,
        hbm_bytes,
        tensor_macs: macs,
        tensor_fp32: fp32,
        stream_elems,
        latency_ns,
        hbm_ns: hbm_bytes as f64 / target.hbm_bytes_per_ns,
        tensor_ns: macs as f64 / tensor_rate,
        stream_ns: stream_elems as f64 / stream_rate,
    }
}

/// The estimate fell below the bound: the cost model lets the simulated device beat the
/// hardware's published peak rates, which is a bug in the cost model (or in the bound).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error(
    "cost-model bug: estimated device time {est_ns:.1} ns is below the roofline lower bound {bound_ns:.1} ns \
     (efficiency {:.3} > 1; docs/performance.md, \"Roofline\")", bound_ns / est_ns
)]
pub struct BelowBound {
    pub bound_ns: f64,
    pub est_ns: f64,
}

/// Efficiency = bound / estimate, in (0, 1]. `Ok(None)` when there is no required work (bound 0).
/// An estimate below the bound (beyond float rounding) is an error, never clamped.
pub fn efficiency(bound_ns: f64, est_ns: f64) -> Result<Option<f64>, BelowBound> {
    if bound_ns.is_nan() || bound_ns <= 0.0 {
        return Ok(None);
    }
    // Relative slack for the float sums on both sides; any real beat is far larger.
    if est_ns.is_nan() || est_ns < bound_ns * (1.0 - 1e-9) {
        return Err(BelowBound { bound_ns, est_ns });
    }
    Ok(Some((bound_ns / est_ns).min(1.0)))
}

/// The roofline error of a case record or result, if its estimate is below its bound.
pub fn violation(bound_us: Option<f64>, est_us: Option<f64>) -> Option<BelowBound> {
    efficiency(bound_us? * 1e3, est_us? * 1e3).err()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::JsonFloat;

    fn t(dtype: TorchDType, shape: &[usize]) -> TensorMeta {
        TensorMeta::contiguous(dtype, shape)
    }

    fn tensors(list: &[(&str, TensorMeta)]) -> BTreeMap<String, TensorMeta> {
        list.iter().map(|(n, m)| (n.to_string(), m.clone())).collect()
    }

    fn call(args: Vec<Value>) -> OpCall {
        OpCall {
            args,
            kwargs: BTreeMap::new(),
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    /// Every lowered op has a family, and the families are the report's groups: the registry's
    /// family names are data, and this list changes only when a family is added or renamed on
    /// purpose (the roofline and report grouping key on them).
    #[test]
    fn families_cover_the_lowered_ops() {
        for op in crate::lower::lowered_ops() {
            assert!(family_of(op).is_some(), "{op} has no family");
        }
        let mut got: Vec<&str> = families().collect();
        got.sort_unstable();
        let want = [
            "activation",
            "binary",
            "binary_ext",
            "comparison",
            "conv",
            "conv_backward",
            "creation",
            "distance",
            "embedding_bag",
            "fft",
            "grid_sample",
            "indexing",
            "matmul",
            "metadata",
            "norm",
            "pad",
            "pooling",
            "reduction",
            "shape",
            "sort",
            "unary",
        ];
        assert_eq!(got, want);
        assert_eq!(family_of("div.Scalar"), Some("binary"));
        assert_eq!(family_of("convolution_backward"), Some("conv_backward"));
        assert_eq!(family_of("not_an_op"), None);
    }

    /// bf16 mm [1024×1024]·[1024×2048] on Trn1, by hand: 2³¹ MACs at 128·128 per 2.8 GHz cycle
    /// = 46 811.4 ns; HBM (2 + 4 + 4 MiB) / 410 B/ns = 25 575.0 ns; latency 2 × 1300; streaming
    /// max(3·2²⁰, 2²¹) elements / (128 · (2·1.12 + 1.4 + 1.4 + 2.8) per ns) = 3 134.7 ns. TensorE
    /// decides. In fp32 the PE term is 4×.
    #[test]
    fn matmul_bound_by_hand() {
        let target = Target::trn1();
        let ts = |d| {
            tensors(&[
                ("input.0", t(d, &[1024, 1024])),
                ("input.1", t(d, &[1024, 2048])),
                ("output.0", t(d, &[1024, 2048])),
            ])
        };
        let c = call(vec![Value::Tensor("input.0".into()), Value::Tensor("input.1".into())]);
        let b = bound("mm", &c, &ts(TorchDType::Bf16), &target);
        assert_eq!(b.kind, Kind::Compute);
        assert_eq!(b.tensor_macs, 1 << 31);
        assert!(!b.tensor_fp32);
        assert!(close(b.tensor_ns, 2f64.powi(31) / (16384.0 * 2.8)), "{}", b.tensor_ns);
        assert!(close(b.tensor_ns, 46_811.428_571), "{}", b.tensor_ns);
        assert_eq!(b.hbm_bytes, (2 + 4 + 4) << 20);
        assert!(close(b.hbm_ns, 10.0 * 1_048_576.0 / 410.0), "{}", b.hbm_ns);
        assert_eq!(b.latency_ns, 2600.0);
        assert_eq!(b.stream_elems, 3 << 20);
        assert!(
            close(b.stream_ns, 3.0 * 1_048_576.0 / (128.0 * 7.84)),
            "{}",
            b.stream_ns
        );
        assert_eq!(b.limiter(), Limiter::Tensor);
        assert!(close(b.ns(), b.tensor_ns));
        let f = bound("mm", &c, &ts(TorchDType::F32), &target);
        assert!(f.tensor_fp32);
        assert!(close(f.tensor_ns, 4.0 * b.tensor_ns));
        assert_eq!(f.hbm_bytes, 2 * b.hbm_bytes);
    }

    /// f32 add of two [1024×1024] tensors on Trn1: 12 MiB cross HBM (two reads, one write):
    /// 12·2²⁰ / 410 = 30 690.0 ns, far above the latency (2600 ns) and the streaming term
    /// (2²¹ elements / 1003.52 per ns = 2 089.8 ns). No TensorE work.
    #[test]
    fn elementwise_bound_by_hand() {
        let target = Target::trn1();
        let ts = tensors(&[
            ("input.0", t(TorchDType::F32, &[1024, 1024])),
            ("input.1", t(TorchDType::F32, &[1024, 1024])),
            ("output.0", t(TorchDType::F32, &[1024, 1024])),
        ]);
        let c = call(vec![Value::Tensor("input.0".into()), Value::Tensor("input.1".into())]);
        let b = bound("add.Tensor", &c, &ts, &target);
        assert_eq!(b.kind, Kind::Compute);
        assert_eq!(b.tensor_macs, 0);
        assert_eq!(b.hbm_bytes, 12 << 20);
        assert!(close(b.hbm_ns, 30_690.029_268_292_68), "{}", b.hbm_ns);
        assert_eq!(b.stream_elems, 2 << 20);
        assert!(close(b.stream_ns, 2_097_152.0 / 1003.52), "{}", b.stream_ns);
        assert_eq!(b.limiter(), Limiter::Hbm);
        // A tiny one is decided by the two dependent DMAs' fixed cost.
        let small = tensors(&[
            ("input.0", t(TorchDType::F32, &[19])),
            ("input.1", t(TorchDType::F32, &[19])),
            ("output.0", t(TorchDType::F32, &[19])),
        ]);
        let s = bound("add.Tensor", &c, &small, &target);
        assert_eq!((s.ns(), s.limiter()), (2600.0, Limiter::Latency));
        // int64 lives as int32 on the device: 4 bytes an element.
        let ints = tensors(&[
            ("input.0", t(TorchDType::I64, &[1000])),
            ("input.1", t(TorchDType::I64, &[1000])),
            ("output.0", t(TorchDType::I64, &[1000])),
        ]);
        assert_eq!(bound("add.Tensor", &c, &ints, &target).hbm_bytes, 12_000);
    }

    /// Views are DMA only (one transfer's fixed cost); gathers need only their indices read;
    /// empty outputs and metadata queries need nothing.
    #[test]
    fn kinds_and_required_reads() {
        let target = Target::trn1();
        let c = call(vec![Value::Tensor("input.0".into()), Value::Ints(vec![1, 0])]);
        let ts = tensors(&[
            ("input.0", t(TorchDType::F32, &[4, 8])),
            ("output.0", t(TorchDType::F32, &[8, 4])),
        ]);
        let p = bound("permute", &c, &ts, &target);
        assert_eq!((p.kind, p.latency_ns, p.hbm_bytes), (Kind::Move, 1300.0, 256));
        let g = tensors(&[
            ("input.0", t(TorchDType::F32, &[1000, 4])),
            ("input.2", t(TorchDType::I64, &[129])),
            ("output.0", t(TorchDType::F32, &[129, 4])),
        ]);
        let gc = call(vec![
            Value::Tensor("input.0".into()),
            Value::Int(0),
            Value::Tensor("input.2".into()),
        ]);
        assert_eq!(bound("index_select", &gc, &g, &target).hbm_bytes, 129 * 4 + 129 * 16);
        let empty = tensors(&[
            ("input.0", t(TorchDType::F32, &[0, 3])),
            ("output.0", t(TorchDType::F32, &[0, 3])),
        ]);
        let e = bound("exp", &call(vec![Value::Tensor("input.0".into())]), &empty, &target);
        assert_eq!((e.kind, e.ns()), (Kind::NoWork, 0.0));
        assert_eq!(efficiency(e.ns(), 0.0), Ok(None));
        let full = tensors(&[("output.0", t(TorchDType::F32, &[4]))]);
        let f = bound(
            "full",
            &call(vec![Value::Ints(vec![4]), Value::Float(JsonFloat(1.0))]),
            &full,
            &target,
        );
        assert_eq!(f.kind, Kind::Generate);
        assert!(close(f.ns(), 1300.0 + 64.0 / 1.4));
    }

    /// Padding taps need no PE work: a 3×3 same-padded convolution of an 8×8 image has
    /// (8·3 − 2)² = 484 valid (position, tap) pairs, not 64·9 = 576.
    #[test]
    fn convolution_counts_valid_taps() {
        let target = Target::trn1();
        let ts = tensors(&[
            ("input.0", t(TorchDType::Bf16, &[2, 3, 8, 8])),
            ("input.1", t(TorchDType::Bf16, &[4, 3, 3, 3])),
            ("output.0", t(TorchDType::Bf16, &[2, 4, 8, 8])),
        ]);
        let c = call(vec![
            Value::Tensor("input.0".into()),
            Value::Tensor("input.1".into()),
            Value::None(()),
            Value::Ints(vec![1, 1]),
            Value::Ints(vec![1, 1]),
            Value::Ints(vec![1, 1]),
            Value::Bool(false),
            Value::Ints(vec![0, 0]),
            Value::Int(1),
        ]);
        let b = bound("convolution", &c, &ts, &target);
        assert_eq!(b.tensor_macs, 2 * 4 * 3 * 484);
        assert!(!b.tensor_fp32);
    }

    /// An estimate below the bound is a cost-model bug: an error naming both times, never an
    /// efficiency above 1.
    #[test]
    fn estimate_below_bound_is_an_error() {
        assert_eq!(efficiency(2600.0, 5200.0), Ok(Some(0.5)));
        assert_eq!(efficiency(2600.0, 2600.0), Ok(Some(1.0)));
        let err = efficiency(2600.0, 2000.0).unwrap_err();
        assert_eq!(
            err,
            BelowBound {
                bound_ns: 2600.0,
                est_ns: 2000.0
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("cost-model bug") && msg.contains("2600.0") && msg.contains("2000.0"),
            "{msg}"
        );
        assert!(efficiency(2600.0, 0.0).is_err(), "work done in no time");
        assert!(efficiency(2600.0, f64::NAN).is_err());
        assert!(violation(Some(2.6), Some(2.0)).is_some());
        assert!(violation(Some(2.6), Some(3.0)).is_none());
        assert!(violation(None, Some(3.0)).is_none());
    }

    /// Large calls lowered and simulated (zero inputs: timing never depends on values): each
    /// estimate stays at or above its bound, including the DMA-only views and copies whose
    /// large transfers `schedule` spreads over the 16 queues, and the HBM-bound elementwise and
    /// TensorE-bound matmul calls where the other terms decide.
    #[test]
    fn large_calls_stay_above_their_bound() {
        use crate::lower::{LowerRequest, OutputSlot, lower_request};
        use trnsim::{Executor, HbmRole, HostTensor, TargetName};
        let f32s = |s: &[usize]| t(TorchDType::F32, s);
        type Call<'a> = (&'a str, Vec<Value>, Vec<(&'a str, TensorMeta)>);
        let cases: Vec<Call> = vec![
            (
                "permute",
                vec![Value::Tensor("input.0".into()), Value::Ints(vec![1, 0])],
                vec![("input.0", f32s(&[512, 2048])), ("output.0", f32s(&[2048, 512]))],
            ),
            (
                "clone",
                vec![Value::Tensor("input.0".into())],
                vec![("input.0", f32s(&[1024, 1024])), ("output.0", f32s(&[1024, 1024]))],
            ),
            (
                "cat",
                vec![
                    Value::Tensors(vec![Some("input.0.0".into()), Some("input.0.1".into())]),
                    Value::Int(0),
                ],
                vec![
                    ("input.0.0", f32s(&[512, 1024])),
                    ("input.0.1", f32s(&[512, 1024])),
                    ("output.0", f32s(&[1024, 1024])),
                ],
            ),
            (
                "add.Tensor",
                vec![Value::Tensor("input.0".into()), Value::Tensor("input.1".into())],
                vec![
                    ("input.0", f32s(&[1024, 1024])),
                    ("input.1", f32s(&[1024, 1024])),
                    ("output.0", f32s(&[1024, 1024])),
                ],
            ),
            (
                "mm",
                vec![Value::Tensor("input.0".into()), Value::Tensor("input.1".into())],
                vec![
                    ("input.0", t(TorchDType::Bf16, &[512, 1024])),
                    ("input.1", t(TorchDType::Bf16, &[1024, 1024])),
                    ("output.0", t(TorchDType::Bf16, &[512, 1024])),
                ],
            ),
        ];
        let target = TargetName::Trn1;
        for (op, args, list) in cases {
            let metas = tensors(&list);
            let c = call(args);
            let slots = vec![OutputSlot::Tensor("output.0".into())];
            let req = LowerRequest {
                op,
                call: &c,
                tensors: &metas,
                outputs: &slots,
            };
            let lowered = lower_request(&req, target).unwrap_or_else(|e| panic!("{op}: {e}"));
            let inputs = lowered
                .program
                .hbm
                .iter()
                .filter(|d| d.role == HbmRole::Input)
                .map(|d| {
                    let n: usize = d.shape.iter().product();
                    (
                        d.name.clone(),
                        HostTensor::from_f32_as(d.dtype, &d.shape, &vec![0.0; n]),
                    )
                })
                .collect();
            let run = Executor::new(target)
                .run(&lowered.program, &inputs)
                .unwrap_or_else(|e| panic!("{op}: {e}"));
            let b = bound(op, &c, &metas, &target.params());
            let est = run.stats.timeline.makespan_ns;
            let eff = efficiency(b.ns(), est).unwrap_or_else(|e| panic!("{op}: {e}"));
            assert!(eff.is_some_and(|e| e > 0.0), "{op}: {eff:?}");
        }
    }
}
