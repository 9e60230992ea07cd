// A run of a whole matrix: expansion, resume, the loop over cells (in-process or isolated),
// streaming results and the terminal table with progress. Used by `lcahost --matrix`.
// Rule: every expanded cell ends as exactly one record (or is already in the resumed file), except
// the cells a stopping signal leaves unrun, which the summary counts and --resume runs.
#pragma once

#include "core/mask/mask_source.hpp"
#include "core/matrix/cells.hpp"
#include "core/matrix/spec.hpp"
#include "core/plugin/registry.hpp"
#include "core/run/backend.hpp"
#include "core/run/runner.hpp"

#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace lca::core {

struct SessionOptions {
  std::filesystem::path out;            // results .jsonl ("" = none)
  bool resume = false;                  // skip cells already in `out`, append to it
  bool retry_errors = false;            // with resume: run again the cells recorded ERROR, CRASH or TIMEOUT
  bool force = false;                   // replace an existing `out` (otherwise refused)
  bool isolate = false;                 // each cell in a child process
  double cell_timeout_s = 0;            // with isolate; 0 = the spec's
  std::vector<std::string> child_argv;  // with isolate: the command that runs one cell
  bool dry_run = false;
  int threads = 0;
  nlohmann::json environment;           // written as the run record
  double gemm_tflops = 0;               // the GPU's measured ceiling, for gemm_fraction
  bool stop_on_signal = false;          // SIGINT/SIGTERM stop the run between cells (StopOnSignal)
};

struct SessionSummary {
  std::map<std::string, int> counts;    // status, by its record name (to_string) -> cells
  size_t cells = 0;
  size_t resumed = 0;
  size_t retried = 0;                   // with retry_errors: cells in `out` that run again
  int stopped_by = 0;                   // the signal that stopped the run early, or 0
  size_t left = 0;                      // with stopped_by: cells not run (and not recorded)
  bool healthy() const;                 // no FAIL, ERROR, CRASH or TIMEOUT
};

SessionSummary run_session(const Registry& registry, MaskSource& masks, const MatrixSpec& spec,
                           const std::map<std::string, Backend*>& backends, const HostDevices& devices,
                           const SessionOptions& options, std::ostream& out);

}  // namespace lca::core
