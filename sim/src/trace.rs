//! Chrome Trace Event / Perfetto JSON for a run's timeline: one track (thread) per engine and
//! DMA queue, each instruction a complete (`"ph": "X"`) slice carrying its operands. Open the file
//! in <https://ui.perfetto.dev> or `chrome://tracing`. Format reference: the "Trace Event Format"
//! document (Google), JSON object form with `traceEvents` and `displayTimeUnit`.

use crate::deps::{COMPUTE_QUEUES, queue_name};
use crate::program::Program;
use crate::timeline::Timeline;
use serde_json::{Value, json};

/// The trace of `program`'s run as a JSON value (timestamps in µs, as the format requires).
pub fn chrome_trace(program: &Program, timeline: &Timeline) -> Value {
    let mut events = vec![json!({
        "name": "process_name", "ph": "M", "pid": 0, "tid": 0,
        "args": {"name": format!("NeuronCore ({})", program.target.name())}
    })];
    let mut queues: Vec<u16> = timeline.spans.iter().map(|s| s.queue).collect();
    queues.sort_unstable();
    queues.dedup();
    for &q in &queues {
        events.push(json!({
            "name": "thread_name", "ph": "M", "pid": 0, "tid": q,
            "args": {"name": queue_name(q)}
        }));
        events.push(json!({
            "name": "thread_sort_index", "ph": "M", "pid": 0, "tid": q,
            "args": {"sort_index": q}
        }));
    }
    for (i, (inst, span)) in program.instructions.iter().zip(&timeline.spans).enumerate() {
        let operands: serde_json::Map<String, Value> = inst
            .op
            .operands()
            .into_iter()
            .map(|o| (o.name.to_string(), Value::String(o.ap.to_string())))
            .collect();
        let mut args = json!({
            "index": i,
            "engine": inst.engine.name(),
            "operands": operands,
            "wait": inst.wait,
        });
        if span.queue >= COMPUTE_QUEUES {
            args["queue"] = json!(span.queue - COMPUTE_QUEUES);
        }
        if let Some(loc) = &inst.loc {
            args["loc"] = json!(loc);
        }
        events.push(json!({
            "name": inst.op.name(),
            "cat": inst.engine.name(),
            "ph": "X",
            "pid": 0,
            "tid": span.queue,
            "ts": span.start_ns / 1000.0,
            "dur": (span.end_ns - span.start_ns) / 1000.0,
            "args": args,
        }));
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "makespan_ns": timeline.makespan_ns,
            "critical_path": timeline.critical_path,
        }
    })
}

/// Checks `trace` against the Trace Event Format's JSON object form: a `traceEvents` array of
/// events, each with a string `name`, a known `ph`, integer `pid`/`tid`; complete events (`X`)
/// with numeric `ts` ≥ 0 and `dur` ≥ 0; metadata events (`M`) naming a process or thread in
/// `args.name`. Returns what is wrong. Used by the tests of every writer of traces.
pub fn validate_chrome_trace(trace: &Value) -> Result<(), String> {
    let events = trace
        .get("traceEvents")
        .and_then(Value::as_array)
        .ok_or("no `traceEvents` array")?;
    if let Some(u) = trace.get("displayTimeUnit")
        && !matches!(u.as_str(), Some("ms" | "ns"))
    {
        return Err(format!("displayTimeUnit {u} is not \"ms\" or \"ns\""));
    }
    let mut named_threads = std::collections::HashSet::new();
    let mut slice_threads = std::collections::HashSet::new();
    for (k, e) in events.iter().enumerate() {
        let at = |what: &str| format!("event {k}: {what}: {e}");
        let name = e
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| at("no string `name`"))?;
        let ph = e
            .get("ph")
            .and_then(Value::as_str)
            .ok_or_else(|| at("no string `ph`"))?;
        let pid = e
            .get("pid")
            .and_then(Value::as_u64)
            .ok_or_else(|| at("no integer `pid`"))?;
        let tid = e
            .get("tid")
            .and_then(Value::as_u64)
            .ok_or_else(|| at("no integer `tid`"))?;
        match ph {
            "X" => {
                let ts = e
                    .get("ts")
                    .and_then(Value::as_f64)
                    .ok_or_else(|| at("no numeric `ts`"))?;
                let dur = e
                    .get("dur")
                    .and_then(Value::as_f64)
                    .ok_or_else(|| at("no numeric `dur`"))?;
                if !(ts >= 0.0 && dur >= 0.0 && ts.is_finite() && dur.is_finite()) {
                    return Err(at("`ts` and `dur` must be finite and ≥ 0"));
                }
                slice_threads.insert((pid, tid));
            }
            "M" => {
                if !matches!(
                    name,
                    "process_name" | "thread_name" | "process_sort_index" | "thread_sort_index"
                ) {
                    return Err(at("unknown metadata event"));
                }
                let args = e.get("args").ok_or_else(|| at("metadata without `args`"))?;
                if name.ends_with("_name") {
                    args.get("name")
                        .and_then(Value::as_str)
                        .ok_or_else(|| at("no `args.name`"))?;
                    if name == "thread_name" {
                        named_threads.insert((pid, tid));
                    }
                } else {
                    args.get("sort_index")
                        .and_then(Value::as_i64)
                        .ok_or_else(|| at("no integer `args.sort_index`"))?;
                }
            }
            "B" | "E" | "i" | "I" | "C" => {
                e.get("ts")
                    .and_then(Value::as_f64)
                    .ok_or_else(|| at("no numeric `ts`"))?;
            }
            other => return Err(at(&format!("unsupported phase {other:?}"))),
        }
    }
    if let Some(t) = slice_threads.difference(&named_threads).next() {
        return Err(format!("track pid {} tid {} has slices but no thread_name", t.0, t.1));
    }
    Ok(())
}
