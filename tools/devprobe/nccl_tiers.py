#!/usr/bin/env python3
"""How NCCL collectives behave in green contexts: an all-reduce launched on a
vCtx's stream while the vCtx sits on each LOW tier of the pool, on every rank
alike and with the ranks on different tiers.

Needs two or more GPUs, PyTorch with NCCL and libdetshare (DETSHARE_LIBRARY,
PYTHONPATH=bindings/python). One process per GPU (torch.multiprocessing):

    python3 tools/devprobe/nccl_tiers.py --out nccl_tiers.json [--sizes-mib 1,64] [--reps 20]

For each case and message size it records whether the collective completed
within --timeout-s (a hang is reported, not waited out: each case runs with
NCCL's own watchdog off and a per-case deadline), and the median and p99 of
its time (CUDA events on the rank's stream, after warm-up) over the whole-GPU
case of the same size. Cases: every rank on tier T for each LOW tier T and
the whole GPU; rank 0 on the smallest LOW tier while the others have the
whole GPU (the straggler case a per-GPU policy would make). The results go
to docs/device-facts.md.
"""
import argparse
import json
import os
import statistics
import sys
import time


def rank_main(rank, world, args, q):
    import torch
    import torch.distributed as dist

    import detshare

    torch.cuda.set_device(rank)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    rt = detshare.Runtime("cuda", device_ordinal=rank, policy="manual")
    info = rt.info
    low = sorted((p for p in info.pctx if p.anchor.name == "LOW"), key=lambda p: p.sm_count)
    full = next(p for p in info.pctx if p.anchor.name == "FULL")
    cases = [("all_" + str(p.sm_count), {r: p for r in range(world)}) for p in low]
    cases.append(("all_full", {r: full for r in range(world)}))
    if low:
        straggler = {r: full for r in range(world)}
        straggler[0] = low[0]
        cases.append(("rank0_%d_others_full" % low[0].sm_count, straggler))
    v = rt.vctx("nccl", cls="ls")
    out = []
    for size_mib in args.sizes_mib:
        x = torch.ones(size_mib * (1 << 20) // 4, device="cuda")
        for name, where in cases:
            v.remap(where[rank].index)
            times = []
            completed = True
            t_case = time.monotonic()
            for i in range(args.warmup + args.reps):
                with v.section(stream="torch") as s, torch.cuda.stream(s):
                    a = torch.cuda.Event(enable_timing=True)
                    b = torch.cuda.Event(enable_timing=True)
                    a.record(s)
                    dist.all_reduce(x)
                    b.record(s)
                while not b.query():
                    if time.monotonic() - t_case > args.timeout_s:
                        completed = False
                        break
                    time.sleep(0.0002)
                if not completed:
                    break
                if i >= args.warmup:
                    times.append(a.elapsed_time(b) * 1e3)
            out.append({"case": name, "size_mib": size_mib, "rank": rank, "sm_count": where[rank].sm_count,
                        "completed": completed, "us_p50": statistics.median(times) if times else None,
                        "us_p99": sorted(times)[max(0, int(0.99 * len(times)) - 1)] if times else None,
                        "reps": len(times)})
            if not completed:  # the communicator is stuck: report and stop
                q.put(out)
                os._exit(3)
            dist.barrier()
    q.put(out)
    v.close()
    rt.close()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes-mib", type=lambda s: [int(x) for x in s.split(",")], default=[1, 64])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--timeout-s", type=float, default=20.0)
    ap.add_argument("--port", type=int, default=29531)
    args = ap.parse_args()
    import torch
    import torch.multiprocessing as mp

    world = torch.cuda.device_count()
    if world < 2:
        print("nccl_tiers: needs two or more GPUs, this machine has %d" % world, file=sys.stderr)
        return 2
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, world, args, q)) for r in range(world)]
    for p in procs:
        p.start()
    rows = []
    for _ in procs:
        try:
            rows += q.get(timeout=args.timeout_s * 10 + 120)
        except Exception:  # a rank that died without reporting
            break
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    base = {(r["size_mib"], r["rank"]): r["us_p50"] for r in rows if r["case"] == "all_full" and r["us_p50"]}
    for r in rows:
        b = base.get((r["size_mib"], r["rank"]))
        r["p50_over_full"] = r["us_p50"] / b if b and r["us_p50"] else None
    doc = {"probe": "nccl_tiers", "world": world, "device": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
           "exits": [p.exitcode for p in procs], "rows": rows}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    for r in rows:
        print("%-24s %4d MiB rank %d on %3d SMs: %s p50 %s us (%s x full)" % (
            r["case"], r["size_mib"], r["rank"], r["sm_count"], "ok  " if r["completed"] else "HANG",
            "%.0f" % r["us_p50"] if r["us_p50"] else "-",
            "%.2f" % r["p50_over_full"] if r["p50_over_full"] else "-"))
    return 0 if all(e == 0 for e in doc["exits"]) else 1


if __name__ == "__main__":
    sys.exit(main())
