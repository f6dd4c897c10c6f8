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
