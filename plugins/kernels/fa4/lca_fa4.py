"""fa4's Python side: FlashAttention-4 (flash-attn-4, CUTLASS CuTe DSL) forward and backward on
lca's device buffers and lca's CUDA stream.

Loaded by the fa4 plugin into its embedded interpreter; the plugin makes one Plan per lca plan
and hands tensors over as DLPack capsules (no copies). The mask arrives already digested on the
host (plugins/kernels/fa4/fa4_mask.cpp): documents as cu_seqlens, and causal or a window.

Rule: nothing here writes to stdout (with --isolate the host reads cell results there), and every
error is an exception with a one-line message; Unsupported means "outside this kernel's reach".
"""

import json
import os
import site
import sys
import time

_fa = None       # flash_attn.cute.interface
_library = ""    # versions, for plan_info


class Unsupported(Exception):
    """A cell outside what FA4 can run here (the host records it as X)."""


def _version(dist):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:  # pragma: no cover - metadata missing from a hand-made site folder
        return "?"


def load(site_dir):
    """Imports FA4 once per process, from site_dir (put first on sys.path, its .pth files read:
    nvidia-cutlass-dsl finds its packages through one) or, when site_dir is empty, from the
    interpreter's own path. Returns the versions as one line."""
    global _fa, _library
    if _fa is not None:
        return _library
    if site_dir:
        if not os.path.isdir(site_dir):
            raise FileNotFoundError(f"site folder {site_dir} does not exist")
        if site_dir not in sys.path:
            sys.path.insert(0, site_dir)
        site.addsitedir(site_dir)
    import torch
    from flash_attn.cute import interface
    for name in ("_flash_attn_fwd", "_flash_attn_bwd"):
        if not hasattr(interface, name):
            raise ImportError(f"flash_attn.cute.interface has no {name} (flash-attn-4 "
                              f"{_version('flash-attn-4')}; plugins/kernels/fa4/wheels.txt pins the one this plugin calls)")
    _fa = interface
    _library = (f"flash-attn-4 {_version('flash-attn-4')}, nvidia-cutlass-dsl {_version('nvidia-cutlass-dsl')}, "
                f"quack-kernels {_version('quack-kernels')}, torch {torch.__version__}")
    return _library


_DTYPES = {"bf16": "bfloat16", "f16": "float16"}


class Plan:
    """One lca plan: the mask's FA4 arguments, the kernels compiled and warmed up for its shape,
    and the tensors wrapped from the host's buffers (reused while the host passes the same ones)."""

    def __init__(self, *, device, stream, seqlen, heads_q, heads_kv, head_dim, dtype, scale,
                 cu_seqlens, max_doc, form, window_left, window_right, warm_backward):
        import torch
        import tvm_ffi
        if dtype not in _DTYPES:
            raise Unsupported(f"dtype {dtype} (bf16, f16)")
        self.torch, self.tvm_ffi = torch, tvm_ffi
        self.device = torch.device("cuda", device)
        torch.cuda.set_device(self.device)
        major, minor = torch.cuda.get_device_capability(self.device)
        if major != 9:
            raise Unsupported(f"compute capability {major}.{minor}: this plugin runs FA4's Hopper (sm90) kernels")
        self.stream = (torch.cuda.ExternalStream(stream, device=self.device) if stream
                       else torch.cuda.default_stream(self.device))
        self.shape = dict(seqlen=seqlen, heads_q=heads_q, heads_kv=heads_kv, head_dim=head_dim,
                          dtype=getattr(torch, _DTYPES[dtype]))
        self.varlen = cu_seqlens is not None
        causal = form == "causal"
        window = form == "window"
        self.kwargs = dict(softmax_scale=scale, causal=causal,
                           window_size_left=(window_left if window and window_left >= 0 else None),
                           window_size_right=(window_right if window and window_right >= 0 else None))
        if self.varlen:
            cu = torch.frombuffer(bytearray(cu_seqlens), dtype=torch.int32).to(self.device)
            self.kwargs.update(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=max_doc, max_seqlen_k=max_doc)
        self.info = {"library": _library, "call": "varlen (cu_seqlens)" if self.varlen else "batch 1",
                     "causal": causal, "window_size_left": self.kwargs["window_size_left"],
                     "window_size_right": self.kwargs["window_size_right"],
                     "stream_from_torch": hasattr(torch.Tensor, "__dlpack_c_exchange_api__")}
        self.tensors = {}  # role -> tensor over the host's buffer
        self._warm_up(warm_backward)
        torch.cuda.reset_peak_memory_stats(self.device)

    def _streams(self):
        """lca's stream for torch and for FA4's compiled functions (tvm-ffi's environment stream)."""
        return self.tvm_ffi.use_torch_stream(self.torch.cuda.stream(self.stream))

    def _view(self, t):
        """lca's THD {S, H, D} (lse {H, S}) as FA4 takes it: as is with cu_seqlens, else batch 1."""
        return t if self.varlen else t.unsqueeze(0)

    def _forward(self, q, k, v, o, lse):
        _fa._flash_attn_fwd(q, k, v, out=o, lse=lse, return_lse=True, **self.kwargs)

    def _backward(self, q, k, v, o, d_o, lse, dq, dk, dv):
        _fa._flash_attn_bwd(q, k, v, o, d_o, lse, dq=dq, dk=dk, dv=dv, **self.kwargs)

    def _warm_up(self, backward):
        """Compiles (the CuTe DSL JIT, or its cache) and runs forward and, if asked, backward once
        on scratch tensors of this shape and mask form: none of it is timed by the host."""
        torch, s = self.torch, self.shape
        make = lambda h: self._view(torch.randn(s["seqlen"], h, s["head_dim"], device=self.device, dtype=s["dtype"]))
        with self._streams():
            q, k, v = make(s["heads_q"]), make(s["heads_kv"]), make(s["heads_kv"])
            o = torch.empty_like(q)
            lse = self._view(torch.empty(s["heads_q"], s["seqlen"], device=self.device, dtype=torch.float32))
            t0 = time.perf_counter()
            self._forward(q, k, v, o, lse)
            self.stream.synchronize()
            self.info["compile_fwd_ms"] = (time.perf_counter() - t0) * 1e3
            if backward:
                d_o = torch.randn_like(q)
                dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
                t0 = time.perf_counter()
                self._backward(q, k, v, o, d_o, lse, dq, dk, dv)
                self.stream.synchronize()
                self.info["compile_bwd_ms"] = (time.perf_counter() - t0) * 1e3
        self.info["compile_ms"] = self.info["compile_fwd_ms"] + self.info.get("compile_bwd_ms", 0.0)
        # The scratch goes back to the device, not to torch's cache: lca's own buffers come next.
        del q, k, v, o, lse
        if backward:
            del d_o, dq, dk, dv
        torch.cuda.empty_cache()

    def _bind(self, role, capsule):
        if capsule is not None:
            self.tensors[role] = self._view(self.torch.from_dlpack(capsule))
        return self.tensors[role]

    def forward(self, q, k, v, o, lse):
        """Tensors as DLPack capsules, or None for the one this role had on the last call:
        q {S, Hq, D}, k and v {S, Hkv, D}, o like q, lse {Hq, S} fp32 (natural log, as FA4 writes it)."""
        q, k, v = self._bind("q", q), self._bind("k", k), self._bind("v", v)
        o, lse = self._bind("o", o), self._bind("lse", lse)
        with self._streams():
            self._forward(q, k, v, o, lse)

    def backward(self, q, k, v, o, d_o, lse, dq, dk, dv):
        """FA4's backward from the ABI's O and LSE, writing dQ, dK, dV into lca's buffers."""
        args = [self._bind(role, t) for role, t in
                zip(("q", "k", "v", "o", "d_o", "lse", "dq", "dk", "dv"), (q, k, v, o, d_o, lse, dq, dk, dv))]
        with self._streams():
            self._backward(*args)

    def info_json(self):
        info = dict(self.info)
        info["torch_peak_bytes"] = self.torch.cuda.max_memory_allocated(self.device)
        info["outputs"] = "written by FA4 straight into lca's buffers; its workspace comes from torch"
        return json.dumps(info)

    def close(self):
        self.tensors.clear()
        self.kwargs = {}
        self.torch.cuda.synchronize(self.device)
        self.torch.cuda.empty_cache()
