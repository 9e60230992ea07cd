// lcahost --cp: context-parallel runs under mpirun. The local kernel's device decides where a
// run lives (as a single-device cell's kernel does): on the CPU every rank uses host buffers and
// MPI; on CUDA each rank takes GPU (node-local rank % GPUs) and lends the strategies NCCL
// (default) or MPI staged through pinned memory (--cp-comm mpi: ranks may share a GPU).
#include "commands.hpp"

#include "core/comm/nccl_comm.hpp"
#include "core/comm/staged_comm.hpp"
#include "core/cuda/gpu.hpp"
#include "core/mask/mask_source.hpp"
#include "core/matrix/spec.hpp"
#include "core/run/backend.hpp"
#include "core/run/cp_session.hpp"
#include "core/run/environment.hpp"

#if defined(LCA_HAVE_MPI)
#include "core/comm/mpi_comm.hpp"
#endif

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace lca::app {

#if defined(LCA_HAVE_MPI)
namespace {

// Every rank's string (up to 508 bytes), in rank order. Collective.
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
    throw std::runtime_error("--cp-kernel " + opt.cp_kernel + " runs on CUDA but this rank sees no GPU "
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
#endif

namespace {

// Before MPI and before any cell: a bad --cp-options is one refusal, not an error in every cell.
void check_cp_options(const std::string& text) {
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error("--cp-options '" + text + "' is not valid JSON (" + e.what() +
                             "); give an object, e.g. '{\"ulysses_degree\":2}'");
  }
  if (!parsed.is_object())
    throw std::runtime_error("--cp-options '" + text + "' is not a JSON object; give one, e.g. '{\"ulysses_degree\":2}'");
}

}  // namespace

int cmd_cp(Options opt, int* argc, char*** argv) {
  check_cp_options(opt.cp_options);
  if (!opt.resume.empty() && !opt.out.empty() && opt.out != opt.resume)
    throw std::runtime_error("--out " + opt.out + " and --resume " + opt.resume +
                             " name two files; --resume alone continues a run in its file");
#if !defined(LCA_HAVE_MPI)
  (void)opt;
  (void)argc;
  (void)argv;
  throw std::runtime_error("--cp needs MPI: this lcahost was built without it (install libopenmpi-dev and rebuild)");
#else
  core::comm::init_mpi(argc, argv);
  struct Finalize {
    ~Finalize() { core::comm::finalize_mpi(); }
  } finalize;
  int exit_code = 0;
  {
    // The host's own reductions and gathers: always MPI on host buffers.
    auto control = core::comm::make_mpi_world(opt.cp_topology);
    const int rank = control->rank();
    const bool root = rank == 0;
    if (!root) spdlog::set_level(spdlog::level::warn);
    if (!core::comm::launched_by_mpi() && root)
      spdlog::warn("not launched by mpirun: running context parallelism with world size 1 "
                   "(use `mpirun -np N lcahost --cp ...`)");
    const auto reg = core::Registry::load(plugin_dir(opt));
    core::MaskSource masks(reg);
    const auto* krec = reg.find(opt.cp_kernel, "kernel");
    if (!krec) throw std::runtime_error("--cp-kernel '" + opt.cp_kernel + "' is not a loaded kernel (see `lcahost caps`)");
    const std::string device = krec->manifest.kernel.device;  // "cpu" or "cuda"
    if (opt.matrix.empty()) opt.matrix = device == "cuda" ? "cp-gpu-quick" : "cp-quick";
    auto spec = core::load_matrix_spec(opt.matrix, reg.dir());
    apply_run_options(opt, spec);
    if (spec.seqlens_for(device).empty())
      throw std::runtime_error("matrix '" + spec.name + "' has no sequence lengths for " + device +
                               " (add \"" + device + "\": [...] to its seqlens, or pick a preset that has them: cp-quick "
                               "for cpu, cp-gpu-quick or paper-cp for cuda)");
    std::string comm = opt.cp_comm.empty() ? (device == "cuda" ? "nccl" : "mpi") : opt.cp_comm;
    if (comm != "nccl" && comm != "mpi") throw std::runtime_error("--cp-comm '" + comm + "': nccl or mpi");
    if (device != "cuda" && comm == "nccl")
      throw std::runtime_error("--cp-comm nccl needs a CUDA kernel (--cp-kernel flex_flash); runs on the CPU use MPI");

    // Declared in this order so that the NCCL world goes before its bootstrap, and both before
    // the backend's device memory.
    std::unique_ptr<core::Backend> backend;
    std::unique_ptr<core::comm::Communicator> bootstrap, world;
    std::string where;
    if (device == "cuda") {
      const int local_rank = core::comm::node_local_rank(opt.cp_topology);
      CudaPlacement place;
      std::string error;
      try {
        place = place_on_gpu(opt, local_rank);
        backend = core::make_cuda_backend(place.gpu);  // selects the device for this rank
      } catch (const std::exception& e) {
        error = e.what();
      }
      agree(*control, error);
      const std::string gpu_key = host_name() + "/" + place.pci;
      if (comm == "nccl") {
        // NCCL refuses two ranks on one GPU; say so before it does, with the way out.
        const auto keys = all_gather_strings(*control, gpu_key);
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
        agree(*control, error);
        bootstrap = core::comm::make_mpi_world(opt.cp_topology);
        try {
          world = core::comm::make_nccl_world(*bootstrap);
        } catch (const std::exception& e) {
          error = e.what();
        }
        agree(*control, error);
      } else {
        world = core::comm::make_staged_communicator(core::comm::make_mpi_world(opt.cp_topology));
      }
      where = "cuda:" + std::to_string(place.gpu) + " " + place.name + " (pci " + place.pci + ") on " + host_name() +
              ", node-local rank " + std::to_string(local_rank);
    } else {
      backend = core::make_cpu_backend();
      world = core::comm::make_mpi_world(opt.cp_topology);
      where = "cpu on " + host_name();
    }
    const std::string line = "rank " + std::to_string(rank) + "/" + std::to_string(control->size()) + ": " + where +
                             ", communicator " + world->backend();
    const auto lines = all_gather_strings(*control, line);
    if (root)
      for (const auto& l : lines) spdlog::info("{}", l);

    core::CPOptions cp{opt.cp, opt.cp_kernel, opt.cp_options, lines};
    core::SessionOptions so;
    so.out = opt.resume.empty() ? opt.out : opt.resume;
    so.resume = !opt.resume.empty();
    so.force = opt.force;
    so.threads = opt.threads;
    if (root) {
      so.environment = core::collect_environment(reg);
      if (backend->type() == LCA_DEVICE_CUDA)
        so.environment["gpu"] = core::collect_gpu_environment(backend->device_index(), false);
    }
    std::ostringstream sink;
    std::ostream& out = root ? std::cout : sink;
    const auto summary = core::run_cp_session(reg, masks, spec, *world, *control, *backend, cp, so, out);
    exit_code = summary.healthy() ? 0 : 3;
  }
  return exit_code;
#endif
}

}  // namespace lca::app
