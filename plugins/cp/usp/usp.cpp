// usp: unified sequence parallelism. Ulysses inside groups of ulysses_degree consecutive ranks
// (intra-node by default), ring attention across the groups (zigzag balanced).
#include "engine.hpp"

#include <algorithm>

namespace lca::cp {

class Usp final : public EngineStrategy {
 public:
  explicit Usp(const lca_host_info&) : EngineStrategy("usp") {}
  EngineOptions choose(const nlohmann::json& j, const Comm& world, const lca_problem& p) override {
    const int W = world.size();
    EngineOptions o;
    o.head_degree = int_option(j, "ulysses_degree", 0);
    if (o.head_degree <= 0)
      o.head_degree = largest_head_degree(W, std::max(1, world.local_size()), p.heads_q, p.heads_kv);
    require(W % o.head_degree == 0, LCA_ERR_UNSUPPORTED,
            "usp: ulysses_degree " + std::to_string(o.head_degree) + " does not divide the world size " +
                std::to_string(W));
    o.zigzag = bool_option(j, "zigzag", true);
    o.mode = ContextMode::ring;
    return o;
  }
};

}  // namespace lca::cp

LCA_EXPORT_CP_STRATEGY(lca::cp::Usp, "usp", "0.1.0")
