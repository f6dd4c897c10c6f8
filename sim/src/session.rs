//! Device sessions: named tensors that stay in simulated HBM across program runs.
//!
//! A [`Session`] owns device tensors. Running a program binds each of its Input and Output HBM
//! tensors to a session tensor by name: inputs are *moved* into the program's memories (no byte
//! is copied), outputs are moved back into the session when the run succeeds. A sequence of
//! programs (a kernel after a kernel, a model's graph, a PyTorch device) thus keeps its data on
//! the device, and only [`Session::put`] and [`Session::get`] cross the host boundary; both are
//! counted in [`Transfers`], so a test can prove a sequence made no host round trip.
//!
//! ```
//! use trnsim::*;
//! use std::collections::BTreeMap;
//! // y = x + x, as a program over HBM tensors `a` (input) and `out` (output).
//! let mut p = Program::new(TargetName::Trn1);
//! p.declare("a", DType::F32, &[4, 8], HbmRole::Input);
//! p.declare("out", DType::F32, &[4, 8], HbmRole::Output);
//! let hbm = |n: &str| AccessPattern::hbm(n, DType::F32, 0, 4, 8, vec![[1, 8]]);
//! let sb = |off| AccessPattern::sbuf(DType::F32, 0, 4, off, vec![[1, 8]]);
//! p.push(Engine::Dma, Op::DmaCopy(DmaCopy { dst: sb(0), src: hbm("a"), accumulate: false, indirect: None }));
//! p.push(Engine::Vector, Op::TensorTensor(TensorTensor { dst: sb(64), in0: sb(0), in1: sb(0), op: AluOp::Add }));
//! p.push(Engine::Dma, Op::DmaCopy(DmaCopy { dst: hbm("out"), src: sb(64), accumulate: false, indirect: None }));
//! infer_waits(&mut p); // the cross-engine waits the race detector requires
//!
//! let mut s = Session::new(Executor::new(TargetName::Trn1));
//! s.put("x", HostTensor::from_f32(&[4, 8], &[1.0; 32])).unwrap();
//! // Twice: x -> y, then y -> z. `y` never leaves the device.
//! s.run(&p, &Session::binding(&[("a", "x"), ("out", "y")])).unwrap();
//! s.run(&p, &Session::binding(&[("a", "y"), ("out", "z")])).unwrap();
//! assert_eq!(s.get("z").unwrap().to_f32(), vec![4.0; 32]);
//! assert_eq!(s.transfers().host_to_device_bytes, 128);
//! assert_eq!(s.transfers().device_to_host_bytes, 128);
//! ```

use crate::dtype::DType;
use crate::error::{ErrorKind, SimError};
use crate::exec::{Executor, HostTensor};
use crate::program::{HbmRole, Program};
use crate::stats::Stats;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A tensor in simulated HBM, owned by a [`Session`]. Every byte is written (it came from the
/// host or from a program output, which must be written whole).
#[derive(Debug, PartialEq)]
pub struct DeviceTensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    data: Vec<u8>,
}

impl DeviceTensor {
    /// The tensor's bytes in simulated HBM, read in place: no transfer, nothing copied.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    pub fn num_elems(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Bytes that crossed the host boundary (or were duplicated on the device), over the session's
/// life. Program runs move tensors; they add nothing here unless a binding needs a device copy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfers {
    /// Bytes copied in by [`Session::put`].
    pub host_to_device_bytes: u64,
    /// Bytes copied out by [`Session::get`].
    pub device_to_host_bytes: u64,
    /// Bytes duplicated on the device: one session tensor bound to two inputs of one program
    /// is handed to the second one as a copy.
    pub device_copy_bytes: u64,
    /// Programs run to completion.
    pub runs: u64,
}

/// Named device tensors in simulated HBM, and the executor that runs programs on them.
#[derive(Debug)]
pub struct Session {
    executor: Executor,
    tensors: BTreeMap<String, DeviceTensor>,
    transfers: Transfers,
    /// On-chip buffers kept between runs (performance only: `mem::Arena`).
    arena: crate::mem::Arena,
    /// Programs this session's runs proved race-free (performance only: [`RaceFree`]).
    race_free: RaceFree,
}

/// How often a run checked its program for races, and how often it reused an earlier run's
/// proof that the same program is race-free (see [`Session::run`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaceChecks {
    /// Runs whose program the race detector checked instruction by instruction.
    pub checked: u64,
    /// Runs of a program an earlier run had already proved race-free.
    pub reused: u64,
}

/// Most instructions the race-free programs kept by one session may hold together; the oldest
/// go first.
const RACE_FREE_INSTRUCTIONS: usize = 1 << 16;

/// Programs proved race-free by a completed run with the detector on. Whether a program races
/// depends on the program alone (its instructions, queues, waits and access patterns, the
/// target's DMA queues): the detector reads no data, and straight-line programs have no
/// data-dependent control flow. A program with a data-dependent operand (indirect DMA, dynamic
/// copies) is never kept: it is checked on every run. Entries are whole copies, compared with
/// `==` on lookup, so only the very same program reuses a proof.
#[derive(Debug, Default)]
struct RaceFree {
    entries: std::collections::VecDeque<(u64, Program)>,
    instructions: usize,
    counts: RaceChecks,
}

impl RaceFree {
    fn contains(&self, key: u64, program: &Program) -> bool {
        self.entries.iter().any(|(k, p)| *k == key && p == program)
    }

    fn insert(&mut self, key: u64, program: &Program) {
        let n = program.instructions.len();
        if n > RACE_FREE_INSTRUCTIONS {
            return;
        }
        while self.instructions + n > RACE_FREE_INSTRUCTIONS {
            match self.entries.pop_front() {
                Some((_, p)) => self.instructions -= p.instructions.len(),
                None => break,
            }
        }
        self.instructions += n;
        self.entries.push_back((key, program.clone()));
    }
}

/// A cheap summary of a program for [`RaceFree`] lookups (equal programs have equal keys).
fn race_key(program: &Program) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    program.instructions.len().hash(&mut h);
    for d in &program.hbm {
        d.name.hash(&mut h);
        d.shape.hash(&mut h);
    }
    for inst in &program.instructions {
        inst.engine.name().hash(&mut h);
        inst.op.name().hash(&mut h);
        inst.wait.hash(&mut h);
        inst.queue.hash(&mut h);
    }
    h.finish()
}

/// Whether any operand of `program` has a data-dependent address.
fn has_dynamic_operand(program: &Program) -> bool {
    program
        .instructions
        .iter()
        .any(|i| i.op.operands().iter().any(|o| o.dynamic))
}

impl Session {
    pub fn new(executor: Executor) -> Self {
        Session {
            executor,
            tensors: BTreeMap::new(),
            transfers: Transfers::default(),
            arena: crate::mem::Arena::default(),
            race_free: RaceFree::default(),
        }
    }

    /// How many runs checked their program for races, and how many reused a proof.
    pub fn race_checks(&self) -> &RaceChecks {
        &self.race_free.counts
    }

    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// A binding from `(program tensor, session tensor)` pairs.
    pub fn binding(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(p, s)| (p.to_string(), s.to_string())).collect()
    }

    /// Copies a host tensor into the session as `name` (replacing any tensor of that name).
    pub fn put(&mut self, name: &str, tensor: HostTensor) -> Result<(), SimError> {
        let expected = tensor
            .shape
            .iter()
            .try_fold(tensor.dtype.size(), |acc, &s| acc.checked_mul(s));
        if expected != Some(tensor.data.len()) {
            return Err(SimError::program(ErrorKind::ShapeMismatch(format!(
                "tensor `{name}` has {} bytes, {} {:?} needs {}",
                tensor.data.len(),
                tensor.dtype,
                tensor.shape,
                expected.map_or_else(|| "more than fit in memory".to_string(), |n| n.to_string())
            ))));
        }
        let total = self.device_bytes() - self.tensors.get(name).map_or(0, |t| t.data.len()) + tensor.data.len();
        if total > self.executor.config.max_hbm_bytes {
            return Err(SimError::program(ErrorKind::Invalid(format!(
                "putting `{name}` would hold {total} bytes in the session, the executor's limit is {}",
                self.executor.config.max_hbm_bytes
            ))));
        }
        self.transfers.host_to_device_bytes += tensor.data.len() as u64;
        self.tensors.insert(
            name.to_string(),
            DeviceTensor {
                dtype: tensor.dtype,
                shape: tensor.shape,
                data: tensor.data,
            },
        );
        Ok(())
    }

    /// Copies a session tensor to the host.
    pub fn get(&mut self, name: &str) -> Option<HostTensor> {
        let t = self.tensors.get(name)?;
        self.transfers.device_to_host_bytes += t.data.len() as u64;
        Some(HostTensor {
            dtype: t.dtype,
            shape: t.shape.clone(),
            data: t.data.clone(),
        })
    }

    /// A session tensor, read in place (no transfer).
    pub fn tensor(&self, name: &str) -> Option<&DeviceTensor> {
        self.tensors.get(name)
    }

    /// Frees a session tensor; whether it existed.
    pub fn delete(&mut self, name: &str) -> bool {
        self.tensors.remove(name).is_some()
    }

    /// The session's tensor names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.tensors.keys().map(String::as_str).collect()
    }

    /// Bytes held by the session's tensors.
    pub fn device_bytes(&self) -> usize {
        self.tensors.values().map(|t| t.data.len()).sum()
    }

    pub fn transfers(&self) -> &Transfers {
        &self.transfers
    }

    /// Runs `program` on session tensors. `bind` maps program HBM tensor names to session tensor
    /// names; an Input or Output tensor not in `bind` binds to the session tensor of its own
    /// name. Inputs must exist with the declared dtype and shape and are moved into the run
    /// (a program that writes an Input tensor writes the session tensor, as on a device);
    /// outputs are created or replaced when the run succeeds. On error the session keeps every
    /// tensor it had (inputs are moved back) and gains no output.
    ///
    /// With the executor's race detector on, a completed run records that its program is
    /// race-free, and later runs of the very same program (equal in every instruction and
    /// declaration) skip the detector: its verdict depends on the program alone. Programs with
    /// data-dependent operands are checked on every run. [`Session::race_checks`] counts both.
    pub fn run(&mut self, program: &Program, bind: &BTreeMap<String, String>) -> Result<Stats, SimError> {
        let mut mem = self.executor.prepare_in(program, &mut self.arena)?;
        let bindings = self.resolve(program, bind)?;
        // Move the inputs in. The first binding of a session tensor takes its bytes; a second
        // binding of the same tensor (x + x) gets a device copy of them.
        let mut moved: Vec<(&str, &str)> = Vec::new();
        let mut result = Ok(());
        for b in bindings.iter().filter(|b| b.role == HbmRole::Input) {
            let data = if let Some(&(first, _)) = moved.iter().find(|(_, s)| *s == b.session) {
                let copy = mem.hbm_tensor(first).map(|t| t.data.clone()).unwrap_or_default();
                self.transfers.device_copy_bytes += copy.len() as u64;
                copy
            } else {
                match self.tensors.get_mut(b.session) {
                    Some(t) => std::mem::take(&mut t.data),
                    None => Vec::new(),
                }
            };
            if let Err(data) = mem.install(b.program, data) {
                // resolve() checked name, dtype and shape, so this is unreachable; put the bytes
                // back and fail cleanly rather than trust that.
                if let Some(t) = self.tensors.get_mut(b.session)
                    && t.data.is_empty()
                {
                    t.data = data;
                }
                result = Err(SimError::program(ErrorKind::Invalid(format!(
                    "session tensor `{}` could not be bound to `{}`",
                    b.session, b.program
                ))));
                break;
            }
            if !moved.iter().any(|(_, s)| *s == b.session) {
                moved.push((b.program, b.session));
            }
        }
        // The race detector runs unless an earlier run proved this same program race-free.
        let detect = self.executor.race_checks(program);
        let key = if detect { race_key(program) } else { 0 };
        let proved = detect && self.race_free.contains(key, program);
        let run = result.and_then(|()| self.executor.execute_checked(program, &mut mem, detect && !proved));
        // Inputs go back first (even on error), then outputs replace what they are bound to.
        for &(program_name, session_name) in &moved {
            if let (Some(t), Some(data)) = (self.tensors.get_mut(session_name), mem.take_data(program_name)) {
                t.data = data;
            }
        }
        let stats = match run {
            Ok(stats) => stats,
            Err(e) => {
                self.arena.recycle(mem);
                return Err(e);
            }
        };
        for b in bindings.iter().filter(|b| b.role == HbmRole::Output) {
            let data = mem.take_data(b.program).unwrap_or_default();
            self.tensors.insert(
                b.session.to_string(),
                DeviceTensor {
                    dtype: b.dtype,
                    shape: b.shape.to_vec(),
                    data,
                },
            );
        }
        self.arena.recycle(mem);
        self.transfers.runs += 1;
        if proved {
            self.race_free.counts.reused += 1;
        } else if detect {
            self.race_free.counts.checked += 1;
            if !has_dynamic_operand(program) {
                self.race_free.insert(key, program);
            }
        }
        Ok(stats)
    }

    /// Checks `bind` against the program and the session: every Input/Output declaration gets a
    /// session name, every input exists with the declared dtype and shape, no binding names a
    /// tensor the program lacks, and no two outputs share a session tensor.
    fn resolve<'a>(
        &self,
        program: &'a Program,
        bind: &'a BTreeMap<String, String>,
    ) -> Result<Vec<Binding<'a>>, SimError> {
        let fail = |msg: String| Err(SimError::program(ErrorKind::Invalid(msg)));
        for name in bind.keys() {
            match program.hbm.iter().find(|d| &d.name == name) {
                None => return fail(format!("bind names `{name}`, which the program does not declare")),
                Some(d) if d.role == HbmRole::Scratch => {
                    return fail(format!("bind names `{name}`, a scratch tensor of the program"));
                }
                Some(_) => {}
            }
        }
        let mut out = Vec::new();
        for d in program.hbm.iter().filter(|d| d.role != HbmRole::Scratch) {
            let session = bind.get(&d.name).map_or(d.name.as_str(), String::as_str);
            if d.role == HbmRole::Input {
                let Some(t) = self.tensors.get(session) else {
                    return fail(format!(
                        "input `{}` is bound to session tensor `{session}`, which does not exist",
                        d.name
                    ));
                };
                if t.dtype != d.dtype || t.shape != d.shape {
                    return Err(SimError::program(ErrorKind::ShapeMismatch(format!(
                        "input `{}` is bound to session tensor `{session}`, which is {} {:?}; the program declares {} {:?}",
                        d.name, t.dtype, t.shape, d.dtype, d.shape
                    ))));
                }
            }
            out.push(Binding {
                program: &d.name,
                session,
                role: d.role,
                dtype: d.dtype,
                shape: &d.shape,
            });
        }
        for o in out.iter().filter(|b| b.role == HbmRole::Output) {
            if let Some(other) = out
                .iter()
                .find(|b| b.session == o.session && b.program != o.program && b.role == HbmRole::Output)
            {
                return fail(format!(
                    "outputs `{}` and `{}` are both bound to session tensor `{}`",
                    o.program, other.program, o.session
                ));
            }
        }
        Ok(out)
    }
}

/// One program HBM tensor bound to one session tensor.
struct Binding<'a> {
    program: &'a str,
    session: &'a str,
    role: HbmRole,
    dtype: DType,
    shape: &'a [usize],
}
