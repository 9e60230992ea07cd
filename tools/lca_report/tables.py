"""Markdown tables of results: the measured ceilings line and the mask x length x kernel table
of forward / backward TFLOP/s with peak GiB. Used by tools/results_table.py and the summary.
Rule: cells are plain records (see results.py); nothing here needs matplotlib."""
from collections import defaultdict

from .results import gib, mask_label


def ceilings_line(run):
    """One line on the GPU and its measured ceilings, or None for a run without a GPU."""
    if not run or "gpu" not in run:
        return None
    g = run["gpu"]
    c = g.get("ceilings", {})
    line = f"GPU: {g.get('name', '?')}, driver {g.get('driver_version', '?')}, cuDNN {g.get('cudnn_version', '?')}"
    if "gemm_tflops" not in c:  # context-parallel runs measure no ceilings
        return line
    return line + (f"; measured ceilings: bf16 GEMM {c.get('gemm_tflops', 0):.0f} TFLOP/s, "
                   f"copy {c.get('copy_gbps', 0):.0f} GB/s")


def results_table(cells):
    """Per mask and length, each kernel's `fwd / bwd (peak GiB)`; statuses stand for numbers."""
    kernels = sorted({c["kernel"] for c in cells})
    table = defaultdict(dict)
    for c in cells:
        key = (mask_label(c), c["seqlen"])
        if c["status"] == "ok":
            val = f"{c['tflops']:.0f}" if c["tflops"] >= 1 else f"{c['tflops']:.2g}"
            peak = gib(c.get("total_peak_bytes", 0))
        else:
            val, peak = c["status"], None
        table[key].setdefault(c["kernel"], {})[c["pass"]] = (val, peak)
    lines = ["| mask | seqlen | " + " | ".join(f"{k} fwd / bwd (peak GiB)" for k in kernels) + " |",
             "|---|---|" + "---|" * len(kernels)]
    for (mask, seqlen) in sorted(table):
        row = []
        for k in kernels:
            p = table[(mask, seqlen)].get(k, {})
            fwd = p.get("fwd", ("-", None))
            bwd = p.get("bwd", ("-", None))
            peaks = [x[1] for x in (fwd, bwd) if x[1] is not None]
            peak = f" ({max(peaks):.2f})" if peaks else ""
            row.append(f"{fwd[0]} / {bwd[0]}{peak}")
        lines.append(f"| {mask} | {seqlen} | " + " | ".join(row) + " |")
    return lines


def markdown(head, rows):
    """A Markdown table; `|` inside a cell is escaped."""
    def esc(v):
        return str(v).replace("|", "\\|").replace("\n", " ")
    out = ["| " + " | ".join(esc(h) for h in head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(esc(v) for v in r) + " |" for r in rows]
    return out
