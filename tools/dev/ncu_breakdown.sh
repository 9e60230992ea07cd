#!/usr/bin/env bash
# Where a flex_flash cell's time goes, from Nsight Compute: one call of each (mask, seqlen, pass)
# under ncu with a handful of metrics (a few seconds a cell), then ncu_breakdown.py's table: a
# mask's share of full's TFLOP/s as the product of its geometry (useful FLOPs per wgmma), the rate
# of its main kernel's wgmma instructions against full's (what a computed step costs) and the time
# outside the main kernel (the backward's delta, zeroing and dQ conversion passes). Clocks are
# locked under ncu: read ratios, not rates.
# Usage: tools/dev/ncu_breakdown.sh OUTDIR [BUILD]   (BUILD default build-gpu, built with lcahost,
#   lca_flex_flash and lca_builtin; env MASKS, default full and the windows, SEQLENS, default
#   "16384 65536", NCU_OPTIONS: flex_flash's options as JSON, e.g. '{"backward": "sm90_skip"}')
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: ncu_breakdown.sh OUTDIR [BUILD]}
build=${2:-build-gpu}
masks=${MASKS:-full,sliding_window,sliding_window_document,sliding_window_causal}
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
[ -n "$ncu_bin" ] || { echo "ncu_breakdown: ncu not found" >&2; exit 1; }
[ -x "$build/bin/lcahost" ] || { echo "ncu_breakdown: $build/bin/lcahost is not built" >&2; exit 1; }
mkdir -p "$out"
kernels='forward|backward|prepare_kernel|dq_kernel|kv_kernel'  # flex_flash's (lca_flex_flash)
metrics=gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_elapsed.max,sm__inst_executed_pipe_tensor_op_gmma.sum
for seqlen in ${SEQLENS:-16384 65536}; do
  for pass in fwd bwd; do
    matrix="$out/matrix-$seqlen-$pass.json"
    python3 - "$matrix" "$seqlen" "$pass" <<'PY'
import json, sys
path, seqlen, pass_ = sys.argv[1], int(sys.argv[2]), sys.argv[3]
json.dump({"name": "ncu-breakdown", "description": "one call a cell under ncu (tools/dev/ncu_breakdown.sh)",
           "kernels": ["flex_flash"], "masks": ["*"], "seqlens": {"cuda": [seqlen]}, "heads": ["64:8"],
           "head_dims": [128], "dtypes": ["bf16"], "passes": [pass_], "warmup": 0, "warmup_ms": 0,
           "repeats": 1, "repeat_ms": 0, "seed": 42}, open(path, "w"), indent=1)
PY
    for mask in ${masks//,/ }; do
      log="$out/ncu-$mask-$seqlen-$pass.log"
      "$ncu_bin" --metrics "$metrics" --kernel-name "regex:$kernels" "$build/bin/lcahost" --plugins "$build/plugins" \
        --matrix "$matrix" --kernels flex_flash ${NCU_OPTIONS:+--kernel-options "flex_flash=$NCU_OPTIONS"} --masks "$mask" --no-check --out "$out/res-$mask-$seqlen-$pass.jsonl" --force \
        > "$log" 2>&1 ||
        { echo "ncu_breakdown: $mask $seqlen $pass failed, see $log" >&2; exit 1; }
    done
  done
done
python3 tools/dev/ncu_breakdown.py "$out"
