//! The report of a whole-model run (`trnconf model run`): per-node rows, the error along
//! depth as an SVG plot, JUnit and a terminal summary. Built from [`ModelResult`] alone: this
//! module knows nothing of lowering or execution.

use crate::compare::{CompareKind, OutputMetrics};
use serde::Serialize;
use std::fmt::Write as _;

/// One node's result.
#[derive(Clone, Debug, Serialize)]
pub struct NodeResult {
    pub index: usize,
    pub name: String,
    pub op: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    /// `pass`, `fail` (the op at this call form is wrong on reference inputs), `unsupported`
    /// (lowering refused the call form), `error`, `skipped` (assertion ops), or `not judged` (a
    /// run without the isolated verdicts, [`crate::model::RunOptions`]).
    pub status: String,
    pub message: String,
    /// The isolated run's comparison (the verdict).
    pub isolated: Option<ErrorSummary>,
    /// The chained run's error against the reference (the drift).
    pub chained: Option<ErrorSummary>,
    /// Chained max relative error of the output over the largest of its float inputs' (none when
    /// the inputs carry no error).
    pub growth: Option<f64>,
    /// Whether the chained output is within the suite's tolerance of the reference.
    pub chained_within_tolerance: bool,
    pub instructions: u64,
    /// Estimated device time of the node's program in the chained run (the timeline's makespan,
    /// from the cost model's per-instruction costs), in µs.
    pub est_us: Option<f64>,
    pub stack: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ErrorSummary {
    pub passed: bool,
    pub max_abs_err: f64,
    pub max_rel_err: f64,
    pub max_ulp: u64,
    pub mismatches: u64,
    pub message: String,
}

impl ErrorSummary {
    pub fn of(metrics: &[OutputMetrics]) -> ErrorSummary {
        let vals: Vec<&OutputMetrics> = metrics.iter().filter(|m| m.kind == CompareKind::Values).collect();
        ErrorSummary {
            passed: metrics.iter().all(|m| m.passed),
            max_abs_err: vals.iter().map(|m| m.max_abs_err).fold(0.0, f64::max),
            max_rel_err: vals
                .iter()
                .map(|m| if m.max_rel_err.is_finite() { m.max_rel_err } else { 0.0 })
                .fold(0.0, f64::max),
            max_ulp: vals.iter().map(|m| m.max_ulp).max().unwrap_or(0),
            mismatches: metrics.iter().map(|m| m.mismatches).sum(),
            message: metrics
                .iter()
                .find(|m| !m.passed)
                .map(|m| m.message.lines().next().unwrap_or("").to_string())
                .unwrap_or_default(),
        }
    }
}

/// A whole model run.
#[derive(Clone, Debug, Serialize)]
pub struct ModelResult {
    pub model: String,
    pub dir: String,
    pub nodes: Vec<NodeResult>,
    /// The first node whose isolated run fails.
    pub first_failing_node: Option<String>,
    /// The first node whose chained output leaves tolerance, and why.
    pub first_drift: Option<(String, String)>,
    /// The model outputs' chained error against the reference.
    pub end_to_end: Vec<(String, ErrorSummary)>,
    /// Call forms the lowering refused (overload and reason): the "will it run" list.
    pub unsupported: Vec<String>,
    pub passed: bool,
    pub wall_ms: f64,
    /// Host time of the chained run alone (lowering and simulating every node on the session:
    /// the model's forward), in ms. The rest of `wall_ms` is the isolated runs and comparisons.
    pub forward_ms: f64,
    /// Estimated device time of the whole model: the sum of the nodes' `est_us` (one program
    /// after another; nodes do not overlap), in µs.
    pub est_us: f64,
    /// What crossed the host boundary in the chained run: the leaves put once, and the reads
    /// made to compare. `None` when the executor keeps no device session.
    pub transfers: Option<trnsim::Transfers>,
    /// Nodes whose chained run went through the host (data-dependent sizes, scalar outputs).
    pub host_round_trips: Vec<String>,
    /// Why the model could not run at all (its leaves could not be put on the device).
    pub error: Option<String>,
}

fn fmt_err(s: &Option<ErrorSummary>) -> String {
    match s {
        Some(s) => format!("{:.2e} / {:.2e} / {}", s.max_abs_err, s.max_rel_err, s.max_ulp),
        None => "—".into(),
    }
}

fn fmt_us(t: Option<f64>) -> String {
    t.map(|t| format!("{t:.2}")).unwrap_or_else(|| "—".into())
}

/// The terminal summary: counts, the first failing and first drifting node, end-to-end error, the
/// "will it run" list.
pub fn summary(r: &ModelResult) -> String {
    let mut out = String::new();
    let count = |st: &str| r.nodes.iter().filter(|n| n.status == st).count();
    let _ = writeln!(
        out,
        "model {}: {} nodes — {} pass, {} fail, {} unsupported, {} error, {} skipped ({:.1} s)",
        r.model,
        r.nodes.len(),
        count("pass"),
        count("fail"),
        count("unsupported"),
        count("error"),
        count("skipped"),
        r.wall_ms / 1e3
    );
    if let Some(n) = &r.first_failing_node {
        let row = r.nodes.iter().find(|x| &x.name == n);
        let _ = writeln!(
            out,
            "first failing node: {n} ({}): {}",
            row.map(|x| x.op.as_str()).unwrap_or(""),
            row.map(|x| x.message.as_str()).unwrap_or("")
        );
    }
    match &r.first_drift {
        Some((n, why)) => {
            let _ = writeln!(out, "first node outside tolerance in the chained run: {n}: {why}");
        }
        None => {
            let _ = writeln!(out, "chained run: every node within tolerance of the reference");
        }
    }
    // A training step's outputs are the loss and every gradient: show the worst few.
    let mut worst: Vec<&(String, ErrorSummary)> = r.end_to_end.iter().collect();
    worst.sort_by(|a, b| b.1.max_rel_err.total_cmp(&a.1.max_rel_err));
    if worst.len() > 5 {
        let _ = writeln!(
            out,
            "end-to-end: {} outputs, the 5 with the largest relative error:",
            worst.len()
        );
        worst.truncate(5);
    }
    for (name, s) in worst {
        let _ = writeln!(
            out,
            "end-to-end `{name}`: max abs {:.3e}, max rel {:.3e}, max {} ulp{}",
            s.max_abs_err,
            s.max_rel_err,
            s.max_ulp,
            if s.passed { "" } else { " (outside tolerance)" }
        );
    }
    if r.est_us > 0.0 {
        let _ = writeln!(
            out,
            "estimated device time: {:.1} µs (the nodes' programs one after another, trn1 cost model)",
            r.est_us
        );
    }
    if let Some(t) = &r.transfers {
        let _ = writeln!(
            out,
            "device session: {} node programs on tensors in simulated HBM; {:.2} MB put (the leaves), {:.2} MB \
             read back to compare; chained forward {:.0} ms on this host{}",
            t.runs,
            t.host_to_device_bytes as f64 / 1e6,
            t.device_to_host_bytes as f64 / 1e6,
            r.forward_ms,
            if r.host_round_trips.is_empty() {
                String::new()
            } else {
                format!(
                    "; through the host (data-dependent sizes or scalar outputs): {}",
                    r.host_round_trips.join(", ")
                )
            }
        );
    }
    if let Some(e) = &r.error {
        let _ = writeln!(out, "the model could not run: {e}");
    }
    if r.unsupported.is_empty() {
        let _ = writeln!(out, "will it run: every call form is supported");
    } else {
        let _ = writeln!(
            out,
            "will it run: {} call forms are not supported:",
            r.unsupported.len()
        );
        for u in &r.unsupported {
            let _ = writeln!(out, "  {u}");
        }
    }
    out
}

/// The per-node table as plain text (`-v`).
pub fn table(r: &ModelResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>4}  {:<28} {:<34} {:<6} {:<11} {:<26} {:<26} {:>8} {:>9}",
        "#", "node", "op", "dtype", "status", "isolated abs/rel/ulp", "chained abs/rel/ulp", "growth", "est µs"
    );
    for n in &r.nodes {
        let _ = writeln!(
            out,
            "{:>4}  {:<28} {:<34} {:<6} {:<11} {:<26} {:<26} {:>8} {:>9}",
            n.index,
            n.name,
            n.op,
            n.dtype,
            n.status,
            fmt_err(&n.isolated),
            fmt_err(&n.chained),
            n.growth.map(|g| format!("{g:.2}")).unwrap_or_else(|| "—".into()),
            fmt_us(n.est_us)
        );
    }
    out
}

/// The error along depth: chained max relative error per node, log scale, as an inline SVG.
pub fn depth_plot_svg(r: &ModelResult) -> String {
    let pts: Vec<(usize, f64)> = r
        .nodes
        .iter()
        .filter_map(|n| n.chained.as_ref().map(|c| (n.index, c.max_rel_err)))
        .collect();
    let (w, h, pad) = (800.0, 240.0, 40.0);
    let n = r.nodes.len().max(1) as f64;
    let floor = 1e-9f64;
    let lo = floor.log10();
    let hi = pts
        .iter()
        .map(|p| p.1.max(floor).log10())
        .fold(lo + 1.0, f64::max)
        .ceil();
    let x = |i: usize| pad + (w - 2.0 * pad) * i as f64 / n;
    let y = |e: f64| h - pad - (h - 2.0 * pad) * (e.max(floor).log10() - lo) / (hi - lo);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" role=\"img\" \
         aria-label=\"chained relative error by node\">"
    );
    let _ = write!(
        svg,
        "<line x1=\"{pad}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"#888\"/><line x1=\"{pad}\" y1=\"{pad}\" \
         x2=\"{pad}\" y2=\"{0}\" stroke=\"#888\"/>",
        h - pad,
        w - pad
    );
    let mut decade = lo as i32;
    while decade as f64 <= hi {
        let yy = y(10f64.powi(decade));
        let _ = write!(
            svg,
            "<text x=\"2\" y=\"{:.1}\" font-size=\"10\">1e{decade}</text><line x1=\"{pad}\" y1=\"{yy:.1}\" \
             x2=\"{}\" y2=\"{yy:.1}\" stroke=\"#eee\"/>",
            yy + 3.0,
            w - pad
        );
        decade += 1;
    }
    let path: Vec<String> = pts.iter().map(|&(i, e)| format!("{:.1},{:.1}", x(i), y(e))).collect();
    let _ = write!(
        svg,
        "<polyline fill=\"none\" stroke=\"#1f5fa8\" stroke-width=\"1.5\" points=\"{}\"/>",
        path.join(" ")
    );
    for (row, &(i, e)) in r.nodes.iter().filter(|n| n.chained.is_some()).zip(&pts) {
        let color = if row.status == "pass" { "#1f5fa8" } else { "#c0392b" };
        let _ = write!(
            svg,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2\" fill=\"{color}\"><title>{} {}: {:.2e}</title></circle>",
            x(i),
            y(e),
            super::escape_xml(&row.name),
            super::escape_xml(&row.op),
            e
        );
    }
    let _ = write!(
        svg,
        "<text x=\"{}\" y=\"{}\" font-size=\"11\">node (execution order)</text></svg>",
        w / 2.0 - 50.0,
        h - 8.0
    );
    svg
}

/// One self-contained HTML page: summary, plot, the failing nodes first, then every node.
pub fn html(r: &ModelResult) -> String {
    let esc = super::escape_xml;
    let mut out = String::from(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>trnconf model report</title><style>\
         body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;font-size:12px}\
         td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}tr.fail td{background:#fbe3e0}\
         pre{background:#f6f6f6;padding:.5em}</style></head><body>",
    );
    let _ = write!(
        out,
        "<h1>Model {}</h1><pre>{}</pre><h2>Error along depth (chained run)</h2>{}",
        esc(&r.model),
        esc(&summary(r)),
        depth_plot_svg(r)
    );
    let failing: Vec<&NodeResult> = r
        .nodes
        .iter()
        .filter(|n| matches!(n.status.as_str(), "fail" | "error" | "unsupported"))
        .collect();
    let row = |n: &NodeResult| {
        format!(
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:?}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td></tr>",
            if matches!(n.status.as_str(), "fail" | "error" | "unsupported") {
                "fail"
            } else {
                ""
            },
            n.index,
            esc(&n.name),
            esc(&n.op),
            esc(&n.dtype),
            n.shape,
            esc(&n.status),
            fmt_err(&n.isolated),
            fmt_err(&n.chained),
            n.growth.map(|g| format!("{g:.2}")).unwrap_or_default(),
            fmt_us(n.est_us),
            esc(&n.message)
        )
    };
    let head = "<table><tr><th>#</th><th>node</th><th>op</th><th>dtype</th><th>shape</th><th>status</th>\
                <th>isolated abs/rel/ulp</th><th>chained abs/rel/ulp</th><th>growth</th><th>est µs</th><th>message</th></tr>";
    if !failing.is_empty() {
        let _ = write!(out, "<h2 id=\"failures\">Failing nodes</h2>{head}");
        for n in &failing {
            out.push_str(&row(n));
        }
        out.push_str("</table>");
    }
    let _ = write!(out, "<h2>Every node</h2>{head}");
    for n in &r.nodes {
        out.push_str(&row(n));
    }
    out.push_str("</table></body></html>\n");
    out
}

/// JUnit: one test case per node, a failure for each failing node.
pub fn junit(r: &ModelResult) -> String {
    let esc = super::escape_xml;
    let fails = r
        .nodes
        .iter()
        .filter(|n| matches!(n.status.as_str(), "fail" | "error" | "unsupported"))
        .count();
    let skipped = r.nodes.iter().filter(|n| n.status == "skipped").count();
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites><testsuite name=\"model {}\" tests=\"{}\" \
         failures=\"{fails}\" errors=\"0\" skipped=\"{skipped}\" time=\"{:.3}\">\n",
        esc(&r.model),
        r.nodes.len(),
        r.wall_ms / 1e3
    );
    for n in &r.nodes {
        let _ = write!(
            out,
            "  <testcase classname=\"{}\" name=\"{} {}\">",
            esc(&r.model),
            esc(&n.name),
            esc(&n.op)
        );
        match n.status.as_str() {
            "fail" | "error" | "unsupported" => {
                let _ = write!(
                    out,
                    "<failure message=\"{}\">{}</failure>",
                    esc(&n.status),
                    esc(&n.message)
                );
            }
            "skipped" => out.push_str("<skipped/>"),
            _ => {}
        }
        out.push_str("</testcase>\n");
    }
    out.push_str("</testsuite></testsuites>\n");
    out
}
