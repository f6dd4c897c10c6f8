//! Coverage of the 193 Core ATen overloads: per op and dtype, how many cases pass.
//! `trnconf list --coverage` prints it; `trnconf coverage --markdown docs/coverage.md` writes the
//! committed page (generated, never typed by hand).

use super::{CaseRecord, severity};
use crate::expect::Status;
use crate::ops;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// The dtype columns, in a fixed order (then any other dtype name, sorted).
pub const DTYPE_ORDER: &[&str] = &[
    "f32", "bf16", "f16", "f8e4m3fn", "f8e5m2", "f64", "i64", "i32", "i16", "i8", "u8", "bool", "c64", "none",
];

/// The cases of one op × dtype.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cell {
    pub total: usize,
    pub passed: usize,
    /// The worst status among the cases.
    pub worst: Option<Status>,
}

impl Cell {
    /// `pass` (every case passes), `partial`, `xfail` (none passes, all expected), `fail`.
    pub fn label(&self) -> &'static str {
        match self.worst {
            None => "none",
            Some(_) if self.passed == self.total => "pass",
            Some(w) if !w.is_ok() => "fail",
            Some(_) if self.passed > 0 => "partial",
            Some(_) => "xfail",
        }
    }
}

/// One core op.
#[derive(Clone, Debug)]
pub struct OpCoverage {
    pub name: String,
    pub family: String,
    pub lowered: bool,
    pub cells: BTreeMap<String, Cell>,
}

impl OpCoverage {
    pub fn cases(&self) -> usize {
        self.cells.values().map(|c| c.total).sum()
    }
}

/// Every core op (sorted by family, then name) with its cells; ops outside the core list are
/// appended under the family `other`.
pub fn compute<'a>(records: impl IntoIterator<Item = &'a CaseRecord>) -> Vec<OpCoverage> {
    let mut by_op: BTreeMap<String, BTreeMap<String, Cell>> = BTreeMap::new();
    for r in records {
        let cell = by_op
            .entry(r.op.clone())
            .or_default()
            .entry(r.dtype.clone())
            .or_default();
        cell.total += 1;
        cell.passed += usize::from(r.status == Status::Pass);
        if cell.worst.is_none_or(|w| severity(r.status) > severity(w)) {
            cell.worst = Some(r.status);
        }
    }
    let mut out: Vec<OpCoverage> = ops::core_ops()
        .iter()
        .map(|o| OpCoverage {
            name: o.name.clone(),
            family: o.family.clone(),
            lowered: crate::lower::is_lowered(&o.name),
            cells: by_op.remove(&o.name).unwrap_or_default(),
        })
        .collect();
    for (name, cells) in by_op {
        out.push(OpCoverage {
            lowered: crate::lower::is_lowered(&name),
            name,
            family: "other".into(),
            cells,
        });
    }
    out.sort_by(|a, b| a.family.cmp(&b.family).then_with(|| a.name.cmp(&b.name)));
    out
}

/// The dtypes that appear, in column order.
pub fn dtypes(cov: &[OpCoverage]) -> Vec<String> {
    let present: BTreeSet<&str> = cov.iter().flat_map(|o| o.cells.keys().map(|k| k.as_str())).collect();
    let mut cols: Vec<String> = DTYPE_ORDER
        .iter()
        .filter(|d| present.contains(*d))
        .map(|d| d.to_string())
        .collect();
    cols.extend(
        present
            .iter()
            .filter(|d| !DTYPE_ORDER.contains(d))
            .map(|d| d.to_string()),
    );
    cols
}

/// Totals: (ops with cases, ops with at least one passing dtype, op×dtype cells, passing cells).
pub fn totals(cov: &[OpCoverage]) -> (usize, usize, usize, usize) {
    let with_cases = cov.iter().filter(|o| o.cases() > 0).count();
    let passing = cov
        .iter()
        .filter(|o| o.cells.values().any(|c| c.label() == "pass"))
        .count();
    let cells = cov.iter().map(|o| o.cells.len()).sum();
    let pass_cells = cov
        .iter()
        .flat_map(|o| o.cells.values())
        .filter(|c| c.label() == "pass")
        .count();
    (with_cases, passing, cells, pass_cells)
}

/// Plain text for `trnconf list --coverage`.
pub fn render_text(cov: &[OpCoverage]) -> String {
    let mut out = String::new();
    for o in cov {
        let cells: Vec<String> = o
            .cells
            .iter()
            .map(|(d, c)| format!("{d}:{}({}/{})", c.label(), c.passed, c.total))
            .collect();
        let _ = writeln!(
            out,
            "{:<34} {:<13} {:>4} cases  {:<11} {}",
            o.name,
            o.family,
            o.cases(),
            if o.lowered { "lowered" } else { "not-lowered" },
            if cells.is_empty() {
                "NO CASES".to_string()
            } else {
                cells.join(" ")
            }
        );
    }
    let (with_cases, passing, cells, pass_cells) = totals(cov);
    let core = cov.iter().filter(|o| o.family != "other").count();
    let _ = writeln!(
        out,
        "\n{with_cases}/{core} core overloads have cases; {passing} pass on at least one dtype; \
         {pass_cells}/{cells} op×dtype combinations pass every case"
    );
    out
}

/// The Markdown page (docs/coverage.md). Deterministic: no timestamps.
pub fn render_markdown(cov: &[OpCoverage], torch: Option<&str>) -> String {
    let mut out = String::new();
    let (with_cases, passing, cells, pass_cells) = totals(cov);
    let core = cov.iter().filter(|o| o.family != "other").count();
    out.push_str("# Core ATen coverage\n\n");
    out.push_str(
        "<!-- Generated by `cargo run -p trnconf -- coverage --markdown docs/coverage.md`. Do not edit by hand. -->\n\n",
    );
    let _ = writeln!(
        out,
        "Every Core ATen overload × dtype of the committed golden suite{}, run through lowering and the \
         simulator (target trn1). A cell gives the cases that pass / the cases of that dtype:\n",
        torch.map(|t| format!(" (PyTorch {t})")).unwrap_or_default()
    );
    out.push_str("* **pass** — every case passes\n* **partial** — some pass, the others are expected failures\n");
    out.push_str(
        "* **xfail** — none passes; all are listed in `conformance/expectations.toml` (e.g. not lowered yet)\n",
    );
    out.push_str("* **FAIL** — a case fails, errors, or passes against its expectation\n* blank — no cases\n\n");
    let _ = writeln!(
        out,
        "**{with_cases}/{core}** core overloads have cases; **{passing}** pass on at least one dtype; \
         **{pass_cells}/{cells}** op × dtype combinations pass every case.\n"
    );
    let mut families: Vec<&str> = cov.iter().map(|o| o.family.as_str()).collect();
    families.dedup();
    for fam in families {
        let ops: Vec<&OpCoverage> = cov.iter().filter(|o| o.family == fam).collect();
        let owned: Vec<OpCoverage> = ops.iter().map(|o| (*o).clone()).collect();
        let cols = dtypes(&owned);
        let _ = writeln!(out, "## {fam}\n");
        let _ = writeln!(out, "| op | lowered | cases | {} |", cols.join(" | "));
        let _ = writeln!(out, "|---|---|---:|{}", "---|".repeat(cols.len()));
        for o in ops {
            let row: Vec<String> = cols
                .iter()
                .map(|d| match o.cells.get(d) {
                    None => String::new(),
                    Some(c) => {
                        let l = match c.label() {
                            "fail" => "FAIL",
                            l => l,
                        };
                        format!("{l} {}/{}", c.passed, c.total)
                    }
                })
                .collect();
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} |",
                o.name,
                if o.lowered { "yes" } else { "no" },
                o.cases(),
                row.join(" | ")
            );
        }
        out.push('\n');
    }
    out
}

/// Marked sections other tools write into the coverage page, which regenerating it keeps.
const KEPT_SECTIONS: &[(&str, &str)] = &[(
    "<!-- torch-device OpInfo comparison: begin -->",
    "<!-- torch-device OpInfo comparison: end -->",
)];

/// The kept sections of an existing page (each from its begin marker through its end marker,
/// preceded by a blank line), to append to a regenerated one. A section without its end marker is
/// dropped rather than guessed at.
pub fn kept_sections(old_page: &str) -> String {
    let mut out = String::new();
    for (begin, end) in KEPT_SECTIONS {
        if let Some(start) = old_page.find(begin)
            && let Some(stop) = old_page[start..].find(end)
        {
            out.push('\n');
            out.push_str(&old_page[start..start + stop + end.len()]);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod kept_tests {
    use super::kept_sections;

    #[test]
    fn the_torch_device_section_survives_regeneration_and_nothing_else_does() {
        let old = "# Coverage\nold table\n<!-- torch-device OpInfo comparison: begin -->\nrows\n\
                   <!-- torch-device OpInfo comparison: end -->\ntrailer\n";
        let kept = kept_sections(old);
        assert_eq!(
            kept,
            "\n<!-- torch-device OpInfo comparison: begin -->\nrows\n<!-- torch-device OpInfo comparison: end -->\n"
        );
        assert_eq!(
            kept_sections("# Coverage\n<!-- torch-device OpInfo comparison: begin -->\nno end"),
            ""
        );
    }
}
