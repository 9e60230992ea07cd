// The runner: executes one cell (plan outside the timed region, warm-up, timed repeats, check)
// and turns every failure into a recorded status. The face of core/run.
// Rule: a cell never throws out of run_cell(); out-of-memory is E, unsupported is X, a failed
// check is FAIL, anything else ERROR, and the run goes on.
#pragma once

#include "core/check/compare.hpp"
#include "core/mask/mask_source.hpp"
#include "core/matrix/cells.hpp"
#include "core/plugin/registry.hpp"
#include "core/run/backend.hpp"
#include "core/run/status.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lca::core {

struct CellResult {
  Cell cell;
  CellStatus status = CellStatus::error;  // set by whoever ran the cell
  std::string reason;   // why, for every status but ok
  double plan_ms = 0;
  int warmup_calls = 0;  // untimed calls made before the timed ones
  bool warmup_steady = true;  // false: the warm-up ended on its cap with the calls' times still moving
  std::vector<double> times_ms;
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int64_t area = 0;     // unmasked cells
  double flops = 0;     // of one call
  double tflops = 0;    // at the median
  double gemm_fraction = 0;     // tflops / the run's measured GEMM rate (0 when unknown)
  size_t attn_peak_bytes = 0;   // the kernel's own: plan + workspace, beyond inputs and outputs
  size_t total_peak_bytes = 0;  // everything the cell held at its peak
  CheckResult check;
  double seconds = 0;   // wall time of the whole cell, check included
  // The kernel's own facts about its plan and calls (ABI 1.1 plan_info, e.g. a JIT's compile
  // time spent in plan()); null when the kernel reports none.
  nlohmann::json plan_info;
  // CP cells: per-rank figures as {min, max} over ranks (time_ms, comm_ms, compute_ms, peak
  // bytes, tflops); null for single-device cells.
  nlohmann::json cp_ranks;
  // CP cells: the strategy's options with every default made explicit (cp::explicit_options), the
  // configuration that ran; null for single-device cells and strategies the host does not know.
  nlohmann::json cp_config;

  nlohmann::json to_json() const;
  static CellResult from_json(const nlohmann::json& j);
};

// Seeds of a cell's random inputs: they depend on the run's seed and the problem only, so every
// kernel (and every CP strategy) of a problem sees the same Q, K, V and dO.
// which: 1 = Q, 2 = K, 3 = V, 4 = dO.
uint64_t input_seed(uint64_t run_seed, int64_t seqlen, int heads_q, int heads_kv, int head_dim, int which);

// fwd: 4 * area * head_dim * heads_q; bwd: 2.5x that.
double attention_flops(int64_t area, int head_dim, int heads_q, bool backward);

// ABI 1.1: a kernel's facts about a plan (plan_info); null for plugins built before it, or none;
// {"text": ...} where it is not a JSON object.
nlohmann::json read_plan_info(const lca_kernel_vtable& vt, lca_kernel* kernel, lca_plan* plan);

struct RunnerOptions {
  int warmup = 1;
  double warmup_ms = 0;  // MatrixSpec::warmup_ms
  int repeats = 3;
  double repeat_ms = 0;  // MatrixSpec::repeat_ms
  uint64_t seed = 42;
  bool check = true;
  int64_t check_max_seqlen = 0;    // MatrixSpec::check_max_seqlen: longer cells unchecked (0: none)
  int threads = 0;                 // CPU kernels: 0 = their choice
  double max_reference_flops = 4e12;
  double gemm_tflops = 0;          // measured ceiling; 0 = unknown
};

// The spec's warm-up, repeats, seed, check and check_max_seqlen as runner options (the rest left at their defaults).
RunnerOptions runner_options(const MatrixSpec& spec);

// The untimed calls before a cell's timed ones: `count` of them, then more until `min_ms` of wall
// time has passed since the first (MatrixSpec::warmup_ms). Past the count each call is waited for,
// so that the clock reads the device's time and no more than one call is queued when it runs out.
// On a GPU the warm-up then goes on while the calls' times still move (times_steady), for at most
// kSteadyExtraMs more: after a pause (the host planning the cell) the power limiter lets the clock
// boost and then overshoots, and a cell timed in that dip reads up to 15% slow (docs/DESIGN.md).
// steady, if given: whether the times had settled when it ended.
// agree (CP ranks): given whether this rank wants another call, whether all ranks make one; every
// rank must make the same calls. Returns the calls made.
int warm_up(Backend& be, const std::function<void()>& call, int count, double min_ms,
            const std::function<bool(bool)>& agree = {}, bool* steady = nullptr);

// Whether a warm-up's call times (in order, ms) have settled: the median of the last
// kSteadyWindowMs of calls (3 calls at least) within kSteadyTolerance of the median of the
// window before it. False while there are not two such windows.
bool times_steady(const std::vector<double>& ms);
constexpr double kSteadyWindowMs = 100;    // a tenth of the limiter's ~1 s swing
constexpr double kSteadyTolerance = 0.015; // above the medians' noise between windows
constexpr double kSteadyExtraMs = 1200;    // past min_ms: beyond the limiter's overshoot (~0.8-1.2 s)

// The median of a cell's times: the middle one, or the mean of the two middle ones (the host's
// runner and the CP session report the same statistic). 0 for none.
double median_of(std::vector<double> v);
// A timed cell's median_ms, min_ms and max_ms from its times_ms (at least one).
void set_time_stats(CellResult& r);

// The most timed calls that MatrixSpec::repeat_ms adds past the counted ones (a cell of short calls
// then spans less than repeat_ms; such cells draw little power anyway).
constexpr int kMaxTimedCalls = 1000;

// A cell's timed calls: `count` of them, then more until `min_ms` of wall time has passed since the
// first (MatrixSpec::repeat_ms), up to kMaxTimedCalls in all. timed: one timed call, waited for.
// agree: as warm_up's. Returns the calls made.
int time_calls(const std::function<void()>& timed, int count, double min_ms,
               const std::function<bool(bool)>& agree = {});

class Runner {
 public:
  // backends: by device name ("cpu", "cuda"); a cell whose device has no backend is X.
  Runner(const Registry& registry, MaskSource& masks, std::map<std::string, Backend*> backends,
         RunnerOptions options);
  CellResult run_cell(const Cell& cell);
  // How many times the reference kernel has run for a check (tests and logs).
  int reference_runs() const { return reference_runs_; }

 private:
  std::shared_ptr<KernelInstance> kernel(const std::string& name, const std::string& config = "{}");
  CellResult run_cell_unchecked(const Cell& cell);
  // The reference's outputs for this cell's problem and pass: computed on the cell's inputs, or
  // kept from an earlier kernel's cell of the same problem. Throws if the reference fails.
  const ReferenceOutputs& reference_for(const Cell& cell, const lca_problem& problem, const lca_mask& mask,
                                        const CellBuffers& buf, const CheckOptions& opt);

  const Registry& registry_;
  MaskSource& masks_;
  std::map<std::string, Backend*> backends_;
  RunnerOptions options_;
  std::map<std::string, std::shared_ptr<KernelInstance>> kernels_;
  // The reference's outputs for the problem of the last checked cell, one per pass. A matrix
  // lists the kernels of one (mask, length) together and they all see the same inputs, so the
  // reference runs once for them (at 64K its backward takes longer than the timed repeats).
  std::string reference_problem_;
  std::map<std::string, std::shared_ptr<const ReferenceOutputs>> references_;
  int reference_runs_ = 0;
};

}  // namespace lca::core
