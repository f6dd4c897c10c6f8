//! `trnsim run PROGRAM.json [--inputs F.safetensors] [--outputs F.safetensors] [--trace FILE]
//! [--no-race-check]`: runs any program file on the simulator, prints the timeline summary and
//! critical path, and optionally writes a Chrome Trace Event / Perfetto trace (docs/timeline.md).
//!
//! Inputs come from a safetensors file (tensor names = the program's HBM input names); without
//! one every input is zero-filled, which is enough to check a program and profile it (timing
//! never depends on values). Exit status: 0 success, 1 the simulator rejected the program (a
//! typed error, e.g. a race), 2 bad usage or unreadable files.

use std::collections::BTreeMap;
use std::process::ExitCode;
use trnsim::{DType, ExecConfig, Executor, HbmRole, HostTensor, Program};

const USAGE: &str = "usage: trnsim run PROGRAM.json [--inputs F.safetensors] [--outputs F.safetensors] \
                     [--trace FILE] [--no-race-check]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("trnsim: {e}");
            ExitCode::from(2)
        }
    }
}

struct Opts {
    program: String,
    inputs: Option<String>,
    outputs: Option<String>,
    trace: Option<String>,
    race_check: bool,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        Some("run") => {}
        Some("-h" | "--help") | None => return Err(USAGE.into()),
        Some(other) => return Err(format!("unknown command `{other}`\n{USAGE}")),
    }
    let mut o = Opts {
        program: String::new(),
        inputs: None,
        outputs: None,
        trace: None,
        race_check: true,
    };
    while let Some(a) = it.next() {
        let mut value = |flag: &str| it.next().cloned().ok_or(format!("{flag} needs a file name"));
        match a.as_str() {
            "--inputs" => o.inputs = Some(value(a)?),
            "--outputs" => o.outputs = Some(value(a)?),
            "--trace" => o.trace = Some(value(a)?),
            "--no-race-check" => o.race_check = false,
            f if f.starts_with("--") => return Err(format!("unknown option `{f}`\n{USAGE}")),
            p if o.program.is_empty() => o.program = p.to_string(),
            extra => return Err(format!("unexpected argument `{extra}`\n{USAGE}")),
        }
    }
    if o.program.is_empty() {
        return Err(USAGE.into());
    }
    Ok(o)
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    let o = parse(args)?;
    let text = std::fs::read_to_string(&o.program).map_err(|e| format!("{}: {e}", o.program))?;
    let program = Program::from_json(&text).map_err(|e| format!("{}: not a program: {e}", o.program))?;
    let config = ExecConfig {
        race_check: o.race_check,
        ..ExecConfig::default()
    };
    let executor = Executor::with_config(program.target, config);
    // Declarations first: a huge declared input is refused before anything is allocated for it.
    if let Err(e) = executor.validate_declarations(&program) {
        eprintln!("trnsim: {}: {e}", o.program);
        return Ok(ExitCode::from(1));
    }
    let mut inputs = match &o.inputs {
        Some(f) => read_safetensors(f)?,
        None => BTreeMap::new(),
    };
    for d in program.hbm.iter().filter(|d| d.role == HbmRole::Input) {
        if o.inputs.is_none() {
            let n: usize = d.shape.iter().product();
            inputs.insert(
                d.name.clone(),
                HostTensor {
                    dtype: d.dtype,
                    shape: d.shape.clone(),
                    data: vec![0; n * d.dtype.size()],
                },
            );
        }
    }
    let run = match executor.run(&program, &inputs) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("trnsim: {}: {e}", o.program);
            return Ok(ExitCode::from(1));
        }
    };
    print!("{}", run.stats.timeline.summary(&program, 10));
    if let Some(f) = &o.trace {
        let trace = trnsim::trace::chrome_trace(&program, &run.stats.timeline);
        std::fs::write(f, serde_json::to_string(&trace).map_err(|e| e.to_string())?)
            .map_err(|e| format!("{f}: {e}"))?;
        println!("trace written to {f}");
    }
    if let Some(f) = &o.outputs {
        write_safetensors(f, &run.outputs)?;
        println!("outputs written to {f}");
    }
    Ok(ExitCode::SUCCESS)
}

/// safetensors dtype names ↔ device dtypes (the ones both know).
const DTYPES: [(&str, DType); 11] = [
    ("F32", DType::F32),
    ("BF16", DType::Bf16),
    ("F16", DType::F16),
    ("I32", DType::I32),
    ("U32", DType::U32),
    ("I16", DType::I16),
    ("U16", DType::U16),
    ("I8", DType::I8),
    ("U8", DType::U8),
    ("BOOL", DType::Bool),
    ("F8_E5M2", DType::Fp8E5m2),
];

fn dtype_of(name: &str) -> Option<DType> {
    if name == "F8_E4M3" {
        return Some(DType::Fp8E4m3fn);
    }
    DTYPES.iter().find(|(n, _)| *n == name).map(|(_, d)| *d)
}

fn name_of(d: DType) -> Option<&'static str> {
    if d == DType::Fp8E4m3fn {
        return Some("F8_E4M3");
    }
    DTYPES.iter().find(|(_, x)| *x == d).map(|(n, _)| *n)
}

/// Reads a safetensors file: an 8-byte little-endian header length, a JSON header
/// `{name: {dtype, shape, data_offsets}}`, then the data.
fn read_safetensors(path: &str) -> Result<BTreeMap<String, HostTensor>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let bad = |why: String| format!("{path}: not a safetensors file: {why}");
    let n = bytes
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as usize)
        .ok_or_else(|| bad("shorter than 8 bytes".into()))?;
    let header = bytes
        .get(8..8usize.saturating_add(n))
        .ok_or_else(|| bad("header runs past the end".into()))?;
    let data = &bytes[8 + n..];
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(header).map_err(|e| bad(e.to_string()))?;
    let mut out = BTreeMap::new();
    for (name, v) in header {
        if name == "__metadata__" {
            continue;
        }
        let dt = v["dtype"].as_str().unwrap_or("");
        let dtype = dtype_of(dt).ok_or_else(|| bad(format!("tensor `{name}` has dtype {dt:?}, not a device dtype")))?;
        // Every dimension must be a non-negative integer: one that is not is refused, never
        // dropped (which would read `[4, -1, 5]` as `[4, 5]`).
        let dims = v["shape"]
            .as_array()
            .ok_or_else(|| bad(format!("tensor `{name}` has no shape")))?;
        let shape: Vec<usize> = dims
            .iter()
            .map(|x| x.as_u64().and_then(|x| usize::try_from(x).ok()))
            .collect::<Option<_>>()
            .ok_or_else(|| {
                bad(format!(
                    "tensor `{name}` has shape {}: every dimension must be a non-negative integer",
                    v["shape"]
                ))
            })?;
        let off = v["data_offsets"]
            .as_array()
            .filter(|o| o.len() == 2)
            .ok_or_else(|| bad(format!("`{name}` has no data_offsets [begin, end]")))?;
        let offset = |x: &serde_json::Value| {
            x.as_u64().and_then(|x| usize::try_from(x).ok()).ok_or_else(|| {
                bad(format!(
                    "`{name}`'s data_offsets {} are not byte offsets",
                    v["data_offsets"]
                ))
            })
        };
        let (lo, hi) = (offset(&off[0])?, offset(&off[1])?);
        let slice = data
            .get(lo..hi)
            .ok_or_else(|| bad(format!("`{name}`'s data_offsets run past the end")))?;
        let want = shape
            .iter()
            .try_fold(dtype.size(), |n, &d| n.checked_mul(d))
            .ok_or_else(|| bad(format!("`{name}`: shape {shape:?} is too large")))?;
        if slice.len() != want {
            return Err(bad(format!("`{name}`: {} bytes for shape {shape:?}", slice.len())));
        }
        out.insert(
            name,
            HostTensor {
                dtype,
                shape,
                data: slice.to_vec(),
            },
        );
    }
    Ok(out)
}

fn write_safetensors(path: &str, tensors: &BTreeMap<String, HostTensor>) -> Result<(), String> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, t) in tensors {
        let dt = name_of(t.dtype).ok_or(format!("output `{name}` is {}, which safetensors cannot hold", t.dtype))?;
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": dt, "shape": t.shape, "data_offsets": [data.len(), data.len() + t.data.len()]}),
        );
        data.extend_from_slice(&t.data);
    }
    let mut h = serde_json::to_vec(&header).map_err(|e| e.to_string())?;
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    std::fs::write(path, out).map_err(|e| format!("{path}: {e}"))
}
