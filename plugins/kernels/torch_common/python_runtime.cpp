// The embedded interpreter; see python_runtime.hpp.
#include "python_runtime.hpp"

#include <lca/error.hpp>

#include <dlfcn.h>

#include <mutex>

namespace lca_torch {
namespace {

// Gil scopes open on this thread, and a KeyboardInterrupt not yet handed to the host.
thread_local int gil_depth = 0;
thread_local bool interrupt_pending = false;

// Puts the host's action for `signal` back if a call into Python changed it. A one-shot handler
// of the host's (SA_RESETHAND) that has fired is left at the default action it reset itself to.
void keep_host_action(int signal, const struct sigaction& host) {
  struct sigaction now {};
  if (sigaction(signal, nullptr, &now) != 0) return;
  if (now.sa_handler == host.sa_handler && now.sa_flags == host.sa_flags) return;
  if (now.sa_handler == SIG_DFL && (host.sa_flags & SA_RESETHAND) != 0) return;
  sigaction(signal, &host, nullptr);
}

std::string utf8_of(PyObject* o) {
  if (o == nullptr) return "";
  PyRef text(PyObject_Str(o));
  if (!text) {
    PyErr_Clear();
    return "(unprintable)";
  }
  const char* s = PyUnicode_AsUTF8(text.get());
  if (s == nullptr) {
    PyErr_Clear();
    return "(unprintable)";
  }
  return s;
}

void run(const char* code, const std::string& what) {
  PyRef globals(PyDict_New());
  PyDict_SetItemString(globals.get(), "__builtins__", PyEval_GetBuiltins());
  PyRef result(PyRun_String(code, Py_file_input, globals.get(), globals.get()));
  if (!result) throw_python_error(what);
}

struct Started {
  std::string python;
  std::string error;  // non-empty: the interpreter could not be started
};

Started& started() {
  static Started s;
  return s;
}

void start_once(const std::string& python, const std::string& module_dir) {
  Started& s = started();
  s.python = python;
  // libpython came in as this plugin's dependency, in the plugin's local scope; torch's C
  // extension modules look Py* symbols up globally.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&Py_InitializeFromConfig), &info) == 0 || info.dli_fname == nullptr ||
      dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) == nullptr) {
    s.error = "could not make libpython's symbols global (dlopen RTLD_GLOBAL failed)";
    return;
  }
  // torch may call the DLPack deleters in this library whenever it frees a tensor.
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&start_once), &self) != 0 && self.dli_fname != nullptr)
    dlopen(self.dli_fname, RTLD_NOW | RTLD_NODELETE | RTLD_NOLOAD);

  if (!Py_IsInitialized()) {
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0;  // SIGINT stays the host's
    config.parse_argv = 0;
    // program_name decides sys.prefix: a venv's python finds its pyvenv.cfg and site-packages.
    PyStatus st = PyConfig_SetBytesString(&config, &config.program_name, python.c_str());
    if (!PyStatus_Exception(st)) st = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(st)) {
      s.error = std::string("Python did not start for ") + python + ": " + (st.err_msg ? st.err_msg : "unknown error");
      return;
    }
  } else {
    PyGILState_Ensure();  // someone else's interpreter: take the GIL like a fresh start holds it
  }
  try {
    PyRef path(PyUnicode_FromString(module_dir.c_str()));
    PyObject* sys_path = PySys_GetObject("path");  // borrowed
    if (sys_path == nullptr || !path || PyList_Insert(sys_path, 0, path.get()) != 0)
      throw_python_error("sys.path");
    run("import sys\nsys.stdout = sys.stderr\n", "redirecting stdout");
  } catch (const lca::Error& e) {
    s.error = e.what();
  }
  PyEval_SaveThread();  // from here on every caller takes the GIL through Gil
}

}  // namespace

Gil::Gil() {
  sigaction(SIGINT, nullptr, &host_int_);
  sigaction(SIGTERM, nullptr, &host_term_);
  state_ = PyGILState_Ensure();
  ++gil_depth;
}

Gil::~Gil() {
  --gil_depth;
  PyGILState_Release(state_);
  keep_host_action(SIGINT, host_int_);
  keep_host_action(SIGTERM, host_term_);
  if (gil_depth == 0 && interrupt_pending) {
    interrupt_pending = false;
    std::raise(SIGINT);  // the host's action: lcahost stops between cells; by default the process ends
  }
}

void start_python(const std::string& python, const std::string& module_dir) {
  static std::once_flag once;
  std::call_once(once, [&] {
    struct sigaction host_int {}, host_term {};
    sigaction(SIGINT, nullptr, &host_int);
    sigaction(SIGTERM, nullptr, &host_term);
    start_once(python, module_dir);
    sigaction(SIGINT, &host_int, nullptr);  // whatever starting Python did, the host's stay
    sigaction(SIGTERM, &host_term, nullptr);
  });
  const Started& s = started();
  lca::require(s.error.empty(), LCA_ERR_DEVICE, "embedded Python: " + s.error);
  lca::require(s.python == python, LCA_ERR_INVALID_ARGUMENT,
               "embedded Python: this process already runs Python from " + s.python + ", not " + python);
}

void throw_python_error(const std::string& what) {
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  PyRef t(type), v(value), tb(traceback);
  std::string name = "Exception";
  if (type != nullptr) {
    PyRef n(PyObject_GetAttrString(type, "__name__"));
    if (n) name = utf8_of(n.get());
    else PyErr_Clear();
  }
  std::string message = utf8_of(value);
  message = message.substr(0, message.find('\n'));
  lca_status status = LCA_ERR_DEVICE;
  if (name == "OutOfMemoryError") status = LCA_ERR_OUT_OF_MEMORY;
  if (name == "Unsupported") status = LCA_ERR_UNSUPPORTED;
  if (name == "KeyboardInterrupt") interrupt_pending = true;
  throw lca::Error(status, what + ": " + name + ": " + message);
}

PyObject* checked(PyObject* result, const std::string& what) {
  if (result == nullptr) throw_python_error(what);
  return result;
}


}  // namespace lca_torch
