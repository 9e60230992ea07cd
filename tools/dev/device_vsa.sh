#!/usr/bin/env bash
# On the GPU machine, in one call: builds vsa_triton (VSA's Triton kernels) with what its tests and
# the comparison need, runs its CPU and GPU tests, then vsa_triton beside flex_flash and torch_flex
# on the block-sparse cells with checks, and writes the results, the comparison and the report.
# Needs VSA's source in .deps/fastvideo_kernel (tools/setup.sh, where the tree was sent from):
# carry .deps. Build time of the plugin alone is printed ("vsa_triton built in N s").
# Usage: tools/dev/device_vsa.sh [MATRIX]
#   MATRIX: tools/dev/matrices/vsa-sparse.json (default: 32K and 64K, MHA, 6 masks, ~4 min) or a
#           preset such as paper-sparse (the whole preset, 32K-128K with GQA: far longer than a call)
#   DEADLINE=seconds (default 560): the matrix stops in time for the report; RESUME=1 continues
#   the results file of the same matrix (results/vsa/, kept on a warm machine) in a later call;
#   SKIP_BUILD=1, SKIP_TESTS=1 skip those stages; LCAHOST_ARGS adds lcahost arguments to the run
#   (e.g. "--warmup-ms 300 --repeat-ms 300" to fit a whole preset in fewer calls).
# Everything lands in results/vsa/; to $OUT go summary.txt (this output), the results .jsonl,
# compare.md (tools/dev/vsa_compare.py), report.tgz (lcahost report) and logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
deadline=${DEADLINE:-560}
matrix=${1:-tools/dev/matrices/vsa-sparse.json}
work=results/vsa
out=${OUT:-$work}
build=${BUILD_DIR:-build-gpu}
mkdir -p "$work" "$out"
name=$(basename "$matrix" .json)
results="$work/vsa-$name.jsonl"
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }
stamp() { echo "[$(elapsed)s] == $*"; }

main() {
stamp "environment"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv,noheader
python3 - <<'EOF' 2>&1 | sed 's/^/   /'
import sys, os, sysconfig
print("python", sys.version.split()[0], sys.executable, "Python.h",
      "present" if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else "MISSING")
try:
    import torch, triton
    print("torch", torch.__version__, "CUDA", torch.version.cuda, "triton", triton.__version__)
except Exception as e:
    print("torch/triton: cannot import:", e)
EOF
if [ -f .deps/fastvideo_kernel/VERSION ]; then
  head -1 .deps/fastvideo_kernel/VERSION | sed 's/^/   fastvideo-kernel /'
else
  echo "   .deps/fastvideo_kernel is missing: run tools/setup.sh where the tree comes from and carry .deps"
fi

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  stamp "configure ($build)"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCUDNN_FRONTEND_INCLUDE_DIR="$PWD/.deps/cudnn_frontend/include" -DLCA_WITH_TORCH=AUTO \
    > "$work/configure.log" 2>&1 || { tail -30 "$work/configure.log"; return 1; }
  grep -E "^-- lca: " "$work/configure.log" | sed 's/^-- /   /'
  known=$(ninja -C "$build" -t targets all 2>/dev/null | cut -d: -f1)
  if grep -qx lca_vsa_triton <<<"$known"; then
    b0=$(date +%s)
    cmake --build "$build" -j"$(nproc)" --target lca_vsa_triton > "$work/build-vsa.log" 2>&1 ||
      grep -E "error|FAILED" -A5 "$work/build-vsa.log" | head -40
    echo "   vsa_triton built in $(( $(date +%s) - b0 )) s ($(grep -c '^\[' "$work/build-vsa.log") steps)"
  else
    echo "   vsa_triton is not a target of this configure (the reason is above); tests and runs go on without it"
  fi
  targets=""
  for t in lcahost lca_builtin lca_cpu_reference lca_cuda_reference lca_flex_flash lca_torch_flex \
           test_vsa test_vsa_blocks; do
    grep -qx "$t" <<<"$known" && targets="$targets $t"
  done
  stamp "build:$targets"
  cmake --build "$build" -j"$(nproc)" --target $targets > "$work/build.log" 2>&1 ||
    { grep -E "error|FAILED" -A5 "$work/build.log" | head -60; echo "   build failed: what was built goes on"; }
fi

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  for t in unit/vsa_blocks/test_vsa_blocks gpu/vsa/test_vsa; do
    bin="$build/tests/$t"
    if [ -x "$bin" ]; then
      stamp "$(basename "$t")"
      timeout 300 "$bin" > "$work/$(basename "$t").log" 2>&1
      echo "   exit $?"
      grep -E "^\[vsa_triton\]|^\[ plan_info \]|Failure|FAILED|PASSED|SKIPPED|Expected|Which is|error" \
        "$work/$(basename "$t").log" | cut -c1-400 | head -60
    else
      echo "   $t not built"
    fi
  done
fi

[ "$matrix" = none ] && return 0
stamp "lcahost --matrix $matrix (results $results)"
[ -x "$build/bin/lcahost" ] || { echo "   lcahost not built"; return 1; }
kernels=""
for k in flex_flash torch_flex vsa_triton; do
  if [ -f "$build/plugins/liblca_$k.so" ]; then kernels="$kernels${kernels:+,}$k"; else echo "   $k not built: left out"; fi
done
if [ "${RESUME:-0}" = 1 ] && [ -f "$results" ]; then io=(--resume "$results"); else io=(--out "$results" --force); fi
left=$(( deadline - $(elapsed) - 40 ))
if [ "$left" -lt 30 ]; then
  echo "   no time left for the matrix ($left s); run again with SKIP_BUILD=1 SKIP_TESTS=1 on the warm machine"
else
  timeout --signal=INT --kill-after=15 "$left" "$build/bin/lcahost" --plugins "$build/plugins" \
    --matrix "$matrix" --kernels "$kernels" "${io[@]}" ${LCAHOST_ARGS:-} > "$work/run.log" 2>&1
  status=$?
  grep -v -E "^\s*$" "$work/run.log" | grep -v " X " | tail -80 | cut -c1-220
  [ "$status" = 124 ] && echo "   stopped at the deadline: RESUME=1 SKIP_BUILD=1 SKIP_TESTS=1 $0 $* finishes it"
  echo "   lcahost exit $status"
fi

if [ -f "$results" ]; then
  stamp "comparison (tools/dev/vsa_compare.py)"
  python3 tools/dev/vsa_compare.py "$results" | tee "$work/compare.md"
  stamp "report"
  rm -rf "$work/report"
  if "$build/bin/lcahost" report "$results" --out "$work/report" > "$work/report.log" 2>&1; then
    tar czf "$out/report.tgz" -C "$work" report && echo "   report.tgz (summary.md and charts)"
  else
    tail -3 "$work/report.log"
    python3 tools/results_table.py "$results" > "$work/table.md" 2>>"$work/report.log" &&
      cp "$work/table.md" "$out/" && echo "   table.md (no charts: $(tail -1 "$work/report.log"))"
  fi
fi
stamp "done"
}

# One failure stops no later stage that can still run; whatever was made goes to $OUT.
main "$@" 2>&1 | tee "$work/summary.txt"
status=${PIPESTATUS[0]}
tar czf "$out/logs.tgz" -C "$work" --exclude='*.jsonl' --exclude=report --exclude=summary.txt . 2>/dev/null
if [ "$out" != "$work" ]; then
  for f in "$results" "$work/compare.md" "$work/summary.txt"; do [ -f "$f" ] && cp "$f" "$out/"; done
fi
exit "$status"
