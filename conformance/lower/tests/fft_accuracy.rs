//! Accuracy of the FFT lowering against a float64 DFT, on the simulated engines (docs/numerics.md
//! "FFT accuracy"). Errors are in units of u = 2^-24: absolute for twiddles (|w| ≤ 1), and the RMS
//! error over the RMS of the exact output for whole transforms, the measure that does not depend
//! on how close one element happens to come to zero.
//!
//! Before slicing contractions of 33–128 rows, a 100-point transform was one 100-term running
//! fp32 sum per output: RMS error 3.0u (r2c) and 2.3u (c2r), against PyTorch's pocketfft 1.7u and
//! 1.8u; `hundred_point_transforms_are_sliced` failed.

use std::collections::BTreeMap;
use std::f64::consts::PI;
use trnlower::{LowerInput, TensorMeta, Value, dtype::TorchDType, lower_request};
use trnsim::{Executor, HostTensor, TargetName};

const U: f64 = 1.0 / 16_777_216.0;

/// Runs `op(input.0, dims, norm, last)` on the simulator (trn1) and returns the fp32 output.
fn run(
    op: &str,
    input: (&[usize], &[f32]),
    out: (TorchDType, &[usize]),
    dims: &[i64],
    norm: i64,
    last: Value,
) -> Vec<f32> {
    let in_dtype = if op == "_fft_r2c" {
        TorchDType::F32
    } else {
        TorchDType::C64
    };
    let logical: Vec<usize> = if op == "_fft_r2c" {
        input.0.to_vec()
    } else {
        input.0[..input.0.len() - 1].to_vec()
    };
    let tensors = BTreeMap::from([
        ("input.0".to_string(), TensorMeta::contiguous(in_dtype, &logical)),
        ("output.0".to_string(), TensorMeta::contiguous(out.0, out.1)),
    ]);
    let args = vec![
        Value::Tensor("input.0".into()),
        Value::Ints(dims.to_vec()),
        Value::Int(norm),
        last,
    ];
    let lowered =
        lower_request(&LowerInput::positional(op, args, &tensors).request(), TargetName::Trn1).expect("the FFT lowers");
    let inputs = BTreeMap::from([("input.0".to_string(), HostTensor::from_f32(input.0, input.1))]);
    let run = Executor::new(TargetName::Trn1)
        .run(&lowered.program, &inputs)
        .expect("the program runs");
    run.outputs["output.0"].to_f32()
}

/// `e^{2πi·m/N}` in f64 with `m` reduced exactly first.
fn unit(m: usize, n: usize) -> (f64, f64) {
    let t = 2.0 * PI * (m % n) as f64 / n as f64;
    (t.cos(), t.sin())
}

/// Deterministic inputs, uniform in [−9, 9) like OpInfo's `make_tensor` (a 64-bit LCG).
fn inputs(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f64 / (1u64 << 24) as f64 * 18.0 - 9.0) as f32
        })
        .collect()
}

/// RMS of `got − want` over the RMS of `want`, in units of u.
fn rms_error(got: &[f32], want: &[f64]) -> f64 {
    let e: f64 = got.iter().zip(want).map(|(g, w)| (*g as f64 - w).powi(2)).sum();
    let o: f64 = want.iter().map(|w| w * w).sum();
    (e / o).sqrt() / U
}

/// The spectrum of impulse rows (`x[b][n] = [n = b]`) is the twiddle matrix itself, row `b`
/// `e^{−2πi·bk/N}`: the products are exact (1·w, 0·w) and so are the sums, so the output is
/// what the engines built. ScalarE takes an fp32 argument and rounds `x·scale` (the hardware's
/// fp32 pipeline), then `sin` is rounded (the `Accurate` model): 1.12u (N = 100) and 1.20u
/// (N = 501) at most, RMS 0.48u and 0.39u. A lost exact index reduction is off by far more.
#[test]
fn engine_twiddles_within_two_fp32_roundings_of_the_argument() {
    for (n, rows) in [(100usize, 100usize), (501, 64)] {
        let mut x = vec![0.0f32; rows * n];
        for b in 0..rows {
            x[b * n + b] = 1.0;
        }
        let out = run(
            "_fft_r2c",
            (&[rows, n], &x),
            (TorchDType::C64, &[rows, n]),
            &[1],
            0,
            Value::Bool(false),
        );
        let (mut max, mut sq) = (0.0f64, 0.0f64);
        for b in 0..rows {
            for k in 0..n {
                let (c, s) = unit(b * k, n);
                let i = 2 * (b * n + k);
                for (got, want) in [(out[i], c), (out[i + 1], -s)] {
                    let e = (got as f64 - want).abs() / U;
                    max = max.max(e);
                    sq += e * e;
                }
            }
        }
        let rms = (sq / (2 * rows * n) as f64).sqrt();
        assert!(
            max <= 1.25 && rms <= 0.5,
            "N = {n}: twiddles max {max:.3}u, rms {rms:.3}u"
        );
    }
}

/// Whole transforms of 100 points, r2c and c2r, against the f64 DFT: the contraction is summed
/// in 32-row slices added pairwise (RMS error within PyTorch's class), not as one running sum.
#[test]
fn hundred_point_transforms_are_sliced() {
    let (b, n) = (8usize, 100usize);
    let h = n / 2 + 1;
    let x = inputs(b * n, 21);
    let out = run(
        "_fft_r2c",
        (&[b, n], &x),
        (TorchDType::C64, &[b, h]),
        &[1],
        0,
        Value::Bool(true),
    );
    let mut want = Vec::with_capacity(2 * b * h);
    for r in 0..b {
        for k in 0..h {
            let (mut re, mut im) = (0.0, 0.0);
            for l in 0..n {
                let (c, s) = unit(l * k, n);
                re += x[r * n + l] as f64 * c;
                im -= x[r * n + l] as f64 * s;
            }
            want.extend([re, im]);
        }
    }
    let e = rms_error(&out, &want);
    assert!(e <= 2.4, "r2c: RMS error {e:.3}u");

    // c2r of a Hermitian half-spectrum: x[m] = Σ_k w_k·Re(X_k·e^{2πi·km/N}), w = 1 at k = 0 and
    // N/2 (imaginary parts dropped there), 2 elsewhere.
    let spec = inputs(b * h * 2, 2121);
    let out = run(
        "_fft_c2r",
        (&[b, h, 2], &spec),
        (TorchDType::F32, &[b, n]),
        &[1],
        0,
        Value::Int(n as i64),
    );
    let mut want = Vec::with_capacity(b * n);
    for r in 0..b {
        for m in 0..n {
            let mut v = 0.0;
            for k in 0..h {
                let w = if k == 0 || 2 * k == n { 1.0 } else { 2.0 };
                let (c, s) = unit(k * m, n);
                let (xr, xi) = (spec[2 * (r * h + k)] as f64, spec[2 * (r * h + k) + 1] as f64);
                v += w * (xr * c - if w == 1.0 { 0.0 } else { xi * s });
            }
            want.push(v);
        }
    }
    let e = rms_error(&out, &want);
    assert!(e <= 2.1, "c2r: RMS error {e:.3}u");
}

/// `e^{2πi·m/N}` in f64 with the quarter turns exact (`cos`, `sin` of 0, ±π/2, π are 0 or ±1),
/// so that outputs whose exact value is 0 (the imaginary parts at DC and Nyquist) are 0 here too.
fn unit_exact(m: usize, n: usize) -> (f64, f64) {
    let m = m % n;
    let (c, s) = unit(m, n);
    let c = if 4 * m == n || 4 * m == 3 * n { 0.0 } else { c };
    let s = if m == 0 || 2 * m == n { 0.0 } else { s };
    (c, s)
}

/// `|y − o| / ulp_f32(o)`, subnormal spacing below the normal range (conformance/src/accuracy.rs).
fn ulps(y: f32, o: f64) -> f64 {
    let a = o.abs().max(f32::MIN_POSITIVE as f64);
    (y as f64 - o).abs() / 2f64.powi(a.log2().floor() as i32 - 23)
}

/// The device's max-ulp error of onesided r2c transforms against the f64 DFT must be at most 2×
/// PyTorch CPU's (pocketfft) on the same inputs (docs/numerics.md "FFT accuracy", the target of
/// the fresh-input gap). The CPU figures are measured with torch 2.15.0 `torch.fft.rfft` on the
/// same `inputs(b·n, seed)` rows against the same f64 DFT (quarter turns exact).
///
/// Device today (trn1): `(2, 1000)` 1,531 ulps against 763 (ratio 2.01, failing), `(4, 7)` 7.5
/// against 8.0, `(4, 16)` 7.3 against 4.3 (1.7), `(3, 100)` 1,149 against 3,197. In the NumPy
/// emulation of the lowering only exact products with an extended-precision sum (Ozaki-style,
/// not built) keeps the fresh corpus within 2×; ignored until then, run with `--include-ignored`.
#[test]
#[ignore = "fails today: the FFT lowering's max-ulp error is over 2x pocketfft's (docs/numerics.md, FFT accuracy)"]
fn max_ulp_within_twice_pocketfft() {
    // (rows, N, seed, pocketfft max ulp)
    let cases = [
        (2usize, 1000usize, 2126u64, 763.37),
        (4, 7, 2126, 8.0),
        (4, 16, 2126, 4.34),
        (3, 100, 2127, 3196.7),
    ];
    let mut failures = Vec::new();
    for (b, n, seed, cpu) in cases {
        let h = n / 2 + 1;
        let x = inputs(b * n, seed);
        let out = run(
            "_fft_r2c",
            (&[b, n], &x),
            (TorchDType::C64, &[b, h]),
            &[1],
            0,
            Value::Bool(true),
        );
        let mut dev = 0.0f64;
        for r in 0..b {
            for k in 0..h {
                let (mut re, mut im) = (0.0, 0.0);
                for l in 0..n {
                    let (c, s) = unit_exact(l * k, n);
                    re += x[r * n + l] as f64 * c;
                    im -= x[r * n + l] as f64 * s;
                }
                let i = 2 * (r * h + k);
                dev = dev.max(ulps(out[i], re)).max(ulps(out[i + 1], im));
            }
        }
        eprintln!("({b}, {n}) seed {seed}: device max {dev:.2} ulp, pocketfft {cpu}");
        if dev > 2.0 * cpu {
            failures.push(format!("({b}, {n}): device {dev:.2} ulp > 2 x {cpu}"));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}
