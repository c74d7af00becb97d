#!/usr/bin/env bash
# Compiles the LibTorch side of jacond (models/, experiments/, the tests) against a CUDA LibTorch
# 2.x with c10d, Gloo and NCCL, on a machine without a GPU: Debian trixie's libtorch-cuda-dev
# (2.6), libgloo-dev and libnccl-dev, downloaded from Debian's archive into a scratch folder
# (nothing is installed). Headers only: the libraries are empty stand-ins, so nothing is linked
# or run. Run it before a GPU session: the GPU machine's LibTorch is a pip wheel (2.x), and
# everything there is built from the same sources (scripts/gpu_build.sh), so an API that moved
# between LibTorch 1.13 (Debian bookworm, CI) and 2.x fails here instead of on the device. Without
# precompiled headers (JACOND_PRECOMPILE_HEADERS=OFF), as gpu_build.sh builds: each source on its
# own includes, so one that uses LibTorch without including it fails here too.
# Usage: bash scripts/check_torch2.sh [scratch dir, default /tmp/jacond-torch2]   (~15 min on 2 cores)
# A newer LibTorch: JACOND_TORCH2_SUITE=sid JACOND_TORCH2_PACKAGES="libtorch-dev libgloo-dev"
# (sid's CPU LibTorch, 2.14 on 2026-11-25: the C++20-only headers of LibTorch >= 2.13, newer than
# the GPU machine's 2.11; no NCCL there, so the NCCL sources are left out as on any CPU build).
set -euo pipefail
cd "$(dirname "$0")/.."
suite=${JACOND_TORCH2_SUITE:-trixie}
read -r -a packages <<<"${JACOND_TORCH2_PACKAGES:-libtorch-cuda-dev libgloo-dev libnccl-dev}"
scratch=${1:-/tmp/jacond-torch2}
mkdir -p "$scratch/lists/partial" "$scratch/cache" "$scratch/debs"
echo "deb http://deb.debian.org/debian $suite main contrib" >"$scratch/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$scratch/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$scratch/lists" -o "Dir::Cache=$scratch/cache")
if ! ls "$scratch/debs/${packages[0]}"_*.deb >/dev/null 2>&1; then
  apt-get "${apt_opts[@]}" update >/dev/null
  (cd "$scratch/debs" && apt-get "${apt_opts[@]}" download "${packages[@]}" 2>&1 |
    grep -v "^W: Download is performed unsandboxed" || true)
fi
torch_version=$(dpkg-deb -f "$(ls "$scratch/debs/${packages[0]}"_*.deb | head -1)" Version)
root=$scratch/root
rm -rf "$root" && mkdir -p "$root"
for f in "$scratch"/debs/*.deb; do dpkg -x "$f" "$root"; done
# Empty stand-ins for the shared libraries the -dev packages' links and CMake configs name.
lib=$root/usr/lib/x86_64-linux-gnu
while IFS= read -r link; do
  target=$(dirname "$link")/$(readlink "$link")
  [ -e "$target" ] || : >"$target"
done < <(find "$root/usr/lib" -type l)
for f in $(grep -ho '${_IMPORT_PREFIX}/[^"]*\.so[.0-9]*' "$lib"/cmake/Caffe2/Caffe2Targets-*.cmake | sort -u); do
  p=$root/usr/lib/${f#\$\{_IMPORT_PREFIX\}/}
  [ -e "$p" ] || : >"$p"
done

build=$scratch/build
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DJACOND_CUDA=ON -DJACOND_PYTHON=OFF \
  -DJACOND_BUILD_BENCHMARKS=OFF -DJACOND_PRECOMPILE_HEADERS=OFF -DTorch_DIR="$lib/cmake/Torch" -DCMAKE_PREFIX_PATH="$root/usr" \
  >"$build.configure.log" 2>&1 || { tail -30 "$build.configure.log"; echo "check_torch2: configure failed" >&2; exit 1; }
grep "jacond: data parallel" "$build.configure.log" || true
# Every object of models/, experiments/ and tests/ (the analysis core has no LibTorch).
mapfile -t objects < <(cd "$build" && ninja -t targets all | grep -oE '^[^:]+\.cpp\.o' | grep -v '^analysis/')
status=0
(cd "$build" && ninja -k 0 "${objects[@]}") >"$build.log" 2>&1 || status=1
if [ $status -ne 0 ]; then
  grep -E "^FAILED|error:" "$build.log" | head -40
  echo "check_torch2: some sources do not compile against $suite's ${packages[0]} $torch_version ($build.log)" >&2
  exit 1
fi
echo "check_torch2: ${#objects[@]} objects compile against Debian $suite's ${packages[0]} $torch_version"
