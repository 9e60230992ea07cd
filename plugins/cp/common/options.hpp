// What each CP strategy plugin runs for its options and world: the engine's configuration
// (head degree, context mode, zigzag, window, chunks), with the options' checks. Used by the
// strategy plugins' choose() and by the scaling model (core/model), so both see one answer.
// Rule: pure functions of (options, world size, ranks a node, heads); refusals throw lca::Error.
#pragma once

#include "balance.hpp"
#include "layout.hpp"

#include <lca/error.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

namespace lca::cp {

enum class ContextMode { ring, allgather, groupcast };

struct EngineOptions {
  int head_degree = 1;  // u: Ulysses members per head group
  bool zigzag = false;  // load-balanced chunks across context groups
  ContextMode mode = ContextMode::ring;
  int window = 0;       // double ring: members per inner ring (0: a single ring)
  // Group-cast (mode groupcast): the sequence in cp * chunks_per_group chunks dealt out by mask
  // area (balance.hpp), remote KV fetched in remote_stages stages after the local one.
  int chunks_per_group = 8;  // balanced: 0 where left to the mask (auto_chunks, balance.hpp)
  int remote_stages = 1;
  BalanceBy balance_by = BalanceBy::cells;
  // Group-cast: fetch every remote chunk first and compute the own and fetched KV in one kernel call
  // (no overlap, no merge): one grid of more blocks where a call per stage leaves SMs idle. Per pass;
  // choose_balanced sets the backward's by default where the ranks share a node.
  bool one_call_fwd = false, one_call_bwd = false;
};

// Reads an integer option, refusing other types with the option's name.
inline int int_option(const nlohmann::json& j, const char* key, int fallback) {
  if (!j.contains(key)) return fallback;
  require(j[key].is_number_integer(), LCA_ERR_INVALID_ARGUMENT,
          std::string("option \"") + key + "\" must be an integer, got " + j[key].dump());
  return j[key].get<int>();
}

inline bool bool_option(const nlohmann::json& j, const char* key, bool fallback) {
  if (!j.contains(key)) return fallback;
  require(j[key].is_boolean(), LCA_ERR_INVALID_ARGUMENT,
          std::string("option \"") + key + "\" must be true or false, got " + j[key].dump());
  return j[key].get<bool>();
}

inline EngineOptions choose_ulysses(const nlohmann::json& j, int W, int local_size, const lca_problem& p) {
  (void)j, (void)W, (void)local_size, (void)p;  // one signature for every strategy
  const std::string why = head_degree_problem(W, p.heads_q, p.heads_kv);
  require(why.empty(), LCA_ERR_UNSUPPORTED,
          "ulysses shards heads over all " + std::to_string(W) + " ranks: " + why);
  EngineOptions o;
  o.head_degree = W;  // one context group: the context stage is a single local block
  return o;
}

inline EngineOptions choose_ring_p2p(const nlohmann::json& j, int W, int local_size, const lca_problem& p) {
  (void)j, (void)W, (void)local_size, (void)p;
  EngineOptions o;
  o.head_degree = 1;
  o.zigzag = bool_option(j, "zigzag", true);
  o.mode = ContextMode::ring;
  return o;
}

inline EngineOptions choose_ring_allgather(const nlohmann::json& j, int W, int local_size, const lca_problem& p) {
  (void)j, (void)W, (void)local_size, (void)p;
  EngineOptions o;
  o.head_degree = 1;
  o.zigzag = bool_option(j, "zigzag", true);
  o.mode = ContextMode::allgather;
  return o;
}

inline EngineOptions choose_usp(const nlohmann::json& j, int W, int local_size, const lca_problem& p) {
  (void)j, (void)W, (void)local_size, (void)p;
  EngineOptions o;
  o.head_degree = int_option(j, "ulysses_degree", 0);
  if (o.head_degree <= 0)
    o.head_degree = largest_head_degree(W, std::max(1, local_size), p.heads_q, p.heads_kv);
  require(W % o.head_degree == 0, LCA_ERR_UNSUPPORTED,
          "usp: ulysses_degree " + std::to_string(o.head_degree) + " does not divide the world size " +
              std::to_string(W));
  o.zigzag = bool_option(j, "zigzag", true);
  o.mode = ContextMode::ring;
  return o;
}

inline EngineOptions choose_loongtrain(const nlohmann::json& j, int W, int local_size, const lca_problem& p) {
  (void)j, (void)W, (void)local_size, (void)p;
  const int local = std::max(1, local_size);
  EngineOptions o;
  // Defaults: head parallelism inside a node, but never all of it (keep a context ring).
  o.head_degree = int_option(j, "head_degree", 0);
  if (o.head_degree <= 0)
    o.head_degree = largest_head_degree(W, std::max(1, std::min(local, W / 2)), p.heads_q, p.heads_kv);
  require(W % o.head_degree == 0, LCA_ERR_UNSUPPORTED,
          "loongtrain: head_degree " + std::to_string(o.head_degree) +
              " does not divide the world size " + std::to_string(W));
  const int cp = W / o.head_degree;
  // Defaults: an inner ring spans the context ranks of one node.
  o.window = int_option(j, "window_size", 0);
  if (o.window <= 0) {
    o.window = 1;
    for (int d = 1; d <= cp; ++d)
      if (cp % d == 0 && d <= std::max(1, local / o.head_degree)) o.window = d;
  }
  require(o.window <= cp && cp % o.window == 0, LCA_ERR_UNSUPPORTED,
          "loongtrain: window_size " + std::to_string(o.window) +
              " must divide the context degree " + std::to_string(cp));
  o.zigzag = bool_option(j, "zigzag", true);
  o.mode = ContextMode::ring;
  return o;
}

inline EngineOptions choose_balanced(const nlohmann::json& j, int W, int local_size, const lca_problem& p) {
  for (const auto& [key, value] : j.items())
    require(key == "head_degree" || key == "chunks_per_rank" || key == "stages" || key == "balance_by" ||
                key == "one_call",
            LCA_ERR_INVALID_ARGUMENT,
            "balanced: unknown option \"" + key +
                "\" (known: head_degree, chunks_per_rank, stages, balance_by, one_call)");
  EngineOptions o;
  o.mode = ContextMode::groupcast;
  o.head_degree = int_option(j, "head_degree", 1);
  require(o.head_degree >= 1 && W % o.head_degree == 0, LCA_ERR_UNSUPPORTED,
          "balanced: head_degree " + std::to_string(o.head_degree) + " must be >= 1 and divide the world size " +
              std::to_string(W));
  const std::string why = head_degree_problem(o.head_degree, p.heads_q, p.heads_kv);
  require(why.empty(), LCA_ERR_UNSUPPORTED, "balanced: " + why);
  // Absent or "auto": the count the mask calls for (auto_chunks), made explicit in the record by
  // resolve_chunks once the mask is known.
  o.chunks_per_group = 0;
  if (j.contains("chunks_per_rank") && !(j["chunks_per_rank"].is_string() && j["chunks_per_rank"] == "auto")) {
    require(j["chunks_per_rank"].is_number_integer(), LCA_ERR_INVALID_ARGUMENT,
            "balanced: chunks_per_rank must be an integer in 1..4096 or \"auto\", got " + j["chunks_per_rank"].dump());
    o.chunks_per_group = j["chunks_per_rank"].get<int>();
    require(o.chunks_per_group >= 1 && o.chunks_per_group <= 4096, LCA_ERR_INVALID_ARGUMENT,
            "balanced: chunks_per_rank must be in 1..4096 or \"auto\", got " + std::to_string(o.chunks_per_group));
  }
  if (j.contains("balance_by")) {
    const auto& v = j["balance_by"];
    require(v.is_string() && (v == "cells" || v == "tiles"), LCA_ERR_INVALID_ARGUMENT,
            "balanced: option \"balance_by\" must be \"cells\" or \"tiles\", got " + v.dump());
    o.balance_by = v == "tiles" ? BalanceBy::tiles : BalanceBy::cells;
  }
  o.remote_stages = int_option(j, "stages", 1);
  require(o.remote_stages >= 1, LCA_ERR_INVALID_ARGUMENT,
          "balanced: stages must be >= 1, got " + std::to_string(o.remote_stages));
  // Both passes compute in one call where every rank is on one node: over NVLink the fetch they
  // no longer overlap is short, and one grid keeps the SMs busy where a call a stage leaves them
  // idle. Measured on H200s: the backward up to 1.22x on document backwards, 2.2x on short-document
  // shared_question at 8:1, no loss beyond 3% (2 GPUs); the forward 0.94-1.80x, geomean 1.04 on
  // cp-balance and 1.15 on other seeds and lengths (4 GPUs; the losses, to 0.94, on
  // causal_blockwise). Across nodes the fetch crosses the network and the staged passes' overlap
  // wins (the scaling model: 0.75 against 0.66 on causal_document:prolong64k's backward at 16
  // GPUs); so does asking for "stages". docs/cp.md.
  o.one_call_bwd = o.one_call_fwd = !j.contains("stages") && W <= local_size;
  if (j.contains("one_call")) {
    const auto& v = j["one_call"];
    require(v.is_boolean() || (v.is_string() && (v == "fwd" || v == "bwd")), LCA_ERR_INVALID_ARGUMENT,
            "balanced: option \"one_call\" must be true, false, \"fwd\" or \"bwd\", got " + v.dump());
    o.one_call_fwd = v.is_boolean() ? v.get<bool>() : v == "fwd";
    o.one_call_bwd = v.is_boolean() ? v.get<bool>() : v == "bwd";
  }
  require(!(o.one_call_fwd && o.one_call_bwd && j.contains("stages")), LCA_ERR_INVALID_ARGUMENT,
          "balanced: one_call true computes every stage in one kernel call; drop \"stages\" or \"one_call\"");
  return o;
}

// The options, in the strategy's own vocabulary and every one explicit, that give `o` again through
// choose_strategy(name, ...) at the same world, node size and heads: what a CP record keeps as the
// configuration that ran (cp_config), so that a later change of a default does not change what the
// record says ran. Unknown names give null.
inline nlohmann::json explicit_options(const std::string& name, const EngineOptions& o) {
  if (name == "ulysses") return nlohmann::json::object();
  if (name == "ring_p2p" || name == "ring_allgather") return {{"zigzag", o.zigzag}};
  if (name == "usp") return {{"ulysses_degree", o.head_degree}, {"zigzag", o.zigzag}};
  if (name == "loongtrain") return {{"head_degree", o.head_degree}, {"window_size", o.window}, {"zigzag", o.zigzag}};
  if (name == "balanced") {
    const nlohmann::json chunks = o.chunks_per_group > 0 ? nlohmann::json(o.chunks_per_group) : nlohmann::json("auto");
    nlohmann::json j = {{"head_degree", o.head_degree},
                        {"chunks_per_rank", chunks},
                        {"balance_by", o.balance_by == BalanceBy::tiles ? "tiles" : "cells"}};
    if (o.one_call_fwd && o.one_call_bwd) {
      j["one_call"] = true;  // every stage in one call: "stages" does not apply (and is refused with it)
    } else {
      j["one_call"] = o.one_call_fwd ? nlohmann::json("fwd") : o.one_call_bwd ? nlohmann::json("bwd") : nlohmann::json(false);
      j["stages"] = o.remote_stages;
    }
    return j;
  }
  return nullptr;
}

// A record's configuration (explicit_options) with balanced's "auto" chunk count replaced by the
// count that ran on this mask over `world` ranks (auto_chunks); other records as they are.
inline void resolve_chunks(nlohmann::json& config, const lca_mask& mask, int world) {
  if (!config.is_object() || !config.contains("chunks_per_rank") || config["chunks_per_rank"] != "auto") return;
  const int u = config.value("head_degree", 1);
  const int64_t S = mask.seqlen_q;
  if (u < 1 || world % u != 0 || S < world / u) return;
  config["chunks_per_rank"] =
      auto_chunks(std::vector<lca_slice>(mask.slices, mask.slices + mask.num_slices), S, world / u);
}

// The configuration of the strategy `name` (a plugin name); throws for an unknown one.
inline EngineOptions choose_strategy(const std::string& name, const nlohmann::json& j, int W, int local_size,
                                     const lca_problem& p) {
  if (name == "ulysses") return choose_ulysses(j, W, local_size, p);
  if (name == "ring_p2p") return choose_ring_p2p(j, W, local_size, p);
  if (name == "ring_allgather") return choose_ring_allgather(j, W, local_size, p);
  if (name == "usp") return choose_usp(j, W, local_size, p);
  if (name == "loongtrain") return choose_loongtrain(j, W, local_size, p);
  if (name == "balanced") return choose_balanced(j, W, local_size, p);
  throw Error(LCA_ERR_INVALID_ARGUMENT, "unknown CP strategy '" + name +
                                            "' (known: ulysses, ring_p2p, ring_allgather, usp, loongtrain, balanced)");
}

}  // namespace lca::cp
