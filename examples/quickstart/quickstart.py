"""Two tenants share one GPU: latency-sensitive inference with an SLO beside
best-effort training. Runs on the simulated device: no GPU needed."""
import sys

import detshare

try:
    with detshare.Runtime("sim") as rt:  # "cuda": the GPU
        kernel = rt.sim.kernel("matmul", block_us=50.0)  # on a GPU, a CUfunction as int
        blocks = {rt.vctx("inference", cls="ls", slo_us=500): 64, rt.vctx("training", cls="be"): 264}
        for _ in range(4):
            for vctx, n in blocks.items():
                vctx.launch(kernel, grid=n, block=128)
        info = rt.info()
        for vctx in blocks:
            vctx.synchronize()
            st = vctx.stats()
            print(f"{vctx.name:9} {st.launches} kernels done at {rt.sim.now_us():3.0f} us (simulated),"
                  f" now on {info.pctx[st.pctx].sm_count:3} SMs")
            vctx.close()
except (detshare.DetShareError, detshare.LibraryNotFoundError) as e:
    sys.exit(f"quickstart: {e}")
