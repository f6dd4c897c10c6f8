//! Target 1: arbitrary bytes → `Program::from_json` → if it parses: JSON round trip, then a run
//! on the program's target (and on the other target, which must refuse it cleanly) with small
//! pseudo-random inputs under a small HBM limit, once under every value of every `Numerics` setting
//! (`numerics_variants`), so each setting's code paths see every parsed program.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trnsim::{Executor, Numerics, Program, TargetName};
use trnsim_fuzz::{config, inputs_for, numerics_variants, run};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(p) = Program::from_json(text) else { return };
    let again = Program::from_json(&p.to_json()).expect("a parsed program re-parses from its own JSON");
    assert_eq!(
        format!("{p:?}"),
        format!("{again:?}"),
        "JSON round trip changed the program"
    );
    let seed = data.len() as u64;
    for numerics in numerics_variants() {
        run(&p, config(numerics), seed);
    }
    let other = if p.target == TargetName::Trn1 {
        TargetName::Trn2
    } else {
        TargetName::Trn1
    };
    let inputs = inputs_for(&p, seed).unwrap_or_default();
    assert!(
        Executor::with_config(other, config(Numerics::default()))
            .run(&p, &inputs)
            .is_err()
    );
});
