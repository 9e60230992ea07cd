// lcahost --cp: context-parallel runs under mpirun (MPI on CPU buffers).
#include "commands.hpp"

#include "core/mask/mask_source.hpp"
#include "core/matrix/spec.hpp"
#include "core/run/backend.hpp"
#include "core/run/cp_session.hpp"
#include "core/run/environment.hpp"

#if defined(LCA_HAVE_MPI)
#include "core/comm/mpi_comm.hpp"
#endif

#include <spdlog/spdlog.h>

#include <iostream>
#include <sstream>
#include <stdexcept>

namespace lca::app {

int cmd_cp(Options opt, int* argc, char*** argv) {
#if !defined(LCA_HAVE_MPI)
  (void)opt;
  (void)argc;
  (void)argv;
  throw std::runtime_error("--cp needs MPI: this lcahost was built without it (install libopenmpi-dev and rebuild)");
#else
  if (opt.matrix.empty()) opt.matrix = "cp-quick";
  core::comm::init_mpi(argc, argv);
  struct Finalize {
    ~Finalize() { core::comm::finalize_mpi(); }
  } finalize;
  int exit_code = 0;
  {
    auto world = core::comm::make_mpi_world(opt.cp_topology);
    const bool root = world->rank() == 0;
    if (!root) spdlog::set_level(spdlog::level::warn);
    if (!core::comm::launched_by_mpi() && root)
      spdlog::warn("not launched by mpirun: running context parallelism with world size 1 "
                   "(use `mpirun -np N lcahost --cp ...`)");
    const auto reg = core::Registry::load(plugin_dir(opt));
    core::MaskSource masks(reg);
    auto spec = core::load_matrix_spec(opt.matrix, reg.dir());
    if (!opt.masks.empty()) spec.masks = opt.masks;
    if (opt.no_check) spec.check = false;
    auto backend = core::make_cpu_backend();
    core::CPOptions cp{opt.cp, opt.cp_kernel, opt.cp_options};
    core::SessionOptions so;
    so.out = opt.resume.empty() ? opt.out : opt.resume;
    so.threads = opt.threads;
    if (root) so.environment = core::collect_environment(reg);
    std::ostringstream sink;
    std::ostream& out = root ? std::cout : sink;
    const auto summary = core::run_cp_session(reg, masks, spec, *world, *backend, cp, so, out);
    exit_code = summary.healthy() ? 0 : 3;
  }
  return exit_code;
#endif
}

}  // namespace lca::app
