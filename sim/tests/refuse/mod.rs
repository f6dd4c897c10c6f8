//! Test helper shared by the generation tests: an instruction a target lacks is refused as
//! `NotOnTarget`, naming the instruction and the generation, before any memory is touched.
#![allow(dead_code)]

use std::collections::BTreeMap;
use trnsim::*;

/// Runs `program` (its declarations, plus `op` pushed on `engine`) on its own target, which must
/// refuse `op` as `NotOnTarget { opcode, target: label }`; the message names both. Returns the
/// error for further checks.
pub fn assert_not_on_target(mut program: Program, engine: Engine, op: Op, opcode: &str, label: &str) -> SimError {
    let target = program.target;
    program.push(engine, op);
    let e = Executor::new(target).run(&program, &BTreeMap::new()).unwrap_err();
    assert!(
        matches!(&e.kind, ErrorKind::NotOnTarget { opcode: o, target: t } if *o == opcode && *t == label),
        "{e:?}"
    );
    assert!(
        e.to_string().contains(&format!("{opcode} is not available on {label}")),
        "{e}"
    );
    e
}
