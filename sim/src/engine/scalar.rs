//! ScalarE (ACT): `activation` — `dst = func(src * scale + bias)` per lane, fp32 inside, cast on
//! write, with the per-partition accumulator registers for reduce commands.

use super::activation::{eval, eval_with};
use super::alu::{apply_f32, canon};
use super::{Ctx, require_dtype, same_shape};
use crate::dtype::{ALL_DTYPES, DType};
use crate::error::{AtOperand, ErrorKind, OpResult};
use crate::numerics::{ActivationModel, Denormals};
use crate::program::{AccCmd, ActFunc, Activation, AluOp, ScalarOperand};

/// `y = func(x * scale + bias)`; `x*scale` and `+bias` are two fp32 operations (whether the
/// hardware fuses them is unpublished), both subject to the denormal setting like every ALU
/// operation, and so is `y`. Without a bias nothing is added (−0 inputs stay −0). With an accumulate command the free-axis sum of the fp32 `y`
/// (before the cast) is added to the partition's accumulator in index order; `reduce_res`
/// receives the accumulator after the instruction.
///
/// Accumulators are per physical partition (lane): the lanes of `src`'s partitions are used,
/// and `reduce_res` row `k` reads lane `src.start_partition + k`.
pub fn activation(ctx: &mut Ctx, i: &Activation) -> OpResult<()> {
    same_shape("dst", &i.dst, "src", &i.src)?;
    let p = i.src.partitions;
    let per = i.src.free_elems();
    if let Some(ScalarOperand::Imm(b)) = &i.bias
        && *b != 0.0
        && !ctx.target.scalar_bias_immediate
    {
        return Err(ErrorKind::Invalid(format!(
            "an immediate bias is not supported on {}: pass a [P, 1] tile",
            ctx.target.core
        )))
        .at("bias");
    }
    if i.func == ActFunc::Reciprocal && i.bias.is_some() && !ctx.target.scalar_bias_immediate {
        return Err(ErrorKind::Invalid(
            "activation(reciprocal) takes no bias on NeuronCore-v2".into(),
        ))
        .at("bias");
    }
    if let ScalarOperand::Tile(s) = &i.scale {
        require_dtype("scale", s, &[DType::F32], "the activation scale is float32")?;
    }
    if let Some(ScalarOperand::Tile(b)) = &i.bias {
        let allowed: Vec<DType> = ALL_DTYPES.iter().copied().filter(|&d| d != DType::Tf32).collect();
        require_dtype("bias", b, &allowed, "the activation bias may not be tfloat32")?;
    }
    if let Some(res) = &i.reduce_res
        && (res.partitions != p || res.free_elems() != 1)
    {
        return Err(ErrorKind::ShapeMismatch(format!(
            "reduce_res must be [{p}, 1], got [{}, {}]",
            res.partitions,
            res.free_elems()
        )))
        .at("reduce_res");
    }
    let x = ctx.read_f32("src", &i.src)?;
    let scale = ctx.scalar_f32("scale", &i.scale, p)?;
    // No bias adds nothing: −0.0 is the additive identity (+0.0 would turn −0 inputs into +0).
    let mut bias = match &i.bias {
        Some(b) => ctx.scalar_f32("bias", b, p)?,
        None => vec![-0.0; p],
    };
    if i.func == ActFunc::Copy && ctx.numerics.emulate_act_copy_bias_bug {
        bias.iter_mut().for_each(|b| *b = -0.0);
    }
    let nm = *ctx.numerics;
    let lane0 = i.src.start_partition;
    if ctx.regs.act_acc.len() < lane0 + p {
        return Err(ErrorKind::PartitionOutOfRange {
            start: lane0,
            end: lane0 + p,
            max: ctx.regs.act_acc.len(),
        })
        .at("src");
    }
    let mut y = ctx.mem.scratch_f32(x.len());
    let mut sums = Vec::with_capacity(p);
    for part in 0..p {
        let (s, b) = (scale[part], bias[part]);
        let row = x.get(part * per..(part + 1) * per).unwrap_or(&[]);
        let sum = if nm.denormals == Denormals::Preserve {
            // Without flushing, every `apply_f32` step above is the plain fp32 operation and a
            // NaN canonicalization; dispatching the function once per row lets the compiler
            // inline it (same results, bit for bit — performance only).
            let y = &mut y;
            let model = nm.activation;
            let approx = model != ActivationModel::Accurate;
            match (i.func, i.acc == AccCmd::Idle) {
                (func, false) if approx => activate_row::<true>(row, s, b, y, |t| eval_with(model, func, t)),
                (func, true) if approx => activate_row::<false>(row, s, b, y, |t| eval_with(model, func, t)),
                (ActFunc::Exp, false) => activate_row::<true>(row, s, b, y, |t| eval(ActFunc::Exp, t)),
                (ActFunc::Exp, true) => activate_row::<false>(row, s, b, y, |t| eval(ActFunc::Exp, t)),
                (ActFunc::Square, true) => activate_row::<false>(row, s, b, y, |t| eval(ActFunc::Square, t)),
                (func, false) => activate_row::<true>(row, s, b, y, |t| eval(func, t)),
                (func, true) => activate_row::<false>(row, s, b, y, |t| eval(func, t)),
            }
        } else {
            let mut sum = 0.0f32;
            for &v in row {
                let t = apply_f32(AluOp::Add, apply_f32(AluOp::Multiply, v, s, &nm), b, &nm);
                let r = apply_f32(AluOp::Bypass, eval_with(nm.activation, i.func, t), 0.0, &nm);
                sum = apply_f32(AluOp::Add, sum, r, &nm);
                y.push(r);
            }
            sum
        };
        sums.push(sum);
    }
    ctx.write_f32("dst", &i.dst, &y)?;
    let produced = y.len();
    ctx.mem.recycle_f32(x);
    ctx.mem.recycle_f32(y);
    for (part, sum) in sums.into_iter().enumerate() {
        let acc = &mut ctx.regs.act_acc[lane0 + part];
        match i.acc {
            AccCmd::Idle => {}
            AccCmd::Reset => *acc = 0.0,
            AccCmd::Reduce => *acc = apply_f32(AluOp::Add, *acc, sum, &nm),
            AccCmd::ResetReduce => *acc = sum,
        }
    }
    if let Some(res) = &i.reduce_res {
        let acc: Vec<f32> = ctx.regs.act_acc[lane0..lane0 + p].to_vec();
        ctx.write_f32("reduce_res", res, &acc)?;
        ctx.cost_cycles(ctx.target.min_ii_cycles);
    }
    ctx.stats.flops += (2 * produced) as u64;
    ctx.cost_stream(per);
    Ok(())
}

/// One partition of [`activation`] with denormals preserved: `y = f(x·s + b)` appended to `y`,
/// and, when `SUM`, the index-order fp32 sum of the results (0 otherwise: an idle accumulator
/// never reads it) — `apply_f32` without its flush steps.
#[inline(always)]
fn activate_row<const SUM: bool>(row: &[f32], s: f32, b: f32, y: &mut Vec<f32>, f: impl Fn(f32) -> f32) -> f32 {
    let start = y.len();
    y.extend(row.iter().map(|&v| canon(f(canon(canon(v * s) + b)))));
    let mut sum = 0.0f32;
    if SUM {
        for &r in &y[start..] {
            sum = canon(sum + r);
        }
    }
    sum
}
