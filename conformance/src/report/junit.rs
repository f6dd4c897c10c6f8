//! JUnit XML (`trnconf run --junit FILE`), in the shape GitHub Actions reporters and Jenkins read
//! (the common JUnit XSD): `<testsuites>` → one `<testsuite>` per op group → one `<testcase>` per
//! case. fail/xpass → `<failure>` whose text carries the metrics; error → `<error>`;
//! xfail/skip → `<skipped message="reason">`.

use super::{CaseRecord, escape_xml, fmt_opt, summarize};
use crate::expect::Status;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Renders the document. `timestamp` is ISO 8601 (recorded on every suite).
pub fn render(records: &[&CaseRecord], timestamp: &str) -> String {
    let mut groups: BTreeMap<&str, Vec<&CaseRecord>> = BTreeMap::new();
    for r in records {
        groups.entry(r.group()).or_default().push(r);
    }
    let all = summarize(records.iter().copied());
    let secs = |rs: &[&CaseRecord]| rs.iter().map(|r| r.wall_ms).sum::<f64>() / 1e3;
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"trnconf\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.6}\">",
        all.total,
        all.failed + all.xpassed,
        all.errors,
        all.xfailed + all.skipped,
        secs(records)
    );
    for (id, (group, rs)) in groups.iter().enumerate() {
        let s = summarize(rs.iter().copied());
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" id=\"{id}\" package=\"trnconf\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.6}\" timestamp=\"{}\" hostname=\"localhost\">",
            escape_xml(group),
            s.total,
            s.failed + s.xpassed,
            s.errors,
            s.xfailed + s.skipped,
            secs(rs),
            escape_xml(timestamp)
        );
        for r in rs {
            testcase(&mut out, group, r);
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

fn testcase(out: &mut String, group: &str, r: &CaseRecord) {
    let _ = write!(
        out,
        "    <testcase name=\"{}\" classname=\"trnconf.{}.{}\" time=\"{:.6}\"",
        escape_xml(&r.id),
        escape_xml(group),
        escape_xml(&r.op),
        r.wall_ms / 1e3
    );
    let body = match r.status {
        Status::Pass => None,
        // A pass, shown as such: the accuracy verdict goes to system-out, never hidden.
        Status::Accurate => Some(format!(
            "      <system-out>{}</system-out>\n",
            escape_xml(&format!("[accurate] {}", r.message))
        )),
        Status::Fail | Status::XPass => Some(format!(
            "      <failure message=\"{}\" type=\"{}\">{}</failure>\n",
            escape_xml(&format!("[{}] {}", r.status, r.headline())),
            r.status,
            escape_xml(&details(r))
        )),
        Status::Error => Some(format!(
            "      <error message=\"{}\" type=\"error\">{}</error>\n",
            escape_xml(r.headline()),
            escape_xml(&details(r))
        )),
        Status::XFail | Status::Skip | Status::NotProvided => Some(format!(
            "      <skipped message=\"{}\"/>\n",
            escape_xml(&format!(
                "{}: {}",
                r.status,
                r.expectation.as_deref().unwrap_or(r.headline())
            ))
        )),
    };
    match body {
        None => out.push_str("/>\n"),
        Some(b) => {
            out.push_str(">\n");
            out.push_str(&b);
            out.push_str("    </testcase>\n");
        }
    }
}

/// The message and every output's metrics, as text.
pub fn details(r: &CaseRecord) -> String {
    let mut s = format!("{}\n", r.message);
    for m in &r.metrics {
        let _ = writeln!(
            s,
            "{} ({}, {} {:?}): {} max_abs_err={} max_rel_err={} max_ulp={} mismatches={}/{} nan_mismatches={} inf_mismatches={} rtol={} atol={}",
            m.name,
            m.kind,
            m.dtype.as_deref().unwrap_or("-"),
            m.shape,
            if m.passed { "passed" } else { "FAILED" },
            fmt_opt(m.max_abs_err),
            fmt_opt(m.max_rel_err),
            m.max_ulp,
            m.mismatches,
            m.numel,
            m.nan_mismatches,
            m.inf_mismatches,
            fmt_opt(m.rtol),
            fmt_opt(m.atol),
        );
        if let Some(o) = &m.oracle {
            let _ = writeln!(s, "  {}", o.line());
        }
        if let Some(fm) = &m.first_mismatch {
            let _ = writeln!(
                s,
                "  first mismatch at {:?}: actual {} expected {}{}",
                fm.index,
                fm.actual,
                fm.expected,
                fm.ulp.map(|u| format!(" ({u} ULP)")).unwrap_or_default()
            );
        }
    }
    // nki mode: each backend against the golden and against trnsim's bits.
    for b in &r.backends {
        let _ = writeln!(
            s,
            "backend {}: {} max_ulp={} same_bits_as_sim={}{}",
            b.name,
            b.status,
            b.max_ulp.map_or("-".into(), |u| u.to_string()),
            b.same_bits_as_sim,
            if b.message.is_empty() {
                String::new()
            } else {
                format!(" ({})", b.message)
            }
        );
    }
    s
}
