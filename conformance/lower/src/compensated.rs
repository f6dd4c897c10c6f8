//! Compensated fp32 arithmetic on VectorE, for statistics that PyTorch's CPU accumulates in
//! double (`var`, batch norm's training statistics).
//!
//! The engines have no fp64 and no fused multiply-add, so these are built from fp32 operations
//! that are exact by construction:
//!
//! * [`sum2`]: the sum of a row's columns as an unevaluated pair `hi + lo`. `hi` is VectorE's
//!   sequential running sum (`tensor_tensor_scan`, one instruction), and `lo` the sum of the
//!   exact rounding error of every step of it, by TwoSum on the shifted running sums
//!   (`b' = S_k − S_{k−1}; a' = S_k − b'; e_k = (S_{k−1} − a') + (x_k − b')`), folded by one
//!   `tensor_reduce`. `hi + lo` is the exact sum up to the fp32 rounding of the error terms
//!   themselves (about `n·2⁻⁴⁸·max|S_k|`): what CPU's double accumulator gives, at 7 VectorE
//!   passes over the row instead of about one.
//! * [`finite_or_zero`]: an error term is dropped (0) where it is NaN: a running sum that
//!   overflowed or met an infinity has no meaningful rounding error, and `hi` alone then carries
//!   the ±inf/NaN the plain sum gives.
//! * [`div_pair`]: `(hi + lo) / d` for a constant `d`, nearly correctly rounded: `q = hi·fl(1/d)`,
//!   the residual `ρ = (hi − q·d) + lo` with `q·d` exact (Dekker's product: Veltkamp split of `q`,
//!   `d` split on the host), then `q + ρ·fl(1/d)`. Where the split overflows (|q| > 2¹¹⁵) the
//!   residual is NaN and `q` is kept.
//!
//! All operands are `[P, 1]` columns except [`sum2`]'s row; scratch comes from [`Scratch`].

use super::LowerError;
use super::reduction::{Buf, CHUNK, imm, tt};
use super::tile::{Emitter, SbufAllocator, Scalar};
use trnsim::{AccessPattern, AluOp, DType, Engine, Op, TensorReduce, TensorTensorScan};

const V: Engine = Engine::Vector;

/// SBUF scratch of the compensated sums: three fp32 rows of [`CHUNK`] columns and a few columns.
#[derive(Clone, Copy, Debug)]
pub struct Scratch {
    /// Running sums.
    s: Buf,
    t1: Buf,
    t2: Buf,
    /// Columns: 0 = zero (the scan's `in0`), 1.. = [`div_pair`] temporaries.
    c: Buf,
    mask: Buf,
}

/// Columns of [`Scratch::c`].
const C_ZERO: usize = 0;
const C_Q: usize = 1;
const C_QH: usize = 2;
const C_QL: usize = 3;
const C_PH: usize = 4;
const C_PL: usize = 5;
const C_R: usize = 6;
const C_T: usize = 7;
const C_L2: usize = 8;
const C_COLS: usize = 9;

impl Scratch {
    /// Allocates the scratch and zeroes the scan's zero column on `partitions` partitions.
    pub fn new(e: &mut Emitter, alloc: &mut SbufAllocator, partitions: usize) -> Result<Scratch, LowerError> {
        let f = DType::F32;
        let sc = Scratch {
            s: Buf::new(alloc, f, CHUNK)?,
            t1: Buf::new(alloc, f, CHUNK)?,
            t2: Buf::new(alloc, f, CHUNK)?,
            c: Buf::new(alloc, f, C_COLS)?,
            mask: Buf::new(alloc, DType::U8, 1)?,
        };
        e.memset(V, sc.c.at(partitions, C_ZERO, 1), 0.0);
        Ok(sc)
    }
}

/// Sums columns `[0, w)` of `x` (fp32, `p` partitions; `1 ≤ w ≤ CHUNK`) as `hi + lo` into
/// `hi` and `lo` (`[p, 1]` columns; may not alias `x` or the scratch). `x` is left intact.
pub fn sum2(e: &mut Emitter, sc: &Scratch, x: &Buf, p: usize, w: usize, hi: AccessPattern, lo: AccessPattern) {
    if w == 1 {
        e.tensor_copy(V, hi, x.at(p, 0, 1));
        e.memset(V, lo, 0.0);
        return;
    }
    let zero = AccessPattern::sbuf(DType::F32, 0, p, sc.c.slot.offset, vec![[0, w as i64]]);
    // S_k = S_{k−1} + x_k, S_{−1} = 0 (so S_0 = x_0 exactly).
    e.push(
        V,
        Op::TensorTensorScan(TensorTensorScan {
            dst: sc.s.cols(p, 0, w),
            in0: zero,
            in1: x.cols(p, 0, w),
            initial: imm(0.0),
            op0: AluOp::Add,
            op1: AluOp::Add,
        }),
    );
    let m = w - 1;
    let cur = sc.s.cols(p, 1, m);
    let prev = sc.s.cols(p, 0, m);
    let (t1, t2) = (sc.t1.cols(p, 0, m), sc.t2.cols(p, 0, m));
    // b' = S_k − S_{k−1};  a' = S_k − b';  δa = S_{k−1} − a';  δb = x_k − b';  e = δa + δb
    e.push(V, tt(t1.clone(), cur.clone(), prev.clone(), AluOp::Subtract));
    e.push(V, tt(t2.clone(), cur, t1.clone(), AluOp::Subtract));
    e.push(V, tt(t2.clone(), prev, t2.clone(), AluOp::Subtract));
    e.push(V, tt(t1.clone(), x.cols(p, 1, m), t1.clone(), AluOp::Subtract));
    e.push(V, tt(t1.clone(), t1.clone(), t2, AluOp::Add));
    e.push(
        V,
        Op::TensorReduce(TensorReduce {
            dst: lo,
            src: t1,
            op: AluOp::Add,
            axes: 1,
            negate: false,
        }),
    );
    e.tensor_copy(V, hi, sc.s.at(p, m, 1));
}

/// `col = col` where it is a number, else 0 (`[p, 1]`).
pub fn finite_or_zero(e: &mut Emitter, sc: &Scratch, p: usize, col: AccessPattern) {
    let t = sc.c.col(p, C_T);
    e.push(V, tt(sc.mask.col(p, 0), col.clone(), col.clone(), AluOp::IsEqual));
    e.memset(V, t.clone(), 0.0);
    e.push(V, super::tile::copy_pred(t.clone(), col.clone(), sc.mask.col(p, 0)));
    e.tensor_copy(V, col, t);
}

/// `dst = (hi + lo) / d` for a constant `d` (`[p, 1]` columns; `lo` may be `None` for 0): nearly
/// correctly rounded when `d` is a nonzero integer-valued fp32 of at most 24 bits, else
/// `(hi + lo) · fl(1/d)` (`1/0` gives +inf, as the plain path does).
pub fn div_pair(
    e: &mut Emitter,
    sc: &Scratch,
    p: usize,
    hi: AccessPattern,
    lo: Option<AccessPattern>,
    d: f64,
    dst: AccessPattern,
) {
    let col = |c: usize| sc.c.col(p, c);
    let s = |c: usize| Scalar::Col(sc.c.at(p, c, 1));
    let exact = d > 0.0 && d.fract() == 0.0 && d <= 16_777_216.0;
    let inv = if d == 0.0 { 1e39 } else { 1.0 / d };
    if !exact {
        match lo {
            Some(lo) => e.push(V, tt(col(C_T), hi, lo, AluOp::Add)),
            None => e.tensor_copy(V, col(C_T), hi),
        };
        e.tensor_scalar_imm(V, dst, col(C_T), AluOp::Multiply, inv);
        return;
    }
    // d = dh + dl, 12 + 12 bits (host constants).
    let dh = (d / 4096.0).floor() * 4096.0;
    let dl = d - dh;
    // q = hi · fl(1/d)
    e.tensor_scalar_imm(V, col(C_Q), hi.clone(), AluOp::Multiply, inv);
    // Veltkamp: c = q·4097; qh = c − (c − q); ql = q − qh
    e.tensor_scalar_imm(V, col(C_QH), col(C_Q), AluOp::Multiply, 4097.0);
    e.push(V, tt(col(C_QL), col(C_QH), col(C_Q), AluOp::Subtract));
    e.push(V, tt(col(C_QH), col(C_QH), col(C_QL), AluOp::Subtract));
    e.push(V, tt(col(C_QL), col(C_Q), col(C_QH), AluOp::Subtract));
    // ph = fl(q·d); pl = q·d − ph = ((qh·dh − ph) + qh·dl + ql·dh) + ql·dl, every product exact.
    e.tensor_scalar_imm(V, col(C_PH), col(C_Q), AluOp::Multiply, d);
    e.tensor_scalar(
        V,
        col(C_PL),
        col(C_QH),
        AluOp::Multiply,
        Scalar::Imm(dh),
        Some((AluOp::Subtract, s(C_PH))),
    );
    for (src, k) in [(C_QH, dl), (C_QL, dh), (C_QL, dl)] {
        e.scalar_tensor_tensor(V, col(C_PL), col(src), AluOp::Multiply, imm(k), AluOp::Add, col(C_PL));
    }
    // ρ = ((hi − ph) − pl) + lo
    e.tensor_scalar(
        V,
        col(C_R),
        hi,
        AluOp::Subtract,
        s(C_PH),
        Some((AluOp::Subtract, s(C_PL))),
    );
    if let Some(lo) = lo {
        e.push(V, tt(col(C_R), col(C_R), lo, AluOp::Add));
    }
    // correction ρ·fl(1/d), dropped where NaN (the split overflowed, or hi is not finite)
    e.tensor_scalar_imm(V, col(C_R), col(C_R), AluOp::Multiply, inv);
    finite_or_zero(e, sc, p, col(C_R));
    e.push(V, tt(dst, col(C_Q), col(C_R), AluOp::Add));
}

/// Combines per-chunk pairs (`hi`, `lo`: columns `[0, k)`) into one pair `out_hi + out_lo`
/// (`[p, 1]` columns): the `hi` partials by [`sum2`], the `lo` partials by a plain fp32 fold;
/// `out_lo` is 0 where it is NaN ([`finite_or_zero`]).
#[allow(clippy::too_many_arguments)]
pub fn sum2_parts(
    e: &mut Emitter,
    sc: &Scratch,
    hi: &Buf,
    lo: &Buf,
    p: usize,
    k: usize,
    out_hi: AccessPattern,
    out_lo: AccessPattern,
) {
    if k <= 1 {
        e.tensor_copy(V, out_hi, hi.at(p, 0, 1));
        e.tensor_copy(V, out_lo.clone(), lo.at(p, 0, 1));
    } else {
        e.push(
            V,
            Op::TensorReduce(TensorReduce {
                dst: out_lo.clone(),
                src: lo.cols(p, 0, k),
                op: AluOp::Add,
                axes: 1,
                negate: false,
            }),
        );
        sum2(e, sc, hi, p, k, out_hi, sc.c.col(p, C_L2));
        e.push(V, tt(out_lo.clone(), out_lo.clone(), sc.c.col(p, C_L2), AluOp::Add));
    }
    finite_or_zero(e, sc, p, out_lo);
}
