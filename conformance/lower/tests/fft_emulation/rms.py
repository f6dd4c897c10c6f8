# ruff: noqa: E402, UP031
import glob
import json
import os
import sys

import numpy as np

sys.argv = [sys.argv[0]] + sys.argv[1:]
import emu
from safetensors import safe_open
from safetensors.numpy import load_file

for g in sys.argv[1:]:  # fresh golden directories (docs/numerics.md, "FFT accuracy")
    fam = {}
    for f in sorted(glob.glob(os.path.join(g, "cases", "_fft_*", "*.safetensors"))):
        t = load_file(f)
        if "oracle.0" not in t:
            continue
        with safe_open(f, "np") as h:
            meta = json.loads(h.metadata()["trnconf"])
        o = t["oracle.0"]
        den = np.sqrt((o**2).sum())
        if den == 0:
            continue
        cpu = np.sqrt(((t["output.0"] - o) ** 2).sum()) / den
        for nm in ["base", "ozaki_9x3_pairs"]:
            y = emu.emulate(meta, t["input.0"], emu.VARS[nm])
            e = np.sqrt(((y - o) ** 2).sum()) / den
            fam.setdefault((meta["op"], nm), []).append(e / cpu if cpu > 0 else np.nan)
    for k, v in sorted(fam.items()):
        v = np.array(v)
        v = v[np.isfinite(v)]
        print(g[-4:], k, "RMS ratio dev/cpu: median %.2f min %.2f max %.2f" % (np.median(v), v.min(), v.max()))
