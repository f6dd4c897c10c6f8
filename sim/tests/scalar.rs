//! ScalarE `activation`: every function at known points, scale and bias, the accumulator
//! commands, the NC-v2 bias rules and the rejections.
//!
//! Expected values are closed forms or published constants (e.g. Φ(1) = 0.8413447460685429,
//! erf(1) = 0.8427007929497149), rounded once to fp32; the simulator's accurate model (f64 then
//! one rounding) must land within 1 ulp of them.

#[macro_use]
mod common;

use common::*;
use trnsim::*;

const F: DType = DType::F32;

fn act(dst: &AccessPattern, func: ActFunc, src: &AccessPattern) -> Activation {
    Activation {
        dst: dst.clone(),
        func,
        src: src.clone(),
        bias: None,
        scale: ScalarOperand::Imm(1.0),
        acc: AccCmd::Idle,
        reduce_res: None,
    }
}

fn ns(cycles: u64) -> f64 {
    cycles as f64 / 1.4
}

#[test]
fn every_function_at_known_points() {
    use ActFunc::*;
    let e = std::f64::consts::E;
    let cases: &[(ActFunc, &[(f32, f64)])] = &[
        (Copy, &[(1.7, 1.7f32 as f64), (-3.0, -3.0)]),
        (Square, &[(3.0, 9.0), (-1.5, 2.25)]),
        (
            Sigmoid,
            &[(0.0, 0.5), (2.0, 0.8807970779778823), (-200.0, 1.3838965267367376e-87)],
        ),
        (Relu, &[(-2.0, 0.0), (3.0, 3.0)]),
        (
            Gelu,
            &[(0.0, 0.0), (1.0, 0.8413447460685429), (-1.0, -0.15865525393145707)],
        ),
        (GeluDx, &[(0.0, 0.5), (1.0, 1.0833154705876864)]),
        (GeluApproxTanh, &[(0.0, 0.0), (1.0, 0.8411919906082768)]),
        (GeluApproxSigmoid, &[(0.0, 0.0), (1.0, 0.8457957659328212)]),
        (GeluApproxSigmoidDx, &[(0.0, 0.5), (1.0, 1.067779606556334)]),
        (Silu, &[(0.0, 0.0), (1.0, 0.7310585786300049)]),
        (SiluDx, &[(0.0, 0.5), (1.0, 0.9276705118714869)]),
        (
            Tanh,
            &[(0.0, 0.0), (1.0, 0.7615941559557649), (-1.0, -0.7615941559557649)],
        ),
        (
            Softplus,
            &[
                (0.0, std::f64::consts::LN_2),
                (-20.0, 2.061153620314381e-9),
                (100.0, 100.0),
            ],
        ),
        (Mish, &[(0.0, 0.0), (1.0, 0.8650983882673103)]),
        (
            Erf,
            &[(0.0, 0.0), (1.0, 0.8427007929497149), (-1.0, -0.8427007929497149)],
        ),
        (
            ErfDx,
            &[(0.0, std::f64::consts::FRAC_2_SQRT_PI), (1.0, 0.4151074974205947)],
        ),
        (Exp, &[(0.0, 1.0), (1.0, e), (-1.0, 1.0 / e)]),
        (
            Log,
            &[
                (1.0, 0.0),
                (2.0, std::f64::consts::LN_2),
                (0.5, -std::f64::consts::LN_2),
            ],
        ),
        (
            Sin,
            &[(0.0, 0.0), (1.0, 0.8414709848078965), (-1.0, -0.8414709848078965)],
        ),
        (Arctan, &[(0.0, 0.0), (1.0, std::f64::consts::FRAC_PI_4)]),
        (Sqrt, &[(4.0, 2.0), (2.0, std::f64::consts::SQRT_2)]),
        (Rsqrt, &[(4.0, 0.5), (2.0, std::f64::consts::FRAC_1_SQRT_2)]),
        (Reciprocal, &[(4.0, 0.25), (3.0, 1.0 / 3.0), (-0.5, -2.0)]),
        (Sign, &[(-3.0, -1.0), (0.0, 0.0), (2.5, 1.0)]),
        (Abs, &[(-2.5, 2.5), (2.5, 2.5)]),
    ];
    for &(func, points) in cases {
        let mut r = Rig::new();
        let xs: Vec<f32> = points.iter().map(|p| p.0).collect();
        let src = r.sbuf(F, 0, 1, 0, &xs);
        let dst = sb(F, 0, 1, 64, xs.len());
        r.push(Engine::Scalar, Op::Activation(act(&dst, func, &src)));
        let o = r.out(&dst);
        let got = r.ok().f32(&o);
        for (&(x, want), g) in points.iter().zip(got) {
            assert_ulps(g, want as f32, 1, &format!("{func:?}({x})"));
        }
    }
}

#[test]
fn special_values() {
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 1, 0, &[f32::NAN, 0.0, -0.0, f32::NEG_INFINITY]);
    let outs: Vec<(ActFunc, String)> = [ActFunc::Relu, ActFunc::Sign, ActFunc::Reciprocal, ActFunc::Exp]
        .into_iter()
        .enumerate()
        .map(|(k, f)| {
            let d = sb(F, 0, 1, 64 + 16 * k as u64, 4);
            r.push(Engine::Scalar, Op::Activation(act(&d, f, &src)));
            (f, r.out(&d))
        })
        .collect();
    let ran = r.ok();
    let relu = ran.f32(&outs[0].1);
    assert!(relu[0].is_nan());
    assert_eq!(relu[1..], [0.0, 0.0, 0.0]);
    let sign = ran.bits(&outs[1].1);
    assert_eq!(sign[1..], [0, 0x8000_0000, (-1.0f32).to_bits()], "sign(±0) = ±0");
    assert_eq!(ran.f32(&outs[2].1)[1..], [f32::INFINITY, f32::NEG_INFINITY, -0.0]);
    assert_eq!(ran.f32(&outs[3].1)[1..], [1.0, 1.0, 0.0]);
}

#[test]
fn negative_zero_survives_without_bias_and_not_with_a_zero_bias() {
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 1, 0, &[-0.0]);
    let zero = r.sbuf(F, 0, 1, 64, &[0.0]);
    let d0 = sb(F, 0, 1, 128, 1);
    let d1 = sb(F, 0, 1, 192, 1);
    r.push(Engine::Scalar, Op::Activation(act(&d0, ActFunc::Copy, &src)));
    r.push(
        Engine::Scalar,
        Op::Activation(Activation {
            bias: Some(ScalarOperand::Tile(zero)),
            ..act(&d1, ActFunc::Copy, &src)
        }),
    );
    let (o0, o1) = (r.out(&d0), r.out(&d1));
    let ran = r.ok();
    assert_eq!(ran.bits(&o0), [0x8000_0000]);
    assert_eq!(ran.bits(&o1), [0], "−0 + +0 = +0 in fp32");
}

#[test]
fn scale_and_bias_tiles_per_partition() {
    let mut r = Rig::new();
    // exp(x·scale + bias): partition 0 → exp(0.5·2 − 1) = 1; partition 1 → exp(3·(−1) + 3) = 1;
    // second elements: exp(1.5·2 − 1) = e²; exp(2·(−1) + 3) = e.
    let src = r.sbuf(F, 0, 2, 0, &[0.5, 1.5, 3.0, 2.0]);
    let scale = r.sbuf(F, 0, 2, 64, &[2.0, -1.0]);
    let bias = r.sbuf(DType::Bf16, 0, 2, 128, &[-1.0, 3.0]);
    let dst = sb(F, 0, 2, 192, 2);
    r.push(
        Engine::Scalar,
        Op::Activation(Activation {
            bias: Some(ScalarOperand::Tile(bias)),
            scale: ScalarOperand::Tile(scale),
            ..act(&dst, ActFunc::Exp, &src)
        }),
    );
    let o = r.out(&dst);
    let ran = r.ok();
    let got = ran.f32(&o);
    let e = std::f64::consts::E;
    assert_eq!(got[0], 1.0);
    assert_ulps(got[1], (e * e) as f32, 1, "e^2");
    assert_eq!(got[2], 1.0);
    assert_ulps(got[3], e as f32, 1, "e");
    assert_eq!(ran.stats().flops, 8);
    assert!((ran.stats().est_ns.scalar - ns(64)).abs() < 1e-6);
}

#[test]
fn scale_then_bias_are_two_fp32_roundings() {
    // x·scale = 1 + 2^-23 + 2^-46 exactly; fp32 rounds it to 1 + 2^-23, and − 1 leaves 2^-23.
    // A fused multiply-add would give 2^-23 + 2^-46.
    let mut r = Rig::new();
    let x = 1.0 + 2f32.powi(-23);
    let src = r.sbuf(F, 0, 1, 0, &[x]);
    let scale = r.sbuf(F, 0, 1, 64, &[x]);
    let bias = r.sbuf(F, 0, 1, 128, &[-1.0]);
    let dst = sb(F, 0, 1, 192, 1);
    r.push(
        Engine::Scalar,
        Op::Activation(Activation {
            bias: Some(ScalarOperand::Tile(bias)),
            scale: ScalarOperand::Tile(scale),
            ..act(&dst, ActFunc::Copy, &src)
        }),
    );
    let o = r.out(&dst);
    // (1 + 2^-23)² = 1 + 2^-22 + 2^-46 → rounds to 1 + 2^-22; minus 1 = 2^-22.
    assert_eq!(r.ok().f32(&o), [2f32.powi(-22)]);
}

#[test]
fn accumulator_commands() {
    let mut r = Rig::new();
    let a = r.sbuf(F, 0, 2, 0, &[1.0, 2.0, 3.0, 10.0, 20.0, 30.0]);
    let b = r.sbuf(F, 0, 2, 64, &[4.0, 40.0]);
    let scratch3 = sb(F, 0, 2, 128, 3);
    let scratch1 = sb(F, 0, 2, 192, 1);
    let res = |k: u64| sb(F, 0, 2, 256 + 4 * k, 1);
    let with = |dst: &AccessPattern, src: &AccessPattern, acc: AccCmd, out: Option<AccessPattern>| {
        Op::Activation(Activation {
            acc,
            reduce_res: out,
            ..act(dst, ActFunc::Copy, src)
        })
    };
    // reset_reduce: acc = 6 / 60; reduce: += 4 / 40 → 10 / 100, read out.
    r.push(Engine::Scalar, with(&scratch3, &a, AccCmd::ResetReduce, None));
    r.push(Engine::Scalar, with(&scratch1, &b, AccCmd::Reduce, Some(res(0))));
    // idle keeps the accumulator: reading it again gives 10 / 100.
    r.push(Engine::Scalar, with(&scratch1, &b, AccCmd::Idle, Some(res(1))));
    // reset zeroes it (without adding this instruction's sum).
    r.push(Engine::Scalar, with(&scratch1, &b, AccCmd::Reset, Some(res(2))));
    // reduce after reset: 0 + 4 / 40.
    r.push(Engine::Scalar, with(&scratch1, &b, AccCmd::Reduce, Some(res(3))));
    let outs: Vec<String> = (0..4).map(|k| r.out(&res(k))).collect();
    let ran = r.ok();
    assert_eq!(ran.f32(&outs[0]), [10.0, 100.0]);
    assert_eq!(ran.f32(&outs[1]), [10.0, 100.0]);
    assert_eq!(ran.f32(&outs[2]), [0.0, 0.0]);
    assert_eq!(ran.f32(&outs[3]), [4.0, 40.0]);
    // Five activations of max(64, N) plus four accumulator reads of MIN_II each.
    assert!((ran.stats().est_ns.scalar - ns(9 * 64)).abs() < 1e-6);
}

#[test]
fn accumulator_sums_the_fp32_results_before_the_cast() {
    let mut r = Rig::new();
    let v = 1.0 + 2f32.powi(-8);
    let a = r.sbuf(F, 0, 1, 0, &[v, v]);
    let d = sb(DType::Bf16, 0, 1, 64, 2);
    let res = sb(F, 0, 1, 128, 1);
    r.push(
        Engine::Scalar,
        Op::Activation(Activation {
            acc: AccCmd::ResetReduce,
            reduce_res: Some(res.clone()),
            ..act(&d, ActFunc::Copy, &a)
        }),
    );
    let (od, or) = (r.out(&d), r.out(&res));
    let ran = r.ok();
    assert_eq!(ran.f32(&od), [1.0, 1.0]);
    assert_eq!(ran.f32(&or), [2.0078125]);
}

#[test]
fn accumulators_are_per_lane() {
    // The lanes of partitions 32..34 accumulate independently of those of 0..2.
    let mut r = Rig::new();
    let lo = r.sbuf(F, 0, 2, 0, &[1.0, 2.0]);
    let hi = r.sbuf(F, 32, 2, 0, &[5.0, 6.0]);
    let res_lo = sb(F, 0, 2, 64, 1);
    let res_hi = sb(F, 32, 2, 64, 1);
    for (src, res) in [(&lo, None), (&hi, Some(res_hi.clone())), (&lo, Some(res_lo.clone()))] {
        let dst = AccessPattern {
            offset: 128,
            ..src.clone()
        };
        r.push(
            Engine::Scalar,
            Op::Activation(Activation {
                acc: AccCmd::Reduce,
                reduce_res: res,
                ..act(&dst, ActFunc::Copy, src)
            }),
        );
    }
    let (ol, oh) = (r.out(&res_lo), r.out(&res_hi));
    let ran = r.ok();
    assert_eq!(ran.f32(&ol), [2.0, 4.0]);
    assert_eq!(ran.f32(&oh), [5.0, 6.0]);
}

#[test]
fn nc_v2_bias_rules() {
    // A non-zero immediate bias is rejected on trn1, accepted on trn2.
    let build = |t: TargetName, bias: f64| {
        let mut r = Rig::on(t);
        let src = r.sbuf(F, 0, 1, 0, &[0.0]);
        let dst = sb(F, 0, 1, 64, 1);
        let i = r.push(
            Engine::Scalar,
            Op::Activation(Activation {
                bias: Some(ScalarOperand::Imm(bias)),
                ..act(&dst, ActFunc::Exp, &src)
            }),
        );
        let o = r.out(&dst);
        (r, i, o)
    };
    let (r, i, _) = build(TargetName::Trn1, 1.0);
    assert_err!(r.err(), i, Some("bias"), ErrorKind::Invalid(_));
    let (r, _, o) = build(TargetName::Trn1, 0.0);
    assert_eq!(r.ok().f32(&o), [1.0]);
    let (r, _, o) = build(TargetName::Trn2, 1.0);
    assert_ulps(r.ok().f32(&o)[0], std::f32::consts::E, 1, "exp(0 + 1)");
    // reciprocal takes no bias at all on NC-v2 (not even a tile).
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 1, 0, &[2.0]);
    let bias = r.sbuf(F, 0, 1, 64, &[0.0]);
    let i = r.push(
        Engine::Scalar,
        Op::Activation(Activation {
            bias: Some(ScalarOperand::Tile(bias)),
            ..act(&sb(F, 0, 1, 128, 1), ActFunc::Reciprocal, &src)
        }),
    );
    assert_err!(r.err(), i, Some("bias"), ErrorKind::Invalid(_));
}

#[test]
fn copy_bias_bug_emulation() {
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 1, 0, &[1.0]);
    let bias = r.sbuf(F, 0, 1, 64, &[5.0]);
    let d_copy = sb(F, 0, 1, 128, 1);
    let d_exp = sb(F, 0, 1, 192, 1);
    for (d, f) in [(&d_copy, ActFunc::Copy), (&d_exp, ActFunc::Square)] {
        r.push(
            Engine::Scalar,
            Op::Activation(Activation {
                bias: Some(ScalarOperand::Tile(bias.clone())),
                ..act(d, f, &src)
            }),
        );
    }
    let (oc, oe) = (r.out(&d_copy), r.out(&d_exp));
    assert_eq!(r.ok().f32(&oc), [6.0]);
    r.config.numerics.emulate_act_copy_bias_bug = true;
    let ran = r.ok();
    assert_eq!(ran.f32(&oc), [1.0], "Trn1 copy ignores its bias (aws-neuron-sdk #1296)");
    assert_eq!(ran.f32(&oe), [36.0], "other functions keep it");
}

#[test]
fn flush_to_zero_setting_applies_to_activation() {
    let sub = f32::from_bits(1);
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 1, 0, &[sub, 1e-20]);
    let d = sb(F, 0, 1, 64, 2);
    r.push(Engine::Scalar, Op::Activation(act(&d, ActFunc::Copy, &src)));
    let d2 = sb(F, 0, 1, 128, 2);
    // square(1e-20) = 1e-40 is subnormal in fp32.
    r.push(Engine::Scalar, Op::Activation(act(&d2, ActFunc::Square, &src)));
    let (o, o2) = (r.out(&d), r.out(&d2));
    let ran = r.ok();
    assert_eq!(ran.bits(&o), [1, 1e-20f32.to_bits()]);
    assert_eq!(ran.f32(&o2)[1], (1e-40f64) as f32);
    r.config.numerics.denormals = Denormals::FlushToZero;
    let ran = r.ok();
    assert_eq!(ran.f32(&o), [0.0, 1e-20]);
    assert_eq!(ran.f32(&o2), [0.0, 0.0]);
}

#[test]
fn psum_in_and_out_and_bf16_cast() {
    let mut r = Rig::new();
    let src = r.psum(F, 0, 1, 0, &[1.0 + 2f32.powi(-8)]);
    let dst = ps(DType::Bf16, 0, 1, 64, 1);
    r.push(Engine::Scalar, Op::Activation(act(&dst, ActFunc::Copy, &src)));
    let o = r.out(&dst);
    assert_eq!(r.ok().f32(&o), [1.0]);
}

#[test]
fn rejections() {
    // Wrong engine.
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 1, 0, &[1.0]);
    let i = r.push(
        Engine::Vector,
        Op::Activation(act(&sb(F, 0, 1, 64, 1), ActFunc::Exp, &src)),
    );
    assert_err!(r.err(), i, None, ErrorKind::WrongEngine { .. });
    // Shape mismatch.
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 1, 0, &[1.0, 2.0]);
    let i = r.push(
        Engine::Scalar,
        Op::Activation(act(&sb(F, 0, 1, 64, 3), ActFunc::Exp, &src)),
    );
    assert_err!(r.err(), i, Some("src"), ErrorKind::ShapeMismatch(_));
    // Scale tile must be fp32; bias tile may not be tf32.
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 1, 0, &[1.0]);
    let s = r.sbuf(DType::Bf16, 0, 1, 64, &[1.0]);
    let i = r.push(
        Engine::Scalar,
        Op::Activation(Activation {
            scale: ScalarOperand::Tile(s),
            ..act(&sb(F, 0, 1, 128, 1), ActFunc::Exp, &src)
        }),
    );
    assert_err!(r.err(), i, Some("scale"), ErrorKind::UnsupportedDType { .. });
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 1, 0, &[1.0]);
    let b = r.sbuf(DType::Tf32, 0, 1, 64, &[1.0]);
    let i = r.push(
        Engine::Scalar,
        Op::Activation(Activation {
            bias: Some(ScalarOperand::Tile(b)),
            ..act(&sb(F, 0, 1, 128, 1), ActFunc::Exp, &src)
        }),
    );
    assert_err!(r.err(), i, Some("bias"), ErrorKind::UnsupportedDType { .. });
    // Bias tile of the wrong shape.
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 2, 0, &[1.0, 2.0]);
    let b = r.sbuf(F, 0, 1, 64, &[1.0]);
    let i = r.push(
        Engine::Scalar,
        Op::Activation(Activation {
            bias: Some(ScalarOperand::Tile(b)),
            ..act(&sb(F, 0, 2, 128, 1), ActFunc::Exp, &src)
        }),
    );
    assert_err!(r.err(), i, Some("bias"), ErrorKind::ShapeMismatch(_));
    // reduce_res of the wrong shape.
    let mut r = Rig::new();
    let src = r.sbuf(F, 0, 2, 0, &[1.0, 2.0]);
    let i = r.push(
        Engine::Scalar,
        Op::Activation(Activation {
            reduce_res: Some(sb(F, 0, 1, 64, 1)),
            ..act(&sb(F, 0, 2, 128, 1), ActFunc::Exp, &src)
        }),
    );
    assert_err!(r.err(), i, Some("reduce_res"), ErrorKind::ShapeMismatch(_));
    // Uninitialized input.
    let mut r = Rig::new();
    let i = r.push(
        Engine::Scalar,
        Op::Activation(act(&sb(F, 0, 1, 128, 1), ActFunc::Exp, &sb(F, 0, 1, 0, 1))),
    );
    assert_err!(r.err(), i, Some("src"), ErrorKind::UninitializedRead { .. });
    // Start-partition rule.
    let mut r = Rig::new();
    let src = r.sbuf(F, 16, 4, 0, &[1.0; 4]);
    let i = r.push(
        Engine::Scalar,
        Op::Activation(act(&sb(F, 0, 4, 128, 1), ActFunc::Exp, &src)),
    );
    assert_err!(
        r.err(),
        i,
        Some("src"),
        ErrorKind::StartPartition { start: 16, count: 4 }
    );
    // Free size over the PSUM limit.
    let mut r = Rig::new();
    let i = r.push(
        Engine::Scalar,
        Op::Activation(act(&sb(F, 0, 1, 0, 5000), ActFunc::Exp, &ps(F, 0, 1, 0, 5000))),
    );
    assert_err!(
        r.err(),
        i,
        Some("src"),
        ErrorKind::FreeSizeLimit {
            size: 5000,
            limit: 4096,
            ..
        }
    );
    // ScalarE cannot touch HBM.
    let mut r = Rig::new();
    let t = r.hbm(F, &[1, 1], &[1.0]);
    let i = r.push(
        Engine::Scalar,
        Op::Activation(act(
            &sb(F, 0, 1, 0, 1),
            ActFunc::Exp,
            &AccessPattern::hbm(&t, F, 0, 1, 1, vec![[1, 1]]),
        )),
    );
    assert_err!(r.err(), i, Some("src"), ErrorKind::MemoryNotAccessible { .. });
}
