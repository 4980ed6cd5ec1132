#!/usr/bin/env python3
"""ds_launch from Python with a CuPy kernel: a CUfunction handle
(RawKernel.kernel.ptr) and ctypes parameters, launched through a vCtx that is
remapped to every pCtx of the pool in turn; checks every result.

    python3 examples/python/launch_cupy.py [--n 1048576] [--rounds 3]
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

try:
    import detshare
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bindings" / "python"))
    import detshare

SRC = r"""
extern "C" __global__ void axpb(const float *x, float *y, float a, float b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=1 << 20)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    try:
        import cupy as cp
    except ImportError:
        print("launch_cupy: needs CuPy and a CUDA GPU; nothing run")
        return 77
    x = cp.arange(args.n, dtype=cp.float32)
    y = cp.zeros_like(x)
    kernel = cp.RawKernel(SRC, "axpb")
    fn = kernel.kernel.ptr  # CUfunction, loaded in the primary context
    cp.cuda.Device().synchronize()
    with detshare.Runtime("cuda", policy="manual") as rt:
        pool = rt.info().pctx
        v = rt.vctx("cupy")
        bad = 0
        for r in range(args.rounds):
            for pc in pool:
                v.remap(pc.index)
                a, b = float(r + 2), float(pc.index)
                v.launch(fn, grid=(args.n + 255) // 256, block=256,
                         params=[ctypes.c_void_p(x.data.ptr), ctypes.c_void_p(y.data.ptr),
                                 ctypes.c_float(a), ctypes.c_float(b), ctypes.c_int(args.n)])
                v.synchronize()
                ok = bool(cp.all(y == a * x + b))
                bad += not ok
                print(f"round {r} pCtx {pc.index} ({pc.sm_count} SMs): {'ok' if ok else 'WRONG'}")
        st = v.stats()
        print(f"{st.launches} launches, {st.remaps} remaps, {bad} wrong results")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
