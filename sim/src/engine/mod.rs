//! The engines. Each instruction's semantics is one function in its engine's file; [`execute`]
//! is the single exhaustive dispatch. Shared pieces: [`alu`] (ALU operators) and [`activation`]
//! (ScalarE functions), and [`Ctx`], through which every instruction touches memory so that the
//! engine's access rights and the target's limits are enforced in one place.

pub mod activation;
pub mod alu;
pub mod cores;
pub mod dma;
pub mod gpsimd;
pub mod mx;
pub mod scalar;
pub mod tensor;
pub mod vector;

use crate::dtype::{DType, Rounding};
use crate::error::{AtOperand, ErrorKind, OpResult, OperandError};
use crate::mem::{AccessPattern, MemSpace, Memories};
use crate::numerics::Numerics;
use crate::program::{Engine, Op, ScalarOperand};
use crate::stats::Stats;
use crate::target::Target;

/// Architectural state beyond memory.
#[derive(Clone, Debug)]
pub struct Registers {
    /// ScalarE per-partition accumulators (shared by `activation` reduce commands).
    pub act_acc: Vec<f32>,
    /// VectorE random generator state (see `vector::rng`).
    pub vector_rng: u64,
}

impl Registers {
    pub fn new(target: &Target) -> Self {
        Registers {
            act_acc: vec![0.0; target.partitions],
            vector_rng: vector::DEFAULT_RNG_SEED,
        }
    }
}

/// What one instruction sees while it executes.
pub struct Ctx<'a> {
    pub mem: &'a mut Memories,
    pub target: &'a Target,
    pub numerics: &'a Numerics,
    pub rounding: &'a mut Rounding,
    pub engine: Engine,
    pub regs: &'a mut Registers,
    pub stats: &'a mut Stats,
}

/// Whether `engine` may execute `op` on `target`.
pub fn runs_on(target: &Target, op: &Op, engine: Engine) -> bool {
    check_runs_on(target, op, engine).is_ok()
}

/// Why `engine` may not execute `op` on `target`: [`ErrorKind::NotOnTarget`] (naming the
/// generation) when the core lacks the instruction or gives it to this engine only on another
/// generation, [`ErrorKind::WrongEngine`] when no generation runs it there. Capability lookups
/// in [`Target`] only: no generation's name is tested.
pub fn check_runs_on(target: &Target, op: &Op, engine: Engine) -> Result<(), ErrorKind> {
    let opcode = op.name();
    let not_on_target = || ErrorKind::NotOnTarget {
        opcode,
        target: target.label,
    };
    if !target.has_instruction(opcode) {
        return Err(not_on_target());
    }
    if op.engines().contains(&engine) {
        return Ok(());
    }
    if engine == Engine::Scalar && target.scalar_extra_instructions.contains(&opcode) {
        return Ok(());
    }
    if engine == Engine::Scalar && LATER_SCALAR_INSTRUCTIONS.contains(&opcode) {
        return Err(not_on_target());
    }
    Err(ErrorKind::WrongEngine {
        engine: engine.name(),
        opcode,
    })
}

/// Instructions some generation's ScalarE executes beyond NC-v2's engines (NC-v3: `tensor_copy`,
/// `tensor_scalar` [neuroncore-isa.md §5.0]); on a core without them the error says "not on
/// this chip" rather than "wrong engine".
const LATER_SCALAR_INSTRUCTIONS: &[&str] = &["tensor_copy", "tensor_scalar"];

/// Instructions whose operands may be `_x4` packed MX containers [`nki.isa` 2.32: `quantize_mx`
/// writes them, `nc_matmul_mx` reads them; DMA moves bytes; `memset` writes them (0 only)].
/// Every other instruction decodes elements as numbers, which a packed container is not.
const PACKED_DTYPE_INSTRUCTIONS: &[&str] = &["quantize_mx", "nc_matmul_mx", "dma_copy", "memset"];

/// Every dtype an instruction's operands use must exist on the core
/// ([`ErrorKind::DTypeNotOnTarget`] naming the generation and the dtype), and a packed MX
/// container is only an operand of the instructions that take one (`UnsupportedDType`).
pub fn check_dtypes(target: &Target, op: &Op) -> Result<(), OperandError> {
    for (name, ap) in op.operands().into_iter().map(|o| (o.name, o.ap)) {
        if !target.has_dtype(ap.dtype) {
            return Err(OperandError {
                operand: Some(name.to_string()),
                kind: ErrorKind::DTypeNotOnTarget {
                    dtype: ap.dtype.name(),
                    target: target.label,
                },
            });
        }
        if ap.dtype.is_packed() && !PACKED_DTYPE_INSTRUCTIONS.contains(&op.name()) {
            return Err(OperandError {
                operand: Some(name.to_string()),
                kind: ErrorKind::UnsupportedDType {
                    dtype: ap.dtype.name(),
                    why: format!(
                        "a packed MX container is an operand only of {}",
                        PACKED_DTYPE_INSTRUCTIONS.join(", ")
                    ),
                },
            });
        }
    }
    Ok(())
}

/// Executes one instruction. Exhaustive: a new `Op` variant does not compile until it has
/// semantics here.
pub fn execute(ctx: &mut Ctx, op: &Op) -> OpResult<()> {
    match op {
        Op::NcMatmul(i) => tensor::nc_matmul(ctx, i),
        Op::NcTranspose(i) => match ctx.engine {
            Engine::Tensor => tensor::nc_transpose(ctx, i),
            _ => vector::transpose32(ctx, i),
        },
        Op::TensorTensor(i) => vector::tensor_tensor(ctx, i),
        Op::TensorScalar(i) => vector::tensor_scalar(ctx, i),
        Op::ScalarTensorTensor(i) => vector::scalar_tensor_tensor(ctx, i),
        Op::TensorReduce(i) => vector::tensor_reduce(ctx, i),
        Op::TensorTensorScan(i) => vector::tensor_tensor_scan(ctx, i),
        Op::TensorScalarReduce(i) => vector::tensor_scalar_reduce(ctx, i),
        Op::TensorCopy(i) => vector::tensor_copy(ctx, i),
        Op::TensorCopyPredicated(i) => vector::tensor_copy_predicated(ctx, i),
        Op::TensorCopyDynamicSrc(i) => vector::tensor_copy_dynamic(ctx, i, vector::DynamicSide::Src),
        Op::TensorCopyDynamicDst(i) => vector::tensor_copy_dynamic(ctx, i, vector::DynamicSide::Dst),
        Op::Reciprocal(i) => vector::reciprocal(ctx, i),
        Op::BnStats(i) => vector::bn_stats(ctx, i),
        Op::BnAggr(i) => vector::bn_aggr(ctx, i),
        Op::Max8(i) => vector::max8(ctx, i),
        Op::FindIndex8(i) => vector::find_index8(ctx, i),
        Op::MatchReplace8(i) => vector::match_replace8(ctx, i),
        Op::Memset(i) => vector::memset(ctx, i),
        Op::SelectReduce(i) => vector::select_reduce(ctx, i),
        Op::Dropout(i) => vector::dropout(ctx, i),
        Op::Rng(i) => vector::rng(ctx, i),
        Op::SetRngSeed(i) => vector::set_rng_seed(ctx, i),
        Op::StreamShuffle(i) => vector::stream_shuffle(ctx, i),
        Op::RangeSelect(i) => vector::range_select(ctx, i),
        Op::NonzeroWithCount(i) => gpsimd::nonzero_with_count(ctx, i),
        Op::QuantizeMx(i) => vector::quantize_mx(ctx, i),
        Op::NcMatmulMx(i) => tensor::nc_matmul_mx(ctx, i),
        Op::Activation(i) => scalar::activation(ctx, i),
        Op::Iota(i) => gpsimd::iota(ctx, i),
        Op::AffineSelect(i) => gpsimd::affine_select(ctx, i),
        Op::LocalGather(i) => gpsimd::local_gather(ctx, i),
        Op::NGather(i) => gpsimd::n_gather(ctx, i),
        Op::TensorPartitionReduce(i) => gpsimd::tensor_partition_reduce(ctx, i),
        Op::SequenceBounds(i) => gpsimd::sequence_bounds(ctx, i),
        Op::DmaCopy(i) => dma::dma_copy(ctx, i),
        Op::DmaTranspose(i) => dma::dma_transpose(ctx, i),
        Op::DmaCompute(i) => dma::dma_compute(ctx, i),
        Op::CoreBarrier(i) => cores::core_barrier(ctx, i),
    }
}

/// Whether a memory access is a read or a write (for the engine access rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

impl Ctx<'_> {
    /// Enforces which memories the current engine may touch:
    /// TensorE reads only SBUF and writes only PSUM; GpSimdE touches only SBUF; Vector/ScalarE
    /// touch SBUF and PSUM; only DMA touches HBM, and DMA does not touch PSUM.
    pub fn check_access(&self, operand: &str, ap: &AccessPattern, access: Access) -> OpResult<()> {
        let ok = match (self.engine, &ap.mem, access) {
            (Engine::Tensor, MemSpace::Sbuf, Access::Read) => true,
            (Engine::Tensor, MemSpace::Psum, Access::Write) => true,
            (Engine::Tensor, MemSpace::Psum, Access::Read) => true, // accumulate reads its own bank
            (Engine::Tensor, _, _) => false,
            (Engine::Vector | Engine::Scalar, MemSpace::Sbuf | MemSpace::Psum, _) => true,
            (Engine::Gpsimd, MemSpace::Sbuf, _) => true,
            (Engine::Dma, MemSpace::Sbuf | MemSpace::Hbm(_), _) => true,
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(ErrorKind::MemoryNotAccessible {
                engine: self.engine.name(),
                access: if access == Access::Read { "read" } else { "write" },
                memory: ap.mem.name(),
            })
            .at(operand)
        }
    }

    /// Vector/Scalar/GpSimd per-instruction free-size limit (64K elements from SBUF, 4K from PSUM).
    pub fn check_free_limit(&self, operand: &str, ap: &AccessPattern) -> OpResult<()> {
        let (limit, what) = match ap.mem {
            MemSpace::Psum => (self.target.engine_fmax_psum, "elements per partition from PSUM"),
            _ => (self.target.engine_fmax_sbuf, "elements per partition from SBUF"),
        };
        let size = ap.free_elems();
        if size > limit {
            return Err(ErrorKind::FreeSizeLimit { size, limit, what }).at(operand);
        }
        Ok(())
    }

    /// The start-partition rule binds compute-engine operands (DMA descriptors address any
    /// partition).
    pub fn check_start_partition(&self, operand: &str, ap: &AccessPattern) -> OpResult<()> {
        if self.engine != Engine::Dma
            && ap.mem.is_on_chip()
            && !self
                .target
                .start_partition_rule
                .allows(ap.start_partition, ap.partitions)
        {
            return Err(ErrorKind::StartPartition {
                start: ap.start_partition,
                count: ap.partitions,
            })
            .at(operand);
        }
        Ok(())
    }

    fn read_checks(&self, operand: &str, ap: &AccessPattern) -> OpResult<()> {
        self.check_access(operand, ap, Access::Read)?;
        self.check_start_partition(operand, ap)?;
        if self.engine != Engine::Dma && self.engine != Engine::Tensor {
            self.check_free_limit(operand, ap)?;
        }
        Ok(())
    }

    fn write_checks(&self, operand: &str, ap: &AccessPattern) -> OpResult<()> {
        self.check_access(operand, ap, Access::Write)?;
        self.check_start_partition(operand, ap)?;
        if self.engine != Engine::Dma && self.engine != Engine::Tensor {
            self.check_free_limit(operand, ap)?;
        }
        Ok(())
    }

    /// Reads an operand as f32 (partition-major).
    pub fn read_f32(&self, operand: &str, ap: &AccessPattern) -> OpResult<Vec<f32>> {
        self.read_checks(operand, ap)?;
        self.mem.read_f32(ap).at(operand)
    }

    /// Reads an operand's raw bits (partition-major).
    pub fn read_bits(&self, operand: &str, ap: &AccessPattern) -> OpResult<Vec<u32>> {
        self.read_checks(operand, ap)?;
        self.mem.read_bits(ap).at(operand)
    }

    /// Reads an integer operand exactly.
    pub fn read_i64(&self, operand: &str, ap: &AccessPattern) -> OpResult<Vec<i64>> {
        self.read_checks(operand, ap)?;
        self.mem.read_i64(ap).at(operand)
    }

    /// Writes f32 results with a cast to the operand's dtype (the engine's "cast on write").
    pub fn write_f32(&mut self, operand: &str, ap: &AccessPattern, vals: &[f32]) -> OpResult<()> {
        self.write_checks(operand, ap)?;
        self.mem.write_f32(ap, vals, self.rounding).at(operand)?;
        self.stats.elements.add(self.engine, vals.len() as u64);
        Ok(())
    }

    /// Writes raw bits.
    pub fn write_bits(&mut self, operand: &str, ap: &AccessPattern, bits: &[u32]) -> OpResult<()> {
        self.write_checks(operand, ap)?;
        self.mem.write_bits(ap, bits).at(operand)?;
        self.stats.elements.add(self.engine, bits.len() as u64);
        Ok(())
    }

    /// Writes integers exactly (saturating to the dtype).
    pub fn write_i64(&mut self, operand: &str, ap: &AccessPattern, vals: &[i64]) -> OpResult<()> {
        self.write_checks(operand, ap)?;
        self.mem.write_i64(ap, vals).at(operand)?;
        self.stats.elements.add(self.engine, vals.len() as u64);
        Ok(())
    }

    /// Resolves a per-partition scalar operand to one f32 per partition.
    pub fn scalar_f32(&self, operand: &str, s: &ScalarOperand, partitions: usize) -> OpResult<Vec<f32>> {
        match s {
            ScalarOperand::Imm(v) => Ok(vec![*v as f32; partitions]),
            ScalarOperand::Tile(ap) => {
                check_scalar_tile(operand, ap, partitions)?;
                self.read_f32(operand, ap)
            }
        }
    }

    /// Resolves a per-partition scalar operand to one exact integer per partition.
    pub fn scalar_i64(&self, operand: &str, s: &ScalarOperand, partitions: usize) -> OpResult<Vec<i64>> {
        match s {
            ScalarOperand::Imm(v) => {
                if v.fract() != 0.0 || !v.is_finite() {
                    return Err(ErrorKind::Invalid(format!("integer immediate expected, got {v}"))).at(operand);
                }
                Ok(vec![*v as i64; partitions])
            }
            ScalarOperand::Tile(ap) => {
                check_scalar_tile(operand, ap, partitions)?;
                if ap.dtype.is_float() {
                    return Err(ErrorKind::UnsupportedDType {
                        dtype: ap.dtype.name(),
                        why: "integer operand expected".into(),
                    })
                    .at(operand);
                }
                self.read_i64(operand, ap)
            }
        }
    }

    /// Adds estimated busy time for this instruction: `cycles` on the current engine's clock.
    pub fn cost_cycles(&mut self, cycles: u64) {
        let ghz = match self.engine {
            Engine::Tensor => self.target.tensor_ghz,
            Engine::Vector => self.target.vector_ghz,
            Engine::Scalar => self.target.scalar_ghz,
            Engine::Gpsimd => self.target.gpsimd_ghz,
            Engine::Dma => 1.0,
        };
        self.stats.est_ns.add(self.engine, cycles as f64 / ghz);
    }

    /// The usual `max(MIN_II, n)` cost of a streaming instruction over `n` elements/partition.
    pub fn cost_stream(&mut self, per_partition: usize) {
        let c = (per_partition as u64)
            .div_ceil(self.target.stream_elems_per_cycle.max(1))
            .max(self.target.min_ii_cycles);
        self.cost_cycles(c);
    }
}

fn check_scalar_tile(operand: &str, ap: &AccessPattern, partitions: usize) -> OpResult<()> {
    if ap.partitions != partitions || ap.free_elems() != 1 {
        return Err(ErrorKind::ShapeMismatch(format!(
            "per-partition scalar must be [{partitions}, 1], got [{}, {}]",
            ap.partitions,
            ap.free_elems()
        )))
        .at(operand);
    }
    Ok(())
}

/// Requires two operands to have the same partitions and elements per partition.
pub fn same_shape(a_name: &str, a: &AccessPattern, b_name: &str, b: &AccessPattern) -> OpResult<()> {
    if a.partitions != b.partitions || a.free_elems() != b.free_elems() {
        return Err(OperandError {
            operand: Some(b_name.to_string()),
            kind: ErrorKind::ShapeMismatch(format!(
                "`{a_name}` is [{} partitions × {}], `{b_name}` is [{} × {}]",
                a.partitions,
                a.free_elems(),
                b.partitions,
                b.free_elems()
            )),
        });
    }
    Ok(())
}

/// Requires a dtype from a list.
pub fn require_dtype(operand: &str, ap: &AccessPattern, allowed: &[DType], why: &str) -> OpResult<()> {
    if allowed.contains(&ap.dtype) {
        Ok(())
    } else {
        Err(ErrorKind::UnsupportedDType {
            dtype: ap.dtype.name(),
            why: why.to_string(),
        })
        .at(operand)
    }
}

/// The "not yet implemented" error for an instruction whose semantics are missing.
pub fn unimplemented(opcode: &str) -> OpResult<()> {
    Err(ErrorKind::Unsupported(format!("{opcode}: semantics not implemented in this simulator version")).into())
}
