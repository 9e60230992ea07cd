// The run's environment as JSON: host, CPU, OS, compiler, lca version and git revision, ABI,
// loaded plugins, and the GPU with its measured ceilings when one is used.
// Rule: collected once per run, before the first cell, and written as the results' first line.
#pragma once

#include "core/plugin/registry.hpp"

#include <nlohmann/json.hpp>

namespace lca::core {

nlohmann::json collect_environment(const Registry& registry);

}  // namespace lca::core
