//! Test helpers for the TensorE and GpSimd tests: one simulated core driven instruction by
//! instruction (no HBM round trips), plus small builders for access patterns.
#![allow(dead_code)]

use trnsim::engine::{self, Ctx, Registers};
use trnsim::error::OperandError;
use trnsim::mem::Memories;
use trnsim::*;

/// One NeuronCore's memories and registers; runs single instructions through the same dispatch
/// (and therefore the same checks) as the executor.
pub struct Core {
    pub target: Target,
    pub numerics: Numerics,
    pub mem: Memories,
    pub regs: Registers,
    pub stats: Stats,
    pub rounding: Rounding,
}

impl Core {
    pub fn new() -> Self {
        Self::with_numerics(Numerics::default())
    }

    pub fn with_numerics(numerics: Numerics) -> Self {
        Self::on(TargetName::Trn1, numerics)
    }

    /// A core of another generation.
    pub fn on(target: TargetName, numerics: Numerics) -> Self {
        let target = target.params();
        let mem = Memories::new(&target, &[]);
        let regs = Registers::new(&target);
        Core {
            target,
            numerics,
            mem,
            regs,
            stats: Stats::default(),
            rounding: Rounding::NearestEven,
        }
    }

    /// Runs one instruction on `engine`, as the executor would (after its engine check).
    pub fn run(&mut self, engine: Engine, op: Op) -> Result<(), OperandError> {
        assert!(
            engine::runs_on(&self.target, &op, engine),
            "{} does not run on {}",
            op.name(),
            engine.name()
        );
        let mut ctx = Ctx {
            mem: &mut self.mem,
            target: &self.target,
            numerics: &self.numerics,
            rounding: &mut self.rounding,
            engine,
            regs: &mut self.regs,
            stats: &mut self.stats,
        };
        engine::execute(&mut ctx, &op)
    }

    /// Stores f32 values (cast RNE to the pattern's dtype), partition-major.
    pub fn put(&mut self, ap: &AccessPattern, vals: &[f32]) {
        self.mem.write_f32(ap, vals, &mut Rounding::NearestEven).unwrap();
    }

    /// Stores raw element bits, partition-major.
    pub fn put_bits(&mut self, ap: &AccessPattern, bits: &[u32]) {
        self.mem.write_bits(ap, bits).unwrap();
    }

    pub fn get(&self, ap: &AccessPattern) -> Vec<f32> {
        self.mem.read_f32(ap).unwrap()
    }

    pub fn get_bits(&self, ap: &AccessPattern) -> Vec<u32> {
        self.mem.read_bits(ap).unwrap()
    }
}

/// `[partitions × free]` SBUF tile at byte `offset`, contiguous.
pub fn sb(dtype: DType, partitions: usize, free: usize, offset: u64) -> AccessPattern {
    AccessPattern::sbuf(dtype, 0, partitions, offset, vec![[1, free as i64]])
}

/// `[partitions × free]` PSUM tile at byte `offset`, contiguous.
pub fn ps(dtype: DType, partitions: usize, free: usize, offset: u64) -> AccessPattern {
    AccessPattern::psum(dtype, 0, partitions, offset, vec![[1, free as i64]])
}

/// The same tile starting at another partition.
pub fn at_partition(ap: AccessPattern, start: usize) -> AccessPattern {
    AccessPattern {
        start_partition: start,
        ..ap
    }
}

/// Bit patterns of f32 values (for exact comparisons that see -0 and NaN payloads).
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Asserts `result` failed with an error on `operand` whose kind satisfies `pred`.
#[track_caller]
pub fn expect_err(result: Result<(), OperandError>, operand: &str, pred: impl Fn(&ErrorKind) -> bool) {
    match result {
        Ok(()) => panic!("expected an error on `{operand}`, the instruction succeeded"),
        Err(e) => {
            assert_eq!(e.operand.as_deref(), Some(operand), "wrong operand in {e:?}");
            assert!(pred(&e.kind), "unexpected error kind: {:?} ({})", e.kind, e.kind);
        }
    }
}
