// ring_p2p: ring attention. Each rank keeps its queries; KV blocks travel around the ring with
// send/recv (the next block posted before the current one is computed), partial outputs merge
// through LSE; in backward dK/dV accumulators travel with their blocks and return home.
#include "engine.hpp"

namespace lca::cp {

class RingP2P final : public EngineStrategy {
 public:
  explicit RingP2P(const lca_host_info&) : EngineStrategy("ring_p2p") {}
  EngineOptions choose(const nlohmann::json& j, const Comm& world, const lca_problem& p) override {
    return choose_ring_p2p(j, world.size(), world.local_size(), p);
  }
};

}  // namespace lca::cp

LCA_EXPORT_CP_STRATEGY(lca::cp::RingP2P, "ring_p2p", "0.1.0")
