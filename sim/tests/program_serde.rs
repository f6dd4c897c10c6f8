//! Programs are serde data: a program holding one of every `Op` variant round-trips through JSON
//! unchanged, and malformed JSON, unknown opcodes and wrong field types are serde errors (never
//! panics).
//!
//! `TRNSIM_WRITE_FUZZ_SEEDS=<dir> cargo test -p trnsim --test program_serde` also writes the
//! programs below as seed inputs for the `from_json` fuzz target (sim/fuzz/seeds/from_json).

use trnsim::*;

fn sb(d: DType, p: usize, off: u64, n: i64) -> AccessPattern {
    AccessPattern::sbuf(d, 0, p, off, vec![[1, n]])
}

fn ps(d: DType, p: usize, off: u64, n: i64) -> AccessPattern {
    AccessPattern::psum(d, 0, p, off, vec![[1, n]])
}

/// Index of each `Op` variant. Exhaustive on purpose: a new variant does not compile until this
/// test builds one.
fn variant(op: &Op) -> usize {
    match op {
        Op::NcMatmul(_) => 0,
        Op::NcTranspose(_) => 1,
        Op::TensorTensor(_) => 2,
        Op::TensorScalar(_) => 3,
        Op::ScalarTensorTensor(_) => 4,
        Op::TensorReduce(_) => 5,
        Op::TensorTensorScan(_) => 6,
        Op::TensorScalarReduce(_) => 7,
        Op::TensorCopy(_) => 8,
        Op::TensorCopyPredicated(_) => 9,
        Op::Reciprocal(_) => 10,
        Op::BnStats(_) => 11,
        Op::BnAggr(_) => 12,
        Op::Max8(_) => 13,
        Op::FindIndex8(_) => 14,
        Op::MatchReplace8(_) => 15,
        Op::Memset(_) => 16,
        Op::SelectReduce(_) => 17,
        Op::Dropout(_) => 18,
        Op::Rng(_) => 19,
        Op::SetRngSeed(_) => 20,
        Op::StreamShuffle(_) => 21,
        Op::Activation(_) => 22,
        Op::Iota(_) => 23,
        Op::AffineSelect(_) => 24,
        Op::LocalGather(_) => 25,
        Op::NGather(_) => 26,
        Op::TensorPartitionReduce(_) => 27,
        Op::DmaCopy(_) => 28,
        Op::TensorCopyDynamicSrc(_) => 29,
        Op::TensorCopyDynamicDst(_) => 30,
        Op::SequenceBounds(_) => 31,
        Op::DmaTranspose(_) => 32,
        Op::RangeSelect(_) => 33,
        Op::QuantizeMx(_) => 34,
        Op::NcMatmulMx(_) => 35,
        Op::NonzeroWithCount(_) => 36,
        Op::DmaCompute(_) => 37,
        Op::CoreBarrier(_) => 38,
    }
}
const VARIANTS: usize = 39;

/// One of every instruction, with non-default values in every optional field so that a field
/// that fails to serialize shows up as a difference.
fn all_ops_program(target: TargetName) -> Program {
    let f = DType::F32;
    let tile = |off| ScalarOperand::Tile(AccessPattern::sbuf(f, 0, 4, off, vec![[1, 1]]));
    let mut p = Program::new(target);
    p.declare("x", DType::Bf16, &[4, 8], HbmRole::Input);
    p.declare("y", DType::F32, &[4, 8], HbmRole::Output);
    p.declare("tmp", DType::I32, &[16], HbmRole::Scratch);
    let ops = vec![
        Op::NcMatmul(NcMatmul {
            dst: ps(f, 4, 0, 8),
            stationary: sb(DType::Bf16, 4, 0, 4),
            moving: sb(DType::Bf16, 4, 64, 8),
            accumulate: true,
            perf_mode: trnsim::MatmulPerfMode::None,
        }),
        Op::NcTranspose(NcTranspose {
            dst: ps(f, 8, 0, 4),
            src: sb(f, 4, 0, 8),
        }),
        Op::TensorTensor(TensorTensor {
            dst: sb(f, 4, 0, 8),
            in0: sb(f, 4, 32, 8),
            in1: ps(f, 4, 0, 8),
            op: AluOp::Subtract,
        }),
        Op::TensorScalar(TensorScalar {
            dst: sb(f, 4, 0, 8),
            src: sb(f, 4, 32, 8),
            op0: AluOp::Multiply,
            operand0: ScalarOperand::Imm(-0.5),
            reverse0: true,
            op1: Some(AluOp::Add),
            operand1: Some(tile(96)),
            reverse1: true,
        }),
        Op::ScalarTensorTensor(ScalarTensorTensor {
            dst: sb(f, 4, 0, 8),
            src: sb(f, 4, 32, 8),
            op0: AluOp::Max,
            operand0: ScalarOperand::Imm(1e-30),
            op1: AluOp::Min,
            in1: sb(f, 4, 64, 8),
            reverse0: true,
            reverse1: true,
        }),
        Op::TensorReduce(TensorReduce {
            dst: sb(f, 4, 0, 1),
            src: sb(f, 4, 32, 8),
            op: AluOp::Add,
            axes: 1,
            negate: true,
        }),
        Op::TensorTensorScan(TensorTensorScan {
            dst: sb(f, 4, 0, 8),
            in0: sb(f, 4, 32, 8),
            in1: sb(f, 4, 64, 8),
            initial: tile(96),
            op0: AluOp::Multiply,
            op1: AluOp::Add,
        }),
        Op::TensorScalarReduce(TensorScalarReduce {
            dst: sb(f, 4, 0, 8),
            src: sb(f, 4, 32, 8),
            op0: AluOp::Add,
            operand0: ScalarOperand::Imm(3.0),
            reduce_op: AluOp::Max,
            reduce_res: sb(f, 4, 96, 1),
        }),
        Op::TensorCopy(TensorCopy {
            dst: sb(DType::Fp8E4m3, 4, 0, 8),
            src: sb(DType::Fp8E5m2, 4, 32, 8),
        }),
        Op::TensorCopyPredicated(TensorCopyPredicated {
            dst: sb(f, 4, 0, 8),
            src: sb(f, 4, 32, 8),
            predicate: sb(DType::U8, 4, 64, 8),
            reverse_pred: true,
        }),
        Op::Reciprocal(Reciprocal {
            dst: sb(f, 4, 0, 8),
            src: sb(f, 4, 32, 8),
        }),
        Op::BnStats(BnStats {
            dst: sb(f, 4, 0, 6),
            src: sb(f, 4, 32, 8),
        }),
        Op::BnAggr(BnAggr {
            dst: sb(f, 4, 0, 2),
            src: sb(f, 4, 32, 6),
        }),
        Op::Max8(Max8 {
            dst: sb(f, 4, 0, 8),
            src: sb(f, 4, 32, 16),
        }),
        Op::FindIndex8(FindIndex8 {
            dst: sb(DType::U32, 4, 0, 8),
            data: sb(f, 4, 32, 16),
            vals: sb(f, 4, 96, 8),
        }),
        Op::MatchReplace8(MatchReplace8 {
            dst: sb(f, 4, 0, 16),
            data: sb(f, 4, 64, 16),
            vals: sb(f, 4, 128, 8),
            imm: -1e9,
            dst_idx: Some(sb(DType::U32, 4, 160, 8)),
        }),
        Op::Memset(Memset {
            dst: sb(DType::I16, 4, 0, 8),
            value: -7.0,
        }),
        Op::SelectReduce(SelectReduce {
            dst: sb(f, 4, 0, 8),
            predicate: sb(DType::U8, 4, 32, 8),
            on_true: sb(f, 4, 64, 8),
            on_false: ScalarOperand::Imm(f32::MIN as f64),
            reverse_pred: true,
            reduce_res: Some(sb(f, 4, 96, 1)),
        }),
        Op::Dropout(Dropout {
            dst: sb(f, 4, 0, 8),
            src: sb(f, 4, 32, 8),
            prob: ScalarOperand::Imm(0.25),
        }),
        Op::Rng(Rng {
            dst: sb(DType::U32, 4, 0, 8),
        }),
        Op::SetRngSeed(SetRngSeed { seed: tile(96) }),
        Op::StreamShuffle(StreamShuffle {
            dst: sb(f, 32, 0, 8),
            src: sb(f, 32, 32, 8),
            mask: (0..32).rev().chain([255]).collect(),
        }),
        Op::Activation(Activation {
            dst: sb(DType::Bf16, 4, 0, 8),
            func: ActFunc::GeluApproxTanh,
            src: ps(f, 4, 0, 8),
            bias: Some(tile(96)),
            scale: ScalarOperand::Imm(0.125),
            acc: AccCmd::ResetReduce,
            reduce_res: Some(sb(f, 4, 128, 1)),
        }),
        Op::Iota(Iota {
            dst: sb(DType::I32, 4, 0, 8),
            offset: -3,
            channel_multiplier: 8,
            pattern: vec![[1, 8]],
        }),
        Op::AffineSelect(AffineSelect {
            dst: sb(f, 4, 0, 8),
            on_true: sb(f, 4, 32, 8),
            on_false: -9984.0,
            offset: 2,
            channel_multiplier: -1,
            pattern: vec![[1, 8]],
            cmp: CmpOp::GreaterEqual,
        }),
        Op::LocalGather(LocalGather {
            dst: sb(f, 16, 0, 8),
            src: sb(f, 16, 32, 8),
            index: sb(DType::U16, 16, 64, 4),
            num_elem_per_idx: 2,
            num_valid_indices: 4,
        }),
        Op::NGather(NGather {
            dst: sb(f, 4, 0, 4),
            data: sb(f, 4, 32, 8),
            indices: sb(DType::U32, 4, 64, 4),
        }),
        Op::TensorPartitionReduce(TensorPartitionReduce {
            dst: sb(f, 1, 0, 8),
            src: sb(f, 4, 32, 8),
            op: AluOp::Max,
        }),
        Op::DmaCopy(DmaCopy {
            dst: AccessPattern::hbm("y", f, 0, 4, 8, vec![[1, 8]]),
            src: sb(DType::Bf16, 4, 0, 8),
            accumulate: true,
            indirect: Some(Indirect {
                side: IndirectSide::Dst,
                index: sb(DType::I32, 4, 64, 1),
                row_step: 8,
                oob: OobMode::Skip,
            }),
        }),
        Op::TensorCopyDynamicSrc(TensorCopyDynamic {
            dst: sb(f, 4, 0, 4),
            src: sb(f, 4, 32, 4),
            offset: sb(DType::I32, 1, 64, 1),
            offset_scale: 4,
        }),
        Op::TensorCopyDynamicDst(TensorCopyDynamic {
            dst: sb(f, 4, 0, 4),
            src: sb(f, 4, 32, 4),
            offset: sb(DType::U16, 1, 64, 1),
            offset_scale: -2,
        }),
        Op::SequenceBounds(SequenceBounds {
            dst: sb(DType::I32, 1, 0, 16),
            segment_ids: sb(f, 1, 64, 8),
        }),
        Op::DmaTranspose(DmaTranspose {
            dst: AccessPattern::hbm("y", DType::Bf16, 0, 8, 4, vec![[1, 4]]),
            src: sb(DType::Bf16, 4, 0, 8),
            dge_mode: DgeMode::Hwdge,
            indirect: Some(Indirect {
                side: IndirectSide::Src,
                index: sb(DType::U32, 4, 64, 1),
                row_step: 8,
                oob: OobMode::Error,
            }),
        }),
        Op::RangeSelect(RangeSelect {
            dst: sb(f, 4, 0, 8),
            on_true: sb(f, 4, 32, 8),
            comp0: RangeCmp::GreaterEqual,
            bound0: tile(96),
            comp1: RangeCmp::Less,
            bound1: ScalarOperand::Imm(6.0),
            range_start: 16.0,
            on_false: f32::MIN as f64,
            reduce_res: Some(sb(f, 4, 100, 1)),
        }),
        Op::QuantizeMx(QuantizeMx {
            dst: sb(DType::Fp8E4m3fnX4, 32, 0, 2),
            src: sb(DType::Bf16, 32, 64, 8),
            dst_scale: sb(DType::Fp8E8m0fnu, 4, 128, 2),
        }),
        Op::NcMatmulMx(NcMatmulMx {
            dst: ps(DType::Bf16, 2, 0, 4),
            stationary: sb(DType::Fp8E5m2X4, 32, 0, 2),
            moving: sb(DType::Fp4E2m1fnX4, 32, 64, 4),
            stationary_scale: sb(DType::U8, 4, 128, 2),
            moving_scale: sb(DType::Fp8E8m0fnu, 4, 160, 4),
            accumulate: true,
            tile_position: Some([32, 0]),
            tile_size: Some([32, 128]),
        }),
        Op::NonzeroWithCount(NonzeroWithCount {
            dst: sb(DType::I32, 16, 0, 9),
            src: sb(f, 16, 64, 8),
            index_offset: 16,
            padding_val: -7,
        }),
        Op::DmaCompute(DmaCompute {
            dst: AccessPattern::hbm("y", f, 0, 4, 8, vec![[1, 8]]),
            srcs: vec![
                sb(f, 4, 0, 8),
                AccessPattern::hbm("x", DType::Bf16, 0, 4, 8, vec![[1, 8]]),
            ],
            scales: Some(vec![1.0, 1.0]),
            reduce_op: AluOp::Add,
        }),
        Op::CoreBarrier(CoreBarrier {
            data: AccessPattern::hbm("y", f, 0, 8, 4, vec![[1, 4]]),
        }),
    ];
    let engines = |op: &Op| op.engines()[op.engines().len() - 1];
    for op in ops {
        let e = engines(&op);
        p.push(e, op);
    }
    p.instructions[3].wait = vec![0, 2];
    p
}

#[test]
fn one_of_every_op_round_trips() {
    for target in [TargetName::Trn1, TargetName::Trn2] {
        let p = all_ops_program(target);
        let mut seen = [false; VARIANTS];
        for i in &p.instructions {
            seen[variant(&i.op)] = true;
        }
        assert!(seen.iter().all(|&s| s), "every Op variant is in the program: {seen:?}");
        let json = p.to_json();
        let back = Program::from_json(&json).expect("own JSON parses");
        assert_eq!(back, p);
        assert_eq!(back.to_json(), json, "serialization is stable");
        // Compact JSON too, and through serde_json::Value.
        let compact = serde_json::to_string(&p).unwrap();
        assert_eq!(Program::from_json(&compact).unwrap(), p);
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::from_value::<Program>(value).unwrap(), p);
        if let Ok(dir) = std::env::var("TRNSIM_WRITE_FUZZ_SEEDS") {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(format!("{dir}/all_ops_{}.json", target.name()), &compact).unwrap();
        }
    }
}

#[test]
fn json_shape_is_the_documented_one() {
    let p = all_ops_program(TargetName::Trn1);
    let v: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
    assert_eq!(v["target"], "trn1");
    assert_eq!(v["hbm"][0]["dtype"], "bf16");
    assert_eq!(v["hbm"][2]["role"], "scratch");
    // Externally tagged ops, snake_case names equal to Op::name (except the NKI-prefixed ones).
    let first = &v["instructions"][0];
    assert_eq!(first["engine"], "tensor");
    assert!(first["op"]["nc_matmul"].is_object());
    assert_eq!(first["op"]["nc_matmul"]["dst"]["mem"], "psum");
    assert!(v["instructions"][28]["op"]["dma_copy"]["dst"]["mem"]["hbm"] == "y");
    assert_eq!(v["instructions"][3]["wait"], serde_json::json!([0, 2]));
    assert!(
        v["instructions"][0].get("wait").is_none(),
        "empty wait lists are omitted"
    );
    // Defaults: target, wait, optional fields.
    let minimal = r#"{"hbm": [], "instructions": [
        {"engine": "vector", "op": {"memset": {"dst": {"mem": "sbuf", "dtype": "f32", "partitions": 1, "free": [[1, 4]]}, "value": 1.5}}},
        {"engine": "vector", "op": {"tensor_scalar": {"dst": {"mem": "sbuf", "dtype": "f32", "partitions": 1, "free": [[1, 4]]},
            "src": {"mem": "sbuf", "dtype": "f32", "partitions": 1, "free": [[1, 4]]}, "op0": "add", "operand0": {"imm": 2}}}}
    ]}"#;
    let p = Program::from_json(minimal).unwrap();
    assert_eq!(p.target, TargetName::Trn2, "an omitted target is the default, trn2");
    assert!(p.instructions[0].wait.is_empty());
    match &p.instructions[1].op {
        Op::TensorScalar(t) => {
            assert_eq!(t.op1, None);
            assert!(!t.reverse0);
            assert_eq!(t.operand0, ScalarOperand::Imm(2.0));
        }
        other => panic!("{other:?}"),
    }
    // And the minimal program runs.
    let mut p2 = p.clone();
    p2.instructions.truncate(1);
    Executor::new(TargetName::Trn2).run(&p2, &Default::default()).unwrap();
}

#[track_caller]
fn expect_err(json: &str, needle: &str) {
    let e = err(json);
    assert!(e.contains(needle), "error `{e}` should mention `{needle}`");
}

fn err(json: &str) -> String {
    match Program::from_json(json) {
        Ok(p) => panic!("parsed: {p:?}"),
        Err(e) => e.to_string(),
    }
}

const AP: &str = r#"{"mem": "sbuf", "dtype": "f32", "partitions": 1, "free": [[1, 4]]}"#;

fn with_op(op: &str) -> String {
    format!(r#"{{"hbm": [], "instructions": [{{"engine": "vector", "op": {op}}}]}}"#)
}

#[test]
fn malformed_programs_are_serde_errors() {
    // Not JSON at all / truncated / trailing garbage.
    for bad in [
        "",
        "{",
        "[]",
        "null",
        "42",
        "{\"hbm\": [], \"instructions\": [",
        "{\"hbm\": [], \"instructions\": []} x",
        "\u{0}",
    ] {
        let _ = err(bad);
    }
    // Unknown opcode, engine, dtype, memory, target, role.
    expect_err(&with_op(r#"{"tensor_frobnicate": {}}"#), "unknown variant");
    expect_err(
        r#"{"hbm": [], "instructions": [{"engine": "npu", "op": {"rng": {"dst": {"mem": "sbuf", "dtype": "f32", "partitions": 1, "free": []}}}}]}"#,
        "unknown variant",
    );
    expect_err(
        &with_op(&format!(
            r#"{{"memset": {{"dst": {}, "value": 1}}}}"#,
            AP.replace("f32", "f64")
        )),
        "unknown variant",
    );
    expect_err(
        &with_op(&format!(
            r#"{{"memset": {{"dst": {}, "value": 1}}}}"#,
            AP.replace("sbuf", "dram")
        )),
        "unknown variant",
    );
    expect_err(
        r#"{"target": "trn9", "hbm": [], "instructions": []}"#,
        "unknown variant",
    );
    expect_err(
        r#"{"hbm": [{"name": "a", "dtype": "f32", "shape": [1], "role": "temp"}], "instructions": []}"#,
        "unknown variant",
    );
    // Wrong field types.
    expect_err(
        &with_op(&format!(r#"{{"memset": {{"dst": {}, "value": "one"}}}}"#, AP)),
        "invalid type",
    );
    expect_err(
        &with_op(&format!(
            r#"{{"memset": {{"dst": {}, "value": 1}}}}"#,
            AP.replace("1,", "\"four\",")
        )),
        "invalid type",
    );
    expect_err(
        &with_op(&format!(
            r#"{{"memset": {{"dst": {}, "value": 1}}}}"#,
            AP.replace("[[1, 4]]", "[[1, 4, 5]]")
        )),
        "trailing",
    );
    expect_err(
        &with_op(&format!(
            r#"{{"memset": {{"dst": {}, "value": 1}}}}"#,
            AP.replace("\"partitions\": 1", "\"partitions\": -1")
        )),
        "invalid value",
    );
    expect_err(
        &with_op(&format!(
            r#"{{"memset": {{"dst": {}, "value": 1}}}}"#,
            AP.replace("\"partitions\": 1", "\"partitions\": 1.5")
        )),
        "invalid type",
    );
    expect_err(
        &with_op(&format!(
            r#"{{"tensor_tensor": {{"dst": {AP}, "in0": {AP}, "in1": {AP}, "op": 3}}}}"#
        )),
        "expected value",
    );
    expect_err(
        &with_op(&format!(
            r#"{{"tensor_tensor": {{"dst": {AP}, "in0": {AP}, "in1": {AP}, "op": "divide"}}}}"#
        )),
        "unknown variant",
    );
    expect_err(r#"{"hbm": {}, "instructions": []}"#, "invalid type");
    expect_err(
        &with_op(&format!(r#"{{"memset": {{"dst": {AP}, "value": 1}}}}, "wait": [-1]"#)),
        "invalid value",
    );
    // Missing fields.
    expect_err(r#"{"instructions": []}"#, "missing field `hbm`");
    expect_err(
        &with_op(&format!(r#"{{"memset": {{"dst": {AP}}}}}"#)),
        "missing field `value`",
    );
    expect_err(
        &with_op(r#"{"memset": {"dst": {"mem": "sbuf", "dtype": "f32", "free": []}, "value": 0}}"#),
        "missing field `partitions`",
    );
    // Two ops in one instruction, or none.
    assert!(
        !err(&with_op(&format!(
            r#"{{"memset": {{"dst": {AP}, "value": 1}}, "rng": {{"dst": {AP}}}}}"#
        )))
        .is_empty()
    );
    assert!(!err(&with_op("{}")).is_empty());
    // Numbers out of range for the field.
    expect_err(
        &with_op(&format!(
            r#"{{"memset": {{"dst": {}, "value": 1}}}}"#,
            AP.replace("[[1, 4]]", "[[1, 99999999999999999999]]")
        )),
        "invalid",
    );
    assert!(!err(&with_op(&format!(r#"{{"memset": {{"dst": {AP}, "value": 1e999}}}}"#))).is_empty());
    // Duplicate fields.
    expect_err(
        &with_op(&format!(r#"{{"memset": {{"dst": {AP}, "value": 1, "value": 2}}}}"#)),
        "duplicate field",
    );
}

/// Every prefix and many single-byte corruptions of a valid program parse or fail cleanly.
#[test]
fn truncations_and_corruptions_never_panic() {
    let json = serde_json::to_string(&all_ops_program(TargetName::Trn1)).unwrap();
    let bytes = json.as_bytes();
    let mut parsed = 0;
    for cut in 0..bytes.len() {
        if let Ok(s) = std::str::from_utf8(&bytes[..cut]) {
            parsed += Program::from_json(s).is_ok() as usize;
        }
    }
    assert_eq!(parsed, 0, "no proper prefix is a whole program");
    let replacements = [b'"', b'{', b'}', b'[', b']', b':', b',', b'0', b'-', b'x', b' ', b'e'];
    let mut ok = 0;
    let small = ExecConfig {
        max_hbm_bytes: 1 << 16,
        max_instructions: 64,
        ..ExecConfig::default()
    };
    let exec = Executor::with_config(TargetName::Trn1, small);
    for (i, _) in bytes.iter().enumerate().step_by(5) {
        for &r in &replacements {
            let mut b = bytes.to_vec();
            b[i] = r;
            if let Ok(s) = std::str::from_utf8(&b)
                && let Ok(p) = Program::from_json(s)
            {
                ok += 1;
                // Whatever parses runs without panicking (errors are fine). A sample runs here;
                // the fuzzer (sim/fuzz, target from_json) does the rest.
                if ok % 20 == 1 {
                    let _ = exec.run(&p, &Default::default());
                }
            }
        }
    }
    assert!(ok > 0, "some corruptions (e.g. digits) still parse");
}

/// JSON has no NaN or infinity; immediates that are not finite must still round-trip.
#[test]
fn non_finite_immediates_round_trip() {
    use trnsim::*;
    let ap = AccessPattern::sbuf(DType::F32, 0, 4, 0, vec![[1, 8]]);
    for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 1.5] {
        let mut p = Program::new(TargetName::Trn1);
        p.push(
            Engine::Vector,
            Op::Memset(Memset {
                dst: ap.clone(),
                value: v,
            }),
        );
        p.push(
            Engine::Vector,
            Op::TensorScalar(TensorScalar {
                dst: ap.clone(),
                src: ap.clone(),
                op0: AluOp::Max,
                operand0: ScalarOperand::Imm(v),
                reverse0: false,
                op1: None,
                operand1: None,
                reverse1: false,
            }),
        );
        let back = Program::from_json(&p.to_json()).expect("round trip");
        let Op::Memset(m) = &back.instructions[0].op else {
            panic!("memset expected")
        };
        let Op::TensorScalar(t) = &back.instructions[1].op else {
            panic!("tensor_scalar expected")
        };
        let ScalarOperand::Imm(imm) = t.operand0 else {
            panic!("immediate expected")
        };
        for got in [m.value, imm] {
            assert!(
                got.to_bits() == v.to_bits() || (got.is_nan() && v.is_nan()),
                "{v} came back as {got}"
            );
        }
    }
    assert!(Program::from_json(r#"{"hbm":[],"instructions":[{"engine":"vector","op":{"memset":{"dst":{"mem":"sbuf","dtype":"f32","partitions":1,"free":[[1,1]]},"value":"lots"}}}]}"#).is_err());
}

/// The read/write role of every operand of every instruction, as `all_ops_program` builds it
/// (every optional operand present; `accumulate` set on `nc_matmul` and `dma_copy`). Written from
/// the instructions' definitions in docs/isa.md, not from `Op::operands`. Exhaustive on purpose: a
/// new variant does not compile until its roles are written here.
fn expected_roles(op: &Op) -> Vec<(&'static str, Role, bool)> {
    use Role::{Read as R, ReadWrite as RW, Write as W};
    let v: &[(&str, Role, bool)] = match op {
        Op::NcMatmul(_) => &[("dst", RW, false), ("stationary", R, false), ("moving", R, false)],
        Op::NcTranspose(_) => &[("dst", W, false), ("src", R, false)],
        Op::TensorTensor(_) => &[("dst", W, false), ("in0", R, false), ("in1", R, false)],
        // operand0 is an immediate here, operand1 a tile.
        Op::TensorScalar(_) => &[("dst", W, false), ("src", R, false), ("operand1", R, false)],
        Op::ScalarTensorTensor(_) => &[("dst", W, false), ("src", R, false), ("in1", R, false)],
        Op::TensorReduce(_) => &[("dst", W, false), ("src", R, false)],
        Op::TensorTensorScan(_) => &[
            ("dst", W, false),
            ("in0", R, false),
            ("in1", R, false),
            ("initial", R, false),
        ],
        // operand0 is an immediate here.
        Op::TensorScalarReduce(_) => &[("dst", W, false), ("src", R, false), ("reduce_res", W, false)],
        Op::TensorCopy(_) => &[("dst", W, false), ("src", R, false)],
        Op::TensorCopyPredicated(_) => &[("dst", RW, false), ("src", R, false), ("predicate", R, false)],
        Op::Reciprocal(_) | Op::BnStats(_) | Op::BnAggr(_) | Op::Max8(_) => &[("dst", W, false), ("src", R, false)],
        Op::FindIndex8(_) => &[("dst", W, false), ("data", R, false), ("vals", R, false)],
        Op::MatchReplace8(_) => &[
            ("dst", W, false),
            ("data", R, false),
            ("vals", R, false),
            ("dst_idx", W, false),
        ],
        Op::Memset(_) | Op::Rng(_) | Op::Iota(_) => &[("dst", W, false)],
        Op::SelectReduce(_) => &[
            ("dst", W, false),
            ("predicate", R, false),
            ("on_true", R, false),
            ("reduce_res", W, false),
        ],
        Op::Dropout(_) => &[("dst", W, false), ("src", R, false)],
        Op::SetRngSeed(_) => &[("seed", R, false)],
        Op::StreamShuffle(_) => &[("dst", W, false), ("src", R, false)],
        Op::Activation(_) => &[
            ("dst", W, false),
            ("src", R, false),
            ("bias", R, false),
            ("reduce_res", W, false),
        ],
        Op::AffineSelect(_) => &[("dst", W, false), ("on_true", R, false)],
        Op::LocalGather(_) => &[("dst", W, false), ("src", R, false), ("index", R, false)],
        Op::NGather(_) => &[("dst", W, false), ("data", R, false), ("indices", R, false)],
        Op::TensorPartitionReduce(_) => &[("dst", W, false), ("src", R, false)],
        // An indirect destination, accumulating.
        Op::DmaCopy(_) => &[("dst", RW, true), ("src", R, false), ("index", R, false)],
        Op::TensorCopyDynamicSrc(_) => &[("dst", W, false), ("src", R, true), ("offset", R, false)],
        Op::TensorCopyDynamicDst(_) => &[("dst", W, true), ("src", R, false), ("offset", R, false)],
        Op::SequenceBounds(_) => &[("dst", W, false), ("segment_ids", R, false)],
        // An indirect (gathering) source: refused when run, but its operands are what they are.
        Op::DmaTranspose(_) => &[("dst", W, false), ("src", R, true), ("index", R, false)],
        // Touches no byte: a read-modify-write of the shared tensor for ordering only.
        Op::CoreBarrier(_) => &[("data", RW, false)],
        Op::RangeSelect(_) => &[
            ("dst", W, false),
            ("on_true", R, false),
            ("bound0", R, false),
            ("reduce_res", W, false),
        ],
        Op::NonzeroWithCount(_) => &[("dst", W, false), ("src", R, false)],
        Op::DmaCompute(_) => &[("dst", W, false), ("srcs[0]", R, false), ("srcs[1]", R, false)],
        Op::QuantizeMx(_) => &[("dst", W, false), ("src", R, false), ("dst_scale", W, false)],
        // Accumulating.
        Op::NcMatmulMx(_) => &[
            ("dst", RW, false),
            ("stationary", R, false),
            ("moving", R, false),
            ("stationary_scale", R, false),
            ("moving_scale", R, false),
        ],
    };
    v.to_vec()
}

#[test]
fn every_operand_has_its_documented_role() {
    let p = all_ops_program(TargetName::Trn1);
    for inst in &p.instructions {
        let got: Vec<(&str, Role, bool)> = inst.op.operands().iter().map(|o| (o.name, o.role, o.dynamic)).collect();
        assert_eq!(got, expected_roles(&inst.op), "{}", inst.op.name());
    }
    // Without accumulation the destination is only written; a direct DMA is not dynamic.
    let p = all_ops_program(TargetName::Trn1);
    for inst in p.instructions {
        let mut op = inst.op;
        match &mut op {
            Op::NcMatmul(i) => i.accumulate = false,
            Op::DmaCopy(i) => {
                i.accumulate = false;
                i.indirect = None;
            }
            _ => continue,
        }
        let dst = op.operands()[0];
        assert_eq!(
            (dst.name, dst.role, dst.dynamic),
            ("dst", Role::Write, false),
            "{}",
            op.name()
        );
    }
    assert!(Role::ReadWrite.reads() && Role::ReadWrite.writes() && !Role::Read.writes() && !Role::Write.reads());
}

/// Every object of a program's JSON, with the path to it: the program, each declaration, each
/// instruction, each op's operand struct, each access pattern and nested struct.
fn objects<'v>(v: &'v serde_json::Value, path: String, out: &mut Vec<(String, &'v serde_json::Value)>) {
    match v {
        serde_json::Value::Object(m) => {
            out.push((path.clone(), v));
            for (k, x) in m {
                objects(x, format!("{path}.{k}"), out);
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                objects(x, format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn an_unknown_key_anywhere_is_a_load_error_naming_it() {
    // The misspelling that used to be silently `false`.
    let mut p = Program::new(TargetName::Trn1);
    p.declare("x", DType::F32, &[4, 8], HbmRole::Input);
    p.push(
        Engine::Dma,
        Op::DmaCopy(DmaCopy {
            dst: sb(DType::F32, 4, 0, 8),
            src: AccessPattern::hbm("x", DType::F32, 0, 4, 8, vec![[1, 8]]),
            accumulate: false,
            indirect: None,
        }),
    );
    let mut v: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
    let copy = &mut v["instructions"][0]["op"]["dma_copy"];
    copy.as_object_mut().unwrap().remove("accumulate");
    copy["acumulate"] = serde_json::json!(true);
    let e = Program::from_json(&v.to_string()).unwrap_err().to_string();
    assert!(e.contains("unknown field `acumulate`"), "{e}");
    // Every struct of the program's JSON, one at a time: every object of the one-of-every-op
    // program gets a key no struct has. An object that is an op's tag map (`{"nc_matmul": …}`) or
    // a tagged value (`{"imm": …}`, `{"hbm": …}`) refuses a second key as well.
    let json: serde_json::Value = serde_json::from_str(&all_ops_program(TargetName::Trn1).to_json()).unwrap();
    let mut all = Vec::new();
    objects(&json, String::new(), &mut all);
    let paths: Vec<String> = all.into_iter().map(|(p, _)| p).collect();
    assert!(paths.len() > 150, "{}", paths.len());
    for path in paths {
        let mut bad = json.clone();
        let mut at = &mut bad;
        for part in path.split('.').skip(1) {
            let (key, idx) = match part.split_once('[') {
                Some((k, rest)) => (k, Some(rest)),
                None => (part, None),
            };
            at = &mut at[key];
            if let Some(rest) = idx {
                for i in rest.split('[') {
                    at = &mut at[i.trim_end_matches(']').parse::<usize>().unwrap()];
                }
            }
        }
        at["zz_unknown"] = serde_json::json!(1);
        let e = Program::from_json(&bad.to_string())
            .err()
            .unwrap_or_else(|| panic!("an unknown key in `{path}` was accepted"))
            .to_string();
        assert!(e.contains("zz_unknown"), "{path}: {e}");
    }
}
