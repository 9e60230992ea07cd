#!/usr/bin/env bash
# fa4 on a GPU machine without network, over several back-to-back device calls: FA4's site folder
# travels as parts (tools/fetch_fa4.sh cuts it; one part per call, each under the per-call limit)
# that are moved out of the tree as they arrive, then joined, checked and unpacked there.
# Usage: tools/dev/device_fa4.sh [PHASE ...]   (default: build install tests matrix; DEADLINE=570 s)
# Every call first moves any carried .deps/fa4/part-NN out of the tree into $FA4_PARTS (default
# /root/fa4-parts): a carried path that the next call does not carry is removed from the tree.
#   build    configure build-gpu (Hopper, Release, torch peers) and build lcahost, fa4 and its test,
#            flex_flash, cudnn_sdpa and the reference plugins
#   install  all parts present: check their sums, unpack into $LCA_FA4_SITE (default /root/fa4-site)
#            and import FA4 there once
#   tests    test_fa4 (the GPU tests: hand-built masks and the 14 builtin patterns against the
#            reference); FA4's compiled kernels go to its disk cache ($FLASH_ATTENTION_CUTE_DSL_CACHE_DIR,
#            default /root/fa4-cache) for the matrix after it
#   matrix   tools/dev/matrices/fa4-dense.json: fa4, flex_flash and cudnn_sdpa, 7 masks, 16K-128K,
#            fwd and bwd, checks on (MATRIX_ARGS adds lcahost arguments); resumes its own .jsonl
# The call sequence with its carry lists: plugins/kernels/fa4/README.md, Device.
# $OUT gets fa4-dense.jsonl, summary.md (lcahost report), test_fa4.log and logs.tgz (every log).
set -uo pipefail
cd "$(dirname "$0")/../.."
phases=" ${*:-build install tests matrix} "
deadline=${DEADLINE:-570}
parts=${FA4_PARTS:-/root/fa4-parts}
export LCA_FA4_SITE=${LCA_FA4_SITE:-/root/fa4-site}
export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1
export FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=${FLASH_ATTENTION_CUTE_DSL_CACHE_DIR:-/root/fa4-cache}
export NCCL_NVLS_ENABLE=0
final_out=${OUT:-results/fa4}
work=results/fa4-device
mkdir -p "$work" "$final_out" "$parts" "$FLASH_ATTENTION_CUTE_DSL_CACHE_DIR"
t0=$(date +%s)
left() { echo $(( deadline - ($(date +%s) - t0) )); }
stamp() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }
save() { tar czf "$final_out/logs.tgz" -C "$work" . 2>/dev/null; }
has() { [[ "$phases" == *" $1 "* ]]; }
status=0

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
echo "phases:$phases; root $PWD, revision ${LCA_REVISION:-$(git describe --always --dirty 2>/dev/null || echo unknown)}"

# ---- parts: out of the tree as they arrive ----------------------------------------------------
for dir in .deps/fa4/part-*; do
  [ -d "$dir" ] || continue
  cp "$dir"/SHA256SUMS "$parts/SHA256SUMS"
  for f in "$dir"/fa4-site.tar.xz.*; do
    [ -f "$f" ] && mv -f "$f" "$parts/" && echo "stashed $(basename "$f") in $parts"
  done
done
need=$(awk '$1 == "parts" {print $2}' "$parts/SHA256SUMS" 2>/dev/null)
have=$(ls "$parts" 2>/dev/null | grep -c '^fa4-site.tar.xz\.' || true)
echo "parts in $parts: $have of ${need:-? (no SHA256SUMS yet)}"

# ---- build -------------------------------------------------------------------------------------
if has build; then
  stamp "build"
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCUDNN_FRONTEND_INCLUDE_DIR="$PWD/.deps/cudnn_frontend/include" -DLCA_WITH_TORCH=AUTO \
    -DLCA_GIT_REVISION="${LCA_REVISION:-}" > "$work/configure.log" 2>&1 ||
    { echo "CONFIGURE FAILED"; tail -30 "$work/configure.log"; save; exit 1; }
  grep -E "^-- lca: (fa4|torch_flex|cudnn)" "$work/configure.log" | sed 's/^-- /   /'
  targets=(lcahost lca_flex_flash lca_cudnn_sdpa lca_cuda_reference lca_builtin lca_cpu_reference)
  grep -q "lca: fa4 with" "$work/configure.log" && targets+=(lca_fa4 test_fa4) || echo "FA4 PLUGIN NOT CONFIGURED (reason above)"
  timeout "$(left)" cmake --build build-gpu -j"$(nproc)" --target "${targets[@]}" > "$work/build.log" 2>&1
  rc=$?
  if [ "$rc" != 0 ]; then
    echo "BUILD FAILED (exit $rc; 124: out of time, run the same call again to go on)"
    grep -E "error|FAILED" -A5 "$work/build.log" | head -40
    save; exit 1
  fi
  stamp "built ${targets[*]}"
fi

# ---- install -----------------------------------------------------------------------------------
if has install; then
  stamp "install"
  if [ -z "$need" ] || [ "$have" -lt "$need" ]; then
    missing=""
    for ((i = 0; i < ${need:-1}; i++)); do
      n=$(printf %02d "$i")
      [ -f "$parts/fa4-site.tar.xz.$n" ] || missing+=" .deps/fa4/part-$n"
    done
    echo "INSTALL WAITS: missing$missing; carry each in a call of its own, back to back (the machine keeps"
    echo "  $parts only while warm: 30 s after a call)"
    save; exit 3
  fi
  if ! (cd "$parts" && grep -v '^parts ' SHA256SUMS | sha256sum -c --quiet); then
    echo "INSTALL FAILED: a part does not match its sum (from another fetch?); rerun tools/fetch_fa4.sh and carry all parts again"
    save; exit 1
  fi
  rm -rf "$LCA_FA4_SITE" && mkdir -p "$LCA_FA4_SITE"
  if command -v xz > /dev/null; then
    cat "$parts"/fa4-site.tar.xz.* | xz -d | tar -x -C "$LCA_FA4_SITE"
  else
    cat "$parts"/fa4-site.tar.xz.* | python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)" |
      tar -x -C "$LCA_FA4_SITE"
  fi || { echo "INSTALL FAILED: unpacking"; save; exit 1; }
  echo "site folder $LCA_FA4_SITE: $(du -sh "$LCA_FA4_SITE" | cut -f1)"
  python3 - "$LCA_FA4_SITE" > "$work/import.log" 2>&1 <<'EOF'
import site, sys, time
t0 = time.time()
sys.path.insert(0, sys.argv[1]); site.addsitedir(sys.argv[1])
import torch
from importlib.metadata import version
from flash_attn.cute import interface
print(f"import ok in {time.time() - t0:.1f} s: flash-attn-4 {version('flash-attn-4')}, nvidia-cutlass-dsl "
      f"{version('nvidia-cutlass-dsl')}, torch {torch.__version__}, cuda.bindings from "
      f"{__import__('cuda.bindings').bindings.__file__}, torch DLPack exchange API "
      f"{hasattr(torch.Tensor, '__dlpack_c_exchange_api__')}")
EOF
  rc=$?
  cat "$work/import.log" | tail -5
  [ "$rc" = 0 ] || { echo "INSTALL FAILED: FA4 does not import (above)"; save; exit 1; }
  stamp "installed"
fi

# ---- tests -------------------------------------------------------------------------------------
if has tests; then
  stamp "tests"
  if [ ! -x build-gpu/tests/gpu/fa4/test_fa4 ]; then
    echo "TESTS: build-gpu/tests/gpu/fa4/test_fa4 is missing (build phase not run, or fa4 not configured)"; status=1
  else
    timeout "$(left)" build-gpu/tests/gpu/fa4/test_fa4 > "$work/test_fa4.log" 2>&1
    rc=$?
    grep -E "^\[fa4\]|^\[ plan_info|FAILED|PASSED|SKIPPED|Failure" "$work/test_fa4.log" | cut -c1-300 | head -60
    echo "test_fa4 exit $rc"
    [ "$rc" = 0 ] || status=1
    cp "$work/test_fa4.log" "$final_out/"
  fi
  save
  stamp "tests done"
fi

# ---- matrix ------------------------------------------------------------------------------------
if has matrix; then
  stamp "matrix"
  [ -d "$LCA_FA4_SITE/flash_attn" ] ||
    echo "MATRIX: no FA4 in $LCA_FA4_SITE (the machine went cold?): fa4's cells will fail; the others run"
  jsonl="$work/fa4-dense.jsonl"
  if [ -s "$jsonl" ]; then resume=(--resume "$jsonl"); else resume=(--out "$jsonl"); fi
  kernels=""
  for k in fa4 flex_flash cudnn_sdpa; do
    [ -f "build-gpu/plugins/liblca_$k.so" ] && kernels+="${kernels:+,}$k" || echo "MATRIX: $k was not built"
  done
  # Stopped 40 s before the call's deadline, so that the table and the files still come back.
  timeout "$(( $(left) - 40 ))" build-gpu/bin/lcahost --plugins build-gpu/plugins \
    --matrix tools/dev/matrices/fa4-dense.json --kernels "$kernels" "${resume[@]}" ${MATRIX_ARGS:-} \
    > "$work/matrix.log" 2>&1
  rc=$?
  echo "lcahost exit $rc (124: out of time; the same call again resumes)"
  grep -E "ERROR|FAIL" "$work/matrix.log" | head -20
  cp "$jsonl" "$final_out/" 2>/dev/null
  if [ -s "$jsonl" ]; then
    python3 tools/results_table.py "$jsonl" > "$work/table.md" 2>&1 && cat "$work/table.md"
    echo "--- TFLOP/s over fa4's, per cell (flex_flash >= 1 where it leads):"
    python3 tools/dev/kernel_ratio.py --base fa4 "$jsonl" 2>&1 | tee "$work/ratio.txt" | tail -70
    build-gpu/bin/lcahost report "$jsonl" --out "$work/report" > "$work/report.log" 2>&1 &&
      cp "$work/report/summary.md" "$final_out/summary.md"
  fi
  [ "$rc" = 0 ] || status=1
  save
  stamp "matrix done"
fi
exit $status
