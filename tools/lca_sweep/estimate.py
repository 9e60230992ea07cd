"""A rough H100 time for a drawn group, so that a plan can say whether it fits one device call and
run.sh can run the cheap groups first. Areas come from each mask's parameters (document lengths
from the histograms in manifests/data), times from FLOPs at a fixed rate, and the fixed costs
from past runs (docs/results): a process start with the GPU ceilings, a plan, the timed window,
and the reference check's fp32 pass.
Rule: an estimate orders and warns; nothing is skipped because of it."""
import json
import os

from lca_sweep.draw import longest_doc

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# TFLOP/s a kernel holds on a dense mask (H100, bf16; flex_flash and cudnn_sdpa hold 10-20% more
# on full at 16K-128K), and the floor of one call. A backward call is the backward alone.
RATE = {("fwd", 128): 500e12, ("fwd", 64): 400e12, ("bwd", 128): 400e12, ("bwd", 64): 350e12}
CALL_FLOOR_S = 30e-6
CELL_OVERHEAD_S = 0.15       # inputs, plan, output buffers
CUDNN_FWD_PLAN_S = 1.0       # cudnn_sdpa's forward cells take 0.1-3 s more than their calls (its graph)
TORCH_CELL_OVERHEAD_S = 1.5  # the torch peers build a block mask and may recompile
PROCESS_S = 8.0              # lcahost start, GPU ceilings, cuDNN's first plan
TORCH_PROCESS_S = 15.0       # importing torch and the first compile
MAX_REFERENCE_FLOPS = 4e12   # core/check/compare.hpp: kv groups are sampled under it, at least one
# The reference check, fitted (least squares) to the seconds of the checked cells of two H100
# sweeps (seeds 19 and 23: 210 cells, 7296-27229 tokens, every mask and shape) less their plan and
# calls, with the host's conversion and comparison on several threads (core/check/compare.cpp). A
# cell's first kernel computes the reference on the sampled kv groups: seconds a TFLOP of it, and a
# sampled group's rows (its warps walk each query row, whatever the row holds: sparse masks, where
# every group is sampled, pay most). Every kernel then compares its outputs on the sampled heads:
# seconds a million rows and a million elements (seqlen x head dim a sampled query head). Mean error
# a cell 0.04-0.12 s (forward) and 0.10-0.19 s (backward). The fit before, on one thread (seeds 11,
# 13 and 17), had 2-18x these seconds a million rows.
REFERENCE_S_PER_TFLOP = {"fwd": 0.27, "bwd": 0.47}
CHECK_S_PER_MROWS = {("fwd", True): 1.2, ("bwd", True): 2.3, ("fwd", False): 0.09, ("bwd", False): 0.74}
CHECK_S_PER_MELEM = {("fwd", True): 0.014, ("bwd", True): 0.024, ("fwd", False): 0.006, ("bwd", False): 0.011}


def kernel_masks(kernel):
    """The masks a kernel's manifest lists, or None for any (or where the manifest is missing)."""
    path = os.path.join(REPO, "manifests", "plugins", kernel + ".json")
    try:
        with open(path, encoding="utf-8") as f:
            masks = json.load(f).get("masks", "any")
    except (OSError, ValueError):
        return None
    return None if masks == "any" else set(masks)


_doc_moments = {}


def doc_moments(dist, seqlen):
    """E[L] and E[L^2] of a document's length under `dist`, lengths cut at seqlen."""
    key = (dist, seqlen)
    if key in _doc_moments:
        return _doc_moments[key]
    if dist.startswith("uniform:"):
        lo, hi = (int(x) for x in dist.split(":", 1)[1].split("-"))
        bins, weights = [(lo, hi + 1)], [1.0]
    else:
        try:
            with open(os.path.join(REPO, "manifests", "data", f"doclen_{dist}.json"), encoding="utf-8") as f:
                doc = json.load(f)
            bins, weights = doc["bins"], doc["weights"]
        except (OSError, ValueError, KeyError):
            bins, weights = [(1, 8193)], [1.0]
    total = sum(weights) or 1.0
    m1 = m2 = 0.0
    for (lo, hi), w in zip(bins, weights):
        lo, hi = min(max(lo, 1), seqlen), min(max(hi, 2), seqlen + 1)
        mean = (lo + hi - 1) / 2
        m1 += w / total * mean
        m2 += w / total * (mean * mean + (hi - lo) ** 2 / 12)
    _doc_moments[key] = (max(m1, 1.0), max(m2, 1.0))
    return _doc_moments[key]


def density(mask, params, seqlen):
    """The visible share of the S x S square, roughly."""
    s = float(seqlen)
    doc_share = 1.0
    mean_doc = s
    if "dist" in params:
        m1, m2 = doc_moments(params["dist"], seqlen)
        doc_share, mean_doc = min(1.0, m2 / m1 / s), m1
    w = params.get("window", 1024)
    if mask == "full":
        return 1.0
    if mask == "causal":
        return 0.5
    if mask == "full_document":
        return doc_share
    if mask in ("causal_document", "prefix_lm_document"):
        return doc_share / 2
    if mask in ("shared_question", "causal_blockwise"):
        return min(1.0, doc_share / 2 + mean_doc / s)
    if mask == "sliding_window":
        return min(1.0, (2 * w + 1) / s)
    if mask == "sliding_window_causal":
        return min(0.5, (w + 1) / s)
    if mask == "sliding_window_document":
        return min(doc_share, (2 * w + 1) / s)
    if mask == "prefix_lm_causal":
        return 0.5 + 0.5 * (params.get("prefix", seqlen // 2) / s) ** 2
    if mask == "global_sliding":
        g = params.get("global_tokens", -1)
        g = 2 * w if g < 0 else g
        return min(1.0, (2 * w + 1) / s + 2 * g / s)
    if mask == "block_causal_document":
        n = params.get("max_blocks", 8)
        doc = params.get("block", 1024) * (n + 1) / 2
        return min(1.0, 0.75 * doc / s)
    if mask == "block_sparse":
        return params.get("sparsity", 0.5)
    return 1.0


def flops(area, heads_q, head_dim, pass_):
    fwd = 4.0 * area * head_dim * heads_q
    return fwd * (2.5 if pass_ == "bwd" else 1.0)


def cell_seconds(t_call, warmup, warmup_ms, repeats, repeat_ms):
    """The runner's loop: `warmup` calls, then calls until warmup_ms; the same for the timed ones."""
    return max(warmup * t_call, warmup_ms / 1000.0) + max(repeats * t_call, repeat_ms / 1000.0)


def group_seconds(group, kernels, timing, check):
    """Seconds for one lcahost run of `group` with `kernels`; timing holds warmup, warmup_ms,
    repeats and repeat_ms."""
    heads_q, heads_kv = (int(x) for x in group["heads"].split(":"))
    d, s = group["head_dim"], group["seqlen"]
    torch = any(k.startswith("torch_") for k in kernels)
    total = PROCESS_S + (TORCH_PROCESS_S if torch else 0.0)
    supported = {k: kernel_masks(k) for k in kernels}
    for m in group["masks"]:
        area = density(m["mask"], m["params"], s) * s * s
        runs = [k for k in kernels if supported[k] is None or m["mask"] in supported[k]]
        for pass_ in ("fwd", "bwd"):
            t = flops(area, heads_q, d, pass_) / RATE[(pass_, 128 if d >= 128 else 64)] + CALL_FLOOR_S
            for i, k in enumerate(runs):
                total += cell_seconds(t, **timing)
                total += TORCH_CELL_OVERHEAD_S if k.startswith("torch_") else CELL_OVERHEAD_S
                if k == "cudnn_sdpa" and pass_ == "fwd":
                    total += CUDNN_FWD_PLAN_S
                if check:
                    total += check_seconds(area, s, heads_q, heads_kv, d, pass_, first=i == 0)
    return total


def check_seconds(area, seqlen, heads_q, heads_kv, head_dim, pass_, first):
    """The reference check of one cell: the reference itself where `first` (the runner keeps it for
    the problem's later kernels), and the comparison on the sampled heads."""
    group = heads_q // heads_kv
    per_group = 4.0 * area * head_dim * group * (3.5 if pass_ == "bwd" else 1.0)
    sampled = max(1, min(heads_kv, int(MAX_REFERENCE_FLOPS // max(per_group, 1.0))))
    seconds = (CHECK_S_PER_MROWS[(pass_, first)] * sampled * seqlen / 1e6 +
               CHECK_S_PER_MELEM[(pass_, first)] * sampled * group * seqlen * head_dim / 1e6)
    if first:
        seconds += REFERENCE_S_PER_TFLOP[pass_] * sampled * per_group / 1e12
    return seconds
