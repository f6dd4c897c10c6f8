//! TensorE: `nc_matmul` and the identity-matmul `nc_transpose`. Every expected value is derived
//! by hand in the comments.

mod common_tg;

use common_tg::*;
use std::collections::BTreeMap;
use trnsim::*;

fn matmul(dst: AccessPattern, stationary: AccessPattern, moving: AccessPattern, accumulate: bool) -> Op {
    Op::NcMatmul(NcMatmul {
        dst,
        stationary,
        moving,
        accumulate,
        perf_mode: trnsim::MatmulPerfMode::None,
    })
}

/// Loads `st` as a `[K, M]` bf16 tile at byte 0 and `mv` as `[K, N]` bf16 at byte 4096.
fn load_bf16(core: &mut Core, k: usize, m: usize, n: usize, st: &[f32], mv: &[f32]) -> (AccessPattern, AccessPattern) {
    let s = sb(DType::Bf16, k, m, 0);
    let v = sb(DType::Bf16, k, n, 4096);
    core.put(&s, st);
    core.put(&v, mv);
    (s, v)
}

#[test]
fn matmul_2x3_times_3x2() {
    // A = [[1, 3, 5], [2, 4, 6]] (2×3), B = [[7, 8], [9, 10], [11, 12]] (3×2).
    // stationary = Aᵀ as [K=3, M=2]; moving = B as [K=3, N=2].
    // (AB)[0][0] = 1·7 + 3·9 + 5·11 = 89;   (AB)[0][1] = 1·8 + 3·10 + 5·12 = 98
    // (AB)[1][0] = 2·7 + 4·9 + 6·11 = 116;  (AB)[1][1] = 2·8 + 4·10 + 6·12 = 128
    let mut core = Core::new();
    let (s, v) = load_bf16(
        &mut core,
        3,
        2,
        2,
        &[1., 2., 3., 4., 5., 6.],
        &[7., 8., 9., 10., 11., 12.],
    );
    let d = ps(DType::F32, 2, 2, 0);
    core.run(Engine::Tensor, matmul(d.clone(), s, v, false)).unwrap();
    assert_eq!(core.get(&d), vec![89., 98., 116., 128.]);
    assert_eq!(core.stats.flops, 2 * 3 * 2 * 2);
    // Cost: max(min(64, M=2), N=2) = 2 cycles at 2.8 GHz.
    assert!((core.stats.est_ns.tensor - 2.0 / 2.8).abs() < 1e-9);
}

#[test]
fn matmul_accumulates_two_k_tiles_in_psum() {
    // Tile 1 (K=2): st = [[1], [2]], mv = [[1, 10], [1, 10]] → [1+2, 10+20] = [3, 30].
    // Tile 2 (K=2): st = [[3], [4]], mv = [[1, 1], [2, 2]] → [3+8, 3+8] = [11, 11].
    // accumulate=true on tile 2: [3+11, 30+11] = [14, 41].
    let mut core = Core::new();
    let d = ps(DType::F32, 1, 2, 2048);
    let (s, v) = load_bf16(&mut core, 2, 1, 2, &[1., 2.], &[1., 10., 1., 10.]);
    core.run(Engine::Tensor, matmul(d.clone(), s, v, false)).unwrap();
    assert_eq!(core.get(&d), vec![3., 30.]);
    let (s, v) = load_bf16(&mut core, 2, 1, 2, &[3., 4.], &[1., 1., 2., 2.]);
    core.run(Engine::Tensor, matmul(d.clone(), s.clone(), v.clone(), true))
        .unwrap();
    assert_eq!(core.get(&d), vec![14., 41.]);
    // accumulate=false overwrites: back to tile 2's own [11, 11].
    core.run(Engine::Tensor, matmul(d.clone(), s, v, false)).unwrap();
    assert_eq!(core.get(&d), vec![11., 11.]);
}

#[test]
fn accumulate_adds_the_finished_sum_to_psum() {
    // First matmul writes 2^12 · 2^12 = 2^24. The second sums its products 1·1 + 1·1 = 2 and
    // PSUM adds it: 2^24 + 2 = 16777218 (representable). Continuing one running sum instead
    // would give (2^24 + 1) + 1 = 2^24 + 1 → 2^24 (tie to even), twice: 16777216.
    let mut core = Core::new();
    let d = ps(DType::F32, 1, 1, 0);
    let (s, v) = load_bf16(&mut core, 1, 1, 1, &[4096.], &[4096.]);
    core.run(Engine::Tensor, matmul(d.clone(), s, v, false)).unwrap();
    let (s, v) = load_bf16(&mut core, 2, 1, 1, &[1., 1.], &[1., 1.]);
    core.run(Engine::Tensor, matmul(d.clone(), s, v, true)).unwrap();
    assert_eq!(core.get(&d), vec![16777218.0]);
}

#[test]
fn accumulate_onto_unwritten_psum_is_an_error() {
    let mut core = Core::new();
    let (s, v) = load_bf16(&mut core, 2, 1, 2, &[1., 2.], &[1., 1., 1., 1.]);
    let r = core.run(Engine::Tensor, matmul(ps(DType::F32, 1, 2, 4096), s, v, true));
    expect_err(
        r,
        "dst",
        |k| matches!(k, ErrorKind::UninitializedRead { memory, .. } if memory == "PSUM"),
    );
}

#[test]
fn sequential_and_pairwise_accumulation_differ_by_hand() {
    // stationary [K=4, M=1] = [2^12, 1, 1, -2^12], moving [K=4, N=1] = [2^12, 1, 1, 2^12] (bf16,
    // exact). Products: p = [2^24, 1, 1, -2^24].
    // Sequential: 2^24 + 1 = 16777217 → 16777216 (tie, even); + 1 → 16777216 again; - 2^24 = 0.
    // Pairwise:   (2^24 + 1) → 16777216;  (1 + -2^24) = -16777215 (exact, 24 bits);
    //             16777216 + -16777215 = 1.
    let st = [4096., 1., 1., -4096.];
    let mv = [4096., 1., 1., 4096.];
    for (order, want) in [
        (MatmulAccumulation::Sequential, 0.0),
        (MatmulAccumulation::Pairwise, 1.0),
    ] {
        let mut core = Core::with_numerics(Numerics {
            matmul_accumulation: order,
            ..Numerics::default()
        });
        let (s, v) = load_bf16(&mut core, 4, 1, 1, &st, &mv);
        let d = ps(DType::F32, 1, 1, 0);
        core.run(Engine::Tensor, matmul(d.clone(), s, v, false)).unwrap();
        assert_eq!(core.get(&d), vec![want], "{order:?}");
    }
}

#[test]
fn pairwise_with_odd_k_carries_the_last_product() {
    // K = 3, products [2^24, 1, 1]: pairwise levels [2^24 + 1 → 2^24, 1] then 2^24 + 1 → 2^24.
    // K = 5, products [1, 2^24, 1, 1, 1]: level 1 [1 + 2^24 → 2^24, 1 + 1 = 2, 1];
    // level 2 [2^24 + 2 = 16777218, 1]; level 3 16777218 + 1 = 16777219 → 16777220 (tie, even).
    let numerics = Numerics {
        matmul_accumulation: MatmulAccumulation::Pairwise,
        ..Numerics::default()
    };
    let mut core = Core::with_numerics(numerics);
    let (s, v) = load_bf16(&mut core, 3, 1, 1, &[4096., 1., 1.], &[4096., 1., 1.]);
    let d = ps(DType::F32, 1, 1, 0);
    core.run(Engine::Tensor, matmul(d.clone(), s, v, false)).unwrap();
    assert_eq!(core.get(&d), vec![16777216.0]);
    let (s, v) = load_bf16(&mut core, 5, 1, 1, &[1., 4096., 1., 1., 1.], &[1., 4096., 1., 1., 1.]);
    core.run(Engine::Tensor, matmul(d.clone(), s, v, false)).unwrap();
    assert_eq!(core.get(&d), vec![16777220.0]);
}

#[test]
fn bf16_products_are_exact() {
    // (1 + 2^-7)² = 1 + 2^-6 + 2^-14: needs 15 significant bits, exact in fp32, not in bf16.
    let mut core = Core::new();
    let x = 1.0 + 2f32.powi(-7);
    let (s, v) = load_bf16(&mut core, 1, 1, 1, &[x], &[x]);
    let d = ps(DType::F32, 1, 1, 0);
    core.run(Engine::Tensor, matmul(d.clone(), s, v, false)).unwrap();
    assert_eq!(core.get(&d), vec![1.0 + 2f32.powi(-6) + 2f32.powi(-14)]);
}

#[test]
fn fp32_products_round_to_fp32_and_cost_four_times() {
    // (1 + 2^-23)² = 1 + 2^-22 + 2^-46 → fp32 RNE: 1 + 2^-22.
    let mut core = Core::new();
    let x = 1.0 + f32::EPSILON;
    let s = sb(DType::F32, 1, 1, 0);
    let v = sb(DType::Tf32, 1, 1, 64); // tf32 pairs with fp32
    core.put(&s, &[x]);
    core.put_bits(&v, &[1.5f32.to_bits()]);
    let d = ps(DType::F32, 1, 1, 0);
    core.run(Engine::Tensor, matmul(d.clone(), s.clone(), s.clone(), false))
        .unwrap();
    assert_eq!(core.get(&d), vec![1.0 + 2f32.powi(-22)]);
    // max(min(64, 1), 1) = 1 cycle, ×4 for fp32.
    assert!((core.stats.est_ns.tensor - 4.0 / 2.8).abs() < 1e-9);
    core.run(Engine::Tensor, matmul(d.clone(), s, v, false)).unwrap();
    assert_eq!(core.get(&d), vec![x * 1.5]);
}

#[test]
fn fp8_and_mixed_16_bit_inputs() {
    // e4m3: stationary [0.5, 1.5], moving [3, -2] (all exact): 0.5·3 + 1.5·(-2) = 1.5 - 3 = -1.5.
    let mut core = Core::new();
    let s = sb(DType::Fp8E4m3, 2, 1, 0);
    let v = sb(DType::Fp8E4m3, 2, 1, 64);
    core.put(&s, &[0.5, 1.5]);
    core.put(&v, &[3.0, -2.0]);
    let d = ps(DType::F32, 1, 1, 0);
    core.run(Engine::Tensor, matmul(d.clone(), s.clone(), v, false))
        .unwrap();
    assert_eq!(core.get(&d), vec![-1.5]);
    // fp8 e4m3 stationary × bf16 moving [10, 20]: 0.5·10 + 1.5·20 = 35.
    let v16 = sb(DType::Bf16, 2, 1, 128);
    core.put(&v16, &[10.0, 20.0]);
    core.run(Engine::Tensor, matmul(d.clone(), s, v16.clone(), false))
        .unwrap();
    assert_eq!(core.get(&d), vec![35.0]);
    // e5m2 × f16, e4m3fn × bf16: 0.25·10 + 448·20 = 8962.5 (448 is e4m3fn's max).
    for (sd, svals, want) in [
        (DType::Fp8E5m2, [0.25f32, 4.0], 82.5f32),
        (DType::Fp8E4m3fn, [0.25, 448.0], 8962.5),
    ] {
        let s = sb(sd, 2, 1, 256);
        core.put(&s, &svals);
        let v = sb(DType::F16, 2, 1, 320);
        core.put(&v, &[10.0, 20.0]);
        core.run(Engine::Tensor, matmul(d.clone(), s.clone(), v, false))
            .unwrap();
        assert_eq!(core.get(&d), vec![want], "{sd}");
    }
}

#[test]
fn negative_zero_survives_a_sum_of_negative_zeros() {
    // (-0)·1 + (-0)·1 = -0 in IEEE arithmetic; (+0)·1 + (-0)·1 = +0.
    let mut core = Core::new();
    let (s, v) = load_bf16(&mut core, 2, 2, 1, &[-0.0, 0.0, -0.0, -0.0], &[1.0, 1.0]);
    let d = ps(DType::F32, 2, 1, 0);
    core.run(Engine::Tensor, matmul(d.clone(), s, v, false)).unwrap();
    assert_eq!(bits(&core.get(&d)), bits(&[-0.0, 0.0]));
}

#[test]
fn strided_and_multi_dim_operands() {
    // stationary: columns 0 and 2 of a [2 × 4] tile ([[1,2,3,4],[5,6,7,8]] → [[1,3],[5,7]]).
    // moving: a [2 × (2×2)] view [[2, 2], [1, 2]] of a [2 × 4] tile [[1,1,2,2],[3,3,4,4]]
    //   → per partition elements 0,1,2,3 in order: [[1,1,2,2],[3,3,4,4]].
    // out[m][n] = st[0][m]·mv[0][n] + st[1][m]·mv[1][n]:
    //   m=0 (1, 5): [1+15, 1+15, 2+20, 2+20] = [16, 16, 22, 22]
    //   m=1 (3, 7): [3+21, 3+21, 6+28, 6+28] = [24, 24, 34, 34]
    // dst: a [2 × (2×2)] view with the inner pair 2 elements apart: bytes 0,8,4,12 → the tile
    // row reads back as [16, 22, 16, 22] / [24, 34, 24, 34].
    let mut core = Core::new();
    let full = sb(DType::Bf16, 2, 4, 0);
    core.put(&full, &[1., 2., 3., 4., 5., 6., 7., 8.]);
    let st = AccessPattern::sbuf(DType::Bf16, 0, 2, 0, vec![[2, 2]]);
    let mvt = sb(DType::Bf16, 2, 4, 64);
    core.put(&mvt, &[1., 1., 2., 2., 3., 3., 4., 4.]);
    let mv = AccessPattern::sbuf(DType::Bf16, 0, 2, 64, vec![[2, 2], [1, 2]]);
    let d = AccessPattern::psum(DType::F32, 0, 2, 0, vec![[1, 2], [2, 2]]);
    core.run(Engine::Tensor, matmul(d, st, mv, false)).unwrap();
    assert_eq!(
        core.get(&ps(DType::F32, 2, 4, 0)),
        vec![16., 22., 16., 22., 24., 34., 24., 34.]
    );
}

#[test]
fn full_size_tile_and_upper_partitions() {
    // K=128, M=128, N=512 filling one bank exactly (bank 7: bytes 14336..16384); all ones → 128.
    let mut core = Core::new();
    let (s, v) = load_bf16(&mut core, 128, 128, 512, &vec![1.0; 128 * 128], &vec![1.0; 128 * 512]);
    let d = ps(DType::F32, 128, 512, 7 * 2048);
    core.run(Engine::Tensor, matmul(d.clone(), s, v, false)).unwrap();
    assert!(core.get(&d).iter().all(|&x| x == 128.0));
    // K=32 starting at partition 96 (allowed for ≤32 partitions), output on partitions 32..64.
    let s = at_partition(sb(DType::Bf16, 32, 32, 0), 96);
    let v = at_partition(sb(DType::Bf16, 32, 2, 4096), 96);
    let d = at_partition(ps(DType::F32, 32, 2, 0), 32);
    core.run(Engine::Tensor, matmul(d.clone(), s, v, false)).unwrap();
    assert_eq!(core.get(&d), vec![32.0; 64]);
}

// ---- errors -----------------------------------------------------------------------------------

fn loaded() -> Core {
    let mut core = Core::new();
    // 128 partitions × 1024 bytes of bf16 ones at 0 and f32 ones at 8192, i32 at 16384.
    core.put(&sb(DType::Bf16, 128, 520, 0), &vec![1.0; 128 * 520]);
    core.put(&sb(DType::F32, 128, 520, 8192), &vec![1.0; 128 * 520]);
    core.put(&sb(DType::I32, 128, 4, 16384), &vec![1.0; 128 * 4]);
    core
}

#[test]
fn psum_bank_overflow() {
    let mut core = loaded();
    // [2 × 4] fp32 at byte 2040: bytes 2040..2056 straddle the bank boundary at 2048.
    let r = core.run(
        Engine::Tensor,
        matmul(
            ps(DType::F32, 2, 4, 2040),
            sb(DType::Bf16, 2, 2, 0),
            sb(DType::Bf16, 2, 4, 0),
            false,
        ),
    );
    expect_err(r, "dst", |k| {
        matches!(
            k,
            ErrorKind::PsumBankOverflow {
                offset: 2040,
                bytes: 16,
                bank: 2048
            }
        )
    });
    // N = 512 at byte 4: one element past bank 0.
    let r = core.run(
        Engine::Tensor,
        matmul(
            ps(DType::F32, 2, 512, 4),
            sb(DType::Bf16, 2, 2, 0),
            sb(DType::Bf16, 2, 512, 0),
            false,
        ),
    );
    expect_err(r, "dst", |k| matches!(k, ErrorKind::PsumBankOverflow { .. }));
    // The same at byte 2048 fits bank 1 exactly.
    core.run(
        Engine::Tensor,
        matmul(
            ps(DType::F32, 2, 512, 2048),
            sb(DType::Bf16, 2, 2, 0),
            sb(DType::Bf16, 2, 512, 0),
            false,
        ),
    )
    .unwrap();
}

#[test]
fn size_limits() {
    let mut core = loaded();
    // M = 129 > 128.
    let r = core.run(
        Engine::Tensor,
        matmul(
            ps(DType::F32, 129, 4, 0),
            sb(DType::Bf16, 4, 129, 0),
            sb(DType::Bf16, 4, 4, 0),
            false,
        ),
    );
    expect_err(r, "stationary", |k| {
        matches!(
            k,
            ErrorKind::FreeSizeLimit {
                size: 129,
                limit: 128,
                ..
            }
        )
    });
    // N = 513 > 512.
    let r = core.run(
        Engine::Tensor,
        matmul(
            ps(DType::F32, 4, 513, 0),
            sb(DType::Bf16, 4, 4, 0),
            sb(DType::Bf16, 4, 513, 0),
            false,
        ),
    );
    expect_err(r, "moving", |k| {
        matches!(
            k,
            ErrorKind::FreeSizeLimit {
                size: 513,
                limit: 512,
                ..
            }
        )
    });
    // K = 129 partitions.
    let st = AccessPattern::sbuf(DType::Bf16, 0, 129, 0, vec![[1, 4]]);
    let r = core.run(
        Engine::Tensor,
        matmul(ps(DType::F32, 4, 4, 0), st, sb(DType::Bf16, 4, 4, 0), false),
    );
    expect_err(r, "stationary", |k| {
        matches!(k, ErrorKind::TooManyPartitions { count: 129, max: 128 })
    });
}

#[test]
fn shape_errors() {
    let mut core = loaded();
    // K mismatch: stationary 4 partitions, moving 3.
    let r = core.run(
        Engine::Tensor,
        matmul(
            ps(DType::F32, 2, 2, 0),
            sb(DType::Bf16, 4, 2, 0),
            sb(DType::Bf16, 3, 2, 0),
            false,
        ),
    );
    expect_err(r, "moving", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    // dst [3 × 2] for M = 2.
    let r = core.run(
        Engine::Tensor,
        matmul(
            ps(DType::F32, 3, 2, 0),
            sb(DType::Bf16, 4, 2, 0),
            sb(DType::Bf16, 4, 2, 0),
            false,
        ),
    );
    expect_err(r, "dst", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    // dst [2 × 3] for N = 2.
    let r = core.run(
        Engine::Tensor,
        matmul(
            ps(DType::F32, 2, 3, 0),
            sb(DType::Bf16, 4, 2, 0),
            sb(DType::Bf16, 4, 2, 0),
            false,
        ),
    );
    expect_err(r, "dst", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    // Start partition: 64 partitions may not start at 32.
    let st = at_partition(sb(DType::Bf16, 64, 2, 0), 32);
    let r = core.run(
        Engine::Tensor,
        matmul(ps(DType::F32, 2, 2, 0), st, sb(DType::Bf16, 64, 2, 0), false),
    );
    expect_err(r, "stationary", |k| {
        matches!(k, ErrorKind::StartPartition { start: 32, count: 64 })
    });
}

#[test]
fn dtype_errors() {
    let mut core = loaded();
    // Integer input.
    let r = core.run(
        Engine::Tensor,
        matmul(
            ps(DType::F32, 4, 2, 0),
            sb(DType::I32, 2, 4, 16384),
            sb(DType::Bf16, 2, 2, 0),
            false,
        ),
    );
    expect_err(r, "stationary", |k| {
        matches!(k, ErrorKind::UnsupportedDType { dtype: "i32", .. })
    });
    // fp32 mixed with bf16 (either way round, the 16-bit side is blamed).
    let r = core.run(
        Engine::Tensor,
        matmul(
            ps(DType::F32, 2, 2, 0),
            sb(DType::F32, 2, 2, 8192),
            sb(DType::Bf16, 2, 2, 0),
            false,
        ),
    );
    expect_err(r, "moving", |k| {
        matches!(k, ErrorKind::UnsupportedDType { dtype: "bf16", .. })
    });
    let r = core.run(
        Engine::Tensor,
        matmul(
            ps(DType::F32, 2, 2, 0),
            sb(DType::Bf16, 2, 2, 0),
            sb(DType::F32, 2, 2, 8192),
            false,
        ),
    );
    expect_err(r, "stationary", |k| {
        matches!(k, ErrorKind::UnsupportedDType { dtype: "bf16", .. })
    });
    // PSUM result must be fp32 on NC-v2.
    let r = core.run(
        Engine::Tensor,
        matmul(
            ps(DType::Bf16, 2, 2, 0),
            sb(DType::Bf16, 2, 2, 0),
            sb(DType::Bf16, 2, 2, 0),
            false,
        ),
    );
    expect_err(r, "dst", |k| {
        matches!(k, ErrorKind::UnsupportedDType { dtype: "bf16", .. })
    });
}

#[test]
fn memory_placement_errors() {
    let mut core = loaded();
    // dst in SBUF.
    let r = core.run(
        Engine::Tensor,
        matmul(
            sb(DType::F32, 2, 2, 32768),
            sb(DType::Bf16, 2, 2, 0),
            sb(DType::Bf16, 2, 2, 0),
            false,
        ),
    );
    expect_err(r, "dst", |k| {
        matches!(
            k,
            ErrorKind::MemoryNotAccessible {
                engine: "tensor",
                access: "write",
                memory: "SBUF"
            }
        )
    });
    // An input in PSUM.
    core.put(&ps(DType::F32, 2, 2, 0), &[1.0; 4]);
    let r = core.run(
        Engine::Tensor,
        matmul(
            ps(DType::F32, 2, 2, 2048),
            sb(DType::Bf16, 2, 2, 0),
            ps(DType::F32, 2, 2, 0),
            false,
        ),
    );
    expect_err(r, "moving", |k| {
        matches!(
            k,
            ErrorKind::MemoryNotAccessible {
                access: "read",
                memory: "PSUM",
                ..
            }
        )
    });
}

#[test]
fn matmul_runs_only_on_tensor_engine() {
    let p = {
        let mut p = Program::new(TargetName::Trn1);
        p.push(
            Engine::Vector,
            matmul(
                ps(DType::F32, 1, 1, 0),
                sb(DType::Bf16, 1, 1, 0),
                sb(DType::Bf16, 1, 1, 0),
                false,
            ),
        );
        p
    };
    let e = Executor::new(TargetName::Trn1).run(&p, &BTreeMap::new()).unwrap_err();
    assert!(
        matches!(
            e.kind,
            ErrorKind::WrongEngine {
                engine: "vector",
                opcode: "nc_matmul"
            }
        ),
        "{e}"
    );
}

// ---- transpose --------------------------------------------------------------------------------

fn transpose(dst: AccessPattern, src: AccessPattern) -> Op {
    Op::NcTranspose(NcTranspose { dst, src })
}

#[test]
fn transpose_moves_values_exactly() {
    // src [2 × 3] = [[1, 2, 3], [4, 5, 6]] → dst [3 × 2] = [[1, 4], [2, 5], [3, 6]].
    let mut core = Core::new();
    let s = sb(DType::Bf16, 2, 3, 0);
    core.put(&s, &[1., 2., 3., 4., 5., 6.]);
    let d = ps(DType::F32, 3, 2, 0);
    core.run(Engine::Tensor, transpose(d.clone(), s.clone())).unwrap();
    assert_eq!(core.get(&d), vec![1., 4., 2., 5., 3., 6.]);
    // Into a bf16 PSUM tile (dst dtype = input dtype): same values.
    let d16 = ps(DType::Bf16, 3, 2, 2048);
    core.run(Engine::Tensor, transpose(d16.clone(), s)).unwrap();
    assert_eq!(core.get(&d16), vec![1., 4., 2., 5., 3., 6.]);
    // Cost: max(P = 2, min(64, F = 3)) = 3 cycles each.
    assert!((core.stats.est_ns.tensor - 2.0 * 3.0 / 2.8).abs() < 1e-9);
}

#[test]
fn transpose_spreads_nan_and_inf_along_output_rows() {
    // src [3 × 3], columns → dst rows:
    //   column 0 = [7, NaN, 8]  → row 0: out[0][p] = Σ_k src[k][0]·I[k][p]; the k=1 product is
    //                             NaN·I[1][p] = NaN for every p → [NaN, NaN, NaN].
    //   column 1 = [1, 2, +Inf] → row 1: for p ≠ 2, Inf·0 = NaN → NaN; for p = 2,
    //                             0 + 0 + Inf·1 = Inf → [NaN, NaN, Inf].
    //   column 2 = [1, 2, 3]    → row 2: [1, 2, 3].
    let mut core = Core::new();
    let s = sb(DType::F32, 3, 3, 0);
    core.put(&s, &[7., 1., 1., f32::NAN, 2., 2., 8., f32::INFINITY, 3.]);
    let d = ps(DType::F32, 3, 3, 0);
    core.run(Engine::Tensor, transpose(d.clone(), s)).unwrap();
    let out = core.get(&d);
    assert!(out[0..3].iter().all(|x| x.is_nan()), "{out:?}");
    assert!(out[3].is_nan() && out[4].is_nan() && out[5] == f32::INFINITY, "{out:?}");
    assert_eq!(&out[6..9], &[1., 2., 3.]);
    // fp32 input: ×4 cost: max(3, min(64, 3)) · 4 = 12 cycles.
    assert!((core.stats.est_ns.tensor - 12.0 / 2.8).abs() < 1e-9);
}

#[test]
fn transpose_errors() {
    let mut core = loaded();
    // F = 129 > 128.
    let r = core.run(
        Engine::Tensor,
        transpose(ps(DType::F32, 129, 2, 0), sb(DType::Bf16, 2, 129, 0)),
    );
    expect_err(r, "src", |k| {
        matches!(
            k,
            ErrorKind::FreeSizeLimit {
                size: 129,
                limit: 128,
                ..
            }
        )
    });
    // Wrong dst shape ([2 × 3] for a [2 × 3] src).
    let r = core.run(
        Engine::Tensor,
        transpose(ps(DType::F32, 2, 3, 0), sb(DType::Bf16, 2, 3, 0)),
    );
    expect_err(r, "dst", |k| matches!(k, ErrorKind::ShapeMismatch(_)));
    // Integer input: no integer datapath.
    let r = core.run(
        Engine::Tensor,
        transpose(ps(DType::I32, 4, 2, 0), sb(DType::I32, 2, 4, 16384)),
    );
    expect_err(r, "src", |k| {
        matches!(k, ErrorKind::UnsupportedDType { dtype: "i32", .. })
    });
    // dst dtype neither fp32 nor the input's.
    let r = core.run(
        Engine::Tensor,
        transpose(ps(DType::F16, 2, 2, 0), sb(DType::Bf16, 2, 2, 0)),
    );
    expect_err(r, "dst", |k| {
        matches!(k, ErrorKind::UnsupportedDType { dtype: "f16", .. })
    });
    // dst in SBUF; src in PSUM.
    let r = core.run(
        Engine::Tensor,
        transpose(sb(DType::F32, 2, 2, 32768), sb(DType::Bf16, 2, 2, 0)),
    );
    expect_err(r, "dst", |k| matches!(k, ErrorKind::MemoryNotAccessible { .. }));
    core.put(&ps(DType::F32, 2, 2, 0), &[0.0; 4]);
    let r = core.run(
        Engine::Tensor,
        transpose(ps(DType::F32, 2, 2, 2048), ps(DType::F32, 2, 2, 0)),
    );
    expect_err(r, "src", |k| matches!(k, ErrorKind::MemoryNotAccessible { .. }));
    // Bank overflow: [4 × 128] fp32 (512 bytes per partition) at byte 1600.
    let r = core.run(
        Engine::Tensor,
        transpose(ps(DType::F32, 4, 128, 1600), sb(DType::Bf16, 128, 4, 0)),
    );
    expect_err(r, "dst", |k| matches!(k, ErrorKind::PsumBankOverflow { .. }));
}

// ---- through the executor ---------------------------------------------------------------------

#[test]
fn matmul_program_through_the_executor() {
    // The 2×3·3×2 product end to end: DMA in, matmul, PSUM → SBUF copy, DMA out; and the JSON
    // round trip of the program.
    let mut p = Program::new(TargetName::Trn1);
    p.declare("a_t", DType::Bf16, &[3, 2], HbmRole::Input);
    p.declare("b", DType::Bf16, &[3, 2], HbmRole::Input);
    p.declare("out", DType::F32, &[2, 2], HbmRole::Output);
    let dma = |dst, src| {
        Op::DmaCopy(DmaCopy {
            dst,
            src,
            accumulate: false,
            indirect: None,
        })
    };
    p.push(
        Engine::Dma,
        dma(
            sb(DType::Bf16, 3, 2, 0),
            AccessPattern::hbm("a_t", DType::Bf16, 0, 3, 2, vec![[1, 2]]),
        ),
    );
    p.push(
        Engine::Dma,
        dma(
            sb(DType::Bf16, 3, 2, 64),
            AccessPattern::hbm("b", DType::Bf16, 0, 3, 2, vec![[1, 2]]),
        ),
    );
    p.push(
        Engine::Tensor,
        matmul(
            ps(DType::F32, 2, 2, 0),
            sb(DType::Bf16, 3, 2, 0),
            sb(DType::Bf16, 3, 2, 64),
            false,
        ),
    );
    p.push(
        Engine::Vector,
        Op::TensorCopy(TensorCopy {
            dst: sb(DType::F32, 2, 2, 128),
            src: ps(DType::F32, 2, 2, 0),
        }),
    );
    p.push(
        Engine::Dma,
        dma(
            AccessPattern::hbm("out", DType::F32, 0, 2, 2, vec![[1, 2]]),
            sb(DType::F32, 2, 2, 128),
        ),
    );
    // Load, load, matmul, evict, store: each waits for what it reads (other queues).
    infer_waits(&mut p);
    let p = Program::from_json(&p.to_json()).unwrap();
    let mut inputs = BTreeMap::new();
    inputs.insert(
        "a_t".into(),
        HostTensor::from_f32_as(DType::Bf16, &[3, 2], &[1., 2., 3., 4., 5., 6.]),
    );
    inputs.insert(
        "b".into(),
        HostTensor::from_f32_as(DType::Bf16, &[3, 2], &[7., 8., 9., 10., 11., 12.]),
    );
    let run = Executor::new(TargetName::Trn1).run(&p, &inputs).unwrap();
    assert_eq!(run.outputs["out"].to_f32(), vec![89., 98., 116., 128.]);
    assert_eq!(run.stats.instructions.tensor, 1);
    assert_eq!(run.stats.flops, 24);

    // A bad matmul is reported with its index, engine, opcode and operand.
    let mut bad = p.clone();
    bad.instructions[2] = Instruction::new(
        Engine::Tensor,
        matmul(
            ps(DType::F32, 2, 2, 0),
            sb(DType::Bf16, 3, 2, 0),
            sb(DType::Bf16, 2, 2, 64),
            false,
        ),
    );
    let e = Executor::new(TargetName::Trn1).run(&bad, &inputs).unwrap_err();
    assert_eq!(
        (e.index, e.engine, e.opcode, e.operand.as_deref()),
        (Some(2), Some(Engine::Tensor), Some("nc_matmul"), Some("moving"))
    );
}

// ---- memory fast paths (added for the benchmarks) ----------------------------------------------

/// Byte address of every element of an on-chip or HBM pattern, computed independently of the
/// memory layer: partition-major, free offsets in pattern order.
fn addresses(ap: &AccessPattern, partition_bytes: usize) -> Vec<usize> {
    let size = ap.dtype.size() as i64;
    let offs = ap.free_offsets();
    let mut out = Vec::new();
    for p in 0..ap.partitions as i64 {
        for &o in &offs {
            let a = if ap.mem.is_on_chip() {
                (ap.start_partition as i64 + p) * partition_bytes as i64 + ap.offset as i64 + o * size
            } else {
                ap.offset as i64 + (p * ap.partition_step + o) * size
            };
            out.push(a as usize);
        }
    }
    out
}

#[test]
fn dma_and_raw_reads_writes_match_an_elementwise_reference() {
    // Random shapes, steps (unit, strided, zero, negative), dtypes and placements for DMA copies
    // HBM→SBUF, SBUF→HBM, SBUF→SBUF (overlapping) and HBM→HBM; the bytes that land must equal an
    // element-by-element copy computed from independent addresses.
    let mut seed = 0x9E37_79B9u64;
    let mut rnd = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for case in 0..300 {
        let dtype = [DType::F32, DType::Bf16, DType::U8, DType::I16][rnd(4) as usize];
        let size = dtype.size();
        let parts = 1 + rnd(4) as usize;
        let inner = 1 + rnd(6) as i64;
        let outer = 1 + rnd(3) as i64;
        let step = [1i64, 1, 2, 0, -1][rnd(5) as usize];
        let ostep = inner * step.abs().max(1) + rnd(3) as i64;
        let free = vec![[ostep, outer], [step, inner]];
        let span = (ostep * (outer - 1) + step.abs() * (inner - 1) + 1) as u64 * size as u64;
        let base = if step < 0 {
            (step.abs() * (inner - 1)) as u64 * size as u64
        } else {
            0
        };
        let n = parts * (outer * inner) as usize;
        let hbm_len = 4096usize;
        let mut p = Program::new(TargetName::Trn1);
        p.declare("a", dtype, &[hbm_len], HbmRole::Input);
        p.declare("b", dtype, &[hbm_len], HbmRole::Scratch);
        let mut mem = trnsim::mem::Memories::new(&TargetName::Trn1.params(), &p.hbm);
        let pb = mem.sbuf.partition_bytes;
        let init: Vec<u8> = (0..hbm_len * size).map(|_| rnd(256) as u8).collect();
        mem.load_input("a", &init).unwrap();
        // Fill SBUF partitions 0..8 with known bytes.
        let fill = AccessPattern::sbuf(DType::U8, 0, 8, 0, vec![[1, 4096]]);
        let fill_bytes: Vec<u32> = (0..8 * 4096).map(|_| rnd(256) as u32).collect();
        mem.write_bits(&fill, &fill_bytes).unwrap();
        let row_step = (span / size as u64) as i64 + rnd(3) as i64;
        let hbm = |name: &str, off: u64| AccessPattern {
            mem: MemSpace::Hbm(name.into()),
            dtype,
            start_partition: 0,
            partitions: parts,
            partition_step: row_step,
            offset: off * size as u64 + base,
            free: free.clone(),
        };
        let sbuf = |off: u64| AccessPattern::sbuf(dtype, 0, parts, off + base, free.clone());
        let (o1, o2) = (rnd(64), rnd(64));
        let (s1, s2) = (o1 % 16 * size as u64, o2 % 16 * size as u64);
        let (src, dst) = match case % 4 {
            0 => (hbm("a", o1), sbuf(o2 * size as u64)),
            1 => (sbuf(o1 * size as u64), hbm("b", o2)),
            2 => (sbuf(s1), sbuf(s2)),
            _ => (hbm("a", o1), hbm("b", o2)),
        };
        if case % 4 == 1 || case % 4 == 3 {
            // Scratch HBM must be written before it can be compared; zero it.
            let all = AccessPattern::hbm("b", dtype, 0, 1, 0, vec![[1, hbm_len as i64]]);
            mem.write_bits(&all, &vec![0; hbm_len]).unwrap();
        }
        let bytes_of = |mem: &trnsim::mem::Memories, ap: &AccessPattern| -> Vec<u8> {
            let data = match &ap.mem {
                MemSpace::Sbuf => &mem.sbuf.data,
                MemSpace::Psum => &mem.psum.data,
                MemSpace::Hbm(t) => &mem.hbm_tensor(t).unwrap().data,
            };
            addresses(ap, pb)
                .iter()
                .flat_map(|&a| data[a..a + size].to_vec())
                .collect()
        };
        let before_src = bytes_of(&mem, &src);
        // Reference result of dst: the source elements in order; where dst addresses repeat
        // (step 0), the last write wins.
        let mut want_dst = bytes_of(&mem, &dst);
        let dst_addr = addresses(&dst, pb);
        for (i, &a) in dst_addr.iter().enumerate() {
            for (j, &a2) in dst_addr.iter().enumerate() {
                if a2 == a {
                    want_dst[i * size..(i + 1) * size].copy_from_slice(&before_src[j * size..(j + 1) * size]);
                }
            }
        }
        let target = TargetName::Trn1.params();
        let numerics = Numerics::default();
        let mut rounding = Rounding::NearestEven;
        let mut regs = trnsim::engine::Registers::new(&target);
        let mut stats = Stats::default();
        let mut ctx = trnsim::engine::Ctx {
            mem: &mut mem,
            target: &target,
            numerics: &numerics,
            rounding: &mut rounding,
            engine: Engine::Dma,
            regs: &mut regs,
            stats: &mut stats,
        };
        let op = Op::DmaCopy(DmaCopy {
            dst: dst.clone(),
            src: src.clone(),
            accumulate: false,
            indirect: None,
        });
        trnsim::engine::execute(&mut ctx, &op).unwrap_or_else(|e| panic!("case {case}: {e:?}\n{src}\n{dst}"));
        assert_eq!(bytes_of(&mem, &dst), want_dst, "case {case}: {src} -> {dst}");
        // The raw read of dst agrees with the independent addresses too.
        let got_bits = mem.read_bits(&dst).unwrap();
        let want_bits: Vec<u32> = want_dst
            .chunks(size)
            .map(|c| c.iter().rev().fold(0u32, |acc, &b| (acc << 8) | b as u32))
            .collect();
        assert_eq!(got_bits, want_bits, "case {case}");
        assert_eq!(n, got_bits.len());
    }
}

#[test]
fn uninitialized_reads_are_found_after_partial_and_out_of_order_writes() {
    // The memory layer caches a per-partition "written prefix"; reads must still find the first
    // unwritten byte exactly, whatever the order of writes.
    let mut core = Core::new();
    let u8s = |off: u64, n: usize| AccessPattern::sbuf(DType::U8, 0, 2, off, vec![[1, n as i64]]);
    let first_unwritten = |core: &Core, ap: &AccessPattern| match core.mem.read_bits(ap) {
        Err(ErrorKind::UninitializedRead { partition, byte, .. }) => Some((partition, byte)),
        Err(e) => panic!("{e}"),
        Ok(_) => None,
    };
    core.put_bits(&u8s(0, 100), &[1; 200]); // bytes 0..100 of partitions 0, 1
    assert_eq!(first_unwritten(&core, &u8s(0, 100)), None);
    assert_eq!(first_unwritten(&core, &u8s(50, 100)), Some((0, 100)));
    core.put_bits(&u8s(200, 100), &[1; 200]); // a gap 100..200
    assert_eq!(first_unwritten(&core, &u8s(200, 100)), None);
    assert_eq!(first_unwritten(&core, &u8s(0, 300)), Some((0, 100)));
    // Partition 1 alone gets the gap filled: partition 0 still reports it.
    core.put_bits(
        &at_partition(AccessPattern::sbuf(DType::U8, 0, 1, 100, vec![[1, 100]]), 1),
        &[1; 100],
    );
    let p0 = AccessPattern::sbuf(DType::U8, 0, 1, 0, vec![[1, 300]]);
    let p1 = at_partition(p0.clone(), 1);
    assert_eq!(first_unwritten(&core, &p1), None);
    assert_eq!(first_unwritten(&core, &p0), Some((0, 100)));
    // A strided write into the gap leaves every other byte unwritten.
    core.put_bits(&AccessPattern::sbuf(DType::U8, 0, 1, 100, vec![[2, 50]]), &[1; 50]);
    assert_eq!(first_unwritten(&core, &p0), Some((0, 101)));
    core.put_bits(&AccessPattern::sbuf(DType::U8, 0, 1, 101, vec![[2, 50]]), &[1; 50]);
    assert_eq!(first_unwritten(&core, &p0), None);
    assert_eq!(
        first_unwritten(&core, &AccessPattern::sbuf(DType::U8, 0, 1, 0, vec![[1, 301]])),
        Some((0, 300))
    );
    // f32 writes through write_f32 and PSUM behave the same.
    core.put(&ps(DType::F32, 1, 4, 8), &[1.0; 4]);
    assert_eq!(first_unwritten(&core, &ps(DType::F32, 1, 6, 0)), Some((0, 0)));
    assert_eq!(first_unwritten(&core, &ps(DType::F32, 1, 4, 8)), None);
    assert_eq!(first_unwritten(&core, &ps(DType::F32, 1, 5, 8)), Some((0, 24)));
}

#[test]
fn slice_alu_fast_path_is_bit_identical() {
    // `alu::apply_f32_inplace` (used by tensor_tensor for speed) against `alu::apply_f32`.
    use trnsim::engine::alu::{apply_f32, apply_f32_inplace};
    let special = [
        0.0f32,
        -0.0,
        1.0,
        -1.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::from_bits(1),
        f32::MAX,
        3e-39,
    ];
    let a: Vec<f32> = special.iter().flat_map(|&x| special.iter().map(move |_| x)).collect();
    let b: Vec<f32> = special.iter().flat_map(|_| special.iter().copied()).collect();
    let ops = [
        AluOp::Add,
        AluOp::Subtract,
        AluOp::Multiply,
        AluOp::Max,
        AluOp::Min,
        AluOp::IsLt,
        AluOp::Average,
    ];
    for denormals in [Denormals::Preserve, Denormals::FlushToZero] {
        let n = Numerics {
            denormals,
            ..Numerics::default()
        };
        for op in ops {
            let mut got = a.clone();
            apply_f32_inplace(op, &mut got, &b, &n);
            let want: Vec<f32> = a.iter().zip(&b).map(|(&x, &y)| apply_f32(op, x, y, &n)).collect();
            assert_eq!(bits(&got), bits(&want), "{op:?} {denormals:?}");
        }
    }
}

#[test]
fn empty_shapes_do_not_panic() {
    for order in [MatmulAccumulation::Sequential, MatmulAccumulation::Pairwise] {
        let mut core = Core::with_numerics(Numerics {
            matmul_accumulation: order,
            ..Numerics::default()
        });
        core.put(&sb(DType::Bf16, 4, 8, 0), &[1.0; 32]);
        let empty = |p: usize, f: usize| AccessPattern::sbuf(DType::Bf16, 0, p, 0, vec![[1, f as i64]]);
        let psum = |p: usize, f: usize| AccessPattern::psum(DType::F32, 0, p, 0, vec![[1, f as i64]]);
        // M = 0, N = 0, and both; transposes of [0 × 4] and [4 × 0].
        let _ = core.run(Engine::Tensor, matmul(psum(0, 4), empty(4, 0), empty(4, 4), false));
        let _ = core.run(Engine::Tensor, matmul(psum(4, 0), empty(4, 4), empty(4, 0), false));
        let _ = core.run(Engine::Tensor, matmul(psum(0, 0), empty(4, 0), empty(4, 0), true));
        let _ = core.run(Engine::Tensor, transpose(psum(4, 0), empty(0, 4)));
        let _ = core.run(Engine::Tensor, transpose(psum(0, 4), empty(4, 0)));
    }
}
