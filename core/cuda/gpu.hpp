// The host's GPU runtime: device discovery and description, the measuring allocator, streams,
// event timers, random inputs, L2 flushing and the two ceilings (GEMM rate, copy bandwidth).
// Used by core/run and core/check; plain C++ (no CUDA headers) so CPU-only code can include it.
// Rule: call nothing but device_count() in a build without CUDA; everything else throws there.
#pragma once

#include <lca/abi.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace lca::core::gpu {

// Number of visible CUDA devices; 0 when there is no driver or no GPU (never throws).
int device_count();

struct GpuInfo {
  int index = 0;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  int sm_clock_mhz = 0, mem_clock_mhz = 0;
  size_t total_mem = 0, l2_bytes = 0;
  int driver_version = 0, runtime_version = 0;  // CUDA's encoding: 13000 = 13.0
  std::string cudnn_version, nccl_version, cublas_version;  // "absent" when not loadable
  std::string pci_bus_id;  // "domain:bus:device", e.g. "0000:1b:00": one physical GPU
};

GpuInfo query(int index);

// cudaMalloc/cudaFree on one device, counting live and peak bytes, with an optional limit.
// A refused request is a status (LCA_ERR_OUT_OF_MEMORY), never an abort. Thread-safe.
// Caching (set_caching; lcahost's CUDA backend turns it on unless LCA_ALLOC_CACHE=0): a released
// block is kept for the next request of its exact size instead of going back to the driver, until
// trim() (each cell's reset_peak), a cudaMalloc that fails, or caching goes off; release still
// synchronizes the device, as cudaFree does. Live and peak bytes count what callers hold: a
// cached block counts for neither.
// Lifetime: must outlive every pointer it handed out and every plugin holding abi().
class DeviceAllocator {
 public:
  explicit DeviceAllocator(int device, size_t limit_bytes = 0);  // 0: no limit
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  lca_status allocate(size_t bytes, void** out);
  void release(void* ptr);

  size_t current_bytes() const;
  size_t peak_bytes() const;
  void reset_peak();  // peak := current; also trim()
  void trim();        // the cached blocks back to the driver
  void set_caching(bool on);  // off (the allocator's default; not lcahost's) also trims
  size_t cached_bytes() const;
  void set_limit(size_t limit_bytes);
  size_t limit() const;
  int device() const { return device_; }
  // Message of the last refused or failed request.
  std::string last_error() const;

  const lca_allocator* abi() const { return &abi_; }

 private:
  int device_;
  size_t limit_;
  size_t current_ = 0, peak_ = 0;
  std::unordered_map<void*, size_t> live_;
  bool caching_ = false;
  std::unordered_multimap<size_t, void*> cached_;  // released blocks by size (caching_)
  size_t cached_total_ = 0;
  void trim_locked();
  std::string last_error_;
  mutable std::mutex mutex_;
  lca_allocator abi_{};
};

// A non-blocking cudaStream_t on the current device, destroyed with the object.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* handle() const { return stream_; }  // cudaStream_t
  void synchronize() const;

 private:
  void* stream_ = nullptr;
};

// Two events around work on a stream; elapsed_ms() waits for the stop event.
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start(void* stream);
  void stop(void* stream);
  float elapsed_ms() const;

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

// Uniform in [-scale, scale], lca::core::random_uniform(seed, index) * scale rounded to dtype
// (the CPU backend draws the same values); never exactly zero.
// dtype: LCA_DTYPE_BF16, F16 or F32. Enqueued on stream (cudaStream_t, may be NULL). Element i
// gets index first_index + i.
void fill_random(void* dev_ptr, int64_t count, int32_t dtype, uint64_t seed, float scale,
                 void* stream, uint64_t first_index = 0);

// Writes a buffer twice the size of the current device's L2 so that no input stays cached.
void flush_l2(void* stream);

struct Ceilings {
  double gemm_tflops = 0;  // bf16 8192^3 through cuBLAS, fp32 accumulation, median of runs
  double copy_gbps = 0;    // device-to-device copy, bytes read + written
};

Ceilings measure_ceilings(int device);

}  // namespace lca::core::gpu
