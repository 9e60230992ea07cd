#!/usr/bin/env python3
"""Markdown table of a results .jsonl: per mask and length, each kernel's forward / backward
TFLOP/s and peak GiB (the cell's total). Usage: tools/results_table.py RESULTS.jsonl"""
import json
import sys
from collections import defaultdict


def main(path):
    run, cells = None, []
    with open(path) as f:
        for line in f:
            try:
                j = json.loads(line)
            except json.JSONDecodeError:
                continue
            if j.get("type") == "run" and run is None:
                run = j
            elif j.get("type") == "cell":
                cells.append(j)
    if run and "gpu" in run:
        g = run["gpu"]
        c = g.get("ceilings", {})
        print(f"GPU: {g['name']}, driver {g['driver_version']}, cuDNN {g['cudnn_version']}; "
              f"measured ceilings: bf16 GEMM {c.get('gemm_tflops', 0):.0f} TFLOP/s, "
              f"copy {c.get('copy_gbps', 0):.0f} GB/s\n")
    kernels = sorted({c["kernel"] for c in cells})
    table = defaultdict(dict)
    for c in cells:
        key = (c.get("mask_label", c["mask"]), c["seqlen"])
        if c["status"] == "ok":
            val = f"{c['tflops']:.0f}"
            peak = c.get("total_peak_bytes", 0) / 2**30
        else:
            val, peak = c["status"], None
        table[key].setdefault(c["kernel"], {})[c["pass"]] = (val, peak)
    print("| mask | seqlen | " + " | ".join(f"{k} fwd / bwd (peak GiB)" for k in kernels) + " |")
    print("|---|---|" + "---|" * len(kernels))
    for (mask, seqlen) in sorted(table, key=lambda k: (k[0], k[1])):
        row = []
        for k in kernels:
            p = table[(mask, seqlen)].get(k, {})
            fwd = p.get("fwd", ("-", None))
            bwd = p.get("bwd", ("-", None))
            peaks = [x[1] for x in (fwd, bwd) if x[1] is not None]
            peak = f" ({max(peaks):.2f})" if peaks else ""
            row.append(f"{fwd[0]} / {bwd[0]}{peak}")
        print(f"| {mask} | {seqlen} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
