// Where the engine's buffers live and how they move: Device runs every copy, conversion, fill
// and LSE merge on host memory (CPU problems) or on the exec stream (CUDA problems); Lane is the
// second stream of the overlapped ring (a no-op on the CPU). Used by head_exchange.hpp and
// context_stage.hpp.
// Rule: the engine touches buffer contents only through Device; on CUDA nothing here waits for
// the device, so ordering between streams goes through Lane.
#pragma once

#include "device_kernels.hpp"
#include "lse_merge.hpp"

#include <lca/abi.h>
#include <lca/error.hpp>
#include <lca/types.hpp>

#include <cstring>
#include <string>

namespace lca::cp {

// Tensor t from element (row0, head0, 0) on, with its own strides.
inline View view_of(const lca_tensor& t, int64_t row0 = 0, int64_t head0 = 0) {
  char* p = static_cast<char*>(t.data) +
            (row0 * t.stride[0] + head0 * t.stride[1]) * static_cast<int64_t>(dtype_size(t.dtype));
  return View{p, t.dtype, t.stride[0], t.stride[1], t.stride[2]};
}

// Packed [n0, heads, dim] (or [n0, n1] with dim = 1).
inline View packed(const void* data, int32_t dtype, int64_t heads, int64_t dim) {
  return View{const_cast<void*>(data), dtype, heads * dim, dim, 1};
}

// `count` contiguous elements, as one row: copy(flat(a), flat(b), 1, 1, count).
inline View flat(const void* data, int32_t dtype, int64_t count) {
  return View{const_cast<void*>(data), dtype, count, count, 1};
}

// `offset` elements into a buffer of `dtype`.
inline void* advance(const void* data, int32_t dtype, int64_t offset) {
  return static_cast<char*>(const_cast<void*>(data)) + offset * static_cast<int64_t>(dtype_size(dtype));
}

#if defined(LCA_CP_WITH_CUDA)
inline constexpr bool kHaveCuda = true;
#else
inline constexpr bool kHaveCuda = false;
#endif

inline void require_cuda_build(const std::string& who) {
  require(kHaveCuda, LCA_ERR_UNSUPPORTED,
          who + ": this plugin was built without CUDA, so it runs CPU problems only; rebuild lca with "
                "nvcc found (LCA_WITH_CUDA=ON) to run CUDA problems");
}

class Device {
 public:
  Device(int32_t device_type, void* stream) : cuda_(device_type == LCA_DEVICE_CUDA), stream_(stream) {}
  bool cuda() const { return cuda_; }
  void* stream() const { return stream_; }

  // dst(i, j, l) = src(i, j, l), converted to dst's dtype; with add, dst (fp32) += src.
  void copy(const View& src, const View& dst, int64_t n0, int64_t n1, int64_t n2, bool add = false) const {
    if (n0 <= 0 || n1 <= 0 || n2 <= 0) return;
#if defined(LCA_CP_WITH_CUDA)
    if (cuda_) return cuda::copy3(src, dst, n0, n1, n2, add, stream_);
#endif
    host_copy(src, dst, n0, n1, n2, add);
  }
  void zero(void* data, size_t bytes) const {
#if defined(LCA_CP_WITH_CUDA)
    if (cuda_) return cuda::zero(data, bytes, stream_);
#endif
    if (bytes) std::memset(data, 0, bytes);
  }
  void fill(float* data, int64_t count, float value) const {
#if defined(LCA_CP_WITH_CUDA)
    if (cuda_) return cuda::fill_f32(data, count, value, stream_);
#endif
    std::fill(data, data + count, value);
  }
  // o [rows, heads, dim] (fp32, or o_dtype merged in place) and lse [heads, rows] (fp32) absorb
  // part (dtype) and part_lse; lse_ld > 0: the LSE rows are that far apart (a run of a longer LSE).
  void merge(float* o, float* lse, const void* part, int32_t dtype, const float* part_lse, int64_t rows,
             int64_t heads, int64_t dim) const {
    merge(o, LCA_DTYPE_F32, lse, part, dtype, part_lse, rows, heads, dim);
  }
  void merge(void* o, int32_t o_dtype, float* lse, const void* part, int32_t dtype, const float* part_lse,
             int64_t rows, int64_t heads, int64_t dim, int64_t lse_ld = 0) const {
#if defined(LCA_CP_WITH_CUDA)
    if (cuda_) return cuda::lse_merge(o, o_dtype, lse, part, dtype, part_lse, rows, heads, dim, lse_ld, stream_);
#endif
    lse_merge_add(o, o_dtype, lse, part, dtype, part_lse, rows, heads, dim, lse_ld);
  }

 private:
  static void host_copy(const View& src, const View& dst, int64_t n0, int64_t n1, int64_t n2, bool add) {
    const size_t ses = dtype_size(src.dtype), des = dtype_size(dst.dtype);
    const bool same = src.dtype == dst.dtype;
    const bool rows = (n2 == 1 || (src.s2 == 1 && dst.s2 == 1));
    for (int64_t i = 0; i < n0; ++i)
      for (int64_t j = 0; j < n1; ++j) {
        const char* s = static_cast<const char*>(src.data) + (i * src.s0 + j * src.s1) * int64_t(ses);
        char* d = static_cast<char*>(dst.data) + (i * dst.s0 + j * dst.s1) * int64_t(des);
        if (add) {
          float* acc = reinterpret_cast<float*>(d);
          for (int64_t l = 0; l < n2; ++l)
            acc[l * dst.s2] += src.dtype == LCA_DTYPE_F32
                                   ? reinterpret_cast<const float*>(s)[l * src.s2]
                                   : static_cast<float>(load_as_double(s, src.dtype, l * src.s2));
        } else if (same && rows) {
          std::memcpy(d, s, static_cast<size_t>(n2) * ses);
        } else if (same) {
          for (int64_t l = 0; l < n2; ++l) std::memcpy(d + l * dst.s2 * int64_t(des), s + l * src.s2 * int64_t(ses), ses);
        } else {
          for (int64_t l = 0; l < n2; ++l)
            store_from_double(d, dst.dtype, l * dst.s2, load_as_double(s, src.dtype, l * src.s2));
        }
      }
  }

  bool cuda_;
  void* stream_;
};

// The ring's communication stream on CUDA: KV blocks and travelling gradients move there while
// the exec stream computes. On the CPU every call is a no-op and stream() is NULL (communicator
// calls complete before returning). Lifetime: made in plan(), released with the plan.
class Lane {
 public:
  Lane() = default;
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;
  ~Lane() { release(); }

  void open(bool cuda) {
    if (!cuda) return;
#if defined(LCA_CP_WITH_CUDA)
    side_ = cuda::stream_create();
    for (void*& e : events_) e = cuda::event_create();
#endif
  }
  void release() {
#if defined(LCA_CP_WITH_CUDA)
    for (void*& e : events_) cuda::event_destroy(e), e = nullptr;
    cuda::stream_destroy(side_);
#endif
    side_ = nullptr;
  }
  void* stream() const { return side_; }

  // The side stream waits for everything enqueued on `main` so far.
  void side_waits(void* main) const {
#if defined(LCA_CP_WITH_CUDA)
    if (side_) cuda::event_record(events_[0], main), cuda::stream_wait(side_, events_[0]);
#endif
    (void)main;
  }
  // Marks the side stream's work so far as `slot` (0: KV blocks, 1: gradients)...
  void mark(int slot) const {
#if defined(LCA_CP_WITH_CUDA)
    if (side_) cuda::event_record(events_[1 + slot], side_), marked_[slot] = true;
#endif
    (void)slot;
  }
  // ...and `main` waits for the last mark of `slot`.
  void main_waits(int slot, void* main) const {
#if defined(LCA_CP_WITH_CUDA)
    if (side_ && marked_[slot]) cuda::stream_wait(main, events_[1 + slot]), marked_[slot] = false;
#endif
    (void)slot;
    (void)main;
  }
  // `main` waits for all side work: every engine call ends with it.
  void join(void* main) const {
#if defined(LCA_CP_WITH_CUDA)
    if (side_) cuda::event_record(events_[3], side_), cuda::stream_wait(main, events_[3]);
    marked_[0] = marked_[1] = false;
#endif
    (void)main;
  }

 private:
  void* side_ = nullptr;
  void* events_[4] = {nullptr, nullptr, nullptr, nullptr};
  mutable bool marked_[2] = {false, false};
};

}  // namespace lca::cp
