// The parser fuzzers as tests: each feeds its target mutated seeds for a bounded wall time, and
// fails on the first inputs that end other than cleanly; a crash ends the test process, and an
// input that runs past its own deadline is printed and ends it too.
// Environment: LCA_FUZZ_SECONDS (wall time of each target, default 20), LCA_FUZZ_SEED (the first
// input's seed; default from the clock, printed), LCA_FUZZ_REPLAY (a file: run only that input).
// Failing inputs are written to <build>/fuzz_failures/ for LCA_FUZZ_REPLAY.
#include "fixture_folder.hpp"
#include "mutator.hpp"
#include "targets.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <mutex>
#include <thread>
#include <unistd.h>

namespace lca::fuzz {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double env_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  return end != v && *end == '\0' && d >= 0 ? d : fallback;
}

uint64_t first_seed() {
  if (const char* v = std::getenv("LCA_FUZZ_SEED"); v && *v) return std::strtoull(v, nullptr, 10);
  return static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
}

Targets& targets() {
  static Targets t(test::main_plugin_dir(), test::source_dir());
  return t;
}

fs::path failure_dir() { return fs::path(LCA_TEST_BINARY_DIR) / "fuzz_failures"; }

// Ends the process, naming the input, when one input runs longer than LCA_FUZZ_INPUT_SECONDS:
// a hang must not wait for ctest's timeout, which would not say which input hung.
class Watchdog {
 public:
  explicit Watchdog(std::string target) : target_(std::move(target)) {
    limit_s_ = env_double("LCA_FUZZ_INPUT_SECONDS", 10);
    thread_ = std::thread([this] { watch(); });
  }
  ~Watchdog() {
    stop_ = true;
    thread_.join();
  }
  void start(const std::string& input) {
    std::lock_guard<std::mutex> lock(mutex_);
    input_ = input;
    started_ = Clock::now();
    busy_ = true;
  }
  void done() { busy_ = false; }

 private:
  void watch() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard<std::mutex> lock(mutex_);
      if (busy_ && std::chrono::duration<double>(Clock::now() - started_).count() > limit_s_) {
        fs::create_directories(failure_dir());
        const fs::path file = failure_dir() / (target_ + "_hang.bin");
        test::write_text(file, input_);
        std::fprintf(stderr, "fuzz %s: an input ran past %.0f s (a hang); written to %s:\n%s\n", target_.c_str(),
                     limit_s_, file.c_str(), printable(input_).c_str());
        std::fflush(stderr);
        _exit(3);
      }
    }
  }
  std::string target_;
  double limit_s_;
  std::mutex mutex_;
  std::string input_;
  Clock::time_point started_;
  std::atomic<bool> busy_{false}, stop_{false};
  std::thread thread_;
};

void fuzz(const std::string& name, const std::vector<std::string>& seeds, std::vector<std::string> dictionary,
          const std::function<Verdict(std::string_view)>& target) {
  Watchdog watchdog(name);
  int failures = 0;
  auto run_one = [&](const std::string& input, const std::string& label) {
    watchdog.start(input);
    const Verdict v = target(input);
    watchdog.done();
    if (v.clean) return;
    ++failures;
    fs::create_directories(failure_dir());
    const fs::path file = failure_dir() / (name + "_" + label + ".bin");
    test::write_text(file, input);
    ADD_FAILURE() << name << ": " << v.problem << "\n  input (" << label << ", written to " << file.string()
                  << "): " << printable(input);
  };

  if (const char* replay = std::getenv("LCA_FUZZ_REPLAY"); replay && *replay) {
    run_one(test::read_text(replay), "replay");
    return;
  }
  // The seeds themselves are valid inputs: each must pass as it is.
  for (size_t i = 0; i < seeds.size(); ++i) run_one(seeds[i], "seed" + std::to_string(i));
  ASSERT_EQ(failures, 0) << "a seed input fails: the target or its seeds are wrong";

  const uint64_t seed = first_seed();
  const double budget_s = env_double("LCA_FUZZ_SECONDS", 20);
  std::cout << "fuzz " << name << ": LCA_FUZZ_SEED=" << seed << ", " << budget_s << " s\n";
  Mutator mutator(seed, seeds, std::move(dictionary));
  const auto t0 = Clock::now();
  uint64_t inputs = 0;
  while (failures < 5 && std::chrono::duration<double>(Clock::now() - t0).count() < budget_s) {
    run_one(mutator.next(), std::to_string(seed) + "_" + std::to_string(inputs));
    ++inputs;
  }
  std::cout << "fuzz " << name << ": " << inputs << " inputs, " << failures << " not clean\n";
  ::testing::Test::RecordProperty("inputs", std::to_string(inputs));
}

std::vector<std::string> json_files(const std::vector<fs::path>& dirs, bool recursive) {
  std::vector<fs::path> files;
  for (const auto& dir : dirs) {
    if (!fs::is_directory(dir)) continue;
    if (recursive) {
      for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
    } else {
      for (const auto& e : fs::directory_iterator(dir))
        if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> texts;
  for (const auto& f : files) texts.push_back(test::read_text(f));
  return texts;
}

std::vector<std::string> dictionary_of(const std::vector<std::string>& texts) {
  std::vector<std::string> words;
  for (const auto& t : texts)
    for (auto& w : quoted_strings(t)) words.push_back(std::move(w));
  std::sort(words.begin(), words.end());
  words.erase(std::unique(words.begin(), words.end()), words.end());
  return words;
}

// One request per pattern, with parameters: "SEQLEN\nSPEC".
const std::vector<std::string> kMaskSpecSeeds = {
    "64\nfull",
    "64\ncausal",
    "1000\nfull_document:dist=uniform:1-300",
    "5000\ncausal_document:dist=pile",
    "4096\nsliding_window:window=700",
    "512\nsliding_window_causal:window=9",
    "512\nsliding_window_document:window=50,dist=uniform:20-400",
    "3000\nshared_question:dist=chatqa",
    "3000\ncausal_blockwise:dist=prolong64k",
    "777\nprefix_lm_causal:prefix=100",
    "4096\nprefix_lm_document:prefix=-1,dist=uniform:30-400",
    "1024\nglobal_sliding:window=100,global_tokens=33",
    "8192\nblock_causal_document:block=128,max_blocks=4",
    "2048\nblock_sparse:block=64,sparsity=0.25",
};

// The same requests as raw parameter JSON: "SEQLEN\nPATTERN\nJSON".
const std::vector<std::string> kMaskParamSeeds = {
    "64\nfull\n{}",
    "1000\nfull_document\n{\"dist\":\"uniform:1-300\"}",
    "4096\nsliding_window\n{\"window\":700}",
    "512\nsliding_window_document\n{\"window\":50,\"dist\":\"uniform:20-400\"}",
    "777\nprefix_lm_causal\n{\"prefix\":100}",
    "4096\nprefix_lm_document\n{\"prefix\":-1,\"dist\":\"auto\"}",
    "1024\nglobal_sliding\n{\"window\":\"100\",\"global_tokens\":33}",
    "8192\nblock_causal_document\n{\"block\":128,\"max_blocks\":4}",
    "2048\nblock_sparse\n{\"block\":128,\"sparsity\":\"0.25\"}",
};

const std::vector<std::string> kMaskWords = {
    "full", "causal", "full_document", "causal_document", "sliding_window", "sliding_window_causal",
    "sliding_window_document", "shared_question", "causal_blockwise", "prefix_lm_causal", "prefix_lm_document",
    "global_sliding", "block_causal_document", "block_sparse", "window", "dist", "prefix", "global_tokens",
    "block", "max_blocks", "sparsity", "uniform:", "uniform:1-9223372036854775807", "uniform:0-5", "pile",
    "prolong64k", "prolong512k", "chatqa", "auto", ":", ",", "=", "\n"};

TEST(Fuzz, ManifestParser) {
  const auto seeds = json_files({test::source_dir() / "manifests" / "plugins", test::source_dir() / "tests" / "fixtures",
                                 test::source_dir() / "sdk" / "examples"},
                                true);
  ASSERT_GE(seeds.size(), 10u);
  fuzz("manifest", seeds, dictionary_of(seeds), [](std::string_view in) { return targets().manifest(in); });
}

TEST(Fuzz, MatrixSpecParser) {
  const auto seeds = json_files({test::source_dir() / "manifests" / "matrices"}, false);
  ASSERT_GE(seeds.size(), 5u);
  fuzz("matrix_spec", seeds, dictionary_of(seeds), [](std::string_view in) { return targets().matrix_spec(in); });
}

TEST(Fuzz, MaskSpecParser) {
  fuzz("mask_spec", kMaskSpecSeeds, kMaskWords, [](std::string_view in) { return targets().mask_spec(in); });
}

TEST(Fuzz, MaskParamsParser) {
  fuzz("mask_params", kMaskParamSeeds, kMaskWords, [](std::string_view in) { return targets().mask_params(in); });
}

}  // namespace
}  // namespace lca::fuzz
