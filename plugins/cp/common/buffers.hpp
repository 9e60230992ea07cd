// Workspace for the CP strategies: buffers from the host allocator (host memory on CPU problems,
// device memory on CUDA ones) and packed THD / LSE tensor descriptors. Contents move through
// device.hpp. Used by the strategy engine (engine.hpp, head_exchange.hpp, context_stage.hpp).
// Rule: every Buffer is freed through the allocator it came from, before the call returns.
#pragma once

#include <lca/abi.h>
#include <lca/error.hpp>
#include <lca/types.hpp>

#include <string>
#include <utility>

namespace lca::cp {

class Buffer {
 public:
  Buffer() = default;
  Buffer(const lca_allocator* allocator, size_t bytes) : allocator_(allocator), bytes_(bytes) {
    require(allocator_ != nullptr, LCA_ERR_INVALID_ARGUMENT, "lca_exec.allocator is null");
    if (bytes == 0) return;
    if (allocator_->alloc(allocator_->ctx, bytes, &data_) != LCA_OK || data_ == nullptr) {
      data_ = nullptr;
      throw Error(LCA_ERR_OUT_OF_MEMORY,
                  "cp: the allocator refused " + std::to_string(bytes) + " bytes of workspace");
    }
  }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(allocator_, o.allocator_);
      std::swap(data_, o.data_);
      std::swap(bytes_, o.bytes_);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  void* data() const { return data_; }
  template <class T>
  T* as() const { return static_cast<T*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void reset() {
    if (data_ != nullptr) allocator_->free(allocator_->ctx, data_);
    data_ = nullptr;
    bytes_ = 0;
  }
  const lca_allocator* allocator_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Packed THD tensor [tokens, heads, head_dim].
inline lca_tensor thd_tensor(void* data, int32_t dtype, int64_t tokens, int64_t heads, int64_t dim) {
  return lca_tensor{sizeof(lca_tensor), dtype, data, {tokens, heads, dim}, {heads * dim, dim, 1}};
}

// Packed LSE tensor [heads, tokens, 1], fp32.
inline lca_tensor lse_tensor(float* data, int64_t heads, int64_t tokens) {
  return lca_tensor{sizeof(lca_tensor), LCA_DTYPE_F32, data, {heads, tokens, 1}, {tokens, 1, 1}};
}

}  // namespace lca::cp
