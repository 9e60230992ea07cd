// Cell statuses: each one's name in the records is pinned (old results files must still read
// back), names and statuses map one to one, an unknown name is refused with the names that are
// known, and what counts as timed or as a failure agrees with the Python reports' lists.
#include "core/report/results.hpp"
#include "core/run/runner.hpp"
#include "core/run/session.hpp"
#include "core/run/status.hpp"
#include "run_support.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace lca::test {
namespace {

using core::CellStatus;

const std::vector<std::pair<CellStatus, std::string>> kRecordNames{
    {CellStatus::ok, "ok"},       {CellStatus::unsupported, "X"}, {CellStatus::out_of_memory, "E"},
    {CellStatus::fail, "FAIL"},   {CellStatus::error, "ERROR"},   {CellStatus::crash, "CRASH"},
    {CellStatus::timeout, "TIMEOUT"}, {CellStatus::planned, "plan"},
};

TEST(CellStatus, RecordNamesAreFixedAndReadBack) {
  for (const auto& [status, name] : kRecordNames) {
    EXPECT_EQ(core::to_string(status), name);
    EXPECT_EQ(core::cell_status_from_string(name), status) << name;
    EXPECT_EQ(core::parse_cell_status(name), status) << name;
    std::ostringstream printed;
    printed << status;
    EXPECT_EQ(printed.str(), name);
  }
}

TEST(CellStatus, UnknownNamesAreRefusedNamingTheKnownOnes) {
  for (const char* name : {"", "OK", "fail", "x", "SKIP"}) EXPECT_FALSE(core::cell_status_from_string(name)) << name;
  try {
    core::parse_cell_status("SKIP");
    FAIL() << "an unknown status was accepted";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'SKIP'"), std::string::npos) << what;
    EXPECT_NE(what.find("ok, X, E, FAIL, ERROR, CRASH, TIMEOUT, plan"), std::string::npos) << what;
  }
}

// The Python reports (tools/lca_report/results.py) keep their own lists of the same names.
std::set<std::string> python_tuple(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return {};
  std::set<std::string> names;
  const std::string inside = m[1];
  const std::regex quoted("\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(inside.begin(), inside.end(), quoted); it != std::sregex_iterator(); ++it)
    names.insert((*it)[1]);
  return names;
}

TEST(CellStatus, TimedAndFailureAgreeWithThePythonReports) {
  std::ifstream in(std::string(LCA_TEST_SOURCE_DIR) + "/tools/lca_report/results.py");
  ASSERT_TRUE(in) << "tools/lca_report/results.py";
  const std::string py((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::set<std::string> failures, timed;
  for (const auto& [status, name] : kRecordNames) {
    if (core::is_failure(status)) failures.insert(name);
    if (core::is_timed(status)) timed.insert(name);
  }
  EXPECT_EQ(failures, (std::set<std::string>{"FAIL", "ERROR", "CRASH", "TIMEOUT"}));
  EXPECT_EQ(timed, (std::set<std::string>{"ok", "FAIL"}));
  EXPECT_EQ(python_tuple(py, R"(PROBLEMS = \(([^)]*)\))"), failures);
  EXPECT_EQ(python_tuple(py, R"(cell\.get\("status"\) in \(([^)]*)\))"), timed);
}

TEST(CellStatus, SummaryIsHealthyUnlessAFailureCounted) {
  core::SessionSummary s;
  s.counts = {{"ok", 3}, {"X", 2}, {"E", 1}, {"plan", 4}, {"FAIL", 0}};
  EXPECT_TRUE(s.healthy());
  for (const char* bad : {"FAIL", "ERROR", "CRASH", "TIMEOUT"}) {
    core::SessionSummary one = s;
    one.counts[bad] = 1;
    EXPECT_FALSE(one.healthy()) << bad;
  }
}

TEST(CellStatus, TimingsAreRecordedForTimedStatusesOnly) {
  for (const auto& [status, name] : kRecordNames) {
    core::CellResult r;
    r.cell = core::Cell{"k", "cpu", core::MaskSpec::parse("causal"), 64, {2, 1}, 16, "f32", "fwd", ""};
    r.status = status;
    r.times_ms = {1.0};
    const auto j = r.to_json();
    EXPECT_EQ(j["status"], name);
    EXPECT_EQ(j.contains("time_ms"), core::is_timed(status)) << name;
    EXPECT_EQ(core::CellResult::from_json(j).status, status) << name;
  }
}

TEST(CellStatus, AResultsLineWithAnUnknownStatusNamesFileLineAndStatus) {
  TempDir dir;
  const auto file = dir.path() / "old.jsonl";
  core::CellResult r;
  r.cell = core::Cell{"k", "cpu", core::MaskSpec::parse("causal"), 64, {2, 1}, 16, "f32", "fwd", ""};
  r.status = CellStatus::ok;
  auto bad = r.to_json();
  bad["status"] = "SKIP";
  {
    std::ofstream out(file);
    out << r.to_json().dump() << "\n" << bad.dump() << "\n";
  }
  try {
    core::read_cell_results(file);
    FAIL() << "a record with an unknown status was read";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("old.jsonl:2"), std::string::npos) << what;
    EXPECT_NE(what.find("unknown cell status 'SKIP'"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace lca::test
