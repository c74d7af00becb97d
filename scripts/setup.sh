#!/usr/bin/env bash
# Installs every Debian package jacond needs. Idempotent, non-interactive, run as root
# (or with sudo available). Safe to call repeatedly: apt-get skips what is installed.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config git ccache
  # analysis core
  libeigen3-dev libspectra-dev liblapacke-dev libopenblas-dev
  # models / CLI
  libtorch-dev libgloo-dev libboost-program-options-dev nlohmann-json3-dev zlib1g-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # fuzzing (scripts/fuzz.sh): clang with libFuzzer and its sanitizer runtimes; llvm-14 for
  # llvm-symbolizer (file:line in sanitizer reports; not pulled in without recommends)
  clang-14 libclang-rt-14-dev llvm-14
  # Python side: the PyTorch comparison route, plots, notebooks
  python3 python3-torch python3-numpy python3-scipy python3-pandas python3-matplotlib
  # notebooks executed by the tests (tests/notebooks)
  jupyter-nbconvert python3-nbformat python3-ipykernel
  # the Python module (python/): pybind11, headers, pytest, the progress bar, `pip install .` in a venv
  pybind11-dev python3-dev python3-pytest python3-tqdm python3-venv python3-setuptools python3-wheel
  # data
  dataset-fashion-mnist
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "setup: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
