#!/usr/bin/env python3
"""The table of tools/dev/ncu_breakdown.sh from its files in DIR: ncu-MASK-SEQLEN-PASS.log (the ncu
report of one call of the cell) and res-MASK-SEQLEN-PASS.jsonl (lcahost's record: the FLOPs of the
unmasked area).

A forward cell's log holds its forward; a backward cell's, the forward that makes O and LSE, then
the backward's kernels. A mask's share of full's TFLOP/s at the same length and pass, with every
kernel of the pass timed under ncu, is the product of three ratios to full's:
  geometry   useful FLOPs per wgmma instruction of the main kernel (forward_*, backward_*): the
             cells that a tile computes and the mask hides cost this;
  step rate  the main kernel's wgmma instructions a microsecond: what a computed step costs, with
             what a row tile or a walk pays around its steps;
  in main    the share of the pass's time in its main kernel (the backward's delta and zeroing
             pass, dQ's conversion and split walks' dK and dV are outside it).
The split between geometry and step rate holds where the main kernels issue wgmmas of one size:
block_sparse's forward takes 64-key steps, whose S wgmmas are half of full's, so its geometry reads
low and its step rate high by the same factor (their product, and the share, stand).
"SMs idle" is the share of the main kernel's SM cycles with nothing resident (a tail).
Usage: ncu_breakdown.py DIR"""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lca_report.results import load  # noqa: E402  (tools/ on the path first)

# A kernel's line: "  void lca_flex_flash::dq_kernel<__nv_bfloat16, 128>(BwdParams) (65536, 1, 1)x(256, ...),
# Context 1, ..."; the name is the last component before the template arguments.
KERNEL = re.compile(r"^\s+(?:void )?((?:[\w<>]+::)*)(\w+)(?:<[^(]*>)?\s*\(.*Context")
METRIC = re.compile(r"^\s+([a-z0-9_]+__\S+)\s+(\S+)\s+([\d,.]+)\s*$")
SCALE = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
TIME, GMMA = "gpu__time_duration.sum", "sm__inst_executed_pipe_tensor_op_gmma.sum"


def kernels(path):
    """[(name, {metric: value})] in launch order; durations in microseconds."""
    out = []
    for line in open(path, errors="replace"):
        m = KERNEL.match(line)
        if m:
            # Only flex_flash's kernels count (the run's input fills and GEMM ceiling are profiled too
            # where ncu is not told which kernels to profile).
            ours = "lca_flex_flash" in m.group(1) or not m.group(1)
            out.append((m.group(2), {}) if ours else None)
            continue
        m = METRIC.match(line)
        if m and out and out[-1] is not None:
            value = float(m.group(3).replace(",", ""))
            if m.group(1) == TIME:
                value *= SCALE.get(m.group(2), 1.0)
            out[-1][1][m.group(1)] = value
    return [k for k in out if k is not None]


def flops(path):
    """The FLOPs of the unmasked area from lcahost's record of the cell (None if it did not run)."""
    if not os.path.exists(path):
        return None
    for r in load([path]).cells:
        if r.get("status") == "ok" and r.get("flops"):
            return float(r["flops"])
    return None


def cell(path, pass_):
    """(main kernel's metrics, the pass's kernels' total time in us), or (None, 0)."""
    ks = kernels(path)
    prefix = "forward" if pass_ == "fwd" else "backward"
    last_fwd = max((i for i, k in enumerate(ks) if k[0].startswith("forward")), default=-1)
    own = ks[last_fwd:] if pass_ == "fwd" else ks[last_fwd + 1:]
    mains = [m for name, m in own if name.startswith(prefix) and TIME in m and GMMA in m]
    if not mains:
        return None, 0.0
    return mains[-1], sum(m.get(TIME, 0.0) for _, m in own)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    cells = {}
    for path in glob.glob(os.path.join(d, "ncu-*.log")):
        mask, seqlen, pass_ = re.match(r"ncu-(.+)-(\d+)-(fwd|bwd)\.log$", os.path.basename(path)).groups()
        main_k, total = cell(path, pass_)
        cells[(mask, int(seqlen), pass_)] = (main_k, total, flops(os.path.join(d, f"res-{mask}-{seqlen}-{pass_}.jsonl")))

    print(f"{'mask':26} {'seqlen':>6} pass {'main us':>10} {'geometry':>8} {'step rate':>9} {'in main':>7} "
          f"{'share':>6} {'SMs idle':>8}")
    for key in sorted(cells, key=lambda c: (c[1], c[2], c[0] != "full", c[0])):
        mask, seqlen, pass_ = key
        m, total, f = cells[key]
        if m is None:
            print(f"{mask:26} {seqlen:6} {pass_:4} no main kernel in the log")
            continue
        fm, ftotal, ff = cells.get(("full", seqlen, pass_), (None, 0.0, None))
        in_main = m[TIME] / total
        idle = 1.0 - m["sm__cycles_active.avg"] / m["sm__cycles_elapsed.max"]
        if fm is None or not f or not ff:
            print(f"{mask:26} {seqlen:6} {pass_:4} {m[TIME]:10.1f} {'-':>8} {'-':>9} {in_main:7.3f} {'-':>6} {idle:8.3f}")
            continue
        geometry = (f / m[GMMA]) / (ff / fm[GMMA])
        step = (m[GMMA] / m[TIME]) / (fm[GMMA] / fm[TIME])
        in_main_rel = in_main / (fm[TIME] / ftotal)
        share = (f / total) / (ff / ftotal)  # = geometry x step x in_main_rel
        print(f"{mask:26} {seqlen:6} {pass_:4} {m[TIME]:10.1f} {geometry:8.3f} {step:9.3f} {in_main_rel:7.3f} "
              f"{share:6.3f} {idle:8.3f}")
    print("(ratios to full at the same length and pass; share = geometry x step rate x in main, at ncu's locked clocks)")


if __name__ == "__main__":
    main()
