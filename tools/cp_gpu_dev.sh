#!/usr/bin/env bash
# On the GPU machine, for context-parallel work: build only what GPU CP needs (Hopper, Release),
# run the GPU CP tests (the device data movement, the lent communicators, every strategy x mask x
# fwd/bwd with flex_flash), then a small CP matrix with NCCL on one rank and with MPI staged
# through pinned memory on two ranks sharing GPU 0. Usage:
#   tools/cp_gpu_dev.sh [MATRIX] [extra lcahost args...]
# MATRIX defaults to cp-gpu-quick; MASKS (default: four masks) narrows it ("*" = all);
# NP_MPI (default 2) is the rank count of the staged run; SKIP_TESTS=1 skips the tests,
# SKIP_BUILD=1 reuses build-gpu as it is;
# STRATEGIES overrides the strategy list. Logs and results land in $OUT (or ./results).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-results}
mkdir -p "$out"
matrix=${1:-cp-gpu-quick}
shift || true
masks=${MASKS:-full,causal,causal_document,block_sparse}
strategies=${STRATEGIES:-ulysses,ring_p2p,ring_allgather,usp,loongtrain,balanced}
np_mpi=${NP_MPI:-2}
export NCCL_NVLS_ENABLE=0
status=0
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCUDNN_FRONTEND_INCLUDE_DIR="$PWD/.deps/cudnn_frontend/include" > "$out/configure.log" 2>&1 ||
    { tail -30 "$out/configure.log"; exit 1; }
  cmake --build build-gpu -j"$(nproc)" --target lcahost lca_ulysses lca_ring_p2p lca_ring_allgather lca_usp \
    lca_loongtrain lca_balanced lca_flex_flash lca_cuda_reference lca_cpu_reference lca_builtin test_cp_gpu test_cp_device \
    > "$out/build.log" 2>&1 || { grep -E "error|FAILED" -A5 "$out/build.log" | head -60; exit 1; }
  stamp "build ok"
fi

mpi=(mpirun --allow-run-as-root --oversubscribe -x NCCL_NVLS_ENABLE)
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  # test_cp_gpu under mpirun at np 1 (NCCL), np 2 and 4 (MPI staged, one shared GPU) and np 2
  # with NCCL (skips itself on a one-GPU machine); -V keeps every case's errors in the log.
  ctest --test-dir build-gpu -R "cp_gpu_|test_cp_device" -V --timeout 300 > "$out/ctest-cp-gpu.log" 2>&1 || status=1
  grep -E "Test +#|tests passed|tests failed|Failure|\[rank [0-9]+\]" "$out/ctest-cp-gpu.log" | head -60
  echo "strategy cases checked: $(grep -c '\[cp_gpu\] .* o [0-9]' "$out/ctest-cp-gpu.log")" \
    "(worst errors: grep '\[cp_gpu\]' $out/ctest-cp-gpu.log | sort -k9 -g | tail)"
  stamp "tests done (status $status)"
fi

lcahost=(build-gpu/bin/lcahost --plugins build-gpu/plugins --cp "$strategies" --cp-kernel flex_flash
         --matrix "$matrix")
[ "$masks" != "*" ] && lcahost+=(--masks "$masks")
"${mpi[@]}" -np 1 "${lcahost[@]}" --out "$out/cp-$matrix-np1-nccl.jsonl" --force "$@" > "$out/run-np1-nccl.log" 2>&1 ||
  status=1
grep -E "^# |summary| FAIL | ERROR |error|rank [0-9]+/" "$out/run-np1-nccl.log" | head -20
stamp "np 1 nccl done"
"${mpi[@]}" -np "$np_mpi" "${lcahost[@]}" --cp-comm mpi --out "$out/cp-$matrix-np$np_mpi-mpi.jsonl" --force "$@" \
  > "$out/run-np$np_mpi-mpi.log" 2>&1 || status=1
grep -E "^# |summary| FAIL | ERROR |error|rank [0-9]+/" "$out/run-np$np_mpi-mpi.log" | head -24
stamp "np $np_mpi mpi done (status $status)"
exit $status
