//! End-to-end checks of the first lowered family (add/sub/mul/div) through the whole runner:
//! fixture golden files → lowering → simulator → comparison. The expected values here play
//! PyTorch's part (fp32 "opmath" then one rounding; integer wraparound), so these tests do not
//! depend on the generated goldens.

use trnconf::case::{GoldenIndex, JsonFloat, Value};
use trnconf::executor::SimExecutor;
use trnconf::expect::{Expectations, Status};
use trnconf::fixture::{CaseBuilder, TempDir, run_on_trn1, write_golden};
use trnconf::runner::{CaseResult, run_cases};
use trnconf::tensor::{Tensor, TorchDType, TorchDType::*};

/// Deterministic values in [-range, range) (an LCG; no RNG dependency).
fn values(n: usize, seed: u64, range: f64, integers: bool) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            let v = (u * 2.0 - 1.0) * range;
            if integers { v.floor() } else { v }
        })
        .collect()
}

/// Rounds to what a tensor of `dtype` stores (values as PyTorch would hold them).
fn stored(dtype: TorchDType, vals: &[f64]) -> Vec<f64> {
    Tensor::from_f64(dtype, &[vals.len()], vals).to_f64_vec()
}

fn bcast_index(out_idx: &[usize], shape: &[usize]) -> usize {
    let lead = out_idx.len() - shape.len();
    let strides = trnconf::tensor::contiguous_strides(shape);
    shape
        .iter()
        .enumerate()
        .map(|(d, &s)| if s == 1 { 0 } else { out_idx[lead + d] * strides[d] })
        .sum()
}

#[derive(Clone, Copy)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

/// PyTorch's result for one element: float results in fp32 then rounded to the dtype; integer
/// results exactly, wrapped to the dtype's width.
fn reference(op: Op, a: f64, b: f64, alpha: f64, out: TorchDType) -> f64 {
    if out.is_float() {
        let (a, b, alpha) = (a as f32, b as f32, alpha as f32);
        let r = match op {
            Op::Add => a + alpha * b,
            Op::Sub => a - alpha * b,
            Op::Mul => a * b,
            Op::Div => a / b,
        };
        r as f64
    } else if out == Bool {
        let r = match op {
            Op::Add => a + alpha * b,
            Op::Mul => a * b,
            _ => unreachable!(),
        };
        (r != 0.0) as i64 as f64
    } else {
        let (a, b, alpha) = (a as i64, b as i64, alpha as i64);
        let r = match op {
            Op::Add => a.wrapping_add(alpha.wrapping_mul(b)),
            Op::Sub => a.wrapping_sub(alpha.wrapping_mul(b)),
            Op::Mul => a.wrapping_mul(b),
            Op::Div => unreachable!(),
        };
        (match out {
            I64 => r,
            I32 => r as i32 as i64,
            I16 => r as i16 as i64,
            I8 => r as i8 as i64,
            U8 => r as u8 as i64,
            _ => unreachable!(),
        }) as f64
    }
}

struct Spec {
    op_name: &'static str,
    op: Op,
    a: (TorchDType, Vec<usize>),
    /// A tensor, or a scalar value.
    b: Result<(TorchDType, Vec<usize>), Value>,
    alpha: Option<Value>,
    out: TorchDType,
    range: f64,
}

fn scalar_f64(v: &Value) -> f64 {
    match v {
        Value::Int(i) => *i as f64,
        Value::Float(f) => f.0,
        Value::Bool(b) => *b as i64 as f64,
        other => panic!("{other:?}"),
    }
}

fn build(spec: &Spec, n: usize) -> CaseBuilder {
    let ints = |d: TorchDType| !d.is_float();
    let (ad, ashape) = &spec.a;
    let a_vals = stored(
        *ad,
        &values(ashape.iter().product(), 2 * n as u64 + 1, spec.range, ints(*ad)),
    );
    let mut c = CaseBuilder::new(spec.op_name, ad.name(), "hand", n).input(*ad, ashape, &a_vals);
    let (b_shape, b_vals): (Vec<usize>, Vec<f64>) = match &spec.b {
        Ok((bd, bshape)) => {
            let mut v = values(bshape.iter().product(), 2 * n as u64 + 2, spec.range, ints(*bd));
            if *bd == Bool {
                v = v.iter().map(|x| (*x > 0.0) as i64 as f64).collect();
            }
            let v = stored(*bd, &v);
            c = c.input(*bd, bshape, &v);
            (bshape.clone(), v)
        }
        Err(s) => {
            c = c.arg(s.clone());
            (vec![], vec![scalar_f64(s)])
        }
    };
    let a_vals: Vec<f64> = if *ad == Bool {
        a_vals.iter().map(|x| (*x != 0.0) as i64 as f64).collect()
    } else {
        a_vals
    };
    let alpha = spec.alpha.as_ref().map_or(1.0, scalar_f64);
    if let Some(a) = &spec.alpha {
        c = c.kwarg("alpha", a.clone());
    }
    // PyTorch casts operands to the result dtype before computing, except a scalar second
    // operand of mul/div, which keeps its value.
    let keeps = matches!(spec.op, Op::Mul | Op::Div) && b_shape.is_empty() && !ashape.is_empty();
    let (a_vals, b_vals) = if spec.out.is_float() {
        (
            stored(spec.out, &a_vals),
            if keeps { b_vals } else { stored(spec.out, &b_vals) },
        )
    } else {
        (a_vals, b_vals)
    };
    let out_shape = trnconf::lower::tile::broadcast_shapes(ashape, &b_shape).expect("broadcastable");
    let numel: usize = out_shape.iter().product();
    let out_vals: Vec<f64> = (0..numel)
        .map(|i| {
            let idx = trnconf::tensor::unravel(i, &out_shape);
            let x = a_vals[bcast_index(&idx, ashape)];
            let y = b_vals[bcast_index(&idx, &b_shape)];
            reference(spec.op, x, y, alpha, spec.out)
        })
        .collect();
    c.output(spec.out, &out_shape, &out_vals)
}

fn run(specs: &[Spec]) -> Vec<CaseResult> {
    let dir = TempDir::new("binary-family");
    let cases: Vec<CaseBuilder> = specs.iter().enumerate().map(|(i, s)| build(s, i)).collect();
    write_golden(dir.path(), &cases);
    let index = GoldenIndex::load(dir.path()).unwrap();
    let entries: Vec<_> = index.cases.iter().collect();
    run_cases(
        &index,
        &entries,
        &Expectations::none(),
        &SimExecutor::new(trnsim::TargetName::Trn1),
        2,
    )
}

fn assert_all_pass(specs: &[Spec]) {
    let results = run(specs);
    let bad: Vec<String> = results
        .iter()
        .filter(|r| r.status != Status::Pass)
        .map(|r| format!("{} [{}]: {}", r.id, r.status, r.message))
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n\n"));
    for r in &results {
        let c = &r.instructions;
        assert!(
            c.vector + c.gpsimd > 0 || r.metrics.iter().all(|m| m.numel == 0),
            "{}: compute on engines",
            r.id
        );
        assert_eq!(c.tensor + c.scalar, 0, "{}", r.id);
    }
}

fn t(d: TorchDType, shape: &[usize]) -> Result<(TorchDType, Vec<usize>), Value> {
    Ok((d, shape.to_vec()))
}

fn spec(
    op_name: &'static str,
    a: (TorchDType, &[usize]),
    b: Result<(TorchDType, Vec<usize>), Value>,
    out: TorchDType,
) -> Spec {
    let op = match op_name.split('.').next().unwrap() {
        "add" => Op::Add,
        "sub" => Op::Sub,
        "mul" => Op::Mul,
        _ => Op::Div,
    };
    Spec {
        op_name,
        op,
        a: (a.0, a.1.to_vec()),
        b,
        alpha: None,
        out,
        range: 100.0,
    }
}

impl Spec {
    fn alpha(mut self, v: Value) -> Spec {
        self.alpha = Some(v);
        self
    }
    fn range(mut self, r: f64) -> Spec {
        self.range = r;
        self
    }
}

#[test]
fn float_dtypes_and_broadcasting() {
    assert_all_pass(&[
        spec("add.Tensor", (F32, &[5, 5]), t(F32, &[5]), F32).alpha(Value::Int(2)),
        spec("add.Tensor", (Bf16, &[129]), t(Bf16, &[129]), Bf16),
        spec("sub.Tensor", (F16, &[2, 1, 4]), t(F16, &[3, 1]), F16),
        spec("sub.Tensor", (F32, &[3, 200, 7]), t(F32, &[200, 1]), F32).alpha(Value::Float(JsonFloat(0.5))),
        spec("mul.Tensor", (Bf16, &[513]), t(Bf16, &[]), Bf16),
        spec("mul.Tensor", (F32, &[2, 9000]), t(F32, &[2, 1]), F32),
        spec("add.Tensor", (F16, &[3, 4]), t(F32, &[]), F16),
        spec("add.Tensor", (I32, &[3, 4]), t(F32, &[]), F32),
        spec("mul.Tensor", (Bf16, &[4, 4]), t(F16, &[4, 4]), F32),
    ]);
}

#[test]
fn sizes_0_1_129_513_1000_and_0d() {
    let mut specs = Vec::new();
    for shape in [
        vec![0],
        vec![1],
        vec![129],
        vec![513],
        vec![1000],
        vec![],
        vec![4, 0, 3],
    ] {
        let s: &'static [usize] = Box::leak(shape.clone().into_boxed_slice());
        specs.push(spec("add.Tensor", (F32, s), t(F32, &shape), F32));
        specs.push(spec("mul.Tensor", (I32, s), t(I32, &shape), I32));
        specs.push(spec("div.Tensor", (Bf16, s), t(Bf16, &shape), Bf16));
    }
    assert_all_pass(&specs);
}

#[test]
fn integers_are_exact_and_wrap() {
    assert_all_pass(&[
        spec("add.Tensor", (I64, &[1000]), t(I64, &[]), I64).alpha(Value::Int(3)),
        spec("sub.Tensor", (I32, &[7, 9]), t(I32, &[9]), I32),
        spec("mul.Tensor", (I32, &[513]), t(I32, &[513]), I32).range(2e9),
        spec("add.Tensor", (U8, &[64]), t(U8, &[64]), U8).range(256.0),
        spec("mul.Tensor", (I8, &[64]), t(I8, &[64]), I8).range(128.0),
        spec("sub.Tensor", (I16, &[64]), t(I16, &[64]), I16).range(32768.0),
        spec("add.Tensor", (U8, &[8]), t(I8, &[8]), I16).range(100.0),
        spec("mul.Scalar", (I64, &[10]), Err(Value::Int(-7)), I64),
        spec("add.Scalar", (I32, &[10]), Err(Value::Int(5)), I32).alpha(Value::Int(-2)),
        spec("add.Scalar", (Bool, &[6]), Err(Value::Int(3)), I64),
    ]);
}

#[test]
fn bool_results() {
    assert_all_pass(&[
        spec("add.Tensor", (Bool, &[10]), t(Bool, &[10]), Bool),
        spec("mul.Tensor", (Bool, &[2, 5]), t(Bool, &[5]), Bool),
        spec("add.Scalar", (Bool, &[6]), Err(Value::Bool(true)), Bool),
    ]);
}

#[test]
fn division() {
    assert_all_pass(&[
        spec("div.Tensor", (F32, &[1000]), t(F32, &[1000]), F32),
        spec("div.Tensor", (I64, &[4, 5]), t(I64, &[5]), F32).range(50.0),
        spec("div.Tensor", (Bool, &[8]), t(Bool, &[8]), F32),
        spec("div.Scalar", (F32, &[300]), Err(Value::Float(JsonFloat(3.0))), F32),
        spec("div.Scalar", (I32, &[300]), Err(Value::Int(7)), F32),
        spec("div.Scalar", (F16, &[33]), Err(Value::Float(JsonFloat(-0.1))), F16),
        spec("div.Scalar", (F32, &[8]), Err(Value::Int(0)), F32),
    ]);
}

#[test]
fn division_special_values() {
    let a = [
        1.0,
        -1.0,
        0.0,
        0.0,
        f64::INFINITY,
        f64::INFINITY,
        f64::NAN,
        5.0,
        -0.0,
        3.0,
        1e-30,
        1e30,
    ];
    let b = [
        0.0,
        0.0,
        0.0,
        -0.0,
        2.0,
        f64::INFINITY,
        1.0,
        f64::NEG_INFINITY,
        4.0,
        7.0,
        3e-9,
        7e-9,
    ];
    let want: Vec<f64> = a.iter().zip(&b).map(|(x, y)| (*x as f32 / *y as f32) as f64).collect();
    let c = CaseBuilder::new("div.Tensor", "f32", "hand", 0)
        .input(F32, &[12], &a)
        .input(F32, &[12], &b)
        .output(F32, &[12], &want);
    let r = run_on_trn1("div-special", c);
    assert_eq!(r.status, Status::Pass, "{}", r.message);
}

#[test]
fn int64_values_beyond_int32_are_flagged() {
    let c = CaseBuilder::new("add.Tensor", "i64", "hand", 0)
        .input(I64, &[2], &[1.0, 5e9])
        .input(I64, &[2], &[1.0, 1.0])
        .output(I64, &[2], &[2.0, 5e9 + 1.0]);
    let r = run_on_trn1("i64-overflow", c);
    assert_eq!(r.status, Status::Error);
    assert!(r.message.contains("does not fit in int32"), "{}", r.message);
}

#[test]
fn a_wrong_golden_fails_with_pytorch_wording() {
    let c = CaseBuilder::new("mul.Tensor", "f32", "hand", 0)
        .input(F32, &[2, 2], &[1.0, 2.0, 3.0, 4.0])
        .input(F32, &[2, 2], &[1.0, 1.0, 1.0, 1.0])
        .output(F32, &[2, 2], &[1.0, 2.0, 3.0, 4.5]);
    let r = run_on_trn1("wrong-golden", c);
    assert_eq!(r.status, Status::Fail);
    assert!(
        r.message.contains("Mismatched elements: 1 / 4 (25.0%)"),
        "{}",
        r.message
    );
    assert!(
        r.message.contains("Greatest absolute difference: 0.5 at index (1, 1)"),
        "{}",
        r.message
    );
    assert_eq!(r.metrics[0].mismatches, 1);
}
