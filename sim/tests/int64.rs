//! Native int64 (`DType::I64`, NC-v3+): the dtype exists only where the target's `native_int64`
//! capability says so, DMA moves it unchanged, and the engines compute on it as the
//! `Numerics::int64_alu` setting says (docs/numerics.md "Native int64"). Expected values are
//! derived by hand in the comments.

use std::collections::BTreeMap;
use trnsim::*;

const N: usize = 4;

fn i64_tensor(vals: &[i64]) -> HostTensor {
    HostTensor {
        dtype: DType::I64,
        shape: vec![1, vals.len()],
        data: vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

fn sb(dtype: DType, offset: u64) -> AccessPattern {
    AccessPattern::sbuf(dtype, 0, 1, offset, vec![[1, N as i64]])
}

fn hbm(name: &str, dtype: DType) -> AccessPattern {
    AccessPattern::hbm(name, dtype, 0, 1, N as i64, vec![[1, N as i64]])
}

/// `out = x op y` on `engine` (`x`, `y` int64 `[1, N]`, `out` of `out_dtype`), through HBM, SBUF
/// and DMA, under `numerics`; the result's raw bytes, or the error.
fn run(
    target: TargetName,
    numerics: Numerics,
    engine: Engine,
    op: Op,
    out_dtype: DType,
    x: &[i64],
    y: &[i64],
) -> Result<Vec<u8>, SimError> {
    let mut p = Program::new(target);
    p.declare("x", DType::I64, &[1, N], HbmRole::Input);
    p.declare("y", DType::I64, &[1, N], HbmRole::Input);
    p.declare("out", out_dtype, &[1, N], HbmRole::Output);
    p.push(Engine::Dma, Op::dma_copy(sb(DType::I64, 0), hbm("x", DType::I64)));
    p.push(Engine::Dma, Op::dma_copy(sb(DType::I64, 64), hbm("y", DType::I64)));
    p.push(engine, op);
    p.push(Engine::Dma, Op::dma_copy(hbm("out", out_dtype), sb(out_dtype, 128)));
    infer_waits(&mut p);
    let inputs: BTreeMap<String, HostTensor> = [("x".into(), i64_tensor(x)), ("y".into(), i64_tensor(y))].into();
    let config = ExecConfig {
        numerics,
        ..ExecConfig::default()
    };
    Executor::with_config(target, config)
        .run(&p, &inputs)
        .map(|r| r.outputs["out"].data.clone())
}

fn tt(op: AluOp, dst: DType) -> Op {
    Op::TensorTensor(TensorTensor {
        dst: sb(dst, 128),
        in0: sb(DType::I64, 0),
        in1: sb(DType::I64, 64),
        op,
    })
}

fn as_i64(bytes: &[u8]) -> Vec<i64> {
    bytes
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

const X: [i64; N] = [i64::MAX, i64::MIN, (1 << 62) + 1, -7];
const Y: [i64; N] = [1, -1, 1, 3];

#[test]
fn gpsimd_computes_int64_exactly_and_wraps() {
    for target in [TargetName::Trn2, TargetName::Trn3] {
        let add = run(
            target,
            Numerics::default(),
            Engine::Gpsimd,
            tt(AluOp::Add, DType::I64),
            DType::I64,
            &X,
            &Y,
        );
        // i64::MAX + 1 wraps to i64::MIN; i64::MIN + -1 to i64::MAX; 2^62 + 1 + 1 exact; -7 + 3.
        assert_eq!(
            as_i64(&add.unwrap()),
            vec![i64::MIN, i64::MAX, (1 << 62) + 2, -4],
            "{target:?}"
        );
        let mul = run(
            target,
            Numerics::default(),
            Engine::Gpsimd,
            tt(AluOp::Multiply, DType::I64),
            DType::I64,
            &X,
            &Y,
        );
        // i64::MIN · -1 wraps to i64::MIN (two's complement).
        assert_eq!(as_i64(&mul.unwrap()), vec![i64::MAX, i64::MIN, (1 << 62) + 1, -21]);
        // Bitwise ops are exact on all 64 bits: MAX ^ 1 = MAX - 1; MIN ^ -1 = MAX.
        let xor = run(
            target,
            Numerics::default(),
            Engine::Gpsimd,
            tt(AluOp::BitwiseXor, DType::I64),
            DType::I64,
            &X,
            &Y,
        );
        assert_eq!(as_i64(&xor.unwrap()), vec![i64::MAX - 1, i64::MAX, (1 << 62), -7 ^ 3]);
        // A comparison into bool: 0/1 per element (MAX > 1, MIN > -1 no, 2^62+1 > 1, -7 > 3 no).
        let gt = run(
            target,
            Numerics::default(),
            Engine::Gpsimd,
            tt(AluOp::IsGt, DType::Bool),
            DType::Bool,
            &X,
            &Y,
        );
        assert_eq!(gt.unwrap(), vec![1, 0, 1, 0]);
    }
}

#[test]
fn vector_reads_int64_through_fp32_and_the_fp32_setting_makes_gpsimd_do_so() {
    // Through fp32 (round to nearest even): MAX → 2^63 (+1 stays 2^63; back to int64 it
    // saturates to MAX); MIN → -2^63 exactly (−1 absorbed); 2^62 + 1 → 2^62 (+1 absorbed);
    // -7 + 3 = -4 exactly.
    let want = vec![i64::MAX, i64::MIN, 1 << 62, -4];
    let v = run(
        TargetName::Trn2,
        Numerics::default(),
        Engine::Vector,
        tt(AluOp::Add, DType::I64),
        DType::I64,
        &X,
        &Y,
    );
    assert_eq!(as_i64(&v.unwrap()), want);
    let fp32 = Numerics {
        int64_alu: Int64Alu::Fp32,
        ..Numerics::default()
    };
    let g = run(
        TargetName::Trn2,
        fp32,
        Engine::Gpsimd,
        tt(AluOp::Add, DType::I64),
        DType::I64,
        &X,
        &Y,
    );
    assert_eq!(as_i64(&g.unwrap()), want);
}

#[test]
fn dma_moves_int64_unchanged_and_tensor_copy_converts() {
    // A copy is the value on any engine (X unchanged); on GpSimdE's exact path a narrower
    // integer saturates: MAX → i32::MAX, MIN → i32::MIN, 2^62+1 → i32::MAX, -7.
    let copy = |dst: DType| {
        Op::TensorCopy(TensorCopy {
            dst: sb(dst, 128),
            src: sb(DType::I64, 0),
        })
    };
    let same = run(
        TargetName::Trn2,
        Numerics::default(),
        Engine::Vector,
        copy(DType::I64),
        DType::I64,
        &X,
        &Y,
    );
    assert_eq!(as_i64(&same.unwrap()), X.to_vec());
    let narrow = run(
        TargetName::Trn2,
        Numerics::default(),
        Engine::Gpsimd,
        copy(DType::I32),
        DType::I32,
        &X,
        &Y,
    )
    .unwrap();
    let got: Vec<i32> = narrow
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![i32::MAX, i32::MIN, i32::MAX, -7]);
    // To f32 (VectorE): MAX → 2^63, MIN → -2^63, 2^62+1 → 2^62, -7.
    let f = run(
        TargetName::Trn2,
        Numerics::default(),
        Engine::Vector,
        copy(DType::F32),
        DType::F32,
        &X,
        &Y,
    )
    .unwrap();
    let got: Vec<f32> = f
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![2f32.powi(63), -(2f32.powi(63)), 2f32.powi(62), -7.0]);
}

#[test]
fn raw_bits_paths_refuse_int64_with_a_typed_error() {
    // VectorE's bitvec path reads raw 32-bit words, which an 8-byte element does not have.
    let e = run(
        TargetName::Trn2,
        Numerics::default(),
        Engine::Vector,
        tt(AluOp::BitwiseAnd, DType::I64),
        DType::I64,
        &X,
        &Y,
    )
    .unwrap_err();
    assert!(
        matches!(e.kind, ErrorKind::UnsupportedDType { dtype: "i64", .. }),
        "{e:?}"
    );
}

#[test]
fn int64_is_refused_on_trn1_naming_the_generation() {
    assert!(!Target::trn1().has_dtype(DType::I64));
    assert!(Target::trn2().has_dtype(DType::I64) && Target::trn3().has_dtype(DType::I64));
    let e = run(
        TargetName::Trn1,
        Numerics::default(),
        Engine::Gpsimd,
        tt(AluOp::Add, DType::I64),
        DType::I64,
        &X,
        &Y,
    )
    .unwrap_err();
    assert!(
        matches!(
            e.kind,
            ErrorKind::DTypeNotOnTarget {
                dtype: "i64",
                target: "trn1 (NeuronCore-v2)"
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("trn1 (NeuronCore-v2)"), "{e}");
}

#[test]
fn int64_runs_convert_as_int64_arithmetic() {
    // decode_run: each 8-byte element as `i64 as f32` (round to nearest even), strided too.
    let vals = [0i64, -1, (1 << 24) + 1, i64::MAX, i64::MIN, 12345];
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    for (stride, n) in [(8, 6), (16, 3)] {
        let mut out = Vec::new();
        dtype::decode_run(DType::I64, &bytes, 0, n, stride, &mut out);
        let want: Vec<f32> = vals.iter().step_by(stride / 8).map(|&v| v as f32).collect();
        assert_eq!(out, want, "stride {stride}");
    }
    // encode_run: f32 → int64 rounds to nearest even and saturates, NaN → 0; 2.5 → 2, -3.5 → -4,
    // 1e19 → MAX, -inf → MIN.
    let f = [2.5f32, -3.5, 1e19, f32::NEG_INFINITY, f32::NAN, 7.0];
    let mut buf = vec![0u8; 48];
    dtype::encode_run(DType::I64, &mut Rounding::NearestEven, &f, &mut buf, 0, 8);
    assert_eq!(as_i64(&buf), vec![2, -4, i64::MAX, i64::MIN, 0, 7]);
}
