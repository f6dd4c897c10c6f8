//! Data types of the NeuronCore and the conversions between them.
//!
//! `i64` (NC-v3+ with `native_int64`, docs/numerics.md "Native int64") is the one 8-byte type:
//! it has no 32-bit raw-bits view, so the bit-level paths (`load_bits`, the memory's
//! `read_bits`/`write_bits`) refuse it with a typed error, and it is read and written only as
//! exact integers (`Memories::read_i64`/`write_i64`), as f32 (`decode_run`/`encode_run`) and
//! copied as bytes by DMA.
//!
//! This module is the one place where a dtype is dispatched on. Every engine reads elements as raw
//! bits (`u32`, zero-extended little-endian storage) and turns them into `f32` (arithmetic) or `i64`
//! (exact integer paths) through [`DType::decode_f32`] / [`DType::decode_i64`], and writes back with
//! [`DType::encode_f32`] / [`DType::encode_i64`]. Nothing else in the simulator looks at a dtype's
//! bit layout.
//!
//! Rules (sources in docs/numerics.md; bit-exactness against PyTorch 2.15 / ml_dtypes is checked
//! by sim/tests/dtype_tables.rs on recorded tables):
//! * float → narrower float rounds to nearest even (or stochastically, when the global mode is on)
//!   and overflows to ±inf where the format has inf; `float8_e4m3fn` (no inf) saturates to ±448,
//!   ±inf included, exactly as PyTorch 2.15's c10 conversion does.
//! * float → integer rounds to nearest even and saturates; NaN becomes 0 (unpublished: a choice).
//! * bool is uint8 storage: the hardware has no bool type, so converting 0.5 to bool gives 0 and
//!   2.0 gives 2, as it would in a uint8. Lowerings produce 0/1 with compare instructions.
//! * NaN encodings follow PyTorch's c10 scalar conversions: bfloat16 0x7FC0 (any sign or
//!   payload), float16 0x7E00 | sign, fp8 0x7F | sign; the legacy e4m3 writes 0x7C | sign as
//!   ml_dtypes does. (PyTorch's vectorised CPU kernels write other NaN bits — bf16 0xFFFF, f16 with
//!   payload — so outputs are compared with PyTorch by NaN class.)

mod fp8;
mod round;

pub use round::{Rounding, StochasticRng};

use serde::{Deserialize, Serialize};

/// Element types the simulator stores. Every type but [`DType::I64`] is at most 4 bytes wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// tfloat32 (`fp32r`): 1 sign, 8 exponent, 10 mantissa bits, stored in 4 bytes with the low 13
    /// mantissa bits zero.
    Tf32,
    /// bfloat16: 1/8/7.
    Bf16,
    /// IEEE binary16: 1/5/10.
    F16,
    /// NeuronCore's IEEE-like float8 e4m3 (`nl.float8_e4m3`, ml_dtypes `float8_e4m3`): bias 7,
    /// exponent 15 reserved for inf (mantissa 0) and NaN; max finite 240.
    Fp8E4m3,
    /// OCP / PyTorch `float8_e4m3fn`: bias 7, no inf, NaN is S.1111.111; max finite 448.
    Fp8E4m3fn,
    /// float8 e5m2 (PyTorch / IEEE-like): bias 15, has inf and NaN; max finite 57344.
    Fp8E5m2,
    I8,
    I16,
    I32,
    U8,
    U16,
    U32,
    /// Stored as one byte; the hardware treats it as uint8.
    Bool,
    /// OCP MX scale `float8_e8m0fnu` (NC-v4): 8 exponent bits, bias 127, no sign, no zero, no
    /// inf; 0xFF is NaN. Code `c` is 2^(c − 127).
    Fp8E8m0fnu,
    /// OCP MX element `float4_e2m1fn` (NC-v4), one code per byte in the low nibble (as ml_dtypes
    /// stores it): 1 sign, 2 exponent (bias 1), 1 mantissa bit; no inf, no NaN; max 6.
    Fp4E2m1fn,
    /// `float8_e5m2_x4` (NC-v4): four e5m2 codes packed in a 32-bit element, element k of the
    /// group in byte k (little-endian). An opaque container: only the MX instructions, DMA and
    /// memset take it (docs/isa.md "MX dtypes").
    Fp8E5m2X4,
    /// `float8_e4m3fn_x4` (NC-v4): four e4m3fn codes in a 32-bit element, as [`DType::Fp8E5m2X4`].
    Fp8E4m3fnX4,
    /// `float4_e2m1fn_x4` (NC-v4): four e2m1fn codes in a 16-bit element, element k in bits
    /// 4k..4k+4 (4 × 4 bits; the width is not published: a choice, docs/isa.md).
    Fp4E2m1fnX4,
    /// 64-bit two's-complement integer, 8 bytes little-endian. Only on cores whose target has
    /// `native_int64` (NC-v3, NC-v4: [`crate::Target::has_dtype`]); which engine computes on it
    /// is the [`crate::numerics::Int64Alu`] setting (docs/numerics.md "Native int64").
    I64,
}

/// All dtypes, for exhaustive tests and parsing.
pub const ALL_DTYPES: [DType; 20] = [
    DType::F32,
    DType::Tf32,
    DType::Bf16,
    DType::F16,
    DType::Fp8E4m3,
    DType::Fp8E4m3fn,
    DType::Fp8E5m2,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::Bool,
    DType::Fp8E8m0fnu,
    DType::Fp4E2m1fn,
    DType::Fp8E5m2X4,
    DType::Fp8E4m3fnX4,
    DType::Fp4E2m1fnX4,
    DType::I64,
];

impl DType {
    /// Bytes per element in memory.
    pub fn size(self) -> usize {
        match self {
            DType::I64 => 8,
            DType::F32 | DType::Tf32 | DType::I32 | DType::U32 | DType::Fp8E5m2X4 | DType::Fp8E4m3fnX4 => 4,
            DType::Bf16 | DType::F16 | DType::I16 | DType::U16 | DType::Fp4E2m1fnX4 => 2,
            DType::Fp8E4m3
            | DType::Fp8E4m3fn
            | DType::Fp8E5m2
            | DType::I8
            | DType::U8
            | DType::Bool
            | DType::Fp8E8m0fnu
            | DType::Fp4E2m1fn => 1,
        }
    }

    /// Short name, as used in program text and docs.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::Tf32 => "tf32",
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
            DType::Fp8E4m3 => "f8e4m3",
            DType::Fp8E4m3fn => "f8e4m3fn",
            DType::Fp8E5m2 => "f8e5m2",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::Bool => "bool",
            DType::Fp8E8m0fnu => "f8e8m0fnu",
            DType::Fp4E2m1fn => "f4e2m1fn",
            DType::Fp8E5m2X4 => "f8e5m2_x4",
            DType::Fp8E4m3fnX4 => "f8e4m3fn_x4",
            DType::Fp4E2m1fnX4 => "f4e2m1fn_x4",
            DType::I64 => "i64",
        }
    }

    /// Parses [`DType::name`].
    pub fn from_name(name: &str) -> Option<DType> {
        ALL_DTYPES.iter().copied().find(|d| d.name() == name)
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F32
                | DType::Tf32
                | DType::Bf16
                | DType::F16
                | DType::Fp8E4m3
                | DType::Fp8E4m3fn
                | DType::Fp8E5m2
                | DType::Fp8E8m0fnu
                | DType::Fp4E2m1fn
        )
    }

    /// Integer types, including bool (uint8 storage). Bitvec ALU ops take only these.
    pub fn is_int(self) -> bool {
        !self.is_float() && !self.is_packed()
    }

    /// The `_x4` packed MX containers: several codes in one element. No arithmetic reads them;
    /// only instructions that say so take them (`engine::check_dtypes`).
    pub fn is_packed(self) -> bool {
        matches!(self, DType::Fp8E5m2X4 | DType::Fp8E4m3fnX4 | DType::Fp4E2m1fnX4)
    }

    /// The element dtype of a packed container and how many it holds (`f8e5m2_x4` → e5m2, 4).
    pub fn packed_element(self) -> Option<(DType, usize)> {
        match self {
            DType::Fp8E5m2X4 => Some((DType::Fp8E5m2, 4)),
            DType::Fp8E4m3fnX4 => Some((DType::Fp8E4m3fn, 4)),
            DType::Fp4E2m1fnX4 => Some((DType::Fp4E2m1fn, 4)),
            _ => None,
        }
    }

    /// Bits of one code inside a packed container (8 for fp8, 4 for fp4).
    pub fn code_bits(self) -> u32 {
        match self {
            DType::Fp4E2m1fn => 4,
            d => 8 * d.size() as u32,
        }
    }

    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    pub fn is_fp8(self) -> bool {
        matches!(self, DType::Fp8E4m3 | DType::Fp8E4m3fn | DType::Fp8E5m2)
    }

    /// Mask of the valid bits of a stored element (of `i64`, its low word: no 32-bit path
    /// stores an `i64`, see the module docs).
    pub fn bit_mask(self) -> u32 {
        match self.size() {
            8 | 4 => u32::MAX,
            2 => 0xFFFF,
            _ => 0xFF,
        }
    }

    /// Range of an integer type as i64 (bool is uint8 storage).
    pub fn int_range(self) -> Option<(i64, i64)> {
        Some(match self {
            DType::I8 => (i8::MIN as i64, i8::MAX as i64),
            DType::I16 => (i16::MIN as i64, i16::MAX as i64),
            DType::I32 => (i32::MIN as i64, i32::MAX as i64),
            DType::I64 => (i64::MIN, i64::MAX),
            DType::U8 | DType::Bool => (0, u8::MAX as i64),
            DType::U16 => (0, u16::MAX as i64),
            DType::U32 | DType::Fp8E5m2X4 | DType::Fp8E4m3fnX4 => (0, u32::MAX as i64),
            DType::Fp4E2m1fnX4 => (0, u16::MAX as i64),
            _ => return None,
        })
    }

    /// Decodes stored bits to f32. Exact for every float type; integers convert with round to
    /// nearest even (exact up to 2^24).
    #[inline]
    pub fn decode_f32(self, bits: u32) -> f32 {
        match self {
            DType::F32 | DType::Tf32 => f32::from_bits(bits),
            DType::Bf16 => f32::from_bits(bits << 16),
            DType::F16 => half::f16::from_bits(bits as u16).to_f32(),
            DType::Fp8E4m3 => fp8::e4m3_to_f32(bits as u8),
            DType::Fp8E4m3fn => fp8::e4m3fn_to_f32(bits as u8),
            DType::Fp8E5m2 => fp8::e5m2_to_f32(bits as u8),
            DType::I8 => bits as u8 as i8 as f32,
            DType::I16 => bits as u16 as i16 as f32,
            DType::I32 => bits as i32 as f32,
            // `i64` has no 32-bit bits view (the memory refuses it); its low word, sign-extended.
            DType::I64 => bits as i32 as f32,
            DType::U8 | DType::Bool => (bits & 0xFF) as f32,
            DType::U16 => (bits & 0xFFFF) as f32,
            DType::U32 => bits as f32,
            DType::Fp8E8m0fnu => fp8::e8m0fnu_to_f32(bits as u8),
            DType::Fp4E2m1fn => fp8::e2m1fn_to_f32(bits as u8),
            // Opaque containers read as their unsigned bits (no instruction decodes them this way:
            // `engine::check_dtypes` refuses packed operands outside the MX instructions).
            DType::Fp8E5m2X4 | DType::Fp8E4m3fnX4 => bits as f32,
            DType::Fp4E2m1fnX4 => (bits & 0xFFFF) as f32,
        }
    }

    /// Decodes stored bits of an integer type exactly. For float types, the value truncated toward
    /// zero (only used by bit-level paths that never see floats).
    #[inline]
    pub fn decode_i64(self, bits: u32) -> i64 {
        match self {
            DType::I8 => bits as u8 as i8 as i64,
            DType::I16 => bits as u16 as i16 as i64,
            DType::I32 | DType::I64 => bits as i32 as i64,
            DType::U8 | DType::Bool => (bits & 0xFF) as i64,
            DType::U16 => (bits & 0xFFFF) as i64,
            DType::U32 | DType::Fp8E5m2X4 | DType::Fp8E4m3fnX4 => bits as i64,
            DType::Fp4E2m1fnX4 => (bits & 0xFFFF) as i64,
            _ => {
                let f = self.decode_f32(bits);
                if f.is_nan() { 0 } else { f as i64 }
            }
        }
    }

    /// Encodes an f32 into this dtype with the given rounding.
    #[inline]
    pub fn encode_f32(self, x: f32, rounding: &mut Rounding) -> u32 {
        if let Rounding::Stochastic(rng) = rounding
            && x.is_finite()
            && matches!(
                self,
                DType::Bf16 | DType::F16 | DType::Tf32 | DType::Fp8E4m3 | DType::Fp8E4m3fn | DType::Fp8E5m2
            )
        {
            return round::encode_stochastic(self, x, rng);
        }
        match self {
            DType::F32 => x.to_bits(),
            DType::Tf32 => round::f32_to_tf32_rne(x),
            DType::Bf16 => round::f32_to_bf16_rne(x) as u32,
            DType::F16 => round::f32_to_f16_rne(x) as u32,
            DType::Fp8E4m3 => fp8::f32_to_e4m3(x) as u32,
            DType::Fp8E4m3fn => fp8::f32_to_e4m3fn(x) as u32,
            DType::Fp8E5m2 => fp8::f32_to_e5m2(x) as u32,
            DType::Fp8E8m0fnu => fp8::f32_to_e8m0fnu(x) as u32,
            DType::Fp4E2m1fn => fp8::f32_to_e2m1fn(x) as u32,
            DType::I8
            | DType::I16
            | DType::I32
            | DType::U8
            | DType::U16
            | DType::U32
            | DType::Bool
            | DType::Fp8E5m2X4
            | DType::Fp8E4m3fnX4
            | DType::Fp4E2m1fnX4
            | DType::I64 => {
                let (lo, hi) = self.int_range().expect("integer type");
                self.encode_i64(round::f32_to_int_rne_sat(x, lo, hi))
            }
        }
    }

    /// Encodes an integer exactly, saturating to the type's range. Float types go through f32.
    #[inline]
    pub fn encode_i64(self, v: i64) -> u32 {
        match self.int_range() {
            Some((lo, hi)) => (v.clamp(lo, hi) as u32) & self.bit_mask(),
            None => self.encode_f32(v as f32, &mut Rounding::NearestEven),
        }
    }

    /// Wraps an integer to the type's width (two's complement), as bit-level ALU results do.
    #[inline]
    pub fn wrap_i64(self, v: i64) -> u32 {
        (v as u32) & self.bit_mask()
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Reads element `i` of `bytes` as raw bits of `dtype` (little-endian). Of an `i64`, the low
/// word (no engine path reads an `i64` as bits: the memory refuses it, see the module docs).
#[inline]
pub fn load_bits(dtype: DType, bytes: &[u8], byte_index: usize) -> u32 {
    match dtype.size() {
        8 | 4 => u32::from_le_bytes(bytes[byte_index..byte_index + 4].try_into().unwrap()),
        2 => u16::from_le_bytes(bytes[byte_index..byte_index + 2].try_into().unwrap()) as u32,
        _ => bytes[byte_index] as u32,
    }
}

/// Stores raw bits of `dtype` at `byte_index` (little-endian). An `i64` stores the word
/// sign-extended (no engine path writes an `i64` as bits, see the module docs).
#[inline]
pub fn store_bits(dtype: DType, bytes: &mut [u8], byte_index: usize, bits: u32) {
    match dtype.size() {
        8 => bytes[byte_index..byte_index + 8].copy_from_slice(&(bits as i32 as i64).to_le_bytes()),
        4 => bytes[byte_index..byte_index + 4].copy_from_slice(&bits.to_le_bytes()),
        2 => bytes[byte_index..byte_index + 2].copy_from_slice(&(bits as u16).to_le_bytes()),
        _ => bytes[byte_index] = bits as u8,
    }
}

/// Reads `n` elements' raw bits starting at byte `start`, `stride` bytes apart, appending them
/// (zero-extended) to `out`. Contiguous runs take a slice fast path.
pub fn load_bits_run(dtype: DType, bytes: &[u8], start: usize, n: usize, stride: usize, out: &mut Vec<u32>) {
    let size = dtype.size();
    if stride == size && size != 8 {
        let span = &bytes[start..start + n * size];
        match size {
            4 => out.extend(
                span.chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            ),
            2 => out.extend(span.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]) as u32)),
            _ => out.extend(span.iter().map(|&b| b as u32)),
        }
    } else {
        out.extend((0..n).map(|i| load_bits(dtype, bytes, start + i * stride)));
    }
}

/// Stores raw bits of `dtype` for `bits.len()` elements starting at byte `start`, `stride` bytes
/// apart. Contiguous runs take a slice fast path.
pub fn store_bits_run(dtype: DType, bits: &[u32], bytes: &mut [u8], start: usize, stride: usize) {
    let size = dtype.size();
    if stride == size && size != 8 {
        let span = &mut bytes[start..start + bits.len() * size];
        match size {
            4 => span
                .chunks_exact_mut(4)
                .zip(bits)
                .for_each(|(c, &b)| c.copy_from_slice(&b.to_le_bytes())),
            2 => span
                .chunks_exact_mut(2)
                .zip(bits)
                .for_each(|(c, &b)| c.copy_from_slice(&(b as u16).to_le_bytes())),
            _ => span.iter_mut().zip(bits).for_each(|(c, &b)| *c = b as u8),
        }
    } else {
        for (i, &b) in bits.iter().enumerate() {
            store_bits(dtype, bytes, start + i * stride, b);
        }
    }
}

/// Decodes `n` elements starting at byte `start`, `stride` bytes apart, appending f32 values.
/// The dtype is matched once per run so the inner loops stay tight.
pub fn decode_run(dtype: DType, bytes: &[u8], start: usize, n: usize, stride: usize, out: &mut Vec<f32>) {
    macro_rules! run {
        ($w:expr, $f:expr) => {{
            for i in 0..n {
                let a = start + i * stride;
                let raw: [u8; $w] = bytes[a..a + $w].try_into().unwrap();
                out.push($f(raw));
            }
        }};
    }
    match dtype {
        DType::F32 | DType::Tf32 => {
            if stride == 4 {
                out.extend(
                    bytes[start..start + 4 * n]
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes(c.try_into().unwrap())),
                );
            } else {
                run!(4, f32::from_le_bytes)
            }
        }
        DType::Bf16 => {
            if stride == 2 {
                out.extend(
                    bytes[start..start + 2 * n]
                        .chunks_exact(2)
                        .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16)),
                );
            } else {
                run!(2, |r| f32::from_bits((u16::from_le_bytes(r) as u32) << 16))
            }
        }
        DType::I32 => run!(4, |r| i32::from_le_bytes(r) as f32),
        // int64 → f32 rounds to nearest even (Rust's `as`), as every integer → float conversion.
        DType::I64 => run!(8, |r| i64::from_le_bytes(r) as f32),
        DType::U32 | DType::Fp8E5m2X4 | DType::Fp8E4m3fnX4 => run!(4, |r| u32::from_le_bytes(r) as f32),
        DType::I16 => run!(2, |r| i16::from_le_bytes(r) as f32),
        DType::U16 | DType::Fp4E2m1fnX4 => run!(2, |r| u16::from_le_bytes(r) as f32),
        DType::I8 => run!(1, |r: [u8; 1]| r[0] as i8 as f32),
        DType::U8 | DType::Bool => run!(1, |r: [u8; 1]| r[0] as f32),
        DType::F16 | DType::Fp8E4m3 | DType::Fp8E4m3fn | DType::Fp8E5m2 | DType::Fp8E8m0fnu | DType::Fp4E2m1fn => {
            let w = dtype.size();
            for i in 0..n {
                out.push(dtype.decode_f32(load_bits(dtype, bytes, start + i * stride)));
                let _ = w;
            }
        }
    }
}

/// Encodes `vals` into `bytes` starting at byte `start`, `stride` bytes apart.
pub fn encode_run(dtype: DType, rounding: &mut Rounding, vals: &[f32], bytes: &mut [u8], start: usize, stride: usize) {
    match (dtype, &rounding) {
        (DType::F32, _) if stride == 4 => {
            let span = &mut bytes[start..start + 4 * vals.len()];
            span.chunks_exact_mut(4)
                .zip(vals)
                .for_each(|(c, v)| c.copy_from_slice(&v.to_le_bytes()));
        }
        (DType::F32, _) => {
            for (i, v) in vals.iter().enumerate() {
                let a = start + i * stride;
                bytes[a..a + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        (DType::Bf16, Rounding::NearestEven) if stride == 2 => {
            let span = &mut bytes[start..start + 2 * vals.len()];
            span.chunks_exact_mut(2)
                .zip(vals)
                .for_each(|(c, v)| c.copy_from_slice(&round::f32_to_bf16_rne(*v).to_le_bytes()));
        }
        (DType::Bf16, Rounding::NearestEven) => {
            for (i, v) in vals.iter().enumerate() {
                let a = start + i * stride;
                bytes[a..a + 2].copy_from_slice(&round::f32_to_bf16_rne(*v).to_le_bytes());
            }
        }
        (DType::I8 | DType::I16 | DType::I32 | DType::U8 | DType::U16 | DType::U32 | DType::Bool, _) => {
            // `encode_f32` of an integer dtype with the range looked up once and the rounding
            // skipped for integral values (comparison results, indices), where it is the
            // identity: a value that converts to i64 and back unchanged is that integer.
            let (lo, hi) = dtype.int_range().expect("integer type");
            let to_int = |x: f32| {
                let t = x as i64;
                if t as f32 == x {
                    t.clamp(lo, hi)
                } else {
                    round::f32_to_int_rne_sat(x, lo, hi)
                }
            };
            fn put<const W: usize>(
                vals: &[f32],
                bytes: &mut [u8],
                start: usize,
                stride: usize,
                f: impl Fn(f32) -> i64,
            ) {
                for (i, &v) in vals.iter().enumerate() {
                    let a = start + i * stride;
                    bytes[a..a + W].copy_from_slice(&(f(v) as u32).to_le_bytes()[..W]);
                }
            }
            match dtype.size() {
                4 => put::<4>(vals, bytes, start, stride, to_int),
                2 => put::<2>(vals, bytes, start, stride, to_int),
                _ => put::<1>(vals, bytes, start, stride, to_int),
            }
        }
        (DType::I64, _) => {
            // f32 → int64: round to nearest even, saturate, NaN → 0 (as every float → integer).
            for (i, &v) in vals.iter().enumerate() {
                let a = start + i * stride;
                let x = round::f32_to_int_rne_sat(v, i64::MIN, i64::MAX);
                bytes[a..a + 8].copy_from_slice(&x.to_le_bytes());
            }
        }
        _ => {
            for (i, v) in vals.iter().enumerate() {
                store_bits(dtype, bytes, start + i * stride, dtype.encode_f32(*v, rounding));
            }
        }
    }
}

#[cfg(test)]
mod run_tests {
    use super::*;

    /// `encode_run` into integer dtypes stores exactly what `encode_f32` + `store_bits` would,
    /// for integral, fractional (ties included), out-of-range and non-finite values, contiguous
    /// and strided.
    #[test]
    fn integer_encode_run_matches_encode_f32() {
        let vals = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            1.5,
            2.5,
            -2.5,
            127.0,
            128.0,
            -129.0,
            255.0,
            256.0,
            65535.5,
            -40000.0,
            2147483647.0,
            4294967296.0,
            9.3e18,
            -9.3e18,
            1.0e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        for dtype in [
            DType::I8,
            DType::I16,
            DType::I32,
            DType::U8,
            DType::U16,
            DType::U32,
            DType::Bool,
        ] {
            let w = dtype.size();
            for stride in [w, 3 * w] {
                let mut got = vec![0xAAu8; vals.len() * stride];
                let mut want = got.clone();
                encode_run(dtype, &mut Rounding::NearestEven, &vals, &mut got, 0, stride);
                for (i, &v) in vals.iter().enumerate() {
                    let bits = dtype.encode_f32(v, &mut Rounding::NearestEven);
                    store_bits(dtype, &mut want, i * stride, bits);
                }
                assert_eq!(got, want, "{dtype} stride {stride}");
            }
        }
    }
}
