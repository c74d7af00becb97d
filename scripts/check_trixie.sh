#!/usr/bin/env bash
# Builds jacond and runs its whole test suite in a Debian trixie chroot: LibTorch 2.6 (CPU, c10d +
# Gloo, built without libuv), GCC 14, CMake 3.31, Python 3.13 with torch 2.6 and NumPy 2. CI runs
# bookworm (LibTorch 1.13, GCC 12, NumPy 1.24); this is the newer stack most users have, and the
# closest a machine without a GPU gets to running what the GPU machine's pip LibTorch 2.x runs
# (scripts/check_torch2.sh only compiles against the CUDA 2.6). The CUDA back end is off (trixie
# ships no CUDA toolkit in main), so the GPU tests are not built. Not part of CI (~25 min on 2
# cores); run it after touching models/, the Python side or the build, and before a GPU session.
#
# What it caught the first time (all fixed): LibTorch >= 2.4 asks the TCPStore for a libuv server
# that Debian's 2.6 lacks (models/dist/process_group.cpp falls back to the classic one); NumPy 2's
# repr of its scalars in a bench script's CSV; a GCC 14 -Wdangling-reference in models/vit.
#
# Usage (root: debootstrap, chroot, mounts): bash scripts/check_trixie.sh [scratch, default
# /tmp/jacond-<suite>] [ctest -R regex]. The chroot is kept and reused; the sources are the working
# tree's tracked and untracked, not ignored, files, copied afresh each run.
# JACOND_CHECK_SUITE=sid runs the same in Debian sid (2026-11-25: LibTorch 2.14, C++20 headers, GCC 15),
# a LibTorch newer than the GPU machine's.
set -euo pipefail
cd "$(dirname "$0")/.."
suite=${JACOND_CHECK_SUITE:-trixie}
scratch=${1:-/tmp/jacond-$suite}
filter=${2:-}
root=$scratch/root
[ "$(id -u)" -eq 0 ] || { echo "check_trixie: run as root (debootstrap, chroot, mount)" >&2; exit 2; }
source scripts/debian_packages.sh

if [ ! -x "$root/usr/bin/apt-get" ]; then
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
  mkdir -p "$scratch"
  echo "check_trixie: debootstrap $suite into $root"
  debootstrap --variant=minbase --components=main "$suite" "$root" http://deb.debian.org/debian >"$scratch/debootstrap.log" 2>&1 ||
    { tail -5 "$scratch/debootstrap.log"; exit 1; }
fi
cp /etc/resolv.conf /etc/hosts "$root/etc/"
mounted=()
cleanup() { for m in "${mounted[@]}"; do umount "$m" 2>/dev/null || true; done; }
trap cleanup EXIT
for m in proc dev; do
  if ! mountpoint -q "$root/$m"; then
    if [ "$m" = proc ]; then mount -t proc proc "$root/proc"; else mount --bind /dev "$root/dev"; fi
    mounted+=("$root/$m")
  fi
done

# Check-Valid-Until off: the archive reachable here can serve a sid Release file past its Valid-Until.
echo "check_trixie: installing ${#PACKAGES[@]} packages in the chroot"
chroot "$root" env DEBIAN_FRONTEND=noninteractive bash -c \
  "apt-get -o Acquire::Check-Valid-Until=false update -qq && apt-get install -y -qq --no-install-recommends ${PACKAGES[*]}" >"$scratch/apt.log" 2>&1 ||
  { tail -20 "$scratch/apt.log"; echo "check_trixie: apt-get failed in the chroot ($scratch/apt.log)" >&2; exit 1; }

rm -rf "$root/src" && mkdir -p "$root/src"
git ls-files -z --cached --others --exclude-standard | xargs -0 tar -c -f - | tar -x -C "$root/src"
versions=$(chroot "$root" dpkg-query -W -f '${Package} ${Version}\n' libtorch-dev g++ cmake python3 python3-numpy | tr '\n' ';')
echo "check_trixie: building ($versions)"
chroot "$root" bash -c "cd /src && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DJACOND_CUDA=OFF \
  >build.configure.log 2>&1 && ninja -C build >build.log 2>&1" ||
  { grep -E "^FAILED|error:|CMake Error" "$root"/src/build*.log | head -30
    echo "check_trixie: the build failed ($root/src/build.log)" >&2; exit 1; }
grep -h "warning:" "$root/src/build.log" | sort -u | head -20 || true
status=0
chroot "$root" bash -c "cd /src/build && ctest -j2 --output-on-failure ${filter:+-R '$filter'}" >"$scratch/ctest.log" 2>&1 || status=1
grep -E "tests passed|\*\*\*Failed|\*\*\*Exception|\*\*\*Timeout" "$scratch/ctest.log" | sed 's/ \.\.\.*/ /'
if [ $status -ne 0 ]; then echo "check_trixie: tests failed ($scratch/ctest.log)" >&2; exit 1; fi
echo "check_trixie: the suite passes on Debian trixie ($versions)"
