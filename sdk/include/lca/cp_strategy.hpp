// ICPStrategy: the C++ face of lca_cp_strategy_vtable, with Comm and KernelRef, thin wrappers
// that let a strategy call the host's communicator and a lent kernel with exceptions.
// Rule: plan() is collective over the world communicator: every rank calls it in the same order.
#pragma once

#include <lca/abi.h>
#include <lca/error.hpp>
#include <lca/kernel.hpp>

#include <memory>
#include <string>
#include <vector>

namespace lca {

// Non-owning view of a host communicator; split() results are owned (freed on destruction).
class Comm {
 public:
  Comm() = default;
  explicit Comm(lca_comm_ref ref, bool owned = false) : ref_(ref), owned_(owned) {}
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  Comm(Comm&& o) noexcept : ref_(o.ref_), owned_(o.owned_) { o.owned_ = false; }
  Comm& operator=(Comm&& o) noexcept {
    if (this != &o) { reset(); ref_ = o.ref_; owned_ = o.owned_; o.owned_ = false; }
    return *this;
  }
  ~Comm() { reset(); }

  int rank() const { return ref_.vtable->rank(ref_.comm); }
  int size() const { return ref_.vtable->size(ref_.comm); }
  int local_size() const { return ref_.vtable->local_size(ref_.comm); }
  const lca_comm_ref& ref() const { return ref_; }

  Comm split(int color, int key) const {
    lca_comm* out = nullptr;
    check(ref_.vtable->split(ref_.comm, color, key, &out), "split");
    return Comm(lca_comm_ref{sizeof(lca_comm_ref), ref_.vtable, out}, true);
  }
  void all_to_all(const void* send, const int64_t* sc, const int64_t* sd, void* recv,
                  const int64_t* rc, const int64_t* rd, int32_t dtype, void* stream) const {
    check(ref_.vtable->all_to_all(ref_.comm, send, sc, sd, recv, rc, rd, dtype, stream), "all_to_all");
  }
  void all_gather(const void* send, void* recv, int64_t count, int32_t dtype, void* stream) const {
    check(ref_.vtable->all_gather(ref_.comm, send, recv, count, dtype, stream), "all_gather");
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, int32_t dtype, int32_t op,
                      void* stream) const {
    check(ref_.vtable->reduce_scatter(ref_.comm, send, recv, count, dtype, op, stream), "reduce_scatter");
  }
  void all_reduce(const void* send, void* recv, int64_t count, int32_t dtype, int32_t op, void* stream) const {
    check(ref_.vtable->all_reduce(ref_.comm, send, recv, count, dtype, op, stream), "all_reduce");
  }
  void group_start() const { check(ref_.vtable->group_start(ref_.comm), "group_start"); }
  void group_end() const { check(ref_.vtable->group_end(ref_.comm), "group_end"); }
  void send(const void* buf, int64_t count, int32_t dtype, int peer, void* stream) const {
    check(ref_.vtable->send(ref_.comm, buf, count, dtype, peer, stream), "send");
  }
  void recv(void* buf, int64_t count, int32_t dtype, int peer, void* stream) const {
    check(ref_.vtable->recv(ref_.comm, buf, count, dtype, peer, stream), "recv");
  }
  void barrier(void* stream) const { check(ref_.vtable->barrier(ref_.comm, stream), "barrier"); }

 private:
  void check(lca_status s, const char* what) const {
    if (s != LCA_OK) throw Error(s, std::string("communicator ") + what + ": " + ref_.vtable->last_error());
  }
  void reset() {
    if (owned_ && ref_.comm != nullptr) ref_.vtable->free_comm(ref_.comm);
    owned_ = false;
  }
  lca_comm_ref ref_{};
  bool owned_ = false;
};

// A kernel lent by the host. Plans made through it are destroyed through it.
class KernelRef {
 public:
  KernelRef() = default;
  explicit KernelRef(lca_kernel_ref ref) : ref_(ref) {}
  bool has_backward() const { return ref_.vtable->backward != nullptr; }

  lca_plan* plan(const lca_problem& problem, const lca_mask& mask, const lca_exec& exec) const {
    lca_plan* out = nullptr;
    check(ref_.vtable->plan(ref_.kernel, &problem, &mask, &exec, &out), "plan");
    return out;
  }
  void destroy_plan(lca_plan* plan, const lca_exec& exec) const {
    if (plan) ref_.vtable->destroy_plan(ref_.kernel, plan, &exec);
  }
  void forward(lca_plan* plan, const lca_fwd_args& args, const lca_exec& exec) const {
    check(ref_.vtable->forward(ref_.kernel, plan, &args, &exec), "forward");
  }
  void backward(lca_plan* plan, const lca_bwd_args& args, const lca_exec& exec) const {
    require(has_backward(), LCA_ERR_UNSUPPORTED, "the lent kernel has no backward pass");
    check(ref_.vtable->backward(ref_.kernel, plan, &args, &exec), "backward");
  }

 private:
  void check(lca_status s, const char* what) const {
    if (s != LCA_OK) throw Error(s, std::string("kernel ") + what + ": " + ref_.vtable->last_error());
  }
  lca_kernel_ref ref_{};
};

class ICPPlan {
 public:
  virtual ~ICPPlan() = default;
  virtual void release(const lca_exec& /*exec*/) {}
};

class ICPStrategy {
 public:
  virtual ~ICPStrategy() = default;
  virtual std::unique_ptr<ICPPlan> plan(const lca_cp_config& config, const lca_exec& exec) = 0;
  virtual std::vector<lca_token_range> dispatch(ICPPlan& plan, int rank) = 0;
  virtual void forward(ICPPlan& plan, const lca_fwd_args& args, const lca_exec& exec) = 0;
  virtual void backward(ICPPlan& plan, const lca_bwd_args& args, const lca_exec& exec) = 0;
};

namespace detail {

template <class Strategy>
struct CPStrategyAdapter {
  static lca_status create(const lca_host_info* host, lca_cp_strategy** out) {
    return guard([&] {
      require(host && out, LCA_ERR_INVALID_ARGUMENT, "create: null argument");
      *out = reinterpret_cast<lca_cp_strategy*>(static_cast<ICPStrategy*>(new Strategy(*host)));
    });
  }
  static void destroy(lca_cp_strategy* s) { delete reinterpret_cast<ICPStrategy*>(s); }
  static lca_status plan(lca_cp_strategy* s, const lca_cp_config* config, const lca_exec* exec,
                         lca_cp_plan** out) {
    return guard([&] {
      require(s && config && exec && out, LCA_ERR_INVALID_ARGUMENT, "plan: null argument");
      *out = reinterpret_cast<lca_cp_plan*>(reinterpret_cast<ICPStrategy*>(s)->plan(*config, *exec).release());
    });
  }
  static void destroy_plan(lca_cp_strategy*, lca_cp_plan* plan, const lca_exec* exec) {
    auto* p = reinterpret_cast<ICPPlan*>(plan);
    if (!p) return;
    if (exec) guard([&] { p->release(*exec); });
    delete p;
  }
  static lca_status dispatch(lca_cp_strategy* s, lca_cp_plan* plan, int32_t rank,
                             lca_token_range* ranges, int64_t capacity, int64_t* count) {
    return guard([&] {
      require(s && plan && count, LCA_ERR_INVALID_ARGUMENT, "dispatch: null argument");
      auto r = reinterpret_cast<ICPStrategy*>(s)->dispatch(*reinterpret_cast<ICPPlan*>(plan), rank);
      *count = static_cast<int64_t>(r.size());
      if (ranges == nullptr) return;
      require(capacity >= *count, LCA_ERR_INVALID_ARGUMENT, "dispatch: capacity too small");
      for (size_t i = 0; i < r.size(); ++i) ranges[i] = r[i];
    });
  }
  static lca_status forward(lca_cp_strategy* s, lca_cp_plan* plan, const lca_fwd_args* args,
                            const lca_exec* exec) {
    return guard([&] {
      require(s && plan && args && exec, LCA_ERR_INVALID_ARGUMENT, "forward: null argument");
      reinterpret_cast<ICPStrategy*>(s)->forward(*reinterpret_cast<ICPPlan*>(plan), *args, *exec);
    });
  }
  static lca_status backward(lca_cp_strategy* s, lca_cp_plan* plan, const lca_bwd_args* args,
                             const lca_exec* exec) {
    return guard([&] {
      require(s && plan && args && exec, LCA_ERR_INVALID_ARGUMENT, "backward: null argument");
      reinterpret_cast<ICPStrategy*>(s)->backward(*reinterpret_cast<ICPPlan*>(plan), *args, *exec);
    });
  }
  static const lca_cp_strategy_vtable* vtable() {
    static const lca_cp_strategy_vtable table{sizeof(lca_cp_strategy_vtable), LCA_ABI_VERSION,
                                              &create, &destroy, &plan, &destroy_plan, &dispatch,
                                              &forward, &backward, &detail::last_error};
    return &table;
  }
};

}  // namespace detail
}  // namespace lca

#define LCA_EXPORT_CP_STRATEGY(StrategyClass, NAME, VERSION)                                 \
  extern "C" LCA_ABI_EXPORT const lca_plugin_descriptor* lca_plugin_entry(void) {            \
    static const lca_plugin_descriptor descriptor{                                           \
        sizeof(lca_plugin_descriptor), LCA_ABI_VERSION, LCA_KIND_CP_STRATEGY, NAME, VERSION, \
        nullptr, nullptr, ::lca::detail::CPStrategyAdapter<StrategyClass>::vtable()};        \
    return &descriptor;                                                                      \
  }
