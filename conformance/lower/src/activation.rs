//! The `activation` family: `relu`, `gelu`, `sigmoid`, `hardtanh`, `leaky_relu`, `elu`.
//!
//! Same machinery as `unary.rs` (one [`Kernel`] replayed per tile job, DMA in/out, fp32 math with
//! one rounding on write). ScalarE has Relu, Sigmoid, Gelu and GeluApproxTanh (no range limit);
//! hardtanh and leaky_relu are VectorE max/min/multiply; elu is expm1 (`Kernel::expm1`) of `min(x, 0)`
//! plus VectorE arithmetic. Integer relu/hardtanh use GpSimdE's exact int32 max/min.
//!
//! gelu (approximate='none') is ScalarE's Gelu at every input, ATen's `(x · 0.5) · (1 + erf(x/√2))`.
//! An earlier version reproduced oneDNN's AVX-512 `gelu_erf` at the overflow edge (inf for
//! x ≥ 2^127, NaN at ±inf) because the goldens came from an AVX-512 machine; the generator now pins
//! oneDNN's ISA (golden/generate.py), and the pinned CPU, like the float64 oracle, gives the finite
//! value there, so the engine's accurate Gelu is what every golden agrees with.
use super::promote::{self, Category};
use super::unary::{self, Kernel, OutRule, Reg};
use super::{LowerError, LowerRequest, Lowered};
use crate::call::Scalar;
use crate::dtype::TorchDType;
use trnsim::{ActFunc, AluOp, DType, TargetName};

fn rule(name: &str) -> Option<OutRule> {
    Some(match name {
        "sigmoid" => OutRule::Float,
        "relu" | "gelu" | "hardtanh" | "leaky_relu" | "elu" => OutRule::Same,
        _ => return None,
    })
}

/// Scalar arguments of the activations, as the kernel needs them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Args {
    None,
    Gelu { tanh: bool },
    Hardtanh { min: f64, max: f64 },
    LeakyRelu { slope: f64 },
    Elu { alpha: f64, scale: f64, input_scale: f64 },
}

fn args(req: &LowerRequest<'_>, name: &str) -> Result<Args, LowerError> {
    Ok(match name {
        "gelu" => match req.arg_or(1, "approximate", "none")? {
            "none" => Args::Gelu { tanh: false },
            "tanh" => Args::Gelu { tanh: true },
            s => return Err(req.arg_error(1, "approximate", format!("`{s}` (expected none or tanh)"))),
        },
        "hardtanh" => Args::Hardtanh {
            min: req.arg_or(1, "min_val", Scalar::Float(-1.0))?.as_f64(),
            max: req.arg_or(2, "max_val", Scalar::Float(1.0))?.as_f64(),
        },
        "leaky_relu" => Args::LeakyRelu {
            slope: req.arg_or(1, "negative_slope", Scalar::Float(0.01))?.as_f64(),
        },
        "elu" => Args::Elu {
            alpha: req.arg_or(1, "alpha", Scalar::Float(1.0))?.as_f64(),
            scale: req.arg_or(2, "scale", Scalar::Float(1.0))?.as_f64(),
            input_scale: req.arg_or(3, "input_scale", Scalar::Float(1.0))?.as_f64(),
        },
        _ => Args::None,
    })
}

/// The kernel of an activation for an input of `input` dtype, and the input tile's dtype.
pub fn kernel(name: &str, input: TorchDType, args: Args) -> Result<(Kernel, DType), String> {
    use AluOp::*;
    let mut k = Kernel::new();
    let (x, out) = (Reg::X, Reg::Out);
    if promote::category(input) <= Category::Integer && name != "sigmoid" {
        if !matches!(input, TorchDType::I32 | TorchDType::I64) {
            return Err(format!("{name} on {input}"));
        }
        match (name, args) {
            ("relu", _) => k.gp_ts(out, x, Max, 0.0, false, None),
            ("hardtanh", Args::Hardtanh { min, max }) => {
                // PyTorch converts the bounds to the integer dtype (truncation).
                k.gp_ts(out, x, Max, min.trunc(), false, Some((Min, max.trunc())))
            }
            _ => return Err(format!("{name} on {input}")),
        }
        return Ok((k, DType::I32));
    }
    match (name, args) {
        ("relu", _) => k.act(out, ActFunc::Relu, x, 1.0, 0.0),
        ("sigmoid", _) => k.act(out, ActFunc::Sigmoid, x, 1.0, 0.0),
        ("gelu", Args::Gelu { tanh }) => k.act(
            out,
            if tanh { ActFunc::GeluApproxTanh } else { ActFunc::Gelu },
            x,
            1.0,
            0.0,
        ),
        ("hardtanh", Args::Hardtanh { min, max }) => k.ts2(out, x, Max, min, Min, max),
        ("leaky_relu", Args::LeakyRelu { slope }) => {
            // max(x, 0) + slope · min(x, 0)
            let n = k.tmp();
            k.ts2(n, x, Min, 0.0, Multiply, slope);
            let p = k.tmp();
            k.ts(p, x, Max, 0.0);
            k.tt(out, p, Add, n);
        }
        (
            "elu",
            Args::Elu {
                alpha,
                scale,
                input_scale,
            },
        ) => {
            // x > 0: scale · x;  else alpha · scale · expm1(input_scale · x)
            let n = k.tmp();
            k.ts(n, x, Min, 0.0);
            let e = k.expm1(n, input_scale);
            k.ts(e, e, Multiply, alpha * scale);
            let p = k.tmp();
            k.ts2(p, x, Max, 0.0, Multiply, scale);
            k.tt(out, p, Add, e);
        }
        _ => return Err(format!("no kernel for {name}")),
    }
    Ok((k, DType::F32))
}

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    unary::lower_kernel(req, target, rule, |name, call| {
        let a = args(req, name)?;
        kernel(name, call.self_meta.dtype, a).map_err(|e| req.unsupported(e))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use trnsim::Engine;
    use unary::Step;

    #[test]
    fn integer_relu_and_hardtanh_are_exact_int32() {
        let (k, d) = kernel("relu", TorchDType::I64, Args::None).unwrap();
        assert_eq!(d, DType::I32);
        assert!(matches!(
            k.steps[0],
            Step::Ts {
                eng: Engine::Gpsimd,
                op0: AluOp::Max,
                ..
            }
        ));
        let (k, _) = kernel("hardtanh", TorchDType::I32, Args::Hardtanh { min: -0.5, max: 0.5 }).unwrap();
        assert!(matches!(k.steps[0], Step::Ts { v0, op1: Some((AluOp::Min, hi)), .. } if v0 == 0.0 && hi == 0.0));
    }

    #[test]
    fn float_activations_on_scalar_engine() {
        let tanh_gelu = Args::Gelu { tanh: true };
        for (name, a) in [("relu", Args::None), ("sigmoid", Args::None), ("gelu", tanh_gelu)] {
            let (k, _) = kernel(name, TorchDType::Bf16, a).unwrap();
            assert!(matches!(k.steps[..], [Step::Act { .. }]), "{name}");
        }
    }

    /// ScalarE's Gelu at the overflow edge: the finite maximum stays finite (the f64 value,
    /// rounded once), +inf is +inf, and −inf·0 is NaN; elsewhere f64 gelu.
    #[test]
    fn gelu_edge_values_are_the_accurate_ones() {
        let below_2_127 = f32::from_bits(0x7EFF_FFFF);
        let xs = [
            f32::MAX,
            below_2_127,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN,
            -5.0,
            -1.0,
            0.5,
            3.0,
            1e30,
        ];
        let gelu = |x: f32| trnsim::engine::activation::eval(ActFunc::Gelu, x) as f64;
        let (k, _) = kernel("gelu", TorchDType::F32, Args::Gelu { tanh: false }).unwrap();
        let out = unary::tests::interpret(&k, &xs);
        let edges: Vec<String> = out[..4].iter().map(|v| v.to_string()).collect();
        let want = [
            "340282350000000000000000000000000000000",
            "170141170000000000000000000000000000000",
            "inf",
            "NaN",
        ];
        assert_eq!(edges, want);
        for (&x, &y) in xs[4..].iter().zip(&out[4..]) {
            let w = gelu(x);
            let err = (y as f64 - w).abs();
            assert!(err <= 1e-6 * (1.0 + w.abs()), "gelu({x}) = {y}, want {w}");
        }
    }
}
