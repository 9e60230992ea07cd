// Results: JSON Lines (one cell a line, flushed as it finishes), a CSV twin, and the
// nccl-tests-style terminal table. Used by the CLI's run command and by tests.
// Rule: a line is written and flushed the moment its cell ends, so a crash loses at most the
// cell in flight; --resume reads the same file back.
#pragma once

#include "core/run/runner.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <set>
#include <string>

namespace lca::core {

class ResultsWriter {
 public:
  // append: keep what is there (resume); otherwise start a new file. The CSV is <stem>.csv.
  ResultsWriter(const std::filesystem::path& jsonl, bool append);
  void write_run(const nlohmann::json& run_info);
  void write_cell(const CellResult& r);
  void write_summary(const nlohmann::json& summary);
  const std::filesystem::path& path() const { return jsonl_path_; }

 private:
  std::filesystem::path jsonl_path_;
  std::ofstream jsonl_;
  std::ofstream csv_;
};

// Keys (Cell::key) of the cells already in a results file; missing file = empty set.
std::set<std::string> completed_cell_keys(const std::filesystem::path& jsonl);

// All cell results of a file (for reports and compare).
std::vector<CellResult> read_cell_results(const std::filesystem::path& jsonl);

class TablePrinter {
 public:
  explicit TablePrinter(std::ostream& out) : out_(out) {}
  void header();
  void row(size_t index, size_t total, const CellResult& r, double elapsed_s, double eta_s);
  void summary(const std::map<std::string, int>& counts, double elapsed_s);

 private:
  std::ostream& out_;
};

std::string format_duration(double seconds);
std::string format_bytes(size_t bytes);

}  // namespace lca::core
