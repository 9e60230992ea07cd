// Isolation: run one cell in a child process (this same executable, re-exec'd with the cell
// as JSON), so that a plugin that crashes or hangs becomes a CRASH / TIMEOUT record.
// Rule: the child prints exactly one line starting with kResultMarker; nothing else is parsed.
#pragma once

#include "core/run/runner.hpp"

#include <string>
#include <vector>

namespace lca::core {

inline constexpr const char* kResultMarker = "LCA_CELL_RESULT ";

// argv_prefix: the command that runs one cell, without the cell itself, e.g.
// {"/path/lcahost", "--plugins", DIR, "run-cell", "--matrix", SPEC}; "--cell", JSON are appended.
CellResult run_isolated(const std::vector<std::string>& argv_prefix, const Cell& cell,
                        double timeout_s);

}  // namespace lca::core
