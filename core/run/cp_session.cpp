// CP runs; see cp_session.hpp.
#include "core/run/cp_session.hpp"

#include "core/check/compare.hpp"
#include "core/report/results.hpp"
#include "core/run/runner.hpp"

#include <lca/types.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace lca::core {
namespace {

lca_tensor thd(void* data, int32_t dtype, int64_t tokens, int64_t heads, int64_t d) {
  return lca_tensor{sizeof(lca_tensor), dtype, data, {tokens, heads, d}, {heads * d, d, 1}};
}

// Host memory for one tensor, tracked by the backend allocator so peaks are per rank.
struct HostTensor {
  Backend& be;
  void* data = nullptr;
  size_t bytes = 0;
  HostTensor(Backend& b, size_t n) : be(b), bytes(n) {
    if (be.allocator()->alloc(be.allocator()->ctx, n, &data) != LCA_OK)
      throw std::runtime_error("out of memory (" + std::to_string(n) + " bytes)");
    std::memset(data, 0, n);
  }
  ~HostTensor() { be.allocator()->free(be.allocator()->ctx, data); }
};

// Copies rows (tokens) listed by ranges between a global [S, H, D] and a packed local buffer.
void gather_rows(const void* global, void* local, const std::vector<lca_token_range>& ranges, size_t row_bytes) {
  size_t at = 0;
  for (const auto& r : ranges) {
    const size_t n = static_cast<size_t>(r.end - r.begin) * row_bytes;
    std::memcpy(static_cast<char*>(local) + at, static_cast<const char*>(global) + r.begin * row_bytes, n);
    at += n;
  }
}
void scatter_rows(const void* local, void* global, const std::vector<lca_token_range>& ranges, size_t row_bytes) {
  size_t at = 0;
  for (const auto& r : ranges) {
    const size_t n = static_cast<size_t>(r.end - r.begin) * row_bytes;
    std::memcpy(static_cast<char*>(global) + r.begin * row_bytes, static_cast<const char*>(local) + at, n);
    at += n;
  }
}
// LSE is [H, S]: the same, per head.
void scatter_lse(const float* local, float* global, const std::vector<lca_token_range>& ranges, int64_t H,
                 int64_t S, int64_t local_n) {
  for (int64_t h = 0; h < H; ++h) {
    int64_t at = 0;
    for (const auto& r : ranges)
      for (int64_t t = r.begin; t < r.end; ++t) global[h * S + t] = local[h * local_n + at++];
  }
}

double max_over(comm::Communicator& world, double v) {
  double out = v;
  world.all_reduce(&v, &out, 1, LCA_DTYPE_F64, LCA_REDUCE_MAX, nullptr);
  return out;
}

}  // namespace

SessionSummary run_cp_session(const Registry& registry, MaskSource& masks, const MatrixSpec& spec,
                              comm::Communicator& world, Backend& be, const CPOptions& cp,
                              const SessionOptions& options, std::ostream& out) {
  SessionSummary summary;
  const bool root = world.rank() == 0;
  const int W = world.size();
  std::vector<const PluginRecord*> strategies;
  if (cp.strategies.size() == 1 && cp.strategies[0] == "*") {
    strategies = registry.loaded("cp_strategy");
  } else {
    for (const auto& name : cp.strategies) {
      const auto* rec = registry.find(name, "cp_strategy");
      if (!rec) {
        std::string known;
        for (const auto* s : registry.loaded("cp_strategy")) known += (known.empty() ? "" : ", ") + s->name();
        throw std::runtime_error("unknown CP strategy '" + name + "'; loaded: " + (known.empty() ? "(none)" : known));
      }
      strategies.push_back(rec);
    }
  }
  const auto* kernel_rec = registry.find(cp.kernel, "kernel");
  if (!kernel_rec) throw std::runtime_error("--cp-kernel '" + cp.kernel + "' is not a loaded kernel (see `lcahost caps`)");
  if (kernel_rec->manifest.kernel.device != "cpu" && be.type() == LCA_DEVICE_CPU)
    throw std::runtime_error("--cp-kernel " + cp.kernel + " runs on " + kernel_rec->manifest.kernel.device +
                             "; CP runs on the CPU backend need a cpu kernel such as cpu_reference");
  auto kernel = registry.make_kernel(*kernel_rec);
  const auto* ref_rec = registry.reference_kernel("cpu");
  std::shared_ptr<KernelInstance> reference;
  if (root && ref_rec && spec.check) reference = registry.make_kernel(*ref_rec, R"({"accumulate":"f64"})");

  std::vector<MaskSpec> mask_specs;
  if (std::find(spec.masks.begin(), spec.masks.end(), "*") != spec.masks.end()) {
    for (const auto& e : masks.patterns()) mask_specs.push_back({e.info.name, nlohmann::json::object()});
  } else {
    for (const auto& m : spec.masks) mask_specs.push_back(MaskSpec::parse(m));
  }

  std::unique_ptr<ResultsWriter> writer;
  if (root && !options.out.empty()) {
    writer = std::make_unique<ResultsWriter>(options.out, options.resume);
    nlohmann::json run = options.environment;
    run["cp"] = {{"world_size", W}, {"local_size", world.local_size()}, {"backend", world.backend()},
                 {"kernel", cp.kernel}, {"options", nlohmann::json::parse(cp.options_json)}};
    run["matrix"] = {{"name", spec.name}, {"source", spec.source.string()}, {"seed", spec.seed}};
    writer->write_run(run);
  }
  TablePrinter table(out);
  if (root) {
    out << "# lca cp matrix '" << spec.name << "': world size " << W << " (" << world.backend()
        << ", " << world.local_size() << " per node), local kernel " << cp.kernel << "\n";
    table.header();
  }

  size_t total = 0;
  const auto& lengths = spec.seqlens_for(be.type() == LCA_DEVICE_CPU ? "cpu" : "cuda");
  total = strategies.size() * mask_specs.size() * lengths.size() * spec.heads.size() * spec.head_dims.size() *
          spec.dtypes.size() * spec.passes.size();
  size_t index = 0;
  const auto t_start = std::chrono::steady_clock::now();
  for (const auto* srec : strategies)
    for (const auto& mspec : mask_specs)
      for (int64_t per_rank : lengths)
        for (const auto& heads : spec.heads)
          for (int D : spec.head_dims)
            for (const auto& dtype_name : spec.dtypes)
              for (const auto& pass : spec.passes) {
                ++index;
                const int64_t S = per_rank * W;  // lengths are per rank in CP specs
                const bool bwd = pass == "bwd";
                CellResult r;
                r.cell = Cell{srec->name() + "/" + cp.kernel, be.type() == LCA_DEVICE_CPU ? "cpu" : "cuda", mspec,
                              S, heads, D, dtype_name, pass, ""};
                const auto t0 = std::chrono::steady_clock::now();
                std::string error;
                try {
                  const int32_t dtype = lca::dtype_from_name(dtype_name);
                  const size_t es = lca::dtype_size(dtype);
                  const int64_t Hq = heads.heads_q, Hkv = heads.heads_kv;
                  auto gm = masks.generate(mspec, S, spec.seed);
                  r.area = gm->area();
                  r.flops = attention_flops(r.area, D, static_cast<int>(Hq), bwd);
                  const lca_problem problem{sizeof(lca_problem), dtype, be.type(), be.device_index(), S, S,
                                            static_cast<int32_t>(Hq), static_cast<int32_t>(Hkv), D,
                                            static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)))};
                  // Global inputs: the same values the single-device runner draws for this problem.
                  std::vector<unsigned char> gq(S * Hq * D * es), gk(S * Hkv * D * es), gv(gk.size()), gdo(gq.size());
                  auto mixed = [&](int which) {
                    return input_seed(spec.seed, S, static_cast<int>(Hq), static_cast<int>(Hkv), D, which);
                  };
                  be.fill_random(gq.data(), S * Hq * D, dtype, mixed(1), 1.0f);
                  be.fill_random(gk.data(), S * Hkv * D, dtype, mixed(2), 1.0f);
                  be.fill_random(gv.data(), S * Hkv * D, dtype, mixed(3), 1.0f);
                  if (bwd) be.fill_random(gdo.data(), S * Hq * D, dtype, mixed(4), 1.0f);

                  auto strategy = registry.make_cp_strategy(*srec);
                  const lca_exec exec{sizeof(lca_exec), be.stream(), be.allocator(), options.threads};
                  const lca_cp_config config{sizeof(lca_cp_config), comm::as_comm_ref(world), kernel->ref(), &problem,
                                             &gm->mask(), cp.options_json.c_str()};
                  lca_cp_plan* plan = nullptr;
                  const lca_status ps = strategy->vtable().plan(strategy->get(), &config, &exec, &plan);
                  const double any_failed = max_over(world, ps == LCA_OK ? 0.0 : 1.0);
                  if (any_failed > 0) {
                    const std::string why = ps == LCA_OK ? "another rank refused the plan" : strategy->vtable().last_error();
                    if (plan) strategy->vtable().destroy_plan(strategy->get(), plan, &exec);
                    throw std::runtime_error((ps == LCA_ERR_UNSUPPORTED ? "X|" : "ERROR|") + why);
                  }
                  struct PlanGuard {
                    CPStrategyInstance& s;
                    lca_cp_plan* p;
                    const lca_exec* e;
                    ~PlanGuard() { s.vtable().destroy_plan(s.get(), p, e); }
                  } guard{*strategy, plan, &exec};

                  int64_t count = 0;
                  if (strategy->vtable().dispatch(strategy->get(), plan, world.rank(), nullptr, 0, &count) != LCA_OK)
                    throw std::runtime_error(std::string("ERROR|dispatch: ") + strategy->vtable().last_error());
                  std::vector<lca_token_range> ranges(static_cast<size_t>(count));
                  strategy->vtable().dispatch(strategy->get(), plan, world.rank(), ranges.data(), count, &count);
                  int64_t n = 0;
                  for (const auto& rg : ranges) n += rg.end - rg.begin;

                  be.reset_peak();
                  const size_t before = be.current_bytes();
                  HostTensor lq(be, n * Hq * D * es), lk(be, n * Hkv * D * es), lv(be, n * Hkv * D * es),
                      lo(be, n * Hq * D * es), llse(be, n * Hq * 4);
                  gather_rows(gq.data(), lq.data, ranges, Hq * D * es);
                  gather_rows(gk.data(), lk.data, ranges, Hkv * D * es);
                  gather_rows(gv.data(), lv.data, ranges, Hkv * D * es);
                  const lca_fwd_args fa{sizeof(lca_fwd_args), thd(lq.data, dtype, n, Hq, D), thd(lk.data, dtype, n, Hkv, D),
                                        thd(lv.data, dtype, n, Hkv, D), thd(lo.data, dtype, n, Hq, D),
                                        lca_tensor{sizeof(lca_tensor), LCA_DTYPE_F32, llse.data, {Hq, n, 1}, {n, 1, 1}}};
                  std::unique_ptr<HostTensor> ldo, ldq, ldk, ldv;
                  lca_bwd_args ba{};
                  auto run_fwd = [&] {
                    if (strategy->vtable().forward(strategy->get(), plan, &fa, &exec) != LCA_OK)
                      throw std::runtime_error(std::string("ERROR|forward: ") + strategy->vtable().last_error());
                  };
                  if (bwd) {
                    ldo = std::make_unique<HostTensor>(be, n * Hq * D * es);
                    ldq = std::make_unique<HostTensor>(be, n * Hq * D * es);
                    ldk = std::make_unique<HostTensor>(be, n * Hkv * D * es);
                    ldv = std::make_unique<HostTensor>(be, n * Hkv * D * es);
                    gather_rows(gdo.data(), ldo->data, ranges, Hq * D * es);
                    run_fwd();
                    ba = lca_bwd_args{sizeof(lca_bwd_args), fa.q, fa.k, fa.v, fa.o, thd(ldo->data, dtype, n, Hq, D), fa.lse,
                                      thd(ldq->data, dtype, n, Hq, D), thd(ldk->data, dtype, n, Hkv, D),
                                      thd(ldv->data, dtype, n, Hkv, D)};
                  }
                  auto call = [&] {
                    if (!bwd) return run_fwd();
                    if (strategy->vtable().backward(strategy->get(), plan, &ba, &exec) != LCA_OK)
                      throw std::runtime_error(std::string("ERROR|backward: ") + strategy->vtable().last_error());
                  };
                  for (int i = 0; i < spec.warmup; ++i) call();
                  for (int i = 0; i < spec.repeats; ++i) {
                    world.barrier(be.stream());
                    const double ms = be.time_ms(call);
                    r.times_ms.push_back(max_over(world, ms));  // a step ends when the slowest rank ends
                  }
                  const double peak = max_over(world, static_cast<double>(be.peak_bytes() - before));
                  r.total_peak_bytes = static_cast<size_t>(peak);
                  std::vector<double> sorted = r.times_ms;
                  std::sort(sorted.begin(), sorted.end());
                  r.median_ms = sorted[sorted.size() / 2];
                  r.min_ms = sorted.front();
                  r.max_ms = sorted.back();
                  // Per GPU (per rank): total FLOPs / world / the slowest rank's time.
                  r.tflops = r.flops / W / (r.median_ms * 1e-3) / 1e12;
                  r.status = "ok";

                  if (spec.check) {
                    // Everyone scatters its rows into zeroed global buffers; a sum over ranks
                    // then gives every row exactly once, and rank 0 checks the whole thing.
                    std::vector<unsigned char> go(gq.size(), 0);
                    std::vector<float> glse(static_cast<size_t>(Hq * S), 0.0f);
                    scatter_rows(lo.data, go.data(), ranges, Hq * D * es);
                    scatter_lse(static_cast<float*>(llse.data), glse.data(), ranges, Hq, S, n);
                    std::vector<unsigned char> sum_o(go.size());
                    std::vector<float> sum_lse(glse.size());
                    world.all_reduce(go.data(), sum_o.data(), S * Hq * D, static_cast<lca_dtype>(dtype), LCA_REDUCE_SUM, nullptr);
                    world.all_reduce(glse.data(), sum_lse.data(), Hq * S, LCA_DTYPE_F32, LCA_REDUCE_SUM, nullptr);
                    std::vector<unsigned char> sdq, sdk, sdv;
                    if (bwd) {
                      auto gather_sum = [&](const HostTensor& local, int64_t heads, std::vector<unsigned char>& sum) {
                        std::vector<unsigned char> g(static_cast<size_t>(S * heads * D) * es, 0);
                        scatter_rows(local.data, g.data(), ranges, heads * D * es);
                        sum.resize(g.size());
                        world.all_reduce(g.data(), sum.data(), S * heads * D, static_cast<lca_dtype>(dtype), LCA_REDUCE_SUM, nullptr);
                      };
                      gather_sum(*ldq, Hq, sdq);
                      gather_sum(*ldk, Hkv, sdk);
                      gather_sum(*ldv, Hkv, sdv);
                    }
                    if (root && reference) {
                      CellBuffers buf{gq.data(), gk.data(), gv.data(), sum_o.data(), sum_lse.data(),
                                      bwd ? gdo.data() : nullptr, bwd ? sdq.data() : nullptr,
                                      bwd ? sdk.data() : nullptr, bwd ? sdv.data() : nullptr};
                      CheckOptions copt;
                      copt.backward = bwd;
                      r.check = check_cell(be, *reference, problem, gm->mask(), buf, copt);
                      if (!r.check.passed) {
                        r.status = "FAIL";
                        r.reason = "outside tolerance " + std::to_string(r.check.tolerance);
                      }
                    }
                  }
                } catch (const std::exception& e) {
                  error = e.what();
                }
                if (!error.empty()) {
                  const auto bar = error.find('|');
                  r.status = bar == std::string::npos ? "ERROR" : error.substr(0, bar);
                  r.reason = bar == std::string::npos ? error : error.substr(bar + 1);
                }
                r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                if (root) {
                  if (writer) writer->write_cell(r);
                  ++summary.counts[r.status];
                  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
                  table.row(index, total, r, elapsed, elapsed / index * (total - index));
                }
              }
  if (root) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    table.summary(summary.counts, elapsed);
    if (writer) writer->write_summary({{"counts", summary.counts}, {"elapsed_s", elapsed}});
  }
  summary.cells = total;
  return summary;
}

}  // namespace lca::core
