// ulysses: DeepSpeed-Ulysses sequence parallelism. Each rank holds a contiguous token shard;
// an all-to-all turns (my tokens, all heads) into (all tokens, heads / W), the lent kernel runs
// the whole mask on that head share, and a second all-to-all turns the output back.
#include "engine.hpp"

namespace lca::cp {

class Ulysses final : public EngineStrategy {
 public:
  explicit Ulysses(const lca_host_info&) : EngineStrategy("ulysses") {}
  EngineOptions choose(const nlohmann::json& j, const Comm& world, const lca_problem& p) override {
    return choose_ulysses(j, world.size(), world.local_size(), p);
  }
};

}  // namespace lca::cp

LCA_EXPORT_CP_STRATEGY(lca::cp::Ulysses, "ulysses", "0.1.0")
