// The embedded interpreter; see python_runtime.hpp.
#include "python_runtime.hpp"

#include <ATen/dlpack.h>
#include <lca/error.hpp>

#include <dlfcn.h>

#include <mutex>

namespace lca_torch {
namespace {

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

void capsule_destructor(PyObject* capsule) {
  // Only a capsule torch never consumed still carries its name "dltensor".
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

struct OwnedTensor {
  DLManagedTensor managed{};
  int64_t shape[4]{};
  int64_t strides[4]{};
};

void delete_owned(DLManagedTensor* self) { delete static_cast<OwnedTensor*>(self->manager_ctx); }

}  // namespace

void start_python(const std::string& python, const std::string& module_dir) {
  static std::once_flag once;
  std::call_once(once, [&] { start_once(python, module_dir); });
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
  throw lca::Error(status, what + ": " + name + ": " + message);
}

PyObject* checked(PyObject* result, const std::string& what) {
  if (result == nullptr) throw_python_error(what);
  return result;
}

PyObject* dlpack_capsule(void* data, int32_t dtype, int32_t device, int32_t ndim, const int64_t* shape,
                         const int64_t* strides) {
  lca::require(ndim >= 1 && ndim <= 4, LCA_ERR_INTERNAL, "dlpack_capsule: 1 to 4 dimensions");
  auto* owned = new OwnedTensor;
  DLTensor& t = owned->managed.dl_tensor;
  t.data = data;
  t.device = DLDevice{kDLCUDA, device};
  t.ndim = ndim;
  switch (dtype) {
    case LCA_DTYPE_BF16: t.dtype = DLDataType{static_cast<uint8_t>(kDLBfloat), 16, 1}; break;
    case LCA_DTYPE_F16: t.dtype = DLDataType{static_cast<uint8_t>(kDLFloat), 16, 1}; break;
    default: t.dtype = DLDataType{static_cast<uint8_t>(kDLFloat), 32, 1}; break;
  }
  for (int32_t i = 0; i < ndim; ++i) {
    owned->shape[i] = shape[i];
    owned->strides[i] = strides[i];
  }
  t.shape = owned->shape;
  t.strides = owned->strides;
  t.byte_offset = 0;
  owned->managed.manager_ctx = owned;
  owned->managed.deleter = &delete_owned;
  PyObject* capsule = PyCapsule_New(&owned->managed, "dltensor", &capsule_destructor);
  if (capsule == nullptr) {
    delete owned;
    throw_python_error("making a DLPack capsule");
  }
  return capsule;
}

}  // namespace lca_torch
