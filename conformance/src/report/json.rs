//! The results file of `trnconf run --json FILE`, and its progressive sidecar.
//!
//! * While the run goes, every finished case is appended as one JSON line to
//!   `FILE.partial.jsonl` (first line: a header with the run's settings), flushed per case, so a
//!   killed run keeps what it did.
//! * At the end, the partial file is folded into `FILE`: one JSON object `{format, executor,
//!   target, golden, filter, shard, summary, wall_s, peak_rss_kib, cases: [...]}` with the cases
//!   sorted by id (so `--jobs` does not change it), written to a temporary file and renamed; then
//!   the partial file is removed.
//! * `trnconf run --resume FILE` reads `FILE.partial.jsonl` and/or `FILE`, skips the cases they
//!   hold, runs the rest and writes the same final `FILE`. A last line cut short by the kill (no
//!   trailing newline) is dropped and its case runs again; any other malformed line is an error.

use super::CaseRecord;
use crate::results::Summary;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The `format` field of a results file.
pub const FORMAT: &str = "trnconf-results/1";
/// The header key of a partial results file.
const PARTIAL_KEY: &str = "trnconf_partial";

/// The settings of a run, recorded in both files.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunInfo {
    pub executor: String,
    pub target: String,
    pub golden: String,
    pub filter: Option<String>,
    pub shard: Option<String>,
    /// The expectations file the run applied (they are per executor).
    pub expectations: Option<String>,
    /// [`content_hash`] of the golden `index.json` and of the selected cases' files, so that
    /// `--resume` never counts results of goldens that have changed since.
    pub golden_hash: Option<String>,
    /// [`content_hash`] of the expectations file.
    pub expectations_hash: Option<String>,
    /// The simulator's numerics settings (`crate::numerics::describe`; `None` for executors
    /// that are not the simulator).
    pub numerics: Option<String>,
}

impl RunInfo {
    /// Why results recorded under `self` cannot be counted in a run under `now` (the first
    /// setting that differs, as one line), or `None` when they can.
    pub fn resume_mismatch(&self, now: &RunInfo) -> Option<String> {
        let show = |v: &Option<String>| v.as_deref().unwrap_or("(none)").to_string();
        // Settings first: a different selection also changes the content hash.
        let fields: [(&str, String, String); 9] = [
            ("golden directory", self.golden.clone(), now.golden.clone()),
            ("--filter", show(&self.filter), show(&now.filter)),
            ("--shard", show(&self.shard), show(&now.shard)),
            ("--target", self.target.clone(), now.target.clone()),
            ("executor", self.executor.clone(), now.executor.clone()),
            ("--numerics", show(&self.numerics), show(&now.numerics)),
            ("expectations file", show(&self.expectations), show(&now.expectations)),
            ("golden content hash", show(&self.golden_hash), show(&now.golden_hash)),
            (
                "expectations content hash",
                show(&self.expectations_hash),
                show(&now.expectations_hash),
            ),
        ];
        fields
            .into_iter()
            .find(|(_, a, b)| a != b)
            .map(|(what, a, b)| format!("recorded with {what} {a}, this run has {b}"))
    }
}

/// A content hash (64-bit FNV-1a over each part's length and bytes, as `fnv1a64:<hex>`): enough
/// to notice edited files, not a defence against a forger.
pub fn content_hash<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> String {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in (part.len() as u64).to_le_bytes().iter().chain(part) {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
    }
    format!("fnv1a64:{h:016x}")
}

/// A final results file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ResultsFile {
    #[serde(default)]
    pub format: String,
    #[serde(flatten)]
    pub info: RunInfo,
    pub summary: Summary,
    #[serde(default)]
    pub wall_s: Option<f64>,
    #[serde(default)]
    pub peak_rss_kib: Option<u64>,
    pub cases: Vec<Value>,
}

/// The sidecar path of a results file: `FILE.partial.jsonl`.
pub fn partial_path(final_path: &Path) -> PathBuf {
    let mut s = final_path.as_os_str().to_owned();
    s.push(".partial.jsonl");
    PathBuf::from(s)
}

/// Cases read from a file, by id: the raw JSON (written back unchanged) and its typed view.
#[derive(Clone, Debug, Default)]
pub struct Loaded {
    pub info: Option<RunInfo>,
    pub cases: BTreeMap<String, (Value, CaseRecord)>,
}

impl Loaded {
    pub fn records(&self) -> impl Iterator<Item = &CaseRecord> {
        self.cases.values().map(|(_, r)| r)
    }

    fn insert(&mut self, raw: Value) -> Result<(), String> {
        let rec: CaseRecord = serde_json::from_value(raw.clone()).map_err(|e| format!("a case is malformed: {e}"))?;
        self.insert_record(raw, rec)
    }

    /// Adds one case. The same case twice with the same record is kept once (a resumed run's
    /// partial file repeats what it resumed from); twice with different records is an error,
    /// since neither can be trusted to be the run's result.
    fn insert_record(&mut self, raw: Value, rec: CaseRecord) -> Result<(), String> {
        if let Some((old, _)) = self.cases.get(&rec.id) {
            if *old != raw {
                return Err(format!(
                    "case {} is recorded twice with different results; run afresh with --json",
                    rec.id
                ));
            }
            return Ok(());
        }
        self.cases.insert(rec.id.clone(), (raw, rec));
        Ok(())
    }

    /// Adds every case of `other` (see [`Loaded::insert_record`] for repeated cases).
    pub fn merge(&mut self, other: Loaded) -> Result<(), String> {
        for (_, (raw, rec)) in other.cases {
            self.insert_record(raw, rec)?;
        }
        Ok(())
    }
}

/// Reads a results file: a final JSON object, or a partial JSON Lines file. Errors are one line
/// naming the file.
pub fn load(path: &Path) -> Result<Loaded, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let err = |what: String| format!("{}: not a trnconf results file: {what}", path.display());
    if text.trim_start().starts_with(&format!("{{\"{PARTIAL_KEY}\"")) {
        return parse_partial(&text).map_err(err);
    }
    let file: ResultsFile = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
    if file.format != FORMAT {
        return Err(err(format!("format is `{}`, expected `{FORMAT}`", file.format)));
    }
    let mut loaded = Loaded {
        info: Some(file.info),
        ..Default::default()
    };
    for raw in file.cases {
        loaded.insert(raw).map_err(err)?;
    }
    Ok(loaded)
}

fn parse_partial(text: &str) -> Result<Loaded, String> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    // The file ends with a newline after every complete record: the last piece is either empty
    // or a record the kill cut short, which is dropped (its case runs again).
    lines.pop();
    let mut loaded = Loaded::default();
    for (n, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", n + 1))?;
        if n == 0 {
            let header = v.get(PARTIAL_KEY).ok_or("line 1: no header")?;
            if header.as_u64() != Some(1) {
                return Err(format!("line 1: unsupported partial format {header}"));
            }
            loaded.info = Some(serde_json::from_value(v).map_err(|e| format!("line 1: {e}"))?);
            continue;
        }
        loaded.insert(v).map_err(|e| format!("line {}: {e}", n + 1))?;
    }
    if loaded.info.is_none() {
        return Err("empty partial file".into());
    }
    Ok(loaded)
}

/// Appends finished cases to `FILE.partial.jsonl`, one flushed line each.
pub struct PartialWriter {
    path: PathBuf,
    file: Mutex<std::io::BufWriter<std::fs::File>>,
}

impl PartialWriter {
    /// Creates (or truncates) the partial file and writes its header and `already` cases.
    pub fn create(path: &Path, info: &RunInfo, already: &Loaded) -> Result<PartialWriter, String> {
        let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let w = PartialWriter {
            path: path.to_path_buf(),
            file: Mutex::new(std::io::BufWriter::new(f)),
        };
        let mut header = serde_json::to_value(info).map_err(|e| e.to_string())?;
        header
            .as_object_mut()
            .expect("info is an object")
            .insert(PARTIAL_KEY.into(), 1.into());
        // The key must come first (it is how the file is recognised): write it by hand.
        let mut rest = header.as_object().cloned().unwrap_or_default();
        rest.remove(PARTIAL_KEY);
        let line = format!("{{\"{PARTIAL_KEY}\":1,{}", &Value::Object(rest).to_string()[1..]);
        w.write_line(&line)?;
        for (raw, _) in already.cases.values() {
            w.write_line(&raw.to_string())?;
        }
        Ok(w)
    }

    fn write_line(&self, line: &str) -> Result<(), String> {
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        writeln!(f, "{line}")
            .and_then(|_| f.flush())
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }

    /// Appends one case.
    pub fn append(&self, case: &Value) -> Result<(), String> {
        self.write_line(&case.to_string())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Writes the final results file (cases sorted by id) by [`super::output::write_file`]'s policy
/// (atomically for a regular file).
pub fn write_final(
    path: &Path,
    info: &RunInfo,
    cases: &BTreeMap<String, (Value, CaseRecord)>,
    wall_s: Option<f64>,
    peak_rss_kib: Option<u64>,
) -> Result<(), String> {
    let file = ResultsFile {
        format: FORMAT.into(),
        info: info.clone(),
        summary: super::summarize(cases.values().map(|(_, r)| r)),
        wall_s,
        peak_rss_kib,
        cases: cases.values().map(|(v, _)| v.clone()).collect(),
    };
    let text = serde_json::to_string_pretty(&file).map_err(|e| e.to_string())?;
    super::output::write_file(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::TempDir;

    fn case(id: &str) -> Value {
        serde_json::json!({"id": id, "op": "relu", "dtype": "f32", "status": "pass", "metrics": [], "wall_ms": 0.5, "message": ""})
    }

    #[test]
    fn partial_round_trip_and_cut_line() {
        let dir = TempDir::new("report-json");
        let p = dir.path().join("r.json.partial.jsonl");
        let info = RunInfo {
            executor: "sim-trn1".into(),
            target: "trn1".into(),
            ..Default::default()
        };
        let w = PartialWriter::create(&p, &info, &Loaded::default()).unwrap();
        w.append(&case("relu::f32::a_0")).unwrap();
        w.append(&case("relu::f32::a_1")).unwrap();
        drop(w);
        let mut text = std::fs::read_to_string(&p).unwrap();
        text.push_str("{\"id\": \"relu::f32::a_2\", \"op");
        std::fs::write(&p, &text).unwrap();
        let l = load(&p).unwrap();
        assert_eq!(l.info.unwrap(), info);
        assert_eq!(l.cases.len(), 2, "the cut-short last line is dropped");
        // Folded into a final file, and read back.
        let f = dir.path().join("r.json");
        write_final(&f, &info, &load(&p).unwrap().cases, Some(1.0), None).unwrap();
        let back = load(&f).unwrap();
        assert_eq!(
            back.cases.keys().collect::<Vec<_>>(),
            ["relu::f32::a_0", "relu::f32::a_1"]
        );
        // A malformed middle line is an error naming the file and the line.
        std::fs::write(&p, text.replace("relu::f32::a_1\"", "relu::f32::a_1")).unwrap();
        let e = load(&p).unwrap_err();
        assert!(e.contains("r.json.partial.jsonl") && e.contains("line 3"), "{e}");
        assert!(!e.contains('\n'));
    }
}
