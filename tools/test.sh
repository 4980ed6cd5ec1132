#!/usr/bin/env bash
# Builds libdetshare and runs the test suites: `unit` (no GPU needed),
# `smoke` (every example on the simulated device) and `gpu` (skips, exit 77,
# when no GPU is present; never passes without one).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cuda_root="${CUDA_ROOT:-/usr/local/cuda}"
[ -f build/build.ninja ] || meson setup build -Dtoolkit_root="$cuda_root" >/dev/null
ninja -C build
meson test -C build --print-errorlogs --suite unit --suite smoke --suite gpu --suite python "$@"
