//! ScalarE (ACT): `activation` — `dst = func(src * scale + bias)` per lane, fp32 inside, cast on
//! write, with the per-partition accumulator registers for reduce commands.

use super::activation::eval;
use super::{Ctx, same_shape};
use crate::error::{AtOperand, ErrorKind, OpResult};
use crate::program::{AccCmd, ActFunc, Activation, ScalarOperand};

/// `y = func(x * scale + bias)`; `x*scale` and `+bias` are two fp32 operations (whether the
/// hardware fuses them is unpublished). With an accumulate command the free-axis sum of the fp32
/// `y` (before the cast) is added to the partition's accumulator in index order; `reduce_res`
/// receives the accumulator after the instruction.
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
        return Err(ErrorKind::Invalid("activation(reciprocal) takes no bias on NeuronCore-v2".into())).at("bias");
    }
    let x = ctx.read_f32("src", &i.src)?;
    let scale = ctx.scalar_f32("scale", &i.scale, p)?;
    let mut bias = match &i.bias {
        Some(b) => ctx.scalar_f32("bias", b, p)?,
        None => vec![0.0; p],
    };
    if i.func == ActFunc::Copy && ctx.numerics.emulate_act_copy_bias_bug {
        bias.iter_mut().for_each(|b| *b = 0.0);
    }
    let mut y = Vec::with_capacity(x.len());
    for part in 0..p {
        let mut sum = 0.0f32;
        for &v in &x[part * per..(part + 1) * per] {
            let r = eval(i.func, v * scale[part] + bias[part]);
            sum += r;
            y.push(r);
        }
        match i.acc {
            AccCmd::Idle => {}
            AccCmd::Reset => ctx.regs.act_acc[i.src.start_partition + part] = 0.0,
            AccCmd::Reduce => ctx.regs.act_acc[i.src.start_partition + part] += sum,
            AccCmd::ResetReduce => ctx.regs.act_acc[i.src.start_partition + part] = sum,
        }
    }
    ctx.write_f32("dst", &i.dst, &y)?;
    if let Some(res) = &i.reduce_res {
        if res.partitions != p || res.free_elems() != 1 {
            return Err(ErrorKind::ShapeMismatch(format!("reduce_res must be [{p}, 1]"))).at("reduce_res");
        }
        let acc: Vec<f32> = (0..p).map(|k| ctx.regs.act_acc[i.src.start_partition + k]).collect();
        ctx.write_f32("reduce_res", res, &acc)?;
        ctx.cost_cycles(ctx.target.min_ii_cycles);
    }
    ctx.stats.flops += (2 * y.len()) as u64;
    ctx.cost_stream(per);
    Ok(())
}
