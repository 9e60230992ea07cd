// lcahost report / compare: hands its arguments to the report script (tools/report.py, copied to
// <build or prefix>/share/lca/ beside bin/), which draws with matplotlib.
#include "commands.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace lca::app {
namespace fs = std::filesystem;

namespace {

fs::path report_script() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> tried;
  if (!ec) tried.push_back(exe.parent_path().parent_path() / "share" / "lca" / "report.py");
  tried.push_back(fs::path(LCA_SOURCE_DIR) / "tools" / "report.py");
  std::string where;
  for (const auto& p : tried) {
    if (fs::is_regular_file(p, ec)) return p;
    where += (where.empty() ? "" : ", ") + p.string();
  }
  throw std::runtime_error("the report script is missing (looked for " + where +
                           "); rebuild or reinstall lca, which copies tools/report.py to share/lca/");
}

// Debian's python3 first: python3-matplotlib is installed for it (tools/setup.sh), while a
// pyenv or venv python3 earlier on PATH usually lacks it. LCA_PYTHON overrides both.
std::string interpreter() {
  if (const char* chosen = std::getenv("LCA_PYTHON"); chosen && *chosen) return chosen;
  if (access("/usr/bin/python3", X_OK) == 0) return "/usr/bin/python3";
  return "python3";
}

}  // namespace

int cmd_script(const std::string& command, const std::vector<std::string>& args) {
  const std::string python = interpreter();
  const std::string script = report_script().string();
  std::vector<std::string> argv = {python, script, command};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargs;
  for (auto& a : argv) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  execvp(python.c_str(), cargs.data());
  throw std::runtime_error("cannot run " + python + " (" + std::strerror(errno) + "): lcahost " + command +
                           " needs python3 with matplotlib; install python3-matplotlib (tools/setup.sh does) "
                           "or set LCA_PYTHON to a python3 that has it");
}

}  // namespace lca::app
