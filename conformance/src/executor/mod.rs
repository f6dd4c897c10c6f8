//! Executors run a lowered program on inputs and return its outputs. They never compare or judge:
//! the runner does that, the same way for every executor.
//!
//! [`SimExecutor`] runs the trnsim simulator in process. A process executor (the hardware
//! adapter, speaking a JSON-lines protocol to a child process) will implement the same trait.

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
}

/// Runs programs. `Send + Sync` so one executor serves all test threads.
pub trait CaseExecutor: Send + Sync {
    /// A short name for reports (`sim-trn1`, …).
    fn name(&self) -> String;

    /// The target programs are lowered for.
    fn target(&self) -> TargetName;

    /// Runs `program`; errors are human-readable (they end up in the case's message).
    fn execute(&self, program: &Program, inputs: &BTreeMap<String, HostTensor>) -> Result<Execution, String>;
}

/// The in-process simulator.
#[derive(Clone, Debug)]
pub struct SimExecutor {
    executor: Executor,
    target: TargetName,
}

impl SimExecutor {
    pub fn new(target: TargetName) -> Self {
        SimExecutor { executor: Executor::new(target), target }
    }

    pub fn with_config(target: TargetName, config: ExecConfig) -> Self {
        SimExecutor { executor: Executor::with_config(target, config), target }
    }
}

impl CaseExecutor for SimExecutor {
    fn name(&self) -> String {
        format!("sim-{}", self.target.name())
    }

    fn target(&self) -> TargetName {
        self.target
    }

    fn execute(&self, program: &Program, inputs: &BTreeMap<String, HostTensor>) -> Result<Execution, String> {
        let run = self.executor.run(program, inputs).map_err(|e| format!("simulator: {e}"))?;
        Ok(Execution { outputs: run.outputs, instructions: run.stats.instructions.clone(), stats: Some(run.stats) })
    }
}
