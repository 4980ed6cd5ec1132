# shellcheck shell=bash
# Sourced (with no arguments) by the scripts that write results on a GPU
# machine: sets $out, the absolute output folder, from a leading `--out DIR`
# or `--out=DIR` of the caller's arguments (consumed), else DS_RESULTS_DIR,
# else OUT (its older name), else build/gpu-results; creates it.
out=${DS_RESULTS_DIR:-${OUT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/gpu-results}}
case "${1:-}" in
  --out) out=${2:?--out needs a folder}; shift 2 ;;
  --out=*) out=${1#--out=}; shift ;;
esac
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 1
