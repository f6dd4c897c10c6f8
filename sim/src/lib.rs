//! trnsim — an instruction-level functional simulator of the AWS NeuronCore-v2 (Trn1) engines.
//!
//! Layers, bottom up: [`dtype`] (formats, conversions, rounding) → [`mem`] (HBM, SBUF, PSUM,
//! access patterns, written-byte tracking) → [`program`] (the instruction set as serde data) →
//! [`engine`] (one function per instruction) → [`exec`] (runs a program, typed errors, stats) →
//! [`session`] (named device tensors that stay in simulated HBM across program runs), with
//! [`deps`] (memory footprints, `infer_waits`) and [`timeline`] (the parallel schedule and the
//! race detector, docs/timeline.md).
//! [`target`] holds every size and limit of a NeuronCore generation as data; [`numerics`] every
//! numeric setting ([`Numerics`]) and [`stats`] what a run counts ([`Stats`]). The engines read
//! both and never import `exec` (sim/tests/layers.rs checks it).
//!
//! ```
//! use trnsim::*;
//! use std::collections::BTreeMap;
//! // out = a + b for two [4, 8] f32 tensors, through SBUF.
//! let mut p = Program::new(TargetName::Trn1);
//! p.declare("a", DType::F32, &[4, 8], HbmRole::Input);
//! p.declare("b", DType::F32, &[4, 8], HbmRole::Input);
//! p.declare("out", DType::F32, &[4, 8], HbmRole::Output);
//! let hbm = |n: &str| AccessPattern::hbm(n, DType::F32, 0, 4, 8, vec![[1, 8]]);
//! let sb = |off| AccessPattern::sbuf(DType::F32, 0, 4, off, vec![[1, 8]]);
//! p.push(Engine::Dma, Op::DmaCopy(DmaCopy { dst: sb(0), src: hbm("a"), accumulate: false, indirect: None }));
//! p.push(Engine::Dma, Op::DmaCopy(DmaCopy { dst: sb(32), src: hbm("b"), accumulate: false, indirect: None }));
//! p.push(Engine::Vector, Op::TensorTensor(TensorTensor { dst: sb(64), in0: sb(0), in1: sb(32), op: AluOp::Add }));
//! p.push(Engine::Dma, Op::DmaCopy(DmaCopy { dst: hbm("out"), src: sb(64), accumulate: false, indirect: None }));
//! // The waits a parallel machine needs: the add waits for the second load (the loads share DMA
//! // queue 0, so that covers the first), the store for the add.
//! infer_waits(&mut p);
//! assert_eq!(p.instructions[2].wait, vec![1]);
//! assert_eq!(p.instructions[3].wait, vec![2]);
//! let mut inputs = BTreeMap::new();
//! inputs.insert("a".to_string(), HostTensor::from_f32(&[4, 8], &[1.0; 32]));
//! inputs.insert("b".to_string(), HostTensor::from_f32(&[4, 8], &[2.0; 32]));
//! let run = Executor::new(TargetName::Trn1).run(&p, &inputs).unwrap();
//! assert_eq!(run.outputs["out"].to_f32(), vec![3.0; 32]);
//! assert_eq!(run.stats.instructions.vector, 1);
//! // Estimated device time: both loads on DMA queue 0 (the default), then the add, the store.
//! assert_eq!(run.stats.timeline.critical_path, vec![0, 1, 2, 3]);
//! ```

pub mod deps;
pub mod dtype;
pub mod engine;
pub mod error;
pub mod exec;
pub mod mem;
pub mod numerics;
pub mod program;
pub mod session;
pub mod stats;
pub mod target;
pub mod timeline;
pub mod trace;

pub use deps::infer_waits;
pub use dtype::{ALL_DTYPES, DType, Rounding};
pub use error::{ErrorKind, RaceDetail, SimError};
pub use exec::{ExecConfig, Executor, HostTensor, RunResult};
pub use mem::{AccessPattern, FreeDim, MemSpace};
pub use numerics::{
    ActivationModel, Denormals, Int64Alu, MatmulAccumulation, MxElementRounding, NanMaxMin, Numerics, RoundingMode,
};
pub use program::*;
pub use session::{DeviceTensor, RaceChecks, Session, Transfers};
pub use stats::{EngineCounts, EngineTimes, Stats};
pub use target::{Target, TargetName};
pub use timeline::{QueueTime, Span, Timeline};
