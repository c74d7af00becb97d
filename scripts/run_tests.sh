#!/usr/bin/env bash
# Install, build, run the whole test suite with ctest (the README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j2
