#!/usr/bin/env python3
"""Per-GPU share of one GPU for CP runs: each strategy's per-GPU TFLOP/s at N GPUs over flex_flash's
TFLOP/s on one GPU for the whole problem (same mask, heads, pass). Usage:
    tools/dev/cp_shares.py ONE_GPU.jsonl CP.jsonl [--balanced-from B.jsonl] [--before OLD_CP.jsonl] [--summary]
ONE_GPU.jsonl is `lcahost --matrix cp-balance --seqlens TOTAL`; CP.jsonl is the same matrix under
mpirun. --before adds balanced's share from an earlier CP run of the same matrix (e.g. other
defaults) and the ratio; --balanced-from takes balanced's cells from another run of the same
matrix and call (e.g. balanced alone under other options) in place of CP.jsonl's, cell by cell; --summary prints counts against the CP targets (0.95 full/causal, 0.90
document masks, balanced >= 1.10x usp on causal_document at 8:1) after the table. --model V.json
adds the scaling model's share for the best strategy of each row beside the measured one: V.json is
`lcahost cp-model --validate CP.jsonl --rates ONE_GPU.jsonl --probe PROBE.json --json V.json` (the
local calls timed by tiles where it has them, else by area)."""
import argparse
import json

ORDER = ["ulysses", "ring_p2p", "ring_allgather", "usp", "loongtrain", "balanced"]


def cells(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if r.get("type") != "cell" or r.get("status") != "ok":
            continue
        strategy = r["kernel"].split("/")[0] if "/" in r["kernel"] else "one"
        out[(strategy, r["mask_label"], f"{r['heads_q']}:{r['heads_kv']}", r["pass"])] = r["tflops"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("one_gpu")
    ap.add_argument("cp")
    ap.add_argument("--before")
    ap.add_argument("--balanced-from")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--model")
    a = ap.parse_args()
    one = {(m, h, p): t for (s, m, h, p), t in cells(a.one_gpu).items()}
    cp = cells(a.cp)
    if a.balanced_from:  # where it has a cell; CP.jsonl's elsewhere
        cp.update({k: v for k, v in cells(a.balanced_from).items() if k[0] == "balanced"})
    before = cells(a.before) if a.before else {}
    model = {}
    if a.model:
        v = json.load(open(a.model))
        if v.get("type") != "cp_model_validate":
            raise SystemExit(f"--model {a.model}: not the --json of `lcahost cp-model --validate`")
        for c in v["cells"]:
            model[(c["strategy"], c["mask"], f"{c['heads_q']}:{c['heads_kv']}", c["pass"])] = c.get("tiles", c["area"])["tflops"]
    strategies = [s for s in ORDER if any(k[0] == s for k in cp)]
    head = ["mask", "heads", "pass", "one GPU"] + strategies + ["best other", "balanced/usp"]
    if before:
        head += ["balanced before", "now/before"]
    if model:
        head += ["best, model"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    rows = []
    keys = sorted(one, key=lambda k: (k[1] != "64:8", k[0], k[2]))
    for k in keys:
        base = one[k]
        share = {s: cp[(s,) + k] / base for s in strategies if (s,) + k in cp}
        if not share:
            continue
        others = [v for s, v in share.items() if s != "balanced"]
        best_other = max(others) if others else float("nan")
        ratio = share["balanced"] / share["usp"] if "balanced" in share and "usp" in share else float("nan")
        row = [k[0], k[1], k[2], f"{base:.0f}"] + [f"{share[s]:.2f}" if s in share else "-" for s in strategies]
        row += [f"{best_other:.2f}", f"{ratio:.2f}"]
        if before:
            b = before.get(("balanced",) + k)
            row += [f"{b / base:.2f}" if b else "-", f"{cp[('balanced',) + k] / b:.2f}" if b and ("balanced",) + k in cp else "-"]
        if model:
            best = max(share, key=share.get)
            m = model.get((best,) + k)
            row += [f"{m / base:.2f} ({best})" if m else "-"]
        print("| " + " | ".join(row) + " |")
        rows.append((k, share, ratio))
    if a.summary:
        dense = [(k, max(s.values())) for k, s, _ in rows if k[0] in ("full", "causal")]
        docs = [(k, max(s.values())) for k, s, _ in rows if k[0] not in ("full", "causal")]
        print()
        print(f"full/causal: best >= 0.95 on {sum(v >= 0.95 for _, v in dense)} of {len(dense)} "
              f"(range {min(v for _, v in dense):.2f}-{max(v for _, v in dense):.2f})")
        print(f"document masks: best >= 0.90 on {sum(v >= 0.90 for _, v in docs)} of {len(docs)} "
              f"(range {min(v for _, v in docs):.2f}-{max(v for _, v in docs):.2f})")
        bal_best = sum(1 for k, s, _ in rows if k[0] not in ("full", "causal") and s.get("balanced", 0) >= max(s.values()) - 1e-9)
        print(f"balanced best on {bal_best} of {len(docs)} document cells")
        cd = [(k, r) for k, _, r in rows if k[0].startswith("causal_document") and k[1] == "8:1"]
        print("balanced/usp on causal_document 8:1: " + ", ".join(f"{k[0].split('=')[-1]} {k[2]} {r:.2f}" for k, r in cd))


if __name__ == "__main__":
    main()
