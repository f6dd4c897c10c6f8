//! trnsim's float conversions against tables recorded from PyTorch (and ml_dtypes for the legacy
//! `float8_e4m3`) by golden/dtype_tables/generate.py; see meta.json there for versions.
//!
//! Comparison rule (precise):
//! * Every decode (all 65536 bf16 and f16 codes, all 256 codes of each fp8 type) and every encode
//!   of a non-NaN f32 edge input is compared **bit for bit** with torch's vectorised
//!   `Tensor.to(dtype)` (ml_dtypes `astype` for e4m3).
//! * NaN is where torch itself is not consistent: its CPU kernels answer differently depending on
//!   the code path an element takes (path_alt.json lists every such entry). There the simulator
//!   must be NaN and bit-exact with **one** of torch's recorded answers, namely:
//!   - encodes: torch's c10 scalar conversion (`torch.tensor(list, dtype=...)`): bf16 NaN → 0x7FC0
//!     (the vectorised `.to` writes 0xFFFF), f16 NaN → 0x7E00 | sign (`.to` keeps the top 9
//!     payload bits, e.g. 0x7FA12345 → 0x7F09); fp8 agree on every path (0x7F | sign).
//!   - f16 decode: the vectorised path (F16C: quiet bit set, payload and sign kept); torch's
//!     scalar tail writes 0x7FFFFFFF for every NaN code, sign dropped.
//!
//! The tests below check exactly this.

use std::collections::HashMap;
use std::path::PathBuf;
use trnsim::{DType, Rounding};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../golden/dtype_tables")
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(name)).unwrap_or_else(|e| panic!("reading golden/dtype_tables/{name}: {e}"))
}

fn u32s(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn u16s(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes(c.try_into().unwrap()) as u32)
        .collect()
}

/// Expands a `.runs` file: (count, first, step) triples of arithmetic progressions (wrapping).
fn runs(name: &str) -> Vec<u32> {
    let words = u32s(&read(name));
    let mut out = Vec::new();
    for t in words.chunks_exact(3) {
        let (count, first, step) = (t[0], t[1], t[2]);
        for i in 0..count {
            out.push(first.wrapping_add(step.wrapping_mul(i)));
        }
    }
    out
}

/// path_alt.json: `"<table>:<path>"` → index → torch's answer on that path.
fn alt() -> HashMap<String, HashMap<usize, u32>> {
    let v: serde_json::Value = serde_json::from_slice(&read("path_alt.json")).unwrap();
    let mut out = HashMap::new();
    for (k, list) in v.as_object().unwrap() {
        let mut m = HashMap::new();
        for r in list.as_array().unwrap() {
            let r: Vec<u64> = r.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
            for i in r[0]..=r[1] {
                m.insert(i as usize, r[2] as u32);
            }
        }
        out.insert(k.clone(), m);
    }
    out
}

fn meta() -> serde_json::Value {
    serde_json::from_slice(&read("meta.json")).unwrap()
}

fn is_nan_f32(b: u32) -> bool {
    b & 0x7FFF_FFFF > 0x7F80_0000
}

fn report(what: &str, bad: &[String], checked: usize) {
    assert!(
        bad.is_empty(),
        "{what}: {} of {checked} mismatches, first: \n{}",
        bad.len(),
        bad[..bad.len().min(20)].join("\n")
    );
}

/// Decode table check. `alt_key`: the path whose answers are also accepted (NaN only).
fn check_decode(dtype: DType, file: &str, alt_key: &str, count: usize) -> usize {
    let table = runs(file);
    assert_eq!(table.len(), count, "{file} has {} entries", table.len());
    let alts = alt();
    let alt = alts.get(alt_key);
    let mut bad = Vec::new();
    for (code, &want) in table.iter().enumerate() {
        let got = dtype.decode_f32(code as u32).to_bits();
        if got == want {
            continue;
        }
        let other = alt.and_then(|a| a.get(&code)).copied();
        if let Some(o) = other {
            assert!(is_nan_f32(want) && is_nan_f32(o), "path_alt lists a non-NaN entry");
            if is_nan_f32(got) {
                continue;
            }
        }
        bad.push(format!(
            "  {dtype} code {code:#06x}: sim {got:#010x}, torch {want:#010x} (other path {other:x?})"
        ));
    }
    report(&format!("decode {dtype}"), &bad, table.len());
    table.len()
}

#[test]
fn decode_bf16_all_65536() {
    check_decode(DType::Bf16, "decode_bf16.runs", "decode_bf16:tail", 65536);
}

#[test]
fn decode_f16_all_65536() {
    check_decode(DType::F16, "decode_f16.runs", "decode_f16:tail", 65536);
    // The simulator matches torch's vectorised answer even on NaN (not just the class).
    let table = runs("decode_f16.runs");
    for code in 0..65536u32 {
        assert_eq!(
            DType::F16.decode_f32(code).to_bits(),
            table[code as usize],
            "f16 code {code:#06x}"
        );
    }
}

#[test]
fn decode_fp8_all_256() {
    // torch is consistent across paths for fp8: these are plain bit-exact checks.
    let t = runs("decode_e4m3fn.runs");
    let u = runs("decode_e5m2.runs");
    let v = runs("decode_e4m3.runs");
    for code in 0..256u32 {
        let i = code as usize;
        assert_eq!(
            DType::Fp8E4m3fn.decode_f32(code).to_bits(),
            t[i],
            "e4m3fn code {code:#04x}"
        );
        assert_eq!(DType::Fp8E5m2.decode_f32(code).to_bits(), u[i], "e5m2 code {code:#04x}");
        assert_eq!(
            DType::Fp8E4m3.decode_f32(code).to_bits(),
            v[i],
            "e4m3 (ml_dtypes) code {code:#04x}"
        );
    }
    check_decode(DType::Fp8E4m3fn, "decode_e4m3fn.runs", "decode_e4m3fn:tail", 256);
    check_decode(DType::Fp8E5m2, "decode_e5m2.runs", "decode_e5m2:tail", 256);
}

fn encode_inputs() -> Vec<u32> {
    u32s(&read("encode_inputs.u32"))
}

/// Encode check: bit-exact with torch's c10 scalar conversion everywhere (the table where no
/// c10 alternative is recorded), which equals the vectorised `.to` on every non-NaN input.
fn check_encode(dtype: DType, file: &str, key: &str) -> usize {
    let inputs = encode_inputs();
    let table = if dtype.size() == 2 {
        u16s(&read(file))
    } else {
        read(file).iter().map(|&b| b as u32).collect()
    };
    assert_eq!(table.len(), inputs.len(), "{file}");
    let alts = alt();
    let c10 = alts.get(&format!("{key}:c10"));
    let tail = alts.get(&format!("{key}:tail"));
    let mut bad = Vec::new();
    let mut nan_inputs = 0;
    for (i, (&x, &vec_answer)) in inputs.iter().zip(&table).enumerate() {
        let xf = f32::from_bits(x);
        let got = dtype.encode_f32(xf, &mut Rounding::NearestEven);
        let want = c10.and_then(|a| a.get(&i)).copied().unwrap_or(vec_answer);
        if xf.is_nan() {
            nan_inputs += 1;
        } else {
            // Where torch's paths agree, they agree on every non-NaN input.
            assert!(c10.is_none_or(|a| !a.contains_key(&i)) && tail.is_none_or(|a| !a.contains_key(&i)));
        }
        if got != want {
            bad.push(format!(
                "  {xf:e} ({x:#010x}) -> {dtype}: sim {got:#x}, torch c10 {want:#x}, torch .to {vec_answer:#x}"
            ));
        }
    }
    assert!(nan_inputs >= 20, "the table should hold NaN inputs");
    report(&format!("encode f32 -> {dtype}"), &bad, inputs.len());
    inputs.len()
}

#[test]
fn encode_bf16_edges() {
    check_encode(DType::Bf16, "encode_bf16.u16", "encode_bf16");
    // The two NaN answers torch gives, precisely.
    let inputs = encode_inputs();
    let table = u16s(&read("encode_bf16.u16"));
    for (&x, &t) in inputs.iter().zip(&table) {
        if f32::from_bits(x).is_nan() {
            assert_eq!(t, 0xFFFF, "torch .to(bfloat16) writes 0xFFFF for NaN {x:#x}");
            assert_eq!(
                DType::Bf16.encode_f32(f32::from_bits(x), &mut Rounding::NearestEven),
                0x7FC0
            );
        }
    }
}

#[test]
fn encode_f16_edges() {
    check_encode(DType::F16, "encode_f16.u16", "encode_f16");
}

#[test]
fn encode_fp8_edges() {
    check_encode(DType::Fp8E4m3fn, "encode_e4m3fn.u8", "encode_e4m3fn");
    check_encode(DType::Fp8E5m2, "encode_e5m2.u8", "encode_e5m2");
    // ml_dtypes float8_e4m3 (no path alternatives: plain bit-exact, NaN included).
    check_encode(DType::Fp8E4m3, "encode_e4m3.u8", "encode_e4m3");
}

/// The edge set really contains the named thresholds (so a regeneration with a broken sweep is
/// caught), and torch's answers there are the documented ones.
#[test]
fn tables_contain_the_thresholds() {
    let inputs = encode_inputs();
    let e4 = read("encode_e4m3fn.u8");
    let e5 = read("encode_e5m2.u8");
    let h = u16s(&read("encode_f16.u16"));
    let b = u16s(&read("encode_bf16.u16"));
    let e4l = read("encode_e4m3.u8");
    let find = |v: f32| {
        inputs
            .binary_search(&v.to_bits())
            .unwrap_or_else(|_| panic!("{v} missing from the table"))
    };
    let next = |v: f32| f32::from_bits(v.to_bits() + 1);
    let prev = |v: f32| f32::from_bits(v.to_bits() - 1);
    // e4m3fn (torch 2.15 saturates): 448 max; everything above, ±inf included, → ±448 (0x7E);
    // only NaN gives 0x7F. (torch ≤ 2.6 gave NaN from just above 464 up.)
    assert_eq!(e4[find(448.0)], 0x7E);
    assert_eq!(e4[find(464.0)], 0x7E);
    assert_eq!(e4[find(next(464.0))], 0x7E);
    assert_eq!(e4[find(480.0)], 0x7E);
    assert_eq!(e4[find(-480.0)], 0xFE);
    assert_eq!(e4[find(f32::INFINITY)], 0x7E);
    assert_eq!(e4[find(f32::NEG_INFINITY)], 0xFE);
    assert_eq!(e4[find(f32::NAN)], 0x7F);
    // e5m2: 57344 max; 61440 is the tie (odd mantissa) → inf; 65536 → inf.
    assert_eq!(e5[find(57344.0)], 0x7B);
    assert_eq!(e5[find(prev(61440.0))], 0x7B);
    assert_eq!(e5[find(61440.0)], 0x7C);
    assert_eq!(e5[find(65536.0)], 0x7C);
    // f16: 65504 max, 65520 tie → inf.
    assert_eq!(h[find(65504.0)], 0x7BFF);
    assert_eq!(h[find(prev(65520.0))], 0x7BFF);
    assert_eq!(h[find(65520.0)], 0x7C00);
    // bf16 near f32 max: 0x7F7F8000 is the tie above bf16 max (odd) → inf.
    assert_eq!(b[find(f32::from_bits(0x7F7F_7FFF))], 0x7F7F);
    assert_eq!(b[find(f32::from_bits(0x7F7F_8000))], 0x7F80);
    assert_eq!(b[find(f32::MAX)], 0x7F80);
    // legacy e4m3: 240 max; 248 tie (odd) → inf 0x78.
    assert_eq!(e4l[find(240.0)], 0x77);
    assert_eq!(e4l[find(prev(248.0))], 0x77);
    assert_eq!(e4l[find(248.0)], 0x78);
    let m = meta();
    assert!(m["torch"].as_str().unwrap().starts_with("2."), "torch version recorded");
    assert!(m["encode_inputs"].as_u64().unwrap() as usize == inputs.len());
}
