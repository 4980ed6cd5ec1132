"""What the Python examples that write result files (colocate_torch.py,
graph_decode.py, pairs_torch.py, serve_torch.py) share: the detshare binding (from the source tree when it is
not installed), the percentile they report, where their result files go and the provenance fields of their
JSON (driver, commit; all of them for colocate_torch.py and pairs_torch.py).

Imported as a sibling module: run the examples as scripts,
for example ``python3 bench/torch/graph_decode.py``, which puts this
folder first on sys.path.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[2]
try:
    import detshare
except ImportError:  # run from the source tree without installing the binding
    sys.path.insert(0, str(REPO / "bindings" / "python"))
    import detshare


pct = detshare.serving.percentile  # nearest-rank percentile (q in 0..100); NaN for no samples


def out_dir(out: Optional[str]) -> Path:
    """The folder a result file goes to, created: `out`, else $DS_RESULTS_DIR,
    else build/gpu-results in the source tree."""
    p = Path(out or os.environ.get("DS_RESULTS_DIR") or str(REPO / "build" / "gpu-results"))
    p.mkdir(parents=True, exist_ok=True)
    return p


def driver_string(cuda_version: int) -> str:
    """The kernel module's version and the driver's CUDA version, e.g.
    "580.159.04 (CUDA 13.0)"; the CUDA version alone where the module's is
    unknown."""
    cuda = f"CUDA {cuda_version // 1000}.{(cuda_version % 1000) // 10}"
    try:
        line = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
        for tok in line.split("Kernel Module", 1)[1].split():
            if tok[:1].isdigit() and "." in tok:
                return f"{tok} ({cuda})"
    except (OSError, IndexError):
        pass
    return cuda


def commit() -> str:
    """$DS_COMMIT, else the checkout's short HEAD, else "unknown"."""
    c = os.environ.get("DS_COMMIT")
    if c:
        return c
    try:
        r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=10)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def provenance(benchmark: str, info: Any, argv: Optional[List[str]]) -> Dict[str, Any]:
    """The members colocate_torch's and pairs_torch's result files start with:
    "benchmark", the device, driver and SMs of ``info`` (a Runtime's info()),
    "commit", "command" (``python3 SCRIPT ARGS``, ``argv`` standing for the
    arguments when main() was given them), "date" (now, UTC) and "simulated"
    (false: they run on a GPU)."""
    return {
        "benchmark": benchmark,
        "device": info.device_name,
        "driver": driver_string(info.driver_version),
        "sms": info.sm_count,
        "commit": commit(),
        "command": " ".join(shlex.quote(x) for x in ["python3"] + sys.argv[:1] + (argv or sys.argv[1:])),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "simulated": False,
    }


__all__ = ["REPO", "commit", "detshare", "driver_string", "out_dir", "pct", "provenance"]


def torch_on_gpu(name: str, *modules: str) -> Any:
    """torch, when it and ``modules`` import and torch sees a CUDA device;
    else None, after printing why as ``name`` (the example then runs nothing
    and exits 77)."""
    try:
        import torch

        for m in modules:
            importlib.import_module(m)
    except ImportError as e:
        print(f"{name}: needs {', '.join(('torch',) + modules)} ({e}); nothing run")
        return None
    if not torch.cuda.is_available():
        print(f"{name}: no CUDA device visible to torch; nothing run")
        return None
    return torch


def low_tier_pool(sms: int, low_tiers: str) -> List[Tuple[int, str]]:
    """The pool of a --low-tiers list ("16,32,64"): the whole GPU of `sms`
    SMs, and each LOW tier below it with its complement (Runtime's tiers=)."""
    tiers = [(sms, "full")]
    for low in sorted({int(x) for x in low_tiers.split(",") if x}):
        if 0 < low < sms:
            tiers += [(low, "low"), (sms - low, "high")]
    return tiers


def write_result(path: Path, result: Dict[str, Any], t_start: Optional[float] = None) -> None:
    """Writes a benchmark's result JSON (indented, newline at the end) to
    path, making its folder; with t_start (time.perf_counter() at the run's
    start), records the run's wall_s first. Called after each step, so a run
    cut short leaves what it measured."""
    if t_start is not None:
        result["wall_s"] = time.perf_counter() - t_start
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")


def pool_json(info: Any) -> List[Dict[str, Any]]:
    """The runtime's pool as the result files record it: index, SMs, anchor per pCtx."""
    return [{"index": p.index, "sms": p.sm_count, "anchor": p.anchor.name.lower()} for p in info.pctx]
