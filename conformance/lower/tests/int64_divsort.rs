//! Native int64 integer division (`div` trunc/floor, `fmod`, `remainder`) and `sort`
//! (`LowerOptions::native_int64`, conformance/lower/src/int64.rs) on the simulated engines of
//! trn2 and trn3, against values computed here with Rust's exact i64 arithmetic (and a few
//! written out by hand): 0 numerators, ±1 divisors, i64::MIN and i64::MAX, mixed signs,
//! magnitudes near 2^63, `i64::MIN / −1`, and the documented zero-divisor results.

use std::collections::BTreeMap;
use trnlower::int64::{IntDiv, int_divmod_instructions};
use trnlower::{LowerInput, LowerOptions, TensorMeta, Value, dtype::TorchDType, lower_request_with_options};
use trnsim::{DType, Engine, Executor, HostTensor, TargetName};

const MIN: i64 = i64::MIN;
const MAX: i64 = i64::MAX;

/// One call: `op(args, **kwargs)` with int64 `inputs` (name, shape, values) and int64 outputs
/// (name, shape).
struct Call<'a> {
    op: &'a str,
    args: Vec<Value>,
    kwargs: Vec<(&'a str, Value)>,
    inputs: Vec<(&'a str, Vec<usize>, Vec<i64>)>,
    outputs: Vec<(&'a str, Vec<usize>)>,
}

/// Lowers `call` with `--native-int64` for `target`, runs it, and returns every output's values
/// and the program's GpSimdE instruction count.
fn run(call: &Call<'_>, target: TargetName) -> (BTreeMap<String, Vec<i64>>, usize) {
    let mut tensors = BTreeMap::new();
    for (name, shape, _) in &call.inputs {
        tensors.insert(name.to_string(), TensorMeta::contiguous(TorchDType::I64, shape));
    }
    for (name, shape) in &call.outputs {
        tensors.insert(name.to_string(), TensorMeta::contiguous(TorchDType::I64, shape));
    }
    let mut input = LowerInput::positional(call.op, call.args.clone(), &tensors);
    for (k, v) in &call.kwargs {
        input.call.kwargs.insert(k.to_string(), v.clone());
    }
    let opts = LowerOptions {
        native_int64: true,
        ..LowerOptions::default()
    };
    let lowered = lower_request_with_options(&input.request(), target, &opts).expect("lowers natively");
    for decl in &lowered.program.hbm {
        assert_eq!(
            decl.dtype,
            DType::I64,
            "{}: {} is not int64 on the device",
            call.op,
            decl.name
        );
    }
    let gpsimd = lowered
        .program
        .instructions
        .iter()
        .filter(|i| i.engine == Engine::Gpsimd)
        .count();
    let host: BTreeMap<String, HostTensor> = call
        .inputs
        .iter()
        .map(|(name, shape, vals)| {
            let t = HostTensor {
                dtype: DType::I64,
                shape: shape.clone(),
                data: vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
            };
            (name.to_string(), t)
        })
        .collect();
    let out = Executor::new(target).run(&lowered.program, &host).expect("runs");
    let values = call
        .outputs
        .iter()
        .map(|(name, _)| {
            let bytes = &out.outputs[*name].data;
            let v = bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            (name.to_string(), v)
        })
        .collect();
    (values, gpsimd)
}

/// PyTorch's int64 result of `a ⊘ b`, exact (Rust's wrapping i64 division is C's truncating
/// one, with `MIN / −1 = MIN` and `MIN % −1 = 0`), and the documented zero-divisor results.
fn reference(mode: IntDiv, a: i64, b: i64) -> i64 {
    if b == 0 {
        return match mode {
            IntDiv::Trunc | IntDiv::Floor if a >= 0 => -1,
            IntDiv::Trunc => 1,
            IntDiv::Floor => 0,
            IntDiv::Fmod | IntDiv::Remainder => a,
        };
    }
    let (q, r) = (a.wrapping_div(b), a.wrapping_rem(b));
    let differ = r != 0 && ((r < 0) != (b < 0));
    match mode {
        IntDiv::Trunc => q,
        IntDiv::Fmod => r,
        IntDiv::Floor => q - differ as i64,
        IntDiv::Remainder => r + if differ { b } else { 0 },
    }
}

/// The ops of each mode (Tensor, Scalar overloads) and their `rounding_mode`.
fn ops(mode: IntDiv) -> (&'static str, &'static str, Option<&'static str>) {
    match mode {
        IntDiv::Trunc => ("div.Tensor_mode", "div.Scalar_mode", Some("trunc")),
        IntDiv::Floor => ("div.Tensor_mode", "div.Scalar_mode", Some("floor")),
        IntDiv::Fmod => ("fmod.Tensor", "fmod.Scalar", None),
        IntDiv::Remainder => ("remainder.Tensor", "remainder.Scalar", None),
    }
}

const MODES: [IntDiv; 4] = [IntDiv::Trunc, IntDiv::Floor, IntDiv::Fmod, IntDiv::Remainder];
const TARGETS: [TargetName; 2] = [TargetName::Trn2, TargetName::Trn3];

const NUMERATORS: [i64; 16] = [
    0,
    1,
    -1,
    7,
    -7,
    100,
    -100,
    MAX,
    MIN,
    MAX - 1,
    MIN + 1,
    (1 << 62) + 3,
    -(1 << 62) - 5,
    (1 << 53) + 1,
    0x5555_5555_5555_5555,
    -0x1234_5678_9abc_def0,
];
const DIVISORS: [i64; 16] = [
    1,
    -1,
    2,
    -2,
    3,
    -7,
    MAX,
    MIN,
    MIN + 1,
    1 << 62,
    -(1 << 62) - 1,
    (1 << 32) + 1,
    -(1 << 31),
    0x7000_0000_0000_0001,
    12_345_678_901,
    0,
];

/// Every mode, Tensor overload: the numerators `[16, 1]` broadcast against the divisors
/// `[1, 16]` (256 pairs per target), and the instruction count of the one tile.
#[test]
fn int64_division_is_exact_for_every_sign_and_magnitude() {
    for target in TARGETS {
        for mode in MODES {
            let (op, _, rounding) = ops(mode);
            let call = Call {
                op,
                args: vec![Value::Tensor("input.0".into()), Value::Tensor("input.1".into())],
                kwargs: rounding
                    .map(|m| ("rounding_mode", Value::Str(m.into())))
                    .into_iter()
                    .collect(),
                inputs: vec![
                    ("input.0", vec![16, 1], NUMERATORS.to_vec()),
                    ("input.1", vec![1, 16], DIVISORS.to_vec()),
                ],
                outputs: vec![("output.0", vec![16, 16])],
            };
            let (out, gpsimd) = run(&call, target);
            let want: Vec<i64> = NUMERATORS
                .iter()
                .flat_map(|&a| DIVISORS.iter().map(move |&b| reference(mode, a, b)))
                .collect();
            for (k, (g, w)) in out["output.0"].iter().zip(&want).enumerate() {
                let (a, b) = (NUMERATORS[k / 16], DIVISORS[k % 16]);
                assert_eq!(g, w, "{target:?} {mode:?}: {a} ⊘ {b}");
            }
            assert_eq!(gpsimd, int_divmod_instructions(mode), "{target:?} {mode:?}");
        }
    }
}

/// The Scalar overloads (the divisor a `memset` immediate), and hand-checked values.
#[test]
fn int64_division_by_a_scalar() {
    // -7 // 2: trunc -3, floor -4, fmod -1, remainder 1; MIN // -1 wraps to MIN (PyTorch CPU's
    // floor gives MIN; its trunc traps); 7 % -3 = -2.
    assert_eq!(
        MODES.map(|m| reference(m, -7, 2)),
        [-3, -4, -1, 1],
        "the reference itself"
    );
    assert_eq!(reference(IntDiv::Trunc, MIN, -1), MIN);
    assert_eq!(reference(IntDiv::Remainder, 7, -3), -2);
    for target in TARGETS {
        for mode in MODES {
            let (_, op, rounding) = ops(mode);
            for s in [7i64, -3, 1, -1, 1 << 53, -(1 << 53)] {
                let call = Call {
                    op,
                    args: vec![Value::Tensor("input.0".into()), Value::Int(s)],
                    kwargs: rounding
                        .map(|m| ("rounding_mode", Value::Str(m.into())))
                        .into_iter()
                        .collect(),
                    inputs: vec![("input.0", vec![NUMERATORS.len()], NUMERATORS.to_vec())],
                    outputs: vec![("output.0", vec![NUMERATORS.len()])],
                };
                let want: Vec<i64> = NUMERATORS.iter().map(|&a| reference(mode, a, s)).collect();
                assert_eq!(run(&call, target).0["output.0"], want, "{target:?} {mode:?} by {s}");
            }
        }
    }
}

/// PyTorch's stable sort of one lane: (values, indices).
fn stable_sort(lane: &[i64], descending: bool) -> (Vec<i64>, Vec<i64>) {
    let mut idx: Vec<usize> = (0..lane.len()).collect();
    if descending {
        idx.sort_by(|&i, &j| lane[j].cmp(&lane[i]));
    } else {
        idx.sort_by(|&i, &j| lane[i].cmp(&lane[j]));
    }
    (
        idx.iter().map(|&i| lane[i]).collect(),
        idx.iter().map(|&i| i as i64).collect(),
    )
}

/// Deterministic int64 values over the whole range, with repeats (a 64-bit LCG; every 4th
/// value from a 5-element pool of edge values, so ties and i64::MIN/MAX occur in every lane).
fn values(len: usize, seed: u64) -> Vec<i64> {
    let pool = [MIN, MAX, 0, -1, 1 << 40];
    let mut s = seed;
    (0..len)
        .map(|k| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            if k % 4 == 0 {
                pool[(s >> 61) as usize % pool.len()]
            } else {
                s as i64
            }
        })
        .collect()
}

/// `sort` along the last dim and along dim 0 (lanes strided in HBM), both directions, lane
/// lengths 1, a non-power of two and 300 (9 phases), more than 128 lanes (two tiles): values and
/// indices equal the stable sort's.
#[test]
fn int64_sort_is_exact_and_stable() {
    for target in TARGETS {
        for (shape, dim) in [
            (vec![1usize], 0usize),
            (vec![3, 13], 1),
            (vec![300], 0),
            (vec![200, 5], 1),
            (vec![11, 6], 0),
        ] {
            for descending in [false, true] {
                let x = values(shape.iter().product(), shape.len() as u64 * 31 + dim as u64);
                let call = Call {
                    op: "sort",
                    args: vec![
                        Value::Tensor("input.0".into()),
                        Value::Int(dim as i64),
                        Value::Bool(descending),
                    ],
                    kwargs: vec![],
                    inputs: vec![("input.0", shape.clone(), x.clone())],
                    outputs: vec![("output.0", shape.clone()), ("output.1", shape.clone())],
                };
                let (out, _) = run(&call, target);
                // Lanes: (first element, step) for every position of the other dims.
                let n = shape[dim];
                let inner: usize = shape[dim + 1..].iter().product();
                let outer: usize = shape[..dim].iter().product();
                for o in 0..outer {
                    for i in 0..inner {
                        let at = |k: usize| o * n * inner + k * inner + i;
                        let lane: Vec<i64> = (0..n).map(|k| x[at(k)]).collect();
                        let (v, ix) = stable_sort(&lane, descending);
                        let got = |name: &str| (0..n).map(|k| out[name][at(k)]).collect::<Vec<_>>();
                        let what = format!("{target:?} {shape:?} dim {dim} descending {descending} lane ({o}, {i})");
                        assert_eq!(got("output.0"), v, "{what}");
                        assert_eq!(got("output.1"), ix, "{what}");
                    }
                }
            }
        }
    }
}
