#!/usr/bin/env bash
# On the GPU machine, for kernel work: build only what flex_flash needs (Hopper, Release), run its
# GPU tests, then a matrix of flex_flash beside cudnn_sdpa. Usage:
#   tools/flex_dev.sh [MATRIX] [extra lcahost args...]     (SKIP_TESTS=1 to time only,
#                                                          SKIP_BUILD=1 to reuse build-gpu)
# The matrix runs the kernels that LCA_FLEX_FORWARD (unset: sm90_k128, sm90_persistent, sm90_pair
# or sm90_overlap by the schedule on Hopper; sm90_k128, sm90_persistent, sm90_pair,
# sm90_k128_pingpong, sm90_overlap, sm90_pingpong, sm90, mma)
# and LCA_FLEX_BACKWARD (sm90 by default on Hopper, sm90_paired, sm90_unpaired, sm90_skip, sm90_noskip, sm90_atomic, mma)
# name (see plugins/kernels/flex_flash/*_sm90.cuh); the tests run every variant.
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
  # The GPU tests through every kernel variant (LCA_FLEX_FORWARD, LCA_FLEX_BACKWARD), one log each.
  for variant in LCA_FLEX_DEFAULT=1 LCA_FLEX_FORWARD=sm90_k128 LCA_FLEX_FORWARD=sm90_persistent LCA_FLEX_FORWARD=sm90_pair \
                 LCA_FLEX_FORWARD=sm90_k128_pingpong LCA_FLEX_FORWARD=sm90_overlap \
                 LCA_FLEX_FORWARD=sm90_pingpong LCA_FLEX_FORWARD=sm90 \
                 LCA_FLEX_BACKWARD=mma LCA_FLEX_BACKWARD=sm90_atomic LCA_FLEX_BACKWARD=sm90_paired \
                 LCA_FLEX_BACKWARD=sm90_unpaired LCA_FLEX_BACKWARD=sm90_skip LCA_FLEX_FORWARD=mma; do
    log="$out/test_flex_flash_${variant//=/_}.log"
    env "$variant" build-gpu/tests/gpu/flex_flash/test_flex_flash ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} > "$log" 2>&1
    echo "tests, $variant: $(grep -E "PASSED|FAILED TESTS" "$log" | tr '\n' ' ')"
    grep -E "FAILED  \]" "$log" | cut -c1-110 | head -20
  done
fi
[ "$matrix" = none ] && exit 0
build-gpu/bin/lcahost --plugins build-gpu/plugins --matrix "$matrix" --kernels flex_flash,cudnn_sdpa \
  --out "$out/flex-$matrix.jsonl" --force "$@" 2>&1 | tee "$out/run-$matrix.log" | grep -v " X  "
