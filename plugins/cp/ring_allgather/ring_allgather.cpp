// ring_allgather: all-gather of KV (Llama 3 style). Each rank attends its queries to the whole
// KV in one kernel call; in backward the dK/dV of every block go back to their owners with an
// all-to-all and add up there in fp32 (a reduce-scatter that allows uneven shards).
#include "engine.hpp"

namespace lca::cp {

class RingAllGather final : public EngineStrategy {
 public:
  explicit RingAllGather(const lca_host_info&) : EngineStrategy("ring_allgather") {}
  EngineOptions choose(const nlohmann::json& j, const Comm& world, const lca_problem& p) override {
    return choose_ring_allgather(j, world.size(), world.local_size(), p);
  }
};

}  // namespace lca::cp

LCA_EXPORT_CP_STRATEGY(lca::cp::RingAllGather, "ring_allgather", "0.1.0")
