#!/usr/bin/env bash
# Run THERE (the GPU machine), after scripts/gpu_build.sh in the same `run` call: the GPU
# measurements of issue 11, into ${OUT:-results/gpu} (the device tool returns $OUT; at most 8
# files come back, so everything printed goes to one log, gpu_measure.log):
#   1. the GPU tests (test_dense_cuda, the CLI's --device cuda test, the trainer's multi-tensor
#      AdamW: AdamWCuda.*, grouped SOAP: SoapCuda.*, issue 14's NCCL group on one rank:
#      NcclRankGroup.*; the Python module's
#      device="cuda" test where the module was built), under JACOND_EXPECT_GPU=1; the item fails
#      if any of them other than no_gpu_tests did not run (skipped);
#   2. bench dense at nd 6400: the GPU's exact and mixed routes against the CPU's exact route on 16
#      and 2 threads, the exact route's σ_min sweep by getrs, trsv and trtri (JACOND_CUDA_LU_SOLVES,
#      design §10) (bench-dense-t16/, bench-dense-t2/: bench_dense.csv, run.json);
#   3. ViT-S: exact kappa of the bare attention Jacobian K_sa (n 197, d 384, 6 heads; nd 75 648,
#      45.8 GB) on the GPU, timed (vit-s/: results.csv, run.json); then the same under `ours`
#      (vit-s-ours/), the σ_min issue's open case;
#   4. training images/s on CUDA, jacond against Python PyTorch on the same GPU, same model and
#      batch (bench-train/: bench_train.csv, run.json); and one tracking call on the GPU against
#      the host's 16 threads at run_main's model (bench-train-tracking/run.json "tracking");
#   5. on a GPU with >= 70 GB (an H100 or H200): ViT-B's K_sa under `ours` (n 197, d 768, 12 heads;
#      nd 151 296) exactly in fp64 by the Schur route: its diagonal pieces' Schur complements
#      assembled and factorised on the device (two pieces, 91.6 GB, on an H200; three, 61 GB, on an
#      H100), the off-diagonal blocks matrix-free (analysis/spectral/schur_lu.h), timed (vit-b/).
#      (Until 2026-11-27: the mixed route, whose fp32 LU did not precondition it;
#      reports/gpu/measured/2026-11-27-h200.)
#   6. matrix-free: `jacond bench lanczos --device cuda` at ViT-B (`timm` K_sab with its skip, to
#      1 %): the lanczos route with its products and GKL basis on the GPU
#      (models/device/torch_operator_device.h) against the host's 16 threads in the same run,
#      each route's seconds split into products and the rest (design §10); and
#      `jacond block … --device cuda` at ViT-B timed end to end (lanczos-vit-b-*/);
#   7. inertia certificates (issue 11, item 2): `ours` K_sa at nd 6400 (H_μ of order 12 800)
#      certified with its LDLᵀ on the GPU (cusolverDnDsytrf) and on the host's 16 threads
#      (dsytrf_rk), each timed, same κ bracket expected (certify-*/);
#   8. the skipless rows at ViT-S: `ours` K_ffn without skips, full space and ln-complement (the
#      device's own restriction, basis on the GPU), 15 s each, on the GPU and on the host's 16
#      threads, timed end to end (skipless-*/);
#   9. the hard matrix-free case: `ours` K_sa at ViT-S, 30 s a route, GPU against the host's 16
#      threads (lanczos-vit-s-ours/): how far each gets in the same time.
# Here, afterwards: `jacond recipe gpu` renders the logs and folders into reports/gpu (design §11).
# At most 8 files come back from $OUT: the log, and every result folder in one results.tar.gz,
# packed again after each item (a call past its limit returns the items it finished; the log
# says each item's seconds, for planning the next session's calls).
# JACOND_GPU_ITEMS picks items (default "1 2 3 4 5 6 7 8 9"): the device budget (15 minutes a
# session, build included) may not hold them all, nor one call's 10 minutes. Items finished are
# remembered on the machine (below), so the same command in the next call on the warm machine
# goes on where the last one stopped (another $OUT: a call returns only its own files).
# They run in the order 1 2 3 4 6 5 7 8 9: item 6 (seconds) before item 5 (the longest), so the
# issue's four measurements come first. Each item has a cap in seconds (caps below;
# JACOND_GPU_CAP_<n> changes one): an item that reaches it is stopped, logged as such and marked
# done, so one slow or hung item cannot spend every later call of the session on itself.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${JACOND_GPU_BUILD:-build-gpu}
final=${OUT:-results/gpu}
items=" ${JACOND_GPU_ITEMS:-1 2 3 4 5 6 7 8 9} "
out=$(mktemp -d)
mkdir -p "$final"
if [ ! -x "$build/experiments/jacond" ] || [ ! -f "$build/env.sh" ]; then
  # A fresh machine (the last call's went back) has no build: nothing may be marked done.
  echo "gpu_measure: no $build/experiments/jacond or env.sh: run scripts/gpu_build.sh first, in this call" |
    tee "$final/gpu_measure.log" >&2
  exit 3
fi
# shellcheck disable=SC1090
source "$build/env.sh"
J=$build/experiments/jacond
want() { [[ "$items" == *" $1 "* ]]; }
# Every jacond command goes through jc, which logs it as run ("$ jacond ARGS", --out included):
# jacond recipe gpu lists these lines under the numbers they made. Line-buffered, so a command
# stopped at a cap has still logged how far it got.
# (JACOND_GPU_LINE_BUFFER=0 leaves it out: stdbuf preloads a library, which an ASan build refuses.)
line_buffered=""
if [ "${JACOND_GPU_LINE_BUFFER:-1}" = 1 ] && command -v stdbuf >/dev/null 2>&1; then line_buffered="stdbuf -oL -eL"; fi
export line_buffered
# shellcheck disable=SC2086
jc() { echo "\$ jacond $*"; $line_buffered "$J" "$@"; }
export -f jc

# Which copy of each shared library the failing processes load: the first H200 run's test
# processes died outside the code under test, and a mix of the carried Debian libraries
# (LD_LIBRARY_PATH) with the wheel's is the suspect. ldd of the test executable, jacond and the
# Python module; then every library stem one Python process (torch, numpy, pandas, jacond) maps
# from more than one file.
library_mix() {
  local f
  for f in "$build/tests/test_cli" "$J" "$build"/python/jacond/_jacond*.so; do
    [ -e "$f" ] || continue
    echo "--- ldd $f (BLAS/LAPACK, OpenMP, C++/Fortran runtimes, torch, CUDA)"
    ldd "$f" 2>&1 | grep -E "blas|lapack|gomp|omp|stdc\+\+|gfortran|quadmath|torch|c10|cudart|cublas|cusolver|nccl" || true
  done
  JACOND_PY=$build/python python3 - <<'PY' || true
import collections, os, re, sys
for name in ("torch", "numpy", "pandas"):
    try:
        __import__(name)
    except Exception as e:  # noqa: BLE001 (a diagnostic: say what did not load, go on)
        print(f"--- import {name}: {e}")
if os.path.isdir(os.path.join(os.environ["JACOND_PY"], "jacond")):
    sys.path.insert(0, os.environ["JACOND_PY"])
    try:
        import jacond  # noqa: F401
    except Exception as e:  # noqa: BLE001
        print(f"--- import jacond: {e}")
paths = collections.defaultdict(set)
with open("/proc/self/maps") as maps:
    for line in maps:
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        if ".so" in path:
            stem = re.sub(r"-[0-9a-f]{8}$", "", os.path.basename(path).split(".so")[0])
            paths[stem].add(path)
twice = {stem: sorted(p) for stem, p in paths.items() if len(p) > 1}
print(f"--- one Python process maps {len(paths)} libraries; from more than one file: {twice or 'none'}")
PY
}
# One more control for those deaths (the first H200 run's test_cli and test_train_cli died at a
# fixture's teardown, after their bodies passed): a CliFixture test whose jacond child computes on
# the CPU only (a block at n 8: BLAS, the fixture's folder), in the environment of the failing
# tests (env.sh's LD_LIBRARY_PATH, JACOND_EXPECT_GPU=1), run as ctest runs it, from
# $build/tests. Its exit status is logged raw (139: SIGSEGV; ctest would say 8 for any failure):
# dying too, it puts the deaths on this machine's fixture teardown; passing, on a GPU child run
# before it in the same executable.
cpu_child_control() {
  local control=CliTest.BlockFromInitWritesTidyResults_n8_d16_h2 exe=$build/tests/test_cli control_rc
  if [ ! -x "$exe" ]; then
    echo "control $control: $exe was not built"
    return 0
  fi
  exe=$(realpath "$exe")
  (cd "$build/tests" && JACOND_EXPECT_GPU=1 "$exe" --gtest_filter="$control")
  control_rc=$?
  echo "control $control (a CliFixture test whose jacond child runs on the CPU only): exit status $control_rc"
}
export -f cpu_child_control

# Every helper an item calls is exported with it: an item runs in a child shell (bash -c in run_item),
# which sees only exported functions; library_mix was not, and item 1's diagnosis said "command not
# found" (tests/scripts/test_gpu_measure.sh checks the log for its output).
export -f library_mix

# The GPU tests that run only where there is no GPU (each checks the no-GPU path), so skip on this
# machine by design; any other test of item 1 that did not run fails the item (and jacond recipe gpu,
# experiments/recipes/jacond_recipes/gpu.py NO_GPU_TESTS, counts it): a test skipped here measured
# nothing, and ctest counts a skip as passed.
no_gpu_tests="DenseCuda.NoDeviceIsACudaErrorNamingTheCall OperatorDeviceCuda.WithoutAGpuTheHostRunsTheProductsAndSaysWhy"
export no_gpu_tests

# Each item returns the exit code of its last failing command (0 when all succeeded).
# JACOND_EXPECT_GPU=1: a test that finds no usable GPU fails, naming why, instead of skipping
# (REQUIRE_DEVICE in tests/analysis/cuda/test_dense_cuda.cpp, REQUIRE_CUDA in
# tests/models/test_operator_device.cpp, JACOND_REQUIRE_GPU in tests/support/expect_gpu.h for
# AdamWCuda, SoapCuda and NcclRankGroup): a driver the CUDA runtime refuses would skip them all.
item1_tests() {
  local rc=0 ctest_rc py_rc tests_log skipped
  local gpu_tests="DenseCuda|DeviceCuda|AdamWCuda|SoapCuda|NcclRankGroup"
  tests_log=$(mktemp)
  echo "\$ ctest -R \"$gpu_tests\""  # for jacond recipe gpu: which tests this log's summary counts
  (cd "$build" && JACOND_EXPECT_GPU=1 ctest -j4 -R "$gpu_tests" --output-on-failure) 2>&1 | tee "$tests_log"
  ctest_rc=${PIPESTATUS[0]}
  [ "$ctest_rc" = 0 ] || rc=$ctest_rc
  # Failures again, one at a time: does a failure need its neighbours? (The first H200 run's four
  # segmentation faults were the four tests started together.) A death prints native frames now.
  # Controls: a test of each CLI test executable that touches no GPU (does the executable die at
  # its exit on this machine whatever it runs?).
  if [ "$ctest_rc" != 0 ]; then
    (cd "$build" && JACOND_EXPECT_GPU=1 ctest -j1 --rerun-failed --output-on-failure) || true
    (cd "$build" && ctest -j1 -R "^CliTest.TopLevelHelp$|^TrainCli.NegativeOrNonFiniteOptimizerValuesAreUsageErrors$" \
      --output-on-failure) || true
    cpu_child_control
    library_mix
  fi
  # ctest's list of the tests that did not run (a tab, then " 24 - Name (Skipped)"), less no_gpu_tests.
  skipped=$(sed -nE 's/^[[:space:]]*[0-9]+ - ([^ ]+) \(Skipped\)$/\1/p' "$tests_log" |
    grep -vxF -f <(tr ' ' '\n' <<<"$no_gpu_tests") || true)
  rm -f "$tests_log"
  if [ -n "$skipped" ]; then
    echo "GPU tests that did not run on this GPU machine ($(wc -l <<<"$skipped")): $(paste -sd ' ' <<<"$skipped")"
    [ "$rc" != 0 ] || rc=1
  fi
  if [ -d "$build/python/jacond" ]; then  # the Python module's device="cuda" against its CPU route
    tests_log=$(mktemp)
    PYTHONPATH=$build/python JACOND_BIN=$J JACOND_EXPECT_GPU=1 python3 -m pytest -q -p no:cacheprovider python/tests \
      -k device_cuda 2>&1 | tee "$tests_log"
    py_rc=${PIPESTATUS[0]}
    [ "$py_rc" = 0 ] || rc=$py_rc
    if grep -qE '(^|[ ,])[0-9]+ skipped' "$tests_log"; then
      echo "GPU tests that did not run on this GPU machine: the Python module's device test skipped"
      [ "$rc" != 0 ] || rc=1
    fi
    rm -f "$tests_log"
  else
    echo "the Python module was not built here (no pybind11 or Python headers): device='cuda' from Python not run"
  fi
  return "$rc"
}

item2_bench_dense() {
  local rc=0 t
  for t in 16 2; do
    jc bench dense --sizes 6400 --device cuda --skip-python --skip-full --threads "$t" --repeat 3 \
      --out "$out/bench-dense-t$t" || rc=$?
    rm -rf "$out/bench-dense-t$t/size-6400"  # the weights and tokens it wrote: inputs, not results
  done
  return "$rc"
}

item3_vit_s_exact() {
  time jc block --init timm --n 197 --d 384 --heads 6 --matrices K_sa --method dense --device cuda --threads 16 \
    --out "$out/vit-s" || return
  # The σ_min issue's open case: `ours` K_sa at ViT-S, whose bottom no Krylov method here reached
  # (item 9; README "Findings: which σ_min solver"), exact by the same route.
  time jc block --init ours --n 197 --d 384 --heads 6 --matrices K_sa --method dense --device cuda --threads 16 \
    --out "$out/vit-s-ours"
}

item4_bench_train() {
  local rc=0
  jc bench train --device cuda --threads 16 --batch 128 --steps 50 --warmup 5 --track-every 0 \
    --python "$(command -v python3)" --out "$out/bench-train" || rc=$?
  # Tracking where a cuda run tracks (the GPU) against --track-device cpu (the host's 16 threads),
  # at scripts/run_main.sh's model (skipless, ours, d 64, depth 4, n 50: N 3 200), one call each
  # (design §10: is the GPU faster at a tracked block's size?).
  jc bench train --device cuda --threads 16 --dim 64 --depth 4 --heads 4 --skip none --init ours --batch 128 \
    --steps 20 --warmup 2 --track-every 100 --track-matrices K_sa,K_sab,K_ffn --tg none --skip-python \
    --out "$out/bench-train-tracking" || rc=$?
  return "$rc"
}

item5_vit_b_exact() {
  local mem_mib
  mem_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  if [ "${mem_mib:-0}" -lt 70000 ]; then
    echo "ViT-B's Schur route needs >= 70 GB of device memory (three pieces: 61 GB): skipped on ${mem_mib} MiB"
    return 0
  fi
  time jc block --init ours --n 197 --d 768 --heads 12 --matrices K_sa --method dense --device cuda \
    --threads 16 --out "$out/vit-b"
}

item6_lanczos() {
  local rc=0
  # The bench runs each route on the host's 16 threads and again on the GPU (products and basis),
  # in the same process, and splits each route's seconds into products and the rest (design §10).
  jc bench lanczos --sizes vit-b --inits timm --matrices K_sab --tol 0.01 --seconds 60 --peers none --device cuda \
    --threads 16 --out "$out/lanczos-vit-b-timm" || rc=$?
  # The user's command end to end (process start, weights, forward pass, report), for the < 5 s target.
  time jc block --init timm --skip full --n 197 --d 768 --heads 12 --matrices K_sab --method lanczos --lanczos-tol 0.01 \
    --device cuda --threads 16 --out "$out/lanczos-vit-b-timm-block" || rc=$?
  return "$rc"
}

item9_lanczos_hard() {
  jc bench lanczos --sizes vit-s --inits ours --matrices K_sa --seconds 30 --peers none --device cuda --threads 16 \
    --out "$out/lanczos-vit-s-ours"
}

item7_certify() {
  local rc=0 dev
  for dev in cuda cpu; do
    time jc block --init ours --n 100 --d 64 --heads 4 --matrices K_sa --method dense --certify inertia --device "$dev" \
      --threads 16 --out "$out/certify-$dev" || rc=$?
    cat "$out/certify-$dev/results.csv" 2>/dev/null
  done
  return "$rc"
}

item8_skipless() {
  local rc=0 dev
  for dev in cuda cpu; do
    time jc block --init ours --skip none --n 197 --d 384 --heads 6 --matrices K_ffn --method lanczos --lanczos-seconds 15 \
      --device "$dev" --threads 16 --out "$out/skipless-$dev" || rc=$?
    cat "$out/skipless-$dev/results.csv" 2>/dev/null
  done
  return "$rc"
}

# One item, timed; the results so far are packed after each, so a call that runs past its limit
# still returns the finished items (the log is written as it goes).
# A finished item is marked in $build/gpu-measure-done/ (the warm machine keeps build-gpu/), so
# the same command run again, after a call stopped at its limit, goes on with the items left;
# JACOND_GPU_REDO=1 runs them all again.
done_dir=$build/gpu-measure-done
[ "${JACOND_GPU_REDO:-0}" = 1 ] && rm -rf "$done_dir"
mkdir -p "$done_dir"
# Caps, in seconds: generous against what each should take on an H100/H200 (design §11), so a cap
# reached is itself the finding (item 3's target is 2 minutes, item 6's 5 s).
declare -A caps=([1]=360 [2]=240 [3]=300 [4]=240 [5]=540 [6]=240 [7]=180 [8]=180 [9]=150)
# The call's end, so that no item is cut by the call's limit unawares: JACOND_GPU_DEADLINE (epoch
# seconds; call 1 sets it before the build), else 590 s from now. An item starts only with at least
# its need left (JACOND_GPU_NEED_<n>, default 45 s; item 5: 180 s, an estimate, not a measurement:
# 5/12 N³ = 1.4e15 fp64 flop in two pieces (10/27 N³ in three), under a minute at 50 TFLOP/s, then
# about fifty refined solves, each reading the pieces' 61–92 GB a few times), and runs at most until the call's end less
# JACOND_GPU_MARGIN (40 s: a cut item's 15 s to die after SIGTERM, its group's exit, packing); an item cut
# there is not marked done.
deadline=${JACOND_GPU_DEADLINE:-$(($(date +%s) + 590))}
margin=${JACOND_GPU_MARGIN:-40}
declare -A needs=([5]=180)
export J out build
pack() { tar czf "$final/results.tar.gz.tmp" -C "$out" . && mv "$final/results.tar.gz.tmp" "$final/results.tar.gz"; }
run_item() {
  local n=$1 fn=$2 t0 cap_var cap need_var need left limit rc tpid
  want "$n" || return 0
  if [ -e "$done_dir/$n" ]; then
    echo "=== item $n ($fn): done by an earlier call, whose files came back then (JACOND_GPU_REDO=1 reruns)"
    return 0
  fi
  cap_var=JACOND_GPU_CAP_$n need_var=JACOND_GPU_NEED_$n
  cap=${!cap_var:-${caps[$n]}}
  need=${!need_var:-${needs[$n]:-45}}
  left=$((deadline - $(date +%s) - margin))
  if [ "$left" -lt "$need" ]; then
    echo "=== item $n ($fn): left for the next call (it needs $need s, this call has $left s)"
    return 0
  fi
  limit=$((cap < left ? cap : left))
  t0=$(date +%s)
  echo "=== item $n ($fn), cap $cap s, this call's time left $left s"
  # timeout signals its whole process group (it leads one): the jacond, ctest or python3 the item
  # started too. It returns when its child does; the loop then waits for the rest of the group
  # (a jacond still freeing tens of GB of device memory) before the next item starts.
  export -f "$fn"
  timeout --kill-after=15 "$limit" bash -c "$fn" &
  tpid=$!
  wait "$tpid"
  rc=$?
  for _ in $(seq 20); do kill -0 -- "-$tpid" 2>/dev/null || break; sleep 1; done
  if { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && [ "$limit" -lt "$cap" ]; then
    echo "=== item $n cut at this call's end after $(($(date +%s) - t0)) s: not marked done, the next call runs it again"
    pack
    return 0
  fi
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "=== item $n STOPPED at its cap of $cap s (rc $rc; $cap_var raises it); marked done so the next call goes on"
  fi
  echo "=== item $n took $(($(date +%s) - t0)) s (rc $rc)"
  pack
  if [ "$rc" -eq 126 ] || [ "$rc" -eq 127 ]; then
    echo "=== item $n could not start a command (rc $rc): not marked done"
    return 0
  fi
  touch "$done_dir/$n"
}

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  echo "items:$items"
  run_item 1 item1_tests
  run_item 2 item2_bench_dense
  run_item 3 item3_vit_s_exact
  run_item 4 item4_bench_train
  run_item 6 item6_lanczos
  run_item 5 item5_vit_b_exact
  run_item 7 item7_certify
  run_item 8 item8_skipless
  run_item 9 item9_lanczos_hard
  true
} 2>&1 | tee "$final/gpu_measure.log"
[ -f "$final/results.tar.gz" ] || pack
echo "gpu_measure: results in $final/results.tar.gz ($(tar tzf "$final/results.tar.gz" | grep -c '[^/]$') files)"
