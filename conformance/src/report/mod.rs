//! Reports of a run: the results file (JSON, written progressively as JSON Lines), JUnit XML,
//! a self-contained HTML page, the diff of two runs, coverage tables and the end-of-run summary.
//!
//! Every report is built from [`CaseRecord`]s: the typed view of one case of a results file.
//! Records are read back from files (for `--resume` and `trnconf diff`), so they are lenient:
//! unknown fields are ignored, and a non-finite float (written by serde_json as `null`) reads
//! as `None`. See docs/workflow.md ("Reports").

pub mod coverage;
pub mod diff;
pub mod html;
pub mod json;
pub mod junit;
pub mod model;
pub mod output;
pub mod roofline;
pub mod summary;

use crate::expect::Status;
use crate::results::Summary;
use serde::{Deserialize, Serialize};

/// Instructions executed per engine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counts {
    pub tensor: u64,
    pub vector: u64,
    pub scalar: u64,
    pub gpsimd: u64,
    pub dma: u64,
}

/// The first element that does not match.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MismatchRecord {
    pub index: Vec<usize>,
    pub actual: String,
    pub expected: String,
    /// The element's ULP distance (absent in older files, and when a side is NaN).
    pub ulp: Option<u64>,
}

/// The metrics of one output (a lenient view of `compare::OutputMetrics`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MetricRecord {
    pub name: String,
    pub kind: String,
    pub passed: bool,
    pub dtype: Option<String>,
    pub shape: Vec<usize>,
    pub numel: usize,
    pub rtol: Option<f64>,
    pub atol: Option<f64>,
    /// `None`: not finite (a results file stores inf/NaN as `null`).
    pub max_abs_err: Option<f64>,
    /// `None`: not finite (e.g. an error where the golden value is 0).
    pub max_rel_err: Option<f64>,
    pub max_ulp: u64,
    pub mismatches: u64,
    pub nan_mismatches: u64,
    pub inf_mismatches: u64,
    pub first_mismatch: Option<MismatchRecord>,
    pub message: String,
    /// Error against the oracle (golden format 2), when the output has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oracle: Option<OracleRecord>,
    /// Passed by the accuracy rule only.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub accurate: bool,
}

/// The error of one output against its oracle (a lenient view of `accuracy::OracleMetrics`;
/// ulps of the output dtype; `None`: not finite).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OracleRecord {
    pub method: String,
    pub bound: String,
    pub device_max_ulp: Option<f64>,
    pub device_p99_ulp: Option<f64>,
    pub cpu_max_ulp: Option<f64>,
    pub cpu_p99_ulp: Option<f64>,
    pub ratio: Option<f64>,
    pub allowed_ulp: Option<f64>,
    /// Largest device error / allowance (`None`: absent in older results, or infinite).
    pub allowance_use: Option<f64>,
    pub nonfinite_mismatches: u64,
    pub over_bound: u64,
    pub within: bool,
}

impl OracleRecord {
    /// One line: device vs CPU error against the oracle.
    pub fn line(&self) -> String {
        format!(
            "oracle ({}, {} bound): device max {} ulp (p99 {}), CPU max {} ulp (p99 {}), ratio {}, allowed {} ulp, {} over, {} NaN/inf disagreements",
            self.method,
            self.bound,
            fmt_ulp(self.device_max_ulp),
            fmt_ulp(self.device_p99_ulp),
            fmt_ulp(self.cpu_max_ulp),
            fmt_ulp(self.cpu_p99_ulp),
            fmt_ulp(self.ratio),
            fmt_ulp(self.allowed_ulp),
            self.over_bound,
            self.nonfinite_mismatches
        )
    }
}

/// An ulp figure with three decimals, `-` when absent or not finite.
pub fn fmt_ulp(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{x:.3}"))
}

/// One case of a results file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseRecord {
    pub id: String,
    pub op: String,
    pub dtype: String,
    pub status: Status,
    #[serde(default)]
    pub expectation: Option<String>,
    #[serde(default)]
    pub metrics: Vec<MetricRecord>,
    #[serde(default)]
    pub instructions: Counts,
    #[serde(default)]
    pub wall_ms: f64,
    #[serde(default)]
    pub message: String,
    /// Per-backend results when the executor ran several (nki mode: sim, stand-in or
    /// simulate_kernel, hardware).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<crate::results::BackendResult>,
    /// Estimated device time in µs (simulator timeline makespan), when the simulator ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub est_us: Option<f64>,
    /// Estimated busy time per engine in µs, with `est_us`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_us: Option<crate::results::BusyUs>,
    /// Roofline lower bound on the device time in µs (crate::roofline), with `est_us`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_us: Option<f64>,
    /// `bound_us / est_us`, in (0, 1]; absent when the call has no required work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efficiency: Option<f64>,
    /// The roofline term that sets `bound_us`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limiter: Option<crate::roofline::Limiter>,
}

impl CaseRecord {
    /// Outputs compared by value (elementwise with a tolerance).
    fn value_metrics(&self) -> impl Iterator<Item = &MetricRecord> {
        self.metrics.iter().filter(|m| m.kind == "values")
    }

    /// Max ULP distance over the value outputs; `None` when no output was compared by value.
    pub fn max_ulp(&self) -> Option<u64> {
        self.value_metrics().map(|m| m.max_ulp).max()
    }

    /// Max relative error over the value outputs (`inf` for a non-finite one); `None` when no
    /// output was compared by value.
    pub fn max_rel_err(&self) -> Option<f64> {
        self.value_metrics()
            .map(|m| m.max_rel_err.unwrap_or(f64::INFINITY))
            .reduce(f64::max)
    }

    /// The largest device / CPU error against the oracle over the outputs that have one (ulps).
    pub fn oracle_errors(&self) -> Option<(f64, f64)> {
        let os: Vec<&OracleRecord> = self.metrics.iter().filter_map(|m| m.oracle.as_ref()).collect();
        if os.is_empty() {
            return None;
        }
        let max =
            |f: fn(&OracleRecord) -> Option<f64>| os.iter().map(|o| f(o).unwrap_or(f64::INFINITY)).fold(0.0, f64::max);
        Some((max(|o| o.device_max_ulp), max(|o| o.cpu_max_ulp)))
    }

    /// The op group (family of the core list), `other` for an op outside it.
    pub fn group(&self) -> &'static str {
        crate::ops::family_of(&self.op).unwrap_or("other")
    }

    /// The first line of the message.
    pub fn headline(&self) -> &str {
        self.message.lines().next().unwrap_or("")
    }
}

/// Counts by status of some records.
pub fn summarize<'a>(records: impl IntoIterator<Item = &'a CaseRecord>) -> Summary {
    let mut s = Summary::default();
    for r in records {
        s.total += 1;
        match r.status {
            Status::Pass => s.passed += 1,
            Status::Accurate => s.accurate += 1,
            Status::Fail => s.failed += 1,
            Status::XFail => s.xfailed += 1,
            Status::XPass => s.xpassed += 1,
            Status::Skip => s.skipped += 1,
            Status::Error => s.errors += 1,
            Status::NotProvided => s.not_provided += 1,
        }
    }
    s
}

/// The order in which a status is "worse" (for aggregating a cell of cases).
pub fn severity(s: Status) -> u8 {
    match s {
        Status::Pass => 0,
        Status::Accurate => 0,
        Status::NotProvided | Status::Skip => 1,
        Status::XFail => 2,
        Status::Fail => 4,
        Status::XPass => 3,
        Status::Error => 5,
    }
}

/// Escapes text for XML/HTML content and attribute values.
pub fn escape_xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 forbids: replaced, so the document always parses.
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\r' | '\t') => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// A short description of a float that may be non-finite.
pub fn fmt_opt(x: Option<f64>) -> String {
    match x {
        Some(v) => format!("{v:.3e}"),
        None => "inf".to_string(),
    }
}

/// Peak resident memory of this process (VmHWM from /proc/self/status), in KiB.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_results_with_nulls() {
        let v = serde_json::json!({"id": "a::f32::x_0", "op": "relu", "dtype": "f32", "status": "fail",
            "metrics": [{"name": "output.0", "kind": "values", "max_rel_err": null, "max_ulp": 7, "extra": 1}],
            "wall_ms": 1.5, "message": "m"});
        let r: CaseRecord = serde_json::from_value(v).unwrap();
        assert_eq!(r.max_ulp(), Some(7));
        assert_eq!(r.max_rel_err(), Some(f64::INFINITY));
        assert_eq!(r.group(), "activation");
    }

    #[test]
    fn xml_escaping() {
        assert_eq!(escape_xml("a<b & \"c\"\u{1}"), "a&lt;b &amp; &quot;c&quot;\u{FFFD}");
    }
}
