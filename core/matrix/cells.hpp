// Cells: the expanded matrix. Every combination the spec names becomes a cell, runnable or
// skipped with its reason (the paper's X); nothing is silently dropped.
// Rule: cells are ordered so that every kernel of one problem runs back to back on the same inputs.
#pragma once

#include "core/mask/mask_source.hpp"
#include "core/matrix/spec.hpp"
#include "core/plugin/registry.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace lca::core {

struct Cell {
  std::string kernel;   // the plugin
  std::string device;   // "cpu" or "cuda"
  MaskSpec mask;
  int64_t seqlen = 0;
  HeadConfig heads;
  int head_dim = 0;
  std::string dtype;
  std::string pass;     // "fwd" or "bwd"
  std::string skip;     // "" when runnable, else the reason (shown after X)
  // The matrix's label of the kernel's row (KernelEntry) and the options it is created with; a
  // plain kernel's label is its name ("" reads as the name) and its options {}.
  std::string label;
  nlohmann::json options = nlohmann::json::object();

  // The name of the cell's row in records, tables and reports: the label, else the kernel.
  const std::string& row() const { return label.empty() ? kernel : label; }
  // Identity for --resume: everything that makes the cell what it is.
  std::string key() const;
  nlohmann::json to_json() const;
  static Cell from_json(const nlohmann::json& j);
};

// What the host has to run on.
struct HostDevices {
  int gpu_count = 0;
  int gpu_cc = 0;  // compute capability * 10 of the selected GPU
};

// Expands a spec against the loaded plugins. Throws std::runtime_error for a name in the spec
// that matches nothing (an unknown kernel or mask), naming it and what exists.
std::vector<Cell> expand_cells(const MatrixSpec& spec, const Registry& registry,
                               const MaskSource& masks, const HostDevices& devices);

}  // namespace lca::core
