//! `trnconf diff A.json B.json`: how each case changed between two runs. Status changes first
//! (including cases only in one run), then numeric changes sorted by the size of the change in
//! max ULP, then in max relative error.

use super::json::Loaded;
use super::{escape_xml, fmt_opt};
use crate::expect::Status;
use std::fmt::Write;

/// One case that changed.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub id: String,
    /// `None`: the case is not in that run.
    pub before: Option<Status>,
    pub after: Option<Status>,
    pub ulp_before: Option<u64>,
    pub ulp_after: Option<u64>,
    pub rel_before: Option<f64>,
    pub rel_after: Option<f64>,
    /// Device error against the oracle (max over outputs, ulps), when the case has oracles.
    pub oracle_before: Option<f64>,
    pub oracle_after: Option<f64>,
    /// PyTorch CPU's error against the same oracle (max over outputs, ulps): what the device's is
    /// measured against.
    pub oracle_cpu_before: Option<f64>,
    pub oracle_cpu_after: Option<f64>,
}

impl Change {
    pub fn status_changed(&self) -> bool {
        self.before != self.after
    }

    /// A regression: the case matched its expectation before and does not now (fail, xpass,
    /// error), or it is missing from the later run.
    pub fn is_regression(&self) -> bool {
        match (self.before, self.after) {
            (Some(b), Some(a)) => b.is_ok() && !a.is_ok(),
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// Δ max ULP, signed: positive when the later run is further from the golden.
    pub fn ulp_change(&self) -> i128 {
        i128::from(self.ulp_after.unwrap_or(0)) - i128::from(self.ulp_before.unwrap_or(0))
    }

    /// |Δ max ULP|.
    pub fn ulp_delta(&self) -> u64 {
        self.ulp_before.unwrap_or(0).abs_diff(self.ulp_after.unwrap_or(0))
    }

    /// |Δ max relative error| (inf when exactly one side is infinite).
    pub fn rel_delta(&self) -> f64 {
        let (a, b) = (self.rel_before.unwrap_or(0.0), self.rel_after.unwrap_or(0.0));
        if a == b { 0.0 } else { (a - b).abs() }
    }
}

/// The changes from `a` to `b`, in report order. Unchanged cases are left out.
pub fn diff(a: &Loaded, b: &Loaded) -> (Vec<Change>, usize) {
    let mut ids: Vec<&String> = a.cases.keys().chain(b.cases.keys()).collect();
    ids.sort();
    ids.dedup();
    let mut changes = Vec::new();
    let mut unchanged = 0;
    for id in ids {
        let ra = a.cases.get(id).map(|(_, r)| r);
        let rb = b.cases.get(id).map(|(_, r)| r);
        let c = Change {
            id: id.clone(),
            before: ra.map(|r| r.status),
            after: rb.map(|r| r.status),
            ulp_before: ra.and_then(|r| r.max_ulp()),
            ulp_after: rb.and_then(|r| r.max_ulp()),
            rel_before: ra.and_then(|r| r.max_rel_err()),
            rel_after: rb.and_then(|r| r.max_rel_err()),
            oracle_before: ra.and_then(|r| r.oracle_errors()).map(|e| e.0),
            oracle_after: rb.and_then(|r| r.oracle_errors()).map(|e| e.0),
            oracle_cpu_before: ra.and_then(|r| r.oracle_errors()).map(|e| e.1),
            oracle_cpu_after: rb.and_then(|r| r.oracle_errors()).map(|e| e.1),
        };
        if c.status_changed()
            || c.ulp_before != c.ulp_after
            || c.rel_before != c.rel_after
            || c.oracle_before != c.oracle_after
            || c.oracle_cpu_before != c.oracle_cpu_after
        {
            changes.push(c);
        } else {
            unchanged += 1;
        }
    }
    changes.sort_by(|x, y| {
        y.status_changed()
            .cmp(&x.status_changed())
            .then_with(|| y.ulp_delta().cmp(&x.ulp_delta()))
            .then_with(|| y.rel_delta().total_cmp(&x.rel_delta()))
            .then_with(|| x.id.cmp(&y.id))
    });
    (changes, unchanged)
}

fn status(s: Option<Status>) -> &'static str {
    s.map_or("(absent)", |s| s.name())
}

fn ulp(u: Option<u64>) -> String {
    u.map_or("-".into(), |u| u.to_string())
}

fn rel(r: Option<f64>) -> String {
    match r {
        None => "-".into(),
        Some(x) if x.is_infinite() => "inf".into(),
        Some(x) => fmt_opt(Some(x)),
    }
}

/// `  oracle_ulp A -> B (cpu C -> D)` (device, then CPU error against the oracle) when either run
/// measured the case against an oracle.
fn oracle_change(c: &Change) -> String {
    if c.oracle_before.is_none() && c.oracle_after.is_none() {
        return String::new();
    }
    format!(
        "  oracle_ulp {} -> {} (cpu {} -> {})",
        super::fmt_ulp(c.oracle_before),
        super::fmt_ulp(c.oracle_after),
        super::fmt_ulp(c.oracle_cpu_before),
        super::fmt_ulp(c.oracle_cpu_after)
    )
}

/// The text report.
pub fn render_text(changes: &[Change], unchanged: usize) -> String {
    let mut out = String::new();
    let status_changes: Vec<&Change> = changes.iter().filter(|c| c.status_changed()).collect();
    let numeric: Vec<&Change> = changes.iter().filter(|c| !c.status_changed()).collect();
    let _ = writeln!(out, "status changes: {}", status_changes.len());
    for c in &status_changes {
        let _ = writeln!(
            out,
            "  {:<48} {:>8} -> {:<8}  max_ulp {} -> {}  max_rel {} -> {}{}",
            c.id,
            status(c.before),
            status(c.after),
            ulp(c.ulp_before),
            ulp(c.ulp_after),
            rel(c.rel_before),
            rel(c.rel_after),
            oracle_change(c)
        );
    }
    let _ = writeln!(out, "numeric changes: {}", numeric.len());
    for c in &numeric {
        let _ = writeln!(
            out,
            "  {:<48} {:<8} max_ulp {} -> {} (Δ{:+})  max_rel {} -> {}{}",
            c.id,
            status(c.after),
            ulp(c.ulp_before),
            ulp(c.ulp_after),
            c.ulp_change(),
            rel(c.rel_before),
            rel(c.rel_after),
            oracle_change(c)
        );
    }
    let _ = writeln!(out, "unchanged: {unchanged}");
    let regressions = changes.iter().filter(|c| c.is_regression()).count();
    let _ = writeln!(
        out,
        "regressions: {regressions} (matched their expectation before and do not now, or are missing)"
    );
    out
}

/// A self-contained HTML page of the same report.
pub fn render_html(a_name: &str, b_name: &str, changes: &[Change], unchanged: usize) -> String {
    let mut rows = String::new();
    for c in changes {
        let _ = writeln!(
            rows,
            "<tr class=\"{}\"><td>{}</td><td class=\"s-{}\">{}</td><td class=\"s-{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if c.status_changed() { "status" } else { "numeric" },
            escape_xml(&c.id),
            status(c.before),
            status(c.before),
            status(c.after),
            status(c.after),
            ulp(c.ulp_before),
            ulp(c.ulp_after),
            c.ulp_delta(),
            rel(c.rel_before),
            rel(c.rel_after),
            super::fmt_ulp(c.oracle_before),
            super::fmt_ulp(c.oracle_after),
            super::fmt_ulp(c.oracle_cpu_before),
            super::fmt_ulp(c.oracle_cpu_after)
        );
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>trnconf diff</title><style>\
body{{font:14px system-ui,sans-serif;margin:1.5em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 6px;font-family:monospace}}\
tr.status{{background:#fff4d6}}.s-pass{{color:#176c2c}}.s-fail,.s-error,.s-xpass{{color:#b00020;font-weight:bold}}.s-xfail,.s-skip{{color:#666}}\
</style></head><body><h1>trnconf diff</h1><p>A: <code>{}</code><br>B: <code>{}</code></p>\
<p>{} status changes, {} numeric changes, {} unchanged.</p>\
<table id=\"diff\"><thead><tr><th>case</th><th>status A</th><th>status B</th><th>max ULP A</th><th>max ULP B</th><th>|Δ ULP|</th><th>max rel A</th><th>max rel B</th><th>device oracle ulp A</th><th>device oracle ulp B</th><th>CPU oracle ulp A</th><th>CPU oracle ulp B</th></tr></thead><tbody>\n{}</tbody></table></body></html>\n",
        escape_xml(a_name),
        escape_xml(b_name),
        changes.iter().filter(|c| c.status_changed()).count(),
        changes.iter().filter(|c| !c.status_changed()).count(),
        unchanged,
        rows
    )
}

/// The backends of the cases of a multi-backend run (nki mode: `sim`, then `nki_standin`, or
/// `simulate_kernel` and `hardware`), as text: per backend how many cases pass against the
/// golden and how many have the simulator's bits, then every case where the backends disagree
/// (a status or any bit). Empty when no case of the run has backends.
pub fn render_backends(run: &Loaded) -> String {
    render_backends_of(run.records())
}

/// [`render_backends`] over any records (the `trnconf run` summary uses it too).
pub fn render_backends_of<'a>(records: impl IntoIterator<Item = &'a super::CaseRecord>) -> String {
    use std::collections::BTreeMap;
    let with: Vec<&super::CaseRecord> = records.into_iter().filter(|r| !r.backends.is_empty()).collect();
    if with.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    // name -> (cases, pass, same bits as sim), in first-seen order.
    let mut order: Vec<String> = Vec::new();
    let mut counts: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    let mut disagree = Vec::new();
    for r in &with {
        for b in &r.backends {
            if !order.contains(&b.name) {
                order.push(b.name.clone());
            }
            let c = counts.entry(b.name.clone()).or_default();
            c.0 += 1;
            c.1 += usize::from(b.status == "pass");
            c.2 += usize::from(b.same_bits_as_sim);
        }
        let first = &r.backends[0].status;
        if r.backends.iter().any(|b| !b.same_bits_as_sim || &b.status != first) {
            disagree.push(r);
        }
    }
    let names = order.join(" vs ");
    let _ = writeln!(out, "backends ({names}): {} cases", with.len());
    for name in &order {
        let (n, pass, same) = counts[name];
        let _ = writeln!(out, "  {name:<16} pass {pass}/{n}  same bits as sim {same}/{n}");
    }
    let _ = writeln!(out, "cases where the backends disagree: {}", disagree.len());
    for r in disagree {
        let cells: Vec<String> = r
            .backends
            .iter()
            .map(|b| {
                format!(
                    "{} {} ulp {}{}",
                    b.name,
                    b.status,
                    ulp(b.max_ulp),
                    if b.same_bits_as_sim {
                        ""
                    } else {
                        " (bits differ from sim)"
                    }
                )
            })
            .collect();
        let _ = writeln!(out, "  {:<48} {}", r.id, cells.join(" | "));
    }
    out
}
