// --isolate: each cell in a child process, so a crashing or hanging plugin becomes a recorded
// CRASH / TIMEOUT cell and the run goes on; without it, a crash ends the host but what was
// written before it stays.
#include "fixture_folder.hpp"
#include "subprocess.hpp"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <csignal>

namespace lca::test {
namespace {

using nlohmann::json;

class Isolation : public ::testing::Test {
 protected:
  Isolation() { folder_.with_masks().with_reference().with_cases({"good", "segfault", "hang"}); }
  // One problem (causal, 32 tokens), these kernels in this order, forward only.
  fs::path spec(const std::string& kernels_json) {
    const auto file = work_ / "spec.json";
    write_text(file, R"({"kernels": )" + kernels_json + R"(, "masks": ["causal"], "seqlens": [32],
        "heads": ["1:1"], "head_dims": [16], "dtypes": ["f32"], "passes": ["fwd"], "warmup": 0, "repeats": 1})");
    return file;
  }
  std::vector<json> cells(const fs::path& jsonl) {
    std::vector<json> out;
    for (const auto& line : read_lines(jsonl)) {
      try {
        auto j = json::parse(line);
        if (j.value("type", "") == "cell") out.push_back(j);
      } catch (const std::exception&) {
      }
    }
    return out;
  }
  PluginFolder folder_;
  TempDir work_;
};

TEST_F(Isolation, SegfaultBecomesACrashRecord) {
  const auto out = work_ / "crash.jsonl";
  const auto r = run_lcahost(folder_.path(), {"--matrix", spec(R"(["fx_segfault", "fx_good"])").string(), "--out",
                                              out.string(), "--isolate"});
  EXPECT_EQ(r.signal, 0) << "the host survives\n" << describe(r);
  EXPECT_EQ(r.exit_code, 3) << describe(r);
  const auto c = cells(out);
  ASSERT_EQ(c.size(), 2u) << read_text(out);
  EXPECT_EQ(c[0]["kernel"], "fx_segfault");
  EXPECT_EQ(c[0]["status"], "CRASH");
  const std::string reason = c[0].value("reason", "");
  EXPECT_NE(reason.find("signal " + std::to_string(SIGSEGV)), std::string::npos) << reason;
  EXPECT_NE(reason.find(strsignal(SIGSEGV)), std::string::npos) << reason;
  EXPECT_EQ(c[1]["kernel"], "fx_good");
  EXPECT_EQ(c[1]["status"], "ok") << "the cell after the crash still ran";
  EXPECT_TRUE(c[1]["check"]["passed"].get<bool>()) << "and was checked in its own child";
  EXPECT_NE(r.out.find("CRASH=1"), std::string::npos) << r.out;
}

TEST_F(Isolation, HangBecomesATimeoutAfterTheLimit) {
  const auto out = work_ / "hang.jsonl";
  const auto r = run_lcahost(folder_.path(),
                             {"--matrix", spec(R"(["fx_hang", "fx_good"])").string(), "--out", out.string(), "--isolate",
                              "--cell-timeout", "2"},
                             30);
  ASSERT_FALSE(r.timed_out) << describe(r);
  EXPECT_EQ(r.exit_code, 3) << describe(r);
  const auto c = cells(out);
  ASSERT_EQ(c.size(), 2u) << read_text(out);
  EXPECT_EQ(c[0]["kernel"], "fx_hang");
  EXPECT_EQ(c[0]["status"], "TIMEOUT");
  const double seconds = c[0]["seconds"].get<double>();
  EXPECT_GE(seconds, 1.9);
  EXPECT_LT(seconds, 4.0) << "killed at about the 2 s limit";
  EXPECT_EQ(c[1]["status"], "ok");
  EXPECT_LT(r.seconds, 15.0);
}

TEST_F(Isolation, IsolatedCellsGiveTheSameResults) {
  const auto out = work_ / "iso.jsonl";
  const auto r = run_lcahost(folder_.path(), {"--matrix", spec(R"(["cpu_reference", "fx_good"])").string(), "--out",
                                              out.string(), "--isolate"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto c = cells(out);
  ASSERT_EQ(c.size(), 2u);
  for (const auto& cell : c) {
    EXPECT_EQ(cell["status"], "ok");
    EXPECT_EQ(cell["area"], 32 * 33 / 2);
    EXPECT_GT(cell["tflops"].get<double>(), 0);
    EXPECT_TRUE(cell["check"]["ran"].get<bool>());
  }
}

TEST_F(Isolation, WithoutIsolateACrashEndsTheHostButKeepsEarlierCells) {
  const auto out = work_ / "in_process.jsonl";
  const auto r = run_lcahost(folder_.path(), {"--matrix", spec(R"(["fx_good", "fx_segfault"])").string(), "--out",
                                              out.string()});
  EXPECT_EQ(r.signal, SIGSEGV) << describe(r);
  const auto c = cells(out);
  ASSERT_EQ(c.size(), 1u) << "the cell before the crash was flushed\n" << read_text(out);
  EXPECT_EQ(c[0]["kernel"], "fx_good");
  EXPECT_EQ(c[0]["status"], "ok");

  // And --resume, with the crashing kernel isolated, finishes the matrix.
  const auto again = run_lcahost(folder_.path(), {"--matrix", (work_ / "spec.json").string(), "--resume",
                                                  out.string(), "--isolate"});
  EXPECT_EQ(again.exit_code, 3) << describe(again);
  const auto all = cells(out);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1]["status"], "CRASH");
}

}  // namespace
}  // namespace lca::test
