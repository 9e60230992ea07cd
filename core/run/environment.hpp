// The run's environment as JSON: host, CPU, OS, compiler, lca version and git revision, ABI,
// loaded plugins, and the GPU with its measured ceilings when one is used.
// Rule: collected once per run, before the first cell, and written as the results' first line.
#pragma once

#include "core/plugin/registry.hpp"

#include <nlohmann/json.hpp>

namespace lca::core {

nlohmann::json collect_environment(const Registry& registry);

// The GPU a run uses (name, SMs, clocks, memory, driver, CUDA, cuDNN, NCCL, cuBLAS) and, when
// measure is true, its two measured ceilings: {"gemm_tflops", "copy_gbps"}. CUDA builds only.
nlohmann::json collect_gpu_environment(int device, bool measure_ceilings);

}  // namespace lca::core
