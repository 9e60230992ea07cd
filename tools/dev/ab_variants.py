#!/usr/bin/env python3
"""A/B of flex_flash kernel variants on one GPU. A variant is read once per process (the
LCA_FLEX_* environment variables), so two variants cannot share an lcahost run; instead each run
times flex_flash beside cudnn_sdpa on the same inputs (--kernels flex_flash: alone), the
variants take turns for --rounds rounds, in the reverse order every other round (so that a drift of
the machine falls on all of them alike; an even number of rounds), and a
variant is scored by flex_flash's throughput over cudnn_sdpa's in its own run (where cudnn_sdpa
runs the cell), else by flex_flash's throughput against the first variant's. Usage:
  tools/dev/ab_variants.py --lcahost build-gpu/bin/lcahost --plugins build-gpu/plugins \\
      --matrix FILE.json --out DIR [--rounds 2] [--no-check] [--kernels flex_flash] VAR=VALUE [VAR=VALUE ...]
A variant plugins=DIR runs the plugins built in DIR (two trees side by side) with the environment
as it is; two trees are better compared as two kernels of one run (tools/dev/ab_same_run.sh).
Prints one line per cell and variant, then `best: VAR=VALUE` (the highest geometric mean).
The matrices in tools/dev/matrices warm up for 1500 ms a cell (warmup_ms) and time calls for at
least 1000 ms (repeat_ms; docs/DESIGN.md, Measurements): on an H100 at its power
limit, a variant timed at boost clocks against one timed throttled differs by up to 12% for no
reason of its own."""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lca_report.results import config_label  # noqa: E402  (tools/ on the path first)


def run(args, variant, rnd):
    name, value = variant.split("=", 1)
    # plugins=DIR: another build of the plugins (A/B of two trees) instead of an environment variable.
    plugins = value if name == "plugins" else args.plugins
    tag = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in value)
    out = os.path.join(args.out, f"ab-{tag}-r{rnd}.jsonl")
    if os.path.exists(out):
        os.remove(out)
    cmd = [args.lcahost, "--plugins", plugins, "--matrix", args.matrix, "--kernels", args.kernels,
           "--out", out, "-q"] + (["--no-check"] if args.no_check else [])
    env = dict(os.environ) if name == "plugins" else dict(os.environ, **{name: value})
    res = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if res.returncode != 0:
        sys.exit(f"ab_variants: {variant}: lcahost exited {res.returncode}: {res.stderr[-400:]}")
    cells = {}
    with open(out) as f:
        for line in f:
            r = json.loads(line)
            if r.get("status") == "ok" and "pass" in r:
                # The shape is part of the cell: a matrix of two head dims has two cells a mask.
                cells.setdefault((r["mask"], r["seqlen"], r["pass"], config_label(r)), {})[r["kernel"]] = r["tflops"]
    return cells


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lcahost", required=True)
    ap.add_argument("--plugins", required=True)
    ap.add_argument("--matrix", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--kernels", default="flex_flash,cudnn_sdpa",
                    help="the run's kernels (flex_flash alone: scored against the first variant)")
    ap.add_argument("variants", nargs="+")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    # scores[variant][cell] = list over rounds of (flex tflops, flex / cudnn or None)
    scores = {v: {} for v in args.variants}
    for rnd in range(args.rounds):
        # Odd rounds go in the reverse order (A B, B A, ...): with the same order each round, a drift
        # of the GPU over the run fell on the later variants (-3 to -7% on cells a change could not
        # touch).
        for v in args.variants if rnd % 2 == 0 else list(reversed(args.variants)):
            for cell, k in run(args, v, rnd).items():
                if "flex_flash" in k:
                    ratio = k["flex_flash"] / k["cudnn_sdpa"] if "cudnn_sdpa" in k else None
                    scores[v].setdefault(cell, []).append((k["flex_flash"], ratio))
    first = args.variants[0]
    geo = {}
    for v in args.variants:
        logs = []
        for cell in sorted(scores[v]):
            samples = scores[v][cell]
            tf = statistics.median(s[0] for s in samples)
            ratios = [s[1] for s in samples if s[1] is not None]
            if ratios:
                score = statistics.median(ratios)
                shown = f"x cudnn {score:.3f}"
            elif cell in scores[first]:
                score = tf / statistics.median(s[0] for s in scores[first][cell])
                shown = f"x {first.split('=', 1)[1]} {score:.3f}"
            else:
                continue
            logs.append(math.log(score))
            print(f"{v:40} {cell[0]:24} {cell[1]:6} {cell[2]} {cell[3]:>17}  {tf:7.1f} TFLOP/s  {shown}")
        geo[v] = math.exp(sum(logs) / len(logs)) if logs else 0.0
    for v in args.variants:
        print(f"geomean {v}: {geo[v]:.3f}")
    print("best:", max(args.variants, key=lambda v: geo[v]))


if __name__ == "__main__":
    main()
