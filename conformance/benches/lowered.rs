//! Lowered-op benchmarks: an ATen call built in memory (the same `LowerRequest` the runner
//! builds from a golden case) → `trnconf::lower` → `trnsim::Executor::run`, timed end to end,
//! next to plain Rust (ndarray for GEMMs) computing the same result.
//!
//! `cargo bench -p trnconf --bench lowered [-- KEY]` (keys: mm_bf16, mm_f32, conv_f32, conv_bf16,
//! softmax, layer_norm). Harness: one warm-up of each side, then simulator and baseline
//! alternately for up to ~12 s per bench (at least 3, at most 11 rounds), median of each side.
//! **sim speed** = baseline time / simulator time.

use ndarray::Array2;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use trnconf::case::{JsonFloat, OpCall, TensorMeta, Value};
use trnconf::lower::{LowerOptions, LowerRequest, lower_request_with_options};
use trnconf::tensor::TorchDType;
use trnsim::{DType, Executor, HostTensor, Stats, TargetName};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

fn dev(d: TorchDType) -> DType {
    match d {
        TorchDType::Bf16 => DType::Bf16,
        _ => DType::F32,
    }
}

/// One op call with its inputs.
struct Call {
    op: &'static str,
    call: OpCall,
    tensors: BTreeMap<String, TensorMeta>,
    outputs: Vec<Value>,
    inputs: BTreeMap<String, HostTensor>,
}

impl Call {
    fn run(&self) -> (Stats, usize, f32) {
        let req = LowerRequest {
            op: self.op,
            call: &self.call,
            tensors: &self.tensors,
            outputs: &trnconf::lower::OutputSlot::of(&self.outputs),
        };
        let lowered = lower_request_with_options(&req, TargetName::Trn1, &LowerOptions::default()).expect("lowers");
        let n = lowered.program.instructions.len();
        let res = Executor::new(TargetName::Trn1)
            .run(&lowered.program, &self.inputs)
            .expect("runs");
        // Decode only the probed element: converting the whole output to f32 is host work of
        // the bench, not lowering or simulation (it was 7 % of the layer_norm sim time).
        let out = &res.outputs["output.0"];
        let size = out.dtype.size();
        let probe = HostTensor {
            dtype: out.dtype,
            shape: vec![1],
            data: out.data[size..2 * size].to_vec(),
        }
        .to_f32()[0];
        (res.stats, n, probe)
    }
}

fn input(rng: &mut Rng, dtype: TorchDType, shape: &[usize]) -> (HostTensor, Vec<f32>) {
    let v = rng.vec(shape.iter().product());
    let t = HostTensor::from_f32_as(dev(dtype), shape, &v);
    let rounded = t.to_f32();
    (t, rounded)
}

fn mm_call(dtype: TorchDType, n: usize) -> (Call, Vec<f32>, Vec<f32>) {
    let mut rng = Rng(1);
    let (a, av) = input(&mut rng, dtype, &[n, n]);
    let (b, bv) = input(&mut rng, dtype, &[n, n]);
    let tensors = BTreeMap::from([
        ("input.0".into(), TensorMeta::contiguous(dtype, &[n, n])),
        ("input.1".into(), TensorMeta::contiguous(dtype, &[n, n])),
        ("output.0".into(), TensorMeta::contiguous(dtype, &[n, n])),
    ]);
    let call = OpCall {
        args: vec![Value::Tensor("input.0".into()), Value::Tensor("input.1".into())],
        kwargs: BTreeMap::new(),
    };
    let inputs = BTreeMap::from([("input.0".into(), a), ("input.1".into(), b)]);
    (
        Call {
            op: "mm",
            call,
            tensors,
            outputs: vec![Value::Tensor("output.0".into())],
            inputs,
        },
        av,
        bv,
    )
}

fn conv_call(dtype: TorchDType) -> (Call, Vec<f32>, Vec<f32>) {
    let mut rng = Rng(2);
    let (x, xv) = input(&mut rng, dtype, &[1, 3, 224, 224]);
    let (w, wv) = input(&mut rng, dtype, &[64, 3, 7, 7]);
    let tensors = BTreeMap::from([
        ("input.0".into(), TensorMeta::contiguous(dtype, &[1, 3, 224, 224])),
        ("input.1".into(), TensorMeta::contiguous(dtype, &[64, 3, 7, 7])),
        ("output.0".into(), TensorMeta::contiguous(dtype, &[1, 64, 112, 112])),
    ]);
    let call = OpCall {
        args: vec![
            Value::Tensor("input.0".into()),
            Value::Tensor("input.1".into()),
            Value::None(()),
            Value::Ints(vec![2, 2]),
            Value::Ints(vec![3, 3]),
            Value::Ints(vec![1, 1]),
            Value::Bool(false),
            Value::Ints(vec![0, 0]),
            Value::Int(1),
        ],
        kwargs: BTreeMap::new(),
    };
    let inputs = BTreeMap::from([("input.0".into(), x), ("input.1".into(), w)]);
    (
        Call {
            op: "convolution",
            call,
            tensors,
            outputs: vec![Value::Tensor("output.0".into())],
            inputs,
        },
        xv,
        wv,
    )
}

/// im2col + ndarray GEMM of the stem convolution.
fn conv_baseline(x: &[f32], w: &Array2<f32>) -> Array2<f32> {
    let (cin, h, wd, k, s, p, o) = (3usize, 224usize, 224usize, 7usize, 2usize, 3usize, 112usize);
    let mut col = Array2::<f32>::zeros((cin * k * k, o * o));
    for c in 0..cin {
        for kh in 0..k {
            for kw in 0..k {
                let row = (c * k + kh) * k + kw;
                let mut r = col.row_mut(row);
                let rs = r.as_slice_mut().unwrap();
                for oh in 0..o {
                    let ih = (oh * s + kh) as isize - p as isize;
                    for ow in 0..o {
                        let iw = (ow * s + kw) as isize - p as isize;
                        rs[oh * o + ow] = if ih >= 0 && (ih as usize) < h && iw >= 0 && (iw as usize) < wd {
                            x[(c * h + ih as usize) * wd + iw as usize]
                        } else {
                            0.0
                        };
                    }
                }
            }
        }
    }
    w.dot(&col)
}

fn softmax_call(rows: usize, cols: usize) -> (Call, Vec<f32>) {
    let mut rng = Rng(3);
    let (x, xv) = input(&mut rng, TorchDType::Bf16, &[rows, cols]);
    let tensors = BTreeMap::from([
        (
            "input.0".into(),
            TensorMeta::contiguous(TorchDType::Bf16, &[rows, cols]),
        ),
        (
            "output.0".into(),
            TensorMeta::contiguous(TorchDType::Bf16, &[rows, cols]),
        ),
    ]);
    let call = OpCall {
        args: vec![Value::Tensor("input.0".into()), Value::Int(1), Value::Bool(false)],
        kwargs: BTreeMap::new(),
    };
    let inputs = BTreeMap::from([("input.0".into(), x)]);
    (
        Call {
            op: "_softmax",
            call,
            tensors,
            outputs: vec![Value::Tensor("output.0".into())],
            inputs,
        },
        xv,
    )
}

fn softmax_baseline(x: &[f32], cols: usize) -> Vec<half::bf16> {
    let mut out = vec![half::bf16::ZERO; x.len()];
    let mut e = vec![0f32; cols];
    for (row, o) in x.chunks(cols).zip(out.chunks_mut(cols)) {
        let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let mut s = 0f32;
        for (ei, &v) in e.iter_mut().zip(row) {
            *ei = (v - m).exp();
            s += *ei;
        }
        let r = 1.0 / s;
        for (oi, &ei) in o.iter_mut().zip(&e) {
            *oi = half::bf16::from_f32(ei * r);
        }
    }
    out
}

fn layer_norm_call(rows: usize, cols: usize) -> (Call, Vec<f32>) {
    let mut rng = Rng(4);
    let f = TorchDType::F32;
    let (x, xv) = input(&mut rng, f, &[rows, cols]);
    let (w, _) = input(&mut rng, f, &[cols]);
    let (b, _) = input(&mut rng, f, &[cols]);
    let tensors = BTreeMap::from([
        ("input.0".into(), TensorMeta::contiguous(f, &[rows, cols])),
        ("input.2".into(), TensorMeta::contiguous(f, &[cols])),
        ("input.3".into(), TensorMeta::contiguous(f, &[cols])),
        ("output.0".into(), TensorMeta::contiguous(f, &[rows, cols])),
        ("output.1".into(), TensorMeta::contiguous(f, &[rows, 1])),
        ("output.2".into(), TensorMeta::contiguous(f, &[rows, 1])),
    ]);
    let call = OpCall {
        args: vec![
            Value::Tensor("input.0".into()),
            Value::Ints(vec![cols as i64]),
            Value::Tensor("input.2".into()),
            Value::Tensor("input.3".into()),
            Value::Float(JsonFloat(1e-5)),
        ],
        kwargs: BTreeMap::new(),
    };
    let inputs = BTreeMap::from([("input.0".into(), x), ("input.2".into(), w), ("input.3".into(), b)]);
    let outputs = ["output.0", "output.1", "output.2"]
        .iter()
        .map(|s| Value::Tensor(s.to_string()))
        .collect();
    (
        Call {
            op: "native_layer_norm",
            call,
            tensors,
            outputs,
            inputs,
        },
        xv,
    )
}

fn layer_norm_baseline(x: &[f32], cols: usize, w: &[f32], b: &[f32]) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let rows = x.len() / cols;
    let (mut out, mut mean, mut rstd) = (vec![0f32; x.len()], vec![0f32; rows], vec![0f32; rows]);
    for (i, (row, o)) in x.chunks(cols).zip(out.chunks_mut(cols)).enumerate() {
        let m = row.iter().sum::<f32>() / cols as f32;
        let v = row.iter().map(|&a| (a - m) * (a - m)).sum::<f32>() / cols as f32;
        let r = 1.0 / (v + 1e-5).sqrt();
        for j in 0..cols {
            o[j] = (row[j] - m) * r * w[j] + b[j];
        }
        mean[i] = m;
        rstd[i] = r;
    }
    (out, mean, rstd)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

struct Row {
    name: String,
    sim: Duration,
    base: Duration,
    target: Option<f64>,
    stats: Stats,
    instructions: usize,
}

fn bench(
    name: &str,
    target: Option<f64>,
    mut sim: impl FnMut() -> (Stats, usize, f32),
    mut base: impl FnMut() -> f32,
) -> Row {
    let (stats, instructions, p) = sim();
    let q = base();
    eprintln!("[{name}] warm-up done (probe sim {p} / baseline {q})");
    let (mut ts, mut tb) = (vec![], vec![]);
    let start = Instant::now();
    while ts.len() < 11 && (ts.len() < 3 || start.elapsed() < Duration::from_secs(12)) {
        let t = Instant::now();
        std::hint::black_box(sim());
        ts.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(base());
        tb.push(t.elapsed());
    }
    let row = Row {
        name: name.into(),
        sim: median(ts),
        base: median(tb),
        target,
        stats,
        instructions,
    };
    eprintln!(
        "[{name}] sim {:.2} ms, baseline {:.2} ms, {:.0} %",
        ms(row.sim),
        ms(row.base),
        100.0 * row.base.as_secs_f64() / row.sim.as_secs_f64()
    );
    row
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let want = |k: &str| filter.as_deref().is_none_or(|f| k.contains(f));
    let mut rows = vec![];
    const N: usize = 2048;
    for (key, dtype) in [("mm_bf16", TorchDType::Bf16), ("mm_f32", TorchDType::F32)] {
        if !want(key) {
            continue;
        }
        let (call, av, bv) = mm_call(dtype, N);
        let a = Array2::from_shape_vec((N, N), av).unwrap();
        let b = Array2::from_shape_vec((N, N), bv).unwrap();
        rows.push(bench(
            &format!("mm {dtype} {N}³"),
            Some(25.0),
            || call.run(),
            || a.dot(&b)[[0, 1]],
        ));
    }
    for (key, dtype) in [("conv_f32", TorchDType::F32), ("conv_bf16", TorchDType::Bf16)] {
        if !want(key) {
            continue;
        }
        let (call, xv, wv) = conv_call(dtype);
        let w = Array2::from_shape_vec((64, 147), wv).unwrap();
        rows.push(bench(
            &format!("convolution {dtype} ResNet-50 stem 1×3×224×224 ⊛ 64×3×7×7 s2 p3"),
            None,
            || call.run(),
            || conv_baseline(&xv, &w)[[0, 1]],
        ));
    }
    if want("softmax") {
        let (call, xv) = softmax_call(4096, 4096);
        rows.push(bench(
            "_softmax bf16 [4096×4096] dim=1",
            None,
            || call.run(),
            || softmax_baseline(&xv, 4096)[1].to_f32(),
        ));
    }
    if want("layer_norm") {
        let (call, xv) = layer_norm_call(4096, 4096);
        let w = call.inputs["input.2"].to_f32();
        let b = call.inputs["input.3"].to_f32();
        rows.push(bench(
            "native_layer_norm f32 [4096×4096] over 4096",
            None,
            || call.run(),
            || layer_norm_baseline(&xv, 4096, &w, &b).0[1],
        ));
    }
    println!("\n| bench | sim | baseline | ratio | target | met? |");
    println!("|---|---|---|---|---|---|");
    for r in &rows {
        let ratio = 100.0 * r.base.as_secs_f64() / r.sim.as_secs_f64();
        let (t, met) = match r.target {
            Some(t) => (format!("≥ {t:.0} %"), if ratio >= t { "yes" } else { "no" }.to_string()),
            None => ("—".into(), "—".into()),
        };
        println!(
            "| {} | {:.1} ms | {:.1} ms | {ratio:.0} % | {t} | {met} |",
            r.name,
            ms(r.sim),
            ms(r.base)
        );
    }
    println!(
        "\n| bench | instructions | tensor | vector | scalar | gpsimd | dma | est. busy µs (tensor / vector / scalar / gpsimd / dma) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let (c, t) = (&r.stats.instructions, &r.stats.est_ns);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} / {:.0} / {:.0} / {:.0} / {:.0} |",
            r.name,
            r.instructions,
            c.tensor,
            c.vector,
            c.scalar,
            c.gpsimd,
            c.dma,
            t.tensor / 1e3,
            t.vector / 1e3,
            t.scalar / 1e3,
            t.gpsimd / 1e3,
            t.dma / 1e3
        );
    }
}
