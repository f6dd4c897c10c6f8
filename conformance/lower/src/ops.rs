//! The Core ATen operator set the suite covers: the 193 overloads of
//! `data/core-aten-overloads.json` (a copy of the shared reference list, embedded at compile time
//! so the binary needs no data files to know which ops exist).

use std::collections::BTreeSet;
use std::sync::OnceLock;

/// The embedded list, grouped by family (`{"torch", "count", "groups": {family: [op, ...]}}`).
const CORE_ATEN_JSON: &str = include_str!("../../data/core-aten-overloads.json");

#[derive(serde::Deserialize)]
struct CoreList {
    count: usize,
    groups: std::collections::BTreeMap<String, Vec<String>>,
}

/// One op of the core set, with the family it is grouped under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreOp {
    pub name: String,
    pub family: String,
}

fn core_list() -> &'static [CoreOp] {
    static LIST: OnceLock<Vec<CoreOp>> = OnceLock::new();
    LIST.get_or_init(|| {
        // The file is part of the crate: failing to parse it is a build defect, caught by the
        // unit test below, not bad user input.
        let parsed: CoreList = serde_json::from_str(CORE_ATEN_JSON).expect("embedded core op list parses");
        let mut ops: Vec<CoreOp> = parsed
            .groups
            .into_iter()
            .flat_map(|(family, names)| {
                names.into_iter().map(move |name| CoreOp {
                    name,
                    family: family.clone(),
                })
            })
            .collect();
        ops.sort_by(|a, b| a.name.cmp(&b.name));
        debug_assert_eq!(ops.len(), parsed.count);
        ops
    })
}

/// Every core op, sorted by name.
pub fn core_ops() -> &'static [CoreOp] {
    core_list()
}

/// Whether `name` is one of the core overloads (`add.Tensor`, `relu`, ...).
pub fn is_core_op(name: &str) -> bool {
    core_list().binary_search_by(|o| o.name.as_str().cmp(name)).is_ok()
}

/// The family an op is grouped under (`binary`, `reduction`, ...).
pub fn family_of(name: &str) -> Option<&'static str> {
    core_list()
        .binary_search_by(|o| o.name.as_str().cmp(name))
        .ok()
        .map(|i| core_list()[i].family.as_str())
}

/// Names of all core ops.
pub fn core_op_names() -> BTreeSet<&'static str> {
    core_list().iter().map(|o| o.name.as_str()).collect()
}

/// The schemas of the core overloads, as torch 2.15.0's registry prints them
/// (`data/core-aten-schemas.json`, made by `str(torch.ops.aten.<overload>._schema)`).
const CORE_ATEN_SCHEMAS_JSON: &str = include_str!("../../data/core-aten-schemas.json");

#[derive(serde::Deserialize)]
struct SchemaFile {
    schemas: std::collections::BTreeMap<String, String>,
}

fn schemas() -> &'static std::collections::BTreeMap<String, String> {
    static MAP: OnceLock<std::collections::BTreeMap<String, String>> = OnceLock::new();
    // Part of the crate, checked by a unit test below: a parse failure is a build defect.
    MAP.get_or_init(|| {
        serde_json::from_str::<SchemaFile>(CORE_ATEN_SCHEMAS_JSON)
            .expect("embedded schemas parse")
            .schemas
    })
}

/// The schema of a core overload (`aten::add.Tensor(Tensor self, Tensor other, *, Scalar
/// alpha=1) -> Tensor`).
pub fn schema_of(op: &str) -> Option<&'static str> {
    schemas().get(op).map(|s| s.as_str())
}

/// One parameter of a schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    pub name: String,
    /// After the `*`: only by keyword.
    pub kwarg_only: bool,
    /// Has a default (`=...`), or is optional (`Type?`): a call may leave it out.
    pub optional: bool,
}

/// The parameters of a schema, in order (`None` if it does not parse).
pub fn schema_params(schema: &str) -> Option<Vec<Param>> {
    let open = schema.find('(')?;
    // The closing parenthesis of the parameter list: the one that matches `open`.
    let mut depth = 0usize;
    let mut close = None;
    for (i, ch) in schema.char_indices().skip_while(|(i, _)| *i < open) {
        match ch {
            '(' | '[' => depth += 1,
            ')' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    close = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let inner = schema.get(open + 1..close?)?;
    // Split at top-level commas (a default may be a list: `int[2] stride=[1, 1]`).
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, ch) in inner.char_indices() {
        match ch {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    let mut params = Vec::new();
    let mut kwarg_only = false;
    for part in parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        if part == "*" {
            kwarg_only = true;
            continue;
        }
        let (decl, default) = match part.split_once('=') {
            Some((d, _)) => (d.trim(), true),
            None => (part, false),
        };
        let (ty, name) = decl.rsplit_once(' ')?;
        params.push(Param {
            name: name.to_string(),
            kwarg_only,
            optional: default || ty.contains('?'),
        });
    }
    Some(params)
}

/// Checks a call's arguments against an overload's schema, as PyTorch's dispatcher would: at
/// most as many positional arguments as positional parameters, every keyword a parameter of the
/// schema not also given positionally, every required parameter given. `Err` says which.
pub fn check_call(op: &str, n_args: usize, kwargs: &[&str]) -> Result<(), String> {
    let Some(schema) = schema_of(op) else {
        return Err(format!("no schema is known for `{op}`"));
    };
    let params = schema_params(schema).ok_or_else(|| format!("cannot read the schema `{schema}`"))?;
    let positional = params.iter().filter(|p| !p.kwarg_only).count();
    if n_args > positional {
        return Err(format!(
            "{n_args} positional arguments, but `{schema}` takes at most {positional}"
        ));
    }
    for k in kwargs {
        match params.iter().position(|p| p.name == *k) {
            None => return Err(format!("keyword argument `{k}` is not a parameter of `{schema}`")),
            Some(i) if i < n_args => {
                return Err(format!("`{k}` is given both positionally and by keyword (`{schema}`)"));
            }
            Some(_) => {}
        }
    }
    for (i, p) in params.iter().enumerate() {
        if !p.optional && i >= n_args && !kwargs.contains(&p.name.as_str()) {
            return Err(format!("required argument `{}` of `{schema}` is not given", p.name));
        }
    }
    Ok(())
}

/// The ops exempt from the runner's "no compute-engine work" check, for one of two reasons:
/// * metadata queries (`metadata` family: sizes, strides, contiguity) — a backend answers them
///   from the tensor's metadata at trace time; their programs run no instruction at all;
/// * data movement only (`shape` family): a view/copy is a DMA program on Trainium — the output
///   is the input's elements rearranged by DMA access patterns (strides, negative steps for
///   `flip`, stride 0 for `expand`/`repeat`), checked element by element; routing the bytes
///   through a compute engine would change nothing. These programs still run DMA instructions.
pub const NO_COMPUTE_WORK_OPS: &[&str] = &[
    // metadata queries
    "sym_size.int",
    "sym_stride.int",
    "sym_numel",
    "sym_storage_offset",
    "sym_is_contiguous",
    // data movement only: a view/copy is a DMA program on Trainium
    "alias",
    "as_strided",
    "view",
    "permute",
    "expand",
    "squeeze.dim",
    "squeeze.dims",
    "unsqueeze",
    "select.int",
    "slice.Tensor",
    "diagonal",
    "split_with_sizes",
    "cat",
    "flip",
    "repeat",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_list_has_193_unique_ops() {
        let parsed: CoreList = serde_json::from_str(CORE_ATEN_JSON).unwrap();
        assert_eq!(parsed.count, 193);
        assert_eq!(core_ops().len(), 193);
        assert_eq!(core_op_names().len(), 193, "op names are unique");
    }

    #[test]
    fn every_core_op_has_a_schema_that_parses() {
        for op in core_ops() {
            let schema = schema_of(&op.name).unwrap_or_else(|| panic!("{} has no schema", op.name));
            assert!(schema_params(schema).is_some(), "{schema}");
        }
        let p = schema_params(schema_of("add.Tensor").unwrap()).unwrap();
        assert_eq!(p.len(), 3);
        assert!(p[2].kwarg_only && p[2].optional && p[2].name == "alpha");
    }

    #[test]
    fn calls_are_checked_against_the_schema() {
        check_call("add.Tensor", 2, &["alpha"]).unwrap();
        let e = check_call("add.Tensor", 2, &["beta"]).unwrap_err();
        assert!(e.contains("`beta`") && e.contains("add.Tensor"), "{e}");
        assert!(check_call("add.Tensor", 3, &[]).unwrap_err().contains("positional"));
        assert!(check_call("add.Tensor", 1, &[]).unwrap_err().contains("`other`"));
        assert!(check_call("add.Tensor", 2, &["other"]).unwrap_err().contains("both"));
        check_call("add.Tensor", 1, &["other"]).unwrap();
    }

    #[test]
    fn lookup() {
        assert!(is_core_op("add.Tensor"));
        assert!(is_core_op("relu"));
        assert!(!is_core_op("relu.default"));
        assert!(!is_core_op("add"));
        assert_eq!(family_of("div.Scalar"), Some("binary"));
        for op in NO_COMPUTE_WORK_OPS {
            assert!(matches!(family_of(op), Some("metadata" | "shape")), "{op}");
        }
    }
}
