#!/usr/bin/env bash
# Installs what lca needs on Debian/Ubuntu when it is missing: compilers, CMake, Ninja, Boost,
# nlohmann-json, spdlog, CLI11, GoogleTest, OpenMPI, matplotlib; and, where nvcc is present,
# the cudnn-frontend headers from PyPI into .deps/. Safe to run again: it only adds what is absent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

debs=(build-essential cmake ninja-build pkg-config git libboost-dev nlohmann-json3-dev
      libspdlog-dev libcli11-dev libgtest-dev libopenmpi-dev openmpi-bin python3-matplotlib)
missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${debs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: Debian packages present"
fi

# cudnn-frontend is header-only; PyPI's nvidia-cudnn-frontend wheel carries the headers.
nvcc_bin=$(command -v nvcc || true)
[ -n "$nvcc_bin" ] || [ ! -x /usr/local/cuda/bin/nvcc ] || nvcc_bin=/usr/local/cuda/bin/nvcc
fe="$root/.deps/cudnn_frontend"
if [ -n "$nvcc_bin" ] && [ ! -f "$fe/include/cudnn_frontend.h" ]; then
  echo "setup: fetching cudnn-frontend headers (nvidia-cudnn-frontend from PyPI) into .deps/"
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps -d "$tmp" nvidia-cudnn-frontend >/dev/null 2>&1; then
    mkdir -p "$fe"
    (cd "$fe" && python3 -m zipfile -e "$tmp"/nvidia_cudnn_frontend-*.whl "$tmp/x" >/dev/null &&
       rm -rf include && cp -r "$tmp/x/include" include)
    echo "setup: cudnn-frontend headers in $fe/include"
  else
    echo "setup: could not fetch nvidia-cudnn-frontend; the cudnn_sdpa plugin will not be built"
  fi
  rm -rf "$tmp"
fi

# FlashAttention-4 for the fa4 plugin: 115 MB of wheels packed for device calls, minutes of xz;
# only when asked (LCA_FETCH_FA4=1), and never a failure of setup (fetch_fa4.sh exits 0 offline).
if [ "${LCA_FETCH_FA4:-0}" = 1 ]; then
  "$root/tools/fetch_fa4.sh" || echo "setup: tools/fetch_fa4.sh failed; the fa4 plugin will find no site folder"
elif [ ! -d "$root/.deps/fa4/site" ]; then
  echo "setup: FA4 (fa4 plugin) not fetched: LCA_FETCH_FA4=1 make setup, or tools/fetch_fa4.sh"
fi
