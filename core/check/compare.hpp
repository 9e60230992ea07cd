// Correctness of a cell: the reference kernel recomputes the same cell (fp32 inputs holding the
// very values the kernel saw, fp64 or fp32 accumulation) and each output is compared.
// Rule: the reference runs outside the timed region and never on the kernel's own outputs.
#pragma once

#include "core/plugin/registry.hpp"
#include "core/run/backend.hpp"

#include <lca/abi.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lca::core {

struct ErrorStats {
  double rel_l2 = 0;      // ||x - ref|| / ||ref||
  double max_abs = 0;
  int64_t non_finite = 0; // NaN/Inf where the reference is finite (unwritten output, overflow)
  int64_t count = 0;
};

struct CheckResult {
  bool ran = false;
  bool passed = true;
  double tolerance = 0;
  std::string note;  // e.g. "sampled kv groups 0,5 of 8"
  std::map<std::string, ErrorStats> errors;  // "o", "lse", "dq", "dk", "dv"
  nlohmann::json to_json() const;
};

double default_tolerance(int32_t dtype, bool backward);

// Tensors of one cell as the runner holds them (device or host pointers, THD, contiguous).
struct CellBuffers {
  void* q = nullptr;
  void* k = nullptr;
  void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  void* d_o = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
};

struct CheckOptions {
  // Upper bound on the reference's forward FLOPs per cell; whole kv groups are sampled to stay
  // under it (at least one group is always checked).
  double max_reference_flops = 4e12;
  bool backward = false;
};

// What the reference computed for a cell's problem, on the sampled heads only (fp32, THD over
// those heads). It depends on the inputs, the mask and the options, not on the kernel under
// test: a runner may keep it for the next kernel of the same problem.
struct ReferenceOutputs {
  std::vector<int> q_heads, kv_heads;  // the sampled heads, ascending
  std::string note;                    // e.g. "checked kv groups 0 4 of 8"; empty when all
  std::vector<float> o, lse, dq, dk, dv;  // lse [heads, tokens]; dq/dk/dv only for backward
};

// Runs the reference on the cell's inputs (buffers: q, k, v and, for backward, d_o). Throws
// std::runtime_error if the reference itself fails.
ReferenceOutputs compute_reference(Backend& backend, KernelInstance& reference, const lca_problem& problem,
                                   const lca_mask& mask, const CellBuffers& buffers, const CheckOptions& options);

// Compares the cell's outputs (buffers: o, lse and, for backward, dq, dk, dv) with the reference's.
CheckResult compare_to_reference(Backend& backend, const lca_problem& problem, const CellBuffers& buffers,
                                 const ReferenceOutputs& reference, const CheckOptions& options);

// Both in one: runs the reference on the cell's inputs and compares.
CheckResult check_cell(Backend& backend, KernelInstance& reference, const lca_problem& problem,
                       const lca_mask& mask, const CellBuffers& buffers, const CheckOptions& options);

}  // namespace lca::core
