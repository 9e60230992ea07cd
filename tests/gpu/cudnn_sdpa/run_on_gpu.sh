#!/usr/bin/env bash
# Builds the cudnn_sdpa plugin, cpu_reference, the test and the benchmark on a GPU machine, runs
# the test and times bf16 heads 64:8 d128. Logs go to $OUT (or /tmp/lca_out).
# Usage (repository root): tests/gpu/cudnn_sdpa/run_on_gpu.sh [bench masks] [seqlen]
# Env: CUDNN_ROOT2=<prefix with include/ and lib/> also builds against a second cuDNN (headers
# and library of the same release) and times it too.
set -uo pipefail
out=${OUT:-/tmp/lca_out}
mkdir -p "$out"
masks=${1:-full,causal,causal_document,sliding_window,sliding_window_causal,sliding_window_document}
seqlen=${2:-16384}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv | tee "$out/gpu.txt"

# $1 build dir, $2 targets, rest: extra CMake arguments.
build() {
  local dir=$1 targets=$2
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release "$@" \
    > "$out/configure_$dir.log" 2>&1 || { tail -30 "$out/configure_$dir.log"; return 1; }
  grep "lca: cudnn" "$out/configure_$dir.log"
  ninja -C "$dir" -j16 $targets > "$out/build_$dir.log" 2>&1 ||
    { grep -B2 -A20 "error" "$out/build_$dir.log" | head -60; return 1; }
}

start=$(date +%s)
build build-gpu-sys "lca_cudnn_sdpa bench_cudnn_sdpa lca_cpu_reference test_cudnn_sdpa" &
if [ -n "${CUDNN_ROOT2:-}" ]; then
  build build-gpu-pip "lca_cudnn_sdpa bench_cudnn_sdpa" -DCUDNN_INCLUDE_DIR="$CUDNN_ROOT2/include" \
    -DCUDNN_LIBRARY="$CUDNN_ROOT2/lib/libcudnn.so.9" &
fi
wait
echo "built in $(( $(date +%s) - start )) s"

bin=build-gpu-sys/tests/gpu/cudnn_sdpa
if [ -x "$bin/test_cudnn_sdpa" ]; then
  timeout 200 "$bin/test_cudnn_sdpa" > "$out/test.log" 2>&1
  echo "test exit $?"
  grep -E "^\[ errors|Failure|^\[  FAILED|PASSED|Expected|Which is|error:|what\(\)" "$out/test.log" | head -60
fi
timeout 120 "$bin/bench_cudnn_sdpa" "$seqlen" 64 8 128 bf16 "$masks" 2>&1 | tee "$out/bench.txt"
if [ -n "${CUDNN_ROOT2:-}" ] && [ -x build-gpu-pip/tests/gpu/cudnn_sdpa/bench_cudnn_sdpa ]; then
  LD_LIBRARY_PATH="$CUDNN_ROOT2/lib:${LD_LIBRARY_PATH:-}" timeout 120 \
    build-gpu-pip/tests/gpu/cudnn_sdpa/bench_cudnn_sdpa "$seqlen" 64 8 128 bf16 "$masks" 2>&1 | tee "$out/bench2.txt"
fi
