"""Writes docs/results/README.md: the latest table of each benchmark whose JSON
is in docs/results/, with device, driver, commit and date. Standard library only.

usage: python3 bench/dsbench results-readme [docs/results]
"""
import json
import os
import sys

# pair_configs: the pairing of two configurations repetition by repetition (same_tier)
from . import pair_configs


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


def sweep(d):
    sw = d.get("sweep", {})
    if any("ls_attainment" in c for v in sw.values() for c in v.values()):
        return sweep_ranged(d)
    pols = [p for p in ("static", "slo_aware", "slo_aware_nogates", "tpot_first", "shared", "priority", "temporal")
            if any(p in v for v in sw.values())]
    out = ["## W1 load sweep (colocate_sweep.json, colocate.png)", "", header(d), "",
           "ls_p99_norm / be_tput_norm per LS load:", "",
           "| load | " + " | ".join(pols) + " |", "| --- |" + " --- |" * len(pols)]
    for load, v in sw.items():
        out.append(f"| {load} | " + " | ".join(
            f"{fmt(v.get(p, {}).get('ls_p99_norm'), 2)} / {fmt(v.get(p, {}).get('be_tput_norm'), 3)}"
            for p in pols) + " |")
    out += ["", "![trade-off](colocate.png)"]
    return out


def settle_text(d):
    """The settle requests of a sweep: one count, or per load where a least time made them differ."""
    per = {k: p.get("settle_requests") for k, p in d.get("points", {}).items() if p.get("settle_requests")}
    if not per or len(set(per.values())) == 1:
        return str(next(iter(per.values()), d.get("settle_requests")))
    return ", ".join(f"{v} at {k}" for k, v in per.items())


def sweep_ranged(d):
    """The sweep with repetitions: medians, attainment, the verdict per load."""
    sw = d.get("sweep", {})
    cfgs = [c for c in next(iter(sw.values()), {}) if c != "ls_alone"]
    out = ["## W1 load sweep (colocate_sweep.json, colocate_sweep.png)", "", header(d), "",
           f"Medians over {d.get('reps')} repetitions of {d.get('requests_per_load')} requests per load after "
           f"{settle_text(d)} settle requests; SLO {d.get('ls_slo_us')} us, attainment target "
           f"{d.get('target')}. Cells: ls_p99_norm / be_tput_norm / ls_attainment %.", "",
           "| load | " + " | ".join(cfgs) + " | verdict |", "| --- |" + " --- |" * (len(cfgs) + 1)]
    for load, v in sw.items():
        vd = d.get("verdict", {}).get(load, {})
        out.append(f"| {load} | " + " | ".join(
            f"{fmt(v.get(c, {}).get('ls_p99_norm'), 2)} / {fmt(v.get(c, {}).get('be_tput_norm'), 3)} / "
            f"{fmt(100 * (v.get(c, {}).get('ls_attainment') or 0), 1)}" for c in cfgs) +
            f" | {'ok' if vd.get('ok') else 'not ok'} |")
    out += ["", "![frontier](colocate_sweep.png)"]
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


def colocate_files(root):
    """Every W1 result file here: (name, its JSON), by name."""
    out = []
    for name in sorted(os.listdir(root)):
        if name.startswith("colocate_") and name.endswith(".json"):
            with open(os.path.join(root, name)) as f:
                out.append((name, json.load(f)))
    return out


def sweep_history(files):
    """Every W1 sweep file with a verdict, oldest first: how robust the verdict is across runs."""
    full = {"priority", "slo_aware"} | {f"static@{n}" for n in (16, 32, 48, 64, 80, 96)}
    runs = [(d.get("date", ""), name, d) for name, d in files
            if d.get("verdict") and d.get("sweep") and all(full <= set(v) for v in d["sweep"].values())]
    if not runs:
        return []
    loads = sorted({load for _, _, d in runs for load in d["verdict"]}, key=float)
    out = ["## W1 verdict history (every full sweep file here)", "",
           "slo_aware against priority and every fixed split, per load, in every W1 sweep file that ran them all, "
           "oldest first (runs of a subset of the configurations are left out). "
           "The SLO is 4x LS's service alone, measured in each run. BE: slo_aware's be_tput_norm minus that "
           "of the best split meeting the target. A failure is marked \"beyond ranges\" where it holds with the "
           "repetitions' ranges apart (slo_aware's attainment range below that of a split meeting the target, its BE "
           "range plus 0.02 below the best split's, or dominance), else \"within ranges\".", "",
           "| file | commit | SLO us | " + " | ".join(loads) + " |", "| --- | --- | --- |" + " --- |" * len(loads)]
    for _, name, d in sorted(runs, key=lambda r: r[0]):
        out.append(f"| [{name}]({name}) | `{d.get('commit')}` | {d.get('ls_slo_us')} | " +
                   " | ".join(verdict_cell(d["verdict"].get(load), d["sweep"].get(load, {})) for load in loads) + " |")
    aa = [(name, d) for _, name, d in sorted(runs, key=lambda r: r[0]) if d.get("verdict_aa")]
    if aa:
        out += ["", "The A/A check (files that ran `static`, the split of `--ls-sms`, beside its twin `static@N`): "
                "the same verdict with `static` judged instead of slo_aware, against the same baselines. Where it "
                "fails, a fixed split fails against itself.", "",
                "| file | twin | " + " | ".join(loads) + " |", "| --- | --- |" + " --- |" * len(loads)]
        for name, d in aa:
            cells = []
            for load in loads:
                vd = d["verdict_aa"].get(load)
                cells.append("-" if not vd else ("ok" if vd.get("ok") else "**not ok**") +
                             f" ({'meets' if vd.get('judged_meets') else 'misses'}"
                             f"{', dominated' if vd.get('judged_dominated_by') else ''})")
            out.append(f"| [{name}]({name}) | {d['verdict_aa'].get('twin')} | " + " | ".join(cells) + " |")
    return out


def same_tier(files):
    """slo_aware against the fixed split on the tier it held for a whole window, paired by repetition (same
    arrivals, same run; pair_configs.py): how much slower its LS is where the tier is not what differs."""
    med = pair_configs.median
    keys = ("p50 us", "p99 us", "attain pts", "submit p50 us", "device p99 us")
    rows, pooled = [], {k: [] for k in keys}
    for name, d in files:
        diffs = {k: [] for k in keys}
        for row in (d.get("sweep") or {}).values():
            slo = row.get("slo_aware") or {}
            sms = slo.get("ls_sms_mean")
            # held one tier: its mean SM count is that tier's exactly
            fixed = row.get(f"static@{round(sms)}") if sms is not None and abs(sms - round(sms)) < 1e-6 else None
            if not fixed or "ls_p50_us_reps" not in slo:
                continue
            for k, xs in pair_configs.rep_diffs(slo, fixed).items():
                if k in diffs:
                    diffs[k] += xs
        if diffs["p50 us"]:
            rows.append((d.get("date", ""), name, d.get("commit"), diffs))
            for k in keys:
                pooled[k] += diffs[k]
    if not rows:
        return []

    signs = {label: sign for label, _, sign in pair_configs.REPS}  # +1: higher is worse for LS

    def cells(df):
        return f"{len(df['p50 us'])} | " + " | ".join(
            f"{med(df[k]):+.{nd}f} ({sum(signs[k] * x > 0 for x in df[k])}/{len(df[k])})"
            for k, nd in (("p50 us", 1), ("p99 us", 1), ("attain pts", 2)))

    out = ["## W1 slo_aware against the fixed split on the same tier (paired repetitions)", "",
           "Every W1 file with repetitions, at each load where slo_aware's LS held one tier for the whole "
           "window (ls_sms_mean a whole tier) and the fixed split on that tier ran: the difference slo_aware "
           "minus static per repetition (the two ran on the same arrivals in the same run), its median and "
           "how many repetitions were worse for slo_aware. The `fixed96` files ran slo_aware with sizing "
           "off on 96 SMs, some with an experimental setting (their command says which).", "",
           "| file | commit | pairs | LS p50 us (worse) | LS p99 us (worse) | attainment points % (worse) |",
           "| --- | --- | --- | --- | --- | --- |"]
    for _, name, commit, df in sorted(rows, key=lambda r: r[0]):
        out.append(f"| [{name}]({name}) | `{commit}` | {cells(df)} |")
    out.append(f"| all | | {cells(pooled)} |")
    sub, dev = pooled["submit p50 us"], pooled["device p99 us"]
    if sub and dev:
        out += ["", f"Where the time goes, per load of the same pairs (medians over its repetitions): LS's host "
                f"submission p50 (submit delay: from the request's start to its last launch returning) "
                f"{med(sub):+.1f} us, "
                f"higher at {sum(x > 0 for x in sub)} of {len(sub)} loads; its device part p99 (from there to "
                f"the synchronize returning) {med(dev):+.1f} us, higher at {sum(x > 0 for x in dev)} of {len(dev)}."]
    return out


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


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    root = argv[0] if argv else "docs/results"
    lines = ["# Results", "",
             "Latest benchmark runs on a GPU, written by `tools/gpu-run.sh` (see",
             "[docs/benchmarks.md](../benchmarks.md) for what each benchmark measures and how to",
             "rerun it, [docs/device-facts.md](../device-facts.md) for the device behaviour behind",
             "them). Each JSON carries device, driver, commit, command and date; ratios are taken",
             "within one run. The command line is the one that ran, with its output path. This page",
             "is generated: edit `docs/results/NOTES.md` or `bench/dsbench/results_readme.py`, then run",
             "`python3 bench/dsbench results-readme`.", ""]

    def load(name):
        p = os.path.join(root, name)
        return json.load(open(p)) if os.path.exists(p) else None

    # (file, section writer) in the page's order; a missing file has no section
    sections = [("colocate.json", lambda d: colocate(d, "colocate.json")),
                ("colocate_ls32.json", lambda d: colocate(d, "colocate_ls32.json")),
                ("colocate_sweep.json", sweep), ("pairs.json", pairs), ("serve.json", serve),
                ("serve_rightsize.json", serve_rightsize),
                ("serve_torch.json", serve_torch), ("pairs_torch.json", pairs_torch),
                ("colocate_torch.json", colocate_torch), ("overhead.json", overhead),
                ("determinism.json", determinism), ("torch_colocate.json", torch_colocate),
                ("memory.json", memory), ("stress.json", stress)]
    for name, section in sections:
        d = load(name)
        if d:
            lines += section(d) + [""]
            if name == "colocate_sweep.json":
                files = colocate_files(root)
                lines += sweep_history(files) + [""] + same_tier(files) + [""]
    lines += ["## Pool and suite gpu", "",
              "- [dsinfo.txt](dsinfo.txt): the pool on the GPU, each pCtx's SMs probed with `%smid`.",
              "- [gpu-suite.txt](gpu-suite.txt): suite `gpu` (`test_gpu --verbose`) with its measured figures.", ""]
    # Runs on another device live in a folder of their own (e.g. h100/): the
    # figures above and NOTES.md quote the files at this level only, and
    # ratios compare only within one device. A folder with a README.md is a
    # study of its own (e.g. launch_diag/), listed under its README's title.
    for sub in sorted(os.listdir(root)):
        if not os.path.isdir(os.path.join(root, sub)):
            continue
        files = sorted(os.listdir(os.path.join(root, sub)))
        readme = os.path.join(root, sub, "README.md")
        if os.path.exists(readme):  # a study of its own: its README says what it is
            with open(readme) as f:
                title = f.readline().lstrip("# ").strip()
            lines += [f"## {title} ({sub}/)", "", f"What each file is: [{sub}/README.md]({sub}/README.md).", ""]
            files.remove("README.md")
        else:
            lines += [f"## Runs on another device ({sub}/)", "",
                      "The same programs on a second device; compare them with each other, not with the "
                      "files above.", ""]
        lines += [f"- [{sub}/{f}]({sub}/{f})" for f in files] + [""]
        p = os.path.join(root, sub, "overhead.json")
        if os.path.exists(p):
            lines += [ln.replace("(overhead.json)", f"({sub}/overhead.json)") for ln in overhead(json.load(open(p)))]
            lines += [""]
    notes = os.path.join(root, "NOTES.md")
    if os.path.exists(notes):
        lines += open(notes).read().splitlines()
    open(os.path.join(root, "README.md"), "w").write("\n".join(lines) + "\n")

