// The reference results the harness keeps on disk (run_cpu_reference): the second call returns
// exactly what the first computed, other inputs or another pass get a file of their own, and a
// damaged file is computed again. CPU only: runs without a GPU.
#include "harness.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace lca::test::cuda {
namespace {

namespace fs = std::filesystem;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool same_results(const Results& a, const Results& b) {
  return same_bits(a.o, b.o) && same_bits(a.lse, b.lse) && same_bits(a.dq, b.dq) && same_bits(a.dk, b.dk) &&
         same_bits(a.dv, b.dv);
}

int files_in(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".ref";
  return n;
}

TEST(ReferenceCache, KeptResultsAreTheComputedOnes) {
  const fs::path dir = fs::temp_directory_path() / ("lca_reference_cache_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  ASSERT_EQ(::setenv("LCA_TEST_REFERENCE_CACHE", "off", 1), 0);
  const Problem p{"documents_causal_300_gqa2_d64_bf16", 300, 300, 4, 2, 64, LCA_DTYPE_BF16,
                  mask_documents({120, 37, 143}, true)};
  const Inputs in = make_inputs(p, 7);
  const Results computed = run_cpu_reference(p, in, true);  // without the cache
  ASSERT_EQ(computed.status, LCA_OK) << computed.error;

  ASSERT_EQ(::setenv("LCA_TEST_REFERENCE_CACHE", dir.c_str(), 1), 0);
  const Results first = run_cpu_reference(p, in, true);
  ASSERT_EQ(first.status, LCA_OK) << first.error;
  EXPECT_TRUE(same_results(first, computed));
  ASSERT_EQ(files_in(dir), 1);
  const Results again = run_cpu_reference(p, in, true);
  EXPECT_TRUE(same_results(again, computed));
  EXPECT_EQ(files_in(dir), 1);

  // Other inputs and the forward alone are other results.
  const Inputs other = make_inputs(p, 8);
  const Results other_first = run_cpu_reference(p, other, true);
  EXPECT_FALSE(same_bits(other_first.o, computed.o));
  EXPECT_EQ(files_in(dir), 2);
  const Results fwd = run_cpu_reference(p, in, false);
  EXPECT_TRUE(same_bits(fwd.o, computed.o));
  EXPECT_EQ(files_in(dir), 3);
  EXPECT_TRUE(same_results(run_cpu_reference(p, in, false), fwd));

  // A damaged file is computed again and written anew.
  for (const auto& e : fs::directory_iterator(dir)) fs::resize_file(e.path(), fs::file_size(e.path()) / 2);
  EXPECT_TRUE(same_results(run_cpu_reference(p, in, true), computed));
  EXPECT_TRUE(same_results(run_cpu_reference(p, in, true), computed));

  ::unsetenv("LCA_TEST_REFERENCE_CACHE");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lca::test::cuda
