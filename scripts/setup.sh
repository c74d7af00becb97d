#!/usr/bin/env bash
# Installs every Debian package jacond needs. Idempotent, non-interactive, run as root
# (or with sudo available). Safe to call repeatedly: apt-get skips what is installed.
set -euo pipefail

source "$(dirname "$0")/debian_packages.sh"
PACKAGES+=("${FUZZ_PACKAGES[@]}")

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
