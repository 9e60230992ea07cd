// usp: unified sequence parallelism. Ulysses inside groups of ulysses_degree consecutive ranks
// (intra-node by default), ring attention across the groups (zigzag balanced).
#include "engine.hpp"

#include <algorithm>

namespace lca::cp {

class Usp final : public EngineStrategy {
 public:
  explicit Usp(const lca_host_info&) : EngineStrategy("usp") {}
  EngineOptions choose(const nlohmann::json& j, const Comm& world, const lca_problem& p) override {
    return choose_usp(j, world.size(), world.local_size(), p);
  }
};

}  // namespace lca::cp

LCA_EXPORT_CP_STRATEGY(lca::cp::Usp, "usp", "0.1.0")
