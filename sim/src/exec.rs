//! Runs a program: validates declarations and inputs, dispatches each instruction to its
//! engine's semantics in program order, and returns the HBM outputs with statistics.

use crate::dtype::{DType, Rounding, StochasticRng};
use crate::engine::{self, Ctx, Registers};
use crate::error::{ErrorKind, SimError};
use crate::mem::Memories;
// The settings and the counts live in their own modules (the engines import them, never this
// one); re-exported here so `trnsim::exec::Numerics` and the like keep their paths.
pub use crate::numerics::{ActivationModel, Denormals, MatmulAccumulation, NanMaxMin, Numerics, RoundingMode};
use crate::program::{HbmRole, Program};
pub use crate::stats::{EngineCounts, EngineTimes, Stats};
use crate::target::{Target, TargetName};
use crate::timeline::Scheduler;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};

/// A tensor on the host: contiguous little-endian bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

impl HostTensor {
    pub fn num_elems(&self) -> usize {
        self.shape.iter().product()
    }

    /// Builds an f32 tensor from values (test and bench convenience).
    pub fn from_f32(shape: &[usize], vals: &[f32]) -> Self {
        HostTensor {
            dtype: DType::F32,
            shape: shape.to_vec(),
            data: vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// Encodes f32 values into `dtype` with round to nearest even.
    pub fn from_f32_as(dtype: DType, shape: &[usize], vals: &[f32]) -> Self {
        let mut data = vec![0u8; vals.len() * dtype.size()];
        let mut r = Rounding::NearestEven;
        crate::dtype::encode_run(dtype, &mut r, vals, &mut data, 0, dtype.size());
        HostTensor {
            dtype,
            shape: shape.to_vec(),
            data,
        }
    }

    /// Decodes to f32 values.
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.num_elems());
        crate::dtype::decode_run(self.dtype, &self.data, 0, self.num_elems(), self.dtype.size(), &mut out);
        out
    }

    /// Raw element bits.
    pub fn bits(&self) -> Vec<u32> {
        (0..self.num_elems())
            .map(|i| crate::dtype::load_bits(self.dtype, &self.data, i * self.dtype.size()))
            .collect()
    }
}

/// Executor settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecConfig {
    pub numerics: Numerics,
    /// Refuse programs whose HBM tensors add up to more than this (protects the host).
    pub max_hbm_bytes: usize,
    /// Refuse programs with more instructions than this.
    pub max_instructions: usize,
    /// Build the timeline (per-instruction start/end, makespan, critical path) in
    /// `Stats::timeline`. Costs little; see docs/performance.md.
    #[serde(default = "yes")]
    pub timeline: bool,
    /// Check that every pair of conflicting memory accesses from different queues is ordered by
    /// queue order and waits (docs/timeline.md); an unordered pair is an `ErrorKind::Race`.
    /// On by default; switching it off saves its cost (docs/performance.md) and nothing else.
    /// A two-core (LNC=2) program is checked whatever this says: its values come from program
    /// order, which gives what the concurrent cores give only when no cross-core pair of accesses
    /// is unordered (docs/timeline.md, "Two cores"), so an unchecked run could be silently wrong.
    #[serde(default = "yes")]
    pub race_check: bool,
}

fn yes() -> bool {
    true
}

impl Default for ExecConfig {
    fn default() -> Self {
        ExecConfig {
            numerics: Numerics::default(),
            max_hbm_bytes: 4 << 30,
            max_instructions: 10_000_000,
            timeline: true,
            race_check: true,
        }
    }
}

/// The result of a run.
#[derive(Clone, Debug)]
pub struct RunResult {
    pub outputs: BTreeMap<String, HostTensor>,
    pub stats: Stats,
}

/// Runs programs on one simulated NeuronCore.
#[derive(Clone, Debug)]
pub struct Executor {
    pub target: Target,
    pub config: ExecConfig,
}

impl Executor {
    pub fn new(target: TargetName) -> Self {
        Executor {
            target: target.params(),
            config: ExecConfig::default(),
        }
    }

    pub fn with_config(target: TargetName, config: ExecConfig) -> Self {
        Executor {
            target: target.params(),
            config,
        }
    }

    /// Runs `program` on `inputs` (one per Input declaration). Never panics on any program.
    pub fn run(&self, program: &Program, inputs: &BTreeMap<String, HostTensor>) -> Result<RunResult, SimError> {
        let mut mem = self.prepare(program)?;
        for decl in program.hbm.iter().filter(|d| d.role == HbmRole::Input) {
            let t = inputs.get(&decl.name).ok_or_else(|| {
                SimError::program(ErrorKind::Invalid(format!(
                    "no input given for HBM tensor `{}`",
                    decl.name
                )))
            })?;
            if t.dtype != decl.dtype || t.shape != decl.shape {
                return Err(SimError::program(ErrorKind::ShapeMismatch(format!(
                    "input `{}` is {} {:?}, the program declares {} {:?}",
                    decl.name, t.dtype, t.shape, decl.dtype, decl.shape
                ))));
            }
            mem.load_input(&decl.name, &t.data).map_err(SimError::program)?;
        }
        let stats = self.execute(program, &mut mem)?;
        let outputs = mem
            .into_outputs()
            .map(|t| {
                (
                    t.decl.name,
                    HostTensor {
                        dtype: t.decl.dtype,
                        shape: t.decl.shape,
                        data: t.data,
                    },
                )
            })
            .collect();
        Ok(RunResult { outputs, stats })
    }

    /// Checks `program` against this executor and allocates its memories, every HBM tensor
    /// unwritten. The caller fills the inputs, then calls [`Executor::execute`].
    pub(crate) fn prepare(&self, program: &Program) -> Result<Memories, SimError> {
        self.prepare_in(program, &mut crate::mem::Arena::default())
    }

    /// [`Executor::prepare`] in on-chip buffers kept from an earlier run (a session's arena).
    pub(crate) fn prepare_in(&self, program: &Program, arena: &mut crate::mem::Arena) -> Result<Memories, SimError> {
        if program.target != self.target.name {
            return Err(SimError::program(ErrorKind::Invalid(format!(
                "program is for {}, the executor simulates {}",
                program.target.name(),
                self.target.name.name()
            ))));
        }
        self.validate_declarations(program)?;
        let (sbuf_bytes, psum_bytes) = program.on_chip_extent(&self.target);
        Ok(Memories::with_extents_in(
            &self.target,
            &program.hbm,
            sbuf_bytes,
            psum_bytes,
            arena,
        ))
    }

    /// Runs every instruction of `program` on `mem` (inputs already loaded by the caller), then
    /// checks that every output was fully written. `mem` stays the caller's, error or not.
    pub(crate) fn execute(&self, program: &Program, mem: &mut Memories) -> Result<Stats, SimError> {
        self.execute_checked(program, mem, self.race_checks(program))
    }

    /// Whether runs of `program` are race-checked: as `config.race_check` says, and always for a
    /// program on two cores (see [`ExecConfig::race_check`]).
    pub(crate) fn race_checks(&self, program: &Program) -> bool {
        self.config.race_check || program.instructions.iter().any(|i| i.core != 0)
    }

    /// [`Executor::execute`], with the race detector on only when `race_check` (a session that
    /// already proved this very program race-free passes false; the timeline is built either way
    /// when the config asks for it).
    pub(crate) fn execute_checked(
        &self,
        program: &Program,
        mem: &mut Memories,
        race_check: bool,
    ) -> Result<Stats, SimError> {
        // LNC=2: the second physical core's SBUF and PSUM, swapped in while its instructions
        // run (HBM is shared); swapped back before returning, error or not.
        let mut other_core = program.instructions.iter().any(|i| i.core != 0).then(|| mem.new_core());
        let mut on_core = 0u8;
        let result = self.execute_cores(program, mem, &mut other_core, &mut on_core, race_check);
        if on_core != 0
            && let Some(other) = other_core.as_mut()
        {
            mem.swap_core(other);
        }
        result
    }

    fn execute_cores(
        &self,
        program: &Program,
        mem: &mut Memories,
        other_core: &mut Option<crate::mem::CoreMemory>,
        on_core: &mut u8,
        race_check: bool,
    ) -> Result<Stats, SimError> {
        let mut rounding = match self.config.numerics.rounding {
            RoundingMode::NearestEven => Rounding::NearestEven,
            RoundingMode::Stochastic { seed } => Rounding::Stochastic(StochasticRng::new(seed)),
        };
        let mut core_regs = [Registers::new(&self.target), Registers::new(&self.target)];
        let mut barriers = crate::deps::BarrierPairs::default();
        let cores_allowed = self.target.lnc_allowed.iter().copied().max().unwrap_or(1);
        let mut stats = Stats::default();
        let scheduling = self.config.timeline || race_check;
        let mut sched = Scheduler::new(program, self.target.dma_queues, race_check);
        for (index, inst) in program.instructions.iter().enumerate() {
            let fail = |operand: Option<String>, kind: ErrorKind| SimError {
                index: Some(index),
                engine: Some(inst.engine),
                opcode: Some(inst.op.name()),
                operand,
                loc: inst.loc.clone(),
                kind,
            };
            if let Some(&w) = inst.wait.iter().find(|&&w| w as usize >= index) {
                return Err(fail(
                    None,
                    ErrorKind::Invalid(format!("waits for instruction #{w}, which is not earlier")),
                ));
            }
            if inst.core as usize >= cores_allowed {
                return Err(fail(
                    None,
                    ErrorKind::Invalid(format!(
                        "runs on physical core {}, but a logical core of {} has {} (LNC {:?})",
                        inst.core, self.target.label, cores_allowed, self.target.lnc_allowed
                    )),
                ));
            }
            let partner = barriers
                .step(program, index)
                .map_err(|m| fail(None, ErrorKind::Invalid(m)))?;
            if inst.core != *on_core
                && let Some(other) = other_core.as_mut()
            {
                mem.swap_core(other);
                *on_core = inst.core;
            }
            let regs = &mut core_regs[inst.core.min(1) as usize];
            engine::check_runs_on(&self.target, &inst.op, inst.engine).map_err(|k| fail(None, k))?;
            engine::check_dtypes(&self.target, &inst.op).map_err(|e| fail(e.operand, e.kind))?;
            let queue = sched.queue(inst).map_err(|k| fail(None, k))?;
            let busy_before = stats.est_ns.get(inst.engine);
            let mut ctx = Ctx {
                mem: &mut *mem,
                target: &self.target,
                numerics: &self.config.numerics,
                rounding: &mut rounding,
                engine: inst.engine,
                regs,
                stats: &mut stats,
            };
            engine::execute(&mut ctx, &inst.op).map_err(|e| fail(e.operand, e.kind))?;
            stats.instructions.add(inst.engine, 1);
            if scheduling {
                let duration = stats.est_ns.get(inst.engine) - busy_before;
                sched
                    .step(program, index, queue, duration, partner)
                    .map_err(|race| fail(Some(race.operand.to_string()), race.kind))?;
            }
        }
        if let Some((i, c)) = barriers.unmatched() {
            return Err(SimError {
                index: Some(i),
                engine: Some(program.instructions[i].engine),
                opcode: Some("core_barrier"),
                operand: None,
                loc: program.instructions[i].loc.clone(),
                kind: ErrorKind::Invalid(format!(
                    "core {c}'s core_barrier has no partner on core {}: the cores would wait forever",
                    1 - c
                )),
            });
        }
        if scheduling {
            stats.timeline = sched.finish();
        }
        for t in mem.outputs() {
            if let Some(first) = mem.first_unwritten(&t.decl.name) {
                return Err(SimError::program(ErrorKind::Invalid(format!(
                    "output `{}` was not fully written by the program: element {first} never was",
                    t.decl.name
                ))));
            }
        }
        Ok(stats)
    }

    /// Checks a program's declarations against this executor's limits (instruction count, unique
    /// names, total HBM bytes) without allocating anything: what `run` checks first. A caller that
    /// builds inputs from the declarations (the `trnsim` CLI zero-fills them) calls it before.
    pub fn validate_declarations(&self, program: &Program) -> Result<(), SimError> {
        if program.instructions.len() > self.config.max_instructions {
            return Err(SimError::program(ErrorKind::Invalid(format!(
                "{} instructions, the executor accepts at most {}",
                program.instructions.len(),
                self.config.max_instructions
            ))));
        }
        let mut names = HashSet::new();
        let mut total: usize = 0;
        for d in &program.hbm {
            if !self.target.has_dtype(d.dtype) {
                return Err(SimError::program(ErrorKind::DTypeNotOnTarget {
                    dtype: d.dtype.name(),
                    target: self.target.label,
                }));
            }
            if !names.insert(d.name.as_str()) {
                return Err(SimError::program(ErrorKind::Invalid(format!(
                    "HBM tensor `{}` declared twice",
                    d.name
                ))));
            }
            let bytes = d
                .shape
                .iter()
                .try_fold(d.dtype.size(), |acc, &s| acc.checked_mul(s))
                .and_then(|b| total.checked_add(b).map(|t| (b, t)));
            match bytes {
                Some((_, t)) if t <= self.config.max_hbm_bytes => total = t,
                _ => {
                    return Err(SimError::program(ErrorKind::Invalid(format!(
                        "HBM tensors exceed the executor's limit of {} bytes (at `{}`)",
                        self.config.max_hbm_bytes, d.name
                    ))));
                }
            }
        }
        Ok(())
    }
}
