// A cell's outcome: the one list of statuses a result can carry, the name each has in the records
// (JSON Lines, CSV, the terminal table, tools/lca_report) and what a report makes of it.
// Used by core/run (runner, session, isolate, cp_session), core/report and lcahost.
// Rule: a name is part of the records' format, read back by --resume and the Python reports:
// never rename one; a new status gets a new name here and in tools/lca_report/results.py.
#pragma once

#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace lca::core {

enum class CellStatus {
  ok,             // "ok": ran, timed, and the check passed (or none ran)
  unsupported,    // "X": the kernel or the run cannot do this cell (manifest, plan, no device)
  out_of_memory,  // "E": an allocation was refused
  fail,           // "FAIL": ran and timed, outside the check's tolerance
  error,          // "ERROR": any other failure of the cell
  crash,          // "CRASH": the isolated cell's process died without a result
  timeout,        // "TIMEOUT": the isolated cell's process ran past its time and was killed
  planned,        // "plan": a dry run's cell that would run
};

// The name in the records ("ok", "X", "E", "FAIL", "ERROR", "CRASH", "TIMEOUT", "plan").
const char* to_string(CellStatus status);
// The status a record's name stands for; nullopt for a name that is none of them.
std::optional<CellStatus> cell_status_from_string(std::string_view name);
// As cell_status_from_string, but an unknown name throws std::runtime_error naming it and the
// names that are known.
CellStatus parse_cell_status(std::string_view name);

inline std::ostream& operator<<(std::ostream& out, CellStatus status) { return out << to_string(status); }

// Ran to the end with a time (ok and FAIL): a record carries time_ms, tflops and peak bytes.
inline bool is_timed(CellStatus s) { return s == CellStatus::ok || s == CellStatus::fail; }
// Ended without a result (ERROR, CRASH, TIMEOUT): what a signal that reached the cell leaves, and
// what --retry-errors runs again; FAIL, X and E are results.
inline bool is_broken(CellStatus s) {
  return s == CellStatus::error || s == CellStatus::crash || s == CellStatus::timeout;
}
// Makes a run unhealthy (FAIL, ERROR, CRASH, TIMEOUT); X and E are facts about the kernel.
inline bool is_failure(CellStatus s) {
  return s == CellStatus::fail || s == CellStatus::error || s == CellStatus::crash || s == CellStatus::timeout;
}

// Thrown inside a cell's run to end it with this status and what() as the record's reason; any
// other exception ends it as ERROR.
struct CellFailure : std::runtime_error {
  CellFailure(CellStatus status, const std::string& reason) : std::runtime_error(reason), status(status) {}
  CellStatus status;
};

}  // namespace lca::core
