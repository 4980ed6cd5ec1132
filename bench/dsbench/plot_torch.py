"""Figures of the PyTorch pairs and co-location benchmarks from their result files.

    python3 bench/dsbench plot-torch [--pairs pairs_torch.json] [--colocate colocate_torch.json] [--out-dir DIR]

e.g. `/usr/bin/python3 bench/dsbench plot-torch --pairs docs/results/h200/pairs_torch.json
--colocate docs/results/h200/colocate_torch.json --out-dir docs/results/h200` writes, in DIR (default: each
result file's directory):

  pairs_torch.png     (pairs_torch.py; like the paper's Figure 6) per pair, one
                      stacked bar per policy: job a's throughput normalized to a
                      alone (solid) under job b's (hatched), so a bar's height is
                      the pair's sum; 1.0 dotted; above each pair the best
                      policy's sum over temporal's.
  colocate_torch.png  (colocate_torch.py; like the paper's Figure 7) one panel
                      per LS+BE pair: TPOT p99 over LS alone (y) against BE
                      throughput over BE alone (x); one marker per policy at the
                      median over repetitions, error bars from the smallest to
                      the largest repetition; the TPOT bound dashed. Better is
                      down and to the right.

Exit 1 when a file cannot be read or matplotlib is missing. Needs matplotlib
(apt-get install python3-matplotlib) and the standard library.
"""

import argparse
import os

from .plotstyle import POLICY_STYLE, caption, finish, finite, plt, read_json, require_pyplot


def save(fig, d, path):
    """plotstyle.finish with device, driver and commit (pairs_torch.py and colocate_torch.py run on a GPU only)."""
    finish(fig, caption(d), path)


def plot_pairs(d, path):
    pairs = [(k, p) for k, p in (d.get("pairs") or {}).items() if p.get("configs")]
    if not pairs:
        print("plot_torch: no pairs with results in the file")
        return
    pols = [p for p in POLICY_STYLE if any(p in pr["configs"] for _, pr in pairs)]
    width = 0.8 / len(pols)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.6 * len(pairs) + 2), 5.0))
    top = 0.0
    for i, pol in enumerate(pols):
        colour = POLICY_STYLE[pol][0]
        for j, (_, pr) in enumerate(pairs):
            c = pr["configs"].get(pol)
            if not c or not finite(c.get("a_norm")) or not finite(c.get("b_norm")):
                continue
            x = j + (i - (len(pols) - 1) / 2) * width
            ax.bar(x, c["a_norm"], width, color=colour, edgecolor="white", linewidth=0.4,
                   label=pol if j == 0 or not ax.get_legend_handles_labels()[1].count(pol) else None)
            ax.bar(x, c["b_norm"], width, bottom=c["a_norm"], color=colour, alpha=0.55, hatch="//",
                   edgecolor="white", linewidth=0.4)
            top = max(top, c["a_norm"] + c["b_norm"])
    for j, (_, pr) in enumerate(pairs):
        if finite(pr.get("best_over_temporal")):
            ax.text(j, top * 1.03, "%.2fx\n%s" % (pr["best_over_temporal"], pr.get("best_policy", "")),
                    ha="center", va="bottom", fontsize=7)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xticks(range(len(pairs)))
    ax.set_xticklabels(["%s\n%s+%s\n(%s)" % (k, pr["a"], pr["b"], pr.get("contention", "")) for k, pr in pairs],
                       fontsize=7)
    ax.set_ylim(0, top * 1.22 if top else 2)
    ax.set_ylabel("normalized throughput: job a (solid) + job b (hatched)")
    ax.set_title("Two training jobs on one GPU: sum of throughputs normalized to each alone (%s s per policy)"
                 % d.get("window_s", "?"), fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    seen = {}
    for h, lab in zip(handles, labels):
        seen.setdefault(lab, h)
    ax.legend(seen.values(), seen.keys(), fontsize=7, ncol=len(seen), loc="upper left")
    save(fig, d, path)


def plot_colocate(d, path):
    pairs = [(k, p) for k, p in (d.get("pairs") or {}).items() if p.get("summary")]
    if not pairs:
        print("plot_torch: no co-location pairs with a summary in the file")
        return
    cols = min(2, len(pairs))
    rows = (len(pairs) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.0 * rows), squeeze=False)
    bound = d.get("p99_bound")
    for n, (key, pr) in enumerate(pairs):
        ax = axes[n // cols][n % cols]
        for pol, f in pr["summary"].items():
            if pol not in POLICY_STYLE or "tpot_p99_norm" not in f:
                continue
            y, x = f["tpot_p99_norm"], f["be_norm"]
            if not finite(y.get("median")) or not finite(x.get("median")):
                continue
            colour, marker = POLICY_STYLE[pol]
            ax.errorbar([x["median"]], [y["median"]],
                        xerr=[[x["median"] - x["min"]], [x["max"] - x["median"]]],
                        yerr=[[y["median"] - y["min"]], [y["max"] - y["median"]]],
                        fmt=marker, color=colour, ms=7, capsize=2, label=pol)
        if finite(bound):
            ax.axhline(bound, color="#d62728", linewidth=0.8, linestyle="--")
        ax.axhline(1.0, color="grey", linewidth=0.6, linestyle=":")
        ax.set_ylim(bottom=0.9)
        ax.set_xlim(0, 1.05)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("BE throughput / BE alone")
        ax.set_ylabel("TPOT p99 / LS alone")
        ax.grid(True, alpha=0.3, which="both")
        ax.legend(fontsize=7)
    for n in range(len(pairs), rows * cols):
        axes[n // cols][n % cols].axis("off")
    fig.suptitle("Decoding (LS) beside training (BE)\nmedians over %s repetitions, min-max bars; TPOT bound "
                 "dashed" % d.get("reps", "?"), fontsize=9)
    save(fig, d, path)


def load(path):
    return read_json(path, "plot_torch.py")


def main(argv=None):
    require_pyplot("plot_torch.py", how="apt-get install python3-matplotlib")
    ap = argparse.ArgumentParser(prog="dsbench plot-torch", description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", help="pairs_torch.py's result file")
    ap.add_argument("--colocate", help="colocate_torch.py's result file")
    ap.add_argument("--out-dir", help="where the PNGs go (default: beside each result file)")
    a = ap.parse_args(argv)
    if not a.pairs and not a.colocate:
        ap.error("give --pairs and/or --colocate")
    if a.pairs:
        plot_pairs(load(a.pairs), os.path.join(a.out_dir or os.path.dirname(a.pairs) or ".", "pairs_torch.png"))
    if a.colocate:
        plot_colocate(load(a.colocate),
                      os.path.join(a.out_dir or os.path.dirname(a.colocate) or ".", "colocate_torch.png"))
    return 0

