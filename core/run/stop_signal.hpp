// A long matrix run stopped by SIGINT (Ctrl-C) or SIGTERM: the cell in flight finishes, its
// result is kept when it ran to the end, and the run stops there, so that --resume continues it.
// A second signal stops the process at once (the default action).
// Used by run_session when SessionOptions::stop_on_signal is set (lcahost's matrix runs; not its
// --isolate workers, whose parent decides, nor CP ranks, which mpirun stops together).
#pragma once

#include <csignal>

namespace lca::core {

// Installs the handlers for its lifetime and puts the previous ones back when it ends.
class StopOnSignal {
 public:
  StopOnSignal();
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

  // The signal that asked to stop (SIGINT or SIGTERM), or 0.
  static int requested();

 private:
  struct sigaction previous_int_{};
  struct sigaction previous_term_{};
};

// The signal's name for messages: "SIGINT", "SIGTERM", else "a signal".
const char* signal_name(int signal);

}  // namespace lca::core
