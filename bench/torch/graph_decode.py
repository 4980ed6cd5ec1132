#!/usr/bin/env python3
"""A Llama-3.2-1B-architecture decode step as a detshare graph: captured once
per pCtx through VCtx.graph, replayed on every pCtx of the pool, bitwise equal
to the step run eagerly on the whole GPU, and timed against the eager step.

    python3 bench/torch/graph_decode.py [--out DIR] [--batch 8] [--context 2048] [--layers 16]

The model is the example's own (decoder.py; nothing downloaded, random weights
from --seed): hidden 2048, 16 layers, 32 query heads and 8 KV heads of 64
(grouped-query attention), SwiGLU MLP of 8192, vocabulary 128256 with the
embedding tied to the LM head, RMSNorm, RoPE (theta 500000), bf16. One decode
step reads static inputs (token ids [batch], positions [batch]), writes the
new key and value of every layer into a preallocated KV cache of --context
positions at those positions, attends with torch's scaled_dot_product_attention
over the whole cache under a mask (positions <= the token's), and returns
logits [batch, vocab] in bf16. The cache starts filled with random keys and
values (a prompt already decoded), so the step is the same computation at
every replay: it rewrites the same entries with the same values.

Checks (exit 1 if one fails):
  - the reference, the step run eagerly twice on the default stream (primary
    context, all SMs) before any detshare work, is bitwise the same both
    times, finite and not constant;
  - a detshare Runtime on the GPU (default pool, policy `manual`), one vCtx,
    the step captured with vctx.graph (eager: one instantiation per pCtx);
    then for every pCtx: the static logits are poisoned (NaN), the vCtx is
    remapped there, the graph replayed and the vCtx synchronized; the vCtx
    must be bound there, that pCtx's instantiation must have launched, and
    the logits must be bitwise the reference's (compared as int16) and give
    the same argmax tokens.
Timing, on the whole-GPU pCtx: per-step wall time (time.perf_counter from
before the step's first launch to the return of vctx.synchronize(); CUDA
events cannot be placed on the vCtx's stream around a replay) of (a) the
eager step in a section, `with vctx.section() as s, torch.cuda.stream(s):
step()`, and (b) graph.replay(), each followed by vctx.synchronize() every
step; median and p99 over --steps steps after --warmup-steps; the host time
of the enqueue alone (the section block, the replay call);
speedup = eager median / graph median (the goal is >= 3; --min-speedup makes
it a check). Also per pCtx the median replay time (a graph that follows its
vCtx is slower on fewer SMs) and the graph's statistics (capture and
instantiation time, device bytes, nodes).

Writes DIR/graph_decode.json (DIR: --out, else $DS_RESULTS_DIR, else
build/gpu-results) and prints a table last. Exit 77 (nothing run) without
torch or a CUDA GPU.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Tuple

from bench_common import commit, detshare, driver_string, out_dir, pct, torch_on_gpu
from decoder import Decoder, add_shape_args


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None,
                   help="output folder for graph_decode.json (default: $DS_RESULTS_DIR, else build/gpu-results)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batch", type=int, default=8, help="sequences decoded at once")
    p.add_argument("--context", type=int, default=2048, help="KV-cache positions (fixed; the mask hides the rest)")
    p.add_argument("--position", type=int, default=None,
                   help="position of the decoded token (default: 3/4 of the context; batch entries get "
                        "consecutive ones below it)")
    add_shape_args(p)  # --layers, --hidden, --heads, --kv-heads, --head-dim, --intermediate, --vocab
    p.add_argument("--steps", type=int, default=200, help="timed steps of each kind")
    p.add_argument("--warmup-steps", type=int, default=20, help="untimed steps before them")
    p.add_argument("--pctx-steps", type=int, default=10, help="timed replays on each pCtx")
    p.add_argument("--min-speedup", type=float, default=0.0,
                   help="fail unless eager median / graph median reaches this (default 0: report only)")
    return p.parse_args()


# ---- helpers -------------------------------------------------------------------------


def summary_ms(xs: List[float]) -> Dict[str, float]:
    return {"median_ms": statistics.median(xs), "p99_ms": pct(xs, 99), "min_ms": min(xs), "n": len(xs)}


def bits(t: Any) -> Any:
    import torch

    return t.contiguous().view(torch.int16)


def timed(n: int, body: Callable[[], None], sync: Callable[[], None]) -> Tuple[List[float], List[float]]:
    """(step ms, enqueue us) of n runs of body, each followed by sync."""
    step, host = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        body()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        step.append((t2 - t0) * 1e3)
        host.append((t1 - t0) * 1e6)
    return step, host


# ---- the check ------------------------------------------------------------------------


def main() -> int:
    a = parse_args()
    torch = torch_on_gpu("graph_decode")
    if torch is None:
        return 77
    dev = torch.device("cuda", 0)
    torch.zeros(1, device=dev)  # the primary context, which libdetshare shares
    torch.set_grad_enabled(False)  # inference only (no inference_mode: the static outputs are poisoned in place)
    failures: List[str] = []
    result: Dict[str, Any] = {
        "bench": "graph_decode",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit(),
        "torch": torch.__version__,
        "config": {k: getattr(a, k) for k in ("seed", "batch", "context", "layers", "hidden", "heads", "kv_heads",
                                              "head_dim", "intermediate", "vocab", "steps", "warmup_steps",
                                              "pctx_steps", "min_speedup")},
    }
    m = Decoder(torch, a, dev)
    result["config"]["positions"] = m.positions.tolist()
    result["config"]["params"] = sum(t.numel() for lw in m.layers for t in lw.values()) + m.embed.numel()

    # -- the reference: eager, default stream, whole GPU, before any detshare work
    ref = m.step().clone()
    again = m.step().clone()
    torch.cuda.synchronize()
    ref_tokens = ref.float().argmax(-1)
    rf = ref.float()
    checks: Dict[str, Any] = {
        "reference_repeatable": bool(torch.equal(bits(ref), bits(again))),
        "reference_finite": bool(torch.isfinite(rf).all()),
        "reference_not_constant": bool((rf.std(-1) > 0).all()),
    }
    for k, ok in checks.items():
        if not ok:
            failures.append(k)
    result["reference"] = {"tokens": ref_tokens.tolist(), "logit_std": float(rf.std()),
                           "logit_absmax": float(rf.abs().max())}

    rt = detshare.Runtime("cuda", policy="manual")  # no policy moves the vCtx behind the check's back
    try:
        info = rt.info()
        result["device"] = info.device_name
        result["driver"] = driver_string(info.driver_version)
        result["sm_count"] = info.sm_count
        result["pool"] = [{"pctx": p.index, "sms": p.sm_count, "anchor": p.anchor.name.lower()} for p in info.pctx]
        full = info.full_pctx
        v = rt.vctx("decode", cls="ls")

        # -- the eager step in a section (whole GPU), as the timing runs it
        with v.section() as s, torch.cuda.stream(s):
            sec = m.step()
        v.synchronize()
        checks["eager_section_bitwise"] = bool(torch.equal(bits(sec), bits(ref)))
        if not checks["eager_section_bitwise"]:
            failures.append("eager_section_bitwise")
        del sec

        # -- capture: one instantiation per pCtx, all sharing one memory pool
        mem0 = torch.cuda.memory_reserved(dev)
        t0 = time.perf_counter()
        g = v.graph(m.step, warmup=2, name="decode")
        create_ms = (time.perf_counter() - t0) * 1e3
        logits = g.outputs
        if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (m.B, m.vocab):
            raise SystemExit(f"graph outputs: {type(logits)} {getattr(logits, 'shape', None)}")
        gs = g.stats()
        result["graph"] = {
            "create_ms": create_ms,
            "pool_reserved_bytes": torch.cuda.memory_reserved(dev) - mem0,
            "pctx": [{"pctx": p.pctx, "instantiated": p.instantiated, "nodes": p.nodes,
                      "kernel_nodes": p.kernel_nodes, "capture_us": p.capture_us,
                      "instantiate_us": p.instantiate_us, "device_bytes": p.device_bytes} for p in gs.pctx],
        }
        if gs.instantiated != tuple(range(len(info.pctx))):
            failures.append(f"instantiated on {gs.instantiated}, not every pCtx")

        # -- every pCtx: poison, remap, replay, compare
        per: List[Dict[str, Any]] = []
        for p in info.pctx:
            logits.fill_(float("nan"))
            torch.cuda.synchronize()
            before = g.stats().pctx[p.index].launches
            v.remap(p.index)
            g.replay()
            v.synchronize()
            bound = v.pctx
            launched = g.stats().pctx[p.index].launches - before
            same = bool(torch.equal(bits(logits), bits(ref)))
            toks = logits.float().argmax(-1)
            tok_same = bool(torch.equal(toks, ref_tokens))
            ms, _ = timed(a.pctx_steps, g.replay, v.synchronize)
            row = {"pctx": p.index, "sms": p.sm_count, "bound": bound, "launched": launched,
                   "bitwise_identical": same, "tokens_identical": tok_same,
                   "replay_median_ms": statistics.median(ms)}
            if not same:
                diff = (logits.float() - ref.float()).abs()
                row["max_abs_diff"] = float(diff.nan_to_num(float("inf")).max())
                row["differing_logits"] = int((bits(logits) != bits(ref)).sum())
            per.append(row)
            if bound != p.index or launched != 1:
                failures.append(f"pCtx {p.index}: vCtx bound to {bound}, {launched} launches of its instantiation")
            if not same:
                failures.append(f"pCtx {p.index}: logits differ from the reference")
            if not tok_same:
                failures.append(f"pCtx {p.index}: tokens differ from the reference")
        result["per_pctx"] = per

        # -- timing on the whole GPU
        v.remap(full)
        def eager() -> None:
            with v.section() as s, torch.cuda.stream(s):
                m.step()

        timed(a.warmup_steps, eager, v.synchronize)
        e_ms, e_host = timed(a.steps, eager, v.synchronize)
        timed(a.warmup_steps, g.replay, v.synchronize)
        g_ms, g_host = timed(a.steps, g.replay, v.synchronize)
        speedup = statistics.median(e_ms) / statistics.median(g_ms)
        result["timing"] = {
            "method": "wall clock (time.perf_counter) from before the step's first launch to the return of "
                      "vctx.synchronize(), one synchronize per step; host = the enqueue alone",
            "pctx": full,
            "eager_section": summary_ms(e_ms),
            "graph_replay": summary_ms(g_ms),
            "eager_host_us": {"median": statistics.median(e_host), "p99": pct(e_host, 99)},
            "replay_host_us": {"median": statistics.median(g_host), "p99": pct(g_host, 99)},
        }
        result["speedup"] = speedup
        result["speedup_goal"] = 3.0
        if a.min_speedup and speedup < a.min_speedup:
            failures.append(f"speedup {speedup:.2f} < {a.min_speedup}")
        gs = g.stats()
        result["graph"]["launches"] = gs.launches
        result["vctx_graph_launches"] = v.stats().graph_launches
        # the logits after all of it: still the reference's
        checks["bitwise_after_timing"] = bool(torch.equal(bits(logits), bits(ref)))
        if not checks["bitwise_after_timing"]:
            failures.append("logits differ from the reference after the timed replays")
        g.close()
        v.close()
    except Exception:  # noqa: BLE001 (reported in the JSON, then exit 1)
        failures.append("exception: " + traceback.format_exc())
    finally:
        rt.close()

    result["checks"] = checks
    result["failures"] = failures
    result["ok"] = not failures
    path = out_dir(a.out) / "graph_decode.json"
    path.write_text(json.dumps(result, indent=2) + "\n")

    # -- table
    print(f"graph_decode  {result.get('device', '?')}  {result.get('driver', '?')}  torch {torch.__version__}  "
          f"commit {result['commit']}")
    print(f"batch {a.batch}  context {a.context}  layers {a.layers}  positions {m.positions[0].item()}.."
          f"{m.positions[-1].item()}  params {result['config']['params'] / 1e9:.2f} B")
    if "graph" in result:
        gp = [p for p in result["graph"]["pctx"] if p["instantiated"]]
        if gp:
            print(f"graph: {gp[0]['nodes']} nodes ({gp[0]['kernel_nodes']} kernels), created in "
                  f"{result['graph']['create_ms']:.0f} ms; per pCtx capture {statistics.median(p['capture_us'] for p in gp) / 1e3:.1f} ms, "
                  f"instantiate {statistics.median(p['instantiate_us'] for p in gp) / 1e3:.1f} ms, "
                  f"device {statistics.median(p['device_bytes'] for p in gp) / 2**20:.1f} MiB (medians)")
    print(f"{'pCtx':>4} {'SMs':>4} {'bitwise':>8} {'tokens':>7} {'replay ms':>10}")
    for r in result.get("per_pctx", []):
        print(f"{r['pctx']:>4} {r['sms']:>4} {str(r['bitwise_identical']):>8} {str(r['tokens_identical']):>7} "
              f"{r['replay_median_ms']:>10.3f}")
    if "timing" in result:
        tm = result["timing"]
        print(f"{'':>22} {'median ms':>10} {'p99 ms':>8} {'host us':>8}")
        print(f"{'eager step (section)':>22} {tm['eager_section']['median_ms']:>10.3f} {tm['eager_section']['p99_ms']:>8.3f} "
              f"{tm['eager_host_us']['median']:>8.0f}")
        print(f"{'graph.replay()':>22} {tm['graph_replay']['median_ms']:>10.3f} {tm['graph_replay']['p99_ms']:>8.3f} "
              f"{tm['replay_host_us']['median']:>8.0f}")
        print(f"speedup {result['speedup']:.2f} (goal >= 3)")
    for f in failures:
        print("FAIL:", f.rstrip())
    print(f"{'OK' if result['ok'] else 'FAILED'}  -> {path}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
