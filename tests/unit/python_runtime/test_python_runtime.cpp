// The embedded interpreter keeps the host's signal handling: a Python library that installs
// Python's SIGINT handler (torch and Triton can) has it taken back when the call returns, and a
// KeyboardInterrupt inside a call reaches the host's handler as SIGINT once the call is left,
// so that lcahost stops its run between cells instead of recording an ERROR and going on.
#include "python_runtime.hpp"

#include <lca/error.hpp>

#include <gtest/gtest.h>

#include <csignal>
#include <string>

namespace {

using lca_torch::Gil;

volatile std::sig_atomic_t g_host_got = 0;
void host_handler(int signal) { g_host_got = signal; }

class PythonRuntime : public ::testing::Test {
 protected:
  void SetUp() override {
    lca_torch::start_python(LCA_TEST_PYTHON, LCA_TEST_BINARY_DIR);
    struct sigaction action {};
    action.sa_handler = &host_handler;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_int_);
    sigaction(SIGTERM, &action, &previous_term_);
    g_host_got = 0;
  }
  void TearDown() override {
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
  }
  // Runs `code` in a fresh namespace under a Gil; a Python exception becomes lca::Error.
  static void run(const std::string& code) {
    Gil gil;
    lca_torch::PyRef globals(PyDict_New());
    PyDict_SetItemString(globals.get(), "__builtins__", PyEval_GetBuiltins());
    lca_torch::PyRef result(lca_torch::checked(PyRun_String(code.c_str(), Py_file_input, globals.get(), globals.get()), "test code"));
  }
  static void (*current(int signal))(int) {
    struct sigaction now {};
    sigaction(signal, nullptr, &now);
    return now.sa_handler;
  }

  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
};

TEST_F(PythonRuntime, HandlersAPythonLibraryInstallsAreTakenBackWhenTheCallReturns) {
  void (*inside)(int) = nullptr;
  {
    Gil gil;
    ASSERT_EQ(PyRun_SimpleString("import signal\n"
                                 "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
                                 "signal.signal(signal.SIGTERM, lambda s, f: None)\n"),
              0);
    inside = current(SIGINT);
  }
  EXPECT_NE(inside, &host_handler) << "the Python code did install its own handler";
  EXPECT_EQ(current(SIGINT), &host_handler);
  EXPECT_EQ(current(SIGTERM), &host_handler);
  EXPECT_EQ(g_host_got, 0);
}

TEST_F(PythonRuntime, AKeyboardInterruptReachesTheHostAsSigint) {
  try {
    run("import os, signal, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "for _ in range(500): time.sleep(0.01)\n");
    FAIL() << "the interrupt did not end the call";
  } catch (const lca::Error& e) {
    EXPECT_NE(std::string(e.what()).find("KeyboardInterrupt"), std::string::npos) << e.what();
  }
  EXPECT_EQ(g_host_got, SIGINT);
  EXPECT_EQ(current(SIGINT), &host_handler);
}

TEST_F(PythonRuntime, NestedCallsHandTheInterruptOverOnceTheOutermostEnds) {
  {
    Gil outer;
    try {
      run("raise KeyboardInterrupt\n");
    } catch (const lca::Error&) {
    }
    EXPECT_EQ(g_host_got, 0) << "not while the outer call still holds the GIL";
  }
  EXPECT_EQ(g_host_got, SIGINT);
}

TEST_F(PythonRuntime, AOneShotHostHandlerThatFiredInACallStaysFired) {
  // lcahost's handler resets itself (SA_RESETHAND) so that a second Ctrl-C ends the process; a
  // call it fired in must not arm it again.
  struct sigaction one_shot {};
  one_shot.sa_handler = &host_handler;
  sigemptyset(&one_shot.sa_mask);
  one_shot.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &one_shot, nullptr);
  EXPECT_NO_THROW(run("import os, signal\nos.kill(os.getpid(), signal.SIGINT)\n"));
  EXPECT_EQ(g_host_got, SIGINT);
  EXPECT_EQ(current(SIGINT), SIG_DFL);
}

TEST_F(PythonRuntime, OtherExceptionsRaiseNoSignal) {
  EXPECT_THROW(run("raise ValueError('bad input')\n"), lca::Error);
  EXPECT_EQ(g_host_got, 0);
  EXPECT_NO_THROW(run("x = 1 + 1\n"));
  EXPECT_EQ(g_host_got, 0);
}

}  // namespace
