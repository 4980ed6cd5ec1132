#!/usr/bin/env bash
# Builds libdetshare and runs the main job: the co-location example (BENCH.md W1).
# On a machine without a GPU it runs on the simulated device and says so.
# Extra arguments go to the example (e.g. --device sim, --requests 2000).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cuda_root="${CUDA_ROOT:-/usr/local/cuda}"
[ -f build/build.ninja ] || meson setup build -Dtoolkit_root="$cuda_root" >/dev/null
ninja -C build
./build/examples/colocate/colocate --out build/colocate.json "$@"
