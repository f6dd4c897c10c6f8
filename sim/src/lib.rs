//! trnsim — an instruction-level functional simulator of the AWS NeuronCore-v2 (Trn1) engines.
//!
//! Layers, bottom up: [`dtype`] (formats, conversions, rounding) → [`mem`] (HBM, SBUF, PSUM,
//! access patterns, written-byte tracking) → [`program`] (the instruction set as serde data) →
//! [`engine`] (one function per instruction) → [`exec`] (runs a program, typed errors, stats) →
//! [`session`] (named device tensors that stay in simulated HBM across program runs).
//! [`target`] holds every size and limit of a NeuronCore generation as data.
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
//! let mut inputs = BTreeMap::new();
//! inputs.insert("a".to_string(), HostTensor::from_f32(&[4, 8], &[1.0; 32]));
//! inputs.insert("b".to_string(), HostTensor::from_f32(&[4, 8], &[2.0; 32]));
//! let run = Executor::new(TargetName::Trn1).run(&p, &inputs).unwrap();
//! assert_eq!(run.outputs["out"].to_f32(), vec![3.0; 32]);
//! assert_eq!(run.stats.instructions.vector, 1);
//! ```

pub mod dtype;
pub mod engine;
pub mod error;
pub mod exec;
pub mod mem;
pub mod program;
pub mod session;
pub mod target;

pub use dtype::{ALL_DTYPES, DType, Rounding};
pub use error::{ErrorKind, SimError};
pub use exec::{
    ActivationModel, Denormals, EngineCounts, EngineTimes, ExecConfig, Executor, HostTensor, MatmulAccumulation,
    NanMaxMin, Numerics, RoundingMode, RunResult, Stats,
};
pub use mem::{AccessPattern, FreeDim, MemSpace};
pub use program::*;
pub use session::{DeviceTensor, Session, Transfers};
pub use target::{Target, TargetName};
