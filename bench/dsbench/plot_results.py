"""Figures from the benchmark results (docs/benchmarks.md: W1 load sweep, W2).

  colocate_sweep.json -> colocate.png: the trade-off frontier at each LS load
      of the sweep, one panel per load: LS p99 (normalized to LS alone at the
      same load; log scale where the range is wide) against BE throughput
      (normalized to BE alone), medians over the repetitions with min-max
      error bars in both axes; the static@N splits joined by a line and
      labelled with N, priority as a square, slo_aware as a star, any other
      co-located configuration as a small dot; each panel's title gives the
      load's verdict (ok / NOT ok). A file without repetitions (written before
      --reps: no *_min keys) is drawn as before: one line per policy through
      the loads (as in the DetShare paper's Figure 7).
  colocate.json (the main job's, one load) -> colocate.png: the same
      frontier as one panel of the sweep, each configuration of the run.
  pairs.json -> pairs.png: sum_norm per pair, one bar per policy (as in the
      DetShare paper's Figure 6).

usage: python3 bench/dsbench plot-results [--sweep FILE | --colocate FILE] [--pairs FILE] [--outdir DIR]
Each input that is given and exists is drawn; a missing one is skipped with a
message. Without matplotlib the command says so and exits with status 0, so a
run script can call it unconditionally.
"""
import argparse
import json
import os

from . import plotstyle
from .plotstyle import static_sms


def load(path):
    with open(path) as f:
        return json.load(f)


def subtitle(doc):
    sim = " [SIMULATED]" if doc.get("simulated") else ""
    return "%s%s, %s SMs, driver %s, commit %s, %s" % (
        doc.get("device", "?"), sim, doc.get("sms", "?"), doc.get("driver", "?"),
        doc.get("commit", "?"), doc.get("date", "?"))


def plot_sweep_lines(plt, doc, out):
    """The first shape of the file: one line per policy through the loads."""
    sweep = doc.get("sweep") or {}
    loads = sorted(sweep, key=float)
    policies = []
    for l in loads:
        for name, v in sweep[l].items():
            if isinstance(v, dict) and name not in policies and v.get("be_tput_norm") is not None:
                policies.append(name)
    if not loads or not policies:
        print("plot_results: %s has no co-located sweep points" % out)
        return False
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    markers = "osD^v<>px*"
    for i, pol in enumerate(policies):
        xs, ys, ls = [], [], []
        for l in loads:
            v = sweep[l].get(pol)
            if not isinstance(v, dict):
                continue
            x, y = v.get("be_tput_norm"), v.get("ls_p99_norm")
            if x is None or y is None or y <= 0:
                continue
            xs.append(x)
            ys.append(y)
            ls.append(l)
        if not xs:
            continue
        ax.plot(xs, ys, marker=markers[i % len(markers)], label=pol, linewidth=1.2)
        for x, y, l in zip(xs, ys, ls):
            ax.annotate(l, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=6, alpha=0.7)
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel("BE throughput (normalized to BE alone)")
    ax.set_ylabel("LS p99 latency (normalized to LS alone at the same load, log)")
    ax.set_title("colocate sweep: LS load %s-%s (labels: load)\n%s" % (loads[0], loads[-1], subtitle(doc)),
                 fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    plt.close(fig)
    print("plot_results: wrote %s" % out)
    return True


def is_frontier_doc(doc):
    """True for a sweep written with repetitions (medians with _min/_max)."""
    for per_load in (doc.get("sweep") or {}).values():
        for v in per_load.values():
            if isinstance(v, dict) and "ls_p99_norm_min" in v:
                return True
    return False


def point(v):
    """(x, y, xerr, yerr) of one configuration: medians and min-max bars; None without both figures."""
    x, y = v.get("be_tput_norm"), v.get("ls_p99_norm")
    if x is None or y is None or y <= 0:
        return None

    def bar(mid, lo, hi):
        lo = mid if lo is None else lo
        hi = mid if hi is None else hi
        return [max(0.0, mid - lo)], [max(0.0, hi - mid)]

    return (x, y, bar(x, v.get("be_tput_norm_min"), v.get("be_tput_norm_max")),
            bar(y, v.get("ls_p99_norm_min"), v.get("ls_p99_norm_max")))


def verdict_text(verdict):
    """One load's verdict in a line. Files since the verdict reads attainment intervals (attainment_interval:
    best_baseline is the best clearly meeting one) give slo_aware's interval; older ones, median attainment."""
    if not isinstance(verdict, dict) or verdict.get("ok") is None:
        return "no verdict"
    text = "ok" if verdict["ok"] else "NOT ok"
    interval = "attainment_interval" in verdict
    best = verdict.get("best_baseline")
    if best:
        text += ", best %s %.3f" % (best, verdict.get("best_baseline_be") or float("nan"))
        if verdict.get("slo_aware_be_minus_best") is not None:
            text += ", slo_aware %+.3f" % verdict["slo_aware_be_minus_best"]
    else:
        text += ", no baseline clearly meets" if interval else ", no baseline meets"
    if not verdict.get("slo_aware_meets"):
        text += ", slo_aware misses"
    att = (verdict.get("attainment_interval") or {}).get("slo_aware")
    if att and None not in att:
        text += " [%.4f, %.4f]" % tuple(att)
    dom = verdict.get("slo_aware_dominated_by") or []
    if dom:
        text += ", dominated by " + ", ".join(dom)
    return text


def plot_frontier_panel(ax, per_load, verdict, load):
    ys_all = []
    statics = []
    for name, v in per_load.items():
        if not isinstance(v, dict):
            continue
        p = point(v)
        if p is None:
            continue
        ys_all += [p[1] - p[3][0][0], p[1] + p[3][1][0]]
        n = static_sms(name)
        if n is not None:
            statics.append((n, p))
            continue
        if name == "slo_aware":
            style = dict(marker="*", markersize=13, color="tab:red", zorder=5)
        elif name == "priority":
            style = dict(marker="s", markersize=7, color="tab:blue", zorder=4)
        else:
            style = dict(marker="o", markersize=4, color="tab:gray", alpha=0.8, zorder=3)
        ax.errorbar([p[0]], [p[1]], xerr=p[2], yerr=p[3], linestyle="none", label=name, capsize=2,
                    elinewidth=0.8, **style)
    if statics:
        statics.sort()
        xs = [p[0] for _, p in statics]
        ys = [p[1] for _, p in statics]
        xerr = [[p[2][0][0] for _, p in statics], [p[2][1][0] for _, p in statics]]
        yerr = [[p[3][0][0] for _, p in statics], [p[3][1][0] for _, p in statics]]
        ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, marker="o", markersize=4, color="tab:green", linewidth=1.0,
                    capsize=2, elinewidth=0.8, label="static@N", zorder=2)
        for (n, p) in statics:
            ax.annotate(str(n), (p[0], p[1]), textcoords="offset points", xytext=(4, 3), fontsize=7,
                        color="tab:green")
    ys_pos = [y for y in ys_all if y > 0]
    if ys_pos and max(ys_pos) / min(ys_pos) > 20:
        ax.set_yscale("log")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ok = isinstance(verdict, dict) and verdict.get("ok")
    text = verdict_text(verdict)
    head, _, rest = text.partition(", ")
    ax.set_title("load %s: %s%s" % (load, head, "\n" + rest if rest else ""), fontsize=7,
                 color="black" if ok or not isinstance(verdict, dict) else "tab:red")
    ax.grid(True, which="both", alpha=0.3)
    ax.tick_params(labelsize=7)


def as_sweep(doc):
    """A single-load colocate run (the main job's colocate.json: `configs`, no
    `sweep`) as a sweep of one load, its verdict under it; any other document
    as it is."""
    if doc.get("sweep") or not isinstance(doc.get("configs"), dict):
        return doc
    load = "%.2f" % float(doc.get("ls_load") or 0.0)
    out = dict(doc)
    out["sweep"] = {load: doc["configs"]}
    out["verdict"] = {load: doc.get("verdict")} if doc.get("verdict") is not None else {}
    return out


def plot_sweep(plt, doc, out):
    doc = as_sweep(doc)
    if not is_frontier_doc(doc) and len(doc.get("sweep") or {}) > 1:
        return plot_sweep_lines(plt, doc, out)
    sweep = doc.get("sweep") or {}
    verdicts = doc.get("verdict") or {}
    loads = sorted(sweep, key=float)
    if not loads:
        print("plot_results: %s has no sweep points" % out)
        return False
    ncols = min(3, len(loads))
    nrows = (len(loads) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(7.5, 4.6 * ncols), 3.9 * nrows + 0.8), squeeze=False)
    for idx, load in enumerate(loads):
        ax = axes[idx // ncols][idx % ncols]
        plot_frontier_panel(ax, sweep[load], verdicts.get(load), load)
        if idx % ncols == 0:
            ax.set_ylabel("LS p99 / LS alone (same load)", fontsize=8)
        if idx // ncols == nrows - 1:
            ax.set_xlabel("BE throughput / BE alone", fontsize=8)
    for idx in range(len(loads), nrows * ncols):
        axes[idx // ncols][idx % ncols].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=8, frameon=False)
    reps = doc.get("reps", 1)
    fig.suptitle("colocate%s: medians over %s repetition(s), bars min-max; target %s\n%s" % (
        " sweep" if len(loads) > 1 else "", reps, doc.get("target", "?"), subtitle(doc)), fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    fig.savefig(out, dpi=130)
    plt.close(fig)
    print("plot_results: wrote %s" % out)
    return True


def plot_pairs(plt, doc, out):
    configs = doc.get("configs") or {}
    policies = list(configs)
    pairs = []
    for pol in policies:
        for pair in configs[pol]:
            if pair not in pairs:
                pairs.append(pair)
    if not policies or not pairs:
        print("plot_results: %s has no configurations" % out)
        return False
    fig, ax = plt.subplots(figsize=(max(7.0, 1.9 * len(pairs) + 2), 4.8))
    width = 0.8 / len(policies)
    for i, pol in enumerate(policies):
        xs = [j + (i - (len(policies) - 1) / 2) * width for j in range(len(pairs))]
        ys = [(configs[pol].get(p) or {}).get("sum_norm") or 0.0 for p in pairs]
        ax.bar(xs, ys, width, label=pol)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xticks(range(len(pairs)))
    ax.set_xticklabels(pairs)
    ax.set_ylabel("sum of normalized throughputs (sum_norm)")
    ax.set_title("pairs: two BE training tenants, %s s per run\n%s" % (doc.get("seconds", "?"), subtitle(doc)),
                 fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=min(4, len(policies)))
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    plt.close(fig)
    print("plot_results: wrote %s" % out)
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(prog="dsbench plot-results", description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", help="colocate --sweep result (colocate_sweep.json)")
    ap.add_argument("--colocate", help="a one-load colocate result (the main job's build/colocate.json)")
    ap.add_argument("--pairs", help="pairs result (pairs.json)")
    ap.add_argument("--outdir", default=".", help="where colocate.png and pairs.png go (default .)")
    args = ap.parse_args(argv)
    if args.sweep and args.colocate:
        ap.error("give --sweep or --colocate, not both (both write colocate.png)")
    args.sweep = args.sweep or args.colocate
    if not args.sweep and not args.pairs:
        ap.error("give --sweep (or --colocate) and/or --pairs")
    plt = plotstyle.plt
    if plt is None:
        print("plot_results: matplotlib is not installed here; no plots drawn")
        return 0
    os.makedirs(args.outdir, exist_ok=True)
    jobs = [(args.sweep, "colocate.png", plot_sweep), (args.pairs, "pairs.png", plot_pairs)]
    rc = 0
    for path, name, fn in jobs:
        if not path:
            continue
        if not os.path.exists(path):
            print("plot_results: %s not found; %s skipped" % (path, name))
            continue
        try:
            fn(plt, load(path), os.path.join(args.outdir, name))
        except (OSError, ValueError, KeyError, TypeError) as e:
            print("plot_results: %s: %s" % (path, e))
            rc = 1
    return rc

