// Stopping a matrix run between cells; see stop_signal.hpp.
#include "core/run/stop_signal.hpp"

#include <unistd.h>

#include <cstring>

namespace lca::core {
namespace {

volatile std::sig_atomic_t g_requested = 0;

void on_signal(int signal) {
  g_requested = signal;
  // SA_RESETHAND has put the default action back: a second signal ends the process.
  static const char message[] =
      "\nlcahost: stopping after the cell in flight (its result is kept if it finishes); signal again to stop now\n";
  const ssize_t ignored = write(STDERR_FILENO, message, sizeof message - 1);
  (void)ignored;
}

void install(int signal, struct sigaction* previous) {
  struct sigaction action {};
  action.sa_handler = &on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(signal, &action, previous);
}

}  // namespace

StopOnSignal::StopOnSignal() {
  g_requested = 0;
  install(SIGINT, &previous_int_);
  install(SIGTERM, &previous_term_);
}

StopOnSignal::~StopOnSignal() {
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
}

int StopOnSignal::requested() { return g_requested; }

const char* signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace lca::core
