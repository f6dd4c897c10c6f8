//! The `norm_softmax` family: `_softmax`, `_log_softmax`, `native_layer_norm`,
//! `native_group_norm`, `_native_batch_norm_legit` (and `.no_stats`,
//! `_native_batch_norm_legit_no_training`).
//!
//! Same layout as `reduction.rs` (whose helpers this reuses): the normalized elements of one row
//! (softmax: the `dim`; layer norm: the trailing `normalized_shape`; group norm: a group's
//! channels × spatial; batch norm: batch × spatial of one channel) lie on the free axis through
//! DMA access patterns, rows on partitions. Statistics are fp32; rows longer than one chunk are
//! reloaded per pass.
//!
//! * softmax: `m = max` (VectorE `tensor_reduce`), `e = exp(x − m)` (ScalarE activation with the
//!   `−m` bias tile), `s = Σ e`, `out = e · (1/s)` (VectorE reciprocal) — PyTorch's CPU kernel;
//!   log_softmax: `out = x − (m + log s)`. For f16/bf16 outputs the sum comes from the same
//!   activation's accumulator (sequential fp32, below half an output ulp); fp32 outputs keep a
//!   blocked sum in the shape of PyTorch's cascade.
//! * norms: `mean = Σx / N`, `var = Σ(x − mean)² / N` (two passes of blocked sums, biased as the
//!   ops use it; the squares from one ScalarE `Square` with a `−mean` bias),
//!   `rstd = rsqrt(var + eps)`, `y = (x − mean) · rstd · w + b`, the weight/bias read through
//!   broadcast access patterns (once per program when they do not depend on the row). Batch norm
//!   in eval mode uses the running statistics. (`bn_stats`/`bn_aggr` would take one pass, but
//!   their per-group sequential sums miss PyTorch's mean on large-mean rows: see
//!   docs/performance.md.)

use super::binary::dev;
use super::compensated;
use super::reduction::{
    Buf, CHUNK, Chunk, Ctx, Layout, RowTile, SUM_BLOCK, block_sum, block_sum_to, imm, load_chunk, load_col_op, load_op,
    reduce_into, store_col_op, store_op, tree_reduce, ts, tt,
};
use super::{LowerError, LowerRequest, Lowered, OutputSlot};
use crate::call::{TensorArg, Value};
use crate::dtype::{TorchDType, contiguous_strides};
use trnsim::{ActFunc, AluOp, DType, Engine, HbmRole, Op, Program, TargetName};

use super::tile::{Dim, Emitter, dma};

/// Max chunks per row.
const MAX_CHUNKS: usize = 1024;

/// A tensor argument by owned name, and its dtype.
fn name_dtype((t, m): TensorArg) -> (String, TorchDType) {
    (t.to_string(), m.dtype)
}

fn input(req: &LowerRequest<'_>) -> Result<(String, TorchDType, Vec<usize>), LowerError> {
    let (t, m) = match req.opt::<TensorArg>(0, "input")? {
        Some(x) => x,
        None => req.arg::<TensorArg>(0, "self")?,
    };
    if !m.dtype.is_float() {
        return Err(req.unsupported(format!("{} input", m.dtype)));
    }
    Ok((t.to_string(), m.dtype, m.shape.clone()))
}

/// Output `i` if it is a non-empty tensor.
fn out_opt(req: &LowerRequest<'_>, i: usize) -> Result<Option<(String, TorchDType)>, LowerError> {
    match req.outputs.get(i) {
        Some(OutputSlot::Tensor(t)) => {
            let m = req.tensor(t)?;
            if m.shape.iter().product::<usize>() == 0 {
                Ok(None)
            } else {
                Ok(Some((t.clone(), m.dtype)))
            }
        }
        _ => Ok(None),
    }
}

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    match req.op {
        "_softmax" | "_log_softmax" => softmax(req, target, req.op == "_log_softmax"),
        "native_layer_norm"
        | "native_group_norm"
        | "_native_batch_norm_legit"
        | "_native_batch_norm_legit.no_stats"
        | "_native_batch_norm_legit_no_training" => norm(req, target),
        "native_layer_norm_backward" => layer_norm_backward(req, target),
        "native_group_norm_backward" => group_norm_backward(req, target),
        _ => Err(LowerError::NotLowered(req.op.to_string())),
    }
}

fn declare(req: &LowerRequest<'_>, program: &mut Program, name: &str, role: HbmRole) -> Result<DType, LowerError> {
    let m = req.tensor(name)?;
    let d = dev(req, m.dtype)?;
    if !program.hbm.iter().any(|h| h.name == name) {
        program.declare(name, d, &m.shape, role);
    }
    Ok(d)
}

// ------------------------------------------------------------------------------------------------
// softmax / log_softmax

fn softmax(req: &LowerRequest<'_>, target: TargetName, log: bool) -> Result<Lowered, LowerError> {
    let (x_name, x_dtype, shape) = input(req)?;
    let ndim = shape.len();
    let d = req.dim(1, "dim", ndim)?;
    let half_to_float = req.arg_or(2, "half_to_float", false)?;
    let out = req.output_tensor(0)?.to_string();
    let out_meta = req.tensor(&out)?;
    if out_meta.shape != shape || (!half_to_float && out_meta.dtype != x_dtype) {
        return Err(req.invalid("output shape/dtype".into()));
    }
    let mut program = Program::new(target);
    let x_dev = declare(req, &mut program, &x_name, HbmRole::Input)?;
    let out_dev = declare(req, &mut program, &out, HbmRole::Output)?;
    let mut reduced = vec![false; ndim];
    if ndim > 0 {
        reduced[d] = true;
    }
    let layout = Layout::new(&shape, &reduced, true);
    let mut ctx = Ctx::new(target, program);
    let rows = layout.row_tiles(ctx.partitions);
    let chunks = layout.chunks(CHUNK);
    if chunks.len() > MAX_CHUNKS {
        return Err(req.unsupported("row too long".into()));
    }
    let nch = chunks.len().max(1);
    let f = DType::F32;
    let x = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let eb = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let tmp = Buf::new(&mut ctx.alloc, f, CHUNK / SUM_BLOCK + 1)?;
    let pm = Buf::new(&mut ctx.alloc, f, nch)?;
    let ps = Buf::new(&mut ctx.alloc, f, nch)?;
    let negm = Buf::new(&mut ctx.alloc, f, 1)?;
    let r = Buf::new(&mut ctx.alloc, f, 1)?;
    let lsr = Buf::new(&mut ctx.alloc, x_dev, 1)?;
    let v = Engine::Vector;
    let single = chunks.len() == 1;
    for rt in &rows {
        let p = rt.rows;
        if chunks.is_empty() {
            continue;
        }
        // Pass 1: max.
        for (c, ch) in chunks.iter().enumerate() {
            load_chunk(&mut ctx, &x, &x_name, x_dev, rt, ch);
            reduce_into(&mut ctx.e, &x, p, ch.elems(), AluOp::Max, &pm, c);
        }
        tree_reduce(&mut ctx.e, v, &pm, p, chunks.len(), AluOp::Max);
        ctx.e
            .tensor_scalar_imm(v, negm.at(p, 0, 1), pm.at(p, 0, 1), AluOp::Multiply, -1.0);
        // Pass 2: e = exp(x − m) and s = Σ e, one partial sum per chunk into `ps`.
        //
        // Fused: one ScalarE instruction whose accumulator adds the fp32 results in index order
        // (before the cast) and hands the chunk's sum to `reduce_res`, as an NKI kernel does.
        // A sequential fp32 sum of w ≤ CHUNK positive terms is off by at most w·2⁻²⁴ ≤ 2⁻¹²
        // relative, below half an ulp of an f16/bf16 output (2⁻¹¹/2⁻⁸), so for those outputs it
        // matches PyTorch's vectorized sum within tolerance. An fp32 output would show that
        // error directly (up to 1.2e-6 relative on the stress cases against rtol 1.3e-6), so
        // it keeps the blocked sum in the shape of PyTorch's cascade — except for chunks of at
        // most SUM_BLOCK elements, where the two orders are the same sequential sum.
        let fused_sum = matches!(out_dev, DType::Bf16 | DType::F16);
        for (c, ch) in chunks.iter().enumerate() {
            let w = ch.elems();
            if !single {
                load_chunk(&mut ctx, &x, &x_name, x_dev, rt, ch);
            }
            if fused_sum || w <= SUM_BLOCK {
                ctx.e.push(
                    Engine::Scalar,
                    Op::Activation(trnsim::Activation {
                        dst: eb.cols(p, 0, w),
                        func: ActFunc::Exp,
                        src: x.cols(p, 0, w),
                        bias: Some(trnsim::ScalarOperand::Tile(negm.col(p, 0))),
                        scale: imm(1.0),
                        acc: trnsim::AccCmd::ResetReduce,
                        reduce_res: Some(ps.col(p, c)),
                    }),
                );
            } else {
                ctx.e
                    .activation(eb.at(p, 0, w), ActFunc::Exp, x.at(p, 0, w), Some(negm.scalar(p, 0)));
                // e stays intact for the output: the sum goes to tmp.
                block_sum_to(&mut ctx.e, &eb, &tmp, p, w);
                ctx.e.tensor_copy(v, ps.at(p, c, 1), tmp.at(p, 0, 1));
            }
        }
        tree_reduce(&mut ctx.e, v, &ps, p, chunks.len(), AluOp::Add);
        if log {
            // ls = log(s); out = (x − m) − ls. PyTorch's CPU kernels differ by dim: over the
            // last dim (its `lastdim` kernel) the row sum is rounded to the input dtype before
            // the log; over any other dim (even with only size-1 dims after it) the sum stays
            // fp32. Measured against torch 2.15 with the generator's pins, bf16 and f16.
            if d + 1 >= ndim {
                ctx.e.tensor_copy(v, lsr.at(p, 0, 1), ps.at(p, 0, 1));
                ctx.e.activation(r.at(p, 0, 1), ActFunc::Log, lsr.at(p, 0, 1), None);
            } else {
                ctx.e.activation(r.at(p, 0, 1), ActFunc::Log, ps.at(p, 0, 1), None);
            }
            for ch in &chunks {
                let w = ch.elems();
                if !single {
                    load_chunk(&mut ctx, &x, &x_name, x_dev, rt, ch);
                }
                ctx.e.tensor_scalar(
                    v,
                    eb.at(p, 0, w),
                    x.at(p, 0, w),
                    AluOp::Subtract,
                    pm.scalar(p, 0),
                    Some((AluOp::Subtract, r.scalar(p, 0))),
                );
                store_op(&mut ctx, &eb, &out, out_dev, rt, ch, 1);
            }
        } else {
            ctx.e.reciprocal(r.at(p, 0, 1), ps.at(p, 0, 1));
            for ch in &chunks {
                let w = ch.elems();
                if !single {
                    load_chunk(&mut ctx, &x, &x_name, x_dev, rt, ch);
                    ctx.e
                        .activation(eb.at(p, 0, w), ActFunc::Exp, x.at(p, 0, w), Some(negm.scalar(p, 0)));
                }
                ctx.e
                    .tensor_scalar(v, eb.at(p, 0, w), eb.at(p, 0, w), AluOp::Multiply, r.scalar(p, 0), None);
                store_op(&mut ctx, &eb, &out, out_dev, rt, ch, 1);
            }
        }
    }
    Ok(Lowered::new(ctx.e.finish()))
}

// ------------------------------------------------------------------------------------------------
// layer / group / batch norm forward

/// Operands of the norm layouts: 0 = x (and y), 1 = statistics (mean/rstd, running stats),
/// 2 = weight/bias.
fn dim(size: usize, x: usize, stat: usize, w: usize) -> Dim {
    Dim {
        size,
        strides: vec![x as i64, stat as i64, w as i64],
    }
}

struct NormCall {
    x: (String, TorchDType),
    shape: Vec<usize>,
    weight: Option<(String, TorchDType)>,
    bias: Option<(String, TorchDType)>,
    eps: f64,
    /// Running stats (eval-mode batch norm): mean, var.
    running: Option<((String, TorchDType), (String, TorchDType))>,
    layout: Layout,
    /// Number of elements per row (N of the statistics).
    n: usize,
    /// `y = x·scale + bias` with `scale = rstd·w`, `bias = b − scale·mean` per element (PyTorch's
    /// CPU group/batch norm), instead of `(x − mean)·rstd·w + b` (its layer norm).
    scale_bias: bool,
    /// Batch norm keeps its statistics in the parameters' dtype and normalizes with those.
    round_stats: bool,
}

fn norm(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (x_name, x_dtype, shape) = input(req)?;
    let x = (x_name, x_dtype);
    let call = match req.op {
        "native_layer_norm" => {
            let ns: Vec<usize> = req
                .arg::<Vec<i64>>(1, "normalized_shape")?
                .iter()
                .map(|&i| i as usize)
                .collect();
            let k = ns.len();
            if k > shape.len() || shape[shape.len() - k..] != ns[..] {
                return Err(req.invalid("normalized_shape".into()));
            }
            let m = shape.len() - k;
            let cs = contiguous_strides(&shape);
            let scs = contiguous_strides(&shape[..m]);
            let wcs = contiguous_strides(&ns);
            let kept = (0..m).map(|d| dim(shape[d], cs[d], scs[d], 0)).collect();
            let red = (m..shape.len()).map(|d| dim(shape[d], cs[d], 0, wcs[d - m])).collect();
            NormCall {
                x,
                shape: shape.clone(),
                weight: req.opt(2, "weight")?.map(name_dtype),
                bias: req.opt(3, "bias")?.map(name_dtype),
                eps: req.arg::<f64>(4, "eps")?,
                running: None,
                layout: Layout::from_dims(kept, red),
                n: ns.iter().product(),
                scale_bias: false,
                round_stats: false,
            }
        }
        "native_group_norm" => {
            let nb = req.arg::<i64>(3, "N")? as usize;
            let c = req.arg::<i64>(4, "C")? as usize;
            let hw = req.arg::<i64>(5, "HxW")? as usize;
            let g = req.arg::<i64>(6, "group")? as usize;
            if g == 0 || !c.is_multiple_of(g) || nb * c * hw != shape.iter().product::<usize>() {
                return Err(req.invalid("group norm sizes".into()));
            }
            let cg = c / g;
            let kept = vec![dim(nb, c * hw, g, 0), dim(g, cg * hw, 1, cg)];
            let red = vec![dim(cg, hw, 0, 1), dim(hw, 1, 0, 0)];
            NormCall {
                x,
                shape: shape.clone(),
                weight: req.opt(1, "weight")?.map(name_dtype),
                bias: req.opt(2, "bias")?.map(name_dtype),
                eps: req.arg::<f64>(7, "eps")?,
                running: None,
                layout: Layout::from_dims(kept, red),
                n: cg * hw,
                scale_bias: true,
                round_stats: false,
            }
        }
        _ => {
            // Batch norm: x [N, C, *].
            if shape.len() < 2 {
                return Err(req.invalid("batch norm needs ≥ 2 dims".into()));
            }
            let (nb, c) = (shape[0], shape[1]);
            let hw: usize = shape[2..].iter().product();
            let (running, training, eps_pos) = match req.op {
                "_native_batch_norm_legit" => {
                    let rm = req.opt(3, "running_mean")?.map(name_dtype);
                    let rv = req.opt(4, "running_var")?.map(name_dtype);
                    let training = req.arg::<bool>(5, "training")?;
                    (rm.zip(rv), training, 7)
                }
                "_native_batch_norm_legit.no_stats" => (None, req.arg::<bool>(3, "training")?, 5),
                _ => {
                    let rm = req.opt(3, "running_mean")?.map(name_dtype);
                    let rv = req.opt(4, "running_var")?.map(name_dtype);
                    (rm.zip(rv), false, 6)
                }
            };
            let running = if training {
                None
            } else {
                Some(running.ok_or_else(|| req.unsupported("eval without running stats".into()))?)
            };
            let kept = vec![dim(c, hw, 1, 1)];
            let red = vec![dim(nb, c * hw, 0, 0), dim(hw, 1, 0, 0)];
            NormCall {
                x,
                shape: shape.clone(),
                weight: req.opt(1, "weight")?.map(name_dtype),
                bias: req.opt(2, "bias")?.map(name_dtype),
                eps: req.arg::<f64>(eps_pos, "eps")?,
                running,
                layout: Layout::from_dims(kept, red),
                n: nb * hw,
                scale_bias: true,
                round_stats: true,
            }
        }
    };
    emit_norm(req, target, &call)
}

fn emit_norm(req: &LowerRequest<'_>, target: TargetName, call: &NormCall) -> Result<Lowered, LowerError> {
    let mut program = Program::new(target);
    let x_dev = declare(req, &mut program, &call.x.0, HbmRole::Input)?;
    let _ = &call.shape;
    let w_dev = match &call.weight {
        Some((n, _)) => Some(declare(req, &mut program, n, HbmRole::Input)?),
        None => None,
    };
    let b_dev = match &call.bias {
        Some((n, _)) => Some(declare(req, &mut program, n, HbmRole::Input)?),
        None => None,
    };
    let run_dev = match &call.running {
        Some(((m, _), (v, _))) => Some((
            declare(req, &mut program, m, HbmRole::Input)?,
            declare(req, &mut program, v, HbmRole::Input)?,
        )),
        None => None,
    };
    let y = req.output_tensor(0)?.to_string();
    let y_dev = declare(req, &mut program, &y, HbmRole::Output)?;
    let mut stat_outs = Vec::new();
    for i in 1..3 {
        if let Some((name, _)) = out_opt(req, i)? {
            let d = declare(req, &mut program, &name, HbmRole::Output)?;
            stat_outs.push((name, d, i));
        } else if let Some(OutputSlot::Tensor(t)) = req.outputs.get(i) {
            // Empty outputs (eval-mode batch norm) are declared but hold nothing.
            declare(req, &mut program, t, HbmRole::Output)?;
        }
    }
    let mut ctx = Ctx::new(target, program);
    let rows = call.layout.row_tiles(ctx.partitions);
    let chunks = call.layout.chunks(CHUNK);
    if chunks.len() > MAX_CHUNKS {
        return Err(req.unsupported("rows too long".into()));
    }
    let nch = chunks.len().max(1);
    let f = DType::F32;
    let x = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let wb = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let tmp = Buf::new(&mut ctx.alloc, f, CHUNK / SUM_BLOCK + 1)?;
    let parts = Buf::new(&mut ctx.alloc, f, nch)?;
    let mean = Buf::new(&mut ctx.alloc, f, 1)?;
    let rstd = Buf::new(&mut ctx.alloc, f, 1)?;
    let rmean = Buf::new(&mut ctx.alloc, f, 1)?;
    let rrstd = Buf::new(&mut ctx.alloc, f, 1)?;
    let sc = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let bi = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let neg_mean = Buf::new(&mut ctx.alloc, f, 1)?;
    // Layer norm's weight and bias are the same for every row: with a single chunk they are
    // loaded once, broadcast over the partitions, instead of once per row tile.
    let params_row_invariant =
        chunks.len() == 1 && !call.scale_bias && rows.iter().all(|rt| rt.base[2] == 0 && rt.pstride[2] == 0);
    let resident = |ctx: &mut Ctx, param: &Option<(String, TorchDType)>, dev: Option<DType>| match (
        param,
        dev,
        rows.iter().max_by_key(|rt| rt.rows),
    ) {
        (Some((name, _)), Some(d), Some(widest)) if params_row_invariant => {
            let buf = Buf::new(&mut ctx.alloc, f, CHUNK)?;
            load_op(ctx, &buf, name, d, widest, &chunks[0], 2);
            Ok::<_, LowerError>(Some(buf))
        }
        _ => Ok(None),
    };
    let weight_resident = resident(&mut ctx, &call.weight, w_dev)?;
    let bias_resident = resident(&mut ctx, &call.bias, b_dev)?;
    let v = Engine::Vector;
    let inv_n = if call.n == 0 { 1e39 } else { 1.0 / call.n as f64 };
    let single = chunks.len() == 1;
    // Training-mode batch norm of f32: PyTorch's CPU kernel sums x and the fp32 squares
    // (x − mean)² in double, then rounds `mean = sum / N` and the sum of squares to fp32 and
    // divides that by N in fp32. Here the sums are compensated pairs and the divisions nearly
    // correctly rounded (compensated.rs), so the statistics follow the CPU's, bit for bit
    // except near ties.
    let comp = match rows.iter().map(|r| r.rows).max() {
        Some(p_max) if call.round_stats && call.running.is_none() && call.x.1 == TorchDType::F32 => Some((
            compensated::Scratch::new(&mut ctx.e, &mut ctx.alloc, p_max)?,
            Buf::new(&mut ctx.alloc, f, nch)?,
            Buf::new(&mut ctx.alloc, f, nch)?,
            Buf::new(&mut ctx.alloc, f, 2)?,
        )),
        _ => None,
    };
    let sum_pass = |ctx: &mut Ctx, rt: &RowTile, center: bool| {
        let p = rt.rows;
        for (c, ch) in chunks.iter().enumerate() {
            let w = ch.elems();
            if !(single && center) {
                load_chunk(ctx, &x, &call.x.0, x_dev, rt, ch);
            }
            let src = if center {
                // wb = (x − mean)² in one ScalarE pass: Square(x + (−mean)). x + (−mean) rounds
                // exactly like x − mean, and the square of an fp32 value is exact in f64 before
                // its one rounding to fp32, so this is bit-identical to a VectorE subtract then
                // multiply, at half the passes.
                ctx.e.activation(
                    wb.at(p, 0, w),
                    ActFunc::Square,
                    x.at(p, 0, w),
                    Some(neg_mean.scalar(p, 0)),
                );
                wb
            } else {
                // Summed without a copy: x stays intact for the later passes.
                x
            };
            if let Some((sc, hi, lo, _)) = &comp {
                compensated::sum2(&mut ctx.e, sc, &src, p, w, hi.col(p, c), lo.col(p, c));
            } else {
                block_sum_to(&mut ctx.e, &src, &tmp, p, w);
                ctx.e.tensor_copy(v, parts.at(p, c, 1), tmp.at(p, 0, 1));
            }
        }
        if let Some((sc, hi, lo, hl)) = &comp {
            // The pair (H, L) into `hl`; parts column 0 = fl(H + L).
            compensated::sum2_parts(&mut ctx.e, sc, hi, lo, p, chunks.len(), hl.col(p, 0), hl.col(p, 1));
            ctx.e
                .tensor_tensor(v, parts.at(p, 0, 1), hl.at(p, 0, 1), hl.at(p, 1, 1), AluOp::Add);
        } else {
            tree_reduce(&mut ctx.e, v, &parts, p, chunks.len(), AluOp::Add);
        }
    };
    for rt in &rows {
        let p = rt.rows;
        if chunks.is_empty() {
            continue;
        }
        match (&call.running, run_dev) {
            (Some(((m, _), (var, _))), Some((md, vd))) => {
                load_col_op(&mut ctx, &mean, 0, m, md, rt, 1);
                load_col_op(&mut ctx, &rstd, 0, var, vd, rt, 1);
            }
            _ => {
                sum_pass(&mut ctx, rt, false);
                if let Some((sc, _, _, hl)) = &comp {
                    compensated::div_pair(
                        &mut ctx.e,
                        sc,
                        p,
                        hl.col(p, 0),
                        Some(hl.col(p, 1)),
                        call.n as f64,
                        mean.col(p, 0),
                    );
                } else {
                    ctx.e
                        .tensor_scalar_imm(v, mean.at(p, 0, 1), parts.at(p, 0, 1), AluOp::Multiply, inv_n);
                }
                ctx.e
                    .tensor_scalar_imm(v, neg_mean.at(p, 0, 1), mean.at(p, 0, 1), AluOp::Multiply, -1.0);
                sum_pass(&mut ctx, rt, true);
                // Batch norm with bf16 statistics (input and parameters all bf16): PyTorch's CPU
                // kernel keeps the sum of squares as bf16 and divides it by N in bf16 (c10's
                // `BFloat16 / int64_t` rounds its result) before `1/sqrt(var + eps)` in fp32.
                // Both roundings are on the engines here. Measured against PyTorch 2.15's
                // outputs: every save_invstd of 300 random bf16 calls matches only with both
                // roundings; its f16 kernel keeps the variance in fp32 (300 of 300 match
                // without them).
                let stat_dtype = stat_outs.iter().find(|(_, _, i)| *i == 2).map(|(_, d, _)| *d);
                let round_var = match stat_dtype {
                    Some(d) if call.round_stats && d == DType::Bf16 => Some(Buf {
                        slot: rrstd.slot,
                        dtype: d,
                        cols: 1,
                    }),
                    _ => None,
                };
                if let Some(rb) = &round_var {
                    ctx.e.tensor_copy(v, rb.at(p, 0, 1), parts.at(p, 0, 1));
                    ctx.e.tensor_copy(v, parts.at(p, 0, 1), rb.at(p, 0, 1));
                }
                if let Some((sc, _, _, _)) = &comp {
                    // fp32 `var_sum / N`, as the CPU divides.
                    compensated::div_pair(&mut ctx.e, sc, p, parts.col(p, 0), None, call.n as f64, rstd.col(p, 0));
                } else {
                    ctx.e
                        .tensor_scalar_imm(v, rstd.at(p, 0, 1), parts.at(p, 0, 1), AluOp::Multiply, inv_n);
                }
                if let Some(rb) = &round_var {
                    ctx.e.tensor_copy(v, rb.at(p, 0, 1), rstd.at(p, 0, 1));
                    ctx.e.tensor_copy(v, rstd.at(p, 0, 1), rb.at(p, 0, 1));
                }
            }
        }
        if call.running.is_some() {
            // Eval batch norm: PyTorch's CPU kernel takes `1 / std::sqrt(running_var + eps)` in
            // the fp32 parameter type — two roundings (sqrt, then the division), which a
            // correctly rounded rsqrt misses by an ulp now and then. Its `x·α + β` form (β = b −
            // mean·α) amplifies that ulp of α where y is small (31.8 against the CPU's 2.2 ulp
            // on one OpInfo sample), so the same two roundings here: GpSimd `pow(·, 0.5)` (f64,
            // rounded once: the correctly rounded sqrt), then VectorE's correctly rounded
            // reciprocal.
            ctx.e.tensor_scalar_imm2(
                Engine::Gpsimd,
                rstd.at(p, 0, 1),
                rstd.at(p, 0, 1),
                (AluOp::Add, call.eps),
                (AluOp::Pow, 0.5),
            );
            ctx.e.reciprocal(rstd.at(p, 0, 1), rstd.at(p, 0, 1));
        } else {
            // rstd = rsqrt(var + eps)
            ctx.e.tensor_scalar_imm2(
                v,
                rstd.at(p, 0, 1),
                rstd.at(p, 0, 1),
                (AluOp::Add, call.eps),
                (AluOp::Rsqrt, 0.0),
            );
        }
        if call.round_stats {
            for (name, d, i) in &stat_outs {
                if *d != f {
                    let st = if *i == 1 { &mean } else { &rstd };
                    let rb = if *i == 1 { &rmean } else { &rrstd };
                    let rb = Buf {
                        slot: rb.slot,
                        dtype: *d,
                        cols: 1,
                    };
                    let _ = name;
                    ctx.e.tensor_copy(v, rb.at(p, 0, 1), st.at(p, 0, 1));
                    ctx.e.tensor_copy(v, st.at(p, 0, 1), rb.at(p, 0, 1));
                }
            }
        }
        if call.scale_bias {
            for ch in &chunks {
                let w = ch.elems();
                // sc = rstd · w;  bi = b − sc · mean;  y = x · sc + bi
                match (&call.weight, w_dev) {
                    (Some((name, _)), Some(d)) => {
                        load_op(&mut ctx, &sc, name, d, rt, ch, 2);
                        ctx.e.tensor_scalar(
                            v,
                            sc.at(p, 0, w),
                            sc.at(p, 0, w),
                            AluOp::Multiply,
                            rstd.scalar(p, 0),
                            None,
                        );
                    }
                    _ => {
                        ctx.e.memset(v, sc.cols(p, 0, w), 0.0);
                        ctx.e
                            .tensor_scalar(v, sc.at(p, 0, w), sc.at(p, 0, w), AluOp::Add, rstd.scalar(p, 0), None);
                    }
                }
                ctx.e.tensor_scalar(
                    v,
                    bi.at(p, 0, w),
                    sc.at(p, 0, w),
                    AluOp::Multiply,
                    mean.scalar(p, 0),
                    None,
                );
                match (&call.bias, b_dev) {
                    (Some((name, _)), Some(d)) => {
                        load_op(&mut ctx, &wb, name, d, rt, ch, 2);
                        ctx.e
                            .tensor_tensor(v, bi.at(p, 0, w), wb.at(p, 0, w), bi.at(p, 0, w), AluOp::Subtract);
                    }
                    _ => {
                        ctx.e
                            .tensor_scalar_imm(v, bi.at(p, 0, w), bi.at(p, 0, w), AluOp::Multiply, -1.0);
                    }
                }
                if !single || call.running.is_some() {
                    load_chunk(&mut ctx, &x, &call.x.0, x_dev, rt, ch);
                }
                ctx.e
                    .tensor_tensor(v, wb.at(p, 0, w), x.at(p, 0, w), sc.at(p, 0, w), AluOp::Multiply);
                ctx.e
                    .tensor_tensor(v, wb.at(p, 0, w), wb.at(p, 0, w), bi.at(p, 0, w), AluOp::Add);
                store_op(&mut ctx, &wb, &y, y_dev, rt, ch, 0);
            }
        }
        // y = (x − mean) · rstd · w + b
        for ch in chunks.iter().filter(|_| !call.scale_bias) {
            let w = ch.elems();
            if !single || call.running.is_some() {
                load_chunk(&mut ctx, &x, &call.x.0, x_dev, rt, ch);
            }
            let y_buf = wb;
            ctx.e.tensor_scalar(
                v,
                y_buf.at(p, 0, w),
                x.at(p, 0, w),
                AluOp::Subtract,
                mean.scalar(p, 0),
                Some((AluOp::Multiply, rstd.scalar(p, 0))),
            );
            for (param, d, resident, op) in [
                (&call.weight, w_dev, weight_resident, AluOp::Multiply),
                (&call.bias, b_dev, bias_resident, AluOp::Add),
            ] {
                let operand = match (param, d, resident) {
                    (_, _, Some(buf)) => buf,
                    (Some((name, _)), Some(d), None) => {
                        // The parameter chunk into x (x is reloaded for every chunk anyway, or
                        // no longer needed).
                        load_op(&mut ctx, &x, name, d, rt, ch, 2);
                        x
                    }
                    _ => continue,
                };
                ctx.e
                    .tensor_tensor(v, y_buf.at(p, 0, w), y_buf.at(p, 0, w), operand.at(p, 0, w), op);
            }
            store_op(&mut ctx, &y_buf, &y, y_dev, rt, ch, 0);
            if single && call.running.is_none() && (call.weight.is_some() || call.bias.is_some()) {
                // x was overwritten by a parameter: nothing else reads it for this row tile.
            }
        }
        for (name, d, i) in &stat_outs {
            let src = if *i == 1 { &mean } else { &rstd };
            store_col_op(&mut ctx, src, 0, name, *d, rt, 1);
        }
    }
    let _ = Chunk::elems;
    Ok(Lowered::new(ctx.e.finish()))
}

/// The non-tensor results of a norm backward, derived from its `output_mask` argument (as
/// `conv_backward` does): each gradient the mask turns off is `None`. A non-tensor output the
/// mask asks for is an invalid call.
fn masked_out_values(
    req: &LowerRequest<'_>,
    pos: usize,
    name: &str,
) -> Result<std::collections::BTreeMap<usize, Value>, LowerError> {
    let mask = req.arg::<Vec<bool>>(pos, name)?;
    let mut values = std::collections::BTreeMap::new();
    for (i, slot) in req.outputs.iter().enumerate() {
        if *slot == OutputSlot::NonTensor {
            if mask.get(i).copied().unwrap_or(true) {
                return Err(req.invalid(format!("output {i} is not a tensor but `{name}` asks for it")));
            }
            values.insert(i, Value::None(()));
        }
    }
    Ok(values)
}

/// Device dtypes of a norm backward's inputs and its three optional outputs (`None` where
/// `output_mask` leaves an output out: it is declared, so the program is complete, but not
/// written).
struct BackwardIo {
    dy_dev: DType,
    x_dev: DType,
    mean_dev: DType,
    rstd_dev: DType,
    w_dev: Option<DType>,
    outs: Vec<Option<(String, DType)>>,
}

/// Declares a norm backward's HBM tensors (`grad_out, input, mean, rstd`, the optional weight,
/// and the outputs) in a new program for `target`, and returns the lowering context over it.
fn backward_ctx(
    req: &LowerRequest<'_>,
    target: TargetName,
    [dy, x, mean, rstd]: [&str; 4],
    weight: Option<&str>,
) -> Result<(Ctx, BackwardIo), LowerError> {
    let mut program = Program::new(target);
    let dy_dev = declare(req, &mut program, dy, HbmRole::Input)?;
    let x_dev = declare(req, &mut program, x, HbmRole::Input)?;
    let mean_dev = declare(req, &mut program, mean, HbmRole::Input)?;
    let rstd_dev = declare(req, &mut program, rstd, HbmRole::Input)?;
    let w_dev = match weight {
        Some(w) => Some(declare(req, &mut program, w, HbmRole::Input)?),
        None => None,
    };
    let mut outs = Vec::new();
    for i in 0..3 {
        match out_opt(req, i)? {
            Some((name, _)) => {
                let d = declare(req, &mut program, &name, HbmRole::Output)?;
                outs.push(Some((name, d)));
            }
            None => {
                if let Some(OutputSlot::Tensor(t)) = req.outputs.get(i) {
                    declare(req, &mut program, t, HbmRole::Output)?;
                }
                outs.push(None);
            }
        }
    }
    let io = BackwardIo {
        dy_dev,
        x_dev,
        mean_dev,
        rstd_dev,
        w_dev,
        outs,
    };
    Ok((Ctx::new(target, program), io))
}

// ------------------------------------------------------------------------------------------------
// layer norm backward

/// `native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
/// output_mask)`, PyTorch's CPU formulas per row (rows on partitions, fp32):
/// `ds = Σ dy·w·x`, `db = Σ dy·w`, `b = (db·mean − ds)·rstd³/N`, `c = −b·mean − db·rstd/N`,
/// `dx = rstd·dy·w + b·x + c`; across rows (GpSimdE `tensor_partition_reduce`, accumulated over
/// row tiles): `dw = Σ dy·(x − mean)·rstd`, `db = Σ dy`.
pub fn layer_norm_backward(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (dy_name, _, shape) = input(req)?;
    let (x_name, x_dtype) = name_dtype(req.arg(1, "input")?);
    if req.tensor(&x_name)?.shape != shape || !x_dtype.is_float() {
        return Err(req.invalid("input/grad_out shapes".into()));
    }
    let ns: Vec<usize> = req
        .arg::<Vec<i64>>(2, "normalized_shape")?
        .iter()
        .map(|&i| i as usize)
        .collect();
    let k = ns.len();
    if k > shape.len() || shape[shape.len() - k..] != ns[..] {
        return Err(req.invalid("normalized_shape".into()));
    }
    let (mean_name, _) = name_dtype(req.arg(3, "mean")?);
    let (rstd_name, _) = name_dtype(req.arg(4, "rstd")?);
    let weight = req.opt(5, "weight")?.map(name_dtype);
    let m = shape.len() - k;
    let n: usize = ns.iter().product();
    if n > CHUNK {
        return Err(req.unsupported(format!("normalized size {n} > {CHUNK}")));
    }
    let cs = contiguous_strides(&shape);
    let scs = contiguous_strides(&shape[..m]);
    let wcs = contiguous_strides(&ns);
    let kept = (0..m).map(|d| dim(shape[d], cs[d], scs[d], 0)).collect();
    let red = (m..shape.len()).map(|d| dim(shape[d], cs[d], 0, wcs[d - m])).collect();
    let layout = Layout::from_dims(kept, red);

    let names = [dy_name.as_str(), &x_name, &mean_name, &rstd_name];
    let (mut ctx, io) = backward_ctx(req, target, names, weight.as_ref().map(|(w, _)| w.as_str()))?;
    let rows = layout.row_tiles(ctx.partitions);
    let chunks = layout.chunks(CHUNK);
    if chunks.len() != 1 || rows.is_empty() {
        return Ok(Lowered::new(ctx.e.finish()));
    }
    let ch = &chunks[0];
    let w = ch.elems();
    let f = DType::F32;
    let (v, g) = (Engine::Vector, Engine::Gpsimd);
    let dy = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let x = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let wt = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let gb = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let t = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let tmp = Buf::new(&mut ctx.alloc, f, CHUNK / SUM_BLOCK + 1)?;
    let red1 = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let acc_w = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let acc_b = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let st = Buf::new(&mut ctx.alloc, f, 8)?;
    // Columns of `st`: 0 mean, 1 rstd, 2 db, 3 ds, 4 b, 5 c, 6 scratch.
    let scale = 1.0 / n as f64;
    for (ri, rt) in rows.iter().enumerate() {
        let p = rt.rows;
        load_chunk(&mut ctx, &dy, &dy_name, io.dy_dev, rt, ch);
        load_chunk(&mut ctx, &x, &x_name, io.x_dev, rt, ch);
        load_col_op(&mut ctx, &st, 0, &mean_name, io.mean_dev, rt, 1);
        load_col_op(&mut ctx, &st, 1, &rstd_name, io.rstd_dev, rt, 1);
        // gb = dy · w
        match (&weight, io.w_dev) {
            (Some((wn, _)), Some(d)) => {
                load_op(&mut ctx, &wt, wn, d, rt, ch, 2);
                ctx.e
                    .tensor_tensor(v, gb.at(p, 0, w), dy.at(p, 0, w), wt.at(p, 0, w), AluOp::Multiply);
            }
            _ => {
                ctx.e.tensor_copy(v, gb.at(p, 0, w), dy.at(p, 0, w));
            }
        }
        if let Some((dx_name, dx_dev)) = &io.outs[0] {
            // db = Σ gb; ds = Σ gb·x
            ctx.e.tensor_copy(v, t.at(p, 0, w), gb.at(p, 0, w));
            block_sum(&mut ctx.e, &t, &tmp, p, w);
            ctx.e.tensor_copy(v, st.at(p, 2, 1), t.at(p, 0, 1));
            ctx.e
                .tensor_tensor(v, t.at(p, 0, w), gb.at(p, 0, w), x.at(p, 0, w), AluOp::Multiply);
            block_sum(&mut ctx.e, &t, &tmp, p, w);
            ctx.e.tensor_copy(v, st.at(p, 3, 1), t.at(p, 0, 1));
            backward_coefficients(&mut ctx.e, &st, p, 2, 3, scale);
            // dx = rstd·dy·w + b·x + c
            let dx = BackwardDx {
                t: &t,
                scratch: &red1,
                x: &x,
                st: &st,
                p,
                w,
            };
            backward_dx(&mut ctx.e, &dx, &dy, weight.is_some().then_some(&wt));
            store_op(&mut ctx, &t, dx_name, *dx_dev, rt, ch, 0);
        }
        // Cross-row sums: dw (= Σ dy·(x − mean)·rstd) and db (= Σ dy).
        for (o, acc) in [(1usize, &acc_w), (2, &acc_b)] {
            if io.outs[o].is_none() {
                continue;
            }
            let src = if o == 1 {
                // dy · (a·x + b), b = −a·mean (PyTorch's CPU form)
                ctx.e
                    .tensor_tensor(v, st.at(p, 7, 1), st.at(p, 1, 1), st.at(p, 0, 1), AluOp::Multiply);
                ctx.e
                    .tensor_scalar_imm(v, st.at(p, 7, 1), st.at(p, 7, 1), AluOp::Multiply, -1.0);
                ctx.e.tensor_scalar(
                    v,
                    t.at(p, 0, w),
                    x.at(p, 0, w),
                    AluOp::Multiply,
                    st.scalar(p, 1),
                    Some((AluOp::Add, st.scalar(p, 7))),
                );
                ctx.e
                    .tensor_tensor(v, t.at(p, 0, w), dy.at(p, 0, w), t.at(p, 0, w), AluOp::Multiply);
                t
            } else {
                dy
            };
            let out_d = io.outs[o].as_ref().map(|(_, d)| *d).unwrap_or(f);
            if out_d != f {
                // PyTorch accumulates reduced-precision dgamma/dbeta row by row in the output
                // dtype: the same here, each row moved to partition 0 by DMA, added on VectorE
                // with the cast on write.
                let lp = Buf { dtype: out_d, ..*acc };
                for r in 0..p {
                    let row = trnsim::AccessPattern::sbuf(f, r, 1, src.slot.offset, vec![[1, w as i64]]);
                    ctx.e.push(Engine::Dma, dma(red1.cols(1, 0, w), row));
                    if ri == 0 && r == 0 {
                        ctx.e.tensor_copy(v, lp.at(1, 0, w), red1.at(1, 0, w));
                    } else {
                        ctx.e
                            .tensor_tensor(v, lp.at(1, 0, w), lp.at(1, 0, w), red1.at(1, 0, w), AluOp::Add);
                    }
                }
                continue;
            }
            let dst = if ri == 0 { *acc } else { red1 };
            ctx.e.push(
                g,
                Op::TensorPartitionReduce(trnsim::TensorPartitionReduce {
                    dst: dst.cols(1, 0, w),
                    src: src.cols(p, 0, w),
                    op: AluOp::Add,
                }),
            );
            if ri > 0 {
                ctx.e
                    .tensor_tensor(v, acc.at(1, 0, w), acc.at(1, 0, w), red1.at(1, 0, w), AluOp::Add);
            }
        }
    }
    for (o, acc) in [(1usize, &acc_w), (2, &acc_b)] {
        if let Some((name, d)) = &io.outs[o] {
            let one = RowTile {
                base: vec![0; 3],
                rows: 1,
                pstride: vec![0; 3],
            };
            let src = Buf {
                dtype: if *d != f { *d } else { f },
                ..*acc
            };
            store_op(&mut ctx, &src, name, *d, &one, ch, 2);
        }
    }
    let mut lowered = Lowered::new(ctx.e.finish());
    lowered.values = masked_out_values(req, 7, "output_mask")?;
    Ok(lowered)
}

// ------------------------------------------------------------------------------------------------
// group norm backward

/// `native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group,
/// output_mask)`, PyTorch's CPU formulas. Rows = groups on partitions (one batch index per row
/// tile), free = the group's `D = C/G` channels × `HxW`:
/// `ds[c] = Σ_hw dy·x`, `db[c] = Σ_hw dy` (VectorE `tensor_reduce` over the inner axis);
/// `dγ[c] += (ds − db·mean)·rstd`, `dβ[c] += db` accumulated over the batch tiles (same
/// partition layout, so no cross-partition reduction); `dx = c1·dy + c2·x + c3` with
/// `c1 = rstd·γ`, `c2 = (Σγ·db · mean − Σγ·ds)·rstd³/(D·HxW)`, `c3 = −c2·mean − Σγ·db·rstd/(D·HxW)`.
pub fn group_norm_backward(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (dy_name, _, shape) = input(req)?;
    let (x_name, _) = name_dtype(req.arg(1, "input")?);
    let (mean_name, _) = name_dtype(req.arg(2, "mean")?);
    let (rstd_name, _) = name_dtype(req.arg(3, "rstd")?);
    let weight = req.opt(4, "weight")?.map(name_dtype);
    let nb = req.arg::<i64>(5, "N")? as usize;
    let c = req.arg::<i64>(6, "C")? as usize;
    let hw = req.arg::<i64>(7, "HxW")? as usize;
    let g = req.arg::<i64>(8, "group")? as usize;
    if g == 0 || !c.is_multiple_of(g) || nb * c * hw != shape.iter().product::<usize>() {
        return Err(req.invalid("group norm sizes".into()));
    }
    let d = c / g;
    let w = d * hw;
    if w > CHUNK || hw == 0 {
        return Err(req.unsupported(format!("group of {w} elements")));
    }
    let names = [dy_name.as_str(), &x_name, &mean_name, &rstd_name];
    let (mut ctx, io) = backward_ctx(req, target, names, weight.as_ref().map(|(w, _)| w.as_str()))?;
    let f = DType::F32;
    let v = Engine::Vector;
    let dy = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let x = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let t = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let u = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let gam = Buf::new(&mut ctx.alloc, f, CHUNK)?;
    let ds = Buf::new(&mut ctx.alloc, f, d)?;
    let db = Buf::new(&mut ctx.alloc, f, d)?;
    let gd = Buf::new(&mut ctx.alloc, f, d)?;
    let acc_w = Buf::new(&mut ctx.alloc, f, d)?;
    let acc_b = Buf::new(&mut ctx.alloc, f, d)?;
    let st = Buf::new(&mut ctx.alloc, f, 8)?;
    let s = 1.0 / w as f64;
    let parts = ctx.partitions;
    let inner = vec![[hw as i64, d as i64], [1, hw as i64]];
    for g0 in (0..g).step_by(parts) {
        let p = (g - g0).min(parts);
        for n in 0..nb {
            let xb = ((n * c + g0 * d) * hw) as u64;
            let hbm =
                |name: &str, dt: DType| trnsim::AccessPattern::hbm(name, dt, xb, p, w as i64, vec![[1, w as i64]]);
            ctx.e.push(Engine::Dma, dma(dy.cols(p, 0, w), hbm(&dy_name, io.dy_dev)));
            ctx.e.push(Engine::Dma, dma(x.cols(p, 0, w), hbm(&x_name, io.x_dev)));
            let stat =
                |name: &str, dt: DType| trnsim::AccessPattern::hbm(name, dt, (n * g + g0) as u64, p, 1, vec![[1, 1]]);
            ctx.e
                .push(Engine::Dma, dma(st.col(p, 0), stat(&mean_name, io.mean_dev)));
            ctx.e
                .push(Engine::Dma, dma(st.col(p, 1), stat(&rstd_name, io.rstd_dev)));
            // ds, db per channel
            ctx.e
                .tensor_tensor(v, t.at(p, 0, w), dy.at(p, 0, w), x.at(p, 0, w), AluOp::Multiply);
            let red = |src: &Buf, dst: &Buf| {
                Op::TensorReduce(trnsim::TensorReduce {
                    dst: dst.cols(p, 0, d),
                    src: src.shaped(p, inner.clone()),
                    op: AluOp::Add,
                    axes: 1,
                    negate: false,
                })
            };
            ctx.e.push(v, red(&t, &ds));
            ctx.e.push(v, red(&dy, &db));
            // dγ, dβ
            if io.outs[1].is_some() {
                // (ds − db·mean)·rstd
                ctx.e.tensor_scalar(
                    v,
                    gd.at(p, 0, d),
                    db.at(p, 0, d),
                    AluOp::Multiply,
                    st.scalar(p, 0),
                    None,
                );
                ctx.e
                    .tensor_tensor(v, gd.at(p, 0, d), ds.at(p, 0, d), gd.at(p, 0, d), AluOp::Subtract);
                ctx.e.tensor_scalar(
                    v,
                    gd.at(p, 0, d),
                    gd.at(p, 0, d),
                    AluOp::Multiply,
                    st.scalar(p, 1),
                    None,
                );
                if n == 0 {
                    ctx.e.tensor_copy(v, acc_w.at(p, 0, d), gd.at(p, 0, d));
                } else {
                    ctx.e
                        .tensor_tensor(v, acc_w.at(p, 0, d), acc_w.at(p, 0, d), gd.at(p, 0, d), AluOp::Add);
                }
            }
            if io.outs[2].is_some() {
                if n == 0 {
                    ctx.e.tensor_copy(v, acc_b.at(p, 0, d), db.at(p, 0, d));
                } else {
                    ctx.e
                        .tensor_tensor(v, acc_b.at(p, 0, d), acc_b.at(p, 0, d), db.at(p, 0, d), AluOp::Add);
                }
            }
            let Some((dx_name, dx_dev)) = &io.outs[0] else {
                continue;
            };
            // γ per channel (gd) and per element (gam)
            match (&weight, io.w_dev) {
                (Some((wn, _)), Some(wd)) => {
                    let gap = trnsim::AccessPattern::hbm(wn, wd, (g0 * d) as u64, p, d as i64, vec![[1, d as i64]]);
                    ctx.e.push(Engine::Dma, dma(gd.cols(p, 0, d), gap));
                    let gap = trnsim::AccessPattern::hbm(
                        wn,
                        wd,
                        (g0 * d) as u64,
                        p,
                        d as i64,
                        vec![[1, d as i64], [0, hw as i64]],
                    );
                    ctx.e.push(Engine::Dma, dma(gam.cols(p, 0, w), gap));
                    // Σ γ·ds → col 2, Σ γ·db → col 3
                    ctx.e
                        .tensor_tensor(v, ds.at(p, 0, d), ds.at(p, 0, d), gd.at(p, 0, d), AluOp::Multiply);
                    ctx.e
                        .tensor_tensor(v, db.at(p, 0, d), db.at(p, 0, d), gd.at(p, 0, d), AluOp::Multiply);
                }
                _ => {
                    ctx.e.memset(v, gam.cols(p, 0, w), 1.0);
                }
            }
            reduce_into(&mut ctx.e, &ds, p, d, AluOp::Add, &st, 2);
            reduce_into(&mut ctx.e, &db, p, d, AluOp::Add, &st, 3);
            backward_coefficients(&mut ctx.e, &st, p, 3, 2, s);
            // dx = c1·dy + c2·x + c3, c1 = rstd·γ
            let dx = BackwardDx {
                t: &t,
                scratch: &u,
                x: &x,
                st: &st,
                p,
                w,
            };
            backward_dx(&mut ctx.e, &dx, &gam, Some(&dy));
            let dst = trnsim::AccessPattern::hbm(dx_name, *dx_dev, xb, p, w as i64, vec![[1, w as i64]]);
            ctx.e.push(Engine::Dma, dma(dst, t.cols(p, 0, w)));
        }
        for (o, acc) in [(1usize, &acc_w), (2, &acc_b)] {
            if let Some((name, dd)) = &io.outs[o] {
                if nb == 0 {
                    // An empty batch: dγ and dβ are sums over no sample, so zeros, and they are
                    // outputs of shape [C] that must still be written.
                    ctx.e.memset(v, acc.cols(p, 0, d), 0.0);
                }
                let dst = trnsim::AccessPattern::hbm(name, *dd, (g0 * d) as u64, p, d as i64, vec![[1, d as i64]]);
                ctx.e.push(Engine::Dma, dma(dst, acc.cols(p, 0, d)));
            }
        }
    }
    let mut lowered = Lowered::new(ctx.e.finish());
    lowered.values = masked_out_values(req, 9, "output_mask")?;
    Ok(lowered)
}

/// The tiles of [`backward_dx`]: the result `t` and a `scratch` tile, the input `x`, the
/// coefficient columns `st` of [`backward_coefficients`] (rstd in 1, b in 4, c in 5), over `p`
/// partitions × `w` elements.
struct BackwardDx<'a> {
    t: &'a Buf,
    scratch: &'a Buf,
    x: &'a Buf,
    st: &'a Buf,
    p: usize,
    w: usize,
}

/// dx = rstd·first(·second) + b·x + c into `d.t`, in that order of operations (layer norm:
/// first = dy, second = γ when there is one; group norm: first = γ per element, second = dy).
fn backward_dx(e: &mut Emitter, d: &BackwardDx<'_>, first: &Buf, second: Option<&Buf>) {
    let v = Engine::Vector;
    let (p, w, st) = (d.p, d.w, d.st);
    let t = d.t.at(p, 0, w);
    e.tensor_scalar(v, t, first.at(p, 0, w), AluOp::Multiply, st.scalar(p, 1), None);
    if let Some(second) = second {
        e.tensor_tensor(v, t, t, second.at(p, 0, w), AluOp::Multiply);
    }
    let u = d.scratch.at(p, 0, w);
    e.tensor_scalar(v, u, d.x.at(p, 0, w), AluOp::Multiply, st.scalar(p, 4), None);
    e.tensor_tensor(v, t, t, u, AluOp::Add);
    e.tensor_scalar(v, t, t, AluOp::Add, st.scalar(p, 5), None);
}

/// The backward coefficients layer norm and group norm share. `st` holds the mean in column 0,
/// rstd in column 1, and the row sums db = Σdy·γ and ds = Σdy·γ·x in columns `db_col` and
/// `ds_col`. Writes b = (db·mean − ds)·rstd³·scale to column 4 and c = −b·mean − db·rstd·scale
/// to column 5 (column 6 is scratch), so that dx = rstd·γ·dy + b·x + c.
fn backward_coefficients(e: &mut Emitter, st: &Buf, p: usize, db_col: usize, ds_col: usize, scale: f64) {
    let v = Engine::Vector;
    let mut vec_op = |op: Op| {
        e.push(v, op);
    };
    vec_op(tt(st.col(p, 4), st.col(p, db_col), st.col(p, 0), AluOp::Multiply));
    vec_op(tt(st.col(p, 4), st.col(p, 4), st.col(p, ds_col), AluOp::Subtract));
    for _ in 0..3 {
        vec_op(tt(st.col(p, 4), st.col(p, 4), st.col(p, 1), AluOp::Multiply));
    }
    vec_op(ts(st.col(p, 4), st.col(p, 4), AluOp::Multiply, imm(scale), None));
    vec_op(tt(st.col(p, 5), st.col(p, 4), st.col(p, 0), AluOp::Multiply));
    vec_op(ts(st.col(p, 5), st.col(p, 5), AluOp::Multiply, imm(-1.0), None));
    vec_op(tt(st.col(p, 6), st.col(p, db_col), st.col(p, 1), AluOp::Multiply));
    vec_op(ts(st.col(p, 6), st.col(p, 6), AluOp::Multiply, imm(scale), None));
    vec_op(tt(st.col(p, 5), st.col(p, 5), st.col(p, 6), AluOp::Subtract));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::TensorMeta;
    use std::collections::BTreeMap;

    #[test]
    fn softmax_is_max_exp_sum_scale() {
        let mut tensors = BTreeMap::new();
        let meta = TensorMeta::contiguous(TorchDType::F32, &[4, 1000]);
        tensors.insert("input.0".to_string(), meta.clone());
        tensors.insert("output.0".to_string(), meta);
        let input = crate::LowerInput::positional(
            "_softmax",
            vec![Value::Tensor("input.0".into()), Value::Int(1), Value::Bool(false)],
            &tensors,
        );
        let req = input.request();
        let p = lower(&req, TargetName::Trn1).unwrap().program;
        let names: Vec<&str> = p.instructions.iter().map(|i| i.op.name()).collect();
        assert_eq!(
            names.iter().filter(|n| **n == "activation").count(),
            1,
            "one exp on ScalarE"
        );
        assert!(names.contains(&"tensor_reduce") && names.contains(&"reciprocal"));
        assert!(p.instructions.iter().any(|i| i.engine == Engine::Scalar));
    }
}
