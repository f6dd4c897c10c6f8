//! Memory dependences between instructions: what each instruction reads and writes, which
//! earlier instructions it must wait for, and the machinery the race detector shares.
//!
//! An instruction's *footprint* is one [`Access`] per operand: the memory (SBUF, PSUM or one HBM
//! tensor), for on-chip memory the partition range, and the bytes touched within each partition
//! (for HBM, within the tensor). Operands named `dst`, `reduce_res` and `dst_idx` are writes,
//! every other operand a read (a read-modify-write destination is a write, which conflicts with
//! everything a read would). The indirect side of a DMA gather/scatter depends on data, so it is
//! taken conservatively as the whole tensor (HBM) or the whole partition rows (on chip).
//!
//! Two accesses *conflict* when their bytes overlap and at least one writes. Instructions are
//! ordered by their queue (each compute engine is one queue, each DMA queue another, see
//! [`queue_of`]) and by their `wait` lists; [`infer_waits`] fills the wait lists from conflicts,
//! and the executor's race detector checks that every conflict is ordered (docs/timeline.md).

use crate::mem::{AccessPattern, MemSpace};
use crate::program::{Engine, Instruction, Op, Program};
use std::collections::HashMap;

/// A queue of the NeuronCore: the four compute engines, then the DMA queues.
pub type QueueId = u16;

/// Queues before the first DMA queue (Tensor, Vector, Scalar, GpSimd).
pub const COMPUTE_QUEUES: u16 = 4;

/// The queue an instruction runs on. Compute engines have one queue each; a DMA instruction
/// runs on DMA queue `queue` (0 when unset: the documented default keeps every program written
/// before queues existed as one in-order DMA stream, which is what their waits assume).
pub fn queue_of(inst: &Instruction) -> QueueId {
    match inst.engine {
        Engine::Tensor => 0,
        Engine::Vector => 1,
        Engine::Scalar => 2,
        Engine::Gpsimd => 3,
        Engine::Dma => COMPUTE_QUEUES + inst.queue.unwrap_or(0),
    }
}

/// Human name of a queue (`tensor`, `dma3`, …).
pub fn queue_name(q: QueueId) -> String {
    match q {
        0 => "tensor".into(),
        1 => "vector".into(),
        2 => "scalar".into(),
        3 => "gpsimd".into(),
        d => format!("dma{}", d - COMPUTE_QUEUES),
    }
}

/// Which memory an access touches. HBM tensors are numbered in declaration order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Space {
    Sbuf,
    Psum,
    Hbm(usize),
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
    pattern: Option<Walk>,
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
    fn new(operand: &'static str, write: bool, space: Space, parts: (usize, usize), walk: Walk) -> Option<Access> {
        let mut lo = 0i64;
        let mut hi = 0i64;
        for &[step, num] in &walk.dims {
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
        let bytes = (
            walk.offset.saturating_add(lo.saturating_mul(walk.size)),
            walk.offset
                .saturating_add(hi.saturating_add(1).saturating_mul(walk.size)),
        );
        let pattern = if dense(&walk.dims) { None } else { Some(walk) };
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

    /// Whether `self` (dense) touches every byte `other` does.
    fn covers(&self, other: &Access) -> bool {
        self.pattern.is_none()
            && self.space == other.space
            && self.parts.0 <= other.parts.0
            && other.parts.1 <= self.parts.1
            && self.bytes.0 <= other.bytes.0
            && other.bytes.1 <= self.bytes.1
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
        match self.space {
            Space::Sbuf => format!("SBUF partitions {}..{}, {bytes} of each", parts.0, parts.1),
            Space::Psum => format!("PSUM partitions {}..{}, {bytes} of each", parts.0, parts.1),
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

/// Whether an operand of this name is written by its instruction.
fn is_write(operand: &str) -> bool {
    matches!(operand, "dst" | "reduce_res" | "dst_idx")
}

fn access_of(operand: &'static str, ap: &AccessPattern, hbm: &HbmIndex) -> Option<Access> {
    let write = is_write(operand);
    let size = ap.dtype.size() as i64;
    let offset = ap.offset.min(i64::MAX as u64) as i64;
    match &ap.mem {
        MemSpace::Sbuf | MemSpace::Psum => {
            let space = if ap.mem == MemSpace::Sbuf {
                Space::Sbuf
            } else {
                Space::Psum
            };
            if ap.partitions == 0 {
                return None;
            }
            let parts = (ap.start_partition, ap.start_partition.saturating_add(ap.partitions));
            Access::new(operand, write, space, parts, Walk::new(offset, size, ap.free.clone()))
        }
        MemSpace::Hbm(name) => {
            // An undeclared tensor is the executor's error; it cannot conflict with anything.
            let k = *hbm.0.get(name)?;
            let mut dims = Vec::with_capacity(ap.free.len() + 1);
            dims.push([ap.partition_step, ap.partitions as i64]);
            dims.extend(ap.free.iter().copied());
            Access::new(operand, write, Space::Hbm(k), (0, 1), Walk::new(offset, size, dims))
        }
    }
}

/// Every memory access of one instruction.
pub fn footprint(op: &Op, hbm: &HbmIndex) -> Vec<Access> {
    // The data-dependent side of an indirect DMA: the whole tensor / the whole rows.
    let indirect = match op {
        Op::DmaCopy(d) => d.indirect.as_ref().map(|ind| match ind.side {
            crate::program::IndirectSide::Src => "src",
            crate::program::IndirectSide::Dst => "dst",
        }),
        _ => None,
    };
    let mut out = Vec::new();
    for (operand, ap) in op.operands() {
        if Some(operand) == indirect {
            let write = is_write(operand);
            match &ap.mem {
                MemSpace::Hbm(name) => {
                    if let Some(&k) = hbm.0.get(name) {
                        out.push(Access::whole(operand, write, Space::Hbm(k), (0, 1)));
                    }
                }
                m => {
                    let space = if *m == MemSpace::Sbuf { Space::Sbuf } else { Space::Psum };
                    // Rows may be redirected anywhere within the partitions the pattern spans.
                    out.push(Access::whole(operand, write, space, (0, usize::MAX)));
                }
            }
            continue;
        }
        out.extend(access_of(operand, ap, hbm));
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

/// The accesses of earlier instructions that later ones may still conflict with, per memory.
/// An access is forgotten once a later access that happens after it covers all of its bytes
/// (anything that conflicts with the old one then conflicts with the newer one, and is ordered
/// after the old one whenever it is ordered after the newer one).
#[derive(Default)]
pub struct History {
    spaces: HashMap<Space, Vec<Record>>,
}

impl History {
    /// Earlier records conflicting with `a` (overlapping, at least one a write), on other queues.
    pub fn conflicts<'s>(&'s self, a: &'s Access, queue: QueueId) -> impl Iterator<Item = &'s Record> + 's {
        self.spaces
            .get(&a.space)
            .into_iter()
            .flatten()
            .filter(move |r| r.queue != queue && (a.write || r.access.write) && r.access.overlaps(a))
    }

    /// Records `rec`; drops the records it covers that happen before it (`hb(record)`), and the
    /// same-queue ones it covers (queue order).
    pub fn insert(&mut self, rec: Record, hb: impl Fn(&Record) -> bool) {
        let list = self.spaces.entry(rec.access.space).or_default();
        if rec.access.is_dense() {
            list.retain(|r| {
                let covered = rec.access.covers(&r.access) && (rec.access.write || !r.access.write);
                !(covered && (r.queue == rec.queue || hb(r)))
            });
        }
        list.push(rec);
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

    pub fn of(&self, inst: usize) -> &[u32] {
        &self.clocks[inst * self.queues..(inst + 1) * self.queues]
    }

    /// Appends the clock of the next instruction: the join of its queue predecessor's and those
    /// of the instructions it waits for, with its own queue's entry set to `seq`.
    pub fn push(&mut self, queue: QueueId, seq: u32, prev_in_queue: Option<usize>, waits: &[u32]) {
        let n = self.queues;
        let mut vc = match prev_in_queue {
            Some(p) => self.of(p).to_vec(),
            None => vec![0; n],
        };
        for &w in waits {
            let w = w as usize;
            if (w + 1) * n <= self.clocks.len() {
                for (a, b) in vc.iter_mut().zip(&self.clocks[w * n..(w + 1) * n]) {
                    *a = (*a).max(*b);
                }
            }
        }
        if let Some(slot) = vc.get_mut(queue as usize) {
            *slot = seq;
        }
        self.clocks.extend_from_slice(&vc);
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
    COMPUTE_QUEUES as usize + dma
}

/// Replaces every instruction's `wait` list with the waits its memory accesses need: for each
/// other queue, the latest earlier instruction on it whose access conflicts with one of this
/// instruction's (read after write, write after read, write after write), dropping those already
/// implied by queue order and the other waits. Instructions on the same queue are ordered by the
/// queue and never wait for each other.
pub fn infer_waits(program: &mut Program) {
    let hbm = HbmIndex::new(program);
    let nq = queue_count(program);
    let mut clocks = Clocks::new(nq);
    let mut history = History::default();
    let mut last_in_queue: Vec<Option<usize>> = vec![None; nq];
    let mut seq_in_queue: Vec<u32> = vec![0; nq];
    for index in 0..program.instructions.len() {
        let inst = &program.instructions[index];
        let q = queue_of(inst);
        let accesses = footprint(&inst.op, &hbm);
        // The latest conflicting instruction per other queue.
        let mut latest: Vec<Option<&Record>> = vec![None; nq];
        for a in &accesses {
            for r in history.conflicts(a, q) {
                let slot = &mut latest[r.queue as usize];
                if slot.is_none_or(|s| s.inst < r.inst) {
                    *slot = Some(r);
                }
            }
        }
        let mut candidates: Vec<(u32, QueueId, u32)> =
            latest.iter().flatten().map(|r| (r.inst, r.queue, r.seq)).collect();
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
                |r| Clocks::ordered(&vc, r),
            );
        }
        program.instructions[index].wait = wait;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AluOp;
    use crate::dtype::DType;
    use crate::program::{DmaCopy, HbmRole, TensorCopy, TensorTensor};
    use crate::target::TargetName;

    fn sb(off: u64, n: i64) -> AccessPattern {
        AccessPattern::sbuf(DType::F32, 0, 4, off, vec![[1, n]])
    }

    fn dma(dst: AccessPattern, src: AccessPattern) -> Op {
        Op::DmaCopy(DmaCopy {
            dst,
            src,
            accumulate: false,
            indirect: None,
        })
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
        let a = access_of("dst", &even, &hbm).unwrap();
        let b = access_of("dst", &odd, &hbm).unwrap();
        assert!(!a.overlaps(&b));
        assert!(a.overlaps(&a.clone()));
        let all = access_of("src", &sb(0, 16), &hbm).unwrap();
        assert!(all.is_dense() && all.overlaps(&a) && all.overlaps(&b));
        let other_parts = access_of("src", &AccessPattern::sbuf(DType::F32, 4, 4, 0, vec![[1, 16]]), &hbm).unwrap();
        assert!(!other_parts.overlaps(&all));
    }

    #[test]
    fn waits_cover_raw_war_waw_and_skip_implied_and_same_queue() {
        let mut p = Program::new(TargetName::Trn1);
        p.declare("a", DType::F32, &[4, 16], HbmRole::Input);
        p.declare("out", DType::F32, &[4, 16], HbmRole::Output);
        let hbm = |n: &str| AccessPattern::hbm(n, DType::F32, 0, 4, 16, vec![[1, 16]]);
        let load = p.push(Engine::Dma, dma(sb(0, 16), hbm("a"))); // 0
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
        let store = p.push(Engine::Dma, dma(hbm("out"), sb(0, 16))); // 3: RAW on copy
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
}
