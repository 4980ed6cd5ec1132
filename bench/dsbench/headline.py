"""Renders README.md's results block from the result files in docs/results/.

README.md quotes no figure by hand: the block between the markers
`<!-- results:begin -->` and `<!-- results:end -->` is this script's output,
so every figure there is one of docs/results/*.json, with its device and
commit. `python3 bench/dsbench headline` rewrites the block; with `--check` it
fails (exit 1) when the block differs from what the files say (a unit test
runs it).
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


def load(name):
    with open(os.path.join(RESULTS, name)) as f:
        return json.load(f)


def origin(d, name):
    """Where a figure comes from: its file (which names the commit and the
    command) and device; the front page quotes no commit."""
    return "[%s](docs/results/%s): %s, driver %s" % (name, name, d["device"], d["driver"])


def render():
    out = []
    w1 = load("colocate.json")
    cfg = w1["configs"]
    out.append("**W1, LS decode-like requests beside BE training** (%s; LS load %.0f%%, "
               "%d requests, one run). `ls_p99_norm` is the LS p99 latency over LS alone "
               "(1.00 = no interference); `be_tput_norm` is BE throughput over BE alone; the best "
               "possible pair is 1.00 / %.2f." % (origin(w1, "colocate.json"), 100 * w1["ls_load"],
                                                 w1["requests"], 1 - w1["ls_load"]))
    out.append("")
    out.append("| configuration | what | ls_p99_norm | LS over SLO | be_tput_norm |")
    out.append("| --- | --- | ---: | ---: | ---: |")
    for name in W1_ORDER:
        c = cfg.get(name)
        if not c:
            continue
        out.append("| `%s` | %s | %s | %.1f%% | %.3f |" % (
            name, W1_WHAT[name], ("%.2f" % c["ls_p99_norm"]) if c["ls_p99_norm"] < 100 else
            ("%.0f" % c["ls_p99_norm"]), 100 * c["ls_over_slo_frac"], c["be_tput_norm"]))
    out.append("")
    w2 = load("pairs.json")
    out.append("**W2, two training tenants** (%s): the sum of both tenants' throughputs, each "
               "normalized to running alone, best policy over `temporal` per pair:" % origin(w2, "pairs.json"))
    out.append("")
    out.append("| pair | best policy | sum_norm | over temporal |")
    out.append("| --- | --- | ---: | ---: |")
    for pair, b in w2["best"].items():
        out.append("| %s | `%s` | %.3f | %.3fx |" % (pair, b["policy"], b["sum_norm"], b["over_temporal"]))
    out.append("")
    w3 = load("determinism.json")
    out.append("**W3, determinism** (%s): %d trials of an LM head (bf16 GEMM 4096 x 128256, fp32 "
               "softmax, argmax) under co-location and forced remaps over every pCtx: "
               "%d bitwise mismatches with libdetshare; %d of %d with kernel slicing "
               "(the reduction split by the free SMs)." % (
                   origin(w3, "determinism.json"), w3["trials"],
                   w3["detshare"]["bitwise_mismatch_trials"], w3["slicing"]["bitwise_mismatch_trials"],
                   w3["slicing"]["trials"]))
    out.append("")
    w4 = load("overhead.json")
    out.append("**W4, overhead** (%s): `ds_launch` takes %.3fx the host time of `cuLaunchKernel` "
               "(+%.0f ns, median of %d launches); a remap costs %.2f us of host time (median); "
               "a gate honours a decision in %.1f us with host-written words (default) and %.1f us "
               "through the resident control kernel (medians)." % (
                   origin(w4, "overhead.json"), w4["launch_ratio"], w4["launch_added_ns"],
                   w4["launches_each"], w4["remap_us"], w4["gate_us_host"], w4["gate_us_rck"]))
    if os.path.exists(os.path.join(RESULTS, "serve.json")):
        out.append("")
        out += serve_block(load("serve.json"))
    return "\n".join(out) + "\n"


def serve_block(w5):
    """W5: per mode, the highest load meeting both SLOs on 90% of requests, and
    the figures at the middle load of the sweep; co-location at its load."""
    loads = w5["loads"]
    mid = loads[len(loads) // 2]
    cap = w5.get("capacity_at_slo", {})
    out = ["**W5, LLM serving** (%s; %d of 32 Llama-3-8B layers, Azure code trace, SLOs TTFT %.0f ms / "
           "TPOT %.1f ms, medians of %d trace windows of %d requests). Load 1.0 = %.1f requests/s "
           "(`single`'s capacity); \"capacity\" is the highest load at which a mode meets both SLOs on "
           "90%% of its requests; the other columns are at load %.2f:" % (
               origin(w5, "serve.json"), w5["model"]["layers"], w5["slo"]["ttft_ms"], w5["slo"]["tpot_ms"],
               w5["workload"]["repetitions"], w5["workload"]["requests_per_run"],
               w5["workload"]["capacity_rps"], mid["load"]),
           "",
           "| mode | capacity | TTFT p99 ms | TPOT p99 ms | goodput rps |",
           "| --- | ---: | ---: | ---: | ---: |"]
    low = min(ld["load"] for ld in loads)
    for m, v in mid["modes"].items():
        c = cap.get(m, {})
        capacity = ("< %.2f" % low) if c.get("censored") and not c.get("load") else (
            (">= %.2f" if c.get("censored") else "%.2f") % c.get("load", float("nan")))
        out.append("| `%s` | %s | %.1f | %.2f | %.2f |" % (m, capacity, v["ttft_p99_ms"], v["tpot_p99_ms"],
                                                        v["goodput_rps"]))
    co = w5.get("colocated")
    if co:
        parts = ["`%s` %.2fx / %.2f" % (m, v["tpot_p99_norm"], v["be_tput_norm"]) for m, v in co["modes"].items()]
        out += ["", "Beside W1's BE tenant at load %.2f, TPOT p99 over the same mode alone / BE throughput over "
                "BE alone: %s." % (co["load"], ", ".join(parts))]
    return out


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
        if new != text:
            print("headline: README.md's results block differs from docs/results/*.json; "
                  "run python3 bench/dsbench headline", file=sys.stderr)
            return 1
        print("headline: README.md's results match docs/results")
        return 0
    with open(readme, "w") as f:
        f.write(new)
    return 0

