// Quick timing of cudnn_sdpa through the C ABI (not a test): forward and backward, CUDA events
// around each call, 3 warm-ups, median of 10; TFLOPs/s on the unmasked area (fwd 4*area*d*hq,
// bwd 2.5x). Usage: bench_cudnn_sdpa [seqlen=16384] [heads_q=64] [heads_kv=8] [head_dim=128]
//                                     [dtype=bf16] [masks=full,causal,causal_document,sliding_window]
//                                     [plugin config JSON, e.g. {"bwd_plan":1}]
#include "device_fill.hpp"
#include "harness.hpp"
#include "masks.hpp"

#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

using namespace lca::test;

namespace {

TestMask bench_mask(const std::string& name, int64_t s) {
  if (name == "full") return full_mask(s);
  if (name == "causal") return causal_mask(s);
  if (name == "sliding_window") return sliding_window_mask(s, 1024);
  if (name == "sliding_window_causal") return sliding_window_causal_mask(s, 1024);
  // Documents: a fixed mix of lengths, the last one cut to fit.
  std::vector<int64_t> lens;
  const int64_t mix[] = {4096, 1024, 3072, 512, 2048, 5120, 777, 1536};
  for (int64_t used = 0, i = 0; used < s; ++i) {
    lens.push_back(std::min(mix[i % 8], s - used));
    used += lens.back();
  }
  if (name == "full_document") return document_mask(lens, false);
  if (name == "causal_document") return document_mask(lens, true);
  if (name == "sliding_window_document") return sliding_window_document_mask(lens, 1024);
  throw std::runtime_error("unknown mask " + name);
}

template <class F>
double median_ms(F&& call, cudaStream_t stream) {
  cudaEvent_t a, b;
  cuda_ok(cudaEventCreate(&a), "event");
  cuda_ok(cudaEventCreate(&b), "event");
  for (int i = 0; i < 3; ++i) call();
  std::vector<float> ms(10);
  for (float& t : ms) {
    cuda_ok(cudaEventRecord(a, stream), "record");
    call();
    cuda_ok(cudaEventRecord(b, stream), "record");
    cuda_ok(cudaEventSynchronize(b), "sync");
    cuda_ok(cudaEventElapsedTime(&t, a, b), "elapsed");
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return 0.5 * (ms[4] + ms[5]);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t s = argc > 1 ? std::stoll(argv[1]) : 16384;
  const int32_t hq = argc > 2 ? std::stoi(argv[2]) : 64, hkv = argc > 3 ? std::stoi(argv[3]) : 8;
  const int32_t d = argc > 4 ? std::stoi(argv[4]) : 128;
  const int32_t dtype = lca::dtype_from_name(argc > 5 ? argv[5] : "bf16");
  std::string masks = argc > 6 ? argv[6] : "full,causal,causal_document,sliding_window";
  if (!has_gpu()) {
    std::printf("bench_cudnn_sdpa: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "props");
  std::printf("device %s, cuDNN %zu; seqlen %lld, heads %d:%d, head_dim %d, %s\n", prop.name, cudnnGetVersion(),
              static_cast<long long>(s), hq, hkv, d, lca::dtype_name(dtype));

  PluginHandle lib("cudnn_sdpa");
  const std::string config = argc > 7 ? argv[7] : "{}";
  Kernel kernel(lib, config.c_str(), [](void*, int32_t, const char* message) { std::printf("  log: %s\n", message); });
  Allocator dev(true);
  cudaStream_t stream;
  cuda_ok(cudaStreamCreate(&stream), "stream");
  const lca_exec exec{sizeof(lca_exec), stream, &dev.abi, 0};
  Tensor q(dtype, {s, hq, d}, true), k(dtype, {s, hkv, d}, true), v(dtype, {s, hkv, d}, true);
  Tensor o(dtype, {s, hq, d}, true), d_o(dtype, {s, hq, d}, true), lse(LCA_DTYPE_F32, {hq, s, 1}, true);
  Tensor dq(dtype, {s, hq, d}, true), dk(dtype, {s, hkv, d}, true), dv(dtype, {s, hkv, d}, true);
  int seed = 1;
  for (Tensor* t : {&q, &k, &v, &d_o}) cuda_ok(device_fill_uniform(t->data(), dtype, t->numel(), seed++, 1.f, stream), "fill");
  const lca_fwd_args fwd{sizeof(lca_fwd_args), q.view(), k.view(), v.view(), o.view(), lse.view()};
  const lca_bwd_args bwd{sizeof(lca_bwd_args), q.view(), k.view(), v.view(), o.view(), d_o.view(),
                         lse.view(), dq.view(), dk.view(), dv.view()};

  std::printf("%-24s %10s %10s %10s %10s %10s %10s %9s\n", "mask", "plan_ms", "fwd_ms", "bwd_ms", "tflops_f",
              "tflops_b", "density", "ws_GiB");
  std::stringstream list(masks);
  for (std::string name; std::getline(list, name, ',');) {
    const TestMask m = bench_mask(name, s);
    const lca_mask mask = m.view();
    double area = 0;
    for (const lca_slice& sl : m.slices) area += static_cast<double>(lca::slice_area(sl));
    const lca_problem p{sizeof(lca_problem), dtype, LCA_DEVICE_CUDA, 0, s, s, hq, hkv, d,
                        1.0f / std::sqrt(static_cast<float>(d))};
    const size_t before = dev.live;
    const auto t0 = std::chrono::steady_clock::now();
    auto plan = kernel.plan(p, mask, exec);
    const double plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (plan.status != LCA_OK) {
      std::printf("%-24s refused: %s\n", name.c_str(), plan.message.c_str());
      continue;
    }
    const double ws_gib = static_cast<double>(dev.live - before) / (1 << 30);
    double f_ms = NAN, b_ms = NAN;
    try {
      f_ms = median_ms([&] { kernel.forward(plan, fwd, exec); }, stream);
      b_ms = median_ms([&] { kernel.backward(plan, bwd, exec); }, stream);
    } catch (const std::exception& e) {
      std::printf("%-24s failed: %s\n", name.c_str(), e.what());
    }
    const double flops = 4.0 * area * d * hq;
    std::printf("%-24s %10.1f %10.3f %10.3f %10.1f %10.1f %10.4f %9.3f\n", name.c_str(), plan_ms, f_ms, b_ms,
                flops / (f_ms * 1e9), 2.5 * flops / (b_ms * 1e9), area / (double(s) * s), ws_gib);
  }
  cudaStreamDestroy(stream);
  return 0;
}
