// The same runs as a user starts them: lcahost --matrix FILE --out/--resume/--dry-run, with the
// exit status the shell sees (0 healthy, 3 when a cell FAILed, 2 for a bad command line).
#include "core/report/results.hpp"
#include "core/run/runner.hpp"
#include "run_support.hpp"
#include "subprocess.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <map>
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
  // tiny.json with fx_good and `options`, into `name`.jsonl: its run record and its ok cells, once
  // lcahost exited 0, wrote one run record and timed at least one cell.
  struct TimedRun {
    nlohmann::json record;
    std::vector<nlohmann::json> cells;
  };
  TimedRun run_fx_good(const std::string& name, const std::vector<std::string>& options) {
    const auto out = work_ / (name + ".jsonl");
    std::vector<std::string> args = {"--matrix", (work_ / "tiny.json").string(), "--kernels", "fx_good",
                                     "--out", out.string()};
    args.insert(args.end(), options.begin(), options.end());
    const auto r = lcahost(args);
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    const Records rec = read_records(out);
    EXPECT_EQ(rec.runs.size(), 1u);
    TimedRun run;
    if (!rec.runs.empty()) run.record = rec.runs[0];
    for (const auto& c : rec.cells)
      if (c["status"] == "ok") run.cells.push_back(c);
    EXPECT_FALSE(run.cells.empty()) << "no cell was timed";
    return run;
  }
  // A dry run with `flag value` is refused with exit status 2, and the message names the flag.
  void expect_refused(const std::string& flag, const std::string& value, const std::string& why = "") {
    const auto bad = lcahost({"--matrix", (work_ / "tiny.json").string(), flag, value, "--dry-run"});
    EXPECT_EQ(bad.exit_code, 2) << why << "\n" << describe(bad);
    EXPECT_NE(bad.err.find(flag), std::string::npos) << bad.err;
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
  const auto run = run_fx_good("quick", {"--warmup", "0", "--repeats", "3"});
  EXPECT_EQ(run.record["matrix"]["warmup"], 0) << "the record says what ran";
  EXPECT_EQ(run.record["matrix"]["repeats"], 3);
  // Without --repeat-ms (tiny.json has none) the count alone decides.
  for (const auto& c : run.cells) EXPECT_EQ(c["time_ms"]["all"].size(), 3u) << c.dump();
  expect_refused("--repeats", "0", "no timed call is no measurement");
}

// --warmup-ms: the warm-up goes on past --warmup calls until that much time has passed; each cell
// says how many calls it made, and the run record what was asked.
TEST_F(RunCli, WarmupMsWarmsUpForAtLeastThatLong) {
  const auto run = run_fx_good("warm", {"--warmup", "2", "--warmup-ms", "40", "--repeats", "1", "--no-check"});
  EXPECT_EQ(run.record["matrix"]["warmup_ms"], 40.0);
  for (const auto& c : run.cells) {
    // fx_good's call takes far less than 40 ms: many more than the two counted ones.
    EXPECT_GT(c["warmup_calls"].get<int>(), 2) << c.dump();
    EXPECT_GE(c["seconds"].get<double>(), 0.040) << c.dump();
  }
  for (const auto& c : run_fx_good("plain", {"--warmup", "2", "--repeats", "1", "--no-check"}).cells)
    EXPECT_EQ(c["warmup_calls"], 2) << "by count alone, without --warmup-ms";
  expect_refused("--warmup-ms", "-1");
}

// --repeat-ms: the timed calls go on past --repeats until that much time has passed, so that a
// median spans a GPU's clock swings; each cell keeps every timed call, and the run record says what
// was asked (without it the count alone decides: WarmupAndRepeatsOverrideTheMatrix).
TEST_F(RunCli, RepeatMsTimesForAtLeastThatLong) {
  const auto run = run_fx_good("long", {"--warmup", "0", "--repeats", "2", "--repeat-ms", "40", "--no-check"});
  EXPECT_EQ(run.record["matrix"]["repeat_ms"], 40.0);
  for (const auto& c : run.cells) {
    const auto& all = c["time_ms"]["all"];
    // fx_good's call takes far less than 40 ms: many more than the two counted ones, until 40 ms
    // have passed or the cap is reached.
    const size_t cap = lca::core::kMaxTimedCalls;
    EXPECT_GT(all.size(), 2u) << c.dump();
    EXPECT_LE(all.size(), cap) << c.dump();
    EXPECT_TRUE(c["seconds"].get<double>() >= 0.040 || all.size() == cap) << c.dump();
  }
  expect_refused("--repeat-ms", "-1");
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
  EXPECT_NE(r.err.find("its last line (6) was cut short"), std::string::npos) << "and says so\n" << r.err;
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

// --check-max-seqlen: the cells over it run unchecked and say so (wrong numbers there pass
// unseen: exit 0), the ones at or under it are checked; the child processes of --isolate get it too.
TEST_F(RunCli, CheckMaxSeqlenLeavesLongerCellsUnchecked) {
  write_text(work_ / "lengths.json", R"({"kernels": ["fx_wrong"], "masks": ["causal"], "seqlens": [32, 48],
      "heads": ["1:1"], "head_dims": [16], "dtypes": ["f32"], "passes": ["fwd"], "warmup": 0, "repeats": 1})");
  for (const bool isolate : {false, true}) {
    const auto out = work_ / (isolate ? "iso.jsonl" : "lengths.jsonl");
    std::vector<std::string> args = {"--matrix", (work_ / "lengths.json").string(), "--check-max-seqlen", "40",
                                     "--out", out.string()};
    if (isolate) args.push_back("--isolate");
    const auto r = lcahost(args);
    EXPECT_EQ(r.exit_code, 3) << describe(r);  // the 32-token cell is checked and fails
    const Records rec = read_records(out);
    ASSERT_EQ(rec.cells.size(), 2u) << describe(r);
    EXPECT_EQ(rec.cells[0]["status"], "FAIL");
    EXPECT_EQ(rec.cells[1]["status"], "ok");
    EXPECT_NE(rec.cells[1].value("reason", "").find("over check_max_seqlen 40"), std::string::npos) << rec.cells[1];
    ASSERT_EQ(rec.runs.size(), 1u);
    EXPECT_EQ(rec.runs[0]["matrix"]["check_max_seqlen"], 40);
  }
  expect_refused("--check-max-seqlen", "-1");
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

// One plugin under three labels in one run: each row's cells carry its label and options, the
// options reach the plugin's create() (cpu_reference's fp64 accumulation takes more workspace; a
// bad value is an ERROR that names it), and --kernel-options adds to a row's options.
TEST_F(RunCli, OneKernelUnderSeveralLabelsRunsEachRowWithItsOptions) {
  write_text(work_ / "rows.json", R"({
    "kernels": ["cpu_reference", {"kernel": "cpu_reference", "options": {"accumulate": "f64"}, "label": "ref_f64"},
                {"kernel": "cpu_reference", "options": {"accumulate": "f16"}, "label": "ref_bad"}],
    "masks": ["causal"], "seqlens": [64], "heads": ["2:2"], "head_dims": [16], "dtypes": ["f32"],
    "passes": ["fwd"], "warmup": 0, "repeats": 1})");
  const auto out = work_ / "rows.jsonl";
  const auto r = lcahost({"--matrix", (work_ / "rows.json").string(), "--out", out.string(), "--no-check"});
  EXPECT_EQ(r.exit_code, 3) << "an ERROR cell\n" << describe(r);
  std::map<std::string, nlohmann::json> rows;
  for (const auto& c : read_records(out).cells) rows[c["label"].get<std::string>()] = c;
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows["cpu_reference"]["kernel"], "cpu_reference");
  EXPECT_FALSE(rows["cpu_reference"].contains("options"));
  EXPECT_EQ(rows["ref_f64"]["kernel"], "cpu_reference");
  EXPECT_EQ(rows["ref_f64"]["options"], nlohmann::json::parse(R"({"accumulate": "f64"})"));
  ASSERT_EQ(rows["cpu_reference"]["status"], "ok") << rows["cpu_reference"].dump();
  ASSERT_EQ(rows["ref_f64"]["status"], "ok") << rows["ref_f64"].dump();
  EXPECT_GT(rows["ref_f64"]["attn_peak_bytes"].get<int64_t>(), rows["cpu_reference"]["attn_peak_bytes"].get<int64_t>())
      << "the f64 row ran with f32 accumulators: its options did not reach the plugin";
  EXPECT_EQ(rows["ref_bad"]["status"], "ERROR");
  EXPECT_NE(rows["ref_bad"]["reason"].get<std::string>().find("f16"), std::string::npos) << rows["ref_bad"].dump();
  EXPECT_NE(r.out.find("ref_f64"), std::string::npos) << "the terminal table names the row by its label\n" << r.out;
  EXPECT_NE(read_lines(work_ / "rows.csv")[2].find("ref_f64"), std::string::npos);

  // --kernel-options by the plugin's name reach every row of it, and a row with the default label is
  // labelled by its options; --kernels picks rows by label.
  const auto out2 = work_ / "rows2.jsonl";
  const auto r2 = lcahost({"--matrix", (work_ / "rows.json").string(), "--kernel-options",
                           R"(cpu_reference={"accumulate": "f64"})", "--out", out2.string(), "--no-check"});
  EXPECT_EQ(r2.exit_code, 0) << "the f16 row now runs in f64\n" << describe(r2);
  std::map<std::string, nlohmann::json> rows2;
  for (const auto& c : read_records(out2).cells) rows2[c["label"].get<std::string>()] = c;
  ASSERT_EQ(rows2.size(), 3u);
  ASSERT_TRUE(rows2.count("cpu_reference[accumulate=f64]")) << describe(r2);
  for (const auto& [label, c] : rows2) {
    EXPECT_EQ(c["status"], "ok") << c.dump();
    EXPECT_EQ(c["options"], nlohmann::json::parse(R"({"accumulate": "f64"})")) << label;
  }
  const auto out3 = work_ / "rows3.jsonl";
  const auto r3 = lcahost({"--matrix", (work_ / "rows.json").string(), "--kernels", "ref_f64",
                           "--kernel-options", R"(ref_f64={"threads_hint": 1})", "--out", out3.string(), "--no-check"});
  EXPECT_EQ(r3.exit_code, 3) << "cpu_reference refuses an unknown option\n" << describe(r3);
  const Records rec = read_records(out3);
  ASSERT_EQ(rec.cells.size(), 1u);
  EXPECT_EQ(rec.cells[0]["status"], "ERROR");
  EXPECT_NE(rec.cells[0]["reason"].get<std::string>().find("threads_hint"), std::string::npos) << rec.cells[0].dump();
  EXPECT_EQ(rec.cells[0]["label"], "ref_f64");
  EXPECT_EQ(rec.cells[0]["options"], nlohmann::json::parse(R"({"accumulate": "f64", "threads_hint": 1})"));
}

// The results file's rules as a user meets them: an existing file is kept unless --force (the
// message offers --resume), the matrix spec is never overwritten, --resume takes only a results
// file, and a file another process writes is refused with that process's pid.
TEST_F(RunCli, ResultsFilesAreNeverOverwrittenByAccident) {
  const auto tiny = (work_ / "tiny.json").string();
  const auto out = work_ / "out.jsonl";
  ASSERT_EQ(lcahost({"--matrix", tiny, "--out", out.string()}).exit_code, 0);
  const std::string first = read_text(out);

  auto r = lcahost({"--matrix", tiny, "--out", out.string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("'" + out.string() + "' already exists"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--resume " + out.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;
  EXPECT_EQ(read_text(out), first);

  r = lcahost({"--matrix", tiny, "--out", out.string(), "--force"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(read_records(out).runs.size(), 1u) << "replaced, not appended to";

  const std::string spec = read_text(work_ / "tiny.json");
  r = lcahost({"--matrix", tiny, "--out", tiny, "--force"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("the matrix spec"), std::string::npos) << r.err;
  EXPECT_EQ(read_text(work_ / "tiny.json"), spec);
  r = lcahost({"--matrix", tiny, "--resume", tiny});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(read_text(work_ / "tiny.json"), spec);

  write_text(work_ / "notes.txt", "my notes\n");
  r = lcahost({"--matrix", tiny, "--resume", (work_ / "notes.txt").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("not a results file"), std::string::npos) << r.err;
  EXPECT_EQ(read_text(work_ / "notes.txt"), "my notes\n");

  {
    core::ResultsFileOptions append;
    append.append = true;
    core::ResultsWriter holder(out, append);  // this test's process writes it now
    r = lcahost({"--matrix", tiny, "--resume", out.string()});
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_NE(r.err.find("is being written by"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("pid " + std::to_string(getpid())), std::string::npos) << r.err;
  }
  r = lcahost({"--matrix", tiny, "--resume", out.string()});
  EXPECT_EQ(r.exit_code, 0) << "the lock went with its writer\n" << describe(r);
}

// A device that is full and a file that reaches its size limit: an error that names the file,
// exit status 2, and the lines written before are there.
TEST_F(RunCli, AFullDiskIsAnErrorAndKeepsWhatWasWritten) {
  auto r = lcahost({"--matrix", (work_ / "tiny.json").string(), "--out", "/dev/full"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("cannot write results file '/dev/full'"), std::string::npos) << r.err;

  // ulimit -f 6: 6 KiB, a run record and a few cells of the 16.
  const auto out = work_ / "limited.jsonl";
  std::string command = "ulimit -f 6 && exec '" + lcahost_path().string() + "' --plugins '" + folder_.path().string() +
                        "' --threads 1 --matrix '" + (work_ / "tiny.json").string() + "' --out '" + out.string() + "'";
  r = run_process({"/bin/bash", "-c", command});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("cannot write results file '" + out.string() + "'"), std::string::npos) << r.err;
  const Records rec = read_records(out);
  ASSERT_EQ(rec.runs.size(), 1u);
  EXPECT_GE(rec.cells.size(), 1u);
  EXPECT_LT(rec.cells.size(), 16u);
  EXPECT_LE(rec.unparseable, 1) << "at most the line the limit cut";
  r = run_process({"/bin/bash", "-c", "exec '" + lcahost_path().string() + "' --plugins '" + folder_.path().string() +
                                          "' --threads 1 --matrix '" + (work_ / "tiny.json").string() +
                                          "' --resume '" + out.string() + "'"});
  EXPECT_EQ(r.exit_code, 0) << "and a resume finishes the run\n" << describe(r);
  std::set<std::string> keys;
  for (const auto& c : read_records(out).cells) keys.insert(cell_key(c));
  EXPECT_EQ(keys.size(), 16u);
}

// A mask with two parameters on the command line (the comma continues its parameters), and
// --masks repeated; each cell's record carries both parameters.
TEST_F(RunCli, MasksWithSeveralParameters) {
  const auto out = work_ / "params.jsonl";
  const auto r = lcahost({"--matrix", (work_ / "tiny.json").string(), "--kernels", "cpu_reference", "--masks",
                          "global_sliding:window=8,global_tokens=3", "--masks", "causal", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const Records rec = read_records(out);
  std::set<std::string> masks;
  for (const auto& c : rec.cells) {
    masks.insert(c["mask_label"].get<std::string>());
    if (c["mask"] == "global_sliding") {
      EXPECT_EQ(c["mask_params"]["window"], 8) << c.dump();
      EXPECT_EQ(c["mask_params"]["global_tokens"], 3) << c.dump();
    }
  }
  EXPECT_EQ(masks, (std::set<std::string>{"causal", "global_sliding:global_tokens=3,window=8"}));

  const auto bad = lcahost({"--matrix", (work_ / "tiny.json").string(), "--masks", "causal,window=8", "--dry-run"});
  EXPECT_EQ(bad.exit_code, 2) << describe(bad);
  EXPECT_NE(bad.err.find("--masks"), std::string::npos) << bad.err;
}

// --dry-run makes each cell's mask: parameters its provider refuses show as ERROR with the
// provider's message, not as runnable; the exit status says the plan would not run whole.
TEST_F(RunCli, DryRunShowsMaskParametersTheProviderRefuses) {
  const auto r = lcahost({"--matrix", (work_ / "tiny.json").string(), "--kernels", "cpu_reference", "--masks",
                          "sliding_window:window=-5,causal", "--dry-run"});
  EXPECT_EQ(r.exit_code, 3) << describe(r);
  EXPECT_NE(r.out.find("ERROR"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mask 'sliding_window:window=-5' at 64 tokens: sliding_window: parameter 'window'"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("plan"), std::string::npos) << "causal is still runnable\n" << r.out;
}

// A cell timeout can only be kept for a cell in a child process: --cell-timeout runs isolated.
TEST_F(RunCli, CellTimeoutRunsEachCellIsolated) {
  write_text(work_ / "hang.json", R"({"kernels": ["fx_hang"], "masks": ["causal"], "seqlens": [32],
      "heads": ["1:1"], "head_dims": [16], "dtypes": ["f32"], "passes": ["fwd"], "warmup": 0, "repeats": 1})");
  PluginFolder folder;
  folder.with_masks().with_reference().with_case("hang");
  const auto out = work_ / "hang.jsonl";
  const auto r = run_lcahost(folder.path(), {"--matrix", (work_ / "hang.json").string(), "--cell-timeout", "1",
                                             "--out", out.string()}, 60);
  EXPECT_FALSE(r.timed_out) << describe(r);
  EXPECT_NE(r.err.find("runs each cell in a child process"), std::string::npos) << r.err;
  const Records rec = read_records(out);
  ASSERT_EQ(rec.cells.size(), 1u) << describe(r);
  EXPECT_EQ(rec.cells[0]["status"], "TIMEOUT");
}

TEST_F(RunCli, RetryErrorsNeedsAResultsFileToResume) {
  const auto r = lcahost({"--matrix", (work_ / "tiny.json").string(), "--retry-errors"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("--resume"), std::string::npos) << r.err;
}

// Ctrl-C in a run (fx_sigint raises SIGINT in its first forward): the cell finishes and is kept,
// lcahost prints how to go on and ends by SIGINT itself (a shell sees 130 and stops its script).
TEST_F(RunCli, SigintStopsAfterTheCellAndSaysHowToResume) {
  PluginFolder folder;
  folder.with_masks().with_reference().with_case("sigint");
  write_text(work_ / "stop.json", R"({"kernels": ["fx_sigint"], "masks": ["full", "causal"], "seqlens": [64],
    "heads": ["2:2"], "head_dims": [16], "dtypes": ["f32"], "passes": ["fwd"], "warmup": 1, "repeats": 2})");
  const auto out = work_ / "stop.jsonl";
  const auto r = run_lcahost(folder.path(), {"--threads", "1", "--matrix", (work_ / "stop.json").string(),
                                             "--out", out.string()});
  EXPECT_EQ(r.signal, SIGINT) << "ended by the signal, so that a calling script stops too\n" << describe(r);
  EXPECT_NE(r.err.find("stopping after the cell in flight"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("# stopped by SIGINT with 1 of 2 cells not run"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--resume " + out.string()), std::string::npos) << r.out;
  EXPECT_EQ(read_records(out).cells.size(), 1u);

  const auto rest = run_lcahost(folder.path(), {"--threads", "1", "--matrix", (work_ / "stop.json").string(),
                                                "--resume", out.string()});
  EXPECT_EQ(rest.exit_code, 0) << describe(rest);
  const Records rec = read_records(out);
  ASSERT_EQ(rec.cells.size(), 2u);
  EXPECT_NE(rec.cells[0]["mask"], rec.cells[1]["mask"]);
}

}  // namespace
}  // namespace lca::test
