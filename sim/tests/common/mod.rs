//! Test rig: builds small programs around one instruction under test and runs them.
//!
//! Inputs are staged HBM → SBUF with DMA (PSUM inputs additionally through a VectorE copy),
//! the instruction under test is pushed, and operands are read back SBUF → HBM with DMA. The
//! staging area for PSUM round trips lives at the top of SBUF (`STAGING`), so tests use byte
//! offsets below it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use trnsim::*;

/// SBUF bytes per partition from which the rig stages PSUM traffic.
pub const STAGING: u64 = 160_000;

pub struct Rig {
    pub prog: Program,
    pub inputs: BTreeMap<String, HostTensor>,
    pub config: ExecConfig,
    names: usize,
    staging: u64,
}

impl Default for Rig {
    fn default() -> Self {
        Rig::new()
    }
}

/// A contiguous on-chip operand: `rows` partitions from `start`, `cols` elements from `offset`.
pub fn sb(dtype: DType, start: usize, rows: usize, offset: u64, cols: usize) -> AccessPattern {
    AccessPattern::sbuf(dtype, start, rows, offset, vec![[1, cols as i64]])
}

pub fn ps(dtype: DType, start: usize, rows: usize, offset: u64, cols: usize) -> AccessPattern {
    AccessPattern::psum(dtype, start, rows, offset, vec![[1, cols as i64]])
}

/// The same operand with other free dims.
pub fn with_free(ap: &AccessPattern, free: Vec<[i64; 2]>) -> AccessPattern {
    AccessPattern { free, ..ap.clone() }
}

/// Encodes f32 values to raw bits of `dtype` with round to nearest even.
pub fn enc(dtype: DType, vals: &[f32]) -> Vec<u32> {
    HostTensor::from_f32_as(dtype, &[vals.len()], vals).bits()
}

impl Rig {
    pub fn new() -> Self {
        Rig::on(TargetName::Trn1)
    }

    pub fn on(target: TargetName) -> Self {
        Rig {
            prog: Program::new(target),
            inputs: BTreeMap::new(),
            config: ExecConfig::default(),
            names: 0,
            staging: STAGING,
        }
    }

    fn name(&mut self, prefix: &str) -> String {
        self.names += 1;
        format!("{prefix}{}", self.names)
    }

    /// Declares an HBM input holding `bits` (raw `dtype` bits), shape `shape`.
    pub fn hbm_bits(&mut self, dtype: DType, shape: &[usize], bits: &[u32]) -> String {
        let name = self.name("in");
        let mut data = vec![0u8; bits.len() * dtype.size()];
        for (k, &b) in bits.iter().enumerate() {
            let le = b.to_le_bytes();
            data[k * dtype.size()..(k + 1) * dtype.size()].copy_from_slice(&le[..dtype.size()]);
        }
        self.prog.declare(&name, dtype, shape, HbmRole::Input);
        self.inputs.insert(
            name.clone(),
            HostTensor {
                dtype,
                shape: shape.to_vec(),
                data,
            },
        );
        name
    }

    /// Declares an HBM input with `vals` rounded to `dtype`.
    pub fn hbm(&mut self, dtype: DType, shape: &[usize], vals: &[f32]) -> String {
        self.hbm_bits(dtype, shape, &enc(dtype, vals))
    }

    /// Declares an HBM output (must be fully written by the program).
    pub fn hbm_out(&mut self, dtype: DType, shape: &[usize]) -> String {
        let name = self.name("out");
        self.prog.declare(&name, dtype, shape, HbmRole::Output);
        name
    }

    /// Places `bits` (row-major `[rows, len/rows]`) into SBUF and returns the contiguous operand.
    pub fn sbuf_bits(&mut self, dtype: DType, start: usize, rows: usize, offset: u64, bits: &[u32]) -> AccessPattern {
        let cols = bits.len() / rows;
        let t = self.hbm_bits(dtype, &[rows, cols], bits);
        let dst = sb(dtype, start, rows, offset, cols);
        self.dma(
            dst.clone(),
            AccessPattern::hbm(&t, dtype, 0, rows, cols as i64, vec![[1, cols as i64]]),
        );
        dst
    }

    /// Places `vals` (row-major `[rows, len/rows]`, rounded to `dtype`) into SBUF.
    pub fn sbuf(&mut self, dtype: DType, start: usize, rows: usize, offset: u64, vals: &[f32]) -> AccessPattern {
        self.sbuf_bits(dtype, start, rows, offset, &enc(dtype, vals))
    }

    fn stage(&mut self, dtype: DType, rows: usize, cols: usize) -> AccessPattern {
        let ap = sb(dtype, 0, rows, self.staging, cols);
        self.staging += (cols * dtype.size()) as u64;
        ap
    }

    /// Places `bits` into PSUM (through an SBUF staging copy on VectorE).
    pub fn psum_bits(&mut self, dtype: DType, start: usize, rows: usize, offset: u64, bits: &[u32]) -> AccessPattern {
        let cols = bits.len() / rows;
        let t = self.hbm_bits(dtype, &[rows, cols], bits);
        let st = AccessPattern {
            start_partition: start,
            ..self.stage(dtype, rows, cols)
        };
        self.dma(
            st.clone(),
            AccessPattern::hbm(&t, dtype, 0, rows, cols as i64, vec![[1, cols as i64]]),
        );
        let dst = ps(dtype, start, rows, offset, cols);
        self.push(
            Engine::Vector,
            Op::TensorCopy(TensorCopy {
                dst: dst.clone(),
                src: st,
            }),
        );
        dst
    }

    pub fn psum(&mut self, dtype: DType, start: usize, rows: usize, offset: u64, vals: &[f32]) -> AccessPattern {
        self.psum_bits(dtype, start, rows, offset, &enc(dtype, vals))
    }

    pub fn push(&mut self, engine: Engine, op: Op) -> usize {
        self.prog.push(engine, op)
    }

    pub fn vector(&mut self, op: Op) -> usize {
        self.push(Engine::Vector, op)
    }

    pub fn dma(&mut self, dst: AccessPattern, src: AccessPattern) -> usize {
        self.push(
            Engine::Dma,
            Op::DmaCopy(DmaCopy {
                dst,
                src,
                accumulate: false,
                indirect: None,
            }),
        )
    }

    pub fn memset(&mut self, dst: &AccessPattern, value: f64) -> usize {
        self.vector(Op::Memset(Memset {
            dst: dst.clone(),
            value,
        }))
    }

    /// Reads an on-chip operand back (partition-major, in its own dtype) into a new HBM output.
    pub fn out(&mut self, ap: &AccessPattern) -> String {
        let n = ap.free_elems();
        let src = if ap.mem == MemSpace::Psum {
            let st = AccessPattern {
                start_partition: ap.start_partition,
                ..self.stage(ap.dtype, ap.partitions, n)
            };
            self.push(
                Engine::Vector,
                Op::TensorCopy(TensorCopy {
                    dst: st.clone(),
                    src: ap.clone(),
                }),
            );
            st
        } else {
            ap.clone()
        };
        let name = self.hbm_out(ap.dtype, &[ap.partitions, n]);
        self.dma(
            AccessPattern::hbm(&name, ap.dtype, 0, ap.partitions, n as i64, vec![[1, n as i64]]),
            src,
        );
        name
    }

    pub fn run(&self) -> Result<Ran, SimError> {
        // The rig stages operands on DMA and engines without waits; the waits a parallel machine
        // needs come from the operands (as a compiler's scheduler would compute them).
        let mut prog = self.prog.clone();
        infer_waits(&mut prog);
        let ex = Executor::with_config(prog.target, self.config.clone());
        ex.run(&prog, &self.inputs).map(|r| Ran { r })
    }

    /// Runs and returns the error, failing the test if the program succeeds.
    pub fn err(&self) -> SimError {
        match self.run() {
            Ok(_) => panic!("program was expected to fail:\n{}", self.prog.to_json()),
            Err(e) => e,
        }
    }

    /// Runs, failing the test with the error message if the program fails.
    pub fn ok(&self) -> Ran {
        match self.run() {
            Ok(r) => r,
            Err(e) => panic!("program failed: {e}"),
        }
    }
}

/// A finished run.
pub struct Ran {
    pub r: RunResult,
}

impl Ran {
    pub fn f32(&self, name: &str) -> Vec<f32> {
        self.r.outputs[name].to_f32()
    }

    pub fn bits(&self, name: &str) -> Vec<u32> {
        self.r.outputs[name].bits()
    }

    /// Signed integer view of an output.
    pub fn ints(&self, name: &str) -> Vec<i64> {
        let t = &self.r.outputs[name];
        t.bits()
            .into_iter()
            .map(|b| match t.dtype {
                DType::I8 => b as u8 as i8 as i64,
                DType::I16 => b as u16 as i16 as i64,
                DType::I32 => b as i32 as i64,
                _ => b as i64,
            })
            .collect()
    }

    pub fn stats(&self) -> &Stats {
        &self.r.stats
    }
}

/// Asserts an error at instruction `index`, operand `operand` (None: any), of a kind matched by
/// `kind`.
macro_rules! assert_err {
    ($e:expr, $index:expr, $operand:expr, $pat:pat) => {{
        let e: &trnsim::SimError = &$e;
        assert_eq!(e.index, Some($index), "wrong instruction: {e}");
        let want: Option<&str> = $operand;
        if let Some(w) = want {
            assert_eq!(e.operand.as_deref(), Some(w), "wrong operand: {e}");
        }
        assert!(matches!(e.kind, $pat), "wrong error kind: {e}");
    }};
}

/// Asserts `a` and `b` are within `ulps` units in the last place (same sign, finite) or equal.
pub fn assert_ulps(a: f32, b: f32, ulps: u32, what: &str) {
    if a == b || (a.is_nan() && b.is_nan()) {
        return;
    }
    let d = (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs();
    assert!(
        a.signum() == b.signum() && d <= ulps as u64,
        "{what}: {a:e} vs {b:e} ({d} ulps apart)"
    );
}
