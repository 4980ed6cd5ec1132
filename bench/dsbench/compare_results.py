"""Summarises tools/gpu-compare.sh's output folder: for each benchmark, the
median over repetitions of its headline figures in the baseline tree and in
this tree, and their ratio (new / base). Writes compare.json beside.

    python3 bench/dsbench compare-results DIR
"""
import glob
import json
import os
import statistics
import sys


def load(d, tree, bench):
    out = []
    for f in sorted(glob.glob(os.path.join(d, tree, bench + ".*.json"))):
        try:
            with open(f) as fh:
                out.append(json.load(fh))
        except (OSError, ValueError) as e:
            print(f"  skipped {f}: {e}")
    return out


def figures(bench, r):
    """name -> number for one result file."""
    f = {}
    if bench == "overhead":
        for k in ("launch_added_ns", "launch_ratio", "launch_added_ns_slo_aware", "launch_ratio_slo_aware",
                  "remap_us", "remap_gap_us_p50", "gate_us_host", "gate_us_rck", "sched_cpu_idle_pct"):
            if isinstance(r.get(k), (int, float)):
                f[k] = r[k]
    elif bench == "colocate":
        for name, c in r.get("configs", {}).items():
            for k in ("ls_p99_norm", "be_tput_norm", "ls_over_slo_frac"):
                if isinstance(c.get(k), (int, float)):
                    f[f"{name}.{k}"] = c[k]
    elif bench == "pairs":
        for pol, pairs in r.get("configs", {}).items():
            for pair, c in pairs.items():
                if isinstance(c, dict) and isinstance(c.get("sum_norm"), (int, float)):
                    f[f"{pol}.{pair}.sum_norm"] = c["sum_norm"]
    elif bench == "determinism":
        d = r.get("detshare", {})
        for k in ("bitwise_mismatch_trials", "trials", "remaps_not_honoured"):
            if isinstance(d.get(k), (int, float)):
                f["detshare." + k] = d[k]
    return f


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__)
        return 2
    d = argv[0]
    summary = {}
    for bench in ("overhead", "colocate", "pairs", "determinism"):
        base, new = load(d, "base", bench), load(d, "new", bench)
        if not base and not new:
            continue
        device = (new or base)[0].get("device", "?")
        print(f"== {bench} on {device}: {len(base)} baseline and {len(new)} new run(s); medians")
        names = sorted(set().union(*[figures(bench, r) for r in base + new]))
        rows = {}
        for n in names:
            b = [figures(bench, r)[n] for r in base if n in figures(bench, r)]
            w = [figures(bench, r)[n] for r in new if n in figures(bench, r)]
            mb = statistics.median(b) if b else None
            mw = statistics.median(w) if w else None
            ratio = mw / mb if mb not in (None, 0) and mw is not None else None
            rows[n] = {"base": b, "new": w, "base_median": mb, "new_median": mw, "ratio": ratio}
            fmt = lambda x: "-" if x is None else f"{x:.4g}"
            spread = lambda xs: f"[{fmt(min(xs))}..{fmt(max(xs))}]" if len(xs) > 1 else ""
            print(f"  {n:42s} base {fmt(mb):>9s} {spread(b):22s} new {fmt(mw):>9s} {spread(w):22s} "
                  f"new/base {fmt(ratio)}")
        summary[bench] = {"device": device, "figures": rows}
    with open(os.path.join(d, "compare.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    return 0

