// Manifest validation: every real manifest validates; each kind of bad manifest is refused with
// the file, the line and the field; the schema subset behaves as JSON Schema says.
#include "core/plugin/manifest.hpp"
#include "fixture_folder.hpp"

#include <gtest/gtest.h>

#include <fstream>

namespace lca::test {
namespace {

using core::Manifest;
using core::ManifestError;
using nlohmann::json;

const json& schema() {
  static const json s = json::parse(read_text(source_dir() / "manifests" / "manifest.schema.json"));
  return s;
}

// A kernel manifest, one key a line, in a fixed order (so that line numbers are known):
// line 1 "{", name 2, kind 3, version 4, abi 5, library 6, device 7, dtypes 8, head_dims 9,
// gqa 10, backward 11, varlen 12, masks 13, "}" 14.
std::string kernel_text(const std::map<std::string, std::string>& replace = {},
                        const std::set<std::string>& drop = {}) {
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"name", R"("k")"},           {"kind", R"("kernel")"},   {"version", R"("1.0.0")"},
      {"abi", R"("1.0")"},           {"library", R"("libk.so")"}, {"device", R"({"type": "cpu"})"},
      {"dtypes", R"(["f32", "bf16"])"}, {"head_dims", "[64, 128]"},  {"gqa", "true"},
      {"backward", "false"},         {"varlen", "false"},        {"masks", R"(["full", "causal"])"}};
  std::string text = "{\n";
  bool first = true;
  for (const auto& [key, value] : fields) {
    if (drop.count(key)) continue;
    const auto it = replace.find(key);
    text += std::string(first ? "" : ",\n") + "  \"" + key + "\": " + (it == replace.end() ? value : it->second);
    first = false;
  }
  return text + "\n}\n";
}

class ManifestFile : public ::testing::Test {
 protected:
  // Writes text as <dir>/<name>.json and parses it.
  Manifest parse(const std::string& text, const std::string& name = "m") {
    const auto file = dir_ / (name + ".json");
    write_text(file, text);
    return core::parse_manifest(file, schema());
  }
  // Expects a ManifestError; returns it.
  ManifestError refuse(const std::string& text) {
    try {
      parse(text);
    } catch (const ManifestError& e) {
      EXPECT_EQ(e.file().filename(), "m.json");
      EXPECT_NE(std::string(e.what()).find("m.json"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
      return e;
    }
    ADD_FAILURE() << "not refused:\n" << text;
    return ManifestError("", 0, "", "");
  }
  TempDir dir_;
};

TEST(RealManifests, EveryManifestInTheTreeValidates) {
  int count = 0;
  for (const auto& e : std::filesystem::directory_iterator(source_dir() / "manifests" / "plugins")) {
    if (e.path().extension() != ".json") continue;
    ++count;
    SCOPED_TRACE(e.path().string());
    Manifest m;
    ASSERT_NO_THROW(m = core::parse_manifest(e.path(), schema()));
    EXPECT_EQ(m.name + ".json", e.path().filename().string()) << "manifest files are named after the plugin";
    EXPECT_EQ(m.abi_major, 1);
    EXPECT_EQ(m.library, "liblca_" + m.name + ".so");
    if (m.kind == "kernel") {
      EXPECT_FALSE(m.kernel.dtypes.empty());
      EXPECT_TRUE(m.kernel.any_mask || !m.kernel.masks.empty());
      EXPECT_TRUE(m.kernel.any_head_dim || !m.kernel.head_dims.empty());
    } else if (m.kind == "mask_provider") {
      EXPECT_FALSE(m.patterns.empty());
    } else {
      EXPECT_EQ(m.kind, "cp_strategy");
      EXPECT_FALSE(m.cp.devices.empty());
    }
  }
  EXPECT_GE(count, 2) << "manifests/plugins has the builtin provider and cpu_reference at least";
  // The SDK example and the well-formed fixture manifests validate too.
  EXPECT_NO_THROW(core::parse_manifest(source_dir() / "sdk/examples/hello_kernel/hello_kernel.json", schema()));
  EXPECT_NO_THROW(core::parse_manifest(source_dir() / "tests/fixtures/good/fx_good.json", schema()));
  EXPECT_NO_THROW(core::parse_manifest(source_dir() / "tests/fixtures/cuda_caps/fx_cuda.json", schema()));
  EXPECT_NO_THROW(core::parse_manifest(source_dir() / "tests/fixtures/kind_mismatch/fx_kind_mismatch.json", schema()));
}

TEST(RealManifests, TypedViewOfTheReference) {
  const Manifest m = core::parse_manifest(source_dir() / "manifests/plugins/cpu_reference.json", schema());
  EXPECT_EQ(m.kind, "kernel");
  EXPECT_EQ(m.kernel.device, "cpu");
  EXPECT_EQ(m.kernel.reference, "cpu");
  EXPECT_TRUE(m.kernel.any_mask);
  EXPECT_TRUE(m.kernel.any_head_dim);
  EXPECT_TRUE(m.kernel.backward);
  EXPECT_TRUE(m.kernel.supports_mask("block_sparse"));
  EXPECT_TRUE(m.kernel.supports_head_dim(7));
  EXPECT_FALSE(m.kernel.supports_dtype("f64"));
  EXPECT_EQ(m.library_path(), source_dir() / "manifests/plugins/liblca_cpu_reference.so");
}

TEST_F(ManifestFile, TypedViewOfAKernel) {
  const Manifest m = parse(kernel_text({{"device", R"({"type": "cuda", "min_cc": "8.6"})"},
                                        {"masks", R"(["full", "causal"], "limits": {"max_seqlen": 4096})"}}));
  EXPECT_EQ(m.name, "k");
  EXPECT_EQ(m.kernel.device, "cuda");
  EXPECT_EQ(m.kernel.min_cc, 86);
  EXPECT_EQ(m.kernel.dtypes, (std::vector<std::string>{"f32", "bf16"}));
  EXPECT_EQ(m.kernel.head_dims, (std::vector<int>{64, 128}));
  EXPECT_FALSE(m.kernel.any_head_dim);
  EXPECT_TRUE(m.kernel.supports_head_dim(128));
  EXPECT_FALSE(m.kernel.supports_head_dim(96));
  EXPECT_TRUE(m.kernel.supports_mask("causal"));
  EXPECT_FALSE(m.kernel.supports_mask("sliding_window"));
  EXPECT_TRUE(m.kernel.supports_dtype("bf16"));
  EXPECT_FALSE(m.kernel.supports_dtype("f16"));
  EXPECT_EQ(m.kernel.max_seqlen, 4096);
  EXPECT_EQ(m.kernel.reference, "");
}

TEST_F(ManifestFile, SyntaxErrorGivesTheLine) {
  // A missing comma at the end of line 4: the parser stops on line 5.
  ManifestError e = refuse("{\n  \"name\": \"k\",\n  \"kind\": \"kernel\",\n  \"version\": \"1\"\n  \"abi\": \"1.0\"\n}\n");
  EXPECT_EQ(e.line(), 5);
  EXPECT_NE(std::string(e.what()).find("m.json:5:"), std::string::npos) << e.what();
  EXPECT_NE(e.reason().find("not valid JSON"), std::string::npos);
  // A trailing comma on line 13 of an otherwise good manifest: "}" on line 14 is unexpected.
  std::string text = kernel_text();
  text.insert(text.rfind("\n}"), ",");
  EXPECT_EQ(refuse(text).line(), 14);
  // On the first line.
  EXPECT_EQ(refuse("[1, 2").line(), 1);
  // An empty file.
  EXPECT_NE(refuse("").reason().find("not valid JSON"), std::string::npos);
}

TEST_F(ManifestFile, MissingTopLevelField) {
  ManifestError e = refuse(kernel_text({}, {"library"}));
  EXPECT_EQ(e.field(), "library");
  EXPECT_NE(e.reason().find("missing"), std::string::npos);
}

// A missing kind-specific field is named, not a field of another kind's oneOf alternative:
// each alternative's "kind" enum is checked before its required list.
TEST_F(ManifestFile, MissingKernelFieldIsNamed) {
  for (const char* field : {"dtypes", "head_dims", "gqa", "masks", "device"}) {
    ManifestError e = refuse(kernel_text({}, {field}));
    EXPECT_EQ(e.field(), field);
    EXPECT_NE(e.reason().find("missing"), std::string::npos) << e.what();
  }
}

TEST_F(ManifestFile, WrongTypeGivesFieldAndLine) {
  ManifestError e = refuse(kernel_text({{"gqa", R"("yes")"}}));
  EXPECT_EQ(e.field(), "gqa");
  EXPECT_EQ(e.line(), 10);
  EXPECT_NE(e.reason().find("expected boolean, found string"), std::string::npos) << e.what();

  e = refuse(kernel_text({{"dtypes", R"("f32")"}}));
  EXPECT_EQ(e.field(), "dtypes");
  EXPECT_EQ(e.line(), 8);
}

TEST_F(ManifestFile, BadValuesNameTheField) {
  ManifestError e = refuse(kernel_text({{"kind", R"("kernal")"}}));
  EXPECT_EQ(e.field(), "kind");
  EXPECT_EQ(e.line(), 3);
  EXPECT_NE(e.reason().find("kernal"), std::string::npos);

  e = refuse(kernel_text({{"dtypes", R"(["f32", "fp8"])"}}));
  EXPECT_EQ(e.field(), "dtypes.1");
  EXPECT_EQ(e.line(), 8);  // an array index has no line of its own: the array's

  e = refuse(kernel_text({{"head_dims", "[64, 0]"}}));
  EXPECT_EQ(e.field(), "head_dims.1");
  EXPECT_NE(e.reason().find(">= 1"), std::string::npos) << e.what();

  e = refuse(kernel_text({{"head_dims", R"("all")"}}));
  EXPECT_EQ(e.field(), "head_dims");

  e = refuse(kernel_text({{"masks", "[]"}}));
  EXPECT_EQ(e.field(), "masks");
  EXPECT_EQ(e.line(), 13);

  e = refuse(kernel_text({{"name", R"("")"}}));
  EXPECT_EQ(e.field(), "name");
  EXPECT_NE(e.reason().find("empty"), std::string::npos) << e.what();

  e = refuse(kernel_text({{"device", R"({"type": "cpu", "gpus": 2})"}}));
  EXPECT_EQ(e.field(), "device.gpus");
  EXPECT_EQ(e.line(), 7);
  EXPECT_NE(e.reason().find("not a known field"), std::string::npos) << e.what();

  e = refuse(kernel_text({{"masks", R"("any", "limits": {"max_seqlen": 0})"}}));
  EXPECT_EQ(e.field(), "limits.max_seqlen");
}

// Both alternatives of "masks" fail at the same pointer; the string one's type did not match,
// so the array one's reason is given.
TEST_F(ManifestFile, EmptyMaskListSaysItIsEmpty) {
  ManifestError e = refuse(kernel_text({{"masks", "[]"}}));
  EXPECT_EQ(e.field(), "masks");
  EXPECT_NE(e.reason().find("at least 1"), std::string::npos) << e.what();
}

TEST_F(ManifestFile, BadAbiAndComputeCapability) {
  ManifestError e = refuse(kernel_text({{"abi", R"("one")"}}));
  EXPECT_EQ(e.field(), "abi");
  EXPECT_EQ(e.line(), 5);
  EXPECT_NE(e.reason().find("MAJOR.MINOR"), std::string::npos);

  e = refuse(kernel_text({{"device", R"({"type": "cuda", "min_cc": "sm90"})"}}));
  EXPECT_EQ(e.field(), "device.min_cc");
  EXPECT_EQ(e.line(), 7);

  const Manifest m = parse(kernel_text({{"abi", R"("1.3")"}}));
  EXPECT_EQ(m.abi_major, 1);
  EXPECT_EQ(m.abi_minor, 3);
}

TEST_F(ManifestFile, MaskProviderAndCpStrategy) {
  const Manifest p = parse(R"({"name": "p", "kind": "mask_provider", "version": "1", "abi": "1.0", "library": "libp.so",
    "patterns": [{"name": "a", "category": "static_regular", "summary": "s", "params": [{"name": "w", "type": "int", "default": 3}]},
                 {"name": "b", "category": "dynamic"}]})");
  ASSERT_EQ(p.patterns.size(), 2u);
  EXPECT_EQ(p.patterns[0].name, "a");
  EXPECT_EQ(p.patterns[0].summary, "s");
  EXPECT_EQ(p.patterns[0].params[0]["default"], 3);
  EXPECT_EQ(p.patterns[1].category, "dynamic");

  const Manifest c = parse(R"({"name": "c", "kind": "cp_strategy", "version": "1", "abi": "1.0", "library": "libc.so",
    "devices": ["cpu", "cuda"], "masks": ["causal"], "backward": false, "options": {"degree": 2}})");
  EXPECT_EQ(c.cp.devices, (std::vector<std::string>{"cpu", "cuda"}));
  EXPECT_FALSE(c.cp.any_mask);
  EXPECT_EQ(c.cp.masks, (std::vector<std::string>{"causal"}));
  EXPECT_FALSE(c.cp.backward);
  EXPECT_EQ(c.cp.options["degree"], 2);

  ManifestError e = refuse(R"({"name": "c", "kind": "cp_strategy", "version": "1", "abi": "1.0", "library": "libc.so",
    "devices": ["tpu"], "masks": "any", "backward": true})");
  EXPECT_EQ(e.field(), "devices.0");
}

// The line of a nested field is found by walking its pointer, not by the first occurrence of
// its last key anywhere in the file.
TEST_F(ManifestFile, LineOfANestedFieldIsItsOwn) {
  ManifestError e = refuse(
      "{\n"
      "  \"name\": \"p\", \"kind\": \"mask_provider\", \"version\": \"1\", \"abi\": \"1.0\", \"library\": \"libp.so\",\n"
      "  \"patterns\": [\n"
      "    {\"name\": \"a\", \"category\": \"static_regular\"},\n"
      "    {\"name\": \"b\", \"category\": \"sometimes\"}\n"
      "  ]\n"
      "}\n");
  EXPECT_EQ(e.field(), "patterns.1.category");
  EXPECT_EQ(e.line(), 5);
}

TEST_F(ManifestFile, MissingFile) {
  try {
    core::parse_manifest(dir_ / "absent.json", schema());
    FAIL() << "expected a throw";
  } catch (const ManifestError& e) {
    EXPECT_NE(std::string(e.what()).find("absent.json"), std::string::npos);
    EXPECT_NE(e.reason().find("cannot open"), std::string::npos);
  }
}

TEST(LineOfKey, FindsTheFirstQuotedKey) {
  const std::string text = "{\n  \"a\": 1,\n\n  \"bb\": {\"a\": 2},\n  \"b\": 3\n}";
  EXPECT_EQ(core::line_of_key(text, "a"), 2);
  EXPECT_EQ(core::line_of_key(text, "bb"), 4);
  EXPECT_EQ(core::line_of_key(text, "b"), 5);  // "bb" does not match "b": keys are quoted
  EXPECT_EQ(core::line_of_key(text, "c"), 0);
  EXPECT_EQ(core::line_of_key("\"x\": 1", "x"), 1);
  EXPECT_EQ(core::line_of_key("", "x"), 0);
}

TEST(ValidateSchema, Types) {
  const json s = json::parse(R"({"type": "object", "properties": {
      "i": {"type": "integer"}, "n": {"type": "number"}, "s": {"type": "string"}, "b": {"type": "boolean"},
      "a": {"type": "array"}, "o": {"type": "object"}}})");
  EXPECT_TRUE(core::validate_schema(json::parse(R"({"i": 1, "n": 1.5, "s": "x", "b": true, "a": [], "o": {}})"), s).ok());
  EXPECT_TRUE(core::validate_schema(json::parse(R"({"n": 2})"), s).ok()) << "an integer is a number";
  auto v = core::validate_schema(json::parse(R"({"i": 1.5})"), s);
  EXPECT_EQ(v.pointer, "/i");
  EXPECT_EQ(v.reason, "expected integer, found number");
  v = core::validate_schema(json::parse(R"({"o": null})"), s);
  EXPECT_EQ(v.pointer, "/o");
  EXPECT_EQ(v.reason, "expected object, found null");
  v = core::validate_schema(json::parse("[]"), s);
  EXPECT_EQ(v.pointer, "");
  EXPECT_FALSE(v.ok());
}

TEST(ValidateSchema, RequiredEnumMinimumItemsAndExtras) {
  const json s = json::parse(R"({"type": "object", "required": ["k"], "additionalProperties": false,
      "properties": {"k": {"enum": ["x", "y"]},
                     "list": {"type": "array", "minItems": 2, "items": {"type": "object", "properties": {"v": {"minimum": 3}}}}}})");
  EXPECT_TRUE(core::validate_schema(json::parse(R"({"k": "x", "list": [{"v": 3}, {"v": 4.5}]})"), s).ok());
  auto v = core::validate_schema(json::parse(R"({})"), s);
  EXPECT_EQ(v.pointer, "/k");
  EXPECT_NE(v.reason.find("required"), std::string::npos);
  v = core::validate_schema(json::parse(R"({"k": "z"})"), s);
  EXPECT_EQ(v.pointer, "/k");
  EXPECT_NE(v.reason.find("\"z\""), std::string::npos);
  v = core::validate_schema(json::parse(R"({"k": "x", "extra": 1})"), s);
  EXPECT_EQ(v.pointer, "/extra");
  v = core::validate_schema(json::parse(R"({"k": "x", "list": [{"v": 3}]})"), s);
  EXPECT_EQ(v.pointer, "/list");
  v = core::validate_schema(json::parse(R"({"k": "x", "list": [{"v": 3}, {"v": 2}]})"), s);
  EXPECT_EQ(v.pointer, "/list/1/v");
}

TEST(ValidateSchema, OneOfReportsTheAlternativeMeant) {
  const json s = json::parse(R"({"oneOf": [{"type": "string", "enum": ["any"]},
                                           {"type": "array", "items": {"type": "integer", "minimum": 1}}]})");
  EXPECT_TRUE(core::validate_schema(json("any"), s).ok());
  EXPECT_TRUE(core::validate_schema(json::parse("[1, 2]"), s).ok());
  EXPECT_FALSE(core::validate_schema(json("all"), s).ok());
  const auto v = core::validate_schema(json::parse("[1, 0]"), s);
  EXPECT_EQ(v.pointer, "/1") << "the array alternative got deepest";
  EXPECT_FALSE(core::validate_schema(json(3), s).ok());
}

// Found by the fuzzers: a number past double's range is a JSON library exception other than a
// parse error, and a deep value crashes whatever prints it (dump() recurses once a level).
TEST_F(ManifestFile, NumbersPastDoubleAndDeepNestingAreRefusedByFile) {
  auto e = refuse(kernel_text({{"head_dims", "[64, 1e309]"}}));
  EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  e = refuse(kernel_text({{"gqa", std::string(100000, '[') + "1" + std::string(100000, ']')}}));
  EXPECT_NE(std::string(e.what()).find("deeper than"), std::string::npos) << e.what();
  EXPECT_NO_THROW(parse(kernel_text({{"device", R"({"type": "cpu"})"}})));
}

}  // namespace
}  // namespace lca::test
