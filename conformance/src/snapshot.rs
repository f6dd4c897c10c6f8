//! Numeric drift snapshots: per op, one document holding each case's status, quantized error
//! summary (with the device and CPU error against the oracle, golden format 2) and per-engine
//! instruction counts. The verdict is always the check in [`crate::compare`]; snapshots only make changes in numerics or instruction counts visible in
//! review. Values are pre-formatted (2 significant digits, integer ULP buckets, explicit NaN/inf
//! counts) so that harmless noise does not churn them and YAML/JSON float quirks don't matter.

use crate::compare::{CompareKind, OutputMetrics};
use crate::runner::CaseResult;
use serde::Serialize;
use std::collections::BTreeMap;

/// Snapshot of one op: one line per case, keyed by id, so a change shows as a one-line diff:
/// `pass | dma=3 vector=1 | output.0: values n=20 bad=0 ulp[0:20] abs=0 rel=0`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OpSnapshot {
    pub op: String,
    pub cases: BTreeMap<String, String>,
}

/// `x` with 2 significant digits (`1.2e-3`), `0`, `inf`, `nan`.
pub fn two_digits(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf".into() } else { "-inf".into() }
    } else {
        format!("{x:.1e}")
    }
}

/// One output's quantized summary.
fn output_line(m: &OutputMetrics) -> String {
    let h = &m.ulp_hist;
    let ulp: Vec<String> = [
        ("0", h.exact),
        ("1", h.one),
        ("2-4", h.two_to_four),
        ("5-16", h.five_to_sixteen),
        (">16", h.more),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .map(|(b, n)| format!("{b}:{n}"))
    .collect();
    let kind = match m.kind {
        CompareKind::Values => "values",
        CompareKind::Indices => "indices",
        CompareKind::Metadata => "metadata",
        CompareKind::Properties => "properties",
        CompareKind::Scalar => "scalar",
    };
    let mut line = format!(
        "{}: {kind} n={} bad={} ulp[{}] abs={} rel={}",
        m.name,
        m.numel,
        m.mismatches,
        ulp.join(" "),
        two_digits(m.max_abs_err),
        two_digits(m.max_rel_err)
    );
    if m.nan_mismatches > 0 {
        line += &format!(" nan_bad={}", m.nan_mismatches);
    }
    if m.inf_mismatches > 0 {
        line += &format!(" inf_bad={}", m.inf_mismatches);
    }
    if let Some(o) = &m.oracle {
        // Device and CPU max error against the oracle, in ulps of the output dtype.
        line += &format!(
            " oracle[{} dev={} cpu={}]",
            o.bound,
            two_digits(o.device_max_ulp),
            two_digits(o.cpu_max_ulp)
        );
    }
    line
}

/// One case's line: status, instructions per engine (non-zero only), outputs.
pub fn case_line(r: &CaseResult) -> String {
    let c = &r.instructions;
    let engines: Vec<String> = [
        ("tensor", c.tensor),
        ("vector", c.vector),
        ("scalar", c.scalar),
        ("gpsimd", c.gpsimd),
        ("dma", c.dma),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .map(|(e, n)| format!("{e}={n}"))
    .collect();
    let mut parts = vec![r.status.name().to_string(), engines.join(" ")];
    parts.extend(r.metrics.iter().map(output_line));
    parts.join(" | ")
}

/// The snapshot of one op from its cases' results.
pub fn op_snapshot(op: &str, results: &[CaseResult]) -> OpSnapshot {
    let cases = results
        .iter()
        .filter(|r| r.op == op)
        .map(|r| (r.id.clone(), case_line(r)))
        .collect();
    OpSnapshot {
        op: op.to_string(),
        cases,
    }
}

/// Ops that get a snapshot: those with a lowering (a not-lowered op has nothing to track).
pub fn snapshotted_ops<'a>(ops: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    ops.into_iter().filter(|op| crate::lower::is_lowered(op)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantization() {
        assert_eq!(two_digits(0.0), "0");
        assert_eq!(two_digits(0.001234), "1.2e-3");
        assert_eq!(two_digits(5.96e-8), "6.0e-8");
        assert_eq!(two_digits(f64::INFINITY), "inf");
        assert_eq!(two_digits(f64::NAN), "nan");
    }
}
