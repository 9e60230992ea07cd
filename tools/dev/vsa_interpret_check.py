#!/usr/bin/env python3
"""vsa_triton's Python side (plugins/kernels/vsa/lca_vsa.py) without a GPU: its forward and
backward wiring (lca's THD buffers as [1, H, S, D] views, LSE from VSA's log2 statistic and back,
the backward's dense copies, the tile lists repeated per head, the K->Q lists) run VSA's own
Triton kernels in Triton's interpreter (TRITON_INTERPRET=1) on the CPU, against attention written
here in fp64 with autograd.

Four changes that only the interpreter needs, made to a copy: the interpreter does not compute
in bf16, so VSA's kernels run with their bf16 casts made fp32 on fp32 inputs (this checks the
wiring and the index lists, not VSA's bf16 rounding: tests/gpu/vsa does that on a GPU); its
autotuner times configs on a GPU, so the forward runs its first config; invert_indices's refusal
of CPU tensors is dropped; and a loop counter, a Python int there, is not cast with .to().

Needs torch and triton importable (PYTHONPATH), numpy < 2.3 (newer numpy refuses the interpreter's
scalar loads), and VSA's source (tools/setup.sh). Usage: tools/dev/vsa_interpret_check.py
Exit status 0 when every case is within tolerance."""
import math
import os
import pathlib
import sys
import tempfile
import types

os.environ["TRITON_INTERPRET"] = "1"
root = pathlib.Path(__file__).resolve().parents[2]
src = root / ".deps/fastvideo_kernel/python/fastvideo_kernel/triton_kernels"
if not (src / "block_sparse_attn_triton.py").exists():
    sys.exit(f"VSA's source is not in {src}: run tools/setup.sh")

import torch  # noqa: E402

# The package lca_vsa imports, as CMake lays it out beside the plugin; the kernels' bf16 made fp32.
pkg_dir = pathlib.Path(tempfile.mkdtemp(prefix="vsa_interpret_"))
pkg = pkg_dir / "fastvideo_kernel_vsa"
pkg.mkdir()
(pkg / "__init__.py").write_text('__version__ = "interpreted"\n')
(pkg / "index.py").write_text((src / "index.py").read_text().replace(
    "if not q2k_idx.is_cuda or not q2k_num.is_cuda:", "if False:"))
(pkg / "block_sparse_attn_triton.py").write_text(
    (src / "block_sparse_attn_triton.py").read_text().replace("tl.bfloat16", "tl.float32")
    .replace("half = (blk_idx % 2).to(tl.int32)", "half = blk_idx % 2"))
sys.path[:0] = [str(pkg_dir), str(root / "plugins/kernels/vsa")]
import lca_vsa  # noqa: E402


class _FirstConfig:
    """The forward's autotuner without timing: its first config's BLOCK_M and BLOCK_N."""

    def __init__(self, tuner):
        self.fn, self.kwargs = tuner.fn, dict(tuner.configs[0].kwargs)

    def __getitem__(self, grid):
        return lambda *args, **kw: self.fn[grid](*args, **self.kwargs, **kw)


lca_vsa.vsa_kernels._attn_fwd_sparse = _FirstConfig(lca_vsa.vsa_kernels._attn_fwd_sparse)


def tile_lists(rows, q_tiles, kv_tiles, heads):
    """rows[t]: the key tiles query tile t sees, as the host's int32 arrays become TileLists."""
    max_kv = max(1, max(len(r) for r in rows))
    idx = torch.full((q_tiles, max_kv), -1, dtype=torch.int32)
    for t, r in enumerate(rows):
        idx[t, :len(r)] = torch.tensor(sorted(r), dtype=torch.int32)
    num = torch.tensor([len(r) for r in rows], dtype=torch.int32)
    sizes = torch.full((kv_tiles,), 64, dtype=torch.int32)
    return lca_vsa.TileLists(heads=heads, q_tiles=q_tiles, kv_tiles=kv_tiles, max_kv=max_kv,
                             q2k_idx=idx.numpy().tobytes(), q2k_num=num.numpy().tobytes(),
                             kv_sizes=sizes.numpy().tobytes(), device="cpu")


def reference(q, k, v, d_o, visible, scale):
    """fp64 attention on [S, H, D] tensors with a [Sq, Sk] bool mask: O, LSE [H, Sq], dQ, dK, dV."""
    q, k, v = (t.double().requires_grad_(True) for t in (q, k, v))
    s = torch.einsum("qhd,khd->hqk", q, k) * scale
    s = s.masked_fill(~visible, -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    o = torch.einsum("hqk,khd->qhd", p, v)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), d_o.double())
    return o.detach(), lse.detach(), dq, dk, dv


def rel(a, b):
    return ((a.double() - b).norm() / b.norm().clamp_min(1e-30)).item()


def run_case(name, sq, sk, heads, dim, rows, seed):
    torch.manual_seed(seed)
    q_tiles, kv_tiles = sq // 64, sk // 64
    visible = torch.zeros(sq, sk, dtype=torch.bool)
    for t, r in enumerate(rows):
        for u in r:
            visible[t * 64:(t + 1) * 64, u * 64:(u + 1) * 64] = True
    q, d_o = torch.randn(sq, heads, dim), torch.randn(sq, heads, dim)
    k, v = torch.randn(sk, heads, dim), torch.randn(sk, heads, dim)
    ref_o, ref_lse, ref_dq, ref_dk, ref_dv = reference(q, k, v, d_o, visible, 1 / math.sqrt(dim))

    # lca's buffers: THD, LSE {H, S}; the plugin hands them over as these views.
    view = lambda t: t.unsqueeze(0).permute(0, 2, 1, 3)
    o, dq, dk, dv = torch.full_like(q, math.nan), torch.full_like(q, math.nan), torch.full_like(k, math.nan), torch.full_like(v, math.nan)
    lse = torch.full((heads, sq), math.nan)
    lists = tile_lists(rows, q_tiles, kv_tiles, heads)
    lca_vsa.vsa_forward(view(q), view(k), view(v), view(o), lse.unsqueeze(0), lists)
    lca_vsa.vsa_backward(view(q), view(k), view(v), view(o), view(d_o), lse.unsqueeze(0),
                         view(dq), view(dk), view(dv), lists)

    empty = ~visible.any(1)
    lse_ok = bool(torch.isneginf(lse[:, empty]).all()) and not bool(torch.isneginf(lse[:, ~empty]).any())
    lse_err = (lse[:, ~empty].double() - ref_lse[:, ~empty]).abs().max().item()
    errs = dict(o=rel(o, ref_o), dq=rel(dq, ref_dq), dk=rel(dk, ref_dk), dv=rel(dv, ref_dv), lse=lse_err)
    ok = lse_ok and all(e < 1e-4 for e in errs.values())
    print(f"{'ok  ' if ok else 'FAIL'} {name}: " + " ".join(f"{k} {e:.1e}" for k, e in errs.items()) +
          ("" if lse_ok else " (LSE -inf rows differ)"))
    return ok


def main():
    cases = [
        # 4 x 4 tiles, 2 heads, d64: a scattered mask.
        ("mha_256_h2_d64", 256, 256, 2, 64, [[0, 2], [1], [0, 1, 3], [3]], 1),
        # query tile 1 sees nothing (O 0, LSE -inf), keys longer than queries, d128.
        ("cross_192x448_h2_d128", 192, 448, 2, 128, [[0, 6], [], [1, 2, 3, 4, 5]], 2),
        # a block of 128 as VSA's 2x2 tiles: query tiles 0-1 see key tiles 2-3, tiles 2-3 see 0-3.
        ("block128_256_h3_d64", 256, 256, 3, 64, [[2, 3], [2, 3], [0, 1, 2, 3], [0, 1, 2, 3]], 3),
    ]
    ok = all([run_case(*c) for c in cases])
    print("all within tolerance" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
