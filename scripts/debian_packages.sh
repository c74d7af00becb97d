# The Debian packages jacond needs, by concern; sourced by scripts/setup.sh (installs them here)
# and scripts/check_trixie.sh (installs them into a Debian trixie chroot). Names that differ
# between releases stay out of PACKAGES: FUZZ_PACKAGES are bookworm's versioned clang/llvm.
# shellcheck disable=SC2034  # read by the scripts that source this file
PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config git ccache
  # analysis core
  libeigen3-dev libspectra-dev liblapacke-dev libopenblas-dev
  # models / CLI
  libtorch-dev libgloo-dev libboost-program-options-dev nlohmann-json3-dev zlib1g-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # Python side: the PyTorch comparison route, plots, notebooks
  python3 python3-torch python3-numpy python3-scipy python3-pandas python3-matplotlib
  # notebooks executed by the tests (tests/notebooks)
  jupyter-nbconvert python3-nbformat python3-ipykernel
  # the Python module (python/): pybind11, headers, pytest, the progress bar, `pip install .` in a venv
  pybind11-dev python3-dev python3-pytest python3-tqdm python3-venv python3-setuptools python3-wheel
  # data
  dataset-fashion-mnist
)
# fuzzing (scripts/fuzz.sh): clang with libFuzzer and its sanitizer runtimes; llvm-14 for
# llvm-symbolizer (file:line in sanitizer reports; not pulled in without recommends)
FUZZ_PACKAGES=(clang-14 libclang-rt-14-dev llvm-14)
