"""dsbench: the analysis of libdetshare's benchmark results (docs/benchmarks.md).

    python3 bench/dsbench COMMAND [ARGS]                 # from the repository root
    PYTHONPATH=bench python3 -m dsbench COMMAND [ARGS]

One module per command (COMMANDS below); `python3 bench/dsbench COMMAND --help`
gives a command's arguments. Standard library only, except the plot-* commands,
which need matplotlib (plotstyle.py: the style and helpers they share).
"""
import importlib
import sys

# (command, module, what it makes and from which input), in the order --help lists them.
COMMANDS = (
    ("headline", "headline",
     "README.md's results block from docs/results/<device>/*.json (--check: exit 1 where it or a page "
     "results-readme writes differs)"),
    ("results-readme", "results_readme",
     "docs/results/README.md (the index) and each device folder's README.md from its JSON and notes"),
    ("plot-results", "plot_results",
     "colocate.png from colocate_sweep.json (--sweep), pairs.png from pairs.json (--pairs)"),
    ("plot-serve", "plot_serve",
     "goodput_vs_load, cdf_ttft, cdf_tpot, timeline, colocated, colocated_frontier .png from serve.json"),
    ("plot-torch", "plot_torch",
     "pairs_torch.png from pairs_torch.json, colocate_torch.png from colocate_torch.json"),
    ("plot-serve-torch", "plot_serve_torch",
     "serve_torch_load.png and serve_torch_colocated.png from serve_torch.json"),
    ("plot-arrivals", "plot_arrivals",
     "colocate_arrivals.png (TPOT p99 against BE share per policy, a panel per load) from colocate_arrivals.json"),
    ("trace-summary", "trace_summary",
     "text: lates, runs and tiers per file of colocate --trace-dir's CSVs (--pair: against fixed splits)"),
    ("replay-sizing", "replay_sizing",
     "text: slo_aware's sizing replayed on a colocate sweep JSON's traces, with its verdict (--self-test)"),
    ("pair-configs", "pair_configs",
     "text: each configuration minus a base one, per repetition, from colocate sweep JSON files"),
    ("be-remap-split", "be_remap_split",
     "text: slo* windows' LS p50 minus the base's, split by BE remaps, from colocate logs"),
    ("make-trace", "make_trace",
     "a synthetic request trace CSV (conversation, long-prompts, long-outputs, short; poisson or bursty)"),
    ("serve-variants", "serve_variants",
     "text: W5 variants (serve_variant_*.json) side by side per trace shape, with the defaults' checks "
     "against the tuned run and against single (--check: exit 1 where one fails)"),
    ("merge-sweep", "merge_sweep",
     "one W1 sweep file from sweeps run in parts (one fixed SLO), each load with its own part's figures"),
    ("strip-paths", "strip_paths",
     "machine paths out of a results folder's JSON, TXT and LOG files (gpu-run.sh runs it last)"),
    ("compare-results", "compare_results",
     "compare.json and its table from tools/gpu-compare.sh's folder (base/ and new/ JSON files)"),
)


def usage():
    width = max(len(name) for name, _, _ in COMMANDS)
    lines = ["usage: python3 bench/dsbench COMMAND [ARGS]   (or PYTHONPATH=bench python3 -m dsbench COMMAND)",
             "", "commands (COMMAND --help for a command's arguments):"]
    lines += ["  %-*s  %s" % (width, name, what) for name, _, what in COMMANDS]
    return "\n".join(lines)


def main(argv):
    """Runs COMMAND (argv[0]) with the rest of argv; returns its exit status."""
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    module = dict((name, mod) for name, mod, _ in COMMANDS).get(argv[0])
    if module is None:
        print("dsbench: no command %r\n%s" % (argv[0], usage()), file=sys.stderr)
        return 2
    return importlib.import_module("." + module, __name__).main(argv[1:])
