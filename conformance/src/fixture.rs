//! Writing small golden directories from Rust, for tests and fixtures (the real goldens come from
//! `golden/generate.py`). Produces exactly the format of docs/golden-format.md.

use crate::case::{Check, IndexEntry, JsonFloat, METADATA_KEY, Value};
use crate::tensor::StoredDtype as _;
use crate::tensor::{Tensor, TorchDType};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("trnconf-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `case` as a one-case golden directory (a temporary one, named after `tag`) and runs it
/// on trn1's simulator with no expectations.
pub fn run_on_trn1(tag: &str, case: CaseBuilder) -> crate::results::CaseResult {
    let dir = TempDir::new(tag);
    write_golden(dir.path(), &[case]);
    let index = crate::case::GoldenIndex::load(dir.path()).expect("the golden directory just written loads");
    crate::runner::run_case(
        &index.dir,
        &index.cases[0],
        &crate::expect::Expectations::none(),
        &crate::executor::SimExecutor::new(trnsim::TargetName::Trn1),
    )
}

/// Builds one case: tensors in argument order, scalar arguments, outputs.
#[derive(Clone, Debug)]
pub struct CaseBuilder {
    pub op: String,
    pub dtype: String,
    pub source: String,
    pub n: usize,
    pub args: Vec<Value>,
    pub kwargs: BTreeMap<String, Value>,
    pub outputs: Vec<Value>,
    pub tensors: BTreeMap<String, Tensor>,
    pub check: Check,
    /// Metadata entries that deliberately disagree with the stored tensor (error tests).
    pub meta_overrides: BTreeMap<String, (TorchDType, Vec<usize>)>,
}

impl CaseBuilder {
    pub fn new(op: &str, dtype: &str, source: &str, n: usize) -> CaseBuilder {
        CaseBuilder {
            op: op.into(),
            dtype: dtype.into(),
            source: source.into(),
            n,
            args: Vec::new(),
            kwargs: BTreeMap::new(),
            outputs: Vec::new(),
            tensors: BTreeMap::new(),
            check: Check::Values,
            meta_overrides: BTreeMap::new(),
        }
    }

    pub fn id(&self) -> String {
        format!("{}::{}::{}_{}", self.op, self.dtype, self.source, self.n)
    }

    /// Appends a positional tensor argument `input.<i>`.
    pub fn input(self, dtype: TorchDType, shape: &[usize], vals: &[f64]) -> Self {
        self.input_tensor(Tensor::from_f64(dtype, shape, vals))
    }

    pub fn input_tensor(mut self, t: Tensor) -> Self {
        self.push_tensor(false, t);
        self
    }

    /// `t` as the next `input.<i>` (a positional argument) or `output.<i>` tensor.
    fn push_tensor(&mut self, output: bool, t: Tensor) {
        let (list, kind) = if output {
            (&mut self.outputs, "output")
        } else {
            (&mut self.args, "input")
        };
        let name = format!("{kind}.{}", list.len());
        list.push(Value::Tensor(name.clone()));
        self.tensors.insert(name, t);
    }

    /// Appends a positional non-tensor argument.
    pub fn arg(mut self, v: Value) -> Self {
        self.args.push(v);
        self
    }

    pub fn float_arg(self, x: f64) -> Self {
        self.arg(Value::Float(JsonFloat(x)))
    }

    pub fn kwarg(mut self, name: &str, v: Value) -> Self {
        self.kwargs.insert(name.into(), v);
        self
    }

    /// Appends an output tensor `output.<i>`.
    pub fn output(self, dtype: TorchDType, shape: &[usize], vals: &[f64]) -> Self {
        self.output_tensor(Tensor::from_f64(dtype, shape, vals))
    }

    pub fn output_tensor(mut self, t: Tensor) -> Self {
        self.push_tensor(true, t);
        self
    }

    pub fn output_value(mut self, v: Value) -> Self {
        self.outputs.push(v);
        self
    }

    pub fn check(mut self, c: Check) -> Self {
        self.check = c;
        self
    }

    pub fn with_meta_override(mut self, name: &str, dtype: TorchDType, shape: &[usize]) -> Self {
        self.meta_overrides.insert(name.into(), (dtype, shape.to_vec()));
        self
    }

    /// The metadata JSON document.
    pub fn metadata_json(&self) -> String {
        let tensors: serde_json::Map<String, serde_json::Value> = self
            .tensors
            .iter()
            .map(|(name, t)| {
                let (dtype, shape) = self
                    .meta_overrides
                    .get(name)
                    .cloned()
                    .unwrap_or((t.dtype, t.shape.clone()));
                let strides = crate::tensor::contiguous_strides(&shape);
                (
                    name.clone(),
                    serde_json::json!({"dtype": dtype, "shape": shape, "strides": strides}),
                )
            })
            .collect();
        serde_json::json!({
            "format": 1,
            "id": self.id(),
            "op": self.op,
            "dtype": self.dtype,
            "args": self.args,
            "kwargs": self.kwargs,
            "outputs": self.outputs,
            "tensors": tensors,
            "check": self.check,
            "provenance": {"torch": "test", "source": self.source, "seed": 0, "generator": "trnconf::fixture"},
        })
        .to_string()
    }

    /// File name relative to the golden directory.
    pub fn rel_file(&self) -> String {
        format!("cases/{}/{}.safetensors", self.op, self.id().replace("::", "__"))
    }
}

/// Writes a safetensors file with an arbitrary metadata string (possibly invalid).
pub fn write_raw(path: &Path, metadata: &str, tensors: &[(String, Tensor)]) {
    let bytes = serialize(metadata, tensors);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("create case dir");
    }
    std::fs::write(path, bytes).expect("write case file");
}

fn serialize(metadata: &str, tensors: &[(String, Tensor)]) -> Vec<u8> {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(name, t)| {
            let mut shape = t.shape.clone();
            if t.dtype.is_complex() {
                shape.push(2);
            }
            let view = safetensors::tensor::TensorView::new(t.dtype.safetensors_dtype(), shape, &t.data)
                .expect("fixture tensors are consistent");
            (name.clone(), view)
        })
        .collect();
    let meta: HashMap<String, String> = [(METADATA_KEY.to_string(), metadata.to_string())].into();
    safetensors::serialize(views, Some(meta)).expect("serialize fixture")
}

/// Writes the cases and an `index.json` into `dir`; returns the index entries.
pub fn write_golden(dir: &Path, cases: &[CaseBuilder]) -> Vec<IndexEntry> {
    let mut entries = Vec::new();
    for c in cases {
        let tensors: Vec<(String, Tensor)> = c.tensors.iter().map(|(n, t)| (n.clone(), t.clone())).collect();
        write_raw(&dir.join(c.rel_file()), &c.metadata_json(), &tensors);
        entries.push(IndexEntry {
            id: c.id(),
            op: c.op.clone(),
            dtype: c.dtype.clone(),
            source: Some(c.source.clone()),
            file: c.rel_file(),
        });
    }
    entries.sort_by(|a, b| a.id.cmp(&b.id));
    let index = serde_json::json!({"format": 1, "torch": "test", "cases": entries});
    std::fs::write(dir.join("index.json"), serde_json::to_string_pretty(&index).unwrap()).expect("write index");
    entries
}
