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
    const int W = world.size(), local = std::max(1, world.local_size());
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
};

}  // namespace lca::cp

LCA_EXPORT_CP_STRATEGY(lca::cp::LoongTrain, "loongtrain", "0.1.0")
