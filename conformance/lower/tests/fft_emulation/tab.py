# ruff: noqa: SIM115
import sys

for line in open(sys.argv[1]):
    if "over 2x" in line:
        print(line.split("[")[0], end="\n")
        continue
    parts = line.split()
    print(parts[0][5:], parts[2], " ".join(p for p in parts[3:] if "(" in p))
