//! Index ranges and empty indices of the indexing lowerings, end to end (fixture golden →
//! lowering → simulator → comparison). The expected outputs are PyTorch's, worked out by hand:
//! * `gather`, `index_select`, `embedding` and `scatter*` accept only `0..size`, like PyTorch
//!   (which raises IndexError/RuntimeError); on the device the out-of-range row makes the
//!   indirect DMA fail, so the case is an error naming the index, never a wrapped row;
//! * advanced indexing (`index.Tensor`, `index_put`) wraps `-size..0`, as PyTorch does;
//! * an empty index of any dtype, an all-False mask with no values, write nothing.

use trnconf::case::Value;
use trnconf::expect::Status;
use trnconf::fixture::{CaseBuilder, run_on_trn1};
use trnconf::runner::CaseResult;
use trnconf::tensor::{Tensor, TorchDType::*};

fn run(c: CaseBuilder) -> CaseResult {
    run_on_trn1("indexing-bounds", c)
}

fn rows(n: usize, d: usize) -> Vec<f64> {
    (0..n * d).map(|i| i as f64).collect()
}

/// `embedding(weight[5, 3], indices)`, its expected output the rows PyTorch would pick.
fn embedding(indices: &[f64]) -> CaseBuilder {
    let picked: Vec<f64> = indices
        .iter()
        .flat_map(|&i| {
            let r = i.rem_euclid(5.0) as usize;
            (0..3).map(move |j| (r * 3 + j) as f64)
        })
        .collect();
    CaseBuilder::new("embedding", "f32", "hand", 0)
        .input(F32, &[5, 3], &rows(5, 3))
        .input(I64, &[indices.len()], indices)
        .output(F32, &[indices.len(), 3], &picked)
}

#[test]
fn embedding_in_range_passes() {
    let r = run(embedding(&[4.0, 0.0, 2.0]));
    assert_eq!(r.status, Status::Pass, "{}", r.message);
}

#[test]
fn embedding_negative_index_is_an_error_not_the_last_row() {
    // PyTorch: IndexError "index out of range in self". The golden here holds the wrapped row,
    // which a device that wraps would match: it must not.
    let r = run(embedding(&[1.0, -1.0]));
    assert_eq!(r.status, Status::Error, "{}", r.message);
    assert!(r.message.contains("outside the tensor"), "{}", r.message);
}

#[test]
fn embedding_index_past_the_end_is_an_error() {
    let r = run(embedding(&[5.0]));
    assert_eq!(r.status, Status::Error, "{}", r.message);
}

#[test]
fn gather_inner_index_past_its_dim_is_an_error_not_the_next_row() {
    // x[3, 4] gathered along dim 1 with index 4: flat offset 4 is x[1, 0], inside the tensor.
    let c = CaseBuilder::new("gather", "f32", "hand", 0)
        .input(F32, &[3, 4], &rows(3, 4))
        .arg(Value::Int(1))
        .input(I64, &[1, 1], &[4.0])
        .output(F32, &[1, 1], &[4.0]);
    let r = run(c);
    assert_eq!(r.status, Status::Error, "{}", r.message);
    let c = CaseBuilder::new("gather", "f32", "hand", 1)
        .input(F32, &[3, 4], &rows(3, 4))
        .arg(Value::Int(1))
        .input(I64, &[2, 2], &[3.0, 0.0, 1.0, 2.0])
        .output(F32, &[2, 2], &[3.0, 0.0, 5.0, 6.0]);
    let r = run(c);
    assert_eq!(r.status, Status::Pass, "{}", r.message);
}

#[test]
fn scatter_negative_index_is_an_error() {
    let c = CaseBuilder::new("scatter.src", "f32", "hand", 0)
        .input(F32, &[2, 3], &rows(2, 3))
        .arg(Value::Int(1))
        .input(I64, &[1, 1], &[-1.0])
        .input(F32, &[1, 1], &[9.0])
        .output(F32, &[2, 3], &[0.0, 1.0, 9.0, 3.0, 4.0, 5.0]);
    let r = run(c);
    assert_eq!(r.status, Status::Error, "{}", r.message);
}

#[test]
fn advanced_indexing_wraps_negative_indices() {
    let c = CaseBuilder::new("index.Tensor", "f32", "hand", 0)
        .input(F32, &[3, 4], &rows(3, 4))
        .arg(Value::Tensors(vec![Some("idx".into())]))
        .output(F32, &[2, 4], &[8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0]);
    let mut c = c;
    c.tensors
        .insert("idx".into(), Tensor::from_f64(I64, &[2], &[-1.0, -3.0]));
    let r = run(c);
    assert_eq!(r.status, Status::Pass, "{}", r.message);
    // -4 is out of range for a dim of 3 (PyTorch: IndexError).
    let mut c = CaseBuilder::new("index.Tensor", "f32", "hand", 1)
        .input(F32, &[3, 4], &rows(3, 4))
        .arg(Value::Tensors(vec![Some("idx".into())]))
        .output(F32, &[1, 4], &[4.0, 5.0, 6.0, 7.0]);
    c.tensors.insert("idx".into(), Tensor::from_f64(I64, &[1], &[-4.0]));
    let r = run(c);
    assert_eq!(r.status, Status::Error, "{}", r.message);
}

#[test]
fn gather_with_an_empty_uint8_index_is_lowered() {
    // PyTorch checks the index dtype only when the index has elements.
    for (n, dt) in [U8, I16, Bool].into_iter().enumerate() {
        let c = CaseBuilder::new("gather", "f32", "hand", n)
            .input(F32, &[3, 4], &rows(3, 4))
            .arg(Value::Int(0))
            .input(dt, &[0, 4], &[])
            .output(F32, &[0, 4], &[]);
        let r = run(c);
        assert_eq!(r.status, Status::Pass, "{dt:?}: {}", r.message);
    }
}

#[test]
fn scatter_with_an_empty_uint8_index_returns_self() {
    let c = CaseBuilder::new("scatter_add", "f32", "hand", 0)
        .input(F32, &[2, 3], &rows(2, 3))
        .arg(Value::Int(0))
        .input(U8, &[0, 3], &[])
        .input(F32, &[0, 3], &[])
        .output(F32, &[2, 3], &rows(2, 3));
    let r = run(c);
    assert_eq!(r.status, Status::Pass, "{}", r.message);
}

#[test]
fn index_put_all_false_mask_on_integer_and_bool_writes_nothing() {
    for (n, (dt, accumulate)) in [(I32, true), (I64, true), (Bool, true), (I64, false)]
        .into_iter()
        .enumerate()
    {
        let x: Vec<f64> = if dt == Bool {
            vec![1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
        } else {
            vec![3.0, -2.0, 7.0, 0.0, 5.0, 1.0]
        };
        let mut c = CaseBuilder::new("index_put", dt.name(), "hand", n)
            .input(dt, &[3, 2], &x)
            .arg(Value::Tensors(vec![Some("mask".into())]))
            .input(dt, &[0, 2], &[])
            .arg(Value::Bool(accumulate))
            .output(dt, &[3, 2], &x);
        c.tensors
            .insert("mask".into(), Tensor::from_f64(Bool, &[3], &[0.0, 0.0, 0.0]));
        let r = run(c);
        assert_eq!(r.status, Status::Pass, "{dt:?} accumulate={accumulate}: {}", r.message);
    }
}
