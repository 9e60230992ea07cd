// Where a CP call spends its time: the host wraps what it lends a strategy (the communicator and
// the local kernel) and sums the time inside their calls. Device events bracket calls enqueued
// on a CUDA stream; a steady clock brackets calls on the CPU (stream NULL). Used by cp_session.
// Rule: intervals on different streams may overlap (a ring's transfers run beside the kernel),
// so comm + compute can exceed the step time; take_ms() waits for the events it reads.
#pragma once

#include "core/comm/communicator.hpp"

#include <lca/abi.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>
#include <vector>

namespace lca::core {

namespace gpu {
class EventTimer;
}

class IntervalClock {
 public:
  IntervalClock();
  ~IntervalClock();
  IntervalClock(const IntervalClock&) = delete;
  IntervalClock& operator=(const IntervalClock&) = delete;

  void begin(void* stream);
  void end(void* stream);
  // Milliseconds of the intervals closed since the last take; starts a new count.
  double take_ms();

 private:
  std::vector<std::unique_ptr<gpu::EventTimer>> timers_;  // reused from one take to the next
  size_t used_ = 0;
  double host_ms_ = 0;
  std::chrono::steady_clock::time_point host_start_{};
};

// Every data call of `inner` (and of its splits) timed on `clock`; a group counts from its first
// send/recv to group_end. The ref does not own `inner`, which must outlive it.
std::unique_ptr<comm::Communicator> make_timed_communicator(comm::Communicator& inner, IntervalClock& clock);

// A kernel lent to a strategy with forward/backward timed on `clock`; plans pass through, and
// the plan_info of each (where the kernel has one) is folded into a summary (fold_plan_info)
// that take_plans() hands over and clears.
// Lifetime: the real kernel's owner and `clock` outlive the TimedKernel and every plan made
// through it.
class TimedKernel {
 public:
  TimedKernel(lca_kernel_ref real, IntervalClock& clock);
  lca_kernel_ref ref() { return lca_kernel_ref{sizeof(lca_kernel_ref), &vtable_, reinterpret_cast<lca_kernel*>(this)}; }
  nlohmann::json take_plans();

  lca_kernel_ref real;
  IntervalClock& clock;
  nlohmann::json plans = nlohmann::json::object();  // the summary so far

 private:
  lca_kernel_vtable vtable_{};
};

// Adds one plan's plan_info to a summary of a CP cell's local plans: "plans" (how many), and for
// each pass object of the info (a top-level object, e.g. "forward") the count of each "kernel" it
// names ("kernels") and of plans whose "splits" is over 1 ("split": split-KV's parts).
void fold_plan_info(nlohmann::json& summary, const nlohmann::json& info);

}  // namespace lca::core
