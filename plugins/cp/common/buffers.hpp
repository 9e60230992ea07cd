// Workspace and tensor plumbing for the CP strategies: host buffers from the host allocator,
// THD views, and copies between strided THD tensors and packed head blocks (CPU memory).
// Used by the strategy engine (engine.hpp, head_exchange.hpp, context_stage.hpp).
// Rule: every Buffer is freed through the allocator it came from, before the call returns.
#pragma once

#include <lca/abi.h>
#include <lca/error.hpp>
#include <lca/types.hpp>

#include <cstring>
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
  void zero() { if (data_) std::memset(data_, 0, bytes_); }

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

// Element pointer of a THD tensor (host memory).
inline char* at(const lca_tensor& t, int64_t row, int64_t head, int64_t col = 0) {
  return static_cast<char*>(t.data) +
         (row * t.stride[0] + head * t.stride[1] + col * t.stride[2]) * int64_t(dtype_size(t.dtype));
}

// Copies rows [row0, row0 + rows) x heads [head0, head0 + heads) of src into dst, which is
// packed [rows, heads, dim] of the same dtype.
inline void pack_heads(const lca_tensor& src, int64_t row0, int64_t rows, int64_t head0,
                       int64_t heads, void* dst) {
  const int64_t dim = src.shape[2];
  const size_t esz = dtype_size(src.dtype);
  char* out = static_cast<char*>(dst);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h, out += dim * esz) {
      if (src.stride[2] == 1) {
        std::memcpy(out, at(src, row0 + r, head0 + h), dim * esz);
      } else {
        for (int64_t d = 0; d < dim; ++d) std::memcpy(out + d * esz, at(src, row0 + r, head0 + h, d), esz);
      }
    }
}

// The inverse of pack_heads, converting from `src_dtype` to dst's dtype when they differ.
inline void unpack_heads(const void* src, int32_t src_dtype, const lca_tensor& dst, int64_t row0,
                         int64_t rows, int64_t head0, int64_t heads) {
  const int64_t dim = dst.shape[2];
  int64_t i = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < dim; ++d, ++i) {
        char* p = at(dst, row0 + r, head0 + h, d);
        if (src_dtype == dst.dtype) {
          const size_t esz = dtype_size(src_dtype);
          std::memcpy(p, static_cast<const char*>(src) + i * esz, esz);
        } else {
          store_from_double(p, dst.dtype, 0, load_as_double(src, src_dtype, i));
        }
      }
}

// Adds `count` elements of src (any dtype) into an fp32 accumulator.
inline void add_into(float* acc, const void* src, int32_t dtype, int64_t count) {
  if (dtype == LCA_DTYPE_F32) {
    const float* s = static_cast<const float*>(src);
    for (int64_t i = 0; i < count; ++i) acc[i] += s[i];
    return;
  }
  for (int64_t i = 0; i < count; ++i) acc[i] += static_cast<float>(load_as_double(src, dtype, i));
}

}  // namespace lca::cp
