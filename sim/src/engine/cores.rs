//! Instructions between the two physical cores of a logical core (LNC=2, NeuronCore-v3+).
//! Their ordering effect is the scheduler's ([`crate::deps::BarrierPairs`], docs/timeline.md,
//! "Two cores"); here only the operand checks and the cost.

use super::Ctx;
use crate::error::{AtOperand, ErrorKind, OpResult};
use crate::mem::MemSpace;
use crate::program::CoreBarrier;

/// `core_barrier`: `data` must name a declared HBM tensor (the shared tensor both cores wait
/// on [NKI 2.32: "must be data in shared HBM"]); no byte of it is touched. Cost: one semaphore
/// round trip, the target's cross-engine semaphore latency (`Target::dma_fixed_ns`, the only
/// published figure for a semaphore hand-off; docs/timeline.md).
pub fn core_barrier(ctx: &mut Ctx, i: &CoreBarrier) -> OpResult<()> {
    match &i.data.mem {
        MemSpace::Hbm(name) if ctx.mem.hbm_tensor(name).is_some() => {}
        MemSpace::Hbm(name) => {
            return Err(ErrorKind::Invalid(format!("no HBM tensor `{name}` is declared"))).at("data");
        }
        m => {
            return Err(ErrorKind::Invalid(format!(
                "core_barrier synchronises on a shared HBM tensor, not {}",
                m.name()
            )))
            .at("data");
        }
    }
    ctx.stats.est_ns.add(ctx.engine, ctx.target.dma_fixed_ns);
    Ok(())
}
