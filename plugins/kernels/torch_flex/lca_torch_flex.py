"""torch_flex's Python side: FlexAttention (torch.nn.attention.flex_attention under torch.compile)
on lca's device buffers and lca's CUDA stream.

Loaded by the torch_flex plugin into its embedded interpreter; the plugin makes one Plan per lca
plan and hands tensors over as DLPack capsules (no copies). The mask arrives already digested on
the host (plugins/kernels/torch_flex/flex_mask.cpp): the mask_mod's data (each row's key
intervals, or a dynamic mask's block table) and the BlockMask's block lists.

Rule: nothing here writes to stdout (with --isolate the host reads cell results there), and every
error is an exception with a one-line message; Unsupported means "outside this kernel's reach".
"""

import json
import time

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

try:  # torch >= 2.9: return_aux; return_lse before that
    from torch.nn.attention.flex_attention import AuxRequest
except ImportError:  # pragma: no cover - older torch
    AuxRequest = None


class Unsupported(Exception):
    """A cell outside what FlexAttention can run here (the host records it as X)."""


_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
_compiled = None


def _compiled_flex():
    """flex_attention compiled once per process, specialised per shape (dynamic=False), with
    room for one compiled graph per shape and mask form of a whole matrix."""
    global _compiled
    if _compiled is None:
        config = torch._dynamo.config
        for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                     "accumulated_cache_size_limit"):
            if hasattr(config, name):
                setattr(config, name, max(getattr(config, name), 4096))
        # In-process compilation: no worker pool forked or spawned from the benchmark host.
        torch._inductor.config.compile_threads = 1
        _compiled = torch.compile(flex_attention, dynamic=False)
    return _compiled


def _interval_mask_mod(lo, hi, width):
    def mask_mod(b, h, q, kv):
        seen = (lo[q, 0] <= kv) & (kv < hi[q, 0])
        for i in range(1, width):
            seen = seen | ((lo[q, i] <= kv) & (kv < hi[q, i]))
        return seen
    return mask_mod


def _table_mask_mod(table, block_q, block_k, seqlen_q, seqlen_k):
    def mask_mod(b, h, q, kv):
        return table[q // block_q, kv // block_k] & (q < seqlen_q) & (kv < seqlen_k)
    return mask_mod


def _int32(data, shape, device):
    return torch.frombuffer(bytearray(data), dtype=torch.int32).view(*shape).to(device)


def build_block_mask(device, *, seqlen_q, seqlen_k, block, q_blocks, kv_blocks, kind, width, lo,
                     hi, table, table_block_q, table_block_k, table_rows, table_cols, kv_num,
                     kv_idx, full_num, full_idx):
    """The BlockMask from the host's arrays (flex_mask.hpp): partial and full block lists, and
    a mask_mod over each row's key intervals or over the block table (arrays as bytes)."""
    if kind == "table":
        table_t = torch.frombuffer(bytearray(table), dtype=torch.uint8)
        table_t = table_t.view(table_rows, table_cols).to(device).bool()
        mask_mod = _table_mask_mod(table_t, table_block_q, table_block_k, seqlen_q, seqlen_k)
    else:
        rows = q_blocks * block
        mask_mod = _interval_mask_mod(_int32(lo, (rows, width), device),
                                      _int32(hi, (rows, width), device), width)
    return BlockMask.from_kv_blocks(
        _int32(kv_num, (1, 1, q_blocks), device),
        _int32(kv_idx, (1, 1, q_blocks, kv_blocks), device),
        _int32(full_num, (1, 1, q_blocks), device),
        _int32(full_idx, (1, 1, q_blocks, kv_blocks), device),
        BLOCK_SIZE=block, mask_mod=mask_mod, seq_lengths=(seqlen_q, seqlen_k))


class Plan:
    """One lca plan: the BlockMask, the compiled kernels warmed up for its shape, and the
    tensors wrapped from the host's buffers (reused while the host passes the same ones)."""

    def __init__(self, *, device, stream, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim,
                 dtype, scale, block, q_blocks, kv_blocks, kind, width, lo, hi, table,
                 table_block_q, table_block_k, table_rows, table_cols, kv_num, kv_idx,
                 full_num, full_idx, warm_backward):
        if dtype not in _DTYPES:
            raise Unsupported(f"dtype {dtype} (bf16, f16)")
        self.device = torch.device("cuda", device)
        torch.cuda.set_device(self.device)
        self.stream = (torch.cuda.ExternalStream(stream, device=self.device) if stream
                       else torch.cuda.default_stream(self.device))
        self.shape = dict(seqlen_q=seqlen_q, seqlen_k=seqlen_k, heads_q=heads_q,
                          heads_kv=heads_kv, head_dim=head_dim, dtype=dtype)
        self.scale = scale
        self.gqa = heads_q != heads_kv
        self.flex = _compiled_flex()
        self.info = {"library": f"torch {torch.__version__}, triton "
                                f"{getattr(__import__('triton'), '__version__', '?')}",
                     "mask_form": kind}
        self.tensors = {}          # role -> tensor over the host's buffer
        self.graph = None          # (key, q, k, v, out) of the retained autograd graph
        self.forwards = 0          # forward() calls so far: a graph older than the last one is dropped
        self.recomputed_forwards = 0

        with torch.cuda.stream(self.stream):
            t0 = time.perf_counter()
            self.block_mask = build_block_mask(
                self.device, seqlen_q=seqlen_q, seqlen_k=seqlen_k, block=block, q_blocks=q_blocks,
                kv_blocks=kv_blocks, kind=kind, width=width, lo=lo, hi=hi, table=table,
                table_block_q=table_block_q, table_block_k=table_block_k, table_rows=table_rows,
                table_cols=table_cols, kv_num=kv_num, kv_idx=kv_idx, full_num=full_num,
                full_idx=full_idx)
            self.stream.synchronize()
            self.info["block_mask_ms"] = (time.perf_counter() - t0) * 1e3
            self._warm_up(warm_backward)
        torch.cuda.reset_peak_memory_stats(self.device)

    # ---- the calls ---------------------------------------------------------------------------
    def _call(self, q, k, v):
        if AuxRequest is not None:
            out, aux = self.flex(q, k, v, block_mask=self.block_mask, scale=self.scale,
                                 enable_gqa=self.gqa, return_aux=AuxRequest(lse=True))
            return out, aux.lse
        return self.flex(q, k, v, block_mask=self.block_mask, scale=self.scale,
                         enable_gqa=self.gqa, return_lse=True)

    def _grad_graph(self, q, k, v):
        qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
        with torch.enable_grad():
            out = self.flex(qg, kg, vg, block_mask=self.block_mask, scale=self.scale,
                            enable_gqa=self.gqa)
        return qg, kg, vg, out

    def _warm_up(self, backward):
        """Compiles (or finds in the cache) and runs once forward and, if asked, backward for
        this shape and mask form, on scratch tensors: none of it is timed by the host."""
        s = self.shape
        dtype = _DTYPES[s["dtype"]]
        make = lambda h, n: torch.randn(1, n, h, s["head_dim"], device=self.device, dtype=dtype).transpose(1, 2)
        q, k, v = make(s["heads_q"], s["seqlen_q"]), make(s["heads_kv"], s["seqlen_k"]), make(s["heads_kv"], s["seqlen_k"])
        t0 = time.perf_counter()
        with torch.no_grad():
            self._call(q, k, v)
        self.stream.synchronize()
        self.info["compile_fwd_ms"] = (time.perf_counter() - t0) * 1e3
        if backward:
            t0 = time.perf_counter()
            d_o = make(s["heads_q"], s["seqlen_q"])  # laid out like lca's dO
            qg, kg, vg, out = self._grad_graph(q, k, v)
            torch.autograd.grad(out, (qg, kg, vg), d_o, retain_graph=True)
            torch.autograd.grad(out, (qg, kg, vg), d_o)  # a retained graph runs twice
            self.stream.synchronize()
            self.info["compile_bwd_ms"] = (time.perf_counter() - t0) * 1e3
        self.info["compile_ms"] = self.info["compile_fwd_ms"] + self.info.get("compile_bwd_ms", 0.0)

    def _bind(self, role, capsule):
        if capsule is not None:
            self.tensors[role] = torch.from_dlpack(capsule)
        return self.tensors[role]

    def forward(self, q, k, v, o, lse):
        """Tensors as DLPack capsules, or None for the one this role had on the last call:
        q [1, Hq, S, D], k and v [1, Hkv, S, D], o like q, lse [1, Hq, S] fp32."""
        q, k, v = self._bind("q", q), self._bind("k", k), self._bind("v", v)
        o, lse = self._bind("o", o), self._bind("lse", lse)
        with torch.cuda.stream(self.stream), torch.no_grad():
            out, l = self._call(q, k, v)
            o.copy_(out)
            lse.copy_(l)
        self.forwards += 1

    def backward(self, q, k, v, o, d_o, lse, dq, dk, dv):
        """flex's backward kernels through an autograd graph retained from a forward on these
        very Q/K/V: made on the first backward call after a forward() (or when Q/K/V move) and
        reused by the backward calls after it, so that those time flex's backward alone. O and
        LSE in that graph are the ones flex saved, equal to what its forward wrote for lca; the
        caller must not change Q/K/V in place between backward calls without a forward()."""
        q, k, v = self._bind("q", q), self._bind("k", k), self._bind("v", v)
        self._bind("o", o), self._bind("lse", lse)
        d_o = self._bind("d_o", d_o)
        dq, dk, dv = self._bind("dq", dq), self._bind("dk", dk), self._bind("dv", dv)
        key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), self.forwards)
        with torch.cuda.stream(self.stream):
            if self.graph is None or self.graph[0] != key:
                self.graph = None
                self.graph = (key,) + self._grad_graph(q, k, v)
                self.recomputed_forwards += 1
            _, qg, kg, vg, out = self.graph
            gq, gk, gv = torch.autograd.grad(out, (qg, kg, vg), d_o, retain_graph=True)
            dq.copy_(gq)
            dk.copy_(gk)
            dv.copy_(gv)

    def info_json(self):
        info = dict(self.info)
        info["torch_peak_bytes"] = torch.cuda.max_memory_allocated(self.device)
        info["recomputed_forwards"] = self.recomputed_forwards
        info["outputs"] = "allocated by torch, copied into lca's buffers inside the timed call"
        return json.dumps(info)

    def close(self):
        self.graph = None
        self.tensors.clear()
        self.block_mask = None
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()
