// balanced: load-balanced context parallelism for masks whose work is not spread evenly along
// the sequence (documents, prefixes, shared questions). The sequence is cut into chunks; each
// context group gets the same number of chunks, chosen so that the largest group's share of the
// mask area is as small as the solver finds (balance.hpp); each group fetches only the KV chunks
// its rows touch and sends their dK/dV back to the owners, the transfers overlapping the local
// block's compute (context_stage.hpp, group-cast). Optional Ulysses inside (head_degree).
// docs/cp.md relates it to MagiAttention's dispatch and group-cast design.
#include "engine.hpp"

namespace lca::cp {

class Balanced final : public EngineStrategy {
 public:
  explicit Balanced(const lca_host_info&) : EngineStrategy("balanced") {}
  EngineOptions choose(const nlohmann::json& j, const Comm& world, const lca_problem& p) override {
    for (const auto& [key, value] : j.items())
      require(key == "head_degree" || key == "chunks_per_rank" || key == "stages", LCA_ERR_INVALID_ARGUMENT,
              "balanced: unknown option \"" + key + "\" (known: head_degree, chunks_per_rank, stages)");
    const int W = world.size();
    EngineOptions o;
    o.mode = ContextMode::groupcast;
    o.head_degree = int_option(j, "head_degree", 1);
    require(o.head_degree >= 1 && W % o.head_degree == 0, LCA_ERR_UNSUPPORTED,
            "balanced: head_degree " + std::to_string(o.head_degree) + " must be >= 1 and divide the world size " +
                std::to_string(W));
    const std::string why = head_degree_problem(o.head_degree, p.heads_q, p.heads_kv);
    require(why.empty(), LCA_ERR_UNSUPPORTED, "balanced: " + why);
    o.chunks_per_group = int_option(j, "chunks_per_rank", 8);
    require(o.chunks_per_group >= 1 && o.chunks_per_group <= 4096, LCA_ERR_INVALID_ARGUMENT,
            "balanced: chunks_per_rank must be in 1..4096, got " + std::to_string(o.chunks_per_group));
    o.remote_stages = int_option(j, "stages", 1);
    require(o.remote_stages >= 1, LCA_ERR_INVALID_ARGUMENT,
            "balanced: stages must be >= 1, got " + std::to_string(o.remote_stages));
    return o;
  }
};

}  // namespace lca::cp

LCA_EXPORT_CP_STRATEGY(lca::cp::Balanced, "balanced", "0.1.0")
