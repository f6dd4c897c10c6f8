//! `trnconf`: run the golden conformance suite from the command line, and inspect its cases and
//! results. `trnconf <command> --help` shows every option with examples.
//!
//! Exit status: 0 when every case matched its expectation, 1 when some did not (fail, xpass,
//! error), 2 for usage errors and bad input (missing golden dir, unknown case, malformed
//! expectations or results file, unwritable output). On bad input nothing is written.

#[path = "trnconf_cmd/model.rs"]
mod trnconf_model;
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::Value;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use trnconf::backend::Backend;
use trnconf::backend::nki_module::{self, NkiModuleBackend};
use trnconf::case::{Case, GoldenIndex, IndexEntry};
use trnconf::executor::SimExecutor;
use trnconf::executor::process::{ProcessConfig, ProcessExecutor};
use trnconf::expect::Expectations;
use trnconf::report::json::{self as results, Loaded, PartialWriter, RunInfo};
use trnconf::report::output::{self, Inputs};
use trnconf::report::{self, CaseRecord};
use trnconf::runner::{self, CaseResult};
use trnsim::{ExecConfig, Numerics, TargetName};

/// Output to a closed pipe (`trnconf list | head -1`) is dropped quietly: `print!`/`println!` are
/// shadowed here by versions that stop writing at the first broken pipe instead of panicking. The
/// command still finishes its work and exits with its own status (a run still writes its report
/// files), so nothing is claimed for work that was not done.
macro_rules! print {
    ($($arg:tt)*) => { write_stdout(format_args!($($arg)*)) };
}
macro_rules! println {
    () => { write_stdout(format_args!("\n")) };
    ($($arg:tt)*) => { write_stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn write_stdout(args: std::fmt::Arguments) {
    use std::io::Write;
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    if let Err(e) = std::io::stdout().lock().write_fmt(args) {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("trnconf: cannot write to stdout: {e}");
        }
    }
}

const MODEL_EXAMPLES: &str = "\
Examples:
  trnconf model run golden/models/gpt2          # per-node verdicts, drift, end-to-end error
  trnconf model run golden/models/resnet18 -v --html r.html --json r.json --junit r.xml
";

const RUN_EXAMPLES: &str = "\
Examples:
  trnconf run                                   # the whole committed suite on the simulator (trn1)
  trnconf run --filter add.Tensor --jobs 4      # substring of the case ids
  trnconf run --filter 'add.*::bf16::*'         # or a glob
  trnconf run --shard 2/4                       # the 2nd of 4 disjoint parts (by position mod 4)
  trnconf run --target trn2 --json r.json --junit r.xml --html r.html
  trnconf run --resume r.json                   # finish a killed run (reads r.json.partial.jsonl)
  trnconf run --backend nki:conformance/python/examples/nki_backend_example.py
                                                # someone's NKI kernels, through trnsim.nki
  trnconf run --numerics matmul_accumulation=pairwise   # another simulator setting (docs/numerics.md)

Outputs: --json FILE is written progressively to FILE.partial.jsonl (one line per finished case)
and folded into FILE at the end. Exit status: 0 every case matched its expectation, 1 some did
not, 2 bad input.";

const DIFF_EXAMPLES: &str = "\
Examples:
  trnconf diff before.json after.json             # text: status changes, then numeric changes
  trnconf diff before.json after.json --html d.html

Cases are joined by id. Status changes come first (including cases only in one run), then cases
sorted by the change in max ULP distance (signed: + is further from the golden), then in max
relative error. Unchanged cases are counted. Exit status 1 when a case regressed: it matched its
expectation in the earlier run and does not in the later one, or it is missing from the later one.
Runs under different --numerics settings are compared too; the settings of both are printed.";

const LIST_EXAMPLES: &str = "\
Examples:
  trnconf list                          # every case, lowered or not; files the index misses
  trnconf list --filter ::bf16::        # a subset
  trnconf list --ops                    # ops with their case counts
  trnconf list --coverage               # the 193 core overloads: cases, and which dtypes pass
  trnconf list --coverage --results r.json   # coverage from a results file instead of a run";

const SHOW_EXAMPLES: &str = "\
Examples:
  trnconf show 'add.Tensor::f32::hand_0'
  trnconf show 'relu::bf16::opinfo_0' --target trn2
  trnconf show 'mm::bf16::stress_0' --trace t.json

Prints the op call, the inputs' shapes and dtypes, the lowered program (one instruction per
line: engine, opcode, operands with their access patterns), per-engine instruction counts, the
timeline summary (estimated device time, busy time per engine and DMA queue, critical path) and
the comparison result. --trace writes the timeline as Chrome Trace Event / Perfetto JSON
(docs/timeline.md).";

const LOWER_EXAMPLES: &str = "\
Examples:
  trnconf lower 'add.Tensor::f32::hand_0' --emit json              # to stdout
  trnconf lower 'add.Tensor::f32::hand_0' --emit json -o add.json  # the program file
  trnconf lower 'mm::bf16::stress_0' --emit nki -o mm.py          # the NKI kernel";

const COVERAGE_EXAMPLES: &str = "\
Examples:
  trnconf coverage --markdown docs/coverage.md            # runs the suite, writes the page
  trnconf coverage --markdown docs/coverage.md --results r.json";

const PERF_EXAMPLES: &str = "\
Examples:
  trnconf perf                          # the stress cases' roofline efficiency per op family
  trnconf perf --all --worst 20         # every case; list the 20 least efficient
  trnconf perf --results r.json --markdown   # from a results file, as a Markdown table

Efficiency = roofline lower bound / estimated device time (timeline makespan), per case; per
family the time-weighted Σ bound / Σ estimate, the median and the minimum. The bound comes from
the call's shapes and the target's published rates (docs/performance.md, \"Roofline\"). Exit
status 1 when a case's estimate is below its bound (a cost-model bug).";

const SYNC_EXAMPLES: &str = "\
Examples:
  trnconf sync-expectations            # rewrite the not-lowered block
  trnconf sync-expectations --check    # exit 1 if it is out of date";

#[derive(Parser)]
#[command(
    name = "trnconf",
    version,
    about = "Core ATen conformance suite for the Trainium backend (simulated)",
    after_help = "Examples:\n  trnconf run\n  trnconf run --filter relu --json r.json --html r.html\n  trnconf show 'relu::f32::hand_0'\n  trnconf diff old.json new.json\n  trnconf list --coverage"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// `--target NAME`: the values are the simulator's target list (`TargetName::ALL`), parsed by
/// `TargetName::from_name`, so a new generation is on every subcommand's `--target` (and in its
/// `--help`) without a second list here.
#[derive(Clone, Copy, Debug)]
struct TargetParser;

impl clap::builder::TypedValueParser for TargetParser {
    type Value = TargetName;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<TargetName, clap::Error> {
        // clap's own check and message ("invalid value … [possible values: trn1, trn2, trn3]").
        let name = clap::builder::PossibleValuesParser::new(TargetName::names()).parse_ref(cmd, arg, value)?;
        TargetName::from_name(&name).ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidValue).with_cmd(cmd))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(TargetName::names().map(clap::builder::PossibleValue::new)))
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Emit {
    Json,
    /// The program as an NKI kernel (conformance/src/emit_nki.rs), e.g. for timing on hardware:
    /// the legacy `neuronxcc.nki` dialect (trn1).
    Nki,
    /// The same kernel in the current `nki` dialect (NKI 0.3+; trn2/trn3).
    NkiCurrent,
}

/// `I/N`: the I-th (1-based) of N shards.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Shard {
    index: usize,
    count: usize,
}

fn parse_shard(s: &str) -> Result<Shard, String> {
    let (i, n) = s.split_once('/').ok_or("expected I/N, e.g. 1/4")?;
    let index: usize = i.trim().parse().map_err(|_| format!("`{i}` is not a number"))?;
    let count: usize = n.trim().parse().map_err(|_| format!("`{n}` is not a number"))?;
    if count == 0 || index == 0 || index > count {
        return Err(format!("need 1 <= I <= N, got {index}/{count}"));
    }
    Ok(Shard { index, count })
}

#[derive(clap::Args, Clone)]
struct GoldenArg {
    /// Golden directory (default: the workspace's golden/).
    #[arg(long, value_name = "DIR")]
    golden: Option<PathBuf>,
}

// The command line is parsed once per process; the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run golden cases through lowering, the simulator and comparison.
    #[command(after_help = RUN_EXAMPLES)]
    Run {
        #[command(flatten)]
        golden: GoldenArg,
        /// Only cases whose id contains PATTERN (or matches it, if it has `*`/`?`).
        #[arg(long, value_name = "PATTERN")]
        filter: Option<String>,
        /// Parallel jobs (default: available parallelism). Results do not depend on it.
        #[arg(long, short = 'j', visible_alias = "threads", value_name = "N")]
        jobs: Option<usize>,
        /// Run only shard I of N (1-based): the cases at positions p (in id order, after
        /// --filter) with p mod N = I-1. N machines with 1/N … N/N run every case exactly once.
        #[arg(long, value_name = "I/N", value_parser = parse_shard)]
        shard: Option<Shard>,
        /// The NeuronCore generation to lower for and simulate.
        #[arg(long, value_parser = TargetParser, default_value = TargetName::default().name())]
        target: TargetName,
        /// Write the results as JSON (progressively: FILE.partial.jsonl while running).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Write JUnit XML (one testsuite per op group).
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// Write a self-contained HTML report.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// Finish an interrupted run: skip the cases already in FILE (or FILE.partial.jsonl) and
        /// write FILE as --json would. Give the same selection options as the first run.
        #[arg(long, value_name = "FILE")]
        resume: Option<PathBuf>,
        /// Expectations file (default: conformance/expectations.toml for `--executor sim` and
        /// `--mode nki`, conformance/expectations-torch.toml for `--mode torch` and `echo`).
        #[arg(long, value_name = "FILE")]
        expectations: Option<PathBuf>,
        /// How many of the slowest cases to list at the end.
        #[arg(long, default_value_t = 10, value_name = "N")]
        slowest: usize,
        /// Print every case, not only those that did not match their expectation.
        #[arg(long, short)]
        verbose: bool,
        /// `sim` (lower and run on the trnsim simulator), or `process:CMD`: run each case's ATen
        /// call in a child process speaking docs/executor-protocol.md, e.g.
        /// `process:"python conformance/pyexec/trnconf_executor.py --device cpu"`.
        #[arg(long, default_value = "sim", value_name = "sim|process:CMD")]
        executor: String,
        /// With --executor process: `torch` (the ATen op on the device), `nki` (emitted kernels),
        /// or `echo` (PROTOCOL TEST ONLY: returns the golden outputs; never a conformance result).
        #[arg(long, default_value = "torch", value_parser = ["torch", "nki", "echo"])]
        mode: String,
        /// With --executor process: seconds per case before the executor is killed (timeout).
        #[arg(long, default_value_t = 120.0, value_name = "SECONDS")]
        timeout: f64,
        /// With --executor process: seconds for the start-up handshake (`hello`) before the
        /// executor is killed and the run fails.
        #[arg(long, default_value_t = 300.0, value_name = "SECONDS")]
        hello_timeout: f64,
        /// The simulator's numerics settings, KEY=VALUE,... (docs/numerics.md), e.g.
        /// `matmul_accumulation=pairwise,denormals=flush_to_zero`; recorded in the reports.
        #[arg(long, value_name = "KEY=VALUE,...")]
        numerics: Option<String>,
        /// With --executor process: keep every request's files in DIR (the emitted kernels, device
        /// inputs and each backend's outputs in nki mode; the executor's NEFFs and logs) instead
        /// of a temporary directory deleted as the run goes.
        #[arg(long, value_name = "DIR")]
        artifacts: Option<PathBuf>,
        /// `lowering` (trnconf's own lowering, run on --executor), or `nki:MODULE`: the NKI
        /// kernels a Python backend module maps Core ATen overloads to, run through the trnsim.nki
        /// front-end on the simulator (docs/nki-backend.md). MODULE is a dotted module name
        /// importable from the current directory or a path to a .py file. Python:
        /// $TRNCONF_PYTHON, else the workspace's .venv, else python3.
        #[arg(long, default_value = "lowering", value_name = "lowering|nki:MODULE")]
        backend: String,
        /// Keep int64 tensors as int64 on the device (the compiler's `--native-int64`) instead of
        /// narrowing them to int32, for the ops with a native int64 lowering (docs/lowering.md,
        /// "int64"). Needs a target with 64-bit integers (trn2, trn3); refused on trn1. With
        /// `--executor sim` and `--backend lowering` only.
        #[arg(long)]
        native_int64: bool,
    },
    /// Compare two results files case by case.
    #[command(after_help = DIFF_EXAMPLES)]
    Diff {
        /// The earlier run (a --json results file).
        a: PathBuf,
        /// The later run.
        b: PathBuf,
        /// Also write the comparison as a self-contained HTML page.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
    },
    /// List the cases of a golden directory, the ops, or coverage of the core overloads.
    #[command(after_help = LIST_EXAMPLES)]
    List {
        #[command(flatten)]
        golden: GoldenArg,
        #[arg(long, value_name = "PATTERN")]
        filter: Option<String>,
        /// One line per op: its group, case count and whether it is lowered.
        #[arg(long, conflicts_with = "coverage")]
        ops: bool,
        /// Every core overload with its cases and, per dtype, how many pass (runs the suite
        /// unless --results is given).
        #[arg(long)]
        coverage: bool,
        /// With --coverage: take statuses from this results file instead of running.
        #[arg(long, value_name = "FILE", requires = "coverage")]
        results: Option<PathBuf>,
    },
    /// Show one case: the call, inputs, lowered program, instruction counts and the result.
    #[command(after_help = SHOW_EXAMPLES)]
    Show {
        /// The case id (`trnconf list` prints them).
        case: String,
        #[command(flatten)]
        golden: GoldenArg,
        /// The NeuronCore generation to lower for.
        #[arg(long, value_parser = TargetParser, default_value = TargetName::default().name())]
        target: TargetName,
        /// Write the timeline as a Chrome Trace Event / Perfetto JSON file.
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// The simulator's numerics settings, KEY=VALUE,... (docs/numerics.md).
        #[arg(long, value_name = "KEY=VALUE,...")]
        numerics: Option<String>,
    },
    /// Lower one case and write its trnsim program.
    #[command(after_help = LOWER_EXAMPLES)]
    Lower {
        /// The case id.
        case: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "json")]
        emit: Emit,
        /// Output file (default: stdout).
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        #[command(flatten)]
        golden: GoldenArg,
        /// The NeuronCore generation to lower for.
        #[arg(long, value_parser = TargetParser, default_value = TargetName::default().name())]
        target: TargetName,
        /// The simulator's numerics settings, KEY=VALUE,... (docs/numerics.md; checked, and
        /// recorded on stderr: a program does not depend on them).
        #[arg(long, value_name = "KEY=VALUE,...")]
        numerics: Option<String>,
    },
    /// Generate the coverage page (docs/coverage.md) from the suite.
    #[command(after_help = COVERAGE_EXAMPLES)]
    Coverage {
        /// Write the Markdown page here.
        #[arg(long, value_name = "FILE")]
        markdown: PathBuf,
        #[command(flatten)]
        golden: GoldenArg,
        /// Take statuses from this results file instead of running the suite.
        #[arg(long, value_name = "FILE")]
        results: Option<PathBuf>,
    },
    /// Roofline efficiency per op family: lower bound / estimated device time (trn1).
    #[command(after_help = PERF_EXAMPLES)]
    Perf {
        #[command(flatten)]
        golden: GoldenArg,
        /// Take the cases from this results file instead of running the suite.
        #[arg(long, value_name = "FILE")]
        results: Option<PathBuf>,
        /// Only cases whose id contains PATTERN (or matches it, with `*`/`?`); default: the
        /// stress cases (`::stress_`).
        #[arg(long, value_name = "PATTERN", conflicts_with = "all")]
        filter: Option<String>,
        /// Every case, not only the stress cases.
        #[arg(long)]
        all: bool,
        /// Print the table as Markdown (as docs/performance.md has it).
        #[arg(long)]
        markdown: bool,
        /// Also list the N least efficient cases.
        #[arg(long, default_value_t = 10, value_name = "N")]
        worst: usize,
    },
    /// Whole models: run a captured Core ATen graph node by node (docs/models.md).
    #[command(after_help = MODEL_EXAMPLES)]
    Model {
        #[command(subcommand)]
        cmd: trnconf_model::ModelCommand,
    },
    /// Rewrite the generated not-lowered block of the expectations file from the lowering
    /// registry (run after adding a lowering).
    #[command(after_help = SYNC_EXAMPLES)]
    SyncExpectations {
        /// Expectations file (default: conformance/expectations.toml).
        #[arg(long)]
        expectations: Option<PathBuf>,
        /// Only check: exit 1 if the file is out of date.
        #[arg(long)]
        check: bool,
    },
}

/// Bad input: a one-line message, exit 2.
fn bad_input(msg: impl std::fmt::Display) -> ExitCode {
    let msg = msg.to_string();
    eprintln!("trnconf: {}", msg.lines().collect::<Vec<_>>().join("; "));
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run {
            golden,
            filter,
            jobs,
            shard,
            target,
            json,
            junit,
            html,
            resume,
            expectations,
            slowest,
            verbose,
            executor,
            mode,
            timeout,
            hello_timeout,
            numerics,
            artifacts,
            backend,
            native_int64,
        } => run(RunArgs {
            golden: golden.golden,
            filter,
            jobs,
            shard,
            target,
            json,
            junit,
            html,
            resume,
            expectations,
            slowest,
            verbose,
            executor,
            mode,
            timeout,
            hello_timeout,
            numerics,
            artifacts,
            backend,
            native_int64,
        }),
        Command::Diff { a, b, html } => diff(&a, &b, html.as_deref()),
        Command::List {
            golden,
            filter,
            ops,
            coverage,
            results,
        } => list(golden.golden, filter, ops, coverage, results.as_deref()),
        Command::Show {
            case,
            golden,
            target,
            trace,
            numerics,
        } => match parse_numerics(numerics.as_deref()) {
            Ok(n) => show(&case, golden.golden, target, trace.as_deref(), n),
            Err(code) => code,
        },
        Command::Lower {
            case,
            emit,
            output,
            golden,
            target,
            numerics,
        } => match parse_numerics(numerics.as_deref()) {
            Ok(_) => lower(&case, golden.golden, target, output.as_deref(), emit),
            Err(code) => code,
        },
        Command::Coverage {
            markdown,
            golden,
            results,
        } => coverage(&markdown, golden.golden, results.as_deref()),
        Command::SyncExpectations { expectations, check } => sync_expectations(expectations, check),
        Command::Perf {
            golden,
            results,
            filter,
            all,
            markdown,
            worst,
        } => perf(golden.golden, results.as_deref(), filter, all, markdown, worst),
        Command::Model { cmd } => match trnconf_model::run(cmd) {
            Ok(code) => ExitCode::from(code as u8),
            Err(e) => bad_input(e),
        },
    }
}

/// `--numerics` as settings (bad text is bad input).
fn parse_numerics(spec: Option<&str>) -> Result<Numerics, ExitCode> {
    trnconf::numerics::parse(spec.unwrap_or("")).map_err(|e| bad_input(format!("--numerics: {e}")))
}

fn load_index(golden: Option<PathBuf>) -> Result<GoldenIndex, ExitCode> {
    let given = golden.is_some();
    let golden = golden.unwrap_or_else(trnconf::default_golden_dir);
    if !golden.is_dir() {
        let hint = if given {
            ""
        } else {
            " (found from the current directory's workspace or $TRNCONF_GOLDEN / $TRNCONF_ROOT; give --golden DIR)"
        };
        return Err(bad_input(format!(
            "{}: golden directory does not exist{hint}",
            golden.display()
        )));
    }
    let golden = std::fs::canonicalize(&golden).unwrap_or(golden);
    GoldenIndex::load(&golden).map_err(bad_input)
}

fn selected<'a>(index: &'a GoldenIndex, filter: &Option<String>) -> Vec<&'a IndexEntry> {
    index
        .cases
        .iter()
        .filter(|c| filter.as_deref().is_none_or(|f| runner::filter_matches(f, &c.id)))
        .collect()
}

/// Checks a command's outputs against its inputs before any work (docs/workflow.md, "Output
/// files"): no output names an input, a directory or a missing directory, and no two outputs
/// name the same file. Bad input never leaves half the outputs written.
fn check_outputs(inputs: &Inputs, outputs: &[(&str, &Path)]) -> Result<(), ExitCode> {
    inputs.check_outputs(outputs).map_err(bad_input)
}

struct RunArgs {
    golden: Option<PathBuf>,
    filter: Option<String>,
    jobs: Option<usize>,
    shard: Option<Shard>,
    target: TargetName,
    json: Option<PathBuf>,
    junit: Option<PathBuf>,
    html: Option<PathBuf>,
    resume: Option<PathBuf>,
    expectations: Option<PathBuf>,
    slowest: usize,
    verbose: bool,
    executor: String,
    mode: String,
    timeout: f64,
    hello_timeout: f64,
    numerics: Option<String>,
    artifacts: Option<PathBuf>,
    backend: String,
    native_int64: bool,
}

struct ExecutorArgs {
    executor: String,
    mode: String,
    timeout: f64,
    hello_timeout: f64,
    numerics: Option<Numerics>,
    target: TargetName,
    artifacts: Option<PathBuf>,
    native_int64: bool,
}

/// The backend `--backend nki:MODULE` names (after the child's handshake), with the module's
/// own expectations file (`<module>.expectations.toml` beside it), if it has one.
fn make_nki_backend(module: &str, a: &ExecutorArgs) -> Result<(Box<dyn Backend>, Option<PathBuf>), ExitCode> {
    if a.executor != "sim" {
        return Err(bad_input(format!(
            "--backend nki:{module} runs on trnsim through the NKI front-end; --executor {} does not apply",
            a.executor
        )));
    }
    let python = nki_module::python();
    let mut config = ProcessConfig::new(NkiModuleBackend::command(&python, module), nki_module::MODE);
    config.timeout = Duration::from_secs_f64(a.timeout);
    config.target = a.target;
    if let Some(dir) = &a.artifacts {
        config.artifacts_dir = Some(dir.clone());
        config.keep_artifacts = true;
    }
    let backend = NkiModuleBackend::start(module, config).map_err(bad_input)?;
    eprintln!("backend: nki:{module} (python: {python})");
    for (op, kernels) in backend.provided() {
        eprintln!("  {op:<20} {}", kernels.join(", "));
    }
    let expectations = backend
        .file()
        .map(|f| f.with_extension("expectations.toml"))
        .filter(|p| p.is_file());
    Ok((Box::new(backend), expectations))
}

/// The executor `--executor` names (the process executor after its handshake).
fn make_executor(a: &ExecutorArgs) -> Result<Box<dyn Backend>, ExitCode> {
    if a.executor == "sim" {
        // The settings: --numerics, else TRNCONF_SIM_NUMERICS (the named settings as JSON, e.g.
        // '{"activation":{"approximate":{"ulps":4}}}'; docs/numerics.md), else the defaults.
        let numerics = match (a.numerics, std::env::var("TRNCONF_SIM_NUMERICS")) {
            (Some(n), _) => n,
            (None, Ok(json)) => {
                serde_json::from_str(&json).map_err(|e| bad_input(format!("TRNCONF_SIM_NUMERICS: {e}")))?
            }
            (None, Err(_)) => Default::default(),
        };
        let config = ExecConfig {
            numerics,
            ..ExecConfig::default()
        };
        let mut sim = SimExecutor::with_config(a.target, config);
        if a.native_int64 {
            sim = sim.native_int64().map_err(bad_input)?;
        }
        // TEST ONLY (docs/numerics.md, "Generalisation"): move every bounded output to k× its
        // accuracy bound, to show that the rule fails such a device.
        if let Ok(k) = std::env::var("TRNCONF_TEST_INJECT_BOUND_ERROR") {
            let factor: f64 = k
                .parse()
                .map_err(|_| bad_input(format!("TRNCONF_TEST_INJECT_BOUND_ERROR={k}: not a number")))?;
            eprintln!("TEST ONLY: TRNCONF_TEST_INJECT_BOUND_ERROR={k}: outputs are moved to {k}x their accuracy bound");
            return Ok(Box::new(trnconf::accuracy::inject::InjectBoundError {
                inner: sim,
                factor,
            }));
        }
        return Ok(Box::new(sim));
    }
    if a.numerics.is_some() {
        return Err(bad_input(
            "--numerics: settings of the simulator; `--executor process:…` runs a real backend",
        ));
    }
    let Some(cmd) = ProcessExecutor::parse_spec(&a.executor) else {
        return Err(bad_input(format!(
            "--executor `{}`: expected `sim` or `process:CMD`",
            a.executor
        )));
    };
    for (flag, secs) in [("--timeout", a.timeout), ("--hello-timeout", a.hello_timeout)] {
        if !(secs > 0.0 && secs.is_finite()) {
            return Err(bad_input(format!(
                "{flag} {secs}: must be a positive number of seconds"
            )));
        }
    }
    let mut config = ProcessConfig::new(cmd, a.mode.clone());
    config.timeout = Duration::from_secs_f64(a.timeout);
    config.hello_timeout = Duration::from_secs_f64(a.hello_timeout);
    config.target = a.target;
    if let Some(dir) = &a.artifacts {
        config.artifacts_dir = Some(dir.clone());
        config.keep_artifacts = true;
    }
    let ex = ProcessExecutor::new(config).map_err(bad_input)?;
    let hello = ex.hello().map_err(bad_input)?;
    eprintln!(
        "executor: {cmd}\n  protocol {}, platform {}, sdk {}",
        hello["protocol"], hello["platform"], hello["sdk"]
    );
    if let Err(why) = ProcessExecutor::mode_available(&hello, &a.mode) {
        eprintln!(
            "  mode `{}` cannot run here: {why} (every case will be skipped as unsupported)",
            a.mode
        );
    }
    if a.mode == "echo" {
        eprintln!("  mode `echo` is a PROTOCOL TEST: it returns the golden outputs; these are not conformance results");
    }
    Ok(Box::new(ex))
}

/// Loads what `--resume FILE` points at: `FILE.partial.jsonl` and/or `FILE`.
fn load_resume(path: &Path) -> Result<Loaded, String> {
    let partial = results::partial_path(path);
    let mut loaded = Loaded::default();
    let mut found = false;
    for p in [path, partial.as_path()] {
        if p.is_file() {
            found = true;
            let mut l = results::load(p)?;
            loaded.info = loaded.info.or(l.info.take());
            loaded.merge(l).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    if !found {
        return Err(format!(
            "{}: no such results file (nor {})",
            path.display(),
            partial.display()
        ));
    }
    Ok(loaded)
}

/// The most `--jobs` a run accepts: 4 threads per core (cases are CPU-bound on the simulator;
/// more threads only cost memory; a process executor runs one case at a time per child).
fn max_jobs() -> usize {
    4 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Reads the files a run depends on and hashes them (see [`RunInfo::golden_hash`]).
fn golden_hash(index: &GoldenIndex, entries: &[&IndexEntry]) -> Result<String, String> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut parts = vec![read(&index.dir.join("index.json"))?];
    for e in entries {
        parts.push(e.id.as_bytes().to_vec());
        // A missing case file is reported by the case itself (an error), not here.
        parts.push(std::fs::read(index.dir.join(&e.file)).unwrap_or_default());
    }
    Ok(results::content_hash(parts.iter().map(|p| p.as_slice())))
}

fn run(a: RunArgs) -> ExitCode {
    let start = Instant::now();
    if a.native_int64 {
        let t = a.target.params();
        if !t.native_int64 {
            return bad_input(format!(
                "--native-int64: {} has no native 64-bit integers (NeuronCore-v3 and later have them: --target trn2 or trn3)",
                t.label
            ));
        }
        if a.executor != "sim" || a.backend != "lowering" {
            return bad_input(
                "--native-int64 is an option of trnconf's lowering on the simulator (--executor sim --backend lowering)",
            );
        }
    }
    let numerics = match &a.numerics {
        Some(spec) => match parse_numerics(Some(spec)) {
            Ok(n) => Some(n),
            Err(code) => return code,
        },
        None => None,
    };
    if a.jobs == Some(0) {
        return bad_input("--jobs 0: need at least 1 job");
    }
    if let Some(j) = a.jobs
        && j > max_jobs()
    {
        return bad_input(format!(
            "--jobs {j}: at most {} on this machine (4 per core)",
            max_jobs()
        ));
    }
    let index = match load_index(a.golden) {
        Ok(i) => i,
        Err(code) => return code,
    };
    let json_path = a.json.clone().or_else(|| a.resume.clone());
    // What the run reads, which no output may name; `--resume FILE` alone is the run's one
    // reader-writer (FILE is its output), while `--resume R --json J` only reads R.
    let mut inputs = Inputs::new();
    inputs.add_golden(&index);
    let default_expectations =
        (a.backend == "lowering").then(|| trnconf::expect::default_path_for(&a.executor, &a.mode));
    if let Some(e) = a.expectations.as_ref().or(default_expectations.as_ref()) {
        inputs.add("the expectations file", e);
    }
    if let Some(r) = a.resume.as_ref().filter(|r| a.json.as_ref().is_some_and(|j| j != *r)) {
        inputs.add("the --resume file", r);
        inputs.add("the --resume file", &results::partial_path(r));
    }
    // The progressive sidecar FILE.partial.jsonl sits beside a regular (or new) FILE only: a
    // FIFO or device (`--json /dev/stdout`) gets the final results and no sidecar.
    let partial_path = json_path
        .as_ref()
        .filter(|p| std::fs::metadata(p).map_or(true, |m| m.is_file()))
        .map(|p| results::partial_path(p));
    let json_flag = if a.json.is_some() { "--json" } else { "--resume" };
    let mut outputs: Vec<(&str, &Path)> = Vec::new();
    if let Some(j) = &json_path {
        outputs.push((json_flag, j.as_path()));
    }
    if let Some(p) = &partial_path {
        outputs.push(("(the partial results file of --json)", p.as_path()));
    }
    if let Some(p) = &a.junit {
        outputs.push(("--junit", p));
    }
    if let Some(p) = &a.html {
        outputs.push(("--html", p));
    }
    if let Err(code) = check_outputs(&inputs, &outputs) {
        return code;
    }
    let mut entries = selected(&index, &a.filter);
    if let Some(f) = &a.filter
        && entries.is_empty()
    {
        return bad_input(format!(
            "--filter `{f}` matches no case of {}",
            index.dir.join("index.json").display()
        ));
    }
    if let Some(s) = a.shard {
        entries = entries
            .into_iter()
            .enumerate()
            .filter(|(p, _)| p % s.count == s.index - 1)
            .map(|(_, e)| e)
            .collect();
    }
    // Nothing to run is never a success.
    if entries.is_empty() {
        return bad_input(format!(
            "no cases to run: {} lists {} case(s){}",
            index.dir.join("index.json").display(),
            index.cases.len(),
            a.shard
                .map(|s| format!(", none in shard {}/{}", s.index, s.count))
                .unwrap_or_default()
        ));
    }
    let golden_hash = match golden_hash(&index, &entries) {
        Ok(h) => h,
        Err(e) => return bad_input(e),
    };
    let exec_args = ExecutorArgs {
        executor: a.executor.clone(),
        mode: a.mode.clone(),
        timeout: a.timeout,
        hello_timeout: a.hello_timeout,
        numerics,
        target: a.target,
        artifacts: a.artifacts.clone(),
        native_int64: a.native_int64,
    };
    // Expectations are per backend: our lowering's list for the lowering, PyTorch's for the
    // process torch mode, and an NKI module's own list (beside it) or none for its kernels.
    let (executor, expectations_path) = if a.backend == "lowering" {
        match make_executor(&exec_args) {
            Ok(e) => (
                e,
                Some(
                    a.expectations
                        .clone()
                        .unwrap_or_else(|| trnconf::expect::default_path_for(&a.executor, &a.mode)),
                ),
            ),
            Err(code) => return code,
        }
    } else if let Some(module) = NkiModuleBackend::parse_spec(&a.backend) {
        match make_nki_backend(module, &exec_args) {
            Ok((b, own)) => (b, a.expectations.clone().or(own)),
            Err(code) => return code,
        }
    } else {
        return bad_input(format!(
            "--backend `{}`: expected `lowering` or `nki:MODULE`",
            a.backend
        ));
    };
    // An NKI module's own expectations file is found only now.
    if let Some(p) = &expectations_path {
        inputs.add("the expectations file", p);
        if let Err(code) = check_outputs(&inputs, &outputs) {
            return code;
        }
    }
    let expectations = match &expectations_path {
        Some(p) => match Expectations::load(p) {
            Ok(e) => e,
            Err(e) => return bad_input(e),
        },
        None => Expectations::none(),
    };
    let expectations_hash = match &expectations_path {
        Some(p) => match std::fs::read(p) {
            Ok(bytes) => results::content_hash([bytes.as_slice()]),
            Err(e) => return bad_input(format!("{}: {e}", p.display())),
        },
        None => results::content_hash([&b""[..]]),
    };
    let expectations_name = expectations_path.as_ref().map_or_else(
        || "none (every case the backend provides must pass)".to_string(),
        |p| p.display().to_string(),
    );
    let executor = executor.as_ref();
    let info = RunInfo {
        executor: executor.backend_name(),
        target: a.target.name().to_string(),
        golden: index.dir.display().to_string(),
        filter: a.filter.clone(),
        shard: a.shard.map(|s| format!("{}/{}", s.index, s.count)),
        expectations: Some(expectations_name.clone()),
        golden_hash: Some(golden_hash),
        expectations_hash: Some(expectations_hash),
        numerics: (a.executor == "sim").then(|| trnconf::numerics::describe(&numerics.unwrap_or_default())),
    };
    // What a previous, interrupted run already did.
    let mut done = Loaded::default();
    if let Some(r) = &a.resume {
        done = match load_resume(r) {
            Ok(l) => l,
            Err(e) => return bad_input(e),
        };
        // Results count only if they were recorded under exactly this run's settings and inputs.
        let prev = done.info.clone().unwrap_or_default();
        if let Some(why) = prev.resume_mismatch(&info) {
            return bad_input(format!("{}: cannot resume: {why}; run afresh with --json", r.display()));
        }
        let wanted: std::collections::BTreeSet<&str> = entries.iter().map(|e| e.id.as_str()).collect();
        if let Some(stray) = done.cases.keys().find(|id| !wanted.contains(id.as_str())) {
            return bad_input(format!(
                "{}: cannot resume: it holds case {stray}, which this run does not select",
                r.display()
            ));
        }
        entries.retain(|e| !done.cases.contains_key(&e.id));
        eprintln!(
            "resuming: {} case(s) already done, {} to run",
            done.cases.len(),
            entries.len()
        );
    }
    // A fresh run: an older FILE (or its partial file) must never be mistaken for this run's.
    if a.resume.is_none()
        && let Some(p) = &json_path
    {
        // Only a regular file is removed: a symlink, FIFO or device is written through at the end.
        for old in [Some(p.clone()), partial_path.clone()].into_iter().flatten() {
            if std::fs::symlink_metadata(&old).is_ok_and(|m| m.is_file())
                && let Err(e) = std::fs::remove_file(&old)
            {
                return bad_input(format!("{}: cannot remove the previous results: {e}", old.display()));
            }
        }
    }
    let partial = match &partial_path {
        Some(p) => match PartialWriter::create(p, &info, &done) {
            Ok(w) => Some(w),
            Err(e) => return bad_input(e),
        },
        None => None,
    };

    // No more threads than cases.
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .min(entries.len())
        .max(1);
    // Printed once the input is known good (bad input gets exactly one line).
    eprintln!("golden: {}", index.dir.display());
    eprintln!("expectations: {expectations_name}");
    if let Some(n) = &info.numerics {
        eprintln!("numerics: {n}");
    }
    let progress = Progress::new(entries.len());
    let write_error: Mutex<Option<String>> = Mutex::new(None);
    let on_result = |r: &CaseResult| {
        progress.tick(r.status.is_ok());
        if let Some(w) = &partial {
            let v = serde_json::to_value(r).expect("results serialize");
            if let Err(e) = w.append(&v) {
                write_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
            }
        }
    };
    let fresh = runner::run_cases_streaming(&index.dir, &entries, &expectations, executor, jobs, &on_result);
    progress.finish();
    if let Some(e) = write_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        eprintln!("warning: could not append to the partial results file: {e}");
    }

    // Everything, sorted by id.
    let mut all = done;
    for r in &fresh {
        let v = serde_json::to_value(r).expect("results serialize");
        let rec: CaseRecord = serde_json::from_value(v.clone()).expect("own results read back");
        all.cases.insert(r.id.clone(), (v, rec));
    }
    let records: Vec<&CaseRecord> = all.records().collect();
    let summary = report::summarize(records.iter().copied());

    for r in &records {
        if a.verbose || !r.status.is_ok() {
            println!("{:<6} {}  {}", r.status.name().to_uppercase(), r.id, r.headline());
            // Where it went wrong: the first element that does not match, per output.
            for m in &r.metrics {
                if let Some(fm) = &m.first_mismatch {
                    println!(
                        "       {}: first mismatch at {:?}: actual {}, expected {}{}",
                        m.name,
                        fm.index,
                        fm.actual,
                        fm.expected,
                        fm.ulp.map(|u| format!(" ({u} ULP)")).unwrap_or_default()
                    );
                }
            }
        }
    }
    if a.filter.is_none() && a.shard.is_none() {
        // Stale: an entry that covered no case of this run (entries match by what a case is).
        let described = records.iter().filter_map(|r| r.expectation.as_deref());
        for e in expectations.unused_in(a.target, a.native_int64, described) {
            println!("warning: expectations entry {} ({}) matches no case", e.entry, e.reason);
        }
    }
    println!();
    print!("{}", report::summary::render(&records, a.slowest));
    // nki mode: every backend next to trnsim (the three-way table of docs/hardware.md, E).
    let backends = report::diff::render_backends_of(records.iter().copied());
    if !backends.is_empty() {
        print!("\n{backends}");
    }
    let elapsed = start.elapsed();
    let peak = report::peak_rss_kib();
    let not_provided = if summary.not_provided > 0 {
        format!(", {} not provided", summary.not_provided)
    } else {
        String::new()
    };
    println!(
        "\n{} cases ({}, {} jobs): {} passed, {} accurate, {} failed, {} xfailed, {} xpassed, {} skipped, {} errors{not_provided}",
        summary.total,
        executor.backend_name(),
        jobs,
        summary.passed,
        summary.accurate,
        summary.failed,
        summary.xfailed,
        summary.xpassed,
        summary.skipped,
        summary.errors
    );
    println!(
        "wall time {:.2} s, peak memory {}",
        elapsed.as_secs_f64(),
        peak.map_or("unknown".to_string(), |k| format!(
            "{:.1} MiB (VmHWM)",
            k as f64 / 1024.0
        ))
    );

    let mut write_failed = false;
    let mut report_err = |e: String| {
        eprintln!("trnconf: {e}");
        write_failed = true;
    };
    if let Some(p) = &json_path {
        match results::write_final(p, &info, &all.cases, Some(elapsed.as_secs_f64()), peak) {
            Ok(()) => {
                if let Some(w) = &partial {
                    let _ = std::fs::remove_file(w.path());
                }
            }
            Err(e) => report_err(e),
        }
    }
    if let Some(p) = &a.junit {
        let xml = report::junit::render(&records, &timestamp());
        if let Err(e) = output::write_file(p, xml.as_bytes()) {
            report_err(e);
        }
    }
    if let Some(p) = &a.html {
        let page = report::html::render(&info, &records);
        if let Err(e) = output::write_file(p, page.as_bytes()) {
            report_err(e);
        }
    }
    if write_failed {
        return ExitCode::from(2);
    }
    // A run in which no case ran (every one skipped, or not provided by the backend) checked
    // nothing: never a success, whatever the expectations say.
    if summary.total > 0 && summary.skipped + summary.not_provided == summary.total {
        println!(
            "no case ran: all {} were skipped or not provided; nothing was checked",
            summary.total
        );
        return ExitCode::from(1);
    }
    if summary.ok() {
        ExitCode::SUCCESS
    } else {
        let mismatched = records.iter().filter(|r| !r.status.is_ok()).count();
        println!("{mismatched} case(s) did not match their expectation");
        ExitCode::from(1)
    }
}

/// ISO 8601 UTC, from the system clock (no date crate needed).
fn timestamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Progress: a bar on a terminal (stderr), else a plain line every 10% of the cases.
struct Progress {
    total: usize,
    done: AtomicUsize,
    unexpected: AtomicUsize,
    bar: Option<indicatif::ProgressBar>,
    start: Instant,
}

impl Progress {
    fn new(total: usize) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = indicatif::ProgressBar::new(total as u64);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:40.cyan/blue} {pos}/{len} cases, {msg} [{elapsed_precise}, ETA {eta}]",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b.set_message("0 unexpected");
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        Progress {
            total,
            done: AtomicUsize::new(0),
            unexpected: AtomicUsize::new(0),
            bar,
            start: Instant::now(),
        }
    }

    fn tick(&self, ok: bool) {
        let unexpected = self.unexpected.fetch_add(usize::from(!ok), Ordering::Relaxed) + usize::from(!ok);
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(b) = &self.bar {
            b.inc(1);
            if !ok {
                b.set_message(format!("{unexpected} unexpected"));
            }
            return;
        }
        let step = self.total.div_ceil(10).max(1);
        if done.is_multiple_of(step) || done == self.total {
            let secs = self.start.elapsed().as_secs_f64();
            let eta = if done > 0 {
                secs / done as f64 * (self.total - done) as f64
            } else {
                0.0
            };
            eprintln!(
                "[trnconf] {done}/{} cases ({}%), {unexpected} unexpected, {secs:.1}s elapsed, ETA {eta:.1}s",
                self.total,
                done * 100 / self.total.max(1)
            );
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

fn diff(a: &Path, b: &Path, html: Option<&Path>) -> ExitCode {
    let la = match results::load(a) {
        Ok(l) => l,
        Err(e) => return bad_input(e),
    };
    let lb = match results::load(b) {
        Ok(l) => l,
        Err(e) => return bad_input(e),
    };
    if let Some(h) = html {
        let mut inputs = Inputs::new();
        inputs.add("the results file", a);
        inputs.add("the results file", b);
        if let Err(code) = check_outputs(&inputs, &[("--html", h)]) {
            return code;
        }
    }
    // Runs under different settings are compared all the same; the settings are said first.
    let setting = |l: &Loaded| {
        l.info
            .as_ref()
            .and_then(|i| i.numerics.clone())
            .unwrap_or_else(|| "(not recorded)".into())
    };
    let (na, nb) = (setting(&la), setting(&lb));
    if na == nb {
        println!("numerics: {na}");
    } else {
        println!("numerics differ: {} has {na}, {} has {nb}", a.display(), b.display());
    }
    let (changes, unchanged) = report::diff::diff(&la, &lb);
    print!("{}", report::diff::render_text(&changes, unchanged));
    // A multi-backend run (nki mode) also gets its three-way table: sim vs simulate_kernel vs
    // hardware (or sim vs the stand-in).
    for (path, run) in [(a, &la), (b, &lb)] {
        let table = report::diff::render_backends(run);
        if !table.is_empty() {
            print!("\n{}:\n{table}", path.display());
        }
    }
    if let Some(h) = html {
        let page = report::diff::render_html(&a.display().to_string(), &b.display().to_string(), &changes, unchanged);
        if let Err(e) = output::write_file(h, page.as_bytes()) {
            return bad_input(e);
        }
    }
    // A regression fails the comparison (scripts and CI can gate on it).
    if changes.iter().any(|c| c.is_regression()) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs every case of the index on the simulator (trn1), quietly, for coverage.
fn run_all_quietly(index: &GoldenIndex) -> Result<Vec<CaseRecord>, ExitCode> {
    let expectations = Expectations::load(&trnconf::default_expectations_path()).map_err(bad_input)?;
    let entries: Vec<&IndexEntry> = index.cases.iter().collect();
    let executor = SimExecutor::new(TargetName::Trn1);
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let results = runner::run_cases_streaming(&index.dir, &entries, &expectations, &executor, jobs, &|_| {});
    Ok(results
        .iter()
        .map(|r| serde_json::from_value(serde_json::to_value(r).expect("serialize")).expect("read back"))
        .collect())
}

fn coverage_records(golden: Option<PathBuf>, results_file: Option<&Path>) -> Result<Vec<CaseRecord>, ExitCode> {
    match results_file {
        Some(p) => Ok(results::load(p).map_err(bad_input)?.records().cloned().collect()),
        None => run_all_quietly(&load_index(golden)?),
    }
}

fn list(
    golden: Option<PathBuf>,
    filter: Option<String>,
    ops: bool,
    coverage: bool,
    results_file: Option<&Path>,
) -> ExitCode {
    if coverage {
        let records = match coverage_records(golden, results_file) {
            Ok(r) => r,
            Err(code) => return code,
        };
        let records: Vec<CaseRecord> = records
            .into_iter()
            .filter(|r| filter.as_deref().is_none_or(|f| runner::filter_matches(f, &r.id)))
            .collect();
        print!(
            "{}",
            report::coverage::render_text(&report::coverage::compute(&records))
        );
        return ExitCode::SUCCESS;
    }
    let index = match load_index(golden) {
        Ok(i) => i,
        Err(code) => return code,
    };
    if ops {
        let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
        for c in selected(&index, &filter) {
            *counts.entry(c.op.as_str()).or_default() += 1;
        }
        for (op, n) in &counts {
            let lowered = if trnconf::lower::is_lowered(op) {
                "lowered"
            } else {
                "not lowered"
            };
            let family = trnconf::ops::family_of(op).unwrap_or("other");
            println!("{op:<34} {family:<13} {n:>4} cases  ({lowered})");
        }
        println!("\n{} ops, {} cases", counts.len(), counts.values().sum::<usize>());
        return ExitCode::SUCCESS;
    }
    let golden = index.dir.clone();
    for c in selected(&index, &filter) {
        let lowered = if trnconf::lower::is_lowered(&c.op) {
            "lowered"
        } else {
            "not lowered"
        };
        println!("{}  {}  ({lowered})", c.id, c.file);
    }
    // Files on disk that the index does not list are ignored by `run`; say so here.
    let listed: std::collections::BTreeSet<PathBuf> = index.cases.iter().map(|c| golden.join(&c.file)).collect();
    let mut unlisted = Vec::new();
    let mut stack = vec![golden.join("cases")];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "safetensors") && !listed.contains(&p) {
                unlisted.push(p);
            }
        }
    }
    unlisted.sort();
    for p in &unlisted {
        println!("warning: {} is not in index.json (ignored)", p.display());
    }
    ExitCode::SUCCESS
}

/// Finds a case by exact id and loads it.
fn find_case(golden: Option<PathBuf>, id: &str) -> Result<(GoldenIndex, usize, Case), ExitCode> {
    let index = load_index(golden)?;
    let Some(pos) = index.cases.iter().position(|c| c.id == id) else {
        let near: Vec<&str> = index
            .cases
            .iter()
            .filter(|c| c.id.contains(id))
            .take(3)
            .map(|c| c.id.as_str())
            .collect();
        let hint = if near.is_empty() {
            String::new()
        } else {
            format!(" (did you mean {}?)", near.join(", "))
        };
        return Err(bad_input(format!(
            "unknown case `{id}` in {}{hint}; `trnconf list` prints the case ids",
            index.dir.join("index.json").display()
        )));
    };
    let case = Case::load_entry(&index.dir, &index.cases[pos]).map_err(bad_input)?;
    Ok((index, pos, case))
}

fn fmt_value(v: &trnconf::case::Value) -> String {
    use trnconf::case::Value as V;
    match v {
        V::Tensor(t) => t.clone(),
        V::Tensors(ts) => format!(
            "[{}]",
            ts.iter()
                .map(|t| t.as_deref().unwrap_or("None"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        V::Int(i) => i.to_string(),
        V::Float(f) => trnconf::compare::py_repr(f.0),
        V::Bool(b) => if *b { "True" } else { "False" }.into(),
        V::Complex([re, im]) => format!("complex({}, {})", re.0, im.0),
        V::Ints(v) => format!("{v:?}"),
        V::Floats(v) => format!(
            "[{}]",
            v.iter()
                .map(|f| trnconf::compare::py_repr(f.0))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        V::Bools(v) => format!("{v:?}"),
        V::Dtype(d) => format!("torch.{d}"),
        V::Str(s) => format!("{s:?}"),
        V::Layout(s) | V::Device(s) | V::MemoryFormat(s) => s.clone(),
        V::None(()) => "None".into(),
    }
}

/// One instruction as text: engine, opcode, operands with access patterns, other fields.
fn fmt_instruction(i: usize, ins: &trnsim::Instruction) -> String {
    let operands = ins.op.operands();
    let mut parts: Vec<String> = operands.iter().map(|o| format!("{}={}", o.name, o.ap)).collect();
    // The non-operand fields (ALU ops, immediates, …) from the instruction's serde form.
    if let Ok(Value::Object(m)) = serde_json::to_value(&ins.op) {
        let inner = if m.len() == 1 {
            m.values().next().cloned()
        } else {
            Some(Value::Object(m))
        };
        if let Some(Value::Object(fields)) = inner {
            for (k, v) in fields {
                if !operands.iter().any(|o| o.name == k) && !v.is_null() {
                    // A scalar operand that is a tile was printed above; others are immediates.
                    if v.is_object() && operands.iter().any(|o| k.starts_with(o.name)) {
                        continue;
                    }
                    parts.push(format!("{k}={v}"));
                }
            }
        }
    }
    let wait = if ins.wait.is_empty() {
        String::new()
    } else {
        format!("  wait={:?}", ins.wait)
    };
    format!(
        "{i:>5}  {:<7} {:<22} {}{wait}",
        ins.engine.name(),
        ins.op.name(),
        parts.join(" ")
    )
}

fn show(id: &str, golden: Option<PathBuf>, target: TargetName, trace: Option<&Path>, numerics: Numerics) -> ExitCode {
    let (index, pos, case) = match find_case(golden, id) {
        Ok(x) => x,
        Err(code) => return code,
    };
    if let Some(t) = trace {
        let mut inputs = Inputs::new();
        inputs.add_golden(&index);
        inputs.add("the expectations file", &trnconf::default_expectations_path());
        if let Err(code) = check_outputs(&inputs, &[("--trace", t)]) {
            return code;
        }
    }
    println!("case     {}", case.id);
    println!("file     {}", case.file.display());
    if let Some(s) = &case.schema {
        println!("schema   {s}");
    }
    let mut args: Vec<String> = case.call.args.iter().map(fmt_value).collect();
    args.extend(case.call.kwargs.iter().map(|(k, v)| format!("{k}={}", fmt_value(v))));
    println!("call     torch.ops.aten.{}({})", case.op, args.join(", "));
    let outputs: std::collections::BTreeSet<&str> = case.outputs.iter().flat_map(|v| v.tensor_names()).collect();
    println!("inputs:");
    for (name, m) in case.tensor_meta.iter().filter(|(n, _)| !outputs.contains(n.as_str())) {
        println!("  {name:<12} {:<8} {:?}", m.dtype.to_string(), m.shape);
    }
    println!("outputs:");
    for (name, m) in case.tensor_meta.iter().filter(|(n, _)| outputs.contains(n.as_str())) {
        println!("  {name:<12} {:<8} {:?}", m.dtype.to_string(), m.shape);
    }
    match trnconf::lower::lower(&case, target) {
        Ok(lowered) => {
            let p = &lowered.program;
            println!("program  ({}, {} instructions)", target.name(), p.instructions.len());
            for d in &p.hbm {
                println!(
                    "  hbm {:<12} {:<7} {:<6} {:?}",
                    d.name,
                    format!("{:?}", d.role).to_lowercase(),
                    d.dtype.to_string(),
                    d.shape
                );
            }
            for (i, ins) in p.instructions.iter().enumerate() {
                println!("{}", fmt_instruction(i, ins));
            }
            let mut counts = std::collections::BTreeMap::new();
            for ins in &p.instructions {
                *counts.entry(ins.engine.name()).or_insert(0usize) += 1;
            }
            let c: Vec<String> = ["tensor", "vector", "scalar", "gpsimd", "dma"]
                .iter()
                .map(|e| format!("{e} {}", counts.get(e).copied().unwrap_or(0)))
                .collect();
            println!("per engine: {}", c.join(", "));
            if let Err(code) = show_timeline(&case, p, trace) {
                return code;
            }
        }
        Err(e) => println!("program  not available: {e}"),
    }
    let expectations = match Expectations::load(&trnconf::default_expectations_path()) {
        Ok(e) => e,
        Err(e) => return bad_input(e),
    };
    let config = ExecConfig {
        numerics,
        ..ExecConfig::default()
    };
    let executor = SimExecutor::with_config(target, config);
    println!("numerics {}", trnconf::numerics::describe(&numerics));
    let r = runner::run_case(&index.dir, &index.cases[pos], &expectations, &executor);
    let rec: CaseRecord = serde_json::from_value(serde_json::to_value(&r).expect("serialize")).expect("read back");
    println!("result   {} ({:.2} ms)", r.status, r.wall_ms);
    if let Some(e) = &r.expectation {
        println!("expected {e}");
    }
    for line in report::junit::details(&rec).lines().filter(|l| !l.is_empty()) {
        println!("  {line}");
    }
    if r.status.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn lower(id: &str, golden: Option<PathBuf>, target: TargetName, output: Option<&Path>, emit: Emit) -> ExitCode {
    let (index, _, case) = match find_case(golden, id) {
        Ok(x) => x,
        Err(code) => return code,
    };
    if let Some(o) = output {
        let mut inputs = Inputs::new();
        inputs.add_golden(&index);
        if let Err(code) = check_outputs(&inputs, &[("--output", o)]) {
            return code;
        }
    }
    let lowered = match trnconf::lower::lower(&case, target) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("trnconf: {id}: cannot lower: {e}");
            return ExitCode::from(1);
        }
    };
    let json = match emit {
        Emit::Json => lowered.program.to_json(),
        Emit::Nki | Emit::NkiCurrent => match trnconf::emit_nki::emit_dialect(
            &lowered.program,
            if matches!(emit, Emit::Nki) {
                trnconf::emit_nki::Dialect::Legacy
            } else {
                trnconf::emit_nki::Dialect::Current
            },
        ) {
            Ok(k) => k,
            Err(e) => {
                eprintln!("trnconf: {id}: cannot emit NKI: {e}");
                return ExitCode::from(1);
            }
        },
    };
    match output {
        Some(o) => {
            if let Err(e) = output::write_file(o, format!("{json}\n").as_bytes()) {
                return bad_input(e);
            }
            eprintln!("{}: {} instructions", o.display(), lowered.program.instructions.len());
        }
        None => println!("{json}"),
    }
    ExitCode::SUCCESS
}

/// The most `coverage --markdown FILE` reads back of an existing FILE (the committed page is
/// about 100 KiB).
const MAX_PAGE_BYTES: u64 = 16 << 20;

fn coverage(markdown: &Path, golden: Option<PathBuf>, results_file: Option<&Path>) -> ExitCode {
    let index = if results_file.is_none() {
        match load_index(golden.clone()) {
            Ok(i) => Some(i),
            Err(code) => return code,
        }
    } else {
        None
    };
    let mut inputs = Inputs::new();
    if let Some(i) = &index {
        inputs.add_golden(i);
        inputs.add("the expectations file", &trnconf::default_expectations_path());
    }
    if let Some(r) = results_file {
        inputs.add("the --results file", r);
    }
    if let Err(code) = check_outputs(&inputs, &[("--markdown", markdown)]) {
        return code;
    }
    // The page this command replaces is read back for the sections it keeps: only a regular file
    // of a page's size (a FIFO or device is not read; an endless one would never end).
    let old_page = match output::read_existing(markdown, MAX_PAGE_BYTES) {
        Ok(p) => p,
        Err(e) => return bad_input(e),
    };
    let torch = index.as_ref().and_then(|i| i.torch.clone());
    let records = match (&index, results_file) {
        (Some(i), _) => run_all_quietly(i),
        (None, r) => coverage_records(golden, r),
    };
    let records = match records {
        Ok(r) => r,
        Err(code) => return code,
    };
    let cov = report::coverage::compute(&records);
    let mut page = report::coverage::render_markdown(&cov, torch.as_deref());
    // The torch device's OpInfo comparison (docs/torch-device.md) writes its own marked section
    // into the same page from a run this command cannot redo (it needs torch): keep it.
    if let Some(old) = &old_page {
        page.push_str(&report::coverage::kept_sections(old));
    }
    if let Err(e) = output::write_file(markdown, page.as_bytes()) {
        return bad_input(e);
    }
    let (with_cases, passing, cells, pass_cells) = report::coverage::totals(&cov);
    println!(
        "{}: {with_cases} ops with cases, {passing} passing on some dtype, {pass_cells}/{cells} op×dtype passing",
        markdown.display()
    );
    ExitCode::SUCCESS
}

/// `trnconf perf`: the roofline table per op family, the least efficient cases, and any case
/// whose estimate beat its bound.
fn perf(
    golden: Option<PathBuf>,
    results_file: Option<&Path>,
    filter: Option<String>,
    all: bool,
    markdown: bool,
    worst: usize,
) -> ExitCode {
    let records = match coverage_records(golden, results_file) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let pattern = filter.unwrap_or_else(|| "::stress_".into());
    let records: Vec<&CaseRecord> = records
        .iter()
        .filter(|r| all || runner::filter_matches(&pattern, &r.id))
        .collect();
    let rows = trnconf::report::roofline::family_table(records.iter().copied());
    print!("{}", trnconf::report::roofline::render_table(&rows, markdown));
    let mut by_eff: Vec<&&CaseRecord> = records.iter().filter(|r| r.efficiency.is_some()).collect();
    by_eff.sort_by(|a, b| {
        a.efficiency
            .unwrap_or(0.0)
            .total_cmp(&b.efficiency.unwrap_or(0.0))
            .then_with(|| a.id.cmp(&b.id))
    });
    if worst > 0 && !by_eff.is_empty() {
        println!("\nleast efficient cases (efficiency, est / bound µs, bound set by):");
        for r in by_eff.iter().take(worst) {
            println!(
                "  {:>6.1} %  {:>9.1} / {:>7.1}  {:<8} {}",
                100.0 * r.efficiency.unwrap_or(0.0),
                r.est_us.unwrap_or(0.0),
                r.bound_us.unwrap_or(0.0),
                r.limiter.map_or("-", |l| l.name()),
                r.id
            );
        }
    }
    let bugs: Vec<&&CaseRecord> = records
        .iter()
        .filter(|r| trnconf::roofline::violation(r.bound_us, r.est_us).is_some())
        .collect();
    println!(
        "\n{} cases, {} with an efficiency{}",
        records.len(),
        by_eff.len(),
        if all {
            ""
        } else {
            " (stress cases; --all for every case)"
        }
    );
    if bugs.is_empty() {
        return ExitCode::SUCCESS;
    }
    for r in &bugs {
        eprintln!("{}: {}", r.id, r.headline());
    }
    eprintln!(
        "{} cases have an estimate below their roofline bound (cost-model bug)",
        bugs.len()
    );
    ExitCode::from(1)
}

fn sync_expectations(path: Option<PathBuf>, check: bool) -> ExitCode {
    let path = path.unwrap_or_else(trnconf::default_expectations_path);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => return bad_input(format!("{}: {e}", path.display())),
    };
    let Some(synced) = trnconf::expect::sync_not_lowered(&text, trnconf::lower::is_lowered) else {
        return bad_input(format!(
            "{}: no `{}` … `{}` block",
            path.display(),
            trnconf::expect::NOT_LOWERED_BEGIN,
            trnconf::expect::NOT_LOWERED_END
        ));
    };
    if let Err(e) = Expectations::parse(&synced, &path) {
        return bad_input(e);
    }
    if synced == text {
        println!("{}: up to date", path.display());
        return ExitCode::SUCCESS;
    }
    if check {
        println!(
            "{}: the not-lowered block is out of date; run `trnconf sync-expectations`",
            path.display()
        );
        return ExitCode::from(1);
    }
    // The expectations file is this command's one reader-writer: replaced atomically.
    if let Err(e) = output::write_file(&path, synced.as_bytes()) {
        return bad_input(e);
    }
    println!("{}: not-lowered block rewritten", path.display());
    ExitCode::SUCCESS
}

/// Runs the lowered program on the case's inputs and prints its timeline (docs/timeline.md);
/// writes the trace file when asked.
fn show_timeline(case: &trnconf::case::Case, p: &trnsim::Program, trace: Option<&Path>) -> Result<(), ExitCode> {
    let run = trnconf::runner::device_inputs(case, p).and_then(|inputs| {
        trnsim::Executor::new(p.target)
            .run(p, &inputs)
            .map_err(|e| e.to_string())
    });
    match run {
        Ok(run) => {
            println!("timeline:");
            for line in run.stats.timeline.summary(p, 8).lines() {
                println!("  {line}");
            }
            if let Some(f) = trace {
                let t = trnsim::trace::chrome_trace(p, &run.stats.timeline);
                let text = serde_json::to_string(&t).expect("traces serialize");
                if let Err(e) = output::write_file(f, text.as_bytes()) {
                    eprintln!("trnconf: {e}");
                    return Err(ExitCode::from(2));
                }
                println!("trace written to {}", f.display());
            }
        }
        Err(e) => {
            println!("timeline not available: {e}");
            if trace.is_some() {
                eprintln!("trnconf: no trace written: the program did not run");
                return Err(ExitCode::from(1));
            }
        }
    }
    Ok(())
}
