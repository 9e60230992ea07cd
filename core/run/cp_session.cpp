// CP runs; see cp_session.hpp.
#include "core/run/cp_session.hpp"

#include "core/check/compare.hpp"
#include "core/report/results.hpp"
#include "core/run/cp_timing.hpp"
#include "core/run/runner.hpp"
#include "options.hpp"  // plugins/cp/common: the configuration each strategy runs

#include <lca/checked.hpp>
#include <lca/error.hpp>
#include <lca/types.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

namespace lca::core {
namespace {

// What the strategy `name` runs for these options, world and heads, every default made explicit;
// null where the host does not know the strategy (a plugin of another project) or it refuses the
// heads (the cell then says why).
nlohmann::json config_that_runs(const std::string& name, const nlohmann::json& options, int W, int local_size,
                                const HeadConfig& heads) {
  lca_problem p{};
  p.heads_q = heads.heads_q, p.heads_kv = heads.heads_kv;
  try {
    return cp::explicit_options(name, cp::choose_strategy(name, options, W, local_size, p));
  } catch (const std::exception&) {
    return nullptr;
  }
}

lca_tensor thd(void* data, int32_t dtype, int64_t tokens, int64_t heads, int64_t d) {
  return lca_tensor{sizeof(lca_tensor), dtype, data, {tokens, heads, d}, {heads * d, d, 1}};
}

// One tensor of a cell from the backend allocator (host or device memory, so peaks are per
// rank); freed with the object.
class Tensor {
 public:
  Tensor(Backend& be, size_t bytes, const char* what) : be_(be), bytes_(bytes) {
    if (bytes == 0) return;
    if (be_.allocator()->alloc(be_.allocator()->ctx, bytes, &data_) != LCA_OK || data_ == nullptr) {
      data_ = nullptr;
      throw CellFailure(CellStatus::out_of_memory, std::string("out of memory allocating ") + what + " (" +
                                                       std::to_string(bytes) + " bytes on " + be_.name() + ")");
    }
  }
  ~Tensor() {
    if (data_ != nullptr) be_.allocator()->free(be_.allocator()->ctx, data_);
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  std::vector<unsigned char> to_host() const {
    std::vector<unsigned char> out(bytes_);
    if (bytes_) be_.copy_to_host(out.data(), data_, bytes_);
    return out;
  }

 private:
  Backend& be_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Draws the rows `ranges` of a global [S, row_elems] tensor into `local`, packed in range
// order: element for element the values the single-device runner draws for those rows.
void fill_rows(Backend& be, void* local, const std::vector<lca_token_range>& ranges, int64_t row_elems, int32_t dtype,
               uint64_t seed) {
  int64_t at = 0;
  for (const auto& r : ranges) {
    const int64_t count = (r.end - r.begin) * row_elems;
    be.fill_random(static_cast<char*>(local) + at * static_cast<int64_t>(dtype_size(dtype)), count, dtype, seed, 1.0f,
                   static_cast<uint64_t>(r.begin * row_elems));
    at += count;
  }
}

int64_t rows_of(const std::vector<lca_token_range>& ranges) {
  int64_t n = 0;
  for (const auto& r : ranges) n += r.end - r.begin;
  return n;
}

double reduce(comm::Communicator& control, double v, lca_reduce_op op) {
  double out = v;
  control.all_reduce(&v, &out, 1, LCA_DTYPE_F64, op, nullptr);
  return out;
}

nlohmann::json min_max(comm::Communicator& control, double v) {
  return {{"min", -reduce(control, -v, LCA_REDUCE_MAX)}, {"max", reduce(control, v, LCA_REDUCE_MAX)}};
}

// Rank 0 receives every rank's packed rows of a [S, row_elems] tensor (host bytes) and puts them
// in place in `global` (rank 0 only). One message a rank keeps every count within MPI's limits
// for any shard that fits one device.
void gather_rows(comm::Communicator& control, const std::vector<unsigned char>& local,
                 const std::vector<std::vector<lca_token_range>>& ranges, int64_t row_elems, int32_t dtype,
                 std::vector<unsigned char>& global) {
  const int me = control.rank();
  const auto dt = static_cast<lca_dtype>(dtype);
  const size_t row_bytes = static_cast<size_t>(row_elems) * dtype_size(dtype);
  if (me != 0) {
    control.send(local.data(), rows_of(ranges[me]) * row_elems, dt, 0, nullptr);
    return;
  }
  std::vector<unsigned char> in;
  for (int p = 0; p < control.size(); ++p) {
    const int64_t n = rows_of(ranges[p]);
    const unsigned char* src = local.data();
    if (p != 0) {
      in.resize(static_cast<size_t>(n) * row_bytes);
      control.recv(in.data(), n * row_elems, dt, p, nullptr);
      src = in.data();
    }
    size_t at = 0;
    for (const auto& r : ranges[p]) {
      const size_t bytes = static_cast<size_t>(r.end - r.begin) * row_bytes;
      std::memcpy(global.data() + static_cast<size_t>(r.begin) * row_bytes, src + at, bytes);
      at += bytes;
    }
  }
}

// The same for LSE: local [H, n] fp32 -> global [H, S].
void gather_lse(comm::Communicator& control, const std::vector<unsigned char>& local,
                const std::vector<std::vector<lca_token_range>>& ranges, int64_t H, int64_t S, std::vector<float>& global) {
  const int me = control.rank();
  if (me != 0) {
    control.send(local.data(), H * rows_of(ranges[me]), LCA_DTYPE_F32, 0, nullptr);
    return;
  }
  std::vector<float> in;
  for (int p = 0; p < control.size(); ++p) {
    const int64_t n = rows_of(ranges[p]);
    in.resize(static_cast<size_t>(H * n));
    if (p == 0) std::memcpy(in.data(), local.data(), in.size() * sizeof(float));
    else control.recv(in.data(), H * n, LCA_DTYPE_F32, p, nullptr);
    for (int64_t h = 0; h < H; ++h) {
      int64_t at = 0;
      for (const auto& r : ranges[p])
        for (int64_t t = r.begin; t < r.end; ++t) global[h * S + t] = in[h * n + at++];
    }
  }
}

std::string device_name(const Backend& be) { return be.type() == LCA_DEVICE_CPU ? "cpu" : "cuda"; }

// "#   ranks: ..." under a cell's row: the spread of the per-rank figures.
void print_ranks(std::ostream& out, const nlohmann::json& j) {
  auto range = [&](const char* key, int precision) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(precision) << j[key]["min"].get<double>() << ".."
      << j[key]["max"].get<double>();
    return s.str();
  };
  out << "    ranks: time " << range("time_ms", 3) << " ms, in comm " << range("comm_ms", 3) << " ms, in kernel "
      << range("compute_ms", 3) << " ms, peak "
      << format_bytes(static_cast<size_t>(j["peak_bytes"]["min"].get<double>())) << ".."
      << format_bytes(static_cast<size_t>(j["peak_bytes"]["max"].get<double>())) << "\n";
}

}  // namespace

SessionSummary run_cp_session(const Registry& registry, MaskSource& masks, const MatrixSpec& spec,
                              comm::Communicator& world, comm::Communicator& control, Backend& be, const CPOptions& cp,
                              const SessionOptions& options, std::ostream& out) {
  SessionSummary summary;
  const bool root = control.rank() == 0;
  const int W = world.size();
  // Every rank parses the same text, so every rank refuses it alike, before the first collective.
  nlohmann::json cp_options;
  try {
    cp_options = nlohmann::json::parse(cp.options_json);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error("--cp-options '" + cp.options_json + "' is not valid JSON (" + e.what() +
                             "); give an object, e.g. '{\"ulysses_degree\":2}'");
  }
  if (!cp_options.is_object())
    throw std::runtime_error("--cp-options '" + cp.options_json + "' is not a JSON object; give one, e.g. "
                             "'{\"ulysses_degree\":2}'");
  const std::string dev = device_name(be);
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
  if (kernel_rec->manifest.kernel.device != dev)
    throw std::runtime_error("--cp-kernel " + cp.kernel + " runs on " + kernel_rec->manifest.kernel.device +
                             ", this CP run is on " + dev + "; pick a " + dev + " kernel (cpu_reference on cpu, "
                             "flex_flash on cuda)");
  // The local kernel with the options given for it; its cells are labelled with them
  // (balanced/flex_flash[fwd_split=auto]), so that runs with and without them stay apart.
  auto kernel = registry.make_kernel(*kernel_rec, cp.kernel_options.dump());
  const std::string kernel_label = default_kernel_label(cp.kernel, cp.kernel_options);
  // The host lends the strategies a timed view of the kernel and of the world.
  IntervalClock kernel_clock, comm_clock;
  TimedKernel timed_kernel(kernel->ref(), kernel_clock);
  auto timed_world = make_timed_communicator(world, comm_clock);
  const auto* ref_rec = registry.reference_kernel(dev);
  std::shared_ptr<KernelInstance> reference;
  if (root && ref_rec && spec.check) reference = registry.make_kernel(*ref_rec, R"({"accumulate":"f64"})");

  std::vector<MaskSpec> mask_specs;
  if (std::find(spec.masks.begin(), spec.masks.end(), "*") != spec.masks.end()) {
    for (const auto& e : masks.patterns()) mask_specs.push_back({e.info.name, nlohmann::json::object()});
  } else {
    for (const auto& m : spec.masks) mask_specs.push_back(MaskSpec::parse(m));
  }

  // Rank 0 alone writes; every rank learns whether it could, so that a refused results file
  // (in use, not a results file, an input, full) ends every rank instead of leaving the others
  // waiting in a collective.
  auto agree_on = [&](const std::string& error, const char* what) {
    if (reduce(control, error.empty() ? 0.0 : 1.0, LCA_REDUCE_MAX) > 0)
      throw std::runtime_error(root ? error : std::string("rank 0 ") + what + " (its message says why)");
  };
  std::unique_ptr<ResultsWriter> writer;
  std::set<std::string> done;
  std::string open_error;
  if (root && !options.out.empty()) {
    try {
      ResultsFileOptions file_options;
      file_options.append = options.resume;
      file_options.force = options.force;
      if (!spec.source.empty()) file_options.inputs.push_back({spec.source, "the matrix spec"});
      writer = std::make_unique<ResultsWriter>(options.out, file_options);
      if (options.resume) done = completed_cell_keys(options.out, options.retry_errors);
      nlohmann::json run = options.environment;
      run["cp"] = {{"world_size", W}, {"local_size", world.local_size()}, {"backend", world.backend()},
                   {"device", dev}, {"kernel", cp.kernel}, {"options", cp_options}};
      if (!cp.kernel_options.empty()) run["cp"]["kernel_options"] = cp.kernel_options;
      if (!cp.ranks.empty()) run["cp"]["ranks"] = cp.ranks;
      run["matrix"] = matrix_record(spec);
      run["resumed"] = done.size();
      writer->write_run(run);
    } catch (const std::exception& e) {
      open_error = e.what();
    }
  }
  agree_on(open_error, "could not write the results file");
  TablePrinter table(out);
  if (root) {
    out << "# lca cp matrix '" << spec.name << "': world size " << W << " on " << dev << " (" << world.backend()
        << ", " << world.local_size() << " per node), local kernel " << kernel_label << "\n";
    table.header();
  }

  const auto& lengths = spec.seqlens_for(dev);
  const size_t total = strategies.size() * mask_specs.size() * lengths.size() * spec.heads.size() *
                       spec.head_dims.size() * spec.dtypes.size() * spec.passes.size();
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
                // Lengths are per rank in CP specs; a product past 64 bits is refused in the cell.
                const int64_t S = lca::product_of(per_rank, W).value_or(std::numeric_limits<int64_t>::max());
                const bool bwd = pass == "bwd";
                const bool checked = checks_length(spec, S);  // the same on every rank
                CellResult r;
                r.cell = Cell{srec->name() + "/" + kernel_label, dev, mspec, S, heads, D, dtype_name, pass, ""};
                r.cp_config = config_that_runs(srec->name(), cp_options, W, world.local_size(), heads);
                // Only rank 0 read the resumed file: it tells the others which cells are done.
                if (options.resume &&
                    reduce(control, root && done.count(r.cell.key()) ? 1.0 : 0.0, LCA_REDUCE_MAX) > 0) {
                  ++summary.resumed;
                  continue;
                }
                const auto t0 = std::chrono::steady_clock::now();
                std::optional<CellFailure> failure;
                try {
                  const auto& devices = srec->manifest.cp.devices;
                  if (std::find(devices.begin(), devices.end(), dev) == devices.end())
                    throw CellFailure(CellStatus::unsupported,
                                      srec->name() + " does not run on " + dev + " (its manifest's devices)");
                  const int32_t dtype = lca::dtype_from_name(dtype_name);
                  if (dtype < 0) throw CellFailure(CellStatus::error, "unknown dtype '" + dtype_name + "'");
                  const size_t es = lca::dtype_size(dtype);
                  const int64_t Hq = heads.heads_q, Hkv = heads.heads_kv;
                  // Every rank computes the same sizes and refuses alike, before any collective.
                  if (S > lca::max_seqlen)
                    throw std::runtime_error("E|seqlen = " + std::to_string(per_rank) + " per rank x " + std::to_string(W) +
                                             " ranks is out of range; allowed: " + lca::seqlen_allowed());
                  int64_t q_elems = 0, kv_elems = 0;
                  size_t qb = 0, kb = 0;
                  try {
                    q_elems = lca::checked_product("Q elements (seqlen x heads_q x head_dim)", S, Hq, D);
                    kv_elems = lca::checked_product("K elements (seqlen x heads_kv x head_dim)", S, Hkv, D);
                    qb = lca::checked_bytes("Q bytes (seqlen x heads_q x head_dim x dtype size)", q_elems, es);
                    kb = lca::checked_bytes("K bytes (seqlen x heads_kv x head_dim x dtype size)", kv_elems, es);
                  } catch (const lca::Error& e) {
                    throw std::runtime_error(std::string("E|") + e.what());
                  }
                  auto gm = masks.generate(mspec, S, spec.seed);
                  r.area = gm->area();
                  cp::resolve_chunks(r.cp_config, gm->mask(), W);  // balanced's "auto": the count that runs
                  r.flops = attention_flops(r.area, D, static_cast<int>(Hq), bwd);
                  const lca_problem problem{sizeof(lca_problem), dtype, be.type(), be.device_index(), S, S,
                                            static_cast<int32_t>(Hq), static_cast<int32_t>(Hkv), D,
                                            static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)))};
                  // Inputs depend on the problem and the seed only: the single-device runner's.
                  auto seed = [&](int which) {
                    return input_seed(spec.seed, S, static_cast<int>(Hq), static_cast<int>(Hkv), D, which);
                  };

                  auto strategy = registry.make_cp_strategy(*srec);
                  const lca_exec exec{sizeof(lca_exec), be.stream(), be.allocator(), options.threads};
                  const lca_cp_config config{sizeof(lca_cp_config), comm::as_comm_ref(*timed_world), timed_kernel.ref(),
                                             &problem, &gm->mask(), cp.options_json.c_str()};
                  lca_cp_plan* plan = nullptr;
                  (void)timed_kernel.take_plans();  // this cell's local plans only
                  const lca_status ps = strategy->vtable().plan(strategy->get(), &config, &exec, &plan);
                  if (reduce(control, ps == LCA_OK ? 0.0 : 1.0, LCA_REDUCE_MAX) > 0) {
                    const std::string why = ps == LCA_OK ? "another rank refused the plan" : strategy->vtable().last_error();
                    if (plan) strategy->vtable().destroy_plan(strategy->get(), plan, &exec);
                    throw CellFailure(ps == LCA_ERR_UNSUPPORTED     ? CellStatus::unsupported
                                      : ps == LCA_ERR_OUT_OF_MEMORY ? CellStatus::out_of_memory
                                                                    : CellStatus::error,
                                      why);
                  }
                  struct PlanGuard {
                    CPStrategyInstance& s;
                    lca_cp_plan* p;
                    const lca_exec* e;
                    ~PlanGuard() { s.vtable().destroy_plan(s.get(), p, e); }
                  } guard{*strategy, plan, &exec};
                  // The local kernel's plans (TimedKernel: its plan_info folded): how many and how
                  // many split a pass, summed over ranks; the kernels rank 0's plans chose.
                  {
                    const nlohmann::json mine = timed_kernel.take_plans();
                    nlohmann::json local = {
                        {"plans", static_cast<int64_t>(reduce(control, mine.value("plans", 0), LCA_REDUCE_SUM))}};
                    for (const char* pass : {"forward", "backward"}) {
                      const auto split = mine.find("split");
                      const double n = split != mine.end() ? split->value(pass, 0) : 0;
                      if (const double all = reduce(control, n, LCA_REDUCE_SUM); all > 0)
                        local["split"][pass] = static_cast<int64_t>(all);
                    }
                    if (mine.contains("kernels")) local["kernels_rank0"] = mine["kernels"];
                    r.plan_info = {{"local_plans", local}};
                  }

                  // Every rank's tokens (rank 0 places the gathered rows with them).
                  std::vector<std::vector<lca_token_range>> ranges(static_cast<size_t>(W));
                  for (int p = 0; p < W; ++p) {
                    int64_t count = 0;
                    if (strategy->vtable().dispatch(strategy->get(), plan, p, nullptr, 0, &count) != LCA_OK)
                      throw CellFailure(CellStatus::error, std::string("dispatch: ") + strategy->vtable().last_error());
                    ranges[p].resize(static_cast<size_t>(count));
                    strategy->vtable().dispatch(strategy->get(), plan, p, ranges[p].data(), count, &count);
                  }
                  const auto& mine = ranges[control.rank()];
                  const int64_t n = rows_of(mine);

                  std::vector<unsigned char> host_o, host_lse, host_dq, host_dk, host_dv;
                  {
                    be.synchronize();
                    be.reset_peak();
                    const size_t before = be.current_bytes();
                    std::unique_ptr<Tensor> lq, lk, lv, lo, llse, ldo, ldq, ldk, ldv;
                    std::optional<CellFailure> alloc_failure;
                    try {
                      lq = std::make_unique<Tensor>(be, n * Hq * D * es, "Q");
                      lk = std::make_unique<Tensor>(be, n * Hkv * D * es, "K");
                      lv = std::make_unique<Tensor>(be, n * Hkv * D * es, "V");
                      lo = std::make_unique<Tensor>(be, n * Hq * D * es, "O");
                      llse = std::make_unique<Tensor>(be, n * Hq * 4, "LSE");
                      if (bwd) {
                        ldo = std::make_unique<Tensor>(be, n * Hq * D * es, "dO");
                        ldq = std::make_unique<Tensor>(be, n * Hq * D * es, "dQ");
                        ldk = std::make_unique<Tensor>(be, n * Hkv * D * es, "dK");
                        ldv = std::make_unique<Tensor>(be, n * Hkv * D * es, "dV");
                      }
                    } catch (const CellFailure& f) {
                      alloc_failure = f;
                    } catch (const std::exception& e) {
                      alloc_failure = CellFailure(CellStatus::error, e.what());
                    }
                    // A rank that cannot hold its shard must not leave the others in a collective.
                    if (reduce(control, alloc_failure ? 1.0 : 0.0, LCA_REDUCE_MAX) > 0)
                      throw alloc_failure ? *alloc_failure
                                          : CellFailure(CellStatus::out_of_memory, "another rank ran out of memory");
                    fill_rows(be, lq->data(), mine, Hq * D, dtype, seed(1));
                    fill_rows(be, lk->data(), mine, Hkv * D, dtype, seed(2));
                    fill_rows(be, lv->data(), mine, Hkv * D, dtype, seed(3));
                    be.poison(lo->data(), lo->bytes());
                    be.poison(llse->data(), llse->bytes());
                    const lca_fwd_args fa{sizeof(lca_fwd_args), thd(lq->data(), dtype, n, Hq, D),
                                          thd(lk->data(), dtype, n, Hkv, D), thd(lv->data(), dtype, n, Hkv, D),
                                          thd(lo->data(), dtype, n, Hq, D),
                                          lca_tensor{sizeof(lca_tensor), LCA_DTYPE_F32, llse->data(), {Hq, n, 1}, {n, 1, 1}}};
                    lca_bwd_args ba{};
                    auto run_fwd = [&] {
                      if (strategy->vtable().forward(strategy->get(), plan, &fa, &exec) != LCA_OK)
                        throw CellFailure(CellStatus::error, std::string("forward: ") + strategy->vtable().last_error());
                    };
                    if (bwd) {
                      fill_rows(be, ldo->data(), mine, Hq * D, dtype, seed(4));
                      run_fwd();  // O and LSE from the strategy's own forward, as in training
                      ba = lca_bwd_args{sizeof(lca_bwd_args), fa.q, fa.k, fa.v, fa.o, thd(ldo->data(), dtype, n, Hq, D), fa.lse,
                                        thd(ldq->data(), dtype, n, Hq, D), thd(ldk->data(), dtype, n, Hkv, D),
                                        thd(ldv->data(), dtype, n, Hkv, D)};
                      be.poison(ldq->data(), ldq->bytes());
                      be.poison(ldk->data(), ldk->bytes());
                      be.poison(ldv->data(), ldv->bytes());
                    }
                    auto call = [&] {
                      if (!bwd) return run_fwd();
                      if (strategy->vtable().backward(strategy->get(), plan, &ba, &exec) != LCA_OK)
                        throw CellFailure(CellStatus::error, std::string("backward: ") + strategy->vtable().last_error());
                    };
                    // Warm-up, on while any rank has less than spec.warmup_ms behind it: the
                    // strategies' collectives are inside the calls, so all ranks make each one.
                    r.warmup_calls = warm_up(
                        be, call, spec.warmup, spec.warmup_ms,
                        [&](bool more) { return reduce(control, more ? 1.0 : 0.0, LCA_REDUCE_MAX) != 0.0; },
                        &r.warmup_steady);
                    comm_clock.take_ms();
                    kernel_clock.take_ms();
                    std::vector<double> my_ms, my_comm, my_kernel;
                    // Timed calls, past spec.repeats while any rank has less than spec.repeat_ms
                    // behind it (the ranks agree, as in the warm-up).
                    time_calls(
                        [&] {
                          be.flush_caches();
                          world.barrier(be.stream());
                          const double ms = be.time_ms(call);
                          be.synchronize();
                          my_ms.push_back(ms);
                          my_comm.push_back(comm_clock.take_ms());
                          my_kernel.push_back(kernel_clock.take_ms());
                          r.times_ms.push_back(reduce(control, ms, LCA_REDUCE_MAX));  // a step ends with the slowest rank
                        },
                        spec.repeats, spec.repeat_ms,
                        [&](bool more) { return reduce(control, more ? 1.0 : 0.0, LCA_REDUCE_MAX) != 0.0; });
                    const double my_peak = static_cast<double>(be.peak_bytes() - before);
                    r.total_peak_bytes = static_cast<size_t>(reduce(control, my_peak, LCA_REDUCE_MAX));
                    set_time_stats(r);
                    // Per GPU (per rank): total FLOPs / world / the slowest rank's time.
                    r.tflops = r.flops / W / (r.median_ms * 1e-3) / 1e12;
                    const double my_median = median_of(my_ms);
                    r.cp_ranks = {{"time_ms", min_max(control, my_median)},
                                  {"comm_ms", min_max(control, median_of(my_comm))},
                                  {"compute_ms", min_max(control, median_of(my_kernel))},
                                  {"peak_bytes", min_max(control, my_peak)},
                                  {"tflops", min_max(control, my_median > 0 ? r.flops / W / (my_median * 1e-3) / 1e12 : 0.0)}};
                    r.status = CellStatus::ok;
                    if (checked) {
                      host_o = lo->to_host();
                      host_lse = llse->to_host();
                      if (bwd) host_dq = ldq->to_host(), host_dk = ldk->to_host(), host_dv = ldv->to_host();
                    }
                  }  // the shards are freed before rank 0 builds the global tensors of the check

                  if (spec.check && !checked) r.reason = over_check_length(S, spec.check_max_seqlen);
                  if (checked) {
                    std::vector<unsigned char> go, gdq, gdk, gdv;
                    std::vector<float> glse;
                    if (root) {
                      go.assign(qb, 0);
                      glse.assign(static_cast<size_t>(Hq * S), 0.0f);
                      if (bwd) {
                        gdq.assign(go.size(), 0);
                        gdk.assign(kb, 0);
                        gdv.assign(gdk.size(), 0);
                      }
                    }
                    gather_rows(control, host_o, ranges, Hq * D, dtype, go);
                    gather_lse(control, host_lse, ranges, Hq, S, glse);
                    if (bwd) {
                      gather_rows(control, host_dq, ranges, Hq * D, dtype, gdq);
                      gather_rows(control, host_dk, ranges, Hkv * D, dtype, gdk);
                      gather_rows(control, host_dv, ranges, Hkv * D, dtype, gdv);
                    }
                    if (root && !reference) {
                      r.reason = "unchecked: no reference kernel for " + dev + " is loaded";
                    } else if (root) {
                      // The reference reads the global problem where the backend keeps tensors.
                      Tensor tq(be, qb, "the check's Q"), tk(be, kb, "the check's K"), tv(be, kb, "the check's V"),
                          to(be, qb, "the check's O"), tlse(be, glse.size() * 4, "the check's LSE");
                      std::unique_ptr<Tensor> tdo, tdq, tdk, tdv;
                      be.fill_random(tq.data(), q_elems, dtype, seed(1), 1.0f);
                      be.fill_random(tk.data(), kv_elems, dtype, seed(2), 1.0f);
                      be.fill_random(tv.data(), kv_elems, dtype, seed(3), 1.0f);
                      be.copy_from_host(to.data(), go.data(), qb);
                      be.copy_from_host(tlse.data(), glse.data(), glse.size() * 4);
                      if (bwd) {
                        tdo = std::make_unique<Tensor>(be, qb, "the check's dO");
                        tdq = std::make_unique<Tensor>(be, qb, "the check's dQ");
                        tdk = std::make_unique<Tensor>(be, kb, "the check's dK");
                        tdv = std::make_unique<Tensor>(be, kb, "the check's dV");
                        be.fill_random(tdo->data(), q_elems, dtype, seed(4), 1.0f);
                        be.copy_from_host(tdq->data(), gdq.data(), qb);
                        be.copy_from_host(tdk->data(), gdk.data(), kb);
                        be.copy_from_host(tdv->data(), gdv.data(), kb);
                      }
                      be.synchronize();
                      CellBuffers buf{tq.data(), tk.data(), tv.data(), to.data(), static_cast<float*>(tlse.data()),
                                      bwd ? tdo->data() : nullptr, bwd ? tdq->data() : nullptr,
                                      bwd ? tdk->data() : nullptr, bwd ? tdv->data() : nullptr};
                      CheckOptions copt;
                      copt.backward = bwd;
                      r.check = check_cell(be, *reference, problem, gm->mask(), buf, copt);
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
                } catch (const CellFailure& f) {
                  failure = f;
                } catch (const std::exception& e) {
                  failure = CellFailure(CellStatus::error, e.what());
                }
                if (failure) {
                  r.status = failure->status;
                  r.reason = failure->what();
                  r.cp_ranks = nullptr;
                }
                r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                std::string write_error;
                if (root && writer) {
                  try {
                    writer->write_cell(r);
                  } catch (const std::exception& e) {
                    write_error = e.what();
                  }
                }
                agree_on(write_error, "could not write the results file");
                if (root) {
                  ++summary.counts[to_string(r.status)];
                  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
                  table.row(index, total, r, elapsed, elapsed / index * (total - index));
                  if (!r.cp_ranks.is_null()) print_ranks(out, r.cp_ranks);
                }
              }
  if (root) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    table.summary(summary.counts, elapsed);
    if (writer) {
      writer->write_summary({{"counts", summary.counts}, {"elapsed_s", elapsed}});
      writer->finish();
      out << "# results: " << writer->path().string() << " (and .csv)\n";
    }
  }
  summary.cells = total;
  return summary;
}

}  // namespace lca::core
