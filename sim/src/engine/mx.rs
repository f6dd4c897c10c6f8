//! The OCP microscaling (MX) layout shared by `quantize_mx` (VectorE) and `nc_matmul_mx`
//! (TensorE), NeuronCore-v4 [`nki.isa` 2.32 `quantize_mx`, `nc_matmul_mx`]:
//!
//! * a group is 32 elements: 8 partitions × the 4 codes of one packed `_x4` element;
//! * a data tile spans whole SBUF quadrants (32 partitions each, at most 4);
//! * the scales of quadrant `q` sit in 4 partitions at `scale.start_partition + 32·q`: partition
//!   `j` holds the scales of data partitions `8j..8j+8` of the quadrant, one per packed free
//!   element. A one-quadrant data tile has a 4-partition scale tile; a wider one has a scale tile
//!   as tall as the data, of which only those partitions are written or read.
//!
//! Codes sit in a packed element little-endian: code `k` in bits `k·w..(k+1)·w` (w = 8 for fp8,
//! 4 for fp4).

use super::Ctx;
use crate::dtype::DType;
use crate::error::{AtOperand, ErrorKind, OpResult};
use crate::mem::{AccessPattern, MemSpace};

/// Partitions of one SBUF quadrant.
pub const QUADRANT: usize = 32;
/// Partitions of one MX group.
pub const GROUP_PARTITIONS: usize = 8;
/// Scale partitions per quadrant (32 / 8).
pub const SCALES_PER_QUADRANT: usize = QUADRANT / GROUP_PARTITIONS;
/// Codes per packed element, and the free elements of an unpacked group row.
pub const PACK: usize = 4;
/// Dtypes a scale tile may have (`float8_e8m0fnu`, or `uint8` holding the same bits).
pub const SCALE_DTYPES: [DType; 2] = [DType::Fp8E8m0fnu, DType::U8];

/// All operands of an MX instruction live in SBUF (`MemoryNotAccessible` otherwise).
pub fn require_sbuf(ctx: &Ctx, operand: &str, ap: &AccessPattern, access: &'static str) -> OpResult<()> {
    if ap.mem != MemSpace::Sbuf {
        return Err(ErrorKind::MemoryNotAccessible {
            engine: ctx.engine.name(),
            access,
            memory: ap.mem.name(),
        })
        .at(operand);
    }
    Ok(())
}

/// A data tile spans whole quadrants: a multiple of 32 partitions, at most 128, starting on a
/// quadrant boundary.
pub fn check_data_partitions(operand: &str, ap: &AccessPattern, max: usize) -> OpResult<()> {
    let p = ap.partitions;
    if p == 0 || !p.is_multiple_of(QUADRANT) || p > max || !ap.start_partition.is_multiple_of(QUADRANT) {
        return Err(ErrorKind::ShapeMismatch(format!(
            "an MX data tile spans whole SBUF quadrants: a multiple of {QUADRANT} partitions (at most \
             {max}) from a quadrant boundary, got {p} partitions from partition {}",
            ap.start_partition
        )))
        .at(operand);
    }
    Ok(())
}

/// Partitions of the scale tile of a data tile of `data_partitions` partitions.
pub fn scale_partitions(data_partitions: usize) -> usize {
    if data_partitions == QUADRANT {
        SCALES_PER_QUADRANT
    } else {
        data_partitions
    }
}

/// Checks a scale tile's dtype and shape against its data tile (`data_partitions` ×
/// `packed_free` packed elements).
pub fn check_scale_tile(operand: &str, ap: &AccessPattern, data_partitions: usize, packed_free: usize) -> OpResult<()> {
    super::require_dtype(operand, ap, &SCALE_DTYPES, "MX scales are float8_e8m0fnu (or uint8)")?;
    let want = scale_partitions(data_partitions);
    if ap.partitions != want || ap.free_elems() != packed_free {
        return Err(ErrorKind::ShapeMismatch(format!(
            "the scales of a {data_partitions}-partition MX tile are [{want} partitions × {packed_free}], got [{} × {}]",
            ap.partitions,
            ap.free_elems()
        )))
        .at(operand);
    }
    Ok(())
}

/// The 4-partition pieces of a scale tile that hold scales, one per data quadrant.
pub fn scale_pieces(scale: &AccessPattern, data_partitions: usize) -> Vec<AccessPattern> {
    (0..data_partitions / QUADRANT)
        .map(|q| AccessPattern {
            start_partition: scale.start_partition + q * QUADRANT,
            partitions: SCALES_PER_QUADRANT,
            ..scale.clone()
        })
        .collect()
}

/// Row of the concatenated scale pieces that scales data partition `p` (relative to the tile).
pub fn scale_row(p: usize) -> usize {
    (p / QUADRANT) * SCALES_PER_QUADRANT + (p % QUADRANT) / GROUP_PARTITIONS
}

/// Reads the scale codes of a data tile: `(data_partitions / 8) × free` codes, row-major by
/// [`scale_row`].
pub fn read_scales(ctx: &Ctx, operand: &str, scale: &AccessPattern, data_partitions: usize) -> OpResult<Vec<u8>> {
    let mut out = Vec::new();
    for piece in scale_pieces(scale, data_partitions) {
        out.extend(ctx.read_bits(operand, &piece)?.into_iter().map(|b| b as u8));
    }
    Ok(out)
}

/// Writes scale codes laid out as [`read_scales`] returns them.
pub fn write_scales(
    ctx: &mut Ctx,
    operand: &str,
    scale: &AccessPattern,
    data_partitions: usize,
    codes: &[u8],
) -> OpResult<()> {
    let per_piece = SCALES_PER_QUADRANT * scale.free_elems();
    for (piece, chunk) in scale_pieces(scale, data_partitions)
        .iter()
        .zip(codes.chunks(per_piece.max(1)))
    {
        let bits: Vec<u32> = chunk.iter().map(|&c| u32::from(c)).collect();
        ctx.write_bits(operand, piece, &bits)?;
    }
    Ok(())
}

/// The value of scale code `c`: 2^(c − 127); 0xFF is NaN.
pub fn scale_value(c: u8) -> f64 {
    if c == 0xFF {
        f64::NAN
    } else {
        2f64.powi(i32::from(c) - 127)
    }
}

/// Code `k` of packed element `bits` (the element dtype's bits).
pub fn unpack(packed: DType, bits: u32, k: usize) -> u32 {
    let w = packed.packed_element().map_or(8, |(e, _)| e.code_bits());
    (bits >> (w as usize * k)) & ((1 << w) - 1)
}

/// Packs 4 codes into one element of `packed`.
pub fn pack(packed: DType, codes: [u32; PACK]) -> u32 {
    let w = packed.packed_element().map_or(8, |(e, _)| e.code_bits());
    codes
        .iter()
        .enumerate()
        .fold(0, |acc, (k, &c)| acc | ((c & ((1 << w) - 1)) << (w as usize * k)))
}
