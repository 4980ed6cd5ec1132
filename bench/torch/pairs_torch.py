#!/usr/bin/env python3
"""Two PyTorch training jobs on one GPU under each policy: the training pairs
of the paper's Table 1 (Figure 6) on real models, each job's training step a
detshare graph.

    python3 bench/torch/pairs_torch.py [--out pairs_torch.json] [--pairs A,1,...] [--seconds 6]
                                       [--segment-us 0,1000]

Pairs (torch_jobs.py builds the models, random init and random data):

    A  ResNet-50 + ResNet-50        high contention
    B  ResNet-101 + ResNet-101      high contention
    C  BERT-Large + BERT-Large      high contention
    D  BERT-Large + ResNet-50       high contention
    E  LoRA Llama + LoRA Llama      high contention
    1  LSTM + LSTM                  low contention
    2  DeepFM + ResNet-101          low contention
    K  1000 one-block kernels x 2   a probe, not a pair of the paper: how
                                    many kernels per second two graphs get
                                    started together, against one alone

Each job has its own thread and vCtx (class BE). On its thread it builds its
model, captures its training step as a graph on every pCtx of the pool
(VCtx.graph, three eager warm-up steps first) and then loops: replay the
graph, synchronize the vCtx (a training loop that reads its loss every step),
record the time. Python threads share one interpreter lock, which would
throttle launch-bound jobs (an LSTM step is hundreds of small kernels); a
graph makes a step one launch. A job whose capture fails runs its step
eagerly in a section instead, and the JSON says so (``graph: false`` and the
error). Per job the JSON gives the host time of a step's enqueue (the replay
call) over the step's wall time, so the results say whether they measure the
GPU or the host.

Per pair: each job alone on the whole GPU (the other idle) for
--alone-seconds, then every policy in an order drawn from --seed:

    temporal   one owner at a time, slices of be_window_us (the baseline)
    shared     both on the whole GPU
    static     half and half: a on the 64-SM LOW tier, b on its 68-SM
               complement (policy manual, fixed remaps: the library's static
               policy splits by class and both jobs are BE)
    balance    measures alone, shared and every LOW tier + complement both ways
               and keeps the best (its parameter period_us is set past the
               window, so it measures once, during the warm-up)
    slo_aware  no LS vCtx: both BE on the whole GPU with a window

Each policy runs --warmup-seconds (balance: until it logs its choice, at most
--balance-warmup-seconds) and is then measured for --seconds. A job's rate is
its steps completed in the window over the window; ``*_norm`` is that over its
rate alone; ``sum_norm`` = a_norm + b_norm; ``best_over_temporal`` is the best
policy's sum over temporal's, with the policy, and ``adaptive_over_temporal``
the best of balance and slo_aware (policies that choose without being told).

--segment-us N (default 0: whole steps) cuts every job's step graph into
segments of at most N us (VCtx.graph's segment_us, bounded on the whole GPU,
where the build's first replay measures the step); each job's ``jobs`` entry
then has the graph's pieces, segments, uncut, cut_points, step_us and
longest_segment_us. A list (``--segment-us 0,1000``) runs every pair once per
value, each run with its own jobs, alone rates and policies; a run with N > 0
is stored under the key ``<pair>@seg<N>`` (N = 0 keeps the pair's key), every
pair entry says its ``segment_us``, and ``by_segment_us`` puts each pair's
best_over_temporal, adaptive_over_temporal and alone rates side by side per
value (the normalization is per run: a run's alone rates are its own). With
N > 0 a policy's entry also has ``a_yields`` / ``b_yields``: the vCtx's yields
between segments over the policy's run, warm-up included (VCtx.stats().yields).

Writes JSON (--out) and prints a table last. Exit 77 (nothing run) without
torch or a CUDA GPU.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import random
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional

from bench_common import detshare, pool_json, provenance, torch_on_gpu, write_result
from torch_jobs import TrainTenant, host_share, parse_batches, rate_in

PAIRS = {
    "A": ("resnet50", "resnet50", "high"),
    "B": ("resnet101", "resnet101", "high"),
    "C": ("bert_large", "bert_large", "high"),
    "D": ("bert_large", "resnet50", "high"),
    "E": ("lora_llama", "lora_llama", "high"),
    "1": ("lstm", "lstm", "low"),
    "2": ("deepfm", "resnet101", "low"),
    "K": ("tiny_kernels", "tiny_kernels", "probe"),
}
POLICIES = ("temporal", "shared", "static", "balance", "slo_aware")
ADAPTIVE = ("balance", "slo_aware")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="pairs_torch.json", help="JSON output file")
    p.add_argument("--pairs", default=",".join(PAIRS), help="comma-separated keys of PAIRS")
    p.add_argument("--policies", default=",".join(POLICIES), help="subset of the policies (temporal always runs)")
    p.add_argument("--seconds", type=float, default=6.0, help="measured window per policy (s)")
    p.add_argument("--alone-seconds", type=float, default=3.0, help="measured window of each job alone (s)")
    p.add_argument("--warmup-seconds", type=float, default=1.0, help="both jobs run this long before the window")
    p.add_argument("--balance-warmup-seconds", type=float, default=12.0,
                   help="balance: at most this long for its measuring before the window (s)")
    p.add_argument("--batch", default="", help="overrides, e.g. resnet50=32,lstm=64 (default torch_jobs.DEFAULT_BATCH)")
    p.add_argument("--split-sms", type=int, default=64, help="static: SMs of job a's LOW tier (b: the complement)")
    p.add_argument("--no-graphs", action="store_true", help="run every step eagerly in a section")
    p.add_argument("--segment-us", default="0",
                   help="cut every step graph into segments of at most this many us (0: whole steps); a "
                        "comma-separated list runs every pair once per value, e.g. 0,1000")
    p.add_argument("--append", action="store_true",
                   help="add to the pairs of an existing --out file (same device), e.g. to split a run in parts")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--watchdog-s", type=float, default=1500.0, help="dump stacks and exit after this long")
    a = p.parse_args(argv)
    a.pair_list = [x for x in a.pairs.split(",") if x]
    for x in a.pair_list:
        if x not in PAIRS:
            p.error(f"unknown pair {x!r} (known: {', '.join(PAIRS)})")
    a.policy_list = ["temporal"] + [x for x in a.policies.split(",") if x and x != "temporal"]
    for x in a.policy_list:
        if x not in POLICIES:
            p.error(f"unknown policy {x!r} (known: {', '.join(POLICIES)})")
    a.batches = parse_batches(p, a.batch)
    a.segment_list = []
    for x in [x.strip() for x in a.segment_us.split(",") if x.strip()]:
        if not x.isdigit():
            p.error(f"--segment-us entry {x!r}: want an integer >= 0 (us)")
        if int(x) not in a.segment_list:
            a.segment_list.append(int(x))
    if not a.segment_list:
        p.error("--segment-us: give at least one value")
    if a.no_graphs and any(a.segment_list):
        p.error("--segment-us > 0 cuts graphs: not with --no-graphs")
    return a


def run_key(key: str, segment_us: int) -> str:
    """The key of a pair's run in the JSON's ``pairs``: the pair's own for whole
    steps, ``<pair>@seg<N>`` for segments of at most N us."""
    return key if not segment_us else f"{key}@seg{segment_us}"


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    torch = torch_on_gpu("pairs_torch")
    if torch is None:
        return 77
    faulthandler.dump_traceback_later(args.watchdog_s, exit=True)
    t_start = time.perf_counter()
    sys.setswitchinterval(0.001)
    torch.zeros(1, device="cuda")

    choices: List[str] = []
    choice_lock = threading.Lock()

    def on_log(level: Any, msg: str) -> None:
        if msg.startswith("balance:"):
            with choice_lock:
                choices.append(msg)

    detshare.set_log_handler(on_log, detshare.LogLevel.INFO)
    rt = detshare.Runtime("cuda", policy="shared")
    info = rt.info()
    low = min((p for p in info.pctx if p.anchor.name == "LOW"), key=lambda p: abs(p.sm_count - args.split_sms))
    split = (low.index, low.complement)
    import torchvision
    import transformers

    try:
        import peft
        peft_v = peft.__version__
    except ImportError:
        peft_v = None
    result: Dict[str, Any] = {
        **provenance("pairs_torch", info, argv),
        "torch": torch.__version__, "torchvision": torchvision.__version__,
        "transformers": transformers.__version__, "peft": peft_v,
        "seed": args.seed, "window_s": args.seconds, "alone_window_s": args.alone_seconds,
        "warmup_s": args.warmup_seconds, "graphs": not args.no_graphs, "segment_us": args.segment_list,
        "pool": pool_json(info),
        "static_split": {"a_pctx": split[0], "a_sms": info.pctx[split[0]].sm_count,
                         "b_pctx": split[1], "b_sms": info.pctx[split[1]].sm_count},
        "policies": {
            "temporal": "one owner at a time, slice be_window_us 2000 (the baseline)",
            "shared": "both on the whole GPU",
            "static": f"a on {info.pctx[split[0]].sm_count} SMs, b on {info.pctx[split[1]].sm_count} "
                      "(policy manual, fixed remaps)",
            "balance": "measures alone, shared, every LOW tier + complement both ways; keeps the best",
            "slo_aware": "no LS vCtx: both BE on the whole GPU with a window",
        },
        "pairs": {},
        "errors": [],
    }
    rng = random.Random(args.seed)
    out = Path(args.out)
    if args.append and out.exists():
        prev = json.loads(out.read_text())
        if prev.get("device") != result["device"]:
            print(f"pairs_torch: --append: {out} is from {prev.get('device')}, not {result['device']}")
            return 2
        prev.setdefault("parts", [{k: prev.get(k) for k in ("commit", "command", "date")}])
        prev["parts"].append({k: result[k] for k in ("commit", "command", "date")})
        prev["errors"] = prev.get("errors", [])
        segs = list(prev.get("segment_us", [0]))  # files before segments ran whole steps
        segs += [n for n in args.segment_list if n not in segs]
        result = {**prev, "pairs": prev.get("pairs", {}), "errors": prev["errors"], "segment_us": segs}

    def save() -> None:
        write_result(out, result)

    runs = [(key, seg) for key in args.pair_list for seg in args.segment_list]  # a pair's values back to back
    for key, seg in runs:
        ma, mb, contention = PAIRS[key]
        rk = run_key(key, seg)
        pr: Dict[str, Any] = {"a": ma, "b": mb, "contention": contention, "segment_us": seg, "configs": {}}
        result["pairs"][rk] = pr
        jobs: List[TrainTenant] = []
        print(f"pair {key}: {ma} + {mb} ({contention} contention)"
              + (f", segments of at most {seg} us" if seg else ""), flush=True)
        rt.set_policy("shared")
        try:
            for label, m, seed in ((f"{key}a-{ma}", ma, args.seed), (f"{key}b-{mb}", mb, args.seed + 1)):
                j = TrainTenant(rt, label, m, args.batches.get(m), seed, not args.no_graphs, segment_us=seg)
                jobs.append(j)
                j.call("build")  # one at a time: captures and allocations never overlap
            pr["jobs"] = {"a": jobs[0].info, "b": jobs[1].info}
            if seg:
                for side, j in zip("ab", jobs):
                    print(f"  {side} {j.model}: {segment_line(j.info)}", flush=True)
            # alone, each on the whole GPU
            alone: Dict[str, Any] = {}
            for side, j in zip("ab", jobs):
                t0, t1 = j.window(0.5, args.alone_seconds)
                alone[side] = {**rate_in(j.ends, t0, t1), **host_share(j, t0, t1)}
            pr["alone"] = alone
            print("  alone: " + ", ".join(
                f"{s} {alone[s]['steps_per_s']:.2f} steps/s (step {alone[s]['step_ms_p50']:.1f} ms, host/step "
                f"{alone[s]['host_over_step']:.3f})" for s in "ab"), flush=True)
            order = list(args.policy_list)
            rng.shuffle(order)
            for pol in order:
                c = run_policy(rt, pol, jobs, alone, split, args, choices, choice_lock)
                pr["configs"][pol] = c
                print(f"  {pol:<10} a {c['a_norm']:.3f} b {c['b_norm']:.3f} sum {c['sum_norm']:.3f}"
                      + (f"  ({c['choice']})" if c.get("choice") else ""), flush=True)
                save()
            pr["final_loss"] = {s: j.call("loss") for s, j in zip("ab", jobs)}
            summarize(pr)
        except Exception:  # noqa: BLE001 (the other pairs still run)
            err = traceback.format_exc()
            print(err, flush=True)
            result["errors"].append({"pair": rk, "error": err})
        finally:
            for j in jobs:
                try:
                    j.shut()
                except Exception:  # noqa: BLE001
                    result["errors"].append({"pair": rk, "error": traceback.format_exc()})
        by_segment(result)
        save()

    result["wall_s"] = result.get("wall_s", 0.0) + time.perf_counter() - t_start
    save()
    rt.close()
    faulthandler.cancel_dump_traceback_later()
    print_table(result)
    return 0 if not result["errors"] else 1


def run_policy(rt: Any, pol: str, jobs: List[TrainTenant], alone: Dict[str, Any], split: tuple,
               args: argparse.Namespace, choices: List[str], lock: threading.Lock) -> Dict[str, Any]:
    a, b = jobs
    if pol == "static":
        rt.set_policy("manual")
        a.vctx.remap(split[0])
        b.vctx.remap(split[1])
    else:
        rt.set_policy(pol)
    if pol == "balance":
        rt.set_policy_param("balance", "period_us", 1e9)
    with lock:
        n0 = len(choices)
    # segments: the vCtx's yields (between segments) over this policy's run, warm-up included
    y0 = [getattr(j.vctx.stats(), "yields", None) for j in jobs]
    for j in jobs:
        j.start_loop()
    t_w = time.perf_counter()
    chosen = None
    if pol == "balance":
        while time.perf_counter() - t_w < args.balance_warmup_seconds:
            with lock:
                new = choices[n0:]
            if new:
                chosen = new[-1]
                break
            time.sleep(0.05)
        time.sleep(0.5)  # the chosen placement's first steps
    else:
        time.sleep(args.warmup_seconds)
    warm = time.perf_counter() - t_w
    t0 = time.perf_counter()
    time.sleep(args.seconds)
    t1 = time.perf_counter()
    for j in jobs:
        j.end_loop()
    c: Dict[str, Any] = {"warmup_s": warm}
    total = 0.0
    for side, j, y in zip("ab", jobs, y0):
        r = rate_in(j.ends, t0, t1)
        norm = r["steps_per_s"] / alone[side]["steps_per_s"]
        total += norm
        st = j.vctx.stats()
        c.update({f"{side}_steps": r["steps"], f"{side}_steps_per_s": r["steps_per_s"], f"{side}_norm": norm,
                  f"{side}_pctx": st.pctx, f"{side}_sms": rt.info().pctx[st.pctx].sm_count,
                  **{f"{side}_{k}": v for k, v in host_share(j, t0, t1).items()}})
        if j.segment_us and y is not None:
            c[f"{side}_yields"] = st.yields - y
    c["sum_norm"] = total
    if pol == "balance":
        c["choice"] = chosen if chosen else "no choice logged within the warm-up"
    return c


def segment_line(info: Dict[str, Any]) -> str:
    """A job's segmented graph in words (TrainTenant.info's segment fields)."""
    if not info.get("graph"):
        return f"no graph, runs eagerly ({info.get('graph_error', '?')})"
    if "segments" not in info:
        return "graph without segment stats"
    us = info.get("step_us")
    lon = info.get("longest_segment_us")
    return (f"{info['segments']} segments in {info.get('pieces')} pieces, step {us if us is None else round(us)} us, "
            f"longest segment {lon if lon is None else round(lon)} us, uncut {info.get('uncut')}")


def by_segment(result: Dict[str, Any]) -> None:
    """``result["by_segment_us"]``: per pair, per segment_us of its runs, the
    run's best_over_temporal (policy), adaptive_over_temporal and alone rates."""
    out: Dict[str, Dict[str, Any]] = {}
    for rk, pr in result["pairs"].items():
        key, seg = rk.split("@seg")[0], pr.get("segment_us", 0)
        out.setdefault(key, {})[str(seg)] = {
            "run": rk,
            **{k: pr.get(k) for k in ("best_over_temporal", "best_policy", "adaptive_over_temporal",
                                      "adaptive_policy")},
            **{f"{s}_alone_steps_per_s": pr.get("alone", {}).get(s, {}).get("steps_per_s") for s in "ab"},
        }
    result["by_segment_us"] = out


def summarize(pr: Dict[str, Any]) -> None:
    cfg = pr["configs"]
    temporal = cfg["temporal"]["sum_norm"]
    best = max(cfg, key=lambda p: cfg[p]["sum_norm"])
    pr["best_policy"] = best
    pr["best_over_temporal"] = cfg[best]["sum_norm"] / temporal
    ad = [p for p in ADAPTIVE if p in cfg]
    if ad:
        top = max(ad, key=lambda p: cfg[p]["sum_norm"])
        pr["adaptive_policy"] = top
        pr["adaptive_over_temporal"] = cfg[top]["sum_norm"] / temporal
    for p in cfg:
        cfg[p]["over_temporal"] = cfg[p]["sum_norm"] / temporal


def print_table(result: Dict[str, Any]) -> None:
    print()
    segs = result.get("segment_us", [0])
    print(f"{result['device']}, {result['driver']}, {result['sms']} SMs, commit {result['commit']}; "
          f"window {result['window_s']} s; segment_us {','.join(map(str, segs))} (0: whole steps); "
          "sum of normalized throughputs (over temporal)")
    pols = list(POLICIES)
    print(f"{'pair':<26}{'seg_us':>7}" + "".join(f"{p:>16}" for p in pols) + f"{'best/temporal':>16}")
    for key, pr in result["pairs"].items():
        name = f"{key} {pr['a']}+{pr['b']}"
        row = f"{name:<26}{pr.get('segment_us', 0):>7}"
        for p in pols:
            c = pr["configs"].get(p)
            row += f"{'-':>16}" if not c else f"{c['sum_norm']:>9.3f} ({c.get('over_temporal', float('nan')):.2f})"
        if "best_over_temporal" in pr:
            row += f"{pr['best_over_temporal']:>10.2f} {pr['best_policy']}"
        print(row)
    bs = result.get("by_segment_us", {})
    values = sorted({int(v) for runs in bs.values() for v in runs})
    if len(values) > 1:
        print()
        print("best/temporal (policy) and alone steps/s a, b per segment_us")
        print(f"{'pair':<8}" + "".join(f"{f'seg {v} us':>36}" for v in values))
        for key, runs in bs.items():
            row = f"{key:<8}"
            for v in values:
                r = runs.get(str(v))
                if not r or r.get("best_over_temporal") is None:
                    row += f"{'-':>36}"
                    continue
                cell = (f"{r['best_over_temporal']:.2f} ({r['best_policy']}) "
                        f"{r['a_alone_steps_per_s']:.1f}, {r['b_alone_steps_per_s']:.1f}")
                row += f"{cell:>36}"
            print(row)


if __name__ == "__main__":
    sys.exit(main())
