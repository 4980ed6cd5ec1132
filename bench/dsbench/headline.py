"""Renders README.md's results block from the result files in docs/results/.

README.md quotes no figure by hand: the block between the markers
`<!-- results:begin -->` and `<!-- results:end -->` is this script's output,
so every figure there is one of docs/results/<device>/*.json, with its device
and commit. `python3 bench/dsbench headline` rewrites the block; with `--check`
it fails (exit 1) when the block differs from what the files say, or when a
README that `results-readme` writes under docs/results does (the unit test
readme_results runs it).
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/dsbench/../..
RESULTS = os.path.join(ROOT, "docs", "results")
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"

# W1 configurations in the order a reader compares them.
W1_ORDER = ["shared", "priority", "temporal", "static", "slo_aware", "slo_aware_nogates", "tpot_first"]
W1_WHAT = {
    "shared": "same-priority streams on the whole GPU (MPS-like)",
    "priority": "stream priorities on the whole GPU",
    "temporal": "one tenant at a time",
    "static": "fixed disjoint split (MIG-like)",
    "slo_aware": "default policy: LS tier, BE yields through gates",
    "slo_aware_nogates": "slo_aware without gates",
    "tpot_first": "decode first",
}


# The devices of the front page's columns: each one's results folder under
# docs/results (a list: the first folder holding a file wins).
DEVICES = [("H100", ["h100"]), ("H200", ["h200"])]
NOT_RUN = "not run"


def find(name):
    """{device: (path under docs/results, result)} for every device with the file."""
    out = {}
    for dev, dirs in DEVICES:
        for sub in dirs:
            rel = os.path.join(sub, name)
            p = os.path.join(RESULTS, rel)
            if os.path.exists(p):
                with open(p) as f:
                    out[dev] = (rel, json.load(f))
                break
    return out


def link(rel, text):
    return "[%s](docs/results/%s)" % (text, rel)


def origins(found, extra=None):
    """Per device: its file's device name and driver (and `extra(d)`); the
    front page quotes no commit (each file names its own)."""
    parts = []
    for dev, _ in DEVICES:
        if dev not in found:
            continue
        rel, d = found[dev]
        parts.append("%s: %s, driver %s%s" % (link(rel, dev), d["device"], d["driver"],
                                               ("; " + extra(d)) if extra else ""))
    return "; ".join(parts) if parts else "no run yet"


def table(first, rows, found, cell):
    """A markdown table: `first` columns, then one column per device; rows
    are (first cells, key); cell(d, key) gives a device's text or None."""
    out = ["| %s | %s |" % (" | ".join(first), " | ".join(dev for dev, _ in DEVICES)),
           "| %s | %s |" % (" | ".join("---" for _ in first), " | ".join("---:" for _ in DEVICES))]
    for cells, key in rows:
        devs = []
        for dev, _ in DEVICES:
            text = cell(found[dev][1], key) if dev in found else None
            devs.append(link(found[dev][0], text) if text else NOT_RUN)
        out.append("| %s | %s |" % (" | ".join(cells), " | ".join(devs)))
    return out


def norm(x):
    return ("%.2f" % x) if x < 100 else ("%.0f" % x)


def render():
    out = []
    w1 = find("colocate.json")
    out.append("**W1, LS decode-like requests beside BE training** (%s). Each cell: LS p99 over LS alone "
               "(1.00 = no interference), the share of LS requests over the SLO, BE throughput over BE "
               "alone (at most 1 - load)." % origins(
                   w1, lambda d: "LS load %.0f%%, %d requests, one run" % (100 * d["ls_load"], d["requests"])))
    out.append("")

    def w1_cell(d, name):
        c = d["configs"].get(name)
        if not c:
            return None
        return "%sx, %.1f%%, %.3f" % (norm(c["ls_p99_norm"]), 100 * c["ls_over_slo_frac"], c["be_tput_norm"])

    out += table(["configuration", "what"], [(["`%s`" % n, W1_WHAT[n]], n) for n in W1_ORDER], w1, w1_cell)
    out.append("")
    w2 = find("pairs.json")
    out.append("**W2, two training tenants** (%s): the sum of both tenants' throughputs, each normalized to "
               "running alone, with the best policy per pair and its gain over `temporal`:" % origins(w2))
    out.append("")
    pairs = []
    for _, (_, d) in sorted(w2.items()):
        pairs += [p for p in d["best"] if p not in pairs]

    def w2_cell(d, pair):
        b = d["best"].get(pair)
        return "`%s` %.3f (%.2fx)" % (b["policy"], b["sum_norm"], b["over_temporal"]) if b else None

    out += table(["pair"], [([p], p) for p in pairs], w2, w2_cell)
    out.append("")
    w3 = find("determinism.json")
    out.append("**W3, determinism** (%s): trials of an LM head (bf16 GEMM 4096 x 128256, fp32 softmax, "
               "argmax) under co-location and forced remaps over every pCtx with a bitwise difference from "
               "the kernel alone:" % origins(w3))
    out.append("")
    out += table(["launched"], [(["with libdetshare"], "detshare"),
                                (["with kernel slicing (the reduction split by the free SMs)"], "slicing")], w3,
                 lambda d, k: "%d of %d" % (d[k]["bitwise_mismatch_trials"], d[k].get("trials", d["trials"])))
    out.append("")
    w4 = find("overhead.json")
    out.append("**W4, overhead** (%s), medians:" % origins(w4))
    out.append("")
    out += table(["host cost"], [
        (["`ds_launch` over `cuLaunchKernel`"], lambda d: "%.3fx (+%.0f ns)" % (d["launch_ratio"],
                                                                            d["launch_added_ns"])),
        (["a remap"], lambda d: "%.2f us" % d["remap_us"]),
        (["a gate honours a decision (host-written words, the default)"], lambda d: "%.1f us" % d["gate_us_host"]),
        (["the same through the resident control kernel"], lambda d: "%.1f us" % d["gate_us_rck"])],
        w4, lambda d, f: f(d))
    w5 = find("serve.json")
    if w5:
        out.append("")
        out += serve_block(w5)
    return "\n".join(out) + "\n"


# serve's policy flags and their defaults: a run that set any of them was tuned by hand
SERVE_TUNING = ["--ls-sms", "--tpot-ls-sms", "--be-window-us", "--prefill-whole", "--prefill-press", "--param"]


def tuning(d):
    """Whether a serve result ran the policies with their defaults or with hand-set flags."""
    words = str(d.get("command", "")).split()
    flags = ["%s %s" % (w, words[i + 1]) for i, w in enumerate(words[:-1]) if w in SERVE_TUNING]
    return ("policy flags set by hand: `%s`" % " ".join(flags)) if flags else "policies at their defaults"


def serve_block(found):
    """W5: per mode, the highest load meeting both SLOs on 90% of requests,
    and the figures at the middle load of the sweep."""
    def extra(d):
        mid = d["loads"][len(d["loads"]) // 2]
        return ("%d of 32 layers, SLOs TTFT %.0f ms / TPOT %.1f ms, %d windows of %d requests, load 1.0 = %.1f "
                "requests/s, figures at load %.2f, %s" % (
                    d["model"]["layers"], d["slo"]["ttft_ms"], d["slo"]["tpot_ms"], d["workload"]["repetitions"],
                    d["workload"]["requests_per_run"], d["workload"]["capacity_rps"], mid["load"], tuning(d)))

    out = ["**W5, LLM serving** (Llama-3-8B-shaped, Azure code trace; %s). Each cell: capacity (the highest "
           "load at which a mode meets both SLOs on 90%% of its requests), then TTFT / TPOT p99 and goodput "
           "at the middle load:" % origins(found, extra), ""]
    modes = []
    for _, (_, d) in sorted(found.items()):
        modes += [m for m in d["loads"][len(d["loads"]) // 2]["modes"] if m not in modes]

    def cell(d, m):
        mid = d["loads"][len(d["loads"]) // 2]
        v = mid["modes"].get(m)
        if not v:
            return None
        c = d.get("capacity_at_slo", {}).get(m, {})
        low = min(ld["load"] for ld in d["loads"])
        capacity = ("< %.2f" % low) if c.get("censored") and not c.get("load") else (
            (">= %.2f" if c.get("censored") else "%.2f") % c.get("load", float("nan")))
        return "%s; %.0f / %.2f ms, %.2f rps" % (capacity, v["ttft_p99_ms"], v["tpot_p99_ms"], v["goodput_rps"])

    return out + table(["mode"], [(["`%s`" % m], m) for m in modes], found, cell)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    readme = os.path.join(ROOT, "README.md")
    with open(readme) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        print("headline: README.md lacks the %s / %s markers" % (BEGIN, END), file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = head + BEGIN + "\n" + render() + END + tail
    if "--check" in argv:
        from . import results_readme  # (it imports DEVICES from here)
        bad = results_readme.main(["--check", RESULTS])
        if new != text:
            print("headline: README.md's results block differs from docs/results' JSON; "
                  "run python3 bench/dsbench headline", file=sys.stderr)
            return 1
        if bad:
            return 1
        print("headline: README.md's results match docs/results")
        return 0
    with open(readme, "w") as f:
        f.write(new)
    return 0

