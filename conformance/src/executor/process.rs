//! The process executor: runs cases in a child process that speaks the trnconf executor protocol
//! (docs/executor-protocol.md): JSON lines on the child's stdin/stdout, tensors as safetensors
//! files. The child is `conformance/pyexec/trnconf_executor.py` (torch-neuronx on trn1, CPU torch
//! as a stand-in) or anything else that speaks the protocol.
//!
//! The child runs in its own process group. A case that outlives the timeout gets the whole group
//! killed (SIGKILL) and is classified `timeout`; a child that dies (or breaks the protocol) makes
//! the case `crash`. Either way the next case starts a fresh child, so one bad case never stops a
//! run. Cases are sent one at a time (a mutex serializes the runner's threads).

use super::{CaseExecutor, CaseOutputs, ExecFailure, Execution, FailureKind};
use crate::case::{Case, Value};
use crate::tensor::StoredDtype as _;
use crate::tensor::{Tensor, TorchDType};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trnsim::{HostTensor, Program, TargetName};

/// The protocol version this side speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// How much of the child's stderr is kept for crash messages.
const STDERR_TAIL: usize = 4000;

/// Options of a [`ProcessExecutor`].
#[derive(Clone, Debug)]
pub struct ProcessConfig {
    /// A shell command line (run as `sh -c 'exec CMD'`).
    pub command: String,
    /// `torch`, `nki`, or the protocol-test mode `echo`.
    pub mode: String,
    /// Per-case limit; on expiry the child's process group is killed.
    pub timeout: Duration,
    /// Limit for the start-up handshake (`hello`; imports of torch / the SDK can be slow).
    pub hello_timeout: Duration,
    /// The target recorded in reports (and that target-limited expectations apply to).
    pub target: TargetName,
    /// Where output safetensors and per-case artifacts go (default: a fresh temp directory).
    pub artifacts_dir: Option<PathBuf>,
    /// Keep the output files (default: deleted once read).
    pub keep_artifacts: bool,
}

impl ProcessConfig {
    pub fn new(command: impl Into<String>, mode: impl Into<String>) -> Self {
        ProcessConfig {
            command: command.into(),
            mode: mode.into(),
            timeout: Duration::from_secs(120),
            hello_timeout: Duration::from_secs(300),
            // The simulator's default generation; `trnconf run` sets the run's `--target`.
            target: TargetName::default(),
            artifacts_dir: None,
            keep_artifacts: false,
        }
    }
}

/// A running child.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    hello: Json,
}

impl Worker {
    fn pgid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL to the whole process group, then reap the child.
    fn kill(mut self) -> String {
        kill_group(self.pgid());
        let _ = self.child.kill();
        let status = self
            .child
            .wait()
            .map(|s| s.to_string())
            .unwrap_or_else(|e| e.to_string());
        drop(self.stdin);
        status
    }

    fn stderr_tail(&self) -> String {
        // Give the reader thread a moment to collect the last words of a dying child.
        std::thread::sleep(Duration::from_millis(50));
        self.stderr.lock().unwrap_or_else(|p| p.into_inner()).trim().to_string()
    }
}

fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

#[derive(Default)]
struct State {
    worker: Option<Worker>,
    /// The last successful handshake.
    hello: Option<Json>,
    /// Children started (1 + restarts).
    spawned: usize,
}

/// Runs cases in a child process (see the module docs).
pub struct ProcessExecutor {
    config: ProcessConfig,
    artifacts: PathBuf,
    state: Mutex<State>,
    seq: AtomicU64,
    /// The in-process simulator the nki mode runs next to the child (the `sim` backend).
    sim: super::SimExecutor,
}

static INSTANCE: AtomicU64 = AtomicU64::new(0);

impl ProcessExecutor {
    /// Prepares the executor; the child starts with [`ProcessExecutor::hello`] or the first case.
    pub fn new(config: ProcessConfig) -> Result<Self, String> {
        let artifacts = match &config.artifacts_dir {
            Some(d) => d.clone(),
            None => std::env::temp_dir().join(format!(
                "trnconf-process-{}-{}",
                std::process::id(),
                INSTANCE.fetch_add(1, Ordering::Relaxed)
            )),
        };
        std::fs::create_dir_all(&artifacts).map_err(|e| format!("{}: {e}", artifacts.display()))?;
        Ok(ProcessExecutor {
            artifacts,
            state: Mutex::new(State::default()),
            seq: AtomicU64::new(0),
            sim: super::SimExecutor::new(config.target),
            config,
        })
    }

    /// Parses `process:CMD` (the `--executor` value); `None` if `spec` is not a process executor.
    pub fn parse_spec(spec: &str) -> Option<&str> {
        spec.strip_prefix("process:").map(str::trim).filter(|c| !c.is_empty())
    }

    pub fn config(&self) -> &ProcessConfig {
        &self.config
    }

    /// Children started so far (1 + restarts after crashes and timeouts).
    pub fn spawned(&self) -> usize {
        self.lock().spawned
    }

    /// The handshake: starts the child if needed and returns its `hello` answer.
    pub fn hello(&self) -> Result<Json, String> {
        let mut st = self.lock();
        self.ensure_worker(&mut st)?;
        Ok(st.worker.as_ref().expect("worker").hello.clone())
    }

    /// Whether the handshake says `mode` can run, and if not why.
    pub fn mode_available(hello: &Json, mode: &str) -> Result<(), String> {
        let m = &hello["modes"][mode];
        if m.is_null() {
            return Err(format!("the executor has no mode `{mode}`"));
        }
        if m["available"].as_bool() == Some(true) {
            Ok(())
        } else {
            Err(m["reason"].as_str().unwrap_or("no reason given").to_string())
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn spawn(&self) -> Result<Worker, String> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("exec {}", self.config.command))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start `{}`: {e}", self.config.command))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr_pipe = child.stderr.take().expect("piped stderr");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut s = sink.lock().unwrap_or_else(|p| p.into_inner());
                s.push_str(&String::from_utf8_lossy(&buf[..n]));
                if s.len() > 2 * STDERR_TAIL {
                    let mut cut = s.len() - STDERR_TAIL;
                    while !s.is_char_boundary(cut) {
                        cut += 1;
                    }
                    s.drain(..cut);
                }
            }
        });
        Ok(Worker {
            child,
            stdin,
            lines,
            stderr,
            hello: Json::Null,
        })
    }

    fn ensure_worker(&self, st: &mut State) -> Result<(), String> {
        if st.worker.is_some() {
            return Ok(());
        }
        let mut w = self.spawn()?;
        st.spawned += 1;
        let hello = match exchange(&mut w, &json!({"type": "hello"}), self.config.hello_timeout, |m| {
            m["type"] == "hello"
        }) {
            Ok(h) => h,
            Err((_, why)) => {
                let tail = w.stderr_tail();
                let status = w.kill();
                return Err(format!(
                    "handshake with `{}` failed: {why} (exit: {status}){}",
                    self.config.command,
                    tail_note(&tail)
                ));
            }
        };
        if hello["protocol"].as_u64() != Some(PROTOCOL_VERSION) {
            let status = w.kill();
            return Err(format!(
                "`{}` speaks protocol {}, this trnconf speaks {PROTOCOL_VERSION} (exit: {status})",
                self.config.command, hello["protocol"]
            ));
        }
        w.hello = hello.clone();
        st.hello = Some(hello);
        st.worker = Some(w);
        Ok(())
    }

    /// A fresh artifact path for `case`: `<seq>_<case>.<suffix>` (`.safetensors` unless the
    /// suffix has an extension).
    fn output_path(&self, case: &Case, suffix: &str) -> PathBuf {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let safe: String = case
            .id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let ext = if suffix.contains('.') { "" } else { ".safetensors" };
        self.artifacts.join(format!("{n:06}_{safe}.{suffix}{ext}"))
    }

    /// Sends one `run` request for `case` (with the mode-specific `extra` fields) and waits for
    /// its `ok` reply; every other answer, a timeout or a dead child is a classified failure.
    /// `output` is where the child is asked to write its outputs.
    fn request(&self, case: &Case, output: &Path, extra: Json) -> Result<Json, ExecFailure> {
        let mut st = self.lock();
        if let Err(e) = self.ensure_worker(&mut st) {
            return Err(ExecFailure::new(
                FailureKind::Crash,
                format!("executor did not start: {e}"),
            ));
        }
        let id = self.seq.fetch_add(1, Ordering::Relaxed);
        let case_file = std::fs::canonicalize(&case.file).unwrap_or_else(|_| case.file.clone());
        let mut req = json!({
            "type": "run",
            "id": id,
            "case_id": case.id,
            "mode": self.config.mode,
            "case_file": case_file,
            "inputs": case.input_names(),
            "output": output,
            "artifacts_dir": self.artifacts,
            "timeout_s": self.config.timeout.as_secs_f64(),
        });
        if let (Some(req), Json::Object(extra)) = (req.as_object_mut(), extra) {
            req.extend(extra);
        }
        let mut w = st.worker.take().expect("worker");
        let reply = exchange(&mut w, &req, self.config.timeout, |m| {
            m["type"] == "result" && m["id"] == id
        });
        let reply = match reply {
            Ok(r) => {
                st.worker = Some(w);
                r
            }
            Err((kind, why)) => {
                let tail = if kind == FailureKind::Crash {
                    w.stderr_tail()
                } else {
                    String::new()
                };
                let status = w.kill();
                let message = match kind {
                    FailureKind::Timeout => format!(
                        "no answer within {:.1} s: killed the executor's process group ({status}); restarting it",
                        self.config.timeout.as_secs_f64()
                    ),
                    _ => format!("{why} (exit: {status}); restarting the executor{}", tail_note(&tail)),
                };
                return Err(ExecFailure::new(kind, message));
            }
        };
        drop(st);
        let message = reply["message"].as_str().unwrap_or("").to_string();
        let kind = match reply["status"].as_str() {
            Some("ok") => return Ok(reply),
            Some("compile_error") => FailureKind::CompileError,
            Some("runtime_error") => FailureKind::RuntimeError,
            Some("unsupported") => FailureKind::Unsupported,
            Some("timeout") => FailureKind::Timeout,
            Some("crash") => FailureKind::Crash,
            other => {
                return Err(ExecFailure::new(
                    FailureKind::Crash,
                    format!("protocol error: unknown status {other:?} in {reply}"),
                ));
            }
        };
        Err(ExecFailure::new(kind, message))
    }

    /// Runs one case in the child: the classified answer, or the outputs read back.
    pub fn run_one(&self, case: &Case) -> Result<CaseOutputs, ExecFailure> {
        let output = self.output_path(case, "out");
        let reply = self.request(case, &output, json!({}))?;
        let path = reply["outputs"].as_str().map(PathBuf::from).unwrap_or(output);
        let read = read_outputs(&path, case);
        if !self.config.keep_artifacts {
            let _ = std::fs::remove_file(&path);
        }
        read.map_err(|e| ExecFailure::new(FailureKind::RuntimeError, format!("{}: {e}", path.display())))
    }

    /// The nki mode: runs the lowered `program` on the in-process simulator and, as an emitted
    /// NKI kernel, in the child (docs/executor-protocol.md, "nki mode"). The request carries the
    /// kernel file (`kernel`) and the program inputs (`device_inputs`, device bits by program
    /// tensor name); the reply names one outputs file per backend the child ran (`backends`)
    /// and which of them is the result (`outputs`). All of them, with `sim`, are returned.
    pub fn run_kernel(
        &self,
        case: &Case,
        program: &Program,
        inputs: &BTreeMap<String, HostTensor>,
    ) -> Result<Execution, ExecFailure> {
        let runtime = |m: String| ExecFailure::new(FailureKind::RuntimeError, m);
        let sim = self.sim.execute(program, inputs).map_err(runtime)?;
        let kernel = crate::emit_nki::emit(program).map_err(|e| runtime(format!("emitting the NKI kernel: {e}")))?;
        let kernel_path = self.output_path(case, "kernel.py");
        let inputs_path = self.output_path(case, "in");
        let output = self.output_path(case, "out");
        let write = |path: &Path, bytes: &[u8]| {
            std::fs::write(path, bytes).map_err(|e| runtime(format!("{}: {e}", path.display())))
        };
        write(&kernel_path, kernel.as_bytes())?;
        let input_bytes = crate::emit_nki::to_safetensors(inputs).map_err(runtime)?;
        write(&inputs_path, &input_bytes)?;
        let reply = self.request(
            case,
            &output,
            json!({"kernel": kernel_path, "device_inputs": inputs_path}),
        );
        let mut files = vec![kernel_path, inputs_path];
        let result = reply.and_then(|reply| {
            let primary = reply["outputs"]
                .as_str()
                .map(PathBuf::from)
                .unwrap_or_else(|| output.clone());
            // An executor that names no backends ran one: the stand-in or whatever it is.
            let mut named: Vec<(String, PathBuf)> = match reply["backends"].as_object() {
                Some(m) => m
                    .iter()
                    .filter_map(|(k, v)| v.as_str().map(|p| (k.clone(), PathBuf::from(p))))
                    .collect(),
                None => vec![("executor".to_string(), primary.clone())],
            };
            if !named.iter().any(|(_, p)| *p == primary) {
                named.push(("executor".into(), primary.clone()));
            }
            let wanted: Vec<(String, trnsim::DType)> = program
                .hbm
                .iter()
                .filter(|d| d.role == trnsim::HbmRole::Output)
                .map(|d| (d.name.clone(), d.dtype))
                .collect();
            let mut outputs = None;
            let mut backends = vec![("sim".to_string(), sim.outputs.clone())];
            for (name, path) in named {
                files.push(path.clone());
                let read = std::fs::read(&path)
                    .map_err(|e| e.to_string())
                    .and_then(|b| crate::emit_nki::from_safetensors(&b, &wanted))
                    .map_err(|e| runtime(format!("backend `{name}`: {}: {e}", path.display())))?;
                if path == primary {
                    outputs = Some(read.clone());
                }
                backends.push((name, read));
            }
            Ok(Execution {
                outputs: outputs.expect("the primary is among the backends"),
                instructions: sim.instructions.clone(),
                stats: None,
                backends,
            })
        });
        if !self.config.keep_artifacts {
            for f in files {
                let _ = std::fs::remove_file(f);
            }
        }
        result.map_err(|f| {
            if f.kind == FailureKind::Unsupported {
                f
            } else {
                ExecFailure::new(f.kind, f.to_string())
            }
        })
    }

    /// Ends the child politely (`shutdown`), killing its group if it does not leave in time.
    pub fn shutdown(&self) {
        let mut st = self.lock();
        if let Some(mut w) = st.worker.take() {
            let _ = exchange(&mut w, &json!({"type": "shutdown"}), Duration::from_secs(5), |m| {
                m["type"] == "bye"
            });
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = w.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            w.kill();
        }
    }
}

fn tail_note(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!("\nexecutor stderr (tail):\n{tail}")
    }
}

/// Sends one request and waits for the reply `want` accepts. Other lines are ignored (a stale
/// reply); a line that is not JSON, or an `error` message, is a protocol error.
fn exchange(
    w: &mut Worker,
    req: &Json,
    timeout: Duration,
    want: impl Fn(&Json) -> bool,
) -> Result<Json, (FailureKind, String)> {
    let line = format!("{req}\n");
    if let Err(e) = w.stdin.write_all(line.as_bytes()).and_then(|_| w.stdin.flush()) {
        return Err((
            FailureKind::Crash,
            format!("the executor is gone (writing the request: {e})"),
        ));
    }
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match w.lines.recv_timeout(left) {
            Ok(line) => {
                let msg: Json = serde_json::from_str(&line).map_err(|e| {
                    (
                        FailureKind::Crash,
                        format!("protocol error: a stdout line is not JSON ({e}): {line:.200}"),
                    )
                })?;
                if want(&msg) {
                    return Ok(msg);
                }
                if msg["type"] == "error" {
                    return Err((
                        FailureKind::Crash,
                        format!("protocol error: the executor says {}", msg["message"]),
                    ));
                }
            }
            Err(RecvTimeoutError::Timeout) => return Err((FailureKind::Timeout, "timeout".into())),
            Err(RecvTimeoutError::Disconnected) => {
                return Err((FailureKind::Crash, "the executor exited without answering".into()));
            }
        }
    }
}

/// Reads an outputs safetensors file as case tensors (dtypes from the safetensors tags; a `c64`
/// output is told apart by the case's own metadata), plus the non-tensor outputs from the
/// `trnconf_values` metadata key.
pub fn read_outputs(path: &Path, case: &Case) -> Result<CaseOutputs, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| format!("not a safetensors file: {e}"))?;
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| e.to_string())?;
    let mut out = CaseOutputs::default();
    for (name, view) in st.iter() {
        let golden = case.tensor_meta.get(name).map(|m| m.dtype);
        let mut shape = view.shape().to_vec();
        let dtype =
            if golden == Some(TorchDType::C64) && view.dtype() == safetensors::Dtype::F32 && shape.last() == Some(&2) {
                shape.pop();
                TorchDType::C64
            } else {
                crate::tensor::ALL_TORCH_DTYPES
                    .iter()
                    .copied()
                    .find(|d| *d != TorchDType::C64 && d.safetensors_dtype() == view.dtype())
                    .ok_or_else(|| {
                        format!(
                            "output `{name}` is {:?}, which the golden format has no dtype for",
                            view.dtype()
                        )
                    })?
            };
        let t = Tensor::new(dtype, shape, view.data().to_vec());
        if !t.is_consistent() {
            return Err(format!(
                "output `{name}`: {} bytes do not hold {:?} {}",
                t.data.len(),
                t.shape,
                t.dtype
            ));
        }
        out.tensors.insert(name.to_string(), t);
    }
    if let Some(v) = header.metadata().as_ref().and_then(|m| m.get("trnconf_values")) {
        let values: BTreeMap<String, Value> =
            serde_json::from_str(v).map_err(|e| format!("bad `trnconf_values` metadata: {e}"))?;
        for (pos, v) in values {
            let pos: usize = pos
                .parse()
                .map_err(|_| format!("bad output position `{pos}` in `trnconf_values`"))?;
            out.values.insert(pos, v);
        }
    }
    Ok(out)
}

impl CaseExecutor for ProcessExecutor {
    fn name(&self) -> String {
        if self.config.mode == "echo" {
            "process-echo (protocol test, not a conformance result)".into()
        } else {
            format!("process-{}", self.config.mode)
        }
    }

    fn target(&self) -> TargetName {
        self.config.target
    }

    fn execute(&self, _program: &Program, _inputs: &BTreeMap<String, HostTensor>) -> Result<Execution, String> {
        Err("the process executor runs a program only for a case (execute_case, nki mode)".into())
    }

    fn execute_case(
        &self,
        case: &Case,
        program: &Program,
        inputs: &BTreeMap<String, HostTensor>,
    ) -> Result<Execution, ExecFailure> {
        self.run_kernel(case, program, inputs)
    }

    /// torch and echo run the case's ATen call in the child; nki runs the lowered program, so
    /// the runner lowers it first (and calls [`CaseExecutor::execute_case`]).
    fn run_case(&self, case: &Case) -> Option<Result<CaseOutputs, ExecFailure>> {
        (self.config.mode != "nki").then(|| self.run_one(case))
    }
}

impl Drop for ProcessExecutor {
    fn drop(&mut self) {
        self.shutdown();
        if self.config.artifacts_dir.is_none() && !self.config.keep_artifacts {
            let _ = std::fs::remove_dir_all(&self.artifacts);
        }
    }
}
