"""Plots of the serve benchmark (docs/benchmarks.md, W5) from its result file.

    python3 bench/dsbench plot-serve RESULT.json --out DIR

writes, in DIR:

  goodput_vs_load.png  goodput (requests/s meeting both SLOs) against load,
                       per mode: the median over repetitions, error bars from
                       the smallest to the largest repetition;
  cdf_ttft.png         CDF of per-request TTFT (ms) per mode at the load the
                       file names ("cdf"."load"), the TTFT SLO as a line;
  cdf_tpot.png         the same for TPOT;
  timeline.png         for one run ("timeline", or --timeline-mode picks one of
                       "timelines"), the pCtx each vCtx held over time: one row
                       per vCtx, y = the pCtx's SM count, labelled by index;
  colocated.png        beside the BE training tenant: p99 TPOT relative to the
                       same mode serving alone, and BE throughput relative to
                       BE alone, per mode;
  colocated_frontier.png  the right-sizing comparison beside the BE tenant
                       (when "colocated" has static@N, priority or slo_aware):
                       x = BE throughput / BE alone, y = p99 TPOT (ms);
                       static@N joined by a line and labelled N, priority a
                       square, slo_aware a star; medians with min-max bars
                       over repetitions; filled where the median share of
                       decode steps within the TPOT SLO (tpot_attainment)
                       reaches the verdict's target, hollow where it does
                       not; the TPOT SLO as a dashed line.

A plot whose part of the file is missing is skipped with a note. Needs
matplotlib (Debian/Ubuntu: apt-get install python3-matplotlib) and nothing
else beyond the standard library.
"""

import argparse
import os

# One colour and marker per mode, the same in every figure (plotstyle.MODE_STYLE).
from . import plotstyle
from .plotstyle import caption, finite, out_dir, plt, read_result, require_pyplot, static_sms, style

# A timeline time above this (ms) is a sample taken before the window opened
# whose negative offset wrapped around as an unsigned number: shown at 0.
TIMELINE_MAX_MS = 1e9


def mode_names(d):
    """Modes in the file's order: "modes" holds names or {"name": ...} objects."""
    names = []
    for m in d.get("modes") or []:
        name = m.get("name") if isinstance(m, dict) else m
        if isinstance(name, str) and name not in names:
            names.append(name)
    for sec in d.get("loads") or []:
        for name in (sec.get("modes") or {}):
            if name not in names:
                names.append(name)
    return names


def serve_caption(d):
    """plotstyle.caption with the model's layers."""
    model = d.get("model") or {}
    return caption(d, after_commit=["%d layers" % model["layers"]] if finite(model.get("layers")) else [])


# --prefix: prepended to every file name (e.g. "serve_" beside other results).
PREFIX = ""


def finish(fig, d, path):
    """plotstyle.finish with --prefix before the file's name."""
    plotstyle.finish(fig, serve_caption(d), os.path.join(os.path.dirname(path), PREFIX + os.path.basename(path)))


def spread(cell, key):
    """(min, max) of a figure over repetitions: "range", else "reps", else None."""
    r = (cell.get("range") or {}).get(key)
    if isinstance(r, (list, tuple)) and len(r) == 2 and finite(r[0]) and finite(r[1]):
        return r[0], r[1]
    vals = [rep.get(key) for rep in cell.get("reps") or [] if isinstance(rep, dict)]
    vals = [v for v in vals if finite(v)]
    if vals:
        return min(vals), max(vals)
    return None


def median(vals):
    vals = sorted(vals)
    n = len(vals)
    if n == 0:
        return None
    return vals[n // 2] if n % 2 else 0.5 * (vals[n // 2 - 1] + vals[n // 2])


def plot_goodput(d, modes, out):
    loads = [s for s in d.get("loads") or [] if isinstance(s, dict) and finite(s.get("load"))]
    if not loads:
        print("note: no \"loads\": goodput_vs_load.png skipped")
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    drawn = 0
    for mode in modes:
        xs, ys, lo, hi = [], [], [], []
        for sec in sorted(loads, key=lambda s: s["load"]):
            cell = (sec.get("modes") or {}).get(mode)
            if not isinstance(cell, dict):
                continue
            y = cell.get("goodput_rps")
            if not finite(y):
                reps = [r.get("goodput_rps") for r in cell.get("reps") or [] if isinstance(r, dict)]
                y = median([v for v in reps if finite(v)])
            if not finite(y):
                continue
            r = spread(cell, "goodput_rps") or (y, y)
            xs.append(sec["load"])
            ys.append(y)
            lo.append(max(0.0, y - r[0]))
            hi.append(max(0.0, r[1] - y))
        if not xs:
            continue
        colour, marker = style(mode, modes)
        ax.errorbar(xs, ys, yerr=[lo, hi], color=colour, marker=marker, capsize=3, label=mode)
        drawn += 1
    if not drawn:
        plt.close(fig)
        print("note: no goodput figures: goodput_vs_load.png skipped")
        return
    xlabel = "load (fraction of single's capacity)"
    caps = [s["rate_rps"] / s["load"] for s in loads if finite(s.get("rate_rps")) and s["load"] > 0]
    if caps:
        xlabel += "; load 1.0 = %.4g requests/s" % caps[0]
    ax.set_xlabel(xlabel)
    ax.set_ylabel("goodput (requests/s within both SLOs)")
    slo = d.get("slo") or {}
    if finite(slo.get("ttft_ms")) and finite(slo.get("tpot_ms")):
        ax.set_title("Goodput vs load (SLOs: TTFT %.4g ms, TPOT %.4g ms)" % (slo["ttft_ms"], slo["tpot_ms"]))
    else:
        ax.set_title("Goodput vs load")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    finish(fig, d, os.path.join(out, "goodput_vs_load.png"))


def plot_cdf(d, modes, out, key, slo_key, label, fname):
    cdf = d.get("cdf") or {}
    per_mode = cdf.get("modes") or {}
    if not per_mode:
        print("note: no \"cdf\": %s skipped" % fname)
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    lo, hi, drawn = None, None, 0
    for mode in modes + [m for m in per_mode if m not in modes]:
        vals = sorted(v for v in (per_mode.get(mode) or {}).get(key) or [] if finite(v))
        if not vals:
            continue
        n = len(vals)
        colour, _ = style(mode, modes)
        ax.step(vals, [(i + 1) / n for i in range(n)], where="post", color=colour, label="%s (%d)" % (mode, n))
        lo = vals[0] if lo is None else min(lo, vals[0])
        hi = vals[-1] if hi is None else max(hi, vals[-1])
        drawn += 1
    if not drawn:
        plt.close(fig)
        print("note: no per-request %s values: %s skipped" % (key, fname))
        return
    slo = (d.get("slo") or {}).get(slo_key)
    if finite(slo):
        ax.axvline(slo, color="black", linestyle="--", linewidth=1, label="SLO %.4g ms" % slo)
        hi = max(hi, slo)
        lo = min(lo, slo)
    if lo > 0 and hi / lo > 50:
        ax.set_xscale("log")
    ax.set_xlabel(label + " (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    title = "CDF of " + label
    if finite(cdf.get("load")):
        title += " at load %.3g" % cdf["load"]
    ax.set_title(title)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(loc="lower right")
    finish(fig, d, os.path.join(out, fname))


def pick_timeline(d, mode):
    if mode:
        for tl in d.get("timelines") or []:
            if isinstance(tl, dict) and tl.get("mode") == mode:
                return tl
        tl = d.get("timeline")
        if isinstance(tl, dict) and tl.get("mode") == mode:
            return tl
        return None
    tl = d.get("timeline")
    if isinstance(tl, dict):
        return tl
    for tl in d.get("timelines") or []:
        if isinstance(tl, dict):
            return tl
    return None


def run_end_ms(d, tl):
    """Window length of the timeline's run (its makespan), if the file has it."""
    for sec in d.get("loads") or []:
        if isinstance(sec, dict) and sec.get("load") == tl.get("load"):
            cell = (sec.get("modes") or {}).get(tl.get("mode")) or {}
            reps = cell.get("reps") or []
            ms = reps[0].get("makespan_s") if reps and isinstance(reps[0], dict) else cell.get("makespan_s")
            if finite(ms):
                return 1e3 * ms
    return None


def plot_timeline(d, out, mode):
    tl = pick_timeline(d, mode)
    if tl is None:
        print("note: no \"timeline\"%s: timeline.png skipped" % (" of mode " + mode if mode else ""))
        return
    sms = {}
    for p in tl.get("pctx") or d.get("pool") or []:
        if isinstance(p, dict) and finite(p.get("index")) and finite(p.get("sms")):
            sms[int(p["index"])] = int(p["sms"])
    series = {}
    for name, pts in (tl.get("vctx") or {}).items():
        clean = []
        for pt in pts or []:
            if not (isinstance(pt, (list, tuple)) and len(pt) >= 2 and finite(pt[0]) and finite(pt[1])):
                continue
            t = pt[0] if 0 <= pt[0] < TIMELINE_MAX_MS else 0.0
            clean.append((t, int(pt[1])))
        clean.sort(key=lambda p: p[0])
        if clean:
            series[name] = clean
    if not series:
        print("note: the timeline has no samples: timeline.png skipped")
        return
    end = max(p[-1][0] for p in series.values())
    mk = run_end_ms(d, tl)
    if mk and mk > end:
        end = mk
    if end <= 0:
        end = 1.0
    rows = len(series)
    fig, axes = plt.subplots(rows, 1, figsize=(8, 1.2 + 1.6 * rows), sharex=True, squeeze=False)
    for ax, (name, pts) in zip(axes[:, 0], series.items()):
        ts = [p[0] for p in pts] + [end]
        ys = [sms.get(p[1], float("nan")) for p in pts]
        ys.append(ys[-1])
        ax.step(ts, ys, where="post", color="#d62728" if name == "decode" else "#1f77b4", linewidth=1.5)
        used = sorted({p[1] for p in pts})
        ticks = {}
        for i in used:
            if i in sms:
                ticks.setdefault(sms[i], []).append(i)
        ax.set_yticks(sorted(ticks))
        ax.set_yticklabels(["%d SMs (pCtx %s)" % (s, ",".join(str(i) for i in ticks[s])) for s in sorted(ticks)],
                           fontsize=8)
        if ticks:
            lo, hi = min(ticks), max(ticks)
            pad = max(4, 0.1 * (hi - lo))
            ax.set_ylim(lo - pad, hi + pad)
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel("time since the window opened (ms)")
    axes[-1, 0].set_xlim(0, end)
    title = "pCtx held by each vCtx"
    if tl.get("mode"):
        title += ", mode " + str(tl["mode"])
    if finite(tl.get("load")):
        title += ", load %.3g" % tl["load"]
    axes[0, 0].set_title(title)
    finish(fig, d, os.path.join(out, "timeline.png"))


def plot_colocated(d, modes, out):
    co = d.get("colocated") or {}
    per_mode = co.get("modes") or {}
    names = [m for m in modes if m in per_mode] + [m for m in per_mode if m not in modes]
    metrics = [("tpot_p99_norm", "p99 TPOT / alone"), ("be_tput_norm", "BE throughput / BE alone")]
    if not any(finite((per_mode.get(m) or {}).get(k)) for m in names for k, _ in metrics):
        print("note: no \"colocated\" figures: colocated.png skipped")
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    width = 0.38
    hatches = ["", "//"]
    for j, (key, label) in enumerate(metrics):
        xs, ys, lo, hi, colours = [], [], [], [], []
        for i, mode in enumerate(names):
            cell = per_mode.get(mode) or {}
            y = cell.get(key)
            if not finite(y):
                continue
            r = cell.get(key + "_range")
            r = r if isinstance(r, (list, tuple)) and len(r) == 2 and all(finite(v) for v in r) else (y, y)
            xs.append(i + (j - 0.5) * width)
            ys.append(y)
            lo.append(max(0.0, y - r[0]))
            hi.append(max(0.0, r[1] - y))
            colours.append(style(mode, modes)[0])
        if xs:
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, color=colours, edgecolor="black", hatch=hatches[j],
                   alpha=0.85 if j == 0 else 0.45, label=label)
            for x, y in zip(xs, ys):
                ax.text(x, y, "%.2f" % y, ha="center", va="bottom", fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30 if len(names) > 5 else 0, ha="right" if len(names) > 5 else "center",
                       fontsize=8 if len(names) > 5 else None)
    ax.set_ylabel("relative to running alone")
    title = "Beside the BE training tenant"
    if finite(co.get("load")):
        title += ", load %.3g" % co["load"]
    if finite(co.get("be_alone_steps_per_s")):
        title += " (BE alone: %.4g steps/s)" % co["be_alone_steps_per_s"]
    ax.set_title(title, fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    finish(fig, d, os.path.join(out, "colocated.png"))


def plot_frontier(d, out):
    co = d.get("colocated") or {}
    per_mode = co.get("modes") or {}
    verdict = co.get("verdict") or {}
    target = verdict.get("target")

    def point(mode):
        cell = per_mode.get(mode)
        if not isinstance(cell, dict):
            return None
        x, y = cell.get("be_tput_norm"), cell.get("tpot_p99_ms")
        if not (finite(x) and finite(y)):
            return None
        xr = cell.get("be_tput_norm_range")
        xr = xr if isinstance(xr, (list, tuple)) and len(xr) == 2 and all(finite(v) for v in xr) else (x, x)
        yr = spread(cell, "tpot_p99_ms") or (y, y)
        att = cell.get("tpot_attainment")
        meets = finite(att) and finite(target) and att >= target
        return x, y, (max(0.0, x - xr[0]), max(0.0, xr[1] - x)), (max(0.0, y - yr[0]), max(0.0, yr[1] - y)), att, meets

    statics = sorted((static_sms(m), m) for m in per_mode if static_sms(m) is not None)
    groups = [("static@N", "#1f77b4", "o", [m for _, m in statics]),
              ("priority", "#7f7f7f", "s", ["priority"]),
              ("slo_aware", "#d62728", "*", ["slo_aware"])]
    pts = {m: point(m) for _, _, _, ms in groups for m in ms}
    if not any(pts.values()):
        print("note: no static@N, priority or slo_aware figures in \"colocated\": colocated_frontier.png skipped")
        return
    fig, ax = plt.subplots(figsize=(8.0, 4.6))
    for label, colour, marker, ms in groups:
        drawn = [(m, pts[m]) for m in ms if pts.get(m)]
        if not drawn:
            continue
        if len(drawn) > 1:
            ax.plot([p[0] for _, p in drawn], [p[1] for _, p in drawn], color=colour, linewidth=1, alpha=0.7)
        for i, (m, p) in enumerate(drawn):
            x, y, xe, ye, att, meets = p
            ax.errorbar([x], [y], xerr=[[xe[0]], [xe[1]]], yerr=[[ye[0]], [ye[1]]], color=colour, capsize=3,
                        linewidth=0.8, marker=marker, markersize=14 if marker == "*" else 8,
                        markerfacecolor=colour if meets else "white", markeredgecolor=colour,
                        label=label if i == 0 else None, zorder=3)
            text = str(static_sms(m)) if static_sms(m) is not None else ""
            if finite(att):
                text += (" " if text else "") + "(%.3f)" % att
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(6, 5), fontsize=7, color=colour)
    slo = (d.get("slo") or {}).get("tpot_ms")
    if finite(slo):
        ax.axhline(slo, color="black", linestyle="--", linewidth=1, label="TPOT SLO %.4g ms" % slo)
    ax.set_xlabel("BE throughput / BE alone (median)")
    ax.set_ylabel("p99 TPOT beside BE (ms, median)")
    title = "Right-sizing beside the BE tenant"
    if finite(co.get("load")):
        title += ", load %.3g" % co["load"]
    note = "labels: static@N's N (median tpot_attainment); filled: attainment >= target"
    if finite(target):
        note += " %.4g" % target
    if isinstance(verdict.get("ok"), bool):
        note += "\nverdict: %s" % ("ok" if verdict["ok"] else "NOT ok")
        if verdict.get("best_baseline"):
            note += ", best baseline %s" % verdict["best_baseline"]
    ax.set_title(title + "\n" + note, fontsize=8)
    top = max([p[1] + p[3][1] for p in pts.values() if p] + ([slo] if finite(slo) else []))
    ax.set_ylim(0, 1.15 * top)
    ax.grid(True, alpha=0.3)
    ax.margins(x=0.12)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    finish(fig, d, os.path.join(out, "colocated_frontier.png"))


def main(argv=None):
    require_pyplot("plot_serve.py")
    ap = argparse.ArgumentParser(prog="dsbench plot-serve", description=__doc__.split("\n\n")[0],
                                 epilog="Figures: goodput_vs_load, cdf_ttft, cdf_tpot, timeline, colocated, "
                                        "colocated_frontier (.png).")
    ap.add_argument("result", help="the serve benchmark's JSON result file (serve --out)")
    ap.add_argument("--out", default=None, help="directory for the PNGs (made if missing; default: the file's)")
    ap.add_argument("--timeline-mode", default=None,
                    help="plot this mode's run from \"timelines\" instead of the file's \"timeline\"")
    ap.add_argument("--prefix", default="", help="prepended to each PNG's name (e.g. serve_)")
    args = ap.parse_args(argv)
    global PREFIX
    PREFIX = args.prefix

    d = read_result(args.result, "plot_serve.py")
    out = out_dir(args.out, args.result)

    modes = mode_names(d)
    plot_goodput(d, modes, out)
    plot_cdf(d, modes, out, "ttft_ms", "ttft_ms", "TTFT", "cdf_ttft.png")
    plot_cdf(d, modes, out, "tpot_ms", "tpot_ms", "TPOT", "cdf_tpot.png")
    plot_timeline(d, out, args.timeline_mode)
    plot_colocated(d, modes, out)
    plot_frontier(d, out)

