#!/usr/bin/env bash
# Installs what the build and the tests need from Debian's packages (idempotent).
# The CUDA toolkit (headers, nvcc, cuBLAS) is expected in /usr/local/cuda or
# CUDA_ROOT; the driver (libcuda.so.1) is NOT needed to build or test.
set -euo pipefail
pkgs=(meson ninja-build pkg-config gcc libcriterion-dev libhwloc-dev python3 python3-pytest
      clang libclang-rt-14-dev # clang + compiler-rt: libFuzzer for tests/fuzz (.ci/run)
      doxygen python3-venv python3-wheel # the API reference (docs/); the install check
      python3-matplotlib) # the main job's plot (tools/main.sh)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
cuda_root="${CUDA_ROOT:-/usr/local/cuda}"
if [ ! -x "$cuda_root/bin/nvcc" ] || [ ! -f "$cuda_root/include/cuda.h" ]; then
  echo "install-deps: the CUDA toolkit is missing at $cuda_root (need nvcc, cuda.h, cuBLAS); set CUDA_ROOT" >&2
  exit 1
fi
