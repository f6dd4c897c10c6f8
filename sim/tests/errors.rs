//! Every `ErrorKind` is produced by a program run through `Executor::run`, and the error's text
//! names where it happened: `instruction #<index> (<engine> <opcode>) operand `<operand>`: <what>`
//! (or `program: <what>` for errors of the program as a whole).
//!
//! Each faulty program has exactly one faulty operand, so the operand named does not depend on
//! the order in which an instruction checks its operands.

use std::collections::BTreeMap;
use trnsim::*;

const F: DType = DType::F32;

fn sb(d: DType, start: usize, p: usize, off: u64, free: Vec<FreeDim>) -> AccessPattern {
    AccessPattern::sbuf(d, start, p, off, free)
}

fn ps(d: DType, start: usize, p: usize, off: u64, free: Vec<FreeDim>) -> AccessPattern {
    AccessPattern::psum(d, start, p, off, free)
}

/// 32 partitions × 8 f32 in SBUF at byte 0, loaded from input `x` by instruction #0.
const P: usize = 32;

fn base() -> (Program, BTreeMap<String, HostTensor>) {
    let mut p = Program::new(TargetName::Trn1);
    p.declare("x", F, &[P, 8], HbmRole::Input);
    p.push(
        Engine::Dma,
        Op::DmaCopy(DmaCopy {
            dst: sb(F, 0, P, 0, vec![[1, 8]]),
            src: AccessPattern::hbm("x", F, 0, P, 8, vec![[1, 8]]),
            accumulate: false,
            indirect: None,
        }),
    );
    let vals: Vec<f32> = (0..P * 8).map(|i| i as f32).collect();
    let mut inputs = BTreeMap::new();
    inputs.insert("x".to_string(), HostTensor::from_f32(&[P, 8], &vals));
    (p, inputs)
}

fn x_rows(rows: usize, off: u64, free: Vec<FreeDim>) -> AccessPattern {
    AccessPattern::hbm("x", F, off, rows, 8, free)
}

fn copy(dst: AccessPattern, src: AccessPattern) -> Op {
    Op::TensorCopy(TensorCopy { dst, src })
}

/// The loaded region (valid source) and a free destination region, both [P, 8] f32.
fn loaded() -> AccessPattern {
    sb(F, 0, P, 0, vec![[1, 8]])
}
fn free_dst() -> AccessPattern {
    sb(F, 0, P, 1024, vec![[1, 8]])
}

/// One error case: how to provoke it and what the message must say.
struct Case {
    name: &'static str,
    result: Result<RunResult, SimError>,
    /// Exact prefix of the Display text (location part).
    prefix: String,
    /// Which variant, by `kind_index`.
    kind: usize,
    /// Substrings the Display text must contain (the "what" part).
    says: Vec<&'static str>,
}

/// Exhaustive on purpose: a new `ErrorKind` variant does not compile until it is counted here
/// (and then the coverage test fails until a case produces it).
fn kind_index(k: &ErrorKind) -> usize {
    match k {
        ErrorKind::TooManyPartitions { .. } => 0,
        ErrorKind::PartitionOutOfRange { .. } => 1,
        ErrorKind::StartPartition { .. } => 2,
        ErrorKind::TooManyFreeDims { .. } => 3,
        ErrorKind::BadFreeDim { .. } => 4,
        ErrorKind::OutOfBounds { .. } => 5,
        ErrorKind::HbmOutOfBounds { .. } => 6,
        ErrorKind::UnknownTensor(_) => 7,
        ErrorKind::Misaligned { .. } => 8,
        ErrorKind::UninitializedRead { .. } => 9,
        ErrorKind::MemoryNotAccessible { .. } => 10,
        ErrorKind::WrongEngine { .. } => 11,
        ErrorKind::NotOnTarget { .. } => 12,
        ErrorKind::UnsupportedDType { .. } => 13,
        ErrorKind::ShapeMismatch(_) => 14,
        ErrorKind::FreeSizeLimit { .. } => 15,
        ErrorKind::PsumBankOverflow { .. } => 16,
        ErrorKind::Invalid(_) => 17,
        ErrorKind::Unsupported(_) => 18,
        ErrorKind::IndexOutOfRange { .. } => 19,
        ErrorKind::Race(_) => 20,
        ErrorKind::DTypeNotOnTarget { .. } => 21,
    }
}
const KINDS: usize = 22;
const NAMES: [&str; KINDS] = [
    "TooManyPartitions",
    "PartitionOutOfRange",
    "StartPartition",
    "TooManyFreeDims",
    "BadFreeDim",
    "OutOfBounds",
    "HbmOutOfBounds",
    "UnknownTensor",
    "Misaligned",
    "UninitializedRead",
    "MemoryNotAccessible",
    "WrongEngine",
    "NotOnTarget",
    "UnsupportedDType",
    "ShapeMismatch",
    "FreeSizeLimit",
    "PsumBankOverflow",
    "Invalid",
    "Unsupported",
    "IndexOutOfRange",
    "Race",
    "DTypeNotOnTarget",
];
/// Variants no instruction of this simulator version raises (see the coverage test).
const UNREACHABLE: [usize; 1] = [21];

/// Runs `p` with the waits its accesses need (the cases build programs without waits, and each
/// is about another error than a race).
fn run(p: &Program, inputs: &BTreeMap<String, HostTensor>) -> Result<RunResult, SimError> {
    let mut p = p.clone();
    infer_waits(&mut p);
    run_as_is(&p, inputs)
}

/// Runs `p` with its wait lists exactly as given.
fn run_as_is(p: &Program, inputs: &BTreeMap<String, HostTensor>) -> Result<RunResult, SimError> {
    Executor::new(TargetName::Trn1).run(p, inputs)
}

/// A case whose faulty instruction is appended to the loading program (so it is #1, or later).
fn inst_case(
    name: &'static str,
    engine: Engine,
    ops: Vec<Op>,
    operand: Option<&str>,
    kind: usize,
    says: Vec<&'static str>,
) -> Case {
    let (mut p, inputs) = base();
    let mut last = (0, "");
    for op in ops {
        last = (p.instructions.len(), op.name());
        p.push(engine, op);
    }
    let prefix = match operand {
        Some(o) => format!("instruction #{} ({} {}) operand `{o}`: ", last.0, engine.name(), last.1),
        None => format!("instruction #{} ({} {}): ", last.0, engine.name(), last.1),
    };
    Case {
        name,
        result: run(&p, &inputs),
        prefix,
        kind,
        says,
    }
}

fn program_case(name: &'static str, result: Result<RunResult, SimError>, kind: usize, says: Vec<&'static str>) -> Case {
    Case {
        name,
        result,
        prefix: "program: ".into(),
        kind,
        says,
    }
}

fn cases() -> Vec<Case> {
    use Engine::*;
    let mut c = Vec::with_capacity(48);

    // --- partitions -------------------------------------------------------------------------
    c.push(inst_case(
        "too many partitions (DMA into 129 SBUF partitions)",
        Dma,
        vec![Op::dma_copy(
            sb(F, 0, 129, 1024, vec![[1, 8]]),
            x_rows(129, 0, vec![[1, 8]]).with_partition_step(0),
        )],
        Some("dst"),
        0,
        vec!["129 partitions requested, the target has 128"],
    ));
    c.push(inst_case(
        "partition range (DMA into partitions 100..130)",
        Dma,
        vec![Op::dma_copy(
            sb(F, 100, 30, 1024, vec![[1, 8]]),
            x_rows(30, 0, vec![[1, 8]]),
        )],
        Some("dst"),
        1,
        vec!["partitions 100..130 run past partition 128"],
    ));
    c.push(inst_case(
        "start partition (32 partitions starting at 16)",
        Vector,
        vec![copy(sb(F, 16, 32, 1024, vec![[1, 8]]), loaded())],
        Some("dst"),
        2,
        vec!["start partition 16 is illegal for an operand of 32 partitions"],
    ));
    c.push(inst_case(
        "start partition (64 partitions starting at 32)",
        Scalar,
        vec![Op::Activation(Activation {
            dst: sb(F, 0, 64, 1024, vec![[1, 8]]),
            func: ActFunc::Copy,
            src: sb(F, 32, 64, 0, vec![[1, 8]]),
            bias: None,
            scale: ScalarOperand::Imm(1.0),
            acc: AccCmd::Idle,
            reduce_res: None,
        })],
        Some("src"),
        2,
        vec!["start partition 32 is illegal for an operand of 64 partitions"],
    ));

    // --- free dimensions --------------------------------------------------------------------
    c.push(inst_case(
        "too many free dims",
        Vector,
        vec![copy(
            free_dst(),
            sb(F, 0, P, 0, vec![[4, 2], [2, 2], [1, 2], [1, 1], [1, 1]]),
        )],
        Some("src"),
        3,
        vec!["5 free dimensions, at most 4 allowed"],
    ));
    c.push(inst_case(
        "bad free dim: size above 65535",
        Dma,
        vec![Op::dma_copy(
            sb(F, 0, 100, 1024, vec![[1, 700]]),
            AccessPattern::hbm("x", F, 0, 1, 0, vec![[1, 70_000]]),
        )],
        Some("src"),
        4,
        vec!["free dimension 0: size 70000 is outside 0..=65535"],
    ));
    c.push(inst_case(
        "bad free dim: on-chip step outside int16",
        Vector,
        vec![copy(free_dst(), sb(F, 0, P, 0, vec![[40_000, 1], [1, 8]]))],
        Some("src"),
        4,
        vec!["free dimension 0: step 40000 does not fit in int16"],
    ));

    // --- bounds -----------------------------------------------------------------------------
    c.push(inst_case(
        "SBUF out of bounds",
        Vector,
        vec![copy(sb(F, 0, P, 180_224 - 16, vec![[1, 8]]), loaded())],
        Some("dst"),
        5,
        vec!["bytes 180208..180240 of each partition are outside SBUF (180224 bytes per partition usable)"],
    ));
    c.push(inst_case(
        "PSUM out of bounds",
        Vector,
        vec![copy(ps(F, 0, P, 16_384 - 8, vec![[1, 8]]), loaded())],
        Some("dst"),
        5,
        vec!["bytes 16376..16408 of each partition are outside PSUM (16384 bytes per partition usable)"],
    ));
    c.push(inst_case(
        "HBM out of bounds",
        Dma,
        vec![Op::dma_copy(
            sb(F, 0, 1, 1024, vec![[1, 8]]),
            AccessPattern::hbm("x", F, 250, 1, 0, vec![[1, 8]]),
        )],
        Some("src"),
        6,
        vec!["elements 250..258 are outside HBM tensor `x` of 256 elements"],
    ));
    c.push(inst_case(
        "unknown HBM tensor",
        Dma,
        vec![Op::dma_copy(
            sb(F, 0, 1, 1024, vec![[1, 8]]),
            AccessPattern::hbm("nope", F, 0, 1, 0, vec![[1, 8]]),
        )],
        Some("src"),
        7,
        vec!["HBM tensor `nope` is not declared by the program"],
    ));
    let mut misaligned = AccessPattern::hbm("x", F, 0, 1, 0, vec![[1, 8]]);
    misaligned.offset = 2;
    c.push(inst_case(
        "misaligned HBM offset",
        Dma,
        vec![Op::dma_copy(sb(F, 0, 1, 1024, vec![[1, 8]]), misaligned)],
        Some("src"),
        8,
        vec!["byte offset 2 is not aligned to the f32 element size"],
    ));

    // --- uninitialized ----------------------------------------------------------------------
    c.push(inst_case(
        "uninitialized SBUF read",
        Vector,
        vec![copy(free_dst(), sb(F, 0, P, 4096, vec![[1, 8]]))],
        Some("src"),
        9,
        vec!["reads memory nothing wrote: SBUF partition 0, byte 4096"],
    ));
    c.push(inst_case(
        "uninitialized PSUM read (second partition half written)",
        Vector,
        vec![
            copy(ps(F, 0, P, 0, vec![[1, 4]]), sb(F, 0, P, 0, vec![[1, 4]])),
            copy(free_dst(), ps(F, 0, P, 0, vec![[1, 8]])),
        ],
        Some("src"),
        9,
        vec!["reads memory nothing wrote: PSUM partition 0, byte 16"],
    ));
    {
        let (mut p, inputs) = base();
        p.declare("s", F, &[8], HbmRole::Scratch);
        p.push(
            Engine::Dma,
            Op::dma_copy(
                sb(F, 0, 1, 1024, vec![[1, 8]]),
                AccessPattern::hbm("s", F, 0, 1, 0, vec![[1, 8]]),
            ),
        );
        c.push(Case {
            name: "uninitialized HBM scratch read",
            result: run(&p, &inputs),
            prefix: "instruction #1 (dma dma_copy) operand `src`: ".into(),
            kind: 9,
            says: vec!["reads memory nothing wrote: HBM tensor `s` partition 0, byte 0"],
        });
        let (mut p, inputs) = base();
        p.declare("y", F, &[P, 8], HbmRole::Output);
        p.push(
            Engine::Dma,
            Op::dma_copy(
                AccessPattern::hbm("y", F, 0, P - 1, 8, vec![[1, 8]]),
                sb(F, 0, P - 1, 0, vec![[1, 8]]),
            ),
        );
        c.push(program_case(
            "HBM output never (fully) written",
            run(&p, &inputs),
            17,
            vec!["output `y` was not fully written by the program: element 248 never was"],
        ));
    }

    // --- engines and memories ---------------------------------------------------------------
    c.push(inst_case(
        "GpSimd touching PSUM",
        Gpsimd,
        vec![copy(ps(F, 0, P, 0, vec![[1, 8]]), loaded())],
        Some("dst"),
        10,
        vec!["gpsimd cannot write PSUM"],
    ));
    c.push(inst_case(
        "Vector touching HBM",
        Vector,
        vec![copy(free_dst(), x_rows(P, 0, vec![[1, 8]]))],
        Some("src"),
        10,
        vec!["vector cannot read HBM"],
    ));
    c.push(inst_case(
        "DMA touching PSUM",
        Dma,
        vec![Op::dma_copy(ps(F, 0, P, 0, vec![[1, 8]]), x_rows(P, 0, vec![[1, 8]]))],
        Some("dst"),
        10,
        vec!["dma cannot write PSUM"],
    ));
    c.push(inst_case(
        "wrong engine (tensor_copy on TensorE)",
        Tensor,
        vec![copy(free_dst(), loaded())],
        None,
        11,
        vec!["tensor does not execute tensor_copy"],
    ));
    c.push(inst_case(
        "NC-v3 instruction on trn1 (tensor_copy on ScalarE)",
        Scalar,
        vec![copy(free_dst(), loaded())],
        None,
        12,
        vec!["tensor_copy is not available on trn1 (NeuronCore-v2)"],
    ));
    c.push(inst_case(
        "wrong engine (pow on VectorE)",
        Vector,
        vec![Op::TensorTensor(TensorTensor {
            dst: free_dst(),
            in0: loaded(),
            in1: loaded(),
            op: AluOp::Pow,
        })],
        None,
        11,
        vec!["vector does not execute tensor_tensor(pow)"],
    ));

    // --- dtypes and shapes ------------------------------------------------------------------
    c.push(inst_case(
        "bitvec op on floats",
        Vector,
        vec![
            copy(sb(DType::I32, 0, P, 2048, vec![[1, 8]]), loaded()),
            Op::TensorTensor(TensorTensor {
                dst: sb(DType::I32, 0, P, 1024, vec![[1, 8]]),
                in0: sb(DType::I32, 0, P, 2048, vec![[1, 8]]),
                in1: loaded(),
                op: AluOp::BitwiseAnd,
            }),
        ],
        Some("in1"),
        13,
        vec!["dtype f32 is not accepted here: bitvec operator bitwise_and takes integer operands only"],
    ));
    c.push(inst_case(
        "shape mismatch (tensor_tensor in1)",
        Vector,
        vec![Op::TensorTensor(TensorTensor {
            dst: free_dst(),
            in0: loaded(),
            in1: sb(F, 0, P, 0, vec![[1, 7]]),
            op: AluOp::Add,
        })],
        Some("in1"),
        14,
        vec!["shape mismatch: `dst` is [32 partitions × 8], `in1` is [32 × 7]"],
    ));
    c.push(inst_case(
        "shape mismatch (tensor_scalar per-partition operand)",
        Vector,
        vec![Op::TensorScalar(TensorScalar {
            dst: free_dst(),
            src: loaded(),
            op0: AluOp::Add,
            operand0: ScalarOperand::Tile(sb(F, 0, P, 0, vec![[1, 2]])),
            reverse0: false,
            op1: None,
            operand1: None,
            reverse1: false,
        })],
        Some("operand0"),
        14,
        vec!["per-partition scalar must be [32, 1], got [32, 2]"],
    ));
    c.push(inst_case(
        "free size limit (Vector reading 4097 elements of PSUM)",
        Vector,
        vec![copy(
            sb(DType::Bf16, 0, 1, 0, vec![[1, 4097]]),
            ps(DType::Bf16, 0, 1, 0, vec![[1, 4097]]),
        )],
        Some("src"),
        15,
        vec!["free size 4097 exceeds the limit of 4096 (elements per partition from PSUM)"],
    ));
    c.push(inst_case(
        "PSUM bank overflow (matmul output crossing 2 KiB)",
        Tensor,
        vec![Op::NcMatmul(NcMatmul {
            dst: ps(F, 0, 8, 2048 - 16, vec![[1, 8]]),
            stationary: sb(F, 0, P, 0, vec![[1, 8]]),
            moving: sb(F, 0, P, 0, vec![[1, 8]]),
            accumulate: false,
            perf_mode: trnsim::MatmulPerfMode::None,
        })],
        Some("dst"),
        16,
        vec!["crosses a PSUM bank boundary (banks are 2048 bytes)"],
    ));

    // --- invalid instructions ---------------------------------------------------------------
    {
        let (mut p, inputs) = base();
        p.push(Engine::Vector, copy(free_dst(), loaded()));
        p.instructions[1].wait = vec![0, 1];
        c.push(Case {
            name: "wait on a later instruction",
            result: run_as_is(&p, &inputs),
            prefix: "instruction #1 (vector tensor_copy): ".into(),
            kind: 17,
            says: vec!["invalid operand: waits for instruction #1, which is not earlier"],
        });
    }
    {
        // The load (#0, DMA) writes what the copy (#1, VectorE) reads, and no wait orders them.
        let (mut p, inputs) = base();
        p.push(Engine::Vector, copy(free_dst(), loaded()));
        c.push(Case {
            name: "read after write with no wait (race)",
            result: run_as_is(&p, &inputs),
            prefix: "instruction #1 (vector tensor_copy) operand `src`: ".into(),
            kind: 20,
            says: vec![
                "read-after-write race with instruction #0 (dma dma_copy on queue dma0, operand `dst`)",
                "on SBUF partitions 0..32, bytes 0..32 of each: no wait orders them",
            ],
        });
    }
    c.push(inst_case(
        "memset of a fraction into an integer dtype",
        Vector,
        vec![Op::Memset(Memset {
            dst: sb(DType::I32, 0, P, 1024, vec![[1, 8]]),
            value: 1.5,
        })],
        Some("dst"),
        17,
        vec!["invalid operand: memset of 1.5 into integer dtype i32"],
    ));
    c.push(inst_case(
        "immediate activation bias on NeuronCore-v2",
        Scalar,
        vec![Op::Activation(Activation {
            dst: free_dst(),
            func: ActFunc::Exp,
            src: loaded(),
            bias: Some(ScalarOperand::Imm(1.0)),
            scale: ScalarOperand::Imm(1.0),
            acc: AccCmd::Idle,
            reduce_res: None,
        })],
        Some("bias"),
        17,
        vec!["an immediate bias is not supported on NeuronCore-v2"],
    ));
    c.push(inst_case(
        "unsupported: int32 average on GpSimd has no exact integer form",
        Gpsimd,
        vec![
            copy(sb(DType::I32, 0, P, 2048, vec![[1, 8]]), loaded()),
            Op::TensorTensor(TensorTensor {
                dst: sb(DType::I32, 0, P, 1024, vec![[1, 8]]),
                in0: sb(DType::I32, 0, P, 2048, vec![[1, 8]]),
                in1: sb(DType::I32, 0, P, 2048, vec![[1, 8]]),
                op: AluOp::Average,
            }),
        ],
        Some("dst"),
        18,
        vec!["average has no exact integer form"],
    ));

    c.push(inst_case(
        "gather index out of range (nc_n_gather)",
        Gpsimd,
        vec![
            Op::Memset(Memset {
                dst: sb(DType::U32, 0, P, 2048, vec![[1, 4]]),
                value: 9.0,
            }),
            Op::NGather(NGather {
                dst: sb(F, 0, P, 1024, vec![[1, 4]]),
                data: loaded(),
                indices: sb(DType::U32, 0, P, 2048, vec![[1, 4]]),
            }),
        ],
        Some("indices"),
        19,
        vec!["index 9 read from partition 0 is out of range: it addresses elements 9..10 of a 8-element row"],
    ));

    // --- program-level ----------------------------------------------------------------------
    {
        let (mut p, inputs) = base();
        p.declare("x", F, &[4], HbmRole::Scratch);
        c.push(program_case(
            "duplicate declaration",
            run(&p, &inputs),
            17,
            vec!["HBM tensor `x` declared twice"],
        ));

        let (p, _) = base();
        c.push(program_case(
            "missing input",
            run(&p, &BTreeMap::new()),
            17,
            vec!["no input given for HBM tensor `x`"],
        ));

        let (p, mut inputs) = base();
        inputs.insert("x".into(), HostTensor::from_f32(&[P, 7], &vec![0.0; P * 7]));
        c.push(program_case(
            "input shape mismatch",
            run(&p, &inputs),
            14,
            vec!["shape mismatch: input `x` is f32 [32, 7], the program declares f32 [32, 8]"],
        ));

        let (p, mut inputs) = base();
        inputs.insert(
            "x".into(),
            HostTensor::from_f32_as(DType::Bf16, &[P, 8], &vec![0.0; P * 8]),
        );
        c.push(program_case(
            "input dtype mismatch",
            run(&p, &inputs),
            14,
            vec!["input `x` is bf16 [32, 8], the program declares f32 [32, 8]"],
        ));

        let (mut p, inputs) = base();
        p.target = TargetName::Trn2;
        c.push(program_case(
            "program target mismatch",
            run(&p, &inputs),
            17,
            vec!["program is for trn2, the executor simulates trn1"],
        ));

        let (p, inputs) = base();
        let small = ExecConfig {
            max_hbm_bytes: 1000,
            ..ExecConfig::default()
        };
        c.push(program_case(
            "HBM over the executor's limit",
            Executor::with_config(TargetName::Trn1, small).run(&p, &inputs),
            17,
            vec!["HBM tensors exceed the executor's limit of 1000 bytes (at `x`)"],
        ));

        let (mut p, inputs) = base();
        p.declare("huge", F, &[usize::MAX / 2, 4], HbmRole::Scratch);
        c.push(program_case(
            "HBM size overflowing usize",
            run(&p, &inputs),
            17,
            vec!["HBM tensors exceed the executor's limit"],
        ));

        let (mut p, inputs) = base();
        for _ in 0..3 {
            p.push(Engine::Vector, copy(free_dst(), loaded()));
        }
        let few = ExecConfig {
            max_instructions: 2,
            ..ExecConfig::default()
        };
        c.push(program_case(
            "too many instructions",
            Executor::with_config(TargetName::Trn1, few).run(&p, &inputs),
            17,
            vec!["4 instructions, the executor accepts at most 2"],
        ));
    }
    c
}

trait WithStep {
    fn with_partition_step(self, step: i64) -> Self;
}
impl WithStep for AccessPattern {
    fn with_partition_step(mut self, step: i64) -> Self {
        self.partition_step = step;
        self
    }
}

#[test]
fn every_case_gives_its_error_with_location() {
    let mut failures = Vec::new();
    for case in cases() {
        let err = match case.result {
            Ok(_) => {
                failures.push(format!("{}: the run succeeded", case.name));
                continue;
            }
            Err(e) => e,
        };
        let text = err.to_string();
        let mut why = Vec::new();
        if !text.starts_with(&case.prefix) {
            why.push(format!("should start with `{}`", case.prefix));
        }
        for s in &case.says {
            if !text.contains(s) {
                why.push(format!("should contain `{s}`"));
            }
        }
        if kind_index(&err.kind) != case.kind {
            why.push(format!("kind should be {}, is {:?}", NAMES[case.kind], err.kind));
        }
        // The structured fields agree with the text.
        if case.prefix.starts_with("instruction") {
            if err.index.is_none() || err.engine.is_none() || err.opcode.is_none() {
                why.push("index/engine/opcode must be set".into());
            }
        } else if err.index.is_some() || err.operand.is_some() {
            why.push("a program-level error has no index or operand".into());
        }
        if let Some(o) = &err.operand
            && !text.contains(&format!("operand `{o}`"))
        {
            why.push("operand field not in the text".into());
        }
        if !why.is_empty() {
            failures.push(format!("{}: `{text}`: {}", case.name, why.join("; ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_error_kind_is_produced_by_a_run() {
    let mut seen = [false; KINDS];
    for case in cases() {
        if let Err(e) = &case.result {
            seen[kind_index(&e.kind)] = true;
        }
    }
    let missing: Vec<&str> = (0..KINDS)
        .filter(|&k| !seen[k] && !UNREACHABLE.contains(&k))
        .map(|k| NAMES[k])
        .collect();
    assert!(missing.is_empty(), "no case produces {missing:?}");
    // Variants listed as unreachable must really be: if one becomes reachable (e.g. an
    // instruction gains a NotOnTarget check), add a case for it and drop it from UNREACHABLE.
    for k in UNREACHABLE {
        assert!(!seen[k], "{} is produced now: move it out of UNREACHABLE", NAMES[k]);
    }
}

/// `NotOnTarget` is not raised by any instruction of this version (Trn2-only instructions are
/// not modelled yet); its message format is checked directly so that it stays consistent.
#[test]
fn not_on_target_message_format() {
    let e = SimError {
        index: Some(3),
        engine: Some(Engine::Vector),
        opcode: Some("range_select"),
        operand: None,
        loc: None,
        kind: ErrorKind::NotOnTarget {
            opcode: "range_select",
            target: "trn1",
        },
    };
    assert_eq!(
        e.to_string(),
        "instruction #3 (vector range_select): range_select is not available on trn1"
    );
}

/// The first error wins: nothing after the failing instruction runs, and stats are not returned.
#[test]
fn errors_stop_the_run_at_the_failing_instruction() {
    let (mut p, inputs) = base();
    p.push(Engine::Vector, copy(free_dst(), sb(F, 0, P, 8192, vec![[1, 8]]))); // uninitialized
    p.push(Engine::Vector, copy(sb(F, 0, P, 180_224, vec![[1, 8]]), loaded())); // out of bounds
    let e = run(&p, &inputs).unwrap_err();
    assert_eq!(e.index, Some(1));
    assert!(matches!(e.kind, ErrorKind::UninitializedRead { .. }));
}

/// An instruction's `loc` (its source, e.g. an NKI kernel's file:line) is carried by its error
/// and named in the message, next to the instruction.
#[test]
fn errors_carry_the_instruction_loc() {
    let (mut p, inputs) = base();
    let i = p.push(Engine::Vector, copy(free_dst(), sb(F, 0, P, 8192, vec![[1, 8]]))); // uninitialized
    p.instructions[i].loc = Some("kernels/add.py:42".into());
    let e = run(&p, &inputs).unwrap_err();
    assert_eq!(e.loc.as_deref(), Some("kernels/add.py:42"));
    assert_eq!(e.index, Some(i));
    let text = e.to_string();
    assert!(
        text.starts_with(&format!(
            "instruction #{i} (vector tensor_copy) at kernels/add.py:42 operand `src`: "
        )),
        "{text}"
    );
    // Without a loc the message is as before.
    p.instructions[i].loc = None;
    assert!(!run(&p, &inputs).unwrap_err().to_string().contains(" at "));
}
