// Results files and the terminal table; see results.hpp.
#include "core/report/results.hpp"

#include <cmath>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <stdexcept>

namespace lca::core {
namespace {

const char* kCsvHeader =
    "kernel,device,mask,seqlen,heads_q,heads_kv,head_dim,dtype,pass,status,median_ms,min_ms,"
    "max_ms,tflops,area,attn_peak_bytes,total_peak_bytes,max_rel_l2,reason\n";

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

double max_rel_l2(const CellResult& r) {
  double m = 0;
  for (const auto& [name, s] : r.check.errors)
    if (name != "lse") m = std::max(m, s.rel_l2);
  return m;
}

// True where the file has a last line without its '\n' (a crash cut it short): a record
// appended to it would join that fragment and be lost with it.
bool ends_mid_line(const std::filesystem::path& file) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(file, ec);
  if (ec || size == 0) return false;
  std::ifstream in(file, std::ios::binary);
  in.seekg(-1, std::ios::end);
  char last = '\n';
  return in.get(last) && last != '\n';
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--:--";
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

std::string format_bytes(size_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(bytes >= (size_t{1} << 30) ? 2 : 1);
  if (bytes >= (size_t{1} << 30)) os << bytes / double(size_t{1} << 30) << "G";
  else if (bytes >= (size_t{1} << 20)) os << bytes / double(size_t{1} << 20) << "M";
  else os << bytes / 1024.0 << "K";
  return os.str();
}

ResultsWriter::ResultsWriter(const std::filesystem::path& jsonl, bool append) : jsonl_path_(jsonl) {
  if (jsonl.has_parent_path()) std::filesystem::create_directories(jsonl.parent_path());
  auto csv_path = jsonl;
  csv_path.replace_extension(".csv");
  const bool csv_existed = std::filesystem::exists(csv_path);
  const bool jsonl_torn = append && ends_mid_line(jsonl);
  const bool csv_torn = append && ends_mid_line(csv_path);
  const auto mode = append ? std::ios::app : std::ios::trunc;
  jsonl_.open(jsonl, std::ios::out | mode);
  if (!jsonl_) throw std::runtime_error("cannot write results file '" + jsonl.string() + "'");
  if (jsonl_torn) jsonl_ << "\n" << std::flush;
  csv_.open(csv_path, std::ios::out | mode);
  if (!csv_) throw std::runtime_error("cannot write results file '" + csv_path.string() + "'");
  if (csv_torn) csv_ << "\n" << std::flush;
  if (!append || !csv_existed) csv_ << kCsvHeader << std::flush;
}

void ResultsWriter::write_run(const nlohmann::json& run_info) {
  nlohmann::json j = run_info;
  j["type"] = "run";
  jsonl_ << j.dump() << "\n" << std::flush;
}

void ResultsWriter::write_summary(const nlohmann::json& summary) {
  nlohmann::json j = summary;
  j["type"] = "summary";
  jsonl_ << j.dump() << "\n" << std::flush;
}

void ResultsWriter::write_cell(const CellResult& r) {
  jsonl_ << r.to_json().dump() << "\n" << std::flush;
  const auto& c = r.cell;
  std::string reason = r.reason.empty() ? c.skip : r.reason;
  csv_ << csv_escape(c.row()) << "," << c.device << "," << csv_escape(c.mask.label()) << "," << c.seqlen << ","
       << c.heads.heads_q << "," << c.heads.heads_kv << "," << c.head_dim << "," << c.dtype << ","
       << c.pass << "," << to_string(r.status) << "," << r.median_ms << "," << r.min_ms << "," << r.max_ms << ","
       << r.tflops << "," << r.area << "," << r.attn_peak_bytes << "," << r.total_peak_bytes << ","
       << max_rel_l2(r) << "," << csv_escape(reason) << "\n"
       << std::flush;
}

std::set<std::string> completed_cell_keys(const std::filesystem::path& jsonl) {
  std::set<std::string> keys;
  for (const auto& r : read_cell_results(jsonl)) keys.insert(r.cell.key());
  return keys;
}

std::vector<CellResult> read_cell_results(const std::filesystem::path& jsonl) {
  std::vector<CellResult> out;
  std::ifstream in(jsonl);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      // A line cut short by a crash: everything before it still counts.
      continue;
    }
    if (j.value("type", "") != "cell") continue;
    try {
      out.push_back(CellResult::from_json(j));
    } catch (const std::exception& e) {
      throw std::runtime_error(jsonl.string() + ":" + std::to_string(number) + ": not a cell record: " + e.what());
    }
  }
  return out;
}

void TablePrinter::header() {
  out_ << "#\n"
       << "# " << std::left << std::setw(9) << "cell" << std::setw(16) << "kernel" << std::setw(26) << "mask"
       << std::right << std::setw(8) << "seqlen" << std::setw(7) << "heads" << std::setw(5) << "dim"
       << std::setw(6) << "dtype" << std::setw(5) << "pass" << std::setw(8) << "status" << std::setw(11)
       << "median_ms" << std::setw(10) << "TFLOP/s" << std::setw(9) << "peak" << std::setw(10) << "rel_err"
       << "  " << std::left << std::setw(9) << "eta" << "note\n" << std::right << std::flush;
}

void TablePrinter::row(size_t index, size_t total, const CellResult& r, double, double eta_s) {
  const auto& c = r.cell;
  std::ostringstream pos;
  pos << index << "/" << total;
  std::string mask = c.mask.label();
  if (mask.size() > 25) mask = mask.substr(0, 24) + "~";
  std::string kernel = c.row().size() > 15 ? c.row().substr(0, 14) + "~" : c.row();
  out_ << "  " << std::left << std::setw(9) << pos.str() << std::setw(16) << kernel << std::setw(26) << mask
       << std::right << std::setw(8) << c.seqlen << std::setw(7) << c.heads.label() << std::setw(5)
       << c.head_dim << std::setw(6) << c.dtype << std::setw(5) << c.pass << std::setw(8) << to_string(r.status);
  const bool timed = is_timed(r.status);
  if (timed) {
    // CPU cells run at GFLOP/s: keep three significant digits instead of printing 0.00.
    std::ostringstream tf;
    if (r.tflops >= 1.0) tf << std::fixed << std::setprecision(1) << r.tflops;
    else tf << std::setprecision(3) << r.tflops;
    out_ << std::fixed << std::setprecision(3) << std::setw(11) << r.median_ms << std::setw(10) << tf.str()
         << std::setw(9) << format_bytes(r.total_peak_bytes);
    if (r.check.ran) out_ << std::scientific << std::setprecision(1) << std::setw(10) << max_rel_l2(r);
    else out_ << std::setw(10) << "-";
    out_ << std::defaultfloat;
  } else {
    out_ << std::setw(11) << "-" << std::setw(10) << "-" << std::setw(9) << "-" << std::setw(10) << "-";
  }
  out_ << "  " << std::left << std::setw(9) << format_duration(eta_s) << std::right;
  std::string note = r.reason.empty() ? c.skip : r.reason;
  if (note.size() > 90) note = note.substr(0, 89) + "~";
  out_ << note << "\n" << std::flush;
}

void TablePrinter::summary(const std::map<std::string, int>& counts, double elapsed_s) {
  out_ << "# summary:";
  for (const auto& [status, n] : counts) out_ << " " << status << "=" << n;
  out_ << "  elapsed " << format_duration(elapsed_s) << "\n" << std::flush;
}

}  // namespace lca::core
