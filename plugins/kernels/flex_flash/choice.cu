// The host side's questions to the device headers (kernels.hpp): wide_tile_speedup (the per-cell speed of the
// 128-row kernels over the 64-row ones: kernels.hpp's constants where the Hopper kernels run), the
// variant choices plan() needs, and which kernels the launchers run (plan_info).
#include "backward.cuh"
#include "forward.cuh"

#include <numeric>

namespace lca_flex_flash {

double wide_tile_speedup(bool forward, const Options& o) {
  if (forward) return dev::sm90_available(o.forward) ? kSm90WideTileSpeedup(true) : kMmaWideOverNarrow;
  return dev::sm90_backward_available(o.backward) ? kSm90WideTileSpeedup(false) : kMmaWideOverNarrow;
}

bool pair_forward(const Options& o, double idle_share, double mean_tiles, int32_t max_tiles, int32_t group) {
  return dev::pair_forward_wanted(o.forward, idle_share, mean_tiles, max_tiles, group);
}

bool wg3_forward(const Options& o, int32_t head_dim, double idle_share, double mean_tiles, int32_t max_tiles,
                 int32_t group) {
  return dev::wg3_forward_wanted(o.forward, head_dim, idle_share, mean_tiles, max_tiles, group);
}

bool wg3_forward_forced(const Options& o, int32_t head_dim) { return o.forward == dev::wg3_kernel(head_dim).asked; }

ForwardChoice split_grid_kernel(const Options& o, int32_t head_dim, const TileSchedule& s, int32_t group) {
  if (!dev::sm90_available(o.forward) || o.fwd_split == 1) return ForwardChoice::sm90_auto;
  switch (dev::sm90_forward_kernel(o.forward, s.tile_rows, idle_share(s), mean_tiles(s), s.max_tiles, group, head_dim)) {
    case dev::Sm90FwdKernel::k128: return ForwardChoice::sm90_k128;
    case dev::Sm90FwdKernel::k128_wg3: return ForwardChoice::sm90_k128_wg3;
    case dev::Sm90FwdKernel::persistent: return ForwardChoice::sm90_persistent;
    default: return ForwardChoice::sm90_auto;
  }
}

std::vector<int32_t> forced_split_parts(const Options& o, const TileSchedule& s) {
  if (o.fwd_split >= 2 && o.fwd_split <= kMaxSplitKvParts)
    return std::vector<int32_t>(static_cast<size_t>(s.row_tiles), o.fwd_split);
  if (o.fwd_split >= 12 && o.fwd_split <= 10 + kMaxSplitKvParts) return long_walk_parts(s, o.fwd_split - 10);
  return {};
}

BwdPairing backward_pairing(const Options& o) {
  if (o.backward == BackwardChoice::sm90_unpaired || o.backward == BackwardChoice::sm90_atomic) return BwdPairing::kNone;
  return o.backward == BackwardChoice::sm90_paired ? BwdPairing::kAll : BwdPairing::kAuto;
}

int32_t backward_kv_heads_together(const Options& o, int32_t heads_kv) {
  if (o.bwd_order == 0) return 0;
  if (o.bwd_order < 0) return heads_kv;  // kv_heads_inner
  return std::gcd(o.bwd_order, heads_kv);
}

BwdSplit backward_split(const Options& o) {
  if (o.bwd_split == Switch::kAuto) return BwdSplit::kAuto;
  return o.bwd_split == Switch::kOff ? BwdSplit::kOff : BwdSplit::kAll;
}

BwdMatch backward_match(const Options& o) {
  // Walks split by ranges (bwd_ranges) run on the key tiles as they are.
  if (o.bwd_match == Switch::kOff || o.bwd_ranges > 0 || !dev::sm90_backward_available(o.backward) || !dev::variant_runs_matched(o.backward))
    return BwdMatch::kOff;
  return o.bwd_match == Switch::kOn ? BwdMatch::kOn : BwdMatch::kAuto;
}

BwdLocal backward_local(const Options& o) {
  if (o.bwd_local == Switch::kAuto) return BwdLocal::kAuto;
  return o.bwd_local == Switch::kOff ? BwdLocal::kOff : BwdLocal::kOn;
}

DqFirst backward_dq_first(const Options& o, const TileSchedule& s, const std::vector<BwdItem>& items, int32_t group) {
  if (o.dq_first == Switch::kOff || !dev::sm90_backward_available(o.backward) || s.tile_rows != kBwdKeys ||
      !plain_walks(items))
    return DqFirst::kOff;
  if (!dq_first_runs_in(o.backward, sm90_backward_for(o.backward, idle_share(s), mean_tiles(s) * group, true,
                                                      alike_walks(items), !s.key_blocks.empty(),
                                                      span_places(mean_span(s), group))))
    return DqFirst::kOff;
  return o.dq_first == Switch::kOn ? DqFirst::kAll : DqFirst::kTimed;
}

const char* launched_forward_kernel(const FwdParams& p, int32_t head_dim) { return dev::forward_kernel_name(p, head_dim); }

const char* launched_forward_row_sums(const FwdParams& p, int32_t head_dim) {
  return dev::forward_row_sums_name(p, head_dim);
}

const char* launched_backward_kernel(const BwdParams& p) { return dev::backward_kernel_name(p); }

bool launched_dq_first_writers(const BwdParams& p) { return dev::backward_dq_first_runs(p); }

bool launched_dv_first(const BwdParams& p) { return dev::backward_dv_first_runs(p); }

}  // namespace lca_flex_flash
