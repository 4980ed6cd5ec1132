#!/usr/bin/env python3
"""Runs a benchmark twice with the same arguments and checks that its JSON
results are equal, field by field.

    repeat_check.py OUT -- COMMAND ARGS...

COMMAND must write its JSON to OUT (pass it as its --out). Both runs get the
very same command line, so only fields that are per run by nature may differ;
they are listed in PER_RUN and nothing else is ignored. Exit 0 when equal, 1
with each differing field's path and both values, 2 on bad use or a failed run.
"""
import json
import math
import shutil
import subprocess
import sys

# Fields that differ between two runs of one build by nature: the wall-clock
# date the result was written.
PER_RUN = {"date"}


def diff(a, b, path, out):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            p = f"{path}.{k}" if path else k
            if k in PER_RUN and not isinstance(a.get(k, b.get(k)), (dict, list)):
                continue
            if k not in a or k not in b:
                out.append(f"{p}: only in run {'2' if k not in a else '1'}")
            else:
                diff(a[k], b[k], p, out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} entries vs {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", out)
    elif isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return
    elif a != b or type(a) is not type(b):
        out.append(f"{path}: {a!r} vs {b!r}")


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    out, cmd = argv[1], argv[3:]
    results = []
    for run in (1, 2):
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            print(f"run {run} exited {r.returncode}:\n{r.stderr}", file=sys.stderr)
            return 2
        shutil.copyfile(out, f"{out}.run{run}")
        with open(out) as f:
            results.append(json.load(f, parse_constant=lambda c: float(c)))
    found = []
    diff(results[0], results[1], "", found)
    if found:
        print(f"{len(found)} fields differ between two runs of: {' '.join(cmd)}")
        for line in found[:50]:
            print("  " + line)
        return 1
    print(f"two runs equal (ignoring {', '.join(sorted(PER_RUN))}): {' '.join(cmd)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
