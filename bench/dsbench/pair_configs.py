"""Pairs every co-located configuration of colocate sweep files with one base
configuration, repetition by repetition (the two ran on the same arrivals in
the same run), and prints the median difference and how many pairs were worse
than the base: LS p50 and p99 (us), attainment (points), BE throughput; and,
per load (medians over its repetitions), LS's submit delay p50 and device part
p99 (us). Standard library only.

usage: python3 bench/dsbench pair-configs [--base static@96] FILE.json [FILE.json ...]

A configuration missing from a load of a file is skipped there; pairs from all
files given are pooled.
"""
import argparse
import json
import sys


def median(xs):
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2 if xs else float("nan")


# (label, figure with _reps, sign: +1 when higher is worse for LS, -1 when lower is)
REPS = [("p50 us", "ls_p50_us_reps", 1), ("p99 us", "ls_p99_us_reps", 1),
        ("attain pts", "ls_attainment_reps", -1), ("BE", "be_tput_norm_reps", -1)]
# per load: (label, figure, sign)
PARTS = [("submit p50 us", "ls_submit_delay_p50_us", 1), ("device p99 us", "ls_device_p99_us", 1)]


def rep_diffs(c, b):
    """Configuration c minus base b of one load: label -> differences, one per repetition for REPS
    (attainment in points), one per load for PARTS; a figure either lacks is left out."""
    out = {}
    for label, fig, _ in REPS:
        if fig in c and fig in b:
            scale = 100.0 if fig == "ls_attainment_reps" else 1.0
            out[label] = [scale * (x - y) for x, y in zip(c[fig], b[fig])]
    for label, fig, _ in PARTS:
        if c.get(fig) is not None and b.get(fig) is not None:
            out[label] = [c[fig] - b[fig]]
    return out


def pair(files, base):
    out = {}  # config -> label -> [differences]
    for path in files:
        with open(path) as f:
            d = json.load(f)
        for row in (d.get("sweep") or {}).values():
            b = row.get(base)
            if not b:
                continue
            for name, c in row.items():
                if name in (base, "ls_alone") or not isinstance(c, dict) or "be_tput_norm" not in c:
                    continue
                acc = out.setdefault(name, {})
                for label, xs in rep_diffs(c, b).items():
                    acc.setdefault(label, []).extend(xs)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="dsbench pair-configs", description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="static@96", help="configuration to pair with (default static@96)")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args(argv)
    try:
        res = pair(a.files, a.base)
    except (OSError, ValueError) as e:
        print(f"pair-configs: {e}", file=sys.stderr)
        return 1
    if not res:
        print(f"pair-configs: no load of these files has {a.base} and another co-located configuration",
              file=sys.stderr)
        return 1
    labels = [label for label, _, _ in REPS + PARTS]
    signs = {label: sign for label, _, sign in REPS + PARTS}
    print(f"minus {a.base}: median (worse / n)")
    print(f"{'config':20s}" + "".join(f"{label:>22s}" for label in labels))
    for name in sorted(res):
        cells = []
        for label in labels:
            xs = res[name].get(label, [])
            worse = sum(1 for x in xs if signs[label] * x > 0)
            cells.append(f"{median(xs):+10.2f} ({worse:3d}/{len(xs):3d})" if xs else f"{'-':>22s}")
        print(f"{name:20s}" + "".join(f"{c:>22s}" for c in cells))
    return 0

