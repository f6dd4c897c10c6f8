//! The `sort` family: `topk` and `sort` on VectorE's top-8 instructions.
//!
//! The sorted dim is moved to the free axis: each *lane* (one position of the other dims) is a
//! partition holding its `n` values as fp32 (padded to ≥ 8 with −inf). For the smallest values
//! (`topk(largest=False)`, ascending `sort`) the lane is negated first (exact in fp32). Then
//! `⌈k/8⌉` rounds of `max8` (the next 8 largest, descending) and `match_replace8` (replace them
//! with −inf, returning the index of each) produce the values and their indices in order; the
//! first `k` columns are written back (values negated back where needed, indices widened by the
//! runner). Ties: equal values come out in some order of their indices; the comparison of the
//! index output is semantic (compare.rs), so any tie order that selects the same values passes.
//! NaN ranks above +inf (`nan_max_min: propagate`), as in PyTorch.
//!
//! Limits: `n` ≤ 16 384 (max8's free size); integer values are exact below 2^24.

use super::tile::{Emitter, SbufAllocator, Slot};
use super::{LowerError, LowerRequest, Lowered, device_dtype};
use crate::case::Value;
use trnsim::{
    AccessPattern, AluOp, DType, DmaCopy, Engine, HbmRole, Indirect, IndirectSide, Iota,
    MatchReplace8, Max8, Memset, OobMode, Op, Program, ScalarOperand, TargetName, TensorScalar,
    TensorTensor, TensorTensorScan,
};

fn int_arg(
    req: &LowerRequest<'_>,
    pos: usize,
    name: &str,
    default: i64,
) -> Result<i64, LowerError> {
    match req.call.arg(pos, name) {
        None | Some(Value::None(_)) => Ok(default),
        Some(Value::Int(i)) => Ok(*i),
        Some(v) => Err(req.invalid(format!("`{name}` is {v:?}, expected an int"))),
    }
}

fn bool_arg(
    req: &LowerRequest<'_>,
    pos: usize,
    name: &str,
    default: bool,
) -> Result<bool, LowerError> {
    match req.call.arg(pos, name) {
        None | Some(Value::None(_)) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(req.invalid(format!("`{name}` is {v:?}, expected a bool"))),
    }
}

fn dma(dst: AccessPattern, src: AccessPattern) -> Op {
    Op::DmaCopy(DmaCopy {
        dst,
        src,
        accumulate: false,
        indirect: None,
    })
}

/// `nonzero`: the output's row count (data-dependent) comes from the case metadata. On device,
/// one partition holds the flattened input: `m = x != 0`, an inclusive prefix sum `cs` of `m`
/// (VectorE scan) gives each nonzero element its output row `cs − 1` (zeros get a row past the
/// end, which the scatter skips), and GpSimd `iota` writes each element's coordinate per dim.
/// One indirect scatter per dim writes the coordinates into column `d` of their rows. A real
/// backend would read `cs[N−1]` back to size the output; here it must equal the metadata's count
/// (else rows stay unwritten and the run fails).
fn lower_nonzero(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let x = match req.call.arg(0, "self") {
        Some(Value::Tensor(t)) => t.as_str(),
        v => return Err(req.invalid(format!("`self` is {v:?}"))),
    };
    let xm = req.tensor(x)?;
    let out = req.output_tensor(0)?;
    let om = req.tensor(out)?;
    let xdt =
        device_dtype(xm.dtype).ok_or_else(|| req.unsupported(format!("dtype {:?}", xm.dtype)))?;
    let mut e = Emitter::new(Program::new(target));
    e.program.declare(x, xdt, &xm.shape, HbmRole::Input);
    e.program
        .declare(out, DType::I32, &om.shape, HbmRole::Output);
    let rows = om.shape.first().copied().unwrap_or(0);
    let r = xm.shape.len();
    let n: usize = xm.shape.iter().product();
    if rows == 0 || r == 0 || n == 0 {
        return Ok(Lowered::new(e.finish()));
    }
    if n > 8192 || r > 4 {
        // The prefix sum runs on one partition: larger inputs need a cross-partition scan.
        return Err(LowerError::NotLowered(format!(
            "nonzero of {n} elements (one-partition scan, at most 8192)"
        )));
    }
    let t = target.params();
    let mut alloc = SbufAllocator::new(&t);
    let mut slot = || -> Result<Slot, LowerError> {
        Ok(Slot {
            offset: alloc.alloc(n * 4)?,
        })
    };
    let (xv, ones, cs, w, ix, co) = (slot()?, slot()?, slot()?, slot()?, slot()?, slot()?);
    let f = |dt: DType, s: Slot| AccessPattern::sbuf(dt, 0, 1, s.offset, vec![[1, n as i64]]);
    e.push(
        Engine::Dma,
        dma(
            f(DType::F32, xv),
            AccessPattern::hbm(x, xdt, 0, 1, 0, vec![[1, n as i64]]),
        ),
        &[],
        &[xv],
    );
    // m = x != 0 (NaN counts as nonzero), in place.
    e.push(
        Engine::Vector,
        Op::TensorScalar(TensorScalar {
            dst: f(DType::F32, xv),
            src: f(DType::F32, xv),
            op0: AluOp::NotEqual,
            operand0: ScalarOperand::Imm(0.0),
            reverse0: false,
            op1: None,
            operand1: None,
            reverse1: false,
        }),
        &[xv],
        &[xv],
    );
    e.push(
        Engine::Vector,
        Op::Memset(Memset {
            dst: f(DType::F32, ones),
            value: 1.0,
        }),
        &[],
        &[ones],
    );
    e.push(
        Engine::Vector,
        Op::TensorTensorScan(TensorTensorScan {
            dst: f(DType::F32, cs),
            in0: f(DType::F32, ones),
            in1: f(DType::F32, xv),
            initial: ScalarOperand::Imm(0.0),
            op0: AluOp::Multiply,
            op1: AluOp::Add,
        }),
        &[ones, xv],
        &[cs],
    );
    const BIG: f64 = (1u64 << 23) as f64; // exact in fp32; far past any row count accepted here
    e.push(
        Engine::Vector,
        Op::TensorScalar(TensorScalar {
            dst: f(DType::F32, w),
            src: f(DType::F32, xv),
            op0: AluOp::Multiply,
            operand0: ScalarOperand::Imm(-BIG),
            reverse0: false,
            op1: Some(AluOp::Add),
            operand1: Some(ScalarOperand::Imm(BIG - 1.0)),
            reverse1: false,
        }),
        &[xv],
        &[w],
    );
    e.push(
        Engine::Vector,
        Op::TensorTensor(TensorTensor {
            dst: f(DType::I32, ix),
            in0: f(DType::F32, cs),
            in1: f(DType::F32, w),
            op: AluOp::Add,
        }),
        &[cs, w],
        &[ix],
    );
    let scratch = "nonzero.coords";
    e.program
        .declare(scratch, DType::I32, &[r, n], HbmRole::Scratch);
    for d in 0..r {
        // The coordinate along dim d of every element: iota over the shape with step 1 on d.
        let pattern: Vec<[i64; 2]> = (0..r)
            .map(|j| [(j == d) as i64, xm.shape[j] as i64])
            .collect();
        let dst = AccessPattern::sbuf(
            DType::I32,
            0,
            1,
            co.offset,
            pattern.iter().map(|p| [0, p[1]]).collect(),
        );
        let dst = AccessPattern {
            free: contiguous_free(&xm.shape),
            ..dst
        };
        e.push(
            Engine::Gpsimd,
            Op::Iota(Iota {
                dst,
                offset: 0,
                channel_multiplier: 0,
                pattern,
            }),
            &[],
            &[co],
        );
        e.push(
            Engine::Dma,
            dma(
                AccessPattern::hbm(
                    scratch,
                    DType::I32,
                    (d * n) as u64,
                    1,
                    0,
                    vec![[1, n as i64]],
                ),
                f(DType::I32, co),
            ),
            &[co],
            &[],
        );
        let src = AccessPattern::hbm(scratch, DType::I32, (d * n) as u64, n, 1, vec![[1, 1]]);
        let dst = AccessPattern::hbm(out, DType::I32, d as u64, 1, 0, vec![[1, 1]]);
        e.push(
            Engine::Dma,
            Op::DmaCopy(DmaCopy {
                dst,
                src,
                accumulate: false,
                indirect: Some(Indirect {
                    side: IndirectSide::Dst,
                    index: f(DType::I32, ix),
                    row_step: r as i64,
                    oob: OobMode::Skip,
                }),
            }),
            &[ix],
            &[],
        );
    }
    Ok(Lowered::new(e.finish()))
}

fn contiguous_free(shape: &[usize]) -> Vec<[i64; 2]> {
    let mut st = vec![0i64; shape.len()];
    let mut acc = 1i64;
    for d in (0..shape.len()).rev() {
        st[d] = acc;
        acc *= shape[d] as i64;
    }
    shape.iter().zip(st).map(|(&n, s)| [s, n as i64]).collect()
}

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    if req.op == "nonzero" {
        return lower_nonzero(req, target);
    }
    let x = match req.call.arg(0, "self") {
        Some(Value::Tensor(t)) => t.as_str(),
        v => return Err(req.invalid(format!("`self` is {v:?}"))),
    };
    let xm = req.tensor(x)?;
    let xs = if xm.shape.is_empty() {
        vec![1]
    } else {
        xm.shape.clone()
    };
    let (dim, k, largest) = match req.op {
        "topk" => {
            let k = int_arg(req, 1, "k", 1)?;
            let d = int_arg(req, 2, "dim", -1)?;
            (d, k, bool_arg(req, 3, "largest", true)?)
        }
        "sort" => {
            let d = int_arg(req, 1, "dim", -1)?;
            let desc = bool_arg(req, 2, "descending", false)?;
            (d, -1, desc)
        }
        _ => return Err(LowerError::NotLowered(req.op.to_string())),
    };
    let rank = xs.len() as i64;
    let d = if dim < 0 { dim + rank } else { dim };
    if d < 0 || d >= rank {
        return Err(req.invalid(format!("dim {dim} out of range")));
    }
    let d = d as usize;
    let n = xs[d];
    let k = if k < 0 { n } else { k as usize };
    let outer: usize = xs[..d].iter().product();
    let inner: usize = xs[d + 1..].iter().product();

    let vout = req.output_tensor(0)?;
    let iout = req.output_tensor(1)?;
    let xdt =
        device_dtype(xm.dtype).ok_or_else(|| req.unsupported(format!("dtype {:?}", xm.dtype)))?;
    let vdt = device_dtype(req.tensor(vout)?.dtype)
        .ok_or_else(|| req.unsupported("value dtype".into()))?;
    let mut e = Emitter::new(Program::new(target));
    e.program.declare(x, xdt, &xm.shape, HbmRole::Input);
    e.program
        .declare(vout, vdt, &req.tensor(vout)?.shape, HbmRole::Output);
    e.program
        .declare(iout, DType::I32, &req.tensor(iout)?.shape, HbmRole::Output);
    if k == 0 || outer * inner == 0 || n == 0 {
        return Ok(Lowered::new(e.finish()));
    }
    if n > 16384 {
        return Err(req.unsupported(format!("{n} values per lane: max8 takes at most 16384")));
    }
    if k > n {
        return Err(req.invalid(format!("k {k} > {n}")));
    }
    let t = target.params();
    let mut alloc = SbufAllocator::new(&t);
    let n8 = n.max(8);
    let rounds = k.div_ceil(8);
    let a = Slot {
        offset: alloc.alloc(n8 * 4)?,
    };
    let b = Slot {
        offset: alloc.alloc(n8 * 4)?,
    };
    let v8 = Slot {
        offset: alloc.alloc(rounds * 8 * 4)?,
    };
    let i8s = Slot {
        offset: alloc.alloc(rounds * 8 * 4)?,
    };
    let vo = Slot {
        offset: alloc.alloc(rounds * 8 * 4)?,
    };

    // Lane chunks: (hbm element offset of the lane's first value, lanes, lane step, out offsets).
    let mut chunks: Vec<(usize, usize, usize, usize)> = vec![];
    if inner == 1 {
        let mut o = 0;
        while o < outer {
            let pc = (outer - o).min(128);
            chunks.push((o * n, pc, o * k, o));
            o += pc;
        }
    } else {
        for o in 0..outer {
            let mut i = 0;
            while i < inner {
                let pc = (inner - i).min(128);
                chunks.push((o * n * inner + i, pc, o * k * inner + i, 0));
                i += pc;
            }
        }
    }
    let (lane_step_in, lane_step_out, vstep) = if inner == 1 {
        (n as i64, k as i64, 1i64)
    } else {
        (1, 1, inner as i64)
    };
    for (in_off, pc, out_off, _) in chunks {
        let sa = |s: Slot, f: usize| {
            AccessPattern::sbuf(DType::F32, 0, pc, s.offset, vec![[1, f as i64]])
        };
        let mut cur = a;
        let mut other = b;
        if n < 8 {
            e.push(
                Engine::Vector,
                Op::Memset(Memset {
                    dst: sa(a, n8),
                    value: f64::NEG_INFINITY,
                }),
                &[],
                &[a],
            );
        }
        let src = AccessPattern::hbm(
            x,
            xdt,
            in_off as u64,
            pc,
            lane_step_in,
            vec![[vstep, n as i64]],
        );
        e.push(Engine::Dma, dma(sa(a, n), src), &[], &[a]);
        if !largest {
            e.push(
                Engine::Vector,
                Op::TensorScalar(TensorScalar {
                    dst: sa(a, n),
                    src: sa(a, n),
                    op0: AluOp::Multiply,
                    operand0: ScalarOperand::Imm(-1.0),
                    reverse0: false,
                    op1: None,
                    operand1: None,
                    reverse1: false,
                }),
                &[a],
                &[a],
            );
        }
        for r in 0..rounds {
            let vals =
                AccessPattern::sbuf(DType::F32, 0, pc, v8.offset + (r * 32) as u64, vec![[1, 8]]);
            let idx = AccessPattern::sbuf(
                DType::U32,
                0,
                pc,
                i8s.offset + (r * 32) as u64,
                vec![[1, 8]],
            );
            e.push(
                Engine::Vector,
                Op::Max8(Max8 {
                    dst: vals.clone(),
                    src: sa(cur, n8),
                }),
                &[cur],
                &[v8],
            );
            e.push(
                Engine::Vector,
                Op::MatchReplace8(MatchReplace8 {
                    dst: sa(other, n8),
                    data: sa(cur, n8),
                    vals,
                    imm: f64::NEG_INFINITY,
                    dst_idx: Some(idx),
                }),
                &[cur, v8],
                &[other, i8s],
            );
            std::mem::swap(&mut cur, &mut other);
        }
        let vsrc = if largest {
            sa(v8, k)
        } else {
            e.push(
                Engine::Vector,
                Op::TensorScalar(TensorScalar {
                    dst: sa(vo, k),
                    src: sa(v8, k),
                    op0: AluOp::Multiply,
                    operand0: ScalarOperand::Imm(-1.0),
                    reverse0: false,
                    op1: None,
                    operand1: None,
                    reverse1: false,
                }),
                &[v8],
                &[vo],
            );
            sa(vo, k)
        };
        let vslot = if largest { v8 } else { vo };
        let vdst = AccessPattern::hbm(
            vout,
            vdt,
            out_off as u64,
            pc,
            lane_step_out,
            vec![[vstep, k as i64]],
        );
        e.push(Engine::Dma, dma(vdst, vsrc), &[vslot], &[]);
        let idst = AccessPattern::hbm(
            iout,
            DType::I32,
            out_off as u64,
            pc,
            lane_step_out,
            vec![[vstep, k as i64]],
        );
        let isrc = AccessPattern::sbuf(DType::U32, 0, pc, i8s.offset, vec![[1, k as i64]]);
        e.push(Engine::Dma, dma(idst, isrc), &[i8s], &[]);
    }
    Ok(Lowered::new(e.finish()))
}
