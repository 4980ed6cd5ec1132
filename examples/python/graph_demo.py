#!/usr/bin/env python3
"""A PyTorch step as a detshare graph: captured once per pCtx (VCtx.graph),
replayed wherever its vCtx is bound, with the same output bits on every pCtx.
Needs a CUDA GPU and PyTorch; exits 77 (skip) without them.

    python3 examples/python/graph_demo.py

A larger version (a Llama-architecture decode step, timed against the eager
step) is bench/torch/graph_decode.py.
"""
import sys

import detshare


def main() -> int:
    try:
        import torch
    except ImportError:
        print("graph_demo: PyTorch is not installed (skip)")
        return 77
    if not torch.cuda.is_available():
        print("graph_demo: no CUDA GPU (skip)")
        return 77
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 1024)).cuda().half()
    x = torch.randn(64, 1024, device="cuda", dtype=torch.half)  # static input: allocated before the capture
    ref = model(x).clone()  # eager, whole GPU, before any detshare work
    torch.cuda.synchronize()

    # policy "manual": nothing moves the vCtx but the remaps below
    with detshare.Runtime("cuda", policy="manual") as rt:
        vctx = rt.vctx("infer", cls="ls")
        with vctx.graph(lambda: model(x), name="mlp") as g:
            for p in rt.info().pctx:
                g.outputs.fill_(float("nan"))
                vctx.remap(p.index)
                g.replay()
                vctx.synchronize()
                same = torch.equal(g.outputs, ref)
                print(f"pCtx {p.index} ({p.sm_count:3} SMs): {'same bits as eager' if same else 'DIFFERENT'}")
                if not same:
                    return 1
        vctx.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (detshare.DetShareError, detshare.LibraryNotFoundError) as e:
        sys.exit(f"graph_demo: {e}")
