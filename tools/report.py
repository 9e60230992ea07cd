#!/usr/bin/env python3
"""Reports from lca results files; `lcahost report` and `lcahost compare` run this script.

  report.py report RESULTS.jsonl [MORE.jsonl ...] --out DIR   charts (PNG) and DIR/summary.md
  report.py compare A.jsonl B.jsonl [--threshold 0.05]         B/A cell by cell; exit 1 on a regression

Exit status: 0 done, 1 regression (compare), 2 bad input or a missing dependency."""
import argparse
import os
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True  # the script may live in a read-only install

from lca_report import compare, results  # noqa: E402

MATPLOTLIB_FIX = ("install it with `sudo apt-get install python3-matplotlib` (tools/setup.sh does), "
                  "or set LCA_PYTHON to a python3 that has it")


def import_charts():
    """The charts module, re-running this script under another python3 when this one lacks
    matplotlib (a pyenv python3 first on PATH, with Debian's matplotlib under /usr/bin)."""
    try:
        from lca_report import charts
        return charts
    except ImportError:
        pass
    tried = [sys.executable]
    if not os.environ.get("LCA_REPORT_REEXEC"):
        for cand in (os.environ.get("LCA_PYTHON"), "/usr/bin/python3", shutil.which("python3")):
            if not cand or not os.access(cand, os.X_OK) or cand in tried:
                continue
            tried.append(cand)
            probe = subprocess.run([cand, "-c", "import matplotlib"], capture_output=True)
            if probe.returncode == 0:
                sys.stdout.flush()
                os.execve(cand, [cand, os.path.abspath(__file__)] + sys.argv[1:],
                          dict(os.environ, LCA_REPORT_REEXEC="1"))
    sys.stderr.write(f"report: matplotlib is missing (tried {', '.join(tried)}): {MATPLOTLIB_FIX}\n")
    sys.exit(2)


def cmd_report(args):
    charts = import_charts()
    res = results.load(args.results)
    os.makedirs(args.out, exist_ok=True)
    written = charts.render(res, args.out)
    from lca_report import summary
    path = os.path.join(args.out, "summary.md")
    summary.write(res, written, path)
    problems = sum(c["status"] in results.PROBLEMS for c in res.cells)
    print(f"report: {len(res.cells)} cells from {len(res.files)} file(s); {len(written)} charts and "
          f"{path} ({problems} FAIL/ERROR/CRASH/TIMEOUT cells listed)")
    return 0


def cmd_compare(args):
    return compare.main(args.a, args.b, args.threshold, args.min_band, args.format, sys.stdout)


def parser():
    p = argparse.ArgumentParser(prog="lcahost", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("report", help="charts and a Markdown summary of one or more results files")
    r.add_argument("results", nargs="+", help="results .jsonl files (lcahost --out); later cells replace earlier ones")
    r.add_argument("--out", required=True, help="folder for the PNGs and summary.md (created)")
    r.set_defaults(run=cmd_report)
    c = sub.add_parser("compare", help="B/A cell by cell with the noise band of the timed calls",
                       description="Matches cells by kernel, mask and parameters, length, heads, head dim, dtype, "
                                   "pass and CP world size; prints B/A of the median time and of TFLOP/s. The noise "
                                   "band is the sum of both runs' half-widths of their median's 95% confidence "
                                   "interval, from the ranks of the timed calls (about their min-max range for ten "
                                   "calls or fewer; the min-max range where a record has no calls), at least "
                                   "--min-band. Slower beyond the band and by more than --threshold, or a cell "
                                   "ok in A but E/FAIL/ERROR/CRASH/TIMEOUT in B, is a regression: exit status 1.")
    c.add_argument("a", help="the baseline results .jsonl")
    c.add_argument("b", help="the results to check against it")
    c.add_argument("--threshold", type=float, default=0.05,
                   help="a slowdown beyond the noise band counts as a regression above this fraction (default 0.05)")
    c.add_argument("--min-band", type=float, default=0.01, help="the narrowest noise band, as a fraction (default 0.01)")
    c.add_argument("--format", choices=("text", "md"), default="text", help="aligned text or Markdown (default text)")
    c.set_defaults(run=cmd_compare)
    return p


def main(argv):
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except results.ResultsError as e:
        sys.stderr.write(f"{args.command}: {e}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
