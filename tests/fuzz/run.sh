#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined)
# against the library's sources on the simulated device, and runs each for
# FUZZ_SECONDS (default 20) from its seed corpus in tests/fuzz/corpus/<target>.
# New inputs go to build-fuzz/corpus/<target> (not the source tree); a crash
# leaves build-fuzz/crash-* and fails the run. Needs clang and
# libclang-rt-14-dev (tools/install-deps.sh) and the generated device fatbin
# source of build/ (bash tools/test.sh builds it).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
secs=${FUZZ_SECONDS:-20}
cuda_root="${CUDA_ROOT:-/usr/local/cuda}"
fatbin_c=build/src/ds_device_kernels_fatbin.c
[ -f "$fatbin_c" ] || ninja -C build src/ds_device_kernels_fatbin.c
out=build-fuzz
mkdir -p "$out"
srcs=(src/*.c src/seam/*.c src/memory/*.c src/core/*.c src/rck/*.c src/policy/*.c src/sim/*.c "$fatbin_c")
cflags=(-std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
        -Iinclude -Isrc -I"$cuda_root/include")
for t in config vctx launch policy; do
  clang "${cflags[@]}" "${srcs[@]}" "tests/fuzz/fuzz_$t.c" -o "$out/fuzz_$t" -lhwloc -lm -ldl -lpthread
done
export ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0"
for t in config vctx launch policy; do
  mkdir -p "$out/corpus/$t"
  echo "fuzz_$t: ${secs} s"
  (cd "$out" && "./fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      "corpus/$t" "$root/tests/fuzz/corpus/$t" 2>&1 | grep -E "^#|stat::number_of_executed_units|ERROR|SUMMARY|Done" | tail -4)
done
