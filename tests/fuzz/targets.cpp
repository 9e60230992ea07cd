// The fuzz targets; see targets.hpp.
#include "targets.hpp"

#include "core/mask/mask_source.hpp"
#include "core/matrix/spec.hpp"
#include "core/plugin/manifest.hpp"

#include <lca/abi.h>
#include <lca/checked.hpp>
#include <lca/error.hpp>

#include <boost/dll/shared_library.hpp>
#include <nlohmann/json.hpp>

#include <stdlib.h>

#include <charconv>
#include <fstream>
#include <stdexcept>
#include <typeinfo>

namespace lca::fuzz {
namespace fs = std::filesystem;

namespace {

Verdict clean() { return {}; }
Verdict dirty(std::string problem) { return {false, std::move(problem)}; }

void write_file(const fs::path& file, std::string_view text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out) throw std::runtime_error("fuzz: cannot write " + file.string());
}

bool one_line(const std::string& message) { return !message.empty() && message.find('\n') == std::string::npos; }

std::string escaped(const std::exception& e) {
  return std::string("escaped ") + typeid(e).name() + ": " + e.what();
}

// The first line of a mask target's input: the sequence length. Lengths the host accepts but that
// would make big masks (up to 3e9 tokens) fold into 1..65536: the fuzzers look for crashes and
// wrong refusals, not for the cost of a long mask. Lengths out of range stay, to be refused.
int64_t take_seqlen(std::string_view& text) {
  const size_t nl = text.find('\n');
  const std::string_view line = text.substr(0, nl);
  text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
  int64_t seqlen = 64;
  const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), seqlen);
  if (ec != std::errc() || end != line.data() + line.size()) seqlen = 64;
  if (seqlen > 65536 && seqlen <= lca::max_seqlen) seqlen = 1 + seqlen % 65536;
  return seqlen;
}

std::string_view take_line(std::string_view& text) {
  const size_t nl = text.find('\n');
  const std::string_view line = text.substr(0, nl);
  text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
  return line;
}

// A generated mask must be one the host can use: slices inside the square, known types, an
// area that counts.
Verdict check_mask(const lca_mask& m, int64_t seqlen) {
  if (m.seqlen_q != seqlen || m.seqlen_k != seqlen) return dirty("mask is not seqlen x seqlen");
  if (m.num_slices < 0 || (m.num_slices > 0 && m.slices == nullptr)) return dirty("bad slice list");
  for (int64_t i = 0; i < m.num_slices; ++i) {
    const lca_slice& s = m.slices[i];
    if (s.q_begin < 0 || s.q_end < s.q_begin || s.q_end > seqlen || s.k_begin < 0 || s.k_end < s.k_begin ||
        s.k_end > seqlen || s.type < LCA_SLICE_FULL || s.type > LCA_SLICE_BI_CAUSAL)
      return dirty("slice " + std::to_string(i) + " lies outside the mask or has an unknown type");
  }
  try {
    const int64_t area = core::mask_area(m);
    if (area < 0 || area > lca::product_of(seqlen, seqlen).value_or(0))
      return dirty("area " + std::to_string(area) + " outside 0..seqlen^2");
  } catch (const std::exception& e) {
    return dirty("mask_area: " + escaped(e));
  }
  return clean();
}

}  // namespace

struct Targets::State {
  fs::path scratch;
  fs::path plugin_dir;
  nlohmann::json schema;
  boost::dll::shared_library library;
  const lca_mask_provider_vtable* vt = nullptr;
  lca_mask_provider* provider = nullptr;
  std::string plugin_dir_text, data_dir_text;

  // A provider's answer to one request: clean when it made a sound mask or refused with a
  // status a host maps (INVALID_ARGUMENT, OUT_OF_MEMORY, UNSUPPORTED) and a one-line message.
  Verdict generate(const std::string& pattern, const std::string& params, int64_t seqlen) {
    const lca_mask_request req{sizeof(lca_mask_request), pattern.c_str(), params.c_str(), seqlen, 7};
    lca_mask_handle* handle = nullptr;
    const lca_status status = vt->generate(provider, &req, &handle);
    if (status != LCA_OK) {
      const std::string message = vt->last_error() ? vt->last_error() : "";
      if (status != LCA_ERR_INVALID_ARGUMENT && status != LCA_ERR_OUT_OF_MEMORY && status != LCA_ERR_UNSUPPORTED)
        return dirty("provider status " + std::to_string(status) + ": " + message);
      if (!one_line(message)) return dirty("provider refusal is not one line: '" + message + "'");
      return clean();
    }
    if (handle == nullptr) return dirty("provider returned LCA_OK and no mask");
    const lca_mask* mask = vt->get(handle);
    Verdict v = mask ? check_mask(*mask, seqlen) : dirty("provider returned no mask for its handle");
    vt->release(provider, handle);
    return v;
  }
};

Targets::Targets(const fs::path& plugin_dir, const fs::path& source_dir) : state_(std::make_unique<State>()) {
  std::string pattern = (fs::temp_directory_path() / "lca_fuzz_XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("fuzz: mkdtemp failed");
  state_->scratch = pattern;
  state_->plugin_dir = plugin_dir;
  std::ifstream schema(source_dir / "manifests" / "manifest.schema.json");
  state_->schema = nlohmann::json::parse(schema);
  state_->library = boost::dll::shared_library((plugin_dir / "liblca_builtin.so").string());
  auto entry = state_->library.get<const lca_plugin_descriptor*()>(LCA_PLUGIN_ENTRY_SYMBOL);
  state_->vt = entry()->mask_provider;
  state_->plugin_dir_text = plugin_dir.string();
  state_->data_dir_text = (plugin_dir / "data").string();
  const lca_host_info host{sizeof(lca_host_info), LCA_ABI_VERSION, state_->plugin_dir_text.c_str(),
                           state_->data_dir_text.c_str(), "{}", nullptr, nullptr};
  if (state_->vt->create(&host, &state_->provider) != LCA_OK)
    throw std::runtime_error(std::string("fuzz: builtin provider: ") + state_->vt->last_error());
}

Targets::~Targets() {
  if (state_->provider) state_->vt->destroy(state_->provider);
  std::error_code ec;
  fs::remove_all(state_->scratch, ec);
}

Verdict Targets::manifest(std::string_view text) {
  const fs::path file = state_->scratch / "fx_fuzz.json";
  write_file(file, text);
  try {
    const core::Manifest m = core::parse_manifest(file, state_->schema);
    (void)m.json.dump();  // `caps --format json` and the run record print it
  } catch (const core::ManifestError& e) {
    if (std::string(e.what()).find(file.filename().string()) == std::string::npos)
      return dirty("refusal does not name the file: " + std::string(e.what()));
  } catch (const std::exception& e) {
    return dirty(escaped(e));
  }
  return clean();
}

Verdict Targets::matrix_spec(std::string_view text) {
  const fs::path file = state_->scratch / "fuzz_spec.json";
  write_file(file, text);
  core::MatrixSpec spec;
  try {
    spec = core::load_matrix_spec(file.string(), state_->plugin_dir);
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    if (m.find(file.string()) == std::string::npos) return dirty("refusal does not name the file: " + m);
    if (!one_line(m)) return dirty("refusal is not one line: " + m);
    return clean();
  } catch (const std::exception& e) {
    return dirty(escaped(e));
  }
  // What was accepted must be in range: a wrapped number is accepted silently.
  for (const auto& [device, lengths] : spec.seqlens)
    for (int64_t n : lengths)
      if (n < 1 || n > lca::max_seqlen) return dirty("accepted seqlen " + std::to_string(n));
  for (const auto& h : spec.heads)
    if (h.heads_q < 1 || h.heads_kv < 1 || h.heads_q % h.heads_kv != 0) return dirty("accepted heads " + h.label());
  for (int d : spec.head_dims)
    if (d < 1) return dirty("accepted head_dim " + std::to_string(d));
  if (spec.warmup < 0 || spec.repeats < 1) return dirty("accepted warmup/repeats out of range");
  try {
    (void)core::matrix_record(spec).dump();
  } catch (const std::exception& e) {
    return dirty("matrix_record: " + escaped(e));
  }
  for (const auto& text_spec : spec.masks) {
    try {
      const auto m = core::MaskSpec::parse(text_spec);
      (void)m.label();
      (void)m.params.dump();
    } catch (const std::invalid_argument&) {
    } catch (const std::exception& e) {
      return dirty("MaskSpec::parse: " + escaped(e));
    }
  }
  return clean();
}

Verdict Targets::mask_spec(std::string_view text) {
  const int64_t seqlen = take_seqlen(text);
  core::MaskSpec spec;
  std::string params;
  try {
    spec = core::MaskSpec::parse(std::string(text));
    params = spec.params.dump();
    (void)spec.label();
  } catch (const std::invalid_argument& e) {
    // The refusal quotes the command line's text as given, line breaks included.
    return std::string(e.what()).empty() ? dirty("empty refusal") : clean();
  } catch (const std::exception& e) {
    return dirty("MaskSpec::parse: " + escaped(e));
  }
  return state_->generate(spec.pattern, params, seqlen);
}

Verdict Targets::mask_params(std::string_view text) {
  const int64_t seqlen = take_seqlen(text);
  const std::string pattern(take_line(text));
  return state_->generate(pattern, std::string(text), seqlen);
}

}  // namespace lca::fuzz
