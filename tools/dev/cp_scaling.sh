#!/usr/bin/env bash
# One call on a machine of several GPUs for the CP balance and scaling work: build what GPU CP
# needs, check balanced on the GPU (test_cp_gpu under NCCL) and every strategy on every mask
# (cp-gpu-quick, checked), time cp-balance on all GPUs beside its one-GPU baseline at the whole
# length, probe the communicator, and repeat a subset with NCCL kept off NVLink and shared
# memory (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1) for the scaling model's validation.
# Usage: tools/dev/cp_scaling.sh [PHASES]  (default "build test quick balance probe offlink"; also
#   "options": balanced with its defaults against each of BALANCED_OPTIONS, one JSON object each
#   separated by spaces (default '{"one_call":false}' '{"balance_by":"tiles"}'), on cp-balance's
#   document masks (BALANCE_MASKS narrows them), TFLOP/s side by side)
#   NP (default: every GPU), DEADLINE (seconds, default 560): a phase starts only while time is left;
#   BALANCE_MASKS narrows cp-balance (default all), OFFLINK_MASKS the off-NVLink subset; SKIP_NP1=1
#   skips the one-GPU baseline (when one from the same kind of machine is at hand); LCAHOST_ARGS
#   adds lcahost arguments to the timed runs (e.g. --warmup-ms 100).
# Results (.jsonl) and logs go to results/cp-scaling/ and, after each phase, into $OUT/cp.tgz; the
# summary is on stdout.
set -uo pipefail
cd "$(dirname "$0")/../.."
phases=${1:-build test quick balance probe offlink}
deadline=${DEADLINE:-560}
final_out=${OUT:-results}
work=results/cp-scaling
mkdir -p "$work" "$final_out"
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
left() { echo $(( deadline - ($(date +%s) - t0) )); }
# A long run ends before the deadline (what it wrote stays: records are written as cells end).
bounded() { timeout -s TERM "$(( $(left) > 30 ? $(left) - 20 : 10 ))" "$@"; }
pack() { tar czf "$final_out/cp.tgz" -C "$work" . 2>/dev/null; }
has() { [[ " $phases " == *" $1 "* ]]; }
export NCCL_NVLS_ENABLE=0
np=${NP:-$(nvidia-smi -L | wc -l)}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$work/gpu.txt"
git log -1 --format='tree %h %s' 2>/dev/null | cut -c1-100 | tee "$work/commit.txt"
mpi=(mpirun --allow-run-as-root --oversubscribe -x NCCL_NVLS_ENABLE -x LCA_ALLOC_CACHE)
host=(build-gpu/bin/lcahost --plugins build-gpu/plugins)
status=0

if has build; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DLCA_WITH_TORCH=OFF \
    -DCUDNN_FRONTEND_INCLUDE_DIR="$PWD/.deps/cudnn_frontend/include" > "$work/configure.log" 2>&1 ||
    { tail -30 "$work/configure.log"; pack; exit 1; }
  cmake --build build-gpu -j"$(nproc)" --target lcahost lca_ulysses lca_ring_p2p lca_ring_allgather lca_usp \
    lca_loongtrain lca_balanced lca_flex_flash lca_cuda_reference lca_cpu_reference lca_builtin test_cp_gpu \
    > "$work/build.log" 2>&1 || { grep -E "error|FAILED" -A5 "$work/build.log" | head -60; pack; exit 1; }
  stamp "build ok"
fi

if has test && [ "$(left)" -gt 60 ]; then
  # balanced's GPU cases (every mask near 1K tokens, five option sets) under NCCL on all GPUs.
  bounded "${mpi[@]}" -np "$np" build-gpu/tests/mpi/cp_gpu/test_cp_gpu --gtest_filter='*Balanced*' > "$work/test-balanced.log" 2>&1 ||
    status=1
  grep -E "OK \]|FAILED|PASSED|Failure" "$work/test-balanced.log" | sort | uniq -c | head -20
  stamp "test_cp_gpu balanced at np $np (status $status)"
  pack
fi

if has quick && [ "$(left)" -gt 60 ]; then
  bounded "${mpi[@]}" -np "$np" "${host[@]}" --cp '*' --cp-kernel flex_flash --matrix cp-gpu-quick \
    --out "$work/cp-gpu-quick-np$np.jsonl" --force > "$work/quick.log" 2>&1 || status=1
  grep -E "^# summary|FAIL|ERROR" "$work/quick.log" | head -20
  stamp "cp-gpu-quick np $np (status $status)"
  pack
fi

if has balance && [ "$(left)" -gt 90 ]; then
  bm=()
  [ -n "${BALANCE_MASKS:-}" ] && bm=(--masks "$BALANCE_MASKS")
  total=$((32768 * np))
  if [ "${SKIP_NP1:-0}" != 1 ]; then
    bounded "${host[@]}" --matrix cp-balance --seqlens "$total" "${bm[@]}" ${LCAHOST_ARGS:-} \
      --out "$work/cp-balance-np1-$total.jsonl" --force > "$work/balance-np1.log" 2>&1 || status=1
    grep -E "^# summary" "$work/balance-np1.log"
    stamp "cp-balance one GPU at $total"
    pack
  fi
  bounded "${mpi[@]}" -np "$np" "${host[@]}" --cp '*' --cp-kernel flex_flash --matrix cp-balance "${bm[@]}" ${LCAHOST_ARGS:-} \
    --out "$work/cp-balance-np$np.jsonl" --force > "$work/balance-np$np.log" 2>&1 || status=1
  grep -E "^# summary|FAIL|ERROR" "$work/balance-np$np.log" | head
  stamp "cp-balance np $np"
  pack
fi

if has options && [ "$(left)" -gt 90 ]; then
  dm=${BALANCE_MASKS:-$(python3 -c "import json; print(','.join(m for m in json.load(open('manifests/matrices/cp-balance.json'))['masks'] if m not in ('full', 'causal')))")}
  opts=("{}")
  if [ -n "${BALANCED_OPTIONS:-}" ]; then read -r -a more <<< "$BALANCED_OPTIONS"; else more=('{"one_call":false}' '{"balance_by":"tiles"}'); fi
  opts+=("${more[@]}")
  files=()
  for i in "${!opts[@]}"; do
    [ "$(left)" -gt 60 ] || break
    f="$work/cp-balance-np$np-balanced-$i.jsonl"
    bounded "${mpi[@]}" -np "$np" "${host[@]}" --cp balanced --cp-options "${opts[$i]}" --cp-kernel flex_flash \
      --matrix cp-balance --masks "$dm" ${LCAHOST_ARGS:-} --out "$f" --force > "$work/options-$i.log" 2>&1 || status=1
    grep -E "^# summary|FAIL|ERROR" "$work/options-$i.log" | head -5
    files+=("$f")
    stamp "balanced ${opts[$i]} np $np"
    pack
  done
  python3 - "${files[@]}" <<'PY'
import json, sys
runs = []
for f in sys.argv[1:]:
    opts, cells = "{}", {}
    for line in open(f):
        r = json.loads(line)
        if r.get("type") == "run":
            opts = json.dumps(r.get("cp", {}).get("options", {}))
        elif r.get("type") == "cell" and r.get("status") == "ok":
            cells[(r["mask_label"], f"{r['heads_q']}:{r['heads_kv']}", r["pass"])] = r["tflops"]
    runs.append((opts, cells))
print("| mask | heads | pass | " + " | ".join(o for o, _ in runs) + " |")
for k in sorted(runs[0][1]):
    print(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(f"{c[k]:.0f}" if k in c else "-" for _, c in runs) + " |")
PY
fi

if has probe && [ "$(left)" -gt 40 ]; then
  if "${host[@]}" cp-probe --help > /dev/null 2>&1; then
    "${mpi[@]}" -np "$np" "${host[@]}" cp-probe ${PROBE_ARGS:-} --out "$work/probe-np$np.json" > "$work/probe.log" 2>&1 || status=1
    NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 "${mpi[@]}" -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -np "$np" "${host[@]}" \
      cp-probe ${PROBE_ARGS:-} --out "$work/probe-np$np-offlink.json" >> "$work/probe.log" 2>&1 || status=1
    tail -20 "$work/probe.log"
  else
    echo "no cp-probe in this build"
  fi
  stamp "probe"
  pack
fi

if has offlink && [ "$(left)" -gt 60 ]; then
  om=${OFFLINK_MASKS:-full,causal,causal_document:dist=prolong64k}
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 bounded "${mpi[@]}" -x NCCL_P2P_DISABLE -x NCCL_SHM_DISABLE -np "$np" "${host[@]}" \
    --cp '*' --cp-kernel flex_flash --matrix cp-balance --masks "$om" ${LCAHOST_ARGS:-} \
    --out "$work/cp-balance-np$np-offlink.jsonl" --force > "$work/offlink.log" 2>&1 || status=1
  grep -E "^# summary|FAIL|ERROR" "$work/offlink.log" | head
  stamp "off-NVLink np $np"
  pack
fi
pack
exit $status
