//! Access patterns: how an instruction operand addresses memory.
//!
//! An on-chip operand (SBUF/PSUM) covers `partitions` consecutive partitions starting at
//! `start_partition`; within each partition it starts at byte `offset` and walks up to four free
//! dimensions `[step, num]` (outer → inner, steps in elements of `dtype`, step 0 = broadcast).
//! `view[p, w, z, y, x] = partition(start + p)[offset + (w*sw + z*sz + y*sy + x*sx) * size]`.
//!
//! An HBM operand addresses a flat tensor: `partition_step` is the element distance between the
//! rows that land on consecutive partitions of the other side of a DMA, and `start_partition`
//! must be 0. `offset` is in bytes from the start of the tensor.

use crate::dtype::DType;
use serde::{Deserialize, Serialize};

/// Which memory an operand lives in.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemSpace {
    Sbuf,
    Psum,
    /// A named HBM tensor declared by the program.
    Hbm(String),
}

/// [`MemSpace`]'s JSON form, read by `program::OneEntry` (which names a second key).
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum MemSpaceRepr {
    Sbuf,
    Psum,
    Hbm(String),
}

impl<'de> Deserialize<'de> for MemSpace {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(
            match d.deserialize_any(crate::program::OneEntry::<MemSpaceRepr>::new("a memory"))? {
                MemSpaceRepr::Sbuf => MemSpace::Sbuf,
                MemSpaceRepr::Psum => MemSpace::Psum,
                MemSpaceRepr::Hbm(t) => MemSpace::Hbm(t),
            },
        )
    }
}

impl MemSpace {
    pub fn name(&self) -> &'static str {
        match self {
            MemSpace::Sbuf => "SBUF",
            MemSpace::Psum => "PSUM",
            MemSpace::Hbm(_) => "HBM",
        }
    }

    pub fn is_on_chip(&self) -> bool {
        !matches!(self, MemSpace::Hbm(_))
    }
}

/// One free dimension: `[step, num]`, step in elements (may be negative or 0).
pub type FreeDim = [i64; 2];

/// An operand: memory, partitions, byte offset, dtype, and up to 4 free dimensions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessPattern {
    pub mem: MemSpace,
    pub dtype: DType,
    /// First partition (on-chip); 0 for HBM.
    #[serde(default)]
    pub start_partition: usize,
    /// Number of partitions (on-chip) or rows (HBM).
    pub partitions: usize,
    /// HBM only: element step between rows. Ignored (must be 0) on chip.
    #[serde(default)]
    pub partition_step: i64,
    /// Byte offset within each partition (on-chip) or within the tensor (HBM).
    #[serde(default)]
    pub offset: u64,
    /// Free dimensions, outer to inner.
    pub free: Vec<FreeDim>,
}

impl AccessPattern {
    /// An SBUF operand.
    pub fn sbuf(dtype: DType, start_partition: usize, partitions: usize, offset: u64, free: Vec<FreeDim>) -> Self {
        Self::on_chip(MemSpace::Sbuf, dtype, start_partition, partitions, offset, free)
    }

    /// A PSUM operand.
    pub fn psum(dtype: DType, start_partition: usize, partitions: usize, offset: u64, free: Vec<FreeDim>) -> Self {
        Self::on_chip(MemSpace::Psum, dtype, start_partition, partitions, offset, free)
    }

    /// An operand of the on-chip memory `mem` (partition-addressed: no partition step).
    fn on_chip(
        mem: MemSpace,
        dtype: DType,
        start_partition: usize,
        partitions: usize,
        offset: u64,
        free: Vec<FreeDim>,
    ) -> Self {
        AccessPattern {
            mem,
            dtype,
            start_partition,
            partitions,
            partition_step: 0,
            offset,
            free,
        }
    }

    /// An HBM operand: `rows` rows `partition_step` elements apart, starting at element
    /// `offset_elems`, each walking `free`.
    pub fn hbm(
        tensor: &str,
        dtype: DType,
        offset_elems: u64,
        rows: usize,
        partition_step: i64,
        free: Vec<FreeDim>,
    ) -> Self {
        AccessPattern {
            mem: MemSpace::Hbm(tensor.to_string()),
            dtype,
            start_partition: 0,
            partitions: rows,
            partition_step,
            offset: offset_elems * dtype.size() as u64,
            free,
        }
    }

    /// Elements per partition (product of the free sizes; 1 when there are no free dims).
    /// Saturates instead of overflowing: validation rejects such patterns, but shape checks may
    /// run before it and must not panic.
    pub fn free_elems(&self) -> usize {
        self.free
            .iter()
            .fold(1usize, |acc, d| acc.saturating_mul(d[1].max(0) as usize))
    }

    /// Total elements addressed (saturating).
    pub fn num_elems(&self) -> usize {
        self.partitions.saturating_mul(self.free_elems())
    }

    /// Free sizes only, outer to inner.
    pub fn free_shape(&self) -> Vec<usize> {
        self.free.iter().map(|d| d[1].max(0) as usize).collect()
    }

    /// Same pattern with another dtype (and the same byte offset).
    pub fn with_dtype(&self, dtype: DType) -> Self {
        AccessPattern { dtype, ..self.clone() }
    }

    /// Smallest and largest element offset (relative to `offset`) reached within one partition,
    /// or `None` when the pattern addresses nothing.
    pub fn free_extent(&self) -> Option<(i64, i64)> {
        dims_extent(&self.free)
    }

    /// Element offsets (relative to the partition's base) of the free pattern, in order.
    pub fn free_offsets(&self) -> Vec<i64> {
        let mut out = Vec::with_capacity(self.free_elems());
        fn walk(dims: &[FreeDim], base: i64, out: &mut Vec<i64>) {
            match dims.split_first() {
                None => out.push(base),
                Some((&[step, num], rest)) => {
                    for i in 0..num.max(0) {
                        walk(rest, base + i * step, out);
                    }
                }
            }
        }
        walk(&self.free, 0, &mut out);
        out
    }

    /// The pattern as runs along the innermost dimension: (element offset of the run start,
    /// number of elements, step). Used by the memory fast paths. The free dims are first reduced
    /// to the fewest that address the same elements in the same order (size-1 dims dropped,
    /// an outer dim merged into the inner one when it continues it), so that, e.g., `[[2, 64],
    /// [1, 1]]` is one strided run of 64 rather than 64 runs of one (performance only).
    pub fn runs(&self) -> (Vec<i64>, usize, i64) {
        if self.free_elems() == 0 {
            return (Vec::new(), 0, 1);
        }
        let mut dims: Vec<FreeDim> = Vec::with_capacity(self.free.len());
        for &[step, num] in &self.free {
            if num == 1 {
                continue;
            }
            match dims.last_mut() {
                // `[so, no], [si, ni]` with `so == si·ni`: element (o, i) is at (o·ni + i)·si.
                Some(last) if num > 0 && last[0] == step.saturating_mul(num) => *last = [step, last[1] * num],
                _ => dims.push([step, num]),
            }
        }
        match dims.split_last() {
            None => (vec![0], 1, 1),
            Some((&[step, num], outer)) => {
                let outer_ap = AccessPattern {
                    free: outer.to_vec(),
                    ..self.clone()
                };
                (outer_ap.free_offsets(), num.max(0) as usize, step)
            }
        }
    }
}

impl std::fmt::Display for AccessPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.mem {
            MemSpace::Hbm(t) => write!(
                f,
                "hbm:{t}[{}+{}]{{rows {} step {}}}",
                self.dtype,
                self.offset / self.dtype.size() as u64,
                self.partitions,
                self.partition_step
            )?,
            m => write!(
                f,
                "{}[{}]{{p {}..{}}}@{}",
                m.name().to_lowercase(),
                self.dtype,
                self.start_partition,
                self.start_partition + self.partitions,
                self.offset
            )?,
        }
        for [s, n] in &self.free {
            write!(f, "[{s},{n}]")?;
        }
        Ok(())
    }
}

/// Smallest and largest element offset (relative to the start) that `[step, num]` dims reach,
/// saturating; `None` when a dim is empty (the dims address nothing).
pub fn dims_extent(dims: &[[i64; 2]]) -> Option<(i64, i64)> {
    let mut lo = 0i64;
    let mut hi = 0i64;
    for &[step, num] in dims {
        if num <= 0 {
            return None;
        }
        let span = step.saturating_mul(num - 1);
        if span < 0 {
            lo = lo.saturating_add(span);
        } else {
            hi = hi.saturating_add(span);
        }
    }
    Some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runs address exactly the pattern's elements, in order, however its dims reduce.
    #[test]
    fn runs_enumerate_the_free_offsets_in_order() {
        let patterns: [&[FreeDim]; 9] = [
            &[[1, 128]],
            &[[2, 64], [1, 1]],
            &[[4, 32], [1, 2]],
            &[[64, 2], [1, 64]],
            &[[8, 3], [1, 1], [2, 4]],
            &[[1, 1], [0, 5], [1, 1]],
            &[[0, 3], [0, 4]],
            &[[-2, 4], [1, 2]],
            &[[16, 2], [4, 2], [1, 4], [1, 1]],
        ];
        for free in patterns {
            let ap = AccessPattern::sbuf(DType::F32, 0, 1, 0, free.to_vec());
            let (starts, len, step) = ap.runs();
            let got: Vec<i64> = starts
                .iter()
                .flat_map(|&s| (0..len as i64).map(move |i| s + i * step))
                .collect();
            assert_eq!(got, ap.free_offsets(), "{free:?}");
        }
        let ap = AccessPattern::sbuf(DType::F32, 0, 1, 0, vec![[2, 64], [1, 1]]);
        assert_eq!(ap.runs(), (vec![0], 64, 2), "one strided run");
        let ap = AccessPattern::sbuf(DType::F32, 0, 1, 0, vec![[8, 2], [4, 2], [1, 4]]);
        assert_eq!(ap.runs(), (vec![0], 16, 1), "one contiguous run");
    }
}
