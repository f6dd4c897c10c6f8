//! Target parameters: every size, limit and clock of a NeuronCore generation, as data.
//!
//! Nothing else in the simulator hard-codes these numbers; engines and validation read them from
//! the [`Target`] a program runs on. Sources: shared reference `neuroncore-isa.md` §1 (AWS
//! architecture guides for Trn1/Trn2, NKI `tile_size`, KLR `Trace.lean`).

use serde::{Deserialize, Serialize};

/// The chips the simulator models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TargetName {
    /// Trainium (Trn1): NeuronCore-v2.
    #[default]
    Trn1,
    /// Trainium2 (Trn2): NeuronCore-v3.
    Trn2,
}

impl TargetName {
    pub fn name(self) -> &'static str {
        match self {
            TargetName::Trn1 => "trn1",
            TargetName::Trn2 => "trn2",
        }
    }

    pub fn from_name(s: &str) -> Option<TargetName> {
        match s {
            "trn1" => Some(TargetName::Trn1),
            "trn2" => Some(TargetName::Trn2),
            _ => None,
        }
    }

    pub fn params(self) -> Target {
        match self {
            TargetName::Trn1 => Target::trn1(),
            TargetName::Trn2 => Target::trn2(),
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
    /// the bound a lower bound)].
    pub hbm_bytes_per_ns: f64,
    /// Whether ScalarE `activation` takes an immediate (not only a per-partition tile) bias.
    pub scalar_bias_immediate: bool,
    /// Whether ScalarE `tensor_copy` exists (NC-v3 adds it; NC-v2 copies with `activation(copy)`).
    pub scalar_tensor_copy: bool,
}

impl Target {
    /// Trn1, NeuronCore-v2.
    pub fn trn1() -> Target {
        Target {
            name: TargetName::Trn1,
            core: "NeuronCore-v2",
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
        }
    }

    /// Trn2, NeuronCore-v3.
    pub fn trn2() -> Target {
        Target {
            name: TargetName::Trn2,
            core: "NeuronCore-v3",
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
            ..Target::trn1()
        }
    }
}
