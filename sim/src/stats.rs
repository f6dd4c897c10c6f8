//! What a run counts: instructions, elements and estimated busy time per engine, DMA bytes,
//! FLOPs and the timeline ([`Stats`]). The engines add to it through their `Ctx`; the executor
//! returns it. Kept apart from `exec` so that the engines never import the executor.

use crate::program::Engine;
use crate::timeline::Timeline;
use serde::{Deserialize, Serialize};

/// Counts per engine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineCounts {
    pub tensor: u64,
    pub vector: u64,
    pub scalar: u64,
    pub gpsimd: u64,
    pub dma: u64,
}

/// `get` and `add` by [`Engine`] for a struct of one `$t` per engine.
macro_rules! per_engine {
    ($name:ident, $t:ty) => {
        impl $name {
            pub fn get(&self, e: Engine) -> $t {
                match e {
                    Engine::Tensor => self.tensor,
                    Engine::Vector => self.vector,
                    Engine::Scalar => self.scalar,
                    Engine::Gpsimd => self.gpsimd,
                    Engine::Dma => self.dma,
                }
            }

            pub fn add(&mut self, e: Engine, n: $t) {
                match e {
                    Engine::Tensor => self.tensor += n,
                    Engine::Vector => self.vector += n,
                    Engine::Scalar => self.scalar += n,
                    Engine::Gpsimd => self.gpsimd += n,
                    Engine::Dma => self.dma += n,
                }
            }
        }
    };
}

per_engine!(EngineCounts, u64);

/// Statistics of one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Instructions executed per engine.
    pub instructions: EngineCounts,
    /// Elements processed per engine (output elements; DMA: elements moved).
    pub elements: EngineCounts,
    /// Bytes moved by DMA.
    pub dma_bytes: u64,
    /// Floating-point operations (matmul: 2·K·M·N; elementwise: one per output element).
    pub flops: u64,
    /// Estimated busy time per engine in ns, from published per-instruction costs (DMA: the sum
    /// over its queues).
    pub est_ns: EngineTimes,
    /// When each instruction runs with the engines and DMA queues working concurrently: the
    /// makespan (estimated device time), per-queue busy time and the critical path. Empty when
    /// `ExecConfig::timeline` and `race_check` are off.
    #[serde(default)]
    pub timeline: Timeline,
}

/// Busy time per engine in ns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineTimes {
    pub tensor: f64,
    pub vector: f64,
    pub scalar: f64,
    pub gpsimd: f64,
    pub dma: f64,
}

per_engine!(EngineTimes, f64);

impl Stats {
    /// Instructions on Tensor, Vector, Scalar and GpSimd engines.
    pub fn compute_instructions(&self) -> u64 {
        let c = &self.instructions;
        c.tensor + c.vector + c.scalar + c.gpsimd
    }
}
