//! Target parameters: every size, limit, clock, rate and capability of a NeuronCore generation,
//! as data.
//!
//! Nothing else in the simulator hard-codes these numbers or tests a generation's name: engines,
//! validation and the cost model read them from the [`Target`] a program runs on, and whether an
//! instruction or dtype exists on a core is a lookup in its capability lists
//! ([`Target::has_instruction`], [`Target::has_dtype`], [`Target::engine_runs`]).
//! Sources (docs/isa.md "Generations" gives every figure with its source, and both figures
//! where AWS's pages disagree): the Neuron SDK's architecture guides for Trainium, Trainium2 and
//! Trainium3 ([ARCH1], [ARCH2], [ARCH3]), the neuron-hardware pages for the chips and NeuronCore-v3/v4
//! ([HW]), the logical-NeuronCore and data-type pages, NKI's `tile_size`, and the `nki.isa` API of
//! Neuron SDK 2.32 (NKI 0.6) for which instruction exists on which `nc_version`.

use crate::dtype::{ALL_DTYPES, DType};
use serde::{Deserialize, Serialize};

/// The chips the simulator models. [`TargetName::from_name`] is the one place a name is parsed;
/// everything about a chip is in its [`Target`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TargetName {
    /// Trainium (Trn1): NeuronCore-v2.
    Trn1,
    /// Trainium2 (Trn2): NeuronCore-v3. The default: TorchNeuron and NKI 0.3+ run on Trn2 and
    /// Trn3 only (docs/isa.md "Generations").
    #[default]
    Trn2,
    /// Trainium3 (Trn3): NeuronCore-v4.
    Trn3,
}

/// Every target, oldest first: the one list front ends offer (`trnconf --target`, the golden
/// suite's target axis). A new [`TargetName`] variant goes here, in [`TargetName::name`] and in
/// [`TargetName::params`] (the compiler asks for the last two; sim/tests/targets.rs checks this
/// list against them).
pub const ALL_TARGETS: [TargetName; 3] = [TargetName::Trn1, TargetName::Trn2, TargetName::Trn3];

impl TargetName {
    /// [`ALL_TARGETS`], as an associated constant.
    pub const ALL: [TargetName; 3] = ALL_TARGETS;

    pub fn name(self) -> &'static str {
        match self {
            TargetName::Trn1 => "trn1",
            TargetName::Trn2 => "trn2",
            TargetName::Trn3 => "trn3",
        }
    }

    /// The target named `s` ([`TargetName::name`]): the one place a name is parsed.
    pub fn from_name(s: &str) -> Option<TargetName> {
        ALL_TARGETS.into_iter().find(|t| t.name() == s)
    }

    /// Every target's name, oldest first (`trn1, trn2, trn3`), for messages and help texts.
    pub fn names() -> impl Iterator<Item = &'static str> {
        ALL_TARGETS.into_iter().map(TargetName::name)
    }

    pub fn params(self) -> Target {
        match self {
            TargetName::Trn1 => Target::trn1(),
            TargetName::Trn2 => Target::trn2(),
            TargetName::Trn3 => Target::trn3(),
        }
    }
}

/// Which start partitions an on-chip operand may use, by how many partitions it spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StartPartitionRule {
    /// NC-v2: more than 64 partitions start at 0; 33–64 at 0 or 64; 1–32 at 0, 32, 64 or 96.
    Quadrants,
}

impl StartPartitionRule {
    /// Whether `start` is a legal first partition for an operand of `count` partitions.
    pub fn allows(self, start: usize, count: usize) -> bool {
        match self {
            StartPartitionRule::Quadrants => match count {
                0 => true,
                1..=32 => start.is_multiple_of(32),
                33..=64 => start == 0 || start == 64,
                _ => start == 0,
            },
        }
    }
}

/// Parameters of one NeuronCore generation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Target {
    pub name: TargetName,
    /// Marketing name of the core.
    pub core: &'static str,
    /// NKI's `nc_version` of the core (`nki.isa.nc_version`: gen2 = Trn1, gen3 = Trn2, gen4 =
    /// Trn3). Data for front-ends that report it; the simulator decides nothing on it.
    pub nc_version: u32,
    /// `trn1 (NeuronCore-v2)`: how errors name the generation.
    pub label: &'static str,
    // ---- Chip and logical core [HW, ARCH, logical-neuroncore-config]. ----
    /// Physical NeuronCores per chip [HW: 2 on Trn1, 8 on Trn2 and Trn3].
    pub cores_per_chip: usize,
    /// HBM bytes per chip [HW: 32 GiB, 96 GiB, 144 GiB].
    pub hbm_chip_bytes: u64,
    /// HBM bandwidth of the chip in bytes per ns (= GB/s / 1) [HW/ARCH: 820 GB/s; Trn2 2.9 TB/s
    /// (HW) or 3 TB/s (ARCH), 3.0 used; Trn3 4.9 TB/s (HW) or 4.7 TB/s (ARCH), 4.9 used: the
    /// larger figure keeps the roofline a lower bound].
    pub hbm_chip_bytes_per_ns: f64,
    /// DMA engines per chip [HW: 32, 128, 128].
    pub dma_engines_per_chip: usize,
    /// DMA bandwidth of the chip in bytes per ns [HW: 1 TB/s, 3.5 TB/s, 4.9 TB/s].
    pub dma_chip_bytes_per_ns: f64,
    /// Logical-NeuronCore sizes the chip allows (physical cores per logical core) [LNC page: only
    /// 1 on Trn1; 1 or 2 on Trn2/Trn3].
    pub lnc_allowed: &'static [usize],
    /// The default LNC [LNC page: 2 on Trn2/Trn3].
    pub lnc_default: usize,
    // ---- Core. ----
    /// Partitions of SBUF and PSUM (`pmax`).
    pub partitions: usize,
    /// Physical SBUF bytes per partition.
    pub sbuf_partition_bytes: usize,
    /// SBUF bytes per partition usable by programs (`total_available_sbuf_size`).
    pub sbuf_usable_bytes: usize,
    /// PSUM bytes per partition.
    pub psum_partition_bytes: usize,
    /// PSUM banks per partition.
    pub psum_banks: usize,
    /// Bytes of one PSUM bank per partition (512 fp32).
    pub psum_bank_bytes: usize,
    /// Max free size of a matmul's stationary operand (`gemm_stationary_fmax`).
    pub stationary_fmax: usize,
    /// Max free size of a matmul's moving operand (`gemm_moving_fmax`).
    pub moving_fmax: usize,
    /// Max elements per partition of a `bn_stats` input (`bn_stats_fmax`).
    pub bn_stats_fmax: usize,
    /// Max free elements per Vector/Scalar instruction reading SBUF.
    pub engine_fmax_sbuf: usize,
    /// Max free elements per Vector/Scalar instruction reading PSUM.
    pub engine_fmax_psum: usize,
    /// Max free dimensions of an access pattern.
    pub max_free_dims: usize,
    /// Start-partition rule for on-chip operands.
    pub start_partition_rule: StartPartitionRule,
    // ---- Cost model (docs/timeline.md has the table with sources and calibration plans). ----
    /// TensorE clock in GHz [ARCH1: 2.8 GHz on NC-v2; ARCH2: 2.4 GHz on NC-v3].
    pub tensor_ghz: f64,
    /// VectorE clock in GHz [ARCH1: 1.12; ARCH2: 0.96].
    pub vector_ghz: f64,
    /// ScalarE clock in GHz [ARCH1: 1.4; ARCH2: 1.2].
    pub scalar_ghz: f64,
    /// GpSimdE clock in GHz [ARCH1: 1.4; ARCH2: 1.2].
    pub gpsimd_ghz: f64,
    /// Fixed per-instruction floor in engine cycles, `MIN_II` of every published Vector/Scalar/
    /// GpSimd formula [ISA-OLD: `max(MIN_II, N)`, MIN_II ≈ 64].
    pub min_ii_cycles: u64,
    /// Elements per partition per cycle of VectorE and ScalarE streaming one input [ARCH1: one
    /// element per lane per cycle on NC-v2]; two-input VectorE instructions take twice as long.
    pub stream_elems_per_cycle: u64,
    /// TensorE: the floor of a matmul's cycle count, `MM_INIT_LATENCY` [ARCH1, PERF: 64 cycles];
    /// a matmul costs `max(min(floor, N_stationary), N_moving)` PE cycles [ISA-OLD `nc_matmul`].
    pub matmul_init_cycles: u64,
    /// TensorE: cost multiplier for fp32 inputs [ARCH1: fp32 at a quarter rate, 23 vs 92 TFLOPS].
    pub matmul_fp32_factor: u64,
    /// GpSimd start-up cycles of `iota` and `affine_select` (`150 + N`) [ISA-OLD].
    pub gpsimd_start_cycles: u64,
    /// DMA queues (engines) per core [ARCH1, DMA-OV: 16 on NC-v2 and NC-v3].
    pub dma_queues: usize,
    /// DMA bandwidth of one queue in bytes per ns [DMA-BW table: 17 B/ns on Trn1, 23 on Trn2;
    /// ARCH1 gives 27 GiB/s theoretical. Calibrate: nightly `dma_bandwidth` kernel].
    pub dma_queue_bytes_per_ns: f64,
    /// Fixed cost of one DMA transfer in ns: descriptor setup, synchronisation and the
    /// semaphore-to-start latency [DMA-BW: ≈1300 ns "cross-engine". Calibrate: nightly
    /// `dma_latency` kernel, a chain of 1-element DMAs].
    pub dma_fixed_ns: f64,
    /// HBM bandwidth available to one core in bytes per ns. Each DMA queue gets a fair share of
    /// it for the HBM traffic of its transfers (`engine::dma`), and it is the HBM term of the
    /// roofline lower bound (trnconf `roofline`, docs/performance.md) [ARCH1: 820 GB/s per Trn1 chip of 2 cores → 410;
    /// ARCH2: 3 TB/s per Trn2 chip of 8 cores → 375 (TRN2 says 2.9 TB/s: the larger figure keeps
    /// the bound a lower bound); HW: 4.9 TB/s per Trn3 chip of 8 cores → 612.5 (ARCH3: 4.7)].
    pub hbm_bytes_per_ns: f64,
    /// Whether ScalarE `activation` takes an immediate (not only a per-partition tile) bias.
    pub scalar_bias_immediate: bool,
    /// Whether ScalarE `tensor_copy` exists (NC-v3 adds it; NC-v2 copies with `activation(copy)`).
    pub scalar_tensor_copy: bool,
    // ---- Data paths [ARCH2/ARCH3 engine sections; docs/isa.md "Generations"]. ----
    /// TensorE systolic array rows × columns [ARCH: 128 × 128 on every generation].
    pub pe_rows: usize,
    pub pe_cols: usize,
    /// TensorE `nc_matmul` performance modes the core has (`perf_mode`; `none` always).
    pub matmul_perf_modes: &'static [MatmulPerfMode],
    /// VectorE: elements per partition per cycle for the dtypes of [`Target::vector_wide_dtypes`]
    /// (a 512-wide data path over 128 lanes is 4; 256 is 2; 128 is 1) [ARCH2: DVE 512 bf16/fp16,
    /// else 256; ARCH3: 512 bf16/fp16/fp8; ARCH1: 128].
    pub vector_wide_elems_per_cycle: u64,
    /// VectorE dtypes that take the wide data path (every operand must be one of them).
    pub vector_wide_dtypes: &'static [DType],
    /// VectorE elements per partition per cycle for other dtypes.
    pub vector_elems_per_cycle: u64,
    /// ScalarE: elements per partition per cycle for [`Target::scalar_wide_dtypes`] [ARCH3: ACT 256
    /// bf16/fp16/fp8, else 128].
    pub scalar_wide_elems_per_cycle: u64,
    pub scalar_wide_dtypes: &'static [DType],
    /// ScalarE elements per partition per cycle for other dtypes.
    pub scalar_elems_per_cycle: u64,
    /// GpSimdE elements per partition per cycle [ARCH: POOL 128 wide].
    pub gpsimd_elems_per_cycle: u64,
    // ---- Capabilities. ----
    /// Every instruction (opcode, as [`crate::Op::name`]) the core executes. An instruction not
    /// listed is refused with [`crate::ErrorKind::NotOnTarget`] naming [`Target::label`].
    pub instructions: &'static [&'static str],
    /// Instructions ScalarE gained on this core beyond the engines `Op::engines` lists for
    /// NC-v2 (NC-v3: `tensor_copy`, `tensor_scalar`).
    pub scalar_extra_instructions: &'static [&'static str],
    /// Every dtype the core's engines and DMA take. An operand or HBM tensor of another dtype is
    /// refused with [`crate::ErrorKind::NotOnTarget`] naming the generation.
    pub dtypes: &'static [DType],
    /// Whether the core has native 64-bit integers (NC-v3+: the compiler's `--native-int64`):
    /// the one capability that admits [`DType::I64`] ([`Target::has_dtype`]); the lowering
    /// option of that name requires it. Which engine computes on int64 is unpublished: the
    /// `Numerics::int64_alu` setting (docs/numerics.md "Native int64").
    pub native_int64: bool,
    /// Whether TensorE may write bf16 results to PSUM [ARCH3: NC-v4].
    pub psum_bf16_output: bool,
    /// Whether compute engines may address SBUF/PSUM indirectly (`.indirect()`, NKI 0.5; NC-v4).
    pub indirect_on_chip_addressing: bool,
    /// DMA near-memory read-add-write rate as a fraction of the DMA rate [ARCH3: full rate on
    /// NC-v4; before, 50% through the collective-communication engines].
    pub dma_read_add_write_rate: f64,
    /// DMA quality-of-service classes (`priority` 0..n) [ARCH3: 4 on NC-v4; 1 = none before].
    pub dma_qos_classes: u32,
    /// The hardware DGE's `dma_transpose` limits; `None` on a core without hardware DGE
    /// (`dge_mode=hwdge` is NeuronCore-v3+ [`nki.isa.dma_copy`/`dma_transpose` `dge_mode`]).
    pub dma_transpose_hwdge: Option<HwdgeTranspose>,
}

/// What a `dma_transpose` with `dge_mode=hwdge` may move [`nki.isa.dma_transpose`, NKI 0.6
/// (SDK 2.32) release notes: `src.shape[0]` in {1, 2, 4, 8, 16} (before: 16) and
/// `src.shape[-1] <= 128` (before: a multiple of 128); `src.dtype` of 2 bytes].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct HwdgeTranspose {
    /// Allowed sizes of the source's first dim (`src.shape[0]`: partitions, or HBM rows).
    pub first_dims: &'static [usize],
    /// Largest size of the source's last dim (`src.shape[-1]`).
    pub max_last_dim: usize,
    /// Element size in bytes of the source.
    pub elem_bytes: usize,
}

/// The hardware DGE transpose of NKI 0.6 (the same on NC-v3 and NC-v4: the docs state one rule).
const HWDGE_TRANSPOSE_NKI_0_6: HwdgeTranspose = HwdgeTranspose {
    first_dims: &[1, 2, 4, 8, 16],
    max_last_dim: 128,
    elem_bytes: 2,
};

/// TensorE matmul performance modes (`nki.isa.matmul_perf_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatmulPerfMode {
    /// One row of PEs per K element.
    #[default]
    None,
    /// FP8 "double row": K = 256 in one pass, twice the FP8 rate [ARCH2, NC-v3 and NC-v4].
    DoubleRow,
    /// MX "quad": K = 512 of MXFP8/MXFP4 per pass [ARCH3, NC-v4 `nc_matmul_mx`].
    Quad,
}

impl MatmulPerfMode {
    pub fn is_none(&self) -> bool {
        *self == MatmulPerfMode::None
    }

    /// NKI's name (`nki.isa.matmul_perf_mode.<name>`).
    pub fn name(&self) -> &'static str {
        match self {
            MatmulPerfMode::None => "none",
            MatmulPerfMode::DoubleRow => "double_row",
            MatmulPerfMode::Quad => "quad",
        }
    }
}

/// Instructions every generation has: the NeuronCore-v2 set.
const NC_V2_INSTRUCTIONS: &[&str] = &[
    "nc_matmul",
    "nc_transpose",
    "tensor_tensor",
    "tensor_scalar",
    "scalar_tensor_tensor",
    "tensor_reduce",
    "tensor_tensor_scan",
    "tensor_scalar_reduce",
    "tensor_copy",
    "tensor_copy_predicated",
    "tensor_copy_dynamic_src",
    "tensor_copy_dynamic_dst",
    "reciprocal",
    "bn_stats",
    "bn_aggr",
    "max8",
    "nc_find_index8",
    "nc_match_replace8",
    "memset",
    "select_reduce",
    "dropout",
    "rng",
    "set_rng_seed",
    "nc_stream_shuffle",
    "activation",
    "iota",
    "affine_select",
    "local_gather",
    "nc_n_gather",
    "tensor_partition_reduce",
    "sequence_bounds",
    "dma_copy",
    "dma_transpose",
];

/// NeuronCore-v3 additions the simulator implements [neuroncore-isa §5.16; NKI 2.23 release
/// notes "for trn2"; `nki.isa` 2.32 "NeuronCore-v3 and newer"; `dma_compute` states no
/// generation and exists only in the new API, which targets NC-v3+: a choice, docs/isa.md]. Only instructions with semantics are listed: a list entry is a promise
/// that the core runs it (docs/isa.md "Generations" lists the NC-v3/v4 instructions not yet
/// modelled).
const NC_V3_ADDED: &[&str] = &["range_select", "nonzero_with_count", "dma_compute", "core_barrier"];

/// NeuronCore-v4 additions the simulator implements [`nki.isa` 2.32: "Available only on
/// NeuronCore-v4 and newer"]. The rest of NC-v4's list is named as a gap in docs/isa.md.
const NC_V4_ADDED: &[&str] = &["quantize_mx", "nc_matmul_mx"];

const fn concat<const N: usize>(parts: &[&[&'static str]]) -> [&'static str; N] {
    let mut out = [""; N];
    let mut k = 0;
    let mut p = 0;
    while p < parts.len() {
        let mut i = 0;
        while i < parts[p].len() {
            out[k] = parts[p][i];
            k += 1;
            i += 1;
        }
        p += 1;
    }
    assert!(k == N, "instruction list length");
    out
}

const NC_V3_LEN: usize = NC_V2_INSTRUCTIONS.len() + NC_V3_ADDED.len();
const NC_V4_LEN: usize = NC_V3_LEN + NC_V4_ADDED.len();
static NC_V3_INSTRUCTIONS: [&str; NC_V3_LEN] = concat(&[NC_V2_INSTRUCTIONS, NC_V3_ADDED]);
static NC_V4_INSTRUCTIONS: [&str; NC_V4_LEN] = concat(&[NC_V2_INSTRUCTIONS, NC_V3_ADDED, NC_V4_ADDED]);

/// The dtypes of NC-v2 and NC-v3 [data-types page: FP32, TF32, BF16, FP16, cFP8, INT8–32].
/// `float8_e4m3fn` is listed here too: trnsim's conformance suite stores PyTorch's
/// `float8_e4m3fn` on every generation and converts it on the engines, as a compiler targeting
/// those cores would in software; the OCP format as a *TensorE input* is NC-v4 (NKI 0.4), see
/// docs/isa.md.
const NC_V2_DTYPES: &[DType] = ALL_DTYPES.split_at(NC_V2_DTYPE_COUNT).0;

/// How many of [`ALL_DTYPES`] (which lists NC-v2's dtypes first) NC-v2 has.
const NC_V2_DTYPE_COUNT: usize = 14;

/// NC-v4 adds the MX formats' element and scale types and the packed `_x4` types [data-types
/// page; NKI 2.27 release notes; NKI 0.5 `float8_e8m0fnu`].
const NC_V4_DTYPES: &[DType] = &ALL_DTYPES;

const WIDE_16BIT: &[DType] = &[DType::Bf16, DType::F16];
const WIDE_16BIT_FP8: &[DType] = &[
    DType::Bf16,
    DType::F16,
    DType::Fp8E4m3,
    DType::Fp8E4m3fn,
    DType::Fp8E5m2,
];

impl Target {
    /// Trn1, NeuronCore-v2.
    pub fn trn1() -> Target {
        Target {
            name: TargetName::Trn1,
            core: "NeuronCore-v2",
            nc_version: 2,
            label: "trn1 (NeuronCore-v2)",
            cores_per_chip: 2,
            hbm_chip_bytes: 32 << 30,
            hbm_chip_bytes_per_ns: 820.0,
            dma_engines_per_chip: 32,
            dma_chip_bytes_per_ns: 1000.0,
            lnc_allowed: &[1],
            lnc_default: 1,
            partitions: 128,
            sbuf_partition_bytes: 192 * 1024,
            sbuf_usable_bytes: 180_224,
            psum_partition_bytes: 16 * 1024,
            psum_banks: 8,
            psum_bank_bytes: 2048,
            stationary_fmax: 128,
            moving_fmax: 512,
            bn_stats_fmax: 512,
            engine_fmax_sbuf: 64 * 1024,
            engine_fmax_psum: 4 * 1024,
            max_free_dims: 4,
            start_partition_rule: StartPartitionRule::Quadrants,
            tensor_ghz: 2.8,
            vector_ghz: 1.12,
            scalar_ghz: 1.4,
            gpsimd_ghz: 1.4,
            min_ii_cycles: 64,
            stream_elems_per_cycle: 1,
            matmul_init_cycles: 64,
            matmul_fp32_factor: 4,
            gpsimd_start_cycles: 150,
            dma_queues: 16,
            dma_queue_bytes_per_ns: 17.0,
            dma_fixed_ns: 1300.0,
            hbm_bytes_per_ns: 410.0,
            scalar_bias_immediate: false,
            scalar_tensor_copy: false,
            pe_rows: 128,
            pe_cols: 128,
            matmul_perf_modes: &[MatmulPerfMode::None],
            vector_wide_elems_per_cycle: 1,
            vector_wide_dtypes: &[],
            vector_elems_per_cycle: 1,
            scalar_wide_elems_per_cycle: 1,
            scalar_wide_dtypes: &[],
            scalar_elems_per_cycle: 1,
            gpsimd_elems_per_cycle: 1,
            instructions: NC_V2_INSTRUCTIONS,
            scalar_extra_instructions: &[],
            dtypes: NC_V2_DTYPES,
            native_int64: false,
            psum_bf16_output: false,
            indirect_on_chip_addressing: false,
            dma_read_add_write_rate: 0.5,
            dma_qos_classes: 1,
            dma_transpose_hwdge: None,
        }
    }

    /// Trn2, NeuronCore-v3.
    pub fn trn2() -> Target {
        Target {
            name: TargetName::Trn2,
            core: "NeuronCore-v3",
            nc_version: 3,
            label: "trn2 (NeuronCore-v3)",
            cores_per_chip: 8,
            hbm_chip_bytes: 96 << 30,
            hbm_chip_bytes_per_ns: 3000.0,
            dma_engines_per_chip: 128,
            dma_chip_bytes_per_ns: 3500.0,
            lnc_allowed: &[1, 2],
            lnc_default: 2,
            sbuf_partition_bytes: 224 * 1024,
            sbuf_usable_bytes: 212_984,
            tensor_ghz: 2.4,
            vector_ghz: 0.96,
            scalar_ghz: 1.2,
            gpsimd_ghz: 1.2,
            dma_queue_bytes_per_ns: 23.0,
            hbm_bytes_per_ns: 375.0,
            scalar_bias_immediate: true,
            scalar_tensor_copy: true,
            matmul_perf_modes: &[MatmulPerfMode::None, MatmulPerfMode::DoubleRow],
            vector_wide_elems_per_cycle: 4,
            vector_wide_dtypes: WIDE_16BIT,
            vector_elems_per_cycle: 2,
            instructions: &NC_V3_INSTRUCTIONS,
            scalar_extra_instructions: &["tensor_copy", "tensor_scalar"],
            native_int64: true,
            dma_transpose_hwdge: Some(HWDGE_TRANSPOSE_NKI_0_6),
            ..Target::trn1()
        }
    }

    /// Trn3, NeuronCore-v4. SBUF: 32 MiB per core over 128 partitions = 256 KiB per partition
    /// [HW]; usable bytes keep Trn2's reserve (unpublished for NC-v4: docs/isa.md).
    pub fn trn3() -> Target {
        Target {
            name: TargetName::Trn3,
            core: "NeuronCore-v4",
            nc_version: 4,
            label: "trn3 (NeuronCore-v4)",
            hbm_chip_bytes: 144 << 30,
            hbm_chip_bytes_per_ns: 4900.0,
            dma_chip_bytes_per_ns: 4900.0,
            sbuf_partition_bytes: 256 * 1024,
            sbuf_usable_bytes: 256 * 1024 - (224 * 1024 - 212_984),
            vector_ghz: 1.2,
            // 4.9 TB/s per chip of 8 cores [HW; ARCH3 says 4.7 TB/s].
            hbm_bytes_per_ns: 612.5,
            matmul_perf_modes: &[MatmulPerfMode::None, MatmulPerfMode::DoubleRow, MatmulPerfMode::Quad],
            vector_wide_dtypes: WIDE_16BIT_FP8,
            scalar_wide_elems_per_cycle: 2,
            scalar_wide_dtypes: WIDE_16BIT_FP8,
            instructions: &NC_V4_INSTRUCTIONS,
            dtypes: NC_V4_DTYPES,
            psum_bf16_output: true,
            indirect_on_chip_addressing: true,
            dma_read_add_write_rate: 1.0,
            dma_qos_classes: 4,
            ..Target::trn2()
        }
    }

    /// Whether the core executes `opcode` at all.
    pub fn has_instruction(&self, opcode: &str) -> bool {
        self.instructions.contains(&opcode)
    }

    /// Whether the core's engines and DMA take `dtype` (`i64`: [`Target::native_int64`]).
    pub fn has_dtype(&self, dtype: DType) -> bool {
        if dtype == DType::I64 {
            return self.native_int64;
        }
        self.dtypes.contains(&dtype)
    }

    /// Whether `perf_mode` exists on the core.
    pub fn has_perf_mode(&self, mode: MatmulPerfMode) -> bool {
        self.matmul_perf_modes.contains(&mode)
    }

    /// Physical SBUF bytes of one core.
    pub fn sbuf_core_bytes(&self) -> usize {
        self.partitions * self.sbuf_partition_bytes
    }

    /// HBM bytes per physical core (the chip's HBM shared evenly).
    pub fn hbm_core_bytes(&self) -> u64 {
        self.hbm_chip_bytes / self.cores_per_chip as u64
    }
}
