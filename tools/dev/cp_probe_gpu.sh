#!/usr/bin/env bash
# On a multi-GPU machine: build lcahost (Hopper, Release) and run `lcahost cp-probe` over every
# visible GPU with NCCL, once as NCCL chooses (NVLink / shared memory) and once kept off them
# (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1: the network-like path), then the cp-model's check of
# any CP results files given against each probe. Usage:
#   tools/dev/cp_probe_gpu.sh [RESULTS.jsonl RATES.jsonl]
# NP (default: every GPU) ranks; SKIP_BUILD=1 reuses build-gpu. Files land in $OUT (or ./results):
# probe-nccl.json, probe-nccl-nop2p.json, probe.log, and model-check-*.txt when results are given.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-results}
mkdir -p "$out"
np=${NP:-$(nvidia-smi -L | wc -l)}
export NCCL_NVLS_ENABLE=0
status=0
t0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCUDNN_FRONTEND_INCLUDE_DIR="$PWD/.deps/cudnn_frontend/include" > "$out/probe.log" 2>&1 ||
    { tail -30 "$out/probe.log"; exit 1; }
  cmake --build build-gpu -j"$(nproc)" --target lcahost lca_builtin >> "$out/probe.log" 2>&1 ||
    { grep -E "error|FAILED" -A5 "$out/probe.log" | head -60; exit 1; }
  stamp "build ok"
fi
mpi=(mpirun --allow-run-as-root --oversubscribe -x NCCL_NVLS_ENABLE)
stamp "probe: $np GPUs, NCCL as it chooses"
"${mpi[@]}" -np "$np" build-gpu/bin/lcahost cp-probe --out "$out/probe-nccl.json" --force 2>&1 | tee -a "$out/probe.log" ||
  status=1
stamp "probe: $np GPUs, NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1"
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 "${mpi[@]}" -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -np "$np" \
  build-gpu/bin/lcahost cp-probe --out "$out/probe-nccl-nop2p.json" --force 2>&1 | tee -a "$out/probe.log" || status=1
if [ $# -ge 2 ]; then
  for p in nccl nccl-nop2p; do
    stamp "cp-model --validate $1 --rates $2 --probe probe-$p.json"
    build-gpu/bin/lcahost --plugins build-gpu/plugins cp-model --validate "$1" --rates "$2" \
      --probe "$out/probe-$p.json" > "$out/model-check-$p.txt" 2>&1 || status=1
    tail -40 "$out/model-check-$p.txt"
  done
fi
stamp "done (status $status)"
exit $status
