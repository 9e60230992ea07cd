// lcahost report and lcahost compare as a user runs them: the charts (real PNGs, one per mask and
// measure, one per CP mask), every section of summary.md with the failed cells and their
// messages, and compare's ratios, verdicts and exit statuses (0 fine, 1 regression, 2 bad input).
#include "results_files.hpp"
#include "subprocess.hpp"

#include <gtest/gtest.h>

#include <stdlib.h>

#include <set>
#include <sstream>

namespace lca::test {
namespace {

#define EXPECT_HAS(text, fragment) EXPECT_NE((text).find(fragment), std::string::npos) << (text)
#define EXPECT_LACKS(text, fragment) EXPECT_EQ((text).find(fragment), std::string::npos) << (text)

ProcessResult lcahost(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {lcahost_path().string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, 300);
}

// The report needs a python3 with matplotlib: $LCA_PYTHON, Debian's, or the first on PATH.
bool have_matplotlib() {
  static const bool found = run_process({"/bin/sh", "-c",
                                         "for p in \"$LCA_PYTHON\" /usr/bin/python3 python3; do "
                                         "[ -n \"$p\" ] && \"$p\" -c 'import matplotlib' 2>/dev/null && exit 0; "
                                         "done; exit 1"})
                                .exit_code == 0;
  return found;
}

#define SKIP_WITHOUT_MATPLOTLIB()                                                                   \
  if (!have_matplotlib())                                                                           \
  GTEST_SKIP() << "no python3 with matplotlib (install python3-matplotlib: tools/setup.sh does)"

// The text of a summary.md section: from its heading to the next one.
std::string section(const std::string& md, const std::string& name) {
  const auto at = md.find("\n## " + name + "\n");
  if (at == std::string::npos) return "";
  const auto end = md.find("\n## ", at + 4);
  return md.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// The first line of `text` that contains `fragment`.
std::string line_with(const std::string& text, const std::string& fragment) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l.find(fragment) != std::string::npos) return l;
  return "";
}

void expect_png(const fs::path& file) {
  ASSERT_TRUE(fs::is_regular_file(file)) << file;
  EXPECT_GT(fs::file_size(file), 5000u) << file;
  EXPECT_EQ(read_text(file).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << file;
}

class Report : public ::testing::Test {
 protected:
  Report() {
    // Two kernels, two masks, two lengths, both passes; kA 10 ms a call, kB 2 ms.
    std::vector<json> plain = {run_record()};
    for (const char* mask : {"full", "causal"})
      for (int seqlen : {1024, 2048})
        for (const char* pass : {"fwd", "bwd"}) {
          plain.push_back(cell("kA", mask, seqlen, pass, "ok", 10.0));
          plain.push_back(std::string(mask) == "causal" ? cell("kB", mask, seqlen, pass, "X", 0, "mask causal unsupported")
                                                        : cell("kB", mask, seqlen, pass, "ok", 2.0));
        }
    // Later records of a cell replace earlier ones, as in a resumed file.
    plain.push_back(cell("kB", "full", 2048, "bwd", "E", 0, "out of memory (81604378624 bytes)"));
    plain.push_back(cell("kA", "causal", 1024, "bwd", "FAIL", 10.0, "outside tolerance 0.015000"));
    plain.push_back(cell("kA", "full", 2048, "fwd", "CRASH", 0, "killed by signal 11 (SIGSEGV)"));
    plain.push_back(cell("kA", "causal", 2048, "fwd", "TIMEOUT", 0, "no result after 600 s"));
    plain.push_back(cell("kA", "causal", 2048, "bwd", "ERROR", 0, "cudaErrorIllegalAddress in backward"));
    write_records(dir_ / "results.jsonl", plain);
    // Context parallelism at world sizes 2 and 4, 1K tokens per rank.
    for (int world : {2, 4}) {
      std::vector<json> cp = {run_record(world)};
      for (const char* pass : {"fwd", "bwd"}) {
        cp.push_back(cell("ulysses/cpu_reference", "full", 1024 * world, pass, "ok", 4.0));
        cp.push_back(std::string(pass) == "bwd" && world == 4
                         ? cell("ring_p2p/cpu_reference", "full", 1024 * world, pass, "X", 0, "no backward")
                         : cell("ring_p2p/cpu_reference", "full", 1024 * world, pass, "ok", 5.0));
      }
      write_records(dir_ / ("cp" + std::to_string(world) + ".jsonl"), cp);
    }
  }
  ProcessResult report() {
    return lcahost({"report", (dir_ / "results.jsonl").string(), (dir_ / "cp2.jsonl").string(),
                    (dir_ / "cp4.jsonl").string(), "--out", (dir_ / "out").string()});
  }
  TempDir dir_{"lca_report"};
};

TEST_F(Report, WritesEveryChartAsAPng) {
  SKIP_WITHOUT_MATPLOTLIB();
  const auto r = report();
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const std::set<std::string> expected = {"full_tflops.png", "full_memory.png", "causal_tflops.png",
                                          "causal_memory.png", "cp_full.png"};
  std::set<std::string> pngs;
  for (const auto& e : fs::directory_iterator(dir_ / "out"))
    if (e.path().extension() == ".png") pngs.insert(e.path().filename().string());
  EXPECT_EQ(pngs, expected);
  for (const auto& name : expected) expect_png(dir_ / "out" / name);
}

TEST_F(Report, SummaryHasEverySectionAndEveryFailedCell) {
  SKIP_WITHOUT_MATPLOTLIB();
  const auto r = report();
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const std::string md = read_text(dir_ / "out" / "summary.md");
  for (const char* name : {"Inputs", "Environment", "Measured ceilings", "Capabilities", "Best kernel per mask and length",
                           "Context parallelism", "Failures", "Skipped and out of memory", "All cells", "Charts"})
    EXPECT_FALSE(section(md, name).empty()) << "no section " << name << "\n" << md;

  EXPECT_HAS(section(md, "Environment"), "Test GPU 80GB (sm_90, 132 SMs)");
  EXPECT_HAS(section(md, "Environment"), "13.0 / 13.0");
  EXPECT_HAS(section(md, "Measured ceilings"), "781 TFLOP/s");
  EXPECT_HAS(section(md, "Measured ceilings"), "3019 GB/s");

  const std::string caps = section(md, "Capabilities");
  EXPECT_HAS(caps, "| kA | 1.0 | cuda | bf16 | 128 | yes | yes | no | any |");
  EXPECT_HAS(caps, "| kB | 2.0 | cuda | bf16 | 64, 128 | yes | yes | yes | full |");
  EXPECT_HAS(caps, "| causal | ERROR 1, FAIL 1, TIMEOUT 1, ok 1 | X |");

  // kB is 5x kA where both ran; where one did not, the other is best alone; FAIL never wins.
  const std::string best = section(md, "Best kernel per mask and length");
  EXPECT_HAS(best, "| full | 1K | **kB** 500 (5x kA) | **kB** 1250 (5x kA) |");
  EXPECT_HAS(best, "| full | 2K | **kB** 1000 | **kA** 500 |");
  EXPECT_HAS(best, "| causal | 1K | **kA** 100 | - |");

  const std::string failures = section(md, "Failures");
  EXPECT_HAS(failures, "4 cell(s)");
  EXPECT_HAS(line_with(failures, "| FAIL |"), "| kA | causal | 1K | 64:8 | 128 | bf16 | bwd | FAIL | outside tolerance 0.015000; worst o rel_l2 0.25");
  EXPECT_HAS(line_with(failures, "| CRASH |"), "| kA | full | 2K | 64:8 | 128 | bf16 | fwd | CRASH | killed by signal 11 (SIGSEGV) |");
  EXPECT_HAS(line_with(failures, "| TIMEOUT |"), "| causal | 2K |");
  EXPECT_HAS(line_with(failures, "| TIMEOUT |"), "no result after 600 s");
  EXPECT_HAS(line_with(failures, "| ERROR |"), "cudaErrorIllegalAddress in backward");
  EXPECT_LACKS(failures, "mask causal unsupported");

  const std::string skipped = section(md, "Skipped and out of memory");
  EXPECT_HAS(skipped, "| X | kB | mask causal unsupported | 4 | 1K, 2K |");
  EXPECT_HAS(skipped, "| E | kB | out of memory (81604378624 bytes) | 1 | 2K |");
  EXPECT_HAS(skipped, "| X | ring_p2p/cpu_reference | no backward | 1 | 4K |");

  const std::string cp = section(md, "Context parallelism");
  EXPECT_HAS(cp, "| full | 64:8 d128 bf16 | 1K | 2 | 400 / 1000 | 500 / 1250 |");
  EXPECT_HAS(cp, "| full | 64:8 d128 bf16 | 1K | 4 | 800 / X | 1000 / 2500 |");

  EXPECT_HAS(section(md, "All cells"), "| causal | 1024 | 100 / FAIL (1.00) | X / X |");
  for (const char* png : {"full_tflops.png", "full_memory.png", "causal_tflops.png", "causal_memory.png", "cp_full.png"})
    EXPECT_HAS(section(md, "Charts"), std::string("](") + png + ")");
}

TEST_F(Report, FromARealCpuRun) {
  SKIP_WITHOUT_MATPLOTLIB();
  PluginFolder folder;
  folder.with_masks().with_reference();
  write_text(dir_ / "tiny.json", R"({"kernels": ["cpu_reference"], "masks": ["full", "causal"], "seqlens": [64],
    "heads": ["2:1"], "head_dims": [16], "dtypes": ["f32"], "passes": ["fwd", "bwd"], "warmup": 0, "warmup_ms": 5,
    "repeats": 2, "repeat_ms": 3})");
  const auto run = run_lcahost(folder.path(), {"--threads", "1", "--matrix", (dir_ / "tiny.json").string(),
                                               "--out", (dir_ / "real.jsonl").string()});
  ASSERT_EQ(run.exit_code, 0) << describe(run);
  // The run record carries the kernels' manifest capabilities for the report.
  const json first = json::parse(read_lines(dir_ / "real.jsonl").at(0));
  bool caps = false;
  for (const auto& p : first["plugins"])
    if (p["name"] == "cpu_reference") caps = p.contains("caps") && p["caps"]["masks"] == "any";
  EXPECT_TRUE(caps) << first.dump();

  const auto r = lcahost({"report", (dir_ / "real.jsonl").string(), "--out", (dir_ / "real").string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* png : {"full_tflops.png", "full_memory.png", "causal_tflops.png", "causal_memory.png"})
    expect_png(dir_ / "real" / png);
  const std::string md = read_text(dir_ / "real" / "summary.md");
  EXPECT_HAS(section(md, "Capabilities"), "| cpu_reference | 0.1.0 | cpu |");
  EXPECT_HAS(section(md, "Environment"), "warmup 0, and 5 ms, repeats 2, and 3 ms");
  EXPECT_HAS(section(md, "Failures"), "None");
  EXPECT_HAS(section(md, "Best kernel per mask and length"), "| causal | 64 | **cpu_reference**");
}

TEST_F(Report, BadInputAndMissingPythonSayWhy) {
  auto r = lcahost({"report", (dir_ / "absent.jsonl").string(), "--out", (dir_ / "out").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "absent.jsonl: no such results file");
  r = lcahost({"report", (dir_ / "results.jsonl").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "--out");

  setenv("LCA_PYTHON", "/nonexistent/python3", 1);
  r = lcahost({"report", (dir_ / "results.jsonl").string(), "--out", (dir_ / "out").string()});
  unsetenv("LCA_PYTHON");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "cannot run /nonexistent/python3");
  EXPECT_HAS(r.err, "python3-matplotlib");

  // An interpreter that starts but fails before the script can say anything: lcahost says it.
  setenv("LCA_PYTHON", "/bin/false", 1);
  r = lcahost({"report", (dir_ / "results.jsonl").string(), "--out", (dir_ / "out").string()});
  unsetenv("LCA_PYTHON");
  EXPECT_NE(r.exit_code, 0) << describe(r);
  EXPECT_HAS(r.err, "the interpreter /bin/false (from LCA_PYTHON) failed");
  EXPECT_HAS(r.err, "set LCA_PYTHON to a python3 that has matplotlib");
}

class Compare : public ::testing::Test {
 protected:
  Compare() {
    write_records(dir_ / "a.jsonl", {run_record(), cell("kA", "full", 1024, "fwd", "ok", 1.0),
                                     cell("kA", "full", 1024, "bwd", "ok", 1.0), cell("kA", "full", 2048, "fwd", "ok", 1.0),
                                     cell("kA", "full", 2048, "bwd", "ok", 1.0), cell("kA", "causal", 1024, "fwd", "ok", 1.0)});
    // 1.5x slower (beyond the +-2% band), within noise, 2x faster, crashed; one cell each side only.
    write_records(dir_ / "b.jsonl", {run_record(), cell("kA", "full", 1024, "fwd", "ok", 1.5),
                                     cell("kA", "full", 1024, "bwd", "ok", 1.005), cell("kA", "full", 2048, "fwd", "ok", 0.5),
                                     cell("kA", "full", 2048, "bwd", "CRASH", 0, "killed by signal 6"),
                                     cell("kA", "causal", 2048, "fwd", "ok", 1.0)});
    write_records(dir_ / "slower.jsonl", {run_record(), cell("kA", "full", 1024, "fwd", "ok", 1.5),
                                          cell("kA", "full", 1024, "bwd", "ok", 1.005)});
    write_records(dir_ / "other.jsonl", {run_record(), cell("kB", "full", 1024, "fwd", "ok", 1.0)});
  }
  ProcessResult compare(const std::string& a, const std::string& b, std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"compare", (dir_ / a).string(), (dir_ / b).string()};
    args.insert(args.end(), more.begin(), more.end());
    return lcahost(args);
  }
  TempDir dir_{"lca_compare"};
};

TEST_F(Compare, RatiosVerdictsAndRegressionExit) {
  const auto r = compare("a.jsonl", "b.jsonl");
  ASSERT_EQ(r.exit_code, 1) << describe(r);
  const std::string slower = line_with(r.out, "kA full 1K 64:8 d128 bf16 fwd ");
  EXPECT_HAS(slower, "1.500");   // B/A time
  EXPECT_HAS(slower, "+-2.0%");  // each run's repeats spread +-1%
  EXPECT_HAS(slower, "0.667");   // B/A TFLOP/s
  EXPECT_HAS(slower, "slower (REGRESSION)");
  const std::string noise = line_with(r.out, "kA full 1K 64:8 d128 bf16 bwd ");
  EXPECT_HAS(noise, "1.005");
  EXPECT_HAS(noise, "noise");
  EXPECT_LACKS(noise, "REGRESSION");
  const std::string faster = line_with(r.out, "kA full 2K 64:8 d128 bf16 fwd ");
  EXPECT_HAS(faster, "0.500");
  EXPECT_HAS(faster, "2.000");
  EXPECT_HAS(faster, "faster");
  EXPECT_HAS(line_with(r.out, "kA full 2K 64:8 d128 bf16 bwd "), "status worse (REGRESSION): ok -> CRASH");
  EXPECT_HAS(r.out, "1 cell(s) only in A:\n  kA causal 1K 64:8 d128 bf16 fwd\n");
  EXPECT_HAS(r.out, "1 cell(s) only in B:\n  kA causal 2K 64:8 d128 bf16 fwd\n");
  EXPECT_HAS(r.out, "4 cells in both: 1 within noise, 1 slower, 1 faster, 1 worse status, 0 other status changes, "
                    "0 untimed in both; 2 regression(s) beyond 5.0%");
  // The geometric mean of B/A time over the three timed cells: (1.5 x 1.005 x 0.5)^(1/3).
  EXPECT_HAS(r.out, "geomean B/A time over the 3 timed cells: 0.910");
}

// A cell timed by time keeps a hundred calls or more across the GPU's clock swings: their min-max
// range is wide (here +-20%) while the median is known to within a few percent. The band comes from
// the median's confidence interval (ranks n/2 -+ 0.98 sqrt(n)), so 10% slower is a regression, where
// half the min-max range (+-40% for two such runs) would have called it noise.
TEST_F(Compare, CellsTimedByTimeGetTheirMediansBand) {
  auto swinging = [](double median_ms) {
    json c = cell("kA", "full", 1024, "fwd", "ok", median_ms);
    json calls = json::array();
    for (int i = 0; i <= 100; ++i) calls.push_back(median_ms * (0.8 + 0.4 * i / 100.0));  // 0.8x .. 1.2x, evenly
    c["time_ms"] = {{"median", median_ms}, {"min", median_ms * 0.8}, {"max", median_ms * 1.2}, {"all", calls}};
    c["tflops"] = c["flops"].get<double>() / (median_ms * 1e-3) / 1e12;
    return c;
  };
  write_records(dir_ / "swing_a.jsonl", {run_record(), swinging(1.0)});
  write_records(dir_ / "swing_b.jsonl", {run_record(), swinging(1.1)});
  const auto r = compare("swing_a.jsonl", "swing_b.jsonl");
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  const std::string row = line_with(r.out, "kA full 1K 64:8 d128 bf16 fwd ");
  // 101 calls: ranks 41 and 61 of 101, 0.96x and 1.04x the median, so +-4% a run and +-8% for two.
  EXPECT_HAS(row, "+-8.0%");
  EXPECT_HAS(row, "slower (REGRESSION)");
}

TEST_F(Compare, ThresholdDecidesTheExitStatus) {
  auto r = compare("a.jsonl", "slower.jsonl");
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  r = compare("a.jsonl", "slower.jsonl", {"--threshold", "0.6"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_HAS(line_with(r.out, "kA full 1K 64:8 d128 bf16 fwd "), "slower");
  EXPECT_HAS(r.out, "0 regression(s) beyond 60.0%");
  r = compare("a.jsonl", "a.jsonl", {"--format", "md"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_HAS(r.out, "| cell | A ms | B ms | B/A time |");
  EXPECT_HAS(r.out, "| kA full 1K 64:8 d128 bf16 fwd | 1 | 1 | 1.000 | +-2.0% |");
}

TEST_F(Compare, NothingInCommonOrNoFileIsBadInput) {
  auto r = compare("a.jsonl", "other.jsonl");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.out, "no cell is in both files");
  r = compare("a.jsonl", "absent.jsonl");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "absent.jsonl: no such results file");
}

}  // namespace
}  // namespace lca::test
