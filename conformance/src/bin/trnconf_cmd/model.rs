//! `trnconf model run DIR`: a captured model (docs/model-format.md) node by node on the simulator
//! (docs/models.md). Kept apart from trnconf.rs's case-suite commands.

use clap::Subcommand;
use std::io::IsTerminal;
use std::path::PathBuf;
use trnconf::executor::SimExecutor;
use trnconf::model::{self, Model};
use trnconf::report::model as report;
use trnconf::report::output::{self, Inputs};
use trnsim::TargetName;

#[derive(Subcommand)]
pub enum ModelCommand {
    /// Run a captured model (a directory with graph.json and tensors.safetensors) node by node:
    /// per-node verdicts on reference inputs, the drift of the chained run, end-to-end error and
    /// the call forms that are not supported. Exit 0 when every node passes.
    Run {
        /// The model directory (golden/models/<name>, or one written by capture.py).
        dir: PathBuf,
        /// Write the results as JSON.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Write a self-contained HTML report (with the error-along-depth plot).
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// Write JUnit XML (one test case per node).
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// Print the per-node table.
        #[arg(long, short = 'v')]
        verbose: bool,
    },
}

pub fn run(cmd: ModelCommand) -> Result<i32, String> {
    match cmd {
        ModelCommand::Run {
            dir,
            json,
            html,
            junit,
            verbose,
        } => {
            let m = Model::load(&dir)?;
            // No report may name a file of the model (docs/workflow.md, "Output files").
            let mut inputs = Inputs::new();
            inputs.add_dir("a file of the model", &dir);
            let outputs: Vec<(&str, &std::path::Path)> = [("--json", &json), ("--html", &html), ("--junit", &junit)]
                .into_iter()
                .filter_map(|(f, p)| p.as_deref().map(|p| (f, p)))
                .collect();
            inputs.check_outputs(&outputs)?;
            let executor = SimExecutor::new(TargetName::Trn1);
            let bar = std::io::stderr().is_terminal().then(|| {
                let b = indicatif::ProgressBar::new(m.doc.nodes.len() as u64);
                b.set_style(
                    indicatif::ProgressStyle::with_template("{bar:40.cyan/blue} {pos}/{len} nodes [{elapsed_precise}]")
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                );
                b
            });
            let r = model::run_model(&m, &executor, &|done, _| {
                if let Some(b) = &bar {
                    b.set_position(done as u64);
                }
            });
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            if verbose {
                print!("{}", report::table(&r));
            }
            print!("{}", report::summary(&r));
            let write = |path: &PathBuf, text: String| output::write_file(path, text.as_bytes());
            if let Some(p) = &json {
                write(p, serde_json::to_string_pretty(&r).map_err(|e| e.to_string())? + "\n")?;
            }
            if let Some(p) = &html {
                write(p, report::html(&r))?;
            }
            if let Some(p) = &junit {
                write(p, report::junit(&r))?;
            }
            Ok(if r.passed { 0 } else { 1 })
        }
    }
}
