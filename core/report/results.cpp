// Results files and the terminal table; see results.hpp.
#include "core/report/results.hpp"

#include "core/plugin/text.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
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
bool ends_mid_line(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return false;
  char last = '\n';
  return pread(fd, &last, 1, st.st_size - 1) == 1 && last != '\n';
}

std::string errno_text(int e) { return std::strerror(e); }

// Who holds the flock on the open file `fd`: "lcahost (pid 123)", from /proc/locks; "" when unknown.
std::string lock_holder(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return "";
  std::ifstream locks("/proc/locks");
  std::string line;
  while (std::getline(locks, line)) {
    if (line.find("FLOCK") == std::string::npos || line.find("->") != std::string::npos) continue;
    std::istringstream in(line);
    std::string number, kind, advisory, access, pid, id;
    if (!(in >> number >> kind >> advisory >> access >> pid >> id)) continue;
    unsigned major_id = 0, minor_id = 0;
    unsigned long long inode = 0;
    if (std::sscanf(id.c_str(), "%x:%x:%llu", &major_id, &minor_id, &inode) != 3) continue;
    if (major_id != major(st.st_dev) || minor_id != minor(st.st_dev) || inode != st.st_ino) continue;
    std::string comm;
    std::ifstream(std::string("/proc/") + pid + "/comm") >> comm;
    std::string who = (comm.empty() ? "process" : comm) + " (pid " + pid + ")";
    if (pid == std::to_string(getpid())) who += ", this process";
    return who;
  }
  return "";
}

int open_locked(const std::filesystem::path& file, bool append) {
  const int flags = O_CREAT | O_CLOEXEC | (append ? O_APPEND : 0);
  int fd = ::open(file.c_str(), O_RDWR | flags, 0644);
  // Reading serves only to find a torn last line; a file or device that may only be written
  // (a pipe's /dev/stdout, a write-only file) is written without it.
  if (fd < 0 && (errno == EACCES || errno == EINVAL || errno == ENXIO)) fd = ::open(file.c_str(), O_WRONLY | flags, 0644);
  if (fd < 0) {
    const int e = errno;
    throw std::runtime_error("cannot open results file '" + file.string() + "': " + errno_text(e) +
                             (e == EISDIR ? "; --out takes a file name" : ""));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    const std::string holder = e == EWOULDBLOCK ? lock_holder(fd) : "";
    if (e == EWOULDBLOCK) {
      ::close(fd);
      throw std::runtime_error("results file '" + file.string() + "' is being written by " +
                               (holder.empty() ? std::string("another process") : holder) +
                               "; wait for that run to end or choose another --out");
    }
    // A file system without locks (some network mounts) or a pipe: the run goes on, unguarded.
    spdlog::warn("results file '{}' cannot be locked ({}); a second run writing it at the same time would not be "
                 "refused",
                 file.string(), errno_text(e));
  }
  return fd;
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

ResultsWriter::ResultsWriter(const std::filesystem::path& jsonl, const ResultsFileOptions& options)
    : jsonl_path_(jsonl) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(jsonl, ec))
    throw std::runtime_error("results file '" + jsonl.string() + "' is a folder; --out takes a file name");
  csv_path_ = jsonl;
  csv_path_.replace_extension(".csv");
  for (const auto& [input, what] : options.inputs) {
    for (const auto& mine : {jsonl, csv_path_}) {
      if (fs::equivalent(mine, input, ec))
        throw std::runtime_error("results file '" + mine.string() + "' is " + what + " '" + input.string() +
                                 "' of this run, which it would overwrite; choose another --out");
    }
  }
  if (jsonl.has_parent_path()) {
    fs::create_directories(jsonl.parent_path(), ec);
    if (ec)
      throw std::runtime_error("cannot create the folder of results file '" + jsonl.string() + "': " + ec.message());
  }
  jsonl_fd_ = open_locked(jsonl, options.append);
  struct stat st {};
  fstat(jsonl_fd_, &st);
  const bool regular = S_ISREG(st.st_mode);
  try {
    if (regular && st.st_size > 0) {
      if (options.append) {
        const auto state = inspect_results_file(jsonl);
        if (!state.has_run_record)
          throw std::runtime_error("'" + jsonl.string() + "' is not a results file of lcahost (no run record in it); "
                                   "--resume takes a .jsonl that --out wrote");
        if (state.last_line_torn)
          spdlog::warn("results file '{}': its last line ({}) was cut short by a crash while it was written; it is "
                       "set aside and its cell runs again",
                       jsonl.string(), state.lines);
        const size_t earlier = state.broken_lines.size() - (state.last_line_torn ? 1 : 0);
        if (earlier > 0)
          spdlog::warn("results file '{}': {} earlier line(s) are not JSON (from an earlier crash); they are set aside",
                       jsonl.string(), earlier);
      } else if (!options.force) {
        throw std::runtime_error("results file '" + jsonl.string() + "' already exists (" + std::to_string(st.st_size) +
                                 " bytes); continue that run with --resume " + jsonl.string() +
                                 ", overwrite it with --force, or choose another --out");
      }
    }
    if (regular && !options.append && ftruncate(jsonl_fd_, 0) != 0)
      throw std::runtime_error("cannot empty results file '" + jsonl.string() + "': " + errno_text(errno));
    if (ends_mid_line(jsonl_fd_)) write_line(jsonl_fd_, jsonl_path_, "\n");
    if (regular) {
      // The twin follows the .jsonl's lock: no one else writes it while we hold that one.
      csv_fd_ = ::open(csv_path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (options.append ? O_APPEND : O_TRUNC), 0644);
      if (csv_fd_ < 0) throw std::runtime_error("cannot open results file '" + csv_path_.string() + "': " + errno_text(errno));
      struct stat cst {};
      fstat(csv_fd_, &cst);
      if (ends_mid_line(csv_fd_)) write_line(csv_fd_, csv_path_, "\n");
      if (cst.st_size == 0) write_line(csv_fd_, csv_path_, kCsvHeader);
    }
  } catch (...) {
    if (csv_fd_ >= 0) ::close(csv_fd_);
    ::close(jsonl_fd_);
    throw;
  }
}

ResultsWriter::~ResultsWriter() {
  if (csv_fd_ >= 0) ::close(csv_fd_);
  if (jsonl_fd_ >= 0) ::close(jsonl_fd_);
}

void ResultsWriter::write_line(int fd, const std::filesystem::path& file, const std::string& line) {
  if (fd < 0) throw std::runtime_error("results file '" + file.string() + "' is closed");
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::runtime_error("cannot write results file '" + file.string() + "': " +
                               errno_text(n < 0 ? errno : EIO) + "; the lines written before are kept");
    done += static_cast<size_t>(n);
  }
}

void ResultsWriter::finish() {
  for (auto [fd, file] : {std::pair{&jsonl_fd_, &jsonl_path_}, std::pair{&csv_fd_, &csv_path_}}) {
    if (*fd < 0) continue;
    struct stat st {};
    const bool regular = fstat(*fd, &st) == 0 && S_ISREG(st.st_mode);
    const int synced = regular ? fsync(*fd) : 0;
    const int e = errno;
    const int closed = ::close(*fd);
    *fd = -1;
    if (synced != 0 || closed != 0)
      throw std::runtime_error("cannot write results file '" + file->string() + "': " +
                               errno_text(synced != 0 ? e : errno) + "; the lines written before are kept");
  }
}

void ResultsWriter::write_run(const nlohmann::json& run_info) {
  nlohmann::json j = run_info;
  j["type"] = "run";
  write_line(jsonl_fd_, jsonl_path_, dump_json(j) + "\n");
}

void ResultsWriter::write_summary(const nlohmann::json& summary) {
  nlohmann::json j = summary;
  j["type"] = "summary";
  write_line(jsonl_fd_, jsonl_path_, dump_json(j) + "\n");
}

void ResultsWriter::write_cell(const CellResult& r) {
  write_line(jsonl_fd_, jsonl_path_, dump_json(r.to_json()) + "\n");
  if (csv_fd_ < 0) return;
  const auto& c = r.cell;
  std::string reason = r.reason.empty() ? c.skip : r.reason;
  std::ostringstream row;
  row << csv_escape(valid_utf8(c.row())) << "," << c.device << "," << csv_escape(c.mask.label()) << "," << c.seqlen << ","
      << c.heads.heads_q << "," << c.heads.heads_kv << "," << c.head_dim << "," << c.dtype << ","
      << c.pass << "," << to_string(r.status) << "," << r.median_ms << "," << r.min_ms << "," << r.max_ms << ","
      << r.tflops << "," << r.area << "," << r.attn_peak_bytes << "," << r.total_peak_bytes << ","
      << max_rel_l2(r) << "," << csv_escape(valid_utf8(reason)) << "\n";
  write_line(csv_fd_, csv_path_, row.str());
}

ResultsFileState inspect_results_file(const std::filesystem::path& jsonl) {
  ResultsFileState state;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(jsonl, ec)) return state;
  state.exists = true;
  state.bytes = std::filesystem::file_size(jsonl, ec);
  std::ifstream in(jsonl, std::ios::binary);
  std::string line;
  bool last_complete = true;
  while (std::getline(in, line)) {
    ++state.lines;
    last_complete = !in.eof();
    if (line.empty()) continue;
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.is_object() && j.value("type", "") == "run") state.has_run_record = true;
    } catch (const std::exception&) {
      state.broken_lines.push_back(state.lines);
      if (!last_complete) state.last_line_torn = true;
    }
  }
  return state;
}

std::map<std::string, CellStatus> last_cell_status(const std::filesystem::path& jsonl) {
  std::map<std::string, CellStatus> last;
  for (const auto& r : read_cell_results(jsonl)) last[r.cell.key()] = r.status;
  return last;
}

std::set<std::string> completed_cell_keys(const std::map<std::string, CellStatus>& last, bool retry_errors) {
  std::set<std::string> keys;
  for (const auto& [key, status] : last)
    if (!(retry_errors && is_broken(status))) keys.insert(key);
  return keys;
}

std::set<std::string> completed_cell_keys(const std::filesystem::path& jsonl, bool retry_errors) {
  return completed_cell_keys(last_cell_status(jsonl), retry_errors);
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
    if (!j.is_object() || j.value("type", "") != "cell") continue;
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
  if (note.size() > 90) {
    if (is_failure(r.status)) {
      auto key = std::make_pair(std::string(to_string(r.status)), note);
      auto it = std::find_if(cut_reasons_.begin(), cut_reasons_.end(), [&](const auto& e) { return e.first == key; });
      if (it == cut_reasons_.end()) cut_reasons_.emplace_back(std::move(key), 1);
      else ++it->second;
    }
    note = note.substr(0, 89) + "~";
  }
  out_ << note << "\n" << std::flush;
}

void TablePrinter::summary(const std::map<std::string, int>& counts, double elapsed_s) {
  out_ << "# summary:";
  for (const auto& [status, n] : counts) out_ << " " << status << "=" << n;
  out_ << "  elapsed " << format_duration(elapsed_s) << "\n";
  const size_t shown = std::min(cut_reasons_.size(), kWholeReasons);
  for (size_t i = 0; i < shown; ++i) {
    const auto& [key, rows] = cut_reasons_[i];
    out_ << "# " << key.first << " (" << rows << (rows == 1 ? " cell" : " cells") << "): " << key.second << "\n";
  }
  if (cut_reasons_.size() > shown)
    out_ << "# ... and " << cut_reasons_.size() - shown << " more reasons, whole in the results' \"reason\" fields\n";
  out_ << std::flush;
}

}  // namespace lca::core
