"""Runs kernels emitted by trnconf's NKI emitter (conformance/src/emit_nki.rs) through the trnsim.nki
front-end: the kernel is traced into a trnsim Program and run on the Rust simulator, as any NKI
kernel would be (`nki.simulate_kernel`).

    python nki_frontend_run.py --batch MANIFEST.jsonl
    python nki_frontend_run.py --batch -          # the same lines, streamed on stdin

One job per manifest line: `{"id", "kernel", "inputs", "outputs", "dtypes"}`, and optionally
`"target"` (the NEURON_PLATFORM_TARGET_OVERRIDE the job runs under, so legacy trn1 kernels and
current-dialect trn2 kernels run in one process). `inputs` is a
safetensors file of the program inputs by program tensor name (device bits); `dtypes` gives each
input's trnsim dtype name (`bf16`, `fp8_e4m3`, …: the safetensors tag alone cannot tell fp8 e4m3
from e4m3fn). Outputs are written to `outputs` under the kernel's OUTPUT_NAMES. One JSON line per
job is printed: `{"id", "status": "ok"|"error", "message"}`. conformance/tests/emit_nki.rs compares
the outputs with the simulator's, bit for bit.
"""

import importlib.util
import json
import os
import sys
import traceback

import ml_dtypes
import numpy as np

_NP = {
    "f32": np.float32,
    "tf32": np.float32,
    "bf16": ml_dtypes.bfloat16,
    "f16": np.float16,
    "fp8_e4m3": ml_dtypes.float8_e4m3,
    "fp8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "u8": np.uint8,
    "u16": np.uint16,
    "u32": np.uint32,
    "bool": np.bool_,
}

_TAG = {
    "float32": "F32",
    "bfloat16": "BF16",
    "float16": "F16",
    "float8_e4m3": "F8_E4M3",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
    "int8": "I8",
    "int16": "I16",
    "int32": "I32",
    "uint8": "U8",
    "uint16": "U16",
    "uint32": "U32",
    "bool": "BOOL",
}


def read_safetensors(path):
    """name -> (shape, raw bytes)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, end = info["data_offsets"]
            f.seek(base + start)
            out[name] = (info["shape"], f.read(end - start))
    return out


def write_safetensors(path, tensors):
    """tensors: name -> numpy array (written as its raw bytes under its dtype's tag)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        if not a.flags["C_CONTIGUOUS"]:
            a = a.copy(order="C")  # (np.ascontiguousarray would make a 0-dim output 1-dim)
        data = a.tobytes()
        header[name] = {
            "dtype": _TAG[str(a.dtype)],
            "shape": list(a.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        f.writelines(blobs)


def run_one(job):
    from neuronxcc import nki

    if "target" in job:  # the generation this job's kernel runs on (legacy: trn1, current: trn2)
        os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = job["target"]
    spec = importlib.util.spec_from_file_location(f"emitted_{abs(hash(job['kernel']))}", job["kernel"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    raw = read_safetensors(job["inputs"])
    args = []
    for name in mod.INPUT_NAMES:
        shape, data = raw[name]
        args.append(np.frombuffer(data, _NP[job["dtypes"][name]]).reshape(shape).copy())
    if getattr(mod.kernel, "api", "legacy") == "current":
        # a current-dialect kernel (`import nki`): called as AWS's nki.jit kernels are
        result = mod.kernel(*args)
    else:
        result = nki.simulate_kernel(mod.kernel, *args)
    outs = result if isinstance(result, tuple) else (() if result is None else (result,))
    if len(outs) != len(mod.OUTPUT_NAMES):
        raise RuntimeError(f"the kernel returned {len(outs)} tensors, expected {len(mod.OUTPUT_NAMES)}")
    write_safetensors(job["outputs"], {n: np.asarray(o) for n, o in zip(mod.OUTPUT_NAMES, outs)})


def main(argv):
    if len(argv) != 2 or argv[0] != "--batch":
        print(__doc__, file=sys.stderr)
        return 2
    import trnsim.nki

    # The legacy namespace, and the current one's `nki.isa`: an emitted kernel that writes raw random
    # bits imports `nki.isa` for `rng`, which legacy NKI lacks (docs/nki.md, "Emitted kernels").
    trnsim.nki.install(current=True)
    proto = os.fdopen(os.dup(1), "w")  # job lines only; anything else printed goes to stderr
    os.dup2(2, 1)
    if argv[1] == "-":
        # jobs streamed on stdin, one per line, each run as it arrives (the emitter test writes
        # them while it is still lowering and simulating the next cases)
        jobs = (json.loads(line) for line in sys.stdin if line.strip())
    else:
        with open(argv[1]) as f:
            jobs = [json.loads(line) for line in f if line.strip()]
    for job in jobs:
        try:
            run_one(job)
            res = {"id": job["id"], "status": "ok", "message": ""}
        except Exception:  # noqa: BLE001  (reported per job)
            res = {"id": job["id"], "status": "error", "message": traceback.format_exc(limit=-3)[-3000:]}
        proto.write(json.dumps(res) + "\n")
        proto.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
