"""Plots of the PyTorch serving benchmark (bench/torch/serve_torch.py) from its result file.

    python3 bench/dsbench plot-serve-torch RESULT.json [--out-dir DIR]

e.g. `/usr/bin/python3 bench/dsbench plot-serve-torch docs/results/h200/serve_torch.json --out-dir docs/results/h200`
writes, in DIR (default: the result file's directory):

  serve_torch_load.png       three panels against load (fraction of single's
                             capacity, "capacity_rps"; the x label gives it in
                             requests/s), one line per mode: SLO attainment
                             (fraction of requests meeting both SLOs, 0.9 dashed;
                             the legend gives "capacity_at_slo"), TPOT p99 and
                             TTFT p99 (ms, the SLO dashed). Markers at the median
                             over repetitions, error bars from the smallest to the
                             largest repetition; the modes are spread a little
                             along x so that their bars do not hide each other;
  serve_torch_colocated.png  beside the ResNet-50 training tenant at the
                             co-location load, per mode: TPOT p99 and TTFT p99
                             relative to the same mode serving alone, and BE
                             throughput relative to BE alone; medians with
                             min/max error bars, 1.0 as a line.

A figure whose part of the file is missing ("results", "colocated") is skipped
with a note. Exit 1 when the file cannot be read or matplotlib is missing, else
0. Needs matplotlib (Debian/Ubuntu: apt-get install python3-matplotlib) and
nothing else beyond the standard library.
"""

import argparse
import math
import os

# One colour and marker per mode, the same as in W5's figures (plotstyle.MODE_STYLE, style()).
from . import plotstyle
from .plotstyle import caption, finite, out_dir, plt, read_result, require_pyplot, style

LOAD_PNG = "serve_torch_load.png"
COLOCATED_PNG = "serve_torch_colocated.png"


def mode_names(d):
    """Modes in the file's order ("modes"), then any other mode of "results" or "colocated"."""
    names = [m for m in d.get("modes") or [] if isinstance(m, str)]
    for sec in (d.get("results") or {}, (d.get("colocated") or {}).get("modes") or {}):
        if isinstance(sec, dict):
            names += [m for m in sec if m not in names]
    return names


def torch_caption(d):
    """plotstyle.caption with the torch version, the model and the requests."""
    torch = ["torch " + str(d["torch"])] if d.get("torch") else []
    parts = []
    cfg = d.get("config") or {}
    model = []
    if finite(cfg.get("params")):
        model.append("%.2f B params" % (cfg["params"] / 1e9))
    if finite(cfg.get("layers")):
        model.append("%d layers" % cfg["layers"])
    if finite(cfg.get("hidden")):
        model.append("hidden %d" % cfg["hidden"])
    if model:
        parts.append("model " + " ".join(model))
    if finite(cfg.get("requests")) and finite(cfg.get("reps")):
        parts.append("%d requests x %d reps" % (cfg["requests"], cfg["reps"]))
    return caption(d, before_commit=torch, after_commit=parts)


def finish(fig, d, path, rect_top=1.0):
    plotstyle.finish(fig, torch_caption(d), path, rect_top)


def figure(cell, key):
    """(median, lo, hi) of cell[key] = {"median", "min", "max"}; lo/hi from "reps" where min/max are missing."""
    v = cell.get(key)
    if finite(v):  # a bare number
        v = {"median": v}
    if not isinstance(v, dict):
        v = {}
    reps = [r.get(key) for r in cell.get("reps") or [] if isinstance(r, dict)]
    reps = sorted(x for x in reps if finite(x))
    y = v.get("median")
    if not finite(y) and reps:
        n = len(reps)
        y = reps[n // 2] if n % 2 else 0.5 * (reps[n // 2 - 1] + reps[n // 2])
    if not finite(y):
        return None
    lo = v.get("min") if finite(v.get("min")) else (reps[0] if reps else y)
    hi = v.get("max") if finite(v.get("max")) else (reps[-1] if reps else y)
    return y, min(lo, y), max(hi, y)


def loads_of(by_load):
    out = []
    for k, cell in (by_load or {}).items():
        try:
            ld = float(k)
        except (TypeError, ValueError):
            continue
        if isinstance(cell, dict) and math.isfinite(ld):
            out.append((ld, cell))
    return sorted(out, key=lambda p: p[0])


def plot_load(d, modes, out):
    results = d.get("results") or {}
    if not isinstance(results, dict) or not results:
        print("note: no \"results\": %s skipped" % LOAD_PNG)
        return False
    names = [m for m in modes if m in results]
    all_loads = sorted({ld for m in names for ld, _ in loads_of(results[m])})
    if not all_loads:
        print("note: \"results\" has no loads: %s skipped" % LOAD_PNG)
        return False
    # Spread the modes along x by a small part of the smallest gap between loads.
    gaps = [b - a for a, b in zip(all_loads, all_loads[1:]) if b > a]
    step = (min(gaps) if gaps else max(all_loads[0], 0.1)) * 0.05
    slo = d.get("slo") or {}
    cap_at = (d.get("capacity_at_slo") or {}).get("load") or {}
    att_level = (d.get("capacity_at_slo") or {}).get("attainment")
    att_level = att_level if finite(att_level) else 0.9
    panels = [
        ("slo_attainment", "SLO attainment", "fraction of requests meeting both SLOs", att_level,
         "%.0f%% attainment" % (100 * att_level)),
        ("tpot_p99_ms", "TPOT p99", "TPOT p99 (ms)", slo.get("tpot_ms"), "TPOT SLO"),
        ("ttft_p99_ms", "TTFT p99", "TTFT p99 (ms)", slo.get("ttft_ms"), "TTFT SLO"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.8))
    handles, labels = [], []
    drawn = 0
    for i, mode in enumerate(names):
        colour, marker = style(mode, modes)
        off = (i - 0.5 * (len(names) - 1)) * step
        h = None
        for ax, (key, _, _, _, _) in zip(axes, panels):
            xs, ys, lo, hi = [], [], [], []
            for ld, cell in loads_of(results[mode]):
                f = figure(cell, key)
                if f is None:
                    continue
                xs.append(ld + off)
                ys.append(f[0])
                lo.append(f[0] - f[1])
                hi.append(f[2] - f[0])
            if not xs:
                continue
            eb = ax.errorbar(xs, ys, yerr=[lo, hi], color=colour, marker=marker, capsize=3, markersize=5,
                             linewidth=1.5, elinewidth=1, alpha=0.9)
            h = h or eb
            drawn += 1
        if h is not None:
            label = mode
            if mode in cap_at:
                v = cap_at[mode]
                label += (" (%.0f%% up to load %.2f)" % (100 * att_level, v) if finite(v)
                          else " (%.0f%%: below the sweep)" % (100 * att_level))
            handles.append(h)
            labels.append(label)
    if not drawn:
        plt.close(fig)
        print("note: no figures in \"results\": %s skipped" % LOAD_PNG)
        return False
    cap = (d.get("capacity_rps") or {}).get("median") if isinstance(d.get("capacity_rps"), dict) \
        else d.get("capacity_rps")
    xlabel = "load (fraction of capacity"
    xlabel += "; 1.0 = %.3g req/s)" % cap if finite(cap) else ")"
    for ax, (key, title, ylabel, level, level_label) in zip(axes, panels):
        if finite(level):
            if key != "slo_attainment":
                level_label += " %.3g ms" % level
            ax.axhline(level, color="black", linestyle="--", linewidth=1, label=level_label)
            ax.legend(loc="best", fontsize=8, handlelength=2.5)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.set_xticks(all_loads)
        ax.set_xticklabels(["%.3g" % ld + ("\n%.3g req/s" % (ld * cap) if finite(cap) else "") for ld in all_loads],
                           fontsize=8)
        pad = 3 * step * max(1, len(names))
        ax.set_xlim(all_loads[0] - pad, all_loads[-1] + pad)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylim(-0.02, 1.05)
    for ax in axes[1:]:
        ax.set_ylim(bottom=0)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.945), ncol=min(5, len(labels)),
               fontsize=9, frameon=False)
    title = "Serving alone against load"
    if finite(slo.get("ttft_ms")) and finite(slo.get("tpot_ms")):
        title += " (SLOs: TTFT %.4g ms, TPOT %.3g ms)" % (slo["ttft_ms"], slo["tpot_ms"])
    fig.suptitle(title, y=0.99, fontsize=11)
    finish(fig, d, os.path.join(out, LOAD_PNG), rect_top=0.92)
    return True


def plot_colocated(d, modes, out):
    co = d.get("colocated") or {}
    per_mode = co.get("modes") or {} if isinstance(co, dict) else {}
    names = [m for m in modes if m in per_mode]
    metrics = [("tpot_p99_norm", "TPOT p99 / mode alone", ""),
               ("ttft_p99_norm", "TTFT p99 / mode alone", "//"),
               ("be_tput_norm", "BE throughput / BE alone", "..")]
    if not any(figure(per_mode.get(m) or {}, k) for m in names for k, _, _ in metrics):
        print("note: no \"colocated\" figures: %s skipped" % COLOCATED_PNG)
        return False
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(7.6, 4.6))
    width = 0.8 / len(metrics)
    top = 1.0
    for j, (key, _, hatch) in enumerate(metrics):
        for i, mode in enumerate(names):
            f = figure(per_mode.get(mode) or {}, key)
            if f is None:
                continue
            x = i + (j - 0.5 * (len(metrics) - 1)) * width
            y, lo, hi = f
            ax.bar(x, y, width, yerr=[[y - lo], [hi - y]], capsize=3, color=style(mode, modes)[0],
                   edgecolor="black", hatch=hatch, alpha=0.85 if key != "be_tput_norm" else 0.5,
                   error_kw={"elinewidth": 1})
            ax.text(x, hi, "%.2f" % y, ha="center", va="bottom", fontsize=7)
            top = max(top, hi)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names)
    ax.set_ylabel("relative to running alone")
    ax.set_ylim(0, top * 1.18)
    title = "Beside ResNet-50 training"
    if finite(co.get("load")):
        title += ", load %.3g" % co["load"]
        cap = (d.get("capacity_rps") or {}).get("median") if isinstance(d.get("capacity_rps"), dict) else None
        if finite(cap):
            title += " (%.3g req/s)" % (co["load"] * cap)
    be = co.get("be_alone_steps_per_s", d.get("be_alone_steps_per_s"))
    if finite(be):
        title += "; BE alone %.4g steps/s" % be
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    legend = [Patch(facecolor="white", edgecolor="black", hatch=h, label=lab) for _, lab, h in metrics]
    ax.legend(handles=legend, fontsize=8, loc="upper right", ncol=3)
    finish(fig, d, os.path.join(out, COLOCATED_PNG))
    return True


def main(argv=None):
    require_pyplot("plot_serve_torch.py")
    ap = argparse.ArgumentParser(prog="dsbench plot-serve-torch", description=__doc__.split("\n\n")[0],
                                 epilog="Figures: %s, %s." % (LOAD_PNG, COLOCATED_PNG))
    ap.add_argument("result", help="serve_torch.py's JSON result file (serve_torch.json)")
    ap.add_argument("--out-dir", "--out", dest="out", metavar="DIR", default=None,
                    help="directory for the PNGs (made if missing; default: the file's)")
    args = ap.parse_args(argv)

    d = read_result(args.result, "plot_serve_torch.py")
    out = out_dir(args.out, args.result)

    modes = mode_names(d)
    plot_load(d, modes, out)
    plot_colocated(d, modes, out)

