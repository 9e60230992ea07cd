"""Results files as the report sees them: run records (the environment of each run) and cell
records, each cell tagged with its file and, for context-parallel runs, the world size and the
strategy. Used by the summary, the charts and compare.
Rule: a cell's identity is `cell_key`; a later record of the same cell replaces an earlier one."""
import json
import math
import os
import re
from collections import OrderedDict

PASSES = ("fwd", "bwd")
PROBLEMS = ("FAIL", "ERROR", "CRASH", "TIMEOUT")  # statuses that make a run unhealthy


class ResultsError(Exception):
    """A results file that cannot be used: the message names the file and why."""


class Results:
    """Everything read from one or more results files."""

    def __init__(self):
        self.files = []   # paths, in the order given
        self.runs = []    # run records, each with "_file"
        self.cells = []   # cell records, deduplicated by cell_key (the last one wins)

    def plain(self):
        """Single-device cells (not context parallel)."""
        return [c for c in self.cells if not is_cp(c)]

    def cp(self):
        return [c for c in self.cells if is_cp(c)]

    def first_run_of(self, path):
        return next((r for r in self.runs if r["_file"] == path), None)


def load(paths):
    """Reads results files; lines that are not JSON (a line cut short by a crash) are skipped."""
    res = Results()
    by_key = OrderedDict()
    for path in paths:
        if not os.path.isfile(path):
            raise ResultsError(f"{path}: no such results file")
        res.files.append(path)
        run = None
        found = False
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if not isinstance(rec, dict):
                    continue
                kind = rec.get("type")
                if kind == "run":
                    run = dict(rec, _file=path)
                    res.runs.append(run)
                    found = True
                elif kind == "cell" and "kernel" in rec and "status" in rec:
                    cell = dict(rec, _file=path)
                    # A row is named by its label (a kernel with options: one plugin, several rows);
                    # the plugin stays under "plugin".
                    cell["plugin"] = rec["kernel"]
                    cell["kernel"] = rec.get("label") or rec["kernel"]
                    cp = (run or {}).get("cp")
                    if cp:
                        cell["cp_world_size"] = int(cp.get("world_size", 1))
                        cell["cp_strategy"] = rec["kernel"].split("/", 1)[0]
                    by_key[cell_key(cell)] = cell
                    found = True
        if not found:
            raise ResultsError(f"{path}: no lca run or cell records (is it a results .jsonl?)")
    res.cells = list(by_key.values())
    return res


def is_cp(cell):
    return "cp_world_size" in cell


def mask_label(cell):
    return cell.get("mask_label") or cell.get("mask", "?")


def config_label(cell):
    """The head configuration of a cell: heads_q:heads_kv, head dim, dtype."""
    return f"{cell.get('heads_q')}:{cell.get('heads_kv')} d{cell.get('head_dim')} {cell.get('dtype')}"


def cell_key(cell):
    """What makes two records the same cell: kernel, mask with parameters, shape, dtype, pass,
    and for context parallelism the world size (the strategy is part of the kernel name)."""
    return (cell["kernel"], mask_label(cell), int(cell.get("seqlen", 0)), cell.get("heads_q"),
            cell.get("heads_kv"), cell.get("head_dim"), cell.get("dtype"), cell.get("pass"),
            cell.get("cp_world_size", 0))


def describe_key(key):
    kernel, mask, seqlen, hq, hkv, d, dtype, pas, world = key
    text = f"{kernel} {mask} {seqlen_label(seqlen)} {hq}:{hkv} d{d} {dtype} {pas}"
    return text + (f" world {world}" if world else "")


def timed(cell):
    """True where the cell has a measured time (ok and FAIL cells)."""
    return cell.get("status") in ("ok", "FAIL") and bool(cell.get("time_ms"))


def seqlen_label(n):
    n = int(n)
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1048576}M" if n % 1048576 == 0 else f"{n // 1024}K"
    return str(n)


def gib(nbytes):
    return (nbytes or 0) / 2**30


def file_stem(text):
    """A file-name-safe form of a mask label: `sliding_window:window=4096` -> `sliding_window-window-4096`."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", text).strip("-") or "mask"


def message_of(cell):
    """The one-line message of a non-ok cell: its reason, and for FAIL the worst error."""
    msg = str(cell.get("reason", "")).replace("\n", " ").strip()
    check = cell.get("check") or {}
    if cell.get("status") == "FAIL" and check.get("errors"):
        name, err = max(check["errors"].items(), key=lambda kv: kv[1].get("rel_l2", 0))
        worst = f"worst {name} rel_l2 {err.get('rel_l2', 0):.3g} (tolerance {check.get('tolerance', 0):.3g})"
        msg = f"{msg}; {worst}" if msg else worst
    return msg or "(no message recorded)"


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)
