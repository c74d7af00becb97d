#!/usr/bin/env bash
# Install, build, run the whole test suite with ctest (the README's test command).
#
# Fuzzing first (scripts/fuzz.sh: the file parsers under libFuzzer + ASan/UBSan, SECONDS per
# target) when CI=true (60 s) or JACOND_FUZZ_SECONDS is set (0 skips it, also on CI). It runs
# before the main build so that the ctest summary stays the last thing printed; a finding stops
# here (exit 1) with the crashing input's path as the last output.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
fuzz_seconds="${JACOND_FUZZ_SECONDS:-}"
if [ -z "$fuzz_seconds" ] && [ "${CI:-}" = "true" ]; then fuzz_seconds=60; fi
if [ -n "$fuzz_seconds" ] && [ "$fuzz_seconds" != "0" ]; then
  bash scripts/fuzz.sh "$fuzz_seconds"
fi
bash scripts/build.sh
cd build
ctest --output-on-failure -j2
