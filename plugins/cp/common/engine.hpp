// The one engine behind the five CP strategy plugins: Ulysses head exchange (degree u) around a
// context stage (ring, double ring or all-gather) over cp = W / u groups, on host buffers (CPU
// problems) or device buffers and the exec stream (CUDA problems). A plugin derives from
// EngineStrategy and only chooses EngineOptions from its options JSON and the world.
// Rule: plan() is collective over the world; forward/backward must follow on every rank.
#pragma once

#include "buffers.hpp"
#include "context_stage.hpp"
#include "head_exchange.hpp"
#include "layout.hpp"
#include "options.hpp"

#include <lca/cp_strategy.hpp>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace lca::cp {

class EnginePlan final : public ICPPlan {
 public:
  KernelRef kernel;
  Comm world, heads, context;
  Layout layout;
  ContextStage stage;
  Lane lane;  // the ring's communication stream on CUDA
  lca_problem problem{};
  void release(const lca_exec& exec) override {
    stage.release(kernel, exec);
    lane.release();
  }
};

inline nlohmann::json parse_options(const char* text, const char* who) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text && *text ? text : "{}");
  } catch (const nlohmann::json::exception& e) {
    throw Error(LCA_ERR_INVALID_ARGUMENT, std::string(who) + ": options are not valid JSON: " + e.what());
  }
  require(j.is_object(), LCA_ERR_INVALID_ARGUMENT, std::string(who) + ": options must be a JSON object");
  return j;
}

class EngineStrategy : public ICPStrategy {
 public:
  explicit EngineStrategy(const char* name) : name_(name) {}

  // Reads the options and the world (size, local size, heads) and picks the configuration.
  virtual EngineOptions choose(const nlohmann::json& options, const Comm& world,
                               const lca_problem& problem) = 0;

  std::unique_ptr<ICPPlan> plan(const lca_cp_config& config, const lca_exec& exec) override {
    require(config.problem && config.mask && config.world.vtable && config.kernel.vtable,
            LCA_ERR_INVALID_ARGUMENT, name_ + ": incomplete lca_cp_config");
    const lca_problem& p = *config.problem;
    require(p.device_type == LCA_DEVICE_CPU || p.device_type == LCA_DEVICE_CUDA, LCA_ERR_UNSUPPORTED,
            name_ + ": unknown device type " + std::to_string(p.device_type));
    if (p.device_type == LCA_DEVICE_CUDA) {
      require_cuda_build(name_);
      require(exec.stream != nullptr, LCA_ERR_INVALID_ARGUMENT,
              name_ + ": a CUDA problem needs an exec stream (lca_exec.stream is NULL)");
    }
    auto plan = std::make_unique<EnginePlan>();
    plan->problem = p;
    plan->kernel = KernelRef(config.kernel);
    plan->world = Comm(config.world);
    const EngineOptions opt = choose(parse_options(config.options_json, name_.c_str()), plan->world, p);
    const int W = plan->world.size(), r = plan->world.rank();
    const std::vector<lca_slice> slices(config.mask->slices, config.mask->slices + config.mask->num_slices);
    Balance balance;
    try {
      GroupRuns runs;
      if (opt.mode == ContextMode::groupcast) {
        require(opt.head_degree >= 1 && W % opt.head_degree == 0, LCA_ERR_UNSUPPORTED,
                "the head degree " + std::to_string(opt.head_degree) + " does not divide the world size " +
                    std::to_string(W));
        balance = make_balance(slices, p.seqlen_q, W / opt.head_degree, opt.chunks_per_group, opt.balance_by);
        for (const auto& chunks : balance.chunks) {
          runs.emplace_back();
          for (int c : chunks) runs.back().push_back({balance.bounds[c], balance.bounds[c + 1]});
        }
      }
      plan->layout = make_layout(W, r, opt.head_degree, opt.zigzag, p, runs.empty() ? nullptr : &runs);
    } catch (const Error& e) {
      throw Error(e.status(), name_ + ": " + e.what());
    }
    const Layout& L = plan->layout;
    // Both splits are collective on the world, in the same order everywhere.
    plan->heads = plan->world.split(L.ctx_idx, L.head_idx);
    plan->context = plan->world.split(L.head_idx, L.ctx_idx);
    plan->stage.prepare(L, p, slices, opt.mode, opt.window, plan->kernel, exec, &balance, opt.remote_stages,
                        opt.one_call_fwd, opt.one_call_bwd);
    if (opt.mode != ContextMode::allgather && L.cp > 1) plan->lane.open(p.device_type == LCA_DEVICE_CUDA);
    return plan;
  }

  std::vector<lca_token_range> dispatch(ICPPlan& base, int rank) override {
    auto& plan = static_cast<EnginePlan&>(base);
    require(rank >= 0 && rank < plan.layout.world, LCA_ERR_INVALID_ARGUMENT,
            name_ + ": dispatch of rank " + std::to_string(rank) + " outside the world");
    return plan.layout.ranges[rank];
  }

  void forward(ICPPlan& base, const lca_fwd_args& args, const lca_exec& exec) override {
    auto& plan = static_cast<EnginePlan&>(base);
    const Layout& L = plan.layout;
    const lca_problem& p = plan.problem;
    const Device dev(p.device_type, exec.stream);
    HeadGroup hg{L, plan.heads, exec.allocator, dev};
    const int64_t N = hg.group_rows(), D = p.head_dim;
    Buffer qb, kb, vb;
    const void* q = group_input(hg, p, args.q, L.q_head_first, L.hq_l, qb);
    const void* k = group_input(hg, p, args.k, L.kv_head_first, L.hkv_l, kb);
    const void* v = group_input(hg, p, args.v, L.kv_head_first, L.hkv_l, vb);
    // Group-cast writes O in the problem dtype: a rank alone in its head group writes the host's
    // packed output in place instead of a buffer copied there after.
    const bool o_in_place = plan.stage.mode == ContextMode::groupcast && packed_in(hg, p, args.o, L.hq_l);
    Buffer o, lse(exec.allocator, N * L.hq_l * sizeof(float));
    if (!o_in_place) o = Buffer(exec.allocator, N * L.hq_l * D * sizeof(float));
    ContextStage::Ctx c{L, plan.context, plan.kernel, exec, dev, plan.lane, D, p.dtype};
    const int32_t o_dtype = plan.stage.forward(c, q, k, v, o_in_place ? args.o.data : o.data(), lse.as<float>());
    if (!o_in_place) hg.gather(o.data(), o_dtype, args.o, L.q_head_first, L.hq_l, false);
    hg.gather_lse(lse.as<float>(), args.lse);
  }

  void backward(ICPPlan& base, const lca_bwd_args& args, const lca_exec& exec) override {
    auto& plan = static_cast<EnginePlan&>(base);
    const Layout& L = plan.layout;
    const lca_problem& p = plan.problem;
    const Device dev(p.device_type, exec.stream);
    HeadGroup hg{L, plan.heads, exec.allocator, dev};
    const int64_t N = hg.group_rows(), D = p.head_dim;
    Buffer qb, ob, dob, kb, vb, lse(exec.allocator, N * L.hq_l * 4);
    const void* q = group_input(hg, p, args.q, L.q_head_first, L.hq_l, qb);
    const void* o = group_input(hg, p, args.o, L.q_head_first, L.hq_l, ob);
    const void* d_o = group_input(hg, p, args.d_o, L.q_head_first, L.hq_l, dob);
    const void* k = group_input(hg, p, args.k, L.kv_head_first, L.hkv_l, kb);
    const void* v = group_input(hg, p, args.v, L.kv_head_first, L.hkv_l, vb);
    hg.scatter_lse(args.lse, lse.as<float>());
    Buffer dq(exec.allocator, N * L.hq_l * D * 4), dk(exec.allocator, N * L.hkv_l * D * 4),
        dv(exec.allocator, N * L.hkv_l * D * 4);
    ContextStage::Ctx c{L, plan.context, plan.kernel, exec, dev, plan.lane, D, p.dtype};
    plan.stage.backward(c, q, k, v, o, d_o, lse.as<float>(), dq.as<float>(), dk.as<float>(), dv.as<float>());
    hg.gather(dq.data(), LCA_DTYPE_F32, args.dq, L.q_head_first, L.hq_l, false);
    hg.gather(dk.data(), LCA_DTYPE_F32, args.dk, L.kv_head_first, L.hkv_l, true);
    hg.gather(dv.data(), LCA_DTYPE_F32, args.dv, L.kv_head_first, L.hkv_l, true);
  }

 protected:
  std::string name_;

 private:
  // The head group's packed rows of an input: the host's own buffer when the group is this rank
  // alone and the tensor is already packed in the problem dtype (no copy), else scattered into
  // `buf`.
  // Whether `t` is the head group's rows as they are: this rank alone in its group, packed
  // [rows, h_l, D] in the problem dtype.
  static bool packed_in(const HeadGroup& hg, const lca_problem& p, const lca_tensor& t, int h_l) {
    const int64_t D = p.head_dim;
    return hg.L.u == 1 && t.dtype == p.dtype && t.shape[0] == hg.group_rows() && t.shape[1] == h_l &&
           t.stride[2] == 1 && t.stride[1] == D && t.stride[0] == h_l * D;
  }

  static const void* group_input(const HeadGroup& hg, const lca_problem& p, const lca_tensor& t,
                                 const std::vector<int>& head_first, int h_l, Buffer& buf) {
    const int64_t D = p.head_dim;
    if (packed_in(hg, p, t, h_l)) return t.data;
    buf = Buffer(hg.alloc, static_cast<size_t>(hg.group_rows() * h_l * D) * dtype_size(p.dtype));
    hg.scatter(t, head_first, h_l, buf.data());
    return buf.data();
  }
};

}  // namespace lca::cp
