#!/usr/bin/env bash
# Prepares the fa4 plugin's Python side for a machine without network: downloads the wheels
# pinned in plugins/kernels/fa4/wheels.txt (CPython 3.12, x86-64 Linux, CUDA 13) from PyPI,
# installs them into one site folder (pip --target, no dependency resolution: the list is the
# resolution), drops what no Hopper run loads, and packs that folder as one tar.xz cut into
# parts small enough to travel one per device call.
# Usage: tools/fetch_fa4.sh [DEST]   (default .deps/fa4; PART_MB=40 sets the part size)
# Result:
#   DEST/site/                      the site folder itself (LCA_FA4_SITE on a machine with network)
#   DEST/part-NN/fa4-site.tar.xz.NN one part each, with DEST/part-NN/SHA256SUMS (all parts' sums and
#                                   their count), so that any one part folder carries what the
#                                   joining side needs to check the whole
# Safe to run again: a complete DEST is kept (FORCE=1 redoes it). Exits 0 with a message where
# PyPI cannot be reached, so that setup does not fail on such a machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/.deps/fa4}
part_mb=${PART_MB:-40}
list="$root/plugins/kernels/fa4/wheels.txt"
py=${PYTHON:-python3}

if [ -f "$dest/part-00/SHA256SUMS" ] && [ -d "$dest/site/flash_attn" ] && [ "${FORCE:-0}" != 1 ]; then
  echo "fetch_fa4: $dest is complete ($(ls -d "$dest"/part-* | wc -l) parts); FORCE=1 to redo it"
  exit 0
fi
mapfile -t pins < <(grep -vE '^\s*(#|$)' "$list")
target=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
        --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
        --only-binary=:all:)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch_fa4: downloading ${#pins[@]} wheels (about 115 MB) into $dest/wheels"
mkdir -p "$dest/wheels"
if ! "$py" -m pip download -q --no-deps "${target[@]}" -d "$dest/wheels" "${pins[@]}" > "$tmp/pip.log" 2>&1; then
  echo "fetch_fa4: could not download the wheels (no PyPI here?); the fa4 plugin will find no site folder."
  echo "fetch_fa4: pip said: $(grep -E 'ERROR' "$tmp/pip.log" | head -2 | tr '\n' ' ')"
  exit 0
fi

echo "fetch_fa4: installing into $dest/site"
rm -rf "$dest/site"
wheels=()
for pin in "${pins[@]}"; do
  name=${pin%%==*}
  version=${pin##*==}
  norm=$(echo "$name" | tr '-' '_' | tr '[:upper:]' '[:lower:]')
  found=$(ls "$dest/wheels" | grep -iE "^${norm}-${version}-" | head -1 || true)
  [ -n "$found" ] || { echo "fetch_fa4: $pin was not downloaded"; exit 1; }
  wheels+=("$dest/wheels/$found")
done
"$py" -m pip install -q --no-index --no-deps --no-compile "${target[@]}" --target "$dest/site" "${wheels[@]}" \
  > "$tmp/install.log" 2>&1 || { grep -E "ERROR" "$tmp/install.log" | head -5; exit 1; }

# What no x86-64 Hopper run loads: the runtime stubs of other platforms and the static runtime
# (for ahead-of-time export), cuda-bindings' Cython sources (.cpp/.pyx, 70 MB), console
# scripts, byte code.
site="$dest/site"
rm -rf "$site/nvidia_cutlass_dsl/cu13/lib/stubs" "$site/nvidia_cutlass_dsl/cu13/lib/libcuda_dialect_runtime_static.a" \
       "$site/bin"
find "$site/cuda" \( -name '*.cpp' -o -name '*.pyx' \) -delete
find "$site" -name __pycache__ -type d -prune -exec rm -rf {} +
[ -f "$site/nvidia_cutlass_dsl_packages.pth" ] || { echo "fetch_fa4: nvidia_cutlass_dsl_packages.pth missing in $site"; exit 1; }
echo "fetch_fa4: site folder $(du -sh "$site" | cut -f1)"

echo "fetch_fa4: packing (xz, a few minutes on two cores)"
rm -rf "$dest"/part-* "$tmp/parts"
mkdir -p "$tmp/parts"
tar -C "$site" -cf - . | xz -T0 -6 > "$tmp/fa4-site.tar.xz"
(cd "$tmp/parts" && split -b "${part_mb}M" -d -a 2 ../fa4-site.tar.xz fa4-site.tar.xz.)
count=$(ls "$tmp/parts" | wc -l)
(cd "$tmp/parts" && sha256sum fa4-site.tar.xz.* > ../SHA256SUMS && echo "parts $count" >> ../SHA256SUMS)
for f in "$tmp"/parts/fa4-site.tar.xz.*; do
  n=${f##*.}
  mkdir -p "$dest/part-$n"
  mv "$f" "$dest/part-$n/"
  cp "$tmp/SHA256SUMS" "$dest/part-$n/SHA256SUMS"
done
echo "fetch_fa4: $(du -h "$tmp/fa4-site.tar.xz" | cut -f1) packed as $count parts of at most ${part_mb} MiB:"
ls -d "$dest"/part-* | sed "s|^$root/||; s|^|  |"
echo "fetch_fa4: device calls, one part each: plugins/kernels/fa4/README.md (Device)"
