//! TensorE `nc_matmul` with `perf_mode = double_row` (NeuronCore-v3+, FP8 inputs): each
//! partition holds two contraction rows, `stationary [K, 2, M]` and `moving [K, 2, N]`, so one
//! pass contracts 2K products: `dst[m, n] = Σ_p Σ_j st[p, j, m] · mv[p, j, n]`.
//!
//! The inputs are small integers (exact in fp8 e4m3, products ≤ 4, sums of 256 products ≤ 1024),
//! so every fp32 sum is exact whatever the accumulation order and the expected values are the
//! integer dot products, computed here in i64 from the same index rule.

mod common_tg;

use common_tg::*;
use trnsim::error::OperandError;
use trnsim::*;

const P: usize = 128;
const M: usize = 96;
const N: usize = 200;

/// A deterministic small-integer value in −2..=2 for element `(p, j, c)` of operand `salt`: the
/// two rows of a partition (j = 0, 1) differ, so a mode that paired the wrong halves, or read
/// only one, would give other sums.
fn val(salt: usize, p: usize, j: usize, c: usize) -> i64 {
    (((p * 7 + j * 13 + c * 3 + salt * 5) * 2654435761usize) >> 7) as i64 % 5 - 2
}

fn matmul(dst: AccessPattern, stationary: AccessPattern, moving: AccessPattern, mode: MatmulPerfMode) -> Op {
    Op::NcMatmul(NcMatmul {
        dst,
        stationary,
        moving,
        accumulate: false,
        perf_mode: mode,
    })
}

/// Loads both operands as `[P, 2 × cols]` fp8 tiles (row j of partition p at elements j·cols ..).
fn load(core: &mut Core, dtype: DType) -> (AccessPattern, AccessPattern) {
    let st = sb(dtype, P, 2 * M, 0);
    let mv = sb(dtype, P, 2 * N, 4096);
    let fill = |salt: usize, cols: usize| -> Vec<f32> {
        (0..P)
            .flat_map(|p| (0..2).flat_map(move |j| (0..cols).map(move |c| val(salt, p, j, c) as f32)))
            .collect()
    };
    core.put(&st, &fill(0, M));
    core.put(&mv, &fill(1, N));
    (st, mv)
}

#[test]
fn double_row_contracts_both_rows_of_every_partition() {
    for dtype in [DType::Fp8E4m3, DType::Fp8E5m2] {
        let mut core = Core::on(TargetName::Trn2, Numerics::default());
        let (st, mv) = load(&mut core, dtype);
        let dst = ps(DType::F32, M, N, 0);
        core.run(Engine::Tensor, matmul(dst.clone(), st, mv, MatmulPerfMode::DoubleRow))
            .unwrap();
        let got = core.get(&dst);
        for m in 0..M {
            for n in 0..N {
                let want: i64 = (0..P)
                    .flat_map(|p| (0..2).map(move |j| (p, j)))
                    .map(|(p, j)| val(0, p, j, m) * val(1, p, j, n))
                    .sum();
                assert_eq!(got[m * N + n], want as f32, "{dtype:?} dst[{m}, {n}]");
            }
        }
        assert_eq!(core.stats.flops, 2 * (2 * P as u64) * M as u64 * N as u64);
    }
}

#[test]
fn double_row_costs_what_one_pass_costs() {
    // Two FP8 MACs per PE per cycle: the 256-row contraction takes the cycles of a 128-row one,
    // max(min(init, M), N) = N cycles (docs/isa.md §5.1).
    let mut one = Core::on(TargetName::Trn2, Numerics::default());
    let (st, mv) = load(&mut one, DType::Fp8E4m3);
    one.run(
        Engine::Tensor,
        matmul(ps(DType::F32, M, N, 0), st, mv, MatmulPerfMode::DoubleRow),
    )
    .unwrap();
    let mut plain = Core::on(TargetName::Trn2, Numerics::default());
    let st = sb(DType::Fp8E4m3, P, M, 0);
    let mv = sb(DType::Fp8E4m3, P, N, 4096);
    plain.put(&st, &vec![1.0; P * M]);
    plain.put(&mv, &vec![1.0; P * N]);
    plain
        .run(
            Engine::Tensor,
            matmul(ps(DType::F32, M, N, 0), st, mv, MatmulPerfMode::None),
        )
        .unwrap();
    assert!(one.stats.est_ns.tensor > 0.0);
    assert_eq!(one.stats.est_ns.tensor, plain.stats.est_ns.tensor);
}

/// Runs `mode` on a core of `target` with all-ones operands `[P, st_elems]` and `[P, mv_elems]`.
fn run_ones(target: TargetName, dtype: DType, st_elems: usize, mv_elems: usize, mode: MatmulPerfMode) -> OperandError {
    let mut core = Core::on(target, Numerics::default());
    let st = sb(dtype, P, st_elems, 0);
    let mv = sb(dtype, P, mv_elems, 4096);
    core.put(&st, &vec![1.0; P * st_elems]);
    core.put(&mv, &vec![1.0; P * mv_elems]);
    core.run(Engine::Tensor, matmul(ps(DType::F32, M, N, 0), st, mv, mode))
        .unwrap_err()
}

#[test]
fn double_row_refusals() {
    let (fp8, rows) = (DType::Fp8E4m3, MatmulPerfMode::DoubleRow);
    // Not on NeuronCore-v2.
    let e = run_ones(TargetName::Trn1, fp8, 2 * M, 2 * N, rows);
    assert!(matches!(e.kind, ErrorKind::NotOnTarget { .. }), "{e:?}");
    assert_eq!(e.operand.as_deref(), Some("perf_mode"));
    // FP8 only.
    let e = run_ones(TargetName::Trn2, DType::Bf16, 2 * M, 2 * N, rows);
    assert!(matches!(e.kind, ErrorKind::UnsupportedDType { .. }), "{e:?}");
    // Two rows per partition: an odd number of elements has no [2, M] split.
    let e = run_ones(TargetName::Trn2, fp8, 2 * M + 1, 2 * N, rows);
    assert!(matches!(e.kind, ErrorKind::ShapeMismatch(_)), "{e:?}");
    assert_eq!(e.operand.as_deref(), Some("stationary"));
    // quad is nc_matmul_mx's mode (trn3 has it, nc_matmul does not take it).
    let e = run_ones(TargetName::Trn3, fp8, 2 * M, 2 * N, MatmulPerfMode::Quad);
    assert!(matches!(e.kind, ErrorKind::Invalid(_)), "{e:?}");
}

#[test]
fn perf_mode_round_trips_through_json_and_is_left_out_when_none() {
    let mut p = Program::new(TargetName::Trn2);
    p.push(
        Engine::Tensor,
        matmul(
            ps(DType::F32, M, N, 0),
            sb(DType::Fp8E4m3, P, 2 * M, 0),
            sb(DType::Fp8E4m3, P, 2 * N, 4096),
            MatmulPerfMode::DoubleRow,
        ),
    );
    let json = p.to_json();
    assert!(json.contains("\"perf_mode\": \"double_row\"") || json.contains("\"perf_mode\":\"double_row\""));
    assert_eq!(Program::from_json(&json).unwrap(), p);
    let Op::NcMatmul(i) = &mut p.instructions[0].op else {
        unreachable!()
    };
    i.perf_mode = MatmulPerfMode::None;
    assert!(!p.to_json().contains("perf_mode"));
}
