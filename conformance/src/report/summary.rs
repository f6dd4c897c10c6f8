//! The end-of-run text: a table per op group (the families of the core list) and the slowest
//! cases.

use super::{CaseRecord, summarize};
use crate::results::Summary;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Counts per op group, in group order, plus their total time in ms.
pub fn by_group<'a>(records: impl IntoIterator<Item = &'a CaseRecord>) -> BTreeMap<&'static str, (Summary, f64)> {
    let mut groups: BTreeMap<&'static str, Vec<&CaseRecord>> = BTreeMap::new();
    for r in records {
        groups.entry(r.group()).or_default().push(r);
    }
    groups
        .into_iter()
        .map(|(g, rs)| (g, (summarize(rs.iter().copied()), rs.iter().map(|r| r.wall_ms).sum())))
        .collect()
}

/// The per-group table and the `slowest` slowest cases.
pub fn render(records: &[&CaseRecord], slowest: usize) -> String {
    let mut out = String::new();
    let header = [
        "group", "cases", "passed", "accurate", "failed", "xfailed", "xpassed", "skipped", "errors", "time",
    ];
    let _ = writeln!(
        out,
        "{:<14} {:>6} {:>7} {:>8} {:>7} {:>8} {:>8} {:>8} {:>7} {:>9}",
        header[0], header[1], header[2], header[3], header[4], header[5], header[6], header[7], header[8], header[9]
    );
    let groups = by_group(records.iter().copied());
    let mut total = Summary::default();
    let mut total_ms = 0.0;
    for (g, (s, ms)) in &groups {
        row(&mut out, g, s, *ms);
        total.total += s.total;
        total.passed += s.passed;
        total.accurate += s.accurate;
        total.failed += s.failed;
        total.xfailed += s.xfailed;
        total.xpassed += s.xpassed;
        total.skipped += s.skipped;
        total.errors += s.errors;
        total_ms += ms;
    }
    let _ = writeln!(out, "{}", "-".repeat(92));
    row(&mut out, "total", &total, total_ms);
    if slowest > 0 && !records.is_empty() {
        let mut by_time: Vec<&&CaseRecord> = records.iter().collect();
        by_time.sort_by(|a, b| b.wall_ms.total_cmp(&a.wall_ms).then_with(|| a.id.cmp(&b.id)));
        let _ = writeln!(out, "\nslowest cases:");
        for r in by_time.iter().take(slowest) {
            let _ = writeln!(out, "  {:>9.2} ms  {:<6} {}", r.wall_ms, r.status.name(), r.id);
        }
        let mut by_est: Vec<&&CaseRecord> = records.iter().filter(|r| r.est_us.is_some()).collect();
        by_est.sort_by(|a, b| {
            b.est_us
                .unwrap_or(0.0)
                .total_cmp(&a.est_us.unwrap_or(0.0))
                .then_with(|| a.id.cmp(&b.id))
        });
        if !by_est.is_empty() {
            let _ = writeln!(
                out,
                "
slowest cases by estimated device time (docs/timeline.md):"
            );
            for r in by_est.iter().take(slowest) {
                let _ = writeln!(
                    out,
                    "  {:>9.1} µs  {:<6} {}",
                    r.est_us.unwrap_or(0.0),
                    r.status.name(),
                    r.id
                );
            }
        }
    }
    out
}

fn row(out: &mut String, name: &str, s: &Summary, ms: f64) {
    let _ = writeln!(
        out,
        "{:<14} {:>6} {:>7} {:>8} {:>7} {:>8} {:>8} {:>8} {:>7} {:>7.2} s",
        name,
        s.total,
        s.passed,
        s.accurate,
        s.failed,
        s.xfailed,
        s.xpassed,
        s.skipped,
        s.errors,
        ms / 1e3
    );
}
