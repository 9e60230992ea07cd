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
# group first. Running it again resumes: cells already in results.jsonl are not run again.
# Then: python3 tools/sweep.py report <this folder>/results.jsonl
# Planned by: {command}
#   LCAHOST         lcahost to run (default build/bin/lcahost, relative to where you run this)
#   PLUGINS         plugin folder (default build/plugins)
#   DEADLINE_S      start no group after this many seconds, and stop lcahost there (default 0: no limit)
#   LCA_SWEEP_ARGS  more lcahost options, e.g. "--isolate" or "--no-check"
set -u
here=$(cd "$(dirname "$0")" && pwd)
lcahost=${{LCAHOST:-build/bin/lcahost}}
plugins=${{PLUGINS:-build/plugins}}
deadline=${{DEADLINE_S:-0}}
out="$here/results.jsonl"
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
status=0
start=$(date +%s)
for spec in {order}; do
  extra=()
  if [ "$deadline" -gt 0 ]; then
    left=$(( deadline - ($(date +%s) - start) ))
    if [ "$left" -le 0 ]; then
      echo "run.sh: deadline of $deadline s reached before $spec; run again to resume" >&2
      status=4
      break
    fi
    extra=(timeout -k 10 "$left")
  fi
  echo "run.sh: $spec (kernels $kernels)"
  # shellcheck disable=SC2086
  ${{extra[@]+"${{extra[@]}}"}} "$lcahost" --plugins "$plugins" --matrix "$here/$spec" --kernels "$kernels" \
    --resume "$out" ${{LCA_SWEEP_ARGS:-}}
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "run.sh: $spec stopped at the deadline; run again to resume" >&2
    status=4
    break
  fi
  # 3: some cell failed or errored (the report lists them); anything else is worse.
  if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then status=$rc; fi
done
echo "run.sh: results in $out"
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
        f.write(RUN_SH.format(command=plan["command"], kernels=" ".join(opt.kernels), order=" ".join(order)))
    os.chmod(script, os.stat(script).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return plan


def write_json(path, doc):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
