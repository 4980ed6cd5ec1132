#!/usr/bin/env python3
"""Inference beside training with realistic arrivals: a Llama-3-8B-shaped
server (LS) answering requests timed by the Azure LLM code trace, open loop,
beside ResNet-50 or BERT-Large training (BE) whose step is a segmented graph,
under each policy.

    python3 bench/torch/colocate_arrivals.py [--out colocate_arrivals.json] [--pairs llama3+resnet50]
        [--loads 0.1,0.2,0.3,0.5] [--reps 3] [--seconds 4]

LS (colocate_torch's Decode, two vCtxs of class LS, each on its own thread):
  - prefill (phase prefill): one step per request over its prompt, cut to
    --max-prompt tokens and padded up to the next bucket (powers of two from
    128, and --max-prompt), a graph per bucket (VCtx.graph, captured on every
    pCtx, the buckets sharing one memory pool) on the decoder's weights: the
    prompt's keys and values into a prefill cache, causal attention
    (scaled_dot_product_attention; cuDNN's off), the first token's logits.
    FCFS: a request waits for the ones before it; its first token is out
    when its prefill step is synchronized;
  - decode (phase decode, slo_us = --slo-factor x the step's p99 alone):
    colocate_torch's Decode graph, a batch of --decode-batch sequences over a
    KV cache of --context positions; continuous batching: requests whose
    prefill is done join the running batch (at most --decode-batch) at the
    next step, and each leaves after its trace output length (cut to
    --max-tokens) of steps. Each step's time is recorded on the vCtx as a
    request (VCtx.request_record) unless --no-record, which slo_aware sizes
    its LS tier from. The graph's shape is fixed: a step costs the same for
    one running request or --decode-batch (what is measured is how a policy
    treats the LS work, not batching).
Arrivals: data/traces/azure_llm_2023_code.csv (serve_torch.load_trace and
window): repetition r takes the trace's requests [r*N, r*N+N) with their
inter-arrival times scaled so that they arrive at load x capacity
requests/s on average, N = W + that rate x --seconds (at least
--min-requests), of which the first W = that rate x --ls-warmup-seconds are
served but not counted, in the LS-alone run and under every configuration
alike: each configuration's policy is activated afresh, and what is measured
is how it serves after its first decisions, as after any warm-up (0 counts
from the first request: the cold start).
Capacity: requests/s when --capacity-requests requests all arrive at once,
LS alone on the whole GPU (policy shared). Latency is measured from the
scheduled arrival: TTFT = first token - arrival; TPOT per request = (its
last token - its first) / its decode steps.
BE (torch_jobs.TrainTenant): the job's step a graph of its vCtx (class BE),
replayed and synchronized back to back; two tenants per pair, the step cut
into segments of --segment-us (``seg``) and whole (``unseg``).

Configurations (--configs): `shared`, `priority`, `static` (one per LOW tier
of the pool, static@SMS: LS on that tier, BE on its complement), `reserve`
(reserve@SMS: policy static with ls_whole_gpu, LS urgent on the whole GPU
and BE on the complement of that tier: SMS to LS alone, stream priority on
the rest),
`slo_aware` (ls_sms --slo-ls-sms, from which it right-sizes),
`tpot_first` (its defaults), each with the segmented BE; NAME/unseg runs
NAME with the unsegmented BE (default: slo_aware/unseg). Per pair and load,
--reps repetitions, each with its own trace window: LS alone (policy
shared), each BE alone (--alone-seconds), then every configuration in an
order drawn from --seed: BE trains --warmup-seconds, then the window's
requests arrive and are served while BE trains on.

Figures per pair, load and configuration: TPOT p99 and TTFT p99 over the
same window alone (``*_norm``: per repetition, then medians and [min, max];
``pooled``: the p99 over the requests of all repetitions over alone's), BE
steps/s over the same variant alone (``be_norm``) and over the unsegmented
BE alone (``be_norm_vs_unseg``; built and measured only where a
configuration runs it, NaN otherwise), the BE vCtx's yields in the window and its
yield_p50_us / yield_p99_us (the library's, over its last 256 yields: they
include earlier windows' while a window has fewer), remaps, and the
decode steps' TPOT (colocate_torch's figure). The expected duration is
printed at the start; one pair at one load with 3 repetitions and the
defaults fits a 10-minute call. Writes JSON (--out), a table last; exit 77
(nothing run) without torch or a CUDA GPU. The frontier figure:
``python3 bench/dsbench plot-arrivals FILE``.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import math
import queue
import random
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench_common import REPO, detshare, low_tier_pool, pct, pool_json, provenance, torch_on_gpu, write_result
from colocate_torch import Decode, med_range, timed_replays
from decoder import LLAMA_ROPE_THETA, rope_tables
from serve_torch import load_trace, window
from torch_jobs import DECODERS, TRAIN_JOBS, Tenant, TrainTenant, parse_batches, rate_in

BASE_POLICIES = ("shared", "priority", "static", "reserve", "slo_aware", "tpot_first")
DEFAULT_CONFIGS = "shared,priority,static,slo_aware,tpot_first,slo_aware/unseg"
DEFAULT_PAIRS = "llama3+resnet50,llama3+bert_large"
BE_ALIASES = {"bert": "bert_large"}


# ---- pure helpers (tested without a GPU) ------------------------------------------------


def prefill_buckets(max_prompt: int, smallest: int = 128) -> List[int]:
    """Prompt lengths the prefill graphs are captured for: powers of two from
    `smallest` below max_prompt, and max_prompt itself."""
    out, b = [], smallest
    while b < max_prompt:
        out.append(b)
        b *= 2
    return out + [max_prompt]


def bucket_for(n: int, buckets: Sequence[int]) -> int:
    """The smallest bucket holding n tokens (the largest if none does)."""
    for b in buckets:
        if n <= b:
            return b
    return buckets[-1]


def parse_config(name: str) -> Tuple[str, Optional[int], bool]:
    """"POLICY[@SMS][/unseg]" -> (policy, SMS or None, segmented BE?).
    Raises ValueError for an unknown policy, a bad SMS or suffix."""
    base, _, suffix = name.partition("/")
    if suffix not in ("", "unseg", "seg"):
        raise ValueError(f"config {name!r}: the suffix must be /unseg or /seg")
    pol, _, sms = base.partition("@")
    if pol not in BASE_POLICIES:
        raise ValueError(f"config {name!r}: unknown policy {pol!r} (known: {', '.join(BASE_POLICIES)})")
    n: Optional[int] = None
    if sms:
        if pol not in ("static", "reserve") or not sms.isdigit() or int(sms) < 1:
            raise ValueError(f"config {name!r}: @SMS only for static and reserve, a positive integer")
        n = int(sms)
    return pol, n, suffix != "unseg"


def expand_configs(names: Sequence[str], low_tiers: Sequence[int]) -> List[str]:
    """The configurations to run: a bare `static` (or static/unseg) becomes
    static@N for every LOW tier N; the others stay; each once, in order."""
    out: List[str] = []
    for name in names:
        pol, sms, seg = parse_config(name)
        if pol in ("static", "reserve") and sms is None:
            out += [f"{pol}@{n}" + ("" if seg else "/unseg") for n in sorted(low_tiers)]
        else:
            out.append(name)
    return list(dict.fromkeys(out))


def schedule(trace: Sequence[Tuple[float, int, int]], rep: int, n: int, rate: float, max_prompt: int,
             max_tokens: int) -> List[Tuple[float, int, int]]:
    """n requests of the trace (window `rep`, serve_torch.window) arriving at
    `rate` requests/s on average (0: all at once), as (arrival s, prompt
    tokens cut to max_prompt, decode steps = output tokens cut to
    max_tokens)."""
    rows, _ = window(trace, rep, n, rate, 1 << 62)
    return [(at, max(1, min(p, max_prompt)), max(1, min(o, max_tokens))) for at, p, o in rows]


def requests_per_window(rate: float, seconds: float, least: int) -> int:
    return max(least, int(math.ceil(rate * seconds)))


def expected_seconds(a: argparse.Namespace, pairs: int, loads: int, configs: int, tpot_s: float = 0.015,
                     build_s: float = 60.0) -> float:
    """A guess of the run's length: the builds, the capacity runs, and per
    pair, load and repetition the alone references and every configuration
    (BE warm-up, the window, the drain of the last requests at tpot_s per
    decode step)."""
    drain = a.max_tokens * tpot_s + 0.5
    window_s = a.ls_warmup_seconds + a.seconds + drain
    per_rep = (window_s + 0.2) + 2 * (a.alone_seconds + 0.7) + configs * (a.warmup_seconds + window_s + 0.2)
    per_pair = 20.0 + loads * a.reps * per_rep  # the BE builds, the repetitions
    return build_s + a.capacity_requests * 0.05 + pairs * per_pair


def tpot_counts(reps: Sequence[Dict[str, Any]], cfg: str, slo_factor: float) -> Tuple[int, int]:
    """(requests within the TPOT SLO, requests) of `cfg` over the repetitions:
    a request is within when its TPOT is at most slo_factor x the p99 TPOT of
    LS alone in the same window (the figure the tables show, per request);
    unfinished ones are not."""
    within = total = 0
    for r in reps:
        c = r["configs"].get(cfg)
        if c is None:
            continue
        slo = slo_factor * pct(r["ls_alone"]["tpot_ms"], 99)
        within += sum(1 for t in c["tpot_ms"] if t <= slo)
        total += len(c["tpot_ms"]) + c["unfinished"]
    return within, total


def judge_load(lr: Dict[str, Any], slo_factor: float, target: float) -> Dict[str, Any]:
    """The benchmarks' verdict (bench/dsbench/verdict.py, the C rule of
    colocate and serve) at one load: slo_aware judged against every other
    configuration, the tail TPOT p99 / alone, BE over BE alone, attainment
    from tpot_counts. {"error": why} where it cannot judge (no library, no
    slo_aware)."""
    sm = lr.get("summary") or {}
    cfgs = {}
    for cfg, f in sm.items():
        if cfg in ("ls_alone", "be_alone"):
            continue
        lat, be = f.get("tpot_p99_norm") or {}, f.get("be_norm") or {}
        if lat.get("median") is None or be.get("median") is None:
            continue
        within, total = tpot_counts(lr["reps"], cfg, slo_factor)
        cfgs[cfg] = {"baseline": cfg != "slo_aware", "lat": (lat["median"], lat["min"], lat["max"]),
                     "be": (be["median"], be["min"], be["max"]), "within": within, "total": total}
    try:
        if not cfgs:
            raise ValueError("no configuration with figures")
        sys.path.insert(0, str(REPO / "bench"))  # only for this import: its torch/ would shadow PyTorch
        try:
            from dsbench import verdict
        finally:
            sys.path.remove(str(REPO / "bench"))
        v = verdict.judge(cfgs, "slo_aware" if "slo_aware" in cfgs else None, target)
    except Exception as e:  # noqa: BLE001 (a verdict that cannot be given is recorded, the run's figures stay)
        return {"error": f"{type(e).__name__}: {e}"}
    v["tpot_slo"] = f"{slo_factor} x LS alone's TPOT p99 in the same window, per request"
    return v


def verdict_line(v: Dict[str, Any]) -> str:
    """One line of a load's verdict."""
    if "error" in v:
        return f"no verdict ({v['error']})"
    if v.get("ok") is None:
        return "no verdict (slo_aware did not run)"
    lo, hi = v["attainment_interval"]["slo_aware"]
    w, t = v["attainment_counts"]["slo_aware"]
    clearly = ", ".join(v["baselines_clearly_meeting"]) or "none"
    return (f"slo_aware {w:.0f}/{t:.0f} within the TPOT SLO [{lo:.3f}, {hi:.3f}] "
            f"({'clearly meets' if v['slo_aware_clearly_meets'] else 'meets' if v['slo_aware_meets'] else 'misses'}"
            f" {v['target']}); baselines clearly meeting: {clearly}; dominated by: "
            f"{', '.join(v['slo_aware_dominated_by']) or 'none'} -> {'ok' if v['ok'] else 'NOT ok'}")


def rejudge(path: str, slo_factor: Optional[float], target: float) -> int:
    """--judge: the verdict of every pair and load of an existing result file, written into it."""
    import json

    d = json.loads(Path(path).read_text())
    factor = slo_factor if slo_factor is not None else d.get("slo_factor", 1.3)
    for key, pr in d.get("pairs", {}).items():
        for load, lr in pr.get("loads", {}).items():
            lr["verdict"] = judge_load(lr, factor, target)
            print(f"{key} load {load}: {verdict_line(lr['verdict'])}")
    d["verdict_target"] = target
    d["verdict_command"] = f"python3 colocate_arrivals.py --judge {Path(path).name} --target {target}" + (
        f" --slo-factor {slo_factor}" if slo_factor is not None else "")
    Path(path).write_text(json.dumps(d, indent=1) + "\n")
    return 0


def ratio(a: float, b: float) -> float:
    """a / b; NaN where b is 0 or NaN (no request finished)."""
    return a / b if b and b == b else float("nan")


def pooled_p99(reps: Sequence[Dict[str, Any]], key: str) -> float:
    """p99 over the per-request samples `key` of all repetitions."""
    return pct([x for r in reps for x in r.get(key, [])], 99)


# ---- arguments -----------------------------------------------------------------------


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="colocate_arrivals.json", help="JSON output file")
    p.add_argument("--pairs", default=DEFAULT_PAIRS, help="LS+BE pairs: LS llama3, BE a TRAIN_JOBS key (bert = "
                                                          "bert_large)")
    p.add_argument("--configs", default=DEFAULT_CONFIGS,
                   help="POLICY[@SMS][/unseg] list; bare static = static@ every LOW tier; /unseg: the unsegmented BE")
    p.add_argument("--loads", default="0.1,0.2,0.3,0.5", help="offered loads, fractions of LS capacity")
    p.add_argument("--reps", type=int, default=3, help="repetitions (trace windows) per pair and load")
    p.add_argument("--seconds", type=float, default=4.0, help="arrivals span about this long per window (s)")
    p.add_argument("--min-requests", type=int, default=4, help="requests per window, at least")
    p.add_argument("--alone-seconds", type=float, default=3.0, help="each BE alone reference (s)")
    p.add_argument("--warmup-seconds", type=float, default=1.0, help="BE trains this long before the arrivals (s)")
    p.add_argument("--ls-warmup-seconds", type=float, default=2.0,
                   help="each window starts with this long of the trace's requests (at the same rate), served but "
                        "not counted: a policy's first decisions after its activation, as after warm-up (s; 0: "
                        "counted from the first request)")
    p.add_argument("--drain-s", type=float, default=10.0,
                   help="a window ends this long after its last arrival at the latest (unfinished requests counted)")
    p.add_argument("--capacity-requests", type=int, default=48, help="requests of the capacity run (all at once)")
    p.add_argument("--trace", default=str(REPO / "data" / "traces" / "azure_llm_2023_code.csv"))
    p.add_argument("--max-prompt", type=int, default=2048, help="prompt tokens, most (longer ones are cut)")
    p.add_argument("--max-tokens", type=int, default=64, help="decode steps per request, most")
    p.add_argument("--segment-us", type=int, default=1000, help="the segmented BE graph's segment_us")
    p.add_argument("--decode-batch", type=int, default=8, help="sequences of the decode step (running requests, most)")
    p.add_argument("--context", type=int, default=1024, help="decode KV cache positions")
    p.add_argument("--layers", type=int, default=0, help="decoder layers (0 = the full model's 32)")
    p.add_argument("--slo-factor", type=float, default=1.3, help="decode vCtx slo_us = this x its step's p99 alone")
    p.add_argument("--slo-ls-sms", type=int, default=64, help="slo_aware's ls_sms (its starting LS tier)")
    p.add_argument("--no-record", action="store_true", help="do not record decode steps as requests of the vCtx")
    p.add_argument("--low-tiers", default="16,32,64,96,112", help="LOW tiers of the pool, SMs (each with its "
                                                                  "complement)")
    p.add_argument("--batch", default="", help="BE batch overrides, e.g. resnet50=32")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--target", type=float, default=0.99,
                   help="the verdict's attainment target: the share of requests whose TPOT is within --slo-factor x "
                        "LS alone's p99 (Wilson interval over all repetitions, bench/dsbench/verdict.py)")
    p.add_argument("--judge", default="", metavar="FILE",
                   help="no run: give the verdict of an existing result file (written into it) and exit")
    p.add_argument("--log", default="", help="write the library's log lines (INFO, DEBUG with DS_LOG_LEVEL=4) to "
                                             "this file, each with its time since the start")
    p.add_argument("--watchdog-s", type=float, default=0.0,
                   help="dump stacks and exit after this long (0: 1.5 x the expected duration + 300 s)")
    a = p.parse_args(argv)
    a.pair_list = []
    for x in [x for x in a.pairs.split(",") if x]:
        ls, _, be = x.partition("+")
        be = BE_ALIASES.get(be, be)
        if ls != "llama3" or ls not in DECODERS or be not in TRAIN_JOBS:
            p.error(f"pair {x!r}: want llama3+BE with BE in {tuple(TRAIN_JOBS)}")
        a.pair_list.append((ls, be))
    if not a.pair_list:
        p.error("--pairs is empty")
    try:
        a.config_names = [x for x in a.configs.split(",") if x]
        for c in a.config_names:
            parse_config(c)
    except ValueError as e:
        p.error(str(e))
    try:
        a.load_list = [float(x) for x in a.loads.split(",") if x]
    except ValueError:
        p.error("--loads: comma-separated numbers")
    if not a.load_list or any(not 0 < x for x in a.load_list):
        p.error("--loads must be positive fractions of capacity")
    if not 0 < a.target <= 1:
        p.error("--target must be in (0, 1]")
    if a.ls_warmup_seconds < 0:
        p.error("--ls-warmup-seconds must be 0 or more")
    if a.reps < 1 or a.seconds <= 0 or a.max_prompt < 1 or a.max_tokens < 1 or a.decode_batch < 1:
        p.error("--reps, --seconds, --max-prompt, --max-tokens and --decode-batch must be positive")
    if not 100 <= a.segment_us <= 10_000_000:
        p.error("--segment-us must be in 100 .. 10000000")
    a.batches = {BE_ALIASES.get(k, k): v for k, v in parse_batches(p, a.batch).items()}
    return a


# ---- LS: requests, prefill, decode -------------------------------------------------------


class Req:
    __slots__ = ("rid", "at", "prompt", "steps", "bucket", "at_abs", "first", "end", "left")

    def __init__(self, rid: int, at: float, prompt: int, steps: int, bucket: int) -> None:
        self.rid, self.at, self.prompt, self.steps, self.bucket = rid, at, prompt, steps, bucket
        self.at_abs = self.first = self.end = float("nan")
        self.left = steps


class Prefill(Tenant):
    """The prefill vCtx (class LS, phase prefill) on its own thread: a graph
    per prompt bucket on the decode tenant's weights; its loop prefills the
    requests in arrival order, each at its scheduled time, and hands them to
    the decode tenant's queue."""

    def __init__(self, rt: Any, dec: Decode, args: argparse.Namespace) -> None:
        super().__init__("ls-prefill")
        self.rt, self.dec_t, self.args = rt, dec, args
        self.buckets = prefill_buckets(args.max_prompt)
        self.graphs: Dict[int, Any] = {}
        self.vctx: Any = None
        self.reqs: List[Req] = []

    def _build(self) -> Dict[str, Any]:
        import torch

        d = self.dec_t.dec
        dev = torch.device("cuda", 0)
        t0 = time.perf_counter()
        n = self.args.max_prompt
        self.cos, self.sin = rope_tables(torch, dev, d.D, n, LLAMA_ROPE_THETA)
        self.k = torch.zeros(d.L, d.KV, n, d.D, dtype=torch.bfloat16, device=dev)
        self.v = torch.zeros_like(self.k)
        g = torch.Generator(device=dev).manual_seed(self.args.seed + 11)
        self.ids = torch.randint(0, d.vocab, (n,), device=dev, generator=g)
        torch.cuda.synchronize()
        self.vctx = self.rt.vctx("llama3-prefill", cls="ls", phase="prefill")
        pool = torch.cuda.MemPool()
        for b in sorted(self.buckets, reverse=True):  # the largest first: the others reuse its blocks
            self.graphs[b] = self.vctx.graph(lambda b=b: self.step(b), warmup=1, name=f"prefill-{b}", pool=pool)
        per = {}
        for b in self.buckets:
            xs = timed_replays(self.graphs[b], self.vctx, 2, 8)
            per[str(b)] = {"p50_ms": pct(xs, 50) * 1e3, "p99_ms": pct(xs, 99) * 1e3}
        ks = [max(p.kernel_nodes for p in self.graphs[b].stats().pctx if p.instantiated) for b in self.buckets]
        return {"buckets": self.buckets, "alone_whole_gpu": per, "kernel_nodes": dict(zip(map(str, self.buckets), ks)),
                "build_s": time.perf_counter() - t0}

    def step(self, n: int) -> Any:
        """Prefill of the static prompt's first n tokens: its keys and values
        into the prefill cache, the last token's greedy next token."""
        d = self.dec_t.dec
        F = d.F
        H, KV, D, G = d.H, d.KV, d.D, d.G
        x = d.embed[self.ids[:n]]
        cos, sin = self.cos[:n][:, None, :], self.sin[:n][:, None, :]
        for li, lw in enumerate(d.layers):
            q, k, v = d.qkv(x, lw)
            q = d.rope(q.view(n, H, D), cos, sin)
            k = d.rope(k.view(n, KV, D), cos, sin)
            self.k[li, :, :n] = k.transpose(0, 1)
            self.v[li, :, :n] = v.view(n, KV, D).transpose(0, 1)
            ks = self.k[li, :, :n].repeat_interleave(G, 0)[None]  # [1, H, n, D]
            vs = self.v[li, :, :n].repeat_interleave(G, 0)[None]
            o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], ks, vs, is_causal=True)
            x = d.mlp(x + o[0].transpose(0, 1).reshape(n, H * D) @ lw["wo"], lw)
        return d.head(x[n - 1:n]).argmax(-1)

    def _loop(self, stop: threading.Event) -> None:
        sync, out = self.vctx.synchronize, self.dec_t.queue
        for r in self.reqs:
            while not stop.is_set():
                dt = r.at_abs - time.perf_counter()
                if dt <= 0:
                    break
                time.sleep(min(dt, 0.0005))
            if stop.is_set():
                return
            self.graphs[r.bucket].replay()
            sync()
            r.first = time.perf_counter()
            out.put(r)

    def _close(self) -> None:
        for g in self.graphs.values():
            g.close()
        self.graphs = {}
        if self.vctx is not None:
            self.vctx.synchronize()
            self.vctx.close()
            self.vctx = None


class ArrivalDecode(Decode):
    """colocate_torch's Decode (its build: the SLO probe, the graph, its
    times per LOW tier) with a continuous-batching loop over requests handed
    over by the prefill tenant."""

    def __init__(self, rt: Any, arch: str, args: argparse.Namespace) -> None:
        super().__init__(rt, arch, args)
        self.queue: "queue.Queue[Req]" = queue.Queue()
        self.finished: List[Req] = []
        self.done = threading.Event()
        self.expect = 0

    def _loop(self, stop: threading.Event) -> None:
        replay, sync, steps, q = self.graph.replay, self.vctx.synchronize, self.steps, self.queue
        record = None if self.args.no_record else self.vctx.request_record
        cap = self.args.decode_batch
        steps.clear()
        running: List[Req] = []
        while not stop.is_set():
            while len(running) < cap:
                try:
                    running.append(q.get_nowait())
                except queue.Empty:
                    break
            if not running:
                try:
                    running.append(q.get(timeout=0.002))
                except queue.Empty:
                    pass
                continue
            t0 = time.perf_counter()
            replay()
            sync()
            t1 = time.perf_counter()
            steps.append((t1, t1 - t0))
            if record is not None:
                record((t1 - t0) * 1e6)
            keep = []
            for r in running:
                r.left -= 1
                if r.left > 0:
                    keep.append(r)
                else:
                    r.end = t1
                    self.finished.append(r)
            running = keep
            if len(self.finished) >= self.expect:
                self.done.set()


def serve(pf: Prefill, dec: ArrivalDecode, sched: Sequence[Tuple[float, int, int]], deadline_s: float,
          skip: int = 0) -> Dict[str, Any]:
    """Serves one window (the LS tenants' loops, open loop from now + 50 ms);
    returns per-request TTFT and TPOT (ms), the decode steps' TPOT, the
    window's bounds and what did not finish by the deadline. The first `skip`
    requests are served but not counted (the LS warm-up): the window starts
    at the first counted request's arrival."""
    reqs = [Req(i, at, p, o, bucket_for(p, pf.buckets)) for i, (at, p, o) in enumerate(sched)]
    t0 = time.perf_counter() + 0.05
    for r in reqs:
        r.at_abs = t0 + r.at
    while not dec.queue.empty():
        dec.queue.get_nowait()
    dec.finished = []
    dec.expect = len(reqs)
    dec.done.clear()
    pf.reqs = reqs
    dec.start_loop()
    pf.start_loop()
    last = reqs[-1].at_abs if reqs else t0
    dec.done.wait(max(0.0, last - time.perf_counter()) + deadline_s)
    pf.end_loop()
    dec.end_loop()
    counted = reqs[skip:]
    if counted:
        t0 = counted[0].at_abs
    fin = [r for r in counted if r.end == r.end]
    t1 = max([r.end for r in fin], default=time.perf_counter())
    return {"t0": t0, "t1": t1, "requests": len(counted), "unfinished": len(counted) - len(fin),
            "ttft_ms": [(r.first - r.at_abs) * 1e3 for r in fin],
            "tpot_ms": [(r.end - r.first) / r.steps * 1e3 for r in fin],
            "step_tpot_ms": [d * 1e3 for e, d in dec.steps if t0 <= e <= t1],
            "prompt_tokens": sum(r.prompt for r in counted), "decode_steps": sum(r.steps for r in counted)}


def ls_fig(s: Dict[str, Any]) -> Dict[str, Any]:
    """The window's figures (the samples kept for the pooled p99)."""
    return {"requests": s["requests"], "unfinished": s["unfinished"],
            "ttft_p50_ms": pct(s["ttft_ms"], 50), "ttft_p99_ms": pct(s["ttft_ms"], 99),
            "tpot_p50_ms": pct(s["tpot_ms"], 50), "tpot_p99_ms": pct(s["tpot_ms"], 99),
            "step_tpot_p99_ms": pct(s["step_tpot_ms"], 99), "window_s": s["t1"] - s["t0"],
            "ttft_ms": s["ttft_ms"], "tpot_ms": s["tpot_ms"]}


# ---- policies ------------------------------------------------------------------------


def apply_config(rt: Any, name: str, args: argparse.Namespace) -> Dict[str, Any]:
    """Activates the configuration's policy with its parameters; returns them."""
    pol, sms, _ = parse_config(name)
    params: Dict[str, Any] = {}
    if pol in ("static", "reserve"):
        params["ls_sms"] = sms if sms is not None else 64
        params["ls_whole_gpu"] = int(pol == "reserve")
        pol = "static"
    elif pol == "slo_aware":
        params["ls_sms"] = args.slo_ls_sms
    rt.set_policy(pol)
    for k, v in params.items():
        rt.set_policy_param(pol, k, v)
    return params


def yields_of(st: Any) -> Dict[str, Any]:
    return {k: getattr(st, k, None) for k in ("yields", "yield_p50_us", "yield_p99_us", "yield_max_us")}


# ---- main ----------------------------------------------------------------------------


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if args.judge:
        return rejudge(args.judge, args.slo_factor, args.target)
    mods = ["torchvision"] if any(be.startswith("resnet") for _, be in args.pair_list) else []
    mods += ["transformers"] if any(be == "bert_large" for _, be in args.pair_list) else []
    torch = torch_on_gpu("colocate_arrivals", *mods)
    if torch is None:
        return 77
    t_start = time.perf_counter()
    sys.setswitchinterval(0.001)  # the tenant threads share the GIL: switch often
    torch.zeros(1, device="cuda")
    torch.backends.cuda.enable_cudnn_sdp(False)  # as colocate_torch
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tiers = low_tier_pool(sms, args.low_tiers)
    if args.log:
        log_file = open(args.log, "w", buffering=1)
        log_lock = threading.Lock()

        def on_log(level: Any, msg: str) -> None:
            with log_lock:
                log_file.write(f"{time.perf_counter() - t_start:10.3f} {level.name} {msg}\n")

        detshare.set_log_handler(on_log, detshare.LogLevel.INFO)
    rt = detshare.Runtime("cuda", policy="shared", tiers=tiers)
    info = rt.info()
    lows = sorted(p.sm_count for p in info.pctx if p.anchor.name == "LOW")
    configs = expand_configs(args.config_names, lows)
    est = expected_seconds(args, len(args.pair_list), len(args.load_list), len(configs))
    print(f"colocate_arrivals: {len(args.pair_list)} pairs x {len(args.load_list)} loads x {args.reps} reps x "
          f"{len(configs)} configs ({', '.join(configs)}); expected about {est:.0f} s", flush=True)
    faulthandler.dump_traceback_later(args.watchdog_s or 1.5 * est + 300, exit=True)
    trace = load_trace(args.trace)
    result: Dict[str, Any] = {
        **provenance("colocate_arrivals", info, argv),
        "torch": torch.__version__, "cudnn_sdp": False, "expected_s": est,
        "trace": str(Path(args.trace).resolve().relative_to(REPO)) if str(Path(args.trace).resolve()).startswith(
            str(REPO)) else args.trace,
        **{k: getattr(args, k) for k in ("seed", "reps", "seconds", "min_requests", "alone_seconds",
                                         "warmup_seconds", "ls_warmup_seconds", "capacity_requests",
                                         "max_prompt", "max_tokens",
                                         "segment_us", "decode_batch", "context", "slo_factor", "slo_ls_sms")},
        "record_decode_steps": not args.no_record, "loads": args.load_list, "configs": configs,
        "pool": pool_json(info),
        "ls": {}, "pairs": {}, "errors": [],
    }
    for m in mods:
        result[m] = __import__(m).__version__
    out = Path(args.out)

    def save() -> None:
        write_result(out, result, t_start)

    dec: Optional[ArrivalDecode] = None
    pf: Optional[Prefill] = None
    rng = random.Random(args.seed)
    try:
        print("building LS llama3 (decode, then prefill buckets)", flush=True)
        dec = ArrivalDecode(rt, "llama3", args)
        result["ls"]["decode"] = dec.call("build")
        pf = Prefill(rt, dec, args)
        result["ls"]["prefill"] = pf.call("build")
        rt.set_policy("shared")
        cap_sched = schedule(trace, 1000, args.capacity_requests, 0.0, args.max_prompt, args.max_tokens)
        serve(pf, dec, cap_sched[:4], 30.0)  # warm-up: the loops' first steps
        c = serve(pf, dec, cap_sched, 120.0)
        capacity = (c["requests"] - c["unfinished"]) / (c["t1"] - c["t0"])
        result["ls"]["capacity"] = {"rps": capacity, "requests": c["requests"], "unfinished": c["unfinished"],
                                    "window_s": c["t1"] - c["t0"], "method": "all requests at once, LS alone, "
                                    "policy shared; finished requests / (last end - start)"}
        tpot_s = result["ls"]["decode"]["probe_tpot_p99_ms"] / 1e3
        est2 = expected_seconds(args, len(args.pair_list), len(args.load_list), len(configs), tpot_s=tpot_s,
                                build_s=time.perf_counter() - t_start)
        print(f"LS: decode step p99 {tpot_s * 1e3:.2f} ms, slo_us {result['ls']['decode']['slo_us']}; capacity "
              f"{capacity:.2f} req/s; expected about {est2:.0f} s in all", flush=True)
        save()
        for ls_name, be_name in args.pair_list:
            key = f"{ls_name}+{be_name}"
            pr: Dict[str, Any] = {"ls": ls_name, "be": be_name, "be_models": {}, "loads": {}}
            result["pairs"][key] = pr
            bes: Dict[str, TrainTenant] = {}
            try:
                # the unsegmented BE only where a configuration runs it: both
                # variants' graphs on every pCtx beside llama3 do not fit in
                # 80 GB with BERT-Large
                variants = [("seg", args.segment_us)]
                if any(not parse_config(c)[2] for c in configs):
                    variants.append(("unseg", 0))
                for var, seg_us in variants:
                    print(f"building BE {be_name} ({var})", flush=True)
                    bes[var] = TrainTenant(rt, f"be-{be_name}-{var}", be_name, args.batches.get(be_name), args.seed,
                                           True, segment_us=seg_us)
                    pr["be_models"][var] = bes[var].call("build")
                    if not pr["be_models"][var].get("graph"):
                        raise RuntimeError(f"BE {var}: no graph: {pr['be_models'][var].get('graph_error')}")
                save()
                for load in args.load_list:
                    rate = load * capacity
                    n = requests_per_window(rate, args.seconds, args.min_requests)
                    n_warm = int(math.ceil(rate * args.ls_warmup_seconds))
                    lr: Dict[str, Any] = {"rate_rps": rate, "requests_per_window": n, "warmup_requests": n_warm,
                                          "reps": []}
                    pr["loads"][str(load)] = lr
                    for rep in range(args.reps):
                        sched = schedule(trace, rep, n_warm + n, rate, args.max_prompt, args.max_tokens)
                        slack = args.drain_s
                        order = list(configs)
                        rng.shuffle(order)
                        rt.set_policy("shared")
                        r: Dict[str, Any] = {"order": order, "ls_alone": ls_fig(serve(pf, dec, sched, slack, n_warm)),
                                             "be_alone": {}, "configs": {}}
                        for var, be in bes.items():
                            rt.set_policy("shared")
                            r["be_alone"][var] = rate_in(be.ends, *be.window(0.5, args.alone_seconds))
                        for cfg in order:
                            _, _, seg = parse_config(cfg)
                            be = bes["seg" if seg else "unseg"]
                            params = apply_config(rt, cfg, args)
                            if args.log:
                                log_file.write(f"{time.perf_counter() - t_start:10.3f} == {ls_name}+{be_name} "
                                               f"load {load} rep {rep} {cfg}\n")
                            s0 = be.vctx.stats()
                            be.start_loop()
                            try:
                                time.sleep(args.warmup_seconds)
                                s = serve(pf, dec, sched, slack, n_warm)
                            finally:
                                be.end_loop()
                            s1 = be.vctx.stats()
                            f = ls_fig(s)
                            alone = r["ls_alone"]
                            bt = rate_in(be.ends, s["t0"], s["t1"])
                            va = r["be_alone"]["seg" if seg else "unseg"]["steps_per_s"]
                            ua = r["be_alone"].get("unseg", {}).get("steps_per_s")
                            f.update({
                                "params": params, "be": "seg" if seg else "unseg",
                                "tpot_p99_norm": ratio(f["tpot_p99_ms"], alone["tpot_p99_ms"]),
                                "ttft_p99_norm": ratio(f["ttft_p99_ms"], alone["ttft_p99_ms"]),
                                "be_steps_per_s": bt["steps_per_s"], "be_norm": ratio(bt["steps_per_s"], va),
                                "be_norm_vs_unseg": ratio(bt["steps_per_s"], ua),
                                **{f"be_{k}": v for k, v in yields_of(s1).items()},
                                "be_yields": (s1.yields - s0.yields) if hasattr(s1, "yields") else None,
                                "be_remaps": s1.remaps - s0.remaps, "be_pctx": s1.pctx,
                                "ls_decode_pctx": dec.vctx.stats().pctx, "ls_prefill_pctx": pf.vctx.stats().pctx})
                            r["configs"][cfg] = f
                            print(f"  {key} load {load} rep {rep} {cfg:<16} TPOT p99 x{f['tpot_p99_norm']:.2f} TTFT "
                                  f"p99 x{f['ttft_p99_norm']:.2f} BE x{f['be_norm']:.3f} yields {f['be_yields']} "
                                  f"(p99 {f.get('be_yield_p99_us')} us)", flush=True)
                        lr["reps"].append(r)
                        save()
                    summarize(lr, configs)
                    lr["verdict"] = judge_load(lr, args.slo_factor, args.target)
                    save()
            except Exception:  # noqa: BLE001 (the other pairs still run)
                err = traceback.format_exc()
                print(err, flush=True)
                result["errors"].append({"pair": key, "error": err})
            finally:
                for t in bes.values():
                    try:
                        t.shut()
                    except Exception:  # noqa: BLE001
                        result["errors"].append({"pair": key, "phase": "close", "error": traceback.format_exc()})
                bes.clear()
                gc.collect()
                torch.cuda.empty_cache()
            save()
    except BaseException:
        result["errors"].append({"phase": "main", "error": traceback.format_exc()})
        save()
        raise
    finally:
        for t in (pf, dec):
            if t is not None:
                try:
                    t.shut()
                except Exception:  # noqa: BLE001
                    result["errors"].append({"phase": "close", "error": traceback.format_exc()})
        gc.collect()
    save()
    rt.close()
    faulthandler.cancel_dump_traceback_later()
    print_table(result)
    return 0 if not result["errors"] else 1


SUMMARY_KEYS = ("tpot_p99_norm", "ttft_p99_norm", "be_norm", "be_norm_vs_unseg", "tpot_p99_ms", "ttft_p99_ms",
                "be_steps_per_s", "be_yield_p50_us", "be_yield_p99_us", "be_yields", "step_tpot_p99_ms")


def summarize(lr: Dict[str, Any], configs: Sequence[str]) -> None:
    """Per configuration: medians and [min, max] over the repetitions, and the
    p99 over the requests of all repetitions over alone's (``pooled``)."""
    reps = lr["reps"]
    alone = [r["ls_alone"] for r in reps]
    out: Dict[str, Any] = {}
    for cfg in configs:
        cs = [r["configs"][cfg] for r in reps if cfg in r["configs"]]
        if not cs:
            continue
        f: Dict[str, Any] = {k: med_range([c[k] for c in cs if isinstance(c.get(k), (int, float))])
                             for k in SUMMARY_KEYS}
        pooled = {"tpot_p99_ms": pooled_p99(cs, "tpot_ms"), "ttft_p99_ms": pooled_p99(cs, "ttft_ms"),
                  "alone_tpot_p99_ms": pooled_p99(alone, "tpot_ms"), "alone_ttft_p99_ms": pooled_p99(alone, "ttft_ms"),
                  "requests": sum(len(c["tpot_ms"]) for c in cs), "unfinished": sum(c["unfinished"] for c in cs)}
        pooled["tpot_p99_norm"] = ratio(pooled["tpot_p99_ms"], pooled["alone_tpot_p99_ms"])
        pooled["ttft_p99_norm"] = ratio(pooled["ttft_p99_ms"], pooled["alone_ttft_p99_ms"])
        f["pooled"] = pooled
        out[cfg] = f
    out["ls_alone"] = {k: med_range([a[k] for a in alone]) for k in ("tpot_p99_ms", "ttft_p99_ms")}
    out["be_alone"] = {v: med_range([r["be_alone"][v]["steps_per_s"] for r in reps])
                       for v in ("seg", "unseg") if all(v in r["be_alone"] for r in reps)}
    lr["summary"] = out


def print_table(result: Dict[str, Any]) -> None:
    def mr(m: Dict[str, Any]) -> str:
        if not m or m.get("median") is None or m["median"] != m["median"]:
            return "-"
        return f"{m['median']:.2f} ({m['min']:.2f}-{m['max']:.2f})"

    print()
    print(f"{result['device']}, {result['driver']}, {result['sms']} SMs, commit {result['commit']}; {result['reps']} "
          f"reps of {result['seconds']} s per load; LS capacity "
          f"{result['ls'].get('capacity', {}).get('rps', float('nan')):.2f} req/s; medians (min-max) over the reps, "
          "pooled = p99 over all reps' requests")
    print(f"{'pair':<18} {'load':>4} {'config':<16} {'TPOT p99/alone':>17} {'pooled':>6} {'TTFT p99/alone':>17} "
          f"{'pooled':>6} {'BE/alone':>17} {'yield p99 us':>17}")
    for key, pr in result["pairs"].items():
        for load, lr in pr["loads"].items():
            for cfg, f in lr.get("summary", {}).items():
                if cfg in ("ls_alone", "be_alone"):
                    continue
                po = f["pooled"]
                print(f"{key:<18} {load:>4} {cfg:<16} {mr(f['tpot_p99_norm']):>17} {po['tpot_p99_norm']:>6.2f} "
                      f"{mr(f['ttft_p99_norm']):>17} {po['ttft_p99_norm']:>6.2f} {mr(f['be_norm']):>17} "
                      f"{mr(f['be_yield_p99_us']):>17}")
            if lr.get("verdict"):
                print(f"{key:<18} {load:>4} verdict: {verdict_line(lr['verdict'])}")


if __name__ == "__main__":
    sys.exit(main())
