// The entry point of one torch_sdpa_* plugin; built three times, with LCA_PEER_NAME and
// LCA_PEER_BACKEND (flash, efficient or cudnn) set by CMake.
#include "torch_sdpa.hpp"

LCA_EXPORT_KERNEL(lca_torch_sdpa::Peer<lca_torch_sdpa::Backend::LCA_PEER_BACKEND>, LCA_PEER_NAME, "0.1.0", true)
