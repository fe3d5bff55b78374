#!/usr/bin/env bash
# Installs what weft builds with, from Debian 12 packages. Idempotent; uses sudo when not root.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git
      libspdlog-dev libfmt-dev libcli11-dev libhwloc-dev libgtest-dev libgmock-dev
      libucx-dev libfabric-dev
      clang libclang-rt-dev
      slurmd slurmctld slurm-client munge
      hipcc libamdhip64-dev
      libopenmpi-dev
      python3-torch libtorch-dev python3-pytest)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && { echo "install-deps: all ${#pkgs[@]} packages present"; exit 0; }
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
