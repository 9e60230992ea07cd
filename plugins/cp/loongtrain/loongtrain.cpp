// loongtrain: LoongTrain's 2D attention. head_degree ranks share heads (Ulysses all-to-all);
// the cp = W / head_degree context ranks run a double ring: inner rings of window_size ranks
// pass KV among themselves, then one outer step moves KV to the next window. docs/cp.md maps
// this to the paper.
#include "engine.hpp"

#include <algorithm>

namespace lca::cp {

class LoongTrain final : public EngineStrategy {
 public:
  explicit LoongTrain(const lca_host_info&) : EngineStrategy("loongtrain") {}
  EngineOptions choose(const nlohmann::json& j, const Comm& world, const lca_problem& p) override {
    return choose_loongtrain(j, world.size(), world.local_size(), p);
  }
};

}  // namespace lca::cp

LCA_EXPORT_CP_STRATEGY(lca::cp::LoongTrain, "loongtrain", "0.1.0")
