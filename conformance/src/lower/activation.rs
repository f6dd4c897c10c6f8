//! The `activation` family: `relu`, `gelu`, `sigmoid`, `hardtanh`, `leaky_relu`, `elu`.
//!
//! Same machinery as `unary.rs` (one [`Kernel`] replayed per tile job, DMA in/out, fp32 math with
//! one rounding on write). ScalarE has Relu, Sigmoid, Gelu and GeluApproxTanh (no range limit);
//! hardtanh and leaky_relu are VectorE max/min/multiply; elu is expm1 (`Kernel::expm1`) of `min(x, 0)`
//! plus VectorE arithmetic. Integer relu/hardtanh use GpSimdE's exact int32 max/min.
//!
//! gelu (approximate='none') follows the kernel PyTorch's CPU actually runs, because the two differ
//! at the overflow edge: contiguous f32/bf16 tensors of more than one element go to oneDNN's
//! `eltwise_gelu_erf` (ATen `gelu_out_cpu`, `use_mkldnn`), whose AVX-512 form is
//! `(x · (1 + P(|x|))) · 0.5` with P a piecewise polynomial for erf(x/√2) that is the constant ±1
//! (zero higher coefficients, Horner-evaluated) beyond its last interval. So `x · 2` overflows to
//! inf for x ≥ 2^127, and `0 · |x|` makes +inf (and −inf) NaN. Every other call runs ATen's
//! `GeluKernelImpl`, `(x · 0.5) · (1 + erf(x/√2))`, which is ScalarE's Gelu at every input.

use super::promote::{self, Category};
use super::unary::{self, Kernel, OutRule, Reg, scalar_arg};
use super::{LowerError, LowerRequest, Lowered};
use crate::case::Value;
use crate::tensor::TorchDType;
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
    /// `onednn`: PyTorch computes this call with oneDNN's gelu_erf (see the module doc).
    Gelu {
        tanh: bool,
        onednn: bool,
    },
    Hardtanh {
        min: f64,
        max: f64,
    },
    LeakyRelu {
        slope: f64,
    },
    Elu {
        alpha: f64,
        scale: f64,
        input_scale: f64,
    },
}

fn args(req: &LowerRequest<'_>, name: &str) -> Result<Args, LowerError> {
    Ok(match name {
        "gelu" => match req.call.arg(1, "approximate") {
            None => Args::Gelu {
                tanh: false,
                onednn: gelu_uses_onednn(req)?,
            },
            Some(Value::Str(s)) if s == "none" => Args::Gelu {
                tanh: false,
                onednn: gelu_uses_onednn(req)?,
            },
            Some(Value::Str(s)) if s == "tanh" => Args::Gelu {
                tanh: true,
                onednn: false,
            },
            Some(v) => return Err(req.invalid(format!("`approximate` is {v:?}"))),
        },
        "hardtanh" => Args::Hardtanh {
            min: scalar_arg(req, 1, "min_val", -1.0)?,
            max: scalar_arg(req, 2, "max_val", 1.0)?,
        },
        "leaky_relu" => Args::LeakyRelu {
            slope: scalar_arg(req, 1, "negative_slope", 0.01)?,
        },
        "elu" => Args::Elu {
            alpha: scalar_arg(req, 1, "alpha", 1.0)?,
            scale: scalar_arg(req, 2, "scale", 1.0)?,
            input_scale: scalar_arg(req, 3, "input_scale", 1.0)?,
        },
        _ => Args::None,
    })
}

/// Whether PyTorch's CPU gelu (approximate='none') runs oneDNN for this input: ATen's
/// `use_mkldnn` takes contiguous f32 and bf16 tensors with more than one element (f16 only on
/// CPUs with native fp16, not the golden generator's).
fn gelu_uses_onednn(req: &LowerRequest<'_>) -> Result<bool, LowerError> {
    let name = match req.call.arg(0, "self") {
        Some(Value::Tensor(t)) => t.clone(),
        other => return Err(req.invalid(format!("`self` must be a tensor, got {other:?}"))),
    };
    let meta = req.tensor(&name)?;
    let numel: usize = meta.shape.iter().product();
    let contiguous = match &meta.strides {
        None => true,
        Some(strides) => {
            let mut expected = 1i64;
            meta.shape.iter().zip(strides).rev().all(|(&size, &stride)| {
                let ok = size == 1 || stride == expected;
                expected *= size as i64;
                ok
            })
        }
    };
    Ok(matches!(meta.dtype, TorchDType::F32 | TorchDType::Bf16) && numel > 1 && contiguous)
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
        (
            "gelu",
            Args::Gelu {
                tanh: false,
                onednn: true,
            },
        ) => {
            // oneDNN's order: e = erf(x/√2); e + 0·x is the saturated polynomial's Horner step
            // (NaN for ±inf, e otherwise); (e + 1)·x, then · 0.5.
            let e = k.tmp();
            k.act(e, ActFunc::Erf, x, std::f64::consts::FRAC_1_SQRT_2, 0.0);
            k.stt(e, x, Multiply, 0.0, Add, e);
            let u = k.tmp();
            k.stt(u, e, Add, 1.0, Multiply, x);
            k.ts(out, u, Multiply, 0.5);
        }
        ("gelu", Args::Gelu { tanh, .. }) => k.act(
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
    let name = req.op.split('.').next().unwrap_or(req.op);
    let r = rule(name).ok_or_else(|| LowerError::NotLowered(req.op.to_string()))?;
    let call = unary::analyze(req, r)?;
    let a = args(req, name)?;
    let (k, x_dtype) = kernel(name, call.self_meta.dtype, a).map_err(|e| req.unsupported(e))?;
    Ok(Lowered::new(unary::emit(&call, &k, x_dtype, target, req)?))
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
        let tanh_gelu = Args::Gelu {
            tanh: true,
            onednn: false,
        };
        for (name, a) in [("relu", Args::None), ("sigmoid", Args::None), ("gelu", tanh_gelu)] {
            let (k, _) = kernel(name, TorchDType::Bf16, a).unwrap();
            assert!(matches!(k.steps[..], [Step::Act { .. }]), "{name}");
        }
    }

    /// oneDNN's order: inf from 2^127 on and NaN at ±inf (as PyTorch's golden), ATen's order
    /// (ScalarE Gelu): the finite max and +inf; both agree with f64 gelu elsewhere.
    #[test]
    fn gelu_edge_values_follow_the_pytorch_kernel() {
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
        // The simulator's ScalarE Gelu is gelu evaluated in f64, rounded once.
        let gelu = |x: f32| trnsim::engine::activation::eval(ActFunc::Gelu, x) as f64;
        for onednn in [true, false] {
            let (k, _) = kernel("gelu", TorchDType::F32, Args::Gelu { tanh: false, onednn }).unwrap();
            let out = unary::tests::interpret(&k, &xs);
            let edges: Vec<String> = out[..4].iter().map(|v| v.to_string()).collect();
            let want = if onednn {
                ["inf", "170141170000000000000000000000000000000", "NaN", "NaN"]
            } else {
                [
                    "340282350000000000000000000000000000000",
                    "170141170000000000000000000000000000000",
                    "inf",
                    "NaN",
                ]
            };
            assert_eq!(edges, want, "onednn={onednn}");
            for (&x, &y) in xs[4..].iter().zip(&out[4..]) {
                let w = gelu(x);
                let err = (y as f64 - w).abs();
                assert!(
                    err <= 1e-6 * (1.0 + w.abs()),
                    "onednn={onednn}: gelu({x}) = {y}, want {w}"
                );
            }
        }
    }
}
