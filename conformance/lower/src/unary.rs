//! The `unary` family: elementwise math of one tensor (`abs`, `exp`, `sin`, `floor`, `isnan`, …).
//!
//! Lowered the way the hardware computes, following `binary.rs`:
//! * the input moves HBM → SBUF by DMA (the DMA casts it to the fp32 working tile for float
//!   math, or keeps it as int32 / its own integer dtype for exact integer paths);
//! * each op is a short fixed sequence of engine instructions over a handful of SBUF tiles — a
//!   [`Kernel`], built once per op and replayed for every tile job of `tile.rs`. Transcendentals
//!   go through ScalarE `activation` where the hardware has the function, always with inputs
//!   inside the function's documented valid range (`trnsim::engine::activation::valid_range`):
//!   inputs that may leave it are range-reduced on VectorE first (sin/cos/tan: `x − k·2π` kept as
//!   an exact hi + lo pair — four-part Cody–Waite constant and TwoSum below 2^17, a Payne–Hanek
//!   reduction with the digits of 1/(2π) above — then reflected into [0, π/2]; log: scaling by
//!   2^±96; sqrt/rsqrt: scaling by 2^±100; arctan: `π/2 − atan(1/x)` for |x| > 1), and special
//!   inputs (0, negatives, ±inf, NaN) are clamped into the range before the activation and
//!   patched after it with predicated copies;
//! * functions the hardware lacks are composed (log2 = ln·(1/ln 2), asin via atan2, round via the
//!   fp32 magic-number add, …), keeping fp32 relative accuracy near 0 where PyTorch's libm has it
//!   (expm1 = tanh(x/2)·(eˣ + 1), log1p with Goldberg's correction, asinh/atanh/sinh on top of
//!   them; checked against f64 references in the unit tests); branch selection is `tensor_copy_predicated` on a uint8 mask from
//!   a compare instruction, which (unlike mask arithmetic) is exact for inf/NaN;
//! * the last instruction writes the output tile in the output dtype: fp32 math, one rounding;
//! * integers: exact GpSimdE int32 path (neg, abs, relu, clamp) or VectorE bitvec (bitwise_not).
//!
//! Nothing is computed on the host: scalar arguments become immediates or constant tiles.

use super::promote::{self, Category};
use super::tile::{self, Emitter, Region, SbufAllocator, TileLimits, dma};
use super::{LowerError, LowerRequest, Lowered, device_dtype};
use crate::call::{TensorArg, TensorMeta};
use crate::dtype::TorchDType;
use std::f64::consts::{LN_2, PI};
use trnsim::{ActFunc, AluOp, DType, Engine, HbmRole, Program, TargetName};

/// Elements per partition of one tile. Scratch tiles are shared by live range
/// (`Kernel::tile_slots`): the largest kernels (sin/cos/tan with the Payne–Hanek reduction) need
/// 12 fp32 and 9 uint8 tiles at once, ~60 KB per partition, inside SBUF's usable bytes (checked by
/// `kernels_fit_sbuf`).
const MAX_FREE: usize = 1024;

pub use super::tile::{Kernel, Reg, Step};

// ---------------------------------------------------------------------------------------------
// The unary math, composed over the register kernel of `tile.rs`.

impl Kernel {
    // --- Composite helpers (all fp32; `src` is an fp32 tile). --------------------------------

    /// `±1`: −1 where `src < 0`, else +1 (NaN: +1).
    pub fn sign_pm1(&mut self, src: Reg) -> Reg {
        let s = self.tmp();
        self.ts2(s, src, AluOp::IsLt, 0.0, AluOp::Multiply, -2.0);
        self.ts(s, s, AluOp::Add, 1.0);
        s
    }

    /// `|src|`.
    pub fn abs(&mut self, src: Reg) -> Reg {
        let a = self.tmp();
        self.ts(a, src, AluOp::Abs, 0.0);
        a
    }

    /// `func(src · scale)` with the argument clamped into `[lo, hi]` (NaN replaced by `lo`) before
    /// the activation, and NaN restored after it.
    pub fn act_guarded(&mut self, func: ActFunc, src: Reg, scale: f64, lo: f64, hi: f64) -> Reg {
        let nan = self.is_nan(src);
        let c = self.tmp();
        self.ts2(c, src, AluOp::Max, lo, AluOp::Min, hi);
        self.sel_const(c, lo, nan);
        let r = self.tmp();
        self.act(r, func, c, scale, 0.0);
        self.sel_const(r, f64::NAN, nan);
        r
    }

    /// `c · ln(src)` for every fp32 input (c > 0): 0 → −inf, < 0 → NaN, +inf → +inf, NaN → NaN.
    /// ScalarE's Log is valid on [2^-64, 2^64]: inputs outside [2^-32, 2^32] are scaled by
    /// 2^±96 first and `∓96·ln 2·c` added back.
    pub fn log_c(&mut self, src: Reg, c: f64) -> Reg {
        let lo = self.cmp(src, AluOp::IsLt, 2f64.powi(-32));
        let hi = self.cmp(src, AluOp::IsGt, 2f64.powi(32));
        let sc = self.fill(1.0);
        self.sel_const(sc, 2f64.powi(96), lo);
        self.sel_const(sc, 2f64.powi(-96), hi);
        let off = self.fill(0.0);
        self.sel_const(off, -96.0 * LN_2 * c, lo);
        self.sel_const(off, 96.0 * LN_2 * c, hi);
        let m = self.tmp();
        self.tt(m, src, AluOp::Multiply, sc);
        let y = self.act_guarded(ActFunc::Log, m, 1.0, 2f64.powi(-64), 2f64.powi(64));
        let r = self.tmp();
        self.ts(r, y, AluOp::Multiply, c);
        self.tt(r, r, AluOp::Add, off);
        let z = self.cmp(src, AluOp::IsEqual, 0.0);
        self.sel_const(r, f64::NEG_INFINITY, z);
        let n = self.cmp(src, AluOp::IsLt, 0.0);
        self.sel_const(r, f64::NAN, n);
        let i = self.cmp(src, AluOp::IsEqual, f64::INFINITY);
        self.sel_const(r, f64::INFINITY, i);
        r
    }

    /// `expm1(src · scale)` with full relative accuracy near 0: `tanh(y/2) · (e^y + 1)`
    /// (= (e^y − 1)/(e^y + 1) · (e^y + 1)); both ScalarE functions have no range limit, and the
    /// product has no cancellation. ±inf give +inf / −1; NaN gives NaN.
    pub fn expm1(&mut self, src: Reg, scale: f64) -> Reg {
        let h = self.tmp();
        self.act(h, ActFunc::Tanh, src, 0.5 * scale, 0.0);
        let e = self.tmp();
        self.act(e, ActFunc::Exp, src, scale, 0.0);
        self.ts(e, e, AluOp::Add, 1.0);
        self.tt(h, h, AluOp::Multiply, e);
        h
    }

    /// `c · log1p(src)` with full relative accuracy near 0: with `u = 1 + x` (rounded),
    /// `log(u) · x / (u − 1)` (Goldberg's correction; `u − 1` is exact) where `u ≠ 1`, and `x`
    /// where `u = 1`; `log(u)` itself for x ≤ −1, +inf and NaN.
    pub fn log1p_c(&mut self, src: Reg, c: f64) -> Reg {
        let u = self.tmp();
        self.ts(u, src, AluOp::Add, 1.0);
        let r = self.log_c(u, c);
        let d = self.tmp();
        self.ts(d, u, AluOp::Subtract, 1.0);
        let f = self.tmp();
        self.recip(f, d);
        self.tt(f, f, AluOp::Multiply, src);
        self.tt(f, f, AluOp::Multiply, r);
        let ok = self.cmp(d, AluOp::NotEqual, 0.0);
        let above = self.cmp(src, AluOp::IsGt, -1.0);
        let finite = self.cmp(src, AluOp::IsLt, f64::INFINITY);
        self.tt(ok, ok, AluOp::LogicalAnd, above);
        self.tt(ok, ok, AluOp::LogicalAnd, finite);
        self.sel(r, f, ok);
        let one = self.cmp(d, AluOp::IsEqual, 0.0);
        let cx = self.tmp();
        self.ts(cx, src, AluOp::Multiply, c);
        self.sel(r, cx, one);
        r
    }

    /// `sqrt(src)` (`inverse`: `1/sqrt(src)`) for every fp32 input, through ScalarE's Sqrt/Rsqrt
    /// (valid on [2^-116, 2^118] / [2^-87, 2^97]): inputs outside [2^-80, 2^80] are scaled by
    /// 2^±100 (exact) and the result by 2^∓50 (2^±50).
    pub fn sqrt_full(&mut self, src: Reg, inverse: bool) -> Reg {
        let lo = self.cmp(src, AluOp::IsLt, 2f64.powi(-80));
        let hi = self.cmp(src, AluOp::IsGt, 2f64.powi(80));
        let sc = self.fill(1.0);
        self.sel_const(sc, 2f64.powi(100), lo);
        self.sel_const(sc, 2f64.powi(-100), hi);
        let post = self.fill(1.0);
        let e = if inverse { 50 } else { -50 };
        self.sel_const(post, 2f64.powi(e), lo);
        self.sel_const(post, 2f64.powi(-e), hi);
        let m = self.tmp();
        self.tt(m, src, AluOp::Multiply, sc);
        let (func, range) = if inverse {
            (ActFunc::Rsqrt, (2f64.powi(-87), 2f64.powi(97)))
        } else {
            (ActFunc::Sqrt, (2f64.powi(-116), 2f64.powi(118)))
        };
        let y = self.act_guarded(func, m, 1.0, range.0, range.1);
        let r = self.tmp();
        self.tt(r, y, AluOp::Multiply, post);
        let z = self.cmp(src, AluOp::IsEqual, 0.0);
        if inverse {
            // 1/sqrt(±0) = ±inf: the reciprocal of the zero itself.
            let rz = self.tmp();
            self.recip(rz, src);
            self.sel(r, rz, z);
        } else {
            // sqrt(±0) = ±0.
            self.sel(r, src, z);
        }
        let n = self.cmp(src, AluOp::IsLt, 0.0);
        self.sel_const(r, f64::NAN, n);
        let i = self.cmp(src, AluOp::IsEqual, f64::INFINITY);
        self.sel_const(r, if inverse { 0.0 } else { f64::INFINITY }, i);
        r
    }

    /// `atan2(num, den)` for `num, den ≥ 0` (or NaN): `atan(min/max)` on ScalarE (valid range
    /// [-π/2, π/2]; the ratio is in [0, 1]), then `π/2 − t` where `num > den`.
    pub fn atan2_pos(&mut self, num: Reg, den: Reg) -> Reg {
        let lo = self.tmp();
        self.tt(lo, num, AluOp::Min, den);
        let hi = self.tmp();
        self.tt(hi, num, AluOp::Max, den);
        self.recip(hi, hi);
        let q = self.tmp();
        self.tt(q, lo, AluOp::Multiply, hi);
        let t = self.act_guarded(ActFunc::Arctan, q, 1.0, 0.0, 1.0);
        // π/2 − t as (P1 − t) + P2, P1 + P2 = π/2.
        let p1 = (PI / 2.0) as f32 as f64;
        let p2 = PI / 2.0 - p1;
        let alt = self.tmp();
        self.ts2(alt, t, AluOp::Subtract, p1, AluOp::Multiply, -1.0);
        self.ts(alt, alt, AluOp::Add, p2);
        let m = self.mask();
        self.tt(m, num, AluOp::IsGt, den);
        self.sel(t, alt, m);
        t
    }

    /// Knuth's TwoSum: `(s, e)` with `s = fl(a + b)` and `a + b = s + e` exactly (fp32).
    pub fn two_sum(&mut self, a: Reg, b: Reg) -> (Reg, Reg) {
        let s = self.tmp();
        self.tt(s, a, AluOp::Add, b);
        let bb = self.tmp();
        self.tt(bb, s, AluOp::Subtract, a);
        let aa = self.tmp();
        self.tt(aa, s, AluOp::Subtract, bb);
        self.tt(aa, a, AluOp::Subtract, aa);
        self.tt(bb, b, AluOp::Subtract, bb);
        self.tt(aa, aa, AluOp::Add, bb);
        (s, aa)
    }

    /// `x − k·2π` with `k = round(x / 2π)` as an unevaluated pair `(hi, lo)`, `|lo| ≤ ulp(hi)/2`,
    /// `hi ∈ [-π, π]` (up to rounding of k). k uses the fp32 magic-number rounding (valid for
    /// |x| < 2^22·2π). 2π = C1 + C2 + C3 + C4 (Cody–Waite) with C1..C3 of 8 significant bits, so
    /// every `k·Ci` is exact for |k| < 2^16; `x − k·C1` is exact (Sterbenz) and the other terms
    /// are added with TwoSum, so the pair is accurate to ~2^-48 relative for |x| < 2^16·2π.
    /// Inf and NaN give NaN.
    pub fn reduce_2pi(&mut self, x: Reg) -> (Reg, Reg) {
        let magic = 1.5 * 2f64.powi(23);
        let round8 = |v: f64| round_to_bits(v, 8);
        let c1 = round8(2.0 * PI);
        let c2 = round8(2.0 * PI - c1);
        let c3 = round8(2.0 * PI - c1 - c2);
        let c4 = (2.0 * PI - c1 - c2 - c3) as f32 as f64;
        let k = self.tmp();
        self.ts2(k, x, AluOp::Multiply, 1.0 / (2.0 * PI), AluOp::Add, magic);
        self.ts(k, k, AluOp::Subtract, magic);
        let hi = self.tmp();
        self.stt(hi, k, AluOp::Multiply, -c1, AluOp::Add, x);
        let p2 = self.tmp();
        self.ts(p2, k, AluOp::Multiply, -c2);
        let (s1, e1) = self.two_sum(hi, p2);
        let p3 = self.tmp();
        self.ts(p3, k, AluOp::Multiply, -c3);
        let (s2, e2) = self.two_sum(s1, p3);
        let lo = self.tmp();
        self.tt(lo, e1, AluOp::Add, e2);
        self.stt(lo, k, AluOp::Multiply, -c4, AluOp::Add, lo);
        self.two_sum(s2, lo)
    }

    /// `p − round(p)` in place, for |p| < 2^24: exact, ≡ p (mod 1), in [−1/2, 1/2] for
    /// |p| < 2^22 and in [−1, 1] above (where `p + 1.5·2^23` rounds to an even integer).
    /// `scratch` is overwritten.
    fn frac_in_place(&mut self, p: Reg, scratch: Reg) {
        let magic = 1.5 * 2f64.powi(23);
        self.ts2(scratch, p, AluOp::Add, magic, AluOp::Subtract, magic);
        self.tt(p, p, AluOp::Subtract, scratch);
    }

    /// `x − k·2π` as a pair `(hi, lo)` with `hi + lo ∈ [−π, π]` (up to rounding) for every finite
    /// fp32 x with |x| ≥ 2^11 — a Payne–Hanek reduction in exact fp32 pieces (docs/numerics.md,
    /// "Trigonometric argument reduction"). ±inf and NaN give NaN.
    ///
    /// With the window `j` of |x| (|x| ∈ [2^(23+12j), 2^(35+12j)), j = −1 below 2^23),
    /// `xs = x·2^(−12j) ∈ [2^23, 2^35)` is an integer, so in
    /// `x/(2π) = xs · Σ_i d_i·2^(12j − 12(i+1))` (d_i: 12-bit digits of 1/(2π)) every term with
    /// i < j is an integer and drops out mod 1: `x/(2π) ≡ xs · Σ_k D_k (mod 1)` with
    /// `D_k = d_(k+j)·2^(−12(k+1))`, k = 0..5 (the tail beyond is < xs·2^(−72) < 2^(−37)).
    /// xs = xh + xl (Veltkamp split, 12 + 12 bits), so every product `xh·D_k`, `xl·D_k` is exact;
    /// their fractional parts are exact (`frac_in_place`) and are added in an order whose partial
    /// sums are exact (their grids: 2^(−12), then 2^(−24)); the ~2^(−36)-grid remainder is added
    /// with TwoSum. The turn fraction `h + l ∈ [−1/2, 1/2]` becomes radians as
    /// `sh·Q1` (sh: h on a 2^(−12) grid, Q1: 2π to 12 bits; exact) plus the small rest.
    pub fn reduce_2pi_payne_hanek(&mut self, x: Reg) -> (Reg, Reg) {
        use AluOp::*;
        let digit_term = |i: i32, k: i32| inv_two_pi_digit(i) as f64 * 2f64.powi(-12 * (k + 1));
        let a = self.abs(x);
        let windows: Vec<Reg> = (0..9).map(|j| self.cmp(a, IsGe, 2f64.powi(23 + 12 * j))).collect();
        // xs = x · 2^(−12j)
        let xs = self.tmp();
        let up = self.k(2f64.powi(12));
        self.copy(xs, up);
        for (j, &w) in windows.iter().enumerate() {
            self.sel_const(xs, 2f64.powi(-12 * j as i32), w);
        }
        self.tt(xs, x, Multiply, xs);
        // Veltkamp: c = xs·(2^12 + 1); xh = c − (c − xs); xl = xs − xh.
        let xh = self.tmp();
        self.ts(xh, xs, Multiply, 4097.0);
        let xl = self.tmp();
        self.tt(xl, xh, Subtract, xs);
        self.tt(xh, xh, Subtract, xl);
        self.tt(xl, xs, Subtract, xh);
        // D_k for this element's window.
        let d = self.tmp();
        let set_digits = |kern: &mut Kernel, k: i32| {
            let base = kern.k(digit_term(k - 1, k));
            kern.copy(d, base);
            for (j, &w) in windows.iter().enumerate() {
                kern.sel_const(d, digit_term(k + j as i32, k), w);
            }
        };
        let scratch = self.tmp();
        let prod = self.tmp();
        // k = 0: xh·D_0 is an integer (xh is a multiple of 2^12); xl·D_0 < 2^22.
        set_digits(self, 0);
        let acc = self.tmp();
        self.tt(acc, xl, Multiply, d);
        self.frac_in_place(acc, scratch);
        // k = 1: xh·D_1 < 2^23 (fraction in [−1, 1]) on the 2^(−12) grid: acc stays exact.
        set_digits(self, 1);
        self.tt(prod, xh, Multiply, d);
        self.frac_in_place(prod, scratch);
        self.tt(acc, acc, Add, prod);
        self.frac_in_place(acc, scratch);
        let mid = self.tmp();
        self.tt(mid, xl, Multiply, d);
        self.frac_in_place(mid, scratch);
        // k = 2: xh·D_2 < 2^11; mid (|·| ≤ 1, grid 2^(−24)) is exact, and so is acc + mid once
        // both are in [−1/2, 1/2].
        set_digits(self, 2);
        self.tt(prod, xh, Multiply, d);
        self.frac_in_place(prod, scratch);
        self.tt(mid, mid, Add, prod);
        self.frac_in_place(mid, scratch);
        self.tt(acc, acc, Add, mid);
        self.frac_in_place(acc, scratch);
        // The rest is below 1 already: xl·D_2 + xh·D_3 (grid 2^(−36)) by TwoSum, then the tail.
        let small = self.tmp();
        self.tt(small, xl, Multiply, d);
        set_digits(self, 3);
        self.tt(prod, xh, Multiply, d);
        let (s, e) = self.two_sum(prod, small);
        let tail = self.tmp();
        self.tt(tail, xl, Multiply, d);
        for k in 4..6 {
            set_digits(self, k);
            self.tt(prod, xh, Multiply, d);
            self.tt(tail, tail, Add, prod);
            self.tt(prod, xl, Multiply, d);
            self.tt(tail, tail, Add, prod);
        }
        self.tt(e, e, Add, tail);
        let (h, l) = self.two_sum(acc, s);
        self.tt(l, l, Add, e);
        self.frac_in_place(h, scratch);
        // Turns → radians: h = sh + (h − sh) with sh on the 2^(−12) grid, |sh| ≤ 1/2.
        let magic = 1.5 * 2f64.powi(23);
        let q1 = round_to_bits(2.0 * PI, 12);
        let q2 = 2.0 * PI - q1;
        let sh = self.tmp();
        self.ts2(sh, h, Multiply, 4096.0, Add, magic);
        self.ts2(sh, sh, Subtract, magic, Multiply, 2f64.powi(-12));
        self.tt(h, h, Subtract, sh);
        self.tt(h, h, Add, l);
        let r_lo = self.tmp();
        self.ts(r_lo, h, Multiply, 2.0 * PI);
        self.stt(r_lo, sh, Multiply, q2, Add, r_lo);
        let r_hi = self.tmp();
        self.ts(r_hi, sh, Multiply, q1);
        self.fast_two_sum(r_hi, r_lo)
    }

    /// Dekker's Fast2Sum `(s, e)`, `s = fl(a + b)`, `a + b = s + e` exactly when |a| ≥ |b| (or
    /// a = 0).
    pub fn fast_two_sum(&mut self, a: Reg, b: Reg) -> (Reg, Reg) {
        let s = self.tmp();
        self.tt(s, a, AluOp::Add, b);
        let z = self.tmp();
        self.tt(z, s, AluOp::Subtract, a);
        self.tt(z, b, AluOp::Subtract, z);
        (s, z)
    }

    /// `x − k·2π` as `(hi, lo)` for every fp32 x: Cody–Waite (`reduce_2pi`) below 2^17, where it
    /// is exact, and Payne–Hanek (`reduce_2pi_payne_hanek`) from there on, selected per element.
    pub fn reduce_2pi_full(&mut self, x: Reg) -> (Reg, Reg) {
        let (hi, lo) = self.reduce_2pi(x);
        let (big_hi, big_lo) = self.reduce_2pi_payne_hanek(x);
        let a = self.abs(x);
        let big = self.cmp(a, AluOp::IsGe, 2f64.powi(17));
        self.sel(hi, big_hi, big);
        self.sel(lo, big_lo, big);
        (hi, lo)
    }

    /// `sin(r)` for `r ∈ [-π, π]` (clamped to ScalarE Sin's valid range).
    pub fn sin_reduced(&mut self, r: Reg) -> Reg {
        let pi = std::f32::consts::PI as f64;
        self.act_guarded(ActFunc::Sin, r, 1.0, -pi, pi)
    }

    /// `sin(r)` for `r = hi + lo ∈ [-π, π]` with relative accuracy near its zeros: with σ the sign
    /// of hi, `σ · sin(|r|)`, and `|r|` replaced by `π − |r| = (Π1 − σ·hi) + (Π2 − σ·lo)` (Π1 + Π2
    /// = π; the first difference is exact) where `|r| > π/2`.
    pub fn sin_pair(&mut self, hi: Reg, lo: Reg) -> Reg {
        let p1 = PI as f32 as f64;
        let p2 = PI - p1;
        let sg = self.sign_pm1(hi);
        let ah = self.tmp();
        self.tt(ah, hi, AluOp::Multiply, sg);
        let al = self.tmp();
        self.tt(al, lo, AluOp::Multiply, sg);
        let refl = self.tmp();
        self.ts2(refl, ah, AluOp::Subtract, p1, AluOp::Multiply, -1.0);
        let rl = self.tmp();
        self.ts2(rl, al, AluOp::Subtract, p2, AluOp::Multiply, -1.0);
        self.tt(refl, refl, AluOp::Add, rl);
        let m = self.cmp(ah, AluOp::IsGt, PI / 2.0);
        self.tt(ah, ah, AluOp::Add, al);
        self.sel(ah, refl, m);
        let s = self.sin_reduced(ah);
        self.tt(s, s, AluOp::Multiply, sg);
        s
    }

    /// `cos(r) = sin(π/2 − |r|)` for `r = hi + lo ∈ [-π, π]` (`|lo| ≤ ulp(hi)/2`), with
    /// `π/2 − |r|` evaluated as `(P1 − σ·hi) + (P2 − σ·lo)` (σ = sign of hi, P1 + P2 = π/2; the
    /// first difference is exact where |hi| ≥ π/4), so that cos keeps its relative accuracy near
    /// its zeros (tan's poles).
    pub fn cos_reduced(&mut self, hi: Reg, lo: Reg) -> Reg {
        let p1 = (PI / 2.0) as f32 as f64;
        let p2 = PI / 2.0 - p1;
        let sg = self.sign_pm1(hi);
        let ch = self.tmp();
        self.tt(ch, hi, AluOp::Multiply, sg);
        self.ts2(ch, ch, AluOp::Subtract, p1, AluOp::Multiply, -1.0);
        let cl = self.tmp();
        self.tt(cl, lo, AluOp::Multiply, sg);
        self.ts2(cl, cl, AluOp::Subtract, p2, AluOp::Multiply, -1.0);
        self.tt(ch, ch, AluOp::Add, cl);
        self.sin_reduced(ch)
    }

    /// `|x|` rounded half to even, for fp32 `a = |x|` (inf/NaN pass through): `(a + 2^23) − 2^23`
    /// where `a < 2^23`, else `a` (already an integer).
    pub fn round_abs(&mut self, a: Reg) -> Reg {
        let two23 = 2f64.powi(23);
        let c = self.tmp();
        self.ts(c, a, AluOp::Min, two23);
        self.ts2(c, c, AluOp::Add, two23, AluOp::Subtract, two23);
        let small = self.cmp(a, AluOp::IsLt, two23);
        let r = self.tmp();
        self.copy(r, a);
        self.sel(r, c, small);
        r
    }
}

/// `v` rounded to `bits` significant bits.
fn round_to_bits(v: f64, bits: i32) -> f64 {
    let e = v.abs().log2().floor() as i32 - (bits - 1);
    (v / 2f64.powi(e)).round() * 2f64.powi(e)
}

/// The bits of 2/π after the binary point, 24 to a word: fdlibm's `two_over_pi` table
/// (`k_rem_pio2.c`, Sun Microsystems 1993), the usual source for Payne–Hanek reduction.
/// 1/(2π) is the same bit string two places further right. 9 words (216 bits) cover the digits
/// the reduction uses (up to d_13, bit 168).
const TWO_OVER_PI_BITS: [u32; 9] = [
    0xA2F983, 0x6E4E44, 0x1529FC, 0x2757D1, 0xF534DD, 0xC0DB62, 0x95993C, 0x439041, 0xFE5163,
];

/// Digit `i` of 1/(2π) in base 2^12 (`1/(2π) = Σ_i d_i·2^(−12(i+1))`; 0 for i < 0): bits
/// 12i − 1 ..= 12i + 10 of 2/π (numbered from 1 after the point; bit 0 and −1 are 0).
fn inv_two_pi_digit(i: i32) -> u32 {
    let bit = |n: i32| -> u32 {
        if n < 1 {
            return 0;
        }
        let n = (n - 1) as usize;
        (TWO_OVER_PI_BITS[n / 24] >> (23 - n % 24)) & 1
    };
    if i < 0 {
        return 0;
    }
    (0..12).fold(0, |acc, b| (acc << 1) | bit(12 * i - 1 + b))
}

// ---------------------------------------------------------------------------------------------
// Calls.

/// A checked unary call.
#[derive(Clone, Debug, PartialEq)]
pub struct UnaryCall {
    /// The op name without overload.
    pub name: String,
    pub self_name: String,
    pub self_meta: TensorMeta,
    pub out_name: String,
    pub out_dtype: TorchDType,
}

/// How PyTorch picks the output dtype of a unary op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutRule {
    /// Floating functions: integer and bool inputs give the default float dtype.
    Float,
    /// The input's dtype.
    Same,
    /// Predicates: bool.
    Bool,
}

pub fn out_dtype(rule: OutRule, input: TorchDType) -> TorchDType {
    match rule {
        OutRule::Float if promote::category(input) <= Category::Integer => promote::DEFAULT_FLOAT,
        OutRule::Bool => TorchDType::Bool,
        _ => input,
    }
}

/// Checks `self` and the output against PyTorch's dtype rule.
pub fn analyze(req: &LowerRequest<'_>, rule: OutRule) -> Result<UnaryCall, LowerError> {
    let self_name = req.arg::<TensorArg>(0, "self")?.0.to_string();
    let self_meta = req.tensor(&self_name)?.clone();
    if self_meta.dtype.is_complex() {
        return Err(req.unsupported("complex tensors".into()));
    }
    let out_dtype = out_dtype(rule, self_meta.dtype);
    let out_name = req.output_tensor(0)?.to_string();
    let out_meta = req.tensor(&out_name)?;
    if out_meta.dtype != out_dtype || out_meta.shape != self_meta.shape {
        return Err(req.invalid(format!(
            "PyTorch's rules give {out_dtype} {:?}, the golden output is {} {:?}",
            self_meta.shape, out_meta.dtype, out_meta.shape
        )));
    }
    let name = req.op.split('.').next().unwrap_or(req.op).to_string();
    Ok(UnaryCall {
        name,
        self_name,
        self_meta,
        out_name,
        out_dtype,
    })
}

fn dev(req: &LowerRequest<'_>, d: TorchDType) -> Result<DType, LowerError> {
    device_dtype(d).ok_or_else(|| req.unsupported(format!("{d} has no device dtype")))
}

// ---------------------------------------------------------------------------------------------
// Program emission.

/// Builds the program: DMA in (cast to `x_dtype`), the kernel per tile job, DMA out.
pub fn emit(
    call: &UnaryCall,
    kernel: &Kernel,
    x_dtype: DType,
    target_name: TargetName,
    req: &LowerRequest<'_>,
) -> Result<Program, LowerError> {
    let target = target_name.params();
    let mut program = Program::new(target_name);
    let self_dev = dev(req, call.self_meta.dtype)?;
    let out_dev = dev(req, call.out_dtype)?;
    program.declare(&call.self_name, self_dev, &call.self_meta.shape, HbmRole::Input);
    program.declare(&call.out_name, out_dev, &call.self_meta.shape, HbmRole::Output);

    let mut alloc = SbufAllocator::new(&target);
    let mut e = Emitter::new(program);
    let tiles = kernel.tiles(&mut alloc, x_dtype, out_dev, MAX_FREE)?;
    let numel: usize = call.self_meta.shape.iter().product();
    if numel > 0 {
        kernel.emit_consts(&mut e, &tiles, target.partitions);
    }

    let strides = vec![
        tile::broadcast_strides(&call.self_meta.shape, &call.self_meta.shape),
        tile::broadcast_strides(&call.self_meta.shape, &call.self_meta.shape),
    ];
    let jobs = tile::plan_tiles(
        Region::new(&call.self_meta.shape, &strides),
        TileLimits::for_target(&target, MAX_FREE),
    );
    for job in &jobs {
        e.push(
            Engine::Dma,
            dma(tiles.x_shaped(job), job.hbm_ap(1, &call.self_name, self_dev)),
        );
        kernel.emit_job(&mut e, job, &tiles);
        e.push(
            Engine::Dma,
            dma(job.hbm_ap(0, &call.out_name, out_dev), tiles.out_shaped(job)),
        );
    }
    Ok(e.finish())
}

// ---------------------------------------------------------------------------------------------
// The unary ops.

/// The output dtype rule of a unary op, `None` if not in this family.
pub fn rule(name: &str) -> Option<OutRule> {
    Some(match name {
        "acos" | "acosh" | "asin" | "asinh" | "atan" | "atanh" | "cos" | "cosh" | "erf" | "exp" | "expm1" | "log"
        | "log10" | "log1p" | "log2" | "reciprocal" | "rsqrt" | "sin" | "sinh" | "sqrt" | "tan" | "tanh" => {
            OutRule::Float
        }
        "abs" | "neg" | "sign" | "ceil" | "floor" | "round" | "trunc" | "bitwise_not" => OutRule::Same,
        "logical_not" | "isnan" | "isinf" => OutRule::Bool,
        _ => return None,
    })
}

/// The kernel of a unary op for an input of `input` dtype, and the dtype the input tile is
/// loaded as.
pub fn kernel(name: &str, input: TorchDType) -> Result<(Kernel, DType), String> {
    use AluOp::*;
    let mut k = Kernel::new();
    let cat = promote::category(input);
    let x = Reg::X;
    let out = Reg::Out;
    // Exact integer paths.
    if cat <= Category::Integer {
        let i32_ok = matches!(input, TorchDType::I32 | TorchDType::I64);
        match name {
            "neg" if i32_ok => {
                k.gp_ts(out, x, Subtract, 0.0, true, None);
                return Ok((k, DType::I32));
            }
            "abs" if i32_ok => {
                k.gp_ts(out, x, Abs, 0.0, false, None);
                return Ok((k, DType::I32));
            }
            "ceil" | "floor" | "round" | "trunc" if i32_ok => {
                k.steps.push(Step::Copy {
                    eng: Engine::Gpsimd,
                    dst: out,
                    src: x,
                });
                return Ok((k, DType::I32));
            }
            "bitwise_not" if input == TorchDType::Bool => {
                k.ts(out, x, IsEqual, 0.0);
                return Ok((k, DType::F32));
            }
            "bitwise_not" => {
                let d = device_dtype(input).ok_or("no device dtype")?;
                k.ts(out, x, BitwiseNot, 0.0);
                return Ok((k, d));
            }
            "neg" | "abs" | "ceil" | "floor" | "round" | "trunc" => {
                return Err(format!("{name} on {input}"));
            }
            _ => {}
        }
    } else if name == "bitwise_not" {
        return Err("bitwise_not of a float tensor".into());
    }
    // fp32 math on an fp32 tile (the DMA converts the input).
    match name {
        "abs" => k.ts(out, x, Abs, 0.0),
        "neg" => k.ts(out, x, Multiply, -1.0),
        "sign" => {
            // (x > 0) − (x < 0): ±0 → 0, and NaN → 0 as in PyTorch's kernel.
            let p = k.tmp();
            k.ts(p, x, IsGt, 0.0);
            let n = k.tmp();
            k.ts(n, x, IsLt, 0.0);
            k.tt(out, p, Subtract, n);
        }
        "isnan" => k.tt(out, x, NotEqual, x),
        "isinf" => k.ts2(out, x, Abs, 0.0, IsEqual, f64::INFINITY),
        "logical_not" => k.ts(out, x, IsEqual, 0.0),
        "exp" => k.act(out, ActFunc::Exp, x, 1.0, 0.0),
        "tanh" => k.act(out, ActFunc::Tanh, x, 1.0, 0.0),
        "erf" => k.act(out, ActFunc::Erf, x, 1.0, 0.0),
        "expm1" => {
            let r = k.expm1(x, 1.0);
            k.copy(out, r);
        }
        "reciprocal" => k.recip(out, x),
        "sqrt" | "rsqrt" => {
            let r = k.sqrt_full(x, name == "rsqrt");
            k.copy(out, r);
        }
        "log" | "log2" | "log10" => {
            let c = match name {
                "log" => 1.0,
                "log2" => 1.0 / LN_2,
                _ => 1.0 / std::f64::consts::LN_10,
            };
            let r = k.log_c(x, c);
            k.copy(out, r);
        }
        "log1p" => {
            let r = k.log1p_c(x, 1.0);
            k.copy(out, r);
        }
        "atanh" => {
            // sign · 0.5 · log1p(2a / (1 − a)), a = |x|: accurate near 0; a = 1 → inf, a > 1 → NaN.
            let a = k.abs(x);
            let d = k.tmp();
            k.ts_rev(d, a, Subtract, 1.0);
            k.recip(d, d);
            let q = k.tmp();
            k.stt(q, a, Multiply, 2.0, Multiply, d);
            let r = k.log1p_c(q, 0.5);
            let sg = k.sign_pm1(x);
            k.tt(out, r, Multiply, sg);
        }
        "asinh" | "acosh" => {
            // asinh: sign · log1p(a + w²/(1 + sqrt(w² + 1))), a = |x|;
            // acosh: log1p((w − 1) + sqrt((w − 1)(w + 1))) — both accurate near 0 / near 1.
            // w = min(a, 2^20): beyond 2^20 (where the argument is 2a in fp32) the result is
            // ln(a) + ln 2, so nothing overflows before the result does.
            let big = 2f64.powi(20);
            let a = if name == "asinh" { k.abs(x) } else { x };
            let w = k.tmp();
            k.ts(w, a, Min, big);
            let z = k.tmp();
            if name == "asinh" {
                let q = k.tmp();
                k.tt(q, w, Multiply, w);
                let q1 = k.tmp();
                k.ts(q1, q, Add, 1.0);
                let s = k.sqrt_full(q1, false);
                k.ts(s, s, Add, 1.0);
                k.recip(s, s);
                k.tt(q, q, Multiply, s);
                k.tt(z, a, Add, q);
            } else {
                let w1 = k.tmp();
                k.ts(w1, w, Add, 1.0);
                let wm = k.tmp();
                k.ts(wm, w, Subtract, 1.0);
                let q = k.tmp();
                k.tt(q, wm, Multiply, w1);
                let s = k.sqrt_full(q, false);
                k.tt(z, wm, Add, s);
            }
            let r = k.log1p_c(z, 1.0);
            let far = k.log_c(a, 1.0);
            k.ts(far, far, Add, LN_2);
            let huge = k.cmp(a, IsGt, big);
            k.sel(r, far, huge);
            if name == "asinh" {
                let sg = k.sign_pm1(x);
                k.tt(out, r, Multiply, sg);
            } else {
                let below = k.cmp(x, IsLt, 1.0);
                k.sel_const(r, f64::NAN, below);
                k.copy(out, r);
            }
        }
        "atan" | "asin" => {
            let a = k.abs(x);
            let den = if name == "atan" {
                k.fill(1.0)
            } else {
                // sqrt((1 − a)(1 + a))
                let u = k.tmp();
                k.ts_rev(u, a, Subtract, 1.0);
                let v = k.tmp();
                k.ts(v, a, Add, 1.0);
                k.tt(u, u, Multiply, v);
                k.sqrt_full(u, false)
            };
            let t = k.atan2_pos(a, den);
            let sg = k.sign_pm1(x);
            k.tt(out, t, Multiply, sg);
        }
        "acos" => {
            // 2 · atan2(sqrt(1 − x), sqrt(1 + x))
            let u = k.tmp();
            k.ts_rev(u, x, Subtract, 1.0);
            let su = k.sqrt_full(u, false);
            let v = k.tmp();
            k.ts(v, x, Add, 1.0);
            let sv = k.sqrt_full(v, false);
            let t = k.atan2_pos(su, sv);
            k.ts(out, t, Multiply, 2.0);
        }
        "sin" | "cos" | "tan" => {
            // The Payne–Hanek path (~200 VectorE instructions) only where the input dtype can
            // hold |x| ≥ 2^17: not f16 (max 65504), bool, or 8/16-bit integers.
            let small_range = matches!(
                input,
                TorchDType::F16 | TorchDType::Bool | TorchDType::U8 | TorchDType::I8 | TorchDType::I16
            );
            let (hi, lo) = if small_range {
                k.reduce_2pi(x)
            } else {
                k.reduce_2pi_full(x)
            };
            match name {
                "sin" => {
                    let s = k.sin_pair(hi, lo);
                    k.copy(out, s);
                }
                "cos" => {
                    let c = k.cos_reduced(hi, lo);
                    k.copy(out, c);
                }
                _ => {
                    let s = k.sin_pair(hi, lo);
                    let c = k.cos_reduced(hi, lo);
                    k.recip(c, c);
                    k.tt(out, s, Multiply, c);
                }
            }
        }
        "sinh" | "cosh" => {
            // t = e^(|x|/2); e^|x|/2 = (t/2)·t and e^-|x|/2 = 0.5/(t·t): no overflow before the
            // result itself overflows.
            let a = k.abs(x);
            let t = k.tmp();
            k.act(t, ActFunc::Exp, a, 0.5, 0.0);
            let big = k.tmp();
            k.stt(big, t, Multiply, 0.5, Multiply, t);
            let small = k.tmp();
            k.tt(small, t, Multiply, t);
            k.recip(small, small);
            k.ts(small, small, Multiply, 0.5);
            if name == "cosh" {
                k.tt(out, big, Add, small);
            } else {
                let d = k.tmp();
                k.tt(d, big, Subtract, small);
                // |x| < 1: 0.5 · (e + e/(e + 1)), e = expm1(|x|), without cancellation.
                let e = k.expm1(a, 1.0);
                let e1 = k.tmp();
                k.ts(e1, e, Add, 1.0);
                k.recip(e1, e1);
                k.tt(e1, e1, Multiply, e);
                k.tt(e1, e1, Add, e);
                k.ts(e1, e1, Multiply, 0.5);
                let near = k.cmp(a, IsLt, 1.0);
                k.sel(d, e1, near);
                let sg = k.sign_pm1(x);
                k.tt(out, d, Multiply, sg);
            }
        }
        "round" | "trunc" | "floor" | "ceil" => {
            let a = k.abs(x);
            let ra = k.round_abs(a);
            let sg = k.sign_pm1(x);
            if name == "round" {
                k.tt(out, ra, Multiply, sg);
            } else {
                // floor(a) = ra − (ra > a); trunc = sign · floor(a).
                let gt = k.tmp();
                k.tt(gt, ra, IsGt, a);
                k.tt(ra, ra, Subtract, gt);
                let t = k.tmp();
                k.tt(t, ra, Multiply, sg);
                match name {
                    "trunc" => k.copy(out, t),
                    "floor" => {
                        let c = k.tmp();
                        k.tt(c, t, IsGt, x);
                        k.tt(out, t, Subtract, c);
                    }
                    _ => {
                        let c = k.tmp();
                        k.tt(c, t, IsLt, x);
                        k.tt(out, t, Add, c);
                    }
                }
            }
        }
        other => return Err(format!("no kernel for {other}")),
    }
    Ok((k, DType::F32))
}

pub fn lower(req: &LowerRequest<'_>, target: TargetName) -> Result<Lowered, LowerError> {
    lower_kernel(req, target, rule, |_, call| {
        kernel(&call.name, call.self_meta.dtype).map_err(|e| req.unsupported(e))
    })
}

/// Lowers a one-tensor elementwise call of a family whose output dtypes follow `rule` and whose
/// register kernel `kernel` builds from the op's base name and the analysed call (unary,
/// activation): the checks of [`analyze`], then [`emit`].
pub fn lower_kernel(
    req: &LowerRequest<'_>,
    target: TargetName,
    rule: fn(&str) -> Option<OutRule>,
    kernel: impl FnOnce(&str, &UnaryCall) -> Result<(Kernel, DType), LowerError>,
) -> Result<Lowered, LowerError> {
    let name = req.op.split('.').next().unwrap_or(req.op);
    let r = rule(name).ok_or_else(|| LowerError::NotLowered(req.op.to_string()))?;
    let call = analyze(req, r)?;
    let (k, x_dtype) = kernel(name, &call)?;
    Ok(Lowered::new(emit(&call, &k, x_dtype, target, req)?))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use TorchDType::*;

    #[test]
    fn output_dtypes_follow_torch() {
        assert_eq!(out_dtype(OutRule::Float, I64), F32);
        assert_eq!(out_dtype(OutRule::Float, Bool), F32);
        assert_eq!(out_dtype(OutRule::Float, Bf16), Bf16);
        assert_eq!(out_dtype(OutRule::Same, I32), I32);
        assert_eq!(out_dtype(OutRule::Bool, F16), Bool);
    }

    #[test]
    fn integer_paths_are_exact() {
        let (k, d) = kernel("neg", I64).unwrap();
        assert_eq!(d, DType::I32);
        assert!(k.steps.iter().all(|s| s.engine() == Engine::Gpsimd));
        let (k, d) = kernel("bitwise_not", I8).unwrap();
        assert_eq!(d, DType::I8);
        assert!(matches!(
            k.steps[0],
            Step::Ts {
                op0: AluOp::BitwiseNot,
                ..
            }
        ));
        assert!(kernel("bitwise_not", F32).is_err());
    }

    /// Runs a kernel's steps on fp32 values with the simulator's own ALU and activation
    /// functions, asserting that every activation argument is inside the function's valid range.
    pub(crate) fn interpret(k: &Kernel, xs: &[f32]) -> Vec<f32> {
        use std::collections::HashMap;
        use trnsim::engine::{activation, alu};
        let n = trnsim::Numerics::default();
        let mut regs: HashMap<Reg, Vec<f32>> = HashMap::new();
        regs.insert(Reg::X, xs.to_vec());
        for (i, &c) in k.consts.iter().enumerate() {
            regs.insert(Reg::K(i as u8), vec![c as f32; xs.len()]);
        }
        let get = |regs: &HashMap<Reg, Vec<f32>>, r: Reg| {
            regs.get(&r)
                .unwrap_or_else(|| panic!("{r:?} read before written"))
                .clone()
        };
        for step in &k.steps {
            let v: Vec<f32> = match step {
                Step::Ts {
                    src,
                    op0,
                    v0,
                    rev0,
                    op1,
                    ..
                } => get(&regs, *src)
                    .iter()
                    .map(|&a| {
                        let t = if *rev0 {
                            alu::apply_f32(*op0, *v0 as f32, a, &n)
                        } else {
                            alu::apply_f32(*op0, a, *v0 as f32, &n)
                        };
                        match op1 {
                            Some((o, v1)) => alu::apply_f32(*o, t, *v1 as f32, &n),
                            None => t,
                        }
                    })
                    .collect(),
                Step::Tt { a, b, op, .. } => get(&regs, *a)
                    .iter()
                    .zip(get(&regs, *b))
                    .map(|(&x, y)| alu::apply_f32(*op, x, y, &n))
                    .collect(),
                Step::Stt {
                    src, op0, v0, op1, b, ..
                } => get(&regs, *src)
                    .iter()
                    .zip(get(&regs, *b))
                    .map(|(&x, y)| alu::apply_f32(*op1, alu::apply_f32(*op0, x, *v0 as f32, &n), y, &n))
                    .collect(),
                Step::Act {
                    func, src, scale, bias, ..
                } => {
                    let b = bias.map(|r| get(&regs, r)[0]).unwrap_or(-0.0);
                    let (lo, hi) = activation::valid_range(*func);
                    get(&regs, *src)
                        .iter()
                        .zip(xs)
                        .map(|(&x, &input)| {
                            let t = alu::apply_f32(
                                AluOp::Add,
                                alu::apply_f32(AluOp::Multiply, x, *scale as f32, &n),
                                b,
                                &n,
                            );
                            // Unlimited functions pass NaN through; limited ones must never see it.
                            let unlimited = lo == f32::NEG_INFINITY && hi == f32::INFINITY;
                            assert!(
                                unlimited || (t >= lo && t <= hi),
                                "{func:?}({t}) outside [{lo}, {hi}] for input {input}"
                            );
                            activation::eval(*func, t)
                        })
                        .collect()
                }
                Step::Copy { src, .. } => get(&regs, *src),
                Step::Recip { src, .. } => get(&regs, *src)
                    .iter()
                    .map(|&x| alu::apply_f32(AluOp::Reciprocal, x, 0.0, &n))
                    .collect(),
                Step::Sel { dst, src, mask } => {
                    let (d, s, m) = (get(&regs, *dst), get(&regs, *src), get(&regs, *mask));
                    d.iter()
                        .zip(s)
                        .zip(m)
                        .map(|((&d, s), m)| if m != 0.0 { s } else { d })
                        .collect()
                }
            };
            regs.insert(step.dst(), v);
        }
        get(&regs, Reg::Out)
    }

    /// The digit table against 1/(2π) itself, and its first digits against an independent
    /// computation (mpmath, 400 bits): 651, 3680, 3513, 913, 84, 2687, 157, 1524.
    #[test]
    fn inverse_two_pi_digits() {
        let head: f64 = (0..5)
            .map(|i| inv_two_pi_digit(i) as f64 * 2f64.powi(-12 * (i + 1)))
            .sum();
        assert!((head - 0.5 / PI).abs() < 2f64.powi(-58));
        let first: Vec<u32> = (0..8).map(inv_two_pi_digit).collect();
        assert_eq!(first, [651, 3680, 3513, 913, 84, 2687, 157, 1524]);
        assert_eq!(inv_two_pi_digit(-1), 0);
    }

    /// sin/cos/tan of huge arguments against f64 (whose reduction is exact), through the
    /// Payne–Hanek path: every binade from 2^11 to 2^127, several mantissas each.
    #[test]
    fn trig_of_huge_arguments() {
        let mut xs = vec![
            f32::MAX,
            f32::MIN,
            3.3895314e38,
            -3.3895314e38,
            1e38,
            12345678.0,
            4e5,
            262144.0,
        ];
        for e in 11..128 {
            for m in [1.0f32, 1.1234567, 1.5, 1.75, 1.9999999] {
                let v = m * 2f32.powi(e);
                if v.is_finite() {
                    xs.extend([v, -v]);
                }
            }
        }
        for (name, f) in [
            ("sin", f64::sin as fn(f64) -> f64),
            ("cos", f64::cos),
            ("tan", f64::tan),
        ] {
            let (k, _) = kernel(name, F32).unwrap();
            let out = interpret(&k, &xs);
            for (&x, &y) in xs.iter().zip(&out) {
                let want = f(x as f64);
                let err = (y as f64 - want).abs();
                // ~2 fp32 ulp relative (the worst seen is 1.8e-7).
                assert!(err <= 1e-12 + 3e-7 * want.abs(), "{name}({x}) = {y}, want {want}");
            }
        }
    }

    fn edge_values() -> Vec<f32> {
        let mut v = vec![
            0.0,
            -0.0,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            f32::from_bits(1),
        ];
        v.extend([
            -f32::from_bits(1),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1.0 - f32::EPSILON,
            1.0 + f32::EPSILON,
        ]);
        let mut x = 1e-30f32;
        while x < 1e30 {
            v.extend([x, -x, 1.0 + x, 1.0 - x, -1.0 - x]);
            x *= 3.7;
        }
        v
    }

    #[test]
    fn activation_arguments_stay_in_valid_range_for_edge_inputs() {
        let xs = edge_values();
        for name in [
            "acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh", "erf", "exp", "expm1", "log", "log10",
            "log1p", "log2", "rsqrt", "sin", "sinh", "sqrt", "tan", "tanh",
        ] {
            let (k, _) = kernel(name, F32).unwrap();
            let out = interpret(&k, &xs);
            assert_eq!(out.len(), xs.len(), "{name}");
        }
    }

    #[test]
    fn composed_functions_match_f64_references() {
        let xs = edge_values();
        type Reference = (&'static str, fn(f64) -> f64);
        let refs: [Reference; 22] = [
            ("sin", f64::sin),
            ("cos", f64::cos),
            ("tan", f64::tan),
            ("sinh", f64::sinh),
            ("cosh", f64::cosh),
            ("asin", f64::asin),
            ("acos", f64::acos),
            ("trunc", f64::trunc),
            ("ceil", f64::ceil),
            ("log", f64::ln),
            ("log2", f64::log2),
            ("log10", f64::log10),
            ("log1p", f64::ln_1p),
            ("expm1", f64::exp_m1),
            ("sqrt", f64::sqrt),
            ("rsqrt", |x| 1.0 / x.sqrt()),
            ("asinh", f64::asinh),
            ("acosh", f64::acosh),
            ("atanh", f64::atanh),
            ("atan", f64::atan),
            ("floor", f64::floor),
            ("round", |x| x.round_ties_even()),
        ];
        for (name, f) in refs {
            let (k, _) = kernel(name, F32).unwrap();
            let out = interpret(&k, &xs);
            for (&x, &y) in xs.iter().zip(&out) {
                let want = f(x as f64) as f32;
                let ok = (want.is_nan() && y.is_nan())
                    || want == y
                    || ((want - y).abs() as f64) <= 1e-37 + 1.3e-6 * (want.abs() as f64);
                assert!(ok, "{name}({x}) = {y}, want {want}");
            }
        }
    }

    #[test]
    fn transcendentals_use_scalar_engine_inside_valid_range() {
        for name in [
            "exp", "tanh", "log", "sqrt", "sin", "cos", "atan", "asin", "acos", "log1p",
        ] {
            let (k, _) = kernel(name, F32).unwrap();
            assert!(k.steps.iter().any(|s| matches!(s, Step::Act { .. })), "{name}");
            // Range-limited functions always read a clamped tile.
            for (i, s) in k.steps.iter().enumerate() {
                if let Step::Act {
                    func: ActFunc::Log | ActFunc::Sin | ActFunc::Arctan | ActFunc::Sqrt | ActFunc::Rsqrt,
                    src,
                    ..
                } = s
                {
                    let clamp = k.steps[..i].iter().rev().find(|p| p.dst() == *src).unwrap();
                    assert!(
                        matches!(clamp, Step::Sel { .. }),
                        "{name}: activation input is clamped and NaN-patched"
                    );
                }
            }
        }
    }

    /// Every kernel's tiles fit SBUF at MAX_FREE elements per partition.
    #[test]
    fn kernels_fit_sbuf() {
        let target = TargetName::Trn1.params();
        for name in [
            "abs",
            "acos",
            "acosh",
            "asin",
            "asinh",
            "atan",
            "atanh",
            "ceil",
            "cos",
            "cosh",
            "erf",
            "exp",
            "expm1",
            "floor",
            "log",
            "log10",
            "log1p",
            "log2",
            "neg",
            "reciprocal",
            "round",
            "rsqrt",
            "sign",
            "sin",
            "sinh",
            "sqrt",
            "tan",
            "tanh",
            "trunc",
            "logical_not",
            "isnan",
            "isinf",
        ] {
            let (k, x) = kernel(name, F32).unwrap();
            let (_, (tiles, masks)) = k.tile_slots();
            let bytes = (2 * x.size() + 4 * tiles + masks) * MAX_FREE + 64 * k.consts.len();
            assert!(bytes < target.sbuf_usable_bytes, "{name}: {bytes} bytes per partition");
        }
    }
}
