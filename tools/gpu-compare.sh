#!/usr/bin/env bash
# Before/after on one GPU in one session: builds a baseline tree (a source
# tarball of an earlier commit, `git archive`) and this tree with the same
# toolkit, then runs each benchmark on both, alternating, so that both sets of
# figures come from the same device in the same call:
#
#   tools/gpu-compare.sh --base TARBALL [--out DIR] [--reps N] [BENCH...]
#
# BENCH: overhead colocate pairs determinism gpu (gpu: the `gpu` suite, this
# tree only). Results: DIR/{base,new}/<bench>.<rep>.json and gpu-suite.txt;
# DIR/compare.txt summarises. Criterion for the gpu suite comes from
# .criterion-debs/ (tools/criterion-debs.sh). DS_COMMIT / DS_BASE_COMMIT name
# the two trees in the JSON. DS_PREBUILT=1: build-cmp-base/ and
# build-cmp-new/ were built elsewhere with the same toolkit (--base is then
# not read).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base_tar="" reps=3
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base_tar=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
set -- "${args[@]}"
source "$root/tools/results-dir.sh"
[ -n "$base_tar" ] || [ "${DS_PREBUILT:-0}" = 1 ] || { echo "usage: $0 --base TARBALL [--out DIR] [BENCH...]"; exit 2; }
[ $# -gt 0 ] || set -- overhead colocate pairs determinism gpu
cd "$root" || exit 1
exec > >(tee -a "$out/compare.log") 2>&1
export PATH="/usr/local/cuda/bin:$PATH"

source "$root/tools/criterion-debs.sh"

echo "== machine"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
base_src=/tmp/ds-base
build() { # name srcdir builddir tests
  local t0; t0=$(date +%s)
  if [ ! -f "$3/build.ninja" ]; then
    meson setup "$3" "$2" -Dtoolkit_root=/usr/local/cuda -Dbuildtype=release -Dtests="$4" >"/tmp/ds-$1-build.log" 2>&1 ||
      { echo "$1: SETUP FAILED"; tail -40 "/tmp/ds-$1-build.log"; return 1; }
  fi
  ninja -C "$3" >>"/tmp/ds-$1-build.log" 2>&1 || { echo "$1: BUILD FAILED"; tail -40 "/tmp/ds-$1-build.log"; return 1; }
  echo "$1 built in $(( $(date +%s) - t0 )) s"
}
if [ "${DS_PREBUILT:-0}" != 1 ]; then
  if [ ! -d "$base_src" ]; then mkdir -p "$base_src" && tar -xzf "$base_tar" -C "$base_src"; fi
  build base "$base_src" "$root/build-cmp-base" disabled || exit 1
  build new "$root" "$root/build-cmp-new" enabled || exit 1
fi
mkdir -p "$out/base" "$out/new"

# A benchmark's binary in a build folder: bench/<name>/ (examples/<name>/ in
# trees before the benchmarks moved to bench/, so older baselines still run).
bin() { # builddir bench
  if [ -d "$1/bench/$2" ]; then echo "$1/bench/$2/$2"; else echo "$1/examples/$2/$2"; fi
}
run_bench() { # tree bench rep
  local b=build-cmp-$1 dir="$out/$1" f="$out/$1/$2.$3.json" commit
  [ "$1" = base ] && commit=${DS_BASE_COMMIT:-base} || commit=${DS_COMMIT:-new}
  case "$2" in
    overhead) DS_COMMIT=$commit CUDA_MODULE_LOADING=EAGER timeout -s KILL 300 "$(bin "$b" overhead)" --device cuda --out "$f" >"$dir/$2.$3.txt" 2>&1 ;;
    colocate) DS_COMMIT=$commit timeout -s KILL 300 "$(bin "$b" colocate)" --device cuda --seed "$3" --out "$f" >"$dir/$2.$3.txt" 2>&1 ;;
    pairs) DS_COMMIT=$commit timeout -s KILL 300 "$(bin "$b" pairs)" --device cuda --seed "$3" --seconds 1 --out "$f" >"$dir/$2.$3.txt" 2>&1 ;;
    determinism) DS_COMMIT=$commit timeout -s KILL 300 "$(bin "$b" determinism)" --device cuda --trials 200 --skip-cublas --out "$f" >"$dir/$2.$3.txt" 2>&1 ;;
  esac
  echo "  $1 $2 rep $3: exit $?"
}
for bench in "$@"; do
  echo "== $bench"
  if [ "$bench" = gpu ]; then
    timeout -s KILL 400 ./build-cmp-new/tests/gpu/test_gpu --verbose >"$out/new/gpu-suite.txt" 2>&1
    echo "  gpu suite exit $?"; grep -E "Synthesis" "$out/new/gpu-suite.txt"
    continue
  fi
  n=$reps; [ "$bench" = determinism ] && n=1
  for rep in $(seq 1 "$n"); do run_bench base "$bench" "$rep"; run_bench new "$bench" "$rep"; done
done
python3 "$root/bench/dsbench" compare-results "$out" | tee "$out/compare.txt"
