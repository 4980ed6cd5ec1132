#!/usr/bin/env python3
"""Graph segments on PyTorch training steps: what cutting a step costs
(throughput, host enqueue) and whether it changes a bit of the result.

    python3 bench/torch/segments_torch.py [--out segments_torch.json] [--jobs resnet50,bert] [--segment-us 1000]

Per BE training job of --jobs (torch_jobs.TRAIN_JOBS; ``bert`` is
``bert_large``; batch sizes torch_jobs.DEFAULT_BATCH unless --batch), on a
Runtime with the library's default pool (or --low-tiers) and policy
`shared`, one vCtx of class BE captures the job's step twice with
VCtx.graph: ``unsegmented`` (segment_us 0: one segment per step) and
``segmented`` (segment_us --segment-us: the library measures the step at
its first launch, on the whole GPU, and cuts it into segments of at most
that long there). Both graphs share the job's parameters and
optimizer state; before every measured run they are restored in place from
one snapshot taken after the build, so every run starts from the same bits.

Figures (medians and [min, max] over --reps; the variants alternate, the
first one changing every repetition):
  - throughput: on the whole-GPU pCtx, --steps steps after --warmup steps,
    each replayed and then synchronized (a training loop that reads its loss
    every step); steps/s per variant and the ratio segmented / unsegmented
    per repetition (target >= 0.97);
  - host enqueue: per step the wall time of the replay call (``g.replay()``:
    for the segmented graph, all its segments' launches) over the step's GPU
    time (CUDA events recorded in sections of the vCtx just before and after
    the replay, the step synchronized each time, so the GPU time includes the
    first launch's latency); median and p99 over the steps of all
    repetitions (target < 5%), with the host and GPU times themselves;
  - bitwise: from the snapshot, --bitwise-steps steps of each variant on
    every pCtx of the pool (policy `manual`, the vCtx remapped there), then
    every parameter, buffer, gradient and optimizer state tensor and the
    last loss compared bit for bit (as bytes) with --bitwise-steps
    unsegmented steps on the whole GPU; per pCtx and variant identical
    true/false, and which tensors differ. A control run, unsegmented on the
    whole GPU again, says whether the kernels themselves repeat their bits
    (if not, no comparison can show what segmentation does);
  - the segmented graph's g.stats() (pieces, segments, cut_points, uncut,
    step_us, longest_segment_us, calibrated_pctx) and per segment
    g.segment(i) (piece, nodes, kernel nodes, calibrated_us, measured_us
    and samples per pCtx where measured); the unsegmented graph's stats too.

Writes JSON (--out) with provenance and every figure, prints a table last.
Exit 77 (nothing run) without torch or a CUDA GPU (or without torchvision /
transformers where a job needs them); exit 1 on an error or a bitwise
difference.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench_common import detshare, low_tier_pool, pct, pool_json, provenance, torch_on_gpu, write_result
from colocate_torch import med_range
from torch_jobs import DEFAULT_BATCH, TRAIN_JOBS, build_train_job, parse_batches

VARIANTS = ("unsegmented", "segmented")
JOB_ALIASES = {"bert": "bert_large"}
# the modules a job's model comes from (exit 77 when missing)
JOB_MODULES = {"resnet50": ("torchvision",), "resnet101": ("torchvision",), "bert_large": ("transformers",),
               "lora_llama": ("transformers", "peft")}
RATIO_TARGET = 0.97
HOST_SHARE_TARGET = 0.05


def job_list(text: str) -> List[str]:
    """--jobs: comma-separated TRAIN_JOBS keys (``bert`` for ``bert_large``), in order, once each.
    Raises ValueError naming an unknown one."""
    out: List[str] = []
    for x in [x.strip() for x in text.split(",") if x.strip()]:
        k = JOB_ALIASES.get(x, x)
        if k not in TRAIN_JOBS:
            raise ValueError(f"unknown job {x!r} (known: {', '.join(TRAIN_JOBS)}; bert = bert_large)")
        if k not in out:
            out.append(k)
    return out


def variant_order(rep: int) -> Tuple[str, str]:
    """The variants in the order repetition `rep` runs them: alternating which goes first."""
    return VARIANTS if rep % 2 == 0 else (VARIANTS[1], VARIANTS[0])


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="segments_torch.json", help="JSON output file")
    p.add_argument("--jobs", default="resnet50,bert",
                   help=f"BE training jobs: TRAIN_JOBS keys ({', '.join(TRAIN_JOBS)}; bert = bert_large)")
    p.add_argument("--segment-us", type=int, default=1000,
                   help="the segmented graph's segment_us (100 .. 10000000)")
    p.add_argument("--reps", type=int, default=3, help="repetitions (>= 3 for the ranges)")
    p.add_argument("--steps", type=int, default=30, help="timed steps per variant and repetition")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before them")
    p.add_argument("--bitwise-steps", type=int, default=10, help="steps per variant and pCtx of the bitwise check")
    p.add_argument("--batch", default="", help="batch overrides, e.g. resnet50=32 (default: torch_jobs.DEFAULT_BATCH)")
    p.add_argument("--low-tiers", default="",
                   help="LOW tiers of the pool, SMs, each with its complement (default: the library's pool)")
    p.add_argument("--deterministic", action="store_true",
                   help="torch.use_deterministic_algorithms(True, warn_only=True) and cuDNN deterministic "
                        "before the builds (default: off, the jobs as colocate_torch runs them)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--watchdog-s", type=float, default=1500.0, help="dump stacks and exit after this long")
    a = p.parse_args(argv)
    try:
        a.job_list = job_list(a.jobs)
    except ValueError as e:
        p.error(str(e))
    if not a.job_list:
        p.error("--jobs is empty")
    if not 100 <= a.segment_us <= 10_000_000:
        p.error("--segment-us must be in 100 .. 10000000 (DS_GRAPH_SEGMENT_MIN_US .. MAX_US)")
    for k in ("reps", "steps", "bitwise_steps"):
        if getattr(a, k) < 1:
            p.error(f"--{k.replace('_', '-')} must be >= 1")
    if a.warmup < 0:
        p.error("--warmup must be >= 0")
    a.batches = {JOB_ALIASES.get(k, k): v for k, v in parse_batches(p, a.batch).items()}
    return a


def ratio_summary(seg: Sequence[float], unseg: Sequence[float]) -> Dict[str, Any]:
    """Per-repetition ratios segmented / unsegmented (steps/s), their median
    and [min, max], and whether the median meets RATIO_TARGET."""
    rs = [s / u for s, u in zip(seg, unseg) if u and u == u and s == s]
    m = med_range(rs)
    return {"per_rep": rs, **m, "target": RATIO_TARGET, "meets_target": bool(rs) and m["median"] >= RATIO_TARGET}


def share_summary(host_us: Sequence[float], gpu_us: Sequence[float]) -> Dict[str, Any]:
    """Host enqueue over GPU time per step: median and p99 of the per-step
    shares, and of the host and GPU times themselves."""
    sh = [h / g for h, g in zip(host_us, gpu_us) if g > 0]
    return {"share_p50": pct(sh, 50), "share_p99": pct(sh, 99), "host_us_p50": pct(list(host_us), 50),
            "host_us_p99": pct(list(host_us), 99), "gpu_us_p50": pct(list(gpu_us), 50),
            "gpu_us_p99": pct(list(gpu_us), 99), "steps": len(sh), "target": HOST_SHARE_TARGET,
            "meets_target": bool(sh) and pct(sh, 50) < HOST_SHARE_TARGET}


# ---- state: snapshot, restore, compare ------------------------------------------------


def state_tensors(torch: Any, job: Any) -> List[Tuple[str, Any]]:
    """Every tensor a training step changes, named: the parameters, buffers
    (BatchNorm's running statistics) and gradients of the models in
    job.keep and the tensors of its optimizers' state (momentum, Adam
    moments, the capturable step count). Each storage once."""
    out: List[Tuple[str, Any]] = []
    seen = set()

    def add(name: str, t: Any) -> None:
        if t is None or not isinstance(t, torch.Tensor):
            return
        key = (t.data_ptr(), t.dtype, tuple(t.shape))
        if key in seen:
            return
        seen.add(key)
        out.append((name, t))

    for i, obj in enumerate(job.keep):
        if isinstance(obj, torch.nn.Module):
            for n, p in obj.named_parameters():
                add(f"{i}.param.{n}", p)
                add(f"{i}.grad.{n}", p.grad)
            for n, b in obj.named_buffers():
                add(f"{i}.buffer.{n}", b)
        elif isinstance(obj, torch.optim.Optimizer):
            for gi, group in enumerate(obj.param_groups):
                for pi, p in enumerate(group["params"]):
                    for k, v in obj.state.get(p, {}).items():
                        add(f"{i}.opt.{gi}.{pi}.{k}", v)
        elif hasattr(obj, "parameters") and not isinstance(obj, torch.Tensor):
            for pi, p in enumerate(obj.parameters()):
                add(f"{i}.param.{pi}", p)
                add(f"{i}.grad.{pi}", getattr(p, "grad", None))
    return out


def snapshot(state: List[Tuple[str, Any]]) -> List[Any]:
    return [t.detach().clone() for _, t in state]


def restore(torch: Any, vctx: Any, state: List[Tuple[str, Any]], snap: List[Any]) -> None:
    """Writes the snapshot back in place (the graphs keep the tensors' addresses), after the vCtx's work
    and before its next (torch's stream and the vCtx's are not ordered)."""
    vctx.synchronize()
    with torch.no_grad():
        for (_, t), s in zip(state, snap):
            t.copy_(s)
    torch.cuda.synchronize()


def as_bytes(t: Any) -> Any:
    import torch

    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def differing(torch: Any, state: List[Tuple[str, Any]], ref: List[Any]) -> List[str]:
    """Names of the state tensors whose bytes differ from ref's."""
    return [n for (n, t), r in zip(state, ref) if not torch.equal(as_bytes(t), as_bytes(r))]


# ---- one job -------------------------------------------------------------------------


def graph_stats(g: Any) -> Dict[str, Any]:
    st = g.stats()
    out: Dict[str, Any] = {"launches": st.launches}
    for k in ("pieces", "segments", "segment_us", "uncut", "cut_points", "calibrated_pctx", "step_us",
              "longest_segment_us"):
        v = getattr(st, k, None)
        out[k] = v.name.lower() if hasattr(v, "name") else v
    ps = [p for p in st.pctx if p.instantiated]
    out["pctxs_instantiated"] = len(ps)
    out["kernel_nodes"] = max((p.kernel_nodes for p in ps), default=0)
    out["nodes"] = max((p.nodes for p in ps), default=0)
    out["capture_ms"] = sum(p.capture_us for p in ps) / 1e3
    out["instantiate_ms"] = sum(p.instantiate_us for p in ps) / 1e3
    out["device_bytes"] = sum(p.device_bytes for p in ps)
    return out


def segment_table(g: Any, n: int) -> List[Dict[str, Any]]:
    rows = []
    for i in range(n):
        s = g.segment(i)
        rows.append({"index": i, "piece": s.piece, "nodes": s.nodes, "kernel_nodes": s.kernel_nodes,
                     "calibrated_us": s.calibrated_us,
                     "measured_us": {str(p): us for p, us in enumerate(s.measured_us) if us},
                     "samples": {str(p): k for p, k in enumerate(s.samples) if k}})
    return rows


def throughput(g: Any, vctx: Any, warmup: int, steps: int) -> float:
    """Steps/s of `steps` steps (replay, then synchronize), after `warmup` of them."""
    for _ in range(warmup):
        g.replay()
        vctx.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        g.replay()
        vctx.synchronize()
    return steps / (time.perf_counter() - t0)


def host_and_gpu(torch: Any, g: Any, vctx: Any, steps: int) -> Tuple[List[float], List[float]]:
    """Per step: the replay call's wall time and the step's GPU time (events
    in sections just before and after it; synchronized each step), us."""
    host, gpu = [], []
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(steps):
        with vctx.section("torch") as s:
            e0.record(s)
        h0 = time.perf_counter()
        g.replay()
        h1 = time.perf_counter()
        with vctx.section("torch") as s:
            e1.record(s)
        vctx.synchronize()
        host.append((h1 - h0) * 1e6)
        gpu.append(e0.elapsed_time(e1) * 1e3)
    return host, gpu


def run_job(torch: Any, rt: Any, name: str, args: argparse.Namespace, res: Dict[str, Any]) -> None:
    """Builds the job's two graphs and fills res (the job's entry) as it goes."""
    info = rt.info()
    full = info.full_pctx
    pool_sms = {p.index: p.sm_count for p in info.pctx}
    dev = torch.device("cuda", 0)
    t0 = time.perf_counter()
    job = build_train_job(name, torch, dev, args.batches.get(name), args.seed)
    torch.cuda.synchronize()  # the model and inputs are written before the vCtx's streams read them
    res.update(job=name, batch=job.batch, unit=job.unit, params=job.params, **job.desc)
    vctx = rt.vctx(f"be-{name}", cls="be")
    vctx.remap(full)  # the segmented graph's first launch measures the step here: the bound is for the whole GPU
    graphs: Dict[str, Any] = {}
    try:
        graphs["unsegmented"] = vctx.graph(job.step, warmup=3, name=f"{name}-unseg", segment_us=0)
        graphs["segmented"] = vctx.graph(job.step, warmup=1, name=f"{name}-seg", segment_us=args.segment_us)
        # the first launch of the segmented graph measures the step and cuts it (it waits for it)
        for v in VARIANTS:
            g = graphs[v]
            g.replay()
            vctx.synchronize()
        res["build_s"] = time.perf_counter() - t0
        res["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
        state = state_tensors(torch, job)
        snap = snapshot(state)
        res["state_tensors"] = len(state)
        res["state_bytes"] = sum(t.numel() * t.element_size() for _, t in state)
        print(f"[{name}] batch {job.batch}: {len(state)} state tensors; graphs built in {res['build_s']:.1f} s",
              flush=True)

        # throughput and host enqueue, whole GPU, alternating
        rps: Dict[str, List[float]] = {v: [] for v in VARIANTS}
        host: Dict[str, List[float]] = {v: [] for v in VARIANTS}
        gpu: Dict[str, List[float]] = {v: [] for v in VARIANTS}
        res["reps"] = []
        for rep in range(args.reps):
            r: Dict[str, Any] = {"order": list(variant_order(rep))}
            for v in variant_order(rep):
                restore(torch, vctx, state, snap)
                sps = throughput(graphs[v], vctx, args.warmup, args.steps)
                h, gu = host_and_gpu(torch, graphs[v], vctx, args.steps)
                rps[v].append(sps)
                host[v] += h
                gpu[v] += gu
                r[v] = {"steps_per_s": sps, "host_us_p50": pct(h, 50), "gpu_us_p50": pct(gu, 50)}
            r["ratio"] = r["segmented"]["steps_per_s"] / r["unsegmented"]["steps_per_s"]
            res["reps"].append(r)
            print(f"[{name}] rep {rep}: unsegmented {r['unsegmented']['steps_per_s']:.2f} steps/s, segmented "
                  f"{r['segmented']['steps_per_s']:.2f} steps/s, ratio {r['ratio']:.4f}", flush=True)
        res["throughput"] = {v: {"steps_per_s": med_range(rps[v]), "per_rep": rps[v]} for v in VARIANTS}
        res["ratio"] = ratio_summary(rps["segmented"], rps["unsegmented"])
        res["host_enqueue"] = {v: share_summary(host[v], gpu[v]) for v in VARIANTS}
        res["host_enqueue"]["method"] = (
            "host: wall time of g.replay() per step; gpu: CUDA events recorded in sections of the vCtx just "
            "before and after the replay, the vCtx synchronized every step (the first launch's latency "
            "included); share = host / gpu per step, median and p99 over the steps of all repetitions")
        gs = {v: graph_stats(graphs[v]) for v in VARIANTS}
        gs["segmented"]["segment_table"] = segment_table(graphs["segmented"], int(gs["segmented"]["segments"] or 0))
        res["graphs"] = gs

        # bitwise: every pCtx, both variants, from the snapshot
        rt.set_policy("manual")
        try:
            def run(v: str, p: int) -> Any:
                """--bitwise-steps steps of variant v on pCtx p from the snapshot; the last loss."""
                restore(torch, vctx, state, snap)
                vctx.remap(p)
                for _ in range(args.bitwise_steps):
                    graphs[v].replay()
                vctx.synchronize()
                return graphs[v].outputs.detach().clone()

            ref_loss = run("unsegmented", full)
            ref = snapshot(state)
            ref_loss_f = float(ref_loss.float().item())
            cases = []

            def compare(v: str, p: int) -> Dict[str, Any]:
                before = graphs[v].stats().pctx[p].launches
                loss = run(v, p)
                diff = differing(torch, state, ref)
                same_loss = bool(torch.equal(as_bytes(loss), as_bytes(ref_loss)))
                bound = vctx.pctx
                c = {"variant": v, "pctx": p, "sms": pool_sms[p], "bound": bound,
                     "launches_there": graphs[v].stats().pctx[p].launches - before,
                     "identical": not diff and same_loss,
                     "loss_identical": same_loss, "differing": len(diff), "differing_names": diff[:20]}
                cases.append(c)
                return c

            control = compare("unsegmented", full)
            res["bitwise_control"] = {"identical": control["identical"], "differing": control["differing"],
                                      "what": "unsegmented on the whole GPU again: the kernels' own repeatability"}
            for p in info.pctx:
                for v in VARIANTS:
                    if v == "unsegmented" and p.index == full:
                        continue  # the control
                    compare(v, p.index)
            vctx.remap(full)
            res["bitwise"] = {"steps": args.bitwise_steps, "reference": "unsegmented, whole GPU",
                              "reference_loss": ref_loss_f, "cases": cases,
                              "all_identical": all(c["identical"] for c in cases),
                              "per_pctx": {str(p.index): {v: next((c["identical"] for c in cases
                                                                  if c["pctx"] == p.index and c["variant"] == v),
                                                                 None) for v in VARIANTS} for p in info.pctx}}
            print(f"[{name}] bitwise over {len(info.pctx)} pCtxs x {len(VARIANTS)} variants: all identical "
                  f"{res['bitwise']['all_identical']} (control {control['identical']})", flush=True)
        finally:
            rt.set_policy("shared")
        # the segments' measured times after all the runs
        gs["segmented"]["segment_table"] = segment_table(graphs["segmented"], int(gs["segmented"]["segments"] or 0))
    finally:
        for g in graphs.values():
            g.close()
        vctx.synchronize()
        vctx.close()
        job = None
        gc.collect()
        torch.cuda.empty_cache()


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    mods = sorted({m for j in args.job_list for m in JOB_MODULES.get(j, ())})
    torch = torch_on_gpu("segments_torch", *mods)
    if torch is None:
        return 77
    faulthandler.dump_traceback_later(args.watchdog_s, exit=True)
    t_start = time.perf_counter()
    torch.zeros(1, device="cuda")
    torch.backends.cuda.enable_cudnn_sdp(False)  # as colocate_torch: cuDNN's fused attention varies run to run
    if args.deterministic:
        # cuBLAS's deterministic workspaces; read when its first handle is made (the jobs' first matmul)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    tiers = None
    if args.low_tiers:
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        tiers = low_tier_pool(sms, args.low_tiers)
    rt = detshare.Runtime("cuda", policy="shared", tiers=tiers)
    info = rt.info()
    result: Dict[str, Any] = {
        **provenance("segments_torch", info, argv),
        "torch": torch.__version__, "cudnn_sdp": False, "deterministic": args.deterministic,
        "seed": args.seed, "segment_us": args.segment_us, "reps": args.reps, "steps": args.steps,
        "warmup": args.warmup, "bitwise_steps": args.bitwise_steps,
        "batches": {j: args.batches.get(j, DEFAULT_BATCH[j]) for j in args.job_list},
        "pool": pool_json(info),
        "targets": {"ratio_min": RATIO_TARGET, "host_share_max": HOST_SHARE_TARGET},
        "jobs": {}, "errors": [],
    }
    for m in mods:
        result[m] = __import__(m).__version__
    out = Path(args.out)

    def save() -> None:
        write_result(out, result, t_start)

    try:
        for name in args.job_list:
            res: Dict[str, Any] = {}
            result["jobs"][name] = res
            try:
                run_job(torch, rt, name, args, res)
            except Exception:  # noqa: BLE001 (the other jobs still run)
                err = traceback.format_exc()
                print(err, flush=True)
                result["errors"].append({"job": name, "error": err})
            save()
    finally:
        save()
        rt.close()
        faulthandler.cancel_dump_traceback_later()
    print_table(result)
    bad = [n for n, r in result["jobs"].items() if not r.get("bitwise", {}).get("all_identical", False)]
    return 0 if not result["errors"] and not bad else 1


def print_table(result: Dict[str, Any]) -> None:
    def mr(m: Dict[str, Any], f: str = "{:.3f}") -> str:
        if not m or m.get("median") is None:
            return "-"
        return f"{f.format(m['median'])} [{f.format(m['min'])}, {f.format(m['max'])}]"

    print()
    print(f"{result['device']}, {result['driver']}, {result['sms']} SMs, commit {result['commit']}; segment_us "
          f"{result['segment_us']}; {result['reps']} reps of {result['steps']} steps; medians [min, max]")
    for name, r in result["jobs"].items():
        if "ratio" not in r:
            print(f"{name}: no figures (see errors)")
            continue
        g = r["graphs"]["segmented"]
        print(f"{name} (batch {r['batch']}): {g['segments']} segments of {g['cut_points']} cut points, uncut "
              f"{g['uncut']}, step {g['step_us'] or 0:.0f} us, longest segment {g['longest_segment_us'] or 0:.0f} us "
              f"(on pCtx {g['calibrated_pctx']}'s scale)")
        for v in VARIANTS:
            h = r["host_enqueue"][v]
            print(f"  {v:<12} {mr(r['throughput'][v]['steps_per_s'], '{:.2f}'):>26} steps/s   host/GPU p50 "
                  f"{h['share_p50']:.4f} p99 {h['share_p99']:.4f} (host p50 {h['host_us_p50']:.0f} us, GPU p50 "
                  f"{h['gpu_us_p50']:.0f} us)")
        ra = r["ratio"]
        print(f"  ratio segmented/unsegmented {mr(ra, '{:.4f}')} (target >= {ra['target']}: {ra['meets_target']}); "
              f"host share p50 < {HOST_SHARE_TARGET}: {r['host_enqueue']['segmented']['meets_target']}")
        b = r.get("bitwise")
        if b:
            per = " ".join(f"{p}:{'/'.join('y' if x else ('n' if x is not None else '-') for x in d.values())}"
                           for p, d in b["per_pctx"].items())
            print(f"  bitwise (unseg/seg per pCtx) {per}; all identical {b['all_identical']}; control "
                  f"{r['bitwise_control']['identical']}")


if __name__ == "__main__":
    sys.exit(main())
