// Checking against the reference; see compare.hpp.
#include "core/check/compare.hpp"

#include <lca/checked.hpp>
#include <lca/parallel.hpp>
#include <lca/types.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace lca::core {
namespace {

// A tracked device (or host) buffer that returns itself to the backend.
class Buffer {
 public:
  Buffer(Backend& be, size_t bytes) : be_(be) {
    if (be_.allocator()->alloc(be_.allocator()->ctx, bytes, &ptr_) != LCA_OK)
      throw std::runtime_error("check: out of memory for the reference (" + std::to_string(bytes) + " bytes)");
  }
  ~Buffer() { be_.allocator()->free(be_.allocator()->ctx, ptr_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return ptr_; }

 private:
  Backend& be_;
  void* ptr_ = nullptr;
};

// Threads for the host-side conversions and comparisons: the hardware's, at most 16 (a rank of a
// context-parallel run shares its host with the others).
int host_threads() { return std::min(lca::resolve_threads(0), 16); }

// Element i of a 16-bit or 32/64-bit float buffer as float, the type chosen once per loop.
template <int32_t Dtype>
float load_f32(const unsigned char* raw, int64_t i) {
  if constexpr (Dtype == LCA_DTYPE_BF16 || Dtype == LCA_DTYPE_F16) {
    uint16_t u;
    std::memcpy(&u, raw + i * 2, 2);
    return Dtype == LCA_DTYPE_BF16 ? lca::bf16_to_f32(u) : lca::f16_to_f32(u);
  } else if constexpr (Dtype == LCA_DTYPE_F32) {
    float f;
    std::memcpy(&f, raw + i * 4, 4);
    return f;
  } else {
    double v;
    std::memcpy(&v, raw + i * 8, 8);
    return static_cast<float>(v);
  }
}

template <int32_t Dtype>
void convert_heads(const unsigned char* raw, int64_t tokens, int heads, int d, const std::vector<int>& chosen,
                   float* out) {
  const int64_t nh = static_cast<int64_t>(chosen.size());
  constexpr int64_t kTokensAnItem = 256;
  lca::parallel_for((tokens + kTokensAnItem - 1) / kTokensAnItem, host_threads(), [&](int64_t item, int) {
    const int64_t end = std::min(tokens, (item + 1) * kTokensAnItem);
    for (int64_t t = item * kTokensAnItem; t < end; ++t)
      for (int64_t hi = 0; hi < nh; ++hi) {
        const int64_t from = (t * heads + chosen[static_cast<size_t>(hi)]) * d, to = (t * nh + hi) * d;
        for (int c = 0; c < d; ++c) out[to + c] = load_f32<Dtype>(raw, from + c);
      }
  });
}

// The chosen heads of a THD tensor [tokens, heads, d] on the backend, as fp32 on the host
// ([tokens, chosen.size(), d]). Only those heads are converted: at 64K tokens and 64 heads a
// whole bf16 tensor is 1 GiB, and the check samples one head group of eight. The conversion is
// typed and runs on the host's threads: a checked backward cell converts and compares up to eight
// such tensors. On an idle 2-core machine, 80M bf16 elements took 0.30 s through double and 0.24 s
// typed, one thread or two (the first touch of the output bounds it); their comparison took 0.28 s
// on one thread and 0.20 s on two.
std::vector<float> heads_to_host_f32(Backend& be, const void* src, int64_t tokens, int heads, int d,
                                     int32_t dtype, const std::vector<int>& chosen) {
  const size_t es = lca::dtype_size(dtype);
  const size_t bytes = lca::checked_bytes("check: host copy bytes (tokens x heads x head_dim x dtype size)",
                                          lca::checked_product("check: host copy elements", tokens, heads, d), es);
  std::unique_ptr<unsigned char[]> raw(new unsigned char[bytes]);
  be.copy_to_host(raw.get(), src, bytes);
  const int64_t nh = static_cast<int64_t>(chosen.size());
  std::vector<float> out(static_cast<size_t>(lca::checked_product("check: fp32 copy elements", tokens, nh, d)));
  switch (dtype) {
    case LCA_DTYPE_BF16: convert_heads<LCA_DTYPE_BF16>(raw.get(), tokens, heads, d, chosen, out.data()); break;
    case LCA_DTYPE_F16: convert_heads<LCA_DTYPE_F16>(raw.get(), tokens, heads, d, chosen, out.data()); break;
    case LCA_DTYPE_F32: convert_heads<LCA_DTYPE_F32>(raw.get(), tokens, heads, d, chosen, out.data()); break;
    case LCA_DTYPE_F64: convert_heads<LCA_DTYPE_F64>(raw.get(), tokens, heads, d, chosen, out.data()); break;
    default: throw std::runtime_error("check: unsupported dtype " + std::to_string(dtype));
  }
  return out;
}

lca_tensor tensor(void* data, int32_t dtype, int64_t a, int64_t b, int64_t c) {
  return lca_tensor{sizeof(lca_tensor), dtype, data, {a, b, c}, {b * c, c, 1}};
}

// The error sums of a run of elements; runs combine in order, so the result does not depend on the
// number of threads.
struct Partial {
  int64_t count = 0, non_finite = 0;
  double diff2 = 0, ref2 = 0, max_abs = 0;
};

void accumulate(Partial& s, double x, double ref) {
  ++s.count;
  if (!std::isfinite(ref)) {
    // Rows that see nothing: LSE must be -inf (or NaN-free and very negative).
    if (std::isnan(x) || x > -1e30) ++s.non_finite;
    return;
  }
  if (!std::isfinite(x)) {
    ++s.non_finite;
    return;
  }
  s.diff2 += (x - ref) * (x - ref);
  s.ref2 += ref * ref;
  s.max_abs = std::max(s.max_abs, std::fabs(x - ref));
}

ErrorStats compare(const std::vector<float>& x, const std::vector<float>& ref) {
  constexpr int64_t kRun = int64_t{1} << 16;
  if (x.size() != ref.size())
    throw std::logic_error("check: " + std::to_string(x.size()) + " elements against a reference of " +
                           std::to_string(ref.size()));
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<Partial> runs(static_cast<size_t>((n + kRun - 1) / kRun));
  lca::parallel_for(static_cast<int64_t>(runs.size()), host_threads(), [&](int64_t r, int) {
    Partial& p = runs[static_cast<size_t>(r)];
    for (int64_t i = r * kRun, end = std::min(n, (r + 1) * kRun); i < end; ++i)
      accumulate(p, x[static_cast<size_t>(i)], ref[static_cast<size_t>(i)]);
  });
  ErrorStats s;
  double diff2 = 0, ref2 = 0;
  for (const Partial& p : runs) {
    s.count += p.count;
    s.non_finite += p.non_finite;
    diff2 += p.diff2;
    ref2 += p.ref2;
    s.max_abs = std::max(s.max_abs, p.max_abs);
  }
  s.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  return s;
}

}  // namespace

double default_tolerance(int32_t dtype, bool backward) {
  switch (dtype) {
    case LCA_DTYPE_F32: return backward ? 1e-3 : 1e-4;
    case LCA_DTYPE_F16: return backward ? 1e-2 : 5e-3;
    case LCA_DTYPE_BF16: return backward ? 3e-2 : 1.5e-2;
    default: return 1e-3;
  }
}

nlohmann::json CheckResult::to_json() const {
  nlohmann::json j = {{"ran", ran}, {"passed", passed}, {"tolerance", tolerance}};
  if (!note.empty()) j["note"] = note;
  for (const auto& [name, s] : errors)
    j["errors"][name] = {{"rel_l2", s.rel_l2}, {"max_abs", s.max_abs}, {"non_finite", s.non_finite}};
  return j;
}

ReferenceOutputs compute_reference(Backend& be, KernelInstance& reference, const lca_problem& p,
                                   const lca_mask& mask, const CellBuffers& buf, const CheckOptions& opt) {
  ReferenceOutputs ref;
  const int64_t S = p.seqlen_q, Sk = p.seqlen_k;
  const int Hq = p.heads_q, Hkv = p.heads_kv, D = p.head_dim, G = Hq / Hkv;

  // Sample whole kv groups so that dK/dV of a group see every query head that feeds them.
  double area = 0;
  for (int64_t i = 0; i < mask.num_slices; ++i) area += static_cast<double>(lca::slice_area(mask.slices[i]));
  const double flops_per_group = 4.0 * area * D * G * (opt.backward ? 3.5 : 1.0);
  int groups = std::clamp(static_cast<int>(opt.max_reference_flops / std::max(flops_per_group, 1.0)), 1, Hkv);
  for (int i = 0; i < groups; ++i) ref.kv_heads.push_back(static_cast<int>((static_cast<int64_t>(i) * Hkv) / groups));
  for (int kh : ref.kv_heads)
    for (int g = 0; g < G; ++g) ref.q_heads.push_back(kh * G + g);
  if (groups < Hkv) {
    std::ostringstream os;
    os << "checked kv groups";
    for (int kh : ref.kv_heads) os << " " << kh;
    os << " of " << Hkv;
    ref.note = os.str();
  }
  const int hq = static_cast<int>(ref.q_heads.size()), hkv = groups;

  const auto q = heads_to_host_f32(be, buf.q, S, Hq, D, p.dtype, ref.q_heads);
  const auto k = heads_to_host_f32(be, buf.k, Sk, Hkv, D, p.dtype, ref.kv_heads);
  const auto v = heads_to_host_f32(be, buf.v, Sk, Hkv, D, p.dtype, ref.kv_heads);

  const size_t fq = q.size() * 4, fk = k.size() * 4;
  Buffer rq(be, fq), rk(be, fk), rv(be, fk), ro(be, fq), rlse(be, static_cast<size_t>(hq) * S * 4);
  be.copy_from_host(rq.get(), q.data(), fq);
  be.copy_from_host(rk.get(), k.data(), fk);
  be.copy_from_host(rv.get(), v.data(), fk);

  lca_problem rp = p;
  rp.dtype = LCA_DTYPE_F32;
  rp.heads_q = hq;
  rp.heads_kv = hkv;
  const lca_exec exec{sizeof(lca_exec), be.stream(), be.allocator(), 0};
  const auto& vt = reference.vtable();
  lca_plan* plan = nullptr;
  if (vt.plan(reference.get(), &rp, &mask, &exec, &plan) != LCA_OK)
    throw std::runtime_error("reference " + reference.name() + " plan: " + vt.last_error());
  struct PlanGuard {
    KernelInstance& r;
    lca_plan* p;
    const lca_exec* e;
    ~PlanGuard() { r.vtable().destroy_plan(r.get(), p, e); }
  } guard{reference, plan, &exec};

  lca_fwd_args fa{sizeof(lca_fwd_args),
                  tensor(rq.get(), LCA_DTYPE_F32, S, hq, D),
                  tensor(rk.get(), LCA_DTYPE_F32, Sk, hkv, D),
                  tensor(rv.get(), LCA_DTYPE_F32, Sk, hkv, D),
                  tensor(ro.get(), LCA_DTYPE_F32, S, hq, D),
                  tensor(rlse.get(), LCA_DTYPE_F32, hq, S, 1)};
  if (vt.forward(reference.get(), plan, &fa, &exec) != LCA_OK)
    throw std::runtime_error("reference " + reference.name() + " forward: " + vt.last_error());
  be.synchronize();
  ref.o.resize(q.size());
  ref.lse.resize(static_cast<size_t>(hq) * S);
  be.copy_to_host(ref.o.data(), ro.get(), fq);
  be.copy_to_host(ref.lse.data(), rlse.get(), ref.lse.size() * 4);

  if (opt.backward) {
    const auto d_o = heads_to_host_f32(be, buf.d_o, S, Hq, D, p.dtype, ref.q_heads);
    Buffer rdo(be, fq), rdq(be, fq), rdk(be, fk), rdv(be, fk);
    be.copy_from_host(rdo.get(), d_o.data(), fq);
    lca_bwd_args ba{sizeof(lca_bwd_args), fa.q, fa.k, fa.v, fa.o,
                    tensor(rdo.get(), LCA_DTYPE_F32, S, hq, D), fa.lse,
                    tensor(rdq.get(), LCA_DTYPE_F32, S, hq, D),
                    tensor(rdk.get(), LCA_DTYPE_F32, Sk, hkv, D),
                    tensor(rdv.get(), LCA_DTYPE_F32, Sk, hkv, D)};
    if (vt.backward == nullptr || vt.backward(reference.get(), plan, &ba, &exec) != LCA_OK)
      throw std::runtime_error("reference " + reference.name() + " backward: " +
                               (vt.backward ? vt.last_error() : "no backward pass"));
    be.synchronize();
    ref.dq.resize(q.size());
    ref.dk.resize(k.size());
    ref.dv.resize(k.size());
    be.copy_to_host(ref.dq.data(), rdq.get(), fq);
    be.copy_to_host(ref.dk.data(), rdk.get(), fk);
    be.copy_to_host(ref.dv.data(), rdv.get(), fk);
  }
  return ref;
}

CheckResult compare_to_reference(Backend& be, const lca_problem& p, const CellBuffers& buf,
                                 const ReferenceOutputs& ref, const CheckOptions& opt) {
  CheckResult result;
  result.ran = true;
  result.tolerance = default_tolerance(p.dtype, opt.backward);
  result.note = ref.note;
  const int64_t S = p.seqlen_q, Sk = p.seqlen_k;
  const int Hq = p.heads_q, Hkv = p.heads_kv, D = p.head_dim;
  if (opt.backward && ref.dq.empty())
    throw std::logic_error("compare_to_reference: a backward cell needs a backward reference");

  std::vector<float> lse_all(static_cast<size_t>(Hq) * S), got_lse;
  be.copy_to_host(lse_all.data(), buf.lse, lse_all.size() * 4);
  for (int h : ref.q_heads) got_lse.insert(got_lse.end(), lse_all.begin() + h * S, lse_all.begin() + (h + 1) * S);
  result.errors["o"] = compare(heads_to_host_f32(be, buf.o, S, Hq, D, p.dtype, ref.q_heads), ref.o);
  result.errors["lse"] = compare(got_lse, ref.lse);
  if (opt.backward) {
    result.errors["dq"] = compare(heads_to_host_f32(be, buf.dq, S, Hq, D, p.dtype, ref.q_heads), ref.dq);
    result.errors["dk"] = compare(heads_to_host_f32(be, buf.dk, Sk, Hkv, D, p.dtype, ref.kv_heads), ref.dk);
    result.errors["dv"] = compare(heads_to_host_f32(be, buf.dv, Sk, Hkv, D, p.dtype, ref.kv_heads), ref.dv);
  }

  for (const auto& [name, s] : result.errors) {
    // LSE is fp32 in every kernel: hold it to an absolute bound instead of the dtype's.
    const bool ok = s.non_finite == 0 &&
                    (name == "lse" ? s.max_abs <= std::max(1e-3, result.tolerance) : s.rel_l2 <= result.tolerance);
    if (!ok) result.passed = false;
  }
  return result;
}

CheckResult check_cell(Backend& be, KernelInstance& reference, const lca_problem& p, const lca_mask& mask,
                       const CellBuffers& buf, const CheckOptions& opt) {
  return compare_to_reference(be, p, buf, compute_reference(be, reference, p, mask, buf, opt), opt);
}

}  // namespace lca::core
