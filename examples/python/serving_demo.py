#!/usr/bin/env python3
"""Prefill and decode of a toy model multiplexed by detshare.serving.PDMux:
decode graphs captured per batch bucket on every pCtx, prefill chunks on the
helper's worker thread, request TTFT/TPOT kept by RequestStats. Needs a CUDA
GPU and PyTorch; exits 77 (skip) without them.

    python3 examples/python/serving_demo.py [--mode slo_aware|tpot_first|pdmux_static|single]

The full engine (a Llama-architecture model with continuous batching on the
Azure trace) is bench/torch/serve_torch.py.
"""
import argparse
import sys
import time

import detshare
from detshare import serving

HIDDEN, MAX_BATCH, PROMPT, TOKENS = 2048, 8, 512, 16


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", default="slo_aware", help="single, pdmux_static or a policy's name")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("serving_demo: PyTorch is not installed (skip)")
        return 77
    if not torch.cuda.is_available():
        print("serving_demo: no CUDA GPU (skip)")
        return 77
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    w = [torch.randn(HIDDEN, HIDDEN, device="cuda", dtype=torch.half) / HIDDEN ** 0.5 for _ in range(4)]
    state = torch.zeros(MAX_BATCH, HIDDEN, device="cuda", dtype=torch.half)  # decode's static input

    def layers(h):
        for m in w:
            h = torch.nn.functional.gelu(h @ m)
        return h

    def decode_step(bs):  # one token for the first bs requests; captured per bucket
        return layers(state[:bs]).sum(-1)

    def prefill(prompt_tokens):  # one request's prompt: a chunk on the prefill worker
        def run(stream):
            h = layers(torch.randn(prompt_tokens, HIDDEN, device="cuda", dtype=torch.half))
            return float(h[-1].sum().item())  # reads back on `stream`: waits for the chunk
        return run

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    stats = serving.RequestStats()
    with detshare.Runtime("cuda", tiers=serving.pool_tiers(sms)) as rt:
        with serving.PDMux(rt, a.mode, tpot_slo_us=5_000, max_batch=MAX_BATCH) as mux:
            mux.capture_decode(decode_step)
            running = {}  # request id -> tokens still to generate

            def step():  # one decode step over the running batch
                mux.decode(len(running))
                mux.synchronize_decode()
                now = time.perf_counter()
                for r in list(running):
                    stats.tokens(r, t=now)
                    running[r] -= 1
                    if running[r] == 0:
                        del running[r]

            for rid in range(4 * MAX_BATCH):
                while len(running) >= MAX_BATCH:
                    step()
                stats.arrive(rid)
                ticket = mux.prefill(prefill(PROMPT), decode_bs=len(running))
                if running:
                    step()  # decode runs beside the chunk (except in `single`)
                ticket.result()  # the first token
                stats.tokens(rid)
                running[rid] = TOKENS - 1
            while running:
                step()
            s = stats.summary(ttft_slo_ms=50, tpot_slo_ms=5)
            print(f"mode {a.mode}: {len(stats)} requests, {mux.stats().decode_steps} decode steps")
            print(f"  TTFT p99 {s['ttft_p99_ms']:.1f} ms, TPOT p99 {s['tpot_p99_ms']:.2f} ms, "
                  f"{s['slo_attainment']:.0%} within TTFT 50 ms and TPOT 5 ms")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (detshare.DetShareError, detshare.LibraryNotFoundError) as e:
        sys.exit(f"serving_demo: {e}")
