// The worlds of a context-parallel command: control, backend and the lent communicator.
#include "cp_world.hpp"

#include "core/comm/nccl_comm.hpp"
#include "core/comm/staged_comm.hpp"
#include "core/cuda/gpu.hpp"

#if defined(LCA_HAVE_MPI)
#include "core/comm/mpi_comm.hpp"
#endif

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>

namespace lca::app {

std::vector<std::string> all_gather_strings(core::comm::Communicator& comm, const std::string& mine) {
  constexpr size_t kBytes = 512;  // 128 four-byte words travel raw
  char buf[kBytes] = {};
  std::memcpy(buf, mine.data(), std::min(mine.size(), kBytes - 4));
  std::vector<char> all(kBytes * static_cast<size_t>(comm.size()));
  comm.all_gather(buf, all.data(), kBytes / 4, LCA_DTYPE_F32, nullptr);
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r) out.emplace_back(all.data() + r * kBytes);
  return out;
}

#if defined(LCA_HAVE_MPI)
namespace {

// Collective: when any rank failed (a non-empty error), every rank throws the first failure,
// so that no rank is left waiting in a collective the failed one never reaches.
void agree(core::comm::Communicator& control, const std::string& error) {
  const auto errors = all_gather_strings(control, error);
  for (size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) throw std::runtime_error("rank " + std::to_string(r) + ": " + errors[r]);
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

struct CudaPlacement {
  int gpu = 0;
  std::string pci, name;
};

// This rank's GPU: --device cuda:N pins every rank to N; otherwise node-local rank % GPUs.
CudaPlacement place_on_gpu(const Options& opt, int local_rank) {
  const int count = core::cuda_device_count();
  if (count == 0)
    throw std::runtime_error((opt.cp_probe ? std::string("cp-probe") : "--cp-kernel " + opt.cp_kernel) +
                             " runs on CUDA but this rank sees no GPU "
                             "(check CUDA_VISIBLE_DEVICES and the driver, or use a cpu kernel such as cpu_reference)");
  CudaPlacement p;
  p.gpu = local_rank % count;
  if (!opt.device.empty() && opt.device != "auto") {
    if (opt.device.rfind("cuda:", 0) != 0)
      throw std::runtime_error("--device '" + opt.device + "' is not cuda:N (e.g. cuda:0)");
    p.gpu = std::atoi(opt.device.c_str() + 5);
    if (p.gpu < 0 || p.gpu >= count)
      throw std::runtime_error("--device " + opt.device + ": only " + std::to_string(count) + " GPU(s) visible");
  }
  const auto info = core::gpu::query(p.gpu);
  p.pci = info.pci_bus_id;
  p.name = info.name;
  return p;
}

}  // namespace

CpWorlds make_cp_worlds(std::unique_ptr<core::comm::Communicator> control_world, const Options& opt,
                        const std::string& device, const std::string& comm) {
  CpWorlds w;
  w.control = std::move(control_world);
  auto& control = *w.control;
  std::string where, name = "cpu";
  if (device == "cuda") {
    const int local_rank = core::comm::node_local_rank(opt.cp_topology);
    CudaPlacement place;
    std::string error;
    try {
      place = place_on_gpu(opt, local_rank);
      w.backend = core::make_cuda_backend(place.gpu);  // selects the device for this rank
    } catch (const std::exception& e) {
      error = e.what();
    }
    agree(control, error);
    const std::string gpu_key = host_name() + "/" + place.pci;
    if (comm == "nccl") {
      // NCCL refuses two ranks on one GPU; say so before it does, with the way out.
      const auto keys = all_gather_strings(control, gpu_key);
      std::map<std::string, int> first;
      for (int r = 0; r < static_cast<int>(keys.size()); ++r) {
        auto [it, fresh] = first.emplace(keys[r], r);
        if (!fresh)
          throw std::runtime_error("ranks " + std::to_string(it->second) + " and " + std::to_string(r) +
                                   " share GPU " + keys[r] + ": NCCL needs one GPU per rank; run with "
                                   "--cp-comm mpi to share a GPU, or launch fewer ranks");
      }
      std::string why;
      if (!core::comm::nccl_available(&why))
        error = "--cp-comm nccl: " + why + " (install NCCL 2.18+, or run with --cp-comm mpi)";
      agree(control, error);
      w.bootstrap = core::comm::make_mpi_world(opt.cp_topology);
      try {
        w.world = core::comm::make_nccl_world(*w.bootstrap);
      } catch (const std::exception& e) {
        error = e.what();
      }
      agree(control, error);
    } else {
      w.world = core::comm::make_staged_communicator(core::comm::make_mpi_world(opt.cp_topology));
    }
    where = "cuda:" + std::to_string(place.gpu) + " " + place.name + " (pci " + place.pci + ") on " + host_name() +
            ", node-local rank " + std::to_string(local_rank);
    name = place.name;
  } else {
    w.backend = core::make_cpu_backend();
    w.world = core::comm::make_mpi_world(opt.cp_topology);
    where = "cpu on " + host_name();
  }
  const std::string line = "rank " + std::to_string(control.rank()) + "/" + std::to_string(control.size()) + ": " +
                           where + ", communicator " + w.world->backend();
  w.lines = all_gather_strings(control, line);
  w.devices = all_gather_strings(control, name);
  w.hosts = all_gather_strings(control, host_name());
  return w;
}
#else
CpWorlds make_cp_worlds(std::unique_ptr<core::comm::Communicator>, const Options&, const std::string&,
                        const std::string&) {
  throw std::runtime_error("context parallelism needs MPI: this lcahost was built without it (install "
                           "libopenmpi-dev and rebuild)");
}
#endif

}  // namespace lca::app
