// Matrix specs: which kernels, masks, lengths, head configs, dtypes and passes a run covers,
// read from presets (manifests/matrices/*.json) or a file. Used by the runner and the CLI.
// Rule: a spec that cannot be read is refused with one message naming the file and the field.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace lca::core {

struct HeadConfig {
  int heads_q = 1;
  int heads_kv = 1;
  std::string label() const { return std::to_string(heads_q) + ":" + std::to_string(heads_kv); }
};

// A kernel of the matrix: a plugin, the options it is created with (its config_json: variants and
// knobs) and the label that names its rows in records, tables and reports. One plugin may appear
// under several labels with other options, so that one run times its variants on the same inputs.
struct KernelEntry {
  std::string name;                                    // the plugin's, or "*" for every loaded kernel
  nlohmann::json options = nlohmann::json::object();  // a JSON object; {} for none
  std::string label;                                   // unique in the matrix

  KernelEntry() = default;
  // A plain name: no options, labelled by the name.
  KernelEntry(std::string kernel) : name(kernel), label(std::move(kernel)) {}  // NOLINT: implicit
  KernelEntry(std::string kernel, nlohmann::json opts, std::string row_label = "");
  bool operator==(const KernelEntry&) const = default;
};

// The label of a kernel with options but none given: name[option=value,...]; the name without options.
std::string default_kernel_label(const std::string& name, const nlohmann::json& options);

struct MatrixSpec {
  std::string name;
  std::filesystem::path source;        // the file it came from
  std::vector<KernelEntry> kernels;    // {"*"} for every loaded kernel
  // The command line's --kernel-options: KERNEL (a label or plugin name) -> options merged into each
  // of its entries once "*" is expanded (expand_cells).
  std::map<std::string, nlohmann::json> kernel_options;
  std::vector<std::string> exclude_kernels;  // dropped from "*" (e.g. slow reference kernels)
  std::vector<std::string> masks;      // mask specs, or {"*"} for every pattern
  // Sequence lengths per device ("cpu", "cuda"); "*" applies to devices without their own list.
  std::map<std::string, std::vector<int64_t>> seqlens;
  std::vector<HeadConfig> heads;
  std::vector<int> head_dims;
  std::vector<std::string> dtypes;
  std::vector<std::string> passes;     // "fwd", "bwd"
  int warmup = 1;
  // Warm-up goes on past `warmup` calls until this much wall time has passed (0: by count only).
  // An H100 runs attention at its power limit; its clock falls within ~0.1 s of a stretch of calls
  // and dips ~0.8-1 s in, when the power limiter catches up, so a cell timed before that is timed
  // on another machine in effect (docs/DESIGN.md, Measurements).
  double warmup_ms = 0;
  int repeats = 3;
  // Timed calls go on past `repeats` until this much wall time has passed (0: by count only), at
  // most kMaxTimedCalls (runner.hpp): at its power limit an H100's SM clock swings by ~20% over
  // about a second, so a median of calls that span less than that depends on where in the swing
  // they fell (docs/DESIGN.md, Measurements).
  double repeat_ms = 0;
  uint64_t seed = 42;
  bool check = true;
  // Cells of longer sequences (with --cp, tokens a rank x ranks) run unchecked, their reason saying
  // so: the reference's cost grows with the square of the length. 0 = no limit.
  int64_t check_max_seqlen = 0;
  double cell_timeout_s = 0;           // 0 = none (used with --isolate)

  const std::vector<int64_t>& seqlens_for(const std::string& device) const;
};

// Folders searched for presets, in order: <plugins>/matrices, the source tree, the install tree.
std::vector<std::filesystem::path> preset_dirs(const std::filesystem::path& plugin_dir);
// Names of the presets found there.
std::vector<std::string> preset_names(const std::filesystem::path& plugin_dir);

// `what` is a preset name ("quick", "all", "paper-dense", ...) or a path to a JSON file.
// "all" is the "all" preset with every kernel and every mask. Throws std::runtime_error.
MatrixSpec load_matrix_spec(const std::string& what, const std::filesystem::path& plugin_dir);
MatrixSpec parse_matrix_spec(const nlohmann::json& doc, const std::filesystem::path& source);

// The command line's choice of kernels (--kernels, --kernel-options) applied to a spec. `names`
// (when not empty) keeps the spec's entries whose label or plugin is named, in the order named, and
// adds a plain entry for a name the spec does not hold. Each of `options` is KERNEL=JSON (a JSON
// object), kept in kernel_options for expand_cells. Throws std::runtime_error naming the bad argument.
void select_kernels(MatrixSpec& spec, const std::vector<std::string>& names, const std::vector<std::string>& options);

// The run record's "matrix" object: what a run of the spec was asked to do (name, source, warm-up,
// repeats, seed, check, check_max_seqlen), for single-process and CP runs alike.
nlohmann::json matrix_record(const MatrixSpec& spec);

// Whether a cell of `seqlen` tokens (the whole sequence) is checked: check on, and seqlen within
// check_max_seqlen where that is set. over_check_length gives the cell's reason where it is not.
bool checks_length(const MatrixSpec& spec, int64_t seqlen);
std::string over_check_length(int64_t seqlen, int64_t check_max_seqlen);

}  // namespace lca::core
