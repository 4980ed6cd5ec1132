#!/usr/bin/env python3
"""Figures from the benchmark results (docs/benchmarks.md: W1 load sweep, W2).

  colocate_sweep.json -> colocate.png: LS p99 (normalized to LS alone at the
      same load, log scale) against BE throughput (normalized to BE alone), one
      line per policy through the LS loads of the sweep (as in the DetShare
      paper's Figure 7).
  pairs.json -> pairs.png: sum_norm per pair, one bar per policy (as in the
      DetShare paper's Figure 6).

usage: plot_results.py [--sweep FILE] [--pairs FILE] [--outdir DIR]
Each input that is given and exists is drawn; a missing one is skipped with a
message. Without matplotlib the script says so and exits with status 0, so a
run script can call it unconditionally.
"""
import argparse
import json
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def subtitle(doc):
    sim = " [SIMULATED]" if doc.get("simulated") else ""
    return "%s%s, %s SMs, driver %s, commit %s, %s" % (
        doc.get("device", "?"), sim, doc.get("sms", "?"), doc.get("driver", "?"),
        doc.get("commit", "?"), doc.get("date", "?"))


def plot_sweep(plt, doc, out):
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", help="colocate --sweep result (colocate_sweep.json)")
    ap.add_argument("--pairs", help="pairs result (pairs.json)")
    ap.add_argument("--outdir", default=".", help="where colocate.png and pairs.png go (default .)")
    args = ap.parse_args()
    if not args.sweep and not args.pairs:
        ap.error("give --sweep and/or --pairs")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_results: matplotlib is not installed here; no plots drawn")
        return 0
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


if __name__ == "__main__":
    sys.exit(main())
