// Cell expansion against a registry of fixture plugins: every combination becomes a cell, each
// one the manifests rule out carries its reason, unknown names throw naming what exists.
#include "core/matrix/cells.hpp"
#include "fixture_folder.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace lca::test {
namespace {

using core::Cell;
using core::HostDevices;
using core::MatrixSpec;
using nlohmann::json;

// fx_good: cpu, f32, head_dims 16/32, no GQA, full+causal, max_seqlen 512, backward.
// fx_oom: cpu, f32, any head dim, GQA, any mask, no backward.
// fx_cuda: cuda sm_90, f32/bf16, anything else.
class Expansion : public ::testing::Test {
 protected:
  Expansion() {
    folder_.with_masks().with_cases({"good", "oom", "cuda_caps"});
    registry_ = std::make_unique<core::Registry>(core::Registry::load(folder_.path()));
    masks_ = std::make_unique<core::MaskSource>(*registry_);
  }
  MatrixSpec spec(const std::string& text) { return core::parse_matrix_spec(json::parse(text), "/specs/test.json"); }
  std::vector<Cell> expand(const MatrixSpec& s, HostDevices dev = {}) {
    return core::expand_cells(s, *registry_, *masks_, dev);
  }
  static const char* kSpec;

  PluginFolder folder_;
  std::unique_ptr<core::Registry> registry_;
  std::unique_ptr<core::MaskSource> masks_;
};

const char* Expansion::kSpec = R"({
  "kernels": ["fx_good", "fx_oom", "fx_cuda"],
  "masks": ["full", "causal", "sliding_window:window=8"],
  "seqlens": {"cpu": [64, 1024], "cuda": [2048]},
  "heads": ["2:2", "4:2"], "head_dims": [32, 64], "dtypes": ["f32", "bf16"], "passes": ["fwd", "bwd"]})";

// The one cell with these coordinates.
const Cell& find(const std::vector<Cell>& cells, const std::string& kernel, const std::string& mask, int64_t seqlen,
                 const std::string& heads, int head_dim, const std::string& dtype, const std::string& pass) {
  const Cell* found = nullptr;
  for (const auto& c : cells)
    if (c.kernel == kernel && c.mask.label() == mask && c.seqlen == seqlen && c.heads.label() == heads &&
        c.head_dim == head_dim && c.dtype == dtype && c.pass == pass) {
      EXPECT_EQ(found, nullptr) << "two cells for one combination";
      found = &c;
    }
  if (found == nullptr) throw std::runtime_error("no cell " + kernel + " " + mask + " " + std::to_string(seqlen));
  return *found;
}

TEST_F(Expansion, EveryCombinationIsACell) {
  const auto cells = expand(spec(kSpec));
  // (kernel, length) pairs: 2 cpu kernels x 2 cpu lengths + 1 cuda kernel x 1 cuda length = 5;
  // x 3 masks x 2 head configs x 2 head dims x 2 dtypes x 2 passes.
  EXPECT_EQ(cells.size(), 5u * 3 * 2 * 2 * 2 * 2);
  std::set<std::string> keys;
  for (const auto& c : cells) keys.insert(c.key());
  EXPECT_EQ(keys.size(), cells.size()) << "cell keys are unique";
  // Per-device lengths: CPU kernels never get the CUDA lengths, and the other way round.
  for (const auto& c : cells) {
    if (c.kernel == "fx_cuda") {
      EXPECT_EQ(c.seqlen, 2048);
      EXPECT_EQ(c.device, "cuda");
    } else {
      EXPECT_TRUE(c.seqlen == 64 || c.seqlen == 1024) << c.key();
      EXPECT_EQ(c.device, "cpu");
    }
  }
}

TEST_F(Expansion, SkipReasons) {
  const auto cells = expand(spec(kSpec));
  EXPECT_EQ(find(cells, "fx_good", "causal", 64, "2:2", 32, "f32", "bwd").skip, "");
  EXPECT_EQ(find(cells, "fx_good", "full", 64, "2:2", 32, "f32", "fwd").skip, "");
  EXPECT_EQ(find(cells, "fx_good", "sliding_window:window=8", 64, "2:2", 32, "f32", "fwd").skip,
            "mask sliding_window unsupported");
  EXPECT_EQ(find(cells, "fx_good", "causal", 64, "2:2", 32, "bf16", "fwd").skip, "dtype bf16 unsupported");
  EXPECT_EQ(find(cells, "fx_good", "causal", 64, "2:2", 64, "f32", "fwd").skip, "head_dim 64 unsupported");
  EXPECT_EQ(find(cells, "fx_good", "causal", 64, "4:2", 32, "f32", "fwd").skip, "no-gqa");
  EXPECT_EQ(find(cells, "fx_good", "causal", 1024, "2:2", 32, "f32", "fwd").skip, "seqlen > max 512");
  EXPECT_EQ(find(cells, "fx_oom", "sliding_window:window=8", 1024, "4:2", 64, "f32", "fwd").skip, "");
  EXPECT_EQ(find(cells, "fx_oom", "causal", 64, "4:2", 64, "f32", "bwd").skip, "no-backward");
  EXPECT_EQ(find(cells, "fx_cuda", "causal", 2048, "4:2", 64, "f32", "fwd").skip, "no-gpu");
  // Nothing runnable is marked, nothing ruled out is unmarked: count the runnable cells.
  // fx_good: 2 masks x 64 only x 2:2 x 32 x f32 x 2 passes = 4; fx_oom: 3 x 2 x 2 x 2 x f32 x fwd = 24.
  size_t runnable = 0;
  for (const auto& c : cells) runnable += c.skip.empty();
  EXPECT_EQ(runnable, 4u + 24u);
}

TEST_F(Expansion, GpuCapability) {
  const auto on_old_gpu = expand(spec(kSpec), HostDevices{1, 80});
  EXPECT_EQ(find(on_old_gpu, "fx_cuda", "causal", 2048, "4:2", 64, "f32", "fwd").skip, "needs sm_90 (GPU is sm_80)");
  const auto on_h100 = expand(spec(kSpec), HostDevices{1, 90});
  EXPECT_EQ(find(on_h100, "fx_cuda", "causal", 2048, "4:2", 64, "bf16", "bwd").skip, "");
}

TEST_F(Expansion, KernelsOfOneProblemRunBackToBack) {
  const auto cells = expand(spec(kSpec));
  // Once the problem (mask, length, heads, head dim, dtype) changes, it never comes back.
  std::set<std::string> finished;
  std::string current;
  for (const auto& c : cells) {
    const std::string problem = c.mask.label() + "|" + std::to_string(c.seqlen) + "|" + c.heads.label() + "|" +
                                std::to_string(c.head_dim) + "|" + c.dtype;
    if (problem != current) {
      EXPECT_FALSE(finished.count(problem)) << "problem " << problem << " is split";
      if (!current.empty()) finished.insert(current);
      current = problem;
    }
  }
}

TEST_F(Expansion, StarAndExcludes) {
  auto s = spec(R"({"kernels": ["*"], "exclude_kernels": ["fx_cuda"], "masks": ["*"], "seqlens": [64],
                    "heads": ["1:1"], "head_dims": [16], "dtypes": ["f32"]})");
  const auto cells = expand(s);
  std::set<std::string> kernels, masks;
  for (const auto& c : cells) {
    kernels.insert(c.kernel);
    masks.insert(c.mask.pattern);
  }
  EXPECT_EQ(kernels, (std::set<std::string>{"fx_good", "fx_oom"}));
  EXPECT_EQ(masks.size(), 14u) << "every pattern of the builtin provider";
  EXPECT_EQ(cells.size(), 2u * 14u);
}

// paper-sparse where no torch_flex nor sparse peer is built: the one CUDA kernel's 96 cells
// (8 masks x 3 lengths x 2 head configs x 2 passes), the CPU kernels none (no CPU lengths).
TEST_F(Expansion, PaperSparseRunsWithTheKernelsThatAreBuilt) {
  const auto cells = expand(core::load_matrix_spec("paper-sparse", "/nonexistent"));
  std::set<std::string> masks;
  for (const auto& c : cells) {
    EXPECT_EQ(c.kernel, "fx_cuda");
    EXPECT_EQ(c.mask.pattern, "block_sparse");
    masks.insert(c.mask.label());
  }
  EXPECT_EQ(masks.size(), 8u);
  EXPECT_EQ(cells.size(), 96u);
  EXPECT_NO_THROW(find(cells, "fx_cuda", "block_sparse:block=128,sparsity=0.75", 131072, "64:8", 128, "bf16", "bwd"));
}

TEST_F(Expansion, UnknownKernelNamesItAndTheLoadedOnes) {
  try {
    expand(spec(R"({"kernels": ["flash9"], "masks": ["full"], "seqlens": [64], "heads": ["1:1"], "head_dims": [16]})"));
    FAIL();
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'flash9'"), std::string::npos) << m;
    EXPECT_NE(m.find("fx_good"), std::string::npos) << m;
  }
}

// One plugin under two labels makes two rows of cells, each with its options; --kernel-options
// merge into the rows they name and relabel those with default labels.
TEST_F(Expansion, LabelledKernelsAreRowsWithTheirOptions) {
  auto s = spec(R"({"kernels": ["fx_good", {"kernel": "fx_good", "options": {"speed": "fast"}, "label": "good_fast"}],
                    "masks": ["full"], "seqlens": [64], "heads": ["2:2"], "head_dims": [16], "dtypes": ["f32"]})");
  auto cells = expand(s);
  ASSERT_EQ(cells.size(), 2u);
  EXPECT_EQ(cells[0].kernel, "fx_good");
  EXPECT_EQ(cells[0].row(), "fx_good");
  EXPECT_TRUE(cells[0].options.empty());
  EXPECT_EQ(cells[1].kernel, "fx_good");
  EXPECT_EQ(cells[1].row(), "good_fast");
  EXPECT_EQ(cells[1].options, json::parse(R"({"speed": "fast"})"));
  EXPECT_NE(cells[0].key(), cells[1].key());
  EXPECT_TRUE(cells[1].skip.empty()) << "a labelled row is judged by its plugin's manifest";

  core::select_kernels(s, {}, {R"(fx_good={"threads": 2})"});
  cells = expand(s);
  ASSERT_EQ(cells.size(), 2u);
  EXPECT_EQ(cells[0].row(), "fx_good[threads=2]");
  EXPECT_EQ(cells[0].options, json::parse(R"({"threads": 2})"));
  EXPECT_EQ(cells[1].row(), "good_fast") << "a label given in the spec stays";
  EXPECT_EQ(cells[1].options, json::parse(R"({"speed": "fast", "threads": 2})"));

  // Options for a kernel the run does not hold, and two rows that end up with one label.
  auto star = spec(R"({"kernels": ["*"], "exclude_kernels": ["fx_cuda"], "masks": ["full"], "seqlens": [64],
                       "heads": ["1:1"], "head_dims": [16], "dtypes": ["f32"]})");
  core::select_kernels(star, {}, {R"(fx_oom={"a": 1})"});
  for (const auto& c : expand(star))
    EXPECT_EQ(c.options.empty(), c.kernel != "fx_oom") << "options reach the rows that \"*\" expands to";
  core::select_kernels(star, {}, {R"(flash9={"a": 1})"});
  try {
    expand(star);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'flash9'"), std::string::npos) << e.what();
  }
  auto clash = spec(R"({"kernels": ["fx_good", {"kernel": "fx_oom", "label": "fx_good[a=1]"}], "masks": ["full"],
                        "seqlens": [64], "heads": ["1:1"], "head_dims": [16], "dtypes": ["f32"]})");
  core::select_kernels(clash, {}, {R"(fx_good={"a": 1})"});
  try {
    expand(clash);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("labelled 'fx_good[a=1]'"), std::string::npos) << e.what();
  }
}

TEST_F(Expansion, UnknownMaskNamesItAndTheKnownOnes) {
  try {
    expand(spec(R"({"masks": ["full", "diagonal:width=3"], "seqlens": [64], "heads": ["1:1"], "head_dims": [16]})"));
    FAIL();
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'diagonal'"), std::string::npos) << m;
    EXPECT_NE(m.find("causal_document"), std::string::npos) << m;
  }
  try {
    expand(spec(R"({"masks": ["sliding_window:window"], "seqlens": [64], "heads": ["1:1"], "head_dims": [16]})"));
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("key=value"), std::string::npos) << e.what();
  }
}

TEST_F(Expansion, NoMaskProvider) {
  PluginFolder bare;
  bare.with_case("good");
  const auto reg = core::Registry::load(bare.path());
  core::MaskSource masks(reg);
  try {
    core::expand_cells(spec(R"({"masks": ["causal"], "seqlens": [64], "heads": ["1:1"], "head_dims": [16]})"), reg,
                       masks, {});
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no mask provider"), std::string::npos) << e.what();
  }
}

// --masks: the comma separates masks and a mask's parameters; a key=value piece continues the
// mask before it.
TEST(MaskList, AParameterPieceContinuesTheMaskBeforeIt) {
  using V = std::vector<std::string>;
  EXPECT_EQ(core::split_mask_list("causal,full"), (V{"causal", "full"}));
  EXPECT_EQ(core::split_mask_list("global_sliding:window=700,global_tokens=333"),
            (V{"global_sliding:window=700,global_tokens=333"}));
  EXPECT_EQ(core::split_mask_list("causal,global_sliding:window=700,global_tokens=333,sliding_window:window=8,full"),
            (V{"causal", "global_sliding:window=700,global_tokens=333", "sliding_window:window=8", "full"}));
  EXPECT_EQ(core::split_mask_list("causal_document:dist=uniform:1-9,max_docs=4,*"),
            (V{"causal_document:dist=uniform:1-9,max_docs=4", "*"}))
      << "a value may hold ':'";
  EXPECT_EQ(core::split_mask_list(",causal,,"), (V{"causal"}));
  const auto parsed = core::MaskSpec::parse(core::split_mask_list("global_sliding:window=700,global_tokens=333")[0]);
  EXPECT_EQ(parsed.params["window"], 700);
  EXPECT_EQ(parsed.params["global_tokens"], 333);
  for (const char* bad : {"window=8", "causal,window=8"}) {
    try {
      core::split_mask_list(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("window=8"), std::string::npos) << e.what();
    }
  }
}

TEST(CellJson, RoundTrip) {
  Cell c;
  c.kernel = "fx_good";
  c.device = "cpu";
  c.mask = core::MaskSpec::parse("sliding_window:window=8");
  c.seqlen = 4096;
  c.heads = {8, 2};
  c.head_dim = 128;
  c.dtype = "bf16";
  c.pass = "bwd";
  const Cell back = Cell::from_json(c.to_json());
  EXPECT_EQ(back.key(), c.key());
  EXPECT_EQ(back.device, "cpu");
  EXPECT_EQ(back.mask.params["window"], 8);
  EXPECT_EQ(c.key(), "fx_good|sliding_window:window=8|4096|8:2|128|bf16|bwd");
  // A labelled row keeps its label and options; an old record without them reads as a plain row.
  c.label = "good_fast";
  c.options = json::parse(R"({"speed": "fast"})");
  const Cell labelled = Cell::from_json(c.to_json());
  EXPECT_EQ(labelled.kernel, "fx_good");
  EXPECT_EQ(labelled.row(), "good_fast");
  EXPECT_EQ(labelled.options, c.options);
  EXPECT_EQ(labelled.key(), c.key());
  EXPECT_EQ(c.key(), R"(good_fast|{"speed":"fast"}|sliding_window:window=8|4096|8:2|128|bf16|bwd)");
  json old = c.to_json();
  old.erase("label");
  old.erase("options");
  EXPECT_EQ(Cell::from_json(old).key(), "fx_good|sliding_window:window=8|4096|8:2|128|bf16|bwd");
  // Numbers of a record are read whole or refused, never wrapped.
  for (const auto& [field, value] : std::vector<std::pair<const char*, json>>{
           {"head_dim", json(4294967360ull)}, {"heads_q", json(-8)}, {"heads_kv", json(2.5)},
           {"seqlen", json(18446744073709551615ull)}, {"seqlen", json(0)}}) {
    json bad = c.to_json();
    bad[field] = value;
    try {
      Cell::from_json(bad);
      ADD_FAILURE() << field << " = " << value.dump() << " was read";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace lca::test
