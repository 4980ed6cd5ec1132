"""Writes the READMEs of docs/results/: in each device's folder (h100/, h200/:
headline.DEVICES) a README.md with the table of each benchmark whose JSON is
there (device, driver, commit, date and the command that made it), the other
files, the studies in its subfolders and its notes (`<device>/NOTES.md`,
hand-written commentary, appended); at the top, README.md, the index: which devices, what
each folder holds and how to regenerate a device's set. Standard library only.

usage: python3 bench/dsbench results-readme [--check] [RESULTS_DIR]

RESULTS_DIR defaults to the repository's docs/results. --check writes nothing
and exits 1 where a README differs from what the files give (the unit test
readme_results runs it through `headline --check`).
"""
import json
import os
import sys

# DEVICES: the device folders, in the front page's column order
from .headline import DEVICES, RESULTS


def fmt(v, nd=1):
    if isinstance(v, bool) or v is None:
        return "-" if v is None else str(v).lower()
    if isinstance(v, (int, float)):
        return f"{v:.{nd}f}"
    return str(v)


# Scripts that have moved since a result was made: its command is shown with
# the current path, and says so.
MOVED = {"examples/python/": "bench/torch/"}


def command(d):
    cmd = str(d.get("command"))
    for old, new in MOVED.items():
        if old in cmd:
            return f"`{cmd.replace(old, new)}` (run as {old}..., since moved to {new})"
    return f"`{cmd}`"


def header(d):
    sim = " (SIMULATED)" if d.get("simulated") else ""
    n = d.get("sms", d.get("sm_count"))
    sms = f"{n} SMs, " if n is not None else ""
    return (f"{d.get('device')}{sim}, driver {d.get('driver')}, {sms}"
            f"commit `{d.get('commit')}`, {d.get('date')}  \n{command(d)}")


def colocate(d, name):
    out = [f"## W1 colocate ({name})", "", header(d), "",
           f"LS load {fmt(d.get('ls_load'), 2)}, LS alone {fmt(d.get('ls_service_us'))} us per request, "
           f"SLO {fmt(d.get('ls_slo_us'), 0)} us, ls_sms {d.get('ls_sms_requested', '?')}.", "",
           "| config | policy | ls_p50_us | ls_p99_us | ls_p99_norm | be_steps_per_s | be_tput_norm |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for k, v in d.get("configs", {}).items():
        out.append(f"| {k} | {v.get('policy', '-')} | {fmt(v.get('ls_p50_us'))} | {fmt(v.get('ls_p99_us'))} | "
                   f"{fmt(v.get('ls_p99_norm'), 2)} | {fmt(v.get('be_steps_per_s'))} | "
                   f"{fmt(v.get('be_tput_norm'), 3)} |")
    return out


def overhead(d):
    rows = [("launch_ratio (manual)", "launch_ratio", 4), ("launch_added_ns (manual)", "launch_added_ns", 1),
            ("launch_ratio_slo_aware", "launch_ratio_slo_aware", 4),
            ("launch_added_ns_slo_aware", "launch_added_ns_slo_aware", 1),
            ("ds_launch_ns_p50", "ds_launch_ns_p50", 0), ("raw_launch_ns_p50", "raw_launch_ns_p50", 0),
            ("remap_us (host, p50)", "remap_us", 2), ("remap_us_p99", "remap_us_p99", 2),
            ("remap_gap_us_p50 (device)", "remap_gap_us_p50", 2), ("plain_gap_us_p50", "plain_gap_us_p50", 2),
            ("sched_cpu_idle_pct", "sched_cpu_idle_pct", 2),
            ("gate_us_host (p50)", "gate_us_host", 2), ("gate_us_host_p99", "gate_us_host_p99", 2),
            ("gate_us_rck (p50)", "gate_us_rck", 2), ("gate_us_rck_p99", "gate_us_rck_p99", 2),
            ("launch-to-flag us, no gate (p50)", "gate_ref_launch_to_flag_us", 2)]
    out = ["## W4 overhead (overhead.json)", "", header(d), "", "| figure | value |", "| --- | --- |"]
    for label, key, nd in rows:
        if key in d:
            out.append(f"| {label} | {fmt(d[key], nd)} |")
    return out


def determinism(d):
    out = ["## W3 determinism (determinism.json)", "", header(d), "",
           f"{d.get('trials')} co-located trials with remaps across every pCtx.", "",
           "| variant | bitwise_mismatch_trials | argmax_changed_trials |", "| --- | --- | --- |"]
    for k in ("detshare", "slicing"):
        v = d.get(k, {})
        out.append(f"| {k} | {v.get('bitwise_mismatch_trials')} | {v.get('argmax_changed_trials')} |")
    audit = d.get("cublas_audit") or []
    if audit:
        eq = sum(1 for r in audit if r.get("bitwise_equal"))
        tgt = [r for r in audit if r.get("sm_count_target")]
        tgt_eq = sum(1 for r in tgt if r.get("bitwise_equal"))
        out += ["", f"cuBLAS audit: {len(audit)} runs, {eq} bitwise equal to the default stream; "
                f"with cublasSetSmCountTarget set to the tier: {tgt_eq}/{len(tgt)} equal."]
    return out


def pairs_torch(d):
    pols = ["temporal", "shared", "static", "balance", "slo_aware"]
    out = ["## Training pairs on PyTorch models (pairs_torch.json, pairs_torch.png)", "", header(d), "",
           "Generator: bench/torch/pairs_torch.py. Sum of the two jobs' throughputs, each normalized to "
           "that job alone; every training step is one graph."
           + "".join(f" Then, commit `{p.get('commit')}`, {p.get('date')}: {command(p)}."
                     for p in (d.get("parts") or [])[1:]), "",
           "| pair | jobs | " + " | ".join(pols) + " | best / temporal |",
           "| --- | --- |" + " --- |" * (len(pols) + 1)]
    for key, pr in d.get("pairs", {}).items():
        cfg = pr.get("configs", {})
        out.append(f"| {key} ({pr.get('contention')}) | {pr.get('a')} + {pr.get('b')} | "
                   + " | ".join(fmt(cfg.get(p, {}).get("sum_norm"), 3) for p in pols)
                   + f" | {fmt(pr.get('best_over_temporal'), 2)} ({pr.get('best_policy')}) |")
    out += ["", "![pairs_torch](pairs_torch.png)"]
    return out


def colocate_torch(d):
    out = ["## Decoding beside training on PyTorch models (colocate_torch.json, colocate_torch.png)", "",
           header(d), "",
           f"Generator: bench/torch/colocate_torch.py. Medians over {d.get('reps')} repetitions "
           "(min-max in the file); TPOT normalized to LS alone, BE to BE alone.", "",
           "| pair | policy | TPOT p99 / alone | TPOT p50 / alone | BE / alone |", "| --- | --- | --- | --- | --- |"]
    for key, pr in d.get("pairs", {}).items():
        for pol, f in pr.get("summary", {}).items():
            if "tpot_p99_norm" not in f:
                continue
            out.append(f"| {key} | {pol} | {fmt(f['tpot_p99_norm'].get('median'), 2)} | "
                       f"{fmt(f['tpot_p50_norm'].get('median'), 2)} | {fmt(f['be_norm'].get('median'), 2)} |")
    out.append("")
    for key, pr in d.get("pairs", {}).items():
        cal = pr.get("slo_aware_calibration", {})
        out.append(f"- {key}: slo_aware on {cal.get('chosen_ls_sms')} LS SMs, dominated by "
                   f"{', '.join(pr.get('slo_aware_dominated_by') or []) or 'none'}; TPOT p99 within "
                   f"{d.get('p99_bound')}x alone: {str(pr.get('slo_aware_p99_within')).lower()}; logits bitwise "
                   f"identical on every pCtx: {str(pr.get('logits_bitwise_identical')).lower()}.")
    out += ["", "![colocate_torch](colocate_torch.png)"]
    return out


def torch_colocate(d):
    out = ["## PyTorch co-location, first version (torch_colocate.json)", "", header(d), "",
           "Written by the first colocate_torch.py (W1: a transformers Llama decoding eagerly beside ResNet-50 "
           "training, one window per policy); the example now runs the Table 2 pairs with graphs "
           "(colocate_torch.json above).", "",
           "| config | tpot_p50_ms | tpot_p99_ms | tpot_p99_norm | be_imgs_per_s | be_tput_norm |",
           "| --- | --- | --- | --- | --- | --- |"]
    for k, v in d.get("configs", {}).items():
        out.append(f"| {k} | {fmt(v.get('tpot_p50_ms'), 2)} | {fmt(v.get('tpot_p99_ms'), 2)} | "
                   f"{fmt(v.get('tpot_p99_norm'), 2)} | {fmt(v.get('be_imgs_per_s'), 0)} | "
                   f"{fmt(v.get('be_tput_norm'), 3)} |")
    dec = d.get("decodes")
    n = f"{dec.get('alone')} + {dec.get('colocated')}" if isinstance(dec, dict) else str(dec)
    out += ["", f"token_identical: **{str(d.get('token_identical')).lower()}** "
            f"({n} greedy decodes alone and co-located with remaps)."]
    return out


def stress(d):
    return ["## Stress on the GPU (stress.json)", "", header(d), "",
            f"{d.get('launches')} launches from {d.get('threads')} threads on {d.get('vctxs')} vCtxs with "
            f"remaps and policy switches in {fmt(d.get('wall_s'), 2)} s: **{d.get('errors')} errors** "
            f"(lost, duplicated or reordered work, API failures)."]


def pairs(d):
    cfg = d.get("configs", {})
    pair_names = sorted({p for v in cfg.values() for p in v})
    out = ["## W2 pairs (pairs.json, pairs.png)", "", header(d), "",
           "| policy | " + " | ".join(pair_names) + " |", "| --- |" + " --- |" * len(pair_names)]
    for pol, v in cfg.items():
        out.append(f"| {pol} | " + " | ".join(fmt(v.get(p, {}).get("sum_norm"), 3) for p in pair_names) + " |")
    best = d.get("best", {})
    out += ["", "Best over temporal: " + ", ".join(
        f"{p} {fmt(b.get('over_temporal'), 3)} ({b.get('policy')})" for p, b in best.items()) + ".",
        "", "![pairs](pairs.png)"]
    return out


def sweep(d, img="colocate.png"):
    sw = d.get("sweep", {})
    if any("ls_attainment" in c for v in sw.values() for c in v.values()):
        return sweep_ranged(d, img)
    pols = [p for p in ("static", "slo_aware", "slo_aware_nogates", "tpot_first", "shared", "priority", "temporal")
            if any(p in v for v in sw.values())]
    out = [f"## W1 load sweep (colocate_sweep.json, {img})", "", header(d), "",
           "ls_p99_norm / be_tput_norm per LS load:", "",
           "| load | " + " | ".join(pols) + " |", "| --- |" + " --- |" * len(pols)]
    for load, v in sw.items():
        out.append(f"| {load} | " + " | ".join(
            f"{fmt(v.get(p, {}).get('ls_p99_norm'), 2)} / {fmt(v.get(p, {}).get('be_tput_norm'), 3)}"
            for p in pols) + " |")
    out += ["", f"![trade-off]({img})"]
    return out


def settle_text(d):
    """The settle requests of a sweep: one count, or per load where a least time made them differ."""
    per = {k: p.get("settle_requests") for k, p in d.get("points", {}).items() if p.get("settle_requests")}
    if not per or len(set(per.values())) == 1:
        return str(next(iter(per.values()), d.get("settle_requests")))
    return ", ".join(f"{v} at {k}" for k, v in per.items())


def sweep_ranged(d, img):
    """The sweep with repetitions: medians, attainment, the verdict per load."""
    sw = d.get("sweep", {})
    cfgs = [c for c in next(iter(sw.values()), {}) if c != "ls_alone"]
    out = [f"## W1 load sweep (colocate_sweep.json, {img})", "", header(d), "",
           f"Medians over {d.get('reps')} repetitions of {d.get('requests_per_load')} requests per load after "
           f"{settle_text(d)} settle requests; SLO {d.get('ls_slo_us')} us, attainment target "
           f"{d.get('target')}. Cells: ls_p99_norm / be_tput_norm / ls_attainment %.", "",
           "| load | " + " | ".join(cfgs) + " | verdict |", "| --- |" + " --- |" * (len(cfgs) + 1)]
    for load, v in sw.items():
        vd = d.get("verdict", {}).get(load, {})
        out.append(f"| {load} | " + " | ".join(
            f"{fmt(v.get(c, {}).get('ls_p99_norm'), 2)} / {fmt(v.get(c, {}).get('be_tput_norm'), 3)} / "
            f"{fmt(100 * (v.get(c, {}).get('ls_attainment') or 0), 1)}" for c in cfgs) +
            f" | {verdict_cell(vd, v)} |")
    out += ["", f"![frontier]({img})"]
    return out


def apart(low, high):
    """low's range lies wholly below high's: (min, max) pairs."""
    return low is not None and high is not None and None not in (low + high) and low[1] < high[0]


def span(c, key):
    """(min, max) of a figure over the repetitions, or None."""
    return (c.get(key + "_min"), c.get(key + "_max")) if c and key + "_min" in c else None


def beyond_ranges(vd, row):
    """Whether a failed verdict holds with the repetitions' ranges apart (docs/benchmarks.md's rule for
    claims that one configuration beats another): slo_aware's attainment below that of a split meeting
    the target, or its BE plus the tolerance below the best split's, or dominance (ranges apart already).
    Where the verdict reads attainment intervals (attainment_interval in the file), a miss is one already:
    slo_aware's interval lies below the target while a split's lies above it."""
    if vd.get("slo_aware_dominated_by"):
        return True
    slo, best = row.get("slo_aware"), row.get(vd.get("best_baseline") or "")
    if not slo or not best:
        return False
    if "attainment_interval" in vd:
        misses = not vd.get("slo_aware_meets") and bool(vd.get("baselines_clearly_meeting"))
    else:
        misses = not vd.get("slo_aware_meets") and any(
            apart(span(slo, "ls_attainment"), span(row.get(b), "ls_attainment"))
            for b in vd.get("baselines_meeting", []))
    tol = vd.get("be_tolerance", 0.02)
    be = span(slo, "be_tput_norm")
    short = be is not None and apart((be[0] + tol, be[1] + tol), span(best, "be_tput_norm"))
    return misses or short


def verdict_cell(vd, row):
    """One load of a sweep's verdict: ok or not, and slo_aware's BE against the best split that meets; a
    failure says whether it holds beyond the repetitions' ranges."""
    if not vd:
        return "-"
    be = vd.get("slo_aware_be_minus_best")
    none = "no split clearly meets" if "attainment_interval" in vd else "no split meets"
    if not vd.get("slo_aware_meets"):
        why = "misses" if vd.get("best_baseline") else none
    else:
        why = none if be is None else f"BE {be:+.3f}"
    if vd.get("slo_aware_dominated_by"):
        why += ", dominated"
    if not vd.get("ok"):
        why += "; beyond ranges" if beyond_ranges(vd, row) else "; within ranges"
    if "ok_medians" in vd and vd["ok_medians"] != vd.get("ok"):
        why += f"; medians alone: {'ok' if vd['ok_medians'] else 'not ok'}"
    return f"{'ok' if vd.get('ok') else '**not ok**'} ({why})"


def serve_rightsize(d):
    c = d.get("colocated") or {}
    vd = c.get("verdict") or {}
    out = ["## W5 right-sizing beside the trainer (serve_rightsize.json)", "", header(d), "",
           f"Load {fmt(c.get('load'), 2)}, TPOT SLO {fmt((c.get('tpot_slo_us') or 0) / 1e3, 2)} ms; medians over "
           f"the repetitions.", "", "| mode | TPOT p99 ms | tpot_attainment | decode SMs | be_tput_norm |",
           "| --- | --- | --- | --- | --- |"]
    for m, v in c.get("modes", {}).items():
        out.append(f"| {m} | {fmt(v.get('tpot_p99_ms'), 2)} | {fmt(v.get('tpot_attainment'), 4)} | "
                   f"{fmt(v.get('decode_sms_mean'), 1)} | {fmt(v.get('be_tput_norm'), 3)} |")
    if vd:
        out += ["", f"Verdict (target {vd.get('target')}): best baseline {vd.get('best_baseline')} "
                f"(BE {fmt(vd.get('best_baseline_be'), 3)}); slo_aware meets: {vd.get('slo_aware_meets')}; "
                f"BE minus best {fmt(vd.get('slo_aware_be_minus_best'), 3)}; dominated by "
                f"{', '.join(vd.get('slo_aware_dominated_by') or []) or 'none'} -> {'ok' if vd.get('ok') else 'not ok'}."]
    out += ["", "![frontier](serve_rightsize_colocated_frontier.png)"]
    return out


def memory(d):
    keys = ["share_w1", "share_error", "ls_copy_p50_alone_us", "ls_copy_p50_loaded_us", "ls_copy_p99_alone_us",
            "ls_copy_p99_loaded_us", "ls_copy_p99_norm", "ls_copy_p99_vs_unscheduled_alone",
            "baseline_ls_copy_p99_alone_us",
            "baseline_ls_copy_p99_loaded_us", "baseline_ls_copy_p99_norm"]
    out = ["## Tenant memory: fair copies (memory.json)", "", header(d), "", "| figure | value |", "| --- | --- |"]
    out += [f"| {k} | {fmt(d.get(k), 3)} |" for k in keys if k in d]
    return out


def serve(d):
    slo = d.get("slo", {})
    wl = d.get("workload", {})
    out = ["## W5 serve (serve.json)", "", header(d), "",
           f"{d.get('model', {}).get('layers')} of 32 Llama-3-8B layers; capacity (load 1.0) "
           f"{fmt(wl.get('capacity_rps'), 2)} requests/s; SLOs TTFT {fmt(slo.get('ttft_ms'))} ms, "
           f"TPOT {fmt(slo.get('tpot_ms'), 2)} ms; {wl.get('requests_per_run')} requests x "
           f"{wl.get('repetitions')} repetitions per point (medians; ranges in the file). "
           "Plots: serve_*.png.", "",
           "| load | mode | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | TTFT viol | TPOT viol | "
           "goodput rps |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for ld in d.get("loads", []):
        for m, v in ld.get("modes", {}).items():
            out.append(f"| {fmt(ld.get('load'), 2)} | {m} | {fmt(v.get('ttft_p50_ms'))} | {fmt(v.get('ttft_p99_ms'))} | "
                       f"{fmt(v.get('tpot_p50_ms'), 2)} | {fmt(v.get('tpot_p99_ms'), 2)} | "
                       f"{fmt(v.get('ttft_slo_violation'), 3)} | {fmt(v.get('tpot_slo_violation'), 3)} | "
                       f"{fmt(v.get('goodput_rps'), 2)} |")
    cap = d.get("capacity_at_slo", {})
    if cap:
        out += ["", "Highest load meeting both SLOs on 90% of requests: " + ", ".join(
            f"{m} {'< ' if v.get('censored') and not v.get('load') else ''}"
            f"{fmt(v.get('load') or (d.get('loads') or [{}])[0].get('load'), 2)}"
            for m, v in cap.items() if isinstance(v, dict)) + "."]
    c = d.get("colocated")
    if c:
        out += ["", f"Beside W1's BE tenant at load {fmt(c.get('load'), 2)} (each mode over itself alone; BE over "
                f"BE alone, {fmt(c.get('be_alone_steps_per_s'))} steps/s):", "",
                "| mode | tpot_p99_norm | ttft_p99_norm | goodput_norm | be_tput_norm |", "| --- | --- | --- | --- | --- |"]
        for m, v in c.get("modes", {}).items():
            out.append(f"| {m} | {fmt(v.get('tpot_p99_norm'), 2)} | {fmt(v.get('ttft_p99_norm'), 2)} | "
                       f"{fmt(v.get('goodput_norm'), 2)} | {fmt(v.get('be_tput_norm'), 3)} |")
    return out


def serve_torch(d):
    slo, cfg, cap = d.get("slo", {}), d.get("config", {}), d.get("capacity_rps", {})
    params = cfg.get("params")
    out = ["## W5 in PyTorch (serve_torch.json)", "", header(d), "",
           f"Llama-architecture engine of {fmt(params / 1e9 if params else None, 2)} B parameters "
           f"(bench/torch/serve_torch.py), detshare.serving's PDMux; capacity (load 1.0) "
           f"{fmt(cap.get('median'), 2)} requests/s; SLOs TTFT {fmt(slo.get('ttft_ms'))} ms, TPOT "
           f"{fmt(slo.get('tpot_ms'), 2)} ms; {cfg.get('requests')} requests x {cfg.get('reps')} trace windows per "
           "point (medians; ranges in the file). Plots: serve_torch_*.png.", "",
           "| load | mode | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | TTFT viol | TPOT viol | "
           "attainment | goodput rps |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    med = (lambda v, k: (v.get(k) or {}).get("median"))
    for m, by in d.get("results", {}).items():
        for ld, v in by.items():
            out.append(f"| {ld} | {m} | {fmt(med(v, 'ttft_p50_ms'))} | {fmt(med(v, 'ttft_p99_ms'))} | "
                       f"{fmt(med(v, 'tpot_p50_ms'), 2)} | {fmt(med(v, 'tpot_p99_ms'), 2)} | "
                       f"{fmt(med(v, 'ttft_slo_violation'), 3)} | {fmt(med(v, 'tpot_slo_violation'), 3)} | "
                       f"{fmt(med(v, 'slo_attainment'), 3)} | {fmt(med(v, 'goodput_rps'), 2)} |")
    ca = d.get("capacity_at_slo", {}).get("load", {})
    if ca:
        out += ["", "Highest load meeting both SLOs on 90% of requests: " + ", ".join(
            f"{m} {fmt(v, 2) if v is not None else 'below the sweep'}" for m, v in ca.items()) + "."]
    c = d.get("colocated")
    if c:
        out += ["", f"Beside ResNet-50 training at load {fmt(c.get('load'), 2)} (each mode over itself alone; BE "
                f"over BE alone, {fmt(c.get('be_alone_steps_per_s'))} steps/s):", "",
                "| mode | tpot_p99_norm | ttft_p99_norm | be_tput_norm |", "| --- | --- | --- | --- |"]
        for m, v in c.get("modes", {}).items():
            out.append(f"| {m} | {fmt(med(v, 'tpot_p99_norm'), 2)} | {fmt(med(v, 'ttft_p99_norm'), 2)} | "
                       f"{fmt(med(v, 'be_tput_norm'), 3)} |")
    pb = d.get("host", {}).get("per_bucket", {})
    if pb:
        ratios = [v.get("host_over_gpu") for v in pb.values() if v.get("host_over_gpu") is not None]
        out += ["", f"Host time per decode step over its GPU time, per bucket: {fmt(min(ratios), 3)} to "
                f"{fmt(max(ratios), 3)}. Token identity: {fmt(d.get('token_identical'))} over "
                f"{len(d.get('token_identity', {}).get('cases', []))} cases."]
    return out


# The one command that regenerates a device's set on the GPU machine (then
# results-readme and headline here); tools/gpu-run.sh's header names it too.
REGENERATE = ("bash tools/gpu-run.sh --out docs/results/{dev} overhead colocate sweep pairs determinism memory "
              "stress serve")

# A device's hand-written commentary, appended to its README.
NOTES = "NOTES.md"

# What the files every full set has are, for the list of a folder's files.
WHAT = {
    "dsinfo.txt": "`dsinfo`: the pool on the GPU, each pCtx's SMs probed with `%smid`",
    "gpu-suite.txt": "suite `gpu` (`test_gpu --verbose`) with its measured figures",
    "gpu-run.log": "`tools/gpu-run.sh`'s log: build, suites, every bench's output",
    "devprobe.jsonl": "`tools/devprobe/run.sh`: the device probes behind docs/device-facts.md",
    NOTES: "hand-written commentary on these figures (appended below)",
    "serve_check.json": "`serve_check`: the CUDA serve engine's own checks against plain reference loops",
    "serve_torch_pytest.txt": "the serving binding's tests (pytest) on this GPU",
}


def what_file(f, files, named):
    """One file of a device's folder, in words: a table above, the log or a plot of a JSON beside it, or WHAT's."""
    if f in WHAT:
        return WHAT[f]
    if f in named:
        return "shown above" if f.endswith(".png") else "its table above"
    stem, ext = os.path.splitext(f)
    jsons = [j for j in files if j.endswith(".json") and j != f and stem.startswith(j[:-5])]
    src = max(jsons, key=len) if jsons else None  # the longest name it starts with: serve_torch_ -> serve_torch
    if src and stem.endswith("_policy") and ext == ".log":
        return f"the library's log lines (the policies' tier and mode changes) of the run that wrote {src}"
    if src and ext in (".log", ".txt"):
        return f"the output of the run that wrote {src}"
    if src and ext == ".png":
        return f"drawn from {src} (`python3 bench/dsbench` plot-*)"
    if src:
        return f"a further run beside {src} (its command says how it differs)"
    return "a raw result (its first lines say what made it)"


def load(root, name):
    p = os.path.join(root, name)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def title_of(folder):
    """A subfolder's title: the first line of its README.md, else of its only .md file; None without one."""
    mds = sorted(f for f in os.listdir(folder) if f.endswith(".md"))
    name = "README.md" if "README.md" in mds else (mds[0] if len(mds) == 1 else None)
    if name is None:
        return None, None
    with open(os.path.join(folder, name)) as f:
        return name, f.readline().lstrip("# ").strip()


def device_name(root):
    """The GPU's name as the folder's JSON files give it."""
    for name in ("overhead.json", "colocate.json", "pairs.json", "serve.json", "determinism.json"):
        d = load(root, name)
        if d and d.get("device"):
            return d["device"]
    return None


def subfolders(root):
    return sorted(s for s in os.listdir(root) if os.path.isdir(os.path.join(root, s)))


def device_readme(root, sub):
    """The README.md of one device's folder (root: that folder; sub: its name under docs/results)."""
    dev = device_name(root) or sub.upper()
    lines = [f"# Results on the {dev} ({sub}/)", "",
             "The current result of each benchmark on this device, one run each; ratios are taken within one run.",
             "Each section names its file's commit, date and the command that made it (run from the repository",
             "root, output paths relative to this folder). What the figures mean:",
             "[docs/benchmarks.md](../../benchmarks.md). This page is generated from the files here by",
             "`python3 bench/dsbench results-readme`; [../README.md](../README.md) says how to regenerate the set.", ""]
    img = next((p for p in ("colocate_sweep.png", "colocate.png") if os.path.exists(os.path.join(root, p))),
               "colocate.png")
    # (file, section writer) in the page's order; a missing file has no section
    sections = [("colocate.json", lambda d: colocate(d, "colocate.json")),
                ("colocate_ls32.json", lambda d: colocate(d, "colocate_ls32.json")),
                ("colocate_sweep.json", lambda d: sweep(d, img)), ("pairs.json", pairs), ("serve.json", serve),
                ("serve_rightsize.json", serve_rightsize),
                ("serve_torch.json", serve_torch), ("pairs_torch.json", pairs_torch),
                ("colocate_torch.json", colocate_torch), ("overhead.json", overhead),
                ("determinism.json", determinism), ("torch_colocate.json", torch_colocate),
                ("memory.json", memory), ("stress.json", stress)]
    named = set()
    for name, section in sections:
        d = load(root, name)
        if d:
            # an image the folder lacks is left out (a run without matplotlib draws none)
            lines += [ln for ln in section(d) if not (ln.startswith("![") and not os.path.exists(
                os.path.join(root, ln[ln.index("](") + 2:-1])))] + [""]
            named |= {name} | {ln[ln.index("](") + 2:-1] for ln in section(d) if ln.startswith("![")}
    files = sorted(f for f in os.listdir(root) if os.path.isfile(os.path.join(root, f)) and f != "README.md")
    lines += ["## Files", "", "Every file here and what it is:", ""]
    lines += [f"- [{f}]({f}): {what_file(f, files, named)}" for f in files] + [""]
    subs = subfolders(root)
    if subs:
        lines += ["## Studies in subfolders", "",
                  "Experiments on this device behind a design decision or a document, each with its own page:", ""]
        for s in subs:
            page, title = title_of(os.path.join(root, s))
            lines.append(f"- [{s}/]({s}/{page}): {title}" if page else f"- [{s}/]({s}/)")
        lines.append("")
    notes = os.path.join(root, NOTES)
    if os.path.exists(notes):
        with open(notes) as f:
            lines += f.read().splitlines()
    return "\n".join(lines).rstrip("\n") + "\n"


def commits(root):
    """The commits the folder's JSON files ran at, most files first."""
    count = {}
    for f in sorted(os.listdir(root)):
        if f.endswith(".json"):
            c = (load(root, f) or {}).get("commit")
            if c:
                count[c] = count.get(c, 0) + 1
    return sorted(count, key=lambda c: (-count[c], c))


def index(root, devices):
    """docs/results/README.md: the devices, what each folder holds, how to regenerate a set."""
    lines = ["# Results", "",
             "The current result of each benchmark, one folder per device. A device's folder holds, per benchmark,",
             "the JSON (device, driver, commit, date and the command that made it), the PNGs drawn from it and the",
             "log, plus `dsinfo.txt` (the pool) and `gpu-suite.txt` (suite `gpu` with its measured figures); its",
             "README.md has the tables. Older runs are in git history, not here. What each benchmark measures and",
             "how to run one by hand: [docs/benchmarks.md](../benchmarks.md); the device behaviour behind the",
             "figures: [docs/device-facts.md](../device-facts.md). The front page's tables (README.md, generated by",
             "`python3 bench/dsbench headline`) quote these files.", "",
             "| device | folder | GPU | commits of its JSON files (most files first) |",
             "| --- | --- | --- | --- |"]
    studies = []
    for dev, sub in devices:
        d = os.path.join(root, sub)
        cs = commits(d)
        lines.append(f"| {dev} | [{sub}/]({sub}/README.md) | {device_name(d) or '-'} | "
                     + ", ".join("`%s`" % c for c in cs[:3]) + (" and %d more" % (len(cs) - 3) if len(cs) > 3 else "")
                     + " |")
        for s in subfolders(d):
            page, title = title_of(os.path.join(d, s))
            studies.append(f"- [{sub}/{s}/]({sub}/{s}/{page or ''})" + (f": {title}" if title else ""))
    if studies:
        lines += ["", "Studies: experiments behind a design decision or a document, each in a subfolder of the device "
                  "it ran on, with its own page:", ""] + studies
    lines += [
              "", "## Regenerating a device's set", "",
              "On the GPU machine, from the repository root (`tools/gpu-run.sh` builds `build-gpu/`, runs the `gpu`",
              "suite, `dsinfo` and the benchmarks, and strips the machine's paths from what it wrote):", "", "```sh",
              REGENERATE.format(dev="<device>") + "   # <device>: " + " or ".join(s for _, s in devices),
              "```", "", "then, here:", "", "```sh",
              "python3 bench/dsbench results-readme   # this page and each device's README.md",
              "python3 bench/dsbench headline         # README.md's tables: a column per device",
              "```", "",
              "and commit the folder as it is: a benchmark the run did not name keeps its earlier file (the torch",
              "ones come from `tools/gpu-python.sh`; bench/torch says how). These pages are generated; a device's",
              "notes (`<device>/NOTES.md`, hand-written commentary) are appended to its README.md. The unit test",
              "`readme_results` fails when a generated page differs from the files."]
    return "\n".join(lines) + "\n"


def render(root):
    """{path: text} of every README this command writes under root."""
    devices = [(dev, dirs[0]) for dev, dirs in DEVICES if os.path.isdir(os.path.join(root, dirs[0]))]
    out = {os.path.join(root, "README.md"): index(root, devices)}
    for _, sub in devices:
        out[os.path.join(root, sub, "README.md")] = device_readme(os.path.join(root, sub), sub)
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    check = "--check" in argv
    rest = [a for a in argv if a != "--check"]
    if any(a.startswith("-") for a in rest) or len(rest) > 1:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    root = rest[0] if rest else RESULTS
    if not os.path.isdir(root):
        print(f"results-readme: no folder {root}", file=sys.stderr)
        return 2
    stale = []
    for path, text in render(root).items():
        old = open(path).read() if os.path.exists(path) else None
        if old == text:
            continue
        if check:
            stale.append(os.path.relpath(path, root))
        else:
            with open(path, "w") as f:
                f.write(text)
    if check:
        if stale:
            print("results-readme: %s %s from the files; run python3 bench/dsbench results-readme"
                  % (", ".join(stale), "differs" if len(stale) == 1 else "differ"), file=sys.stderr)
            return 1
        print("results-readme: the READMEs match the files")
    return 0
