// Environment capture; see environment.hpp.
#include "core/run/environment.hpp"

#include "core/cuda/gpu.hpp"

#include <lca/abi.h>

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

namespace lca::core {
namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown";
}

std::string utc_now() {
  const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

nlohmann::json collect_environment(const Registry& registry) {
  nlohmann::json env;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  utsname u{};
  uname(&u);
  env["started"] = utc_now();
  env["host"] = host;
  env["os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  env["cpu"] = cpu_model();
  env["cpu_threads"] = std::thread::hardware_concurrency();
  env["lca_version"] = LCA_VERSION;
  env["git_revision"] = LCA_GIT_REVISION;
  env["abi"] = std::to_string(LCA_ABI_VERSION_MAJOR) + "." + std::to_string(LCA_ABI_VERSION_MINOR);
#if defined(__clang__)
  env["compiler"] = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  env["compiler"] = std::string("gcc ") + __VERSION__;
#endif
  env["plugin_dir"] = registry.dir().string();
  for (const auto& p : registry.plugins()) {
    nlohmann::json j = {{"name", p.name()}, {"kind", p.kind()}, {"version", p.manifest.version},
                        {"loaded", p.loaded}};
    if (!p.loaded) j["refusal"] = p.refusal;
    if (p.kind() == "kernel") {
      // The manifest's capabilities, so that a report can print them without the plugins.
      const auto& c = p.manifest.kernel;
      j["caps"] = {{"device", c.device}, {"min_cc", c.min_cc}, {"dtypes", c.dtypes},
                   {"head_dims", c.any_head_dim ? nlohmann::json("any") : nlohmann::json(c.head_dims)},
                   {"gqa", c.gqa}, {"backward", c.backward}, {"varlen", c.varlen},
                   {"masks", c.any_mask ? nlohmann::json("any") : nlohmann::json(c.masks)},
                   {"max_seqlen", c.max_seqlen}};
    }
    env["plugins"].push_back(j);
  }
  for (const auto& r : registry.refusals()) env["refused_manifests"].push_back(r.message);
  return env;
}

nlohmann::json collect_gpu_environment(int device, bool measure) {
  const auto g = gpu::query(device);
  nlohmann::json j = {{"index", g.index}, {"name", g.name}, {"sm_count", g.sm_count},
                      {"compute_capability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor)},
                      {"sm_clock_mhz", g.sm_clock_mhz}, {"mem_clock_mhz", g.mem_clock_mhz},
                      {"total_mem_bytes", g.total_mem}, {"l2_bytes", g.l2_bytes},
                      {"driver_version", g.driver_version}, {"cuda_runtime_version", g.runtime_version},
                      {"cudnn_version", g.cudnn_version}, {"nccl_version", g.nccl_version},
                      {"cublas_version", g.cublas_version}};
  if (measure) {
    const auto c = gpu::measure_ceilings(device);
    j["ceilings"] = {{"gemm_tflops", c.gemm_tflops}, {"copy_gbps", c.copy_gbps},
                     {"gemm", "bf16 8192^3 cuBLAS, fp32 accumulate, median"},
                     {"copy", "device-to-device, bytes read + written"}};
  }
  return j;
}

}  // namespace lca::core
