#!/usr/bin/env python3
"""Per-step phases of the persistent Hopper forward, from a probe build.

The probe (forward_trace.patch, never committed into the kernel): consumer 0's first thread of every
block stamps clock64() at each phase of each step into a device buffer, which the launcher writes to
the file named by LCA_X_TRACE (the last forward call's; 8192 stamps a block, 8 bytes each: the
clock << 8 | the phase). Usage on a device:
  git apply tools/dev/probe/forward_trace.patch && cmake --build build-gpu --target lca_flex_flash
  LCA_X_TRACE=swc.bin build-gpu/bin/lcahost ... --kernel-options 'flex_flash={"forward": "sm90_persistent"}' --no-check
  git apply -R tools/dev/probe/forward_trace.patch
then here: tools/dev/probe/forward_trace.py swc.bin [more.bin ...]
Prints, for each kind of step, the median cycles of each phase. Kinds: B = a row tile's first step
(its S beside the last P V of the tile before), N = the others; p = a partial step (bitmask masking),
f = fully visible; F = the step that finishes a tile's O. A tile's last step also holds take_tile
(end->ttk0->ttk1). The stamps cost registers: check the probe build's stack (cuobjdump) before
reading absolute times; the differences between kinds are what it is for."""
import collections
import sys

import numpy as np

NAMES = {7: "finish", 1: "start", 2: "Bstart", 10: "Kwait", 3: "issued", 0x13: "issued", 4: "Sdone", 5: "softmax",
         6: "PVdone", 8: "end", 11: "ttk0", 12: "ttk1"}

for name in sys.argv[1:]:
    a = np.fromfile(name, dtype=np.uint64).reshape(-1, 8192)
    per = collections.defaultdict(lambda: collections.defaultdict(list))
    total = collections.defaultdict(list)
    for block in a:
        ev = block[block != 0]
        t = (ev >> 8).astype(np.int64)
        ty = (ev & 0xFF).astype(np.int64)
        starts = [i for i in range(len(ty)) if ty[i] in (1, 2)]
        for i, k in zip(starts, starts[1:]):
            kind = ("B" if ty[i] == 2 else "N") + ("p" if 0x13 in ty[i:k] else "f") + ("F" if 7 in ty[i:k] else "")
            total[kind].append(t[k] - t[i])
            for x in range(i, k):
                per[kind][NAMES[ty[x]] + "->" + NAMES[ty[x + 1]]].append(t[x + 1] - t[x])
    print(name)
    for kind in sorted(per):
        n = len(total[kind])
        phases = "  ".join(f"{s}:{int(np.median(v))}" for s, v in per[kind].items() if len(v) > n // 4)
        print(f"  {kind:4} n={n:6d} step median {int(np.median(total[kind]))}  {phases}")
