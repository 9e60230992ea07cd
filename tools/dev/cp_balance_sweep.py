#!/usr/bin/env python3
"""Judge a change to the balanced CP strategy with the scaling model on a seeded sweep, not on a preset.

    tools/dev/cp_balance_sweep.py run --lcahost build/bin/lcahost --label default --out /tmp/default.jsonl
    tools/dev/cp_balance_sweep.py run --lcahost build/bin/lcahost --label one_call_bwd \
        --cp-options '{"one_call":"bwd"}' --out /tmp/bwd.jsonl
    tools/dev/cp_balance_sweep.py compare /tmp/default.jsonl /tmp/bwd.jsonl

run: `lcahost cp-model` for balanced over every document-type mask (six document distributions, the
cp-balance ones and three others), several lengths a GPU (aligned and not), 2, 4 and 8 GPUs, both
head configurations, both passes and seeds other than the presets' 42; one JSON line a prediction.
Local calls are timed by tiles at the one-GPU rates of the 4-H200 cp-balance run; masks with no
one-GPU record there take a tile's time from --rate-from and their one-GPU time from their own tiles.
compare: the predicted shares of each file per cell class (mask, heads, pass), mean and worst, and
how many cells reach 0.90; the first file is the baseline.
"""
import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile

RESULTS = "docs/results"
RATES = f"{RESULTS}/2026-11-27-h200x4-cp-balance-np1-131072.jsonl"
PROBE = f"{RESULTS}/2026-11-27-h200x4-probe-np4.json"
PATTERNS = ["full_document", "causal_document", "shared_question", "prefix_lm_document", "causal_blockwise"]
DISTS = ["prolong64k", "chatqa", "uniform:2048-20480", "uniform:512-4096", "uniform:8192-32768", "pile"]
TOKENS = [24576, 32768, 40000, 49152, 57345]
WORLDS = [2, 4, 8]
SEEDS = [7, 1234]
HEADS = [(64, 8), (8, 1)]


def run(args):
    masks = [f"{p}:dist={d}" for p in PATTERNS for d in DISTS] + ["block_causal_document"]
    with open(args.out, "w") as out, tempfile.TemporaryDirectory() as tmp:
        for tokens, seed, (hq, hkv) in itertools.product(TOKENS, SEEDS, HEADS):
            js = os.path.join(tmp, "p.json")
            cmd = [args.lcahost, "cp-model", "--rates", args.rates, "--probe", PROBE, "--gpus-per-node", "8",
                   "--rate-from", args.rate_from, "--masks", ",".join(masks), "--pass", "fwd,bwd",
                   "--worlds", ",".join(map(str, WORLDS)), "--tokens-per-gpu", str(tokens), "--seed", str(seed),
                   "--heads-q", str(hq), "--heads-kv", str(hkv), "--strategies", "balanced",
                   "--cp-options", args.cp_options, "--json", js]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"cp-model failed ({' '.join(cmd)}):\n{r.stderr[-2000:]}")
            for p in json.load(open(js))["predictions"]:
                if "share" not in p:
                    continue
                p.update({"label": args.label, "tokens_per_gpu": tokens, "seed": seed, "cp_options": args.cp_options})
                out.write(json.dumps(p) + "\n")
            print(f"{args.label}: {tokens} tokens a GPU, seed {seed}, heads {hq}:{hkv} done", file=sys.stderr)


def key(p):
    return (p["mask"], p["heads_q"], p["heads_kv"], p["pass"], p["world"], p["tokens_per_gpu"], p["seed"])


def cls(p):
    m = p["mask"]
    pattern, _, dist = m.partition(":dist=")
    return (pattern, dist or "-", f"{p['heads_q']}:{p['heads_kv']}", p["pass"])


def compare(args):
    files = [[json.loads(l) for l in open(f)] for f in args.files]
    for name, f in zip(args.files, files):
        if not f:
            sys.exit(f"cp_balance_sweep.py compare: {name} holds no predictions (did its run fail? see its log)")
    labels = [f[0]["label"] for f in files]
    base = {key(p): p for p in files[0]}
    others = [{key(p): p for p in f} for f in files[1:]]
    rows = {}
    for k, p in base.items():
        if any(k not in o for o in others):
            continue
        rows.setdefault(cls(p), []).append([p["share"]] + [o[k]["share"] for o in others])
    head = "| mask | dist | heads | pass | cells | " + " | ".join(f"{l} mean (worst)" for l in labels)
    head += " | " + " | ".join(f"{l} >= 0.90" for l in labels) + " |"
    print(head)
    print("|" + "---|" * (5 + 2 * len(labels)))
    total = [[0, 0, 0.0] for _ in labels]
    for c in sorted(rows):
        v = rows[c]
        cols = []
        for i in range(len(labels)):
            xs = [x[i] for x in v]
            cols.append(f"{sum(xs) / len(xs):.2f} ({min(xs):.2f})")
            total[i][0] += sum(x >= 0.90 for x in xs)
            total[i][1] += len(xs)
            total[i][2] += sum(xs)
        ok = [str(sum(x[i] >= 0.90 for x in v)) for i in range(len(labels))]
        print(f"| {c[0]} | {c[1]} | {c[2]} | {c[3]} | {len(v)} | " + " | ".join(cols) + " | " + " | ".join(ok) + " |")
    for i, l in enumerate(labels):
        print(f"# {l}: {total[i][1]} cells, mean share {total[i][2] / total[i][1]:.3f}, {total[i][0]} >= 0.90")
    # Cells where a later file loses to the baseline by more than 2%.
    for j, o in enumerate(others, start=1):
        worse = [(k, base[k]["share"], o[k]["share"]) for k in base if k in o and o[k]["share"] < 0.98 * base[k]["share"]]
        print(f"# {labels[j]}: {len(worse)} cells below 0.98x {labels[0]}" +
              (f"; worst {min(w[2] / w[1] for w in worse):.2f}x at {min(worse, key=lambda w: w[2] / w[1])[0]}"
               if worse else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--lcahost", default="build/bin/lcahost")
    r.add_argument("--label", required=True)
    r.add_argument("--cp-options", default="{}")
    r.add_argument("--rate-from", default="causal_document:dist=uniform:2048-20480")
    r.add_argument("--rates", default=RATES, help="one-GPU results whose rates time the local calls (default: the 4-H200 cp-balance run)")
    r.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("files", nargs="+")
    a = ap.parse_args()
    run(a) if a.cmd == "run" else compare(a)


if __name__ == "__main__":
    main()
