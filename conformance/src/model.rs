//! Whole models on the simulator (`trnconf model run DIR`, docs/models.md): a captured Core ATen
//! graph (docs/model-format.md) executed node by node through the same lowering, executor and
//! comparison as the op suite.
//!
//! Every node runs twice:
//! - **isolated**, on the reference values of its inputs: the op-level verdict, under exactly the
//!   suite's comparison rules (a node that fails here is a wrong op at this call form);
//! - **chained**, on what the device computed for its inputs: the model's real run, whose error
//!   against the reference shows how the numbers drift through depth. Its error is reported,
//!   with its growth relative to the node's inputs; it is not a verdict, because an op that is
//!   right can still pass on the drift it was given.
//!
//! Weights are regenerated from their recipe ([`recipe_fill`]), bit for bit as the capture script
//! made them.

use crate::case::{Case, Check, OpCall, Provenance, TensorMeta, Value};
use crate::compare::{self, ActualOutputs, OutputMetrics};
use crate::executor::CaseExecutor;
use crate::lower::{self, LowerError};
pub use crate::report::model::{ErrorSummary, ModelResult, NodeResult};
use crate::runner;
use crate::tensor::StoredDtype as _;
use crate::tensor::{Tensor, TorchDType};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use trnsim::{DType, HbmRole, Session};

/// The model format version this runner reads.
pub const MODEL_FORMAT: u32 = 1;

/// Ops the capture records that compute nothing: runtime assertions on metadata. The runner
/// checks the metadata they assert from the recorded values instead of running them.
pub const ASSERTION_OPS: &[&str] = &["_assert_tensor_metadata", "_assert_async", "_assert_scalar"];

/// A weight's deterministic recipe (docs/model-format.md, "Weights").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recipe {
    pub kind: String,
    pub seed: u64,
    pub lo: f64,
    pub hi: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WeightSpec {
    /// The parameter's qualified name in the module (informational).
    #[serde(default)]
    pub target: Option<String>,
    #[serde(default)]
    pub recipe: Option<Recipe>,
    /// Stored in tensors.safetensors under the value's name.
    #[serde(default)]
    pub stored: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ValueMeta {
    pub dtype: TorchDType,
    pub shape: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub op: String,
    #[serde(default)]
    pub args: Vec<Value>,
    #[serde(default)]
    pub kwargs: BTreeMap<String, Value>,
    #[serde(default)]
    pub outputs: Vec<Value>,
    /// The user's source line that produced the node, when the exporter kept it.
    #[serde(default)]
    pub stack: Option<String>,
}

/// graph.json.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ModelDoc {
    pub format: u32,
    pub name: String,
    #[serde(default)]
    pub torch: Option<String>,
    pub inputs: Vec<String>,
    pub weights: BTreeMap<String, WeightSpec>,
    pub values: BTreeMap<String, ValueMeta>,
    pub nodes: Vec<Node>,
    pub outputs: Vec<String>,
    #[serde(default)]
    pub unsupported: Vec<String>,
}

/// A loaded model: the document and every stored tensor (inputs, stored weights, references).
pub struct Model {
    pub dir: PathBuf,
    pub doc: ModelDoc,
    pub stored: BTreeMap<String, Tensor>,
}

impl Model {
    pub fn load(dir: &Path) -> Result<Model, String> {
        let gpath = dir.join("graph.json");
        let text = std::fs::read_to_string(&gpath).map_err(|e| format!("{}: {e}", gpath.display()))?;
        let doc: ModelDoc = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", gpath.display()))?;
        if doc.format != MODEL_FORMAT {
            return Err(format!(
                "{}: model format {} (this runner reads {MODEL_FORMAT})",
                gpath.display(),
                doc.format
            ));
        }
        let mut shards: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        shards.sort();
        let mut stored = BTreeMap::new();
        for tpath in &shards {
            let bytes = std::fs::read(tpath).map_err(|e| format!("{}: {e}", tpath.display()))?;
            let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| format!("{}: {e}", tpath.display()))?;
            for (name, view) in st.tensors() {
                let dtype = crate::tensor::ALL_TORCH_DTYPES
                    .iter()
                    .copied()
                    .find(|d| d.safetensors_dtype() == view.dtype() && !d.is_complex())
                    .ok_or_else(|| format!("{}: `{name}` has dtype {:?}", tpath.display(), view.dtype()))?;
                let t = Tensor::new(dtype, view.shape().to_vec(), view.data().to_vec());
                if !t.is_consistent() {
                    return Err(format!("{}: `{name}` is inconsistent", tpath.display()));
                }
                if stored.insert(name.clone(), t).is_some() {
                    return Err(format!("{}: `{name}` is stored twice", tpath.display()));
                }
            }
        }
        // A graph that computes nothing is never a passing model.
        if doc.nodes.iter().all(|n| ASSERTION_OPS.contains(&n.op.as_str())) {
            return Err(format!(
                "{}: the graph has no nodes to run ({} node(s), none computing): nothing to check",
                gpath.display(),
                doc.nodes.len()
            ));
        }
        // Every graph input and stored weight must be in a tensors file: say which is missing
        // where it is read, not later as an unknown value.
        let must_store = doc.inputs.iter().map(|n| (n, "graph input")).chain(
            doc.weights
                .iter()
                .filter(|(_, w)| w.stored)
                .map(|(n, _)| (n, "stored weight")),
        );
        for (name, what) in must_store {
            if !stored.contains_key(name) {
                let files = if shards.is_empty() {
                    "the directory has no *.safetensors tensors file".to_string()
                } else {
                    format!("none of its {} tensors file(s) holds it", shards.len())
                };
                return Err(format!("{}: {what} `{name}` is not stored: {files}", dir.display()));
            }
        }
        Ok(Model {
            dir: dir.to_path_buf(),
            doc,
            stored,
        })
    }

    /// The value of a graph input, weight or constant.
    fn leaf(&self, name: &str) -> Result<Tensor, String> {
        if let Some(t) = self.stored.get(name) {
            return Ok(t.clone());
        }
        let spec = self
            .doc
            .weights
            .get(name)
            .ok_or_else(|| format!("`{name}` is neither stored nor a weight"))?;
        let meta = self
            .doc
            .values
            .get(name)
            .ok_or_else(|| format!("no metadata for `{name}`"))?;
        match &spec.recipe {
            Some(r) => recipe_fill(r, meta.dtype, &meta.shape),
            None => Err(format!("weight `{name}` has no recipe and is not stored")),
        }
    }

    /// The reference value of a node output, when it is stored whole.
    pub fn reference(&self, name: &str) -> Option<&Tensor> {
        self.stored.get(&format!("ref.{name}"))
    }

    /// A sampled reference: flat indices (int64) and the values there.
    pub fn sampled_reference(&self, name: &str) -> Option<(&Tensor, &Tensor)> {
        Some((
            self.stored.get(&format!("sample_idx.{name}"))?,
            self.stored.get(&format!("sample.{name}"))?,
        ))
    }
}

/// Compares the elements of `actual` at a sampled reference's indices, under the suite's rules.
fn compare_sample(op: &str, actual: &Tensor, idx: &Tensor, vals: &Tensor) -> Result<Vec<OutputMetrics>, String> {
    let size = actual.dtype.size();
    let mut data = Vec::with_capacity(idx.numel() * size);
    for i in 0..idx.numel() {
        let k = usize::try_from(idx.value_i64(i)).map_err(|_| "negative sample index".to_string())?;
        let bytes = actual
            .data
            .get(k * size..(k + 1) * size)
            .ok_or_else(|| format!("sample index {k} outside an output of {} elements", actual.numel()))?;
        data.extend_from_slice(bytes);
    }
    let gathered = Tensor::new(actual.dtype, vec![idx.numel()], data);
    let name = "output.0".to_string();
    let case = Case {
        id: String::new(),
        op: op.to_string(),
        dtype: vals.dtype.name().to_string(),
        file: PathBuf::new(),
        schema: None,
        call: OpCall {
            args: Vec::new(),
            kwargs: BTreeMap::new(),
        },
        outputs: vec![Value::Tensor(name.clone())],
        tensors: BTreeMap::from([(name.clone(), vals.clone())]),
        tensor_meta: BTreeMap::from([(name.clone(), TensorMeta::contiguous(vals.dtype, &vals.shape))]),
        check: Check::Values,
        provenance: Provenance::default(),
        oracles: BTreeMap::new(),
    };
    let actual = ActualOutputs {
        tensors: BTreeMap::from([(name, gathered)]),
        ..Default::default()
    };
    Ok(compare::compare_case(&case, &actual).outputs)
}

/// SplitMix64, as golden/models/capture.py computes it: output `i` (from 1) of the stream at `seed`.
fn splitmix64(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A weight from its recipe: f32 `lo + (hi − lo)·u`, `u = (x >> 40)·2⁻²⁴`, in f64 rounded once.
pub fn recipe_fill(r: &Recipe, dtype: TorchDType, shape: &[usize]) -> Result<Tensor, String> {
    if r.kind != "uniform" {
        return Err(format!("unknown weight recipe `{}`", r.kind));
    }
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n as u64)
        .map(|i| {
            let u = (splitmix64(r.seed, i + 1) >> 40) as f64 * 2f64.powi(-24);
            (r.lo + (r.hi - r.lo) * u) as f32 as f64
        })
        .collect();
    Ok(Tensor::from_f64(dtype, shape, &vals))
}

/// One node as a golden case: inputs renamed `input.i` / `input.i.j` / `kwarg.k`, outputs
/// `output.i` (the op suite's naming, which the lowerings and comparison share). The metadata
/// comes from the graph; the case holds the outputs' whole references (for the comparison) and no
/// input values: each run fills those in ([`NodeCase::with_inputs`]).
struct NodeCase {
    case: Case,
    /// Golden-case input name → graph value name.
    input_of: BTreeMap<String, String>,
    /// Golden-case output name → graph value name.
    output_of: BTreeMap<String, String>,
}

impl NodeCase {
    /// The case with every input's value from `values` (by graph value name).
    fn with_inputs(&self, node: &str, values: &mut dyn FnMut(&str) -> Option<Tensor>) -> Result<Case, String> {
        let mut case = self.case.clone();
        for (local, global) in &self.input_of {
            let t = values(global).ok_or_else(|| format!("node `{node}`: input `{global}` has no value"))?;
            case.tensors.insert(local.clone(), t);
        }
        Ok(case)
    }
}

fn rename_value(v: &Value, name: &str, map: &mut BTreeMap<String, String>) -> Value {
    match v {
        Value::Tensor(t) => {
            map.insert(name.to_string(), t.clone());
            Value::Tensor(name.to_string())
        }
        Value::Tensors(ts) => Value::Tensors(
            ts.iter()
                .enumerate()
                .map(|(j, t)| {
                    t.as_ref().map(|t| {
                        let n = format!("{name}.{j}");
                        map.insert(n.clone(), t.clone());
                        n
                    })
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn node_case(model: &Model, node: &Node) -> Result<NodeCase, String> {
    let mut input_of = BTreeMap::new();
    let args: Vec<Value> = node
        .args
        .iter()
        .enumerate()
        .map(|(i, v)| rename_value(v, &format!("input.{i}"), &mut input_of))
        .collect();
    let kwargs: BTreeMap<String, Value> = node
        .kwargs
        .iter()
        .map(|(k, v)| (k.clone(), rename_value(v, &format!("kwarg.{k}"), &mut input_of)))
        .collect();
    let mut output_of = BTreeMap::new();
    let outputs: Vec<Value> = node
        .outputs
        .iter()
        .enumerate()
        .map(|(i, v)| rename_value(v, &format!("output.{i}"), &mut output_of))
        .collect();
    let mut tensors = BTreeMap::new();
    let mut tensor_meta = BTreeMap::new();
    let meta_of = |global: &str| {
        model
            .doc
            .values
            .get(global)
            .ok_or_else(|| format!("node `{}`: no metadata for `{global}`", node.name))
    };
    for (local, global) in &input_of {
        let meta = meta_of(global)?;
        tensor_meta.insert(local.clone(), TensorMeta::contiguous(meta.dtype, &meta.shape));
    }
    for (local, global) in &output_of {
        let meta = meta_of(global)?;
        tensor_meta.insert(local.clone(), TensorMeta::contiguous(meta.dtype, &meta.shape));
        if let Some(r) = model.reference(global) {
            tensors.insert(local.clone(), r.clone());
        }
    }
    let dtype = primary_dtype(&args, &kwargs, &tensor_meta);
    Ok(NodeCase {
        case: Case {
            id: format!("{}::{}", model.doc.name, node.name),
            op: node.op.clone(),
            dtype,
            file: model.dir.join("graph.json"),
            schema: None,
            call: OpCall { args, kwargs },
            outputs,
            tensors,
            tensor_meta,
            check: Check::Values,
            provenance: Provenance {
                source: Some("model".into()),
                ..Default::default()
            },
            oracles: BTreeMap::new(),
        },
        input_of,
        output_of,
    })
}

/// The golden format's primary dtype: the first floating input, else the first input, else the
/// first output, else `none`.
fn primary_dtype(args: &[Value], kwargs: &BTreeMap<String, Value>, meta: &BTreeMap<String, TensorMeta>) -> String {
    let names: Vec<String> = args
        .iter()
        .chain(kwargs.values())
        .flat_map(|v| v.tensor_names().into_iter().map(str::to_string).collect::<Vec<_>>())
        .collect();
    let first_float = names.iter().find(|n| meta[*n].dtype.is_float());
    first_float
        .or(names.first())
        .map(|n| meta[n].dtype.name().to_string())
        .or_else(|| meta.get("output.0").map(|m| m.dtype.name().to_string()))
        .unwrap_or_else(|| "none".into())
}

enum NodeError {
    Unsupported(String),
    Error(String),
}

/// A node lowered once: both runs (isolated and chained) execute this program.
fn lower_node(case: &Case, executor: &dyn CaseExecutor) -> Result<lower::Lowered, NodeError> {
    let lowered = match lower::lower(case, executor.target()) {
        Ok(l) => l,
        Err(LowerError::NotLowered(op)) => return Err(NodeError::Unsupported(format!("`{op}` is not lowered"))),
        Err(e @ LowerError::Unsupported { .. }) => return Err(NodeError::Unsupported(e.to_string())),
        Err(e) => return Err(NodeError::Error(format!("lowering: {e}"))),
    };
    runner::check_compute_work(case, &lowered.program).map_err(NodeError::Error)?;
    Ok(lowered)
}

/// What one execution of a node gave, read back to the host for the comparison.
struct NodeRun {
    outputs: BTreeMap<String, Tensor>,
    values: BTreeMap<usize, Value>,
    instructions: u64,
    /// The timeline's makespan: the node's estimated device time.
    est_us: Option<f64>,
}

fn total_instructions(stats: &trnsim::Stats) -> u64 {
    trnsim::program::ALL_ENGINES
        .iter()
        .map(|&e| stats.instructions.get(e))
        .sum()
}

fn est_us(stats: &trnsim::Stats) -> Option<f64> {
    (stats.timeline.makespan_ns > 0.0).then(|| stats.timeline.makespan_ns / 1e3)
}

/// Runs a lowered node on host inputs (`case` holds them) through `executor`.
fn run_on_host(case: &Case, lowered: &lower::Lowered, executor: &dyn CaseExecutor) -> Result<NodeRun, NodeError> {
    let inputs = runner::device_inputs(case, &lowered.program).map_err(NodeError::Error)?;
    let run = executor.execute(&lowered.program, &inputs).map_err(NodeError::Error)?;
    let outs = runner::host_outputs(case, &lowered.program, &run.outputs).map_err(NodeError::Error)?;
    let mut values = lowered.values.clone();
    values.extend(outs.values);
    Ok(NodeRun {
        outputs: outs.tensors,
        values,
        instructions: run.stats.as_ref().map_or_else(
            || {
                trnsim::program::ALL_ENGINES
                    .iter()
                    .map(|&e| run.instructions.get(e))
                    .sum()
            },
            total_instructions,
        ),
        est_us: run.stats.as_ref().and_then(est_us),
    })
}

/// Compares a node run with the references: whole ones under the suite's rules, sampled ones at
/// their indices.
fn judge(model: &Model, nc: &NodeCase, run: &NodeRun) -> Result<Vec<OutputMetrics>, String> {
    let case = &nc.case;
    let actual = ActualOutputs {
        tensors: run.outputs.clone(),
        values: run.values.clone(),
        ..Default::default()
    };
    // Outputs whose reference is stored only as a sample are compared by `compare_sample`.
    let mut whole = case.clone();
    for v in &mut whole.outputs {
        let keep = |n: &String| case.tensors.contains_key(n);
        match v {
            Value::Tensor(n) if !keep(n) => *v = Value::Tensors(Vec::new()),
            Value::Tensors(ns) => ns.retain(|n| n.as_ref().is_none_or(keep)),
            _ => {}
        }
    }
    let mut metrics = compare::compare_case(&whole, &actual).outputs;
    for (local, global) in &nc.output_of {
        if let (Some((idx, vals)), Some(out)) = (model.sampled_reference(global), run.outputs.get(local)) {
            metrics.extend(compare_sample(&case.op, out, idx, vals)?);
        }
    }
    Ok(metrics)
}

/// The device dtype a host tensor lives in on the device: the boundary's only conversions are
/// int64 → int32 and complex64 → its f32 real view (`runner::to_device`).
fn device_form(name: &str, t: &Tensor) -> Result<trnsim::HostTensor, String> {
    let dtype = match t.dtype {
        TorchDType::I64 => DType::I32,
        TorchDType::C64 => DType::F32,
        d => d
            .device_dtype()
            .ok_or_else(|| format!("`{name}` is {d}, which the device has no dtype for"))?,
    };
    runner::to_device(name, t, dtype)
}

/// The model's real run: every node executes on a [`Session`], its inputs bound to the session
/// tensors earlier nodes wrote, its outputs left there for later nodes. Only the leaves (inputs,
/// weights, constants) are copied in, once, before the first node; nothing is copied out except
/// what the caller reads to compare ([`Forward::read`]).
pub struct Forward<'m> {
    model: &'m Model,
    session: Option<Session>,
    /// Host copies of values for executors without a session (every node then runs on the host).
    host: BTreeMap<String, Tensor>,
    /// Graph value → the index of the last node that reads it (freed after it, unless an output).
    last_use: BTreeMap<String, usize>,
    /// Bytes the leaves put on the device.
    pub leaf_bytes: u64,
    /// Nodes that could not run on session tensors (data-dependent sizes, scalar outputs, or an
    /// executor without a session): their inputs were read to the host and their outputs put back.
    pub host_round_trips: Vec<String>,
}

/// What one node of the forward did.
pub struct Step {
    pub instructions: u64,
    pub est_us: Option<f64>,
}

impl<'m> Forward<'m> {
    /// Puts every leaf on the device (a session of the executor's simulator, when it has one).
    pub fn new(model: &'m Model, executor: &dyn CaseExecutor) -> Result<Forward<'m>, String> {
        let mut session = executor.session_executor().map(Session::new);
        let mut host = BTreeMap::new();
        let mut leaf_bytes = 0;
        let leaves = model
            .doc
            .inputs
            .iter()
            .chain(model.doc.weights.keys())
            .collect::<std::collections::BTreeSet<_>>();
        for name in leaves {
            let t = model.leaf(name)?;
            match &mut session {
                Some(s) => {
                    let d = device_form(name, &t)?;
                    leaf_bytes += d.data.len() as u64;
                    s.put(name, d)
                        .map_err(|e| format!("putting `{name}` on the device: {e}"))?;
                }
                None => {
                    host.insert(name.clone(), t);
                }
            }
        }
        let mut last_use = BTreeMap::new();
        for (i, node) in model.doc.nodes.iter().enumerate() {
            for v in node.args.iter().chain(node.kwargs.values()) {
                for n in v.tensor_names() {
                    last_use.insert(n.to_string(), i);
                }
            }
        }
        Ok(Forward {
            model,
            session,
            host,
            last_use,
            leaf_bytes,
            host_round_trips: Vec::new(),
        })
    }

    /// Bytes that crossed the host boundary so far (none without a session).
    pub fn transfers(&self) -> Option<&trnsim::Transfers> {
        self.session.as_ref().map(Session::transfers)
    }

    /// A value's device bytes, read to the host as its graph dtype (a counted transfer).
    pub fn read(&mut self, name: &str) -> Option<Tensor> {
        match &mut self.session {
            Some(s) => {
                let h = s.get(name)?;
                let meta = self.model.doc.values.get(name)?;
                runner::from_device(name, &h, meta.dtype).ok()
            }
            None => self.host.get(name).cloned(),
        }
    }

    fn has(&self, name: &str) -> bool {
        match &self.session {
            Some(s) => s.tensor(name).is_some(),
            None => self.host.contains_key(name),
        }
    }

    /// Runs node `index` (already lowered) on the values earlier nodes left on the device.
    fn step(
        &mut self,
        index: usize,
        nc: &NodeCase,
        lowered: &lower::Lowered,
        executor: &dyn CaseExecutor,
    ) -> Result<Step, NodeError> {
        let model = self.model;
        let node = &model.doc.nodes[index];
        let program = &lowered.program;
        let case = &nc.case;
        // On session tensors when every program tensor maps to a graph value in its device form;
        // otherwise (data-dependent sizes, scalars read back as values) through the host.
        let on_device = self.session.is_some()
            && lower::data_dependent_output(&case.op, &case.call, &case.tensor_meta).is_none()
            && program
                .hbm
                .iter()
                .filter(|d| d.role == HbmRole::Output)
                .all(|d| nc.output_of.contains_key(&d.name));
        let step = if on_device {
            let Some(session) = self.session.as_mut() else {
                unreachable!("on_device implies a session")
            };
            let mut bind = BTreeMap::new();
            for d in program.hbm.iter().filter(|d| d.role != HbmRole::Scratch) {
                let global = nc
                    .input_of
                    .get(&d.name)
                    .or_else(|| nc.output_of.get(&d.name))
                    .ok_or_else(|| NodeError::Error(format!("the program declares `{}`, not a node tensor", d.name)))?;
                bind.insert(d.name.clone(), global.clone());
            }
            let stats = session
                .run(program, &bind)
                .map_err(|e| NodeError::Error(format!("simulator: {e}")))?;
            Step {
                instructions: total_instructions(&stats),
                est_us: est_us(&stats),
            }
        } else {
            if self.session.is_some() {
                self.host_round_trips.push(node.name.clone());
            }
            let host_case = nc
                .with_inputs(&node.name, &mut |g| self.read(g))
                .map_err(NodeError::Error)?;
            let run = run_on_host(&host_case, lowered, executor)?;
            for (local, global) in &nc.output_of {
                if let Some(t) = run.outputs.get(local) {
                    match &mut self.session {
                        Some(s) => {
                            let d = device_form(global, t).map_err(NodeError::Error)?;
                            s.put(global, d).map_err(|e| NodeError::Error(e.to_string()))?;
                        }
                        None => {
                            self.host.insert(global.clone(), t.clone());
                        }
                    }
                }
            }
            Step {
                instructions: run.instructions,
                est_us: run.est_us,
            }
        };
        Ok(step)
    }

    /// Frees the values no node after `index` reads (the model's outputs stay).
    fn free_after(&mut self, index: usize) {
        let dead: Vec<String> = self
            .last_use
            .iter()
            .filter(|&(n, &last)| last == index && !self.model.doc.outputs.contains(n))
            .map(|(n, _)| n.clone())
            .collect();
        for n in dead {
            self.last_use.remove(&n);
            match &mut self.session {
                Some(s) => {
                    s.delete(&n);
                }
                None => {
                    self.host.remove(&n);
                }
            }
        }
    }
}

/// One forward of a model with nothing judged: what the benchmark times.
#[derive(Clone, Debug)]
pub struct ForwardReport {
    /// Putting the leaves (inputs, recipe weights, constants) on the device, in ms.
    pub load_ms: f64,
    /// Lowering every node, in ms: wall-clock, then on the caller's second clock
    /// ([`run_forward_with_clock`]; the wall clock again for [`run_forward`]).
    pub lower_ms: [f64; 2],
    /// Simulating every node on the session, in ms, on the same two clocks.
    pub simulate_ms: [f64; 2],
    /// Estimated device time of the model (sum of the nodes' makespans), in µs.
    pub est_us: f64,
    /// Per node: name, op, estimated device time in µs.
    pub nodes: Vec<(String, String, Option<f64>)>,
    /// The model outputs' error against the references.
    pub end_to_end: Vec<(String, ErrorSummary)>,
    pub transfers: Option<trnsim::Transfers>,
}

/// Runs the model's forward once on `executor`: every node lowered and run on the session, the
/// intermediates left on the device, and only the model's outputs read back (and compared). Any
/// node that cannot run is an error: a forward that skipped work would time less than the model.
pub fn run_forward(model: &Model, executor: &dyn CaseExecutor) -> Result<ForwardReport, String> {
    let start = std::time::Instant::now();
    run_forward_with_clock(model, executor, &|| start.elapsed().as_secs_f64())
}

/// [`run_forward`], timing the lowering and simulation also on `clock` (seconds; the benchmark
/// passes the thread's CPU time, which does not grow while other processes hold the core).
pub fn run_forward_with_clock(
    model: &Model,
    executor: &dyn CaseExecutor,
    clock: &dyn Fn() -> f64,
) -> Result<ForwardReport, String> {
    let origin = std::time::Instant::now();
    let now = || [origin.elapsed().as_secs_f64(), clock()];
    let t = std::time::Instant::now();
    let mut fwd = Forward::new(model, executor)?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    let (mut lower_s, mut sim_s) = ([0.0; 2], [0.0; 2]);
    let add = |acc: &mut [f64; 2], from: [f64; 2], to: [f64; 2]| {
        acc[0] += to[0] - from[0];
        acc[1] += to[1] - from[1];
    };
    let mut nodes = Vec::new();
    let mut finals = Vec::new();
    for (index, node) in model.doc.nodes.iter().enumerate() {
        if ASSERTION_OPS.contains(&node.op.as_str()) || node.op == "getitem" {
            continue;
        }
        let why = |e: NodeError| match e {
            NodeError::Unsupported(w) | NodeError::Error(w) => format!("node `{}` ({}): {w}", node.name, node.op),
        };
        let t0 = now();
        let nc = node_case(model, node)?;
        let lowered = lower_node(&nc.case, executor).map_err(why)?;
        let t1 = now();
        add(&mut lower_s, t0, t1);
        let step = fwd.step(index, &nc, &lowered, executor).map_err(why)?;
        fwd.free_after(index);
        add(&mut sim_s, t1, now());
        nodes.push((node.name.clone(), node.op.clone(), step.est_us));
        if nc.output_of.values().any(|g| model.doc.outputs.contains(g)) {
            finals.push((nc, lowered.values));
        }
    }
    let mut end_to_end = Vec::new();
    for (nc, values) in finals {
        let outputs = nc
            .output_of
            .iter()
            .filter_map(|(local, global)| fwd.read(global).map(|t| (local.clone(), t)))
            .collect();
        let run = NodeRun {
            outputs,
            values,
            instructions: 0,
            est_us: None,
        };
        let s = ErrorSummary::of(&judge(model, &nc, &run)?);
        for global in nc.output_of.values().filter(|g| model.doc.outputs.contains(g)) {
            end_to_end.push((global.clone(), s.clone()));
        }
    }
    Ok(ForwardReport {
        load_ms,
        lower_ms: lower_s.map(|x| x * 1e3),
        simulate_ms: sim_s.map(|x| x * 1e3),
        est_us: nodes.iter().filter_map(|n| n.2).sum(),
        nodes,
        end_to_end,
        transfers: fwd.transfers().cloned(),
    })
}

/// What a model run does.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Also run every node on its reference inputs (the verdict). Off: only the chained run,
    /// whose error is reported but which judges nothing (the benchmark's forward).
    pub isolated: bool,
    /// Read every node's chained outputs back to compare them (off: only the model's outputs).
    pub compare_every_node: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            isolated: true,
            compare_every_node: true,
        }
    }
}

/// Runs a loaded model on `executor`; `progress` is called after each node.
pub fn run_model(model: &Model, executor: &dyn CaseExecutor, progress: &dyn Fn(usize, usize)) -> ModelResult {
    run_model_with(model, executor, RunOptions::default(), progress)
}

/// [`run_model`] with options.
pub fn run_model_with(
    model: &Model,
    executor: &dyn CaseExecutor,
    opts: RunOptions,
    progress: &dyn Fn(usize, usize),
) -> ModelResult {
    let start = std::time::Instant::now();
    let mut forward_s = 0.0;
    let mut fwd = match Forward::new(model, executor) {
        Ok(f) => Some(f),
        Err(e) => {
            return ModelResult {
                model: model.doc.name.clone(),
                dir: model.dir.display().to_string(),
                nodes: Vec::new(),
                first_failing_node: Some("(load)".into()),
                first_drift: Some(("(load)".into(), e.clone())),
                end_to_end: Vec::new(),
                unsupported: Vec::new(),
                passed: false,
                wall_ms: start.elapsed().as_secs_f64() * 1e3,
                forward_ms: 0.0,
                est_us: 0.0,
                transfers: None,
                host_round_trips: Vec::new(),
                error: Some(e),
            };
        }
    };
    let fwd_ref = fwd.as_mut().expect("set above");
    // Chained relative error of every value so far (for error growth).
    let mut drift: BTreeMap<String, f64> = BTreeMap::new();
    let mut nodes = Vec::new();
    let mut unsupported = Vec::new();
    let total = model.doc.nodes.len();
    for (index, node) in model.doc.nodes.iter().enumerate() {
        progress(index, total);
        let out_meta = node
            .outputs
            .iter()
            .flat_map(|v| v.tensor_names())
            .next()
            .and_then(|n| model.doc.values.get(n));
        let mut r = NodeResult {
            index,
            name: node.name.clone(),
            op: node.op.clone(),
            dtype: out_meta.map(|m| m.dtype.name().to_string()).unwrap_or_default(),
            shape: out_meta.map(|m| m.shape.clone()).unwrap_or_default(),
            status: "error".into(),
            message: String::new(),
            isolated: None,
            chained: None,
            growth: None,
            chained_within_tolerance: false,
            instructions: 0,
            est_us: None,
            stack: node.stack.clone(),
        };
        if ASSERTION_OPS.contains(&node.op.as_str()) || node.op == "getitem" {
            r.status = "skipped".into();
            r.message = if node.op == "getitem" {
                "tuple element selection: no computation".into()
            } else {
                "metadata assertion: nothing to compute (its metadata is checked at capture)".into()
            };
            r.chained_within_tolerance = true;
            nodes.push(r);
            continue;
        }
        let t_lower = std::time::Instant::now();
        let prepared = node_case(model, node)
            .map_err(NodeError::Error)
            .and_then(|nc| lower_node(&nc.case, executor).map(|l| (nc, l)));
        forward_s += t_lower.elapsed().as_secs_f64();
        let (nc, lowered) = match prepared {
            Ok(p) => p,
            Err(NodeError::Unsupported(why)) => {
                r.status = "unsupported".into();
                r.message = why.clone();
                unsupported.push(format!("{} ({}): {why}", node.op, node.name));
                nodes.push(r);
                continue;
            }
            Err(NodeError::Error(why)) => {
                r.message = why;
                nodes.push(r);
                continue;
            }
        };
        // Isolated: reference inputs. An input stored only as a sample has no whole reference:
        // the isolated run takes the device's value for it (documented in docs/models.md).
        if opts.isolated {
            let iso = nc
                .with_inputs(&node.name, &mut |g| {
                    model
                        .reference(g)
                        .cloned()
                        .or_else(|| model.leaf(g).ok())
                        .or_else(|| fwd_ref.read(g))
                })
                .map_err(NodeError::Error)
                .and_then(|case| run_on_host(&case, &lowered, executor))
                .and_then(|run| judge(model, &nc, &run).map(|m| (run, m)).map_err(NodeError::Error));
            match iso {
                Ok((run, metrics)) => {
                    let s = ErrorSummary::of(&metrics);
                    r.status = if s.passed { "pass" } else { "fail" }.into();
                    if !s.passed {
                        r.message = s.message.clone();
                    }
                    r.instructions = run.instructions;
                    r.isolated = Some(s);
                }
                Err(NodeError::Unsupported(why)) => {
                    r.status = "unsupported".into();
                    r.message = why.clone();
                    unsupported.push(format!("{} ({}): {why}", node.op, node.name));
                }
                Err(NodeError::Error(why)) => r.message = why,
            }
        } else {
            r.status = "not judged".into();
        }
        // Chained: the device's own values for the inputs. An input the device could not compute
        // is put from its reference, so the rest of the model still runs.
        for global in nc.input_of.values() {
            if !fwd_ref.has(global)
                && let Some(t) = model.reference(global)
            {
                if let Some(s) = fwd_ref.session.as_mut() {
                    if let Ok(d) = device_form(global, t) {
                        let _ = s.put(global, d);
                    }
                } else {
                    fwd_ref.host.insert(global.clone(), t.clone());
                }
            }
        }
        let input_drift = nc
            .input_of
            .values()
            .filter_map(|g| drift.get(g).copied())
            .fold(0.0, f64::max);
        let t_run = std::time::Instant::now();
        let stepped = fwd_ref.step(index, &nc, &lowered, executor);
        forward_s += t_run.elapsed().as_secs_f64();
        match stepped {
            Ok(step) => {
                r.est_us = step.est_us;
                if !opts.isolated {
                    r.instructions = step.instructions;
                }
                let is_output = |g: &String| model.doc.outputs.contains(g);
                if opts.compare_every_node || nc.output_of.values().any(is_output) {
                    let outputs: BTreeMap<String, Tensor> = nc
                        .output_of
                        .iter()
                        .filter_map(|(local, global)| fwd_ref.read(global).map(|t| (local.clone(), t)))
                        .collect();
                    let run = NodeRun {
                        outputs,
                        values: lowered.values.clone(),
                        instructions: step.instructions,
                        est_us: step.est_us,
                    };
                    match judge(model, &nc, &run) {
                        Ok(metrics) => {
                            let s = ErrorSummary::of(&metrics);
                            r.chained_within_tolerance = s.passed;
                            if input_drift > 0.0 {
                                r.growth = Some(s.max_rel_err / input_drift);
                            }
                            for global in nc.output_of.values() {
                                drift.insert(global.clone(), s.max_rel_err);
                            }
                            r.chained = Some(s);
                        }
                        Err(e) => {
                            r.chained_within_tolerance = false;
                            if r.message.is_empty() {
                                r.message = format!("chained run: {e}");
                            }
                        }
                    }
                } else {
                    r.chained_within_tolerance = true;
                }
            }
            Err(_) => {
                // The node did not run: downstream nodes use its reference values.
                r.chained_within_tolerance = r.status == "pass";
            }
        }
        fwd_ref.free_after(index);
        nodes.push(r);
    }
    progress(total, total);
    let end_to_end = model
        .doc
        .outputs
        .iter()
        .filter_map(|name| {
            let produced = model
                .doc
                .nodes
                .iter()
                .rev()
                .find(|n| n.outputs.iter().any(|v| v.tensor_names().contains(&name.as_str())))?;
            let nr = nodes.iter().find(|r| r.name == produced.name)?;
            nr.chained.clone().map(|s| (name.clone(), s))
        })
        .collect();
    let first_failing_node = nodes
        .iter()
        .find(|r| r.status == "fail" || r.status == "error" || r.status == "unsupported")
        .map(|r| r.name.clone());
    let first_drift = nodes.iter().find(|r| !r.chained_within_tolerance).map(|r| {
        let why = match (&r.status[..], &r.chained) {
            ("pass", Some(c)) => format!(
                "the op is within tolerance on reference inputs; the drift it was given compounds ({})",
                c.message
            ),
            ("not judged", Some(c)) => format!("not judged on reference inputs ({})", c.message),
            (_, Some(c)) => format!("the op itself fails at this call form ({})", c.message),
            (_, None) => r.message.clone(),
        };
        (r.name.clone(), why)
    });
    // Without the isolated runs nothing is judged: such a run never reports a pass.
    let passed = opts.isolated && first_failing_node.is_none();
    let est_total = nodes.iter().filter_map(|n| n.est_us).sum();
    let fwd = fwd.expect("set above");
    ModelResult {
        model: model.doc.name.clone(),
        dir: model.dir.display().to_string(),
        nodes,
        first_failing_node,
        first_drift,
        end_to_end,
        unsupported,
        passed,
        wall_ms: start.elapsed().as_secs_f64() * 1e3,
        forward_ms: forward_s * 1e3,
        est_us: est_total,
        transfers: fwd.transfers().cloned(),
        host_round_trips: fwd.host_round_trips.clone(),
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // SplitMix64 from seed 0: the first outputs of Vigna's reference implementation.
        assert_eq!(splitmix64(0, 1), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(0, 2), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn recipe_values_lie_in_range_and_depend_on_the_seed() {
        let r = Recipe {
            kind: "uniform".into(),
            seed: 7,
            lo: -0.5,
            hi: 0.25,
        };
        let t = recipe_fill(&r, TorchDType::F32, &[64]).unwrap();
        let v = t.to_f64_vec();
        assert!(v.iter().all(|&x| (-0.5..0.25).contains(&x)));
        let t2 = recipe_fill(&Recipe { seed: 8, ..r.clone() }, TorchDType::F32, &[64]).unwrap();
        assert_ne!(t.data, t2.data);
        assert!(
            recipe_fill(
                &Recipe {
                    kind: "normal".into(),
                    ..r
                },
                TorchDType::F32,
                &[1]
            )
            .is_err()
        );
    }
}
