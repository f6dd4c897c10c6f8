//! `trnsim._native.Session`: a device session (trnsim::Session) from Python. Tensors stay in
//! simulated HBM across program runs; only `put` and `get` cross the host boundary.

use crate::convert::{self, WireTensor};
use crate::errors;
use crate::program::{Program, executor};
use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::PyByteArray;
use std::collections::{BTreeMap, HashMap};

#[pyclass(module = "trnsim._native")]
pub struct Session {
    inner: trnsim::Session,
}

#[pymethods]
impl Session {
    #[new]
    #[pyo3(signature = (target = "trn2", numerics_json = None))]
    fn new(target: &str, numerics_json: Option<&str>) -> PyResult<Self> {
        Ok(Session {
            inner: trnsim::Session::new(executor(target, numerics_json)?),
        })
    }

    /// Copies a host tensor `(dtype, shape, bytes)` into the session as `name`.
    fn put(&mut self, py: Python<'_>, name: &str, tensor: WireTensor<'_>) -> PyResult<()> {
        let host = convert::host_tensor(name, &tensor)?;
        self.inner.put(name, host).map_err(|e| errors::to_py(py, &e))
    }

    /// Copies a session tensor to the host as `(dtype, shape, bytearray)`.
    fn get<'py>(&mut self, py: Python<'py>, name: &str) -> PyResult<(String, Vec<usize>, Bound<'py, PyByteArray>)> {
        let t = self
            .inner
            .get(name)
            .ok_or_else(|| PyKeyError::new_err(format!("no session tensor `{name}`")))?;
        Ok(convert::wire_out(py, t.dtype, &t.shape, &t.data))
    }

    /// `(dtype, shape)` of a session tensor, without transferring it.
    fn info(&self, name: &str) -> PyResult<(String, Vec<usize>)> {
        let t = self
            .inner
            .tensor(name)
            .ok_or_else(|| PyKeyError::new_err(format!("no session tensor `{name}`")))?;
        Ok((convert::dtype_name(t.dtype), t.shape.clone()))
    }

    /// Frees a session tensor; whether it existed.
    fn delete(&mut self, name: &str) -> bool {
        self.inner.delete(name)
    }

    /// The session's tensor names, sorted.
    fn names(&self) -> Vec<String> {
        self.inner.names().into_iter().map(str::to_string).collect()
    }

    /// Runs `program` on session tensors (`bind`: program tensor name → session tensor name).
    /// Returns the run's statistics as JSON; raises `trnsim.SimError`. With `spans=False` the
    /// timeline leaves out its per-instruction spans (makespan, queues and critical path stay):
    /// less to encode and parse for a caller that reads only the totals.
    #[pyo3(signature = (program, bind, spans = true))]
    fn run(
        &mut self,
        py: Python<'_>,
        program: &Program,
        bind: HashMap<String, String>,
        spans: bool,
    ) -> PyResult<String> {
        let bind: BTreeMap<String, String> = bind.into_iter().collect();
        let prog = &program.inner;
        let session = &mut self.inner;
        let mut stats = py
            .detach(|| session.run(prog, &bind))
            .map_err(|e| errors::to_py(py, &e))?;
        if !spans {
            stats.timeline.spans = Vec::new();
        }
        Ok(serde_json::to_string(&stats).expect("stats serialize"))
    }

    /// How many runs race-checked their program, and how many reused an earlier run's proof
    /// that the same program is race-free, as JSON (`{"checked": n, "reused": m}`).
    fn race_checks(&self) -> String {
        serde_json::to_string(self.inner.race_checks()).expect("race checks serialize")
    }

    /// Host transfer and run counters of the session, as JSON.
    fn transfers(&self) -> String {
        serde_json::to_string(self.inner.transfers()).expect("transfers serialize")
    }

    /// Bytes held by the session's tensors.
    fn device_bytes(&self) -> usize {
        self.inner.device_bytes()
    }
}
