//! The HTML report (`trnconf run --html FILE`): one self-contained file — inline CSS, JS and
//! SVG, no network — that opens with what needs attention:
//! * every case that did not match its expectation, first, grouped by op group under headings
//!   (the summary's count links to them); only these are red,
//! * an op × dtype heatmap of status (`#heatmap`, one `td.cell` per op × dtype),
//! * per-op error distributions: histograms of the cases' max ULP distance, as inline SVG,
//! * a filter box (`#filter`; also set from the URL: `report.html#filter=add`) that hides the
//!   heatmap rows, plots and cases of ops not matching it,
//! * every expected failure that has numerics, last; every case block is a `<details>` with its
//!   metrics and first mismatches.

use super::coverage::{self, OpCoverage};
use super::json::RunInfo;
use super::junit::details;
use super::{CaseRecord, escape_xml, summarize};
use crate::expect::Status;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Max-ULP buckets of the per-op histograms.
pub const ULP_BUCKETS: [(&str, u64, u64); 6] = [
    ("0", 0, 0),
    ("1", 1, 1),
    ("2–4", 2, 4),
    ("5–16", 5, 16),
    ("17–256", 17, 256),
    (">256", 257, u64::MAX),
];

const CSS: &str = r#"
body{font:14px system-ui,-apple-system,sans-serif;margin:1.2em 2em;color:#222}
h1{margin:.2em 0}h2{margin-top:1.4em;border-bottom:1px solid #ddd}
.summary span{display:inline-block;margin-right:1.2em}
#filter{font-size:15px;padding:4px 8px;width:22em}
table.heat{border-collapse:collapse;font-size:12px}
table.heat th{position:sticky;top:0;background:#fff;padding:2px 4px}
table.heat td{border:1px solid #fff;padding:1px 6px;text-align:center;min-width:3.5em}
table.heat td.op{text-align:left;font-family:monospace;background:#f6f6f6}
.s-pass{background:#3c9d4e;color:#fff}.s-partial{background:#a5d6a7}.s-xfail{background:#d7d7d7;color:#444}
.s-fail{background:#d32f2f;color:#fff}.s-none{background:#fafafa;color:#bbb}
.plots{display:flex;flex-wrap:wrap;gap:10px}.plot{border:1px solid #eee;padding:4px}
.plot .t{font:12px monospace}
details{margin:2px 0;border:1px solid #eee;padding:2px 6px}
details summary{cursor:pointer;font-family:monospace}
details pre{white-space:pre-wrap;font-size:12px;background:#fafafa;padding:6px}
.st{font-weight:bold;padding:0 4px}.st-fail,.st-error,.st-xpass{color:#b00020}.st-xfail{color:#666}.st-accurate{color:#1565c0}
.legend span{padding:1px 8px;margin-right:4px}
"#;

const JS: &str = r#"
function applyFilter(v){
  v=(v||'').trim().toLowerCase();
  document.getElementById('filter').value=v;
  var shown=0;
  document.querySelectorAll('[data-op]').forEach(function(el){
    var hit=!v||el.getAttribute('data-op').toLowerCase().indexOf(v)>=0;
    if(hit){el.removeAttribute('hidden');}else{el.setAttribute('hidden','');}
    if(hit&&el.tagName==='TR'){shown++;}
  });
  document.getElementById('shown').textContent=String(shown);
  document.querySelectorAll('[data-count-of]').forEach(function(el){
    var box=document.getElementById(el.getAttribute('data-count-of'));
    el.textContent=String(box.querySelectorAll('details[data-op]:not([hidden])').length);
  });
  document.body.setAttribute('data-filter',v);
}
function fromHash(){
  var m=/(?:^#|&)filter=([^&]*)/.exec(location.hash);
  applyFilter(m?decodeURIComponent(m[1]):'');
}
document.getElementById('filter').addEventListener('input',function(e){
  applyFilter(e.target.value);
  history.replaceState(null,'','#filter='+encodeURIComponent(e.target.value));
});
window.addEventListener('hashchange',fromHash);
fromHash();
"#;

/// Renders the page.
pub fn render(info: &RunInfo, records: &[&CaseRecord]) -> String {
    let s = summarize(records.iter().copied());
    let cov: Vec<OpCoverage> = coverage::compute(records.iter().copied())
        .into_iter()
        .filter(|o| o.cases() > 0)
        .collect();
    let cols = coverage::dtypes(&cov);
    let mut out = String::with_capacity(1 << 20);
    out.push_str(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>trnconf report</title>\n<style>",
    );
    out.push_str(CSS);
    out.push_str("</style></head><body>\n<h1>trnconf conformance report</h1>\n");
    let _ = writeln!(
        out,
        "<p>executor <code>{}</code>, golden <code>{}</code>{}{}</p>",
        escape_xml(&info.executor),
        escape_xml(&info.golden),
        info.filter
            .as_deref()
            .map(|f| format!(", filter <code>{}</code>", escape_xml(f)))
            .unwrap_or_default(),
        info.shard
            .as_deref()
            .map(|f| format!(", shard <code>{}</code>", escape_xml(f)))
            .unwrap_or_default()
            + &info
                .numerics
                .as_deref()
                .map(|n| format!(", numerics <code id=\"numerics\">{}</code>", escape_xml(n)))
                .unwrap_or_default(),
    );
    let _ = writeln!(
        out,
        "<p class=\"summary\" id=\"summary\"><span><b>{}</b> cases</span><span class=\"st st-pass\">{} passed</span><span class=\"st st-accurate\">{} accurate</span><a class=\"st{}\" href=\"#failing\">{} failed</a><span class=\"st st-xfail\">{} xfailed</span><span class=\"st{}\">{} xpassed</span><span class=\"st\">{} skipped</span><span class=\"st{}\">{} errors</span></p>",
        s.total,
        s.passed,
        s.accurate,
        red(s.failed, "fail"),
        s.failed,
        s.xfailed,
        red(s.xpassed, "xpass"),
        s.xpassed,
        s.skipped,
        red(s.errors, "error"),
        s.errors
    );
    let _ = writeln!(
        out,
        "<p><label>Filter ops: <input id=\"filter\" type=\"search\" placeholder=\"op name, e.g. add, sort\" autocomplete=\"off\"></label> <span id=\"shown\">{}</span> of {} ops shown</p>",
        cov.len(),
        cov.len()
    );

    // The cases that did not match their expectation come first, grouped by op group.
    let failing: Vec<&&CaseRecord> = records.iter().filter(|r| !r.status.is_ok()).collect();
    let _ = writeln!(
        out,
        "<h2 id=\"failing-heading\">Cases that did not match their expectation (<span data-count-of=\"failing\">{}</span>)</h2>\n<div id=\"failing\">",
        failing.len()
    );
    let mut by_group: BTreeMap<&str, Vec<&CaseRecord>> = BTreeMap::new();
    for r in &failing {
        by_group.entry(r.group()).or_default().push(r);
    }
    for (group, rs) in &by_group {
        let _ = writeln!(
            out,
            "<h3 class=\"group\" data-group=\"{}\">{} ({})</h3>",
            escape_xml(group),
            escape_xml(group),
            rs.len()
        );
        for r in rs {
            out.push_str(&case_details(r));
        }
    }
    if failing.is_empty() {
        out.push_str("<p>None.</p>\n");
    }
    out.push_str("</div>\n");

    // Heatmap.
    out.push_str("<h2>Status by op × dtype</h2>\n<p class=\"legend\"><span class=\"s-pass\">pass</span><span class=\"s-partial\">partial</span><span class=\"s-xfail\">xfail</span><span class=\"s-fail\">fail</span><span class=\"s-none\">no cases</span></p>\n");
    let _ = write!(
        out,
        "<table class=\"heat\" id=\"heatmap\" data-ops=\"{}\" data-dtypes=\"{}\"><thead><tr><th>op</th>",
        cov.len(),
        cols.len()
    );
    for d in &cols {
        let _ = write!(out, "<th>{}</th>", escape_xml(d));
    }
    out.push_str("</tr></thead><tbody>\n");
    for o in &cov {
        let _ = write!(
            out,
            "<tr data-op=\"{}\"><td class=\"op\" title=\"{}\">{}</td>",
            escape_xml(&o.name),
            escape_xml(&o.family),
            escape_xml(&o.name)
        );
        for d in &cols {
            let (label, text, title) = match o.cells.get(d) {
                None => ("none", String::new(), "no cases".to_string()),
                Some(c) => (
                    c.label(),
                    format!("{}/{}", c.passed, c.total),
                    format!("{} {}: {} of {} pass", o.name, d, c.passed, c.total),
                ),
            };
            let _ = write!(
                out,
                "<td class=\"cell s-{label}\" data-dtype=\"{}\" data-status=\"{label}\" title=\"{}\">{text}</td>",
                escape_xml(d),
                escape_xml(&title)
            );
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");

    out.push_str(&est_time_table(records, &cols));

    // Per-op error distributions.
    out.push_str("<h2>Error distributions (max ULP distance per case)</h2>\n<div class=\"plots\" id=\"plots\">\n");
    let mut by_op: BTreeMap<&str, Vec<&CaseRecord>> = BTreeMap::new();
    for r in records {
        by_op.entry(r.op.as_str()).or_default().push(r);
    }
    for (op, rs) in &by_op {
        let ulps: Vec<u64> = rs.iter().filter_map(|r| r.max_ulp()).collect();
        if ulps.is_empty() {
            continue;
        }
        out.push_str(&histogram(op, &ulps));
    }
    out.push_str("</div>\n");

    out.push_str(&accuracy_table(records));
    let numeric_xfail: Vec<&&CaseRecord> = records
        .iter()
        .filter(|r| r.status == Status::XFail && !r.metrics.is_empty())
        .collect();
    let _ = writeln!(
        out,
        "<h2>Expected failures with numerics (<span data-count-of=\"xfailing\">{}</span>)</h2>\n<div id=\"xfailing\">",
        numeric_xfail.len()
    );
    for r in &numeric_xfail {
        out.push_str(&case_details(r));
    }
    out.push_str("</div>\n<script>");
    out.push_str(JS);
    out.push_str("</script>\n</body></html>\n");
    out
}

/// The class that makes a count red, only when there is something to count.
fn red(n: usize, status: &str) -> String {
    if n > 0 { format!(" st-{status}") } else { String::new() }
}

/// Device vs CPU error against the oracle per op × dtype (golden format 2), and the cases that
/// passed only by the accuracy rule: shown, never folded into the passes.
fn accuracy_table(records: &[&CaseRecord]) -> String {
    let mut cells: BTreeMap<(&str, &str), (usize, usize, f64, f64)> = BTreeMap::new();
    for r in records {
        if let Some((dev, cpu)) = r.oracle_errors() {
            let c = cells.entry((r.op.as_str(), r.dtype.as_str())).or_default();
            c.0 += 1;
            c.1 += usize::from(r.status == Status::Accurate);
            c.2 = c.2.max(dev);
            c.3 = c.3.max(cpu);
        }
    }
    let mut out = String::from(
        "<h2>Accuracy against the oracle (max error in ulps of the output dtype, per op × dtype)</h2>\n<table class=\"accuracy\" id=\"accuracy\"><thead><tr><th>op</th><th>dtype</th><th>cases</th><th>accurate</th><th>device max ulp</th><th>CPU max ulp</th><th>device / CPU</th></tr></thead><tbody>\n",
    );
    for ((op, dtype), (n, acc, dev, cpu)) in &cells {
        let ratio = if *cpu > 0.0 {
            format!("{:.3}", dev / cpu)
        } else if *dev == 0.0 {
            "1".into()
        } else {
            "inf".into()
        };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{n}</td><td>{acc}</td><td>{dev:.3}</td><td>{cpu:.3}</td><td>{ratio}</td></tr>",
            escape_xml(op),
            escape_xml(dtype)
        );
    }
    out.push_str("</tbody></table>\n");
    let accurate: Vec<&&CaseRecord> = records.iter().filter(|r| r.status == Status::Accurate).collect();
    let _ = writeln!(
        out,
        "<h2>Passed by accuracy, not assert_close (<span data-count-of=\"accurate\">{}</span>)</h2>\n<div id=\"accurate\">",
        accurate.len()
    );
    for r in &accurate {
        out.push_str(&case_details(r));
    }
    out.push_str("</div>\n");
    out
}

fn case_details(r: &CaseRecord) -> String {
    format!(
        "<details class=\"case\" data-op=\"{}\" data-status=\"{}\"><summary><span class=\"st st-{}\">{}</span> {} — {}</summary><pre>{}</pre></details>\n",
        escape_xml(&r.op),
        r.status,
        r.status,
        r.status,
        escape_xml(&r.id),
        escape_xml(r.headline()),
        escape_xml(&details(r))
    )
}

/// An inline SVG bar chart of the cases' max ULP, bucketed.
fn histogram(op: &str, ulps: &[u64]) -> String {
    let counts: Vec<usize> = ULP_BUCKETS
        .iter()
        .map(|(_, lo, hi)| ulps.iter().filter(|u| (*lo..=*hi).contains(*u)).count())
        .collect();
    let max = counts.iter().copied().max().unwrap_or(1).max(1);
    let (w, h, bar) = (230, 110, 34);
    let mut svg = format!(
        "<div class=\"plot\" data-op=\"{}\"><div class=\"t\">{} ({} cases)</div><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"max ULP histogram of {}\">",
        escape_xml(op),
        escape_xml(op),
        ulps.len(),
        escape_xml(op)
    );
    for (i, ((label, lo, _), n)) in ULP_BUCKETS.iter().zip(&counts).enumerate() {
        let bh = (*n as f64 / max as f64 * 70.0).round() as i64;
        let x = 8 + i as i64 * (bar + 4);
        let color = match lo {
            0 => "#3c9d4e",
            1 => "#7cb342",
            2..=16 => "#f9a825",
            // Not red: red is kept for cases that did not match their expectation.
            _ => "#6a1b9a",
        };
        let _ = write!(
            svg,
            "<rect x=\"{x}\" y=\"{}\" width=\"{bar}\" height=\"{bh}\" fill=\"{color}\"><title>max ULP {label}: {n} cases</title></rect><text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{n}</text><text x=\"{}\" y=\"104\" font-size=\"9\" text-anchor=\"middle\">{}</text>",
            85 - bh,
            x + bar / 2,
            82 - bh,
            x + bar / 2,
            escape_xml(label)
        );
    }
    svg.push_str("</svg></div>\n");
    svg
}

/// Estimated device time (simulator timeline makespan, docs/timeline.md) per op × dtype: the
/// largest `est_us` over the op's cases of that dtype, with the case count in the title.
fn est_time_table(records: &[&CaseRecord], cols: &[String]) -> String {
    let mut cells: BTreeMap<(&str, &str), (f64, usize)> = BTreeMap::new();
    for r in records {
        if let Some(us) = r.est_us {
            let c = cells.entry((r.op.as_str(), r.dtype.as_str())).or_insert((0.0, 0));
            c.0 = c.0.max(us);
            c.1 += 1;
        }
    }
    let mut out = String::from(
        "<h2>Estimated device time by op × dtype (µs, slowest case)</h2>\n<table class=\"heat\" id=\"est-time\"><thead><tr><th>op</th>",
    );
    for d in cols {
        let _ = write!(out, "<th>{}</th>", escape_xml(d));
    }
    out.push_str("</tr></thead><tbody>\n");
    let ops: std::collections::BTreeSet<&str> = cells.keys().map(|(op, _)| *op).collect();
    for op in ops {
        let _ = write!(out, "<tr><th>{}</th>", escape_xml(op));
        for d in cols {
            match cells.get(&(op, d.as_str())) {
                Some((us, n)) => {
                    let _ = write!(
                        out,
                        "<td class=\"est\" data-est-us=\"{us:.3}\" title=\"{n} cases; slowest {us:.3} µs\">{us:.1}</td>"
                    );
                }
                None => out.push_str("<td></td>"),
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");
    out
}
