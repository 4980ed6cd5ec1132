#!/usr/bin/env bash
# Runs devprobe modes on a machine with a GPU, each in its own process with a
# hard timeout (a stalled hardware queue can hang a process):
#
#   tools/devprobe/run.sh [--out DIR] [GROUP...]
#
# and writes one JSON line per mode to DIR/devprobe.jsonl (DIR defaults to
# DS_RESULTS_DIR, else build/gpu-results). GROUPs: sync gate conn cost trap
# (default all). nccl_tiers.py (NCCL all-reduce in green contexts, two or
# more GPUs) runs on its own: see its docstring. Build first, in this folder:
#   nvcc -O2 -arch=sm_90 -fatbin -o devprobe.fatbin devprobe.cu
#   nvcc -O2 -arch=sm_90 devprobe.cu -lcuda -lcublas -o devprobe
set -u
CONN=
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../results-dir.sh"
cd "$here"
res="$out/devprobe.jsonl"
: >"$res"
run() { # timeout_s args...
  local t=$1; shift
  timeout -s KILL "$t" env ${CONN:+CUDA_DEVICE_MAX_CONNECTIONS=$CONN} ${MODLOAD:+CUDA_MODULE_LOADING=$MODLOAD} \
    ./devprobe "$@" >>"$res" 2>>"$out/devprobe.err"
  local rc=$?
  [ $rc -eq 0 ] || echo "{\"probe\":\"$*\",\"exit\":$rc}" >>"$res"
}
groups=${*:-sync gate conn cost trap}
for g in $groups; do
  case $g in
    sync) run 30 sync; MODLOAD=EAGER run 30 sync ;;
    gate) run 30 gate ;;
    conn)
      for k in 1 2 4 6 7 8; do run 15 conn $k 0; done
      for k in 4 7; do run 15 conn $k 1; done
      for k in 8 16 24; do CONN=32 run 15 conn $k 0; done ;;
    cost) run 30 cost ;;
    trap) run 15 trap ;;
  esac
done
cat "$res"
