// Timing what a CP strategy borrows; see cp_timing.hpp.
#include "core/run/cp_timing.hpp"

#include "core/cuda/gpu.hpp"
#include "core/run/runner.hpp"

#include <lca/error.hpp>

#include <string>

namespace lca::core {

IntervalClock::IntervalClock() = default;
IntervalClock::~IntervalClock() = default;

void IntervalClock::begin(void* stream) {
  if (stream == nullptr) {
    host_start_ = std::chrono::steady_clock::now();
    return;
  }
  if (used_ == timers_.size()) timers_.push_back(std::make_unique<gpu::EventTimer>());
  timers_[used_]->start(stream);
}

void IntervalClock::end(void* stream) {
  if (stream == nullptr) {
    host_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start_).count();
    return;
  }
  timers_[used_]->stop(stream);
  ++used_;
}

double IntervalClock::take_ms() {
  double ms = host_ms_;
  for (size_t i = 0; i < used_; ++i) ms += timers_[i]->elapsed_ms();
  used_ = 0;
  host_ms_ = 0;
  return ms;
}

namespace {

class TimedCommunicator final : public comm::Communicator {
 public:
  TimedCommunicator(std::unique_ptr<Communicator> owned, Communicator* inner, IntervalClock& clock)
      : owned_(std::move(owned)), inner_(inner), clock_(clock) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int local_size() const override { return inner_->local_size(); }
  const char* backend() const override { return inner_->backend(); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    auto child = inner_->split(color, key);
    Communicator* raw = child.get();
    return std::make_unique<TimedCommunicator>(std::move(child), raw, clock_);
  }

  void all_to_all(const void* send, const int64_t* sc, const int64_t* sd, void* recv, const int64_t* rc,
                  const int64_t* rd, lca_dtype dtype, void* stream) override {
    timed(stream, [&] { inner_->all_to_all(send, sc, sd, recv, rc, rd, dtype, stream); });
  }
  void all_gather(const void* send, void* recv, int64_t count, lca_dtype dtype, void* stream) override {
    timed(stream, [&] { inner_->all_gather(send, recv, count, dtype, stream); });
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, lca_dtype dtype, lca_reduce_op op,
                      void* stream) override {
    timed(stream, [&] { inner_->reduce_scatter(send, recv, count, dtype, op, stream); });
  }
  void all_reduce(const void* send, void* recv, int64_t count, lca_dtype dtype, lca_reduce_op op,
                  void* stream) override {
    timed(stream, [&] { inner_->all_reduce(send, recv, count, dtype, op, stream); });
  }
  void group_start() override {
    inner_->group_start();
    ++depth_;
  }
  void group_end() override {
    inner_->group_end();  // NCCL launches the group's transfers here
    if (depth_ > 0 && --depth_ == 0 && open_) {
      clock_.end(group_stream_);
      open_ = false;
    }
  }
  void send(const void* buf, int64_t count, lca_dtype dtype, int peer, void* stream) override {
    timed(stream, [&] { inner_->send(buf, count, dtype, peer, stream); });
  }
  void recv(void* buf, int64_t count, lca_dtype dtype, int peer, void* stream) override {
    timed(stream, [&] { inner_->recv(buf, count, dtype, peer, stream); });
  }
  void barrier(void* stream) override {
    timed(stream, [&] { inner_->barrier(stream); });
  }

 private:
  // Outside a group: one interval around the call. Inside: the group's interval opens at its
  // first call, on that call's stream.
  template <class F>
  void timed(void* stream, F&& call) {
    if (depth_ > 0) {
      if (!open_) {
        clock_.begin(stream);
        open_ = true;
        group_stream_ = stream;
      }
      call();
      return;
    }
    clock_.begin(stream);
    call();
    clock_.end(stream);
  }

  std::unique_ptr<Communicator> owned_;  // a split's; empty for the wrapped world
  Communicator* inner_;
  IntervalClock& clock_;
  int depth_ = 0;
  bool open_ = false;
  void* group_stream_ = nullptr;
};

// ---- the kernel proxy: lca_kernel* is the TimedKernel ----
thread_local const lca_kernel_vtable* g_last_real = nullptr;
thread_local std::string g_own_error;

TimedKernel& of(lca_kernel* k) { return *reinterpret_cast<TimedKernel*>(k); }

lca_status fail(lca_status s, std::string message) {
  g_last_real = nullptr;
  g_own_error = std::move(message);
  return s;
}

lca_status t_create(const lca_host_info*, lca_kernel** out) {
  if (out) *out = nullptr;
  return fail(LCA_ERR_UNSUPPORTED, "a kernel lent to a CP strategy cannot create kernels");
}
void t_destroy(lca_kernel*) {}

lca_status t_plan(lca_kernel* k, const lca_problem* p, const lca_mask* m, const lca_exec* e, lca_plan** out) {
  TimedKernel& t = of(k);
  g_last_real = t.real.vtable;
  const lca_status s = t.real.vtable->plan(t.real.kernel, p, m, e, out);
  if (s == LCA_OK && out && *out) {
    const nlohmann::json info = read_plan_info(*t.real.vtable, t.real.kernel, *out);
    fold_plan_info(t.plans, info.is_object() ? info : nlohmann::json::object());
  }
  return s;
}

void t_destroy_plan(lca_kernel* k, lca_plan* plan, const lca_exec* e) {
  TimedKernel& t = of(k);
  t.real.vtable->destroy_plan(t.real.kernel, plan, e);
}

template <class Call>
lca_status timed_call(TimedKernel& t, const lca_exec* e, Call&& call) {
  void* stream = e ? e->stream : nullptr;
  try {
    t.clock.begin(stream);
  } catch (const std::exception& ex) {
    return fail(LCA_ERR_DEVICE, std::string("timing the lent kernel: ") + ex.what());
  }
  g_last_real = t.real.vtable;
  const lca_status s = call();
  try {
    t.clock.end(stream);
  } catch (const std::exception& ex) {
    return fail(LCA_ERR_DEVICE, std::string("timing the lent kernel: ") + ex.what());
  }
  return s;
}

lca_status t_forward(lca_kernel* k, lca_plan* plan, const lca_fwd_args* a, const lca_exec* e) {
  TimedKernel& t = of(k);
  return timed_call(t, e, [&] { return t.real.vtable->forward(t.real.kernel, plan, a, e); });
}

lca_status t_backward(lca_kernel* k, lca_plan* plan, const lca_bwd_args* a, const lca_exec* e) {
  TimedKernel& t = of(k);
  return timed_call(t, e, [&] { return t.real.vtable->backward(t.real.kernel, plan, a, e); });
}

const char* t_last_error() { return g_last_real ? g_last_real->last_error() : g_own_error.c_str(); }

}  // namespace

void fold_plan_info(nlohmann::json& summary, const nlohmann::json& info) {
  summary["plans"] = summary.value("plans", 0) + 1;
  for (const auto& [pass, v] : info.items()) {
    if (!v.is_object()) continue;
    if (const auto kernel = v.find("kernel"); kernel != v.end() && kernel->is_string()) {
      nlohmann::json& n = summary["kernels"][pass][kernel->get<std::string>()];
      n = n.is_number() ? n.get<int>() + 1 : 1;
    }
    if (const auto splits = v.find("splits"); splits != v.end() && splits->is_number() && splits->get<double>() > 1) {
      nlohmann::json& n = summary["split"][pass];
      n = n.is_number() ? n.get<int>() + 1 : 1;
    }
  }
}

nlohmann::json TimedKernel::take_plans() {
  nlohmann::json out = std::move(plans);
  plans = nlohmann::json::object();
  return out;
}

std::unique_ptr<comm::Communicator> make_timed_communicator(comm::Communicator& inner, IntervalClock& clock) {
  return std::make_unique<TimedCommunicator>(nullptr, &inner, clock);
}

// Fields this proxy does not know stay NULL ("none"): passing the real kernel's functions on
// would hand them the proxy where they expect their own kernel.
TimedKernel::TimedKernel(lca_kernel_ref r, IntervalClock& c) : real(r), clock(c) {
  vtable_ = lca_kernel_vtable{};
  vtable_.struct_size = sizeof(lca_kernel_vtable);
  vtable_.abi_version = real.vtable->abi_version;
  vtable_.create = &t_create;
  vtable_.destroy = &t_destroy;
  vtable_.plan = &t_plan;
  vtable_.destroy_plan = &t_destroy_plan;
  vtable_.forward = &t_forward;
  vtable_.backward = real.vtable->backward ? &t_backward : nullptr;
  vtable_.last_error = &t_last_error;
}

}  // namespace lca::core
