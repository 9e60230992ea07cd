// Test support: private temporary plugin folders assembled from the fixture cases
// (tests/fixtures, built under <build>/fixture_plugins/<case>) and the main build's plugins.
// Used by the unit tests of the host (tests/unit/*).
// Rule: a folder belongs to one test and is removed with it; never write into the build's own
// plugin folders.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace lca::test {

namespace fs = std::filesystem;

inline fs::path main_plugin_dir() { return LCA_TEST_PLUGIN_DIR; }
inline fs::path source_dir() { return LCA_TEST_SOURCE_DIR; }
inline fs::path fixture_dir(const std::string& case_name) {
  return fs::path(LCA_TEST_BINARY_DIR) / "fixture_plugins" / case_name;
}

inline std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + file.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_text(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + file.string());
  out << text;
}

inline std::vector<std::string> read_lines(const fs::path& file) {
  std::vector<std::string> lines;
  std::istringstream in(read_text(file));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A fresh folder under the system temp folder, removed on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "lca_test") {
    std::string pattern = (fs::temp_directory_path() / (tag + "_XXXXXX")).string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// A plugin folder for one test: the manifest schema, plus whatever the test asks for.
class PluginFolder : public TempDir {
 public:
  PluginFolder() : TempDir("lca_plugins") {
    fs::create_directories(path() / "schema");
    fs::copy_file(source_dir() / "manifests" / "manifest.schema.json",
                  path() / "schema" / "manifest.schema.json");
  }

  // The builtin mask provider (14 patterns) and its data files.
  PluginFolder& with_masks() {
    copy_from_main({"liblca_builtin.so", "builtin.json"});
    fs::copy(main_plugin_dir() / "data", path() / "data",
             fs::copy_options::recursive | fs::copy_options::skip_existing);
    return *this;
  }
  // cpu_reference: the checking reference for CPU cells.
  PluginFolder& with_reference() {
    copy_from_main({"liblca_cpu_reference.so", "cpu_reference.json"});
    return *this;
  }
  // Every file of one fixture case (its schema copy excluded: the folder has one).
  PluginFolder& with_case(const std::string& case_name) {
    const fs::path dir = fixture_dir(case_name);
    if (!fs::is_directory(dir))
      throw std::runtime_error("fixture case " + dir.string() + " is missing: build the target lca_fixtures");
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) fs::copy_file(e.path(), path() / e.path().filename(), fs::copy_options::overwrite_existing);
    return *this;
  }
  PluginFolder& with_cases(std::initializer_list<const char*> cases) {
    for (const char* c : cases) with_case(c);
    return *this;
  }

 private:
  void copy_from_main(std::initializer_list<const char*> files) {
    for (const char* f : files) {
      if (!fs::exists(main_plugin_dir() / f))
        throw std::runtime_error(std::string(f) + " is missing in " + main_plugin_dir().string() + ": build it first");
      fs::copy_file(main_plugin_dir() / f, path() / f, fs::copy_options::overwrite_existing);
    }
  }
};

}  // namespace lca::test
