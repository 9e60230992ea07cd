// flex_flash's options: the kernel variants a kernel instance runs, read from its config_json
// (lca_host_info) at create(), so that one process can time two variants on the same inputs.
// Used by flex_flash.cpp (parse), plan() (choice.cu) and the launchers (through FwdParams/BwdParams).
// Rule: an absent option is the default, chosen by plan() from the schedule; a forcing value is
// taken as it is, and an unknown option or value is refused at create() naming the allowed ones.
#pragma once

#include <cstdint>
#include <string>

namespace lca_flex_flash {

// The forward's kernel (option "forward"): sm90_auto where absent. Each value names the kernel it
// forces, as plan_info names the kernel that ran (forward_sm90.cuh, sm90_forward_name).
enum class ForwardChoice : int32_t {
  sm90_auto,
  mma,
  sm90,
  sm90_overlap,
  sm90_pingpong,
  sm90_k128,
  sm90_k128_pingpong,
  sm90_persistent,
  sm90_pair,
  sm90_pair64,
  sm90_k128_wg3,
  sm90_overlap_wg3
};

// The backward's kernel (option "backward"): sm90_auto where absent (backward_sm90.cuh).
enum class BackwardChoice : int32_t {
  sm90_auto,
  mma,
  sm90,
  sm90_atomic,
  sm90_unpaired,
  sm90_paired,
  sm90_skip,
  sm90_noskip,
  sm90_rotate
};

// The plan's switches: absent is kAuto (plan()'s rule), else forced off or on.
enum class Switch : int32_t { kAuto, kOff, kOn };

struct Options {
  ForwardChoice forward = ForwardChoice::sm90_auto;
  BackwardChoice backward = BackwardChoice::sm90_auto;
  // "bwd_order": the backward's kv heads together; 0 where absent (plan()'s rule), -1 for all of them
  // (kv_heads_inner), else 1 (kv_heads_outer), 2 or 4 (kv_heads_2 / kv_heads_4).
  int32_t bwd_order = 0;
  Switch bwd_split = Switch::kAuto;  // "bwd_split": off | all (kOn)
  // "bwd_ranges": the backward's plain walks split by query ranges of this many (query head, query
  // tile) places (split_by_ranges, run by the skip kernel); -1 where absent (plan()'s rule), 0 never.
  int32_t bwd_ranges = -1;
  Switch bwd_match = Switch::kAuto;  // "bwd_match": off | on
  Switch bwd_local = Switch::kAuto;  // "bwd_local": off | on
  Switch dq_first = Switch::kAuto;   // "dq_first": off | on
  // "bwd_dv_first": on issues dV += P^T dO before the dS^T barrier in the Hopper backward without the
  // skip or rotation (BwdParams::dv_first); off (and absent) after it, as before.
  Switch bwd_dv_first = Switch::kAuto;
  // "fwd_order": the forward's heads that go out together (TileSchedule::heads_together); 0 where
  // absent (plan()'s rule, forward_heads_together), -1 for all of them (heads_inner), else 1
  // (heads_outer), 2, 4, 8 or 16 (heads_2 ... heads_16; the largest divisor of the heads at most that).
  int32_t fwd_order = 0;
  // "fwd_sum": how the Hopper forward's 128-key kernels make the softmax's row sums at head dim 64
  // (forward_sm90.cuh, kSum): -1 where absent (sm90_forward_sum's rule), 0 "fadd" (in the softmax),
  // 1 "mma" (P times ones on the tensor cores, beside P V), 2 "mma_beside" (that, the softmax beside
  // the P V; as 1 in sm90_k128_wg3).
  int32_t fwd_sum = -1;
  // "fwd_split": how the forward splits its row tiles along their keys (split_row_tiles): -1 where
  // absent or "auto" (forward_split_parts' rule), 1 "off" (no split), 2-4 "parts_2" ... "parts_4" (every row
  // tile in that many parts), 12-14 "long_2" ... "long_4" (the row tiles longer than the longest
  // one's 1/2 ... 1/4, each in parts of at most that length: long_walk_parts).
  int32_t fwd_split = -1;
};

// The options of a config_json object ("" or "{}": every default). Throws lca::Error
// (LCA_ERR_INVALID_ARGUMENT) for text that is not a JSON object, an unknown option or a value
// outside the option's list, naming the allowed ones.
Options parse_options(const std::string& config_json);

// The heads that go out together for the "fwd_order" option's value (not 0) with `heads` heads: every
// one for -1, else the largest divisor of heads at most the value.
int32_t forced_heads_together(int32_t fwd_order, int32_t heads);

// The option's value names, as parse_options takes them (and plan_info reports the kernels).
const char* forward_choice_name(ForwardChoice c);
const char* backward_choice_name(BackwardChoice c);
// BackwardChoice of a value name ("" for sm90_auto); throws lca::Error for an unknown one.
BackwardChoice backward_choice(const std::string& name);

}  // namespace lca_flex_flash
