#!/usr/bin/env bash
# On the GPU machine: build with the project's CMake for Hopper, run the GPU tests, then a
# matrix. Usage: tools/gpu_verify.sh [MATRIX] [extra lcahost args...]; results land in $OUT
# (or ./results) as gpu-<matrix>.jsonl/.csv plus the logs.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-results}
mkdir -p "$out"
matrix=${1:-paper-dense}
shift || true
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv | tee "$out/gpu.txt"
if [ ! -x build-gpu/bin/lcahost ] || [ "${REBUILD:-0}" = 1 ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCUDNN_FRONTEND_INCLUDE_DIR="$PWD/.deps/cudnn_frontend/include" > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
fi
cmake --build build-gpu -j"$(nproc)" > "$out/build.log" 2>&1 || { grep -E "error|FAILED" -A5 "$out/build.log" | head -60; exit 1; }
echo "build ok"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  ctest --test-dir build-gpu -L gpu --output-on-failure -j 1 --timeout 300 > "$out/ctest-gpu.log" 2>&1
  tail -6 "$out/ctest-gpu.log"
fi
./build-gpu/bin/lcahost --plugins build-gpu/plugins --matrix "$matrix" --out "$out/gpu-$matrix.jsonl" --force "$@" 2>&1 | tee "$out/run-$matrix.log" | grep -v "^  .* X  "
