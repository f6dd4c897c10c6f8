//! The lowering, as the harness uses it: the `trnlower` crate (conformance/lower), re-exported
//! whole, plus [`lower`], which lowers a golden case from its metadata.

pub use trnlower::*;

use crate::case::Case;
use trnsim::TargetName;

/// Lowers a golden case for `target`: its op, call and tensor metadata only — never its values,
/// non-tensor outputs or data-dependent output shapes ([`trnlower::LowerInput::new`]).
pub fn lower(case: &Case, target: TargetName) -> Result<Lowered, LowerError> {
    lower_call(&case.op, &case.call, &case.tensor_meta, &case.outputs, target)
}

/// [`lower`] with explicit [`LowerOptions`] (`--native-int64`).
pub fn lower_with_options(case: &Case, target: TargetName, opts: &LowerOptions) -> Result<Lowered, LowerError> {
    lower_request_with_options(&input_of_case(case).request(), target, opts)
}

/// The lowering input of a golden case, with everything golden removed.
pub fn input_of_case(case: &Case) -> LowerInput {
    LowerInput::new(&case.op, &case.call, &case.tensor_meta, &case.outputs)
}
