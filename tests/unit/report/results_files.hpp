// Test support for the report tests: small results files written record by record, in the
// shape lcahost writes them (a run record, then one record a cell).
// Used by test_report.cpp only.
// Rule: numbers are chosen so that the expected ratios and best kernels are exact.
#pragma once

#include "fixture_folder.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace lca::test {

using nlohmann::json;

inline json run_record(int cp_world = 0) {
  json run = {{"type", "run"}, {"host", "testhost"}, {"os", "Linux test"}, {"cpu", "Test CPU"}, {"cpu_threads", 2},
              {"compiler", "gcc test"}, {"lca_version", "0.1.0"}, {"git_revision", "abc123"}, {"abi", "1.0"},
              {"started", "2026-11-23T00:00:00Z"},
              {"matrix", {{"name", "synthetic"}, {"warmup", 1}, {"repeats", 3}, {"seed", 42}, {"check", true}}}};
  run["plugins"] = json::array(
      {{{"name", "kA"}, {"kind", "kernel"}, {"version", "1.0"}, {"loaded", true},
        {"caps", {{"device", "cuda"}, {"dtypes", {"bf16"}}, {"head_dims", {128}}, {"gqa", true},
                  {"backward", true}, {"varlen", false}, {"masks", "any"}}}},
       {{"name", "kB"}, {"kind", "kernel"}, {"version", "2.0"}, {"loaded", true},
        {"caps", {{"device", "cuda"}, {"dtypes", {"bf16"}}, {"head_dims", {64, 128}}, {"gqa", true},
                  {"backward", true}, {"varlen", true}, {"masks", {"full"}}}}}});
  run["gpu"] = {{"name", "Test GPU 80GB"}, {"compute_capability", "9.0"}, {"sm_count", 132},
                {"total_mem_bytes", 85017493504LL}, {"driver_version", 13000}, {"cuda_runtime_version", 13000},
                {"cudnn_version", "9.14.0"},
                {"ceilings", {{"gemm_tflops", 781.0}, {"gemm", "bf16 GEMM"}, {"copy_gbps", 3019.0}, {"copy", "d2d"}}}};
  if (cp_world > 0)
    run["cp"] = {{"world_size", cp_world}, {"local_size", cp_world}, {"backend", "mpi"}, {"kernel", "cpu_reference"}};
  return run;
}

// A cell; status ok or FAIL gets timings (median ms, spread +-1%) and TFLOP/s from flops.
inline json cell(const std::string& kernel, const std::string& mask, int seqlen, const std::string& pass,
                 const std::string& status, double median_ms = 1.0, const std::string& reason = "") {
  const double flops = 1e12 * (pass == "bwd" ? 2.5 : 1.0) * (seqlen / 1024.0);
  json c = {{"type", "cell"}, {"kernel", kernel}, {"device", "cuda"}, {"mask", mask}, {"mask_label", mask},
            {"mask_params", json::object()}, {"seqlen", seqlen}, {"heads_q", 64}, {"heads_kv", 8},
            {"head_dim", 128}, {"dtype", "bf16"}, {"pass", pass}, {"status", status}, {"flops", flops}};
  if (!reason.empty()) c["reason"] = reason;
  if (status == "ok" || status == "FAIL") {
    c["time_ms"] = {{"median", median_ms}, {"min", median_ms * 0.99}, {"max", median_ms * 1.01},
                    {"all", {median_ms * 0.99, median_ms, median_ms * 1.01}}};
    c["tflops"] = flops / (median_ms * 1e-3) / 1e12;
    c["total_peak_bytes"] = static_cast<long long>(seqlen) << 20;
    c["attn_peak_bytes"] = static_cast<long long>(seqlen) << 18;
  }
  if (status == "FAIL")
    c["check"] = {{"ran", true}, {"passed", false}, {"tolerance", 0.015},
                  {"errors", {{"o", {{"rel_l2", 0.25}, {"max_abs", 3.0}, {"non_finite", 0}}}}}};
  return c;
}

inline void write_records(const fs::path& file, const std::vector<json>& records) {
  std::string text;
  for (const auto& r : records) text += r.dump() + "\n";
  write_text(file, text);
}

}  // namespace lca::test
