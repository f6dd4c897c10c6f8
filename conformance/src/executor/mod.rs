//! Executors run a lowered program on inputs and return its outputs. They never compare or judge:
//! the runner does that, the same way for every executor.
//!
//! [`SimExecutor`] runs the trnsim simulator in process. [`process::ProcessExecutor`] (the hardware
//! adapter) speaks a JSON-lines protocol to a child process (docs/executor-protocol.md) and runs
//! whole cases ([`CaseExecutor::run_case`]) rather than lowered programs.

pub mod process;

use crate::case::{Case, Value};
use crate::tensor::Tensor;
use std::collections::BTreeMap;
use trnsim::{EngineCounts, ExecConfig, Executor, HostTensor, Program, TargetName};

/// What one execution returns.
#[derive(Clone, Debug)]
pub struct Execution {
    pub outputs: BTreeMap<String, HostTensor>,
    /// Instructions executed per engine.
    pub instructions: EngineCounts,
    /// Full simulator statistics, when the executor is the simulator.
    pub stats: Option<trnsim::Stats>,
    /// Every backend that ran the same program, by name, when there is more than one: the nki
    /// mode returns the in-process simulator (`sim`) next to what the executor ran
    /// (`nki_standin`, or `simulate_kernel` and `hardware`). `outputs` is one of them (the
    /// primary: hardware if it ran). The runner compares each with the golden for the three-way
    /// report (docs/executor-protocol.md, "nki mode").
    pub backends: Vec<(String, BTreeMap<String, HostTensor>)>,
}

/// Runs programs. `Send + Sync` so one executor serves all test threads.
pub trait CaseExecutor: Send + Sync {
    /// A short name for reports (`sim-trn1`, …).
    fn name(&self) -> String;

    /// The target programs are lowered for.
    fn target(&self) -> TargetName;

    /// Runs `program`; errors are human-readable (they end up in the case's message).
    fn execute(&self, program: &Program, inputs: &BTreeMap<String, HostTensor>) -> Result<Execution, String>;

    /// [`CaseExecutor::execute`] with the case it belongs to (the process executor's nki mode
    /// names the case to its child) and a classified failure (`unsupported` is skipped, not an
    /// error). The default runs `execute`.
    fn execute_case(
        &self,
        _case: &Case,
        program: &Program,
        inputs: &BTreeMap<String, HostTensor>,
    ) -> Result<Execution, ExecFailure> {
        self.execute(program, inputs)
            .map_err(|e| ExecFailure::new(FailureKind::RuntimeError, e))
    }

    /// Case-level executors (the process executor: torch or NKI on a device) run the case's ATen
    /// call themselves, without trnsim lowering, and return its outputs as case tensors; the runner
    /// compares them with the same code as the simulator's. `None` (the default): this executor
    /// runs lowered programs through [`CaseExecutor::execute`].
    fn run_case(&self, _case: &Case) -> Option<Result<CaseOutputs, ExecFailure>> {
        None
    }

    /// The simulator to keep device tensors in across programs ([`trnsim::Session`]), when this
    /// executor is one: `trnconf model run` then runs a model's nodes on session tensors. `None`
    /// (the default): every program runs through [`CaseExecutor::execute`] on host inputs.
    fn session_executor(&self) -> Option<Executor> {
        None
    }

    /// The lowering options programs are lowered with for this executor (compiler flags such as
    /// `--native-int64`); the default: none.
    fn lower_options(&self) -> crate::lower::LowerOptions {
        crate::lower::LowerOptions::default()
    }
}

/// What a case-level executor returned for one case.
#[derive(Clone, Debug, Default)]
pub struct CaseOutputs {
    /// Output tensors by name (`output.0`, …), in the golden dtypes.
    pub tensors: BTreeMap<String, Tensor>,
    /// Non-tensor outputs by output position.
    pub values: BTreeMap<usize, Value>,
}

/// Why a case-level executor produced no outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    CompileError,
    RuntimeError,
    /// The executor cannot run this case or mode here (a capability, not a bug): the case is skipped.
    Unsupported,
    Timeout,
    /// The executor process died (or broke the protocol) during the case; it is restarted.
    Crash,
}

impl FailureKind {
    /// The protocol's status string (`compile_error`, …).
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::CompileError => "compile_error",
            FailureKind::RuntimeError => "runtime_error",
            FailureKind::Unsupported => "unsupported",
            FailureKind::Timeout => "timeout",
            FailureKind::Crash => "crash",
        }
    }
}

/// A classified per-case failure of a case-level executor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecFailure {
    pub kind: FailureKind,
    pub message: String,
}

impl ExecFailure {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        ExecFailure {
            kind,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ExecFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.name(), self.message)
    }
}

/// The in-process simulator.
#[derive(Clone, Debug)]
pub struct SimExecutor {
    executor: Executor,
    target: TargetName,
    options: crate::lower::LowerOptions,
}

impl SimExecutor {
    pub fn new(target: TargetName) -> Self {
        SimExecutor {
            executor: Executor::new(target),
            target,
            options: Default::default(),
        }
    }

    pub fn with_config(target: TargetName, config: ExecConfig) -> Self {
        SimExecutor {
            executor: Executor::with_config(target, config),
            target,
            options: Default::default(),
        }
    }

    /// Lowers with `--native-int64` ([`crate::lower::LowerOptions::native_int64`]): an error
    /// naming the generation when the target has no 64-bit integers.
    pub fn native_int64(mut self) -> Result<Self, String> {
        let t = self.target.params();
        if !t.native_int64 {
            return Err(format!(
                "--native-int64: {} has no native 64-bit integers (NeuronCore-v3 and later have them: --target trn2 or trn3)",
                t.label
            ));
        }
        self.options.native_int64 = true;
        Ok(self)
    }
}

impl CaseExecutor for SimExecutor {
    fn name(&self) -> String {
        let native = if self.options.native_int64 { "-native-int64" } else { "" };
        format!("sim-{}{native}", self.target.name())
    }

    fn target(&self) -> TargetName {
        self.target
    }

    fn session_executor(&self) -> Option<Executor> {
        Some(self.executor.clone())
    }

    fn lower_options(&self) -> crate::lower::LowerOptions {
        self.options
    }

    fn execute(&self, program: &Program, inputs: &BTreeMap<String, HostTensor>) -> Result<Execution, String> {
        let run = self
            .executor
            .run(program, inputs)
            .map_err(|e| format!("simulator: {e}"))?;
        Ok(Execution {
            outputs: run.outputs,
            instructions: run.stats.instructions.clone(),
            stats: Some(run.stats),
            backends: Vec::new(),
        })
    }
}
