#!/usr/bin/env bash
# Builds libdetshare on a machine with a GPU (with its nvcc and meson), runs
# the `gpu` and `unit` suites, dsinfo and the named benchmarks, and leaves logs
# and JSON in the output folder:
#
#   tools/gpu-run.sh [--out DIR] [BENCH...]
#
# A device's set in docs/results (docs/results/README.md) is this one command,
# then `python3 bench/dsbench results-readme` and `python3 bench/dsbench headline`:
#
#   bash tools/gpu-run.sh --out docs/results/<device> overhead colocate sweep pairs determinism memory stress serve
#
# DIR defaults to DS_RESULTS_DIR, else build/gpu-results. Each bench adds a
# JSON and its output as a log (colocate.log, colocate_sweep.log, ...); `pairs`,
# `sweep` and `serve` also add PNGs. Last, the machine's paths leave every
# JSON, TXT and LOG file written to DIR (`dsbench strip-paths`: `--out
# /abs/DIR/x.json` reads `--out x.json`, the tree's root is cut from its
# paths), so the folder needs no hand edits. Benches: overhead colocate
# colocate32 determinism pairs sweep sweep-part serve serve-variants memory stress faults persistent
# serve-torch serve-torch-variants segments-resnet50 segments-bert_large arrivals-resnet50 arrivals-bert_large frontier-resnet50
# frontier-bert_large (the torch ones need PyTorch in python3) probe (probe runs
# tools/devprobe/run.sh sync: which driver calls wait for a resident kernel;
# build devprobe and devprobe.fatbin in tools/devprobe first, see that script).
# Where Criterion is not installed, a local copy of Criterion's Debian
# packages (see CONTRIBUTING.md) in .criterion-debs/ (or DS_CRITERION_DEBS) is
# unpacked under /tmp/crit and built against.
# DS_PREBUILT=1: build-gpu/ was built on another machine with the same
# toolkit and copied here: no build and no `meson test` here, the binaries run
# directly. DS_TORCH_TIMEOUT: seconds each torch bench may run (590).
# DS_TAR_TO=FILE: DIR as one .tgz after each bench and at the end (a device
# call brings back few files, and none from a command past its limit unless
# they are already there). DS_SKIP_TESTS=1: no `meson test` and no gpu suite, only the
# named benches (for a call that has the suite's result already). Every step
# runs under a hard timeout, so that a hang costs minutes, not the whole run.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/tools/results-dir.sh"
cd "$root" || exit 1
log="$out/gpu-run.log"
# a run with the suites starts the log; a benches-only call (DS_SKIP_TESTS=1) adds to it
[ "${DS_SKIP_TESTS:-0}" = 1 ] || : >"$log"
exec > >(tee -a "$log") 2>&1

source "$root/tools/criterion-debs.sh"
export PATH="/usr/local/cuda/bin:$PATH"
# A copy of the tree without .git: set DS_COMMIT to the commit it holds.
export DS_COMMIT="${DS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"

echo "== machine"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-unset}  commit=$DS_COMMIT"
if [ "${DS_PREBUILT:-0}" != 1 ]; then
  echo "== build"
  t0=$(date +%s)
  meson setup build-gpu -Dtoolkit_root=/usr/local/cuda -Dbuildtype=release -Dtests=enabled >/tmp/ds-build.log 2>&1 &&
    ninja -C build-gpu >>/tmp/ds-build.log 2>&1 || { echo "BUILD FAILED"; tail -60 /tmp/ds-build.log; exit 1; }
  echo "built in $(( $(date +%s) - t0 )) s"
fi

echo "== dsinfo"
timeout -s KILL 60 ./build-gpu/tools/dsinfo | tee "$out/dsinfo.txt"

if [ "${DS_PREBUILT:-0}" != 1 ] && [ "${DS_SKIP_TESTS:-0}" != 1 ]; then
  echo "== tests (suites gpu, unit)"
  timeout -s KILL 600 meson test -C build-gpu --suite gpu --suite unit --print-errorlogs --no-rebuild \
    >/tmp/ds-tests.log 2>&1
  echo "meson test exit $?"; grep -E "^ *[0-9]+/[0-9]+ |^Ok:|^Fail:|^Skipped:|^Timeout:" /tmp/ds-tests.log
  grep -B3 -A25 "FAIL\|TIMEOUT" build-gpu/meson-logs/testlog.txt | head -80
fi
# The gpu suite, verbose: its per-test measurements (cr_log_info).
if [ "${DS_SKIP_TESTS:-0}" != 1 ]; then
  timeout -s KILL "${GPU_SUITE_TIMEOUT:-400}" ./build-gpu/tests/gpu/test_gpu --verbose >"$out/gpu-suite.txt" 2>&1
  echo "test_gpu --verbose exit $?"
  grep -E "^\[(FAIL|PASS|SKIP)|Synthesis|Assertion|with the RCK|gate closed|gates closed" "$out/gpu-suite.txt" | head -60
fi

# The log of a bench, named after its JSON.
log_name() {
  case "$1" in
    colocate32) echo colocate_ls32 ;;
    sweep) echo colocate_sweep ;;
    sweep-part) echo "colocate_sweep_$(tr , - <<<"${DS_SWEEP_LOADS:-}")" ;;
    persistent) echo colocate_persistent ;;
    segments-*) echo "segments_torch_${1#segments-}" ;;
    serve-torch) echo serve_torch ;;
    serve-torch-variants) echo "serve_torch_variants${DS_SERVE_TORCH_SHAPE:+_$DS_SERVE_TORCH_SHAPE}" ;;
    *) echo "$1" ;;
  esac
}

# bench/torch/serve_torch.py on this build: TIMEOUT_S, then flags after W5's
# defaults (32 requests, loads 0.2 and 0.4, 3 repetitions)
# The synthetic trace of shape $1 (`dsbench make-trace`, seed 1) that
# serve-variants and serve-torch-variants run on: written to
# $out/trace_$1.csv, whose path it prints
shape_trace() {
  python3 bench/dsbench make-trace "$1" --seed 1 --out "$out/trace_$1.csv" >&2 && echo "$out/trace_$1.csv"
}

serve_torch_py() {
  local t=$1; shift
  (cd bench/torch && DETSHARE_LIBRARY="$root/build-gpu/src/libdetshare.so" PYTHONPATH="$root/bindings/python" \
    timeout -s KILL "$t" python3 serve_torch.py --out "$out" --requests 32 --loads 0.2,0.4 --reps 3 "$@")
}

run_bench() {
  local b=$1
  echo "== bench $b"
  case "$b" in
    # overhead's gate_us_rck runs a runtime with the RCK: modules load eagerly
    # (a lazy load could wait for the resident kernel)
    overhead) CUDA_MODULE_LOADING=EAGER timeout -s KILL 300 ./build-gpu/bench/overhead/overhead --device cuda \
        --out "$out/overhead.json" | tail -24 ;;
    colocate) timeout -s KILL 300 ./build-gpu/bench/colocate/colocate --device cuda --out "$out/colocate.json" |
        tail -16 ;;
    probe) bash tools/devprobe/run.sh --out "$out" sync ;;
    memory) timeout -s KILL 300 ./build-gpu/bench/memory/memory_bench --device cuda --out "$out/memory.json" |
        tail -20 ;;
    colocate32) ./build-gpu/bench/colocate/colocate --device cuda --ls-sms 32 --out "$out/colocate_ls32.json" ;;
    determinism) ./build-gpu/bench/determinism/determinism --device cuda --out "$out/determinism.json" ;;
    pairs) ./build-gpu/bench/pairs/pairs --device cuda --out "$out/pairs.json" &&
      python3 bench/dsbench plot-results --pairs "$out/pairs.json" --outdir "$out" ;;
    sweep) ./build-gpu/bench/colocate/colocate --device cuda --sweep 0.05,0.1,0.2,0.3,0.4,0.5 \
        --out "$out/colocate_sweep.json" &&
      python3 bench/dsbench plot-results --sweep "$out/colocate_sweep.json" --outdir "$out" ;;
    # W5 sized to one device call (about 7 minutes on an H100): the defaults
    # (200 requests, loads 0.25-1.0) take longer; DS_SERVE_ARGS overrides
    # a part of the W1 sweep (DS_SWEEP_LOADS), under one fixed SLO across parts
    # (DS_SWEEP_SLO_US, the first part's ls_slo_us): `dsbench merge-sweep`
    # joins the parts into colocate_sweep.json (docs/benchmarks.md, W1)
    # (DS_SWEEP_TRACES=1: per-request traces in traces_<loads>/, for dsbench replay-sizing)
    sweep-part) timeout -s KILL 580 ./build-gpu/bench/colocate/colocate --device cuda --sweep "${DS_SWEEP_LOADS:?}" \
        ${DS_SWEEP_SLO_US:+--ls-slo-us "$DS_SWEEP_SLO_US"} --out "$out/colocate_sweep_$(tr , - <<<"$DS_SWEEP_LOADS").json" \
        ${DS_SWEEP_TRACES:+--trace-dir "$out/traces_$(tr , - <<<"$DS_SWEEP_LOADS")"} | tail -30 ;;
    serve) timeout -s KILL 570 ./build-gpu/bench/serve/serve --device cuda \
        ${DS_SERVE_ARGS:---requests 64 --reps 3 --loads 0.2,0.3,0.45 --colocate 0.2} --out "$out/serve.json" &&
      { python3 bench/dsbench plot-serve "$out/serve.json" --out "$out" --prefix serve_ ||
        echo "gpu-run: no serve plots (matplotlib missing?); run dsbench plot-serve where it is installed"; } ;;
    # the serving policies' variants side by side, one serve run each (single
    # always runs beside them as the baseline), on fixed SLOs and capacity so
    # that every run judges by the same measure: DS_SERVE_FIXED (the H100's W5
    # figures by default), DS_SERVE_TRACE, DS_SERVE_LOADS, DS_SERVE_VARIANTS
    # ("name=flags;..."). One JSON each: serve_variant_<name>.json
    # DS_SERVE_SHAPE (conversation, long-outputs, long-prompts, short): a
    # synthetic trace of that shape (`dsbench make-trace`, seed 1) instead,
    # its SLOs and capacity measured (set DS_SERVE_FIXED to fix them)
    serve-variants)
      local shape=${DS_SERVE_SHAPE:-} trace=${DS_SERVE_TRACE:-data/traces/azure_llm_2023_code.csv} tag=""
      local fixed=${DS_SERVE_FIXED:---slo-ttft-ms 134.9 --slo-tpot-ms 5.59 --capacity-rps 46.63}
      if [ -n "$shape" ]; then
        tag="${shape}_" fixed=${DS_SERVE_FIXED:-}
        trace=$(shape_trace "$shape") || return 2
      fi
      # default: the policies as shipped; tuned: the hand-picked flags the
      # must-show compares with; before: the starting tiers before decode_sms
      # and prefill_sms (about 100 s each on an H100 at two loads)
      local variants=${DS_SERVE_VARIANTS:-"default=;tuned=--ls-sms 32 --tpot-ls-sms 192 --be-window-us 20000;before=--ls-sms 64 --tpot-ls-sms 64"}
      local v
      IFS=';' read -ra vs <<<"$variants"
      for v in "${vs[@]}"; do
        echo "== variant ${v%%=*}: ${v#*=}"
        # shellcheck disable=SC2086 # the flags split into words
        # SERVE_LOG=info: the policies' tier changes on stderr, into the log
        SERVE_LOG=info timeout -s KILL 300 ./build-gpu/bench/serve/serve --device cuda $fixed \
          --trace "$trace" --loads "${DS_SERVE_LOADS:-0.2,0.45}" \
          --modes slo_aware,tpot_first --colocate 0 --requests 64 --reps 3 ${v#*=} \
          --out "$out/serve_variant_$tag${v%%=*}.json" | grep -A12 "^ *load mode"
      done ;;
    stress) CUDA_DEVICE_MAX_CONNECTIONS=32 ./build-gpu/tests/gpu/stress_gpu --out "$out/stress.json" ;;
    faults) ./build-gpu/tests/gpu/test_gpu --verbose --filter 'fault/*' >"$out/faults.txt" 2>&1; tail -5 "$out/faults.txt" ;;
    # the segments set (docs/results/<device>/segments): BE whose blocks keep
    # their SMs for 3 ms, W1 at 20% load with the SLO at 1.4x LS's p99 alone
    persistent) timeout -s KILL 300 ./build-gpu/bench/colocate/colocate --device cuda --be persistent \
        --be-block-ms 3 --sweep 0.2 --reps 3 --requests 1000 --configs priority,static@64,slo_aware \
        --ls-slo-us "${DS_PERSISTENT_SLO_US:-850}" --out "$out/colocate_persistent.json" | tail -12 ;;
    # torch (python3 with torch, torchvision, transformers): what segments cost
    # and the bitwise check, then serving from trace arrivals beside each
    # training job at 20% load (one pair per call: both pairs' graphs on every
    # pCtx do not fit in one process), and the frontier at 10-50%
    segments-resnet50|segments-bert_large)
      (cd bench/torch && DETSHARE_LIBRARY="$root/build-gpu/src/libdetshare.so" PYTHONPATH="$root/bindings/python" \
        timeout -s KILL "${DS_TORCH_TIMEOUT:-590}" python3 segments_torch.py --jobs "${b#segments-}" \
        --out "$out/segments_torch_${b#segments-}.json" | tail -12) ;;
    # BERT-Large's unsegmented graphs on every pCtx beside its segmented ones
    # and llama3's do not fit in 80 GB: its whole-step comparison is
    # segments-bert_large (alone)
    arrivals-resnet50|arrivals-bert_large)
      unseg=$([ "$b" = arrivals-resnet50 ] && echo ,slo_aware/unseg)
      (cd bench/torch && DETSHARE_LIBRARY="$root/build-gpu/src/libdetshare.so" PYTHONPATH="$root/bindings/python" \
        DS_VERDICT_LIBRARY="$root/build-gpu/bench/libdsverdict.so" timeout -s KILL "${DS_TORCH_TIMEOUT:-590}" python3 colocate_arrivals.py \
        --pairs "llama3+${b#arrivals-}" --loads 0.2 --reps 3 --seconds 8 --alone-seconds 2 --low-tiers 16,32,64 \
        --max-prompt 1024 --configs "shared,priority,static,reserve@32,slo_aware,tpot_first${unseg}" \
        --out "$out/colocate_arrivals_${b#arrivals-}_0.2.json" --log "$out/colocate_arrivals_${b#arrivals-}_0.2.log" |
        tail -14) ;;
    # W5 in PyTorch (bench/torch/serve_torch.py) with the policies' defaults,
    # sized to one device call; DS_SERVE_TORCH_ARGS adds flags (a tuned run)
    serve-torch)
      # shellcheck disable=SC2086 # the flags split into words
      serve_torch_py "${DS_TORCH_TIMEOUT:-590}" --colocate 0.2 --budget-s 540 --log "$out/serve_torch_policy.log" \
        ${DS_SERVE_TORCH_ARGS:-} | tail -30 ;;
    # serve-torch, then each variant of DS_SERVE_TORCH_VARIANTS ("name=flags;...",
    # by default the tuned flags the defaults are held against: slo_aware,
    # tpot_first beside single, alone) at the first run's capacity and SLOs,
    # within one device call (run budgets 290 s, then DS_SERVE_TORCH_BUDGET_S
    # each, 190 s; DS_SERVE_TORCH_COLOCATE=0 leaves out the first run's
    # co-located part; DS_SERVE_TORCH_ARGS adds flags to it, e.g. --log-level
    # debug): serve_torch.json and serve_torch_<name>.json, judged
    # by `dsbench serve-variants --torch DIR` (tuned), each with the
    # policies' log (*_policy.log). DS_SERVE_TORCH_SHAPE (conversation,
    # long-outputs, long-prompts, short): every run on a synthetic trace of
    # that shape (`dsbench make-trace`, seed 1), its capacity and SLOs
    # measured by the first run; the files are serve_torch_<shape>.json and
    # serve_torch_<shape>_<name>.json
    serve-torch-variants)
      local shape=${DS_SERVE_TORCH_SHAPE:-} base=serve_torch
      local -a trace=()
      if [ -n "$shape" ]; then
        base=serve_torch_$shape trace=(--trace "")
        trace[1]=$(shape_trace "$shape") || return 2
      fi
      # shellcheck disable=SC2086 # the flags split into words
      serve_torch_py 330 --name "$base" --colocate "${DS_SERVE_TORCH_COLOCATE:-0.2}" --budget-s 290 \
        --log "$out/${base}_policy.log" "${trace[@]}" ${DS_SERVE_TORCH_ARGS:-} | tail -22
      [ -f "$out/$base.json" ] || { echo "serve-torch-variants: no $base.json, so no variant run"; return 1; }
      local fixed v budget=${DS_SERVE_TORCH_BUDGET_S:-190}
      local variants=${DS_SERVE_TORCH_VARIANTS:-"tuned=--modes single,slo_aware,tpot_first --ls-sms 32 --tpot-ls-sms 192 \
--be-window-us 20000"}
      fixed=$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
print("--capacity-rps %r --slo-ttft-ms %r --slo-tpot-ms %r" % (d["capacity_rps"]["median"], d["slo"]["ttft_ms"], d["slo"]["tpot_ms"]))' \
        "$out/$base.json") || return 1
      IFS=';' read -ra vs <<<"$variants"
      for v in "${vs[@]}"; do
        echo "== variant ${v%%=*}: ${v#*=} $fixed"
        # shellcheck disable=SC2086 # the flags split into words
        serve_torch_py $((budget + 30)) --name "${base}_${v%%=*}" --colocate 0 --budget-s "$budget" \
          --log "$out/${base}_${v%%=*}_policy.log" "${trace[@]}" $fixed ${v#*=} | tail -16
      done ;;
    frontier-resnet50|frontier-bert_large)
      (cd bench/torch && DETSHARE_LIBRARY="$root/build-gpu/src/libdetshare.so" PYTHONPATH="$root/bindings/python" \
        DS_VERDICT_LIBRARY="$root/build-gpu/bench/libdsverdict.so" timeout -s KILL "${DS_TORCH_TIMEOUT:-590}" python3 colocate_arrivals.py \
        --pairs "llama3+${b#frontier-}" --loads "${DS_FRONTIER_LOADS:-0.1,0.3,0.5}" --reps 3 --seconds 4 \
        --alone-seconds 2 --low-tiers 16,32,64 --max-prompt 1024 \
        --configs shared,priority,static@64,slo_aware,tpot_first \
        --out "$out/colocate_arrivals_${b#frontier-}_$(tr , - <<<"${DS_FRONTIER_LOADS:-0.1,0.3,0.5}").json" |
        tail -20) ;;
    *) echo "unknown bench $b"; return 2 ;;
  esac
}

# DS_TAR_TO: the output folder as one tarball, so that a call cut off by
# its time limit still brings back what finished
keep_tar() { [ -z "${DS_TAR_TO:-}" ] || tar -C "$out" -czf "$DS_TAR_TO" . || echo "gpu-run: tar to $DS_TAR_TO failed"; }
for b in "$@"; do
  run_bench "$b" 2>&1 | tee "$out/$(log_name "$b").log"
  echo "exit ${PIPESTATUS[0]}"
  keep_tar
done
# No machine paths in what this run wrote: the output folder's first, then
# the tree's root.
python3 bench/dsbench strip-paths "$out" "$root" || echo "gpu-run: strip-paths failed"
keep_tar
