#!/usr/bin/env bash
# Builds libdetshare and runs the main job: the co-location example (W1 in
# docs/benchmarks.md). On a machine without a GPU it runs on the simulated
# device and says so. The build's output goes to build/main-build.log and is
# shown only when the build fails. Extra arguments go to the example
# (e.g. --device sim, --requests 2000; --help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cuda_root="${CUDA_ROOT:-/usr/local/cuda}"
mkdir -p build
log=build/main-build.log
echo "building libdetshare and the examples (log: $log) ..."
if ! { [ -f build/build.ninja ] || meson setup build -Dtoolkit_root="$cuda_root"; } >"$log" 2>&1 ||
   ! ninja -C build >>"$log" 2>&1; then
  cat "$log" >&2
  echo "main: the build failed (above, and in $log)" >&2
  exit 1
fi
rc=0
./build/bench/colocate/colocate --out build/colocate.json "$@" || rc=$?
if [ -f build/colocate.json ]; then
  echo "main: the run's figures are in build/colocate.json"
  # the frontier plot (LS p99 against BE throughput); says so and goes on without matplotlib
  py=python3; [ -x /usr/bin/python3 ] && py=/usr/bin/python3 # Debian's, with python3-matplotlib
  "$py" bench/dsbench plot-results --colocate build/colocate.json --outdir build | sed 's/^/main: /' ||
    echo "main: no plot (above); the JSON is complete"
fi
exit "$rc"
