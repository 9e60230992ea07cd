"""Reading lca results files (JSON Lines) and turning them into charts, a Markdown summary and a
cell-by-cell comparison of two runs. Used by tools/report.py (and so by `lcahost report` and
`lcahost compare`) and by tools/results_table.py.
Rule: only charts.py imports matplotlib, so compare and the tables work without it."""
