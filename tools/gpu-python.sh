#!/usr/bin/env bash
# Checks the Python binding on a machine with a GPU:
#
#   tools/gpu-python.sh [--out DIR] [ARG...]
#
# Builds libdetshare with meson into build-gpu (tests and C examples off), runs
# the binding's tests there (simulated device, and the torch graph tests on
# the GPU), a CuPy launch through ds_launch, bench/torch/graph_decode.py,
# bench/torch/serve_torch.py, pairs_torch.py and colocate_torch.py, leaving
# graph_decode.json, serve_torch.json, pairs_torch.json, colocate_torch.json and gpu-python.log in DIR
# (default: DS_RESULTS_DIR, else build/gpu-results).
# The ARGs go to colocate_torch.py.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/tools/results-dir.sh"
cd "$root" || exit 1
exec > >(tee -a "$out/gpu-python.log") 2>&1
export PATH="/usr/local/cuda/bin:$PATH"
# A copy of the tree without .git: set DS_COMMIT to the commit it holds.
export DS_COMMIT="${DS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
export DETSHARE_LIBRARY="$PWD/build-gpu/src/libdetshare.so"

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import sys, torch, torchvision, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "torchvision", torchvision.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available())'
echo "CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-unset}  commit=$DS_COMMIT"

echo "== build"
t0=$(date +%s)
{ [ -f build-gpu/build.ninja ] ||
    meson setup build-gpu -Dtoolkit_root=/usr/local/cuda -Dbuildtype=release -Dtests=disabled -Dbench=disabled; } \
  >/tmp/ds-build.log 2>&1 && ninja -C build-gpu >>/tmp/ds-build.log 2>&1 ||
  { echo "BUILD FAILED"; tail -60 /tmp/ds-build.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"

echo "== binding tests (simulated device)"
python3 -m pytest -q -p no:cacheprovider bindings/python/tests 2>&1 | tail -15
echo "pytest exit ${PIPESTATUS[0]}"

echo "== launch_cupy (ds_launch of a CuPy kernel under remaps)"
timeout 120 python3 examples/python/launch_cupy.py --rounds 2
echo "exit $?"

echo "== the PyTorch demos of examples/python"
timeout 120 python3 examples/python/graph_demo.py
echo "graph_demo exit $?"
for mode in single slo_aware tpot_first; do
  timeout 120 python3 examples/python/serving_demo.py --mode $mode
  echo "serving_demo --mode $mode exit $?"
done

echo "== graph_decode (a decode step captured per pCtx, replayed under remaps)"
timeout 300 python3 bench/torch/graph_decode.py --min-speedup 3 --out "$out"
echo "graph_decode exit $?"

echo "== serve_torch (W5 in PyTorch on detshare.serving)"
timeout 590 python3 bench/torch/serve_torch.py --out "$out" --requests 32 --loads 0.2,0.3,0.4 --reps 3 \
  --colocate 0.2 --budget-s 530
echo "serve_torch exit $?"

# pairs_torch in two parts of a few minutes each (one file, --append), as the
# committed results were made
echo "== pairs_torch (the paper's Table 1: two training jobs, each step a graph)"
rm -f "$out/pairs_torch.json"
timeout 560 python3 bench/torch/pairs_torch.py --out "$out/pairs_torch.json" --pairs A,B,C,D \
  --seconds 5 --alone-seconds 2.5
echo "pairs_torch (A-D) exit $?"
timeout 560 python3 bench/torch/pairs_torch.py --out "$out/pairs_torch.json" --append --pairs E,1,2,K \
  --seconds 5 --alone-seconds 2.5
echo "pairs_torch (E, 1, 2, K) exit $?"

echo "== colocate_torch (the paper's Table 2: decoding beside training)"
timeout 590 python3 bench/torch/colocate_torch.py --out "$out/colocate_torch.json" --seconds 3 \
  --alone-seconds 2 "$@"
echo "colocate_torch exit $?"
