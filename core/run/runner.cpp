// Running one cell; see runner.hpp.
#include "core/run/runner.hpp"

#include <lca/checked.hpp>
#include <lca/error.hpp>
#include <lca/types.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <stdexcept>

namespace lca::core {
namespace {

CellStatus status_for(lca_status s) {
  switch (s) {
    case LCA_ERR_OUT_OF_MEMORY: return CellStatus::out_of_memory;
    case LCA_ERR_UNSUPPORTED: return CellStatus::unsupported;
    default: return CellStatus::error;
  }
}

void check_status(lca_status s, const KernelInstance& k, const char* what) {
  if (s != LCA_OK)
    throw CellFailure(status_for(s), std::string(what) + ": " + k.vtable().last_error());
}

// Buffers of one cell, returned to the backend allocator on destruction.
class CellMemory {
 public:
  explicit CellMemory(Backend& be) : be_(be) {}
  ~CellMemory() {
    for (void* p : ptrs_) be_.allocator()->free(be_.allocator()->ctx, p);
  }
  void* alloc(size_t bytes, const char* what) {
    void* p = nullptr;
    if (be_.allocator()->alloc(be_.allocator()->ctx, bytes, &p) != LCA_OK || p == nullptr)
      throw CellFailure(CellStatus::out_of_memory, std::string("out of memory allocating ") + what + " (" +
                                 std::to_string(bytes) + " bytes)");
    ptrs_.push_back(p);
    return p;
  }

 private:
  Backend& be_;
  std::vector<void*> ptrs_;
};

// Element counts and bytes of a cell's buffers, checked before its mask is generated or anything
// of its length allocated: a size that wraps would allocate too little, and the first write would
// crash (2^62 tokens times 64 dimensions wraps to 0 bytes).
struct CellSizes {
  int64_t q_elems = 0, kv_elems = 0, lse_elems = 0;
  size_t q_bytes = 0, kv_bytes = 0, lse_bytes = 0;
};

CellSizes cell_sizes(int64_t S, int64_t Hq, int64_t Hkv, int64_t D, size_t es) {
  if (S < 1 || S > lca::max_seqlen)
    throw CellFailure(CellStatus::out_of_memory, "seqlen = " + std::to_string(S) + " is out of range; allowed: " + lca::seqlen_allowed());
  CellSizes z;
  z.q_elems = lca::checked_product("Q elements (seqlen x heads_q x head_dim)", S, Hq, D);
  z.kv_elems = lca::checked_product("K elements (seqlen x heads_kv x head_dim)", S, Hkv, D);
  z.lse_elems = lca::checked_product("LSE elements (heads_q x seqlen)", Hq, S);
  z.q_bytes = lca::checked_bytes("Q bytes (seqlen x heads_q x head_dim x dtype size)", z.q_elems, es);
  z.kv_bytes = lca::checked_bytes("K bytes (seqlen x heads_kv x head_dim x dtype size)", z.kv_elems, es);
  z.lse_bytes = lca::checked_bytes("LSE bytes", z.lse_elems, sizeof(float));
  return z;
}

lca_tensor thd(void* data, int32_t dtype, int64_t tokens, int64_t heads, int64_t d) {
  return lca_tensor{sizeof(lca_tensor), dtype, data, {tokens, heads, d}, {heads * d, d, 1}};
}

uint64_t mix(uint64_t seed, uint64_t salt) { return seed * 1000003ull + salt * 7919ull + 17ull; }


// Calls of one() past the `calls` already made, for as long as this process wants more (want,
// given the calls so far and the milliseconds since t0) and agree (CP ranks: whether any rank does)
// says so. Returns the calls in all.
int calls_while(const std::function<void()>& one, int calls, std::chrono::steady_clock::time_point t0,
                const std::function<bool(int, double)>& want, const std::function<bool(bool)>& agree) {
  for (;; ++calls) {
    const double elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const bool more = want(calls, elapsed_ms);
    if (!(agree ? agree(more) : more)) break;
    one();
  }
  return calls;
}

}  // namespace

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void set_time_stats(CellResult& r) {
  r.median_ms = median_of(r.times_ms);
  const auto [lo, hi] = std::minmax_element(r.times_ms.begin(), r.times_ms.end());
  r.min_ms = *lo;
  r.max_ms = *hi;
}

bool times_steady(const std::vector<double>& ms) {
  // The calls of a window: back from `end`, until they span kSteadyWindowMs and number 3.
  auto window_start = [&](size_t end) {
    size_t i = end;
    double span = 0;
    while (i > 0 && (span < kSteadyWindowMs || end - i < 3)) span += ms[--i];
    return span >= kSteadyWindowMs && end - i >= 3 ? i : ms.size();  // size(): too few calls
  };
  const size_t b = window_start(ms.size());
  if (b == ms.size()) return false;
  const size_t a = window_start(b);
  if (a == ms.size()) return false;
  const double before = median_of({ms.begin() + static_cast<std::ptrdiff_t>(a), ms.begin() + static_cast<std::ptrdiff_t>(b)});
  const double last = median_of({ms.begin() + static_cast<std::ptrdiff_t>(b), ms.end()});
  return before > 0 && std::abs(last / before - 1.0) <= kSteadyTolerance;
}

int warm_up(Backend& be, const std::function<void()>& call, int count, double min_ms,
            const std::function<bool(bool)>& agree, bool* steady) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) call();
  be.synchronize();
  if (steady) *steady = true;
  if (min_ms <= 0) return count;
  const bool gpu = be.type() == LCA_DEVICE_CUDA;
  std::vector<double> ms;  // the timed warm-up calls' device times (GPU)
  bool settled = !gpu;
  double checked_ms = 0;  // when times_steady last looked: every tenth of a window, not every call,
                          // so that the host keeps the GPU busy between short calls
  const int calls = calls_while(
      [&] {
        if (gpu) {
          ms.push_back(be.time_ms(call));
        } else {
          call();
        }
        be.synchronize();
      },
      count, t0,
      [&](int, double elapsed_ms) {
        if (gpu && elapsed_ms >= min_ms && (checked_ms == 0 || elapsed_ms - checked_ms >= kSteadyWindowMs / 10)) {
          settled = times_steady(ms);
          checked_ms = elapsed_ms;
        }
        return elapsed_ms < min_ms || (!settled && elapsed_ms < min_ms + kSteadyExtraMs);
      },
      agree);
  if (steady) *steady = settled;
  return calls;
}

int time_calls(const std::function<void()>& timed, int count, double min_ms,
               const std::function<bool(bool)>& agree) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) timed();
  if (min_ms <= 0) return count;  // by count alone: the ranks agree without asking
  return calls_while(
      timed, count, t0, [&](int calls, double elapsed_ms) { return calls < kMaxTimedCalls && elapsed_ms < min_ms; },
      agree);
}

RunnerOptions runner_options(const MatrixSpec& spec) {
  RunnerOptions o;
  o.warmup = spec.warmup;
  o.warmup_ms = spec.warmup_ms;
  o.repeats = spec.repeats;
  o.repeat_ms = spec.repeat_ms;
  o.seed = spec.seed;
  o.check = spec.check;
  o.check_max_seqlen = spec.check_max_seqlen;
  return o;
}

uint64_t input_seed(uint64_t run_seed, int64_t S, int hq, int hkv, int d, int which) {
  // Unsigned: the same bits as the signed sum had, without its overflow at absurd lengths.
  const uint64_t problem = mix(run_seed, static_cast<uint64_t>(S) * 131 + static_cast<uint64_t>(hq) * 7 +
                                             static_cast<uint64_t>(hkv) * 3 + static_cast<uint64_t>(d));
  return mix(problem, static_cast<uint64_t>(which));
}

nlohmann::json read_plan_info(const lca_kernel_vtable& vt, lca_kernel* kernel, lca_plan* plan) {
  if (vt.struct_size < offsetof(lca_kernel_vtable, plan_info) + sizeof(vt.plan_info) || vt.plan_info == nullptr)
    return nullptr;
  const char* text = vt.plan_info(kernel, plan);
  if (text == nullptr || *text == 0) return nullptr;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    spdlog::warn("plan_info of a plan is not a JSON object; recorded as text");
    return nlohmann::json{{"text", text}};
  }
  return j;
}

double attention_flops(int64_t area, int head_dim, int heads_q, bool backward) {
  const double fwd = 4.0 * static_cast<double>(area) * head_dim * heads_q;
  return backward ? 2.5 * fwd : fwd;
}

namespace {

// Every timed call's time, at 6 significant digits: a GPU event's resolution is about half a
// microsecond and a host clock's run-to-run noise larger, so the 17 digits of a double's shortest
// form only made records (up to kMaxTimedCalls times each) three times larger.
std::vector<double> stored_times(const std::vector<double>& times) {
  std::vector<double> out;
  out.reserve(times.size());
  for (const double t : times) {
    if (!std::isfinite(t) || t == 0.0) {
      out.push_back(t);
      continue;
    }
    const double scale = std::pow(10.0, 5 - static_cast<int>(std::floor(std::log10(std::abs(t)))));
    out.push_back(std::round(t * scale) / scale);
  }
  return out;
}

}  // namespace

nlohmann::json CellResult::to_json() const {
  nlohmann::json j = cell.to_json();
  j["type"] = "cell";
  j["status"] = to_string(status);
  if (!reason.empty()) j["reason"] = reason;
  if (!cell.skip.empty() && status == CellStatus::unsupported) j["reason"] = cell.skip;
  j["area"] = area;
  j["flops"] = flops;
  if (is_timed(status)) {
    j["plan_ms"] = plan_ms;
    j["warmup_calls"] = warmup_calls;
    j["warmup_steady"] = warmup_steady;
    j["time_ms"] = {{"median", median_ms}, {"min", min_ms}, {"max", max_ms}, {"all", stored_times(times_ms)}};
    j["tflops"] = tflops;
    if (gemm_fraction > 0) j["gemm_fraction"] = gemm_fraction;
    j["attn_peak_bytes"] = attn_peak_bytes;
    j["total_peak_bytes"] = total_peak_bytes;
  }
  if (check.ran) j["check"] = check.to_json();
  if (!plan_info.is_null()) j["plan_info"] = plan_info;
  if (!cp_ranks.is_null()) j["cp_ranks"] = cp_ranks;
  if (!cp_config.is_null()) j["cp_config"] = cp_config;
  j["seconds"] = seconds;
  return j;
}

CellResult CellResult::from_json(const nlohmann::json& j) {
  CellResult r;
  r.cell = Cell::from_json(j);
  r.status = parse_cell_status(j.value("status", ""));
  r.reason = j.value("reason", "");
  r.area = j.value("area", int64_t{0});
  r.flops = j.value("flops", 0.0);
  r.tflops = j.value("tflops", 0.0);
  r.gemm_fraction = j.value("gemm_fraction", 0.0);
  r.plan_ms = j.value("plan_ms", 0.0);
  r.warmup_calls = j.value("warmup_calls", 0);
  r.warmup_steady = j.value("warmup_steady", true);
  if (j.contains("time_ms")) {
    r.median_ms = j["time_ms"].value("median", 0.0);
    r.min_ms = j["time_ms"].value("min", 0.0);
    r.max_ms = j["time_ms"].value("max", 0.0);
    r.times_ms = j["time_ms"].value("all", std::vector<double>{});
  }
  r.attn_peak_bytes = j.value("attn_peak_bytes", size_t{0});
  r.total_peak_bytes = j.value("total_peak_bytes", size_t{0});
  if (j.contains("check")) {
    const auto& c = j["check"];
    r.check.ran = c.value("ran", false);
    r.check.passed = c.value("passed", true);
    r.check.tolerance = c.value("tolerance", 0.0);
    r.check.note = c.value("note", "");
    if (c.contains("errors"))
      for (const auto& [name, e] : c["errors"].items())
        r.check.errors[name] = ErrorStats{e.value("rel_l2", 0.0), e.value("max_abs", 0.0),
                                          e.value("non_finite", int64_t{0}), 0};
  }
  if (j.contains("cp_ranks")) r.cp_ranks = j["cp_ranks"];
  if (j.contains("cp_config")) r.cp_config = j["cp_config"];
  if (j.contains("plan_info")) r.plan_info = j["plan_info"];
  r.seconds = j.value("seconds", 0.0);
  return r;
}

Runner::Runner(const Registry& registry, MaskSource& masks, std::map<std::string, Backend*> backends,
               RunnerOptions options)
    : registry_(registry), masks_(masks), backends_(std::move(backends)), options_(options) {}

std::shared_ptr<KernelInstance> Runner::kernel(const std::string& name, const std::string& config) {
  const std::string key = name + "|" + config;
  auto& k = kernels_[key];
  if (!k) {
    const auto* rec = registry_.find(name, "kernel");
    if (rec == nullptr) throw CellFailure(CellStatus::error, "kernel '" + name + "' is not loaded");
    k = registry_.make_kernel(*rec, config);
  }
  return k;
}

const ReferenceOutputs& Runner::reference_for(const Cell& cell, const lca_problem& problem, const lca_mask& mask,
                                              const CellBuffers& buf, const CheckOptions& opt) {
  nlohmann::json key = cell.to_json();
  key.erase("kernel");
  key.erase("label");
  key.erase("options");
  key.erase("pass");
  key["seed"] = options_.seed;
  key["max_reference_flops"] = opt.max_reference_flops;
  const std::string problem_key = key.dump();
  if (problem_key != reference_problem_) {
    references_.clear();
    reference_problem_ = problem_key;
  }
  auto& slot = references_[cell.pass];
  if (!slot) {
    const auto* ref_rec = registry_.reference_kernel(cell.device);
    auto ref = kernel(ref_rec->name(), R"({"accumulate":"f64"})");
    ++reference_runs_;
    slot = std::make_shared<const ReferenceOutputs>(compute_reference(*backends_.at(cell.device), *ref, problem,
                                                                      mask, buf, opt));
  }
  return *slot;
}

CellResult Runner::run_cell(const Cell& cell) {
  const auto t0 = std::chrono::steady_clock::now();
  CellResult r;
  try {
    r = run_cell_unchecked(cell);
  } catch (const CellFailure& f) {
    r.cell = cell;
    r.status = f.status;
    r.reason = f.what();
  } catch (const lca::Error& e) {  // a checked size: out of memory (E) when it does not fit
    r.cell = cell;
    r.status = status_for(e.status());
    r.reason = e.what();
  } catch (const std::exception& e) {
    r.cell = cell;
    r.status = CellStatus::error;
    r.reason = e.what();
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

CellResult Runner::run_cell_unchecked(const Cell& cell) {
  CellResult r;
  r.cell = cell;
  if (!cell.skip.empty()) {
    r.status = CellStatus::unsupported;
    r.reason = cell.skip;
    return r;
  }
  auto be_it = backends_.find(cell.device);
  if (be_it == backends_.end() || be_it->second == nullptr)
    throw CellFailure(CellStatus::unsupported, "no " + cell.device + " device in this run");
  Backend& be = *be_it->second;
  const bool bwd = cell.pass == "bwd";
  const int32_t dtype = lca::dtype_from_name(cell.dtype);
  const size_t es = lca::dtype_size(dtype);
  const int64_t S = cell.seqlen, Hq = cell.heads.heads_q, Hkv = cell.heads.heads_kv, D = cell.head_dim;
  const CellSizes sizes = cell_sizes(S, Hq, Hkv, D, es);

  std::shared_ptr<GeneratedMask> gm;
  try {
    gm = masks_.generate(cell.mask, cell.seqlen, options_.seed);
  } catch (const std::exception& e) {
    throw CellFailure(CellStatus::error, e.what());
  }
  const lca_mask& mask = gm->mask();
  r.area = gm->area();
  r.flops = attention_flops(r.area, cell.head_dim, cell.heads.heads_q, bwd);

  const lca_problem problem{sizeof(lca_problem), dtype, be.type(), be.device_index(), S, S,
                            static_cast<int32_t>(Hq), static_cast<int32_t>(Hkv), static_cast<int32_t>(D),
                            static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)))};
  auto k = kernel(cell.kernel, cell.options.dump());
  const lca_exec exec{sizeof(lca_exec), be.stream(), be.allocator(), options_.threads};

  be.synchronize();
  const size_t before = be.current_bytes();
  be.reset_peak();
  CellMemory mem(be);
  CellBuffers buf;
  const size_t q_bytes = sizes.q_bytes, kv_bytes = sizes.kv_bytes;
  buf.q = mem.alloc(q_bytes, "Q");
  buf.k = mem.alloc(kv_bytes, "K");
  buf.v = mem.alloc(kv_bytes, "V");
  buf.o = mem.alloc(q_bytes, "O");
  buf.lse = static_cast<float*>(mem.alloc(sizes.lse_bytes, "LSE"));
  if (bwd) {
    buf.d_o = mem.alloc(q_bytes, "dO");
    buf.dq = mem.alloc(q_bytes, "dQ");
    buf.dk = mem.alloc(kv_bytes, "dK");
    buf.dv = mem.alloc(kv_bytes, "dV");
  }
  // Inputs depend on the problem and the seed only: every kernel of a problem sees the same.
  auto seed = [&](int which) { return input_seed(options_.seed, S, Hq, Hkv, D, which); };
  be.fill_random(buf.q, sizes.q_elems, dtype, seed(1), 1.0f);
  be.fill_random(buf.k, sizes.kv_elems, dtype, seed(2), 1.0f);
  be.fill_random(buf.v, sizes.kv_elems, dtype, seed(3), 1.0f);
  if (bwd) be.fill_random(buf.d_o, sizes.q_elems, dtype, seed(4), 1.0f);
  be.poison(buf.o, q_bytes);
  be.poison(buf.lse, sizes.lse_bytes);
  be.synchronize();
  const size_t io_bytes = be.current_bytes() - before;

  // plan(): outside the timed region.
  lca_plan* plan = nullptr;
  const auto p0 = std::chrono::steady_clock::now();
  check_status(k->vtable().plan(k->get(), &problem, &mask, &exec, &plan), *k, "plan");
  be.synchronize();
  r.plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p0).count();
  struct PlanGuard {
    KernelInstance& k;
    lca_plan* p;
    const lca_exec* e;
    ~PlanGuard() { k.vtable().destroy_plan(k.get(), p, e); }
  } plan_guard{*k, plan, &exec};

  const lca_fwd_args fa{sizeof(lca_fwd_args), thd(buf.q, dtype, S, Hq, D), thd(buf.k, dtype, S, Hkv, D),
                        thd(buf.v, dtype, S, Hkv, D), thd(buf.o, dtype, S, Hq, D),
                        lca_tensor{sizeof(lca_tensor), LCA_DTYPE_F32, buf.lse, {Hq, S, 1}, {S, 1, 1}}};
  lca_bwd_args ba{};
  if (bwd) {
    if (k->vtable().backward == nullptr) throw CellFailure(CellStatus::unsupported, "no-backward");
    // O and LSE come from the kernel's own forward, as in training.
    check_status(k->vtable().forward(k->get(), plan, &fa, &exec), *k, "forward");
    ba = lca_bwd_args{sizeof(lca_bwd_args), fa.q, fa.k, fa.v, fa.o, thd(buf.d_o, dtype, S, Hq, D), fa.lse,
                      thd(buf.dq, dtype, S, Hq, D), thd(buf.dk, dtype, S, Hkv, D), thd(buf.dv, dtype, S, Hkv, D)};
    be.poison(buf.dq, q_bytes);
    be.poison(buf.dk, kv_bytes);
    be.poison(buf.dv, kv_bytes);
  }
  auto call = [&] {
    const lca_status s = bwd ? k->vtable().backward(k->get(), plan, &ba, &exec)
                             : k->vtable().forward(k->get(), plan, &fa, &exec);
    check_status(s, *k, bwd ? "backward" : "forward");
  };
  r.warmup_calls = warm_up(be, call, options_.warmup, options_.warmup_ms, {}, &r.warmup_steady);
  time_calls(
      [&] {
        be.flush_caches();
        r.times_ms.push_back(be.time_ms(call));
      },
      options_.repeats, options_.repeat_ms);
  be.synchronize();
  r.plan_info = read_plan_info(k->vtable(), k->get(), plan);
  r.total_peak_bytes = be.peak_bytes() - before;
  r.attn_peak_bytes = r.total_peak_bytes > io_bytes ? r.total_peak_bytes - io_bytes : 0;
  set_time_stats(r);
  r.tflops = r.median_ms > 0 ? r.flops / (r.median_ms * 1e-3) / 1e12 : 0;
  if (options_.gemm_tflops > 0 && cell.device == "cuda") r.gemm_fraction = r.tflops / options_.gemm_tflops;
  r.status = CellStatus::ok;

  if (options_.check && options_.check_max_seqlen > 0 && cell.seqlen > options_.check_max_seqlen) {
    r.reason = over_check_length(cell.seqlen, options_.check_max_seqlen);
  } else if (options_.check) {
    const auto* ref_rec = registry_.reference_kernel(cell.device);
    if (ref_rec == nullptr) {
      r.reason = "unchecked: no reference kernel for " + cell.device + " is loaded";
    } else {
      CheckOptions opt;
      opt.backward = bwd;
      opt.max_reference_flops = options_.max_reference_flops;
      try {
        r.check = compare_to_reference(be, problem, buf, reference_for(cell, problem, mask, buf, opt), opt);
      } catch (const std::exception& e) {
        r.status = CellStatus::error;
        r.reason = std::string("check: ") + e.what();
        return r;
      }
      if (!r.check.passed) {
        r.status = CellStatus::fail;
        std::string worst;
        for (const auto& [name, s] : r.check.errors)
          worst += name + " rel_l2=" + std::to_string(s.rel_l2) +
                   (s.non_finite ? " non_finite=" + std::to_string(s.non_finite) : "") + " ";
        r.reason = "outside tolerance " + std::to_string(r.check.tolerance) + ": " + worst;
      }
    }
  }
  return r;
}

}  // namespace lca::core
