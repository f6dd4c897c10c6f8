//! The memories of one NeuronCore: HBM (named flat tensors), SBUF and PSUM (partitions × bytes),
//! with a record of which bytes have been written, so that reading memory nothing wrote is an
//! error that names the place instead of a silent NaN.

pub mod ap;

pub use ap::{AccessPattern, FreeDim, MemSpace};

use crate::dtype::{self, DType, Rounding};
use crate::error::ErrorKind;
use crate::program::{HbmRole, HbmTensorDecl};
use crate::target::Target;
use std::cell::{Cell, RefCell};
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
    /// Bytes backed per partition (the row stride of `data`): only what the program can reach.
    pub partition_bytes: usize,
    pub usable_bytes: usize,
    pub data: Vec<u8>,
    /// One byte per data byte: 1 once written.
    pub written: Vec<u8>,
    /// One bit per [`DIRTY_BLOCK`] bytes of `data`: set when a write's span touches the block
    /// (performance only: [`Arena::recycle`] zeroes these blocks instead of scanning the map).
    dirty: Vec<u64>,
}

/// Granularity of [`OnChip`]'s dirty blocks, in bytes.
const DIRTY_BLOCK: usize = 256;

impl OnChip {
    fn new(
        name: &'static str,
        partitions: usize,
        partition_bytes: usize,
        usable_bytes: usize,
        spare: Option<(Vec<u8>, Vec<u8>)>,
    ) -> Self {
        let n = partitions * partition_bytes;
        let (data, written) = match spare {
            Some((d, w)) => (resized(d, n), resized(w, n)),
            None => (vec![0; n], vec![0; n]),
        };
        OnChip {
            name,
            partitions,
            partition_bytes,
            usable_bytes,
            data,
            written,
            dirty: vec![0; n.div_ceil(DIRTY_BLOCK).div_ceil(64)],
        }
    }

    /// Records that a write may change bytes `lo..hi` (of `data` and `written`).
    fn mark_dirty(&mut self, lo: usize, hi: usize) {
        if hi <= lo {
            return;
        }
        for block in lo / DIRTY_BLOCK..=(hi - 1) / DIRTY_BLOCK {
            if let Some(word) = self.dirty.get_mut(block / 64) {
                *word |= 1 << (block % 64);
            }
        }
    }
}

/// `n` zero bytes from an all-zero buffer (an [`Arena`]'s): truncated, or extended with zeros
/// when its allocation is large enough; else a fresh zeroed allocation (`vec![0; n]`: pages are
/// only touched when used).
fn resized(mut v: Vec<u8>, n: usize) -> Vec<u8> {
    if v.capacity() >= n {
        v.resize(n, 0);
        v
    } else {
        vec![0; n]
    }
}

/// Zeroes the bytes of `chip` a run wrote, so that its buffers are all zero again: every dirty
/// block, which covers every span a write touched (every write to SBUF or PSUM goes through
/// `Memories::region_for_write` or `two_regions`, which mark the span of each row first).
fn clean(chip: &mut OnChip) {
    let n = chip.data.len();
    let mut run: Option<(usize, usize)> = None;
    let flush = |chip: &mut OnChip, (lo, hi): (usize, usize)| {
        let hi = hi.min(n);
        if lo < hi {
            chip.data[lo..hi].fill(0);
            chip.written[lo..hi].fill(0);
        }
    };
    for w in 0..chip.dirty.len() {
        let mut bits = std::mem::take(&mut chip.dirty[w]);
        while bits != 0 {
            let block = w * 64 + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let (lo, hi) = (block * DIRTY_BLOCK, (block + 1) * DIRTY_BLOCK);
            run = match run {
                Some((a, b)) if b == lo => Some((a, hi)),
                Some(r) => {
                    flush(chip, r);
                    Some((lo, hi))
                }
                None => Some((lo, hi)),
            };
        }
    }
    if let Some(r) = run {
        flush(chip, r);
    }
}

/// SBUF and PSUM buffers kept between runs (a session's: performance only). A run allocates the
/// on-chip memories its program reaches; freed, glibc returns such large blocks to the OS, and the
/// next run page-faults them in again, which cost several times the simulation of a small
/// program (a compiled GPT-2 block: 26 MB of SBUF/PSUM data and written maps per run). Kept,
/// they are zeroed where the run wrote ([`Arena::recycle`]). Contents never carry over: every
/// run starts from zeroed, unwritten memory, as with fresh buffers (debug builds check it).
#[derive(Debug, Default)]
pub struct Arena {
    sbuf: Option<(Vec<u8>, Vec<u8>)>,
    psum: Option<(Vec<u8>, Vec<u8>)>,
}

impl Arena {
    /// Keeps `mem`'s SBUF and PSUM buffers for the next run, zeroed where the run wrote.
    pub fn recycle(&mut self, mem: Memories) {
        let Memories { mut sbuf, mut psum, .. } = mem;
        clean(&mut sbuf);
        clean(&mut psum);
        debug_assert!(
            sbuf.data.iter().chain(&sbuf.written).all(|&b| b == 0),
            "SBUF left dirty"
        );
        debug_assert!(
            psum.data.iter().chain(&psum.written).all(|&b| b == 0),
            "PSUM left dirty"
        );
        self.sbuf = Some((sbuf.data, sbuf.written));
        self.psum = Some((psum.data, psum.written));
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
    /// Bytes `[lo, hi)` relative to a row's base that hold all of that row's elements (gaps
    /// included): a row whose whole span is known written needs no per-element bookkeeping.
    span: (i64, i64),
}

impl Resolved {
    pub fn num_elems(&self) -> usize {
        self.row_bases.len() * self.run_starts.len() * self.run_len
    }

    /// Calls `f(start_byte, n, stride_bytes)` for every run.
    #[inline]
    fn for_each_run(&self, mut f: impl FnMut(usize, usize, usize)) -> Result<(), ErrorKind> {
        for &row in &self.row_bases {
            self.for_each_run_in_row(row, &mut f);
        }
        Ok(())
    }

    /// Calls `f(start_byte, n, stride_bytes)` for every run of the row based at byte `row`.
    #[inline]
    fn for_each_run_in_row(&self, row: i64, mut f: impl FnMut(usize, usize, usize)) {
        let size = self.dtype.size() as i64;
        let step = self.run_step * size;
        for &run in &self.run_starts {
            let base = row + run * size;
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

    /// Like [`Resolved::for_each_run`] for a write: `f(start_byte, n, stride_bytes, known)`,
    /// where `known` says that the run's whole row is already known written (`marks`), so the
    /// write need not mark its bytes.
    #[inline]
    fn for_each_write_run(&self, marks: Marks, mut f: impl FnMut(usize, usize, usize, bool)) {
        for &row in &self.row_bases {
            let (lo, hi) = self.row_span(row);
            let known = hi <= lo || marks.covers(lo, hi);
            self.for_each_run_in_row(row, |start, n, stride| f(start, n, stride, known));
        }
    }

    /// Bytes `[start, end)` of the row based at byte `row` that hold its elements.
    #[inline]
    fn row_span(&self, row: i64) -> (usize, usize) {
        ((row + self.span.0) as usize, (row + self.span.1) as usize)
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
    /// Result buffers handed back with `recycle_*`, reused by the next reads (performance only).
    pool: BufferPool,
    /// Written-prefix watermarks (performance only; see [`Watermarks`]).
    wm: Watermarks,
}

/// The on-chip memory of another physical core of a logical core (LNC=2): its own SBUF and PSUM,
/// swapped into a [`Memories`] while that core's instructions run ([`Memories::swap_core`]).
#[derive(Clone, Debug)]
pub struct CoreMemory {
    sbuf: OnChip,
    psum: OnChip,
    wm_sbuf: Vec<Cell<Known>>,
    wm_psum: Vec<Cell<Known>>,
}

/// A cache over the written maps: for every SBUF/PSUM partition and every HBM tensor, a few
/// byte ranges known to be all written. It only ever learns ranges that are written (bytes never
/// become unwritten) and it may lag behind the written map, never run ahead of it, so a check may
/// skip scanning any span inside a known range. Writes and successful checks of a span record it
/// (merged with the known ranges it overlaps or touches): a tile read again and again, anywhere
/// in its partition, is scanned once.
#[derive(Clone, Debug)]
struct Watermarks {
    sbuf: Vec<Cell<Known>>,
    psum: Vec<Cell<Known>>,
    hbm: Vec<Cell<Known>>,
}

/// Up to [`KNOWN_RANGES`] written byte ranges `[lo, hi)` of one row, relative to its start;
/// `(0, 0)` is an unused slot.
#[derive(Clone, Copy, Debug, Default)]
struct Known([(usize, usize); KNOWN_RANGES]);

const KNOWN_RANGES: usize = 4;

impl Known {
    /// The first `len` bytes.
    fn prefix(len: usize) -> Known {
        let mut k = Known::default();
        k.0[0] = (0, len);
        k
    }

    fn covers(&self, lo: usize, hi: usize) -> bool {
        self.0.iter().any(|&(a, b)| a <= lo && hi <= b)
    }

    /// Records `[lo, hi)`: merged with every range it overlaps or touches, then kept in a free
    /// slot, or in place of the shortest range when that is shorter.
    fn add(&mut self, mut lo: usize, mut hi: usize) {
        if hi <= lo {
            return;
        }
        for r in self.0.iter_mut() {
            if r.1 > r.0 && r.0 <= hi && lo <= r.1 {
                lo = lo.min(r.0);
                hi = hi.max(r.1);
                *r = (0, 0);
            }
        }
        if let Some(slot) = self.0.iter_mut().min_by_key(|r| r.1 - r.0)
            && slot.1 - slot.0 < hi - lo
        {
            *slot = (lo, hi);
        }
    }
}

/// The watermarks of one region: one cell per row of `row_bytes` (HBM: one row, the tensor).
#[derive(Clone, Copy)]
struct Marks<'a> {
    cells: &'a [Cell<Known>],
    row_bytes: usize,
}

impl Marks<'_> {
    /// The cell of the row holding byte `addr`, and that row's first byte.
    fn row(&self, addr: usize) -> Option<(&Cell<Known>, usize)> {
        let r = addr.checked_div(self.row_bytes)?;
        Some((self.cells.get(r)?, r * self.row_bytes))
    }

    /// Whether bytes `start..end` (within one row) are known written.
    fn covers(&self, start: usize, end: usize) -> bool {
        self.row(start)
            .is_some_and(|(c, base)| c.get().covers(start - base, end - base))
    }

    /// Records that bytes `start..end` (within one row) are written.
    fn extend(&self, start: usize, end: usize) {
        if let Some((c, base)) = self.row(start) {
            let mut k = c.get();
            k.add(start - base, end - base);
            c.set(k);
        }
    }
}

/// Large read buffers kept for reuse within a run. Without it every big instruction gets fresh
/// allocations, which glibc returns to the OS when they are freed, so the next instruction
/// page-faults the same memory in again (several times the cost of the instruction itself).
#[derive(Clone, Debug, Default)]
struct BufferPool {
    f32s: RefCell<Vec<Vec<f32>>>,
    bits: RefCell<Vec<Vec<u32>>>,
}

/// Buffers kept per element type, and the smallest capacity worth keeping.
const POOL_BUFFERS: usize = 4;
const POOL_MIN_ELEMS: usize = 16 * 1024;

fn take<T>(pool: &RefCell<Vec<Vec<T>>>, n: usize) -> Vec<T> {
    match pool.borrow_mut().pop() {
        Some(mut v) => {
            v.clear();
            v.reserve(n);
            v
        }
        None => Vec::with_capacity(n),
    }
}

fn give<T>(pool: &RefCell<Vec<Vec<T>>>, v: Vec<T>) {
    let mut p = pool.borrow_mut();
    if v.capacity() >= POOL_MIN_ELEMS && p.len() < POOL_BUFFERS {
        p.push(v);
    }
}

impl Memories {
    /// Memories with the whole of SBUF and PSUM allocated.
    pub fn new(target: &Target, decls: &[HbmTensorDecl]) -> Self {
        Self::with_extents(target, decls, target.sbuf_usable_bytes, target.psum_partition_bytes)
    }

    /// Memories where only the first `sbuf_bytes` / `psum_bytes` of each partition are backed
    /// (see `Program::on_chip_extent`); bounds are still checked against the target's limits.
    pub fn with_extents(target: &Target, decls: &[HbmTensorDecl], sbuf_bytes: usize, psum_bytes: usize) -> Self {
        Self::with_extents_in(target, decls, sbuf_bytes, psum_bytes, &mut Arena::default())
    }

    /// [`Memories::with_extents`] in buffers `arena` kept from an earlier run.
    pub fn with_extents_in(
        target: &Target,
        decls: &[HbmTensorDecl],
        sbuf_bytes: usize,
        psum_bytes: usize,
        arena: &mut Arena,
    ) -> Self {
        let mut hbm = Vec::with_capacity(decls.len());
        let mut hbm_index = HashMap::new();
        for d in decls {
            let bytes = d.shape.iter().product::<usize>() * d.dtype.size();
            hbm_index.insert(d.name.clone(), hbm.len());
            hbm.push(HbmTensor {
                decl: d.clone(),
                data: vec![0; bytes],
                written: vec![0; bytes],
            });
        }
        Memories {
            sbuf: OnChip::new(
                "SBUF",
                target.partitions,
                sbuf_bytes.min(target.sbuf_usable_bytes),
                target.sbuf_usable_bytes,
                arena.sbuf.take(),
            ),
            psum: OnChip::new(
                "PSUM",
                target.partitions,
                psum_bytes.min(target.psum_partition_bytes),
                target.psum_partition_bytes,
                arena.psum.take(),
            ),
            hbm,
            hbm_index,
            partitions: target.partitions,
            max_free_dims: target.max_free_dims,
            pool: BufferPool::default(),
            wm: Watermarks {
                sbuf: vec![Cell::new(Known::default()); target.partitions],
                psum: vec![Cell::new(Known::default()); target.partitions],
                hbm: vec![Cell::new(Known::default()); decls.len()],
            },
        }
    }

    /// A second physical core's on-chip memory (LNC=2): SBUF and PSUM of the same extents as
    /// this core's, all unwritten. HBM stays shared ([`Memories::swap_core`]).
    pub fn new_core(&self) -> CoreMemory {
        let chip = |m: &OnChip| OnChip::new(m.name, m.partitions, m.partition_bytes, m.usable_bytes, None);
        CoreMemory {
            sbuf: chip(&self.sbuf),
            psum: chip(&self.psum),
            wm_sbuf: vec![Cell::new(Known::default()); self.sbuf.partitions],
            wm_psum: vec![Cell::new(Known::default()); self.psum.partitions],
        }
    }

    /// Exchanges this core's SBUF and PSUM (and their caches) with `other`'s: the instructions of
    /// another physical core run between two swaps, on its own on-chip memory and the shared HBM.
    pub fn swap_core(&mut self, other: &mut CoreMemory) {
        std::mem::swap(&mut self.sbuf, &mut other.sbuf);
        std::mem::swap(&mut self.psum, &mut other.psum);
        std::mem::swap(&mut self.wm.sbuf, &mut other.wm_sbuf);
        std::mem::swap(&mut self.wm.psum, &mut other.wm_psum);
    }

    pub fn hbm_tensor(&self, name: &str) -> Option<&HbmTensor> {
        self.hbm_index.get(name).map(|&i| &self.hbm[i])
    }

    pub fn hbm_tensor_mut(&mut self, name: &str) -> Option<&mut HbmTensor> {
        self.hbm_index.get(name).map(|&i| &mut self.hbm[i])
    }

    /// Fills an input tensor from host bytes (marks it written).
    pub fn load_input(&mut self, name: &str, bytes: &[u8]) -> Result<(), ErrorKind> {
        let t = self
            .hbm_tensor_mut(name)
            .ok_or_else(|| ErrorKind::UnknownTensor(name.to_string()))?;
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
        let len = t.written.len();
        if let Some(&i) = self.hbm_index.get(name) {
            self.wm.hbm[i].set(Known::prefix(len));
        }
        Ok(())
    }

    /// Installs a whole HBM tensor's bytes by move, without copying them, and marks them
    /// written (device sessions, [`crate::session`]). Gives the bytes back when the tensor is not
    /// declared or their length differs from the declaration's.
    pub fn install(&mut self, name: &str, data: Vec<u8>) -> Result<(), Vec<u8>> {
        let Some(&i) = self.hbm_index.get(name) else {
            return Err(data);
        };
        let t = &mut self.hbm[i];
        if data.len() != t.data.len() {
            return Err(data);
        }
        t.data = data;
        t.written.fill(1);
        self.wm.hbm[i].set(Known::prefix(t.written.len()));
        Ok(())
    }

    /// Moves an HBM tensor's bytes out (device sessions), leaving it empty: use only when the
    /// run is over.
    pub fn take_data(&mut self, name: &str) -> Option<Vec<u8>> {
        let i = *self.hbm_index.get(name)?;
        Some(std::mem::take(&mut self.hbm[i].data))
    }

    fn marks(&self, r: Region) -> Marks<'_> {
        match r {
            Region::Sbuf => Marks {
                cells: &self.wm.sbuf,
                row_bytes: self.sbuf.partition_bytes,
            },
            Region::Psum => Marks {
                cells: &self.wm.psum,
                row_bytes: self.psum.partition_bytes,
            },
            Region::Hbm(i) => Marks {
                cells: &self.wm.hbm[i..i + 1],
                row_bytes: usize::MAX,
            },
        }
    }

    /// Data and written map of the region `dst` writes, with its watermarks. Records the span
    /// of every row `dst` covers as dirty (SBUF and PSUM), so a kept arena is cleaned exactly.
    fn region_for_write(&mut self, dst: &Resolved) -> (&mut [u8], &mut [u8], Marks<'_>) {
        self.note_dirty(dst);
        let r = dst.region;
        let Memories {
            sbuf, psum, hbm, wm, ..
        } = self;
        match r {
            Region::Sbuf => {
                let row_bytes = sbuf.partition_bytes;
                (
                    &mut sbuf.data,
                    &mut sbuf.written,
                    Marks {
                        cells: &wm.sbuf,
                        row_bytes,
                    },
                )
            }
            Region::Psum => {
                let row_bytes = psum.partition_bytes;
                (
                    &mut psum.data,
                    &mut psum.written,
                    Marks {
                        cells: &wm.psum,
                        row_bytes,
                    },
                )
            }
            Region::Hbm(i) => {
                let t = &mut hbm[i];
                (
                    &mut t.data,
                    &mut t.written,
                    Marks {
                        cells: &wm.hbm[i..i + 1],
                        row_bytes: usize::MAX,
                    },
                )
            }
        }
    }

    /// Checks an access pattern against the memory and the target's rules and resolves it.
    pub fn resolve(&self, ap: &AccessPattern) -> Result<Resolved, ErrorKind> {
        if ap.free.len() > self.max_free_dims {
            return Err(ErrorKind::TooManyFreeDims {
                dims: ap.free.len(),
                max: self.max_free_dims,
            });
        }
        for (i, &[step, num]) in ap.free.iter().enumerate() {
            if !(0..=u16::MAX as i64).contains(&num) {
                return Err(ErrorKind::BadFreeDim {
                    dim: i,
                    what: format!("size {num} is outside 0..=65535"),
                });
            }
            if ap.mem.is_on_chip() && !(i16::MIN as i64..=i16::MAX as i64).contains(&step) {
                return Err(ErrorKind::BadFreeDim {
                    dim: i,
                    what: format!("step {step} does not fit in int16"),
                });
            }
        }
        if ap.num_elems() > MAX_ACCESS_ELEMS {
            return Err(ErrorKind::Invalid(format!(
                "the pattern addresses {} elements, more than the simulator's limit of {MAX_ACCESS_ELEMS}",
                ap.num_elems()
            )));
        }
        if ap.partitions > MAX_ACCESS_ELEMS {
            return Err(ErrorKind::Invalid(format!(
                "{} rows is more than the simulator's limit",
                ap.partitions
            )));
        }
        if ap.offset > i64::MAX as u64 / 2 {
            return Err(ErrorKind::Invalid(format!(
                "byte offset {} is out of any memory",
                ap.offset
            )));
        }
        let size = ap.dtype.size();
        if !ap.offset.is_multiple_of(size as u64) && !ap.mem.is_on_chip() {
            return Err(ErrorKind::Misaligned {
                offset: ap.offset,
                dtype: ap.dtype.name(),
            });
        }
        let (run_starts, run_len, run_step) = ap.runs();
        let extent = ap.free_extent();
        let span = extent.map_or((0, 0), |(lo, hi)| (lo * size as i64, (hi + 1) * size as i64));
        match &ap.mem {
            MemSpace::Sbuf | MemSpace::Psum => {
                let (region, mem) = if ap.mem == MemSpace::Sbuf {
                    (Region::Sbuf, &self.sbuf)
                } else {
                    (Region::Psum, &self.psum)
                };
                if ap.partitions > self.partitions {
                    return Err(ErrorKind::TooManyPartitions {
                        count: ap.partitions,
                        max: self.partitions,
                    });
                }
                if ap.start_partition.saturating_add(ap.partitions) > self.partitions {
                    return Err(ErrorKind::PartitionOutOfRange {
                        start: ap.start_partition,
                        end: ap.start_partition.saturating_add(ap.partitions),
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
                        return Err(ErrorKind::OutOfBounds {
                            memory: mem.name,
                            start,
                            end,
                            limit: mem.usable_bytes,
                        });
                    }
                    if end > mem.partition_bytes as i64 {
                        // Only reachable for a pattern the program does not name (memories are
                        // sized from the program's operands).
                        return Err(ErrorKind::Invalid(format!(
                            "{} bytes {start}..{end} lie beyond the {} bytes per partition backed for this program",
                            mem.name, mem.partition_bytes
                        )));
                    }
                }
                let row_bases = (ap.start_partition..ap.start_partition + ap.partitions)
                    .map(|p| (p * mem.partition_bytes) as i64 + ap.offset as i64)
                    .collect();
                Ok(Resolved {
                    region,
                    dtype: ap.dtype,
                    row_bases,
                    run_starts,
                    run_len,
                    run_step,
                    span,
                })
            }
            MemSpace::Hbm(name) => {
                let idx = *self
                    .hbm_index
                    .get(name)
                    .ok_or_else(|| ErrorKind::UnknownTensor(name.clone()))?;
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
                    let end = base
                        .saturating_add(hi)
                        .saturating_add(last_row.max(0))
                        .saturating_add(1);
                    if start < 0 || end > len {
                        return Err(ErrorKind::HbmOutOfBounds {
                            tensor: name.clone(),
                            start,
                            end,
                            len: len as usize,
                        });
                    }
                }
                let row_bases = (0..ap.partitions as i64)
                    .map(|p| {
                        base.wrapping_add(p.wrapping_mul(ap.partition_step))
                            .wrapping_mul(size as i64)
                    })
                    .collect();
                Ok(Resolved {
                    region: Region::Hbm(idx),
                    dtype: ap.dtype,
                    row_bases,
                    run_starts,
                    run_len,
                    run_step,
                    span,
                })
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
        let marks = self.marks(r.region);
        let size = r.dtype.size();
        let mut bad = None;
        for &row in &r.row_bases {
            // A row whose whole span is known written (a tile read again and again) needs no
            // look at its runs.
            let (lo, hi) = r.row_span(row);
            if hi <= lo || marks.covers(lo, hi) {
                continue;
            }
            r.for_each_run_in_row(row, |start, n, stride| {
                if bad.is_some() || n == 0 {
                    return;
                }
                if stride == size {
                    let end = start + n * size;
                    if marks.covers(start, end) {
                        return;
                    }
                    let span = &written[start..end];
                    if all_nonzero(span) {
                        marks.extend(start, end);
                    } else if let Some(i) = span.iter().position(|&w| w == 0) {
                        bad = Some(start + i);
                    }
                } else {
                    // A strided run inside a range known written (a whole input tensor) needs no scan.
                    if marks.covers(start, start + (n - 1) * stride + size) {
                        return;
                    }
                    for i in 0..n {
                        let a = start + i * stride;
                        if let Some(j) = written[a..a + size].iter().position(|&w| w == 0) {
                            bad = Some(a + j);
                            return;
                        }
                    }
                }
            });
            if bad.is_some() {
                break;
            }
        }
        match bad {
            Some(addr) => Err(self.uninit_error(r.region, addr)),
            None => Ok(()),
        }
    }

    /// Reads raw element bits (zero-extended), partition-major. An `i64` operand has no 32-bit
    /// bits view: a typed refusal ([`no_bits_view`]).
    pub fn read_bits(&self, ap: &AccessPattern) -> Result<Vec<u32>, ErrorKind> {
        no_bits_view(ap.dtype)?;
        let r = self.resolve(ap)?;
        self.check_written(&r)?;
        let (data, _) = self.region(r.region);
        let mut out = take(&self.pool.bits, r.num_elems());
        r.for_each_run(|start, n, stride| dtype::load_bits_run(r.dtype, data, start, n, stride, &mut out))?;
        Ok(out)
    }

    /// An empty buffer with room for `n` values, reusing a recycled one when there is one (for
    /// results that are handed back with [`Memories::recycle_f32`] after use).
    pub fn scratch_f32(&self, n: usize) -> Vec<f32> {
        take(&self.pool.f32s, n)
    }

    /// Hands a buffer returned by `read_f32` (or any `Vec<f32>`) back for reuse by later reads.
    /// Optional: dropping it instead is always correct; recycling only saves the allocation.
    pub fn recycle_f32(&self, v: Vec<f32>) {
        give(&self.pool.f32s, v);
    }

    /// Hands a buffer returned by `read_bits` back for reuse (see [`Memories::recycle_f32`]).
    pub fn recycle_bits(&self, v: Vec<u32>) {
        give(&self.pool.bits, v);
    }

    /// Reads elements converted to f32 (exact for floats), partition-major.
    pub fn read_f32(&self, ap: &AccessPattern) -> Result<Vec<f32>, ErrorKind> {
        let r = self.resolve(ap)?;
        self.check_written(&r)?;
        let (data, _) = self.region(r.region);
        let mut out = take(&self.pool.f32s, r.num_elems());
        r.for_each_run(|start, n, stride| dtype::decode_run(r.dtype, data, start, n, stride, &mut out))?;
        Ok(out)
    }

    /// Reads integer elements exactly as i64, partition-major (an `i64` operand's 8 bytes as they
    /// are).
    pub fn read_i64(&self, ap: &AccessPattern) -> Result<Vec<i64>, ErrorKind> {
        if ap.dtype == DType::I64 {
            let r = self.resolve(ap)?;
            self.check_written(&r)?;
            let (data, _) = self.region(r.region);
            let mut out = Vec::with_capacity(r.num_elems());
            r.for_each_run(|start, n, stride| {
                out.extend((0..n).map(|k| load_i64(data, start + k * stride)));
            })?;
            return Ok(out);
        }
        Ok(self
            .read_bits(ap)?
            .into_iter()
            .map(|b| ap.dtype.decode_i64(b))
            .collect())
    }

    /// Writes raw element bits, partition-major (not of an `i64`: [`no_bits_view`]).
    pub fn write_bits(&mut self, ap: &AccessPattern, bits: &[u32]) -> Result<(), ErrorKind> {
        no_bits_view(ap.dtype)?;
        let r = self.resolve(ap)?;
        check_len(&r, bits.len())?;
        let size = r.dtype.size();
        let (data, written, marks) = self.region_for_write(&r);
        let mut i = 0;
        r.for_each_write_run(marks, |start, n, stride, known| {
            dtype::store_bits_run(r.dtype, &bits[i..i + n], data, start, stride);
            if !known {
                mark_written(written, marks, start, n, stride, size);
            }
            i += n;
        });
        Ok(())
    }

    /// Copies the raw bits of resolved `src` to resolved `dst` (same dtype, same element count,
    /// partition-major order on both sides): the same result and errors as `read_bits` then
    /// `write_bits`, but contiguous runs go memory to memory without an intermediate buffer.
    /// The caller has checked that `src` was written ([`Memories::check_written`]).
    pub fn copy_resolved(&mut self, src: &Resolved, dst: &Resolved) -> Result<(), ErrorKind> {
        check_len(dst, src.num_elems())?;
        if src.dtype.size() != dst.dtype.size() {
            return Err(ErrorKind::Invalid(format!(
                "raw copy between {} and {}",
                src.dtype, dst.dtype
            )));
        }
        let contiguous = |r: &Resolved| r.run_len <= 1 || r.run_step == 1;
        if src.dtype.size() == 8 && (src.region == dst.region || !contiguous(src) || !contiguous(dst)) {
            // 8-byte elements (int64), overlapping or strided: snapshot the values first.
            let (data, _) = self.region(src.region);
            let mut vals = Vec::with_capacity(src.num_elems());
            src.for_each_run(|start, n, stride| vals.extend((0..n).map(|k| load_i64(data, start + k * stride))))?;
            let (data, written, marks) = self.region_for_write(dst);
            let mut i = 0;
            dst.for_each_write_run(marks, |start, n, stride, known| {
                for (k, v) in vals[i..i + n].iter().enumerate() {
                    let a = start + k * stride;
                    data[a..a + 8].copy_from_slice(&v.to_le_bytes());
                }
                if !known {
                    mark_written(written, marks, start, n, stride, 8);
                }
                i += n;
            });
            return Ok(());
        }
        if src.region == dst.region || !contiguous(src) || !contiguous(dst) {
            // Overlap possible or strided: snapshot the source first, as read-then-write does.
            let (data, _) = self.region(src.region);
            let mut bits = Vec::with_capacity(src.num_elems());
            src.for_each_run(|start, n, stride| dtype::load_bits_run(src.dtype, data, start, n, stride, &mut bits))?;
            let size = dst.dtype.size();
            let (data, written, marks) = self.region_for_write(dst);
            let mut i = 0;
            dst.for_each_write_run(marks, |start, n, stride, known| {
                dtype::store_bits_run(dst.dtype, &bits[i..i + n], data, start, stride);
                if !known {
                    mark_written(written, marks, start, n, stride, size);
                }
                i += n;
            });
            return Ok(());
        }
        let byte_runs = |r: &Resolved| -> Result<Vec<(usize, usize)>, ErrorKind> {
            let size = r.dtype.size();
            let mut runs: Vec<(usize, usize)> = Vec::new();
            r.for_each_run(|start, n, _| {
                let len = n * size;
                match runs.last_mut() {
                    Some(last) if last.0 + last.1 == start => last.1 += len,
                    _ if len > 0 => runs.push((start, len)),
                    _ => {}
                }
            })?;
            Ok(runs)
        };
        let (src_runs, dst_runs) = (byte_runs(src)?, byte_runs(dst)?);
        let (from, to, written, marks) = self.two_regions(src.region, dst);
        let (mut si, mut di) = (0, 0);
        let (mut s_off, mut d_off) = (0, 0);
        while si < src_runs.len() && di < dst_runs.len() {
            let (s_start, s_len) = src_runs[si];
            let (d_start, d_len) = dst_runs[di];
            let n = (s_len - s_off).min(d_len - d_off);
            let (s, d) = (s_start + s_off, d_start + d_off);
            to[d..d + n].copy_from_slice(&from[s..s + n]);
            mark_written(written, marks, d, n, 1, 1);
            s_off += n;
            d_off += n;
            if s_off == s_len {
                (si, s_off) = (si + 1, 0);
            }
            if d_off == d_len {
                (di, d_off) = (di + 1, 0);
            }
        }
        Ok(())
    }

    /// Marks the span of every row of `dst` dirty, when it is on chip.
    fn note_dirty(&mut self, dst: &Resolved) {
        let chip = match dst.region {
            Region::Sbuf => &mut self.sbuf,
            Region::Psum => &mut self.psum,
            Region::Hbm(_) => return,
        };
        for &row in &dst.row_bases {
            let (lo, hi) = dst.row_span(row);
            chip.mark_dirty(lo, hi);
        }
    }

    /// The data of region `a` and the data and written map of the region `dst` writes, another
    /// one (`a != dst.region`); `dst`'s rows are marked dirty as in `region_for_write`.
    fn two_regions(&mut self, a: Region, dst: &Resolved) -> (&[u8], &mut [u8], &mut [u8], Marks<'_>) {
        self.note_dirty(dst);
        let b = dst.region;
        debug_assert!(a != b);
        let Memories {
            sbuf, psum, hbm, wm, ..
        } = self;
        let (sbuf_rows, psum_rows) = (sbuf.partition_bytes, psum.partition_bytes);
        let sbuf_marks = Marks {
            cells: &wm.sbuf,
            row_bytes: sbuf_rows,
        };
        let psum_marks = Marks {
            cells: &wm.psum,
            row_bytes: psum_rows,
        };
        let hbm_marks = |j: usize| Marks {
            cells: &wm.hbm[j..j + 1],
            row_bytes: usize::MAX,
        };
        match (a, b) {
            (Region::Sbuf, Region::Psum) => (&sbuf.data, &mut psum.data, &mut psum.written, psum_marks),
            (Region::Psum, Region::Sbuf) => (&psum.data, &mut sbuf.data, &mut sbuf.written, sbuf_marks),
            (Region::Sbuf, Region::Hbm(j)) => {
                let t = &mut hbm[j];
                (&sbuf.data, &mut t.data, &mut t.written, hbm_marks(j))
            }
            (Region::Psum, Region::Hbm(j)) => {
                let t = &mut hbm[j];
                (&psum.data, &mut t.data, &mut t.written, hbm_marks(j))
            }
            (Region::Hbm(i), Region::Sbuf) => (&hbm[i].data, &mut sbuf.data, &mut sbuf.written, sbuf_marks),
            (Region::Hbm(i), Region::Psum) => (&hbm[i].data, &mut psum.data, &mut psum.written, psum_marks),
            (Region::Hbm(i), Region::Hbm(j)) => {
                let (lo, hi) = hbm.split_at_mut(i.max(j));
                let (src, dst) = if i < j {
                    (&lo[i], &mut hi[0])
                } else {
                    (&hi[0], &mut lo[j])
                };
                (&src.data, &mut dst.data, &mut dst.written, hbm_marks(j))
            }
            _ => unreachable!("two_regions needs two different regions"),
        }
    }

    /// Writes raw element bits where `mask` is true, partition-major; other elements keep their
    /// bytes and written state (predicated copies, shuffles with "unchanged" lanes).
    pub fn write_bits_masked(&mut self, ap: &AccessPattern, bits: &[u32], mask: &[bool]) -> Result<(), ErrorKind> {
        no_bits_view(ap.dtype)?;
        let r = self.resolve(ap)?;
        check_len(&r, bits.len())?;
        check_len(&r, mask.len())?;
        let size = r.dtype.size();
        let (data, written, marks) = self.region_for_write(&r);
        // One store loop per element size, so the inner loop is a fixed-width store.
        fn run<const W: usize>(
            data: &mut [u8],
            written: &mut [u8],
            (start, stride, known): (usize, usize, bool),
            bits: &[u32],
            mask: &[bool],
        ) {
            for (k, (&b, &m)) in bits.iter().zip(mask).enumerate() {
                if m {
                    let a = start + k * stride;
                    data[a..a + W].copy_from_slice(&b.to_le_bytes()[..W]);
                    if !known {
                        written[a..a + W].copy_from_slice(&[1; W]);
                    }
                }
            }
        }
        let mut i = 0;
        r.for_each_write_run(marks, |start, n, stride, known| {
            let (b, m) = (&bits[i..i + n], &mask[i..i + n]);
            match size {
                4 => run::<4>(data, written, (start, stride, known), b, m),
                2 => run::<2>(data, written, (start, stride, known), b, m),
                _ => run::<1>(data, written, (start, stride, known), b, m),
            }
            i += n;
        });
        Ok(())
    }

    /// Writes f32 values converted to the operand's dtype with `rounding`, partition-major.
    pub fn write_f32(&mut self, ap: &AccessPattern, vals: &[f32], rounding: &mut Rounding) -> Result<(), ErrorKind> {
        let r = self.resolve(ap)?;
        check_len(&r, vals.len())?;
        let size = r.dtype.size();
        let (data, written, marks) = self.region_for_write(&r);
        let mut i = 0;
        r.for_each_write_run(marks, |start, n, stride, known| {
            dtype::encode_run(r.dtype, rounding, &vals[i..i + n], data, start, stride);
            if !known {
                mark_written(written, marks, start, n, stride, size);
            }
            i += n;
        });
        Ok(())
    }

    /// Writes integers exactly (saturating to the dtype), partition-major; an `i64` operand
    /// takes each value's 8 bytes.
    pub fn write_i64(&mut self, ap: &AccessPattern, vals: &[i64]) -> Result<(), ErrorKind> {
        if ap.dtype == DType::I64 {
            let r = self.resolve(ap)?;
            check_len(&r, vals.len())?;
            let (data, written, marks) = self.region_for_write(&r);
            let mut i = 0;
            r.for_each_write_run(marks, |start, n, stride, known| {
                for (k, v) in vals[i..i + n].iter().enumerate() {
                    let a = start + k * stride;
                    data[a..a + 8].copy_from_slice(&v.to_le_bytes());
                }
                if !known {
                    mark_written(written, marks, start, n, stride, 8);
                }
                i += n;
            });
            return Ok(());
        }
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
        // The vectorized all-written scan first; the byte search only when something is missing.
        if all_nonzero(&t.written) {
            return None;
        }
        t.written.iter().position(|&w| w == 0).map(|b| b / size)
    }

    /// Outputs of the program (role Output), in declaration order.
    pub fn outputs(&self) -> impl Iterator<Item = &HbmTensor> {
        self.hbm.iter().filter(|t| t.decl.role == HbmRole::Output)
    }

    /// The output tensors, moved out (the memories are done with): results leave the
    /// simulator without another copy of every output byte.
    pub fn into_outputs(self) -> impl Iterator<Item = HbmTensor> {
        self.hbm.into_iter().filter(|t| t.decl.role == HbmRole::Output)
    }
}

/// Whether every byte of `span` is nonzero. Scans 4 KiB blocks with a min-reduction (which
/// vectorizes) instead of a byte-by-byte search; callers locate the first zero only on failure.
fn all_nonzero(span: &[u8]) -> bool {
    span.chunks(4096).all(|c| c.iter().fold(u8::MAX, |m, &w| m.min(w)) != 0)
}

/// Marks the bytes of `n` elements of `size` bytes, `stride` bytes apart from `start`, written.
/// Contiguous spans below the watermark need nothing; others already marked (a tile rewritten
/// in a loop) are only scanned, since reading is cheaper than rewriting the same bytes.
fn mark_written(written: &mut [u8], marks: Marks, start: usize, n: usize, stride: usize, size: usize) {
    if stride == size {
        let end = start + n * size;
        if n == 0 || marks.covers(start, end) {
            return;
        }
        let span = &mut written[start..end];
        if !all_nonzero(span) {
            span.fill(1);
        }
        marks.extend(start, end);
    } else {
        for k in 0..n {
            written[start + k * stride..start + k * stride + size].fill(1);
        }
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

/// The 8 bytes at `a` as a little-endian int64.
fn load_i64(data: &[u8], a: usize) -> i64 {
    i64::from_le_bytes(data[a..a + 8].try_into().expect("8 bytes"))
}

/// `i64` elements have no 32-bit raw-bits view: the bit-level paths (bitvec ALU ops on raw bits,
/// shuffles, predicated copies, gathers) refuse them with a typed error instead of reading half
/// an element. Exact integer and f32 reads, and DMA's byte copies, take them.
fn no_bits_view(dtype: DType) -> Result<(), ErrorKind> {
    if dtype.size() > 4 {
        return Err(ErrorKind::UnsupportedDType {
            dtype: dtype.name(),
            why: "an 8-byte element has no 32-bit raw-bits view; this path reads raw bits".into(),
        });
    }
    Ok(())
}
