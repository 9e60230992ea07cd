#!/usr/bin/env python3
"""Checks the SASS of flex_flash's Hopper forward for register hazards around wgmma: (1) seen with
ptxas 13.0, the registers that hold Q (the register A operand of the S = Q K^T HGMMAs) being
overwritten by something else before the tile loop's next iteration reads them; (2) a register A
operand (P in O += P V) written while its HGMMA may still be reading it; (3) in the overlapped
forwards at head dim 128 (and at 64 with fwd_sum's mma_beside), the softmax's exponentials placed
above the wait for the P V of the step before (ptxas 13.0 hoists that wait to the top of its basic
block unless sm90::wait_below ends the block: the softmax then waits for the P V instead of running
beside it).
Usage: check_wgmma_regs.py FILE.sass (cuobjdump -sass of an object). For (1) it runs the code up to
the loop's back edge, then the loop body once more, remembering which instruction last wrote each
register; at every S HGMMA the last writer of its A registers must be an LDSM (the load of Q).
Exit 1 when any check fails."""
import re
import sys

PRED = r"(?:@!?U?P\w+\s+)?"


def parse(body):
    out = []
    for addr, ins in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", body):
        out.append((int(addr, 16), ins.strip()))
    return out


def dests(ins):
    d = re.match(PRED + r"([A-Z][A-Z0-9_.]*)\s+R(\d+)\b", ins)
    if not d or d.group(1).startswith(("ST", "RED", "ATOM", "SYNCS", "WARPGROUP", "BRA", "HGMMA")):
        return None, []
    op, r = d.group(1), int(d.group(2))
    width = 4 if op.startswith("LDSM") else 2 if (".64" in op or "WIDE" in op or op.startswith("CS2R")) else 1
    return op, list(range(r, r + width))


def check_softmax_beside_pv(name, lines):
    # forward_sm90_kernel<T, D, kOverlap, kPingpong, kKeys, ...>: D = 128 and kOverlap. Each wait
    # for the S (gsb0, 0x1; the P V still in flight) must be followed by the softmax's MUFU.EX2s
    # (one a score, 32 or 64 a thread) before the wait for the P V (gsb0, 0x0).
    # Also at head dim 64 where kSum (the last template argument) is 2: fwd_sum's mma_beside.
    m = re.search(r"forward_sm90_kernelI\w+?Li(\d+)ELb(\d)ELb\d", name)
    beside64 = re.search(r"ELi\d+ELi2EEEvN", name) is not None  # ... kConsumers, kSum = 2>
    if not m or m.group(2) != "1" or (m.group(1) != "128" and not beside64):
        return []
    errors, open_at, exps = [], None, 0
    for addr, ins in lines:
        if re.search(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x1\b", ins):
            open_at, exps = addr, 0
        elif open_at is not None and "MUFU.EX2" in ins:
            exps += 1
        elif open_at is not None and re.search(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x0\b", ins):
            if exps < 32:
                errors.append(f"{addr:04x}: the P V's wait comes {exps} exponentials after the S's wait at "
                              f"{open_at:04x}: the softmax does not run beside the P V")
            open_at = None
    return errors


def check(name, lines):
    s_hgmma = {}
    for i, (_, ins) in enumerate(lines):
        h = re.match(PRED + r"HGMMA\.\S+\s+R\d+,\s*R(\d+),\s*gdesc", ins)
        # S = Q K^T: K-major B (no .tnspB), N = 64 or 128 keys; the m64n8 HGMMAs of fwd_sum's row
        # sums read P, as the P V ones do.
        if h and ".tnspB" not in ins and "HGMMA.64x8x" not in ins:
            s_hgmma[i] = list(range(int(h.group(1)), int(h.group(1)) + 4))
    errors = []
    if s_hgmma:
        errors += check_q_reload(lines, s_hgmma, name)
    errors += check_in_flight(lines)
    errors += check_softmax_beside_pv(name, lines)
    return errors


def check_q_reload(lines, s_hgmma, name):
    back = [(i, int(t, 16)) for i, (a, ins) in enumerate(lines)
            for t in re.findall(r"BRA\s+0x([0-9a-f]+)", ins) if int(t, 16) < a]
    loops = [(i, next(j for j, (a, _) in enumerate(lines) if a == t)) for i, t in back]
    loops = [(end, head) for end, head in loops if any(head <= k <= end for k in s_hgmma)]
    if not loops:
        return [f"{name}: no tile loop with HGMMA found"]
    # The tile loop: the back edge to the earliest head (the spin-wait stubs after the epilogue
    # jump back into the loop's middle).
    end, head = min(loops, key=lambda x: (x[1], -x[0]))
    writer, errors = {}, []
    for idx in list(range(0, end + 1)) + list(range(head, end + 1)):
        if idx in s_hgmma:
            for r in s_hgmma[idx]:
                w = writer.get(r, "none")
                if not w.startswith("LDSM"):
                    errors.append(f"{lines[idx][0]:04x}: S HGMMA reads R{r}, last written by {w}")
        op, regs = dests(lines[idx][1])
        for r in regs:
            writer[r] = f"{op} at {lines[idx][0]:04x}"
    return errors


def check_in_flight(lines):
    errors = []
    # Any HGMMA: its register A operand is read until a wait retires its group (the group ends at
    # the HGMMA marked gsb0; WARPGROUP.DEPBAR.LE gsb0, N retires all but the N newest groups);
    # nothing may write those registers before that.
    for i, (addr, ins) in enumerate(lines):
        h = re.match(PRED + r"HGMMA\.\S+\s+R\d+,\s*R(\d+),\s*gdesc", ins)
        if not h:
            continue
        regs = set(range(int(h.group(1)), int(h.group(1)) + 4))
        closed, newer = False, 0
        for addr2, ins2 in lines[i:]:
            if "HGMMA" in ins2 and re.search(r"gsb0\s*$", ins2):
                if closed:
                    newer += 1
                closed = True
                continue
            w = re.match(PRED + r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x([0-9a-f]+)", ins2)
            if w and closed and newer >= int(w.group(1), 16):
                break
            op, written = dests(ins2)
            if regs & set(written):
                errors.append(f"{addr:04x}: HGMMA A operand R{min(regs & set(written))} written by {op} at "
                              f"{addr2:04x} while the HGMMA may still read it")
    return errors


text = open(sys.argv[1]).read()
bad = False
for m in re.finditer(r"Function : (\S*_sm90_kernel\S*)(.*?)(?=Function : |\Z)", text, re.S):
    errs = check(m.group(1), parse(m.group(2)))
    print(f"{m.group(1)[:100]}: {'ok' if not errs else 'HAZARD'}")
    for e in sorted(set(errs))[:6]:
        print("   ", e)
    bad |= bool(errs)
sys.exit(1 if bad else 0)
