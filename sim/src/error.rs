//! Typed errors. Every error from running a program names the instruction (index, engine, opcode),
//! the operand, and what was violated, so that a lowering bug is found from the message alone.

use crate::program::Engine;
use std::fmt;
use thiserror::Error;

/// What went wrong, independent of where.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum ErrorKind {
    #[error("{count} partitions requested, the target has {max}")]
    TooManyPartitions { count: usize, max: usize },
    #[error("partitions {start}..{end} run past partition {max}")]
    PartitionOutOfRange { start: usize, end: usize, max: usize },
    #[error(
        "start partition {start} is illegal for an operand of {count} partitions (NC-v2 rule: >64 start at 0; 33-64 at 0/64; <=32 at 0/32/64/96)"
    )]
    StartPartition { start: usize, count: usize },
    #[error("{dims} free dimensions, at most {max} allowed")]
    TooManyFreeDims { dims: usize, max: usize },
    #[error("free dimension {dim}: {what}")]
    BadFreeDim { dim: usize, what: String },
    #[error("bytes {start}..{end} of each partition are outside {memory} ({limit} bytes per partition usable)")]
    OutOfBounds {
        memory: &'static str,
        start: i64,
        end: i64,
        limit: usize,
    },
    #[error("elements {start}..{end} are outside HBM tensor `{tensor}` of {len} elements")]
    HbmOutOfBounds {
        tensor: String,
        start: i64,
        end: i64,
        len: usize,
    },
    #[error("HBM tensor `{0}` is not declared by the program")]
    UnknownTensor(String),
    #[error("byte offset {offset} is not aligned to the {dtype} element size")]
    Misaligned { offset: u64, dtype: &'static str },
    #[error("reads memory nothing wrote: {memory} partition {partition}, byte {byte}")]
    UninitializedRead {
        memory: String,
        partition: usize,
        byte: usize,
    },
    #[error("{engine} cannot {access} {memory}")]
    MemoryNotAccessible {
        engine: &'static str,
        access: &'static str,
        memory: &'static str,
    },
    #[error("{engine} does not execute {opcode}")]
    WrongEngine { engine: &'static str, opcode: &'static str },
    #[error("{opcode} is not available on {target}")]
    NotOnTarget { opcode: &'static str, target: &'static str },
    /// A dtype the generation lacks (`Target::dtypes`); `target` is the generation's label.
    #[error("dtype {dtype} does not exist on {target}")]
    DTypeNotOnTarget { dtype: &'static str, target: &'static str },
    #[error("dtype {dtype} is not accepted here: {why}")]
    UnsupportedDType { dtype: &'static str, why: String },
    #[error("shape mismatch: {0}")]
    ShapeMismatch(String),
    #[error("free size {size} exceeds the limit of {limit} ({what})")]
    FreeSizeLimit {
        size: usize,
        limit: usize,
        what: &'static str,
    },
    #[error(
        "matmul output of {bytes} bytes per partition at byte {offset} crosses a PSUM bank boundary (banks are {bank} bytes)"
    )]
    PsumBankOverflow { offset: u64, bytes: usize, bank: usize },
    #[error("invalid operand: {0}")]
    Invalid(String),
    #[error("{0}")]
    Unsupported(String),
    /// Two conflicting accesses from different queues that no wait orders (docs/timeline.md).
    #[error("{0}")]
    Race(Box<RaceDetail>),
    #[error(
        "index {index} read from partition {partition} is out of range: it addresses elements {index}..{end} of a {len}-element row"
    )]
    IndexOutOfRange {
        index: u64,
        partition: usize,
        end: u64,
        len: usize,
    },
}

/// The two sides of a race, reported on the later instruction.
#[derive(Clone, Debug, PartialEq)]
pub struct RaceDetail {
    /// `read-after-write`, `write-after-read` or `write-after-write`.
    pub hazard: &'static str,
    /// The earlier instruction of the pair.
    pub other: usize,
    pub other_engine: &'static str,
    pub other_queue: String,
    pub other_opcode: &'static str,
    pub other_operand: &'static str,
    pub other_loc: Option<String>,
    /// `loc` of the later instruction (the one the error is reported on).
    pub loc: Option<String>,
    /// The memory both touch: `SBUF partitions 0..128, bytes 0..512 of each`.
    pub range: String,
}

impl fmt::Display for RaceDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} race with instruction #{} ({} {} on queue {}, operand `{}`",
            self.hazard, self.other, self.other_engine, self.other_opcode, self.other_queue, self.other_operand
        )?;
        if let Some(l) = &self.other_loc {
            write!(f, " at {l}")?;
        }
        write!(f, ") on {}: no wait orders them", self.range)?;
        if let Some(l) = &self.loc {
            write!(f, " (this instruction is at {l})")?;
        }
        Ok(())
    }
}

/// An error raised while executing one instruction of a program.
#[derive(Clone, Debug, PartialEq)]
pub struct SimError {
    /// Index of the instruction in the program (0-based); `None` for program-level errors.
    pub index: Option<usize>,
    pub engine: Option<Engine>,
    /// Opcode name (`tensor_tensor`, `dma_copy`, …).
    pub opcode: Option<&'static str>,
    /// Operand name (`dst`, `src`, `stationary`, …), when one operand is at fault.
    pub operand: Option<String>,
    /// The failing instruction's source location ([`crate::Instruction::loc`], e.g. the NKI
    /// kernel's `file:line`), when the program records one.
    pub loc: Option<String>,
    pub kind: ErrorKind,
}

impl SimError {
    /// An error that belongs to the program as a whole (inputs, outputs, declarations).
    pub fn program(kind: ErrorKind) -> Self {
        SimError {
            index: None,
            engine: None,
            opcode: None,
            operand: None,
            loc: None,
            kind,
        }
    }
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.index, self.engine, self.opcode) {
            (Some(i), Some(e), Some(op)) => write!(f, "instruction #{i} ({} {op})", e.name())?,
            (Some(i), _, _) => write!(f, "instruction #{i}")?,
            _ => write!(f, "program")?,
        }
        if let Some(loc) = &self.loc {
            write!(f, " at {loc}")?;
        }
        if let Some(operand) = &self.operand {
            write!(f, " operand `{operand}`")?;
        }
        write!(f, ": {}", self.kind)
    }
}

impl std::error::Error for SimError {}

/// Errors inside one instruction carry the operand name; the executor adds index and engine.
#[derive(Clone, Debug, PartialEq)]
pub struct OperandError {
    pub operand: Option<String>,
    pub kind: ErrorKind,
}

impl From<ErrorKind> for OperandError {
    fn from(kind: ErrorKind) -> Self {
        OperandError { operand: None, kind }
    }
}

/// Attaches an operand name to an error kind.
pub trait AtOperand<T> {
    fn at(self, operand: &str) -> Result<T, OperandError>;
}

impl<T> AtOperand<T> for Result<T, ErrorKind> {
    fn at(self, operand: &str) -> Result<T, OperandError> {
        self.map_err(|kind| OperandError {
            operand: Some(operand.to_string()),
            kind,
        })
    }
}

pub type OpResult<T> = Result<T, OperandError>;
