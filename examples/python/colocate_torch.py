#!/usr/bin/env python3
"""W1 with real models through the Python binding: Llama decoding (LS) beside
ResNet-50 training (BE) on one GPU, under `shared`, `static` and `slo_aware`.

Tenants (random weights, nothing downloaded):
  BE  torchvision ResNet-50 (weights=None), synthetic 224x224 images, batch 64,
      bf16 autocast, SGD with momentum. One training step (forward, backward,
      optimizer) is one section: autograd runs each backward op on the stream
      of its forward op, so a step cannot be split across remaps.
  LS  a Llama-architecture model of about 1.1B parameters (transformers
      LlamaConfig: hidden 2048, 16 layers, 32 heads, 8 KV heads, MLP 8192,
      vocab 32000; random init, bf16, SDPA), greedy decoding with a KV cache
      (manual loop over past_key_values). Each request is a prefill section
      and then one section per output token; the token is read back inside the
      section, as a server streaming tokens would.
Each tenant runs on its own thread with its own vCtx; the torch work runs on a
torch.cuda.ExternalStream over the vCtx's stream:

    with vctx.section() as s, torch.cuda.stream(s):
        ...

Figures: LS time per output token (TPOT, one decode step from the start of its
section to its token on the host) p50/p99, normalized to LS alone on the whole
GPU; BE images/s normalized to BE alone. Determinism: one prompt decoded
greedily N times alone (whole GPU) and N times beside BE with the LS vCtx
remapped to the next pCtx of the pool before each decode (policy `manual`,
every pCtx visited, BE moved too): `token_identical` says whether every decode
produced the same tokens; the last step's logits are compared bit for bit too.

Writes JSON to --out and prints a table last. Sizes chosen to stay within a
few minutes: 12 s measured per co-located policy, 8 s per alone run, requests
of a 128-token prompt and 32 output tokens, 100 + 100 determinism decodes of a
32-token prompt and 16 tokens (docs/results/torch_colocate.json holds a run).
The determinism part's time estimate comes from a decode after a warm-up one,
so that the first use of the prompt's shapes (lazy kernel loading) does not
count. --gc-freeze freezes the objects alive after warm-up out of Python's
garbage collector.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import faulthandler
import gc
import json
import shlex
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from bench_common import commit, detshare, driver_string, pct


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=["cuda", "sim"], default="cuda")
    p.add_argument("--out", default="torch_colocate.json", help="JSON output file")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--policies", default="shared,static,slo_aware")
    p.add_argument("--seconds", type=float, default=12.0, help="measured window per co-located policy (s)")
    p.add_argument("--alone-seconds", type=float, default=8.0, help="measured window of each alone run (s)")
    p.add_argument("--warmup-seconds", type=float, default=1.5, help="BE runs this long before LS is measured (s)")
    p.add_argument("--batch", type=int, default=64, help="ResNet-50 batch")
    p.add_argument("--prompt-len", type=int, default=128, help="prompt tokens per LS request")
    p.add_argument("--tokens", type=int, default=32, help="output tokens per LS request")
    p.add_argument("--ls-gap-ms", type=float, default=0.0, help="pause between LS requests (ms)")
    p.add_argument("--ls-slo-ms", type=float, default=50.0, help="LS vCtx slo_us, per decode step (ms)")
    p.add_argument("--ls-sms", type=int, default=64, help="SMs of the LS tier (static, slo_aware)")
    p.add_argument("--decodes", type=int, default=100, help="determinism: decodes alone and co-located each")
    p.add_argument("--det-tokens", type=int, default=16, help="determinism: tokens per decode")
    p.add_argument("--det-prompt-len", type=int, default=32)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--intermediate", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--gc-freeze", action="store_true",
                   help="gc.collect(); gc.freeze() after the warm-up, so that full collections do not walk the "
                        "models' objects (suspected source of the ~70 ms TPOT outliers)")
    p.add_argument("--budget-s", type=float, default=300.0,
                   help="after this many seconds, shorten what is left (fewer decodes)")
    p.add_argument("--watchdog-s", type=float, default=380.0,
                   help="dump every thread's stack and exit if still running after this (s)")
    return p.parse_args()


class Tenant(threading.Thread):
    """A thread that runs `body` and keeps its exception for the main thread."""

    def __init__(self, name: str, body: Callable[[], None]) -> None:
        super().__init__(name=name, daemon=True)
        self.body = body
        self.error: Optional[str] = None

    def run(self) -> None:
        try:
            self.body()
        except BaseException:  # noqa: BLE001 (reported by the main thread)
            self.error = traceback.format_exc()


def main() -> int:
    args = parse_args()
    if args.device != "cuda":
        print("colocate_torch: needs a CUDA GPU and PyTorch; there is no simulated variant (nothing run)")
        return 77
    try:
        import torch
        import torchvision
        import transformers
    except ImportError as e:
        print(f"colocate_torch: needs torch, torchvision and transformers ({e}); nothing run")
        return 77
    if not torch.cuda.is_available():
        print("colocate_torch: no CUDA device visible to torch; nothing run")
        return 77
    from transformers import LlamaConfig, LlamaForCausalLM

    faulthandler.dump_traceback_later(args.watchdog_s, exit=True)
    t_start = time.perf_counter()
    deadline = t_start + args.budget_s
    sys.setswitchinterval(0.001)  # two Python tenant threads share the GIL: switch often
    torch.manual_seed(args.seed)
    dev = torch.device("cuda", 0)
    torch.zeros(1, device=dev)  # CUDA context (the primary one, shared with libdetshare)

    # ---- models -----------------------------------------------------------
    be_model = torchvision.models.resnet50(weights=None).to(dev).train()
    be_opt = torch.optim.SGD(be_model.parameters(), lr=0.01, momentum=0.9)
    be_loss = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed)
    images = torch.randn(args.batch, 3, 224, 224, generator=gen).to(dev)
    labels = torch.randint(0, 1000, (args.batch,), generator=gen).to(dev)

    cfg = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    with torch.device(dev):  # random init on the GPU (seconds), then bf16
        ls_model = LlamaForCausalLM(cfg)
    ls_model = ls_model.to(torch.bfloat16).eval()
    attn_impl = getattr(ls_model.config, "_attn_implementation", None)
    ls_params = sum(p.numel() for p in ls_model.parameters())
    prompt = torch.randint(0, args.vocab, (1, args.prompt_len), generator=gen).to(dev)
    det_prompt = torch.randint(0, args.vocab, (1, args.det_prompt_len), generator=gen).to(dev)
    torch.cuda.synchronize()
    print(f"models ready in {time.perf_counter() - t_start:.1f} s: Llama {ls_params / 1e9:.2f}B params, "
          f"ResNet-50 batch {args.batch}", flush=True)

    # ---- runtime ----------------------------------------------------------
    rt = detshare.Runtime("cuda", policy="manual", ls_sms=args.ls_sms)
    info = rt.info()
    full = info.full_pctx
    pool = [p.index for p in info.pctx]
    print(f"runtime: {info.device_name}, {info.sm_count} SMs, pool "
          + ", ".join(f"{p.index}:{p.sm_count}{p.anchor.name[0]}" for p in info.pctx), flush=True)
    ls = rt.vctx("llama-decode", cls="ls", slo_us=int(args.ls_slo_ms * 1000), phase="decode")
    be = rt.vctx("resnet50-train", cls="be")

    result: Dict[str, Any] = {
        "benchmark": "torch_colocate",
        "device": info.device_name,
        "driver": driver_string(info.driver_version),
        "sms": info.sm_count,
        "commit": commit(),
        "command": " ".join(shlex.quote(a) for a in ["python3"] + sys.argv),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "simulated": False,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "transformers": transformers.__version__,
        "ls_model": {
            "arch": "LlamaForCausalLM (random init)", "params": ls_params, "dtype": "bfloat16",
            "hidden": args.hidden, "layers": args.layers, "heads": args.heads, "kv_heads": args.kv_heads,
            "intermediate": args.intermediate, "vocab": args.vocab, "attention": attn_impl,
            "prompt_len": args.prompt_len, "tokens_per_request": args.tokens, "gap_ms": args.ls_gap_ms,
            "slo_ms": args.ls_slo_ms,
        },
        "be_model": {"arch": "torchvision resnet50 (weights=None)", "batch": args.batch, "image": 224,
                     "autocast": "bfloat16", "optimizer": "SGD momentum 0.9"},
        "ls_sms": args.ls_sms,
        "pool": [{"index": p.index, "sms": p.sm_count, "anchor": p.anchor.name.lower()} for p in info.pctx],
        "window_s": args.seconds,
        "alone_window_s": args.alone_seconds,
        "errors": [],
    }

    def save() -> None:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")

    try:
        # ---- tenants ----------------------------------------------------------
        def be_step() -> None:
            with be.section() as s, torch.cuda.stream(s):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = be_loss(be_model(images), labels)
                loss.backward()
                be_opt.step()
                be_opt.zero_grad(set_to_none=True)
            be.synchronize()

        def be_loop(stop: threading.Event, ends: List[float]) -> Callable[[], None]:
            def body() -> None:
                while not stop.is_set():
                    be_step()
                    ends.append(time.perf_counter())
            return body

        def decode(ids: "torch.Tensor", n: int, steps: Optional[List[float]] = None,
                   keep_logits: bool = False) -> Any:
            """Greedy decode of n tokens: a prefill section, then a section per
            token. Returns (tokens, last logits on the host or None)."""
            with torch.inference_mode():
                with ls.section() as s, torch.cuda.stream(s):
                    out = ls_model(input_ids=ids, use_cache=True)
                    cache = out.past_key_values
                    tok = out.logits[:, -1:].argmax(-1)
                    toks = [int(tok.item())]
                last = None
                for i in range(n - 1):
                    t0 = time.perf_counter()
                    with ls.section() as s, torch.cuda.stream(s):
                        out = ls_model(input_ids=tok, past_key_values=cache, use_cache=True)
                        cache = out.past_key_values
                        logits = out.logits[:, -1:]
                        tok = logits.argmax(-1)
                        toks.append(int(tok.item()))
                        if keep_logits and i == n - 2:
                            last = logits.float().cpu()
                    if steps is not None:
                        steps.append(time.perf_counter() - t0)
                return toks, last

        def ls_loop(until: float, steps: List[float], requests: List[int]) -> Callable[[], None]:
            def body() -> None:
                while time.perf_counter() < until:
                    decode(prompt, args.tokens, steps)
                    requests.append(1)
                    if args.ls_gap_ms > 0:
                        time.sleep(args.ls_gap_ms / 1000)
            return body

        def run_threads(*ts: Tenant) -> None:
            for t in ts:
                t.start()
            for t in ts:
                t.join()

        def with_be(policy: str, seconds: float, ls_body_for: Callable[[float], Callable[[], None]]) -> Dict[str, Any]:
            """Runs BE for warmup + seconds on its thread and the LS body on another;
            returns BE's images/s over the LS window."""
            stop = threading.Event()
            ends: List[float] = []
            bt = Tenant("be", be_loop(stop, ends))
            bt.start()
            time.sleep(args.warmup_seconds)
            t0 = time.perf_counter()
            lt = Tenant("ls", ls_body_for(t0 + seconds))
            lt.start()
            lt.join()
            t1 = time.perf_counter()
            stop.set()
            bt.join()
            for t in (lt, bt):
                if t.error:
                    raise RuntimeError(f"{t.name} tenant failed under {policy}:\n{t.error}")
            steps_in = sum(1 for e in ends if t0 <= e <= t1)
            return {"be_steps": steps_in, "be_imgs_per_s": steps_in * args.batch / (t1 - t0), "window_s": t1 - t0}

        # ---- warm-up (cuBLAS/cuDNN handles, allocator pools, every pCtx stream) -
        t_w = time.perf_counter()
        for p in pool:
            ls.remap(p)
            decode(prompt, 3)
            be.remap(p)
            be_step()
        ls.remap(full)
        be.remap(full)
        decode(prompt, args.tokens)
        for _ in range(3):
            be_step()
        print(f"warm-up {time.perf_counter() - t_w:.1f} s", flush=True)
        if args.gc_freeze:
            gc.collect()
            gc.freeze()
        result["gc_frozen"] = bool(args.gc_freeze)

        # ---- alone --------------------------------------------------------------
        rt.set_policy("manual")
        ls_alone: List[float] = []
        reqs: List[int] = []
        run_threads(Tenant("ls", ls_loop(time.perf_counter() + args.alone_seconds, ls_alone, reqs)))
        be_ends: List[float] = []
        stop = threading.Event()
        bt = Tenant("be", be_loop(stop, be_ends))
        bt.start()
        time.sleep(args.alone_seconds + 1.0)
        stop.set()
        bt.join()
        if bt.error:
            raise RuntimeError(bt.error)
        tw0 = be_ends[0] if be_ends else 0.0  # from the first finished step: no ramp-up
        n_be = len(be_ends) - 1
        be_alone_ips = n_be * args.batch / (be_ends[-1] - tw0) if n_be > 0 else float("nan")
        alone = {
            "tpot_p50_ms": pct(ls_alone, 50) * 1e3,
            "tpot_p99_ms": pct(ls_alone, 99) * 1e3,
            "tokens": len(ls_alone),
            "tpot_max_ms": max(ls_alone, default=float("nan")) * 1e3,
            "tokens_over_50ms": sum(1 for x in ls_alone if x > 0.05),
            "ls_requests": len(reqs),
            "be_imgs_per_s": be_alone_ips,
            "be_steps": n_be,
            "ls_pctx": full,
            "be_pctx": full,
        }
        result["alone"] = alone
        print(f"alone: TPOT p50 {alone['tpot_p50_ms']:.2f} ms p99 {alone['tpot_p99_ms']:.2f} ms "
              f"({len(ls_alone)} tokens); BE {be_alone_ips:.0f} img/s", flush=True)
        save()

        # ---- co-located, per policy ---------------------------------------------
        configs: Dict[str, Any] = {}
        result["configs"] = configs
        for policy in [p for p in args.policies.split(",") if p]:
            try:
                rt.set_policy(policy)
                steps: List[float] = []
                nreq: List[int] = []
                ls0, be0 = ls.stats(), be.stats()
                be_fig = with_be(policy, args.seconds, lambda until: ls_loop(until, steps, nreq))
                ls1, be1 = ls.stats(), be.stats()
                c = {
                    "tpot_p50_ms": pct(steps, 50) * 1e3,
                    "tpot_p99_ms": pct(steps, 99) * 1e3,
                    "tpot_p50_norm": pct(steps, 50) * 1e3 / alone["tpot_p50_ms"],
                    "tpot_p99_norm": pct(steps, 99) * 1e3 / alone["tpot_p99_ms"],
                    "be_imgs_per_s": be_fig["be_imgs_per_s"],
                    "be_tput_norm": be_fig["be_imgs_per_s"] / be_alone_ips,
                    "tokens": len(steps),
                    "tpot_max_ms": max(steps, default=float("nan")) * 1e3,
                    "tokens_over_50ms": sum(1 for x in steps if x > 0.05),
                    "ls_requests": len(nreq),
                    "be_steps": be_fig["be_steps"],
                    "window_s": be_fig["window_s"],
                    "ls_pctx": ls1.pctx,
                    "be_pctx": be1.pctx,
                    "ls_remaps": ls1.remaps - ls0.remaps,
                    "be_remaps": be1.remaps - be0.remaps,
                    "ls_holds": ls1.holds - ls0.holds,
                    "be_holds": be1.holds - be0.holds,
                }
                configs[policy] = c
                print(f"{policy}: TPOT p50 {c['tpot_p50_ms']:.2f} ms p99 {c['tpot_p99_ms']:.2f} ms "
                      f"(x{c['tpot_p99_norm']:.2f}); BE {c['be_imgs_per_s']:.0f} img/s (x{c['be_tput_norm']:.2f}); "
                      f"LS on pCtx {c['ls_pctx']}, BE on {c['be_pctx']}", flush=True)
            except Exception:  # noqa: BLE001 (the other policies still run)
                err = traceback.format_exc()
                print(err, flush=True)
                result["errors"].append({"phase": policy, "error": err})
            save()

        # ---- determinism ----------------------------------------------------------
        rt.set_policy("manual")
        ls.remap(full)
        be.remap(full)
        n = args.decodes
        decode(det_prompt, args.det_tokens)  # first use of this prompt length: lazy kernel loads
        t_d = time.perf_counter()
        ref_toks, ref_logits = decode(det_prompt, args.det_tokens, keep_logits=True)
        per_decode = time.perf_counter() - t_d
        left = deadline - time.perf_counter()
        # alone and co-located (about 1.5x slower) must fit in what is left
        fit = int(left / (per_decode * 2.5)) if per_decode > 0 else n
        if fit < n:
            print(f"determinism: {n} decodes each would pass the time budget; running {max(fit, 10)}", flush=True)
            n = max(fit, 10)
        det = {"policy": "manual", "prompt_len": args.det_prompt_len, "tokens_per_decode": args.det_tokens,
               "alone": 0, "colocated": 0, "alone_mismatches": 0, "colocated_mismatches": 0,
               "logits_mismatches": 0, "pctx_visited": [], "reference_tokens": ref_toks}
        result["decodes"] = det

        def same(toks: List[int], logits: Any) -> bool:
            if logits is None or ref_logits is None or not torch.equal(logits, ref_logits):
                det["logits_mismatches"] += 1
            return toks == ref_toks

        def det_alone() -> None:
            for _ in range(n):
                toks, lg = decode(det_prompt, args.det_tokens, keep_logits=True)
                det["alone"] += 1
                det["alone_mismatches"] += not same(toks, lg)

        visited: List[int] = []

        def det_colocated(until: float) -> Callable[[], None]:
            def body() -> None:
                for i in range(n):
                    p = pool[i % len(pool)]
                    ls.remap(p)
                    comp = info.pctx[p].complement
                    be.remap(comp if comp is not None else pool[(i + 1) % len(pool)])
                    toks, lg = decode(det_prompt, args.det_tokens, keep_logits=True)
                    visited.append(ls.pctx)
                    det["colocated"] += 1
                    det["colocated_mismatches"] += not same(toks, lg)
            return body

        try:
            run_threads(Tenant("ls", det_alone))
            with_be("manual", 0.0, det_colocated)
        except Exception:  # noqa: BLE001
            err = traceback.format_exc()
            print(err, flush=True)
            result["errors"].append({"phase": "determinism", "error": err})
        det["pctx_visited"] = sorted(set(visited))
        det["remaps"] = ls.stats().remaps
        result["token_identical"] = bool(det["alone"] and det["colocated"]
                                         and det["alone_mismatches"] == 0 and det["colocated_mismatches"] == 0)
        result["logits_bitwise_identical"] = bool(det["alone"] and det["colocated"] and det["logits_mismatches"] == 0)
        result["wall_s"] = time.perf_counter() - t_start
        save()

        torch.cuda.synchronize()
        be.close()
        ls.close()
        rt.close()
        faulthandler.cancel_dump_traceback_later()
    except BaseException:
        result["errors"].append({"phase": "main", "error": traceback.format_exc()})
        save()
        raise

    # ---- table (last) ---------------------------------------------------------
    print()
    print(f"{result['device']}, {result['driver']}, {result['sms']} SMs, commit {result['commit']}; "
          f"LS Llama {ls_params / 1e9:.2f}B bf16, {args.tokens} tokens/request; BE ResNet-50 batch {args.batch}")
    print(f"{'config':<12} {'tpot_p50_ms':>11} {'tpot_p99_ms':>11} {'p99_norm':>8} {'be_img/s':>9} {'be_norm':>7}")
    print(f"{'ls_alone':<12} {alone['tpot_p50_ms']:>11.2f} {alone['tpot_p99_ms']:>11.2f} {1.0:>8.2f} "
          f"{'-':>9} {'-':>7}")
    print(f"{'be_alone':<12} {'-':>11} {'-':>11} {'-':>8} {be_alone_ips:>9.0f} {1.0:>7.3f}")
    for name, c in configs.items():
        print(f"{name:<12} {c['tpot_p50_ms']:>11.2f} {c['tpot_p99_ms']:>11.2f} {c['tpot_p99_norm']:>8.2f} "
              f"{c['be_imgs_per_s']:>9.0f} {c['be_tput_norm']:>7.3f}")
    print(f"determinism: {det['alone']} decodes alone, {det['colocated']} co-located over pCtxs "
          f"{det['pctx_visited']}: token_identical={str(result['token_identical']).lower()}, "
          f"logits bitwise identical={str(result['logits_bitwise_identical']).lower()}")
    return 0 if not result["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
