//! Every numeric choice the simulator makes where AWS publishes nothing, as named settings
//! ([`Numerics`] and its setting enums; docs/numerics.md). The engines read them from their
//! `Ctx`; the executor takes them in its `ExecConfig`. This module depends on nothing else in
//! the crate, so that engines and executor both import it without importing each other.

use serde::{Deserialize, Serialize};

/// How float downcasts round (the runtime's `NEURON_RT_STOCHASTIC_ROUNDING_EN`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RoundingMode {
    #[default]
    NearestEven,
    Stochastic {
        seed: u64,
    },
}

/// Subnormal handling in engine arithmetic (unpublished for every engine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Denormals {
    /// IEEE: subnormal inputs and results are kept.
    #[default]
    Preserve,
    /// Subnormal fp32 inputs and results of ALU/activation math become ±0.
    FlushToZero,
}

/// What max/min do with NaN (unpublished).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum NanMaxMin {
    /// A NaN operand gives NaN (PyTorch's `maximum`/`amax` semantics).
    #[default]
    Propagate,
    /// The non-NaN operand wins (IEEE 754-2008 maxNum / C `fmaxf`).
    PreferNumber,
}

/// Order in which TensorE sums the K products of one output element (unpublished).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum MatmulAccumulation {
    /// k = 0..K-1, each partial sum rounded to fp32.
    #[default]
    Sequential,
    /// Pairwise tree over k (an alternative to compare against hardware).
    Pairwise,
}

/// How ScalarE evaluates activation functions (the hardware's polynomial tables are unpublished).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ActivationModel {
    /// Evaluate in f64 and round once to fp32: the most accurate fp32 answer.
    #[default]
    Accurate,
    /// A lower-accuracy ScalarE: the accurate fp32 result moved by a deterministic error of up
    /// to `ulps` fp32 ulps (uniform over −ulps..=ulps, chosen by a hash of the function and the
    /// input bits), the error profile of a table/polynomial approximation with that ulp budget.
    /// Exact functions (copy, square, relu, sign, abs) stay exact. docs/numerics.md.
    Approximate { ulps: u32 },
}

/// How `quantize_mx` rounds an element divided by its block scale to the MX element type (the
/// OCP MX spec leaves the conversion's rounding to the implementation; AWS publishes none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum MxElementRounding {
    /// Round to nearest, ties to even (the same cast every other write uses).
    #[default]
    NearestEven,
    /// Truncate toward zero (the cheaper hardware conversion, to compare against hardware).
    TowardZero,
}

/// Which engine computes on 64-bit integers (`i64` operands, NC-v3+ with `native_int64`). AWS
/// publishes that NC-v3 has native INT64 (the data-types page; the compiler's
/// `--native-int64`), but not which instructions take it nor how wide each engine's integer
/// ALU is (docs/numerics.md "Native int64").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Int64Alu {
    /// GpSimdE (general-purpose cores) computes `i64` operands exactly in 64-bit two's
    /// complement, wrapping as PyTorch's int64 does; VectorE and ScalarE read them as fp32
    /// (round to nearest even), as they read every integer, and their raw-bits (bitvec) paths
    /// refuse an `i64` with a typed error.
    #[default]
    GpsimdExact,
    /// No engine has a 64-bit integer ALU: every engine, GpSimdE included, reads `i64` as fp32
    /// and writes it back with round to nearest even (exact only up to 2^24): to compare
    /// against a core whose int64 support is storage and DMA only.
    Fp32,
}

/// Every numeric choice the simulator makes where AWS publishes nothing. Documented in
/// docs/numerics.md; each can be switched to compare against hardware.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Numerics {
    #[serde(default)]
    pub rounding: RoundingMode,
    #[serde(default)]
    pub denormals: Denormals,
    #[serde(default)]
    pub nan_max_min: NanMaxMin,
    #[serde(default)]
    pub matmul_accumulation: MatmulAccumulation,
    #[serde(default)]
    pub activation: ActivationModel,
    /// Emulate the Trn1 bug where `activation(copy)` ignores its bias (aws-neuron-sdk #1296).
    #[serde(default)]
    pub emulate_act_copy_bias_bug: bool,
    /// `quantize_mx`'s element rounding (docs/numerics.md "MX quantization").
    #[serde(default)]
    pub mx_element_rounding: MxElementRounding,
    /// How the engines compute on `i64` operands (docs/numerics.md "Native int64").
    #[serde(default)]
    pub int64_alu: Int64Alu,
}
