// run_session in process: every cell of a tiny matrix is recorded with its measurements and its
// check; skipped cells are X with a reason; E and FAIL are results and the run goes on.
#include "core/report/results.hpp"
#include "core/run/backend.hpp"
#include "core/run/cp_timing.hpp"
#include "core/run/runner.hpp"
#include "core/run/session.hpp"
#include "run_support.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

namespace lca::test {
namespace {

using nlohmann::json;

class Session : public ::testing::Test {
 protected:
  Session() {
    folder_.with_masks().with_reference().with_cases({"good", "oom", "wrong_numbers"});
    registry_ = std::make_unique<core::Registry>(core::Registry::load(folder_.path()));
    masks_ = std::make_unique<core::MaskSource>(*registry_);
    backend_ = core::make_cpu_backend();
  }
  core::SessionSummary run(const std::string& spec_text, core::SessionOptions options = {}) {
    const auto spec = core::parse_matrix_spec(json::parse(spec_text), "/specs/tiny.json");
    output_.str("");
    return core::run_session(*registry_, *masks_, spec, {{"cpu", backend_.get()}}, {}, options, output_);
  }
  core::SessionOptions to(const fs::path& out) {
    core::SessionOptions o;
    o.out = out;
    o.threads = 1;
    return o;
  }

  PluginFolder folder_;
  TempDir results_;
  std::unique_ptr<core::Registry> registry_;
  std::unique_ptr<core::MaskSource> masks_;
  std::unique_ptr<core::Backend> backend_;
  std::ostringstream output_;
};

TEST_F(Session, EveryCellIsRecordedWithItsMeasurements) {
  const auto out = results_ / "tiny.jsonl";
  const auto summary = run(kTinySpec, to(out));
  EXPECT_EQ(summary.cells, 16u);
  EXPECT_EQ(summary.counts.at("ok"), 12);
  EXPECT_EQ(summary.counts.at("X"), 4);
  EXPECT_TRUE(summary.healthy());

  const Records rec = read_records(out);
  EXPECT_EQ(rec.unparseable, 0);
  ASSERT_EQ(rec.runs.size(), 1u);
  EXPECT_EQ(rec.runs[0]["cells"], 16);
  EXPECT_EQ(rec.runs[0]["matrix"]["seed"], 7);
  ASSERT_EQ(rec.summaries.size(), 1u);
  EXPECT_EQ(rec.summaries[0]["counts"]["ok"], 12);
  ASSERT_EQ(rec.cells.size(), 16u);
  EXPECT_EQ(json::parse(read_lines(out).front())["type"], "run") << "the run record comes first";
  EXPECT_EQ(json::parse(read_lines(out).back())["type"], "summary") << "and the summary last";

  std::set<std::string> keys;
  for (const auto& c : rec.cells) {
    SCOPED_TRACE(c.dump());
    keys.insert(cell_key(c));
    const bool bwd = c["pass"] == "bwd";
    if (c["kernel"] == "fx_good" && c["heads_q"] == 4) {
      EXPECT_EQ(c["status"], "X");
      EXPECT_EQ(c["reason"], "no-gqa");
      EXPECT_FALSE(c.contains("time_ms"));
      continue;
    }
    ASSERT_EQ(c["status"], "ok");
    // FLOPs from the unmasked area only: 4 * area * head_dim * heads_q, x2.5 backward.
    const int64_t area = c["mask"] == "full" ? 64 * 64 : 64 * 65 / 2;
    EXPECT_EQ(c["area"], area);
    EXPECT_DOUBLE_EQ(c["flops"].get<double>(), (bwd ? 2.5 : 1.0) * 4.0 * area * 16 * c["heads_q"].get<int>());
    EXPECT_GT(c["tflops"].get<double>(), 0);
    EXPECT_EQ(c["time_ms"]["all"].size(), 2u);
    EXPECT_LE(c["time_ms"]["min"].get<double>(), c["time_ms"]["median"].get<double>());
    EXPECT_LE(c["time_ms"]["median"].get<double>(), c["time_ms"]["max"].get<double>());
    EXPECT_GT(c["total_peak_bytes"].get<size_t>(), 0u);
    if (c["kernel"] == "fx_good") EXPECT_GE(c["attn_peak_bytes"].get<size_t>(), 64u * 64u) << "its dense mask";
    ASSERT_TRUE(c.contains("check"));
    EXPECT_TRUE(c["check"]["ran"].get<bool>());
    EXPECT_TRUE(c["check"]["passed"].get<bool>());
    const auto& errors = c["check"]["errors"];
    for (const char* t : {"o", "lse"}) {
      ASSERT_TRUE(errors.contains(t)) << t;
      EXPECT_LT(errors[t]["rel_l2"].get<double>(), 1e-4);
      EXPECT_EQ(errors[t]["non_finite"], 0);
    }
    for (const char* t : {"dq", "dk", "dv"}) EXPECT_EQ(errors.contains(t), bwd) << t;
  }
  EXPECT_EQ(keys.size(), 16u);

  // The CSV twin: a header and one row a cell, in the same order.
  const auto csv = read_lines(results_ / "tiny.csv");
  ASSERT_EQ(csv.size(), 17u);
  EXPECT_EQ(csv[0].rfind("kernel,device,mask,seqlen,heads_q,heads_kv,head_dim,dtype,pass,status,", 0), 0u) << csv[0];
  int ok_rows = 0;
  for (size_t i = 1; i < csv.size(); ++i) {
    EXPECT_EQ(csv[i].rfind(rec.cells[i - 1]["kernel"].get<std::string>() + ",cpu,", 0), 0u) << csv[i];
    ok_rows += csv[i].find(",ok,") != std::string::npos;
  }
  EXPECT_EQ(ok_rows, 12);

  // The terminal table: a row per cell and the summary line.
  EXPECT_NE(output_.str().find("16/16"), std::string::npos) << output_.str();
  EXPECT_NE(output_.str().find("summary: X=4 ok=12"), std::string::npos) << output_.str();
}

TEST_F(Session, ResumeRunsOnlyWhatIsMissing) {
  const auto full = results_ / "full.jsonl";
  run(kTinySpec, to(full));
  const auto lines = read_lines(full);
  ASSERT_EQ(lines.size(), 18u);  // run, 16 cells, summary

  // A run that stopped after 5 cells.
  const auto partial = results_ / "partial.jsonl";
  std::string head;
  for (int i = 0; i < 6; ++i) head += lines[i] + "\n";
  write_text(partial, head);
  auto o = to(partial);
  o.resume = true;
  const auto summary = run(kTinySpec, o);
  EXPECT_EQ(summary.resumed, 5u);
  int ran = 0;
  for (const auto& [status, n] : summary.counts) ran += n;
  EXPECT_EQ(ran, 11);
  EXPECT_EQ(read_text(partial).rfind(head, 0), 0u) << "what was there is kept, new lines are appended";

  const Records rec = read_records(partial);
  EXPECT_EQ(rec.unparseable, 0);
  EXPECT_EQ(rec.runs.size(), 2u);
  EXPECT_EQ(rec.runs[1]["resumed"], 5);
  ASSERT_EQ(rec.cells.size(), 16u);
  std::set<std::string> keys;
  for (const auto& c : rec.cells) keys.insert(cell_key(c));
  EXPECT_EQ(keys.size(), 16u) << "no cell twice, none missing";

  // Resuming a complete file runs nothing.
  const auto again = run(kTinySpec, o);
  EXPECT_EQ(again.resumed, 16u);
  EXPECT_TRUE(again.counts.empty());
  EXPECT_EQ(read_records(partial).cells.size(), 16u);
}

TEST_F(Session, ResumeToleratesATornLastLine) {
  const auto full = results_ / "full.jsonl";
  run(kTinySpec, to(full));
  const auto lines = read_lines(full);
  // A crash in the middle of writing the 4th cell: 3 whole cells and half a line.
  const auto torn = results_ / "torn.jsonl";
  write_text(torn, lines[0] + "\n" + lines[1] + "\n" + lines[2] + "\n" + lines[3] + "\n" +
                       lines[4].substr(0, lines[4].size() / 2));
  auto o = to(torn);
  o.resume = true;
  core::SessionSummary summary;
  ASSERT_NO_THROW(summary = run(kTinySpec, o));
  EXPECT_EQ(summary.resumed, 3u);
  const auto cells = core::read_cell_results(torn);
  std::set<std::string> keys;
  for (const auto& c : cells) keys.insert(c.cell.key());
  EXPECT_EQ(keys.size(), 16u) << "the torn cell ran again";
  EXPECT_EQ(cells.size(), 16u);
}

// --retry-errors: a cell whose last record is ERROR, CRASH or TIMEOUT runs again on --resume and its
// new record is appended (reports read the last one); ok, X, E and FAIL records stay as they are.
TEST_F(Session, RetryErrorsRunsTheCellsThatBrokeAgain) {
  const auto out = results_ / "broken.jsonl";
  run(kTinySpec, to(out));
  auto lines = read_lines(out);
  // Two ok cells as a crash and a transient error would have left them, and one as FAIL.
  std::vector<std::string> broken_keys;
  int changed = 0;
  for (auto& line : lines) {
    json j = json::parse(line);
    if (j["type"] != "cell" || j["status"] != "ok") continue;
    const char* status = changed == 0 ? "CRASH" : changed == 1 ? "ERROR" : "FAIL";
    j["status"] = status;
    j["reason"] = "made up by the test";
    if (changed < 2) broken_keys.push_back(cell_key(j));
    line = j.dump();
    if (++changed == 3) break;
  }
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  write_text(out, text);

  auto o = to(out);
  o.resume = true;
  const auto plain = run(kTinySpec, o);
  EXPECT_EQ(plain.resumed, 16u) << "without --retry-errors every recorded cell counts as done";
  EXPECT_TRUE(plain.counts.empty());

  o.retry_errors = true;
  const auto retried = run(kTinySpec, o);
  EXPECT_EQ(retried.retried, 2u);
  EXPECT_EQ(retried.resumed, 14u);
  EXPECT_EQ(retried.counts.at("ok"), 2);
  EXPECT_NE(output_.str().find("2 recorded ERROR, CRASH or TIMEOUT there to run again"), std::string::npos)
      << output_.str();
  const Records rec = read_records(out);
  EXPECT_EQ(rec.cells.size(), 18u) << "the two new records are appended";
  EXPECT_EQ(rec.runs.back()["retried"], 2);
  std::map<std::string, std::string> last;
  for (const auto& c : rec.cells) last[cell_key(c)] = c["status"];
  for (const auto& key : broken_keys) EXPECT_EQ(last[key], "ok") << key;
  EXPECT_EQ(std::count_if(last.begin(), last.end(), [](const auto& kv) { return kv.second == "FAIL"; }), 1)
      << "FAIL is a result: not run again";

  const auto again = run(kTinySpec, o);
  EXPECT_EQ(again.retried, 0u) << "the cells' last records are ok now";
  EXPECT_TRUE(again.counts.empty());
}

// Resuming a file whose last line is torn starts on a new line, so the resumed run's record
// does not join the fragment and get lost with it.
TEST_F(Session, ResumeAfterATornLineKeepsTheNewRunRecord) {
  const auto full = results_ / "full.jsonl";
  run(kTinySpec, to(full));
  const auto lines = read_lines(full);
  const auto torn = results_ / "torn.jsonl";
  write_text(torn, lines[0] + "\n" + lines[1] + "\n" + lines[2].substr(0, 40));
  auto o = to(torn);
  o.resume = true;
  run(kTinySpec, o);
  const Records rec = read_records(torn);
  EXPECT_EQ(rec.unparseable, 1) << "only the torn fragment";
  EXPECT_EQ(rec.runs.size(), 2u) << "the resumed run's record survives";
}

TEST_F(Session, OutOfMemoryIsEAndTheRunGoesOn) {
  const auto out = results_ / "oom.jsonl";
  const auto summary = run(R"({"kernels": ["fx_oom", "fx_good"], "masks": ["causal"], "seqlens": [32],
      "heads": ["1:1"], "head_dims": [16], "dtypes": ["f32"], "passes": ["fwd"], "warmup": 0, "repeats": 1})",
                           to(out));
  EXPECT_EQ(summary.counts.at("E"), 1);
  EXPECT_EQ(summary.counts.at("ok"), 1);
  EXPECT_TRUE(summary.healthy()) << "E is a result, not a failure of the run";
  const Records rec = read_records(out);
  ASSERT_EQ(rec.cells.size(), 2u);
  EXPECT_EQ(rec.cells[0]["kernel"], "fx_oom");
  EXPECT_EQ(rec.cells[0]["status"], "E");
  EXPECT_NE(rec.cells[0]["reason"].get<std::string>().find("deliberately out of memory"), std::string::npos);
  EXPECT_FALSE(rec.cells[0].contains("time_ms"));
  EXPECT_EQ(rec.cells[1]["status"], "ok");
  EXPECT_EQ(backend_->current_bytes(), 0u) << "every buffer of the failed cell went back";
}

// A wrong kernel fails its check and a good one passes: on a small cell, and on outputs of over
// 65536 elements (500 tokens x 16 heads x 16), which are compared in runs on several threads and
// summed in order.
TEST_F(Session, WrongNumbersFail) {
  int n = 0;
  for (const char* shape : {R"("masks": ["full"], "seqlens": [32], "heads": ["1:1"])",
                            R"("masks": ["causal"], "seqlens": [500], "heads": ["16:16"])"}) {
    SCOPED_TRACE(shape);
    const auto out = results_ / ("wrong" + std::to_string(n++) + ".jsonl");
    const auto summary = run(std::string(R"({"kernels": ["fx_wrong", "fx_good"], )") + shape +
                                 R"(, "head_dims": [16], "dtypes": ["f32"], "passes": ["fwd"], "warmup": 0, "repeats": 1})",
                             to(out));
    EXPECT_EQ(summary.counts.at("FAIL"), 1);
    EXPECT_EQ(summary.counts.at("ok"), 1);
    EXPECT_FALSE(summary.healthy());
    const Records rec = read_records(out);
    ASSERT_EQ(rec.cells.size(), 2u);
    const auto& fail = rec.cells[0];
    EXPECT_EQ(fail["status"], "FAIL");
    EXPECT_FALSE(fail["check"]["passed"].get<bool>());
    EXPECT_GT(fail["check"]["errors"]["o"]["rel_l2"].get<double>(), fail["check"]["tolerance"].get<double>());
    EXPECT_NE(fail["reason"].get<std::string>().find("outside tolerance"), std::string::npos);
    EXPECT_TRUE(fail.contains("time_ms")) << "a FAIL cell is still timed";
    const auto& good = rec.cells[1];
    EXPECT_TRUE(good["check"]["passed"].get<bool>());
    EXPECT_LE(good["check"]["errors"]["o"]["rel_l2"].get<double>(), 1e-6);
    EXPECT_EQ(good["check"]["errors"]["o"]["non_finite"].get<int64_t>(), 0);
  }
}

TEST_F(Session, TheReferenceRunsOncePerProblemAndPass) {
  // Kernels of one problem share the reference's outputs; a wrong kernel between two good ones
  // fails without spoiling what the next one is compared with, and a new problem runs it again.
  core::Runner runner(*registry_, *masks_, {{"cpu", backend_.get()}}, core::RunnerOptions{});
  core::Cell cell{"fx_good", "cpu", core::MaskSpec::parse("causal"), 48, {4, 2}, 16, "f32", "fwd", ""};
  EXPECT_EQ(runner.run_cell(cell).status, core::CellStatus::ok);
  cell.kernel = "fx_wrong";
  const auto wrong = runner.run_cell(cell);
  EXPECT_EQ(wrong.status, core::CellStatus::fail);
  EXPECT_GT(wrong.check.errors.at("o").rel_l2, wrong.check.tolerance);
  cell.kernel = "cpu_reference";
  const auto same = runner.run_cell(cell);
  EXPECT_EQ(same.status, core::CellStatus::ok);
  EXPECT_LT(same.check.errors.at("o").rel_l2, 1e-6) << "the reference against its kept outputs";
  EXPECT_EQ(runner.reference_runs(), 1);

  cell.pass = "bwd";
  for (const char* k : {"fx_good", "cpu_reference"}) {
    cell.kernel = k;
    const auto r = runner.run_cell(cell);
    EXPECT_EQ(r.status, core::CellStatus::ok) << k << ": " << r.reason;
    EXPECT_TRUE(r.check.errors.count("dk")) << k;
  }
  EXPECT_EQ(runner.reference_runs(), 2) << "one backward reference for both kernels";

  cell.seqlen = 40;  // another problem
  EXPECT_EQ(runner.run_cell(cell).status, core::CellStatus::ok);
  cell.mask = core::MaskSpec::parse("full");
  EXPECT_EQ(runner.run_cell(cell).status, core::CellStatus::ok);
  EXPECT_EQ(runner.reference_runs(), 4);
  EXPECT_EQ(backend_->current_bytes(), 0u);
}

TEST_F(Session, HostOutOfMemoryIsE) {
  auto tiny = core::make_cpu_backend(1024);  // less than Q alone
  core::Runner runner(*registry_, *masks_, {{"cpu", tiny.get()}}, core::RunnerOptions{});
  core::Cell cell;
  cell.kernel = "fx_good";
  cell.device = "cpu";
  cell.mask = core::MaskSpec::parse("causal");
  cell.seqlen = 64;
  cell.heads = {2, 2};
  cell.head_dim = 16;
  cell.dtype = "f32";
  cell.pass = "fwd";
  const auto r = runner.run_cell(cell);
  EXPECT_EQ(r.status, core::CellStatus::out_of_memory);
  EXPECT_NE(r.reason.find("out of memory allocating"), std::string::npos) << r.reason;
  EXPECT_EQ(tiny->current_bytes(), 0u);

  cell.device = "cuda";  // no backend for it in this run
  EXPECT_EQ(runner.run_cell(cell).status, core::CellStatus::unsupported);
}

TEST_F(Session, UncheckedWithoutAReference) {
  PluginFolder bare;
  bare.with_masks().with_case("good");
  const auto reg = core::Registry::load(bare.path());
  core::MaskSource masks(reg);
  core::Runner runner(reg, masks, {{"cpu", backend_.get()}}, core::RunnerOptions{});
  core::Cell cell{"fx_good", "cpu", core::MaskSpec::parse("causal"), 32, {1, 1}, 16, "f32", "fwd", ""};
  const auto r = runner.run_cell(cell);
  EXPECT_EQ(r.status, core::CellStatus::ok);
  EXPECT_FALSE(r.check.ran);
  EXPECT_NE(r.reason.find("unchecked"), std::string::npos) << r.reason;
}

TEST_F(Session, CellsLongerThanCheckMaxSeqlenRunUncheckedAndSaySo) {
  core::RunnerOptions o;
  o.check_max_seqlen = 40;
  core::Runner runner(*registry_, *masks_, {{"cpu", backend_.get()}}, o);
  core::Cell cell{"fx_wrong", "cpu", core::MaskSpec::parse("causal"), 48, {2, 1}, 16, "f32", "fwd", ""};
  const auto over = runner.run_cell(cell);  // wrong numbers, but over the limit: timed, not checked
  EXPECT_EQ(over.status, core::CellStatus::ok) << over.reason;
  EXPECT_FALSE(over.check.ran);
  EXPECT_NE(over.reason.find("unchecked: 48 tokens, over check_max_seqlen 40"), std::string::npos) << over.reason;
  EXPECT_EQ(runner.reference_runs(), 0);
  cell.seqlen = 40;  // at the limit: checked, and the wrong numbers fail
  const auto at = runner.run_cell(cell);
  EXPECT_EQ(at.status, core::CellStatus::fail) << at.reason;
  EXPECT_TRUE(at.check.ran);
  EXPECT_EQ(runner.reference_runs(), 1);

  // From a spec: the run record names the limit.
  const auto out = results_ / "limited.jsonl";
  auto spec = json::parse(kTinySpec);
  spec["check_max_seqlen"] = 1;
  output_.str("");
  core::run_session(*registry_, *masks_, core::parse_matrix_spec(spec, "/specs/tiny.json"), {{"cpu", backend_.get()}},
                    {}, to(out), output_);
  const Records rec = read_records(out);
  ASSERT_EQ(rec.runs.size(), 1u);
  EXPECT_EQ(rec.runs[0]["matrix"]["check_max_seqlen"], 1);
  int ok = 0;
  for (const auto& c : rec.cells)
    if (c.value("status", "") == "ok") {
      ++ok;
      EXPECT_FALSE(c.contains("check")) << c.dump();
    }
  EXPECT_GT(ok, 0);
}

TEST_F(Session, DryRunWritesNothing) {
  const auto out = results_ / "dry.jsonl";
  auto o = to(out);
  o.dry_run = true;
  const auto summary = run(kTinySpec, o);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(results_ / "dry.csv"));
  EXPECT_EQ(summary.counts.at("plan"), 12);
  EXPECT_EQ(summary.counts.at("X"), 4);
  EXPECT_NE(output_.str().find("no-gqa"), std::string::npos) << output_.str();
}

// The runner and the CP session report this one statistic: an even count takes the mean of the two
// middle times (the CP session took the upper one before), order does not matter, none is 0.
// SIGINT or SIGTERM during a run: the cell in flight finishes and is kept, the run stops there and
// says how to go on, and --resume runs the rest. fx_sigint raises SIGINT in its first forward.
class SessionStop : public Session {
 protected:
  SessionStop() {
    folder_.with_case("sigint");
    registry_ = std::make_unique<core::Registry>(core::Registry::load(folder_.path()));
    masks_ = std::make_unique<core::MaskSource>(*registry_);
  }
  static std::string spec(const std::string& kernel) {
    return R"({"kernels": [")" + kernel + R"("], "masks": ["full", "causal", "sliding_window"], "seqlens": [64],
               "heads": ["2:2"], "head_dims": [16], "dtypes": ["f32"], "passes": ["fwd"],
               "warmup": 1, "repeats": 2, "seed": 7})";
  }
  core::SessionOptions stopping(const fs::path& out) {
    auto o = to(out);
    o.stop_on_signal = true;
    return o;
  }
};

TEST_F(SessionStop, TheCellInFlightIsKeptAndTheRunStopsAfterIt) {
  const auto out = results_ / "stopped.jsonl";
  const auto summary = run(spec("fx_sigint"), stopping(out));
  EXPECT_EQ(summary.stopped_by, SIGINT);
  EXPECT_EQ(summary.left, 2u);
  EXPECT_EQ(summary.counts.at("ok"), 1);
  EXPECT_TRUE(summary.healthy());
  EXPECT_NE(output_.str().find("# stopped by SIGINT with 2 of 3 cells not run"), std::string::npos) << output_.str();
  EXPECT_NE(output_.str().find("--resume " + out.string()), std::string::npos) << output_.str();

  Records rec = read_records(out);
  ASSERT_EQ(rec.cells.size(), 1u);
  EXPECT_EQ(rec.cells[0]["status"], "ok");
  EXPECT_EQ(rec.cells[0]["mask"], "full");
  ASSERT_EQ(rec.summaries.size(), 1u);
  EXPECT_EQ(rec.summaries[0]["stopped_by"], "SIGINT");
  EXPECT_EQ(rec.summaries[0]["cells_left"], 2);

  auto o = stopping(out);
  o.resume = true;
  const auto rest = run(spec("fx_sigint"), o);
  EXPECT_EQ(rest.stopped_by, 0);
  EXPECT_EQ(rest.resumed, 1u);
  EXPECT_EQ(rest.counts.at("ok"), 2);
  rec = read_records(out);
  std::set<std::string> masks;
  for (const auto& c : rec.cells) {
    EXPECT_EQ(c["status"], "ok") << c.dump();
    masks.insert(c["mask"].get<std::string>());
  }
  EXPECT_EQ(rec.cells.size(), 3u);
  EXPECT_EQ(masks.size(), 3u) << "each cell once";
}

TEST_F(SessionStop, ACellTheSignalBrokeGetsNoRecordAndResumeRunsIt) {
  // fx_sigint_error fails the call the signal came in, as a Python peer does on KeyboardInterrupt:
  // that ERROR is the interruption, not the kernel's, so it is not recorded.
  const auto out = results_ / "broken.jsonl";
  const auto summary = run(spec("fx_sigint_error"), stopping(out));
  EXPECT_EQ(summary.stopped_by, SIGINT);
  EXPECT_EQ(summary.left, 3u);
  EXPECT_TRUE(summary.counts.empty());
  EXPECT_TRUE(read_records(out).cells.empty());

  auto o = stopping(out);
  o.resume = true;
  const auto rest = run(spec("fx_sigint_error"), o);
  EXPECT_EQ(rest.resumed, 0u);
  EXPECT_EQ(rest.counts.at("ok"), 3);
  EXPECT_EQ(read_records(out).cells.size(), 3u);
}

void count_signal(int) {}

TEST_F(SessionStop, TheCallersHandlersAreBackAfterTheRun) {
  struct sigaction mine {}, before_int {}, before_term {};
  mine.sa_handler = &count_signal;
  sigemptyset(&mine.sa_mask);
  sigaction(SIGINT, &mine, &before_int);
  sigaction(SIGTERM, &mine, &before_term);
  const auto summary = run(spec("fx_sigint"), stopping(results_ / "handlers.jsonl"));
  EXPECT_EQ(summary.stopped_by, SIGINT) << "the run's own handler took the signal";
  struct sigaction after_int {}, after_term {};
  sigaction(SIGINT, &before_int, &after_int);
  sigaction(SIGTERM, &before_term, &after_term);
  EXPECT_EQ(after_int.sa_handler, &count_signal);
  EXPECT_EQ(after_term.sa_handler, &count_signal);
}

TEST(MedianOf, MiddleOrMeanOfTheTwoMiddlesAndTheCellsStats) {
  EXPECT_DOUBLE_EQ(lca::core::median_of({3.0, 1.0, 2.0}), 2.0);
  EXPECT_DOUBLE_EQ(lca::core::median_of({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_DOUBLE_EQ(lca::core::median_of({5.0}), 5.0);
  EXPECT_DOUBLE_EQ(lca::core::median_of({}), 0.0);
  core::CellResult r;
  r.times_ms = {4.0, 1.0, 3.0, 2.0};
  core::set_time_stats(r);
  EXPECT_DOUBLE_EQ(r.median_ms, 2.5);
  EXPECT_DOUBLE_EQ(r.min_ms, 1.0);
  EXPECT_DOUBLE_EQ(r.max_ms, 4.0);
}

// times_steady: two windows of >= kSteadyWindowMs and >= 3 calls each, medians within kSteadyTolerance.
TEST(WarmUpSteady, TwoWindowsOfCallsWhoseMediansAgree) {
  using core::times_steady;
  EXPECT_TRUE(times_steady(std::vector<double>(300, 1.0)));
  EXPECT_FALSE(times_steady({})) << "no calls";
  EXPECT_FALSE(times_steady({60.0, 60.0, 60.0})) << "one window only";
  EXPECT_FALSE(times_steady(std::vector<double>(5, 200.0))) << "long calls: 3 a window, so 6 needed";
  EXPECT_TRUE(times_steady(std::vector<double>(6, 200.0)));
  // A clock recovering from the limiter's dip (times falling 9.0 -> 7.6 ms over ~500 ms), then
  // settled for 300 ms.
  std::vector<double> ms;
  for (double t = 9.0; t > 7.6; t -= 0.02) ms.push_back(t);
  EXPECT_FALSE(times_steady(ms)) << "still falling";
  for (int i = 0; i < 40; ++i) ms.push_back(7.6);
  EXPECT_TRUE(times_steady(ms)) << "settled";
  // Moving either way is unsteady: the last window 3% slower (the dip's onset).
  std::vector<double> slower(200, 1.0);
  for (int i = 0; i < 100; ++i) slower.push_back(1.03);
  EXPECT_FALSE(times_steady(slower));
  // Within the tolerance: noise that alternates, and a 1% step.
  std::vector<double> noisy;
  for (int i = 0; i < 400; ++i) noisy.push_back(i % 2 ? 1.05 : 0.95);
  EXPECT_TRUE(times_steady(noisy));
  std::vector<double> step(200, 1.0);
  for (int i = 0; i < 100; ++i) step.push_back(1.01);
  EXPECT_TRUE(times_steady(step));
}

// A backend that says it is a GPU and times a call as the script says (no device).
class ScriptedGpu final : public core::Backend {
 public:
  explicit ScriptedGpu(std::function<double(int)> script) : script_(std::move(script)) {}
  lca_device_type type() const override { return LCA_DEVICE_CUDA; }
  std::string name() const override { return "scripted"; }
  const lca_allocator* allocator() override { return nullptr; }
  size_t current_bytes() const override { return 0; }
  size_t peak_bytes() const override { return 0; }
  void reset_peak() override {}
  void* stream() override { return nullptr; }
  void fill_random(void*, int64_t, int32_t, uint64_t, float, uint64_t) override {}
  void poison(void*, size_t) override {}
  void copy_to_host(void*, const void*, size_t) override {}
  void copy_from_host(void*, const void*, size_t) override {}
  void synchronize() override {}
  double time_ms(const std::function<void()>& fn) override {
    fn();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // wall time a call, as a GPU's
    return script_(timed_++);
  }
  int timed() const { return timed_; }

 private:
  std::function<double(int)> script_;
  int timed_ = 0;
};

// On a GPU the warm-up goes on past warmup_ms while the times move, up to kSteadyExtraMs more
// (wall time), and says whether they settled.
TEST(WarmUpSteady, GoesOnWhileTheTimesMoveUpToItsCap) {
  using clock = std::chrono::steady_clock;
  auto wall_ms = [](clock::time_point t0) { return std::chrono::duration<double, std::milli>(clock::now() - t0).count(); };
  {
    // Settled from the start: ends once warmup_ms has passed.
    ScriptedGpu be([](int) { return 1.0; });
    bool steady = false;
    const auto t0 = clock::now();
    const int calls = core::warm_up(be, [] {}, 2, 5.0, {}, &steady);
    EXPECT_TRUE(steady);
    EXPECT_LT(wall_ms(t0), 5.0 + core::kSteadyExtraMs / 2);
    EXPECT_GT(calls, 2);
  }
  {
    // Falling for the first 200 timed calls (9 -> 5 ms, 2-8% a window), then flat: ends soon after
    // the fall, settled.
    ScriptedGpu be([](int i) { return i < 200 ? 9.0 - 0.02 * i : 5.0; });
    bool steady = false;
    core::warm_up(be, [] {}, 1, 1.0, {}, &steady);
    EXPECT_TRUE(steady);
    EXPECT_GE(be.timed(), 200) << "not during the fall";
    EXPECT_LE(be.timed(), 200 + 60) << "two windows (20 calls of 5 ms each) after it";
  }
  {
    // Never settles (a sawtooth: 1.0 -> 1.4 ms over 400 calls, again and again): ends on the cap,
    // unsteady.
    ScriptedGpu be([](int i) { return 1.0 + 0.001 * (i % 400); });
    bool steady = true;
    const auto t0 = clock::now();
    core::warm_up(be, [] {}, 1, 10.0, {}, &steady);
    EXPECT_FALSE(steady);
    EXPECT_GE(wall_ms(t0), 10.0 + core::kSteadyExtraMs);
  }
  {
    // The CP ranks' agreement decides: a rank that wants no more still makes the calls the others want.
    ScriptedGpu be([](int) { return 1.0; });
    int asked = 0;
    core::warm_up(be, [] {}, 0, 5.0, [&](bool) { return ++asked <= 50; });
    EXPECT_EQ(be.timed(), 50);
  }
}

TEST(ResultsFile, CellRecordsRoundTrip) {
  core::CellResult r;
  r.cell = core::Cell{"k", "cpu", core::MaskSpec::parse("sliding_window:window=8"), 128, {4, 2}, 64, "bf16", "bwd", ""};
  r.status = core::CellStatus::ok;
  r.times_ms = {1.0, 2.0, 3.0};
  r.median_ms = 2.0;
  r.min_ms = 1.0;
  r.max_ms = 3.0;
  r.area = 1234;
  r.flops = 5.0e6;
  r.tflops = 2.5e-6;
  r.attn_peak_bytes = 77;
  r.total_peak_bytes = 99;
  r.check.ran = true;
  r.check.passed = true;
  r.check.tolerance = 1e-2;
  r.check.errors["o"] = core::ErrorStats{1e-3, 2e-3, 0, 10};
  r.plan_info = {{"compile_ms", 12.5}};
  const auto back = core::CellResult::from_json(r.to_json());
  EXPECT_EQ(back.cell.key(), r.cell.key());
  EXPECT_EQ(back.status, core::CellStatus::ok);
  EXPECT_EQ(back.times_ms, r.times_ms);
  EXPECT_DOUBLE_EQ(back.median_ms, 2.0);
  EXPECT_EQ(back.area, 1234);
  EXPECT_EQ(back.attn_peak_bytes, 77u);
  EXPECT_TRUE(back.check.ran);
  EXPECT_DOUBLE_EQ(back.check.errors.at("o").rel_l2, 1e-3);
  EXPECT_DOUBLE_EQ(back.plan_info.value("compile_ms", 0.0), 12.5);
  core::CellResult without_info;
  without_info.cell = r.cell;
  EXPECT_TRUE(core::CellResult::from_json(without_info.to_json()).plan_info.is_null());
}

// Every call's time is stored at 6 significant digits (below a timer's resolution), in its
// shortest form: a record of many calls stays small; the median, min and max keep every digit.
TEST(ResultsFile, CallTimesAreStoredAtSixDigits) {
  core::CellResult r;
  r.cell = core::Cell{"k", "cpu", core::MaskSpec::parse("causal"), 128, {4, 2}, 64, "bf16", "fwd", ""};
  r.status = core::CellStatus::ok;
  r.times_ms = {0.14265599846839905, 1234.5678901, 0.0, 3.0, 7.25e-5};
  r.median_ms = 0.14265599846839905;
  const nlohmann::json j = r.to_json();
  const std::vector<double> all = j["time_ms"]["all"].get<std::vector<double>>();
  ASSERT_EQ(all.size(), r.times_ms.size());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_NEAR(all[i], r.times_ms[i], 5e-6 * std::abs(r.times_ms[i])) << i;
  EXPECT_EQ(j["time_ms"]["all"].dump(), "[0.142656,1234.57,0.0,3.0,7.25e-05]");
  EXPECT_DOUBLE_EQ(j["time_ms"]["median"].get<double>(), 0.14265599846839905);
}

TEST_F(Session, AnExistingResultsFileIsKeptWithoutForce) {
  const auto out = results_ / "kept.jsonl";
  run(kTinySpec, to(out));
  const std::string first = read_text(out);
  try {
    run(kTinySpec, to(out));
    ADD_FAILURE() << "an existing results file was overwritten";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(out.string()), std::string::npos) << what;
    EXPECT_NE(what.find("--resume"), std::string::npos) << what;
  }
  EXPECT_EQ(read_text(out), first);
  auto o = to(out);
  o.force = true;
  run(kTinySpec, o);
  EXPECT_EQ(read_records(out).runs.size(), 1u) << "--force starts the file over";
}

TEST_F(Session, ResumeTakesOnlyAResultsFile) {
  const auto notes = results_ / "notes.jsonl";
  write_text(notes, "{\"not\": \"a run record\"}\n");
  auto o = to(notes);
  o.resume = true;
  try {
    run(kTinySpec, o);
    ADD_FAILURE() << "resumed into a file without a run record";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not a results file"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_text(notes), "{\"not\": \"a run record\"}\n");
  const auto fresh = results_ / "fresh.jsonl";  // nothing there yet: resume starts it
  auto f = to(fresh);
  f.resume = true;
  EXPECT_EQ(run(kTinySpec, f).resumed, 0u);
  EXPECT_EQ(read_records(fresh).cells.size(), 16u);
}

TEST_F(Session, TheMatrixSpecIsNeverTheResultsFile) {
  const auto spec_file = results_ / "spec.json";
  write_text(spec_file, kTinySpec);
  const auto spec = core::parse_matrix_spec(json::parse(kTinySpec), spec_file);
  auto o = to(spec_file);
  o.force = true;
  EXPECT_THROW(core::run_session(*registry_, *masks_, spec, {{"cpu", backend_.get()}}, {}, o, output_),
               std::runtime_error);
  EXPECT_EQ(read_text(spec_file), kTinySpec);
}

// Two writers of one file, here in one process: the second is refused while the first lives,
// with the holder's pid, and the file is the first one's alone.
TEST(ResultsFile, ASecondWriterIsRefusedNamingTheHolder) {
  TempDir dir("lca_lock");
  const auto out = dir / "r.jsonl";
  {
    core::ResultsWriter first(out, {});
    first.write_run({{"cells", 0}});
    try {
      core::ResultsFileOptions force;
      force.force = true;
      core::ResultsWriter second(out, force);
      ADD_FAILURE() << "two writers hold one results file";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(out.string()), std::string::npos) << what;
      EXPECT_NE(what.find("pid " + std::to_string(getpid())), std::string::npos) << what;
    }
    first.write_summary({{"counts", json::object()}});
    first.finish();
  }
  EXPECT_EQ(read_lines(out).size(), 2u) << "the refused writer emptied nothing";
  core::ResultsFileOptions append;
  append.append = true;
  EXPECT_NO_THROW(core::ResultsWriter again(out, append)) << "the lock went with the first writer";
}

TEST(ResultsFile, AFullDeviceIsAnErrorNamingTheFile) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  core::ResultsWriter writer("/dev/full", {});
  try {
    writer.write_run({{"cells", 1}});
    ADD_FAILURE() << "a write to /dev/full succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'/dev/full'"), std::string::npos) << e.what();
  }
}

// A plugin's message with bytes that are not UTF-8 still makes a record a JSON reader takes.
TEST(ResultsFile, RecordsAreValidUtf8WhateverThePluginSays) {
  TempDir dir("lca_utf8");
  const auto out = dir / "r.jsonl";
  core::CellResult r;
  r.cell = core::Cell{"k", "cpu", core::MaskSpec::parse("causal"), 64, {1, 1}, 16, "f32", "fwd", ""};
  r.status = core::CellStatus::error;
  r.reason = "plan: caf\xe9 \xff";
  {
    core::ResultsWriter writer(out, {});
    writer.write_run({{"cells", 1}});
    writer.write_cell(r);
    writer.finish();
  }
  const auto lines = read_lines(out);
  ASSERT_EQ(lines.size(), 2u);
  json cell;
  ASSERT_NO_THROW(cell = json::parse(lines[1])) << lines[1];
  EXPECT_EQ(cell["reason"], "plan: caf\xef\xbf\xbd \xef\xbf\xbd");
}

TEST(ResultsFile, MissingFileHasNoCells) {
  EXPECT_TRUE(core::completed_cell_keys("/nonexistent/results.jsonl").empty());
}

TEST(ResultsFile, Formatting) {
  EXPECT_EQ(core::format_duration(3725), "01:02:05");
  EXPECT_EQ(core::format_duration(-1), "--:--:--");
  EXPECT_EQ(core::format_bytes(512), "0.5K");
  EXPECT_EQ(core::format_bytes(3u << 20), "3.0M");
  EXPECT_EQ(core::format_bytes(size_t{3} << 30), "3.00G");
}

TEST(AllocCache, OnUnlessTurnedOffAndAnyOtherValueIsRefusedByName) {
  // LCA_ALLOC_CACHE as the CUDA backend reads it (the CPU backend has no cache).
  EXPECT_TRUE(core::alloc_cache_enabled(nullptr));
  EXPECT_TRUE(core::alloc_cache_enabled("1"));
  EXPECT_FALSE(core::alloc_cache_enabled("0"));
  for (const char* bad : {"", "yes", "off", "2"}) {
    try {
      core::alloc_cache_enabled(bad);
      ADD_FAILURE() << "LCA_ALLOC_CACHE='" << bad << "' was accepted";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("LCA_ALLOC_CACHE='" + std::string(bad) + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("use 1"), std::string::npos) << what;
      EXPECT_NE(what.find("or 0"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace lca::test

namespace lca::test {
namespace {

// A CP cell's local plans: each plan_info folds into the count of plans, each pass's kernels
// and the plans that split a pass (split-KV's "splits" over 1); objects without a kernel or a
// split add nothing but the plan.
TEST(CpLocalPlans, PlanInfoFoldsIntoCounts) {
  nlohmann::json summary = nlohmann::json::object();
  core::fold_plan_info(summary, {{"forward", {{"kernel", "sm90_k128"}, {"splits", 1}}},
                                 {"backward", {{"kernel", "sm90_skip"}}}});
  core::fold_plan_info(summary, {{"forward", {{"kernel", "sm90_persistent"}, {"splits", 3}}},
                                 {"backward", {{"kernel", "sm90_skip"}}}});
  core::fold_plan_info(summary, {{"forward", {{"kernel", "sm90_k128"}, {"splits", 2}}}, {"compile_ms", 3.5}});
  core::fold_plan_info(summary, nlohmann::json::object());
  EXPECT_EQ(summary["plans"], 4);
  EXPECT_EQ(summary["kernels"]["forward"]["sm90_k128"], 2);
  EXPECT_EQ(summary["kernels"]["forward"]["sm90_persistent"], 1);
  EXPECT_EQ(summary["kernels"]["backward"]["sm90_skip"], 2);
  EXPECT_EQ(summary["split"]["forward"], 2);
  EXPECT_FALSE(summary["split"].contains("backward"));
}

}  // namespace
}  // namespace lca::test
