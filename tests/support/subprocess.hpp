// Test support: run a program (lcahost, mostly) as a user would, capturing stdout, stderr, the
// exit status and the wall time; a deadline kills it and everything it started.
// Used by the unit tests that drive the CLI (tests/unit/*).
// Rule: the child runs in its own process group without core dumps, so a test of a crashing
// plugin neither leaves processes behind nor writes core files.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace lca::test {

struct ProcessResult {
  int exit_code = -1;      // when the process exited
  int signal = 0;          // when a signal ended it
  bool timed_out = false;  // killed at the deadline
  std::string out, err;
  double seconds = 0;
};

inline ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s = 120) {
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) throw std::runtime_error("pipe failed");
  std::vector<std::string> args = argv;
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    close(out_pipe[0]);
    close(out_pipe[1]);
    close(err_pipe[0]);
    close(err_pipe[1]);
    execv(cargs[0], cargs.data());
    _exit(127);
  }
  setpgid(pid, pid);
  close(out_pipe[1]);
  close(err_pipe[1]);

  ProcessResult r;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  char buf[4096];
  while (open_fds > 0) {
    const double left = timeout_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (left <= 0) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    const int n = poll(fds, 2, static_cast<int>(left * 1000) + 1);
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

inline std::filesystem::path lcahost_path() { return std::filesystem::path(LCA_TEST_BINARY_DIR) / "bin" / "lcahost"; }

// lcahost --plugins DIR <args...>
inline ProcessResult run_lcahost(const std::filesystem::path& plugins, std::vector<std::string> args,
                                 double timeout_s = 120) {
  std::vector<std::string> argv = {lcahost_path().string(), "--plugins", plugins.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, timeout_s);
}

// For failure messages: what the program printed.
inline std::string describe(const ProcessResult& r) {
  return "exit " + std::to_string(r.exit_code) + " signal " + std::to_string(r.signal) +
         (r.timed_out ? " (timed out)" : "") + "\n--- stdout\n" + r.out + "\n--- stderr\n" + r.err;
}

}  // namespace lca::test
