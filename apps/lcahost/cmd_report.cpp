// lcahost report / compare: hands its arguments to the report script (tools/report.py, copied to
// <build or prefix>/share/lca/ beside bin/), which draws with matplotlib.
#include "commands.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

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

// Runs argv; returns its exit status (128 + signal where a signal ended it), or -1 with `error`
// set where it could not start.
int run_program(const std::vector<std::string>& argv, bool quiet, std::string* error) {
  std::vector<std::string> args = argv;
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  int report[2];  // the child's errno where exec fails; closed unread where it succeeds
  if (pipe2(report, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    close(report[0]);
    if (quiet) {
      const int null = open("/dev/null", O_WRONLY);
      dup2(null, STDOUT_FILENO);
      dup2(null, STDERR_FILENO);
    }
    execvp(cargs[0], cargs.data());
    const int e = errno;
    (void)!write(report[1], &e, sizeof e);
    _exit(127);
  }
  close(report[1]);
  int exec_errno = 0;
  const bool exec_failed = read(report[0], &exec_errno, sizeof exec_errno) == sizeof exec_errno;
  close(report[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (exec_failed) {
    *error = std::strerror(exec_errno);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int cmd_script(const std::string& command, const std::vector<std::string>& args) {
  const char* chosen = std::getenv("LCA_PYTHON");
  const bool from_env = chosen && *chosen;
  const std::string python = interpreter();
  const std::string origin = from_env ? " (from LCA_PYTHON)" : "";
  const std::string fix = from_env ? "set LCA_PYTHON to a python3 that has matplotlib, or unset it to use /usr/bin/python3 "
                                     "(with python3-matplotlib, which tools/setup.sh installs)"
                                   : "install python3 and python3-matplotlib (tools/setup.sh does), or set LCA_PYTHON "
                                     "to a python3 that has matplotlib";
  const std::string script = report_script().string();
  std::vector<std::string> argv = {python, script, command};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string error;
  const int status = run_program(argv, false, &error);
  if (status < 0)
    throw std::runtime_error("cannot run " + python + origin + " (" + error + "): lcahost " + command +
                             " needs python3 with matplotlib; " + fix);
  if (status == 0) return 0;
  // The script prints its own messages; an interpreter that fails before it runs prints none,
  // so ask it for nothing at all and see whether it manages.
  if (run_program({python, "-c", "import sys; sys.exit(0 if sys.version_info >= (3, 8) else 1)"}, true, &error) != 0)
    spdlog::error("lcahost {}: the interpreter {}{} failed (exit status {}) and is not a working python3 (3.8 or "
                  "newer); {}",
                  command, python, origin, status, fix);
  return status;
}

}  // namespace lca::app
