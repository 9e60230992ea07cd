#!/usr/bin/env bash
# Installs what lca needs on Debian/Ubuntu when it is missing: compilers, CMake, Ninja, Boost,
# nlohmann-json, spdlog, CLI11, GoogleTest, OpenMPI, matplotlib; and, where nvcc is present,
# the cudnn-frontend headers and VSA's Triton kernels (fastvideo-kernel) from PyPI into .deps/.
# Safe to run again: it only adds what is absent.
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

# Video Sparse Attention (fastvideo-kernel, Apache-2.0): the vsa_triton plugin runs the Triton
# kernels of its source distribution. The sdist is 42 MB, almost all of it prebuilt wheels for a
# newer torch; only the two Triton files that plugin imports, the license and the pinned version
# are kept, so that .deps stays small enough to travel with the tree. pip cannot download this
# sdist (preparing its metadata wants torch 2.12 and CMake 3.26), so the file is fetched by its
# PyPI address and checked against the digest PyPI publishes for it.
vsa_version=0.3.5
vsa_sha256=f2c865cde78d6b218ca4f8695cad96464d79d73f144f142f51bba0920976dcb4
vsa_url=https://files.pythonhosted.org/packages/db/5b/b4882ba5273402c1c51d87be79a19838978a7f587bf4a459d655ce4b5147/fastvideo_kernel-$vsa_version.tar.gz
vsa="$root/.deps/fastvideo_kernel"
if [ -n "$nvcc_bin" ] && ! grep -qx "version $vsa_version" "$vsa/VERSION" 2>/dev/null; then
  echo "setup: fetching fastvideo-kernel $vsa_version (VSA's Triton kernels) into .deps/"
  if python3 - "$vsa_url" "$vsa_sha256" "$vsa_version" "$vsa" <<'PY'
import hashlib, io, pathlib, shutil, sys, tarfile, urllib.request
url, digest, version, dest = sys.argv[1:]
try:
    data = urllib.request.urlopen(url, timeout=300).read()
except OSError as e:
    sys.exit(f"setup: fastvideo-kernel {version}: {e}")
if hashlib.sha256(data).hexdigest() != digest:
    sys.exit(f"setup: fastvideo-kernel {version}: sha256 differs from the pinned one")
top = f"fastvideo_kernel-{version}/"
keep = ["python/fastvideo_kernel/triton_kernels/block_sparse_attn_triton.py",
        "python/fastvideo_kernel/triton_kernels/index.py", "LICENSE"]
dest = pathlib.Path(dest)
shutil.rmtree(dest, ignore_errors=True)
with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
    for name in keep:
        member = tar.getmember(top + name)
        out = dest / name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(tar.extractfile(member).read())
(dest / "VERSION").write_text(f"version {version}\nsha256 {digest}\nurl {url}\n")
PY
  then
    echo "setup: VSA's Triton kernels in $vsa"
  else
    echo "setup: could not fetch fastvideo-kernel $vsa_version; the vsa_triton plugin will not be built"
  fi
fi

# FlashAttention-4 for the fa4 plugin: 115 MB of wheels packed for device calls, minutes of xz;
# only when asked (LCA_FETCH_FA4=1), and never a failure of setup (fetch_fa4.sh exits 0 offline).
if [ "${LCA_FETCH_FA4:-0}" = 1 ]; then
  "$root/tools/fetch_fa4.sh" || echo "setup: tools/fetch_fa4.sh failed; the fa4 plugin will find no site folder"
elif [ ! -d "$root/.deps/fa4/site" ]; then
  echo "setup: FA4 (fa4 plugin) not fetched: LCA_FETCH_FA4=1 make setup, or tools/fetch_fa4.sh"
fi
