// The scaling model of context parallelism: per-GPU time and TFLOP/s of each CP strategy at a
// world size the machine at hand may not have, from the layouts and schedules the strategy
// plugins compute (plugins/cp/common), a local kernel's rate and the links' bandwidth and latency.
// Used by `lcahost cp-model` (tables, --validate) and its tests.
// Rule: exact in what moves and what is computed (every block pair's cells, every transfer's
// bytes); approximate only in how long each takes (rate, call cost, links, memory passes).
#pragma once

#include <lca/abi.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lca::core::model {

// A call's time on a link: latency + bytes / bandwidth, or, where a probe measured the pattern at
// several sizes, the measured times interpolated in bytes (and the bandwidth past the largest).
struct LinkCurve {
  double GBps = 0;        // per GPU and direction, bytes to other ranks (all GPUs at once)
  double latency_us = 0;  // a transfer's fixed cost
  std::vector<std::pair<double, double>> points;  // (bytes a GPU sends to other ranks, ms), bytes rising
  double ms(double bytes) const;
};

struct Link {
  // One peer out and one in at a time (a ring step): what the probe's ring measures.
  double GBps = 0;
  double latency_us = 0;
  std::vector<std::pair<double, double>> points;
  // Several peers at once (an all-to-all, a group-cast stage that fetches from several groups):
  // what the probe's all-to-all measures. GBps 0: not measured, the one-peer figures serve.
  LinkCurve fanout;
  // One rank sending to several peers while the others are idle: what the probe's one_to_all
  // measures. Where it is faster than the all-to-all (sockets through the host, off NVLink: a
  // connection, not the host, is the limit), a rank of an uneven several-peer call moves its bytes
  // at it, but not faster than the all-to-all moves the call's mean rank (what every rank loads at
  // once). GBps 0: not measured.
  LinkCurve lone;
  LinkCurve one() const { return {GBps, latency_us, points}; }
  // The transfer of `bytes` (the larger of sent and received) with `peers` peers at once.
  double ms(double bytes, int peers) const;
  // The same within a call whose ranks move `mean_bytes` on this link on average.
  double ms(double bytes, int peers, double mean_bytes) const;
};

struct Machine {
  int gpus_per_node = 8;
  // NVLink 4 on H100 SXM: 450 GB/s a direction in the data sheet; NCCL's ring reaches ~75%
  // (nccl-tests busbw ~360 GB/s on 8 GPUs); 300 keeps a margin for the p2p send/recv the
  // strategies use. InfiniBand NDR 400 Gb/s a GPU = 50 GB/s line rate; ~45 achieved.
  Link intra{300.0, 10.0};
  Link inter{45.0, 15.0};
  // The engine's fp32 merges, fills, packing and accumulations are memory-bound passes; H100's
  // HBM3 does 3.35 TB/s at peak and such copy-like kernels about 2.
  double hbm_GBps = 2000.0;
  // What a grouped call pays for each message a rank posts beyond one each way a peer (the probe's
  // pattern): the group-cast posts a K and a V message a segment, so a finer split pays more. 0:
  // none (the default until calibrated); cp-model --message-us sets it.
  double message_us = 0.0;
  // Streaming multiprocessors a GPU (H100 and H200 SXM: 132): the local kernel's blocks run on them.
  int sms = 132;
};

struct KernelRate {
  double tflops = 0;   // the local kernel's rate on this mask and pass
  double call_us = 0;  // fixed cost of one local kernel call (launch, tile scheduling, plan lookup)
  // > 0: a call takes its tiles' simulated time (kernel_tiles.hpp: tile_units) x unit_ms, the
  // time of a unit in this pass measured on one GPU (calibrate_tiles); else its FLOPs / tflops.
  double unit_ms = 0;
  // The forward's heads in the groups the kernel's plan picks (tile_units); false where the kernel
  // that gave the rates ran them heads outer (its records name no heads_together).
  bool heads_together = true;
  // The forward's row tiles split along their keys as the kernel's plan splits them (split-KV,
  // forward_split_parts: long walks alone); false where the kernel that gave the rates did not
  // split by default (its records name no split_row_tiles, or their options turn fwd_split off).
  bool fwd_split = false;
  // The L2 of the GPU that gave the rates (bytes; 0: an H100's 50 MiB): where the kernel's
  // backward splits its walks by query ranges (tile_units).
  int64_t l2_bytes = 0;
};

struct Problem {
  std::vector<lca_slice> slices;  // the global mask
  int64_t seqlen = 0;
  int heads_q = 0, heads_kv = 0, head_dim = 0;
  int dtype_bytes = 2;
  bool backward = false;
};

// A rank's time, and its exec stream's parts: total_ms = kernel_ms + memory_ms + exposed_ms.
struct RankTime {
  int rank = 0;
  double total_ms = 0;    // until the rank's last work ends
  double kernel_ms = 0;   // local kernel calls
  double area_ms = 0;     // the same calls' FLOPs at the one-GPU rate (KernelRate::tflops)
  double comm_ms = 0;     // transfers (overlapped or not)
  double exposed_ms = 0;  // the exec stream waiting: for a transfer, a collective or a slower peer
  double memory_ms = 0;   // the engine's memory-bound passes
  double flops = 0;       // of the local kernel calls
  int calls = 0;
};

// Where the slowest rank's time goes beyond the ideal (the one-GPU time / world), additive:
// slowest total = ideal + imbalance + tiles + exposed + memory.
struct Breakdown {
  double ideal_ms = 0;      // total FLOPs / world at the one-GPU rate: the mean rank's area_ms
  double imbalance_ms = 0;  // the slowest rank's area_ms - the mean rank's
  double tiles_ms = 0;      // the slowest rank's kernel_ms - area_ms: tiles cut by chunk and document
                            // boundaries, fixed costs a row tile and a call, waves, beyond the one-GPU mask's
  double exposed_ms = 0;    // the slowest rank's transfer time not hidden under its own work
  double memory_ms = 0;     // the slowest rank's merges, copies, fills
  double mean_total_ms = 0;  // over ranks: slowest total - this is the spread of whole-rank times
};

struct Prediction {
  std::string strategy;
  int world = 0;
  std::string refused;  // why the strategy cannot run this world (then nothing else is set)
  int head_degree = 1, context_degree = 1, window = 0;
  bool zigzag = false;
  double total_flops = 0;     // of the mask: 4 * area * head_dim * heads_q (x 2.5 backward)
  double time_ms = 0;         // the slowest rank's
  double tflops_per_gpu = 0;  // total_flops / world / time
  double share = 0;           // of the local kernel's rate
  RankTime slowest;
  std::vector<RankTime> ranks;
  Breakdown breakdown;
};

// Throws lca::Error (LCA_ERR_INVALID_ARGUMENT) for bad numbers and unknown strategies; a strategy
// that refuses the world (heads not divisible, ...) gives a Prediction with `refused` set.
Prediction predict(const Problem& problem, const std::string& strategy, const nlohmann::json& options, int world,
                   const Machine& machine, const KernelRate& rate);

// The six strategies, in the order tables list them.
const std::vector<std::string>& strategy_names();

// FLOPs of a mask's cells: 4 * area * head_dim * heads_q (x 2.5 backward).
double mask_flops(const Problem& problem);

// The time of a tile unit (KernelRate::unit_ms) from a one-GPU measurement of the whole problem:
// `measured_ms` / the problem's simulated tile units on `sms` SMs (l2_bytes: tile_units). 0 where the
// mask has no cells.
double calibrate_tiles(const Problem& one_gpu, double measured_ms, int sms, bool heads_together = true,
                       bool fwd_split = false, int64_t l2_bytes = 0);

}  // namespace lca::core::model
