// The host side's questions to the device headers (kernels.hpp): wide_tile_speedup (the per-cell speed of the
// 128-row kernels over the 64-row ones), the variant choices plan() needs, and which kernels the launchers
// run (plan_info).
#include "backward.cuh"
#include "forward.cuh"

#include <numeric>

namespace lca_flex_flash {

namespace {
// Constants, not measured at run time: kernels-16k on an H100 (docs/kernels/NOTES.md, "v5-v7 on a
// device"), TFLOP/s a cell of the mask at 16K, head_dim 128: the Hopper kernels on 128-row tiles
// (full mask) against the mma.sync kernels on 64-row tiles (block_sparse, whose 64-token blocks
// those tiles fit exactly). Re-measure them when either kernel changes much.
// Stale since v9 / v10 (NOTES): the Hopper kernels now run full at 609 / 509, so the ratios are
// 2.96 / 2.60 rather than 2.69 / 1.99. The forward's choice does not move (both are over 2, the
// most cells a 128-row tile can cost over its 64-row halves); the backward's would, toward
// 128-row tiles for masks whose 128-row schedule costs 2.0-2.6x the cells. Left as measured
// until the 64-row kernels and such a mask (block_sparse at 512K) are timed again on a device.
constexpr double kSm90Forward = 555.0, kMma64Forward = 206.0;
constexpr double kSm90Backward = 391.0, kMma64Backward = 196.0;
// Between the two mma.sync kernels (v3): 128-row tiles share each loaded K/V tile between twice
// the MMAs, worth about a quarter.
constexpr double kMmaWideOverNarrow = 1.25;
}  // namespace

double wide_tile_speedup(bool forward) {
  if (forward) return dev::sm90_available() ? kSm90Forward / kMma64Forward : kMmaWideOverNarrow;
  return dev::sm90_backward_available() ? kSm90Backward / kMma64Backward : kMmaWideOverNarrow;
}

bool pair_forward(double idle_share, double mean_tiles, int32_t max_tiles, int32_t group) {
  return dev::pair_forward_wanted(idle_share, mean_tiles, max_tiles, group);
}

bool wg3_forward(int32_t head_dim, double idle_share, double mean_tiles, int32_t max_tiles, int32_t group) {
  return dev::wg3_forward_wanted(head_dim, idle_share, mean_tiles, max_tiles, group);
}

bool wg3_forward_forced(int32_t head_dim) { return dev::forward_choice() == dev::wg3_kernel(head_dim).asked; }

BwdPairing backward_pairing() {
  const std::string& v = dev::backward_variant();
  if (v == "sm90_unpaired" || v == "sm90_atomic") return BwdPairing::kNone;
  return v == "sm90_paired" ? BwdPairing::kAll : BwdPairing::kAuto;
}

int32_t backward_kv_heads_together(int32_t heads_kv) {
  static const std::string v =
      dev::variant_env("LCA_FLEX_BWD_ORDER", "kv_heads_outer kv_heads_inner kv_heads_2 kv_heads_4");
  if (v.empty()) return 0;
  if (v == "kv_heads_outer") return 1;
  if (v == "kv_heads_inner") return heads_kv;
  return std::gcd(v == "kv_heads_2" ? 2 : 4, heads_kv);
}

BwdSplit backward_split() {
  static const std::string v = dev::variant_env("LCA_FLEX_BWD_SPLIT", "off all");
  if (v.empty()) return BwdSplit::kAuto;
  return v == "off" ? BwdSplit::kOff : BwdSplit::kAll;
}

BwdMatch backward_match() {
  static const std::string v = dev::variant_env("LCA_FLEX_BWD_MATCH", "off on");
  if (v == "off" || !dev::sm90_backward_available() || !dev::variant_runs_matched(dev::backward_variant()))
    return BwdMatch::kOff;
  return v == "on" ? BwdMatch::kOn : BwdMatch::kAuto;
}

BwdLocal backward_local() {
  static const std::string v = dev::variant_env("LCA_FLEX_BWD_LOCAL", "off on");
  if (v.empty()) return BwdLocal::kAuto;
  return v == "off" ? BwdLocal::kOff : BwdLocal::kOn;
}

DqFirst backward_dq_first(const TileSchedule& s, const std::vector<BwdItem>& items, int32_t group) {
  static const std::string mode = dev::variant_env("LCA_FLEX_DQ_FIRST", "off on");
  if (mode == "off" || !dev::sm90_backward_available() || s.tile_rows != kBwdKeys || !plain_walks(items))
    return DqFirst::kOff;
  const std::string& v = dev::backward_variant();
  if (!dq_first_runs_in(v, sm90_backward_for(v, idle_share(s), mean_tiles(s) * group, true, alike_walks(items),
                                             !s.key_blocks.empty())))
    return DqFirst::kOff;
  return mode == "on" ? DqFirst::kAll : DqFirst::kTimed;
}

const char* launched_forward_kernel(const FwdParams& p, int32_t head_dim) { return dev::forward_kernel_name(p, head_dim); }

const char* launched_backward_kernel(const BwdParams& p) { return dev::backward_kernel_name(p); }

bool launched_dq_first_writers(const BwdParams& p) { return dev::backward_dq_first_runs(p); }

}  // namespace lca_flex_flash
