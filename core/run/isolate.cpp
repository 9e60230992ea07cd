// Running a cell in a child process; see isolate.hpp.
#include "core/run/isolate.hpp"

#include "core/plugin/text.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace lca::core {

CellResult run_isolated(const std::vector<std::string>& argv_prefix, const Cell& cell, double timeout_s) {
  std::vector<std::string> args = argv_prefix;
  args.push_back("--cell");
  args.push_back(dump_json(cell.to_json()));
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int out_pipe[2];
  if (pipe(out_pipe) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    close(out_pipe[0]);
    close(out_pipe[1]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out_pipe[1]);

  std::string output;
  bool timed_out = false;
  char chunk[4096];
  for (;;) {
    int wait_ms = -1;
    if (timeout_s > 0) {
      const double left = timeout_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (left <= 0) {
        timed_out = true;
        break;
      }
      wait_ms = static_cast<int>(left * 1000) + 1;
    }
    pollfd pfd{out_pipe[0], POLLIN, 0};
    const int pr = poll(&pfd, 1, wait_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) continue;  // the deadline is checked at the top
    const ssize_t n = read(out_pipe[0], chunk, sizeof chunk);
    if (n <= 0) break;
    output.append(chunk, static_cast<size_t>(n));
  }
  close(out_pipe[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  CellResult r;
  r.cell = cell;
  r.seconds = seconds;
  if (timed_out) {
    r.status = CellStatus::timeout;
    char buf[96];
    std::snprintf(buf, sizeof buf, "no result within %g s; the cell's process was killed", timeout_s);
    r.reason = buf;
    return r;
  }
  const auto pos = output.rfind(kResultMarker);
  if (pos != std::string::npos) {
    const auto end = output.find('\n', pos);
    const auto text = output.substr(pos + std::strlen(kResultMarker),
                                    end == std::string::npos ? std::string::npos : end - pos - std::strlen(kResultMarker));
    try {
      CellResult parsed = CellResult::from_json(nlohmann::json::parse(text));
      parsed.cell = cell;
      parsed.seconds = seconds;
      return parsed;
    } catch (const std::exception&) {
      // fall through: a torn line is a crash
    }
  }
  r.status = CellStatus::crash;
  if (WIFSIGNALED(status)) {
    r.reason = std::string("the cell's process died of signal ") + std::to_string(WTERMSIG(status)) + " (" +
               strsignal(WTERMSIG(status)) + ")";
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    r.reason = "could not start the cell's process: " + args[0];
  } else {
    r.reason = "the cell's process exited with status " + std::to_string(WEXITSTATUS(status)) + " and no result";
  }
  return r;
}

}  // namespace lca::core
