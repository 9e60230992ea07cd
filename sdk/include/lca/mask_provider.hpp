// IMaskProvider: the C++ face of lca_mask_provider_vtable, OwnedMask (a mask that owns its
// arrays), and LCA_EXPORT_MASK_PROVIDER.
// Rule: a mask handed out by generate() stays valid and unchanged until it is released.
#pragma once

#include <lca/abi.h>
#include <lca/error.hpp>

#include <memory>
#include <string>
#include <vector>

namespace lca {

// A mask with its storage; view() is the ABI form and points into this object.
class OwnedMask {
 public:
  std::vector<lca_slice> slices;
  std::vector<int64_t> doc_offsets;          // empty when the pattern has no documents
  int64_t seqlen_q = 0, seqlen_k = 0;
  bool has_block_sparse = false;
  int32_t block_q = 0, block_k = 0;
  int64_t num_q_blocks = 0, num_k_blocks = 0;
  std::vector<int64_t> row_offsets, col_indices;  // CSR of the block-sparse view

  const lca_mask* view() {
    sparse_ = lca_block_sparse{sizeof(lca_block_sparse), block_q, block_k, num_q_blocks,
                               num_k_blocks, row_offsets.data(), col_indices.data()};
    mask_ = lca_mask{sizeof(lca_mask),
                     seqlen_q,
                     seqlen_k,
                     static_cast<int64_t>(slices.size()),
                     slices.data(),
                     has_block_sparse ? &sparse_ : nullptr,
                     doc_offsets.empty() ? 0 : static_cast<int64_t>(doc_offsets.size()) - 1,
                     doc_offsets.empty() ? nullptr : doc_offsets.data()};
    return &mask_;
  }

 private:
  lca_block_sparse sparse_{};
  lca_mask mask_{};
};

class IMaskProvider {
 public:
  virtual ~IMaskProvider() = default;
  // JSON array: [{"name", "category", "params": [{"name","type","default","doc"}]}]
  virtual std::string describe() = 0;
  virtual std::unique_ptr<OwnedMask> generate(const lca_mask_request& request) = 0;
};

namespace detail {

template <class Provider>
struct MaskProviderAdapter {
  struct Instance {
    std::unique_ptr<IMaskProvider> impl;
    std::string description;
  };
  static lca_status create(const lca_host_info* host, lca_mask_provider** out) {
    return guard([&] {
      require(host != nullptr && out != nullptr, LCA_ERR_INVALID_ARGUMENT, "create: null argument");
      auto inst = std::make_unique<Instance>();
      inst->impl = std::make_unique<Provider>(*host);
      *out = reinterpret_cast<lca_mask_provider*>(inst.release());
    });
  }
  static void destroy(lca_mask_provider* p) { delete reinterpret_cast<Instance*>(p); }
  static const char* describe(lca_mask_provider* p) {
    auto* inst = reinterpret_cast<Instance*>(p);
    if (guard([&] { inst->description = inst->impl->describe(); }) != LCA_OK) return "[]";
    return inst->description.c_str();
  }
  static lca_status generate(lca_mask_provider* p, const lca_mask_request* request,
                             lca_mask_handle** out) {
    return guard([&] {
      require(p && request && out, LCA_ERR_INVALID_ARGUMENT, "generate: null argument");
      *out = nullptr;
      auto mask = reinterpret_cast<Instance*>(p)->impl->generate(*request);
      *out = reinterpret_cast<lca_mask_handle*>(mask.release());
    });
  }
  static const lca_mask* get(lca_mask_handle* h) { return reinterpret_cast<OwnedMask*>(h)->view(); }
  static void release(lca_mask_provider*, lca_mask_handle* h) { delete reinterpret_cast<OwnedMask*>(h); }

  static const lca_mask_provider_vtable* vtable() {
    static const lca_mask_provider_vtable table{sizeof(lca_mask_provider_vtable), LCA_ABI_VERSION,
                                                &create, &destroy, &describe, &generate, &get,
                                                &release, &detail::last_error};
    return &table;
  }
};

}  // namespace detail
}  // namespace lca

#define LCA_EXPORT_MASK_PROVIDER(ProviderClass, NAME, VERSION)                               \
  extern "C" LCA_ABI_EXPORT const lca_plugin_descriptor* lca_plugin_entry(void) {            \
    static const lca_plugin_descriptor descriptor{                                           \
        sizeof(lca_plugin_descriptor), LCA_ABI_VERSION, LCA_KIND_MASK_PROVIDER, NAME, VERSION, \
        nullptr, ::lca::detail::MaskProviderAdapter<ProviderClass>::vtable(), nullptr};      \
    return &descriptor;                                                                      \
  }
