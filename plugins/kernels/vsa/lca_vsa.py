"""vsa_triton's Python side: Video Sparse Attention's Triton kernels (fastvideo-kernel's
triton_kernels/block_sparse_attn_triton.py, copied unchanged beside this file as the package
fastvideo_kernel_vsa) on lca's device buffers and lca's CUDA stream.

Loaded by the vsa_triton plugin into its embedded interpreter; the plugin makes one Plan per lca
plan and hands tensors over as DLPack capsules (no copies). The mask arrives digested on the host
(plugins/kernels/vsa/vsa_blocks.cpp): VSA's q2k lists over 64-token tiles, one for all heads.

What is timed, and why:
- forward: VSA's own forward wrapper (triton_block_sparse_attn_forward), which takes any strides
  for Q, K and V, on lca's THD buffers seen as [1, H, S, D]; its O (allocated by VSA) is copied
  into lca's buffer and its log2-based row statistic M turned into lca's natural-log LSE.
- backward: VSA's backward wrapper (triton_block_sparse_attn_backward), which needs Q, K, V, O
  and dO dense in [B, H, S, D] (one token stride for all, O and dO read as dense rows): they are
  made contiguous inside the call, as VSA's own custom op does with Q, K, V, and its dQ, dK, dV
  copied back into lca's THD buffers. The time of those layout copies alone is measured in the
  warm-up and reported in plan_info (layout_copy_ms_fwd / _bwd), so it can be taken out.
- the K->Q lists of the backward (VSA's invert_indices, which its custom op runs on every
  backward call) are made once in plan(), with the other mask preprocessing.

Rule: nothing here writes to stdout (with --isolate the host reads cell results there), and every
error is an exception with a one-line message; Unsupported means "outside this kernel's reach".
"""

import json
import math
import time

import torch

import fastvideo_kernel_vsa
from fastvideo_kernel_vsa import block_sparse_attn_triton as vsa_kernels
from fastvideo_kernel_vsa import index as vsa_index


class Unsupported(Exception):
    """A cell outside what VSA's Triton kernels can run (the host records it as X)."""


_LN2 = math.log(2.0)
_LOG2E = 1.0 / _LN2


def _int32(data, shape, device):
    return torch.frombuffer(bytearray(data), dtype=torch.int32).view(*shape).to(device)


class TileLists:
    """VSA's block structure for every head: q2k_idx [1, H, q_tiles, max_kv], q2k_num
    [1, H, q_tiles], kv_sizes [kv_tiles] from the host's arrays (int32 bytes, one head), and the
    backward's k2q lists from VSA's invert_indices (made once, here, not in every backward)."""

    def __init__(self, *, heads, q_tiles, kv_tiles, max_kv, q2k_idx, q2k_num, kv_sizes, device,
                 backward=True):
        # VSA addresses its lists per (batch, head): the one mask is repeated for each head.
        idx = _int32(q2k_idx, (1, 1, q_tiles, max_kv), device)
        num = _int32(q2k_num, (1, 1, q_tiles), device)
        self.q2k_idx = idx.expand(1, heads, q_tiles, max_kv).contiguous()
        self.q2k_num = num.expand(1, heads, q_tiles).contiguous()
        self.kv_sizes = _int32(kv_sizes, (kv_tiles,), device)
        self.k2q_idx = self.k2q_num = None
        if backward:
            self.make_k2q()

    def make_k2q(self):
        self.k2q_idx, self.k2q_num = vsa_index.invert_indices(self.q2k_idx, self.q2k_num,
                                                              self.kv_sizes.numel())


def vsa_forward(q, k, v, o, lse, lists):
    """VSA's forward on q, k, v [1, H, S, D] of any strides; its O copied into o, lse = M ln 2."""
    out, m = vsa_kernels.triton_block_sparse_attn_forward(q, k, v, lists.q2k_idx, lists.q2k_num,
                                                          lists.kv_sizes)
    o.copy_(out)
    torch.mul(m, _LN2, out=lse)


def vsa_backward(q, k, v, o, d_o, lse, dq, dk, dv, lists):
    """VSA's backward from o and lse (M = lse / ln 2), its inputs made dense [1, H, S, D] as it
    needs, its gradients copied into dq, dk, dv."""
    if lists.k2q_idx is None:
        lists.make_k2q()
    m = lse * _LOG2E
    gq, gk, gv = vsa_kernels.triton_block_sparse_attn_backward(
        d_o.contiguous(), q.contiguous(), k.contiguous(), v.contiguous(), o.contiguous(), m,
        lists.q2k_idx, lists.q2k_num, lists.k2q_idx, lists.k2q_num, lists.kv_sizes)
    dq.copy_(gq)
    dk.copy_(gk)
    dv.copy_(gv)


class Plan:
    """One lca plan: VSA's tile lists for every head, the kernels compiled and autotuned for this
    length and head_dim, and the tensors wrapped from the host's buffers."""

    def __init__(self, *, device, stream, seqlen_q, seqlen_k, heads, head_dim, dtype, scale,
                 q_tiles, kv_tiles, max_kv, q2k_idx, q2k_num, kv_sizes, warm_backward):
        if dtype != "bf16":
            raise Unsupported(f"dtype {dtype}: VSA's Triton kernels compute P and dS in bf16")
        if abs(scale * math.sqrt(head_dim) - 1.0) > 1e-6:
            raise Unsupported(f"softmax scale {scale}: VSA fixes it at 1/sqrt(head_dim)")
        self.device = torch.device("cuda", device)
        torch.cuda.set_device(self.device)
        self.stream = (torch.cuda.ExternalStream(stream, device=self.device) if stream
                       else torch.cuda.default_stream(self.device))
        self.shape = dict(seqlen_q=seqlen_q, seqlen_k=seqlen_k, heads=heads, head_dim=head_dim)
        self.info = {"library": f"fastvideo-kernel {fastvideo_kernel_vsa.__version__} "
                                f"(Triton path), torch {torch.__version__}, triton "
                                f"{getattr(__import__('triton'), '__version__', '?')}"}
        self.tensors = {}  # role -> tensor over the host's buffer

        with torch.cuda.stream(self.stream):
            t0 = time.perf_counter()
            self.lists = TileLists(heads=heads, q_tiles=q_tiles, kv_tiles=kv_tiles, max_kv=max_kv,
                                   q2k_idx=q2k_idx, q2k_num=q2k_num, kv_sizes=kv_sizes,
                                   device=self.device, backward=warm_backward)
            self.stream.synchronize()
            self.info["index_ms"] = (time.perf_counter() - t0) * 1e3
            self._warm_up(warm_backward)
        torch.cuda.reset_peak_memory_stats(self.device)

    # ---- the calls ---------------------------------------------------------------------------
    def _forward(self, q, k, v, o, lse):
        vsa_forward(q, k, v, o, lse, self.lists)

    def _backward(self, q, k, v, o, d_o, lse, dq, dk, dv):
        vsa_backward(q, k, v, o, d_o, lse, dq, dk, dv, self.lists)

    def _warm_up(self, backward):
        """Compiles and autotunes (VSA's forward is autotuned per length and head_dim) and runs
        once forward and, if asked, backward on scratch tensors laid out like lca's; then times
        the layout copies alone on them. None of it is timed by the host."""
        s = self.shape
        h, d = s["heads"], s["head_dim"]
        make = lambda n: torch.randn(1, n, h, d, device=self.device, dtype=torch.bfloat16).transpose(1, 2)
        q, k, v = make(s["seqlen_q"]), make(s["seqlen_k"]), make(s["seqlen_k"])
        o = torch.empty_like(q)
        lse = torch.empty(1, h, s["seqlen_q"], device=self.device, dtype=torch.float32)
        t0 = time.perf_counter()
        self._forward(q, k, v, o, lse)
        self.stream.synchronize()
        self.info["compile_fwd_ms"] = (time.perf_counter() - t0) * 1e3
        best = getattr(vsa_kernels._attn_fwd_sparse, "best_config", None)
        if best is not None:
            self.info["forward_config"] = str(best)
        out, lse_out = torch.empty_like(q), torch.empty_like(lse)  # VSA's O has Q's strides, as lca's O
        self.info["layout_copy_ms_fwd"] = self._time(lambda: (o.copy_(out), torch.mul(lse, _LN2, out=lse_out)))
        if backward:
            d_o, dq, dk, dv = make(s["seqlen_q"]), torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            t0 = time.perf_counter()
            self._backward(q, k, v, o, d_o, lse, dq, dk, dv)
            self.stream.synchronize()
            self.info["compile_bwd_ms"] = (time.perf_counter() - t0) * 1e3

            def copies():
                dense = [t.contiguous() for t in (d_o, q, k, v, o)]
                for dst, src in ((dq, dense[1]), (dk, dense[2]), (dv, dense[3])):
                    dst.copy_(src)
            self.info["layout_copy_ms_bwd"] = self._time(copies)
        self.info["compile_ms"] = self.info["compile_fwd_ms"] + self.info.get("compile_bwd_ms", 0.0)

    def _time(self, fn, repeats=3):
        """Median device time of fn on this plan's stream, in ms."""
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(self.stream)
            fn()
            end.record(self.stream)
            end.synchronize()
            times.append(start.elapsed_time(end))
        return sorted(times)[len(times) // 2]

    def _bind(self, role, capsule):
        if capsule is not None:
            self.tensors[role] = torch.from_dlpack(capsule)
        return self.tensors[role]

    def forward(self, q, k, v, o, lse):
        """Tensors as DLPack capsules, or None for the one this role had on the last call:
        q, k, v, o [1, H, S, D] over THD buffers, lse [1, H, S] fp32."""
        q, k, v = self._bind("q", q), self._bind("k", k), self._bind("v", v)
        o, lse = self._bind("o", o), self._bind("lse", lse)
        with torch.cuda.stream(self.stream):
            self._forward(q, k, v, o, lse)

    def backward(self, q, k, v, o, d_o, lse, dq, dk, dv):
        """VSA's backward from lca's O and LSE (those of VSA's own forward, as lcahost runs it)."""
        q, k, v = self._bind("q", q), self._bind("k", k), self._bind("v", v)
        o, lse, d_o = self._bind("o", o), self._bind("lse", lse), self._bind("d_o", d_o)
        dq, dk, dv = self._bind("dq", dq), self._bind("dk", dk), self._bind("dv", dv)
        with torch.cuda.stream(self.stream):
            self._backward(q, k, v, o, d_o, lse, dq, dk, dv)

    def info_json(self):
        info = dict(self.info)
        info["torch_peak_bytes"] = torch.cuda.max_memory_allocated(self.device)
        info["outputs"] = ("O, M and dQ/dK/dV allocated by VSA, copied into lca's buffers inside the "
                           "timed call; the backward's inputs made dense [B, H, S, D] there too")
        return json.dumps(info)

    def close(self):
        self.tensors.clear()
        self.lists = None
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()
