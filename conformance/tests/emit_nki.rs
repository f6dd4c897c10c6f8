//! The NKI emitter (`trnconf::emit_nki`): snapshots of emitted kernels, a Python parse of every
//! kernel, and a bit-exact comparison of each kernel run through the numpy stand-in
//! (`conformance/pyexec/nki_standin`) against the simulator's outputs on the same inputs.
//!
//! Python: `$TRNCONF_PYTHON`, else `./.venv/bin/python`, else `python3` — the first that
//! imports numpy. If none does, the stand-in checks fail when `CI` is set and are skipped (with a
//! loud message) otherwise. Parsing needs only `python3`.
//! Snapshots live in `tests/snapshots/emit_nki/` (a subdirectory: tests/golden.rs treats every
//! `.snap` directly in `tests/snapshots/` as an op snapshot).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use trnconf::case::{OpCall, TensorMeta, Value};
use trnconf::emit_nki::{self, EmitError};
use trnconf::fixture::TempDir;
use trnconf::lower::{LowerRequest, lower_request};
use trnconf::tensor::TorchDType;
use trnsim::{
    AccCmd, AccessPattern, ActFunc, Activation, AluOp, DType, DmaCopy, Engine, Executor, HbmRole, HostTensor, Iota,
    Memset, NcMatmul, NcTranspose, Op, Program, Reciprocal, ScalarOperand, ScalarTensorTensor, TargetName, TensorCopy,
    TensorPartitionReduce, TensorReduce, TensorScalar, TensorTensor,
};

// ---------------------------------------------------------------------------------------------
// Programs.

/// Lowers a binary op `input.0 op input.1 -> output.0` through trnconf's lowering.
fn lower_binary(op: &str, dtype: TorchDType, a: &[usize], b: &[usize], out: &[usize]) -> Program {
    let mut tensors = BTreeMap::new();
    tensors.insert(
        "input.0".to_string(),
        TensorMeta {
            dtype,
            shape: a.to_vec(),
            strides: None,
            storage_offset: None,
        },
    );
    tensors.insert(
        "input.1".to_string(),
        TensorMeta {
            dtype,
            shape: b.to_vec(),
            strides: None,
            storage_offset: None,
        },
    );
    tensors.insert(
        "output.0".to_string(),
        TensorMeta {
            dtype,
            shape: out.to_vec(),
            strides: None,
            storage_offset: None,
        },
    );
    let call = OpCall {
        args: vec![Value::Tensor("input.0".into()), Value::Tensor("input.1".into())],
        kwargs: BTreeMap::new(),
    };
    let outputs = vec![Value::Tensor("output.0".into())];
    let req = LowerRequest {
        op,
        call: &call,
        tensors: &tensors,
        outputs: &trnconf::lower::OutputSlot::of(&outputs),
    };
    lower_request(&req, TargetName::Trn1).expect("lowers").program
}

fn sbuf(dtype: DType, start: usize, partitions: usize, offset: u64, free: Vec<[i64; 2]>) -> AccessPattern {
    AccessPattern::sbuf(dtype, start, partitions, offset, free)
}

fn hbm_rows(name: &str, dtype: DType, rows: usize, cols: usize) -> AccessPattern {
    AccessPattern {
        mem: trnsim::MemSpace::Hbm(name.into()),
        dtype,
        start_partition: 0,
        partitions: rows,
        partition_step: cols as i64,
        offset: 0,
        free: vec![[1, cols as i64]],
    }
}

/// TensorE + ScalarE + VectorE: `y = exp(0.5·(aᵀb + aᵀb) + bias)` (two matmuls, the second
/// accumulating), its row sums through the activation accumulator, and the max of each group
/// of 8 columns of y (a two-free-dim `tensor_reduce`).
fn matmul_activation_reduce() -> Program {
    let (k, m, n) = (64usize, 32usize, 48usize);
    let mut p = Program::new(TargetName::Trn1);
    p.declare("a", DType::Bf16, &[k, m], HbmRole::Input);
    p.declare("b", DType::Bf16, &[k, n], HbmRole::Input);
    p.declare("bias", DType::F32, &[m, 1], HbmRole::Input);
    p.declare("y", DType::Bf16, &[m, n], HbmRole::Output);
    p.declare("row_sum", DType::F32, &[m, 1], HbmRole::Output);
    p.declare("group_max", DType::F32, &[m, 6], HbmRole::Output);
    let a = sbuf(DType::Bf16, 0, k, 0, vec![[1, m as i64]]);
    let b = sbuf(DType::Bf16, 0, k, 1024, vec![[1, n as i64]]);
    let bias = sbuf(DType::F32, 0, m, 2048, vec![[1, 1]]);
    let y = sbuf(DType::Bf16, 0, m, 4096, vec![[1, n as i64]]);
    let sum = sbuf(DType::F32, 0, m, 8192, vec![[1, 1]]);
    let gmax = sbuf(DType::F32, 0, m, 8448, vec![[1, 6]]);
    let acc = AccessPattern::psum(DType::F32, 0, m, 2048, vec![[1, n as i64]]);
    let dma = |p: &mut Program, dst: AccessPattern, src: AccessPattern| {
        p.push(
            Engine::Dma,
            Op::DmaCopy(DmaCopy {
                dst,
                src,
                accumulate: false,
                indirect: None,
            }),
        );
    };
    dma(&mut p, a.clone(), hbm_rows("a", DType::Bf16, k, m));
    dma(&mut p, b.clone(), hbm_rows("b", DType::Bf16, k, n));
    dma(&mut p, bias.clone(), hbm_rows("bias", DType::F32, m, 1));
    for accumulate in [false, true] {
        p.push(
            Engine::Tensor,
            Op::NcMatmul(NcMatmul {
                dst: acc.clone(),
                stationary: a.clone(),
                moving: b.clone(),
                accumulate,
                perf_mode: trnsim::MatmulPerfMode::None,
            }),
        );
    }
    p.push(
        Engine::Scalar,
        Op::Activation(Activation {
            dst: y.clone(),
            func: ActFunc::Exp,
            src: acc.clone(),
            bias: Some(ScalarOperand::Tile(bias.clone())),
            scale: ScalarOperand::Imm(0.5),
            acc: AccCmd::ResetReduce,
            reduce_res: Some(sum.clone()),
        }),
    );
    p.push(
        Engine::Vector,
        Op::TensorReduce(TensorReduce {
            dst: gmax.clone(),
            src: sbuf(DType::Bf16, 0, m, 4096, vec![[8, 6], [1, 8]]),
            op: AluOp::Max,
            axes: 1,
            negate: false,
        }),
    );
    dma(&mut p, hbm_rows("y", DType::Bf16, m, n), y);
    dma(&mut p, hbm_rows("row_sum", DType::F32, m, 1), sum);
    dma(&mut p, hbm_rows("group_max", DType::F32, m, 6), gmax);
    p
}

/// VectorE/GpSimdE/TensorE odds and ends: iota, memset, casts, per-partition tile operands,
/// scalar_tensor_tensor, reciprocal, both transposes, a cross-partition reduction, a strided
/// (every other element) view and an accumulating DMA.
fn vector_gpsimd_mix() -> Program {
    let (rows, cols) = (32usize, 16usize);
    let mut p = Program::new(TargetName::Trn1);
    p.declare("x", DType::F32, &[rows, cols], HbmRole::Input);
    p.declare("s", DType::F32, &[rows, 1], HbmRole::Input);
    p.declare("out.main", DType::F16, &[rows, cols], HbmRole::Output);
    p.declare("out.t", DType::F32, &[cols, rows], HbmRole::Output);
    p.declare("out.colsum", DType::F32, &[1, cols], HbmRole::Output);
    p.declare("out.iota", DType::Bf16, &[rows, 8], HbmRole::Output);
    let x = sbuf(DType::F32, 0, rows, 0, vec![[1, cols as i64]]);
    let s = sbuf(DType::F32, 0, rows, 128, vec![[1, 1]]);
    let io = sbuf(DType::Bf16, 0, rows, 256, vec![[1, 8]]);
    let t1 = sbuf(DType::F32, 0, rows, 512, vec![[1, cols as i64]]);
    let t2 = sbuf(DType::F32, 0, rows, 1024, vec![[1, cols as i64]]);
    let h = sbuf(DType::F16, 0, rows, 1536, vec![[1, cols as i64]]);
    let tr = sbuf(DType::F32, 0, cols, 2048, vec![[1, rows as i64]]);
    let tv = sbuf(DType::F32, 0, cols, 2560, vec![[1, rows as i64]]);
    let cs = sbuf(DType::F32, 0, 1, 3072, vec![[1, cols as i64]]);
    let ps = AccessPattern::psum(DType::F32, 0, cols, 0, vec![[1, rows as i64]]);
    let dma = |p: &mut Program, dst: AccessPattern, src: AccessPattern, accumulate: bool| {
        p.push(
            Engine::Dma,
            Op::DmaCopy(DmaCopy {
                dst,
                src,
                accumulate,
                indirect: None,
            }),
        );
    };
    let v = Engine::Vector;
    dma(&mut p, x.clone(), hbm_rows("x", DType::F32, rows, cols), false);
    dma(&mut p, s.clone(), hbm_rows("s", DType::F32, rows, 1), false);
    p.push(
        Engine::Gpsimd,
        Op::Iota(Iota {
            dst: io.clone(),
            offset: 250,
            channel_multiplier: 3,
            pattern: vec![[2, 4], [1, 2]],
        }),
    );
    p.push(
        v,
        Op::Memset(Memset {
            dst: t2.clone(),
            value: 0.1,
        }),
    );
    // t1 = (x - s) * 3 ; t2[even] = x[even] (strided views)
    p.push(
        v,
        Op::TensorScalar(TensorScalar {
            dst: t1.clone(),
            src: x.clone(),
            op0: AluOp::Subtract,
            operand0: ScalarOperand::Tile(s.clone()),
            reverse0: false,
            op1: Some(AluOp::Multiply),
            operand1: Some(ScalarOperand::Imm(3.0)),
            reverse1: false,
        }),
    );
    p.push(
        Engine::Gpsimd,
        Op::TensorCopy(TensorCopy {
            dst: sbuf(DType::F32, 0, rows, 1024, vec![[2, cols as i64 / 2]]),
            src: sbuf(DType::F32, 0, rows, 0, vec![[2, cols as i64 / 2]]),
        }),
    );
    // t2 = max(t2, 1/(t1 - 0.5)) via scalar_tensor_tensor and reciprocal
    p.push(
        v,
        Op::Reciprocal(Reciprocal {
            dst: t1.clone(),
            src: t1.clone(),
        }),
    );
    p.push(
        v,
        Op::ScalarTensorTensor(ScalarTensorTensor {
            dst: t2.clone(),
            src: t1.clone(),
            op0: AluOp::Subtract,
            operand0: ScalarOperand::Imm(0.5),
            op1: AluOp::Max,
            in1: t2.clone(),
            reverse0: true,
            reverse1: false,
        }),
    );
    p.push(
        v,
        Op::TensorCopy(TensorCopy {
            dst: h.clone(),
            src: t2.clone(),
        }),
    );
    p.push(
        v,
        Op::TensorTensor(TensorTensor {
            dst: t1.clone(),
            in0: t2.clone(),
            in1: x.clone(),
            op: AluOp::Multiply,
        }),
    );
    p.push(
        Engine::Tensor,
        Op::NcTranspose(NcTranspose {
            dst: ps.clone(),
            src: t1.clone(),
        }),
    );
    p.push(
        v,
        Op::NcTranspose(NcTranspose {
            dst: tv.clone(),
            src: x.clone(),
        }),
    );
    p.push(
        v,
        Op::TensorTensor(TensorTensor {
            dst: tr.clone(),
            in0: ps,
            in1: tv,
            op: AluOp::Add,
        }),
    );
    p.push(
        Engine::Gpsimd,
        Op::TensorPartitionReduce(TensorPartitionReduce {
            dst: cs.clone(),
            src: x,
            op: AluOp::Add,
        }),
    );
    dma(&mut p, hbm_rows("out.main", DType::F16, rows, cols), h, false);
    dma(&mut p, hbm_rows("out.t", DType::F32, cols, rows), tr.clone(), false);
    dma(&mut p, hbm_rows("out.t", DType::F32, cols, rows), tr, true);
    dma(&mut p, hbm_rows("out.colsum", DType::F32, 1, cols), cs, false);
    dma(&mut p, hbm_rows("out.iota", DType::Bf16, rows, 8), io, false);
    p
}

/// VectorE statistics, selection, scans and the random generator: select_reduce, bn_stats,
/// bn_aggr, max8, tensor_tensor_scan, tensor_scalar_reduce, affine_select,
/// tensor_copy_predicated, set_rng_seed, rng, dropout.
fn vector_stats_select() -> Program {
    let (rows, cols) = (32usize, 16i64);
    let mut p = Program::new(TargetName::Trn1);
    p.declare("x", DType::F32, &[rows, cols as usize], HbmRole::Input);
    let x = sbuf(DType::F32, 0, rows, 0, vec![[1, cols]]);
    let pred = sbuf(DType::U8, 0, rows, 256, vec![[1, cols]]);
    let at = |dtype: DType, off: u64, n: i64| sbuf(dtype, 0, rows, off, vec![[1, n]]);
    let v = Engine::Vector;
    p.push(
        Engine::Dma,
        Op::DmaCopy(DmaCopy {
            dst: x.clone(),
            src: hbm_rows("x", DType::F32, rows, cols as usize),
            accumulate: false,
            indirect: None,
        }),
    );
    p.push(
        v,
        Op::TensorScalar(TensorScalar {
            dst: pred.clone(),
            src: x.clone(),
            op0: AluOp::IsGt,
            operand0: ScalarOperand::Imm(0.0),
            reverse0: false,
            op1: None,
            operand1: None,
            reverse1: false,
        }),
    );
    let mut outs: Vec<(&str, AccessPattern)> = Vec::new();
    let (sr, rr) = (at(DType::F32, 512, cols), at(DType::F32, 1024, 1));
    p.push(
        v,
        Op::SelectReduce(trnsim::SelectReduce {
            dst: sr.clone(),
            predicate: pred.clone(),
            on_true: x.clone(),
            on_false: ScalarOperand::Imm(-1e30),
            reverse_pred: false,
            reduce_res: Some(rr.clone()),
        }),
    );
    outs.extend([("sel", sr.clone()), ("sel_max", rr)]);
    let (st, ag, m8) = (
        at(DType::F32, 1152, 6),
        at(DType::F32, 1280, 2),
        at(DType::Bf16, 1344, 8),
    );
    p.push(
        v,
        Op::BnStats(trnsim::BnStats {
            dst: st.clone(),
            src: x.clone(),
        }),
    );
    p.push(
        v,
        Op::BnAggr(trnsim::BnAggr {
            dst: ag.clone(),
            src: st.clone(),
        }),
    );
    p.push(
        v,
        Op::Max8(trnsim::Max8 {
            dst: m8.clone(),
            src: x.clone(),
        }),
    );
    outs.extend([("stats", st), ("mean_var", ag), ("top8", m8)]);
    let sc = at(DType::F32, 1536, cols);
    p.push(
        v,
        Op::TensorTensorScan(trnsim::TensorTensorScan {
            dst: sc.clone(),
            in0: x.clone(),
            in1: x.clone(),
            initial: ScalarOperand::Imm(1.0),
            op0: AluOp::Multiply,
            op1: AluOp::Add,
        }),
    );
    let (tsr, tsrr) = (at(DType::F16, 2048, cols), at(DType::F32, 2112, 1));
    p.push(
        v,
        Op::TensorScalarReduce(trnsim::TensorScalarReduce {
            dst: tsr.clone(),
            src: x.clone(),
            op0: AluOp::Multiply,
            operand0: ScalarOperand::Imm(2.5),
            reduce_op: AluOp::Max,
            reduce_res: tsrr.clone(),
        }),
    );
    outs.extend([("scan", sc), ("scaled", tsr), ("scaled_max", tsrr)]);
    let asel = at(DType::F32, 2176, cols);
    p.push(
        Engine::Gpsimd,
        Op::AffineSelect(trnsim::AffineSelect {
            dst: asel.clone(),
            on_true: x.clone(),
            on_false: -1e39,
            offset: 0,
            channel_multiplier: 1,
            pattern: vec![[-1, cols]],
            cmp: trnsim::CmpOp::GreaterEqual,
        }),
    );
    p.push(
        v,
        Op::TensorCopyPredicated(trnsim::TensorCopyPredicated {
            dst: asel.clone(),
            src: sr,
            predicate: pred,
            reverse_pred: true,
        }),
    );
    outs.push(("causal", asel));
    let (rn, dr) = (at(DType::U16, 2304, 4), at(DType::F32, 2368, cols));
    p.push(
        v,
        Op::SetRngSeed(trnsim::SetRngSeed {
            seed: ScalarOperand::Imm(7.0),
        }),
    );
    p.push(v, Op::Rng(trnsim::Rng { dst: rn.clone() }));
    p.push(
        v,
        Op::Dropout(trnsim::Dropout {
            dst: dr.clone(),
            src: x,
            prob: ScalarOperand::Imm(0.25),
        }),
    );
    outs.extend([("random", rn), ("dropped", dr)]);
    for (name, ap) in outs {
        let n = ap.free_elems();
        p.declare(name, ap.dtype, &[rows, n], HbmRole::Output);
        p.push(
            Engine::Dma,
            Op::DmaCopy(DmaCopy {
                dst: hbm_rows(name, ap.dtype, rows, n),
                src: ap,
                accumulate: false,
                indirect: None,
            }),
        );
    }
    p
}

/// Indirect DMA: a gather of table rows by an index tile (one index out of range, skipped), then
/// a scatter-add of those rows into an output with a duplicated index (rows add in order) and an
/// out-of-range one (skipped).
fn gather_scatter() -> Program {
    let (rows, n) = (6usize, 8i64);
    let mut p = Program::new(TargetName::Trn1);
    p.declare("table", DType::F32, &[10, n as usize], HbmRole::Input);
    p.declare("idx", DType::I32, &[rows, 1], HbmRole::Input);
    p.declare("out", DType::Bf16, &[4, n as usize], HbmRole::Output);
    let idx = sbuf(DType::I32, 0, rows, 0, vec![[1, 1]]);
    let g = sbuf(DType::F32, 0, rows, 64, vec![[1, n]]);
    let dma = |p: &mut Program, dst, src, accumulate, indirect| {
        p.push(
            Engine::Dma,
            Op::DmaCopy(DmaCopy {
                dst,
                src,
                accumulate,
                indirect,
            }),
        );
    };
    dma(&mut p, idx.clone(), hbm_rows("idx", DType::I32, rows, 1), false, None);
    p.push(
        Engine::Vector,
        Op::Memset(Memset {
            dst: g.clone(),
            value: -1.0,
        }),
    );
    let skip = |side| {
        Some(trnsim::Indirect {
            side,
            index: idx.clone(),
            row_step: n,
            oob: trnsim::OobMode::Skip,
        })
    };
    dma(
        &mut p,
        g.clone(),
        hbm_rows("table", DType::F32, 1, n as usize),
        false,
        skip(trnsim::IndirectSide::Src),
    );
    let out = sbuf(DType::Bf16, 0, 4, 128, vec![[1, n]]);
    p.push(
        Engine::Vector,
        Op::Memset(Memset {
            dst: out.clone(),
            value: 0.5,
        }),
    );
    dma(&mut p, hbm_rows("out", DType::Bf16, 4, n as usize), out, false, None);
    dma(
        &mut p,
        hbm_rows("out", DType::Bf16, 1, n as usize),
        g,
        true,
        skip(trnsim::IndirectSide::Dst),
    );
    p
}

/// Indirect DMAs whose rows are not rows of their tensor (`emit_nki`'s `indirect_rows`):
/// * `a`: a gather of 6-element windows at an element offset (row step 8, offset 2: pieces of 2),
///   `oob: skip`, with an index whose window is only partly in the tensor (skipped whole) and one
///   whose int32 row number `index·4 + 1` wraps back into the tensor (still skipped);
/// * `b`: 200 single elements at offset 1, row step 3, from an int16 index tile holding all 200
///   in one partition (two DMAs of at most 128), into HBM;
/// * `e`: single elements at offset 5 (row step 1: no mask needed), `oob: skip`, with the last
///   element, one past it, −5, −6 and `i32::MAX` (whose `index + 5` wraps negative);
/// * `c`/`d`: scatters of overlapping windows (row step 2, 6 elements, offset 1), one adding and
///   one overwriting, where the program's row order decides shared elements; one partly-out
///   window is skipped.
fn indirect_not_rows() -> Program {
    let mut p = Program::new(TargetName::Trn1);
    p.declare("table", DType::F32, &[10, 6], HbmRole::Input);
    p.declare("ia", DType::I32, &[5, 1], HbmRole::Input);
    p.declare("ib", DType::I16, &[1, 200], HbmRole::Input);
    p.declare("ic", DType::I32, &[5, 1], HbmRole::Input);
    p.declare("ie", DType::I32, &[5, 1], HbmRole::Input);
    p.declare("src", DType::F32, &[5, 6], HbmRole::Input);
    p.declare("a", DType::F32, &[5, 6], HbmRole::Output);
    p.declare("b", DType::F32, &[200], HbmRole::Output);
    p.declare("c", DType::F32, &[40], HbmRole::Output);
    p.declare("d", DType::F32, &[40], HbmRole::Output);
    p.declare("e", DType::F32, &[5, 1], HbmRole::Output);
    let dma = |p: &mut Program, dst, src, accumulate, indirect| {
        p.push(
            Engine::Dma,
            Op::DmaCopy(DmaCopy {
                dst,
                src,
                accumulate,
                indirect,
            }),
        );
    };
    let ind = |index: &AccessPattern, side, row_step, oob| {
        Some(trnsim::Indirect {
            side,
            index: index.clone(),
            row_step,
            oob,
        })
    };
    use trnsim::{IndirectSide, OobMode};
    // a: gather, skip.
    let ia = sbuf(DType::I32, 0, 5, 0, vec![[1, 1]]);
    dma(&mut p, ia.clone(), hbm_rows("ia", DType::I32, 5, 1), false, None);
    let ga = sbuf(DType::F32, 0, 5, 16, vec![[1, 6]]);
    p.push(
        Engine::Vector,
        Op::Memset(Memset {
            dst: ga.clone(),
            value: -1.0,
        }),
    );
    let win = AccessPattern::hbm("table", DType::F32, 2, 1, 0, vec![[1, 6]]);
    dma(
        &mut p,
        ga.clone(),
        win,
        false,
        ind(&ia, IndirectSide::Src, 8, OobMode::Skip),
    );
    dma(&mut p, hbm_rows("a", DType::F32, 5, 6), ga, false, None);
    // b: 200 indices in one partition, HBM to HBM.
    let ib = sbuf(DType::I16, 0, 1, 64, vec![[1, 200]]);
    dma(&mut p, ib.clone(), hbm_rows("ib", DType::I16, 1, 200), false, None);
    let one = AccessPattern::hbm("table", DType::F32, 1, 1, 0, vec![[1, 1]]);
    dma(
        &mut p,
        hbm_rows("b", DType::F32, 200, 1),
        one,
        false,
        ind(&ib, IndirectSide::Src, 3, OobMode::Error),
    );
    // e: single elements at an offset.
    let ie = sbuf(DType::I32, 0, 5, 8, vec![[1, 1]]);
    dma(&mut p, ie.clone(), hbm_rows("ie", DType::I32, 5, 1), false, None);
    let ge = sbuf(DType::F32, 0, 5, 48, vec![[1, 1]]);
    p.push(
        Engine::Vector,
        Op::Memset(Memset {
            dst: ge.clone(),
            value: -1.0,
        }),
    );
    let el = AccessPattern::hbm("table", DType::F32, 5, 1, 0, vec![[1, 1]]);
    dma(
        &mut p,
        ge.clone(),
        el,
        false,
        ind(&ie, IndirectSide::Src, 1, OobMode::Skip),
    );
    dma(&mut p, hbm_rows("e", DType::F32, 5, 1), ge, false, None);
    // c, d: scatters of overlapping windows.
    let ic = sbuf(DType::I32, 0, 5, 4, vec![[1, 1]]);
    dma(&mut p, ic.clone(), hbm_rows("ic", DType::I32, 5, 1), false, None);
    let sc = sbuf(DType::F32, 0, 5, 512, vec![[1, 6]]);
    dma(&mut p, sc.clone(), hbm_rows("src", DType::F32, 5, 6), false, None);
    let init = sbuf(DType::F32, 0, 1, 1024, vec![[1, 40]]);
    p.push(
        Engine::Vector,
        Op::Memset(Memset {
            dst: init.clone(),
            value: 0.25,
        }),
    );
    for (name, accumulate) in [("c", true), ("d", false)] {
        dma(&mut p, hbm_rows(name, DType::F32, 1, 40), init.clone(), false, None);
        let w = AccessPattern::hbm(name, DType::F32, 1, 1, 0, vec![[1, 6]]);
        dma(
            &mut p,
            w,
            sc.clone(),
            accumulate,
            ind(&ic, IndirectSide::Dst, 2, OobMode::Skip),
        );
    }
    p
}

// ---------------------------------------------------------------------------------------------
// Inputs.

/// Deterministic values in [-range, range) (an LCG), with a few special values mixed in when
/// `specials` (−0, tiny, huge).
fn values(n: usize, seed: u64, range: f64, specials: bool) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|i| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            if specials && i % 17 == 3 {
                return [-0.0f32, 1e-40, 3e38, -7.5, 0.0][(i / 17) % 5];
            }
            ((u * 2.0 - 1.0) * range) as f32
        })
        .collect()
}

/// One input per Input tensor of the program, from [`values`].
fn inputs_for(p: &Program, seed: u64, range: f64, specials: bool) -> BTreeMap<String, HostTensor> {
    p.hbm
        .iter()
        .filter(|d| d.role == HbmRole::Input)
        .enumerate()
        .map(|(k, d)| {
            let n: usize = d.shape.iter().product();
            let vals = values(n, seed + k as u64, range, specials);
            (d.name.clone(), HostTensor::from_f32_as(d.dtype, &d.shape, &vals))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Python.

fn pyexec_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("pyexec")
}

/// A Python that imports numpy: `$TRNCONF_PYTHON`, `./.venv/bin/python`, `python3`
/// ([`trnconf::python_candidates`]).
fn numpy_python() -> Option<&'static str> {
    static PY: OnceLock<Option<String>> = OnceLock::new();
    PY.get_or_init(|| {
        trnconf::python_candidates().into_iter().find(|py| {
            Command::new(py)
                .args(["-c", "import numpy"])
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
        })
    })
    .as_deref()
}

/// The Python for the stand-in, or `None` (skip) — panics under `CI` when there is none.
fn standin_python(test: &str) -> Option<&'static str> {
    let py = numpy_python();
    if py.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!(
                "{test}: no Python with numpy (tried $TRNCONF_PYTHON, ./.venv/bin/python, python3); CI requires one"
            );
        }
        eprintln!(
            "\n!!!!! {test}: SKIPPING the numpy stand-in check: no Python with numpy \
             (set TRNCONF_PYTHON; pip install -r conformance/pyexec/requirements.txt) !!!!!\n"
        );
    }
    py
}

/// Parses `src` with Python's `ast` (python3 on PATH).
fn assert_parses(name: &str, src: &str) {
    let dir = TempDir::new("emit-nki-parse");
    let path = dir.path().join(format!("{name}.py"));
    std::fs::write(&path, src).unwrap();
    let py = numpy_python().unwrap_or("python3");
    let out = Command::new(py)
        .args(["-c", "import ast,sys; ast.parse(open(sys.argv[1]).read())"])
        .arg(&path)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{name}: emitted kernel is not valid Python:\n{}\n{src}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the emitted kernel on the stand-in and returns its outputs.
fn run_standin(
    py: &str,
    name: &str,
    program: &Program,
    kernel: &str,
    inputs: &BTreeMap<String, HostTensor>,
) -> BTreeMap<String, HostTensor> {
    let dir = TempDir::new("emit-nki-run");
    let kpath = dir.path().join(format!("{name}.py"));
    let ipath = dir.path().join("inputs.safetensors");
    let opath = dir.path().join("outputs.safetensors");
    std::fs::write(&kpath, kernel).unwrap();
    std::fs::write(&ipath, emit_nki::to_safetensors(inputs).unwrap()).unwrap();
    let out = Command::new(py)
        .args(["-m", "nki_standin"])
        .args([&kpath, &ipath, &opath])
        .env("PYTHONPATH", pyexec_dir())
        .output()
        .expect("run the stand-in");
    assert!(
        out.status.success(),
        "{name}: stand-in failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<(String, DType)> = program
        .hbm
        .iter()
        .filter(|d| d.role == HbmRole::Output)
        .map(|d| (d.name.clone(), d.dtype))
        .collect();
    emit_nki::from_safetensors(&std::fs::read(&opath).unwrap(), &names).unwrap()
}

/// Asserts the stand-in's outputs are bit-identical to the simulator's.
fn assert_bit_identical(name: &str, sim: &BTreeMap<String, HostTensor>, py: &BTreeMap<String, HostTensor>) {
    if let Err(e) = bit_identical(name, sim, py, false) {
        panic!("{e}");
    }
}

/// Whether the stand-in's outputs are bit-identical to the simulator's (else the first
/// difference). With `any_nan`, two NaNs of a float dtype count as equal whatever their sign and
/// payload: which operand's NaN an fp32 add/multiply of two NaNs returns is not specified by
/// trnsim (its Rust `a * b` follows whatever operand order LLVM's vectorised code uses).
fn bit_identical(
    name: &str,
    sim: &BTreeMap<String, HostTensor>,
    py: &BTreeMap<String, HostTensor>,
    any_nan: bool,
) -> Result<(), String> {
    if sim.keys().ne(py.keys()) {
        return Err(format!("{name}: output names {:?} vs {:?}", sim.keys(), py.keys()));
    }
    for (t, s) in sim {
        let p = &py[t];
        if (s.dtype, &s.shape) != (p.dtype, &p.shape) {
            return Err(format!(
                "{name}: `{t}` is {} {:?} vs {} {:?}",
                s.dtype, s.shape, p.dtype, p.shape
            ));
        }
        if s.data != p.data {
            let size = s.dtype.size();
            let (sf, pf) = (s.to_f32(), p.to_f32());
            let differs = |i: usize| {
                s.data[i * size..(i + 1) * size] != p.data[i * size..(i + 1) * size]
                    && !(any_nan && s.dtype.is_float() && sf[i].is_nan() && pf[i].is_nan())
            };
            let Some(i) = (0..s.num_elems()).find(|&i| differs(i)) else {
                continue;
            };
            let (sv, pv) = (sf[i], pf[i]);
            let count = (0..s.num_elems()).filter(|&i| differs(i)).count();
            return Err(format!(
                "{name}: `{t}` differs in {count} elements; first at flat index {i}: sim {sv:e} ({:02x?}) vs stand-in {pv:e} ({:02x?})",
                &s.data[i * size..(i + 1) * size],
                &p.data[i * size..(i + 1) * size]
            ));
        }
    }
    Ok(())
}

/// Emits, snapshots, parses, and (with numpy) runs the kernel against the simulator.
fn check(name: &str, program: &Program, inputs: &BTreeMap<String, HostTensor>, snapshot: bool) -> String {
    let kernel = emit_nki::emit(program).unwrap_or_else(|e| panic!("{name}: {e}"));
    if snapshot {
        let mut settings = insta::Settings::clone_current();
        settings.set_snapshot_path("snapshots/emit_nki");
        settings.set_prepend_module_to_snapshot(true);
        settings.set_omit_expression(true);
        settings.set_description(format!(
            "NKI kernel emitted for `{name}` (trnconf::emit_nki, docs/hardware.md)"
        ));
        settings.bind(|| insta::assert_snapshot!(name, kernel));
    }
    assert_parses(name, &kernel);
    // The hand-built programs carry no waits: the simulator's race detector needs them (the
    // emitted kernel does not: NKI orders its instructions itself).
    let mut scheduled = program.clone();
    trnsim::infer_waits(&mut scheduled);
    let sim = Executor::new(TargetName::Trn1)
        .run(&scheduled, inputs)
        .unwrap_or_else(|e| panic!("{name}: simulator: {e}"));
    if let Some(py) = standin_python(name) {
        let out = run_standin(py, name, program, &kernel, inputs);
        assert_bit_identical(name, &sim.outputs, &out);
    }
    kernel
}

// ---------------------------------------------------------------------------------------------
// Tests.

#[test]
fn add_tensor_f32_broadcast() {
    let p = lower_binary("add.Tensor", TorchDType::F32, &[4, 8], &[8], &[4, 8]);
    check("add_tensor_f32_broadcast", &p, &inputs_for(&p, 1, 100.0, true), true);
}

#[test]
fn mul_tensor_bf16() {
    let p = lower_binary("mul.Tensor", TorchDType::Bf16, &[3, 5], &[3, 5], &[3, 5]);
    check("mul_tensor_bf16", &p, &inputs_for(&p, 2, 1e3, true), true);
}

#[test]
fn div_tensor_f32() {
    let p = lower_binary("div.Tensor", TorchDType::F32, &[4, 8], &[4, 8], &[4, 8]);
    check("div_tensor_f32", &p, &inputs_for(&p, 3, 1e4, true), true);
}

#[test]
fn add_tensor_f32_tiled_129x513() {
    let p = lower_binary("add.Tensor", TorchDType::F32, &[129, 513], &[129, 513], &[129, 513]);
    check("add_tensor_f32_tiled_129x513", &p, &inputs_for(&p, 4, 1.0, false), true);
}

#[test]
fn matmul_activation_tensor_reduce() {
    let p = matmul_activation_reduce();
    let k = check(
        "matmul_activation_tensor_reduce",
        &p,
        &inputs_for(&p, 5, 0.25, false),
        true,
    );
    assert!(k.contains("+= nisa.nc_matmul(") && k.contains("reduce_cmd=nisa.reduce_cmd.reset_reduce"));
}

#[test]
fn vector_gpsimd_tensor_mix() {
    let p = vector_gpsimd_mix();
    check("vector_gpsimd_tensor_mix", &p, &inputs_for(&p, 6, 4.0, false), true);
}

#[test]
fn vector_stats_selection_and_rng() {
    let p = vector_stats_select();
    check(
        "vector_stats_selection_and_rng",
        &p,
        &inputs_for(&p, 9, 4.0, true),
        true,
    );
}

#[test]
fn indirect_gather_and_scatter_add() {
    let p = gather_scatter();
    let mut inputs = inputs_for(&p, 10, 3.0, false);
    let idx: Vec<i32> = vec![2, 11, 0, 2, -1, 3];
    inputs.insert(
        "idx".into(),
        HostTensor {
            dtype: DType::I32,
            shape: vec![6, 1],
            data: idx.iter().flat_map(|v| v.to_le_bytes()).collect(),
        },
    );
    let k = check("indirect_gather_and_scatter_add", &p, &inputs, true);
    assert!(k.contains("oob_mode=nisa.oob_mode.skip"), "{k}");
}

/// Runs the emitted kernel through the trnsim.nki front-end (`nki_frontend_run.py`, as the golden
/// round trip does) and asserts its outputs are bit-identical to the simulator's. `false` (after
/// a loud message) when no Python has the trnsim package.
fn check_frontend(name: &str, program: &Program, kernel: &str, inputs: &BTreeMap<String, HostTensor>) -> bool {
    let Some(py) = trnsim_python(name) else {
        return false;
    };
    let mut scheduled = program.clone();
    trnsim::infer_waits(&mut scheduled);
    let target = program.target;
    let sim = Executor::new(target).run(&scheduled, inputs).unwrap();
    let dir = TempDir::new("emit-nki-frontend");
    let (kpath, ipath, opath) = (
        dir.path().join(format!("{name}.py")),
        dir.path().join("in.safetensors"),
        dir.path().join("out.safetensors"),
    );
    std::fs::write(&kpath, kernel).unwrap();
    std::fs::write(&ipath, emit_nki::to_safetensors(inputs).unwrap()).unwrap();
    let dtypes: BTreeMap<&str, serde_json::Value> = inputs
        .iter()
        .map(|(n, h)| (n.as_str(), serde_json::to_value(h.dtype).unwrap()))
        .collect();
    let job = serde_json::json!({"id": name, "kernel": kpath, "inputs": ipath, "outputs": opath, "dtypes": dtypes});
    let mpath = dir.path().join("manifest.jsonl");
    std::fs::write(&mpath, format!("{job}\n")).unwrap();
    let out = Command::new(&py)
        .arg(pyexec_dir().join("nki_frontend_run.py"))
        .arg("--batch")
        // The program's generation, named as on hardware (the front-end's default is trn2; the
        // legacy kernels are lowered and simulated for trn1, the legacy API's hardware).
        .env("NEURON_PLATFORM_TARGET_OVERRIDE", target.name())
        .arg(&mpath)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["status"], "ok", "{name}: front-end: {}", r["message"]);
    let names: Vec<(String, DType)> = program
        .hbm
        .iter()
        .filter(|d| d.role == HbmRole::Output)
        .map(|d| (d.name.clone(), d.dtype))
        .collect();
    let got = emit_nki::from_safetensors(&std::fs::read(&opath).unwrap(), &names).unwrap();
    assert_bit_identical(name, &sim.outputs, &got);
    true
}

#[test]
fn indirect_rows_that_are_not_rows_of_the_tensor() {
    let p = indirect_not_rows();
    let mut inputs = inputs_for(&p, 20, 3.0, false);
    let i32s = |v: &[i32]| HostTensor {
        dtype: DType::I32,
        shape: vec![v.len(), 1],
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    };
    // a: 6 is the last whole window (elements 50..56); 7 is partly out (58..64); 2^30 + 1 gives
    // row number 5 in wrapping int32 (index·4 + 1); -1 is out.
    inputs.insert("ia".into(), i32s(&[3, 6, 7, (1 << 30) + 1, -1]));
    let ib: Vec<i16> = (0..200).map(|k| ((k * 7) % 20) as i16).collect();
    inputs.insert(
        "ib".into(),
        HostTensor {
            dtype: DType::I16,
            shape: vec![1, 200],
            data: ib.iter().flat_map(|x| x.to_le_bytes()).collect(),
        },
    );
    // c/d: windows [1+2i, 7+2i): 0, 1 and 2 overlap each other; 18 ends past 40 (skipped).
    inputs.insert("ic".into(), i32s(&[1, 0, 18, 2, 1]));
    inputs.insert("ie".into(), i32s(&[54, 55, -5, -6, i32::MAX]));
    let k = check("indirect_rows_that_are_not_rows_of_the_tensor", &p, &inputs, false);
    assert!(k.contains("table.reshape((30, 2))[rows_"), "pieces of 2 elements: {k}");
    assert!(k.contains("table.reshape((60, 1))[rows_"), "{k}");
    // The simulator's outputs are not trivially what a piece-wise copy would give: the partly-out
    // window of `a` is skipped whole (row 2 keeps its memset -1.0).
    let mut scheduled = p.clone();
    trnsim::infer_waits(&mut scheduled);
    let sim = Executor::new(TargetName::Trn1).run(&scheduled, &inputs).unwrap();
    let a = sim.outputs["a"].to_f32();
    assert!(
        a[12..30].iter().all(|&v| v == -1.0) && a[..12].iter().all(|&v| v != -1.0),
        "{a:?}"
    );
    let e = sim.outputs["e"].to_f32();
    assert_eq!(
        e.iter().map(|&v| v == -1.0).collect::<Vec<_>>(),
        [false, true, false, true, true],
        "{e:?}"
    );
    assert!(k.contains("op0=nl.add, operand0=5, dtype=nl.int32"), "{k}");
    check_frontend("indirect_rows_that_are_not_rows_of_the_tensor", &p, &k, &inputs);
}

/// TensorE's double-row FP8 mode (trn2): operands `[128, 2, M]` / `[128, 2, N]` loaded from
/// `[256, ·]` HBM rows, one matmul over K = 256, the PSUM result copied out. The current dialect
/// writes `perf_mode=nisa.matmul_perf_mode.double_row` and the front-end's kernel gives the
/// simulator's bits; the legacy dialect (the trn1 API) refuses it.
#[test]
fn double_row_matmul_emits_its_perf_mode() {
    let (m, n) = (64usize, 96usize);
    let mut p = Program::new(TargetName::Trn2);
    p.declare("a", DType::Fp8E4m3, &[256, m], HbmRole::Input);
    p.declare("b", DType::Fp8E4m3, &[256, n], HbmRole::Input);
    p.declare("out", DType::F32, &[m, n], HbmRole::Output);
    let pair =
        |cols: usize, offset: u64| sbuf(DType::Fp8E4m3, 0, 128, offset, vec![[cols as i64, 2], [1, cols as i64]]);
    let (st, mv) = (pair(m, 0), pair(n, 1024));
    let rows = |name: &str, cols: usize| AccessPattern {
        mem: trnsim::MemSpace::Hbm(name.into()),
        dtype: DType::Fp8E4m3,
        start_partition: 0,
        partitions: 128,
        partition_step: 2 * cols as i64,
        offset: 0,
        free: vec![[cols as i64, 2], [1, cols as i64]],
    };
    let dma = |dst: AccessPattern, src: AccessPattern| {
        Op::DmaCopy(DmaCopy {
            dst,
            src,
            accumulate: false,
            indirect: None,
        })
    };
    p.push(Engine::Dma, dma(st.clone(), rows("a", m)));
    p.push(Engine::Dma, dma(mv.clone(), rows("b", n)));
    let acc = AccessPattern::psum(DType::F32, 0, m, 0, vec![[1, n as i64]]);
    p.push(
        Engine::Tensor,
        Op::NcMatmul(NcMatmul {
            dst: acc.clone(),
            stationary: st,
            moving: mv,
            accumulate: false,
            perf_mode: trnsim::MatmulPerfMode::DoubleRow,
        }),
    );
    let res = sbuf(DType::F32, 0, m, 4096, vec![[1, n as i64]]);
    p.push(
        Engine::Vector,
        Op::TensorCopy(TensorCopy {
            dst: res.clone(),
            src: acc,
        }),
    );
    p.push(Engine::Dma, dma(hbm_rows("out", DType::F32, m, n), res));
    let k = emit_nki::emit_dialect(&p, emit_nki::Dialect::Current).unwrap();
    assert!(k.contains("perf_mode=nisa.matmul_perf_mode.double_row"), "{k}");
    match emit_nki::emit(&p) {
        Err(EmitError::Unsupported { opcode, reason, .. }) => {
            assert_eq!(opcode, "nc_matmul");
            assert!(reason.contains("double_row"), "{reason}");
        }
        other => panic!("the legacy dialect must refuse double_row: {other:?}"),
    }
    // small integers: exact in fp8 and every sum exact, so a wrong pairing cannot hide
    let mut inputs = BTreeMap::new();
    for (name, cols, salt) in [("a", m, 1i64), ("b", n, 2)] {
        let vals: Vec<f32> = (0..256 * cols as i64)
            .map(|i| ((i * 7 + salt * 3) % 5 - 2) as f32)
            .collect();
        inputs.insert(
            name.to_string(),
            HostTensor::from_f32_as(DType::Fp8E4m3, &[256, cols], &vals),
        );
    }
    check_frontend("double_row_matmul_emits_its_perf_mode", &p, &k, &inputs);
}

/// The kernel's interface: inputs in declaration order as sanitized parameters, outputs in
/// shared HBM and returned in order.
#[test]
fn kernel_signature_and_outputs() {
    let k = emit_nki::emit(&vector_gpsimd_mix()).unwrap();
    assert!(k.contains("@nki.jit\ndef kernel(x, s):\n"), "{k}");
    assert!(
        k.contains("    out_main = nl.ndarray((32, 16), dtype=nl.float16, buffer=nl.shared_hbm)\n"),
        "{k}"
    );
    assert!(
        k.contains("    return (out_main, out_t, out_colsum, out_iota)\n"),
        "{k}"
    );
    assert!(k.contains("INPUT_NAMES = [\"x\", \"s\"]\n"), "{k}");
}

/// The current dialect: `import nki`, every call writes its `dst=` (no assignment form, no
/// `dtype=` cast: dst's dtype is the cast), views are slices or AWS's `.ap(pattern=…)`, iota and
/// affine_select take their pattern form, an indirect side is `.ap(…, vector_offset=…)`, and an
/// accumulating DMA is `nisa.dma_compute`'s read-modify-write form.
#[test]
fn current_dialect_writes_dst_calls_and_access_patterns() {
    let current = |p: &Program| emit_nki::emit_dialect(p, emit_nki::Dialect::Current);
    let mut all = String::new();
    for p in [
        vector_gpsimd_mix(),
        matmul_activation_reduce(),
        vector_stats_select(),
        indirect_not_rows(),
        gather_scatter(),
    ] {
        let k = current(&p).unwrap();
        assert!(
            k.contains("import nki\nimport nki.language as nl\nimport nki.isa as nisa\n"),
            "{k}"
        );
        for bad in [
            "nl.arange",
            "neuronxcc",
            "_flat",
            "= nisa.",
            "dst_rmw_op",
            "nl.random_seed",
            "mask=",
        ] {
            assert!(!k.contains(bad), "{bad}: {k}");
        }
        for line in k.lines().filter(|l| l.trim_start().starts_with("nisa.")) {
            assert!(
                line.contains("(dst=") || line.starts_with("    nisa.set_rng_seed("),
                "{line}"
            );
            // the only dtype= left is an access pattern's reinterpretation
            assert!(line.matches("dtype=").count() <= line.matches(".ap(").count(), "{line}");
        }
        all.push_str(&k);
    }
    for form in [
        ".ap(pattern=[[",
        "nisa.iota(dst=",
        "nisa.affine_select(dst=",
        "cmp_op=nl.",
        "vector_offset=",
        "indirect_dim=0",
        "nisa.nc_matmul(dst=",
        "nisa.dma_compute(dst=",
        "reduce_op=nl.add, oob_mode=nisa.oob_mode.skip)",
    ] {
        assert!(all.contains(form), "{form} missing");
    }
    let legacy = emit_nki::emit(&vector_gpsimd_mix()).unwrap();
    assert!(legacy.contains("import neuronxcc.nki as nki") && legacy.contains("nl.arange"));
}

/// Unsupported instructions (and indirect DMA) name their opcode and index.
#[test]
fn unsupported_programs_are_refused() {
    let mut p = Program::new(TargetName::Trn1);
    p.push(
        Engine::Vector,
        Op::FindIndex8(trnsim::FindIndex8 {
            dst: sbuf(DType::U32, 0, 4, 0, vec![[1, 8]]),
            data: sbuf(DType::F32, 0, 4, 64, vec![[1, 16]]),
            vals: sbuf(DType::F32, 0, 4, 128, vec![[1, 8]]),
        }),
    );
    let e = emit_nki::emit(&p).unwrap_err();
    assert!(
        matches!(&e, EmitError::Unsupported { index: 0, opcode, .. } if opcode == "nc_find_index8"),
        "{e}"
    );
    assert!(e.to_string().contains("nc_find_index8"));
    let mut p = Program::new(TargetName::Trn1);
    let idx = sbuf(DType::I32, 0, 4, 0, vec![[1, 1]]);
    p.declare("t", DType::F32, &[16, 8], HbmRole::Input);
    p.push(
        Engine::Gpsimd,
        Op::Iota(Iota {
            dst: idx.clone(),
            offset: 0,
            channel_multiplier: 1,
            pattern: vec![[1, 1]],
        }),
    );
    p.push(
        Engine::Dma,
        Op::DmaCopy(DmaCopy {
            dst: sbuf(DType::F32, 0, 4, 64, vec![[1, 8]]),
            src: AccessPattern {
                free: vec![[8, 1], [1, 8]],
                ..hbm_rows("t", DType::F32, 1, 8)
            },
            accumulate: false,
            indirect: Some(trnsim::Indirect {
                side: trnsim::IndirectSide::Src,
                index: idx,
                row_step: 8,
                oob: Default::default(),
            }),
        }),
    );
    let e = emit_nki::emit(&p).unwrap_err();
    assert!(
        matches!(&e, EmitError::Unsupported { index: 1, opcode, .. } if opcode == "dma_copy"),
        "{e}"
    );
}

/// On-chip bytes used with two dtypes (a bit trick: |x| by clearing the f32 sign bit with an
/// integer AND) become a byte tile viewed per operand.
#[test]
fn reinterpreted_on_chip_memory_is_bitcast() {
    let mut p = Program::new(TargetName::Trn1);
    p.declare("x", DType::F32, &[4, 8], HbmRole::Input);
    p.declare("y", DType::F32, &[4, 8], HbmRole::Output);
    let xf = sbuf(DType::F32, 0, 4, 0, vec![[1, 8]]);
    let xi = sbuf(DType::I32, 0, 4, 0, vec![[1, 8]]);
    p.push(
        Engine::Dma,
        Op::DmaCopy(DmaCopy {
            dst: xf.clone(),
            src: hbm_rows("x", DType::F32, 4, 8),
            accumulate: false,
            indirect: None,
        }),
    );
    p.push(
        Engine::Vector,
        Op::TensorScalar(TensorScalar {
            dst: xi.clone(),
            src: xi,
            op0: AluOp::BitwiseAnd,
            operand0: ScalarOperand::Imm(2147483647.0),
            reverse0: false,
            op1: None,
            operand1: None,
            reverse1: false,
        }),
    );
    p.push(
        Engine::Dma,
        Op::DmaCopy(DmaCopy {
            dst: hbm_rows("y", DType::F32, 4, 8),
            src: xf,
            accumulate: false,
            indirect: None,
        }),
    );
    let k = check("bitcast_abs", &p, &inputs_for(&p, 8, 50.0, true), false);
    assert!(
        k.contains("sbuf_0 = nl.ndarray((128, 32), dtype=nl.uint8, buffer=nl.sbuf)"),
        "{k}"
    );
    assert!(
        k.contains(
            "sbuf_0.view(nl.int32)[0:4, 0:8] = nisa.tensor_scalar(sbuf_0.view(nl.int32)[0:4, 0:8], op0=nl.bitwise_and"
        ),
        "{k}"
    );
}

/// The comparison is not vacuous: a kernel with one operator changed gives different outputs.
#[test]
fn standin_detects_a_wrong_kernel() {
    let Some(py) = standin_python("standin_detects_a_wrong_kernel") else {
        return;
    };
    let p = lower_binary("add.Tensor", TorchDType::F32, &[4, 8], &[8], &[4, 8]);
    let inputs = inputs_for(&p, 7, 10.0, false);
    let kernel = emit_nki::emit(&p).unwrap();
    assert!(kernel.contains("op=nl.add"));
    let wrong = kernel.replace("op=nl.add", "op=nl.subtract");
    let sim = Executor::new(TargetName::Trn1).run(&p, &inputs).unwrap();
    let right = run_standin(py, "right", &p, &kernel, &inputs);
    let wrong = run_standin(py, "wrong", &p, &wrong, &inputs);
    assert_eq!(sim.outputs["output.0"].data, right["output.0"].data);
    assert_ne!(sim.outputs["output.0"].data, wrong["output.0"].data);
}

/// The golden cases' emitted kernels, ready to run: one manifest line per kernel.
struct EmittedGoldens {
    /// Kept alive for the files (unless EMIT_NKI_KEEP names a directory).
    _tmp: TempDir,
    dir: PathBuf,
    manifest: String,
    /// case id -> (program, the simulator's outputs)
    expected: BTreeMap<String, (Program, BTreeMap<String, HostTensor>)>,
    /// (case id, kernel file, outputs file)
    kernels: Vec<(String, PathBuf, PathBuf)>,
}

/// Every golden case of a lowered op, for each `(target, dialect)`: lower for the target, run on
/// the simulator, emit in the dialect, and write the kernel and inputs. Programs the emitter
/// refuses are counted per opcode (and printed); every kernel parses. With several variants a
/// job's id is `<dialect>:<case id>` and its manifest line names the target the front-end runs it
/// on; with one, the case id.
/// `sink`: each manifest line is also written there as soon as its kernel is emitted (a runner's
/// stdin, which then runs the kernel while the next cases are lowered and simulated).
fn emit_goldens(
    tag: &str,
    variants: &[(TargetName, emit_nki::Dialect)],
    mut sink: Option<&mut dyn std::io::Write>,
) -> EmittedGoldens {
    use trnconf::case::{Case, GoldenIndex};
    let index = match GoldenIndex::load(&trnconf::default_golden_dir()) {
        Ok(i) => i,
        Err(e) => panic!("golden index: {e}"),
    };
    // EMIT_NKI_KEEP=<dir> keeps the kernels, inputs and outputs there (for debugging).
    let tmp = TempDir::new(&format!("emit-nki-golden-{tag}"));
    let keep = std::env::var_os("EMIT_NKI_KEEP").map(|k| PathBuf::from(k).join(tag));
    if let Some(k) = &keep {
        std::fs::create_dir_all(k).unwrap();
    }
    let dir_path = keep.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let execs: Vec<Executor> = variants.iter().map(|(t, _)| Executor::new(*t)).collect();
    let mut manifest = String::new();
    let mut expected: BTreeMap<String, (Program, BTreeMap<String, HostTensor>)> = BTreeMap::new();
    // (dialect, opcode) -> (count, one example)
    let mut refused: BTreeMap<(String, String), (usize, String)> = BTreeMap::new();
    let mut kernels = Vec::new();
    let (mut lowered, mut not_run) = (0usize, 0usize);
    for (k, entry) in index.cases.iter().enumerate() {
        if !trnconf::lower::is_lowered(&entry.op) {
            continue;
        }
        let Ok(case) = Case::load_entry(&index.dir, entry) else {
            continue;
        };
        for (v, (&(target, dialect), exec)) in variants.iter().zip(&execs).enumerate() {
            let Ok(l) = trnconf::lower::lower(&case, target) else {
                continue;
            };
            lowered += 1;
            let program = l.program;
            let mut inputs = BTreeMap::new();
            let mut ok = true;
            for decl in program.hbm.iter().filter(|d| d.role == HbmRole::Input) {
                match case
                    .tensors
                    .get(&decl.name)
                    .map(|t| trnconf::runner::to_device(&decl.name, t, decl.dtype))
                {
                    Some(Ok(h)) => {
                        inputs.insert(decl.name.clone(), h);
                    }
                    _ => ok = false,
                }
            }
            let sim = if ok { exec.run(&program, &inputs).ok() } else { None };
            let Some(sim) = sim else {
                not_run += 1;
                continue;
            };
            let dname = format!("{dialect:?}").to_lowercase();
            let kernel = match emit_nki::emit_dialect(&program, dialect) {
                Ok(k) => k,
                Err(e @ EmitError::Unsupported { .. }) => {
                    let EmitError::Unsupported { opcode, .. } = &e else {
                        unreachable!()
                    };
                    let slot = refused
                        .entry((dname, opcode.clone()))
                        .or_insert_with(|| (0, format!("{}: {e}", entry.id)));
                    slot.0 += 1;
                    continue;
                }
                Err(e) => panic!("{}: {e}", entry.id),
            };
            let id = if variants.len() == 1 {
                entry.id.clone()
            } else {
                format!("{dname}:{}", entry.id)
            };
            let kpath = dir_path.join(format!("k{k}_{v}.py"));
            let ipath = dir_path.join(format!("k{k}_{v}.in.safetensors"));
            let opath = dir_path.join(format!("k{k}_{v}.out.safetensors"));
            std::fs::write(&kpath, &kernel).unwrap();
            std::fs::write(&ipath, emit_nki::to_safetensors(&inputs).unwrap()).unwrap();
            if keep.is_some() {
                // The simulator's outputs too, to compare a rerun of the kept kernels by hand.
                let epath = dir_path.join(format!("k{k}_{v}.expected.safetensors"));
                std::fs::write(&epath, emit_nki::to_safetensors(&sim.outputs).unwrap()).unwrap();
            }
            // The input dtypes by name: a safetensors tag alone cannot tell fp8 e4m3 from e4m3fn.
            let dtypes: BTreeMap<&str, serde_json::Value> = inputs
                .iter()
                .map(|(n, h)| (n.as_str(), serde_json::to_value(h.dtype).unwrap()))
                .collect();
            let job = serde_json::json!({"id": id, "kernel": kpath, "inputs": ipath, "outputs": opath,
                "dtypes": dtypes, "target": target.name()});
            manifest.push_str(&format!("{job}\n"));
            if let Some(w) = sink.as_mut() {
                w.write_all(format!("{job}\n").as_bytes())
                    .and_then(|_| w.flush())
                    .expect("the runner's stdin");
            }
            kernels.push((id.clone(), kpath, opath));
            expected.insert(id, (program, sim.outputs));
        }
    }
    eprintln!(
        "emit_nki over the goldens ({variants:?}): {lowered} lowered programs, {} emitted, {} refused {refused:?}, {not_run} not run by the simulator",
        kernels.len(),
        refused.values().map(|r| r.0).sum::<usize>()
    );
    assert!(
        kernels.len() >= 100 * variants.len(),
        "only {} golden cases emitted",
        kernels.len()
    );

    // Every kernel parses (one python3 process).
    let paths: Vec<&PathBuf> = kernels.iter().map(|(_, k, _)| k).collect();
    let out = Command::new(numpy_python().unwrap_or("python3"))
        .args([
            "-c",
            "import ast,sys\nfor p in sys.argv[1:]: ast.parse(open(p).read(), p)",
        ])
        .args(&paths)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mpath = dir_path.join("manifest.jsonl");
    std::fs::write(&mpath, &manifest).unwrap();
    EmittedGoldens {
        _tmp: tmp,
        dir: dir_path,
        manifest,
        expected,
        kernels,
    }
}

/// Reads a batch runner's result lines and compares every kernel's outputs with the simulator's,
/// bit for bit; panics listing every difference and every error. No kernel is exempt: a kernel the
/// runner cannot run is a failure, so every emitted kernel runs or the test fails.
fn assert_batch_matches(runner: &str, e: &EmittedGoldens, stdout: &[u8]) {
    let mut failures = Vec::new();
    let mut nan_only = Vec::new();
    let mut seen = BTreeSet::new();
    for line in String::from_utf8_lossy(stdout).lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let id = r["id"].as_str().unwrap().to_string();
        assert!(seen.insert(id.clone()), "{runner}: two result lines for {id}");
        if r["status"] != "ok" {
            let message = r["message"].as_str().unwrap_or("");
            failures.push(format!("{id}: {runner} error: {message}"));
            continue;
        }
        let (program, sim) = &e.expected[&id];
        let opath = &e.kernels.iter().find(|(k, _, _)| *k == id).unwrap().2;
        let names: Vec<(String, DType)> = program
            .hbm
            .iter()
            .filter(|d| d.role == HbmRole::Output)
            .map(|d| (d.name.clone(), d.dtype))
            .collect();
        let got = emit_nki::from_safetensors(&std::fs::read(opath).unwrap(), &names).unwrap();
        if let Err(err) = bit_identical(&id, sim, &got, true) {
            failures.push(err);
        } else if bit_identical(&id, sim, &got, false).is_err() {
            nan_only.push(id);
        }
    }
    assert_eq!(seen.len(), e.expected.len(), "{runner}: one result line per kernel");
    eprintln!(
        "emit_nki over the goldens ({runner}): {} of {} kernels bit-identical, {} of them up to NaN sign/payload: {nan_only:?}",
        e.expected.len() - failures.len(),
        e.expected.len(),
        nan_only.len()
    );
    assert!(
        failures.is_empty(),
        "{runner}: {} of {} kernels fail to run or differ from the simulator:\n{}",
        failures.len(),
        e.expected.len(),
        failures.join("\n")
    );
}

/// Every golden case of a lowered op: lower, emit, parse, run on the numpy stand-in with the
/// case's inputs, and compare bit for bit with the simulator (the stand-in is an independent
/// second opinion: a reimplementation of the instruction semantics in numpy, docs/hardware.md).
#[test]
fn golden_cases_emit_and_match_the_simulator() {
    let e = emit_goldens("standin", &[(TargetName::Trn1, emit_nki::Dialect::Legacy)], None);
    let Some(py) = standin_python("golden_cases_emit_and_match_the_simulator") else {
        return;
    };
    let out = Command::new(py)
        .args(["-m", "nki_standin", "--batch"])
        .arg(e.dir.join("manifest.jsonl"))
        .env("PYTHONPATH", pyexec_dir())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!e.manifest.is_empty());
    assert_batch_matches("stand-in", &e, &out.stdout);
}

/// A Python that imports the trnsim package (`pip install ./conformance/python`), or `None`
/// (skip, loudly) — panics under `CI` when there is none.
fn trnsim_python(test: &str) -> Option<String> {
    let mut candidates = Vec::new();
    if let Ok(p) = std::env::var("TRNCONF_PYTHON") {
        candidates.push(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    if venv.is_file() {
        candidates.push(venv.display().to_string());
    }
    candidates.push("python3".into());
    let py = candidates.iter().find(|py| {
        Command::new(py)
            .args(["-c", "import trnsim.nki, ml_dtypes"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if py.is_none() {
        let msg = format!(
            "no Python with the trnsim package among {candidates:?} (pip install ./conformance/python; set TRNCONF_PYTHON)"
        );
        if std::env::var_os("CI").is_some() {
            panic!("{test}: {msg}");
        }
        eprintln!("\n!!!!! {test}: SKIPPING: {msg} !!!!!\n");
    }
    py.cloned()
}

/// The loop closed: every emitted golden kernel, traced by the trnsim.nki front-end into a new
/// trnsim program and run on the simulator, gives the same bits as the program it was emitted
/// from. Both dialects, in one front-end process: the legacy `neuronxcc.nki` kernels lowered and
/// simulated for trn1 (the legacy API's hardware, the trn1 nightly), and the current `nki` ones
/// for trn2 (each manifest line names its generation, NEURON_PLATFORM_TARGET_OVERRIDE as on
/// hardware). The kernels are streamed to the front-end as they are emitted, so its tracing
/// overlaps the lowering and simulation of the next cases (docs/nki.md, "Emitted kernels").
#[test]
fn golden_cases_emitted_run_through_the_nki_front_end_bit_identically() {
    use std::process::Stdio;
    let variants = [
        (TargetName::Trn1, emit_nki::Dialect::Legacy),
        (TargetName::Trn2, emit_nki::Dialect::Current),
    ];
    let Some(py) = trnsim_python("golden_cases_emitted_run_through_the_nki_front_end_bit_identically") else {
        emit_goldens("frontend", &variants, None);
        return;
    };
    // One front-end process for both dialects, fed each kernel as it is emitted: tracing runs
    // beside the lowering and simulation of the next cases.
    let t0 = std::time::Instant::now();
    let mut child = Command::new(&py)
        .arg(pyexec_dir().join("nki_frontend_run.py"))
        .args(["--batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let read_out = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut b).map(|_| b)
    });
    let read_err = std::thread::spawn(move || {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut b).map(|_| b)
    });
    let mut stdin = child.stdin.take().unwrap();
    let e = emit_goldens("frontend", &variants, Some(&mut stdin));
    let emitted = t0.elapsed();
    drop(stdin);
    let status = child.wait().unwrap();
    let out = read_out.join().unwrap().unwrap();
    let err = read_err.join().unwrap().unwrap();
    eprintln!(
        "{} kernels: emitted (lowered, simulated) in {emitted:.1?}, all traced and run by the front-end after {:.1?}",
        e.kernels.len(),
        t0.elapsed()
    );
    assert!(status.success(), "{}", String::from_utf8_lossy(&err));
    assert_batch_matches("trnsim.nki front-end", &e, &out);
    for dialect in ["legacy", "current"] {
        let n = e
            .kernels
            .iter()
            .filter(|(id, _, _)| id.starts_with(&format!("{dialect}:")))
            .count();
        assert!(n >= 100, "only {n} {dialect} kernels");
    }
}
