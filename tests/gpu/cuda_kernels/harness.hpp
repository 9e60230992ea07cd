// Test harness for the CUDA kernel plugins: hand-built slice masks, random inputs rounded to the
// dtype, runs through the real C ABI (cpu_reference on the host, a CUDA plugin on the device),
// and the error measures. Used by the tests in tests/gpu/cuda_kernels.
// Rule: outputs are poisoned (0xFF bytes = NaN) before every call, so an unwritten element fails.
#pragma once

#include "core/cuda/gpu.hpp"
#include "plugin_handle.hpp"

#include <lca/abi.h>
#include <lca/types.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace lca::test::cuda {

inline lca_slice slice(int64_t q0, int64_t q1, int64_t k0, int64_t k1, lca_slice_type type) {
  return lca_slice{q0, q1, k0, k1, type, 0};
}

struct Problem {
  std::string name;
  int64_t seqlen_q = 0, seqlen_k = 0;
  int32_t heads_q = 1, heads_kv = 1, head_dim = 64;
  int32_t dtype = LCA_DTYPE_BF16;
  std::vector<lca_slice> slices;
};

// ---- masks ----
std::vector<lca_slice> mask_full(int64_t sq, int64_t sk);
std::vector<lca_slice> mask_causal(int64_t s);
// Block-diagonal documents; each document causal or full.
std::vector<lca_slice> mask_documents(const std::vector<int64_t>& lengths, bool causal);
// Query q sees keys [q - window + 1, q].
std::vector<lca_slice> mask_sliding_window(int64_t s, int64_t window);
// INV_CAUSAL on the upper half, BI_CAUSAL (Lk > Lq) plus a FULL block on the lower half.
std::vector<lca_slice> mask_inv_bi(int64_t sq, int64_t sk);
// Causal, except that query rows [0, 40) and [100, 120) see nothing (keys past them: no query).
std::vector<lca_slice> mask_with_empty_rows(int64_t s);

// ---- inputs and results, host side, packed {tokens, heads, dim} ----
struct Inputs {
  std::vector<float> q, k, v, d_o;  // already rounded to the problem's dtype
};
Inputs make_inputs(const Problem& p, uint64_t seed);

struct Results {
  std::vector<float> o, lse, dq, dk, dv;
  lca_status status = LCA_OK;
  std::string error;  // the plugin's last_error when status != LCA_OK
};

// cpu_reference with fp64 accumulation on the fp32 values of the rounded inputs. A result is kept
// on disk (LCA_TEST_REFERENCE_CACHE, else reference_cache in the build tree; "off": never) under a
// key of the problem, the inputs' bytes, the pass and the cpu_reference library's build, and read
// back by the next run that asks for the same: a kernel's test binary run once a variant computes
// each reference once.
Results run_cpu_reference(const Problem& p, const Inputs& in, bool backward);

// A CUDA kernel plugin on device 0, inputs in the problem's dtype, through `alloc`. The backward
// runs backward_calls times on one plan, the gradients poisoned before each call after the first:
// the results are the last call's (a plan that keeps state between calls must leave it right).
// config: the kernel's options (lca_host_info::config_json).
Results run_cuda(const PluginHandle& plugin, const Problem& p, const Inputs& in, bool backward,
                 core::gpu::DeviceAllocator& alloc, void* stream, int backward_calls = 1,
                 const std::string& config = "{}");

// A plan's plan_info (ABI 1.1): "" where the vtable predates it or the plugin gives none.
std::string plan_info_text(const lca_kernel_vtable& vt, lca_kernel* kernel, lca_plan* plan);

// A CUDA kernel plugin's plan_info (ABI 1.1) for the problem after plan() alone, on device 0: "" where
// it gives none. A failing create or plan throws std::runtime_error with the plugin's message.
std::string plan_info_of(const PluginHandle& plugin, const Problem& p, core::gpu::DeviceAllocator& alloc,
                         void* stream, const std::string& config = "{}");

// ||a - b|| / ||b|| (||a - b|| when b is all zeros); NaN anywhere gives +inf.
double rel_l2(const std::vector<float>& a, const std::vector<float>& b);
// Largest |a - b| over finite reference entries; +inf when -inf positions differ or NaN appears.
double lse_max_abs(const std::vector<float>& a, const std::vector<float>& ref);

// Round-trip a float through a dtype.
float round_to(int32_t dtype, float v);

}  // namespace lca::test::cuda
