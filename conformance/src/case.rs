//! Golden cases: the index of a golden directory and the lazy loading of one case file
//! (docs/golden-format.md is the contract).
//!
//! Every problem with the input — a missing or malformed index, a truncated or corrupt
//! safetensors file, metadata that is not valid JSON or not format 1, an op outside the core set,
//! a tensor whose stored dtype or shape disagrees with its metadata — is a [`CaseError`] naming
//! the file and the reason. Nothing here panics on bad input.

use crate::ops;
use crate::tensor::StoredDtype as _;
use crate::tensor::Tensor;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The golden format version this loader reads (and the newest it understands).
pub const FORMAT_VERSION: u32 = 2;

/// The oldest golden format this loader still reads (format 1: no oracles).
pub const MIN_FORMAT_VERSION: u32 = 1;

/// The key of the safetensors `__metadata__` map that holds the case description.
pub const METADATA_KEY: &str = "trnconf";

/// Why a golden file could not be used.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CaseErrorKind {
    #[error("cannot read: {0}")]
    Io(String),
    #[error("not a valid safetensors file (truncated or corrupt?): {0}")]
    Corrupt(String),
    #[error("no `__metadata__.{METADATA_KEY}` entry")]
    MissingMetadata,
    #[error("invalid metadata JSON: {0}")]
    BadMetadata(String),
    #[error(
        "golden format {found} is not supported (this runner reads formats {MIN_FORMAT_VERSION} to {FORMAT_VERSION})"
    )]
    UnsupportedFormat { found: u32 },
    #[error("unknown op `{0}`: not one of the 193 Core ATen overloads")]
    UnknownOp(String),
    #[error("the file says {field} `{in_file}`, the index says `{in_index}`")]
    IndexDisagrees {
        field: &'static str,
        in_file: String,
        in_index: String,
    },
    #[error("tensor `{name}` is listed in the metadata but not stored in the file")]
    MissingTensor { name: String },
    #[error("tensor `{name}` is stored in the file but not described in the metadata")]
    UndescribedTensor { name: String },
    #[error("tensor `{name}`: {what}")]
    TensorMismatch { name: String, what: String },
    #[error("value refers to tensor `{name}`, which the metadata does not describe")]
    DanglingTensorRef { name: String },
    #[error("invalid index: {0}")]
    BadIndex(String),
    /// The call's arguments do not fit the overload's schema (PyTorch would reject the call).
    #[error("the call does not fit the overload: {0}")]
    BadCall(String),
    /// The file's `check` is not the one its op and call give (docs/golden-format.md, "check").
    #[error("check: {0}")]
    WrongCheck(String),
    /// The stored output disagrees with its own oracle beyond its bound.
    #[error("inconsistent golden: {0}")]
    Inconsistent(String),
}

/// A problem with one golden file (or the index), naming the file.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{}: {kind}", file.display())]
pub struct CaseError {
    pub file: PathBuf,
    pub kind: CaseErrorKind,
}

impl CaseError {
    pub fn new(file: impl Into<PathBuf>, kind: CaseErrorKind) -> Self {
        CaseError {
            file: file.into(),
            kind,
        }
    }
}

pub use trnlower::call::{JsonFloat, OpCall, TensorMeta, Value};

/// Dropout property: each output element is 0 or `input / (1 - p)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DropoutProp {
    pub p: f64,
}

/// Properties an RNG op's output must have (its stored output is just one valid sample).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Properties {
    /// Every value in `[lo, hi)`.
    #[serde(default)]
    pub range: Option<[f64; 2]>,
    /// `[expected, tolerance]` of the mean.
    #[serde(default)]
    pub mean: Option<[f64; 2]>,
    /// `[expected, tolerance]` of the standard deviation.
    #[serde(default)]
    pub std: Option<[f64; 2]>,
    /// The output is a permutation of `0..n`.
    #[serde(default)]
    pub permutation: Option<u64>,
    #[serde(default)]
    pub dropout: Option<DropoutProp>,
    /// The same seed gives the same result: the runner runs the program twice.
    #[serde(default)]
    pub deterministic: Option<bool>,
}

/// How the runner compares outputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Check {
    /// Elementwise against the stored outputs.
    #[default]
    Values,
    /// Shape and dtype only.
    Metadata,
    /// Properties instead of values (RNG ops).
    Properties { props: Properties },
}

/// Where a case came from.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
pub struct Provenance {
    #[serde(default)]
    pub torch: Option<String>,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub opinfo: Option<String>,
    #[serde(default)]
    pub sample: Option<u64>,
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub generator: Option<String>,
    /// Free-form extra keys.
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// The `trnconf` metadata document of a case file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseMeta {
    pub format: u32,
    pub id: String,
    pub op: String,
    #[serde(default)]
    pub schema: Option<String>,
    pub dtype: String,
    pub args: Vec<Value>,
    #[serde(default)]
    pub kwargs: BTreeMap<String, Value>,
    pub outputs: Vec<Value>,
    pub tensors: BTreeMap<String, TensorMeta>,
    #[serde(default)]
    pub check: Check,
    #[serde(default)]
    pub provenance: Provenance,
    /// Format 2: the oracle of each floating output, by output tensor name.
    #[serde(default)]
    pub oracle: BTreeMap<String, crate::accuracy::OracleSpec>,
}

/// One loaded golden case.
#[derive(Clone, Debug)]
pub struct Case {
    pub id: String,
    pub op: String,
    /// Primary dtype name from the id (`f32`, …, or `none`).
    pub dtype: String,
    pub file: PathBuf,
    pub schema: Option<String>,
    pub call: OpCall,
    /// What the op returned, in order (tensors by name, other values inline).
    pub outputs: Vec<Value>,
    /// Every tensor of the file, inputs and outputs, by name.
    pub tensors: BTreeMap<String, Tensor>,
    pub tensor_meta: BTreeMap<String, TensorMeta>,
    pub check: Check,
    pub provenance: Provenance,
    /// Format 2: the oracle of each floating output, by output tensor name (empty for format 1).
    pub oracles: BTreeMap<String, crate::accuracy::Oracle>,
}

impl Case {
    /// Names of the input tensors (`input.*`, `kwarg.*`), sorted.
    pub fn input_names(&self) -> Vec<&str> {
        self.tensor_meta
            .keys()
            .filter(|n| !n.starts_with("output."))
            .map(|n| n.as_str())
            .collect()
    }

    /// Names of the output tensors, in output order.
    pub fn output_tensor_names(&self) -> Vec<&str> {
        self.outputs.iter().flat_map(|v| v.tensor_names()).collect()
    }

    /// Loads and validates a case file.
    pub fn load(path: &Path) -> Result<Case, CaseError> {
        let bytes = std::fs::read(path).map_err(|e| CaseError::new(path, CaseErrorKind::Io(e.to_string())))?;
        Case::from_bytes(path, &bytes)
    }

    /// Loads a case file and checks it against its index entry.
    pub fn load_entry(golden_dir: &Path, entry: &IndexEntry) -> Result<Case, CaseError> {
        let path = golden_dir.join(&entry.file);
        let case = Case::load(&path)?;
        for (field, in_file, in_index) in [
            ("id", &case.id, &entry.id),
            ("op", &case.op, &entry.op),
            ("dtype", &case.dtype, &entry.dtype),
        ] {
            if in_file != in_index {
                return Err(CaseError::new(
                    &path,
                    CaseErrorKind::IndexDisagrees {
                        field,
                        in_file: in_file.clone(),
                        in_index: in_index.clone(),
                    },
                ));
            }
        }
        Ok(case)
    }

    /// Parses a case from the bytes of its file (`path` names it in errors).
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Case, CaseError> {
        let err = |kind| CaseError::new(path, kind);
        let st =
            safetensors::SafeTensors::deserialize(bytes).map_err(|e| err(CaseErrorKind::Corrupt(e.to_string())))?;
        let (_, header) =
            safetensors::SafeTensors::read_metadata(bytes).map_err(|e| err(CaseErrorKind::Corrupt(e.to_string())))?;
        let json = header
            .metadata()
            .as_ref()
            .and_then(|m| m.get(METADATA_KEY))
            .ok_or(err(CaseErrorKind::MissingMetadata))?;
        // Check the version before the full schema so a future format gets a clear message.
        let version: serde_json::Value =
            serde_json::from_str(json).map_err(|e| err(CaseErrorKind::BadMetadata(e.to_string())))?;
        match version.get("format").and_then(|f| f.as_u64()) {
            Some(v) if (MIN_FORMAT_VERSION as u64..=FORMAT_VERSION as u64).contains(&v) => {}
            Some(v) => return Err(err(CaseErrorKind::UnsupportedFormat { found: v as u32 })),
            None => return Err(err(CaseErrorKind::BadMetadata("missing integer field `format`".into()))),
        }
        let meta: CaseMeta =
            serde_json::from_value(version).map_err(|e| err(CaseErrorKind::BadMetadata(e.to_string())))?;
        if !ops::is_core_op(&meta.op) {
            return Err(err(CaseErrorKind::UnknownOp(meta.op)));
        }
        let kwargs: Vec<&str> = meta.kwargs.keys().map(|k| k.as_str()).collect();
        ops::check_call(&meta.op, meta.args.len(), &kwargs).map_err(|e| err(CaseErrorKind::BadCall(e)))?;
        validate_check(&meta).map_err(|e| err(CaseErrorKind::WrongCheck(e)))?;

        // Every described tensor must be stored, with the described dtype and shape.
        let mut tensors = BTreeMap::new();
        for (name, tm) in &meta.tensors {
            let view = st
                .tensor(name)
                .map_err(|_| err(CaseErrorKind::MissingTensor { name: name.clone() }))?;
            let mismatch = |what: String| {
                err(CaseErrorKind::TensorMismatch {
                    name: name.clone(),
                    what,
                })
            };
            let want = tm.dtype.safetensors_dtype();
            if view.dtype() != want {
                return Err(mismatch(format!(
                    "stored as {:?}, the metadata says {} (stored as {:?})",
                    view.dtype(),
                    tm.dtype,
                    want
                )));
            }
            let stored = view.shape().to_vec();
            let shape = if tm.dtype.is_complex() {
                // The real view appends an axis of 2 (real, imaginary); the metadata may give
                // either the complex shape or the stored real-view shape.
                let mut real_view = tm.shape.clone();
                real_view.push(2);
                if stored == real_view {
                    tm.shape.clone()
                } else if stored == tm.shape && stored.last() == Some(&2) {
                    stored[..stored.len() - 1].to_vec()
                } else {
                    return Err(mismatch(format!(
                        "stored shape {stored:?} is not the real view of complex shape {:?}",
                        tm.shape
                    )));
                }
            } else {
                if stored != tm.shape {
                    return Err(mismatch(format!(
                        "stored shape {stored:?}, the metadata says {:?}",
                        tm.shape
                    )));
                }
                stored
            };
            let t = Tensor::new(tm.dtype, shape, view.data().to_vec());
            if !t.is_consistent() {
                return Err(mismatch(format!(
                    "{} bytes do not hold {:?} {}",
                    t.data.len(),
                    t.shape,
                    t.dtype
                )));
            }
            tensors.insert(name.clone(), t);
        }
        let oracles = crate::accuracy::load_oracles(&meta, &st).map_err(err)?;
        for (name, _) in st.iter() {
            if !meta.tensors.contains_key(name) && !crate::accuracy::is_oracle_tensor(&meta.oracle, name) {
                return Err(err(CaseErrorKind::UndescribedTensor { name: name.to_string() }));
            }
        }
        crate::accuracy::check_consistency(&meta.op, &tensors, &oracles).map_err(err)?;
        // Every tensor a value refers to must exist.
        let values = meta.args.iter().chain(meta.kwargs.values()).chain(meta.outputs.iter());
        for v in values {
            for name in v.tensor_names() {
                if !meta.tensors.contains_key(name) {
                    return Err(err(CaseErrorKind::DanglingTensorRef { name: name.to_string() }));
                }
            }
        }
        Ok(Case {
            id: meta.id,
            op: meta.op,
            dtype: meta.dtype,
            file: path.to_path_buf(),
            schema: meta.schema,
            call: OpCall {
                args: meta.args,
                kwargs: meta.kwargs,
            },
            outputs: meta.outputs,
            tensors,
            tensor_meta: meta.tensors,
            check: meta.check,
            provenance: meta.provenance,
            oracles,
        })
    }
}

/// The check a case's outputs get follows from its op and call, never from the file
/// (docs/golden-format.md, "check"): `metadata` for uninitialised memory (`empty*`, a growing
/// `resize_`), `properties` for the RNG ops (except `native_dropout` with `train=False`), with
/// the properties the call implies; `values` for everything else.
fn validate_check(meta: &CaseMeta) -> Result<(), String> {
    let call = OpCall {
        args: meta.args.clone(),
        kwargs: meta.kwargs.clone(),
    };
    let numel = |name: &str| meta.tensors.get(name).map(|t| t.shape.iter().product::<usize>());
    let want = match meta.op.as_str() {
        "empty.memory_format" | "empty_strided" => "metadata",
        "resize_" => match (numel("output.0"), numel("input.0")) {
            (Some(new), Some(old)) if new > old => "metadata",
            _ => "values",
        },
        "native_dropout" if call.arg(2, "train").and_then(Value::as_bool) == Some(false) => "values",
        "rand" | "randn" | "randperm" | "native_dropout" => "properties",
        _ => "values",
    };
    let found = match &meta.check {
        Check::Values => "values",
        Check::Metadata => "metadata",
        Check::Properties { .. } => "properties",
    };
    if found != want {
        return Err(format!(
            "kind `{found}`, but {} is checked by `{want}` (the check follows from the op)",
            meta.op
        ));
    }
    let Check::Properties { props } = &meta.check else {
        return Ok(());
    };
    let bad = |what: &str| Err(format!("{} properties: {what}", meta.op));
    if props.deterministic != Some(true) {
        return bad("`deterministic` must be true (the runner runs the program twice)");
    }
    let size = |v: Option<&Value>| match v {
        Some(Value::Ints(d)) => d
            .iter()
            .try_fold(1u64, |n, &x| u64::try_from(x).ok().map(|x| n.saturating_mul(x))),
        Some(Value::Int(x)) => u64::try_from(*x).ok(),
        _ => None,
    };
    let float = |v: Option<&Value>| match v {
        Some(Value::Float(f)) => Some(f.0),
        Some(Value::Int(i)) => Some(*i as f64),
        _ => None,
    };
    match meta.op.as_str() {
        "randperm" => {
            if props.permutation.is_none() || props.permutation != size(call.arg(0, "n")) {
                return bad("`permutation` must be the call's n");
            }
            if props.range.is_some() || props.mean.is_some() || props.std.is_some() || props.dropout.is_some() {
                return bad("a permutation has no other property");
            }
        }
        "native_dropout" => {
            let p = float(call.arg(1, "p"));
            if props.dropout.as_ref().map(|d| d.p) != p || p.is_none() {
                return bad("`dropout.p` must be the call's p");
            }
            if props.range.is_some() || props.mean.is_some() || props.std.is_some() || props.permutation.is_some() {
                return bad("dropout has no other property");
            }
        }
        _ => {
            // rand: U[0, 1); randn: N(0, 1); mean and std within 6 standard errors of n samples.
            let (mu, sd) = if meta.op == "rand" {
                (0.5, (1.0f64 / 12.0).sqrt())
            } else {
                (0.0, 1.0)
            };
            if props.permutation.is_some() || props.dropout.is_some() {
                return bad("only range, mean and std apply");
            }
            match (meta.op.as_str(), props.range) {
                ("rand", Some([lo, hi])) if lo >= 0.0 && hi <= 1.0 && lo < hi => {}
                ("rand", _) => return bad("`range` must lie within [0, 1)"),
                (_, None) => {}
                (_, Some(_)) => return bad("randn has no range"),
            }
            let Some(n) = size(call.arg(0, "size")) else {
                return bad("the call has no size");
            };
            let tol = 6.0 * sd / (n.max(1) as f64).sqrt();
            let within = |got: Option<[f64; 2]>, centre: f64| {
                got.is_some_and(|[c, t]| (c - centre).abs() <= 1e-6 && t >= 0.0 && t <= tol + 1e-6)
            };
            if n >= 16 && !(within(props.mean, mu) && within(props.std, sd)) {
                return bad(&format!(
                    "`mean` must be [{mu}, <= {tol:.6}] and `std` [{sd:.6}, <= {tol:.6}] for {n} samples"
                ));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Index

/// One line of `index.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub id: String,
    pub op: String,
    pub dtype: String,
    #[serde(default)]
    pub source: Option<String>,
    /// Relative to the golden directory.
    pub file: String,
}

#[derive(Deserialize)]
struct IndexFile {
    format: u32,
    #[serde(default)]
    torch: Option<String>,
    cases: Vec<IndexEntry>,
}

/// The case list of a golden directory.
#[derive(Clone, Debug)]
pub struct GoldenIndex {
    pub dir: PathBuf,
    pub torch: Option<String>,
    /// Sorted by id.
    pub cases: Vec<IndexEntry>,
}

impl GoldenIndex {
    /// Reads `<dir>/index.json`. Only the index itself is validated here; each case file is
    /// checked when its case runs.
    pub fn load(dir: &Path) -> Result<GoldenIndex, CaseError> {
        let path = dir.join("index.json");
        let err = |kind| CaseError::new(&path, kind);
        let text = std::fs::read_to_string(&path).map_err(|e| err(CaseErrorKind::Io(e.to_string())))?;
        let raw: IndexFile = serde_json::from_str(&text).map_err(|e| err(CaseErrorKind::BadIndex(e.to_string())))?;
        if !(MIN_FORMAT_VERSION..=FORMAT_VERSION).contains(&raw.format) {
            return Err(err(CaseErrorKind::UnsupportedFormat { found: raw.format }));
        }
        let mut cases = raw.cases;
        cases.sort_by(|a, b| a.id.cmp(&b.id));
        if let Some(w) = cases.windows(2).find(|w| w[0].id == w[1].id) {
            return Err(err(CaseErrorKind::BadIndex(format!(
                "case id `{}` appears twice",
                w[0].id
            ))));
        }
        for c in &cases {
            if c.file.starts_with('/') || c.file.split(['/', '\\']).any(|p| p == "..") {
                return Err(err(CaseErrorKind::BadIndex(format!(
                    "case `{}`: file `{}` must be relative to the golden directory",
                    c.id, c.file
                ))));
            }
        }
        Ok(GoldenIndex {
            dir: dir.to_path_buf(),
            torch: raw.torch,
            cases,
        })
    }

    /// Ops that have at least one case, sorted.
    pub fn ops(&self) -> Vec<&str> {
        let mut ops: Vec<&str> = self.cases.iter().map(|c| c.op.as_str()).collect();
        ops.dedup();
        ops.sort();
        ops.dedup();
        ops
    }

    pub fn path_of(&self, entry: &IndexEntry) -> PathBuf {
        self.dir.join(&entry.file)
    }
}

impl fmt::Display for IndexEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{CaseBuilder, TempDir};
    use crate::tensor::TorchDType::*;

    fn sample() -> CaseBuilder {
        CaseBuilder::new("add.Tensor", "f32", "hand", 0)
            .input(F32, &[2], &[1.0, 2.0])
            .input(F32, &[2], &[3.0, 4.0])
            .output(F32, &[2], &[4.0, 6.0])
    }

    #[test]
    fn loads_a_valid_case() {
        let dir = TempDir::new("case-valid");
        let index = crate::fixture::write_golden(dir.path(), &[sample()]);
        let idx = GoldenIndex::load(dir.path()).unwrap();
        assert_eq!(idx.cases.len(), 1);
        assert_eq!(idx.cases[0].id, "add.Tensor::f32::hand_0");
        let case = Case::load_entry(dir.path(), &index[0]).unwrap();
        assert_eq!(case.op, "add.Tensor");
        assert_eq!(case.call.args.len(), 2);
        assert_eq!(case.tensors["output.0"].to_f64_vec(), vec![4.0, 6.0]);
        assert_eq!(case.input_names(), vec!["input.0", "input.1"]);
        assert_eq!(case.output_tensor_names(), vec!["output.0"]);
        assert_eq!(case.check, Check::Values);
    }

    #[test]
    fn truncated_file_is_an_error_naming_the_file() {
        let dir = TempDir::new("case-truncated");
        let index = crate::fixture::write_golden(dir.path(), &[sample()]);
        let path = dir.path().join(&index[0].file);
        let bytes = std::fs::read(&path).unwrap();
        for cut in [0, 5, 8, 20, bytes.len() - 1] {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            let e = Case::load(&path).unwrap_err();
            assert_eq!(e.file, path);
            assert!(matches!(e.kind, CaseErrorKind::Corrupt(_)), "cut {cut}: {e}");
            assert!(e.to_string().contains("add.Tensor__f32__hand_0.safetensors"), "{e}");
        }
    }

    #[test]
    fn bad_metadata_json() {
        let dir = TempDir::new("case-badjson");
        let path = dir.path().join("x.safetensors");
        crate::fixture::write_raw(&path, "{not json", &[]);
        let e = Case::load(&path).unwrap_err();
        assert!(matches!(e.kind, CaseErrorKind::BadMetadata(_)), "{e}");
        // Valid JSON, wrong schema.
        crate::fixture::write_raw(&path, r#"{"format": 1, "id": 3}"#, &[]);
        let e = Case::load(&path).unwrap_err();
        assert!(matches!(e.kind, CaseErrorKind::BadMetadata(_)), "{e}");
        crate::fixture::write_raw(&path, r#"{"format": 3}"#, &[]);
        let e = Case::load(&path).unwrap_err();
        assert_eq!(e.kind, CaseErrorKind::UnsupportedFormat { found: 3 });
    }

    #[test]
    fn unknown_op() {
        let dir = TempDir::new("case-unknown-op");
        let b = CaseBuilder::new("frobnicate", "f32", "hand", 0).input(F32, &[1], &[1.0]);
        let index = crate::fixture::write_golden(dir.path(), &[b]);
        let e = Case::load_entry(dir.path(), &index[0]).unwrap_err();
        assert_eq!(e.kind, CaseErrorKind::UnknownOp("frobnicate".into()));
    }

    #[test]
    fn dtype_and_shape_mismatch() {
        let dir = TempDir::new("case-mismatch");
        // Metadata says bf16, the file stores f32.
        let b = sample().with_meta_override("input.0", Bf16, &[2]);
        let index = crate::fixture::write_golden(dir.path(), &[b]);
        let e = Case::load_entry(dir.path(), &index[0]).unwrap_err();
        assert!(
            matches!(&e.kind, CaseErrorKind::TensorMismatch { name, .. } if name == "input.0"),
            "{e}"
        );
        assert!(e.to_string().contains("bf16"), "{e}");
        // Metadata says [3], the file stores [2].
        let b = sample().with_meta_override("input.1", F32, &[3]);
        let index = crate::fixture::write_golden(dir.path(), &[b]);
        let e = Case::load_entry(dir.path(), &index[0]).unwrap_err();
        assert!(e.to_string().contains("stored shape [2]"), "{e}");
    }

    #[test]
    fn index_errors() {
        let dir = TempDir::new("case-index");
        let e = GoldenIndex::load(dir.path()).unwrap_err();
        assert!(matches!(e.kind, CaseErrorKind::Io(_)));
        assert!(e.to_string().contains("index.json"));
        std::fs::write(dir.path().join("index.json"), "[1,2").unwrap();
        let e = GoldenIndex::load(dir.path()).unwrap_err();
        assert!(matches!(e.kind, CaseErrorKind::BadIndex(_)), "{e}");
        std::fs::write(
            dir.path().join("index.json"),
            r#"{"format":1,"cases":[{"id":"a","op":"relu","dtype":"f32","file":"../x"}]}"#,
        )
        .unwrap();
        let e = GoldenIndex::load(dir.path()).unwrap_err();
        assert!(e.to_string().contains("relative"), "{e}");
    }

    #[test]
    fn index_and_file_disagree() {
        let dir = TempDir::new("case-disagree");
        let mut index = crate::fixture::write_golden(dir.path(), &[sample()]);
        index[0].id = "add.Tensor::f32::hand_9".into();
        let e = Case::load_entry(dir.path(), &index[0]).unwrap_err();
        assert!(
            matches!(e.kind, CaseErrorKind::IndexDisagrees { field: "id", .. }),
            "{e}"
        );
    }

    #[test]
    fn values_parse() {
        let v: Vec<Value> = serde_json::from_str(
            r#"[{"tensor":"input.0"},{"int":3},{"float":"-inf"},{"float":2.5},{"none":null},{"tensors":["a",null]},{"ints":[1,2]},{"dtype":"bf16"},{"str":"mean"},{"complex":[1,"nan"]}]"#,
        )
        .unwrap();
        assert_eq!(v[0], Value::Tensor("input.0".into()));
        assert_eq!(v[2], Value::Float(JsonFloat(f64::NEG_INFINITY)));
        assert!(v[4].is_none());
        assert_eq!(v[5].tensor_names(), vec!["a"]);
        let back = serde_json::to_string(&v[2]).unwrap();
        assert_eq!(back, r#"{"float":"-inf"}"#);
        assert!(serde_json::from_str::<Value>(r#"{"float":"infinity"}"#).is_err());
        assert!(serde_json::from_str::<Value>(r#"{"tensorz":"x"}"#).is_err());
    }

    #[test]
    fn properties_check_parses_and_rejects_unknown_keys() {
        let c: Check =
            serde_json::from_str(r#"{"kind":"properties","props":{"range":[0,1],"deterministic":true}}"#).unwrap();
        match c {
            Check::Properties { props } => {
                assert_eq!(props.range, Some([0.0, 1.0]));
                assert_eq!(props.deterministic, Some(true));
            }
            _ => panic!(),
        }
        assert!(serde_json::from_str::<Check>(r#"{"kind":"properties","props":{"rnage":[0,1]}}"#).is_err());
        assert!(serde_json::from_str::<Check>(r#"{"kind":"vibes"}"#).is_err());
    }
}
