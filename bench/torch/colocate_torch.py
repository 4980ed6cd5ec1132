#!/usr/bin/env python3
"""Inference beside training on one GPU, the paper's Table 2 (Figure 7) on
PyTorch models: LLM decoding (LS) next to a training job (BE), under
`shared`, `priority`, `static`, `slo_aware` and `tpot_first`.

    python3 bench/torch/colocate_torch.py [--out colocate_torch.json] [--pairs llama3+resnet50,...]

Tenants (torch_jobs.py; random weights and data, nothing downloaded):
  LS  decode steps of a Llama-3-8B-architecture model (``llama3``) or a
      GPT-J-6B-architecture one (``gptj``): a batch of --decode-batch
      sequences over a KV cache of --context positions, bf16, the step a
      detshare graph (VCtx.graph: captured once per pCtx, replayed on the pCtx
      the vCtx is bound to). A request is --tokens steps back to back, each
      replayed and synchronized (a server streaming tokens), then a pause of
      --gap-ms before the next request.
  BE  training of ResNet-50 or BERT-Large (torch_jobs.TRAIN_JOBS), its step a
      graph, replayed and synchronized back to back.
Each tenant has its own thread and vCtx (LS: class ls, phase decode; BE:
class be).

The pool: the whole GPU and, for each of --low-tiers (16, 32, 64, 96, 112
SMs), a LOW tier and its HIGH complement. Policies: `shared` (both on the
whole GPU), `priority` (the same, LS on the highest stream priority),
`static` (LS on the LOW tier of --ls-sms, 64: about half and half; BE on its
complement), `slo_aware` and `tpot_first` (its defaults: decode on 100 SMs,
BE on 32). A BE step is one graph, so no policy can stop it halfway: a gate
or a remap takes effect at its next step.

Per LS model, first alone: a probe vCtx measures TPOT (one step, replay to
synchronize) on the whole GPU; the LS vCtx is then made with slo_us =
--slo-factor x that p99, which `slo_aware` and `tpot_first` steer by, and its
step is timed alone on every LOW tier (``alone_by_low_tier``). Per pair:
slo_aware's LS tier (its parameter ls_sms) is calibrated: slo_aware runs
--calib-seconds beside BE on each LOW tier, and the smallest tier whose TPOT
p99 is within --calib-margin x --p99-bound of alone is kept (the one with
the lowest p99 when none is; ``slo_aware_calibration``). The policy does not
size its tier from measured attainment by itself yet; the example does it
for it, in the open. Then --reps repetitions, each running every policy once
in an order drawn from --seed and the LS-alone and BE-alone references once
more (every repetition has its own references in the same conditions): BE
runs --warmup-seconds, then LS requests for --seconds while BE keeps
training.

Figures per pair and policy (medians over the repetitions, with min and max):
TPOT p50 and p99 normalized to the same repetition's LS alone, BE steps/s
normalized to its BE alone, and the absolute values. `slo_aware_dominated_by`
lists the baselines at least as good on both TPOT p99 and BE throughput
(medians) and better than slo_aware by more than `dominance_tolerance` (2%,
relative) on one; `slo_aware_p99_within` says whether its TPOT p99 is within
--p99-bound x alone. Determinism: each LS graph's logits on the whole GPU
alone (the reference, taken after the build) are compared bit for bit with
its logits after a replay on every pCtx of the pool while its training
partner runs (`logits_bitwise_identical`); ``logits_same_as_probe_graph``
says whether a second capture of the same step (the probe's, on the whole
GPU only) gave the same bits.

Writes JSON (--out) and prints a table last; exit 77 (nothing run) without
torch or a CUDA GPU.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import random
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional

from bench_common import detshare, low_tier_pool, pct, pool_json, provenance, torch_on_gpu, write_result
from torch_jobs import DECODERS, TRAIN_JOBS, Tenant, TrainTenant, build_decoder, parse_batches, rate_in

POLICIES = ("shared", "priority", "static", "slo_aware", "tpot_first")
DEFAULT_PAIRS = "llama3+resnet50,llama3+bert_large,gptj+resnet50,gptj+bert_large"
# a baseline dominates slo_aware only if it is better by more than this (relative) on TPOT p99 or BE
# throughput and no worse on the other: differences below it are within run-to-run variation
DOMINANCE_TOL = 0.02


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="colocate_torch.json", help="JSON output file")
    p.add_argument("--pairs", default=DEFAULT_PAIRS, help="LS+BE pairs: LS in llama3/gptj, BE a TRAIN_JOBS key")
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--reps", type=int, default=3, help="repetitions (>= 3 for tail figures)")
    p.add_argument("--seconds", type=float, default=4.0, help="LS window per policy and repetition (s)")
    p.add_argument("--alone-seconds", type=float, default=3.0, help="each alone reference (s)")
    p.add_argument("--warmup-seconds", type=float, default=1.0, help="BE runs this long before LS starts (s)")
    p.add_argument("--tokens", type=int, default=32, help="decode steps per LS request")
    p.add_argument("--gap-ms", type=float, default=10.0, help="pause between LS requests (ms)")
    p.add_argument("--decode-batch", type=int, default=8, help="sequences per decode step")
    p.add_argument("--context", type=int, default=1024, help="KV cache positions")
    p.add_argument("--layers", type=int, default=0, help="decoder layers (0 = the full model's: 32 / 28)")
    p.add_argument("--slo-factor", type=float, default=1.3, help="LS slo_us = this x TPOT p99 alone")
    p.add_argument("--p99-bound", type=float, default=1.3, help="slo_aware's TPOT p99 goal, x alone")
    p.add_argument("--ls-sms", type=int, default=64, help="static's LS tier, SMs (64: half and half)")
    p.add_argument("--calib-seconds", type=float, default=1.5, help="slo_aware calibration run per LOW tier (s)")
    p.add_argument("--calib-margin", type=float, default=0.95,
                   help="slo_aware's LS tier: the smallest LOW tier whose calibration TPOT p99 is within this x "
                        "--p99-bound")
    p.add_argument("--low-tiers", default="16,32,64,96,112",
                   help="LOW tiers of the pool, SMs (each with its complement; multiples of 8 stay disjoint "
                        "from their complement)")
    p.add_argument("--batch", default="", help="BE batch overrides, e.g. resnet50=32")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--watchdog-s", type=float, default=1500.0, help="dump stacks and exit after this long")
    a = p.parse_args(argv)
    a.pair_list = []
    for x in [x for x in a.pairs.split(",") if x]:
        ls, _, be = x.partition("+")
        if ls not in DECODERS or be not in TRAIN_JOBS:
            p.error(f"pair {x!r}: want LS+BE with LS in {DECODERS} and BE in {tuple(TRAIN_JOBS)}")
        a.pair_list.append((ls, be))
    a.policy_list = [x for x in a.policies.split(",") if x]
    for x in a.policy_list:
        if x not in POLICIES:
            p.error(f"unknown policy {x!r} (known: {', '.join(POLICIES)})")
    if a.reps < 1:
        p.error("--reps must be >= 1")
    a.batches = parse_batches(p, a.batch)
    return a


def timed_replays(g: Any, vctx: Any, warmup: int, n: int) -> List[float]:
    """Seconds from each of n replays of g to the return of vctx.synchronize(), after warmup replays."""
    for _ in range(warmup):
        g.replay()
    vctx.synchronize()
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        g.replay()
        vctx.synchronize()
        xs.append(time.perf_counter() - t)
    return xs


class Decode(Tenant):
    """An LS decoder on its own thread and vCtx, its step a graph."""

    def __init__(self, rt: Any, arch: str, args: argparse.Namespace) -> None:
        super().__init__(f"ls-{arch}")
        self.rt, self.arch, self.args = rt, arch, args
        self.steps: List[tuple] = []  # (end time, TPOT s)
        self.info: Dict[str, Any] = {}
        self.vctx: Any = None
        self.graph: Any = None
        self.ref: Any = None
        self.probe_out: Any = None

    def _build(self) -> Dict[str, Any]:
        import torch

        dev = torch.device("cuda", 0)
        t0 = time.perf_counter()
        self.dec, desc = build_decoder(self.arch, torch, dev, self.args.decode_batch, self.args.context,
                                       self.args.layers or None, self.args.seed)
        torch.cuda.synchronize()  # weights and inputs written before the vCtx's streams read them
        # probe: TPOT alone on the whole GPU, to set the SLO the policies steer by
        probe = self.rt.vctx(f"{self.arch}-probe", cls="ls", phase="decode")
        g = probe.graph(self.dec.step, pctxs=[self.rt.info().full_pctx], warmup=2, name=f"{self.arch}-probe")
        xs = timed_replays(g, probe, 20, 200)
        self.probe_out = g.outputs.clone()
        probe.synchronize()
        g.close()
        probe.close()
        slo_us = int(self.args.slo_factor * pct(xs, 99) * 1e6)
        self.vctx = self.rt.vctx(f"{self.arch}-decode", cls="ls", phase="decode", slo_us=slo_us)
        self.graph = self.vctx.graph(self.dec.step, warmup=1, name=self.arch)
        ps = [p for p in self.graph.stats().pctx if p.instantiated]
        # the step alone on every LOW tier (for the record: co-located, other tenants'
        # memory traffic slows it further; slo_aware's tier is calibrated per pair)
        pool = self.rt.info().pctx
        by_tier: Dict[str, Any] = {}
        self.rt.set_policy("manual")
        try:
            for p in [p for p in pool if p.anchor.name == "LOW"]:
                self.vctx.remap(p.index)
                ys = timed_replays(self.graph, self.vctx, 5, 60)
                by_tier[str(p.sm_count)] = {"pctx": p.index, "tpot_p50_ms": pct(ys, 50) * 1e3,
                                            "tpot_p99_ms": pct(ys, 99) * 1e3}
            self.vctx.remap(self.rt.info().full_pctx)
        finally:
            self.rt.set_policy("shared")
        # the determinism reference: this graph on the whole GPU, alone
        self.graph.outputs.fill_(float("nan"))
        torch.cuda.synchronize()
        self.graph.replay()
        self.vctx.synchronize()
        self.ref = self.graph.outputs.clone()
        same_as_probe = bool(torch.equal(self.ref.view(torch.int16), self.probe_out.view(torch.int16)))
        self.probe_out = None
        self.info = {**desc, "slo_us": slo_us, "probe_tpot_p50_ms": pct(xs, 50) * 1e3,
                     "probe_tpot_p99_ms": pct(xs, 99) * 1e3, "graph_pctxs": len(ps),
                     "graph_kernel_nodes": max(p.kernel_nodes for p in ps), "alone_by_low_tier": by_tier,
                     "logits_same_as_probe_graph": same_as_probe, "build_s": time.perf_counter() - t0}
        return self.info

    def _loop(self, stop: threading.Event) -> None:
        replay, sync, steps = self.graph.replay, self.vctx.synchronize, self.steps
        steps.clear()
        gap = self.args.gap_ms / 1e3
        while not stop.is_set():
            for _ in range(self.args.tokens):
                t0 = time.perf_counter()
                replay()
                sync()
                t1 = time.perf_counter()
                steps.append((t1, t1 - t0))
            if gap > 0:
                time.sleep(gap)

    def _check_pctxs(self) -> Dict[str, Any]:
        """Replays on every pCtx (the caller set policy manual); compares the logits with the probe's."""
        import torch

        bad, visited = 0, []
        for p in self.rt.info().pctx:
            self.vctx.remap(p.index)
            self.graph.outputs.fill_(float("nan"))
            torch.cuda.synchronize()  # the poison lands before the replay (another stream)
            self.graph.replay()
            self.vctx.synchronize()
            visited.append(self.vctx.stats().pctx)
            bad += not torch.equal(self.graph.outputs.view(torch.int16), self.ref.view(torch.int16))
        return {"pctx_visited": visited, "mismatches": bad}

    def _close(self) -> None:
        if self.graph is not None:
            self.graph.close()
            self.vctx.synchronize()
            self.vctx.close()
        self.graph = self.vctx = self.dec = None

    def tpot_in(self, t0: float, t1: float) -> List[float]:
        return [d for e, d in self.steps if t0 <= e <= t1]


def tpot_fig(xs: List[float]) -> Dict[str, Any]:
    return {"tpot_p50_ms": pct(xs, 50) * 1e3, "tpot_p99_ms": pct(xs, 99) * 1e3, "tokens": len(xs)}


def med_range(xs: List[float]) -> Dict[str, float]:
    ys = [x for x in xs if x == x]
    if not ys:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan")}
    return {"median": statistics.median(ys), "min": min(ys), "max": max(ys)}


def set_policy(rt: Any, pol: str, slo_aware_sms: int, args: argparse.Namespace) -> Dict[str, Any]:
    """Activates pol with its parameters: static's LS tier --ls-sms (half
    and half by default), slo_aware's the pair's calibrated tier, tpot_first
    its defaults; returns them."""
    rt.set_policy(pol)
    params: Dict[str, Any] = {}
    if pol == "static":
        params["ls_sms"] = args.ls_sms
    elif pol == "slo_aware":
        params["ls_sms"] = slo_aware_sms
    for k, v in params.items():
        rt.set_policy_param(pol, k, v)
    return params


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    torch = torch_on_gpu("colocate_torch", "torchvision", "transformers")
    if torch is None:
        return 77
    import torchvision
    import transformers
    faulthandler.dump_traceback_later(args.watchdog_s, exit=True)
    t_start = time.perf_counter()
    sys.setswitchinterval(0.001)  # the tenant threads share the GIL: switch often
    torch.zeros(1, device="cuda")
    # cuDNN's fused attention is not run-to-run deterministic for the GPT-J step
    # (16 heads of 256, a boolean mask, one query): six eager steps on the default
    # stream, no detshare, differed by up to 0.03 in the logits (H200, torch 2.11),
    # where the memory-efficient and math kernels gave the same bits every time.
    # Output bits that change on their own cannot show what co-tenants do to them.
    torch.backends.cuda.enable_cudnn_sdp(False)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tiers = low_tier_pool(sms, args.low_tiers)
    rt = detshare.Runtime("cuda", policy="shared", tiers=tiers)
    info = rt.info()
    result: Dict[str, Any] = {
        **provenance("colocate_torch", info, argv),
        "torch": torch.__version__, "torchvision": torchvision.__version__, "transformers": transformers.__version__,
        "cudnn_sdp": False,
        "seed": args.seed, "reps": args.reps, "window_s": args.seconds, "alone_window_s": args.alone_seconds,
        "warmup_s": args.warmup_seconds, "tokens_per_request": args.tokens, "gap_ms": args.gap_ms,
        "slo_factor": args.slo_factor, "p99_bound": args.p99_bound, "static_ls_sms": args.ls_sms,
        "calib_seconds": args.calib_seconds, "calib_margin": args.calib_margin,
        "pool": pool_json(info),
        "ls_models": {}, "be_models": {}, "pairs": {}, "errors": [],
    }
    out = Path(args.out)

    def save() -> None:
        write_result(out, result)

    lss: Dict[str, Decode] = {}
    bes: Dict[str, TrainTenant] = {}
    rng = random.Random(args.seed)
    try:
        # every tenant built once, one at a time (captures never overlap)
        for arch in dict.fromkeys(ls for ls, _ in args.pair_list):
            print(f"building LS {arch}", flush=True)
            lss[arch] = Decode(rt, arch, args)
            result["ls_models"][arch] = lss[arch].call("build")
            print(f"LS {arch}: {result['ls_models'][arch]['params'] / 1e9:.2f}B params, TPOT alone p50 "
                  f"{result['ls_models'][arch]['probe_tpot_p50_ms']:.2f} ms p99 "
                  f"{result['ls_models'][arch]['probe_tpot_p99_ms']:.2f} ms, slo_us "
                  f"{result['ls_models'][arch]['slo_us']}", flush=True)
        for m in dict.fromkeys(be for _, be in args.pair_list):
            print(f"building BE {m}", flush=True)
            bes[m] = TrainTenant(rt, f"be-{m}", m, args.batches.get(m), args.seed, True)
            result["be_models"][m] = bes[m].call("build")
            print(f"BE {m}: batch {bes[m].info['batch']}, graph {bes[m].info['graph']}", flush=True)
        save()

        def alone_ls(ls: Decode) -> Dict[str, Any]:
            rt.set_policy("shared")
            return tpot_fig(ls.tpot_in(*ls.window(0.3, args.alone_seconds)))

        def alone_be(be: TrainTenant) -> Dict[str, Any]:
            rt.set_policy("shared")
            return rate_in(be.ends, *be.window(0.5, args.alone_seconds))

        def colocated(pol: str, ls: Decode, be: TrainTenant, slo_aware_sms: int = 0,
                      seconds: float = 0.0) -> Dict[str, Any]:
            params = set_policy(rt, pol, slo_aware_sms, args)
            s0l, s0b = ls.vctx.stats(), be.vctx.stats()
            be.start_loop()
            time.sleep(args.warmup_seconds)
            ls.start_loop()
            t0 = time.perf_counter()
            time.sleep(seconds or args.seconds)
            t1 = time.perf_counter()
            ls.end_loop()
            be.end_loop()
            s1l, s1b = ls.vctx.stats(), be.vctx.stats()
            be_fig = {f"be_{k}": v for k, v in rate_in(be.ends, t0, t1).items()}
            return {**tpot_fig(ls.tpot_in(t0, t1)), **be_fig,
                    "params": params, "ls_pctx": s1l.pctx, "be_pctx": s1b.pctx,
                    "ls_remaps": s1l.remaps - s0l.remaps, "be_remaps": s1b.remaps - s0b.remaps,
                    "be_holds": s1b.holds - s0b.holds, "be_gate_closes": s1b.gate_closes - s0b.gate_closes}

        for ls_name, be_name in args.pair_list:
            key = f"{ls_name}+{be_name}"
            ls, be = lss[ls_name], bes[be_name]
            pr: Dict[str, Any] = {"ls": ls_name, "be": be_name, "reps": []}
            result["pairs"][key] = pr
            print(f"pair {key}", flush=True)
            try:
                # slo_aware's LS tier for this pair: the smallest LOW tier on which
                # slo_aware keeps TPOT p99 within --calib-margin x the bound in a
                # short co-located run (the largest when none does)
                ref, be_ref = alone_ls(ls), alone_be(be)
                cal: Dict[str, Any] = {}
                lows = sorted(p.sm_count for p in info.pctx if p.anchor.name == "LOW")
                for sms_ in lows:
                    c = colocated("slo_aware", ls, be, sms_, args.calib_seconds)
                    cal[str(sms_)] = {"tpot_p99_norm": c["tpot_p99_ms"] / ref["tpot_p99_ms"],
                                      "be_norm": c["be_steps_per_s"] / be_ref["steps_per_s"]}
                ok = [int(k) for k, v in cal.items() if v["tpot_p99_norm"] <= args.calib_margin * args.p99_bound]
                slo_sms = min(ok) if ok else min(cal, key=lambda k: cal[k]["tpot_p99_norm"])
                pr["slo_aware_calibration"] = {"ls_alone": ref, "be_alone": be_ref, "by_ls_sms": cal,
                                                "chosen_ls_sms": int(slo_sms)}
                print("  slo_aware calibration: " + ", ".join(
                    f"{k} SMs: TPOT p99 x{v['tpot_p99_norm']:.2f} BE x{v['be_norm']:.2f}" for k, v in cal.items())
                    + f" -> {slo_sms}", flush=True)
                for rep in range(args.reps):
                    order = list(args.policy_list)
                    rng.shuffle(order)
                    r: Dict[str, Any] = {"order": order, "ls_alone": alone_ls(ls), "be_alone": alone_be(be),
                                         "configs": {}}
                    for pol in order:
                        c = colocated(pol, ls, be, int(slo_sms))
                        c["tpot_p50_norm"] = c["tpot_p50_ms"] / r["ls_alone"]["tpot_p50_ms"]
                        c["tpot_p99_norm"] = c["tpot_p99_ms"] / r["ls_alone"]["tpot_p99_ms"]
                        c["be_norm"] = c["be_steps_per_s"] / r["be_alone"]["steps_per_s"]
                        r["configs"][pol] = c
                        print(f"  rep {rep} {pol:<10} TPOT p50 {c['tpot_p50_ms']:.2f} ms p99 "
                              f"{c['tpot_p99_ms']:.2f} ms (x{c['tpot_p99_norm']:.2f}), BE x{c['be_norm']:.3f}",
                              flush=True)
                    pr["reps"].append(r)
                    print(f"  rep {rep} alone: TPOT p50 {r['ls_alone']['tpot_p50_ms']:.2f} ms p99 "
                          f"{r['ls_alone']['tpot_p99_ms']:.2f} ms; BE {r['be_alone']['steps_per_s']:.2f} steps/s",
                          flush=True)
                    save()
                summarize(pr, args)
                # determinism: the LS logits on every pCtx while BE trains
                rt.set_policy("manual")
                be.start_loop()
                try:
                    pr["determinism"] = ls.call("check_pctxs")
                finally:
                    be.end_loop()
                pr["logits_bitwise_identical"] = pr["determinism"]["mismatches"] == 0
            except Exception:  # noqa: BLE001 (the other pairs still run)
                err = traceback.format_exc()
                print(err, flush=True)
                result["errors"].append({"pair": key, "error": err})
                for t in (ls, be):
                    if t.looping:
                        t.end_loop()
            save()
    except BaseException:
        result["errors"].append({"phase": "main", "error": traceback.format_exc()})
        save()
        raise
    finally:
        for t in list(lss.values()) + list(bes.values()):
            try:
                t.shut()
            except Exception:  # noqa: BLE001
                result["errors"].append({"phase": "close", "error": traceback.format_exc()})
        gc.collect()
    result["wall_s"] = time.perf_counter() - t_start
    save()
    rt.close()
    faulthandler.cancel_dump_traceback_later()
    print_table(result)
    return 0 if not result["errors"] else 1


def summarize(pr: Dict[str, Any], args: argparse.Namespace) -> None:
    figs: Dict[str, Any] = {}
    for pol in args.policy_list:
        cs = [r["configs"][pol] for r in pr["reps"] if pol in r["configs"]]
        figs[pol] = {k: med_range([c[k] for c in cs])
                     for k in ("tpot_p50_norm", "tpot_p99_norm", "be_norm", "tpot_p50_ms", "tpot_p99_ms",
                               "be_steps_per_s")}
    figs["ls_alone"] = {k: med_range([r["ls_alone"][k] for r in pr["reps"]])
                        for k in ("tpot_p50_ms", "tpot_p99_ms")}
    figs["be_alone"] = {"steps_per_s": med_range([r["be_alone"]["steps_per_s"] for r in pr["reps"]])}
    pr["summary"] = figs
    if "slo_aware" in figs:
        me = figs["slo_aware"]
        p99, bt = me["tpot_p99_norm"]["median"], me["be_norm"]["median"]
        dom = []
        for pol in args.policy_list:
            if pol == "slo_aware":
                continue
            q, b = figs[pol]["tpot_p99_norm"]["median"], figs[pol]["be_norm"]["median"]
            # at least as good on both, and better by more than DOMINANCE_TOL (relative) on one
            if q <= p99 and b >= bt and (q < p99 * (1 - DOMINANCE_TOL) or b > bt * (1 + DOMINANCE_TOL)):
                dom.append(pol)
        pr["slo_aware_dominated_by"] = dom
        pr["dominance_tolerance"] = DOMINANCE_TOL
        pr["slo_aware_p99_within"] = p99 <= args.p99_bound


def print_table(result: Dict[str, Any]) -> None:
    print()
    print(f"{result['device']}, {result['driver']}, {result['sms']} SMs, commit {result['commit']}; "
          f"{result['reps']} reps of {result['window_s']} s; medians (min-max) over the reps")
    print(f"{'pair':<22} {'policy':<11} {'TPOT p99/alone':>20} {'TPOT p50/alone':>20} {'BE/alone':>20}")
    for key, pr in result["pairs"].items():
        for pol, f in pr.get("summary", {}).items():
            if pol in ("ls_alone", "be_alone"):
                continue

            def fmt(m: Dict[str, float]) -> str:
                return f"{m['median']:.2f} ({m['min']:.2f}-{m['max']:.2f})"
            print(f"{key:<22} {pol:<11} {fmt(f['tpot_p99_norm']):>20} {fmt(f['tpot_p50_norm']):>20} "
                  f"{fmt(f['be_norm']):>20}")
        if "slo_aware_dominated_by" in pr:
            print(f"{key:<22} slo_aware dominated by: {pr['slo_aware_dominated_by'] or 'none'}; TPOT p99 within "
                  f"{result['p99_bound']}x alone: {pr['slo_aware_p99_within']}; logits bitwise identical on every "
                  f"pCtx: {pr.get('logits_bitwise_identical')}")


if __name__ == "__main__":
    sys.exit(main())
