// Where cells execute: memory through a tracking allocator, random inputs, copies to the host,
// and timing. The CPU backend lives in core/run; the CUDA one beside it when CUDA is built.
// Rule: every buffer a cell uses comes from allocator(), so that peak() is the cell's exact peak.
#pragma once

#include <lca/abi.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace lca::core {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual lca_device_type type() const = 0;
  virtual int device_index() const { return 0; }
  virtual std::string name() const = 0;

  // The tracking allocator handed to plugins (and used by the host for inputs and outputs).
  virtual const lca_allocator* allocator() = 0;
  virtual size_t current_bytes() const = 0;
  virtual size_t peak_bytes() const = 0;
  virtual void reset_peak() = 0;
  virtual void* stream() = 0;

  // Uniform in [-scale, scale], from (seed, index): the same values on every backend. Element i
  // of ptr gets index first_index + i, so a piece of a tensor can be drawn on its own (a CP
  // rank draws only its own tokens).
  virtual void fill_random(void* ptr, int64_t count, int32_t dtype, uint64_t seed, float scale,
                           uint64_t first_index = 0) = 0;
  // Bytes 0xFF everywhere (NaN for every float type): an unwritten output shows as NaN.
  virtual void poison(void* ptr, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void synchronize() = 0;
  // Makes a timed repeat start from cold caches where that matters (L2 on GPUs).
  virtual void flush_caches() {}

  // Milliseconds of fn() measured on the device (events on GPUs, a steady clock on CPUs).
  virtual double time_ms(const std::function<void()>& fn) = 0;
};

// Counter-based generator shared by all backends: value of element `index` for `seed`.
inline float random_uniform(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  // 24 random bits -> (-1, 1), never exactly 0.
  const float u = (static_cast<float>(z >> 40) + 0.5f) / 16777216.0f;
  return 2.0f * u - 1.0f;
}

// limit_bytes: 0 = no limit; a request beyond it is refused as out of memory.
std::unique_ptr<Backend> make_cpu_backend(size_t limit_bytes = 0);
// Whether the CUDA backend keeps released device blocks for the next request of their size, from
// LCA_ALLOC_CACHE's value: unset (nullptr) or "1" yes, "0" no; any other value throws
// std::invalid_argument naming the variable and both values.
bool alloc_cache_enabled(const char* value);
// Throws std::runtime_error when CUDA is not built in or the device does not exist.
std::unique_ptr<Backend> make_cuda_backend(int device_index);
// GPUs visible to this build (0 without CUDA or without a driver); never throws.
int cuda_device_count();
// Compute capability * 10 of a GPU (90 for sm_90).
int cuda_device_cc(int device_index);

}  // namespace lca::core
