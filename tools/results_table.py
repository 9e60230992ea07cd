#!/usr/bin/env python3
"""Markdown table of a results .jsonl: per mask and length, each kernel's forward / backward
TFLOP/s and peak GiB (the cell's total); context-parallel cells in a second table, one column per
strategy, world size and head config, TFLOP/s per GPU. Usage: tools/results_table.py RESULTS.jsonl
(`lcahost report` writes this table, with charts, into its summary.md.)"""
import sys

sys.dont_write_bytecode = True

from lca_report import results, tables  # noqa: E402  (tools/ is on sys.path: the script's folder)


def main(path):
    res = results.load([path])
    line = tables.ceilings_line(res.runs[0] if res.runs else None)
    if line:
        print(line + "\n")
    plain, cp = res.plain(), res.cp()
    if plain or not cp:
        print("\n".join(tables.results_table(plain)))
    if cp:
        if plain:
            print()
        print("Context parallel, TFLOP/s per GPU:\n")
        print("\n".join(tables.results_table([dict(c, kernel=f"{c['kernel']} np {c['cp_world_size']} {c['heads_q']}:{c['heads_kv']}") for c in cp])))


if __name__ == "__main__":
    main(sys.argv[1])
