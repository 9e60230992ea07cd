#!/usr/bin/env bash
# flex_flash's SASS from a local build, without a GPU: cuobjdump and nvdisasm from the
# nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels (pip, unpacked into the git-ignored
# .tools/cuobjdump once: not under .deps, which device runs carry), then the wgmma register check
# (check_wgmma_regs.py). The SASS stays in BUILD/flex_flash.sass, to diff
# the step loops of two builds or kernels. Usage: tools/dev/local_sass.sh [BUILD]  (default build)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
so="$build/plugins/liblca_flex_flash.so"
[ -f "$so" ] || { echo "local_sass: $so is not built (cmake --build $build --target lca_flex_flash)" >&2; exit 1; }
tool=.tools/cuobjdump
bin=$(find "$tool" -type f -name cuobjdump 2>/dev/null | head -1 || true)
if [ -z "$bin" ]; then
  rm -rf "$tool"
  python3 -m pip download --quiet --no-deps -d "$tool/wheel" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm ||
    { echo "local_sass: pip could not fetch nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm" >&2; exit 1; }
  for wheel in "$tool"/wheel/*.whl; do python3 -m zipfile -e "$wheel" "$tool/x"; done
  bin=$(find "$tool" -type f -name cuobjdump | head -1)
  chmod +x "$bin" "$(dirname "$bin")/nvdisasm"
fi
PATH="$(dirname "$bin"):$PATH" "$bin" -sass "$so" > "$build/flex_flash.sass"
python3 tools/dev/check_wgmma_regs.py "$build/flex_flash.sass"
