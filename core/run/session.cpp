// Matrix runs; see session.hpp.
#include "core/run/session.hpp"

#include "core/report/results.hpp"
#include "core/run/isolate.hpp"
#include "core/run/stop_signal.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <utility>

namespace lca::core {

bool SessionSummary::healthy() const {
  for (const auto& [name, n] : counts)
    if (const auto status = cell_status_from_string(name); n > 0 && status && is_failure(*status)) return false;
  return true;
}

SessionSummary run_session(const Registry& registry, MaskSource& masks, const MatrixSpec& spec,
                           const std::map<std::string, Backend*>& backends, const HostDevices& devices,
                           const SessionOptions& options, std::ostream& out) {
  SessionSummary summary;
  std::vector<Cell> cells = expand_cells(spec, registry, masks, devices);
  summary.cells = cells.size();

  // The results file is opened (and locked) before its cells are read, so that no other run
  // can add to it in between; a dry run writes nothing and opens nothing.
  std::unique_ptr<ResultsWriter> writer;
  if (!options.dry_run && !options.out.empty()) {
    ResultsFileOptions file_options;
    file_options.append = options.resume;
    file_options.force = options.force;
    if (!spec.source.empty()) file_options.inputs.push_back({spec.source, "the matrix spec"});
    writer = std::make_unique<ResultsWriter>(options.out, file_options);
  }
  if (options.resume && !options.out.empty()) {
    const auto recorded = last_cell_status(options.out);
    const auto done = completed_cell_keys(recorded, options.retry_errors);
    std::vector<Cell> left;
    for (auto& c : cells) {
      if (done.count(c.key())) continue;
      summary.retried += recorded.count(c.key());
      left.push_back(std::move(c));
    }
    summary.resumed = cells.size() - left.size();
    cells = std::move(left);
  }

  out << "# lca matrix '" << spec.name << "' (" << spec.source.string() << "): " << summary.cells
      << " cells";
  if (summary.resumed) out << ", " << summary.resumed << " already in " << options.out.string();
  if (summary.retried) out << ", " << summary.retried << " recorded ERROR, CRASH or TIMEOUT there to run again";
  out << "\n";

  TablePrinter table(out);
  if (options.dry_run) {
    // Each runnable cell's mask is made, as the run would make it: parameters the provider
    // refuses show here, with its message, instead of at run time.
    std::map<std::pair<std::string, int64_t>, std::string> refused;  // (mask, seqlen) -> message
    table.header();
    for (size_t i = 0; i < cells.size(); ++i) {
      CellResult r;
      r.cell = cells[i];
      r.status = cells[i].skip.empty() ? CellStatus::planned : CellStatus::unsupported;
      if (cells[i].skip.empty()) {
        const auto key = std::make_pair(cells[i].mask.label(), cells[i].seqlen);
        auto it = refused.find(key);
        if (it == refused.end()) {
          std::string why;
          try {
            masks.generate(cells[i].mask, cells[i].seqlen, spec.seed);
          } catch (const std::exception& e) {
            why = e.what();
          }
          it = refused.emplace(key, why).first;
        }
        if (!it->second.empty()) {
          r.status = CellStatus::error;
          r.reason = it->second;
        }
      }
      table.row(i + 1, cells.size(), r, 0, 0);
      ++summary.counts[to_string(r.status)];
    }
    return summary;
  }

  if (writer) {
    nlohmann::json run = options.environment;
    run["matrix"] = matrix_record(spec);
    run["cells"] = summary.cells;
    run["resumed"] = summary.resumed;
    if (options.retry_errors) run["retried"] = summary.retried;
    writer->write_run(run);
  }

  RunnerOptions ropt = runner_options(spec);
  ropt.threads = options.threads;
  ropt.gemm_tflops = options.gemm_tflops;
  Runner runner(registry, masks, backends, ropt);
  const double timeout = options.cell_timeout_s > 0 ? options.cell_timeout_s : spec.cell_timeout_s;

  std::optional<StopOnSignal> stop;
  if (options.stop_on_signal) stop.emplace();
  table.header();
  const auto t0 = std::chrono::steady_clock::now();
  double ran_seconds = 0;
  size_t ran = 0;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (stop && StopOnSignal::requested()) {
      summary.stopped_by = StopOnSignal::requested();
      summary.left = cells.size() - i;
      break;
    }
    const Cell& cell = cells[i];
    CellResult r;
    if (!cell.skip.empty()) {
      r = runner.run_cell(cell);  // records X without running
    } else if (options.isolate) {
      r = run_isolated(options.child_argv, cell, timeout);
    } else {
      r = runner.run_cell(cell);
    }
    if (stop && StopOnSignal::requested() && is_broken(r.status)) {
      // The signal reached the cell too (an isolated child in the same process group, a Python
      // peer's KeyboardInterrupt): no record, so that --resume runs it again.
      summary.stopped_by = StopOnSignal::requested();
      summary.left = cells.size() - i;
      break;
    }
    if (cell.skip.empty()) {
      ran_seconds += r.seconds;
      ++ran;
    }
    if (writer) writer->write_cell(r);
    ++summary.counts[to_string(r.status)];
    size_t runnable_left = 0;
    for (size_t j = i + 1; j < cells.size(); ++j) runnable_left += cells[j].skip.empty();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double eta = ran ? ran_seconds / ran * runnable_left : 0;
    table.row(i + 1, cells.size(), r, elapsed, eta);
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  table.summary(summary.counts, elapsed);
  if (summary.stopped_by) {
    out << "# stopped by " << signal_name(summary.stopped_by) << " with " << summary.left << " of " << summary.cells
        << " cells not run";
    if (writer)
      out << "; continue with the same arguments and --resume " << writer->path().string() << " (instead of --out)";
    out << "\n";
  }
  if (writer) {
    nlohmann::json record{{"counts", summary.counts}, {"elapsed_s", elapsed}};
    if (summary.stopped_by) {
      record["stopped_by"] = signal_name(summary.stopped_by);
      record["cells_left"] = summary.left;
    }
    writer->write_summary(record);
    writer->finish();
    out << "# results: " << writer->path().string() << " (and .csv)\n";
  }
  return summary;
}

}  // namespace lca::core
