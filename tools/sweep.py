#!/usr/bin/env python3
"""The cliff finder: flex_flash on lengths, head shapes and mask parameters that no preset holds,
drawn from a seed, against its own full and against its peers.

  tools/sweep.py plan --seed 1 --out sweep-1        draw; write the specs, plan.json and run.sh
  bash sweep-1/run.sh                               run them (LCAHOST, PLUGINS, DEADLINE_S, GPUS: see run.sh)
  tools/sweep.py report sweep-1                     worst cells per mask and pass, PASS / MISS

`plan` draws --groups groups (default 6), each a length in --min-len..--max-len (4K-128K, uniform
in log space; every other one a multiple of neither 64 nor 128), a head shape (64:8, 32:32, 8:1
with d64 or d128; six groups hold all six) and, for each of the 14 builtin masks, parameters inside
their valid ranges: document distributions (uniform:LO-HI ranges or the named histograms),
windows, prefixes, global tokens, video block sizes, block-sparse blocks and kept fractions. Each
group becomes one matrix spec (gNN.json) with --kernels (default flex_flash,cudnn_sdpa; add
torch_flex,torch_sdpa_flash,torch_sdpa_cudnn where the torch peers are built: run.sh runs only
the ones `lcahost list` has loaded), fwd and bwd, warm-up and timing by time (--warmup-ms and
--repeat-ms, 300 ms each), and the reference check on groups up to --check-max-len tokens
(32768; 0 checks none). plan.json holds the draw and an H100 time for each group (fitted to past
sweeps: 1.02-1.27x what the groups of seeds 19 and 23 took); run.sh runs the cheap
groups first into one results.jsonl (lcahost --resume, so running it again resumes); with
GPUS=0,1,2,3 it spreads the groups over those GPUs by that time (the longest first onto the least
loaded), each group into its own results-gNN.jsonl.

`report` reads results files or run.sh's folder and prints, per mask and pass, the worst ratio of flex_flash's TFLOP/s to its own full at
the same length, heads, head dim and pass, and the worst ratio to the best peer on the same cell
(both cells ok), naming each cell with its flex_flash plan_info (marked "[warm-up unsteady]" where
its warm-up ended on the runner's cap with the times still moving, and such cells counted); the
cells that failed their check or errored; and PASS / MISS against the targets: own full >= 0.85 fwd / 0.80 bwd (the three
sliding windows 0.75 / 0.70), >= 0.97 of the best peer, full and causal >= 1.0 fwd / 0.97 bwd of
cudnn_sdpa. --markdown writes a table; --peers limits the peers (e.g. cudnn_sdpa,torch_flex).
Exit status: 0 every target met and no cell failed, 1 a MISS or a failed cell, 2 bad input.

Use several seeds; a schedule tuned to one seed's cells proves nothing about the next."""
import argparse
import glob
import os
import sys

sys.dont_write_bytecode = True  # the script may live in a read-only install

from lca_report import results  # noqa: E402  (tools/ is on sys.path: the script's folder)
from lca_sweep import draw, plan, report  # noqa: E402


def at_least(kind, minimum):
    """An argparse type: a number of `kind` (int or float), refused below `minimum`."""
    def parse(text):
        try:
            x = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not {'an integer' if kind is int else 'a number'}")
        if x < minimum:
            raise argparse.ArgumentTypeError(f"{text} must be at least {minimum}")
        return x
    return parse


positive_int = at_least(int, 1)


def non_negative(kind):
    return at_least(kind, 0)


def kernel_list(text):
    names = [k.strip() for k in text.split(",") if k.strip()]
    if not names:
        raise argparse.ArgumentTypeError("no kernel named")
    return names


def main(argv):
    ap = argparse.ArgumentParser(prog="sweep.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="draw a sweep and write its matrix specs, plan.json and run.sh")
    p.add_argument("--seed", type=non_negative(int), required=True)
    p.add_argument("--groups", type=positive_int, default=6, help="(length, heads, head dim) groups (default 6)")
    p.add_argument("--min-len", type=positive_int, default=4096)
    p.add_argument("--max-len", type=positive_int, default=131072)
    p.add_argument("--kernels", type=kernel_list, default=list(plan.DEFAULT_KERNELS),
                   help="comma separated, flex_flash first (default flex_flash,cudnn_sdpa)")
    p.add_argument("--warmup", type=non_negative(int), default=1, help="untimed calls first (default 1)")
    p.add_argument("--warmup-ms", type=non_negative(float), default=300.0)
    p.add_argument("--repeats", type=positive_int, default=3, help="timed calls at least (default 3)")
    p.add_argument("--repeat-ms", type=non_negative(float), default=300.0)
    p.add_argument("--check-max-len", type=non_negative(int), default=32768,
                   help="check groups up to this many tokens against the reference (default 32768; 0: none)")
    p.add_argument("--out", required=True, help="folder for the specs, plan.json and run.sh")
    r = sub.add_parser("report", help="worst ratios per mask and pass, PASS / MISS against the targets")
    r.add_argument("results", nargs="+", help="results .jsonl files of run.sh, or its folder")
    r.add_argument("--markdown", action="store_true", help="a Markdown table")
    r.add_argument("--kernel", default="flex_flash", help="the kernel judged (default flex_flash)")
    r.add_argument("--peers", type=kernel_list, help="only these peers (default: every other kernel)")
    opt = ap.parse_args(argv)

    if opt.command == "plan":
        if opt.min_len > opt.max_len:
            ap.error(f"--min-len {opt.min_len} is above --max-len {opt.max_len}")
        if "flex_flash" not in opt.kernels:
            ap.error("--kernels must hold flex_flash: the sweep judges it")
        if len(set(opt.kernels)) != len(opt.kernels):
            ap.error(f"--kernels names a kernel twice: {','.join(opt.kernels)}")
        opt.kernels = ["flex_flash"] + [k for k in opt.kernels if k != "flex_flash"]
        if os.path.exists(os.path.join(opt.out, "results.jsonl")):
            ap.error(f"{opt.out} already holds results.jsonl from a run; plan into another folder")
        made = plan.write_plan(opt, opt.out)
        for g in made["groups"]:
            print(f"{g['file']}: {g['seqlen']} tokens, heads {g['heads']}, d{g['head_dim']}, "
                  f"{'checked' if g['check'] else 'unchecked'}, ~{g['estimate_s']:.0f} s")
        print(f"{len(made['groups'])} groups x {len(draw.MASKS)} masks x {len(opt.kernels)} kernels x fwd, bwd; "
              f"~{made['estimate_s']:.0f} s on an H100 (rough); plan in {os.path.join(opt.out, 'plan.json')}")
        print(f"run: bash {os.path.join(opt.out, 'run.sh')}   (LCAHOST, PLUGINS, DEADLINE_S, GPUS: see the script)")
        return 0

    paths = []
    for p in opt.results:
        if os.path.isdir(p):  # run.sh's folder: results.jsonl, or results-gNN.jsonl of a run with GPUS
            found = sorted(glob.glob(os.path.join(p, "results.jsonl")) + glob.glob(os.path.join(p, "results-g*.jsonl")))
            if not found:
                print(f"sweep.py report: {p} holds no results.jsonl or results-gNN.jsonl (has run.sh run?)",
                      file=sys.stderr)
                return 2
            paths += found
        else:
            paths.append(p)
    try:
        lines, met = report.report(paths, opt.markdown, opt.kernel, set(opt.peers) if opt.peers else None)
    except results.ResultsError as e:
        print(f"sweep.py report: {e}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
