#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer:
#   scripts/sanitize.sh [ctest args]
# Builds ./build-asan (gcc, RelWithDebInfo, -DJACOND_SANITIZE=address,undefined: every target,
# UBSan findings fatal) and runs ctest there. Not part of CI: the build and the suite under
# ASan take far longer than CI's budget; run it
# by hand after touching memory-handling code (2026-11-26: the whole suite, 576 tests, clean;
# the build took about 40 minutes beside other work, ctest 950 s, on 2 cores). The fuzz
# targets are scripts/fuzz.sh.
#
# LibTorch is not instrumented. What it does that the sanitizers would report without being a
# jacond bug is handled here, each with its reason:
#   * LeakSanitizer: tests/sanitizers/lsan.supp (documented there).
#   * The Python module in the unsanitized python3 (python.pytest, the notebooks): their ctest
#     environment preloads the ASan runtime and libstdc++ and turns leak checks off for those
#     processes (tests/CMakeLists.txt, JACOND_PYTHON_SANITIZER_ENV).
# The options are exported before the build because gtest_discover_tests runs every test binary
# at build time (--gtest_list_tests), under the same sanitizers.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-asan
# JACOND_CUDA=OFF: the CUDA runtime maps its own memory and does not run under AddressSanitizer's
# defaults, and without a GPU its tests skip anyway.
args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DJACOND_SANITIZE=address,undefined -DJACOND_CUDA=OFF)
# ccache caches sources compiled against a precompiled header only with this sloppiness (its manual).
if command -v ccache >/dev/null; then
  args+=("-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_SLOPPINESS=pch_defines,time_macros;ccache")
fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

t0=$(date +%s)
cmake -S . -B "$build" "${args[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)"
t1=$(date +%s)
echo "sanitize: built $build in $((t1 - t0)) s"
cd "$build"
rc=0
ctest --output-on-failure -j2 "$@" || rc=$?
echo "sanitize: ctest took $(( $(date +%s) - t1 )) s"
exit "$rc"
