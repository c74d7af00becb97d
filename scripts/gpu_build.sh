#!/usr/bin/env bash
# Run THERE (the GPU machine of the device tool, as root): builds jacond with the CUDA back end
# and runs the tests, in one command. Usage:
#   bash scripts/gpu_build.sh [ctest -R regex]       (no regex: the whole suite)
# Needs .carry/debs from scripts/gpu_fetch.sh (carried). Unpacks them with dpkg -x into
# $JACOND_GPU_PREFIX (default /tmp/jacond-prefix), sets up what Debian's alternatives would have
# (libblas/liblapack -> OpenBLAS), links the Fashion-MNIST folder where jacond looks for it, and
# configures against Python's CUDA LibTorch (torch.utils.cmake_prefix_path; JACOND_TORCH_PREFIX
# overrides). Builds with -k 0, so a target that does not compile against that LibTorch is reported
# and every other target still builds and is tested. Writes $build/env.sh (LD_LIBRARY_PATH) for
# later commands: source it before running build-gpu/experiments/jacond. JACOND_GPU_TARGETS builds a
# subset; JACOND_GPU_TARGETS=gpu is the one scripts/gpu_measure.sh needs: the command, the two
# Python modules and every test executable that holds GPU tests (the list below).
# JACOND_GPU_BUILD_ONLY=1 builds and stops (gpu_measure.sh's item 1 runs the GPU tests). The
# session's commands, in order: docs/design.md §11.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${JACOND_GPU_PREFIX:-/tmp/jacond-prefix}
debs=${JACOND_GPU_DEBS:-$PWD/.carry/debs}
build=${JACOND_GPU_BUILD:-build-gpu}
if ! ls "$debs"/*.deb >/dev/null 2>&1; then
  echo "gpu_build: no .deb files in $debs: run scripts/gpu_fetch.sh on the development machine and carry .carry" >&2
  exit 2
fi

rm -rf "$prefix" && mkdir -p "$prefix"
for f in "$debs"/*.deb; do dpkg -x "$f" "$prefix"; done
lib=$prefix/usr/lib/x86_64-linux-gnu
for n in libblas.so.3 liblapack.so.3 libopenblas.so.0; do ln -sf "openblas-pthread/$n" "$lib/$n"; done
ln -sf libopenblas.so.0 "$lib/libopenblas.so"
ln -sf libblas.so.3 "$lib/libblas.so"
ln -sf liblapack.so.3 "$lib/liblapack.so"
export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
data=$prefix/usr/share/datasets/fashion-mnist
if [ -d "$data" ] && [ ! -e /usr/share/datasets/fashion-mnist ]; then
  mkdir -p /usr/share/datasets && ln -s "$data" /usr/share/datasets/fashion-mnist
fi

mkdir -p "$build"
# On the device tool's machine a failed step's whole log comes back too (gzipped into $OUT).
keep_log() { if [ -n "${OUT:-}" ]; then gzip -c "$build/$1" >"$OUT/gpu_build-$1.gz" || true; fi; }
torch_prefix=${JACOND_TORCH_PREFIX:-$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')}
# The versions a failed configure or link is read against: pip's CMake (4.x), the torch wheel and its
# C++ ABI (Debian's Boost and GTest are built with the new one; an old-ABI wheel cannot link them).
echo "gpu_build: prefix $prefix, LibTorch from $torch_prefix, $(nvcc --version | tail -1), $(c++ --version | head -1)"
echo "gpu_build: $(cmake --version | head -1), $(python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "cxx11 ABI", torch.compiled_with_cxx11_abi())' 2>/dev/null || echo "python3 cannot import torch")"
# The Python module against the python3 that has torch (and pip's pybind11, where installed);
# without pybind11 or the headers it is left out (JACOND_PYTHON=AUTO).
python_args=(-DPython_EXECUTABLE="$(command -v python3)")
pybind11_dir=$(python3 -c 'import pybind11; print(pybind11.get_cmake_dir())' 2>/dev/null) &&
  python_args+=(-Dpybind11_DIR="$pybind11_dir")
# No precompiled headers: with 16 cores every LibTorch source would wait for the one precompile,
# and the build stays the one check_torch2.sh compiles here (each source on its own includes).
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DJACOND_CUDA=ON -DJACOND_BUILD_BENCHMARKS=OFF \
  -DJACOND_PRECOMPILE_HEADERS=OFF \
  -DBLA_VENDOR=OpenBLAS -DCMAKE_PREFIX_PATH="$prefix/usr;$torch_prefix" -DCMAKE_LIBRARY_PATH="$lib" \
  -DCMAKE_INCLUDE_PATH="$prefix/usr/include" "${python_args[@]}" >"$build/configure.log" 2>&1 || {
  tail -40 "$build/configure.log"
  keep_log configure.log
  echo "gpu_build: configure failed ($build/configure.log)" >&2
  exit 1
}
echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >"$build/env.sh"
built=0
# JACOND_GPU_TARGETS: build only these targets (the device budget is short; tests are registered
# per built executable, so ctest then runs only theirs). Default: everything.
targets=${JACOND_GPU_TARGETS:-}
[ "$targets" = gpu ] && targets="jacond jacond_cuda_module jacond_python test_dense_cuda test_operator_device test_dist
  test_adamw test_soap test_cli test_train_cli"
target_args=()
for t in $targets; do  # a target this configuration lacks (no pybind11: no jacond_python) is skipped
  if ninja -C "$build" -t query "$t" >/dev/null 2>&1; then target_args+=("$t"); else echo "gpu_build: no target $t here, skipped"; fi
done
[ ${#target_args[@]} -gt 0 ] && target_args=(--target "${target_args[@]}")
cmake --build "$build" -j"$(nproc)" "${target_args[@]}" -- -k 0 >"$build/build.log" 2>&1 && built=1
if [ "$built" = 0 ]; then
  grep -E "^FAILED|error:" "$build/build.log" | head -40
  keep_log build.log
  echo "gpu_build: some targets failed to build ($build/build.log); testing what built" >&2
fi
if [ "${JACOND_GPU_BUILD_ONLY:-0}" = 1 ]; then  # gpu_measure.sh's item 1 runs the GPU tests itself
  echo "gpu_build: built; tests not run here (JACOND_GPU_BUILD_ONLY=1)"
  [ "$built" = 1 ] || exit 1
  exit 0
fi
cd "$build"
ctest_args=(--output-on-failure -j"$(nproc)")
if [ $# -gt 0 ]; then ctest_args+=(-R "$1"); fi
set +e
ctest "${ctest_args[@]}"
rc=$?
set -e
[ "$built" = 1 ] || exit 1
exit $rc
