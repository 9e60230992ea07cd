// Shared by the runner tests: the tiny matrix they run and readers for its results files.
// Rule: specs live outside the plugin folder (every *.json there is taken for a manifest).
#pragma once

#include "fixture_folder.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace lca::test {

// 2 kernels x 2 masks x 2 head configs x 2 passes = 16 cells; fx_good has no GQA, so its 4:2
// cells are X (no-gqa) and 12 run.
inline const char* kTinySpec = R"({
  "kernels": ["cpu_reference", "fx_good"], "masks": ["full", "causal"], "seqlens": [64],
  "heads": ["2:2", "4:2"], "head_dims": [16], "dtypes": ["f32"], "passes": ["fwd", "bwd"],
  "warmup": 1, "repeats": 2, "seed": 7})";

// The records of a JSON Lines file; unparseable lines are counted, not returned.
struct Records {
  std::vector<nlohmann::json> runs, cells, summaries;
  int unparseable = 0;
};

inline Records read_records(const fs::path& jsonl) {
  Records r;
  for (const auto& line : read_lines(jsonl)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      ++r.unparseable;
      continue;
    }
    const std::string type = j.value("type", "");
    (type == "run" ? r.runs : type == "cell" ? r.cells : r.summaries).push_back(j);
  }
  return r;
}

inline std::string cell_key(const nlohmann::json& c) {
  return c.at("kernel").get<std::string>() + "|" + c.at("mask_label").get<std::string>() + "|" +
         std::to_string(c.at("seqlen").get<int64_t>()) + "|" + std::to_string(c.at("heads_q").get<int>()) + ":" +
         std::to_string(c.at("heads_kv").get<int>()) + "|" + c.at("pass").get<std::string>();
}

}  // namespace lca::test
