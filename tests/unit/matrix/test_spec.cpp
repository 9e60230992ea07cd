// Matrix specs: every refusal names the field; defaults and aliases; every preset parses.
#include "core/matrix/spec.hpp"
#include "fixture_folder.hpp"

#include <lca/checked.hpp>

#include <gtest/gtest.h>

namespace lca::test {
namespace {

using core::MatrixSpec;
using nlohmann::json;

json minimal() {
  return json::parse(R"({"masks": ["causal"], "seqlens": [128], "heads": ["4:2"], "head_dims": [64]})");
}

MatrixSpec parse(const json& doc) { return core::parse_matrix_spec(doc, "/specs/mine.json"); }

// The message of a refused spec; fails the test when it is accepted.
std::string refusal(const json& doc) {
  try {
    parse(doc);
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("/specs/mine.json"), std::string::npos) << m;
    return m;
  }
  ADD_FAILURE() << "accepted: " << doc.dump();
  return "";
}

json with(const char* key, const json& value) {
  json d = minimal();
  d[key] = value;
  return d;
}

#define EXPECT_HAS(text, fragment) EXPECT_NE((text).find(fragment), std::string::npos) << (text)

TEST(MatrixSpec, Defaults) {
  const MatrixSpec s = parse(minimal());
  EXPECT_EQ(s.name, "mine");  // the file's stem
  EXPECT_EQ(s.kernels, std::vector<core::KernelEntry>{core::KernelEntry("*")});
  EXPECT_TRUE(s.exclude_kernels.empty());
  EXPECT_EQ(s.dtypes, std::vector<std::string>{"bf16"});
  EXPECT_EQ(s.passes, std::vector<std::string>{"fwd"});
  EXPECT_EQ(s.warmup, 1);
  EXPECT_EQ(s.warmup_ms, 0.0);
  EXPECT_EQ(s.repeats, 3);
  EXPECT_EQ(s.repeat_ms, 0.0);
  EXPECT_EQ(s.seed, 42u);
  EXPECT_TRUE(s.check);
  ASSERT_EQ(s.heads.size(), 1u);
  EXPECT_EQ(s.heads[0].heads_q, 4);
  EXPECT_EQ(s.heads[0].heads_kv, 2);
  EXPECT_EQ(s.heads[0].label(), "4:2");
}

TEST(MatrixSpec, AliasesSinglesAndDevices) {
  json d = minimal();
  d["dtypes"] = {"fp16", "bfloat16", "float32"};
  d["heads"] = "8";          // one value instead of a list; no colon: MHA
  d["masks"] = "causal";
  d["seqlens"] = {{"cpu", {256}}, {"*", {1024, 2048}}};
  const MatrixSpec s = parse(d);
  EXPECT_EQ(s.dtypes, (std::vector<std::string>{"f16", "bf16", "f32"}));
  ASSERT_EQ(s.heads.size(), 1u);
  EXPECT_EQ(s.heads[0].heads_kv, 8);
  EXPECT_EQ(s.masks, std::vector<std::string>{"causal"});
  EXPECT_EQ(s.seqlens_for("cpu"), std::vector<int64_t>{256});
  EXPECT_EQ(s.seqlens_for("cuda"), (std::vector<int64_t>{1024, 2048}));  // falls back to "*"

  d["seqlens"] = {{"cuda", {4096}}};
  EXPECT_TRUE(parse(d).seqlens_for("cpu").empty()) << "no list for cpu and no '*'";
}

TEST(MatrixSpec, UnknownField) {
  const std::string m = refusal(with("kernal", {"x"}));
  EXPECT_HAS(m, "'kernal'");
  EXPECT_HAS(m, "not a known field");
}

TEST(MatrixSpec, BadHeads) {
  std::string m = refusal(with("heads", {"64:7"}));
  EXPECT_HAS(m, "'heads'");
  EXPECT_HAS(m, "64:7");
  m = refusal(with("heads", {"many:2"}));
  EXPECT_HAS(m, "'heads'");
  EXPECT_HAS(m, "many:2");
  EXPECT_HAS(refusal(with("heads", {"0:0"})), "'heads'");
  EXPECT_HAS(refusal(with("heads", {"-4:2"})), "'heads'");
}

TEST(MatrixSpec, BadDtypes) {
  std::string m = refusal(with("dtypes", {"fp8"}));
  EXPECT_HAS(m, "'dtypes'");
  EXPECT_HAS(m, "fp8");
  EXPECT_HAS(refusal(with("dtypes", {"f64"})), "'dtypes'");
}

TEST(MatrixSpec, EmptyLists) {
  for (const char* field : {"masks", "heads", "head_dims", "dtypes", "passes", "kernels"}) {
    const std::string m = refusal(with(field, json::array()));
    EXPECT_HAS(m, "'" + std::string(field) + "'");
    EXPECT_HAS(m, "empty");
  }
  EXPECT_HAS(refusal(with("seqlens", json::array())), "'seqlens'");
  EXPECT_HAS(refusal(with("seqlens", {{"cpu", json::array()}})), "cpu");
}

TEST(MatrixSpec, BadLengths) {
  std::string m = refusal(with("seqlens", {128, -5}));
  EXPECT_HAS(m, "'seqlens'");
  EXPECT_HAS(m, "-5");
  EXPECT_HAS(refusal(with("seqlens", {0})), "'seqlens'");
  EXPECT_HAS(refusal(with("seqlens", {{"cuda", {-1}}})), "seqlens");
  m = refusal(with("seqlens", {{"tpu", {128}}}));
  EXPECT_HAS(m, "'seqlens.tpu'");
  EXPECT_HAS(refusal(with("seqlens", {"long"})), "'seqlens'");
}

// A number past its field's type must be refused, not wrapped: 2^32 + 64 read as an int is 64.
TEST(MatrixSpec, NumbersOutOfRangeAreRefusedNotWrapped) {
  std::string m = refusal(with("head_dims", {int64_t{4294967360}}));
  EXPECT_HAS(m, "'head_dims'");
  EXPECT_HAS(m, "out of range");
  EXPECT_HAS(refusal(with("warmup", int64_t{4294967297})), "'warmup'");
  EXPECT_HAS(refusal(with("repeats", int64_t{4294967299})), "'repeats'");
  // Stored as JSON unsigned: past int64_t it would read as -1.
  m = refusal(json::parse(R"({"masks": ["causal"], "seqlens": [18446744073709551615], "heads": ["4:2"],
                              "head_dims": [64]})"));
  EXPECT_HAS(m, "'seqlens'");
  EXPECT_HAS(m, "18446744073709551615");
  // Lengths whose mask area cannot be counted are refused before anything of their size is made.
  for (const int64_t n : {int64_t{1} << 40, int64_t{1} << 62, lca::max_seqlen + 1}) {
    m = refusal(with("seqlens", {n}));
    EXPECT_HAS(m, "'seqlens'");
    EXPECT_HAS(m, std::to_string(n));
    EXPECT_HAS(m, std::to_string(lca::max_seqlen));
  }
  EXPECT_EQ(parse(with("seqlens", {lca::max_seqlen})).seqlens_for("cpu"), std::vector<int64_t>{lca::max_seqlen});
  // Head counts: past int, or not only digits.
  m = refusal(with("heads", {"99999999999:1"}));
  EXPECT_HAS(m, "'heads'");
  EXPECT_HAS(m, "out of range");
  EXPECT_HAS(refusal(with("heads", {"4:4294967298"})), "'heads'");
  EXPECT_HAS(refusal(with("heads", {" 64:8"})), "'heads'");
  EXPECT_HAS(refusal(with("heads", {"+64:8"})), "'heads'");
}

// Found by the fuzzers: a number past double's range is a JSON library exception other than a
// parse error, and printing a deep value with dump() overflows the stack.
TEST(MatrixSpec, NumbersPastDoubleAndDeepValuesAreRefusedByFile) {
  TempDir dir;
  const fs::path file = dir / "spec.json";
  write_text(file, R"({"masks": ["causal"], "seqlens": [1e309], "heads": ["4:2"], "head_dims": [64]})");
  try {
    core::load_matrix_spec(file.string(), dir.path());
    ADD_FAILURE() << "accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_HAS(std::string(e.what()), file.string());
    EXPECT_HAS(std::string(e.what()), "not valid JSON");
  }
  const std::string deep = std::string(200000, '[') + "1" + std::string(200000, ']');
  write_text(file, R"({"masks": ["causal"], "seqlens": )" + deep + R"(, "heads": ["4:2"], "head_dims": [64]})");
  try {
    core::load_matrix_spec(file.string(), dir.path());
    ADD_FAILURE() << "accepted";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_HAS(m, "'seqlens'");
    EXPECT_LT(m.size(), 400u) << "the value is shown in brief";
  }
}

TEST(MatrixSpec, OtherBadFields) {
  EXPECT_HAS(refusal(with("passes", {"fwd", "both"})), "'passes'");
  EXPECT_HAS(refusal(with("head_dims", {0})), "'head_dims'");
  EXPECT_HAS(refusal(with("head_dims", {"64"})), "'head_dims'");
  EXPECT_HAS(refusal(with("repeats", 0)), "'repeats'");
  EXPECT_HAS(refusal(with("warmup", -1)), "'warmup'");
  EXPECT_HAS(refusal(with("warmup_ms", -5)), "'warmup_ms'");
  EXPECT_HAS(refusal(with("warmup_ms", 1e9)), "'warmup_ms'");
  EXPECT_EQ(parse(with("warmup_ms", 250)).warmup_ms, 250.0);
  EXPECT_HAS(refusal(with("repeat_ms", -1)), "'repeat_ms'");
  EXPECT_HAS(refusal(with("repeat_ms", 1e9)), "'repeat_ms'");
  EXPECT_EQ(parse(with("repeat_ms", 1000)).repeat_ms, 1000.0);
  EXPECT_HAS(refusal(with("masks", {1, 2})), "'masks'");
  json d = minimal();
  d.erase("masks");
  EXPECT_HAS(refusal(d), "'masks'");
  d = minimal();
  d.erase("seqlens");
  EXPECT_HAS(refusal(d), "'seqlens'");
  EXPECT_HAS(refusal(json::array()), "JSON object");
}

// A scalar of the wrong type is refused with the file and the field, not a bare JSON error.
TEST(MatrixSpec, ScalarOfTheWrongTypeNamesTheField) {
  for (const auto& [field, value] : std::vector<std::pair<const char*, json>>{
           {"warmup", "3"}, {"warmup_ms", "200"}, {"repeats", "many"}, {"repeat_ms", "1s"}, {"check", "yes"}, {"name", 5}, {"cell_timeout_s", "2"}, {"seed", "x"},
           {"check_max_seqlen", "64K"}}) {
    const std::string m = refusal(with(field, value));
    EXPECT_HAS(m, "'" + std::string(field) + "'");
  }
}

// check_max_seqlen: 0 (the default) checks every length; a longer cell than a set limit is not
// checked (checks_length); a negative limit is refused.
TEST(MatrixSpec, CheckMaxSeqlen) {
  EXPECT_EQ(parse(minimal()).check_max_seqlen, 0);
  const MatrixSpec s = parse(with("check_max_seqlen", 65536));
  EXPECT_EQ(s.check_max_seqlen, 65536);
  EXPECT_TRUE(core::checks_length(s, 65536));
  EXPECT_FALSE(core::checks_length(s, 65537));
  EXPECT_TRUE(core::checks_length(parse(minimal()), int64_t{1} << 40));
  EXPECT_FALSE(core::checks_length(parse(with("check", false)), 1));
  EXPECT_EQ(core::matrix_record(s)["check_max_seqlen"], 65536);
  EXPECT_HAS(refusal(with("check_max_seqlen", -1)), "'check_max_seqlen'");
}

// "4:2:1" and "64:8x" are not 4:2 and 64:8, and a head_dim of 64.7 is not 64.
TEST(MatrixSpec, HeadsAndHeadDimsMustBeExact) {
  EXPECT_HAS(refusal(with("heads", {"4:2:1"})), "'heads'");
  EXPECT_HAS(refusal(with("heads", {"64:8x"})), "'heads'");
  EXPECT_HAS(refusal(with("head_dims", {64.7})), "'head_dims'");
}

// A kernel with options and a label: its rows are named by the label, or by the options where none
// is given; a plain name is its own label.
TEST(MatrixSpec, KernelsWithOptionsAndLabels) {
  const MatrixSpec s = parse(with("kernels", json::parse(R"(["flex_flash",
      {"kernel": "flex_flash", "options": {"forward": "sm90_k128"}, "label": "flex_k128"},
      {"kernel": "flex_flash", "options": {"backward": "sm90_atomic", "dq_first": "off"}},
      {"kernel": "cudnn_sdpa"}])")));
  ASSERT_EQ(s.kernels.size(), 4u);
  EXPECT_EQ(s.kernels[0].name, "flex_flash");
  EXPECT_EQ(s.kernels[0].label, "flex_flash");
  EXPECT_TRUE(s.kernels[0].options.empty());
  EXPECT_EQ(s.kernels[1].label, "flex_k128");
  EXPECT_EQ(s.kernels[1].options, json::parse(R"({"forward": "sm90_k128"})"));
  EXPECT_EQ(s.kernels[2].label, "flex_flash[backward=sm90_atomic,dq_first=off]");
  EXPECT_EQ(s.kernels[3].label, "cudnn_sdpa");
  EXPECT_EQ(core::default_kernel_label("k", json::object()), "k");
  EXPECT_EQ(core::default_kernel_label("k", json::parse(R"({"n": 3})")), "k[n=3]");
}

TEST(MatrixSpec, BadKernelEntries) {
  auto kernels = [](const char* text) { return with("kernels", json::parse(text)); };
  EXPECT_HAS(refusal(kernels(R"([{"options": {"forward": "mma"}}])")), "\"kernel\" must name a kernel");
  EXPECT_HAS(refusal(kernels(R"([{"kernel": "flex_flash", "options": ["forward"]}])")), "JSON object");
  EXPECT_HAS(refusal(kernels(R"([{"kernel": "flex_flash", "label": ""}])")), "\"label\"");
  EXPECT_HAS(refusal(kernels(R"([{"kernel": "flex_flash", "variant": "mma"}])")), "'variant'");
  EXPECT_HAS(refusal(kernels(R"([{"kernel": "*", "options": {"a": "b"}}])")), "takes no options");
  EXPECT_HAS(refusal(kernels(R"([5])")), "kernel name or");
  EXPECT_HAS(refusal(kernels(R"([""])")), "empty");
  // Two rows of one name would be one row in every table.
  const std::string m = refusal(kernels(R"(["flex_flash", {"kernel": "flex_flash"}])"));
  EXPECT_HAS(m, "'kernels'");
  EXPECT_HAS(m, "labelled 'flex_flash'");
  EXPECT_HAS(refusal(kernels(R"([{"kernel": "a", "label": "x"}, {"kernel": "b", "label": "x"}])")), "labelled 'x'");
}

// --kernels keeps the spec's rows it names (by label or plugin) and adds plain ones; --kernel-options
// are kept for the expansion, and a bad one is refused naming it.
TEST(MatrixSpec, CommandLineKernelsAndOptions) {
  MatrixSpec s = parse(with("kernels", json::parse(R"(["cudnn_sdpa",
      {"kernel": "flex_flash", "options": {"forward": "sm90_k128"}, "label": "flex_k128"},
      {"kernel": "flex_flash", "options": {"forward": "sm90_pair"}, "label": "flex_pair"}])")));
  core::select_kernels(s, {"flex_k128", "torch_flex"}, {R"(cudnn_sdpa={"a": 1})", R"(cudnn_sdpa={"b": "x"})"});
  ASSERT_EQ(s.kernels.size(), 2u);
  EXPECT_EQ(s.kernels[0].label, "flex_k128");
  EXPECT_EQ(s.kernels[1], core::KernelEntry("torch_flex"));
  EXPECT_EQ(s.kernel_options.at("cudnn_sdpa"), json::parse(R"({"a": 1, "b": "x"})"));
  MatrixSpec t = parse(with("kernels", json::parse(R"([{"kernel": "flex_flash", "options": {"forward": "mma"}, "label": "a"},
      {"kernel": "flex_flash", "label": "b"}])")));
  core::select_kernels(t, {"flex_flash"}, {});
  EXPECT_EQ(t.kernels.size(), 2u) << "a plugin's name keeps every row of it";
  for (const char* bad : {"flex_flash", "={}", R"(flex_flash={"a")", R"(flex_flash=[1])"}) {
    try {
      core::select_kernels(t, {}, {bad});
      ADD_FAILURE() << "accepted --kernel-options " << bad;
    } catch (const std::runtime_error& e) {
      EXPECT_HAS(std::string(e.what()), "--kernel-options");
      EXPECT_HAS(std::string(e.what()), "KERNEL=JSON");
    }
  }
}

TEST(MatrixPresets, EveryPresetInTheTreeParses) {
  int count = 0;
  for (const auto& e : std::filesystem::directory_iterator(source_dir() / "manifests" / "matrices")) {
    if (e.path().extension() != ".json") continue;
    ++count;
    SCOPED_TRACE(e.path().string());
    MatrixSpec by_path, by_name;
    ASSERT_NO_THROW(by_path = core::load_matrix_spec(e.path().string(), "/nonexistent"));
    ASSERT_NO_THROW(by_name = core::load_matrix_spec(e.path().stem().string(), "/nonexistent"));
    EXPECT_EQ(by_path.name, by_name.name);
    EXPECT_FALSE(by_path.masks.empty());
    EXPECT_FALSE(by_path.heads.empty());
    EXPECT_FALSE(by_path.seqlens.empty());
  }
  EXPECT_GE(count, 2);
  const auto names = core::preset_names("/nonexistent");
  for (const char* n : {"all", "quick", "paper-dense", "paper-sparse"}) EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
}

// LongCA-bench's block-sparse study: both block sizes, four kept fractions, MHA and GQA, 32K-128K,
// fwd and bwd; every loaded kernel less the references, so a kernel that is not built is no error.
TEST(MatrixPresets, PaperSparseIsTheBlockSparseStudy) {
  const MatrixSpec s = core::load_matrix_spec("paper-sparse", "/nonexistent");
  EXPECT_EQ(s.kernels, std::vector<core::KernelEntry>{core::KernelEntry("*")});
  for (const char* k : {"cuda_reference", "cpu_reference"})
    EXPECT_NE(std::find(s.exclude_kernels.begin(), s.exclude_kernels.end(), k), s.exclude_kernels.end()) << k;
  for (const char* k : {"flex_flash", "torch_flex", "vsa_triton"})
    EXPECT_EQ(std::find(s.exclude_kernels.begin(), s.exclude_kernels.end(), k), s.exclude_kernels.end()) << k;
  std::vector<std::string> masks;
  for (int b : {64, 128})
    for (const char* kept : {"0.1", "0.25", "0.5", "0.75"})
      masks.push_back("block_sparse:block=" + std::to_string(b) + ",sparsity=" + kept);
  EXPECT_EQ(s.masks, masks);
  EXPECT_EQ(s.seqlens_for("cuda"), (std::vector<int64_t>{32768, 65536, 131072}));
  ASSERT_EQ(s.heads.size(), 2u);
  EXPECT_EQ(s.heads[0].label(), "32:32");
  EXPECT_EQ(s.heads[1].label(), "64:8");
  EXPECT_EQ(s.head_dims, std::vector<int>{128});
  EXPECT_EQ(s.dtypes, std::vector<std::string>{"bf16"});
  EXPECT_EQ(s.passes, (std::vector<std::string>{"fwd", "bwd"}));
}

TEST(MatrixPresets, AllMeansEveryKernelAndMask) {
  const MatrixSpec s = core::load_matrix_spec("all", "/nonexistent");
  EXPECT_EQ(s.kernels, std::vector<core::KernelEntry>{core::KernelEntry("*")});
  EXPECT_EQ(s.masks, std::vector<std::string>{"*"});
}

TEST(MatrixPresets, PluginFolderPresetsComeFirst) {
  TempDir dir;
  std::filesystem::create_directories(dir / "matrices");
  write_text(dir / "matrices" / "quick.json",
             R"({"name": "my-quick", "masks": ["full"], "seqlens": [64], "heads": ["1:1"], "head_dims": [16]})");
  write_text(dir / "matrices" / "tiny.json",
             R"({"masks": ["full"], "seqlens": [64], "heads": ["1:1"], "head_dims": [16]})");
  EXPECT_EQ(core::load_matrix_spec("quick", dir.path()).name, "my-quick");
  EXPECT_EQ(core::load_matrix_spec("tiny", dir.path()).name, "tiny");
  const auto names = core::preset_names(dir.path());
  EXPECT_NE(std::find(names.begin(), names.end(), "tiny"), names.end());
}

TEST(MatrixPresets, UnknownPresetNamesThePresets) {
  try {
    core::load_matrix_spec("no-such-preset", "/nonexistent");
    FAIL();
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_HAS(m, "'no-such-preset'");
    EXPECT_HAS(m, "quick");
    EXPECT_HAS(m, "all");
  }
}

TEST(MatrixPresets, FilesThatAreMissingOrBroken) {
  TempDir dir;
  try {
    core::load_matrix_spec((dir / "missing.json").string(), dir.path());
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_HAS(std::string(e.what()), "missing.json");
  }
  write_text(dir / "broken.json", "{\"masks\": [\"full\",}");
  try {
    core::load_matrix_spec((dir / "broken.json").string(), dir.path());
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_HAS(std::string(e.what()), "broken.json");
    EXPECT_HAS(std::string(e.what()), "not valid JSON");
  }
}

}  // namespace
}  // namespace lca::test
