#!/usr/bin/env bash
# On the GPU machine: the PyTorch peers (torch_sdpa_flash/_efficient/_cudnn, torch_flex) beside
# flex_flash and cudnn_sdpa. Configures build-gpu against the torch of the python3 on PATH (or
# $LCA_TORCH_PYTHON), builds only what the run needs, runs the peers' GPU tests, then a matrix.
# Usage:
#   tools/torch_dev.sh [MATRIX] [extra lcahost args...]      MATRIX: a preset (default paper-dense) or none
# Stages, for machines that limit one command's time (each fits in a few minutes):
#   SKIP_TESTS=1 tools/torch_dev.sh none                      configure + build only
#   SKIP_BUILD=1 tools/torch_dev.sh none                      GPU tests only (GTEST_FILTER=... to narrow)
#   SKIP_BUILD=1 SKIP_TESTS=1 tools/torch_dev.sh paper-dense --masks full,causal
#   RESUME=1 ... (same matrix)                                continue an interrupted matrix
# paper-dense with all six kernels is hours at 32K-64K (the backward of 64K full alone is seconds
# a call, and torch_flex compiles once per length and mask form): run it in slices (--masks) and
# resume; kernels-16k is the quick side-by-side (every mask at 16K).
# Results and logs land in results/torch_dev/ (kept between runs) and are copied to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
keep=results/torch_dev
mkdir -p "$keep"
out=${OUT:-$keep}
mkdir -p "$out"
matrix=${1:-paper-dense}
shift || true
build=${BUILD_DIR:-build-gpu}
python=${LCA_TORCH_PYTHON:-$(command -v python3 || true)}
finish() { [ "$out" != "$keep" ] && cp -r "$keep"/. "$out"/ 2>/dev/null; }
trap finish EXIT

# TORCH_LIBS_FIRST=1: the whole process takes CUDA's libraries (cudart, cuBLAS, cuDNN, NCCL) from
# torch's wheels instead of the system's. By default the first plugin to load one wins (lca_core
# and cudnn_sdpa bring the system's), which torch accepts as long as they are not older than what
# it needs; plan_info of torch_sdpa_cudnn shows which cuDNN it ran.
if [ "${TORCH_LIBS_FIRST:-0}" = 1 ] && [ -n "$python" ]; then
  wheel_libs=$("$python" -c "import os, glob, torch; base = os.path.dirname(os.path.dirname(torch.__file__)); print(':'.join(sorted(set(glob.glob(base + '/nvidia/*/lib') + glob.glob(base + '/nvidia/cu*/lib')))))" 2>/dev/null)
  export LD_LIBRARY_PATH="$wheel_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "== TORCH_LIBS_FIRST: LD_LIBRARY_PATH starts with torch's wheels: $wheel_libs"
fi

echo "== environment"
if [ -n "$python" ]; then
  "$python" - <<'EOF' 2>&1 | sed 's/^/   /'
import sys, sysconfig, os
print("python", sys.version.split()[0], sys.executable)
inc = sysconfig.get_paths()["include"]
print("Python.h", "present" if os.path.exists(os.path.join(inc, "Python.h")) else "MISSING (torch_flex will not be built: install python3-dev)", "in", inc)
try:
    import torch
    print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())
    import triton
    print("triton", triton.__version__)
except Exception as e:
    print("torch: cannot import:", e)
EOF
else
  echo "   no python3 on PATH: the torch peers will not be built"
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/   gpu /'
grep -h "define CUDNN_M[AI]" /usr/include/cudnn_version*.h /usr/local/cuda/include/cudnn_version.h 2>/dev/null | head -2 | sed 's/^/   system /'

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  echo "== configure ($build)"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCUDNN_FRONTEND_INCLUDE_DIR="$PWD/.deps/cudnn_frontend/include" \
    -DLCA_WITH_TORCH=AUTO ${python:+-DLCA_TORCH_PYTHON="$python"} > "$keep/configure.log" 2>&1 ||
    { tail -40 "$keep/configure.log"; exit 1; }
  grep -E "^-- lca: " "$keep/configure.log" | sed 's/^-- /   /'
  # Only targets this configure made (cudnn_sdpa needs the frontend headers, the peers torch).
  known=$(ninja -C "$build" -t targets all 2>/dev/null | cut -d: -f1)
  targets=""
  for t in lcahost lca_builtin lca_cpu_reference lca_cuda_reference lca_cudnn_sdpa lca_flex_flash \
           lca_torch_sdpa_flash lca_torch_sdpa_efficient lca_torch_sdpa_cudnn lca_torch_flex test_torch_peers test_torch_masks; do
    grep -qx "$t" <<<"$known" && targets="$targets $t"
  done
  echo "== build: $targets"
  cmake --build "$build" -j"$(nproc)" --target $targets > "$keep/build.log" 2>&1 ||
    { grep -E "error|FAILED" -A5 "$keep/build.log" | head -60; exit 1; }
  echo "   build ok"
fi

peers=""
for p in torch_sdpa_flash torch_sdpa_efficient torch_sdpa_cudnn torch_flex; do
  if [ -f "$build/plugins/liblca_$p.so" ]; then peers="$peers,$p"; else echo "   $p: not built (see configure.log)"; fi
done

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  echo "== tests"
  [ -x "$build/tests/unit/torch_masks/test_torch_masks" ] &&
    { "$build/tests/unit/torch_masks/test_torch_masks" > "$keep/test_torch_masks.log" 2>&1; tail -1 "$keep/test_torch_masks.log" | sed 's/^/   test_torch_masks: /'; }
  if [ -x "$build/tests/gpu/torch_peers/test_torch_peers" ]; then
    # Every case in one process, as lcahost runs the peers: the SDPA plugins (LibTorch) first, then
    # torch_flex (embedded Python importing torch). If that process dies, the two families run
    # again apart, so that an abort hides no verdict of the other family.
    summarize() {
      # One line of errors per case ([plugin] name o .. lse .. dq ..), failures, the verdict.
      grep -E "^\[(torch_[a-z_]+)\]|FAILED|Failure|PASSED|error|free\(\)" "$1" | head -120
      # Skips: SDPA's dispatcher refusing a shape (the reason follows), or no GPU.
      grep -E "refused:|no CUDA device" "$1" | sort | uniq -c | head -20
    }
    log="$keep/test_torch_peers.log"
    "$build/tests/gpu/torch_peers/test_torch_peers" ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} > "$log" 2>&1
    status=$?
    echo "   test_torch_peers (one process) exit $status"
    summarize "$log"
    if [ "$status" -gt 1 ]; then
      for family in Sdpa Flex; do
        log="$keep/test_torch_peers_$family.log"
        "$build/tests/gpu/torch_peers/test_torch_peers" --gtest_filter="*${family}*${GTEST_FILTER:+:$GTEST_FILTER}" > "$log" 2>&1
        echo "   test_torch_peers ($family alone) exit $?"
        summarize "$log"
      done
    fi
  else
    echo "   test_torch_peers not built (no torch peer was)"
  fi
fi

[ "$matrix" = none ] && exit 0
echo "== lcahost --matrix $matrix"
results="$keep/peers-$matrix.jsonl"
if [ "${RESUME:-0}" = 1 ] && [ -f "$results" ]; then io=(--resume "$results"); else io=(--out "$results"); fi
"$build/bin/lcahost" --plugins "$build/plugins" --matrix "$matrix" --kernels "flex_flash,cudnn_sdpa$peers" \
  "${io[@]}" "$@" 2>&1 | tee -a "$keep/run-$matrix.log" | grep -v " X  "
status=${PIPESTATUS[0]}
# Compile times and torch's own peak memory, per cell (plan_info).
"${python:-python3}" - "$results" <<'EOF' 2>/dev/null | sed 's/^/   /'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    info = r.get("plan_info")
    if r.get("type") == "cell" and info and r["kernel"].startswith("torch_"):
        keys = ("compile_ms", "block_mask_ms", "torch_peak_bytes", "gqa", "mask")
        print(r["kernel"], r["mask"], r["seqlen"], r["pass"], {k: info[k] for k in keys if k in info})
EOF
exit "$status"
