//! The roofline's per-family table over a results file's records (`trnconf perf`,
//! docs/performance.md): time-weighted, median and worst efficiency per op family, and which
//! term of the bound limits each case. The bound itself is crate::roofline, which knows nothing
//! of reports.

use super::CaseRecord;
use crate::roofline::{Limiter, families, family_of};
use std::collections::BTreeMap;
use std::fmt::Write;

/// One family's efficiencies over a set of cases.
#[derive(Clone, Debug, PartialEq)]
pub struct FamilyRow {
    pub family: &'static str,
    /// Cases with an efficiency (executed, with required work).
    pub cases: usize,
    /// Σ bound / Σ estimate over the cases: the time-weighted efficiency.
    pub weighted: f64,
    pub median: f64,
    pub min: f64,
    /// The case with the lowest efficiency.
    pub worst: String,
    pub worst_est_us: f64,
    pub worst_bound_us: f64,
    /// How many cases each term limits: latency, hbm, tensor, stream.
    pub limiters: [usize; 4],
}

/// Per-family efficiency rows over `records` (cases without an efficiency are left out), in
/// family order.
pub fn family_table<'a>(records: impl IntoIterator<Item = &'a CaseRecord>) -> Vec<FamilyRow> {
    let mut by: BTreeMap<&'static str, Vec<&CaseRecord>> = BTreeMap::new();
    for r in records {
        if let (Some(f), Some(_)) = (family_of(&r.op), r.efficiency) {
            by.entry(f).or_default().push(r);
        }
    }
    families()
        .filter_map(|f| {
            let rs = by.get(f)?;
            let mut effs: Vec<f64> = rs.iter().filter_map(|r| r.efficiency).collect();
            effs.sort_by(f64::total_cmp);
            let worst = rs
                .iter()
                .min_by(|a, b| {
                    a.efficiency
                        .unwrap_or(0.0)
                        .total_cmp(&b.efficiency.unwrap_or(0.0))
                        .then_with(|| a.id.cmp(&b.id))
                })
                .copied()?;
            let sum_b: f64 = rs.iter().filter_map(|r| r.bound_us).sum();
            let sum_e: f64 = rs.iter().filter_map(|r| r.est_us).sum();
            let mut limiters = [0usize; 4];
            for r in rs {
                let i = match r.limiter {
                    Some(Limiter::Latency) => 0,
                    Some(Limiter::Hbm) => 1,
                    Some(Limiter::Tensor) => 2,
                    Some(Limiter::Stream) => 3,
                    None => continue,
                };
                limiters[i] += 1;
            }
            Some(FamilyRow {
                family: f,
                cases: effs.len(),
                weighted: if sum_e > 0.0 { sum_b / sum_e } else { 0.0 },
                median: effs[effs.len() / 2],
                min: effs[0],
                worst: worst.id.clone(),
                worst_est_us: worst.est_us.unwrap_or(0.0),
                worst_bound_us: worst.bound_us.unwrap_or(0.0),
                limiters,
            })
        })
        .collect()
}

/// The table as text (`markdown`: a Markdown table), percentages with one decimal.
pub fn render_table(rows: &[FamilyRow], markdown: bool) -> String {
    let mut out = String::new();
    let pct = |x: f64| format!("{:.1} %", 100.0 * x);
    let lim = |l: &[usize; 4]| {
        ["latency", "hbm", "tensor", "stream"]
            .iter()
            .zip(l)
            .filter(|(_, n)| **n > 0)
            .map(|(name, n)| format!("{name} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if markdown {
        let _ = writeln!(
            out,
            "| family | cases | Σ bound / Σ est | median | min | worst case (est / bound µs) | bound set by |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|");
        for r in rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | `{}` ({:.1} / {:.1}) | {} |",
                r.family,
                r.cases,
                pct(r.weighted),
                pct(r.median),
                pct(r.min),
                r.worst,
                r.worst_est_us,
                r.worst_bound_us,
                lim(&r.limiters)
            );
        }
    } else {
        let _ = writeln!(
            out,
            "{:<14} {:>5} {:>9} {:>8} {:>8}  worst case (est / bound µs); bound set by",
            "family", "cases", "Σb/Σest", "median", "min"
        );
        for r in rows {
            let _ = writeln!(
                out,
                "{:<14} {:>5} {:>9} {:>8} {:>8}  {} ({:.1} / {:.1}); {}",
                r.family,
                r.cases,
                pct(r.weighted),
                pct(r.median),
                pct(r.min),
                r.worst,
                r.worst_est_us,
                r.worst_bound_us,
                lim(&r.limiters)
            );
        }
    }
    out
}
