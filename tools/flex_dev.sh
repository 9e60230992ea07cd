#!/usr/bin/env bash
# On the GPU machine, for kernel work: build only what flex_flash needs (Hopper, Release), run its
# GPU tests, then a matrix of flex_flash beside cudnn_sdpa. Usage:
#   tools/flex_dev.sh [MATRIX] [extra lcahost args...]     (SKIP_TESTS=1 to time only,
#                                                          SKIP_BUILD=1 to reuse build-gpu,
#                                                          TEST_JOBS=n tests at once, default 4)
# The matrix runs flex_flash's default kernels (FLEX_OPTIONS='{"forward": "sm90_k128"}' forces a
# variant: plugins/kernels/flex_flash/README.md lists them); the tests run every variant.
# Logs and results land in $OUT (or ./results).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-results}
mkdir -p "$out"
matrix=${1:-kernels-16k}
shift || true
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCUDNN_FRONTEND_INCLUDE_DIR="$PWD/.deps/cudnn_frontend/include" > "$out/configure.log" 2>&1 ||
    { tail -30 "$out/configure.log"; exit 1; }
  cmake --build build-gpu -j"$(nproc)" --target lcahost lca_flex_flash lca_cudnn_sdpa lca_cuda_reference \
    lca_builtin lca_cpu_reference test_flex_flash > "$out/build.log" 2>&1 ||
    { grep -E "error|FAILED" -A5 "$out/build.log" | head -60; exit 1; }
  echo "build ok"
fi
if command -v cuobjdump > /dev/null; then
  cuobjdump -sass build-gpu/plugins/liblca_flex_flash.so > "$out/flex_flash.sass" 2>/dev/null
  python3 tools/dev/check_wgmma_regs.py "$out/flex_flash.sass" | sed 's/^_ZN14lca_flex_flash3dev//' | cut -c1-120
fi
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  # The GPU tests through every kernel variant (ctest's test_flex_flash_* runs), one log; TEST_JOBS
  # runs at once (default 4: each is bound by its CPU reference, so they share one GPU well; on an
  # H100 with 16 cores 12 at once finished 2.7x sooner than one by one).
  ctest --test-dir build-gpu -R '^test_flex_flash' -j"${TEST_JOBS:-4}" --output-on-failure > "$out/test_flex_flash.log" 2>&1
  echo "tests: $(grep -E "tests passed|tests failed" "$out/test_flex_flash.log" | tr '\n' ' ')"
  grep -E "\*\*\*Failed|FAILED  \]" "$out/test_flex_flash.log" | cut -c1-110 | head -20
fi
[ "$matrix" = none ] && exit 0
build-gpu/bin/lcahost --plugins build-gpu/plugins --matrix "$matrix" --kernels flex_flash,cudnn_sdpa \
  ${FLEX_OPTIONS:+--kernel-options "flex_flash=$FLEX_OPTIONS"} --out "$out/flex-$matrix.jsonl" --force "$@" 2>&1 | tee "$out/run-$matrix.log" | grep -v " X  "
