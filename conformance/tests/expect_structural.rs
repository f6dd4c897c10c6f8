//! Expected failures are recognised by what a case is, never by its id.
//!
//! Case ids (`add.Scalar::i64::stress_0`) number the samples of an op × dtype × source, so a
//! corpus generated with another seed or other OpInfo samples (`golden/generate.py --seed N`)
//! gives the same kinds of case other ids. These tests rename every committed case — its sample
//! number permuted and shifted, as a fresh corpus would renumber it — run it under both ids with
//! the committed expectations, and require the same verdict and the same covering entry for
//! every case. Any dependence of a verdict on the id (an id-keyed entry, a seed or a property
//! derived from the id) fails them.

use rayon::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use trnconf::case::{Case, GoldenIndex, IndexEntry};
use trnconf::executor::SimExecutor;
use trnconf::expect::{CaseFacts, Expectations, Property, Status};
use trnconf::runner;

fn committed() -> (GoldenIndex, Expectations) {
    let index = GoldenIndex::load(&trnconf::default_golden_dir()).expect("committed golden index");
    let ex = Expectations::load(&trnconf::default_expectations_path()).expect("committed expectations");
    (index, ex)
}

/// New ids for every case: within each `op::dtype::source` group the sample numbers are
/// reversed and shifted by 1000 (so no id keeps its number, and the order changes).
fn renamed(cases: &[IndexEntry]) -> HashMap<String, String> {
    let mut groups: BTreeMap<String, Vec<(u64, &str)>> = BTreeMap::new();
    for c in cases {
        let (prefix, n) =
            c.id.rsplit_once('_')
                .and_then(|(p, n)| Some((p, n.parse::<u64>().ok()?)))
                .unwrap_or_else(|| panic!("case id `{}` does not end in _N", c.id));
        groups.entry(prefix.to_string()).or_default().push((n, &c.id));
    }
    let mut out = HashMap::new();
    for (prefix, mut members) in groups {
        members.sort();
        let count = members.len() as u64;
        for (rank, (_, id)) in members.iter().enumerate() {
            out.insert(id.to_string(), format!("{prefix}_{}", 1000 + count - 1 - rank as u64));
        }
    }
    out
}

#[test]
fn renaming_every_case_keeps_every_verdict() {
    let (index, ex) = committed();
    let names = renamed(&index.cases);
    assert_eq!(names.len(), index.cases.len());
    let new_ids: BTreeSet<&String> = names.values().collect();
    assert_eq!(new_ids.len(), names.len(), "the new ids are distinct");
    assert!(names.iter().all(|(old, new)| old != new), "every id changes");
    let executor = SimExecutor::new(trnsim::TargetName::Trn1);
    let results: Vec<_> = index
        .cases
        .par_iter()
        .map(|entry| {
            let by_file = runner::run_case(&index.dir, entry, &ex, &executor);
            let mut case = Case::load_entry(&index.dir, entry).expect("committed case loads");
            case.id = names[&entry.id].clone();
            let by_new_id = runner::run_loaded_case(&case, &ex, &executor);
            assert_eq!(by_new_id.id, names[&entry.id]);
            (by_file, by_new_id)
        })
        .collect();
    let mut differ = Vec::new();
    let mut counts: BTreeMap<Status, usize> = BTreeMap::new();
    for (a, b) in &results {
        *counts.entry(a.status).or_default() += 1;
        if (a.status, &a.expectation) != (b.status, &b.expectation) {
            differ.push(format!(
                "{} [{} {:?}] renamed {} [{} {:?}]",
                a.id, a.status, a.expectation, b.id, b.status, b.expectation
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "verdicts that depend on the id:\n{}",
        differ.join("\n")
    );
    // The expectations are exercised: the committed corpus has expected failures, and every
    // entry covers at least one case (a stale entry is found by `trnconf run` too).
    assert!(counts.get(&Status::XFail).copied().unwrap_or(0) > 0, "{counts:?}");
    let unused: Vec<usize> = ex
        .unused(
            trnsim::TargetName::Trn1,
            results.iter().filter_map(|(a, _)| a.expectation.as_deref()),
        )
        .iter()
        .map(|e| e.entry)
        .collect();
    assert!(
        unused.is_empty(),
        "expectations entries covering no committed case: {unused:?}"
    );
    // The suite's own verdict: nothing fails, errors or passes against its expectation.
    let bad: Vec<String> = results
        .iter()
        .filter(|(a, _)| !a.status.is_ok())
        .map(|(a, _)| format!("{} [{}] {}", a.id, a.status, a.message.lines().next().unwrap_or("")))
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Each property, as computed from committed cases whose call the generator's table fixes.
#[test]
fn properties_of_committed_cases() {
    let (index, _) = committed();
    let facts = |id: &str| {
        let entry = index
            .cases
            .iter()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("no case `{id}`"));
        CaseFacts::of(&Case::load_entry(&index.dir, entry).unwrap())
    };
    let has = |id: &str, p: &str| facts(id).properties.contains(&Property::parse(p).unwrap());
    // An integer argument (scalar_tensor's fill 2^40) and int64 edge-value inputs.
    assert!(has("scalar_tensor::i64::hand_1", "int64-outside-int32"));
    assert!(has("add.Tensor::i64::stress_1", "int64-outside-int32"));
    assert!(!has("add.Tensor::i64::hand_0", "int64-outside-int32"));
    // sum(x, [0, 2], True): dim and keepdim given, dtype not.
    let sum = facts("sum.dim_IntList::f32::hand_0");
    assert!(has("sum.dim_IntList::f32::hand_0", "arg:dim"));
    assert!(has("sum.dim_IntList::f32::hand_0", "arg:keepdim"));
    assert!(!has("sum.dim_IntList::f32::hand_0", "arg:dtype"));
    assert_eq!((sum.op.as_str(), sum.dtype.as_str()), ("sum.dim_IntList", "f32"));
    assert_eq!(sum.source.as_deref(), Some("hand"));
    // Every property holds for some committed case and not for others.
    let all: Vec<CaseFacts> = index
        .cases
        .iter()
        .map(|e| CaseFacts::of(&Case::load_entry(&index.dir, e).unwrap()))
        .collect();
    for name in trnconf::expect::PROPERTY_NAMES {
        let p = Property::parse(name).unwrap();
        if p == Property::NativeInt64 {
            // A property of the run (`--native-int64`), never of a call.
            assert!(all.iter().all(|f| !f.properties.contains(&p)), "{name}");
            assert!(all[0].clone().native_int64(true).properties.contains(&p), "{name}");
            continue;
        }
        let n = all.iter().filter(|f| f.properties.contains(&p)).count();
        assert!(n > 0 && n < all.len(), "{name}: {n} of {}", all.len());
    }
}
