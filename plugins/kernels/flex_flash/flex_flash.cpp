// flex_flash: our flash-attention kernel for any slice mask. plan() turns the slices into tile
// schedules (query tiles for the forward, key tiles for the backward) with exact bitmasks for
// partial tiles and uploads them; forward/backward only launch.
#include "cuda_check.hpp"
#include "kernels.hpp"
#include "options.hpp"
#include "schedule.hpp"

#include <lca/kernel.hpp>
#include <lca/slice_ranges.hpp>
#include <lca/types.hpp>

#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <future>
#include <string>
#include <vector>

namespace lca_flex_flash {

namespace {

using lca::require;

struct UploadedSchedule {
  DeviceBuffer runs, run_offsets, bits, order, items, counter, key_blocks;
  int32_t row_tiles = 0, tile_rows = 0, item_count = 0, busy_tiles = 0;
  float idle_share = 0.f, mean_tiles = 0.f, mean_span = 0.f;
  bool plain_walks = false, alike_walks = false;
  int32_t max_tiles = 0;
  int32_t range_places = 0;  // backward: the places of a range where the walks are split by ranges (else 0)
  int32_t kv_heads_together = 1;
  int32_t heads_together = 1;  // forward: the heads that go out together (TileSchedule::heads_together)
  DeviceSchedule view() const {
    return DeviceSchedule{runs.as<TileRun>(), run_offsets.as<int32_t>(), bits.as<uint64_t>(), order.as<int32_t>(),
                          row_tiles, tile_rows, idle_share, mean_tiles, items.as<BwdItem>(), item_count,
                          counter.as<int32_t>(), busy_tiles, plain_walks, alike_walks, max_tiles, kv_heads_together,
                          key_blocks.as<int32_t>(), mean_span, range_places > 0, heads_together};
  }
};

template <class V>
DeviceBuffer upload(const V& host, const lca_exec& exec, const char* what) {
  using E = typename V::value_type;
  DeviceBuffer buf(exec.allocator, host.size() * sizeof(E), what);
  if (!host.empty())
    LCA_FLEX_CUDA_CHECK(cudaMemcpyAsync(buf.as<void>(), host.data(), host.size() * sizeof(E), cudaMemcpyHostToDevice,
                                        static_cast<cudaStream_t>(exec.stream)));
  return buf;
}

UploadedSchedule upload(const TileSchedule& s, const lca_exec& exec, const std::vector<BwdItem>& items = {}) {
  UploadedSchedule u;
  u.items = upload(items, exec, "the backward's blocks");
  u.item_count = static_cast<int32_t>(items.size());
  u.plain_walks = lca_flex_flash::plain_walks(items);
  u.alike_walks = lca_flex_flash::alike_walks(items);
  u.runs = upload(s.runs, exec, "the tile runs");
  u.run_offsets = upload(s.run_offsets, exec, "the tile run offsets");
  u.bits = upload(s.bits, exec, "the partial-tile bitmasks");
  u.order = upload(s.order, exec, "the tile order");
  u.key_blocks = upload(s.key_blocks, exec, "the matched key blocks");
  u.row_tiles = s.row_tiles;
  u.busy_tiles = s.busy_tiles;
  u.tile_rows = s.tile_rows;
  u.idle_share = static_cast<float>(idle_share(s));
  u.mean_tiles = static_cast<float>(mean_tiles(s));
  u.mean_span = static_cast<float>(mean_span(s));
  u.max_tiles = s.max_tiles;
  u.heads_together = s.heads_together;
  return u;
}

class FlexPlan final : public lca::IPlan {
 public:
  lca_problem problem{};
  Options options;  // the instance's, as plan() chose by them
  UploadedSchedule fwd, bwd;
  // Backward workspace, made on the first backward call (the runner's warm-up, outside the timed
  // repeats) rather than in plan(): plan() does not know the pass, and a forward cell must not
  // carry the fp32 dQ accumulator (16 GiB at 512K, 64 heads) in its peak memory.
  DeviceBuffer dq_accum, delta;
  // First writers of dQ (dq_first_writers): each query tile's key tile, or -1; made in plan() where
  // the backward has them (else empty), with their flags (a (query head, query tile) each, made with
  // dq_accum and zeroed once) and the number of the last backward call.
  DeviceBuffer dq_first, dq_ready;
  uint32_t dq_call = 0;
  // Split walks (split_long_walks): each split key tile's slot, and (made with dq_accum) the fp32 dK
  // and dV its parts add into.
  DeviceBuffer split_tiles, dkv_accum;
  int32_t split_count = 0;
  // Split-KV (split_row_tiles): the parts a row tile of fwd is (1: none), the grid kernel that
  // runs them (passed as the "forward" choice), and the parts' fp32 O and LSE, made on the first
  // forward call (a backward cell does not carry them).
  int32_t fwd_splits = 1;  // the most parts of a row tile
  ForwardChoice fwd_grid = ForwardChoice::sm90_auto;
  // The split schedule's FwdParams::part_of, split_rows and split_first; its split row tiles and
  // the parts' places in all.
  DeviceBuffer part_of, split_rows, split_first;
  int32_t fwd_split_rows = 0, fwd_places = 0;
  // The unsplit schedule's row tiles, busy row tiles and mean tiles a row tile, for plan_info.
  int32_t fwd_row_tiles = 0, fwd_busy_tiles = 0;
  float fwd_mean_tiles = 0.f;
  // The backward blocks' simulated dispatch over an even spread (dispatch_over_spread), for plan_info.
  float bwd_dispatch = 0.f;
  DeviceBuffer part_o, part_lse;
  // What forward() and backward() launch on this plan, recorded with each cell (plan_info): the
  // kernels, by the values of the "forward" / "backward" options that force them, and the schedules
  // they walk. The backward's entries hold whether or not a backward call was made.
  std::string info() const override {
    const auto group = static_cast<int32_t>(problem.heads_q / problem.heads_kv);
    FwdParams f{};
    f.sched = fwd.view();
    f.group = group;
    f.forward = fwd_splits > 1 ? fwd_grid : options.forward;
    f.sum = options.fwd_sum;
    BwdParams b{};
    b.sched = bwd.view();
    b.group = group;
    b.backward = options.backward;
    b.dq_first = dq_first.empty() ? nullptr : dq_first.as<int32_t>();
    b.split_count = split_count;
    b.dv_first = options.bwd_dv_first == Switch::kOn;
    auto rounded = [](float x) { return std::round(double{x} * 1000.0) / 1000.0; };
    nlohmann::json j;
    j["forward"] = {{"kernel", launched_forward_kernel(f, problem.head_dim)},
                    {"row_sums", launched_forward_row_sums(f, problem.head_dim)},
                    {"splits", fwd_splits},
                    {"split_row_tiles", fwd_split_rows},
                    {"tile_rows", fwd.tile_rows},
                    {"row_tiles", fwd_row_tiles},
                    {"busy_row_tiles", fwd_busy_tiles},
                    {"heads_together", fwd.heads_together},
                    {"idle_share", rounded(fwd.idle_share)},
                    {"mean_tiles", rounded(fwd_mean_tiles)}};
    const std::string bwd_kernel = launched_backward_kernel(b);
    // The Hopper kernel's grid is its items (one or two key tiles each) by kv heads; mma.sync's a
    // key tile a block.
    const int64_t bwd_blocks = int64_t{bwd_kernel == "mma" ? bwd.row_tiles : bwd.item_count} * problem.heads_kv;
    j["backward"] = {{"kernel", bwd_kernel},
                     {"tile_keys", bwd.tile_rows},
                     {"key_tiles", bwd.row_tiles},
                     {"blocks", bwd_blocks},
                     {"kv_heads_together", bwd.kv_heads_together},
                     {"matched_key_blocks", !bwd.key_blocks.empty()},
                     {"split_walks", split_count},
                     {"range_places", bwd.range_places},
                     {"dq_first_writers", launched_dq_first_writers(b)},
                     {"dv_first", launched_dv_first(b)},
                     {"idle_share", rounded(bwd.idle_share)},
                     {"mean_tiles", rounded(bwd.mean_tiles)},
                     {"mean_span", rounded(bwd.mean_span)},
                     {"dispatch_over_spread", bwd_kernel == "mma" ? 0.0 : rounded(bwd_dispatch)}};
    return j.dump();
  }
  void release(const lca_exec& exec) override {
    (void)cudaStreamSynchronize(static_cast<cudaStream_t>(exec.stream));
    fwd = UploadedSchedule{};
    bwd = UploadedSchedule{};
    dq_accum.reset();
    delta.reset();
    dq_first.reset();
    dq_ready.reset();
    split_tiles.reset();
    dkv_accum.reset();
    part_o.reset();
    part_lse.reset();
  }
};

void check_tensor(const lca_tensor& t, const char* name, const lca_problem& pr, int64_t tokens, int64_t heads) {
  require(t.data != nullptr, LCA_ERR_INVALID_ARGUMENT, std::string(name) + ": null data");
  require(t.dtype == pr.dtype, LCA_ERR_INVALID_ARGUMENT,
          std::string(name) + ": dtype " + lca::dtype_name(t.dtype) + ", the problem's is " + lca::dtype_name(pr.dtype));
  require(t.shape[0] == tokens && t.shape[1] == heads && t.shape[2] == pr.head_dim, LCA_ERR_INVALID_ARGUMENT,
          std::string(name) + ": shape does not match the problem");
  require(t.stride[2] == 1 && t.stride[0] % 8 == 0 && t.stride[1] % 8 == 0 &&
              reinterpret_cast<uintptr_t>(t.data) % 16 == 0,
          LCA_ERR_UNSUPPORTED,
          std::string(name) + ": flex_flash needs contiguous head_dim, token and head strides that are multiples "
                              "of 8 elements and 16-byte aligned data");
}

void check_lse(const lca_tensor& t, const lca_problem& pr) {
  require(t.data != nullptr && t.dtype == LCA_DTYPE_F32 && t.shape[0] == pr.heads_q && t.shape[1] == pr.seqlen_q,
          LCA_ERR_INVALID_ARGUMENT, "lse: expected fp32 {heads_q, seqlen_q, 1}");
}

}  // namespace

class FlexFlash final : public lca::IKernel {
 public:
  // The options (options.hpp) are read once, here: a bad one fails create() with the allowed values.
  explicit FlexFlash(const lca_host_info& host)
      : options_(parse_options(host.config_json != nullptr ? host.config_json : "")) {}

  std::unique_ptr<lca::IPlan> plan(const lca_problem& pr, const lca_mask& mask, const lca_exec& exec) override {
    require(pr.device_type == LCA_DEVICE_CUDA, LCA_ERR_UNSUPPORTED, "flex_flash runs on CUDA devices only");
    require(pr.dtype == LCA_DTYPE_BF16 || pr.dtype == LCA_DTYPE_F16, LCA_ERR_UNSUPPORTED,
            std::string("flex_flash: dtype ") + lca::dtype_name(pr.dtype) + " (bf16, f16)");
    require(pr.head_dim == 64 || pr.head_dim == 128, LCA_ERR_UNSUPPORTED,
            "flex_flash: head_dim " + std::to_string(pr.head_dim) + " (64, 128)");
    require(pr.heads_q > 0 && pr.heads_kv > 0 && pr.heads_q % pr.heads_kv == 0, LCA_ERR_INVALID_ARGUMENT,
            "heads_q must be a positive multiple of heads_kv");
    require(pr.seqlen_q > 0 && pr.seqlen_k > 0, LCA_ERR_INVALID_ARGUMENT, "sequence lengths must be positive");
    require(pr.seqlen_q < (int64_t{1} << 31) / pr.heads_q, LCA_ERR_UNSUPPORTED,
            "flex_flash: seqlen_q x heads_q must stay below 2^31");
    lca::validate_mask(mask, pr.seqlen_q, pr.seqlen_k);
    auto plan = std::make_unique<FlexPlan>();
    plan->problem = pr;
    plan->options = options_;
    const Options& o = options_;
    // The two schedules are independent host work (seconds each for a 512K block-sparse mask):
    // the backward's is built on a second thread while this one builds the forward's. The
    // future of std::async waits for its thread when destroyed, so a throw here cannot leave it
    // reading the mask after plan() returns.
    const double fwd_speedup = wide_tile_speedup(true, o), bwd_speedup = wide_tile_speedup(false, o);
    const BwdPairing pairing = backward_pairing(o);
    const int32_t heads_kv = static_cast<int32_t>(pr.heads_kv);
    const int32_t together = backward_kv_heads_together(o, heads_kv);
    const BwdSplit split = backward_split(o);
    const BwdLocal local = backward_local(o);
    const BwdMatch match = backward_match(o);
    int device = 0, sms = 0;
    LCA_FLEX_CUDA_CHECK(cudaGetDevice(&device));
    LCA_FLEX_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    int l2_bytes = 0;
    LCA_FLEX_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
    const int32_t rule_places = range_places_for(l2_bytes, static_cast<int32_t>(pr.head_dim));
    struct Bwd {
      TileSchedule sched;
      BackwardBlocks blocks;
      std::vector<int32_t> split_tiles;  // the split key tiles by slot (place_split_walks)
      std::vector<int32_t> dq_first;     // dq_first_writers' key tile a query tile, or empty
      double dispatch = 0.0;             // dispatch_over_spread of the blocks as they go out
    };
    auto bwd = std::async(std::launch::async, [&mask, &pr, &o, bwd_speedup, pairing, heads_kv, together, split, local, match,
                                               sms, rule_places] {
      const int32_t group = static_cast<int32_t>(pr.heads_q / pr.heads_kv);
      Bwd b{default_backward_schedule(mask, bwd_speedup, group, heads_kv, sms, match), {}, {}};
      b.blocks = default_backward_blocks(b.sched, heads_kv, group, sms, pairing, local, split, together, o.bwd_ranges,
                                         rule_places);
      b.split_tiles = place_split_walks(b.sched, b.blocks.items);  // the parts' own row tiles, if any
      if (const DqFirst first = backward_dq_first(o, b.sched, b.blocks.items, group); first != DqFirst::kOff) {
        FirstWriters w =
            dq_first_writers(b.sched, b.blocks.items, heads_kv, group, b.blocks.kv_heads_together, sms,
                             first == DqFirst::kTimed);
        if (!w.key_tile.empty()) {
          b.blocks.items = std::move(w.items);
          b.dq_first = std::move(w.key_tile);
        }
      }
      b.dispatch = dispatch_over_spread(b.blocks.items, heads_kv, group, sms, b.blocks.kv_heads_together);
      return b;
    });
    const auto heads_q = static_cast<int32_t>(pr.heads_q);
    // Each forward schedule with the heads its blocks go out together in (the "fwd_order" option,
    // else forward_heads_together's rule).
    auto with_order = [&](TileSchedule s) {
      s.heads_together = o.fwd_order == 0 ? forward_heads_together(s, heads_q, sms) : forced_heads_together(o.fwd_order, heads_q);
      return s;
    };
    TileSchedule fwd = with_order(build_adaptive_schedule(mask, /*by_query=*/true, kFwdRows, fwd_speedup));
    const auto group = static_cast<int32_t>(pr.heads_q / pr.heads_kv);
    if (fwd.tile_rows == kFwdRows && pair_forward(o, idle_share(fwd), mean_tiles(fwd), fwd.max_tiles, group))
      fwd = with_order(build_schedule(mask, /*by_query=*/true, kTile));
    else if (const auto d = static_cast<int32_t>(pr.head_dim);
             fwd.tile_rows == kFwdRows && wg3_forward(o, d, idle_share(fwd), mean_tiles(fwd), fwd.max_tiles, group)) {
      // Three consumers on 192-row tiles: asked for (the "forward" option), or by default at head
      // dim 64 where they add few cells to the 128-row tiles', and at 128 where their grid keeps the
      // gain (wg3_grid_keeps_gain).
      TileSchedule rows192 = with_order(build_schedule(mask, /*by_query=*/true, 3 * kTile));
      const bool keeps = wg3_grid_keeps_gain(d, rows192, fwd, heads_q, sms);
      if (wg3_forward_forced(o, d) || keeps) fwd = std::move(rows192);
    }
    plan->fwd_row_tiles = fwd.row_tiles;
    plan->fwd_busy_tiles = fwd.busy_tiles;
    plan->fwd_mean_tiles = static_cast<float>(mean_tiles(fwd));
    // Split-KV: the parts by forward_split_parts' rule, or the "fwd_split" option's.
    if (const ForwardChoice grid = split_grid_kernel(o, static_cast<int32_t>(pr.head_dim), fwd, group);
        grid != ForwardChoice::sm90_auto) {
      const std::vector<int32_t> parts = o.fwd_split > 1 ? forced_split_parts(o, fwd)
                                                         : forward_split_parts(fwd, heads_q, sms, static_cast<int32_t>(pr.head_dim));
      if (most_parts(parts) > 1) {
        // The split's heads order as forward_split_parts predicted it, unless fwd_order forces one.
        const int32_t forced_together = fwd.heads_together;
        fwd = split_schedule(fwd, parts, heads_q, sms);
        if (o.fwd_order != 0) fwd.heads_together = forced_together;
        plan->fwd_splits = most_parts(parts);
        plan->fwd_grid = grid;
        std::vector<int32_t> part_of;  // FwdParams::part_of: {row tile, place} a row tile of fwd
        part_of.reserve(2 * fwd.part_row.size());
        for (size_t v = 0; v < fwd.part_row.size(); ++v) part_of.insert(part_of.end(), {fwd.part_row[v], fwd.part_place[v]});
        plan->part_of = upload(part_of, exec, "split-KV's row tiles and places");
        plan->split_rows = upload(fwd.split_rows, exec, "split-KV's split row tiles");
        plan->split_first = upload(fwd.split_first, exec, "split-KV's first places");
        plan->fwd_split_rows = static_cast<int32_t>(fwd.split_rows.size());
        plan->fwd_places = fwd.split_first.empty() ? 0 : fwd.split_first.back();
      }
    }
    plan->fwd = upload(fwd, exec);
    plan->fwd.counter = upload(std::vector<int32_t>{0}, exec, "the persistent forward's tile counter");
    const Bwd b = bwd.get();
    plan->bwd = upload(b.sched, exec, b.blocks.items);
    plan->bwd.kv_heads_together = b.blocks.kv_heads_together;
    plan->bwd.range_places = b.blocks.range_places;
    // A place per kv head (the rotated walks), and the first writers' block ticket.
    plan->bwd.counter = upload(std::vector<int32_t>(static_cast<size_t>(pr.heads_kv) + 1, 0), exec,
                               "the rotated backward walks' places");
    plan->dq_first = upload(b.dq_first, exec, "dQ's first writers");
    plan->split_count = static_cast<int32_t>(b.split_tiles.size());
    plan->bwd_dispatch = static_cast<float>(b.dispatch);
    plan->split_tiles = upload(b.split_tiles, exec, "the split backward walks' key tiles");
    LCA_FLEX_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(exec.stream)));  // host vectors die here
    return plan;
  }

  void forward(lca::IPlan& base, const lca_fwd_args& a, const lca_exec& exec) override {
    auto& plan = static_cast<FlexPlan&>(base);
    const lca_problem& pr = plan.problem;
    check_tensor(a.q, "q", pr, pr.seqlen_q, pr.heads_q);
    check_tensor(a.k, "k", pr, pr.seqlen_k, pr.heads_kv);
    check_tensor(a.v, "v", pr, pr.seqlen_k, pr.heads_kv);
    check_tensor(a.o, "o", pr, pr.seqlen_q, pr.heads_q);
    check_lse(a.lse, pr);
    FwdParams p{};
    p.q = a.q.data;
    p.k = a.k.data;
    p.v = a.v.data;
    p.o = a.o.data;
    p.lse = static_cast<float*>(a.lse.data);
    p.q_tok = a.q.stride[0], p.q_head = a.q.stride[1];
    p.k_tok = a.k.stride[0], p.k_head = a.k.stride[1];
    p.v_tok = a.v.stride[0], p.v_head = a.v.stride[1];
    p.o_tok = a.o.stride[0], p.o_head = a.o.stride[1];
    p.lse_head = a.lse.stride[0], p.lse_tok = a.lse.stride[1];
    p.seqlen_q = pr.seqlen_q, p.seqlen_k = pr.seqlen_k;
    p.heads_q = pr.heads_q, p.group = pr.heads_q / pr.heads_kv;
    p.scale_log2 = pr.softmax_scale * 1.4426950408889634f;
    p.sched = plan.fwd.view();
    p.forward = plan.options.forward;
    p.sum = plan.options.fwd_sum;
    if (plan.fwd_splits > 1) {
      // A place a part of a split row tile: its rows' fp32 O and LSE, every head.
      const size_t rows = static_cast<size_t>(plan.fwd_places) * static_cast<size_t>(pr.heads_q) *
                          static_cast<size_t>(plan.fwd.tile_rows);
      if (plan.part_o.empty()) {
        plan.part_o = DeviceBuffer(exec.allocator, rows * pr.head_dim * sizeof(float), "the forward's split parts' O");
        plan.part_lse = DeviceBuffer(exec.allocator, rows * sizeof(float), "the forward's split parts' LSE");
      }
      p.forward = plan.fwd_grid;
      p.part_of = plan.part_of.as<int32_t>();
      p.split_rows = plan.split_rows.as<int32_t>();
      p.split_first = plan.split_first.as<int32_t>();
      p.split_count = plan.fwd_split_rows;
      p.part_o = plan.part_o.as<float>();
      p.part_lse = plan.part_lse.as<float>();
    }
    launch_forward(pr.dtype, pr.head_dim, p, exec.stream);
  }

  void backward(lca::IPlan& base, const lca_bwd_args& a, const lca_exec& exec) override {
    auto& plan = static_cast<FlexPlan&>(base);
    const lca_problem& pr = plan.problem;
    check_tensor(a.q, "q", pr, pr.seqlen_q, pr.heads_q);
    check_tensor(a.k, "k", pr, pr.seqlen_k, pr.heads_kv);
    check_tensor(a.v, "v", pr, pr.seqlen_k, pr.heads_kv);
    check_tensor(a.o, "o", pr, pr.seqlen_q, pr.heads_q);
    check_tensor(a.d_o, "d_o", pr, pr.seqlen_q, pr.heads_q);
    check_tensor(a.dq, "dq", pr, pr.seqlen_q, pr.heads_q);
    check_tensor(a.dk, "dk", pr, pr.seqlen_k, pr.heads_kv);
    check_tensor(a.dv, "dv", pr, pr.seqlen_k, pr.heads_kv);
    check_lse(a.lse, pr);
    const size_t rows = static_cast<size_t>(pr.seqlen_q) * static_cast<size_t>(pr.heads_q);
    if (plan.dq_accum.empty()) {
      plan.dq_accum = DeviceBuffer(exec.allocator, rows * pr.head_dim * sizeof(float), "the fp32 dQ accumulator");
      plan.delta = DeviceBuffer(exec.allocator, rows * sizeof(float), "delta = rowsum(dO * O)");
      if (plan.split_count > 0)
        plan.dkv_accum = DeviceBuffer(
            exec.allocator,
            2 * sizeof(float) * static_cast<size_t>(dkv_accum_floats(plan.split_count, pr.heads_kv, pr.head_dim)),
            "the split walks' fp32 dK and dV");
      if (!plan.dq_first.empty()) {
        const size_t flags = static_cast<size_t>(pr.heads_q) * static_cast<size_t>((pr.seqlen_q + kTile - 1) / kTile);
        plan.dq_ready = DeviceBuffer(exec.allocator, flags * sizeof(uint32_t), "dQ's first writers' flags");
        LCA_FLEX_CUDA_CHECK(cudaMemsetAsync(plan.dq_ready.as<void>(), 0, flags * sizeof(uint32_t),
                                            static_cast<cudaStream_t>(exec.stream)));
      }
    }
    BwdParams p{};
    p.q = a.q.data, p.k = a.k.data, p.v = a.v.data, p.o = a.o.data, p.d_o = a.d_o.data;
    p.lse = static_cast<const float*>(a.lse.data);
    p.dq = a.dq.data, p.dk = a.dk.data, p.dv = a.dv.data;
    p.dq_accum = plan.dq_accum.as<float>();
    p.delta = plan.delta.as<float>();
    p.split_count = plan.split_count;
    p.split_tiles = plan.split_tiles.as<int32_t>();
    p.dkv_accum = plan.dkv_accum.as<float>();
    p.q_tok = a.q.stride[0], p.q_head = a.q.stride[1];
    p.k_tok = a.k.stride[0], p.k_head = a.k.stride[1];
    p.v_tok = a.v.stride[0], p.v_head = a.v.stride[1];
    p.o_tok = a.o.stride[0], p.o_head = a.o.stride[1];
    p.do_tok = a.d_o.stride[0], p.do_head = a.d_o.stride[1];
    p.dq_tok = a.dq.stride[0], p.dq_head = a.dq.stride[1];
    p.dk_tok = a.dk.stride[0], p.dk_head = a.dk.stride[1];
    p.dv_tok = a.dv.stride[0], p.dv_head = a.dv.stride[1];
    p.lse_head = a.lse.stride[0], p.lse_tok = a.lse.stride[1];
    p.seqlen_q = pr.seqlen_q, p.seqlen_k = pr.seqlen_k;
    p.heads_q = pr.heads_q, p.heads_kv = pr.heads_kv, p.group = pr.heads_q / pr.heads_kv;
    p.scale = pr.softmax_scale;
    p.scale_log2 = pr.softmax_scale * 1.4426950408889634f;
    p.sched = plan.bwd.view();
    p.dq_first = plan.dq_first.empty() ? nullptr : plan.dq_first.as<int32_t>();
    p.dq_ready = plan.dq_ready.as<uint32_t>();
    if (++plan.dq_call == 0) plan.dq_call = 1;  // the flags start at 0: never a call's number
    p.dq_call = plan.dq_call;
    p.backward = plan.options.backward;
    p.dv_first = plan.options.bwd_dv_first == Switch::kOn;
    launch_backward(pr.dtype, pr.head_dim, p, exec.stream);
  }

 private:
  Options options_;
};

}  // namespace lca_flex_flash

LCA_EXPORT_KERNEL(lca_flex_flash::FlexFlash, "flex_flash", "0.1.0", /*has_backward=*/true)
