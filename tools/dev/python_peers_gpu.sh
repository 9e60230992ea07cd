#!/usr/bin/env bash
# On the GPU machine, in one call: the Python-run peers (torch_flex, fa4, vsa_triton) and the
# torch_sdpa peers built through lca_add_python_peer / torch.cmake, and their GPU tests
# (test_torch_peers, test_fa4, test_vsa) run once each against cpu_reference.
# Needs .deps/cudnn_frontend and .deps/fastvideo_kernel (carried); test_fa4 runs its cases only
# where LCA_FA4_SITE names FA4's site folder (tools/dev/device_fa4.sh installs one), else skips.
# Usage: tools/dev/python_peers_gpu.sh        $OUT gets configure.log, build.log and one log a test.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-results/python_peers}
build=${BUILD_DIR:-build-gpu}
mkdir -p "$out"
deadline=${DEADLINE:-570}  # one device call runs at most 600 s
t0=$(date +%s)
left() { echo $(( deadline - ($(date +%s) - t0) )); }
stamp() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"

stamp "configure $build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCUDNN_FRONTEND_INCLUDE_DIR="$PWD/.deps/cudnn_frontend/include" -DBUILD_TESTING=ON \
  > "$out/configure.log" 2>&1 || { echo "CONFIGURE FAILED"; tail -30 "$out/configure.log"; exit 1; }
grep -E "^-- lca: " "$out/configure.log"

# Only the targets this configure made: a peer it left out is named above with the reason.
known=$(ninja -C "$build" -t targets all 2>/dev/null | cut -d: -f1)
targets=""
for t in lcahost lca_builtin lca_cpu_reference lca_torch_sdpa_flash lca_torch_sdpa_efficient \
         lca_torch_sdpa_cudnn lca_torch_flex lca_fa4 lca_vsa_triton test_torch_peers test_fa4 test_vsa; do
  grep -qx "$t" <<<"$known" && targets="$targets $t"
done
stamp "build:$targets"
cmake --build "$build" -j"$(nproc)" --target $targets > "$out/build.log" 2>&1 ||
  { echo "BUILD FAILED"; grep -E "error|FAILED" -A5 "$out/build.log" | head -60; }
"$build/bin/lcahost" --plugins "$build/plugins" list 2>&1 | tee "$out/lcahost_list.txt"

status=0
for t in vsa fa4 torch_peers; do
  bin="$build/tests/gpu/$t/test_$t"
  if [ ! -x "$bin" ]; then
    echo "=== test_$t: NOT BUILT"
    status=1
    continue
  fi
  budget=$(( $(left) - 10 ))
  if [ "$budget" -lt 30 ]; then
    echo "=== test_$t: NOT RUN (no time left; run again with BUILD_DIR kept, the build is incremental)"
    status=1
    continue
  fi
  stamp "test_$t (at most ${budget}s)"
  timeout "$budget" "$bin" > "$out/test_$t.log" 2>&1
  rc=$?
  [ "$rc" -ne 0 ] && status=1
  # Per case: the errors against the reference, failures, skips with their reason, the verdict.
  grep -E "^\[[a-z_0-9]+\] |Failure|FAILED|^\[  PASSED" "$out/test_$t.log" | head -80
  grep -A1 -E ": Skipped$" "$out/test_$t.log" | grep -vE ": Skipped$|^--$" | sort | uniq -c
  [ "$rc" -eq 124 ] && echo "=== test_$t: TIMED OUT"
  echo "=== test_$t exit $rc"
done
stamp "done (exit $status)"
exit $status
