#!/usr/bin/env bash
# Run HERE (a development machine with Debian's archive), before a GPU session's first `run`:
# downloads the Debian packages jacond's build needs that the GPU machine lacks (it has nvcc,
# CMake, ninja, g++ and Python's CUDA torch, but no -dev packages and no network) into
# .carry/debs (git-ignored). Name `.carry` in the device tool's `carry`; scripts/gpu_build.sh
# unpacks them there with dpkg -x into a prefix (docs/design.md §11). About 55 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES=(
  # analysis core: headers (Eigen, Spectra), LAPACKE and OpenBLAS with its Fortran runtime
  libeigen3-dev libspectra-dev liblapacke-dev liblapacke libtmglib3 libopenblas0-pthread libgfortran5 libquadmath0
  # command line, results, tests
  libboost1.74-dev libboost-program-options1.74-dev libboost-program-options1.74.0 nlohmann-json3-dev zlib1g-dev
  libgtest-dev libgmock-dev
  # the trainer's and audit's data (optional: JACOND_GPU_NO_DATA=1 leaves it out, 31 MB)
  dataset-fashion-mnist
)
if [ "${JACOND_GPU_NO_DATA:-0}" = 1 ]; then unset 'PACKAGES[-1]'; fi
mkdir -p .carry/debs
cd .carry/debs
rm -f ./*.deb
apt-get download "${PACKAGES[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true
n=$(find . -maxdepth 1 -name '*.deb' | wc -l)
if [ "$n" -ne "${#PACKAGES[@]}" ]; then
  echo "gpu_fetch: got $n of ${#PACKAGES[@]} packages (run 'apt-get update' first?)" >&2
  exit 1
fi
echo "gpu_fetch: $n packages, $(du -sh . | cut -f1) in .carry/debs; carry '.carry' to the GPU machine"
# The device tool sends at most 64 MiB: the tracked files, untracked ones git does not ignore, and
# the carried .carry. Said here, where there is time to act, not in the refused call.
cd ../..
sent=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 -r du -cb 2>/dev/null | tail -1 | cut -f1)
carried=$(du -sb .carry | cut -f1)
total_mib=$(( (sent + carried) / 1048576 ))
echo "gpu_fetch: a call sends about $total_mib MiB (tree $((sent / 1048576)) MiB + .carry $((carried / 1048576)) MiB; the limit is 64)"
if [ "$total_mib" -ge 63 ]; then
  echo "gpu_fetch: too close to the device tool's 64 MiB: JACOND_GPU_NO_DATA=1 leaves out Fashion-MNIST (31 MB)" >&2
  exit 1
fi
