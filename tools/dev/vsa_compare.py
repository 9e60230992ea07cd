#!/usr/bin/env python3
"""flex_flash, torch_flex and vsa_triton side by side on the cells of a results .jsonl that
vsa_triton ran: TFLOP/s of each, flex_flash's time over VSA's (below 1: flex_flash faster), each
cell's check, and VSA's compile time and layout-copy time from its plan_info; then the verdict of
the target "flex_flash at least as fast as VSA, forward and backward, on every cell VSA runs".
Standard library only. Usage: tools/dev/vsa_compare.py RESULTS.jsonl"""
import json
import sys


def load(path):
    cells = []
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a line a crash cut short
            if r.get("type") == "cell":
                cells.append(r)
    return cells


def key(r):
    return (r.get("mask_label", r.get("mask")), r["seqlen"], r["heads_q"], r["heads_kv"], r["head_dim"],
            r["dtype"], r["pass"])


def checked(r):
    c = r.get("check")
    if r["status"] != "ok":
        return r["status"]
    if not c:
        return "unchecked"
    worst = max((e.get("rel_l2", 0) for e in c.get("errors", {}).values()), default=0)
    return ("pass" if c.get("passed") else "FAIL") + f" {worst:.1e}"


def main(path):
    by = {}
    for r in load(path):
        by.setdefault(key(r), {})[r.get("label", r["kernel"])] = r
    kernels = ["flex_flash", "torch_flex", "vsa_triton"]
    print("| mask | seqlen | heads | pass | " + " | ".join(f"{k} TFLOP/s (check)" for k in kernels) +
          " | flex/vsa time | vsa compile s | vsa copies ms |")
    print("|---|---|---|---|" + "---|" * len(kernels) + "---|---|---|")
    wins = total = 0
    losses = []
    for k in sorted(by, key=lambda k: (k[0], k[1], k[6])):
        row = by[k]
        vsa = row.get("vsa_triton")
        if vsa is None or vsa["status"] == "X":
            continue
        cols = []
        for name in kernels:
            r = row.get(name)
            cols.append("-" if r is None else
                        f"{r.get('tflops', 0):.0f} ({checked(r)})" if r["status"] == "ok" else r["status"])
        flex = row.get("flex_flash")
        ratio = ""
        if vsa["status"] == "ok" and flex and flex["status"] == "ok":
            t_flex, t_vsa = flex["time_ms"]["median"], vsa["time_ms"]["median"]
            ratio = f"{t_flex / t_vsa:.2f}"
            total += 1
            if t_flex <= t_vsa:
                wins += 1
            else:
                losses.append(f"{k[0]} {k[1]} {k[6]}: flex_flash {t_flex:.2f} ms, VSA {t_vsa:.2f} ms")
        info = vsa.get("plan_info") or {}
        compile_s = f"{info.get('compile_ms', 0) / 1e3:.1f}" if info else ""
        copies = info.get("layout_copy_ms_bwd" if k[6] == "bwd" else "layout_copy_ms_fwd")
        copies = f"{copies:.2f}" if copies is not None else ""
        print(f"| {k[0]} | {k[1]} | {k[2]}:{k[3]} | {k[6]} | " + " | ".join(cols) + f" | {ratio} | {compile_s} | {copies} |")
    refused = sorted({(r.get("mask_label"), r.get("reason", "")) for rows in by.values()
                      for n, r in rows.items() if n == "vsa_triton" and r["status"] == "X"})
    for mask, reason in refused:
        print(f"vsa_triton X on {mask}: {reason}")
    print(f"\ntarget (flex_flash time <= VSA's): {wins} of {total} cells that both ran")
    for line in losses:
        print("  flex_flash slower: " + line)


if __name__ == "__main__":
    main(sys.argv[1])
