#!/usr/bin/env bash
# Configures and builds jacond (Release) into ./build. Usage: scripts/build.sh [extra cmake args]
# Uses Ninja, and ccache when it is installed (scripts/setup.sh installs both).
set -euo pipefail
cd "$(dirname "$0")/.."
args=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
# ccache caches sources compiled against a precompiled header only with this sloppiness (its manual).
if command -v ccache >/dev/null; then
  args+=("-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_SLOPPINESS=pch_defines,time_macros;ccache")
fi
cmake -S . -B build "${args[@]}" "$@" >/dev/null
cmake --build build -j"$(nproc)"
