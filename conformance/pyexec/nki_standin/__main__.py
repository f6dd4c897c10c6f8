"""python -m nki_standin KERNEL.py INPUTS.safetensors OUTPUTS.safetensors
python -m nki_standin --batch MANIFEST.jsonl

Runs the emitted kernel on the stand-in. The kernel module names the program tensors of its
parameters and results in `INPUT_NAMES` / `OUTPUT_NAMES`; inputs are read by those names and
outputs written under them (raw bits, dtype tags as safetensors', bf16 included).

Batch mode runs one job per manifest line, `{"id", "kernel", "inputs", "outputs"}`, in one
process, and prints one JSON line per job: `{"id", "status": "ok"|"error", "message"}`."""

import importlib.util
import json
import sys
import traceback

from . import install, safetensors_io
from .language import Tensor, hbm


def run_one(kernel_path, in_path, out_path):
    spec = importlib.util.spec_from_file_location("emitted_kernel", kernel_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    inputs = safetensors_io.load(in_path)
    args = []
    for name in mod.INPUT_NAMES:
        dt, shape, bits = inputs[name]
        args.append(Tensor(shape, dt, hbm, bits.copy()))
    result = mod.kernel(*args)
    outs = result if isinstance(result, tuple) else (() if result is None else (result,))
    if len(outs) != len(mod.OUTPUT_NAMES):
        raise RuntimeError(f"kernel returned {len(outs)} tensors, expected {len(mod.OUTPUT_NAMES)}")
    safetensors_io.save(out_path, {n: (t.dtype, t.shape, t.bits) for n, t in zip(mod.OUTPUT_NAMES, outs)})


def main(argv):
    install()
    if len(argv) == 2 and argv[0] == "--batch":
        with open(argv[1]) as f:
            jobs = [json.loads(line) for line in f if line.strip()]
        for job in jobs:
            try:
                run_one(job["kernel"], job["inputs"], job["outputs"])
                res = {"id": job["id"], "status": "ok", "message": ""}
            except Exception:  # noqa: BLE001  (reported per job)
                res = {"id": job["id"], "status": "error", "message": traceback.format_exc(limit=4)}
            print(json.dumps(res), flush=True)
        return 0
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    run_one(*argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
