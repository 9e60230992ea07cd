// The same runs as a user starts them: lcahost --matrix FILE --out/--resume/--dry-run, with the
// exit status the shell sees (0 healthy, 3 when a cell FAILed, 2 for a bad command line).
#include "core/run/runner.hpp"
#include "run_support.hpp"
#include "subprocess.hpp"

#include <gtest/gtest.h>

#include <set>

namespace lca::test {
namespace {

class RunCli : public ::testing::Test {
 protected:
  RunCli() {
    folder_.with_masks().with_reference().with_cases({"good", "oom", "wrong_numbers"});
    write_text(work_ / "tiny.json", kTinySpec);
  }
  ProcessResult lcahost(std::vector<std::string> args) {
    args.insert(args.begin(), {"--threads", "1"});
    return run_lcahost(folder_.path(), args);
  }
  PluginFolder folder_;
  TempDir work_;
};

TEST_F(RunCli, HealthyRunExitsZeroAndWritesBothFiles) {
  const auto r = lcahost({"--matrix", (work_ / "tiny.json").string(), "--out", (work_ / "out.jsonl").string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const Records rec = read_records(work_ / "out.jsonl");
  EXPECT_EQ(rec.cells.size(), 16u);
  for (const auto& c : rec.cells) EXPECT_TRUE(c["status"] == "ok" || c["status"] == "X") << c.dump();
  ASSERT_EQ(rec.runs.size(), 1u);
  for (const char* key : {"host", "git_revision", "plugins", "matrix"}) EXPECT_TRUE(rec.runs[0].contains(key)) << key;
  EXPECT_EQ(read_lines(work_ / "out.csv").size(), 17u);
  EXPECT_NE(r.out.find("summary: X=4 ok=12"), std::string::npos) << r.out;
}

TEST_F(RunCli, WarmupAndRepeatsOverrideTheMatrix) {
  const auto out = work_ / "quick.jsonl";
  const auto r = lcahost({"--matrix", (work_ / "tiny.json").string(), "--kernels", "fx_good", "--warmup", "0",
                          "--repeats", "3", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const Records rec = read_records(out);
  ASSERT_EQ(rec.runs.size(), 1u);
  EXPECT_EQ(rec.runs[0]["matrix"]["warmup"], 0) << "the record says what ran";
  EXPECT_EQ(rec.runs[0]["matrix"]["repeats"], 3);
  int timed = 0;
  for (const auto& c : rec.cells)
    if (c["status"] == "ok") {
      EXPECT_EQ(c["time_ms"]["all"].size(), 3u) << c.dump();
      ++timed;
    }
  EXPECT_GT(timed, 0);
  const auto bad = lcahost({"--matrix", (work_ / "tiny.json").string(), "--repeats", "0", "--dry-run"});
  EXPECT_EQ(bad.exit_code, 2) << "no timed call is no measurement\n" << describe(bad);
  EXPECT_NE(bad.err.find("--repeats"), std::string::npos) << bad.err;
}

// --warmup-ms: the warm-up goes on past --warmup calls until that much time has passed; each cell
// says how many calls it made, and the run record what was asked.
TEST_F(RunCli, WarmupMsWarmsUpForAtLeastThatLong) {
  const auto out = work_ / "warm.jsonl";
  const auto r = lcahost({"--matrix", (work_ / "tiny.json").string(), "--kernels", "fx_good", "--warmup", "2",
                          "--warmup-ms", "40", "--repeats", "1", "--no-check", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const Records rec = read_records(out);
  ASSERT_EQ(rec.runs.size(), 1u);
  EXPECT_EQ(rec.runs[0]["matrix"]["warmup_ms"], 40.0);
  int timed = 0;
  for (const auto& c : rec.cells)
    if (c["status"] == "ok") {
      ++timed;
      const int calls = c["warmup_calls"];
      // fx_good's call takes far less than 40 ms: many more than the two counted ones.
      EXPECT_GT(calls, 2) << c.dump();
      EXPECT_GE(c["seconds"].get<double>(), 0.040) << c.dump();
    }
  EXPECT_GT(timed, 0);

  const auto plain = work_ / "plain.jsonl";
  ASSERT_EQ(lcahost({"--matrix", (work_ / "tiny.json").string(), "--kernels", "fx_good", "--warmup", "2",
                     "--repeats", "1", "--no-check", "--out", plain.string()})
                .exit_code,
            0);
  for (const auto& c : read_records(plain).cells)
    if (c["status"] == "ok") EXPECT_EQ(c["warmup_calls"], 2) << "by count alone, without --warmup-ms";
  const auto bad = lcahost({"--matrix", (work_ / "tiny.json").string(), "--warmup-ms", "-1", "--dry-run"});
  EXPECT_EQ(bad.exit_code, 2) << describe(bad);
  EXPECT_NE(bad.err.find("--warmup-ms"), std::string::npos) << bad.err;
}

// --repeat-ms: the timed calls go on past --repeats until that much time has passed, so that a
// median spans a GPU's clock swings; each cell keeps every timed call, the run record says what
// was asked, and without it the count alone decides.
TEST_F(RunCli, RepeatMsTimesForAtLeastThatLong) {
  const auto out = work_ / "long.jsonl";
  const auto r = lcahost({"--matrix", (work_ / "tiny.json").string(), "--kernels", "fx_good", "--warmup", "0",
                          "--repeats", "2", "--repeat-ms", "40", "--no-check", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const Records rec = read_records(out);
  ASSERT_EQ(rec.runs.size(), 1u);
  EXPECT_EQ(rec.runs[0]["matrix"]["repeat_ms"], 40.0);
  int timed = 0;
  for (const auto& c : rec.cells)
    if (c["status"] == "ok") {
      ++timed;
      const auto& all = c["time_ms"]["all"];
      // fx_good's call takes far less than 40 ms: many more than the two counted ones, until 40 ms
      // have passed or the cap is reached.
      const size_t cap = lca::core::kMaxTimedCalls;
      EXPECT_GT(all.size(), 2u) << c.dump();
      EXPECT_LE(all.size(), cap) << c.dump();
      EXPECT_TRUE(c["seconds"].get<double>() >= 0.040 || all.size() == cap) << c.dump();
    }
  EXPECT_GT(timed, 0);
  const auto bad = lcahost({"--matrix", (work_ / "tiny.json").string(), "--repeat-ms", "-1", "--dry-run"});
  EXPECT_EQ(bad.exit_code, 2) << describe(bad);
  EXPECT_NE(bad.err.find("--repeat-ms"), std::string::npos) << bad.err;
}

TEST_F(RunCli, ResumeAppendsOnlyTheRest) {
  const auto out = work_ / "out.jsonl";
  ASSERT_EQ(lcahost({"--matrix", (work_ / "tiny.json").string(), "--out", out.string()}).exit_code, 0);
  const auto lines = read_lines(out);
  // Keep the run record and 7 cells, as if the run had been killed there.
  std::string head;
  for (int i = 0; i < 8; ++i) head += lines[i] + "\n";
  write_text(out, head);
  const auto r = lcahost({"--matrix", (work_ / "tiny.json").string(), "--resume", out.string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("7 already in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("9/9"), std::string::npos) << "only the 9 missing cells ran\n" << r.out;
  const Records rec = read_records(out);
  EXPECT_EQ(rec.cells.size(), 16u);
  std::set<std::string> keys;
  for (const auto& c : rec.cells) keys.insert(cell_key(c));
  EXPECT_EQ(keys.size(), 16u);
  EXPECT_EQ(read_lines(out).size(), 8u + 1 + 9 + 1) << "kept lines, a run record, 9 cells, a summary";
}

TEST_F(RunCli, TornLastLineIsToleratedByResume) {
  const auto out = work_ / "out.jsonl";
  ASSERT_EQ(lcahost({"--matrix", (work_ / "tiny.json").string(), "--out", out.string()}).exit_code, 0);
  const auto lines = read_lines(out);
  // Truncate mid-line: 4 whole cells, then 60 bytes of the 5th.
  write_text(out, lines[0] + "\n" + lines[1] + "\n" + lines[2] + "\n" + lines[3] + "\n" + lines[4] + "\n" +
                      lines[5].substr(0, 60));
  const auto r = lcahost({"--matrix", (work_ / "tiny.json").string(), "--resume", out.string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("4 already in"), std::string::npos) << r.out;
  const Records rec = read_records(out);
  std::set<std::string> keys;
  for (const auto& c : rec.cells) keys.insert(cell_key(c));
  EXPECT_EQ(keys.size(), 16u);
  EXPECT_EQ(rec.cells.size(), 16u);
}

TEST_F(RunCli, WrongNumbersExitThree) {
  write_text(work_ / "wrong.json", R"({"kernels": ["fx_wrong", "fx_oom", "fx_good"], "masks": ["causal"],
      "seqlens": [32], "heads": ["1:1"], "head_dims": [16], "dtypes": ["f32"], "passes": ["fwd"],
      "warmup": 0, "repeats": 1})");
  const auto r = lcahost({"--matrix", (work_ / "wrong.json").string(), "--out", (work_ / "w.jsonl").string()});
  EXPECT_EQ(r.exit_code, 3) << describe(r);
  const Records rec = read_records(work_ / "w.jsonl");
  ASSERT_EQ(rec.cells.size(), 3u);
  EXPECT_EQ(rec.cells[0]["status"], "FAIL");
  EXPECT_EQ(rec.cells[1]["status"], "E");
  EXPECT_EQ(rec.cells[2]["status"], "ok") << "the run went on";
  EXPECT_NE(r.out.find("FAIL=1"), std::string::npos) << r.out;
}

TEST_F(RunCli, OutOfMemoryAloneIsHealthy) {
  write_text(work_ / "oom.json", R"({"kernels": ["fx_oom"], "masks": ["causal"], "seqlens": [32],
      "heads": ["1:1"], "head_dims": [16], "dtypes": ["f32"], "passes": ["fwd", "bwd"]})");
  const auto r = lcahost({"--matrix", (work_ / "oom.json").string()});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("E=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no-backward"), std::string::npos) << r.out;
}

TEST_F(RunCli, DryRunPrintsSkipReasonsAndWritesNothing) {
  const auto out = work_ / "dry.jsonl";
  const auto r = lcahost({"--matrix", (work_ / "tiny.json").string(), "--out", out.string(), "--dry-run"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(work_ / "dry.csv"));
  EXPECT_NE(r.out.find("16 cells"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no-gqa"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("summary"), std::string::npos) << "nothing ran\n" << r.out;
}

}  // namespace
}  // namespace lca::test
