#!/usr/bin/env bash
# Builds flex_flash from another revision's kernel sources as a second kernel, NAME (default
# flex_flash_base), into BUILD/plugins beside the tree's own, so that one lcahost run times both
# on every cell, back to back, on the same inputs:
#   tools/dev/ab_same_run.sh REV [NAME] [BUILD]
#   BUILD/bin/lcahost --plugins BUILD/plugins --matrix M.json --kernels flex_flash,NAME --no-check
# Two runs one after another would let a drift of the GPU's clocks over the minutes of a run fall
# on one of them; here the two versions of a cell are timed seconds apart. (Variants of one build
# need no second plugin: a matrix names flex_flash twice, with other options and labels.) Only
# plugins/kernels/flex_flash differs from the tree: the other files are the tree's. BUILD must be
# configured (its CMakeCache gives the flags).
# REV may also be a tar file of those sources, for a machine whose copy of .git lacks the revision
# (a device machine's copy of the history can be older than the tree it runs):
#   git archive -o ab-base.tar REV plugins/kernels/flex_flash   (here), then ab_same_run.sh ab-base.tar
set -euo pipefail
cd "$(dirname "$0")/../.."
rev=${1:?usage: ab_same_run.sh REV [NAME] [BUILD]}
name=${2:-flex_flash_base}
build=${3:-build-gpu}
[ -f "$build/CMakeCache.txt" ] || { echo "ab_same_run: $build is not configured" >&2; exit 1; }
src=$build/ab-$name-src
rm -rf "$src"
mkdir -p "$src"
git ls-files -z | xargs -0 tar -cf - | tar -xf - -C "$src"
rm -rf "$src/plugins/kernels/flex_flash"
mkdir -p "$src/plugins/kernels/flex_flash"
if [ -f "$rev" ]; then
  tar -xf "$rev" -C "$src"
elif git rev-parse -q --verify "$rev^{commit}" > /dev/null; then
  git archive "$rev" plugins/kernels/flex_flash | tar -xf - -C "$src"
else
  echo "ab_same_run: $rev is neither a revision of this .git nor a file; where .git is older than the" \
    "tree, make its sources a tar where the revision is: git archive -o ab-base.tar $rev plugins/kernels/flex_flash" >&2
  exit 1
fi
[ -f "$src/plugins/kernels/flex_flash/flex_flash.cpp" ] ||
  { echo "ab_same_run: $rev holds no plugins/kernels/flex_flash/flex_flash.cpp" >&2; exit 1; }
# The library must call itself by the manifest's name (the host refuses a mismatch).
sed -i "s/LCA_EXPORT_KERNEL(\(.*\), \"flex_flash\",/LCA_EXPORT_KERNEL(\1, \"$name\",/" \
  "$src/plugins/kernels/flex_flash/flex_flash.cpp"
grep -q "\"$name\"" "$src/plugins/kernels/flex_flash/flex_flash.cpp" ||
  { echo "ab_same_run: could not rename the kernel in $rev's flex_flash.cpp" >&2; exit 1; }
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
cmake -S "$src" -B "$build/ab-$name" -G Ninja -DCMAKE_BUILD_TYPE="$(cache CMAKE_BUILD_TYPE)" \
  -DCMAKE_CUDA_ARCHITECTURES="$(cache CMAKE_CUDA_ARCHITECTURES)" \
  -DCUDNN_FRONTEND_INCLUDE_DIR="$(cache CUDNN_FRONTEND_INCLUDE_DIR)" -DLCA_WITH_TORCH=OFF > "$build/ab-$name.log"
cmake --build "$build/ab-$name" --target lca_flex_flash >> "$build/ab-$name.log"
cp "$build/ab-$name/plugins/liblca_flex_flash.so" "$build/plugins/liblca_$name.so"
python3 - "$build/plugins" "$name" <<'PY'
import json, sys
d, name = sys.argv[1], sys.argv[2]
m = json.load(open(f"{d}/flex_flash.json"))
m["name"], m["library"] = name, f"liblca_{name}.so"
m["description"] = f"flex_flash of another revision, for A/B runs (tools/dev/ab_same_run.sh): {m['description']}"
json.dump(m, open(f"{d}/{name}.json", "w"), indent=2)
PY
echo "ab_same_run: $name ($rev) in $build/plugins"
