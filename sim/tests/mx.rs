//! NeuronCore-v4 microscaling (MX): the dtypes `float8_e8m0fnu`, `float4_e2m1fn` and the `_x4`
//! packed containers (every code against a hand table), `quantize_mx` (VectorE) and
//! `nc_matmul_mx` (TensorE) with hand-derived expectations, one test per typed error, and the
//! generation refusals (an NC-v4 instruction or dtype on trn2, an NC-v3 instruction on trn1).

mod common_tg;

use common_tg::*;
use std::collections::BTreeMap;
use trnsim::*;

fn trn3() -> Core {
    Core::on(TargetName::Trn3, Numerics::default())
}

// ---- dtypes: every code against an independent table ------------------------------------------

/// `float4_e2m1fn`, written out by hand from the OCP MX spec's E2M1 table (bias 1, one mantissa
/// bit, no inf/NaN): codes 0..16.
const E2M1_TABLE: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

#[test]
fn e2m1fn_every_code_decodes_and_round_trips() {
    for (code, &want) in E2M1_TABLE.iter().enumerate() {
        let got = DType::Fp4E2m1fn.decode_f32(code as u32);
        assert_eq!(got.to_bits(), want.to_bits(), "code {code:#x}");
        assert_eq!(
            DType::Fp4E2m1fn.encode_f32(want, &mut Rounding::NearestEven),
            code as u32
        );
    }
}

#[test]
fn e2m1fn_encode_rounds_to_nearest_even_and_saturates() {
    // (value, code): ties go to the even code; beyond 6 (and ±inf) saturates; NaN → a zero of
    // the opposite sign, as ml_dtypes 0.7 writes it.
    let cases: [(f32, u32); 16] = [
        (0.25, 0x0),
        (0.26, 0x1),
        (0.75, 0x2),
        (1.25, 0x2),
        (1.75, 0x4),
        (2.5, 0x4),
        (3.5, 0x6),
        (5.0, 0x6),
        (5.1, 0x7),
        (100.0, 0x7),
        (f32::INFINITY, 0x7),
        (f32::NEG_INFINITY, 0xF),
        (-0.1, 0x8),
        (-2.75, 0xD),
        (f32::NAN, 0x8),
        (-f32::NAN, 0x0),
    ];
    for (x, want) in cases {
        assert_eq!(DType::Fp4E2m1fn.encode_f32(x, &mut Rounding::NearestEven), want, "{x}");
    }
}

#[test]
fn e8m0fnu_every_code_decodes_and_round_trips() {
    // Independent table: code c is 2^(c - 127) (exact in f64, then f32 for c ≥ 0: 2^-127 is an
    // fp32 subnormal); 0xFF is NaN.
    for code in 0u32..256 {
        let got = DType::Fp8E8m0fnu.decode_f32(code);
        if code == 0xFF {
            assert!(got.is_nan());
            continue;
        }
        let want = 2f64.powi(code as i32 - 127) as f32;
        assert_eq!(got.to_bits(), want.to_bits(), "code {code}");
        assert_eq!(DType::Fp8E8m0fnu.encode_f32(want, &mut Rounding::NearestEven), code);
    }
}

#[test]
fn e8m0fnu_encode_rounds_by_value_and_has_no_zero() {
    // A mantissa of 1.5 rounds up; below 2^-127 gives code 0; 0, negatives, inf, NaN and
    // overflow give the NaN code (ml_dtypes 0.7).
    let cases: [(f32, u32); 12] = [
        (1.0, 127),
        (1.4999, 127),
        (1.5, 128),
        (3.0, 129),
        (0.75, 127),
        (f32::from_bits(0x0060_0000), 1),
        (f32::from_bits(1), 0),
        (1.5 * 2f32.powi(127), 255),
        (0.0, 255),
        (-1.0, 255),
        (f32::INFINITY, 255),
        (f32::NAN, 255),
    ];
    for (x, want) in cases {
        assert_eq!(DType::Fp8E8m0fnu.encode_f32(x, &mut Rounding::NearestEven), want, "{x}");
    }
}

/// OCP `float8_e4m3fn` by hand: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is
/// subnormal (m·2^-9); S.1111.111 is NaN; no inf.
fn e4m3fn_by_hand(code: u8) -> f32 {
    let s = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((code >> 3) & 0xF);
    let m = f64::from(code & 7);
    if code & 0x7F == 0x7F {
        return f32::NAN;
    }
    let v = if e == 0 {
        m * 2f64.powi(-9)
    } else {
        (1.0 + m / 8.0) * 2f64.powi(e - 7)
    };
    (s * v) as f32
}

#[test]
fn e4m3fn_every_code_decodes_and_round_trips() {
    for code in 0u8..=255 {
        let want = e4m3fn_by_hand(code);
        let got = DType::Fp8E4m3fn.decode_f32(u32::from(code));
        if want.is_nan() {
            assert!(got.is_nan(), "code {code:#x}");
            continue;
        }
        assert_eq!(got.to_bits(), want.to_bits(), "code {code:#x}");
        assert_eq!(
            DType::Fp8E4m3fn.encode_f32(want, &mut Rounding::NearestEven),
            u32::from(code)
        );
    }
}

/// OCP `float8_e5m2` (the other MXFP8 element) by hand: sign, 5 exponent bits (bias 15), 2
/// mantissa bits; exponent 0 is subnormal (m·2^-16); exponent 31 is ±inf (m = 0) or NaN.
fn e5m2_by_hand(code: u8) -> f32 {
    let s = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((code >> 2) & 0x1F);
    let m = f64::from(code & 3);
    let v = match e {
        31 if m == 0.0 => f64::INFINITY,
        31 => return f32::NAN,
        0 => m * 2f64.powi(-16),
        _ => (1.0 + m / 4.0) * 2f64.powi(e - 15),
    };
    (s * v) as f32
}

#[test]
fn e5m2_every_code_decodes_and_round_trips() {
    for code in 0u8..=255 {
        let want = e5m2_by_hand(code);
        let got = DType::Fp8E5m2.decode_f32(u32::from(code));
        if want.is_nan() {
            assert!(got.is_nan(), "code {code:#x}");
            continue;
        }
        assert_eq!(got.to_bits(), want.to_bits(), "code {code:#x}");
        assert_eq!(
            DType::Fp8E5m2.encode_f32(want, &mut Rounding::NearestEven),
            u32::from(code)
        );
    }
}

/// Every code of each packed container's element, in each of the 4 slots (the other slots
/// holding other codes), packs to the little-endian word written out by hand and decodes to its
/// hand-table value.
#[test]
fn packed_containers_hold_every_code_in_every_slot() {
    let fp8_table = |d: DType, c: u32| match d {
        DType::Fp8E4m3fn => e4m3fn_by_hand(c as u8),
        _ => e5m2_by_hand(c as u8),
    };
    for (d, element, width) in [
        (DType::Fp8E5m2X4, DType::Fp8E5m2, 8u32),
        (DType::Fp8E4m3fnX4, DType::Fp8E4m3fn, 8),
        (DType::Fp4E2m1fnX4, DType::Fp4E2m1fn, 4),
    ] {
        let n = 1u32 << width;
        for c in 0..n {
            for slot in 0..4 {
                let mut codes = [(c + 1) % n, (c + 2) % n, (c + 3) % n, (c + 5) % n];
                codes[slot] = c;
                let by_hand = codes
                    .iter()
                    .enumerate()
                    .fold(0u32, |w, (k, &x)| w + x * (1u32 << (width * k as u32)));
                let word = engine::mx::pack(d, codes);
                assert_eq!(word, by_hand, "{d} code {c:#x} slot {slot}");
                let back = engine::mx::unpack(d, word, slot);
                assert_eq!(back, c, "{d} code {c:#x} slot {slot}");
                let want = if width == 4 {
                    E2M1_TABLE[c as usize]
                } else {
                    fp8_table(element, c)
                };
                let got = element.decode_f32(back);
                assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "{d} code {c:#x}: {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn packed_containers_hold_four_codes() {
    for (d, size, element, bits) in [
        (DType::Fp8E5m2X4, 4, DType::Fp8E5m2, 8),
        (DType::Fp8E4m3fnX4, 4, DType::Fp8E4m3fn, 8),
        (DType::Fp4E2m1fnX4, 2, DType::Fp4E2m1fn, 4),
    ] {
        assert_eq!(d.size(), size, "{d}");
        assert_eq!(d.packed_element(), Some((element, 4)));
        assert_eq!(element.code_bits(), bits);
        assert!(d.is_packed() && !d.is_float() && !d.is_int());
        let codes = [1, 2, 3, 4];
        let word = engine::mx::pack(d, codes);
        assert_eq!(
            (0..4).map(|k| engine::mx::unpack(d, word, k)).collect::<Vec<_>>(),
            codes
        );
    }
    // Little-endian: code k in byte k (nibble k for fp4).
    assert_eq!(
        engine::mx::pack(DType::Fp8E4m3fnX4, [0x11, 0x22, 0x33, 0x44]),
        0x4433_2211
    );
    assert_eq!(engine::mx::pack(DType::Fp4E2m1fnX4, [0x1, 0x2, 0x3, 0x4]), 0x4321);
}

/// A typed-error case: the operand the error names, an edit that breaks a valid instruction, and
/// the error kind expected.
type ErrorCase<T> = (&'static str, fn(&mut T), fn(&ErrorKind) -> bool);

// ---- quantize_mx ------------------------------------------------------------------------------

fn quantize(dst_dtype: DType, p: usize, f: usize) -> QuantizeMx {
    QuantizeMx {
        dst: sb(dst_dtype, p, f / 4, 4096),
        src: sb(DType::Bf16, p, f, 0),
        dst_scale: sb(DType::Fp8E8m0fnu, engine::mx::scale_partitions(p), f / 4, 8192),
    }
}

/// A [32 × 8] bf16 tile: column group 0 of row group 0 holds 1.0 with one 3.0; row group 1 is
/// all zero; row group 2 has a NaN; row group 3 holds 1.1015625; column group 1 is all −0.5.
fn quantize_input() -> Vec<f32> {
    let mut v = vec![0.0f32; 32 * 8];
    for p in 0..32 {
        for k in 0..4 {
            v[p * 8 + k] = match p / 8 {
                0 => 1.0,
                1 => 0.0,
                2 => 2.0,
                _ => 1.1015625,
            };
            v[p * 8 + 4 + k] = -0.5;
        }
    }
    v[3 * 8 + 2] = 3.0;
    v[17 * 8 + 1] = f32::NAN;
    v
}

#[test]
fn quantize_mx_scales_each_group_by_twice_the_ocp_scale() {
    // e4m3fn (emax 8): group amax 3.0 → floor(log2 3) = 1 → scale 2^(1 − 8 + 1) = 2^-6, code 121;
    // 1.0 → 64 = 0x68, 3.0 → 192 = 0x74. Zero group → code 0, codes 0. NaN group → 0xFF, NaN
    // codes 0x7F. amax 1.1015625 → scale 2^-7 (code 120): 141 → RNE 144 = 0x71. −0.5 groups:
    // floor(log2 0.5) = −1 → 2^-8 (code 119), −128 = 0xF0.
    let mut core = trn3();
    let op = quantize(DType::Fp8E4m3fnX4, 32, 8);
    core.put(&op.src, &quantize_input());
    core.run(Engine::Vector, Op::QuantizeMx(op.clone())).unwrap();
    let scales = core.get_bits(&op.dst_scale);
    assert_eq!(scales, vec![121, 119, 0, 119, 0xFF, 119, 120, 119]);
    let dst = core.get_bits(&op.dst);
    let word = |codes: [u32; 4]| engine::mx::pack(DType::Fp8E4m3fnX4, codes);
    assert_eq!(dst[0], word([0x68; 4]));
    assert_eq!(dst[3 * 2], word([0x68, 0x68, 0x74, 0x68]));
    assert_eq!(dst[1], word([0xF0; 4]));
    assert_eq!(dst[9 * 2], word([0; 4]));
    assert_eq!(dst[17 * 2], word([0x7F; 4]));
    assert_eq!(dst[30 * 2], word([0x71; 4]));
    // e5m2 (emax 15): 3.0 → 2^(1 − 15 + 1) = 2^-13, code 114; 1.0 → 8192 = 0x70, 3.0 → 0x76.
    let mut core = trn3();
    let op = quantize(DType::Fp8E5m2X4, 32, 8);
    core.put(&op.src, &quantize_input());
    core.run(Engine::Vector, Op::QuantizeMx(op.clone())).unwrap();
    assert_eq!(core.get_bits(&op.dst_scale)[0], 114);
    let dst = core.get_bits(&op.dst);
    assert_eq!(dst[3 * 2], engine::mx::pack(DType::Fp8E5m2X4, [0x70, 0x70, 0x76, 0x70]));
    // Cost: max(MIN_II, F / 4) VectorE cycles at trn3's 1.2 GHz.
    assert!((core.stats.est_ns.vector - 64.0 / 1.2).abs() < 1e-9);
}

#[test]
fn quantize_mx_element_rounding_is_a_setting() {
    // 1.1015625 / 2^-7 = 141: toward zero gives 128 = 0x70 (nearest even gave 0x71).
    let numerics = Numerics {
        mx_element_rounding: MxElementRounding::TowardZero,
        ..Numerics::default()
    };
    let mut core = Core::on(TargetName::Trn3, numerics);
    let op = quantize(DType::Fp8E4m3fnX4, 32, 8);
    core.put(&op.src, &quantize_input());
    core.run(Engine::Vector, Op::QuantizeMx(op.clone())).unwrap();
    let dst = core.get_bits(&op.dst);
    assert_eq!(dst[30 * 2], engine::mx::pack(DType::Fp8E4m3fnX4, [0x70; 4]));
    // Exactly representable codes are unchanged.
    assert_eq!(dst[0], engine::mx::pack(DType::Fp8E4m3fnX4, [0x68; 4]));
}

#[test]
fn quantize_mx_spreads_scales_over_quadrants() {
    // 64 partitions: the scale tile is 64 partitions tall; quadrant q's 4 scale rows sit at
    // partitions 32q..32q+4. Quadrant 1 holds 4.0 (scale 2^(2 − 8 + 1), code 122).
    let mut core = trn3();
    let op = quantize(DType::Fp8E4m3fnX4, 64, 4);
    let vals: Vec<f32> = (0..64 * 4).map(|i| if i < 128 { 1.0 } else { 4.0 }).collect();
    core.put(&op.src, &vals);
    core.run(Engine::Vector, Op::QuantizeMx(op.clone())).unwrap();
    let q0 = sb(DType::Fp8E8m0fnu, 4, 1, 8192);
    assert_eq!(core.get_bits(&q0), vec![120; 4]);
    assert_eq!(core.get_bits(&at_partition(q0.clone(), 32)), vec![122; 4]);
    // The partitions between hold no scale (never written).
    assert!(core.mem.read_bits(&at_partition(q0, 4)).is_err());
}

#[test]
fn quantize_mx_errors() {
    let cases: [ErrorCase<QuantizeMx>; 9] = [
        (
            "src",
            |q| q.src.mem = MemSpace::Psum,
            |k| matches!(k, ErrorKind::MemoryNotAccessible { .. }),
        ),
        (
            "src",
            |q| q.src.dtype = DType::F32,
            |k| matches!(k, ErrorKind::UnsupportedDType { .. }),
        ),
        (
            "dst",
            |q| q.dst.dtype = DType::U32,
            |k| matches!(k, ErrorKind::UnsupportedDType { .. }),
        ),
        (
            "src",
            |q| q.src.partitions = 16,
            |k| matches!(k, ErrorKind::ShapeMismatch(_)),
        ),
        (
            "src",
            |q| q.src.free = vec![[1, 6]],
            |k| matches!(k, ErrorKind::ShapeMismatch(_)),
        ),
        (
            "dst",
            |q| q.dst.free = vec![[1, 1]],
            |k| matches!(k, ErrorKind::ShapeMismatch(_)),
        ),
        (
            "dst_scale",
            |q| q.dst_scale.dtype = DType::F32,
            |k| matches!(k, ErrorKind::UnsupportedDType { .. }),
        ),
        (
            "dst_scale",
            |q| q.dst_scale.partitions = 8,
            |k| matches!(k, ErrorKind::ShapeMismatch(_)),
        ),
        (
            "dst_scale",
            |q| q.dst_scale.start_partition = 32,
            |k| matches!(k, ErrorKind::Invalid(_)),
        ),
    ];
    for (operand, edit, pred) in cases {
        let mut core = trn3();
        let mut op = quantize(DType::Fp8E4m3fnX4, 32, 8);
        core.put(&op.src, &quantize_input());
        edit(&mut op);
        expect_err(core.run(Engine::Vector, Op::QuantizeMx(op)), operand, pred);
    }
}

// ---- nc_matmul_mx -----------------------------------------------------------------------------

/// Stationary [32 × 2] e4m3fn_x4 of 1.0 (0x38) with scale 1.0 (code 127); moving [32 × 3]
/// e5m2_x4 of 1.0 (0x3C) whose 4 scale rows are 2^0, 2^1, 2^2, 2^3 (codes 127..131).
fn matmul_core(moving_dtype: DType, one: u32) -> (Core, NcMatmulMx) {
    let mut core = trn3();
    let op = NcMatmulMx {
        dst: ps(DType::F32, 2, 3, 0),
        stationary: sb(DType::Fp8E4m3fnX4, 32, 2, 0),
        moving: sb(moving_dtype, 32, 3, 64),
        stationary_scale: sb(DType::Fp8E8m0fnu, 4, 2, 128),
        moving_scale: sb(DType::U8, 4, 3, 160),
        accumulate: false,
        tile_position: None,
        tile_size: None,
    };
    core.put_bits(&op.stationary, &[engine::mx::pack(DType::Fp8E4m3fnX4, [0x38; 4]); 64]);
    core.put_bits(&op.moving, &vec![engine::mx::pack(moving_dtype, [one; 4]); 96]);
    core.put_bits(&op.stationary_scale, &[127; 8]);
    core.put_bits(
        &op.moving_scale,
        &[127, 127, 127, 128, 128, 128, 129, 129, 129, 130, 130, 130],
    );
    (core, op)
}

#[test]
fn nc_matmul_mx_applies_each_groups_scale() {
    // K = 4 × 32 = 128 products of 1·1, scaled by the moving group's scale: each row group of
    // 8 partitions × 4 codes contributes 32·2^j, j = 0..4 → 32·(1 + 2 + 4 + 8) = 480.
    for (moving, one) in [(DType::Fp8E5m2X4, 0x3C), (DType::Fp4E2m1fnX4, 0x2)] {
        let (mut core, op) = matmul_core(moving, one);
        core.run(Engine::Tensor, Op::NcMatmulMx(op.clone())).unwrap();
        assert_eq!(core.get(&op.dst), vec![480.0; 6], "{moving}");
        // Accumulate adds to PSUM: 960.
        let acc = NcMatmulMx {
            accumulate: true,
            ..op.clone()
        };
        core.run(Engine::Tensor, Op::NcMatmulMx(acc)).unwrap();
        assert_eq!(core.get(&op.dst), vec![960.0; 6]);
        // 2·K·M·N flops per instruction.
        assert_eq!(core.stats.flops, 2 * 2 * 128 * 2 * 3);
    }
    // A NaN scale makes every output it reaches NaN; a bf16 destination is rounded on write.
    let (mut core, mut op) = matmul_core(DType::Fp8E5m2X4, 0x3C);
    core.put_bits(&op.stationary_scale, &[0xFF, 127, 127, 127, 127, 127, 127, 127]);
    op.dst = ps(DType::Bf16, 2, 3, 0);
    core.run(Engine::Tensor, Op::NcMatmulMx(op.clone())).unwrap();
    let got = core.get(&op.dst);
    assert!(got[..3].iter().all(|v| v.is_nan()), "{got:?}");
    assert_eq!(&got[3..], &[480.0; 3]);
}

#[test]
fn nc_matmul_mx_row_tiling_is_checked_and_does_not_change_results() {
    let (mut core, mut op) = matmul_core(DType::Fp8E5m2X4, 0x3C);
    op.tile_position = Some([96, 0]);
    op.tile_size = Some([32, 128]);
    core.run(Engine::Tensor, Op::NcMatmulMx(op.clone())).unwrap();
    assert_eq!(core.get(&op.dst), vec![480.0; 6]);
}

#[test]
fn nc_matmul_mx_errors() {
    let cases: [ErrorCase<NcMatmulMx>; 14] = [
        (
            "moving",
            |o| o.moving.mem = MemSpace::Psum,
            |k| matches!(k, ErrorKind::MemoryNotAccessible { .. }),
        ),
        (
            "stationary",
            |o| o.stationary.dtype = DType::U32,
            |k| matches!(k, ErrorKind::UnsupportedDType { .. }),
        ),
        (
            "dst",
            |o| o.dst.dtype = DType::I32,
            |k| matches!(k, ErrorKind::UnsupportedDType { .. }),
        ),
        (
            "stationary",
            |o| o.stationary.partitions = 48,
            |k| matches!(k, ErrorKind::ShapeMismatch(_)),
        ),
        (
            "moving",
            |o| o.moving.partitions = 64,
            |k| matches!(k, ErrorKind::ShapeMismatch(_)),
        ),
        (
            "stationary",
            |o| o.stationary.free = vec![[1, 3]],
            |k| matches!(k, ErrorKind::ShapeMismatch(_)),
        ),
        (
            "moving",
            |o| o.moving.free = vec![[1, 513]],
            |k| matches!(k, ErrorKind::FreeSizeLimit { .. }),
        ),
        (
            "moving_scale",
            |o| o.moving_scale.free = vec![[1, 2]],
            |k| matches!(k, ErrorKind::ShapeMismatch(_)),
        ),
        (
            "dst",
            |o| o.dst.partitions = 3,
            |k| matches!(k, ErrorKind::ShapeMismatch(_)),
        ),
        (
            "dst",
            |o| o.dst.offset = 2040,
            |k| matches!(k, ErrorKind::PsumBankOverflow { .. }),
        ),
        (
            "tile_size",
            |o| o.tile_position = Some([0, 0]),
            |k| matches!(k, ErrorKind::Invalid(_)),
        ),
        (
            "tile_size",
            |o| {
                o.tile_position = Some([0, 0]);
                o.tile_size = Some([16, 128]);
            },
            |k| matches!(k, ErrorKind::Invalid(_)),
        ),
        (
            "tile_position",
            |o| {
                o.tile_position = Some([16, 0]);
                o.tile_size = Some([32, 128]);
            },
            |k| matches!(k, ErrorKind::Invalid(_)),
        ),
        (
            "stationary",
            |o| {
                o.stationary.partitions = 64;
                o.moving.partitions = 64;
                o.stationary_scale.partitions = 64;
                o.moving_scale.partitions = 64;
                o.tile_position = Some([0, 0]);
                o.tile_size = Some([32, 128]);
            },
            |k| matches!(k, ErrorKind::ShapeMismatch(_)),
        ),
    ];
    for (operand, edit, pred) in cases {
        let (mut core, mut op) = matmul_core(DType::Fp8E5m2X4, 0x3C);
        edit(&mut op);
        expect_err(core.run(Engine::Tensor, Op::NcMatmulMx(op)), operand, pred);
    }
}

/// Block-scaled matmul against an independent f64 reference on pseudo-random codes and scales,
/// every element format: the fp32 result is within the sequential-summation bound
/// `(K − 1)·2^-24·Σ_k |s_k·m_k|` of the exact value (products of MX values are exact in fp32).
#[test]
fn nc_matmul_mx_matches_a_block_scaled_reference() {
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for (sd, md) in [
        (DType::Fp8E4m3fnX4, DType::Fp8E5m2X4),
        (DType::Fp4E2m1fnX4, DType::Fp8E4m3fnX4),
        (DType::Fp4E2m1fnX4, DType::Fp4E2m1fnX4),
    ] {
        let (kp, m, n) = (64, 4, 6);
        let mut core = trn3();
        let op = NcMatmulMx {
            dst: ps(DType::F32, m, n, 0),
            stationary: sb(sd, kp, m, 0),
            moving: sb(md, kp, n, 64),
            stationary_scale: sb(DType::Fp8E8m0fnu, kp, m, 128),
            moving_scale: sb(DType::Fp8E8m0fnu, kp, n, 192),
            accumulate: false,
            tile_position: None,
            tile_size: None,
        };
        // Finite codes only: fp8 NaN codes (S.1111.111 for e4m3fn, exponent 31 for e5m2) are
        // replaced by 0.
        let finite = |d: DType, c: u32| {
            let (e, _) = d.packed_element().unwrap();
            if e.decode_f32(c).is_finite() { c } else { 0 }
        };
        let codes_of = |d: DType, count: usize, next: &mut dyn FnMut() -> u64| -> Vec<u32> {
            (0..count)
                .map(|_| {
                    let r = next();
                    let codes = std::array::from_fn(|k| finite(d, ((r >> (8 * k)) & 0xFF) as u32));
                    engine::mx::pack(d, codes)
                })
                .collect()
        };
        let sbits = codes_of(sd, kp * m, &mut next);
        let mbits = codes_of(md, kp * n, &mut next);
        let sscale: Vec<u32> = (0..kp * m).map(|_| 120 + (next() % 12) as u32).collect();
        let mscale: Vec<u32> = (0..kp * n).map(|_| 120 + (next() % 12) as u32).collect();
        core.put_bits(&op.stationary, &sbits);
        core.put_bits(&op.moving, &mbits);
        // Scale rows: partitions 32q..32q+4 of each tile (the rest is never read).
        for q in 0..kp / 32 {
            let piece = |ap: &AccessPattern| AccessPattern {
                start_partition: 32 * q,
                partitions: 4,
                ..ap.clone()
            };
            core.put_bits(&piece(&op.stationary_scale), &sscale[q * 4 * m..(q + 1) * 4 * m]);
            core.put_bits(&piece(&op.moving_scale), &mscale[q * 4 * n..(q + 1) * 4 * n]);
        }
        core.run(Engine::Tensor, Op::NcMatmulMx(op.clone())).unwrap();
        let got = core.get(&op.dst);
        let deq = |d: DType, bits: &[u32], scales: &[u32], f: usize, p: usize, c: usize, k: usize| {
            let (e, _) = d.packed_element().unwrap();
            let code = engine::mx::unpack(d, bits[p * f + c], k);
            let row = (p / 32) * 4 + (p % 32) / 8;
            f64::from(e.decode_f32(code)) * 2f64.powi(scales[row * f + c] as i32 - 127)
        };
        for mi in 0..m {
            for ni in 0..n {
                let (mut exact, mut abs) = (0.0f64, 0.0f64);
                for p in 0..kp {
                    for k in 0..4 {
                        let t = deq(sd, &sbits, &sscale, m, p, mi, k) * deq(md, &mbits, &mscale, n, p, ni, k);
                        exact += t;
                        abs += t.abs();
                    }
                }
                let bound = (4 * kp - 1) as f64 * 2f64.powi(-24) * abs;
                let err = (f64::from(got[mi * n + ni]) - exact).abs();
                assert!(
                    err <= bound,
                    "{sd} × {md} [{mi}, {ni}]: {} vs {exact}, bound {bound}",
                    got[mi * n + ni]
                );
            }
        }
    }
}

// ---- generation refusals ----------------------------------------------------------------------

fn refusal(target: TargetName, engine: Engine, op: Op) -> SimError {
    let mut p = Program::new(target);
    p.push(engine, op);
    Executor::new(target).run(&p, &BTreeMap::new()).unwrap_err()
}

#[test]
fn nc_v4_instructions_are_refused_on_trn2_naming_the_generation() {
    let (_, mm) = matmul_core(DType::Fp8E5m2X4, 0x3C);
    for (engine, op) in [
        (Engine::Vector, Op::QuantizeMx(quantize(DType::Fp8E4m3fnX4, 32, 8))),
        (Engine::Tensor, Op::NcMatmulMx(mm)),
    ] {
        let name = op.name();
        let e = refusal(TargetName::Trn2, engine, op);
        assert!(
            matches!(e.kind, ErrorKind::NotOnTarget { opcode, target } if opcode == name && target == "trn2 (NeuronCore-v3)"),
            "{e:?}"
        );
        assert!(e.to_string().contains("not available on trn2 (NeuronCore-v3)"), "{e}");
    }
}

#[test]
fn an_nc_v3_instruction_is_refused_on_trn1_naming_the_generation() {
    let op = Op::RangeSelect(RangeSelect {
        dst: sb(DType::F32, 2, 6, 256),
        on_true: sb(DType::F32, 2, 6, 0),
        comp0: RangeCmp::GreaterEqual,
        bound0: ScalarOperand::Imm(0.0),
        comp1: RangeCmp::Less,
        bound1: ScalarOperand::Imm(4.0),
        range_start: 0.0,
        on_false: f64::from(f32::MIN),
        reduce_res: None,
    });
    let e = refusal(TargetName::Trn1, Engine::Vector, op);
    assert!(
        matches!(
            e.kind,
            ErrorKind::NotOnTarget {
                opcode: "range_select",
                target: "trn1 (NeuronCore-v2)"
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("not available on trn1 (NeuronCore-v2)"), "{e}");
}

#[test]
fn mx_dtypes_are_refused_before_nc_v4_and_packed_ones_outside_mx_instructions() {
    for d in [
        DType::Fp8E8m0fnu,
        DType::Fp4E2m1fn,
        DType::Fp8E4m3fnX4,
        DType::Fp8E5m2X4,
        DType::Fp4E2m1fnX4,
    ] {
        for t in [TargetName::Trn1, TargetName::Trn2] {
            assert!(!t.params().has_dtype(d), "{d} on {}", t.name());
        }
        assert!(TargetName::Trn3.params().has_dtype(d));
    }
    let copy = |dst: DType| {
        Op::TensorCopy(TensorCopy {
            dst: sb(dst, 1, 4, 64),
            src: sb(DType::F32, 1, 4, 0),
        })
    };
    let e = refusal(TargetName::Trn2, Engine::Vector, copy(DType::Fp8E8m0fnu));
    assert!(
        matches!(
            e.kind,
            ErrorKind::DTypeNotOnTarget {
                dtype: "f8e8m0fnu",
                target: "trn2 (NeuronCore-v3)"
            }
        ),
        "{e:?}"
    );
    // On trn3 a packed container is no tensor_copy operand: no instruction but the MX ones, DMA
    // and memset takes one.
    let e = refusal(TargetName::Trn3, Engine::Vector, copy(DType::Fp8E4m3fnX4));
    assert!(
        matches!(
            e.kind,
            ErrorKind::UnsupportedDType {
                dtype: "f8e4m3fn_x4",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.operand.as_deref(), Some("dst"));
}

#[test]
fn packed_containers_move_by_dma_and_memset_only_as_bits() {
    let mut core = trn3();
    let a = sb(DType::Fp8E4m3fnX4, 1, 2, 0);
    let memset = |value: f64| Op::Memset(Memset { dst: a.clone(), value });
    core.run(Engine::Vector, memset(0.0)).unwrap();
    assert_eq!(core.get_bits(&a), vec![0, 0]);
    expect_err(core.run(Engine::Vector, memset(1.0)), "dst", |k| {
        matches!(k, ErrorKind::Invalid(_))
    });
    core.put_bits(&a, &[0x4433_2211, 0x8877_6655]);
    let copy = |dst: AccessPattern, accumulate: bool| {
        Op::DmaCopy(DmaCopy {
            dst,
            src: a.clone(),
            accumulate,
            indirect: None,
        })
    };
    let b = sb(DType::Fp8E4m3fnX4, 1, 2, 64);
    core.run(Engine::Dma, copy(b.clone(), false)).unwrap();
    assert_eq!(core.get_bits(&b), vec![0x4433_2211, 0x8877_6655]);
    for (dst, accumulate) in [(sb(DType::U32, 1, 2, 128), false), (b, true)] {
        let operand = if dst.dtype.is_packed() { "dst" } else { "src" };
        expect_err(core.run(Engine::Dma, copy(dst, accumulate)), operand, |k| {
            matches!(k, ErrorKind::UnsupportedDType { .. })
        });
    }
}
