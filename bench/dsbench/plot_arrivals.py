"""The frontier of the realistic-arrivals co-location benchmark (bench/torch/colocate_arrivals.py).

    python3 bench/dsbench plot-arrivals RESULT.json [MORE.json ...] [--out-dir DIR] [--pooled]

writes, in DIR (default: the first result file's directory), colocate_arrivals.png:
one row of panels per LS+BE pair and one panel per load: per configuration
one marker at TPOT p99 over LS alone (x) against BE throughput over BE alone
of the same variant (y, "BE share"), the medians over repetitions with error
bars from the smallest to the largest repetition (--pooled: x is the p99
over all repetitions' requests over alone's, no x bars). Colour and marker by
policy (plotstyle.POLICY_STYLE); static@N labelled N; the unsegmented-BE
configurations (NAME/unseg) hollow. Better is left and up. Several files
(e.g. one per pair, or the 20% run and the frontier's other loads) are drawn
as one: their pairs and loads merged, a later file's load replacing an
earlier one's, the caption from the first with every file's commit; a panel
of a pair and load no file ran says "not run".

Exit 1 when the file cannot be read, has no summary, or matplotlib is missing.
Needs matplotlib (apt-get install python3-matplotlib) and the standard library.
"""

import argparse
import os

from .plotstyle import POLICY_STYLE, caption, finish, finite, out_dir, plt, read_result, require_pyplot

PNG = "colocate_arrivals.png"


def points(summary, pooled=False):
    """(config, policy, x, y, xerr, yerr) of every configuration of a load's
    summary with finite medians; errors as [[below], [above]]."""
    out = []
    for cfg, f in summary.items():
        if cfg in ("ls_alone", "be_alone") or not isinstance(f, dict) or "be_norm" not in f:
            continue
        y = f["be_norm"]
        if pooled:
            x = f.get("pooled", {}).get("tpot_p99_norm")
            xerr = [[0.0], [0.0]]
        else:
            xm = f.get("tpot_p99_norm", {})
            x = xm.get("median")
            xerr = [[x - xm["min"]], [xm["max"] - x]] if finite(x) else None
        if not finite(x) or not finite(y.get("median")):
            continue
        ym = y["median"]
        out.append((cfg, cfg.split("/")[0].split("@")[0], x, ym, xerr, [[ym - y["min"]], [y["max"] - ym]]))
    return out


def merge(results):
    """One result of several colocate_arrivals files: pairs and their loads
    merged in order; ``commit`` lists every file's commit (each once, in
    order), so that the caption names all the code the figure shows."""
    out = dict(results[0])
    out["pairs"] = {}
    commits = []
    for d in results:
        if d.get("commit") and str(d["commit"]) not in commits:
            commits.append(str(d["commit"]))
        for key, pr in (d.get("pairs") or {}).items():
            mine = out["pairs"].setdefault(key, dict(pr, loads={}))
            mine["loads"].update(pr.get("loads") or {})
    if commits:
        out["commit"] = ", ".join(commits)
    return out


def plot(d, path, pooled=False):
    pairs = [(k, pr) for k, pr in (d.get("pairs") or {}).items()
             if any(lr.get("summary") for lr in (pr.get("loads") or {}).values())]
    if not pairs:
        raise SystemExit("plot_arrivals.py: no pair with a summary in the file")
    loads = sorted({ld for _, pr in pairs for ld, lr in pr["loads"].items() if lr.get("summary")}, key=float)
    from matplotlib.ticker import FuncFormatter

    fig, axes = plt.subplots(len(pairs), len(loads), figsize=(4.2 * len(loads), 3.8 * len(pairs)), squeeze=False)
    for i, (key, pr) in enumerate(pairs):
        for j, ld in enumerate(loads):
            ax = axes[i][j]
            lr = pr["loads"].get(ld) or {}
            if not lr.get("summary"):  # this pair was not run at this load
                ax.axis("off")
                ax.text(0.5, 0.5, "%s, load %s:\nnot run" % (key, ld), ha="center", va="center", fontsize=8,
                        color="grey", transform=ax.transAxes)
                continue
            seen = set()
            for cfg, pol, x, y, xerr, yerr in points(lr.get("summary") or {}, pooled):
                colour, marker = POLICY_STYLE.get(pol, ("#333333", "o"))
                hollow = cfg.endswith("/unseg")
                label = pol + (" (unseg BE)" if hollow else "")
                ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt=marker, ms=7, capsize=2, color=colour,
                            mfc="none" if hollow else colour, label=None if label in seen else label)
                seen.add(label)
                if "@" in cfg:
                    ax.annotate(cfg.split("@")[1].split("/")[0], (x, y), textcoords="offset points", xytext=(5, 4),
                                fontsize=6, color=colour)
            ax.axvline(1.0, color="grey", linewidth=0.6, linestyle=":")
            ax.set_xscale("log")  # tails from 0.3x to 10x alone: a linear axis crowds the good ones
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
            ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: "%g" % v if round(v, 3) in (0.2, 0.5, 2, 3, 5) else ""))
            ax.set_ylim(0, 1.05)
            ax.set_title("%s, load %s (%.2f req/s)" % (key, ld, lr.get("rate_rps", float("nan"))), fontsize=8)
            ax.set_xlabel("TPOT p99 / LS alone" + (" (pooled)" if pooled else ""))
            ax.set_ylabel("BE throughput / BE alone")
            ax.grid(True, alpha=0.3)
            if seen:
                ax.legend(fontsize=6)
    fig.suptitle("Decoding with Azure-code-trace arrivals\nbeside training (BE step in segments of %s us)\n"
                 "medians over %s repetitions, min-max bars;\nbetter is left and up (x log scale)"
                 % (d.get("segment_us", "?"), d.get("reps", "?")), fontsize=9)
    finish(fig, caption(d), path)


def main(argv=None):
    require_pyplot("plot_arrivals.py", how="apt-get install python3-matplotlib")
    ap = argparse.ArgumentParser(prog="dsbench plot-arrivals", description=__doc__.splitlines()[0])
    ap.add_argument("result", nargs="+", help="colocate_arrivals.py's result files (drawn as one)")
    ap.add_argument("--out-dir", help="where the PNG goes (default: beside the result file)")
    ap.add_argument("--pooled", action="store_true", help="x: the p99 over all repetitions' requests")
    a = ap.parse_args(argv)
    d = merge([read_result(r, "plot_arrivals.py") for r in a.result])
    plot(d, os.path.join(out_dir(a.out_dir, a.result[0]), PNG), a.pooled)
    return 0
