//! The `sort` family: `sort` and `topk` as a bitonic sorting network across partitions
//! ([`Network`]), or — for a `topk` whose `k` is small next to `n` ([`top8_is_cheaper`]) — on
//! VectorE's top-8 instructions, below; and `nonzero`.
//!
//! **Top-8 path.** The sorted dim is moved to the free axis: each *lane* (one position of the other dims) is a
//! partition holding its `n` values as fp32 (padded to ≥ 8 with −inf). For the smallest values
//! (`topk(largest=False)`, ascending `sort`) the lane is negated first (exact in fp32). Then
//! `⌈k/8⌉` rounds of `max8` (the next 8 largest, descending) and `match_replace8` (replace them
//! with −inf, returning the index of each) produce the values and their indices in order; the
//! first `k` columns are written back (values negated back where needed, indices widened by the
//! runner). Ties: equal values come out in some order of their indices; the comparison of the
//! index output is semantic (compare.rs), so any tie order that selects the same values passes.
//!
//! Special values (floating-point lanes only). The rounds cannot place NaN — `max8` ranks it
//! first, but `match_replace8`'s fp32 equality never matches it, so it would never be replaced
//! and gets no index — nor a genuine −inf of the working (possibly negated) lane, which equals
//! the −inf written over every extracted element, so its match may hit an extracted slot. A
//! pre-pass masks both (`x ≠ x`, `x = −inf`), counts them per lane, and turns NaN into −inf, so
//! the first `c_ord = n − c_nan − c_ninf` top-8 slots are exactly the ordinary elements in order.
//! PyTorch's order (NaN greatest) is then, in the working order: largest — NaNs, ordinary,
//! −infs; smallest — ordinary, −infs (+inf before the negation), NaNs. Every element gets its
//! output offset on VectorE (slot r → r + shift; the j-th NaN / −inf of the lane, an exclusive
//! prefix count from `tensor_tensor_scan`, → its group's base + j; −1 when past `k`), and the
//! values and indices are written by indirect-scatter DMAs (`oob: skip`) through HBM scratch.
//! Integer lanes hold neither and write the first `k` slots directly.
//!
//! Limits (both paths): `n` ≤ 16 384 (max8's free size; the network's 128 × 128 tile); integer
//! values are exact below 2^24.

use super::tile;
use super::tile::{Emitter, SbufAllocator, Slot, dma, stt, ts, tt};
use super::{LowerError, LowerRequest, Lowered, device_dtype};
use crate::call::TensorArg;
use ScalarOperand::Imm;
use trnsim::{
    AccessPattern, AffineSelect, AluOp, CmpOp, DType, Engine, HbmRole, IndirectSide, Iota, MatchReplace8, Max8,
    NcMatmul, OobMode, Op, Program, ScalarOperand, ScalarTensorTensor, TargetName, TensorReduce, TensorTensorScan,
};

/// `nonzero`: the output's row count is data-dependent. The program writes a buffer of the upper
/// bound's `numel(x)` rows and the count to `output.0.count` (int32); the runner trims by it.
///
/// On device the input is viewed as `[outer…, rows, S, inner…]`: `inner` are the trailing dims
/// that fit one partition's free budget, the dim before them (the *row dim*) is split into rows
/// of `S` (a shorter last row when `S` does not divide it), and any dims before it are looped
/// over. Chunks of ≤ 128 rows are processed in row-major order; in each, `m = x != 0` (NaN counts
/// as nonzero), a per-partition inclusive prefix sum of `m` (VectorE scan), and the
/// cross-partition part on TensorE: the row totals times a strictly-upper-triangular ones matrix
/// (built once by GpSimd `affine_select`) give each row's exclusive offset, and times a ones
/// matrix the chunk total, which a running carry (per partition, fp32, exact below 2^24) adds to
/// the later chunks. Element `e`'s output row is then `cs − 1` where nonzero, and −1 (skipped by
/// the scatter) where zero. GpSimd `iota` writes each element's coordinate per dim (affine in
/// the partition and free indices by construction of the view), and one indirect scatter per
/// dim writes the coordinates into column `d` of their rows. The final carry is the count.
fn lower_nonzero(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let x = req.arg::<TensorArg>(0, "self")?.0;
    let xm = req.tensor(x)?;
    let out = req.output_tensor(0)?;
    let om = req.tensor(out)?;
    let xdt = device_dtype(xm.dtype).ok_or_else(|| req.unsupported(format!("dtype {:?}", xm.dtype)))?;
    let mut e = Emitter::new(Program::new(target));
    e.program.declare(x, xdt, &xm.shape, HbmRole::Input);
    let shape = &xm.shape;
    let r = shape.len();
    let n: usize = shape.iter().product();
    if om.shape != [n, r] {
        return Err(req.invalid(format!("output bound {:?}, expected [{n}, {r}]", om.shape)));
    }
    e.program.declare(out, DType::I32, &om.shape, HbmRole::Output);
    let count = super::count_output_name(out);
    e.program.declare(&count, DType::I32, &[1], HbmRole::Output);
    if r == 0 || n == 0 {
        // No coordinates to write: the count is `x != 0` for a 0-d `x`, 0 for an empty one.
        let t = target.params();
        let mut alloc = SbufAllocator::new(&t);
        let c = alloc.slot(4)?;
        let ca = |dt: DType| AccessPattern::sbuf(dt, 0, 1, c.offset, vec![[1, 1]]);
        if n == 0 {
            e.memset(Engine::Vector, ca(DType::I32), 0.0);
        } else {
            e.push(
                Engine::Dma,
                dma(ca(DType::F32), AccessPattern::hbm(x, xdt, 0, 1, 0, vec![[1, 1]])),
            );
            e.push(
                Engine::Vector,
                ts(
                    ca(DType::I32),
                    ca(DType::F32),
                    AluOp::NotEqual,
                    ScalarOperand::Imm(0.0),
                    None,
                ),
            );
        }
        e.push(
            Engine::Dma,
            dma(
                AccessPattern::hbm(&count, DType::I32, 0, 1, 0, vec![[1, 1]]),
                ca(DType::I32),
            ),
        );
        return Ok(Lowered::new(e.finish()));
    }
    if r > 4 {
        return Err(req.unsupported(format!("a {r}-d input: the coordinate iota takes at most 4 free dims")));
    }
    if n >= 1 << 24 {
        return Err(req.unsupported(format!("{n} elements: the prefix sum is fp32, exact below 2^24")));
    }
    let t = target.params();
    let parts = t.partitions;
    // The view: the row dim `dr` is the outermost whose trailing product fits the budget.
    let dr = (0..r)
        .find(|&d| shape[d + 1..].iter().product::<usize>() <= NONZERO_FREE)
        .unwrap_or(r - 1);
    let inner: usize = shape[dr + 1..].iter().product();
    if inner > NONZERO_FREE {
        return Err(req.unsupported(format!(
            "{inner} elements after dim {dr}: more than one partition's budget"
        )));
    }
    let split = shape[dr].div_ceil(parts).clamp(1, (NONZERO_FREE / inner).max(1));
    let full_rows = shape[dr] / split;
    let tail = shape[dr] % split;
    let width = split * inner;

    let mut alloc = SbufAllocator::new(&t);
    let mut slot = |bytes: usize| -> Result<Slot, LowerError> { alloc.slot(bytes) };
    let (xv, cs, ix, co) = (slot(width * 4)?, slot(width * 4)?, slot(width * 4)?, slot(width * 4)?);
    super::zero_fill_hbm(&mut e, co, parts, width, out, DType::I32, n * r);
    let ones = slot(parts * 4)?;
    let upper = slot(parts * 4)?;
    let small = slot(4 * 4)?; // columns: carry, row offset
    let (col_carry, col_offset) = (0usize, 1usize);
    let bank = t.psum_bank_bytes as u64;

    let full = |s: Slot, dt: DType, w: usize| AccessPattern::sbuf(dt, 0, parts, s.offset, vec![[1, w as i64]]);
    e.memset(Engine::Vector, full(ones, DType::F32, parts), 1.0);
    // upper[q, p] = 1 where q < p: v = p − q − 1 ≥ 0.
    e.push(
        Engine::Gpsimd,
        Op::AffineSelect(AffineSelect {
            dst: full(upper, DType::F32, parts),
            on_true: full(ones, DType::F32, parts),
            on_false: 0.0,
            offset: -1,
            channel_multiplier: -1,
            pattern: vec![[1, parts as i64]],
            cmp: CmpOp::GreaterEqual,
        }),
    );
    e.memset(
        Engine::Vector,
        AccessPattern::sbuf(DType::F32, 0, parts, small.offset, vec![[1, 1]]),
        0.0,
    );
    let scratch = "nonzero.coords";
    e.program
        .declare(scratch, DType::I32, &[r, parts * width], HbmRole::Scratch);

    // Chunks: (outer index, first row, rows, elements of the row dim per row).
    let outer: usize = shape[..dr].iter().product();
    let mut chunks = vec![];
    for o in 0..outer {
        let mut a0 = 0;
        while a0 < full_rows {
            let pc = (full_rows - a0).min(parts);
            chunks.push((o, a0, pc, split));
            a0 += pc;
        }
        if tail > 0 {
            chunks.push((o, full_rows, 1, tail));
        }
    }
    let outer_shape = &shape[..dr];
    for (o, a0, pc, seg) in chunks {
        let w = seg * inner;
        let sa = |s: Slot, dt: DType| AccessPattern::sbuf(dt, 0, pc, s.offset, vec![[1, w as i64]]);
        let col = |c: usize| AccessPattern::sbuf(DType::F32, 0, pc, small.offset + (c * 4) as u64, vec![[1, 1]]);
        // First element of the chunk: outer index o, row dim index a0·split.
        let first = (o * shape[dr] + a0 * split) * inner;
        let src = AccessPattern::hbm(x, xdt, first as u64, pc, (split * inner) as i64, vec![[1, w as i64]]);
        e.push(Engine::Dma, dma(sa(xv, DType::F32), src));
        e.push(
            Engine::Vector,
            ts(
                sa(xv, DType::F32),
                sa(xv, DType::F32),
                AluOp::NotEqual,
                ScalarOperand::Imm(0.0),
                None,
            ),
        );
        e.push(
            Engine::Vector,
            Op::TensorTensorScan(TensorTensorScan {
                dst: sa(cs, DType::F32),
                in0: AccessPattern::sbuf(DType::F32, 0, pc, ones.offset, vec![[0, w as i64]]),
                in1: sa(xv, DType::F32),
                initial: ScalarOperand::Imm(0.0),
                op0: AluOp::Multiply,
                op1: AluOp::Add,
            }),
        );
        // Row totals (the last scan column) through TensorE: exclusive offsets, chunk total.
        let totals = AccessPattern::sbuf(DType::F32, 0, pc, cs.offset + ((w - 1) * 4) as u64, vec![[1, 1]]);
        let offsets_ps = AccessPattern::psum(DType::F32, 0, pc, 0, vec![[1, 1]]);
        let total_ps = AccessPattern::psum(DType::F32, 0, parts, bank, vec![[1, 1]]);
        e.push(
            Engine::Tensor,
            Op::NcMatmul(NcMatmul {
                dst: offsets_ps.clone(),
                stationary: AccessPattern::sbuf(DType::F32, 0, pc, upper.offset, vec![[1, pc as i64]]),
                moving: totals.clone(),
                accumulate: false,
                perf_mode: trnsim::MatmulPerfMode::None,
            }),
        );
        e.push(
            Engine::Tensor,
            Op::NcMatmul(NcMatmul {
                dst: total_ps.clone(),
                stationary: AccessPattern::sbuf(DType::F32, 0, pc, ones.offset, vec![[1, parts as i64]]),
                moving: totals,
                accumulate: false,
                perf_mode: trnsim::MatmulPerfMode::None,
            }),
        );
        e.push(
            Engine::Vector,
            tt(col(col_offset), offsets_ps, col(col_carry), AluOp::Add),
        );
        let carry_all = AccessPattern::sbuf(DType::F32, 0, parts, small.offset, vec![[1, 1]]);
        e.push(Engine::Vector, tt(carry_all.clone(), total_ps, carry_all, AluOp::Add));
        // Output row: (cs + offset)·m − 1, i.e. −1 (skipped) for zeros.
        e.push(
            Engine::Vector,
            Op::ScalarTensorTensor(ScalarTensorTensor {
                dst: sa(cs, DType::F32),
                src: sa(cs, DType::F32),
                op0: AluOp::Add,
                operand0: ScalarOperand::Tile(col(col_offset)),
                op1: AluOp::Multiply,
                in1: sa(xv, DType::F32),
                reverse0: false,
                reverse1: false,
            }),
        );
        e.push(
            Engine::Vector,
            ts(
                sa(ix, DType::I32),
                sa(cs, DType::F32),
                AluOp::Add,
                ScalarOperand::Imm(-1.0),
                None,
            ),
        );
        // The chunk's free shape: [seg, inner dims…].
        let free_shape: Vec<usize> = std::iter::once(seg).chain(shape[dr + 1..].iter().copied()).collect();
        let outer_index = crate::dtype::unravel(o, outer_shape);
        for d in 0..r {
            // Coordinate along d: constant for the outer dims; a0·split + p·split + s for the
            // row dim; the free index of its own axis for the inner dims.
            let (offset, channel_multiplier, axis) = if let Some(&i) = outer_index.get(d) {
                (i as i64, 0, None)
            } else if d == dr {
                ((a0 * split) as i64, split as i64, Some(0))
            } else {
                (0, 0, Some(d - dr))
            };
            let pattern: Vec<[i64; 2]> = free_shape
                .iter()
                .enumerate()
                .map(|(j, &len)| [(Some(j) == axis) as i64, len as i64])
                .collect();
            let dst = AccessPattern {
                free: contiguous_free(&free_shape),
                ..sa(co, DType::I32)
            };
            e.push(
                Engine::Gpsimd,
                Op::Iota(Iota {
                    dst,
                    offset,
                    channel_multiplier,
                    pattern,
                }),
            );
            let at = (d * parts * width) as u64;
            e.push(
                Engine::Dma,
                dma(
                    AccessPattern::hbm(scratch, DType::I32, at, pc, w as i64, vec![[1, w as i64]]),
                    sa(co, DType::I32),
                ),
            );
            let src = AccessPattern::hbm(scratch, DType::I32, at, pc * w, 1, vec![[1, 1]]);
            let dst = AccessPattern::hbm(out, DType::I32, d as u64, 1, 0, vec![[1, 1]]);
            e.push(
                Engine::Dma,
                Op::dma_indirect(dst, src, IndirectSide::Dst, sa(ix, DType::I32), r as i64, OobMode::Skip),
            );
        }
    }
    // The count: the final carry (partition 0), cast to int32 on write.
    let count_sb = AccessPattern::sbuf(DType::I32, 0, 1, small.offset + 8, vec![[1, 1]]);
    e.tensor_copy(
        Engine::Vector,
        count_sb.clone(),
        AccessPattern::sbuf(DType::F32, 0, 1, small.offset, vec![[1, 1]]),
    );
    e.push(
        Engine::Dma,
        dma(AccessPattern::hbm(&count, DType::I32, 0, 1, 0, vec![[1, 1]]), count_sb),
    );
    Ok(Lowered::new(e.finish()))
}

/// Elements per partition of one nonzero chunk.
const NONZERO_FREE: usize = 4096;

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
    let x = req.arg::<TensorArg>(0, "self")?.0;
    let xm = req.tensor(x)?;
    let xs = if xm.shape.is_empty() { vec![1] } else { xm.shape.clone() };
    let (dim_pos, k, largest) = match req.op {
        "topk" => (2, req.arg_or(1, "k", 1i64)?, req.arg_or(3, "largest", true)?),
        "sort" => (1, -1, req.arg_or(2, "descending", false)?),
        _ => return Err(LowerError::NotLowered(req.op.to_string())),
    };
    let d = req.dim_or(dim_pos, "dim", -1i64, xs.len())?;
    let n = xs[d];
    let k = if k < 0 { n } else { k as usize };
    let outer: usize = xs[..d].iter().product();
    let inner: usize = xs[d + 1..].iter().product();

    let vout = req.output_tensor(0)?;
    let iout = req.output_tensor(1)?;
    let xdt = device_dtype(xm.dtype).ok_or_else(|| req.unsupported(format!("dtype {:?}", xm.dtype)))?;
    let vdt = device_dtype(req.tensor(vout)?.dtype).ok_or_else(|| req.unsupported("value dtype".into()))?;
    let mut e = Emitter::new(Program::new(target));
    e.program.declare(x, xdt, &xm.shape, HbmRole::Input);
    e.program.declare(vout, vdt, &req.tensor(vout)?.shape, HbmRole::Output);
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
    let out_numel = outer * k * inner;
    if out_numel >= 1 << 24 || n >= 1 << 24 {
        return Err(req.unsupported(format!(
            "{out_numel} outputs: output positions are computed in fp32, exact below 2^24"
        )));
    }
    let mut alloc = SbufAllocator::new(&t);
    if !top8_is_cheaper(n, k) {
        let net = Network {
            x,
            xdt,
            vout,
            vdt,
            iout,
            n,
            k,
            outer,
            inner,
            descending: largest,
            float: xm.dtype.is_float(),
        };
        net.emit(&mut e, &mut alloc)?;
        return Ok(Lowered::new(e.finish()));
    }
    let n8 = n.max(8);
    let rounds = k.div_ceil(8);
    let slots = rounds * 8;
    let work = n8.max(slots);
    let mut slot = |bytes: usize| -> Result<Slot, LowerError> { alloc.slot(bytes) };
    let a = slot(work * 4)?;
    let b = slot(work * 4)?;
    let v8 = slot(slots * 4)?;
    let i8s = slot(slots * 4)?;
    // Only floating-point lanes can hold NaN or ±inf, the values the top-8 rounds cannot place.
    let specials = xm.dtype.is_float();
    let special_n = if specials { n } else { 1 };
    let nan_mask = slot(special_n)?;
    let ninf_mask = slot(special_n)?;
    let scal = slot(SCALARS * 4)?;
    // Scatter sources: the top-8 slots and the special (NaN / −inf) elements of a chunk.
    let (top_vals, top_idx) = ("sort.top_values", "sort.top_indices");
    let (special_vals, special_idx) = ("sort.special_values", "sort.special_indices");
    if specials {
        declare_scratch(
            &mut e,
            &[
                (top_vals, vdt, slots),
                (top_idx, DType::I32, slots),
                (special_vals, vdt, n),
                (special_idx, DType::I32, n),
            ],
        );
    }
    // The original value of a working −inf: −inf, or +inf when the lane was negated.
    let special_inf = if largest { f64::NEG_INFINITY } else { f64::INFINITY };
    let constants: &[(usize, f64)] = if specials {
        &[(COL_ONE, 1.0), (COL_NAN, f64::NAN), (COL_NEG_INF, f64::NEG_INFINITY)]
    } else {
        &[]
    };
    for &(c, v) in constants {
        let dst = AccessPattern::sbuf(DType::F32, 0, 128, scal.offset + (c * 4) as u64, vec![[1, 1]]);
        e.push(Engine::Vector, tile::memset(dst, v));
    }

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
        let sa = |s: Slot, f: usize| AccessPattern::sbuf(DType::F32, 0, pc, s.offset, vec![[1, f as i64]]);
        let i32s = |s: Slot, f: usize| AccessPattern::sbuf(DType::I32, 0, pc, s.offset, vec![[1, f as i64]]);
        let mask = |s: Slot| AccessPattern::sbuf(DType::U8, 0, pc, s.offset, vec![[1, n as i64]]);
        let col = |c: usize| AccessPattern::sbuf(DType::F32, 0, pc, scal.offset + (c * 4) as u64, vec![[1, 1]]);
        let tile = |c: usize| ScalarOperand::Tile(col(c));
        let along = |c: usize, f: usize| {
            AccessPattern::sbuf(DType::F32, 0, pc, scal.offset + (c * 4) as u64, vec![[0, f as i64]])
        };
        let mut cur = a;
        let mut other = b;
        if n < 8 {
            e.memset(Engine::Vector, sa(a, n8), f64::NEG_INFINITY);
        }
        let src = AccessPattern::hbm(x, xdt, in_off as u64, pc, lane_step_in, vec![[vstep, n as i64]]);
        e.push(Engine::Dma, dma(sa(a, n), src));
        if !largest {
            e.push(Engine::Vector, ts(sa(a, n), sa(a, n), AluOp::Multiply, Imm(-1.0), None));
        }
        if specials {
            // The special elements, which the top-8 rounds cannot place: NaN (max8 ranks it first but
            // match_replace8 never matches it) and −inf (it equals the −inf written over every
            // extracted element, so its match could hit an extracted one). Their masks and counts;
            // NaN becomes −inf so that every special element sinks below the ordinary ones.
            e.push(Engine::Vector, tt(mask(nan_mask), sa(a, n), sa(a, n), AluOp::NotEqual));
            e.push(
                Engine::Vector,
                ts(mask(ninf_mask), sa(a, n), AluOp::IsEqual, Imm(f64::NEG_INFINITY), None),
            );
            e.push(
                Engine::Vector,
                tile::copy_pred(sa(a, n), along(COL_NEG_INF, n), mask(nan_mask)),
            );
            for (m, c) in [(nan_mask, COL_NAN_COUNT), (ninf_mask, COL_NEG_INF_COUNT)] {
                let op = Op::TensorReduce(TensorReduce {
                    dst: col(c),
                    src: mask(m),
                    op: AluOp::Add,
                    axes: 1,
                    negate: false,
                });
                e.push(Engine::Vector, op);
            }
        }
        for r in 0..rounds {
            let vals = AccessPattern::sbuf(DType::F32, 0, pc, v8.offset + (r * 32) as u64, vec![[1, 8]]);
            let idx = AccessPattern::sbuf(DType::U32, 0, pc, i8s.offset + (r * 32) as u64, vec![[1, 8]]);
            e.push(
                Engine::Vector,
                Op::Max8(Max8 {
                    dst: vals.clone(),
                    src: sa(cur, n8),
                }),
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
            );
            std::mem::swap(&mut cur, &mut other);
        }

        if specials {
            // Where everything goes. With c_nan NaNs and c_ninf working −infs in a lane of n, the
            // ordinary elements are the first c_ord = n − c_nan − c_ninf top-8 slots; in the working
            // (largest-first) order the output is
            //   largest:  NaNs, ordinary, −infs        (PyTorch: NaN is the greatest)
            //   smallest: ordinary, −infs(= +inf), NaNs
            // Each element gets its output element offset (−1 when it lands at or past k, or is not
            // in its group) and one indirect scatter per source writes them.
            let nf = n as f64;
            let per_scalar = |e: &mut Emitter, dst: usize, src: usize| {
                // dst = n − src
                e.push(
                    Engine::Vector,
                    ts(
                        col(dst),
                        col(src),
                        AluOp::Multiply,
                        Imm(-1.0),
                        Some((AluOp::Add, Imm(nf))),
                    ),
                );
            };
            per_scalar(&mut e, COL_ORDINARY, COL_NAN_COUNT);
            e.push(
                Engine::Vector,
                tt(
                    col(COL_ORDINARY),
                    col(COL_ORDINARY),
                    col(COL_NEG_INF_COUNT),
                    AluOp::Subtract,
                ),
            );
            if largest {
                per_scalar(&mut e, COL_NEG_INF_BASE, COL_NEG_INF_COUNT);
            } else {
                per_scalar(&mut e, COL_NAN_BASE, COL_NAN_COUNT);
            }
            e.push(
                Engine::Gpsimd,
                Op::Iota(Iota {
                    dst: col(COL_LANE_BASE),
                    offset: out_off as i64,
                    channel_multiplier: lane_step_out,
                    pattern: vec![[1, 1]],
                }),
            );
            // offset = ok ? lane_base + pos·vstep : −1, from `pos` (f32, in `p`) and `ok` (in `q`),
            // written as int32 into `q`.
            let to_offsets = |e: &mut Emitter, p: Slot, q: Slot, w: usize| {
                e.push(
                    Engine::Vector,
                    stt(
                        sa(q, w),
                        sa(p, w),
                        AluOp::IsLt,
                        Imm(k as f64),
                        AluOp::Multiply,
                        sa(q, w),
                    ),
                );
                e.push(
                    Engine::Vector,
                    ts(
                        sa(p, w),
                        sa(p, w),
                        AluOp::Multiply,
                        Imm(vstep as f64),
                        Some((AluOp::Add, tile(COL_LANE_BASE))),
                    ),
                );
                e.push(
                    Engine::Vector,
                    stt(sa(p, w), sa(p, w), AluOp::Add, Imm(1.0), AluOp::Multiply, sa(q, w)),
                );
                e.push(Engine::Vector, ts(i32s(q, w), sa(p, w), AluOp::Add, Imm(-1.0), None));
            };
            let scatter =
                |e: &mut Emitter, scratch: &str, dt: DType, src: AccessPattern, index: Slot, w: usize, out: &str| {
                    let rows = AccessPattern::hbm(scratch, dt, 0, pc, w as i64, vec![[1, w as i64]]);
                    e.push(Engine::Dma, dma(rows, src));
                    let op = Op::dma_indirect(
                        AccessPattern::hbm(out, dt, 0, 1, 0, vec![[1, 1]]),
                        AccessPattern::hbm(scratch, dt, 0, pc * w, 1, vec![[1, 1]]),
                        IndirectSide::Dst,
                        i32s(index, w),
                        1,
                        OobMode::Skip,
                    );
                    e.push(Engine::Dma, op);
                };

            // The top-8 slots: slot r goes to r (+ c_nan when largest), if r < c_ord.
            e.push(
                Engine::Gpsimd,
                Op::Iota(Iota {
                    dst: sa(a, slots),
                    offset: 0,
                    channel_multiplier: 0,
                    pattern: vec![[1, slots as i64]],
                }),
            );
            e.push(
                Engine::Vector,
                ts(sa(b, slots), sa(a, slots), AluOp::IsLt, tile(COL_ORDINARY), None),
            );
            if largest {
                e.push(
                    Engine::Vector,
                    ts(sa(a, slots), sa(a, slots), AluOp::Add, tile(COL_NAN_COUNT), None),
                );
            } else {
                e.push(
                    Engine::Vector,
                    ts(sa(v8, slots), sa(v8, slots), AluOp::Multiply, Imm(-1.0), None),
                );
            }
            to_offsets(&mut e, a, b, slots);
            scatter(&mut e, top_vals, vdt, sa(v8, slots), b, slots, vout);
            let isrc = AccessPattern::sbuf(DType::U32, 0, pc, i8s.offset, vec![[1, slots as i64]]);
            scatter(&mut e, top_idx, DType::I32, isrc, b, slots, iout);

            // The special elements: the j-th NaN (in index order) goes to nan_base + j, the j-th −inf
            // to ninf_base + j (exclusive prefix counts of the masks, per lane).
            let ones = along(COL_ONE, n);
            for (dst, m, base) in [
                (a, nan_mask, if largest { None } else { Some(COL_NAN_BASE) }),
                (
                    b,
                    ninf_mask,
                    Some(if largest { COL_NEG_INF_BASE } else { COL_ORDINARY }),
                ),
            ] {
                let scan = Op::TensorTensorScan(TensorTensorScan {
                    dst: sa(dst, n),
                    in0: ones.clone(),
                    in1: mask(m),
                    initial: Imm(0.0),
                    op0: AluOp::Multiply,
                    op1: AluOp::Add,
                });
                e.push(Engine::Vector, scan);
                e.push(Engine::Vector, tt(sa(dst, n), sa(dst, n), mask(m), AluOp::Subtract));
                if let Some(c) = base {
                    e.push(Engine::Vector, ts(sa(dst, n), sa(dst, n), AluOp::Add, tile(c), None));
                }
                e.push(Engine::Vector, tt(sa(dst, n), sa(dst, n), mask(m), AluOp::Multiply));
            }
            e.push(Engine::Vector, tt(sa(a, n), sa(a, n), sa(b, n), AluOp::Add));
            e.push(
                Engine::Vector,
                tt(sa(b, n), mask(nan_mask), mask(ninf_mask), AluOp::Add),
            );
            to_offsets(&mut e, a, b, n);
            // Their values: NaN, or the lane's original infinity; their indices: j.
            e.memset(Engine::Vector, sa(a, n), special_inf);
            e.push(
                Engine::Vector,
                tile::copy_pred(sa(a, n), along(COL_NAN, n), mask(nan_mask)),
            );
            scatter(&mut e, special_vals, vdt, sa(a, n), b, n, vout);
            e.push(
                Engine::Gpsimd,
                Op::Iota(Iota {
                    dst: i32s(a, n),
                    offset: 0,
                    channel_multiplier: 0,
                    pattern: vec![[1, n as i64]],
                }),
            );
            scatter(&mut e, special_idx, DType::I32, i32s(a, n), b, n, iout);
        } else {
            // Integer lanes hold no NaN or infinity: the top-8 slots are the output.
            let vsrc = if largest {
                sa(v8, k)
            } else {
                e.push(
                    Engine::Vector,
                    ts(sa(v8, k), sa(v8, k), AluOp::Multiply, Imm(-1.0), None),
                );
                sa(v8, k)
            };
            let vdst = AccessPattern::hbm(vout, vdt, out_off as u64, pc, lane_step_out, vec![[vstep, k as i64]]);
            e.push(Engine::Dma, dma(vdst, vsrc));
            let idst = AccessPattern::hbm(
                iout,
                DType::I32,
                out_off as u64,
                pc,
                lane_step_out,
                vec![[vstep, k as i64]],
            );
            let isrc = AccessPattern::sbuf(DType::U32, 0, pc, i8s.offset, vec![[1, k as i64]]);
            e.push(Engine::Dma, dma(idst, isrc));
        }
    }
    Ok(Lowered::new(e.finish()))
}

// ------------------------------------------------------------------------------------------------
// The sorting network.

/// VectorE cycles of one `max(MIN_II, N)` instruction at the network's sizes (N ≤ 64 per
/// partition): the minimum initiation interval.
const NET_INSTRUCTION_CYCLES: usize = 64;
/// VectorE instructions of one compare-exchange step of the network (see [`Network`]).
const NET_STEP_INSTRUCTIONS: usize = 10;
/// Instructions of the top-8 path outside its rounds (special-value pre-pass and scatters).
const TOP8_FIXED_INSTRUCTIONS: usize = 16;

/// Whether `k` rounds of `max8` + `match_replace8` over a lane of `n` (each `max(MIN_II, n)`
/// cycles) cost less VectorE time than the sorting network (`log₂N·(log₂N+1)/2` steps of
/// [`NET_STEP_INSTRUCTIONS`] instructions at the minimum interval): small `k` of a `topk`.
/// `sort` (k = n) always takes the network unless the lane is tiny.
fn top8_is_cheaper(n: usize, k: usize) -> bool {
    let m = n.max(2).next_power_of_two().trailing_zeros() as usize;
    let network = (m * (m + 1) / 2 * NET_STEP_INSTRUCTIONS + TOP8_FIXED_INSTRUCTIONS) * NET_INSTRUCTION_CYCLES;
    let top8 = (2 * k.div_ceil(8) + TOP8_FIXED_INSTRUCTIONS) * n.max(NET_INSTRUCTION_CYCLES);
    k < n && top8 < network
}

/// Partition-bits limit of the network tile: 128 partitions.
const NET_MAX_PARTITION_BITS: usize = 7;
/// Free-axis bits of the network tile (128 elements per partition): also the partitions of the
/// transposed tile.
const NET_MAX_FREE_BITS: usize = 7;

/// `sort` / `topk` as a bitonic sorting network spread over partitions.
///
/// **Keys.** Each element is the pair (w, s) compared lexicographically, both fp32 and exact:
/// `w` is the value (negated for a descending sort, so the network always sorts ascending), with
/// NaN replaced by +inf (ascending) or −inf (descending); `s` is the element's position, moved
/// past every ordinary position for NaN (ascending: `s + n`; descending: `s − n`) so that NaN
/// sorts last (ascending) or first (descending) — PyTorch's "NaN is the largest". `s` is unique,
/// so the order is total and the sort **stable** (equal values keep index order, −0 and +0 are
/// equal), which is PyTorch's `stable=True` order and a valid `stable=False` one.
///
/// **Layout.** A lane of `n` values is padded to `N = 2^m` (pads sort last: NaN ascending, −inf
/// before the negation descending, with positions ≥ n) and laid out as `[2^r partitions × 2^c]`
/// (`c = min(m, 7)`, `r = m − c`; position `p = partition·2^c + column`); `128 / 2^r` lanes share
/// a tile. Steps comparing positions `2^j` apart with `j < c` pair free-axis views of the tile;
/// steps with `j ≥ c` run on the transposed tile `[2^c × lanes·2^r]` (a DMA round trip through
/// HBM scratch, bit-exact), where those bits are free-axis bits too.
///
/// **Direction.** Phase `k` of the network merges blocks of `2^(k+1)` in the direction of
/// position bit `k+1`; instead of reversing comparators, the keys of descending blocks are
/// negated (negating both `w` and `s` reverses the lexicographic order exactly), so every
/// comparator is ascending. Before phase `k` the stored keys are multiplied by the signs of bits
/// `k` (undo) and `k+1` (apply): a strided view for a free-axis bit, a per-partition ±1 column
/// (GpSimd `iota` + VectorE bit ops) for a partition bit.
///
/// **Compare-exchange** of views `a` (lower positions) and `b`: `swap = w_a > w_b`, overwritten
/// by `s_a > s_b` where `w_a == w_b` (a predicated copy); then `w` and `s` swap through a GpSimd
/// copy and two predicated copies each (bit copies: NaN-free keys, −0 kept).
///
/// **Output.** The first `k` positions of each lane: the value `w` (negated back), NaN where `s`
/// marks a NaN, and the index `s − lane base` (minus the NaN shift). DMAs cast them to the
/// output dtypes (exact: they came from those dtypes).
struct Network<'a> {
    x: &'a str,
    xdt: DType,
    vout: &'a str,
    vdt: DType,
    iout: &'a str,
    n: usize,
    k: usize,
    outer: usize,
    inner: usize,
    descending: bool,
    /// Floating-point input: NaN possible.
    float: bool,
}

/// One array of the network in one layout: `[rows × width]` f32 at `slot`.
#[derive(Clone, Copy)]
struct NetArray {
    slot: Slot,
    rows: usize,
    width: usize,
}

impl NetArray {
    fn whole(&self, dtype: DType) -> AccessPattern {
        AccessPattern::sbuf(dtype, 0, self.rows, self.slot.offset, vec![[1, self.width as i64]])
    }

    /// Elements whose free index has bit `b` clear (`high = false`) or set (`high = true`).
    fn half(&self, b: usize, high: bool) -> AccessPattern {
        let d = 1usize << b;
        let blocks = self.width / (2 * d);
        let off = if high { (d * 4) as u64 } else { 0 };
        AccessPattern::sbuf(
            DType::F32,
            0,
            self.rows,
            self.slot.offset + off,
            vec![[(2 * d) as i64, blocks as i64], [1, d as i64]],
        )
    }
}

impl Network<'_> {
    fn emit(&self, e: &mut Emitter, alloc: &mut SbufAllocator) -> Result<(), LowerError> {
        let (n, k) = (self.n, self.k);
        let m = n.next_power_of_two().trailing_zeros() as usize;
        let c = m.min(NET_MAX_FREE_BITS);
        let r = m - c;
        if r > NET_MAX_PARTITION_BITS {
            return Err(LowerError::Resources(format!(
                "{n} values per lane: the network takes at most 16384"
            )));
        }
        let f = 1usize << c;
        let lanes_per_tile = 128 >> r;
        let lanes = self.outer * self.inner;
        let f32b = 4;
        // Per-partition bytes: A layout holds f ≤ 128 elements, T layout ≤ 128.
        let w_a = alloc.slot(f * f32b)?;
        let s_a = alloc.slot(f * f32b)?;
        let w_t = alloc.slot(128 * f32b)?;
        let s_t = alloc.slot(128 * f32b)?;
        let nan = alloc.slot(f)?;
        let swap = alloc.slot(64)?;
        let equal = alloc.slot(64)?;
        let tmp = alloc.slot(64 * f32b)?;
        let cols = alloc.slot((3 + r) * f32b)?;
        let icols = alloc.slot(3 * f32b)?;
        let (scratch_w, scratch_s) = ("sort.network_w", "sort.network_s");
        if m > c {
            for name in [scratch_w, scratch_s] {
                e.program.declare(name, DType::F32, &[128 * f], HbmRole::Scratch);
            }
        }
        // Per-partition columns: 0 = the fill value of NaN keys, 1 = NaN, 2 = lane base
        // position, 3.. = ±1 sign of partition bit b.
        let col =
            |p: usize, i: usize| AccessPattern::sbuf(DType::F32, 0, p, cols.offset + (i * 4) as u64, vec![[1, 1]]);
        let icol =
            |p: usize, i: usize| AccessPattern::sbuf(DType::I32, 0, p, icols.offset + (i * 4) as u64, vec![[1, 1]]);
        let along = |p: usize, i: usize, w: usize| {
            AccessPattern::sbuf(DType::F32, 0, p, cols.offset + (i * 4) as u64, vec![[0, w as i64]])
        };
        let nan_key = if self.descending {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        };
        for (i, v) in [(0usize, nan_key), (1, f64::NAN)] {
            e.memset(Engine::Vector, col(128, i), v);
        }
        // Partition index (int32), then the lane base `(p & !(2^r − 1)) << c` and the sign
        // columns `1 − 2·((p >> b) & 1)`.
        let iota = Op::Iota(Iota {
            dst: icol(128, 0),
            offset: 0,
            channel_multiplier: 1,
            pattern: vec![[1, 1]],
        });
        e.push(Engine::Gpsimd, iota);
        let low_mask = !((1i64 << r) - 1);
        e.push(
            Engine::Vector,
            ts(
                icol(128, 1),
                icol(128, 0),
                AluOp::BitwiseAnd,
                Imm(low_mask as f64),
                Some((AluOp::ShiftLeft, Imm(c as f64))),
            ),
        );
        e.push(
            Engine::Vector,
            ts(col(128, 2), icol(128, 1), AluOp::Multiply, Imm(1.0), None),
        );
        for b in 0..r {
            e.push(
                Engine::Vector,
                ts(
                    icol(128, 2),
                    icol(128, 0),
                    AluOp::LogicalShiftRight,
                    Imm(b as f64),
                    Some((AluOp::BitwiseAnd, Imm(1.0))),
                ),
            );
            e.push(
                Engine::Vector,
                ts(
                    col(128, 3 + b),
                    icol(128, 2),
                    AluOp::Multiply,
                    Imm(-2.0),
                    Some((AluOp::Add, Imm(1.0))),
                ),
            );
        }

        // Lanes: HBM element offset of value 0 of lane `l` in the input and in the outputs, and
        // the element step along the sorted dim.
        let vstep = self.inner as i64;
        let in_off = |l: usize| (l / self.inner) * n * self.inner + l % self.inner;
        let out_off = |l: usize| (l / self.inner) * k * self.inner + l % self.inner;
        let mut first = 0;
        while first < lanes {
            // A tile's lanes are one row of `inner` lanes at most (so that, one lane per
            // partition, they sit one element apart in HBM) or consecutive rows (inner = 1).
            let row_left = if self.inner == 1 {
                lanes - first
            } else {
                self.inner - first % self.inner
            };
            let g = lanes_per_tile.min(row_left);
            let p = g << r;
            let a_w = NetArray {
                slot: w_a,
                rows: p,
                width: f,
            };
            let a_s = NetArray {
                slot: s_a,
                rows: p,
                width: f,
            };
            let t_w = NetArray {
                slot: w_t,
                rows: f,
                width: p,
            };
            let t_s = NetArray {
                slot: s_t,
                rows: f,
                width: p,
            };
            // Load: pads first, then the values (cast to fp32 by the DMA).
            let pad = match (self.descending, self.float) {
                (false, true) => f64::NAN,
                (false, false) => f64::INFINITY,
                (true, _) => f64::NEG_INFINITY,
            };
            if n < (1 << m) {
                e.memset(Engine::Vector, a_w.whole(DType::F32), pad);
            }
            let lane = LaneTile {
                inner: self.inner,
                vstep,
                g,
                r,
                f,
            };
            let lanes_in = lane.accesses((self.x, self.xdt), &|li| in_off(first + li), n, w_a.offset);
            for (hbm, sbuf) in lanes_in {
                e.push(Engine::Dma, dma(sbuf, hbm));
            }
            let w = a_w.whole(DType::F32);
            let sw = a_s.whole(DType::F32);
            if self.descending {
                e.push(
                    Engine::Vector,
                    ts(w.clone(), w.clone(), AluOp::Multiply, Imm(-1.0), None),
                );
            }
            // s = position (global in the tile: lane base + position in the lane).
            let iota = Op::Iota(Iota {
                dst: sw.clone(),
                offset: 0,
                channel_multiplier: f as i64,
                pattern: vec![[1, f as i64]],
            });
            e.push(Engine::Gpsimd, iota);
            if self.float {
                let mask = AccessPattern::sbuf(DType::U8, 0, p, nan.offset, vec![[1, f as i64]]);
                e.push(Engine::Vector, tt(mask.clone(), w.clone(), w.clone(), AluOp::NotEqual));
                e.push(Engine::Vector, tile::copy_pred(w.clone(), along(p, 0, f), mask.clone()));
                let shift = if self.descending { -(n as f64) } else { n as f64 };
                e.push(
                    Engine::Vector,
                    stt(sw.clone(), mask, AluOp::Multiply, Imm(shift), AluOp::Add, sw.clone()),
                );
            }

            // The network.
            let negate = |e: &mut Emitter, bit: usize| {
                for arr in [a_w, a_s] {
                    let op = if bit < c {
                        let v = arr.half(bit, true);
                        ts(v.clone(), v, AluOp::Multiply, Imm(-1.0), None)
                    } else {
                        let v = arr.whole(DType::F32);
                        ts(
                            v.clone(),
                            v,
                            AluOp::Multiply,
                            ScalarOperand::Tile(col(p, 3 + bit - c)),
                            None,
                        )
                    };
                    e.push(Engine::Vector, op);
                }
            };
            let transpose = |e: &mut Emitter, to_t: bool| {
                for (a, t, scratch) in [(a_w, t_w, scratch_w), (a_s, t_s, scratch_s)] {
                    let (from, to) = if to_t { (a, t) } else { (t, a) };
                    // `from` [R × W] row-major into scratch, then read back column-major.
                    let (rr, ww) = (from.rows, from.width);
                    let rows = AccessPattern::hbm(scratch, DType::F32, 0, rr, ww as i64, vec![[1, ww as i64]]);
                    e.push(Engine::Dma, dma(rows, from.whole(DType::F32)));
                    let cols_view = AccessPattern::hbm(scratch, DType::F32, 0, ww, 1, vec![[ww as i64, rr as i64]]);
                    e.push(Engine::Dma, dma(to.whole(DType::F32), cols_view));
                }
            };
            let compare_exchange = |e: &mut Emitter, w: NetArray, s: NetArray, b: usize| {
                let half = w.width / 2;
                let u8s = |sl: Slot| AccessPattern::sbuf(DType::U8, 0, w.rows, sl.offset, vec![[1, half as i64]]);
                let f32s = AccessPattern::sbuf(DType::F32, 0, w.rows, tmp.offset, vec![[1, half as i64]]);
                let (wa, wb, sa, sb) = (w.half(b, false), w.half(b, true), s.half(b, false), s.half(b, true));
                let tt = |dst: AccessPattern, in0: &AccessPattern, in1: &AccessPattern, op: AluOp| {
                    tt(dst, in0.clone(), in1.clone(), op)
                };
                e.push(Engine::Vector, tt(u8s(swap), &wa, &wb, AluOp::IsGt));
                e.push(Engine::Vector, tt(u8s(equal), &wa, &wb, AluOp::IsEqual));
                // Ties of w: decide by s (reusing `tmp` for the s comparison).
                let sgt = AccessPattern::sbuf(DType::U8, 0, w.rows, tmp.offset, vec![[1, half as i64]]);
                e.push(Engine::Vector, tt(sgt.clone(), &sa, &sb, AluOp::IsGt));
                e.push(Engine::Vector, tile::copy_pred(u8s(swap), sgt, u8s(equal)));
                for (a, bview) in [(wa, wb), (sa, sb)] {
                    e.tensor_copy(Engine::Gpsimd, f32s.clone(), a.clone());
                    for (dst, src) in [(a, bview.clone()), (bview, f32s.clone())] {
                        e.push(Engine::Vector, tile::copy_pred(dst, src, u8s(swap)));
                    }
                }
            };
            for phase in 0..m {
                if phase >= 1 {
                    negate(e, phase);
                }
                if phase + 1 < m {
                    negate(e, phase + 1);
                }
                let mut transposed = false;
                for j in (0..=phase).rev() {
                    if j >= c && !transposed {
                        transpose(e, true);
                        transposed = true;
                    }
                    if j < c && transposed {
                        transpose(e, false);
                        transposed = false;
                    }
                    if j >= c {
                        compare_exchange(e, t_w, t_s, j - c);
                    } else {
                        compare_exchange(e, a_w, a_s, j);
                    }
                }
            }

            // Output: index = s − lane base (− the NaN shift), value = ±w or NaN.
            e.push(
                Engine::Vector,
                ts(
                    sw.clone(),
                    sw.clone(),
                    AluOp::Subtract,
                    ScalarOperand::Tile(col(p, 2)),
                    None,
                ),
            );
            if self.descending {
                e.push(
                    Engine::Vector,
                    ts(w.clone(), w.clone(), AluOp::Multiply, Imm(-1.0), None),
                );
            }
            if self.float {
                let flag = AccessPattern::sbuf(DType::U8, 0, p, nan.offset, vec![[1, f as i64]]);
                let (cmp, at, back) = if self.descending {
                    (AluOp::IsLt, 0.0, n as f64)
                } else {
                    (AluOp::IsGe, n as f64, -(n as f64))
                };
                e.push(Engine::Vector, ts(flag.clone(), sw.clone(), cmp, Imm(at), None));
                e.push(
                    Engine::Vector,
                    stt(
                        sw.clone(),
                        flag.clone(),
                        AluOp::Multiply,
                        Imm(back),
                        AluOp::Add,
                        sw.clone(),
                    ),
                );
                e.push(Engine::Vector, tile::copy_pred(w.clone(), along(p, 1, f), flag));
            }
            for (slot, out, dt) in [(w_a, self.vout, self.vdt), (s_a, self.iout, DType::I32)] {
                for (hbm, sbuf) in lane.accesses((out, dt), &|li| out_off(first + li), k, slot.offset) {
                    e.push(Engine::Dma, dma(hbm, sbuf));
                }
            }
            first += g;
        }
        Ok(())
    }
}

/// The lanes of one tile of the sorting network: `g` lanes (each one HBM row of the sorted dim,
/// its elements `vstep` apart), each spread over `2^r` partitions of `f` elements when `r > 0`
/// (one partition per lane when `r == 0`).
struct LaneTile {
    inner: usize,
    vstep: i64,
    g: usize,
    r: usize,
    f: usize,
}

impl LaneTile {
    /// The (HBM, SBUF fp32) access pairs that move the first `len` elements of each lane between
    /// HBM tensor `hbm` (lane `li` starting at element `off(li)`) and the tile at `sbuf_offset`;
    /// the caller sets the direction.
    fn accesses(
        &self,
        (name, dtype): (&str, DType),
        off: &dyn Fn(usize) -> usize,
        len: usize,
        sbuf_offset: u64,
    ) -> Vec<(AccessPattern, AccessPattern)> {
        let (vstep, f) = (self.vstep, self.f);
        let sbuf = |part: usize, parts: usize, n: usize| {
            AccessPattern::sbuf(DType::F32, part, parts, sbuf_offset, vec![[1, n as i64]])
        };
        if self.r == 0 {
            let lane_step = if self.inner == 1 { len as i64 } else { 1 };
            let hbm = AccessPattern::hbm(name, dtype, off(0) as u64, self.g, lane_step, vec![[vstep, len as i64]]);
            return vec![(hbm, sbuf(0, self.g, len))];
        }
        let mut out = Vec::new();
        for li in 0..self.g {
            let base = off(li) as u64;
            let (full, rem) = (len / f, len % f);
            let part0 = li << self.r;
            if full > 0 {
                let hbm = AccessPattern::hbm(name, dtype, base, full, f as i64 * vstep, vec![[vstep, f as i64]]);
                out.push((hbm, sbuf(part0, full, f)));
            }
            if rem > 0 {
                let at = base + (full * f) as u64 * vstep as u64;
                let hbm = AccessPattern::hbm(name, dtype, at, 1, 0, vec![[vstep, rem as i64]]);
                out.push((hbm, sbuf(part0 + full, 1, rem)));
            }
        }
        out
    }
}

/// Declares HBM scratch tensors of 128 lanes × `width` elements.
fn declare_scratch(e: &mut Emitter, tensors: &[(&str, DType, usize)]) {
    for &(name, dtype, width) in tensors {
        e.program.declare(name, dtype, &[128 * width], HbmRole::Scratch);
    }
}

/// Columns of the per-lane scalar tile of topk/sort.
const COL_ONE: usize = 0;
const COL_NAN: usize = 1;
const COL_NEG_INF: usize = 2;
const COL_NAN_COUNT: usize = 3;
const COL_NEG_INF_COUNT: usize = 4;
const COL_ORDINARY: usize = 5;
const COL_NAN_BASE: usize = 6;
const COL_NEG_INF_BASE: usize = 7;
const COL_LANE_BASE: usize = 8;
const SCALARS: usize = 9;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{OpCall, TensorMeta, Value};
    use crate::dtype::TorchDType;
    use std::collections::BTreeMap;
    use trnsim::{Executor, HostTensor};

    /// Runs topk/sort of an f32 tensor on the simulator: (values, indices).
    fn run(op: &str, shape: &[usize], x: &[f32], args: Vec<Value>, out_shape: &[usize]) -> (Vec<f32>, Vec<i32>) {
        let meta = TensorMeta::contiguous;
        let tensors = BTreeMap::from([
            ("input.0".to_string(), meta(TorchDType::F32, shape)),
            ("output.0".to_string(), meta(TorchDType::F32, out_shape)),
            ("output.1".to_string(), meta(TorchDType::I64, out_shape)),
        ]);
        let mut all = vec![Value::Tensor("input.0".into())];
        all.extend(args);
        let call = OpCall {
            args: all,
            kwargs: BTreeMap::new(),
        };
        let outputs = vec![Value::Tensor("output.0".into()), Value::Tensor("output.1".into())];
        let req = LowerRequest {
            op,
            call: &call,
            tensors: &tensors,
            outputs: &crate::OutputSlot::of(&outputs),
        };
        let program = lower(&req, TargetName::Trn1).map(crate::schedule).unwrap().program;
        let inputs = BTreeMap::from([("input.0".to_string(), HostTensor::from_f32(shape, x))]);
        let run = Executor::new(TargetName::Trn1).run(&program, &inputs).unwrap();
        let words = |name: &str| -> Vec<[u8; 4]> {
            run.outputs[name]
                .data
                .chunks(4)
                .map(|c| [c[0], c[1], c[2], c[3]])
                .collect()
        };
        (
            words("output.0").into_iter().map(f32::from_le_bytes).collect(),
            words("output.1").into_iter().map(i32::from_le_bytes).collect(),
        )
    }

    /// PyTorch's order: NaN greatest, −0 = +0; stable.
    fn reference(lane: &[f32], k: usize, largest: bool) -> Vec<f32> {
        let key = |v: f32| if v.is_nan() { f32::INFINITY } else { v };
        let mut s: Vec<f32> = lane.to_vec();
        s.sort_by(|&p, &q| {
            let o = match (p.is_nan(), q.is_nan()) {
                (true, true) => std::cmp::Ordering::Equal,
                (true, false) => std::cmp::Ordering::Greater,
                (false, true) => std::cmp::Ordering::Less,
                _ => key(p).partial_cmp(&key(q)).unwrap(),
            };
            if largest { o.reverse() } else { o }
        });
        s.truncate(k);
        s
    }

    fn same(a: f32, b: f32) -> bool {
        (a.is_nan() && b.is_nan()) || a == b
    }

    /// Lanes with NaNs (more than one round's worth), both infinities, ±0 and repeats.
    fn lanes(count: usize, n: usize) -> Vec<f32> {
        let specials = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1.5,
            -1.5,
            f32::MAX,
            f32::MIN,
        ];
        (0..count * n)
            .map(|i| {
                let mut h = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                h ^= h >> 29;
                h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
                h ^= h >> 32;
                if h.is_multiple_of(3) {
                    specials[(h / 3) as usize % specials.len()]
                } else {
                    (h % 17) as f32 - 8.0
                }
            })
            .collect()
    }

    fn check(op: &str, lanes_n: (usize, usize), k: usize, largest: bool, along_rows: bool) {
        let (count, n) = lanes_n;
        let mut x = lanes(count, n);
        // Lane 0 starts with a run of NaNs longer than one top-8 round.
        x[..n.min(12)].fill(f32::NAN);
        assert!(x[n..].iter().any(|v| v.is_nan()), "other lanes hold NaNs too");
        // along_rows: shape [count, n] sorted on dim 1; else [n, count] on dim 0 (strided lanes).
        let (shape, dim, out_shape) = if along_rows {
            (vec![count, n], 1, vec![count, k])
        } else {
            (vec![n, count], 0, vec![k, count])
        };
        let at = |lane: usize, j: usize| {
            if along_rows { lane * n + j } else { j * count + lane }
        };
        let xs: Vec<f32> = (0..count * n)
            .map(|i| {
                if along_rows {
                    x[i]
                } else {
                    x[(i % count) * n + i / count]
                }
            })
            .collect();
        let args = match op {
            "topk" => vec![Value::Int(k as i64), Value::Int(dim), Value::Bool(largest)],
            _ => vec![Value::Int(dim), Value::Bool(largest)],
        };
        let (vals, idx) = run(op, &shape, &xs, args, &out_shape);
        let oat = |lane: usize, r: usize| {
            if along_rows { lane * k + r } else { r * count + lane }
        };
        for lane in 0..count {
            let src: Vec<f32> = (0..n).map(|j| xs[at(lane, j)]).collect();
            let want = reference(&src, k, largest);
            let mut seen = std::collections::BTreeSet::new();
            for (r, w) in want.iter().enumerate() {
                let (v, i) = (vals[oat(lane, r)], idx[oat(lane, r)]);
                assert!(same(v, *w), "{op} lane {lane} pos {r}: {v} vs {w} (lane {src:?})");
                assert!(
                    i >= 0 && (i as usize) < n && seen.insert(i),
                    "{op} lane {lane} pos {r}: index {i}"
                );
                assert!(
                    same(src[i as usize], *w),
                    "{op} lane {lane} pos {r}: index {i} selects {}",
                    src[i as usize]
                );
            }
        }
    }

    /// nonzero on the simulator against the host's row-major list of coordinates.
    fn check_nonzero(shape: &[usize], every: usize) {
        let n: usize = shape.iter().product();
        let x: Vec<f32> = (0..n)
            .map(|i| {
                if (i * 7919 + i / 3).is_multiple_of(every) {
                    (i % 5) as f32 - 2.0
                } else {
                    0.0
                }
            })
            .collect();
        let want: Vec<i32> = (0..n)
            .filter(|&i| x[i] != 0.0)
            .flat_map(|i| crate::dtype::unravel(i, shape).into_iter().map(|c| c as i32))
            .collect();
        let count = want.len() / shape.len();
        let meta = TensorMeta::contiguous;
        let tensors = BTreeMap::from([
            ("input.0".to_string(), meta(TorchDType::F32, shape)),
            // The upper bound, not the count: the device writes the count.
            ("output.0".to_string(), meta(TorchDType::I64, &[n, shape.len()])),
        ]);
        let input = crate::LowerInput::positional("nonzero", vec![Value::Tensor("input.0".into())], &tensors);
        let req = input.request();
        let program = lower(&req, TargetName::Trn1).map(crate::schedule).unwrap().program;
        let inputs = BTreeMap::from([("input.0".to_string(), HostTensor::from_f32(shape, &x))]);
        let run = Executor::new(TargetName::Trn1).run(&program, &inputs).unwrap();
        let got: Vec<i32> = run.outputs["output.0"]
            .data
            .chunks(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let rows = run.outputs["output.0.count"].data[..4]
            .try_into()
            .map(i32::from_le_bytes)
            .unwrap();
        assert_eq!(rows as usize, count, "count of nonzero of {shape:?}");
        assert_eq!(&got[..want.len()], &want[..], "nonzero of {shape:?}");
    }

    #[test]
    fn nonzero_scans_across_partitions_and_chunks() {
        check_nonzero(&[65537], 3); // rows of 513 and a 386-element last row
        check_nonzero(&[3, 300, 20], 4); // outer loop, row dim split in 3
        check_nonzero(&[300, 3000], 50); // 300 rows of one row-dim index: a carry over 3 chunks
        check_nonzero(&[2, 3, 4], 2);
    }

    /// The network's order is stable: every index equals the stable (index-order tie-break)
    /// reference's, NaNs included. Lane lengths that span 1, 4 and 64 partitions (transposed
    /// steps), several lanes per tile, and strided lanes.
    #[test]
    fn network_sorts_stably_across_partitions() {
        for (count, n, along_rows) in [(3, 300, true), (2, 8000, true), (5, 130, false), (40, 3, true)] {
            for descending in [false, true] {
                assert!(!top8_is_cheaper(n, n));
                let mut xs = lanes(count, n);
                xs[..n.min(12)].fill(f32::NAN);
                let (shape, dim) = if along_rows {
                    (vec![count, n], 1)
                } else {
                    (vec![n, count], 0)
                };
                let args = vec![Value::Int(dim), Value::Bool(descending)];
                let (vals, idx) = run("sort", &shape, &xs, args, &shape);
                let at = |lane: usize, j: usize| if along_rows { lane * n + j } else { j * count + lane };
                for lane in 0..count {
                    let src: Vec<f32> = (0..n).map(|j| xs[at(lane, j)]).collect();
                    // Stable reference: NaN greatest, −0 = +0, ties in index order.
                    let key = |v: f32| if v.is_nan() { (1u8, 0.0) } else { (0u8, v) };
                    let mut order: Vec<usize> = (0..n).collect();
                    order.sort_by(|&a, &b| {
                        let o = key(src[a]).partial_cmp(&key(src[b])).unwrap();
                        if descending { o.reverse() } else { o }
                    });
                    for (r, &want) in order.iter().enumerate() {
                        let (v, i) = (vals[at(lane, r)], idx[at(lane, r)]);
                        assert_eq!(i as usize, want, "lane {lane} pos {r} of {count}×{n} desc={descending}");
                        assert_eq!(
                            v.to_bits(),
                            if src[want].is_nan() {
                                f32::NAN.to_bits()
                            } else {
                                src[want].to_bits()
                            }
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn topk_takes_the_top8_rounds_only_when_cheaper() {
        assert!(top8_is_cheaper(1000, 5));
        assert!(!top8_is_cheaper(4097, 129));
        assert!(!top8_is_cheaper(8000, 8000));
        for largest in [true, false] {
            check("topk", (3, 4097), 129, largest, true);
        }
    }

    #[test]
    fn nan_and_infinities_are_placed_like_pytorch() {
        for largest in [true, false] {
            check("sort", (5, 40), 40, largest, true);
            check("sort", (3, 37), 37, largest, false);
            check("topk", (4, 50), 11, largest, true);
            check("topk", (130, 6), 3, largest, true);
            check("topk", (6, 29), 29, largest, false);
        }
    }
}
