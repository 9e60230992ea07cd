// lcahost's inspection commands and its refusals, run as a subprocess: what is printed, on
// which stream, and the exit status.
#include "fixture_folder.hpp"
#include "subprocess.hpp"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace lca::test {
namespace {

using nlohmann::json;

#define EXPECT_HAS(text, fragment) EXPECT_NE((text).find(fragment), std::string::npos) << (text)
#define EXPECT_LACKS(text, fragment) EXPECT_EQ((text).find(fragment), std::string::npos) << (text)

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The line of a table that starts with `first` (the row of a kernel, a plugin, a mask).
std::string row(const std::string& text, const std::string& first) {
  for (const auto& l : lines_of(text))
    if (l.rfind(first + " ", 0) == 0) return l;
  return "";
}

class Cli : public ::testing::Test {
 protected:
  Cli() {
    folder_.with_masks().with_reference().with_cases(
        {"good", "oom", "cuda_caps", "manifest_syntax", "manifest_wrong_type", "library_missing", "not_shared_object",
         "no_entry", "abi_mismatch", "name_mismatch", "kind_mismatch", "no_backward"});
  }
  ProcessResult lcahost(const std::vector<std::string>& args) { return run_lcahost(folder_.path(), args); }
  PluginFolder folder_;
};

TEST_F(Cli, ListShowsLoadedAndRefusedWithReasons) {
  const auto r = lcahost({"list"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_HAS(r.out, folder_.path().string());
  for (const char* name : {"builtin", "cpu_reference", "fx_good", "fx_oom", "fx_cuda"}) {
    const std::string line = row(r.out, name);
    ASSERT_FALSE(line.empty()) << name << "\n" << r.out;
    EXPECT_HAS(line, "loaded");
    EXPECT_LACKS(line, "refused");
  }
  const std::pair<const char*, const char*> refused[] = {
      {"fx_missing_library", "is missing"},
      {"fx_not_so", "does not load"},
      {"fx_no_entry", "does not export lca_plugin_entry"},
      {"fx_abi2", "built for ABI 2.0, this host speaks ABI 1."},
      {"fx_name_mismatch", "name mismatch"},
      {"fx_kind_mismatch", "kind mismatch"},
      {"fx_no_backward", "declares backward"}};
  for (const auto& [name, reason] : refused) {
    const std::string line = row(r.out, name);
    ASSERT_FALSE(line.empty()) << name << "\n" << r.out;
    EXPECT_HAS(line, "refused");
    EXPECT_HAS(line, reason);
  }
  // Manifests that never became plugins are listed by file, with file:line and reason.
  EXPECT_HAS(r.out, "fx_bad_syntax.json:7: not valid JSON");
  EXPECT_HAS(r.out, "fx_wrong_type.json:15: field 'gqa'");
}

TEST_F(Cli, ListAsJson) {
  const auto r = lcahost({"list", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  json j;
  ASSERT_NO_THROW(j = json::parse(r.out)) << r.out;
  ASSERT_TRUE(j.is_array());
  int loaded = 0, refused = 0;
  for (const auto& p : j) {
    (p["status"] == "loaded" ? loaded : refused)++;
    if (p["status"] == "refused") EXPECT_FALSE(p["reason"].get<std::string>().empty()) << p.dump();
  }
  EXPECT_EQ(loaded, 5);
  EXPECT_EQ(refused, 7 + 2);
}

TEST_F(Cli, EachRefusalIsOneWarningLine) {
  const auto r = lcahost({"caps"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  // A warning names the manifest file and the reason, on one line.
  for (const char* file : {"fx_no_entry.json", "fx_abi2.json", "fx_name_mismatch.json", "fx_bad_syntax.json"}) {
    int lines = 0;
    for (const auto& l : lines_of(r.err)) lines += l.find(file) != std::string::npos;
    EXPECT_GE(lines, 1) << file << "\n" << r.err;
  }
  EXPECT_LACKS(r.out, "refused") << "warnings go to stderr, the table to stdout";
}

// Registry::load warns once for each refused manifest and plugin; the commands must not warn again.
TEST_F(Cli, EachRefusalIsWarnedOnce) {
  const auto r = lcahost({"caps"});
  for (const char* file : {"fx_no_entry.json", "fx_abi2.json", "fx_name_mismatch.json", "fx_bad_syntax.json"}) {
    int lines = 0;
    for (const auto& l : lines_of(r.err)) lines += l.find(file) != std::string::npos;
    EXPECT_EQ(lines, 1) << file << "\n" << r.err;
  }
}

TEST_F(Cli, CapsTable) {
  const auto r = lcahost({"caps"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const std::string good = row(r.out, "fx_good");
  EXPECT_HAS(good, "cpu");
  EXPECT_HAS(good, "16,32");
  EXPECT_HAS(good, "full,causal");
  EXPECT_HAS(row(r.out, "fx_cuda"), "cuda>=sm_90");
  EXPECT_HAS(row(r.out, "cpu_reference"), "any (14)");
  EXPECT_TRUE(row(r.out, "fx_no_entry").empty()) << "refused kernels have no capabilities";
  // The kernel x mask grid: fx_good runs causal, not sliding_window.
  const std::string causal = row(r.out, "causal");
  ASSERT_FALSE(causal.empty()) << r.out;
  EXPECT_LACKS(causal, "X");
  EXPECT_HAS(row(r.out, "sliding_window"), "X");
}

TEST_F(Cli, CapsFilters) {
  auto r = lcahost({"caps", "--mask", "causal", "--backward"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_FALSE(row(r.out, "cpu_reference").empty()) << r.out;
  EXPECT_FALSE(row(r.out, "fx_good").empty()) << r.out;
  EXPECT_FALSE(row(r.out, "fx_cuda").empty()) << r.out;
  EXPECT_TRUE(row(r.out, "fx_oom").empty()) << "fx_oom has no backward\n" << r.out;

  r = lcahost({"caps", "--mask", "sliding_window"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_TRUE(row(r.out, "fx_good").empty()) << r.out;
  EXPECT_FALSE(row(r.out, "fx_oom").empty()) << r.out;

  r = lcahost({"caps", "--device-type", "cuda"});
  EXPECT_FALSE(row(r.out, "fx_cuda").empty()) << r.out;
  EXPECT_TRUE(row(r.out, "cpu_reference").empty()) << r.out;

  r = lcahost({"caps", "--dtype", "bf16", "--head-dim", "64"});
  EXPECT_FALSE(row(r.out, "cpu_reference").empty()) << r.out;
  EXPECT_TRUE(row(r.out, "fx_good").empty()) << r.out;
}

TEST_F(Cli, CapsAsJson) {
  const auto r = lcahost({"caps", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  json j;
  ASSERT_NO_THROW(j = json::parse(r.out)) << r.out;
  ASSERT_TRUE(j.is_array());
  std::map<std::string, json> by_name;
  for (const auto& k : j) by_name[k["kernel"].get<std::string>()] = k;
  ASSERT_EQ(by_name.size(), 4u) << r.out;  // cpu_reference, fx_cuda, fx_good, fx_oom
  EXPECT_EQ(by_name["fx_good"]["masks"], json({"full", "causal"}));
  EXPECT_EQ(by_name["fx_good"]["head_dims"], json({16, 32}));
  EXPECT_EQ(by_name["fx_good"]["backward"], true);
  EXPECT_EQ(by_name["fx_good"]["gqa"], false);
  EXPECT_EQ(by_name["cpu_reference"]["head_dims"], "any");
  EXPECT_EQ(by_name["cpu_reference"]["masks"].size(), 14u) << "'any' is spelled out";
  EXPECT_EQ(by_name["cpu_reference"]["reference"], "cpu");
  EXPECT_EQ(by_name["fx_cuda"]["min_cc"], 90);

  const auto md = lcahost({"caps", "--format", "md"});
  EXPECT_HAS(md.out, "| kernel | device |");
}

TEST_F(Cli, MasksListsTheFourteenPatterns) {
  const auto r = lcahost({"masks"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto lines = lines_of(r.out);
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind("mask", 0), 0u) << r.out;
  EXPECT_EQ(lines[1].rfind("----", 0), 0u) << r.out;
  EXPECT_EQ(lines.size(), 2u + 14u) << r.out;
  for (const char* name : {"full", "causal", "sliding_window", "block_sparse", "shared_question"})
    EXPECT_FALSE(row(r.out, name).empty()) << name;
  EXPECT_HAS(row(r.out, "sliding_window"), "window=1024");
}

TEST_F(Cli, ShowDrawsTheCausalTriangle) {
  const auto r = lcahost({"masks", "--show", "causal", "--seqlen", "8"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_HAS(r.out,
             "#.......\n##......\n###.....\n####....\n#####...\n######..\n#######.\n########\n");
  EXPECT_HAS(r.out, "area 36");
  const auto w = lcahost({"masks", "--show", "sliding_window", "--seqlen", "6", "--param", "window=1"});
  ASSERT_EQ(w.exit_code, 0) << describe(w);
  EXPECT_HAS(w.out, "sliding_window:window=1");
  EXPECT_HAS(w.out, "##....\n###...\n.###..\n..###.\n...###\n....##\n");
}

TEST_F(Cli, UnknownMaskInARunNamesItAndTheKnownOnes) {
  const auto r = lcahost({"--matrix", "quick", "--masks", "causal,diagonal"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "unknown mask 'diagonal'");
  EXPECT_HAS(r.err, "causal_document");
  EXPECT_HAS(r.err, "block_sparse");
}

// A parameter name the mask does not take is refused before any cell runs, naming the ones it
// does take; a value out of range is the cell's ERROR (whether it fits can depend on the length),
// and the summary gives that reason whole, once, where the table's note column cut it.
TEST_F(Cli, UnknownMaskParameterIsRefusedAndCutReasonsAreGivenWhole) {
  const auto r = lcahost({"--matrix", "quick", "--kernels", "cpu_reference", "--masks", "sliding_window:windw=5"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "mask 'sliding_window:windw=5': sliding_window has no parameter 'windw'; it takes window");
  EXPECT_LACKS(r.out, "ERROR");

  const auto v = lcahost({"--matrix", "quick", "--kernels", "cpu_reference", "--masks",
                          "causal,sliding_window:window=-4"});
  EXPECT_EQ(v.exit_code, 3) << describe(v);
  const std::string whole = "sliding_window: parameter 'window' = -4 is out of range; allowed: 0 <= window <= seqlen";
  std::string summary_line;
  int rows_cut = 0;
  for (const auto& l : lines_of(v.out)) {
    if (l.find("ERROR") != std::string::npos && l.rfind("# ", 0) != 0) {
      ++rows_cut;
      EXPECT_LACKS(l, whole);  // cut in the table
    }
    if (l.rfind("# ERROR (2 cells): ", 0) == 0) summary_line = l;
  }
  EXPECT_EQ(rows_cut, 2) << v.out;
  EXPECT_HAS(summary_line, whole);
  // One line for the one reason, however many cells gave it; the ok rows of causal give none.
  int whole_lines = 0;
  for (const auto& l : lines_of(v.out)) whole_lines += l.rfind("# ERROR (", 0) == 0 || l.rfind("# ok (", 0) == 0;
  EXPECT_EQ(whole_lines, 1) << v.out;
}

TEST_F(Cli, UnknownKernelInARun) {
  const auto r = lcahost({"--matrix", "quick", "--kernels", "flash9"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "unknown kernel 'flash9'");
  EXPECT_HAS(r.err, "fx_good");
}

TEST_F(Cli, UnknownPresetNamesThePresets) {
  const auto r = lcahost({"--matrix", "qiuck"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "unknown matrix preset 'qiuck'");
  EXPECT_HAS(r.err, "quick");
  EXPECT_HAS(r.err, "all");
}

TEST_F(Cli, CpModelValidatesAStoredRunBothWays) {
  // Five 4-GPU cells (full, 64K a GPU) against their one-GPU records: a row a cell with the area
  // and the tiles prediction, and a summary of each.
  const std::string R = std::string(LCA_TEST_SOURCE_DIR) + "/docs/results/";
  auto r = lcahost({"cp-model", "--validate", R + "2026-11-26-h100x4-cp-target-64k-full-np4.jsonl", "--rates",
                    R + "2026-11-26-h100x4-cp-target-64k-full-np1.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_HAS(r.out, "measured");
  EXPECT_HAS(r.out, "tiles");
  EXPECT_HAS(r.out, "several peers: no all-to-all figure, the one-peer figures serve");
  int rows = 0;
  for (const auto& l : lines_of(r.out)) rows += l.rfind("ring_p2p ", 0) == 0 || l.rfind("usp ", 0) == 0;
  EXPECT_EQ(rows, 2) << r.out;
  EXPECT_HAS(r.out, "# summary area : 5 cells");
  EXPECT_HAS(r.out, "# summary tiles: 5 cells");
  EXPECT_HAS(r.out, "(--kernel-time)");
  // --json: the same comparison a cell, full mask labels, and the summaries.
  TempDir dir("lca_cp_model_validate");
  const std::string out = (dir / "validate.json").string();
  r = lcahost({"cp-model", "--validate", R + "2026-11-26-h100x4-cp-target-64k-full-np4.jsonl", "--rates",
               R + "2026-11-26-h100x4-cp-target-64k-full-np1.jsonl", "--json", out});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  {
    std::ifstream f(out);
    const json v = json::parse(f);
    EXPECT_EQ(v["type"], "cp_model_validate");
    ASSERT_EQ(v["cells"].size(), 5u);
    EXPECT_EQ(v["summary"]["tiles"]["cells"], 5);
    EXPECT_EQ(v["summary"]["area"]["cells"], 5);
    int within = 0;
    for (const auto& c : v["cells"]) {
      EXPECT_EQ(c["world_size"], 4);
      EXPECT_EQ(c["mask"], "full");
      const double measured = c["measured_tflops"].get<double>(), tiles = c["tiles"]["tflops"].get<double>();
      EXPECT_GT(measured, 0);
      EXPECT_NEAR(c["tiles"]["error"].get<double>(), (tiles - measured) / measured, 1e-9);
      within += std::abs(c["tiles"]["error"].get<double>()) <= 0.15;
    }
    EXPECT_EQ(v["summary"]["tiles"]["within_15pct"], within);
  }
  // Timed by area only: no tiles column is chosen.
  r = lcahost({"cp-model", "--validate", R + "2026-11-26-h100x4-cp-target-64k-full-np4.jsonl", "--rates",
               R + "2026-11-26-h100x4-cp-target-64k-full-np1.jsonl", "--kernel-time", "area"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_HAS(r.out, "# summary area : 5 cells");
  r = lcahost({"cp-model", "--kernel-time", "cells", "--rate", "500"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
}

// kernel-model, without a GPU: a matrix's cells as flex_flash's schedule predicts their share of
// its own full (prefix_lm_causal's backward at 18599 tokens, 8:1, whose two pairs of prefix key
// tiles end the grid: 0.61 measured on an H100, seed 1212's sweep), and a run's measured shares
// beside the predicted ones.
TEST_F(Cli, KernelModelPredictsSharesOfOwnFullAndSetsThemBesideARun) {
  TempDir dir("lca_kernel_model");
  const auto matrix = dir / "m.json";
  {
    std::ofstream f(matrix);
    f << R"({"name": "km", "kernels": ["flex_flash"], "masks": ["full", "causal", "prefix_lm_causal:prefix=5767"],
             "seqlens": {"cuda": [18599]}, "heads": ["8:1"], "head_dims": [64], "dtypes": ["bf16"],
             "passes": ["fwd", "bwd"], "seed": 1212005})";
  }
  // (fill, predicted share) of a row.
  auto row_of = [](const std::string& out, const std::string& first, const std::string& pass) {
    for (const auto& l : lines_of(out)) {
      std::istringstream in(l);
      std::string mask, heads, p;
      long long seqlen = 0;
      int dim = 0;
      double fill = -1, value = -1;
      if (in >> mask >> seqlen >> heads >> dim >> p >> fill >> value && mask == first && p == pass)
        return std::make_pair(fill, value);
    }
    return std::make_pair(-1.0, -1.0);
  };
  auto share = [&](const std::string& out, const std::string& first, const std::string& pass) {
    return row_of(out, first, pass).second;
  };
  auto r = lcahost({"kernel-model", "--matrix", matrix.string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_DOUBLE_EQ(share(r.out, "full", "fwd"), 1.0);
  EXPECT_DOUBLE_EQ(share(r.out, "full", "bwd"), 1.0);
  EXPECT_GT(share(r.out, "causal", "bwd"), 0.9);
  const double prefix = share(r.out, "prefix_lm_causal:prefix=5767", "bwd");
  EXPECT_GT(prefix, 0.5);
  EXPECT_LT(prefix, 0.75);
  EXPECT_GT(row_of(r.out, "prefix_lm_causal:prefix=5767", "bwd").first, 0.95);  // its tiles are full: the schedule's

  // A run: its record's seed and GPU, flex_flash's full and causal, a cell of another row, and a
  // causal whose recorded area is not the mask the provider makes (left out).
  const auto results = dir / "r.jsonl";
  {
    std::ofstream f(results);
    auto cell = [](const std::string& row, const std::string& mask, double tflops, int64_t area) {
      return json{{"kernel", "flex_flash"}, {"label", row}, {"device", "cuda"}, {"mask", mask},
                  {"mask_params", json::object()}, {"mask_label", mask}, {"seqlen", 18599}, {"heads_q", 8},
                  {"heads_kv", 1}, {"head_dim", 64}, {"dtype", "bf16"}, {"pass", "bwd"}, {"status", "ok"},
                  {"tflops", tflops}, {"area", area}};
    };
    const int64_t full_area = int64_t{18599} * 18599, causal_area = int64_t{18599} * 18600 / 2;
    f << json{{"matrix", {{"seed", 1212005}}}, {"gpu", {{"sm_count", 132}, {"l2_bytes", 52428800}}}}.dump() << "\n";
    f << cell("flex_flash", "full", 400, full_area).dump() << "\n";
    f << cell("flex_flash", "causal", 200, causal_area).dump() << "\n";
    f << cell("ff_other", "causal", 390, causal_area).dump() << "\n";
    f << json{{"matrix", {{"seed", 7}}}}.dump() << "\n";
    f << cell("flex_flash", "full", 400, full_area).dump() << "\n";
    f << cell("flex_flash", "causal", 300, causal_area + 1).dump() << "\n";
  }
  r = lcahost({"kernel-model", "--validate", results.string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_HAS(r.out, "# summary bwd: 1 cells, 0 within 15%");
  EXPECT_HAS(r.out, "measured 0.50 predicted");
  EXPECT_HAS(r.out, "causal  18599 tokens  8:1 d64 bwd");
  EXPECT_HAS(r.out, "# 1 cells left out: the mask provider draws their masks otherwise now");
  // The other row's cells are read with --kernel; it has no full of its own there.
  r = lcahost({"kernel-model", "--validate", results.string(), "--kernel", "ff_other"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_HAS(r.out, "# no ff_other cell beside its own full in these files");
  EXPECT_HAS(r.out, "# 1 cells left out: no full of the same shape and pass in their run");
  r = lcahost({"kernel-model"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "kernel-model needs either --matrix M");
}

TEST_F(Cli, CpModelReadsTheProbesLoneSenderFigure) {
  // The stored off-NVLink probe of 4 H200s has a one_to_all pattern: the model takes it as the
  // lone sender's figure (bytes that leave the rank) beside the all-to-all's.
  const std::string R = std::string(LCA_TEST_SOURCE_DIR) + "/docs/results/";
  TempDir dir("lca_cp_model_lone");
  const std::string out = (dir / "model.json").string();
  const auto r = lcahost({"cp-model", "--probe", R + "2026-11-27-h200x4-probe-np4-offlink.json", "--masks", "causal",
                          "--worlds", "4", "--gpus-per-node", "4", "--tokens-per-gpu", "4096", "--rate", "500",
                          "--strategies", "balanced", "--json", out});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::ifstream f(out);
  const json j = json::parse(f);
  const double lone = j["machine"]["intra_lone_sender"]["GBps"].get<double>();
  const double several = j["machine"]["intra_several_peers"]["GBps"].get<double>();
  EXPECT_GT(lone, 3.5);
  EXPECT_LT(lone, 4.5);
  EXPECT_GT(lone, several);  // off NVLink a lone sender beats the even all-to-all
}

TEST_F(Cli, OtherBadCommandLines) {
  auto r = lcahost({"caps", "--mask", "diagonal"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "unknown mask 'diagonal'");

  r = lcahost({"masks", "--show", "diagonal"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "'diagonal'");

  r = lcahost({"list", "--format", "yaml"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);

  r = run_lcahost("/nonexistent/lca_plugins", {"list"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "/nonexistent/lca_plugins");

  r = lcahost({"--resume", "/nonexistent/results.jsonl"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "--matrix");
}

// A manifest that is not UTF-8 is refused by its file name in every command, and a run still
// writes a whole results file whose run record names it (in bytes a JSON reader takes).
TEST(CliText, ManifestNotUtf8IsRefusedByNameInEveryCommand) {
  PluginFolder folder;
  folder.with_masks().with_reference().with_cases({"good", "manifest_utf8"});
  TempDir work("lca_cli_utf8");
  write_text(work / "one.json", R"({"kernels": ["fx_good"], "masks": ["causal"], "seqlens": [32], "heads": ["1:1"],
      "head_dims": [16], "dtypes": ["f32"], "passes": ["fwd"], "warmup": 0, "repeats": 1})");
  const std::string refusal = "fx_bad_utf8.json:7: not valid UTF-8";
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"list"}, {"caps"}, {"masks"}, {"--matrix", (work / "one.json").string(), "--dry-run"}}) {
    const auto r = run_lcahost(folder.path(), args);
    EXPECT_EQ(r.exit_code, 0) << args[0] << "\n" << describe(r);
    EXPECT_HAS(r.out + r.err, refusal);
  }
  auto r = run_lcahost(folder.path(), {"list", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NO_THROW((void)json::parse(r.out)) << r.out;

  const auto out = work / "r.jsonl";
  r = run_lcahost(folder.path(), {"--matrix", (work / "one.json").string(), "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_HAS(r.err, refusal);
  const auto lines = lines_of(read_text(out));
  ASSERT_EQ(lines.size(), 3u) << "run, cell, summary";
  for (const auto& line : lines) EXPECT_NO_THROW((void)json::parse(line)) << line;
  EXPECT_HAS(json::parse(lines[0])["refused_manifests"].dump(), refusal);
  EXPECT_EQ(json::parse(lines[1])["status"], "ok");
}

// A log level nobody knows is a warning and the default level, so the error after it still shows
// (spdlog alone would read it as "off" and silence everything).
TEST_F(Cli, UnknownLogLevelIsAWarningAndTheDefault) {
  const auto r = run_process({"/usr/bin/env", "LCA_LOG_LEVEL=wrn", lcahost_path().string(), "--plugins",
                              folder_.path().string(), "--matrix", "qiuck"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "LCA_LOG_LEVEL='wrn' is not a log level");
  EXPECT_HAS(r.err, "unknown matrix preset 'qiuck'");
  const auto quiet = run_process({"/usr/bin/env", "LCA_LOG_LEVEL=error", lcahost_path().string(), "--plugins",
                                  folder_.path().string(), "--matrix", "qiuck"});
  EXPECT_LACKS(quiet.err, "refused");
  EXPECT_HAS(quiet.err, "unknown matrix preset 'qiuck'");
}

// Numbers out of range, NaN and infinity are refused by the option's name with the range.
TEST_F(Cli, NumericOptionsAreChecked) {
  const std::pair<const char*, const char*> bad[] = {
      {"--threads", "-3"},      {"--cell-timeout", "0"},   {"--cell-timeout", "-1"}, {"--cell-timeout", "nan"},
      {"--cell-timeout", "inf"}, {"--cell-timeout", "1s"}, {"--warmup-ms", "nan"},    {"--repeat-ms", "-inf"},
      {"--seqlens", "0"},        {"--seqlens", "64,-5"},    {"--seqlens", "3037000500"}, {"--seqlens", "1e3"}};
  for (const auto& [flag, value] : bad) {
    const auto r = lcahost({"--matrix", "quick", flag, value, "--dry-run"});
    EXPECT_EQ(r.exit_code, 2) << flag << " " << value << "\n" << describe(r);
    EXPECT_HAS(r.err, flag);
  }
  const auto r = lcahost({"--matrix", "quick", "--cell-timeout", "nan", "--dry-run"});
  EXPECT_HAS(r.err, "more than 0 and at most");
  // --seqlens replaces the matrix's lengths, lengths off every grid included.
  const auto lengths = lcahost({"--matrix", "quick", "--seqlens", "97,1000", "--dry-run"});
  EXPECT_EQ(lengths.exit_code, 0) << describe(lengths);
  EXPECT_HAS(lengths.out, " 97 ");
  EXPECT_HAS(lengths.out, " 1000 ");
  // A seed is a whole number of 64 bits: neither wrapped from -1 nor capped past 2^64.
  for (const char* seed : {"-1", "18446744073709551616", "1e3", "+5", ""}) {
    const auto m = lcahost({"masks", "--show", "causal", "--seqlen", "64", "--seed", seed});
    EXPECT_EQ(m.exit_code, 2) << seed << "\n" << describe(m);
    EXPECT_HAS(m.err, "--seed");
  }
  EXPECT_EQ(lcahost({"masks", "--show", "causal", "--seqlen", "64", "--seed", "18446744073709551615"}).exit_code, 0);
  EXPECT_EQ(lcahost({"masks", "--show", "causal", "--seqlen", "64", "--width", "0"}).exit_code, 2);
}

TEST_F(Cli, MatrixOnAFolderNamesIt) {
  TempDir dir("lca_matrix_dir");
  const auto r = lcahost({"--matrix", dir.path().string(), "--dry-run"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, dir.path().string());
  EXPECT_HAS(r.err, "is a folder");
}

// --cp-options is read once, before MPI starts and before any cell: one refusal, not one a cell.
TEST_F(Cli, CpOptionsAreReadBeforeAnything) {
  auto r = lcahost({"--cp", "ulysses", "--cp-options", "{bad"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "--cp-options '{bad' is not valid JSON");
  r = lcahost({"--cp", "ulysses", "--cp-options", "[2]"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "not a JSON object");
}

// --kernel-options in a CP run are the local kernel's: another kernel's are refused before MPI starts.
TEST_F(Cli, CpKernelOptionsNameTheLocalKernel) {
  auto r = lcahost({"--cp", "ulysses", "--kernel-options", R"(flex_flash={"fwd_split": "auto"})"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "--kernel-options names 'flex_flash'");
  EXPECT_HAS(r.err, "local kernel is 'cpu_reference'");
  r = lcahost({"--cp", "ulysses", "--kernel-options", "cpu_reference=[1]"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "expected KERNEL=JSON-OBJECT");
}

}  // namespace
}  // namespace lca::test
