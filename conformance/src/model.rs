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
use crate::tensor::{Tensor, TorchDType};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

/// The tensors of one node as a golden case: inputs renamed `input.i` / `input.i.j` /
/// `kwarg.k`, outputs `output.i` (the op suite's naming, which the lowerings and comparison
/// share), with `values` giving each input's tensor.
struct NodeCase {
    case: Case,
    /// Golden-case input name → graph value name.
    input_of: BTreeMap<String, String>,
    /// Golden-case output name → graph value name.
    output_of: BTreeMap<String, String>,
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

fn node_case(model: &Model, node: &Node, values: &dyn Fn(&str) -> Option<Tensor>) -> Result<NodeCase, String> {
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
    for (local, global) in &input_of {
        let t = values(global).ok_or_else(|| format!("node `{}`: input `{global}` has no value", node.name))?;
        tensor_meta.insert(local.clone(), TensorMeta::contiguous(t.dtype, &t.shape));
        tensors.insert(local.clone(), t);
    }
    for (local, global) in &output_of {
        let meta = model
            .doc
            .values
            .get(global)
            .ok_or_else(|| format!("node `{}`: no metadata for output `{global}`", node.name))?;
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

/// What one execution of a node case gave.
struct NodeRun {
    metrics: Vec<OutputMetrics>,
    outputs: BTreeMap<String, Tensor>,
    instructions: u64,
}

enum NodeError {
    Unsupported(String),
    Error(String),
}

/// [`run_node`], then the sampled references of outputs stored as samples.
fn run_and_check(model: &Model, nc: &NodeCase, executor: &dyn CaseExecutor) -> Result<NodeRun, NodeError> {
    let mut run = run_node(&nc.case, executor)?;
    for (local, global) in &nc.output_of {
        if let (Some((idx, vals)), Some(actual)) = (model.sampled_reference(global), run.outputs.get(local)) {
            let m = compare_sample(&nc.case.op, actual, idx, vals).map_err(NodeError::Error)?;
            run.metrics.extend(m);
        }
    }
    Ok(run)
}

fn run_node(case: &Case, executor: &dyn CaseExecutor) -> Result<NodeRun, NodeError> {
    let lowered = match lower::lower(case, executor.target()) {
        Ok(l) => l,
        Err(LowerError::NotLowered(op)) => return Err(NodeError::Unsupported(format!("`{op}` is not lowered"))),
        Err(e @ LowerError::Unsupported { .. }) => return Err(NodeError::Unsupported(e.to_string())),
        Err(e) => return Err(NodeError::Error(format!("lowering: {e}"))),
    };
    runner::check_compute_work(case, &lowered.program).map_err(NodeError::Error)?;
    let inputs = runner::device_inputs(case, &lowered.program).map_err(NodeError::Error)?;
    let run = executor.execute(&lowered.program, &inputs).map_err(NodeError::Error)?;
    let outs = runner::host_outputs(case, &lowered.program, &run.outputs).map_err(NodeError::Error)?;
    let mut actual = ActualOutputs {
        values: lowered.values.clone(),
        ..Default::default()
    };
    actual.tensors = outs.tensors.clone();
    actual.values.extend(outs.values);
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
    let metrics = compare::compare_case(&whole, &actual).outputs;
    Ok(NodeRun {
        metrics,
        outputs: outs.tensors,
        instructions: trnsim::program::ALL_ENGINES
            .iter()
            .map(|&e| run.instructions.get(e))
            .sum(),
    })
}

/// Runs a loaded model on `executor`; `progress` is called after each node.
pub fn run_model(model: &Model, executor: &dyn CaseExecutor, progress: &dyn Fn(usize, usize)) -> ModelResult {
    let start = std::time::Instant::now();
    // Chained values: what the device computed (leaves are exact).
    let mut device: BTreeMap<String, Tensor> = BTreeMap::new();
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
            stack: node.stack.clone(),
        };
        if ASSERTION_OPS.contains(&node.op.as_str()) {
            r.status = "skipped".into();
            r.message = "metadata assertion: nothing to compute (its metadata is checked at capture)".into();
            r.chained_within_tolerance = true;
            nodes.push(r);
            continue;
        }
        if node.op == "getitem" {
            // Tuple element selection (the exporter's `operator.getitem`): no data moves.
            r.status = "skipped".into();
            r.message = "tuple element selection: no computation".into();
            r.chained_within_tolerance = true;
            nodes.push(r);
            continue;
        }
        // Isolated: reference inputs.
        // An input stored only as a sample has no whole reference: the isolated run takes the
        // device's value for it (documented in docs/models.md).
        let reference_value = |name: &str| -> Option<Tensor> {
            model
                .reference(name)
                .cloned()
                .or_else(|| model.leaf(name).ok())
                .or_else(|| device.get(name).cloned())
        };
        let iso = match node_case(model, node, &reference_value) {
            Ok(nc) => nc,
            Err(e) => {
                r.message = e;
                nodes.push(r);
                continue;
            }
        };
        match run_and_check(model, &iso, executor) {
            Ok(run) => {
                let s = ErrorSummary::of(&run.metrics);
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
        // Chained: what the device computed for the inputs (falls back to the reference for an
        // input the device could not compute, so the rest of the model still runs).
        let chained_value =
            |name: &str| -> Option<Tensor> { device.get(name).cloned().or_else(|| reference_value(name)) };
        let chained_case = node_case(model, node, &chained_value);
        let input_drift = chained_case
            .as_ref()
            .map(|nc| {
                nc.input_of
                    .values()
                    .filter_map(|g| drift.get(g).copied())
                    .fold(0.0, f64::max)
            })
            .unwrap_or(0.0);
        let chained = chained_case
            .ok()
            .and_then(|nc| run_and_check(model, &nc, executor).ok().map(|run| (nc, run)));
        match chained {
            Some((nc, run)) => {
                let s = ErrorSummary::of(&run.metrics);
                r.chained_within_tolerance = s.passed;
                if input_drift > 0.0 {
                    r.growth = Some(s.max_rel_err / input_drift);
                }
                for (local, global) in &nc.output_of {
                    if let Some(t) = run.outputs.get(local) {
                        device.insert(global.clone(), t.clone());
                    }
                    drift.insert(global.clone(), s.max_rel_err);
                }
                r.chained = Some(s);
            }
            None => {
                // The node did not run: downstream nodes use its reference values.
                r.chained_within_tolerance = r.status == "pass";
            }
        }
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
            (_, Some(c)) => format!("the op itself fails at this call form ({})", c.message),
            (_, None) => r.message.clone(),
        };
        (r.name.clone(), why)
    });
    let passed = first_failing_node.is_none();
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
