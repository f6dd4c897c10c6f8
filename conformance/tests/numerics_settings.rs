//! The whole committed golden suite under every value of every simulator `Numerics` setting
//! (`trnconf::numerics::every_setting`, one setting changed from the default at a time; the
//! default is the `golden` test itself). Verdicts may change with a setting — that is what the
//! settings are for (docs/numerics.md) — but no case may panic, and every case must get a verdict.
//! Prints each setting's summary (the verdicts it changes) and its time.

use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use trnconf::case::GoldenIndex;
use trnconf::executor::SimExecutor;
use trnconf::expect::Expectations;
use trnconf::runner::{self, CaseResult, Summary};
use trnsim::{ExecConfig, TargetName};

#[test]
fn every_numerics_setting_runs_the_whole_suite_without_panicking() {
    let index = GoldenIndex::load(&trnconf::default_golden_dir()).expect("the committed goldens");
    let expectations = Expectations::load(&trnconf::default_expectations_path()).expect("expectations");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut panicked = Vec::new();
    for (name, numerics) in trnconf::numerics::every_setting().into_iter().skip(1) {
        let start = std::time::Instant::now();
        let config = ExecConfig {
            numerics,
            ..ExecConfig::default()
        };
        let executor = SimExecutor::with_config(TargetName::Trn1, config);
        let next = AtomicUsize::new(0);
        let results: Mutex<Vec<CaseResult>> = Mutex::new(Vec::new());
        let panics: Mutex<Vec<String>> = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(entry) = index.cases.get(i) else { break };
                        let run = std::panic::catch_unwind(AssertUnwindSafe(|| {
                            runner::run_case(&index.dir, entry, &expectations, &executor)
                        }));
                        match run {
                            Ok(r) => results.lock().unwrap().push(r),
                            Err(_) => panics.lock().unwrap().push(entry.id.clone()),
                        }
                    }
                });
            }
        });
        let results = results.into_inner().unwrap();
        let panics = panics.into_inner().unwrap();
        let s = Summary::of(&results);
        eprintln!(
            "{name}: {} cases in {:.1} s: {} passed, {} failed, {} xfailed, {} xpassed, {} skipped, {} errors, {} panicked",
            s.total,
            start.elapsed().as_secs_f64(),
            s.passed,
            s.failed,
            s.xfailed,
            s.xpassed,
            s.skipped,
            s.errors,
            panics.len()
        );
        assert_eq!(results.len() + panics.len(), index.cases.len(), "{name}");
        panicked.extend(panics.into_iter().map(|id| format!("{id} under --numerics {name}")));
    }
    assert!(
        panicked.is_empty(),
        "{} case(s) panicked: {panicked:#?}",
        panicked.len()
    );
}
