#include "doclen.hpp"

#include "params.hpp"

#include <lca/checked.hpp>
#include <lca/error.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>

namespace lca::masks {

int64_t DocLengthDistribution::sample(Rng& rng) const {
  uint64_t r = rng.below(total_ticks);
  size_t bin = 0;
  while (bin + 1 < ticks.size() && r >= ticks[bin]) r -= ticks[bin++];
  const int64_t lo = std::max<int64_t>(bins[bin].first, 1);
  const int64_t hi = std::max<int64_t>(bins[bin].second, lo + 1);  // exclusive
  return rng.between(lo, hi - 1);
}

const std::vector<std::string>& known_distributions() {
  static const std::vector<std::string> names{"pile", "prolong64k", "prolong512k", "chatqa"};
  return names;
}

std::string resolve_distribution_name(const std::string& name, int64_t seqlen) {
  if (name != "auto") return name;
  if (seqlen <= 12 * 1024) return "pile";
  if (seqlen <= 64 * 1024) return "prolong64k";
  return "prolong512k";
}

namespace {

std::string allowed_names() {
  std::string s = "auto";
  for (const auto& n : known_distributions()) s += ", " + n;
  return s + ", uniform:LO-HI (1 <= LO <= HI <= " + std::to_string(max_seqlen) +
         "), or long:<any of these>";
}

// Weights become integers once, here; after that sampling never touches floating point. Weights
// whose sum is not a positive finite number give no ticks (the loader refuses that).
void set_ticks(DocLengthDistribution& d, const std::vector<double>& weights) {
  double total = 0;
  for (double w : weights) total += w;
  d.ticks.clear();
  d.total_ticks = 0;
  const bool usable = std::isfinite(total) && total > 0;
  for (double w : weights) {
    const auto t = usable ? static_cast<uint64_t>(std::llround(w / total * 1099511627776.0)) : 0;  // 2^40
    d.ticks.push_back(t);
    d.total_ticks += t;
  }
}

// "uniform:LO-HI" with decimal LO and HI, nothing else (no sign, no spaces). Returns false when
// malformed; refuses bounds out of range by name. HI is capped at max_seqlen: no document is
// longer than the sequence, and HI + 1 must not wrap.
bool parse_uniform(const std::string& name, const std::string& pattern, DocLengthDistribution* out) {
  const std::string prefix = "uniform:";
  if (name.rfind(prefix, 0) != 0) return false;
  const std::string body = name.substr(prefix.size());
  const auto dash = body.find('-');
  if (dash == std::string::npos) return false;
  const auto number = [](const char* first, const char* last, int64_t* v) {
    const auto [end, ec] = std::from_chars(first, last, *v);
    if (first == last || end != last || (ec != std::errc() && ec != std::errc::result_out_of_range)) return false;
    if (ec == std::errc::result_out_of_range) *v = std::numeric_limits<int64_t>::max();
    return true;
  };
  int64_t lo = 0, hi = 0;
  if (!number(body.data(), body.data() + dash, &lo) || !number(body.data() + dash + 1, body.data() + body.size(), &hi))
    return false;
  if (lo < 1 || hi < lo || hi > max_seqlen) {
    invalid_argument(pattern + ": parameter 'dist' = \"" + shown(name) + "\" is out of range; allowed: " +
                     "uniform:LO-HI with 1 <= LO <= HI <= " + std::to_string(max_seqlen) + " (document lengths in tokens)");
  }
  out->name = name;
  out->bins = {{lo, hi + 1}};
  set_ticks(*out, {1.0});
  return true;
}

DocLengthDistribution load_file(const std::filesystem::path& file, const std::string& name,
                                const std::string& pattern) {
  std::ifstream in(file);
  if (!in) {
    invalid_argument(pattern + ": distribution '" + name + "' has no data file " + file.string() +
                     " (is lca_host_info::data_dir right?)");
  }
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  const bool shaped = j.is_object() && j.contains("bins") && j.contains("weights") &&
                      j["bins"].is_array() && j["weights"].is_array() &&
                      j["bins"].size() == j["weights"].size() && !j["bins"].empty();
  if (!shaped) invalid_argument(pattern + ": " + file.string() + " is not a bins/weights histogram");
  DocLengthDistribution d;
  d.name = name;
  std::vector<double> weights;
  for (size_t i = 0; i < j["bins"].size(); ++i) {
    const auto& b = j["bins"][i];
    const auto& w = j["weights"][i];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() ||
        !b[1].is_number_integer() || !w.is_number() || w.get<double>() < 0 ||
        b[1].get<int64_t>() <= b[0].get<int64_t>() || b[0].get<int64_t>() < 0) {
      invalid_argument(pattern + ": " + file.string() + " bin " + std::to_string(i) +
                       " must be [lo, hi) with 0 <= lo < hi and a weight >= 0");
    }
    d.bins.emplace_back(b[0].get<int64_t>(), b[1].get<int64_t>());
    weights.push_back(w.get<double>());
  }
  set_ticks(d, weights);
  if (d.total_ticks == 0) invalid_argument(pattern + ": " + file.string() + " has no weight");
  return d;
}

}  // namespace

const DocLengthDistribution& DistributionLibrary::get(const std::string& name,
                                                      const std::string& pattern) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = cache_.find(name); it != cache_.end()) return it->second;
  DocLengthDistribution d;
  if (name.rfind("uniform:", 0) == 0) {
    if (!parse_uniform(name, pattern, &d)) {
      invalid_argument(pattern + ": parameter 'dist' = \"" + shown(name) + "\" is malformed; allowed: " +
                       allowed_names());
    }
  } else {
    const auto& known = known_distributions();
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      invalid_argument(pattern + ": parameter 'dist' = \"" + shown(name) +
                       "\" is not a known distribution; allowed: " + allowed_names());
    }
    d = load_file(dir_ / ("doclen_" + name + ".json"), name, pattern);
  }
  return cache_.emplace(name, std::move(d)).first->second;
}

std::vector<int64_t> pack_documents(const DocLengthDistribution& dist, int64_t seqlen, Rng& rng) {
  std::vector<int64_t> offsets{0};
  int64_t filled = 0;
  while (filled < seqlen) {
    filled += std::min(dist.sample(rng), seqlen - filled);
    offsets.push_back(filled);
  }
  return offsets;
}

int64_t long_share_short_tokens(int64_t seqlen) { return seqlen / 5 * 2 + seqlen % 5 * 2 / 5; }

std::vector<int64_t> pack_long_documents(const DocLengthDistribution& short_dist, int64_t seqlen, Rng& rng) {
  DocLengthDistribution long_dist;
  long_dist.name = "long documents";
  long_dist.bins = {{long_document_min, long_document_max}};
  set_ticks(long_dist, {1.0});
  const int64_t short_tokens = long_share_short_tokens(seqlen);
  std::vector<int64_t> lengths;
  const auto add_lengths = [&](const DocLengthDistribution& dist, int64_t tokens) {
    if (tokens <= 0) return;
    const auto offsets = pack_documents(dist, tokens, rng);
    for (size_t i = 1; i < offsets.size(); ++i) lengths.push_back(offsets[i] - offsets[i - 1]);
  };
  add_lengths(short_dist, short_tokens);
  add_lengths(long_dist, seqlen - short_tokens);
  // Fisher-Yates through Rng, so that the order is the seed's on every machine.
  for (size_t i = lengths.size(); i > 1; --i) std::swap(lengths[i - 1], lengths[rng.below(i)]);
  std::vector<int64_t> offsets{0};
  offsets.reserve(lengths.size() + 1);
  for (int64_t len : lengths) offsets.push_back(offsets.back() + len);
  return offsets;
}

}  // namespace lca::masks
