//! The timeline: when each instruction would run on a NeuronCore whose engines and DMA queues
//! work concurrently, and the race detector that proves program-order execution computes what
//! that concurrent machine would (docs/timeline.md).
//!
//! Every queue (one per compute engine, one per DMA queue, see [`crate::deps::queue_of`]) runs
//! its instructions in program order. An instruction starts when its queue is free and every
//! instruction it waits for has finished; it lasts as long as the cost model says (the busy time
//! its engine semantics charge, from [`crate::Target`]'s cost fields). Values still come from
//! program-order execution: the race detector checks that every pair of conflicting accesses
//! from different queues is ordered by queue order and waits, transitively (vector clocks), so
//! that any schedule the hardware may pick computes the same values.

use crate::deps::{
    CORE_QUEUES, Clocks, HbmIndex, History, QueueId, Record, barrier_across, footprint_on, queue_name, queue_of,
};
use crate::error::ErrorKind;
use crate::program::{Instruction, Program};
use serde::{Deserialize, Serialize};

/// When one instruction ran.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Span {
    pub queue: QueueId,
    pub start_ns: f64,
    pub end_ns: f64,
}

/// Busy time of one queue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueTime {
    /// `tensor`, `vector`, `scalar`, `gpsimd`, `dma0` … `dma15`.
    pub queue: String,
    pub instructions: u64,
    pub busy_ns: f64,
}

/// The schedule of one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// End of the last instruction: the estimated device time of the program.
    pub makespan_ns: f64,
    /// Every queue that ran an instruction, in queue order.
    pub queues: Vec<QueueTime>,
    /// The chain of instructions that decides the makespan, first to last: each one starts when
    /// the one before it ends (its queue predecessor or an instruction it waits for).
    pub critical_path: Vec<u32>,
    /// Per instruction, in program order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<Span>,
}

impl Timeline {
    /// Busy time of a queue by name (0 when it ran nothing).
    pub fn busy_ns(&self, queue: &str) -> f64 {
        self.queues.iter().find(|q| q.queue == queue).map_or(0.0, |q| q.busy_ns)
    }

    /// Fraction of the makespan a queue was busy.
    pub fn utilisation(&self, queue: &str) -> f64 {
        if self.makespan_ns > 0.0 {
            self.busy_ns(queue) / self.makespan_ns
        } else {
            0.0
        }
    }

    /// Busy time of all DMA queues together.
    pub fn dma_busy_ns(&self) -> f64 {
        self.queues
            .iter()
            .filter(|q| q.queue.starts_with("dma") || q.queue.contains(".dma"))
            .map(|q| q.busy_ns)
            .sum()
    }
}

/// Builds the timeline (and checks races) one instruction at a time, in program order.
pub struct Scheduler {
    race_check: bool,
    hbm: HbmIndex,
    hbm_names: Vec<String>,
    queue_free: Vec<f64>,
    busy: Vec<f64>,
    count: Vec<u64>,
    last_in_queue: Vec<Option<usize>>,
    seq_in_queue: Vec<u32>,
    spans: Vec<Span>,
    /// The instruction whose end decided each instruction's start.
    decided_by: Vec<Option<u32>>,
    clocks: Clocks,
    history: History,
    /// Per instruction, whether it is a `core_barrier` ([`barrier_across`]).
    barrier_at: Vec<bool>,
}

/// A race: the later instruction's operand and the error kind to report.
pub struct Race {
    pub operand: &'static str,
    pub kind: ErrorKind,
}

impl Scheduler {
    pub fn new(program: &Program, dma_queues: usize, race_check: bool) -> Self {
        // One set of queues per physical core the program uses (LNC=2: core 1's from CORE_QUEUES).
        let cores = program
            .instructions
            .iter()
            .map(|i| i.core as usize)
            .max()
            .unwrap_or(0)
            .min(1);
        let nq = cores * CORE_QUEUES as usize + crate::deps::COMPUTE_QUEUES as usize + dma_queues.max(1);
        Scheduler {
            race_check,
            hbm: HbmIndex::new(program),
            hbm_names: program.hbm.iter().map(|d| d.name.clone()).collect(),
            queue_free: vec![0.0; nq],
            busy: vec![0.0; nq],
            count: vec![0; nq],
            last_in_queue: vec![None; nq],
            seq_in_queue: vec![0; nq],
            spans: Vec::with_capacity(program.instructions.len()),
            decided_by: Vec::with_capacity(program.instructions.len()),
            clocks: Clocks::with_capacity(if race_check { nq } else { 0 }, program.instructions.len()),
            history: History::default(),
            barrier_at: program
                .instructions
                .iter()
                .map(|i| matches!(i.op, crate::program::Op::CoreBarrier(_)))
                .collect(),
        }
    }

    /// The queue of `inst`, or why it has none on this target.
    pub fn queue(&self, inst: &Instruction) -> Result<QueueId, ErrorKind> {
        if inst.engine != crate::program::Engine::Dma && inst.queue.is_some() {
            return Err(ErrorKind::Invalid(format!(
                "a {} instruction names DMA queue {}; only DMA instructions have queues",
                inst.engine.name(),
                inst.queue.unwrap_or(0)
            )));
        }
        let q = queue_of(inst);
        let per_core = (self.queue_free.len() % CORE_QUEUES as usize).max(crate::deps::COMPUTE_QUEUES as usize + 1);
        if (q % CORE_QUEUES) as usize >= per_core || q as usize >= self.queue_free.len() {
            return Err(ErrorKind::Invalid(format!(
                "DMA queue {} does not exist: the target has {} (0..{})",
                inst.queue.unwrap_or(0),
                per_core - crate::deps::COMPUTE_QUEUES as usize,
                per_core - crate::deps::COMPUTE_QUEUES as usize
            )));
        }
        Ok(q)
    }

    /// Schedules instruction `index` (already executed, lasting `duration_ns`) and, when the
    /// detector is on, checks its accesses against every earlier conflicting access.
    /// `barrier_partner`: the other core's `core_barrier` this one completes (both end together,
    /// when the later of the two has arrived, and each core continues after both).
    pub fn step(
        &mut self,
        program: &Program,
        index: usize,
        q: QueueId,
        duration_ns: f64,
        barrier_partner: Option<usize>,
    ) -> Result<(), Race> {
        let inst = &program.instructions[index];
        let qi = q as usize;
        let mut start = self.queue_free[qi];
        let mut decided = self.last_in_queue[qi].map(|i| i as u32);
        for &w in &inst.wait {
            let end = self.spans[w as usize].end_ns;
            if end > start {
                start = end;
                decided = Some(w);
            }
        }
        if start == 0.0 {
            decided = None;
        }
        let mut end = start + duration_ns.max(0.0);
        if let Some(a) = barrier_partner {
            // Each side's semaphore wait ends when the later side has signalled.
            let other = self.spans[a];
            if other.end_ns > end {
                end = other.end_ns;
                decided = Some(a as u32);
            } else {
                self.spans[a].end_ns = end;
                self.queue_free[other.queue as usize] = self.queue_free[other.queue as usize].max(end);
            }
        }
        self.spans.push(Span {
            queue: q,
            start_ns: start,
            end_ns: end,
        });
        self.decided_by.push(decided);
        self.queue_free[qi] = end;
        self.busy[qi] += duration_ns.max(0.0);
        self.count[qi] += 1;
        self.seq_in_queue[qi] += 1;
        let seq = self.seq_in_queue[qi];
        if self.race_check {
            self.clocks.push(q, seq, self.last_in_queue[qi], &inst.wait);
            if let Some(a) = barrier_partner {
                self.clocks.join_pair(a, index);
            }
            let vc = self.clocks.of(index);
            let accesses = footprint_on(&inst.op, inst.core, &self.hbm);
            // A core_barrier's access to its shared tensor touches no byte: it orders the
            // accesses of its own core only, so it is neither checked against nor seen by the
            // other core's (which the barrier pair's clock join orders directly).
            for a in &accesses {
                // The latest unordered conflict: the one a missing wait would have named. Per
                // queue, the latest conflicting record is unordered whenever any is.
                let mut unordered: Option<&Record> = None;
                let barrier_at = &self.barrier_at;
                self.history.latest_conflicts(a, q, |r| {
                    if barrier_across(barrier_at, index, q, r) {
                        return;
                    }
                    if !Clocks::ordered(vc, r) && unordered.is_none_or(|u| u.inst < r.inst) {
                        unordered = Some(r);
                    }
                });
                if let Some(r) = unordered {
                    return Err(self.race(program, index, a, r));
                }
            }
            let vc = vc.to_vec();
            for access in accesses {
                self.history.insert(
                    Record {
                        inst: index as u32,
                        queue: q,
                        seq,
                        access,
                    },
                    |r| Clocks::ordered(&vc, r) && !barrier_across(&self.barrier_at, index, q, r),
                );
            }
        }
        self.last_in_queue[qi] = Some(index);
        Ok(())
    }

    fn race(&self, program: &Program, index: usize, a: &crate::deps::Access, r: &Record) -> Race {
        let hazard = match (r.access.write, a.write) {
            (true, false) => "read-after-write",
            (false, true) => "write-after-read",
            _ => "write-after-write",
        };
        let other = &program.instructions[r.inst as usize];
        Race {
            operand: a.operand,
            kind: ErrorKind::Race(Box::new(crate::error::RaceDetail {
                hazard,
                other: r.inst as usize,
                other_engine: other.engine.name(),
                other_queue: queue_name(r.queue),
                other_opcode: other.op.name(),
                other_operand: r.access.operand,
                other_loc: other.loc.clone(),
                loc: program.instructions[index].loc.clone(),
                range: a.describe_overlap(&r.access, &self.hbm_names),
            })),
        }
    }

    /// The finished timeline.
    pub fn finish(self) -> Timeline {
        let makespan = self.spans.iter().map(|s| s.end_ns).fold(0.0, f64::max);
        let mut critical_path = Vec::new();
        let mut cur = self
            .spans
            .iter()
            .enumerate()
            .filter(|(_, s)| s.end_ns == makespan)
            .map(|(i, _)| i as u32)
            .next_back();
        while let Some(i) = cur {
            critical_path.push(i);
            cur = self.decided_by[i as usize];
        }
        critical_path.reverse();
        let queues = (0..self.busy.len())
            .filter(|&q| self.count[q] > 0)
            .map(|q| QueueTime {
                queue: queue_name(q as QueueId),
                instructions: self.count[q],
                busy_ns: self.busy[q],
            })
            .collect();
        Timeline {
            makespan_ns: makespan,
            queues,
            critical_path,
            spans: self.spans,
        }
    }
}

impl Timeline {
    /// A human summary: makespan, busy time and utilisation per queue, and the critical path
    /// (its first and last `path_lines` instructions when longer).
    pub fn summary(&self, program: &Program, path_lines: usize) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "estimated device time {:.3} µs ({} instructions)",
            self.makespan_ns / 1000.0,
            program.instructions.len()
        );
        let _ = writeln!(s, "{:<8} {:>7} {:>12} {:>6}", "queue", "instrs", "busy µs", "util");
        for q in &self.queues {
            let _ = writeln!(
                s,
                "{:<8} {:>7} {:>12.3} {:>5.1}%",
                q.queue,
                q.instructions,
                q.busy_ns / 1000.0,
                100.0 * self.utilisation(&q.queue)
            );
        }
        let n = self.critical_path.len();
        let _ = writeln!(s, "critical path: {n} instructions");
        for (k, &i) in self.critical_path.iter().enumerate() {
            if n > 2 * path_lines && k == path_lines {
                let _ = writeln!(s, "  … {} more", n - 2 * path_lines);
            }
            if n > 2 * path_lines && k >= path_lines && k < n - path_lines {
                continue;
            }
            let (Some(inst), Some(sp)) = (program.instructions.get(i as usize), self.spans.get(i as usize)) else {
                continue;
            };
            let loc = inst.loc.as_deref().map(|l| format!("  {l}")).unwrap_or_default();
            let _ = writeln!(
                s,
                "  #{i:<6} {:<7} {:<24} {:>10.3} .. {:>10.3} µs{loc}",
                queue_name(sp.queue),
                inst.op.name(),
                sp.start_ns / 1000.0,
                sp.end_ns / 1000.0
            );
        }
        s
    }
}
