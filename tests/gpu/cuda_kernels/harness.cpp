// Implementation of the CUDA kernel test harness (see harness.hpp).
#include "harness.hpp"

#include <cuda_runtime_api.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>

namespace lca::test::cuda {

std::vector<lca_slice> mask_full(int64_t sq, int64_t sk) { return {slice(0, sq, 0, sk, LCA_SLICE_FULL)}; }

std::vector<lca_slice> mask_causal(int64_t s) { return {slice(0, s, 0, s, LCA_SLICE_CAUSAL)}; }

std::vector<lca_slice> mask_documents(const std::vector<int64_t>& lengths, bool causal) {
  std::vector<lca_slice> out;
  int64_t at = 0;
  for (int64_t len : lengths) {
    out.push_back(slice(at, at + len, at, at + len, causal ? LCA_SLICE_CAUSAL : LCA_SLICE_FULL));
    at += len;
  }
  return out;
}

std::vector<lca_slice> mask_sliding_window(int64_t s, int64_t window) {
  // Rows [0, w): causal. Rows [w, s): BI_CAUSAL over keys [1, s), shift w - 1, i.e. k in [q-w+1, q].
  return {slice(0, window, 0, window, LCA_SLICE_CAUSAL), slice(window, s, 1, s, LCA_SLICE_BI_CAUSAL)};
}

std::vector<lca_slice> mask_inv_bi(int64_t sq, int64_t sk) {
  const int64_t qh = sq / 2, kh = sk / 2;
  return {slice(0, qh, 0, sk, LCA_SLICE_INV_CAUSAL), slice(qh, sq, kh, sk, LCA_SLICE_BI_CAUSAL),
          slice(qh, sq, 0, kh / 3, LCA_SLICE_FULL)};
}

std::vector<lca_slice> mask_with_empty_rows(int64_t s) {
  return {slice(40, 100, 0, 100, LCA_SLICE_CAUSAL), slice(120, s, 0, s - 7, LCA_SLICE_CAUSAL)};
}

float round_to(int32_t dtype, float v) {
  switch (dtype) {
    case LCA_DTYPE_BF16: return bf16_to_f32(f32_to_bf16(v));
    case LCA_DTYPE_F16: return f16_to_f32(f32_to_f16(v));
    default: return v;
  }
}

Inputs make_inputs(const Problem& p, uint64_t seed) {
  auto draw = [&](size_t n, uint64_t stream_id) {
    std::vector<float> out(n);
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + stream_id * 0xD1B54A32D192ED03ull;
    for (auto& x : out) {
      z += 0x9E3779B97F4A7C15ull;
      uint64_t m = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      m = (m ^ (m >> 27)) * 0x94D049BB133111EBull;
      m ^= m >> 31;
      float u = 2.0f * ((static_cast<float>(m >> 40) + 0.5f) / 16777216.0f) - 1.0f;
      if (std::fabs(u) < 1e-3f) u = std::copysign(1e-3f, u);  // never zero, in any dtype
      x = round_to(p.dtype, u);
    }
    return out;
  };
  Inputs in;
  in.q = draw(size_t(p.seqlen_q) * p.heads_q * p.head_dim, 1);
  in.k = draw(size_t(p.seqlen_k) * p.heads_kv * p.head_dim, 2);
  in.v = draw(size_t(p.seqlen_k) * p.heads_kv * p.head_dim, 3);
  in.d_o = draw(size_t(p.seqlen_q) * p.heads_q * p.head_dim, 4);
  return in;
}

namespace {

lca_tensor tensor(int32_t dtype, void* data, int64_t tokens, int64_t heads, int64_t dim) {
  return lca_tensor{sizeof(lca_tensor), dtype, data, {tokens, heads, dim}, {heads * dim, dim, 1}};
}

lca_tensor lse_tensor(void* data, int64_t heads, int64_t tokens) {
  return lca_tensor{sizeof(lca_tensor), LCA_DTYPE_F32, data, {heads, tokens, 1}, {tokens, 1, 1}};
}

lca_problem problem_of(const Problem& p, int32_t dtype, int32_t device) {
  lca_problem pr{};
  pr.struct_size = sizeof(lca_problem);
  pr.dtype = dtype;
  pr.device_type = device;
  pr.device_index = 0;
  pr.seqlen_q = p.seqlen_q;
  pr.seqlen_k = p.seqlen_k;
  pr.heads_q = p.heads_q;
  pr.heads_kv = p.heads_kv;
  pr.head_dim = p.head_dim;
  pr.softmax_scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  return pr;
}

lca_mask mask_of(const Problem& p) {
  lca_mask m{};
  m.struct_size = sizeof(lca_mask);
  m.seqlen_q = p.seqlen_q;
  m.seqlen_k = p.seqlen_k;
  m.num_slices = static_cast<int64_t>(p.slices.size());
  m.slices = p.slices.data();
  return m;
}

lca_status host_alloc(void*, size_t bytes, void** out) {
  *out = bytes ? std::malloc(bytes) : nullptr;
  return (*out != nullptr || bytes == 0) ? LCA_OK : LCA_ERR_OUT_OF_MEMORY;
}
void host_free(void*, void* ptr) { std::free(ptr); }

// dQ, dK and dV set to NaN bytes, so that a backward call that leaves any of them unwritten fails.
cudaError_t poison_gradients(const lca_bwd_args& bwd, void* stream) {
  for (const lca_tensor* t : {&bwd.dq, &bwd.dk, &bwd.dv}) {
    const size_t bytes = size_t(t->shape[0]) * t->stride[0] * dtype_size(t->dtype);
    if (const cudaError_t e = cudaMemsetAsync(t->data, 0xFF, bytes, static_cast<cudaStream_t>(stream)); e != cudaSuccess)
      return e;
  }
  return cudaSuccess;
}

// Runs create -> plan -> forward [-> backward x backward_calls, the gradients poisoned between
// calls] -> destroy on tensors the caller laid out.
struct Call {
  const lca_kernel_vtable& vt;
  std::string config;
  lca_status run(const lca_problem& pr, const lca_mask& mask, const lca_exec& exec, lca_fwd_args fwd,
                 const lca_bwd_args* bwd, std::string* error, bool sync_stream, int backward_calls = 1) {
    lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, config.c_str(),
                       nullptr, nullptr};
    lca_kernel* kernel = nullptr;
    lca_status st = vt.create(&host, &kernel);
    lca_plan* plan = nullptr;
    if (st == LCA_OK) st = vt.plan(kernel, &pr, &mask, &exec, &plan);
    if (st == LCA_OK) st = vt.forward(kernel, plan, &fwd, &exec);
    std::string harness_error;
    for (int i = 0; i < backward_calls && st == LCA_OK && bwd != nullptr; ++i) {
      if (i > 0) {
        if (const cudaError_t e = poison_gradients(*bwd, exec.stream); e != cudaSuccess) {
          st = LCA_ERR_DEVICE;
          harness_error = std::string("test harness: poisoning dQ/dK/dV between backward calls: ") + cudaGetErrorString(e);
          break;
        }
      }
      st = vt.backward(kernel, plan, bwd, &exec);
    }
    if (st != LCA_OK) *error = harness_error.empty() ? vt.last_error() : harness_error;
    if (sync_stream) cudaStreamSynchronize(static_cast<cudaStream_t>(exec.stream));
    if (plan != nullptr) vt.destroy_plan(kernel, plan, &exec);
    if (kernel != nullptr) vt.destroy(kernel);
    return st;
  }
};

// ---- the reference's results kept on disk ----
// Every variant run of a kernel's test binary (tests/gpu/flex_flash runs one 29 times) computes
// the same references on the same seeded inputs; most of a run is that fp64 CPU work. A result is
// kept under a key of everything it depends on: the problem, its slices, the inputs' bytes, the
// pass and the cpu_reference library that computed it (its size and modification time), so a
// rebuilt reference or another input never meets an old file. Folder: LCA_TEST_REFERENCE_CACHE,
// else reference_cache in the build tree; "off" keeps nothing.
constexpr char kCacheMagic[8] = {'L', 'C', 'A', 'R', 'E', 'F', '1', '\n'};

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

std::filesystem::path reference_cache_file(const Problem& p, const Inputs& in, bool backward) {
  const char* env = std::getenv("LCA_TEST_REFERENCE_CACHE");
  // Beside the plugin folder (build/plugins): build/reference_cache.
  const std::string dir = env != nullptr ? env : (plugin_dir().parent_path() / "reference_cache").string();
  if (dir.empty() || dir == "off") return {};
  std::error_code ec;
  const auto lib = plugin_dir() / "liblca_cpu_reference.so";
  const auto size = std::filesystem::file_size(lib, ec);
  if (ec) return {};
  const auto mtime = std::filesystem::last_write_time(lib, ec).time_since_epoch().count();
  if (ec) return {};
  uint64_t h = 14695981039346656037ull;
  const int64_t dims[] = {p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv, p.head_dim, p.dtype, backward ? 1 : 0,
                          static_cast<int64_t>(size), static_cast<int64_t>(mtime)};
  h = fnv1a(h, dims, sizeof(dims));
  for (const lca_slice& s : p.slices) {
    const int64_t v[] = {s.q_begin, s.q_end, s.k_begin, s.k_end, static_cast<int64_t>(s.type)};
    h = fnv1a(h, v, sizeof(v));
  }
  for (const auto* t : {&in.q, &in.k, &in.v, &in.d_o}) h = fnv1a(h, t->data(), t->size() * sizeof(float));
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.ref", static_cast<unsigned long long>(h));
  return std::filesystem::path(dir) / name;
}

// The kept result, where the file is there and holds exactly the sizes `r` has (else false).
bool load_reference(const std::filesystem::path& file, Results& r) {
  std::ifstream f(file, std::ios::binary);
  char magic[sizeof(kCacheMagic)];
  if (!f.read(magic, sizeof(magic)) || std::memcmp(magic, kCacheMagic, sizeof(magic)) != 0) return false;
  for (auto* t : {&r.o, &r.lse, &r.dq, &r.dk, &r.dv}) {
    uint64_t n = 0;
    if (!f.read(reinterpret_cast<char*>(&n), sizeof(n)) || n != t->size()) return false;
    if (!f.read(reinterpret_cast<char*>(t->data()), static_cast<std::streamsize>(n * sizeof(float)))) return false;
  }
  return f.peek() == std::char_traits<char>::eof();
}

// Written whole under a name of its own, then renamed: test runs side by side never read half a file.
void save_reference(const std::filesystem::path& file, const Results& r) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  const auto tmp = file.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(kCacheMagic, sizeof(kCacheMagic));
    for (const auto* t : {&r.o, &r.lse, &r.dq, &r.dk, &r.dv}) {
      const uint64_t n = t->size();
      f.write(reinterpret_cast<const char*>(&n), sizeof(n));
      f.write(reinterpret_cast<const char*>(t->data()), static_cast<std::streamsize>(n * sizeof(float)));
    }
    if (!f) {
      std::filesystem::remove(tmp, ec);
      return;  // a full disk costs the next run the computation, nothing else
    }
  }
  std::filesystem::rename(tmp, file, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace

// cpu_reference itself (below).
Results compute_cpu_reference(const Problem& p, const Inputs& in, bool backward);

Results run_cpu_reference(const Problem& p, const Inputs& in, bool backward) {
  const auto cached = reference_cache_file(p, in, backward);
  if (!cached.empty()) {
    Results r;  // the sizes compute_cpu_reference gives
    r.o.assign(in.q.size(), NAN);
    r.lse.assign(size_t(p.heads_q) * p.seqlen_q, NAN);
    r.dq.assign(in.q.size(), NAN);
    r.dk.assign(in.k.size(), NAN);
    r.dv.assign(in.v.size(), NAN);
    if (load_reference(cached, r)) return r;
  }
  Results r = compute_cpu_reference(p, in, backward);
  if (!cached.empty() && r.status == LCA_OK) save_reference(cached, r);
  return r;
}

Results compute_cpu_reference(const Problem& p, const Inputs& in, bool backward) {
  static PluginHandle plugin("cpu_reference");
  Results r;
  const lca_problem pr = problem_of(p, LCA_DTYPE_F32, LCA_DEVICE_CPU);
  const lca_mask mask = mask_of(p);
  lca_allocator alloc{sizeof(lca_allocator), nullptr, &host_alloc, &host_free};
  lca_exec exec{sizeof(lca_exec), nullptr, &alloc, 0};
  Inputs x = in;  // the plugin takes non-const pointers
  r.o.assign(in.q.size(), NAN);
  r.lse.assign(size_t(p.heads_q) * p.seqlen_q, NAN);
  r.dq.assign(in.q.size(), NAN);
  r.dk.assign(in.k.size(), NAN);
  r.dv.assign(in.v.size(), NAN);
  const int32_t f = LCA_DTYPE_F32;
  lca_fwd_args fwd{sizeof(lca_fwd_args), tensor(f, x.q.data(), p.seqlen_q, p.heads_q, p.head_dim),
                   tensor(f, x.k.data(), p.seqlen_k, p.heads_kv, p.head_dim),
                   tensor(f, x.v.data(), p.seqlen_k, p.heads_kv, p.head_dim),
                   tensor(f, r.o.data(), p.seqlen_q, p.heads_q, p.head_dim), lse_tensor(r.lse.data(), p.heads_q, p.seqlen_q)};
  lca_bwd_args bwd{sizeof(lca_bwd_args), fwd.q, fwd.k, fwd.v, fwd.o,
                   tensor(f, x.d_o.data(), p.seqlen_q, p.heads_q, p.head_dim), fwd.lse,
                   tensor(f, r.dq.data(), p.seqlen_q, p.heads_q, p.head_dim),
                   tensor(f, r.dk.data(), p.seqlen_k, p.heads_kv, p.head_dim),
                   tensor(f, r.dv.data(), p.seqlen_k, p.heads_kv, p.head_dim)};
  Call call{plugin.kernel(), R"({"accumulate":"f64"})"};
  r.status = call.run(pr, mask, exec, fwd, backward ? &bwd : nullptr, &r.error, false);
  return r;
}

Results run_cuda(const PluginHandle& plugin, const Problem& p, const Inputs& in, bool backward,
                 core::gpu::DeviceAllocator& alloc, void* stream, int backward_calls,
                 const std::string& config) {
  Results r;
  const size_t es = dtype_size(p.dtype);
  const size_t nq = in.q.size(), nk = in.k.size();
  const size_t nl = size_t(p.heads_q) * p.seqlen_q;
  std::vector<void*> bufs;
  auto dev = [&](size_t bytes) {
    void* ptr = nullptr;
    if (alloc.allocate(bytes, &ptr) != LCA_OK) throw std::runtime_error("test allocation: " + alloc.last_error());
    bufs.push_back(ptr);
    cudaMemset(ptr, 0xFF, bytes);  // poison
    return ptr;
  };
  auto upload = [&](const std::vector<float>& host) {
    std::vector<unsigned char> raw(host.size() * es);
    for (size_t i = 0; i < host.size(); ++i) store_from_double(raw.data(), p.dtype, int64_t(i), host[i]);
    void* ptr = dev(raw.size());
    cudaMemcpy(ptr, raw.data(), raw.size(), cudaMemcpyHostToDevice);
    return ptr;
  };
  auto download = [&](const void* ptr, size_t n, int32_t dtype) {
    std::vector<unsigned char> raw(n * dtype_size(dtype));
    cudaMemcpy(raw.data(), ptr, raw.size(), cudaMemcpyDeviceToHost);
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load_as_double(raw.data(), dtype, int64_t(i)));
    return out;
  };
  const int32_t t = p.dtype;
  void *q = upload(in.q), *k = upload(in.k), *v = upload(in.v), *d_o = upload(in.d_o);
  void *o = dev(nq * es), *lse = dev(nl * 4), *dq = dev(nq * es), *dk = dev(nk * es), *dv = dev(nk * es);
  lca_fwd_args fwd{sizeof(lca_fwd_args), tensor(t, q, p.seqlen_q, p.heads_q, p.head_dim),
                   tensor(t, k, p.seqlen_k, p.heads_kv, p.head_dim), tensor(t, v, p.seqlen_k, p.heads_kv, p.head_dim),
                   tensor(t, o, p.seqlen_q, p.heads_q, p.head_dim), lse_tensor(lse, p.heads_q, p.seqlen_q)};
  lca_bwd_args bwd{sizeof(lca_bwd_args), fwd.q, fwd.k, fwd.v, fwd.o, tensor(t, d_o, p.seqlen_q, p.heads_q, p.head_dim),
                   fwd.lse, tensor(t, dq, p.seqlen_q, p.heads_q, p.head_dim),
                   tensor(t, dk, p.seqlen_k, p.heads_kv, p.head_dim), tensor(t, dv, p.seqlen_k, p.heads_kv, p.head_dim)};
  cudaDeviceSynchronize();
  const lca_problem pr = problem_of(p, t, LCA_DEVICE_CUDA);
  const lca_mask mask = mask_of(p);
  lca_exec exec{sizeof(lca_exec), stream, alloc.abi(), 0};
  Call call{plugin.kernel(), config};
  r.status = call.run(pr, mask, exec, fwd, backward ? &bwd : nullptr, &r.error, true, backward_calls);
  if (r.status == LCA_OK) {
    r.o = download(o, nq, t);
    r.lse = download(lse, nl, LCA_DTYPE_F32);
    if (backward) {
      r.dq = download(dq, nq, t);
      r.dk = download(dk, nk, t);
      r.dv = download(dv, nk, t);
    }
  }
  for (void* ptr : bufs) alloc.release(ptr);
  return r;
}

std::string plan_info_text(const lca_kernel_vtable& vt, lca_kernel* kernel, lca_plan* plan) {
  if (plan == nullptr || vt.struct_size < offsetof(lca_kernel_vtable, plan_info) + sizeof(vt.plan_info) ||
      vt.plan_info == nullptr)
    return "";
  const char* text = vt.plan_info(kernel, plan);
  return text != nullptr ? text : "";
}

std::string plan_info_of(const PluginHandle& plugin, const Problem& p, core::gpu::DeviceAllocator& alloc,
                         void* stream, const std::string& config) {
  const lca_kernel_vtable& vt = plugin.kernel();
  lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, LCA_TEST_PLUGIN_DIR, nullptr, config.c_str(),
                     nullptr, nullptr};
  lca_kernel* kernel = nullptr;
  if (vt.create(&host, &kernel) != LCA_OK) throw std::runtime_error(std::string("create: ") + vt.last_error());
  const lca_problem pr = problem_of(p, p.dtype, LCA_DEVICE_CUDA);
  const lca_mask mask = mask_of(p);
  lca_exec exec{sizeof(lca_exec), stream, alloc.abi(), 0};
  lca_plan* plan = nullptr;
  const lca_status st = vt.plan(kernel, &pr, &mask, &exec, &plan);
  const std::string error = st == LCA_OK ? "" : vt.last_error();
  const std::string info = st == LCA_OK ? plan_info_text(vt, kernel, plan) : "";
  if (plan != nullptr) vt.destroy_plan(kernel, plan, &exec);
  vt.destroy(kernel);
  if (st != LCA_OK) throw std::runtime_error("plan: " + error);
  return info;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return std::numeric_limits<double>::infinity();
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double lse_max_abs(const std::vector<float>& a, const std::vector<float>& ref) {
  if (a.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(ref[i])) return std::numeric_limits<double>::infinity();
    if (std::isinf(ref[i]) || std::isinf(a[i])) {
      if (a[i] != ref[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::fabs(double(a[i]) - ref[i]));
  }
  return worst;
}

}  // namespace lca::test::cuda
