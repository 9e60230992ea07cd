"""flex_flash's cliffs in a sweep's results: per mask and pass, the worst share of its own full
(same length, heads, head dim, dtype and pass) and the worst ratio to the best peer on the same
cell, each with the cell and the plan_info that ran there; the cells that failed or errored; and
a PASS or MISS against the targets. A share of its own full splits, where both cells record
flex_flash's tile counts, into the fill of the tiles it computed (the mask's cells over the cells of
those tiles, against full's) and the rate a tile (the rest): a fill below the target is a limit of
the tiling, out of reach for any schedule of these tiles; a low rate a tile is time the schedule or
the kernel loses (fixed costs a row tile, masking, idle SMs). A backward's plan_info also gives its
blocks' simulated dispatch over an even spread (dispatch_over_spread), shown beside full's: where
the cell's is well above, the schedule's tail of long blocks on few SMs is the loss.
Rule: a ratio needs both cells `ok`; a cell that failed its check or errored is listed, never
compared."""
from collections import OrderedDict

from lca_report import results
from lca_sweep.draw import MASKS, WINDOW_MASKS

OWN_TARGET = {"fwd": 0.85, "bwd": 0.80}
WINDOW_OWN_TARGET = {"fwd": 0.75, "bwd": 0.70}
PEER_TARGET = 0.97                        # never slower than a peer beyond the 3% noise band
DENSE_PEER = "cudnn_sdpa"
DENSE_TARGET = {"fwd": 1.0, "bwd": 0.97}  # full and causal against cuDNN
DENSE_MASKS = ("full", "causal")
BAD = ("FAIL", "ERROR", "CRASH", "TIMEOUT", "E")
PASSES = ("fwd", "bwd")


def name_of(cell):
    """A kernel as the matrix named it: its label where the record has one."""
    return cell.get("label") or cell["kernel"]


def shape_of(cell):
    return (int(cell.get("seqlen", 0)), cell.get("heads_q"), cell.get("heads_kv"), cell.get("head_dim"),
            cell.get("dtype"), cell.get("pass"))


def ok(cell):
    return cell is not None and cell.get("status") == "ok" and results.finite(cell.get("tflops")) \
        and cell["tflops"] > 0


def verdict(ratio, target):
    if ratio is None:
        return "-"
    return "PASS" if ratio >= target - 1e-9 else "MISS"


def worse(current, ratio):
    return current is None or ratio < current["ratio"]


def analyse(cells, subject="flex_flash", peers=None):
    """Rows per (mask, pass) with the worst ratios and their cells, and the cells that failed."""
    by_cell, by_problem = {}, {}
    for c in cells:
        by_cell[(name_of(c), results.mask_label(c)) + shape_of(c)] = c
        by_problem.setdefault((results.mask_label(c),) + shape_of(c), []).append(c)
    rows = OrderedDict()
    known = [m for m in MASKS] + sorted({c.get("mask", "?") for c in cells} - set(MASKS))
    for mask in known:
        for p in PASSES:
            rows[(mask, p)] = {"mask": mask, "pass": p, "cells": 0, "own": None, "peer": None, "dense": None}
    for c in cells:
        if name_of(c) != subject or not ok(c):
            continue
        mask, shape = c.get("mask", "?"), shape_of(c)
        row = rows.get((mask, c.get("pass")))
        if row is None:
            continue
        row["cells"] += 1
        full = by_cell.get((subject, "full") + shape)
        if mask != "full" and ok(full):
            ratio = c["tflops"] / full["tflops"]
            if worse(row["own"], ratio):
                row["own"] = {"ratio": ratio, "cell": c, "full": full}
        others = [o for o in by_problem[(results.mask_label(c),) + shape]
                  if name_of(o) != subject and (peers is None or name_of(o) in peers) and ok(o)]
        if others:
            best = max(others, key=lambda o: o["tflops"])
            ratio = c["tflops"] / best["tflops"]
            if worse(row["peer"], ratio):
                row["peer"] = {"ratio": ratio, "cell": c, "best": best, "others": others}
        cudnn = by_cell.get((DENSE_PEER, results.mask_label(c)) + shape)
        if mask in DENSE_MASKS and ok(cudnn):
            ratio = c["tflops"] / cudnn["tflops"]
            if worse(row["dense"], ratio):
                row["dense"] = {"ratio": ratio, "cell": c, "best": cudnn}
    for row in rows.values():
        p = row["pass"]
        windows = row["mask"] in WINDOW_MASKS
        row["own_target"] = None if row["mask"] == "full" else (WINDOW_OWN_TARGET if windows else OWN_TARGET)[p]
        row["own_verdict"] = verdict(row["own"] and row["own"]["ratio"], row["own_target"] or 0)
        row["peer_verdict"] = verdict(row["peer"] and row["peer"]["ratio"], PEER_TARGET)
        row["dense_target"] = DENSE_TARGET[p] if row["mask"] in DENSE_MASKS else None
        row["dense_verdict"] = verdict(row["dense"] and row["dense"]["ratio"], row["dense_target"] or 0) \
            if row["dense_target"] else "-"
    problems = [c for c in cells if c.get("status") in BAD]
    measured = [r for r in rows.values() if r["cells"] or r["mask"] in MASKS]
    return measured, problems


def unsteady(cell):
    """Whether the cell's warm-up ended on its cap with the calls' times still moving (the runner's
    warmup_steady; older records have none and count as steady)."""
    return cell is not None and cell.get("warmup_steady") is False


UNSTEADY_MARK = " [warm-up unsteady]"


def describe_cell(cell):
    """The cell a ratio came from: mask with its parameters, exact length, shape, pass (marked where
    its warm-up ended unsteady, so that its time may carry the GPU's clock swing)."""
    return (f"{results.mask_label(cell)}  {cell.get('seqlen')} tokens  {cell.get('heads_q')}:{cell.get('heads_kv')} "
            f"d{cell.get('head_dim')} {cell.get('dtype')} {cell.get('pass')}" + (UNSTEADY_MARK if unsteady(cell) else ""))


def unsteady_line(cells):
    """How many timed cells ended their warm-up unsteady, or nothing where none did."""
    timed = [c for c in cells if ok(c)]
    n = sum(1 for c in timed if unsteady(c))
    return [f"Cells whose warm-up ended unsteady (times still moving at its cap): {n} of {len(timed)}"] if n else []


def flatten(value, prefix=""):
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            out += flatten(v, f"{prefix}{k}.")
        return out
    return [f"{prefix[:-1]}={value}"]


def plan_info_text(cell):
    """The cell's plan_info, for a pass the entry of that pass where the kernel records both."""
    info = cell.get("plan_info")
    if not info:
        return "(no plan_info recorded)"
    if isinstance(info, dict):
        entry = info.get({"fwd": "forward", "bwd": "backward"}.get(cell.get("pass"), ""))
        if isinstance(entry, dict):
            info = entry
        return " ".join(flatten(info))
    return str(info)


TILE_COLS = 64  # flex_flash's schedules count column tiles of 64 (keys forward, queries backward)


def tile_fill(cell):
    """The mask's cells over the cells of the tiles flex_flash computed for the cell's pass, from its
    plan_info (row tiles x mean tiles a row tile x tile rows x 64), or None where it lacks them."""
    info = cell.get("plan_info")
    if not isinstance(info, dict):
        return None
    entry = info.get({"fwd": "forward", "bwd": "backward"}.get(cell.get("pass"), ""))
    if not isinstance(entry, dict):
        return None
    rows = entry.get("row_tiles", entry.get("key_tiles"))
    tile_rows = entry.get("tile_rows", entry.get("tile_keys"))
    mean, area = entry.get("mean_tiles"), cell.get("area")
    if not all(isinstance(x, (int, float)) and x > 0 for x in (rows, tile_rows, mean, area)):
        return None
    return area / (rows * mean * tile_rows * TILE_COLS)


def tile_split(own):
    """(fill against full's, rate a tile against full's) of an own-full ratio, or None."""
    cell_fill, full_fill = tile_fill(own["cell"]), tile_fill(own["full"])
    if cell_fill is None or full_fill is None:
        return None
    fill = cell_fill / full_fill
    return fill, own["ratio"] / fill


def dispatch(cell):
    """The backward's dispatch_over_spread from plan_info (its blocks' simulated end over their work
    spread evenly over the SMs), or None where the record lacks it or the cell is a forward."""
    info = cell.get("plan_info")
    if cell.get("pass") != "bwd" or not isinstance(info, dict) or not isinstance(info.get("backward"), dict):
        return None
    value = info["backward"].get("dispatch_over_spread")
    return value if isinstance(value, (int, float)) and value > 0 else None


def split_text(own):
    """The tile split of an own-full share and, for a backward that records it, how far its
    simulated dispatch runs past an even spread against full's: a rate a tile that the schedule's
    tail explains, or not."""
    split = tile_split(own)
    cell_dispatch, full_dispatch = dispatch(own["cell"]), dispatch(own["full"])
    tail = None
    if cell_dispatch is not None and full_dispatch is not None:
        tail = f"blocks simulated to end {cell_dispatch:.2f}x an even spread (full {full_dispatch:.2f}x)"
    if split is None:
        return tail
    text = f"tiles filled {split[0]:.2f} as full's, run at {split[1]:.2f} of full's rate a tile"
    return f"{text}; {tail}" if tail else text


def fmt(x):
    return "-" if x is None else f"{x:.2f}"


def tf(x):
    """TFLOP/s: one decimal on a GPU's hundreds, three digits on a CPU's fractions."""
    return f"{x:.1f}" if x >= 10 else f"{x:.3g}"


def text_lines(rows, problems, subject, all_cells):
    out = [f"{subject} in a sweep; targets: own full >= {OWN_TARGET['fwd']:.2f} fwd / {OWN_TARGET['bwd']:.2f} bwd "
           f"(sliding windows {WINDOW_OWN_TARGET['fwd']:.2f} / {WINDOW_OWN_TARGET['bwd']:.2f}), "
           f">= {PEER_TARGET:.2f} of the best peer, full and causal >= {DENSE_TARGET['fwd']:.2f} fwd / "
           f"{DENSE_TARGET['bwd']:.2f} bwd of {DENSE_PEER}", ""]
    for r in rows:
        own = r["own"]
        if not r["cells"]:
            out.append(f"{r['mask']} {r['pass']}: no ok {subject} cells")
            continue
        head = (f"{r['mask']} {r['pass']} ({r['cells']} cells): own full {fmt(own and own['ratio'])}"
                f" (>= {fmt(r['own_target'])}) {r['own_verdict']}" if r["own_target"] is not None else
                f"{r['mask']} {r['pass']} ({r['cells']} cells): own full -")
        peer = r["peer"]
        head += f"; best peer {fmt(peer and peer['ratio'])}"
        head += f" {name_of(peer['best'])}" if peer else ""
        head += f" (>= {PEER_TARGET:.2f}) {r['peer_verdict']}"
        if r["dense_target"] is not None:
            dense = r["dense"]
            head += f"; {DENSE_PEER} {fmt(dense and dense['ratio'])} (>= {r['dense_target']:.2f}) {r['dense_verdict']}"
        out.append(head)
        if own:
            out.append(f"    own:  {describe_cell(own['cell'])}: {tf(own['cell']['tflops'])} of full "
                       f"{tf(own['full']['tflops'])} TFLOP/s")
            out.append(f"          plan_info: {plan_info_text(own['cell'])}")
            if split_text(own):
                out.append(f"          {split_text(own)}")
        if peer:
            rest = ", ".join(f"{name_of(o)} {tf(o['tflops'])}" + (UNSTEADY_MARK if unsteady(o) else "")
                             for o in sorted(peer["others"], key=lambda o: -o["tflops"]))
            out.append(f"    peer: {describe_cell(peer['cell'])}: {tf(peer['cell']['tflops'])} TFLOP/s vs {rest}")
            out.append(f"          plan_info: {plan_info_text(peer['cell'])}")
        if r["dense"] and r["dense"]["cell"] is not (peer or {}).get("cell"):
            d = r["dense"]
            out.append(f"    {DENSE_PEER}: {describe_cell(d['cell'])}: {tf(d['cell']['tflops'])} vs {tf(d['best']['tflops'])} TFLOP/s")
            out.append(f"          plan_info: {plan_info_text(d['cell'])}")
    out += [""] + unsteady_line(all_cells) + [f"Cells that failed or errored: {len(problems)}"]
    for c in problems:
        out.append(f"    {c.get('status')} {name_of(c)} {describe_cell(c)}: {results.message_of(c)}")
    return out


def markdown_lines(rows, problems, subject, all_cells):
    out = [f"| mask | pass | {subject} cells | own full | target | | vs best peer | | {DENSE_PEER} (full, causal) | | worst cells |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    details = []
    for r in rows:
        own, peer, dense = r["own"], r["peer"], r["dense"]
        cells = []
        if own:
            cells.append(f"own: {describe_cell(own['cell'])}")
            split = f" ({split_text(own)})" if split_text(own) else ""
            details.append(f"- {describe_cell(own['cell'])} ({fmt(own['ratio'])} of full{split}): "
                           f"`{plan_info_text(own['cell'])}`")
        if peer:
            cells.append(f"peer: {describe_cell(peer['cell'])}")
            if peer["cell"] is not (own or {}).get("cell"):
                details.append(f"- {describe_cell(peer['cell'])} ({fmt(peer['ratio'])} of {name_of(peer['best'])}): "
                               f"`{plan_info_text(peer['cell'])}`")
        peer_text = f"{fmt(peer['ratio'])} {name_of(peer['best'])}" if peer else "-"
        dense_text = f"{fmt(dense and dense['ratio'])} (>= {r['dense_target']:.2f})" if r["dense_target"] else "-"
        own_target = f">= {r['own_target']:.2f}" if r["own_target"] is not None else "-"
        out.append(f"| {r['mask']} | {r['pass']} | {r['cells']} | {fmt(own and own['ratio'])} | {own_target} | "
                   f"{r['own_verdict']} | {peer_text} | {r['peer_verdict']} | {dense_text} | {r['dense_verdict']} | "
                   f"{'; '.join(cells) or '-'} |")
    out += ["", f"Targets: own full >= {OWN_TARGET['fwd']:.2f} fwd / {OWN_TARGET['bwd']:.2f} bwd, the sliding windows "
            f">= {WINDOW_OWN_TARGET['fwd']:.2f} / {WINDOW_OWN_TARGET['bwd']:.2f}; >= {PEER_TARGET:.2f} of the best peer; "
            f"full and causal >= {DENSE_TARGET['fwd']:.2f} fwd / {DENSE_TARGET['bwd']:.2f} bwd of {DENSE_PEER}.", ""]
    if details:
        out += ["plan_info of the worst cells:", ""] + details + [""]
    out += [line + "." for line in unsteady_line(all_cells)]
    out.append(f"Cells that failed or errored: {len(problems)}")
    if problems:
        out.append("")
    for c in problems:
        out.append(f"- {c.get('status')} {name_of(c)} {describe_cell(c)}: {results.message_of(c)}")
    return out


def report(paths, markdown=False, subject="flex_flash", peers=None):
    """The report's lines and whether every target was met with no failed cell."""
    res = results.load(paths)
    rows, problems = analyse(res.plain(), subject, peers)
    if not any(r["cells"] for r in rows):
        raise results.ResultsError(f"{', '.join(paths)}: no ok {subject} cells to judge")
    lines = (markdown_lines if markdown else text_lines)(rows, problems, subject, res.plain())
    verdicts = [r[k] for r in rows for k in ("own_verdict", "peer_verdict", "dense_verdict")]
    return lines, "MISS" not in verdicts and not problems
