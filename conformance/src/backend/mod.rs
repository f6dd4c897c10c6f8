//! Backends: what turns a golden case into outputs for the runner to compare.
//!
//! The runner ([`crate::runner`]) loads a case, asks a [`Backend`] to run it, compares what came
//! back with the golden outputs and applies the backend's expectations. It knows nothing else
//! about how the outputs were made. Three backends exist:
//!
//! * **our lowering** ([`lowering`]): lower the ATen call to a trnsim program and run it on a
//!   program executor — the in-process simulator, or the process executor's `nki` mode (the
//!   emitted kernel on the Neuron SDK or the stand-in);
//! * **a case-level executor** (the process executor's `torch` and `echo` modes): the child runs
//!   the ATen call itself (docs/executor-protocol.md);
//! * **an NKI backend module** ([`nki_module`], `trnconf run --backend nki:MODULE`): somebody's
//!   NKI kernels, one per Core ATen overload, run through the `trnsim.nki` front-end on trnsim in
//!   a child process (docs/nki-backend.md).
//!
//! Every [`CaseExecutor`] is a backend: a case-level executor runs the case, a program executor
//! runs our lowering of it.

pub mod lowering;
pub mod nki_module;

use crate::case::{Case, Value};
use crate::executor::{CaseExecutor, FailureKind};
use crate::results::BackendResult;
use crate::tensor::Tensor;
use std::collections::BTreeMap;
use trnsim::{EngineCounts, TargetName};

/// What a backend produced for one case: outputs in the case's terms (golden names and dtypes).
#[derive(Clone, Debug, Default)]
pub struct Produced {
    /// Output tensors by case name (`output.0`, …).
    pub tensors: BTreeMap<String, Tensor>,
    /// Non-tensor outputs by output position.
    pub values: BTreeMap<usize, Value>,
    /// Instructions executed per engine (zero when unknown).
    pub instructions: EngineCounts,
    /// Every backend that ran the same program, compared separately (the process `nki` mode).
    pub backends: Vec<BackendResult>,
    /// A note for the case's report (e.g. which kernels ran, with their source file:line), put
    /// first in the message whatever the outcome.
    pub note: String,
    /// The simulator's statistics, when the simulator ran the program (timeline estimates).
    pub stats: Option<trnsim::Stats>,
    /// The RNG seed the run took from the case, when the backend seeds its generator from the
    /// case (our lowering: [`lowering::case_rng_seed`]); the runner then also runs RNG cases
    /// under other seeds (compare/rng.rs).
    pub rng_seed: Option<u32>,
}

/// Why a backend produced no outputs for a case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unrun {
    /// Our lowering has no lowering for the op.
    NotLowered(String),
    /// The backend module does not provide the overload (not a failure).
    NotProvided(String),
    /// The backend cannot run this case or call form here (a capability; the case is skipped).
    Unsupported(String),
    /// The backend ran and its result is wrong in a way the comparison cannot see (e.g. a
    /// program that does no compute work).
    Fail(String),
    /// It broke: a lowering error, a simulator or kernel error, a crashed child.
    Error(String),
    /// The call was refused with a typed error (an int64 value outside int32, …): an error
    /// whose kind expectations can name (`error = "…"`, docs/workflow.md).
    Refused(crate::expect::ErrorKind, String),
}

impl Unrun {
    /// What it says, whatever the kind.
    pub fn into_message(self) -> String {
        let (Unrun::NotLowered(m)
        | Unrun::NotProvided(m)
        | Unrun::Unsupported(m)
        | Unrun::Fail(m)
        | Unrun::Error(m)
        | Unrun::Refused(_, m)) = self;
        m
    }
}

/// Runs cases. `Send + Sync`: one backend serves all the runner's threads.
pub trait Backend: Send + Sync {
    /// A short name for reports (`sim-trn1`, `process-torch`, `nki:examples/x.py`, …).
    fn backend_name(&self) -> String;

    /// The target the outputs were computed for.
    fn backend_target(&self) -> TargetName;

    /// Whether int64 tensors stay int64 on the device (`--native-int64`): expectations see it as
    /// the `native-int64` property. The default: no.
    fn backend_native_int64(&self) -> bool {
        false
    }

    /// Runs one case. The runner calls it a second time for cases whose check asks for
    /// determinism.
    fn run(&self, case: &Case) -> Result<Produced, Unrun>;
}

impl<T: CaseExecutor + ?Sized> Backend for T {
    fn backend_name(&self) -> String {
        self.name()
    }

    fn backend_target(&self) -> TargetName {
        self.target()
    }

    fn backend_native_int64(&self) -> bool {
        self.lower_options().native_int64
    }

    fn run(&self, case: &Case) -> Result<Produced, Unrun> {
        match self.run_case(case) {
            Some(Ok(out)) => Ok(Produced {
                tensors: out.tensors,
                values: out.values,
                ..Default::default()
            }),
            Some(Err(f)) if f.kind == FailureKind::Unsupported => Err(Unrun::Unsupported(f.message)),
            Some(Err(f)) => Err(Unrun::Error(format!("{}: {f}", case.file.display()))),
            None => lowering::run(case, self),
        }
    }
}
