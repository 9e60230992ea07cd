#!/usr/bin/env python3
"""Per cell, each kernel's TFLOP/s over the first kernel's, from lcahost result files of one or more
runs (rounds: the median of each kernel's TFLOP/s over them), and the geomean per kernel. For A/B
runs where both versions are kernels of the same run (tools/dev/ab_same_run.sh).
Usage: kernel_ratio.py --base flex_flash_base R1.jsonl [R2.jsonl ...]"""
import argparse
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lca_report.results import config_label, load, mask_label  # noqa: E402  (tools/ on the path first)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the kernel the others are divided by")
    ap.add_argument("results", nargs="+")
    args = ap.parse_args()
    cells = {}  # (mask, seqlen, pass, shape) -> kernel -> [tflops]
    for path in args.results:  # one file at a time: load() keeps one record per cell across files
        for r in load([path]).cells:
            if r.get("status") != "ok" or not r.get("tflops"):
                continue
            # The mask's parameters and the shape too: one mask with two document ranges, or at two
            # head dims, is two cells.
            key = (mask_label(r), int(r["seqlen"]), r["pass"], config_label(r))
            cells.setdefault(key, {}).setdefault(r["kernel"], []).append(float(r["tflops"]))
    kernels = sorted({k for c in cells.values() for k in c if k != args.base})
    logs = {k: [] for k in kernels}
    print(f"{'mask':40} {'seqlen':>6} pass {'shape':>17} {args.base:>16} " + " ".join(f"{k:>16}" for k in kernels))
    for key in sorted(cells):
        c = cells[key]
        if args.base not in c:
            continue
        base = statistics.median(c[args.base])
        row = []
        for k in kernels:
            if k in c:
                ratio = statistics.median(c[k]) / base
                logs[k].append(math.log(ratio))
                row.append(f"{statistics.median(c[k]):8.1f} {ratio:6.3f} ")
            else:
                row.append(f"{'-':>16}")
        print(f"{key[0][:40]:40} {key[1]:6} {key[2]:4} {key[3]:>17} {base:16.1f} " + " ".join(row))
    for k in kernels:
        if logs[k]:
            print(f"geomean {k} / {args.base}: {math.exp(sum(logs[k]) / len(logs[k])):.3f} over {len(logs[k])} cells")


if __name__ == "__main__":
    main()
