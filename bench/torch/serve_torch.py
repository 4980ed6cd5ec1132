#!/usr/bin/env python3
"""W5 in PyTorch: a Llama-architecture engine with continuous batching on the
Azure LLM trace, prefill and decode multiplexed through detshare.serving
(modes single, pdmux_static, slo_aware, tpot_first), alone and beside a
ResNet-50 training tenant, plus a token-identity check.

    python3 bench/torch/serve_torch.py [--out DIR] [--requests 48] [--loads 0.2,0.4] [--reps 3]

The model is the example's own (nothing downloaded, random bf16 weights from
--seed), Llama-3.2-1B's shape by default (1.24 B parameters): hidden 2048, 16
layers, 32 query and 8 KV heads of 64 (grouped-query attention), SwiGLU MLP
8192, vocabulary 128256 tied to the LM head, RMSNorm, RoPE (theta 500000). The
KV cache is preallocated: [layer][slot, KV head, position, head dim], --max-ctx
positions per slot: --max-batch decode slots, where the running batch's
request i always lives in slot i, and --prefill-slots slots for prompts being
prefilled.

Engine:
  - prefill: chunked (--chunk tokens per chunk, FCFS, the unfinished request
    first); the chunk's tokens go through the linear layers together and each
    request's segment attends to its prefill slot with scaled_dot_product_attention
    (causal, grouped-query); eager, on the prefill vCtx (PDMux.prefill);
  - decode: one token for every running request per step, a graph per batch
    bucket captured on every pCtx (PDMux.capture_decode); the step attends
    over the first bs decode slots, all --max-ctx positions under a mask
    (matmul, fp32 softmax, matmul), so every bucket's graph has static shapes;
  - scheduler: one thread; new requests enter prefill while a prefill slot is
    free and the batch has room; a request whose prompt is done joins the
    running batch with its first token (greedy argmax): its cache entries are
    copied to the next decode slot, in a section of the decode vCtx before the
    next step; it finishes after its trace output length, and the batch's
    last request moves into its slot (the same copy).
Arrivals (as W5, bench/serve): the project's copy of the Azure 2023 code
trace (data/traces/); repetition r replays requests [r*N, r*N+N) with their
inter-arrival times scaled to the target rate; lengths are cut to --max-ctx
where needed (counted).
Run:
  1. capacity (load 1.0): `single` serving N requests that all arrive at once
     (unless --capacity-rps gives it: a second run at the first run's loads);
  2. SLOs: `single` at load 0.1: TTFT SLO = 5x its TTFT p50, TPOT SLO = 2x its
     TPOT p50 (unless --slo-ttft-ms / --slo-tpot-ms);
  3. every mode at every load of --loads, --reps trace windows each;
  4. with --colocate L: every mode at load L beside ResNet-50 training
     (torchvision, weights=None, batch --be-batch, bf16 autocast, SGD) on its
     own thread and vCtx; BE steps/s normalized to BE alone, TTFT/TPOT p99
     normalized to the same mode alone at L, per repetition;
  5. host time per decode step: per bucket, the enqueue (PDMux.decode: input
     copy, replay, output copy) against the step's GPU time (CUDA events in
     sections around it, alone on the whole GPU); and during serving, the
     enqueue against the step's wall time;
  6. token identity: --det-prompts prompts decoded greedily (--det-tokens
     each, one prefill chunk per prompt, then decode steps of all of them
     together) under `single` alone (the reference), under every mode alone
     and co-located, and with both vCtxs remapped to each pCtx of the pool:
     the tokens must be identical and the last step's logits bitwise equal.
Writes DIR/NAME.json (NAME: --name, serve_torch; DIR: --out, else $DS_RESULTS_DIR, else
build/gpu-results) and prints a table last. Exit 77 (nothing run) without
torch or a CUDA GPU; exit 1 when a check fails.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import faulthandler
import gc
import json
import math
import os
import re
import shlex
import statistics
import sys
import threading
import time
import traceback
from collections import deque
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench_common import REPO, commit, detshare, driver_string, out_dir, pct, torch_on_gpu
from decoder import Llama, add_shape_args

from detshare import serving


def causal_lower_right(q_len: int, kv_len: int) -> Any:
    """A causal mask with the queries at the last q_len of kv_len positions,
    as torch.nn.attention.bias.causal_lower_right makes it (dispatched to the
    flash and memory-efficient kernels)."""
    from torch.nn.attention.bias import causal_lower_right as clr

    return clr(q_len, kv_len)

MODES = ("single", "pdmux_static", "slo_aware", "tpot_first")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None, help="output folder (default: $DS_RESULTS_DIR, else build/gpu-results)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--trace", default=str(REPO / "data" / "traces" / "azure_llm_2023_code.csv"))
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--requests", type=int, default=48, help="requests per run (one trace window)")
    p.add_argument("--loads", default="0.2,0.4", help="fractions of capacity")
    p.add_argument("--reps", type=int, default=3, help="trace windows per load")
    p.add_argument("--colocate", type=float, default=0.2, help="load of the co-located runs (0: none)")
    p.add_argument("--slo-ttft-ms", type=float, default=0.0, help="0: 5x single's TTFT p50 at load 0.1")
    p.add_argument("--slo-tpot-ms", type=float, default=0.0, help="0: 2x single's TPOT p50 at load 0.1")
    p.add_argument("--capacity-rps", type=float, default=0.0,
                   help="requests/s that load 1.0 means (0: single serving every request at once, measured); "
                        "given, a second run's loads are the first run's")
    p.add_argument("--name", default="serve_torch", help="the JSON's name in DIR, without .json")
    p.add_argument("--log", default=None,
                   help="file for the library's log lines at INFO (the policies' tier changes; see --log-level), "
                        "each with the seconds since start, between lines that mark each run (mode, load, "
                        "repetition)")
    p.add_argument("--log-level", choices=("info", "debug"), default="info",
                   help="the least level --log records: debug adds each placement a policy makes (many lines)")
    # Policy parameters for experiments: unset, each policy's own default (what a user who links the
    # library gets; the policies size their tiers from the requests recorded).
    p.add_argument("--ls-sms", type=int, default=None,
                   help="slo_aware's first decode tier (policy params ls_sms and decode_sms), and tpot_first's "
                        "unless --tpot-ls-sms")
    p.add_argument("--tpot-ls-sms", type=int, default=None,
                   help="tpot_first's ls_sms and prefill_sms half of it (prefill starts on the LOW tier nearest "
                        "half of it)")
    p.add_argument("--be-window-us", type=int, default=None, help="slo_aware/tpot_first be_window_us")
    p.add_argument("--prefill-whole", type=int, choices=(0, 1, 2), default=None,
                   help="slo_aware's prefill_whole: 0 prefill on decode's complement, 1 urgent on the whole GPU, "
                        "2 there below decode")
    p.add_argument("--prefill-press", type=int, choices=(0, 1), default=None,
                   help="slo_aware's prefill_press: 1 lets prefill's TTFT misses step decode's tier down sooner")
    p.add_argument("--reserve", type=int, choices=(0, 1), default=None,
                   help="slo_aware's reserve: 0 keeps decode on its tier where it would run urgent on the whole GPU "
                        "(busy over 60%% of the time, or missing on its largest tier)")
    p.add_argument("--record-tpot", type=int, choices=(0, 1), default=0,
                   help="1: report each finished request's TPOT to the decode vCtx (PDMux.record_tpot), so the "
                        "policies size decode's SMs (it can take them from prefill: docs/results/h100/serve_torch_shapes/"
                        "decode_sizing/); 0 (default): decode stays on its policy's starting tier")
    p.add_argument("--max-batch", type=int, default=32)
    p.add_argument("--max-ctx", type=int, default=8192)
    p.add_argument("--chunk", type=int, default=8192, help="prefill tokens per chunk")
    p.add_argument("--prefill-slots", type=int, default=8, help="prompts being prefilled at once, most")
    add_shape_args(p)  # --layers, --hidden, --heads, --kv-heads, --head-dim, --intermediate, --vocab
    p.add_argument("--be-batch", type=int, default=64, help="ResNet-50 batch")
    p.add_argument("--be-alone-s", type=float, default=6.0, help="BE alone: measured seconds")
    p.add_argument("--det-prompts", type=int, default=4)
    p.add_argument("--det-tokens", type=int, default=12)
    p.add_argument("--timing-steps", type=int, default=50, help="per bucket, timed decode steps")
    p.add_argument("--switch-interval-ms", type=float, default=0.5, help="sys.setswitchinterval")
    p.add_argument("--budget-s", type=float, default=540.0,
                   help="stop starting runs after this many seconds (results so far are written)")
    return p.parse_args()


# ---- arrivals ---------------------------------------------------------------------------


def parse_ts(s: str) -> float:
    """Seconds from a TIMESTAMP cell: 'YYYY-MM-DD hh:mm:ss[.fraction]' or a number."""
    s = s.strip()
    try:
        return float(s)
    except ValueError:
        pass
    head, _, frac = s.partition(".")
    t = _dt.datetime.strptime(head, "%Y-%m-%d %H:%M:%S").replace(tzinfo=_dt.timezone.utc).timestamp()
    return t + (float("0." + frac) if frac else 0.0)


def load_trace(path: str) -> List[Tuple[float, int, int]]:
    """(arrival s from the first, prompt tokens, output tokens) per row."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append((parse_ts(r["TIMESTAMP"]), int(r["ContextTokens"]), int(r["GeneratedTokens"])))
    if not rows:
        raise SystemExit(f"{path}: no requests")
    t0 = rows[0][0]
    return [(t - t0, max(1, p), max(1, o)) for t, p, o in rows]


def window(trace: Sequence[Tuple[float, int, int]], rep: int, n: int, rate: float, max_ctx: int
           ) -> Tuple[List[Tuple[float, int, int]], int]:
    """n requests from [rep*n, rep*n+n) (wrapping) arriving at `rate` req/s on
    average (inter-arrival times scaled by one factor; rate <= 0: all at 0);
    lengths cut to max_ctx (output first). Returns them and how many were cut."""
    rows = [trace[(rep * n + i) % len(trace)] for i in range(n)]
    first, last = rows[0][0], rows[-1][0]
    span = last - first
    scale = ((n - 1) / span) / rate if rate > 0 and span > 0 else 0.0
    out, cut = [], 0
    for t, p, o in rows:
        if p + o > max_ctx:
            cut += 1
            o = max(1, min(o, max_ctx - p))
            p = max(1, min(p, max_ctx - o))
        out.append(((t - first) * scale if scale else 0.0, p, o))
    return out, cut


# ---- the model ------------------------------------------------------------------------


class Model(Llama):
    """Weights and RoPE tables (decoder.Llama), KV cache, decode's static inputs and outputs."""

    def __init__(self, torch: Any, a: argparse.Namespace, dev: Any) -> None:
        super().__init__(torch, a, dev, a.max_ctx)
        self.dev = dev
        self.MB = a.max_batch
        self.pf_base = a.max_batch  # the first prefill slot
        hd, bf = a.hidden, torch.bfloat16
        self.params = sum(t.numel() for lw in self.layers for t in lw.values()) + self.embed.numel() + hd
        slots = a.max_batch + a.prefill_slots
        self.k_cache = torch.zeros(self.L, slots, self.KV, self.C, self.D, dtype=bf, device=dev)
        self.v_cache = torch.zeros_like(self.k_cache)
        self.b_idx = torch.arange(self.MB, device=dev)
        self.scale = self.D ** -0.5
        # decode's static inputs (tokens, positions); their pinned host copies come with each PDMux
        self.inp = torch.zeros(2, self.MB, dtype=torch.long, device=dev)
        self.inp_host: Any = None
        self.tok_host: Any = None

    def host_buffers(self, on: bool) -> None:
        """Allocates (on) or frees the pinned buffers of decode's inputs and
        tokens. torch's pinned-memory cache records an event, at free, on
        every stream a buffer was copied on: free them while those streams
        (the decode vCtx's) exist; a record on a destroyed stream crashes."""
        t = self.t
        if on:
            self.inp_host = t.zeros(2, self.MB, dtype=t.long).pin_memory()
            self.tok_host = t.zeros(self.MB, dtype=t.long).pin_memory()
        else:
            self.inp_host = self.tok_host = None
            gc.collect()

    def decode_step(self, bs: int) -> Tuple[Any, Any]:
        """One token for the requests in decode slots 0..bs-1, inputs in the first
        bs entries of self.inp: (logits [bs, vocab] bf16, tokens [bs]). Padding
        entries write position 0 of a free slot, which a joining request's copy
        overwrites."""
        H, KV, G, D = self.H, self.KV, self.G, self.D
        tok, pos, bi = self.inp[0, :bs], self.inp[1, :bs], self.b_idx[:bs]
        x = self.embed[tok]
        masked = (self.ctx_idx[None, :] > pos[:, None])[:, None, None, :]  # [bs, 1, 1, C]
        for li, lw in enumerate(self.layers):
            q, k, v = self.qkv(x, lw)
            q = self.rope(q.view(bs, H, D), *self.rope_at(pos))
            k = self.rope(k.view(bs, KV, D), *self.rope_at(pos))
            kc, vc = self.k_cache[li, :bs], self.v_cache[li, :bs]  # [bs, KV, C, D], views
            kc[bi, :, pos] = k
            vc[bi, :, pos] = v.view(bs, KV, D)
            # the G query heads of a KV head as G rows: [bs, KV, G, D] x [bs, KV, D, C]
            sc = (q.view(bs, KV, G, D) @ kc.transpose(-1, -2)).float().mul_(self.scale)
            p = sc.masked_fill_(masked, float("-inf")).softmax(-1).to(x.dtype)
            o = p @ vc  # [bs, KV, G, D]
            x = self.mlp(x + o.reshape(bs, H * D) @ lw["wo"], lw)
        logits = self.head(x)
        return logits, logits.argmax(-1)

    def move(self, src: int, dst: int, length: int) -> None:
        """Copies cache positions [0, length) of slot src to slot dst (current stream)."""
        for c in (self.k_cache, self.v_cache):
            c[:, dst, :, :length].copy_(c[:, src, :, :length])

    def prefill(self, segs: Sequence[Tuple[int, int, Sequence[int], bool]], keep_logits: bool = False
                ) -> Tuple[List[int], Any]:
        """One chunk: segments (slot, start position, token ids, last segment of
        its prompt?). Writes the cache; returns the first token of every
        completed prompt (in segment order) and, with keep_logits, their logits
        on the host (float32). Runs on the current stream and reads back."""
        t, F, H, KV, D = self.t, self.F, self.H, self.KV, self.D
        ids = t.tensor([x for s in segs for x in s[2]], dtype=t.long).to(self.dev, non_blocking=True)
        pos = t.cat([t.arange(s[1], s[1] + len(s[2]), device=self.dev) for s in segs])
        n = ids.numel()
        x = self.embed[ids]
        for li, lw in enumerate(self.layers):
            q, k, v = self.qkv(x, lw)
            q = self.rope(q.view(n, H, D), *self.rope_at(pos))
            k = self.rope(k.view(n, KV, D), *self.rope_at(pos))
            v = v.view(n, KV, D)
            kc, vc = self.k_cache[li], self.v_cache[li]
            outs, off = [], 0
            for slot, start, toks, _ in segs:
                m = len(toks)
                end = start + m
                kc[slot, :, start:end] = k[off:off + m].transpose(0, 1)
                vc[slot, :, start:end] = v[off:off + m].transpose(0, 1)
                qs = q[off:off + m].transpose(0, 1)[None]  # [1, H, m, D]
                # the G query heads of a KV head share it: expand the KV heads (flash and
                # memory-efficient attention take equal head counts)
                ks = kc[slot, :, :end].repeat_interleave(self.G, 0)[None]
                vs = vc[slot, :, :end].repeat_interleave(self.G, 0)[None]
                # causal with the chunk's queries at the end of the context (start > 0:
                # the rest of a prompt begun in an earlier chunk)
                o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=causal_lower_right(m, end))
                outs.append(o[0].transpose(0, 1).reshape(m, H * D))
                off += m
            x = self.mlp(x + t.cat(outs) @ lw["wo"], lw)
        last, off = [], 0
        for _, _, toks, done in segs:
            off += len(toks)
            if done:
                last.append(off - 1)
        if not last:
            return [], None
        logits = self.head(x[t.tensor(last, device=self.dev)])
        first = logits.argmax(-1).tolist()
        return first, (logits.float().cpu() if keep_logits else None)


# ---- serving ------------------------------------------------------------------------


class Req:
    __slots__ = ("rid", "at", "prompt", "output", "toks", "slot", "done_prompt", "generated", "pos", "last")

    def __init__(self, rid: int, at: float, prompt: List[int], output: int) -> None:
        self.rid, self.at, self.prompt, self.output = rid, at, prompt, output
        self.toks: List[int] = []
        self.slot = -1
        self.done_prompt = 0  # prompt tokens prefilled
        self.generated = 0
        self.pos = 0  # position of the next decode input token
        self.last = 0  # last token


class Engine:
    """The scheduler over one PDMux; run() serves one list of arrivals."""

    def __init__(self, torch: Any, model: Model, a: argparse.Namespace) -> None:
        self.t, self.m, self.a = torch, model, a
        self.mux: Optional[serving.PDMux] = None
        self.moves: List[Tuple[int, int, int]] = []  # (src slot, dst slot, positions) before the next step
        self.copied: List[int] = []  # prefill slots the last staged step copies from

    def join(self, running: List[Req], r: Req) -> None:
        """r's prompt is done: it becomes running[-1], in decode slot len(running)-1."""
        self.moves.append((r.slot, len(running), r.pos))
        r.slot = len(running)
        running.append(r)

    def compact(self, running: List[Req], gone: Sequence[int]) -> None:
        """Removes the requests at indices `gone` of running; the last request
        moves into each hole, so request i stays in decode slot i."""
        for i in sorted(gone, reverse=True):
            last = running.pop()
            if i < len(running):
                running[i] = last
                self.moves.append((last.slot, i, last.pos))
                last.slot = i

    def open(self, rt: Any, mode: str, tpot_slo_us: int, ttft_slo_us: int = 0) -> None:
        """The engine's PDMux for `mode`: decode's SLO the TPOT, prefill's the
        TTFT (latency-sensitive where given; each request's TTFT recorded)."""
        self.mux = serving.PDMux(rt, mode, tpot_slo_us=tpot_slo_us, ttft_slo_us=ttft_slo_us,
                                 max_batch=self.a.max_batch)
        self.mux.capture_decode(self.m.decode_step)
        self.m.host_buffers(True)
        self.t.cuda.synchronize()

    def close(self) -> None:
        if self.mux is not None:
            self.mux.synchronize_decode()
            self.m.host_buffers(False)  # before the decode vCtx's streams go
            self.mux.close()
            self.mux = None

    def stage(self, reqs: Sequence[Req]) -> Any:
        """The inputs callable of a decode step over reqs (request i in decode
        slot i): the pending slot moves, then the tokens and positions."""
        m = self.m
        b = self.mux.bucket(len(reqs)) if self.mux else len(reqs)
        pad = b - len(reqs)
        h = m.inp_host
        h[:, :b].copy_(self.t.tensor([[r.last for r in reqs] + [0] * pad, [r.pos for r in reqs] + [0] * pad],
                                     dtype=self.t.long))
        moves, self.moves = self.moves, []
        self.copied = [src for src, _, _ in moves if src >= m.pf_base]  # prefill slots read by this step

        def inputs(s: Any) -> None:
            with self.t.cuda.stream(s):
                for src, dst, n in moves:
                    m.move(src, dst, n)
                m.inp[:, :b].copy_(h[:, :b], non_blocking=True)
        return inputs

    def outputs(self, b: int, keep_logits: Optional[List[Any]] = None) -> Any:
        m = self.m

        def out(s: Any, graph_out: Any) -> None:
            with self.t.cuda.stream(s):
                m.tok_host[:b].copy_(graph_out[1], non_blocking=True)
                if keep_logits is not None:
                    keep_logits.append(graph_out[0].float().cpu())
        return out

    def run(self, arrivals: Sequence[Tuple[float, int, int]], seed: int, deadline: float
            ) -> Tuple[serving.RequestStats, Dict[str, Any]]:
        """Serves the arrivals (s from the start); returns the request times and counters."""
        import random

        mux = self.mux
        assert mux is not None
        rng = random.Random(seed)
        reqs = [Req(i, at, [rng.randrange(self.m.vocab) for _ in range(p)], o) for i, (at, p, o) in enumerate(arrivals)]
        stats = serving.RequestStats()
        mux.reset_stats()
        gc.collect()
        gc.disable()  # no collector pauses inside the measured window
        try:
            return self._serve(reqs, stats, deadline)
        finally:
            gc.enable()

    def _serve(self, reqs: List[Req], stats: serving.RequestStats, deadline: float
               ) -> Tuple[serving.RequestStats, Dict[str, Any]]:
        mux, a = self.mux, self.a
        assert mux is not None
        free = list(range(self.m.pf_base + a.prefill_slots - 1, self.m.pf_base - 1, -1))  # prefill slots
        waiting: deque = deque()
        prefilling: List[Req] = []  # requests with a slot whose prompt is not done
        running: List[Req] = []
        ticket: Optional[serving.PrefillTicket] = None
        chunk: List[Tuple[Req, int, bool]] = []
        nxt, finished, n = 0, 0, len(reqs)
        t0 = time.perf_counter() + 0.002
        while finished < n:
            now = time.perf_counter()
            if now > deadline:
                raise TimeoutError("run past its deadline")
            while nxt < n and t0 + reqs[nxt].at <= now:
                stats.arrive(nxt, t0 + reqs[nxt].at)
                waiting.append(reqs[nxt])
                nxt += 1
            # a finished chunk: first tokens, the requests join the running batch
            if ticket is not None and ticket.done():
                first = ticket.result()
                tnow = time.perf_counter()
                k = 0
                for r, m_, done in chunk:
                    r.done_prompt += m_
                    if done:
                        r.last = first[k]
                        k += 1
                        r.toks.append(r.last)
                        r.generated = 1
                        r.pos = len(r.prompt)
                        stats.tokens(r.rid, 1, tnow)
                        mux.record_ttft(max(0.0, tnow - (t0 + r.at)) * 1e6)
                        prefilling.remove(r)
                        if r.generated >= r.output:
                            free.append(r.slot)
                            finished += 1
                        else:  # its prefill slot is free once the next step's copy is done
                            self.join(running, r)
                ticket, chunk = None, []
            # the next chunk: the unfinished prompt first, then new requests while slots last
            if ticket is None and (prefilling or (waiting and free)):
                budget, segs = a.chunk, []
                for r in prefilling:
                    if budget == 0:
                        break
                    m_ = min(budget, len(r.prompt) - r.done_prompt)
                    chunk.append((r, m_, r.done_prompt + m_ == len(r.prompt)))
                    budget -= m_
                while budget > 0 and waiting and free and len(running) + len(prefilling) < a.max_batch:
                    r = waiting.popleft()
                    r.slot = free.pop()
                    prefilling.append(r)
                    m_ = min(budget, len(r.prompt))
                    chunk.append((r, m_, m_ == len(r.prompt)))
                    budget -= m_
                segs = [(r.slot, r.done_prompt, r.prompt[r.done_prompt:r.done_prompt + m_], d) for r, m_, d in chunk]
                ticket = mux.prefill(lambda s, segs=segs: self._prefill(s, segs))
            if running:
                b = mux.bucket(len(running))
                mux.decode(len(running), inputs=self.stage(running), outputs=self.outputs(b))
                mux.synchronize_decode()
                free.extend(self.copied)
                toks = self.m.tok_host[: len(running)].tolist()
                tnow = time.perf_counter()
                gone = []
                for i, (r, tok) in enumerate(zip(running, toks)):
                    r.last = tok
                    r.toks.append(tok)
                    r.generated += 1
                    r.pos += 1
                    stats.tokens(r.rid, 1, tnow)
                    if r.generated >= r.output:
                        gone.append(i)
                        finished += 1
                        tpot = stats.tpot_s_of(r.rid) if a.record_tpot else None
                        if tpot is not None:
                            mux.record_tpot(tpot * 1e6)
                self.compact(running, gone)
                if not running:
                    mux.adjust(0)
            elif ticket is not None:
                ticket.wait(0.0005)
            elif nxt < n:
                time.sleep(max(0.0, min(0.0005, t0 + reqs[nxt].at - time.perf_counter())))
        st = mux.stats()
        counters = {
            "decode_steps": st.decode_steps, "prefill_chunks": st.prefills, "group_changes": st.group_changes,
            "steps_per_bucket": {str(k): v for k, v in sorted(st.steps_per_bucket.items())},
            "mean_decode_batch": (sum(k * v for k, v in st.steps_per_bucket.items()) - st.padded_slots)
            / max(st.decode_steps, 1),
            "decode_enqueue_us_p50": statistics.median(st.decode_enqueue_us) if st.decode_enqueue_us else None,
            "decode_step_us_p50": statistics.median(st.decode_step_us) if st.decode_step_us else None,
            "wall_s": time.perf_counter() - t0,
        }
        return stats, counters

    def _prefill(self, s: Any, segs: Any, keep: bool = False) -> Any:
        with self.t.cuda.stream(s), self.t.no_grad():  # grad mode is per thread: the worker's is on
            first, logits = self.m.prefill(segs, keep_logits=keep)
        return (first, logits) if keep else first

    def identity(self, prompts: List[List[int]], tokens: int) -> Tuple[List[List[int]], Any]:
        """Greedy decode of every prompt: one chunk per prompt, then decode
        steps of all together. Returns the tokens and the last step's logits."""
        mux = self.mux
        assert mux is not None
        if len(prompts) > min(self.a.prefill_slots, self.a.max_batch):
            raise SystemExit("--det-prompts must be <= --prefill-slots and --max-batch")
        reqs: List[Req] = []
        for i, p in enumerate(prompts):
            r = Req(i, 0.0, p, tokens)
            r.slot = self.m.pf_base + i
            first, _ = mux.prefill(lambda s, r=r: self._prefill(s, [(r.slot, 0, r.prompt, True)], True)).result()
            r.last, r.pos = first[0], len(r.prompt)
            r.toks.append(r.last)
            self.join(reqs, r)
        logits: List[Any] = []
        for _ in range(tokens - 1):
            b = mux.bucket(len(reqs))
            logits.clear()
            mux.decode(len(reqs), inputs=self.stage(reqs), outputs=self.outputs(b, logits))
            mux.synchronize_decode()
            for r, tok in zip(reqs, self.m.tok_host[: len(reqs)].tolist()):
                r.last = tok
                r.toks.append(tok)
                r.pos += 1
        mux.adjust(0)
        return [r.toks for r in reqs], logits[0][: len(reqs)]


# ---- the BE tenant --------------------------------------------------------------------


class Trainer:
    """ResNet-50 training on its own thread and vCtx, one section per step."""

    def __init__(self, torch: Any, rt: Any, a: argparse.Namespace, dev: Any) -> None:
        import torchvision

        self.t = torch
        self.model = torchvision.models.resnet50(weights=None).to(dev).train()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss = torch.nn.CrossEntropyLoss()
        g = torch.Generator().manual_seed(a.seed)
        self.x = torch.randn(a.be_batch, 3, 224, 224, generator=g).to(dev)
        self.y = torch.randint(0, 1000, (a.be_batch,), generator=g).to(dev)
        self.v = rt.vctx("resnet50-train", cls="be")
        self.stop = threading.Event()
        self.ends: List[float] = []
        self.error: Optional[str] = None
        self.thread: Optional[threading.Thread] = None
        self.version = torchvision.__version__

    def step(self) -> None:
        t = self.t
        with self.v.section() as s, t.cuda.stream(s), t.enable_grad():
            with t.autocast("cuda", dtype=t.bfloat16):
                loss = self.loss(self.model(self.x), self.y)
            loss.backward()
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        self.v.synchronize()

    def _loop(self) -> None:
        try:
            while not self.stop.is_set():
                self.step()
                self.ends.append(time.perf_counter())
        except BaseException:  # noqa: BLE001 (reported by the main thread)
            self.error = traceback.format_exc()

    def start(self) -> None:
        self.stop.clear()
        self.ends = []
        self.thread = threading.Thread(target=self._loop, name="trainer", daemon=True)
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
        if self.error:
            raise RuntimeError("trainer failed:\n" + self.error)

    def rate(self, t0: float, t1: float) -> float:
        """Steps/s finished in [t0, t1]."""
        k = sum(1 for e in self.ends if t0 <= e <= t1)
        return k / (t1 - t0) if t1 > t0 else float("nan")


# ---- helpers --------------------------------------------------------------------------


FIGS = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "ttft_slo_violation", "tpot_slo_violation",
        "slo_attainment", "goodput_rps", "throughput_rps")


def med(reps: List[Dict[str, Any]], key: str) -> Dict[str, Any]:
    xs = [r[key] for r in reps if r.get(key) is not None and not math.isnan(r[key])]
    if not xs:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


# ---- main -----------------------------------------------------------------------------


def main() -> int:
    a = parse_args()
    if a.capacity_rps < 0 or a.slo_ttft_ms < 0 or a.slo_tpot_ms < 0:
        raise SystemExit("--capacity-rps, --slo-ttft-ms and --slo-tpot-ms must be >= 0 (0: measured)")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", a.name):
        raise SystemExit(f"--name {a.name!r}: letters, digits, '_', '.' and '-' only (a file name in DIR)")
    log_file = None
    if a.log:
        try:  # opened before the run: a bad path fails now, not after it
            log_file = open(a.log, "w", buffering=1)
        except OSError as e:
            raise SystemExit(f"--log {a.log}: {e.strerror}")
    torch = torch_on_gpu("serve_torch", "torchvision")  # torchvision: the BE tenant
    if torch is None:
        return 77
    modes = [m for m in a.modes.split(",") if m]
    if not modes or modes[0] != "single":
        raise SystemExit("--modes must start with single (capacity and SLOs come from it)")
    loads = [float(x) for x in a.loads.split(",") if x]
    t_start = time.perf_counter()
    log_lock = threading.Lock()

    def log_line(text: str) -> None:
        if log_file is not None:
            with log_lock:
                log_file.write(f"{time.perf_counter() - t_start:10.3f} {text}\n")

    if log_file is not None:
        detshare.set_log_handler(lambda level, msg: log_line(f"{level.name} {msg}"),
                                 detshare.LogLevel[a.log_level.upper()])
    faulthandler.enable()  # a crash prints every thread's Python stack
    faulthandler.dump_traceback_later(a.budget_s + 50, exit=True)
    sys.setswitchinterval(a.switch_interval_ms / 1e3)
    dev = torch.device("cuda", 0)
    torch.zeros(1, device=dev)
    torch.set_grad_enabled(False)
    # cuDNN's SDPA builds an execution plan per shape, cached per thread (PyTorch's
    # aten/src/ATen/native/cudnn/MHA.cpp, getMHAGraphCache_ is thread_local): every
    # PDMux has a new prefill worker, which paid it again for each new prompt
    # length inside the measured runs. Flash and memory-efficient attention need
    # no plan.
    torch.backends.cuda.enable_cudnn_sdp(False)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    path = out_dir(a.out) / f"{a.name}.json"
    failures: List[str] = []
    res: Dict[str, Any] = {
        "bench": "serve_torch",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit(),
        "command": " ".join(shlex.quote(x) for x in ["python3"] + sys.argv),
        "torch": torch.__version__,
        "simulated": False,
        "config": {k: getattr(a, k) for k in ("seed", "requests", "reps", "colocate", "max_batch", "max_ctx", "chunk",
                                              "layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate",
                                              "vocab", "prefill_slots", "be_batch", "det_prompts", "det_tokens",
                                              "switch_interval_ms", "record_tpot")},
        "attention": "prefill: torch SDPA, flash or memory-efficient (cuDNN SDPA off); decode: matmul, fp32 "
                     "softmax, matmul",
        "trace": os.path.relpath(a.trace, REPO) if a.trace.startswith(str(REPO)) else a.trace,
        "policy_params": {k: v for k, v in (("slo_aware.ls_sms", a.ls_sms), ("tpot_first.ls_sms", a.tpot_ls_sms),
                                            ("be_window_us", a.be_window_us),
                                            ("slo_aware.prefill_whole", a.prefill_whole),
                                            ("slo_aware.prefill_press", a.prefill_press),
                                            ("slo_aware.reserve", a.reserve)) if v is not None},
        "policy_params_rest": "the policies' defaults",
        "policy_log": os.path.basename(a.log) if a.log else None,
        "modes": modes, "loads": loads,
        "results": {}, "counters": {}, "colocated": None, "host": {}, "token_identity": {},
        "failures": failures,
    }

    def save() -> None:
        res["wall_s"] = time.perf_counter() - t_start
        res["ok"] = not failures
        path.write_text(json.dumps(res, indent=2) + "\n")

    model = Model(torch, a, dev)
    res["config"]["params"] = model.params
    trace = load_trace(a.trace)
    tiers = serving.pool_tiers(sms)
    given = {k: v for k, v in (("ls_sms", a.ls_sms), ("be_window_us", a.be_window_us)) if v is not None}
    rt = detshare.Runtime("cuda", tiers=tiers, policy="priority", **given)
    eng = Engine(torch, model, a)
    trainer: Optional[Trainer] = None
    deadline = t_start + a.budget_s
    try:
        info = rt.info()
        res["device"], res["driver"], res["sm_count"] = info.device_name, driver_string(info.driver_version), sms
        res["pool"] = [{"pctx": p.index, "sms": p.sm_count, "anchor": p.anchor.name.lower()} for p in info.pctx]
        for pol in ("slo_aware", "slo_aware_nogates", "tpot_first"):
            if a.be_window_us is not None:
                rt.set_policy_param(pol, "be_window_us", a.be_window_us)
        if a.ls_sms is not None:  # decode's first tier, beside a latency-sensitive prefill too
            for pol in ("slo_aware", "slo_aware_nogates"):
                rt.set_policy_param(pol, "decode_sms", a.ls_sms)
        tpot = a.tpot_ls_sms if a.tpot_ls_sms is not None else a.ls_sms
        if tpot is not None:
            rt.set_policy_param("tpot_first", "ls_sms", tpot)
            rt.set_policy_param("tpot_first", "prefill_sms", max(1, tpot // 2))
        for name in ("prefill_whole", "prefill_press", "reserve"):
            if getattr(a, name) is not None:
                for pol in ("slo_aware", "slo_aware_nogates"):
                    rt.set_policy_param(pol, name, getattr(a, name))
        if a.colocate > 0:
            trainer = Trainer(torch, rt, a, dev)
            res["be_model"] = {"arch": f"torchvision {trainer.version} resnet50 (weights=None)",
                               "batch": a.be_batch, "autocast": "bfloat16", "optimizer": "SGD momentum 0.9"}
            for _ in range(3):
                trainer.step()
        print(f"serve_torch: {info.device_name}, {sms} SMs, {len(info.pctx)} pCtxs; model {model.params / 1e9:.2f} B "
              f"params; ready in {time.perf_counter() - t_start:.1f} s", flush=True)

        rng_p = __import__("random").Random(a.seed + 7)
        det_lens = [17, 300, 1200, 2900, 64, 700, 2000, 33][: a.det_prompts]
        det_prompts = [[rng_p.randrange(a.vocab) for _ in range(n)] for n in det_lens]
        ref_toks: Optional[List[List[int]]] = None
        ref_logits: Any = None
        ident = res["token_identity"]
        ident["prompts"] = det_lens
        ident["tokens"] = a.det_tokens
        ident["cases"] = []

        def check_identity(case: str) -> None:
            nonlocal ref_toks, ref_logits
            toks, logits = eng.identity(det_prompts, a.det_tokens)
            if ref_toks is None:
                ref_toks, ref_logits = toks, logits
                ident["reference"] = case
                return
            same_t = toks == ref_toks
            same_l = bool(torch.equal(logits.view(torch.int32), ref_logits.view(torch.int32)))
            ident["cases"].append({"case": case, "tokens_identical": same_t, "logits_bitwise_identical": same_l})
            if not (same_t and same_l):
                failures.append(f"token identity: {case}: tokens {same_t}, logits {same_l}")

        slo_ttft, slo_tpot = a.slo_ttft_ms, a.slo_tpot_ms
        capacity = None
        alone_at_colocate: Dict[str, List[Dict[str, Any]]] = {}
        be_alone = None
        for mode in modes:
            if time.perf_counter() > deadline:
                failures.append(f"budget: {mode} and later not run")
                break
            t_mode = time.perf_counter()
            log_line(f"== {mode}: open")
            eng.open(rt, mode, int(slo_tpot * 1000) if slo_tpot else 0, int(slo_ttft * 1000) if slo_ttft else 0)
            mux = eng.mux
            assert mux is not None
            print(f"[{mode}] graphs for buckets {list(mux.buckets)} on {len(info.pctx)} pCtxs in "
                  f"{time.perf_counter() - t_mode:.1f} s", flush=True)
            # warm-up: prefill shapes and the decode path, a window of the trace the runs do not use
            warm, _ = window(trace, 100, 12, 20.0, a.max_ctx)
            eng.run(warm, a.seed + 999, deadline)
            check_identity(f"{mode} alone")
            if mode == "single":
                # host time per decode step, per bucket, alone on the whole GPU
                per = {}
                for b in mux.buckets:
                    reqs = [Req(i, 0, [1], 2) for i in range(b)]
                    for i, r in enumerate(reqs):
                        r.slot, r.pos, r.last = i, 100 + i, 1
                    eng.moves = []
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    gpu, enq = [], []
                    for it in range(10 + a.timing_steps):
                        with mux.decode_vctx.section("torch") as s:
                            e0.record(s)
                        h0 = time.perf_counter()
                        mux.decode(b, inputs=eng.stage(reqs), outputs=eng.outputs(b))
                        h1 = time.perf_counter()
                        with mux.decode_vctx.section("torch") as s:
                            e1.record(s)
                        mux.synchronize_decode()
                        if it >= 10:
                            gpu.append(e0.elapsed_time(e1) * 1e3)
                            enq.append((h1 - h0) * 1e6)
                    g50, h50 = statistics.median(gpu), statistics.median(enq)
                    per[str(b)] = {"gpu_us_p50": g50, "gpu_us_p99": pct(gpu, 99), "enqueue_us_p50": h50,
                                   "enqueue_us_p99": pct(enq, 99), "host_over_gpu": h50 / g50}
                    if h50 / g50 >= 0.25:  # else the ratios measure the host
                        failures.append(f"bucket {b}: host {h50:.0f} us >= 25% of GPU {g50:.0f} us")
                res["host"]["per_bucket"] = per
                res["host"]["method"] = ("enqueue = wall time of PDMux.decode (input copy section, graph replay, "
                                         "output copy section); gpu = CUDA events recorded in sections of the "
                                         "decode vCtx before and after it; whole GPU, alone, single mode")
                # capacity: every request at once (unless given)
                if a.capacity_rps:
                    capacity = a.capacity_rps
                    res["capacity_rps"] = {"median": capacity, "source": "given"}
                else:
                    runs = []
                    for rep in range(a.reps):
                        arr, _ = window(trace, rep, a.requests, 0.0, a.max_ctx)
                        st, _ = eng.run(arr, a.seed + rep, deadline)
                        runs.append(st.summary()["throughput_rps"])
                    capacity = statistics.median(runs)
                    res["capacity_rps"] = {"median": capacity, "reps": runs, "source": "measured"}
                # SLOs from load 0.1
                if not (slo_ttft and slo_tpot):
                    cal = []
                    for rep in range(a.reps):
                        arr, _ = window(trace, rep, a.requests, 0.1 * capacity, a.max_ctx)
                        st, _ = eng.run(arr, a.seed + rep, deadline)
                        cal.append(st.summary())
                    slo_ttft = slo_ttft or 5 * statistics.median(c["ttft_p50_ms"] for c in cal)
                    slo_tpot = slo_tpot or 2 * statistics.median(c["tpot_p50_ms"] for c in cal)
                res["slo"] = {"ttft_ms": slo_ttft, "tpot_ms": slo_tpot,
                              "source": "given" if a.slo_ttft_ms and a.slo_tpot_ms
                              else "5x TTFT p50 / 2x TPOT p50 of single at load 0.1"}
                print(f"capacity {capacity:.1f} req/s; SLOs TTFT {slo_ttft:.1f} ms, TPOT {slo_tpot:.2f} ms",
                      flush=True)
            assert capacity is not None
            res["results"][mode] = {}
            res["counters"][mode] = {}
            enq_all, step_all = [], []
            for load in loads + ([a.colocate] if a.colocate > 0 and a.colocate not in loads else []):
                reps_out, ctr = [], []
                for rep in range(a.reps):
                    log_line(f"== {mode}: load {load}, repetition {rep}")
                    arr, cut = window(trace, rep, a.requests, load * capacity, a.max_ctx)
                    st, c = eng.run(arr, a.seed + rep, deadline)
                    s = st.summary(slo_ttft, slo_tpot)
                    s["capped"] = cut
                    reps_out.append(s)
                    ctr.append(c)
                    enq_all.append(c["decode_enqueue_us_p50"])
                    step_all.append(c["decode_step_us_p50"])
                res["results"][mode][str(load)] = {"reps": reps_out, **{k: med(reps_out, k) for k in FIGS}}
                res["counters"][mode][str(load)] = ctr
                if load == a.colocate:
                    alone_at_colocate[mode] = reps_out
                r = res["results"][mode][str(load)]
                print(f"[{mode}] load {load}: TTFT p99 {r['ttft_p99_ms']['median']:.1f} ms, TPOT p99 "
                      f"{r['tpot_p99_ms']['median']:.2f} ms, attainment {r['slo_attainment']['median']:.3f}",
                      flush=True)
                save()
            enq_all = [x for x in enq_all if x is not None]
            step_all = [x for x in step_all if x is not None]
            if enq_all and step_all:
                res["host"].setdefault("serving", {})[mode] = {
                    "enqueue_us_p50": statistics.median(enq_all), "step_us_p50": statistics.median(step_all),
                    "host_over_step": statistics.median(enq_all) / statistics.median(step_all)}
            # beside training
            if trainer is not None:
                if be_alone is None:
                    trainer.start()
                    time.sleep(1.0)
                    t0 = time.perf_counter()
                    time.sleep(a.be_alone_s)
                    be_alone = trainer.rate(t0, time.perf_counter())
                    trainer.finish()
                    res["be_alone_steps_per_s"] = be_alone
                reps_out = []
                for rep in range(a.reps):
                    log_line(f"== {mode}: beside training, load {a.colocate}, repetition {rep}")
                    arr, _ = window(trace, rep, a.requests, a.colocate * capacity, a.max_ctx)
                    trainer.start()
                    time.sleep(0.5)
                    t0 = time.perf_counter()
                    st, c = eng.run(arr, a.seed + rep, deadline)
                    t1 = time.perf_counter()
                    trainer.finish()
                    s = st.summary(slo_ttft, slo_tpot)
                    alone = alone_at_colocate[mode][rep]
                    s["be_tput_norm"] = trainer.rate(t0, t1) / be_alone
                    for k in ("ttft_p99_ms", "tpot_p99_ms"):
                        s[k.replace("_ms", "_norm")] = s[k] / alone[k] if alone[k] else None
                    reps_out.append(s)
                trainer.start()
                try:
                    check_identity(f"{mode} beside training")
                finally:
                    trainer.finish()
                col = res["colocated"] or {"load": a.colocate, "be_alone_steps_per_s": be_alone, "modes": {}}
                col["modes"][mode] = {"reps": reps_out, **{k: med(reps_out, k) for k in
                                                           FIGS + ("be_tput_norm", "ttft_p99_norm", "tpot_p99_norm")}}
                res["colocated"] = col
                m_ = col["modes"][mode]
                print(f"[{mode}] beside training: TPOT p99 x{m_['tpot_p99_norm']['median']:.2f}, BE "
                      f"{m_['be_tput_norm']['median']:.3f}", flush=True)
            res["mode_wall_s"] = {**res.get("mode_wall_s", {}), mode: time.perf_counter() - t_mode}
            eng.close()
            save()
        # every pCtx: both vCtxs pinned there (policy manual)
        if ref_toks is not None and time.perf_counter() < deadline:
            eng.open(rt, "manual", 0)
            for p in info.pctx:
                eng.mux.prefill_vctx.remap(p.index)
                eng.mux.decode_vctx.remap(p.index)
                check_identity(f"pCtx {p.index} ({p.sm_count} SMs)")
            eng.close()
            ident["pctxs_checked"] = len(info.pctx)
        # goodput as a capacity (DistServe): the highest load where >= 90% of the
        # requests meet both SLOs, interpolated linearly between the sweep's loads
        cap: Dict[str, Any] = {}
        for mode, by in res["results"].items():
            pts = sorted((float(ld), r["slo_attainment"]["median"]) for ld, r in by.items()
                         if r["slo_attainment"]["median"] is not None)
            best, prev = None, None
            for ld, att in pts:
                if att >= 0.9:
                    best, prev = ld, (ld, att)
                    continue
                if prev is not None:
                    best = prev[0] + (prev[1] - 0.9) / (prev[1] - att) * (ld - prev[0])
                break
            cap[mode] = best
        res["capacity_at_slo"] = {"attainment": 0.9, "load": cap,
                                  "rps": {m: (v * capacity if v is not None and capacity else None)
                                          for m, v in cap.items()},
                                  "note": "None: below the lowest load of the sweep"}
        cases = ident["cases"]
        ident["token_identical"] = bool(cases) and all(c["tokens_identical"] for c in cases)
        ident["logits_bitwise_identical"] = bool(cases) and all(c["logits_bitwise_identical"] for c in cases)
        res["token_identical"] = ident["token_identical"]
    except Exception:  # noqa: BLE001 (in the JSON, then exit 1)
        failures.append("exception: " + traceback.format_exc())
        traceback.print_exc()
    finally:
        try:
            eng.close()
            if trainer is not None:
                trainer.stop.set()
                if trainer.thread is not None:
                    trainer.thread.join(60)
            rt.close()
        except Exception:  # noqa: BLE001
            failures.append("teardown: " + traceback.format_exc())
    if log_file is not None:  # the runtime is gone: nothing logs any more
        detshare.set_log_handler(None)
        log_file.close()
    gc.collect()
    save()

    # ---- table
    print(f"\nserve_torch  {res.get('device', '?')}  {res.get('driver', '?')}  torch {torch.__version__}  "
          f"commit {res['commit']}")
    slo = res.get("slo", {})
    print(f"capacity {res.get('capacity_rps', {}).get('median', float('nan')):.1f} req/s; "
          f"SLOs TTFT {slo.get('ttft_ms', float('nan')):.1f} ms, TPOT {slo.get('tpot_ms', float('nan')):.2f} ms")
    print(f"{'mode':>14} {'load':>5} {'TTFT p50':>9} {'p99':>8} {'TPOT p50':>9} {'p99':>7} {'TTFTv':>6} "
          f"{'TPOTv':>6} {'attain':>7} {'goodput':>8}")
    for mode, by in res["results"].items():
        for load, r in by.items():
            f = {k: (r[k]["median"] if r[k]["median"] is not None else float("nan")) for k in FIGS}
            print(f"{mode:>14} {load:>5} {f['ttft_p50_ms']:>9.1f} {f['ttft_p99_ms']:>8.1f} {f['tpot_p50_ms']:>9.2f} "
                  f"{f['tpot_p99_ms']:>7.2f} {f['ttft_slo_violation']:>6.3f} {f['tpot_slo_violation']:>6.3f} "
                  f"{f['slo_attainment']:>7.3f} {f['goodput_rps']:>8.2f}")
    for mode, v in res.get("capacity_at_slo", {}).get("load", {}).items():
        print(f"{mode:>14}  capacity at 90% SLO attainment: "
              + (f"load {v:.2f}" if v is not None else "below the sweep"))
    if res["colocated"]:
        print(f"beside ResNet-50 training at load {a.colocate} "
              f"(BE alone {res['colocated']['be_alone_steps_per_s']:.2f} steps/s)")
        for mode, r in res["colocated"]["modes"].items():
            print(f"{mode:>14}  TPOT p99 x{r['tpot_p99_norm']['median']:.2f}  "
                  f"TTFT p99 x{r['ttft_p99_norm']['median']:.2f}  BE {r['be_tput_norm']['median']:.3f}")
    for b, h in res["host"].get("per_bucket", {}).items():
        print(f"bucket {b:>3}: enqueue {h['enqueue_us_p50']:.0f} us, GPU {h['gpu_us_p50']:.0f} us, "
              f"host/GPU {h['host_over_gpu']:.3f}")
    print(f"token_identical {res['token_identity'].get('token_identical')}, logits bitwise "
          f"{res['token_identity'].get('logits_bitwise_identical')} over {len(res['token_identity'].get('cases', []))} "
          "cases")
    for f in failures:
        print("FAIL:", f.rstrip())
    print(f"{'OK' if not failures else 'FAILED'}  -> {path}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
