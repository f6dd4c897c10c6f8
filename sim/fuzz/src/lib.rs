//! Shared pieces of the trnsim fuzz targets: a small executor configuration (so that no input can
//! make the simulator allocate much), input tensors for any program, and an `arbitrary`-derived
//! description of "valid-looking" programs over small on-chip regions.

use arbitrary::{Arbitrary, Unstructured};
use std::collections::BTreeMap;
use trnsim::*;

/// HBM limit of every fuzz run: programs declaring more are refused by the executor before any
/// allocation, and the harness never builds inputs larger than this.
pub const MAX_HBM_BYTES: usize = 64 << 10;
pub const MAX_INSTRUCTIONS: usize = 64;

pub fn config(numerics: Numerics) -> ExecConfig {
    ExecConfig {
        numerics,
        max_hbm_bytes: MAX_HBM_BYTES,
        max_instructions: MAX_INSTRUCTIONS,
    }
}

/// Every value of every `Numerics` setting, one setting changed from the default at a time (the
/// default first), so a fuzz input reaches each setting's code paths. The `match` makes adding a
/// variant to a setting a compile error here until it is listed.
pub fn numerics_variants() -> Vec<Numerics> {
    let d = Numerics::default();
    let _every_variant_listed = |n: Numerics| match (
        n.rounding,
        n.denormals,
        n.nan_max_min,
        n.matmul_accumulation,
        n.activation,
    ) {
        (
            RoundingMode::NearestEven | RoundingMode::Stochastic { .. },
            Denormals::Preserve | Denormals::FlushToZero,
            NanMaxMin::Propagate | NanMaxMin::PreferNumber,
            MatmulAccumulation::Sequential | MatmulAccumulation::Pairwise,
            ActivationModel::Accurate,
        ) => (),
    };
    vec![
        d,
        Numerics {
            rounding: RoundingMode::Stochastic { seed: 1 },
            ..d
        },
        Numerics {
            denormals: Denormals::FlushToZero,
            ..d
        },
        Numerics {
            nan_max_min: NanMaxMin::PreferNumber,
            ..d
        },
        Numerics {
            matmul_accumulation: MatmulAccumulation::Pairwise,
            ..d
        },
        Numerics {
            emulate_act_copy_bias_bug: true,
            ..d
        },
    ]
}

/// Deterministic pseudo-random bytes (SplitMix64) for input tensors.
pub fn fill(seed: u64, n: usize) -> Vec<u8> {
    let mut s = seed;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(n);
    out
}

/// One input per Input declaration, or `None` when the declarations exceed the harness limit
/// (the executor then refuses the program on its own; the caller still runs it with no inputs).
pub fn inputs_for(p: &Program, seed: u64) -> Option<BTreeMap<String, HostTensor>> {
    let mut total = 0usize;
    let mut out = BTreeMap::new();
    for (k, d) in p.hbm.iter().enumerate() {
        let bytes = d.shape.iter().try_fold(d.dtype.size(), |a, &s| a.checked_mul(s))?;
        total = total.checked_add(bytes)?;
        if total > MAX_HBM_BYTES {
            return None;
        }
        if d.role == HbmRole::Input {
            let data = fill(seed ^ (k as u64) << 32, bytes);
            out.insert(
                d.name.clone(),
                HostTensor {
                    dtype: d.dtype,
                    shape: d.shape.clone(),
                    data,
                },
            );
        }
    }
    Some(out)
}

// ------------------------------------------------------------------------------------------
// Structured programs.

#[derive(Arbitrary, Debug)]
pub struct FProgram {
    pub trn2: bool,
    /// Prepend memsets that initialise the low SBUF/PSUM bytes.
    pub init: bool,
    pub numerics: FNumerics,
    pub hbm: Vec<FDecl>,
    pub insts: Vec<FInst>,
    pub seed: u64,
}

#[derive(Arbitrary, Debug)]
pub struct FNumerics {
    pub stochastic: Option<u64>,
    pub ftz: bool,
    pub prefer_number: bool,
    pub pairwise: bool,
    pub act_bug: bool,
}

#[derive(Arbitrary, Debug)]
pub struct FDecl {
    pub dtype: u8,
    pub shape: Vec<u8>,
    pub role: u8,
}

/// An access pattern, mostly small and in range, sometimes wild.
#[derive(Arbitrary, Debug)]
pub struct FAp {
    pub mem: u8,
    pub dtype: u8,
    pub start: u8,
    pub partitions: u8,
    pub partition_step: i8,
    pub offset: u16,
    pub free: Vec<(i8, u8)>,
    pub wild: Option<Wild>,
}

/// Rare out-of-range values (large sizes, steps, offsets, partitions).
#[derive(Arbitrary, Debug)]
pub struct Wild {
    pub which: u8,
    pub value: i64,
}

#[derive(Arbitrary, Debug)]
pub enum FScalar {
    Imm(i8),
    ImmF(f32),
    Tile(FAp),
}

/// One instruction: an opcode selector, an engine selector and a bag of operands from which
/// every `Op` variant takes what it needs.
#[derive(Arbitrary, Debug)]
pub struct FInst {
    pub kind: u8,
    pub engine: u8,
    pub aps: [FAp; 3],
    pub extra: Option<FAp>,
    pub s0: FScalar,
    pub s1: Option<FScalar>,
    pub alu: (u8, u8),
    pub func: u8,
    pub flags: u8,
    pub ints: [i16; 4],
    pub imm: f32,
    pub mask: Vec<u8>,
    pub wait: Vec<u8>,
}

const ALUS: [AluOp; 27] = [
    AluOp::Bypass,
    AluOp::Add,
    AluOp::Subtract,
    AluOp::Multiply,
    AluOp::Max,
    AluOp::Min,
    AluOp::IsEqual,
    AluOp::NotEqual,
    AluOp::IsGe,
    AluOp::IsGt,
    AluOp::IsLe,
    AluOp::IsLt,
    AluOp::LogicalAnd,
    AluOp::LogicalOr,
    AluOp::LogicalXor,
    AluOp::LogicalNot,
    AluOp::Abs,
    AluOp::Reciprocal,
    AluOp::Rsqrt,
    AluOp::Pow,
    AluOp::Average,
    AluOp::BitwiseAnd,
    AluOp::BitwiseOr,
    AluOp::BitwiseXor,
    AluOp::BitwiseNot,
    AluOp::ShiftLeft,
    AluOp::LogicalShiftRight,
];

const FUNCS: [ActFunc; 25] = [
    ActFunc::Copy,
    ActFunc::Square,
    ActFunc::Sigmoid,
    ActFunc::Relu,
    ActFunc::Gelu,
    ActFunc::GeluDx,
    ActFunc::GeluApproxTanh,
    ActFunc::GeluApproxSigmoid,
    ActFunc::GeluApproxSigmoidDx,
    ActFunc::Silu,
    ActFunc::SiluDx,
    ActFunc::Tanh,
    ActFunc::Softplus,
    ActFunc::Mish,
    ActFunc::Erf,
    ActFunc::ErfDx,
    ActFunc::Exp,
    ActFunc::Log,
    ActFunc::Sin,
    ActFunc::Arctan,
    ActFunc::Sqrt,
    ActFunc::Rsqrt,
    ActFunc::Reciprocal,
    ActFunc::Sign,
    ActFunc::Abs,
];

fn hbm_name(k: usize) -> String {
    format!("t{k}")
}

impl FAp {
    pub fn build(&self, n_hbm: usize) -> AccessPattern {
        let dtype = ALL_DTYPES[self.dtype as usize % ALL_DTYPES.len()];
        let mem = match self.mem % 8 {
            0..=3 => MemSpace::Sbuf,
            4 | 5 => MemSpace::Psum,
            m => MemSpace::Hbm(hbm_name(if n_hbm == 0 {
                m as usize
            } else {
                self.mem as usize % n_hbm
            })),
        };
        let on_chip = mem.is_on_chip();
        let starts = [0, 32, 64, 96];
        let mut ap = AccessPattern {
            mem,
            dtype,
            start_partition: if on_chip { starts[self.start as usize % 4] } else { 0 },
            partitions: 1 + self.partitions as usize % 128,
            partition_step: if on_chip { 0 } else { self.partition_step as i64 },
            offset: (self.offset as u64 % 2048) * dtype.size() as u64,
            free: self
                .free
                .iter()
                .take(4)
                .map(|&(s, n)| [(s % 5) as i64, (n % 17) as i64])
                .collect(),
        };
        if ap.start_partition + ap.partitions > 128 {
            ap.partitions = 128 - ap.start_partition;
        }
        if let Some(w) = &self.wild {
            match w.which % 9 {
                0 => ap.partitions = (w.value as usize) % 300,
                1 => ap.start_partition = (w.value as usize) % 200,
                2 => ap.offset = w.value as u64,
                3 => ap.partition_step = w.value,
                4 => ap.free.push([w.value % 70000, 3]),
                5 => ap.free.push([1, w.value]),
                6 => ap.free = vec![[0, 65535]; 4],
                7 => ap.offset = (w.value as u64) % (1 << 20),
                _ => ap.free.push([w.value, w.value >> 32]),
            }
        }
        ap
    }
}

impl FScalar {
    fn build(&self, n_hbm: usize) -> ScalarOperand {
        match self {
            FScalar::Imm(v) => ScalarOperand::Imm(*v as f64),
            FScalar::ImmF(v) => ScalarOperand::Imm(*v as f64),
            FScalar::Tile(ap) => {
                let mut a = ap.build(n_hbm);
                if ap.wild.is_none() {
                    a.free = vec![[1, 1]];
                }
                ScalarOperand::Tile(a)
            }
        }
    }
}

impl FInst {
    pub fn build(&self, n_hbm: usize) -> Instruction {
        let [a, b, c] = [
            self.aps[0].build(n_hbm),
            self.aps[1].build(n_hbm),
            self.aps[2].build(n_hbm),
        ];
        let d = self.extra.as_ref().map(|x| x.build(n_hbm));
        let s0 = self.s0.build(n_hbm);
        let s1 = self.s1.as_ref().map(|s| s.build(n_hbm));
        let op0 = ALUS[self.alu.0 as usize % ALUS.len()];
        let op1 = ALUS[self.alu.1 as usize % ALUS.len()];
        let f = |bit: u8| self.flags & (1 << bit) != 0;
        let ints = self.ints.map(|v| v as i64);
        let pattern: Vec<[i64; 2]> = a.free.iter().map(|d| [ints[0] % 4, d[1]]).collect();
        let acc = [AccCmd::Idle, AccCmd::Reset, AccCmd::Reduce, AccCmd::ResetReduce][(self.flags >> 4) as usize % 4];
        let cmp = [CmpOp::Equal, CmpOp::NotEqual, CmpOp::GreaterThan, CmpOp::GreaterEqual][(self.flags >> 6) as usize];
        let op = match self.kind % 34 {
            0 => Op::NcMatmul(NcMatmul {
                dst: a,
                stationary: b,
                moving: c,
                accumulate: f(0),
                perf_mode: trnsim::MatmulPerfMode::None,
            }),
            1 => Op::NcTranspose(NcTranspose { dst: a, src: b }),
            2 => Op::TensorTensor(TensorTensor {
                dst: a,
                in0: b,
                in1: c,
                op: op0,
            }),
            3 => Op::TensorScalar(TensorScalar {
                dst: a,
                src: b,
                op0,
                operand0: s0,
                reverse0: f(0),
                op1: s1.as_ref().map(|_| op1),
                operand1: s1,
                reverse1: f(1),
            }),
            4 => Op::ScalarTensorTensor(ScalarTensorTensor {
                dst: a,
                src: b,
                op0,
                operand0: s0,
                op1,
                in1: c,
                reverse0: f(0),
                reverse1: f(1),
            }),
            5 => Op::TensorReduce(TensorReduce {
                dst: a,
                src: b,
                op: op0,
                axes: ints[1] as usize % 6,
                negate: f(0),
            }),
            6 => Op::TensorTensorScan(TensorTensorScan {
                dst: a,
                in0: b,
                in1: c,
                initial: s0,
                op0,
                op1,
            }),
            7 => Op::TensorScalarReduce(TensorScalarReduce {
                dst: a,
                src: b,
                op0,
                operand0: s0,
                reduce_op: op1,
                reduce_res: c,
            }),
            8 => Op::TensorCopy(TensorCopy { dst: a, src: b }),
            9 => Op::TensorCopyPredicated(TensorCopyPredicated {
                dst: a,
                src: b,
                predicate: c,
                reverse_pred: f(0),
            }),
            10 => Op::Reciprocal(Reciprocal { dst: a, src: b }),
            11 => Op::BnStats(BnStats { dst: a, src: b }),
            12 => Op::BnAggr(BnAggr { dst: a, src: b }),
            13 => Op::Max8(Max8 { dst: a, src: b }),
            14 => Op::FindIndex8(FindIndex8 {
                dst: a,
                data: b,
                vals: c,
            }),
            15 => Op::MatchReplace8(MatchReplace8 {
                dst: a,
                data: b,
                vals: c,
                imm: self.imm as f64,
                dst_idx: d,
            }),
            16 => Op::Memset(Memset {
                dst: a,
                value: if f(0) { self.imm as f64 } else { ints[0] as f64 },
            }),
            17 => Op::SelectReduce(SelectReduce {
                dst: a,
                predicate: b,
                on_true: c,
                on_false: s0,
                reverse_pred: f(0),
                reduce_res: d,
            }),
            18 => Op::Dropout(Dropout {
                dst: a,
                src: b,
                prob: s0,
            }),
            19 => Op::Rng(Rng { dst: a }),
            20 => Op::SetRngSeed(SetRngSeed { seed: s0 }),
            21 => Op::StreamShuffle(StreamShuffle {
                dst: a,
                src: b,
                mask: self.mask.clone(),
            }),
            22 => Op::Activation(Activation {
                dst: a,
                func: FUNCS[self.func as usize % FUNCS.len()],
                src: b,
                bias: s1,
                scale: s0,
                acc,
                reduce_res: d,
            }),
            23 => Op::Iota(Iota {
                dst: a,
                offset: ints[0],
                channel_multiplier: ints[1],
                pattern,
            }),
            24 => Op::AffineSelect(AffineSelect {
                dst: a,
                on_true: b,
                on_false: self.imm as f64,
                offset: ints[0],
                channel_multiplier: ints[1],
                pattern,
                cmp,
            }),
            25 => Op::LocalGather(LocalGather {
                dst: a,
                src: b,
                index: c,
                num_elem_per_idx: ints[2] as usize % 20,
                num_valid_indices: ints[3] as usize % 40,
            }),
            26 => Op::NGather(NGather {
                dst: a,
                data: b,
                indices: c,
            }),
            27 => Op::TensorPartitionReduce(TensorPartitionReduce {
                dst: a,
                src: b,
                op: op0,
            }),
            28 | 29 => {
                let dynamic = TensorCopyDynamic {
                    dst: a,
                    src: b,
                    offset: c,
                    offset_scale: ints[0] % 9 - 4,
                };
                if self.kind % 34 == 28 {
                    Op::TensorCopyDynamicSrc(dynamic)
                } else {
                    Op::TensorCopyDynamicDst(dynamic)
                }
            }
            30 => Op::SequenceBounds(SequenceBounds { dst: a, segment_ids: b }),
            31 => Op::DmaTranspose(DmaTranspose {
                dst: a,
                src: b,
                dge_mode: [DgeMode::Unknown, DgeMode::None, DgeMode::Swdge, DgeMode::Hwdge][ints[1] as usize % 4],
                indirect: f(4).then(|| Indirect {
                    side: IndirectSide::Src,
                    index: c.clone(),
                    row_step: 1,
                    oob: OobMode::Error,
                }),
            }),
            32 => {
                let cmps = [
                    RangeCmp::Equal,
                    RangeCmp::Less,
                    RangeCmp::LessEqual,
                    RangeCmp::Greater,
                    RangeCmp::GreaterEqual,
                ];
                Op::RangeSelect(RangeSelect {
                    dst: a,
                    on_true: b,
                    comp0: cmps[ints[2] as usize % 5],
                    bound0: s0,
                    comp1: cmps[ints[3] as usize % 5],
                    bound1: s1.unwrap_or(ScalarOperand::Imm(self.imm as f64)),
                    range_start: ints[0] as f64,
                    on_false: if f(5) { f32::MIN as f64 } else { self.imm as f64 },
                    reduce_res: d,
                })
            }
            _ => Op::DmaCopy(DmaCopy {
                dst: a,
                src: b,
                accumulate: f(0),
                indirect: if f(1) {
                    Some(Indirect {
                        side: if f(2) { IndirectSide::Src } else { IndirectSide::Dst },
                        index: c,
                        row_step: ints[0] % 64,
                        oob: if f(3) { OobMode::Skip } else { OobMode::Error },
                    })
                } else {
                    None
                },
            }),
        };
        // Mostly the instruction's own engine; sometimes any engine.
        let engines = op.engines();
        let engine = if self.engine < 200 {
            engines[self.engine as usize % engines.len()]
        } else {
            trnsim::program::ALL_ENGINES[self.engine as usize % 5]
        };
        Instruction {
            engine,
            op,
            wait: self.wait.iter().take(3).map(|&w| w as u32).collect(),
            queue: None,
            loc: None,
            core: 0,
        }
    }
}

impl FProgram {
    pub fn build(&self) -> (Program, ExecConfig) {
        let target = if self.trn2 { TargetName::Trn2 } else { TargetName::Trn1 };
        let mut p = Program::new(target);
        for (k, d) in self.hbm.iter().take(4).enumerate() {
            let dtype = ALL_DTYPES[d.dtype as usize % ALL_DTYPES.len()];
            let shape: Vec<usize> = d.shape.iter().take(4).map(|&s| 1 + s as usize % 24).collect();
            let role = [HbmRole::Input, HbmRole::Output, HbmRole::Scratch][d.role as usize % 3];
            p.declare(&hbm_name(k), dtype, &shape, role);
        }
        let n = p.hbm.len();
        if self.init {
            // Initialise the first 8 KiB of every SBUF and PSUM partition (as f32 1.5) so that
            // reads succeed and the engines' arithmetic runs on data, not only their checks.
            for (e, mem) in [(Engine::Vector, MemSpace::Sbuf), (Engine::Vector, MemSpace::Psum)] {
                let dst = AccessPattern {
                    mem,
                    dtype: DType::F32,
                    start_partition: 0,
                    partitions: 128,
                    partition_step: 0,
                    offset: 0,
                    free: vec![[1, 2048]],
                };
                p.push(e, Op::Memset(Memset { dst, value: 1.5 }));
            }
        }
        for i in self.insts.iter().take(MAX_INSTRUCTIONS - 2) {
            p.instructions.push(i.build(n));
        }
        let nm = &self.numerics;
        let numerics = Numerics {
            rounding: match nm.stochastic {
                Some(seed) => RoundingMode::Stochastic { seed },
                None => RoundingMode::NearestEven,
            },
            denormals: if nm.ftz {
                Denormals::FlushToZero
            } else {
                Denormals::Preserve
            },
            nan_max_min: if nm.prefer_number {
                NanMaxMin::PreferNumber
            } else {
                NanMaxMin::Propagate
            },
            matmul_accumulation: if nm.pairwise {
                MatmulAccumulation::Pairwise
            } else {
                MatmulAccumulation::Sequential
            },
            activation: ActivationModel::Accurate,
            emulate_act_copy_bias_bug: nm.act_bug,
            mx_element_rounding: Default::default(),
        };
        (p, config(numerics))
    }
}

/// Runs a program on its own target with the harness limits; any panic is a bug.
pub fn run(p: &Program, cfg: ExecConfig, seed: u64) {
    let inputs = inputs_for(p, seed).unwrap_or_default();
    let ex = Executor::with_config(p.target, cfg);
    if let Ok(r) = ex.run(p, &inputs) {
        for t in r.outputs.values() {
            let _ = t.to_f32();
        }
    }
}

/// Parses structured fuzz input (also used by the replay test of the corpus, if any).
pub fn structured(data: &[u8]) -> Option<(Program, ExecConfig, u64)> {
    let mut u = Unstructured::new(data);
    let fp = FProgram::arbitrary(&mut u).ok()?;
    let (p, cfg) = fp.build();
    Some((p, cfg, fp.seed))
}
