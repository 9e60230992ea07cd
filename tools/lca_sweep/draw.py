"""What a sweep measures, drawn from a seed: groups of (length, heads, head dim), each with one
parameter set for every builtin mask, inside each parameter's valid range (docs/masks.md) and
sized to the group's length.
Rule: only Draw's methods touch the generator, in a fixed order, so one seed gives one sweep."""
import math
import random

# The builtin provider's 14 patterns, `full` first: it is the reference of every other mask's
# "share of own full", and lcahost runs a spec's masks in the order given.
MASKS = ("full", "causal", "full_document", "causal_document", "sliding_window",
         "sliding_window_causal", "sliding_window_document", "shared_question", "causal_blockwise",
         "prefix_lm_causal", "prefix_lm_document", "global_sliding", "block_causal_document",
         "block_sparse")
WINDOW_MASKS = ("sliding_window", "sliding_window_causal", "sliding_window_document")
HEADS = ("64:8", "32:32", "8:1")
HEAD_DIMS = (64, 128)
NAMED_DISTS = ("pile", "prolong64k", "prolong512k", "chatqa")

# A window narrower than one 128-token tile leaves most of every tile masked in any tiled kernel;
# the sweep looks for schedule cliffs, not for that floor.
MIN_WINDOW = 256


class Draw:
    """Integers and choices from random.random() alone, whose sequence for an integer seed is the
    same on every Python 3 (randint's mapping is not promised to be)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def unit(self):
        return self.rng.random()

    def between(self, lo, hi):
        """An integer in [lo, hi], uniform."""
        lo, hi = int(lo), int(hi)
        if hi <= lo:
            return lo
        return min(hi, lo + int(self.unit() * (hi - lo + 1)))

    def log_between(self, lo, hi):
        """An integer in [lo, hi], uniform in log space: as many draws in 4K-8K as in 64K-128K."""
        lo, hi = max(1, int(lo)), int(hi)
        if hi <= lo:
            return lo
        x = math.exp(math.log(lo) + self.unit() * (math.log(hi) - math.log(lo)))
        return max(lo, min(hi, int(round(x))))

    def choice(self, items):
        return items[self.between(0, len(items) - 1)]

    def coin(self, p=0.5):
        return self.unit() < p

    def permutation(self, items):
        items = list(items)
        for i in range(len(items) - 1, 0, -1):
            j = self.between(0, i)
            items[i], items[j] = items[j], items[i]
        return items


def draw_seqlen(d, lo, hi, odd):
    """A length in [lo, hi]: a multiple of 128 drawn in log space, then, when `odd`, moved by an
    odd number of tokens below 128 so that it is a multiple of neither 64 nor 128."""
    n = d.log_between(lo, hi)
    base = max(lo, min(hi, 128 * round(n / 128)))
    if not odd:
        return base
    offset = 2 * d.between(0, 63) + 1
    return base + offset if base + offset <= hi else base - offset


def draw_dist(d, seqlen):
    """A document-length distribution: a uniform LO-HI range (most of the time, since presets
    never use one) or one of the named histograms."""
    if d.coin(0.6):
        lo = d.log_between(256, max(256, seqlen // 8))
        hi = d.log_between(lo, max(lo, min(seqlen, 16 * lo)))
        return f"uniform:{lo}-{hi}"
    return d.choice(NAMED_DISTS)


def longest_doc(dist, seqlen):
    """A bound on a document's length under `dist`, for parameters measured inside documents."""
    if dist.startswith("uniform:"):
        return min(seqlen, int(dist.split(":", 1)[1].split("-")[1]))
    return min(seqlen, 16384)


def draw_window(d, seqlen):
    return d.log_between(min(MIN_WINDOW, seqlen), max(MIN_WINDOW, seqlen // 4))


def draw_params(d, mask, seqlen):
    """One parameter set for `mask` at `seqlen`, as the builtin provider names them."""
    p = {}
    if mask in ("full_document", "causal_document", "shared_question", "causal_blockwise"):
        p["dist"] = draw_dist(d, seqlen)
    elif mask in ("sliding_window", "sliding_window_causal"):
        p["window"] = draw_window(d, seqlen)
    elif mask == "sliding_window_document":
        p["dist"] = draw_dist(d, seqlen)
        # A window wider than the documents is full_document again.
        p["window"] = draw_window(d, max(MIN_WINDOW, longest_doc(p["dist"], seqlen)))
    elif mask == "prefix_lm_causal":
        p["prefix"] = d.between(max(1, seqlen // 32), seqlen)
    elif mask == "prefix_lm_document":
        p["dist"] = draw_dist(d, seqlen)
        p["prefix"] = d.log_between(16, max(16, longest_doc(p["dist"], seqlen)))
    elif mask == "global_sliding":
        p["window"] = draw_window(d, seqlen)
        # -1 is the provider's default (2 x window); otherwise a count of its own.
        p["global_tokens"] = -1 if d.coin(0.25) else d.log_between(16, max(16, seqlen // 8))
    elif mask == "block_causal_document":
        # Any block size: a video frame is as many tokens as its patches, rarely a power of two.
        p["block"] = d.log_between(128, max(128, min(8192, seqlen // 4)))
        p["max_blocks"] = d.between(1, max(1, min(32, seqlen // p["block"])))
    elif mask == "block_sparse":
        p["block"] = d.choice((64, 128))
        p["sparsity"] = round(0.05 + 0.90 * d.unit(), 2)
    return p


def mask_spec(mask, params):
    """`pattern:key=value,...` with keys sorted, as lcahost labels the mask (MaskSpec::label)."""
    if not params:
        return mask
    return mask + ":" + ",".join(f"{k}={params[k]}" for k in sorted(params))


def draw_groups(seed, groups, min_len, max_len):
    """`groups` groups. The six (heads, head dim) shapes go round in a seeded order, so six groups
    hold each once; every other group's length is a multiple of neither 64 nor 128."""
    d = Draw(seed)
    shapes = d.permutation([(h, hd) for h in HEADS for hd in HEAD_DIMS])
    out = []
    for i in range(groups):
        heads, head_dim = shapes[i % len(shapes)]
        seqlen = draw_seqlen(d, min_len, max_len, odd=(i % 2 == 1))
        masks = [{"mask": m, "params": draw_params(d, m, seqlen)} for m in MASKS]
        for m in masks:
            m["spec"] = mask_spec(m["mask"], m["params"])
        out.append({"index": i, "seqlen": seqlen, "heads": heads, "head_dim": head_dim, "masks": masks})
    return out
