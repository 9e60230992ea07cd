// The embedded CPython interpreter of the peers that run their kernel in Python: started once
// per process (all such peers in one process share it), references that release themselves,
// the GIL, Python errors as lca::Error, and DLPack capsules that hand lca's device buffers to
// torch without a copy. Used by torch_flex and every other Python-run peer plugin.
// Rule: every call into Python holds the GIL (a Gil in scope); nothing here finalises the
// interpreter (torch's extension modules do not survive Py_Finalize).
#pragma once

#include <Python.h>

#include <lca/abi.h>

#include <csignal>
#include <cstdint>
#include <string>
#include <utility>

namespace lca_torch {

// Starts the interpreter once per process (later calls check what the first one found):
//   python      the interpreter whose installation and site-packages to use (a venv's python
//               keeps its venv); sys.executable is set to it
//   module_dir  put first on sys.path (the peer's module lives there)
// Makes libpython's symbols global (torch's extension modules need them; lca loads plugins
// RTLD_LOCAL), keeps this plugin loaded for the life of the process (torch may free a DLPack
// tensor, calling back into this library, at any time), sends Python's stdout to stderr (the
// host's --isolate protocol owns stdout) and releases the GIL. Throws lca::Error.
void start_python(const std::string& python, const std::string& module_dir);

// Holds the GIL for its scope. SIGINT and SIGTERM stay the host's: a library that installs
// Python's handlers during the call (torch, Triton) has them taken back when the scope ends, and
// a KeyboardInterrupt that throw_python_error met is handed to the host as SIGINT then, so that
// lcahost stops its run between cells instead of recording an ERROR and going on.
class Gil {
 public:
  Gil();
  ~Gil();
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  PyGILState_STATE state_;
  struct sigaction host_int_{};
  struct sigaction host_term_{};
};

// An owned reference (destroy only with the GIL held).
class PyRef {
 public:
  PyRef() = default;
  explicit PyRef(PyObject* owned) : p_(owned) {}
  PyRef(PyRef&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  PyRef& operator=(PyRef&& o) noexcept {
    if (this != &o) {
      Py_XDECREF(p_);
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  ~PyRef() { Py_XDECREF(p_); }
  PyObject* get() const { return p_; }
  PyObject* release() { return std::exchange(p_, nullptr); }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  PyObject* p_ = nullptr;
};

// Throws the pending Python exception as lca::Error: torch's OutOfMemoryError becomes
// LCA_ERR_OUT_OF_MEMORY, an exception class named Unsupported LCA_ERR_UNSUPPORTED, anything else
// LCA_ERR_DEVICE; the message is "<what>: <ExceptionType>: <first line>". A KeyboardInterrupt
// also marks SIGINT for the host, raised when the outermost Gil ends.
[[noreturn]] void throw_python_error(const std::string& what);

// Returns `result` when not NULL, else throws the pending Python exception.
PyObject* checked(PyObject* result, const std::string& what);

// A DLPack capsule ("dltensor") over device memory that torch.from_dlpack turns into a tensor
// without a copy. dtype: lca_dtype. The capsule frees its own bookkeeping when torch is done.
PyObject* dlpack_capsule(void* data, int32_t dtype, int32_t device, int32_t ndim, const int64_t* shape,
                         const int64_t* strides);

}  // namespace lca_torch
