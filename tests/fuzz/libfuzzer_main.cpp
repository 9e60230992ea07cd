// libFuzzer's entry for one target (LCA_FUZZ_TARGET: manifest, matrix_spec, mask_spec or
// mask_params), built only where the compiler is clang: coverage-guided runs beside the seeded
// tests, e.g. `build/tests/fuzz/fuzz_matrix_spec -max_total_time=600 CORPUS_DIR`.
// Rule: an input that ends other than cleanly aborts, so that libFuzzer keeps it as a crash.
#include "targets.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static lca::fuzz::Targets targets(LCA_TEST_PLUGIN_DIR, LCA_TEST_SOURCE_DIR);
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const lca::fuzz::Verdict v = targets.LCA_FUZZ_TARGET(input);
  if (!v.clean) {
    std::fprintf(stderr, "not clean: %s\n", v.problem.c_str());
    std::abort();
  }
  return 0;
}
