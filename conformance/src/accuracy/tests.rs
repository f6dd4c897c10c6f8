//! Each bound of the accuracy rule is exercised by an adversarial case that a real fp32
//! algorithm produces, reaching at least a quarter of the bound (and passing), and by the same
//! case with its error moved to four times the bound (failing).

use super::*;
use crate::compare::{compare_tensors, default_tolerance, judge_accuracy};
use TorchDType::*;

fn f32s(vals: &[f64]) -> Tensor {
    Tensor::from_f64(F32, &[vals.len()], vals)
}

/// The oracle rounded to f32: what a correctly rounded CPU returns.
fn rounded(oracle: &[f64]) -> Tensor {
    f32s(oracle)
}

fn values(oracle: &[f64], bound: Bound) -> Oracle {
    Oracle::Values {
        values: oracle.to_vec(),
        bound,
    }
}

/// `x` moved away from `o` by `ulps` ulps of f32 at `o`, in fp32.
fn off_by(o: f64, ulps: f64) -> f64 {
    o + ulps * ulp_of(o, F32)
}

#[test]
fn ulps_per_dtype() {
    assert_eq!(ulp_of(1.0, F32), 2f64.powi(-23));
    assert_eq!(ulp_of(1.5, Bf16), 2f64.powi(-7));
    assert_eq!(ulp_of(2.0, F16), 2f64.powi(-9));
    assert_eq!(ulp_of(0.0, F32), 2f64.powi(-149), "subnormal spacing");
    assert_eq!(ulp_of(1e-40, F32), 2f64.powi(-149));
    assert_eq!(ulp_of(1e39, F32), 2f64.powi(104), "beyond max: the top binade");
    assert_eq!(
        error_ulps(f64::INFINITY, 3.5e38, F32),
        Some(0.0),
        "the oracle overflows f32 too"
    );
    assert_eq!(error_ulps(f32::MAX as f64, 3.5e38, F32), None);
    assert_eq!(error_ulps(f64::NAN, 1.0, F32), None);
    assert_eq!(error_ulps(f64::NAN, f64::NAN, F32), Some(0.0));
}

/// `1 + (K−1)·0.75 ulp` summed left to right in fp32: every addition rounds up by a quarter of
/// an ulp, so the errors add up linearly (the worst case the probabilistic bound does not
/// cover grows as K, the bound as √K).
fn adversarial_sum(k: usize, scale: f64) -> (Vec<f64>, f64, f64) {
    let u = 2f64.powi(-23);
    let terms: Vec<f64> = std::iter::once(1.0)
        .chain(std::iter::repeat_n(0.75 * u, k - 1))
        .map(|x| x * scale)
        .collect();
    let fp32 = terms.iter().fold(0f32, |s, &x| s + x as f32) as f64;
    let exact: f64 = terms.iter().sum();
    (terms, fp32, exact)
}

fn check_accumulation_bound(make: impl Fn(u64, Vec<f64>) -> Bound) {
    let k = 64;
    let (terms, fp32, exact) = adversarial_sum(k, 1.0);
    let sum_abs: f64 = terms.iter().map(|x| x.abs()).sum();
    let bound = make(k as u64, vec![sum_abs]);
    let allowed = bound.ulps(0, exact, F32);
    let oracle = values(&[exact], make(k as u64, vec![sum_abs]));
    let m = measure(&f32s(&[fp32]), &rounded(&[exact]), &oracle).unwrap();
    assert!(m.device_max_ulp >= allowed / 4.0, "{} < {allowed}/4", m.device_max_ulp);
    assert!(
        m.device_max_ulp > CPU_ERROR_FACTOR * m.cpu_max_ulp,
        "the bound, not the CPU, admits it"
    );
    assert!(m.within, "{}", m.summary());
    let far = off_by(exact, 4.0 * allowed);
    let m = measure(&f32s(&[far]), &rounded(&[exact]), &oracle).unwrap();
    assert!(!m.within, "4x the bound must fail: {}", m.summary());
}

#[test]
fn dot_bound_adversarial_and_4x() {
    // a·b with b = 1: the products are exact, the accumulation is the adversarial sum.
    check_accumulation_bound(|terms, scale| Bound::Dot { terms, scale });
}

#[test]
fn sum_bound_adversarial_and_4x() {
    check_accumulation_bound(|terms, scale| Bound::Sum { terms, scale });
}

#[test]
fn arithmetic_budget_adversarial_and_4x() {
    // x / y computed as x · (1/y) in fp32: up to ~1.5 ulp from the exact quotient.
    let mut worst = (0.0, 1.0, 1.0);
    for i in 0..300 {
        for j in 0..300 {
            let x = 1.0 + i as f32 / 300.0;
            let y = 1.0 + j as f32 / 300.0;
            let q = (x * (1.0 / y)) as f64;
            let e = error_ulps(q, x as f64 / y as f64, F32).unwrap();
            if e > worst.0 {
                worst = (e, x as f64, y as f64);
            }
        }
    }
    let (_, x, y) = worst;
    let exact = x / y;
    let dev = ((x as f32) * (1.0 / y as f32)) as f64;
    let oracle = values(&[exact], Bound::Arithmetic);
    let m = measure(&f32s(&[dev]), &rounded(&[exact]), &oracle).unwrap();
    assert!(m.device_max_ulp >= ARITHMETIC_ULP_BUDGET / 4.0, "{}", m.summary());
    assert!(m.within, "{}", m.summary());
    let far = off_by(exact, 4.0 * ARITHMETIC_ULP_BUDGET);
    assert!(!measure(&f32s(&[far]), &rounded(&[exact]), &oracle).unwrap().within);
}

#[test]
fn transcendental_budget_adversarial_and_4x() {
    // sigmoid as 1 / (1 + exp(−x)) in fp32 from a correctly rounded exp: three roundings.
    let xs: Vec<f64> = (0..4001).map(|i| -20.0 + i as f64 / 100.0).collect();
    let exact: Vec<f64> = xs.iter().map(|&x| 1.0 / (1.0 + (-x).exp())).collect();
    let dev: Vec<f64> = xs
        .iter()
        .map(|&x| {
            let e = (-x).exp() as f32;
            (1.0f32 / (1.0f32 + e)) as f64
        })
        .collect();
    let oracle = values(&exact, Bound::Transcendental);
    let m = measure(&f32s(&dev), &rounded(&exact), &oracle).unwrap();
    assert!(m.device_max_ulp >= TRANSCENDENTAL_ULP_BUDGET / 4.0, "{}", m.summary());
    assert!(m.within, "{}", m.summary());
    let far: Vec<f64> = exact
        .iter()
        .map(|&o| off_by(o, 4.0 * TRANSCENDENTAL_ULP_BUDGET))
        .collect();
    assert!(!measure(&f32s(&far), &rounded(&exact), &oracle).unwrap().within);
}

#[test]
fn cpu_relative_part_adversarial_and_4x() {
    // No algorithm bound: the device may be as inaccurate as k times the CPU, no more.
    let exact = [1.0, 3.0];
    let cpu = f32s(&[off_by(exact[0], 3.0), exact[1]]); // a CPU 3 ulps off
    let oracle = values(&exact, Bound::None);
    let cpu_err = measure(&cpu, &cpu, &oracle).unwrap().cpu_max_ulp;
    let dev = f32s(&[off_by(exact[0], CPU_ERROR_FACTOR * cpu_err), exact[1]]);
    let m = measure(&dev, &cpu, &oracle).unwrap();
    assert!(
        m.device_max_ulp >= CPU_ERROR_FACTOR * cpu_err / 4.0 && m.within,
        "{}",
        m.summary()
    );
    let far = f32s(&[off_by(exact[0], 4.0 * CPU_ERROR_FACTOR * cpu_err + 1.0), exact[1]]);
    assert!(!measure(&far, &cpu, &oracle).unwrap().within);
}

#[test]
fn nan_and_inf_disagreement_fails() {
    let exact = [1.0, 2.0];
    let oracle = values(&exact, Bound::Transcendental);
    let m = measure(&f32s(&[1.0, f64::NAN]), &rounded(&exact), &oracle).unwrap();
    assert_eq!(m.nonfinite_mismatches, 1);
    assert!(!m.within);
    let m = measure(&f32s(&[1.0, f64::INFINITY]), &rounded(&exact), &oracle).unwrap();
    assert!(!m.within);
}

/// The bug class the rule exists to catch: an f32 log_softmax whose row sum Σexp(x) is rounded
/// to bf16 before the log. Errors of thousands of ulps: not `assert_close`, and not accurate.
#[test]
fn bf16_row_sum_before_log_fails() {
    let x: Vec<f64> = (0..64)
        .map(|i| -(i as f64) * 0.37 - if i > 0 { 9.0 } else { 0.0 })
        .collect();
    let sum: f64 = x.iter().map(|v| v.exp()).sum();
    let exact: Vec<f64> = x.iter().map(|v| v - sum.ln()).collect();
    let bf16_sum = half::bf16::from_f64(sum).to_f64();
    let buggy: Vec<f64> = x.iter().map(|v| (*v as f32 - (bf16_sum as f32).ln()) as f64).collect();
    let cpu = rounded(&exact);
    let got = f32s(&buggy);
    let mut m = compare_tensors("output.0", &got, &cpu, default_tolerance(F32));
    assert!(!m.passed, "not assert_close to the CPU");
    judge_accuracy(&mut m, &got, &cpu, &values(&exact, Bound::None));
    let om = m.oracle.as_ref().unwrap();
    assert!(om.device_max_ulp > 1000.0, "{}", om.summary());
    assert!(!m.passed && !m.accurate, "{}", m.message);
}

/// An accumulation-order difference: the adversarial sum at magnitude 2^10 is not assert_close
/// to the correctly rounded CPU result (16 ulps > rtol 1.3e-6), but is within the dot bound:
/// the output passes with status `accurate`, and says so.
#[test]
fn accumulation_order_passes_as_accurate() {
    let (terms, fp32, exact) = adversarial_sum(64, 1024.0);
    let sum_abs: f64 = terms.iter().map(|x| x.abs()).sum();
    let cpu = rounded(&[exact]);
    let got = f32s(&[fp32]);
    let mut m = compare_tensors("output.0", &got, &cpu, default_tolerance(F32));
    assert!(!m.passed);
    let oracle = values(
        &[exact],
        Bound::Dot {
            terms: 64,
            scale: vec![sum_abs],
        },
    );
    judge_accuracy(&mut m, &got, &cpu, &oracle);
    assert!(m.passed && m.accurate, "{}", m.message);
    assert!(m.message.starts_with("accurate:"), "{}", m.message);
    // Moved to 4x the bound, the same output fails.
    let allowed = oracle_bound(&oracle, exact);
    let far = f32s(&[off_by(exact, 4.0 * allowed)]);
    let mut m = compare_tensors("output.0", &far, &cpu, default_tolerance(F32));
    judge_accuracy(&mut m, &far, &cpu, &oracle);
    assert!(!m.passed && !m.accurate);
}

fn oracle_bound(o: &Oracle, at: f64) -> f64 {
    match o {
        Oracle::Values { bound, .. } => bound.ulps(0, at, F32),
        _ => 0.0,
    }
}

#[test]
fn exact_oracle_is_the_cpu_output() {
    let cpu = f32s(&[1.0, 2.0]);
    let m = measure(&f32s(&[1.0, 2.0 + 2f64.powi(-22)]), &cpu, &Oracle::Exact).unwrap();
    assert_eq!((m.method, m.cpu_max_ulp, m.device_max_ulp), ("exact", 0.0, 1.0));
    assert!(!m.within, "an exact op allows no error beyond assert_close");
    assert_eq!(m.ratio, None);
}

/// A format 2 file: oracle and scale tensors load; malformed oracles are clear errors.
#[test]
fn format_2_oracles_load_and_malformed_ones_are_errors() {
    use crate::case::{Case, CaseErrorKind};
    use safetensors::tensor::TensorView;
    let f32_bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let input = f32_bytes(&[1.0, 2.0]);
    let output = f32_bytes(&[1.0, 2.0]);
    let oracle: Vec<u8> = [1.0f64, 2.0000001].iter().flat_map(|x| x.to_le_bytes()).collect();
    let scale = f32_bytes(&[3.0, 4.0]);
    let file = |oracle_json: &str, format: u32, with_scale: bool| {
        let meta = format!(
            r#"{{"format":{format},"id":"mm::f32::hand_0","op":"mm","dtype":"f32","args":[{{"tensor":"input.0"}},{{"tensor":"input.0"}}],"outputs":[{{"tensor":"output.0"}}],"tensors":{{"input.0":{{"dtype":"f32","shape":[2]}},"output.0":{{"dtype":"f32","shape":[2]}}}},"oracle":{oracle_json}}}"#
        );
        let mut views = vec![
            (
                "input.0",
                TensorView::new(safetensors::Dtype::F32, vec![2], &input).unwrap(),
            ),
            (
                "output.0",
                TensorView::new(safetensors::Dtype::F32, vec![2], &output).unwrap(),
            ),
            (
                "oracle.0",
                TensorView::new(safetensors::Dtype::F64, vec![2], &oracle).unwrap(),
            ),
        ];
        if with_scale {
            views.push((
                "oracle_scale.0",
                TensorView::new(safetensors::Dtype::F32, vec![2], &scale).unwrap(),
            ));
        }
        let md = std::collections::HashMap::from([("trnconf".to_string(), meta)]);
        let bytes = safetensors::serialize(views, Some(md)).unwrap();
        Case::from_bytes(std::path::Path::new("x.safetensors"), &bytes)
    };
    let dot = r#"{"output.0":{"method":"f64","tensor":"oracle.0","dtype":"F64","bound":{"kind":"dot","terms":2,"scale":"oracle_scale.0"}}}"#;
    let case = file(dot, 2, true).unwrap();
    assert_eq!(
        case.oracles["output.0"],
        Oracle::Values {
            values: vec![1.0, 2.0000001],
            bound: Bound::Dot {
                terms: 2,
                scale: vec![3.0, 4.0]
            }
        }
    );
    let kind = |r: Result<Case, crate::case::CaseError>| r.unwrap_err().kind;
    assert_eq!(
        kind(file(dot, 2, false)),
        CaseErrorKind::MissingTensor {
            name: "oracle_scale.0".into()
        }
    );
    assert!(matches!(
        kind(file(dot, 3, true)),
        CaseErrorKind::UnsupportedFormat { found: 3 }
    ));
    let on_input = r#"{"input.0":{"method":"exact"}}"#;
    assert!(matches!(kind(file(on_input, 2, false)), CaseErrorKind::BadMetadata(_)));
    let unknown = r#"{"output.0":{"method":"f128"}}"#;
    assert!(matches!(kind(file(unknown, 2, false)), CaseErrorKind::BadMetadata(_)));
    // A stored tensor no entry refers to is undescribed.
    assert!(matches!(
        kind(file(r#"{"output.0":{"method":"exact"}}"#, 2, false)),
        CaseErrorKind::UndescribedTensor { .. }
    ));
}
