// Capability manifests: parsing, validation against manifests/manifest.schema.json, and the
// typed view the matrix builder reads. Used by the registry and by `lcahost caps`.
// Rule: a manifest that fails here never reaches the loader; the error names file, line, field.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace lca::core {

class ManifestError : public std::runtime_error {
 public:
  ManifestError(std::filesystem::path file, int line, std::string field, std::string reason);
  const std::filesystem::path& file() const { return file_; }
  int line() const { return line_; }
  const std::string& field() const { return field_; }
  const std::string& reason() const { return reason_; }

 private:
  std::filesystem::path file_;
  int line_;
  std::string field_;
  std::string reason_;
};

struct KernelCaps {
  std::string device = "cpu";        // "cpu" or "cuda"
  int min_cc = 0;                    // compute capability * 10 (90 for sm_90), cuda only
  std::vector<std::string> dtypes;   // "f32", "bf16", "f16"
  bool any_head_dim = false;
  std::vector<int> head_dims;
  bool gqa = false;
  bool backward = false;
  bool varlen = false;
  bool any_mask = false;             // slice-general: runs every mask a provider makes
  std::vector<std::string> masks;    // when !any_mask
  int64_t max_seqlen = 0;            // 0 = no limit declared
  std::string reference;             // "" or the device it is the reference for ("cpu", "cuda")

  bool supports_mask(const std::string& mask) const;
  bool supports_head_dim(int d) const;
  bool supports_dtype(const std::string& dtype) const;
};

struct MaskPatternInfo {
  std::string name;
  std::string category;
  std::string summary;
  nlohmann::json params = nlohmann::json::array();  // [{name, type, default, doc}]
  bool params_declared = false;  // the manifest lists "params" (then no other name is taken)
};

struct CPCaps {
  std::vector<std::string> devices;  // "cpu", "cuda"
  bool any_mask = true;
  std::vector<std::string> masks;
  bool backward = true;
  nlohmann::json options = nlohmann::json::object();
};

struct Manifest {
  std::filesystem::path file;
  std::string name;
  std::string kind;      // "kernel", "mask_provider", "cp_strategy"
  std::string version;
  int abi_major = 0;
  int abi_minor = 0;
  std::string library;   // file name, relative to the manifest's folder
  std::string description;
  nlohmann::json json;   // the whole document

  KernelCaps kernel;                     // kind == kernel
  std::vector<MaskPatternInfo> patterns; // kind == mask_provider
  CPCaps cp;                             // kind == cp_strategy

  std::filesystem::path library_path() const { return file.parent_path() / library; }
};

// Line (1-based) of the first occurrence of "key" in text, or 0.
int line_of_key(const std::string& text, const std::string& key);

// Parses and validates one manifest file against `schema` (the parsed schema document).
// Throws ManifestError.
Manifest parse_manifest(const std::filesystem::path& file, const nlohmann::json& schema);

// Validates `doc` against a JSON Schema subset (type, required, properties,
// additionalProperties, enum, items, minimum, minItems, oneOf, pattern-free). Returns the
// first violation as (json pointer, reason); empty pointer and reason when valid.
struct SchemaViolation {
  std::string pointer;
  std::string reason;
  bool ok() const { return reason.empty(); }
};
SchemaViolation validate_schema(const nlohmann::json& doc, const nlohmann::json& schema);

}  // namespace lca::core
