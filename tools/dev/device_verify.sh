#!/usr/bin/env bash
# One device call that verifies every GPU part in turn, for a lease that allows few calls:
# configure build-gpu once (Hopper, Release, torch peers where torch is found), build flex_flash's
# targets, then build everything else in the background while flex_flash's SASS check and GPU
# tests run under each kernel variant; then a flex_flash vs cudnn_sdpa timing run, the GPU CP
# suite and the torch peers' tests, each only while time is left.
# Usage: tools/dev/device_verify.sh [PHASES]  (default "flex time cp torch"; DEADLINE=seconds, 560)
# Phases run in the order below, whatever the order given.
#   phases: flex (SASS check + tests under every variant; QUICK=1: the default variant only),
#   time (flex_flash vs cudnn_sdpa, kernels-16k), cp (GPU CP suite), torch (the peers' tests, with
#   a backtrace from cuda-gdb if the binary dies), peers (the peers beside flex_flash and
#   cudnn_sdpa in one lcahost run, PEER_MASKS, default full,causal,causal_document), sanitize
#   (compute-sanitizer memcheck / racecheck / synccheck on three small cases, default kernels and
#   SANITIZE_VARIANT, flex_flash options as option=value pairs, default backward=sm90_atomic),
#   variant (tests under VARIANT, default backward=sm90_atomic, then one timing run of flex_flash
#   with and without it beside cudnn_sdpa), torchdiag (the libraries and symbol bindings of the torch
#   peers' test process, LD_DEBUG), ncu (Nsight Compute on one launch of the Hopper forward and
#   backward, NCU_MASK at 16K, NCU_OPTIONS: flex_flash's options as JSON), long512 (long-512k-all with
#   LONG_KERNELS, default flex_flash), paper (paper-dense with PAPER_KERNELS, default flex_flash,
#   cudnn_sdpa and every torch peer built, on PAPER_MASKS, default all, with PAPER_ARGS, default
#   "--warmup 1 --repeats 5"; resumes results/device/paper-dense.jsonl when it is there).
# Every log goes to results/device/ and, after each phase, into $OUT/logs.tgz (the device tool
# brings back only a few files); the short summary is on stdout.
set -uo pipefail
cd "$(dirname "$0")/../.."
phases=${1:-flex time cp torch}
deadline=${DEADLINE:-560}
final_out=${OUT:-results}
work=results/device
mkdir -p "$work" "$final_out"
export OUT="$work" NCCL_NVLS_ENABLE=0
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }
left() { echo $(( deadline - $(elapsed) )); }
stamp() { echo "[$(elapsed)s] $*"; }
save() { tar czf "$final_out/logs.tgz" -C "$work" . 2>/dev/null; }
has() { [[ " $phases " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv,noheader
echo "root $PWD, $(nproc) cores, revision ${LCA_REVISION:-$(git describe --always --dirty 2>/dev/null || echo unknown) (from the copied .git)}"
# LCA_REVISION: the revision the shipped tree really is (`git describe --always --dirty` where it
# was sent from; this copy's .git may be stale), for the run records.
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCUDNN_FRONTEND_INCLUDE_DIR="$PWD/.deps/cudnn_frontend/include" -DLCA_WITH_TORCH=AUTO \
  -DLCA_GIT_REVISION="${LCA_REVISION:-}" \
  > "$work/configure.log" 2>&1 || { tail -30 "$work/configure.log"; save; exit 1; }
grep -E "^-- lca: " "$work/configure.log" | sed 's/^-- /   /'
stamp "configured"
cmake --build build-gpu -j"$(nproc)" --target lcahost lca_flex_flash lca_cudnn_sdpa lca_cuda_reference \
  lca_builtin lca_cpu_reference test_flex_flash > "$work/build-flex.log" 2>&1 ||
  { grep -E "error|FAILED" -A5 "$work/build-flex.log" | head -40; save; exit 1; }
stamp "flex_flash built"
nice -n 10 cmake --build build-gpu -j"$(nproc)" > "$work/build-all.log" 2>&1 &
build_all=$!

if has flex && [ "${QUICK:-0}" = 1 ]; then
  build-gpu/tests/gpu/flex_flash/test_flex_flash > "$work/test_flex_flash_default.log" 2>&1
  echo "tests, default variant: $(grep -E "PASSED|FAILED TESTS" "$work/test_flex_flash_default.log" | tr '\n' ' ')"
  stamp "flex_flash tests done"
  save
elif has flex; then
  SKIP_BUILD=1 timeout "$(left)" bash tools/flex_dev.sh none
  stamp "flex_flash tests done"
  save
fi
wait "$build_all"
build_status=$?
stamp "full build exit $build_status"
[ "$build_status" = 0 ] || grep -E "error|FAILED" -A5 "$work/build-all.log" | head -40
save

if has time && [ "$(left)" -gt 90 ]; then
  # flex_flash's default kernels beside cudnn_sdpa, one run, same inputs.
  masks=${TIME_MASKS:-full,causal,causal_document,sliding_window_causal,shared_question,block_sparse}
  SKIP_BUILD=1 SKIP_TESTS=1 timeout "$(left)" \
    bash tools/flex_dev.sh kernels-16k --masks "$masks" | tail -25
  stamp "timing done"
  save
fi
if has cp && [ "$(left)" -gt 60 ]; then
  SKIP_BUILD=1 timeout "$(left)" bash tools/cp_gpu_dev.sh
  stamp "cp done"
  save
fi
if has torch && [ "$(left)" -gt 30 ]; then
  SKIP_BUILD=1 timeout "$(left)" bash tools/torch_dev.sh none
  stamp "torch tests done"
  # A binary that died leaves no verdict: run torch_flex's cases again under cuda-gdb.
  if grep -q "free()\|Aborted\|Segmentation" results/torch_dev/test_torch_peers*.log 2>/dev/null; then
    if command -v cuda-gdb > /dev/null && [ "$(left)" -gt 60 ]; then
      timeout 90 cuda-gdb -batch -ex run -ex bt --args build-gpu/tests/gpu/torch_peers/test_torch_peers \
        --gtest_filter='*Flex*' > "$work/torch_peers_backtrace.log" 2>&1
      grep -E "^#[0-9]+ " "$work/torch_peers_backtrace.log" | head -25 | cut -c1-200
    fi
  fi
  save
fi
if has sanitize && [ "$(left)" -gt 60 ]; then
  # compute-sanitizer (memcheck, racecheck, synccheck) on three small hand cases (d128 causal with
  # GQA, d64 f16 with rows shared by slices, d128 with empty rows), under the default kernels and
  # under SANITIZE_VARIANT (default backward=sm90_atomic).
  cases='Masks/FlexFlashHand.MatchesCpuReference/causal_1000_gqa2_d128_bf16'
  cases+=':Masks/FlexFlashHand.MatchesCpuReference/shared_rows_300_gqa1_d64_f16'
  cases+=':Masks/FlexFlashHand.MatchesCpuReference/empty_rows_1000_gqa3_d128_f16'
  for variant in "" "${SANITIZE_VARIANT:-backward=sm90_atomic}"; do
    for tool in memcheck racecheck synccheck; do
      [ "$(left)" -gt 30 ] || break 2
      tag=${variant:-default}
      log="$work/sanitize_${tool}_${tag//[=,]/_}.log"
      LCA_FLEX_TEST_OPTIONS="$variant" timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 \
        build-gpu/tests/gpu/flex_flash/test_flex_flash --gtest_filter="$cases" > "$log" 2>&1
      echo "sanitize $tool, $tag: exit $? ($(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED TESTS" "$log" | tr '\n' ' ' | cut -c1-150))"
    done
  done
  stamp "sanitize done"
  save
fi
if has variant && [ "$(left)" -gt 60 ]; then
  # A kernel variant (VARIANT, flex_flash options as option=value pairs, default
  # backward=sm90_atomic): the GPU tests under it, then one timing run of flex_flash with the variant
  # (labelled flex_variant) and without it beside cudnn_sdpa, on the same inputs.
  variant=${VARIANT:-backward=sm90_atomic}
  tag=${variant//[=,]/_}
  options=$(python3 -c 'import json, sys; print(json.dumps(dict(p.split("=", 1) for p in sys.argv[1].split(",") if p)))' "$variant")
  python3 - "$options" > "$work/variant-matrix.json" <<'PY'
import json, sys
spec = json.load(open("manifests/matrices/kernels-16k.json"))
spec["kernels"] = ["flex_flash", {"kernel": "flex_flash", "options": json.loads(sys.argv[1]), "label": "flex_variant"},
                   "cudnn_sdpa"]
spec.pop("exclude_kernels", None)
print(json.dumps(spec, indent=1))
PY
  LCA_FLEX_TEST_OPTIONS="$variant" build-gpu/tests/gpu/flex_flash/test_flex_flash > "$work/test_flex_flash_$tag.log" 2>&1
  echo "tests, $variant: $(grep -E "PASSED|FAILED TESTS" "$work/test_flex_flash_$tag.log" | tr '\n' ' ')"
  grep -E "FAILED  \]" "$work/test_flex_flash_$tag.log" | cut -c1-110 | head -10
  if grep -q PASSED "$work/test_flex_flash_$tag.log" && [ "$(left)" -gt 60 ]; then
    timeout "$(left)" build-gpu/bin/lcahost --plugins build-gpu/plugins \
      --matrix "$work/variant-matrix.json" --masks "${VARIANT_MASKS:-full,causal,causal_document}" \
      --out "$work/flex-kernels-16k-$tag.jsonl" --force 2>&1 | tee "$work/run-$tag.log" | grep -v " X  " | tail -12
  fi
  stamp "variant $variant done"
  save
fi
if has ncu && [ "$(left)" -gt 60 ]; then
  # Nsight Compute on one launch of each Hopper kernel (NCU_MASK at 16K, default full; NCU_OPTIONS
  # picks variants): throughput against the GPU's peaks, tensor-pipe use, L2 / shared traffic
  # and the warps' stall reasons. Clocks are locked to base under ncu: read ratios, not rates.
  ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -z "$ncu_bin" ]; then
    echo "ncu: not found"
  else
    for kernel in forward_sm90_kernel backward_sm90_kernel; do
      [ "$(left)" -gt 40 ] || break
      log="$work/ncu_$kernel.log"
      timeout "$(( $(left) - 10 ))" "$ncu_bin" --kernel-name "regex:$kernel" \
        --launch-count 1 --print-details all --section SpeedOfLight --section ComputeWorkloadAnalysis \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy \
        build-gpu/bin/lcahost --plugins build-gpu/plugins --matrix kernels-16k --kernels flex_flash \
        ${NCU_OPTIONS:+--kernel-options "flex_flash=$NCU_OPTIONS"} --masks "${NCU_MASK:-full}" --no-check --warmup 0 --repeats 1 > "$log" 2>&1
      echo "ncu $kernel: exit $?"
      grep -E "==ERR|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|DRAM Throughput|Executed Ipc A|Issue Slots Busy|Registers Per|Shared Memory Configuration Size|Achieved Occupancy|Stall|One or More Eligible|No Eligible|Active Warps Per|Eligible Warps Per|Warp Cycles Per Issued" "$log" | cut -c1-150 | head -40
    done
  fi
  stamp "ncu done"
  save
fi
if has torchdiag && [ "$(left)" -gt 60 ]; then
  # The libraries of the torch peers' test process: which libstdc++ copies it maps, what the
  # plugins export, and who binds std::locale's destructor to which (LD_DEBUG). This found the
  # 2026-11-23 abort: plugins exporting a statically linked libstdc++ (sdk/cmake/lcaPlugin.cmake).
  bin=build-gpu/tests/gpu/torch_peers/test_torch_peers
  diag="$work/torchdiag.txt"
  {
    echo "== LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    cat /etc/ld.so.conf /etc/ld.so.conf.d/* 2>/dev/null | grep -v '^#'
    ls -la /opt/gcc/lib64/libstdc++.so* /lib/x86_64-linux-gnu/libstdc++.so* 2>&1
    echo "== ldd test_torch_peers"; ldd "$bin" | grep -E "stdc|gcc_s|python|torch|c10"
    for so in build-gpu/plugins/liblca_torch_sdpa_flash.so build-gpu/plugins/liblca_torch_flex.so; do
      echo "== $so"; readelf -d "$so" | grep -E "NEEDED|RPATH|RUNPATH"
      echo "defined std::locale symbols: $(nm -DC --defined-only "$so" | grep -c 'std::locale')"
      ldd "$so" | grep -E "stdc|gcc_s"
    done
    tp=$(ls /opt/torch/.venv/lib/python3*/site-packages/torch/lib/libtorch_python.so 2>/dev/null | head -1)
    [ -n "$tp" ] && { echo "== $tp"; readelf -d "$tp" | grep -E "NEEDED|RPATH|RUNPATH"; }
  } > "$diag" 2>&1
  rm -f "$work"/ld.*
  LD_DEBUG=files,bindings LD_DEBUG_OUTPUT="$work/ld" timeout 240 "$bin" \
    --gtest_filter='TorchSdpaRefusal.*:TorchFlexBuiltin.*' > "$work/torchdiag_run.log" 2>&1
  echo "torchdiag run exit $? ($(tail -1 "$work/torchdiag_run.log"))"
  {
    echo "== libstdc++ / libgcc_s loads"; grep -h "file=.*\(libstdc\|libgcc_s\)" "$work"/ld.* | sort | uniq -c | head -20
    echo "== who binds std::locale's destructors, to which"
    grep -h "_ZNSt6localeD[12]Ev\|_ZNSt6locale5_ImplD[12]Ev" "$work"/ld.* | sed 's/^ *[0-9]*: *//' | sort | uniq -c | sort -rn | head -40
    echo "== fini calls (unloads)"; grep -h "calling fini" "$work"/ld.* | head -40
  } >> "$diag" 2>&1
  rm -f "$work"/ld.*
  sed -n '/== libstdc/,$p' "$diag" | head -60 | cut -c1-220
  stamp "torchdiag done"
  save
fi
if has long512 && [ "$(left)" -gt 60 ]; then
  # Does every pattern fit at 512K (flex_flash, fwd and bwd, one repeat)? --resume goes on after a cut.
  f="$work/flex-long-512k-all.jsonl"
  if [ -f "$f" ]; then io=(--resume "$f"); else io=(--out "$f"); fi
  timeout "$(left)" build-gpu/bin/lcahost --plugins build-gpu/plugins --matrix long-512k-all \
    --kernels "${LONG_KERNELS:-flex_flash}" "${io[@]}" 2>&1 | tee -a "$work/run-long512.log" | tail -32
  stamp "long512 done"
  save
fi
if has peers && [ "$(left)" -gt 60 ]; then
  peers=$(ls build-gpu/plugins/ | sed -n 's/^liblca_\(torch_[a-z_]*\)\.so$/\1/p' | paste -sd, -)
  timeout "$(left)" build-gpu/bin/lcahost --plugins build-gpu/plugins --matrix kernels-16k \
    --kernels "flex_flash,cudnn_sdpa,$peers" --masks "${PEER_MASKS:-full,causal,causal_document}" \
    --out "$work/peers-kernels-16k.jsonl" --force 2>&1 | grep -v " X  " | tail -40
  stamp "peers run done"
  save
fi
if has paper && [ "$(left)" -gt 60 ]; then
  f="$work/paper-dense.jsonl"
  if [ -f "$f" ]; then io=(--resume "$f"); else io=(--out "$f"); fi
  peers=$(ls build-gpu/plugins/ | sed -n 's/^liblca_\(torch_[a-z_]*\)\.so$/\1/p' | paste -sd, -)
  kernels=${PAPER_KERNELS:-flex_flash,cudnn_sdpa${peers:+,$peers}}
  # shellcheck disable=SC2086  # PAPER_ARGS is a list of options
  timeout "$(left)" build-gpu/bin/lcahost --plugins build-gpu/plugins --matrix paper-dense \
    --kernels "$kernels" ${PAPER_MASKS:+--masks "$PAPER_MASKS"} ${PAPER_ARGS:---warmup 1 --repeats 5} "${io[@]}" \
    2>&1 | tee -a "$work/run-paper.log" | grep -v " X  " | tail -30
  stamp "paper-dense: $(grep -c '"type":"cell"' "$f" 2>/dev/null) cells in the file"
  save
fi
stamp "end"
save
