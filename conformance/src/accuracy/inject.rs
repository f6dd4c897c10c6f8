//! TEST ONLY: a backend wrapper that moves every device output element with an algorithm bound
//! to `factor` times that bound away from the oracle, so that a test (and the generalisation
//! workflow, `TRNCONF_TEST_INJECT_BOUND_ERROR=4 trnconf run …`) can show that the accuracy rule
//! rejects an error of that size: a device that is 4× less accurate than the documented bound
//! must fail, whatever the CPU-relative part of the rule allows (docs/numerics.md, (f)).
//!
//! Never a conformance result: the backend's name says `inject`, every case's message starts
//! with the note, and nothing but tests and that workflow constructs it.

use super::{Bound, Oracle, format_of, ulp_of};
use crate::backend::{Backend, Produced, Unrun};
use crate::case::Case;
use crate::tensor::Tensor;
use trnsim::TargetName;

/// Wraps `inner`: after it runs a case, each float output whose oracle carries a `dot`, `sum`,
/// `arithmetic` or `transcendental` bound has every element with a finite oracle `o` replaced by
/// `o ± factor · bound(i) · ulp(o)` (the sign of the device's own error; `+` when it is exact),
/// rounded to the output dtype and capped at its largest finite value (an edge-value case's bound
/// can exceed the range; the injection never turns a finite result into an overflow). Outputs
/// with a `none` bound, `exact` oracles or no oracle are left alone.
pub struct InjectBoundError<B> {
    pub inner: B,
    pub factor: f64,
}

/// How many elements of `t` were moved.
fn inject(t: &mut Tensor, values: &[f64], bound: &Bound, factor: f64) -> usize {
    if matches!(bound, Bound::None) || values.len() != t.num_scalars() {
        return 0;
    }
    let per_element = if t.dtype.is_complex() { 2 } else { 1 };
    let mut vals = t.to_f64_vec();
    let mut moved = 0;
    for (i, (v, &o)) in vals.iter_mut().zip(values).enumerate() {
        if !o.is_finite() {
            continue;
        }
        let ulp = ulp_of(o, t.dtype);
        let delta = factor * bound.ulps(i / per_element, o, t.dtype) * ulp;
        let (_, _, max) = format_of(t.dtype);
        *v = (if *v < o { o - delta } else { o + delta }).clamp(-max, max);
        moved += 1;
    }
    *t = Tensor::from_f64(t.dtype, &t.shape, &vals);
    moved
}

impl<B: Backend> Backend for InjectBoundError<B> {
    fn backend_name(&self) -> String {
        format!("{}+inject{}x", self.inner.backend_name(), self.factor)
    }

    fn backend_target(&self) -> TargetName {
        self.inner.backend_target()
    }

    fn run(&self, case: &Case) -> Result<Produced, Unrun> {
        let mut p = self.inner.run(case)?;
        let mut moved = 0;
        for (name, oracle) in &case.oracles {
            if let (Oracle::Values { values, bound }, Some(t)) = (oracle, p.tensors.get_mut(name)) {
                moved += inject(t, values, bound, self.factor);
            }
        }
        let note = format!(
            "TEST ONLY: {moved} output elements moved to {}x their accuracy bound",
            self.factor
        );
        p.note = if p.note.is_empty() {
            note
        } else {
            format!("{note}; {}", p.note)
        };
        Ok(p)
    }
}
