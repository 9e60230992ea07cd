// The lcahost commands: each parses nothing and decides nothing that core/ could; it wires
// options to core calls and prints.
// Rule: a command returns an exit status; it throws only for errors the user must fix.
#pragma once

#include "core/matrix/spec.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <string>
#include <vector>

namespace lca::app {

struct Options {
  std::string plugins;
  int verbose = 0;
  bool quiet = false;
  std::string argv0;
  // run
  std::string matrix;
  std::string out;
  std::string resume;
  bool retry_errors = false;
  bool force = false;
  bool isolate = false;
  double cell_timeout = 0;
  bool dry_run = false;
  std::string device;
  int threads = 0;
  bool no_check = false;
  int64_t check_max_seqlen = -1;  // -1: the matrix's own
  int warmup = -1;   // -1: the matrix's own
  double warmup_ms = -1;  // -1: the matrix's own
  int repeats = 0;   // 0: the matrix's own
  double repeat_ms = -1;  // -1: the matrix's own
  std::vector<std::string> kernels;
  std::vector<std::string> kernel_options;  // KERNEL=JSON, repeatable
  std::vector<std::string> masks;
  std::vector<int64_t> seqlens;  // replaces the matrix's lengths on every device (per rank with --cp)
  // cp
  std::vector<std::string> cp;
  std::string cp_kernel = "cpu_reference";
  std::string cp_comm;  // "nccl" or "mpi"; "" = nccl for CUDA kernels, mpi for CPU ones
  int cp_topology = 0;
  std::string cp_options = "{}";
  // cp-probe
  bool cp_probe = false;
  std::string probe_sizes;  // "" = the device's defaults
  int probe_warmup = 3;
  int probe_repeats = 10;
  // cp-model
  std::vector<std::string> model_strategies;  // empty = all six
  std::vector<int> model_worlds{8, 16, 32, 64, 96};
  int model_gpus_per_node = 8;
  bool model_gpus_per_node_given = false;
  int64_t model_tokens_per_gpu = 32768;
  int64_t model_seqlen = 0;  // total; 0 = tokens a GPU x world
  int model_heads_q = 64, model_heads_kv = 8, model_head_dim = 128;
  std::string model_dtype = "bf16";
  std::vector<std::string> model_passes{"fwd"};
  uint64_t model_seed = 42;
  std::vector<std::string> model_rates;
  std::string model_probe, model_rate_kernel = "flex_flash", model_validate, model_json;
  double model_rate = 0, model_call_us = 0, model_message_us = -1;
  bool model_breakdown = false;  // where the slowest rank's time goes (ideal, imbalance, tiles, exposed, memory)
  std::string model_rate_from;  // a mask whose one-GPU record times a tile where a mask has none
  std::string model_kernel_time = "tiles";  // how a local call is timed: tiles or area
  double model_intra_GBps = 0, model_inter_GBps = 0, model_intra_us = -1, model_inter_us = -1, model_hbm_GBps = 0;
  // kernel-model
  std::vector<std::string> kmodel_validate;  // results files whose cells are predicted
  std::string kmodel_kernel = "flex_flash";  // the row (label) whose cells --validate reads
  int kmodel_worst = 10;                     // cells listed a pass, furthest below the prediction
  int kmodel_sms = 0;                        // --matrix: SMs (0: an H100's 132)
  int kmodel_l2_mib = 0;                     // --matrix: L2 in MiB (0: an H100's 50)
  // list / caps
  std::string format = "table";
  std::string caps_mask;
  bool caps_backward = false;
  std::string caps_dtype;
  std::string caps_device;
  int caps_head_dim = 0;
  // masks
  std::string show_mask;
  long long show_seqlen = 64;
  std::vector<std::string> show_params;
  unsigned long long show_seed = 42;
  std::string show_png;
  int show_width = 64;
  // run-cell
  std::string cell_json;
};

// A CLI11 check: a finite number from lo to hi (lo itself excluded where `above_lo`); NaN and
// infinities are refused, which CLI::Range lets through.
CLI::Validator finite_number(double lo, double hi, bool above_lo = false);
// A CLI11 check: a whole number from 0 to 2^64 - 1 in decimal digits alone (a seed); "-1" and a
// number past 2^64 are refused rather than wrapped or capped.
CLI::Validator unsigned_64();

// The log level LCA_LOG_LEVEL names (trace, debug, info, warn, error, critical, off); an unknown
// name is a warning and `fallback`, never "off".
spdlog::level::level_enum log_level_from_env(const char* value, spdlog::level::level_enum fallback);

void configure_logging(const Options& opt);
std::string plugin_dir(const Options& opt);
// The command line's changes to a loaded matrix that every run takes (--masks, --no-check,
// --warmup, --repeats); --kernels is the plain run's own.
void apply_run_options(const Options& opt, core::MatrixSpec& spec);
// The records of a results file (one JSON object a line; blank lines skipped), for the model
// commands that read runs (cp-model --rates / --validate, kernel-model --validate). `option` names
// the option that gave the path in the messages: a file that cannot be read, a line that is not JSON.
std::vector<nlohmann::json> read_json_lines(const std::string& path, const std::string& option);
// --out, --resume and --retry-errors together, as every run takes them: one file, and
// --retry-errors only with --resume. Throws std::runtime_error naming the options.
void check_results_file_options(const Options& opt);

int cmd_list(const Options& opt);
int cmd_caps(const Options& opt);
int cmd_masks(const Options& opt);
int cmd_run(const Options& opt);
int cmd_run_cell(const Options& opt);
int cmd_cp(Options opt, int* argc, char*** argv);
int cmd_cp_probe(Options opt, int* argc, char*** argv);
int cmd_cp_model(const Options& opt);
int cmd_kernel_model(const Options& opt);
// --sizes of cp-probe: "64K,1M" -> bytes, sorted, without repeats; throws naming the bad piece.
std::vector<int64_t> parse_probe_sizes(const std::string& text);
// Runs the report script (share/lca/report.py) with `command` and args; returns only on error.
int cmd_script(const std::string& command, const std::vector<std::string>& args);

}  // namespace lca::app
