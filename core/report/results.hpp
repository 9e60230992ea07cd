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
#include <utility>
#include <vector>

namespace lca::core {

// How a results file is opened. A file that exists and is not empty is never replaced unless
// `force`; `append` (resume) needs one with a run record in it (or none at all).
struct ResultsFileOptions {
  bool append = false;
  bool force = false;
  // Files this run reads (the matrix spec): the results file must not be one of them.
  std::vector<std::pair<std::filesystem::path, std::string>> inputs;  // path, what it is
};

// Writes a results file: every line in one write(2), checked, so that a full disk or a lost
// device is an error naming the file and what was written before stays.
// Lifetime: holds an exclusive lock (flock) on the .jsonl from construction to destruction; a
// second writer of the same file, in this process or another, is refused with the holder's pid.
class ResultsWriter {
 public:
  // The CSV twin is <stem>.csv beside a regular file (none for a device such as /dev/full).
  // Throws std::runtime_error naming the file and the fix.
  ResultsWriter(const std::filesystem::path& jsonl, const ResultsFileOptions& options);
  ~ResultsWriter();
  ResultsWriter(const ResultsWriter&) = delete;
  ResultsWriter& operator=(const ResultsWriter&) = delete;

  void write_run(const nlohmann::json& run_info);
  void write_cell(const CellResult& r);
  void write_summary(const nlohmann::json& summary);
  // Flushes to the disk (fsync) and closes; throws where that fails. The destructor closes too,
  // silently.
  void finish();
  const std::filesystem::path& path() const { return jsonl_path_; }

 private:
  void write_line(int fd, const std::filesystem::path& file, const std::string& line);
  std::filesystem::path jsonl_path_;
  std::filesystem::path csv_path_;
  int jsonl_fd_ = -1;
  int csv_fd_ = -1;
};

// What a results file holds, for --resume: whether it has a run record (it is a results file),
// and which lines are not JSON (cut short by a crash mid-write).
struct ResultsFileState {
  bool exists = false;
  uintmax_t bytes = 0;
  bool has_run_record = false;
  int lines = 0;
  std::vector<int> broken_lines;  // 1-based
  bool last_line_torn = false;    // the last line has no '\n' and is not JSON
};
ResultsFileState inspect_results_file(const std::filesystem::path& jsonl);

// Each cell's last status in a results file, by key (Cell::key); missing file = empty map.
std::map<std::string, CellStatus> last_cell_status(const std::filesystem::path& jsonl);
// Keys of the cells already in a results file. With `retry_errors`, a cell whose last record is
// ERROR, CRASH or TIMEOUT (is_broken) is not among them: it runs again, and its new record,
// appended, is the one reports read.
std::set<std::string> completed_cell_keys(const std::map<std::string, CellStatus>& last, bool retry_errors = false);
std::set<std::string> completed_cell_keys(const std::filesystem::path& jsonl, bool retry_errors = false);

// All cell results of a file (for reports and compare).
std::vector<CellResult> read_cell_results(const std::filesystem::path& jsonl);

class TablePrinter {
 public:
  explicit TablePrinter(std::ostream& out) : out_(out) {}
  void header();
  void row(size_t index, size_t total, const CellResult& r, double elapsed_s, double eta_s);
  // The counts, then each distinct reason of a FAIL, ERROR, CRASH or TIMEOUT row that the table
  // cut short, whole, with its status and how many rows gave it (at most kWholeReasons of them).
  void summary(const std::map<std::string, int>& counts, double elapsed_s);

  static constexpr size_t kWholeReasons = 10;

 private:
  std::ostream& out_;
  // Reasons cut in a row, in the order first met: (status, reason) -> rows.
  std::vector<std::pair<std::pair<std::string, std::string>, int>> cut_reasons_;
};

std::string format_duration(double seconds);
std::string format_bytes(size_t bytes);

}  // namespace lca::core
