#!/usr/bin/env bash
# Fuzzes the three file parsers: scripts/fuzz.sh [SECONDS]   (default 60 s per target)
#
# Builds the libFuzzer targets of tests/fuzz (safetensors, IDX, checkpoint meta.json) with
# clang++-14 and AddressSanitizer + UndefinedBehaviorSanitizer into ./build-fuzz (only those
# targets and the parser sources they need: not jacond_models, not the tests), then runs them side
# by side (one per core), each for SECONDS over a scratch copy of its seed corpus
# tests/fuzz/corpus/<target>/ (new inputs go to build-fuzz/corpus/, never into the repository).
# SECONDS=0 runs each seed once (a quick regression check). Exits 1 on any finding (crash,
# sanitizer report, unexpected exception, broken invariant, timeout, out-of-memory, leak),
# printing the report and the saved input's path; reproduce with:
#   build-fuzz/tests/fuzz/<target> <input>
# scripts/run_tests.sh runs this before the main suite when CI=true or JACOND_FUZZ_SECONDS is set.
#
# The sanitizer build of the whole suite is separate, too slow for CI: scripts/sanitize.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-60}"
if ! [[ "$secs" =~ ^[0-9]+$ ]]; then
  echo "fuzz: SECONDS must be a non-negative integer, got '$secs'" >&2
  exit 2
fi
targets=(fuzz_safetensors fuzz_idx fuzz_checkpoint_meta)
build=build-fuzz
cxx="${JACOND_FUZZ_CXX:-clang++-14}"
command -v "$cxx" >/dev/null || { echo "fuzz: $cxx not found (scripts/setup.sh installs clang-14)" >&2; exit 2; }

t0=$(date +%s)
# -O1 -gline-tables-only: libFuzzer's recommended trade-off (fast enough to run, quick to build,
# file:line in reports). ccache when present: a rebuild after a small change takes seconds.
args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only"
      -DCMAKE_CXX_COMPILER="$cxx" -DJACOND_BUILD_FUZZERS=ON -DJACOND_SANITIZE=address,undefined
      -DJACOND_BUILD_TESTS=OFF -DJACOND_BUILD_BENCHMARKS=OFF -DJACOND_CUDA=OFF)
if command -v ccache >/dev/null; then args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$build" "${args[@]}" >"$build.configure.log" 2>&1 || { cat "$build.configure.log" >&2; exit 2; }
rm -f "$build.configure.log"
cmake --build "$build" -j"$(nproc)" --target jacond_fuzzers
t1=$(date +%s)
echo "fuzz: built ${#targets[@]} targets in $((t1 - t0)) s"

symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer
if [ -x "$symbolizer" ]; then export ASAN_SYMBOLIZER_PATH="$symbolizer"; fi
# LibTorch is not instrumented: tests/sanitizers/lsan.supp is where what it leaks on purpose would be
# named (it has no entry today).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# One target for SECONDS; its summary (and any finding's report) goes to $build/logs/<target>.summary,
# printed in the targets' order once all have run. Exit status: 1 on a finding.
fuzz_one() {
  local t=$1 corpus="$build/corpus/$1" findings="$build/findings/$1" log="$build/logs/$1.log"
  local summary="$build/logs/$1.summary" rc=0 s0 s1 runs found f
  rm -rf "$corpus" "$findings"
  mkdir -p "$corpus" "$findings" "$(dirname "$log")"
  cp tests/fuzz/corpus/"$t"/* "$corpus"/
  local flags=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 -max_len=4096 -print_final_stats=1
               -artifact_prefix="$findings/")
  if [ -f "tests/fuzz/$t.dict" ]; then flags+=(-dict="tests/fuzz/$t.dict"); fi
  if [ "$secs" -gt 0 ]; then flags+=(-max_total_time="$secs"); else flags+=(-runs=0); fi
  s0=$(date +%s)
  "$build/tests/fuzz/$t" "${flags[@]}" "$corpus" >"$log" 2>&1 || rc=$?
  s1=$(date +%s)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  found=$(find "$findings" -type f | head -5)
  if [ "$rc" -eq 0 ] && [ -z "$found" ]; then
    echo "fuzz: $t: ${runs:-?} executions in $((s1 - s0)) s, no findings" >"$summary"
    return 0
  fi
  {
    echo "fuzz: $t: FINDING (exit $rc) after $((s1 - s0)) s; report:"
    # The report: from the first line of a sanitizer, libFuzzer or fuzz_check.h error on.
    awk '/^==[0-9]+==|^terminate called|runtime error:|^fuzz: |ERROR: libFuzzer|^INFO: libFuzzer: timeout/ {on=1} on' \
      "$log" | grep -v -E '^\s*NEW_FUNC' | head -n 80 | cut -c1-300 | sed 's/^/  | /'
    for f in $found; do
      echo "fuzz: $t: crashing input: $f   (reproduce: $build/tests/fuzz/$t $f)"
    done
    [ -n "$found" ] || echo "fuzz: $t: no input saved; full log: $log"
  } >"$summary"
  return 1
}

# The targets side by side, one per core (each keeps its SECONDS: same fuzzing, less wall time);
# the verdict is read from the summaries (a target that left none failed).
for t in "${targets[@]}"; do
  rm -f "$build/logs/$t.summary"
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n || true; done
  fuzz_one "$t" &
done
wait
status=0
for t in "${targets[@]}"; do
  summary="$build/logs/$t.summary"
  if [ ! -s "$summary" ]; then echo "fuzz: $t: no summary written (the runner itself failed)"; status=1; continue; fi
  cat "$summary"
  if grep -q "FINDING" "$summary"; then status=1; fi
done
echo "fuzz: total $(( $(date +%s) - t0 )) s (build $((t1 - t0)) s)"
exit "$status"
