#!/usr/bin/env bash
# On the GPU machine, for kernel work: build only what flex_flash needs (Hopper, Release), run its
# GPU tests, then a matrix of flex_flash beside cudnn_sdpa. Usage:
#   tools/flex_dev.sh [MATRIX] [extra lcahost args...]     (SKIP_TESTS=1 to time only)
# Logs and results land in $OUT (or ./results).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-results}
mkdir -p "$out"
matrix=${1:-kernels-16k}
shift || true
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCUDNN_FRONTEND_INCLUDE_DIR="$PWD/.deps/cudnn_frontend/include" > "$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; exit 1; }
cmake --build build-gpu -j"$(nproc)" --target lcahost lca_flex_flash lca_cudnn_sdpa lca_cuda_reference \
  lca_builtin lca_cpu_reference test_flex_flash > "$out/build.log" 2>&1 ||
  { grep -E "error|FAILED" -A5 "$out/build.log" | head -60; exit 1; }
echo "build ok"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  build-gpu/tests/gpu/flex_flash/test_flex_flash ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} > "$out/test_flex_flash.log" 2>&1
  grep -E "^\[flex_flash\]|FAILED|Failure|PASSED|error" "$out/test_flex_flash.log" | head -80
fi
[ "$matrix" = none ] && exit 0
build-gpu/bin/lcahost --plugins build-gpu/plugins --matrix "$matrix" --kernels flex_flash,cudnn_sdpa \
  --out "$out/flex-$matrix.jsonl" "$@" 2>&1 | tee "$out/run-$matrix.log" | grep -v " X  "
