// The CUDA half of the CP engine's data movement: strided copies with dtype conversion (pack,
// unpack, fp32 accumulation), fills, the fp32 LSE merge, and the streams and events of the
// overlapped ring. Declared in plain C++ so the engine's headers need no CUDA; defined in
// device_kernels.cu, built only with CUDA (LCA_CP_WITH_CUDA). Used by device.hpp.
// Rule: every function enqueues on the given cudaStream_t (passed as void*) and throws
// lca::Error(LCA_ERR_DEVICE) naming the failing call; nothing here synchronizes unless it says so.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lca::cp {

// Element (i, j, l) of a strided 3-D tensor lives at data + (i*s0 + j*s1 + l*s2) elements.
struct View {
  void* data = nullptr;
  int32_t dtype = 0;  // lca_dtype
  int64_t s0 = 0, s1 = 0, s2 = 1;
};

namespace cuda {

// dst(i, j, l) = src(i, j, l) converted to dst's dtype, or dst += src when add (dst fp32).
void copy3(const View& src, const View& dst, int64_t n0, int64_t n1, int64_t n2, bool add, void* stream);
void fill_f32(float* data, int64_t count, float value, void* stream);
void zero(void* data, size_t bytes, void* stream);
// o [rows, heads, dim] (o_dtype: fp32 to accumulate many parts, or the problem dtype to merge in
// place) and lse [heads, rows] fp32 absorb a partial result (part in dtype); lse_ld > 0: the
// LSE rows of both are that far apart (0: rows).
void lse_merge(void* o, int32_t o_dtype, float* lse, const void* part, int32_t dtype, const float* part_lse,
               int64_t rows, int64_t heads, int64_t dim, int64_t lse_ld, void* stream);

void* stream_create();           // non-blocking, highest priority, on the current device
void stream_destroy(void* stream);  // after synchronizing it
void* event_create();            // timing disabled
void event_destroy(void* event);
void event_record(void* event, void* stream);
// `stream` waits for the work `event` captured when it was last recorded.
void stream_wait(void* stream, void* event);

}  // namespace cuda
}  // namespace lca::cp
