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
    return choose_balanced(j, world.size(), world.local_size(), p);
  }
};

}  // namespace lca::cp

LCA_EXPORT_CP_STRATEGY(lca::cp::Balanced, "balanced", "0.1.0")
