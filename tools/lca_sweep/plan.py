"""Writes a drawn sweep to a folder: one matrix spec a group (gNN.json, the format of
manifests/matrices), plan.json (the draw: seed, options, groups, masks and parameters, estimates)
and run.sh, which runs lcahost on every spec into results.jsonl beside it.
Rule: the files depend on the seed and the options only (no paths, no dates), so the same
command writes the same bytes anywhere."""
import json
import os
import stat

from lca_sweep import draw, estimate

DEFAULT_KERNELS = ("flex_flash", "cudnn_sdpa")


def command_line(opt):
    """The plan command that writes these files, without --out."""
    parts = ["tools/sweep.py plan", f"--seed {opt.seed}", f"--groups {opt.groups}",
             f"--min-len {opt.min_len}", f"--max-len {opt.max_len}", f"--kernels {','.join(opt.kernels)}",
             f"--warmup {opt.warmup}", f"--warmup-ms {opt.warmup_ms:g}", f"--repeats {opt.repeats}",
             f"--repeat-ms {opt.repeat_ms:g}", f"--check-max-len {opt.check_max_len}"]
    return " ".join(parts)


def matrix_spec(opt, group, check):
    return {
        "name": f"sweep-s{opt.seed}-g{group['index']:02d}",
        "description": (f"Cliff finder, seed {opt.seed}, group {group['index']} of {opt.groups}: "
                        f"{group['seqlen']} tokens, heads {group['heads']}, head_dim {group['head_dim']}, "
                        "bf16, every builtin mask with drawn parameters (tools/sweep.py plan; plan.json)."),
        "kernels": list(opt.kernels),
        "masks": [m["spec"] for m in group["masks"]],
        "seqlens": [group["seqlen"]],
        "heads": [group["heads"]],
        "head_dims": [group["head_dim"]],
        "dtypes": ["bf16"],
        "passes": ["fwd", "bwd"],
        "warmup": opt.warmup,
        "warmup_ms": opt.warmup_ms,
        "repeats": opt.repeats,
        "repeat_ms": opt.repeat_ms,
        "seed": opt.seed * 1000 + group["index"],
        "check": check,
    }


RUN_SH = r"""#!/usr/bin/env bash
# Runs the sweep that plan.json describes into results.jsonl beside this script, the cheapest
# group first. With GPUS (e.g. GPUS=0,1,2,3) the groups run on those GPUs at once, the longest
# first onto the least loaded, each into its own results-gNN.jsonl (lcahost's output in
# log-gNN.txt). Running it again resumes: cells already in the results are not run again (run a
# folder one way, with GPUS or without).
# Then: python3 tools/sweep.py report <this folder>
# Planned by: {command}
#   LCAHOST         lcahost to run (default build/bin/lcahost, relative to where you run this)
#   PLUGINS         plugin folder (default build/plugins)
#   DEADLINE_S      start no group after this many seconds, and stop lcahost there (default 0: no limit)
#   GPUS            GPU indices to spread the groups over, comma separated (default: one at a time)
#   LCA_SWEEP_ARGS  more lcahost options, e.g. "--isolate" or "--no-check"
set -u
here=$(cd "$(dirname "$0")" && pwd)
lcahost=${{LCAHOST:-build/bin/lcahost}}
plugins=${{PLUGINS:-build/plugins}}
deadline=${{DEADLINE_S:-0}}
gpus=${{GPUS:-}}
gpu_list=()
if [ -n "$gpus" ]; then
  IFS=, read -r -a gpu_list <<< "$gpus"
  for g in "${{gpu_list[@]}}"; do
    case "$g" in
      ''|*[!0-9]*) echo "run.sh: GPUS='$gpus': '$g' is not a GPU index (GPUS=0,1,2,3)" >&2; exit 2 ;;
    esac
  done
  if [ "$(printf '%s\n' "${{gpu_list[@]}}" | sort -u | wc -l)" -ne "${{#gpu_list[@]}}" ]; then
    echo "run.sh: GPUS='$gpus' names a GPU twice" >&2
    exit 2
  fi
  if [ -e "$here/results.jsonl" ]; then
    echo "run.sh: $here/results.jsonl holds a run without GPUS; resume it without GPUS (or plan into another folder)" >&2
    exit 2
  fi
elif compgen -G "$here/results-g*.jsonl" > /dev/null; then
  echo "run.sh: $here holds results-gNN.jsonl of a run with GPUS; resume it with GPUS (or plan into another folder)" >&2
  exit 2
fi
if [ ! -x "$lcahost" ]; then
  echo "run.sh: no lcahost at '$lcahost'; build it or set LCAHOST (and PLUGINS)" >&2
  exit 2
fi
# lcahost refuses a matrix that names a kernel it has not loaded: run the planned ones it has.
loaded=$("$lcahost" --plugins "$plugins" list --format json | python3 -c '
import json, sys
print(" ".join(p["name"] for p in json.load(sys.stdin) if p.get("kind") == "kernel" and p.get("status") == "loaded"))') || {{
  echo "run.sh: '$lcahost --plugins $plugins list' failed" >&2
  exit 2
}}
kernels=""
for k in {kernels}; do
  case " $loaded " in
    *" $k "*) kernels="$kernels${{kernels:+,}}$k" ;;
    *) echo "run.sh: kernel $k is not loaded from $plugins (see lcahost list); the sweep runs without it" >&2 ;;
  esac
done
case ",$kernels," in
  *,flex_flash,*) ;;
  *) echo "run.sh: flex_flash is not loaded from $plugins; nothing to sweep" >&2; exit 2 ;;
esac
start=$(date +%s)
# One group into OUT, lcahost's output to LOG (empty: this terminal). Returns 4 at the deadline,
# else lcahost's status (3: some cell failed or errored, which the report lists; anything else is
# worse).
run_group() {{
  local spec=$1 out=$2 log=$3 extra=() left rc
  if [ "$deadline" -gt 0 ]; then
    left=$(( deadline - ($(date +%s) - start) ))
    if [ "$left" -le 0 ]; then
      echo "run.sh: deadline of $deadline s reached before $spec; run again to resume" >&2
      return 4
    fi
    extra=(timeout -k 10 "$left")
  fi
  echo "run.sh: $spec (kernels $kernels${{CUDA_VISIBLE_DEVICES:+, GPU $CUDA_VISIBLE_DEVICES}})"
  (
    if [ -n "$log" ]; then exec > "$log" 2>&1; fi
    # shellcheck disable=SC2086
    ${{extra[@]+"${{extra[@]}}"}} "$lcahost" --plugins "$plugins" --matrix "$here/$spec" --kernels "$kernels" \
      --resume "$out" ${{LCA_SWEEP_ARGS:-}}
  )
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "run.sh: $spec stopped at the deadline; run again to resume" >&2
    return 4
  fi
  return "$rc"
}}
# Groups one after another; 4 at a deadline, else the first nonzero status.
lane() {{
  local status=0 rc spec
  for spec in "$@"; do
    if [ ${{#gpu_list[@]}} -gt 0 ]; then
      run_group "$spec" "$here/results-${{spec%.json}}.jsonl" "$here/log-${{spec%.json}}.txt"
    else
      run_group "$spec" "$here/results.jsonl" ""
    fi
    rc=$?
    if [ "$rc" -eq 4 ]; then return 4; fi
    if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then status=$rc; fi
  done
  return "$status"
}}
status=0
if [ ${{#gpu_list[@]}} -eq 0 ]; then
  lane {order}
  status=$?
  echo "run.sh: results in $here/results.jsonl"
  exit "$status"
fi
# The groups by their estimated seconds, the longest first, each onto the least loaded GPU.
n=${{#gpu_list[@]}}
load=()
lanes=()
for ((i = 0; i < n; i++)); do load[i]=0; lanes[i]=""; done
for item in {by_cost}; do
  spec=${{item%%:*}}
  cost=${{item##*:}}
  best=0
  for ((i = 1; i < n; i++)); do
    if [ "${{load[i]}}" -lt "${{load[best]}}" ]; then best=$i; fi
  done
  load[best]=$(( load[best] + cost ))
  lanes[best]="${{lanes[best]}} $spec"
done
pids=()
for ((i = 0; i < n; i++)); do
  [ -n "${{lanes[i]}}" ] || continue
  # shellcheck disable=SC2086
  (export CUDA_VISIBLE_DEVICES=${{gpu_list[i]}}; lane ${{lanes[i]}}) &
  pids+=("$!")
done
for p in "${{pids[@]}}"; do
  wait "$p"
  rc=$?
  if [ "$rc" -eq 4 ]; then status=4; elif [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then status=$rc; fi
done
echo "run.sh: results in $here/results-g*.jsonl"
exit "$status"
"""


def write_plan(opt, out_dir):
    """Draws and writes the sweep; returns plan.json's content."""
    groups = draw.draw_groups(opt.seed, opt.groups, opt.min_len, opt.max_len)
    timing = {"warmup": opt.warmup, "warmup_ms": opt.warmup_ms, "repeats": opt.repeats,
              "repeat_ms": opt.repeat_ms}
    os.makedirs(out_dir, exist_ok=True)
    for g in groups:
        g["file"] = f"g{g['index']:02d}.json"
        g["check"] = opt.check_max_len > 0 and g["seqlen"] <= opt.check_max_len
        g["estimate_s"] = round(estimate.group_seconds(g, opt.kernels, timing, g["check"]), 1)
        write_json(os.path.join(out_dir, g["file"]), matrix_spec(opt, g, g["check"]))
    order = [g["file"] for g in sorted(groups, key=lambda g: (g["estimate_s"], g["index"]))]
    plan = {
        "command": command_line(opt),
        "seed": opt.seed,
        "min_len": opt.min_len,
        "max_len": opt.max_len,
        "kernels": list(opt.kernels),
        "timing": timing,
        "check_max_len": opt.check_max_len,
        "estimate_s": round(sum(g["estimate_s"] for g in groups), 1),
        "estimate_note": "a rough H100 time with these kernels (tools/lca_sweep/estimate.py)",
        "run_order": order,
        "groups": groups,
    }
    write_json(os.path.join(out_dir, "plan.json"), plan)
    script = os.path.join(out_dir, "run.sh")
    with open(script, "w", encoding="utf-8") as f:
        by_cost = " ".join(f"{g['file']}:{max(1, round(g['estimate_s']))}"
                           for g in sorted(groups, key=lambda g: (-g["estimate_s"], g["index"])))
        f.write(RUN_SH.format(command=plan["command"], kernels=" ".join(opt.kernels), order=" ".join(order),
                              by_cost=by_cost))
    os.chmod(script, os.stat(script).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return plan


def write_json(path, doc):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
