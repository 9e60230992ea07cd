// lcahost commands; see commands.hpp.
#include "commands.hpp"

#include "core/mask/mask_source.hpp"
#include "core/mask/render.hpp"
#include "core/plugin/text.hpp"
#include "core/report/caps.hpp"
#include "core/report/results.hpp"
#include "core/run/backend.hpp"
#include "core/run/environment.hpp"
#include "core/run/isolate.hpp"
#include "core/run/session.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <charconv>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

namespace lca::app {
namespace fs = std::filesystem;

CLI::Validator finite_number(double lo, double hi, bool above_lo) {
  std::ostringstream range;
  range << (above_lo ? "more than " : "from ") << lo << (above_lo ? " and at most " : " to ") << hi;
  const std::string allowed = range.str();
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size()) return "'" + text + "' is not a number (" + allowed + ")";
        if (!std::isfinite(v) || v < lo || v > hi || (above_lo && v == lo))
          return "'" + text + "' is out of range: give a number " + allowed;
        return "";
      },
      "NUMBER " + allowed);
}

CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || text[0] == '-' || text[0] == '+' || ec != std::errc() || end != text.data() + text.size())
          return "'" + text + "' is not a whole number from 0 to 18446744073709551615";
        return "";
      },
      "UINT64");
}

spdlog::level::level_enum log_level_from_env(const char* value, spdlog::level::level_enum fallback) {
  if (value == nullptr || *value == 0) return fallback;
  const std::string name = value;
  // spdlog's from_str takes any unknown name for "off": a typo would silence every error.
  const auto level = spdlog::level::from_str(name);
  if (level != spdlog::level::off || name == "off") return level;
  spdlog::warn("LCA_LOG_LEVEL='{}' is not a log level (trace, debug, info, warn, error, critical, off); using {}",
               name, spdlog::level::to_string_view(fallback));
  return fallback;
}

void configure_logging(const Options& opt) {
  auto logger = spdlog::stderr_color_mt("lca");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S %^%l%$] %v");
  spdlog::level::level_enum level = log_level_from_env(std::getenv("LCA_LOG_LEVEL"), spdlog::level::info);
  if (opt.verbose == 1) level = spdlog::level::debug;
  if (opt.verbose >= 2) level = spdlog::level::trace;
  if (opt.quiet) level = spdlog::level::warn;
  spdlog::set_level(level);
}

std::vector<nlohmann::json> read_json_lines(const std::string& path, const std::string& option) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(option + " " + path + ": cannot read the file");
  std::vector<nlohmann::json> out;
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception&) {
      throw std::runtime_error(option + " " + path + ": line " + std::to_string(n) +
                               " is not JSON (a results file has one JSON object a line)");
    }
  }
  return out;
}

std::string plugin_dir(const Options& opt) {
  if (!opt.plugins.empty()) return opt.plugins;
  if (const char* env = std::getenv("LCA_PLUGIN_DIR")) return env;
  // Beside the executable: <build>/bin/lcahost -> <build>/plugins; installed: <prefix>/lib/lca/plugins.
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    if (fs::is_directory(exe.parent_path().parent_path() / "plugins")) return (exe.parent_path().parent_path() / "plugins").string();
    if (fs::is_directory(exe.parent_path().parent_path() / "lib/lca/plugins"))
      return (exe.parent_path().parent_path() / "lib/lca/plugins").string();
  }
  return "./build/plugins";
}

namespace {

std::vector<std::string> mask_names(const core::MaskSource& masks) {
  std::vector<std::string> names;
  for (const auto& e : masks.patterns()) names.push_back(e.info.name);
  return names;
}

// The GPU the run uses, from --device (cuda:N) or the first one present.
int selected_gpu(const Options& opt) {
  if (opt.device.empty() || opt.device == "auto") return 0;
  if (opt.device.rfind("cuda:", 0) == 0) {
    try {
      return std::stoi(opt.device.substr(5));
    } catch (const std::exception&) {
    }
  }
  throw std::runtime_error("--device '" + opt.device + "' is not cuda:N (e.g. cuda:0)");
}

struct Devices {
  std::unique_ptr<core::Backend> cpu;
  std::unique_ptr<core::Backend> cuda;
  core::HostDevices host;
  std::map<std::string, core::Backend*> map() const {
    std::map<std::string, core::Backend*> m{{"cpu", cpu.get()}};
    if (cuda) m["cuda"] = cuda.get();
    return m;
  }
};

Devices open_devices(const Options& opt) {
  Devices d;
  d.cpu = core::make_cpu_backend();
  const int count = core::cuda_device_count();
  if (count > 0) {
    const int index = selected_gpu(opt);
    if (index >= count)
      throw std::runtime_error("--device cuda:" + std::to_string(index) + ": only " + std::to_string(count) +
                               " GPU(s) present");
    d.cuda = core::make_cuda_backend(index);
    d.host.gpu_count = count;
    d.host.gpu_cc = core::cuda_device_cc(index);
  } else if (!opt.device.empty() && opt.device != "auto") {
    throw std::runtime_error("--device " + opt.device + ": no GPU is present (or this build has no CUDA)");
  }
  return d;
}

core::MatrixSpec load_spec(const Options& opt, const core::Registry& reg) {
  core::MatrixSpec spec = core::load_matrix_spec(opt.matrix, reg.dir());
  core::select_kernels(spec, opt.kernels, opt.kernel_options);
  apply_run_options(opt, spec);
  return spec;
}

}  // namespace

void apply_run_options(const Options& opt, core::MatrixSpec& spec) {
  if (!opt.masks.empty()) {
    std::vector<std::string> masks;
    for (const auto& list : opt.masks) {
      try {
        for (auto& m : core::split_mask_list(list)) masks.push_back(std::move(m));
      } catch (const std::invalid_argument& e) {
        throw std::runtime_error(std::string("--masks: ") + e.what());
      }
    }
    if (masks.empty()) throw std::runtime_error("--masks '' names no mask; give one, e.g. --masks causal");
    spec.masks = masks;
  }
  if (!opt.seqlens.empty()) {
    spec.seqlens.clear();
    spec.seqlens["*"] = opt.seqlens;
  }
  if (opt.no_check) spec.check = false;
  if (opt.check_max_seqlen >= 0) spec.check_max_seqlen = opt.check_max_seqlen;
  if (opt.warmup >= 0) spec.warmup = opt.warmup;
  if (opt.warmup_ms >= 0) spec.warmup_ms = opt.warmup_ms;
  if (opt.repeats > 0) spec.repeats = opt.repeats;
  if (opt.repeat_ms >= 0) spec.repeat_ms = opt.repeat_ms;
}

int cmd_list(const Options& opt) {
  const auto reg = core::Registry::load(plugin_dir(opt));
  core::print_plugin_list(reg, opt.format, std::cout);
  return 0;
}

int cmd_caps(const Options& opt) {
  const auto reg = core::Registry::load(plugin_dir(opt));
  core::MaskSource masks(reg);
  core::CapsFilter f;
  if (!opt.caps_mask.empty()) {
    if (masks.find(opt.caps_mask) == nullptr)
      throw std::runtime_error("unknown mask '" + opt.caps_mask + "' (see `lcahost masks`)");
    f.mask = opt.caps_mask;
  }
  f.backward = opt.caps_backward;
  if (!opt.caps_dtype.empty()) f.dtype = opt.caps_dtype;
  if (!opt.caps_device.empty()) f.device = opt.caps_device;
  if (opt.caps_head_dim > 0) f.head_dim = opt.caps_head_dim;
  core::print_caps(reg, mask_names(masks), f, opt.format, std::cout);
  return 0;
}

int cmd_masks(const Options& opt) {
  const auto reg = core::Registry::load(plugin_dir(opt));
  core::MaskSource masks(reg);
  if (opt.show_mask.empty()) {
    std::vector<std::vector<std::string>> rows;
    for (const auto& e : masks.patterns()) {
      std::string params;
      for (const auto& p : e.info.params)
        params += (params.empty() ? "" : " ") + p.value("name", std::string("?")) + "=" + p["default"].dump();
      rows.push_back({e.info.name, e.info.category, params.empty() ? "-" : params, e.info.summary});
    }
    core::print_rows({"mask", "category", "parameters (defaults)", "summary"}, rows, false, std::cout);
    return 0;
  }
  core::MaskSpec spec{opt.show_mask, nlohmann::json::object()};
  for (const auto& kv : opt.show_params) {
    const auto one = core::MaskSpec::parse(opt.show_mask + ":" + kv);
    for (const auto& [k, v] : one.params.items()) spec.params[k] = v;
  }
  auto gm = masks.generate(spec, opt.show_seqlen, opt.show_seed);
  const auto stats = core::mask_stats(gm->mask());
  std::cout << spec.label() << "  seqlen " << opt.show_seqlen << "  seed " << opt.show_seed << "\n"
            << core::render_ascii(gm->mask(), opt.show_width) << "slices " << stats.num_slices << "  area "
            << stats.area << "  density " << stats.density;
  if (gm->mask().num_docs > 0) std::cout << "  documents " << gm->mask().num_docs;
  std::cout << "\n";
  if (!opt.show_png.empty()) {
    core::write_png(gm->mask(), opt.show_png);
    std::cout << "wrote " << opt.show_png << "\n";
  }
  return 0;
}

void check_results_file_options(const Options& opt) {
  if (!opt.resume.empty() && !opt.out.empty() && fs::path(opt.out) != fs::path(opt.resume))
    throw std::runtime_error("--out " + opt.out + " and --resume " + opt.resume +
                             " name two files; --resume alone continues a run in its file");
  if (opt.retry_errors && opt.resume.empty())
    throw std::runtime_error("--retry-errors runs again the failed cells of a results file: give it with --resume FILE");
}

int cmd_run(const Options& opt) {
  Options o = opt;
  check_results_file_options(o);
  if (!o.resume.empty() && o.force)
    throw std::runtime_error("--resume continues " + o.resume + " and --force would overwrite it; give one of them");
  if (!o.resume.empty()) o.out = o.resume;
  if (o.matrix.empty()) throw std::runtime_error("--resume needs --matrix too (the same spec as the first run)");
  if (o.cell_timeout > 0 && !o.isolate) {
    // A cell in this process cannot be stopped: the timeout is kept by running each in a child.
    spdlog::info("--cell-timeout {} s runs each cell in a child process (as --isolate)", o.cell_timeout);
    o.isolate = true;
  }
  const auto reg = core::Registry::load(plugin_dir(o));
  core::MaskSource masks(reg);
  const auto spec = load_spec(o, reg);
  Devices devices = open_devices(o);

  core::SessionOptions so;
  so.out = o.out;
  so.resume = !o.resume.empty();
  so.retry_errors = o.retry_errors;
  so.force = o.force;
  so.isolate = o.isolate;
  so.cell_timeout_s = o.cell_timeout;
  so.dry_run = o.dry_run;
  so.threads = o.threads;
  if (!o.dry_run) {
    so.environment = core::collect_environment(reg);
    if (devices.cuda) {
      spdlog::info("measuring the GPU's ceilings (bf16 GEMM, device copy)");
      so.environment["gpu"] = core::collect_gpu_environment(devices.cuda->device_index(), true);
      so.gemm_tflops = so.environment["gpu"]["ceilings"].value("gemm_tflops", 0.0);
      spdlog::info("{}: GEMM {:.0f} TFLOP/s, copy {:.0f} GB/s", so.environment["gpu"].value("name", std::string("GPU")),
                   so.gemm_tflops, so.environment["gpu"]["ceilings"].value("copy_gbps", 0.0));
      std::cout << "# gpu: " << so.environment["gpu"].dump() << "\n";
    }
  }
  if (o.isolate) {
    std::error_code ec;
    const auto exe = fs::read_symlink("/proc/self/exe", ec);
    so.child_argv = {ec ? o.argv0 : exe.string(), "--plugins", reg.dir().string(), "--matrix", o.matrix};
    if (o.quiet) so.child_argv.push_back("-q");
    if (!o.device.empty()) so.child_argv.insert(so.child_argv.end(), {"--device", o.device});
    if (o.threads > 0) so.child_argv.insert(so.child_argv.end(), {"--threads", std::to_string(o.threads)});
    if (o.no_check) so.child_argv.push_back("--no-check");
    if (o.check_max_seqlen >= 0)
      so.child_argv.insert(so.child_argv.end(), {"--check-max-seqlen", std::to_string(o.check_max_seqlen)});
    if (o.warmup >= 0) so.child_argv.insert(so.child_argv.end(), {"--warmup", std::to_string(o.warmup)});
    if (o.warmup_ms >= 0) so.child_argv.insert(so.child_argv.end(), {"--warmup-ms", std::to_string(o.warmup_ms)});
    if (o.repeats > 0) so.child_argv.insert(so.child_argv.end(), {"--repeats", std::to_string(o.repeats)});
    if (o.repeat_ms >= 0) so.child_argv.insert(so.child_argv.end(), {"--repeat-ms", std::to_string(o.repeat_ms)});
    so.child_argv.push_back("run-cell");
  }
  so.stop_on_signal = true;
  const auto summary = core::run_session(reg, masks, spec, devices.map(), devices.host, so, std::cout);
  if (summary.stopped_by) {
    // Ended by the signal itself, so that a calling shell script stops too (a shell goes on past
    // a child that caught SIGINT and exited normally); what was written is complete already.
    std::cout.flush();
    std::cerr.flush();
    std::signal(summary.stopped_by, SIG_DFL);
    std::raise(summary.stopped_by);
    return 128 + summary.stopped_by;
  }
  return summary.healthy() ? 0 : 3;
}

int cmd_run_cell(const Options& opt) {
  const auto reg = core::Registry::load(plugin_dir(opt));
  core::MaskSource masks(reg);
  const auto spec = load_spec(opt, reg);
  Devices devices = open_devices(opt);
  core::Cell cell = core::Cell::from_json(nlohmann::json::parse(opt.cell_json));
  core::RunnerOptions ro = core::runner_options(spec);
  ro.threads = opt.threads;
  core::Runner runner(reg, masks, devices.map(), ro);
  const auto r = runner.run_cell(cell);
  std::cout << core::kResultMarker << core::dump_json(r.to_json()) << "\n" << std::flush;
  return 0;
}

}  // namespace lca::app
