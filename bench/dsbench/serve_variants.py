"""The serving defaults' check (W5 variants, docs/benchmarks.md) from `tools/gpu-run.sh serve-variants`'
files: serve_variant_<variant>.json (the Azure code trace) and serve_variant_<shape>_<variant>.json (a
synthetic trace shape), each one serve run of slo_aware and tpot_first beside single, on one device.

For every shape, load and library mode it prints the two variants side by side and two checks:

- against the tuned run: the base run's goodput (median repetition) over the tuned run's; the check holds
  at 0.9 or more (within 10%, or better);
- against single, where single meets both SLOs: single meets when Wilson's 95% interval of its requests
  meeting both SLOs, over all repetitions, reaches the target (bench/common/verdict.c, the rule every
  benchmark judges by). The mode is below single when its own interval's upper end is under single's lower
  end (clearly below). The ratio of goodputs is printed beside, for reading, not for judging.

    python3 bench/dsbench serve-variants DIR [--base default] [--against tuned] [--target 0.99] [--check]
    python3 bench/dsbench serve-variants --torch DIR [--check]

--torch reads `tools/gpu-run.sh serve-torch-variants`' files instead: serve_torch.json (the variant
"default", bench/torch/serve_torch.py as shipped) and serve_torch_<variant>.json (e.g. "tuned", at the
first run's capacity and SLOs), and serve_torch_<shape>.json and serve_torch_<shape>_<variant>.json for a
synthetic trace shape (DS_SERVE_TORCH_SHAPE); each mode's cell is its repetitions' medians.

Prints Markdown (a table per shape, then the failed checks, if any); --check: exit 1 where a check fails.
"""
import argparse
import glob
import json
import os
import re
import sys

from . import verdict
from .make_trace import SHAPES

MODES = ("slo_aware", "tpot_first")
RATIO_MIN = 0.9
FILE = re.compile(r"^serve_variant_(?:(?P<shape>.+)_)?(?P<variant>[^_]+)\.json$")


def runs(folder):
    """{shape: {variant: serve JSON}}; the Azure code trace's shape is "code"."""
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "serve_variant_*.json"))):
        m = FILE.match(os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            out.setdefault(m["shape"] or "code", {})[m["variant"]] = json.load(f)
    return out


TORCH_FILE = re.compile(r"^serve_torch(?:_(?P<shape>%s))?(?:_(?P<variant>[A-Za-z0-9-]+))?\.json$"
                        % "|".join(re.escape(k) for k in SHAPES))


def torch_as_serve(doc):
    """A serve_torch JSON in serve's layout: per load its modes' repetitions, each figure the reps' median."""
    loads = sorted({float(k) for m in doc["results"].values() for k in m})
    out = []
    for load in loads:
        modes = {}
        for mode, per_load in doc["results"].items():
            r = per_load.get(str(load))
            if r is None:
                continue
            modes[mode] = {k: r[k]["median"] for k in ("ttft_slo_violation", "tpot_slo_violation", "goodput_rps")}
            modes[mode]["reps"] = r["reps"]
        out.append({"load": load, "modes": modes})
    cfg = doc["config"]
    return {"commit": doc.get("commit"), "slo": doc["slo"], "loads": out,
            "workload": {"trace": os.path.basename(str(doc.get("trace", "?"))),
                         "capacity_rps": doc["capacity_rps"]["median"], "repetitions": cfg["reps"],
                         "requests_per_run": cfg["requests"]}}


def torch_runs(folder):
    """{shape: {variant: serve_torch JSON in serve's layout}} from serve-torch-variants' files; the Azure
    code trace's shape is "code", a file without a variant is "default"."""
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "serve_torch*.json"))):
        m = TORCH_FILE.match(os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            out.setdefault(m["shape"] or "code", {})[m["variant"] or "default"] = torch_as_serve(json.load(f))
    return out


def met(run, load_index, mode):
    """(requests meeting both SLOs, requests) of one mode at one load, over all repetitions."""
    per = run["workload"]["requests_per_run"]
    reps = run["loads"][load_index]["modes"][mode]["reps"]
    n = [r.get("requests", per) for r in reps]
    return sum(round(r["slo_attainment"] * k) for r, k in zip(reps, n)), sum(n)


def cell(m):
    """TTFT> / TPOT> / goodput of a mode's median repetition."""
    return f"{m['ttft_slo_violation']:.0%} / {m['tpot_slo_violation']:.0%} / {m['goodput_rps']:.2f}"


def judge(shape, runs_of_shape, base, against, target):
    """(Markdown lines, failed checks) of one shape."""
    b, t = runs_of_shape[base], runs_of_shape[against]
    slo = b["slo"]
    lines = [f"### {shape}" + (f" ({b['workload']['trace']})" if shape != "code" else " (Azure code trace)"), "",
             f"SLOs TTFT {slo['ttft_ms']:.1f} ms, TPOT {slo['tpot_ms']:.2f} ms; capacity "
             f"{b['workload']['capacity_rps']:.2f} requests/s; {b['workload']['repetitions']} repetitions of "
             f"{b['workload']['requests_per_run']} requests; commit {b.get('commit', '?')}.", "",
             f"| load | mode | {base}: TTFT> / TPOT> / goodput | {against}: TTFT> / TPOT> / goodput | "
             f"{base} / {against} goodput | meets both SLOs ({base} run; 95% interval) | against single |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    failed = []
    against_loads = {l["load"]: l for l in t["loads"]}
    for i, load in enumerate(b["loads"]):
        if load["load"] not in against_loads:
            continue  # a load only the base run has (serve_torch's co-located load)
        for mode in ("single",) + MODES:
            mb, mt = load["modes"][mode], against_loads[load["load"]]["modes"][mode]
            within, total = met(b, i, mode)
            lo, hi = verdict.wilson(within, total)
            ratio = mb["goodput_rps"] / mt["goodput_rps"] if mt["goodput_rps"] else float("inf")
            ratio_txt = f"{ratio:.2f}"
            if mode == "single":
                lo_single = lo
                single_meets = hi >= target
                gp_single = mb["goodput_rps"]
                vs = "meets" if single_meets else "misses"
            else:
                if ratio < RATIO_MIN:
                    ratio_txt += " (fails)"
                    failed.append(f"{shape} {load['load']} {mode}: goodput {ratio:.2f}x the {against} run's")
                gp = f"goodput {mb['goodput_rps'] / gp_single:.2f}x" if gp_single else "single's goodput 0"
                if not single_meets:
                    vs = f"single misses; {gp}"
                elif hi < lo_single:
                    vs = f"clearly below ({gp})"
                    failed.append(f"{shape} {load['load']} {mode}: clearly below single, which meets both SLOs")
                else:
                    vs = f"not clearly below ({gp})"
            lines.append(f"| {load['load']} | {mode} | {cell(mb)} | {cell(mt)} | {ratio_txt} | "
                         f"{within}/{total} [{lo:.3f}, {hi:.3f}] | {vs} |")
    return lines + [""], failed


def main(argv):
    ap = argparse.ArgumentParser(prog="dsbench serve-variants", description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="the folder of serve_variant_*.json files (with --torch: serve_torch*.json)")
    ap.add_argument("--torch", action="store_true", help="serve_torch.json against serve_torch_tuned.json")
    ap.add_argument("--base", default="default", help="the variant judged (default: default)")
    ap.add_argument("--against", default="tuned", help="the variant it is held against (default: tuned)")
    ap.add_argument("--target", type=float, default=0.99, help="the share of requests meeting both SLOs (0.99)")
    ap.add_argument("--check", action="store_true", help="exit 1 where a check fails")
    a = ap.parse_args(argv)
    by_shape = torch_runs(a.folder) if a.torch else runs(a.folder)
    shapes = [s for s, v in by_shape.items() if a.base in v and a.against in v]
    if not shapes:
        want = ("serve_torch.json and serve_torch_tuned.json" if a.torch else
                f"serve_variant_*{a.base}.json and *{a.against}.json")
        print(f"serve-variants: no shape in {a.folder} has both {want}", file=sys.stderr)
        return 1
    failed = []
    for shape in sorted(shapes, key=lambda s: (s != "code", s)):
        lines, f = judge(shape, by_shape[shape], a.base, a.against, a.target)
        print("\n".join(lines))
        failed += f
    print("Checks: " + ("all hold." if not failed else "; ".join(failed) + "."))
    return 1 if failed and a.check else 0
