#!/usr/bin/env python3
"""Per source line of a kernel: instructions executed and warp-stall samples (with the top stall
reasons), from Nsight Compute's source page exported as CSV; with a second export, the difference
per unit of work (a step, an iteration) between two kernels or masks, largest first: for instance where
sliding_window_causal's forward steps spend their extra instructions against full's.

Export (on the GPU machine, a build configured with -DCMAKE_CUDA_FLAGS=-lineinfo):
  ncu --section SourceCounters --section WarpStateStats --import-source yes --kernel-name regex:forward_sm90 \\
      --launch-count 1 -o rep build-gpu/bin/lcahost ... --masks sliding_window_causal --no-check
  ncu -i rep.ncu-rep --page source --csv --print-source cuda,sass > swc.csv
Usage: ncu_lines.py A.csv [--per N] [--top K]
       ncu_lines.py A.csv B.csv --per N --per-b M   (B per M units minus A per N units)"""
import argparse
import collections
import csv


def load(path):
    """(file, line) -> {"src", "instructions", "samples", stall reason -> samples}"""
    lines = collections.defaultdict(lambda: collections.defaultdict(float))
    header, source_file = None, None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "File Path":
                source_file = row[1].rsplit("/", 1)[-1]
            elif row[0] == "Line No":
                header = row
            elif header and len(row) == len(header) and row[2] == "-":  # a line's totals (its SASS rows have addresses)
                entry = lines[(source_file, int(row[0]))]
                entry["src"] = row[1].strip()
                for i, name in enumerate(header):
                    if i < 4 or not row[i] or row[i] == "-":
                        continue
                    if name == "Instructions Executed":
                        entry["instructions"] += float(row[i])
                    elif name == "Warp Stall Sampling (All Samples)":
                        entry["samples"] += float(row[i])
                    elif name.startswith("stall_") and "Not Issued" not in name:
                        entry[name[6:]] += float(row[i])
    if not lines:
        raise SystemExit(f"ncu_lines: no source-line rows in {path} (export with --page source --print-source cuda,sass)")
    return lines


def top_stalls(entry, k=3):
    reasons = [(v, n) for n, v in entry.items() if n not in ("src", "instructions", "samples")]
    total = entry["samples"] or 1.0
    return " ".join(f"{n}={v / total * 100:.0f}%" for v, n in sorted(reasons, reverse=True)[:k] if v)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--per", type=float, default=1.0, help="units of work in A (instructions are divided by it)")
    ap.add_argument("--per-b", type=float, default=1.0, help="units of work in B")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    a = load(args.a)
    total_a = sum(e["instructions"] for e in a.values())
    if not args.b:
        samples = sum(e["samples"] for e in a.values()) or 1.0
        print(f"instructions per unit {total_a / args.per:.0f}")
        for key in sorted(a, key=lambda k: -a[k]["samples"])[: args.top]:
            e = a[key]
            print(f"{e['samples'] / samples * 100:5.1f}% {e['instructions'] / args.per:9.1f}  {key[0]}:{key[1]}  "
                  f"{top_stalls(e)} | {e['src'][:80]}")
        return
    b = load(args.b)
    total_b = sum(e["instructions"] for e in b.values())
    print(f"instructions per unit: A {total_a / args.per:.0f}, B {total_b / args.per_b:.0f}")

    def per(lines, key, units):
        return lines[key]["instructions"] / units if key in lines else 0.0

    keys = set(a) | set(b)
    delta = {k: per(b, k, args.per_b) - per(a, k, args.per) for k in keys}
    print(f"{'A':>8} {'B':>8} {'B - A':>8}")
    for key in sorted(keys, key=lambda k: (-abs(delta[k]), k))[: args.top]:
        src = (b.get(key) or a.get(key))["src"]
        print(f"{per(a, key, args.per):8.1f} {per(b, key, args.per_b):8.1f} {delta[key]:+8.1f}  {key[0]}:{key[1]} | {src[:80]}")


if __name__ == "__main__":
    main()
