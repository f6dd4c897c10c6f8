//! What a run produces, as data: one [`CaseResult`] per case (with its [`BusyUs`] and, in a
//! multi-backend run, its [`BackendResult`]s) and the run's [`Summary`]. The runner builds them,
//! the reports read them; neither imports the other through these types (runner → results ←
//! report), and the roofline's terms they carry come from crate::roofline, which imports
//! neither.

use crate::case::IndexEntry;
use crate::compare::OutputMetrics;
use crate::expect::Status;
use serde::Serialize;
use std::time::Duration;
use trnsim::EngineCounts;

/// The result of one case.
#[derive(Clone, Debug, Serialize)]
pub struct CaseResult {
    pub id: String,
    pub op: String,
    pub dtype: String,
    pub status: Status,
    /// The expectations entry that covers the case, described.
    pub expectation: Option<String>,
    /// One entry per output, pass or fail.
    pub metrics: Vec<OutputMetrics>,
    /// Instructions executed per engine (zero when nothing ran).
    pub instructions: EngineCounts,
    #[serde(skip)]
    pub wall_time: Duration,
    pub wall_ms: f64,
    /// Why the case did not pass (or notes); empty for a plain pass.
    pub message: String,
    /// Per-backend comparison when the executor ran several (nki mode), else empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<BackendResult>,
    /// Estimated device time in µs: the simulator's timeline makespan (docs/timeline.md).
    /// Absent when the simulator did not run the program.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub est_us: Option<f64>,
    /// Estimated busy time per engine in µs (DMA: summed over its queues), with `est_us`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busy_us: Option<BusyUs>,
    /// Roofline lower bound on the device time in µs (crate::roofline), with `est_us`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_us: Option<f64>,
    /// `bound_us / est_us`, in (0, 1]; absent when the call has no required work.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub efficiency: Option<f64>,
    /// The roofline term that sets `bound_us`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limiter: Option<crate::roofline::Limiter>,
}

/// Estimated busy time per engine in µs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct BusyUs {
    pub tensor: f64,
    pub vector: f64,
    pub scalar: f64,
    pub gpsimd: f64,
    pub dma: f64,
}

impl BusyUs {
    pub(crate) fn of(stats: &trnsim::Stats) -> Self {
        let t = &stats.est_ns;
        BusyUs {
            tensor: t.tensor / 1000.0,
            vector: t.vector / 1000.0,
            scalar: t.scalar / 1000.0,
            gpsimd: t.gpsimd / 1000.0,
            dma: t.dma / 1000.0,
        }
    }
}

impl CaseResult {
    pub(crate) fn new(entry: &IndexEntry) -> Self {
        CaseResult {
            id: entry.id.clone(),
            op: entry.op.clone(),
            dtype: entry.dtype.clone(),
            status: Status::Error,
            expectation: None,
            metrics: Vec::new(),
            instructions: EngineCounts::default(),
            wall_time: Duration::ZERO,
            wall_ms: 0.0,
            message: String::new(),
            backends: Vec::new(),
            est_us: None,
            busy_us: None,
            bound_us: None,
            efficiency: None,
            limiter: None,
        }
    }
}

/// One backend of a multi-backend run (nki mode: `sim`, `nki_standin`, `simulate_kernel`,
/// `hardware`) compared with the golden by the same code as the case, and bit for bit with `sim`.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct BackendResult {
    pub name: String,
    /// `pass` / `fail` against the golden (before expectations), or `error` (unreadable outputs).
    pub status: String,
    /// Max ULP distance from the golden over the value outputs.
    pub max_ulp: Option<u64>,
    /// Whether every output has the same bits as the `sim` backend's.
    pub same_bits_as_sim: bool,
    /// The first line of the comparison message.
    #[serde(default)]
    pub message: String,
}

/// Counts of a run by status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Summary {
    pub total: usize,
    pub passed: usize,
    /// Passed by the accuracy rule only (status `accurate`), counted apart from `passed`.
    #[serde(default)]
    pub accurate: usize,
    pub failed: usize,
    pub xfailed: usize,
    pub xpassed: usize,
    pub skipped: usize,
    pub errors: usize,
    /// Cases of overloads the backend does not provide (`--backend nki:MODULE`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub not_provided: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Summary {
    pub fn of(results: &[CaseResult]) -> Summary {
        let mut s = Summary {
            total: results.len(),
            ..Default::default()
        };
        for r in results {
            match r.status {
                Status::Pass => s.passed += 1,
                Status::Accurate => s.accurate += 1,
                Status::Fail => s.failed += 1,
                Status::XFail => s.xfailed += 1,
                Status::XPass => s.xpassed += 1,
                Status::Skip => s.skipped += 1,
                Status::Error => s.errors += 1,
                Status::NotProvided => s.not_provided += 1,
            }
        }
        s
    }

    /// Whether every case matched its expectation.
    pub fn ok(&self) -> bool {
        self.failed == 0 && self.xpassed == 0 && self.errors == 0
    }
}
