// lcahost --cp: context-parallel runs under mpirun. The local kernel's device decides where a
// run lives (as a single-device cell's kernel does): on the CPU every rank uses host buffers and
// MPI; on CUDA each rank takes GPU (node-local rank % GPUs) and lends the strategies NCCL
// (default) or MPI staged through pinned memory (--cp-comm mpi: ranks may share a GPU).
#include "commands.hpp"

#include "cp_world.hpp"

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

// --kernel-options in a CP run: options for the local kernel (--cp-kernel), the only kernel there is.
nlohmann::json cp_kernel_options(const Options& opt) {
  core::MatrixSpec parsed;
  core::select_kernels(parsed, {}, opt.kernel_options);  // KERNEL=JSON-OBJECT, refused with the usage otherwise
  nlohmann::json options = nlohmann::json::object();
  for (const auto& [name, o] : parsed.kernel_options) {
    if (name != opt.cp_kernel)
      throw std::runtime_error("--kernel-options names '" + name + "', but this CP run's local kernel is '" + opt.cp_kernel +
                               "' (--cp-kernel); give " + opt.cp_kernel + "='{...}'");
    options.update(o);
  }
  return options;
}

}  // namespace

int cmd_cp(Options opt, int* argc, char*** argv) {
  check_cp_options(opt.cp_options);
  const nlohmann::json kernel_options = cp_kernel_options(opt);
  check_results_file_options(opt);
#if !defined(LCA_HAVE_MPI)
  (void)opt;
  (void)kernel_options;
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

    auto worlds = make_cp_worlds(std::move(control), opt, device, comm);
    core::Backend* backend = worlds.backend.get();
    const auto& lines = worlds.lines;
    if (root)
      for (const auto& l : lines) spdlog::info("{}", l);

    core::CPOptions cp{opt.cp, opt.cp_kernel, opt.cp_options, kernel_options, lines};
    core::SessionOptions so;
    so.out = opt.resume.empty() ? opt.out : opt.resume;
    so.resume = !opt.resume.empty();
    so.retry_errors = opt.retry_errors;
    so.force = opt.force;
    so.threads = opt.threads;
    if (root) {
      so.environment = core::collect_environment(reg);
      if (backend->type() == LCA_DEVICE_CUDA)
        so.environment["gpu"] = core::collect_gpu_environment(backend->device_index(), false);
    }
    std::ostringstream sink;
    std::ostream& out = root ? std::cout : sink;
    const auto summary = core::run_cp_session(reg, masks, spec, *worlds.world, *worlds.control, *backend, cp, so, out);
    exit_code = summary.healthy() ? 0 : 3;
  }
  return exit_code;
#endif
}

}  // namespace lca::app
