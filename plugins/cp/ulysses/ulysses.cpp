// ulysses: DeepSpeed-Ulysses sequence parallelism. Each rank holds a contiguous token shard;
// an all-to-all turns (my tokens, all heads) into (all tokens, heads / W), the lent kernel runs
// the whole mask on that head share, and a second all-to-all turns the output back.
#include "engine.hpp"

namespace lca::cp {

class Ulysses final : public EngineStrategy {
 public:
  explicit Ulysses(const lca_host_info&) : EngineStrategy("ulysses") {}
  EngineOptions choose(const nlohmann::json&, const Comm& world, const lca_problem& p) override {
    const int W = world.size();
    const std::string why = head_degree_problem(W, p.heads_q, p.heads_kv);
    require(why.empty(), LCA_ERR_UNSUPPORTED,
            "ulysses shards heads over all " + std::to_string(W) + " ranks: " + why);
    EngineOptions o;
    o.head_degree = W;  // one context group: the context stage is a single local block
    return o;
  }
};

}  // namespace lca::cp

LCA_EXPORT_CP_STRATEGY(lca::cp::Ulysses, "ulysses", "0.1.0")
