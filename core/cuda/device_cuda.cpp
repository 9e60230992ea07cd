// Device discovery and description, streams and event timers (lca::core::gpu, CUDA builds).
#include "core/cuda/check.hpp"
#include "core/cuda/gpu.hpp"

#include <cublas_api.h>
#include <dlfcn.h>

#include <cstdio>

namespace lca::core::gpu {

int device_count() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: not sticky, but leave nothing behind
    return 0;
  }
  return count;
}

namespace {

// Opens the first library of `names` that loads; nullptr when none does.
void* open_any(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  return nullptr;
}

std::string cudnn_version() {
  void* lib = open_any({"libcudnn.so.9", "libcudnn.so"});
  if (lib == nullptr) return "absent";
  using fn_t = size_t (*)();
  auto fn = reinterpret_cast<fn_t>(dlsym(lib, "cudnnGetVersion"));
  std::string out = "absent";
  if (fn != nullptr) {
    const size_t v = fn();  // cuDNN 9: major*10000 + minor*100 + patch
    out = std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." +
          std::to_string(v % 100);
  }
  dlclose(lib);
  return out;
}

std::string nccl_version() {
  void* lib = open_any({"libnccl.so.2", "libnccl.so"});
  if (lib == nullptr) return "absent";
  using fn_t = int (*)(int*);
  auto fn = reinterpret_cast<fn_t>(dlsym(lib, "ncclGetVersion"));
  std::string out = "absent";
  int v = 0;
  if (fn != nullptr && fn(&v) == 0) {  // NCCL >= 2.9: major*10000 + minor*100 + patch
    out = std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." +
          std::to_string(v % 100);
  }
  dlclose(lib);
  return out;
}

std::string cublas_version() {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
    return "absent";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace

GpuInfo query(int index) {
  GpuInfo info;
  info.index = index;
  cudaDeviceProp prop{};
  LCA_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.total_mem = prop.totalGlobalMem;
  info.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  char pci[32];
  std::snprintf(pci, sizeof(pci), "%04x:%02x:%02x", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
  info.pci_bus_id = pci;
  int khz = 0;
  LCA_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, index));
  info.sm_clock_mhz = khz / 1000;
  LCA_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, index));
  info.mem_clock_mhz = khz / 1000;
  LCA_CUDA_CHECK(cudaDriverGetVersion(&info.driver_version));
  LCA_CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime_version));
  info.cudnn_version = cudnn_version();
  info.nccl_version = nccl_version();
  info.cublas_version = cublas_version();
  return info;
}

Stream::Stream() {
  cudaStream_t s = nullptr;
  LCA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
}

Stream::~Stream() {
  if (stream_ != nullptr) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void Stream::synchronize() const {
  LCA_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
}

EventTimer::EventTimer() {
  cudaEvent_t a = nullptr, b = nullptr;
  LCA_CUDA_CHECK(cudaEventCreate(&a));
  const cudaError_t err = cudaEventCreate(&b);
  if (err != cudaSuccess) {
    (void)cudaEventDestroy(a);
    LCA_CUDA_CHECK(err);
  }
  start_ = a;
  stop_ = b;
}

EventTimer::~EventTimer() {
  if (start_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  if (stop_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

void EventTimer::start(void* stream) {
  LCA_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(start_), static_cast<cudaStream_t>(stream)));
}

void EventTimer::stop(void* stream) {
  LCA_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(stop_), static_cast<cudaStream_t>(stream)));
}

float EventTimer::elapsed_ms() const {
  LCA_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)));
  float ms = 0;
  LCA_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_),
                                      static_cast<cudaEvent_t>(stop_)));
  return ms;
}

}  // namespace lca::core::gpu
