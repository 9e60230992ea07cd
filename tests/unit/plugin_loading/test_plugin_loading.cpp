// Registry::load on the fixture cases: every broken plugin is refused with one line that names
// the file and the reason, the good ones in the same folder still load, and a kernel object
// keeps its library loaded after the registry is gone.
#include "core/mask/mask_source.hpp"
#include "core/plugin/registry.hpp"
#include "core/plugin/text.hpp"
#include "core/run/environment.hpp"
#include "core/run/backend.hpp"
#include "fixture_folder.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

namespace lca::test {
namespace {

using core::PluginRecord;
using core::Registry;

const PluginRecord* record(const Registry& reg, const std::string& name) {
  for (const auto& p : reg.plugins())
    if (p.name() == name) return &p;
  return nullptr;
}

void expect_one_line(const std::string& message) {
  EXPECT_FALSE(message.empty());
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

#define EXPECT_HAS(text, fragment) EXPECT_NE((text).find(fragment), std::string::npos) << (text)

// The host's ABI as its messages print it (MAJOR.MINOR).
std::string host_abi() {
  return std::to_string(LCA_ABI_VERSION_MAJOR) + "." + std::to_string(LCA_ABI_VERSION_MINOR);
}

// A refused plugin of a folder that holds only that case: returns its refusal.
std::string refusal_of(const std::string& case_name, const std::string& plugin) {
  PluginFolder folder;
  folder.with_case(case_name);
  const Registry reg = Registry::load(folder.path());
  EXPECT_TRUE(reg.refusals().empty());
  const PluginRecord* rec = record(reg, plugin);
  if (rec == nullptr) {
    ADD_FAILURE() << "no record for " << plugin;
    return "";
  }
  EXPECT_FALSE(rec->loaded);
  EXPECT_EQ(rec->library, nullptr) << "a refused plugin must not keep its library";
  EXPECT_EQ(rec->descriptor, nullptr);
  expect_one_line(rec->refusal);
  return rec->refusal;
}

// A manifest refused before any library is looked at: returns the message.
std::string manifest_refusal(const std::string& case_name, const std::string& file) {
  PluginFolder folder;
  folder.with_case(case_name);
  const Registry reg = Registry::load(folder.path());
  EXPECT_TRUE(reg.plugins().empty());
  if (reg.refusals().size() != 1) {
    ADD_FAILURE() << "expected one refusal, got " << reg.refusals().size();
    return "";
  }
  EXPECT_EQ(reg.refusals()[0].file.filename(), file);
  expect_one_line(reg.refusals()[0].message);
  return reg.refusals()[0].message;
}

TEST(Refusal, ManifestNotJsonNamesFileAndLine) {
  const std::string m = manifest_refusal("manifest_syntax", "fx_bad_syntax.json");
  EXPECT_HAS(m, "fx_bad_syntax.json:7:");  // file:line, the line where the parser stopped
  EXPECT_HAS(m, "not valid JSON");
  EXPECT_HAS(m, "line 7");
}

TEST(Refusal, ManifestMissingFieldSaysMissing) {
  const std::string m = manifest_refusal("manifest_missing_field", "fx_missing_dtypes.json");
  EXPECT_HAS(m, "fx_missing_dtypes.json");
  EXPECT_HAS(m, "missing");
}

// A kernel manifest without "dtypes" names "dtypes", not a field of another kind ("patterns").
TEST(Refusal, ManifestMissingFieldNamesTheField) {
  const std::string m = manifest_refusal("manifest_missing_field", "fx_missing_dtypes.json");
  EXPECT_HAS(m, "'dtypes'");
  EXPECT_EQ(m.find("patterns"), std::string::npos) << m;
}

TEST(Refusal, ManifestWrongTypeNamesFieldLineAndType) {
  const std::string m = manifest_refusal("manifest_wrong_type", "fx_wrong_type.json");
  EXPECT_HAS(m, "fx_wrong_type.json:15:");  // "gqa" is on line 15
  EXPECT_HAS(m, "'gqa'");
  EXPECT_HAS(m, "expected boolean");
}

TEST(Refusal, LibraryMissing) {
  const std::string r = refusal_of("library_missing", "fx_missing_library");
  EXPECT_HAS(r, "liblca_fx_missing_library.so");
  EXPECT_HAS(r, "missing");
}

TEST(Refusal, LibraryIsNotASharedObject) {
  const std::string r = refusal_of("not_shared_object", "fx_not_so");
  EXPECT_HAS(r, "liblca_fx_not_so.so");
  EXPECT_HAS(r, "does not load");
}

TEST(Refusal, LibraryWithoutEntrySymbol) {
  const std::string r = refusal_of("no_entry", "fx_no_entry");
  EXPECT_HAS(r, "does not export lca_plugin_entry");
}

TEST(Refusal, AbiMajorMismatchNamesBothVersions) {
  const std::string r = refusal_of("abi_mismatch", "fx_abi2");
  EXPECT_HAS(r, "ABI mismatch");
  EXPECT_HAS(r, "2.0");
  EXPECT_HAS(r, "this host speaks ABI " + host_abi());
}

TEST(Refusal, ManifestAbiMismatchNamesBothVersions) {
  // The library is fine (ABI 1.0); its manifest claims 2.1.
  PluginFolder folder;
  folder.with_case("good");
  std::string text = read_text(folder / "fx_good.json");
  const std::string from = "\"abi\": \"1.0\"";
  const auto at = text.find(from);
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, from.size(), "\"abi\": \"2.1\"");
  write_text(folder / "fx_good.json", text);
  const Registry reg = Registry::load(folder.path());
  const PluginRecord* rec = record(reg, "fx_good");
  ASSERT_NE(rec, nullptr);
  EXPECT_FALSE(rec->loaded);
  EXPECT_HAS(rec->refusal, "ABI mismatch");
  EXPECT_HAS(rec->refusal, "2.1");
  EXPECT_HAS(rec->refusal, "this host speaks ABI " + host_abi());
}

TEST(Refusal, NameMismatchNamesBoth) {
  const std::string r = refusal_of("name_mismatch", "fx_name_mismatch");
  EXPECT_HAS(r, "name mismatch");
  EXPECT_HAS(r, "'fx_name_mismatch'");
  EXPECT_HAS(r, "'fx_renamed'");
}

TEST(Refusal, KindMismatchNamesBoth) {
  const std::string r = refusal_of("kind_mismatch", "fx_kind_mismatch");
  EXPECT_HAS(r, "kind mismatch");
  EXPECT_HAS(r, "'cp_strategy'");
  EXPECT_HAS(r, "'kernel'");
}

TEST(Refusal, DeclaredBackwardWithoutOne) {
  const std::string r = refusal_of("no_backward", "fx_no_backward");
  EXPECT_HAS(r, "declares backward");
  EXPECT_HAS(r, "no backward function");
}

TEST(Refusal, DuplicateNameKeepsTheFirst) {
  PluginFolder folder;
  folder.with_case("good");
  // A second manifest for the same plugin; files load in name order, so the copy comes second.
  std::filesystem::copy_file(folder / "fx_good.json", folder / "fx_good_copy.json");
  const Registry reg = Registry::load(folder.path());
  ASSERT_EQ(reg.plugins().size(), 2u);
  EXPECT_TRUE(reg.plugins()[0].loaded);
  EXPECT_EQ(reg.plugins()[0].manifest.file.filename(), "fx_good.json");
  EXPECT_FALSE(reg.plugins()[1].loaded);
  EXPECT_HAS(reg.plugins()[1].refusal, "already loaded");
  EXPECT_EQ(reg.loaded("kernel").size(), 1u);
}

TEST(Registry, MixedFolderLoadsTheGoodOnes) {
  PluginFolder folder;
  folder.with_masks().with_reference().with_cases(
      {"good", "oom", "manifest_syntax", "manifest_missing_field", "manifest_wrong_type", "library_missing",
       "not_shared_object", "no_entry", "abi_mismatch", "name_mismatch", "kind_mismatch", "no_backward"});
  const Registry reg = Registry::load(folder.path());

  std::vector<std::string> loaded, refused;
  for (const auto& p : reg.plugins()) (p.loaded ? loaded : refused).push_back(p.name());
  std::sort(loaded.begin(), loaded.end());
  std::sort(refused.begin(), refused.end());
  EXPECT_EQ(loaded, (std::vector<std::string>{"builtin", "cpu_reference", "fx_good", "fx_oom"}));
  EXPECT_EQ(refused, (std::vector<std::string>{"fx_abi2", "fx_kind_mismatch", "fx_missing_library", "fx_name_mismatch",
                                               "fx_no_backward", "fx_no_entry", "fx_not_so"}));
  ASSERT_EQ(reg.refusals().size(), 3u);  // the three manifests that never became plugins
  for (const auto& r : reg.refusals()) {
    expect_one_line(r.message);
    EXPECT_HAS(r.message, r.file.filename().string());
  }

  // The loaded ones work: lookups by kind, the reference, and objects can be made.
  const auto kernels = reg.loaded("kernel");
  ASSERT_EQ(kernels.size(), 3u);
  EXPECT_EQ(kernels[0]->name(), "cpu_reference");  // name order
  EXPECT_EQ(kernels[1]->name(), "fx_good");
  EXPECT_EQ(kernels[2]->name(), "fx_oom");
  ASSERT_NE(reg.reference_kernel("cpu"), nullptr);
  EXPECT_EQ(reg.reference_kernel("cpu")->name(), "cpu_reference");
  EXPECT_EQ(reg.reference_kernel("cuda"), nullptr);
  EXPECT_EQ(reg.find("fx_good", "mask_provider"), nullptr);
  EXPECT_EQ(reg.find("fx_no_entry", "kernel"), nullptr);  // refused plugins are not found
  ASSERT_NE(reg.find("builtin", "mask_provider"), nullptr);
  EXPECT_NE(reg.make_mask_provider(*reg.find("builtin", "mask_provider")), nullptr);
  EXPECT_TRUE(reg.make_kernel(*reg.find("fx_good", "kernel"))->has_backward());
  EXPECT_FALSE(reg.make_kernel(*reg.find("fx_oom", "kernel"))->has_backward());
}

TEST(Registry, MissingFolderThrowsNamingIt) {
  const std::string missing = "/nonexistent/lca_plugins_for_a_test";
  try {
    Registry::load(missing);
    FAIL() << "expected a throw";
  } catch (const std::runtime_error& e) {
    EXPECT_HAS(std::string(e.what()), missing);
  }
}

TEST(Registry, EmptyFolderLoadsNothing) {
  PluginFolder folder;
  const Registry reg = Registry::load(folder.path());
  EXPECT_TRUE(reg.plugins().empty());
  EXPECT_TRUE(reg.refusals().empty());
}

// Is the library at `path` mapped in this process? (RTLD_NOLOAD does not load it.)
bool is_loaded(const std::filesystem::path& path) {
  void* h = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}

// fx_good's manifest with its "library" field set to `library`, written as `file` in `folder`.
void write_good_manifest(const PluginFolder& folder, const std::string& file, const std::string& name,
                         const std::string& library) {
  std::string text = read_text(fixture_dir("good") / "fx_good.json");
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"\"fx_good\"", "\"" + name + "\""},
                                 {"\"liblca_fx_good.so\"", "\"" + library + "\""}}) {
    const auto at = text.find(from);
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at, from.size(), to);
  }
  write_text(folder / file, text);
}

// A library named by a path that leaves the folder is never loaded, whether the path climbs out
// (".."), is absolute, or is a link inside the folder that points out; the message names the path.
TEST(Refusal, LibraryOutsideTheFolder) {
  const std::string r = refusal_of("library_outside", "fx_outside");
  EXPECT_HAS(r, "../../liblca_fx_outside.so");
  EXPECT_HAS(r, "outside the plugin folder");

  TempDir elsewhere("lca_outside");
  std::filesystem::copy_file(fixture_dir("good") / "liblca_fx_good.so", elsewhere / "liblca_fx_good.so");
  const auto outside_lib = std::filesystem::canonical(elsewhere / "liblca_fx_good.so");
  PluginFolder folder;
  folder.with_case("good");
  write_good_manifest(folder, "fx_climb.json", "fx_climb",
                      "../" + elsewhere.path().filename().string() + "/liblca_fx_good.so");
  write_good_manifest(folder, "fx_absolute.json", "fx_absolute", outside_lib.string());
  std::filesystem::create_symlink(outside_lib, folder / "liblca_fx_linked.so");
  write_good_manifest(folder, "fx_linked.json", "fx_linked", "liblca_fx_linked.so");
  const Registry reg = Registry::load(folder.path());
  for (const char* name : {"fx_climb", "fx_absolute", "fx_linked"}) {
    const PluginRecord* rec = record(reg, name);
    ASSERT_NE(rec, nullptr) << name;
    EXPECT_FALSE(rec->loaded) << name;
    EXPECT_HAS(rec->refusal, "outside the plugin folder");
    EXPECT_HAS(rec->refusal, outside_lib.string());
    expect_one_line(rec->refusal);
  }
  EXPECT_FALSE(is_loaded(outside_lib)) << "refused, yet mapped into the host";
  ASSERT_NE(reg.find("fx_good", "kernel"), nullptr) << "the library inside the folder still loads";
}

// A link loop, a link to nothing, a manifest it may not read, a library that is a link loop:
// each refuses its own entry, named, and every other plugin of the folder loads.
TEST(Registry, ABadEntryRefusesOnlyItself) {
  PluginFolder folder;
  folder.with_masks().with_reference().with_case("good");
  std::filesystem::create_symlink("loop.json", folder / "loop.json");
  std::filesystem::create_symlink("nowhere.json", folder / "dangling.json");
  std::filesystem::create_directory(folder / "folder.json");  // not a manifest: ignored
  std::filesystem::create_symlink("liblca_loop.so", folder / "liblca_loop.so");
  write_good_manifest(folder, "fx_loop_library.json", "fx_loop_library", "liblca_loop.so");
  write_good_manifest(folder, "fx_unreadable.json", "fx_unreadable", "liblca_fx_good.so");
  std::filesystem::permissions(folder / "fx_unreadable.json", std::filesystem::perms::none);
  const bool root = geteuid() == 0;  // root reads it anyway

  Registry reg;
  ASSERT_NO_THROW(reg = Registry::load(folder.path()));
  for (const char* name : {"builtin", "cpu_reference", "fx_good"}) EXPECT_NE(record(reg, name), nullptr) << name;
  EXPECT_EQ(reg.loaded("kernel").size(), 2u);
  EXPECT_EQ(reg.loaded("mask_provider").size(), 1u);

  std::map<std::string, std::string> refused;  // file -> message
  for (const auto& r : reg.refusals()) refused[r.file.filename().string()] = r.message;
  ASSERT_TRUE(refused.count("loop.json")) << "a link loop";
  EXPECT_HAS(refused["loop.json"], (folder / "loop.json").string());
  ASSERT_TRUE(refused.count("dangling.json"));
  EXPECT_HAS(refused["dangling.json"], "symbolic link to nothing");
  EXPECT_FALSE(refused.count("folder.json"));
  if (!root) {
    ASSERT_TRUE(refused.count("fx_unreadable.json"));
    EXPECT_HAS(refused["fx_unreadable.json"], "cannot open");
  }
  const PluginRecord* loop = record(reg, "fx_loop_library");
  ASSERT_NE(loop, nullptr);
  EXPECT_FALSE(loop->loaded);
  EXPECT_HAS(loop->refusal, "liblca_loop.so");
  for (const auto& [file, message] : refused) expect_one_line(message);
  std::filesystem::permissions(folder / "fx_unreadable.json", std::filesystem::perms::owner_all);
}

// Bytes that are not UTF-8 in a manifest: refused by file name before the JSON parser, whose
// message would quote them; nothing that reaches a record carries them.
TEST(Refusal, ManifestNotUtf8NamesTheFile) {
  const std::string m = manifest_refusal("manifest_utf8", "fx_bad_utf8.json");
  EXPECT_HAS(m, "fx_bad_utf8.json:7:");  // the description
  EXPECT_HAS(m, "not valid UTF-8");
  EXPECT_TRUE(core::is_valid_utf8(m)) << m;

  PluginFolder folder;
  folder.with_masks().with_reference().with_case("manifest_utf8");
  const Registry reg = Registry::load(folder.path());
  const auto env = core::collect_environment(reg);
  std::string text;
  ASSERT_NO_THROW(text = env.dump()) << "the run record holds bytes that are not UTF-8";
  EXPECT_HAS(text, "fx_bad_utf8.json");
}

// Text from plugins reaches records: bad bytes become U+FFFD, good text is left alone.
TEST(Text, ValidUtf8ReplacesOnlyWhatIsBroken) {
  EXPECT_EQ(core::valid_utf8("caf\xc3\xa9 \xe2\x9c\x93"), "caf\xc3\xa9 \xe2\x9c\x93");
  EXPECT_EQ(core::valid_utf8("caf\xe9!"), "caf\xef\xbf\xbd!");
  EXPECT_EQ(core::valid_utf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd") << "an overlong '/'";
  EXPECT_EQ(core::valid_utf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd") << "a surrogate";
  EXPECT_EQ(core::valid_utf8("ab\xf0\x9f"), "ab\xef\xbf\xbd\xef\xbf\xbd") << "cut short at the end";
  EXPECT_EQ(core::first_invalid_utf8("ok\xff"), 2u);
  EXPECT_EQ(core::first_invalid_utf8("ok"), std::string::npos);
  const nlohmann::json j = {{"reason", std::string("bad \xff byte")}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error) << "what dump_json is for";
  EXPECT_EQ(nlohmann::json::parse(core::dump_json(j))["reason"], "bad \xef\xbf\xbd byte");
}

// A kernel that lists a mask no provider makes loads (its provider may come later), with one
// warning that names the manifest and the mask.
TEST(Registry, UnknownMaskInAManifestIsAWarning) {
  PluginFolder folder;
  folder.with_masks().with_case("good");
  std::string text = read_text(folder / "fx_good.json");
  const std::string from = "\"causal\"";
  const auto at = text.find(from);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, from.size(), "\"causal\", \"no_such_mask\"");
  write_text(folder / "fx_good.json", text);
  const Registry reg = Registry::load(folder.path());
  ASSERT_NE(reg.find("fx_good", "kernel"), nullptr) << "a warning, not a refusal";
  ASSERT_EQ(reg.warnings().size(), 1u);
  EXPECT_HAS(reg.warnings()[0], "fx_good.json");
  EXPECT_HAS(reg.warnings()[0], "'no_such_mask'");

  PluginFolder known;
  known.with_masks().with_case("good");
  EXPECT_TRUE(Registry::load(known.path()).warnings().empty()) << "full and causal are builtin masks";
}

TEST(Lifetime, KernelKeepsItsLibraryAfterTheRegistryIsGone) {
  PluginFolder folder;
  folder.with_case("good");
  const auto lib = std::filesystem::canonical(folder / "liblca_fx_good.so");
  std::shared_ptr<core::KernelInstance> kernel;
  {
    const Registry reg = Registry::load(folder.path());
    ASSERT_TRUE(is_loaded(lib));
    kernel = reg.make_kernel(*reg.find("fx_good", "kernel"));
  }
  ASSERT_TRUE(is_loaded(lib)) << "the registry is gone and the kernel lost its library";

  // And the kernel still runs: 4 tokens, 1 head, dim 2, full mask, V rows all (1, -2): O = V.
  auto backend = core::make_cpu_backend();
  const lca_exec exec{sizeof(lca_exec), nullptr, backend->allocator(), 1};
  const lca_problem problem{sizeof(lca_problem), LCA_DTYPE_F32, LCA_DEVICE_CPU, 0, 4, 4, 1, 1, 2, 0.5f};
  const lca_slice slice{0, 4, 0, 4, LCA_SLICE_FULL, 0};
  const lca_mask mask{sizeof(lca_mask), 4, 4, 1, &slice, nullptr, 0, nullptr};
  lca_plan* plan = nullptr;
  ASSERT_EQ(kernel->vtable().plan(kernel->get(), &problem, &mask, &exec, &plan), LCA_OK);
  std::vector<float> q = {1, 0, 0, 1, 1, 1, -1, 0}, k = {0, 1, 1, 0, 2, 2, 1, -1}, v(8), o(8, NAN), lse(4, NAN);
  for (int t = 0; t < 4; ++t) v[2 * t] = 1, v[2 * t + 1] = -2;
  auto tensor = [](float* p, int64_t tokens) {
    return lca_tensor{sizeof(lca_tensor), LCA_DTYPE_F32, p, {tokens, 1, 2}, {2, 2, 1}};
  };
  const lca_fwd_args args{sizeof(lca_fwd_args), tensor(q.data(), 4), tensor(k.data(), 4), tensor(v.data(), 4),
                          tensor(o.data(), 4),
                          lca_tensor{sizeof(lca_tensor), LCA_DTYPE_F32, lse.data(), {1, 4, 1}, {4, 1, 1}}};
  EXPECT_EQ(kernel->vtable().forward(kernel->get(), plan, &args, &exec), LCA_OK);
  kernel->vtable().destroy_plan(kernel->get(), plan, &exec);
  for (int t = 0; t < 4; ++t) {
    EXPECT_NEAR(o[2 * t], 1.0f, 1e-6);
    EXPECT_NEAR(o[2 * t + 1], -2.0f, 1e-6);
    EXPECT_TRUE(std::isfinite(lse[t]));
  }
  EXPECT_EQ(backend->current_bytes(), 0u) << "the plan's workspace went back to the host allocator";

  kernel.reset();
  EXPECT_FALSE(is_loaded(lib)) << "the last object is gone; the library should be unloaded";
}

TEST(Lifetime, GeneratedMaskKeepsItsProviderAfterRegistryAndSourceAreGone) {
  PluginFolder folder;
  folder.with_masks();
  const auto lib = std::filesystem::canonical(folder / "liblca_builtin.so");
  std::shared_ptr<core::GeneratedMask> mask;
  {
    const Registry reg = Registry::load(folder.path());
    core::MaskSource source(reg);
    mask = source.generate(core::MaskSpec::parse("causal"), 48, 1);
  }
  ASSERT_TRUE(is_loaded(lib));
  // The slices still belong to the provider, which is still alive: read them.
  const lca_mask& m = mask->mask();
  EXPECT_EQ(m.seqlen_q, 48);
  ASSERT_GE(m.num_slices, 1);
  EXPECT_EQ(core::mask_area(m), 48 * 49 / 2);
  EXPECT_EQ(mask->area(), 48 * 49 / 2);
}

}  // namespace
}  // namespace lca::test
