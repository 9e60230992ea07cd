// lcahost cp-probe: the communicator's bandwidth and latency as the CP strategies use it, under
// mpirun: every rank to its ring neighbour at once (the ring's step), the same inside each node
// when the world spans several, and an all-to-all (the Ulysses exchange), over a few message
// sizes with warm-up first; the time of a repeat is the slowest rank's, the median is kept.
// Rank 0 writes a small JSON file that `lcahost cp-model --probe` reads.
#include "commands.hpp"
#include "cp_world.hpp"

#include "core/cuda/gpu.hpp"

#if defined(LCA_HAVE_MPI)
#include "core/comm/mpi_comm.hpp"
#endif

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>

namespace lca::app {

std::vector<int64_t> parse_probe_sizes(const std::string& text) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string piece = text.substr(at, end - at);
    const auto refuse = [&]() {
      return std::runtime_error("--sizes '" + text + "': '" + piece +
                                "' is not a size; give bytes with an optional K, M or G suffix (powers of 1024) "
                                "from 4 to 4G, comma separated, e.g. 64K,1M,16M");
    };
    if (piece.empty()) throw refuse();
    size_t digits = 0;
    while (digits < piece.size() && std::isdigit(static_cast<unsigned char>(piece[digits]))) ++digits;
    if (digits == 0 || digits > 10 || piece.size() - digits > 1) throw refuse();
    int64_t v = std::stoll(piece.substr(0, digits));
    if (digits < piece.size()) {
      const char s = static_cast<char>(std::toupper(static_cast<unsigned char>(piece[digits])));
      if (s == 'K') v <<= 10;
      else if (s == 'M') v <<= 20;
      else if (s == 'G') v <<= 30;
      else throw refuse();
    }
    if (v < 4 || v > (int64_t(4) << 30)) throw refuse();
    out.push_back(v);
    at = end + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

#if defined(LCA_HAVE_MPI)
namespace {

// Variables that change the path NCCL or MPI take between ranks, as set in this process.
nlohmann::json path_environment() {
  static const char* const names[] = {"NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_NET_GDR_LEVEL",
                                      "NCCL_P2P_LEVEL", "NCCL_NVLS_ENABLE", "NCCL_ALGO", "NCCL_PROTO",
                                      "NCCL_SOCKET_IFNAME", "NCCL_NET", "NCCL_CROSS_NIC", "CUDA_VISIBLE_DEVICES",
                                      "OMPI_MCA_btl", "OMPI_MCA_pml"};
  nlohmann::json env = nlohmann::json::object();
  for (const char* n : names)
    if (const char* v = std::getenv(n)) env[n] = v;
  return env;
}

struct Buffers {
  const lca_allocator* alloc = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  Buffers(const lca_allocator* a, size_t bytes) : alloc(a) {
    if (alloc->alloc(alloc->ctx, bytes, &send) != LCA_OK || alloc->alloc(alloc->ctx, bytes, &recv) != LCA_OK)
      throw std::runtime_error("cp-probe: cannot allocate two buffers of " + std::to_string(bytes) +
                               " bytes; give smaller --sizes");
  }
  ~Buffers() {
    if (send) alloc->free(alloc->ctx, send);
    if (recv) alloc->free(alloc->ctx, recv);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace
#endif

int cmd_cp_probe(Options opt, int* argc, char*** argv) {
  const auto sizes_given = opt.probe_sizes.empty() ? std::vector<int64_t>{} : parse_probe_sizes(opt.probe_sizes);
  if (!opt.cp_comm.empty() && opt.cp_comm != "nccl" && opt.cp_comm != "mpi")
    throw std::runtime_error("--cp-comm '" + opt.cp_comm + "': nccl or mpi");
  if (!opt.out.empty() && std::filesystem::exists(opt.out) && !opt.force)
    throw std::runtime_error("--out " + opt.out + " exists; add --force to overwrite it");
#if !defined(LCA_HAVE_MPI)
  (void)argc;
  (void)argv;
  (void)sizes_given;
  throw std::runtime_error("cp-probe needs MPI: this lcahost was built without it (install libopenmpi-dev and rebuild)");
#else
  core::comm::init_mpi(argc, argv);
  struct Finalize {
    ~Finalize() { core::comm::finalize_mpi(); }
  } finalize;
  {
    auto control = core::comm::make_mpi_world(opt.cp_topology);
    const bool root = control->rank() == 0;
    if (!root) spdlog::set_level(spdlog::level::warn);
    if (!core::comm::launched_by_mpi() && root)
      spdlog::warn("not launched by mpirun: probing a world of one rank (use `mpirun -np N lcahost cp-probe`)");
    // GPUs when this rank sees one, unless --device cpu; every rank must land on the same kind.
    const bool want_cpu = opt.device == "cpu";
    std::string device = !want_cpu && core::cuda_device_count() > 0 ? "cuda" : "cpu";
    const auto kinds = all_gather_strings(*control, device);
    for (size_t r = 0; r < kinds.size(); ++r)
      if (kinds[r] != kinds[0])
        throw std::runtime_error("cp-probe: rank 0 runs on " + kinds[0] + " but rank " + std::to_string(r) + " on " +
                                 kinds[r] + " (give every rank a GPU, or --device cpu)");
    const std::string comm = opt.cp_comm.empty() ? (device == "cuda" ? "nccl" : "mpi") : opt.cp_comm;
    if (device != "cuda" && comm == "nccl")
      throw std::runtime_error("--cp-comm nccl needs GPUs, and this run is on the CPU; use --cp-comm mpi");
    if (device == "cpu" && !opt.device.empty() && opt.device != "cpu" && opt.device != "auto")
      throw std::runtime_error("--device " + opt.device + ": this rank sees no GPU (use --device cpu)");
    auto w = make_cp_worlds(std::move(control), opt, device, comm);
    if (root)
      for (const auto& l : w.lines) spdlog::info("{}", l);
    auto& world = *w.world;
    auto& ctl = *w.control;
    core::Backend& backend = *w.backend;
    const int W = world.size(), r = world.rank();
    const int local = std::max(1, std::min(world.local_size(), W));
    const int nodes = (W + local - 1) / local;
    const std::vector<int64_t> sizes =
        !sizes_given.empty() ? sizes_given
        : device == "cuda"   ? std::vector<int64_t>{64 << 10, 1 << 20, 16 << 20, 256 << 20}
                             : std::vector<int64_t>{64 << 10, 1 << 20, 16 << 20};
    const int warmup = opt.probe_warmup, repeats = opt.probe_repeats;
    void* stream = backend.stream();

    // A pattern moves `bytes` out of every rank per call; the time of a repeat is the slowest rank's.
    auto measure = [&](const std::string& name, auto&& call) {
      nlohmann::json rows = nlohmann::json::array();
      if (root) std::cout << "# " << name << "\n#        bytes        ms     GB/s\n";
      for (int64_t bytes : sizes) {
        Buffers buf(backend.allocator(), static_cast<size_t>(bytes));
        backend.fill_random(buf.send, bytes / 4, LCA_DTYPE_F32, 7, 1.0f, uint64_t(r) << 32);
        std::vector<float> times;
        for (int i = 0; i < warmup + repeats; ++i) {
          backend.synchronize();
          ctl.barrier(nullptr);
          world.barrier(stream);
          const double ms = backend.time_ms([&] { call(buf, bytes, stream); });
          if (i >= warmup) times.push_back(static_cast<float>(ms));
        }
        std::vector<float> slowest(times.size());
        ctl.all_reduce(times.data(), slowest.data(), static_cast<int64_t>(times.size()), LCA_DTYPE_F32, LCA_REDUCE_MAX,
                       nullptr);
        const double ms = median(std::vector<double>(slowest.begin(), slowest.end()));
        const double gbps = ms > 0 ? bytes / (ms * 1e-3) / 1e9 : 0.0;
        rows.push_back({{"bytes", bytes}, {"ms", ms}, {"GBps", gbps}});
        if (root) std::printf("%14lld %9.4f %8.2f\n", static_cast<long long>(bytes), ms, gbps), std::fflush(stdout);
      }
      // Bandwidth from the largest message; latency is what the smallest took beyond its bytes.
      const auto& big = rows.back();
      const auto& small = rows.front();
      const double bw = big["GBps"].get<double>();
      const double lat_us = std::max(0.0, small["ms"].get<double>() * 1e3 -
                                              (bw > 0 ? small["bytes"].get<double>() / (bw * 1e9) * 1e6 : 0.0));
      return nlohmann::json{{"sizes", rows}, {"bandwidth_GBps", bw}, {"latency_us", lat_us}};
    };
    const auto ring_call = [&](int to, int from) {
      return [&world, to, from](Buffers& b, int64_t bytes, void* s) {
        world.group_start();
        world.send(b.send, bytes / 4, LCA_DTYPE_F32, to, s);
        world.recv(b.recv, bytes / 4, LCA_DTYPE_F32, from, s);
        world.group_end();
      };
    };
    nlohmann::json patterns = nlohmann::json::object(), links = nlohmann::json::object();
    if (W > 1) {
      auto ring = measure("ring: every rank to rank + 1 at once", ring_call((r + 1) % W, (r + W - 1) % W));
      ring["link"] = nodes > 1 ? "inter" : "intra";
      patterns["ring"] = ring;
      links[nodes > 1 ? "inter" : "intra"] = {{"bandwidth_GBps", ring["bandwidth_GBps"]},
                                              {"latency_us", ring["latency_us"]}, {"from", "ring"}};
      const int node0 = r / local * local, in_node = std::min(local, W - node0);
      if (nodes > 1 && in_node > 1 && local > 1) {
        const int pos = r - node0;
        auto intra = measure("ring inside each node", ring_call(node0 + (pos + 1) % in_node,
                                                                node0 + (pos + in_node - 1) % in_node));
        intra["link"] = "intra";
        patterns["ring_intra"] = intra;
        links["intra"] = {{"bandwidth_GBps", intra["bandwidth_GBps"]}, {"latency_us", intra["latency_us"]},
                          {"from", "ring_intra"}};
      }
      auto a2a = measure("all-to-all: every rank bytes / W to each", [&world, W](Buffers& b, int64_t bytes, void* s) {
        const int64_t per = std::max<int64_t>(1, bytes / 4 / W);
        std::vector<int64_t> counts(W, per), displs(W);
        for (int i = 0; i < W; ++i) displs[i] = i * per;
        world.all_to_all(b.send, counts.data(), displs.data(), b.recv, counts.data(), displs.data(), LCA_DTYPE_F32, s);
      });
      a2a["link"] = nodes > 1 ? "mixed" : "intra";
      patterns["all_to_all"] = a2a;
      // The same links with the other ranks idle: whether a link's figure is its own or the share of
      // something all ranks load at once (off NVLink, sockets through the host), which decides how
      // fast uneven transfers (balanced's group-casts) go against the even ones above.
      const std::string pair_link = local >= 2 ? "intra" : "inter";
      auto pair = measure("pair: ranks 0 and 1 exchange bytes, the others idle",
                          [&world, r](Buffers& b, int64_t bytes, void* s) {
                            if (r > 1) return;
                            world.group_start();
                            world.send(b.send, bytes / 4, LCA_DTYPE_F32, 1 - r, s);
                            world.recv(b.recv, bytes / 4, LCA_DTYPE_F32, 1 - r, s);
                            world.group_end();
                          });
      pair["link"] = pair_link;
      patterns["pair"] = pair;
      auto fan = measure("one to all: rank 0 sends bytes / (W - 1) to each other rank, the others only receive",
                         [&world, r, W](Buffers& b, int64_t bytes, void* s) {
                           const int64_t per = std::max<int64_t>(1, bytes / 4 / (W - 1));
                           world.group_start();
                           if (r == 0) {
                             for (int i = 1; i < W; ++i)
                               world.send(static_cast<float*>(b.send) + (i - 1) * per, per, LCA_DTYPE_F32, i, s);
                           } else {
                             world.recv(b.recv, per, LCA_DTYPE_F32, 0, s);
                           }
                           world.group_end();
                         });
      fan["link"] = nodes > 1 ? "mixed" : "intra";
      patterns["one_to_all"] = fan;
    } else if (root) {
      spdlog::warn("cp-probe: a world of one rank has no links to measure; the file records the machine only");
    }
    if (root) {
      nlohmann::json j = {{"type", "cp_probe"},
                          {"lca_version", LCA_VERSION},
                          {"git_revision", LCA_GIT_REVISION},
                          {"world_size", W},
                          {"local_size", local},
                          {"nodes", nodes},
                          {"device", device},
                          {"communicator", world.backend()},
                          {"gpus", w.devices},
                          {"hosts", w.hosts},
                          {"ranks", w.lines},
                          {"env", path_environment()},
                          {"warmup", warmup},
                          {"repeats", repeats},
                          {"patterns", patterns},
                          {"links", links}};
      if (!opt.out.empty()) {
        std::ofstream f(opt.out);
        f << j.dump(2) << "\n";
        if (!f) throw std::runtime_error("--out " + opt.out + ": cannot write the probe file");
        spdlog::info("wrote {}", opt.out);
      } else {
        std::cout << j.dump(2) << "\n";
      }
    }
  }
  return 0;
#endif
}

}  // namespace lca::app
