// tools/sweep.py, the cliff finder, as a user runs it (python3 in a subprocess): plan writes the
// same files for the same seed and other files for another; its draw covers what the sweep
// promises (every head shape, lengths off the 64 grid, all 14 masks); every drawn mask is
// accepted by the builtin provider and every spec loads as a matrix; report's ratios, worst
// cells, plan_info, a share split into tile fill and rate a tile, and PASS / MISS on hand-made
// results files, and its exit statuses.
#include "fixture_folder.hpp"
#include "subprocess.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace lca::test {
namespace {

using nlohmann::json;

#define EXPECT_HAS(text, fragment) EXPECT_NE((text).find(fragment), std::string::npos) << (text)
#define EXPECT_LACKS(text, fragment) EXPECT_EQ((text).find(fragment), std::string::npos) << (text)

const std::vector<std::string> kMasks = {
    "full", "causal", "full_document", "causal_document", "sliding_window", "sliding_window_causal",
    "sliding_window_document", "shared_question", "causal_blockwise", "prefix_lm_causal", "prefix_lm_document",
    "global_sliding", "block_causal_document", "block_sparse"};

bool have_python() {
  static const bool found = run_process({"/usr/bin/env", "python3", "--version"}).exit_code == 0;
  return found;
}

#define SKIP_WITHOUT_PYTHON() \
  if (!have_python()) GTEST_SKIP() << "no python3 on PATH (tools/sweep.py needs one)"

ProcessResult sweep(std::vector<std::string> args) {
  std::vector<std::string> argv = {"/usr/bin/env", "python3", (source_dir() / "tools" / "sweep.py").string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, 120);
}

// Every file of a folder, by name.
std::map<std::string, std::string> files_of(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename().string()] = read_text(e.path());
  return out;
}

std::string line_with(const std::string& text, const std::string& fragment) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l.find(fragment) != std::string::npos) return l;
  return "";
}

class SweepPlan : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_python()) return;
    const auto r = sweep({"plan", "--seed", "7", "--out", (dir_ / "a").string()});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    plan_ = json::parse(read_text(dir_ / "a" / "plan.json"));
  }
  TempDir dir_{"lca_sweep"};
  json plan_;
};

TEST_F(SweepPlan, SameSeedWritesTheSameFilesAndAnotherSeedOthers) {
  SKIP_WITHOUT_PYTHON();
  auto r = sweep({"plan", "--seed", "7", "--out", (dir_ / "b").string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto a = files_of(dir_ / "a"), b = files_of(dir_ / "b");
  EXPECT_EQ(a.size(), 8u);  // g00..g05.json, plan.json, run.sh
  for (const char* name : {"g00.json", "g05.json", "plan.json", "run.sh"}) EXPECT_TRUE(a.count(name)) << name;
  EXPECT_EQ(a, b);

  r = sweep({"plan", "--seed", "8", "--out", (dir_ / "c").string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto c = files_of(dir_ / "c");
  EXPECT_NE(a.at("plan.json"), c.at("plan.json"));
  EXPECT_NE(a.at("g00.json"), c.at("g00.json"));
}

// run.sh as a user runs it, with a stand-in lcahost that loads flex_flash and writes one line a
// group (the group and the GPU it saw) into the results file it is given. Without GPUS every
// group goes into results.jsonl; with GPUS=0,1 each group runs once, into its own
// results-gNN.jsonl, on one of the two GPUs, and both GPUs get groups; a folder of one kind
// refuses a run of the other, and bad GPUS lists are refused before anything runs.
TEST_F(SweepPlan, RunShSpreadsGroupsOverGpusAndResumesOneWay) {
  SKIP_WITHOUT_PYTHON();
  const fs::path fake = dir_ / "lcahost";
  write_text(fake,
             "#!/usr/bin/env bash\n"
             "if [ \"$3\" = list ]; then echo '[{\"name\":\"flex_flash\",\"kind\":\"kernel\",\"status\":\"loaded\"}]'; exit 0; fi\n"
             "while [ $# -gt 0 ]; do case \"$1\" in --matrix) spec=$2; shift;; --resume) out=$2; shift;; esac; shift; done\n"
             "echo \"$(basename \"$spec\") ${CUDA_VISIBLE_DEVICES:-none}\" >> \"$out\"\n");
  fs::permissions(fake, fs::perms::owner_all);
  const std::string run_sh = (dir_ / "a" / "run.sh").string();
  auto run = [&](const std::string& gpus) {
    std::vector<std::string> argv = {"/usr/bin/env", "LCAHOST=" + fake.string(), "PLUGINS=" + dir_.path().string()};
    if (!gpus.empty()) argv.push_back("GPUS=" + gpus);
    argv.insert(argv.end(), {"bash", run_sh});
    return run_process(argv, 60);
  };
  for (const std::string bad : {"0,x", "1,1", ","}) {
    const auto r = run(bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << describe(r);
    EXPECT_HAS(r.err, "GPUS=");
  }
  auto r = run("0,1");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::map<std::string, int> runs;
  std::set<std::string> gpus_seen;
  for (const auto& g : plan_["groups"]) {
    const std::string name = g["file"].get<std::string>().substr(0, 3);  // gNN
    const fs::path file = dir_ / "a" / ("results-" + name + ".jsonl");
    ASSERT_TRUE(fs::exists(file)) << file;
    std::istringstream in(read_text(file));
    for (std::string spec, gpu; in >> spec >> gpu;) {
      ++runs[spec];
      EXPECT_EQ(spec, name + ".json");
      EXPECT_TRUE(gpu == "0" || gpu == "1") << gpu;
      gpus_seen.insert(gpu);
    }
  }
  EXPECT_EQ(runs.size(), 6u);
  for (const auto& [spec, n] : runs) EXPECT_EQ(n, 1) << spec;
  EXPECT_EQ(gpus_seen.size(), 2u);
  r = run("");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "resume it with GPUS");
  // The report reads the folder (here: records that are not lcahost's, so it says so).
  r = sweep({"report", (dir_ / "a").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "results-g0");
  r = sweep({"report", dir_.path().string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "holds no results.jsonl or results-gNN.jsonl");

  // Without GPUS: one results.jsonl, every group in it, no GPU set.
  ASSERT_EQ(sweep({"plan", "--seed", "7", "--out", (dir_ / "b").string()}).exit_code, 0);
  const std::string run_b = (dir_ / "b" / "run.sh").string();
  r = run_process({"/usr/bin/env", "LCAHOST=" + fake.string(), "PLUGINS=" + dir_.path().string(), "bash", run_b}, 60);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::istringstream in(read_text(dir_ / "b" / "results.jsonl"));
  int lines = 0;
  for (std::string spec, gpu; in >> spec >> gpu; ++lines) EXPECT_EQ(gpu, "none");
  EXPECT_EQ(lines, 6);
  r = run_process({"/usr/bin/env", "LCAHOST=" + fake.string(), "GPUS=0", "bash", run_b}, 60);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "resume it without GPUS");
}

TEST_F(SweepPlan, DrawCoversShapesOddLengthsAndEveryMask) {
  SKIP_WITHOUT_PYTHON();
  ASSERT_EQ(plan_["groups"].size(), 6u);
  std::set<std::string> shapes;
  bool off_grid = false, uniform = false;
  for (const auto& g : plan_["groups"]) {
    const int64_t n = g["seqlen"];
    EXPECT_GE(n, 4096);
    EXPECT_LE(n, 131072);
    off_grid |= n % 64 != 0;
    shapes.insert(g["heads"].get<std::string>() + " d" + std::to_string(g["head_dim"].get<int>()));

    const json spec = json::parse(read_text(dir_ / "a" / g["file"].get<std::string>()));
    EXPECT_EQ(spec["seqlens"], json::array({n}));
    EXPECT_EQ(spec["kernels"], json::array({"flex_flash", "cudnn_sdpa"}));
    EXPECT_EQ(spec["passes"], json::array({"fwd", "bwd"}));
    EXPECT_EQ(spec["warmup_ms"], 300.0);
    EXPECT_EQ(spec["repeat_ms"], 300.0);
    EXPECT_EQ(spec["check"].get<bool>(), n <= 32768) << n;
    ASSERT_EQ(spec["masks"].size(), kMasks.size());
    for (size_t i = 0; i < kMasks.size(); ++i) {
      const std::string text = spec["masks"][i];
      EXPECT_EQ(text.substr(0, text.find(':')), kMasks[i]);
      EXPECT_EQ(text, g["masks"][i]["spec"].get<std::string>());
      uniform |= text.find("dist=uniform:") != std::string::npos;
    }
    EXPECT_EQ(spec["masks"][0], "full");  // the reference of every share of own full
  }
  EXPECT_TRUE(off_grid) << plan_.dump(1);
  EXPECT_TRUE(uniform) << plan_.dump(1);
  EXPECT_EQ(shapes, (std::set<std::string>{"64:8 d64", "64:8 d128", "32:32 d64", "32:32 d128", "8:1 d64", "8:1 d128"}));
  EXPECT_GT(plan_["estimate_s"].get<double>(), 0);
  EXPECT_EQ(plan_["run_order"].size(), 6u);
}

// The builtin provider is the judge of a parameter: each drawn mask is generated at its length.
TEST_F(SweepPlan, EveryDrawnMaskIsAcceptedByTheBuiltinProvider) {
  SKIP_WITHOUT_PYTHON();
  // The check can fail: a window past the length is refused.
  auto bad = run_lcahost(main_plugin_dir(), {"masks", "--show", "sliding_window", "--seqlen", "5000",
                                              "--param", "window=5001"});
  EXPECT_NE(bad.exit_code, 0) << describe(bad);
  EXPECT_HAS(bad.err + bad.out, "out of range");

  for (const auto& g : plan_["groups"]) {
    const std::string seqlen = std::to_string(g["seqlen"].get<int64_t>());
    for (const auto& m : g["masks"]) {
      std::vector<std::string> args = {"masks", "--show", m["mask"], "--seqlen", seqlen, "--width", "16"};
      for (const auto& [k, v] : m["params"].items())
        args.insert(args.end(), {"--param", k + "=" + (v.is_string() ? v.get<std::string>() : v.dump())});
      const auto r = run_lcahost(main_plugin_dir(), args);
      EXPECT_EQ(r.exit_code, 0) << m["spec"] << " at " << seqlen << ": " << describe(r);
      EXPECT_HAS(r.out, "area ");
    }
  }
}

// Each spec loads as a matrix (fields, mask specs, lengths); the CPU tree has none of the GPU
// kernels, so the reference stands in for them.
TEST_F(SweepPlan, EverySpecLoadsAsAMatrix) {
  SKIP_WITHOUT_PYTHON();
  for (const auto& g : plan_["groups"]) {
    const auto spec = (dir_ / "a" / g["file"].get<std::string>()).string();
    const auto r = run_lcahost(main_plugin_dir(), {"--matrix", spec, "--kernels", "cpu_reference", "--dry-run"});
    EXPECT_EQ(r.exit_code, 0) << spec << ": " << describe(r);
    EXPECT_HAS(r.out, ": 28 cells");  // 14 masks x fwd, bwd
  }
}

TEST(SweepPlanOptions, BadOptionsSayWhy) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir("lca_sweep");
  auto r = sweep({"plan", "--seed", "1", "--min-len", "9000", "--max-len", "8000", "--out", dir.path().string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "--min-len 9000 is above --max-len 8000");
  r = sweep({"plan", "--seed", "1", "--kernels", "cudnn_sdpa", "--out", dir.path().string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "must hold flex_flash");
}

// The time estimate counts a kernel's cells only on the masks its manifest lists (cudnn_sdpa's seven;
// flex_flash takes any), so that a plan says whether it fits one device call.
TEST(SweepPlanOptions, TheEstimateCountsAKernelOnTheMasksOfItsManifest) {
  SKIP_WITHOUT_PYTHON();
  const std::string code =
      "import json, sys; sys.path.insert(0, sys.argv[1]); from lca_sweep.estimate import kernel_masks; "
      "m = kernel_masks('cudnn_sdpa'); print(json.dumps([sorted(m) if m is not None else None, kernel_masks('flex_flash')]))";
  const auto r = run_process({"/usr/bin/env", "python3", "-c", code, (source_dir() / "tools").string()}, 60);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json got = json::parse(r.out);
  const json manifest = json::parse(read_text(source_dir() / "manifests" / "plugins" / "cudnn_sdpa.json"));
  std::vector<std::string> expected = manifest.at("masks").get<std::vector<std::string>>();
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(got[0], json(expected));
  EXPECT_LT(got[0].size(), kMasks.size());
  EXPECT_TRUE(got[1].is_null());
}

json cell(const std::string& kernel, const std::string& mask_label, int seqlen, const std::string& pass,
          double tflops, const std::string& status = "ok") {
  const auto colon = mask_label.find(':');
  return {{"type", "cell"}, {"kernel", kernel}, {"device", "cuda"}, {"mask", mask_label.substr(0, colon)},
          {"mask_label", mask_label}, {"mask_params", json::object()}, {"seqlen", seqlen}, {"heads_q", 64},
          {"heads_kv", 8}, {"head_dim", 128}, {"dtype", "bf16"}, {"pass", pass}, {"status", status},
          {"tflops", tflops}, {"time_ms", {{"median", 1.0}}}};
}

void write_results(const fs::path& file, const std::vector<json>& cells) {
  std::string text = json{{"type", "run"}, {"matrix", {{"name", "sweep-test"}}}}.dump() + "\n";
  for (const auto& c : cells) text += c.dump() + "\n";
  write_text(file, text);
}

// Two lengths, heads 64:8 d128: the numbers make every ratio exact at two decimals.
TEST(SweepReport, RatiosWorstCellsAndVerdicts) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir("lca_sweep");
  const int l1 = 12345, l2 = 20480;
  json slow_causal = cell("flex_flash", "causal", l2, "fwd", 410);  // 0.82 of full: the worst
  slow_causal["plan_info"] = {{"forward", {{"kernel", "fwd_test_kernel"}, {"tile_rows", 128}}},
                              {"backward", {{"kernel", "bwd_test_kernel"}}}};
  json tuned = cell("torch_flex", "causal", l2, "fwd", 405);  // 1.01: the worst peer ratio
  tuned["label"] = "torch_flex_tuned";
  json failed = cell("flex_flash", "block_sparse:block=64,sparsity=0.25", l1, "fwd", 100, "FAIL");
  failed["reason"] = "outside tolerance 0.015000";
  json errored = cell("cudnn_sdpa", "sliding_window:window=1000", l1, "bwd", 0, "ERROR");
  errored["reason"] = "cudnn refused the graph";
  write_results(dir / "results.jsonl",
                {cell("flex_flash", "full", l1, "fwd", 500), cell("flex_flash", "full", l2, "fwd", 500),
                 cell("flex_flash", "full", l1, "bwd", 400), cell("flex_flash", "full", l2, "bwd", 400),
                 cell("flex_flash", "causal", l1, "fwd", 450), slow_causal,
                 cell("flex_flash", "causal", l1, "bwd", 360), cell("flex_flash", "causal", l2, "bwd", 340),
                 cell("flex_flash", "sliding_window:window=1000", l1, "fwd", 380),
                 cell("flex_flash", "sliding_window:window=1000", l1, "bwd", 276),
                 cell("flex_flash", "block_sparse:block=64,sparsity=0.25", l1, "bwd", 200), failed,
                 cell("cudnn_sdpa", "full", l1, "fwd", 520), cell("cudnn_sdpa", "full", l2, "fwd", 480),
                 cell("cudnn_sdpa", "full", l1, "bwd", 410), cell("cudnn_sdpa", "causal", l1, "fwd", 440), tuned,
                 errored});

  const auto r = sweep({"report", (dir / "results.jsonl").string()});
  EXPECT_EQ(r.exit_code, 1) << describe(r);  // MISSes and failed cells
  const std::string& out = r.out;
  EXPECT_HAS(line_with(out, "causal fwd ("),
             "causal fwd (2 cells): own full 0.82 (>= 0.85) MISS; best peer 1.01 torch_flex_tuned (>= 0.97) PASS; "
             "cudnn_sdpa 1.02 (>= 1.00) PASS");
  EXPECT_HAS(out, "own:  causal  20480 tokens  64:8 d128 bf16 fwd: 410.0 of full 500.0 TFLOP/s\n"
                  "          plan_info: kernel=fwd_test_kernel tile_rows=128");
  EXPECT_LACKS(out, "bwd_test_kernel");  // a forward cell shows its forward entry
  EXPECT_HAS(line_with(out, "causal bwd ("), "own full 0.85 (>= 0.80) PASS");
  EXPECT_HAS(line_with(out, "full fwd ("),
             "full fwd (2 cells): own full -; best peer 0.96 cudnn_sdpa (>= 0.97) MISS; cudnn_sdpa 0.96 (>= 1.00) MISS");
  EXPECT_HAS(line_with(out, "full bwd ("), "best peer 0.98 cudnn_sdpa (>= 0.97) PASS; cudnn_sdpa 0.98 (>= 0.97) PASS");
  // The windows' own targets are 0.75 / 0.70.
  EXPECT_HAS(line_with(out, "sliding_window fwd ("), "own full 0.76 (>= 0.75) PASS");
  EXPECT_HAS(line_with(out, "sliding_window bwd ("), "own full 0.69 (>= 0.70) MISS");
  // A failed cell is listed, never compared.
  EXPECT_HAS(out, "block_sparse fwd: no ok flex_flash cells");
  EXPECT_HAS(line_with(out, "block_sparse bwd ("), "own full 0.50 (>= 0.80) MISS");
  EXPECT_HAS(out, "Cells that failed or errored: 2");
  EXPECT_HAS(out, "FAIL flex_flash block_sparse:block=64,sparsity=0.25  12345 tokens  64:8 d128 bf16 fwd: outside tolerance");
  EXPECT_HAS(out, "ERROR cudnn_sdpa sliding_window:window=1000  12345 tokens  64:8 d128 bf16 bwd: cudnn refused the graph");
  // A peer is named by its label; with --peers only those count.
  EXPECT_HAS(out, "peer: causal  20480 tokens  64:8 d128 bf16 fwd: 410.0 TFLOP/s vs torch_flex_tuned 405.0");
  const auto only_cudnn = sweep({"report", (dir / "results.jsonl").string(), "--peers", "cudnn_sdpa"});
  EXPECT_HAS(line_with(only_cudnn.out, "causal fwd ("), "best peer 1.02 cudnn_sdpa (>= 0.97) PASS");

  const auto md = sweep({"report", (dir / "results.jsonl").string(), "--markdown"});
  EXPECT_EQ(md.exit_code, 1) << describe(md);
  EXPECT_HAS(md.out, "| causal | fwd | 2 | 0.82 | >= 0.85 | MISS | 1.01 torch_flex_tuned | PASS | 1.02 (>= 1.00) | PASS |");
  EXPECT_HAS(md.out, "| sliding_window | bwd | 1 | 0.69 | >= 0.70 | MISS |");
  EXPECT_HAS(md.out, "`kernel=fwd_test_kernel tile_rows=128`");
}

// An own-full share splits into the fill of the tiles flex_flash computed (the mask's cells over
// those tiles' cells, against full's) and the rate a tile; without tile counts, no split.
TEST(SweepReport, OwnShareSplitsIntoTileFillAndRateATile) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir("lca_sweep");
  const int n = 12800;
  auto with_tiles = [](json c, int rows, double mean, int tile_rows, double area) {
    c["area"] = area;
    c["plan_info"] = {
        {"forward", {{"kernel", "k"}, {"row_tiles", rows}, {"mean_tiles", mean}, {"tile_rows", tile_rows}}},
        {"backward", {{"kernel", "b"}, {"key_tiles", rows}, {"mean_tiles", mean}, {"tile_keys", tile_rows}}}};
    return c;
  };
  const double full_cells = 100.0 * 200 * 128 * 64;  // every cell of its tiles
  // causal_document: 50 tiles a row tile, 60% of their cells in the mask; 0.5 of full's TFLOP/s.
  const double doc_cells = 0.6 * 100 * 50 * 128 * 64;
  write_results(dir / "results.jsonl",
                {with_tiles(cell("flex_flash", "full", n, "fwd", 500), 100, 200, 128, full_cells),
                 with_tiles(cell("flex_flash", "causal_document:dist=uniform:300-400", n, "fwd", 250), 100, 50, 128,
                            doc_cells),
                 with_tiles(cell("flex_flash", "full", n, "bwd", 400), 100, 200, 128, full_cells),
                 cell("flex_flash", "causal_document:dist=uniform:300-400", n, "bwd", 300)});
  const auto r = sweep({"report", (dir / "results.jsonl").string()});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_HAS(r.out,
             "causal_document:dist=uniform:300-400  12800 tokens  64:8 d128 bf16 fwd: 250.0 of full 500.0 TFLOP/s\n"
             "          plan_info: kernel=k mean_tiles=50.0 row_tiles=100 tile_rows=128\n"
             "          tiles filled 0.60 as full's, run at 0.83 of full's rate a tile");
  // The backward cell has no plan_info: its share stands alone.
  EXPECT_HAS(line_with(r.out, "causal_document bwd ("), "own full 0.75 (>= 0.80) MISS");
  EXPECT_EQ(r.out.find("tiles filled"), r.out.rfind("tiles filled")) << r.out;  // the forward's only
  const auto md = sweep({"report", (dir / "results.jsonl").string(), "--markdown"});
  EXPECT_HAS(md.out, "(0.50 of full (tiles filled 0.60 as full's, run at 0.83 of full's rate a tile)): `kernel=k");
}

// A backward whose plan_info records dispatch_over_spread (its blocks' simulated end over an even
// spread) shows it beside full's, after the tile split, or alone where tile counts are missing.
TEST(SweepReport, BackwardShareShowsTheSimulatedDispatchBesideFulls) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir("lca_sweep");
  const int n = 18599;
  auto with_dispatch = [](json c, double dispatch, bool tiles) {
    json b = {{"kernel", "sm90_noskip"}, {"dispatch_over_spread", dispatch}};
    if (tiles) {
      b["key_tiles"] = 100;
      b["mean_tiles"] = c["mask"] == "full" ? 200 : 100;
      b["tile_keys"] = 128;
      c["area"] = c["mask"] == "full" ? 100.0 * 200 * 128 * 64 : 0.9 * 100 * 100 * 128 * 64;
    }
    c["plan_info"] = {{"backward", b}};
    return c;
  };
  write_results(dir / "results.jsonl",
                {with_dispatch(cell("flex_flash", "full", n, "bwd", 450), 1.03, true),
                 with_dispatch(cell("flex_flash", "prefix_lm_causal:prefix=5767", n, "bwd", 270), 1.66, true),
                 with_dispatch(cell("flex_flash", "full", n + 1, "bwd", 450), 1.02, false),
                 with_dispatch(cell("flex_flash", "causal", n + 1, "bwd", 300), 1.01, false)});
  const auto r = sweep({"report", (dir / "results.jsonl").string()});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_HAS(r.out, "tiles filled 0.90 as full's, run at 0.67 of full's rate a tile; blocks simulated to end 1.66x "
                    "an even spread (full 1.03x)");
  EXPECT_HAS(r.out, "\n          blocks simulated to end 1.01x an even spread (full 1.02x)");
}

// A cell whose warm-up ended on its cap with the times still moving (warmup_steady false) is
// marked where the report names it, and counted; records without the field count as steady.
TEST(SweepReport, MarksCellsWhoseWarmUpEndedUnsteady) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir("lca_sweep");
  json slow = cell("flex_flash", "causal", 9000, "fwd", 400);  // 0.80 of full: the worst
  slow["warmup_steady"] = false;
  json peer = cell("cudnn_sdpa", "causal", 9000, "fwd", 420);
  peer["warmup_steady"] = false;
  json steady_full = cell("flex_flash", "full", 9000, "fwd", 500);
  steady_full["warmup_steady"] = true;
  write_results(dir / "results.jsonl", {steady_full, slow, cell("cudnn_sdpa", "full", 9000, "fwd", 490), peer});
  const auto r = sweep({"report", (dir / "results.jsonl").string()});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_HAS(r.out, "own:  causal  9000 tokens  64:8 d128 bf16 fwd [warm-up unsteady]: 400.0 of full 500.0 TFLOP/s");
  EXPECT_HAS(r.out, "vs cudnn_sdpa 420.0 [warm-up unsteady]");
  EXPECT_HAS(r.out, "Cells whose warm-up ended unsteady (times still moving at its cap): 2 of 4");
  EXPECT_LACKS(line_with(r.out, "peer: full"), "unsteady");
  const auto md = sweep({"report", (dir / "results.jsonl").string(), "--markdown"});
  EXPECT_HAS(md.out, "own: causal  9000 tokens  64:8 d128 bf16 fwd [warm-up unsteady]");
  EXPECT_HAS(md.out, "Cells whose warm-up ended unsteady (times still moving at its cap): 2 of 4.");
  // Without the field (older records) nothing is marked or counted.
  write_results(dir / "old.jsonl", {cell("flex_flash", "full", 9000, "fwd", 500), cell("flex_flash", "causal", 9000, "fwd", 400)});
  EXPECT_LACKS(sweep({"report", (dir / "old.jsonl").string()}).out, "unsteady");
}

TEST(SweepReport, AllTargetsMetExitsZeroAndBadInputTwo) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir("lca_sweep");
  write_results(dir / "good.jsonl",
                {cell("flex_flash", "full", 8191, "fwd", 500), cell("flex_flash", "causal", 8191, "fwd", 450),
                 cell("cudnn_sdpa", "full", 8191, "fwd", 490), cell("cudnn_sdpa", "causal", 8191, "fwd", 440)});
  auto r = sweep({"report", (dir / "good.jsonl").string()});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_LACKS(r.out, "MISS");
  EXPECT_HAS(r.out, "Cells that failed or errored: 0");

  r = sweep({"report", (dir / "missing.jsonl").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "no such results file");
  write_results(dir / "other.jsonl", {cell("cudnn_sdpa", "full", 8191, "fwd", 490)});
  r = sweep({"report", (dir / "other.jsonl").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "no ok flex_flash cells to judge");
}

}  // namespace
}  // namespace lca::test
