//! Memory dependences between instructions: what each instruction reads and writes, which
//! earlier instructions it must wait for, and the machinery the race detector shares.
//!
//! An instruction's *footprint* is one [`Access`] per operand: the memory (SBUF, PSUM or one HBM
//! tensor), for on-chip memory the partition range, and the bytes touched within each partition
//! (for HBM, within the tensor). Each operand's [`crate::program::Role`] comes from
//! [`Op::operands`]: a write or a read-modify-write is a write here (it conflicts with everything
//! a read would), a read a read. An operand whose address depends on data (the indirect side of a
//! DMA gather/scatter, the moved side of a dynamic copy) is taken conservatively as the whole
//! tensor (HBM) or the whole partition rows (on chip).
//!
//! Two accesses *conflict* when their bytes overlap and at least one writes. Instructions are
//! ordered by their queue (each compute engine is one queue, each DMA queue another, see
//! [`queue_of`]) and by their `wait` lists; [`infer_waits`] fills the wait lists from conflicts,
//! and the executor's race detector checks that every conflict is ordered (docs/timeline.md).

use crate::mem::{AccessPattern, MemSpace};
use crate::program::{Engine, Instruction, Op, Program};
use std::collections::{BTreeSet, HashMap};

/// A queue of the NeuronCore: the four compute engines, then the DMA queues.
pub type QueueId = u16;

/// Queues before the first DMA queue (Tensor, Vector, Scalar, GpSimd).
pub const COMPUTE_QUEUES: u16 = 4;

/// Queue numbers per physical core: core `c`'s queues are `c * CORE_QUEUES + local`, so core
/// 0's numbering is the single-core one. (A DMA queue number beyond `CORE_QUEUES - 4` is refused
/// by the executor long before: targets have 16.)
pub const CORE_QUEUES: u16 = 64;

/// The queue an instruction runs on. Compute engines have one queue each; a DMA instruction
/// runs on DMA queue `queue` (0 when unset: the documented default keeps every program written
/// before queues existed as one in-order DMA stream, which is what their waits assume). Each
/// physical core (`Instruction::core`) has its own queues.
pub fn queue_of(inst: &Instruction) -> QueueId {
    let local = match inst.engine {
        Engine::Tensor => 0,
        Engine::Vector => 1,
        Engine::Scalar => 2,
        Engine::Gpsimd => 3,
        Engine::Dma => COMPUTE_QUEUES.saturating_add(inst.queue.unwrap_or(0)),
    };
    (inst.core as u16).saturating_mul(CORE_QUEUES).saturating_add(local)
}

/// Human name of a queue (`tensor`, `dma3`, …; `core1.vector` on the second core).
pub fn queue_name(q: QueueId) -> String {
    let (core, local) = (q / CORE_QUEUES, q % CORE_QUEUES);
    let name = match local {
        0 => "tensor".into(),
        1 => "vector".into(),
        2 => "scalar".into(),
        3 => "gpsimd".into(),
        d => format!("dma{}", d - COMPUTE_QUEUES),
    };
    if core == 0 { name } else { format!("core{core}.{name}") }
}

/// Whether record `r` and instruction `index` (on queue `q`) are on different cores and one of
/// them is a `core_barrier` (`barrier_at[i]`): a barrier's access to its shared tensor orders its
/// own core's accesses only, so it neither hides nor is hidden by the other core's records.
pub fn barrier_across(barrier_at: &[bool], index: usize, q: QueueId, r: &Record) -> bool {
    r.queue / CORE_QUEUES != q / CORE_QUEUES
        && (barrier_at.get(index).copied().unwrap_or(false)
            || barrier_at.get(r.inst as usize).copied().unwrap_or(false))
}

/// Pairs the `core_barrier`s of the two cores of a logical core, in program order, and checks
/// that program order is a serialisation of the barrier (docs/timeline.md, "Two cores"): after
/// core `c`'s barrier, no instruction of core `c` may come before the other core's matching
/// barrier, and no barrier may be left without a partner.
#[derive(Default)]
pub struct BarrierPairs {
    /// Per core, its barrier still waiting for the other core's.
    pending: [Option<usize>; 2],
}

impl BarrierPairs {
    /// Instruction `index` of `program`: `Ok(Some(partner))` when it completes a barrier pair
    /// whose first half is `partner`, or why the order is not one the two cores can run.
    pub fn step(&mut self, program: &Program, index: usize) -> Result<Option<usize>, String> {
        let inst = &program.instructions[index];
        let c = inst.core as usize;
        if c > 1 {
            return Ok(None); // the executor refuses the core first
        }
        if let Some(&w) = inst.wait.iter().find(|&&w| {
            program
                .instructions
                .get(w as usize)
                .is_some_and(|o| o.core != inst.core)
        }) {
            return Err(format!(
                "waits for instruction #{w}, which runs on core {}: the two cores synchronise only \
                 through core_barrier",
                program.instructions[w as usize].core
            ));
        }
        if let Some(a) = self.pending[c] {
            return Err(format!(
                "runs on core {c} after that core's core_barrier #{a}, but before core {}'s \
                 matching core_barrier: put both barriers before either core's next instruction",
                1 - c
            ));
        }
        if !matches!(inst.op, Op::CoreBarrier(_)) {
            return Ok(None);
        }
        match self.pending[1 - c].take() {
            Some(a) => Ok(Some(a)),
            None => {
                self.pending[c] = Some(index);
                Ok(None)
            }
        }
    }

    /// The barrier left without a partner, if any (a deadlock on hardware).
    pub fn unmatched(&self) -> Option<(usize, usize)> {
        (0..2).find_map(|c| self.pending[c].map(|i| (i, c)))
    }
}

/// Which memory an access touches. HBM tensors are numbered in declaration order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Space {
    /// The SBUF of physical core `.0` (each core of a logical core has its own).
    Sbuf(u8),
    Psum(u8),
    /// HBM is shared by the cores.
    Hbm(usize),
}

impl Space {
    /// A dense number: SBUF and PSUM of core 0, then of core 1, then HBM tensors from 4.
    fn slot(self) -> usize {
        match self {
            Space::Sbuf(c) => 2 * (c.min(1) as usize),
            Space::Psum(c) => 2 * (c.min(1) as usize) + 1,
            Space::Hbm(k) => k.saturating_add(4),
        }
    }
}

/// The bytes one operand touches.
#[derive(Clone, Debug, PartialEq)]
pub struct Access {
    pub operand: &'static str,
    pub write: bool,
    pub space: Space,
    /// Partitions `[lo, hi)`; HBM is one row `[0, 1)`.
    pub parts: (usize, usize),
    /// Byte hull `[lo, hi)` within each partition (HBM: within the tensor).
    pub bytes: (i64, i64),
    /// The exact walk when the hull is not fully touched: byte offset, element size and
    /// `[step, num]` dims in elements. `None`: every byte of the hull is touched (or the access
    /// is taken conservatively as the whole hull).
    pattern: Option<Box<Walk>>,
}

#[derive(Clone, Debug)]
struct Walk {
    offset: i64,
    size: i64,
    dims: Vec<[i64; 2]>,
    /// [`Walk::intervals`], computed once: an access is tested against many others (every
    /// history record of its memory, in `infer_waits` and in the race detector).
    intervals: std::sync::OnceLock<Option<Vec<(i64, i64)>>>,
}

impl PartialEq for Walk {
    fn eq(&self, other: &Walk) -> bool {
        self.offset == other.offset && self.size == other.size && self.dims == other.dims
    }
}

/// Elements beyond which an exact overlap test falls back to the (conservative) hulls.
const EXACT_LIMIT: usize = 1 << 20;

impl Walk {
    fn new(offset: i64, size: i64, dims: Vec<[i64; 2]>) -> Walk {
        Walk {
            offset,
            size,
            dims,
            intervals: std::sync::OnceLock::new(),
        }
    }

    /// Sorted, merged byte intervals touched, or `None` when there are too many to list.
    fn intervals(&self) -> Option<&[(i64, i64)]> {
        self.intervals.get_or_init(|| self.compute_intervals()).as_deref()
    }

    fn compute_intervals(&self) -> Option<Vec<(i64, i64)>> {
        let n = self
            .dims
            .iter()
            .try_fold(1usize, |acc, d| acc.checked_mul(d[1].max(0) as usize))?;
        if n > EXACT_LIMIT {
            return None;
        }
        // Element runs `[lo, hi)` (in elements): the innermost dim is one run when its step is
        // ±1, else one run per element; the outer dims are walked as an odometer. The union of
        // the runs is the union of the elements, so sorting and merging gives the same intervals
        // as listing every element would.
        let Some((&[step, num], outer)) = self.dims.split_last() else {
            return Some(vec![(self.offset, self.offset.saturating_add(self.size))]);
        };
        let num = num.max(0);
        let contiguous = step.abs() == 1;
        let per_outer = if contiguous { 1 } else { num as usize };
        let outer_count = n.checked_div(num.max(1) as usize).unwrap_or(0);
        let mut runs: Vec<(i64, i64)> = Vec::with_capacity(outer_count.saturating_mul(per_outer));
        let mut idx = vec![0i64; outer.len()];
        if num > 0 && outer.iter().all(|d| d[1] > 0) {
            'odometer: loop {
                let base = outer
                    .iter()
                    .zip(&idx)
                    .fold(0i64, |acc, (d, &i)| acc.saturating_add(i.saturating_mul(d[0])));
                if contiguous {
                    let last = base.saturating_add((num - 1).saturating_mul(step));
                    runs.push((base.min(last), base.max(last).saturating_add(1)));
                } else {
                    for i in 0..num {
                        let e = base.saturating_add(i.saturating_mul(step));
                        runs.push((e, e.saturating_add(1)));
                    }
                }
                // The next outer index, the last outer dim fastest.
                let mut k = outer.len();
                loop {
                    if k == 0 {
                        break 'odometer;
                    }
                    k -= 1;
                    idx[k] += 1;
                    if idx[k] < outer[k][1] {
                        break;
                    }
                    idx[k] = 0;
                }
            }
        }
        if !runs.windows(2).all(|w| w[0].0 <= w[1].0) {
            runs.sort_unstable();
        }
        let mut out: Vec<(i64, i64)> = Vec::new();
        for (s, e) in runs {
            let lo = self.offset.saturating_add(s.saturating_mul(self.size));
            let hi = self.offset.saturating_add(e.saturating_mul(self.size));
            match out.last_mut() {
                Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                _ => out.push((lo, hi)),
            }
        }
        Some(out)
    }
}

/// Whether sorted, disjoint intervals `a` touch `[lo, hi)`.
fn touches(a: &[(i64, i64)], (lo, hi): (i64, i64)) -> bool {
    let i = a.partition_point(|iv| iv.1 <= lo);
    a.get(i).is_some_and(|iv| iv.0 < hi)
}

/// Whether `[step, num]` dims (in elements) touch every element between their extremes once.
fn dense(dims: &[[i64; 2]]) -> bool {
    let mut ds: Vec<[i64; 2]> = dims.iter().copied().filter(|d| d[1] > 1).collect();
    ds.sort_by_key(|d| d[0].unsigned_abs());
    let mut expect = 1u64;
    for [step, num] in ds {
        if step.unsigned_abs() != expect {
            return false;
        }
        expect = expect.saturating_mul(num as u64);
    }
    true
}

impl Access {
    /// The access of `[step, num]` dims (in elements of `size` bytes) from byte `offset`; the dims
    /// are copied only when the walk is not dense.
    fn new(
        operand: &'static str,
        write: bool,
        space: Space,
        parts: (usize, usize),
        (offset, size, dims): (i64, i64, &[[i64; 2]]),
    ) -> Option<Access> {
        let (lo, hi) = crate::mem::ap::dims_extent(dims)?;
        let bytes = (
            offset.saturating_add(lo.saturating_mul(size)),
            offset.saturating_add(hi.saturating_add(1).saturating_mul(size)),
        );
        let pattern = if dense(dims) {
            None
        } else {
            Some(Box::new(Walk::new(offset, size, dims.to_vec())))
        };
        Some(Access {
            operand,
            write,
            space,
            parts,
            bytes,
            pattern,
        })
    }

    /// The whole of a memory's rows (indirect, data-dependent addressing).
    fn whole(operand: &'static str, write: bool, space: Space, parts: (usize, usize)) -> Access {
        Access {
            operand,
            write,
            space,
            parts,
            bytes: (0, i64::MAX),
            pattern: None,
        }
    }

    /// Whether every byte of the hull is touched.
    pub fn is_dense(&self) -> bool {
        self.pattern.is_none()
    }

    /// Whether the two accesses touch a common byte.
    pub fn overlaps(&self, other: &Access) -> bool {
        if self.space != other.space
            || self.parts.0 >= other.parts.1
            || other.parts.0 >= self.parts.1
            || self.bytes.0 >= other.bytes.1
            || other.bytes.0 >= self.bytes.1
        {
            return false;
        }
        let (a, b) = match (&self.pattern, &other.pattern) {
            (None, None) => return true,
            (Some(a), None) => return a.intervals().is_none_or(|a| touches(a, other.bytes)),
            (None, Some(b)) => return b.intervals().is_none_or(|b| touches(b, self.bytes)),
            (Some(a), Some(b)) => (a.intervals(), b.intervals()),
        };
        let (Some(a), Some(b)) = (a, b) else { return true };
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            if a[i].1 <= b[j].0 {
                i += 1;
            } else if b[j].1 <= a[i].0 {
                j += 1;
            } else {
                return true;
            }
        }
        false
    }

    /// Whether `self` touches every byte `other` does (exactly: a strided access covers another
    /// when its byte intervals contain the other's; one too long to list covers nothing).
    fn covers(&self, other: &Access) -> bool {
        if !(self.space == other.space
            && self.parts.0 <= other.parts.0
            && other.parts.1 <= self.parts.1
            && self.bytes.0 <= other.bytes.0
            && other.bytes.1 <= self.bytes.1)
        {
            return false;
        }
        let Some(mine) = &self.pattern else { return true };
        if other.pattern.as_ref() == Some(mine) {
            return true;
        }
        let Some(mine) = mine.intervals() else { return false };
        let theirs: &[(i64, i64)] = match &other.pattern {
            None => &[other.bytes],
            Some(w) => match w.intervals() {
                Some(iv) => iv,
                None => return false,
            },
        };
        // Both sorted and disjoint: every interval of theirs lies inside one of mine.
        let mut i = 0;
        theirs.iter().all(|&(lo, hi)| {
            while i < mine.len() && mine[i].1 <= lo {
                i += 1;
            }
            i < mine.len() && mine[i].0 <= lo && hi <= mine[i].1
        })
    }

    /// The range both accesses share, for messages: `SBUF partitions 0..128, bytes 0..512`.
    pub fn describe_overlap(&self, other: &Access, hbm_names: &[String]) -> String {
        let parts = (self.parts.0.max(other.parts.0), self.parts.1.min(other.parts.1));
        let lo = self.bytes.0.max(other.bytes.0);
        let hi = self.bytes.1.min(other.bytes.1);
        let bytes = if hi == i64::MAX {
            format!("bytes {lo}.. (data-dependent: whole rows)")
        } else {
            format!("bytes {lo}..{hi}")
        };
        let core = |c: u8| if c == 0 { String::new() } else { format!("core {c}'s ") };
        match self.space {
            Space::Sbuf(c) => format!("{}SBUF partitions {}..{}, {bytes} of each", core(c), parts.0, parts.1),
            Space::Psum(c) => format!("{}PSUM partitions {}..{}, {bytes} of each", core(c), parts.0, parts.1),
            Space::Hbm(k) => format!(
                "HBM tensor `{}`, {bytes}",
                hbm_names.get(k).map(String::as_str).unwrap_or("?")
            ),
        }
    }
}

/// Maps HBM tensor names to their declaration index.
pub struct HbmIndex(HashMap<String, usize>);

impl HbmIndex {
    pub fn new(program: &Program) -> Self {
        HbmIndex(
            program
                .hbm
                .iter()
                .enumerate()
                .map(|(k, d)| (d.name.clone(), k))
                .collect(),
        )
    }
}

fn access_of(operand: &'static str, write: bool, ap: &AccessPattern, core: u8, hbm: &HbmIndex) -> Option<Access> {
    let size = ap.dtype.size() as i64;
    let offset = ap.offset.min(i64::MAX as u64) as i64;
    match &ap.mem {
        MemSpace::Sbuf | MemSpace::Psum => {
            let space = if ap.mem == MemSpace::Sbuf {
                Space::Sbuf(core)
            } else {
                Space::Psum(core)
            };
            if ap.partitions == 0 {
                return None;
            }
            let parts = (ap.start_partition, ap.start_partition.saturating_add(ap.partitions));
            Access::new(operand, write, space, parts, (offset, size, &ap.free))
        }
        MemSpace::Hbm(name) => {
            // An undeclared tensor is the executor's error; it cannot conflict with anything.
            let k = *hbm.0.get(name)?;
            let mut dims = Vec::with_capacity(ap.free.len() + 1);
            dims.push([ap.partition_step, ap.partitions as i64]);
            dims.extend(ap.free.iter().copied());
            Access::new(operand, write, Space::Hbm(k), (0, 1), (offset, size, &dims))
        }
    }
}

/// Every memory access of one instruction, from [`Op::operands`]'s roles (a write or a
/// read-modify-write is a write). An operand whose address depends on data is taken as its
/// whole HBM tensor, or the whole rows of every partition.
pub fn footprint(op: &Op, hbm: &HbmIndex) -> Vec<Access> {
    footprint_on(op, 0, hbm)
}

/// [`footprint`] of an instruction of physical core `core`: its SBUF and PSUM accesses are that
/// core's own memories.
pub fn footprint_on(op: &Op, core: u8, hbm: &HbmIndex) -> Vec<Access> {
    let mut out = Vec::new();
    for o in op.operands() {
        let write = o.role.writes();
        if o.dynamic {
            match &o.ap.mem {
                MemSpace::Hbm(name) => {
                    if let Some(&k) = hbm.0.get(name) {
                        out.push(Access::whole(o.name, write, Space::Hbm(k), (0, 1)));
                    }
                }
                m => {
                    let space = if *m == MemSpace::Sbuf {
                        Space::Sbuf(core)
                    } else {
                        Space::Psum(core)
                    };
                    // Rows may be redirected anywhere within the partitions the pattern spans.
                    out.push(Access::whole(o.name, write, space, (0, usize::MAX)));
                }
            }
            continue;
        }
        out.extend(access_of(o.name, write, o.ap, core, hbm));
    }
    out
}

/// One recorded access of an earlier instruction.
#[derive(Clone, Debug)]
pub struct Record {
    pub inst: u32,
    pub queue: QueueId,
    /// 1-based position of the instruction in its queue.
    pub seq: u32,
    pub access: Access,
}

/// Smallest cell of the byte index: 2^4 = 16 bytes.
const CELL_SHIFT: u32 = 4;
/// Index levels: cells of 2^4 … 2^63 bytes.
const LEVELS: usize = 64 - CELL_SHIFT as usize;

/// Where a byte hull `[lo, hi)` sits in the index: the finest level whose cells it spans at most
/// two of, and those cells.
fn cell_range(bytes: (i64, i64), level: usize) -> (i64, i64) {
    let s = CELL_SHIFT + level as u32;
    let hi = bytes.1.max(bytes.0.saturating_add(1));
    (bytes.0 >> s, hi.saturating_sub(1) >> s)
}

fn level_of(bytes: (i64, i64)) -> usize {
    (0..LEVELS)
        .find(|&k| {
            let (a, b) = cell_range(bytes, k);
            b - a <= 1
        })
        .unwrap_or(LEVELS - 1)
}

/// The records of one queue in one memory, indexed by their byte hulls: a record lives at the
/// finest level whose cells it spans at most two of, in those cells. A query visits, at every
/// level that holds records, only the occupied cells its hull meets, so it costs the records whose
/// hulls come near its own (plus a logarithm), never the whole history.
struct QueueIndex {
    /// `(level, cell, record)`.
    cells: BTreeSet<(u8, i64, u32)>,
    per_level: [u32; LEVELS],
    /// Bit `k` set when level `k` holds a record.
    levels: u64,
}

impl Default for QueueIndex {
    fn default() -> Self {
        QueueIndex {
            cells: BTreeSet::new(),
            per_level: [0; LEVELS],
            levels: 0,
        }
    }
}

impl QueueIndex {
    fn insert(&mut self, id: u32, bytes: (i64, i64)) {
        let k = level_of(bytes);
        let (a, b) = cell_range(bytes, k);
        for c in a..=b {
            self.cells.insert((k as u8, c, id));
        }
        self.per_level[k] += 1;
        self.levels |= 1 << k;
    }

    fn remove(&mut self, id: u32, bytes: (i64, i64)) {
        let k = level_of(bytes);
        let (a, b) = cell_range(bytes, k);
        for c in a..=b {
            self.cells.remove(&(k as u8, c, id));
        }
        self.per_level[k] = self.per_level[k].saturating_sub(1);
        if self.per_level[k] == 0 {
            self.levels &= !(1 << k);
        }
    }

    /// Every record whose cells meet the hull `bytes` (a superset of those whose hulls meet it; a
    /// record spanning two cells may be visited twice).
    fn candidates(&self, bytes: (i64, i64), mut f: impl FnMut(u32)) {
        let mut levels = self.levels;
        while levels != 0 {
            let k = levels.trailing_zeros() as usize;
            levels &= levels - 1;
            let (a, b) = cell_range(bytes, k);
            for &(_, _, id) in self.cells.range((k as u8, a, 0)..=(k as u8, b, u32::MAX)) {
                f(id);
            }
        }
    }
}

/// The accesses of earlier instructions that later ones may still conflict with, per memory and
/// queue, indexed by byte range ([`QueueIndex`]), so that the race detector and [`infer_waits`]
/// cost the records near each access rather than the whole history.
///
/// An access is forgotten once a later access that happens after it covers all of its bytes, and
/// writes if it wrote (anything that conflicts with the old one then conflicts with the newer one,
/// and is ordered after the old one whenever it is ordered after the newer one). Forgetting
/// changes no answer: the latest conflicting record per queue, which is all either user asks
/// for, is the newer one or later.
#[derive(Default)]
pub struct History {
    records: Vec<Option<Record>>,
    free: Vec<u32>,
    /// Per memory ([`Space::slot`]), per queue.
    spaces: Vec<Vec<QueueIndex>>,
}

impl History {
    /// For every queue other than `queue`, its latest earlier record conflicting with `a`
    /// (overlapping, at least one of the two a write), in no particular order of queues.
    pub fn latest_conflicts<'s>(&'s self, a: &Access, queue: QueueId, mut f: impl FnMut(&'s Record)) {
        let Some(queues) = self.spaces.get(a.space.slot()) else {
            return;
        };
        for (q, index) in queues.iter().enumerate() {
            if q == queue as usize {
                continue;
            }
            let mut best: Option<&Record> = None;
            index.candidates(a.bytes, |id| {
                let Some(r) = self.records[id as usize].as_ref() else {
                    return;
                };
                if best.is_some_and(|b| b.inst >= r.inst) {
                    return;
                }
                if (a.write || r.access.write) && r.access.overlaps(a) {
                    best = Some(r);
                }
            });
            if let Some(r) = best {
                f(r);
            }
        }
    }

    /// Records `rec`; drops the records it covers that happen before it (`hb(record)`), and the
    /// same-queue ones it covers (queue order).
    pub fn insert(&mut self, rec: Record, hb: impl Fn(&Record) -> bool) {
        let slot = rec.access.space.slot();
        if self.spaces.len() <= slot {
            self.spaces.resize_with(slot + 1, Vec::new);
        }
        let queues = &mut self.spaces[slot];
        if queues.len() <= rec.queue as usize {
            queues.resize_with(rec.queue as usize + 1, QueueIndex::default);
        }
        let mut drop: Vec<u32> = Vec::new();
        for index in queues.iter() {
            index.candidates(rec.access.bytes, |id| {
                let Some(r) = self.records[id as usize].as_ref() else {
                    return;
                };
                if (rec.access.write || !r.access.write)
                    && (r.queue == rec.queue || hb(r))
                    && rec.access.covers(&r.access)
                {
                    drop.push(id);
                }
            });
        }
        drop.sort_unstable();
        drop.dedup();
        for id in drop {
            if let Some(r) = self.records[id as usize].take() {
                queues[r.queue as usize].remove(id, r.access.bytes);
                self.free.push(id);
            }
        }
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.records.push(None);
                (self.records.len() - 1) as u32
            }
        };
        queues[rec.queue as usize].insert(id, rec.access.bytes);
        self.records[id as usize] = Some(rec);
    }

    /// Records currently kept (for tests and benchmarks of the pruning).
    pub fn len(&self) -> usize {
        self.records.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Vector clocks: for every instruction, the number of instructions of each queue that happen
/// before it or are it (queue order plus waits, transitively).
pub struct Clocks {
    queues: usize,
    clocks: Vec<u32>,
}

impl Clocks {
    pub fn new(queues: usize) -> Self {
        Clocks {
            queues,
            clocks: Vec::new(),
        }
    }

    /// Room for the clocks of `instructions` instructions.
    pub fn with_capacity(queues: usize, instructions: usize) -> Self {
        Clocks {
            queues,
            clocks: Vec::with_capacity(queues.saturating_mul(instructions)),
        }
    }

    pub fn of(&self, inst: usize) -> &[u32] {
        &self.clocks[inst * self.queues..(inst + 1) * self.queues]
    }

    /// Appends the clock of the next instruction: the join of its queue predecessor's and those
    /// of the instructions it waits for, with its own queue's entry set to `seq`.
    pub fn push(&mut self, queue: QueueId, seq: u32, prev_in_queue: Option<usize>, waits: &[u32]) {
        let n = self.queues;
        let start = self.clocks.len();
        match prev_in_queue {
            Some(p) if (p + 1) * n <= start => self.clocks.extend_from_within(p * n..(p + 1) * n),
            _ => self.clocks.resize(start + n, 0),
        }
        let (before, vc) = self.clocks.split_at_mut(start);
        for &w in waits {
            let w = w as usize;
            if let Some(theirs) = before.get(w * n..(w + 1) * n) {
                for (a, b) in vc.iter_mut().zip(theirs) {
                    *a = (*a).max(*b);
                }
            }
        }
        if let Some(slot) = vc.get_mut(queue as usize) {
            *slot = seq;
        }
    }

    /// The two halves of a `core_barrier` pair, `a` earlier than `b` and `b` the last clock
    /// pushed: both get the join of their clocks (each core continues after both barriers).
    pub fn join_pair(&mut self, a: usize, b: usize) {
        let n = self.queues;
        if a >= b || (b + 1) * n > self.clocks.len() {
            return;
        }
        let (before, last) = self.clocks.split_at_mut(b * n);
        let first = &mut before[a * n..(a + 1) * n];
        for (x, y) in first.iter_mut().zip(last.iter_mut()) {
            let m = (*x).max(*y);
            *x = m;
            *y = m;
        }
    }

    /// Whether record `r` happens before (or is) the instruction whose clock is `vc`.
    pub fn ordered(vc: &[u32], r: &Record) -> bool {
        vc.get(r.queue as usize).is_some_and(|&c| c >= r.seq)
    }
}

/// Number of queues of a program: the compute engines plus every DMA queue it names (at least
/// one).
pub fn queue_count(program: &Program) -> usize {
    let dma = program
        .instructions
        .iter()
        .filter(|i| i.engine == Engine::Dma)
        .map(|i| i.queue.unwrap_or(0) as usize + 1)
        .max()
        .unwrap_or(1);
    let cores = program.instructions.iter().map(|i| i.core as usize).max().unwrap_or(0);
    cores * CORE_QUEUES as usize + COMPUTE_QUEUES as usize + dma
}

/// Replaces every instruction's `wait` list with the waits its memory accesses need: for each
/// other queue, the latest earlier instruction on it whose access conflicts with one of this
/// instruction's (read after write, write after read, write after write), dropping those already
/// implied by queue order and the other waits. Instructions on the same queue are ordered by the
/// queue and never wait for each other.
pub fn infer_waits(program: &mut Program) {
    let hbm = HbmIndex::new(program);
    let nq = queue_count(program);
    let mut clocks = Clocks::with_capacity(nq, program.instructions.len());
    let mut history = History::default();
    let mut last_in_queue: Vec<Option<usize>> = vec![None; nq];
    let mut seq_in_queue: Vec<u32> = vec![0; nq];
    let mut barriers = BarrierPairs::default();
    let barrier_at: Vec<bool> = program
        .instructions
        .iter()
        .map(|i| matches!(i.op, Op::CoreBarrier(_)))
        .collect();
    for index in 0..program.instructions.len() {
        let inst = &program.instructions[index];
        let q = queue_of(inst);
        let accesses = footprint_on(&inst.op, inst.core, &hbm);
        // The latest conflicting instruction per other queue of the same core: a wait cannot
        // name another core's instruction (only a core_barrier orders the cores; a conflict it
        // does not order stays, for the race detector to report).
        let mut latest: Vec<Option<(u32, QueueId, u32)>> = vec![None; nq];
        for a in &accesses {
            history.latest_conflicts(a, q, |r| {
                if r.queue / CORE_QUEUES != q / CORE_QUEUES {
                    return;
                }
                let slot = &mut latest[r.queue as usize];
                if slot.is_none_or(|s| s.0 < r.inst) {
                    *slot = Some((r.inst, r.queue, r.seq));
                }
            });
        }
        let mut candidates: Vec<(u32, QueueId, u32)> = latest.iter().flatten().copied().collect();
        // Latest first: an earlier candidate is often implied by a later one.
        candidates.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
        let mut implied: Vec<u32> = match last_in_queue[q as usize] {
            Some(p) => clocks.of(p).to_vec(),
            None => vec![0; nq],
        };
        let mut wait = Vec::new();
        for (inst_idx, cq, cseq) in candidates {
            if implied[cq as usize] >= cseq {
                continue;
            }
            for (a, b) in implied.iter_mut().zip(clocks.of(inst_idx as usize)) {
                *a = (*a).max(*b);
            }
            wait.push(inst_idx);
        }
        wait.sort_unstable();
        seq_in_queue[q as usize] += 1;
        let seq = seq_in_queue[q as usize];
        clocks.push(q, seq, last_in_queue[q as usize], &wait);
        program.instructions[index].wait = wait;
        if let Ok(Some(partner)) = barriers.step(program, index) {
            clocks.join_pair(partner, index);
        }
        last_in_queue[q as usize] = Some(index);
        let vc = clocks.of(index).to_vec();
        for access in accesses {
            history.insert(
                Record {
                    inst: index as u32,
                    queue: q,
                    seq,
                    access,
                },
                |r| Clocks::ordered(&vc, r) && !barrier_across(&barrier_at, index, q, r),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AluOp;
    use crate::dtype::DType;
    use crate::program::{HbmRole, TensorCopy, TensorTensor};
    use crate::target::TargetName;

    fn sb(off: u64, n: i64) -> AccessPattern {
        AccessPattern::sbuf(DType::F32, 0, 4, off, vec![[1, n]])
    }

    /// Every element's bytes, sorted and merged: the definition `compute_intervals` must meet.
    fn intervals_by_element(w: &Walk) -> Vec<(i64, i64)> {
        fn walk(dims: &[[i64; 2]], base: i64, out: &mut Vec<i64>) {
            match dims.split_first() {
                None => out.push(base),
                Some((&[step, num], rest)) => {
                    for i in 0..num.max(0) {
                        walk(rest, base + i * step, out);
                    }
                }
            }
        }
        let mut starts = Vec::new();
        walk(&w.dims, 0, &mut starts);
        starts.sort_unstable();
        let mut out: Vec<(i64, i64)> = Vec::new();
        for s in starts {
            let lo = w.offset + s * w.size;
            let hi = lo + w.size;
            match out.last_mut() {
                Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                _ => out.push((lo, hi)),
            }
        }
        out
    }

    #[test]
    fn run_intervals_equal_element_intervals() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |m: i64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % m as u64) as i64
        };
        for _ in 0..2000 {
            let rank = next(4) as usize;
            let dims: Vec<[i64; 2]> = (0..rank).map(|_| [next(13) - 6, next(5) + 1]).collect();
            let w = Walk::new(next(64), [1, 2, 4][next(3) as usize], dims);
            assert_eq!(
                w.intervals().map(<[_]>::to_vec),
                Some(intervals_by_element(&w)),
                "{w:?}"
            );
        }
    }

    #[test]
    fn strided_accesses_that_interleave_do_not_overlap() {
        let hbm = HbmIndex(HashMap::new());
        let even = AccessPattern::sbuf(DType::F32, 0, 4, 0, vec![[2, 8]]);
        let odd = AccessPattern::sbuf(DType::F32, 0, 4, 4, vec![[2, 8]]);
        let a = access_of("dst", true, &even, 0, &hbm).unwrap();
        let b = access_of("dst", true, &odd, 0, &hbm).unwrap();
        assert!(!a.overlaps(&b));
        assert!(a.overlaps(&a.clone()));
        let all = access_of("src", false, &sb(0, 16), 0, &hbm).unwrap();
        assert!(all.is_dense() && all.overlaps(&a) && all.overlaps(&b));
        let other_parts = access_of(
            "src",
            false,
            &AccessPattern::sbuf(DType::F32, 4, 4, 0, vec![[1, 16]]),
            0,
            &hbm,
        )
        .unwrap();
        assert!(!other_parts.overlaps(&all));
    }

    #[test]
    fn waits_cover_raw_war_waw_and_skip_implied_and_same_queue() {
        let mut p = Program::new(TargetName::Trn1);
        p.declare("a", DType::F32, &[4, 16], HbmRole::Input);
        p.declare("out", DType::F32, &[4, 16], HbmRole::Output);
        let hbm = |n: &str| AccessPattern::hbm(n, DType::F32, 0, 4, 16, vec![[1, 16]]);
        let load = p.push(Engine::Dma, Op::dma_copy(sb(0, 16), hbm("a"))); // 0
        let add = p.push(
            Engine::Vector,
            Op::TensorTensor(TensorTensor {
                dst: sb(64, 16),
                in0: sb(0, 16),
                in1: sb(0, 16),
                op: AluOp::Add,
            }),
        ); // 1: RAW on load
        let copy = p.push(
            Engine::Gpsimd,
            Op::TensorCopy(TensorCopy {
                dst: sb(0, 16),
                src: sb(64, 16),
            }),
        ); // 2: RAW on add, WAR on add's read of sb(0) (implied), WAW on load (implied)
        let store = p.push(Engine::Dma, Op::dma_copy(hbm("out"), sb(0, 16))); // 3: RAW on copy
        let again = p.push(
            Engine::Vector,
            Op::TensorCopy(TensorCopy {
                dst: sb(0, 8),
                src: sb(64, 8),
            }),
        ); // 4: WAR on store, WAW on copy
        infer_waits(&mut p);
        let w = |i: usize| p.instructions[i].wait.clone();
        assert!(w(load).is_empty());
        assert_eq!(w(add), vec![load as u32]);
        assert_eq!(w(copy), vec![add as u32]);
        assert_eq!(w(store), vec![copy as u32]);
        assert_eq!(
            w(again),
            vec![store as u32],
            "store follows copy, so waiting for the store suffices"
        );
    }

    /// A random program of strided SBUF/PSUM/HBM copies and adds on every queue, with random
    /// waits (or none).
    fn random_program(seed: u64, n: usize, with_waits: bool) -> Program {
        let mut x = seed | 1;
        let mut next = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut p = Program::new(TargetName::Trn1);
        p.declare("h", DType::F32, &[64, 64], HbmRole::Input);
        let ap = |next: &mut dyn FnMut(u64) -> u64| {
            let dtype = [DType::F32, DType::Bf16, DType::U8][next(3) as usize];
            let rank = 1 + next(2) as usize;
            let dims: Vec<[i64; 2]> = (0..rank).map(|_| [next(9) as i64 - 2, 1 + next(6) as i64]).collect();
            let off = 2 * next(60) + 16;
            let sp = next(8) as usize;
            let np = 1 + next(4) as usize;
            match next(5) {
                0 => AccessPattern::psum(dtype, sp, np, off, dims),
                1 => AccessPattern::hbm("h", dtype, next(64), np, next(80) as i64 - 8, dims),
                _ => AccessPattern::sbuf(dtype, sp, np, off, dims),
            }
        };
        for i in 0..n {
            let engine = [Engine::Vector, Engine::Gpsimd, Engine::Scalar, Engine::Dma][next(4) as usize];
            let op = if engine == Engine::Dma || next(2) == 0 {
                Op::TensorCopy(TensorCopy {
                    dst: ap(&mut next),
                    src: ap(&mut next),
                })
            } else {
                Op::TensorTensor(TensorTensor {
                    dst: ap(&mut next),
                    in0: ap(&mut next),
                    in1: ap(&mut next),
                    op: AluOp::Add,
                })
            };
            let k = p.push(engine, op);
            if engine == Engine::Dma {
                p.instructions[k].queue = Some(next(3) as u16);
            }
            if with_waits && i > 0 {
                for _ in 0..next(3) {
                    let w = next(i as u64) as u32;
                    if !p.instructions[k].wait.contains(&w) {
                        p.instructions[k].wait.push(w);
                    }
                }
                p.instructions[k].wait.sort_unstable();
            }
        }
        p
    }

    /// Every conflicting pair, from the whole unpruned history (the definition the indexed,
    /// pruned history must meet): per instruction, per access and other queue, the latest
    /// earlier conflicting instruction.
    fn brute_latest(p: &Program) -> Vec<Vec<Vec<u32>>> {
        let hbm = HbmIndex::new(p);
        let all: Vec<(QueueId, Vec<Access>)> = p
            .instructions
            .iter()
            .map(|i| (queue_of(i), footprint(&i.op, &hbm)))
            .collect();
        (0..all.len())
            .map(|k| {
                let (q, mine) = &all[k];
                mine.iter()
                    .map(|a| {
                        let mut latest: HashMap<QueueId, u32> = HashMap::new();
                        for (j, (qj, theirs)) in all[..k].iter().enumerate() {
                            if qj != q && theirs.iter().any(|b| (a.write || b.write) && a.overlaps(b)) {
                                latest.insert(*qj, j as u32);
                            }
                        }
                        let mut v: Vec<u32> = latest.into_values().collect();
                        v.sort_unstable();
                        v
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn indexed_history_matches_the_whole_history() {
        let (mut races, mut clean, mut waits) = (0, 0, 0);
        for seed in 1..40u64 {
            // infer_waits: every brute-force conflict is ordered by the inferred waits, and every
            // inferred wait is a conflict.
            let mut p = random_program(seed.wrapping_mul(0x9E37_79B9), 120, false);
            let latest = brute_latest(&p);
            infer_waits(&mut p);
            let mut replay = Replay::new(queue_count(&p));
            for (k, inst) in p.instructions.iter().enumerate() {
                replay.push(k, queue_of(inst), &inst.wait);
                let all: Vec<u32> = latest[k].iter().flatten().copied().collect();
                waits += inst.wait.len();
                for w in &inst.wait {
                    assert!(all.contains(w), "seed {seed}: #{k} waits for #{w}, no conflict");
                }
                for &j in &all {
                    assert!(replay.ordered(k, j), "seed {seed}: #{k} not ordered after #{j}");
                }
            }
            // The race detector: with random waits, and with inferred waits one of which is
            // dropped, the first race and the instruction it names are the brute-force ones.
            let random = random_program(seed.wrapping_mul(0x85EB_CA6B), 120, true);
            let mut dropped = random_program(seed.wrapping_mul(0xC2B2_AE35), 120, false);
            infer_waits(&mut dropped);
            assert_eq!(first_race(&dropped, seed), None, "seed {seed}: inferred waits race");
            let with_waits: Vec<usize> = (0..dropped.instructions.len())
                .filter(|&k| !dropped.instructions[k].wait.is_empty())
                .collect();
            let k = with_waits[(seed as usize * 7919) % with_waits.len()];
            dropped.instructions[k].wait.remove(0);
            clean += 1;
            for p in [random, dropped] {
                match first_race(&p, seed) {
                    Some(_) => races += 1,
                    None => clean += 1,
                }
            }
        }
        // The programs exercise both answers, and real dependences.
        assert!(
            races > 20 && clean > 5 && waits > 1000,
            "{races} races, {clean} clean, {waits} waits"
        );
    }

    /// The vector clocks of a program's instructions, pushed in order, and each one's queue and
    /// sequence number in it.
    struct Replay {
        clocks: Clocks,
        last: Vec<Option<usize>>,
        seqs: Vec<u32>,
        rec_of: Vec<(QueueId, u32)>,
    }

    impl Replay {
        fn new(queues: usize) -> Replay {
            Replay {
                clocks: Clocks::new(queues),
                last: vec![None; queues],
                seqs: vec![0; queues],
                rec_of: Vec::new(),
            }
        }

        /// Instruction `k`, on queue `q`, waiting for `wait`.
        fn push(&mut self, k: usize, q: QueueId, wait: &[u32]) {
            self.seqs[q as usize] += 1;
            self.clocks.push(q, self.seqs[q as usize], self.last[q as usize], wait);
            self.last[q as usize] = Some(k);
            self.rec_of.push((q, self.seqs[q as usize]));
        }

        /// Whether instruction `k`'s clock has seen instruction `j`.
        fn ordered(&self, k: usize, j: u32) -> bool {
            let (qj, sj) = self.rec_of[j as usize];
            self.clocks.of(k)[qj as usize] >= sj
        }
    }

    /// Runs the scheduler's race detector over `p`, checking every step against the brute-force
    /// answer; the first race's other instruction.
    fn first_race(p: &Program, seed: u64) -> Option<u32> {
        let latest = brute_latest(p);
        let mut sched = crate::timeline::Scheduler::new(p, 3, true);
        let mut replay = Replay::new(COMPUTE_QUEUES as usize + 3);
        for (k, inst) in p.instructions.iter().enumerate() {
            let q = queue_of(inst);
            replay.push(k, q, &inst.wait);
            // The first access with an unordered conflict names its latest one.
            let expected = latest[k]
                .iter()
                .find_map(|per_queue| per_queue.iter().copied().filter(|&j| !replay.ordered(k, j)).max());
            let got = sched.step(p, k, q, 1.0, None).err().map(|r| match r.kind {
                crate::ErrorKind::Race(d) => d.other as u32,
                other => panic!("{other:?}"),
            });
            assert_eq!(got, expected, "seed {seed}, instruction #{k}");
            if got.is_some() {
                return got;
            }
        }
        None
    }
}
