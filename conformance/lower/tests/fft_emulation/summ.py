# ruff: noqa: E501, SIM115
import json
import sys

d = json.load(open(sys.argv[1]))
over = 0
for c in d["cases"]:
    for m in c["metrics"]:
        o = m.get("oracle")
        if not o:
            continue
        r = o["device_max_ulp"] / max(o["cpu_max_ulp"], 1e-30)
        flag = "  >2x" if r > 2 else ""
        over += r > 2
        print(
            f"{c['id']:32s} {c['status']:8s} dev {o['device_max_ulp']:9.1f} cpu {o['cpu_max_ulp']:9.1f} ratio {r:6.2f} mism {m['mismatches']} est {c['est_us']:.1f}us{flag}"
        )
print("over 2x:", over, d["summary"])
