"""The report's summary.md: inputs, environment, measured ceilings, capabilities, the best
kernel per mask and length, context-parallel scaling, every failed cell with its message, the
skipped cells by reason, the full results table and the charts. Used by tools/report.py.
Rule: every section is always written (with "None." where it is empty), so readers and tests
can rely on the headings."""
from collections import Counter, defaultdict

from .results import PROBLEMS, config_label, gib, is_cp, mask_label, message_of, seqlen_label
from .tables import markdown, results_table

SECTIONS = ("Inputs", "Environment", "Measured ceilings", "Capabilities", "Best kernel per mask and length",
            "Context parallelism", "Failures", "Skipped and out of memory", "All cells", "Charts")


def _version(v):
    """CUDA's 1000 * major + 10 * minor encoding, as major.minor."""
    return f"{v // 1000}.{(v % 1000) // 10}" if isinstance(v, int) and v >= 1000 else str(v)


def _counts(cells):
    c = Counter(x["status"] for x in cells)
    return ", ".join(f"{s} {n}" for s, n in sorted(c.items(), key=lambda kv: (kv[0] != "ok", kv[0])))


def _who(c):
    who = c["kernel"]
    return who + (f" (world {c['cp_world_size']})" if is_cp(c) else "")


def inputs(res):
    out = []
    for path in res.files:
        cells = [c for c in res.cells if c["_file"] == path]
        runs = [r for r in res.runs if r["_file"] == path]
        matrix = (runs[0].get("matrix") or {}).get("name", "?") if runs else "?"
        started = runs[0].get("started", "?") if runs else "?"
        resumed = f", resumed {len(runs) - 1} time(s)" if len(runs) > 1 else ""
        out.append(f"- `{path}`: matrix `{matrix}`, started {started}{resumed}; {len(cells)} cells ({_counts(cells)})")
    return out


def environment(res):
    firsts = [res.first_run_of(p) for p in res.files]
    firsts = [r for r in firsts if r]
    if not firsts:
        return ["None: the files carry no run record."]
    fields = [
        ("host", lambda r: r.get("host")), ("os", lambda r: r.get("os")),
        ("cpu", lambda r: f"{r.get('cpu')} ({r.get('cpu_threads')} threads)" if r.get("cpu") else None),
        ("compiler", lambda r: r.get("compiler")),
        ("lca", lambda r: f"{r.get('lca_version')} ({r.get('git_revision')}), ABI {r.get('abi')}"),
        ("matrix", lambda r: _matrix(r.get("matrix") or {})),
        ("context parallel", lambda r: _cp(r.get("cp"))),
        ("GPU", lambda r: _gpu(r.get("gpu"))),
        ("GPU memory", lambda r: f"{gib(r['gpu'].get('total_mem_bytes')):.1f} GiB, L2 {r['gpu'].get('l2_bytes', 0) // 2**20} MiB"
         if r.get("gpu") else None),
        ("clocks", lambda r: f"SM {r['gpu'].get('sm_clock_mhz')} MHz, memory {r['gpu'].get('mem_clock_mhz')} MHz"
         if r.get("gpu") else None),
        ("driver / CUDA runtime", lambda r: f"{_version(r['gpu'].get('driver_version'))} / "
         f"{_version(r['gpu'].get('cuda_runtime_version'))}" if r.get("gpu") else None),
        ("cuDNN / cuBLAS / NCCL", lambda r: " / ".join(str(r["gpu"].get(k, "-")) for k in
                                                       ("cudnn_version", "cublas_version", "nccl_version"))
         if r.get("gpu") else None),
    ]
    rows = []
    for name, get in fields:
        values = [get(r) for r in firsts]
        if any(v for v in values):
            rows.append([name] + [v or "-" for v in values])
    return markdown([""] + [f"`{r['_file'].rsplit('/', 1)[-1]}`" for r in firsts], rows)


def _matrix(m):
    if not m:
        return None
    parts = [f"`{m.get('name', '?')}`"]
    if "warmup" in m:
        parts.append(f"warmup {m['warmup']}")
    if m.get("warmup_ms"):
        parts.append(f"and {m['warmup_ms']:g} ms")
    for k in ("repeats", "seed"):
        if k in m:
            parts.append(f"{k} {m[k]}")
            if k == "repeats" and m.get("repeat_ms"):
                parts.append(f"and {m['repeat_ms']:g} ms")
    if "check" in m:
        parts.append("checked" if m["check"] else "not checked")
    return ", ".join(parts)


def _cp(cp):
    if not cp:
        return None
    return f"world size {cp.get('world_size')} ({cp.get('backend')}, {cp.get('local_size')} per node), kernel {cp.get('kernel')}"


def _gpu(g):
    if not g:
        return None
    return f"{g.get('name')} (sm_{str(g.get('compute_capability', '?')).replace('.', '')}, {g.get('sm_count')} SMs)"


def ceilings(res):
    rows = []
    for path in res.files:
        run = res.first_run_of(path)
        c = ((run or {}).get("gpu") or {}).get("ceilings") or {}
        if c:
            rows.append([f"`{path.rsplit('/', 1)[-1]}`", f"{c.get('gemm_tflops', 0):.0f} TFLOP/s", c.get("gemm", ""),
                         f"{c.get('copy_gbps', 0):.0f} GB/s", c.get("copy", "")])
    if not rows:
        return ["None measured (no GPU in these runs)."]
    return markdown(["run", "GEMM", "how", "copy", "how"], rows)


def capabilities(res):
    out = []
    declared, plugins = {}, {}
    for run in res.runs:
        for p in run.get("plugins") or []:
            plugins.setdefault(p.get("name"), p)
            if p.get("caps"):
                declared.setdefault(p["name"], p)
    if declared:
        out.append("Declared by the manifests:")
        out.append("")
        rows = []
        for name, p in sorted(declared.items()):
            c = p["caps"]
            dims = c.get("head_dims")
            masks = c.get("masks")
            rows.append([name, p.get("version", ""), c.get("device", ""), ", ".join(c.get("dtypes", [])),
                         dims if isinstance(dims, str) else ", ".join(map(str, dims or [])),
                         _yes(c.get("gqa")), _yes(c.get("backward")), _yes(c.get("varlen")),
                         masks if isinstance(masks, str) else ", ".join(masks or [])])
        out += markdown(["kernel", "version", "device", "dtypes", "head dims", "GQA", "bwd", "varlen", "masks"], rows)
    elif plugins:
        out.append("Plugins loaded for the run (the manifests' capabilities are not in these files):")
        out.append("")
        rows = [[n, p.get("kind", ""), p.get("version", ""), "yes" if p.get("loaded") else f"refused: {p.get('refusal', '')}"]
                for n, p in sorted(plugins.items())]
        out += markdown(["plugin", "kind", "version", "loaded"], rows)
    plain = res.plain()
    if plain:
        out += ["", "As measured (statuses of each kernel's cells per mask):", ""]
        kernels = sorted({c["kernel"] for c in plain})
        grid = defaultdict(Counter)
        for c in plain:
            grid[(mask_label(c), c["kernel"])][c["status"]] += 1
        rows = []
        for m in sorted({mask_label(c) for c in plain}):
            row = [m]
            for k in kernels:
                n = grid.get((m, k))
                row.append("-" if not n else next(iter(n)) if len(n) == 1 else
                           ", ".join(f"{s} {v}" for s, v in sorted(n.items())))
            rows.append(row)
        out += markdown(["mask"] + kernels, rows)
    return out or ["None: the files carry neither plugins nor cells."]


def _num(v):
    return f"{v:.0f}" if v >= 10 else f"{v:.3g}"


def _yes(v):
    return "yes" if v else "no"


def best(res):
    plain = [c for c in res.plain() if c["status"] == "ok"]
    if not plain:
        return ["None: no single-device cell ran ok."]
    several = len({config_label(c) for c in plain}) > 1
    table = defaultdict(lambda: defaultdict(list))
    for c in plain:
        table[(mask_label(c), config_label(c), int(c["seqlen"]))][c["pass"]].append(c)
    rows = []
    for (m, cfg, s), passes in sorted(table.items()):
        row = [m] + ([cfg] if several else []) + [seqlen_label(s)]
        for p in ("fwd", "bwd"):
            ranked = sorted(passes.get(p, []), key=lambda c: -c.get("tflops", 0))
            if not ranked:
                row.append("-")
                continue
            top = ranked[0]
            text = f"**{top['kernel']}** {_num(top['tflops'])}"
            if len(ranked) > 1 and ranked[1].get("tflops"):
                text += f" ({_num(top['tflops'] / ranked[1]['tflops'])}x {ranked[1]['kernel']})"
            row.append(text)
        rows.append(row)
    head = ["mask"] + (["heads, dim, dtype"] if several else []) + ["seqlen", "fwd TFLOP/s", "bwd TFLOP/s"]
    return ["The fastest ok cell (TFLOP/s), and how far ahead of the runner-up.", ""] + markdown(head, rows)


def context_parallel(res):
    cells = res.cp()
    if not cells:
        return ["None: no context-parallel cells."]
    strategies = sorted({c["kernel"] for c in cells})
    table = defaultdict(dict)
    for c in cells:
        w = c["cp_world_size"]
        key = (mask_label(c), config_label(c), int(c["seqlen"]) // max(1, w), w)
        table[key].setdefault(c["kernel"], {})[c["pass"]] = _num(c["tflops"]) if c["status"] == "ok" else c["status"]
    rows = []
    for (m, cfg, per_rank, w), by in sorted(table.items()):
        rows.append([m, cfg, seqlen_label(per_rank), str(w)] +
                    [f"{by.get(s, {}).get('fwd', '-')} / {by.get(s, {}).get('bwd', '-')}" for s in strategies])
    return (["TFLOP/s per GPU (per rank), forward / backward; lengths are per rank.", ""] +
            markdown(["mask", "heads, dim, dtype", "length / rank", "world"] + strategies, rows))


def failures(res):
    bad = [c for c in res.cells if c["status"] in PROBLEMS]
    if not bad:
        return ["None: no cell is FAIL, ERROR, CRASH or TIMEOUT."]
    rows = [[_who(c), mask_label(c), seqlen_label(c["seqlen"]), f"{c.get('heads_q')}:{c.get('heads_kv')}",
             c.get("head_dim"), c.get("dtype"), c.get("pass"), c["status"], message_of(c)]
            for c in sorted(bad, key=lambda c: (c["kernel"], mask_label(c), int(c["seqlen"]), c.get("pass", "")))]
    return [f"{len(bad)} cell(s):", ""] + markdown(
        ["kernel", "mask", "seqlen", "heads", "dim", "dtype", "pass", "status", "message"], rows)


def skipped(res):
    groups = defaultdict(list)
    for c in res.cells:
        if c["status"] in ("X", "E"):
            groups[(c["status"], c["kernel"], message_of(c))].append(c)
    if not groups:
        return ["None."]
    rows = []
    for (status, kernel, why), cells in sorted(groups.items()):
        lengths = sorted({int(c["seqlen"]) for c in cells})
        rows.append([status, kernel, why, len(cells), ", ".join(seqlen_label(s) for s in lengths)])
    return markdown(["status", "kernel", "reason", "cells", "lengths"], rows)


def charts(written):
    if not written:
        return ["None."]
    out = []
    for kind, mask, cfg, name in written:
        label = {"tflops": "TFLOP/s", "memory": "peak memory", "cp": "context parallel"}[kind]
        out += [f"### {mask} ({cfg}): {label}", "", f"![{mask} {label}]({name})", ""]
    return out


def write(res, written, path):
    body = {
        "Inputs": inputs(res), "Environment": environment(res), "Measured ceilings": ceilings(res),
        "Capabilities": capabilities(res), "Best kernel per mask and length": best(res),
        "Context parallelism": context_parallel(res), "Failures": failures(res),
        "Skipped and out of memory": skipped(res),
        "All cells": (["forward / backward TFLOP/s (peak GiB of the cell)", ""] + results_table(res.plain())
                      if res.plain() else ["None."]),
        "Charts": charts(written),
    }
    lines = ["# lca report", ""]
    for name in SECTIONS:
        lines += [f"## {name}", ""] + body[name] + [""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines).rstrip() + "\n")
