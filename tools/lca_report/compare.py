"""Two runs cell by cell: B/A of the median time and of TFLOP/s, against the noise band of the
repeats; cells that got slower beyond the band are regressions, faster ones improvements, and a
cell that ran ok in A but not in B is a regression too. Used by `lcahost compare`.
Rule: the exit status is the verdict: 0 none beyond the threshold, 1 regression, 2 bad input."""
import math

from .results import PROBLEMS, cell_key, describe_key, load, timed
from .tables import markdown

OK, REGRESSION, BAD_INPUT = 0, 1, 2


def spread(cell):
    """How far one run's median may wander, relative: half the width of the median's 95% confidence
    interval from the calls' order statistics (ranks n/2 -+ 0.98 sqrt(n), distribution-free), which
    for ten calls or fewer is about their min-max range. Timed by time (repeat_ms), a cell keeps a
    hundred calls or more over the GPU's clock swings: their min-max range says how the calls vary,
    not how far the median does (on an H100 at its power limit it made two runs' band +-5-16% on
    paper-dense 16K-64K, where two runs of the same kernels differ by -0.3% to +2.5%). Without the calls
    (older records), half the min-max range."""
    t = cell.get("time_ms") or {}
    median = t.get("median", 0)
    if median <= 0:
        return 0.0
    calls = sorted(t.get("all") or [])
    if len(calls) < 2:
        return (t.get("max", 0) - t.get("min", 0)) / (2 * median)
    n = len(calls)
    half = 0.98 * math.sqrt(n)
    lo = max(1, round(n / 2 - half)) - 1          # 1-based ranks, as 0-based indices
    hi = min(n, round(1 + n / 2 + half)) - 1
    return (calls[hi] - calls[lo]) / (2 * median)


def compare_cells(a, b, threshold, min_band):
    """Rows for every cell in both, as dicts; verdict is noise, slower, faster or a status change."""
    rows = []
    for key in sorted(set(a) & set(b), key=describe_key):
        ca, cb = a[key], b[key]
        row = {"cell": describe_key(key), "a": ca, "b": cb, "status": f"{ca['status']} -> {cb['status']}"}
        if timed(ca) and timed(cb) and ca["time_ms"].get("median", 0) > 0:
            ratio = cb["time_ms"]["median"] / ca["time_ms"]["median"]
            band = max(spread(ca) + spread(cb), min_band)
            row.update(ratio=ratio, band=band,
                       tflops_ratio=cb.get("tflops", 0) / ca["tflops"] if ca.get("tflops") else None)
            if ratio > 1 + band:
                row["verdict"] = "slower"
                row["regression"] = ratio - 1 > threshold
            elif ratio < 1 - band:
                row["verdict"] = "faster"
            else:
                row["verdict"] = "noise"
        if ca["status"] != cb["status"]:
            worse = cb["status"] in PROBLEMS + ("E",) and ca["status"] not in PROBLEMS
            row["verdict"] = "status worse" if worse else "status changed"
            row["regression"] = row.get("regression", False) or worse
        row.setdefault("verdict", "same")
        row.setdefault("regression", False)
        rows.append(row)
    return rows


def _ms(cell):
    return f"{cell['time_ms']['median']:.4g}" if timed(cell) else cell["status"]


def _tf(cell):
    return f"{cell['tflops']:.4g}" if timed(cell) else "-"


def render(rows, only_a, only_b, threshold, fmt):
    head = ["cell", "A ms", "B ms", "B/A time", "noise band", "A TFLOP/s", "B TFLOP/s", "B/A TFLOP/s", "verdict"]
    body = []
    for r in rows:
        ratio = f"{r['ratio']:.3f}" if "ratio" in r else "-"
        band = f"+-{100 * r['band']:.1f}%" if "band" in r else "-"
        tf = f"{r['tflops_ratio']:.3f}" if r.get("tflops_ratio") else "-"
        verdict = r["verdict"] + (" (REGRESSION)" if r["regression"] else "")
        if r["verdict"].startswith("status"):
            verdict += f": {r['status']}"
        body.append([r["cell"], _ms(r["a"]), _ms(r["b"]), ratio, band, _tf(r["a"]), _tf(r["b"]), tf, verdict])
    lines = markdown(head, body) if fmt == "md" else _aligned(head, body)
    for title, keys in (("only in A", only_a), ("only in B", only_b)):
        if keys:
            lines += ["", f"{len(keys)} cell(s) {title}:"] + [f"  {describe_key(k)}" for k in sorted(keys, key=describe_key)]
    regressions = sum(r["regression"] for r in rows)
    counts = {v: sum(r["verdict"] == v for r in rows)
              for v in ("slower", "faster", "noise", "status worse", "status changed", "same")}
    lines += ["", f"{len(rows)} cells in both: {counts['noise']} within noise, {counts['slower']} slower, "
              f"{counts['faster']} faster, {counts['status worse']} worse status, {counts['status changed']} other status "
              f"changes, {counts['same']} untimed in both; {regressions} regression(s) beyond {100 * threshold:.1f}%"]
    ratios = [r["ratio"] for r in rows if r.get("ratio", 0) > 0]
    if ratios:
        geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        lines.append(f"geomean B/A time over the {len(ratios)} timed cells: {geomean:.3f} (where every cell moves "
                     "alike, look at the GPU's clocks and power before the code)")
    return lines, regressions


def _aligned(head, body):
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    def line(r):
        return "  ".join(str(v).ljust(w) if i in (0, len(r) - 1) else str(v).rjust(w)
                         for i, (v, w) in enumerate(zip(r, widths))).rstrip()
    return ["# " + line(head)] + ["  " + line(r) for r in body]


def main(path_a, path_b, threshold, min_band, fmt, out):
    a = {cell_key(c): c for c in load([path_a]).cells}
    b = {cell_key(c): c for c in load([path_b]).cells}
    rows = compare_cells(a, b, threshold, min_band)
    lines, regressions = render(rows, set(a) - set(b), set(b) - set(a), threshold, fmt)
    out.write(f"# compare  A = {path_a}  B = {path_b}\n" + "\n".join(lines) + "\n")
    if not rows:
        out.write("no cell is in both files: nothing was compared\n")
        return BAD_INPUT
    return REGRESSION if regressions else OK
