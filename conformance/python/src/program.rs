//! `trnsim._native.Program` and `trnsim._native.run`: one program, run once on fresh memory.

use crate::convert::{self, WireTensor};
use crate::errors;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict};
use std::collections::{BTreeMap, HashMap};
use trnsim::{ExecConfig, Executor, Numerics};

/// A trnsim program (the serde JSON of `trnsim::Program`, docs/isa.md).
#[pyclass(module = "trnsim._native")]
pub struct Program {
    pub inner: trnsim::Program,
}

#[pymethods]
impl Program {
    /// Parses a program from its JSON text.
    #[staticmethod]
    fn from_json(text: &str) -> PyResult<Program> {
        trnsim::Program::from_json(text)
            .map(|inner| Program { inner })
            .map_err(|e| PyValueError::new_err(format!("not a trnsim program: {e}")))
    }

    /// Fills every instruction's `wait` list from the memory dependencies between instructions
    /// on different queues (`trnsim::infer_waits`, the analysis trnconf's lowering uses), so the
    /// race detector accepts a program written in program order.
    fn infer_waits(&mut self) {
        trnsim::infer_waits(&mut self.inner);
    }

    /// Puts every DMA that has no queue on one (`trnlower::spread_dmas`, the DMA half of the
    /// lowerings' scheduling): a large plain copy is first cut by rows into pieces of at least
    /// 32 KiB for several queues, then each goes to the next queue of its core, round robin in
    /// program order. Run `infer_waits` afterwards. Values do not change; the timeline does.
    fn spread_dmas(&mut self) {
        trnlower::spread_dmas(&mut self.inner);
    }

    /// The program as JSON text (pretty-printed, as trnconf writes it).
    fn to_json(&self) -> String {
        self.inner.to_json()
    }

    /// The target the program is for (`"trn1"`, `"trn2"` or `"trn3"`).
    #[getter]
    fn target(&self) -> &'static str {
        self.inner.target.name()
    }

    /// The HBM declarations: a list of `(name, dtype name, shape, role)`.
    #[getter]
    fn hbm(&self) -> Vec<(String, String, Vec<usize>, &'static str)> {
        self.inner
            .hbm
            .iter()
            .map(|d| {
                let role = match d.role {
                    trnsim::HbmRole::Input => "input",
                    trnsim::HbmRole::Output => "output",
                    trnsim::HbmRole::Scratch => "scratch",
                };
                (d.name.clone(), convert::dtype_name(d.dtype), d.shape.clone(), role)
            })
            .collect()
    }

    fn __len__(&self) -> usize {
        self.inner.instructions.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "<trnsim.Program for {}: {} HBM tensors, {} instructions>",
            self.inner.target.name(),
            self.inner.hbm.len(),
            self.inner.instructions.len()
        )
    }
}

/// Builds an executor for `target` with numerics given as JSON (None: defaults).
pub fn executor(target: &str, numerics_json: Option<&str>) -> PyResult<Executor> {
    let config = ExecConfig {
        numerics: convert::numerics(numerics_json)?,
        ..ExecConfig::default()
    };
    Ok(Executor::with_config(convert::target(target)?, config))
}

/// Runs `program` on `inputs` (name → `(dtype, shape, bytes)`) on fresh simulated memory, on
/// `target` (default: the program's own target).
/// Returns `(outputs: name → (dtype, shape, bytearray), stats JSON)`; raises `trnsim.SimError`.
#[pyfunction]
#[pyo3(signature = (program, inputs, target = None, numerics_json = None))]
pub fn run<'py>(
    py: Python<'py>,
    program: &Program,
    inputs: HashMap<String, WireTensor<'py>>,
    target: Option<&str>,
    numerics_json: Option<&str>,
) -> PyResult<(Bound<'py, PyDict>, String)> {
    let executor = executor(target.unwrap_or(program.inner.target.name()), numerics_json)?;
    let mut host = BTreeMap::new();
    for (name, wire) in &inputs {
        host.insert(name.clone(), convert::host_tensor(name, wire)?);
    }
    let prog = &program.inner;
    let result = py
        .detach(|| executor.run(prog, &host))
        .map_err(|e| errors::to_py(py, &e))?;
    let outputs = PyDict::new(py);
    for (name, t) in &result.outputs {
        let wire: (String, Vec<usize>, Bound<'py, PyByteArray>) = convert::wire_out(py, t.dtype, &t.shape, &t.data);
        outputs.set_item(name, wire)?;
    }
    let stats = serde_json::to_string(&result.stats).expect("stats serialize");
    Ok((outputs, stats))
}

/// Every numerics setting with its default, as JSON.
#[pyfunction]
pub fn numerics_default_json() -> String {
    serde_json::to_string(&Numerics::default()).expect("numerics serialize")
}

/// The parameters of the simulated generation `name` (trnsim's `Target`, serde JSON): sizes,
/// limits, clocks and capability flags, so the Python front-ends read them from the simulator
/// instead of keeping a copy. Raises `ValueError` for a name the simulator does not model.
#[pyfunction]
pub fn target_params_json(name: &str) -> PyResult<String> {
    let t = convert::target(name)?.params();
    Ok(serde_json::to_string(&t).expect("target serialize"))
}

/// Validates numerics settings (JSON) and returns them complete (defaults filled in), as JSON.
#[pyfunction]
pub fn numerics_normalize_json(json: &str) -> PyResult<String> {
    let n = convert::numerics(Some(json))?;
    Ok(serde_json::to_string(&n).expect("numerics serialize"))
}
