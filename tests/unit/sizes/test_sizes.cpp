// Sizes: every count that grows with the sequence length is checked (lca/checked.hpp); mask
// areas and pictures come from the slices in O(slices) at any length; a length whose area
// cannot be counted is refused, and a cell whose buffers cannot be sized is E, quickly and
// without a crash, in the library and through lcahost.
#include "core/mask/mask_source.hpp"
#include "core/mask/render.hpp"
#include "core/plugin/registry.hpp"
#include "fixture_folder.hpp"
#include "subprocess.hpp"

#include <lca/checked.hpp>
#include <lca/error.hpp>
#include <lca/types.hpp>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <limits>

namespace lca::test {
namespace {

#define EXPECT_HAS(text, fragment) EXPECT_NE((text).find(fragment), std::string::npos) << (text)

constexpr int64_t kMax = lca::max_seqlen;

lca_slice square(int64_t n, int32_t type) { return lca_slice{0, n, 0, n, type, 0}; }

lca_mask view(const std::vector<lca_slice>& slices, int64_t s) {
  return lca_mask{sizeof(lca_mask), s, s, static_cast<int64_t>(slices.size()), slices.data(), nullptr, 0, nullptr};
}

// Runs body in a child process: "" when it returned "", else its complaint, "crashed (signal N)"
// or "ran past N s". An O(seqlen) loop at 2^40 tokens would otherwise hang the test binary.
std::string in_child(double timeout_s, const std::function<std::string()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string complaint;
    try {
      complaint = body();
    } catch (const std::exception& e) {
      complaint = std::string("threw: ") + e.what();
    }
    if (!complaint.empty()) (void)!write(fds[1], complaint.data(), complaint.size());
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  const auto t0 = std::chrono::steady_clock::now();
  pollfd pfd{fds[0], POLLIN, 0};
  char buf[512];
  for (;;) {
    const double left = timeout_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (left <= 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      close(fds[0]);
      return "ran past " + std::to_string(timeout_s) + " s";
    }
    if (poll(&pfd, 1, static_cast<int>(left * 1000) + 1) <= 0) continue;
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return "crashed (signal " + std::to_string(WTERMSIG(status)) + ")";
  return out;
}

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Checked, ProductsAndSums) {
  EXPECT_EQ(lca::product_of(int64_t{3037000499}, int64_t{3037000499}), int64_t{9223372030926249001});
  EXPECT_EQ(lca::product_of(int64_t{1} << 40, 64, 128, size_t{2}), int64_t{1} << 54);
  EXPECT_FALSE(lca::product_of(int64_t{1} << 62, 64, 64, size_t{2}).has_value());  // wraps to 0 unchecked
  EXPECT_FALSE(lca::product_of(int64_t{4}, -1).has_value());
  EXPECT_FALSE(lca::product_of(std::numeric_limits<uint64_t>::max(), 1).has_value());
  EXPECT_EQ(lca::product_of(int64_t{0}, std::numeric_limits<int64_t>::max()), 0);
  try {
    lca::checked_product("Q bytes", int64_t{1} << 62, 64, 64, size_t{2});
    ADD_FAILURE() << "no throw";
  } catch (const lca::Error& e) {
    EXPECT_EQ(e.status(), LCA_ERR_OUT_OF_MEMORY);  // the host records it as E
    const std::string m = e.what();
    EXPECT_HAS(m, "Q bytes");
    EXPECT_HAS(m, "4611686018427387904 x 64 x 64 x 2");
    EXPECT_HAS(m, "does not fit in 64 bits");
  }
  try {
    lca::checked_product("K elements", int64_t{8}, -2);
    ADD_FAILURE() << "no throw";
  } catch (const lca::Error& e) {
    EXPECT_EQ(e.status(), LCA_ERR_INVALID_ARGUMENT);
    EXPECT_HAS(std::string(e.what()), "negative");
  }
  EXPECT_EQ(lca::checked_sum("area", 1, 2), 3);
  EXPECT_THROW(lca::checked_sum("area", std::numeric_limits<int64_t>::max(), 1), lca::Error);
  EXPECT_EQ(lca::checked_bytes("b", 10, 4), size_t{40});
}

// The area of one slice is O(1): at the longest length the closed form answers at once, where
// a row-by-row count would walk 3e9 rows.
TEST(SliceArea, ClosedFormAtTheLongestLength) {
  const std::string complaint = in_child(30, [] {
    std::string out;
    const auto want = [&](const lca_slice& s, int64_t area) {
      if (lca::slice_area(s) != area)
        out += std::string(lca::slice_type_name(s.type)) + " " + std::to_string(lca::slice_area(s)) + " != " +
               std::to_string(area) + "; ";
    };
    const double secs = seconds_of([&] {
      want(square(kMax, LCA_SLICE_FULL), kMax * kMax);
      want(square(kMax, LCA_SLICE_CAUSAL), kMax * ((kMax + 1) / 2));  // kMax + 1 is even
      want(square(kMax, LCA_SLICE_INV_CAUSAL), kMax * ((kMax + 1) / 2));
      want(square(kMax, LCA_SLICE_BI_CAUSAL), kMax);
      // Taller than wide: a triangle of lk rows; wider than tall: the rectangle less a triangle.
      const int64_t lq = 3000000000, lk = 2000000000;
      want(lca_slice{0, lq, 0, lk, LCA_SLICE_CAUSAL, 0}, lk / 2 * (lk + 1));
      want(lca_slice{0, lk, 0, lq, LCA_SLICE_CAUSAL, 0}, lk * lq - lk / 2 * (lk - 1));
      want(lca_slice{0, lk, 0, lq, LCA_SLICE_BI_CAUSAL, 0}, lk * (lq - lk + 1));
      want(lca_slice{0, lq, 0, lk, LCA_SLICE_BI_CAUSAL, 0}, 0);
    });
    if (secs > 0.5) out += "took " + std::to_string(secs) + " s";
    return out;
  });
  EXPECT_EQ(complaint, "");
}

// Past 64 bits the area is refused (out of memory to the ABI), neither wrapped nor counted row by
// row: 2^40 rows would take hours.
TEST(SliceArea, PastSixtyFourBitsIsRefused) {
  const std::string complaint = in_child(30, [] {
    for (int32_t type : {LCA_SLICE_FULL, LCA_SLICE_CAUSAL, LCA_SLICE_INV_CAUSAL, LCA_SLICE_BI_CAUSAL}) {
      try {
        const int64_t area = lca::slice_area(square(int64_t{1} << 40, type));
        return std::string(lca::slice_type_name(type)) + ": area " + std::to_string(area) + ", no refusal";
      } catch (const lca::Error& e) {
        if (e.status() != LCA_ERR_OUT_OF_MEMORY) return std::string("status ") + std::to_string(e.status());
      }
    }
    const std::vector<lca_slice> two{square(kMax, LCA_SLICE_FULL), square(kMax, LCA_SLICE_FULL)};
    try {
      core::mask_area(view(two, kMax));
      return std::string("mask_area summed past 64 bits");
    } catch (const lca::Error&) {
    }
    return std::string();
  });
  EXPECT_EQ(complaint, "");
}

// Pictures and stats read the slices only: an 8 x 8 picture of a 2^62-token mask is exact, and the
// stats of the longest causal mask are exact and immediate.
TEST(Render, HugeMasksFromTheSlices) {
  const std::string complaint = in_child(30, [] {
    const int64_t huge = int64_t{1} << 62;
    const std::vector<lca_slice> full{square(huge, LCA_SLICE_FULL)};
    std::string want_full;
    for (int r = 0; r < 8; ++r) want_full += "########\n";
    const std::string got_full = core::render_ascii(view(full, huge), 8);
    if (got_full != want_full) return "full 2^62:\n" + got_full;
    // Causal: blocks under the diagonal full, on it about half, above it empty.
    const std::vector<lca_slice> causal{square(huge, LCA_SLICE_CAUSAL)};
    const std::string got = core::render_ascii(view(causal, huge), 8);
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) {
        const char ch = got[static_cast<size_t>(r) * 9 + c];
        const bool ok = c < r ? ch == '#' : c == r ? (ch == ':' || ch == '+' || ch == '.') : ch == ' ';
        if (!ok) return "causal 2^62:\n" + got;
      }
    try {
      core::mask_stats(view(causal, huge));
      return std::string("stats of a 2^62 mask counted past 64 bits");
    } catch (const lca::Error&) {
    }
    const std::vector<lca_slice> longest{square(kMax, LCA_SLICE_CAUSAL)};
    core::MaskStats stats;
    const double secs = seconds_of([&] { stats = core::mask_stats(view(longest, kMax)); });
    if (stats.area != kMax * ((kMax + 1) / 2)) return "area " + std::to_string(stats.area);
    if (secs > 0.5) return "stats took " + std::to_string(secs) + " s";
    return std::string();
  });
  EXPECT_EQ(complaint, "");
}

class HostSizes : public ::testing::Test {
 protected:
  HostSizes() { folder_.with_masks().with_reference(); }
  ProcessResult lcahost(const std::vector<std::string>& args, double timeout_s = 60) {
    return run_lcahost(folder_.path(), args, timeout_s);
  }
  fs::path spec(const std::string& text) {
    const fs::path file = specs_ / "huge.json";
    write_text(file, text);
    return file;
  }
  PluginFolder folder_;
  TempDir specs_{"lca_specs"};
};

TEST_F(HostSizes, MaskSourceRefusesLengthsItCannotCount) {
  const fs::path dir = folder_.path();
  const std::string complaint = in_child(30, [&] {
    const auto reg = core::Registry::load(dir);
    core::MaskSource masks(reg);
    for (const int64_t n : {int64_t{1} << 40, int64_t{1} << 62, kMax + 1, int64_t{0}}) {
      try {
        masks.generate(core::MaskSpec::parse("causal"), n, 1);
        return std::to_string(n) + " accepted";
      } catch (const std::runtime_error& e) {
        const std::string m = e.what();
        if (m.find(std::to_string(n)) == std::string::npos || m.find(std::to_string(kMax)) == std::string::npos)
          return "refusal names neither length nor limit: " + m;
      }
    }
    const auto longest = masks.generate(core::MaskSpec::parse("causal"), kMax, 1);
    if (longest->area() != kMax * ((kMax + 1) / 2)) return "area " + std::to_string(longest->area());
    return std::string();
  });
  EXPECT_EQ(complaint, "");
}

TEST_F(HostSizes, MasksShowRefusesAHugeLengthAtOnce) {
  const auto r = lcahost({"masks", "--show", "causal", "--seqlen", "1099511627776"}, 30);
  EXPECT_FALSE(r.timed_out) << describe(r);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_HAS(r.err, "1099511627776");
  EXPECT_HAS(r.err, std::to_string(kMax));
  // The longest length draws from its one slice.
  const auto ok = lcahost({"masks", "--show", "causal", "--seqlen", std::to_string(kMax), "--width", "16"}, 30);
  ASSERT_EQ(ok.exit_code, 0) << describe(ok);
  EXPECT_HAS(ok.out, std::to_string(kMax * ((kMax + 1) / 2)));
}

TEST_F(HostSizes, RunRefusesLengthsItCannotCount) {
  for (const char* n : {"1099511627776", "4611686018427387904"}) {
    const fs::path file = spec(std::string(R"({"kernels": ["cpu_reference"], "masks": ["full", "causal"], "seqlens": [)") +
                               n + R"(], "heads": ["1:1"], "head_dims": [16], "dtypes": ["f32"]})");
    const auto r = lcahost({"--matrix", file.string(), "--out", (specs_ / "out.jsonl").string()}, 30);
    EXPECT_FALSE(r.timed_out) << describe(r);
    EXPECT_EQ(r.signal, 0) << describe(r);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_HAS(r.err, "'seqlens'");
    EXPECT_HAS(r.err, n);
    EXPECT_HAS(r.err, std::to_string(kMax));
  }
}

// A length the host counts, with buffers past 64 bits: the cell is E, naming the buffer, and the
// run goes on (unchecked, the Q buffer's size would wrap and the kernel write past its end).
TEST_F(HostSizes, CellWhoseBuffersCannotBeSizedIsE) {
  const fs::path file = spec(std::string(R"({"kernels": ["cpu_reference"], "masks": ["full"], "seqlens": [)") +
                             std::to_string(kMax) +
                             R"(], "heads": ["2147483647:2147483647"], "head_dims": [2147483647],
                                "dtypes": ["f32"], "passes": ["fwd", "bwd"]})");
  const fs::path out = specs_ / "e.jsonl";
  const auto r = lcahost({"--matrix", file.string(), "--out", out.string()}, 60);
  ASSERT_FALSE(r.timed_out) << describe(r);
  ASSERT_EQ(r.signal, 0) << describe(r);
  EXPECT_EQ(r.exit_code, 0) << describe(r);  // E is a result, not a failure of the run
  int cells = 0;
  for (const auto& line : read_lines(out)) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("type", "") != "cell") continue;
    ++cells;
    EXPECT_EQ(j.value("status", ""), "E") << line;
    EXPECT_HAS(j.value("reason", ""), "does not fit in 64 bits");
    EXPECT_HAS(j.value("reason", ""), "Q elements");
  }
  EXPECT_EQ(cells, 2);
}

}  // namespace
}  // namespace lca::test
