//! The memories of one NeuronCore: HBM (named flat tensors), SBUF and PSUM (partitions × bytes),
//! with a record of which bytes have been written, so that reading memory nothing wrote is an
//! error that names the place instead of a silent NaN.

pub mod ap;

pub use ap::{AccessPattern, FreeDim, MemSpace};

use crate::dtype::{self, DType, Rounding};
use crate::error::ErrorKind;
use crate::program::{HbmRole, HbmTensorDecl};
use crate::target::Target;
use std::collections::HashMap;

/// Most elements one access pattern may address. Far above anything a NeuronCore instruction
/// moves; it keeps a hostile program (stride-0 patterns of 65535^4 elements) from exhausting the
/// host's memory.
pub const MAX_ACCESS_ELEMS: usize = 1 << 28;

/// SBUF or PSUM: `partitions` rows of `partition_bytes`, of which `usable_bytes` may be addressed.
#[derive(Clone, Debug)]
pub struct OnChip {
    pub name: &'static str,
    pub partitions: usize,
    pub partition_bytes: usize,
    pub usable_bytes: usize,
    pub data: Vec<u8>,
    /// One byte per data byte: 1 once written.
    pub written: Vec<u8>,
}

impl OnChip {
    fn new(name: &'static str, partitions: usize, partition_bytes: usize, usable_bytes: usize) -> Self {
        // vec![0; n] is a zeroed allocation: pages are only touched when used.
        OnChip {
            name,
            partitions,
            partition_bytes,
            usable_bytes,
            data: vec![0; partitions * partition_bytes],
            written: vec![0; partitions * partition_bytes],
        }
    }
}

/// One HBM tensor.
#[derive(Clone, Debug)]
pub struct HbmTensor {
    pub decl: HbmTensorDecl,
    pub data: Vec<u8>,
    pub written: Vec<u8>,
}

impl HbmTensor {
    pub fn num_elems(&self) -> usize {
        self.decl.shape.iter().product()
    }
}

/// Where a resolved access pattern's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Region {
    Sbuf,
    Psum,
    Hbm(usize),
}

/// An access pattern checked against its memory and reduced to byte addresses:
/// for each row (partition), `row_base + run_start*size + i*run_step*size` for i in 0..run_len.
#[derive(Clone, Debug)]
pub struct Resolved {
    region: Region,
    pub dtype: DType,
    row_bases: Vec<i64>,
    run_starts: Vec<i64>,
    run_len: usize,
    run_step: i64,
}

impl Resolved {
    pub fn num_elems(&self) -> usize {
        self.row_bases.len() * self.run_starts.len() * self.run_len
    }

    /// Calls `f(byte_address)` for every element, in order.
    #[inline]
    fn for_each_addr(&self, mut f: impl FnMut(usize)) {
        let size = self.dtype.size() as i64;
        for &row in &self.row_bases {
            for &run in &self.run_starts {
                let base = row + run * size;
                for i in 0..self.run_len as i64 {
                    f((base + i * self.run_step * size) as usize);
                }
            }
        }
    }

    /// Calls `f(start_byte, n, stride_bytes)` for every run.
    #[inline]
    fn for_each_run(&self, mut f: impl FnMut(usize, usize, usize)) -> Result<(), ErrorKind> {
        let size = self.dtype.size() as i64;
        for &row in &self.row_bases {
            for &run in &self.run_starts {
                let base = row + run * size;
                let step = self.run_step * size;
                if step < 0 && self.run_len > 1 {
                    // Negative innermost steps: hand out element by element.
                    for i in 0..self.run_len as i64 {
                        f((base + i * step) as usize, 1, size as usize);
                    }
                } else {
                    f(base as usize, self.run_len, step as usize);
                }
            }
        }
        Ok(())
    }
}

/// All memories of a core.
#[derive(Clone, Debug)]
pub struct Memories {
    pub sbuf: OnChip,
    pub psum: OnChip,
    pub hbm: Vec<HbmTensor>,
    hbm_index: HashMap<String, usize>,
    partitions: usize,
    max_free_dims: usize,
}

impl Memories {
    pub fn new(target: &Target, decls: &[HbmTensorDecl]) -> Self {
        let mut hbm = Vec::with_capacity(decls.len());
        let mut hbm_index = HashMap::new();
        for d in decls {
            let bytes = d.shape.iter().product::<usize>() * d.dtype.size();
            hbm_index.insert(d.name.clone(), hbm.len());
            hbm.push(HbmTensor { decl: d.clone(), data: vec![0; bytes], written: vec![0; bytes] });
        }
        Memories {
            sbuf: OnChip::new("SBUF", target.partitions, target.sbuf_partition_bytes, target.sbuf_usable_bytes),
            psum: OnChip::new("PSUM", target.partitions, target.psum_partition_bytes, target.psum_partition_bytes),
            hbm,
            hbm_index,
            partitions: target.partitions,
            max_free_dims: target.max_free_dims,
        }
    }

    pub fn hbm_tensor(&self, name: &str) -> Option<&HbmTensor> {
        self.hbm_index.get(name).map(|&i| &self.hbm[i])
    }

    pub fn hbm_tensor_mut(&mut self, name: &str) -> Option<&mut HbmTensor> {
        self.hbm_index.get(name).map(|&i| &mut self.hbm[i])
    }

    /// Fills an input tensor from host bytes (marks it written).
    pub fn load_input(&mut self, name: &str, bytes: &[u8]) -> Result<(), ErrorKind> {
        let t = self.hbm_tensor_mut(name).ok_or_else(|| ErrorKind::UnknownTensor(name.to_string()))?;
        if bytes.len() != t.data.len() {
            return Err(ErrorKind::ShapeMismatch(format!(
                "input `{name}` has {} bytes, the program declares {:?} {} = {} bytes",
                bytes.len(),
                t.decl.shape,
                t.decl.dtype,
                t.data.len()
            )));
        }
        t.data.copy_from_slice(bytes);
        t.written.fill(1);
        Ok(())
    }

    /// Checks an access pattern against the memory and the target's rules and resolves it.
    pub fn resolve(&self, ap: &AccessPattern) -> Result<Resolved, ErrorKind> {
        if ap.free.len() > self.max_free_dims {
            return Err(ErrorKind::TooManyFreeDims { dims: ap.free.len(), max: self.max_free_dims });
        }
        for (i, &[step, num]) in ap.free.iter().enumerate() {
            if !(0..=u16::MAX as i64).contains(&num) {
                return Err(ErrorKind::BadFreeDim { dim: i, what: format!("size {num} is outside 0..=65535") });
            }
            if ap.mem.is_on_chip() && !(i16::MIN as i64..=i16::MAX as i64).contains(&step) {
                return Err(ErrorKind::BadFreeDim { dim: i, what: format!("step {step} does not fit in int16") });
            }
        }
        if ap.num_elems() > MAX_ACCESS_ELEMS {
            return Err(ErrorKind::Invalid(format!(
                "the pattern addresses {} elements, more than the simulator's limit of {MAX_ACCESS_ELEMS}",
                ap.num_elems()
            )));
        }
        if ap.partitions > MAX_ACCESS_ELEMS {
            return Err(ErrorKind::Invalid(format!("{} rows is more than the simulator's limit", ap.partitions)));
        }
        if ap.offset > i64::MAX as u64 / 2 {
            return Err(ErrorKind::Invalid(format!("byte offset {} is out of any memory", ap.offset)));
        }
        let size = ap.dtype.size();
        if ap.offset % size as u64 != 0 && !ap.mem.is_on_chip() {
            return Err(ErrorKind::Misaligned { offset: ap.offset, dtype: ap.dtype.name() });
        }
        let (run_starts, run_len, run_step) = ap.runs();
        let extent = ap.free_extent();
        match &ap.mem {
            MemSpace::Sbuf | MemSpace::Psum => {
                let (region, mem) = if ap.mem == MemSpace::Sbuf {
                    (Region::Sbuf, &self.sbuf)
                } else {
                    (Region::Psum, &self.psum)
                };
                if ap.partitions > self.partitions {
                    return Err(ErrorKind::TooManyPartitions { count: ap.partitions, max: self.partitions });
                }
                if ap.start_partition + ap.partitions > self.partitions {
                    return Err(ErrorKind::PartitionOutOfRange {
                        start: ap.start_partition,
                        end: ap.start_partition + ap.partitions,
                        max: self.partitions,
                    });
                }
                if ap.partition_step != 0 {
                    return Err(ErrorKind::Invalid("partition_step applies to HBM operands only".into()));
                }
                if let Some((lo, hi)) = extent {
                    let start = (ap.offset as i64).saturating_add(lo.saturating_mul(size as i64));
                    let end = (ap.offset as i64).saturating_add(hi.saturating_add(1).saturating_mul(size as i64));
                    if start < 0 || end > mem.usable_bytes as i64 {
                        return Err(ErrorKind::OutOfBounds { memory: mem.name, start, end, limit: mem.usable_bytes });
                    }
                }
                let row_bases = (ap.start_partition..ap.start_partition + ap.partitions)
                    .map(|p| (p * mem.partition_bytes) as i64 + ap.offset as i64)
                    .collect();
                Ok(Resolved { region, dtype: ap.dtype, row_bases, run_starts, run_len, run_step })
            }
            MemSpace::Hbm(name) => {
                let idx = *self.hbm_index.get(name).ok_or_else(|| ErrorKind::UnknownTensor(name.clone()))?;
                let t = &self.hbm[idx];
                if ap.start_partition != 0 {
                    return Err(ErrorKind::Invalid("HBM operands have no start partition".into()));
                }
                let len = t.num_elems() as i64 * t.decl.dtype.size() as i64 / size as i64;
                let base = (ap.offset / size as u64) as i64;
                if let Some((lo, hi)) = extent
                    && ap.partitions > 0
                {
                    let last_row = ((ap.partitions - 1) as i64).saturating_mul(ap.partition_step);
                    let start = base.saturating_add(lo).saturating_add(last_row.min(0));
                    let end = base.saturating_add(hi).saturating_add(last_row.max(0)).saturating_add(1);
                    if start < 0 || end > len {
                        return Err(ErrorKind::HbmOutOfBounds { tensor: name.clone(), start, end, len: len as usize });
                    }
                }
                let row_bases = (0..ap.partitions as i64)
                    .map(|p| base.wrapping_add(p.wrapping_mul(ap.partition_step)).wrapping_mul(size as i64))
                    .collect();
                Ok(Resolved { region: Region::Hbm(idx), dtype: ap.dtype, row_bases, run_starts, run_len, run_step })
            }
        }
    }

    fn region(&self, r: Region) -> (&[u8], &[u8]) {
        match r {
            Region::Sbuf => (&self.sbuf.data, &self.sbuf.written),
            Region::Psum => (&self.psum.data, &self.psum.written),
            Region::Hbm(i) => (&self.hbm[i].data, &self.hbm[i].written),
        }
    }

    fn region_mut(&mut self, r: Region) -> (&mut [u8], &mut [u8]) {
        match r {
            Region::Sbuf => (&mut self.sbuf.data, &mut self.sbuf.written),
            Region::Psum => (&mut self.psum.data, &mut self.psum.written),
            Region::Hbm(i) => {
                let t = &mut self.hbm[i];
                (&mut t.data, &mut t.written)
            }
        }
    }

    fn uninit_error(&self, r: Region, addr: usize) -> ErrorKind {
        match r {
            Region::Sbuf | Region::Psum => {
                let m = if r == Region::Sbuf { &self.sbuf } else { &self.psum };
                ErrorKind::UninitializedRead {
                    memory: m.name.to_string(),
                    partition: addr / m.partition_bytes,
                    byte: addr % m.partition_bytes,
                }
            }
            Region::Hbm(i) => ErrorKind::UninitializedRead {
                memory: format!("HBM tensor `{}`", self.hbm[i].decl.name),
                partition: 0,
                byte: addr,
            },
        }
    }

    /// Checks that every byte the resolved pattern covers has been written.
    pub fn check_written(&self, r: &Resolved) -> Result<(), ErrorKind> {
        let (_, written) = self.region(r.region);
        let size = r.dtype.size();
        let mut bad = None;
        r.for_each_run(|start, n, stride| {
            if bad.is_some() || n == 0 {
                return;
            }
            if stride == size {
                let span = &written[start..start + n * size];
                if let Some(i) = span.iter().position(|&w| w == 0) {
                    bad = Some(start + i);
                }
            } else {
                for i in 0..n {
                    let a = start + i * stride;
                    if let Some(j) = written[a..a + size].iter().position(|&w| w == 0) {
                        bad = Some(a + j);
                        return;
                    }
                }
            }
        })?;
        match bad {
            Some(addr) => Err(self.uninit_error(r.region, addr)),
            None => Ok(()),
        }
    }

    /// Reads raw element bits (zero-extended), partition-major.
    pub fn read_bits(&self, ap: &AccessPattern) -> Result<Vec<u32>, ErrorKind> {
        let r = self.resolve(ap)?;
        self.check_written(&r)?;
        let (data, _) = self.region(r.region);
        let mut out = Vec::with_capacity(r.num_elems());
        r.for_each_addr(|a| out.push(dtype::load_bits(r.dtype, data, a)));
        Ok(out)
    }

    /// Reads elements converted to f32 (exact for floats), partition-major.
    pub fn read_f32(&self, ap: &AccessPattern) -> Result<Vec<f32>, ErrorKind> {
        let r = self.resolve(ap)?;
        self.check_written(&r)?;
        let (data, _) = self.region(r.region);
        let mut out = Vec::with_capacity(r.num_elems());
        r.for_each_run(|start, n, stride| dtype::decode_run(r.dtype, data, start, n, stride, &mut out))?;
        Ok(out)
    }

    /// Reads integer elements exactly as i64, partition-major.
    pub fn read_i64(&self, ap: &AccessPattern) -> Result<Vec<i64>, ErrorKind> {
        Ok(self.read_bits(ap)?.into_iter().map(|b| ap.dtype.decode_i64(b)).collect())
    }

    /// Writes raw element bits, partition-major.
    pub fn write_bits(&mut self, ap: &AccessPattern, bits: &[u32]) -> Result<(), ErrorKind> {
        let r = self.resolve(ap)?;
        check_len(&r, bits.len())?;
        let size = r.dtype.size();
        let (data, written) = self.region_mut(r.region);
        let mut i = 0;
        r.for_each_addr(|a| {
            dtype::store_bits(r.dtype, data, a, bits[i]);
            written[a..a + size].fill(1);
            i += 1;
        });
        Ok(())
    }

    /// Writes f32 values converted to the operand's dtype with `rounding`, partition-major.
    pub fn write_f32(&mut self, ap: &AccessPattern, vals: &[f32], rounding: &mut Rounding) -> Result<(), ErrorKind> {
        let r = self.resolve(ap)?;
        check_len(&r, vals.len())?;
        let size = r.dtype.size();
        let (data, written) = self.region_mut(r.region);
        let mut i = 0;
        r.for_each_run(|start, n, stride| {
            dtype::encode_run(r.dtype, rounding, &vals[i..i + n], data, start, stride);
            if stride == size {
                written[start..start + n * size].fill(1);
            } else {
                for k in 0..n {
                    written[start + k * stride..start + k * stride + size].fill(1);
                }
            }
            i += n;
        })?;
        Ok(())
    }

    /// Writes integers exactly (saturating to the dtype), partition-major.
    pub fn write_i64(&mut self, ap: &AccessPattern, vals: &[i64]) -> Result<(), ErrorKind> {
        let bits: Vec<u32> = vals.iter().map(|&v| ap.dtype.encode_i64(v)).collect();
        self.write_bits(ap, &bits)
    }

    /// Bytes per partition of SBUF in use by the program's highest addressed byte (for stats).
    pub fn sbuf_high_water(&self) -> usize {
        let mut high = 0;
        for p in 0..self.sbuf.partitions {
            let row = &self.sbuf.written[p * self.sbuf.partition_bytes..(p + 1) * self.sbuf.partition_bytes];
            if let Some(last) = row.iter().rposition(|&w| w != 0) {
                high = high.max(last + 1);
            }
        }
        high
    }

    /// Whether every element of an HBM tensor was written; if not, the first unwritten element.
    pub fn first_unwritten(&self, name: &str) -> Option<usize> {
        let t = self.hbm_tensor(name)?;
        let size = t.decl.dtype.size();
        t.written.iter().position(|&w| w == 0).map(|b| b / size)
    }

    /// Outputs of the program (role Output), in declaration order.
    pub fn outputs(&self) -> impl Iterator<Item = &HbmTensor> {
        self.hbm.iter().filter(|t| t.decl.role == HbmRole::Output)
    }
}

fn check_len(r: &Resolved, n: usize) -> Result<(), ErrorKind> {
    if r.num_elems() != n {
        return Err(ErrorKind::ShapeMismatch(format!(
            "destination covers {} elements, the result has {n}",
            r.num_elems()
        )));
    }
    Ok(())
}
