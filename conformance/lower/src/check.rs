//! The runner's guard against host-computed results: a compute op's program must run compute-engine
//! instructions. Shared by the golden harness and the PyTorch device (`lower_op`).

use crate::call::{OpCall, TensorMeta, Value};
use crate::ops;
use std::collections::BTreeMap;
use trnsim::{HbmRole, Program};

/// A compute op must make the engines compute: a program of only DMAs would mean the result was
/// produced some other way. Exceptions ([`ops::NO_COMPUTE_WORK_OPS`]): metadata queries, which
/// run nothing, and shape ops, which must still move their data with DMA; and programs whose
/// outputs are all empty (there is nothing to compute).
pub fn check_compute_work(
    op: &str,
    call: &OpCall,
    tensor_meta: &BTreeMap<String, TensorMeta>,
    program: &Program,
) -> Result<(), String> {
    let outputs_empty = program
        .hbm
        .iter()
        .filter(|d| d.role == HbmRole::Output)
        .all(|d| d.shape.iter().product::<usize>() == 0);
    if ops::NO_COMPUTE_WORK_OPS.contains(&op) {
        let moves_data = program.instructions.iter().any(|i| i.engine == trnsim::Engine::Dma);
        if ops::family_of(op) == Some("shape") && !outputs_empty && !moves_data {
            return Err(format!(
                "no data movement: the program for `{}` runs no DMA instruction",
                op
            ));
        }
        return Ok(());
    }
    if outputs_empty || nothing_to_compute(op, call, tensor_meta) {
        return Ok(());
    }
    if program.instructions.iter().any(|i| i.engine.is_compute()) {
        Ok(())
    } else {
        Err(format!(
            "no compute-engine work: the program for `{}` runs no Tensor/Vector/Scalar/GpSimd instruction",
            op
        ))
    }
}

/// A call whose result is one of its inputs, moved unchanged (DMA only), decided from the call
/// and input metadata alone — never from what the program does — so a lowering cannot claim it
/// for a call that has work to do:
/// * an `index_put` whose index tensors are all empty, or whose values have no elements (they
///   broadcast only to an empty selection), writes no element;
/// * a `scatter*` with an empty index writes no element.
fn nothing_to_compute(op: &str, call: &OpCall, tensor_meta: &BTreeMap<String, TensorMeta>) -> bool {
    let empty = |t: &String| {
        tensor_meta
            .get(t)
            .is_some_and(|m| m.shape.iter().product::<usize>() == 0)
    };
    match op {
        "index_put" => {
            if let Some(Value::Tensor(v)) = call.arg(2, "values")
                && empty(v)
            {
                return true;
            }
            let Some(Value::Tensors(indices)) = call.arg(1, "indices") else {
                return false;
            };
            indices.iter().flatten().count() > 0 && indices.iter().flatten().all(empty)
        }
        "scatter.src" | "scatter.value" | "scatter_add" | "scatter_reduce.two" => {
            matches!(call.arg(2, "index"), Some(Value::Tensor(i)) if empty(i))
        }
        _ => false,
    }
}
