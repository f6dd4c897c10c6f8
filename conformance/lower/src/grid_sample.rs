//! `grid_sampler_2d`: sample `input [N, C, H, W]` at the normalized locations of
//! `grid [N, Ho, Wo, 2]` (bilinear, nearest or bicubic; zeros, border or reflection padding;
//! `align_corners`).
//!
//! Layout: output points (one batch at a time, ≤128 per tile) sit on SBUF partitions, channels
//! on the free axis. Per tile, VectorE turns the grid values into source coordinates exactly as
//! PyTorch's CPU kernel (cpu/GridSamplerKernel.cpp, `ComputeLocation` / `ApplyGridSample`)
//! does: unnormalize, clip or reflect, floor (or round), tap coordinates, per-axis weights and
//! in-bounds masks. The taps' flat element offsets (`n·C·H·W + y·W + x`, fp32 — exact below
//! 2^24) become int32 indices, with out-of-bounds taps replaced by an offset past the end of
//! the input (a predicated copy), so an indirect DMA gather with `oob: skip` leaves their
//! values at the zero the tile was cleared to. Each gathered row is one tap's `C` channels
//! (stride H·W). VectorE then forms the weighted sum with per-partition weights, in
//! PyTorch's order: bilinear `((nw·v + ne·v) + sw·v) + se·v`; bicubic four row
//! interpolations along x, then one along y; nearest is the gathered row itself.
//!
//! Numerics: PyTorch computes every step in the tensor's dtype — fp32 for f32, and for
//! bf16/f16 each vector operation rounds to that dtype (verified bit-exact against the goldens).
//! So every intermediate tile here has the input dtype and ops that PyTorch rounds separately
//! are separate instructions (fused only for f32, where fp32 intermediates are the same thing).
//! The hardware has no divide: reflection's `|x| / twice_span` is a multiply by the
//! correctly rounded reciprocal of that constant; its only use is `trunc`, which differs from
//! a true division only when the quotient lies within an ulp of an integer.
//!
//! Non-finite grid values follow PyTorch too: border/reflection clip NaN to 0 (its clamp
//! operand order), and nearest's int conversion (int32 for f32: out of bounds; int16 for
//! bf16/f16: index 0) is reproduced on top of the saturating cast. Limit: inputs of 2^24 or
//! more elements (offset arithmetic in fp32) → `Unsupported`. Not reproduced: PyTorch's bf16/f16
//! kernel also forms `y·sH + x·sW` in int16, so planes above 32767 elements read wrapped
//! (wrong, possibly out-of-bounds) addresses there — undefined behaviour; this lowering gathers
//! the addressed element.

use super::binary::dev;
use super::tile;
use super::tile::{Emitter, Operand, SbufAllocator, Scalar, Slot, dma, hbm_cols, ts};
use super::{LowerError, LowerRequest, Lowered};
use crate::call::TensorArg;
use trnsim::{
    AccessPattern, AluOp, DType, Engine, HbmRole, IndirectSide, Iota, OobMode, Op, Program, ScalarOperand,
    ScalarTensorTensor, TargetName,
};

/// Channels gathered per pass (bounds the value tiles: 16 taps × 512 × 4 B = 32 KiB).
const MAX_CHANNELS: usize = 512;

/// Offsets must be exact in fp32.
const MAX_INPUT_ELEMS: usize = 1 << 24;

/// The cubic convolution constant of PyTorch's bicubic kernels.
const CUBIC_A: f64 = -0.75;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Interp {
    Bilinear,
    Nearest,
    Bicubic,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// PyTorch's `ComputeLocationBase` constants for one spatial dim, rounded to the compute dtype
/// as `static_cast<scalar_t>` does.
#[derive(Clone, Copy, Debug)]
struct Axis {
    size: usize,
    max_val: f64,
    scaling_factor: f64,
    /// Reflection interval start (0 with align_corners, −0.5 without).
    low: f64,
    twice_span: f64,
    /// align_corners with size ≤ 1: every reflected coordinate is 0.
    empty: bool,
}

impl Axis {
    fn new(size: usize, align: bool, round: impl Fn(f64) -> f64) -> Axis {
        let s = size as f64;
        let max_val = round(s - 1.0);
        if align {
            Axis {
                size,
                max_val,
                scaling_factor: round(max_val / 2.0),
                low: 0.0,
                twice_span: round(max_val * 2.0),
                empty: size <= 1,
            }
        } else {
            Axis {
                size,
                max_val,
                scaling_factor: round(round(s) / 2.0),
                low: -0.5,
                twice_span: round(round(s) * 2.0),
                empty: false,
            }
        }
    }
}

/// An SBUF tile of `width` elements per partition.
#[derive(Clone, Copy, Debug)]
struct Tile {
    slot: Slot,
    dtype: DType,
    width: usize,
}

/// An operand: a view of a tile.
#[derive(Clone, Debug)]
struct Opnd {
    ap: AccessPattern,
}

impl Operand for Opnd {
    fn ap(&self) -> AccessPattern {
        self.ap.clone()
    }
}

impl Tile {
    /// The whole tile for `p` partitions.
    fn all(&self, p: usize) -> Opnd {
        self.view(p, 0, vec![[1, self.width as i64]])
    }

    /// Element `i` of every partition (`[p, 1]`).
    fn col(&self, p: usize, i: usize) -> Opnd {
        self.view(p, i, vec![[1, 1]])
    }

    /// A strided view starting at element `first`.
    fn view(&self, p: usize, first: usize, free: Vec<[i64; 2]>) -> Opnd {
        let offset = self.slot.offset + (first * self.dtype.size()) as u64;
        Opnd {
            ap: AccessPattern::sbuf(self.dtype, 0, p, offset, free),
        }
    }
}

/// Emits VectorE/GpSimd instructions over `p` partitions with the dependency bookkeeping.
struct Builder {
    e: Emitter,
    alloc: SbufAllocator,
    /// Partitions of the current tile.
    p: usize,
}

impl Builder {
    fn tile(&mut self, dtype: DType, width: usize) -> Result<Tile, LowerError> {
        let offset = self.alloc.alloc(width * dtype.size().max(4))?;
        Ok(Tile {
            slot: Slot { offset },
            dtype,
            width,
        })
    }

    /// `dst = floor(src)` (fp32, integral): `r − (r > src)` with `r` = src rounded to the nearest
    /// int32 (the cast on write); exact for |src| < 2^31, which covers every in-bounds tap.
    fn floor(&mut self, dst: &Opnd, src: &Opnd, int_scratch: &Opnd) {
        self.e.tensor_copy(Engine::Vector, int_scratch, src);
        self.e.tensor_copy(Engine::Vector, dst, int_scratch);
        // The int32 scratch is free again: reuse its bytes for the fp32 mask `r > src`.
        let above = Opnd {
            ap: AccessPattern {
                dtype: DType::F32,
                ..int_scratch.ap.clone()
            },
        };
        self.e.tensor_tensor(Engine::Vector, &above, dst, src, AluOp::IsGt);
        self.e.tensor_tensor(Engine::Vector, dst, dst, &above, AluOp::Subtract);
    }

    /// PyTorch's `reflect_coordinates` in place on `v` (compute dtype).
    fn reflect(&mut self, v: &Opnd, ax: &Axis, s: &Scratch) {
        if ax.empty {
            self.e.memset(Engine::Vector, v, 0.0);
            return;
        }
        let w = v.ap.free_elems();
        let (abs, q, fl, other) = (
            s.a.view(self.p, 0, vec![[1, w as i64]]),
            s.b.view(self.p, 0, vec![[1, w as i64]]),
            s.f.view(self.p, 0, vec![[1, w as i64]]),
            s.c.view(self.p, 0, vec![[1, w as i64]]),
        );
        let int = s.i.view(self.p, 0, vec![[1, w as i64]]);
        // abs_in = |in − low|
        self.e
            .tensor_scalar_rounded(Engine::Vector, &abs, v, AluOp::Subtract, ax.low, AluOp::Abs, 0.0);
        // double_flips = trunc(abs_in / twice_span) (abs_in ≥ 0: trunc = floor)
        self.e.tensor_scalar_imm(
            Engine::Vector,
            &q,
            &abs,
            AluOp::Multiply,
            (1.0 / ax.twice_span) as f32 as f64,
        );
        self.floor(&fl, &q, &int);
        // extra = abs_in − double_flips·twice_span
        self.e
            .tensor_scalar_imm(Engine::Vector, &q, &fl, AluOp::Multiply, ax.twice_span);
        self.e.tensor_tensor(Engine::Vector, &q, &abs, &q, AluOp::Subtract);
        // min(extra, twice_span − extra) + low
        self.e
            .tensor_scalar_rev(Engine::Vector, &other, Scalar::Imm(ax.twice_span), AluOp::Subtract, &q);
        self.e.tensor_tensor(Engine::Vector, v, &q, &other, AluOp::Min);
        if ax.low != 0.0 {
            self.e
                .tensor_scalar(Engine::Vector, v, v, AluOp::Add, Scalar::Imm(ax.low), None);
        }
    }

    /// `compute_coordinates`: the padding mode applied to coordinates `v` in place.
    fn pad(&mut self, v: &Opnd, ax: &Axis, padding: Padding, s: &Scratch) {
        match padding {
            Padding::Zeros => {}
            Padding::Border => self.clip(v, ax, s),
            Padding::Reflection => {
                self.reflect(v, ax, s);
                self.clip(v, ax, s);
            }
        }
    }

    /// `clip_coordinates`: `min(max_val, max(0, v))` in place, where PyTorch's operand order
    /// (`clamp_min(Vec(0), in)`, an x86 max returning its second operand on NaN) turns NaN into
    /// 0. VectorE max/min propagate NaN, so NaN lanes are replaced by 0 first: a predicated
    /// copy of the lanes where `v == v` over a zeroed tile.
    fn clip(&mut self, v: &Opnd, ax: &Axis, s: &Scratch) {
        let w = v.ap.free_elems() as i64;
        let (is_num, clean) = (s.u.view(self.p, 0, vec![[1, w]]), s.c.view(self.p, 0, vec![[1, w]]));
        let clean = Opnd {
            ap: AccessPattern {
                dtype: v.ap.dtype,
                ..clean.ap
            },
        };
        self.e.tensor_tensor(Engine::Vector, &is_num, v, v, AluOp::IsEqual);
        self.e.memset(Engine::Vector, &clean, 0.0);
        let op = tile::copy_pred(clean.ap.clone(), v.ap.clone(), is_num.ap.clone());
        self.e.push(Engine::Vector, op);
        self.e
            .tensor_scalar_rounded(Engine::Vector, v, &clean, AluOp::Max, 0.0, AluOp::Min, ax.max_val);
    }

    /// `unnormalize`: `(g + 1)·scaling_factor`, minus 0.5 without align_corners.
    fn unnormalize(&mut self, dst: &Opnd, g: &Opnd, ax: &Axis, align: bool) {
        self.e.tensor_scalar_rounded(
            Engine::Vector,
            dst,
            g,
            AluOp::Add,
            1.0,
            AluOp::Multiply,
            ax.scaling_factor,
        );
        if !align {
            self.e
                .tensor_scalar(Engine::Vector, dst, dst, AluOp::Subtract, Scalar::Imm(0.5), None);
        }
    }

    /// In-bounds mask (1.0/0.0, fp32) of integral coordinates `c`: `0 ≤ c < size`.
    fn in_bounds(&mut self, dst: &Opnd, c: &Opnd, size: usize, tmp: &Opnd) {
        self.e
            .tensor_scalar(Engine::Vector, tmp, c, AluOp::IsGe, Scalar::Imm(0.0), None);
        let op = Op::ScalarTensorTensor(ScalarTensorTensor {
            dst: dst.ap.clone(),
            src: c.ap.clone(),
            op0: AluOp::IsLt,
            operand0: ScalarOperand::Imm(size as f64),
            op1: AluOp::Multiply,
            in1: tmp.ap.clone(),
            reverse0: false,
            reverse1: false,
        });
        self.e.push(Engine::Vector, op);
    }

    /// Cubic convolution coefficient of distance `x` (compute dtype), PyTorch's expressions:
    /// `((A·x − 5A)·x + 8A)·x − 4A` for 1 < x < 2 (`outer`), `((A+2)·x − (A+3))·x·x + 1`
    /// for x ≤ 1.
    fn cubic(&mut self, dst: &Opnd, x: &Opnd, outer: bool) {
        let a = CUBIC_A;
        if outer {
            self.e
                .tensor_scalar_rounded(Engine::Vector, dst, x, AluOp::Multiply, a, AluOp::Subtract, 5.0 * a);
            self.e.tensor_tensor(Engine::Vector, dst, dst, x, AluOp::Multiply);
            self.e
                .tensor_scalar(Engine::Vector, dst, dst, AluOp::Add, Scalar::Imm(8.0 * a), None);
            self.e.tensor_tensor(Engine::Vector, dst, dst, x, AluOp::Multiply);
            self.e
                .tensor_scalar(Engine::Vector, dst, dst, AluOp::Subtract, Scalar::Imm(4.0 * a), None);
        } else {
            self.e.tensor_scalar_rounded(
                Engine::Vector,
                dst,
                x,
                AluOp::Multiply,
                a + 2.0,
                AluOp::Subtract,
                a + 3.0,
            );
            self.e.tensor_tensor(Engine::Vector, dst, dst, x, AluOp::Multiply);
            self.e.tensor_tensor(Engine::Vector, dst, dst, x, AluOp::Multiply);
            self.e
                .tensor_scalar(Engine::Vector, dst, dst, AluOp::Add, Scalar::Imm(1.0), None);
        }
    }

    /// `acc = v·w` (`first`) or `acc = acc + v·w`, rounded per operator to acc's dtype.
    fn weighted_add(&mut self, acc: &Opnd, v: &Opnd, w: &Opnd, first: bool, tmp: &Opnd) {
        if !first && acc.ap.dtype == DType::F32 {
            self.e.scalar_tensor_tensor(
                Engine::Vector,
                acc,
                v,
                AluOp::Multiply,
                ScalarOperand::Tile(w.ap()),
                AluOp::Add,
                acc,
            );
            return;
        }
        // The product into acc itself (first) or into tmp, then added to acc in acc's dtype.
        let dst = if first { acc } else { tmp };
        let op = ts(
            dst.ap.clone(),
            v.ap.clone(),
            AluOp::Multiply,
            ScalarOperand::Tile(w.ap.clone()),
            None,
        );
        self.e.push(Engine::Vector, op);
        if !first {
            self.e.tensor_tensor(Engine::Vector, acc, acc, tmp, AluOp::Add);
        }
    }
}

/// Scratch tiles for the coordinate arithmetic (4 elements wide: the most taps per axis).
struct Scratch {
    a: Tile,
    b: Tile,
    c: Tile,
    /// fp32 (floors, integral values).
    f: Tile,
    /// int32 (round-to-nearest casts).
    i: Tile,
    /// u8 (predicates).
    u: Tile,
}

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    let (in_name, grid_name) = (req.arg::<TensorArg>(0, "input")?.0, req.arg::<TensorArg>(1, "grid")?.0);
    let out_name = req.output_tensor(0)?;
    let (im, gm, om) = (req.tensor(in_name)?, req.tensor(grid_name)?, req.tensor(out_name)?);
    let interp = match req.arg::<i64>(2, "interpolation_mode")? {
        0 => Interp::Bilinear,
        1 => Interp::Nearest,
        2 => Interp::Bicubic,
        m => return Err(req.invalid(format!("interpolation_mode {m}"))),
    };
    let padding = match req.arg::<i64>(3, "padding_mode")? {
        0 => Padding::Zeros,
        1 => Padding::Border,
        2 => Padding::Reflection,
        m => return Err(req.invalid(format!("padding_mode {m}"))),
    };
    let align = req.arg::<bool>(4, "align_corners")?;
    if im.shape.len() != 4 || gm.shape.len() != 4 || gm.shape[3] != 2 || gm.shape[0] != im.shape[0] {
        return Err(req.invalid(format!("input {:?} / grid {:?}", im.shape, gm.shape)));
    }
    if !im.dtype.is_float() || im.dtype.is_complex() || gm.dtype != im.dtype || om.dtype != im.dtype {
        return Err(req.unsupported(format!("dtypes {} / {} / {}", im.dtype, gm.dtype, om.dtype)));
    }
    let (n, c, h, w) = (im.shape[0], im.shape[1], im.shape[2], im.shape[3]);
    let (oh, ow) = (gm.shape[1], gm.shape[2]);
    if om.shape != [n, c, oh, ow] {
        return Err(req.invalid(format!("output shape {:?}", om.shape)));
    }
    let cd = dev(req, im.dtype)?;
    if !matches!(cd, DType::F32 | DType::Bf16 | DType::F16) {
        return Err(req.unsupported(format!("dtype {}", im.dtype)));
    }
    let numel = n * c * h * w;
    if numel >= MAX_INPUT_ELEMS {
        return Err(req.unsupported(format!(
            "{numel} input elements: tap offsets are computed in fp32, exact below 2^24"
        )));
    }
    let mut program = Program::new(target);
    program.declare(in_name, cd, &im.shape, HbmRole::Input);
    program.declare(grid_name, cd, &gm.shape, HbmRole::Input);
    program.declare(out_name, cd, &om.shape, HbmRole::Output);
    let points = oh * ow;
    if n == 0 || c == 0 || points == 0 {
        return Ok(Lowered::new(program));
    }
    if h == 0 || w == 0 {
        return Err(req.unsupported("empty input plane".into()));
    }

    let round = |x: f64| {
        let mut r = trnsim::Rounding::NearestEven;
        cd.decode_f32(cd.encode_f32(x as f32, &mut r)) as f64
    };
    let (ax_x, ax_y) = (Axis::new(w, align, round), Axis::new(h, align, round));
    // Taps per axis, relative to the base coordinate.
    let taps: &[i64] = match interp {
        Interp::Bilinear => &[0, 1],
        Interp::Nearest => &[0],
        Interp::Bicubic => &[-1, 0, 1, 2],
    };
    let k = taps.len();
    let kk = k * k;

    let tgt = target.params();
    let parts = tgt.partitions;
    let mut b = Builder {
        e: Emitter::new(program),
        alloc: SbufAllocator::new(&tgt),
        p: parts,
    };
    let grid_t = b.tile(cd, 2)?;
    let s = Scratch {
        a: b.tile(cd, 4)?,
        b: b.tile(cd, 4)?,
        c: b.tile(cd, 4)?,
        f: b.tile(DType::F32, 4)?,
        i: b.tile(DType::I32, 4)?,
        u: b.tile(DType::U8, 4)?,
    };
    // Per axis: source coordinate, base (floor/round), fractional part, tap coordinates (as
    // PyTorch holds them: fp32 ints for bilinear/nearest, compute dtype for bicubic), tap
    // weights, in-bounds masks.
    let coord = [b.tile(cd, 1)?, b.tile(cd, 1)?];
    let base = [b.tile(DType::F32, 1)?, b.tile(DType::F32, 1)?];
    let frac = [b.tile(cd, 1)?, b.tile(cd, 1)?];
    let tap_dt = if interp == Interp::Bicubic { cd } else { DType::F32 };
    let tapc = [b.tile(tap_dt, k)?, b.tile(tap_dt, k)?];
    let tapf = [b.tile(DType::F32, k)?, b.tile(DType::F32, k)?];
    let wts = [b.tile(cd, k)?, b.tile(cd, k)?];
    let mask = [b.tile(DType::F32, k)?, b.tile(DType::F32, k)?];
    let offsets = [b.tile(DType::F32, k)?, b.tile(DType::F32, k)?];
    let tap_const = b.tile(DType::F32, k)?;
    let weight2 = b.tile(cd, kk)?;
    let off2 = b.tile(DType::F32, kk)?;
    let valid2 = b.tile(DType::F32, kk)?;
    let pred2 = b.tile(DType::U8, kk)?;
    let idx_f = b.tile(DType::F32, kk)?;
    let idx = b.tile(DType::I32, kk)?;
    let cmax = c.min(MAX_CHANNELS);
    let vals = b.tile(cd, kk * cmax)?;
    let acc = b.tile(cd, cmax)?;
    let row = b.tile(cd, cmax)?;
    let tmp = b.tile(cd, cmax)?;

    // Tap offsets (-1, 0, 1, 2 / 0, 1 / 0) once, on GpSimd.
    {
        let dst = tap_const.all(parts);
        let op = Op::Iota(Iota {
            dst: dst.ap.clone(),
            offset: taps[0],
            channel_multiplier: 0,
            pattern: vec![[1, k as i64]],
        });
        b.e.push(Engine::Gpsimd, op);
    }

    let hw = (h * w) as i64;
    for bn in 0..n {
        let mut p0 = 0;
        while p0 < points {
            let p = (points - p0).min(parts);
            b.p = p;
            let g = grid_t.all(p);
            let src = AccessPattern::hbm(grid_name, cd, ((bn * points + p0) * 2) as u64, p, 2, vec![[1, 2]]);
            b.e.push(Engine::Dma, dma(g.ap.clone(), src));
            for (d, ax) in [ax_x, ax_y].iter().enumerate() {
                let gd = grid_t.col(p, d);
                let x = coord[d].all(p);
                b.unnormalize(&x, &gd, ax, align);
                let bs = base[d].all(p);
                let int1 = s.i.col(p, 0);
                let tc = tapc[d].all(p);
                let tcst = tap_const.all(p);
                let base_bcast = base[d].view(p, 0, vec![[0, k as i64]]);
                match interp {
                    Interp::Bilinear | Interp::Nearest => {
                        b.pad(&x, ax, padding, &s);
                        if interp == Interp::Bilinear {
                            b.floor(&bs, &x, &int1);
                            // w = x − x_w (distance to the west/north tap), e = 1 − w.
                            let (west, east) = (wts[d].col(p, 1), wts[d].col(p, 0));
                            b.e.tensor_tensor(Engine::Vector, &west, x, &bs, AluOp::Subtract);
                            b.e.tensor_scalar_rev(Engine::Vector, &east, Scalar::Imm(1.0), AluOp::Subtract, &west);
                        } else {
                            // round half to even: the cast on write to int32.
                            b.e.tensor_copy(Engine::Vector, &int1, &x);
                            b.e.tensor_copy(Engine::Vector, &bs, &int1);
                            // NaN/±inf coordinates: PyTorch converts to an int of the
                            // dtype's width — int32 INT_MIN (out of bounds) for f32; for bf16/f16
                            // int16, whose low bits of INT_MIN are 0 (in bounds). The saturating
                            // cast gives 0 for NaN and ±(2^31−1) for ±inf, so f32 adds `x − x`
                            // (NaN exactly for them) and bf16/f16 multiply by `x − x == 0`.
                            let non_finite = s.f.col(p, 0);
                            b.e.tensor_tensor(Engine::Vector, &non_finite, &x, &x, AluOp::Subtract);
                            if cd == DType::F32 {
                                b.e.tensor_tensor(Engine::Vector, &bs, &bs, &non_finite, AluOp::Add);
                            } else {
                                b.e.tensor_scalar_imm(Engine::Vector, &non_finite, &non_finite, AluOp::IsEqual, 0.0);
                                b.e.tensor_tensor(Engine::Vector, &bs, &bs, &non_finite, AluOp::Multiply);
                            }
                        }
                        b.e.tensor_tensor(Engine::Vector, &tc, &base_bcast, &tcst, AluOp::Add);
                    }
                    Interp::Bicubic => {
                        b.floor(&bs, &x, &int1);
                        let t = frac[d].all(p);
                        b.e.tensor_tensor(Engine::Vector, &t, x, &bs, AluOp::Subtract);
                        let dist = s.a.col(p, 0);
                        b.e.tensor_scalar_imm(Engine::Vector, &dist, &t, AluOp::Add, 1.0);
                        b.cubic(&wts[d].col(p, 0), &dist, true);
                        b.cubic(&wts[d].col(p, 1), &t, false);
                        b.e.tensor_scalar_rev(Engine::Vector, &dist, Scalar::Imm(1.0), AluOp::Subtract, &t);
                        b.cubic(&wts[d].col(p, 2), &dist, false);
                        b.e.tensor_scalar_rev(Engine::Vector, &dist, Scalar::Imm(2.0), AluOp::Subtract, &t);
                        b.cubic(&wts[d].col(p, 3), &dist, true);
                        // Tap coordinates `ix − 1 + i` in the compute dtype, then padded.
                        b.e.tensor_tensor(Engine::Vector, &tc, &base_bcast, &tcst, AluOp::Add);
                        b.pad(&tc, ax, padding, &s);
                    }
                }
                let tf = tapf[d].all(p);
                if interp == Interp::Bicubic && padding != Padding::Zeros {
                    // PyTorch truncates the padded tap coordinate to an int; in bf16/f16 a
                    // reflected coordinate can be a half-integer (`|x − low|` rounds). ≥ 0 after
                    // the clip, so trunc = floor.
                    b.floor(&tf, &tc, &s.i.view(p, 0, vec![[1, k as i64]]));
                } else {
                    b.e.tensor_copy(Engine::Vector, &tf, &tc);
                }
                b.in_bounds(&mask[d].all(p), &tf, ax.size, &s.f.view(p, 0, vec![[1, k as i64]]));
            }
            // Offsets n·C·H·W + y·W + x and validity of every (y tap, x tap) pair.
            let oy = offsets[1].all(p);
            b.e.tensor_scalar_rounded(
                Engine::Vector,
                &oy,
                tapf[1].all(p),
                AluOp::Multiply,
                w as f64,
                AluOp::Add,
                (bn as i64 * c as i64 * hw) as f64,
            );
            let (kj, ki) = (k as i64, k as i64);
            let rows_b = |t: &Tile| t.view(p, 0, vec![[1, kj], [0, ki]]);
            let cols_b = |t: &Tile| t.view(p, 0, vec![[0, kj], [1, ki]]);
            let off = off2.all(p);
            b.e.tensor_tensor(Engine::Vector, &off, rows_b(&offsets[1]), cols_b(&tapf[0]), AluOp::Add);
            let valid = valid2.all(p);
            b.e.tensor_tensor(
                Engine::Vector,
                &valid,
                rows_b(&mask[1]),
                cols_b(&mask[0]),
                AluOp::Multiply,
            );
            let pred = pred2.all(p);
            b.e.tensor_copy(Engine::Vector, &pred, &valid);
            // Out-of-bounds taps point past the end of the input: the gather skips them.
            let ixf = idx_f.all(p);
            b.e.memset(Engine::Vector, &ixf, numel as f64);
            let op = tile::copy_pred(ixf.ap.clone(), off.ap.clone(), pred.ap.clone());
            b.e.push(Engine::Vector, op);
            let ix = idx.all(p);
            b.e.tensor_copy(Engine::Vector, &ix, &ixf);
            if interp == Interp::Bilinear {
                b.e.tensor_tensor(
                    Engine::Vector,
                    weight2.all(p),
                    rows_b(&wts[1]),
                    cols_b(&wts[0]),
                    AluOp::Multiply,
                );
            }

            let mut c0 = 0;
            while c0 < c {
                let cc = (c - c0).min(cmax);
                let v = |t: usize| vals.view(p, t * cmax, vec![[1, cc as i64]]);
                b.e.memset(Engine::Gpsimd, vals.view(p, 0, vec![[1, (kk * cmax) as i64]]), 0.0);
                for t in 0..kk {
                    let dst = v(t);
                    let src = AccessPattern::hbm(in_name, cd, (c0 as i64 * hw) as u64, 1, 0, vec![[hw, cc as i64]]);
                    let index = idx.col(p, t);
                    let op = Op::dma_indirect(
                        dst.ap.clone(),
                        src,
                        IndirectSide::Src,
                        index.ap.clone(),
                        1,
                        OobMode::Skip,
                    );
                    b.e.push(Engine::Dma, op);
                }
                let out = acc.view(p, 0, vec![[1, cc as i64]]);
                let tmpv = tmp.view(p, 0, vec![[1, cc as i64]]);
                let result = match interp {
                    Interp::Nearest => v(0),
                    Interp::Bilinear => {
                        for t in 0..kk {
                            b.weighted_add(&out, &v(t), &weight2.col(p, t), t == 0, &tmpv);
                        }
                        out
                    }
                    Interp::Bicubic => {
                        let r = row.view(p, 0, vec![[1, cc as i64]]);
                        for j in 0..k {
                            for i in 0..k {
                                b.weighted_add(&r, &v(j * k + i), &wts[0].col(p, i), i == 0, &tmpv);
                            }
                            b.weighted_add(&out, &r, &wts[1].col(p, j), j == 0, &tmpv);
                        }
                        out
                    }
                };
                let dst = hbm_cols(out_name, cd, (bn * c + c0) * points + p0, p, points, cc);
                b.e.push(Engine::Dma, dma(dst, result.ap.clone()));
                c0 += cc;
            }
            p0 += p;
        }
    }
    Ok(Lowered::new(b.e.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{TensorMeta, Value};
    use crate::dtype::TorchDType;
    use std::collections::BTreeMap;
    use trnsim::{Executor, HostTensor};

    /// `grid_sampler_2d(input, grid, mode, padding, align)` with the given metadata.
    fn lower_call(
        metas: [(TorchDType, &[usize]); 3],
        mode: i64,
        padding: i64,
        align: bool,
    ) -> Result<Lowered, LowerError> {
        let tensors: BTreeMap<String, TensorMeta> = ["input.0", "input.1", "output.0"]
            .iter()
            .zip(metas)
            .map(|(name, (dtype, shape))| (name.to_string(), TensorMeta::contiguous(dtype, shape)))
            .collect();
        let input = crate::LowerInput::positional(
            "grid_sampler_2d",
            vec![
                Value::Tensor("input.0".into()),
                Value::Tensor("input.1".into()),
                Value::Int(mode),
                Value::Int(padding),
                Value::Bool(align),
            ],
            &tensors,
        );
        let req = input.request();
        lower(&req, TargetName::Trn1).map(crate::schedule)
    }

    #[test]
    fn malformed_calls_are_typed_errors() {
        use TorchDType::{F16, F32, I64};
        let ok: [(TorchDType, &[usize]); 3] = [(F32, &[1, 2, 4, 5]), (F32, &[1, 3, 3, 2]), (F32, &[1, 2, 3, 3])];
        assert!(lower_call(ok, 0, 0, false).is_ok());
        let invalid = |r: Result<Lowered, LowerError>| matches!(r, Err(LowerError::Invalid { .. }));
        let unsupported = |r: Result<Lowered, LowerError>| matches!(r, Err(LowerError::Unsupported { .. }));
        assert!(invalid(lower_call(ok, 3, 0, false)), "interpolation mode 3");
        assert!(invalid(lower_call(ok, 0, -1, false)), "padding mode -1");
        assert!(
            invalid(lower_call([ok[0], (F32, &[1, 3, 3, 3]), ok[2]], 0, 0, false)),
            "grid of 3 coordinates"
        );
        assert!(
            invalid(lower_call([ok[0], (F32, &[2, 3, 3, 2]), ok[2]], 0, 0, false)),
            "batch mismatch"
        );
        assert!(
            invalid(lower_call([ok[0], ok[1], (F32, &[1, 2, 3, 4])], 0, 0, false)),
            "output shape"
        );
        assert!(
            unsupported(lower_call([ok[0], (F16, &[1, 3, 3, 2]), ok[2]], 0, 0, false)),
            "mixed dtypes"
        );
        assert!(unsupported(lower_call(
            [(I64, &[1, 2, 4, 5]), (I64, &[1, 3, 3, 2]), (I64, &[1, 2, 3, 3])],
            0,
            0,
            false
        )));
        assert!(unsupported(lower_call(
            [(F32, &[1, 1, 4096, 4096]), ok[1], (F32, &[1, 1, 3, 3])],
            0,
            0,
            false
        )));
    }

    /// Nearest sampling at the pixel centres (align_corners) reproduces the input, across two
    /// point tiles (150 points) and two channel chunks (600 channels).
    #[test]
    fn sampling_the_pixel_centres_copies_the_input() {
        let (c, h, w) = (600usize, 3usize, 50usize);
        let shape_in = [1, c, h, w];
        let shape_grid = [1, h, w, 2];
        let shape_out = [1, c, h, w];
        let l = lower_call(
            [
                (TorchDType::F32, &shape_in),
                (TorchDType::F32, &shape_grid),
                (TorchDType::F32, &shape_out),
            ],
            1,
            0,
            true,
        )
        .expect("lowers");
        let input: Vec<f32> = (0..c * h * w).map(|i| i as f32 * 0.25 - 7.0).collect();
        let grid: Vec<f32> = (0..h * w)
            .flat_map(|p| {
                let (y, x) = (p / w, p % w);
                [
                    -1.0 + 2.0 * x as f32 / (w - 1) as f32,
                    -1.0 + 2.0 * y as f32 / (h - 1) as f32,
                ]
            })
            .collect();
        let host = |shape: &[usize], v: &[f32]| HostTensor {
            dtype: DType::F32,
            shape: shape.to_vec(),
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        let inputs = [
            ("input.0".to_string(), host(&shape_in, &input)),
            ("input.1".to_string(), host(&shape_grid, &grid)),
        ]
        .into();
        let out = Executor::new(TargetName::Trn1)
            .run(&l.program, &inputs)
            .expect("runs")
            .outputs;
        let got: Vec<f32> = out["output.0"]
            .data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(got, input);
    }
}
