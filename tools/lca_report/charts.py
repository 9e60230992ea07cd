"""The report's charts (matplotlib, Agg): per mask, grouped bars of TFLOP/s and of peak memory by
sequence length and kernel, forward and backward side by side, with the status written where a
cell has no bar (X unsupported, E out of memory, ...); for context-parallel cells, TFLOP/s per
GPU against world size, a line per strategy. Used by tools/report.py.
Rule: a kernel keeps its colour in every chart of a report (colours follow the sorted names)."""
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.patches import Patch  # noqa: E402

from .results import PASSES, config_label, file_stem, gib, mask_label, seqlen_label, timed  # noqa: E402

PASS_TITLES = {"fwd": "forward", "bwd": "backward"}
# What is written where a bar would be: the paper's X and E, and the harness's own failures.
MARKS = {"X": "X", "E": "E", "ERROR": "ERROR", "CRASH": "CRASH", "TIMEOUT": "TIMEOUT"}
NOTES = {"X": "X = unsupported", "E": "E = out of memory", "FAIL": "hatched = FAIL (outside tolerance)",
         "-": "- = not run"}


def legend_note(statuses):
    """The key to the marks a chart shows (X and E always, as in the papers' figures)."""
    return "    ".join(text for s, text in NOTES.items() if s in statuses or s in ("X", "E"))


def fmt_value(v):
    if v >= 10:
        return f"{v:.0f}"
    if v >= 1:
        return f"{v:.1f}"
    return f"{v:.2g}"


def colours(names):
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    return {name: cmap(i % cmap.N) for i, name in enumerate(sorted(names))}


def _mark(ax, x, status, colour):
    """The status at the foot of the slot where the bar would stand ("-": no record)."""
    text = MARKS.get(status, status)
    colour = "grey" if status == "-" else colour
    long = len(text) > 1
    ax.text(x, 0.015, text, transform=ax.get_xaxis_transform(), ha="center", va="bottom",
            fontsize=7 if long else 11, fontweight="bold", color=colour,
            rotation=90 if long else 0)


def _bar_panel(ax, cells, seqlens, kernels, colour, value, labels):
    width = 0.8 / max(1, len(kernels))
    top = 0.0
    for i, s in enumerate(seqlens):
        for j, k in enumerate(kernels):
            x = i - 0.4 + width * (j + 0.5)
            c = cells.get((s, k), {"status": "-"})
            v = value(c) if timed(c) else None
            if v is None:
                _mark(ax, x, c.get("status", "?"), colour[k])
                continue
            failed = c["status"] == "FAIL"
            ax.bar(x, v, width * 0.92, color=colour[k], edgecolor="black" if failed else colour[k],
                   hatch="///" if failed else None, linewidth=0.6)
            top = max(top, v)
            if labels:
                ax.text(x, v, " " + fmt_value(v), ha="center", va="bottom", rotation=90, fontsize=7)
    ax.set_xticks(range(len(seqlens)))
    ax.set_xticklabels([seqlen_label(s) for s in seqlens])
    ax.set_xlim(-0.6, len(seqlens) - 0.4)
    ax.set_xlabel("sequence length")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    return top


def bar_chart(cells, title, ylabel, value, path, colour, ceiling=None):
    """Grouped bars: x = sequence length, one bar per kernel; forward and backward panels."""
    kernels = sorted({c["kernel"] for c in cells})
    seqlens = sorted({int(c["seqlen"]) for c in cells})
    by_pass = defaultdict(dict)
    for c in cells:
        by_pass[c.get("pass")][(int(c["seqlen"]), c["kernel"])] = c
    passes = [p for p in PASSES if p in by_pass] or sorted(by_pass)
    bars = len(seqlens) * len(kernels)
    width = min(22.0, max(5.0, 1.0 + 0.32 * bars)) * len(passes)
    fig, axes = plt.subplots(1, len(passes), figsize=(min(width, 24.0), 4.6), sharey=True, squeeze=False)
    top = 0.0
    for ax, p in zip(axes[0], passes):
        top = max(top, _bar_panel(ax, by_pass[p], seqlens, kernels, colour, value, labels=bars <= 48))
        ax.set_title(PASS_TITLES.get(p, p))
    axes[0][0].set_ylabel(ylabel)
    if ceiling and ceiling[0] < 3 * max(top, 1e-12):
        for ax in axes[0]:
            ax.axhline(ceiling[0], color="grey", linestyle="--", linewidth=0.9)
        axes[0][-1].text(1.0, ceiling[0], ceiling[1], transform=axes[0][-1].get_yaxis_transform(),
                         ha="right", va="bottom", fontsize=7, color="dimgrey")
        top = max(top, ceiling[0])
    axes[0][0].set_ylim(0, top * 1.22 if top > 0 else 1.0)
    statuses = {c["status"] for c in cells}
    if any((s, k) not in by_pass[p] for p in passes for s in seqlens for k in kernels):
        statuses.add("-")
    handles = [Patch(facecolor=colour[k], label=k) for k in kernels]
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(kernels), 6),
               frameon=False, fontsize=9, title=legend_note(statuses), title_fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def cp_chart(cells, title, path, colour):
    """TFLOP/s per GPU against world size, a line per strategy (and per-rank length)."""
    by_pass = defaultdict(lambda: defaultdict(dict))
    for c in cells:
        world = c["cp_world_size"]
        line = (c["kernel"], int(c["seqlen"]) // max(1, world))
        by_pass[c.get("pass")][line][world] = c
    passes = [p for p in PASSES if p in by_pass] or sorted(by_pass)
    worlds = sorted({c["cp_world_size"] for c in cells})
    lengths = {ln for p in by_pass.values() for (_, ln) in p}
    several_lengths = len(lengths) > 1
    if not several_lengths:
        title += f", {seqlen_label(next(iter(lengths)))} tokens per rank"
    fig, axes = plt.subplots(1, len(passes), figsize=(6.0 * len(passes), 4.4), sharey=True, squeeze=False)
    top = 0.0
    for ax, p in zip(axes[0], passes):
        for (kernel, per_rank), points in sorted(by_pass[p].items()):
            label = kernel + (f" ({seqlen_label(per_rank)}/rank)" if several_lengths else "")
            xs = [w for w in sorted(points) if timed(points[w])]
            ys = [points[w].get("tflops", 0.0) for w in xs]
            style = "-" if per_rank == min(ln for (_, ln) in by_pass[p]) else "--"
            ax.plot(xs, ys, style, marker="o", color=colour[kernel], label=label)
            top = max([top] + ys)
            for w, c in points.items():
                if not timed(c):
                    _mark(ax, w, c.get("status", "?"), colour[kernel])
        ax.set_xscale("log", base=2)
        ax.set_xticks(worlds)
        ax.set_xticklabels([str(w) for w in worlds])
        ax.set_xlim(worlds[0] / 1.4, worlds[-1] * 1.4)
        ax.set_xlabel("world size (GPUs / ranks)")
        ax.set_title(PASS_TITLES.get(p, p))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("TFLOP/s per GPU")
    axes[0][0].set_ylim(0, top * 1.2 if top > 0 else 1.0)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(labels), 4),
               frameon=False, fontsize=9, title=legend_note({c["status"] for c in cells}), title_fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def _groups(cells):
    """Cells by (mask label, head configuration), and whether a mask has several configurations."""
    groups = defaultdict(list)
    for c in cells:
        groups[(mask_label(c), config_label(c))].append(c)
    configs = defaultdict(set)
    for m, cfg in groups:
        configs[m].add(cfg)
    return groups, {m: len(v) > 1 for m, v in configs.items()}


def _ceiling(results, cells):
    """The measured GEMM ceiling, drawn on GPU TFLOP/s charts of half-precision cells."""
    if not all(c.get("device") == "cuda" and c.get("dtype") in ("bf16", "fp16", "f16") for c in cells):
        return None
    for run in results.runs:
        gemm = ((run.get("gpu") or {}).get("ceilings") or {}).get("gemm_tflops")
        if gemm:
            return (gemm, f"bf16 GEMM ceiling {gemm:.0f} ")
    return None


def render(results, out_dir):
    """Writes every chart into out_dir; returns [(kind, mask, config, file name)] in order."""
    written = []
    plain = results.plain()
    colour = colours({c["kernel"] for c in results.cells})
    groups, several = _groups(plain)
    for (mask, cfg), cells in sorted(groups.items()):
        stem = file_stem(mask) + (f"_{file_stem(cfg)}" if several[mask] else "")
        heading = f"{mask}  ({cfg})"
        name = f"{stem}_tflops.png"
        bar_chart(cells, f"{heading}: TFLOP/s", "TFLOP/s", lambda c: c.get("tflops", 0.0),
                  f"{out_dir}/{name}", colour, _ceiling(results, cells))
        written.append(("tflops", mask, cfg, name))
        name = f"{stem}_memory.png"
        bar_chart(cells, f"{heading}: peak memory", "peak memory (GiB)",
                  lambda c: gib(c.get("total_peak_bytes", 0)), f"{out_dir}/{name}", colour)
        written.append(("memory", mask, cfg, name))
    groups, several = _groups(results.cp())
    for (mask, cfg), cells in sorted(groups.items()):
        name = f"cp_{file_stem(mask)}" + (f"_{file_stem(cfg)}" if several[mask] else "") + ".png"
        cp_chart(cells, f"{mask}  ({cfg}): context parallel, TFLOP/s per GPU", f"{out_dir}/{name}", colour)
        written.append(("cp", mask, cfg, name))
    return written
