//! `trnconf run --backend nki:MODULE`: a backend's NKI kernels as the backend under test.
//!
//! MODULE is a Python module (a dotted name importable from the current directory, or a path to
//! a `.py` file) that maps Core ATen overloads to NKI kernels, each with a wrapper that does the
//! argument plumbing (docs/nki-backend.md). The kernels run through the `trnsim.nki` front-end on
//! the trnsim simulator, in a child process speaking the executor protocol
//! (docs/executor-protocol.md, mode `nki-module`), so the Rust crates never link Python.
//!
//! Overloads the module does not provide are [`Unrun::NotProvided`]: their own status, neither a
//! pass nor a failure. Every result names the kernels that ran, with their source file:line.

use super::{Backend, Produced, Unrun};
use crate::case::Case;
use crate::executor::FailureKind;
use crate::executor::process::{ProcessConfig, ProcessExecutor};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use trnsim::TargetName;

/// The protocol mode the child runs module kernels in.
pub const MODE: &str = "nki-module";

/// The Python interpreter: `$TRNCONF_PYTHON`, else the workspace's `.venv`, else `python3`.
pub fn python() -> String {
    if let Ok(p) = std::env::var("TRNCONF_PYTHON")
        && !p.trim().is_empty()
    {
        return p;
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    if venv.is_file() {
        return venv.display().to_string();
    }
    "python3".into()
}

/// The reference executor script (conformance/pyexec/trnconf_executor.py).
pub fn executor_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("pyexec/trnconf_executor.py")
}

/// `sh` single-quoting.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// An NKI backend module, run in a child process.
pub struct NkiModuleBackend {
    module: String,
    process: ProcessExecutor,
    /// The module's source file, as the child imported it.
    file: Option<PathBuf>,
    /// Provided overloads → the kernels that implement them (`name (file:line)`).
    kernels: BTreeMap<String, Vec<String>>,
}

impl NkiModuleBackend {
    /// Parses `nki:MODULE` (the `--backend` value); `None` if `spec` is not an NKI module.
    pub fn parse_spec(spec: &str) -> Option<&str> {
        spec.strip_prefix("nki:").map(str::trim).filter(|m| !m.is_empty())
    }

    /// The child's command line for `module`.
    pub fn command(python: &str, module: &str) -> String {
        format!(
            "{} {} --nki-module {}",
            quote(python),
            quote(&executor_script().display().to_string()),
            quote(module)
        )
    }

    /// Starts the child for `module` (with `config.command`), checks its handshake and reads
    /// which overloads the module provides. `config.mode` is set to [`MODE`].
    pub fn start(module: &str, mut config: ProcessConfig) -> Result<Self, String> {
        config.mode = MODE.into();
        let process = ProcessExecutor::new(config)?;
        let hello = process.hello()?;
        ProcessExecutor::mode_available(&hello, MODE)
            .map_err(|why| format!("the NKI backend module `{module}` cannot run: {why}"))?;
        let info = &hello["nki_module"];
        let kernels = parse_overloads(&info["overloads"])
            .ok_or_else(|| format!("the executor's handshake has no `nki_module.overloads`: {info}"))?;
        Ok(NkiModuleBackend {
            module: module.to_string(),
            process,
            file: info["file"].as_str().map(PathBuf::from),
            kernels,
        })
    }

    /// The overloads the module provides, with their kernels.
    pub fn provided(&self) -> &BTreeMap<String, Vec<String>> {
        &self.kernels
    }

    /// The module's source file.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// Ends the child.
    pub fn shutdown(&self) {
        self.process.shutdown();
    }

    fn note(&self, op: &str) -> String {
        match self.kernels.get(op).map(Vec::as_slice) {
            Some([]) | None => String::new(),
            Some([one]) => format!("kernel {one}"),
            Some(many) => format!("kernels {}", many.join(", ")),
        }
    }
}

/// `{"add.Tensor": ["add_kernel (x.py:12)"], …}`.
fn parse_overloads(v: &Json) -> Option<BTreeMap<String, Vec<String>>> {
    v.as_object().map(|m| {
        m.iter()
            .map(|(op, ks)| {
                let ks = ks
                    .as_array()
                    .map(|a| a.iter().filter_map(|k| k.as_str().map(str::to_string)).collect())
                    .unwrap_or_default();
                (op.clone(), ks)
            })
            .collect()
    })
}

impl Backend for NkiModuleBackend {
    fn backend_name(&self) -> String {
        format!("nki:{}", self.module)
    }

    fn backend_target(&self) -> TargetName {
        self.process.config().target
    }

    fn run(&self, case: &Case) -> Result<Produced, Unrun> {
        if !self.kernels.contains_key(&case.op) {
            return Err(Unrun::NotProvided(format!(
                "not provided: the backend module `{}` has no kernel for `{}`",
                self.module, case.op
            )));
        }
        let note = self.note(&case.op);
        let with_note = |m: String| if note.is_empty() { m } else { format!("{note}: {m}") };
        match self.process.run_one(case) {
            Ok(out) => Ok(Produced {
                tensors: out.tensors,
                values: out.values,
                note,
                ..Default::default()
            }),
            Err(f) if f.kind == FailureKind::Unsupported => Err(Unrun::Unsupported(with_note(f.message))),
            Err(f) => Err(Unrun::Error(with_note(f.to_string()))),
        }
    }
}
