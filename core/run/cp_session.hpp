// Context-parallel runs: every rank of the world communicator runs each cell of a matrix
// through a CP strategy plugin (with a kernel plugin for local blocks) on its backend (the CPU,
// or its own GPU); rank 0 gathers, checks against the single-device reference and writes.
// Used by `lcahost --cp ...` under mpirun.
// Rule: every rank calls run_cp_session with the same spec, in the same order (it is collective);
// `world` and `control` have the same members in the same rank order.
#pragma once

#include "core/comm/communicator.hpp"
#include "core/mask/mask_source.hpp"
#include "core/matrix/spec.hpp"
#include "core/plugin/registry.hpp"
#include "core/run/backend.hpp"
#include "core/run/session.hpp"

#include <ostream>
#include <string>
#include <vector>

namespace lca::core {

struct CPOptions {
  std::vector<std::string> strategies;  // plugin names; {"*"} = every loaded strategy
  std::string kernel;                   // kernel plugin for local blocks
  std::string options_json = "{}";      // strategy options (degrees ...)
  nlohmann::json kernel_options = nlohmann::json::object();  // the local kernel's (--kernel-options KERNEL=JSON)
  std::vector<std::string> ranks;       // per rank: its device and communicator, for the run record
};

// world: lent to the strategies (MPI on CPU buffers; NCCL or staged MPI on device buffers).
// control: host buffers only, for the host's own reductions and the gather to rank 0.
SessionSummary run_cp_session(const Registry& registry, MaskSource& masks, const MatrixSpec& spec,
                              comm::Communicator& world, comm::Communicator& control, Backend& backend,
                              const CPOptions& cp, const SessionOptions& options, std::ostream& out);

}  // namespace lca::core
