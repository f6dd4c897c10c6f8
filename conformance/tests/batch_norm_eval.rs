//! Eval-mode batch norm (`_native_batch_norm_legit` with `training=False`) against PyTorch
//! 2.15's CPU output, end to end. PyTorch takes `invstd = 1 / std::sqrt(running_var + eps)` in
//! fp32 (two roundings) and `y = x·α + β` with `α = invstd·w`, `β = b − mean·α`. For this
//! channel a correctly rounded rsqrt gives an invstd one ulp above (0.48718143 against
//! 0.4871814), and the `x·α + β` form turns that ulp into 30 ulps of the small output 0.2105:
//! the device must round invstd as PyTorch does (docs/numerics.md), bit for bit here.

use trnconf::case::Value;
use trnconf::expect::Status;
use trnconf::fixture::{CaseBuilder, run_on_trn1};
use trnconf::tensor::TorchDType::*;

#[test]
fn eval_batch_norm_rounds_invstd_as_pytorch_does() {
    let x = [
        4.947308540344238,
        5.774446487426758,
        -3.973021984100342,
        3.2707996368408203,
        1.822007179260254,
        -3.522088050842285,
        -4.414461135864258,
        2.3285140991210938,
        5.1154985427856445,
        -6.255067825317383,
        2.992039680480957,
        -2.9821853637695312,
    ];
    // torch.ops.aten._native_batch_norm_legit(x, w, b, rm, rv, False, -1.2, 1e-5)[0] under the
    // golden generator's CPU path (ATEN_CPU_CAPABILITY=default)
    let want = [
        -1.2317743301391602,
        -1.9433422088623047,
        6.442185401916504,
        0.21048855781555176,
        1.4568521976470947,
        6.054256916046143,
        6.8219451904296875,
        1.0211155414581299,
        -1.3764643669128418,
        8.405378341674805,
        0.4502995014190674,
        5.5897908210754395,
    ];
    let c = CaseBuilder::new("_native_batch_norm_legit", "f32", "hand", 0)
        .input(F32, &[3, 1, 4], &x)
        .input(F32, &[1], &[-1.7658257484436035])
        .input(F32, &[1], &[-2.400455951690674])
        .input(F32, &[1], &[6.305802345275879])
        .input(F32, &[1], &[4.213253021240234])
        .arg(Value::Bool(false))
        .float_arg(-1.2)
        .float_arg(1e-5)
        .output(F32, &[3, 1, 4], &want)
        .output(F32, &[0], &[])
        .output(F32, &[0], &[]);
    let r = run_on_trn1("bn-eval", c);
    assert_eq!(r.status, Status::Pass, "{}", r.message);
    let m = &r.metrics[0];
    assert_eq!(m.max_ulp, 0, "output.0 is {} ulps from PyTorch's", m.max_ulp);
}
